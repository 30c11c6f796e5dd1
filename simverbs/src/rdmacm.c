/* simverbs librdmacm.so.1: the RDMA connection manager on top of simverbs'
 * libibverbs. Event channels are eventfds with a queue; a listening id is a
 * TCP listener on its address and port; REQ/REP/RTU/REJ/DREQ/DREP travel over
 * one TCP connection per id pair and carry GID, QPN, PSN, the RDMA parameters
 * and private data. One CM thread per process reads those connections and
 * queues events; QPs created through rdma_create_qp are moved INIT -> RTR ->
 * RTS here, as the kernel's rdma_cm does. Only public verbs calls plus
 * simverbs_find_port_by_ip() reach into libibverbs. rsocket calls fail with
 * ENOSYS (rpoll is poll). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#define EXPORT __attribute__((visibility("default")))
#define CM_MAGIC 0x53564d43u /* "SVMC" */

int simverbs_find_port_by_ip(uint32_t ip_be, int *dev_out, int *port_out, int *gid_out);
void simverbs_qp_error_if_live(uint32_t qpn, const struct ibv_qp *expect);

enum { M_REQ = 1, M_REP, M_RTU, M_REJ, M_DREQ, M_DREP };

struct cm_msg {
	uint32_t magic, type;
	uint8_t gid[16];
	uint32_t qpn, psn;
	uint8_t resp_res, init_depth, retry, rnr_retry;
	uint8_t pdata_len, rsv[3];
	uint8_t pdata[196];
};

enum id_state { S_IDLE, S_ADDR, S_ROUTE, S_LISTEN, S_CONNECTING, S_REQ_RCVD, S_ACCEPTED,
		S_ESTABLISHED, S_DISCONNECTED };

struct sv_chan_event {
	struct rdma_cm_event ev;
	uint8_t pdata[196];
	struct sv_chan_event *next;
};

struct sv_cm_chan {
	struct rdma_event_channel ch;
	struct sv_chan_event *head, *tail;
	bool dead;                 /* destroyed: kept, never reused (see below) */
	struct sv_cm_chan *next_dead;
};

struct sv_id {
	struct rdma_cm_id id;
	enum id_state st;
	int lfd;                    /* listener */
	int cfd;                    /* CM connection to the peer */
	bool in_epoll;
	struct cm_msg peer;         /* REQ or REP of the other side */
	uint32_t my_psn;
	uint8_t resp_res, init_depth, retry, rnr_retry;
	uint32_t events_reported, events_acked;
	pthread_cond_t cond;
	struct sv_id *next;         /* live ids */
	bool dead;
	uint32_t qpn;               /* id.qp's number, read when it was made */
};

static pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;

/* Address and route resolution complete asynchronously, after a short delay
 * (an ARP and a path lookup take time on a real fabric; peers that race a
 * re-listening server rely on it). */
#define RESOLVE_DELAY_NS 2000000ull
/* How long rdma_connect keeps trying a refused connection (rdma_connect). */
#define REFUSED_GRACE_MS 500
struct delayed_ev {
	struct sv_id *id;
	enum rdma_cm_event_type type;
	uint64_t due;
	struct delayed_ev *next;
};
static struct delayed_ev *delayed;
static int cm_bell = -1;

static void cm_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void cm_trace(const char *fmt, ...)
{
	const char *t = getenv("SIMVERBS_TRACE");
	if (!t || atoi(t) == 0)
		return;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "simverbs-cm[%d]: %s\n", (int)getpid(), buf);
}
static struct sv_id *ids;
static int cm_ep = -1;
static pthread_t cm_thr;
static struct ibv_context *dev_ctx[8];
static struct ibv_pd *dev_pd[8];

/* ---- event channels -------------------------------------------------------------- */
EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct sv_cm_chan *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (c->ch.fd < 0) {
		int e = errno;
		free(c);
		errno = e;
		return NULL;
	}
	return &c->ch;
}

/* Destroyed channels. An application may destroy a channel while another
 * of its threads is inside rdma_get_cm_event on it (rping does, at exit):
 * librdmacm's event read is one system call on the channel's descriptor,
 * so it never touches the channel's memory after the call returns, and
 * neither may ours, which takes the event from the channel's queue after
 * its eventfd says one is there. So a destroyed channel's memory is kept
 * (a few dozen bytes per channel a process ever destroys) and marked dead.
 * A reader that wakes on it then waits until the process exits, as one
 * blocked in the kernel on the descriptor it holds would. So does a call
 * made after the destroy: librdmacm has freed the channel by then (the
 * call is undefined), and rping's event thread makes it when the main
 * thread's teardown is quicker than its own loop back; failing it would
 * make rping exit with an error that real hardware's timing hides. */
