/* simverbs verbs semantics and hazard models, checked the way a user would:
 * two RC QPs in one process connected through the engine over 127.0.0.1,
 * bytes compared after each transfer, each completion and event counted.
 * usage: sv_verbs_test basic|srq|max_msg|devmem|fork_legacy|fork_safe|
 *                      fork_modern|fork_strict|port|memlock|nosrq|garbage|garbage_off
 * Prints one line per check and "N passed, N failed"; exit 1 on a failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdbool.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

int simverbs_mark_device_memory(void *addr, size_t len);

static int passed, failed;
#define CHECK(cond, ...)                                                                 \
	do {                                                                             \
		if (cond) {                                                              \
			passed++;                                                        \
			printf("ok - ");                                                 \
		} else {                                                                 \
			failed++;                                                        \
			printf("not ok - (%s:%d) ", __FILE__, __LINE__);                 \
		}                                                                        \
		printf(__VA_ARGS__);                                                     \
		printf("\n");                                                            \
		fflush(stdout);                                                          \
	} while (0)

struct end {
	struct ibv_cq *scq, *rcq;
	struct ibv_comp_channel *ch;
	struct ibv_qp *qp;
	struct ibv_srq *srq;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint8_t timeout_exp = 14;

static void make_end(struct end *e, bool with_channel, struct ibv_srq *srq)
{
	memset(e, 0, sizeof(*e));
	if (with_channel)
		e->ch = ibv_create_comp_channel(ctx);
	e->scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	e->rcq = ibv_create_cq(ctx, 64, e, e->ch, 0);
	struct ibv_qp_init_attr a = {.send_cq = e->scq, .recv_cq = e->rcq, .srq = srq,
				     .cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2,
					     .max_recv_sge = 2, .max_inline_data = 64},
				     .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	e->srq = srq;
	e->qp = ibv_create_qp(pd, &a);
	if (!e->qp || !e->scq || !e->rcq) {
		printf("Bail out! cannot create QP: %s\n", strerror(errno));
		exit(1);
	}
}

static int to_rts(struct end *e, uint32_t dest_qpn, unsigned access)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = access};
	int r = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						 IBV_QP_ACCESS_FLAGS);
	if (r)
		return r;
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 0, &gid);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 100;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	r = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER);
	if (r)
		return r;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 100;
	a.timeout = timeout_exp;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
						IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						IBV_QP_MAX_QP_RD_ATOMIC);
}

static void connect_pair(struct end *a, struct end *b, unsigned access)
{
	int r1 = to_rts(a, b->qp->qp_num, access), r2 = to_rts(b, a->qp->qp_num, access);
	if (r1 || r2) {
		printf("Bail out! cannot connect QPs: %s\n", strerror(r1 ? r1 : r2));
		exit(1);
	}
}

static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			return 0;
		usleep(100);
	}
}

static int post_recv(struct ibv_qp *qp, struct ibv_srq *srq, struct ibv_mr *mr, void *buf,
		     uint32_t len, uint64_t id)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
	return srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

static int post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr, void *buf,
		     uint32_t len, uint64_t id, unsigned flags, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = mr ? mr->lkey : 0};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = len ? 1 : 0,
				 .opcode = op, .send_flags = flags,
				 .imm_data = htonl(0x1234)},
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static void open_dev(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1) {
		printf("Bail out! no device: %s\n", strerror(errno));
		exit(1);
	}
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!ctx) {
		printf("Bail out! open: %s\n", strerror(errno));
		exit(1);
	}
	pd = ibv_alloc_pd(ctx);
}

static void destroy_end(struct end *e)
{
	ibv_destroy_qp(e->qp);
	ibv_destroy_cq(e->scq);
	ibv_destroy_cq(e->rcq);
	if (e->ch)
		ibv_destroy_comp_channel(e->ch);
}

static const unsigned ALL = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ;

struct destroyer {
	struct ibv_cq *cq;
	atomic_int done;
	int rc;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;
	d->rc = ibv_destroy_cq(d->cq);
	atomic_store(&d->done, 1);
	return NULL;
}

/* ibv_destroy_cq waits until every completion event handed out was acked */
static void test_ack_before_destroy(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct end a, b;
	make_end(&a, false, NULL);
	memset(&b, 0, sizeof(b));
	b.scq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	b.rcq = ibv_create_cq(ctx, 8, NULL, ch, 0);
	struct ibv_qp_init_attr qa = {.send_cq = b.scq, .recv_cq = b.rcq,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	b.qp = ibv_create_qp(pd, &qa);
	connect_pair(&a, &b, ALL);
	char buf[64] = "x";
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), ALL);
	ibv_req_notify_cq(b.rcq, 0);
	post_recv(b.qp, NULL, mr, buf, sizeof(buf), 1);
	post_send(a.qp, IBV_WR_SEND, NULL, buf, 8, 2, IBV_SEND_INLINE, 0, 0);
	struct ibv_cq *ecq;
	void *ectx;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == b.rcq, "event handed out");
	struct ibv_wc wc;
	wait_wc(b.rcq, &wc, 5000);
	wait_wc(a.scq, &wc, 5000);
	ibv_destroy_qp(b.qp);
	struct destroyer d = {.cq = b.rcq};
	pthread_t t;
	pthread_create(&t, NULL, destroy_thread, &d);
	usleep(200000);
	CHECK(!atomic_load(&d.done), "ibv_destroy_cq blocks while the event is not acked");
	ibv_ack_cq_events(ecq, 1);
	pthread_join(t, NULL);
	CHECK(atomic_load(&d.done) && d.rc == 0, "and returns once it is");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "then the channel goes");
	ibv_destroy_cq(b.scq);
	ibv_destroy_qp(a.qp);
	ibv_destroy_cq(a.scq);
	ibv_destroy_cq(a.rcq);
	ibv_dereg_mr(mr);
}


