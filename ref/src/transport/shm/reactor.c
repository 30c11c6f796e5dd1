/*
 * reactor.c - shm's wake-up ring and its reading thread (see reactor.h).
 *
 * Threads. The reading thread only reads tokens and marks their
 * connection slots pending (an atomic flag per slot, a locked list of
 * pending slots); the loop thread owns the slot table and the tokens, and
 * is woken with a uv_async. A slot's flag is cleared before its connection
 * is woken, so a token that arrives while it runs wakes it again.
 *
 * Busy polling (busy_poll_us, 1 ms unless given; 0: off): after a token
 * or a write, the loop thread reads the ring itself on every pass (a loop
 * poller, loop.h, so the loop never sleeps) until busy_poll_us pass
 * without a token (longer while an answer is due, loop.h); meanwhile byte
 * 18 of the ring's header says so (spec 2.3.1.e), our producers skip their
 * futex wake and the reading thread stays asleep. When polling stops the
 * byte is cleared and the reading thread woken, so that a token whose
 * producer still saw the byte set is taken. While the loop polls, the
 * reading thread sleeps on a word of its own (`ended`, bumped when polling
 * ends), waking only for the watch (TW_SHM_REACTOR_WATCH_NS): a wake-up on
 * every bound there would take the CPU from the loop's work (a copy) for
 * nothing, since the loop takes the tokens on its next pass anyway.
 */
#include "transport/shm/reactor.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "platform/error.h"
#include "platform/list.h"
#include "platform/platform.h"

#define TW_SHM_REACTOR_BUSY_MIN_US 50
#define TW_SHM_REACTOR_WATCH_NS (UINT64_C(100) * 1000 * 1000)

struct tw_shm_reactor {
	tw_loop *loop;
	tw_ring ring;
	uint64_t idle_us;
	void (*wake)(void *conn);
	/* shared with the reading thread */
	pthread_t thread;
	bool thread_started; /* loop thread */
	atomic_bool stop;
	atomic_bool polling;     /* the loop polls the ring (byte 18 is shared: not trusted) */
	_Atomic uint32_t ended;  /* bumped (and woken) when polling ends and at stop */
	atomic_bool rewake;      /* tokens were lost to a repair: wake every connection */
	pthread_mutex_t cmu;     /* our consumers (this thread, the loop's polling) */
	tw_ring_watch watch;     /* reading thread: the producer flag at the last watch */
	uint64_t watch_ns;       /* reading thread: uv_hrtime() of the last watch */
	atomic_uchar *flag;      /* TW_SHM_MAX_CONNS: slot pending */
	pthread_mutex_t mu;
	uint32_t *pending;       /* under mu */
	size_t num_pending;
	/* loop thread */
	uv_async_t async;
	tw_loop_poller poller;   /* busy polling (its busy_ns 0: off) */
	uint32_t *work;          /* the batch being run (swapped with pending) */
	void **conns;            /* TW_SHM_MAX_CONNS */
	uint32_t *free_slots;
	size_t num_free;
	uint32_t next_slot;
};

/* Byte 18 of a reactor ring's header is padding in stock's layout (spec
 * 2.3.2), which stock never reads or writes: tensorwire sets it while its
 * loop thread polls the ring itself (busy polling), and our producers then
 * skip the futex wake, which would only take the core from the poller. */
#define TW_SHM_REACTOR_OFF_POLLING 18

static uint8_t *tw__shm_polling_byte(const tw_ring *ring)
{
	return ring->header + TW_SHM_REACTOR_OFF_POLLING;
}

static uint32_t *tw__shm_head_word(const tw_ring *ring)
{
	/* The low half of the 8-byte head marker (little-endian): it changes on
	 * every token written, which is all a futex needs. */
	return (uint32_t *)(void *)(ring->header + TW_RING_OFF_HEAD);
}

tw_status_t tw__shm_reactor_new(tw_loop *loop, uint64_t idle_us, void (*wake)(void *conn),
                                tw_shm_reactor **out, char *detail, size_t detail_len)
{
	tw_shm_reactor *r = tw__calloc(1, sizeof(*r));
	if (r) {
		pthread_mutex_init(&r->mu, NULL);
		pthread_mutex_init(&r->cmu, NULL);
		tw__ring_none(&r->ring);
		r->flag = tw__calloc(TW_SHM_MAX_CONNS, sizeof(*r->flag));
		r->pending = tw__calloc(TW_SHM_MAX_CONNS, sizeof(*r->pending));
		r->work = tw__calloc(TW_SHM_MAX_CONNS, sizeof(*r->work));
		r->conns = tw__calloc(TW_SHM_MAX_CONNS, sizeof(*r->conns));
		r->free_slots = tw__calloc(TW_SHM_MAX_CONNS, sizeof(*r->free_slots));
	}
	if (!r || !r->flag || !r->pending || !r->work || !r->conns || !r->free_slots) {
		tw__detail(detail, detail_len, "shm transport: reactor: out of memory");
		tw__shm_reactor_free(r);
		return TW_ERR_NOMEM;
	}
	tw_status_t st = tw__ring_create(&r->ring, TW_RING_REACTOR_CAPACITY, "shm transport: reactor",
	                                 detail, detail_len);
	if (st != TW_OK) {
		tw__shm_reactor_free(r);
		return st;
	}
	r->loop = loop;
	r->idle_us = idle_us ? idle_us : 1000;
	r->wake = wake;
	*out = r;
	return TW_OK;
}

