/*
 * pipe_handshake.c - a pipe from connect or accept to established (spec/wire.md
 * 3.3 to 3.8): the client's and the server's handshake, nop objects on
 * connections, the transport switch, the channels' connections, and the
 * established notification. The model is told in pipe.c's opening comment.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/pipe_impl.h"
#include "platform/mutant.h"
#include "platform/platform.h"

/* ---- established notification ------------------------------------------------------ */

void tw__pipe_deliver_established(void *arg)
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
		return tw__ctx_unposted(p->ctx, fn);
	}
	return TW_OK;
}

const tw_pipe_pair *tw__pipe_find_pair(const tw_pipe *p, const tw_device *local,
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
	snprintf(p->info.transport_detail, sizeof(p->info.transport_detail), "%s",
	         p->d && p->d->ops->describe ? p->d->ops->describe(p->d)
	         : p->reg->ops->describe     ? p->reg->ops->describe(p->reg->t)
	                                     : "");
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
	tw__pipe_early_end_established(p);
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
	if (--p->hs_writes == 0)
		tw__pipe_out_check_all(p); /* writes held for the handshake may go */
	tw__pipe_release(p);
}

/* Writes an encoded nop object (the writer's buffer is taken over); flags
 * as for tw_conn_ops.write, with TW_WRITE_OBJECT added. */
static tw_status_t tw__pipe_write_object(tw_pipe *p, tw_conn *c, tw_nop_writer *w,
                                         unsigned flags, const char *what)
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
	tw_status_t st =
		c->ops->write(c, &iov, 1, TW_WRITE_OBJECT | flags, tw__pipe_on_obj_written, op);
	if (st != TW_OK) {
		tw__nop_writer_free(&op->w);
		tw__free(op);
		tw__pipe_fail(p, st, "writing the %s: out of memory", what);
		return st;
	}
	p->inflight++;
	p->hs_writes++;
	return TW_OK;
}

/* Writes the hello of a connection this client opened (spec 3.3): the
 * transport gets it out even if the connection is closed first (3.3.g). */
static tw_status_t tw__pipe_write_hello(tw_pipe *p, tw_conn *c, const tw_wire_packet *pkt,
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
	return tw__pipe_write_object(p, c, &w, TW_WRITE_HELLO, what);
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
	return tw__pipe_write_hello(p, *out, &pkt, "RequestedConnection");
}

static tw_status_t tw__pipe_open_channels(tw_pipe *p, tw_endpoint_t endpoint)
{
	for (size_t i = 0; i < p->num_chans; i++) {
		tw_pipe_channel *pc = &p->chans[i];
		char detail[TW_DETAIL_MAX];
		unsigned flags = p->ext_proof && pc->reg->ops->speaks_proof ? TW_CHANNEL_PROOF : 0;
		tw_status_t st = pc->reg->ops->open(pc->reg->c, endpoint, pc->conns, pc->num_conns, flags,
		                                    &pc->ch, detail, sizeof(detail));
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
	size_t used, budget = tw__ctx_decode_budget(p->ctx);
	tw_status_t st = tw__wire_decode_brochure_answer_within(buf, (size_t)len, &budget, &a, &used, dd,
	                                                        sizeof(dd));
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
	if (tw__pipe_write_hello(p, p->boot, &hello, "hello") != TW_OK)
		return;
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	if (tw__negotiate_brochure(p, &w) != TW_OK) {
		tw__nop_writer_free(&w);
		tw__pipe_fail(p, TW_ERR_NOMEM, "encoding the Brochure: out of memory");
		return;
	}
	if (tw__pipe_write_object(p, p->boot, &w, 0, "Brochure") != TW_OK)
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
void tw__pipe_client_lost(tw_pipe *p, tw_status_t status, const char *what,
                          const char *detail)
{
	bool connected = p->boot->ops->was_connected(p->boot);
	bool retryable = !connected && status == TW_ERR_SYS;
	uint64_t backoff = (uint64_t)TW_CONNECT_RETRY_FIRST_MS << (p->attempts - 1);
	uint64_t now = uv_now(&p->ctx->loop.uv);
	if (retryable && p->attempts <= TW_CONNECT_RETRIES &&
	    (!p->connect_deadline ||
	     (now < p->connect_deadline && backoff < p->connect_deadline - now))) {
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
void tw__pipe_client_timer(tw_pipe *p)
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
	if (p->connect_ms > 0) { /* taken by tw_context_connect */
		p->connect_deadline = tw__loop_deadline(&ctx->loop, p->connect_ms);
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
	/* the bound in force at the call (a later change is for later pipes) */
	p->connect_ms = __atomic_load_n(&ctx->connect_timeout_ms, __ATOMIC_RELAXED);
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
		return tw__ctx_unposted(ctx, fn);
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
	size_t used, budget = tw__ctx_decode_budget(p->ctx);
	tw_status_t st = tw__wire_decode_brochure_within(buf, (size_t)len, &budget, &b, &used, dd,
	                                                 sizeof(dd));
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
	if (tw__pipe_write_object(p, p->boot, &w, 0, "BrochureAnswer") != TW_OK)
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
