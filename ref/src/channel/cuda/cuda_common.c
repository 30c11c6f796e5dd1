/*
 * cuda_common.c - the context, copies and completions the CUDA channels
 * share (see cuda_common.h).
 */
#include <stdio.h>
#include <string.h>

#include "channel/cuda/cuda_common.h"
#include "platform/error.h"
#include "platform/platform.h"

tw_status_t tw__cuda_ctx_init(tw_cuda_ctx *c, const tw_channel_ops *ops,
                              const tw_channel_env *env, bool with_cpu, char *detail,
                              size_t detail_len)
{
	char why[TW_DETAIL_MAX];
	tw_status_t st = tw__cuda_get(&c->cu, why, sizeof(why));
	if (st != TW_OK) {
		tw__detail(detail, detail_len, "%s channel: not viable: %s", ops->kind, why);
		return st;
	}
	c->num_cuda = c->cu->num_devices;
	if (c->num_cuda > TW_CUDA_CTX_MAX_DEVICES)
		c->num_cuda = TW_CUDA_CTX_MAX_DEVICES;
	c->base.ops = ops;
	c->base.env = env;
	size_t n = (with_cpu ? 1 : 0) + (size_t)c->num_cuda;
	c->base.devices = tw__calloc(n, sizeof(tw_channel_device));
	if (!c->base.devices) {
		tw__detail(detail, detail_len, "%s channel: out of memory", ops->kind);
		return TW_ERR_NOMEM;
	}
	c->base.num_devices = n;
	for (size_t i = 0; i < n; i++) {
		tw_channel_device *d = &c->base.devices[i];
		if (with_cpu && i == 0) {
			d->device = tw_device_cpu();
		} else {
			snprintf(d->device.type, sizeof(d->device.type), "cuda");
			d->device.index = (int32_t)(i - (with_cpu ? 1 : 0));
		}
	}
	return TW_OK;
}

void tw__cuda_ctx_fini(tw_cuda_ctx *c)
{
	for (size_t i = 0; i < c->base.num_devices; i++)
		tw__free(c->base.devices[i].descriptor);
	tw__free(c->base.devices);
	c->base.devices = NULL;
	c->base.num_devices = 0;
}

void tw__cuda_ctx_drain(tw_cuda_ctx *c)
{
	char d[TW_DETAIL_MAX];
	for (int i = 0; i < c->num_cuda; i++) {
		CUstream *ss[2] = { &c->streams[i], &c->notify[i] };
		for (int k = 0; k < 2; k++) {
			if (!*ss[k])
				continue;
			if (tw__cuda_use_device(c->cu, i, d, sizeof(d)) == TW_OK) {
				(void)c->cu->cuStreamSynchronize(*ss[k]);
				(void)c->cu->cuStreamDestroy_v2(*ss[k]);
			}
			*ss[k] = NULL;
		}
	}
}

static tw_status_t tw_cuda_fail(tw_cuda_ctx *c, const char *call, CUresult r, char *detail,
                                size_t detail_len)
{
	char eb[160];
	tw__detail(detail, detail_len, "%s channel: %s: %s", c->base.ops->kind, call,
	           tw__cuda_strerror(c->cu, r, eb, sizeof(eb)));
	return r == TW_CUDA_ERROR_OUT_OF_MEMORY ? TW_ERR_NOMEM : TW_ERR_INVAL;
}