static struct sv_cm_chan *dead_chans;

static void sv_cm_wait_forever(void)
{
	for (;;)
		pause();
}

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct sv_cm_chan *c = (struct sv_cm_chan *)channel;
	pthread_mutex_lock(&cm_lock);
	struct sv_chan_event *e = c->head;
	c->head = c->tail = NULL;
	c->dead = true;
	c->next_dead = dead_chans;
	dead_chans = c;
	pthread_mutex_unlock(&cm_lock);
	while (e) {
		struct sv_chan_event *n = e->next;
		free(e);
		e = n;
	}
	close(channel->fd);
}

/* caller holds cm_lock */
static void post_event(struct sv_id *id, struct sv_id *listen, enum rdma_cm_event_type type,
		       int status, const struct cm_msg *m)
{
	struct sv_cm_chan *c = (struct sv_cm_chan *)id->id.channel;
	if (!c || c->dead)
		return;
	struct sv_chan_event *e = calloc(1, sizeof(*e));
	if (!e)
		return;
	e->ev.id = &id->id;
	e->ev.listen_id = listen ? &listen->id : NULL;
	e->ev.event = type;
	e->ev.status = status;
	if (m) {
		memcpy(e->pdata, m->pdata, m->pdata_len);
		e->ev.param.conn.private_data = m->pdata_len ? e->pdata : NULL;
		e->ev.param.conn.private_data_len = m->pdata_len;
		e->ev.param.conn.responder_resources = m->resp_res;
		e->ev.param.conn.initiator_depth = m->init_depth;
		e->ev.param.conn.retry_count = m->retry;
		e->ev.param.conn.rnr_retry_count = m->rnr_retry;
		e->ev.param.conn.qp_num = m->qpn;
	}
	if (c->tail)
		c->tail->next = e;
	else
		c->head = e;
	c->tail = e;
	uint64_t one = 1;
	ssize_t r = write(c->ch.fd, &one, sizeof(one));
	(void)r;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* caller holds cm_lock */
static void post_later(struct sv_id *id, enum rdma_cm_event_type type)
{
	struct delayed_ev *d = calloc(1, sizeof(*d));
	if (!d) {
		post_event(id, NULL, type, 0, NULL);
		return;
	}
	d->id = id;
	d->type = type;
	d->due = mono_ns() + RESOLVE_DELAY_NS;
	struct delayed_ev **pp = &delayed;
	while (*pp)
		pp = &(*pp)->next;
	*pp = d;
	uint64_t one = 1;
	ssize_t r = write(cm_bell, &one, sizeof(one));
	(void)r;
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct sv_cm_chan *c = (struct sv_cm_chan *)channel;
	uint64_t v;
	pthread_mutex_lock(&cm_lock);
	bool dead = c->dead;
	pthread_mutex_unlock(&cm_lock);
	if (dead) /* a call after the destroy (see dead_chans) */
		sv_cm_wait_forever();
	if (read(channel->fd, &v, sizeof(v)) != sizeof(v))
		return -1; /* EAGAIN when the application made the fd non-blocking */
again:
	pthread_mutex_lock(&cm_lock);
	if (c->dead) { /* destroyed while this call waited (see dead_chans) */
		pthread_mutex_unlock(&cm_lock);
		sv_cm_wait_forever();
	}
	struct sv_chan_event *e = c->head;
	if (e) {
		c->head = e->next;
		if (!c->head)
			c->tail = NULL;
		if (e->ev.id)
			((struct sv_id *)e->ev.id)->events_reported++;
	}
	pthread_mutex_unlock(&cm_lock);
	if (!e) {
		errno = EAGAIN;
		return -1;
	}
	if (!e->ev.id) { /* its id was destroyed before the event was read */
		free(e);
		if (read(channel->fd, &v, sizeof(v)) != sizeof(v))
			return -1;
		goto again;
	}
	*event = &e->ev;
	return 0;
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct sv_chan_event *e = (struct sv_chan_event *)event;
	pthread_mutex_lock(&cm_lock);
	struct sv_id *id = (struct sv_id *)event->id;
	id->events_acked++;
	pthread_cond_broadcast(&id->cond);
	pthread_mutex_unlock(&cm_lock);
	free(e);
	return 0;
}

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const n[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",    "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED",   "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",    "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED",         "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED",     "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",   "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE",      "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
	if ((unsigned)event >= sizeof(n) / sizeof(n[0]))
		return "UNKNOWN EVENT";
	return n[event];
}

/* ---- ids ------------------------------------------------------------------------------ */
static void *cm_loop(void *arg);

static int cm_start(void)
{
	if (cm_ep >= 0)
		return 0;
	cm_ep = epoll_create1(EPOLL_CLOEXEC);
	if (cm_ep < 0)
		return -1;
	cm_bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (cm_bell < 0) {
		close(cm_ep);
		cm_ep = -1;
		return -1;
	}
	struct epoll_event bev = {.events = EPOLLIN, .data.ptr = &cm_bell};
	epoll_ctl(cm_ep, EPOLL_CTL_ADD, cm_bell, &bev);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(&cm_thr, NULL, cm_loop, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		close(cm_ep);
		cm_ep = -1;
		errno = e;
		return -1;
	}
	pthread_setname_np(cm_thr, "simverbs-cm");
	pthread_detach(cm_thr);
	return 0;
}

EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id_out,
			  void *context, enum rdma_port_space ps)
{
	if (ps != RDMA_PS_TCP || !channel) {
		errno = channel ? EPROTONOSUPPORT : ENOSYS; /* synchronous ids: not modelled */
		return -1;
	}
	struct sv_id *id = calloc(1, sizeof(*id));
	if (!id) {
		errno = ENOMEM;
		return -1;
	}
	id->id.channel = channel;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = IBV_QPT_RC;
	id->lfd = id->cfd = -1;
	id->my_psn = (uint32_t)random() & 0xffffff; /* fixed before any QP moves */
	pthread_cond_init(&id->cond, NULL);
	pthread_mutex_lock(&cm_lock);
	if (cm_start()) {
		pthread_mutex_unlock(&cm_lock);
		free(id);
		return -1;
	}
	id->next = ids;
	ids = id;
	pthread_mutex_unlock(&cm_lock);
	*id_out = &id->id;
	return 0;
}

