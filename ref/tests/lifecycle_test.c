/*
 * lifecycle_test.c - close, EOF, join and destroy with operations pending,
 * and the API's synchronous errors. What a user checks: every callback
 * fires exactly once, with TW_ERR_CLOSED for a local close and the peer's
 * status (TW_ERR_EOF) otherwise; nothing hangs (watchdog); nothing leaks
 * (LeakSanitizer); calls on closed objects fail cleanly; callbacks of two
 * contexts calling each other's waiting API (listen, verdicts) both return.
 *
 * Usage: lifecycle_test <case>
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pair_util.h"

static void destroy_pair(tu_pair *p)
{
	if (p->c)
		tw_pipe_destroy(p->c);
	if (p->s)
		tw_pipe_destroy(p->s);
	if (p->l)
		tw_listener_destroy(p->l);
	CHECK_OK(tw_context_join(p->cctx));
	CHECK_OK(tw_context_join(p->sctx));
	tw_context_destroy(p->cctx);
	tw_context_destroy(p->sctx);
}

/* A message whose write cannot complete while the peer does not read: a
 * tensor without a target device needs the peer's DescriptorReply, or,
 * where spec 8.5 (noreply, on by default) drops the reply, the peer's read
 * to drain it off the channel. 64 MiB: more than any transport buffers
 * (socket buffers, 2 MiB shm rings), and above 8.4's eager bound (64 KiB),
 * under which it would go on the descriptor connection and complete. */
static uint8_t unbuffered[64 << 20];
static tw_tensor untargeted_tensor = { unbuffered, sizeof(unbuffered), { "cpu", 0 }, false, { "cpu", 0 }, NULL, 0, NULL };
static const tw_message waits_for_reply = { NULL, 0, 0, NULL, 1, &untargeted_tensor };

static void case_close_pending(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	/* A 64 MiB tensor the peer never reads: its write stays pending. */
	size_t big_len = (size_t)64 << 20;
	uint8_t *big = calloc(1, big_len);
	CHECK(big);
	tw_tensor bt = { big, big_len, tw_device_cpu(), true, tw_device_cpu(), NULL, 0, NULL };
	tw_message bm = { NULL, 0, 0, NULL, 1, &bt };
	tu_rec d1, d2, w1, w2, w3, after_w, after_d, est;
	tu_rec_init(&d1), tu_rec_init(&d2), tu_rec_init(&w1), tu_rec_init(&w2);
	tu_rec_init(&w3), tu_rec_init(&after_w), tu_rec_init(&after_d), tu_rec_init(&est);
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &d1));
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &d2));
	CHECK_OK(tw_pipe_write(p.c, &waits_for_reply, tu_on_status, &w1));
	CHECK_OK(tw_pipe_write(p.c, &bm, tu_on_status, &w2));
	CHECK_OK(tw_pipe_write(p.c, &waits_for_reply, tu_on_status, &w3));
	/* Nothing may have completed: the server reads nothing. */
	CHECK(!tu_wait_for(&w1.w, 1, 200));
	tw_pipe_close(p.c);
	tw_pipe_close(p.c); /* idempotent */
	tu_expect(&d1, TW_ERR_CLOSED, "closed locally");
	tu_expect(&d2, TW_ERR_CLOSED, "closed locally");
	tu_expect(&w1, TW_ERR_CLOSED, "closed locally");
	tu_expect(&w2, TW_ERR_CLOSED, "closed locally");
	tu_expect(&w3, TW_ERR_CLOSED, "closed locally");
	CHECK(d1.desc == NULL);
	/* After the close: operations fail through their callback. */
	CHECK_OK(tw_pipe_write(p.c, &waits_for_reply, tu_on_status, &after_w));
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &after_d));
	tu_expect(&after_w, TW_ERR_CLOSED, NULL);
	tu_expect(&after_d, TW_ERR_CLOSED, NULL);
	/* Armed after the end: it reports what ended the pipe; the info keeps
	 * what the handshake chose. */
	CHECK_OK(tw_pipe_on_established(p.c, tu_on_status, &est));
	tu_expect(&est, TW_ERR_CLOSED, "closed locally");
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p.c, &info));
	destroy_pair(&p);
	tu_once(&d1), tu_once(&d2), tu_once(&w1), tu_once(&w2), tu_once(&w3);
	tu_once(&after_w), tu_once(&after_d), tu_once(&est);
	free(big);
}

/* Descriptor callbacks keep their order when the pipe fails under them:
 * the first read's Descriptor read is in flight on the connection, the
 * later ones wait for their turn; a local close (or an operation timeout)
 * fails them all, first to last. */
typedef struct order_rec {
	tu_rec r;
	int *next;
	int pos;
} order_rec;

