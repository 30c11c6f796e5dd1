/*
 * conn_contract_test.h - the rules of transport.h, as tests any transport
 * must pass, written once (nng's NUTS pattern at the tw_conn_ops level):
 * a transport's own test file fills a tw_conn_fixture and calls
 * tw_conn_contract_main. tcp_test.c does so today; shm and ibv will.
 *
 * Cases (one per process, `<test> <case>`):
 *   exchange        frames of several pieces both ways, in order, intact;
 *                   every callback once
 *   length_mismatch a read_into of the wrong length fails the connection
 *                   with TW_ERR_PROTO before touching the buffer; later
 *                   operations fail the same way; the end watch reports it
 *   alloc_limit     a read_alloc whose frame exceeds max_len: TW_ERR_PROTO
 *   close_pending   close() fails a pending read and the end watch with
 *                   TW_ERR_CLOSED, each exactly once
 *   peer_end        the peer closes with nothing unread: the watch reports
 *                   the end (TW_ERR_EOF) without any read queued
 *   hangup          the peer writes a frame and closes: hang-up first (no
 *                   read queued), then the frame is still readable, then
 *                   the end
 *   close_at_once   a connection closed in the call that made it (before
 *                   any set-up could finish), and the listener's end of
 *                   it: each fails or ends once, nothing else is hurt
 *   hello_at_close  the same, with a TW_WRITE_HELLO frame queued first: the
 *                   write's callback says TW_ERR_CLOSED once, yet the
 *                   listener's end reads that frame intact, then the end
 *                   (wire.md 3.3.g; only transports that linger run it)
 *
 * Every case also checks that descriptors 0, 1 and 2 are still open at the
 * end: a transport closes only what it owns (a zeroed struct's "fd 0" is
 * stdin, which an adapter speaking on stdin loses without a word).
 *
 * Only for *_test.c files under transport/.
 */
#ifndef TW_TRANSPORT_CONN_CONTRACT_TEST_H
#define TW_TRANSPORT_CONN_CONTRACT_TEST_H

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "platform/loop.h"
#include "platform/platform.h"
#include "transport/transport.h"

typedef struct tw_conn_fixture {
	const tw_transport_ops *ops;
	const char *options;        /* for create */
	const char *listen_address; /* one that lets the system pick, "127.0.0.1:0" */
} tw_conn_fixture;

/* ---- plumbing: a loop thread, and callbacks recorded for the test thread ---------- */

typedef struct cc_rec {
	int calls;
	tw_status_t status;
	char detail[512];
	void *buf;
	uint64_t len;
} cc_rec;

static struct {
	const tw_conn_fixture *fx;
	tw_loop loop;
	tw_transport *t;
	tw_tlistener *l;
	tw_conn *server, *client;
	tw_conn *extra; /* a second accepted connection (close_at_once) */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	int failures;
} CC = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

#define CC_CHECK(cond)                                                                    \
	do {                                                                                  \
		if (!(cond)) {                                                                    \
			fprintf(stderr, "not ok - %s:%d: CHECK(%s)\n", __FILE__, __LINE__, #cond);    \
			CC.failures++;                                                                \
		}                                                                                 \
	} while (0)

static void cc_hit(cc_rec *r, tw_status_t st, const char *detail, void *buf, uint64_t len)
{
	pthread_mutex_lock(&CC.mu);
	r->calls++;
	r->status = st;
	snprintf(r->detail, sizeof(r->detail), "%s", detail ? detail : "");
	r->buf = buf;
	r->len = len;
	pthread_cond_broadcast(&CC.cv);
	pthread_mutex_unlock(&CC.mu);
}

/* Waits up to 10 s for r's first call; false on timeout. */
static bool cc_wait(cc_rec *r)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&CC.mu);
	while (r->calls == 0)
		if (pthread_cond_timedwait(&CC.cv, &CC.mu, &ts) != 0)
			break;
	bool got = r->calls > 0;
	pthread_mutex_unlock(&CC.mu);
	if (!got)
		fprintf(stderr, "not ok - a callback did not come within 10 s\n");
	return got;
}

static void cc_on_write(tw_conn *c, tw_status_t st, const char *d, void *arg)
{
	(void)c;
	cc_hit(arg, st, d, NULL, 0);
}

static void cc_on_read(tw_conn *c, tw_status_t st, const char *d, void *buf, uint64_t len,
                       void *arg)
{
	(void)c;
	cc_hit(arg, st, d, buf, len);
}