tw_status_t tw__cuda_check_buffer(tw_cuda_ctx *c, const char *who, const tw_buffer *b,
                                  char *detail, size_t detail_len)
{
	if (strcmp(b->device.type, "cuda") != 0 || b->len == 0)
		return TW_OK;
	tw_status_t st = tw__cuda_use_device(c->cu, b->device.index, detail, detail_len);
	if (st != TW_OK)
		return st;
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)b->ptr, base = 0;
	size_t size = 0;
	unsigned type = 0;
	int ord = -1;
	CUresult r = c->cu->cuPointerGetAttribute(&type, TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
	if (r == TW_CUDA_SUCCESS)
		r = c->cu->cuPointerGetAttribute(&ord, TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
	if (r == TW_CUDA_SUCCESS && type == TW_CU_MEMORYTYPE_DEVICE)
		r = c->cu->cuMemGetAddressRange_v2(&base, &size, p);
	if (r != TW_CUDA_SUCCESS || type != TW_CU_MEMORYTYPE_DEVICE) {
		tw__detail(detail, detail_len,
		           "%s channel: %s buffer %p of cuda:%d is not device memory the driver knows",
		           c->base.ops->kind, who, b->ptr, b->device.index);
		return TW_ERR_INVAL;
	}
	if (ord != b->device.index) {
		tw__detail(detail, detail_len, "%s channel: %s buffer %p is on cuda:%d, not cuda:%d",
		           c->base.ops->kind, who, b->ptr, ord, b->device.index);
		return TW_ERR_INVAL;
	}
	if (p - base > size || b->len > size - (p - base)) {
		tw__detail(detail, detail_len,
		           "%s channel: %s buffer %p + %llu bytes ends past its allocation (%zu bytes at "
		           "0x%llx)",
		           c->base.ops->kind, who, b->ptr, (unsigned long long)b->len, size,
		           (unsigned long long)base);
		return TW_ERR_INVAL;
	}
	return TW_OK;
}

/* One of the device's two streams (the copies', or the completions'),
 * made on first use. */
static tw_status_t tw_cuda_stream_of(tw_cuda_ctx *c, int dev, CUstream *which, CUstream *out,
                                     char *detail, size_t detail_len)
{
	tw_status_t st = tw__cuda_use_device(c->cu, dev, detail, detail_len);
	if (st != TW_OK)
		return st;
	if (!*which) {
		CUresult r = c->cu->cuStreamCreate(which, TW_CU_STREAM_NON_BLOCKING);
		if (r != TW_CUDA_SUCCESS)
			return tw_cuda_fail(c, "cuStreamCreate", r, detail, detail_len);
	}
	*out = *which;
	return TW_OK;
}

static tw_status_t tw_cuda_stream(tw_cuda_ctx *c, int dev, CUstream *out, char *detail,
                                  size_t detail_len)
{
	return tw_cuda_stream_of(c, dev, &c->streams[dev], out, detail, detail_len);
}

tw_status_t tw__cuda_record(tw_cuda_ctx *c, int dev, void *stream, CUevent *out, char *detail,
                            size_t detail_len)
{
	tw_status_t st = tw__cuda_use_device(c->cu, dev, detail, detail_len);
	if (st != TW_OK)
		return st;
	CUresult r = c->cu->cuEventCreate(out, TW_CU_EVENT_DISABLE_TIMING);
	if (r != TW_CUDA_SUCCESS)
		return tw_cuda_fail(c, "cuEventCreate", r, detail, detail_len);
	r = c->cu->cuEventRecord(*out, (CUstream)stream);
	if (r != TW_CUDA_SUCCESS) {
		(void)c->cu->cuEventDestroy_v2(*out);
		*out = NULL;
		return tw_cuda_fail(c, "cuEventRecord on the tensor's stream", r, detail, detail_len);
	}
	return TW_OK;
}

/* The driver's thread: hands the completion to the loop. If the loop no
 * longer accepts work (only after every pipe finished, which waits for its
 * copies) there is nobody left to tell. */
static void tw_cuda_host_done(void *arg)
{
	tw_cuda_done *d = arg;
	if (!tw__loop_post(d->loop, &d->dfr, d->fn, d->arg))
		return;
}

/* Runs done->fn on the loop once the work queued so far on `after` (of
 * cuda:dev) is over: from the completions' stream, after an event. On
 * failure nothing will run. */
static tw_status_t tw_cuda_report(tw_cuda_ctx *c, int dev, CUstream after, tw_cuda_done *done,
                                  char *detail, size_t detail_len)
{
	CUstream ns;
	CUevent fin;
	tw_status_t st = tw_cuda_stream_of(c, dev, &c->notify[dev], &ns, detail, detail_len);
	if (st == TW_OK)
		st = tw__cuda_record(c, dev, after, &fin, detail, detail_len);
	if (st != TW_OK)
		return st;
	CUresult r = c->cu->cuStreamWaitEvent(ns, fin, 0);
	(void)c->cu->cuEventDestroy_v2(fin);
	if (r != TW_CUDA_SUCCESS)
		return tw_cuda_fail(c, "cuStreamWaitEvent", r, detail, detail_len);
	done->loop = c->base.env->loop;
	r = c->cu->cuLaunchHostFunc(ns, tw_cuda_host_done, done);
	if (r != TW_CUDA_SUCCESS)
		return tw_cuda_fail(c, "cuLaunchHostFunc", r, detail, detail_len);
	return TW_OK;
}

tw_status_t tw__cuda_copy(tw_cuda_ctx *c, int dev, void *dst, const void *src, uint64_t n,
                          void *after, CUevent event, CUevent then_record, tw_cuda_done *done,
                          char *detail, size_t detail_len)
{
	CUstream s;
	tw_status_t st = tw_cuda_stream(c, dev, &s, detail, detail_len);
	if (st != TW_OK)
		return st;
	CUevent ready;
	st = tw__cuda_record(c, dev, after, &ready, detail, detail_len);
	if (st != TW_OK)
		return st;
	CUresult r = c->cu->cuStreamWaitEvent(s, ready, 0);
	/* legal while the record is pending: the wait keeps what it needs */
	(void)c->cu->cuEventDestroy_v2(ready);
	if (r == TW_CUDA_SUCCESS && event)
		r = c->cu->cuStreamWaitEvent(s, event, 0);
	if (r != TW_CUDA_SUCCESS)
		return tw_cuda_fail(c, "cuStreamWaitEvent", r, detail, detail_len);
	r = c->cu->cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, s);
	if (r != TW_CUDA_SUCCESS)
		return tw_cuda_fail(c, "cuMemcpyAsync", r, detail, detail_len);
	if (then_record && (r = c->cu->cuEventRecord(then_record, s)) != TW_CUDA_SUCCESS) {
		(void)c->cu->cuStreamSynchronize(s);
		return tw_cuda_fail(c, "cuEventRecord after a copy", r, detail, detail_len);
	}
	/* its end is reported from the completions' stream (cuda_common.h) */
	st = tw_cuda_report(c, dev, s, done, detail, detail_len);
	if (st != TW_OK)
		(void)c->cu->cuStreamSynchronize(s);
	return st;
}

