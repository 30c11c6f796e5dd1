/*
 * simcuda - a user-space stand-in for the CUDA driver library (libcuda.so.1),
 * for testing GPU code paths on machines without a GPU. It implements the
 * driver API subset in ref/src/platform/cuda_abi.h: devices, primary
 * contexts, device and pinned host memory, copies, streams, events, host
 * functions and IPC memory handles. See docs/simcuda.md.
 *
 * Device memory is a memfd per device mapped twice: the addresses handed out
 * as CUdeviceptr lie in a PROT_NONE mapping, so host code that dereferences
 * device memory faults as it would on a GPU; the copy engine reaches the
 * same pages through a private read-write alias. IPC handles name the
 * owner's memfd through /proc/<pid>/fd, so they open between processes of
 * one pid namespace and fail, as on a real system, where the owner's pid
 * means another process or none (separate pid or ipc namespaces), or the
 * device is not visible.
 *
 * Streams: one copy-engine thread runs every queued operation in stream
 * order; the legacy default stream (NULL) orders with every blocking
 * stream; between streams that nothing orders, the operation queued last
 * starts first, and copies on different streams are in flight at once for
 * a time that grows with their size (copy_delay_us, copy_us_per_mib). So
 * code that reads device memory without waiting for the stream that writes
 * it sees stale bytes.
 *
 * Configuration: the file named by SIMCUDA_CONFIG, lines of
 *   mode ok|no_device|stub|old_driver
 *   device name=N uuid=32HEX pci=DDDD:BB:DD.F mem=SIZE[K|M|G]
 *   copy_delay_us N      every copy is in flight N us ...
 *   copy_us_per_mib M    ... plus M us per MiB it moves
 * Without a file: two devices of 256 MiB. SIMCUDA_MODE,
 * SIMCUDA_COPY_DELAY_US and SIMCUDA_COPY_US_PER_MIB override the file; CUDA_VISIBLE_DEVICES selects and
 * orders devices by index or by UUID prefix ("GPU-5a1c").
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "platform/cuda_abi.h"

#define SC_EXPORT __attribute__((visibility("default")))
#define SC_MAX_DEV 16
#define SC_PAGE 4096u
#define SC_IPC_MAGIC 0x3143504943536373ull /* "scSCIPC1" */

enum sc_mode { SC_OK, SC_NO_DEVICE, SC_STUB, SC_OLD_DRIVER };

typedef struct sc_block {
	uint64_t off, size;
	bool used;
	uint64_t id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation, while used */
	struct sc_block *next;
} sc_block;

struct CUctx_st {
	int dev;
	int refs;
};

typedef struct sc_dev {
	char name[64];
	unsigned char uuid[16];
	char pci[32];
	uint64_t mem;
	int fd;
	uint64_t nonce; /* non-zero once the memory has a name in /dev/shm */
	char *base;  /* PROT_NONE: what CUdeviceptr values point into */
	char *alias; /* read-write view of the same pages */
	sc_block *blocks;
	struct CUctx_st ctx;
} sc_dev;

/* a region of device memory opened from an IPC handle */
typedef struct sc_ipcmap {
	int dev;
	char *base, *alias;
	uint64_t size;
	uint64_t buffer_id;
	struct sc_ipcmap *next;
} sc_ipcmap;

typedef struct sc_hostmem {
	void *p;
	size_t size;
	struct sc_hostmem *next;
} sc_hostmem;

/* the counters of an interprocess event, in a page every process that
 * opened it maps */
typedef struct sc_ev_shared {
	uint64_t recorded, done; /* __atomic */
} sc_ev_shared;

struct CUevent_st {
	uint64_t recorded, done;
	unsigned flags;
	unsigned refs;   /* the handle + each queued operation naming it */
	sc_ev_shared *sh; /* CU_EVENT_INTERPROCESS: the counters live here */
	int fd;
	uint64_t nonce;  /* non-zero once named in /dev/shm */
};

static uint64_t ev_recorded(const struct CUevent_st *e)
{
	return e->sh ? __atomic_load_n(&e->sh->recorded, __ATOMIC_ACQUIRE) : e->recorded;
}

static uint64_t ev_done(const struct CUevent_st *e)
{
	return e->sh ? __atomic_load_n(&e->sh->done, __ATOMIC_ACQUIRE) : e->done;
}

static uint64_t ev_record_next(struct CUevent_st *e)
{
	return e->sh ? __atomic_add_fetch(&e->sh->recorded, 1, __ATOMIC_ACQ_REL) : ++e->recorded;
}

static void ev_set_done(struct CUevent_st *e, uint64_t gen)
{
	if (!e->sh) {
		if (e->done < gen)
			e->done = gen;
		return;
	}
	uint64_t cur = __atomic_load_n(&e->sh->done, __ATOMIC_ACQUIRE);
	while (cur < gen &&
	       !__atomic_compare_exchange_n(&e->sh->done, &cur, gen, false, __ATOMIC_ACQ_REL,
	                                    __ATOMIC_ACQUIRE))
		;
}

/* events made and not yet gone (simcuda_events_live); under g.mu */
static unsigned long sc_events_live;

static void ev_free(struct CUevent_st *e)
{
	sc_events_live--; /* lock held */
	if (e->sh) {
		munmap(e->sh, sizeof(*e->sh));
		close(e->fd);
	}
	free(e);
}

enum sc_op_kind { OP_COPY, OP_HOSTFN, OP_RECORD, OP_WAIT, OP_MARK };

typedef struct sc_op {
	enum sc_op_kind kind;
	uint64_t seq;
	char *dst;
	const char *src;
	size_t n;
	CUhostFn fn;
	void *data;
	struct CUevent_st *ev;
	uint64_t gen;
	bool *done;
	bool started;  /* a copy in flight (or a host function running) */
	uint64_t ends; /* a copy in flight: when its bytes move */
	struct sc_op *next;
} sc_op;

struct CUstream_st {
	unsigned flags;
	sc_op *head, *tail;
	struct CUstream_st *next;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	bool configured, initialized;
	enum sc_mode mode;
	unsigned copy_delay_us, copy_us_per_mib;
	int ndev;        /* visible */
	sc_dev dev[SC_MAX_DEV];
	sc_ipcmap *ipc;
	sc_hostmem *host;
	struct CUstream_st null_stream; /* always first in streams */
	struct CUstream_st *streams;
	uint64_t seq;
	uint64_t next_buffer_id;
	bool worker_started;
	pthread_t worker;
} g = { .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static __thread struct CUctx_st *tls_ctx;

/* Every entry point, declared from the ABI list: a definition below whose
 * signature differs from cuda_abi.h does not compile. */
#define SC_PROTO(name, ret, args) SC_EXPORT ret name args;
TW_CUDA_FUNCS(SC_PROTO)
#undef SC_PROTO
SC_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);

