/*
 * mpt.c - the multiplexed channel (spec/wire.md 4.3), wire-compatible with
 * stock's "mpt" (PyTorch registers it as mpt_uv with 16 lanes).
 *
 * A context has N lanes: N instances of the lane transport (uv) and, once
 * a server end needs them, N listeners. Its device descriptor is "<N>"
 * then ":<lane domain descriptor>" per lane ("2:uv:*:uv:*"), so only
 * contexts with as many lanes select it.
 *
 * One instance per pipe, over one control connection from the pipe:
 *   - the listen end writes a ServerHello at once: per lane, its lane
 *     listener's address and a fresh registration id;
 *   - the connect end reads it, connects lane i to address i and writes
 *     ClientHello{id i} first on it;
 *   - each lane listener reads the first frame of what it accepts and hands
 *     the connection to the instance that waits for that id on that lane
 *     (an unknown id, or anything else, is closed);
 *   - a tensor of L bytes is cut into N chunks, chunk i = [L*i/N,
 *     L*(i+1)/N), one raw frame on lane i each, empty chunks included
 *     (when 0 < L < N); L = 0 moves nothing.
 * Operations issued before the lanes are up wait, in order. A lane that
 * fails fails the instance: every lane is closed at once (so the other
 * lanes' operations end too) and every operation reports the error.
 *
 * Options: lanes=N (1..64, default 2, stock's tests' default; PyTorch:
 * 16), listen=HOST:PORT for the lane listeners (default 0.0.0.0:0: a
 * wildcard, advertised at the address the peer reached this host at, see
 * mpt_lane_advertised); a PORT other than 0 is lane 0's, lane i listens
 * on PORT+i (fixed ports for a firewall).
 *
 * Lanes are connections of the pipe's own kind: they get the context's
 * connect timeout, liveness bound and interface rules (env->conn_opts), so
 * a lane whose peer stops reading or goes silent fails as the pipe's own
 * connections do, and a wildcard lane listener advertises what the pipe's
 * listener would.
 */
#include "channel/mpt/mpt.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "channel/channel.h"
#include "platform/error.h"
#include "platform/list.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "transport/tcp/addr.h"
#include "wire/nop.h"
#include "wire/packets.h"

#define MPT_WHO "mpt channel"
#define MPT_MAX_LANES 64
#define MPT_HELLO_MAX ((uint64_t)1 << 20)
/* How long a listen end still waits for lanes once the peer's end of the
 * control connection is seen: lanes it connected before it left are in
 * the lane listeners' accept queues and come within a loop pass or two. */
#define MPT_LANE_GRACE_MS 1000

typedef struct mpt_ctx mpt_ctx;
typedef struct mpt_channel mpt_channel;

typedef struct mpt_opts {
	uint64_t lanes;
	char listen[128];
} mpt_opts;

struct mpt_ctx {
	tw_channel_ctx base;
	tw_channel_device cpu;
	mpt_opts opts;
	struct sockaddr_storage listen_addr; /* opts.listen, parsed once */
	size_t lanes;
	tw_transport *lane_t[MPT_MAX_LANES];
	tw_tlistener *lane_l[MPT_MAX_LANES];
	bool listening;
	uint64_t next_id;
	tw_list waiting; /* server instances waiting for their lanes */
	tw_list limbo;   /* accepted lane connections whose hello is not read yet */
};

/* An accepted lane connection, until its ClientHello says whose it is. */
typedef struct mpt_limbo {
	tw_list link;
	mpt_ctx *ctx;
	tw_conn *conn; /* NULL once shutdown closed it */
	size_t lane;
} mpt_limbo;

typedef struct mpt_op {
	tw_list link; /* in `queued` until the lanes are up */
	tw_deferred dfr;
	mpt_channel *ch;
	bool is_send;
	uint8_t *ptr;
	uint64_t len;
	size_t pending; /* lane callbacks still to come */
	tw_status_t status;
	char detail[TW_DETAIL_MAX];
	tw_channel_cb cb;
	void *arg;
} mpt_op;

struct mpt_channel {
	tw_channel base;
	mpt_ctx *ctx;
	tw_conn *control;
	tw_conn *lanes[MPT_MAX_LANES];
	uint64_t ids[MPT_MAX_LANES]; /* listen end: the ids it advertised */
	size_t num_ready;
	bool ready;
	bool closed;
	tw_list wait_link; /* in ctx->waiting (listen end, until ready) */
	tw_list queued;    /* operations waiting for the lanes */
	tw_status_t failed;
	char failed_detail[TW_DETAIL_MAX];
	/* A send met the peer's end (EOF, reset): sends fail from then on, but
	 * what the peer sent before it left is still received (transport.h) */
	tw_status_t sends_failed;
	char sends_detail[TW_DETAIL_MAX];
	uint8_t *hello_owned; /* the encoded ServerHello, kept until freed with us */
	/* Listen end: the peer's control connection ended before its lanes
	 * connected (the peer left): its lanes get MPT_LANE_GRACE_MS, then
	 * the instance fails with what ended the control connection. */
	uv_timer_t lane_wait;
	bool lane_wait_on;
	tw_status_t control_end;
	char control_detail[TW_DETAIL_MAX];
	uint8_t client_hello[MPT_MAX_LANES][16];
	size_t client_hello_len[MPT_MAX_LANES];
	unsigned refs; /* 1 while open + every op and control operation pending */
};

