/* simverbs fork model: ibv_fork_init(), ibv_is_fork_initialized() and the
 * copy-on-write hazard of kernels before 5.13.
 *
 * fork = modern (default): fork is safe, ibv_is_fork_initialized() says
 *   IBV_FORK_UNNEEDED and nothing else happens.
 * fork = legacy | strict: ibv_fork_init() (or RDMAV_FORK_SAFE / IBV_FORK_SAFE)
 *   marks registered ranges MADV_DONTFORK as rdma-core does, so the child
 *   really faults on them. Without it, fork() detaches the parent's private
 *   registered pages from the "device": the HCA keeps the old physical page
 *   (our shadow copy) while the process continues on a new one, so incoming
 *   RDMA data lands where the parent never looks, and outgoing data is the
 *   stale pre-fork content.
 *   - legacy: a page detaches at the parent's first write after fork()
 *     (userfaultfd write-protect, user-mode faults only); where userfaultfd is
 *     unavailable it falls back to strict.
 *   - strict: every private registered page detaches at fork().
 * Caller of the sv_fork_* hooks holds sv_lock. */
#include "sv.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* declared in <infiniband/driver.h>, which Debian does not install */
SV_EXPORT int ibv_dontfork_range(void *base, size_t size);
SV_EXPORT int ibv_dofork_range(void *base, size_t size);

static bool fork_enabled;   /* ibv_fork_init() done */
static bool any_registered; /* too late for ibv_fork_init() */

/* every MR with private pages, for the parent's fork hook */
struct mr_ref {
	struct sv_mr *mr;
	struct mr_ref *next;
};
static struct mr_ref *mrs;

static void env_fork_safe(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	if (sv_cfg.fork_mode != SV_FORK_MODERN &&
	    (getenv("RDMAV_FORK_SAFE") || getenv("IBV_FORK_SAFE")))
		fork_enabled = true;
}

SV_EXPORT int ibv_fork_init(void)
{
	sv_config_load();
	if (sv_cfg.fork_mode == SV_FORK_MODERN)
		return 0; /* the kernel copes: nothing to do */
	pthread_mutex_lock(&sv_lock);
	env_fork_safe();
	int r = 0;
	if (!fork_enabled && any_registered)
		r = EINVAL; /* as rdma-core: must be called before the first registration */
	else
		fork_enabled = true;
	pthread_mutex_unlock(&sv_lock);
	return r;
}

SV_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	sv_config_load();
	if (sv_cfg.fork_mode == SV_FORK_MODERN)
		return IBV_FORK_UNNEEDED;
	pthread_mutex_lock(&sv_lock);
	env_fork_safe();
	bool e = fork_enabled;
	pthread_mutex_unlock(&sv_lock);
	return e ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

static void page_range(void *base, size_t size, uintptr_t *s, size_t *len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)base & ~(uintptr_t)(pg - 1);
	uintptr_t e = ((uintptr_t)base + size + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
	*s = a;
	*len = e - a;
}

SV_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	if (!fork_enabled)
		return 0;
	uintptr_t s;
	size_t len;
	page_range(base, size, &s, &len);
	return madvise((void *)s, len, MADV_DONTFORK) ? errno : 0;
}

SV_EXPORT int ibv_dofork_range(void *base, size_t size)
{
	if (!fork_enabled)
		return 0;
	uintptr_t s;
	size_t len;
	page_range(base, size, &s, &len);
	return madvise((void *)s, len, MADV_DOFORK) ? errno : 0;
}

bool sv_fork_registered_any(void)
{
	return any_registered;
}

int sv_fork_on_reg(struct sv_mr *mr)
{
	any_registered = true;
	if (sv_cfg.fork_mode == SV_FORK_MODERN)
		return 0;
	env_fork_safe();
	if (fork_enabled) {
		if (mr->npages && madvise((void *)mr->pg_start, mr->npages * (size_t)sysconf(_SC_PAGESIZE),
					  MADV_DONTFORK))
			return errno;
		return 0;
	}
	struct mr_ref *r = calloc(1, sizeof(*r));
	if (!r)
		return ENOMEM;
	r->mr = mr;
	r->next = mrs;
	mrs = r;
	return 0;
}