static void cc_on_end(tw_conn *c, tw_status_t st, const char *d, void *arg)
{
	(void)c;
	cc_hit(arg, st, d, NULL, 0);
}

static cc_rec cc_hup;
static void cc_on_hangup(tw_conn *c, const char *d, void *arg)
{
	(void)c;
	(void)arg;
	cc_hit(&cc_hup, TW_OK, d, NULL, 0);
}

static cc_rec cc_acc;
static void cc_on_accept(tw_tlistener *l, tw_status_t st, const char *d, tw_conn *conn, void *arg)
{
	(void)l;
	(void)arg;
	if (st == TW_OK && !CC.server)
		CC.server = conn;
	else if (st == TW_OK && !CC.extra)
		CC.extra = conn;
	else if (st == TW_OK)
		conn->ops->close(conn);
	cc_hit(&cc_acc, st, d, NULL, 0);
}

static void cc_idle(void *arg)
{
	(void)arg;
	if (CC.stop)
		(void)tw__loop_finish(&CC.loop);
}

/* Runs fn on the loop thread and waits for it. */
static void cc_on_loop(void (*fn)(void *), void *arg)
{
	if (!tw__loop_call_sync(&CC.loop, fn, arg)) {
		fprintf(stderr, "not ok - the loop has finished\n");
		exit(1);
	}
}

static void cc_do_setup(void *arg)
{
	(void)arg;
	char d[512];
	tw_conn_opts opts;
	memset(&opts, 0, sizeof(opts));
	if (CC.t->ops->listen(CC.t, CC.fx->listen_address, &opts, cc_on_accept, NULL, &CC.l, d,
	                      sizeof(d)) != TW_OK ||
	    CC.t->ops->connect(CC.t, CC.l->ops->address(CC.l), &opts, &CC.client, d, sizeof(d)) !=
	            TW_OK) {
		fprintf(stderr, "not ok - listen/connect: %s\n", d);
		exit(1);
	}
}

static void cc_setup(const tw_conn_fixture *fx)
{
	CC.fx = fx;
	char d[512];
	if (tw__loop_start(&CC.loop, cc_idle, NULL, d, sizeof(d)) != TW_OK ||
	    fx->ops->create(&CC.loop, fx->options, &CC.t, d, sizeof(d)) != TW_OK) {
		fprintf(stderr, "not ok - setup: %s\n", d);
		exit(1);
	}
	cc_on_loop(cc_do_setup, NULL);
	CC_CHECK(cc_wait(&cc_acc) && cc_acc.status == TW_OK && CC.server);
}

static void cc_do_close(void *arg)
{
	tw_conn **c = arg;
	if (*c) {
		(*c)->ops->close(*c);
		*c = NULL;
	}
}

static void cc_do_shutdown(void *arg)
{
	(void)arg;
	if (CC.l) {
		CC.l->ops->close(CC.l);
		CC.l = NULL;
	}
	if (CC.t->ops->shutdown)
		CC.t->ops->shutdown(CC.t);
	CC.stop = true;
}

/* Closes what is left, stops the loop, frees everything. */
static void cc_teardown(void)
{
	cc_on_loop(cc_do_close, &CC.server);
	cc_on_loop(cc_do_close, &CC.client);
	cc_on_loop(cc_do_close, &CC.extra);
	cc_on_loop(cc_do_shutdown, NULL);
	tw__loop_join(&CC.loop);
	CC.t->ops->destroy(CC.t);
	tw__loop_free(&CC.loop);
}

/* ---- operations, run on the loop thread ----------------------------------------- */

typedef struct cc_op {
	tw_conn **c;
	tw_iov iov[3];
	size_t niov;
	void *buf;
	uint64_t len;
	bool alloc;
	cc_rec *rec;
	tw_status_t st;
} cc_op;

static void cc_do_write(void *arg)
{
	cc_op *o = arg;
	o->st = (*o->c)->ops->write(*o->c, o->iov, o->niov, 0, cc_on_write, o->rec);
}

static void cc_do_read(void *arg)
{
	cc_op *o = arg;
	o->st = o->alloc ? (*o->c)->ops->read_alloc(*o->c, o->len, cc_on_read, o->rec)
	                 : (*o->c)->ops->read_into(*o->c, o->buf, o->len, cc_on_read, o->rec);
}

static void cc_do_watch(void *arg)
{
	cc_op *o = arg;
	o->st = (*o->c)->ops->watch_end(*o->c, cc_on_end, cc_on_hangup, o->rec);
}

