/*
 * cuda_xth.c - the cuda_xth channel (spec/wire.md 4.6.1): device to device
 * inside one process. Two connections: descriptors on 0, completions on 1.
 * Device descriptor "<boot_id>_<pidns>_<pid>" for every cuda:N, so only the
 * same process selects it; a peer that only claims to be this process is
 * refused before its first pointer or event is used (4.5.b, channel.h).
 *
 * Per non-empty tensor the sender records an event on the tensor's stream
 * and writes Descriptor Structure(4){startEvent u64, srcPtr u64,
 * srcDeviceIdx i32, srcStream u64}; the receiver copies on its context's
 * stream of the target device once that event and its own buffer's stream
 * got there, and writes an empty completion when the bytes have landed.
 * Completions go out in receive order. The send calls back on its
 * completion, the receive once its bytes are in (stock: once the copy was
 * queued).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "channel/cuda/cuda.h"
#include "channel/cuda/cuda_common.h"
#include "platform/error.h"
#include "platform/identity.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "wire/nop.h"
#include "wire/packets.h"

#define CX_DESC_MAX 64

typedef struct cx_channel cx_channel;

typedef struct cx_ctx {
	tw_cuda_ctx cc;
} cx_ctx;

/* A send's start event is handed raw to the receiver, a pipe of another
 * context of this process with a loop thread of its own. The receiver
 * waits on it only while the writer's end is not seen (spec 4.4.e), and
 * the writer ends its side before it calls a send back (transport.h,
 * close). This lock makes that check and the wait one step against the
 * event's destruction: a receiver that found the writer still there has
 * queued its wait before the writer destroys the event, and one that comes
 * later finds the end and waits on nothing. */
static pthread_mutex_t cx_events_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct cx_op {
	cx_channel *ch;
	tw_channel_cb cb;
	void *arg;
	tw_buffer buf;
	CUevent start; /* send: recorded on the tensor's stream */
	bool reading;  /* receive: its Descriptor read is queued */
	bool copied;   /* receive: the bytes are in */
	bool copying;
	tw_status_t status;
	char detail[TW_DETAIL_MAX];
	tw_cuda_done done;
	tw_deferred dfr;
	struct cx_op *next;
} cx_op;

struct cx_channel {
	tw_channel base;
	tw_cuda_ctx *ctx;
	tw_conn *conn[2];
	unsigned refs;
	tw_status_t failed;
	char fail_detail[TW_DETAIL_MAX];
	cx_op *recvs; /* receives in order: completions are written from the head */
	bool open;
	bool here; /* the peer was found to be this process (spec 4.5.b) */
};

static void cx_unref(cx_channel *ch)
{
	if (--ch->refs == 0)
		tw__free(ch);
}

static void cx_call(void *arg)
{
	cx_op *op = arg;
	cx_channel *ch = op->ch;
	/* A completed send's receiver has waited; a failed one's channel has
	 * ended its side (cx_fail closed its connections), so no receiver
	 * waits on the event from now on (cx_events_mu). */
	if (op->start) {
		char d[TW_DETAIL_MAX];
		pthread_mutex_lock(&cx_events_mu);
		if (tw__cuda_use_device(ch->ctx->cu, op->buf.device.index, d, sizeof(d)) == TW_OK)
			(void)ch->ctx->cu->cuEventDestroy_v2(op->start);
		pthread_mutex_unlock(&cx_events_mu);
	}
	op->cb(&ch->base, op->status, op->status == TW_OK ? "" : op->detail, op->arg);
	tw__free(op);
	cx_unref(ch);
}

static void cx_set_status(cx_op *op, tw_status_t st, const char *detail)
{
	if (st != TW_OK && op->status == TW_OK) {
		op->status = st;
		tw__detail(op->detail, sizeof(op->detail), "%s", detail);
	}
}

static void cx_flush(cx_channel *ch);

static void cx_fail(cx_channel *ch, tw_status_t st, const char *detail)
{
	if (ch->failed != TW_OK)
		return;
	ch->failed = st;
	tw__detail(ch->fail_detail, sizeof(ch->fail_detail), "cuda_xth channel: %s", detail);
	for (int i = 0; i < 2; i++)
		if (ch->conn[i]) {
			ch->conn[i]->ops->close(ch->conn[i]);
			ch->conn[i] = NULL;
		}
	cx_flush(ch);
}

