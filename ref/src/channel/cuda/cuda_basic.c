/*
 * cuda_basic.c - the cuda_basic channel (spec/wire.md 4.6.2): CUDA tensors
 * staged through pinned host memory over a CPU channel it wraps (basic, as
 * PyTorch registers it). Serves cpu:0 and every cuda:N; never a cpu-cpu
 * pair. Connections: the wrapped channel's first, then one control
 * connection of its own.
 *
 * Per tensor: chunks of TW_CUDA_BASIC_CHUNK bytes (the last one shorter), in
 * order across tensors; per chunk the sender writes an empty frame on the
 * control connection ("ready to send") and then sends the chunk on the CPU
 * channel; the receiver reads the ready-to-send before it posts the CPU
 * receive of that chunk. A zero-length tensor sends nothing.
 *
 * Staging: per context two pools (send, receive) of TW_CUDA_BASIC_SLOTS
 * pinned slots of one chunk each, taken in chunk order. A device chunk is
 * copied into a slot on the context's stream once the tensor's stream got
 * there, sent, and the slot freed; a received chunk lands in a slot and is
 * copied to the device. Host chunks go straight from or into the buffer.
 *
 * Where stock's callbacks come early, ours do not: a send calls back once
 * every chunk went through the CPU channel (stock: when the last device to
 * host copy finished), a receive once every chunk is in the device buffer
 * (stock: when the last copy was queued). A failure of either connection
 * or copy fails the channel; a copy already queued runs to its end before
 * its operation calls back, since the driver cannot take it back.
 */
#include <stdio.h>
#include <string.h>

#include "channel/basic/basic.h"
#include "channel/cuda/cuda.h"
#include "channel/cuda/cuda_common.h"
#include "platform/error.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "wire/nop.h"
#include "wire/packets.h"

#define TW_CUDA_BASIC_CHUNK ((uint64_t)1 << 20)
#define TW_CUDA_BASIC_SLOTS 16

typedef struct cb_pool {
	char *mem; /* TW_CUDA_BASIC_SLOTS chunks, pinned, made on first use */
	bool used[TW_CUDA_BASIC_SLOTS];
} cb_pool;

typedef struct cb_ctx {
	tw_cuda_ctx cc;
	tw_channel_ctx *cpu; /* the wrapped basic context, private */
	cb_pool pools[2];    /* [0] send, [1] receive */
} cb_ctx;

enum cb_state {
	CB_WAIT,    /* send: slot and ready-to-send; recv: ready-to-send read posted */
	CB_GOT_RTS, /* recv: the ready-to-send arrived */
	CB_COPYING, /* a copy to or from the slot is queued */
	CB_READY,   /* send: bytes in the slot (or a host buffer), CPU send next */
	CB_MOVING,  /* a CPU channel operation is under way */
};

typedef struct cb_chunk {
	tw_cuda_chunk c;
	enum cb_state state;
	bool rts_posted; /* receive: its ready-to-send read was queued */
	bool rts_wait;   /* ... and has not called back yet */
} cb_chunk;

typedef struct cb_channel {
	tw_cuda_chan c;
	tw_channel *cpu;
	tw_conn *ctl;
} cb_channel;

#define CB_CTX(ch) ((cb_ctx *)(ch)->c.ctx)
#define CB_CH(k) ((cb_channel *)(k)->c.op->ch)

/* ---- slots ------------------------------------------------------------------------- */

static int cb_slot_get(cb_ctx *c, int which, int dev, tw_status_t *st, char *detail,
                       size_t detail_len)
{
	cb_pool *p = &c->pools[which];
	*st = TW_OK;
	if (!p->mem) {
		/* pinned memory is the driver's: any device's context may make it */
		*st = tw__cuda_use_device(c->cc.cu, dev < 0 ? 0 : dev, detail, detail_len);
		if (*st != TW_OK)
			return -1;
		void *m = NULL;
		CUresult r = c->cc.cu->cuMemAllocHost_v2(&m, TW_CUDA_BASIC_SLOTS * TW_CUDA_BASIC_CHUNK);
		if (r != TW_CUDA_SUCCESS) {
			char eb[160];
			tw__detail(detail, detail_len, "cuMemAllocHost of %llu bytes of staging: %s",
			           (unsigned long long)(TW_CUDA_BASIC_SLOTS * TW_CUDA_BASIC_CHUNK),
			           tw__cuda_strerror(c->cc.cu, r, eb, sizeof(eb)));
			*st = TW_ERR_NOMEM;
			return -1;
		}
		p->mem = m;
	}
	for (int i = 0; i < TW_CUDA_BASIC_SLOTS; i++)
		if (!p->used[i]) {
			p->used[i] = true;
			return i;
		}
	return -1;
}

