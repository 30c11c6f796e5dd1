/*
 * pipe.c - the pipe state machine (spec/wire.md 3.3 to 3.11).
 *
 * Client: connect the bootstrap connection, send hello and Brochure, read
 * the BrochureAnswer, check it (negotiate.c), open the replacement
 * descriptor connection if the transport changed, always the
 * descriptor-reply connection, and each selected channel's connections,
 * each starting with a RequestedConnection; then established at once.
 * Server: created by the listener on a SpontaneousConnection; read the
 * Brochure, answer, and become established when every requested connection
 * has arrived through the listener.
 *
 * Messages (spec 3.10, 3.11): the sender writes Descriptor and payload
 * frames on D in message order as soon as the pipe is established; a message
 * with tensors lacking a target device waits for its DescriptorReply on R
 * (replies are read in order); tensors are handed to their channels in
 * (message, tensor) order. The receiver reads one Descriptor at a time and
 * the next only after tw_pipe_read() of the previous one queued its payload
 * reads. Callbacks of each kind run in message order.
 *
 * Errors: the first error (or a local close) moves the pipe to FAILED: all
 * its connections and channels are closed and every pending callback fires
 * with that status and detail. Bad input from the peer is TW_ERR_PROTO with
 * the decoder's detail; it never aborts and never touches another pipe.
 *
 * The peer going away (spec 5.6): every connection has an end watch armed
 * from the moment the pipe gets it (transport.h), so the end is noticed even
 * with nothing to read, e.g. a client that leaves right after the answer,
 * and a hang-up (the peer closed with bytes still unread) is noticed too.
 * Before the pipe is established any end or hang-up fails it, except the
 * bootstrap connection's after a transport switch (spec 3.7.b). Once
 * established, the first end or hang-up (EOF or reset, noticed by a watch or
 * an operation) starts the pipe's end: operations that fail meanwhile are
 * held until the verdict is known. The verdict: with a stock peer, the first
 * end's status (TW_ERR_EOF for a FIN, TW_ERR_CONNRESET for a reset); with
 * goodbye (spec 8.2) it comes from R, which always has a read pending: a
 * goodbye (zero-length frame) means TW_ERR_EOF "the peer closed the pipe",
 * R's end without one (or none within TW_PIPE_VERDICT_WAIT_MS of the first
 * end) TW_ERR_CONNRESET "lost without a goodbye". Once it is known, every
 * write whose callback has not run gets it (the peer can receive none of
 * them), and so does every later write. The read side is not cut short:
 * whatever the peer wrote before it left is handed to the application
 * however slowly it reads (spec 5.6.c), and the pipe fails with the verdict
 * only when D has reported its end (after its last frame) with no read in
 * flight, or when a read met the end (nothing after it can be delivered in
 * order).
 * A local close of an established goodbye pipe writes the goodbye on R and
 * closes R once it is written (at most TW_PIPE_GOODBYE_WAIT_MS later); the
 * other connections close at once, so local callbacks fire at once.
 *
 * The handshake's bound (spec 3.8.e): a server pipe that is not established
 * within the context's handshake timeout of its hello (the Brochure or a
 * registered connection never came) fails with TW_ERR_TIMEDOUT, naming what
 * is missing; failing releases its registration ids, so a late
 * RequestedConnection is closed by the listener (3.8.b). The pipe's one
 * timer bounds the handshake first, then the end and the goodbye.
 *
 * This file must not know how frames are framed or how tensors travel: it
 * uses transports and channels only through their vtables.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/pipe_impl.h"
#include "platform/mutant.h"
#include "platform/platform.h"

/* ---- references and lifetime -------------------------------------------------- */

void tw__pipe_ref(tw_pipe *p)
{
	__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
}

void tw__pipe_free(tw_pipe *p)
{
	for (size_t i = 0; i < p->num_chans; i++) {
		tw__free(p->chans[i].conns);
		tw__free(p->chans[i].ids);
	}
	tw__free(p->chans);
	tw__free(p->pairs);
	while (!tw__list_empty(&p->in_msgs)) {
		tw_in_msg *m = TW_CONTAINER_OF(p->in_msgs.next, tw_in_msg, link);
		tw__list_remove(&m->link);
		tw__in_msg_free(m);
	}
	while (!tw__list_empty(&p->out_msgs)) {
		tw_out_msg *m = TW_CONTAINER_OF(p->out_msgs.next, tw_out_msg, link);
		tw__list_remove(&m->link);
		tw__out_msg_free(m);
	}
	tw__free(p);
}

