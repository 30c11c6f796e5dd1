/*
 * ibv_ring.c - spec/wire.md 2.4.2 and 2.4.3 from a hostile peer: the
 * harness is a real ibv peer of the IUT's listener. It opens a verbs device
 * itself (simverbs under simverbs-run, or rxe or an HCA), creates an RC
 * queue pair and its own 2 MiB inbox, exchanges well-formed set-up records,
 * and then writes the ring traffic by hand: the hello and a Brochure (ibv +
 * basic), each u32le(length) + bytes, copied by RDMA WRITE WITH IMMEDIATE
 * into the IUT's inbox at the offsets the stream gives, the immediate being
 * the byte count (2.4.3).
 *
 * `ibv_ring_good`: nothing wrong; the IUT must answer with a BrochureAnswer
 * choosing ibv, written into the harness's inbox. `ibv_fuzz_ring_N`: the
 * traffic mutated at random (seed N): frame lengths, bodies, immediates
 * that claim more (or less) than was written, a credit for bytes the IUT
 * never sent, frames split into many writes, bytes written at the wrong
 * offset or outside the inbox. The oracle of every hostile case follows
 * (hostile.h): the IUT survives and serves the next well-formed pipe over
 * ibv.
 *
 * The harness talks to the device with plain libibverbs calls (its own
 * code, not libtensorwire's): the first device with an active port, and a
 * GID of that port, IPv4-mapped first (RoCE), none on InfiniBand (LID).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "case.h"
#include "hostile.h"
#include "rawpeer.h"
#include "session.h"
#include "suites.h"

#define RING (UINT64_C(2) << 20) /* both inboxes (2.4.3.a) */
#define RECVS 64

enum { RING_GOOD = 0, RING_SENDS = 1, RING_FUZZ = 100 };

/* More connections than any IUT's receive queue holds (stock's shared one
 * and ours: 1024 receives each). */
#define SENDS 1100

typedef struct raw_ibv {
	int sock;
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *in_mr, *out_mr;
	uint8_t *inbox, *outbox;
	uint8_t port;
	int gid_index; /* -1: InfiniBand, by LID */
	union ibv_gid gid;
	uint16_t lid;
	enum ibv_mtu mtu;
	uint32_t max_msg;
	/* the IUT's record */
	uint16_t peer_lid;
	union ibv_gid peer_gid;
	uint32_t peer_qpn, peer_mtu;
	uint64_t peer_addr;
	uint32_t peer_rkey;
	uint64_t got; /* bytes the IUT announced into our inbox (immediates) */
	int recvs_posted;
	bool broken; /* an error completion: the queue pair is in error */
} raw_ibv;

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The first device with an active port; on RoCE, the port's first
 * IPv4-mapped GID, else its first non-zero one. */
static int pick_port(raw_ibv *p, char *why, size_t len)
{
	int n = 0;
	p->list = ibv_get_device_list(&n);
	for (int d = 0; p->list && d < n; d++) {
		struct ibv_context *ctx = ibv_open_device(p->list[d]);
		struct ibv_device_attr da;
		if (!ctx)
			continue;
		if (ibv_query_device(ctx, &da) != 0) {
			ibv_close_device(ctx);
			continue;
		}
		for (uint8_t port = 1; port <= da.phys_port_cnt; port++) {
			struct ibv_port_attr pa;
			if (ibv_query_port(ctx, port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE)
				continue;
			int pick = -1;
			if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
				for (int g = 0; g < pa.gid_tbl_len && g < 256; g++) {
					union ibv_gid gid;
					static const uint8_t zero[16];
					if (ibv_query_gid(ctx, port, g, &gid) != 0 || !memcmp(gid.raw, zero, 16))
						continue;
					bool v4 = !memcmp(gid.raw, zero, 10) && gid.raw[10] == 0xff &&
					          gid.raw[11] == 0xff;
					if (pick < 0 || v4) {
						pick = g;
						p->gid = gid;
					}
					if (v4)
						break;
				}
				if (pick < 0)
					continue;
			}
			p->ctx = ctx;
			p->port = port;
			p->gid_index = pick;
			p->lid = pa.lid;
			p->mtu = pa.active_mtu;
			p->max_msg = pa.max_msg_sz;
			return 0;
		}
		ibv_close_device(ctx);
	}
	snprintf(why, len, "harness: no verbs device with an active port for the raw ibv peer");
	return -1;
}

