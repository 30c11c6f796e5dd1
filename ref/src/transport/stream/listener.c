/*
 * listener.c - a transport listener over a stream acceptor (listener.h).
 */
#include "transport/stream/listener.h"

#include "platform/error.h"
#include "platform/platform.h"

static const char *tw__stream_listener_address(tw_tlistener *base)
{
	return ((tw_stream_listener *)base)->address;
}

static void tw__stream_listener_close(tw_tlistener *base)
{
	tw__stream_listener_free((tw_stream_listener *)base);
}

static const tw_tlistener_ops tw__stream_listener_ops = {
	.address = tw__stream_listener_address,
	.close = tw__stream_listener_close,
};

tw_stream_listener *tw__stream_listener_new(tw_transport *t, const char *who,
                                            const tw_conn_opts *opts, tw_stream_conn_maker make,
                                            tw_tlistener_accept_cb cb, void *arg, char *detail,
                                            size_t detail_len)
{
	tw_stream_listener *l = tw__calloc(1, sizeof(*l));
	if (!l) {
		tw__detail(detail, detail_len, "%s: listener: out of memory", who);
		return NULL;
	}
	l->base.ops = &tw__stream_listener_ops;
	l->base.transport = t;
	l->make = make;
	l->cb = cb;
	l->arg = arg;
	l->opts = *opts;
	return l;
}

void tw__stream_listener_on_accept(tw_acceptor *acc, tw_status_t status, const char *detail,
                                   int fd, const struct sockaddr *peer, void *arg)
{
	tw_stream_listener *l = arg;
	(void)acc;
	if (status != TW_OK) {
		l->cb(&l->base, status, detail, NULL, l->arg);
		return;
	}
	tw_conn *conn = NULL;
	char d[TW_DETAIL_MAX];
	status = l->make(l, fd, peer, &conn, d, sizeof(d));
	if (status != TW_OK)
		l->cb(&l->base, status, d, NULL, l->arg);
	else
		l->cb(&l->base, TW_OK, "", conn, l->arg);
}

void tw__stream_listener_free(tw_stream_listener *l)
{
	if (l->acc)
		tw__acceptor_close(l->acc);
	tw__free(l);
}