static void test_basic(void)
{
	struct end a, b;
	make_end(&a, false, NULL);
	make_end(&b, true, NULL);
	connect_pair(&a, &b, ALL);
	size_t big = 3u * 1024 * 1024 + 17; /* several packets */
	uint8_t *sa = malloc(big), *rb = malloc(big);
	struct ibv_mr *ma = ibv_reg_mr(pd, sa, big, ALL), *mb = ibv_reg_mr(pd, rb, big, ALL);
	CHECK(ma && mb && ma->lkey != mb->lkey, "two MRs with distinct keys");
	struct ibv_wc wc;

	/* SEND/RECV with a completion event on b's receive CQ */
	CHECK(ibv_req_notify_cq(b.rcq, 0) == 0, "arm b's receive CQ");
	fill(sa, big, 1);
	memset(rb, 0, big);
	post_recv(b.qp, NULL, mb, rb, (uint32_t)big, 7);
	CHECK(post_send(a.qp, IBV_WR_SEND, ma, sa, (uint32_t)big, 1, 0, 0, 0) == 0, "post SEND");
	struct pollfd pf = {.fd = b.ch->fd, .events = POLLIN};
	CHECK(poll(&pf, 1, 5000) == 1, "completion channel fd becomes readable");
	struct ibv_cq *ecq;
	void *ectx;
	CHECK(ibv_get_cq_event(b.ch, &ecq, &ectx) == 0 && ecq == b.rcq && ectx == &b,
	      "ibv_get_cq_event returns the CQ and its context");
	ibv_ack_cq_events(ecq, 1);
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
		      wc.byte_len == big && wc.wr_id == 7 && wc.src_qp == a.qp->qp_num,
	      "RECV completion: status %s, %u bytes", ibv_wc_status_str(wc.status), wc.byte_len);
	CHECK(!memcmp(sa, rb, big), "SEND payload arrives intact (%zu bytes)", big);
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND &&
		      wc.wr_id == 1,
	      "SEND completion");
	/* busy objects */
	CHECK(ibv_destroy_cq(b.rcq) == EBUSY, "destroying a CQ that a QP uses is EBUSY");
	CHECK(ibv_destroy_comp_channel(b.ch) == EBUSY, "a channel with CQs is EBUSY");
	/* one-shot arming: not re-armed, so the next completion raises no event */
	post_recv(b.qp, NULL, mb, rb, 64, 8);
	post_send(a.qp, IBV_WR_SEND, ma, sa, 64, 2, 0, 0, 0);
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_SUCCESS, "second RECV");
	CHECK(poll(&pf, 1, 200) == 0, "no event without re-arming (one-shot)");
	wait_wc(a.scq, &wc, 5000);

	/* RDMA WRITE and WRITE_WITH_IMM */
	fill(sa, big, 2);
	CHECK(post_send(a.qp, IBV_WR_RDMA_WRITE, ma, sa, (uint32_t)big, 3, 0, (uintptr_t)rb,
			mb->rkey) == 0, "post RDMA WRITE");
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_RDMA_WRITE,
	      "RDMA WRITE completion");
	CHECK(!memcmp(sa, rb, big), "RDMA WRITE data placed intact");
	post_recv(b.qp, NULL, mb, rb, 16, 9);
	fill(sa, 4096, 3);
	post_send(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, ma, sa, 4096, 4, 0, (uintptr_t)rb + 100,
		  mb->rkey);
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		      ntohl(wc.imm_data) == 0x1234 && wc.byte_len == 4096,
	      "WRITE_WITH_IMM consumes a receive, carries the immediate");
	CHECK(!memcmp(sa, rb + 100, 4096), "WRITE_WITH_IMM data placed");
	wait_wc(a.scq, &wc, 5000);

	/* RDMA READ */
	fill(rb, big, 4);
	memset(sa, 0, big);
	CHECK(post_send(a.qp, IBV_WR_RDMA_READ, ma, sa, (uint32_t)big, 5, 0, (uintptr_t)rb,
			mb->rkey) == 0, "post RDMA READ");
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_RDMA_READ,
	      "RDMA READ completion");
	CHECK(!memcmp(sa, rb, big), "RDMA READ data intact");

	/* inline: the buffer may change right after the post */
	char msg[32] = "inline payload";
	post_recv(b.qp, NULL, mb, rb, 64, 10);
	CHECK(post_send(a.qp, IBV_WR_SEND, NULL, msg, sizeof(msg), 6, IBV_SEND_INLINE, 0, 0) == 0,
	      "post inline SEND (no MR)");
	memset(msg, 'x', sizeof(msg));
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_SUCCESS && !strcmp((char *)rb, "inline payload"),
	      "inline data copied at post time");
	wait_wc(a.scq, &wc, 5000);
	char huge[512];
	CHECK(post_send(a.qp, IBV_WR_SEND, NULL, huge, sizeof(huge), 6, IBV_SEND_INLINE, 0, 0) ==
		      EINVAL,
	      "inline beyond max_inline_data is EINVAL");

	/* zero-length SEND_WITH_IMM */
	post_recv(b.qp, NULL, mb, rb, 64, 11);
	post_send(a.qp, IBV_WR_SEND_WITH_IMM, NULL, NULL, 0, 7, 0, 0, 0);
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_SUCCESS && wc.byte_len == 0 &&
		      (wc.wc_flags & IBV_WC_WITH_IMM),
	      "zero-length SEND_WITH_IMM");
	wait_wc(a.scq, &wc, 5000);

	/* receive buffer too small: LOC_LEN_ERR at the receiver, REM_INV_REQ at the sender */
	post_recv(b.qp, NULL, mb, rb, 8, 12);
	post_recv(b.qp, NULL, mb, rb, 8, 13);
	post_send(a.qp, IBV_WR_SEND, ma, sa, 100, 8, 0, 0, 0);
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_LOC_LEN_ERR && wc.wr_id == 12,
	      "short receive buffer: %s", ibv_wc_status_str(wc.status));
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 13,
	      "the next receive is flushed");
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_REM_INV_REQ_ERR,
	      "sender sees %s", ibv_wc_status_str(wc.status));
	post_send(a.qp, IBV_WR_SEND, ma, sa, 10, 9, 0, 0, 0);
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 9,
	      "posts after the error are flushed");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &qi);
	CHECK(qa.qp_state == IBV_QPS_ERR, "sender QP is in ERR");

	destroy_end(&a);
	destroy_end(&b);

	/* access violation: WRITE to an MR without REMOTE_WRITE */
	make_end(&a, false, NULL);
	make_end(&b, false, NULL);
	connect_pair(&a, &b, ALL);
	struct ibv_mr *ro = ibv_reg_mr(pd, rb, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	post_send(a.qp, IBV_WR_RDMA_WRITE, ma, sa, 64, 20, 0, (uintptr_t)rb, ro->rkey);
	post_send(a.qp, IBV_WR_RDMA_WRITE, ma, sa, 64, 21, 0, (uintptr_t)rb, mb->rkey);
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 20,
	      "WRITE without REMOTE_WRITE: %s", ibv_wc_status_str(wc.status));
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 21,
	      "following WR flushed");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0 && ev.event_type == IBV_EVENT_QP_ACCESS_ERR &&
		      ev.element.qp == b.qp,
	      "responder gets IBV_EVENT_QP_ACCESS_ERR");
	ibv_ack_async_event(&ev);
	/* out of bounds */
	destroy_end(&a);
	destroy_end(&b);
	make_end(&a, false, NULL);
	make_end(&b, false, NULL);
	connect_pair(&a, &b, ALL);
	post_send(a.qp, IBV_WR_RDMA_READ, ma, sa, 64, 22, 0, (uintptr_t)rb + 4090, ro->rkey);
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_REM_ACCESS_ERR,
	      "READ past the end of the MR: %s", ibv_wc_status_str(wc.status));
	CHECK(ibv_get_async_event(ctx, &ev) == 0 && ev.event_type == IBV_EVENT_QP_ACCESS_ERR,
	      "and its async event");
	ibv_ack_async_event(&ev);
	/* bad lkey: local protection error */
	destroy_end(&a);
	destroy_end(&b);
	make_end(&a, false, NULL);
	make_end(&b, false, NULL);
	connect_pair(&a, &b, ALL);
	struct ibv_sge s = {.addr = (uintptr_t)sa, .length = 64, .lkey = 0xdead00};
	struct ibv_send_wr wr = {.wr_id = 23, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE},
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)rb;
	wr.wr.rdma.rkey = mb->rkey;
	ibv_post_send(a.qp, &wr, &bad);
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_LOC_PROT_ERR,
	      "unknown lkey: %s", ibv_wc_status_str(wc.status));
	destroy_end(&a);
	destroy_end(&b);
	ibv_dereg_mr(ro);
	ibv_dereg_mr(ma);
	ibv_dereg_mr(mb);
	free(sa);
	free(rb);
}

