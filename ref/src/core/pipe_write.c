/*
 * pipe_write.c - writing messages (spec/wire.md 3.10): Descriptors and payloads
 * on D, DescriptorReplies read from R, tensors handed to channels, and each
 * write's callback exactly once, in order. The model is told in pipe.c's
 * opening comment.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/pipe_impl.h"
#include "platform/mutant.h"
#include "platform/platform.h"

/* ---- writing messages ---------------------------------------------------------------- */

/* Where a mutant's early callback leaves the real one (a write and a read
 * callback have the same type). */
void tw__mutant_ignore_cb(tw_pipe *p, tw_status_t status, const char *detail, void *arg)
{
	(void)p;
	(void)status;
	(void)detail;
	(void)arg;
}

static void tw__pipe_deliver_write(void *arg)
{
	tw_out_msg *m = arg;
	tw_pipe *p = m->pipe;
	if (!(TW_MUTANT("write_cb_never") && m->status == TW_OK))
		m->cb(p, m->status, m->status == TW_OK ? "" : m->detail, m->arg);
	if (TW_MUTANT("write_cb_twice"))
		m->cb(p, m->status, m->status == TW_OK ? "" : m->detail, m->arg);
	tw__out_msg_free(m);
	tw__pipe_release(p);
	tw__pipe_unref(p); /* the write call's reference */
}

/* Marks finished messages and delivers callbacks in message order. Once the
 * pipe failed, or its peer is known to be gone (writes_dead), every message
 * whose callback has not run gets that error as soon as no transport or
 * channel operation holds its buffers any more: also one whose bytes were
 * all handed over but that waits behind an earlier message, which the peer
 * can then never receive in order (spec 5.6.d). */
void tw__pipe_out_check_all(tw_pipe *p)
{
	bool failed = p->state == TW_PIPE_FAILED;
	bool dead = failed || p->writes_dead;
	tw_status_t dead_st = failed ? p->err : p->wr_status;
	const char *dead_detail = failed ? p->err_detail : p->wr_detail;
	tw_list *it, *tmp;
	bool prefix_ok = true; /* every earlier message done, with TW_OK */
	/* ... or each may still be: see `landing` */
	bool prefix_landing = true;
	TW_LIST_FOREACH_SAFE(it, tmp, &p->out_msgs)
	{
		tw_out_msg *m = TW_CONTAINER_OF(it, tw_out_msg, link);
		bool was_prefix_ok = prefix_ok, was_prefix_landing = prefix_landing;
		/* Delivered if every message before it is: the peer confirms its
		 * tensors (or will: cma's completions, ibv's landing), or all its
		 * bytes were handed over before the pipe's end began, and only an
		 * earlier message's confirmations held its callback back. */
		bool landing = m->status == TW_OK && !m->held && m->state == TW_OUT_SENDING &&
		               (m->peer_acked || (m->done_before_end && p->hs_writes == 0));
		prefix_ok = false;
		prefix_landing = was_prefix_landing && landing;
		if (m->pending > 0)
			continue;
		if (dead && !failed && landing && was_prefix_ok) {
			/* with nothing lost before it: delivered (confirmed after the
			 * peer's goodbye, or handed over before it) */
			m->done = true;
		} else if (dead && !failed && landing && was_prefix_landing) {
			/* an earlier message still waits for its confirmations, which
			 * come on other connections than the goodbye: this one is
			 * decided once they come, or fail */
			continue;
		} else if (dead && m->status == TW_OK && !TW_MUTANT("write_error_swallowed")) {
			m->status = dead_st;
			snprintf(m->detail, sizeof(m->detail), "%s", dead_detail);
			m->done = true;
		} else if (!m->done && !(m->held && !dead) &&
		           (m->status != TW_OK || m->state == TW_OUT_SENDING)) {
			m->done = true; /* (a held one: the pipe's end decides its status) */
			m->done_before_end = !p->ending;
		}
		prefix_ok = was_prefix_ok && m->done && m->status == TW_OK;
		prefix_landing = prefix_landing || prefix_ok;
	}
	while (!tw__list_empty(&p->out_msgs)) {
		tw_out_msg *m = TW_CONTAINER_OF(p->out_msgs.next, tw_out_msg, link);
		if (!m->done)
			break;
		/* TW_OK promises delivery to a peer that keeps reading, so it waits
		 * for the handshake objects still being written: without every
		 * RequestedConnection the server never establishes its side, and a
		 * writer that closes right after its callbacks would lose what it
		 * wrote (spec 5.6.e). */
		if (m->status == TW_OK && p->hs_writes > 0 && !TW_MUTANT("write_ok_before_handshake"))
			break;
		tw__list_remove(&m->link);
		p->inflight++;
		tw__loop_defer(&p->ctx->loop, &m->dfr, tw__pipe_deliver_write, m);
	}
}

