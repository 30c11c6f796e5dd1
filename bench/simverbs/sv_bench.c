/* simverbs benchmark: latency (ping-pong) and bandwidth (one-way stream) of
 * RDMA WRITE and SEND/RECV on simverbs, against loopback TCP in the same run,
 * for sizes 1 KiB .. 1 GiB. Two processes (fork): the initiator and the
 * target, each with its own simverbs engine, as two hosts would have. Every
 * row carries a correctness column (wrong bytes seen in the last transfer).
 * usage: sv_bench [--max BYTES] [--min BYTES] [--quick]
 * Must run on simverbs: it links libibverbs.so.1 from the build tree. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <infiniband/verbs.h>

enum { OP_WRITE_LAT = 1, OP_SEND_LAT, OP_WRITE_BW, OP_SEND_BW, OP_TCP_LAT, OP_TCP_BW, OP_QUIT };
#define WINDOW 8

struct cmd {
	int op;
	uint64_t size;
	int iters;
};

struct peer_info {
	uint32_t qpn;
	uint64_t addr;
	uint32_t rkey;
	union ibv_gid gid;
};

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	uint64_t cap;
	struct peer_info peer;
};

static int ctl; /* socketpair end */
static int tcp; /* loopback TCP connection */

static void die(const char *what)
{
	fprintf(stderr, "sv_bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void xfer(int fd, void *p, size_t n, int wr)
{
	uint8_t *b = p;
	while (n) {
		ssize_t r = wr ? write(fd, b, n) : read(fd, b, n);
		if (r <= 0)
			die(wr ? "write" : "read");
		b += r;
		n -= (size_t)r;
	}
}

static void setup(struct side *s, uint64_t cap)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || !n)
		die("ibv_get_device_list");
	s->ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!s->ctx)
		die("ibv_open_device");
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 256, NULL, NULL, 0);
	struct ibv_qp_init_attr a = {.send_cq = s->cq, .recv_cq = s->cq,
				     .cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	s->qp = ibv_create_qp(s->pd, &a);
	s->cap = cap;
	s->buf = aligned_alloc(4096, cap);
	if (!s->qp || !s->buf)
		die("setup");
	memset(s->buf, 0, cap);
	s->mr = ibv_reg_mr(s->pd, s->buf, cap,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!s->mr)
		die("ibv_reg_mr (raise RLIMIT_MEMLOCK or run as root)");
}

