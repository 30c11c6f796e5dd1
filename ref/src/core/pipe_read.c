/*
 * pipe_read.c - reading messages (spec/wire.md 3.11): one Descriptor at a time
 * from D, payload reads, DescriptorReplies on R, tensors received through
 * channels, and each read's callback exactly once, in order. The model is
 * told in pipe.c's opening comment.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/pipe_impl.h"
#include "platform/mutant.h"
#include "platform/platform.h"

/* ---- reading messages ---------------------------------------------------------------- */

static void tw__pipe_deliver_desc(void *arg)
{
	tw_in_msg *m = arg;
	tw_pipe *p = m->pipe;
	bool ok = m->status == TW_OK;
	if (ok) {
		/* tw_pipe_read takes it from now on, not before its callback: a
		 * read accepted earlier could fail the message under this
		 * delivery (it is freed when a read fails). */
		pthread_mutex_lock(&p->ctx->mu);
		p->delivered = m;
		pthread_mutex_unlock(&p->ctx->mu);
	}
	m->desc_cb(p, m->status, ok ? "" : m->detail, ok ? &m->view : NULL, m->desc_arg);
	if (TW_MUTANT("descriptor_cb_twice"))
		m->desc_cb(p, m->status, ok ? "" : m->detail, ok ? &m->view : NULL, m->desc_arg);
	if (!ok) {
		/* No descriptor: nothing more will happen to this message. */
		tw__list_remove(&m->link);
		tw__in_msg_free(m);
	}
	tw__pipe_release(p);
	tw__pipe_unref(p); /* the read_descriptor call's reference */
}

static void tw__pipe_deliver_read(void *arg)
{
	tw_in_msg *m = arg;
	tw_pipe *p = m->pipe;
	m->read_cb(p, m->status, m->status == TW_OK ? "" : m->detail, m->read_arg);
	tw__list_remove(&m->link);
	tw__in_msg_free(m);
	tw__pipe_release(p);
	tw__pipe_unref(p); /* the read call's reference */
}

static void tw__pipe_in_take_error(tw_in_msg *m)
{
	tw_pipe *p = m->pipe;
	if (m->status == TW_OK && p->state == TW_PIPE_FAILED) {
		m->status = p->err;
		snprintf(m->detail, sizeof(m->detail), "%s", p->err_detail);
	}
}

/* `earlier`: an earlier message's Descriptor callback is still due
 * (its read is in flight): descriptor callbacks run in order too. */
static void tw__pipe_in_check(tw_in_msg *m, bool earlier)
{
	tw_pipe *p = m->pipe;
	if (m->pending > 0 || earlier)
		return;
	/* A descriptor that will never come. */
	if (!m->desc_cb_fired && p->state == TW_PIPE_FAILED &&
	    (m->state == TW_IN_WANT_DESC || m->state == TW_IN_DESC_POSTED) &&
	    !(TW_MUTANT("close_cb_never") && p->err == TW_ERR_CLOSED)) {
		tw__pipe_in_take_error(m);
		m->desc_cb_fired = true;
		p->inflight++;
		tw__loop_defer(&p->ctx->loop, &m->desc_dfr, tw__pipe_deliver_desc, m);
	}
}

/* Read callbacks run in message order. */
static void tw__pipe_deliver_reads(tw_pipe *p)
{
	tw_list *it;
	for (it = p->in_msgs.next; it != &p->in_msgs; it = it->next) {
		tw_in_msg *m = TW_CONTAINER_OF(it, tw_in_msg, link);
		if (!m->read_requested) {
			if (m->state == TW_IN_DESC_READY && p->state != TW_PIPE_FAILED)
				break;
			continue; /* failed before read(): never blocks the others */
		}
		if (m->read_cb_fired)
			continue;
		if (m->pending > 0 || (m->held && p->state != TW_PIPE_FAILED))
			break;
		tw__pipe_in_take_error(m);
		m->read_cb_fired = true;
		p->inflight++;
		tw__loop_defer(&p->ctx->loop, &m->read_dfr, tw__pipe_deliver_read, m);
	}
}