tw_status_t tw__cuda_when_ready(tw_cuda_ctx *c, int dev, void *stream, tw_cuda_done *done,
                                char *detail, size_t detail_len)
{
	return tw_cuda_report(c, dev, (CUstream)stream, done, detail, detail_len);
}

/* ---- chunked channels ------------------------------------------------------------------ */

void tw__cuda_chan_open(tw_cuda_chan *ch, tw_cuda_ctx *c, const tw_channel_instance_ops *ops,
                        const tw_cuda_chan_ops *cops)
{
	ch->base.ops = ops;
	ch->base.ctx = &c->base;
	ch->ctx = c;
	ch->cops = cops;
	ch->refs = 1;
	ch->open = true;
	ch->next_open = c->chans;
	if (c->chans)
		c->chans->prev_open = ch;
	c->chans = ch;
}

void tw__cuda_chan_unref(tw_cuda_chan *ch)
{
	if (--ch->refs == 0)
		ch->cops->free(ch);
}

static void tw_cuda_chan_pump(void *arg)
{
	tw_cuda_chan *ch = arg;
	ch->pump_queued = false;
	ch->cops->pump(ch);
	tw__cuda_chan_unref(ch);
}

void tw__cuda_chan_schedule(tw_cuda_chan *ch)
{
	if (ch->pump_queued)
		return;
	ch->pump_queued = true;
	ch->refs++;
	tw__loop_defer(ch->ctx->base.env->loop, &ch->pump_dfr, tw_cuda_chan_pump, ch);
}

void tw__cuda_chan_fail(tw_cuda_chan *ch, tw_status_t st, const char *detail)
{
	if (ch->failed != TW_OK)
		return;
	ch->failed = st;
	/* the channel's name once: a driver call's detail has it already */
	char prefix[48];
	snprintf(prefix, sizeof(prefix), "%s channel: ", ch->ctx->base.ops->kind);
	tw__detail(ch->fail_detail, sizeof(ch->fail_detail), "%s%s",
	           strncmp(detail, prefix, strlen(prefix)) ? prefix : "", detail);
	tw__cuda_chan_schedule(ch);
}

void tw__cuda_chan_close(tw_cuda_chan *ch)
{
	if (ch->prev_open)
		ch->prev_open->next_open = ch->next_open;
	else
		ch->ctx->chans = ch->next_open;
	if (ch->next_open)
		ch->next_open->prev_open = ch->prev_open;
	ch->open = false;
	ch->failed = TW_OK; /* the close is what operations now hear */
	tw__cuda_chan_fail(ch, TW_ERR_CLOSED, "closed");
	tw__cuda_chan_unref(ch);
}