static void cc_write(tw_conn **c, const char *text, cc_rec *rec)
{
	size_t n = strlen(text), half = n / 2;
	cc_op o = { .c = c, .iov = { { text, half }, { text + half, n - half } }, .niov = 2,
		    .rec = rec };
	cc_on_loop(cc_do_write, &o);
	CC_CHECK(o.st == TW_OK);
}

static void cc_read(tw_conn **c, void *buf, uint64_t len, bool alloc, cc_rec *rec)
{
	cc_op o = { .c = c, .buf = buf, .len = len, .alloc = alloc, .rec = rec };
	cc_on_loop(cc_do_read, &o);
	CC_CHECK(o.st == TW_OK);
}

static void cc_watch(tw_conn **c, cc_rec *rec)
{
	cc_op o = { .c = c, .rec = rec };
	cc_on_loop(cc_do_watch, &o);
	CC_CHECK(o.st == TW_OK);
}

/* r's number of calls so far (the loop thread writes it under CC.mu). */
static int cc_calls(cc_rec *r)
{
	pthread_mutex_lock(&CC.mu);
	int n = r->calls;
	pthread_mutex_unlock(&CC.mu);
	return n;
}

/* Lets the loop run a while (late or doubled callbacks show up). */
static void cc_settle(void)
{
	struct timespec ts = { 0, 200 * 1000 * 1000 };
	nanosleep(&ts, NULL);
}

/* ---- the cases ----------------------------------------------------------------------- */

static void cc_case_exchange(void)
{
	cc_rec w1 = { 0 }, w2 = { 0 }, r1 = { 0 }, r2 = { 0 };
	char b1[11] = "", b2[5] = "";
	cc_write(&CC.client, "hello world", &w1);
	cc_write(&CC.server, "back!", &w2);
	cc_read(&CC.server, b1, 11, false, &r1);
	cc_read(&CC.client, b2, 5, false, &r2);
	CC_CHECK(cc_wait(&w1) && w1.status == TW_OK && cc_wait(&w2) && w2.status == TW_OK);
	CC_CHECK(cc_wait(&r1) && r1.status == TW_OK && !memcmp(b1, "hello world", 11));
	CC_CHECK(cc_wait(&r2) && r2.status == TW_OK && !memcmp(b2, "back!", 5));
	cc_rec w3 = { 0 }, r3 = { 0 };
	cc_write(&CC.client, "", &w3); /* an empty frame is a frame */
	cc_read(&CC.server, NULL, 100, true, &r3);
	CC_CHECK(cc_wait(&r3) && r3.status == TW_OK && r3.len == 0);
	/* a write may complete after the peer read it (ibv: once its RDMA write
	 * completed) */
	CC_CHECK(cc_wait(&w3) && w3.status == TW_OK);
	cc_settle();
	CC_CHECK(cc_calls(&w1) == 1 && cc_calls(&w2) == 1 && cc_calls(&w3) == 1 &&
	         cc_calls(&r1) == 1 && cc_calls(&r2) == 1 && cc_calls(&r3) == 1);
}

static void cc_case_length_mismatch(void)
{
	cc_rec end = { 0 }, w = { 0 }, r = { 0 }, r2 = { 0 };
	cc_watch(&CC.server, &end);
	cc_write(&CC.client, "abcdef", &w);
	char buf[5];
	memset(buf, 'x', sizeof(buf));
	cc_read(&CC.server, buf, 5, false, &r);
	CC_CHECK(cc_wait(&r) && r.status == TW_ERR_PROTO);
	CC_CHECK(!memcmp(buf, "xxxxx", 5)); /* the body was not touched */
	cc_read(&CC.server, buf, 6, false, &r2); /* the connection has failed as a whole */
	CC_CHECK(cc_wait(&r2) && r2.status == TW_ERR_PROTO);
	CC_CHECK(cc_wait(&end) && end.status == TW_ERR_PROTO);
	cc_settle();
	CC_CHECK(cc_calls(&r) == 1 && cc_calls(&r2) == 1 && cc_calls(&end) == 1);
	if (r.status != TW_ERR_PROTO)
		fprintf(stderr, "# detail: %s\n", r.detail);
}

static void cc_case_alloc_limit(void)
{
	cc_rec w = { 0 }, r = { 0 };
	cc_write(&CC.client, "0123456789", &w);
	cc_read(&CC.server, NULL, 9, true, &r);
	CC_CHECK(cc_wait(&r) && r.status == TW_ERR_PROTO && r.buf == NULL);
	cc_settle();
	CC_CHECK(cc_calls(&r) == 1);
}

