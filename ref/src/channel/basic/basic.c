/*
 * basic.c - the basic channel (spec/wire.md 4.2): one connection; each
 * non-empty tensor is one raw frame of exactly its length on it, in send
 * order; zero-length tensors produce no traffic. Device cpu:0 with the
 * device descriptor "any".
 *
 * The frame body is read straight into the receiver's buffer by the
 * transport, so nothing is copied here. This file must not know about
 * descriptors or pipes.
 */
#include <stdio.h>
#include <string.h>

#include "channel/basic/basic.h"
#include "channel/channel.h"
#include "platform/error.h"
#include "platform/options.h"
#include "platform/mutant.h"
#include "platform/platform.h"

typedef struct basic_channel {
	tw_channel base;
	tw_conn *conn;
	unsigned refs; /* 1 while open + one per operation not yet called back */
} basic_channel;

typedef struct basic_op {
	tw_deferred dfr;
	basic_channel *ch;
	tw_channel_cb cb;
	void *arg;
} basic_op;

static void basic_unref(basic_channel *ch)
{
	if (--ch->refs == 0)
		tw__free(ch);
}

static void basic_finish(basic_op *op, tw_status_t status, const char *detail)
{
	basic_channel *ch = op->ch;
	char buf[TW_DETAIL_MAX];
	if (status != TW_OK) {
		tw__detail(buf, sizeof(buf), "basic channel: %s", detail);
		detail = buf;
	}
	op->cb(&ch->base, status, detail, op->arg);
	tw__free(op);
	basic_unref(ch);
}

static void basic_on_write(tw_conn *conn, tw_status_t status, const char *detail, void *arg)
{
	basic_finish(arg, status, detail);
}

static void basic_on_read(tw_conn *conn, tw_status_t status, const char *detail, void *buf,
                          uint64_t len, void *arg)
{
	basic_finish(arg, status, detail);
}

static void basic_on_empty(void *arg)
{
	basic_finish(arg, TW_OK, "");
}

static tw_status_t basic_queue(tw_channel *base, const tw_buffer *buf, tw_channel_cb cb, void *arg,
                               bool is_send)
{
	basic_channel *ch = (basic_channel *)base;
	basic_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return TW_ERR_NOMEM;
	op->ch = ch;
	op->cb = cb;
	op->arg = arg;
	tw_status_t st;
	if (buf->len == 0 && !(is_send && TW_MUTANT("zero_length_tensor_framed"))) {
		ch->refs++;
		tw__loop_defer(ch->base.ctx->env->loop, &op->dfr, basic_on_empty, op);
		return TW_OK;
	}
	if (is_send) {
		tw_iov iov = { buf->ptr, buf->len };
		st = ch->conn->ops->write(ch->conn, &iov, 1, 0, basic_on_write, op);
	} else {
		st = ch->conn->ops->read_into(ch->conn, buf->ptr, buf->len, basic_on_read, op);
	}
	if (st != TW_OK) {
		tw__free(op);
		return st;
	}
	ch->refs++;
	return TW_OK;
}

static tw_status_t basic_send(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	return basic_queue(ch, buf, cb, arg, true);
}

static tw_status_t basic_recv(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	return basic_queue(ch, buf, cb, arg, false);
}

static void basic_close(tw_channel *base)
{
	basic_channel *ch = (basic_channel *)base;
	ch->conn->ops->close(ch->conn);
	ch->conn = NULL;
	basic_unref(ch);
}

/* One tensor is one frame on the connection (spec 4.2). */
static uint64_t basic_max_tensor(tw_channel *base)
{
	basic_channel *ch = (basic_channel *)base;
	tw_transport_limits lim;
	tw__transport_limits(ch->conn->transport, &lim);
	return lim.max_frame;
}

/* A frame's write completes as its connection's transport says. */
static bool basic_sends_land(tw_channel *base)
{
	basic_channel *ch = (basic_channel *)base;
	tw_transport_limits lim;
	if (!ch->conn)
		return false;
	tw__transport_limits(ch->conn->transport, &lim);
	return lim.writes_land;
}

static const tw_channel_instance_ops basic_instance_ops = {
	.send = basic_send,
	.recv = basic_recv,
	.close = basic_close,
	.max_tensor = basic_max_tensor,
	.sends_land = basic_sends_land,
};

static tw_status_t basic_open(tw_channel_ctx *c, tw_endpoint_t endpoint, tw_conn *const *conns,
                              size_t num_conns, unsigned flags, tw_channel **out, char *detail,
                              size_t detail_len)
{
	(void)flags;
	if (num_conns != 1) {
		for (size_t i = 0; i < num_conns; i++)
			conns[i]->ops->close(conns[i]);
		tw__detail(detail, detail_len, "basic channel: needs 1 connection, got %zu", num_conns);
		return TW_ERR_INVAL;
	}
	basic_channel *ch = tw__calloc(1, sizeof(*ch));
	if (!ch) {
		conns[0]->ops->close(conns[0]);
		tw__detail(detail, detail_len, "basic channel: out of memory");
		return TW_ERR_NOMEM;
	}
	ch->base.ops = &basic_instance_ops;
	ch->base.ctx = c;
	ch->conn = conns[0];
	ch->refs = 1;
	*out = &ch->base;
	return TW_OK;
}

static size_t basic_num_connections(tw_channel_ctx *c)
{
	return 1;
}

static tw_status_t basic_create(const tw_channel_env *env, const char *options,
                                tw_channel_ctx **out, char *detail, size_t detail_len)
{
	tw_status_t st = tw__options_parse("basic channel", options, NULL, 0, NULL, NULL, 0, detail,
	                                   detail_len);
	if (st != TW_OK)
		return st;
	return tw__channel_cpu_ctx_new(&tw__basic_channel_ops, env, "any", out, detail, detail_len);
}

const tw_channel_ops tw__basic_channel_ops = {
	.kind = "basic",
	.create = basic_create,
	.can_communicate = NULL,
	.num_connections = basic_num_connections,
	.open = basic_open,
	.shutdown = NULL,
	.destroy = tw__channel_cpu_ctx_free,
};
