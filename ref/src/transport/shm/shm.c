/*
 * shm.c - the shared-memory transport ("shm", spec/wire.md 2.3),
 * wire-compatible with stock TensorPipe's.
 *
 * A connection starts as an abstract-namespace UNIX stream socket (the
 * stream acceptor listens; an empty address lets the kernel pick the name).
 * Right after connect/accept each side sends one message: its two reactor
 * tokens and four descriptors (reactor ring, inbox ring), and reads the
 * peer's (2.3.1). From then on frames go through the rings
 * (transport/ring): we write into the peer's inbox (our "outbox") and read
 * our own inbox, and after moving bytes we write the peer's token into its
 * reactor ring to wake it (reactor.h). The socket carries nothing more; it
 * is watched only to learn that the peer is gone.
 *
 * The end, unlike stock (docs/stock-tensorpipe-findings.md, F22): the
 * peer's exit (EOF on the socket) does not cut the inbox short. Frames the
 * peer wrote before it went stay readable; the end (TW_ERR_EOF) is
 * reported once the inbox is empty, and a hang-up (transport.h) while
 * bytes still wait unread with no read queued.
 *
 * Bounds (tw_conn_opts): connect_timeout_ms bounds the connect and the
 * descriptor exchange. liveness_ms is not used: the kernel closes a dead
 * peer's socket at once, so a peer's death is always seen; a peer that is
 * alive but stopped reading is a slow reader, as it is over tcp.
 *
 * Limits: a frame is under 4 GiB (u32 length) and a packet must fit the
 * 2 MiB inbox with its length (2.3.3.b, 2.3.3.d); the pipe checks both
 * before it sends (tw_transport_limits), and the ring writer refuses again.
 *
 * This file must not know about nop objects, packets or pipes.
 */
#define _GNU_SOURCE
#include "transport/shm/shm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <uv.h>

#include "platform/error.h"
#include "platform/identity.h"
#include "platform/loop.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "transport/ring/ring.h"
#include "transport/ring/ring_conn.h"
#include "transport/conn_core.h"
#include "transport/shm/reactor.h"
#include "transport/stream/acceptor.h"
#include "transport/stream/listener.h"

#define SHM_WHO "shm transport"
#define SHM_ADDR_MAX (TW_ABSTRACT_NAME_MAX + 32)
#define SHM_HELLO_LEN 8
#define SHM_HELLO_FDS 4
#define SHM_CONNECT_RETRY_MS 10 /* a full backlog (EAGAIN): try again */
#define SHM_NOTIFY_RETRY_MS 1   /* a peer's reactor ring busy or full */
#define SHM_BROKEN_REACTOR_MS 2000 /* how long a peer's reactor may stay broken */

typedef struct shm_conn shm_conn;
typedef struct shm_transport shm_transport;

struct shm_conn {
	tw_conn_core core; /* first; phase SETUP: connecting, then the exchange */
	shm_transport *t;
	int fd;
	uv_poll_t poll;
	int poll_events;
	uv_timer_t timer; /* connect retries and deadline; then notify retries */
	bool sock_connected; /* the socket is connected: the exchange runs */
	/* the rings */
	tw_ring inbox;        /* ours: the peer writes, we read */
	tw_ring outbox;       /* the peer's inbox */
	tw_ring peer_reactor; /* the peer's wake-up ring */
	uint32_t tokens[2];   /* ours, in our reactor */
	bool have_tokens;
	uint32_t peer_tokens[2]; /* the peer's: [0] its inbox has data, [1] its outbox has room */
	bool notify_pending[2];
	uint64_t reactor_broken_since; /* uv_now when the peer's reactor was found broken, or 0 */
	/* the exchange */
	bool hello_sent;
	bool peer_rings;          /* the peer's inbox and reactor are loaded */
	/* closed with its hello not yet in the peer's inbox (TW_WRITE_HELLO):
	 * a private copy of the frame's body */
	uint8_t *linger;
	size_t linger_len;
	struct sockaddr_un addr; /* connect: where to (retried on EAGAIN) */
	socklen_t addr_len;
	uint64_t deadline;       /* uv_now() bound of connect + exchange, 0: none */
	/* the end */
	bool peer_gone;          /* the socket said so; the inbox may still hold bytes */
	tw_status_t gone_status;
	char gone_detail[TW_DETAIL_MAX];
	tw_conn_opts opts;
	bool connected;
};

struct shm_transport {
	tw_transport base;
	tw_shm_reactor *reactor;
	char descriptor[TW_IDENTITY_MAX];
};

static const tw_conn_ops shm_conn_ops;

static void shm_drive(shm_conn *c);
static void shm_update_poll(shm_conn *c);
static int shm_exchange_send(shm_conn *c);
static int shm_exchange_recv(shm_conn *c);