static void mpt_unref(mpt_channel *ch)
{
	if (--ch->refs > 0)
		return;
	tw__free(ch->hello_owned);
	tw__free(ch);
}

/* ---- failing ---------------------------------------------------------------------- */

static void mpt_close_lanes(mpt_channel *ch)
{
	for (size_t i = 0; i < ch->ctx->lanes; i++)
		if (ch->lanes[i]) {
			ch->lanes[i]->ops->close(ch->lanes[i]);
			ch->lanes[i] = NULL;
		}
}

static void mpt_op_finish(mpt_op *op)
{
	mpt_channel *ch = op->ch;
	char d[TW_DETAIL_MAX];
	if (op->status != TW_OK)
		tw__detail(d, sizeof(d), MPT_WHO ": %s", op->detail);
	op->cb(&ch->base, op->status, op->status == TW_OK ? "" : d, op->arg);
	tw__free(op);
	mpt_unref(ch);
}

static void mpt_op_deliver(void *arg)
{
	mpt_op_finish(arg);
}

static void mpt_flush_limbo(mpt_ctx *ctx);

/* A listen-end instance no longer waits for lanes (ready, failed or
 * closed): once none waits, accepted lanes nobody claimed go too. */
static void mpt_stop_waiting(mpt_channel *ch)
{
	if (!tw__list_linked(&ch->wait_link))
		return;
	tw__list_remove(&ch->wait_link);
	if (tw__list_empty(&ch->ctx->waiting))
		mpt_flush_limbo(ch->ctx);
}

static void mpt_on_lane_wait_closed(uv_handle_t *h)
{
	mpt_unref(h->data);
}

static void mpt_lane_wait_stop(mpt_channel *ch)
{
	if (!ch->lane_wait_on)
		return;
	ch->lane_wait_on = false;
	uv_close((uv_handle_t *)&ch->lane_wait, mpt_on_lane_wait_closed);
}

/* The instance fails: the first error is kept for every operation. */
static void mpt_fail(mpt_channel *ch, tw_status_t st, const char *detail)
{
	if (ch->failed != TW_OK || ch->closed)
		return;
	mpt_lane_wait_stop(ch);
	mpt_stop_waiting(ch); /* its ids must not claim lanes any more */
	ch->failed = st;
	snprintf(ch->failed_detail, sizeof(ch->failed_detail), "%s", detail);
	mpt_close_lanes(ch);
	while (!tw__list_empty(&ch->queued)) {
		mpt_op *op = TW_CONTAINER_OF(ch->queued.next, mpt_op, link);
		tw__list_remove(&op->link);
		op->status = st;
		snprintf(op->detail, sizeof(op->detail), "%s", detail);
		tw__loop_defer(ch->ctx->base.env->loop, &op->dfr, mpt_op_deliver, op);
	}
}

/* ---- moving chunks ------------------------------------------------------------------ */

static void mpt_lane_done(mpt_op *op, tw_status_t st, const char *detail)
{
	mpt_channel *ch = op->ch;
	if (st != TW_OK && op->status == TW_OK) {
		op->status = ch->failed != TW_OK ? ch->failed : st;
		snprintf(op->detail, sizeof(op->detail), "%s",
		         ch->failed != TW_OK ? ch->failed_detail : detail);
		if (op->is_send && (st == TW_ERR_EOF || st == TW_ERR_CONNRESET) &&
		    ch->failed == TW_OK) {
			/* the peer left: its lanes still hold what it sent us */
			if (ch->sends_failed == TW_OK) {
				ch->sends_failed = st;
				snprintf(ch->sends_detail, sizeof(ch->sends_detail), "%s", detail);
			}
		} else if (!ch->closed) {
			mpt_fail(ch, st, detail);
		}
	}
	if (--op->pending == 0)
		mpt_op_finish(op);
}

static void mpt_on_lane_write(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	(void)c;
	mpt_lane_done(arg, st, detail);
}

static void mpt_on_lane_read(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                             uint64_t len, void *arg)
{
	(void)c, (void)buf, (void)len;
	mpt_lane_done(arg, st, detail);
}

