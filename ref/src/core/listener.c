/*
 * listener.c - the listener (spec/wire.md 3.3, 3.8): binds one transport
 * listener per URL, reads exactly one Packet from every accepted connection
 * and dispatches it: a SpontaneousConnection becomes a new server pipe, a
 * RequestedConnection is routed by registration id to the pipe that asked
 * for it. Registration ids come from one counter per listener, from 0.
 *
 * Robustness (issue 2 item 9): whatever a connection sends before it is a
 * pipe - a malformed, truncated or oversized hello, an unknown id, nothing
 * at all - costs only that connection. It is closed, the optional error
 * observer hears why, and the listener keeps accepting. Stock kills the whole
 * listener for some of these (spec 5.3). A connection whose hello is not in
 * within the context's handshake timeout (spec 3.8.e) is closed the same
 * way (TW_ERR_TIMEDOUT): one timer per listener, armed for the earliest
 * deadline of the connections still waiting.
 *
 * This file must not know about Brochures or messages: see pipe.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "platform/mutant.h"
#include "platform/platform.h"


static void tw__listener_ref(tw_listener *l)
{
	__atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
}

void tw__listener_free(tw_listener *l)
{
	tw__free(l->regs);
	tw__free(l);
}

void tw__listener_unref(tw_listener *l)
{
	if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	tw_context *ctx = l->ctx;
	pthread_mutex_lock(&ctx->mu);
	tw__list_remove(&l->all_link);
	pthread_mutex_unlock(&ctx->mu);
	tw__listener_free(l);
}

/* Loop thread: the listener is closed and nothing of it is in flight. */
static void tw__listener_maybe_finish(tw_listener *l)
{
	if (!l->closed || !l->live || l->inflight > 0)
		return;
	l->live = false;
	tw__list_remove(&l->live_link);
	tw_context *ctx = l->ctx;
	tw__listener_unref(l);
	tw__ctx_check_done(ctx);
}

__attribute__((format(printf, 3, 4))) static void tw__listener_report(tw_listener *l,
                                                                      tw_status_t status,
                                                                      const char *fmt, ...)
{
	char detail[TW_DETAIL_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&l->ctx->mu);
	tw_listener_error_cb cb = l->err_cb;
	void *arg = l->err_arg;
	pthread_mutex_unlock(&l->ctx->mu);
	/* We are inside a transport callback, never inside an API call. */
	if (cb)
		cb(l, status, detail, arg);
}

/* ---- accepts -------------------------------------------------------------- */

static void tw__listener_deliver_accept(void *arg)
{
	tw_accept_req *req = arg;
	tw_listener *l = req->listener;
	req->cb(l, req->status, req->status == TW_OK ? "" : req->detail, req->pipe, req->arg);
	if (TW_MUTANT("accept_cb_twice") && req->status == TW_OK)
		req->cb(l, req->status, "", req->pipe, req->arg);
	tw__free(req);
	l->inflight--;
	tw__listener_maybe_finish(l);
	tw__listener_unref(l); /* the accept request's reference */
}

/* Pipes waiting for tw_listener_accept, at most: past it a hello is
 * refused (as a full listen backlog refuses connections), so that peers
 * that say hello to an application that does not accept cannot pile up
 * pipes without bound. */
#define TW_LISTENER_READY_MAX 4096

/* A pipe that failed while it waited for an accept (its client left, its
 * handshake timed out) leaves the ready list: an accept gets the next one,
 * not a dead pipe, and the failure goes to the listener's observer. */
static void tw__listener_drop_failed(tw_listener *l, tw_pipe *p)
{
	tw__list_remove(&p->ready_link);
	l->num_ready--;
	tw__listener_report(l, p->err, "listener: a pipe failed before it was accepted: %s",
	                    p->err_detail);
	tw__pipe_unref(p); /* the ready list's reference */
}

static void tw__listener_match(tw_listener *l)
{
	while (!tw__list_empty(&l->accepts) && !tw__list_empty(&l->ready)) {
		tw_pipe *p = TW_CONTAINER_OF(l->ready.next, tw_pipe, ready_link);
		if (p->state == TW_PIPE_FAILED) {
			tw__listener_drop_failed(l, p);
			continue;
		}
		tw__list_remove(&p->ready_link);
		l->num_ready--;
		tw_accept_req *req = TW_CONTAINER_OF(l->accepts.next, tw_accept_req, link);
		tw__list_remove(&req->link);
		/* The ready list's reference becomes the application's. */
		req->pipe = p;
		req->status = TW_OK;
		l->inflight++;
		tw__loop_defer(&l->ctx->loop, &req->dfr, tw__listener_deliver_accept, req);
	}
}

