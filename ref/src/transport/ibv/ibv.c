/*
 * ibv.c - the RDMA verbs transport ("ibv", spec/wire.md 2.4),
 * wire-compatible with stock TensorPipe's.
 *
 * A connection starts as a TCP socket (tcp/socket.h: the same addresses,
 * listener and options as uv). Each side writes one raw 56-byte set-up
 * record (its LID, GID, QP number, MTU, and the address and rkey of its
 * 2 MiB inbox) and reads the peer's. Stock writes its record at once; a
 * RoCE GID only reaches GIDs of its own family (IPv4-mapped, link-local,
 * other IPv6), and stock always uses GID index 0 (link-local on most RoCE
 * ports) where we prefer a routable one. So the side that connects reads
 * the peer's record first and answers with a GID of the peer's family
 * (device.h, tw__ibv_match_gid); the side that accepts waits up to
 * TW_IB_ANSWER_WAIT_MS for the peer's record (a stock client's comes at
 * once) and answers it the same way, or sends its own first when none came
 * (a tensorwire client waits for it). A connecting side that remembers
 * the GID a listener's record had (the transport keeps the last
 * IBV_MEMO listeners, by address) sends its own first in that family, and
 * a tensorwire listener reads it within its wait: no wait between two
 * tensorwire peers after their first connection. Records whose GIDs still
 * differ in family fail the connection, saying so (and a remembered
 * family that led there is forgotten). Then its RC
 * queue pair goes to RTR and RTS towards the peer's, and the socket carries
 * nothing more: it is watched only to learn that the peer is gone.
 *
 * Frames (transport/ring): we frame into a local outbox ring and copy each
 * new range to the same offsets of the peer's inbox with RDMA WRITE WITH
 * IMMEDIATE (the immediate is the byte count); our own inbox's head moves
 * by each immediate that arrives; after we read from our inbox we return
 * credit with a zero-length SEND WITH IMMEDIATE of the bytes consumed,
 * which moves our peer's outbox tail. Immediates are host order, as in
 * stock. A write completes (its callback runs) only once the RDMA writes
 * holding its last byte have completed, that is, once the peer's memory
 * has it: a pipe closed after its callbacks loses nothing in flight.
 *
 * Resources (device.h chooses the device, port and GID): per transport
 * instance a protection domain, a completion channel watched on the loop,
 * and a shared receive queue where the device has one (else each queue
 * pair gets its own receive queue: same wire). A connection that goes
 * puts back every shared receive it took (spec 2.4.3.h): its queue pair is
 * kept until the device's QP_LAST_WQE_REACHED event, at most reap_wait_ms
 * (TW_IB_REAP_WAIT_MS, 1000 unless given). Per connection a completion
 * queue sized so that it cannot overflow (send queue depth + receive
 * depth), a queue pair and two registered 2 MiB buffers. Every depth is
 * capped by the device's limits (max_qp_wr, max_srq_wr, max_cqe), and RDMA
 * writes by the port's max_msg_sz (stock never splits one).
 *
 * Completions: the status is read first; on an error only wr_id is
 * trusted (the verbs spec defines no other field then). An error fails the
 * connection the way the peer's exit does (below), naming the operation,
 * the device and ibv_wc_status_str.
 *
 * The end: the socket's end (EOF, reset) or an error completion means the
 * peer is gone. What it wrote before that stays readable: the completion
 * queue is drained first, then the end (TW_ERR_EOF, TW_ERR_CONNRESET) is
 * reported once the inbox is empty, and a hang-up while bytes wait unread
 * with no read queued (transport.h). A write whose bytes are all posted
 * waits for its completions first (the peer may have read them and gone
 * before their ACK came back: spec 2.4.4.c); one waiting for credit fails
 * at once. Bounds: connect_timeout_ms bounds the connect and the exchange;
 * liveness_ms is the socket's (tcp/socket.h), and the queue pair's own
 * retries (timeout 14, retry_cnt 7: about half a second) end a connection
 * whose peer stopped acknowledging.
 *
 * Fork: before the transport registers anything, device.h makes fork safe
 * (ibv_fork_init) unless the kernel makes it unneeded or the user opted out
 * (TW_IB_FORK_SAFE=0 or option fork_safe=false). A context does not
 * survive fork (the core refuses a forked child's calls, naming the fork).
 *
 * This file must not know about nop objects, packets or pipes.
 */
#define _GNU_SOURCE
#include "transport/ibv/ibv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "platform/error.h"
#include "platform/list.h"
#include "platform/loop.h"
#include "platform/mutant.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "transport/conn_core.h"
#include "transport/ibv/device.h"
#include "transport/ring/ring.h"
#include "transport/ring/ring_conn.h"
#include "transport/stream/listener.h"
#include "transport/tcp/addr.h"
#include "transport/tcp/socket.h"

#define IBV_WHO TW_IBV_WHO
#define IBV_RECORD_LEN 56
/* How long the accepting side waits for the peer's set-up record before
 * sending its own (option answer_wait_ms, TW_IB_ANSWER_WAIT_MS; 0: never
 * waits), where the port's GID 0 (stock's) is of another family than ours.
 * Paid on the first connection between two tensorwire peers there (later
 * ones send first in the remembered family, spec 2.4.5.d); a stock
 * record later than that (a loaded or emulated host) meets a GID it cannot
 * reach, and the connection fails saying so. */
#define TW_IB_ANSWER_WAIT_MS 100
#define IBV_DEPTH 1024 /* send, receive and shared receive queue depth, at most */
#define IBV_CAP TW_RING_INBOX_CAPACITY
/* wr_id: a receive, a credit send, or (n << 1) | 1 for an RDMA write of n bytes */
#define IBV_WRID_RECV UINT64_MAX
#define IBV_WRID_CREDIT 0
#define IBV_POLL_BATCH 32
/* How long a closed connection may keep its queue pair for RDMA writes
 * still in flight (see ib_conn_close) when neither they complete nor the
 * queue pair's retries give up (a peer out of receives retries forever). */
#define IBV_LINGER_MS 10000
/* How many listeners' GIDs a transport remembers (spec 2.4.5.d) */
#define IBV_MEMO 64
/* How long a gone connection's queue pair on the shared receive queue is
 * kept for its QP_LAST_WQE_REACHED event (spec 2.4.3.h; ib_srq_reclaim)
 * when the device raises none (option reap_wait_ms, TW_IB_REAP_WAIT_MS; at
 * least 1) */
#define TW_IB_REAP_WAIT_MS 1000

typedef struct ib_conn ib_conn;
typedef struct ib_transport ib_transport;

struct ib_conn {
	tw_conn_core core; /* first; phase SETUP: connecting, then the exchange */
	ib_transport *t;
	int fd;
	uv_poll_t poll;
	int poll_events;
	uv_timer_t timer; /* the connect deadline */
	bool sock_connected;
	bool connected;
	tw_conn_opts opts;
	/* the set-up records (2.4.5): the connecting side answers: it reads
	 * the peer's first and takes a GID of the peer's family. The accepting
	 * side waits for the peer's for up to answer_wait_ms (await_peer: a
	 * stock client sends at once, and is answered in its family), then
	 * sends its own (an answering peer, ours, waits for it). */
	bool answers;
	bool await_peer;
	bool accepted;
	/* how the set-up records went (IB_REC_REMEMBERED: sent first, in the
	 * family this listener used before, 2.4.5.d) */
	enum { IB_REC_ANSWERED, IB_REC_REMEMBERED, IB_REC_AT_ONCE, IB_REC_PEER_FIRST,
	       IB_REC_WAITED } rec_order;
	char describe[TW_DETAIL_MAX]; /* ib_conn_describe's, once asked */
	uint64_t deadline; /* the connect deadline (loop ms), 0: none */
	int gid_index;
	union ibv_gid gid;
	uint8_t rec_out[IBV_RECORD_LEN];
	size_t out_done;
	uint8_t rec_in[IBV_RECORD_LEN];
	size_t in_done;
	/* verbs */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *inbox_mem, *outbox_mem;
	struct ibv_mr *inbox_mr, *outbox_mr;
	uint64_t inbox_hdr[5], outbox_hdr[5]; /* TW_RING_HEADER_SIZE, ours alone */
	tw_ring inbox, outbox;
	uint64_t peer_addr;
	uint32_t peer_rkey;
	bool qp_ready; /* RTS towards the peer: RDMA writes may go */
	/* the data path */
	tw_ring_op *wcur;   /* the first write not yet all in the outbox */
	uint64_t sent;       /* outbox bytes posted as RDMA writes */
	uint64_t landed;     /* outbox bytes whose RDMA writes completed */
	uint32_t sq_used;    /* send work requests outstanding */
	uint64_t credit_owed; /* inbox bytes consumed and not yet returned */
	/* the end */
	bool peer_gone;
	bool wc_failed; /* an error completion came: nothing posted lands any more */
	tw_status_t gone_status;
	char gone_detail[TW_DETAIL_MAX];
	/* closed with RDMA writes in flight: kept until they land */
	bool lingering;
	tw_list linger_link;
	tw_list cq_link; /* in the transport's `cqs` from its completion queue on */
	bool last_wqe;   /* its QP_LAST_WQE_REACHED event came */
};

/* A gone connection's queue pair on the shared receive queue and its
 * completion queue, kept until the QP_LAST_WQE_REACHED event (or
 * reap_wait_ms) says every receive it took has its completion written
 * (ib_srq_reclaim). */
typedef struct ib_reap {
	tw_list link; /* in the transport's `reaping`, oldest first */
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	uint64_t due_ms; /* loop time */
} ib_reap;

