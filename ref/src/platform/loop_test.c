/*
 * loop_test.c - the loop thread's queues (loop.h) against what the rest of
 * the library relies on:
 *
 *   order   work posted from the loop thread and from another thread runs in
 *           the order it was posted (one FIFO queue, whoever posts), and
 *           work the loop thread posts never runs inside the caller
 *   spin    with busy polling asked for, the loop thread stays awake
 *           (polls) for the bound after work, then sleeps again; without
 *           it, it sleeps at once
 *   rounds  a chain of deferred work (each link deferring the next) runs
 *           TW_LOOP_ROUNDS links before the loop polls its descriptors
 *           again, not one: a readable descriptor's callback comes after
 *           link TW_LOOP_ROUNDS, and then again before the chain's end
 *           (the bound lets I/O in); yielded work runs only after a poll
 *   poller  a busy poller (tw_loop_poller) kicked once is started once, looked
 *           at on every pass while it finds something, stopped once when
 *           its bound has passed with nothing (not before), looked at once
 *           more after that (what came before its wake-up was re-armed),
 *           and the loop sleeps after that; kicked again from its own
 *           `stopped`, it
 *           starts again; one cancelled is never stopped; one with no
 *           bound never starts
 *   answer_due  while a peer's answer is due (tw__loop_answer_due), a
 *           poller with a 1 ms bound keeps polling past it, stopping
 *           TW_LOOP_ANSWER_DUE_US after its last find at the latest; an
 *           answer due for longer than that holds it no more; once the
 *           answer came it stops at its own bound again; a poller with no
 *           bound never starts, answer due or not
 *   crossed  two loop threads, each inside work of its own loop (as in an
 *           application's callback), call tw__loop_call_sync on the other
 *           at the same time: both calls return (before, each waited for
 *           the other's thread forever); so do three in a ring, and a
 *           plain thread's call queued behind one of them
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "platform/loop.h"

#define CHECK(c)                                                                          \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

static void idle_check(void *arg)
{
	(void)arg;
}

static void start(tw_loop *l)
{
	char d[256];
	CHECK(tw__loop_start(l, idle_check, NULL, d, sizeof(d)) == TW_OK);
}

static void finish_cb(void *arg)
{
	CHECK(tw__loop_finish(arg));
}

static void stop(tw_loop *l)
{
	CHECK(tw__loop_call_sync(l, finish_cb, l));
	tw__loop_join(l);
	tw__loop_free(l);
}

/* ---- order ------------------------------------------------------------------------- */

enum { ROUNDS = 2000 };

struct order {
	tw_loop loop;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int log[2 * ROUNDS + 8];
	int n;
	bool in_caller;     /* set while the loop-thread poster is still running */
	bool inline_seen;   /* a posted function ran inside its poster */
	int round;          /* the round the other thread should post for (-1: none) */
	tw_deferred from_loop[ROUNDS], from_thread[ROUNDS], starter[ROUNDS];
	atomic_int done;
};

static void record(struct order *o, int v)
{
	pthread_mutex_lock(&o->mu);
	o->log[o->n++] = v;
	pthread_mutex_unlock(&o->mu);
}

static void ran_from_loop(void *arg)
{
	struct order *o = arg;
	if (o->in_caller)
		o->inline_seen = true;
	record(o, 1);
}

static void ran_from_thread(void *arg)
{
	struct order *o = arg;
	record(o, 2);
	atomic_fetch_add(&o->done, 1);
}

/* On the loop thread: posts A, then lets the other thread post B. A was
 * posted first, so A must run first, although only B woke the loop. */
static void starter(void *arg)
{
	struct order *o = arg;
	pthread_mutex_lock(&o->mu);
	int r = o->round;
	pthread_mutex_unlock(&o->mu);
	o->in_caller = true;
	CHECK(tw__loop_post(&o->loop, &o->from_loop[r], ran_from_loop, o));
	o->in_caller = false;
	pthread_mutex_lock(&o->mu);
	o->round = -(r + 2); /* "A is posted": the other thread goes */
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->mu);
	/* give the other thread time to post while this pass goes on */
	for (volatile int i = 0; i < 20000; i++) {
	}
}

