/*
 * cuda_ipc.c - the cuda_ipc channel (spec/wire.md 4.6.3): device to device
 * between two processes of one host through CUDA IPC. Two connections:
 * descriptors on 0, replies on 1.
 *
 * Each sending device has a staging area ("outbox") of TW_CUDA_IPC_SLOTS
 * slots of TW_CUDA_IPC_SLOT bytes, one interprocess event per slot, shared by
 * the context's channels. Per chunk of a tensor (at most one slot) the
 * sender takes a slot whose event (the receiver's last copy out of it) is
 * seen complete, copies the chunk into it on its stream after the tensor's
 * stream, records the slot's event, and writes Descriptor{deviceIdx,
 * slotIdx, outboxInfo} (the area's handles in the first descriptor of this
 * channel for that device). The receiver opens the area once per (process,
 * remote device, local device), copies out of the slot once the slot's
 * event is seen complete, after its buffer's stream, records the slot's
 * event, and when the bytes are in writes an empty reply, in order. The
 * sender frees the slot on the reply. Neither end makes a stream wait for
 * the other process's event (a process that died may leave it never
 * complete): see "polling the peer's events" below.
 *
 * Device descriptor: libnop {bootId, pid int64, deviceUuid}. Two devices
 * can communicate, as stock decides, when the boot ids are equal and the
 * pids differ, and the devices can reach each other; unlike stock, a peer
 * device this process cannot see is "no" (stock throws: two containers
 * that see different GPUs, field failure T03), and so is a device of ours
 * the peer does not offer (it cannot see it: the two ends would select
 * differently, and the pipe fail, spec 3.7).
 *
 * With the proof agreed (spec 8.3.1, between tensorwire peers), the
 * Descriptor that announces a device's area is its probe: the sender waits
 * for its first reply before writing more on connection 0, and a receiver
 * that cannot open the area (a container with its own ipc namespace and
 * /dev/shm, T03) answers why instead; that device's chunks then travel
 * inline, as bytes after their Descriptors, through host memory. With the
 * proof the receiver reads connection 0 one frame at a time, since it
 * alone knows whether bytes follow a Descriptor; without it (stock) the
 * Descriptor reads are queued ahead as before.
 *
 * Where stock calls back early, ours does not: a send calls back once the
 * receiver has replied for every chunk (stock: once the last chunk was
 * queued), a receive once every chunk is in the buffer (stock: queued).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "channel/cuda/cuda.h"
#include "channel/cuda/cuda_common.h"
#include "platform/error.h"
#include "platform/identity.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "wire/nop.h"
#include "wire/packets.h"

#define TW_CUDA_IPC_SLOT ((uint64_t)8 << 20)
#define TW_CUDA_IPC_SLOTS 4
#define CI_DESC_MAX 4096
#define CI_UUID_LEN 36
/* the longest refusal (spec 8.3.1): printable text */
#define CI_REFUSAL_MAX 200

/* a staging area of this process on one device: made when a channel
 * first sends from that device, kept until the context shuts down. Each
 * channel copies through the area it announced (stock's receivers take
 * one announcement per channel and device) */
typedef struct ci_outbox {
	int dev;
	char process[160]; /* the identifier it is announced with */
	CUdeviceptr base;
	CUevent events[TW_CUDA_IPC_SLOTS];
	CUipcMemHandle mem;
	CUipcEventHandle ev[TW_CUDA_IPC_SLOTS];
	bool used[TW_CUDA_IPC_SLOTS];
	/* A slot is taken only once its event is seen complete. One whose
	 * receiver died with its copy out queued (the record of the slot's
	 * event after it) never is: it is lost. Suspect: given to a receiver
	 * that never answered (its pipe failed first), so lost at once while
	 * its event is incomplete; any other free slot counts as lost once
	 * its event stayed incomplete for slot_wait_ms after it came back
	 * (back_ms, uv_now): a stock receiver answers before its copy out
	 * ran, and may die after answering. */
	bool suspect[TW_CUDA_IPC_SLOTS];
	uint64_t back_ms[TW_CUDA_IPC_SLOTS];
	unsigned refs; /* the channels that copy through it, and the context while current */
	bool closed;   /* by ci_shutdown: its memory is gone, the struct waits for its last reference */
	/* the proof (8.3.1): pinned host memory, a slot's bytes on their way
	 * inline (made on the first refusal) */
	char *pinned;
	struct ci_outbox *next; /* the context's areas */
} ci_outbox;

/* a peer's staging area, opened on one of our devices while a channel
 * that copies from it lives (each holds one reference): a long-lived
 * context whose peers come and go keeps no gone peer's area mapped */
typedef struct ci_remote {
	char *process;
	uint8_t mem[TW_CU_IPC_HANDLE_SIZE]; /* the area's handle: one process can have several */
	int32_t rdev;
	int ldev;
	CUdeviceptr base;
	CUevent events[TW_CUDA_IPC_SLOTS];
	unsigned refs;
	bool closed; /* by ci_shutdown: the struct waits for its last reference */
	struct ci_remote *next;
} ci_remote;

typedef struct ci_ctx {
	tw_cuda_ctx cc;
	char process[128]; /* "<pidns>_<pid>" */
	ci_outbox *out[TW_CUDA_CTX_MAX_DEVICES]; /* the one new channels announce */
	unsigned areas_made[TW_CUDA_CTX_MAX_DEVICES];
	ci_outbox *areas;                        /* every one made */
	ci_remote *remotes;
	/* wakes the channels while an interprocess event they wait for is
	 * polled (ci_poll_later), every poll_ms */
	uv_timer_t poll;
	bool poll_init;
	bool shut; /* ci_shutdown ran: no timer is started again */
	uint64_t poll_ms;
	/* the first CI_SPIN_NS of a wait look again on the loop's next pass */
	tw_deferred spin;
	bool spin_queued;
	uint64_t waiting_since; /* uv_hrtime() when a look last found nothing ready, 0: found */
	uint64_t slot_wait_ms; /* option slot_wait_ms (CI_SLOT_WAIT_MS) */
} ci_ctx;

enum ci_state {
	CI_WAIT,    /* send: a slot; receive: its Descriptor */
	CI_ARRIVED, /* receive: the Descriptor is in, the copy not queued yet */
	CI_COPYING, /* the copy into or out of the slot (or host memory) is queued */
	CI_BYTES,   /* receive, inline: the read of its bytes is queued */
};

typedef struct ci_chunk {
	tw_cuda_chunk c;
	enum ci_state state;
	bool io;      /* a read (of the Descriptor, bytes or the reply) is queued for it */
	bool replied; /* send: the reply came */
	bool copied;
	/* The proof (spec 8.3.1). Send: asks, its Descriptor announced the
	 * area and its first reply may refuse it; inl, its bytes go inline
	 * (from host, copied out of the user's buffer); restage, refused after
	 * its copy into the slot: a copy to host comes next; desc_out, its
	 * Descriptor is written already; sent, its bytes too. Receive: inl,
	 * its bytes come inline into host; refuse, the refusal (why) is to be
	 * written, in order; bytes_in, they arrived. */
	bool asks, inl, restage, desc_out, sent, refuse, bytes_in;
	char *host; /* inline: its bytes in pinned host memory (the slot's) */
	char why[CI_REFUSAL_MAX + 1];
	tw_wire_cuda_ipc_descriptor desc; /* receive: what arrived */
} ci_chunk;