static void on_desc_order(tw_pipe *p, tw_status_t st, const char *detail, const tw_message *d,
                          void *arg)
{
	order_rec *o = arg;
	o->pos = __atomic_fetch_add(o->next, 1, __ATOMIC_SEQ_CST);
	tu_on_desc(p, st, detail, d, &o->r);
}

static void desc_order(bool by_timeout)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	int next = 0;
	order_rec o[3];
	if (by_timeout)
		CHECK_OK(tw_pipe_set_operation_timeout(p.c, 200));
	for (int i = 0; i < 3; i++) {
		memset(&o[i], 0, sizeof(o[i]));
		tu_rec_init(&o[i].r);
		o[i].next = &next;
		o[i].pos = -1;
		CHECK_OK(tw_pipe_read_descriptor(p.c, on_desc_order, &o[i]));
	}
	if (!by_timeout)
		tw_pipe_close(p.c);
	for (int i = 0; i < 3; i++) {
		tu_expect(&o[i].r, by_timeout ? TW_ERR_TIMEDOUT : TW_ERR_CLOSED, NULL);
		printf("   descriptor read %d called back %d-th\n", i, o[i].pos);
	}
	for (int i = 0; i < 3; i++)
		CHECK(o[i].pos == i);
	destroy_pair(&p);
	for (int i = 0; i < 3; i++)
		tu_once(&o[i].r);
}

static void case_desc_order_close(void)
{
	desc_order(false);
}

static void case_desc_order_timeout(void)
{
	desc_order(true);
}

static void case_peer_close_eof(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	tu_rec d, w;
	tu_rec_init(&d), tu_rec_init(&w);
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
	CHECK_OK(tw_pipe_write(p.s, &waits_for_reply, tu_on_status, &w));
	CHECK(!tu_wait_for(&d.w, 1, 200));
	tw_pipe_destroy(p.c); /* the client goes away */
	p.c = NULL;
	/* The client never read the server's Descriptor, so its close may be
	 * a reset rather than a FIN; either way the peer is gone. */
	tu_wait(&d.w, 1);
	CHECK(d.status == TW_ERR_EOF || d.status == TW_ERR_CONNRESET);
	tu_expect(&w, d.status, NULL);
	printf("   server saw %s: %s\n", tw_status_name(d.status), d.detail);
	destroy_pair(&p);
	tu_once(&d), tu_once(&w);
}

static void case_peer_close_clean_eof(void)
{
	/* A graceful close of an ours<->ours pipe says goodbye (spec 8.2): the
	 * peer's pending read ends with TW_ERR_EOF saying so. */
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	tu_rec d;
	tu_rec_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
	CHECK(!tu_wait_for(&d.w, 1, 100));
	tw_pipe_destroy(p.c);
	p.c = NULL;
	tu_expect(&d, TW_ERR_EOF, "the peer closed the pipe");
	destroy_pair(&p);
	tu_once(&d);
}

static void case_context_close_pending(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	tu_rec acc, sd, sw, cd, cw;
	tu_rec_init(&acc), tu_rec_init(&sd), tu_rec_init(&sw), tu_rec_init(&cd), tu_rec_init(&cw);
	CHECK_OK(tw_listener_accept(p.l, tu_on_accept, &acc));
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &sd));
	CHECK_OK(tw_pipe_write(p.s, &waits_for_reply, tu_on_status, &sw));
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &cd));
	CHECK_OK(tw_pipe_write(p.c, &waits_for_reply, tu_on_status, &cw));
	/* Both descriptors arrive (each side asked for one). Wait for the
	 * client's too: once the server closes, a pipe error may overtake
	 * bytes still unread in the socket. */
	tu_expect(&sd, TW_OK, NULL);
	tu_expect(&cd, TW_OK, NULL);
	tw_context_close(p.sctx);
	tu_expect(&acc, TW_ERR_CLOSED, NULL);
	tu_expect(&sw, TW_ERR_CLOSED, NULL);
	CHECK(acc.pipe == NULL);
	CHECK_OK(tw_context_join(p.sctx));
	/* Every server callback has run; calls now fail synchronously. */
	tw_pipe *x;
	CHECK_STATUS(tw_context_connect(p.sctx, p.url, &x), TW_ERR_CLOSED);
	CHECK_STATUS(tw_pipe_write(p.s, &waits_for_reply, tu_on_status, &sw), TW_ERR_CLOSED);
	CHECK(strstr(tw_last_error(), "closed") != NULL);
	/* The client's write, waiting for a DescriptorReply, sees the server go. */
	tu_wait(&cw.w, 1);
	fprintf(stderr, "   client write saw %s: %s\n", tw_status_name(cw.status), cw.detail);
	CHECK(cw.status == TW_ERR_EOF || cw.status == TW_ERR_CONNRESET);
	/* Destroy without destroying the handles first: the context frees them. */
	tw_context_destroy(p.sctx);
	tw_context_destroy(p.cctx);
	tu_once(&acc), tu_once(&sd), tu_once(&sw), tu_once(&cd), tu_once(&cw);
}

