/*
 * pair_util.h - for tests that need a connected pipe pair and want to
 * record callbacks: a recorder per expected callback (how many times it
 * fired, with what status and detail) and helpers that build a server and
 * client context over TCP loopback. Header-only; tests only.
 */
#ifndef TW_TESTS_PAIR_UTIL_H
#define TW_TESTS_PAIR_UTIL_H

#include "test_util.h"

/* Records one expected callback; `calls` must end up exactly 1. */
typedef struct tu_rec {
	tu_waiter w;
	int calls;
	tw_status_t status;
	char detail[512];
	tw_pipe *pipe;
	const tw_message *desc;
} tu_rec;

static inline void tu_rec_init(tu_rec *r)
{
	memset(r, 0, sizeof(*r));
	tu_waiter_init(&r->w);
}

static inline void tu_rec_hit(tu_rec *r, tw_status_t st, const char *detail)
{
	pthread_mutex_lock(&r->w.mu);
	r->calls++;
	r->status = st;
	snprintf(r->detail, sizeof(r->detail), "%s", detail ? detail : "(null)");
	pthread_mutex_unlock(&r->w.mu);
	tu_signal(&r->w);
}

static inline void tu_on_status(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	tu_rec_hit(arg, st, detail);
}

static inline void tu_on_desc(tw_pipe *p, tw_status_t st, const char *detail, const tw_message *d,
                              void *arg)
{
	tu_rec *r = arg;
	r->desc = d;
	tu_rec_hit(r, st, detail);
}

static inline void tu_on_accept(tw_listener *l, tw_status_t st, const char *detail, tw_pipe *p,
                                void *arg)
{
	tu_rec *r = arg;
	r->pipe = p;
	tu_rec_hit(r, st, detail);
}

/* Did the callback come, with a failure? */
static inline bool tu_rec_failed(tu_rec *r)
{
	pthread_mutex_lock(&r->w.mu);
	bool f = r->calls > 0 && r->status != TW_OK;
	pthread_mutex_unlock(&r->w.mu);
	return f;
}

/* For runs in which any step may fail (the fault sweeps): waits (up to
 * 2 s) for `want` to succeed, but gives up as soon as `a` or `b` (the
 * client's callbacks) reported a failure: then `want` may never come. */
static inline bool tu_wait_unless_failed(tu_rec *want, tu_rec *a, tu_rec *b)
{
	for (int i = 0; i < 400; i++) {
		if (tu_wait_for(&want->w, 1, 5))
			return want->status == TW_OK;
		if (tu_rec_failed(a) || tu_rec_failed(b))
			return false;
	}
	return false;
}

/* Waits for the callback and checks its status and (if given) detail. */
static inline void tu_expect(tu_rec *r, tw_status_t want, const char *substr)
{
	tu_wait(&r->w, 1);
	pthread_mutex_lock(&r->w.mu);
	tw_status_t st = r->status;
	char detail[512];
	snprintf(detail, sizeof(detail), "%s", r->detail);
	pthread_mutex_unlock(&r->w.mu);
	if (st != want || (substr && !strstr(detail, substr))) {
		fprintf(stderr, "callback gave %s '%s', want %s '%s'\n", tw_status_name(st), detail,
		        tw_status_name(want), substr ? substr : "");
		abort();
	}
}

/* Exactly one call, after everything settled. */
static inline void tu_once(tu_rec *r)
{
	pthread_mutex_lock(&r->w.mu);
	int calls = r->calls;
	pthread_mutex_unlock(&r->w.mu);
	if (calls != 1) {
		fprintf(stderr, "callback fired %d times, want exactly once\n", calls);
		abort();
	}
}

/* Ends a round of a fault sweep: closes the client's context, waits up to
 * 2 s for `hear` (a server callback that may learn of that close; NULL:
 * none), closes the server's; then every callback in `armed` (n of them,
 * NULL entries skipped) has fired exactly once; then destroys the pipes,
 * the listener and the contexts (any of which may be NULL). */
static inline void tu_sweep_end(tw_context *s, tw_context *c, tw_listener *l, tw_pipe *sp,
                                tw_pipe *cp, tu_rec *hear, tu_rec *const *armed, size_t n)
{
	if (c)
		tw_context_close(c);
	if (hear)
		(void)tu_wait_for(&hear->w, 1, 2000);
	if (s)
		tw_context_close(s);
	if (c)
		CHECK_OK(tw_context_join(c));
	if (s)
		CHECK_OK(tw_context_join(s));
	for (size_t i = 0; i < n; i++)
		if (armed[i])
			tu_once(armed[i]);
	if (sp)
		tw_pipe_destroy(sp);
	if (cp)
		tw_pipe_destroy(cp);
	if (l)
		tw_listener_destroy(l);
	tw_context_destroy(c);
	tw_context_destroy(s);
}