/* what a peer announced for one of its devices on this channel */
typedef struct ci_announce {
	int32_t rdev;
	bool refused; /* the proof (8.3.1): its area did not open here */
	char *pinned; /* ... so its slots' bytes land in this pinned memory */
	ci_remote *opened[TW_CUDA_CTX_MAX_DEVICES]; /* its area on our device i: a reference */
	tw_wire_cuda_ipc_descriptor info;
	struct ci_announce *next;
} ci_announce;

typedef struct ci_channel {
	tw_cuda_chan c;
	tw_conn *conn[2];
	bool announced[TW_CUDA_CTX_MAX_DEVICES]; /* send: our outbox went out */
	ci_outbox *area[TW_CUDA_CTX_MAX_DEVICES]; /* send: the outbox it copies through */
	ci_announce *peer;                       /* receive */
	/* the proof (8.3.1): agreed; send: an announcing chunk waits for its
	 * first reply (later chunks wait), and our devices whose areas the
	 * peer refused; receive: a read on connection 0 is under way (with
	 * the proof, reads go one at a time: a Descriptor may be followed by
	 * bytes) */
	bool proof, asking, reading;
	bool refused[TW_CUDA_CTX_MAX_DEVICES];
} ci_channel;

#define CI_CTX(ch) ((ci_ctx *)(ch)->c.ctx)
#define CI_CH(k) ((ci_channel *)(k)->c.op->ch)

static tw_status_t ci_cu_fail(ci_ctx *c, const char *call, CUresult r, char *detail,
                              size_t detail_len)
{
	char eb[160];
	tw__detail(detail, detail_len, "%s: %s", call, tw__cuda_strerror(c->cc.cu, r, eb, sizeof(eb)));
	return r == TW_CUDA_ERROR_OUT_OF_MEMORY ? TW_ERR_NOMEM : TW_ERR_SYS;
}

/* ---- polling the peer's events ---------------------------------------------------------- */

/* A copy that must come after a peer process's work on its GPU waits for
 * that process's event. A stream made to wait for it would hold every
 * later copy of this context on the device, and the context's close, for
 * good if the process died first: its event stays recorded and never
 * completes. So such a copy is queued only once the event is seen
 * complete (cuEventQuery), and the channels are woken to look again: on
 * each pass of the loop for the first CI_SPIN_NS of a wait (the bound the
 * transports busy-poll for, TW_LOOP_BUSY_DEFAULT_US: a copy on a GPU that
 * is not busy ends within that), then every poll_ms (1 ms, then
 * 2 ms while nothing became ready: a tensor whose producer still runs on
 * the writer's GPU arrives at most 2 ms late) until then. */
#define CI_POLL_MAX_MS 2
#define CI_SPIN_NS ((uint64_t)TW_LOOP_BUSY_DEFAULT_US * 1000)

/* How long, by default, a slot's event may stay incomplete after the slot
 * came back before the slot counts as lost (see ci_outbox), and a channel
 * whose every slot is so fails: the liveness bound of the transports
 * (option slot_wait_ms). */
#define CI_SLOT_WAIT_MS 30000

/* The most staging areas a context keeps per device (each
 * TW_CUDA_IPC_SLOTS x TW_CUDA_IPC_SLOT bytes of device memory): a new one
 * is made only when each of the others has CI_LOST_ROTATE lost slots.
 * Areas live until the context shuts down, as stock's: a peer may keep
 * one mapped as long as its own context lives, and freeing exported
 * memory before its importers close it is undefined in CUDA. */
#define CI_MAX_AREAS 4

/* A current area with this many lost slots is replaced for new channels:
 * with one or two slots left, pipes sharing them would all fail (by
 * slot_wait_ms) once the next receiver to die took those too. */
#define CI_LOST_ROTATE 2

static void ci_on_spin(void *arg)
{
	ci_ctx *c = arg;
	c->spin_queued = false;
	tw__cuda_chan_wake(&c->cc);
}

static void ci_on_poll(uv_timer_t *t)
{
	ci_ctx *c = t->data;
	if (c->poll_ms < CI_POLL_MAX_MS)
		c->poll_ms *= 2;
	tw__cuda_chan_wake(&c->cc);
}

/* Loop thread: the channels look again soon (on the loop's next pass, or
 * by the timer; not after ci_shutdown). */
static void ci_poll_later(ci_ctx *c)
{
	if (c->shut)
		return;
	uint64_t now = uv_hrtime();
	if (!c->waiting_since)
		c->waiting_since = now;
	if (now - c->waiting_since < CI_SPIN_NS) {
		if (!c->spin_queued) {
			c->spin_queued = true;
			tw__loop_yield(c->cc.base.env->loop, &c->spin, ci_on_spin, c);
		}
		return;
	}
	if (!c->poll_init) {
		(void)uv_timer_init(&c->cc.base.env->loop->uv, &c->poll); /* cannot fail */
		c->poll.data = c;
		c->poll_init = true;
	}
	if (!uv_is_active((uv_handle_t *)&c->poll))
		uv_timer_start(&c->poll, ci_on_poll, c->poll_ms, 0);
}

/* A wait is over (what a chunk waited for was seen): the next one starts
 * with the loop's passes and 1 ms again. */
static void ci_wait_over(ci_ctx *c)
{
	c->poll_ms = 1;
	c->waiting_since = 0;
}

/* Has the event `ev` (a peer's work, or its record) completed? *ready
 * says; a status other than TW_OK: the query failed (detail). */
static tw_status_t ci_event_done(ci_ctx *c, int dev, CUevent ev, bool *ready, char *detail,
                                 size_t detail_len)
{
	tw_status_t st = tw__cuda_use_device(c->cc.cu, dev, detail, detail_len);
	if (st != TW_OK)
		return st;
	CUresult r = c->cc.cu->cuEventQuery(ev);
	*ready = r == TW_CUDA_SUCCESS;
	if (r == TW_CUDA_SUCCESS || r == TW_CUDA_ERROR_NOT_READY)
		return TW_OK;
	return ci_cu_fail(c, "cuEventQuery of a staging slot's event", r, detail, detail_len);
}

/* ---- staging areas ---------------------------------------------------------------------- */

/* Frees o's memory and events (the struct stays). */
static void ci_outbox_close(ci_ctx *c, ci_outbox *o)
{
	const tw_cuda *cu = c->cc.cu;
	char d[TW_DETAIL_MAX];
	if (tw__cuda_use_device(cu, o->dev, d, sizeof(d)) == TW_OK) {
		for (int i = 0; i < TW_CUDA_IPC_SLOTS; i++)
			if (o->events[i])
				(void)cu->cuEventDestroy_v2(o->events[i]);
		if (o->base)
			(void)cu->cuMemFree_v2(o->base);
		if (o->pinned)
			(void)cu->cuMemFreeHost(o->pinned);
	}
	o->closed = true;
}

static void ci_outbox_free(ci_ctx *c, ci_outbox *o)
{
	ci_outbox_close(c, o);
	tw__free(o);
}