/* Issues op's chunks, one per lane (the lanes are up). */
static void mpt_issue(mpt_op *op)
{
	mpt_channel *ch = op->ch;
	size_t n = ch->ctx->lanes;
	op->pending = n;
	for (size_t i = 0; i < n; i++) {
		/* chunk i = [L*i/N, L*(i+1)/N): exact in 128 bits, L < 2^64 */
		uint64_t lo = (uint64_t)((unsigned __int128)op->len * i / n);
		uint64_t hi = (uint64_t)((unsigned __int128)op->len * (i + 1) / n);
		tw_status_t st;
		if (!ch->lanes[i]) {
			st = TW_ERR_CLOSED;
		} else if (op->is_send) {
			tw_iov iov = { op->ptr + lo, hi - lo };
			st = ch->lanes[i]->ops->write(ch->lanes[i], &iov, 1, 0, mpt_on_lane_write, op);
		} else {
			st = ch->lanes[i]->ops->read_into(ch->lanes[i], op->ptr + lo, hi - lo,
			                                  mpt_on_lane_read, op);
		}
		if (st != TW_OK) {
			/* Not queued: count it as done with this error, deferred (the
			 * caller's stack must not see its callback). */
			char d[TW_DETAIL_MAX];
			tw__detail(d, sizeof(d), "lane %zu: %s", i,
			           st == TW_ERR_CLOSED ? "closed" : "out of memory queueing a chunk");
			if (op->status == TW_OK) {
				op->status = st;
				snprintf(op->detail, sizeof(op->detail), "%s", d);
			}
			if (!ch->closed)
				mpt_fail(ch, st, d);
			op->pending--;
		}
	}
	if (op->pending == 0) /* nothing went out: complete later, never inline */
		tw__loop_defer(ch->ctx->base.env->loop, &op->dfr, mpt_op_deliver, op);
}

static void mpt_lanes_up(mpt_channel *ch)
{
	ch->ready = true;
	mpt_lane_wait_stop(ch);
	while (!tw__list_empty(&ch->queued)) {
		mpt_op *op = TW_CONTAINER_OF(ch->queued.next, mpt_op, link);
		tw__list_remove(&op->link);
		mpt_issue(op);
	}
}

static tw_status_t mpt_queue(tw_channel *base, const tw_buffer *buf, tw_channel_cb cb, void *arg,
                             bool is_send)
{
	mpt_channel *ch = (mpt_channel *)base;
	mpt_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return TW_ERR_NOMEM;
	op->ch = ch;
	op->is_send = is_send;
	op->ptr = buf->ptr;
	op->len = buf->len;
	op->cb = cb;
	op->arg = arg;
	ch->refs++;
	if (ch->failed != TW_OK || ch->closed || (is_send && ch->sends_failed != TW_OK)) {
		op->status = ch->closed ? TW_ERR_CLOSED : ch->failed ? ch->failed : ch->sends_failed;
		snprintf(op->detail, sizeof(op->detail), "%s",
		         ch->closed   ? "closed"
		         : ch->failed ? ch->failed_detail
		                      : ch->sends_detail);
		tw__loop_defer(ch->ctx->base.env->loop, &op->dfr, mpt_op_deliver, op);
	} else if (buf->len == 0) { /* spec 4.1: no traffic */
		tw__loop_defer(ch->ctx->base.env->loop, &op->dfr, mpt_op_deliver, op);
	} else if (!ch->ready) {
		tw__list_push_back(&ch->queued, &op->link);
	} else {
		mpt_issue(op);
	}
	return TW_OK;
}

static tw_status_t mpt_send(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	return mpt_queue(ch, buf, cb, arg, true);
}

static tw_status_t mpt_recv(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	return mpt_queue(ch, buf, cb, arg, false);
}

/* Accepted lanes that no instance waits for can never be claimed: close
 * them now, while the loop still runs their callbacks (after the context's
 * shutdown it would not). Their read ends with TW_ERR_CLOSED and frees
 * the entry. */
static void mpt_flush_limbo(mpt_ctx *ctx)
{
	for (tw_list *it = ctx->limbo.next; it != &ctx->limbo; it = it->next) {
		mpt_limbo *lb = TW_CONTAINER_OF(it, mpt_limbo, link);
		if (lb->conn) {
			lb->conn->ops->close(lb->conn);
			lb->conn = NULL;
		}
	}
}

static void mpt_close(tw_channel *base)
{
	mpt_channel *ch = (mpt_channel *)base;
	mpt_lane_wait_stop(ch);
	mpt_stop_waiting(ch);
	ch->closed = true;
	mpt_close_lanes(ch);
	if (ch->control) {
		ch->control->ops->close(ch->control);
		ch->control = NULL;
	}
	while (!tw__list_empty(&ch->queued)) {
		mpt_op *op = TW_CONTAINER_OF(ch->queued.next, mpt_op, link);
		tw__list_remove(&op->link);
		op->status = TW_ERR_CLOSED;
		snprintf(op->detail, sizeof(op->detail), "closed");
		tw__loop_defer(ch->ctx->base.env->loop, &op->dfr, mpt_op_deliver, op);
	}
	mpt_unref(ch);
}