static void test_state_machine(void)
{
	struct end a;
	make_end(&a, false, NULL);
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTR};
	CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_STATE) == EINVAL, "RESET -> RTR is EINVAL");
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 1;
	CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PORT) == EINVAL,
	      "RESET -> INIT without required attributes is EINVAL");
	CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX |
					       IBV_QP_ACCESS_FLAGS) == 0,
	      "RESET -> INIT");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_1024;
	at.dest_qp_num = 1;
	at.ah_attr.is_global = 0; /* RoCE without a GRH */
	at.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) ==
		      EINVAL,
	      "RTR without GRH on an Ethernet port is EINVAL");
	char b[8];
	CHECK(post_send(a.qp, IBV_WR_SEND, NULL, b, 4, 1, IBV_SEND_INLINE, 0, 0) == EINVAL,
	      "post_send before RTS is EINVAL");
	destroy_end(&a);
}

static void test_srq(void)
{
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq != NULL, "create SRQ");
	struct end a, b;
	make_end(&a, false, NULL);
	make_end(&b, false, srq);
	connect_pair(&a, &b, ALL);
	uint8_t *buf = calloc(1, 1 << 16);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 1 << 16, ALL);
	for (int i = 0; i < 8; i++)
		post_recv(NULL, srq, mr, buf + 4096 * (i + 1), 4096, 100 + (uint64_t)i);
	struct ibv_srq_attr la = {.srq_limit = 6};
	CHECK(ibv_modify_srq(srq, &la, IBV_SRQ_LIMIT) == 0, "arm the SRQ limit");
	struct ibv_wc wc;
	fill(buf, 1000, 9);
	for (int i = 0; i < 3; i++)
		post_send(a.qp, IBV_WR_SEND, mr, buf, 1000, (uint64_t)i, 0, 0, 0);
	int got = 0;
	for (int i = 0; i < 3; i++)
		if (wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_SUCCESS &&
		    wc.wr_id == 100 + (uint64_t)i && !memcmp(buf, buf + 4096 * (i + 1), 1000))
			got++;
	CHECK(got == 3, "three SENDs land in SRQ buffers, in order");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0 &&
		      ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "SRQ limit event fired");
	ibv_ack_async_event(&ev);
	struct ibv_recv_wr rw = {0}, *bad;
	CHECK(ibv_post_recv(b.qp, &rw, &bad) == EINVAL, "post_recv on an SRQ QP is EINVAL");
	CHECK(ibv_destroy_srq(srq) == EBUSY, "SRQ in use cannot be destroyed");
	for (int i = 0; i < 3; i++)
		wait_wc(a.scq, &wc, 5000);
	destroy_end(&a);
	destroy_end(&b);
	CHECK(ibv_destroy_srq(srq) == 0, "destroy SRQ");
	ibv_dereg_mr(mr);
	free(buf);
}