static void tw__listener_do_accept(void *arg)
{
	tw_accept_req *req = arg;
	tw_listener *l = req->listener;
	if (l->closed || !l->live) {
		req->status = TW_ERR_CLOSED;
		tw__detail(req->detail, sizeof(req->detail), "tw_listener_accept: listener closed");
		l->inflight++;
		tw__loop_defer(&l->ctx->loop, &req->dfr, tw__listener_deliver_accept, req);
		return;
	}
	tw__list_push_back(&l->accepts, &req->link);
	tw__listener_match(l);
}

tw_status_t tw_listener_accept(tw_listener *l, tw_accept_cb cb, void *arg)
{
	static const char fn[] = "tw_listener_accept";
	tw__api_clear();
	if (!l || !cb)
		return tw__api_fail(TW_ERR_INVAL, "%s: listener and cb must not be NULL", fn);
	tw_accept_req *req = tw__calloc(1, sizeof(*req));
	if (!req)
		return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
	req->listener = l;
	req->cb = cb;
	req->arg = arg;
	tw__list_init(&req->link);
	tw__listener_ref(l);
	if (!tw__loop_post(&l->ctx->loop, &req->dfr, tw__listener_do_accept, req)) {
		tw__free(req);
		tw__listener_unref(l);
		return tw__ctx_unposted(l->ctx, fn);
	}
	return TW_OK;
}

/* ---- hellos ---------------------------------------------------------------- */

static void tw__listener_on_hello_timer(uv_timer_t *t);

/* Makes the hello timer fire by `deadline` (uv_now() time). */
static void tw__listener_arm_hello_timer(tw_listener *l, uint64_t deadline)
{
	if (!l->hello_timer_open || deadline == UINT64_MAX)
		return;
	if (uv_is_active((uv_handle_t *)&l->hello_timer) && l->hello_due <= deadline)
		return;
	uint64_t now = uv_now(&l->ctx->loop.uv);
	l->hello_due = deadline;
	uv_timer_start(&l->hello_timer, tw__listener_on_hello_timer, deadline > now ? deadline - now : 0,
	               0);
}

/* Closes the connections whose hello is overdue (their reads come back to
 * tw__listener_on_hello), then waits for the next deadline. */
static void tw__listener_on_hello_timer(uv_timer_t *t)
{
	tw_listener *l = t->data;
	uint64_t now = uv_now(&l->ctx->loop.uv);
	uint64_t next = UINT64_MAX;
	tw_list *it;
	for (it = l->hellos.next; it != &l->hellos; it = it->next) {
		tw_hello_wait *hw = TW_CONTAINER_OF(it, tw_hello_wait, link);
		if (hw->timed_out)
			continue;
		if (hw->deadline <= now) {
			hw->timed_out = true;
			hw->conn->ops->close(hw->conn);
		} else if (hw->deadline < next) {
			next = hw->deadline;
		}
	}
	tw__listener_arm_hello_timer(l, next);
}