static char *cb_slot_mem(cb_ctx *c, int which, int slot)
{
	return c->pools[which].mem + (uint64_t)slot * TW_CUDA_BASIC_CHUNK;
}

/* A chunk is over: its slot goes back first. */
static void cb_chunk_end(cb_chunk *k, tw_status_t st, const char *detail)
{
	cb_ctx *c = CB_CTX(CB_CH(k));
	if (k->c.slot >= 0) {
		c->pools[k->c.which].used[k->c.slot] = false;
		k->c.slot = -1;
		tw__cuda_chan_wake(&c->cc);
	}
	tw__cuda_chunk_end(&k->c, st, detail);
}

/* ---- callbacks -------------------------------------------------------------------------- */

static void cb_on_copied(void *arg)
{
	cb_chunk *k = arg;
	tw_cuda_chan *ch = &CB_CH(k)->c;
	if (k->c.which == 1) {
		/* a receive's bytes are in the device buffer */
		cb_chunk_end(k, TW_OK, "");
	} else if (ch->failed != TW_OK) {
		cb_chunk_end(k, ch->failed, ch->fail_detail);
	} else {
		k->state = CB_READY;
	}
	tw__cuda_chan_schedule(ch);
	tw__cuda_chan_unref(ch);
}

static void cb_on_moved(tw_channel *cpu, tw_status_t st, const char *detail, void *arg)
{
	cb_chunk *k = arg;
	cb_channel *bch = CB_CH(k);
	tw_cuda_chan *ch = &bch->c;
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, detail);
		cb_chunk_end(k, st, ch->fail_detail);
	} else if (k->c.which == 0 || k->c.dev < 0) {
		cb_chunk_end(k, TW_OK, "");
	} else if (ch->failed != TW_OK) {
		cb_chunk_end(k, ch->failed, ch->fail_detail);
	} else {
		/* received into a slot: on to the device */
		char d[TW_DETAIL_MAX];
		k->state = CB_COPYING;
		k->c.done.fn = cb_on_copied;
		k->c.done.arg = k;
		tw_status_t cst = tw__cuda_copy(ch->ctx, k->c.dev, k->c.ptr,
		                                cb_slot_mem(CB_CTX(bch), 1, k->c.slot), k->c.n,
		                                k->c.stream, NULL, NULL, &k->c.done, d, sizeof(d));
		if (cst == TW_OK) {
			ch->refs++;
		} else {
			tw__cuda_chan_fail(ch, cst, d);
			cb_chunk_end(k, cst, ch->fail_detail);
		}
	}
	tw__cuda_chan_schedule(ch);
	tw__cuda_chan_unref(ch);
}

static void cb_on_rts(tw_conn *c, tw_status_t st, const char *detail, void *buf, uint64_t len,
                      void *arg)
{
	cb_chunk *k = arg;
	tw_cuda_chan *ch = &CB_CH(k)->c;
	k->rts_wait = false;
	if (st != TW_OK)
		tw__cuda_chan_fail(ch, st, detail);
	else if (k->state == CB_WAIT)
		k->state = CB_GOT_RTS;
	tw__cuda_chan_schedule(ch);
	tw__cuda_chan_unref(ch);
}

/* ---- the pump: moves every chunk as far as it can, in order ---------------------------- */