static void watch(struct sv_id *id, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = id};
	epoll_ctl(cm_ep, EPOLL_CTL_ADD, fd, &ev);
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *cid)
{
	struct sv_id *id = (struct sv_id *)cid;
	cm_trace("destroy_id %p (listener fd %d)", (void *)cid, id->lfd);
	pthread_mutex_lock(&cm_lock);
	/* every event reported for this id must have been acknowledged */
	while (id->events_acked != id->events_reported)
		pthread_cond_wait(&id->cond, &cm_lock);
	for (struct sv_id **pp = &ids; *pp; pp = &(*pp)->next)
		if (*pp == id) {
			*pp = id->next;
			break;
		}
	if (id->lfd >= 0) {
		epoll_ctl(cm_ep, EPOLL_CTL_DEL, id->lfd, NULL);
		close(id->lfd);
	}
	if (id->cfd >= 0) {
		epoll_ctl(cm_ep, EPOLL_CTL_DEL, id->cfd, NULL);
		close(id->cfd);
	}
	/* drop queued, unreported events of this id */
	struct sv_cm_chan *c = (struct sv_cm_chan *)cid->channel;
	for (struct sv_chan_event *e = c ? c->head : NULL; e; e = e->next)
		if (e->ev.id == cid)
			e->ev.id = NULL;
	pthread_mutex_unlock(&cm_lock);
	pthread_cond_destroy(&id->cond);
	free(id);
	return 0;
}

static int open_port_for(uint32_t ip, struct sv_id *id)
{
	int dev, port, gid;
	if (simverbs_find_port_by_ip(ip, &dev, &port, &gid) || dev >= 8)
		return -1;
	if (!dev_ctx[dev]) {
		int n;
		struct ibv_device **l = ibv_get_device_list(&n);
		if (!l || dev >= n) {
			ibv_free_device_list(l);
			return -1;
		}
		dev_ctx[dev] = ibv_open_device(l[dev]);
		ibv_free_device_list(l);
		if (!dev_ctx[dev])
			return -1;
		dev_pd[dev] = ibv_alloc_pd(dev_ctx[dev]);
	}
	id->id.verbs = dev_ctx[dev];
	id->id.port_num = (uint8_t)port;
	id->id.pd = NULL;
	union ibv_gid g;
	memset(&g, 0, sizeof(g));
	g.raw[10] = g.raw[11] = 0xff;
	memcpy(g.raw + 12, &ip, 4);
	memcpy(id->id.route.addr.addr.ibaddr.sgid.raw, g.raw, 16);
	id->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
	return 0;
}

static uint32_t sa_ip(const struct sockaddr *sa)
{
	return ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
}

