/*
 * pipe_end.c - the end of a pipe (spec/wire.md 5.6, 8.2): the pipe's timers,
 * the end watches on its connections, the verdict after the first end, the
 * goodbye on a local close, and the handshake's bound. The model is told in
 * pipe.c's opening comment.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/pipe_impl.h"
#include "platform/mutant.h"
#include "platform/platform.h"

/* ---- the end of the pipe (spec 5.6, 8.2) --------------------------------------------- */

static void tw__pipe_on_timer_closed(uv_handle_t *h)
{
	tw__pipe_release(h->data);
}

/* (Re)starts a timer of the pipe; the open handle holds the pipe alive
 * (inflight) until tw__ptimer_close's callback. Nothing once closed. */
void tw__ptimer_start(tw_pipe *p, tw_pipe_timer *pt, uv_timer_cb cb, uint64_t ms)
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

void tw__ptimer_stop(tw_pipe_timer *pt)
{
	if (pt->inited && !pt->closed)
		uv_timer_stop(&pt->t);
}

/* Closes a timer for good, also one that was never started. */
void tw__ptimer_close(tw_pipe_timer *pt)
{
	bool open = pt->inited && !pt->closed;
	pt->closed = true;
	if (!open)
		return;
	uv_timer_stop(&pt->t);
	uv_close((uv_handle_t *)&pt->t, tw__pipe_on_timer_closed);
}

void tw__pipe_timer_close(tw_pipe *p)
{
	tw__ptimer_close(&p->timer);
}

static void tw__pipe_handshake_timed_out(tw_pipe *p);

static void tw__pipe_on_timer(uv_timer_t *t)
{
	tw_pipe *p = t->data;
	if (p->state == TW_PIPE_FAILED) {
		/* Our goodbye was not written in time: give up on it. */
		tw__conn_close(&p->r_goodbye);
		tw__pipe_timer_close(p);
		return;
	}
	if (p->state == TW_PIPE_SERVER_CONNS && p->early_conn) {
		tw__pipe_fail(p, p->early_status, "%s: %s", p->early_what, p->early_detail);
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

void tw__pipe_timer_start(tw_pipe *p, uint64_t ms)
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
void tw__pipe_send_goodbye(tw_pipe *p)
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
		           "connection lost without a goodbye (the peer died, its pipe failed on its "
		           "side, or the network failed): %s",
		           p->end_detail);
		return TW_ERR_CONNRESET;
	}
	tw__detail(detail, len, "%s", p->end_detail);
	return p->end_status;
}

/* What a client adds when the server dropped its connections before
 * sending anything on them: most likely it was short of resources while it
 * set the pipe up (spec 5.8.d). Before and after the BrochureAnswer alike. */
const char tw__pipe_dropped_hint[] =
	"; the server dropped the connection before sending anything on it (out of file "
	"descriptors or memory, or it died)";

/* After the BrochureAnswer the same silence has more causes: the server
 * may also have failed the pipe on its side (a refused copy, a limit). */
static const char tw__pipe_silent_hint[] =
	"; nothing came from the server on this pipe: it may have dropped the connection (out of "
	"file descriptors or memory), died, or failed the pipe on its side";

static void tw__pipe_verdict_hint(const tw_pipe *p, char *detail, size_t len)
{
	if (p->is_server || p->heard || p->goodbye_seen)
		return;
	size_t n = strlen(detail);
	snprintf(detail + n, len - n, "%s", tw__pipe_silent_hint);
}

/* Advances an ending pipe (see the file comment): once the verdict is known
 * every write whose callback has not run gets it, and the pipe fails once
 * the read side has handed over what the peer wrote before it left. */
void tw__pipe_try_end(tw_pipe *p)
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
	if (((p->d_ended && !tw__pipe_receiving(p)) || tw__pipe_read_broken(p) || p->d_stalled ||
	     TW_MUTANT("data_dropped_at_end")) &&
	    !tw__pipe_writes_landing(p))
		tw__pipe_fail(p, st, "%s", what);
}

/* Is a write still waiting for completions that will confirm its bytes
 * reached the peer (a channel's acknowledgement, ibv's landing)? Failing
 * the pipe now would close the connections under it and report as lost a
 * write the peer has (the peer read it and said goodbye before the
 * confirmation came back). The transport bounds the wait: a peer that is
 * gone fails the operation. */
bool tw__pipe_writes_landing(tw_pipe *p)
{
	tw_list *it;
	for (it = p->out_msgs.next; it != &p->out_msgs; it = it->next) {
		tw_out_msg *m = TW_CONTAINER_OF(it, tw_out_msg, link);
		if (m->state == TW_OUT_SENDING && m->pending > 0 && m->peer_acked &&
		    m->status == TW_OK && !m->held)
			return true;
	}
	return false;
}

bool tw__status_is_end(tw_status_t st)
{
	return st == TW_ERR_EOF || st == TW_ERR_CONNRESET;
}

/* Loop thread: an established pipe's peer is leaving (the first end or
 * hang-up of one of its connections): start the pipe's end, once. */

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

/* A server waiting for the client's other connections (SERVER_CONNS) heard
 * connection c end or hang up (core.h, early_conn): the first report is
 * held, with a bounded wait, and later ones (the client's other
 * connections saying the same) are dropped. Returns true when held. */