/* Writes a metadata-only message carrying `text`; waits for TW_OK. */
static inline void tu_send_text(tw_pipe *p, const char *text)
{
	tw_message m = { .metadata = text, .metadata_length = strlen(text) };
	tu_rec w;
	tu_rec_init(&w);
	CHECK_OK(tw_pipe_write(p, &m, tu_on_status, &w));
	tu_expect(&w, TW_OK, NULL);
	tu_once(&w);
}

/* Moves one tensor from c to s: writes a message carrying `t`, reads its
 * descriptor on s (which must succeed) and reads it into `ta`. Returns with
 * the write (w) and the read (r) issued, not waited for: the caller checks
 * how they end. The recs are initialised here. */
static inline void tu_move_tensor(tw_pipe *c, tw_pipe *s, const tw_tensor *t,
                                  const tw_tensor_allocation *ta, tu_rec *w, tu_rec *d, tu_rec *r)
{
	tw_message m = { .num_tensors = 1, .tensors = t };
	tw_allocation a = { .num_tensors = 1, .tensors = ta };
	tu_rec_init(w), tu_rec_init(d), tu_rec_init(r);
	CHECK_OK(tw_pipe_write(c, &m, tu_on_status, w));
	CHECK_OK(tw_pipe_read_descriptor(s, tu_on_desc, d));
	tu_expect(d, TW_OK, NULL);
	CHECK_OK(tw_pipe_read(s, &a, tu_on_status, r));
}

/* Holds a context's loop thread inside a callback until released, so that
 * what other threads ask of it meanwhile, and what its sockets receive,
 * waits for one pass of its loop together. */
typedef struct tu_loop_hold {
	tu_waiter entered, gate;
} tu_loop_hold;

static inline void tu_on_hold(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	tu_loop_hold *h = arg;
	tu_signal(&h->entered);
	tu_wait(&h->gate, 1);
}

/* Holds the loop of pipe p's context: p writes a short note to its peer
 * whose callback waits on the gate. Returns once the loop is held. */
static inline void tu_hold_loop(tu_loop_hold *h, tw_pipe *p)
{
	static const tw_message note = { .metadata = "hold", .metadata_length = 4 };
	tu_waiter_init(&h->entered), tu_waiter_init(&h->gate);
	CHECK_OK(tw_pipe_write(p, &note, tu_on_hold, h));
	tu_wait(&h->entered, 1);
}

/* Lets the held loop go on. */
static inline void tu_release_loop(tu_loop_hold *h)
{
	tu_signal(&h->gate);
}

/* Reads the next message and checks it is a metadata-only `text`. */
/* Reads the next descriptor into d, which must say TW_OK with `text` as
 * its metadata. */
static inline void tu_expect_desc_text(tw_pipe *p, const char *text, tu_rec *d)
{
	tu_rec_init(d);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, d));
	tu_expect(d, TW_OK, NULL);
	CHECK(d->desc->metadata_length == strlen(text) &&
	      memcmp(d->desc->metadata, text, strlen(text)) == 0);
}

static inline void tu_expect_text(tw_pipe *p, const char *text)
{
	tu_rec d, r;
	tu_rec_init(&r);
	tu_expect_desc_text(p, text, &d);
	tw_allocation a = { 0 };
	CHECK_OK(tw_pipe_read(p, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	tu_once(&d), tu_once(&r);
}

static inline void tu_ctx(tw_context **ctx, const char *name)
{
	CHECK_OK(tw_context_create(name, ctx));
	tu_register_combo(*ctx);
}

/* A well-formed tensorwire client still gets through listener `l` (bound
 * at `url`): accepted and established on both ends, each callback once. */
static inline void tu_good_client_round(tw_listener *l, const char *url)
{
	tw_context *c;
	tu_ctx(&c, "good");
	tu_rec acc, est;
	tu_rec_init(&acc), tu_rec_init(&est);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, url, &p));
	tu_expect(&acc, TW_OK, NULL);
	CHECK_OK(tw_pipe_on_established(acc.pipe, tu_on_status, &est));
	tu_expect(&est, TW_OK, NULL);
	tw_pipe_destroy(acc.pipe);
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
	tu_once(&acc), tu_once(&est);
}

