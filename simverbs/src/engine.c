/* simverbs engine: the per-process "HCA". One progress thread owns every
 * socket: a TCP listener (its port is the top 16 bits of each QPN, so a peer
 * that learns GID + QPN knows where to connect), one TCP link per peer engine
 * and a doorbell eventfd that the posting verbs ring. It cuts messages into
 * packets, places incoming data into registered memory, answers with ACK, NAK
 * and READ responses, and runs the RC timers (ack timeout -> retry exceeded,
 * RNR). It also watches port state (bound netdev, control file) and raises
 * port events. Application threads never touch a socket. */
#include "sv.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>

#define SV_MAGIC 0x53565231u /* "SVR1" */
#define SV_OUT_HIGH (4u * 1024u * 1024u)
#define SV_SLOTS 256

enum { T_SEND = 1, T_WRITE, T_READ_REQ, T_READ_RESP, T_ACK, T_NAK, T_RNR_WAIT };
enum { F_FIRST = 1, F_LAST = 2, F_IMM = 4, F_SOLICITED = 8 };

struct sv_hdr {
	uint32_t magic;
	uint8_t type, flags;
	uint16_t rsv;
	uint32_t dst_qpn, src_qpn, psn;
	uint32_t imm, rkey, aux;
	uint64_t raddr, total, off;
	uint32_t plen, rsv2;
};

struct sv_link {
	int fd;
	uint32_t ip;      /* network order; 0 for an accepted link */
	uint16_t port;    /* host order */
	bool connecting, dead, want_out;
	uint8_t *out;
	size_t out_len, out_off, out_cap;
	uint8_t *in;
	size_t in_len, in_cap;
	struct sv_link *next;
};

struct sv_inmsg {
	struct sv_hdr h;
	uint8_t *payload;
	struct sv_link *link;
	struct sv_inmsg *next;
};

/* a READ being answered: streamed back packet by packet */
struct sv_readjob {
	struct sv_qp *qp;
	struct sv_link *link;
	struct sv_mr *mr;
	uint64_t addr, total, sent;
	uint32_t psn, req_qpn;
	struct sv_readjob *next;
};

/* What arrives late, queued in arrival order. Each queue has one delay,
 * so its due times never decrease. */
struct sv_late {
	uint64_t due_ns;
	struct sv_late *next;
};

struct sv_late_q {
	struct sv_late *head, *tail;
};

/* an ACK on its way back to the requester (ack_latency_us) */
struct sv_late_ack {
	struct sv_late l; /* first */
	struct sv_hdr h;
};

/* what the device writes late (recv_cqe_lag_us): a receive completion of a
 * QP on an SRQ, or, behind that QP's last one, its LAST_WQE_REACHED event */
struct sv_late_cqe {
	struct sv_late l; /* first */
	struct sv_qp *qp;
	bool last_wqe; /* the event, not a completion */
	bool solicited;
	struct ibv_wc wc;
};

static struct {
	bool started;
	pid_t pid;
	int lfd, ep, bell;
	uint16_t port;
	pthread_t thr;
	struct sv_qp *qps[SV_SLOTS];
	struct sv_link *links;
	struct sv_context *ctxs;
	struct sv_readjob *reads;
	struct sv_late_q acks; /* struct sv_late_ack */
	struct sv_late_q cqes; /* struct sv_late_cqe */
	uint64_t next_port_poll;
	time_t ctl_mtime;
	bool stop;
} E = {.lfd = -1, .ep = -1, .bell = -1};

uint64_t sv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t sv_ib_timeout_ns(uint8_t exp)
{
	if (exp == 0)
		return 0; /* 0 = infinite, as in the IB spec */
	double ns = 4096.0 * (double)(1ull << (exp > 31 ? 31 : exp));
	return (uint64_t)(ns * sv_cfg.time_scale);
}

uint64_t sv_rnr_timer_ns(uint8_t code)
{
	static const double ms[32] = {655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12,
				      0.16,   0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
				      2.56,   3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72,
				      40.96,  61.44, 81.92, 122.88, 163.84, 245.76, 327.68,
				      491.52};
	return (uint64_t)(ms[code & 31] * 1e6 * sv_cfg.time_scale);
}

static inline bool psn_le(uint32_t a, uint32_t b)
{
	return ((b - a) & 0xffffff) < 0x800000;
}

/* ---- QP table ---------------------------------------------------------------- */
uint16_t sv_engine_port(void)
{
	return E.port;
}

int sv_engine_add_qp(struct sv_qp *qp)
{
	for (int s = 1; s < SV_SLOTS; s++)
		if (!E.qps[s]) {
			E.qps[s] = qp;
			qp->slot = s;
			qp->qp.qp_num = (uint32_t)E.port << 8 | (uint32_t)s;
			return 0;
		}
	return ENOMEM;
}

static void readjobs_drop_qp(struct sv_qp *qp)
{
	struct sv_readjob **pp = &E.reads;
	while (*pp) {
		if ((*pp)->qp == qp) {
			struct sv_readjob *j = *pp;
			*pp = j->next;
			free(j);
		} else
			pp = &(*pp)->next;
	}
}

/* caller holds sv_lock: the completions of a QP destroyed or reset that
 * are not yet written never are (mlx5 also removes such a QP's entries
 * from its completion queue) */
void sv_engine_drop_late(struct sv_qp *qp)
{
	struct sv_late **pp = &E.cqes.head, *last = NULL;
	while (*pp) {
		struct sv_late *x = *pp;
		if (((struct sv_late_cqe *)x)->qp == qp) {
			*pp = x->next;
			free(x);
		} else {
			last = x;
			pp = &x->next;
		}
	}
	E.cqes.tail = last;
}

static void late_push(struct sv_late_q *q, struct sv_late *x, uint64_t delay_ns)
{
	x->due_ns = sv_now_ns() + delay_ns;
	x->next = NULL;
	if (q->tail)
		q->tail->next = x;
	else
		q->head = x;
	q->tail = x;
}

/* The first of q if it is due by now, taken off q; else NULL, and *next
 * is lowered to the first due time left. */
static struct sv_late *late_pop(struct sv_late_q *q, uint64_t now, uint64_t *next)
{
	struct sv_late *x = q->head;
	if (!x || x->due_ns > now) {
		if (x && x->due_ns < *next)
			*next = x->due_ns;
		return NULL;
	}
	q->head = x->next;
	if (!q->head)
		q->tail = NULL;
	return x;
}

void sv_engine_del_qp(struct sv_qp *qp)
{
	if (qp->slot > 0 && qp->slot < SV_SLOTS && E.qps[qp->slot] == qp)
		E.qps[qp->slot] = NULL;
	sv_engine_drop_parked(qp);
	readjobs_drop_qp(qp);
	sv_engine_drop_late(qp);
}

/* Writes a receive completion of qp (wc) or, wc NULL, its LAST_WQE_REACHED. */
static void late_cqe_write(struct sv_qp *qp, const struct ibv_wc *wc, bool solicited)
{
	if (wc)
		sv_cq_push((struct sv_cq *)qp->qp.recv_cq, wc, solicited);
	else
		sv_async_push(sv_ctx(qp->qp.context), IBV_EVENT_QP_LAST_WQE_REACHED, &qp->qp);
}