void sv_fork_on_dereg(struct sv_mr *mr)
{
	if (sv_cfg.fork_mode == SV_FORK_MODERN)
		return;
	if (fork_enabled && mr->npages)
		madvise((void *)mr->pg_start, mr->npages * (size_t)sysconf(_SC_PAGESIZE), MADV_DOFORK);
	for (struct mr_ref **pp = &mrs; *pp; pp = &(*pp)->next)
		if ((*pp)->mr == mr) {
			struct mr_ref *r = *pp;
			*pp = r->next;
			free(r);
			break;
		}
}

/* marks which pages of the MR are MAP_PRIVATE (shared ones never copy on write) */
static void mark_private(struct sv_mr *mr, long pg)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return;
	char line[512];
	uintptr_t end_mr = mr->pg_start + mr->npages * (size_t)pg;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3 || perms[3] != 'p')
			continue;
		if (b <= mr->pg_start || a >= end_mr)
			continue;
		uintptr_t s = a > mr->pg_start ? a : mr->pg_start;
		uintptr_t e = b < end_mr ? b : end_mr;
		for (uintptr_t x = s; x < e; x += (uintptr_t)pg)
			mr->private_pg[(x - mr->pg_start) / (uintptr_t)pg] = 1;
	}
	fclose(f);
}

/* ---- userfaultfd: detach on the parent's first write ----------------------- */
static int uffd = -1;
static bool uffd_failed;
static pthread_t uffd_thr;

static struct sv_mr *mr_of_addr(uintptr_t a, long pg)
{
	for (struct mr_ref *r = mrs; r; r = r->next) {
		struct sv_mr *mr = r->mr;
		if (a >= mr->pg_start && a < mr->pg_start + mr->npages * (size_t)pg)
			return mr;
	}
	return NULL;
}

static void detach_page(struct sv_mr *mr, size_t pi, long pg)
{
	if (mr->detached[pi])
		return;
	/* the copy is the HCA's, not a CPU access of the application's page (and
	 * the writer is parked in its fault): read it the way the engine's DMA does */
	struct iovec l = {mr->shadow + pi * (size_t)pg, (size_t)pg};
	struct iovec r = {(void *)(mr->pg_start + pi * (size_t)pg), (size_t)pg};
	if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != (ssize_t)pg)
		memcpy(l.iov_base, r.iov_base, (size_t)pg);
	mr->detached[pi] = 1;
}

static void *uffd_loop(void *arg)
{
	long pg = sysconf(_SC_PAGESIZE);
	for (;;) {
		struct uffd_msg msg;
		ssize_t n = read(uffd, &msg, sizeof(msg));
		if (n != sizeof(msg)) {
			if (n < 0 && errno == EINTR)
				continue;
			return NULL;
		}
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		uintptr_t a = (uintptr_t)msg.arg.pagefault.address & ~(uintptr_t)(pg - 1);
		pthread_mutex_lock(&sv_lock);
		struct sv_mr *mr = mr_of_addr(a, pg);
		/* the application writes first: it gets a new page, the HCA keeps the old */
		for (struct mr_ref *r = mrs; r; r = r->next) {
			struct sv_mr *m = r->mr;
			if (m->shadow && a >= m->pg_start && a < m->pg_start + m->npages * (size_t)pg)
				detach_page(m, (a - m->pg_start) / (size_t)pg, pg);
		}
		(void)mr;
		struct uffdio_writeprotect wp = {.range = {.start = a, .len = (uint64_t)pg}, .mode = 0};
		ioctl(uffd, UFFDIO_WRITEPROTECT, &wp); /* clears WP and wakes the writer */
		pthread_mutex_unlock(&sv_lock);
	}
}