struct ib_transport {
	tw_transport base;
	tw_ibv_choice ch;
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan;
	struct ibv_srq *srq; /* NULL: per-QP receive queues */
	uint32_t srq_owed;   /* shared receives used up and not yet put back */
	uv_poll_t chan_poll;
	bool chan_poll_init; /* chan_poll needs closing */
	bool chan_poll_on;   /* and watches the channel */
	uv_poll_t async_poll; /* the device's async events (QP_LAST_WQE_REACHED) */
	bool async_init;      /* async_poll needs closing */
	uv_timer_t reap_timer; /* the first of `reaping` is due */
	bool reap_timer_init;
	tw_list reaping;      /* ib_reap: gone connections' queue pairs */
	uint32_t sq_depth, rq_depth, cq_depth;
	uint32_t max_write;
	uint64_t answer_wait_ms;
	uint64_t reap_wait_ms;
	char describe[TW_DETAIL_MAX];
	/* the GID of each listener's last record, by its address (the
	 * connecting side's peer string), oldest replaced first (2.4.5.d) */
	struct ib_memo {
		char peer[sizeof(((tw_conn_core *)0)->peer)];
		union ibv_gid gid;
	} memo[IBV_MEMO];
	unsigned memo_next;
	tw_list lingering; /* closed connections whose writes are landing */
	tw_list cqs;       /* every connection that has a completion queue */
	/* busy polling (option busy_poll_us, TW_LOOP_BUSY_DEFAULT_US unless
	 * given; 0: off): after activity the loop polls every completion queue
	 * on each pass, unarmed, for busy_ns */
	tw_loop_poller poller; /* active while polling (ib_spinning) */
};

static const tw_conn_ops ib_conn_ops;

static void ib_drive(ib_conn *c);
static void ib_update_poll(ib_conn *c);
static void ib_kick(ib_transport *t);

/* The loop polls the completion queues (busy polling): they stay unarmed. */
static bool ib_spinning(const ib_transport *t)
{
	return t->poller.active;
}

/* ---- what listeners answered (2.4.5.d) ---------------------------------------- */

static struct ib_memo *ib_memo_find(ib_transport *t, const char *peer)
{
	for (unsigned i = 0; i < IBV_MEMO; i++)
		if (t->memo[i].peer[0] && strcmp(t->memo[i].peer, peer) == 0)
			return &t->memo[i];
	return NULL;
}

static void ib_memo_put(ib_transport *t, const char *peer, const union ibv_gid *gid)
{
	struct ib_memo *m = ib_memo_find(t, peer);
	if (!m) {
		m = &t->memo[t->memo_next];
		t->memo_next = (t->memo_next + 1) % IBV_MEMO;
		snprintf(m->peer, sizeof(m->peer), "%s", peer);
	}
	m->gid = *gid;
}

static void ib_memo_forget(ib_transport *t, const char *peer)
{
	struct ib_memo *m = ib_memo_find(t, peer);
	if (m)
		m->peer[0] = '\0';
}

/* ---- helpers -------------------------------------------------------------- */

static void ib_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t ib_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static const char *ib_dev(const ib_conn *c)
{
	return c->t->ch.dev_name;
}

static void ib_conn_release(ib_conn *c);
static void ib_srq_reclaim(ib_conn *c);
static void ib_reap_finish(ib_transport *t, ib_reap *r);

/* Fails the connection (tw__conn_fail); a closed one still delivering
 * its last bytes (ib_conn_close) just gives up on them. */
__attribute__((format(printf, 3, 4))) static void ib_fail(ib_conn *c, tw_status_t st,
                                                          const char *fmt, ...)
{
	if (c->lingering) {
		ib_conn_release(c);
		return;
	}
	char d[TW_DETAIL_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d, sizeof(d), fmt, ap);
	va_end(ap);
	tw__conn_fail(&c->core, st, "%s", d);
}

/* A verb failed with errno value err: fail the connection naming it. */
static void ib_fail_verb(ib_conn *c, const char *verb, int err)
{
	char eb[128];
	ib_fail(c, err == ENOMEM ? TW_ERR_NOMEM : TW_ERR_SYS, IBV_WHO ": %s on %s (peer %s): %s",
	        verb, ib_dev(c), c->core.peer, tw__strerror(err, eb, sizeof(eb)));
}

static void ib_fail_errno(ib_conn *c, const char *what, int err)
{
	char eb[128];
	tw__strerror(err, eb, sizeof(eb));
	if (err == ETIMEDOUT && c->core.phase == TW_CONN_SETUP)
		ib_fail(c, TW_ERR_TIMEDOUT,
		        IBV_WHO ": connect %s: not connected within the connect timeout of %llu ms: "
		        "%s",
		        c->core.peer, (unsigned long long)c->opts.connect_timeout_ms, eb);
	else if (err == ECONNRESET || err == EPIPE)
		ib_fail(c, TW_ERR_CONNRESET, IBV_WHO ": %s %s: %s", what, c->core.peer, eb);
	else
		ib_fail(c, TW_ERR_SYS, IBV_WHO ": %s %s: %s", what, c->core.peer, eb);
}

/* ---- connection lifetime ---------------------------------------------------- */

static void ib_free_conn(tw_conn_core *core)
{
	ib_conn *c = (ib_conn *)core;
	if (tw__list_linked(&c->cq_link))
		tw__list_remove(&c->cq_link);
	if (c->qp && c->cq && c->t->srq && !TW_MUTANT("ibv_srq_leaked"))
		ib_srq_reclaim(c); /* may take the queue pair and its queue */
	if (c->qp)
		(void)ibv_destroy_qp(c->qp);
	if (c->cq)
		(void)ibv_destroy_cq(c->cq);
	if (c->inbox_mr)
		(void)ibv_dereg_mr(c->inbox_mr);
	if (c->outbox_mr)
		(void)ibv_dereg_mr(c->outbox_mr);
	if (c->inbox_mem)
		(void)tw__sys_munmap(c->inbox_mem, IBV_CAP);
	if (c->outbox_mem)
		(void)tw__sys_munmap(c->outbox_mem, IBV_CAP);
	if (c->fd >= 0)
		tw__sys_close(c->fd);
	tw__free(c);
}

static void ib_failed(tw_conn_core *core)
{
	ib_conn *c = (ib_conn *)core;
	c->wcur = NULL;
	uv_timer_stop(&c->timer);
	ib_update_poll(c);
}

/* The peer is gone: the writes failed, reads go on (ring_conn.h). */
static void ib_writes_failed(tw_conn_core *core)
{
	((ib_conn *)core)->wcur = NULL;
}

static const tw_conn_core_ops ib_core_ops = { tw__ring_op_free, ib_free_conn, ib_failed,
	                                      ib_writes_failed };

static void ib_on_handle_closed(uv_handle_t *h)
{
	tw__conn_core_unref(h->data);
}

/* Lets the connection go: its loop handles close, then it is freed. */
static void ib_conn_release(ib_conn *c)
{
	if (c->lingering) {
		c->lingering = false;
		tw__list_remove(&c->linger_link);
	}
	if (c->fd >= 0 && c->connected)
		tw__sys_shutdown_write(c->fd); /* the end is out now (transport.h) */
	uv_poll_stop(&c->poll);
	c->poll_events = 0;
	uv_close((uv_handle_t *)&c->poll, ib_on_handle_closed);
	uv_close((uv_handle_t *)&c->timer, ib_on_handle_closed);
}

static uint64_t ib_outbox_head(const ib_conn *c)
{
	return tw__ring_load_marker(&c->outbox, TW_RING_PRODUCER);
}

static void ib_on_linger_timer(uv_timer_t *h)
{
	ib_conn_release(h->data);
}

/* Close. Bytes a write already put in the outbox are the peer's as much as
 * bytes in a TCP socket's send buffer are: a connection closed before its
 * RDMA writes landed keeps its queue pair until they do (their
 * completions, an error, the peer's exit, IBV_LINGER_MS or the context's
 * shutdown end it), so the RequestedConnection a pipe wrote and never
 * waited for, or a goodbye, still arrives. Pending operations fail with
 * TW_ERR_CLOSED at once, as the contract says; no caller buffer is touched
 * again (the outbox is ours). */
static void ib_conn_close(tw_conn *base)
{
	ib_conn *c = (ib_conn *)base;
	bool live = (c->core.phase == TW_CONN_OPEN || c->core.phase == TW_CONN_SETUP) &&
	            !c->peer_gone;
	if (!tw__conn_close_ops(&c->core))
		return;
	c->wcur = NULL;
	if (live && c->landed < ib_outbox_head(c)) {
		c->lingering = true;
		tw__list_push_back(&c->t->lingering, &c->linger_link);
		uv_timer_start(&c->timer, ib_on_linger_timer, IBV_LINGER_MS, 0);
		ib_update_poll(c); /* the set-up exchange goes on if it must */
		return;
	}
	ib_conn_release(c);
}

static const char *ib_conn_peer(tw_conn *base)
{
	return ((ib_conn *)base)->core.peer;
}

static bool ib_conn_has_unread(tw_conn *base)
{
	ib_conn *c = (ib_conn *)base;
	return tw__ring_conn_unread(&c->core, &c->inbox) > 0;
}

/* tw_pipe_info's transport_detail for a pipe whose descriptor connection
 * this is: the transport's choice, then this connection's GID (it answers
 * in the peer's family, 2.4.5) and how the set-up records went. Made when
 * asked (once per pipe), not for every connection. */
static const char *ib_conn_describe(tw_conn *base)
{
	static const char *const order[] = {
		[IB_REC_ANSWERED] = "answered the listener's",
		[IB_REC_REMEMBERED] = "sent first, in the family this listener used before",
		[IB_REC_AT_ONCE] = "sent at once",
		[IB_REC_PEER_FIRST] = "answered the peer's, which came first",
		[IB_REC_WAITED] = "sent after waiting for the peer's (answer_wait_ms)",
	};
	ib_conn *c = (ib_conn *)base;
	if (!c->qp_ready)
		return c->t->describe;
	char a[INET6_ADDRSTRLEN] = "?";
	(void)inet_ntop(AF_INET6, c->gid.raw, a, sizeof(a));
	snprintf(c->describe, sizeof(c->describe), "%.380s; this connection: GID %d (%s), set-up record %s",
	         c->t->describe, c->gid_index, a, order[c->rec_order]);
	return c->describe;
}