static void cc_case_close_pending(void)
{
	cc_rec end = { 0 }, r = { 0 };
	char buf[4];
	cc_watch(&CC.server, &end);
	cc_read(&CC.server, buf, 4, false, &r);
	cc_on_loop(cc_do_close, &CC.server);
	CC_CHECK(cc_wait(&r) && r.status == TW_ERR_CLOSED);
	CC_CHECK(cc_wait(&end) && end.status == TW_ERR_CLOSED);
	cc_settle();
	CC_CHECK(cc_calls(&r) == 1 && cc_calls(&end) == 1 && cc_calls(&cc_hup) == 0);
}

static void cc_case_peer_end(void)
{
	cc_rec end = { 0 };
	cc_watch(&CC.server, &end);
	cc_on_loop(cc_do_close, &CC.client);
	CC_CHECK(cc_wait(&end) && (end.status == TW_ERR_EOF || end.status == TW_ERR_CONNRESET));
	cc_settle();
	CC_CHECK(cc_calls(&end) == 1 && cc_calls(&cc_hup) == 0);
}

static void cc_case_hangup(void)
{
	cc_rec end = { 0 }, w = { 0 }, r = { 0 };
	cc_watch(&CC.server, &end);
	cc_write(&CC.client, "last words", &w);
	CC_CHECK(cc_wait(&w) && w.status == TW_OK);
	cc_on_loop(cc_do_close, &CC.client);
	CC_CHECK(cc_wait(&cc_hup)); /* no read queued: the hang-up is heard anyway */
	CC_CHECK(cc_calls(&end) == 0);
	char buf[10];
	cc_read(&CC.server, buf, 10, false, &r); /* what was sent is still there */
	CC_CHECK(cc_wait(&r) && r.status == TW_OK && !memcmp(buf, "last words", 10));
	CC_CHECK(cc_wait(&end) && end.status == TW_ERR_EOF);
	cc_settle();
	CC_CHECK(cc_calls(&cc_hup) == 1 && cc_calls(&end) == 1 && cc_calls(&r) == 1);
}

/* A new connection to `address` (loop thread); stops the test if the
 * transport refuses to start one. */
static tw_conn *cc_connect_to(const char *address)
{
	char d[512];
	tw_conn_opts opts;
	memset(&opts, 0, sizeof(opts));
	tw_conn *c = NULL;
	if (CC.t->ops->connect(CC.t, address, &opts, &c, d, sizeof(d)) != TW_OK) {
		fprintf(stderr, "not ok - connect: %s\n", d);
		exit(1);
	}
	return c;
}

/* Queues `len` bytes at `buf` as a hello (TW_WRITE_HELLO) on c, in two
 * pieces, recording its callback in rec (loop thread). */
static void cc_write_hello(tw_conn *c, const char *buf, size_t len, cc_rec *rec)
{
	tw_iov iov[2] = { { buf, len / 2 }, { buf + len / 2, len - len / 2 } };
	if (c->ops->write(c, iov, 2, TW_WRITE_OBJECT | TW_WRITE_HELLO, cc_on_write, rec) != TW_OK) {
		fprintf(stderr, "not ok - write: out of memory\n");
		exit(1);
	}
}

static void cc_do_connect_close(void *arg)
{
	(void)arg;
	tw_conn *c = cc_connect_to(CC.l->ops->address(CC.l));
	c->ops->close(c);
}

/* The client's hello for hello_at_close, and its write's record. */
static const char cc_hello[] = "a hello that must get out";
static cc_rec cc_hello_w;

static void cc_do_connect_hello_close(void *arg)
{
	(void)arg;
	tw_conn *c = cc_connect_to(CC.l->ops->address(CC.l));
	/* on the caller's stack: the transport must copy what it keeps */
	char copy[sizeof(cc_hello)];
	memcpy(copy, cc_hello, sizeof(copy));
	cc_write_hello(c, copy, sizeof(copy) - 1, &cc_hello_w);
	c->ops->close(c);
	memset(copy, 'x', sizeof(copy));
}

static void cc_wait_accepts(int n)
{
	for (int i = 0; i < 1000 && cc_calls(&cc_acc) < n; i++)
		usleep(2000);
}