static int post_recvs(raw_ibv *p)
{
	while (p->recvs_posted < RECVS) {
		struct ibv_recv_wr wr = {.wr_id = 1}, *bad;
		if (ibv_post_recv(p->qp, &wr, &bad) != 0)
			return -1;
		p->recvs_posted++;
	}
	return 0;
}

/* Ends the connection of raw_ibv_join: its socket and queue pair. */
static void raw_ibv_leave(raw_ibv *p)
{
	if (p->sock >= 0)
		close(p->sock);
	if (p->qp)
		ibv_destroy_qp(p->qp);
	p->sock = -1;
	p->qp = NULL;
	p->recvs_posted = 0;
	p->got = 0;
	p->broken = false;
}

static void raw_ibv_close(raw_ibv *p)
{
	raw_ibv_leave(p);
	if (p->in_mr)
		ibv_dereg_mr(p->in_mr);
	if (p->out_mr)
		ibv_dereg_mr(p->out_mr);
	if (p->cq)
		ibv_destroy_cq(p->cq);
	if (p->pd)
		ibv_dealloc_pd(p->pd);
	if (p->ctx)
		ibv_close_device(p->ctx);
	if (p->list)
		ibv_free_device_list(p->list);
	if (p->inbox)
		munmap(p->inbox, RING);
	if (p->outbox)
		munmap(p->outbox, RING);
}

/* Our record (2.4.1), then the IUT's, within 3 s. */
static int exchange(raw_ibv *p, char *why, size_t len)
{
	uint8_t rec[56] = {0};
	put32(rec, p->lid);
	if (p->gid_index >= 0)
		memcpy(rec + 8, p->gid.raw, 16);
	put32(rec + 24, p->qp->qp_num);
	put32(rec + 28, (uint32_t)p->mtu);
	put32(rec + 32, p->max_msg);
	uint64_t a = (uint64_t)(uintptr_t)p->inbox;
	put32(rec + 40, (uint32_t)a);
	put32(rec + 44, (uint32_t)(a >> 32));
	put32(rec + 48, p->in_mr->rkey);
	if (send(p->sock, rec, sizeof(rec), MSG_NOSIGNAL) != (ssize_t)sizeof(rec)) {
		snprintf(why, len, "harness: sending the set-up record: %s", strerror(errno));
		return -1;
	}
	char err[256];
	if (twc_raw_recv_exact(p->sock, rec, sizeof(rec), 3000, err, sizeof(err)) != 0) {
		snprintf(why, len, "the IUT sent no 56-byte set-up record within 3 s (2.4.1.a): %s",
		         err);
		return -1;
	}
	p->peer_lid = (uint16_t)get32(rec);
	memcpy(p->peer_gid.raw, rec + 8, 16);
	p->peer_qpn = get32(rec + 24);
	p->peer_mtu = get32(rec + 28);
	p->peer_addr = (uint64_t)get32(rec + 40) | (uint64_t)get32(rec + 44) << 32;
	p->peer_rkey = get32(rec + 48);
	if (p->peer_qpn == 0 || p->peer_qpn >> 24 || p->peer_mtu < 1 || p->peer_mtu > 5) {
		snprintf(why, len, "the IUT's set-up record has QP number %u and MTU enum %u",
		         p->peer_qpn, p->peer_mtu);
		return -1;
	}
	return 0;
}