static bool ib_conn_peer_left(tw_conn *base)
{
	ib_conn *c = (ib_conn *)base;
	return c->peer_gone || tw__conn_peer_left(&c->core, c->fd);
}

static bool ib_conn_was_connected(tw_conn *base)
{
	return ((ib_conn *)base)->connected;
}

/* ---- receive queues ----------------------------------------------------------- */

/* Posts *n receives (no scatter entries: immediates only) to the shared
 * receive queue, or to qp's own when there is none; *n becomes the number
 * not posted. Returns the errno value of the failing post, 0 on success. */
static int ib_post_recvs(ib_transport *t, struct ibv_qp *qp, uint32_t *n)
{
	struct ibv_recv_wr wr[16];
	while (*n > 0) {
		uint32_t k = *n < 16 ? *n : 16;
		memset(wr, 0, sizeof(wr));
		for (uint32_t i = 0; i < k; i++) {
			wr[i].wr_id = IBV_WRID_RECV;
			wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
		}
		struct ibv_recv_wr *bad = NULL;
		int rc = t->srq ? ibv_post_srq_recv(t->srq, wr, &bad) : ibv_post_recv(qp, wr, &bad);
		if (rc != 0) {
			/* the requests before `bad` are posted */
			for (uint32_t i = 0; i < k && &wr[i] != bad; i++)
				--*n;
			return rc;
		}
		*n -= k;
	}
	return 0;
}

/* Puts back n shared receives that completions used up, with any an
 * earlier post failed to put back: each one not put back is lost to every
 * connection of the transport, and with none left the peers' writes meet
 * receiver-not-ready retries. What a failing post did not put back is
 * owed, and tried again by the next call: while some receives are not
 * owed, they are posted or in use, and a completion or a gone connection
 * calls again. Once all are owed the queue is empty and nothing would:
 * then the errno value of the failing post is returned, and every
 * connection of the transport fails naming it (their peers' writes
 * would wait forever); a new connection tries again. */
static int ib_srq_put_back(ib_transport *t, uint32_t n)
{
	t->srq_owed += n;
	int rc = t->srq_owed ? ib_post_recvs(t, NULL, &t->srq_owed) : 0;
	if (rc != 0 && TW_MUTANT("ibv_srq_post_dropped"))
		t->srq_owed = 0;
	if (rc == 0 || t->srq_owed < t->rq_depth)
		return 0;
	for (tw_list *it = t->cqs.next; it != &t->cqs; it = it->next) {
		ib_conn *c = TW_CONTAINER_OF(it, ib_conn, cq_link);
		if (!tw__conn_done(&c->core))
			ib_fail_verb(c, "ibv_post_srq_recv (the shared receive queue is empty)", rc);
	}
	return rc;
}

/* Puts back a shared receive for every receive completion in cq. */
static void ib_srq_drain(ib_transport *t, struct ibv_cq *cq)
{
	struct ibv_wc wc[IBV_POLL_BATCH];
	uint32_t used = 0;
	int n;
	while ((n = ibv_poll_cq(cq, IBV_POLL_BATCH, wc)) > 0)
		for (int i = 0; i < n; i++)
			used += wc[i].wr_id == IBV_WRID_RECV;
	(void)ib_srq_put_back(t, used);
}

static void ib_on_reap_timer(uv_timer_t *h);

/* Before a queue pair on the shared receive queue is destroyed: receives
 * it took whose completions are not yet read would be lost with it (a
 * provider cleans its entries at destroy, mlx5 does), so it is moved to
 * the error state, where it takes no more, and every receive completion
 * is put back. Hardware may write some after ibv_modify_qp returned: the
 * device's QP_LAST_WQE_REACHED event says none is left (spec 2.4.3.h). So
 * unless that event already came, the queue pair and its completion queue
 * are kept (c loses them) until it comes or reap_wait_ms passes, and
 * drained again then. Without the device's events (not watched, or their
 * fd failed) the bound alone ends each wait; after shutdown, one drain. */
static void ib_srq_reclaim(ib_conn *c)
{
	ib_transport *t = c->t;
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	int err = ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
	ib_srq_drain(t, c->cq);
	/* the wait needs the reaper's timer, which exists (the first
	 * connection made it) until ib_shutdown closes it */
	bool can_wait = t->reap_timer_init && !uv_is_closing((uv_handle_t *)&t->reap_timer);
	if (err || c->last_wqe || !can_wait || TW_MUTANT("ibv_reap_unwaited"))
		return;
	ib_reap *r = tw__calloc(1, sizeof(*r));
	if (!r)
		return; /* one drain it is */
	r->qp = c->qp;
	r->cq = c->cq;
	c->qp = NULL;
	c->cq = NULL;
	r->due_ms = uv_now(&t->base.loop->uv) + t->reap_wait_ms;
	tw__list_push_back(&t->reaping, &r->link);
	if (!uv_is_active((uv_handle_t *)&t->reap_timer))
		uv_timer_start(&t->reap_timer, ib_on_reap_timer, t->reap_wait_ms, 0);
}

/* Every receive completion of r is written (or the wait is over): the
 * last drain, then the queue pair and its completion queue go. */
static void ib_reap_finish(ib_transport *t, ib_reap *r)
{
	tw__list_remove(&r->link);
	ib_srq_drain(t, r->cq);
	(void)ibv_destroy_qp(r->qp);
	(void)ibv_destroy_cq(r->cq);
	tw__free(r);
}

static ib_reap *ib_reap_find(ib_transport *t, const struct ibv_qp *qp, const struct ibv_cq *cq)
{
	for (tw_list *n = t->reaping.next; n != &t->reaping; n = n->next) {
		ib_reap *r = TW_CONTAINER_OF(n, ib_reap, link);
		if (r->qp == qp || r->cq == cq)
			return r;
	}
	return NULL;
}

static void ib_reap_all(ib_transport *t)
{
	while (!tw__list_empty(&t->reaping))
		ib_reap_finish(t, TW_CONTAINER_OF(tw__list_front(&t->reaping), ib_reap, link));
}

static void ib_on_reap_timer(uv_timer_t *h)
{
	ib_transport *t = h->data;
	uint64_t now = uv_now(&t->base.loop->uv);
	while (!tw__list_empty(&t->reaping)) {
		ib_reap *r = TW_CONTAINER_OF(tw__list_front(&t->reaping), ib_reap, link);
		if (r->due_ms > now) {
			uv_timer_start(&t->reap_timer, ib_on_reap_timer, r->due_ms - now, 0);
			return;
		}
		ib_reap_finish(t, r);
	}
}

/* QP_LAST_WQE_REACHED for qp: no receive completion of it is still to be
 * written. A gone connection's queue pair goes now; a live one's
 * connection remembers it (its ibv_modify_qp to ERR raises no second). */
static void ib_last_wqe(ib_transport *t, struct ibv_qp *qp)
{
	ib_reap *r = ib_reap_find(t, qp, NULL);
	if (r) {
		ib_reap_finish(t, r);
		return;
	}
	for (tw_list *n = t->cqs.next; n != &t->cqs; n = n->next) {
		ib_conn *c = TW_CONTAINER_OF(n, ib_conn, cq_link);
		if (c->qp == qp)
			c->last_wqe = true;
	}
}

/* The device's async fd is readable. Each event is acknowledged before
 * anything it names is destroyed (ibv_destroy_qp waits for that). */
static void ib_on_async(uv_poll_t *h, int status, int events)
{
	ib_transport *t = h->data;
	(void)events;
	if (status < 0) {
		/* no more events: the queue pairs kept waiting for one go when
		 * their wait is over, as on a device that never raises it */
		uv_poll_stop(h);
		return;
	}
	struct ibv_async_event ev;
	while (ibv_get_async_event(t->ch.ctx, &ev) == 0) {
		struct ibv_qp *qp =
		        ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED ? ev.element.qp : NULL;
		ibv_ack_async_event(&ev);
		if (qp)
			ib_last_wqe(t, qp);
	}
}

/* ---- the data path --------------------------------------------------------------- */

/* Posts RDMA writes for what the outbox holds beyond `sent`, each within
 * the ring's end and the port's max_msg_sz, keeping one send slot for
 * credit. */
static void ib_post_writes(ib_conn *c)
{
	ib_transport *t = c->t;
	uint64_t head = ib_outbox_head(c);
	while (c->qp_ready && ((c->core.phase == TW_CONN_OPEN && !c->peer_gone) || c->lingering) &&
	       c->sent < head &&
	       c->sq_used + 1 < t->sq_depth) {
		uint64_t off = c->sent & (IBV_CAP - 1);
		uint64_t n = head - c->sent;
		if (n > IBV_CAP - off)
			n = IBV_CAP - off;
		if (n > t->max_write)
			n = t->max_write;
		struct ibv_sge sge = { (uintptr_t)(c->outbox_mem + off), (uint32_t)n,
			               c->outbox_mr->lkey };
		struct ibv_send_wr wr, *bad = NULL;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = (n << 1) | 1;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.imm_data = (uint32_t)n; /* host order, as stock */
		wr.wr.rdma.remote_addr = c->peer_addr + off;
		wr.wr.rdma.rkey = c->peer_rkey;
		int rc = ibv_post_send(c->qp, &wr, &bad);
		if (rc != 0 && c->lingering) {
			ib_conn_release(c);
			return;
		}
		if (rc != 0) {
			ib_fail_verb(c, "ibv_post_send (RDMA write)", rc);
			return;
		}
		c->sent += n;
		c->sq_used++;
		ib_kick(t);
	}
}

/* Returns the inbox bytes we consumed to the peer (one zero-length send). */
static void ib_post_credit(ib_conn *c)
{
	if (c->core.phase != TW_CONN_OPEN || c->peer_gone || c->credit_owed == 0 ||
	    c->sq_used >= c->t->sq_depth)
		return;
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = IBV_WRID_CREDIT;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = (uint32_t)c->credit_owed;
	int rc = ibv_post_send(c->qp, &wr, &bad);
	if (rc != 0) {
		ib_fail_verb(c, "ibv_post_send (credit)", rc);
		return;
	}
	ib_kick(c->t);
	c->credit_owed = 0;
	c->sq_used++;
}

