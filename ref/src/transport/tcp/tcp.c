/*
 * tcp.c - the TCP transport, stock TensorPipe's "uv" (spec/wire.md 2.2):
 * every frame is u64le(length) followed by the bytes, TCP_NODELAY on both
 * ends, domain descriptor "uv:*".
 *
 * Bounds (tw_conn_opts): a connect is bounded by TCP_USER_TIMEOUT set to the
 * connect timeout before connect(2) (the kernel gives up on SYNs nobody
 * answers); once connected, and on every accepted connection, the liveness
 * bound is TCP_USER_TIMEOUT (unacknowledged data, a receive window that
 * stays closed) plus keepalive probes from a third of it on (an idle
 * connection whose peer's kernel is gone). Either failure is ETIMEDOUT,
 * reported as TW_ERR_TIMEDOUT naming the bound. These are socket options:
 * the peer, stock or ours, is not affected. Both are cleared just before
 * the descriptor is closed: with no operation left to bound, what the
 * kernel still holds for the peer is delivered however long the peer's
 * application takes to make room for it.
 *
 * Accepting is the stream acceptor's (transport/stream/acceptor.h): a
 * backlog of 4096, the queue drained on every wake-up, and out of
 * descriptors a short back-off, then each waiting connection reset at once
 * so its client learns in a moment; the error observer hears each one.
 *
 * Sockets are non-blocking and watched with a uv_poll_t; the syscalls
 * themselves go through platform.h so fault points can shorten or fail them.
 * Reads are demand-driven: the socket is only read while a read is queued.
 * Small frames are read through a 64 KiB buffer; the body of a large frame is
 * read straight into the caller's buffer (readv of {rest of frame, buffer})
 * so a tensor is never held twice. Writes gather the queued frames into one
 * writev and loop over short writes, so frames beyond 4 GiB work (Linux
 * moves at most 0x7ffff000 bytes per call).
 *
 * The end watch (transport.h): while no read is queued and the read buffer
 * is empty, the socket is polled for readability and then peeked at (1 byte,
 * MSG_PEEK): 0 means the peer closed with nothing left unread, an error is a
 * reset; bytes waiting stop the readability polling until a read is queued,
 * because only a read can move past them. The peek waits for a second
 * readability report: the first is usually the data the read queued in the
 * loop's next pass is for (a channel's bytes arrive behind the pipe's
 * Descriptor), and taking it then costs no peek and no two changes of what
 * is polled (each a pair of epoll_ctl calls in libuv). Level-triggered
 * polling repeats the report at the loop's next pass, so an end is seen one
 * pass later at most. While bytes wait unread (in the
 * socket or the read buffer) and no read is queued, the socket is polled for
 * UV_DISCONNECT instead (EPOLLRDHUP: the peer's FIN, seen without reading;
 * a reset still shows as POLLERR): that is the hang-up, reported once, after
 * which nothing is polled until a read is queued (the flag stays set).
 *
 * Addresses: a listener bound to a wildcard address advertises one concrete
 * address of this host instead (tcp/socket.c: the rules of
 * tw_context_set_socket_ifname), since 0.0.0.0 in a BrochureAnswer sends a
 * remote client to itself. An IPv6 scope is written as the interface's name.
 * A client given a link-local address in an answer uses the scope of its
 * bootstrap connection to the same address (tcp_answer_address): the
 * server's interface name or index means nothing on the client's host.
 *
 * This file must not know about nop objects, packets or pipes.
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "platform/error.h"
#include "platform/fault.h"
#include "platform/mutant.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "transport/conn_core.h"
#include "transport/stream/acceptor.h"
#include "transport/stream/listener.h"
#include "transport/tcp/addr.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/tcp.h"
#include "transport/transport.h"
#include "wire/frame.h"

#define TCP_RBUF_SIZE ((size_t)64 * 1024)
#define TCP_IOV_BATCH 64
#define TCP_HEADER TW_FRAME_UV_HEADER_SIZE

enum tcp_op_kind { TCP_OP_WRITE, TCP_OP_READ_INTO, TCP_OP_READ_ALLOC };

typedef struct tcp_conn tcp_conn;

typedef struct tcp_op {
	tw_conn_op op; /* first */
	enum tcp_op_kind kind;
	/* write: iov[0] is the length header, then the caller's pieces */
	uint8_t hdr[TCP_HEADER];
	size_t num_iov;
	tw_iov *iov;
	size_t cur;
	uint64_t off;
	bool hello; /* TW_WRITE_HELLO */
	/* read */
	uint8_t *buf;
	uint64_t len;
	uint64_t max;
	uint64_t got;
	bool have_header;
	tw_iov iov_inline[4];
} tcp_op;