/* ---- the reading thread ---- */

/* Wakes the reading thread, wherever it sleeps, after a change it must
 * see (polling ended, or stop). Any thread. */
static void tw__shm_reactor_wake_thread(tw_shm_reactor *r)
{
	atomic_fetch_add(&r->ended, 1);
	(void)tw__sys_futex_wake_shared((const uint32_t *)&r->ended);
	(void)tw__sys_futex_wake_shared(tw__shm_head_word(&r->ring));
}

/* Ends the reading thread. */
static void tw__shm_reactor_join(tw_shm_reactor *r)
{
	atomic_store(&r->stop, true);
	tw__shm_reactor_wake_thread(r);
	pthread_join(r->thread, NULL);
}

static void tw__shm_reactor_mark(tw_shm_reactor *r, uint32_t token)
{
	uint32_t slot = token / 2;
	if (slot >= TW_SHM_MAX_CONNS || atomic_exchange(&r->flag[slot], 1))
		return;
	pthread_mutex_lock(&r->mu);
	r->pending[r->num_pending++] = slot; /* at most one entry per slot */
	pthread_mutex_unlock(&r->mu);
}

/* Our reactor is written by every peer, so one of them can leave its header
 * broken for all: markers more than capacity apart, the consumer flag
 * taken, the producer flag never released (spec 2.3.1.e, wire.shm_fuzz_ring_*).
 * We are its only consumer, so we mend it (tw__ring_repair) instead of
 * giving up on it; the tokens lost with the repair are made up for by
 * waking every connection, which re-checks both its rings (tokens are never
 * trusted to say which ring changed). Called with cmu held. */
static unsigned tw__shm_reactor_mend(tw_shm_reactor *r, tw_ring_watch *watch)
{
	unsigned mended = tw__ring_repair(&r->ring, 4, watch);
	if (mended)
		atomic_store(&r->rewake, true);
	return mended;
}

/* Takes the next token out of the ring (either thread: cmu lets one in at
 * a time). False when there is none. */
static bool tw__shm_reactor_next(tw_shm_reactor *r, uint32_t *token)
{
	uint8_t le[4];
	bool done = false;
	char d[TW_DETAIL_MAX];
	pthread_mutex_lock(&r->cmu);
	for (int i = 0; i < 2; i++) {
		tw_status_t st = tw__ring_read_all(&r->ring, le, 4, &done, d, sizeof(d));
		if (st == TW_OK && done)
			break;
		done = false;
		/* empty, or broken: mend (cheap when it is only empty), look again */
		if (!tw__shm_reactor_mend(r, NULL))
			break;
	}
	pthread_mutex_unlock(&r->cmu);
	if (!done)
		return false;
	*token = (uint32_t)le[0] | (uint32_t)le[1] << 8 | (uint32_t)le[2] << 16 |
	         (uint32_t)le[3] << 24;
	return true;
}

