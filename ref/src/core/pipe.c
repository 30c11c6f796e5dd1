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
#include "platform/mutant.h"
#include "platform/platform.h"

static void tw__pipe_pump_writes(tw_pipe *p);
static void tw__pipe_pump_reads(tw_pipe *p);
static void tw__pipe_read_r(tw_pipe *p);
static void tw__pipe_in_check(tw_in_msg *m);
static void tw__pipe_out_check_all(tw_pipe *p);
static void tw__pipe_in_check_all(tw_pipe *p);
static void tw__pipe_fail(tw_pipe *p, tw_status_t status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void tw__pipe_deliver_established(void *arg);
static void tw__pipe_try_end(tw_pipe *p);
static void tw__pipe_send_goodbye(tw_pipe *p);
static void tw__pipe_timer_close(tw_pipe *p);
static void tw__pipe_timer_start(tw_pipe *p, uint64_t ms);
static void tw__ptimer_close(tw_pipe_timer *pt);

/* ---- references and lifetime -------------------------------------------------- */

static void tw__pipe_ref(tw_pipe *p)
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
static void tw__pipe_release(tw_pipe *p)
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

static void tw__conn_close(tw_conn **c)
{
	if (*c) {
		(*c)->ops->close(*c);
		*c = NULL;
	}
}

static void tw__pipe_fail(tw_pipe *p, tw_status_t status, const char *fmt, ...)
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

/* ---- the end of the pipe (spec 5.6, 8.2) --------------------------------------------- */

static void tw__pipe_on_timer_closed(uv_handle_t *h)
{
	tw__pipe_release(h->data);
}

/* (Re)starts a timer of the pipe; the open handle holds the pipe alive
 * (inflight) until tw__ptimer_close's callback. Nothing once closed. */
static void tw__ptimer_start(tw_pipe *p, tw_pipe_timer *pt, uv_timer_cb cb, uint64_t ms)
{
	if (pt->closed)
		return;
	if (!pt->inited) {
		uv_timer_init(&p->ctx->loop.uv, &pt->t); /* cannot fail */
		pt->t.data = p;
		pt->inited = true;
		p->inflight++;
	}
	uv_timer_start(&pt->t, cb, ms, 0);
}

static void tw__ptimer_stop(tw_pipe_timer *pt)
{
	if (pt->inited && !pt->closed)
		uv_timer_stop(&pt->t);
}

/* Closes a timer for good, also one that was never started. */
static void tw__ptimer_close(tw_pipe_timer *pt)
{
	bool open = pt->inited && !pt->closed;
	pt->closed = true;
	if (!open)
		return;
	uv_timer_stop(&pt->t);
	uv_close((uv_handle_t *)&pt->t, tw__pipe_on_timer_closed);
}

static void tw__pipe_timer_close(tw_pipe *p)
{
	tw__ptimer_close(&p->timer);
}

static void tw__pipe_handshake_timed_out(tw_pipe *p);
static void tw__pipe_client_timer(tw_pipe *p);

static void tw__pipe_on_timer(uv_timer_t *t)
{
	tw_pipe *p = t->data;
	if (p->state == TW_PIPE_FAILED) {
		/* Our goodbye was not written in time: give up on it. */
		tw__conn_close(&p->r_goodbye);
		tw__pipe_timer_close(p);
		return;
	}
	if (p->state == TW_PIPE_SERVER_BROCHURE || p->state == TW_PIPE_SERVER_CONNS) {
		tw__pipe_handshake_timed_out(p);
		return;
	}
	if (p->state == TW_PIPE_CLIENT_CONNECTING) {
		tw__pipe_client_timer(p);
		return;
	}
	p->verdict_waited = true;
	if (!p->d_ended && !p->d_hup) {
		/* Bytes waiting unread on D wait for the application, however
		 * long it takes to read them (the peer's kernel may hold more
		 * behind them, and its FIN): only an empty D that neither ends
		 * nor delivers for a whole wait is stalled. */
		bool unread = p->d && p->d->ops->has_unread(p->d);
		if (!unread && p->d_frames == p->d_frames_tick) {
			p->d_stalled = true;
		} else {
			p->d_frames_tick = p->d_frames;
			tw__pipe_timer_start(p, TW_PIPE_VERDICT_WAIT_MS);
		}
	}
	tw__pipe_try_end(p);
}

static void tw__pipe_timer_start(tw_pipe *p, uint64_t ms)
{
	tw__ptimer_start(p, &p->timer, tw__pipe_on_timer, ms);
}

static void tw__pipe_on_goodbye_written(tw_conn *c, tw_status_t status, const char *detail,
                                        void *arg)
{
	tw_pipe *p = arg;
	/* Written (or failed, or given up on): R has nothing more to say. */
	tw__conn_close(&p->r_goodbye);
	tw__pipe_timer_close(p);
	tw__pipe_release(p);
}

/* The goodbye is a zero-length frame on R (spec 8.2.b). */
static void tw__pipe_send_goodbye(tw_pipe *p)
{
	if (TW_MUTANT("goodbye_omitted")) {
		tw__conn_close(&p->r_goodbye);
		tw__pipe_timer_close(p);
		return;
	}
	static const uint8_t nothing;
	tw_iov iov = { &nothing, 0 };
	tw_status_t st =
		p->r_goodbye->ops->write(p->r_goodbye, &iov, 1, 0, tw__pipe_on_goodbye_written, p);
	if (st != TW_OK) {
		tw__conn_close(&p->r_goodbye);
		tw__pipe_timer_close(p);
		return;
	}
	p->inflight++;
	tw__pipe_timer_start(p, TW_PIPE_GOODBYE_WAIT_MS);
}

static const char *tw__pipe_conn_name(const tw_pipe *p, const tw_conn *c)
{
	if (c && c == p->boot)
		return "the bootstrap connection";
	if (c && c == p->d)
		return "the descriptor connection";
	if (c && (c == p->r || c == p->r_goodbye))
		return "the descriptor-reply connection";
	if (c && c == p->d_replacement)
		return "the replacement descriptor connection";
	return "a channel connection";
}

/* Appends ", what" (or "what" first) to a list being built in buf. */
__attribute__((format(printf, 3, 4))) static void tw__list_append(char *buf, size_t len,
                                                                  const char *fmt, ...)
{
	size_t off = strlen(buf);
	if (off + 3 >= len)
		return;
	if (off > 0) {
		memcpy(buf + off, ", ", 3);
		off += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + off, len - off, fmt, ap);
	va_end(ap);
}

/* The server's handshake bound ran out (spec 3.8.e): fail, naming what never
 * came. Failing releases the registration ids (tw__pipe_fail). */
static void tw__pipe_handshake_timed_out(tw_pipe *p)
{
	unsigned long long ms = (unsigned long long)p->handshake_ms;
	if (p->state == TW_PIPE_SERVER_BROCHURE) {
		tw__pipe_fail(p, TW_ERR_TIMEDOUT,
		              "handshake timed out: no Brochure within %llu ms of the hello (spec "
		              "3.8.e)",
		              ms);
		return;
	}
	char missing[TW_DETAIL_MAX] = "";
	if (p->need_replacement && !p->d_replacement)
		tw__list_append(missing, sizeof(missing), "replacement descriptor (id %llu)",
		                (unsigned long long)p->id_d);
	if (!p->r)
		tw__list_append(missing, sizeof(missing), "descriptor-reply (id %llu)",
		                (unsigned long long)p->id_r);
	for (size_t i = 0; i < p->num_chans; i++) {
		const tw_pipe_channel *pc = &p->chans[i];
		for (size_t k = 0; pc->conns && k < pc->num_conns; k++)
			if (!pc->conns[k])
				tw__list_append(missing, sizeof(missing), "channel '%s' #%zu (id %llu)",
				                pc->reg->name, k, (unsigned long long)pc->ids[k]);
	}
	tw__pipe_fail(p, TW_ERR_TIMEDOUT,
	              "handshake timed out: registered connections did not arrive within %llu ms "
	              "(spec 3.8.e): %s",
	              ms, missing);
}

/* Is the application still being handed a message: a read in flight, or a
 * descriptor delivered whose tw_pipe_read() has not been handled yet? */
static bool tw__pipe_receiving(tw_pipe *p)
{
	tw_list *it;
	for (it = p->in_msgs.next; it != &p->in_msgs; it = it->next) {
		tw_in_msg *m = TW_CONTAINER_OF(it, tw_in_msg, link);
		if (m->pending > 0 || m->state == TW_IN_DESC_READY)
			return true;
	}
	return false;
}

/* Did a read meet the end (an operation of a message being read failed)?
 * Then nothing after it can be delivered in order: the read side is over. */
static bool tw__pipe_read_broken(tw_pipe *p)
{
	tw_list *it;
	for (it = p->in_msgs.next; it != &p->in_msgs; it = it->next)
		if (TW_CONTAINER_OF(it, tw_in_msg, link)->held)
			return true;
	return false;
}

static bool tw__pipe_verdict_known(const tw_pipe *p)
{
	return p->ending &&
	       (!p->ext_goodbye || p->goodbye_seen || p->r_ended || p->verdict_waited);
}

/* How the peer left (see the file comment), into detail. */
static tw_status_t tw__pipe_verdict(const tw_pipe *p, char *detail, size_t len)
{
	if (p->goodbye_seen) {
		tw__detail(detail, len, "the peer closed the pipe (it said goodbye)");
		return TW_MUTANT("eof_as_reset") ? TW_ERR_CONNRESET : TW_ERR_EOF;
	}
	if (p->ext_goodbye) {
		tw__detail(detail, len,
		           "connection lost without a goodbye (the peer died or the network failed): "
		           "%s",
		           p->end_detail);
		return TW_ERR_CONNRESET;
	}
	tw__detail(detail, len, "%s", p->end_detail);
	return p->end_status;
}

/* What a client adds when the server dropped its connections before
 * sending anything on them: most likely it was short of resources while it
 * set the pipe up (spec 5.8.d). Before and after the BrochureAnswer alike. */
static const char tw__pipe_dropped_hint[] =
	"; the server dropped the connection before sending anything on it (out of file "
	"descriptors or memory, or it died)";

static void tw__pipe_verdict_hint(const tw_pipe *p, char *detail, size_t len)
{
	if (p->is_server || p->heard || p->goodbye_seen)
		return;
	size_t n = strlen(detail);
	snprintf(detail + n, len - n, "%s", tw__pipe_dropped_hint);
}

/* Advances an ending pipe (see the file comment): once the verdict is known
 * every write whose callback has not run gets it, and the pipe fails once
 * the read side has handed over what the peer wrote before it left. */
static void tw__pipe_try_end(tw_pipe *p)
{
	if (p->state != TW_PIPE_ESTABLISHED || !tw__pipe_verdict_known(p))
		return;
	char what[TW_DETAIL_MAX];
	tw_status_t st = tw__pipe_verdict(p, what, sizeof(what));
	tw__pipe_verdict_hint(p, what, sizeof(what));
	if (!p->writes_dead) {
		p->writes_dead = true;
		p->wr_status = st;
		tw__detail(p->wr_detail, sizeof(p->wr_detail), "%s: %s", p->label, what);
		tw__pipe_out_check_all(p);
	}
	if ((p->d_ended && !tw__pipe_receiving(p)) || tw__pipe_read_broken(p) || p->d_stalled ||
	    TW_MUTANT("data_dropped_at_end"))
		tw__pipe_fail(p, st, "%s", what);
}

static bool tw__status_is_end(tw_status_t st)
{
	return st == TW_ERR_EOF || st == TW_ERR_CONNRESET;
}

/* Loop thread: an established pipe's peer is leaving (the first end or
 * hang-up of one of its connections): start the pipe's end, once. */
static void tw__pipe_client_lost(tw_pipe *p, tw_status_t status, const char *what,
                                 const char *detail);

static void tw__pipe_start_end(tw_pipe *p, tw_status_t status, const char *what,
                               const char *detail)
{
	if (p->ending)
		return;
	p->ending = true;
	p->end_status = status;
	tw__detail(p->end_detail, sizeof(p->end_detail), "%s: %s", what, detail);
	/* The verdict is waited for with a bound, and so is a D that neither
	 * ends nor moves; data D still delivers is not (spec 5.6.c). */
	p->d_frames_tick = p->d_frames;
	tw__pipe_timer_start(p, TW_PIPE_VERDICT_WAIT_MS);
}

/* Loop thread: connection `c` of the pipe (NULL: one a channel owns) failed
 * with `status`. Anything but the end of an established pipe's connection
 * fails the pipe at once; an end starts (or advances) the pipe's end, and
 * the caller holds its operation for the verdict. */
static void tw__pipe_conn_failed(tw_pipe *p, tw_conn *c, tw_status_t status, const char *what,
                                 const char *detail)
{
	if (p->state == TW_PIPE_FAILED)
		return;
	if (p->state == TW_PIPE_CLIENT_CONNECTING) {
		if (c == p->boot)
			tw__pipe_client_lost(p, status, what, detail);
		return; /* else a bootstrap connection given up on earlier */
	}
	if (p->state != TW_PIPE_ESTABLISHED || !tw__status_is_end(status)) {
		tw__pipe_fail(p, status, "%s: %s", what, detail);
		return;
	}
	if (TW_MUTANT("peer_death_ignored"))
		return;
	tw__pipe_start_end(p, status, what, detail);
	if (c && c == p->d)
		p->d_ended = true;
	if (c && c == p->r && p->ext_goodbye && !p->goodbye_seen)
		p->r_ended = true;
	tw__pipe_try_end(p);
}

/* The client may drop the bootstrap connection once the transport changed
 * (spec 3.7.b), possibly before its other connections arrive. */
static bool tw__pipe_boot_may_go(const tw_pipe *p, const tw_conn *c)
{
	return c == p->boot && p->state == TW_PIPE_SERVER_CONNS && p->need_replacement;
}

/* The end watch of one of the pipe's connections (transport.h). */
static void tw__pipe_on_conn_end(tw_conn *c, tw_status_t status, const char *detail, void *arg)
{
	tw_pipe *p = arg;
	if (status != TW_ERR_CLOSED && tw__pipe_boot_may_go(p, c)) {
		tw__conn_close(&p->boot);
	} else if (status != TW_ERR_CLOSED) {
		char what[96];
		snprintf(what, sizeof(what), "%s ended%s", tw__pipe_conn_name(p, c),
		         p->state == TW_PIPE_ESTABLISHED ? "" : " before the pipe was established");
		tw__pipe_conn_failed(p, c, status, what, detail);
	}
	tw__pipe_release(p);
}

/* The peer hung up on one of the pipe's connections with bytes unread
 * (transport.h). Before establishment the handshake cannot complete any
 * more: the pipe fails now, not when a read reaches the end of file. After
 * establishment it starts the pipe's end like an end would; the connection
 * itself has not ended (D still hands over what it holds). */
static void tw__pipe_on_conn_hangup(tw_conn *c, const char *detail, void *arg)
{
	tw_pipe *p = arg;
	if (p->state == TW_PIPE_FAILED)
		return;
	char what[112];
	if (tw__pipe_boot_may_go(p, c)) {
		tw__conn_close(&p->boot);
	} else if (p->state != TW_PIPE_ESTABLISHED) {
		snprintf(what, sizeof(what), "%s ended before the pipe was established",
		         tw__pipe_conn_name(p, c));
		tw__pipe_fail(p, TW_ERR_EOF, "%s: %s", what, detail);
	} else {
		snprintf(what, sizeof(what), "%s ended", tw__pipe_conn_name(p, c));
		if (c == p->d)
			p->d_hup = true;
		tw__pipe_start_end(p, TW_ERR_EOF, what, detail);
	}
}

/* Arms the end watch of a connection the pipe just got. */
static tw_status_t tw__pipe_watch(tw_pipe *p, tw_conn *c)
{
	tw_status_t st = c->ops->watch_end(c, tw__pipe_on_conn_end, tw__pipe_on_conn_hangup, p);
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "watching %s: out of memory", tw__pipe_conn_name(p, c));
		return st;
	}
	p->inflight++;
	return TW_OK;
}