static void case_order(void)
{
	static struct order o;
	memset(&o, 0, sizeof(o));
	pthread_mutex_init(&o.mu, NULL);
	pthread_cond_init(&o.cv, NULL);
	start(&o.loop);
	for (int r = 0; r < ROUNDS; r++) {
		pthread_mutex_lock(&o.mu);
		o.round = r;
		pthread_mutex_unlock(&o.mu);
		CHECK(tw__loop_post(&o.loop, &o.starter[r], starter, &o));
		pthread_mutex_lock(&o.mu);
		while (o.round != -(r + 2))
			pthread_cond_wait(&o.cv, &o.mu);
		pthread_mutex_unlock(&o.mu);
		CHECK(tw__loop_post(&o.loop, &o.from_thread[r], ran_from_thread, &o));
		while (atomic_load(&o.done) != r + 1)
			usleep(10);
	}
	stop(&o.loop);
	CHECK(!o.inline_seen);
	CHECK(o.n == 2 * ROUNDS);
	for (int r = 0; r < ROUNDS; r++) {
		if (o.log[2 * r] != 1 || o.log[2 * r + 1] != 2) {
			fprintf(stderr, "round %d: ran %d then %d; posted 1 (loop thread) then 2\n", r,
			        o.log[2 * r], o.log[2 * r + 1]);
			exit(1);
		}
	}
	printf("ok - order: %d rounds, the loop thread's post ran before the later one of "
	       "another thread each time, never inside its poster\n", ROUNDS);
}

/* ---- spin ------------------------------------------------------------------------------ */

/* The loop thread's Linux thread id, and its scheduler state from
 * /proc/self/task/<tid>/stat: 'R' running or runnable (polling, or waiting
 * for a CPU), 'S' asleep (blocked in epoll_wait). The state, not the CPU
 * time: a polling thread that yields gets little CPU on a loaded machine,
 * but it never sleeps. */
static pid_t loop_tid;

static void who(void *arg)
{
	(void)arg;
	loop_tid = gettid();
}

static void nothing(void *arg)
{
	(void)arg;
}

static char loop_state(void)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)loop_tid);
	FILE *f = fopen(path, "r");
	CHECK(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *close = strrchr(buf, ')'); /* the name may hold spaces */
	CHECK(close && close[1] == ' ');
	return close[2];
}

/* Of `samples` looks at the loop thread, 10 ms apart, how many found it
 * awake (not 'S'). */
static int awake(int samples)
{
	int n = 0;
	for (int i = 0; i < samples; i++) {
		n += loop_state() != 'S';
		usleep(10 * 1000);
	}
	return n;
}

static int awake_after_work(tw_loop *l, int samples)
{
	static tw_deferred d;
	CHECK(tw__loop_post(l, &d, nothing, NULL));
	usleep(2000);
	return awake(samples);
}

static void case_spin(void)
{
	tw_loop plain, spin;
	start(&plain);
	CHECK(tw__loop_call_sync(&plain, who, NULL));
	int quiet = awake_after_work(&plain, 10);
	stop(&plain);

	start(&spin);
	tw__loop_set_spin(&spin, 300000); /* 300 ms */
	tw__loop_set_spin(&spin, 1000);   /* a shorter bound does not shorten it */
	CHECK(tw__loop_call_sync(&spin, who, NULL));
	usleep(600 * 1000); /* the call's own polling is over */
	int before = awake(10);
	int busy = awake_after_work(&spin, 10); /* 100 ms of the 300 */
	usleep(600 * 1000);
	int after = awake(10);
	stop(&spin);
	printf("# loop thread awake in 10 looks 10 ms apart: %d after work without busy polling; "
	       "with a 300 ms bound: %d before work, %d just after it, %d once the bound has "
	       "passed\n", quiet, before, busy, after);
	CHECK(quiet <= 2);
	CHECK(before <= 2);
	CHECK(busy >= 8);
	CHECK(after <= 2);
	printf("ok - spin\n");
}