/* ---- send ------------------------------------------------------------------------------ */

static void cx_on_desc_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	cx_channel *ch = arg;
	if (st != TW_OK)
		cx_fail(ch, st, detail);
	cx_unref(ch);
}

static void cx_on_completion(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                             uint64_t len, void *arg)
{
	cx_op *op = arg;
	if (st != TW_OK)
		cx_fail(op->ch, st, detail);
	cx_set_status(op, st, op->ch->fail_detail);
	cx_call(op);
}

static tw_status_t cx_send_start(cx_channel *ch, cx_op *op)
{
	char d[TW_DETAIL_MAX];
	tw_status_t st = tw__cuda_record(ch->ctx, op->buf.device.index, op->buf.cuda_stream,
	                                 &op->start, d, sizeof(d));
	if (st != TW_OK) {
		cx_set_status(op, st, d);
		return TW_OK; /* called back with the error */
	}
	tw_wire_cuda_xth_descriptor v = { (uint64_t)(uintptr_t)op->start,
		                              (uint64_t)(uintptr_t)op->buf.ptr, op->buf.device.index,
		                              (uint64_t)(uintptr_t)op->buf.cuda_stream };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_cuda_xth_descriptor(&w, &v);
	if (tw__nop_writer_finish(&w) != TW_OK) {
		tw__nop_writer_free(&w);
		return TW_ERR_NOMEM;
	}
	/* the bytes must live until the write calls back (a tcp connection
	 * may take them later) */
	st = tw__channel_write_obj(ch->conn[0], &w, cx_on_desc_written, ch);
	if (st != TW_OK)
		return st;
	ch->refs++;
	if (ch->conn[1]->ops->read_into(ch->conn[1], NULL, 0, cx_on_completion, op) != TW_OK) {
		cx_fail(ch, TW_ERR_NOMEM, "out of memory queueing a completion read");
		cx_set_status(op, TW_ERR_NOMEM, ch->fail_detail);
		return TW_OK;
	}
	return TW_OK;
}

/* ---- receive ----------------------------------------------------------------------------- */

/* Writes the completions of the receives whose bytes are in, in order, and
 * calls them back; on failure ends the ones no copy is running for. */
static void cx_flush(cx_channel *ch)
{
	while (ch->recvs && (ch->recvs->copied || (ch->failed != TW_OK && !ch->recvs->copying &&
	                                           !ch->recvs->reading))) {
		cx_op *op = ch->recvs;
		ch->recvs = op->next;
		if (ch->failed == TW_OK) {
			tw_iov none = { NULL, 0 };
			if (ch->conn[1]->ops->write(ch->conn[1], &none, 1, 0, cx_on_desc_written, ch) ==
			    TW_OK)
				ch->refs++;
			else
				cx_fail(ch, TW_ERR_NOMEM, "out of memory queueing a completion");
		}
		if (ch->failed != TW_OK && !op->copied)
			cx_set_status(op, ch->failed, ch->fail_detail);
		tw__loop_defer(ch->ctx->base.env->loop, &op->dfr, cx_call, op);
	}
}

static void cx_on_copied(void *arg)
{
	cx_op *op = arg;
	cx_channel *ch = op->ch;
	op->copying = false;
	/* A copy that ends after the channel failed, or after the writer ended
	 * its side (it hands a failed send's buffer back only once its end is
	 * out, transport.h), read a buffer that may be its user's again: what
	 * it copied may be torn, so the receive fails too (spec 4.4.e). */
	char d[TW_DETAIL_MAX];
	if (ch->failed == TW_OK && tw__channel_writer_left(ch->conn[0], d, sizeof(d)))
		cx_fail(ch, TW_ERR_EOF, d);
	op->copied = ch->failed == TW_OK;
	cx_flush(ch);
	cx_unref(ch);
}