/* An operation of message m failed on connection c (NULL: a channel's; a
 * write or a read). The message takes the pipe's status once the pipe has
 * failed. */
static void tw__pipe_out_op_failed(tw_out_msg *m, tw_conn *c, bool write, tw_status_t status,
                                   const char *what, const char *detail)
{
	m->held = true;
	tw__pipe_conn_op_failed(m->pipe, c, write, status, what, detail);
}

static void tw__pipe_on_out_written(tw_conn *c, tw_status_t status, const char *detail, void *arg)
{
	tw_out_msg *m = arg;
	tw_pipe *p = m->pipe;
	m->pending--;
	if (status != TW_OK)
		tw__pipe_out_op_failed(m, c, true, status, "writing a Descriptor or payload", detail);
	tw__pipe_out_check_all(p);
	if (p->writes_dead)
		tw__pipe_try_end(p); /* it may have waited for this completion */
	tw__pipe_release(p);
}

static void tw__pipe_on_tensor_sent(tw_channel *ch, tw_status_t status, const char *detail,
                                    void *arg)
{
	tw_out_msg *m = arg;
	tw_pipe *p = m->pipe;
	m->pending--;
	if (status != TW_OK)
		tw__pipe_out_op_failed(m, NULL, true, status, "sending a tensor", detail);
	tw__pipe_out_check_all(p);
	if (p->writes_dead)
		tw__pipe_try_end(p); /* it may have waited for this completion */
	tw__pipe_release(p);
}

/* A send on a channel acked by the peer (cma, cuda_ipc, cuda_xth) is done
 * once the peer says it copied the bytes: its answer was due meanwhile. */
static void tw__pipe_on_tensor_acked(tw_channel *ch, tw_status_t status, const char *detail,
                                     void *arg)
{
	tw_out_msg *m = arg;
	tw__loop_answer_due(&m->pipe->ctx->loop, false);
	tw__pipe_on_tensor_sent(ch, status, detail, arg);
}

/* Applies the DescriptorReply in buf to message m (spec 3.11). */
static void tw__pipe_take_reply(tw_pipe *p, tw_out_msg *m, const void *buf, uint64_t len)
{
	tw_wire_descriptor_reply r;
	char dd[TW_DETAIL_MAX] = "";
	size_t used, budget = tw__ctx_decode_budget(p->ctx);
	tw_status_t st = tw__wire_decode_descriptor_reply_within(buf, (size_t)len, &budget, &r, &used,
	                                                         dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_out_op_failed(m, NULL, false, st, "bad DescriptorReply", dd);
		return;
	}
	if (r.num_target_devices != m->num_untargeted && !TW_MUTANT("descriptor_reply_unchecked")) {
		tw__detail(dd, sizeof(dd), "it lists %zu devices for %zu tensors without a target device",
		           r.num_target_devices, m->num_untargeted);
		tw__wire_descriptor_reply_free(&r);
		tw__pipe_out_op_failed(m, NULL, false, TW_ERR_PROTO, "bad DescriptorReply", dd);
		return;
	}
	size_t k = 0;
	for (size_t i = 0; i < m->msg.num_tensors; i++) {
		if (!tw__pipe_needs_reply(p, &m->tensors[i]))
			continue;
		if (TW_MUTANT("descriptor_reply_unchecked") && k >= r.num_target_devices) {
			m->targets[i] = m->tensors[i].source_device;
			continue;
		}
		const tw_wire_device *wd = &r.target_devices[k++];
		if (wd->type.n == 0 || wd->type.n >= TW_DEVICE_TYPE_MAX) {
			tw__detail(dd, sizeof(dd), "targetDevices[%zu].type has %zu bytes", k - 1, wd->type.n);
			tw__wire_descriptor_reply_free(&r);
			tw__pipe_out_op_failed(m, NULL, false, TW_ERR_PROTO, "bad DescriptorReply", dd);
			return;
		}
		tw__device_from_wire(&m->targets[i], wd);
	}
	tw__wire_descriptor_reply_free(&r);
	m->state = TW_OUT_READY;
	tw__pipe_pump_writes(p);
}