/* Phase SETUP: the connect is in progress. */
struct tcp_conn {
	tw_conn_core core; /* first */
	int fd;
	uv_poll_t poll;
	int poll_events;
	uint8_t *rbuf;
	size_t rpos, rend;
	/* A read or write moved less than asked: the socket is drained (or
	 * full); wait for the next poll event instead of trying again just to
	 * hear EAGAIN. Level-triggered polling makes this safe. */
	bool read_drained;
	bool write_full;
	/* the end watch */
	bool watch_saw_data;  /* a peek found bytes: poll again once a read is queued */
	uint8_t watch_reports; /* readability reports while the watch polls (it peeks at the second) */
	bool hup_seen;        /* UV_DISCONNECT: the peer's FIN is in (bytes may precede it) */
	tw_conn_opts opts;
	bool connected;       /* the connect completed (accepted: always) */
	/* Closed with its hello not yet out (TW_WRITE_HELLO): what is left of
	 * that frame, written before the socket is closed. */
	uint8_t *linger;
	size_t linger_len, linger_off;
	uv_timer_t linger_timer;
};

typedef struct tcp_transport {
	tw_transport base;
	tw_transport_limits limits; /* options max_frame, max_packet */
	uint64_t busy_poll_us;      /* option busy_poll_us: asked of the loop by each connection */
} tcp_transport;

static const tw_conn_ops tcp_conn_ops;

static void tcp_drive(tcp_conn *c);
static void tcp_update_poll(tcp_conn *c);

/* ---- connection lifetime ------------------------------------------------ */

static void tcp_free_conn(tw_conn_core *core)
{
	tcp_conn *c = (tcp_conn *)core;
	tw__free(c->rbuf);
	tw__free(c);
}

static void tcp_free_op(tw_conn_op *base, bool ok)
{
	tcp_op *op = (tcp_op *)base;
	if (!ok && op->kind == TCP_OP_READ_ALLOC)
		tw__free(op->buf);
	if (op->iov != op->iov_inline)
		tw__free(op->iov);
	tw__free(op);
}

static void tcp_failed(tw_conn_core *core)
{
	tcp_update_poll((tcp_conn *)core);
}

static const tw_conn_core_ops tcp_core_ops = { tcp_free_op, tcp_free_conn, tcp_failed, NULL };

#define tcp_fail(c, ...) tw__conn_fail(&(c)->core, __VA_ARGS__)

static void tcp_fail_errno(tcp_conn *c, const char *what, int err)
{
	char eb[128];
	tw__strerror(err, eb, sizeof(eb));
	if (err == ETIMEDOUT && c->core.phase == TW_CONN_SETUP)
		tcp_fail(c, TW_ERR_TIMEDOUT,
		         "tcp transport: connect %s: not connected within the connect timeout of "
		         "%llu ms: %s",
		         c->core.peer, (unsigned long long)c->opts.connect_timeout_ms, eb);
	else if (err == ETIMEDOUT)
		tcp_fail(c, TW_ERR_TIMEDOUT,
		         "tcp transport: %s %s: the peer acknowledged nothing within the liveness "
		         "bound of %llu ms (a silent network or a peer that stopped reading): %s",
		         what, c->core.peer, (unsigned long long)c->opts.liveness_ms, eb);
	else if (err == ECONNRESET || err == EPIPE)
		tcp_fail(c, TW_ERR_CONNRESET, "tcp transport: %s %s: %s", what, c->core.peer, eb);
	else if (c->core.phase == TW_CONN_SETUP)
		tcp_fail(c, TW_ERR_SYS, "tcp transport: connect %s: %s", c->core.peer, eb);
	else
		tcp_fail(c, TW_ERR_SYS, "tcp transport: %s %s: %s", what, c->core.peer, eb);
}

/* The connection failed with err. Where the peer is gone (a reset, a
 * broken pipe), what it sent before it left is still ours to read (a
 * completion it wrote just before it closed, messages it wrote while our
 * write waited for it to read): the writes fail now, queued and later ones,
 * and the reads go on; the end of file they then meet reports err, which
 * the failed writes keep (tcp_fail_at_gone_end). Any other error fails the
 * connection. */
static void tcp_fail_gone(tcp_conn *c, const char *what, int err)
{
	if ((err == EPIPE || err == ECONNRESET) && c->core.phase == TW_CONN_OPEN) {
		char eb[128];
		c->read_drained = false; /* the poll may not have said so yet */
		c->write_full = false;
		tw__conn_fail_writes(&c->core, TW_ERR_CONNRESET, "tcp transport: %s %s: %s", what,
		                     c->core.peer, tw__strerror(err, eb, sizeof(eb)));
		return;
	}
	if (c->core.phase == TW_CONN_OPEN || c->core.phase == TW_CONN_SETUP)
		tcp_fail_errno(c, what, err);
}

/* At the end of file after tcp_fail_gone: the reset or broken pipe met
 * ends the connection, not a clean end of file. True if it did. */
static bool tcp_fail_at_gone_end(tcp_conn *c)
{
	if (c->core.wr_err == TW_OK)
		return false;
	tcp_fail(c, c->core.wr_err, "%s", c->core.wr_detail);
	return true;
}