/* ---- rounds ---------------------------------------------------------------------- */

enum { CHAIN = 3 * TW_LOOP_ROUNDS + 5 };

struct rounds {
	tw_loop loop;
	uv_poll_t poll;
	int fds[2];
	tw_deferred links[CHAIN];
	tw_deferred yielded;
	int done;          /* links run so far */
	int polled_at[8];  /* `done` at each poll callback */
	int polls;
	int yield_done_at; /* `done` when the yielded work ran (-1: not yet) */
	int yield_polls;   /* polls seen by then */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool finished;
};

static void rounds_link(void *arg);

static void rounds_on_poll(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	struct rounds *r = h->data;
	if (r->polls < 8)
		r->polled_at[r->polls] = r->done;
	r->polls++;
}

static void rounds_on_yield(void *arg)
{
	struct rounds *r = arg;
	r->yield_done_at = r->done;
	r->yield_polls = r->polls;
}

static void rounds_closed(uv_handle_t *h)
{
	struct rounds *r = h->data;
	pthread_mutex_lock(&r->mu);
	r->finished = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void rounds_link(void *arg)
{
	struct rounds *r = arg;
	r->done++;
	if (r->done == 1) /* from an idle pass: runs in the next one */
		tw__loop_yield(&r->loop, &r->yielded, rounds_on_yield, r);
	if (r->done < CHAIN) {
		tw__loop_defer(&r->loop, &r->links[r->done], rounds_link, r);
		return;
	}
	uv_poll_stop(&r->poll);
	uv_close((uv_handle_t *)&r->poll, rounds_closed);
}

/* On the loop thread: a descriptor that stays readable is polled, and the
 * chain starts (its first link yields a piece of work). */
static void rounds_begin(void *arg)
{
	struct rounds *r = arg;
	CHECK(uv_poll_init(&r->loop.uv, &r->poll, r->fds[0]) == 0);
	r->poll.data = r;
	CHECK(uv_poll_start(&r->poll, UV_READABLE, rounds_on_poll) == 0);
	tw__loop_defer(&r->loop, &r->links[0], rounds_link, r);
}

static void case_rounds(void)
{
	static struct rounds r;
	r.yield_done_at = -1;
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, r.fds) == 0);
	CHECK(write(r.fds[1], "x", 1) == 1); /* readable until the end */
	start(&r.loop);
	CHECK(tw__loop_call_sync(&r.loop, rounds_begin, &r));
	pthread_mutex_lock(&r.mu);
	while (!r.finished)
		pthread_cond_wait(&r.cv, &r.mu);
	pthread_mutex_unlock(&r.mu);
	stop(&r.loop);
	printf("# a chain of %d deferred links, a descriptor readable all along: polled %d times, "
	       "the first after link %d, the second after link %d; the yielded work ran after "
	       "link %d and %d polls\n", CHAIN, r.polls, r.polled_at[0],
	       r.polls > 1 ? r.polled_at[1] : -1, r.yield_done_at, r.yield_polls);
	/* the first poll comes once the first pass's rounds are over */
	CHECK(r.polls >= 2);
	CHECK(r.polled_at[0] == TW_LOOP_ROUNDS);
	/* the bound lets I/O in before the chain is over */
	CHECK(r.polled_at[1] == 2 * TW_LOOP_ROUNDS);
	/* yielded work waits for the next pass, after a poll */
	CHECK(r.yield_polls == 1);
	CHECK(r.yield_done_at == TW_LOOP_ROUNDS);
	close(r.fds[0]);
	close(r.fds[1]);
	printf("ok - rounds\n");
}

/* ---- poller ---------------------------------------------------------------------------- */