/* ---- established notification ------------------------------------------------------ */

static void tw__pipe_deliver_established(void *arg)
{
	tw_pipe *p = arg;
	tw_status_t st = p->state == TW_PIPE_FAILED ? p->err : TW_OK;
	/* A pipe that was established and failed later still reports the
	 * success it armed for, if that came first. */
	if (p->est_ok)
		st = TW_OK;
	tw_established_cb cb = p->est_cb;
	void *arg2 = p->est_arg;
	pthread_mutex_lock(&p->ctx->mu);
	p->est_armed = false;
	pthread_mutex_unlock(&p->ctx->mu);
	cb(p, st, st == TW_OK ? "" : p->err_detail, arg2);
	tw__pipe_release(p);
	tw__pipe_unref(p); /* the arm call's reference */
}

static void tw__pipe_do_on_established(void *arg)
{
	tw_pipe *p = arg;
	if (p->state == TW_PIPE_ESTABLISHED || p->state == TW_PIPE_FAILED) {
		p->est_ok = p->state == TW_PIPE_ESTABLISHED;
		p->inflight++;
		tw__loop_defer(&p->ctx->loop, &p->est_dfr, tw__pipe_deliver_established, p);
		return;
	}
	p->est_pending = true;
}

tw_status_t tw_pipe_on_established(tw_pipe *p, tw_established_cb cb, void *arg)
{
	static const char fn[] = "tw_pipe_on_established";
	tw__api_clear();
	if (!p || !cb)
		return tw__api_fail(TW_ERR_INVAL, "%s: pipe and cb must not be NULL", fn);
	pthread_mutex_lock(&p->ctx->mu);
	if (p->est_armed) {
		pthread_mutex_unlock(&p->ctx->mu);
		return tw__api_fail(TW_ERR_INVAL, "%s: a notification is already armed", fn);
	}
	p->est_armed = true;
	pthread_mutex_unlock(&p->ctx->mu);
	p->est_cb = cb;
	p->est_arg = arg;
	tw__pipe_ref(p);
	if (!tw__loop_post(&p->ctx->loop, &p->est_cmd, tw__pipe_do_on_established, p)) {
		pthread_mutex_lock(&p->ctx->mu);
		p->est_armed = false;
		pthread_mutex_unlock(&p->ctx->mu);
		tw__pipe_unref(p);
		return tw__api_fail(TW_ERR_CLOSED, "%s: the context is closed", fn);
	}
	return TW_OK;
}