void tw__pipe_unref(tw_pipe *p)
{
	if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	tw_context *ctx = p->ctx;
	pthread_mutex_lock(&ctx->mu);
	tw__list_remove(&p->all_link);
	pthread_mutex_unlock(&ctx->mu);
	tw__pipe_free(p);
}

static void tw__pipe_finish(void *arg);

/* Loop thread. Called when an internal operation completes. The pipe may
 * only finish from its own deferred step, so callers may keep using p. */
void tw__pipe_release(tw_pipe *p)
{
	p->inflight--;
	if (p->state == TW_PIPE_FAILED && p->live && p->inflight == 0) {
		p->inflight++; /* the finish step itself */
		tw__loop_defer(&p->ctx->loop, &p->finish_dfr, tw__pipe_finish, p);
	}
}

static void tw__pipe_finish(void *arg)
{
	tw_pipe *p = arg;
	p->inflight--;
	if (p->inflight > 0 || !p->live)
		return; /* something new started; its completion comes back here */
	p->live = false;
	tw__list_remove(&p->live_link);
	tw_context *ctx = p->ctx;
	tw__pipe_unref(p); /* "live" */
	tw__ctx_check_done(ctx);
}

/* ---- failure --------------------------------------------------------------------- */

void tw__conn_close(tw_conn **c)
{
	if (*c) {
		(*c)->ops->close(*c);
		*c = NULL;
	}
}