static void tw__listener_on_hello(tw_conn *conn, tw_status_t status, const char *detail,
                                  void *buf, uint64_t len, void *arg)
{
	tw_hello_wait *hw = arg;
	tw_listener *l = hw->listener;
	tw__list_remove(&hw->link);
	l->inflight--;
	if (hw->timed_out) {
		/* Closed by the hello timer (even if the hello made it into a
		 * completed read meanwhile: the connection is gone). */
		if (!l->closed)
			tw__listener_report(l, TW_ERR_TIMEDOUT,
			                    "listener: connection from %s sent no complete hello within "
			                    "%llu ms (handshake timeout, spec 3.8.e); closed",
			                    hw->peer, (unsigned long long)hw->timeout_ms);
		goto out;
	}
	if (l->closed) {
		/* The listener closed this connection already. */
		goto out;
	}
	if (status != TW_OK) {
		/* A connection that ends before its hello broke the protocol
		 * (every connection starts with a Packet, spec 3.3). */
		if (status == TW_ERR_EOF)
			tw__listener_report(l, TW_ERR_PROTO,
			                    "listener: connection from %s closed before its hello: %s",
			                    hw->peer, detail);
		else if (status == TW_ERR_PROTO)
			tw__listener_report(l, status, "listener: bad hello from %s: %s", hw->peer, detail);
		else
			tw__listener_report(l, status,
			                    "listener: connection from %s failed before its hello: %s",
			                    hw->peer, detail);
		conn->ops->close(conn);
		goto out;
	}
	tw_wire_packet pkt;
	size_t used = 0, budget = tw__ctx_decode_budget(l->ctx);
	char dd[TW_DETAIL_MAX] = "";
	tw_status_t st = tw__wire_decode_packet_within(buf, (size_t)len, &budget, &pkt, &used, dd,
	                                               sizeof(dd));
	if (st != TW_OK) {
		if (TW_MUTANT("listener_dies_on_bad_hello"))
			l->mut_dead = true;
		tw__listener_report(l, st, "listener: bad hello from %s: %s", hw->peer, dd);
		conn->ops->close(conn);
		goto out;
	}
	switch (pkt.kind) {
	case TW_PACKET_SPONTANEOUS: {
		if (l->num_ready >= TW_LISTENER_READY_MAX) {
			/* dead pipes must not keep live clients out */
			tw_list *it, *tmp;
			TW_LIST_FOREACH_SAFE(it, tmp, &l->ready)
			{
				tw_pipe *q = TW_CONTAINER_OF(it, tw_pipe, ready_link);
				if (q->state == TW_PIPE_FAILED)
					tw__listener_drop_failed(l, q);
			}
		}
		if (l->num_ready >= TW_LISTENER_READY_MAX) {
			tw__listener_report(l, TW_ERR_NOMEM,
			                    "listener: %d pipes wait for tw_listener_accept; the hello "
			                    "from %s is refused",
			                    TW_LISTENER_READY_MAX, hw->peer);
			conn->ops->close(conn);
			break;
		}
		tw_pipe *p = tw__pipe_new_server(l, hw->reg, conn, pkt.context_name.s,
		                                 pkt.context_name.n, hw->peer);
		if (!p) {
			tw__listener_report(l, TW_ERR_NOMEM,
			                    "listener: no memory for a pipe from %s", hw->peer);
			conn->ops->close(conn);
			break;
		}
		tw__list_push_back(&l->ready, &p->ready_link);
		l->num_ready++;
		tw__listener_match(l);
		break;
	}
	case TW_PACKET_REQUESTED: {
		size_t i;
		for (i = 0; i < l->num_regs; i++)
			if (l->regs[i].id == pkt.registration_id)
				break;
		if (i == l->num_regs && TW_MUTANT("registration_unchecked"))
			break; /* the connection stays open, unanswered */
		if (i == l->num_regs) {
			tw__listener_report(l, TW_ERR_PROTO,
			                    "listener: RequestedConnection from %s has unknown "
			                    "registration id %llu",
			                    hw->peer, (unsigned long long)pkt.registration_id);
			conn->ops->close(conn);
			break;
		}
		if (l->regs[i].pipe->reg != hw->reg && !TW_MUTANT("registration_any_transport")) {
			/* The id is right, the transport is not (3.8.f): whoever sent
			 * it cannot be the pipe's peer speaking as agreed. The
			 * registration stays for the connection the answer asked for. */
			tw__listener_report(l, TW_ERR_PROTO,
			                    "listener: RequestedConnection from %s names registration "
			                    "id %llu, which waits for a connection over %s",
			                    hw->peer, (unsigned long long)pkt.registration_id,
			                    l->regs[i].pipe->reg->name);
			conn->ops->close(conn);
			break;
		}
		tw_registration r = l->regs[i];
		if (!TW_MUTANT("registration_reusable"))
			l->regs[i] = l->regs[--l->num_regs];
		tw__pipe_on_requested(r.pipe, r.slot, conn);
		break;
	}
	default:
		if (TW_MUTANT("empty_variant_kept"))
			break;
		tw__listener_report(l, TW_ERR_PROTO,
		                    "listener: hello from %s is an empty Packet variant (index -1)",
		                    hw->peer);
		conn->ops->close(conn);
		break;
	}
	tw__wire_packet_free(&pkt);
out:
	tw__free(buf);
	tw__free(hw);
	tw__listener_maybe_finish(l);
}