/* ---- connection lifetime ------------------------------------------------ */

static void shm_free_conn(tw_conn_core *core)
{
	shm_conn *c = (shm_conn *)core;
	tw__ring_unmap(&c->inbox);
	tw__ring_unmap(&c->outbox);
	tw__ring_unmap(&c->peer_reactor);
	if (c->fd >= 0)
		tw__sys_close(c->fd);
	tw__free(c->linger);
	tw__free(c);
}

static void shm_forget_tokens(shm_conn *c)
{
	if (!c->have_tokens)
		return;
	c->have_tokens = false;
	tw__shm_reactor_remove(c->t->reactor, c->tokens);
}

static void shm_failed(tw_conn_core *core)
{
	shm_conn *c = (shm_conn *)core;
	shm_forget_tokens(c);
	uv_timer_stop(&c->timer);
	shm_update_poll(c);
}

static const tw_conn_core_ops shm_core_ops = { tw__ring_op_free, shm_free_conn, shm_failed, NULL };

#define shm_fail(c, ...) tw__conn_fail(&(c)->core, __VA_ARGS__)

static void shm_fail_errno(shm_conn *c, const char *what, int err)
{
	char eb[128];
	tw__strerror(err, eb, sizeof(eb));
	tw_status_t st = err == ECONNRESET || err == EPIPE ? TW_ERR_CONNRESET
	                 : err == EMSGSIZE                  ? TW_ERR_PROTO
	                                                    : TW_ERR_SYS;
	shm_fail(c, st, SHM_WHO ": %s %s: %s", what, c->core.peer, eb);
}

static void shm_on_handle_closed(uv_handle_t *h)
{
	tw__conn_core_unref(h->data);
}

static void shm_close_handles(shm_conn *c)
{
	if (c->fd >= 0 && c->sock_connected)
		tw__sys_shutdown_write(c->fd); /* the end is out now (transport.h) */
	uv_poll_stop(&c->poll);
	c->poll_events = 0;
	uv_close((uv_handle_t *)&c->poll, shm_on_handle_closed);
	uv_close((uv_handle_t *)&c->timer, shm_on_handle_closed);
}

/* ---- lingering for the hello (TW_WRITE_HELLO, transport.h) ---------------- */

/* A connection closed while its hello waited for the exchange (the set-up
 * runs before any frame) stays, hidden from its owner, until the exchange
 * is over and the frame is in the peer's inbox with its token written, or
 * for TW_HELLO_LINGER_MS at most: a stock listener fails its next pending
 * accept when a connection ends before its hello (spec/wire.md 3.3.g). It
 * keeps the poll and timer handles and its own rings; its tokens in our
 * reactor are already given back (a token of the peer's for them wakes
 * nothing). A socket not yet connected (a full backlog) is not waited for. */

static void shm_linger_end(shm_conn *c)
{
	tw__free(c->linger);
	c->linger = NULL;
	shm_close_handles(c);
}

static void shm_on_linger_poll(uv_poll_t *h, int status, int events);

/* One step; ends the linger once the frame is out or cannot get out. */
static void shm_linger_drive(shm_conn *c)
{
	int r = c->hello_sent ? 1 : shm_exchange_send(c);
	if (r == 1 && !c->peer_rings)
		r = shm_exchange_recv(c);
	if (r == 0) {
		int want = c->hello_sent ? UV_READABLE : UV_WRITABLE;
		c->poll_events = want;
		if (uv_poll_start(&c->poll, want, shm_on_linger_poll) != 0)
			shm_linger_end(c);
		return;
	}
	if (r == 1) {
		/* our first frame into an inbox only we write: all of it or, with
		 * a hostile peer's broken ring, nothing */
		tw_iov iov = { c->linger, c->linger_len };
		tw_ring_writer w;
		uint64_t moved;
		bool woken;
		char d[TW_DETAIL_MAX];
		if (tw__ring_writer_init(&w, &iov, 1, TW_WRITE_OBJECT, TW_RING_INBOX_CAPACITY, SHM_WHO,
		                         d, sizeof(d)) == TW_OK &&
		    tw__ring_write_some(&c->outbox, &w, 0, &moved, d, sizeof(d)) == TW_OK &&
		    tw__ring_writer_done(&w)) {
			/* best effort: with its reactor busy or broken, the peer finds
			 * the frame the next time it looks at this inbox */
			tw_status_t st = tw__shm_reactor_notify(&c->peer_reactor, c->peer_tokens[0], &woken,
			                                        d, sizeof(d));
			(void)st;
		}
	}
	shm_linger_end(c);
}

static void shm_on_linger_poll(uv_poll_t *h, int status, int events)
{
	(void)events;
	shm_conn *c = h->data;
	if (status < 0)
		shm_linger_end(c);
	else
		shm_linger_drive(c);
}