/* A stock peer's pipe: each message that needs a DescriptorReply reads its
 * own from R (reads on one connection complete in order). */
static void tw__pipe_on_reply(tw_conn *c, tw_status_t status, const char *detail, void *buf,
                              uint64_t len, void *arg)
{
	tw_out_msg *m = arg;
	tw_pipe *p = m->pipe;
	m->pending--;
	if (status != TW_OK)
		tw__pipe_out_op_failed(m, c, false, status, "reading a DescriptorReply", detail);
	else if (p->state != TW_PIPE_FAILED) {
		p->heard = true;
		tw__pipe_take_reply(p, m, buf, len);
	}
	tw__free(buf);
	tw__pipe_out_check_all(p);
	tw__pipe_release(p);
}

/* A goodbye pipe: R always has this read pending (spec 8.2.a). A non-empty
 * frame is the DescriptorReply of the oldest message waiting for one; an
 * empty one is the peer's goodbye. */
static void tw__pipe_on_r_frame(tw_conn *c, tw_status_t status, const char *detail, void *buf,
                                uint64_t len, void *arg)
{
	tw_pipe *p = arg;
	if (p->state == TW_PIPE_FAILED)
		goto out;
	if (status != TW_OK) {
		tw__pipe_conn_failed(p, c, status, "reading the descriptor-reply connection", detail);
		goto out;
	}
	p->heard = true;
	if (len == 0) {
		p->goodbye_seen = true;
		tw__pipe_conn_failed(p, c, TW_ERR_EOF, "the descriptor-reply connection",
		                     "the peer said goodbye");
		goto out; /* nothing follows a goodbye */
	}
	tw_out_msg *m = NULL;
	tw_list *it;
	for (it = p->out_msgs.next; it != &p->out_msgs && !m; it = it->next) {
		tw_out_msg *x = TW_CONTAINER_OF(it, tw_out_msg, link);
		if (x->state == TW_OUT_WAIT_REPLY)
			m = x;
	}
	if (!m) {
		tw__pipe_fail(p, TW_ERR_PROTO,
		              "a DescriptorReply of %llu bytes arrived, but no message waits for one "
		              "(spec 3.11.a)",
		              (unsigned long long)len);
		goto out;
	}
	tw__pipe_take_reply(p, m, buf, len);
	tw__pipe_out_check_all(p);
	if (p->state == TW_PIPE_ESTABLISHED)
		tw__pipe_read_r(p);
out:
	tw__free(buf);
	tw__pipe_release(p);
}

void tw__pipe_read_r(tw_pipe *p)
{
	tw_status_t st = p->r->ops->read_alloc(p->r, p->ctx->max_object, tw__pipe_on_r_frame, p);
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "reading the descriptor-reply connection: out of memory");
		return;
	}
	p->inflight++;
}

static bool tw__pipe_serves_source(const tw_pipe *p, const tw_device *src)
{
	for (size_t i = 0; i < p->num_pairs; i++)
		if (tw__device_eq(&p->pairs[i].local, src))
			return true;
	return false;
}

/* The longest tensor the channels could move from `src` (to `dst`, when
 * the tensor names its target), and which channel sets that bound. */
static uint64_t tw__pipe_tensor_limit(const tw_pipe *p, const tw_tensor *t, const char **chan_out)
{
	uint64_t lim = UINT64_MAX;
	*chan_out = NULL;
	for (size_t i = 0; i < p->num_pairs; i++) {
		const tw_pipe_pair *pr = &p->pairs[i];
		if (!tw__device_eq(&pr->local, &t->source_device) ||
		    (t->has_target_device && !tw__device_eq(&pr->remote, &t->target_device)))
			continue;
		tw_channel *ch = p->chans[pr->chan].ch;
		uint64_t l = ch && ch->ops->max_tensor ? ch->ops->max_tensor(ch) : UINT64_MAX;
		if (l < lim) {
			lim = l;
			*chan_out = p->chans[pr->chan].reg->name;
		}
	}
	return lim;
}