/* Lanes split a tensor, so none of them limits it (uv carries any frame);
 * a lane transport with a frame limit would limit a tensor to N times it. */
static uint64_t mpt_max_tensor(tw_channel *base)
{
	mpt_channel *ch = (mpt_channel *)base;
	tw_transport_limits lim;
	tw__transport_limits(ch->ctx->lane_t[0], &lim);
	if (lim.max_frame > UINT64_MAX / ch->ctx->lanes)
		return UINT64_MAX;
	return lim.max_frame * ch->ctx->lanes;
}

static const tw_channel_instance_ops mpt_instance_ops = {
	.send = mpt_send,
	.recv = mpt_recv,
	.close = mpt_close,
	.max_tensor = mpt_max_tensor,
};

/* ---- the handshake: listen end ----------------------------------------------------- */

static void mpt_on_hello_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	(void)c;
	mpt_channel *ch = arg;
	if (st != TW_OK && !ch->closed) {
		char d[TW_DETAIL_MAX];
		tw__detail(d, sizeof(d), "writing the ServerHello: %s", detail);
		mpt_fail(ch, st, d);
	}
	mpt_unref(ch);
}

static void mpt_on_lane_hello(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                              uint64_t len, void *arg)
{
	mpt_limbo *lb = arg;
	mpt_ctx *ctx = lb->ctx;
	tw__list_remove(&lb->link);
	tw_wire_mpt_packet p;
	memset(&p, 0, sizeof(p));
	char d[TW_DETAIL_MAX];
	bool ok = st == TW_OK && lb->conn &&
	          tw__wire_decode_mpt_packet(buf, (size_t)len, &p, NULL, d, sizeof(d)) == TW_OK &&
	          p.kind == TW_MPT_CLIENT_HELLO;
	tw__free(buf);
	mpt_channel *owner = NULL;
	if (ok) {
		tw_list *it;
		for (it = ctx->waiting.next; it != &ctx->waiting; it = it->next) {
			mpt_channel *ch = TW_CONTAINER_OF(it, mpt_channel, wait_link);
			if (ch->ids[lb->lane] == p.registration_id && !ch->lanes[lb->lane]) {
				owner = ch;
				break;
			}
		}
	}
	tw__wire_mpt_packet_free(&p);
	(void)detail;
	if (!owner) { /* not ours, not a hello, or its pipe is gone: drop it */
		if (lb->conn)
			c->ops->close(c);
		tw__free(lb);
		return;
	}
	owner->lanes[lb->lane] = c;
	tw__free(lb);
	if (++owner->num_ready == ctx->lanes) {
		mpt_stop_waiting(owner);
		mpt_lanes_up(owner);
	}
}

static void mpt_on_lane_accept(tw_tlistener *l, tw_status_t st, const char *detail, tw_conn *conn,
                               void *arg)
{
	(void)detail;
	mpt_ctx *ctx = arg;
	if (st != TW_OK || !conn)
		return; /* a refused accept: the client's lane connect fails and says so */
	size_t lane = 0;
	while (lane < ctx->lanes && ctx->lane_l[lane] != l)
		lane++;
	mpt_limbo *lb = tw__list_empty(&ctx->waiting) ? NULL : tw__calloc(1, sizeof(*lb));
	if (!lb) { /* no instance waits for a lane (or out of memory): drop it */
		conn->ops->close(conn);
		return;
	}
	lb->ctx = ctx;
	lb->conn = conn;
	lb->lane = lane;
	tw__list_push_back(&ctx->limbo, &lb->link);
	if (conn->ops->read_alloc(conn, MPT_HELLO_MAX, mpt_on_lane_hello, lb) != TW_OK) {
		tw__list_remove(&lb->link);
		conn->ops->close(conn);
		tw__free(lb);
	}
}

/* The context's settings for the lanes' connections and listeners. */
static void mpt_conn_opts(const mpt_ctx *ctx, tw_conn_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	if (ctx->base.env->conn_opts)
		ctx->base.env->conn_opts(ctx->base.env, opts);
}

/* Lane i's listen address: listen=HOST:PORT with PORT+i where PORT is not
 * 0 (mpt_create checked that they fit). */
static void mpt_lane_listen_address(const mpt_ctx *ctx, size_t i, char *out, size_t out_len)
{
	struct sockaddr_storage ss = ctx->listen_addr;
	if (tw__tcp_addr_port(&ss) != 0)
		tw__tcp_addr_set_port(&ss, (uint16_t)(tw__tcp_addr_port(&ss) + i));
	tw__tcp_addr_format((struct sockaddr *)&ss, out, out_len);
}