static void tcp_on_poll_closed(uv_handle_t *h)
{
	tcp_conn *c = h->data;
	/* The bound guards operations, and none is left: the bytes still in
	 * the kernel's send buffer leave on the kernel's own terms, however
	 * long the peer keeps its window closed (a TCP_USER_TIMEOUT would
	 * reset the orphaned socket and lose acknowledged writes: 5.6.c). */
	if (c->fd >= 0 && c->connected)
		tw__tcp_set_liveness(c->fd, 0);
	if (c->fd >= 0)
		tw__sys_close(c->fd);
	c->fd = -1;
	tw__conn_core_unref(&c->core);
}

/* Closes the socket's handles for good (the poll handle's close callback
 * closes the descriptor). */
static void tcp_close_handles(tcp_conn *c)
{
	if (c->fd >= 0 && c->connected)
		tw__sys_shutdown_write(c->fd); /* the end is out now (transport.h) */
	uv_poll_stop(&c->poll);
	c->poll_events = 0;
	uv_close((uv_handle_t *)&c->poll, tcp_on_poll_closed);
}

/* ---- lingering for the hello (TW_WRITE_HELLO, transport.h) ---------------- */

static void tcp_on_linger_timer_closed(uv_handle_t *h)
{
	tw__conn_core_unref(&((tcp_conn *)h->data)->core);
}

/* The hello is out, or cannot get out, or the bound passed: close. */
static void tcp_linger_end(tcp_conn *c)
{
	if (!c->linger)
		return;
	tw__free(c->linger);
	c->linger = NULL;
	uv_close((uv_handle_t *)&c->linger_timer, tcp_on_linger_timer_closed);
	tcp_close_handles(c);
}

static void tcp_on_linger_timer(uv_timer_t *t)
{
	tcp_linger_end(t->data);
}

static void tcp_on_linger_poll(uv_poll_t *h, int status, int events)
{
	(void)events;
	tcp_conn *c = h->data;
	if (status < 0) {
		tcp_linger_end(c);
		return;
	}
	if (!c->connected) {
		int err = tw__tcp_connect_result(c->fd);
		if (err == EINPROGRESS)
			return;
		if (err != 0) {
			tcp_linger_end(c);
			return;
		}
		c->connected = true;
	}
	while (c->linger_off < c->linger_len) {
		struct iovec iov = { c->linger + c->linger_off, c->linger_len - c->linger_off };
		ssize_t w = tw__sys_writev(c->fd, &iov, 1);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (w < 0)
			break;
		c->linger_off += (size_t)w;
	}
	tcp_linger_end(c);
}

/* Copies what is left of a hello at the head of the write queue; false if
 * there is none (or no memory: then the connection closes as any other). */
static bool tcp_linger_take(tcp_conn *c)
{
	tcp_op *op = (tcp_op *)c->core.wq_head;
	if (!op || !op->hello || c->fd < 0 ||
	    (c->core.phase != TW_CONN_SETUP && c->core.phase != TW_CONN_OPEN))
		return false;
	size_t left = 0;
	for (size_t i = op->cur; i < op->num_iov; i++)
		left += (size_t)(op->iov[i].len - (i == op->cur ? op->off : 0));
	if (left == 0 || !(c->linger = tw__malloc(left)))
		return false;
	for (size_t i = op->cur; i < op->num_iov; i++) {
		uint64_t skip = i == op->cur ? op->off : 0;
		memcpy(c->linger + c->linger_len, (uint8_t *)op->iov[i].base + skip,
		       (size_t)(op->iov[i].len - skip));
		c->linger_len += (size_t)(op->iov[i].len - skip);
	}
	return true;
}

/* Starts lingering; false if it cannot (the connection closes at once). */
static bool tcp_linger_start(tcp_conn *c)
{
	uv_loop_t *uv = &c->core.base.transport->loop->uv;
	if (uv_timer_init(uv, &c->linger_timer) != 0)
		return false;
	c->linger_timer.data = c;
	c->core.refs++; /* the timer handle's */
	uv_timer_start(&c->linger_timer, tcp_on_linger_timer, TW_HELLO_LINGER_MS, 0);
	c->poll_events = UV_WRITABLE;
	if (uv_poll_start(&c->poll, UV_WRITABLE, tcp_on_linger_poll) != 0) {
		tcp_linger_end(c);
		return true; /* ended: the handles are closing */
	}
	return true;
}

static void tcp_conn_close(tw_conn *base)
{
	tcp_conn *c = (tcp_conn *)base;
	bool linger = tcp_linger_take(c); /* only while SETUP or OPEN */
	if (!tw__conn_close_ops(&c->core))
		return;
	if (linger && tcp_linger_start(c))
		return;
	tw__free(c->linger);
	c->linger = NULL;
	tcp_close_handles(c);
}

static const char *tcp_conn_peer(tw_conn *base)
{
	return ((tcp_conn *)base)->core.peer;
}