static const tw_pipe_pair *tw__pipe_find_pair(const tw_pipe *p, const tw_device *local,
                                              const tw_device *remote)
{
	for (size_t i = 0; i < p->num_pairs; i++)
		if (tw__device_eq(&p->pairs[i].local, local) && tw__device_eq(&p->pairs[i].remote, remote))
			return &p->pairs[i];
	return NULL;
}

static void tw__pipe_establish(tw_pipe *p)
{
	p->state = TW_PIPE_ESTABLISHED;
	tw__ptimer_stop(&p->timer); /* the handshake's or connect's bound is met */
	if (p->listener) {
		tw__listener_pipe_released(p->listener);
		p->listener = NULL;
	}
	tw_device cpu = tw_device_cpu();
	const tw_pipe_pair *pp = tw__pipe_find_pair(p, &cpu, &cpu);
	pthread_mutex_lock(&p->ctx->mu);
	p->info_status = TW_OK;
	snprintf(p->info.transport, sizeof(p->info.transport), "%s", p->reg->name);
	snprintf(p->info.channel, sizeof(p->info.channel), "%s",
	         pp ? p->chans[pp->chan].reg->name : "");
	snprintf(p->info.remote_name, sizeof(p->info.remote_name), "%s", p->remote_name);
	p->info.is_server = p->is_server;
	pthread_mutex_unlock(&p->ctx->mu);
	if (p->est_pending) {
		p->est_pending = false;
		p->est_ok = true;
		p->inflight++;
		tw__loop_defer(&p->ctx->loop, &p->est_dfr, tw__pipe_deliver_established, p);
	}
	if (p->ext_goodbye)
		tw__pipe_read_r(p);
	tw__pipe_pump_writes(p);
	tw__pipe_pump_reads(p);
}

