/* simverbs verbs objects: protection domains, memory regions, completion
 * queues and channels, shared receive queues and RC queue pairs with their
 * state machine; the data-path entry points reached through context->ops
 * (post_send, post_recv, post_srq_recv, poll_cq, req_notify_cq). Posting only
 * validates, queues and rings the engine's doorbell: data moves and
 * completions appear on the progress thread (engine.c), never inside a post. */
#include "sv.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>
#include <arpa/inet.h>

#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

pthread_mutex_t sv_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- protection domains --------------------------------------------------- */
SV_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	sv_die_if_dead(c);
	struct sv_pd *pd = sv_fail("ibv_alloc_pd") ? NULL : calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->pd.context = c;
	static uint32_t handles;
	pd->pd.handle = __atomic_add_fetch(&handles, 1, __ATOMIC_RELAXED);
	return &pd->pd;
}

SV_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

/* ---- memory regions --------------------------------------------------------
 * Keys: index into mr_tab << 8 | a per-registration byte, so a stale key of a
 * deregistered MR does not match a new one at the same index. */
static struct sv_mr **mr_tab;
static uint32_t mr_cap;
static uint8_t mr_gen;
static size_t pinned_total;

struct sv_devmem_range {
	uintptr_t start, end;
	struct sv_devmem_range *next;
};
static struct sv_devmem_range *devmem_ranges;

struct sv_mr *sv_mr_by_lkey(uint32_t key)
{
	uint32_t i = key >> 8;
	if (i >= mr_cap || !mr_tab[i] || mr_tab[i]->mr.lkey != key)
		return NULL;
	return mr_tab[i];
}

struct sv_mr *sv_mr_by_rkey(uint32_t key)
{
	return sv_mr_by_lkey(key);
}

/* Test hook (SIMVERBS_PRIVATE): registrations that overlap [addr, addr+len)
 * from now on count as device memory (the scatter-to-CQE hazard). */
SV_EXPORT int simverbs_mark_device_memory(void *addr, size_t len)
{
	struct sv_devmem_range *r = calloc(1, sizeof(*r));
	if (!r)
		return ENOMEM;
	r->start = (uintptr_t)addr;
	r->end = (uintptr_t)addr + len;
	pthread_mutex_lock(&sv_lock);
	r->next = devmem_ranges;
	devmem_ranges = r;
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

static bool is_devmem(uintptr_t a, size_t len)
{
	for (struct sv_devmem_range *r = devmem_ranges; r; r = r->next)
		if (a < r->end && a + len > r->start)
			return true;
	return false;
}

static bool has_cap_ipc_lock(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return false;
	char line[256];
	unsigned long long eff = 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "CapEff:", 7))
			eff = strtoull(line + 7, NULL, 16);
	fclose(f);
	return (eff >> 14) & 1; /* CAP_IPC_LOCK */
}

/* The CUDA driver's peer-memory entry point, when the process has loaded a
 * driver that offers one (simcuda): registrations of device memory then
 * reach its bytes through the driver's alias, as nvidia-peermem gives a real
 * HCA the GPU's pages. Without it device memory cannot be registered
 * usefully, as on a host without nvidia-peermem. */
typedef int (*peer_alias_fn)(const void *p, size_t n, void **alias);
static peer_alias_fn peer_alias_lookup(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	peer_alias_fn f = h ? (peer_alias_fn)dlsym(h, "simcuda_peer_alias") : NULL;
	if (h)
		dlclose(h); /* NOLOAD took a reference: the driver stays loaded */
	return f;
}

static int memlock_charge(size_t bytes)
{
	if (sv_cfg.memlock == SV_MEMLOCK_OFF)
		return 0;
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    pinned_total + bytes > rl.rlim_cur) {
		if (sv_cfg.memlock == SV_MEMLOCK_ALWAYS || !has_cap_ipc_lock())
			return ENOMEM;
	}
	pinned_total += bytes;
	return 0;
}