static void write_config(const char *text)
{
	static char path[] = "/tmp/sv_verbs_test_XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		exit(2);
	close(fd);
	setenv("SIMVERBS_CONFIG", path, 1);
}

static void test_max_msg(void)
{
	struct ibv_port_attr pa;
	ibv_query_port(ctx, 1, &pa);
	CHECK(pa.max_msg_sz == 4096, "port reports max_msg_sz %u", pa.max_msg_sz);
	struct end a, b;
	make_end(&a, false, NULL);
	make_end(&b, false, NULL);
	connect_pair(&a, &b, ALL);
	uint8_t *buf = calloc(1, 16384);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 16384, ALL);
	post_recv(b.qp, NULL, mr, buf + 8192, 8192, 1);
	CHECK(post_send(a.qp, IBV_WR_SEND, mr, buf, 4096, 1, 0, 0, 0) == 0, "4096-byte SEND posts");
	struct ibv_wc wc;
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_SUCCESS, "and completes");
	CHECK(post_send(a.qp, IBV_WR_RDMA_WRITE, mr, buf, 4097, 2, 0, (uintptr_t)buf + 8192,
			mr->rkey) == 0,
	      "4097-byte WRITE posts (the error comes in the completion)");
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_LOC_LEN_ERR,
	      "message over max_msg_sz: %s", ibv_wc_status_str(wc.status));
	destroy_end(&a);
	destroy_end(&b);
	ibv_dereg_mr(mr);
	free(buf);
}