struct probe {
	tw_loop_poller p;
	tw_loop *loop;
	atomic_int started, stopped, looks;
	int finds;          /* looks left that find something */
	int restarts;       /* kicks from its own `stopped` still to make */
	uint64_t found_ns;  /* the last look that found something */
	uint64_t gap_ns;    /* from that look to `stopped` */
	int looks_at_stop;  /* looks when `stopped` last ran */
};

static unsigned probe_poll(tw_loop_poller *p)
{
	struct probe *pr = (struct probe *)p;
	atomic_fetch_add(&pr->looks, 1);
	if (pr->finds <= 0)
		return 0;
	pr->finds--;
	pr->found_ns = uv_hrtime();
	return 1;
}

static void probe_started(tw_loop_poller *p)
{
	atomic_fetch_add(&((struct probe *)p)->started, 1);
}

static void probe_stopped(tw_loop_poller *p)
{
	struct probe *pr = (struct probe *)p;
	pr->gap_ns = uv_hrtime() - pr->found_ns;
	pr->looks_at_stop = atomic_load(&pr->looks);
	atomic_fetch_add(&pr->stopped, 1);
	if (pr->restarts > 0) {
		pr->restarts--;
		pr->finds = 3;
		tw__loop_poller_kick(pr->loop, p); /* from inside the loop's own pass */
	}
}

static void probe_kick(void *arg)
{
	struct probe *pr = arg;
	pr->found_ns = uv_hrtime();
	tw__loop_poller_kick(pr->loop, &pr->p);
}

static void probe_cancel(void *arg)
{
	struct probe *pr = arg;
	tw__loop_poller_cancel(pr->loop, &pr->p);
}

static void probe_init(struct probe *pr, tw_loop *l, uint64_t busy_ms, int finds, int restarts)
{
	memset(pr, 0, sizeof(*pr));
	pr->p = (tw_loop_poller){ .poll = probe_poll, .started = probe_started,
		                  .stopped = probe_stopped, .busy_ns = busy_ms * 1000000 };
	pr->loop = l;
	pr->finds = finds;
	pr->restarts = restarts;
}

/* Waits up to four seconds for pr's `stopped` count to reach n. */
static void wait_stopped(struct probe *pr, int n)
{
	for (int i = 0; i < 400 && atomic_load(&pr->stopped) < n; i++)
		usleep(10 * 1000);
}

static void case_poller(void)
{
	tw_loop l;
	start(&l);
	CHECK(tw__loop_call_sync(&l, who, NULL));
	struct probe a, b, c;
	probe_init(&a, &l, 50, 5, 1);
	CHECK(tw__loop_call_sync(&l, probe_kick, &a));
	wait_stopped(&a, 2);
	int slept = awake(10);
	printf("# poller: started %d, stopped %d, %d looks, %.1f ms from the last find to the stop; "
	       "loop thread awake in %d of 10 looks afterwards\n",
	       atomic_load(&a.started), atomic_load(&a.stopped), atomic_load(&a.looks),
	       (double)a.gap_ns / 1e6, slept);
	CHECK(atomic_load(&a.started) == 2); /* the kick, then the one from its `stopped` */
	CHECK(atomic_load(&a.stopped) == 2);
	CHECK(atomic_load(&a.looks) >= 5 + 3 + 2); /* every find, and one empty look per stop */
	CHECK(atomic_load(&a.looks) == a.looks_at_stop + 1); /* one more after the last stop */
	CHECK(a.gap_ns >= 50 * 1000000ull);        /* the bound, from the last find */
	CHECK(slept <= 2);

	probe_init(&b, &l, 60000, 0, 0); /* a minute: only the cancel ends it */
	CHECK(tw__loop_call_sync(&l, probe_kick, &b));
	usleep(50 * 1000);
	CHECK(tw__loop_call_sync(&l, probe_cancel, &b));
	int looks = atomic_load(&b.looks);
	usleep(50 * 1000);
	int slept_b = awake(10);
	CHECK(atomic_load(&b.started) == 1 && atomic_load(&b.stopped) == 0);
	CHECK(looks > 0 && atomic_load(&b.looks) == looks); /* no look after the cancel */
	CHECK(slept_b <= 2);

	probe_init(&c, &l, 0, 5, 0); /* no bound: kicks do nothing */
	CHECK(tw__loop_call_sync(&l, probe_kick, &c));
	usleep(50 * 1000);
	CHECK(atomic_load(&c.started) == 0 && atomic_load(&c.looks) == 0);
	stop(&l);
	printf("ok - poller\n");
}