static struct ibv_mr *reg_mr_common(struct ibv_pd *pd, void *addr, size_t length,
				    uint64_t iova, unsigned access)
{
	sv_die_if_dead(pd->context);
	if (sv_fail("ibv_reg_mr")) {
		errno = ENOMEM;
		return NULL;
	}
	unsigned known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
			 IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |
			 IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING;
	if ((access & ~known) && !(access & IBV_ACCESS_OPTIONAL_RANGE)) {
		errno = EINVAL;
		return NULL;
	}
	/* remote write or atomic needs local write, as in the IB spec */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	if (!addr && length) {
		errno = EINVAL;
		return NULL;
	}
	peer_alias_fn peer_alias = peer_alias_lookup();
	struct sv_mr *mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t s = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
	uintptr_t e = ((uintptr_t)addr + length + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
	mr->pinned = e - s;
	mr->pg_start = s;
	mr->npages = (e - s) / (size_t)pg;
	mr->access = access;
	mr->iova = iova;
	mr->mr.context = pd->context;
	mr->mr.pd = pd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	pthread_mutex_lock(&sv_lock);
	int err = memlock_charge(mr->pinned);
	if (err) {
		pthread_mutex_unlock(&sv_lock);
		free(mr);
		errno = err;
		return NULL;
	}
	mr->devmem = is_devmem((uintptr_t)addr, length);
	if (!mr->devmem && peer_alias && length) {
		void *al = NULL;
		int pe = peer_alias(addr, length, &al);
		if (pe == 0 && !sv_cfg.peer_memory) {
			/* no peer-memory client: the kernel cannot pin device pages */
			pinned_total -= mr->pinned;
			pthread_mutex_unlock(&sv_lock);
			free(mr);
			errno = EFAULT;
			return NULL;
		}
		if (pe == 0) {
			mr->devmem = true;
			mr->alias = al;
			pinned_total -= mr->pinned; /* GPU memory: not the process's pages */
			mr->pinned = 0;
		} else if (pe != ENOENT) {
			pinned_total -= mr->pinned;
			pthread_mutex_unlock(&sv_lock);
			free(mr);
			errno = pe;
			return NULL;
		}
	}
	uint32_t idx = 1;
	while (idx < mr_cap && mr_tab[idx])
		idx++;
	if (idx >= mr_cap) {
		uint32_t ncap = mr_cap ? mr_cap * 2 : 64;
		struct sv_mr **n = realloc(mr_tab, ncap * sizeof(*n));
		if (!n) {
			pinned_total -= mr->pinned;
			pthread_mutex_unlock(&sv_lock);
			free(mr);
			errno = ENOMEM;
			return NULL;
		}
		memset(n + mr_cap, 0, (ncap - mr_cap) * sizeof(*n));
		mr_tab = n;
		idx = mr_cap ? mr_cap : 1;
		mr_cap = ncap;
	}
	mr->mr.lkey = mr->mr.rkey = idx << 8 | (++mr_gen);
	mr_tab[idx] = mr;
	err = mr->alias ? 0 : sv_fork_on_reg(mr); /* device memory: no pages to fork */
	if (err) {
		mr_tab[idx] = NULL;
		pinned_total -= mr->pinned;
		pthread_mutex_unlock(&sv_lock);
		free(mr);
		errno = err;
		return NULL;
	}
	pthread_mutex_unlock(&sv_lock);
	SV_TRACE("reg_mr %p+%zu key 0x%x access 0x%x%s", addr, length, mr->mr.lkey, access,
		 mr->devmem ? " devmem" : "");
	return &mr->mr;
}

SV_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr_common(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
					 uint64_t iova, int access)
{
	return reg_mr_common(pd, addr, length, iova, (unsigned)access);
}

SV_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
					  uint64_t iova, unsigned int access)
{
	return reg_mr_common(pd, addr, length, iova, access);
}

SV_EXPORT int ibv_dereg_mr(struct ibv_mr *m)
{
	struct sv_mr *mr = (struct sv_mr *)m;
	pthread_mutex_lock(&sv_lock);
	uint32_t idx = m->lkey >> 8;
	if (idx < mr_cap && mr_tab[idx] == mr)
		mr_tab[idx] = NULL;
	pinned_total -= mr->pinned;
	if (!mr->alias)
		sv_fork_on_dereg(mr);
	pthread_mutex_unlock(&sv_lock);
	free(mr->shadow);
	free(mr->detached);
	free(mr->private_pg);
	free(mr);
	return 0;
}

SV_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
			   size_t length, int access)
{
	return IBV_REREG_MR_ERR_INPUT;
}

/* "DMA": copies through process_vm_readv/writev on our own pid, so memory the
 * application unmapped gives EFAULT instead of a crash on the progress thread.
 * Pages detached by the fork hazard use the shadow (the HCA's old page). */
static int vm_copy(void *local, uint64_t remote, size_t len, bool to_remote)
{
	static int use_vm = 1;
	if (len == 0)
		return 0;
	if (use_vm) {
		struct iovec l = {local, len}, r = {(void *)(uintptr_t)remote, len};
		ssize_t n = to_remote ? process_vm_writev(getpid(), &l, 1, &r, 1, 0)
				      : process_vm_readv(getpid(), &l, 1, &r, 1, 0);
		if (n == (ssize_t)len)
			return 0;
		if (n < 0 && (errno == ENOSYS || errno == EPERM))
			use_vm = 0; /* seccomp or no ptrace rights: plain copies */
		else
			return -1;
	}
	if (to_remote)
		memcpy((void *)(uintptr_t)remote, local, len);
	else
		memcpy(local, (void *)(uintptr_t)remote, len);
	return 0;
}

static int dma(struct sv_mr *mr, uint64_t addr, void *buf, size_t len, bool to_mem)
{
	if (mr->alias) /* device memory, through the driver's alias */
		return vm_copy(buf, (uint64_t)(uintptr_t)mr->alias + (addr - (uintptr_t)mr->mr.addr),
			       len, to_mem);
	if (!mr->shadow)
		return vm_copy(buf, addr, len, to_mem);
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *b = buf;
	while (len) {
		size_t pi = (addr - mr->pg_start) / (size_t)pg;
		size_t in_pg = (size_t)pg - (addr - mr->pg_start) % (size_t)pg;
		size_t n = len < in_pg ? len : in_pg;
		if (pi < mr->npages && mr->detached[pi]) {
			uint8_t *sh = mr->shadow + (addr - mr->pg_start);
			if (to_mem)
				memcpy(sh, b, n);
			else
				memcpy(b, sh, n);
		} else {
			if (to_mem)
				sv_fork_wp(mr, pi, false);
			int r = vm_copy(b, addr, n, to_mem);
			if (to_mem)
				sv_fork_wp(mr, pi, true);
			if (r)
				return -1;
		}
		addr += n;
		b += n;
		len -= n;
	}
	return 0;
}

int sv_dma_write(struct sv_mr *mr, uint64_t addr, const void *src, size_t len)
{
	return dma(mr, addr, (void *)src, len, true);
}

int sv_dma_read(struct sv_mr *mr, uint64_t addr, void *dst, size_t len)
{
	return dma(mr, addr, dst, len, false);
}