static void test_devmem(void)
{
	uint8_t *dev = calloc(1, 8192), *src = calloc(1, 8192);
	simverbs_mark_device_memory(dev, 8192);
	struct ibv_mr *md = ibv_reg_mr(pd, dev, 8192, ALL), *ms = ibv_reg_mr(pd, src, 8192, ALL);
	struct end a, b;
	make_end(&a, false, NULL);
	make_end(&b, false, NULL);
	connect_pair(&a, &b, ALL);
	struct ibv_wc wc;
	fill(src, 100, 5);
	post_recv(b.qp, NULL, md, dev, 4096, 1);
	post_send(a.qp, IBV_WR_SEND, ms, src, 64, 1, 0, 0, 0);
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_SUCCESS && !memcmp(dev, src, 64),
	      "64-byte receive into device memory works");
	wait_wc(a.scq, &wc, 5000);
	post_recv(b.qp, NULL, md, dev + 4096, 4096, 2);
	post_send(a.qp, IBV_WR_SEND, ms, src, 32, 2, 0, 0, 0);
	CHECK(wait_wc(b.rcq, &wc, 5000) && wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 2,
	      "32-byte receive into device memory fails (scatter-to-CQE): %s",
	      ibv_wc_status_str(wc.status));
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_SUCCESS,
	      "the sender saw success, as with mlx5");
	destroy_end(&a);
	destroy_end(&b);
	ibv_dereg_mr(md);
	ibv_dereg_mr(ms);
	free(dev);
	free(src);
}