static bool tw__pipe_hold_early_end(tw_pipe *p, tw_conn *c, bool hup, tw_status_t status,
                                    const char *what, const char *detail)
{
	if (p->early_conn)
		return true;
	p->early_conn = c;
	p->early_hup = hup;
	p->early_status = status;
	snprintf(p->early_what, sizeof(p->early_what), "%s", what);
	snprintf(p->early_detail, sizeof(p->early_detail), "%s", detail);
	uint64_t wait = TW_PIPE_VERDICT_WAIT_MS;
	if (p->timer.inited && uv_is_active((uv_handle_t *)&p->timer.t) &&
	    uv_timer_get_due_in(&p->timer.t) < wait)
		wait = uv_timer_get_due_in(&p->timer.t); /* the handshake's bound is sooner */
	tw__pipe_timer_start(p, wait);
	return true;
}

/* Loop thread: connection `c` of the pipe (NULL: one a channel owns) failed
 * with `status`. Anything but the end of an established pipe's connection
 * fails the pipe at once; an end starts (or advances) the pipe's end, and
 * the caller holds its operation for the verdict. */
void tw__pipe_conn_failed(tw_pipe *p, tw_conn *c, tw_status_t status, const char *what,
                          const char *detail)
{
	tw__pipe_conn_op_failed(p, c, false, status, what, detail);
}

void tw__pipe_conn_op_failed(tw_pipe *p, tw_conn *c, bool write, tw_status_t status,
                             const char *what, const char *detail)
{
	if (p->state == TW_PIPE_FAILED)
		return;
	if (p->state == TW_PIPE_CLIENT_CONNECTING) {
		if (c == p->boot)
			tw__pipe_client_lost(p, status, what, detail);
		return; /* else a bootstrap connection given up on earlier */
	}
	if (p->state == TW_PIPE_SERVER_CONNS && c && tw__status_is_end(status) &&
	    tw__pipe_hold_early_end(p, c, false, status, what, detail))
		return;
	if (p->state != TW_PIPE_ESTABLISHED || !tw__status_is_end(status)) {
		tw__pipe_fail(p, status, "%s: %s", what, detail);
		return;
	}
	if (TW_MUTANT("peer_death_ignored"))
		return;
	tw__pipe_start_end(p, status, what, detail);
	/* A write that met the end says nothing of what is left to read: the
	 * transport still hands it over (transport.h); a read or the watch will
	 * report the connection's end. */
	if (c && c == p->d && !write)
		p->d_ended = true;
	if (c && c == p->r && p->ext_goodbye && !p->goodbye_seen && !write)
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

/* An established pipe's connection c hung up: the end starts; the
 * connection itself has not ended (D still hands over what it holds). */
static void tw__pipe_hangup_established(tw_pipe *p, tw_conn *c, const char *detail)
{
	char what[112];
	snprintf(what, sizeof(what), "%s ended", tw__pipe_conn_name(p, c));
	if (c == p->d)
		p->d_hup = true;
	tw__pipe_start_end(p, TW_ERR_EOF, what, detail);
}

/* The peer hung up on one of the pipe's connections with bytes unread
 * (transport.h). After establishment it starts the pipe's end like an end
 * would. Before it, a server still waiting for the client's other
 * connections holds it (tw__pipe_hold_early_end). In any other state the
 * handshake cannot complete any more: the pipe fails now, not when a read
 * reaches the end of file. */
static void tw__pipe_on_conn_hangup(tw_conn *c, const char *detail, void *arg)
{
	tw_pipe *p = arg;
	if (p->state == TW_PIPE_FAILED)
		return;
	char what[112];
	if (tw__pipe_boot_may_go(p, c)) {
		tw__conn_close(&p->boot);
	} else if (p->state == TW_PIPE_ESTABLISHED) {
		tw__pipe_hangup_established(p, c, detail);
	} else {
		snprintf(what, sizeof(what), "%s ended before the pipe was established",
		         tw__pipe_conn_name(p, c));
		if (p->state == TW_PIPE_SERVER_CONNS &&
		    tw__pipe_hold_early_end(p, c, true, TW_ERR_EOF, what, detail))
			return;
		tw__pipe_fail(p, TW_ERR_EOF, "%s: %s", what, detail);
	}
}

void tw__pipe_early_end_established(tw_pipe *p)
{
	tw_conn *c = p->early_conn;
	if (!c)
		return;
	p->early_conn = NULL;
	if (p->early_hup) {
		tw__pipe_hangup_established(p, c, p->early_detail);
		return;
	}
	char what[112];
	snprintf(what, sizeof(what), "%s ended", tw__pipe_conn_name(p, c));
	tw__pipe_conn_failed(p, c, p->early_status, what, p->early_detail);
}

/* Arms the end watch of a connection the pipe just got. */
tw_status_t tw__pipe_watch(tw_pipe *p, tw_conn *c)
{
	tw_status_t st = c->ops->watch_end(c, tw__pipe_on_conn_end, tw__pipe_on_conn_hangup, p);
	if (st != TW_OK) {
		tw__pipe_fail(p, st, "watching %s: out of memory", tw__pipe_conn_name(p, c));
		return st;
	}
	p->inflight++;
	return TW_OK;
}