/* Completes the writes whose last byte is in the peer's memory. */
static void ib_complete_writes(ib_conn *c)
{
	while (c->core.phase == TW_CONN_OPEN && c->core.wq_head) {
		tw_ring_op *op = (tw_ring_op *)c->core.wq_head;
		if (!op->produced || op->end_pos > c->landed)
			break;
		tw__conn_op_done(&c->core, true);
	}
}

/* Frames go into the outbox as soon as they are queued, even while the
 * set-up exchange runs (they leave once the queue pair is ready), so that
 * a close that follows at once still delivers them (ib_conn_close). */
static void ib_drive_writes(ib_conn *c)
{
	while ((c->core.phase == TW_CONN_OPEN || c->core.phase == TW_CONN_SETUP) && c->wcur) {
		tw_ring_op *op = c->wcur;
		uint64_t moved = 0;
		char d[TW_DETAIL_MAX];
		if (tw__ring_write_some(&c->outbox, &op->w, 0, &moved, d, sizeof(d)) != TW_OK) {
			ib_fail(c, TW_ERR_PROTO, IBV_WHO ": %s (to %s)", d, c->core.peer);
			return;
		}
		if (!tw__ring_writer_done(&op->w))
			break;
		op->produced = true;
		op->end_pos = tw__ring_load_marker(&c->outbox, TW_RING_PRODUCER);
		c->wcur = (tw_ring_op *)op->op.next;
	}
	ib_post_writes(c);
	ib_complete_writes(c);
}

static void ib_drive_reads(ib_conn *c)
{
	uint64_t tail0 = tw__ring_load_marker(&c->inbox, TW_RING_CONSUMER);
	(void)tw__ring_conn_drive_reads(&c->core, &c->inbox);
	c->credit_owed += tw__ring_load_marker(&c->inbox, TW_RING_CONSUMER) - tail0;
	ib_post_credit(c);
}

/* Is the oldest write's every byte posted and its last RDMA write not yet
 * completed? Its completion (success or error) comes within the queue
 * pair's retry bound. */
static bool ib_write_landing(const ib_conn *c)
{
	const tw_ring_op *op = (const tw_ring_op *)c->core.wq_head;
	return op && !c->wc_failed && op->produced && op->end_pos <= c->sent &&
	       op->end_pos > c->landed;
}

/* The peer is gone (the socket or an error completion said so): what it
 * wrote stays readable; the end comes once nothing is left to read, or at
 * once for a write that waits on it. Not before the oldest write's posted
 * RDMA writes complete, though: the peer may have read those bytes and
 * closed its socket before their acknowledgement reached us (the socket's
 * end can overtake it), and then that write was delivered and completes
 * with success. Nothing more is posted to a peer that is gone. */
static void ib_drive_end(ib_conn *c)
{
	if (c->peer_gone && !ib_write_landing(c))
		tw__ring_conn_drive_end(&c->core, &c->inbox, c->gone_status, c->gone_detail,
		                        "a write waited on the peer");
}

static void ib_set_gone(ib_conn *c, tw_status_t st, const char *detail)
{
	if (c->peer_gone)
		return;
	c->peer_gone = true;
	c->gone_status = st;
	snprintf(c->gone_detail, sizeof(c->gone_detail), "%s", detail);
}

/* Moves a marker of one of our rings by n bytes that the peer reports
 * (role PRODUCER: n bytes arrived in our inbox; CONSUMER: the peer freed n
 * bytes of its inbox, our outbox), never beyond what the ring allows. */
static bool ib_advance(ib_conn *c, tw_ring *r, tw_ring_role role, uint64_t n, uint64_t bound,
                       const char *what)
{
	tw_ring_tx tx;
	uint64_t room = 0;
	char d[TW_DETAIL_MAX];
	if (!tw__ring_begin(r, role, &tx)) /* our own ring: never busy */
		return false;
	if (tw__ring_room(&tx, &room, d, sizeof(d)) != TW_OK || n > room || n > bound) {
		tw__ring_cancel(&tx);
		ib_fail(c, TW_ERR_PROTO,
		        IBV_WHO ": peer %s %s %llu bytes where at most %llu were possible (spec 2.4)",
		        c->core.peer, what, (unsigned long long)n,
		        (unsigned long long)(room < bound ? room : bound));
		return false;
	}
	tw_ring_span spans[2];
	(void)tw__ring_claim(&tx, n, spans);
	tw__ring_commit(&tx);
	return true;
}

static void ib_on_completion(ib_conn *c, const struct ibv_wc *wc)
{
	ib_transport *t = c->t;
	bool recv = wc->wr_id == IBV_WRID_RECV;
	if (!recv && c->sq_used > 0)
		c->sq_used--;
	if (recv && t->srq) {
		/* a shared receive was used up: put one back, whatever the
		 * connection's state and whatever the completion's status (one
		 * that failed, say a peer's SEND too long for it, consumed it
		 * too: not putting it back lost it for every connection) */
		(void)ib_srq_put_back(t, 1);
	}
	if (c->lingering) {
		/* closed, its last writes landing: done when all have, or never */
		if (wc->status != IBV_WC_SUCCESS) {
			ib_conn_release(c);
			return;
		}
		if (!recv && (wc->wr_id & 1))
			c->landed += wc->wr_id >> 1;
		ib_post_writes(c);
		if (c->lingering && c->landed >= ib_outbox_head(c))
			ib_conn_release(c);
		return;
	}
	if (tw__conn_done(&c->core))
		return;
	if (wc->status != IBV_WC_SUCCESS) {
		/* only wr_id, status and vendor_err are defined now */
		char d[TW_DETAIL_MAX];
		const char *what = recv                         ? "receive"
		                   : wc->wr_id == IBV_WRID_CREDIT ? "credit send"
		                                                  : "RDMA write";
		bool remote = wc->status == IBV_WC_RETRY_EXC_ERR ||
		              wc->status == IBV_WC_RNR_RETRY_EXC_ERR ||
		              wc->status == IBV_WC_REM_ACCESS_ERR || wc->status == IBV_WC_REM_OP_ERR ||
		              wc->status == IBV_WC_REM_INV_REQ_ERR || wc->status == IBV_WC_WR_FLUSH_ERR;
		tw__detail(d, sizeof(d),
		           IBV_WHO ": %s completion on %s from peer %s: %s (vendor error 0x%x)", what,
		           ib_dev(c), c->core.peer, ibv_wc_status_str(wc->status), wc->vendor_err);
		c->wc_failed = true;
		ib_set_gone(c, remote ? TW_ERR_CONNRESET : TW_ERR_SYS, d);
		return;
	}
	/* A peer that read our record first may write before we read its
	 * own (phase SETUP): its bytes count as soon as they arrive. */
	if (recv) {
		uint64_t n = (uint32_t)wc->imm_data; /* host order, as stock */
		if (!t->srq) {
			uint32_t one = 1;
			int rc = ib_post_recvs(t, c->qp, &one);
			if (rc != 0) {
				ib_fail_verb(c, "ibv_post_recv", rc);
				return;
			}
		}
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
			(void)ib_advance(c, &c->inbox, TW_RING_PRODUCER, n, IBV_CAP, "wrote");
		else if (wc->opcode == IBV_WC_RECV && (wc->wc_flags & IBV_WC_WITH_IMM))
			(void)ib_advance(c, &c->outbox, TW_RING_CONSUMER, n,
			                 c->sent - tw__ring_load_marker(&c->outbox, TW_RING_CONSUMER),
			                 "returned credit for");
		else
			ib_fail(c, TW_ERR_PROTO,
			        IBV_WHO ": peer %s sent a message without an immediate (opcode %d; spec "
			        "2.4 has only writes and sends with immediates)",
			        c->core.peer, (int)wc->opcode);
		return;
	}
	if (wc->wr_id & 1)
		c->landed += wc->wr_id >> 1;
}

/* Drains the connection's completion queue, re-arming it first (so no
 * completion arriving meanwhile goes unnoticed) unless the loop is busy
 * polling (it looks again on its next pass). Returns the completions. */
static unsigned ib_drain_cq(ib_conn *c)
{
	if (c->core.phase == TW_CONN_CLOSED && !c->t->srq && !c->lingering)
		return 0;
	if (!ib_spinning(c->t)) {
		int rc = ibv_req_notify_cq(c->cq, 0);
		if (rc != 0 && !tw__conn_done(&c->core)) {
			ib_fail_verb(c, "ibv_req_notify_cq", rc);
			return 0;
		}
	}
	struct ibv_wc wc[IBV_POLL_BATCH];
	int n;
	unsigned got = 0;
	while ((n = ibv_poll_cq(c->cq, IBV_POLL_BATCH, wc)) > 0) {
		got += (unsigned)n;
		for (int i = 0; i < n; i++)
			ib_on_completion(c, &wc[i]);
	}
	if (n < 0 && !tw__conn_done(&c->core))
		ib_fail(c, TW_ERR_SYS, IBV_WHO ": ibv_poll_cq on %s (peer %s) failed: it returned %d",
		        ib_dev(c), c->core.peer, n);
	return got;
}

/* ---- busy polling (option busy_poll_us) ---- */

/* Activity (a completion, a post): polling goes on for busy_ns from now. */
static void ib_kick(ib_transport *t)
{
	tw__loop_poller_kick(t->base.loop, &t->poller);
}

/* Drains every completion queue (re-armed while not spinning) and drives
 * the connections that had completions. */
static unsigned ib_drain_all(ib_transport *t)
{
	unsigned got = 0;
	for (tw_list *n = t->cqs.next; n != &t->cqs; n = n->next) {
		ib_conn *c = TW_CONTAINER_OF(n, ib_conn, cq_link);
		unsigned k = ib_drain_cq(c);
		got += k;
		if (k && !tw__conn_done(&c->core))
			ib_drive(c);
	}
	return got;
}