static bool have_uffd(void)
{
#ifdef UFFD_USER_MODE_ONLY
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
#else
	int fd = -1;
#endif
	if (fd < 0)
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (fd < 0)
		return false;
	struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_PAGEFAULT_FLAG_WP};
	bool ok = ioctl(fd, UFFDIO_API, &api) == 0 && (api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP);
	close(fd);
	return ok;
}

/* fork: the peer WRITEs into a registered buffer after the parent forked and
 * wrote to it. mode: 0 legacy unprotected, 1 fork-safe, 2 modern kernel,
 * 3 strict (every private page detaches at fork) */
static void test_fork(int mode)
{
	enum ibv_fork_status want = mode == 2 ? IBV_FORK_UNNEEDED
				    : mode == 1 ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
	bool hazard = mode == 0 || mode == 3;
	if (mode == 1)
		CHECK(ibv_fork_init() == 0, "ibv_fork_init before any registration");
	CHECK(ibv_is_fork_initialized() == want, "ibv_is_fork_initialized() = %d",
	      ibv_is_fork_initialized());
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *dst = aligned_alloc((size_t)pg, (size_t)pg * 4), *src = aligned_alloc((size_t)pg, (size_t)pg);
	memset(dst, 0, (size_t)pg * 4);
	struct ibv_mr *md = ibv_reg_mr(pd, dst, (size_t)pg * 4, ALL), *ms = ibv_reg_mr(pd, src, (size_t)pg, ALL);
	if (hazard)
		CHECK(ibv_fork_init() == EINVAL, "ibv_fork_init after a registration is EINVAL");
	struct end a, b;
	make_end(&a, false, NULL);
	make_end(&b, false, NULL);
	connect_pair(&a, &b, ALL);
	fill(src, (size_t)pg, 6); /* source content before fork() */
	int p[2];
	if (pipe(p))
		exit(2);
	pid_t child = fork();
	if (child == 0) {
		char c;
		close(p[1]);
		ssize_t r = read(p[0], &c, 1); /* stays alive, sharing the pages */
		_exit(r < 0);
	}
	close(p[0]);
	memset(dst, 'P', 16); /* the parent's first write after fork() */
	post_send(a.qp, IBV_WR_RDMA_WRITE, ms, src, (uint32_t)pg, 1, 0, (uintptr_t)dst, md->rkey);
	struct ibv_wc wc;
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_SUCCESS, "WRITE completes successfully");
	bool landed = !memcmp(dst, src, (size_t)pg);
	if (hazard)
		CHECK(!landed && dst[0] == 'P',
		      "without fork protection the data lands in a copy the parent never sees");
	else
		CHECK(landed, "the parent sees the data");
	/* a page the parent did not touch after fork stays shared: data visible
	 * (where userfaultfd is unavailable simverbs detaches every page at fork) */
	post_send(a.qp, IBV_WR_RDMA_WRITE, ms, src, 64, 2, 0, (uintptr_t)dst + 2 * pg, md->rkey);
	bool ok2 = wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_SUCCESS;
	bool seen = !memcmp(dst + 2 * pg, src, 64);
	if (mode == 3 || (mode == 0 && !have_uffd()))
		CHECK(ok2 && !seen, "strict (or no userfaultfd): untouched pages detached too");
	else
		CHECK(ok2 && seen, "a page not written since fork() still receives data");
	/* the parent rewrites its source buffer: without protection the HCA
	 * still reads the pre-fork page */
	uint8_t *old = malloc((size_t)pg);
	memcpy(old, src, (size_t)pg);
	fill(src, (size_t)pg, 7);
	post_send(a.qp, IBV_WR_RDMA_WRITE, ms, src, 256, 3, 0, (uintptr_t)dst + 3 * pg, md->rkey);
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_SUCCESS, "third WRITE completes");
	if (mode == 3) {
		/* both ends live in this process, so the destination page is detached too */
		uint8_t zero[256] = {0};
		CHECK(!memcmp(dst + 3 * pg, zero, 256), "strict: the parent sees none of it");
	} else if (hazard)
		CHECK(!memcmp(dst + 3 * pg, old, 256), "the peer receives the stale pre-fork bytes");
	else
		CHECK(!memcmp(dst + 3 * pg, src, 256), "the peer receives the new bytes");
	free(old);
	ssize_t w = write(p[1], "x", 1);
	(void)w;
	close(p[1]);
	int st;
	waitpid(child, &st, 0);
	destroy_end(&a);
	destroy_end(&b);
	ibv_dereg_mr(md);
	ibv_dereg_mr(ms);
	free(dst);
	free(src);
}