static void shm_on_linger_timer(uv_timer_t *h)
{
	shm_linger_end(h->data);
}

/* Copies the hello at the head of the write queue if none of it is in the
 * peer's inbox yet; false if there is none (or no memory: then the
 * connection closes as any other). */
static bool shm_linger_take(shm_conn *c)
{
	tw_ring_op *op = (tw_ring_op *)c->core.wq_head;
	if (!op || !op->hello || op->w.length_done || c->fd < 0 || !c->sock_connected ||
	    (c->core.phase != TW_CONN_SETUP && c->core.phase != TW_CONN_OPEN))
		return false;
	size_t len = (size_t)op->w.len, k = 0;
	if (!(c->linger = tw__malloc(len ? len : 1)))
		return false;
	for (size_t i = 0; i < op->w.num_iov; i++) {
		memcpy(c->linger + k, op->w.iov[i].base, (size_t)op->w.iov[i].len);
		k += (size_t)op->w.iov[i].len;
	}
	c->linger_len = len;
	return true;
}

static void shm_conn_close(tw_conn *base)
{
	shm_conn *c = (shm_conn *)base;
	bool linger = shm_linger_take(c); /* only while SETUP or OPEN */
	if (!tw__conn_close_ops(&c->core))
		return;
	shm_forget_tokens(c);
	if (linger) {
		uv_poll_stop(&c->poll);
		uv_timer_stop(&c->timer);
		uv_timer_start(&c->timer, shm_on_linger_timer, TW_HELLO_LINGER_MS, 0);
		shm_linger_drive(c);
		return;
	}
	shm_close_handles(c);
}

static const char *shm_conn_peer(tw_conn *base)
{
	return ((shm_conn *)base)->core.peer;
}

static bool shm_conn_has_unread(tw_conn *base)
{
	shm_conn *c = (shm_conn *)base;
	return tw__ring_conn_unread(&c->core, &c->inbox) > 0;
}

static bool shm_conn_peer_left(tw_conn *base)
{
	shm_conn *c = (shm_conn *)base;
	return tw__conn_peer_left(&c->core, c->fd);
}

static bool shm_conn_was_connected(tw_conn *base)
{
	return ((shm_conn *)base)->connected;
}

/* ---- waking the peer ------------------------------------------------------ */

static void shm_on_timer(uv_timer_t *h);

/* Writes the peer's token `which` (0: its inbox has data, 1: its outbox has
 * room) into its reactor; a busy or full reactor is retried on the timer. */
static void shm_notify(shm_conn *c, int which)
{
	c->notify_pending[which] = true;
	for (int i = 0; i < 2 && c->core.phase == TW_CONN_OPEN; i++) {
		if (!c->notify_pending[i])
			continue;
		bool done = false;
		char d[TW_DETAIL_MAX];
		if (tw__shm_reactor_notify(&c->peer_reactor, c->peer_tokens[i], &done, d, sizeof(d)) !=
		    TW_OK) {
			/* The peer's reactor is every peer's to write: another process
			 * may have broken it, and its owner, if it is tensorwire, mends
			 * it (reactor.c). Retried like a busy one, for a bound. */
			uint64_t now = uv_now(&c->t->base.loop->uv);
			if (!c->reactor_broken_since)
				c->reactor_broken_since = now ? now : 1;
			if (now - c->reactor_broken_since >= SHM_BROKEN_REACTOR_MS) {
				shm_fail(c, TW_ERR_PROTO, "%s (the reactor ring of peer %s, for %d ms)", d,
				         c->core.peer, SHM_BROKEN_REACTOR_MS);
				return;
			}
		} else {
			c->reactor_broken_since = 0;
		}
		if (done) {
			c->notify_pending[i] = false;
			tw__shm_reactor_kick(c->t->reactor); /* the answer is polled for */
		}
		else if (!uv_is_active((uv_handle_t *)&c->timer))
			uv_timer_start(&c->timer, shm_on_timer, SHM_NOTIFY_RETRY_MS, 0);
	}
}

/* ---- moving frames ---------------------------------------------------------- */

static void shm_drive_writes(shm_conn *c)
{
	bool moved_any = false;
	while (c->core.phase == TW_CONN_OPEN && c->core.wq_head) {
		tw_ring_op *op = (tw_ring_op *)c->core.wq_head;
		uint64_t moved = 0;
		char d[TW_DETAIL_MAX];
		if (tw__ring_write_some(&c->outbox, &op->w, 0, &moved, d, sizeof(d)) != TW_OK) {
			shm_fail(c, TW_ERR_PROTO, SHM_WHO ": %s (the inbox of peer %s)", d,
			         c->core.peer);
			return;
		}
		moved_any |= moved > 0;
		if (!tw__ring_writer_done(&op->w))
			break;
		tw__conn_op_done(&c->core, true);
	}
	if (moved_any)
		shm_notify(c, 0);
}

