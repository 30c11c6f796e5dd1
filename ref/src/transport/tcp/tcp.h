/*
 * tcp.h - the TCP transport's vtable (stock TensorPipe's "uv", spec 2.2).
 * Everything else about it is private to tcp.c.
 */
#ifndef TW_TRANSPORT_TCP_TCP_H
#define TW_TRANSPORT_TCP_TCP_H

#include "transport/transport.h"

extern const tw_transport_ops tw__tcp_transport_ops;

#endif /* TW_TRANSPORT_TCP_TCP_H */