static void cb_pump_sends(cb_channel *bch)
{
	tw_cuda_chan *ch = &bch->c;
	cb_ctx *c = CB_CTX(bch);
	bool may_send = true; /* CPU sends go out in chunk order */
	for (tw_cuda_chunk *kc = ch->q[0]; kc; kc = kc->next) {
		cb_chunk *k = (cb_chunk *)kc;
		char d[TW_DETAIL_MAX];
		tw_status_t st = TW_OK;
		if (kc->ended)
			continue;
		if (k->state == CB_WAIT) {
			if (kc->dev >= 0) {
				kc->slot = cb_slot_get(c, 0, kc->dev, &st, d, sizeof(d));
				if (st != TW_OK) {
					tw__cuda_chan_fail(ch, st, d);
					return;
				}
				if (kc->slot < 0)
					break; /* later chunks wait for this one's slot */
			}
			tw_iov none = { NULL, 0 };
			if (bch->ctl->ops->write(bch->ctl, &none, 1, 0, tw__cuda_chan_on_written, ch) != TW_OK) {
				tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing a ready-to-send");
				return;
			}
			ch->refs++;
			if (kc->dev >= 0) {
				k->state = CB_COPYING;
				kc->done.fn = cb_on_copied;
				kc->done.arg = k;
				st = tw__cuda_copy(&c->cc, kc->dev, cb_slot_mem(c, 0, kc->slot), kc->ptr, kc->n,
				                   kc->stream, NULL, NULL, &kc->done, d, sizeof(d));
				if (st != TW_OK) {
					k->state = CB_WAIT;
					tw__cuda_chan_fail(ch, st, d);
					return;
				}
				ch->refs++;
			} else {
				k->state = CB_READY;
			}
		}
		if (k->state == CB_READY && may_send) {
			tw_buffer b = { kc->dev >= 0 ? cb_slot_mem(c, 0, kc->slot) : kc->ptr, kc->n,
				            tw_device_cpu(), NULL };
			if (bch->cpu->ops->send(bch->cpu, &b, cb_on_moved, k) != TW_OK) {
				tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing a chunk");
				return;
			}
			ch->refs++;
			k->state = CB_MOVING;
		}
		if (k->state < CB_MOVING)
			may_send = false;
	}
}

static void cb_pump_recvs(cb_channel *bch)
{
	tw_cuda_chan *ch = &bch->c;
	cb_ctx *c = CB_CTX(bch);
	bool may_recv = true; /* CPU receives are posted in chunk order */
	for (tw_cuda_chunk *kc = ch->q[1]; kc; kc = kc->next) {
		cb_chunk *k = (cb_chunk *)kc;
		char d[TW_DETAIL_MAX];
		tw_status_t st = TW_OK;
		if (kc->ended)
			continue;
		if (!k->rts_posted) {
			if (bch->ctl->ops->read_into(bch->ctl, NULL, 0, cb_on_rts, k) != TW_OK) {
				tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing a ready-to-send read");
				return;
			}
			ch->refs++;
			k->rts_posted = true;
			k->rts_wait = true;
		}
		if (k->state == CB_GOT_RTS && may_recv) {
			if (kc->dev >= 0) {
				kc->slot = cb_slot_get(c, 1, kc->dev, &st, d, sizeof(d));
				if (st != TW_OK) {
					tw__cuda_chan_fail(ch, st, d);
					return;
				}
			}
			if (kc->dev < 0 || kc->slot >= 0) {
				tw_buffer b = { kc->dev >= 0 ? cb_slot_mem(c, 1, kc->slot) : kc->ptr, kc->n,
					            tw_device_cpu(), NULL };
				if (bch->cpu->ops->recv(bch->cpu, &b, cb_on_moved, k) != TW_OK) {
					tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing a chunk");
					return;
				}
				ch->refs++;
				k->state = CB_MOVING;
			}
		}
		if (k->state < CB_MOVING)
			may_recv = false;
	}
}