static void shm_drive_reads(shm_conn *c)
{
	if (tw__ring_conn_drive_reads(&c->core, &c->inbox))
		shm_notify(c, 1);
}

/* The peer is gone: what it wrote stays readable (the file comment); the
 * end comes once nothing is left to read, or at once for a write that
 * waits for room the peer will never free. */
static void shm_drive_end(shm_conn *c)
{
	if (c->peer_gone)
		tw__ring_conn_drive_end(&c->core, &c->inbox, c->gone_status, c->gone_detail,
		                        "a write waited for room in its inbox");
}

/* ---- the descriptor exchange (2.3.1) -------------------------------------- */

/* 1: sent; 0: not yet (try again); -1: the connection failed. */
static int shm_exchange_send(shm_conn *c)
{
	uint8_t hello[SHM_HELLO_LEN];
	for (int i = 0; i < 4; i++) {
		hello[i] = (uint8_t)(c->tokens[0] >> (8 * i));
		hello[4 + i] = (uint8_t)(c->tokens[1] >> (8 * i));
	}
	int fds[SHM_HELLO_FDS];
	tw__shm_reactor_fds(c->t->reactor, fds);
	fds[2] = c->inbox.header_fd;
	fds[3] = c->inbox.data_fd;
	ssize_t n = tw__sys_send_fds(c->fd, hello, sizeof(hello), fds, SHM_HELLO_FDS);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n < 0) {
		shm_fail_errno(c, "sending descriptors to", errno);
		return -1;
	}
	if (n != SHM_HELLO_LEN) {
		shm_fail(c, TW_ERR_SYS, SHM_WHO ": sending descriptors to %s: short send of %zd bytes",
		         c->core.peer, n);
		return -1;
	}
	c->hello_sent = true;
	return 1;
}

/* 1: the peer's rings are loaded (peer_rings); 0: not yet; -1: the
 * connection failed. */
static int shm_exchange_recv(shm_conn *c)
{
	/* One byte more than expected, so that a longer message is seen. */
	uint8_t hello[SHM_HELLO_LEN + 1];
	int fds[SHM_HELLO_FDS];
	int nfds = 0;
	ssize_t n = tw__sys_recv_fds(c->fd, hello, sizeof(hello), fds, SHM_HELLO_FDS, &nfds);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (n < 0) {
		if (errno == EMSGSIZE)
			shm_fail(c, TW_ERR_PROTO,
			         SHM_WHO ": peer %s sent more than %d descriptors, or this process is out "
			         "of descriptors (spec 2.3.1.b)",
			         c->core.peer, SHM_HELLO_FDS);
		else
			shm_fail_errno(c, "receiving descriptors from", errno);
		return -1;
	}
	if (n == 0) {
		for (int i = 0; i < nfds; i++)
			tw__sys_close(fds[i]);
		shm_fail(c, TW_ERR_EOF,
		         SHM_WHO ": connection closed by peer %s before it sent its descriptors",
		         c->core.peer);
		return -1;
	}
	if (n != SHM_HELLO_LEN || nfds != SHM_HELLO_FDS) {
		for (int i = 0; i < nfds; i++)
			tw__sys_close(fds[i]);
		shm_fail(c, TW_ERR_PROTO,
		         SHM_WHO ": peer %s sent %zd bytes and %d descriptors where %d and %d were "
		         "expected (spec 2.3.1.b)",
		         c->core.peer, n, nfds, SHM_HELLO_LEN, SHM_HELLO_FDS);
		return -1;
	}
	for (int i = 0; i < 2; i++)
		c->peer_tokens[i] = (uint32_t)hello[4 * i] | (uint32_t)hello[4 * i + 1] << 8 |
		                    (uint32_t)hello[4 * i + 2] << 16 | (uint32_t)hello[4 * i + 3] << 24;
	char d[TW_DETAIL_MAX];
	tw_status_t st = tw__ring_load(&c->peer_reactor, fds[0], fds[1], 0,
	                               SHM_WHO ": the peer's reactor ring", d, sizeof(d));
	if (st != TW_OK) {
		tw__sys_close(fds[2]);
		tw__sys_close(fds[3]);
		shm_fail(c, st, "%s (peer %s)", d, c->core.peer);
		return -1;
	}
	st = tw__ring_load(&c->outbox, fds[2], fds[3], TW_RING_INBOX_CAPACITY,
	                   SHM_WHO ": the peer's inbox", d, sizeof(d));
	if (st != TW_OK) {
		shm_fail(c, st, "%s (peer %s)", d, c->core.peer);
		return -1;
	}
	c->peer_rings = true;
	return 1;
}