__attribute__((format(printf, 1, 2))) static void sc_log(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "simcuda[%d]: %s\n", (int)getpid(), buf);
}

/* ---- configuration ---------------------------------------------------------------- */

static uint64_t sc_size(const char *v)
{
	char *end;
	uint64_t n = strtoull(v, &end, 0);
	switch (toupper((unsigned char)*end)) {
	case 'K': return n << 10;
	case 'M': return n << 20;
	case 'G': return n << 30;
	default: return n;
	}
}

static void sc_dev_default(sc_dev *d, int i)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "simcuda GPU %d", i);
	for (int k = 0; k < 16; k++)
		d->uuid[k] = (unsigned char)(0x5c + 17 * k + 29 * i);
	snprintf(d->pci, sizeof(d->pci), "0000:%02x:00.0", i == 0 ? 0x3b : 0x3b + 0x4b * i);
	d->mem = (uint64_t)256 << 20;
	d->fd = -1;
}

static void sc_parse_device(sc_dev *d, char *args, int i)
{
	sc_dev_default(d, i);
	for (char *tok = strtok(args, " \t"); tok; tok = strtok(NULL, " \t")) {
		char *eq = strchr(tok, '=');
		if (!eq)
			continue;
		*eq++ = 0;
		if (strcmp(tok, "name") == 0)
			snprintf(d->name, sizeof(d->name), "%s", eq);
		else if (strcmp(tok, "pci") == 0)
			snprintf(d->pci, sizeof(d->pci), "%s", eq);
		else if (strcmp(tok, "mem") == 0)
			d->mem = sc_size(eq);
		else if (strcmp(tok, "uuid") == 0) {
			for (int k = 0; k < 16 && eq[0] && eq[1]; k++, eq += 2) {
				if (*eq == '-')
					eq++;
				unsigned v;
				if (sscanf(eq, "%2x", &v) == 1)
					d->uuid[k] = (unsigned char)v;
			}
		}
	}
	d->mem = (d->mem + SC_PAGE - 1) & ~(uint64_t)(SC_PAGE - 1);
}

static enum sc_mode sc_mode_of(const char *v)
{
	if (strcmp(v, "no_device") == 0)
		return SC_NO_DEVICE;
	if (strcmp(v, "stub") == 0)
		return SC_STUB;
	if (strcmp(v, "old_driver") == 0)
		return SC_OLD_DRIVER;
	if (strcmp(v, "ok") != 0)
		sc_log("unknown mode \"%s\", using ok", v);
	return SC_OK;
}

static void sc_uuid_str(const unsigned char *u, char *buf)
{
	sprintf(buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
	        u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
	        u[13], u[14], u[15]);
}

/* CUDA_VISIBLE_DEVICES: indices or UUID prefixes; the first bad entry ends
 * the list, as the real driver does. */
static int sc_select_visible(sc_dev *all, int n)
{
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	if (!v) {
		memcpy(g.dev, all, sizeof(sc_dev) * (size_t)n);
		return n;
	}
	int k = 0;
	char list[512];
	snprintf(list, sizeof(list), "%s", v);
	for (char *tok = strtok(list, ","); tok && k < SC_MAX_DEV; tok = strtok(NULL, ",")) {
		while (isspace((unsigned char)*tok))
			tok++;
		int found = -1;
		if (isdigit((unsigned char)*tok)) {
			int idx = atoi(tok);
			if (idx >= 0 && idx < n)
				found = idx;
		} else {
			for (int i = 0; i < n; i++) {
				char u[48];
				sc_uuid_str(all[i].uuid, u);
				if (*tok && strncasecmp(u, tok, strlen(tok)) == 0)
					found = i;
			}
		}
		if (found < 0)
			break;
		g.dev[k++] = all[found];
	}
	return k;
}

static void sc_configure(void)
{
	if (g.configured)
		return;
	g.configured = true;
	static sc_dev all[SC_MAX_DEV];
	int n = 0;
	const char *path = getenv("SIMCUDA_CONFIG");
	FILE *f = path && *path ? fopen(path, "r") : NULL;
	if (path && *path && !f)
		sc_log("cannot open SIMCUDA_CONFIG %s; using the defaults", path);
	if (f) {
		char line[512];
		while (fgets(line, sizeof(line), f)) {
			char *s = line;
			while (isspace((unsigned char)*s))
				s++;
			s[strcspn(s, "#\r\n")] = 0;
			if (strncmp(s, "device", 6) == 0 && n < SC_MAX_DEV) {
				sc_parse_device(&all[n], s + 6, n);
				n++;
			} else if (strncmp(s, "mode", 4) == 0) {
				char m[32] = "";
				sscanf(s + 4, "%31s", m);
				g.mode = sc_mode_of(m);
			} else if (strncmp(s, "copy_delay_us", 13) == 0) {
				g.copy_delay_us = (unsigned)strtoul(s + 13, NULL, 10);
			} else if (strncmp(s, "copy_us_per_mib", 15) == 0) {
				g.copy_us_per_mib = (unsigned)strtoul(s + 15, NULL, 10);
			} else if (*s) {
				/* a typo must not pass for a host without a GPU */
				sc_log("SIMCUDA_CONFIG %s: line '%.80s' is none of device, mode, "
				       "copy_delay_us, copy_us_per_mib; ignored", path, s);
			}
		}
		fclose(f);
	} else {
		n = 2;
		sc_dev_default(&all[0], 0);
		sc_dev_default(&all[1], 1);
	}
	const char *m = getenv("SIMCUDA_MODE");
	if (m && *m)
		g.mode = sc_mode_of(m);
	const char *dl = getenv("SIMCUDA_COPY_DELAY_US");
	if (dl && *dl)
		g.copy_delay_us = (unsigned)strtoul(dl, NULL, 10);
	const char *pm = getenv("SIMCUDA_COPY_US_PER_MIB");
	if (pm && *pm)
		g.copy_us_per_mib = (unsigned)strtoul(pm, NULL, 10);
	g.ndev = sc_select_visible(all, n);
	for (int i = 0; i < g.ndev; i++) {
		g.dev[i].fd = -1;
		g.dev[i].ctx.dev = i;
	}
	g.null_stream.next = NULL;
	g.streams = &g.null_stream;
}

/* ---- address lookup ------------------------------------------------------------- */

/* The device memory holding [p, p+n): its alias address in *out, the device
 * in *dev. false if p is not device memory at all; *bad if it is but the
 * range leaves its allocation. Lock held. */
static uint64_t sc_lookup_id; /* the buffer id of the last sc_lookup hit (lock held) */