/* ---- completion channels and CQs ------------------------------------------ */
SV_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	sv_die_if_dead(c);
	struct sv_channel *ch = sv_fail("ibv_create_comp_channel") ? NULL : calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->ch.context = c;
	ch->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (ch->ch.fd < 0) {
		int e = errno;
		free(ch);
		errno = e;
		return NULL;
	}
	ch->ch.refcnt = 0;
	return &ch->ch;
}

SV_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct sv_channel *ch = (struct sv_channel *)channel;
	pthread_mutex_lock(&sv_lock);
	if (channel->refcnt) {
		pthread_mutex_unlock(&sv_lock);
		return EBUSY;
	}
	struct sv_chan_ev *e = ch->head;
	while (e) {
		struct sv_chan_ev *n = e->next;
		free(e);
		e = n;
	}
	pthread_mutex_unlock(&sv_lock);
	close(channel->fd);
	free(ch);
	return 0;
}

static int sv_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc);
static int sv_req_notify_cq(struct ibv_cq *c, int solicited_only);
static int sv_post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int sv_post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int sv_post_srq_recv(struct ibv_srq *s, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

void sv_fill_ops(struct sv_context *ctx)
{
	struct ibv_context_ops *o = &ctx->vctx.context.ops;
	o->poll_cq = sv_poll_cq;
	o->req_notify_cq = sv_req_notify_cq;
	o->post_send = sv_post_send;
	o->post_recv = sv_post_recv;
	o->post_srq_recv = sv_post_srq_recv;
}

SV_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				       struct ibv_comp_channel *channel, int comp_vector)
{
	sv_die_if_dead(c);
	if (sv_fail("ibv_create_cq")) {
		errno = ENOMEM;
		return NULL;
	}
	struct sv_dev_cfg *d = &sv_cfg.dev[sv_ctx(c)->dev_index];
	if (cqe < 1 || cqe > d->max_cqe || comp_vector < 0 ||
	    comp_vector >= c->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	struct sv_cq *cq = calloc(1, sizeof(*cq));
	if (!cq || !(cq->ring = calloc((size_t)cqe, sizeof(*cq->ring)))) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	cq->cap = cqe;
	cq->cq.context = c;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.cqe = cqe;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	if (channel) {
		pthread_mutex_lock(&sv_lock);
		channel->refcnt++;
		pthread_mutex_unlock(&sv_lock);
	}
	return &cq->cq;
}

SV_EXPORT int ibv_resize_cq(struct ibv_cq *c, int cqe)
{
	struct sv_cq *cq = (struct sv_cq *)c;
	pthread_mutex_lock(&sv_lock);
	if (cqe < cq->count || cqe < 1) {
		pthread_mutex_unlock(&sv_lock);
		return EINVAL;
	}
	struct sv_cqe *n = calloc((size_t)cqe, sizeof(*n));
	if (!n) {
		pthread_mutex_unlock(&sv_lock);
		return ENOMEM;
	}
	for (int i = 0; i < cq->count; i++)
		n[i] = cq->ring[(cq->head + i) % cq->cap];
	free(cq->ring);
	cq->ring = n;
	cq->head = 0;
	cq->cap = cqe;
	c->cqe = cqe;
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

SV_EXPORT int ibv_destroy_cq(struct ibv_cq *c)
{
	struct sv_cq *cq = (struct sv_cq *)c;
	pthread_mutex_lock(&sv_lock);
	if (cq->users) {
		pthread_mutex_unlock(&sv_lock);
		return EBUSY;
	}
	cq->dead = true;
	sv_async_purge(sv_ctx(c->context), c);
	pthread_mutex_unlock(&sv_lock);
	/* every event handed out must be acknowledged first (this blocks, as the
	 * real library does) */
	pthread_mutex_lock(&c->mutex);
	while (c->comp_events_completed != cq->comp_reported ||
	       c->async_events_completed != cq->async_reported)
		pthread_cond_wait(&c->cond, &c->mutex);
	pthread_mutex_unlock(&c->mutex);
	pthread_mutex_lock(&sv_lock);
	if (c->channel) {
		struct sv_channel *ch = (struct sv_channel *)c->channel;
		for (struct sv_chan_ev *e = ch->head; e; e = e->next)
			if (e->cq == cq)
				e->cq = NULL; /* tombstone: the kernel drops them too */
		c->channel->refcnt--;
	}
	pthread_mutex_unlock(&sv_lock);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mutex);
	free(cq->ring);
	free(cq);
	return 0;
}

/* caller holds sv_lock */
void sv_cq_push(struct sv_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	if (cq->dead)
		return;
	if (cq->count == cq->cap) {
		if (!cq->overflowed) {
			cq->overflowed = true;
			sv_async_push(sv_ctx(cq->cq.context), IBV_EVENT_CQ_ERR, &cq->cq);
		}
		return;
	}
	struct sv_cqe *slot = &cq->ring[(cq->head + cq->count) % cq->cap];
	slot->wc = *wc;
	slot->scat_n = 0;
	cq->count++;
	if (cq->armed && (!cq->solicited_only || solicited || wc->status != IBV_WC_SUCCESS)) {
		cq->armed = false;
		struct sv_channel *ch = (struct sv_channel *)cq->cq.channel;
		if (!ch)
			return;
		struct sv_chan_ev *e = calloc(1, sizeof(*e));
		if (!e)
			return;
		e->cq = cq;
		if (ch->tail)
			ch->tail->next = e;
		else
			ch->head = e;
		ch->tail = e;
		uint64_t one = 1;
		ssize_t r = write(ch->ch.fd, &one, sizeof(one));
		(void)r;
	}
}

void sv_cq_push_scatter(struct sv_cq *cq, const struct ibv_wc *wc, uint64_t dst,
			const uint8_t *data, uint8_t n)
{
	int before = cq->count;
	sv_cq_push(cq, wc, false);
	if (cq->count == before || n > sizeof(cq->ring[0].scat))
		return; /* overflowed: the entry is lost */
	struct sv_cqe *e = &cq->ring[(cq->head + cq->count - 1) % cq->cap];
	e->scat_dst = dst;
	e->scat_n = n;
	memcpy(e->scat, data, n);
}

static int sv_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc)
{
	struct sv_cq *cq = (struct sv_cq *)c;
	if (n < 0)
		return -1;
	pthread_mutex_lock(&sv_lock);
	int k = 0;
	while (k < n && cq->count) {
		struct sv_cqe *e = &cq->ring[cq->head];
		wc[k++] = e->wc;
		if (e->scat_n) /* as mlx5: the CPU copies the payload out of the CQE */
			memcpy((void *)(uintptr_t)e->scat_dst, e->scat, e->scat_n);
		cq->head = (cq->head + 1) % cq->cap;
		cq->count--;
	}
	pthread_mutex_unlock(&sv_lock);
	if (!k)
		sched_yield(); /* a polling application must leave the CPU to the "HCA" thread */
	return k;
}