EXPORT int rdma_bind_addr(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	struct sv_id *id = (struct sv_id *)cid;
	if (!addr || addr->sa_family != AF_INET) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	memcpy(&cid->route.addr.src_sin, addr, sizeof(struct sockaddr_in));
	pthread_mutex_lock(&cm_lock);
	uint32_t ip = sa_ip(addr);
	if (ip != htonl(INADDR_ANY) && open_port_for(ip, id)) {
		pthread_mutex_unlock(&cm_lock);
		errno = EADDRNOTAVAIL;
		return -1;
	}
	id->st = S_ADDR;
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

EXPORT int rdma_listen(struct rdma_cm_id *cid, int backlog)
{
	struct sv_id *id = (struct sv_id *)cid;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, &cid->route.addr.src_addr, sizeof(struct sockaddr_in)) ||
	    listen(fd, backlog > 0 ? backlog : 16)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	socklen_t sl = sizeof(struct sockaddr_in);
	getsockname(fd, &cid->route.addr.src_addr, &sl);
	cm_trace("listen %p on port %u", (void *)cid, ntohs(cid->route.addr.src_sin.sin_port));
	pthread_mutex_lock(&cm_lock);
	id->lfd = fd;
	id->st = S_LISTEN;
	watch(id, fd);
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *cid, struct sockaddr *src, struct sockaddr *dst,
			     int timeout_ms)
{
	struct sv_id *id = (struct sv_id *)cid;
	if (!dst || dst->sa_family != AF_INET) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	memcpy(&cid->route.addr.dst_sin, dst, sizeof(struct sockaddr_in));
	/* the kernel's route lookup: the source address a UDP socket would use */
	struct sockaddr_in s = {.sin_family = AF_INET};
	if (src && sa_ip(src) != htonl(INADDR_ANY)) {
		s.sin_addr.s_addr = sa_ip(src);
	} else {
		int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in d = cid->route.addr.dst_sin;
		if (!d.sin_port)
			d.sin_port = htons(9);
		socklen_t sl = sizeof(s);
		if (u < 0 || connect(u, (struct sockaddr *)&d, sizeof(d)) ||
		    getsockname(u, (struct sockaddr *)&s, &sl)) {
			if (u >= 0)
				close(u);
			pthread_mutex_lock(&cm_lock);
			post_event(id, NULL, RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH, NULL);
			pthread_mutex_unlock(&cm_lock);
			return 0;
		}
		close(u);
		s.sin_port = 0;
	}
	memcpy(&cid->route.addr.src_sin, &s, sizeof(s));
	pthread_mutex_lock(&cm_lock);
	if (open_port_for(s.sin_addr.s_addr, id)) {
		post_event(id, NULL, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV, NULL);
	} else {
		uint8_t *dg = cid->route.addr.addr.ibaddr.dgid.raw;
		memset(dg, 0, 16);
		dg[10] = dg[11] = 0xff;
		memcpy(dg + 12, &cid->route.addr.dst_sin.sin_addr, 4);
		id->st = S_ADDR;
		post_later(id, RDMA_CM_EVENT_ADDR_RESOLVED);
	}
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *cid, int timeout_ms)
{
	struct sv_id *id = (struct sv_id *)cid;
	pthread_mutex_lock(&cm_lock);
	if (id->st != S_ADDR) {
		pthread_mutex_unlock(&cm_lock);
		errno = EINVAL;
		return -1;
	}
	id->st = S_ROUTE;
	cid->route.num_paths = 1;
	post_later(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

/* ---- QPs -------------------------------------------------------------------------------- */
static int qp_to_init(struct rdma_cm_id *cid, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = cid->port_num,
				.pkey_index = 0,
				.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						   IBV_ACCESS_REMOTE_READ};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS);
}

EXPORT int rdma_create_qp(struct rdma_cm_id *cid, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *attr)
{
	if (!cid->verbs) {
		errno = EINVAL;
		return -1;
	}
	if (!pd) {
		for (int d = 0; d < 8; d++)
			if (dev_ctx[d] == cid->verbs)
				pd = dev_pd[d];
	}
	struct ibv_qp *qp = ibv_create_qp(pd, attr);
	if (!qp)
		return -1;
	int r = qp_to_init(cid, qp);
	if (r) {
		ibv_destroy_qp(qp);
		errno = r;
		return -1;
	}
	cid->qp = qp;
	((struct sv_id *)cid)->qpn = qp->qp_num;
	cid->pd = pd;
	cid->send_cq = attr->send_cq;
	cid->recv_cq = attr->recv_cq;
	return 0;
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *cid, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr a = {.qp_context = attr->qp_context, .send_cq = attr->send_cq,
				     .recv_cq = attr->recv_cq, .srq = attr->srq, .cap = attr->cap,
				     .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all};
	int r = rdma_create_qp(cid, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : NULL, &a);
	if (!r)
		attr->cap = a.cap;
	return r;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *cid)
{
	if (cid->qp)
		ibv_destroy_qp(cid->qp);
	cid->qp = NULL;
}