/* ---- nop objects on connections ---------------------------------------------------- */

typedef struct tw_obj_write {
	tw_pipe *pipe;
	tw_nop_writer w;
	const char *what;
} tw_obj_write;

static void tw__pipe_on_obj_written(tw_conn *c, tw_status_t status, const char *detail, void *arg)
{
	tw_obj_write *op = arg;
	tw_pipe *p = op->pipe;
	if (status != TW_OK) {
		char what[64];
		snprintf(what, sizeof(what), "writing the %s", op->what);
		tw__pipe_conn_failed(p, c, status, what, detail);
	}
	tw__nop_writer_free(&op->w);
	tw__free(op);
	tw__pipe_release(p);
}

/* Writes an encoded nop object (the writer's buffer is taken over). */
static tw_status_t tw__pipe_write_object(tw_pipe *p, tw_conn *c, tw_nop_writer *w,
                                         const char *what)
{
	tw_obj_write *op = tw__calloc(1, sizeof(*op));
	if (!op) {
		tw__nop_writer_free(w);
		tw__pipe_fail(p, TW_ERR_NOMEM, "writing the %s: out of memory", what);
		return TW_ERR_NOMEM;
	}
	op->pipe = p;
	op->w = *w;
	op->what = what;
	tw__nop_writer_init(w);
	tw_iov iov = { op->w.buf, op->w.len };
	tw_status_t st = c->ops->write(c, &iov, 1, TW_WRITE_OBJECT, tw__pipe_on_obj_written, op);
	if (st != TW_OK) {
		tw__nop_writer_free(&op->w);
		tw__free(op);
		tw__pipe_fail(p, st, "writing the %s: out of memory", what);
		return st;
	}
	p->inflight++;
	return TW_OK;
}

static tw_status_t tw__pipe_write_packet(tw_pipe *p, tw_conn *c, const tw_wire_packet *pkt,
                                         const char *what)
{
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_packet(&w, pkt);
	if (tw__nop_writer_finish(&w) != TW_OK) {
		tw__nop_writer_free(&w);
		tw__pipe_fail(p, TW_ERR_NOMEM, "encoding the %s: out of memory", what);
		return TW_ERR_NOMEM;
	}
	return tw__pipe_write_object(p, c, &w, what);
}

/* Connects a new connection of the chosen transport to the server and sends
 * RequestedConnection{id} on it (spec 3.7). */
static tw_status_t tw__pipe_connect_requested(tw_pipe *p, const char *address, uint64_t id,
                                              tw_conn **out)
{
	char detail[TW_DETAIL_MAX];
	tw_conn_opts opts;
	tw__ctx_conn_opts(p->ctx, &opts);
	tw_status_t st = p->reg->ops->connect(p->reg->t, address, &opts, out, detail, sizeof(detail));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "connecting to %s: %s", address, detail);
		return st;
	}
	if ((st = tw__pipe_watch(p, *out)) != TW_OK)
		return st;
	tw_wire_packet pkt;
	memset(&pkt, 0, sizeof(pkt));
	pkt.kind = TW_PACKET_REQUESTED;
	pkt.registration_id = id;
	return tw__pipe_write_packet(p, *out, &pkt, "RequestedConnection");
}

static tw_status_t tw__pipe_open_channels(tw_pipe *p, tw_endpoint_t endpoint)
{
	for (size_t i = 0; i < p->num_chans; i++) {
		tw_pipe_channel *pc = &p->chans[i];
		char detail[TW_DETAIL_MAX];
		tw_status_t st = pc->reg->ops->open(pc->reg->c, endpoint, pc->conns, pc->num_conns, &pc->ch,
		                                    detail, sizeof(detail));
		/* open() owns the connections now, on success and on failure. */
		for (size_t k = 0; k < pc->num_conns; k++)
			pc->conns[k] = NULL;
		if (st != TW_OK) {
			pc->ch = NULL;
			tw__pipe_fail(p, st, "opening channel %s: %s", pc->reg->name, detail);
			return st;
		}
	}
	return TW_OK;
}

/* ---- client handshake -------------------------------------------------------------- */

static void tw__pipe_on_answer(tw_conn *c, tw_status_t status, const char *detail, void *buf,
                               uint64_t len, void *arg)
{
	tw_pipe *p = arg;
	tw_wire_brochure_answer a;
	bool have_answer = false;
	if (status != TW_OK) {
		tw__pipe_conn_failed(p, c, status, "reading the BrochureAnswer", detail);
		goto out;
	}
	if (p->state == TW_PIPE_FAILED)
		goto out;
	char dd[TW_DETAIL_MAX] = "";
	size_t used;
	tw_status_t st = tw__wire_decode_brochure_answer(buf, (size_t)len, &a, &used, dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "bad BrochureAnswer: %s", dd);
		goto out;
	}
	have_answer = true;
	uint64_t id_d = 0, id_r = 0;
	bool need_d = false;
	st = tw__negotiate_client(p, &a, &id_d, &need_d, &id_r, dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "%s", dd);
		goto out;
	}
	char address[TW_URL_MAX];
	memcpy(address, a.address.s, a.address.n);
	address[a.address.n] = '\0';
	if (p->reg == p->boot_reg && p->reg->ops->answer_address) {
		char advertised[TW_URL_MAX];
		memcpy(advertised, address, sizeof(advertised));
		p->reg->ops->answer_address(p->boot, advertised, address, sizeof(address));
	}
	if (need_d) {
		/* Transport changed: a replacement descriptor connection, and the
		 * bootstrap connection is dropped (spec 3.7 step 3). */
		if (tw__pipe_connect_requested(p, address, id_d, &p->d) != TW_OK)
			goto out;
		tw__conn_close(&p->boot);
	} else {
		p->d = p->boot;
		p->boot = NULL;
	}
	if (tw__pipe_connect_requested(p, address, id_r, &p->r) != TW_OK)
		goto out;
	for (size_t i = 0; i < p->num_chans; i++) {
		tw_pipe_channel *pc = &p->chans[i];
		for (size_t k = 0; k < pc->num_conns; k++)
			if (tw__pipe_connect_requested(p, address, pc->ids[k], &pc->conns[k]) != TW_OK)
				goto out;
	}
	if (tw__pipe_open_channels(p, TW_ENDPOINT_CONNECT) != TW_OK)
		goto out;
	/* The client does not wait for any acknowledgement (spec 3.7 step 7). */
	tw__pipe_establish(p);