static int sv_req_notify_cq(struct ibv_cq *c, int solicited_only)
{
	struct sv_cq *cq = (struct sv_cq *)c;
	if (!c->channel)
		return EINVAL;
	if (sv_fail("ibv_req_notify_cq"))
		return ENOMEM;
	pthread_mutex_lock(&sv_lock);
	/* arming twice keeps the wider condition */
	if (!cq->armed)
		cq->solicited_only = solicited_only != 0;
	else if (!solicited_only)
		cq->solicited_only = false;
	cq->armed = true;
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

SV_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq_out,
			       void **cq_context)
{
	struct sv_channel *ch = (struct sv_channel *)channel;
	for (;;) {
		uint64_t v;
		/* a blocking read: a cancellation point, EAGAIN when O_NONBLOCK */
		if (read(channel->fd, &v, sizeof(v)) != sizeof(v))
			return -1;
		pthread_mutex_lock(&sv_lock);
		struct sv_chan_ev *e = ch->head;
		if (e) {
			ch->head = e->next;
			if (!ch->head)
				ch->tail = NULL;
		}
		struct sv_cq *cq = e ? e->cq : NULL;
		if (cq)
			cq->comp_reported++;
		pthread_mutex_unlock(&sv_lock);
		free(e);
		if (!cq)
			continue; /* event of a destroyed CQ */
		*cq_out = &cq->cq;
		*cq_context = cq->cq.cq_context;
		return 0;
	}
}

SV_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- shared receive queues ------------------------------------------------ */
SV_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	sv_die_if_dead(pd->context);
	if (sv_fail("ibv_create_srq")) {
		errno = ENOMEM;
		return NULL;
	}
	struct sv_dev_cfg *d = &sv_cfg.dev[sv_ctx(pd->context)->dev_index];
	if (d->max_srq <= 0) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->attr.max_wr < 1 || attr->attr.max_wr > (uint32_t)d->max_srq_wr ||
	    attr->attr.max_sge > (uint32_t)d->max_srq_sge) {
		errno = EINVAL;
		return NULL;
	}
	if (d->round_queues) /* as real providers do: the caller reads back what it got */
		while (attr->attr.max_wr & (attr->attr.max_wr - 1))
			attr->attr.max_wr += attr->attr.max_wr & -attr->attr.max_wr;
	struct sv_srq *s = calloc(1, sizeof(*s));
	if (!s || !(s->ring = calloc(attr->attr.max_wr, sizeof(*s->ring)))) {
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	s->cap = (int)attr->attr.max_wr;
	s->max_sge = attr->attr.max_sge ? (int)attr->attr.max_sge : 1;
	s->srq.context = pd->context;
	s->srq.srq_context = attr->srq_context;
	s->srq.pd = pd;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

SV_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct sv_srq *s = (struct sv_srq *)srq;
	int err = 0;
	pthread_mutex_lock(&sv_lock);
	if (mask & IBV_SRQ_MAX_WR) {
		if (attr->max_wr < (uint32_t)s->count || attr->max_wr < 1) {
			err = EINVAL;
			goto out;
		}
		struct sv_rwqe *n = calloc(attr->max_wr, sizeof(*n));
		if (!n) {
			err = ENOMEM;
			goto out;
		}
		for (int i = 0; i < s->count; i++)
			n[i] = s->ring[(s->head + i) % s->cap];
		free(s->ring);
		s->ring = n;
		s->head = 0;
		s->cap = (int)attr->max_wr;
	}
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > (uint32_t)s->cap) {
			err = EINVAL;
			goto out;
		}
		s->limit = attr->srq_limit;
	}
out:
	pthread_mutex_unlock(&sv_lock);
	return err;
}

SV_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct sv_srq *s = (struct sv_srq *)srq;
	pthread_mutex_lock(&sv_lock);
	attr->max_wr = (uint32_t)s->cap;
	attr->max_sge = (uint32_t)s->max_sge;
	attr->srq_limit = s->limit;
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