static void tw__listener_on_conn(tw_tlistener *tl, tw_status_t status, const char *detail,
                                 tw_conn *conn, void *arg)
{
	tw_listener_entry *e = arg;
	tw_listener *l = e->listener;
	if (l->closed) {
		if (conn)
			conn->ops->close(conn);
		return;
	}
	if (status != TW_OK) {
		tw__listener_report(l, status, "listener: %s", detail);
		return;
	}
	if (TW_MUTANT("listener_dies_on_bad_hello") && l->mut_dead) {
		conn->ops->close(conn);
		return;
	}
	tw_hello_wait *hw = tw__calloc(1, sizeof(*hw));
	if (!hw) {
		tw__listener_report(l, TW_ERR_NOMEM, "listener: no memory for a connection from %s",
		                    conn->ops->peer(conn));
		conn->ops->close(conn);
		return;
	}
	hw->listener = l;
	hw->conn = conn;
	hw->reg = e->reg;
	hw->timeout_ms = __atomic_load_n(&l->ctx->handshake_timeout_ms, __ATOMIC_RELAXED);
	hw->deadline = hw->timeout_ms > 0 ? tw__loop_deadline(&l->ctx->loop, hw->timeout_ms) : UINT64_MAX;
	snprintf(hw->peer, sizeof(hw->peer), "%s://%s", e->reg->name, conn->ops->peer(conn));
	tw_status_t st = conn->ops->read_alloc(conn, l->ctx->max_object, tw__listener_on_hello, hw);
	if (st != TW_OK) {
		tw__listener_report(l, st, "listener: no memory to read the hello from %s", hw->peer);
		conn->ops->close(conn);
		tw__free(hw);
		return;
	}
	l->inflight++;
	tw__list_push_back(&l->hellos, &hw->link);
	tw__listener_arm_hello_timer(l, hw->deadline);
}

/* ---- registrations (spec 3.8) ------------------------------------------------ */

tw_status_t tw__listener_register(tw_listener *l, tw_pipe *p, int slot, uint64_t *id_out)
{
	if (l->closed)
		return TW_ERR_CLOSED;
	if (l->num_regs == l->cap_regs) {
		size_t cap = l->cap_regs ? 2 * l->cap_regs : 8;
		tw_registration *n = tw__realloc(l->regs, cap * sizeof(*n));
		if (!n)
			return TW_ERR_NOMEM;
		l->regs = n;
		l->cap_regs = cap;
	}
	tw_registration *r = &l->regs[l->num_regs++];
	r->id = l->next_id++;
	r->pipe = p;
	r->slot = slot;
	*id_out = r->id;
	return TW_OK;
}

void tw__listener_unregister_pipe(tw_listener *l, tw_pipe *p)
{
	for (size_t i = 0; i < l->num_regs;) {
		if (l->regs[i].pipe == p)
			l->regs[i] = l->regs[--l->num_regs];
		else
			i++;
	}
}

tw_listener_entry *tw__listener_entry_for(tw_listener *l, tw_transport_reg *reg)
{
	for (size_t i = 0; i < l->num_entries; i++)
		if (l->entries[i].reg == reg)
			return &l->entries[i];
	return NULL;
}

void tw__listener_pipe_released(tw_listener *l)
{
	tw__listener_unref(l);
}

/* ---- close ------------------------------------------------------------------- */

static void tw__listener_on_timer_closed(uv_handle_t *h)
{
	tw_listener *l = h->data;
	l->inflight--;
	tw__listener_maybe_finish(l);
}