static void *tw__shm_reactor_main(void *arg)
{
	tw_shm_reactor *r = arg;
	uint64_t bound_us = TW_SHM_REACTOR_BUSY_MIN_US;
	tw__sys_thread_name("tw-shm-reactor");
	for (;;) {
		/* Read the words before looking: a token written after the look
		 * changes the head word, and the end of polling (or stop) `ended`,
		 * so the sleeps below return at once. */
		uint32_t ended = atomic_load(&r->ended);
		if (atomic_load(&r->stop))
			break;
		uint32_t seen = __atomic_load_n(tw__shm_head_word(&r->ring), __ATOMIC_ACQUIRE);
		bool polling = atomic_load(&r->polling);
		uint64_t now = uv_hrtime();
		if (now - r->watch_ns >= TW_SHM_REACTOR_WATCH_NS) {
			/* a producer flag taken at two looks this far apart is held
			 * by no producer at work: released */
			pthread_mutex_lock(&r->cmu);
			tw__shm_reactor_mend(r, &r->watch);
			pthread_mutex_unlock(&r->cmu);
			/* a polling byte set by a stranger would only cost our peers
			 * their futex wakes (we wake on the bound): put it back */
			if (!atomic_load(&r->polling))
				__atomic_store_n(tw__shm_polling_byte(&r->ring), 0, __ATOMIC_SEQ_CST);
			r->watch_ns = now;
		}
		if (polling) {
			/* the loop polls the ring; it wakes us when it stops */
			(void)tw__sys_futex_wait_shared((const uint32_t *)&r->ended, ended,
			                                TW_SHM_REACTOR_WATCH_NS);
			continue;
		}
		bool any = false;
		uint32_t token;
		while (tw__shm_reactor_next(r, &token)) {
			tw__shm_reactor_mark(r, token);
			any = true;
		}
		if (any || atomic_load(&r->rewake))
			uv_async_send(&r->async);
		if (any) {
			bound_us = TW_SHM_REACTOR_BUSY_MIN_US;
			continue;
		}
		(void)tw__sys_futex_wait_shared(tw__shm_head_word(&r->ring), seen, bound_us * 1000);
		bound_us = bound_us * 2 > r->idle_us ? r->idle_us : bound_us * 2;
	}
	return NULL;
}

/* ---- the loop side ---- */

static tw_shm_reactor *tw__shm_poller_reactor(tw_loop_poller *p)
{
	return TW_CONTAINER_OF(p, tw_shm_reactor, poller);
}

void tw__shm_reactor_set_busy_poll(tw_shm_reactor *r, uint64_t us)
{
	r->poller.busy_ns = us * 1000;
}

void tw__shm_reactor_kick(tw_shm_reactor *r)
{
	if (r->thread_started)
		tw__loop_poller_kick(r->loop, &r->poller);
}

/* Loop thread: polling begins; our producers see byte 18 and skip their
 * futex wake. */
static void tw__shm_reactor_polling(tw_loop_poller *p)
{
	tw_shm_reactor *r = tw__shm_poller_reactor(p);
	atomic_store(&r->polling, true);
	__atomic_store_n(tw__shm_polling_byte(&r->ring), 1, __ATOMIC_SEQ_CST);
}

/* Loop thread: polling ends; the reading thread takes over. A producer
 * that still saw the byte set skipped its futex wake: its token is taken
 * by the loop's look after this (loop.h; the reading thread, woken too,
 * may have read the head word before that token and would sleep its bound
 * with the token in the ring). */
static void tw__shm_reactor_unspin(tw_loop_poller *p)
{
	tw_shm_reactor *r = tw__shm_poller_reactor(p);
	atomic_store(&r->polling, false);
	__atomic_store_n(tw__shm_polling_byte(&r->ring), 0, __ATOMIC_SEQ_CST);
	tw__shm_reactor_wake_thread(r);
}

/* A pass of the loop while busy polling: the tokens in the ring wake their
 * connections here, on the loop thread (the reading thread may take some
 * too: the ring's consumer flag lets one of the two in at a time). */
static unsigned tw__shm_reactor_poll(tw_loop_poller *p)
{
	tw_shm_reactor *r = tw__shm_poller_reactor(p);
	unsigned got = 0;
	uint32_t token;
	while (tw__shm_reactor_next(r, &token)) {
		uint32_t slot = token / 2;
		if (slot < r->next_slot && r->conns[slot])
			r->wake(r->conns[slot]);
		got++;
	}
	if (atomic_load(&r->rewake))
		uv_async_send(&r->async); /* wakes every connection, as the thread does */
	return got;
}

static void tw__shm_reactor_on_async(uv_async_t *h)
{
	tw_shm_reactor *r = h->data;
	pthread_mutex_lock(&r->mu);
	uint32_t *batch = r->pending;
	size_t n = r->num_pending;
	r->pending = r->work;
	r->num_pending = 0;
	r->work = batch;
	pthread_mutex_unlock(&r->mu);
	if (n > 0)
		tw__shm_reactor_kick(r);
	for (size_t i = 0; i < n; i++) {
		uint32_t slot = batch[i];
		atomic_store(&r->flag[slot], 0);
		if (r->conns[slot])
			r->wake(r->conns[slot]);
	}
	if (atomic_exchange(&r->rewake, false))
		for (uint32_t slot = 0; slot < r->next_slot; slot++)
			if (r->conns[slot])
				r->wake(r->conns[slot]);
}