static void case_destroy_pending(void)
{
	/* tw_context_destroy alone (no close, no join) with everything pending:
	 * it closes, waits for every callback, and frees. */
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	tu_rec acc, cd, cw, sd;
	tu_rec_init(&acc), tu_rec_init(&cd), tu_rec_init(&cw), tu_rec_init(&sd);
	CHECK_OK(tw_listener_accept(p.l, tu_on_accept, &acc));
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &cd));
	CHECK_OK(tw_pipe_write(p.c, &waits_for_reply, tu_on_status, &cw));
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &sd));
	tu_wait(&sd.w, 1);
	tw_pipe *half;
	CHECK_OK(tw_context_connect(p.cctx, p.url, &half)); /* a handshake in flight */
	tw_context_destroy(p.cctx);
	tu_once(&cd), tu_once(&cw);
	CHECK(cd.status == TW_ERR_CLOSED && cw.status == TW_ERR_CLOSED);
	tw_context_destroy(p.sctx);
	tu_once(&acc), tu_once(&sd);
	CHECK(acc.status == TW_ERR_CLOSED || acc.status == TW_OK);
}

static tw_context *join_target;
static void on_est_join(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	tu_rec *r = arg;
	/* Joining from the loop thread would deadlock: it must refuse. */
	tw_status_t js = tw_context_join(join_target);
	tu_rec_hit(r, js, tw_last_error());
}

static void case_join_from_callback(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	tu_rec r;
	tu_rec_init(&r);
	join_target = p.cctx;
	CHECK_OK(tw_pipe_on_established(p.c, on_est_join, &r));
	tu_expect(&r, TW_ERR_INVAL, "loop thread");
	destroy_pair(&p);
}

/* Two contexts' callbacks, each calling the API that waits for the other
 * context's loop thread, at the same time. */
struct crossed_side {
	tw_context *other_ctx;
	tw_pipe *other_pipe;
	pthread_barrier_t *both_in;
	tw_status_t verdicts, listen;
	char detail[256];
	tw_listener *l;
	tu_rec done;
};

static void on_est_cross(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	(void)p, (void)detail;
	struct crossed_side *x = arg;
	CHECK_OK(st);
	pthread_barrier_wait(x->both_in);
	char buf[4096];
	x->verdicts = tw_pipe_get_verdicts(x->other_pipe, buf, sizeof(buf));
	if (x->verdicts != TW_OK)
		snprintf(x->detail, sizeof(x->detail), "%s", tw_last_error());
	const char *urls[] = { "uv://127.0.0.1:0" };
	x->listen = tw_context_listen(x->other_ctx, urls, 1, &x->l);
	if (x->listen != TW_OK)
		snprintf(x->detail, sizeof(x->detail), "%s", tw_last_error());
	tu_rec_hit(&x->done, TW_OK, NULL);
}

/* Both sides' callbacks returned within 20 s, or `what` deadlocked. */
static void crossed_wait(const char *what, tu_rec *a, tu_rec *b)
{
	if (!tu_wait_for(&a->w, 1, 20000) || !tu_wait_for(&b->w, 1, 20000)) {
		fprintf(stderr, "%s did not return in 20 s (deadlock)\n", what);
		exit(1);
	}
}

/* A crossed side's calls succeeded, and its callback ran once. */
static void crossed_check(const char *name, struct crossed_side *x)
{
	if (x->verdicts != TW_OK || x->listen != TW_OK) {
		fprintf(stderr, "%s: verdicts %s, listen %s: %s\n", name,
		        tw_status_name(x->verdicts), tw_status_name(x->listen), x->detail);
		exit(1);
	}
	tu_once(&x->done);
}

static void case_crossed_calls(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	pthread_barrier_t both_in;
	CHECK(pthread_barrier_init(&both_in, NULL, 2) == 0);
	struct crossed_side cs = { .other_ctx = p.sctx, .other_pipe = p.s, .both_in = &both_in };
	struct crossed_side ss = { .other_ctx = p.cctx, .other_pipe = p.c, .both_in = &both_in };
	tu_rec_init(&cs.done);
	tu_rec_init(&ss.done);
	CHECK_OK(tw_pipe_on_established(p.c, on_est_cross, &cs));
	CHECK_OK(tw_pipe_on_established(p.s, on_est_cross, &ss));
	crossed_wait("crossed_calls: callbacks of two contexts calling tw_pipe_get_verdicts and "
	             "tw_context_listen on each other",
	             &cs.done, &ss.done);
	struct crossed_side *sides[] = { &cs, &ss };
	for (int i = 0; i < 2; i++) {
		crossed_check("crossed_calls", sides[i]);
		tw_listener_destroy(sides[i]->l);
	}
	pthread_barrier_destroy(&both_in);
	destroy_pair(&p);
}