static void cc_case_hello_at_close(void)
{
	cc_on_loop(cc_do_connect_hello_close, NULL);
	cc_wait_accepts(2);
	CC_CHECK(cc_calls(&cc_acc) == 2 && cc_acc.status == TW_OK && CC.extra);
	CC_CHECK(cc_wait(&cc_hello_w) && cc_hello_w.status == TW_ERR_CLOSED);
	if (!CC.extra)
		return;
	cc_rec r = { 0 }, end = { 0 };
	cc_read(&CC.extra, NULL, 100, true, &r);
	CC_CHECK(cc_wait(&r) && r.status == TW_OK && r.len == sizeof(cc_hello) - 1 &&
	         !memcmp(r.buf, cc_hello, sizeof(cc_hello) - 1));
	if (r.status != TW_OK)
		fprintf(stderr, "# the listener's end: %s\n", r.detail);
	tw__free(r.buf);
	cc_watch(&CC.extra, &end);
	CC_CHECK(cc_wait(&end) && end.status == TW_ERR_EOF);
	cc_settle();
	CC_CHECK(cc_calls(&cc_hello_w) == 1 && cc_calls(&r) == 1 && cc_calls(&end) == 1);
}

static void cc_case_close_at_once(void)
{
	cc_on_loop(cc_do_connect_close, NULL);
	/* The listener accepts the second connection (CC.extra); whatever it
	 * heard of the client's close, it is closed at teardown. */
	cc_wait_accepts(2);
	CC_CHECK(cc_calls(&cc_acc) == 2 && cc_acc.status == TW_OK);
	cc_settle();
	/* The first pair still works. */
	cc_case_exchange();
}

/* hello_linger_bound, for a transport given a peer address where a hello
 * can never get out (a listener whose accept queue is full, or one that
 * never answers the set-up): a connection closed with its hello queued
 * gives up within TW_HELLO_LINGER_MS; its write's callback says
 * TW_ERR_CLOSED once and the loop finishes (no handle, descriptor or
 * buffer left; ASan and LSan watch). */
static char cc_bound_address[128];
static cc_rec cc_bound_w;

static void cc_do_bound(void *arg)
{
	(void)arg;
	tw_conn *c = cc_connect_to(cc_bound_address);
	cc_write_hello(c, "hello", 5, &cc_bound_w);
	c->ops->close(c);
}

__attribute__((unused)) static int cc_hello_linger_bound(const tw_conn_fixture *fx,
                                                         const char *address, const char *name)
{
	snprintf(cc_bound_address, sizeof(cc_bound_address), "%s", address);
	cc_setup(fx);
	cc_on_loop(cc_do_bound, NULL);
	CC_CHECK(cc_wait(&cc_bound_w) && cc_bound_w.status == TW_ERR_CLOSED);
	cc_teardown(); /* returns once the lingering connection gave up */
	CC_CHECK(cc_calls(&cc_bound_w) == 1);
	printf("%s - %s hello_linger_bound\n", CC.failures ? "not ok" : "ok", name);
	return CC.failures ? 1 : 0;
}

static int tw_conn_contract_main(const tw_conn_fixture *fx, int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "exchange", cc_case_exchange },         { "length_mismatch", cc_case_length_mismatch },
		{ "alloc_limit", cc_case_alloc_limit },   { "close_pending", cc_case_close_pending },
		{ "peer_end", cc_case_peer_end },         { "hangup", cc_case_hangup },
		{ "close_at_once", cc_case_close_at_once }, { "hello_at_close", cc_case_hello_at_close },
	};
	if (argc != 2) {
		fprintf(stderr, "usage: %s <case>\n", argv[0]);
		return 2;
	}
	alarm(60);
	/* 0, 1 and 2 open, whatever ran us, so that closing one is seen. */
	int fd;
	while ((fd = open("/dev/null", O_RDWR | O_CLOEXEC)) >= 0 && fd <= 2)
		;
	if (fd > 2)
		close(fd);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (strcmp(argv[1], cases[i].name))
			continue;
		cc_setup(fx);
		cases[i].fn();
		cc_teardown();
		for (fd = 0; fd <= 2; fd++)
			if (fcntl(fd, F_GETFD) == -1) {
				fprintf(stderr, "not ok - descriptor %d was closed by the transport\n", fd);
				CC.failures++;
			}
		printf("%s - %s %s\n", CC.failures ? "not ok" : "ok", fx->ops->kind, cases[i].name);
		return CC.failures ? 1 : 0;
	}
	fprintf(stderr, "unknown case '%s'\n", argv[1]);
	return 2;
}

#endif /* TW_TRANSPORT_CONN_CONTRACT_TEST_H */