static void due_set(void *arg)
{
	tw__loop_answer_due(((struct probe *)arg)->loop, true);
}

static void due_clear(void *arg)
{
	tw__loop_answer_due(((struct probe *)arg)->loop, false);
}

static void case_answer_due(void)
{
	const uint64_t cap_ns = (uint64_t)TW_LOOP_ANSWER_DUE_US * 1000;
	const uint64_t in_time_ns = cap_ns * 8 / 10; /* checks of "not yet" need a look before it */
	tw_loop l;
	start(&l);
	struct probe d, e;
	probe_init(&d, &l, 1, 0, 0); /* a 1 ms bound, never finds anything */
	/* an answer due holds the poller past its own bound, up to the cap */
	uint64_t t_due = uv_hrtime();
	CHECK(tw__loop_call_sync(&l, due_set, &d));
	uint64_t t0 = uv_hrtime();
	CHECK(tw__loop_call_sync(&l, probe_kick, &d));
	usleep(50 * 1000);
	int stopped_early = atomic_load(&d.stopped);
	bool early_in_time = uv_hrtime() - t0 < in_time_ns;
	wait_stopped(&d, 1);
	uint64_t held_gap = d.gap_ns;
	uint64_t held_stop = d.found_ns + d.gap_ns; /* found_ns: the kick (nothing found) */
	/* the same answer, due for longer than the cap, holds nothing any more */
	CHECK(tw__loop_call_sync(&l, probe_kick, &d));
	wait_stopped(&d, 2);
	uint64_t stale_gap = d.gap_ns;
	/* a new answer due holds it again, until it comes */
	CHECK(tw__loop_call_sync(&l, due_set, &d));
	t0 = uv_hrtime();
	CHECK(tw__loop_call_sync(&l, probe_kick, &d));
	usleep(10 * 1000);
	int stopped_held = atomic_load(&d.stopped);
	CHECK(tw__loop_call_sync(&l, due_clear, &d));
	CHECK(tw__loop_call_sync(&l, due_clear, &d));
	bool held_in_time = uv_hrtime() - t0 < in_time_ns;
	wait_stopped(&d, 3);
	printf("# answer_due: a 1 ms poller polled %.1f ms with an answer due (cap %.0f ms), "
	       "%.1f ms once the answer had been due longer than the cap, %.1f ms once a new one "
	       "came%s\n",
	       (double)held_gap / 1e6, (double)cap_ns / 1e6, (double)stale_gap / 1e6,
	       (double)d.gap_ns / 1e6,
	       early_in_time && held_in_time ? "" : " (machine too slow for the early checks: skipped)");
	CHECK(atomic_load(&d.started) == 3);
	CHECK(held_stop - t_due >= cap_ns); /* the cap, from when the answer became due */
	CHECK(stale_gap < cap_ns);  /* its own bound again */
	CHECK(atomic_load(&d.stopped) == 3);
	if (early_in_time)
		CHECK(stopped_early == 0); /* past its own bound while due */
	if (held_in_time) {
		CHECK(stopped_held == 2);
		CHECK(d.gap_ns < cap_ns); /* stopped at its own bound once the answer came */
	}

	probe_init(&e, &l, 0, 5, 0); /* no bound: off, answer due or not */
	CHECK(tw__loop_call_sync(&l, due_set, &e));
	CHECK(tw__loop_call_sync(&l, probe_kick, &e));
	usleep(20 * 1000);
	CHECK(atomic_load(&e.started) == 0 && atomic_load(&e.looks) == 0);
	CHECK(tw__loop_call_sync(&l, due_clear, &e));
	stop(&l);
	printf("ok - answer_due\n");
}