static void shm_try_connect(shm_conn *c)
{
	if (tw__sys_connect(c->fd, (struct sockaddr *)&c->addr, c->addr_len) == 0) {
		c->sock_connected = true;
		return;
	}
	int err = errno;
	if (err == EAGAIN || err == EINTR || err == EINPROGRESS) {
		/* The listener's backlog is full (a UNIX socket does not queue
		 * connects in progress): try again shortly, within the bound. */
		uint64_t now = uv_now(&c->t->base.loop->uv);
		uint64_t wait = SHM_CONNECT_RETRY_MS;
		if (c->deadline && c->deadline - now < wait)
			wait = c->deadline - now;
		uv_timer_start(&c->timer, shm_on_timer, wait, 0);
		return;
	}
	shm_fail_errno(c, "connect", err);
}

/* ---- driving ------------------------------------------------------------------ */

static void shm_drive(shm_conn *c)
{
	bool exchange = c->core.phase == TW_CONN_SETUP && c->sock_connected;
	if (exchange && !c->hello_sent)
		(void)shm_exchange_send(c);
	if (exchange && c->core.phase == TW_CONN_SETUP && c->hello_sent &&
	    shm_exchange_recv(c) == 1) {
		c->core.phase = TW_CONN_OPEN;
		c->connected = true;
		uv_timer_stop(&c->timer);
	}
	if (c->core.phase == TW_CONN_OPEN) {
		shm_drive_writes(c);
		shm_drive_reads(c);
		shm_drive_end(c);
	}
	shm_update_poll(c);
}

static void shm_on_timer(uv_timer_t *h)
{
	shm_conn *c = h->data;
	if (c->core.phase == TW_CONN_SETUP) {
		if (c->deadline && uv_now(&c->t->base.loop->uv) >= c->deadline) {
			shm_fail(c, TW_ERR_TIMEDOUT,
			         SHM_WHO ": connect %s: not connected within the connect timeout of %llu "
			         "ms",
			         c->core.peer, (unsigned long long)c->opts.connect_timeout_ms);
			return;
		}
		if (!c->sock_connected)
			shm_try_connect(c);
		/* The deadline bounds the exchange too: re-armed until it is over. */
		if (c->core.phase == TW_CONN_SETUP && c->deadline &&
		    !uv_is_active((uv_handle_t *)&c->timer))
			uv_timer_start(&c->timer, shm_on_timer,
			               c->deadline - uv_now(&c->t->base.loop->uv), 0);
		shm_drive(c);
		return;
	}
	if (c->core.phase == TW_CONN_OPEN) {
		for (int i = 0; i < 2; i++)
			if (c->notify_pending[i])
				shm_notify(c, i);
		shm_drive(c);
	}
}

/* The reactor saw one of our tokens. */
static void shm_wake(void *conn)
{
	shm_drive(conn);
}

static void shm_on_poll(uv_poll_t *h, int status, int events);

static void shm_update_poll(shm_conn *c)
{
	if (c->core.phase == TW_CONN_CLOSED)
		return;
	int want = 0;
	if (c->core.phase == TW_CONN_SETUP && c->sock_connected)
		want = c->hello_sent ? UV_READABLE : UV_WRITABLE;
	else if (c->core.phase == TW_CONN_OPEN && !c->peer_gone)
		want = UV_READABLE; /* only the end can come this way (2.3.1.c) */
	tw__conn_poll(&c->core, &c->poll, &c->poll_events, want, shm_on_poll);
}

/* Readable after the exchange: the peer is gone (2.3.1.c). Bytes on the
 * socket are a protocol error, and fail the connection at once. */
static void shm_notice_end(shm_conn *c)
{
	ssize_t r = tw__sys_peek(c->fd);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (r > 0) {
		shm_fail(c, TW_ERR_PROTO,
		         SHM_WHO ": peer %s sent bytes on its socket after the descriptor exchange "
		         "(spec 2.3.1.c)",
		         c->core.peer);
		return;
	}
	c->peer_gone = true;
	if (r == 0) {
		c->gone_status = TW_ERR_EOF;
		tw__detail(c->gone_detail, sizeof(c->gone_detail),
		           SHM_WHO ": connection closed by peer %s", c->core.peer);
	} else {
		char eb[128];
		c->gone_status = errno == ECONNRESET ? TW_ERR_CONNRESET : TW_ERR_SYS;
		tw__detail(c->gone_detail, sizeof(c->gone_detail),
		           SHM_WHO ": connection to %s: recv (its socket): %s", c->core.peer,
		           tw__strerror(errno, eb, sizeof(eb)));
	}
}