static bool tcp_conn_has_unread(tw_conn *base)
{
	tcp_conn *c = (tcp_conn *)base;
	if (c->rend > c->rpos)
		return true;
	if (c->fd < 0 || tw__conn_done(&c->core))
		return false;
	return tw__sys_peek(c->fd) > 0;
}

static bool tcp_conn_peer_left(tw_conn *base)
{
	tcp_conn *c = (tcp_conn *)base;
	return tw__conn_peer_left(&c->core, c->fd);
}

static bool tcp_conn_local_address(tw_conn *base, struct sockaddr_storage *out)
{
	tcp_conn *c = (tcp_conn *)base;
	socklen_t len = sizeof(*out);
	return c->fd >= 0 && getsockname(c->fd, (struct sockaddr *)out, &len) == 0 &&
	       (out->ss_family == AF_INET || out->ss_family == AF_INET6);
}

static bool tcp_conn_was_connected(tw_conn *base)
{
	return ((tcp_conn *)base)->connected;
}

/* ---- writing ------------------------------------------------------------ */

/* Consumes `n` written bytes from the head of the write queue, completing
 * the ops that are done. */
static void tcp_advance_writes(tcp_conn *c, size_t n)
{
	while (c->core.wq_head) {
		tcp_op *op = (tcp_op *)c->core.wq_head;
		while (op->cur < op->num_iov) {
			uint64_t rem = op->iov[op->cur].len - op->off;
			if (rem == 0) {
				op->cur++;
				op->off = 0;
				continue;
			}
			if (n == 0)
				return;
			uint64_t take = rem < n ? rem : n;
			op->off += take;
			n -= (size_t)take;
		}
		tw__conn_op_done(&c->core, true);
	}
}

static void tcp_drive_writes(tcp_conn *c)
{
	while (c->core.phase == TW_CONN_OPEN && c->core.wq_head) {
		struct iovec iov[TCP_IOV_BATCH];
		int n = 0;
		for (tcp_op *op = (tcp_op *)c->core.wq_head; op && n < TCP_IOV_BATCH;
		     op = (tcp_op *)op->op.next) {
			for (size_t i = op->cur; i < op->num_iov && n < TCP_IOV_BATCH; i++) {
				uint64_t skip = i == op->cur ? op->off : 0;
				if (op->iov[i].len == skip)
					continue;
				iov[n].iov_base = (uint8_t *)op->iov[i].base + skip;
				iov[n].iov_len = (size_t)(op->iov[i].len - skip);
				n++;
			}
		}
		if (n == 0) { /* only empty pieces left: complete them */
			tcp_advance_writes(c, 0);
			continue;
		}
		if (c->write_full)
			return;
		size_t asked = 0;
		for (int i = 0; i < n; i++)
			asked += iov[i].iov_len;
		ssize_t w = tw__sys_writev(c->fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				c->write_full = true;
				return;
			}
			tcp_fail_gone(c, "write to", errno);
			return;
		}
		if ((size_t)w < asked && (size_t)w < TW_RW_MAX)
			c->write_full = true;
		tcp_advance_writes(c, (size_t)w);
	}
}

static tw_status_t tcp_conn_write(tw_conn *base, const tw_iov *iov, size_t num_iov,
                                  unsigned flags, tw_conn_write_cb cb, void *arg)
{
	tcp_conn *c = (tcp_conn *)base;
	tcp_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return TW_ERR_NOMEM;
	op->iov = op->iov_inline;
	if (num_iov + 1 > sizeof(op->iov_inline) / sizeof(op->iov_inline[0])) {
		op->iov = tw__calloc(num_iov + 1, sizeof(tw_iov));
		if (!op->iov) {
			tw__free(op);
			return TW_ERR_NOMEM;
		}
	}
	uint64_t total = 0;
	for (size_t i = 0; i < num_iov; i++) {
		op->iov[i + 1] = iov[i];
		total += iov[i].len;
	}
	tw__frame_uv_header_put(op->hdr, total);
	op->iov[0].base = op->hdr;
	op->iov[0].len = TCP_HEADER;
	op->num_iov = num_iov + 1;
	op->kind = TCP_OP_WRITE;
	op->hello = (flags & TW_WRITE_HELLO) != 0;
	op->op.wcb = cb;
	op->op.arg = arg;
	/* more to come at once: one writev for all (transport.h) */
	if (tw__conn_queue(&c->core, &op->op, true) && !(flags & TW_WRITE_MORE))
		tcp_drive(c);
	return TW_OK;
}

/* ---- reading ------------------------------------------------------------ */

/* Reads into `dst` (may be NULL) and the free tail of the read buffer.
 * Returns bytes read into dst, or -1 if the connection failed, or -2 if the
 * socket has nothing now. Bytes beyond dst land in the read buffer. */