/* The same, recv_cqe_lag_us later (at once without a lag, or memory). */
static void late_cqe_add(struct sv_qp *qp, const struct ibv_wc *wc, bool solicited)
{
	struct sv_late_cqe *x = sv_cfg.recv_cqe_lag_ns ? calloc(1, sizeof(*x)) : NULL;
	if (!x) {
		late_cqe_write(qp, wc, solicited);
		return;
	}
	x->qp = qp;
	x->last_wqe = !wc;
	if (wc)
		x->wc = *wc;
	x->solicited = solicited;
	late_push(&E.cqes, &x->l, sv_cfg.recv_cqe_lag_ns);
	sv_engine_kick(); /* the engine may sleep past the due time */
}

/* caller holds sv_lock: a receive completion of qp (late on an SRQ's QP
 * under recv_cqe_lag_us, as hardware may write it after the verb that
 * moved the QP to ERR returned) */
void sv_recv_complete(struct sv_qp *qp, const struct ibv_wc *wc, bool solicited)
{
	if (qp->qp.srq)
		late_cqe_add(qp, wc, solicited);
	else
		late_cqe_write(qp, wc, solicited);
}

/* caller holds sv_lock: qp (on an SRQ) takes no more receives; the event
 * comes after every receive completion of qp is written */
void sv_last_wqe_reached(struct sv_qp *qp)
{
	late_cqe_add(qp, NULL, false);
}

static void deliver_late_cqes(uint64_t now, uint64_t *next)
{
	struct sv_late *l;
	while ((l = late_pop(&E.cqes, now, next))) {
		struct sv_late_cqe *x = (struct sv_late_cqe *)l;
		late_cqe_write(x->qp, x->last_wqe ? NULL : &x->wc, x->solicited);
		free(x);
	}
}

struct sv_qp *sv_engine_qp_by_num(uint32_t qpn)
{
	if ((qpn >> 8) != E.port)
		return NULL;
	return E.qps[qpn & 0xff];
}

void sv_engine_qp_ready(struct sv_qp *qp)
{
	(void)qp; /* the pump visits every QP; nothing to record */
}

void sv_engine_register_ctx(struct sv_context *ctx)
{
	ctx->next = E.ctxs;
	E.ctxs = ctx;
}

void sv_engine_unregister_ctx(struct sv_context *ctx)
{
	for (struct sv_context **pp = &E.ctxs; *pp; pp = &(*pp)->next)
		if (*pp == ctx) {
			*pp = ctx->next;
			return;
		}
}

void sv_engine_kick(void)
{
	if (E.bell >= 0) {
		uint64_t one = 1;
		ssize_t r = write(E.bell, &one, sizeof(one));
		(void)r;
	}
}

void sv_engine_drop_parked(struct sv_qp *qp)
{
	struct sv_inmsg *m = qp->parked_head;
	while (m) {
		struct sv_inmsg *n = m->next;
		free(m->payload);
		free(m);
		m = n;
	}
	qp->parked_head = qp->parked_tail = NULL;
	qp->rnr_deadline_ns = 0;
}

/* ---- addressing --------------------------------------------------------------- */
static const char *sm_dir(char *buf, size_t n)
{
	const char *d = getenv("SIMVERBS_DIR");
	if (d && *d)
		snprintf(buf, n, "%s/sm", d);
	else
		snprintf(buf, n, "/tmp/simverbs-%u/sm", (unsigned)getuid());
	return buf;
}

/* InfiniBand-mode ports: a file per LID names the IP of its engine. */
static uint32_t lid_lookup(uint16_t lid)
{
	char dir[400], path[512], ip[64] = "";
	snprintf(path, sizeof(path), "%s/lid-%u", sm_dir(dir, sizeof(dir)), lid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(ip, sizeof(ip), f))
		ip[0] = 0;
	fclose(f);
	ip[strcspn(ip, "\n")] = 0;
	struct in_addr a;
	return inet_pton(AF_INET, ip, &a) == 1 ? a.s_addr : 0;
}

static void lid_publish(const struct sv_port_cfg *pc)
{
	char dir[400], path[512], tmp[600];
	sm_dir(dir, sizeof(dir));
	char parent[400];
	snprintf(parent, sizeof(parent), "%s", dir);
	char *slash = strrchr(parent, '/');
	if (slash) {
		*slash = 0;
		mkdir(parent, 0700);
	}
	mkdir(dir, 0700);
	uint32_t ip = htonl(INADDR_LOOPBACK);
	for (int g = 0; g < pc->ngid; g++)
		if (pc->gid[g].raw[10] == 0xff && pc->gid[g].raw[11] == 0xff) {
			memcpy(&ip, pc->gid[g].raw + 12, 4);
			break;
		}
	char ips[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &ip, ips, sizeof(ips));
	snprintf(path, sizeof(path), "%s/lid-%u", dir, pc->lid);
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%s\n", ips);
	fclose(f);
	rename(tmp, path);
}

int sv_resolve_peer(struct sv_qp *qp, const struct ibv_ah_attr *ah, uint8_t port)
{
	struct sv_dev_cfg *d = &sv_cfg.dev[sv_ctx(qp->qp.context)->dev_index];
	if (port < 1 || port > d->nports)
		return EINVAL;
	struct sv_port_cfg *pc = &d->port[port - 1];
	if (pc->link_layer == IBV_LINK_LAYER_ETHERNET) {
		if (!ah->is_global)
			return EINVAL; /* RoCE needs a GRH */
		if (ah->grh.sgid_index >= pc->ngid || pc->gid_state[ah->grh.sgid_index] != SV_GID_OK)
			return EINVAL;
		const uint8_t *r = ah->grh.dgid.raw;
		static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (memcmp(r, pfx, 12))
			return EINVAL; /* only IPv4-mapped GIDs are routable here */
		memcpy(&qp->peer_ip, r + 12, 4);
	} else {
		if (ah->is_global) {
			const uint8_t *r = ah->grh.dgid.raw;
			static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
			if (!memcmp(r, pfx, 12)) {
				memcpy(&qp->peer_ip, r + 12, 4);
				return 0;
			}
		}
		qp->peer_ip = lid_lookup(ah->dlid); /* 0: unknown LID, traffic goes nowhere */
	}
	return 0;
}

/* ---- links ---------------------------------------------------------------------- */
static void link_epoll(struct sv_link *l)
{
	struct epoll_event ev = {.events = EPOLLIN | (l->want_out ? EPOLLOUT : 0u),
				 .data.ptr = l};
	epoll_ctl(E.ep, EPOLL_CTL_MOD, l->fd, &ev);
}

static struct sv_link *link_new(int fd, uint32_t ip, uint16_t port)
{
	struct sv_link *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->fd = fd;
	l->ip = ip;
	l->port = port;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
	epoll_ctl(E.ep, EPOLL_CTL_ADD, fd, &ev);
	l->next = E.links;
	E.links = l;
	return l;
}