/* A new staging area on cuda:dev, announced as `process`. */
static tw_status_t ci_outbox_new(ci_ctx *c, int dev, const char *process, ci_outbox **out,
                                 char *detail, size_t detail_len)
{
	const tw_cuda *cu = c->cc.cu;
	tw_status_t st = tw__cuda_use_device(cu, dev, detail, detail_len);
	if (st != TW_OK)
		return st;
	ci_outbox *o = tw__calloc(1, sizeof(*o));
	if (!o) {
		tw__detail(detail, detail_len, "out of memory");
		return TW_ERR_NOMEM;
	}
	o->dev = dev;
	snprintf(o->process, sizeof(o->process), "%s", process);
	CUresult r = cu->cuMemAlloc_v2(&o->base, TW_CUDA_IPC_SLOT * TW_CUDA_IPC_SLOTS);
	if (r != TW_CUDA_SUCCESS) {
		tw__free(o);
		return ci_cu_fail(c, "cuMemAlloc of the staging area", r, detail, detail_len);
	}
	r = cu->cuIpcGetMemHandle(&o->mem, o->base);
	for (int i = 0; r == TW_CUDA_SUCCESS && i < TW_CUDA_IPC_SLOTS; i++) {
		r = cu->cuEventCreate(&o->events[i],
		                      TW_CU_EVENT_DISABLE_TIMING | TW_CU_EVENT_INTERPROCESS);
		if (r == TW_CUDA_SUCCESS)
			r = cu->cuIpcGetEventHandle(&o->ev[i], o->events[i]);
	}
	if (r != TW_CUDA_SUCCESS) {
		ci_outbox_free(c, o);
		return ci_cu_fail(c, "the staging area's IPC handles", r, detail, detail_len);
	}
	o->next = c->areas;
	c->areas = o;
	*out = o;
	return TW_OK;
}

/* Is free slot i of o lost (see ci_outbox)? A query that fails counts as
 * "yes". */
static bool ci_slot_lost(ci_ctx *c, ci_outbox *o, int i)
{
	char d[TW_DETAIL_MAX];
	bool ready = false;
	if (ci_event_done(c, o->dev, o->events[i], &ready, d, sizeof(d)) == TW_OK && ready) {
		o->suspect[i] = false;
		return false;
	}
	return o->suspect[i] ||
	       uv_now(&c->cc.base.env->loop->uv) - o->back_ms[i] >= c->slot_wait_ms;
}

/* How many of o's slots are lost. */
static int ci_outbox_lost(ci_ctx *c, ci_outbox *o)
{
	int n = 0;
	for (int i = 0; i < TW_CUDA_IPC_SLOTS; i++)
		n += !o->used[i] && ci_slot_lost(c, o, i);
	return n;
}

/* A channel (or the context, for its current area) lets go of o: the
 * struct goes with the last reference once ci_shutdown closed it. */
static void ci_outbox_unref(ci_outbox *o)
{
	if (--o->refs == 0 && o->closed)
		tw__free(o);
}

/* The area the channel sends from on cuda:dev: the context's current one,
 * from the channel's first chunk on that device on. A current area with
 * CI_LOST_ROTATE or more lost slots (receivers that died holding them,
 * most likely) is current no more: another area of the device with fewer
 * lost, or a new one (while fewer than CI_MAX_AREAS exist), announced
 * under an identifier of its own ("<pidns>_<pid>.<n>", since stock's
 * receivers know an area by its identifier), serves new channels;
 * channels that announced the old one keep it. At the limit, new channels
 * take the area with the fewest lost slots, and its bound (slot_wait_ms). */
static tw_status_t ci_outbox_of(ci_channel *ich, int dev, ci_outbox **out, char *detail,
                                size_t detail_len)
{
	ci_ctx *c = CI_CTX(ich);
	if (ich->area[dev]) {
		*out = ich->area[dev];
		return TW_OK;
	}
	ci_outbox *cur = c->out[dev], *next = cur;
	int made = 0;
	int fewest_lost = cur ? ci_outbox_lost(c, cur) : 0;
	if (fewest_lost >= CI_LOST_ROTATE) {
		/* the area with the fewest lost slots if few enough, else a new
		 * one, else (at the limit) the one with the fewest */
		ci_outbox *fewest = cur;
		next = NULL;
		for (ci_outbox *o = c->areas; o; o = o->next) {
			if (o->dev != dev)
				continue;
			made++;
			int lost = o == cur ? fewest_lost : ci_outbox_lost(c, o);
			if (lost < fewest_lost) {
				fewest = o;
				fewest_lost = lost;
			}
		}
		if (fewest_lost < CI_LOST_ROTATE || made >= CI_MAX_AREAS)
			next = fewest;
	}
	if (!next) {
		char id[sizeof(cur->process)];
		unsigned n = c->areas_made[dev];
		if (n == 0)
			snprintf(id, sizeof(id), "%s", c->process);
		else
			snprintf(id, sizeof(id), "%s.%u", c->process, n);
		tw_status_t st = ci_outbox_new(c, dev, id, &next, detail, detail_len);
		if (st != TW_OK && !cur)
			return st;
		if (st == TW_OK)
			c->areas_made[dev]++;
		else
			next = cur; /* share the current one, under its bound */
	}
	if (next != cur) {
		next->refs++;
		c->out[dev] = next;
		if (cur)
			ci_outbox_unref(cur);
	}
	ich->area[dev] = next;
	next->refs++;
	*out = next;
	return TW_OK;
}

/* A free slot of o whose event is complete, or -1: the last copies into
 * and out of it are over, so no copy into it ever has to wait on the GPU
 * for a peer's event. *pending counts the free slots whose event is not
 * complete yet, and *since is when the newest of them came back; a query
 * that fails fails the channel (a status other than TW_OK, detail). */
static tw_status_t ci_slot_get(ci_ctx *c, ci_outbox *o, int *slot, int *pending,
                               uint64_t *since, char *detail, size_t detail_len)
{
	*slot = -1;
	*pending = 0;
	*since = 0;
	for (int i = 0; i < TW_CUDA_IPC_SLOTS; i++) {
		if (o->used[i])
			continue;
		bool ready = false;
		tw_status_t st = ci_event_done(c, o->dev, o->events[i], &ready, detail, detail_len);
		if (st != TW_OK)
			return st;
		if (!ready) {
			++*pending;
			if (o->back_ms[i] > *since)
				*since = o->back_ms[i];
			continue;
		}
		o->suspect[i] = false;
		o->used[i] = true;
		*slot = i;
		ci_wait_over(c);
		return TW_OK;
	}
	return TW_OK;
}

/* The slot is free again; `unanswered`: it was given to a receiver that
 * never answered (suspect). */
static void ci_slot_put(ci_ctx *c, ci_outbox *o, int slot, bool unanswered)
{
	o->used[slot] = false;
	o->suspect[slot] = unanswered;
	o->back_ms[slot] = uv_now(&c->cc.base.env->loop->uv);
	tw__cuda_chan_wake(&c->cc);
}

/* Unmaps r (its events and its mapping) on the device it was opened on. */
static void ci_remote_close(ci_ctx *c, ci_remote *r)
{
	const tw_cuda *cu = c->cc.cu;
	char d[TW_DETAIL_MAX];
	if (tw__cuda_use_device(cu, r->ldev, d, sizeof(d)) == TW_OK) {
		for (int i = 0; i < TW_CUDA_IPC_SLOTS; i++)
			(void)cu->cuEventDestroy_v2(r->events[i]);
		(void)cu->cuIpcCloseMemHandle(r->base);
	}
	r->closed = true;
}

static void ci_remote_free(ci_remote *r)
{
	tw__free(r->process);
	tw__free(r);
}

/* A channel that copied from r is gone (every copy of it is over): the
 * last one unmaps r. */
static void ci_remote_unref(ci_ctx *c, ci_remote *r)
{
	if (--r->refs > 0)
		return;
	if (!r->closed) {
		for (ci_remote **pp = &c->remotes; *pp; pp = &(*pp)->next)
			if (*pp == r) {
				*pp = r->next;
				break;
			}
		ci_remote_close(c, r);
	}
	ci_remote_free(r);
}

/* The peer's area for its device rdev as seen from our device ldev, opened
 * on first use with what the peer announced. */