typedef struct tu_pair {
	tw_context *sctx, *cctx;
	tw_listener *l;
	tw_pipe *s, *c;
	char url[128];
} tu_pair;

/* A message of one zeroed CPU tensor of len bytes (cpu:0 to cpu:0) in *t
 * and *m; returns its buffer (the caller frees it). */
static inline uint8_t *tu_big_message(size_t len, tw_tensor *t, tw_message *m)
{
	uint8_t *buf = calloc(1, len);
	CHECK(buf);
	*t = (tw_tensor){ .data = buf, .length = len, .source_device = tw_device_cpu(),
		          .has_target_device = true, .target_device = tw_device_cpu() };
	*m = (tw_message){ .num_tensors = 1, .tensors = t };
	return buf;
}

/* Listens on `lurl` (NULL: the battery's transport, tu_combo_get) and puts
 * the bound URL into url. Returns the listener. */
static inline tw_listener *tu_listen(tw_context *ctx, const char *lurl, char *url, size_t len)
{
	const char *urls[] = { lurl ? lurl : tu_combo_get()->listen_url };
	tw_listener *l;
	CHECK_OK(tw_context_listen(ctx, urls, 1, &l));
	CHECK_OK(tw_listener_url(l, NULL, url, len));
	return l;
}

/* Listens on sctx (created by the caller, or with uv+basic if NULL) and
 * connects from cctx; waits until both ends are established. */
static inline void tu_pair_open(tu_pair *p, const char *listen_url)
{
	if (!p->sctx)
		tu_ctx(&p->sctx, "server");
	if (!p->cctx)
		tu_ctx(&p->cctx, "client");
	p->l = tu_listen(p->sctx, listen_url, p->url, sizeof(p->url));
	tu_rec acc, e1, e2;
	tu_rec_init(&acc);
	tu_rec_init(&e1);
	tu_rec_init(&e2);
	CHECK_OK(tw_listener_accept(p->l, tu_on_accept, &acc));
	CHECK_OK(tw_context_connect(p->cctx, p->url, &p->c));
	tu_expect(&acc, TW_OK, NULL);
	p->s = acc.pipe;
	CHECK_OK(tw_pipe_on_established(p->s, tu_on_status, &e1));
	CHECK_OK(tw_pipe_on_established(p->c, tu_on_status, &e2));
	tu_expect(&e1, TW_OK, NULL);
	tu_expect(&e2, TW_OK, NULL);
}

/* Destroys both pipes (closing them if needed), the listener and both
 * contexts, joining each context first. */
static inline void tu_pair_close(tu_pair *p)
{
	tw_pipe_destroy(p->c);
	tw_pipe_destroy(p->s);
	tw_listener_destroy(p->l);
	CHECK_OK(tw_context_join(p->cctx));
	CHECK_OK(tw_context_join(p->sctx));
	tw_context_destroy(p->cctx);
	tw_context_destroy(p->sctx);
}

/* The writer p->c withdraws message m by closing while the reader p->s
 * reads it (spec 4.4.e): p->c writes m, p->s gets its descriptor (d); once
 * the writer's channel had time to hand over its part, p->s's loop is held
 * while p->s asks for the read into a (r) and p->c closes; when the write
 * (w) failed, refill(arg) reuses the writer's buffer at once, as its user
 * may; then the loop goes on and the read's callback is waited for. */
static inline void tu_withdraw_write(tu_pair *p, const tw_message *m, const tw_allocation *a,
                                     tu_rec *w, tu_rec *d, tu_rec *r, void (*refill)(void *),
                                     void *arg)
{
	tu_rec_init(w), tu_rec_init(d), tu_rec_init(r);
	CHECK_OK(tw_pipe_write(p->c, m, tu_on_status, w));
	CHECK_OK(tw_pipe_read_descriptor(p->s, tu_on_desc, d));
	tu_expect(d, TW_OK, NULL);
	usleep(20 * 1000);
	tu_loop_hold h;
	tu_hold_loop(&h, p->s);
	CHECK_OK(tw_pipe_read(p->s, a, tu_on_status, r));
	tw_pipe_close(p->c);
	tu_wait(&w->w, 1);
	if (w->status != TW_OK)
		refill(arg);
	tu_release_loop(&h);
	tu_wait(&r->w, 1);
	printf("# write: %s (%s); read: %s (%s)\n", tw_status_name(w->status), w->detail,
	       tw_status_name(r->status), r->detail);
	if (w->status == TW_OK)
		tu_expect(r, TW_OK, NULL); /* a write reported TW_OK is read whole */
}

#endif /* TW_TESTS_PAIR_UTIL_H */
