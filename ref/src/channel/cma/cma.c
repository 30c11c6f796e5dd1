/*
 * cma.c - the cma channel (spec/wire.md 4.4): two connections of the
 * pipe's transport; per non-empty tensor the sender writes a cma Descriptor
 * {pid, ptr} on connection 0 and waits for a zero-length completion frame
 * on connection 1; the receiver copies the bytes out of the sender's memory
 * with process_vm_readv and then writes the completion. Device cpu:0 with
 * the descriptor stock builds (platform/identity.c), so stock peers on the
 * same host select it.
 *
 * Viability (as stock decides it, and said when refused): ids that differ,
 * a process that is not dumpable, YAMA ptrace scope 2 or 3, or a
 * process_vm_readv on itself that fails; YAMA scope 1 is met the way stock
 * meets it, by letting any process trace this one (PR_SET_PTRACER_ANY).
 *
 * Copies run on the loop thread, one received tensor at a time in receive
 * order (so completions go out in that order, 4.4.b), at most
 * CMA_COPY_BUDGET bytes per pass of the loop, so a 4 GiB tensor neither
 * blocks the other pipes nor needs more than the kernel's per-call limit
 * (0x7ffff000); a partial copy is resumed where it stopped. A copy that
 * fails fails that receive with the call and errno named and the channel
 * with it (4.4.c); the core then closes the pipe.
 *
 * xth (spec 4.5) is the same flow inside one process: its Descriptor is
 * {ptr} alone and the receiver copies with memcpy, in the same bounded
 * steps. Its device descriptor names the process (identity.c), so two
 * processes never select it. Details name whichever of the two it is.
 *
 * This file must not know about descriptors of messages or pipes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "channel/cma/cma.h"
#include "channel/channel.h"
#include "platform/error.h"
#include "platform/identity.h"
#include "platform/list.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "wire/packets.h"

#define CMA_COPY_BUDGET ((uint64_t)8 << 20)
#define CMA_DESC_MAX 64

typedef struct cma_channel {
	tw_channel base;
	bool xth;           /* the same-process flavour (spec 4.5) */
	tw_conn *conn[2];   /* 0: descriptors, 1: completions */
	unsigned refs;      /* 1 while open + one per operation not yet called back */
	tw_list copies;     /* cma_op receives with a descriptor, in receive order */
	bool copying;       /* a copy step is deferred */
	tw_deferred copy_dfr;
	bool closed;
	tw_status_t failed; /* TW_OK, or the error that failed the channel */
	char failed_detail[TW_DETAIL_MAX];
} cma_channel;

typedef struct cma_op {
	tw_deferred dfr;
	tw_list link;
	cma_channel *ch;
	tw_channel_cb cb;
	void *arg;
	int pending;        /* transport operations not yet called back */
	tw_status_t status; /* the first error */
	char detail[TW_DETAIL_MAX];
	/* send */
	uint8_t desc[CMA_DESC_MAX];
	size_t desc_len;
	/* receive */
	uint8_t *buf;
	uint64_t len, done;
	uint32_t pid;
	uint64_t ptr;
} cma_op;

static void cma_unref(cma_channel *ch)
{
	if (--ch->refs == 0)
		tw__free(ch);
}

static void cma_fail_op(cma_op *op, tw_status_t st, const char *detail)
{
	if (op->status == TW_OK) {
		op->status = st;
		snprintf(op->detail, sizeof(op->detail), "%s", detail);
	}
}

/* Calls back once every transport operation of op has. */
static void cma_settle(cma_op *op)
{
	if (--op->pending > 0)
		return;
	cma_channel *ch = op->ch;
	char buf[TW_DETAIL_MAX];
	const char *detail = "";
	if (op->status != TW_OK) {
		tw__detail(buf, sizeof(buf), "%s channel: %s", ch->xth ? "xth" : "cma", op->detail);
		detail = buf;
	}
	op->cb(&ch->base, op->status, detail, op->arg);
	tw__free(op);
	cma_unref(ch);
}

static void cma_on_settle(void *arg)
{
	cma_settle(arg);
}

/* ---- sending ---------------------------------------------------------------------- */

static void cma_on_desc_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	(void)c;
	if (st != TW_OK)
		cma_fail_op(arg, st, detail);
	cma_settle(arg);
}

static void cma_on_completion(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                              uint64_t len, void *arg)
{
	(void)c;
	(void)buf;
	(void)len;
	if (st != TW_OK)
		cma_fail_op(arg, st, detail);
	cma_settle(arg);
}

/* A new operation holding a reference on ch; NULL when out of memory. A
 * zero-length one is settled in a later pass with no traffic (spec 4.1):
 * *empty_out says so. */
