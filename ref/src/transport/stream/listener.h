/*
 * listener.h - a tw_tlistener made of a stream acceptor (acceptor.h): what
 * the transports whose connections start as stream sockets (tcp, shm, and
 * ibv's set-up) share about listeners. The transport opens the acceptor
 * into `acc` with tw__stream_listener_on_accept and fills `address`; its
 * `make` turns each accepted descriptor into a connection; address() and
 * close() are these.
 */
#ifndef TW_TRANSPORT_STREAM_LISTENER_H
#define TW_TRANSPORT_STREAM_LISTENER_H

#include "transport/stream/acceptor.h"
#include "transport/transport.h"

#define TW_STREAM_ADDR_MAX 128

typedef struct tw_stream_listener tw_stream_listener;

/* Turns a socket the listener accepted (fd, from peer) into the
 * transport's connection: TW_OK and *out, or an error and a detail (the
 * transport closed fd). */
typedef tw_status_t (*tw_stream_conn_maker)(tw_stream_listener *l, int fd,
                                            const struct sockaddr *peer, tw_conn **out,
                                            char *detail, size_t detail_len);

struct tw_stream_listener {
	tw_tlistener base;
	tw_acceptor *acc;
	tw_stream_conn_maker make;
	tw_tlistener_accept_cb cb;
	void *arg;
	tw_conn_opts opts;
	char address[TW_STREAM_ADDR_MAX];
};

/* A new listener of transport t with no acceptor yet, whose accepted
 * sockets become connections through make; NULL and a detail naming `who`
 * when out of memory. */
tw_stream_listener *tw__stream_listener_new(tw_transport *t, const char *who,
                                            const tw_conn_opts *opts, tw_stream_conn_maker make,
                                            tw_tlistener_accept_cb cb, void *arg, char *detail,
                                            size_t detail_len);
/* The acceptor callback (acceptor.h) of every stream listener (arg: the
 * listener): a failure that did not stop the acceptor goes to the owner as
 * it is; an accepted socket goes through make, then to the owner. */
void tw__stream_listener_on_accept(tw_acceptor *acc, tw_status_t status, const char *detail,
                                   int fd, const struct sockaddr *peer, void *arg);
/* Closes the acceptor (if open) and frees the listener. */
void tw__stream_listener_free(tw_stream_listener *l);

#endif /* TW_TRANSPORT_STREAM_LISTENER_H */