static bool uffd_setup(void)
{
	if (uffd >= 0)
		return true;
	if (uffd_failed)
		return false;
#ifdef UFFD_USER_MODE_ONLY
	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
#endif
	if (uffd < 0)
		uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (uffd < 0)
		goto fail;
	struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_PAGEFAULT_FLAG_WP};
	if (ioctl(uffd, UFFDIO_API, &api) || !(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
		goto fail;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(&uffd_thr, NULL, uffd_loop, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e)
		goto fail;
	pthread_setname_np(uffd_thr, "simverbs-cow");
	pthread_detach(uffd_thr);
	return true;
fail:
	if (uffd >= 0)
		close(uffd);
	uffd = -1;
	uffd_failed = true;
	SV_TRACE("userfaultfd unavailable (%s): fork hazard falls back to strict", strerror(errno));
	return false;
}

/* Arms write-protect on a page range. Registration of the same range is
 * idempotent for the kernel only once: registered ranges are tracked by the MR. */
static bool uffd_arm(struct sv_mr *mr, long pg)
{
	struct uffdio_register reg = {.range = {.start = mr->pg_start,
						.len = mr->npages * (uint64_t)pg},
				      .mode = UFFDIO_REGISTER_MODE_WP};
	if (ioctl(uffd, UFFDIO_REGISTER, &reg) && errno != EBUSY) {
		SV_TRACE("fork: UFFDIO_REGISTER: %s", strerror(errno));
		return false;
	}
	for (size_t i = 0; i < mr->npages; i++) {
		if (!mr->private_pg[i] || mr->detached[i])
			continue;
		struct uffdio_writeprotect wp = {
			.range = {.start = mr->pg_start + i * (uint64_t)pg, .len = (uint64_t)pg},
			.mode = UFFDIO_WRITEPROTECT_MODE_WP};
		if (ioctl(uffd, UFFDIO_WRITEPROTECT, &wp)) {
			SV_TRACE("fork: UFFDIO_WRITEPROTECT: %s", strerror(errno));
			return false;
		}
	}
	return true;
}

/* The engine writes a page that is still shared: DMA never breaks
 * copy-on-write, so the protection is lifted around the copy and restored. */
void sv_fork_wp(struct sv_mr *mr, size_t pi, bool on)
{
	if (uffd < 0 || !mr->private_pg || !mr->private_pg[pi] || mr->detached[pi])
		return;
	long pg = sysconf(_SC_PAGESIZE);
	struct uffdio_writeprotect wp = {
		.range = {.start = mr->pg_start + pi * (uint64_t)pg, .len = (uint64_t)pg},
		.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
	ioctl(uffd, UFFDIO_WRITEPROTECT, &wp);
}

void sv_fork_parent_hook(void)
{
	if (sv_cfg.fork_mode == SV_FORK_MODERN || fork_enabled)
		return;
	long pg = sysconf(_SC_PAGESIZE);
	bool lazy = sv_cfg.fork_mode == SV_FORK_LEGACY && uffd_setup();
	for (struct mr_ref *r = mrs; r; r = r->next) {
		struct sv_mr *mr = r->mr;
		if (!mr->npages)
			continue;
		if (!mr->shadow) {
			mr->shadow = aligned_alloc((size_t)pg, mr->npages * (size_t)pg);
			mr->detached = calloc(mr->npages, 1);
			mr->private_pg = calloc(mr->npages, 1);
			if (!mr->shadow || !mr->detached || !mr->private_pg) {
				free(mr->shadow);
				free(mr->detached);
				free(mr->private_pg);
				mr->shadow = NULL;
				mr->detached = mr->private_pg = NULL;
				continue;
			}
		}
		mark_private(mr, pg);
		if (lazy && uffd_arm(mr, pg))
			continue;
		for (size_t i = 0; i < mr->npages; i++)
			if (mr->private_pg[i])
				detach_page(mr, i, pg);
	}
}