static cma_op *cma_op_new(cma_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg,
                          bool *empty_out)
{
	cma_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	op->ch = ch;
	op->cb = cb;
	op->arg = arg;
	ch->refs++;
	op->pending = 1;
	*empty_out = buf->len == 0;
	if (*empty_out)
		tw__loop_defer(ch->base.ctx->env->loop, &op->dfr, cma_on_settle, op);
	return op;
}

static tw_status_t cma_send(tw_channel *base, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	cma_channel *ch = (cma_channel *)base;
	bool empty;
	cma_op *op = cma_op_new(ch, buf, cb, arg, &empty);
	if (!op)
		return TW_ERR_NOMEM;
	if (empty)
		return TW_OK;
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	if (ch->xth) {
		tw_wire_xth_descriptor d = { (uint64_t)(uintptr_t)buf->ptr };
		tw__wire_encode_xth_descriptor(&w, &d);
	} else {
		tw_wire_cma_descriptor d = { (uint32_t)getpid(), (uint64_t)(uintptr_t)buf->ptr };
		tw__wire_encode_cma_descriptor(&w, &d);
	}
	if (tw__nop_writer_finish(&w) != TW_OK || w.len > sizeof(op->desc)) {
		tw__nop_writer_free(&w);
		ch->refs--;
		tw__free(op);
		return TW_ERR_NOMEM;
	}
	memcpy(op->desc, w.buf, w.len);
	op->desc_len = w.len;
	tw__nop_writer_free(&w);
	/* The descriptor on 0, and the read of its completion on 1: the peer
	 * answers in receive order, so completions match sends in order. */
	tw_iov iov = { op->desc, op->desc_len };
	if (ch->conn[0]->ops->write(ch->conn[0], &iov, 1, TW_WRITE_OBJECT, cma_on_desc_written, op) !=
	    TW_OK) {
		ch->refs--;
		tw__free(op);
		return TW_ERR_NOMEM;
	}
	if (ch->conn[1]->ops->read_into(ch->conn[1], NULL, 0, cma_on_completion, op) != TW_OK)
		cma_fail_op(op, TW_ERR_NOMEM, "out of memory queueing the completion read");
	else
		op->pending++;
	return TW_OK;
}

/* ---- receiving --------------------------------------------------------------------- */

static void cma_copy_step(void *arg);

static void cma_schedule(cma_channel *ch)
{
	if (!ch->copying && !tw__list_empty(&ch->copies)) {
		ch->copying = true;
		ch->refs++;
		tw__loop_defer(ch->base.ctx->env->loop, &ch->copy_dfr, cma_copy_step, ch);
	}
}

static void cma_on_completion_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	(void)c;
	if (st != TW_OK)
		cma_fail_op(arg, st, detail);
	cma_settle(arg);
}

/* Copies the next piece of the oldest receive; when it is whole, writes
 * its completion and goes on with the next. */
static void cma_copy_step(void *arg)
{
	cma_channel *ch = arg;
	ch->copying = false;
	if (ch->closed || tw__list_empty(&ch->copies)) {
		cma_unref(ch);
		return;
	}
	cma_op *op = TW_CONTAINER_OF(ch->copies.next, cma_op, link);
	if (ch->failed != TW_OK) {
		tw__list_remove(&op->link);
		cma_fail_op(op, ch->failed, ch->failed_detail);
		cma_settle(op);
		cma_schedule(ch);
		cma_unref(ch);
		return;
	}
	uint64_t n = op->len - op->done;
	if (n > CMA_COPY_BUDGET)
		n = CMA_COPY_BUDGET;
	if (n > TW_RW_MAX)
		n = TW_RW_MAX;
	struct iovec l = { op->buf + op->done, (size_t)n };
	struct iovec r = { (void *)(uintptr_t)(op->ptr + op->done), (size_t)n };
	ssize_t got;
	if (ch->xth) { /* the sender is this process: its buffer is ours to read */
		memcpy(l.iov_base, r.iov_base, l.iov_len);
		got = (ssize_t)n;
	} else {
		got = tw__sys_process_vm_readv((pid_t)op->pid, &l, 1, &r, 1);
	}
	if (got < 0 && errno == EINTR)
		got = 0; /* the next pass tries again */
	else if (got <= 0) {
		char eb[128];
		tw__detail(ch->failed_detail, sizeof(ch->failed_detail),
		           "process_vm_readv of %llu bytes at 0x%llx from pid %u (byte %llu of %llu): %s",
		           (unsigned long long)n, (unsigned long long)(op->ptr + op->done),
		           (unsigned)op->pid, (unsigned long long)op->done, (unsigned long long)op->len,
		           got < 0 ? tw__strerror(errno, eb, sizeof(eb)) : "copied nothing");
		ch->failed = got < 0 && (errno == EPERM || errno == ESRCH) ? TW_ERR_UNSUPPORTED
		                                                          : TW_ERR_SYS;
		tw__list_remove(&op->link);
		cma_fail_op(op, ch->failed, ch->failed_detail);
		cma_settle(op);
		cma_schedule(ch);
		cma_unref(ch);
		return;
	}
	op->done += (uint64_t)got;
	if (op->done == op->len) {
		tw__list_remove(&op->link);
		tw_iov none = { NULL, 0 };
		if (ch->conn[1]->ops->write(ch->conn[1], &none, 1, 0, cma_on_completion_written, op) !=
		    TW_OK) {
			cma_fail_op(op, TW_ERR_NOMEM, "out of memory queueing a completion");
			cma_settle(op);
		}
	}
	cma_schedule(ch);
	cma_unref(ch);
}