/* attributes the kernel's rdma_init_qp_attr() gives for the id's current state */
EXPORT int rdma_init_qp_attr(struct rdma_cm_id *cid, struct ibv_qp_attr *a, int *mask)
{
	struct sv_id *id = (struct sv_id *)cid;
	/* the caller names the state it wants in a->qp_state (as with the kernel);
	 * for our own calls on a QP we own, it is the next one after its state */
	enum ibv_qp_state want = a->qp_state;
	memset(a, 0, sizeof(*a));
	pthread_mutex_lock(&cm_lock);
	int r = 0;
	if (want == IBV_QPS_RESET) {
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr ia;
		enum ibv_qp_state cur = IBV_QPS_RESET;
		if (cid->qp && !ibv_query_qp(cid->qp, &qa, IBV_QP_STATE, &ia))
			cur = qa.qp_state;
		want = cur == IBV_QPS_RESET ? IBV_QPS_INIT : cur == IBV_QPS_INIT ? IBV_QPS_RTR
											: IBV_QPS_RTS;
	}
	if (want == IBV_QPS_INIT) {
		a->qp_state = IBV_QPS_INIT;
		a->port_num = cid->port_num;
		a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				     IBV_ACCESS_REMOTE_READ;
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (want == IBV_QPS_RTR && id->peer.magic == CM_MAGIC) {
		a->qp_state = IBV_QPS_RTR;
		a->path_mtu = IBV_MTU_1024;
		a->dest_qp_num = id->peer.qpn;
		a->rq_psn = id->peer.psn;
		a->max_dest_rd_atomic = id->resp_res ? id->resp_res : 1;
		a->min_rnr_timer = 12;
		a->ah_attr.is_global = 1;
		memcpy(a->ah_attr.grh.dgid.raw, id->peer.gid, 16);
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.port_num = cid->port_num;
		*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	} else if (want == IBV_QPS_RTS && id->peer.magic == CM_MAGIC) {
		a->qp_state = IBV_QPS_RTS;
		a->sq_psn = id->my_psn;
		a->timeout = 14;
		a->retry_cnt = id->retry ? id->retry : 7;
		a->rnr_retry = id->rnr_retry;
		a->max_rd_atomic = id->init_depth ? id->init_depth : 1;
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	} else {
		r = EINVAL;
	}
	pthread_mutex_unlock(&cm_lock);
	if (r) {
		errno = r;
		return -1;
	}
	return 0;
}

/* caller holds cm_lock: INIT -> RTR -> RTS from the peer's REQ or REP */
static int connect_qp(struct sv_id *id)
{
	struct ibv_qp *qp = id->id.qp;
	if (!qp)
		return 0; /* the application moves its own QP (rping -q) */
	for (int step = 0; step < 2; step++) {
		struct ibv_qp_attr a = {.qp_state = step ? IBV_QPS_RTS : IBV_QPS_RTR};
		int mask;
		pthread_mutex_unlock(&cm_lock);
		int r = rdma_init_qp_attr(&id->id, &a, &mask);
		pthread_mutex_lock(&cm_lock);
		if (r)
			return errno;
		if ((r = ibv_modify_qp(qp, &a, mask)))
			return r;
	}
	return 0;
}

static int send_msg(int fd, const struct cm_msg *m)
{
	return send(fd, m, sizeof(*m), MSG_NOSIGNAL) == (ssize_t)sizeof(*m) ? 0 : -1;
}

static void fill_msg(struct sv_id *id, struct cm_msg *m, uint32_t type,
		     const struct rdma_conn_param *p)
{
	memset(m, 0, sizeof(*m));
	m->magic = CM_MAGIC;
	m->type = type;
	memcpy(m->gid, id->id.route.addr.addr.ibaddr.sgid.raw, 16);
	m->qpn = id->id.qp ? id->id.qp->qp_num : (p ? p->qp_num : 0);
	m->psn = id->my_psn;
	if (p) {
		m->resp_res = p->responder_resources;
		m->init_depth = p->initiator_depth;
		m->retry = p->retry_count;
		m->rnr_retry = p->rnr_retry_count;
		m->pdata_len = p->private_data_len > sizeof(m->pdata) ? sizeof(m->pdata)
								       : p->private_data_len;
		if (p->private_data)
			memcpy(m->pdata, p->private_data, m->pdata_len);
	}
}

EXPORT int rdma_connect(struct rdma_cm_id *cid, struct rdma_conn_param *p)
{
	struct sv_id *id = (struct sv_id *)cid;
	/* A refused connect is tried again, on a fresh socket (one whose
	 * connect failed cannot connect again), for up to REFUSED_GRACE_MS: on
	 * a loaded host a client's reconnect can beat a server that is
	 * re-creating its listener (perftest -R does both), where a real CM's
	 * REQ, with a fabric's latencies, would not. No listener at all still
	 * ends in REJECTED, that much later. */
	int fd, err;
	for (int tries = 0;; tries++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			return -1;
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		int r = connect(fd, &cid->route.addr.dst_addr, sizeof(struct sockaddr_in));
		err = r ? errno : 0;
		if (err == EINPROGRESS) {
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			if (poll(&pf, 1, 5000) == 1) {
				socklen_t sl = sizeof(err);
				getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
			} else
				err = ETIMEDOUT;
		}
		if (err != ECONNREFUSED || tries >= REFUSED_GRACE_MS / 10)
			break;
		close(fd);
		usleep(10000);
	}
	cm_trace("connect %p to port %u: %s", (void *)cid, ntohs(cid->route.addr.dst_sin.sin_port),
		 err ? strerror(err) : "ok");
	pthread_mutex_lock(&cm_lock);
	if (err) {
		close(fd);
		if (err == ECONNREFUSED) /* no listener: IB CM "invalid service ID" */
			post_event(id, NULL, RDMA_CM_EVENT_REJECTED, 8, NULL);
		else
			post_event(id, NULL, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL);
		pthread_mutex_unlock(&cm_lock);
		return 0;
	}
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	id->cfd = fd;
	if (p) {
		id->init_depth = p->initiator_depth;
		id->resp_res = p->responder_resources;
		id->retry = p->retry_count;
		id->rnr_retry = p->rnr_retry_count;
	} else
		id->retry = 7;
	struct cm_msg m;
	fill_msg(id, &m, M_REQ, p);
	id->st = S_CONNECTING;
	watch(id, fd);
	int r = send_msg(fd, &m);
	pthread_mutex_unlock(&cm_lock);
	return r;
}

EXPORT int rdma_accept(struct rdma_cm_id *cid, struct rdma_conn_param *p)
{
	struct sv_id *id = (struct sv_id *)cid;
	pthread_mutex_lock(&cm_lock);
	if (id->st != S_REQ_RCVD) {
		pthread_mutex_unlock(&cm_lock);
		errno = EINVAL;
		return -1;
	}
	if (p) {
		/* our responder resources answer their initiator depth, and back */
		id->resp_res = p->responder_resources;
		id->init_depth = p->initiator_depth;
		id->rnr_retry = p->rnr_retry_count;
	}
	id->retry = id->peer.retry;
	int r = connect_qp(id);
	if (r) {
		pthread_mutex_unlock(&cm_lock);
		errno = r;
		return -1;
	}
	struct cm_msg m;
	fill_msg(id, &m, M_REP, p);
	id->st = S_ACCEPTED;
	r = send_msg(id->cfd, &m);
	pthread_mutex_unlock(&cm_lock);
	return r;
}

EXPORT int rdma_reject(struct rdma_cm_id *cid, const void *private_data, uint8_t len)
{
	struct sv_id *id = (struct sv_id *)cid;
	struct rdma_conn_param p = {.private_data = private_data, .private_data_len = len};
	struct cm_msg m;
	pthread_mutex_lock(&cm_lock);
	fill_msg(id, &m, M_REJ, &p);
	int r = id->cfd >= 0 ? send_msg(id->cfd, &m) : 0;
	id->st = S_DISCONNECTED;
	pthread_mutex_unlock(&cm_lock);
	return r;
}

/* The peer disconnected: its QP goes to ERR, as the kernel's CM does. The
 * application may already have destroyed that QP with ibv_destroy_qp (and
 * not rdma_destroy_qp: perftest does), so it is found by number and
 * touched only if it is still the one this id made. */
static void qp_to_err(struct sv_id *id)
{
	if (id->id.qp)
		simverbs_qp_error_if_live(id->qpn, id->id.qp);
}

EXPORT int rdma_disconnect(struct rdma_cm_id *cid)
{
	struct sv_id *id = (struct sv_id *)cid;
	pthread_mutex_lock(&cm_lock);
	if (id->st != S_ESTABLISHED && id->st != S_ACCEPTED && id->st != S_CONNECTING) {
		pthread_mutex_unlock(&cm_lock);
		errno = EINVAL;
		return -1;
	}
	qp_to_err(id);
	struct cm_msg m;
	fill_msg(id, &m, M_DREQ, NULL);
	if (id->cfd >= 0)
		send_msg(id->cfd, &m);
	id->st = S_DISCONNECTED;
	post_event(id, NULL, RDMA_CM_EVENT_DISCONNECTED, 0, NULL);
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

EXPORT int rdma_establish(struct rdma_cm_id *cid)
{
	struct sv_id *id = (struct sv_id *)cid;
	pthread_mutex_lock(&cm_lock);
	struct cm_msg m;
	fill_msg(id, &m, M_RTU, NULL);
	int r = id->cfd >= 0 ? send_msg(id->cfd, &m) : -1;
	if (!r)
		id->st = S_ESTABLISHED; /* the active side gets no event for this */
	pthread_mutex_unlock(&cm_lock);
	return r;
}

/* ---- the CM thread ------------------------------------------------------------------------ */
static bool alive(struct sv_id *id)
{
	for (struct sv_id *i = ids; i; i = i->next)
		if (i == id)
			return true;
	return false;
}

static void on_accept(struct sv_id *l)
{
	int fd = accept4(l->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	struct cm_msg m;
	if (recv(fd, &m, sizeof(m), MSG_WAITALL) != (ssize_t)sizeof(m) || m.magic != CM_MAGIC ||
	    m.type != M_REQ) {
		close(fd);
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct sv_id *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->id.channel = l->id.channel;
	c->id.context = l->id.context;
	c->id.ps = l->id.ps;
	c->id.qp_type = IBV_QPT_RC;
	c->lfd = -1;
	c->cfd = fd;
	c->my_psn = (uint32_t)random() & 0xffffff;
	c->peer = m;
	c->resp_res = m.init_depth;
	c->init_depth = m.resp_res;
	pthread_cond_init(&c->cond, NULL);
	socklen_t sl = sizeof(struct sockaddr_in);
	getsockname(fd, &c->id.route.addr.src_addr, &sl);
	sl = sizeof(struct sockaddr_in);
	getpeername(fd, &c->id.route.addr.dst_addr, &sl);
	if (open_port_for(c->id.route.addr.src_sin.sin_addr.s_addr, c)) {
		close(fd);
		pthread_cond_destroy(&c->cond);
		free(c);
		return;
	}
	memcpy(c->id.route.addr.addr.ibaddr.dgid.raw, m.gid, 16);
	c->id.route.num_paths = 1;
	c->st = S_REQ_RCVD;
	c->next = ids;
	ids = c;
	watch(c, fd);
	post_event(c, l, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &m);
}

static void on_msg(struct sv_id *id)
{
	struct cm_msg m;
	ssize_t n = recv(id->cfd, &m, sizeof(m), MSG_WAITALL);
	if (n != (ssize_t)sizeof(m) || m.magic != CM_MAGIC) {
		/* the peer's CM went away */
		epoll_ctl(cm_ep, EPOLL_CTL_DEL, id->cfd, NULL);
		close(id->cfd);
		id->cfd = -1;
		if (id->st == S_ESTABLISHED || id->st == S_ACCEPTED) {
			qp_to_err(id);
			post_event(id, NULL, RDMA_CM_EVENT_DISCONNECTED, 0, NULL);
		} else if (id->st == S_CONNECTING) {
			post_event(id, NULL, RDMA_CM_EVENT_UNREACHABLE, -ECONNRESET, NULL);
		}
		id->st = S_DISCONNECTED;
		return;
	}
	switch (m.type) {
	case M_REP: {
		if (id->st != S_CONNECTING)
			break;
		id->peer = m;
		int r = connect_qp(id);
		if (r) {
			post_event(id, NULL, RDMA_CM_EVENT_CONNECT_ERROR, -r, NULL);
			break;
		}
		if (!id->id.qp) {
			/* the application finishes with rdma_establish() */
			post_event(id, NULL, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &m);
			break;
		}
		struct cm_msg rtu;
		fill_msg(id, &rtu, M_RTU, NULL);
		send_msg(id->cfd, &rtu);
		id->st = S_ESTABLISHED;
		post_event(id, NULL, RDMA_CM_EVENT_ESTABLISHED, 0, &m);
		break;
	}
	case M_RTU:
		if (id->st == S_ACCEPTED) {
			id->st = S_ESTABLISHED;
			post_event(id, NULL, RDMA_CM_EVENT_ESTABLISHED, 0, NULL);
		}
		break;
	case M_REJ:
		if (id->st == S_CONNECTING) {
			id->st = S_DISCONNECTED;
			post_event(id, NULL, RDMA_CM_EVENT_REJECTED, 28, &m); /* consumer reject */
		}
		break;
	case M_DREQ: {
		struct cm_msg rep;
		fill_msg(id, &rep, M_DREP, NULL);
		send_msg(id->cfd, &rep);
		if (id->st == S_ESTABLISHED || id->st == S_ACCEPTED) {
			qp_to_err(id);
			id->st = S_DISCONNECTED;
			post_event(id, NULL, RDMA_CM_EVENT_DISCONNECTED, 0, NULL);
		}
		break;
	}
	default:
		break;
	}
}

static void *cm_loop(void *arg)
{
	struct epoll_event evs[16];
	int timeout = -1;
	for (;;) {
		int n = epoll_wait(cm_ep, evs, 16, timeout);
		if (n < 0 && errno != EINTR)
			return NULL;
		pthread_mutex_lock(&cm_lock);
		uint64_t now = mono_ns();
		timeout = -1;
		for (struct delayed_ev **pp = &delayed; *pp;) {
			struct delayed_ev *d = *pp;
			if (d->due <= now) {
				if (alive(d->id))
					post_event(d->id, NULL, d->type, 0, NULL);
				*pp = d->next;
				free(d);
			} else {
				int ms = (int)((d->due - now) / 1000000ull) + 1;
				if (timeout < 0 || ms < timeout)
					timeout = ms;
				pp = &d->next;
			}
		}
		pthread_mutex_unlock(&cm_lock);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &cm_bell) {
				uint64_t v;
				ssize_t r = read(cm_bell, &v, sizeof(v));
				(void)r;
				if (timeout < 0 || timeout > 1)
					timeout = 1;
				continue;
			}
			pthread_mutex_lock(&cm_lock);
			struct sv_id *id = evs[i].data.ptr;
			if (alive(id)) {
				if (id->st == S_LISTEN && id->lfd >= 0)
					on_accept(id);
				else if (id->cfd >= 0)
					on_msg(id);
			}
			pthread_mutex_unlock(&cm_lock);
		}
	}
}

/* ---- addresses and devices ------------------------------------------------------------------ */
EXPORT int rdma_getaddrinfo(const char *node, const char *service,
			    const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
	bool passive = hints && (hints->ai_flags & RAI_PASSIVE);
	if (hints && (hints->ai_flags & RAI_NUMERICHOST))
		h.ai_flags |= AI_NUMERICHOST;
	if (passive)
		h.ai_flags |= AI_PASSIVE;
	int r = getaddrinfo(node, service, &h, &ai);
	if (r)
		return r == EAI_SYSTEM ? -1 : (errno = EADDRNOTAVAIL, -1);
	struct rdma_addrinfo *ra = calloc(1, sizeof(*ra));
	struct sockaddr_in *sa = calloc(1, sizeof(*sa));
	if (!ra || !sa) {
		free(ra);
		free(sa);
		freeaddrinfo(ai);
		errno = ENOMEM;
		return -1;
	}
	memcpy(sa, ai->ai_addr, sizeof(*sa));
	freeaddrinfo(ai);
	ra->ai_flags = hints ? hints->ai_flags : 0;
	ra->ai_family = AF_INET;
	ra->ai_qp_type = IBV_QPT_RC;
	ra->ai_port_space = RDMA_PS_TCP;
	if (passive) {
		ra->ai_src_addr = (struct sockaddr *)sa;
		ra->ai_src_len = sizeof(*sa);
	} else {
		ra->ai_dst_addr = (struct sockaddr *)sa;
		ra->ai_dst_len = sizeof(*sa);
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			ra->ai_src_addr = malloc(hints->ai_src_len);
			if (ra->ai_src_addr) {
				memcpy(ra->ai_src_addr, hints->ai_src_addr, hints->ai_src_len);
				ra->ai_src_len = hints->ai_src_len;
			}
		}
	}
	*res = ra;
	return 0;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context **out = calloc((size_t)n + 1, sizeof(*out));
	if (!l || !out) {
		ibv_free_device_list(l);
		free(out);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&cm_lock);
	for (int d = 0; d < n && d < 8; d++) {
		if (!dev_ctx[d]) {
			dev_ctx[d] = ibv_open_device(l[d]);
			if (dev_ctx[d])
				dev_pd[d] = ibv_alloc_pd(dev_ctx[d]);
		}
		out[d] = dev_ctx[d];
	}
	pthread_mutex_unlock(&cm_lock);
	ibv_free_device_list(l);
	if (num_devices)
		*num_devices = n;
	return out;
}

EXPORT void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
			   size_t optlen)
{
	return 0; /* accepted and ignored */
}

EXPORT int rdma_migrate_id(struct rdma_cm_id *cid, struct rdma_event_channel *channel)
{
	if (!channel) {
		errno = ENOSYS;
		return -1;
	}
	pthread_mutex_lock(&cm_lock);
	cid->channel = channel;
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id->route.addr.src_sin.sin_port;
}

EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id->route.addr.dst_sin.sin_port;
}

EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	return 0;
}

/* rsockets are not modelled; rpoll is what rping's shared code imports */
EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}