SV_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct sv_srq *s = (struct sv_srq *)srq;
	pthread_mutex_lock(&sv_lock);
	if (s->users) {
		pthread_mutex_unlock(&sv_lock);
		return EBUSY;
	}
	s->dead = true;
	sv_async_purge(sv_ctx(srq->context), srq);
	pthread_mutex_unlock(&sv_lock);
	pthread_mutex_lock(&srq->mutex);
	while (srq->events_completed != s->async_reported)
		pthread_cond_wait(&srq->cond, &srq->mutex);
	pthread_mutex_unlock(&srq->mutex);
	pthread_cond_destroy(&srq->cond);
	pthread_mutex_destroy(&srq->mutex);
	free(s->ring);
	free(s);
	return 0;
}

static int copy_rwqe(struct sv_rwqe *w, const struct ibv_recv_wr *wr, int max_sge)
{
	if (wr->num_sge < 0 || wr->num_sge > max_sge || wr->num_sge > SV_MAX_SGE)
		return EINVAL;
	w->wr_id = wr->wr_id;
	w->num_sge = wr->num_sge;
	for (int i = 0; i < wr->num_sge; i++)
		w->sge[i] = wr->sg_list[i];
	return 0;
}

/* caller holds sv_lock: a receive offered to an SRQ fails
 * (srq_post_fail_every, srq_post_fail_after) */
static bool srq_post_faults(void)
{
	static uint64_t offered;
	offered++;
	return (sv_cfg.srq_post_fail_every && offered % sv_cfg.srq_post_fail_every == 0) ||
	       (sv_cfg.srq_post_fail_after && offered > sv_cfg.srq_post_fail_after);
}

static int sv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			    struct ibv_recv_wr **bad)
{
	struct sv_srq *s = (struct sv_srq *)srq;
	int err = 0;
	if (wr && sv_fail("ibv_post_srq_recv")) { /* an empty list posts nothing */
		*bad = wr;
		return ENOMEM;
	}
	pthread_mutex_lock(&sv_lock);
	for (; wr; wr = wr->next) {
		if (s->count == s->cap || srq_post_faults()) {
			err = ENOMEM;
			break;
		}
		if ((err = copy_rwqe(&s->ring[(s->head + s->count) % s->cap], wr, s->max_sge)))
			break;
		s->count++;
	}
	if (err && bad)
		*bad = wr;
	pthread_mutex_unlock(&sv_lock);
	sv_engine_kick(); /* parked messages may now find a buffer */
	return err;
}

/* caller holds sv_lock: takes the next receive WQE for a QP (RQ or SRQ) */
bool sv_rq_take(struct sv_qp *qp, struct sv_rwqe *out)
{
	if (qp->qp.srq) {
		struct sv_srq *s = (struct sv_srq *)qp->qp.srq;
		if (!s->count)
			return false;
		*out = s->ring[s->head];
		s->head = (s->head + 1) % s->cap;
		s->count--;
		if (s->limit && (uint32_t)s->count < s->limit) {
			s->limit = 0; /* fires once, then disarms */
			sv_async_push(sv_ctx(s->srq.context), IBV_EVENT_SRQ_LIMIT_REACHED, &s->srq);
		}
		return true;
	}
	if (!qp->rq_count)
		return false;
	*out = qp->rq[qp->rq_head];
	qp->rq_head = (qp->rq_head + 1) % qp->rq_cap;
	qp->rq_count--;
	return true;
}

/* ---- queue pairs ------------------------------------------------------------ */
SV_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	sv_die_if_dead(pd->context);
	if (sv_fail("ibv_create_qp")) {
		errno = ENOMEM;
		return NULL;
	}
	struct sv_dev_cfg *d = &sv_cfg.dev[sv_ctx(pd->context)->dev_index];
	if (a->qp_type != IBV_QPT_RC) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!a->send_cq || !a->recv_cq || a->cap.max_send_wr > (uint32_t)d->max_qp_wr ||
	    a->cap.max_recv_wr > (uint32_t)d->max_qp_wr ||
	    a->cap.max_send_sge > (uint32_t)d->max_sge ||
	    a->cap.max_recv_sge > (uint32_t)d->max_sge ||
	    a->cap.max_inline_data > (uint32_t)d->max_inline) {
		errno = EINVAL;
		return NULL;
	}
	struct sv_qp *qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->sq_cap = a->cap.max_send_wr ? (int)a->cap.max_send_wr : 1;
	qp->rq_cap = a->srq ? 0 : (a->cap.max_recv_wr ? (int)a->cap.max_recv_wr : 1);
	qp->sq = calloc((size_t)qp->sq_cap, sizeof(*qp->sq));
	qp->rq = qp->rq_cap ? calloc((size_t)qp->rq_cap, sizeof(*qp->rq)) : NULL;
	if (!qp->sq || (qp->rq_cap && !qp->rq)) {
		free(qp->sq);
		free(qp->rq);
		free(qp);
		errno = ENOMEM;
		return NULL;
	}
	qp->cap.max_send_wr = (uint32_t)qp->sq_cap;
	qp->cap.max_recv_wr = a->srq ? 0 : (uint32_t)qp->rq_cap;
	qp->cap.max_send_sge = a->cap.max_send_sge ? a->cap.max_send_sge : 1;
	qp->cap.max_recv_sge = a->srq ? 0 : (a->cap.max_recv_sge ? a->cap.max_recv_sge : 1);
	qp->cap.max_inline_data = (uint32_t)d->max_inline;
	a->cap = qp->cap;
	qp->sq_sig_all = a->sq_sig_all != 0;
	qp->st = IBV_QPS_RESET;
	qp->qp.context = pd->context;
	qp->qp.qp_context = a->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = a->send_cq;
	qp->qp.recv_cq = a->recv_cq;
	qp->qp.srq = a->srq;
	qp->qp.state = IBV_QPS_RESET;
	qp->qp.qp_type = IBV_QPT_RC;
	pthread_mutex_init(&qp->qp.mutex, NULL);
	pthread_cond_init(&qp->qp.cond, NULL);
	pthread_mutex_lock(&sv_lock);
	int err = sv_engine_add_qp(qp);
	if (err) {
		pthread_mutex_unlock(&sv_lock);
		free(qp->sq);
		free(qp->rq);
		free(qp);
		errno = err;
		return NULL;
	}
	((struct sv_cq *)a->send_cq)->users++;
	((struct sv_cq *)a->recv_cq)->users++;
	if (a->srq)
		((struct sv_srq *)a->srq)->users++;
	pthread_mutex_unlock(&sv_lock);
	SV_TRACE("create_qp qpn 0x%x", qp->qp.qp_num);
	return &qp->qp;
}