static ssize_t tcp_read_some(tcp_conn *c, uint8_t *dst, uint64_t dst_len, uint64_t frame_len,
                             uint64_t frame_got)
{
	if (c->rpos == c->rend)
		c->rpos = c->rend = 0;
	else if (c->rpos > 0 && (dst_len == 0 || TCP_RBUF_SIZE - c->rend < TCP_HEADER)) {
		memmove(c->rbuf, c->rbuf + c->rpos, c->rend - c->rpos);
		c->rend -= c->rpos;
		c->rpos = 0;
	}
	struct iovec iov[2];
	int n = 0;
	if (dst_len > 0) {
		iov[n].iov_base = dst;
		iov[n].iov_len = (size_t)dst_len;
		n++;
	}
	if (c->rend < TCP_RBUF_SIZE) {
		iov[n].iov_base = c->rbuf + c->rend;
		iov[n].iov_len = TCP_RBUF_SIZE - c->rend;
		n++;
	}
	if (c->read_drained)
		return -2;
	size_t asked = 0;
	for (int i = 0; i < n; i++)
		asked += iov[i].iov_len;
	for (;;) {
		ssize_t r = tw__sys_readv(c->fd, iov, n);
		if (r > 0) {
			uint64_t into_dst = (uint64_t)r < dst_len ? (uint64_t)r : dst_len;
			c->rend += (size_t)((uint64_t)r - into_dst);
			if ((size_t)r < asked && (size_t)r < TW_RW_MAX)
				c->read_drained = true;
			return (ssize_t)into_dst;
		}
		if (r == 0 && tcp_fail_at_gone_end(c)) /* the end of what came before the reset */
			return -1;
		if (r == 0) {
			if (frame_len == UINT64_MAX)
				tcp_fail(c, TW_ERR_EOF, "tcp transport: connection closed by peer %s",
				         c->core.peer);
			else
				tcp_fail(c, TW_ERR_EOF,
				         "tcp transport: connection closed by peer %s in the middle of a "
				         "frame (%llu of %llu bytes received)",
				         c->core.peer, (unsigned long long)frame_got,
				         (unsigned long long)frame_len);
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			c->read_drained = true;
			return -2;
		}
		tcp_fail_errno(c, "read from", errno);
		return -1;
	}
}

static void tcp_drive_reads(tcp_conn *c)
{
	while (c->core.phase == TW_CONN_OPEN && c->core.rq_head) {
		tcp_op *op = (tcp_op *)c->core.rq_head;
		if (!c->rbuf) {
			c->rbuf = tw__malloc(TCP_RBUF_SIZE);
			if (!c->rbuf) {
				tcp_fail(c, TW_ERR_NOMEM, "tcp transport: read buffer of %zu bytes: out of memory",
				         TCP_RBUF_SIZE);
				return;
			}
		}
		if (!op->have_header) {
			if (c->rend - c->rpos < TCP_HEADER) {
				ssize_t r = tcp_read_some(c, NULL, 0,
				                          c->rend == c->rpos ? UINT64_MAX : TCP_HEADER,
				                          c->rend - c->rpos);
				if (r < 0)
					return;
				continue;
			}
			uint64_t len = tw__frame_uv_header_get(c->rbuf + c->rpos);
			c->rpos += TCP_HEADER;
			if (op->kind == TCP_OP_READ_INTO && len != op->len &&
			    !TW_MUTANT("frame_length_unchecked")) {
				tcp_fail(c, TW_ERR_PROTO,
				         "tcp transport: frame from %s has %llu bytes where %llu were expected",
				         c->core.peer, (unsigned long long)len, (unsigned long long)op->len);
				return;
			}
			if (op->kind == TCP_OP_READ_ALLOC) {
				if (len > op->max && !TW_MUTANT("frame_limit_unchecked")) {
					tcp_fail(c, TW_ERR_PROTO,
					         "tcp transport: frame from %s has %llu bytes, more than the "
					         "limit of %llu",
					         c->core.peer, (unsigned long long)len, (unsigned long long)op->max);
					return;
				}
				op->len = len;
				if (len > 0) {
					op->buf = tw__malloc((size_t)len);
					if (!op->buf) {
						tcp_fail(c, TW_ERR_NOMEM,
						         "tcp transport: frame of %llu bytes from %s: out of memory",
						         (unsigned long long)len, c->core.peer);
						return;
					}
				}
			}
			op->have_header = true;
		}
		uint64_t want = op->len - op->got;
		size_t avail = c->rend - c->rpos;
		if (avail > 0 && want > 0) {
			size_t take = want < avail ? (size_t)want : avail;
			memcpy(op->buf + op->got, c->rbuf + c->rpos, take);
			c->rpos += take;
			op->got += take;
			want -= take;
		}
		if (want > 0) {
			/* Small rests go through the buffer (one syscall may bring the
			 * next frames too); large ones straight into the caller's. */
			bool direct = want >= TCP_RBUF_SIZE / 2;
			ssize_t r = tcp_read_some(c, direct ? op->buf + op->got : NULL, direct ? want : 0,
			                          op->len, op->got);
			if (r < 0)
				return;
			op->got += (uint64_t)r;
			continue;
		}
		op->op.buf = op->buf;
		op->op.len = op->len;
		tw__conn_op_done(&c->core, false);
	}
}