static void cx_on_desc(tw_conn *c, tw_status_t st, const char *detail, void *buf, uint64_t len,
                       void *arg)
{
	cx_op *op = arg;
	cx_channel *ch = op->ch;
	tw_wire_cuda_xth_descriptor v;
	size_t used = 0;
	char d[TW_DETAIL_MAX];
	op->reading = false;
	if (st != TW_OK) {
		cx_fail(ch, st, detail);
	} else if (ch->failed != TW_OK) {
		/* delivered after a failure or close: start nothing new */
	} else if (tw__wire_decode_cuda_xth_descriptor(buf, len, &v, &used, d, sizeof(d)) != TW_OK ||
	           used != len) {
		if (used != len && used)
			tw__detail(d, sizeof(d), "CudaXthDescriptor: %llu bytes after its end",
			           (unsigned long long)(len - used));
		cx_fail(ch, TW_ERR_PROTO, d);
	} else if (!ch->here &&
	           !(ch->here = tw__channel_peer_is(ch->conn[0], getpid(), d, sizeof(d)) == TW_OK)) {
		/* 4.5.b: its pointers and events are not ours; or it left (4.4.e) */
		cx_fail(ch, tw__channel_writer_left(ch->conn[0], d, sizeof(d)) ? TW_ERR_EOF : TW_ERR_PROTO,
		        d);
	} else {
		int64_t dev = v.src_device;
		uint64_t ptr = v.src_ptr, event = v.start_event;
		/* the source is this process's memory: check it as our own */
		tw_buffer src = { (void *)(uintptr_t)ptr, op->buf.len, { "cuda", (int32_t)dev }, NULL };
		st = dev < 0 || dev >= ch->ctx->num_cuda
		             ? TW_ERR_PROTO
		             : tw__cuda_check_buffer(ch->ctx, "source", &src, d, sizeof(d));
		if (st == TW_ERR_PROTO)
			tw__detail(d, sizeof(d), "a Descriptor naming device %lld", (long long)dev);
		if (st == TW_OK) {
			op->done.fn = cx_on_copied;
			op->done.arg = op;
			pthread_mutex_lock(&cx_events_mu);
			if (tw__channel_writer_left(ch->conn[0], d, sizeof(d)))
				st = TW_ERR_EOF; /* its event may be gone: wait on nothing */
			else
				st = tw__cuda_copy(ch->ctx, op->buf.device.index, op->buf.ptr, src.ptr,
				                   op->buf.len, op->buf.cuda_stream, (CUevent)(uintptr_t)event,
				                   NULL, &op->done, d, sizeof(d));
			pthread_mutex_unlock(&cx_events_mu);
		}
		if (st == TW_OK) {
			op->copying = true;
			ch->refs++;
		} else {
			cx_fail(ch, st, d);
		}
	}
	tw__free(buf);
	cx_flush(ch);
	cx_unref(ch);
}

/* ---- both ------------------------------------------------------------------------------- */

static tw_status_t cx_queue(tw_channel *base, const tw_buffer *buf, tw_channel_cb cb, void *arg,
                            bool send)
{
	cx_channel *ch = (cx_channel *)base;
	cx_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return TW_ERR_NOMEM;
	op->ch = ch;
	op->cb = cb;
	op->arg = arg;
	op->buf = *buf;
	if (ch->failed != TW_OK)
		cx_set_status(op, ch->failed, ch->fail_detail);
	else
		op->status = tw__cuda_check_buffer(ch->ctx, send ? "send" : "receive", buf, op->detail,
		                                   sizeof(op->detail));
	tw_status_t st = TW_OK;
	if (op->status == TW_OK && buf->len > 0) {
		if (send) {
			st = cx_send_start(ch, op);
			if (st == TW_OK && op->status == TW_OK) {
				ch->refs++;
				return TW_OK; /* called back on its completion */
			}
		} else {
			st = ch->conn[0]->ops->read_alloc(ch->conn[0], CX_DESC_MAX, cx_on_desc, op);
			if (st == TW_OK) {
				ch->refs += 2; /* the operation and the read */
				op->reading = true;
				cx_op **end = &ch->recvs;
				while (*end)
					end = &(*end)->next;
				*end = op;
				return TW_OK;
			}
		}
	}
	if (st != TW_OK) {
		if (op->start)
			(void)ch->ctx->cu->cuEventDestroy_v2(op->start);
		tw__free(op);
		return st;
	}
	/* zero length (nothing on the wire, spec 4.1) or refused: later */
	ch->refs++;
	tw__loop_defer(ch->ctx->base.env->loop, &op->dfr, cx_call, op);
	return TW_OK;
}