/* Whether every part of a message fits what this pipe's transport and
 * channels can carry (spec 2.5); if not, fails the message (not the pipe)
 * with a detail naming the part, the limit and the backend, before any of
 * it is sent. */
static bool tw__pipe_message_fits(tw_pipe *p, tw_out_msg *m)
{
	tw_transport_limits lim;
	tw__transport_limits(p->d->transport, &lim);
	const char *tname = p->d->transport->ops->kind;
	if (m->desc.len > lim.max_packet) {
		tw__detail(m->detail, sizeof(m->detail),
		           "tw_pipe_write: %s: the message's Descriptor is %llu bytes; transport %s "
		           "carries packets of at most %llu bytes (spec 2.5): send less metadata or "
		           "fewer payloads and tensors per message",
		           p->label, (unsigned long long)m->desc.len, tname,
		           (unsigned long long)lim.max_packet);
		goto fail;
	}
	for (size_t i = 0; i < m->msg.num_payloads; i++) {
		if (m->payloads[i].length <= lim.max_frame)
			continue;
		tw__detail(m->detail, sizeof(m->detail),
		           "tw_pipe_write: %s: payload %zu is %llu bytes; transport %s carries frames "
		           "of at most %llu bytes (spec 2.5)",
		           p->label, i, (unsigned long long)m->payloads[i].length, tname,
		           (unsigned long long)lim.max_frame);
		goto fail;
	}
	for (size_t i = 0; i < m->msg.num_tensors; i++) {
		const char *chan;
		uint64_t tl = tw__pipe_tensor_limit(p, &m->tensors[i], &chan);
		if (m->tensors[i].length <= tl)
			continue;
		tw__detail(m->detail, sizeof(m->detail),
		           "tw_pipe_write: %s: tensor %zu is %llu bytes; channel %s over transport %s "
		           "moves at most %llu bytes per tensor (spec 2.5)",
		           p->label, i, (unsigned long long)m->tensors[i].length, chan, tname,
		           (unsigned long long)tl);
		goto fail;
	}
	return true;
fail:
	m->status = TW_ERR_UNSUPPORTED;
	return false;
}

/* One frame of message m on D (its Descriptor, a payload, an eager tensor). */
static tw_status_t tw__pipe_d_frame(tw_pipe *p, tw_out_msg *m, const void *data, uint64_t len,
                                    unsigned flags)
{
	tw_iov iov = { data, len };
	tw_status_t st = p->d->ops->write(p->d, &iov, 1, flags, tw__pipe_on_out_written, m);
	if (st == TW_OK) {
		m->pending++;
		p->inflight++;
	}
	return st;
}

/* Puts the Descriptor and payload frames of a queued message on D and, if
 * it needs one, queues the read of its DescriptorReply on R. */