static void cma_on_desc(tw_conn *c, tw_status_t st, const char *detail, void *buf, uint64_t len,
                        void *arg)
{
	(void)c;
	cma_op *op = arg;
	cma_channel *ch = op->ch;
	if (st != TW_OK) {
		cma_fail_op(op, st, detail);
		cma_settle(op);
		return;
	}
	tw_wire_cma_descriptor d = { 0, 0 };
	size_t used;
	char dd[TW_DETAIL_MAX];
	if (ch->xth) {
		tw_wire_xth_descriptor x = { 0 };
		st = tw__wire_decode_xth_descriptor(buf, (size_t)len, &x, &used, dd, sizeof(dd));
		d.ptr = x.ptr;
	} else {
		st = tw__wire_decode_cma_descriptor(buf, (size_t)len, &d, &used, dd, sizeof(dd));
	}
	tw__free(buf);
	if (st != TW_OK) { /* a broken peer fails the channel (channel.h) */
		ch->failed = TW_ERR_PROTO;
		tw__detail(ch->failed_detail, sizeof(ch->failed_detail), "%s", dd);
		cma_fail_op(op, TW_ERR_PROTO, dd);
		cma_settle(op);
		return;
	}
	op->pid = d.pid;
	op->ptr = d.ptr;
	if (ch->closed) {
		cma_fail_op(op, TW_ERR_CLOSED, "closed");
		cma_settle(op);
		return;
	}
	tw__list_push_back(&ch->copies, &op->link);
	cma_schedule(ch);
}

static tw_status_t cma_recv(tw_channel *base, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	cma_channel *ch = (cma_channel *)base;
	bool empty;
	cma_op *op = cma_op_new(ch, buf, cb, arg, &empty);
	if (!op)
		return TW_ERR_NOMEM;
	if (empty)
		return TW_OK;
	op->buf = buf->ptr;
	op->len = buf->len;
	if (ch->conn[0]->ops->read_alloc(ch->conn[0], CMA_DESC_MAX, cma_on_desc, op) != TW_OK) {
		ch->refs--;
		tw__free(op);
		return TW_ERR_NOMEM;
	}
	return TW_OK;
}

static void cma_close(tw_channel *base)
{
	cma_channel *ch = (cma_channel *)base;
	ch->closed = true;
	/* receives waiting for their copy: nothing touches their buffers now */
	while (!tw__list_empty(&ch->copies)) {
		cma_op *op = TW_CONTAINER_OF(ch->copies.next, cma_op, link);
		tw__list_remove(&op->link);
		cma_fail_op(op, TW_ERR_CLOSED, "closed with the copy not done");
		tw__loop_defer(ch->base.ctx->env->loop, &op->dfr, cma_on_settle, op);
	}
	for (int i = 0; i < 2; i++) {
		ch->conn[i]->ops->close(ch->conn[i]);
		ch->conn[i] = NULL;
	}
	cma_unref(ch);
}

static const tw_channel_instance_ops cma_instance_ops = {
	.send = cma_send,
	.recv = cma_recv,
	.close = cma_close,
	.acked_by_peer = true, /* a send completes on the peer's completion frame */
	.max_tensor = NULL, /* process_vm_readv is resumed: no limit */
};

static tw_status_t cma_open(tw_channel_ctx *c, tw_endpoint_t endpoint, tw_conn *const *conns,
                            size_t num_conns, tw_channel **out, char *detail, size_t detail_len)
{
	(void)endpoint;
	cma_channel *ch = num_conns == 2 ? tw__calloc(1, sizeof(*ch)) : NULL;
	if (!ch) {
		for (size_t i = 0; i < num_conns; i++)
			conns[i]->ops->close(conns[i]);
		tw__detail(detail, detail_len, "%s channel: %s", c->ops->kind,
		           num_conns == 2 ? "out of memory" : "needs 2 connections");
		return num_conns == 2 ? TW_ERR_NOMEM : TW_ERR_INVAL;
	}
	ch->base.ops = &cma_instance_ops;
	ch->base.ctx = c;
	ch->xth = c->ops == &tw__xth_channel_ops;
	ch->conn[0] = conns[0];
	ch->conn[1] = conns[1];
	ch->refs = 1;
	tw__list_init(&ch->copies);
	*out = &ch->base;
	return TW_OK;
}