/* A pass of the loop while busy polling (loop.h's poller). Its last, once
 * polling has ended, arms every queue again as it drains it (a completion
 * between the last look and the arming raises no event). */
static unsigned ib_poll(tw_loop_poller *p)
{
	return ib_drain_all(TW_CONTAINER_OF(p, ib_transport, poller));
}

/* The completion channel is readable: each event names one connection's
 * completion queue (its cq_context). Events of destroyed queues are
 * dropped by the library. */
static void ib_on_channel(uv_poll_t *h, int status, int events)
{
	ib_transport *t = h->data;
	(void)events;
	if (status < 0) {
		/* libuv has stopped watching (an error on the channel: the
		 * device went away): no completion would ever wake a connection
		 * again, so every one fails now, naming it */
		t->chan_poll_on = false;
		char d[TW_DETAIL_MAX];
		tw__detail(d, sizeof(d), IBV_WHO ": the completion channel of %s failed: %s",
		           t->ch.dev_name, uv_strerror(status));
		for (tw_list *n = t->cqs.next, *next; n != &t->cqs; n = next) {
			next = n->next;
			ib_conn *c = TW_CONTAINER_OF(n, ib_conn, cq_link);
			if (!tw__conn_done(&c->core))
				ib_fail(c, TW_ERR_SYS, "%s", d);
		}
		return;
	}
	for (;;) {
		struct ibv_cq *cq = NULL;
		void *ctx = NULL;
		if (ibv_get_cq_event(t->chan, &cq, &ctx) != 0)
			break; /* EAGAIN: nothing more */
		ibv_ack_cq_events(cq, 1);
		ib_reap *r = ib_reap_find(t, NULL, cq);
		if (r) {
			/* armed before its connection went (ctx is gone) */
			ib_srq_drain(t, cq);
			continue;
		}
		ib_conn *c = ctx;
		ib_kick(t);
		ib_drain_cq(c);
		if (!tw__conn_done(&c->core))
			ib_drive(c);
	}
}

/* ---- the set-up exchange (2.4) ------------------------------------------------- */

static void ib_record_fill(ib_conn *c)
{
	const tw_ibv_choice *ch = &c->t->ch;
	memset(c->rec_out, 0, sizeof(c->rec_out));
	ib_put32(c->rec_out + 0, ch->lid);
	memcpy(c->rec_out + 8, c->gid.raw, 16);
	ib_put32(c->rec_out + 24, c->qp->qp_num);
	ib_put32(c->rec_out + 28, (uint32_t)ch->mtu);
	ib_put32(c->rec_out + 32, ch->max_msg_sz);
	uint64_t addr = (uintptr_t)c->inbox_mem;
	ib_put32(c->rec_out + 40, (uint32_t)addr);
	ib_put32(c->rec_out + 44, (uint32_t)(addr >> 32));
	ib_put32(c->rec_out + 48, c->inbox_mr->rkey);
}

/* Moves the queue pair to RTR and RTS towards the peer's record. */
static void ib_connect_qp(ib_conn *c)
{
	const tw_ibv_choice *ch = &c->t->ch;
	const uint8_t *r = c->rec_in;
	uint32_t lid = ib_get32(r + 0), qpn = ib_get32(r + 24), mtu = ib_get32(r + 28);
	if ((mtu < IBV_MTU_256 || mtu > IBV_MTU_4096 || qpn == 0 || qpn > 0xffffff || lid > 0xffff) &&
	    !TW_MUTANT("ibv_record_unchecked")) {
		ib_fail(c, TW_ERR_PROTO,
		        IBV_WHO ": peer %s sent a set-up record with QP number 0x%x, MTU %u and LID "
		        "%u (spec 2.4: a 24-bit QP number, an MTU enum from 1 to 5)",
		        c->core.peer, qpn, mtu, lid);
		return;
	}
	union ibv_gid peer_gid;
	memcpy(peer_gid.raw, r + 8, 16);
	tw_ibv_gid_family pf = tw__ibv_gid_family(&peer_gid), of = tw__ibv_gid_family(&c->gid);
	if (lid == 0 && ch->lid == 0 && pf != of && pf != TW_IBV_GID_ZERO) {
		char pa[INET6_ADDRSTRLEN] = "?", oa[INET6_ADDRSTRLEN] = "?";
		(void)inet_ntop(AF_INET6, peer_gid.raw, pa, sizeof(pa));
		(void)inet_ntop(AF_INET6, c->gid.raw, oa, sizeof(oa));
		bool remembered = c->rec_order == IB_REC_REMEMBERED;
		if (remembered) /* the listener changed: the next connection reads first */
			ib_memo_forget(c->t, c->core.peer);
		ib_fail(c, TW_ERR_UNSUPPORTED,
		        IBV_WHO ": peer %s uses GID %s (%s) and this side GID %d, %s (%s) on %s: RoCE "
		        "packets between addresses of two families go nowhere (spec 2.4.5)%s. A peer "
		        "with a link-local GID is likely stock TensorPipe, which always uses GID "
		        "index 0: set TW_IB_GID_INDEX to an index of that family here",
		        c->core.peer, pa, tw__ibv_gid_family_name(pf), c->gid_index, oa,
		        tw__ibv_gid_family_name(of), ch->dev_name,
		        remembered ? "; this side sent its record first, in the family this "
		                       "listener used before, which is forgotten now"
		                     : "");
		return;
	}
	c->peer_addr = (uint64_t)ib_get32(r + 40) | (uint64_t)ib_get32(r + 44) << 32;
	c->peer_rkey = ib_get32(r + 48);
	tw_ibv_peer_qp pq = { .lid = lid, .gid = peer_gid, .qpn = qpn, .mtu = (enum ibv_mtu)mtu };
	const char *verb = "";
	int rc = tw__ibv_qp_connect(c->qp, ch, c->gid_index, &pq, &verb);
	if (rc != 0) {
		ib_fail_verb(c, verb, rc);
		return;
	}
	c->qp_ready = true;
	c->connected = true;
	if (!c->accepted)
		ib_memo_put(c->t, c->core.peer, &peer_gid);
	if (c->lingering) { /* closed meanwhile: only its last bytes go */
		ib_post_writes(c);
		if (c->lingering && c->landed >= ib_outbox_head(c))
			ib_conn_release(c);
		return;
	}
	c->core.phase = TW_CONN_OPEN;
	uv_timer_stop(&c->timer);
	tw__tcp_set_liveness(c->fd, c->opts.liveness_ms);
}

/* Whether this side reads the peer's record before sending its own. */
static bool ib_reads_first(const ib_conn *c)
{
	return c->answers || c->await_peer;
}

/* Reads what is left of the peer's record: true once it is all in. */
static bool ib_read_record(ib_conn *c)
{
	while (c->in_done < IBV_RECORD_LEN) {
		/* exactly the record: anything after it is the end (2.4) */
		struct iovec iov = { c->rec_in + c->in_done, IBV_RECORD_LEN - c->in_done };
		ssize_t n = tw__sys_readv(c->fd, &iov, 1);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return false;
		if (n < 0) {
			ib_fail_errno(c, "receiving the set-up record from", errno);
			return false;
		}
		if (n == 0) {
			ib_fail(c, TW_ERR_EOF,
			        IBV_WHO ": connection closed by peer %s after %zu of the %d bytes of its "
			        "set-up record",
			        c->core.peer, c->in_done, IBV_RECORD_LEN);
			return false;
		}
		c->in_done += (size_t)n;
		if (c->in_done == IBV_RECORD_LEN && c->out_done == 0) {
			/* our record is not sent yet: take a GID the peer can reach */
			union ibv_gid peer;
			memcpy(peer.raw, c->rec_in + 8, 16);
			if (tw__ibv_match_gid(&c->t->ch, &peer, &c->gid_index, &c->gid))
				ib_record_fill(c);
		}
	}
	return true;
}

static void ib_on_timer(uv_timer_t *h);

/* The accepting side's wait for the peer's record is over: the timer goes
 * back to the connect deadline. */
static void ib_end_await(ib_conn *c)
{
	c->await_peer = false;
	uv_timer_stop(&c->timer);
	if (c->deadline) {
		uint64_t now = uv_now(&c->t->base.loop->uv);
		uv_timer_start(&c->timer, ib_on_timer, c->deadline > now ? c->deadline - now : 0, 0);
	}
}

static void ib_exchange(ib_conn *c)
{
	if (ib_reads_first(c) && !ib_read_record(c))
		return;
	if (c->await_peer) { /* within the wait */
		c->rec_order = IB_REC_PEER_FIRST;
		ib_end_await(c);
	}
	while (c->out_done < IBV_RECORD_LEN) {
		struct iovec iov = { c->rec_out + c->out_done, IBV_RECORD_LEN - c->out_done };
		ssize_t n = tw__sys_writev(c->fd, &iov, 1);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		if (n < 0) {
			ib_fail_errno(c, "sending the set-up record to", errno);
			return;
		}
		c->out_done += (size_t)n;
	}
	if (!ib_read_record(c))
		return;
	ib_connect_qp(c);
}

/* ---- driving -------------------------------------------------------------------- */

static void ib_drive(ib_conn *c)
{
	if ((c->core.phase == TW_CONN_SETUP || c->lingering) && !c->qp_ready && c->sock_connected)
		ib_exchange(c);
	if (c->core.phase == TW_CONN_SETUP)
		ib_drive_writes(c);
	if (c->core.phase == TW_CONN_OPEN) {
		ib_drive_writes(c);
		ib_drive_reads(c);
		ib_drive_end(c);
	}
	ib_update_poll(c);
}

static void ib_on_poll(uv_poll_t *h, int status, int events);