static tw_status_t mpt_listen(mpt_ctx *ctx, char *detail, size_t detail_len)
{
	if (ctx->listening)
		return TW_OK;
	tw_conn_opts opts;
	mpt_conn_opts(ctx, &opts);
	for (size_t i = 0; i < ctx->lanes; i++) {
		char d[TW_DETAIL_MAX], addr[sizeof(ctx->opts.listen)];
		mpt_lane_listen_address(ctx, i, addr, sizeof(addr));
		tw_status_t st = ctx->lane_t[i]->ops->listen(ctx->lane_t[i], addr, &opts,
		                                             mpt_on_lane_accept, ctx, &ctx->lane_l[i], d,
		                                             sizeof(d));
		if (st != TW_OK) {
			tw__detail(detail, detail_len, MPT_WHO ": lane %zu listener on %s: %s", i, addr,
			           d);
			for (size_t j = 0; j < i; j++) {
				ctx->lane_l[j]->ops->close(ctx->lane_l[j]);
				ctx->lane_l[j] = NULL;
			}
			return st;
		}
	}
	ctx->listening = true;
	return TW_OK;
}

/* Where this instance's lanes are advertised when their listeners are
 * bound to a wildcard and the user named no interfaces: the address the
 * peer reached this host at (the control connection's local address), to
 * take each lane's port. Whatever the default rules would pick (another
 * interface of a host with several, loopback when every interface is a
 * veth) may not be reachable from that peer, and this one is. False: the
 * listeners' own addresses. */
static bool mpt_reached_at(const mpt_channel *ch, struct sockaddr_storage *out)
{
	const mpt_ctx *ctx = ch->ctx;
	tw_conn_opts opts;
	mpt_conn_opts(ctx, &opts);
	return !opts.ifname[0] && tw__tcp_addr_is_wildcard(&ctx->listen_addr) &&
	       ch->control->ops->local_address && ch->control->ops->local_address(ch->control, out) &&
	       tw__tcp_addr_unmap_v4(out) && out->ss_family == ctx->listen_addr.ss_family &&
	       (!opts.family || out->ss_family == opts.family);
}

/* Lane i's address in the ServerHello: its listener's, or its port at
 * `reached` (mpt_reached_at; NULL: none). */
static void mpt_lane_advertised(const mpt_ctx *ctx, size_t i,
                                const struct sockaddr_storage *reached, char *out, size_t out_len)
{
	const char *own = ctx->lane_l[i]->ops->address(ctx->lane_l[i]);
	struct sockaddr_storage adv, at;
	socklen_t sl;
	char ignored[TW_DETAIL_MAX];
	if (!reached || tw__tcp_addr_parse(own, &adv, &sl, ignored, sizeof(ignored)) != TW_OK) {
		snprintf(out, out_len, "%s", own);
		return;
	}
	at = *reached;
	tw__tcp_addr_set_port(&at, tw__tcp_addr_port(&adv));
	tw__tcp_addr_format((struct sockaddr *)&at, out, out_len);
}

/* The lanes' grace ran out: the timer runs only while they are not up
 * and the instance neither failed nor closed (each stops it). */
static void mpt_on_lane_wait(uv_timer_t *t)
{
	mpt_channel *ch = t->data;
	mpt_fail(ch, ch->control_end, ch->control_detail); /* stops the timer */
}

static tw_status_t mpt_watch_control(mpt_channel *ch);

/* Listen end: the control connection carries nothing after the
 * ServerHello (stock's connect end never writes on it), so its read ends
 * only when the peer's end does. Before the lanes are up that is the only
 * sign that the peer left: operations queued for the lanes would wait
 * for good. Once they are up, the lanes' own ends take over. */
static void mpt_on_control(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                           uint64_t len, void *arg)
{
	(void)c;
	(void)len;
	mpt_channel *ch = arg;
	tw__free(buf);
	bool live = !ch->closed && ch->failed == TW_OK;
	if (st == TW_OK && live && mpt_watch_control(ch) == TW_OK) {
		mpt_unref(ch); /* a frame stock never sends: ignored, watched again */
		return;
	}
	if (st != TW_OK && st != TW_ERR_CLOSED && live && !ch->ready && !ch->lane_wait_on) {
		ch->control_end = st;
		tw__detail(ch->control_detail, sizeof(ch->control_detail),
		           MPT_WHO ": the peer's control connection ended and its lanes did not "
		                   "connect within %d ms: %s",
		           MPT_LANE_GRACE_MS, detail);
		(void)uv_timer_init(&ch->ctx->base.env->loop->uv, &ch->lane_wait); /* cannot fail */
		ch->lane_wait.data = ch;
		ch->lane_wait_on = true;
		ch->refs++; /* the timer's, until closed */
		uv_timer_start(&ch->lane_wait, mpt_on_lane_wait, MPT_LANE_GRACE_MS, 0);
	}
	mpt_unref(ch);
}