out:
	if (have_answer)
		tw__wire_brochure_answer_free(&a);
	tw__free(buf);
	tw__pipe_release(p);
}

/* One attempt of the client's handshake: a bootstrap connection, hello,
 * Brochure, and the read of the BrochureAnswer. */
static void tw__pipe_client_attempt(tw_pipe *p)
{
	tw_context *ctx = p->ctx;
	p->attempts++;
	char detail[TW_DETAIL_MAX];
	tw_conn_opts opts;
	tw__ctx_conn_opts(ctx, &opts);
	if (p->connect_deadline) { /* this attempt's connect gets what is left */
		uint64_t now = uv_now(&ctx->loop.uv);
		opts.connect_timeout_ms = p->connect_deadline > now ? p->connect_deadline - now : 1;
	}
	tw_status_t st = p->boot_reg->ops->connect(p->boot_reg->t, p->connect_address, &opts,
	                                           &p->boot, detail, sizeof(detail));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "%s", detail);
		return;
	}
	if (tw__pipe_watch(p, p->boot) != TW_OK)
		return;
	tw_wire_packet hello;
	memset(&hello, 0, sizeof(hello));
	hello.kind = TW_PACKET_SPONTANEOUS;
	hello.context_name.s = ctx->name;
	hello.context_name.n = ctx->name_len;
	if (tw__pipe_write_packet(p, p->boot, &hello, "hello") != TW_OK)
		return;
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	if (tw__negotiate_brochure(ctx, &w) != TW_OK) {
		tw__nop_writer_free(&w);
		tw__pipe_fail(p, TW_ERR_NOMEM, "encoding the Brochure: out of memory");
		return;
	}
	if (tw__pipe_write_object(p, p->boot, &w, "Brochure") != TW_OK)
		return;
	st = p->boot->ops->read_alloc(p->boot, ctx->max_object, tw__pipe_on_answer, p);
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "reading the BrochureAnswer: out of memory");
		return;
	}
	p->inflight++;
}

/* The client's bootstrap connection failed before the BrochureAnswer. A
 * connect that failed (refused: a server not listening yet, or whose listen
 * queue overflowed with tcp_abort_on_overflow) is tried again after a
 * back-off, at most TW_CONNECT_RETRIES times and within the connect timeout.
 * A connection that was established is never tried again: the server may
 * have taken its hello and handed a pipe to its application already. Its
 * loss before the answer is reported at once, saying that the server
 * dropped it (a server out of descriptors resets what it cannot take). */
static void tw__pipe_client_lost(tw_pipe *p, tw_status_t status, const char *what,
                                 const char *detail)
{
	bool connected = p->boot->ops->was_connected(p->boot);
	bool retryable = !connected && status == TW_ERR_SYS;
	uint64_t backoff = (uint64_t)TW_CONNECT_RETRY_FIRST_MS << (p->attempts - 1);
	uint64_t now = uv_now(&p->ctx->loop.uv);
	if (retryable && p->attempts <= TW_CONNECT_RETRIES &&
	    (!p->connect_deadline || now + backoff < p->connect_deadline)) {
		tw__conn_close(&p->boot);
		p->retry_pending = true;
		tw__pipe_timer_start(p, backoff);
		return;
	}
	const char *why = connected && tw__status_is_end(status) ? tw__pipe_dropped_hint : "";
	if (p->attempts > 1)
		tw__pipe_fail(p, status, "%s: %s (%u attempts)%s", what, detail, p->attempts, why);
	else
		tw__pipe_fail(p, status, "%s: %s%s", what, detail, why);
}

/* The client's timer: the next attempt is due, or the connect timeout ran
 * out before the BrochureAnswer. */
static void tw__pipe_client_timer(tw_pipe *p)
{
	uint64_t now = uv_now(&p->ctx->loop.uv);
	if (!p->connect_deadline || now < p->connect_deadline) {
		if (p->connect_deadline)
			tw__pipe_timer_start(p, p->connect_deadline - now);
		if (p->retry_pending) {
			p->retry_pending = false;
			tw__pipe_client_attempt(p);
		}
		return;
	}
	tw__pipe_fail(p, TW_ERR_TIMEDOUT,
	              "connect timed out: no BrochureAnswer from %s within %llu ms (%u attempt%s; "
	              "tw_context_set_connect_timeout)",
	              p->connect_address, (unsigned long long)p->connect_ms, p->attempts,
	              p->attempts == 1 ? "" : "s");
}

static void tw__pipe_do_connect(void *arg)
{
	tw_pipe *p = arg;
	tw_context *ctx = p->ctx;
	p->live = true;
	tw__list_push_back(&ctx->live_pipes, &p->live_link);
	p->inflight++; /* this step */
	if (ctx->closing) {
		tw__pipe_fail(p, TW_ERR_CLOSED, "context closed");
		goto out;
	}
	p->connect_ms = __atomic_load_n(&ctx->connect_timeout_ms, __ATOMIC_RELAXED);
	if (p->connect_ms > 0) {
		p->connect_deadline = uv_now(&ctx->loop.uv) + p->connect_ms;
		tw__pipe_timer_start(p, p->connect_ms);
	}
	tw__pipe_client_attempt(p);
out:
	tw__pipe_release(p);
	tw__pipe_unref(p); /* the command's reference */
}