static void test_port(const char *ctl)
{
	struct end a, b;
	timeout_exp = 8; /* ~1 ms ack timeout */
	make_end(&a, false, NULL);
	make_end(&b, false, NULL);
	connect_pair(&a, &b, ALL);
	FILE *f = fopen(ctl, "w");
	fprintf(f, "simrdma0 1 down\n");
	fclose(f);
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0 && ev.event_type == IBV_EVENT_PORT_ERR &&
		      ev.element.port_num == 1,
	      "port goes down: IBV_EVENT_PORT_ERR");
	ibv_ack_async_event(&ev);
	struct ibv_port_attr pa;
	ibv_query_port(ctx, 1, &pa);
	CHECK(pa.state == IBV_PORT_DOWN, "ibv_query_port says %s", ibv_port_state_str(pa.state));
	char buf[64];
	struct ibv_wc wc;
	post_send(a.qp, IBV_WR_SEND, NULL, buf, 8, 1, IBV_SEND_INLINE, 0, 0);
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_RETRY_EXC_ERR,
	      "traffic on a down port: %s", ibv_wc_status_str(wc.status));
	f = fopen(ctl, "w");
	fprintf(f, "simrdma0 1 up\n");
	fclose(f);
	CHECK(ibv_get_async_event(ctx, &ev) == 0 && ev.event_type == IBV_EVENT_PORT_ACTIVE,
	      "port comes back: IBV_EVENT_PORT_ACTIVE");
	ibv_ack_async_event(&ev);
	ibv_query_port(ctx, 1, &pa);
	CHECK(pa.state == IBV_PORT_ACTIVE, "ibv_query_port says %s", ibv_port_state_str(pa.state));
	destroy_end(&a);
	destroy_end(&b);
	unlink(ctl);
}

static void test_memlock(void)
{
	struct rlimit rl = {.rlim_cur = 1 << 20, .rlim_max = RLIM_INFINITY};
	getrlimit(RLIMIT_MEMLOCK, &rl);
	rl.rlim_cur = 1 << 20;
	CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "RLIMIT_MEMLOCK set to 1 MiB");
	uint8_t *b1 = aligned_alloc(4096, 512 * 1024), *b2 = aligned_alloc(4096, 1 << 20);
	struct ibv_mr *m1 = ibv_reg_mr(pd, b1, 512 * 1024, ALL);
	CHECK(m1 != NULL, "512 KiB registers");
	errno = 0;
	struct ibv_mr *m2 = ibv_reg_mr(pd, b2, 1 << 20, ALL);
	CHECK(m2 == NULL && errno == ENOMEM, "1 MiB more is refused with ENOMEM");
	ibv_dereg_mr(m1);
	m2 = ibv_reg_mr(pd, b2, 1 << 20, ALL);
	CHECK(m2 != NULL, "after deregistration 1 MiB fits");
	ibv_dereg_mr(m2);
	free(b1);
	free(b2);
}