static tw_status_t tw__shm_reactor_start(tw_shm_reactor *r, char *detail, size_t detail_len)
{
	if (r->thread_started)
		return TW_OK;
	int rc = uv_async_init(&r->loop->uv, &r->async, tw__shm_reactor_on_async);
	if (rc != 0) {
		tw__detail(detail, detail_len, "shm transport: reactor: uv_async_init: %s",
		           uv_strerror(rc));
		return TW_ERR_SYS;
	}
	r->async.data = r;
	r->poller.poll = tw__shm_reactor_poll;
	r->poller.started = tw__shm_reactor_polling;
	r->poller.stopped = tw__shm_reactor_unspin;
	rc = pthread_create(&r->thread, NULL, tw__shm_reactor_main, r);
	if (rc != 0) {
		char eb[128];
		tw__detail(detail, detail_len, "shm transport: reactor: pthread_create: %s",
		           tw__strerror(rc, eb, sizeof(eb)));
		uv_close((uv_handle_t *)&r->async, NULL);
		return TW_ERR_SYS;
	}
	r->thread_started = true;
	return TW_OK;
}

tw_status_t tw__shm_reactor_add(tw_shm_reactor *r, void *conn, uint32_t tokens[2], char *detail,
                                size_t detail_len)
{
	tw_status_t st = tw__shm_reactor_start(r, detail, detail_len);
	if (st != TW_OK)
		return st;
	uint32_t slot;
	if (r->num_free > 0) {
		slot = r->free_slots[--r->num_free];
	} else if (r->next_slot < TW_SHM_MAX_CONNS) {
		slot = r->next_slot++;
	} else {
		tw__detail(detail, detail_len,
		           "shm transport: out of reactor tokens: %u connections are open in this "
		           "context already",
		           TW_SHM_MAX_CONNS);
		return TW_ERR_NOMEM;
	}
	r->conns[slot] = conn;
	tokens[0] = slot * 2;
	tokens[1] = slot * 2 + 1;
	return TW_OK;
}

void tw__shm_reactor_remove(tw_shm_reactor *r, const uint32_t tokens[2])
{
	uint32_t slot = tokens[0] / 2;
	if (slot >= r->next_slot || !r->conns[slot])
		return;
	r->conns[slot] = NULL;
	r->free_slots[r->num_free++] = slot;
}

void tw__shm_reactor_fds(const tw_shm_reactor *r, int fds[2])
{
	fds[0] = r->ring.header_fd;
	fds[1] = r->ring.data_fd;
}

void tw__shm_reactor_stop(tw_shm_reactor *r)
{
	if (!r || !r->thread_started)
		return;
	tw__shm_reactor_join(r);
	r->thread_started = false;
	uv_close((uv_handle_t *)&r->async, NULL); /* r outlives the loop */
	tw__loop_poller_cancel(r->loop, &r->poller);
	atomic_store(&r->polling, false);
	__atomic_store_n(tw__shm_polling_byte(&r->ring), 0, __ATOMIC_SEQ_CST);
}

void tw__shm_reactor_free(tw_shm_reactor *r)
{
	if (!r)
		return;
	if (r->thread_started) /* a loop that never shut the transport down */
		tw__shm_reactor_join(r);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->cmu);
	tw__ring_unmap(&r->ring);
	tw__free(r->flag);
	tw__free(r->pending);
	tw__free(r->work);
	tw__free(r->conns);
	tw__free(r->free_slots);
	tw__free(r);
}

/* ---- waking a peer ---- */

tw_status_t tw__shm_reactor_notify(tw_ring *peer_reactor, uint32_t token, bool *done_out,
                                   char *detail, size_t detail_len)
{
	uint8_t le[4] = { (uint8_t)token, (uint8_t)(token >> 8), (uint8_t)(token >> 16),
		              (uint8_t)(token >> 24) };
	/* Other producers hold the ring for a few instructions at a time; a
	 * full ring is a reader that stopped, which no amount of trying fixes. */
	for (int i = 0; i < 64; i++) {
		tw_status_t st = tw__ring_write_all(peer_reactor, le, 4, done_out, detail, detail_len);
		if (st != TW_OK)
			return st;
		if (*done_out) {
			/* a peer of ours that polls its ring needs no wake-up (and a
			 * stock peer never sets the byte) */
			/* a read-modify-write: a full barrier between our token and the
			 * look at the byte, against the poller's store then look */
			if (!__atomic_fetch_or(tw__shm_polling_byte(peer_reactor), 0, __ATOMIC_SEQ_CST))
				(void)tw__sys_futex_wake_shared(tw__shm_head_word(peer_reactor));
			return TW_OK;
		}
		uint64_t used;
		if (tw__ring_used(peer_reactor, &used, detail, detail_len) == TW_OK &&
		    used + 4 > peer_reactor->capacity)
			return TW_OK;
		if (i >= 8)
			sched_yield();
	}
	return TW_OK;
}