/* One context's callback joins the other context while the other's
 * callback calls the first one's waiting API (verdicts, listen): the join
 * waits for a loop thread that waits for the joiner's loop. */
struct joiner_side {
	tw_context *target;
	pthread_barrier_t *both_in;
	tw_status_t join;
	tu_rec done;
};

static void on_est_joiner(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	(void)p, (void)detail;
	struct joiner_side *j = arg;
	CHECK_OK(st);
	pthread_barrier_wait(j->both_in);
	j->join = tw_context_join(j->target);
	tu_rec_hit(&j->done, TW_OK, NULL);
}

static void case_crossed_join(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	pthread_barrier_t both_in;
	CHECK(pthread_barrier_init(&both_in, NULL, 2) == 0);
	struct joiner_side js = { .target = p.sctx, .both_in = &both_in };
	struct crossed_side ss = { .other_ctx = p.cctx, .other_pipe = p.c, .both_in = &both_in };
	tu_rec_init(&js.done);
	tu_rec_init(&ss.done);
	CHECK_OK(tw_pipe_on_established(p.c, on_est_joiner, &js));
	CHECK_OK(tw_pipe_on_established(p.s, on_est_cross, &ss));
	crossed_wait("crossed_join: a callback joining the other context while that context's "
	             "callback called tw_pipe_get_verdicts and tw_context_listen on the first",
	             &js.done, &ss.done);
	if (js.join != TW_OK) {
		fprintf(stderr, "crossed_join: join %s\n", tw_status_name(js.join));
		exit(1);
	}
	tu_once(&js.done);
	crossed_check("crossed_join", &ss);
	tw_listener_destroy(ss.l);
	pthread_barrier_destroy(&both_in);
	p.s = NULL; /* the joined context frees its pipe and listener itself */
	p.l = NULL;
	destroy_pair(&p);
}

static void case_sync_errors(void)
{
	tw_context *ctx;
	tu_ctx(&ctx, "errs");
	tw_listener *l;
	tw_pipe *pipe;
	const char *bad_scheme[] = { "ibv://127.0.0.1:0" };
	CHECK_STATUS(tw_context_listen(ctx, bad_scheme, 1, &l), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "no registered transport"));
	const char *no_scheme[] = { "127.0.0.1:0" };
	CHECK_STATUS(tw_context_listen(ctx, no_scheme, 1, &l), TW_ERR_INVAL);
	const char *bad_addr[] = { "uv://not-an-address:1" };
	CHECK_STATUS(tw_context_listen(ctx, bad_addr, 1, &l), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "is a host name"));
	const char *bad_v6[] = { "uv://[::1:0" };
	CHECK_STATUS(tw_context_listen(ctx, bad_v6, 1, &l), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "tcp transport: bad address"));
	/* A connect is checked at once too, not later in a callback (issue 10
	 * item 6): a host name, a missing port, a broken address. */
	CHECK_STATUS(tw_context_connect(ctx, "uv://myhost:80", &pipe), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "tw_context_connect") &&
	      strstr(tw_last_error(), "'myhost:80' is a host name"));
	CHECK_STATUS(tw_context_connect(ctx, "uv://10.0.0.1", &pipe), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "has no port"));
	CHECK_STATUS(tw_context_connect(ctx, "tcp://10.0.0.1:", &pipe), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "bad address '10.0.0.1:'"));
	CHECK_STATUS(tw_context_connect(ctx, "uv://[fe80::1:80", &pipe), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "bad address"));
	const char *ok[] = { "tcp://127.0.0.1:0" }; /* "tcp" is an alias of uv */
	CHECK_OK(tw_context_listen(ctx, ok, 1, &l));
	char url[128];
	CHECK_OK(tw_listener_url(l, "uv", url, sizeof(url)));
	char url2[128];
	CHECK_OK(tw_listener_url(l, "tcp", url2, sizeof(url2))); /* the alias too */
	CHECK(strcmp(url, url2) == 0);
	CHECK_STATUS(tw_listener_url(l, "shm", url, sizeof(url)), TW_ERR_INVAL);
	CHECK_STATUS(tw_listener_url(l, NULL, url, 8), TW_ERR_INVAL);
	/* The port is taken now. */
	const char *same[] = { url };
	tw_listener *l2;
	CHECK_STATUS(tw_context_listen(ctx, same, 1, &l2), TW_ERR_SYS);
	CHECK(strstr(tw_last_error(), "bind"));
	/* Registration is closed after the first listen. */
	CHECK_STATUS(tw_context_register_transport(ctx, "uv", "late", 0, NULL), TW_ERR_INVAL);
	CHECK_STATUS(tw_context_register_transport(ctx, "nosuch", NULL, 0, NULL), TW_ERR_UNSUPPORTED);
	CHECK_STATUS(tw_context_register_channel(ctx, "nosuch", NULL, 0, NULL), TW_ERR_UNSUPPORTED);
	/* Bad messages are refused before anything is queued. */
	CHECK_OK(tw_context_connect(ctx, url, &pipe));
	tw_payload bad_p = { NULL, 10, NULL, 0 };
	tw_message m = { NULL, 0, 1, &bad_p, 0, NULL };
	tu_rec never;
	tu_rec_init(&never);
	CHECK_STATUS(tw_pipe_write(pipe, &m, tu_on_status, &never), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "tw_pipe_write: payload 0 is NULL"));
	tw_allocation a = { 0, NULL, 0, NULL };
	CHECK_STATUS(tw_pipe_read(pipe, &a, tu_on_status, &never), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "no descriptor"));
	tw_pipe_info info;
	tw_status_t ist = tw_pipe_get_info(pipe, &info); /* handshaking or done */
	CHECK(ist == TW_ERR_INVAL || ist == TW_OK);
	tw_pipe_destroy(pipe);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(ctx));
	CHECK_OK(tw_context_join(ctx)); /* idempotent */
	tw_context_destroy(ctx);
	CHECK(never.calls == 0);

	CHECK_OK(tw_context_create(NULL, &ctx));
	CHECK_STATUS(tw_context_register_transport(ctx, "uv", NULL, 0, "bogus=1"), TW_ERR_INVAL);
	CHECK_STATUS(tw_context_register_transport(ctx, "uv", NULL, 0, "max_object_bytes=x"),
	             TW_ERR_INVAL);
	CHECK_OK(tw_context_register_transport(ctx, "uv", NULL, 0, "max_object_bytes=4096"));
	CHECK_STATUS(tw_context_register_transport(ctx, "uv", NULL, 0, NULL), TW_ERR_INVAL); /* dup */
	tw_context_destroy(ctx);
}