static void free_swqe(struct sv_swqe *w)
{
	free(w->inl);
	w->inl = NULL;
}

SV_EXPORT int ibv_destroy_qp(struct ibv_qp *q)
{
	struct sv_qp *qp = (struct sv_qp *)q;
	pthread_mutex_lock(&sv_lock);
	sv_engine_del_qp(qp);
	sv_async_purge(sv_ctx(q->context), q);
	qp->dead = true;
	((struct sv_cq *)q->send_cq)->users--;
	((struct sv_cq *)q->recv_cq)->users--;
	if (q->srq)
		((struct sv_srq *)q->srq)->users--;
	for (int i = 0; i < qp->sq_count; i++)
		free_swqe(&qp->sq[(qp->sq_head + i) % qp->sq_cap]);
	pthread_mutex_unlock(&sv_lock);
	pthread_mutex_lock(&q->mutex);
	while (q->events_completed != qp->async_reported)
		pthread_cond_wait(&q->cond, &q->mutex);
	pthread_mutex_unlock(&q->mutex);
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->mutex);
	free(qp->sq);
	free(qp->rq);
	free(qp);
	return 0;
}

/* Required and optional attribute masks per RC transition (IB spec 11.2.5). */
static bool mask_ok(enum ibv_qp_state cur, enum ibv_qp_state next, int mask)
{
	int m = mask & ~IBV_QP_STATE;
	int req = 0, opt = 0;
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
		return (m & ~IBV_QP_CUR_STATE) == 0;
	switch (cur) {
	case IBV_QPS_RESET:
		if (next != IBV_QPS_INIT)
			return false;
		req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		break;
	case IBV_QPS_INIT:
		if (next == IBV_QPS_INIT) {
			opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		} else if (next == IBV_QPS_RTR) {
			req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
			opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
		} else
			return false;
		break;
	case IBV_QPS_RTR:
		if (next != IBV_QPS_RTS)
			return false;
		req = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		      IBV_QP_MAX_QP_RD_ATOMIC;
		opt = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
		      IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
		break;
	case IBV_QPS_RTS:
		if (next != IBV_QPS_RTS)
			return false;
		opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
		      IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER;
		break;
	default:
		return false;
	}
	return (m & req) == req && (m & ~(req | opt)) == 0;
}

static void qp_reset(struct sv_qp *qp)
{
	for (int i = 0; i < qp->sq_count; i++)
		free_swqe(&qp->sq[(qp->sq_head + i) % qp->sq_cap]);
	qp->sq_head = qp->sq_count = qp->sq_tx = 0;
	qp->tx_blocked = false;
	qp->rq_head = qp->rq_count = 0;
	qp->in_active = qp->in_failed = qp->in_has_wqe = false;
	qp->last_wqe_sent = false;
	sv_engine_drop_late(qp);
}

/* caller holds sv_lock: QP enters ERR and every outstanding WQE is flushed */
void sv_qp_to_error(struct sv_qp *qp, bool raise_fatal)
{
	if (qp->st == IBV_QPS_ERR || qp->st == IBV_QPS_RESET)
		return;
	qp->st = IBV_QPS_ERR;
	struct sv_context *ctx = sv_ctx(qp->qp.context);
	if (raise_fatal)
		sv_async_push(ctx, IBV_EVENT_QP_FATAL, &qp->qp);
	struct ibv_wc wc;
	for (int i = 0; i < qp->sq_count; i++) {
		struct sv_swqe *w = &qp->sq[(qp->sq_head + i) % qp->sq_cap];
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = w->wr_id;
		wc.status = IBV_WC_WR_FLUSH_ERR;
		wc.qp_num = qp->qp.qp_num;
		if (sv_cfg.err_cqe_garbage) {
			wc.opcode = (enum ibv_wc_opcode)0xa5;
			wc.byte_len = 0xa5a5a5a5u;
			wc.src_qp = 0xa5a5a5u;
			wc.wc_flags = 0xa5;
		}
		sv_cq_push((struct sv_cq *)qp->qp.send_cq, &wc, false);
		free_swqe(w);
	}
	qp->sq_head = qp->sq_count = qp->sq_tx = 0;
	qp->tx_blocked = false;
	for (int i = 0; i < qp->rq_count; i++) {
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = qp->rq[(qp->rq_head + i) % qp->rq_cap].wr_id;
		wc.status = IBV_WC_WR_FLUSH_ERR;
		wc.qp_num = qp->qp.qp_num;
		if (sv_cfg.err_cqe_garbage) {
			wc.opcode = (enum ibv_wc_opcode)0x5a;
			wc.byte_len = 0x5a5a5a5au;
		}
		sv_cq_push((struct sv_cq *)qp->qp.recv_cq, &wc, false);
	}
	qp->rq_head = qp->rq_count = 0;
	if (qp->in_has_wqe) {
		memset(&wc, 0, sizeof(wc));
		wc.wr_id = qp->in_wqe.wr_id;
		wc.status = IBV_WC_WR_FLUSH_ERR;
		wc.qp_num = qp->qp.qp_num;
		sv_recv_complete(qp, &wc, false);
		qp->in_has_wqe = false;
	}
	qp->in_active = false;
	sv_engine_drop_parked(qp);
	if (qp->qp.srq && !qp->last_wqe_sent && !sv_cfg.no_last_wqe) {
		qp->last_wqe_sent = true;
		sv_last_wqe_reached(qp);
	}
}

