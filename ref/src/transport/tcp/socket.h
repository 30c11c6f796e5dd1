/*
 * socket.h - what the transports whose connections are (or start as) TCP
 * sockets share: tcp ("uv") and ibv's set-up connection (spec/wire.md 2.2,
 * 2.4). The socket options that bound a connection, and a listener on a TCP
 * address that advertises a concrete address of this host when bound to a
 * wildcard (the rules of tw_context_set_socket_ifname).
 */
#ifndef TW_TRANSPORT_TCP_SOCKET_H
#define TW_TRANSPORT_TCP_SOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/stream/acceptor.h"
#include "transport/stream/listener.h"
#include "transport/transport.h"

/* TCP_NODELAY, best effort as in stock: a failure only costs latency. */
void tw__tcp_set_nodelay(int fd);
/* TCP_USER_TIMEOUT of ms (0: the kernel's default), best effort. */
void tw__tcp_set_user_timeout(int fd, uint64_t ms);
/* The liveness bound of tw_conn_opts: TCP_USER_TIMEOUT plus keepalive
 * probes from a third of it on; 0 clears both. Best effort: a kernel
 * without these options still works, only without the bound. */
void tw__tcp_set_liveness(int fd, uint64_t ms);

/* TW_OK if `address` is a TCP address this transport can connect to (a
 * port is needed) or listen on; TW_ERR_INVAL with a detail naming who. */
TW_NODISCARD tw_status_t tw__tcp_check_address(const char *who, const char *address,
                                               bool for_listen, char *detail, size_t detail_len);
/* The address a client uses for its other connections given the one the
 * server advertised and its bootstrap socket boot_fd (-1: none): a
 * link-local address gets the client's own scope, a server's scope that
 * means nothing here is dropped. */
void tw__tcp_answer_address(int boot_fd, const char *advertised, char *out, size_t out_len);
/* Starts a non-blocking connect to `address` (TCP_NODELAY, and
 * TCP_USER_TIMEOUT bounding the SYNs by opts->connect_timeout_ms). Returns
 * the socket with *err_out 0 (connected), EINPROGRESS or the connect's
 * errno (the caller reports it through its operations); or -1 with a
 * detail and *err_out EINVAL (bad address) or socket()'s errno. peer gets
 * the address as formatted for details. */
int tw__tcp_connect_start(const char *who, const char *address, const tw_conn_opts *opts,
                          char *peer, size_t peer_len, int *err_out, char *detail,
                          size_t detail_len);
/* How a non-blocking connect on fd went, once the socket is writable: 0
 * connected, EINPROGRESS still going (EALREADY reads the same), or the
 * connect's errno. */
int tw__tcp_connect_result(int fd);

/* Listens on `address` ("A.B.C.D:port", "[v6]:port") for transport `who`
 * ("tcp transport"): a tw_stream_listener (stream/listener.h) whose make
 * turns each accepted socket into a connection; cb and arg are the
 * listener's owner's. A wildcard address advertises one concrete address
 * of this host (opts->ifname, family). */
TW_NODISCARD tw_status_t tw__tcp_listen(tw_transport *t, const char *who, const char *address,
                                        const tw_conn_opts *opts, tw_stream_conn_maker make,
                                        tw_tlistener_accept_cb cb, void *arg,
                                        tw_tlistener **out, char *detail, size_t detail_len);

#endif /* TW_TRANSPORT_TCP_SOCKET_H */