static int to_rts(raw_ibv *p, char *why, size_t len)
{
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTR,
	                         .path_mtu = (enum ibv_mtu)(p->peer_mtu < (uint32_t)p->mtu
	                                                        ? p->peer_mtu
	                                                        : (uint32_t)p->mtu),
	                         .dest_qp_num = p->peer_qpn,
	                         .rq_psn = 0,
	                         .max_dest_rd_atomic = 1,
	                         .min_rnr_timer = 12};
	at.ah_attr.port_num = p->port;
	at.ah_attr.dlid = p->peer_lid;
	if (p->gid_index >= 0) {
		at.ah_attr.is_global = 1;
		at.ah_attr.grh.dgid = p->peer_gid;
		at.ah_attr.grh.sgid_index = (uint8_t)p->gid_index;
		at.ah_attr.grh.hop_limit = 64;
	}
	int rc = ibv_modify_qp(p->qp, &at,
	                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
	                               IBV_QP_MIN_RNR_TIMER);
	if (rc == 0) {
		struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
		                          .rnr_retry = 7, .sq_psn = 0, .max_rd_atomic = 1};
		rc = ibv_modify_qp(p->qp, &rts,
		                   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	}
	if (rc != 0)
		snprintf(why, len, "harness: ibv_modify_qp to RTR/RTS: %s", strerror(rc));
	return rc ? -1 : 0;
}

static int raw_ibv_join(raw_ibv *p, const char *url, char *why, size_t len);

/* A device, a queue pair, both rings, the exchange, RTS, receives posted. */
static int raw_ibv_open(raw_ibv *p, const char *url, char *why, size_t len)
{
	*p = (raw_ibv){.sock = -1, .gid_index = -1};
	if (pick_port(p, why, len) != 0)
		return -1;
	p->inbox = mmap(NULL, RING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	p->outbox = mmap(NULL, RING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p->inbox == MAP_FAILED || p->outbox == MAP_FAILED) {
		p->inbox = p->inbox == MAP_FAILED ? NULL : p->inbox;
		p->outbox = p->outbox == MAP_FAILED ? NULL : p->outbox;
		snprintf(why, len, "harness: mmap: %s", strerror(errno));
		return -1;
	}
	if (!(p->pd = ibv_alloc_pd(p->ctx)) || !(p->cq = ibv_create_cq(p->ctx, 256, NULL, NULL, 0)) ||
	    !(p->in_mr = ibv_reg_mr(p->pd, p->inbox, RING,
	                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) ||
	    !(p->out_mr = ibv_reg_mr(p->pd, p->outbox, RING, IBV_ACCESS_LOCAL_WRITE))) {
		snprintf(why, len, "harness: verbs set-up (pd, cq, mr): %s", strerror(errno));
		return -1;
	}
	return url ? raw_ibv_join(p, url, why, len) : 0;
}

/* A queue pair of its own, the exchange with the IUT's listener at url, RTS,
 * receives posted. */
static int raw_ibv_join(raw_ibv *p, const char *url, char *why, size_t len)
{
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
	                              .cap = {.max_send_wr = 128, .max_recv_wr = RECVS,
	                                      .max_send_sge = 1, .max_recv_sge = 1}};
	qa.send_cq = qa.recv_cq = p->cq;
	if (!(p->qp = ibv_create_qp(p->pd, &qa))) {
		snprintf(why, len, "harness: ibv_create_qp: %s", strerror(errno));
		return -1;
	}
	struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = p->port,
	                           .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	int rc = ibv_modify_qp(p->qp, &init,
	                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc != 0 || post_recvs(p) != 0) {
		snprintf(why, len, "harness: queue pair to INIT, receives: %s", strerror(rc ? rc : errno));
		return -1;
	}
	char err[256];
	if ((p->sock = twc_raw_connect(url, 3000, err, sizeof(err))) < 0) {
		snprintf(why, len, "harness: connect to the IUT's ibv listener: %s", err);
		return -1;
	}
	if (exchange(p, why, len) != 0)
		return -1;
	return to_rts(p, why, len);
}

/* Takes completions for up to ms: receives (immediates into our inbox, or
 * the IUT's credits) are counted and re-posted; returns once the send
 * `want` completed (0) or failed (its status, > 0), or -1 on the bound.
 * Every completion of a batch is taken before returning: a receive polled
 * together with the awaited send is counted too. */
static int pump(raw_ibv *p, uint64_t want, int ms)
{
	long long end = now_ms() + ms;
	for (;;) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(p->cq, 16, wc), verdict = -1;
		for (int i = 0; i < n; i++) {
			/* a queue pair left before (ring_sends) may still flush
			 * its receives here (qp_num is valid on error too) */
			if (wc[i].qp_num != p->qp->qp_num)
				continue;
			if (wc[i].status != IBV_WC_SUCCESS)
				p->broken = true; /* in error: its receives are flushed */
			if (wc[i].wr_id == 1) { /* a receive: status first (2.4.3.f) */
				p->recvs_posted--;
				if (wc[i].status == IBV_WC_SUCCESS &&
				    wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM)
					p->got += wc[i].imm_data; /* the sender's byte order (2.4.3) */
				continue;
			}
			if (want && wc[i].wr_id == want)
				verdict = wc[i].status == IBV_WC_SUCCESS ? 0 : (int)wc[i].status;
		}
		if (!p->broken)
			(void)post_recvs(p); /* reposted into a queue pair in error, they
			                      * would only be flushed again, and again */
		if (verdict >= 0)
			return verdict;
		if (now_ms() >= end)
			return -1;
		if (n == 0)
			usleep(200);
	}
}