static tw_status_t mpt_watch_control(mpt_channel *ch)
{
	ch->refs++;
	tw_status_t st = ch->control->ops->read_alloc(ch->control, MPT_HELLO_MAX, mpt_on_control, ch);
	if (st != TW_OK)
		ch->refs--;
	return st;
}

static tw_status_t mpt_server_hello(mpt_channel *ch, char *detail, size_t detail_len)
{
	mpt_ctx *ctx = ch->ctx;
	tw_status_t st = mpt_listen(ctx, detail, detail_len);
	if (st != TW_OK)
		return st;
	tw_wire_lane_advertisement adv[MPT_MAX_LANES];
	char addrs[MPT_MAX_LANES][TW_TCP_ADDR_MAX];
	struct sockaddr_storage reached;
	bool at_reached = mpt_reached_at(ch, &reached);
	for (size_t i = 0; i < ctx->lanes; i++) {
		mpt_lane_advertised(ctx, i, at_reached ? &reached : NULL, addrs[i], sizeof(addrs[i]));
		adv[i].address.s = addrs[i];
		adv[i].address.n = strlen(addrs[i]);
		adv[i].registration_id = ch->ids[i] = ctx->next_id++;
	}
	tw_wire_mpt_packet p = { TW_MPT_SERVER_HELLO, ctx->lanes, adv, 0 };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_mpt_packet(&w, &p);
	if (tw__nop_writer_finish(&w) != TW_OK) {
		tw__nop_writer_free(&w);
		tw__detail(detail, detail_len, MPT_WHO ": encoding the ServerHello: out of memory");
		return TW_ERR_NOMEM;
	}
	tw_iov iov = { w.buf, w.len };
	ch->refs++;
	st = ch->control->ops->write(ch->control, &iov, 1, TW_WRITE_OBJECT, mpt_on_hello_written, ch);
	if (st != TW_OK) {
		ch->refs--;
		tw__nop_writer_free(&w);
		tw__detail(detail, detail_len, MPT_WHO ": writing the ServerHello: out of memory");
		return st;
	}
	ch->hello_owned = w.buf; /* outlives the write: freed with the channel */
	if (mpt_watch_control(ch) != TW_OK) {
		tw__detail(detail, detail_len, MPT_WHO ": watching the control connection: out of memory");
		return TW_ERR_NOMEM;
	}
	tw__list_push_back(&ctx->waiting, &ch->wait_link);
	return TW_OK;
}

/* ---- the handshake: connect end ---------------------------------------------------- */

static void mpt_on_client_hello_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	(void)c;
	mpt_channel *ch = arg;
	if (st != TW_OK && !ch->closed) {
		char d[TW_DETAIL_MAX];
		tw__detail(d, sizeof(d), "writing a ClientHello: %s", detail);
		mpt_fail(ch, st, d);
	}
	mpt_unref(ch);
}

/* Connects lane i to what the ServerHello advertised, hello first. A
 * link-local address takes this host's scope where the control connection
 * is of the lanes' kind (the server's interface name means nothing here),
 * as the pipe's own answer does. */
static tw_status_t mpt_connect_lane(mpt_channel *ch, size_t i, const tw_wire_lane_advertisement *a,
                                    char *detail, size_t detail_len)
{
	mpt_ctx *ctx = ch->ctx;
	tw_conn_opts opts;
	mpt_conn_opts(ctx, &opts);
	char d[TW_DETAIL_MAX], addr[TW_DETAIL_MAX / 2];
	const tw_transport_ops *lops = ctx->lane_t[i]->ops;
	if (lops->answer_address)
		lops->answer_address(ch->control->transport->ops == lops ? ch->control : NULL,
		                     a->address.s, addr, sizeof(addr));
	else
		snprintf(addr, sizeof(addr), "%s", a->address.s);
	tw_status_t st = lops->connect(ctx->lane_t[i], addr, &opts, &ch->lanes[i], d, sizeof(d));
	if (st != TW_OK) {
		tw__detail(detail, detail_len, "lane %zu: connect to '%s': %s", i, addr, d);
		return st;
	}
	tw_wire_mpt_packet p = { TW_MPT_CLIENT_HELLO, 0, NULL, a->registration_id };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_mpt_packet(&w, &p);
	if (tw__nop_writer_finish(&w) != TW_OK || w.len > sizeof(ch->client_hello[i])) {
		tw__nop_writer_free(&w);
		tw__detail(detail, detail_len, "lane %zu: encoding the ClientHello: out of memory", i);
		return TW_ERR_NOMEM;
	}
	memcpy(ch->client_hello[i], w.buf, w.len);
	ch->client_hello_len[i] = w.len;
	tw__nop_writer_free(&w);
	tw_iov iov = { ch->client_hello[i], ch->client_hello_len[i] };
	ch->refs++;
	st = ch->lanes[i]->ops->write(ch->lanes[i], &iov, 1, TW_WRITE_OBJECT | TW_WRITE_HELLO,
	                              mpt_on_client_hello_written, ch);
	if (st != TW_OK) {
		ch->refs--;
		tw__detail(detail, detail_len, "lane %zu: writing the ClientHello: out of memory", i);
	}
	return st;
}