static tw_status_t ci_remote_get(ci_ctx *c, const tw_wire_cuda_ipc_descriptor *info, int32_t rdev,
                                 int ldev, ci_remote **out, char *detail, size_t detail_len)
{
	if (info->mem_handle.n != TW_CU_IPC_HANDLE_SIZE || info->num_events != TW_CUDA_IPC_SLOTS) {
		tw__detail(detail, detail_len,
		           "the peer's staging area has a %zu-byte handle and %zu events (want %d and %d)",
		           info->mem_handle.n, info->num_events, TW_CU_IPC_HANDLE_SIZE,
		           TW_CUDA_IPC_SLOTS);
		return TW_ERR_PROTO;
	}
	for (size_t i = 0; i < info->num_events; i++)
		if (info->events[i].n != TW_CU_IPC_HANDLE_SIZE) {
			tw__detail(detail, detail_len, "the peer's event handle %zu has %zu bytes", i,
			           info->events[i].n);
			return TW_ERR_PROTO;
		}
	/* Known by the area's handle too, not only by the process: a process
	 * with two contexts has two areas (and a restarted container's process
	 * can have the pid of a gone one). */
	for (ci_remote *r = c->remotes; r; r = r->next)
		if (r->rdev == rdev && r->ldev == ldev && strcmp(r->process, info->process.s) == 0 &&
		    memcmp(r->mem, info->mem_handle.s, TW_CU_IPC_HANDLE_SIZE) == 0) {
			*out = r;
			return TW_OK;
		}
	const tw_cuda *cu = c->cc.cu;
	tw_status_t st = tw__cuda_use_device(cu, ldev, detail, detail_len);
	if (st != TW_OK)
		return st;
	ci_remote *r = tw__calloc(1, sizeof(*r));
	if (!r || !(r->process = tw__memdup_str(info->process.s, info->process.n))) {
		tw__free(r);
		tw__detail(detail, detail_len, "out of memory");
		return TW_ERR_NOMEM;
	}
	CUipcMemHandle mh;
	memcpy(mh.reserved, info->mem_handle.s, TW_CU_IPC_HANDLE_SIZE);
	CUresult res = cu->cuIpcOpenMemHandle_v2(&r->base, mh, TW_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	if (res != TW_CUDA_SUCCESS) {
		ci_remote_free(r);
		char eb[160];
		tw__detail(detail, detail_len,
		           "cuIpcOpenMemHandle of process %s's staging area on cuda:%d: %s (are the two "
		           "processes in containers that do not share the GPU?)",
		           info->process.s, ldev, tw__cuda_strerror(cu, res, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	/* Every slot of the area is copied to and from by its index: an area
	 * smaller than the slots would make the driver's copy fault, which
	 * spoils the whole CUDA context, not this pipe. */
	CUdeviceptr abase = 0;
	size_t asize = 0;
	res = cu->cuMemGetAddressRange_v2(&abase, &asize, r->base);
	bool small = res == TW_CUDA_SUCCESS &&
	             (r->base < abase || (uint64_t)(r->base - abase) + TW_CUDA_IPC_SLOT * TW_CUDA_IPC_SLOTS >
	                                         (uint64_t)asize);
	if (res != TW_CUDA_SUCCESS || small) {
		(void)cu->cuIpcCloseMemHandle(r->base);
		ci_remote_free(r);
		if (res != TW_CUDA_SUCCESS)
			return ci_cu_fail(c, "cuMemGetAddressRange of the peer's staging area", res, detail,
			                  detail_len);
		tw__detail(detail, detail_len,
		           "process %s's staging area on cuda:%d has %zu bytes, less than its %d slots "
		           "of %llu",
		           info->process.s, ldev, asize, TW_CUDA_IPC_SLOTS,
		           (unsigned long long)TW_CUDA_IPC_SLOT);
		return TW_ERR_PROTO;
	}
	for (int i = 0; res == TW_CUDA_SUCCESS && i < TW_CUDA_IPC_SLOTS; i++) {
		CUipcEventHandle eh;
		memcpy(eh.reserved, info->events[i].s, TW_CU_IPC_HANDLE_SIZE);
		res = cu->cuIpcOpenEventHandle(&r->events[i], eh);
	}
	if (res != TW_CUDA_SUCCESS) {
		for (int i = 0; i < TW_CUDA_IPC_SLOTS; i++)
			if (r->events[i])
				(void)cu->cuEventDestroy_v2(r->events[i]);
		(void)cu->cuIpcCloseMemHandle(r->base);
		ci_remote_free(r);
		return ci_cu_fail(c, "cuIpcOpenEventHandle of the peer's staging events", res, detail,
		                  detail_len);
	}
	memcpy(r->mem, info->mem_handle.s, TW_CU_IPC_HANDLE_SIZE);
	r->rdev = rdev;
	r->ldev = ldev;
	r->next = c->remotes;
	c->remotes = r;
	*out = r;
	return TW_OK;
}

/* Pinned host memory of one slot per staging slot, for inline bytes
 * (8.3.1): pinned, so that copies to and from it stay asynchronous. */
static tw_status_t ci_pinned(ci_ctx *c, int dev, char **mem, char *detail, size_t detail_len)
{
	if (*mem)
		return TW_OK;
	tw_status_t st = tw__cuda_use_device(c->cc.cu, dev, detail, detail_len);
	if (st != TW_OK)
		return st;
	void *m = NULL;
	CUresult r = c->cc.cu->cuMemAllocHost_v2(&m, TW_CUDA_IPC_SLOT * TW_CUDA_IPC_SLOTS);
	if (r != TW_CUDA_SUCCESS)
		return ci_cu_fail(c, "cuMemAllocHost of the inline staging", r, detail, detail_len);
	*mem = m;
	return TW_OK;
}

/* ---- callbacks ---------------------------------------------------------------------- */

static void ci_chunk_end(ci_chunk *k, tw_status_t st, const char *detail)
{
	if (k->c.which == 0 && k->c.slot >= 0) {
		/* its Descriptor named the slot in the area, and no answer came */
		bool unanswered = st != TW_OK && k->desc_out && !k->inl && !k->replied;
		ci_slot_put(CI_CTX(CI_CH(k)), CI_CH(k)->area[k->c.dev], k->c.slot, unanswered);
		k->c.slot = -1;
	}
	tw__cuda_chunk_end(&k->c, st, detail);
}

static void ci_on_copied(void *arg)
{
	ci_chunk *k = arg;
	tw_cuda_chan *ch = &CI_CH(k)->c;
	k->copied = true;
	tw__cuda_chan_schedule(ch);
	tw__cuda_chan_unref(ch);
}

static void ci_on_reply(tw_conn *c, tw_status_t st, const char *detail, void *buf, uint64_t len,
                        void *arg)
{
	ci_chunk *k = arg;
	ci_channel *ich = CI_CH(k);
	tw_cuda_chan *ch = &ich->c;
	k->io = false;
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, detail);
	} else if (k->asks) {
		/* the first reply to an announcing chunk (8.3.1): empty, the
		 * area opened and the bytes are in; otherwise why not, and this
		 * chunk and every later one from the device go inline */
		k->asks = false;
		ich->asking = false;
		if (len == 0) {
			k->replied = true;
		} else {
			ich->refused[k->c.dev] = true;
			k->inl = k->restage = true;
		}
	} else {
		k->replied = true;
	}
	tw__free(buf);
	tw__cuda_chan_schedule(ch);
	tw__cuda_chan_unref(ch);
}

static void ci_on_bytes(tw_conn *c, tw_status_t st, const char *detail, void *buf, uint64_t len,
                        void *arg)
{
	ci_chunk *k = arg;
	ci_channel *ich = CI_CH(k);
	k->io = false;
	ich->reading = false;
	if (st != TW_OK)
		tw__cuda_chan_fail(&ich->c, st, detail);
	else
		k->bytes_in = true;
	tw__cuda_chan_schedule(&ich->c);
	tw__cuda_chan_unref(&ich->c);
}

static void ci_on_desc(tw_conn *c, tw_status_t st, const char *detail, void *buf, uint64_t len,
                       void *arg)
{
	ci_chunk *k = arg;
	tw_cuda_chan *ch = &CI_CH(k)->c;
	char d[TW_DETAIL_MAX];
	size_t used = 0;
	k->io = false;
	CI_CH(k)->reading = false;
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, detail);
	} else if (tw__wire_decode_cuda_ipc_descriptor(buf, len, &k->desc, &used, d, sizeof(d)) !=
	               TW_OK ||
	           used != len) {
		if (used && used != len)
			tw__detail(d, sizeof(d), "CudaIpcDescriptor: %llu bytes after its end",
			           (unsigned long long)(len - used));
		tw__cuda_chan_fail(ch, TW_ERR_PROTO, d);
	} else {
		k->state = CI_ARRIVED;
	}
	tw__free(buf);
	tw__cuda_chan_schedule(ch);
	tw__cuda_chan_unref(ch);
}