void tw__listener_close_internal(tw_listener *l)
{
	if (l->closed)
		return;
	l->closed = true;
	for (size_t i = 0; i < l->num_entries; i++) {
		if (l->entries[i].tl) {
			l->entries[i].tl->ops->close(l->entries[i].tl);
			l->entries[i].tl = NULL;
		}
	}
	if (l->hello_timer_open) {
		l->hello_timer_open = false;
		uv_timer_stop(&l->hello_timer);
		uv_close((uv_handle_t *)&l->hello_timer, tw__listener_on_timer_closed);
	}
	tw_list *it, *tmp;
	TW_LIST_FOREACH_SAFE(it, tmp, &l->hellos)
	{
		tw_hello_wait *hw = TW_CONTAINER_OF(it, tw_hello_wait, link);
		if (!hw->timed_out) /* else closed already */
			hw->conn->ops->close(hw->conn); /* its read comes back with CLOSED */
	}
	TW_LIST_FOREACH_SAFE(it, tmp, &l->accepts)
	{
		tw_accept_req *req = TW_CONTAINER_OF(it, tw_accept_req, link);
		tw__list_remove(&req->link);
		req->status = TW_ERR_CLOSED;
		tw__detail(req->detail, sizeof(req->detail), "tw_listener_accept: listener closed");
		l->inflight++;
		tw__loop_defer(&l->ctx->loop, &req->dfr, tw__listener_deliver_accept, req);
	}
	while (!tw__list_empty(&l->ready)) {
		tw_pipe *p = TW_CONTAINER_OF(l->ready.next, tw_pipe, ready_link);
		tw__list_remove(&p->ready_link);
		l->num_ready--;
		tw__pipe_close_internal(p, TW_ERR_CLOSED, "listener closed before the pipe was accepted");
		tw__pipe_unref(p); /* the ready list's reference */
	}
	while (l->num_regs > 0) {
		tw_pipe *p = l->regs[0].pipe;
		tw__pipe_close_internal(p, TW_ERR_CLOSED,
		                        "listener closed before all requested connections arrived");
		tw__listener_unregister_pipe(l, p);
	}
	tw__listener_maybe_finish(l);
}

static void tw__listener_do_close(void *arg)
{
	tw_listener *l = arg;
	tw__listener_close_internal(l);
	tw__listener_unref(l); /* the command's reference */
}

void tw_listener_close(tw_listener *l)
{
	if (!l)
		return;
	tw_context *ctx = l->ctx;
	pthread_mutex_lock(&ctx->mu);
	bool post = !l->close_posted;
	l->close_posted = true;
	pthread_mutex_unlock(&ctx->mu);
	if (!post)
		return;
	tw__listener_ref(l);
	if (!tw__loop_post(&ctx->loop, &l->close_cmd, tw__listener_do_close, l))
		tw__listener_unref(l); /* the loop finished: it is closed already */
}

void tw_listener_destroy(tw_listener *l)
{
	if (!l)
		return;
	tw_listener_close(l);
	tw__listener_unref(l); /* the application's reference */
}

tw_status_t tw_listener_on_error(tw_listener *l, tw_listener_error_cb cb, void *arg)
{
	tw__api_clear();
	if (!l)
		return tw__api_fail(TW_ERR_INVAL, "tw_listener_on_error: listener must not be NULL");
	pthread_mutex_lock(&l->ctx->mu);
	l->err_cb = cb;
	l->err_arg = arg;
	pthread_mutex_unlock(&l->ctx->mu);
	return TW_OK;
}

tw_status_t tw_listener_url(tw_listener *l, const char *transport, char *buf, size_t buflen)
{
	static const char fn[] = "tw_listener_url";
	tw__api_clear();
	if (!l || !buf)
		return tw__api_fail(TW_ERR_INVAL, "%s: listener and buf must not be NULL", fn);
	const tw_listener_entry *e = NULL;
	for (size_t i = 0; i < l->num_entries && !e; i++) {
		const tw_transport_reg *reg = l->entries[i].reg;
		/* its wire name, its kind, or a scheme of that kind ("tcp" for uv) */
		bool match = !transport || strcmp(reg->name, transport) == 0 ||
		             strcmp(reg->ops->kind, transport) == 0;
		for (size_t k = 0; !match && reg->ops->schemes && reg->ops->schemes[k]; k++)
			match = strcmp(reg->ops->schemes[k], transport) == 0;
		if (match)
			e = &l->entries[i];
	}
	if (!e)
		return tw__api_fail(TW_ERR_INVAL, "%s: the listener does not listen on transport '%s'", fn,
		                    transport);
	size_t need = strlen(e->reg->name) + 3 + strlen(e->address) + 1;
	if (need > buflen)
		return tw__api_fail(TW_ERR_INVAL, "%s: buffer of %zu bytes is too small (need %zu)", fn,
		                    buflen, need);
	snprintf(buf, buflen, "%s://%s", e->reg->name, e->address);
	return TW_OK;
}