static tw_status_t cx_send(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	return cx_queue(ch, buf, cb, arg, true);
}

static tw_status_t cx_recv(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	return cx_queue(ch, buf, cb, arg, false);
}

static void cx_close(tw_channel *base)
{
	cx_channel *ch = (cx_channel *)base;
	ch->open = false;
	ch->failed = TW_OK;
	cx_fail(ch, TW_ERR_CLOSED, "closed");
	cx_unref(ch);
}

static const tw_channel_instance_ops cx_instance_ops = {
	.send = cx_send,
	.recv = cx_recv,
	.close = cx_close,
	.acked_by_peer = true,
};

static size_t cx_num_connections(tw_channel_ctx *c)
{
	return 2;
}

static tw_status_t cx_open(tw_channel_ctx *base, tw_endpoint_t endpoint, tw_conn *const *conns,
                           size_t num_conns, unsigned flags, tw_channel **out, char *detail,
                           size_t detail_len)
{
	cx_channel *ch = num_conns == 2 ? tw__calloc(1, sizeof(*ch)) : NULL;
	if (!ch) {
		for (size_t i = 0; i < num_conns; i++)
			conns[i]->ops->close(conns[i]);
		tw__detail(detail, detail_len, num_conns == 2 ? "cuda_xth channel: out of memory"
		                                              : "cuda_xth channel: needs 2 connections");
		return num_conns == 2 ? TW_ERR_NOMEM : TW_ERR_INVAL;
	}
	ch->base.ops = &cx_instance_ops;
	ch->base.ctx = base;
	ch->ctx = (tw_cuda_ctx *)base;
	ch->conn[0] = conns[0];
	ch->conn[1] = conns[1];
	ch->refs = 1;
	ch->open = true;
	*out = &ch->base;
	return TW_OK;
}

static void cx_destroy(tw_channel_ctx *base)
{
	cx_ctx *c = (cx_ctx *)base;
	tw__cuda_ctx_fini(&c->cc);
	tw__free(c);
}

static void cx_shutdown(tw_channel_ctx *base)
{
	tw__cuda_ctx_drain((tw_cuda_ctx *)base);
}

static tw_status_t cx_create(const tw_channel_env *env, const char *options, tw_channel_ctx **out,
                             char *detail, size_t detail_len)
{
	tw_status_t st = tw__options_parse("cuda_xth channel", options, NULL, 0, NULL, NULL, 0,
	                                   detail, detail_len);
	if (st != TW_OK)
		return st;
	char ident[256], d[TW_DETAIL_MAX];
	st = tw__identity_xth(ident, sizeof(ident), d, sizeof(d));
	if (st != TW_OK) {
		tw__detail(detail, detail_len, "cuda_xth channel: not viable: %s", d);
		return TW_ERR_UNSUPPORTED;
	}
	cx_ctx *cx = tw__calloc(1, sizeof(*cx));
	if (!cx) {
		tw__detail(detail, detail_len, "cuda_xth channel: out of memory");
		return TW_ERR_NOMEM;
	}
	tw_cuda_ctx *c = &cx->cc;
	st = tw__cuda_ctx_init(c, &tw__cuda_xth_channel_ops, env, false, detail, detail_len);
	for (int i = 0; st == TW_OK && i < c->num_cuda; i++) {
		tw_channel_device *dv = &c->base.devices[i];
		dv->descriptor_len = strlen(ident);
		if (!(dv->descriptor = tw__memdup_str(ident, dv->descriptor_len)))
			st = TW_ERR_NOMEM;
	}
	if (st != TW_OK) {
		if (st == TW_ERR_NOMEM)
			tw__detail(detail, detail_len, "cuda_xth channel: out of memory");
		if (c->cu)
			cx_destroy(&c->base);
		else
			tw__free(cx);
		return st;
	}
	*out = &c->base;
	return TW_OK;
}

const tw_channel_ops tw__cuda_xth_channel_ops = {
	.kind = "cuda_xth",
	.create = cx_create,
	.can_communicate = NULL,
	.num_connections = cx_num_connections,
	.open = cx_open,
	.shutdown = cx_shutdown,
	.destroy = cx_destroy,
};