static uint64_t next_wr = 100;

/* Posts one RDMA WRITE (WITH IMMEDIATE when with_imm) of n bytes of our
 * outbox at `off` to the IUT's inbox at `dst_off`; waits for it (2 s). The
 * send's status, 0, or -1 when it never completed. */
static int post_write(raw_ibv *p, uint64_t off, uint32_t n, uint64_t dst_off, bool with_imm,
                      uint32_t imm)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(p->outbox + off), .length = n,
	                      .lkey = p->out_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = ++next_wr, .sg_list = &sge, .num_sge = n ? 1 : 0,
	                         .opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
	                         .send_flags = IBV_SEND_SIGNALED, .imm_data = imm},
	                   *bad;
	wr.wr.rdma.remote_addr = p->peer_addr + dst_off;
	wr.wr.rdma.rkey = p->peer_rkey;
	if (ibv_post_send(p->qp, &wr, &bad) != 0)
		return -1;
	return pump(p, wr.wr_id, 2000);
}

/* A zero-length SEND WITH IMMEDIATE: credit for `imm` bytes (2.4.3). */
static int post_credit(raw_ibv *p, uint32_t imm)
{
	struct ibv_send_wr wr = {.wr_id = ++next_wr, .opcode = IBV_WR_SEND_WITH_IMM,
	                         .send_flags = IBV_SEND_SIGNALED, .imm_data = imm},
	                   *bad;
	if (ibv_post_send(p->qp, &wr, &bad) != 0)
		return -1;
	return pump(p, wr.wr_id, 2000);
}

static size_t put_frame(uint8_t *st, size_t n, const uint8_t *body, size_t bl, size_t *at)
{
	*at = n;
	put32(st + n, (uint32_t)bl);
	memcpy(st + n + 4, body, bl);
	return n + 4 + bl;
}

/* hello, then a Brochure offering ibv ("ibv:*", spec/wire.md 6) and basic */
static size_t base_stream(uint8_t *st, size_t at[2])
{
	uint8_t hello[64], br[128];
	size_t hl = twc_raw_hello("twc-hostile-ring", hello, sizeof(hello));
	size_t bl = twc_raw_brochure("ibv", "ibv:*", br, sizeof(br));
	size_t n = put_frame(st, 0, hello, hl, &at[0]);
	return put_frame(st, n, br, bl, &at[1]);
}