static void cb_pump(tw_cuda_chan *ch)
{
	cb_channel *bch = (cb_channel *)ch;
	ch->refs++;
	if (ch->failed == TW_OK && ch->open)
		cb_pump_sends(bch);
	if (ch->failed == TW_OK && ch->open)
		cb_pump_recvs(bch);
	if (ch->failed != TW_OK) {
		/* the first failure closes the connections: what waits on them ends */
		if (bch->ctl) {
			bch->ctl->ops->close(bch->ctl);
			bch->ctl = NULL;
		}
		if (bch->cpu) {
			bch->cpu->ops->close(bch->cpu);
			bch->cpu = NULL;
		}
		/* the chunks nothing is under way for (no copy, CPU operation or
		 * read to wait for) end now */
		for (int which = 0; which < 2; which++)
			for (tw_cuda_chunk *kc = ch->q[which]; kc; kc = kc->next) {
				cb_chunk *k = (cb_chunk *)kc;
				if (!kc->ended && !k->rts_wait &&
				    (k->state == CB_WAIT || k->state == CB_GOT_RTS || k->state == CB_READY))
					cb_chunk_end(k, ch->failed, ch->fail_detail);
			}
	}
	tw__cuda_chan_sweep(ch, 0, NULL);
	tw__cuda_chan_sweep(ch, 1, NULL);
	tw__cuda_chan_unref(ch);
}

static void cb_free(tw_cuda_chan *ch)
{
	tw__free(ch);
}

static const tw_cuda_chan_ops cb_chan_ops = {
	.pump = cb_pump,
	.free = cb_free,
	.chunk_struct = sizeof(cb_chunk),
	.chunk_bytes = TW_CUDA_BASIC_CHUNK,
};

static const tw_channel_instance_ops cb_instance_ops = {
	.send = tw__cuda_chan_send,
	.recv = tw__cuda_chan_recv,
	.close = tw__cuda_chan_close_op,
	.max_tensor = tw__cuda_chan_max_tensor,
};

static size_t cb_num_connections(tw_channel_ctx *base)
{
	cb_ctx *c = (cb_ctx *)base;
	return 1 + c->cpu->ops->num_connections(c->cpu);
}

static tw_status_t cb_open(tw_channel_ctx *base, tw_endpoint_t endpoint, tw_conn *const *conns,
                           size_t num_conns, unsigned flags, tw_channel **out, char *detail,
                           size_t detail_len)
{
	cb_ctx *c = (cb_ctx *)base;
	size_t want = cb_num_connections(base);
	cb_channel *ch = num_conns == want ? tw__calloc(1, sizeof(*ch)) : NULL;
	if (!ch) {
		for (size_t i = 0; i < num_conns; i++)
			conns[i]->ops->close(conns[i]);
		if (num_conns != want)
			tw__detail(detail, detail_len, "cuda_basic channel: needs %zu connections, got %zu",
			           want, num_conns);
		else
			tw__detail(detail, detail_len, "cuda_basic channel: out of memory");
		return num_conns != want ? TW_ERR_INVAL : TW_ERR_NOMEM;
	}
	char d[TW_DETAIL_MAX];
	tw_status_t st = c->cpu->ops->open(c->cpu, endpoint, conns, num_conns - 1, 0, &ch->cpu, d,
	                                   sizeof(d));
	if (st != TW_OK) {
		conns[num_conns - 1]->ops->close(conns[num_conns - 1]);
		tw__free(ch);
		tw__detail(detail, detail_len, "cuda_basic channel: its CPU channel: %s", d);
		return st;
	}
	ch->ctl = conns[num_conns - 1];
	tw__cuda_chan_open(&ch->c, &c->cc, &cb_instance_ops, &cb_chan_ops);
	*out = &ch->c.base;
	return TW_OK;
}

/* ---- context ------------------------------------------------------------------------- */

/* The device descriptor: a nop Structure(2){type string, the CPU channel's
 * descriptor string} (wire/packets.h), e.g. cuda -> b9 02 bd 04 "cuda" bd
 * 03 "any". */
static tw_status_t cb_descriptor(tw_channel_device *d, const char *type, const char *cpu_desc)
{
	tw_wire_cuda_basic_device v = { { (char *)type, strlen(type) },
		                            { (char *)cpu_desc, strlen(cpu_desc) } };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_cuda_basic_device(&w, &v);
	tw_status_t st = tw__nop_writer_finish(&w);
	if (st == TW_OK && !(d->descriptor = tw__memdup_str(w.buf, w.len)))
		st = TW_ERR_NOMEM;
	d->descriptor_len = w.len;
	tw__nop_writer_free(&w);
	return st;
}

static bool cb_decode(const char *desc, size_t len, tw_wire_cuda_basic_device *v)
{
	size_t used = 0;
	if (tw__wire_decode_cuda_basic_device(desc, len, v, &used, NULL, 0) != TW_OK)
		return false;
	if (used == len)
		return true;
	tw__wire_cuda_basic_device_free(v);
	return false;
}