/* ---- listen ------------------------------------------------------------------ */

struct tw_listen_call {
	tw_listener *l;
	const char *addresses[TW_REGS_MAX];
	tw_status_t status;
	char detail[TW_DETAIL_MAX];
};

static void tw__listener_do_listen(void *arg)
{
	struct tw_listen_call *c = arg;
	tw_listener *l = c->l;
	if (l->ctx->closing) {
		c->status = TW_ERR_CLOSED;
		tw__detail(c->detail, sizeof(c->detail), "the context is closed");
		return;
	}
	tw_conn_opts opts;
	tw__ctx_conn_opts(l->ctx, &opts);
	for (size_t i = 0; i < l->num_entries; i++) {
		tw_listener_entry *e = &l->entries[i];
		c->status = e->reg->ops->listen(e->reg->t, c->addresses[i], &opts, tw__listener_on_conn,
		                                e, &e->tl, c->detail, sizeof(c->detail));
		if (c->status != TW_OK) {
			for (size_t k = 0; k < i; k++) {
				l->entries[k].tl->ops->close(l->entries[k].tl);
				l->entries[k].tl = NULL;
			}
			return;
		}
		snprintf(e->address, sizeof(e->address), "%s", e->tl->ops->address(e->tl));
	}
	uv_timer_init(&l->ctx->loop.uv, &l->hello_timer); /* cannot fail */
	l->hello_timer.data = l;
	l->hello_timer_open = true;
	l->inflight++; /* the open timer handle, until tw__listener_on_timer_closed */
	l->live = true;
	tw__list_push_back(&l->ctx->live_listeners, &l->live_link);
}

tw_status_t tw_context_listen(tw_context *ctx, const char *const *urls, size_t num_urls,
                              tw_listener **listener_out)
{
	static const char fn[] = "tw_context_listen";
	tw__api_clear();
	if (!ctx || !urls || !listener_out || num_urls == 0)
		return tw__api_fail(TW_ERR_INVAL, "%s: needs a context, at least one URL and listener_out",
		                    fn);
	if (num_urls > TW_REGS_MAX)
		return tw__api_fail(TW_ERR_INVAL, "%s: at most %d URLs", fn, TW_REGS_MAX);
	tw_status_t st = tw__ctx_freeze(ctx, fn);
	if (st != TW_OK)
		return st;
	tw_listener *l = tw__calloc(1, sizeof(*l));
	struct tw_listen_call *call = tw__calloc(1, sizeof(*call));
	if (!l || !call) {
		tw__free(l);
		tw__free(call);
		return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
	}
	l->ctx = ctx;
	l->refs = 2; /* the application's and "live" */
	tw__list_init(&l->all_link);
	tw__list_init(&l->live_link);
	tw__list_init(&l->accepts);
	tw__list_init(&l->ready);
	tw__list_init(&l->hellos);
	call->l = l;
	for (size_t i = 0; i < num_urls; i++) {
		if (!urls[i]) {
			st = tw__api_fail(TW_ERR_INVAL, "%s: URL %zu is NULL", fn, i);
			goto err;
		}
		tw_transport_reg *reg;
		st = tw__ctx_resolve_url(ctx, fn, urls[i], true, &reg, &call->addresses[i]);
		if (st != TW_OK)
			goto err;
		for (size_t k = 0; k < i; k++) {
			if (l->entries[k].reg == reg) {
				st = tw__api_fail(TW_ERR_INVAL, "%s: two URLs for transport '%s'", fn, reg->name);
				goto err;
			}
		}
		l->entries[i].listener = l;
		l->entries[i].reg = reg;
	}
	l->num_entries = num_urls;
	if (!tw__loop_call_sync(&ctx->loop, tw__listener_do_listen, call)) {
		st = tw__ctx_unposted(ctx, fn);
		goto err;
	}
	if (call->status != TW_OK) {
		st = tw__api_fail(call->status, "%s: %s", fn, call->detail);
		goto err;
	}
	pthread_mutex_lock(&ctx->mu);
	tw__list_push_back(&ctx->all_listeners, &l->all_link);
	pthread_mutex_unlock(&ctx->mu);
	tw__free(call);
	*listener_out = l;
	return TW_OK;
err:
	tw__free(call);
	tw__free(l);
	return st;
}
