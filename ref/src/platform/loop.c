/*
 * loop.c - the loop thread and its posted/deferred queues (see loop.h).
 */
#include "platform/loop.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "platform/error.h"
#include "platform/platform.h"

struct tw_sync_call {
	tw_deferred node;
	void (*fn)(void *);
	void *arg;
	tw_loop *wake; /* whose mu guards `done` and whose cv says it is set */
	bool done;
};

/* Set by any thread (a transport's options), read by the loop thread. */
static uint64_t tw__loop_spin_ns(const tw_loop *l)
{
	return __atomic_load_n(&l->spin_ns, __ATOMIC_RELAXED);
}

/* Work ran: where busy polling was asked for (tw__loop_set_spin), the loop
 * polls from now on for that long. */
static void tw__loop_spin_kick(tw_loop *l)
{
	uint64_t ns = tw__loop_spin_ns(l);
	if (ns) {
		l->spin.busy_ns = ns;
		tw__loop_poller_kick(l, &l->spin);
	}
}

/* Runs a chain of work in order. */
static void tw__loop_run_list(tw_deferred *d)
{
	while (d) {
		tw_deferred *next = d->next;
		d->next = NULL;
		d->fn(d->arg);
		d = next;
	}
}

static void tw__loop_run_deferred(tw_loop *l)
{
	/* Run only what was queued before this round: work deferred by these
	 * functions runs in the next round (tw__loop_on_idle bounds them). */
	tw_deferred *d = l->def_head;
	l->def_head = l->def_tail = NULL;
	if (d)
		tw__loop_spin_kick(l);
	tw__loop_run_list(d);
}

static void tw__loop_on_idle(uv_idle_t *h);

/* Keeps the idle handle active while anything waits for the next pass. */
static void tw__loop_idle_on(tw_loop *l)
{
	if (!l->idle_active) {
		uv_idle_start(&l->idle, tw__loop_on_idle);
		l->idle_active = true;
	}
}

/* Is there work for the loop's next pass (deferred, yielded or posted)? */
static bool tw__loop_queued(const tw_loop *l)
{
	return l->def_head || l->yield_head || l->posted_here;
}

static void tw__loop_check(tw_loop *l)
{
	if (!tw__loop_queued(l) && !l->pollers && l->idle_active) {
		uv_idle_stop(&l->idle);
		l->idle_active = false;
	}
	if (!l->finishing && l->idle_check)
		l->idle_check(l->idle_check_arg);
}

/* Runs the posted queue until it is empty (work posted by what runs here
 * is taken in the same pass, after what was posted before it), one item at
 * a time, so that what waits stays in the queue (under mu) while an item
 * runs: a join from that item may take other loop threads' calls out of it
 * (tw__loop_take_sync_calls). */
static void tw__loop_run_posted(tw_loop *l)
{
	l->posted_here = false;
	for (bool kicked = false;;) {
		pthread_mutex_lock(&l->mu);
		tw_deferred *d = l->posted_head;
		if (d && !(l->posted_head = d->next))
			l->posted_tail = NULL;
		pthread_mutex_unlock(&l->mu);
		if (!d)
			break;
		if (!kicked)
			tw__loop_spin_kick(l);
		kicked = true;
		d->next = NULL;
		d->fn(d->arg);
	}
}