static tw_pipe *tw__pipe_alloc(tw_context *ctx)
{
	tw_pipe *p = tw__calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->ctx = ctx;
	tw__list_init(&p->all_link);
	tw__list_init(&p->live_link);
	tw__list_init(&p->ready_link);
	tw__list_init(&p->out_msgs);
	tw__list_init(&p->in_msgs);
	p->info_status = TW_ERR_INVAL;
	snprintf(p->info_detail, sizeof(p->info_detail), "the handshake is still running");
	p->op_timeout_ms = __atomic_load_n(&ctx->operation_timeout_ms, __ATOMIC_RELAXED);
	return p;
}

tw_status_t tw_context_connect(tw_context *ctx, const char *url, tw_pipe **pipe_out)
{
	static const char fn[] = "tw_context_connect";
	tw__api_clear();
	if (!ctx || !url || !pipe_out)
		return tw__api_fail(TW_ERR_INVAL, "%s: ctx, url and pipe_out must not be NULL", fn);
	tw_status_t st = tw__ctx_freeze(ctx, fn);
	if (st != TW_OK)
		return st;
	tw_transport_reg *reg;
	const char *address;
	st = tw__ctx_resolve_url(ctx, fn, url, false, &reg, &address);
	if (st != TW_OK)
		return st;
	tw_pipe *p = tw__pipe_alloc(ctx);
	if (!p)
		return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
	p->refs = 3; /* the application's, "live" and the command's */
	p->boot_reg = reg;
	snprintf(p->url, sizeof(p->url), "%s", url);
	p->connect_address = p->url + (address - url);
	snprintf(p->label, sizeof(p->label), "pipe to %s", url);
	pthread_mutex_lock(&ctx->mu);
	tw__list_push_back(&ctx->all_pipes, &p->all_link);
	pthread_mutex_unlock(&ctx->mu);
	if (!tw__loop_post(&ctx->loop, &p->start_cmd, tw__pipe_do_connect, p)) {
		pthread_mutex_lock(&ctx->mu);
		tw__list_remove(&p->all_link);
		pthread_mutex_unlock(&ctx->mu);
		tw__pipe_free(p);
		return tw__api_fail(TW_ERR_CLOSED, "%s: the context is closed", fn);
	}
	*pipe_out = p;
	return TW_OK;
}

/* ---- server handshake ---------------------------------------------------------------- */

static void tw__pipe_on_brochure(tw_conn *c, tw_status_t status, const char *detail, void *buf,
                                 uint64_t len, void *arg)
{
	tw_pipe *p = arg;
	if (status != TW_OK) {
		tw__pipe_fail(p, status, "reading the Brochure: %s", detail);
		goto out;
	}
	if (p->state == TW_PIPE_FAILED)
		goto out;
	tw_wire_brochure b;
	char dd[TW_DETAIL_MAX] = "";
	size_t used;
	tw_status_t st = tw__wire_decode_brochure(buf, (size_t)len, &b, &used, dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "bad Brochure: %s", dd);
		goto out;
	}
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	st = tw__negotiate_server(p, &b, &w, dd, sizeof(dd));
	tw__wire_brochure_free(&b);
	if (st != TW_OK) {
		tw__nop_writer_free(&w);
		tw__pipe_fail(p, st, "%s", dd);
		goto out;
	}
	if (tw__pipe_write_object(p, p->boot, &w, "BrochureAnswer") != TW_OK)
		goto out;
	p->state = TW_PIPE_SERVER_CONNS;
out:
	tw__free(buf);
	tw__pipe_release(p);
}

tw_pipe *tw__pipe_new_server(tw_listener *l, tw_transport_reg *reg, tw_conn *boot,
                             const char *remote_name, size_t remote_name_len, const char *peer)
{
	tw_context *ctx = l->ctx;
	tw_pipe *p = tw__pipe_alloc(ctx);
	if (!p)
		return NULL;
	p->refs = 2; /* "live" and the listener's ready list (later the application's) */
	p->is_server = true;
	p->boot_reg = reg;
	p->boot = boot;
	p->listener = l;
	__atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
	size_t n = remote_name_len < sizeof(p->remote_name) - 1 ? remote_name_len
	                                                        : sizeof(p->remote_name) - 1;
	if (n)
		memcpy(p->remote_name, remote_name, n);
	p->remote_name[n] = '\0';
	snprintf(p->label, sizeof(p->label), "pipe from %s", peer);
	pthread_mutex_lock(&ctx->mu);
	tw__list_push_back(&ctx->all_pipes, &p->all_link);
	pthread_mutex_unlock(&ctx->mu);
	p->live = true;
	tw__list_push_back(&ctx->live_pipes, &p->live_link);
	p->state = TW_PIPE_SERVER_BROCHURE;
	p->inflight++; /* this step */
	/* The handshake's bound (spec 3.8.e), from the hello on. */
	p->handshake_ms = __atomic_load_n(&ctx->handshake_timeout_ms, __ATOMIC_RELAXED);
	if (TW_MUTANT("handshake_timeout_ignored"))
		p->handshake_ms = 0;
	if (p->handshake_ms > 0)
		tw__pipe_timer_start(p, p->handshake_ms);
	/* The watch is what notices a client that leaves after the answer
	 * (spec 5.6.b) without reading what it may already have written. */
	if (tw__pipe_watch(p, boot) == TW_OK) {
		tw_status_t st = boot->ops->read_alloc(boot, ctx->max_object, tw__pipe_on_brochure, p);
		if (st != TW_OK)
			tw__pipe_fail(p, st, "reading the Brochure: out of memory");
		else
			p->inflight++;
	}
	tw__pipe_release(p);
	return p;
}

void tw__pipe_on_requested(tw_pipe *p, int slot, tw_conn *conn)
{
	if (p->state != TW_PIPE_SERVER_CONNS) {
		if (TW_MUTANT("registration_reusable"))
			return; /* a duplicate is kept open, unanswered */
		conn->ops->close(conn);
		return;
	}
	if (tw__pipe_watch(p, conn) != TW_OK) {
		conn->ops->close(conn);
		return;
	}
	if (slot == TW_SLOT_DESCRIPTOR) {
		p->d_replacement = conn;
	} else if (slot == TW_SLOT_REPLY) {
		p->r = conn;
	} else {
		tw_pipe_channel *pc = &p->chans[(size_t)slot >> 16];
		pc->conns[slot & 0xffff] = conn;
		pc->arrived++;
	}
	if (--p->awaiting > 0)
		return;
	/* Every requested connection arrived (spec 3.8). */
	if (p->need_replacement) {
		tw__conn_close(&p->boot);
		p->d = p->d_replacement;
		p->d_replacement = NULL;
	} else {
		p->d = p->boot;
		p->boot = NULL;
	}
	if (tw__pipe_open_channels(p, TW_ENDPOINT_LISTEN) != TW_OK)
		return;
	tw__pipe_establish(p);
}

