/*
 * ibv.h - the RDMA verbs transport ("ibv", spec/wire.md 2.4).
 */
#ifndef TW_TRANSPORT_IBV_IBV_H
#define TW_TRANSPORT_IBV_IBV_H

#include "transport/transport.h"

extern const tw_transport_ops tw__ibv_transport_ops;

#endif /* TW_TRANSPORT_IBV_IBV_H */