static void connect_qp(struct side *s)
{
	struct peer_info me = {.qpn = s->qp->qp_num, .addr = (uintptr_t)s->buf, .rkey = s->mr->rkey};
	ibv_query_gid(s->ctx, 1, 0, &me.gid);
	xfer(ctl, &me, sizeof(me), 1);
	xfer(ctl, &s->peer, sizeof(s->peer), 0);
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
	if (ibv_modify_qp(s->qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					      IBV_QP_ACCESS_FLAGS))
		die("INIT");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_4096;
	at.dest_qp_num = s->peer.qpn;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 1;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = s->peer.gid;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					      IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 20; /* ~4 s: 1 GiB messages take a while */
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.max_rd_atomic = 1;
	if (ibv_modify_qp(s->qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					      IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

static void wait_cq(struct side *s, int n)
{
	struct ibv_wc wc[16];
	while (n > 0) {
		int k = ibv_poll_cq(s->cq, n < 16 ? n : 16, wc);
		if (k < 0)
			die("ibv_poll_cq");
		for (int i = 0; i < k; i++)
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "sv_bench: completion %s\n", ibv_wc_status_str(wc[i].status));
				exit(1);
			}
		n -= k;
	}
}

static void post(struct side *s, enum ibv_wr_opcode op, uint64_t off, uint64_t len)
{
	struct ibv_sge sg = {.addr = (uintptr_t)s->buf + off, .length = (uint32_t)len,
			     .lkey = s->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sg, .num_sge = 1, .opcode = op}, *bad;
	wr.wr.rdma.remote_addr = s->peer.addr + off;
	wr.wr.rdma.rkey = s->peer.rkey;
	if (ibv_post_send(s->qp, &wr, &bad))
		die("ibv_post_send");
}

static void post_recv(struct side *s, uint64_t len)
{
	struct ibv_sge sg = {.addr = (uintptr_t)s->buf, .length = (uint32_t)len, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.sg_list = &sg, .num_sge = 1}, *bad;
	if (ibv_post_recv(s->qp, &wr, &bad))
		die("ibv_post_recv");
}

static void spin_last(struct side *s, uint64_t size, uint8_t tag)
{
	volatile uint8_t *last = s->buf + size - 1;
	/* spin like ib_write_lat, but leave the CPU to the simulated HCA threads */
	while (atomic_load_explicit((_Atomic uint8_t *)last, memory_order_acquire) != tag)
		sched_yield();
}

static void pattern(uint8_t *b, uint64_t n, uint8_t seed)
{
	for (uint64_t i = 0; i < n; i += 4096)
		b[i] = (uint8_t)(seed + i / 4096);
	b[n - 1] = seed;
}

static uint64_t wrong(const uint8_t *b, uint64_t n, uint8_t seed)
{
	uint64_t w = 0;
	for (uint64_t i = 0; i < n; i += 4096)
		w += b[i] != (uint8_t)(seed + i / 4096);
	return w + (b[n - 1] != seed);
}

/* ---- target ------------------------------------------------------------------ */
static void target(uint64_t cap)
{
	struct side s;
	setup(&s, cap);
	connect_qp(&s);
	uint8_t *tbuf = malloc(cap);
	for (;;) {
		struct cmd c;
		xfer(ctl, &c, sizeof(c), 0);
		if (c.op == OP_QUIT)
			break;
		uint64_t bad = 0;
		int posted = 0;
		if (c.op == OP_WRITE_LAT)
			s.buf[c.size - 1] = 0;
		else if (c.op == OP_SEND_LAT)
			post_recv(&s, c.size);
		else if (c.op == OP_SEND_BW)
			for (; posted < c.iters && posted < WINDOW; posted++)
				post_recv(&s, c.size);
		xfer(ctl, &bad, sizeof(bad), 1); /* ready */
		switch (c.op) {
		case OP_WRITE_LAT:
			for (int i = 0; i < c.iters; i++) {
				uint8_t tag = (uint8_t)(i * 2 + 1);
				spin_last(&s, c.size, tag);
				s.buf[c.size - 1] = (uint8_t)(tag + 1);
				post(&s, IBV_WR_RDMA_WRITE, 0, c.size);
				wait_cq(&s, 1);
			}
			break;
		case OP_SEND_LAT:
			for (int i = 0; i < c.iters; i++) {
				wait_cq(&s, 1); /* the receive posted last round (or below) */
				if (i + 1 < c.iters)
					post_recv(&s, c.size); /* for the next round */
				post(&s, IBV_WR_SEND, 0, c.size);
				wait_cq(&s, 1);
			}
			break;
		case OP_WRITE_BW:
			break; /* the initiator's completions say the data is placed */
		case OP_SEND_BW: {
			int done = 0;
			while (done < c.iters) {
				wait_cq(&s, 1);
				done++;
				if (posted < c.iters) {
					post_recv(&s, c.size);
					posted++;
				}
			}
			break;
		}
		case OP_TCP_LAT:
			for (int i = 0; i < c.iters; i++) {
				xfer(tcp, tbuf, c.size, 0);
				xfer(tcp, tbuf, c.size, 1);
			}
			break;
		case OP_TCP_BW:
			for (int i = 0; i < c.iters; i++)
				xfer(tcp, tbuf, c.size, 0);
			bad = wrong(tbuf, c.size, 0x5a);
			xfer(tcp, &bad, 1, 1);
			break;
		}
		if (c.op == OP_SEND_BW || c.op == OP_WRITE_BW)
			bad = wrong(s.buf, c.size, 0x5a);
		else if (c.op == OP_TCP_LAT)
			bad = wrong(tbuf, c.size, 0x33);
		else if (c.op == OP_SEND_LAT)
			bad = wrong(s.buf, c.size, 0x33);
		else /* the last byte carries the round's tag */
			bad = wrong(s.buf, c.size, 0x33) - (s.buf[c.size - 1] != 0x33);
		xfer(ctl, &bad, sizeof(bad), 1);
	}
	free(tbuf);
	ibv_destroy_qp(s.qp);
	ibv_dereg_mr(s.mr);
	ibv_destroy_cq(s.cq);
	ibv_dealloc_pd(s.pd);
	ibv_close_device(s.ctx);
	free(s.buf);
}

/* ---- initiator ------------------------------------------------------------------ */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct stats {
	double min, med, p99;
};

static struct stats stats_of(uint64_t *t, int n)
{
	qsort(t, (size_t)n, sizeof(*t), cmp_u64);
	struct stats s = {t[0] / 1e3, t[n / 2] / 1e3, t[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e3};
	return s;
}

static uint64_t command(struct cmd c)
{
	xfer(ctl, &c, sizeof(c), 1);
	return 0;
}

static uint64_t result(void)
{
	uint64_t bad;
	xfer(ctl, &bad, sizeof(bad), 0);
	return bad;
}

static const char *human(uint64_t n, char *buf)
{
	if (n >= (1u << 30))
		sprintf(buf, "%lluG", (unsigned long long)(n >> 30));
	else if (n >= (1u << 20))
		sprintf(buf, "%lluM", (unsigned long long)(n >> 20));
	else
		sprintf(buf, "%lluK", (unsigned long long)(n >> 10));
	return buf;
}

static int iters_for(uint64_t size, int quick)
{
	uint64_t budget = quick ? (8u << 20) : (256u << 20);
	uint64_t n = budget / size;
	int lo = quick ? 2 : 3, hi = quick ? 50 : 1000;
	return n < (uint64_t)lo ? lo : n > (uint64_t)hi ? hi : (int)n;
}

static void initiator(uint64_t min, uint64_t max, int quick)
{
	struct side s;
	setup(&s, max);
	connect_qp(&s);
	uint8_t *tbuf = malloc(max);
	uint64_t *t = calloc(1000, sizeof(*t));
	printf("simverbs vs loopback TCP, two processes; latency = one ping-pong round trip\n");
	printf("%-10s %6s %6s %12s %12s %12s %10s %8s %12s\n", "test", "size", "iters", "min_us",
	       "median_us", "p99_us", "MB/s", "wrong_B", "ratio_vs_tcp");
	for (uint64_t size = min; size <= max;
	     size *= (size < (1u << 20) || size >= (256u << 20)) ? 4 : 16) {
		char hb[16];
		int it = iters_for(size, quick);
		double tcp_lat = 0, tcp_bw = 0;
		static const int lat_ops[] = {OP_TCP_LAT, OP_SEND_LAT, OP_WRITE_LAT};
		for (int k = 0; k < 3; k++) {
			int op = lat_ops[k];
			struct cmd c = {op, size, it};
			pattern(s.buf, size, 0x33);
			pattern(tbuf, size, 0x33);
			command(c);
			result(); /* target ready */
			for (int i = 0; i < it; i++) {
				uint64_t t0 = now_ns();
				if (op == OP_WRITE_LAT) {
					uint8_t tag = (uint8_t)(i * 2 + 1);
					s.buf[size - 1] = tag;
					post(&s, IBV_WR_RDMA_WRITE, 0, size);
					spin_last(&s, size, (uint8_t)(tag + 1));
					wait_cq(&s, 1);
				} else if (op == OP_SEND_LAT) {
					post_recv(&s, size);
					post(&s, IBV_WR_SEND, 0, size);
					wait_cq(&s, 2);
				} else {
					xfer(tcp, tbuf, size, 1);
					xfer(tcp, tbuf, size, 0);
				}
				t[i] = now_ns() - t0;
			}
			uint64_t bad = result();
			struct stats st = stats_of(t, it);
			double mbps = 2.0 * (double)size / (st.med * 1e-6) / 1e6;
			const char *name = op == OP_WRITE_LAT ? "lat_write" : op == OP_SEND_LAT ? "lat_send"
											       : "lat_tcp";
			if (op == OP_TCP_LAT)
				tcp_lat = st.med;
			printf("%-10s %6s %6d %12.1f %12.1f %12.1f %10.0f %8llu %12.2f\n", name,
			       human(size, hb), it, st.min, st.med, st.p99, mbps,
			       (unsigned long long)bad, tcp_lat > 0 ? st.med / tcp_lat : 0.0);
			fflush(stdout);
		}
		/* bandwidth: one-way stream of 'it' messages, WINDOW in flight */
		static const int bw_ops[] = {OP_TCP_BW, OP_SEND_BW, OP_WRITE_BW};
		for (int k = 0; k < 3; k++) {
			int op = bw_ops[k];
			struct cmd c = {op, size, it};
			pattern(s.buf, size, 0x5a);
			pattern(tbuf, size, 0x5a);
			command(c);
			result(); /* target ready */
			uint64_t t0 = now_ns();
			if (op == OP_TCP_BW) {
				for (int i = 0; i < it; i++)
					xfer(tcp, tbuf, size, 1);
				uint8_t b;
				xfer(tcp, &b, 1, 0);
			} else {
				int posted = 0, done = 0;
				while (done < it) {
					while (posted < it && posted - done < WINDOW) {
						post(&s, op == OP_WRITE_BW ? IBV_WR_RDMA_WRITE : IBV_WR_SEND, 0,
						     size);
						posted++;
					}
					wait_cq(&s, 1);
					done++;
				}
			}
			double sec = (double)(now_ns() - t0) / 1e9;
			uint64_t bad = result();
			double mbps = (double)size * it / sec / 1e6;
			const char *name = op == OP_WRITE_BW ? "bw_write" : op == OP_SEND_BW ? "bw_send"
											    : "bw_tcp";
			if (op == OP_TCP_BW)
				tcp_bw = mbps;
			printf("%-10s %6s %6d %12s %12s %12s %10.0f %8llu %12.2f\n", name, human(size, hb),
			       it, "-", "-", "-", mbps, (unsigned long long)bad,
			       tcp_bw > 0 ? mbps / tcp_bw : 0.0);
			fflush(stdout);
		}
	}
	struct cmd q = {OP_QUIT, 0, 0};
	command(q);
	free(t);
	free(tbuf);
	ibv_destroy_qp(s.qp);
	ibv_dereg_mr(s.mr);
	ibv_destroy_cq(s.cq);
	ibv_dealloc_pd(s.pd);
	ibv_close_device(s.ctx);
	free(s.buf);
}

int main(int argc, char **argv)
{
	uint64_t min = 1024, max = 1ull << 30;
	int quick = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--max") && i + 1 < argc)
			max = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--min") && i + 1 < argc)
			min = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--quick"))
			quick = 1;
		else {
			fprintf(stderr, "usage: sv_bench [--max BYTES] [--min BYTES] [--quick]\n");
			return 2;
		}
	}
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp))
		die("socketpair");
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl))
		die("tcp listen");
	pid_t pid = fork();
	if (pid == 0) {
		close(sp[0]);
		ctl = sp[1];
		tcp = accept(lfd, NULL, NULL);
		close(lfd);
		int one = 1;
		setsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		target(max);
		_exit(0);
	}
	close(sp[1]);
	ctl = sp[0];
	tcp = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(tcp, (struct sockaddr *)&sa, sizeof(sa)))
		die("tcp connect");
	close(lfd);
	int one = 1;
	setsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	initiator(min, max, quick);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