static void case_connect_refused(void)
{
	/* Find a port nobody listens on: bind one, close it. */
	tw_context *ctx;
	tu_ctx(&ctx, "refused");
	tw_listener *l;
	const char *u[] = { "uv://127.0.0.1:0" };
	CHECK_OK(tw_context_listen(ctx, u, 1, &l));
	char url[128];
	CHECK_OK(tw_listener_url(l, NULL, url, sizeof(url)));
	tw_listener_destroy(l);
	/* Give the loop a moment to close the socket. */
	usleep(100 * 1000);
	tw_pipe *p;
	CHECK_OK(tw_context_connect(ctx, url, &p));
	tu_rec est, w, d;
	tu_rec_init(&est), tu_rec_init(&w), tu_rec_init(&d);
	CHECK_OK(tw_pipe_write(p, &waits_for_reply, tu_on_status, &w));
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
	CHECK_OK(tw_pipe_on_established(p, tu_on_status, &est));
	tu_expect(&est, TW_ERR_SYS, "Connection refused");
	tu_expect(&w, TW_ERR_SYS, "Connection refused");
	tu_expect(&d, TW_ERR_SYS, "Connection refused");
	tw_pipe_info info;
	CHECK_STATUS(tw_pipe_get_info(p, &info), TW_ERR_SYS);
	tw_pipe_destroy(p);
	tw_context_destroy(ctx);
	tu_once(&est), tu_once(&w), tu_once(&d);
}

static void case_listener_close(void)
{
	tw_context *ctx;
	tu_ctx(&ctx, "lc");
	tw_listener *l;
	const char *u[] = { tu_combo_get()->listen_url };
	CHECK_OK(tw_context_listen(ctx, u, 1, &l));
	tu_rec a1, a2, a3;
	tu_rec_init(&a1), tu_rec_init(&a2), tu_rec_init(&a3);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &a1));
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &a2));
	tw_listener_close(l);
	tu_expect(&a1, TW_ERR_CLOSED, NULL);
	tu_expect(&a2, TW_ERR_CLOSED, NULL);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &a3));
	tu_expect(&a3, TW_ERR_CLOSED, NULL);
	tw_listener_destroy(l);
	tw_context_destroy(ctx);
	tu_once(&a1), tu_once(&a2), tu_once(&a3);
}

/* Many threads write and read on one pipe at once (label tsan). */
#define MT_THREADS 4
#define MT_PER_THREAD 200

typedef struct mt_arg {
	tw_pipe *pipe;
	tu_waiter *done;
	int index;
} mt_arg;