SV_EXPORT int ibv_modify_qp(struct ibv_qp *q, struct ibv_qp_attr *attr, int mask)
{
	struct sv_qp *qp = (struct sv_qp *)q;
	sv_die_if_dead(q->context);
	if (sv_fail("ibv_modify_qp"))
		return ENOMEM;
	struct sv_dev_cfg *d = &sv_cfg.dev[sv_ctx(q->context)->dev_index];
	int err = 0;
	pthread_mutex_lock(&sv_lock);
	enum ibv_qp_state cur = qp->st;
	if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur &&
	    !(cur == IBV_QPS_ERR || attr->cur_qp_state == IBV_QPS_SQE)) {
		err = EINVAL;
		goto out;
	}
	enum ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
	if (!mask_ok(cur, next, mask)) {
		err = EINVAL;
		goto out;
	}
	uint8_t port = (mask & IBV_QP_PORT) ? attr->port_num : qp->port;
	if ((mask & IBV_QP_PORT) && (port < 1 || port > d->nports)) {
		err = EINVAL;
		goto out;
	}
	if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) {
		err = EINVAL;
		goto out;
	}
	if (mask & IBV_QP_PATH_MTU) {
		if (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > d->port[port - 1].active_mtu) {
			err = EINVAL;
			goto out;
		}
	}
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > d->max_qp_rd_atom) {
		err = EINVAL;
		goto out;
	}
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > d->max_qp_rd_atom) {
		err = EINVAL;
		goto out;
	}
	if (mask & IBV_QP_AV) {
		if ((err = sv_resolve_peer(qp, &attr->ah_attr, port)))
			goto out;
	}
	/* all checks passed: apply */
	if (mask & IBV_QP_PORT)
		qp->port = port;
	if (mask & IBV_QP_ACCESS_FLAGS)
		qp->access = attr->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		qp->pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PATH_MTU)
		qp->path_mtu = attr->path_mtu;
	if (mask & IBV_QP_AV)
		qp->ah = attr->ah_attr;
	if (mask & IBV_QP_DEST_QPN) {
		qp->dest_qpn = attr->dest_qp_num & 0xffffff;
		qp->peer_port = (uint16_t)(qp->dest_qpn >> 8);
	}
	if (mask & IBV_QP_RQ_PSN) {
		qp->rq_psn = attr->rq_psn & 0xffffff;
		qp->exp_psn = qp->rq_psn;
	}
	if (mask & IBV_QP_SQ_PSN) {
		qp->sq_psn = attr->sq_psn & 0xffffff;
		qp->next_psn = qp->sq_psn;
	}
	if (mask & IBV_QP_TIMEOUT)
		qp->timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		qp->retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		qp->rnr_retry = attr->rnr_retry;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		qp->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (next == IBV_QPS_RESET)
		qp_reset(qp);
	if (next == IBV_QPS_ERR)
		sv_qp_to_error(qp, false);
	qp->st = next;
	q->state = next;
	if (next == IBV_QPS_RTS)
		sv_engine_qp_ready(qp);
out:
	pthread_mutex_unlock(&sv_lock);
	if (!err)
		sv_engine_kick();
	return err;
}

SV_EXPORT void simverbs_qp_error_if_live(uint32_t qpn, const struct ibv_qp *expect)
{
	pthread_mutex_lock(&sv_lock);
	struct sv_qp *qp = sv_engine_qp_by_num(qpn);
	bool live = qp && &qp->qp == expect && !qp->dead;
	if (live) { /* what ibv_modify_qp does for IBV_QPS_ERR */
		sv_qp_to_error(qp, false);
		qp->st = IBV_QPS_ERR;
		qp->qp.state = IBV_QPS_ERR;
	}
	pthread_mutex_unlock(&sv_lock);
	if (live)
		sv_engine_kick();
}

SV_EXPORT int ibv_query_qp(struct ibv_qp *q, struct ibv_qp_attr *attr, int mask,
			   struct ibv_qp_init_attr *init)
{
	struct sv_qp *qp = (struct sv_qp *)q;
	pthread_mutex_lock(&sv_lock);
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = qp->st;
	attr->cur_qp_state = qp->st;
	attr->path_mtu = qp->path_mtu;
	attr->qp_access_flags = qp->access;
	attr->pkey_index = qp->pkey_index;
	attr->port_num = qp->port;
	attr->ah_attr = qp->ah;
	attr->dest_qp_num = qp->dest_qpn;
	attr->rq_psn = qp->rq_psn;
	attr->sq_psn = qp->sq_psn;
	attr->timeout = qp->timeout;
	attr->retry_cnt = qp->retry_cnt;
	attr->rnr_retry = qp->rnr_retry;
	attr->min_rnr_timer = qp->min_rnr_timer;
	attr->max_rd_atomic = qp->max_rd_atomic;
	attr->max_dest_rd_atomic = qp->max_dest_rd_atomic;
	attr->cap = qp->cap;
	attr->sq_draining = 0;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = q->qp_context;
		init->send_cq = q->send_cq;
		init->recv_cq = q->recv_cq;
		init->srq = q->srq;
		init->cap = qp->cap;
		init->qp_type = q->qp_type;
		init->sq_sig_all = qp->sq_sig_all;
	}
	q->state = qp->st;
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