static bool sc_lookup(uint64_t p, size_t n, char **out, int *dev, bool *bad, uint64_t *abase,
                      uint64_t *asize)
{
	*bad = false;
	sc_lookup_id = 0;
	for (int i = 0; i < g.ndev; i++) {
		sc_dev *d = &g.dev[i];
		if (!d->base || p < (uint64_t)(uintptr_t)d->base ||
		    p >= (uint64_t)(uintptr_t)d->base + d->mem)
			continue;
		uint64_t off = p - (uint64_t)(uintptr_t)d->base;
		for (sc_block *b = d->blocks; b; b = b->next) {
			if (!b->used || off < b->off || off >= b->off + b->size)
				continue;
			if (n > b->off + b->size - off)
				*bad = true;
			*out = d->alias + off;
			*dev = i;
			sc_lookup_id = b->id;
			if (abase)
				*abase = (uint64_t)(uintptr_t)d->base + b->off;
			if (asize)
				*asize = b->size;
			return true;
		}
		*bad = true; /* inside the device's range, but not allocated */
		*dev = i;
		return true;
	}
	for (sc_ipcmap *m = g.ipc; m; m = m->next) {
		uint64_t b = (uint64_t)(uintptr_t)m->base;
		if (p < b || p >= b + m->size)
			continue;
		if (n > b + m->size - p)
			*bad = true;
		*out = m->alias + (p - b);
		*dev = m->dev;
		sc_lookup_id = m->buffer_id;
		if (abase)
			*abase = b;
		if (asize)
			*asize = m->size;
		return true;
	}
	return false;
}

static bool sc_host_pinned(const void *p)
{
	for (sc_hostmem *h = g.host; h; h = h->next)
		if ((const char *)p >= (char *)h->p && (const char *)p < (char *)h->p + h->size)
			return true;
	return false;
}

/* ---- the copy engine ------------------------------------------------------------ */

static bool sc_stream_blocking(const struct CUstream_st *s)
{
	return !(s->flags & TW_CU_STREAM_NON_BLOCKING);
}

/* Lock held: may the head op of s run now? */
static bool sc_runnable(struct CUstream_st *s)
{
	sc_op *op = s->head;
	if (!op)
		return false;
	if (op->kind == OP_WAIT && ev_done(op->ev) < op->gen)
		return false;
	for (struct CUstream_st *o = g.streams; o; o = o->next) {
		if (o == s || !o->head || o->head->seq > op->seq)
			continue;
		/* legacy default stream: orders with every blocking stream */
		if (s == &g.null_stream && sc_stream_blocking(o))
			return false;
		if (o == &g.null_stream && sc_stream_blocking(s))
			return false;
	}
	return true;
}

static uint64_t sc_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* How long a copy of n bytes is in flight. */
static uint64_t sc_copy_us(size_t n)
{
	return g.copy_delay_us + (uint64_t)((n * (uint64_t)g.copy_us_per_mib) >> 20);
}

/* Lock held: the head op of s is over. */
static void sc_complete(struct CUstream_st *s)
{
	sc_op *op = s->head;
	if (op->kind == OP_RECORD)
		ev_set_done(op->ev, op->gen);
	if (op->done)
		*op->done = true;
	if (op->ev && --op->ev->refs == 0)
		ev_free(op->ev);
	s->head = op->next;
	if (!s->head)
		s->tail = NULL;
	free(op);
	pthread_cond_broadcast(&g.cond);
}

/* The copy engine. A copy is in flight for sc_copy_us(n) and its bytes move
 * when it ends; copies on different streams overlap, so a short copy queued
 * after a long one on another stream ends first. Host functions run here,
 * without the lock. */
static void *sc_worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g.mu);
	for (;;) {
		uint64_t now = sc_now_us(), next_end = UINT64_MAX;
		bool progress = false;
		/* copies whose time is up */
		for (struct CUstream_st *o = g.streams; o; o = o->next) {
			sc_op *op = o->head;
			if (!op || !op->started)
				continue;
			if (op->ends <= now) {
				memmove(op->dst, op->src, op->n);
				sc_complete(o);
				progress = true;
				break;
			}
			if (op->ends < next_end)
				next_end = op->ends;
		}
		if (progress)
			continue;
		/* Of the operations that may start, the one queued last goes first:
		 * independent streams overtake each other, so work that needed an
		 * event wait or a stream it did not ask for sees stale bytes
		 * instead of passing by luck. */
		struct CUstream_st *s = NULL;
		for (struct CUstream_st *o = g.streams; o; o = o->next) {
			if (o->head && !o->head->started && sc_runnable(o) &&
			    (!s || o->head->seq > s->head->seq))
				s = o;
			/* another process records interprocess events: look again soon */
			if (o->head && o->head->kind == OP_WAIT && o->head->ev->sh &&
			    ev_done(o->head->ev) < o->head->gen && now + 100 < next_end)
				next_end = now + 100;
		}
		if (s) {
			sc_op *op = s->head;
			if (op->kind == OP_COPY) {
				op->started = true;
				op->ends = now + sc_copy_us(op->n);
			} else if (op->kind == OP_HOSTFN) {
				op->started = true;
				pthread_mutex_unlock(&g.mu);
				op->fn(op->data);
				pthread_mutex_lock(&g.mu);
				sc_complete(s);
			} else {
				sc_complete(s);
			}
			continue;
		}
		if (next_end == UINT64_MAX) {
			pthread_cond_wait(&g.cond, &g.mu);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			uint64_t wait = next_end - now;
			ts.tv_sec += (time_t)(wait / 1000000u);
			ts.tv_nsec += (long)(wait % 1000000u) * 1000;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&g.cond, &g.mu, &ts);
		}
	}
	return NULL;
}

/* Lock held. */
static CUresult sc_enqueue(struct CUstream_st *s, sc_op *tmpl)
{
	sc_op *op = malloc(sizeof(*op));
	if (!op)
		return TW_CUDA_ERROR_OUT_OF_MEMORY;
	*op = *tmpl;
	if (op->ev)
		op->ev->refs++;
	op->seq = ++g.seq;
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	if (!g.worker_started) {
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&g.worker, &a, sc_worker, NULL) == 0)
			g.worker_started = true;
		pthread_attr_destroy(&a);
		if (!g.worker_started)
			return TW_CUDA_ERROR_UNKNOWN;
	}
	pthread_cond_broadcast(&g.cond);
	return TW_CUDA_SUCCESS;
}

/* Lock held: queues a marker on s and waits until everything before it ran. */
static CUresult sc_drain(struct CUstream_st *s)
{
	bool done = false;
	sc_op m = { .kind = OP_MARK, .done = &done };
	CUresult r = sc_enqueue(s, &m);
	while (r == TW_CUDA_SUCCESS && !done)
		pthread_cond_wait(&g.cond, &g.mu);
	return r;
}

static bool sc_stream_known(struct CUstream_st *s)
{
	for (struct CUstream_st *o = g.streams; o; o = o->next)
		if (o == s)
			return true;
	return false;
}

/* ---- entry points ------------------------------------------------------------------ */

/* simcuda_fail(): the Nth call of one entry point fails (lock held). */
static struct {
	char fn[64];
	unsigned long at, calls, fired;
} sc_fail;