void tw__pipe_in_check_all(tw_pipe *p)
{
	tw_list *it, *tmp;
	bool earlier = false;
	TW_LIST_FOREACH_SAFE(it, tmp, &p->in_msgs)
	{
		tw_in_msg *m = TW_CONTAINER_OF(it, tw_in_msg, link);
		tw__pipe_in_check(m, earlier);
		earlier = earlier || !m->desc_cb_fired;
	}
	tw__pipe_deliver_reads(p);
}

/* An operation of message m finished on connection c (NULL: a channel's;
 * `write`: the DescriptorReply, else a read). */
static void tw__pipe_in_op_done(tw_in_msg *m, tw_conn *c, bool write, tw_status_t status,
                                const char *what, const char *detail)
{
	tw_pipe *p = m->pipe;
	m->pending--;
	if (status != TW_OK) {
		m->held = true;
		tw__pipe_conn_op_failed(p, c, write, status, what, detail);
	}
	tw__pipe_in_check_all(p);
	tw__pipe_try_end(p); /* an ending pipe may have waited for this read */
	tw__pipe_release(p);
}

/* A frame that follows a Descriptor on D: a payload, or an eager tensor. */
static void tw__pipe_on_d_frame(tw_in_msg *m, tw_conn *c, tw_status_t status, const char *detail,
                                const char *what)
{
	if (status == TW_OK)
		m->pipe->d_frames++;
	tw__pipe_in_op_done(m, c, false, status, what, detail);
}

static void tw__pipe_on_payload(tw_conn *c, tw_status_t status, const char *detail, void *buf,
                                uint64_t len, void *arg)
{
	tw__pipe_on_d_frame(arg, c, status, detail, "reading a payload");
}

static void tw__pipe_on_eager(tw_conn *c, tw_status_t status, const char *detail, void *buf,
                              uint64_t len, void *arg)
{
	tw__pipe_on_d_frame(arg, c, status, detail, "reading an eager tensor (spec 8.4)");
}

static void tw__pipe_on_reply_written(tw_conn *c, tw_status_t status, const char *detail, void *arg)
{
	tw__pipe_in_op_done(arg, c, true, status, "writing a DescriptorReply", detail);
}

static void tw__pipe_on_tensor_received(tw_channel *ch, tw_status_t status, const char *detail,
                                        void *arg)
{
	tw__pipe_in_op_done(arg, NULL, false, status, "receiving a tensor", detail);
}

static void tw__pipe_on_descriptor(tw_conn *c, tw_status_t status, const char *detail, void *buf,
                                   uint64_t len, void *arg)
{
	tw_in_msg *m = arg;
	tw_pipe *p = m->pipe;
	m->pending--;
	if (status != TW_OK) {
		/* No descriptor: the message waits (state DESC_POSTED) for the
		 * pipe's end to give it its error. */
		tw__pipe_conn_failed(p, c, status, "reading a Descriptor", detail);
		goto out;
	}
	if (p->state == TW_PIPE_FAILED)
		goto out;
	char dd[TW_DETAIL_MAX] = "";
	size_t used, limit = tw__ctx_decode_budget(p->ctx), budget = limit;
	tw_status_t st = tw__wire_decode_descriptor_within(buf, (size_t)len, &budget, &m->wire, &used,
	                                                   dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "bad Descriptor: %s", dd);
		goto out;
	}
	m->have_wire = true;
	st = tw__in_msg_build_view(m, budget, limit, dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "bad Descriptor: %s", dd);
		goto out;
	}
	p->d_frames++;
	p->heard = true;
	m->state = TW_IN_DESC_READY;
	m->desc_cb_fired = true;
	p->inflight++;
	if (TW_MUTANT("descriptor_cb_late")) {
		p->mut_held_desc = m; /* delivered when the next read_descriptor comes */
		goto out;
	}
	tw__loop_defer(&p->ctx->loop, &m->desc_dfr, tw__pipe_deliver_desc, m);