void tw__pipe_fail(tw_pipe *p, tw_status_t status, const char *fmt, ...)
{
	if (p->state == TW_PIPE_FAILED)
		return;
	bool was_established = p->state == TW_PIPE_ESTABLISHED;
	p->state = TW_PIPE_FAILED;
	p->err = status;
	if (TW_MUTANT("proto_as_sys") && status == TW_ERR_PROTO)
		p->err = TW_ERR_SYS;
	if (TW_MUTANT("closed_as_eof") && status == TW_ERR_CLOSED)
		p->err = TW_ERR_EOF;
	p->d_busy = NULL; /* no more Descriptor reads; the message may go soon */
	char what[TW_DETAIL_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	tw__detail(p->err_detail, sizeof(p->err_detail), "%s: %s", p->label, what);

	pthread_mutex_lock(&p->ctx->mu);
	if (!was_established) {
		p->info_status = status;
		snprintf(p->info_detail, sizeof(p->info_detail), "%s", p->err_detail);
	}
	pthread_mutex_unlock(&p->ctx->mu);

	/* A local close of an established goodbye pipe says goodbye on R first
	 * (spec 8.2.b), unless R is known to be gone. */
	bool goodbye = status == TW_ERR_CLOSED && was_established && p->ext_goodbye && p->r &&
	               !p->goodbye_seen && !p->r_ended;
	if (goodbye) {
		p->r_goodbye = p->r;
		p->r = NULL;
	}
	tw__conn_close(&p->boot);
	tw__conn_close(&p->d);
	tw__conn_close(&p->r);
	tw__conn_close(&p->d_replacement);
	for (size_t i = 0; i < p->num_chans; i++) {
		tw_pipe_channel *pc = &p->chans[i];
		if (pc->ch) {
			pc->ch->ops->close(pc->ch);
			pc->ch = NULL;
		}
		for (size_t k = 0; pc->conns && k < pc->num_conns; k++)
			tw__conn_close(&pc->conns[k]);
	}
	if (p->listener) {
		tw__listener_unregister_pipe(p->listener, p);
		tw__listener_pipe_released(p->listener);
		p->listener = NULL;
	}
	tw__ptimer_close(&p->op_timer);
	if (goodbye)
		tw__pipe_send_goodbye(p);
	else
		tw__pipe_timer_close(p);
	tw__pipe_out_check_all(p);
	tw__pipe_in_check_all(p);
	if (p->est_pending) {
		p->est_pending = false;
		p->inflight++;
		tw__loop_defer(&p->ctx->loop, &p->est_dfr, tw__pipe_deliver_established, p);
	}
	/* Let the finish step run even if nothing was in flight. */
	p->inflight++;
	tw__pipe_release(p);
}

void tw__pipe_close_internal(tw_pipe *p, tw_status_t status, const char *detail)
{
	tw__pipe_fail(p, status, "%s", detail);
}


/* ---- operation timeouts ------------------------------------------------------------------ */

static void tw__pipe_on_op_timer(uv_timer_t *t);

/* The pipe's operation timeout now: the API functions take it when called,
 * so a later tw_pipe_set_operation_timeout bounds only later operations. */
uint64_t tw__pipe_op_timeout(tw_pipe *p)
{
	return __atomic_load_n(&p->op_timeout_ms, __ATOMIC_RELAXED);
}

/* Spec 8.4: on an eager pipe, a CPU tensor of at most TW_EAGER_MAX_BYTES
 * bound for a CPU device (or for none: the pipe's pairs are all CPU) goes
 * on D after the payloads. The sender decides from its tensor, the
 * receiver from the Descriptor: the same fields. */
bool tw__pipe_eager(const tw_pipe *p, const tw_tensor *t)
{
	return p->ext_eager && t->length <= TW_EAGER_MAX_BYTES &&
	       tw__device_is_cpu(&t->source_device) &&
	       (!t->has_target_device || tw__device_is_cpu(&t->target_device));
}

/* Spec 3.11 with 8.4 and 8.5: the DescriptorReply names the device of each
 * tensor that has no target device and is not eager; a noreply pipe sends
 * none (such tensors are received on the CPU). Both ends. */
bool tw__pipe_needs_reply(const tw_pipe *p, const tw_tensor *t)
{
	return !t->has_target_device && !p->ext_noreply && !tw__pipe_eager(p, t);
}

/* Sets an operation's deadline from the operation timeout it was called
 * with, ms (loop thread, when the operation starts), and arms the timer
 * for it. */
void tw__pipe_op_deadline(tw_pipe *p, uint64_t ms, uint64_t *deadline)
{
	*deadline = 0;
	if (ms == 0 || p->state == TW_PIPE_FAILED || TW_MUTANT("operation_timeout_ignored"))
		return;
	*deadline = tw__loop_deadline(&p->ctx->loop, ms);
	if (p->op_due == 0 || *deadline < p->op_due) {
		p->op_due = *deadline;
		tw__ptimer_start(p, &p->op_timer, tw__pipe_on_op_timer, ms);
	}
}

/* Fails the pipe if an operation is past its deadline; re-arms for the
 * earliest one still to come. */
static void tw__pipe_on_op_timer(uv_timer_t *t)
{
	tw_pipe *p = t->data;
	uint64_t now = uv_now(&p->ctx->loop.uv);
	uint64_t next = 0;
	const char *what = NULL;
	uint64_t ms = 0;
	tw_list *it;
	p->op_due = 0;
	for (it = p->out_msgs.next; it != &p->out_msgs && !what; it = it->next) {
		tw_out_msg *m = TW_CONTAINER_OF(it, tw_out_msg, link);
		if (m->deadline && m->deadline <= now)
			what = "tw_pipe_write", ms = m->timeout_ms;
		else if (m->deadline && (!next || m->deadline < next))
			next = m->deadline;
	}
	for (it = p->in_msgs.next; it != &p->in_msgs && !what; it = it->next) {
		tw_in_msg *m = TW_CONTAINER_OF(it, tw_in_msg, link);
		bool waiting = !m->desc_cb_fired || (m->read_requested && !m->read_cb_fired);
		if (!waiting || !m->deadline)
			continue;
		if (m->deadline <= now)
			what = m->read_requested ? "tw_pipe_read" : "tw_pipe_read_descriptor",
			ms = m->read_requested ? m->read_timeout_ms : m->desc_timeout_ms;
		else if (!next || m->deadline < next)
			next = m->deadline;
	}
	if (what) {
		tw__pipe_fail(p, TW_ERR_TIMEDOUT,
		              "%s did not complete within its operation timeout of %llu ms "
		              "(tw_pipe_set_operation_timeout); the pipe fails with it",
		              what, (unsigned long long)ms);
		return;
	}
	if (next) {
		p->op_due = next;
		tw__ptimer_start(p, &p->op_timer, tw__pipe_on_op_timer, next - now);
	}
}

tw_status_t tw_pipe_set_operation_timeout(tw_pipe *p, uint64_t timeout_ms)
{
	tw__api_clear();
	if (!p)
		return tw__api_fail(TW_ERR_INVAL, "tw_pipe_set_operation_timeout: pipe must not be NULL");
	__atomic_store_n(&p->op_timeout_ms, timeout_ms, __ATOMIC_RELAXED);
	return TW_OK;
}

/* ---- close, info ------------------------------------------------------------------------ */

static void tw__pipe_do_close(void *arg)
{
	tw_pipe *p = arg;
	tw__pipe_fail(p, TW_ERR_CLOSED, "pipe closed locally");
	tw__pipe_unref(p); /* the command's reference */
}

void tw_pipe_close(tw_pipe *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->ctx->mu);
	bool post = !p->close_posted;
	p->close_posted = true;
	pthread_mutex_unlock(&p->ctx->mu);
	if (!post)
		return;
	tw__pipe_ref(p);
	if (!tw__loop_post(&p->ctx->loop, &p->close_cmd, tw__pipe_do_close, p))
		tw__pipe_unref(p); /* the loop finished: the pipe is closed already */
}