static bool sc_fail_now(const char *fn)
{
	if (!sc_fail.at || strcmp(fn, sc_fail.fn) != 0 || ++sc_fail.calls != sc_fail.at)
		return false;
	sc_fail.fired++;
	return true;
}

/* Every entry point starts with this: stub mode, not initialised, a
 * failure asked for (simcuda_fail; fn: the entry point's name). */
#define SC_ENTER() SC_ENTER_AS(__func__)
#define SC_ENTER_AS(fn)                                        \
	do {                                                       \
		pthread_mutex_lock(&g.mu);                             \
		sc_configure();                                        \
		if (g.mode == SC_STUB) {                               \
			pthread_mutex_unlock(&g.mu);                       \
			return TW_CUDA_ERROR_STUB_LIBRARY;                 \
		}                                                      \
		if (!g.initialized) {                                  \
			pthread_mutex_unlock(&g.mu);                       \
			return TW_CUDA_ERROR_NOT_INITIALIZED;              \
		}                                                      \
		if (sc_fail_now(fn)) {                                 \
			pthread_mutex_unlock(&g.mu);                       \
			return TW_CUDA_ERROR_OUT_OF_MEMORY;                \
		}                                                      \
	} while (0)
#define SC_RETURN(r)                \
	do {                            \
		CUresult r_ = (r);          \
		pthread_mutex_unlock(&g.mu); \
		return r_;                  \
	} while (0)

/* The real driver's cuInit fails with CUDA_ERROR_OPERATING_SYSTEM in a pid
 * namespace whose /proc belongs to another one (unshare --pid without
 * --mount-proc): /proc/self is not this pid there. */
static bool sc_proc_matches(void)
{
	char buf[32];
	ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);
	if (n <= 0)
		return true;
	buf[n] = 0;
	return atol(buf) == (long)getpid();
}

/* Not driver entry points: from now on, the Nth call of `fn` (an entry
 * point's name, "cuMemAlloc_v2") fails with CUDA_ERROR_OUT_OF_MEMORY, as a
 * device out of memory would (fn NULL: none); and how many such failures
 * came. A test arms it around the library's calls only, so that its own
 * are not counted (ref.cuda_*.sweep.*). */
SC_EXPORT void simcuda_fail(const char *fn, unsigned long n);
SC_EXPORT void simcuda_fail(const char *fn, unsigned long n)
{
	pthread_mutex_lock(&g.mu);
	snprintf(sc_fail.fn, sizeof(sc_fail.fn), "%s", fn ? fn : "");
	sc_fail.at = fn ? n : 0;
	sc_fail.calls = 0;
	pthread_mutex_unlock(&g.mu);
}

/* Not a driver entry point: how many events exist, made by cuEventCreate
 * and not yet gone (a destroyed event goes once the records and waits
 * queued on it have run), so a test can tell that a library does not keep
 * events it no longer needs. */
SC_EXPORT unsigned long simcuda_events_live(void);
SC_EXPORT unsigned long simcuda_events_live(void)
{
	pthread_mutex_lock(&g.mu);
	unsigned long n = sc_events_live;
	pthread_mutex_unlock(&g.mu);
	return n;
}

SC_EXPORT unsigned long simcuda_fails_fired(void);
SC_EXPORT unsigned long simcuda_fails_fired(void)
{
	pthread_mutex_lock(&g.mu);
	unsigned long n = sc_fail.fired;
	pthread_mutex_unlock(&g.mu);
	return n;
}

/* Not a driver entry point: tells a program (the conformance runner's
 * capability "simcuda") that this libcuda.so.1 is simcuda, whose modes
 * (SIMCUDA_MODE) it may then use. */
SC_EXPORT const char *simcuda_version(void);
SC_EXPORT const char *simcuda_version(void)
{
	return "simcuda 1";
}

/* Not a driver entry point: the peer-memory client's view (what
 * nvidia-peermem gives an RDMA NIC on a real host). When [p, p+n) lies in
 * one allocation of device memory, *alias is where the same bytes can be
 * read and written by the CPU (until that memory is freed) and 0 is
 * returned; EFAULT when p is device memory but the range leaves its
 * allocation; ENOENT when p is not device memory. simverbs calls it on
 * ibv_reg_mr through dlopen("libcuda.so.1", RTLD_NOLOAD). */
SC_EXPORT int simcuda_peer_alias(const void *p, size_t n, void **alias);
SC_EXPORT int simcuda_peer_alias(const void *p, size_t n, void **alias)
{
	pthread_mutex_lock(&g.mu);
	char *a = NULL;
	int dev = 0;
	bool bad = false;
	int rc = ENOENT;
	if (sc_lookup((uint64_t)(uintptr_t)p, n ? n : 1, &a, &dev, &bad, NULL, NULL))
		rc = bad ? EFAULT : 0;
	if (rc == 0)
		*alias = a;
	pthread_mutex_unlock(&g.mu);
	return rc;
}

SC_EXPORT CUresult cuInit(unsigned int flags)
{
	pthread_mutex_lock(&g.mu);
	sc_configure();
	CUresult r = TW_CUDA_SUCCESS;
	if (flags != 0)
		r = TW_CUDA_ERROR_INVALID_VALUE;
	else if (g.mode == SC_STUB)
		r = TW_CUDA_ERROR_STUB_LIBRARY;
	else if (g.mode == SC_OLD_DRIVER)
		r = TW_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
	else if (g.mode == SC_NO_DEVICE || g.ndev == 0)
		r = TW_CUDA_ERROR_NO_DEVICE;
	else if (!sc_proc_matches())
		r = TW_CUDA_ERROR_OPERATING_SYSTEM;
	else
		g.initialized = true;
	pthread_mutex_unlock(&g.mu);
	return r;
}

SC_EXPORT CUresult cuDriverGetVersion(int *version)
{
	if (!version)
		return TW_CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.mu);
	sc_configure();
	*version = g.mode == SC_OLD_DRIVER ? 9000 : 13000;
	bool stub = g.mode == SC_STUB;
	pthread_mutex_unlock(&g.mu);
	return stub ? TW_CUDA_ERROR_STUB_LIBRARY : TW_CUDA_SUCCESS;
}