out:
	tw__free(buf);
	tw__pipe_in_check_all(p);
	tw__pipe_release(p);
}

void tw__pipe_pump_reads(tw_pipe *p)
{
	if (p->state != TW_PIPE_ESTABLISHED || p->d_busy)
		return;
	tw_list *it;
	for (it = p->in_msgs.next; it != &p->in_msgs; it = it->next) {
		tw_in_msg *m = TW_CONTAINER_OF(it, tw_in_msg, link);
		if (m->state != TW_IN_WANT_DESC)
			continue;
		tw_status_t st = p->d->ops->read_alloc(p->d, p->ctx->max_object, tw__pipe_on_descriptor, m);
		if (st != TW_OK) {
			tw__pipe_fail(p, st, "reading a Descriptor: out of memory");
			return;
		}
		m->state = TW_IN_DESC_POSTED;
		m->pending++;
		p->inflight++;
		p->d_busy = m;
		return;
	}
}

static void tw__pipe_do_read_descriptor(void *arg)
{
	tw_in_msg *m = arg;
	tw_pipe *p = m->pipe;
	if (TW_MUTANT("descriptor_cb_late") && p->mut_held_desc) {
		tw_in_msg *h = p->mut_held_desc;
		p->mut_held_desc = NULL;
		tw__loop_defer(&p->ctx->loop, &h->desc_dfr, tw__pipe_deliver_desc, h);
	}
	tw__list_push_back(&p->in_msgs, &m->link);
	tw__pipe_op_deadline(p, m->desc_timeout_ms, &m->deadline);
	if (p->state == TW_PIPE_FAILED)
		tw__pipe_in_check_all(p);
	else
		tw__pipe_pump_reads(p);
}

tw_status_t tw_pipe_read_descriptor(tw_pipe *p, tw_read_descriptor_cb cb, void *arg)
{
	static const char fn[] = "tw_pipe_read_descriptor";
	tw__api_clear();
	if (!p || !cb)
		return tw__api_fail(TW_ERR_INVAL, "%s: pipe and cb must not be NULL", fn);
	tw_in_msg *m = tw__calloc(1, sizeof(*m));
	if (!m)
		return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
	tw__list_init(&m->link);
	tw__nop_writer_init(&m->reply);
	m->pipe = p;
	m->desc_cb = cb;
	m->desc_arg = arg;
	m->state = TW_IN_WANT_DESC;
	m->desc_timeout_ms = tw__pipe_op_timeout(p);
	tw__pipe_ref(p);
	if (!tw__loop_post(&p->ctx->loop, &m->desc_dfr, tw__pipe_do_read_descriptor, m)) {
		tw__in_msg_free(m);
		tw__pipe_unref(p);
		return tw__ctx_unposted(p->ctx, fn);
	}
	return TW_OK;
}

