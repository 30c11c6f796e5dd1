/*
 * loop.h - one libuv event loop running on its own thread, plus the two
 * queues every other part of the library relies on:
 *
 *   - posted work (tw__loop_post): any thread hands a function to the loop
 *     thread; a locked queue drained after a uv_async wake-up (or, when the
 *     loop thread posts, on the loop's next pass through its idle handle,
 *     without a wake-up). This is how public API calls are marshalled onto
 *     the loop.
 *   - deferred work (tw__loop_defer): loop-thread only; the function runs
 *     later, never inside the caller's stack: in the next round of the
 *     loop's idle pass, which runs up to TW_LOOP_ROUNDS rounds before the
 *     loop polls its sockets again. This is how every callback (ours to the
 *     application, and transports/channels to the core) is made "never
 *     inline". Work that must give way to I/O (a long copy in steps) uses
 *     tw__loop_yield: the next pass, after the sockets were polled.
 *
 * Both queues are intrusive (the caller embeds a tw_deferred), so queueing
 * never allocates and never fails. The loop must not know what a context,
 * pipe or transport is: the owner installs an `idle_check` hook that decides
 * when the loop may stop (tw__loop_finish).
 */
#ifndef TW_PLATFORM_LOOP_H
#define TW_PLATFORM_LOOP_H

#include <pthread.h>
#include <sys/types.h>
#include <stdbool.h>
#include <uv.h>

#include "tensorwire/tensorwire.h"

/* Rounds of deferred work per pass of the loop (tw__loop_defer). */
#define TW_LOOP_ROUNDS 16

typedef struct tw_deferred {
	struct tw_deferred *next;
	void (*fn)(void *arg);
	void *arg;
} tw_deferred;

/* A busy poller: bounded busy polling of what wakes the loop otherwise (a
 * ring read by a thread, completion queues with their events). After
 * activity (tw__loop_poller_kick) the loop calls `poll` on each of its
 * passes, never sleeping in between, until `busy_ns` (or, while an answer
 * is due, TW_LOOP_ANSWER_DUE_US) have passed with nothing found and the
 * loop has no work queued for its next pass; then the poller is off its
 * list, `stopped` runs (re-arm the wake-up) and the loop calls `poll` once
 * more, for what came before the wake-up was armed.
 * `started` runs when polling begins. A pass on which neither work nor any poller
 * found anything lets another thread of this CPU run first (the peer
 * waited for may share it). Every callback is optional. Loop thread. */
typedef struct tw_loop_poller tw_loop_poller;
struct tw_loop_poller {
	unsigned (*poll)(tw_loop_poller *p); /* one look: how much it found */
	void (*started)(tw_loop_poller *p);
	void (*stopped)(tw_loop_poller *p);
	uint64_t busy_ns;      /* how long after the last activity (0: kicks do nothing) */
	uint64_t last_ns;      /* uv_hrtime() of the last activity */
	tw_loop_poller *next;  /* in the loop's active pollers */
	bool active;
};

typedef struct tw_loop {
	uv_loop_t uv;
	uv_async_t async;
	uv_idle_t idle;
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;          /* signals tw__loop_call_sync completions */
	tw_deferred *posted_head;   /* under mu */
	tw_deferred *posted_tail;
	bool accepting;             /* under mu: false once the loop is finishing */
	bool exited;                /* atomic: the thread returned from uv_run */
	struct tw_loop *joiner;     /* under mu: a loop thread waiting for it to exit */
	unsigned sync_waiting;      /* under mu: its thread waits in tw__loop_call_sync (depth) */
	tw_deferred *urgent_head;   /* under mu: sync calls handed to that waiting thread */
	tw_deferred *urgent_tail;
	tw_deferred *def_head;      /* loop thread only */
	tw_deferred *def_tail;
	tw_deferred *yield_head;    /* loop thread only: tw__loop_yield, the next pass */
	tw_deferred *yield_tail;
	bool idle_active;
	bool posted_here;           /* loop thread: it posted work since the queue was last run */
	uint64_t spin_ns;           /* busy polling after work (0: off); atomic: set by any thread */
	tw_loop_poller spin;        /* loop thread: that polling (tw__loop_set_spin) */
	tw_loop_poller *pollers;    /* loop thread: the active ones */
	unsigned answers_due;       /* loop thread: tw__loop_answer_due */
	uint64_t due_since_ns;      /* loop thread: uv_hrtime() of the newest answer due */
	bool finishing;
	void (*idle_check)(void *arg); /* loop thread: after each batch of work */
	void *idle_check_arg;
	pid_t pid; /* the process whose thread runs the loop */
	unsigned fork_generation; /* tw__loop_forked: the process's forks seen at start */
} tw_loop;

/* Initialises the loop and starts its thread. */
TW_NODISCARD tw_status_t tw__loop_start(tw_loop *l, void (*idle_check)(void *), void *arg,
                                        char *detail, size_t detail_len);