static bool cb_is_cpu(const tw_wire_cuda_basic_device *v)
{
	return v->device_type.n == 3 && memcmp(v->device_type.s, "cpu", 3) == 0;
}

/* As stock decides (both blobs decode, not both cpu, the CPU channels'
 * descriptors equal), except that a blob that does not decode is "no"
 * where stock throws. */
static bool cb_can_communicate(tw_channel_ctx *c, const tw_channel_device *local,
                               const char *remote, size_t remote_len,
                               const tw_channel_offer *offer)
{
	tw_wire_cuda_basic_device l, r;
	if (!cb_decode(local->descriptor, local->descriptor_len, &l))
		return false;
	if (!cb_decode(remote, remote_len, &r)) {
		tw__wire_cuda_basic_device_free(&l);
		return false;
	}
	bool ok = !(cb_is_cpu(&l) && cb_is_cpu(&r)) && l.cpu_descriptor.n == r.cpu_descriptor.n &&
	          memcmp(l.cpu_descriptor.s, r.cpu_descriptor.s, l.cpu_descriptor.n) == 0;
	tw__wire_cuda_basic_device_free(&l);
	tw__wire_cuda_basic_device_free(&r);
	return ok;
}

static void cb_destroy(tw_channel_ctx *base)
{
	cb_ctx *c = (cb_ctx *)base;
	if (c->cpu)
		c->cpu->ops->destroy(c->cpu);
	tw__cuda_ctx_fini(&c->cc);
	tw__free(c);
}

static void cb_shutdown(tw_channel_ctx *base)
{
	cb_ctx *c = (cb_ctx *)base;
	tw__cuda_ctx_drain(&c->cc);
	for (int i = 0; i < 2; i++)
		if (c->pools[i].mem) {
			(void)c->cc.cu->cuMemFreeHost(c->pools[i].mem);
			c->pools[i].mem = NULL;
		}
	if (c->cpu && c->cpu->ops->shutdown)
		c->cpu->ops->shutdown(c->cpu);
}

static tw_status_t cb_create(const tw_channel_env *env, const char *options, tw_channel_ctx **out,
                             char *detail, size_t detail_len)
{
	tw_status_t st = tw__options_parse("cuda_basic channel", options, NULL, 0, NULL, NULL, 0,
	                                   detail, detail_len);
	if (st != TW_OK)
		return st;
	cb_ctx *c = tw__calloc(1, sizeof(*c));
	if (!c) {
		tw__detail(detail, detail_len, "cuda_basic channel: out of memory");
		return TW_ERR_NOMEM;
	}
	st = tw__cuda_ctx_init(&c->cc, &tw__cuda_basic_channel_ops, env, true, detail, detail_len);
	char d[TW_DETAIL_MAX];
	if (st == TW_OK) {
		st = tw__basic_channel_ops.create(env, NULL, &c->cpu, d, sizeof(d));
		if (st != TW_OK)
			tw__detail(detail, detail_len, "cuda_basic channel: its CPU channel: %s", d);
	}
	const char *cpu_desc = st == TW_OK ? c->cpu->devices[0].descriptor : "";
	for (size_t i = 0; st == TW_OK && i < c->cc.base.num_devices; i++) {
		tw_channel_device *dv = &c->cc.base.devices[i];
		st = cb_descriptor(dv, i == 0 ? "cpu" : "cuda", cpu_desc);
		if (st != TW_OK)
			tw__detail(detail, detail_len, "cuda_basic channel: out of memory");
	}
	if (st != TW_OK) {
		if (c->cc.cu)
			cb_destroy(&c->cc.base);
		else
			tw__free(c);
		return st;
	}
	*out = &c->cc.base;
	return TW_OK;
}

const tw_channel_ops tw__cuda_basic_channel_ops = {
	.kind = "cuda_basic",
	.create = cb_create,
	.can_communicate = cb_can_communicate,
	.num_connections = cb_num_connections,
	.open = cb_open,
	.shutdown = cb_shutdown,
	.destroy = cb_destroy,
};