static struct sv_link *link_get(uint32_t ip, uint16_t port)
{
	for (struct sv_link *l = E.links; l; l = l->next)
		if (l->ip == ip && l->port == port && !l->dead)
			return l;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	sa.sin_addr.s_addr = ip;
	int r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	struct sv_link *l = link_new(fd, ip, port);
	if (!l) {
		close(fd);
		return NULL;
	}
	if (r < 0 && errno == EINPROGRESS) {
		l->connecting = true;
		l->want_out = true;
		link_epoll(l);
	} else if (r < 0) {
		SV_TRACE("connect to port %u: %s", port, strerror(errno));
		l->dead = true;
	}
	return l;
}

static void link_kill(struct sv_link *l)
{
	if (l->dead)
		return;
	SV_TRACE("link fd %d to port %u closed", l->fd, l->port);
	l->dead = true;
	l->out_len = l->out_off = 0;
}

static uint8_t *link_reserve(struct sv_link *l, size_t n)
{
	if (l->out_off && l->out_off == l->out_len)
		l->out_off = l->out_len = 0;
	if (l->out_len + n > l->out_cap) {
		if (l->out_off) {
			memmove(l->out, l->out + l->out_off, l->out_len - l->out_off);
			l->out_len -= l->out_off;
			l->out_off = 0;
		}
		if (l->out_len + n > l->out_cap) {
			size_t cap = l->out_cap ? l->out_cap : 65536;
			while (cap < l->out_len + n)
				cap *= 2;
			uint8_t *b = realloc(l->out, cap);
			if (!b)
				return NULL;
			l->out = b;
			l->out_cap = cap;
		}
	}
	uint8_t *p = l->out + l->out_len;
	l->out_len += n;
	return p;
}

static size_t link_pending(const struct sv_link *l)
{
	return l->out_len - l->out_off;
}

/* Queues a frame; payload NULL with plen > 0 means "caller fills it". */
static uint8_t *emit(struct sv_link *l, const struct sv_hdr *h)
{
	if (!l || l->dead)
		return NULL;
	uint8_t *p = link_reserve(l, sizeof(*h) + h->plen);
	if (!p)
		return NULL;
	memcpy(p, h, sizeof(*h));
	return p + sizeof(*h);
}

static void send_ctl(struct sv_link *l, int type, uint32_t dst, uint32_t src, uint32_t psn,
		     uint32_t aux)
{
	struct sv_hdr h = {.magic = SV_MAGIC, .type = (uint8_t)type, .dst_qpn = dst,
			   .src_qpn = src, .psn = psn, .aux = aux};
	emit(l, &h);
}

/* ---- requester ------------------------------------------------------------------- */
static bool port_up(struct sv_qp *qp)
{
	struct sv_dev_cfg *d = &sv_cfg.dev[sv_ctx(qp->qp.context)->dev_index];
	return qp->port >= 1 && d->port[qp->port - 1].state == IBV_PORT_ACTIVE;
}

static void garbage_wc(struct ibv_wc *wc)
{
	if (!sv_cfg.err_cqe_garbage)
		return;
	/* only wr_id, status, qp_num and vendor_err are defined for an error */
	static uint32_t seed = 0x9e3779b9u;
	seed = seed * 1664525u + 1013904223u;
	wc->opcode = (enum ibv_wc_opcode)(0x80 | (seed & 0x7f));
	wc->byte_len = seed ^ 0xdeadbeefu;
	wc->imm_data = seed * 7;
	wc->src_qp = seed >> 8;
	wc->wc_flags = seed & 0xff;
	wc->pkey_index = (uint16_t)seed;
	wc->slid = (uint16_t)(seed >> 16);
	wc->sl = (uint8_t)seed;
	wc->dlid_path_bits = (uint8_t)(seed >> 24);
}

static enum ibv_wc_opcode send_wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	default:
		return IBV_WC_SEND;
	}
}

/* completes WQEs at the head that are done, in order */
static void retire(struct sv_qp *qp)
{
	while (qp->sq_count) {
		struct sv_swqe *w = &qp->sq[qp->sq_head];
		if (w->st != SV_W_DONE)
			return;
		enum ibv_wc_status st = (enum ibv_wc_status)w->got; /* status kept in 'got' once done */
		struct ibv_wc wc;
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = w->wr_id;
		wc.status = st;
		wc.qp_num = qp->qp.qp_num;
		wc.opcode = send_wc_opcode(w->opcode);
		wc.byte_len = (uint32_t)w->len;
		bool push = w->signaled || st != IBV_WC_SUCCESS;
		free(w->inl);
		w->inl = NULL;
		qp->sq_head = (qp->sq_head + 1) % qp->sq_cap;
		qp->sq_count--;
		if (qp->sq_tx > 0)
			qp->sq_tx--;
		if (st != IBV_WC_SUCCESS) {
			garbage_wc(&wc);
			sv_cq_push((struct sv_cq *)qp->qp.send_cq, &wc, false);
			SV_TRACE("qp 0x%x: send error %s", qp->qp.qp_num, ibv_wc_status_str(st));
			sv_qp_to_error(qp, false);
			return;
		}
		if (push)
			sv_cq_push((struct sv_cq *)qp->qp.send_cq, &wc, false);
	}
}

static void wqe_done(struct sv_swqe *w, enum ibv_wc_status st)
{
	w->st = SV_W_DONE;
	w->got = (uint64_t)st;
}

/* Finds the local SGE bytes for [off, off+n) of a WQE and validates its MRs. */
static int sge_check(struct sv_qp *qp, const struct ibv_sge *sge, int num, bool need_write)
{
	for (int i = 0; i < num; i++) {
		if (!sge[i].length)
			continue;
		struct sv_mr *mr = sv_mr_by_lkey(sge[i].lkey);
		if (!mr || mr->mr.pd != qp->qp.pd)
			return -1;
		if (need_write && !(mr->access & IBV_ACCESS_LOCAL_WRITE))
			return -1;
		uint64_t a = sge[i].addr, b = (uint64_t)(uintptr_t)mr->mr.addr;
		if (a < b || a + sge[i].length > b + mr->mr.length)
			return -1;
	}
	return 0;
}

/* copy between a scatter/gather list at logical offset 'off' and a buffer */
static int sge_copy(const struct ibv_sge *sge, int num, uint64_t off, uint8_t *buf, size_t n,
		    bool to_mem)
{
	for (int i = 0; i < num && n; i++) {
		if (off >= sge[i].length) {
			off -= sge[i].length;
			continue;
		}
		size_t k = sge[i].length - off;
		if (k > n)
			k = n;
		struct sv_mr *mr = sv_mr_by_lkey(sge[i].lkey);
		if (!mr)
			return -1;
		int r = to_mem ? sv_dma_write(mr, sge[i].addr + off, buf, k)
			       : sv_dma_read(mr, sge[i].addr + off, buf, k);
		if (r)
			return -1;
		buf += k;
		n -= k;
		off = 0;
	}
	return n ? -1 : 0;
}