static void ib_update_poll(ib_conn *c)
{
	if (c->core.phase == TW_CONN_CLOSED && !c->lingering)
		return;
	int want = 0;
	if ((c->core.phase == TW_CONN_SETUP || c->lingering) && !c->qp_ready)
		want = !c->sock_connected                            ? UV_WRITABLE
		       : ib_reads_first(c) && c->in_done < IBV_RECORD_LEN ? UV_READABLE
		       : c->out_done < IBV_RECORD_LEN                  ? UV_WRITABLE
		                                                       : UV_READABLE;
	else if (c->core.phase == TW_CONN_OPEN && !c->peer_gone)
		want = UV_READABLE; /* only the end can come this way */
	tw__conn_poll(&c->core, &c->poll, &c->poll_events, want, ib_on_poll);
}

/* Readable after the exchange: the peer is gone, or sent bytes it must
 * not. Completions that arrived before are taken in first, so that
 * nothing the peer wrote before it went is lost. */
static void ib_notice_end(ib_conn *c)
{
	ssize_t r = tw__sys_peek(c->fd);
	int err = r < 0 ? errno : 0; /* before the verbs calls of the drain below */
	if (r < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR))
		return;
	if (r > 0) {
		ib_fail(c, TW_ERR_PROTO,
		        IBV_WHO ": peer %s sent bytes on its socket after the set-up record (spec 2.4)",
		        c->core.peer);
		return;
	}
	ib_drain_cq(c);
	char d[TW_DETAIL_MAX], eb[128];
	if (r == 0) {
		tw__detail(d, sizeof(d), IBV_WHO ": connection closed by peer %s", c->core.peer);
		ib_set_gone(c, TW_ERR_EOF, d);
	} else {
		tw__detail(d, sizeof(d), IBV_WHO ": connection to %s: %s", c->core.peer,
		           tw__strerror(err, eb, sizeof(eb)));
		ib_set_gone(c, err == ECONNRESET ? TW_ERR_CONNRESET : TW_ERR_SYS, d);
	}
}

static void ib_finish_connect(ib_conn *c)
{
	int err = tw__tcp_connect_result(c->fd);
	if (err == EINPROGRESS)
		return;
	if (err != 0) {
		ib_fail_errno(c, "connect", err);
		return;
	}
	c->sock_connected = true;
}

static void ib_on_poll(uv_poll_t *h, int status, int events)
{
	ib_conn *c = h->data;
	(void)events;
	if (c->lingering) { /* closed, its set-up exchange still running */
		if (status < 0) {
			ib_conn_release(c);
			return;
		}
		if (!c->sock_connected)
			ib_finish_connect(c);
		ib_drive(c);
		return;
	}
	if (status < 0) {
		c->poll_events = 0;
		int err = 0;
		socklen_t len = sizeof(err);
		if (tw__sys_getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err == 0)
			err = EIO;
		if (c->core.phase == TW_CONN_OPEN) {
			ib_drain_cq(c);
			char d[TW_DETAIL_MAX], eb[128];
			tw__detail(d, sizeof(d), IBV_WHO ": connection to %s: %s", c->core.peer,
			           tw__strerror(err, eb, sizeof(eb)));
			ib_set_gone(c, err == ECONNRESET ? TW_ERR_CONNRESET : TW_ERR_SYS, d);
		} else {
			ib_fail_errno(c, "connect", err);
		}
		ib_drive(c);
		return;
	}
	if (c->core.phase == TW_CONN_SETUP && !c->sock_connected)
		ib_finish_connect(c);
	else if (c->core.phase == TW_CONN_OPEN)
		ib_notice_end(c);
	ib_drive(c);
}

static void ib_on_timer(uv_timer_t *h)
{
	ib_conn *c = h->data;
	if (c->await_peer) { /* no record came: ours first (an answering peer's turn next) */
		c->rec_order = IB_REC_WAITED;
		ib_end_await(c);
		ib_drive(c);
		return;
	}
	if (c->core.phase == TW_CONN_SETUP)
		ib_fail(c, TW_ERR_TIMEDOUT,
		        IBV_WHO ": connect %s: not connected (socket and set-up record) within the "
		        "connect timeout of %llu ms",
		        c->core.peer, (unsigned long long)c->opts.connect_timeout_ms);
}

/* ---- operations ------------------------------------------------------------------- */

static tw_status_t ib_queue(ib_conn *c, tw_ring_op *op, tw_conn_write_cb wcb,
                            tw_conn_read_cb rcb, void *arg)
{
	if (!op)
		return TW_ERR_NOMEM;
	op->op.wcb = wcb;
	op->op.rcb = rcb;
	op->op.arg = arg;
	if (!tw__conn_queue(&c->core, &op->op, wcb != NULL))
		return TW_OK;
	if (wcb && !c->wcur)
		c->wcur = op;
	ib_drive(c);
	return TW_OK;
}

static tw_status_t ib_conn_write(tw_conn *base, const tw_iov *iov, size_t num_iov, unsigned flags,
                                 tw_conn_write_cb cb, void *arg)
{
	ib_conn *c = (ib_conn *)base;
	tw_status_t st = TW_OK;
	char d[TW_DETAIL_MAX];
	tw_ring_op *op = tw__ring_op_write(iov, num_iov, flags, IBV_CAP, IBV_WHO, &st, d, sizeof(d));
	if (op && st != TW_OK) /* the pipe checks the limits first: this is a bug */
		ib_fail(c, st, "%s (to %s)", d, c->core.peer);
	return ib_queue(c, op, cb, NULL, arg);
}

static tw_status_t ib_conn_read_into(tw_conn *base, void *buf, uint64_t len, tw_conn_read_cb cb,
                                     void *arg)
{
	return ib_queue((ib_conn *)base, tw__ring_op_read_into(buf, len), NULL, cb, arg);
}

static tw_status_t ib_conn_read_alloc(tw_conn *base, uint64_t max_len, tw_conn_read_cb cb,
                                      void *arg)
{
	return ib_queue((ib_conn *)base, tw__ring_op_read_alloc(max_len), NULL, cb, arg);
}

static tw_status_t ib_conn_watch_end(tw_conn *base, tw_conn_end_cb cb, tw_conn_hangup_cb hup_cb,
                                     void *arg)
{
	ib_conn *c = (ib_conn *)base;
	if (tw__conn_watch_arm(&c->core, cb, hup_cb, arg))
		ib_drive_end(c);
	return TW_OK;
}

/* ---- making connections --------------------------------------------------------------- */

/* Where queue pairs share a receive queue, starts the reaper's timer
 * (ib_srq_reclaim keeps a gone queue pair for reap_wait_ms at most) and
 * watches the device's async events (its QP_LAST_WQE_REACHED ends that
 * wait early). The events are best effort: unwatched, the bound ends
 * every wait. */
static void ib_watch_async(ib_transport *t)
{
	if (!t->srq || t->async_init)
		return;
	uv_loop_t *uv = &t->base.loop->uv;
	if (!t->reap_timer_init) {
		if (uv_timer_init(uv, &t->reap_timer) != 0)
			return;
		t->reap_timer_init = true;
		t->reap_timer.data = t;
	}
	int fd = t->ch.ctx->async_fd;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return;
	if (uv_poll_init(uv, &t->async_poll, fd) != 0)
		return;
	t->async_init = true;
	t->async_poll.data = t;
	(void)uv_poll_start(&t->async_poll, UV_READABLE, ib_on_async); /* best effort */
}

/* Starts watching the completion channel and the device's async events
 * (the first connection does it: create() may not touch the loop). */
static tw_status_t ib_watch_channel(ib_transport *t, char *detail, size_t detail_len)
{
	if (t->chan_poll_on)
		return TW_OK;
	int rc = 0;
	if (!t->chan_poll_init) {
		rc = uv_poll_init(&t->base.loop->uv, &t->chan_poll, t->chan->fd);
		t->chan_poll_init = rc == 0;
		t->chan_poll.data = t;
	}
	if (rc == 0) {
		/* on failure, the next connection tries again */
		rc = uv_poll_start(&t->chan_poll, UV_READABLE, ib_on_channel);
		t->chan_poll_on = rc == 0;
	}
	if (rc != 0) {
		tw__detail(detail, detail_len, IBV_WHO ": watching the completion channel of %s: %s",
		           t->ch.dev_name, uv_strerror(rc));
		return TW_ERR_SYS;
	}
	ib_watch_async(t);
	return TW_OK;
}

/* The verbs half of a new connection: completion queue, queue pair (in
 * INIT), the two registered buffers and their rings. */