void tw__cuda_chan_wake(tw_cuda_ctx *c)
{
	for (tw_cuda_chan *o = c->chans; o; o = o->next_open)
		tw__cuda_chan_schedule(o);
}

static void tw_cuda_op_call(void *arg)
{
	tw_cuda_op *op = arg;
	tw_cuda_chan *ch = op->ch;
	op->cb(&ch->base, op->status, op->status == TW_OK ? "" : op->detail, op->arg);
	tw__free(op);
	tw__cuda_chan_unref(ch);
}

void tw__cuda_chunk_end(tw_cuda_chunk *k, tw_status_t st, const char *detail)
{
	tw_cuda_op *op = k->op;
	k->ended = true;
	if (st != TW_OK && op->status == TW_OK) {
		op->status = st;
		tw__detail(op->detail, sizeof(op->detail), "%s", detail);
	}
	if (--op->chunks_left == 0)
		tw_cuda_op_call(op);
}

void tw__cuda_chan_sweep(tw_cuda_chan *ch, int which, void (*free_chunk)(tw_cuda_chunk *k))
{
	for (tw_cuda_chunk **pp = &ch->q[which]; *pp;) {
		tw_cuda_chunk *k = *pp;
		if (!k->ended) {
			pp = &k->next;
			continue;
		}
		*pp = k->next;
		if (free_chunk)
			free_chunk(k);
		tw__free(k);
	}
}

tw_status_t tw__cuda_chan_queue(tw_cuda_chan *ch, const tw_buffer *buf, tw_channel_cb cb,
                                void *arg, int which)
{
	tw_cuda_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return TW_ERR_NOMEM;
	op->ch = ch;
	op->cb = cb;
	op->arg = arg;
	bool cuda = strcmp(buf->device.type, "cuda") == 0;
	if (ch->failed != TW_OK) {
		op->status = ch->failed;
		tw__detail(op->detail, sizeof(op->detail), "%s", ch->fail_detail);
	} else if (cuda) {
		op->status = tw__cuda_check_buffer(ch->ctx, which ? "receive" : "send", buf, op->detail,
		                                   sizeof(op->detail));
	}
	uint64_t size = ch->cops->chunk_bytes;
	uint64_t nchunks = (buf->len + size - 1) / size;
	if (op->status != TW_OK || nchunks == 0) {
		/* nothing on the wire (spec 4.1), or refused: called back later */
		ch->refs++;
		tw__loop_defer(ch->ctx->base.env->loop, &op->dfr, tw_cuda_op_call, op);
		return TW_OK;
	}
	tw_cuda_chunk *first = NULL, **tail = &first;
	for (uint64_t i = 0; i < nchunks; i++) {
		tw_cuda_chunk *k = tw__calloc(1, ch->cops->chunk_struct);
		if (!k) {
			while (first) {
				tw_cuda_chunk *n = first->next;
				tw__free(first);
				first = n;
			}
			tw__free(op);
			return TW_ERR_NOMEM;
		}
		uint64_t off = i * size;
		k->op = op;
		k->which = which;
		k->ptr = (char *)buf->ptr + off;
		k->n = buf->len - off < size ? buf->len - off : size;
		k->dev = cuda ? buf->device.index : -1;
		k->stream = buf->cuda_stream;
		k->slot = -1;
		*tail = k;
		tail = &k->next;
	}
	op->chunks_left = (unsigned)nchunks;
	ch->refs++; /* the operation */
	tw_cuda_chunk **end = &ch->q[which];
	while (*end)
		end = &(*end)->next;
	*end = first;
	tw__cuda_chan_schedule(ch);
	return TW_OK;
}

tw_status_t tw__cuda_chan_send(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	return tw__cuda_chan_queue((tw_cuda_chan *)ch, buf, cb, arg, 0);
}

tw_status_t tw__cuda_chan_recv(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	return tw__cuda_chan_queue((tw_cuda_chan *)ch, buf, cb, arg, 1);
}

void tw__cuda_chan_close_op(tw_channel *ch)
{
	tw__cuda_chan_close((tw_cuda_chan *)ch);
}

uint64_t tw__cuda_chan_max_tensor(tw_channel *ch)
{
	return UINT64_MAX; /* chunked: any length */
}

void tw__cuda_chan_on_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	tw_cuda_chan *ch = arg;
	if (st != TW_OK)
		tw__cuda_chan_fail(ch, st, detail);
	tw__cuda_chan_unref(ch);
}