static void tw__pipe_do_read(void *arg)
{
	tw_in_msg *m = arg;
	tw_pipe *p = m->pipe;
	if (TW_MUTANT("read_cb_early") && p->state != TW_PIPE_FAILED) {
		m->read_cb(p, TW_OK, "", m->read_arg); /* before the bytes are in */
		m->read_cb = tw__mutant_ignore_cb;
	}
	m->read_requested = true;
	m->state = TW_IN_READING;
	tw__pipe_op_deadline(p, m->read_timeout_ms, &m->deadline);
	if (p->d_busy == m)
		p->d_busy = NULL;
	if (p->state == TW_PIPE_FAILED) {
		tw__pipe_in_check_all(p);
		return;
	}
	tw_status_t st = TW_OK;
	/* Payload frames follow the Descriptor on D (spec 3.10). */
	for (size_t i = 0; i < m->view.num_payloads && st == TW_OK; i++) {
		st = p->d->ops->read_into(p->d, m->pay_bufs[i], m->view.payloads[i].length,
		                          tw__pipe_on_payload, m);
		if (st == TW_OK) {
			m->pending++;
			p->inflight++;
		}
	}
	/* Eager tensors follow them, a frame each (spec 8.4); the
	 * DescriptorReply names the device of the others that had none. */
	size_t untargeted = 0;
	for (size_t i = 0; i < m->view.num_tensors; i++) {
		untargeted += tw__pipe_needs_reply(p, &m->view.tensors[i]);
		if (st != TW_OK || !tw__pipe_eager(p, &m->view.tensors[i]))
			continue;
		st = p->d->ops->read_into(p->d, m->ten_allocs[i].data, m->view.tensors[i].length,
		                          tw__pipe_on_eager, m);
		if (st == TW_OK) {
			m->pending++;
			p->inflight++;
		}
	}
	if (st == TW_OK && untargeted > 0) {
		tw_wire_device *devs = tw__calloc(untargeted, sizeof(*devs));
		if (!devs) {
			st = TW_ERR_NOMEM;
		} else {
			size_t k = 0;
			for (size_t i = 0; i < m->view.num_tensors; i++) {
				if (!tw__pipe_needs_reply(p, &m->view.tensors[i]))
					continue;
				devs[k].type.s = m->ten_allocs[i].device.type;
				devs[k].type.n = strnlen(m->ten_allocs[i].device.type, TW_DEVICE_TYPE_MAX);
				devs[k].index = m->ten_allocs[i].device.index;
				k++;
			}
			tw_wire_descriptor_reply r = { untargeted, devs };
			tw__wire_encode_descriptor_reply(&m->reply, &r);
			tw__free(devs);
			st = tw__nop_writer_finish(&m->reply);
		}
		if (st == TW_OK) {
			tw_iov iov = { m->reply.buf, m->reply.len };
			st = p->r->ops->write(p->r, &iov, 1, TW_WRITE_OBJECT, tw__pipe_on_reply_written, m);
		}
		if (st == TW_OK) {
			m->pending++;
			p->inflight++;
		}
	}
	for (size_t i = 0; i < m->view.num_tensors && st == TW_OK; i++) {
		const tw_tensor *t = &m->view.tensors[i];
		if (t->length == 0 || tw__pipe_eager(p, t))
			continue;
		const tw_pipe_pair *pp = tw__pipe_find_pair(p, &m->ten_allocs[i].device, &t->source_device);
		tw_buffer b = { m->ten_allocs[i].data, t->length, m->ten_allocs[i].device,
		                m->ten_allocs[i].cuda_stream };
		tw_channel *ch = p->chans[pp->chan].ch;
		st = ch->ops->recv(ch, &b, tw__pipe_on_tensor_received, m);
		if (st == TW_OK) {
			m->pending++;
			p->inflight++;
		}
	}
	if (st != TW_OK)
		tw__pipe_fail(p, st, "reading a message: out of memory");
	tw__pipe_pump_reads(p);
	tw__pipe_in_check_all(p);
	tw__pipe_try_end(p); /* an ending pipe may have waited for this read() */
}