static tw_status_t tw__pipe_post_descriptor(tw_pipe *p, tw_out_msg *m)
{
	char db1[40], db2[40];
	for (size_t i = 0; i < m->msg.num_tensors; i++) {
		const tw_tensor *t = &m->tensors[i];
		bool ok = t->has_target_device
		                  ? tw__pipe_find_pair(p, &t->source_device, &t->target_device) != NULL
		                  : tw__pipe_serves_source(p, &t->source_device);
		if (ok || t->length == 0)
			continue;
		m->status = TW_ERR_UNSUPPORTED;
		if (t->has_target_device)
			tw__detail(m->detail, sizeof(m->detail),
			           "tw_pipe_write: %s: no channel of this pipe moves tensor %zu from %s to %s",
			           p->label, i, tw__device_str(&t->source_device, db1, sizeof(db1)),
			           tw__device_str(&t->target_device, db2, sizeof(db2)));
		else
			tw__detail(m->detail, sizeof(m->detail),
			           "tw_pipe_write: %s: no channel of this pipe serves tensor %zu on %s",
			           p->label, i, tw__device_str(&t->source_device, db1, sizeof(db1)));
		return TW_OK; /* this message fails, the pipe does not */
	}
	if (!tw__pipe_message_fits(p, m))
		return TW_OK; /* the same */
	/* Eager tensors (spec 8.4) go on D too; a DescriptorReply is due only
	 * for the other tensors without a target device. */
	size_t after = m->msg.num_payloads; /* frames behind the Descriptor */
	m->num_untargeted = 0;
	for (size_t i = 0; i < m->msg.num_tensors; i++) {
		after += tw__pipe_eager(p, &m->tensors[i]);
		m->num_untargeted += tw__pipe_needs_reply(p, &m->tensors[i]);
		/* noreply (spec 8.5): the receiver can only take it on the CPU */
		if (p->ext_noreply && !m->tensors[i].has_target_device)
			m->targets[i] = tw_device_cpu();
	}
	/* Every frame but the last says more follow: one system call for the
	 * message where the transport can (TW_WRITE_MORE). */
	tw_status_t st = tw__pipe_d_frame(p, m, m->desc.buf, m->desc.len,
	                                  TW_WRITE_OBJECT | (after ? TW_WRITE_MORE : 0));
	for (size_t j = 0; j < m->msg.num_payloads && st == TW_OK; j++) {
		size_t i = TW_MUTANT("payloads_reordered") ? m->msg.num_payloads - 1 - j : j;
		st = tw__pipe_d_frame(p, m, m->payloads[i].data, m->payloads[i].length,
		                      --after ? TW_WRITE_MORE : 0);
	}
	for (size_t j = 0; j < m->msg.num_tensors && st == TW_OK; j++) {
		size_t i = TW_MUTANT("eager_tensors_reordered") ? m->msg.num_tensors - 1 - j : j;
		if (tw__pipe_eager(p, &m->tensors[i]))
			st = tw__pipe_d_frame(p, m, m->tensors[i].data, m->tensors[i].length,
			                      --after ? TW_WRITE_MORE : 0);
	}
	if (st != TW_OK)
		return st;
	if (m->num_untargeted > 0 && p->ext_goodbye) {
		m->state = TW_OUT_WAIT_REPLY; /* R's standing read brings the reply */
	} else if (m->num_untargeted > 0) {
		st = p->r->ops->read_alloc(p->r, p->ctx->max_object, tw__pipe_on_reply, m);
		if (st != TW_OK)
			return st;
		m->pending++;
		p->inflight++;
		m->state = TW_OUT_WAIT_REPLY;
	} else {
		m->state = TW_OUT_READY;
	}
	return TW_OK;
}

static tw_status_t tw__pipe_send_tensors(tw_pipe *p, tw_out_msg *m)
{
	char db1[40], db2[40];
	m->state = TW_OUT_SENDING;
	/* Delivered even if its last completion comes after the peer's goodbye:
	 * every tensor's channel is acked by the peer, or every write of the
	 * message (Descriptor and payloads on the pipe's connection, tensors on
	 * the channels) completes only once landed in the peer's memory. */
	tw_transport_limits lim;
	lim.writes_land = false;
	if (p->r)
		tw__transport_limits(p->r->transport, &lim);
	bool all_land = lim.writes_land;
	m->peer_acked = all_land;
	bool all_acked = true;
	for (size_t i = 0; i < m->msg.num_tensors; i++) {
		const tw_tensor *t = &m->tensors[i];
		if (t->length == 0 && !TW_MUTANT("zero_length_tensor_framed"))
			continue; /* no channel traffic at all (spec 3.10) */
		if (tw__pipe_eager(p, t))
			continue; /* on D already (spec 8.4) */
		const tw_pipe_pair *pp = tw__pipe_find_pair(p, &t->source_device, &m->targets[i]);
		if (!pp) {
			tw__pipe_fail(p, TW_ERR_PROTO,
			              "the peer asked for tensor %zu on %s; no channel moves %s to it", i,
			              tw__device_str(&m->targets[i], db1, sizeof(db1)),
			              tw__device_str(&t->source_device, db2, sizeof(db2)));
			return TW_ERR_PROTO;
		}
		tw_buffer b = { t->data, t->length, t->source_device, t->cuda_stream };
		tw_channel *ch = p->chans[pp->chan].ch;
		bool acked = ch->ops->acked_by_peer;
		all_acked = all_acked && acked;
		all_land = all_land && ch->ops->sends_land && ch->ops->sends_land(ch);
		m->peer_acked = all_acked || all_land;
		if (acked) /* before the send: its callback may not wait for us */
			tw__loop_answer_due(&p->ctx->loop, true);
		tw_status_t st =
		    ch->ops->send(ch, &b, acked ? tw__pipe_on_tensor_acked : tw__pipe_on_tensor_sent, m);
		if (st != TW_OK) {
			if (acked)
				tw__loop_answer_due(&p->ctx->loop, false);
			tw__pipe_fail(p, st, "sending tensor %zu: out of memory", i);
			return st;
		}
		m->pending++;
		p->inflight++;
	}
	return TW_OK;
}