/* ---- the pump ------------------------------------------------------------------------- */

/* An inline chunk (8.3.1): its bytes copied into pinned host memory (its
 * slot's) after the tensor's stream. */
static void ci_send_stage(ci_channel *ich, ci_chunk *k)
{
	ci_ctx *c = CI_CTX(ich);
	tw_cuda_chunk *kc = &k->c;
	char d[TW_DETAIL_MAX];
	ci_outbox *o = ich->area[kc->dev];
	tw_status_t st = ci_pinned(c, kc->dev, &o->pinned, d, sizeof(d));
	if (st == TW_OK) {
		k->host = o->pinned + (uint64_t)kc->slot * TW_CUDA_IPC_SLOT;
		kc->done.fn = ci_on_copied;
		kc->done.arg = k;
		st = tw__cuda_copy(&c->cc, kc->dev, k->host, kc->ptr, kc->n, kc->stream, NULL, NULL,
		                   &kc->done, d, sizeof(d));
	}
	if (st != TW_OK) {
		tw__cuda_chan_fail(&ich->c, st, d);
		return;
	}
	ich->c.refs++;
	k->copied = false;
	k->state = CI_COPYING;
}

/* An inline chunk whose bytes are in host memory: its Descriptor (unless
 * written already), its bytes, and the read of its reply. */
static bool ci_send_inline(ci_channel *ich, ci_chunk *k)
{
	tw_cuda_chan *ch = &ich->c;
	tw_cuda_chunk *kc = &k->c;
	if (!k->desc_out) {
		tw_wire_cuda_ipc_descriptor v = { .device = kc->dev, .slot = (uint64_t)kc->slot };
		tw_nop_writer w;
		tw__nop_writer_init(&w);
		tw__wire_encode_cuda_ipc_descriptor(&w, &v);
		if (tw__channel_write_obj(ich->conn[0], &w, tw__cuda_chan_on_written, ch) != TW_OK)
			goto nomem;
		ch->refs++;
		k->desc_out = true;
	}
	/* the slot, so its pinned memory, is this chunk's until the reply,
	 * which comes after the peer read every byte */
	tw_iov iov = { k->host, kc->n };
	if (ich->conn[0]->ops->write(ich->conn[0], &iov, 1, 0, tw__cuda_chan_on_written, ch) != TW_OK)
		goto nomem;
	ch->refs++;
	k->sent = true;
	if (ich->conn[1]->ops->read_into(ich->conn[1], NULL, 0, ci_on_reply, k) != TW_OK)
		goto nomem;
	ch->refs++;
	k->io = true;
	return true;
nomem:
	tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing inline bytes");
	return false;
}

/* One send chunk as far as it goes; false: later chunks wait. */
static bool ci_send_step(ci_channel *ich, ci_chunk *k)
{
	tw_cuda_chan *ch = &ich->c;
	ci_ctx *c = CI_CTX(ich);
	tw_cuda_chunk *kc = &k->c;
	char d[TW_DETAIL_MAX];
	if (kc->ended)
		return true;
	if (k->inl && !k->sent) {
		/* inline: its frames come before any later chunk's (8.3.1) */
		if (k->state == CI_COPYING && !k->copied)
			return false;
		if (k->restage) { /* refused after its copy into the slot */
			k->restage = false;
			ci_send_stage(ich, k);
			return false;
		}
		return ci_send_inline(ich, k);
	}
	if (k->state != CI_WAIT)
		return true;
	if (ich->asking)
		return false; /* an announcing chunk waits for its first reply */
	ci_outbox *o;
	tw_status_t st = ci_outbox_of(ich, kc->dev, &o, d, sizeof(d));
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, d);
		return false;
	}
	int slot, pending;
	uint64_t since;
	st = ci_slot_get(c, o, &slot, &pending, &since, d, sizeof(d));
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, d);
		return false;
	}
	kc->slot = slot;
	if (kc->slot < 0) {
		/* later chunks wait for this one's slot. Where every slot is
		 * back but none complete, no answer will free one: after
		 * slot_wait_ms the channel gives up (it cannot announce
		 * another area: stock's receivers take one per channel). */
		uint64_t now = uv_now(&c->cc.base.env->loop->uv);
		if (pending > 0 && tw__channel_peer_left(ich->conn[1])) {
			/* no read of ours may be queued to see it (the chunks
			 * before this one are answered): the receiver is gone */
			tw__detail(d, sizeof(d),
			           "the receiver at %s ended its side while this tensor waited for a "
			           "staging slot of cuda:%d",
			           ich->conn[1]->ops->peer(ich->conn[1]), kc->dev);
			tw__cuda_chan_fail(ch, TW_ERR_EOF, d);
		} else if (pending == TW_CUDA_IPC_SLOTS && now - since >= c->slot_wait_ms) {
			tw__detail(d, sizeof(d),
			           "no staging slot of cuda:%d has come free: the copies out of all %d by "
			           "the receivers they were lent to have not ended in %llu ms (those "
			           "receivers may have died; option slot_wait_ms); pipes opened from now "
			           "on get another staging area",
			           kc->dev, TW_CUDA_IPC_SLOTS, (unsigned long long)(now - since));
			tw__cuda_chan_fail(ch, TW_ERR_TIMEDOUT, d);
		} else if (pending > 0) {
			ci_poll_later(c);
		}
		return false;
	}
	if (ich->refused[kc->dev]) {
		/* the peer could not open this device's area: the slot only
		 * bounds what is in flight */
		k->inl = true;
		ci_send_stage(ich, k);
		return false;
	}
	CUevent slot_ev = o->events[kc->slot];
	kc->done.fn = ci_on_copied;
	kc->done.arg = k;
	st = tw__cuda_copy(&c->cc, kc->dev,
	                   (void *)(uintptr_t)(o->base + (uint64_t)kc->slot * TW_CUDA_IPC_SLOT),
	                   kc->ptr, kc->n, kc->stream, NULL, slot_ev, &kc->done, d, sizeof(d));
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, d);
		return false;
	}
	ch->refs++;
	k->state = CI_COPYING;
	/* the first descriptor of this channel for the device carries the
	 * staging area's handles */
	tw_wire_cuda_ipc_descriptor v = { .device = kc->dev, .slot = (uint64_t)kc->slot };
	tw_wire_str evs[TW_CUDA_IPC_SLOTS];
	if (!ich->announced[kc->dev]) {
		v.has_outbox = true;
		v.process = (tw_wire_str){ o->process, strlen(o->process) };
		v.mem_handle = (tw_wire_str){ o->mem.reserved, TW_CU_IPC_HANDLE_SIZE };
		for (int i = 0; i < TW_CUDA_IPC_SLOTS; i++)
			evs[i] = (tw_wire_str){ o->ev[i].reserved, TW_CU_IPC_HANDLE_SIZE };
		v.num_events = TW_CUDA_IPC_SLOTS;
		v.events = evs;
	}
	/* with the proof, the first reply to the announcing chunk may be a
	 * refusal, and nothing else goes out on connection 0 before it */
	k->asks = ich->proof && !ich->announced[kc->dev];
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_cuda_ipc_descriptor(&w, &v);
	st = tw__channel_write_obj(ich->conn[0], &w, tw__cuda_chan_on_written, ch);
	if (st == TW_OK) {
		ch->refs++;
		k->desc_out = true;
		st = k->asks ? ich->conn[1]->ops->read_alloc(ich->conn[1], CI_REFUSAL_MAX, ci_on_reply, k)
		             : ich->conn[1]->ops->read_into(ich->conn[1], NULL, 0, ci_on_reply, k);
	}
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing a descriptor");
		return false;
	}
	ch->refs++;
	k->io = true;
	ich->announced[kc->dev] = true;
	ich->asking = k->asks;
	return !k->asks;
}