static void shm_on_poll(uv_poll_t *h, int status, int events)
{
	shm_conn *c = h->data;
	(void)events;
	if (status < 0) {
		/* libuv reports POLLERR as UV_EBADF: the socket's pending error
		 * says what happened (as tcp.c) */
		c->poll_events = 0;
		int err = 0;
		socklen_t len = sizeof(err);
		if (tw__sys_getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
			char eb[128];
			shm_fail(c, err == ECONNRESET || err == EPIPE ? TW_ERR_CONNRESET : TW_ERR_SYS,
			         SHM_WHO ": connection to %s (its socket): %s", c->core.peer,
			         tw__strerror(err, eb, sizeof(eb)));
		} else {
			shm_fail(c, TW_ERR_SYS, SHM_WHO ": poll on connection to %s: %s", c->core.peer,
			         uv_strerror(status));
		}
		return;
	}
	if (c->core.phase == TW_CONN_OPEN)
		shm_notice_end(c);
	shm_drive(c);
}

/* ---- operations ---------------------------------------------------------------- */

static tw_status_t shm_queue(shm_conn *c, tw_ring_op *op, tw_conn_write_cb wcb,
                             tw_conn_read_cb rcb, void *arg)
{
	if (!op)
		return TW_ERR_NOMEM;
	op->op.wcb = wcb;
	op->op.rcb = rcb;
	op->op.arg = arg;
	if (tw__conn_queue(&c->core, &op->op, wcb != NULL))
		shm_drive(c);
	return TW_OK;
}

static tw_status_t shm_conn_write(tw_conn *base, const tw_iov *iov, size_t num_iov, unsigned flags,
                                  tw_conn_write_cb cb, void *arg)
{
	shm_conn *c = (shm_conn *)base;
	tw_status_t st = TW_OK;
	char d[TW_DETAIL_MAX];
	tw_ring_op *op = tw__ring_op_write(iov, num_iov, flags, TW_RING_INBOX_CAPACITY, SHM_WHO,
	                                   &st, d, sizeof(d));
	if (op && st != TW_OK) /* the pipe checks the limits first: this is a bug */
		shm_fail(c, st, "%s (to %s)", d, c->core.peer);
	return shm_queue(c, op, cb, NULL, arg);
}

static tw_status_t shm_conn_read_into(tw_conn *base, void *buf, uint64_t len, tw_conn_read_cb cb,
                                      void *arg)
{
	return shm_queue((shm_conn *)base, tw__ring_op_read_into(buf, len), NULL, cb, arg);
}

static tw_status_t shm_conn_read_alloc(tw_conn *base, uint64_t max_len, tw_conn_read_cb cb,
                                       void *arg)
{
	return shm_queue((shm_conn *)base, tw__ring_op_read_alloc(max_len), NULL, cb, arg);
}

static tw_status_t shm_conn_watch_end(tw_conn *base, tw_conn_end_cb cb, tw_conn_hangup_cb hup_cb,
                                      void *arg)
{
	shm_conn *c = (shm_conn *)base;
	if (tw__conn_watch_arm(&c->core, cb, hup_cb, arg))
		shm_drive_end(c); /* reports are deferred: nothing runs in the caller's stack */
	return TW_OK;
}

/* ---- making connections ---------------------------------------------------------- */

/* A new connection on socket fd, or NULL with *st_out saying why (NOMEM,
 * or SYS for a system call that failed, such as a process out of
 * descriptors: the detail names the call). */
static shm_conn *shm_conn_new(shm_transport *t, int fd, bool accepted, const char *peer,
                              const tw_conn_opts *opts, tw_status_t *st_out, char *detail,
                              size_t detail_len)
{
	*st_out = TW_ERR_NOMEM;
	shm_conn *c = tw__calloc(1, sizeof(*c));
	if (!c) {
		tw__detail(detail, detail_len, SHM_WHO ": connection to %s: out of memory", peer);
		tw__sys_close(fd);
		return NULL;
	}
	/* two references: the poll and the timer handles */
	tw__conn_core_init(&c->core, &shm_conn_ops, &shm_core_ops, &t->base, SHM_WHO, peer,
	                   TW_CONN_SETUP, 2);
	c->t = t;
	c->fd = fd;
	tw__ring_none(&c->inbox);
	tw__ring_none(&c->outbox);
	tw__ring_none(&c->peer_reactor);
	c->opts = *opts;
	c->sock_connected = accepted;
	c->connected = accepted; /* accepted: always (transport.h) */
	tw_status_t st = tw__shm_reactor_add(t->reactor, c, c->tokens, detail, detail_len);
	if (st == TW_OK) {
		c->have_tokens = true;
		st = tw__ring_create(&c->inbox, TW_RING_INBOX_CAPACITY, SHM_WHO ": inbox", detail,
		                     detail_len);
	}
	int rc = st == TW_OK ? uv_poll_init_socket(&t->base.loop->uv, &c->poll, fd) : 0;
	if (rc != 0) {
		tw__detail(detail, detail_len, SHM_WHO ": uv_poll_init_socket for %s: %s", peer,
		           uv_strerror(rc));
		st = TW_ERR_SYS;
	}
	if (st != TW_OK) {
		shm_forget_tokens(c);
		tw__ring_unmap(&c->inbox);
		tw__sys_close(fd);
		tw__free(c);
		*st_out = st;
		return NULL;
	}
	c->poll.data = c;
	uv_timer_init(&t->base.loop->uv, &c->timer);
	c->timer.data = c;
	if (opts->connect_timeout_ms) {
		c->deadline = tw__loop_deadline(t->base.loop, opts->connect_timeout_ms);
		uv_timer_start(&c->timer, shm_on_timer, opts->connect_timeout_ms, 0);
	}
	return c;
}