void tw__pipe_pump_writes(tw_pipe *p)
{
	if (p->state != TW_PIPE_ESTABLISHED)
		return;
	if (p->writes_dead) {
		tw__pipe_out_check_all(p);
		return;
	}
	tw_list *it;
	for (it = p->out_msgs.next; it != &p->out_msgs; it = it->next) {
		tw_out_msg *m = TW_CONTAINER_OF(it, tw_out_msg, link);
		if (m->state != TW_OUT_QUEUED || m->status != TW_OK)
			continue;
		tw_status_t st = tw__pipe_post_descriptor(p, m);
		if (st != TW_OK) {
			tw__pipe_fail(p, st, "writing a message: out of memory");
			return;
		}
	}
	/* Tensors go to the channels strictly in message order (spec 3.11). */
	for (it = p->out_msgs.next;
	     it != &p->out_msgs && p->state == TW_PIPE_ESTABLISHED && !p->writes_dead;
	     it = it->next) {
		tw_out_msg *m = TW_CONTAINER_OF(it, tw_out_msg, link);
		if (m->state == TW_OUT_SENDING || m->status != TW_OK)
			continue;
		if (m->state != TW_OUT_READY)
			break;
		if (TW_MUTANT("tensors_reordered") && it->next != &p->out_msgs) {
			/* the next message's tensors overtake this one's */
			tw_out_msg *n = TW_CONTAINER_OF(it->next, tw_out_msg, link);
			if (n->state == TW_OUT_READY && n->status == TW_OK &&
			    tw__pipe_send_tensors(p, n) != TW_OK)
				return;
		}
		if (tw__pipe_send_tensors(p, m) != TW_OK)
			return;
	}
	tw__pipe_out_check_all(p);
}

static void tw__pipe_do_write(void *arg)
{
	tw_out_msg *m = arg;
	tw_pipe *p = m->pipe;
	if (TW_MUTANT("write_cb_early")) {
		m->cb(p, TW_OK, "", m->arg); /* before a byte left */
		m->cb = tw__mutant_ignore_cb;
	}
	tw__list_push_back(&p->out_msgs, &m->link);
	tw__pipe_op_deadline(p, m->timeout_ms, &m->deadline);
	if (p->state == TW_PIPE_FAILED)
		tw__pipe_out_check_all(p);
	else
		tw__pipe_pump_writes(p);
}

tw_status_t tw_pipe_write(tw_pipe *p, const tw_message *msg, tw_write_cb cb, void *arg)
{
	static const char fn[] = "tw_pipe_write";
	tw__api_clear();
	if (!p || !cb)
		return tw__api_fail(TW_ERR_INVAL, "%s: pipe and cb must not be NULL", fn);
	tw_out_msg *m;
	tw_status_t st = tw__out_msg_new(fn, msg, &m);
	if (st != TW_OK)
		return st;
	m->pipe = p;
	m->cb = cb;
	m->arg = arg;
	m->timeout_ms = tw__pipe_op_timeout(p);
	tw__pipe_ref(p);
	if (!tw__loop_post(&p->ctx->loop, &m->dfr, tw__pipe_do_write, m)) {
		tw__out_msg_free(m);
		tw__pipe_unref(p);
		return tw__ctx_unposted(p->ctx, fn);
	}
	return TW_OK;
}