static void mt_on_write(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	CHECK(st == TW_OK);
	tu_signal(arg);
}

static void *mt_writer(void *arg)
{
	mt_arg *a = arg;
	for (int i = 0; i < MT_PER_THREAD; i++) {
		uint32_t v = (uint32_t)(a->index * MT_PER_THREAD + i);
		tw_payload pay = { &v, sizeof(v), NULL, 0 };
		tw_tensor t = { &v, sizeof(v), tw_device_cpu(), i % 2 == 0, tw_device_cpu(), NULL, 0, NULL };
		tw_message m = { NULL, 0, 1, &pay, 1, &t };
		CHECK_OK(tw_pipe_write(a->pipe, &m, mt_on_write, a->done));
		/* The buffers must outlive the write: wait for this one. */
		tu_wait(a->done, i + 1);
	}
	return NULL;
}

typedef struct mt_reader {
	tw_pipe *pipe;
	uint32_t pay, ten;
	int got;
	uint8_t seen[MT_THREADS * MT_PER_THREAD];
	tu_waiter done;
} mt_reader;

static void mt_on_desc(tw_pipe *p, tw_status_t st, const char *detail, const tw_message *d,
                       void *arg);

static void mt_on_read(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	mt_reader *r = arg;
	CHECK(st == TW_OK);
	CHECK(r->pay == r->ten && r->pay < MT_THREADS * MT_PER_THREAD);
	r->seen[r->pay]++;
	if (++r->got < MT_THREADS * MT_PER_THREAD)
		CHECK_OK(tw_pipe_read_descriptor(p, mt_on_desc, r));
	tu_signal(&r->done);
}

static void mt_on_desc(tw_pipe *p, tw_status_t st, const char *detail, const tw_message *d,
                       void *arg)
{
	mt_reader *r = arg;
	CHECK(st == TW_OK && d->num_payloads == 1 && d->num_tensors == 1);
	void *pays[1] = { &r->pay };
	tw_tensor_allocation ta = { &r->ten, tw_device_cpu(), NULL };
	tw_allocation a = { 1, pays, 1, &ta };
	CHECK_OK(tw_pipe_read(p, &a, mt_on_read, r));
}

static void case_threads(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	mt_reader *r = calloc(1, sizeof(*r));
	CHECK(r);
	tu_waiter_init(&r->done);
	CHECK_OK(tw_pipe_read_descriptor(p.s, mt_on_desc, r));
	pthread_t th[MT_THREADS];
	mt_arg args[MT_THREADS];
	tu_waiter dones[MT_THREADS];
	for (int i = 0; i < MT_THREADS; i++) {
		tu_waiter_init(&dones[i]);
		args[i] = (mt_arg){ p.c, &dones[i], i };
		CHECK(pthread_create(&th[i], NULL, mt_writer, &args[i]) == 0);
	}
	for (int i = 0; i < MT_THREADS; i++)
		pthread_join(th[i], NULL);
	tu_wait(&r->done, MT_THREADS * MT_PER_THREAD);
	for (int i = 0; i < MT_THREADS * MT_PER_THREAD; i++)
		CHECK(r->seen[i] == 1);
	for (int i = 0; i < MT_THREADS; i++) {
		tu_wait(&dones[i], MT_PER_THREAD);
		tu_waiter_destroy(&dones[i]);
	}
	/* Closing from several threads at once is safe too. */
	tw_pipe_close(p.c);
	destroy_pair(&p);
	tu_waiter_destroy(&r->done);
	free(r);
}

/* A forked child that uses its parent's context (a DataLoader worker that
 * inherited an RPC agent): every call fails at once with TW_ERR_INVAL
 * naming the fork, instead of waiting forever on a loop thread that is not
 * in the child; join fails the same way and destroy returns. The parent's
 * pipe goes on working. */
static void case_fork_child(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, "uv://127.0.0.1:0");
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		alarm(20); /* a hang here is the failure this case looks for */
		tw_message m = { 0 };
		tw_status_t st = tw_pipe_write(p.c, &m, tu_on_status, NULL);
		printf("   child: tw_pipe_write: %s: %s\n", tw_status_name(st), tw_last_error());
		fflush(stdout);
		if (st != TW_ERR_INVAL || !strstr(tw_last_error(), "forked child"))
			_exit(1);
		const char *urls[1] = { "uv://127.0.0.1:0" };
		tw_listener *l = NULL;
		st = tw_context_listen(p.sctx, urls, 1, &l);
		printf("   child: tw_context_listen: %s: %s\n", tw_status_name(st), tw_last_error());
		if (st != TW_ERR_INVAL || !strstr(tw_last_error(), "forked child"))
			_exit(2);
		tw_pipe *np = NULL;
		st = tw_context_connect(p.cctx, p.url, &np);
		if (st != TW_ERR_INVAL)
			_exit(3);
		if (tw_context_join(p.cctx) != TW_ERR_INVAL)
			_exit(4);
		tw_context_destroy(p.cctx); /* returns: nothing to free safely here */
		fflush(stdout);
		_exit(0);
	}
	int status = 0;
	CHECK(waitpid(pid, &status, 0) == pid);
	printf("   child exit status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	tu_send_text(p.c, "after the fork");
	tu_expect_text(p.s, "after the fork");
	tu_pair_close(&p);
}