void tw_pipe_destroy(tw_pipe *p)
{
	if (!p)
		return;
	tw_pipe_close(p);
	tw__pipe_unref(p); /* the application's reference */
}

tw_status_t tw_pipe_get_info(tw_pipe *p, tw_pipe_info *info_out)
{
	static const char fn[] = "tw_pipe_get_info";
	tw__api_clear();
	if (!p || !info_out)
		return tw__api_fail(TW_ERR_INVAL, "%s: pipe and info_out must not be NULL", fn);
	pthread_mutex_lock(&p->ctx->mu);
	tw_status_t st = p->info_status;
	if (st == TW_OK)
		*info_out = p->info;
	else
		(void)tw__api_fail(st, "%s: %s", fn, p->info_detail);
	pthread_mutex_unlock(&p->ctx->mu);
	return st;
}

typedef struct tw_verdicts_call {
	tw_pipe *p;
	char *buf;
	size_t len, off;
	bool cut;
} tw_verdicts_call;

static void tw__verdicts_add(tw_verdicts_call *v, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void tw__verdicts_add(tw_verdicts_call *v, const char *fmt, ...)
{
	/* off stays below len, so there is room for the NUL at least: an
	 * empty addition to a full buffer cuts nothing */
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(v->buf + v->off, v->len - v->off, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= v->len - v->off) {
		v->cut = true;
		v->off = v->len - 1;
	} else {
		v->off += (size_t)n;
	}
}

/* The line of one of the small-message extensions (spec 8.4, 8.5), which
 * this end asks for, or acknowledges, together (eager_asked): used, agreed
 * but not usable on this pipe, or not agreed. */
static void tw__verdict_ext(tw_verdicts_call *v, const tw_pipe *p, const char *name,
                            const char *section, bool used, bool acked, const char *how)
{
	if (used)
		tw__verdicts_add(v, "extension %s: used: %s (spec %s)\n", name, how, section);
	else if (acked)
		tw__verdicts_add(v, "extension %s: not used: a channel of the pipe moves memory other "
		                    "than CPU to CPU (spec %s)\n",
		                 name, section);
	else if (p->eager_asked)
		tw__verdicts_add(v, "extension %s: not used: the %s (a stock peer, or it is off "
		                    "there)\n",
		                 name, p->is_server ? "client did not ask for it"
		                                    : "server did not acknowledge it");
}

/* Loop thread (channels describe themselves there). */
static void tw__verdicts_build(void *arg)
{
	tw_verdicts_call *v = arg;
	tw_pipe *p = v->p;
	tw_context *ctx = p->ctx;
	for (size_t i = 0; i < ctx->num_transports; i++) {
		const tw_transport_reg *t = &ctx->transports[i];
		if (t == p->reg)
			tw__verdicts_add(v, "transport %s: selected\n", t->name);
		else
			tw__verdicts_add(v, "transport %s: not selected: the pipe uses %s\n", t->name,
			                 p->reg ? p->reg->name : "none");
	}
	for (size_t i = 0; i < ctx->num_channels; i++) {
		const tw_channel_reg *c = &ctx->channels[i];
		const tw_pipe_channel *pc = NULL;
		for (size_t k = 0; k < p->num_chans && !pc; k++)
			if (p->chans[k].reg == c)
				pc = &p->chans[k];
		if (!pc) {
			tw__verdicts_add(v, "channel %s: not selected: %s\n", c->name,
			                 p->chan_why[i][0] ? p->chan_why[i] : "no device pair");
			continue;
		}
		char how[TW_DETAIL_MAX] = "";
		if (pc->ch && pc->ch->ops->describe)
			pc->ch->ops->describe(pc->ch, how, sizeof(how));
		tw__verdicts_add(v, "channel %s: selected%s%s\n", c->name, how[0] ? ": " : "", how);
	}
	char eager_used[96];
	snprintf(eager_used, sizeof(eager_used),
	         "CPU tensors of at most %d bytes travel on the descriptor connection",
	         TW_EAGER_MAX_BYTES);
	tw__verdict_ext(v, p, TW_EXT_EAGER, "8.4", p->ext_eager, p->eager_acked, eager_used);
	tw__verdict_ext(v, p, TW_EXT_NOREPLY, "8.5", p->ext_noreply, p->noreply_acked,
	                "tensors without a target device are received on the CPU, with no "
	                "DescriptorReply");
	pthread_mutex_lock(&ctx->mu);
	tw__verdicts_add(v, "%s", ctx->refused);
	pthread_mutex_unlock(&ctx->mu);
}

tw_status_t tw_pipe_get_verdicts(tw_pipe *p, char *buf, size_t len)
{
	static const char fn[] = "tw_pipe_get_verdicts";
	tw__api_clear();
	if (!p || !buf || len == 0)
		return tw__api_fail(TW_ERR_INVAL, "%s: pipe and buf must not be NULL, len not 0", fn);
	buf[0] = '\0';
	pthread_mutex_lock(&p->ctx->mu);
	tw_status_t st = p->info_status;
	char why[TW_DETAIL_MAX];
	snprintf(why, sizeof(why), "%s", p->info_detail);
	pthread_mutex_unlock(&p->ctx->mu);
	if (st != TW_OK)
		return tw__api_fail(st, "%s: %s", fn, why);
	tw_verdicts_call v = { p, buf, len, 0, false };
	if (!tw__loop_call_sync(&p->ctx->loop, tw__verdicts_build, &v))
		return tw__ctx_unposted(p->ctx, fn);
	if (v.cut)
		return tw__api_fail(TW_ERR_INVAL, "%s: %zu bytes are not enough", fn, len);
	return TW_OK;
}

tw_status_t tw_pipe_channel_for(tw_pipe *p, const tw_device *local, const tw_device *remote,
                                char *buf, size_t buflen)
{
	static const char fn[] = "tw_pipe_channel_for";
	char db1[40], db2[40];
	tw__api_clear();
	if (!p || !local || !remote || !buf || buflen == 0)
		return tw__api_fail(TW_ERR_INVAL, "%s: NULL argument", fn);
	pthread_mutex_lock(&p->ctx->mu);
	tw_status_t st = p->info_status;
	if (st != TW_OK) {
		(void)tw__api_fail(st, "%s: %s", fn, p->info_detail);
		goto out;
	}
	const tw_pipe_pair *pp = tw__pipe_find_pair(p, local, remote);
	if (!pp) {
		st = tw__api_fail(TW_ERR_UNSUPPORTED, "%s: no channel was selected for %s -> %s", fn,
		                  tw__device_str(local, db1, sizeof(db1)),
		                  tw__device_str(remote, db2, sizeof(db2)));
		goto out;
	}
	const char *name = p->chans[pp->chan].reg->name;
	if (strlen(name) >= buflen) {
		st = tw__api_fail(TW_ERR_INVAL, "%s: buffer too small", fn);
		goto out;
	}
	memcpy(buf, name, strlen(name) + 1);
out:
	pthread_mutex_unlock(&p->ctx->mu);
	return st;
}

void tw_pipe_set_user_data(tw_pipe *p, void *data)
{
	if (p)
		__atomic_store_n(&p->user_data, data, __ATOMIC_RELEASE);
}

void *tw_pipe_get_user_data(tw_pipe *p)
{
	return p ? __atomic_load_n(&p->user_data, __ATOMIC_ACQUIRE) : NULL;
}