static void mpt_on_server_hello(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                                uint64_t len, void *arg)
{
	(void)c;
	mpt_channel *ch = arg;
	char d[TW_DETAIL_MAX];
	tw_wire_mpt_packet p;
	memset(&p, 0, sizeof(p));
	if (ch->closed) {
		tw__free(buf);
		mpt_unref(ch);
		return;
	}
	if (st != TW_OK) {
		tw__detail(d, sizeof(d), "reading the ServerHello: %s", detail);
		mpt_fail(ch, st, d);
	} else if ((st = tw__wire_decode_mpt_packet(buf, (size_t)len, &p, NULL, d, sizeof(d))) !=
	           TW_OK) {
		char e[TW_DETAIL_MAX];
		tw__detail(e, sizeof(e), "a malformed ServerHello: %s", d);
		mpt_fail(ch, TW_ERR_PROTO, e);
	} else if (p.kind != TW_MPT_SERVER_HELLO || p.num_lanes != ch->ctx->lanes) {
		tw__detail(d, sizeof(d),
		           "the peer's first packet is %s with %zu lanes where a ServerHello with %zu "
		           "was expected (spec 4.3)",
		           p.kind == TW_MPT_SERVER_HELLO ? "a ServerHello" : "not a ServerHello",
		           p.num_lanes, ch->ctx->lanes);
		mpt_fail(ch, TW_ERR_PROTO, d);
	} else {
		for (size_t i = 0; i < p.num_lanes && ch->failed == TW_OK; i++) {
			tw_status_t lst = mpt_connect_lane(ch, i, &p.lanes[i], d, sizeof(d));
			if (lst != TW_OK)
				mpt_fail(ch, lst, d);
		}
		if (ch->failed == TW_OK)
			mpt_lanes_up(ch);
	}
	tw__wire_mpt_packet_free(&p);
	tw__free(buf);
	mpt_unref(ch);
}

/* ---- instances ------------------------------------------------------------------------- */

static tw_status_t mpt_open(tw_channel_ctx *base, tw_endpoint_t endpoint, tw_conn *const *conns,
                            size_t num_conns, unsigned flags, tw_channel **out, char *detail,
                            size_t detail_len)
{
	(void)flags;
	mpt_ctx *ctx = (mpt_ctx *)base;
	mpt_channel *ch = num_conns == 1 ? tw__calloc(1, sizeof(*ch)) : NULL;
	if (!ch) {
		for (size_t i = 0; i < num_conns; i++)
			conns[i]->ops->close(conns[i]);
		tw__detail(detail, detail_len,
		           num_conns == 1 ? MPT_WHO ": out of memory"
		                          : MPT_WHO ": needs 1 connection, got %zu",
		           num_conns);
		return num_conns == 1 ? TW_ERR_NOMEM : TW_ERR_INVAL;
	}
	ch->base.ops = &mpt_instance_ops;
	ch->base.ctx = base;
	ch->ctx = ctx;
	ch->control = conns[0];
	ch->refs = 1;
	tw__list_init(&ch->queued);
	tw__list_init(&ch->wait_link);
	tw_status_t st;
	if (endpoint == TW_ENDPOINT_LISTEN) {
		st = mpt_server_hello(ch, detail, detail_len);
	} else {
		ch->refs++;
		st = ch->control->ops->read_alloc(ch->control, MPT_HELLO_MAX, mpt_on_server_hello, ch);
		if (st != TW_OK) {
			ch->refs--;
			tw__detail(detail, detail_len, MPT_WHO ": reading the ServerHello: out of memory");
		}
	}
	if (st != TW_OK) {
		mpt_close(&ch->base);
		return st;
	}
	*out = &ch->base;
	return TW_OK;
}

static size_t mpt_num_connections(tw_channel_ctx *c)
{
	(void)c;
	return 1;
}

/* ---- the context ------------------------------------------------------------------------ */

static void mpt_destroy(tw_channel_ctx *base)
{
	mpt_ctx *ctx = (mpt_ctx *)base;
	for (size_t i = 0; i < ctx->lanes; i++)
		if (ctx->lane_t[i])
			ctx->lane_t[i]->ops->destroy(ctx->lane_t[i]);
	tw__free(ctx->cpu.descriptor);
	tw__free(ctx);
}