/* "shm://name" carries "name"; the kernel's names and ours are bytes with
 * no NUL, at most TW_ABSTRACT_NAME_MAX of them. */
static tw_status_t shm_check_address(const char *address, bool for_listen, char *detail,
                                     size_t detail_len)
{
	size_t len = strlen(address);
	if (len > TW_ABSTRACT_NAME_MAX) {
		tw__detail(detail, detail_len,
		           SHM_WHO ": address '%.32s...' is %zu bytes long; an abstract socket name "
		           "holds at most %d",
		           address, len, TW_ABSTRACT_NAME_MAX);
		return TW_ERR_INVAL;
	}
	if (!for_listen && len == 0) {
		tw__detail(detail, detail_len,
		           SHM_WHO ": cannot connect to an empty address (only a listener may leave "
		           "the name to the kernel)");
		return TW_ERR_INVAL;
	}
	return TW_OK;
}

static tw_status_t shm_connect(tw_transport *base, const char *address, const tw_conn_opts *opts,
                               tw_conn **out, char *detail, size_t detail_len)
{
	shm_transport *t = (shm_transport *)base;
	tw_status_t st = shm_check_address(address, false, detail, detail_len);
	if (st != TW_OK)
		return st;
	char eb[128];
	int fd = tw__sys_socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0) {
		tw__detail(detail, detail_len, SHM_WHO ": socket for %s: %s", address,
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	shm_conn *c = shm_conn_new(t, fd, false, address, opts, &st, detail, detail_len);
	if (!c)
		return st;
	(void)tw__sockaddr_abstract(&c->addr, &c->addr_len, address, strlen(address));
	shm_try_connect(c);
	shm_drive(c);
	*out = &c->core.base;
	return TW_OK;
}

/* ---- listener ------------------------------------------------------------------- */

static void shm_format_peer(const struct sockaddr *addr, char *out, size_t out_len)
{
	(void)addr; /* a connecting UNIX socket has no name */
	snprintf(out, out_len, "a local process");
}

static tw_status_t shm_make_conn(tw_stream_listener *l, int fd, const struct sockaddr *peer_addr,
                                 tw_conn **out, char *detail, size_t detail_len)
{
	(void)peer_addr; /* a connecting UNIX socket has no name */
	char peer[SHM_ADDR_MAX];
	snprintf(peer, sizeof(peer), "a peer of %s", l->address);
	tw_status_t st;
	shm_conn *c = shm_conn_new((shm_transport *)l->base.transport, fd, true, peer, &l->opts,
	                           &st, detail, detail_len);
	if (!c)
		return st;
	shm_drive(c);
	*out = &c->core.base;
	return TW_OK;
}

static tw_status_t shm_listen(tw_transport *base, const char *address, const tw_conn_opts *opts,
                              tw_tlistener_accept_cb cb, void *arg, tw_tlistener **out,
                              char *detail, size_t detail_len)
{
	tw_status_t st = shm_check_address(address, true, detail, detail_len);
	if (st != TW_OK)
		return st;
	struct sockaddr_un sa;
	socklen_t sl;
	(void)tw__sockaddr_abstract(&sa, &sl, address, strlen(address));
	if (!address[0]) /* autobind: the kernel picks a name (2.3.1) */
		sl = sizeof(sa_family_t);
	tw_stream_listener *l = tw__stream_listener_new(base, SHM_WHO, opts, shm_make_conn, cb, arg,
	                                                detail, detail_len);
	if (!l)
		return TW_ERR_NOMEM;
	struct sockaddr_storage bound;
	char label[TW_STREAM_ADDR_MAX + 3];
	snprintf(label, sizeof(label), "'%s'", address);
	st = tw__acceptor_open(base->loop, SHM_WHO, label, (struct sockaddr *)&sa, sl, false,
	                       shm_format_peer, tw__stream_listener_on_accept, l, &l->acc, &bound, detail,
	                       detail_len);
	if (st != TW_OK) {
		tw__stream_listener_free(l);
		return st;
	}
	const struct sockaddr_un *b = (const struct sockaddr_un *)&bound;
	snprintf(l->address, sizeof(l->address), "%.*s", TW_ABSTRACT_NAME_MAX,
	         b->sun_path + 1);
	snprintf(label, sizeof(label), "'%s'", l->address);
	tw__acceptor_set_label(l->acc, label);
	*out = &l->base;
	return TW_OK;
}

/* ---- transport ------------------------------------------------------------------ */

static tw_status_t shm_create(tw_loop *loop, const char *options, tw_transport **out, char *detail,
                              size_t detail_len)
{
	/* idle_us: how long the reactor sleeps at most when no peer of ours
	 * woke it (reactor.h): the latency a stock peer may add. */
	/* busy_poll_us: how long the loop thread polls the reactor ring itself
	 * after the last token or write instead of sleeping (reactor.h); 0: off,
	 * every wake-up goes through the reading thread. */
	typedef struct shm_opts {
		uint64_t idle_us, busy_poll_us;
	} shm_opts;
	static const tw_option table[] = {
		{ "idle_us", TW_OPT_U64, offsetof(shm_opts, idle_us), 0, 1, 1000000 },
		{ "busy_poll_us", TW_OPT_U64, offsetof(shm_opts, busy_poll_us), 0, 0, 10000000 },
	};
	shm_opts o = { 1000, TW_LOOP_BUSY_DEFAULT_US };
	tw_status_t st =
	    tw__options_parse(SHM_WHO, options, table, 2, &o, NULL, 0, detail, detail_len);
	if (st != TW_OK)
		return st;
	shm_transport *t = tw__calloc(1, sizeof(*t));
	if (!t) {
		tw__detail(detail, detail_len, SHM_WHO ": out of memory");
		return TW_ERR_NOMEM;
	}
	char d[TW_DETAIL_MAX];
	st = tw__identity_shm(t->descriptor, sizeof(t->descriptor), d, sizeof(d));
	if (st == TW_OK)
		st = tw__shm_reactor_new(loop, o.idle_us, shm_wake, &t->reactor, d, sizeof(d));
	if (st != TW_OK) {
		/* Not viable here (no shared memory, no /proc): say why, and let
		 * the context go on with its other transports. */
		tw__detail(detail, detail_len, "%s", d);
		tw__free(t);
		return st == TW_ERR_NOMEM ? st : TW_ERR_UNSUPPORTED;
	}
	tw__shm_reactor_set_busy_poll(t->reactor, o.busy_poll_us);
	t->base.ops = &tw__shm_transport_ops;
	t->base.loop = loop;
	*out = &t->base;
	return TW_OK;
}

static void shm_limits(tw_transport *base, tw_transport_limits *out)
{
	(void)base;
	out->max_frame = TW_RING_FRAME_MAX;
	out->max_packet = TW_RING_INBOX_CAPACITY - 4;
}

static const char *shm_domain_descriptor(tw_transport *base)
{
	return ((shm_transport *)base)->descriptor;
}

static void shm_shutdown(tw_transport *base)
{
	tw__shm_reactor_stop(((shm_transport *)base)->reactor);
}

static void shm_destroy(tw_transport *base)
{
	shm_transport *t = (shm_transport *)base;
	tw__shm_reactor_free(t->reactor);
	tw__free(t);
}

/* The socket under the connection: the kernel knows who holds its other
 * end (transport.h). */
static int shm_conn_peer_of(tw_conn *base, pid_t pid, char *why, size_t why_len)
{
	return tw__sys_socket_peer_of(((shm_conn *)base)->fd, pid, why, why_len);
}

static const tw_conn_ops shm_conn_ops = {
	.write = shm_conn_write,
	.read_into = shm_conn_read_into,
	.read_alloc = shm_conn_read_alloc,
	.watch_end = shm_conn_watch_end,
	.close = shm_conn_close,
	.peer = shm_conn_peer,
	.has_unread = shm_conn_has_unread,
	.was_connected = shm_conn_was_connected,
	.peer_of = shm_conn_peer_of,
	.peer_left = shm_conn_peer_left,
};

const tw_transport_ops tw__shm_transport_ops = {
	.kind = "shm",
	.schemes = NULL,
	.create = shm_create,
	.limits = shm_limits,
	.domain_descriptor = shm_domain_descriptor,
	.can_communicate = NULL,
	.check_address = shm_check_address,
	.answer_address = NULL,
	.listen = shm_listen,
	.connect = shm_connect,
	.shutdown = shm_shutdown,
	.destroy = shm_destroy,
};