/* Any thread: runs fn(arg) on the loop thread soon. Returns false (and does
 * nothing) if the loop has finished and accepts no more work, or if this is
 * a forked child of the loop's process (the loop thread is not here: nothing
 * posted would ever run). */
TW_NODISCARD bool tw__loop_post(tw_loop *l, tw_deferred *d, void (*fn)(void *), void *arg);

/* Any thread: runs fn(arg) on the loop thread and waits for it to return
 * (directly if already on the loop thread). False if the loop has finished.
 * Loop threads calling each other's loops this way (an application's
 * callbacks on two contexts) never wait for each other forever: a loop
 * thread waiting here runs the calls other loop threads make to its loop,
 * ahead of work posted to it earlier (which waits for the loop's next pass). */
TW_NODISCARD bool tw__loop_call_sync(tw_loop *l, void (*fn)(void *), void *arg);

/* Loop thread: runs fn(arg) later, in the next round of the loop's pass
 * (after what was deferred before it), never inside the caller's stack. */
void tw__loop_defer(tw_loop *l, tw_deferred *d, void (*fn)(void *), void *arg);

/* Loop thread: runs fn(arg) in the next pass of the loop, after it has
 * polled its sockets: for work done in steps that must not keep I/O waiting
 * (each step yields). */
void tw__loop_yield(tw_loop *l, tw_deferred *d, void (*fn)(void *), void *arg);

/* Any thread: after any posted or deferred work has run, the loop keeps
 * polling (epoll_wait with no timeout, through its idle handle) for `us`
 * microseconds instead of sleeping, so that what arrives meanwhile is taken
 * without a wake-up; the longest bound asked for wins (asking again for a
 * bound already set is one relaxed atomic load). It costs that thread's CPU
 * while it polls: opt-in (option busy_poll_us of the uv transport, asked by
 * each of its connections). */
void tw__loop_set_spin(tw_loop *l, uint64_t us);

/* The default busy-polling bound of the transports whose stock
 * counterpart polls all the time (shm's reactor ring, ibv's completion
 * queues): a message that comes within this long of the last one is taken
 * without a thread wake-up, as stock takes every message, and the thread
 * sleeps once this long passes with nothing, where stock's never does. */
#define TW_LOOP_BUSY_DEFAULT_US 1000

/* While an answer is due (tw__loop_answer_due), an active poller's bound
 * is at least this long, for this long after the newest answer became
 * due: the peer is busy for us (copying our tensor out of our memory) and
 * answers when it is done, which can take longer than the default bound;
 * stock polls through it, and a sleeping thread's wake-up would be on the
 * message's path. An answer that never comes keeps nobody polling longer. */
#define TW_LOOP_ANSWER_DUE_US 100000

/* Loop thread: activity now; p polls from the loop's next pass on (for
 * p->busy_ns after the last activity) unless p->busy_ns is 0 or the loop
 * is finishing. */
void tw__loop_poller_kick(tw_loop *l, tw_loop_poller *p);

/* Loop thread: a peer's answer is due (true) or came (false, once per
 * true): a send waits for the peer's confirmation that it copied the
 * bytes. While any is due, and for at most TW_LOOP_ANSWER_DUE_US after the
 * newest became due, active pollers poll for at least that long after
 * their last find; pollers that are off (busy_ns 0) stay off. */
void tw__loop_answer_due(tw_loop *l, bool due);

/* Loop thread: p stops polling at once, without its `stopped` (its owner
 * goes away). */
void tw__loop_poller_cancel(tw_loop *l, tw_loop_poller *p);

/* Loop thread: the loop's time `ms` milliseconds from now (uv_now), at
 * most UINT64_MAX: a bound near the largest value means "very long", never
 * a deadline that wrapped into the past. */
static inline uint64_t tw__loop_deadline(tw_loop *l, uint64_t ms)
{
	uint64_t now = uv_now(&l->uv);
	return ms > UINT64_MAX - now ? UINT64_MAX : now + ms;
}

/* True on the loop's own thread. */
bool tw__loop_on_thread(tw_loop *l);
/* True in a forked child of the process that started the loop (a child
 * made by fork(2) through libc, whose pthread_atfork handlers run; no
 * system call is made, so every post can ask). */
bool tw__loop_forked(const tw_loop *l);

/* Loop thread: if no posted or deferred work is waiting, stops accepting
 * work and lets the thread exit once every handle has closed; returns true.
 * Returns false (and changes nothing) if work is still queued. */
bool tw__loop_finish(tw_loop *l);

/* Any thread but the loop's: waits for the thread to exit and closes the
 * libuv loop. Idempotent. Posting afterwards fails cleanly (returns false). */
void tw__loop_join(tw_loop *l);

/* Joins if needed and releases the queues' locks. Nothing may post after. */
void tw__loop_free(tw_loop *l);

#endif /* TW_PLATFORM_LOOP_H */