/* Every bound at its largest value means "very long", not a deadline that
 * wrapped into the past: the handshake, connect, liveness and operation
 * bounds at UINT64_MAX still let a pipe form and carry messages, and an
 * operation with a real bound, started after one with the largest, still
 * times out within it. Before, the listener closed every connection at
 * once ("no complete hello within 18446744073709551615 ms") and an
 * operation's deadline wrapped to the earliest. */
static void case_huge_bounds(void)
{
	tu_pair p = { 0 };
	tu_ctx(&p.sctx, "server");
	tu_ctx(&p.cctx, "client");
	tw_context *both[] = { p.sctx, p.cctx };
	for (int i = 0; i < 2; i++) {
		CHECK_OK(tw_context_set_handshake_timeout(both[i], UINT64_MAX));
		CHECK_OK(tw_context_set_connect_timeout(both[i], UINT64_MAX));
		CHECK_OK(tw_context_set_liveness_timeout(both[i], UINT64_MAX));
		CHECK_OK(tw_context_set_operation_timeout(both[i], UINT64_MAX));
	}
	tu_pair_open(&p, NULL);
	tu_send_text(p.c, "to the server");
	tu_expect_text(p.s, "to the server");
	tu_send_text(p.s, "to the client");
	tu_expect_text(p.c, "to the client");
	/* A read nobody answers with the largest bound, then one with 300 ms:
	 * the second times out, the first keeps waiting. */
	tu_rec d1, d2;
	tu_rec_init(&d1), tu_rec_init(&d2);
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &d1));
	CHECK_OK(tw_pipe_set_operation_timeout(p.c, 300));
	uint64_t t0 = tu_now_ms();
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &d2));
	tu_wait(&d2.w, 1);
	uint64_t took = tu_now_ms() - t0;
	printf("   the 300 ms read: %s after %llu ms: %s\n", tw_status_name(d2.status),
	       (unsigned long long)took, d2.detail);
	CHECK(d2.status == TW_ERR_TIMEDOUT);
	CHECK(took >= 250);
	/* The pipe failed with the timeout (tensorwire.h): the first read ends
	 * with it too, not before. */
	tu_expect(&d1, TW_ERR_TIMEDOUT, NULL);
	tu_once(&d1), tu_once(&d2);
	tu_pair_close(&p);
}

/* A bound is the one in force when the call was made, however late the
 * loop thread gets to the operation (tensorwire.h): the client's loop is
 * held while an operation is asked for and the bound changed after it.
 * Before, the loop read the bound when it got there: a read asked with
 * 300 ms lost it, a read and a connect asked with none got one. */
static void case_bounds_at_call(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	/* asked with 300 ms, then 0: times out */
	tu_loop_hold h;
	tu_rec d1, d2, e;
	tu_rec_init(&d1), tu_rec_init(&d2), tu_rec_init(&e);
	CHECK_OK(tw_pipe_set_operation_timeout(p.c, 300));
	tu_hold_loop(&h, p.c);
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &d1));
	CHECK_OK(tw_pipe_set_operation_timeout(p.c, 0));
	tu_release_loop(&h);
	if (!tu_wait_for(&d1.w, 1, 5000)) {
		fprintf(stderr, "a read_descriptor asked with a 300 ms bound is pending after 5 s\n");
		abort();
	}
	tu_expect(&d1, TW_ERR_TIMEDOUT, "300 ms");
	tu_pair_close(&p);
	/* asked with none, then 300 ms: waits (1 s here) */
	memset(&p, 0, sizeof(p));
	tu_pair_open(&p, NULL);
	tu_hold_loop(&h, p.c);
	CHECK_OK(tw_pipe_read_descriptor(p.c, tu_on_desc, &d2));
	CHECK_OK(tw_pipe_set_operation_timeout(p.c, 300));
	/* and a connect asked with no bound to a server that never answers */
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sl) == 0 && listen(lfd, 4) == 0 &&
	      getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
	char url[64];
	snprintf(url, sizeof(url), "uv://127.0.0.1:%d", ntohs(sa.sin_port));
	CHECK_OK(tw_context_set_connect_timeout(p.cctx, 0));
	tw_pipe *silent;
	CHECK_OK(tw_context_connect(p.cctx, url, &silent));
	CHECK_OK(tw_context_set_connect_timeout(p.cctx, 300));
	CHECK_OK(tw_pipe_on_established(silent, tu_on_status, &e));
	tu_release_loop(&h);
	if (tu_wait_for(&d2.w, 1, 1000) || tu_wait_for(&e.w, 1, 10)) {
		fprintf(stderr, "asked with no bound, yet called back within 1 s: read %s (%s), connect "
		        "%s (%s)\n", tw_status_name(d2.status), d2.detail, tw_status_name(e.status),
		        e.detail);
		abort();
	}
	tw_pipe_destroy(silent);
	tu_expect(&e, TW_ERR_CLOSED, NULL);
	tu_pair_close(&p);
	tu_expect(&d2, TW_ERR_CLOSED, NULL);
	tu_once(&d1), tu_once(&d2), tu_once(&e);
	close(lfd);
}