static tw_status_t tcp_queue_read(tcp_conn *c, tcp_op *op)
{
	c->watch_saw_data = false; /* the read moves past whatever the watch saw */
	c->watch_reports = 0;
	if (tw__conn_queue(&c->core, &op->op, false))
		tcp_drive(c);
	return TW_OK;
}

static tw_status_t tcp_conn_read_into(tw_conn *base, void *buf, uint64_t len, tw_conn_read_cb cb,
                                      void *arg)
{
	tcp_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return TW_ERR_NOMEM;
	op->kind = TCP_OP_READ_INTO;
	op->buf = buf;
	op->len = len;
	op->op.rcb = cb;
	op->op.arg = arg;
	op->iov = op->iov_inline;
	return tcp_queue_read((tcp_conn *)base, op);
}

static tw_status_t tcp_conn_read_alloc(tw_conn *base, uint64_t max_len, tw_conn_read_cb cb,
                                       void *arg)
{
	tcp_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return TW_ERR_NOMEM;
	op->kind = TCP_OP_READ_ALLOC;
	op->max = max_len;
	op->op.rcb = cb;
	op->op.arg = arg;
	op->iov = op->iov_inline;
	return tcp_queue_read((tcp_conn *)base, op);
}

/* ---- the end watch ---------------------------------------------------------- */

/* True while the watch needs readability events: nothing queued to read and
 * nothing known to be waiting unread (see the file comment). */
static bool tcp_watch_polls(const tcp_conn *c)
{
	return c->core.watch_armed && !c->core.rq_head && !c->watch_saw_data && c->rpos == c->rend;
}

/* True while the watch waits for a hang-up: bytes known to wait unread, no
 * read queued, no FIN seen yet. */
static bool tcp_watch_hup_polls(const tcp_conn *c)
{
	return c->core.watch_armed && c->core.hup_cb && !c->hup_seen && !c->core.rq_head &&
	       (c->watch_saw_data || c->rpos != c->rend);
}

/* Reports a FIN that came in behind unread bytes (see the file comment). */
static void tcp_drive_hangup(tcp_conn *c)
{
	if (c->hup_seen && (c->watch_saw_data || c->rpos != c->rend))
		tw__conn_hangup(&c->core);
}

static void tcp_drive_watch(tcp_conn *c)
{
	while (c->core.phase == TW_CONN_OPEN && tcp_watch_polls(c) && !c->read_drained) {
		/* One pass of grace (see the file comment): the first report
		 * waits for the next, which level-triggered polling brings on
		 * the loop's next pass unless a read took the bytes meanwhile. */
		if (c->watch_reports < 2)
			return;
		c->watch_reports = 0;
		ssize_t r = tw__sys_peek(c->fd);
		if (r > 0) {
			c->watch_saw_data = true;
			return;
		}
		if (r == 0 && tcp_fail_at_gone_end(c))
			return;
		if (r == 0) {
			tcp_fail(c, TW_ERR_EOF, "tcp transport: connection closed by peer %s", c->core.peer);
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			c->read_drained = true;
			return;
		}
		tcp_fail_errno(c, "read from", errno);
		return;
	}
}

static tw_status_t tcp_conn_watch_end(tw_conn *base, tw_conn_end_cb cb,
                                      tw_conn_hangup_cb hup_cb, void *arg)
{
	tcp_conn *c = (tcp_conn *)base;
	if (!tw__conn_watch_arm(&c->core, cb, hup_cb, arg))
		return TW_OK;
	/* Not tcp_drive: a peek from inside the caller's stack could fail the
	 * connection, and callbacks are deferred anyway; just start polling. */
	tcp_update_poll(c);
	return TW_OK;
}

/* ---- polling -------------------------------------------------------------- */

static void tcp_on_poll(uv_poll_t *h, int status, int events);

static void tcp_update_poll(tcp_conn *c)
{
	if (c->core.phase == TW_CONN_CLOSED)
		return;
	int want = 0;
	if (c->core.phase == TW_CONN_SETUP)
		want = UV_WRITABLE;
	else if (c->core.phase == TW_CONN_OPEN)
		want = (c->core.rq_head || tcp_watch_polls(c) ? UV_READABLE : 0) |
		       (c->core.wq_head ? UV_WRITABLE : 0) | (tcp_watch_hup_polls(c) ? UV_DISCONNECT : 0);
	tw__conn_poll(&c->core, &c->poll, &c->poll_events, want, tcp_on_poll);
}