static const struct {
	CUresult r;
	const char *name, *text;
} sc_errors[] = {
	{ TW_CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ TW_CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ TW_CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ TW_CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ TW_CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
	  "CUDA driver is a stub library" },
	{ TW_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	  "system has unsupported display driver / cuda driver combination" },
	{ TW_CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ TW_CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ TW_CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ TW_CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed" },
	{ TW_CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ TW_CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS" },
	{ TW_CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ TW_CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ TW_CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ TW_CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

static CUresult sc_error_lookup(CUresult e, const char **str, bool name)
{
	if (!str)
		return TW_CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(sc_errors) / sizeof(sc_errors[0]); i++)
		if (sc_errors[i].r == e) {
			*str = name ? sc_errors[i].name : sc_errors[i].text;
			return TW_CUDA_SUCCESS;
		}
	*str = NULL;
	return TW_CUDA_ERROR_INVALID_VALUE;
}

SC_EXPORT CUresult cuGetErrorName(CUresult e, const char **str)
{
	return sc_error_lookup(e, str, true);
}

SC_EXPORT CUresult cuGetErrorString(CUresult e, const char **str)
{
	return sc_error_lookup(e, str, false);
}

SC_EXPORT CUresult cuDeviceGetCount(int *count)
{
	SC_ENTER();
	if (!count)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	*count = g.ndev;
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	SC_ENTER();
	if (!device)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	if (ordinal < 0 || ordinal >= g.ndev)
		SC_RETURN(TW_CUDA_ERROR_INVALID_DEVICE);
	*device = ordinal;
	SC_RETURN(TW_CUDA_SUCCESS);
}

#define SC_DEVICE_CHECK(dev)                              \
	do {                                                  \
		if ((dev) < 0 || (dev) >= g.ndev)                 \
			SC_RETURN(TW_CUDA_ERROR_INVALID_DEVICE);      \
	} while (0)

SC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	SC_ENTER();
	SC_DEVICE_CHECK(dev);
	if (!name || len <= 0)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	snprintf(name, (size_t)len, "%s", g.dev[dev].name);
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	SC_ENTER();
	SC_DEVICE_CHECK(dev);
	if (!uuid)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	memcpy(uuid->bytes, g.dev[dev].uuid, 16);
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return cuDeviceGetUuid_v2(uuid, dev);
}

SC_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	SC_ENTER();
	SC_DEVICE_CHECK(dev);
	if (!pciBusId || len <= 0)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	/* the driver writes the domain with 8 digits: "00000000:3B:00.0" */
	unsigned dom = 0, bus = 0, slot = 0, fn = 0;
	sscanf(g.dev[dev].pci, "%x:%x:%x.%x", &dom, &bus, &slot, &fn);
	snprintf(pciBusId, (size_t)len, "%08X:%02X:%02X.%X", dom, bus, slot, fn);
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev)
{
	SC_ENTER();
	SC_DEVICE_CHECK(dev);
	if (!pi)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	unsigned dom = 0, bus = 0, slot = 0, fn = 0;
	sscanf(g.dev[dev].pci, "%x:%x:%x.%x", &dom, &bus, &slot, &fn);
	switch (attrib) {
	case TW_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = (int)bus; break;
	case TW_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = (int)slot; break;
	case TW_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = (int)dom; break;
	case TW_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
	default: SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	}
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	SC_ENTER();
	SC_DEVICE_CHECK(dev);
	if (!bytes)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	*bytes = g.dev[dev].mem;
	SC_RETURN(TW_CUDA_SUCCESS);
}

/* Lock held: the device's memory exists (made on its first context). */
static CUresult sc_dev_map(sc_dev *d, int idx)
{
	if (d->base)
		return TW_CUDA_SUCCESS;
	char name[32];
	snprintf(name, sizeof(name), "simcuda-dev%d", idx);
	/* an unnamed file of /dev/shm, so that an IPC handle can give it a
	 * name any process of the host can open (cuIpcGetMemHandle); memfd
	 * where there is none */
	int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)d->mem) != 0) {
		if (fd >= 0)
			close(fd);
		return TW_CUDA_ERROR_OUT_OF_MEMORY;
	}
	void *base = mmap(NULL, d->mem, PROT_NONE, MAP_SHARED, fd, 0);
	void *alias = mmap(NULL, d->mem, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	sc_block *b = calloc(1, sizeof(*b));
	if (base == MAP_FAILED || alias == MAP_FAILED || !b) {
		if (base != MAP_FAILED)
			munmap(base, d->mem);
		if (alias != MAP_FAILED)
			munmap(alias, d->mem);
		free(b);
		close(fd);
		return TW_CUDA_ERROR_OUT_OF_MEMORY;
	}
	b->size = d->mem;
	d->fd = fd;
	d->base = base;
	d->alias = alias;
	d->blocks = b;
	return TW_CUDA_SUCCESS;
}

SC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	SC_ENTER();
	SC_DEVICE_CHECK(dev);
	if (!pctx)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	CUresult r = sc_dev_map(&g.dev[dev], dev);
	if (r != TW_CUDA_SUCCESS)
		SC_RETURN(r);
	g.dev[dev].ctx.refs++;
	*pctx = &g.dev[dev].ctx;
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	SC_ENTER();
	SC_DEVICE_CHECK(dev);
	if (g.dev[dev].ctx.refs <= 0)
		SC_RETURN(TW_CUDA_ERROR_INVALID_CONTEXT);
	g.dev[dev].ctx.refs--;
	SC_RETURN(TW_CUDA_SUCCESS);
}

static bool sc_ctx_valid(struct CUctx_st *c)
{
	for (int i = 0; i < g.ndev; i++)
		if (c == &g.dev[i].ctx)
			return c->refs > 0;
	return false;
}

SC_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	SC_ENTER();
	if (ctx && !sc_ctx_valid(ctx))
		SC_RETURN(TW_CUDA_ERROR_INVALID_CONTEXT);
	tls_ctx = ctx;
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	SC_ENTER();
	if (!pctx)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	*pctx = tls_ctx;
	SC_RETURN(TW_CUDA_SUCCESS);
}

#define SC_NEED_CTX()                                              \
	do {                                                           \
		if (!tls_ctx || !sc_ctx_valid(tls_ctx))                    \
			SC_RETURN(TW_CUDA_ERROR_INVALID_CONTEXT);              \
	} while (0)

SC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	SC_ENTER();
	SC_NEED_CTX();
	if (!dptr || bytesize == 0)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	sc_dev *d = &g.dev[tls_ctx->dev];
	uint64_t need = ((uint64_t)bytesize + SC_PAGE - 1) & ~(uint64_t)(SC_PAGE - 1);
	for (sc_block *b = d->blocks; b; b = b->next) {
		if (b->used || b->size < need)
			continue;
		if (b->size > need) {
			sc_block *rest = calloc(1, sizeof(*rest));
			if (!rest)
				SC_RETURN(TW_CUDA_ERROR_OUT_OF_MEMORY);
			rest->off = b->off + need;
			rest->size = b->size - need;
			rest->next = b->next;
			b->next = rest;
			b->size = need;
		}
		b->used = true;
		b->id = ++g.next_buffer_id;
		*dptr = (uint64_t)(uintptr_t)d->base + b->off;
		SC_RETURN(TW_CUDA_SUCCESS);
	}
	SC_RETURN(TW_CUDA_ERROR_OUT_OF_MEMORY);
}