static void tw__loop_poller_unlink(tw_loop *l, tw_loop_poller *p)
{
	for (tw_loop_poller **pp = &l->pollers; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	p->next = NULL;
	p->active = false;
}

void tw__loop_poller_kick(tw_loop *l, tw_loop_poller *p)
{
	if (!p->busy_ns || l->finishing)
		return;
	p->last_ns = uv_hrtime();
	if (p->active)
		return;
	p->active = true;
	p->next = l->pollers;
	l->pollers = p;
	tw__loop_idle_on(l);
	if (p->started)
		p->started(p);
}

void tw__loop_poller_cancel(tw_loop *l, tw_loop_poller *p)
{
	if (p->active)
		tw__loop_poller_unlink(l, p);
}

void tw__loop_answer_due(tw_loop *l, bool due)
{
	if (due) {
		l->answers_due++;
		l->due_since_ns = uv_hrtime();
	}
	else if (l->answers_due > 0)
		l->answers_due--;
}

/* One look by each active poller; those whose bound passed with nothing
 * found stop, and take one more look once `stopped` has re-armed their
 * wake-up (what came in between raises none), unless `stopped` kicked them
 * again. None stops while the loop has work for its next pass (a long copy
 * in steps, or what a poller before it in this pass found): the loop
 * looks on every pass anyway, and a wake-up re-armed
 * then would wake a thread only to hand the loop what its next pass takes,
 * taking the CPU from that work meanwhile. A poller's callbacks may kick
 * any poller and cancel only themselves. Returns whether any found
 * something. */
static bool tw__loop_run_pollers(tw_loop *l)
{
	bool found = false;
	const uint64_t cap_ns = (uint64_t)TW_LOOP_ANSWER_DUE_US * 1000;
	uint64_t due_ns =
	    l->answers_due && uv_hrtime() - l->due_since_ns < cap_ns ? cap_ns : 0;
	for (tw_loop_poller *p = l->pollers, *next; p; p = next) {
		next = p->next;
		unsigned n = p->poll ? p->poll(p) : 0;
		uint64_t now = uv_hrtime();
		uint64_t bound = p->busy_ns > due_ns ? p->busy_ns : due_ns;
		if (n) {
			p->last_ns = now;
			found = true;
		} else if (p->active && now - p->last_ns > bound && !tw__loop_queued(l)) {
			tw__loop_poller_unlink(l, p);
			if (p->stopped)
				p->stopped(p);
			if (p->poll && !p->active)
				(void)p->poll(p);
		}
	}
	return found;
}

static void tw__loop_on_idle(uv_idle_t *h)
{
	tw_loop *l = h->data;
	/* What gave way to I/O in the last pass (tw__loop_yield) runs first. */
	if (l->yield_head) {
		l->yield_tail->next = l->def_head;
		if (!l->def_head)
			l->def_tail = l->yield_tail;
		l->def_head = l->yield_head;
		l->yield_head = l->yield_tail = NULL;
	}
	bool work = l->posted_here || l->def_head;
	/* Rounds, each taking what the one before queued, until nothing is
	 * left or the bound is reached: a chain of completions (a read, its
	 * callback, the application's next call, its write) finishes in one
	 * pass instead of one pass, and one epoll_wait, per link. The bound
	 * keeps the sockets polled however much work keeps queueing more. */
	for (int round = 0; round < TW_LOOP_ROUNDS && (l->posted_here || l->def_head); round++) {
		if (l->posted_here)
			tw__loop_run_posted(l);
		tw__loop_run_deferred(l);
	}
	if (l->pollers && !l->finishing)
		work = tw__loop_run_pollers(l) || work;
	tw__loop_check(l);
	/* A pass of busy polling that found nothing to do lets another thread
	 * of this CPU run first (the peer we wait for may share it: without
	 * this, two polling peers pinned to one CPU hand over once per
	 * scheduler tick, milliseconds per message). */
	if (!work && l->idle_active)
		sched_yield();
}

static void tw__loop_on_async(uv_async_t *h)
{
	tw_loop *l = h->data;
	tw__loop_run_posted(l);
	tw__loop_check(l);
}

/* Forks this process has made since the library was loaded (a child sees
 * its parent's count plus one): asked on every post, where getpid(2)
 * would be a system call each time. */
static atomic_uint fork_generation;
static pthread_once_t fork_watch = PTHREAD_ONCE_INIT;

/* The loop this thread runs, if any. */
static _Thread_local tw_loop *current_loop;

static void tw__loop_on_fork_child(void)
{
	atomic_fetch_add(&fork_generation, 1);
	/* A child forked inside a loop's work runs no loop: its copy of that
	 * loop is dead (and so are its locks, which another of the parent's
	 * threads may have held). */
	current_loop = NULL;
}

static void tw__loop_watch_forks(void)
{
	(void)pthread_atfork(NULL, NULL, tw__loop_on_fork_child);
}

static void *tw__loop_thread(void *arg)
{
	tw_loop *l = arg;
	current_loop = l;
	tw__sys_thread_name("tw-loop");
	uv_run(&l->uv, UV_RUN_DEFAULT);
	__atomic_store_n(&l->exited, true, __ATOMIC_RELEASE);
	pthread_mutex_lock(&l->mu);
	tw_loop *joiner = l->joiner;
	pthread_mutex_unlock(&l->mu);
	if (joiner) { /* a loop thread waits for this one in tw__loop_join */
		pthread_mutex_lock(&joiner->mu);
		pthread_cond_broadcast(&joiner->cv);
		pthread_mutex_unlock(&joiner->mu);
	}
	return NULL;
}

tw_status_t tw__loop_start(tw_loop *l, void (*idle_check)(void *), void *arg, char *detail,
                           size_t detail_len)
{
	memset(l, 0, sizeof(*l));
	int rc = uv_loop_init(&l->uv);
	if (rc != 0) {
		tw__detail(detail, detail_len, "uv_loop_init: %s", uv_strerror(rc));
		return TW_ERR_SYS;
	}
	rc = uv_async_init(&l->uv, &l->async, tw__loop_on_async);
	if (rc != 0) {
		tw__detail(detail, detail_len, "uv_async_init: %s", uv_strerror(rc));
		goto err_loop;
	}
	l->async.data = l;
	uv_idle_init(&l->uv, &l->idle);
	l->idle.data = l;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	l->accepting = true;
	l->idle_check = idle_check;
	l->idle_check_arg = arg;
	(void)pthread_once(&fork_watch, tw__loop_watch_forks);
	l->fork_generation = atomic_load(&fork_generation);
	l->pid = getpid();
	rc = pthread_create(&l->thread, NULL, tw__loop_thread, l);
	if (rc != 0) {
		tw__detail(detail, detail_len, "pthread_create: %s", strerror(rc));
		pthread_mutex_destroy(&l->mu);
		pthread_cond_destroy(&l->cv);
		uv_close((uv_handle_t *)&l->async, NULL);
		uv_close((uv_handle_t *)&l->idle, NULL);
		uv_run(&l->uv, UV_RUN_DEFAULT);
		goto err_loop;
	}
	l->thread_started = true;
	return TW_OK;
err_loop:
	uv_loop_close(&l->uv);
	return TW_ERR_SYS;
}

bool tw__loop_forked(const tw_loop *l)
{
	return l->pid != 0 && atomic_load(&fork_generation) != l->fork_generation;
}

/* Appends d to the singly linked queue *head .. *tail. */
static void tw__deferred_append(tw_deferred **head, tw_deferred **tail, tw_deferred *d)
{
	d->next = NULL;
	if (*tail)
		(*tail)->next = d;
	else
		*head = d;
	*tail = d;
}

/* Under l->mu: queues d on the posted queue (false if the loop accepts no
 * more work); `here` when the loop's own thread posts. */
static bool tw__loop_post_locked(tw_loop *l, tw_deferred *d, bool here)
{
	if (!l->accepting)
		return false;
	tw__deferred_append(&l->posted_head, &l->posted_tail, d);
	/* uv_async_send is async-signal-safe and thread-safe; calling it under
	 * the lock keeps the handle alive (finish closes it under the lock).
	 * The loop thread itself needs no wake-up (an eventfd write, then an
	 * epoll_wait and a read to take it): its idle handle makes the loop
	 * take the queue on its next pass without sleeping. One queue either
	 * way, so work runs in the order it was posted, whoever posted it. */
	if (!here)
		uv_async_send(&l->async);
	return true;
}

bool tw__loop_post(tw_loop *l, tw_deferred *d, void (*fn)(void *), void *arg)
{
	if (tw__loop_forked(l))
		return false;
	bool here = tw__loop_on_thread(l);
	d->fn = fn;
	d->arg = arg;
	pthread_mutex_lock(&l->mu);
	bool ok = tw__loop_post_locked(l, d, here);
	pthread_mutex_unlock(&l->mu);
	if (ok && here) {
		l->posted_here = true;
		tw__loop_idle_on(l);
	}
	return ok;
}

static void tw__loop_sync_trampoline(void *arg)
{
	struct tw_sync_call *c = arg;
	c->fn(c->arg);
	tw_loop *w = c->wake;
	pthread_mutex_lock(&w->mu);
	c->done = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* Under self->mu, on self's thread: its outermost sync wait is over; what
 * other loop threads handed it meanwhile (`urgent`) is returned, to run now.
 * An inner wait (a handed call that waits in turn) leaves it to the outer. */
static tw_deferred *tw__loop_sync_end(tw_loop *self)
{
	if (--self->sync_waiting)
		return NULL;
	tw_deferred *d = self->urgent_head;
	self->urgent_head = self->urgent_tail = NULL;
	return d;
}

/* Under l->mu: appends a sync call to those l's waiting thread runs next. */
static void tw__loop_urgent_push(tw_loop *l, tw_deferred *d)
{
	tw__deferred_append(&l->urgent_head, &l->urgent_tail, d);
}

static bool tw__loop_sync_done(void *arg)
{
	return ((struct tw_sync_call *)arg)->done;
}

/* Under w->mu: sleeps on w->cv until done(arg); a loop thread (self, then
 * w == self) marked as waiting runs meanwhile the calls other loop threads
 * hand it (`urgent`), mutex released while each runs. */
static void tw__loop_wait_marked(tw_loop *w, tw_loop *self, bool (*done)(void *), void *arg)
{
	while (!done(arg)) {
		if (self && self->urgent_head) {
			tw_deferred *d = self->urgent_head;
			self->urgent_head = d->next;
			if (!self->urgent_head)
				self->urgent_tail = NULL;
			d->next = NULL;
			pthread_mutex_unlock(&w->mu);
			d->fn(d->arg);
			pthread_mutex_lock(&w->mu);
			continue;
		}
		pthread_cond_wait(&w->cv, &w->mu);
	}
}

/* A loop thread that waits here for another loop is inside work of its own
 * (an application's callback calling the API). If the other loop's thread
 * is itself waiting for this one, directly or round a ring of loops, each
 * would wait forever. So a loop thread waiting here is marked
 * (`sync_waiting`), and a loop thread that calls a marked loop hands its
 * call to the waiter (`urgent`) instead of queueing it: the waiter runs it
 * between its own waits, as it would have run it inline had the call come
 * from its own callback. The marks and the hand-over are under the target's
 * mutex, so of two loops calling each other, the second to mark itself
 * always sees the first one's mark. A thread that runs no loop waits as
 * before: it cannot be part of a ring. A call handed over runs before work
 * posted to the waiter's loop earlier that has not run yet (that loop is
 * busy in the callback that waits); only such a call, which would otherwise
 * never have returned, overtakes. */
bool tw__loop_call_sync(tw_loop *l, void (*fn)(void *), void *arg)
{
	if (tw__loop_on_thread(l)) {
		fn(arg);
		return true;
	}
	if (tw__loop_forked(l))
		return false;
	tw_loop *self = current_loop;
	struct tw_sync_call c = { .fn = fn, .arg = arg, .wake = self ? self : l, .done = false };
	c.node.fn = tw__loop_sync_trampoline;
	c.node.arg = &c;
	if (self) {
		pthread_mutex_lock(&self->mu);
		self->sync_waiting++;
		pthread_mutex_unlock(&self->mu);
	}
	pthread_mutex_lock(&l->mu);
	bool ok = true;
	if (self && l->sync_waiting && l->accepting) {
		tw__loop_urgent_push(l, &c.node);
		pthread_cond_broadcast(&l->cv);
	} else {
		ok = tw__loop_post_locked(l, &c.node, false);
	}
	pthread_mutex_unlock(&l->mu);
	tw_loop *w = c.wake;
	pthread_mutex_lock(&w->mu);
	if (ok)
		tw__loop_wait_marked(w, self, tw__loop_sync_done, &c);
	tw_deferred *rest = self ? tw__loop_sync_end(self) : NULL;
	pthread_mutex_unlock(&w->mu);
	tw__loop_run_list(rest);
	return ok;
}

/* Loop thread: appends to one of the loop-thread queues and makes sure
 * the idle handle takes it. */
static void tw__loop_enqueue(tw_loop *l, tw_deferred **head, tw_deferred **tail, tw_deferred *d,
                             void (*fn)(void *), void *arg)
{
	d->fn = fn;
	d->arg = arg;
	tw__deferred_append(head, tail, d);
	tw__loop_idle_on(l);
}

void tw__loop_defer(tw_loop *l, tw_deferred *d, void (*fn)(void *), void *arg)
{
	tw__loop_enqueue(l, &l->def_head, &l->def_tail, d, fn, arg);
}

void tw__loop_yield(tw_loop *l, tw_deferred *d, void (*fn)(void *), void *arg)
{
	tw__loop_enqueue(l, &l->yield_head, &l->yield_tail, d, fn, arg);
}

void tw__loop_set_spin(tw_loop *l, uint64_t us)
{
	uint64_t want = us * 1000, have = tw__loop_spin_ns(l);
	while (want > have &&
	       !__atomic_compare_exchange_n(&l->spin_ns, &have, want, false, __ATOMIC_RELAXED,
	                                    __ATOMIC_RELAXED)) {
	}
}

bool tw__loop_on_thread(tw_loop *l)
{
	return current_loop == l;
}

bool tw__loop_finish(tw_loop *l)
{
	if (l->finishing)
		return true;
	if (l->def_head || l->yield_head)
		return false;
	pthread_mutex_lock(&l->mu);
	if (l->posted_head) {
		pthread_mutex_unlock(&l->mu);
		return false;
	}
	l->accepting = false;
	l->finishing = true;
	uv_close((uv_handle_t *)&l->async, NULL);
	pthread_mutex_unlock(&l->mu);
	if (l->idle_active)
		uv_idle_stop(&l->idle);
	uv_close((uv_handle_t *)&l->idle, NULL);
	return true;
}

/* Under self->mu, on self's thread, as it starts a marked wait that is no
 * call of its own: the calls other loop threads queued to it before it was
 * marked (posted, each waiting in tw__loop_call_sync) become urgent, so
 * that the wait runs them; one of them may be what the wait waits for. */
static void tw__loop_take_sync_calls(tw_loop *self)
{
	tw_deferred **at = &self->posted_head, *last = NULL;
	while (*at) {
		tw_deferred *d = *at;
		if (d->fn != tw__loop_sync_trampoline || ((struct tw_sync_call *)d->arg)->wake == self) {
			last = d;
			at = &d->next;
			continue;
		}
		*at = d->next; /* a loop thread's call: out of the queue, into urgent */
		tw__loop_urgent_push(self, d);
	}
	self->posted_tail = last;
}

static bool tw__loop_exited(void *arg)
{
	return __atomic_load_n(&((tw_loop *)arg)->exited, __ATOMIC_ACQUIRE);
}

/* Called from another loop's thread (a callback joining a context), the
 * wait is marked as in tw__loop_call_sync: the joined loop's thread may be
 * inside a callback that calls this loop and waits for it, and it exits
 * only once that call returned. */
void tw__loop_join(tw_loop *l)
{
	if (!l->thread_started)
		return;
	tw_loop *self = current_loop;
	if (self && self != l) {
		pthread_mutex_lock(&self->mu);
		self->sync_waiting++;
		tw__loop_take_sync_calls(self);
		pthread_mutex_unlock(&self->mu);
		pthread_mutex_lock(&l->mu);
		l->joiner = self;
		pthread_mutex_unlock(&l->mu);
		pthread_mutex_lock(&self->mu);
		tw__loop_wait_marked(self, self, tw__loop_exited, l);
		tw_deferred *rest = tw__loop_sync_end(self);
		pthread_mutex_unlock(&self->mu);
		tw__loop_run_list(rest);
	}
	pthread_join(l->thread, NULL);
	l->thread_started = false;
	uv_loop_close(&l->uv);
}

void tw__loop_free(tw_loop *l)
{
	tw__loop_join(l);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
}