/* The good case: the stream in one write; the answer read from our inbox. */
static int ring_good(raw_ibv *p, char *why, size_t len)
{
	size_t at[2];
	size_t n = base_stream(p->outbox, at);
	int st = post_write(p, 0, (uint32_t)n, 0, true, (uint32_t)n);
	if (st != 0) {
		snprintf(why, len, "the RDMA WRITE WITH IMMEDIATE of the hello and Brochure into the "
		                   "IUT's inbox %s (status %d)", st < 0 ? "never completed" : "failed",
		         st);
		return -1;
	}
	long long end = now_ms() + 5000;
	uint64_t flen = 0;
	while (now_ms() < end) {
		(void)pump(p, 0, 50);
		if (p->got >= 4 && (flen = get32(p->inbox)) + 4 <= p->got)
			break;
	}
	if (p->got < 4 || flen + 4 > p->got) {
		snprintf(why, len, "no complete frame from the IUT in our inbox within 5 s (%llu bytes "
		                   "announced by immediates)", (unsigned long long)p->got);
		return -1;
	}
	twc_raw_answer a;
	char perr[256];
	if (twc_raw_parse_answer(p->inbox + 4, (size_t)flen, &a, perr, sizeof(perr))) {
		snprintf(why, len, "the IUT's answer in our inbox is no BrochureAnswer: %s", perr);
		return -1;
	}
	if (strcmp(a.transport, "ibv") != 0) {
		snprintf(why, len, "the IUT answered a Brochure offering only ibv+basic with "
		                   "transport '%s'", a.transport);
		return -1;
	}
	return 0;
}

/* The base stream mutated for seed: one to three of a frame's length word
 * set to 0, all ones, the inbox capacity, one more or less; bits flipped;
 * the stream cut short; a random frame added; the immediate claiming more
 * than was written (a little, or more than the inbox holds) or nothing;
 * the stream split into many writes; a credit for bytes the IUT never
 * sent; the bytes written at the wrong offset; a write past the end of the
 * inbox (the first mutation of seed N is the (N mod 9)-th of these).
 * Written, then the connection kept 1 s. */
static int ring_fuzz(raw_ibv *p, unsigned seed)
{
	uint64_t x = twc_hostile_seed(UINT64_C(0xc2b2ae3d27d4eb4f), seed);
	uint8_t *st = p->outbox;
	size_t at[3];
	size_t n = base_stream(st, at);
	int nframes = 2, pieces = 1;
	int64_t imm_delta = 0;
	bool imm_zero = false, no_imm = false, outside = false;
	uint32_t credit = 0;
	uint64_t dst = 0;
	char ops[256] = "";
	for (int i = 0, nops = 1 + (int)(twc_hostile_next(&x) % 3); i < nops; i++) {
		uint64_t v = twc_hostile_next(&x);
		size_t o = strlen(ops);
		const char *sep = o ? ", " : " ";
		/* the first mutation is kind seed % 9: twelve seeds try every kind */
		uint64_t kind = twc_hostile_next(&x) % 9;
		switch (i == 0 ? seed % 9 : kind) {
		case 0: { /* a length word */
			size_t f = at[twc_hostile_next(&x) % (uint64_t)nframes];
			uint32_t cur = get32(st + f);
			static const char *const names[] = {"0", "all ones", "capacity", "capacity+1",
			                                    "one more", "one less"};
			uint32_t vals[] = {0, UINT32_MAX, (uint32_t)RING, (uint32_t)RING + 1, cur + 1,
			                   cur - 1};
			int w = (int)(v % 6);
			put32(st + f, vals[w]);
			snprintf(ops + o, sizeof(ops) - o, "%slength@%zu=%s", sep, f, names[w]);
			break;
		}
		case 1:
			for (int j = 0, k = 1 + (int)(v % 3); j < k; j++)
				st[twc_hostile_next(&x) % n] ^= (uint8_t)(1u << (twc_hostile_next(&x) % 8));
			snprintf(ops + o, sizeof(ops) - o, "%sbits", sep);
			break;
		case 2:
			n -= 1 + v % (n - 1);
			snprintf(ops + o, sizeof(ops) - o, "%scut to %zu", sep, n);
			break;
		case 3: { /* a random frame */
			uint8_t body[64];
			size_t bl = v % sizeof(body);
			for (size_t j = 0; j < bl; j++)
				body[j] = (uint8_t)twc_hostile_next(&x);
			if (nframes < 3)
				n = put_frame(st, n, body, bl, &at[nframes++]);
			snprintf(ops + o, sizeof(ops) - o, "%sframe of %zu random bytes", sep, bl);
			break;
		}
		case 4: /* the immediate lies */
			if (v % 3 == 0)
				imm_delta = 1 + (int64_t)(twc_hostile_next(&x) % 64);
			else if (v % 3 == 1)
				imm_delta = (int64_t)RING;
			else
				imm_zero = true;
			snprintf(ops + o, sizeof(ops) - o, "%simmediate %s", sep,
			         v % 3 == 0 ? "claims a little more" :
			         v % 3 == 1 ? "claims more than the inbox" : "0");
			break;
		case 5: /* many small writes */
			pieces = 2 + (int)(v % 16);
			snprintf(ops + o, sizeof(ops) - o, "%sin %d writes", sep, pieces);
			break;
		case 6: /* a credit for bytes the IUT never sent */
			credit = v % 2 ? (uint32_t)RING + 1 : 1 + (uint32_t)(v >> 40) % 4096;
			snprintf(ops + o, sizeof(ops) - o, "%scredit of %u", sep, credit);
			break;
		case 7: /* the wrong offset */
			if (v % 2)
				no_imm = true;
			else
				dst = 1 + v % 64;
			snprintf(ops + o, sizeof(ops) - o, "%s%s", sep,
			         v % 2 ? "written without an immediate" : "written at the wrong offset");
			break;
		default: /* past the end of the inbox: a remote access error */
			outside = true;
			snprintf(ops + o, sizeof(ops) - o, "%sa write past the inbox's end", sep);
			break;
		}
	}
	printf("# ibv ring traffic (seed %u): %zu bytes in %d frames;%s\n", seed, n, nframes, ops);
	fflush(stdout);
	if (credit)
		(void)post_credit(p, credit);
	if (outside)
		(void)post_write(p, 0, 64, RING - 32, true, 64);
	uint64_t done = 0;
	for (int i = 0; i < pieces && done < n; i++) {
		uint64_t piece = i == pieces - 1 ? n - done : 1 + twc_hostile_next(&x) % (n - done);
		uint32_t imm = (uint32_t)piece;
		if (imm_delta)
			imm = (uint32_t)((int64_t)imm + imm_delta);
		if (imm_zero)
			imm = 0;
		if (post_write(p, done, (uint32_t)piece, done + dst, !no_imm, imm) != 0)
			break; /* the IUT may have ended the connection: judged by what follows */
		done += piece;
	}
	(void)twc_raw_wait_closed(p->sock, 1000);
	return 0;
}