SC_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	SC_ENTER();
	/* the real driver synchronizes before freeing */
	CUresult r = sc_drain(&g.null_stream);
	if (r != TW_CUDA_SUCCESS)
		SC_RETURN(r);
	for (int i = 0; i < g.ndev; i++) {
		sc_dev *d = &g.dev[i];
		if (!d->base || dptr < (uint64_t)(uintptr_t)d->base)
			continue;
		uint64_t off = dptr - (uint64_t)(uintptr_t)d->base;
		for (sc_block *b = d->blocks; b; b = b->next) {
			if (!b->used || b->off != off)
				continue;
			/* the pages go back to zero, as freed GPU memory need not keep them */
			fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)b->off,
			          (off_t)b->size);
			b->used = false;
			for (sc_block *c = d->blocks; c && c->next;) {
				if (!c->used && !c->next->used) {
					sc_block *n = c->next;
					c->size += n->size;
					c->next = n->next;
					free(n);
				} else {
					c = c->next;
				}
			}
			SC_RETURN(r);
		}
	}
	SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
}

SC_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	SC_ENTER();
	SC_NEED_CTX();
	if (!pp || bytesize == 0)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	sc_hostmem *h = calloc(1, sizeof(*h));
	void *p = mmap(NULL, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!h || p == MAP_FAILED) {
		free(h);
		if (p != MAP_FAILED)
			munmap(p, bytesize);
		SC_RETURN(TW_CUDA_ERROR_OUT_OF_MEMORY);
	}
	h->p = p;
	h->size = bytesize;
	h->next = g.host;
	g.host = h;
	*pp = p;
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuMemFreeHost(void *p)
{
	SC_ENTER();
	for (sc_hostmem **pp = &g.host; *pp; pp = &(*pp)->next) {
		sc_hostmem *h = *pp;
		if (h->p != p)
			continue;
		*pp = h->next;
		munmap(h->p, h->size);
		free(h);
		SC_RETURN(TW_CUDA_SUCCESS);
	}
	SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
}

SC_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	SC_ENTER();
	char *alias;
	int dev;
	bool bad;
	uint64_t base = 0, size = 0;
	if (!sc_lookup(dptr, 1, &alias, &dev, &bad, &base, &size) || (bad && size == 0))
		SC_RETURN(TW_CUDA_ERROR_NOT_FOUND);
	if (pbase)
		*pbase = base;
	if (psize)
		*psize = size;
	SC_RETURN(TW_CUDA_SUCCESS);
}

/* Lock held: both ends of a copy, as addresses the engine may touch. */
static CUresult sc_copy_ends(CUdeviceptr dst, CUdeviceptr src, size_t n, char **d, const char **s)
{
	char *a;
	int dev;
	bool bad;
	*d = (char *)(uintptr_t)dst;
	*s = (const char *)(uintptr_t)src;
	if (sc_lookup(dst, n, &a, &dev, &bad, NULL, NULL)) {
		if (bad)
			return TW_CUDA_ERROR_INVALID_VALUE;
		*d = a;
	}
	if (sc_lookup(src, n, &a, &dev, &bad, NULL, NULL)) {
		if (bad)
			return TW_CUDA_ERROR_INVALID_VALUE;
		*s = a;
	}
	return TW_CUDA_SUCCESS;
}

static CUresult sc_copy_queue(const char *fn, CUdeviceptr dst, CUdeviceptr src, size_t n,
                              CUstream stream, bool sync)
{
	SC_ENTER_AS(fn);
	SC_NEED_CTX();
	struct CUstream_st *s = stream ? stream : &g.null_stream;
	if (!sc_stream_known(s))
		SC_RETURN(TW_CUDA_ERROR_INVALID_HANDLE);
	if (n == 0)
		SC_RETURN(TW_CUDA_SUCCESS);
	if (!dst || !src)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	sc_op op = { .kind = OP_COPY, .n = n };
	CUresult r = sc_copy_ends(dst, src, n, &op.dst, &op.src);
	if (r == TW_CUDA_SUCCESS)
		r = sc_enqueue(s, &op);
	if (r == TW_CUDA_SUCCESS && sync)
		r = sc_drain(s);
	SC_RETURN(r);
}

SC_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
	return sc_copy_queue("cuMemcpy", dst, src, bytes, NULL, true);
}

SC_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
	return sc_copy_queue("cuMemcpyAsync", dst, src, bytes, stream, false);
}

SC_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
	SC_ENTER();
	SC_NEED_CTX();
	char *a;
	int dev;
	bool bad;
	if (!sc_lookup(dst, n, &a, &dev, &bad, NULL, NULL) || bad)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	CUresult r = sc_drain(&g.null_stream);
	if (r == TW_CUDA_SUCCESS)
		memset(a, value, n);
	SC_RETURN(r);
}

SC_EXPORT CUresult cuStreamCreate(CUstream *pstream, unsigned int flags)
{
	SC_ENTER();
	SC_NEED_CTX();
	if (!pstream || (flags & ~(unsigned)TW_CU_STREAM_NON_BLOCKING))
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	struct CUstream_st *s = calloc(1, sizeof(*s));
	if (!s)
		SC_RETURN(TW_CUDA_ERROR_OUT_OF_MEMORY);
	s->flags = flags;
	s->next = g.null_stream.next;
	g.null_stream.next = s;
	*pstream = s;
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuStreamDestroy_v2(CUstream stream)
{
	SC_ENTER();
	if (!stream || stream == &g.null_stream || !sc_stream_known(stream))
		SC_RETURN(TW_CUDA_ERROR_INVALID_HANDLE);
	/* pending work still runs, as on the real driver, then the stream goes */
	while (stream->head)
		pthread_cond_wait(&g.cond, &g.mu);
	for (struct CUstream_st **pp = &g.streams; *pp; pp = &(*pp)->next)
		if (*pp == stream) {
			*pp = stream->next;
			break;
		}
	free(stream);
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuStreamSynchronize(CUstream stream)
{
	SC_ENTER();
	struct CUstream_st *s = stream ? stream : &g.null_stream;
	if (!sc_stream_known(s))
		SC_RETURN(TW_CUDA_ERROR_INVALID_HANDLE);
	SC_RETURN(sc_drain(s));
}

SC_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags)
{
	SC_ENTER();
	struct CUstream_st *s = stream ? stream : &g.null_stream;
	if (!event || !sc_stream_known(s) || flags != 0)
		SC_RETURN(TW_CUDA_ERROR_INVALID_HANDLE);
	uint64_t gen = ev_recorded(event);
	if (gen == 0)
		SC_RETURN(TW_CUDA_SUCCESS);
	sc_op op = { .kind = OP_WAIT, .ev = event, .gen = gen };
	SC_RETURN(sc_enqueue(s, &op));
}

SC_EXPORT CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void *user_data)
{
	SC_ENTER();
	struct CUstream_st *s = stream ? stream : &g.null_stream;
	if (!fn || !sc_stream_known(s))
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	sc_op op = { .kind = OP_HOSTFN, .fn = fn, .data = user_data };
	SC_RETURN(sc_enqueue(s, &op));
}