static void tcp_finish_connect(tcp_conn *c)
{
	int err = tw__tcp_connect_result(c->fd);
	if (err == EINPROGRESS)
		return;
	if (err != 0) {
		tcp_fail_errno(c, "connect", err);
		return;
	}
	c->core.phase = TW_CONN_OPEN;
	c->connected = true;
	tw__tcp_set_liveness(c->fd, c->opts.liveness_ms);
}

static void tcp_drive(tcp_conn *c)
{
	if (c->core.phase == TW_CONN_OPEN)
		tcp_drive_writes(c);
	if (c->core.phase == TW_CONN_OPEN)
		tcp_drive_reads(c);
	if (c->core.phase == TW_CONN_OPEN)
		tcp_drive_watch(c);
	tcp_drive_hangup(c);
	tcp_update_poll(c);
}

static void tcp_on_poll(uv_poll_t *h, int status, int events)
{
	tcp_conn *c = h->data;
	if (status < 0) {
		/* libuv reports POLLERR as UV_EBADF and stops the handle; the
		 * socket's pending error says what really happened. */
		c->poll_events = 0;
		int err = 0;
		socklen_t len = sizeof(err);
		if (tw__sys_getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
			tcp_fail_gone(c, "connection to", err);
			tcp_drive(c); /* the reads go on: poll again */
		} else if (c->core.wr_err != TW_OK) {
			/* a report fetched before a write took the error (the reset
			 * tcp_fail_gone handled): the reads go on */
			tcp_drive(c);
		} else {
			tcp_fail(c, TW_ERR_SYS, "tcp transport: poll on connection to %s: %s", c->core.peer,
			         uv_strerror(status));
		}
		return;
	}
	if (events & UV_DISCONNECT) {
		/* The peer's FIN: its end of file is readable too. */
		c->hup_seen = true;
		c->read_drained = false;
	}
	if (events & UV_READABLE) {
		c->read_drained = false;
		if (tcp_watch_polls(c) && c->watch_reports < 2)
			c->watch_reports++;
	}
	if (events & UV_WRITABLE)
		c->write_full = false;
	if (c->core.phase == TW_CONN_SETUP && (events & UV_WRITABLE))
		tcp_finish_connect(c);
	tcp_drive(c);
}

static tcp_conn *tcp_conn_new(tcp_transport *t, int fd, enum tw_conn_phase phase, const char *peer,
                              const tw_conn_opts *opts, char *detail, size_t detail_len)
{
	tcp_conn *c = tw__calloc(1, sizeof(*c));
	if (!c) {
		tw__detail(detail, detail_len, "tcp transport: connection to %s: out of memory", peer);
		tw__sys_close(fd);
		return NULL;
	}
	/* one reference: the poll handle */
	tw__conn_core_init(&c->core, &tcp_conn_ops, &tcp_core_ops, &t->base, "tcp transport", peer,
	                   phase, 1);
	c->fd = fd;
	/* Only a transport that carries connections sets the loop's polling
	 * (a registration refused after create leaves no trace). */
	tw__loop_set_spin(t->base.loop, t->busy_poll_us);
	c->connected = phase == TW_CONN_OPEN;
	c->opts = *opts;
	int rc = uv_poll_init_socket(&t->base.loop->uv, &c->poll, fd);
	if (rc != 0) {
		tw__detail(detail, detail_len, "tcp transport: uv_poll_init_socket for %s: %s", peer,
		           uv_strerror(rc));
		tw__sys_close(fd);
		tw__free(c);
		return NULL;
	}
	c->poll.data = c;
	return c;
}

static tw_status_t tcp_connect(tw_transport *base, const char *address, const tw_conn_opts *opts,
                               tw_conn **out, char *detail, size_t detail_len)
{
	tcp_transport *t = (tcp_transport *)base;
	char peer[TW_TCP_ADDR_MAX];
	int err = 0;
	int fd = tw__tcp_connect_start("tcp transport", address, opts, peer, sizeof(peer), &err,
	                               detail, detail_len);
	if (fd < 0)
		return err == EINVAL ? TW_ERR_INVAL : TW_ERR_SYS;
	tcp_conn *c = tcp_conn_new(t, fd, err == 0 ? TW_CONN_OPEN : TW_CONN_SETUP, peer, opts, detail,
	                           detail_len);
	if (!c)
		return TW_ERR_NOMEM;
	if (err != 0 && err != EINPROGRESS) {
		/* Report it through the operations, like an asynchronous failure. */
		tcp_fail_errno(c, "connect", err);
	} else {
		if (err == 0)
			tw__tcp_set_liveness(fd, opts->liveness_ms);
		tcp_update_poll(c);
	}
	*out = &c->core.base;
	return TW_OK;
}

/* ---- addresses --------------------------------------------------------------- */

static tw_status_t tcp_check_address(const char *address, bool for_listen, char *detail,
                                     size_t detail_len)
{
	return tw__tcp_check_address("tcp transport", address, for_listen, detail, detail_len);
}

static void tcp_answer_address(tw_conn *boot, const char *advertised, char *out, size_t out_len)
{
	tw__tcp_answer_address(boot ? ((tcp_conn *)boot)->fd : -1, advertised, out, out_len);
}