/* ---- operation timeouts ------------------------------------------------------------------ */

static void tw__pipe_on_op_timer(uv_timer_t *t);

/* Sets an operation's deadline from the pipe's operation timeout (loop
 * thread, when the operation starts) and arms the timer for it. */
static void tw__pipe_op_deadline(tw_pipe *p, uint64_t *deadline, uint64_t *timeout_ms)
{
	uint64_t ms = __atomic_load_n(&p->op_timeout_ms, __ATOMIC_RELAXED);
	*timeout_ms = ms;
	*deadline = 0;
	if (ms == 0 || p->state == TW_PIPE_FAILED || TW_MUTANT("operation_timeout_ignored"))
		return;
	uint64_t now = uv_now(&p->ctx->loop.uv);
	*deadline = now + ms;
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
			ms = m->timeout_ms;
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

/* ---- writing messages ---------------------------------------------------------------- */

/* Where a mutant's early callback leaves the real one (a write and a read
 * callback have the same type). */
static void tw__mutant_ignore_cb(tw_pipe *p, tw_status_t status, const char *detail, void *arg)
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
static void tw__pipe_out_check_all(tw_pipe *p)
{
	bool failed = p->state == TW_PIPE_FAILED;
	bool dead = failed || p->writes_dead;
	tw_status_t dead_st = failed ? p->err : p->wr_status;
	const char *dead_detail = failed ? p->err_detail : p->wr_detail;
	tw_list *it, *tmp;
	TW_LIST_FOREACH_SAFE(it, tmp, &p->out_msgs)
	{
		tw_out_msg *m = TW_CONTAINER_OF(it, tw_out_msg, link);
		if (m->pending > 0)
			continue;
		if (dead && m->status == TW_OK && !TW_MUTANT("write_error_swallowed")) {
			m->status = dead_st;
			snprintf(m->detail, sizeof(m->detail), "%s", dead_detail);
			m->done = true;
			continue;
		}
		if (m->done || (m->held && !dead))
			continue; /* the pipe's end decides its status */
		if (m->status != TW_OK || m->state == TW_OUT_SENDING)
			m->done = true;
	}
	while (!tw__list_empty(&p->out_msgs)) {
		tw_out_msg *m = TW_CONTAINER_OF(p->out_msgs.next, tw_out_msg, link);
		if (!m->done)
			break;
		tw__list_remove(&m->link);
		p->inflight++;
		tw__loop_defer(&p->ctx->loop, &m->dfr, tw__pipe_deliver_write, m);
	}
}

/* An operation of message m failed on connection c (NULL: a channel's). The
 * message takes the pipe's status once the pipe has failed. */
static void tw__pipe_out_op_failed(tw_out_msg *m, tw_conn *c, tw_status_t status,
                                   const char *what, const char *detail)
{
	m->held = true;
	tw__pipe_conn_failed(m->pipe, c, status, what, detail);
}

static void tw__pipe_on_out_written(tw_conn *c, tw_status_t status, const char *detail, void *arg)
{
	tw_out_msg *m = arg;
	tw_pipe *p = m->pipe;
	m->pending--;
	if (status != TW_OK)
		tw__pipe_out_op_failed(m, c, status, "writing a Descriptor or payload", detail);
	tw__pipe_out_check_all(p);
	tw__pipe_release(p);
}

static void tw__pipe_on_tensor_sent(tw_channel *ch, tw_status_t status, const char *detail,
                                    void *arg)
{
	tw_out_msg *m = arg;
	tw_pipe *p = m->pipe;
	m->pending--;
	if (status != TW_OK)
		tw__pipe_out_op_failed(m, NULL, status, "sending a tensor", detail);
	tw__pipe_out_check_all(p);
	tw__pipe_release(p);
}

/* Applies the DescriptorReply in buf to message m (spec 3.11). */
static void tw__pipe_take_reply(tw_pipe *p, tw_out_msg *m, const void *buf, uint64_t len)
{
	tw_wire_descriptor_reply r;
	char dd[TW_DETAIL_MAX] = "";
	size_t used;
	tw_status_t st = tw__wire_decode_descriptor_reply(buf, (size_t)len, &r, &used, dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_out_op_failed(m, NULL, st, "bad DescriptorReply", dd);
		return;
	}
	if (r.num_target_devices != m->num_untargeted && !TW_MUTANT("descriptor_reply_unchecked")) {
		tw__detail(dd, sizeof(dd), "it lists %zu devices for %zu tensors without a target device",
		           r.num_target_devices, m->num_untargeted);
		tw__wire_descriptor_reply_free(&r);
		tw__pipe_out_op_failed(m, NULL, TW_ERR_PROTO, "bad DescriptorReply", dd);
		return;
	}
	size_t k = 0;
	for (size_t i = 0; i < m->msg.num_tensors; i++) {
		if (m->tensors[i].has_target_device)
			continue;
		if (TW_MUTANT("descriptor_reply_unchecked") && k >= r.num_target_devices) {
			m->targets[i] = m->tensors[i].source_device;
			continue;
		}
		const tw_wire_device *wd = &r.target_devices[k++];
		if (wd->type.n == 0 || wd->type.n >= TW_DEVICE_TYPE_MAX) {
			tw__detail(dd, sizeof(dd), "targetDevices[%zu].type has %zu bytes", k - 1, wd->type.n);
			tw__wire_descriptor_reply_free(&r);
			tw__pipe_out_op_failed(m, NULL, TW_ERR_PROTO, "bad DescriptorReply", dd);
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
		tw__pipe_out_op_failed(m, c, status, "reading a DescriptorReply", detail);
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

static void tw__pipe_read_r(tw_pipe *p)
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
	tw_iov iov = { m->desc.buf, m->desc.len };
	tw_status_t st = p->d->ops->write(p->d, &iov, 1, TW_WRITE_OBJECT, tw__pipe_on_out_written, m);
	if (st != TW_OK)
		return st;
	m->pending++;
	p->inflight++;
	for (size_t j = 0; j < m->msg.num_payloads; j++) {
		size_t i = TW_MUTANT("payloads_reordered") ? m->msg.num_payloads - 1 - j : j;
		tw_iov piov = { m->payloads[i].data, m->payloads[i].length };
		st = p->d->ops->write(p->d, &piov, 1, 0, tw__pipe_on_out_written, m);
		if (st != TW_OK)
			return st;
		m->pending++;
		p->inflight++;
	}
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
	for (size_t i = 0; i < m->msg.num_tensors; i++) {
		const tw_tensor *t = &m->tensors[i];
		if (t->length == 0 && !TW_MUTANT("zero_length_tensor_framed"))
			continue; /* no channel traffic at all (spec 3.10) */
		const tw_pipe_pair *pp = tw__pipe_find_pair(p, &t->source_device, &m->targets[i]);
		if (!pp) {
			tw__pipe_fail(p, TW_ERR_PROTO,
			              "the peer asked for tensor %zu on %s; no channel moves %s to it", i,
			              tw__device_str(&m->targets[i], db1, sizeof(db1)),
			              tw__device_str(&t->source_device, db2, sizeof(db2)));
			return TW_ERR_PROTO;
		}
		tw_buffer b = { t->data, t->length, t->source_device };
		tw_channel *ch = p->chans[pp->chan].ch;
		tw_status_t st = ch->ops->send(ch, &b, tw__pipe_on_tensor_sent, m);
		if (st != TW_OK) {
			tw__pipe_fail(p, st, "sending tensor %zu: out of memory", i);
			return st;
		}
		m->pending++;
		p->inflight++;
	}
	return TW_OK;
}

static void tw__pipe_pump_writes(tw_pipe *p)
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
	tw__pipe_op_deadline(p, &m->deadline, &m->timeout_ms);
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
	tw__pipe_ref(p);
	if (!tw__loop_post(&p->ctx->loop, &m->dfr, tw__pipe_do_write, m)) {
		tw__out_msg_free(m);
		tw__pipe_unref(p);
		return tw__api_fail(TW_ERR_CLOSED, "%s: the context is closed", fn);
	}
	return TW_OK;
}

/* ---- reading messages ---------------------------------------------------------------- */

static void tw__pipe_deliver_desc(void *arg)
{
	tw_in_msg *m = arg;
	tw_pipe *p = m->pipe;
	bool ok = m->status == TW_OK;
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

static void tw__pipe_in_check(tw_in_msg *m)
{
	tw_pipe *p = m->pipe;
	if (m->pending > 0)
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

static void tw__pipe_in_check_all(tw_pipe *p)
{
	tw_list *it, *tmp;
	TW_LIST_FOREACH_SAFE(it, tmp, &p->in_msgs)
	{
		tw__pipe_in_check(TW_CONTAINER_OF(it, tw_in_msg, link));
	}
	tw__pipe_deliver_reads(p);
}

/* An operation of message m finished on connection c (NULL: a channel's). */
static void tw__pipe_in_op_done(tw_in_msg *m, tw_conn *c, tw_status_t status, const char *what,
                                const char *detail)
{
	tw_pipe *p = m->pipe;
	m->pending--;
	if (status != TW_OK) {
		m->held = true;
		tw__pipe_conn_failed(p, c, status, what, detail);
	}
	tw__pipe_in_check_all(p);
	tw__pipe_try_end(p); /* an ending pipe may have waited for this read */
	tw__pipe_release(p);
}

static void tw__pipe_on_payload(tw_conn *c, tw_status_t status, const char *detail, void *buf,
                                uint64_t len, void *arg)
{
	tw_in_msg *m = arg;
	if (status == TW_OK)
		m->pipe->d_frames++;
	tw__pipe_in_op_done(m, c, status, "reading a payload", detail);
}

static void tw__pipe_on_reply_written(tw_conn *c, tw_status_t status, const char *detail, void *arg)
{
	tw__pipe_in_op_done(arg, c, status, "writing a DescriptorReply", detail);
}

static void tw__pipe_on_tensor_received(tw_channel *ch, tw_status_t status, const char *detail,
                                        void *arg)
{
	tw__pipe_in_op_done(arg, NULL, status, "receiving a tensor", detail);
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
	size_t used;
	tw_status_t st = tw__wire_decode_descriptor(buf, (size_t)len, &m->wire, &used, dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "bad Descriptor: %s", dd);
		goto out;
	}
	m->have_wire = true;
	st = tw__in_msg_build_view(m, dd, sizeof(dd));
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "bad Descriptor: %s", dd);
		goto out;
	}
	p->d_frames++;
	p->heard = true;
	m->state = TW_IN_DESC_READY;
	pthread_mutex_lock(&p->ctx->mu);
	p->delivered = m;
	pthread_mutex_unlock(&p->ctx->mu);
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

static void tw__pipe_pump_reads(tw_pipe *p)
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
	tw__pipe_op_deadline(p, &m->deadline, &m->timeout_ms);
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
	tw__pipe_ref(p);
	if (!tw__loop_post(&p->ctx->loop, &m->desc_dfr, tw__pipe_do_read_descriptor, m)) {
		tw__in_msg_free(m);
		tw__pipe_unref(p);
		return tw__api_fail(TW_ERR_CLOSED, "%s: the context is closed", fn);
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
	tw__pipe_op_deadline(p, &m->deadline, &m->timeout_ms);
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
	/* The DescriptorReply names the device of each tensor that had none. */
	size_t untargeted = 0;
	for (size_t i = 0; i < m->view.num_tensors; i++)
		untargeted += !m->view.tensors[i].has_target_device;
	if (st == TW_OK && untargeted > 0) {
		tw_wire_device *devs = tw__calloc(untargeted, sizeof(*devs));
		if (!devs) {
			st = TW_ERR_NOMEM;
		} else {
			size_t k = 0;
			for (size_t i = 0; i < m->view.num_tensors; i++) {
				if (m->view.tensors[i].has_target_device)
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
		if (t->length == 0)
			continue;
		const tw_pipe_pair *pp = tw__pipe_find_pair(p, &m->ten_allocs[i].device, &t->source_device);
		tw_buffer b = { m->ten_allocs[i].data, t->length, m->ten_allocs[i].device };
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
	tw__pipe_ref(p);
	if (!tw__loop_post(&p->ctx->loop, &m->read_dfr, tw__pipe_do_read, m)) {
		tw__pipe_unref(p);
		st = tw__api_fail(TW_ERR_CLOSED, "%s: the context is closed", fn);
		goto out;
	}
	p->delivered = NULL;
out:
	pthread_mutex_unlock(&p->ctx->mu);
	return st;
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