SV_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	return 0; /* the engine places data in order, but promises nothing more */
}

static void flush_one_send(struct sv_qp *qp, const struct ibv_send_wr *wr)
{
	struct ibv_wc wc;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = wr->wr_id;
	wc.status = IBV_WC_WR_FLUSH_ERR;
	wc.qp_num = qp->qp.qp_num;
	sv_cq_push((struct sv_cq *)qp->qp.send_cq, &wc, false);
}

static int sv_post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sv_qp *qp = (struct sv_qp *)q;
	int err = 0;
	if (wr && sv_fail("ibv_post_send")) { /* an empty list posts nothing */
		*bad = wr;
		return ENOMEM;
	}
	pthread_mutex_lock(&sv_lock);
	for (; wr; wr = wr->next) {
		if (qp->st == IBV_QPS_ERR) {
			flush_one_send(qp, wr);
			continue;
		}
		if (qp->st != IBV_QPS_RTS) {
			err = EINVAL;
			break;
		}
		if (wr->num_sge < 0 || wr->num_sge > (int)qp->cap.max_send_sge) {
			err = EINVAL;
			break;
		}
		switch (wr->opcode) {
		case IBV_WR_SEND:
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			break;
		default:
			err = EINVAL;
			goto done;
		}
		if (qp->sq_count == qp->sq_cap) {
			err = ENOMEM;
			break;
		}
		uint64_t len = 0;
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if ((wr->send_flags & IBV_SEND_INLINE) &&
		    (wr->opcode == IBV_WR_RDMA_READ || len > qp->cap.max_inline_data)) {
			err = EINVAL;
			break;
		}
		struct sv_swqe *w = &qp->sq[(qp->sq_head + qp->sq_count) % qp->sq_cap];
		memset(w, 0, sizeof(*w));
		if (wr->send_flags & IBV_SEND_INLINE) {
			/* inline data is copied now; the buffer may be reused at once */
			w->inl = malloc(len ? len : 1);
			if (!w->inl) {
				err = ENOMEM;
				break;
			}
			uint64_t off = 0;
			for (int i = 0; i < wr->num_sge; i++) {
				memcpy(w->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr,
				       wr->sg_list[i].length);
				off += wr->sg_list[i].length;
			}
		}
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->flags = wr->send_flags;
		w->imm = wr->imm_data;
		w->raddr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		w->num_sge = wr->num_sge;
		for (int i = 0; i < wr->num_sge; i++)
			w->sge[i] = wr->sg_list[i];
		w->len = len;
		w->psn = qp->next_psn;
		qp->next_psn = (qp->next_psn + 1) & 0xffffff;
		w->st = SV_W_QUEUED;
		w->signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
		qp->sq_count++;
	}
done:
	if (err && bad)
		*bad = wr;
	sv_engine_qp_ready(qp);
	pthread_mutex_unlock(&sv_lock);
	sv_engine_kick();
	return err;
}

static int sv_post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sv_qp *qp = (struct sv_qp *)q;
	int err = 0;
	if (wr && sv_fail("ibv_post_recv")) { /* an empty list posts nothing */
		*bad = wr;
		return ENOMEM;
	}
	pthread_mutex_lock(&sv_lock);
	for (; wr; wr = wr->next) {
		if (q->srq || qp->st == IBV_QPS_RESET) {
			err = EINVAL;
			break;
		}
		if (qp->st == IBV_QPS_ERR) {
			struct ibv_wc wc;
			memset(&wc, 0, sizeof(wc));
			wc.wr_id = wr->wr_id;
			wc.status = IBV_WC_WR_FLUSH_ERR;
			wc.qp_num = q->qp_num;
			sv_cq_push((struct sv_cq *)q->recv_cq, &wc, false);
			continue;
		}
		if (qp->rq_count == qp->rq_cap) {
			err = ENOMEM;
			break;
		}
		if ((err = copy_rwqe(&qp->rq[(qp->rq_head + qp->rq_count) % qp->rq_cap], wr,
				     (int)qp->cap.max_recv_sge)))
			break;
		qp->rq_count++;
	}
	if (err && bad)
		*bad = wr;
	bool parked = qp->parked_head != NULL;
	pthread_mutex_unlock(&sv_lock);
	if (parked)
		sv_engine_kick();
	return err;
}

/* ---- verbs we do not model: clean failures with the right prototypes ------ */
SV_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SV_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	return EOPNOTSUPP;
}

SV_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
					       struct ibv_grh *grh, uint8_t port_num)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SV_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
				  struct ibv_wc *wc, struct ibv_grh *grh,
				  struct ibv_ah_attr *ah_attr)
{
	errno = EOPNOTSUPP;
	return -1;
}

SV_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return EOPNOTSUPP;
}

SV_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return EOPNOTSUPP;
}

SV_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	return NULL; /* the extended post API is not modelled */
}

SV_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					   uint64_t iova, int fd, int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SV_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SV_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SV_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
}

SV_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SV_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
}

SV_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

SV_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
}

SV_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

SV_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

SV_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context,
					  struct ibv_ah_attr *attr, uint8_t eth_mac[6],
					  uint16_t *vid)
{
	return EOPNOTSUPP;
}
