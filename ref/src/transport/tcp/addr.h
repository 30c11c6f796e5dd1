/*
 * addr.h - TCP addresses in the syntax stock TensorPipe's uv transport uses
 * (spec/wire.md 2.2): "A.B.C.D:port", "[v6]:port", "[v6%ifname]:port"; a
 * missing port means 0. Numeric only: no name resolution happens here, so
 * parsing never blocks.
 */
#ifndef TW_TRANSPORT_TCP_ADDR_H
#define TW_TRANSPORT_TCP_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tensorwire/tensorwire.h"

#define TW_TCP_ADDR_MAX 80

/* TW_OK or TW_ERR_INVAL with a detail naming what is wrong. */
TW_NODISCARD tw_status_t tw__tcp_addr_parse(const char *s, struct sockaddr_storage *ss,
                                            socklen_t *len_out, char *detail,
                                            size_t detail_len);
/* The port of an AF_INET or AF_INET6 address, in host order; and setting it. */
uint16_t tw__tcp_addr_port(const struct sockaddr_storage *ss);
void tw__tcp_addr_set_port(struct sockaddr_storage *ss, uint16_t port);
/* Whether an AF_INET or AF_INET6 address is the wildcard (0.0.0.0, ::). */
bool tw__tcp_addr_is_wildcard(const struct sockaddr_storage *ss);
/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d) becomes the AF_INET one, in
 * place, port kept; false for a family that is neither. */
bool tw__tcp_addr_unmap_v4(struct sockaddr_storage *ss);
/* Formats a sockaddr as "A.B.C.D:port", "[v6]:port" or "[v6%ifname]:port"
 * (the scope by interface name when it has one; buf >= TW_TCP_ADDR_MAX). */
void tw__tcp_addr_format(const struct sockaddr *sa, char *buf, size_t buflen);

#endif /* TW_TRANSPORT_TCP_ADDR_H */