static tw_status_t ib_conn_verbs(ib_conn *c, char *detail, size_t detail_len)
{
	ib_transport *t = c->t;
	const char *verb = "ibv_post_srq_recv (the shared receive queue is empty)";
	char eb[128];
	/* receives an earlier post failed to put back (if any): with none
	 * left no completion would come to retry them. First: c is not yet
	 * among the connections an emptied queue fails (its handles are not
	 * made yet), it fails alone, here */
	int err = t->srq ? ib_srq_put_back(t, 0) : 0;
	if (!err) {
		verb = "ibv_create_cq";
		c->cq = ibv_create_cq(t->ch.ctx, (int)t->cq_depth, c, t->chan, 0);
		err = c->cq ? 0 : errno;
	}
	if (c->cq)
		tw__list_push_back(&t->cqs, &c->cq_link);
	if (!err && (err = ibv_req_notify_cq(c->cq, 0)) != 0)
		verb = "ibv_req_notify_cq";
	if (!err) {
		struct ibv_qp_init_attr qa;
		memset(&qa, 0, sizeof(qa));
		qa.send_cq = c->cq;
		qa.recv_cq = c->cq;
		qa.srq = t->srq;
		qa.cap.max_send_wr = t->sq_depth;
		qa.cap.max_recv_wr = t->srq ? 0 : t->rq_depth;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = t->srq ? 0 : 1;
		qa.qp_type = IBV_QPT_RC;
		verb = "ibv_create_qp";
		c->qp = ibv_create_qp(t->pd, &qa);
		err = c->qp ? 0 : errno;
	}
	if (!err) {
		verb = "ibv_modify_qp to INIT";
		err = tw__ibv_qp_init(c->qp, t->ch.port);
	}
	if (!err) {
		verb = "mmap of the inbox and outbox";
		c->inbox_mem = tw__sys_mmap_private(IBV_CAP);
		c->outbox_mem = c->inbox_mem ? tw__sys_mmap_private(IBV_CAP) : NULL;
		err = c->outbox_mem ? 0 : errno;
	}
	if (!err) {
		verb = "ibv_reg_mr";
		c->inbox_mr = ibv_reg_mr(t->pd, c->inbox_mem, IBV_CAP,
		                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		c->outbox_mr = c->inbox_mr ? ibv_reg_mr(t->pd, c->outbox_mem, IBV_CAP, 0) : NULL;
		err = c->outbox_mr ? 0 : errno;
	}
	if (!err && !t->srq && !TW_MUTANT("ibv_srq_assumed")) {
		verb = "ibv_post_recv";
		uint32_t rq = t->rq_depth;
		err = ib_post_recvs(t, c->qp, &rq);
	}
	if (err) {
		tw__detail(detail, detail_len, IBV_WHO ": %s on %s (peer %s): %s", verb, t->ch.dev_name,
		           c->core.peer, tw__strerror(err, eb, sizeof(eb)));
		return err == ENOMEM ? TW_ERR_NOMEM : TW_ERR_SYS;
	}
	char d[TW_DETAIL_MAX];
	if (tw__ring_init(&c->inbox, c->inbox_hdr, c->inbox_mem, IBV_CAP, d, sizeof(d)) != TW_OK ||
	    tw__ring_init(&c->outbox, c->outbox_hdr, c->outbox_mem, IBV_CAP, d, sizeof(d)) !=
	        TW_OK) {
		tw__detail(detail, detail_len, "%s", d);
		return TW_ERR_SYS;
	}
	ib_record_fill(c);
	return TW_OK;
}

/* A new connection on socket fd (taken over: closed on failure). */
static ib_conn *ib_conn_new(ib_transport *t, int fd, bool accepted, const char *peer,
                            const tw_conn_opts *opts, char *detail, size_t detail_len)
{
	ib_conn *c = tw__calloc(1, sizeof(*c));
	if (!c) {
		tw__detail(detail, detail_len, IBV_WHO ": connection to %s: out of memory", peer);
		tw__sys_close(fd);
		return NULL;
	}
	/* two references: the poll and the timer handles */
	tw__conn_core_init(&c->core, &ib_conn_ops, &ib_core_ops, &t->base, IBV_WHO, peer,
	                   TW_CONN_SETUP, 2);
	c->t = t;
	c->fd = fd;
	c->opts = *opts;
	c->sock_connected = accepted;
	c->connected = accepted; /* accepted: always (transport.h) */
	c->accepted = accepted;
	c->answers = !accepted;
	c->await_peer = accepted && t->answer_wait_ms > 0 && t->ch.stock_gid_differs;
	c->gid_index = t->ch.gid_index;
	c->gid = t->ch.gid;
	c->rec_order = c->await_peer ? IB_REC_PEER_FIRST : accepted ? IB_REC_AT_ONCE : IB_REC_ANSWERED;
	const struct ib_memo *m = accepted ? NULL : ib_memo_find(t, peer);
	if (m && tw__ibv_match_gid(&t->ch, &m->gid, &c->gid_index, &c->gid)) {
		c->answers = false; /* 2.4.5.d: its record needs no answer first */
		c->rec_order = IB_REC_REMEMBERED;
	}
	tw__ring_none(&c->inbox);
	tw__ring_none(&c->outbox);
	tw_status_t st = ib_watch_channel(t, detail, detail_len);
	if (st == TW_OK)
		st = ib_conn_verbs(c, detail, detail_len);
	int rc = st == TW_OK ? uv_poll_init_socket(&t->base.loop->uv, &c->poll, fd) : 0;
	if (rc != 0) {
		tw__detail(detail, detail_len, IBV_WHO ": uv_poll_init_socket for %s: %s", peer,
		           uv_strerror(rc));
		st = TW_ERR_SYS;
	}
	if (st != TW_OK) {
		ib_free_conn(&c->core);
		return NULL;
	}
	c->poll.data = c;
	uv_timer_init(&t->base.loop->uv, &c->timer);
	c->timer.data = c;
	if (opts->connect_timeout_ms)
		c->deadline = tw__loop_deadline(t->base.loop, opts->connect_timeout_ms);
	if (c->await_peer)
		uv_timer_start(&c->timer, ib_on_timer, t->answer_wait_ms, 0);
	else if (opts->connect_timeout_ms)
		uv_timer_start(&c->timer, ib_on_timer, opts->connect_timeout_ms, 0);
	return c;
}

static tw_status_t ib_connect(tw_transport *base, const char *address, const tw_conn_opts *opts,
                              tw_conn **out, char *detail, size_t detail_len)
{
	ib_transport *t = (ib_transport *)base;
	char peer[TW_TCP_ADDR_MAX];
	int err = 0;
	int fd = tw__tcp_connect_start(IBV_WHO, address, opts, peer, sizeof(peer), &err, detail,
	                               detail_len);
	if (fd < 0)
		return err == EINVAL ? TW_ERR_INVAL : TW_ERR_SYS;
	ib_conn *c = ib_conn_new(t, fd, false, peer, opts, detail, detail_len);
	if (!c)
		return TW_ERR_SYS;
	if (err == 0)
		c->sock_connected = true;
	else if (err != EINPROGRESS)
		ib_fail_errno(c, "connect", err);
	ib_drive(c);
	*out = &c->core.base;
	return TW_OK;
}

static tw_status_t ib_check_address(const char *address, bool for_listen, char *detail,
                                    size_t detail_len)
{
	return tw__tcp_check_address(IBV_WHO, address, for_listen, detail, detail_len);
}

static void ib_answer_address(tw_conn *boot, const char *advertised, char *out, size_t out_len)
{
	tw__tcp_answer_address(boot ? ((ib_conn *)boot)->fd : -1, advertised, out, out_len);
}

/* ---- listener ---------------------------------------------------------------------- */

static tw_status_t ib_make_conn(tw_stream_listener *l, int fd, const struct sockaddr *peer_addr,
                                tw_conn **out, char *detail, size_t detail_len)
{
	char peer[TW_TCP_ADDR_MAX];
	tw__tcp_addr_format(peer_addr, peer, sizeof(peer));
	tw__tcp_set_nodelay(fd);
	ib_conn *c = ib_conn_new((ib_transport *)l->base.transport, fd, true, peer, &l->opts, detail,
	                         detail_len);
	if (!c)
		return TW_ERR_SYS;
	ib_drive(c);
	*out = &c->core.base;
	return TW_OK;
}

static tw_status_t ib_listen(tw_transport *base, const char *address, const tw_conn_opts *opts,
                             tw_tlistener_accept_cb cb, void *arg, tw_tlistener **out,
                             char *detail, size_t detail_len)
{
	return tw__tcp_listen(base, IBV_WHO, address, opts, ib_make_conn, cb, arg, out,
	                      detail, detail_len);
}

/* ---- transport ------------------------------------------------------------------------ */

typedef struct ib_opts {
	char hca[128];
	uint64_t gid_index; /* UINT64_MAX: choose */
	uint64_t answer_wait_ms;
	uint64_t reap_wait_ms;
	uint64_t busy_poll_us;
	bool srq;
	bool fork_safe;
} ib_opts;

/* A decimal environment variable within [min, max] into *out (left as it
 * is when unset or empty); TW_ERR_INVAL with a detail naming it otherwise. */
static tw_status_t ib_env_u64(const char *name, uint64_t min, uint64_t max, const char *what,
                              uint64_t *out, char *detail, size_t detail_len)
{
	const char *e = getenv(name);
	if (!e || !*e)
		return TW_OK;
	char *end = NULL;
	unsigned long long v = strtoull(e, &end, 10);
	if (*end || v < min || v > max) {
		tw__detail(detail, detail_len, IBV_WHO ": %s='%s' is not %s", name, e, what);
		return TW_ERR_INVAL;
	}
	*out = v;
	return TW_OK;
}

/* Options, then the environment where an option was not given. */
static tw_status_t ib_parse_options(const char *options, ib_opts *o, char *detail,
                                    size_t detail_len)
{
	static const tw_option table[] = {
		{ "hca", TW_OPT_STR, offsetof(ib_opts, hca), sizeof(((ib_opts *)0)->hca), 0, 0 },
		{ "gid_index", TW_OPT_U64, offsetof(ib_opts, gid_index), 0, 0, 65535 },
		{ "srq", TW_OPT_BOOL, offsetof(ib_opts, srq), 0, 0, 0 },
		{ "fork_safe", TW_OPT_BOOL, offsetof(ib_opts, fork_safe), 0, 0, 0 },
		{ "answer_wait_ms", TW_OPT_U64, offsetof(ib_opts, answer_wait_ms), 0, 0, 60000 },
		{ "reap_wait_ms", TW_OPT_U64, offsetof(ib_opts, reap_wait_ms), 0, 1, 3600000 },
		{ "busy_poll_us", TW_OPT_U64, offsetof(ib_opts, busy_poll_us), 0, 0, 10000000 },
	};
	memset(o, 0, sizeof(*o));
	o->gid_index = UINT64_MAX;
	o->srq = true;
	o->fork_safe = true;
	o->answer_wait_ms = TW_IB_ANSWER_WAIT_MS;
	o->reap_wait_ms = TW_IB_REAP_WAIT_MS;
	o->busy_poll_us = TW_LOOP_BUSY_DEFAULT_US;
	const char *e = getenv("TW_IB_HCA");
	if (e)
		snprintf(o->hca, sizeof(o->hca), "%s", e);
	/* a reap wait of 0 would lose the receive of a completion written
	 * late (ib_srq_reclaim) */
	if (ib_env_u64("TW_IB_GID_INDEX", 0, 65535, "a GID index (0 to 65535)", &o->gid_index,
	               detail, detail_len) != TW_OK ||
	    ib_env_u64("TW_IB_ANSWER_WAIT_MS", 0, 60000, "a wait (0 to 60000 ms)",
	               &o->answer_wait_ms, detail, detail_len) != TW_OK ||
	    ib_env_u64("TW_IB_REAP_WAIT_MS", 1, 3600000, "a wait (1 to 3600000 ms)",
	               &o->reap_wait_ms, detail, detail_len) != TW_OK)
		return TW_ERR_INVAL;
	if (tw__ibv_fork_opted_out())
		o->fork_safe = false;
	return tw__options_parse(IBV_WHO, options, table, sizeof(table) / sizeof(table[0]), o, NULL, 0,
	                         detail, detail_len);
}

static void ib_destroy(tw_transport *base);

static tw_status_t ib_create(tw_loop *loop, const char *options, tw_transport **out, char *detail,
                             size_t detail_len)
{
	ib_opts o;
	tw_status_t st = ib_parse_options(options, &o, detail, detail_len);
	if (st != TW_OK)
		return st;
	if (o.fork_safe && (st = tw__ibv_fork_safe(detail, detail_len)) != TW_OK)
		return st;
	ib_transport *t = tw__calloc(1, sizeof(*t));
	if (!t) {
		tw__detail(detail, detail_len, IBV_WHO ": out of memory");
		return TW_ERR_NOMEM;
	}
	t->base.ops = &tw__ibv_transport_ops;
	t->base.loop = loop;
	t->answer_wait_ms = o.answer_wait_ms;
	t->reap_wait_ms = o.reap_wait_ms;
	t->poller.busy_ns = o.busy_poll_us * 1000;
	t->poller.poll = ib_poll;
	tw__list_init(&t->lingering);
	tw__list_init(&t->cqs);
	tw__list_init(&t->reaping);
	st = tw__ibv_choose(o.hca, o.gid_index == UINT64_MAX ? -1 : (int)o.gid_index, &t->ch, detail,
	                    detail_len);
	if (st != TW_OK) {
		tw__free(t);
		return st;
	}
	const struct ibv_device_attr *da = &t->ch.dattr;
	char eb[128];
	const char *verb = "ibv_alloc_pd";
	int err = 0;
	if (!(t->pd = ibv_alloc_pd(t->ch.ctx)))
		err = errno;
	if (!err) {
		verb = "ibv_create_comp_channel";
		if (!(t->chan = ibv_create_comp_channel(t->ch.ctx)))
			err = errno;
	}
	if (!err) {
		verb = "fcntl(O_NONBLOCK) on the completion channel";
		int fl = fcntl(t->chan->fd, F_GETFL);
		if (fl < 0 || fcntl(t->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0)
			err = errno;
	}
	if (err) {
		tw__detail(detail, detail_len, IBV_WHO ": %s on %s: %s", verb, t->ch.dev_name,
		           tw__strerror(err, eb, sizeof(eb)));
		ib_destroy(&t->base);
		return TW_ERR_UNSUPPORTED;
	}
	/* Depths within the device's limits, the completion queue deep enough
	 * for every send and receive that can complete on it. */
	uint32_t max_cqe = da->max_cqe > 0 ? (uint32_t)da->max_cqe : 0;
	uint32_t max_wr = da->max_qp_wr > 0 ? (uint32_t)da->max_qp_wr : 0;
	t->sq_depth = max_wr < IBV_DEPTH ? max_wr : IBV_DEPTH;
	if (t->sq_depth > max_cqe / 2)
		t->sq_depth = max_cqe / 2;
	if (TW_MUTANT("ibv_queues_unbounded"))
		max_cqe = 4 * IBV_DEPTH, max_wr = IBV_DEPTH, t->sq_depth = IBV_DEPTH;
	uint32_t rq = max_cqe - t->sq_depth < IBV_DEPTH ? max_cqe - t->sq_depth : IBV_DEPTH;
	char srq_note[TW_DETAIL_MAX] = "";
	if (o.srq) {
		/* tried even where max_srq says 0: the verb's own answer is
		 * the reason given */
		struct ibv_srq_init_attr sa;
		memset(&sa, 0, sizeof(sa));
		sa.attr.max_wr = da->max_srq_wr > 0 && (uint32_t)da->max_srq_wr < rq
		                     ? (uint32_t)da->max_srq_wr
		                     : rq;
		sa.attr.max_sge = 1;
		t->srq = ibv_create_srq(t->pd, &sa);
		if (t->srq) {
			/* a provider may round the queue up (sa.attr.max_wr):
			 * the completion queues are sized for rq, so no more
			 * are posted */
			if (sa.attr.max_wr < rq)
				rq = sa.attr.max_wr;
			/* some posted: the rest is owed (ib_srq_put_back) */
			uint32_t left = rq;
			if ((err = ib_post_recvs(t, NULL, &left)) != 0 && left == rq) {
				tw__detail(detail, detail_len, IBV_WHO ": ibv_post_srq_recv on %s: %s",
				           t->ch.dev_name, tw__strerror(err, eb, sizeof(eb)));
				ib_destroy(&t->base);
				return TW_ERR_UNSUPPORTED;
			}
			t->srq_owed = left;
			err = 0;
		} else {
			tw__detail(srq_note, sizeof(srq_note),
			           "; ibv_create_srq on %s: %s (max_srq %d): per-QP receive queues",
			           t->ch.dev_name, tw__strerror(errno, eb, sizeof(eb)), da->max_srq);
		}
	} else {
		tw__detail(srq_note, sizeof(srq_note), "; option srq=false: per-QP receive queues");
	}
	if (!t->srq && rq > max_wr)
		rq = max_wr;
	t->rq_depth = rq;
	t->cq_depth = t->sq_depth + rq;
	t->max_write = t->ch.max_msg_sz > 0 && t->ch.max_msg_sz < IBV_CAP ? t->ch.max_msg_sz
	                                                                  : (uint32_t)IBV_CAP;
	if (TW_MUTANT("ibv_writes_unsplit"))
		t->max_write = (uint32_t)IBV_CAP;
	if (t->sq_depth < 2 || rq < 1) {
		tw__detail(detail, detail_len,
		           IBV_WHO ": %s allows too few work requests (max_qp_wr %d, max_cqe %d): "
		           "at least 2 sends and 1 receive per queue pair are needed",
		           t->ch.dev_name, da->max_qp_wr, da->max_cqe);
		ib_destroy(&t->base);
		return TW_ERR_UNSUPPORTED;
	}
	snprintf(t->describe, sizeof(t->describe), "%s; %s %u, send queue %u, %s %u%s%s",
	         t->ch.describe, "largest RDMA write", t->max_write, t->sq_depth,
	         t->srq ? "shared receive queue" : "receive queue", rq, srq_note,
	         o.fork_safe ? "" : "; fork safety off (TW_IB_FORK_SAFE=0)");
	*out = &t->base;
	return TW_OK;
}

static void ib_limits(tw_transport *base, tw_transport_limits *out)
{
	(void)base;
	out->max_frame = TW_RING_FRAME_MAX;
	out->max_packet = IBV_CAP - 4;
	out->writes_land = true;
}

static const char *ib_domain_descriptor(tw_transport *base)
{
	(void)base;
	return "ibv:*";
}

static const char *ib_describe(tw_transport *base)
{
	return ((ib_transport *)base)->describe;
}

static void ib_on_chan_closed(uv_handle_t *h)
{
	(void)h;
}

static void ib_shutdown(tw_transport *base)
{
	ib_transport *t = (ib_transport *)base;
	while (!tw__list_empty(&t->lingering))
		ib_conn_release(TW_CONTAINER_OF(tw__list_front(&t->lingering), ib_conn, linger_link));
	/* with its timer closed, connections freed from here on drain their
	 * queue pair once (ib_srq_reclaim) */
	if (t->reap_timer_init)
		uv_close((uv_handle_t *)&t->reap_timer, ib_on_chan_closed);
	ib_reap_all(t);
	if (t->chan_poll_init)
		uv_close((uv_handle_t *)&t->chan_poll, ib_on_chan_closed);
	if (t->async_init)
		uv_close((uv_handle_t *)&t->async_poll, ib_on_chan_closed);
	t->poller.busy_ns = 0; /* no kick restarts polling */
	tw__loop_poller_cancel(t->base.loop, &t->poller);
}

static void ib_destroy(tw_transport *base)
{
	ib_transport *t = (ib_transport *)base;
	ib_reap_all(t); /* none after ib_shutdown; create's failures come here too */
	if (t->srq)
		(void)ibv_destroy_srq(t->srq);
	if (t->chan)
		(void)ibv_destroy_comp_channel(t->chan);
	if (t->pd)
		(void)ibv_dealloc_pd(t->pd);
	if (t->ch.ctx)
		(void)ibv_close_device(t->ch.ctx);
	tw__free(t);
}

/* The socket under the connection: the kernel knows who holds its other
 * end (transport.h). */
static int ib_conn_peer_of(tw_conn *base, pid_t pid, char *why, size_t why_len)
{
	return tw__sys_socket_peer_of(((ib_conn *)base)->fd, pid, why, why_len);
}

static const tw_conn_ops ib_conn_ops = {
	.write = ib_conn_write,
	.read_into = ib_conn_read_into,
	.read_alloc = ib_conn_read_alloc,
	.watch_end = ib_conn_watch_end,
	.close = ib_conn_close,
	.describe = ib_conn_describe,
	.peer = ib_conn_peer,
	.has_unread = ib_conn_has_unread,
	.was_connected = ib_conn_was_connected,
	.peer_of = ib_conn_peer_of,
	.peer_left = ib_conn_peer_left,
};

const tw_transport_ops tw__ibv_transport_ops = {
	.kind = "ibv",
	.schemes = NULL,
	.create = ib_create,
	.limits = ib_limits,
	.domain_descriptor = ib_domain_descriptor,
	.can_communicate = NULL,
	.check_address = ib_check_address,
	.answer_address = ib_answer_address,
	.listen = ib_listen,
	.connect = ib_connect,
	.shutdown = ib_shutdown,
	.destroy = ib_destroy,
	.describe = ib_describe,
};