SC_EXPORT CUresult cuEventCreate(CUevent *pevent, unsigned int flags)
{
	SC_ENTER();
	SC_NEED_CTX();
	if (!pevent)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	/* interprocess events must not time (the driver's rule) */
	if ((flags & TW_CU_EVENT_INTERPROCESS) && !(flags & TW_CU_EVENT_DISABLE_TIMING))
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	struct CUevent_st *e = calloc(1, sizeof(*e));
	if (!e)
		SC_RETURN(TW_CUDA_ERROR_OUT_OF_MEMORY);
	e->flags = flags;
	e->refs = 1;
	e->fd = -1;
	if (flags & TW_CU_EVENT_INTERPROCESS) {
		e->fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		void *m = MAP_FAILED;
		if (e->fd >= 0 && ftruncate(e->fd, sizeof(sc_ev_shared)) == 0)
			m = mmap(NULL, sizeof(sc_ev_shared), PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0);
		if (m == MAP_FAILED) {
			if (e->fd >= 0)
				close(e->fd);
			free(e);
			SC_RETURN(TW_CUDA_ERROR_OUT_OF_MEMORY);
		}
		e->sh = m;
	}
	sc_events_live++;
	*pevent = e;
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream)
{
	SC_ENTER();
	struct CUstream_st *s = stream ? stream : &g.null_stream;
	if (!event || !sc_stream_known(s))
		SC_RETURN(TW_CUDA_ERROR_INVALID_HANDLE);
	sc_op op = { .kind = OP_RECORD, .ev = event, .gen = ev_record_next(event) };
	SC_RETURN(sc_enqueue(s, &op));
}

SC_EXPORT CUresult cuEventQuery(CUevent event)
{
	SC_ENTER();
	if (!event)
		SC_RETURN(TW_CUDA_ERROR_INVALID_HANDLE);
	SC_RETURN(ev_done(event) >= ev_recorded(event) ? TW_CUDA_SUCCESS : TW_CUDA_ERROR_NOT_READY);
}

SC_EXPORT CUresult cuEventSynchronize(CUevent event)
{
	SC_ENTER();
	if (!event)
		SC_RETURN(TW_CUDA_ERROR_INVALID_HANDLE);
	uint64_t want = ev_recorded(event);
	while (ev_done(event) < want) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200000; /* another process may be the one recording */
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&g.cond, &g.mu, &ts);
	}
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuEventDestroy_v2(CUevent event)
{
	SC_ENTER();
	if (!event)
		SC_RETURN(TW_CUDA_ERROR_INVALID_HANDLE);
	/* as on the real driver, destroying an event whose record or wait is
	 * still queued returns at once; it goes when they have run */
	if (--event->refs == 0)
		ev_free(event);
	SC_RETURN(TW_CUDA_SUCCESS);
}

/* ---- IPC memory handles ---------------------------------------------------------------- */

/* The handle: the exporter's device memory by name, /dev/shm/simcuda-
 * <pidns>-<pid>-<fd>-<nonce> (nonce 0: no name, then /proc/<pid>/fd/<fd>,
 * which only a process of the same pid namespace can open). */
typedef struct sc_ipc_wire {
	uint64_t magic;
	int32_t pid;
	int32_t fd;
	unsigned char uuid[16];
	uint64_t off, size;
	uint64_t nonce, pidns;
} sc_ipc_wire;
_Static_assert(sizeof(sc_ipc_wire) == TW_CU_IPC_HANDLE_SIZE, "handle size");

static uint64_t sc_ns_ino(const char *ns)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/self/ns/%s", ns);
	return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void sc_shm_name(char *buf, size_t len, uint64_t pidns, int pid, int fd, uint64_t nonce)
{
	snprintf(buf, len, "/dev/shm/simcuda-%llx-%d-%d-%016llx", (unsigned long long)pidns, pid,
	         fd, (unsigned long long)nonce);
}

/* the names this process gave its files in /dev/shm, removed at exit */
typedef struct sc_name {
	char path[128];
	struct sc_name *next;
} sc_name;
static sc_name *sc_names;

static void sc_unlink_names(void)
{
	for (sc_name *n = sc_names; n; n = n->next)
		unlink(n->path);
}

/* Names left by processes of this pid namespace that died without their
 * exit handler (killed): their files go. */
static void sc_sweep_names(uint64_t pidns)
{
	DIR *dir = opendir("/dev/shm");
	if (!dir)
		return;
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "simcuda-%llx-", (unsigned long long)pidns);
	for (struct dirent *e; (e = readdir(dir));) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		int pid = atoi(e->d_name + strlen(prefix));
		if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
			unlinkat(dirfd(dir), e->d_name, 0);
	}
	closedir(dir);
}

/* Lock held: gives the unnamed file fd a name in /dev/shm that any process
 * of the host can open; returns its nonce, 0 if it cannot have one. */
static uint64_t sc_name_fd(int fd)
{
	static bool handler;
	uint64_t pidns = sc_ns_ino("pid"), nonce = 0;
	while (!nonce)
		if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
			return 0;
	if (!handler) {
		sc_sweep_names(pidns);
		handler = atexit(sc_unlink_names) == 0;
	}
	sc_name *n = calloc(1, sizeof(*n));
	if (!n)
		return 0;
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	sc_shm_name(n->path, sizeof(n->path), pidns, (int)getpid(), fd, nonce);
	if (linkat(AT_FDCWD, self, AT_FDCWD, n->path, AT_SYMLINK_FOLLOW) != 0) {
		free(n);
		return 0;
	}
	n->next = sc_names;
	sc_names = n;
	return nonce;
}

static void sc_dev_name(sc_dev *d)
{
	if (!d->nonce)
		d->nonce = sc_name_fd(d->fd);
}