static int pump_qp(struct sv_qp *qp)
{
	int more = 0;
	while (qp->st == IBV_QPS_RTS && !qp->tx_blocked && qp->sq_tx < qp->sq_count) {
		struct sv_swqe *w = &qp->sq[(qp->sq_head + qp->sq_tx) % qp->sq_cap];
		struct sv_dev_cfg *d = &sv_cfg.dev[sv_ctx(qp->qp.context)->dev_index];
		if (w->st == SV_W_DONE || w->st == SV_W_WAIT_ACK) {
			qp->sq_tx++; /* acked while older work is retransmitted */
			continue;
		}
		if (w->st == SV_W_QUEUED) {
			w->retries = qp->retry_cnt;
			if (w->len > d->port[qp->port - 1].max_msg_sz) {
				wqe_done(w, IBV_WC_LOC_LEN_ERR);
				qp->sq_tx++;
				qp->tx_blocked = true;
				break;
			}
			bool rd = w->opcode == IBV_WR_RDMA_READ;
			if (!w->inl && sge_check(qp, w->sge, w->num_sge, rd)) {
				wqe_done(w, IBV_WC_LOC_PROT_ERR);
				qp->sq_tx++;
				qp->tx_blocked = true;
				break;
			}
			w->st = SV_W_SENDING;
		}
		if (!qp->link && qp->peer_ip)
			qp->link = link_get(qp->peer_ip, qp->peer_port);
		struct sv_link *l = qp->link;
		bool void_out = !l || l->dead || !port_up(qp); /* frames go nowhere */
		if (void_out && w->sent == 0)
			SV_TRACE("qp 0x%x: psn 0x%x goes nowhere (%s)", qp->qp.qp_num, w->psn,
				 !l ? "no route" : l->dead ? "link down" : "port down");
		if (!void_out && link_pending(l) >= SV_OUT_HIGH) {
			more = 1;
			break;
		}
		uint64_t tmo = sv_ib_timeout_ns(qp->timeout);
		if (w->opcode == IBV_WR_RDMA_READ) {
			struct sv_hdr h = {.magic = SV_MAGIC, .type = T_READ_REQ,
					   .flags = F_FIRST | F_LAST, .dst_qpn = qp->dest_qpn,
					   .src_qpn = qp->qp.qp_num, .psn = w->psn,
					   .rkey = w->rkey, .raddr = w->raddr, .total = w->len};
			if (!void_out)
				emit(l, &h);
			w->got = 0;
			w->st = SV_W_WAIT_ACK;
			w->deadline_ns = tmo ? sv_now_ns() + tmo : 0;
			qp->sq_tx++;
			continue;
		}
		uint64_t n = w->len - w->sent;
		if (n > SV_PKT)
			n = SV_PKT;
		struct sv_hdr h = {.magic = SV_MAGIC, .dst_qpn = qp->dest_qpn,
				   .src_qpn = qp->qp.qp_num, .psn = w->psn, .imm = w->imm,
				   .rkey = w->rkey, .raddr = w->raddr, .total = w->len,
				   .off = w->sent, .plen = (uint32_t)n,
				   .aux = qp->rnr_retry};
		bool imm = w->opcode == IBV_WR_SEND_WITH_IMM ||
			   w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
		h.type = (w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM) ? T_SEND
											  : T_WRITE;
		h.flags = (uint8_t)((w->sent == 0 ? F_FIRST : 0) |
				    (w->sent + n == w->len ? F_LAST : 0) | (imm ? F_IMM : 0) |
				    ((w->flags & IBV_SEND_SOLICITED) ? F_SOLICITED : 0));
		if (!void_out) {
			uint8_t *p = emit(l, &h);
			if (p && n) {
				if (w->inl)
					memcpy(p, w->inl + w->sent, n);
				else if (sge_copy(w->sge, w->num_sge, w->sent, p, n, false))
					memset(p, 0, n); /* application unmapped it: garbage goes out */
			}
		}
		w->sent += n;
		if (w->sent == w->len) {
			w->st = SV_W_WAIT_ACK;
			w->deadline_ns = tmo ? sv_now_ns() + tmo : 0;
			qp->sq_tx++;
		}
	}
	retire(qp);
	return more;
}

static int pump_reads(void)
{
	int more = 0;
	struct sv_readjob **pp = &E.reads;
	while (*pp) {
		struct sv_readjob *j = *pp;
		if (j->link->dead) {
			*pp = j->next;
			free(j);
			continue;
		}
		while (j->sent < j->total || (j->total == 0 && j->sent == 0)) {
			if (link_pending(j->link) >= SV_OUT_HIGH) {
				more = 1;
				break;
			}
			uint64_t n = j->total - j->sent;
			if (n > SV_PKT)
				n = SV_PKT;
			struct sv_hdr h = {.magic = SV_MAGIC, .type = T_READ_RESP,
					   .dst_qpn = j->req_qpn, .src_qpn = j->qp->qp.qp_num,
					   .psn = j->psn, .total = j->total, .off = j->sent,
					   .plen = (uint32_t)n};
			h.flags = (uint8_t)((j->sent == 0 ? F_FIRST : 0) |
					    (j->sent + n == j->total ? F_LAST : 0));
			uint8_t *p = emit(j->link, &h);
			if (p && n && sv_dma_read(j->mr, j->addr + j->sent, p, n))
				memset(p, 0, n);
			j->sent += n;
			if (j->total == 0)
				j->sent = 1; /* zero-length READ: one empty response */
		}
		if (j->sent >= j->total && !(j->total == 0 && j->sent == 0)) {
			*pp = j->next;
			free(j);
		} else
			pp = &j->next;
	}
	return more;
}

/* ---- responder -------------------------------------------------------------------- */
static void park(struct sv_qp *qp, struct sv_link *l, const struct sv_hdr *h,
		 const uint8_t *payload)
{
	struct sv_inmsg *m = calloc(1, sizeof(*m));
	if (!m)
		return;
	m->h = *h;
	m->link = l;
	if (h->plen) {
		m->payload = malloc(h->plen);
		if (!m->payload) {
			free(m);
			return;
		}
		memcpy(m->payload, payload, h->plen);
	}
	if (qp->parked_tail)
		qp->parked_tail->next = m;
	else
		qp->parked_head = m;
	qp->parked_tail = m;
}

static struct sv_mr *rkey_check(struct sv_qp *qp, uint32_t rkey, uint64_t raddr, uint64_t len,
				unsigned need, uint64_t *addr_out)
{
	struct sv_mr *mr = sv_mr_by_rkey(rkey);
	if (!mr || mr->mr.pd != qp->qp.pd || !(mr->access & need) || !(qp->access & need))
		return NULL;
	if (raddr < mr->iova || raddr + len > mr->iova + mr->mr.length || raddr + len < raddr)
		return NULL;
	*addr_out = (uint64_t)(uintptr_t)mr->mr.addr + (raddr - mr->iova);
	return mr;
}

static void responder_fail(struct sv_qp *qp, struct sv_link *l, const struct sv_hdr *h,
			   enum ibv_wc_status nak, enum ibv_event_type ev)
{
	send_ctl(l, T_NAK, h->src_qpn, qp->qp.qp_num, h->psn, nak);
	sv_async_push(sv_ctx(qp->qp.context), ev, &qp->qp);
	sv_qp_to_error(qp, false);
}