static void test_nosrq(void)
{
	struct ibv_device_attr da;
	ibv_query_device(ctx, &da);
	CHECK(da.max_srq == 0, "device reports max_srq = 0");
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	errno = 0;
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq == NULL && errno == EOPNOTSUPP, "ibv_create_srq fails with EOPNOTSUPP");
}

static void test_garbage(bool on)
{
	struct end a, b;
	make_end(&a, false, NULL);
	make_end(&b, false, NULL);
	connect_pair(&a, &b, ALL);
	uint8_t *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	post_send(a.qp, IBV_WR_RDMA_WRITE, mr, buf, 64, 1, 0, (uintptr_t)buf, mr->rkey);
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	CHECK(wait_wc(a.scq, &wc, 5000) && wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 1 &&
		      wc.qp_num == a.qp->qp_num,
	      "error CQE keeps wr_id, status and qp_num");
	bool junk = wc.opcode != IBV_WC_RDMA_WRITE || wc.byte_len != 64;
	if (on)
		CHECK(junk, "other fields are garbage (opcode %d, byte_len %u)", wc.opcode, wc.byte_len);
	else
		CHECK(!junk, "with err_cqe_garbage = 0 they are filled in");
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev) == 0)
		ibv_ack_async_event(&ev);
	destroy_end(&a);
	destroy_end(&b);
	ibv_dereg_mr(mr);
	free(buf);
}

int main(int argc, char **argv)
{
	const char *t = argc > 1 ? argv[1] : "basic";
	setvbuf(stdout, NULL, _IOLBF, 0);
	char ctl[64] = "";
	if (!strcmp(t, "max_msg"))
		write_config("[device simrdma0]\nport1.max_msg_sz = 4096\n");
	else if (!strcmp(t, "nosrq"))
		write_config("[device simrdma0]\nmax_srq = 0\n");
	else if (!strcmp(t, "garbage_off"))
		write_config("[hazards]\nerr_cqe_garbage = 0\n");
	else if (!strcmp(t, "fork_legacy") || !strcmp(t, "fork_safe"))
		setenv("SIMVERBS_FORK", "legacy", 1);
	else if (!strcmp(t, "fork_strict"))
		setenv("SIMVERBS_FORK", "strict", 1);
	else if (!strcmp(t, "memlock"))
		setenv("SIMVERBS_MEMLOCK", "always", 1);
	else if (!strcmp(t, "port")) {
		snprintf(ctl, sizeof(ctl), "/tmp/sv_verbs_ctl_%d", (int)getpid());
		unlink(ctl);
		setenv("SIMVERBS_CONTROL", ctl, 1);
	}
	open_dev();
	if (!strcmp(t, "basic")) {
		test_basic();
		test_state_machine();
		test_ack_before_destroy();
	} else if (!strcmp(t, "srq"))
		test_srq();
	else if (!strcmp(t, "max_msg"))
		test_max_msg();
	else if (!strcmp(t, "devmem"))
		test_devmem();
	else if (!strcmp(t, "fork_legacy"))
		test_fork(0);
	else if (!strcmp(t, "fork_safe"))
		test_fork(1);
	else if (!strcmp(t, "fork_modern"))
		test_fork(2);
	else if (!strcmp(t, "fork_strict"))
		test_fork(3);
	else if (!strcmp(t, "port"))
		test_port(ctl);
	else if (!strcmp(t, "memlock"))
		test_memlock();
	else if (!strcmp(t, "nosrq"))
		test_nosrq();
	else if (!strcmp(t, "garbage"))
		test_garbage(true);
	else if (!strcmp(t, "garbage_off"))
		test_garbage(false);
	else {
		fprintf(stderr, "unknown test %s\n", t);
		return 2;
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	if (getenv("SIMVERBS_CONFIG"))
		unlink(getenv("SIMVERBS_CONFIG"));
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