static ci_announce *ci_announced(ci_channel *ich, int32_t rdev)
{
	for (ci_announce *a = ich->peer; a; a = a->next)
		if (a->rdev == rdev)
			return a;
	return NULL;
}

/* Keeps what a descriptor announced about the peer's device (the strings
 * move over). */
static bool ci_remember(ci_channel *ich, tw_wire_cuda_ipc_descriptor *v)
{
	if (!v->has_outbox || ci_announced(ich, v->device))
		return true;
	ci_announce *a = tw__calloc(1, sizeof(*a));
	if (!a)
		return false;
	a->rdev = v->device;
	a->info = *v;
	memset(v, 0, sizeof(*v));
	v->device = a->rdev;
	v->slot = a->info.slot;
	a->next = ich->peer;
	ich->peer = a;
	return true;
}

/* The chunk's bytes come inline (8.3.1): the next frame on connection 0,
 * into pinned memory kept for the sender's slot (which the sender holds
 * until this chunk's reply). */
static void ci_recv_inline(ci_channel *ich, ci_chunk *k, ci_announce *a)
{
	tw_cuda_chunk *kc = &k->c;
	char d[TW_DETAIL_MAX];
	k->inl = true;
	k->state = CI_BYTES;
	tw_status_t st = ci_pinned(CI_CTX(ich), kc->dev, &a->pinned, d, sizeof(d));
	if (st != TW_OK) {
		tw__cuda_chan_fail(&ich->c, st, d);
		return;
	}
	k->host = a->pinned + k->desc.slot * TW_CUDA_IPC_SLOT;
	if (ich->conn[0]->ops->read_into(ich->conn[0], k->host, kc->n, ci_on_bytes, k) != TW_OK) {
		tw__cuda_chan_fail(&ich->c, TW_ERR_NOMEM, "out of memory queueing inline bytes' read");
		return;
	}
	ich->c.refs++;
	k->io = true;
	ich->reading = true;
}

static void ci_recv_step(ci_channel *ich, ci_chunk *k)
{
	tw_cuda_chan *ch = &ich->c;
	ci_ctx *c = CI_CTX(ich);
	tw_cuda_chunk *kc = &k->c;
	char d[TW_DETAIL_MAX];
	if (kc->ended)
		return;
	if (k->state == CI_WAIT && !k->io) {
		if (ich->proof && ich->reading)
			return; /* one frame at a time: the one read may be followed by bytes */
		if (ich->conn[0]->ops->read_alloc(ich->conn[0], CI_DESC_MAX, ci_on_desc, k) != TW_OK) {
			tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing a descriptor read");
			return;
		}
		ch->refs++;
		k->io = true;
		ich->reading = true;
		return;
	}
	if (k->state == CI_BYTES && k->bytes_in) {
		kc->done.fn = ci_on_copied;
		kc->done.arg = k;
		tw_status_t st = tw__cuda_copy(&c->cc, kc->dev, kc->ptr, k->host, kc->n, kc->stream,
		                               NULL, NULL, &kc->done, d, sizeof(d));
		if (st != TW_OK) {
			tw__cuda_chan_fail(ch, st, d);
			return;
		}
		ch->refs++;
		k->state = CI_COPYING;
		return;
	}
	if (k->state != CI_ARRIVED)
		return;
	tw_wire_cuda_ipc_descriptor *v = &k->desc;
	bool announcing = v->has_outbox && !ci_announced(ich, v->device);
	if (!ci_remember(ich, v)) {
		tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory");
		return;
	}
	ci_announce *a = ci_announced(ich, v->device);
	const tw_wire_cuda_ipc_descriptor *info = a ? &a->info : NULL;
	if (!info) {
		tw__detail(d, sizeof(d),
		           "a Descriptor for device %d whose staging area was never announced",
		           (int)v->device);
		tw__cuda_chan_fail(ch, TW_ERR_PROTO, d);
		return;
	}
	if (v->slot >= TW_CUDA_IPC_SLOTS) {
		tw__detail(d, sizeof(d), "a Descriptor naming slot %llu of %d",
		           (unsigned long long)v->slot, TW_CUDA_IPC_SLOTS);
		tw__cuda_chan_fail(ch, TW_ERR_PROTO, d);
		return;
	}
	if (a->refused) {
		ci_recv_inline(ich, k, a);
		return;
	}
	ci_remote *r = a->opened[kc->dev]; /* this channel's reference, or none yet */
	tw_status_t st = r ? TW_OK : ci_remote_get(c, info, v->device, kc->dev, &r, d, sizeof(d));
	if (st == TW_ERR_SYS && ich->proof && announcing) {
		/* the proof (8.3.1): the area does not open here; say why, in
		 * order, and take this device's chunks inline from now on */
		a->refused = true;
		k->refuse = true;
		snprintf(k->why, sizeof(k->why), "%.*s", CI_REFUSAL_MAX, d);
		for (char *p = k->why; *p; p++)
			if (*p < 0x20 || *p > 0x7e)
				*p = '?';
		ci_recv_inline(ich, k, a);
		return;
	}
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, d);
		return;
	}
	if (!a->opened[kc->dev]) {
		a->opened[kc->dev] = r;
		r->refs++;
	}
	CUevent slot_ev = r->events[v->slot];
	/* the writer's copy into the slot, seen over (ci_event_done); a writer
	 * that left before fails the read (4.4.e) */
	bool ready = false;
	st = ci_event_done(c, kc->dev, slot_ev, &ready, d, sizeof(d));
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, d);
		return;
	}
	if (!ready) {
		if (tw__channel_writer_left(ich->conn[0], d, sizeof(d)))
			tw__cuda_chan_fail(ch, TW_ERR_EOF, d);
		else
			ci_poll_later(c);
		return;
	}
	ci_wait_over(c);
	/* no stream waits for the event: it is complete, and a wait queued
	 * now could meet a record made in between by a peer that then dies */
	kc->done.fn = ci_on_copied;
	kc->done.arg = k;
	st = tw__cuda_copy(&c->cc, kc->dev, kc->ptr,
	                   (const void *)(uintptr_t)(r->base + v->slot * TW_CUDA_IPC_SLOT), kc->n,
	                   kc->stream, NULL, slot_ev, &kc->done, d, sizeof(d));
	if (st != TW_OK) {
		tw__cuda_chan_fail(ch, st, d);
		return;
	}
	ch->refs++;
	k->state = CI_COPYING;
}