/* tw_pipe_get_verdicts fills a buffer of exactly the text's length plus
 * its NUL (before: TW_ERR_INVAL, "not enough"), and one byte less is cut,
 * NUL-terminated, with TW_ERR_INVAL. */
static void case_verdicts_exact(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	char full[4096], buf[4096];
	CHECK_OK(tw_pipe_get_verdicts(p.c, full, sizeof(full)));
	size_t n = strlen(full);
	CHECK(n > 0);
	memset(buf, 'x', sizeof(buf));
	tw_status_t st = tw_pipe_get_verdicts(p.c, buf, n + 1);
	if (st != TW_OK) {
		fprintf(stderr, "%zu bytes for a text of %zu: %s\n", n + 1, n, tw_last_error());
		abort();
	}
	CHECK(strcmp(buf, full) == 0);
	memset(buf, 'x', sizeof(buf));
	CHECK(tw_pipe_get_verdicts(p.c, buf, n) == TW_ERR_INVAL);
	CHECK(strlen(buf) == n - 1 && strncmp(buf, full, n - 1) == 0);
	tu_pair_close(&p);
}

/* A channel that loses every device pair to one of higher priority says
 * so, on both ends: not that the peer's descriptor differs (it does not),
 * nor that the peer does not offer it (it does). */
static void case_verdicts_priority(void)
{
	tu_pair p = { 0 };
	tw_context **ctxs[2] = { &p.sctx, &p.cctx };
	for (int i = 0; i < 2; i++) {
		CHECK_OK(tw_context_create(i ? "client" : "server", ctxs[i]));
		CHECK_OK(tw_context_register_transport(*ctxs[i], "uv", NULL, 0, NULL));
		CHECK_OK(tw_context_register_channel(*ctxs[i], "mpt", NULL, 200, NULL));
		CHECK_OK(tw_context_register_channel(*ctxs[i], "basic", NULL, 100, NULL));
	}
	tu_pair_open(&p, "uv://127.0.0.1:0");
	char s[4096], c[4096];
	CHECK_OK(tw_pipe_get_verdicts(p.s, s, sizeof(s)));
	CHECK_OK(tw_pipe_get_verdicts(p.c, c, sizeof(c)));
	printf("server:\n%sclient:\n%s", s, c);
	CHECK(strstr(s, "channel mpt: selected"));
	CHECK(strstr(s, "channel basic: not selected: its device pairs went to channel mpt, of "
	                "higher priority\n"));
	CHECK(strstr(c, "channel basic: not selected: the server did not select basic (the server "
	                "does not offer it, or its device pairs went to a channel of higher priority "
	                "there)\n"));
	tu_pair_close(&p);
}

static const tu_case cases[] = {
	{ "bounds_at_call", case_bounds_at_call },
	{ "verdicts_priority", case_verdicts_priority },
	{ "verdicts_exact", case_verdicts_exact },
	{ "huge_bounds", case_huge_bounds },
	{ "fork_child", case_fork_child },
	{ "close_pending", case_close_pending },
	{ "desc_order_close", case_desc_order_close },
	{ "desc_order_timeout", case_desc_order_timeout },
	{ "peer_close_eof", case_peer_close_eof },
	{ "peer_close_clean_eof", case_peer_close_clean_eof },
	{ "context_close_pending", case_context_close_pending },
	{ "destroy_pending", case_destroy_pending },
	{ "join_from_callback", case_join_from_callback },
	{ "sync_errors", case_sync_errors },
	{ "crossed_calls", case_crossed_calls },
	{ "crossed_join", case_crossed_join },
	{ "connect_refused", case_connect_refused },
	{ "listener_close", case_listener_close },
	{ "threads", case_threads },
};

int main(int argc, char **argv)
{
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