static void mpt_shutdown(tw_channel_ctx *base)
{
	mpt_ctx *ctx = (mpt_ctx *)base;
	for (size_t i = 0; i < ctx->lanes; i++)
		if (ctx->lane_l[i]) {
			ctx->lane_l[i]->ops->close(ctx->lane_l[i]);
			ctx->lane_l[i] = NULL;
		}
	ctx->listening = false;
	mpt_flush_limbo(ctx); /* empty already: every instance closed first */
	for (size_t i = 0; i < ctx->lanes; i++)
		if (ctx->lane_t[i]->ops->shutdown)
			ctx->lane_t[i]->ops->shutdown(ctx->lane_t[i]);
}

static tw_status_t mpt_create(const tw_channel_env *env, const char *options, tw_channel_ctx **out,
                              char *detail, size_t detail_len)
{
	static const tw_option table[] = {
		{ "lanes", TW_OPT_U64, offsetof(mpt_opts, lanes), 0, 1, MPT_MAX_LANES },
		{ "listen", TW_OPT_STR, offsetof(mpt_opts, listen), sizeof(((mpt_opts *)0)->listen), 0,
		  0 },
	};
	mpt_opts o = { 2, "0.0.0.0:0" };
	tw_status_t st = tw__options_parse(MPT_WHO, options, table, 2, &o, NULL, 0, detail,
	                                   detail_len);
	if (st != TW_OK)
		return st;
	struct sockaddr_storage ss;
	socklen_t sl;
	char d0[TW_DETAIL_MAX];
	if (tw__tcp_addr_parse(o.listen, &ss, &sl, d0, sizeof(d0)) != TW_OK) {
		tw__detail(detail, detail_len, MPT_WHO ": option listen: %s", d0);
		return TW_ERR_INVAL;
	}
	if (tw__tcp_addr_port(&ss) != 0 && tw__tcp_addr_port(&ss) + (o.lanes - 1) > 65535) {
		tw__detail(detail, detail_len,
		           MPT_WHO ": option listen=%s: lanes listen on port %u and the %llu after it, "
		           "past 65535",
		           o.listen, tw__tcp_addr_port(&ss), (unsigned long long)(o.lanes - 1));
		return TW_ERR_INVAL;
	}
	const tw_transport_ops *lane_ops = env->find_transport_kind("uv");
	mpt_ctx *ctx = tw__calloc(1, sizeof(*ctx));
	if (!ctx || !lane_ops) {
		tw__free(ctx);
		tw__detail(detail, detail_len, ctx ? MPT_WHO ": out of memory"
		                                   : MPT_WHO ": no uv transport for its lanes");
		return ctx ? TW_ERR_NOMEM : TW_ERR_UNSUPPORTED;
	}
	ctx->opts = o;
	ctx->listen_addr = ss;
	ctx->lanes = (size_t)o.lanes;
	tw__list_init(&ctx->waiting);
	tw__list_init(&ctx->limbo);
	/* "<N>" then ":<lane domain descriptor>" per lane (spec 4.3) */
	size_t cap = 8 + ctx->lanes * (TW_DETAIL_MAX / 4), n = 0;
	char *desc = tw__malloc(cap);
	if (desc)
		n = (size_t)snprintf(desc, cap, "%zu", ctx->lanes);
	for (size_t i = 0; desc && i < ctx->lanes; i++) {
		char d[TW_DETAIL_MAX];
		st = lane_ops->create(env->loop, NULL, &ctx->lane_t[i], d, sizeof(d));
		if (st != TW_OK) {
			tw__detail(detail, detail_len, MPT_WHO ": lane %zu: %s", i, d);
			tw__free(desc);
			ctx->cpu.descriptor = NULL;
			mpt_destroy(&ctx->base);
			return st;
		}
		const char *dd = ctx->lane_t[i]->ops->domain_descriptor(ctx->lane_t[i]);
		if (n < cap)
			n += (size_t)snprintf(desc + n, cap - n, ":%s", dd);
	}
	if (!desc || n >= cap) {
		tw__free(desc);
		mpt_destroy(&ctx->base);
		tw__detail(detail, detail_len, MPT_WHO ": device descriptor: out of memory");
		return TW_ERR_NOMEM;
	}
	ctx->cpu.device = tw_device_cpu();
	ctx->cpu.descriptor = desc;
	ctx->cpu.descriptor_len = n;
	ctx->base.ops = &tw__mpt_channel_ops;
	ctx->base.env = env;
	ctx->base.num_devices = 1;
	ctx->base.devices = &ctx->cpu;
	*out = &ctx->base;
	return TW_OK;
}

const tw_channel_ops tw__mpt_channel_ops = {
	.kind = "mpt",
	.create = mpt_create,
	.can_communicate = NULL,
	.num_connections = mpt_num_connections,
	.open = mpt_open,
	.shutdown = mpt_shutdown,
	.destroy = mpt_destroy,
};