/* ---- crossed ---------------------------------------------------------------------- */

enum { CROSS_MAX = 3 };

struct crossed {
	tw_loop loops[CROSS_MAX];
	tw_deferred posts[CROSS_MAX];
	atomic_int ran_on[CROSS_MAX]; /* which loop's work ran the call aimed at loop i */
	pthread_barrier_t all_in;
	int n;
	atomic_int done;
};

struct crossed_call {
	struct crossed *x;
	int from, to;
};

static struct crossed_call cross_calls[CROSS_MAX];

static void crossed_target(void *arg)
{
	struct crossed_call *c = arg;
	CHECK(tw__loop_on_thread(&c->x->loops[c->to]));
	atomic_fetch_add(&c->x->ran_on[c->to], 1);
}

static void crossed_start(void *arg)
{
	struct crossed_call *c = arg;
	/* Every loop thread is inside its own work before any calls out. */
	pthread_barrier_wait(&c->x->all_in);
	CHECK(tw__loop_call_sync(&c->x->loops[c->to], crossed_target, c));
	atomic_fetch_add(&c->x->done, 1);
}

static void crossed_nothing(void *arg)
{
	(void)arg;
}

static void *crossed_plain(void *arg)
{
	struct crossed *x = arg;
	CHECK(tw__loop_call_sync(&x->loops[0], crossed_nothing, NULL));
	atomic_fetch_add(&x->done, 1);
	return NULL;
}

static void crossed_ring(int n)
{
	static struct crossed x;
	memset(&x, 0, sizeof(x));
	x.n = n;
	CHECK(pthread_barrier_init(&x.all_in, NULL, (unsigned)n) == 0);
	for (int i = 0; i < n; i++)
		start(&x.loops[i]);
	for (int i = 0; i < n; i++) {
		cross_calls[i] = (struct crossed_call){ &x, i, (i + 1) % n };
		CHECK(tw__loop_post(&x.loops[i], &x.posts[i], crossed_start, &cross_calls[i]));
	}
	/* A plain thread's call behind them: it waits for loop 0, which waits
	 * for loop 1, and so on round the ring. */
	pthread_t plain;
	CHECK(pthread_create(&plain, NULL, crossed_plain, &x) == 0);
	for (int waited = 0; atomic_load(&x.done) != n + 1; waited++) {
		if (waited == 20000) {
			fprintf(stderr, "crossed: %d loops calling each other in a ring: %d of %d calls "
			                "returned after 20 s (deadlock)\n",
			        n, atomic_load(&x.done), n + 1);
			exit(1);
		}
		usleep(1000);
	}
	CHECK(pthread_join(plain, NULL) == 0);
	for (int i = 0; i < n; i++)
		CHECK(atomic_load(&x.ran_on[i]) == 1);
	for (int i = 0; i < n; i++)
		stop(&x.loops[i]);
	pthread_barrier_destroy(&x.all_in);
}

static void case_crossed(void)
{
	crossed_ring(2);
	crossed_ring(3);
	printf("ok - crossed\n");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: loop_test order|spin|rounds|poller|answer_due|crossed\n");
		return 2;
	}
	if (!strcmp(argv[1], "order"))
		case_order();
	else if (!strcmp(argv[1], "spin"))
		case_spin();
	else if (!strcmp(argv[1], "rounds"))
		case_rounds();
	else if (!strcmp(argv[1], "poller"))
		case_poller();
	else if (!strcmp(argv[1], "answer_due"))
		case_answer_due();
	else if (!strcmp(argv[1], "crossed"))
		case_crossed();
	else
		return 2;
	return 0;
}