/* Ends what is over: sends answered and copied, receives whose bytes are
 * in (their replies written in order); on failure what nothing is under
 * way for. */
static void ci_settle(ci_channel *ich, int which)
{
	tw_cuda_chan *ch = &ich->c;
	bool in_order = true;
	for (tw_cuda_chunk *kc = ch->q[which]; kc; kc = kc->next) {
		ci_chunk *k = (ci_chunk *)kc;
		if (kc->ended)
			continue;
		bool running = k->io || (k->state == CI_COPYING && !k->copied);
		char d[TW_DETAIL_MAX];
		/* a copy out of the writer's slot, over: the writer puts a slot
		 * back for other sends only after its end is out (4.4.e) */
		if (which == 1 && k->copied && in_order && ch->failed == TW_OK &&
		    tw__channel_writer_left(ich->conn[0], d, sizeof(d)))
			tw__cuda_chan_fail(ch, TW_ERR_EOF, d);
		if (which == 0 && k->replied && k->copied) {
			ci_chunk_end(k, TW_OK, "");
		} else if (which == 1 && k->refuse && in_order && ch->failed == TW_OK) {
			/* k->why outlives the write: the chunk ends only once its
			 * bytes came, which the sender sends after reading this, or
			 * after the channel failed and closed the connection */
			k->refuse = false;
			tw_iov why = { k->why, strlen(k->why) };
			if (ich->conn[1]->ops->write(ich->conn[1], &why, 1, TW_WRITE_OBJECT,
			                             tw__cuda_chan_on_written, ch) == TW_OK)
				ch->refs++;
			else
				tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing a refusal");
		} else if (which == 1 && k->copied && in_order && ch->failed == TW_OK) {
			tw_iov none = { NULL, 0 };
			if (ich->conn[1]->ops->write(ich->conn[1], &none, 1, 0, tw__cuda_chan_on_written, ch) == TW_OK) {
				ch->refs++;
				ci_chunk_end(k, TW_OK, "");
			} else {
				tw__cuda_chan_fail(ch, TW_ERR_NOMEM, "out of memory queueing a reply");
			}
		} else if (ch->failed != TW_OK && !running) {
			ci_chunk_end(k, ch->failed, ch->fail_detail);
		}
		if (!kc->ended)
			in_order = false;
	}
}

static void ci_free_chunk(tw_cuda_chunk *kc)
{
	tw__wire_cuda_ipc_descriptor_free(&((ci_chunk *)kc)->desc);
}

static void ci_pump(tw_cuda_chan *ch)
{
	ci_channel *ich = (ci_channel *)ch;
	ch->refs++;
	if (ch->failed == TW_OK && ch->open)
		for (tw_cuda_chunk *kc = ch->q[0]; kc; kc = kc->next)
			if (!ci_send_step(ich, (ci_chunk *)kc))
				break;
	if (ch->failed == TW_OK && ch->open)
		for (tw_cuda_chunk *kc = ch->q[1]; kc && ch->failed == TW_OK; kc = kc->next)
			ci_recv_step(ich, (ci_chunk *)kc);
	if (ch->failed != TW_OK)
		for (int i = 0; i < 2; i++)
			if (ich->conn[i]) {
				ich->conn[i]->ops->close(ich->conn[i]);
				ich->conn[i] = NULL;
			}
	ci_settle(ich, 0);
	ci_settle(ich, 1);
	tw__cuda_chan_sweep(ch, 0, ci_free_chunk);
	tw__cuda_chan_sweep(ch, 1, ci_free_chunk);
	tw__cuda_chan_unref(ch);
}

static void ci_free(tw_cuda_chan *ch)
{
	ci_channel *ich = (ci_channel *)ch;
	while (ich->peer) {
		ci_announce *a = ich->peer;
		ich->peer = a->next;
		if (a->pinned) /* every copy out of it is over: no reference is left */
			(void)CI_CTX(ich)->cc.cu->cuMemFreeHost(a->pinned);
		for (int i = 0; i < TW_CUDA_CTX_MAX_DEVICES; i++) /* and out of these */
			if (a->opened[i])
				ci_remote_unref(CI_CTX(ich), a->opened[i]);
		tw__wire_cuda_ipc_descriptor_free(&a->info);
		tw__free(a);
	}
	for (int i = 0; i < TW_CUDA_CTX_MAX_DEVICES; i++)
		if (ich->area[i])
			ci_outbox_unref(ich->area[i]);
	tw__free(ich);
}

static const tw_cuda_chan_ops ci_chan_ops = {
	.pump = ci_pump,
	.free = ci_free,
	.chunk_struct = sizeof(ci_chunk),
	.chunk_bytes = TW_CUDA_IPC_SLOT,
};

static const tw_channel_instance_ops ci_instance_ops = {
	.send = tw__cuda_chan_send,
	.recv = tw__cuda_chan_recv,
	.close = tw__cuda_chan_close_op,
	.acked_by_peer = true,
	.max_tensor = tw__cuda_chan_max_tensor,
};

static size_t ci_num_connections(tw_channel_ctx *c)
{
	return 2;
}

static tw_status_t ci_open(tw_channel_ctx *base, tw_endpoint_t endpoint, tw_conn *const *conns,
                           size_t num_conns, unsigned flags, tw_channel **out, char *detail,
                           size_t detail_len)
{
	ci_ctx *c = (ci_ctx *)base;
	ci_channel *ch = num_conns == 2 ? tw__calloc(1, sizeof(*ch)) : NULL;
	if (!ch) {
		for (size_t i = 0; i < num_conns; i++)
			conns[i]->ops->close(conns[i]);
		tw__detail(detail, detail_len, num_conns == 2 ? "cuda_ipc channel: out of memory"
		                                              : "cuda_ipc channel: needs 2 connections");
		return num_conns == 2 ? TW_ERR_NOMEM : TW_ERR_INVAL;
	}
	ch->conn[0] = conns[0];
	ch->conn[1] = conns[1];
	ch->proof = (flags & TW_CHANNEL_PROOF) != 0;
	tw__cuda_chan_open(&ch->c, &c->cc, &ci_instance_ops, &ci_chan_ops);
	*out = &ch->c.base;
	return TW_OK;
}

/* ---- context --------------------------------------------------------------------------- */

static bool ci_decode(const char *desc, size_t len, tw_wire_cuda_ipc_device *v)
{
	size_t used = 0;
	if (tw__wire_decode_cuda_ipc_device(desc, len, v, &used, NULL, 0) != TW_OK)
		return false;
	if (used == len)
		return true;
	tw__wire_cuda_ipc_device_free(v);
	return false;
}

/* Our ordinal of the device with this UUID (lowercase 8-4-4-4-12), -1 if
 * this process does not see it. */
static int ci_ordinal_of(ci_ctx *c, const tw_wire_str *uuid)
{
	for (size_t i = 0; i < c->cc.base.num_devices; i++) {
		tw_wire_cuda_ipc_device v;
		const tw_channel_device *d = &c->cc.base.devices[i];
		if (!ci_decode(d->descriptor, d->descriptor_len, &v))
			continue;
		bool same = v.device_uuid.n == uuid->n && memcmp(v.device_uuid.s, uuid->s, uuid->n) == 0;
		tw__wire_cuda_ipc_device_free(&v);
		if (same)
			return d->device.index;
	}
	return -1;
}