static struct sv_mr *mr_list_devmem(const struct sv_rwqe *w)
{
	for (int i = 0; i < w->num_sge; i++) {
		struct sv_mr *mr = sv_mr_by_lkey(w->sge[i].lkey);
		if (mr && mr->devmem)
			return mr;
	}
	return NULL;
}

static uint64_t rwqe_len(const struct sv_rwqe *w)
{
	uint64_t n = 0;
	for (int i = 0; i < w->num_sge; i++)
		n += w->sge[i].length;
	return n;
}

/* returns true when the packet was parked (no receive buffer) */
static bool handle_request(struct sv_qp *qp, struct sv_link *l, const struct sv_hdr *h,
			   const uint8_t *payload, bool from_parked)
{
	if (qp->st != IBV_QPS_RTR && qp->st != IBV_QPS_RTS) {
		SV_TRACE("qp 0x%x: request in state %d dropped", qp->qp.qp_num, qp->st);
		return false; /* silently dropped: the requester times out */
	}
	if (!port_up(qp) || h->src_qpn != qp->dest_qpn) {
		SV_TRACE("qp 0x%x: request from 0x%x dropped (port down or not our peer 0x%x)",
			 qp->qp.qp_num, h->src_qpn, qp->dest_qpn);
		return false;
	}
	if (!from_parked && qp->parked_head) {
		park(qp, l, h, payload);
		if (h->flags & F_FIRST) /* its ack timer waits for the receiver too */
			send_ctl(l, T_RNR_WAIT, h->src_qpn, qp->qp.qp_num, h->psn, 0);
		return true;
	}
	bool first = h->flags & F_FIRST, last = h->flags & F_LAST;
	if (!first && qp->in_dup) {
		if (last) {
			qp->in_dup = false;
			send_ctl(l, T_ACK, h->src_qpn, qp->qp.qp_num, qp->dup_psn, 0);
		}
		return false;
	}
	if (first) {
		qp->in_dup = false;
		if (h->psn != qp->exp_psn) {
			uint32_t behind = (qp->exp_psn - h->psn) & 0xffffff;
			if (behind && behind < 0x800000 && h->type != T_READ_REQ) {
				/* a retransmission of a message already executed: ACK it again */
				if (last)
					send_ctl(l, T_ACK, h->src_qpn, qp->qp.qp_num, h->psn, 0);
				else {
					qp->in_dup = true;
					qp->dup_psn = h->psn;
				}
				return false;
			}
			if (!(behind && behind < 0x800000)) {
				SV_TRACE("qp 0x%x: PSN 0x%x, expected 0x%x: dropped", qp->qp.qp_num,
					 h->psn, qp->exp_psn);
				return false;
			}
			/* a repeated READ is executed again (it is idempotent) */
		}
		qp->in_link = l;
		qp->in_off = 0;
		if (qp->in_active && qp->in_has_wqe) {
			/* the message in progress starts over: keep its receive buffer */
			goto place;
		}
		qp->in_has_wqe = false;
		if (h->type == T_READ_REQ) {
			uint64_t addr;
			struct sv_mr *mr = NULL;
			struct sv_dev_cfg *d = &sv_cfg.dev[sv_ctx(qp->qp.context)->dev_index];
			if (h->total > d->port[qp->port - 1].max_msg_sz) {
				responder_fail(qp, l, h, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
				return false;
			}
			if (!qp->max_dest_rd_atomic) {
				responder_fail(qp, l, h, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
				return false;
			}
			if (!(mr = rkey_check(qp, h->rkey, h->raddr, h->total, IBV_ACCESS_REMOTE_READ,
					      &addr))) {
				responder_fail(qp, l, h, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
				return false;
			}
			struct sv_readjob *j = calloc(1, sizeof(*j));
			if (j) {
				j->qp = qp;
				j->link = l;
				j->mr = mr;
				j->addr = addr;
				j->total = h->total;
				j->psn = h->psn;
				j->req_qpn = h->src_qpn;
				struct sv_readjob **pp = &E.reads;
				while (*pp)
					pp = &(*pp)->next;
				*pp = j;
			}
			if (h->psn == qp->exp_psn)
				qp->exp_psn = (qp->exp_psn + 1) & 0xffffff;
			return false;
		}
		bool need_wqe = h->type == T_SEND || (h->flags & F_IMM);
		if (h->type == T_WRITE) {
			uint64_t addr;
			if (!rkey_check(qp, h->rkey, h->raddr, h->total, IBV_ACCESS_REMOTE_WRITE,
					&addr)) {
				responder_fail(qp, l, h, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
				return false;
			}
		}
		if (need_wqe) {
			if (!sv_rq_take(qp, &qp->in_wqe)) {
				/* receiver not ready: park until a buffer is posted */
				park(qp, l, h, payload);
				if (!from_parked || !qp->rnr_deadline_ns) {
					uint8_t rr = (uint8_t)(h->aux & 7);
					qp->rnr_deadline_ns =
						rr == 7 ? 0
							: sv_now_ns() + sv_rnr_timer_ns(qp->min_rnr_timer) *
									  (rr + 1u);
					send_ctl(l, T_RNR_WAIT, h->src_qpn, qp->qp.qp_num, h->psn, 0);
				}
				return true;
			}
			qp->in_has_wqe = true;
			if (h->type == T_SEND && h->total > rwqe_len(&qp->in_wqe)) {
				struct ibv_wc wc = {.wr_id = qp->in_wqe.wr_id,
						    .status = IBV_WC_LOC_LEN_ERR,
						    .qp_num = qp->qp.qp_num};
				garbage_wc(&wc);
				qp->in_has_wqe = false;
				sv_recv_complete(qp, &wc, false);
				send_ctl(l, T_NAK, h->src_qpn, qp->qp.qp_num, h->psn,
					 IBV_WC_REM_INV_REQ_ERR);
				sv_qp_to_error(qp, false);
				return false;
			}
			if (h->type == T_SEND && sge_check(qp, qp->in_wqe.sge, qp->in_wqe.num_sge, true)) {
				struct ibv_wc wc = {.wr_id = qp->in_wqe.wr_id,
						    .status = IBV_WC_LOC_PROT_ERR,
						    .qp_num = qp->qp.qp_num};
				garbage_wc(&wc);
				qp->in_has_wqe = false;
				sv_recv_complete(qp, &wc, false);
				send_ctl(l, T_NAK, h->src_qpn, qp->qp.qp_num, h->psn,
					 IBV_WC_REM_OP_ERR);
				sv_qp_to_error(qp, false);
				return false;
			}
		}
		qp->in_active = true;
	}
place:
	if (!qp->in_active)
		return false; /* rest of a message we dropped */
	if (h->plen) {
		int r = 0;
		if (h->type == T_SEND) {
			r = sge_copy(qp->in_wqe.sge, qp->in_wqe.num_sge, h->off, (uint8_t *)payload,
				     h->plen, true);
		} else {
			uint64_t addr;
			struct sv_mr *mr = rkey_check(qp, h->rkey, h->raddr, h->total,
						      IBV_ACCESS_REMOTE_WRITE, &addr);
			if (mr) {
				/* ascending addresses, the last byte last (pollers wait on it) */
				if (last && h->plen > 1) {
					r = sv_dma_write(mr, addr + h->off, payload, h->plen - 1);
					atomic_thread_fence(memory_order_release);
					r |= sv_dma_write(mr, addr + h->off + h->plen - 1,
							  payload + h->plen - 1, 1);
				} else
					r = sv_dma_write(mr, addr + h->off, payload, h->plen);
			}
		}
		if (r)
			SV_TRACE("qp 0x%x: registered memory vanished (EFAULT); data dropped",
				 qp->qp.qp_num);
	}
	if (!last)
		return false;
	qp->in_active = false;
	qp->exp_psn = (qp->exp_psn + 1) & 0xffffff;
	if (qp->in_has_wqe) {
		qp->in_has_wqe = false;
		struct ibv_wc wc = {.wr_id = qp->in_wqe.wr_id, .status = IBV_WC_SUCCESS,
				    .qp_num = qp->qp.qp_num, .src_qp = h->src_qpn,
				    .byte_len = (uint32_t)h->total};
		if (h->type == T_SEND) {
			wc.opcode = IBV_WC_RECV;
			struct sv_mr *dm = h->total <= (uint64_t)sv_cfg.devmem_max_msg
						   ? mr_list_devmem(&qp->in_wqe)
						   : NULL;
			if (dm && dm->alias && h->total <= 64 && qp->in_wqe.num_sge > 0) {
				/* mlx5 scatter-to-CQE into real device memory: the payload
				 * rides in the CQE and poll_cq's memcpy faults (T20) */
				sv_cq_push_scatter((struct sv_cq *)qp->qp.recv_cq, &wc,
						   qp->in_wqe.sge[0].addr, payload, (uint8_t)h->total);
				send_ctl(l, T_ACK, h->src_qpn, qp->qp.qp_num, h->psn, 0);
				return false;
			}
			if (dm) {
				/* mlx5 scatter-to-CQE: the CPU copies small payloads out of the
				 * CQE inside poll_cq, which faults on device memory */
				wc.status = sv_cfg.devmem_status;
				garbage_wc(&wc);
				sv_recv_complete(qp, &wc, false);
				send_ctl(l, T_ACK, h->src_qpn, qp->qp.qp_num, h->psn, 0);
				sv_qp_to_error(qp, false);
				return false;
			}
		} else
			wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		if (h->flags & F_IMM) {
			wc.wc_flags |= IBV_WC_WITH_IMM;
			wc.imm_data = h->imm;
		}
		sv_recv_complete(qp, &wc, (h->flags & F_SOLICITED) != 0);
	}
	send_ctl(l, T_ACK, h->src_qpn, qp->qp.qp_num, h->psn, 0);
	return false;
}

static void drain_parked(struct sv_qp *qp)
{
	while (qp->parked_head) {
		struct sv_inmsg *m = qp->parked_head;
		if (qp->st != IBV_QPS_RTR && qp->st != IBV_QPS_RTS) {
			sv_engine_drop_parked(qp);
			return;
		}
		if (m->link->dead) {
			sv_engine_drop_parked(qp);
			return;
		}
		bool needs = (m->h.flags & F_FIRST) &&
			     (m->h.type == T_SEND || (m->h.flags & F_IMM));
		if (needs) {
			bool avail = qp->qp.srq ? ((struct sv_srq *)qp->qp.srq)->count > 0
						: qp->rq_count > 0;
			if (!avail)
				return;
		}
		qp->parked_head = m->next;
		if (!qp->parked_head)
			qp->parked_tail = NULL;
		if (needs)
			qp->rnr_deadline_ns = 0;
		handle_request(qp, m->link, &m->h, m->payload, true);
		free(m->payload);
		free(m);
	}
}

/* ---- requester: responses ----------------------------------------------------------- */
static void handle_response(struct sv_qp *qp, const struct sv_hdr *h, const uint8_t *payload)
{
	if (qp->st != IBV_QPS_RTS && qp->st != IBV_QPS_SQD)
		return;
	if (h->src_qpn != qp->dest_qpn)
		return;
	for (int i = 0; i < qp->sq_tx; i++) {
		struct sv_swqe *w = &qp->sq[(qp->sq_head + i) % qp->sq_cap];
		if (w->st == SV_W_DONE)
			continue;
		bool is_read = w->opcode == IBV_WR_RDMA_READ;
		if (h->type == T_ACK) {
			if (!psn_le(w->psn, h->psn))
				break;
			if (!is_read)
				wqe_done(w, IBV_WC_SUCCESS);
		} else if (h->type == T_NAK) {
			if (w->psn == h->psn) {
				wqe_done(w, (enum ibv_wc_status)h->aux);
				break;
			}
			if (!psn_le(w->psn, h->psn))
				break;
			if (!is_read)
				wqe_done(w, IBV_WC_SUCCESS);
		} else if (h->type == T_RNR_WAIT) {
			if (w->psn == h->psn) {
				w->rnr_wait = true;
				break;
			}
		} else if (h->type == T_READ_RESP) {
			if (w->psn != h->psn)
				continue;
			if (!is_read)
				break;
			if (h->plen && sge_copy(w->sge, w->num_sge, h->off, (uint8_t *)payload,
						h->plen, true))
				SV_TRACE("qp 0x%x: READ target vanished", qp->qp.qp_num);
			w->got += h->plen;
			uint64_t tmo = sv_ib_timeout_ns(qp->timeout);
			if (tmo) /* responses flowing: the peer is alive */
				w->deadline_ns = sv_now_ns() + tmo;
			if (h->flags & F_LAST)
				wqe_done(w, IBV_WC_SUCCESS);
			break;
		}
	}
	retire(qp);
}

static void handle_frame(struct sv_link *l, const struct sv_hdr *h, const uint8_t *payload)
{
	struct sv_qp *qp = sv_engine_qp_by_num(h->dst_qpn);
	if (!qp || qp->dead) {
		SV_TRACE("frame for unknown QPN 0x%x dropped", h->dst_qpn);
		return;
	}
	switch (h->type) {
	case T_SEND:
	case T_WRITE:
	case T_READ_REQ:
		handle_request(qp, l, h, payload, false);
		break;
	case T_ACK:
		if (sv_cfg.ack_latency_ns) {
			/* the responder has placed the data and its application may
			 * see it (and exit) while this ACK is still on the wire */
			struct sv_late_ack *a = calloc(1, sizeof(*a));
			if (a) {
				a->h = *h;
				late_push(&E.acks, &a->l, sv_cfg.ack_latency_ns);
				break;
			}
		}
		handle_response(qp, h, payload);
		break;
	case T_NAK:
	case T_RNR_WAIT:
	case T_READ_RESP:
		handle_response(qp, h, payload);
		break;
	default:
		break;
	}
}

/* ---- timers and ports ------------------------------------------------------------------- */
/* Delivers the ACKs whose latency has passed (to QPs that still exist). */
static void deliver_late_acks(uint64_t now, uint64_t *next)
{
	struct sv_late *l;
	while ((l = late_pop(&E.acks, now, next))) {
		struct sv_late_ack *a = (struct sv_late_ack *)l;
		struct sv_qp *qp = sv_engine_qp_by_num(a->h.dst_qpn);
		if (qp && !qp->dead)
			handle_response(qp, &a->h, NULL);
		free(a);
	}
}

static void check_timers(uint64_t now, uint64_t *next)
{
	for (int s = 1; s < SV_SLOTS; s++) {
		struct sv_qp *qp = E.qps[s];
		if (!qp)
			continue;
		if (qp->rnr_deadline_ns) {
			if (now >= qp->rnr_deadline_ns && qp->parked_head) {
				struct sv_inmsg *m = qp->parked_head;
				send_ctl(m->link, T_NAK, m->h.src_qpn, qp->qp.qp_num, m->h.psn,
					 IBV_WC_RNR_RETRY_EXC_ERR);
				sv_engine_drop_parked(qp);
			} else if (qp->rnr_deadline_ns < *next)
				*next = qp->rnr_deadline_ns;
		}
		if (qp->st != IBV_QPS_RTS)
			continue;
		bool changed = false;
		for (int i = 0; i < qp->sq_tx; i++) {
			struct sv_swqe *w = &qp->sq[(qp->sq_head + i) % qp->sq_cap];
			if (w->st != SV_W_WAIT_ACK || !w->deadline_ns || w->rnr_wait)
				continue;
			if (now >= w->deadline_ns) {
				if (w->retries == 0) {
					wqe_done(w, IBV_WC_RETRY_EXC_ERR);
					changed = true;
					break;
				}
				/* no ACK in time: send this message and all after it again */
				w->retries--;
				SV_TRACE("qp 0x%x: psn 0x%x timed out, retransmitting (%u left)",
					 qp->qp.qp_num, w->psn, w->retries);
				for (int j = i; j < qp->sq_tx; j++) {
					struct sv_swqe *x = &qp->sq[(qp->sq_head + j) % qp->sq_cap];
					if (x->st == SV_W_DONE)
						continue;
					x->st = SV_W_SENDING;
					x->sent = 0;
					x->got = 0;
					x->deadline_ns = 0;
					x->rnr_wait = false;
				}
				qp->sq_tx = i;
				break;
			}
			if (w->deadline_ns < *next)
				*next = w->deadline_ns;
		}
		if (changed)
			retire(qp);
	}
}

static void read_control(void)
{
	if (!sv_cfg.control[0])
		return;
	struct stat st;
	if (stat(sv_cfg.control, &st) != 0) {
		if (E.ctl_mtime) { /* file removed: everything back up */
			E.ctl_mtime = 0;
			for (int d = 0; d < sv_cfg.ndev; d++)
				for (int p = 0; p < SV_MAX_PORT; p++)
					sv_cfg.dev[d].port[p].ctl_down = false;
		}
		return;
	}
	FILE *f = fopen(sv_cfg.control, "r");
	if (!f)
		return;
	E.ctl_mtime = st.st_mtime ? st.st_mtime : 1;
	for (int d = 0; d < sv_cfg.ndev; d++)
		for (int p = 0; p < SV_MAX_PORT; p++)
			sv_cfg.dev[d].port[p].ctl_down = false;
	char line[256];
	while (fgets(line, sizeof(line), f)) {
		char dev[64], state[16];
		int port;
		if (sscanf(line, "%63s %d %15s", dev, &port, state) != 3)
			continue;
		for (int d = 0; d < sv_cfg.ndev; d++)
			if (!strcmp(sv_cfg.dev[d].name, dev) && port >= 1 && port <= SV_MAX_PORT)
				sv_cfg.dev[d].port[port - 1].ctl_down = !strcmp(state, "down");
	}
	fclose(f);
}

static void poll_ports(void)
{
	read_control();
	bool refreshed[SV_MAX_DEV] = {0};
	for (struct sv_context *c = E.ctxs; c; c = c->next) {
		struct sv_dev_cfg *d = &sv_cfg.dev[c->dev_index];
		if (!refreshed[c->dev_index]) {
			for (int p = 0; p < d->nports; p++) {
				sv_port_refresh(d, p);
				if (d->port[p].link_layer == IBV_LINK_LAYER_INFINIBAND && d->port[p].lid)
					lid_publish(&d->port[p]);
			}
			refreshed[c->dev_index] = true;
		}
		for (int p = 0; p < d->nports; p++) {
			enum ibv_port_state s = d->port[p].state;
			if (s != c->last_state[p]) {
				c->last_state[p] = s;
				sv_async_push(c, s == IBV_PORT_ACTIVE ? IBV_EVENT_PORT_ACTIVE
								      : IBV_EVENT_PORT_ERR,
					      (void *)(intptr_t)(p + 1));
			}
		}
	}
}

/* ---- the progress thread ----------------------------------------------------------------- */
static void link_flush(struct sv_link *l);

static void link_read(struct sv_link *l)
{
	size_t budget = 16u * 1024u * 1024u;
	while (budget && !l->dead) {
		size_t need = sizeof(struct sv_hdr);
		if (l->in_len >= sizeof(struct sv_hdr)) {
			const struct sv_hdr *h = (const struct sv_hdr *)l->in;
			if (h->magic != SV_MAGIC || h->plen > SV_PKT) {
				sv_log("link: bad frame from peer; closing the link");
				link_kill(l);
				return;
			}
			need += h->plen;
		}
		if (l->in_len >= need) {
			pthread_mutex_lock(&sv_lock);
			handle_frame(l, (const struct sv_hdr *)l->in, l->in + sizeof(struct sv_hdr));
			/* the ACK leaves before the completion it answers becomes visible:
			 * an application may exit as soon as it sees that completion */
			link_flush(l);
			pthread_mutex_unlock(&sv_lock);
			l->in_len = 0;
			continue;
		}
		if (need > l->in_cap) {
			uint8_t *b = realloc(l->in, need);
			if (!b) {
				link_kill(l);
				return;
			}
			l->in = b;
			l->in_cap = need;
		}
		ssize_t r = recv(l->fd, l->in + l->in_len, need - l->in_len, 0);
		if (r > 0) {
			l->in_len += (size_t)r;
			budget = budget > (size_t)r ? budget - (size_t)r : 0;
		} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
			link_kill(l);
			return;
		} else if (errno == EAGAIN)
			return;
	}
}

static void link_flush(struct sv_link *l)
{
	if (l->dead || l->connecting)
		return;
	while (link_pending(l)) {
		ssize_t r = send(l->fd, l->out + l->out_off, link_pending(l), MSG_NOSIGNAL);
		if (r > 0) {
			l->out_off += (size_t)r;
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && errno == EAGAIN) {
			break;
		} else {
			link_kill(l);
			return;
		}
	}
	if (l->out_off == l->out_len)
		l->out_off = l->out_len = 0;
	bool want = link_pending(l) > 0;
	if (want != l->want_out) {
		l->want_out = want;
		link_epoll(l);
	}
}

static void reap_links(void)
{
	struct sv_link **pp = &E.links;
	while (*pp) {
		struct sv_link *l = *pp;
		if (!l->dead) {
			pp = &l->next;
			continue;
		}
		for (int s = 1; s < SV_SLOTS; s++) {
			struct sv_qp *qp = E.qps[s];
			if (!qp)
				continue;
			if (qp->link == l)
				qp->link = NULL; /* its next packets reconnect */
			if (qp->in_link == l)
				qp->in_link = NULL;
			for (struct sv_inmsg *m = qp->parked_head; m; m = m->next)
				if (m->link == l) {
					sv_engine_drop_parked(qp);
					break;
				}
		}
		for (struct sv_readjob **jp = &E.reads; *jp;) {
			if ((*jp)->link == l) {
				struct sv_readjob *j = *jp;
				*jp = j->next;
				free(j);
			} else
				jp = &(*jp)->next;
		}
		epoll_ctl(E.ep, EPOLL_CTL_DEL, l->fd, NULL);
		close(l->fd);
		*pp = l->next;
		free(l->in);
		free(l->out);
		free(l);
	}
}

static void *progress(void *arg)
{
	struct epoll_event evs[64];
	int timeout = 0;
	while (!__atomic_load_n(&E.stop, __ATOMIC_ACQUIRE)) {
		int n = epoll_wait(E.ep, evs, 64, timeout);
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (p == &E.lfd) {
				for (;;) {
					int fd = accept4(E.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
					if (fd < 0)
						break;
					pthread_mutex_lock(&sv_lock);
					if (!link_new(fd, 0, 0))
						close(fd);
					pthread_mutex_unlock(&sv_lock);
				}
				continue;
			}
			if (p == &E.bell) {
				uint64_t v;
				ssize_t r = read(E.bell, &v, sizeof(v));
				(void)r;
				continue;
			}
			struct sv_link *l = p;
			if (l->connecting && (evs[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
				int err = 0;
				socklen_t len = sizeof(err);
				getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len);
				l->connecting = false;
				if (err) {
					SV_TRACE("connect: %s", strerror(err));
					link_kill(l);
					continue;
				}
			}
			if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
				link_read(l);
		}
		pthread_mutex_lock(&sv_lock);
		uint64_t now = sv_now_ns();
		int more = 0;
		for (int s = 1; s < SV_SLOTS; s++) {
			struct sv_qp *qp = E.qps[s];
			if (!qp)
				continue;
			if (qp->parked_head)
				drain_parked(qp);
			more |= pump_qp(qp);
		}
		more |= pump_reads();
		if (now >= E.next_port_poll) {
			poll_ports();
			E.next_port_poll = now + 100000000ull;
		}
		uint64_t next = E.next_port_poll;
		deliver_late_acks(now, &next);
		deliver_late_cqes(now, &next);
		check_timers(now, &next);
		reap_links();
		pthread_mutex_unlock(&sv_lock);
		bool blocked = false;
		for (struct sv_link *l = E.links; l; l = l->next) {
			link_flush(l);
			if (link_pending(l) && !l->dead)
				blocked = true;
		}
		if (more && !blocked)
			timeout = 0;
		else {
			uint64_t t = sv_now_ns();
			timeout = next > t ? (int)((next - t) / 1000000ull) + 1 : 0;
		}
	}
	return NULL;
}

/* The library is being unloaded (stock TensorPipe dlopens libibverbs and
 * closes it when its process exits) or the process exits: the progress
 * thread must be out of this library's code before its pages go, or it
 * faults in unmapped memory (seen: SIGSEGV in a stock adapter's exit,
 * once in about 20 runs of the ibv battery). Bounded: a thread stuck on a
 * lock another thread holds forever is left as it was. */
__attribute__((destructor)) static void sv_engine_unload(void)
{
	if (!E.started || E.pid != getpid())
		return;
	__atomic_store_n(&E.stop, true, __ATOMIC_RELEASE);
	uint64_t one = 1;
	ssize_t w = write(E.bell, &one, sizeof(one));
	(void)w;
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 2;
	if (pthread_timedjoin_np(E.thr, NULL, &dl) == 0)
		E.started = false;
}

static void atfork_child(void);

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void prepare(void)
{
	pthread_mutex_lock(&sv_lock);
}
static void parent(void);

static void register_atfork(void)
{
	pthread_atfork(prepare, parent, atfork_child);
}

static void parent(void)
{
	sv_fork_parent_hook();
	pthread_mutex_unlock(&sv_lock);
}

int sv_engine_start(void)
{
	sv_config_load();
	pthread_once(&atfork_once, register_atfork);
	pthread_mutex_lock(&sv_lock);
	if (E.started) {
		pthread_mutex_unlock(&sv_lock);
		return 0;
	}
	int err = 0;
	E.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (E.lfd < 0)
		goto fail;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
	socklen_t sl = sizeof(sa);
	if (bind(E.lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(E.lfd, 128) ||
	    getsockname(E.lfd, (struct sockaddr *)&sa, &sl))
		goto fail;
	E.port = ntohs(sa.sin_port);
	E.ep = epoll_create1(EPOLL_CLOEXEC);
	E.bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (E.ep < 0 || E.bell < 0)
		goto fail;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &E.lfd};
	epoll_ctl(E.ep, EPOLL_CTL_ADD, E.lfd, &ev);
	ev.data.ptr = &E.bell;
	epoll_ctl(E.ep, EPOLL_CTL_ADD, E.bell, &ev);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* signals go to application threads */
	err = pthread_create(&E.thr, NULL, progress, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		goto fail_err;
	pthread_setname_np(E.thr, "simverbs-prog");
	/* joinable: sv_engine_unload waits for it */
	E.started = true;
	E.pid = getpid();
	pthread_mutex_unlock(&sv_lock);
	return 0;
fail:
	err = errno;
fail_err:
	sv_log("engine: cannot start (%s)", strerror(err));
	if (E.lfd >= 0)
		close(E.lfd);
	if (E.ep >= 0)
		close(E.ep);
	if (E.bell >= 0)
		close(E.bell);
	E.lfd = E.ep = E.bell = -1;
	pthread_mutex_unlock(&sv_lock);
	return err ? err : EIO;
}

/* In the child the engine's thread does not exist: every inherited context is
 * dead, the engine's sockets are closed, and a new device open starts afresh. */
static void atfork_child(void)
{
	pthread_mutex_init(&sv_lock, NULL);
	for (struct sv_context *c = E.ctxs; c; c = c->next)
		c->dead = true;
	E.ctxs = NULL;
	if (!E.started)
		return;
	for (struct sv_link *l = E.links; l; l = l->next)
		close(l->fd);
	E.links = NULL; /* the structs are the parent's; leave them */
	E.reads = NULL;
	E.cqes.head = E.cqes.tail = NULL; /* the parent's QPs */
	close(E.lfd);
	close(E.ep);
	close(E.bell);
	E.lfd = E.ep = E.bell = -1;
	memset(E.qps, 0, sizeof(E.qps));
	E.started = false;
}