SC_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	SC_ENTER();
	SC_NEED_CTX();
	char *alias;
	int dev;
	bool bad;
	uint64_t base = 0, size = 0;
	if (!handle)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	/* only memory this process allocated can be exported */
	bool own = sc_lookup(dptr, 1, &alias, &dev, &bad, &base, &size) && !bad &&
	           g.dev[dev].base && base >= (uint64_t)(uintptr_t)g.dev[dev].base &&
	           base < (uint64_t)(uintptr_t)g.dev[dev].base + g.dev[dev].mem;
	if (!own)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	sc_dev_name(&g.dev[dev]);
	sc_ipc_wire w = { .magic = SC_IPC_MAGIC, .pid = (int32_t)getpid(), .fd = g.dev[dev].fd,
		              .off = base - (uint64_t)(uintptr_t)g.dev[dev].base, .size = size,
		              .nonce = g.dev[dev].nonce, .pidns = sc_ns_ino("pid") };
	memcpy(w.uuid, g.dev[dev].uuid, 16);
	memcpy(handle->reserved, &w, sizeof(w));
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                         unsigned int flags)
{
	SC_ENTER();
	SC_NEED_CTX();
	sc_ipc_wire w;
	memcpy(&w, handle.reserved, sizeof(w));
	if (!pdptr || w.magic != SC_IPC_MAGIC || (flags & ~(unsigned)TW_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	int dev = -1;
	for (int i = 0; i < g.ndev; i++)
		if (memcmp(g.dev[i].uuid, w.uuid, 16) == 0)
			dev = i;
	if (dev < 0) /* the exporter's device is not visible here */
		SC_RETURN(TW_CUDA_ERROR_INVALID_DEVICE);
	/* the exporting process itself: the driver refuses */
	if (w.pid == (int32_t)getpid() && w.pidns == sc_ns_ino("pid"))
		SC_RETURN(TW_CUDA_ERROR_INVALID_CONTEXT);
	/* As the real driver (driver.expect): another pid or ipc namespace does
	 * not matter so long as the device is visible and the memory can be
	 * reached; here through its name in /dev/shm (a container with a /dev/shm
	 * of its own cannot), else through /proc (the same pid namespace only). */
	char path[128];
	if (w.nonce)
		sc_shm_name(path, sizeof(path), w.pidns, (int)w.pid, (int)w.fd, w.nonce);
	else if (w.pidns == sc_ns_ino("pid"))
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
	else
		SC_RETURN(TW_CUDA_ERROR_MAP_FAILED);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	struct stat st;
	/* the exporter is gone, or its memory out of reach */
	if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size < w.off + w.size) {
		if (fd >= 0)
			close(fd);
		SC_RETURN(TW_CUDA_ERROR_MAP_FAILED);
	}
	sc_ipcmap *m = calloc(1, sizeof(*m));
	void *base = mmap(NULL, w.size, PROT_NONE, MAP_SHARED, fd, (off_t)w.off);
	void *alias = mmap(NULL, w.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)w.off);
	close(fd);
	if (!m || base == MAP_FAILED || alias == MAP_FAILED) {
		if (base != MAP_FAILED)
			munmap(base, w.size);
		if (alias != MAP_FAILED)
			munmap(alias, w.size);
		free(m);
		SC_RETURN(TW_CUDA_ERROR_MAP_FAILED);
	}
	m->dev = dev;
	m->base = base;
	m->alias = alias;
	m->buffer_id = ++g.next_buffer_id;
	m->size = w.size;
	m->next = g.ipc;
	g.ipc = m;
	*pdptr = (uint64_t)(uintptr_t)base;
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	SC_ENTER();
	for (sc_ipcmap **pp = &g.ipc; *pp; pp = &(*pp)->next) {
		sc_ipcmap *m = *pp;
		if ((uint64_t)(uintptr_t)m->base != dptr)
			continue;
		/* copies queued on this memory run first */
		CUresult r = sc_drain(&g.null_stream);
		*pp = m->next;
		munmap(m->base, m->size);
		munmap(m->alias, m->size);
		free(m);
		SC_RETURN(r);
	}
	SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
}

/* An event handle: the event's counters by name, as for memory. */
typedef struct sc_ipc_event_wire {
	uint64_t magic;
	int32_t pid;
	int32_t fd;
	uint64_t nonce, pidns;
	char unused[32];
} sc_ipc_event_wire;
_Static_assert(sizeof(sc_ipc_event_wire) == TW_CU_IPC_HANDLE_SIZE, "event handle size");
#define SC_IPC_EVENT_MAGIC 0x3145504943536373ull /* "scSCIPE1" */

SC_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
	SC_ENTER();
	SC_NEED_CTX();
	if (!handle || !event || !event->sh)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	if (!event->nonce)
		event->nonce = sc_name_fd(event->fd);
	if (!event->nonce)
		SC_RETURN(TW_CUDA_ERROR_MAP_FAILED);
	sc_ipc_event_wire w = { .magic = SC_IPC_EVENT_MAGIC, .pid = (int32_t)getpid(),
		                    .fd = event->fd, .nonce = event->nonce, .pidns = sc_ns_ino("pid") };
	memcpy(handle->reserved, &w, sizeof(w));
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuIpcOpenEventHandle(CUevent *pevent, CUipcEventHandle handle)
{
	SC_ENTER();
	SC_NEED_CTX();
	sc_ipc_event_wire w;
	memcpy(&w, handle.reserved, sizeof(w));
	if (!pevent || w.magic != SC_IPC_EVENT_MAGIC)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	if (w.pid == (int32_t)getpid() && w.pidns == sc_ns_ino("pid"))
		SC_RETURN(TW_CUDA_ERROR_INVALID_CONTEXT);
	char path[128];
	sc_shm_name(path, sizeof(path), w.pidns, (int)w.pid, (int)w.fd, w.nonce);
	struct CUevent_st *e = calloc(1, sizeof(*e));
	int fd = open(path, O_RDWR | O_CLOEXEC);
	void *m = MAP_FAILED;
	if (fd >= 0)
		m = mmap(NULL, sizeof(sc_ev_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (!e || m == MAP_FAILED) {
		if (fd >= 0)
			close(fd);
		free(e);
		SC_RETURN(TW_CUDA_ERROR_MAP_FAILED);
	}
	e->flags = TW_CU_EVENT_INTERPROCESS | TW_CU_EVENT_DISABLE_TIMING;
	e->refs = 1;
	e->fd = fd;
	e->sh = m;
	sc_events_live++;
	*pevent = e;
	SC_RETURN(TW_CUDA_SUCCESS);
}

/* Every pair of distinct devices can reach each other (one NVLink domain). */
SC_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	SC_ENTER();
	SC_DEVICE_CHECK(dev);
	SC_DEVICE_CHECK(peer);
	if (!can)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	*can = dev != peer;
	SC_RETURN(TW_CUDA_SUCCESS);
}

SC_EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr)
{
	SC_ENTER();
	if (!data)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	char *alias;
	int dev = 0;
	bool bad;
	bool is_dev = sc_lookup(ptr, 1, &alias, &dev, &bad, NULL, NULL) && !bad;
	bool is_host = !is_dev && sc_host_pinned((const void *)(uintptr_t)ptr);
	if (!is_dev && !is_host)
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	switch (attribute) {
	case TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = is_dev ? TW_CU_MEMORYTYPE_DEVICE : TW_CU_MEMORYTYPE_HOST;
		break;
	case TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = is_dev ? dev : (tls_ctx ? tls_ctx->dev : 0);
		break;
	case TW_CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = is_dev ? &g.dev[dev].ctx : tls_ctx;
		break;
	case TW_CU_POINTER_ATTRIBUTE_BUFFER_ID:
		if (!is_dev)
			SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
		*(unsigned long long *)data = sc_lookup_id;
		break;
	default:
		SC_RETURN(TW_CUDA_ERROR_INVALID_VALUE);
	}
	SC_RETURN(TW_CUDA_SUCCESS);
}