/* Does the peer offer (so see) the device with this UUID? */
static bool ci_offer_has(const tw_channel_offer *offer, const tw_wire_str *uuid)
{
	bool found = false;
	for (size_t i = 0; i < offer->num && !found; i++) {
		tw_wire_cuda_ipc_device v;
		if (!ci_decode(offer->descriptor[i], offer->len[i], &v))
			continue;
		found = v.device_uuid.n == uuid->n && memcmp(v.device_uuid.s, uuid->s, uuid->n) == 0;
		tw__wire_cuda_ipc_device_free(&v);
	}
	return found;
}

/* As stock (the same boot, other pids, devices that reach each other),
 * and both ways: the peer's device must be visible here, and ours there
 * (among the devices it offers), so that both ends, each selecting with
 * its own view (spec 3.7), pick the same pairs. Stock looks up only the
 * peer's device, and throws when this process does not see it (T03). */
static bool ci_can_communicate(tw_channel_ctx *base, const tw_channel_device *local,
                               const char *remote, size_t remote_len,
                               const tw_channel_offer *offer)
{
	ci_ctx *c = (ci_ctx *)base;
	tw_wire_cuda_ipc_device l, r;
	if (!ci_decode(local->descriptor, local->descriptor_len, &l))
		return false;
	if (!ci_decode(remote, remote_len, &r)) {
		tw__wire_cuda_ipc_device_free(&l);
		return false;
	}
	bool ok = l.boot_id.n == r.boot_id.n && memcmp(l.boot_id.s, r.boot_id.s, l.boot_id.n) == 0 &&
	          l.pid != r.pid;
	int lo = local->device.index, ro = ok ? ci_ordinal_of(c, &r.device_uuid) : -1;
	ok = ok && ro >= 0 && ci_offer_has(offer, &l.device_uuid);
	if (ok && ro != lo) {
		int a = 0, b = 0;
		ok = c->cc.cu->cuDeviceCanAccessPeer(&a, lo, ro) == TW_CUDA_SUCCESS &&
		     c->cc.cu->cuDeviceCanAccessPeer(&b, ro, lo) == TW_CUDA_SUCCESS && a && b;
	}
	tw__wire_cuda_ipc_device_free(&l);
	tw__wire_cuda_ipc_device_free(&r);
	return ok;
}

static void ci_shutdown(tw_channel_ctx *base)
{
	ci_ctx *c = (ci_ctx *)base;
	c->shut = true;
	if (c->poll_init) {
		uv_timer_stop(&c->poll);
		uv_close((uv_handle_t *)&c->poll, NULL);
		c->poll_init = false;
	}
	tw__cuda_ctx_drain(&c->cc);
	while (c->remotes) {
		ci_remote *r = c->remotes;
		c->remotes = r->next;
		ci_remote_close(c, r);
		if (r->refs == 0)
			ci_remote_free(r);
	}
	for (int dev = 0; dev < TW_CUDA_CTX_MAX_DEVICES; dev++)
		if (c->out[dev]) {
			c->out[dev]->refs--;
			c->out[dev] = NULL;
		}
	/* a channel that outlives this keeps its area's struct (no memory) */
	while (c->areas) {
		ci_outbox *o = c->areas;
		c->areas = o->next;
		if (o->refs == 0)
			ci_outbox_free(c, o);
		else
			ci_outbox_close(c, o);
	}
}

static void ci_destroy(tw_channel_ctx *base)
{
	ci_ctx *c = (ci_ctx *)base;
	tw__cuda_ctx_fini(&c->cc);
	tw__free(c);
}

static tw_status_t ci_descriptor(ci_ctx *c, int dev, const char *boot, tw_channel_device *out,
                                 char *detail, size_t detail_len)
{
	CUuuid u;
	CUdevice h;
	CUresult r = c->cc.cu->cuDeviceGet(&h, dev);
	if (r == TW_CUDA_SUCCESS)
		r = c->cc.cu->cuDeviceGetUuid_v2(&u, h);
	if (r != TW_CUDA_SUCCESS)
		return ci_cu_fail(c, "cuDeviceGetUuid", r, detail, detail_len);
	const unsigned char *b = (const unsigned char *)u.bytes;
	char uuid[CI_UUID_LEN + 1];
	snprintf(uuid, sizeof(uuid),
	         "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
	         b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
	         b[15]);
	tw_wire_cuda_ipc_device v = { { (char *)boot, strlen(boot) }, (int64_t)getpid(),
		                          { uuid, CI_UUID_LEN } };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_cuda_ipc_device(&w, &v);
	tw_status_t st = tw__nop_writer_finish(&w);
	if (st == TW_OK && !(out->descriptor = tw__memdup_str(w.buf, w.len)))
		st = TW_ERR_NOMEM;
	out->descriptor_len = w.len;
	tw__nop_writer_free(&w);
	if (st != TW_OK)
		tw__detail(detail, detail_len, "out of memory");
	return st;
}

static tw_status_t ci_create(const tw_channel_env *env, const char *options, tw_channel_ctx **out,
                             char *detail, size_t detail_len)
{
	typedef struct {
		uint64_t slot_wait_ms;
	} ci_opts;
	ci_opts o = { CI_SLOT_WAIT_MS };
	static const tw_option table[] = {
		{ "slot_wait_ms", TW_OPT_U64, offsetof(ci_opts, slot_wait_ms), 0, 1, 3600000 },
	};
	tw_status_t st = tw__options_parse("cuda_ipc channel", options, table, 1, &o, NULL, 0,
	                                   detail, detail_len);
	if (st != TW_OK)
		return st;
	char boot[TW_BOOT_ID_LEN + 1], pidns[64], d[TW_DETAIL_MAX];
	st = tw__identity_boot(boot, sizeof(boot), d, sizeof(d));
	if (st == TW_OK)
		st = tw__identity_ns("pid", pidns, sizeof(pidns), d, sizeof(d));
	if (st != TW_OK) {
		tw__detail(detail, detail_len, "cuda_ipc channel: not viable: %s", d);
		return TW_ERR_UNSUPPORTED;
	}
	ci_ctx *c = tw__calloc(1, sizeof(*c));
	if (!c) {
		tw__detail(detail, detail_len, "cuda_ipc channel: out of memory");
		return TW_ERR_NOMEM;
	}
	snprintf(c->process, sizeof(c->process), "%s_%d", pidns, (int)getpid());
	c->slot_wait_ms = o.slot_wait_ms;
	c->poll_ms = 1;
	st = tw__cuda_ctx_init(&c->cc, &tw__cuda_ipc_channel_ops, env, false, detail, detail_len);
	for (int i = 0; st == TW_OK && i < c->cc.num_cuda; i++) {
		st = ci_descriptor(c, i, boot, &c->cc.base.devices[i], d, sizeof(d));
		if (st != TW_OK)
			tw__detail(detail, detail_len, "cuda_ipc channel: %s", d);
	}
	if (st != TW_OK) {
		if (c->cc.cu)
			ci_destroy(&c->cc.base);
		else
			tw__free(c);
		return st;
	}
	*out = &c->cc.base;
	return TW_OK;
}

const tw_channel_ops tw__cuda_ipc_channel_ops = {
	.kind = "cuda_ipc",
	.create = ci_create,
	.can_communicate = ci_can_communicate,
	.num_connections = ci_num_connections,
	.speaks_proof = true,
	.open = ci_open,
	.shutdown = ci_shutdown,
	.destroy = ci_destroy,
};
