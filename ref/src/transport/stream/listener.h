/*
 * listener.h - a tw_tlistener made of a stream acceptor (acceptor.h): what
 * the transports whose connections start as stream sockets (tcp, shm, and
 * ibv's set-up next) share about listeners. The transport opens the
 * acceptor into `acc`, fills `address` and turns each accepted descriptor
 * into a connection; address() and close() are these.
 */
#ifndef TW_TRANSPORT_STREAM_LISTENER_H
#define TW_TRANSPORT_STREAM_LISTENER_H

#include "transport/stream/acceptor.h"
#include "transport/transport.h"

#define TW_STREAM_ADDR_MAX 128

typedef struct tw_stream_listener {
	tw_tlistener base;
	tw_acceptor *acc;
	tw_tlistener_accept_cb cb;
	void *arg;
	tw_conn_opts opts;
	char address[TW_STREAM_ADDR_MAX];
} tw_stream_listener;

/* A new listener of transport t with no acceptor yet; NULL and a detail
 * naming `who` when out of memory. */
tw_stream_listener *tw__stream_listener_new(tw_transport *t, const char *who,
                                            const tw_conn_opts *opts, tw_tlistener_accept_cb cb,
                                            void *arg, char *detail, size_t detail_len);
/* Closes the acceptor (if open) and frees the listener. */
void tw__stream_listener_free(tw_stream_listener *l);

#endif /* TW_TRANSPORT_STREAM_LISTENER_H */