/* SENDS connections, each a SEND of one byte, where the IUT's receives take
 * none (2.4.3: data comes by RDMA WRITE WITH IMMEDIATE, credit by
 * zero-length SENDs): each fails that connection at the IUT and uses up
 * one of its receives. One that was shared and never put back (stock puts
 * back only receives that succeeded) is gone for every later peer; once
 * all are, a SEND finds none and waits (receiver not ready). */
static int ring_sends(raw_ibv *p, const char *url, char *why, size_t len)
{
	long long start = now_ms();
	for (int i = 0; i < SENDS; i++) {
		if (raw_ibv_join(p, url, why, len) != 0) {
			/* which connection, keeping a harness failure one */
			static const char h[] = "harness: ";
			bool ours = !strncmp(why, h, sizeof(h) - 1);
			char first[512];
			snprintf(first, sizeof(first), "%s", why + (ours ? sizeof(h) - 1 : 0));
			snprintf(why, len, "%sconnection %d of %d: %s", ours ? h : "", i + 1, SENDS, first);
			return -1;
		}
		p->outbox[0] = 0x5a;
		struct ibv_sge sge = {.addr = (uintptr_t)p->outbox, .length = 1,
		                      .lkey = p->out_mr->lkey};
		struct ibv_send_wr wr = {.wr_id = ++next_wr, .sg_list = &sge, .num_sge = 1,
		                         .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
		                   *bad;
		if (ibv_post_send(p->qp, &wr, &bad) != 0) {
			snprintf(why, len, "harness: ibv_post_send of SEND %d: %s", i + 1,
			         strerror(errno));
			return -1;
		}
		if (pump(p, wr.wr_id, 2000) < 0) {
			snprintf(why, len, "after %d connections that each sent one byte by SEND (a "
			                   "receive the IUT's ring does not expect), SEND %d found no "
			                   "receive posted at the IUT within 2 s: its receives were "
			                   "used up and not put back",
			         i, i + 1);
			return -1;
		}
		raw_ibv_leave(p);
		if ((i + 1) % 100 == 0) {
			printf("# %d connections so far, each answered (%lld ms)\n", i + 1, now_ms() - start);
			fflush(stdout);
		}
	}
	printf("# %d connections, each one SEND of one byte: every one was answered\n", SENDS);
	fflush(stdout);
	return 0;
}

static int hostile(twc_session *s, int k, char *why, size_t len)
{
	raw_ibv p;
	if (k == RING_SENDS) {
		int rc = raw_ibv_open(&p, NULL, why, len);
		if (rc == 0)
			rc = ring_sends(&p, s->url, why, len);
		raw_ibv_close(&p);
		return rc;
	}
	int rc = raw_ibv_open(&p, s->url, why, len);
	if (rc == 0)
		rc = k >= RING_FUZZ ? ring_fuzz(&p, (unsigned)(k - RING_FUZZ)) : ring_good(&p, why, len);
	raw_ibv_close(&p);
	if (rc != 0)
		return -1;
	/* a hello and Brochure that got through made the listener accept a pipe */
	return twc_hostile_take_strays(s, why, len);
}

static twc_outcome_t run_ibv_ring(const twc_case *c, twc_case_env *env)
{
	return twc_hostile_basic(env, "ibv", "ibv://127.0.0.1:0", hostile, (int)(intptr_t)c->arg,
	                         3 * 1024 * 1024, UINT64_C(17) << 40, "after the hostile ring traffic");
}

#define IBV_RING(id_, what_, req_, kind_)                                                         \
	{.id = "wire.ibv_" id_, .suite = "wire", .section = "wire.md 2.4.3", .level = TWC_MUST,     \
	 .needs = "rdma",                                                                          \
	 .description = "raw ibv peer (its own queue pair): " what_ "; then a good pipe over ibv", \
	 .requirement = req_, .timeout_s = 60, .run = run_ibv_ring,                                \
	 .arg = (const void *)(intptr_t)(kind_)}

static const twc_case cases[] = {
	IBV_RING("ring_good",
	         "good set-up records, then the hello and a Brochure (ibv+basic) by RDMA WRITE WITH "
	         "IMMEDIATE into the IUT's inbox; a BrochureAnswer choosing ibv must come back in "
	         "the harness's inbox",
	         "(2.4.3) Data moves by RDMA WRITE WITH IMMEDIATE from the sender's outbox into the "
	         "same offsets of the peer's inbox, with the framing of 2.3.3 [...] The immediate "
	         "is the byte count of that write.",
	         RING_GOOD),
	IBV_RING("srq_sends",
	         "1100 connections in a row, each sending one byte by SEND (no receive of the ring "
	         "expects one) and closing",
	         "(2.4.3) Data moves by RDMA WRITE WITH IMMEDIATE [...]; credit returns by "
	         "zero-length SEND WITH IMMEDIATE. (2.4.3.g) A receiver whose receives are shared "
	         "among connections MUST post a new one for every receive completion, whatever its "
	         "status. Its listener MUST serve the next peer (3.3.f).",
	         RING_SENDS),
#define IBV_RING_FUZZ(n_)                                                                         \
	IBV_RING("fuzz_ring_" #n_,                                                                \
	         "good set-up records, then ring traffic mutated at random (seed " #n_ "): frame " \
	         "lengths, bodies, lying immediates, a credit for bytes never sent, split, "        \
	         "misplaced or out-of-bounds writes",                                               \
	         "(2.4.3.c) A receiver MUST fail the connection with a protocol error when an "     \
	         "immediate claims more bytes than its inbox has room for, or a credit returns "    \
	         "more than was sent; it MUST NOT trust either into a copy. Its listener MUST "     \
	         "serve the next peer (3.3.f).",                                                    \
	         RING_FUZZ + n_)
	TWC_SEEDS_12(IBV_RING_FUZZ),
};

const twc_case *twc_suite_wire_ibv_ring(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