/* ---- listener ------------------------------------------------------------- */

/* The acceptor (transport/stream) does the accepting; an accepted socket
 * becomes a connection here. */
static tw_status_t tcp_make_conn(tw_stream_listener *l, int fd, const struct sockaddr *peer_addr,
                                 tw_conn **out, char *detail, size_t detail_len)
{
	char peer[TW_TCP_ADDR_MAX];
	tw__tcp_addr_format(peer_addr, peer, sizeof(peer));
	tw__tcp_set_nodelay(fd);
	tw__tcp_set_liveness(fd, l->opts.liveness_ms);
	tcp_conn *c = tcp_conn_new((tcp_transport *)l->base.transport, fd, TW_CONN_OPEN, peer,
	                           &l->opts, detail, detail_len);
	if (!c)
		return TW_ERR_NOMEM;
	*out = &c->core.base;
	return TW_OK;
}

static tw_status_t tcp_listen(tw_transport *base, const char *address, const tw_conn_opts *opts,
                              tw_tlistener_accept_cb cb, void *arg, tw_tlistener **out,
                              char *detail, size_t detail_len)
{
	return tw__tcp_listen(base, "tcp transport", address, opts, tcp_make_conn, cb, arg,
	                      out, detail, detail_len);
}

/* ---- transport -------------------------------------------------------------- */

static tw_status_t tcp_create(tw_loop *loop, const char *options, tw_transport **out, char *detail,
                              size_t detail_len)
{
	/* TCP carries any frame (u64 lengths); these only cap what this
	 * context sends, to rehearse a ring transport's limits over uv. */
	/* busy_poll_us: how long the loop thread keeps polling its sockets
	 * after work instead of sleeping (tw__loop_set_spin); 0: off. */
	typedef struct tcp_opts {
		tw_transport_limits lim;
		uint64_t busy_poll_us;
	} tcp_opts;
	static const tw_option table[] = {
		{ "max_frame", TW_OPT_U64, offsetof(tcp_opts, lim.max_frame), 0, 1, UINT64_MAX },
		{ "max_packet", TW_OPT_U64, offsetof(tcp_opts, lim.max_packet), 0, 64, UINT64_MAX },
		{ "busy_poll_us", TW_OPT_U64, offsetof(tcp_opts, busy_poll_us), 0, 0, 10000000 },
	};
	tcp_opts o = { { UINT64_MAX, UINT64_MAX, false }, 0 };
	tw_status_t st = tw__options_parse("tcp transport", options, table, 3, &o, NULL, 0, detail,
	                                   detail_len);
	if (st != TW_OK)
		return st;
	tw_transport_limits lim = o.lim;
	tcp_transport *t = tw__calloc(1, sizeof(*t));
	if (!t) {
		tw__detail(detail, detail_len, "tcp transport: out of memory");
		return TW_ERR_NOMEM;
	}
	t->base.ops = &tw__tcp_transport_ops;
	t->base.loop = loop;
	t->limits = lim;
	t->busy_poll_us = o.busy_poll_us;
	*out = &t->base;
	return TW_OK;
}

static void tcp_limits(tw_transport *base, tw_transport_limits *out)
{
	*out = ((tcp_transport *)base)->limits;
}

static const char *tcp_domain_descriptor(tw_transport *t)
{
	return "uv:*";
}

static void tcp_destroy(tw_transport *t)
{
	tw__free(t);
}

/* The socket under the connection: the kernel knows who holds its other
 * end (transport.h). */
static int tcp_conn_peer_of(tw_conn *base, pid_t pid, char *why, size_t why_len)
{
	return tw__sys_socket_peer_of(((tcp_conn *)base)->fd, pid, why, why_len);
}

static const tw_conn_ops tcp_conn_ops = {
	.write = tcp_conn_write,
	.read_into = tcp_conn_read_into,
	.read_alloc = tcp_conn_read_alloc,
	.watch_end = tcp_conn_watch_end,
	.close = tcp_conn_close,
	.peer = tcp_conn_peer,
	.has_unread = tcp_conn_has_unread,
	.was_connected = tcp_conn_was_connected,
	.local_address = tcp_conn_local_address,
	.peer_of = tcp_conn_peer_of,
	.peer_left = tcp_conn_peer_left,
};

static const char *const tcp_schemes[] = { "tcp", "uv", NULL };

const tw_transport_ops tw__tcp_transport_ops = {
	.kind = "uv",
	.schemes = tcp_schemes,
	.create = tcp_create,
	.limits = tcp_limits,
	.domain_descriptor = tcp_domain_descriptor,
	.can_communicate = NULL,
	.check_address = tcp_check_address,
	.answer_address = tcp_answer_address,
	.listen = tcp_listen,
	.connect = tcp_connect,
	.shutdown = NULL,
	.destroy = tcp_destroy,
};