static size_t cma_num_connections(tw_channel_ctx *c)
{
	(void)c;
	return 2;
}

/* Whether cma can work from this process at all, as stock decides it. */
static tw_status_t cma_viable(char *detail, size_t detail_len)
{
	int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	if (dumpable != 1) {
		tw__detail(detail, detail_len, "cma channel: not viable: this process is not "
		                               "dumpable (PR_GET_DUMPABLE %d): peers cannot attach",
		           dumpable);
		return TW_ERR_UNSUPPORTED;
	}
	char scope[16];
	if (tw__sys_read_file("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope)) > 0) {
		int s = scope[0] - '0';
		if (s >= 2) {
			tw__detail(detail, detail_len,
			           "cma channel: not viable: YAMA ptrace_scope is %d (2: admin only, 3: "
			           "none)", s);
			return TW_ERR_UNSUPPORTED;
		}
		if (s == 1 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0) {
			char eb[128];
			tw__detail(detail, detail_len,
			           "cma channel: not viable: YAMA ptrace_scope 1 and "
			           "prctl(PR_SET_PTRACER_ANY): %s", tw__strerror(errno, eb, sizeof(eb)));
			return TW_ERR_UNSUPPORTED;
		}
	}
	char src[8] = "probe", dst[8] = "";
	struct iovec l = { dst, sizeof(dst) }, r = { src, sizeof(src) };
	if (tw__sys_process_vm_readv(getpid(), &l, 1, &r, 1) != (ssize_t)sizeof(src)) {
		char eb[128];
		tw__detail(detail, detail_len,
		           "cma channel: not viable: process_vm_readv on this process: %s",
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_UNSUPPORTED;
	}
	return TW_OK;
}

/* cma and xth: no options, the descriptor stock builds, and (cma) the
 * checks stock makes; the reason is said when the channel is not viable. */
static tw_status_t cpu_same_host_create(const tw_channel_ops *ops,
                                        tw_status_t (*identity)(char *, size_t, char *, size_t),
                                        tw_status_t (*viable)(char *, size_t),
                                        const tw_channel_env *env, const char *options,
                                        tw_channel_ctx **out, char *detail, size_t detail_len)
{
	char who[32];
	snprintf(who, sizeof(who), "%s channel", ops->kind);
	tw_status_t st = tw__options_parse(who, options, NULL, 0, NULL, NULL, 0, detail, detail_len);
	if (st != TW_OK)
		return st;
	char desc[TW_IDENTITY_MAX], why[TW_DETAIL_MAX];
	st = identity(desc, sizeof(desc), why, sizeof(why));
	if (st != TW_OK) {
		tw__detail(detail, detail_len, "%s: not viable: %s", who, why);
		return TW_ERR_UNSUPPORTED;
	}
	st = viable ? viable(detail, detail_len) : TW_OK;
	if (st != TW_OK)
		return st;
	return tw__channel_cpu_ctx_new(ops, env, desc, out, detail, detail_len);
}

static tw_status_t cma_create(const tw_channel_env *env, const char *options,
                              tw_channel_ctx **out, char *detail, size_t detail_len)
{
	return cpu_same_host_create(&tw__cma_channel_ops, tw__identity_cma, cma_viable, env, options,
	                            out, detail, detail_len);
}

const tw_channel_ops tw__cma_channel_ops = {
	.kind = "cma",
	.create = cma_create,
	.can_communicate = NULL,
	.num_connections = cma_num_connections,
	.open = cma_open,
	.shutdown = NULL,
	.destroy = tw__channel_cpu_ctx_free,
};

/* xth: cma's flow inside one process (spec 4.5). Stock offers it under
 * the same rule: only a peer in this very process has this descriptor. */
static tw_status_t xth_create(const tw_channel_env *env, const char *options,
                              tw_channel_ctx **out, char *detail, size_t detail_len)
{
	return cpu_same_host_create(&tw__xth_channel_ops, tw__identity_xth, NULL, env, options, out,
	                            detail, detail_len);
}

const tw_channel_ops tw__xth_channel_ops = {
	.kind = "xth",
	.create = xth_create,
	.can_communicate = NULL,
	.num_connections = cma_num_connections,
	.open = cma_open,
	.shutdown = NULL,
	.destroy = tw__channel_cpu_ctx_free,
};