tw_status_t tw_pipe_read(tw_pipe *p, const tw_allocation *alloc, tw_read_cb cb, void *arg)
{
	static const char fn[] = "tw_pipe_read";
	char db1[40], db2[40];
	tw__api_clear();
	if (!p || !alloc || !cb)
		return tw__api_fail(TW_ERR_INVAL, "%s: pipe, alloc and cb must not be NULL", fn);
	tw_status_t st = TW_OK;
	pthread_mutex_lock(&p->ctx->mu);
	tw_in_msg *m = p->delivered;
	if (!m) {
		st = tw__api_fail(TW_ERR_INVAL,
		                  "%s: no descriptor is waiting for a read (call "
		                  "tw_pipe_read_descriptor and wait for its callback)",
		                  fn);
		goto out;
	}
	const tw_message *v = &m->view;
	if (alloc->num_payloads != v->num_payloads || alloc->num_tensors != v->num_tensors) {
		st = tw__api_fail(TW_ERR_INVAL,
		                  "%s: the allocation has %zu payloads and %zu tensors, the descriptor "
		                  "%zu and %zu",
		                  fn, alloc->num_payloads, alloc->num_tensors, v->num_payloads,
		                  v->num_tensors);
		goto out;
	}
	if ((alloc->num_payloads && !alloc->payloads) || (alloc->num_tensors && !alloc->tensors)) {
		st = tw__api_fail(TW_ERR_INVAL, "%s: payload or tensor array is NULL", fn);
		goto out;
	}
	for (size_t i = 0; i < v->num_payloads; i++) {
		if (v->payloads[i].length > 0 && !alloc->payloads[i]) {
			st = tw__api_fail(TW_ERR_INVAL, "%s: payload %zu buffer is NULL (length %zu)", fn, i,
			                  v->payloads[i].length);
			goto out;
		}
	}
	for (size_t i = 0; i < v->num_tensors; i++) {
		const tw_tensor_allocation *ta = &alloc->tensors[i];
		const tw_tensor *t = &v->tensors[i];
		if (t->length > 0 && !ta->data) {
			st = tw__api_fail(TW_ERR_INVAL, "%s: tensor %zu buffer is NULL (length %zu)", fn, i,
			                  t->length);
			goto out;
		}
		if (!tw__device_valid(&ta->device)) {
			st = tw__api_fail(TW_ERR_INVAL, "%s: tensor %zu allocation has a bad device type", fn, i);
			goto out;
		}
		if (t->has_target_device && !tw__device_eq(&ta->device, &t->target_device)) {
			st = tw__api_fail(TW_ERR_INVAL, "%s: tensor %zu must be received on %s, not %s", fn, i,
			                  tw__device_str(&t->target_device, db1, sizeof(db1)),
			                  tw__device_str(&ta->device, db2, sizeof(db2)));
			goto out;
		}
		if (t->length > 0 && !tw__pipe_find_pair(p, &ta->device, &t->source_device)) {
			st = tw__api_fail(TW_ERR_UNSUPPORTED,
			                  "%s: no channel of this pipe moves tensor %zu from %s to %s", fn, i,
			                  tw__device_str(&t->source_device, db1, sizeof(db1)),
			                  tw__device_str(&ta->device, db2, sizeof(db2)));
			goto out;
		}
	}
	m->pay_bufs = tw__calloc(v->num_payloads, sizeof(void *));
	m->ten_allocs = tw__calloc(v->num_tensors, sizeof(tw_tensor_allocation));
	if (!m->pay_bufs || !m->ten_allocs) {
		tw__free(m->pay_bufs);
		tw__free(m->ten_allocs);
		m->pay_bufs = NULL;
		m->ten_allocs = NULL;
		st = tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
		goto out;
	}
	for (size_t i = 0; i < v->num_payloads; i++)
		m->pay_bufs[i] = alloc->payloads[i];
	for (size_t i = 0; i < v->num_tensors; i++)
		m->ten_allocs[i] = alloc->tensors[i];
	m->read_cb = cb;
	m->read_arg = arg;
	m->read_timeout_ms = tw__pipe_op_timeout(p);
	tw__pipe_ref(p);
	if (!tw__loop_post(&p->ctx->loop, &m->read_dfr, tw__pipe_do_read, m)) {
		tw__pipe_unref(p);
		st = tw__ctx_unposted(p->ctx, fn);
		goto out;
	}
	p->delivered = NULL;
out:
	pthread_mutex_unlock(&p->ctx->mu);
	return st;
}
