/*
 * cuda_gdr.c - the cuda_gdr channel (spec/wire.md 4.6.4): device tensors
 * moved by the RDMA NIC straight from and into GPU memory (GPUDirect RDMA),
 * on queue pairs of the channel's own, one per pair of NICs of the two
 * sides. Serves every cuda:N that has a usable NIC; device descriptor "*".
 *
 * Context: each GPU is paired with the nearest NIC that has an active port
 * (platform/pci.h, compared by PCI path components; a GPU the host's sysfs
 * does not show takes the NIC given to the fewest GPUs so far). The NICs in
 * use are numbered in the verbs device list's order, as stock numbers them.
 * Each has a protection domain, one completion queue watched from the loop,
 * a cache of memory registrations (one per device allocation, by the
 * driver's buffer id) and a small pinned staging area. The context proves
 * it can work before it is offered: it registers device memory of each
 * paired GPU on its NIC (a host without a peer-memory client such as
 * nvidia-peermem fails there, with the reason).
 *
 * Channel: connection 0 carries Descriptors (sender to receiver), connection
 * 1 the handshake and the ReadyToReceives (receiver to sender). Both sides
 * write HandshakeNumNics, then, once the peer's arrived, one RC queue pair
 * per (local NIC, remote NIC) and their HandshakeSetupInfo; each pair goes
 * to RTS towards the peer's entry. Per tensor, in order: the sender writes
 * Descriptor{originNicIdx} and reads ReadyToReceive{destinationNicIdx}; the
 * receiver reads the Descriptor, waits for the tensor's stream, posts one
 * receive per chunk on the queue pair of the two NICs and then writes the
 * ReadyToReceive; the sender, once its stream got to the send, posts one
 * SEND per chunk. Chunks are at most the smaller of the two NICs'
 * max_msg_sz (T19).
 *
 * Unlike stock: a receive chunk of at most TW_GDR_CQE_BYTES is posted into
 * pinned host memory and copied to the device afterwards, because a NIC
 * may scatter so short a message into the completion entry and have the
 * CPU copy it into the buffer inside ibv_poll_cq, which faults on device
 * memory (mlx5, T20). Nothing of that shows on the wire. Every limit of
 * the device (max_qp_wr, max_cqe) bounds the work requests posted; a
 * completion's status is read first and nothing else of it is trusted on
 * error (the work request id excepted). Every failure fails the channel
 * with a detail naming the verb or the status, the device and errno.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "channel/cuda/cuda.h"
#include "channel/cuda/cuda_common.h"
#include "channel/cuda/gdr_plan.h"
#include "platform/error.h"
#include "platform/mutant.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "transport/ibv/device.h"
#include "wire/nop.h"
#include "wire/packets.h"

#define TW_GDR_WR_MAX 1024       /* work requests per direction and NIC (stock: 1024) */
#define TW_GDR_CQE_BYTES 64      /* receives this short are staged through host memory */
#define TW_GDR_STAGE_SLOTS 256
#define TW_GDR_CHUNK_ALL ((uint64_t)1 << 62) /* the framework's chunk: a whole tensor */
#define TW_GDR_OBJ_MAX (1u << 20)           /* the longest control object read */
#define GD_WHO "cuda_gdr channel"

typedef struct gd_channel gd_channel;
typedef struct gd_chunk gd_chunk;

/* a registration of one device allocation */
typedef struct gd_mr {
	unsigned long long id;
	uint64_t base, size;
	struct ibv_mr *mr;
	struct gd_mr *next;
} gd_mr;

/* a posted work request (wr_id = its index) */
typedef struct gd_req {
	bool used, recv;
	gd_channel *ch; /* holds a reference */
	gd_chunk *k;
	uint64_t n;
	char *dst;      /* staged receive: where the bytes go on the device */
	int stage;      /* staged receive: the slot, else -1 */
	uint32_t next_free;
} gd_req;

typedef struct gd_ctx gd_ctx;

typedef struct gd_nic {
	gd_ctx *owner;
	tw_ibv_choice ch; /* ctx open, port, GID, MTU, max_msg_sz */
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	uv_poll_t poll;
	bool polling;
	uv_timer_t rearm; /* polls again where arming the queue failed (gd_drain) */
	bool rearm_init;
	uint64_t rearm_ms; /* its next wait: 1 ms, doubling while arming keeps failing */
	uint32_t wr_max, sends_avail, recvs_avail;
	gd_req *reqs; /* 2 * wr_max */
	uint32_t free_head, outstanding;
	gd_mr *mrs;
	char *stage; /* TW_GDR_STAGE_SLOTS * TW_GDR_CQE_BYTES, pinned and registered */
	struct ibv_mr *stage_mr;
	bool stage_used[TW_GDR_STAGE_SLOTS];
} gd_nic;

struct gd_ctx {
	tw_cuda_ctx cc;
	int num_nics;
	gd_nic nics[TW_GDR_MAX_NICS];
	int gpu_nic[TW_CUDA_CTX_MAX_DEVICES]; /* -1: the GPU is not served */
	gd_channel *all; /* every channel not yet freed (their queue pairs) */
};

/* one tensor (the framework's chunk: chunk_bytes covers any tensor) */
struct gd_chunk {
	tw_cuda_chunk c;
	bool ready_asked, ready;  /* the tensor's stream got to this operation */
	bool ctl_posted;          /* send: Descriptor written, ReadyToReceive read queued;
	                             recv: Descriptor read queued */
	bool ctl_wait;            /* that read has not called back */
	bool rtr_sent;            /* recv: ReadyToReceive written */
	bool got_peer;            /* its answer arrived */
	uint32_t peer_nic;
	bool all_posted;          /* every work request is posted (recv: and the RTR written) */
	uint64_t posted;          /* bytes posted so far */
	struct ibv_mr *mr;        /* the registration of its allocation, once looked up */
	uint32_t pending;         /* work requests and copies not over yet */
};

typedef struct gd_qp {
	struct ibv_qp *qp;
	uint32_t chunk; /* the smaller max_msg_sz of the two NICs */
} gd_qp;

typedef enum gd_phase { GD_HELLO, GD_SETUP, GD_READY } gd_phase;

struct gd_channel {
	tw_cuda_chan c;
	tw_conn *conn[2];
	gd_phase phase;
	uint32_t num_remote;
	gd_qp *qps; /* [local * num_remote + remote] */
	bool qps_dead;
	gd_channel *next_all, *prev_all;
};

#define GD_CTX(ch) ((gd_ctx *)(ch)->c.ctx)

static void gd_pump(tw_cuda_chan *base);

/* ---- helpers -------------------------------------------------------------------------- */

static void gd_fail_verb(gd_channel *ch, const char *verb, const char *dev, int err)
{
	char eb[128], d[TW_DETAIL_MAX];
	tw__detail(d, sizeof(d), "%s on %s: %s", verb, dev, tw__strerror(err, eb, sizeof(eb)));
	tw__cuda_chan_fail(&ch->c, err == ENOMEM ? TW_ERR_NOMEM : TW_ERR_SYS, d);
}

static tw_status_t gd_write_obj(gd_channel *ch, int conn, tw_nop_writer *w)
{
	tw_status_t st = tw__channel_write_obj(ch->conn[conn], w, tw__cuda_chan_on_written, &ch->c);
	if (st == TW_OK)
		ch->c.refs++;
	else
		tw__cuda_chan_fail(&ch->c, st, "out of memory queueing a control message");
	return st;
}

static tw_status_t gd_write_index(gd_channel *ch, int conn, uint64_t value)
{
	tw_wire_cuda_gdr_index v = { value };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_cuda_gdr_index(&w, &v);
	return gd_write_obj(ch, conn, &w);
}

/* Decodes a whole Structure(1){uint64} frame; false (channel failed) if not. */
static bool gd_read_index(gd_channel *ch, const void *buf, uint64_t len, const char *what,
                          uint64_t *out)
{
	tw_wire_cuda_gdr_index v;
	size_t used = 0;
	char d[TW_DETAIL_MAX];
	if (tw__wire_decode_cuda_gdr_index(buf, len, &v, &used, d, sizeof(d)) != TW_OK ||
	    used != len) {
		char d2[TW_DETAIL_MAX];
		tw__detail(d2, sizeof(d2), "%s: %s", what,
		           used != len && used ? "bytes after its end" : d);
		tw__cuda_chan_fail(&ch->c, TW_ERR_PROTO, d2);
		return false;
	}
	*out = v.value;
	return true;
}

/* ---- NICs: work requests, registrations, staging ---------------------------------------- */

static gd_req *gd_req_get(gd_nic *nic, gd_channel *ch, gd_chunk *k, bool recv, uint32_t *id)
{
	if (nic->free_head == UINT32_MAX)
		return NULL;
	*id = nic->free_head;
	gd_req *r = &nic->reqs[*id];
	nic->free_head = r->next_free;
	memset(r, 0, sizeof(*r));
	r->used = true;
	r->recv = recv;
	r->ch = ch;
	r->k = k;
	r->stage = -1;
	nic->outstanding++;
	ch->c.refs++;
	return r;
}

static void gd_req_put(gd_nic *nic, uint32_t id)
{
	gd_req *r = &nic->reqs[id];
	r->used = false;
	r->next_free = nic->free_head;
	nic->free_head = id;
	nic->outstanding--;
}

/* The registration of the allocation holding ptr on this NIC (made on
 * first use, kept until the context goes). NULL with a detail. */
static struct ibv_mr *gd_mr_of(gd_ctx *c, gd_nic *nic, int dev, void *ptr, char *detail,
                               size_t detail_len)
{
	const tw_cuda *cu = c->cc.cu;
	char eb[160];
	tw_status_t st = tw__cuda_use_device(cu, dev, detail, detail_len);
	if (st != TW_OK)
		return NULL;
	CUdeviceptr base = 0;
	size_t size = 0;
	unsigned long long id = 0;
	CUresult r = cu->cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)ptr);
	if (r == TW_CUDA_SUCCESS)
		r = cu->cuPointerGetAttribute(&id, TW_CU_POINTER_ATTRIBUTE_BUFFER_ID, base);
	if (r != TW_CUDA_SUCCESS) {
		tw__detail(detail, detail_len, "the allocation of cuda:%d address %p: %s", dev, ptr,
		           tw__cuda_strerror(cu, r, eb, sizeof(eb)));
		return NULL;
	}
	for (gd_mr *m = nic->mrs; m; m = m->next)
		if (m->id == id)
			return m->mr;
	/* a registration of an allocation that overlaps this new one is of
	 * memory freed since: it goes, so the cache holds live allocations only
	 * (stock keeps every registration until its context goes) */
	for (gd_mr **pp = &nic->mrs; *pp;) {
		gd_mr *o = *pp;
		if (o->base < base + size && base < o->base + o->size) {
			*pp = o->next;
			(void)ibv_dereg_mr(o->mr);
			tw__free(o);
		} else {
			pp = &o->next;
		}
	}
	gd_mr *m = tw__calloc(1, sizeof(*m));
	if (!m) {
		tw__detail(detail, detail_len, "out of memory");
		return NULL;
	}
	m->id = id;
	m->mr = ibv_reg_mr(nic->pd, (void *)(uintptr_t)base, size, IBV_ACCESS_LOCAL_WRITE);
	if (!m->mr) {
		int e = errno;
		tw__detail(detail, detail_len,
		           "ibv_reg_mr of %zu bytes of cuda:%d memory on %s: %s (GPUDirect RDMA needs "
		           "a peer-memory client, such as the nvidia-peermem module)",
		           size, dev, nic->ch.dev_name, tw__strerror(e, eb, sizeof(eb)));
		tw__free(m);
		return NULL;
	}
	m->base = base;
	m->size = size;
	m->next = nic->mrs;
	nic->mrs = m;
	return m->mr;
}

static int gd_stage_get(gd_nic *nic)
{
	for (int i = 0; i < TW_GDR_STAGE_SLOTS; i++)
		if (!nic->stage_used[i]) {
			nic->stage_used[i] = true;
			return i;
		}
	return -1;
}

/* ---- completions ----------------------------------------------------------------------- */

/* Ends a tensor once nothing of it is under way: all its work requests
 * posted and over (or the channel failed), no copy, wait or read left. */
static void gd_chunk_settle(gd_channel *ch, gd_chunk *k)
{
	if (k->c.ended || k->pending || k->ctl_wait)
		return;
	if (k->all_posted || ch->c.failed != TW_OK)
		tw__cuda_chunk_end(&k->c, ch->c.failed, ch->c.fail_detail);
}

typedef struct gd_copy {
	tw_cuda_done done;
	gd_chunk *k;
	gd_nic *nic;
	int slot;
} gd_copy;

static void gd_on_staged_copied(void *arg)
{
	gd_copy *cp = arg;
	gd_channel *ch = (gd_channel *)cp->k->c.op->ch;
	cp->nic->stage_used[cp->slot] = false;
	cp->k->pending--;
	gd_chunk_settle(ch, cp->k);
	tw__free(cp);
	tw__cuda_chan_wake(&GD_CTX(ch)->cc);
	tw__cuda_chan_unref(&ch->c);
}

static void gd_on_wc(gd_ctx *c, gd_nic *nic, const struct ibv_wc *wc)
{
	if (wc->wr_id >= 2u * nic->wr_max || !nic->reqs[wc->wr_id].used)
		return; /* not ours: cannot happen, and nothing to tell */
	uint32_t id = (uint32_t)wc->wr_id;
	gd_req *r = &nic->reqs[id];
	gd_channel *ch = r->ch;
	gd_chunk *k = r->k;
	if (r->recv)
		nic->recvs_avail++;
	else
		nic->sends_avail++;
	bool staged_copy = false;
	if (wc->status != IBV_WC_SUCCESS) {
		char d[TW_DETAIL_MAX];
		tw__detail(d, sizeof(d), "a %s of %" PRIu64 " bytes on %s completed with status %s (%d)",
		           r->recv ? "receive" : "send", r->n, nic->ch.dev_name,
		           ibv_wc_status_str(wc->status), (int)wc->status);
		tw__cuda_chan_fail(&ch->c, TW_ERR_SYS, d);
	} else if (r->recv && wc->byte_len != r->n) {
		char d[TW_DETAIL_MAX];
		tw__detail(d, sizeof(d), "a receive of %" PRIu64 " bytes on %s got %u (the two sides "
		           "cut the tensor differently)", r->n, nic->ch.dev_name, wc->byte_len);
		tw__cuda_chan_fail(&ch->c, TW_ERR_PROTO, d);
	} else if (r->stage >= 0 && ch->c.failed == TW_OK) {
		gd_copy *cp = tw__calloc(1, sizeof(*cp));
		char d[TW_DETAIL_MAX] = "out of memory";
		tw_status_t st = TW_ERR_NOMEM;
		if (cp) {
			cp->k = k;
			cp->nic = nic;
			cp->slot = r->stage;
			cp->done.fn = gd_on_staged_copied;
			cp->done.arg = cp;
			st = tw__cuda_copy(&c->cc, k->c.dev, r->dst,
			                   nic->stage + (size_t)r->stage * TW_GDR_CQE_BYTES, r->n,
			                   k->c.stream, NULL, NULL, &cp->done, d, sizeof(d));
		}
		if (st == TW_OK) {
			staged_copy = true;
			ch->c.refs++;
		} else {
			tw__free(cp);
			tw__cuda_chan_fail(&ch->c, st, d);
		}
	}
	if (r->stage >= 0 && !staged_copy)
		nic->stage_used[r->stage] = false;
	if (!staged_copy)
		k->pending--;
	gd_req_put(nic, id);
	gd_chunk_settle(ch, k);
	tw__cuda_chan_schedule(&ch->c);
	tw__cuda_chan_unref(&ch->c);
}

static void gd_on_rearm(uv_timer_t *t);

/* Polls a NIC's completion queue dry (re-armed first). Where the arm
 * fails no event comes for what lands next: the queue is polled (and an
 * arm tried) again 1 ms later, then 2, 4 ... up to GD_REARM_MAX_MS while
 * arming keeps failing, until an arm works. */
#define GD_REARM_MAX_MS 64
static void gd_drain(gd_ctx *c, gd_nic *nic)
{
	int rc = ibv_req_notify_cq(nic->cq, 0);
	struct ibv_wc wc[32];
	int n;
	while ((n = ibv_poll_cq(nic->cq, 32, wc)) > 0)
		for (int i = 0; i < n; i++)
			gd_on_wc(c, nic, &wc[i]);
	tw__cuda_chan_wake(&c->cc); /* work requests freed: waiting ones may go */
	if (rc == 0) {
		nic->rearm_ms = 1;
	} else if (nic->rearm_init && !uv_is_active((uv_handle_t *)&nic->rearm)) {
		uint64_t ms = nic->rearm_ms ? nic->rearm_ms : 1;
		uv_timer_start(&nic->rearm, gd_on_rearm, ms, 0);
		nic->rearm_ms = ms < GD_REARM_MAX_MS ? 2 * ms : ms;
	}
}

static void gd_on_rearm(uv_timer_t *t)
{
	gd_nic *nic = t->data;
	gd_drain(nic->owner, nic);
}

static void gd_on_cq_event(uv_poll_t *h, int status, int events)
{
	gd_nic *nic = h->data;
	gd_ctx *c = nic->owner;
	(void)status;
	(void)events;
	struct ibv_cq *cq;
	void *cq_ctx;
	while (ibv_get_cq_event(nic->cc, &cq, &cq_ctx) == 0)
		ibv_ack_cq_events(cq, 1);
	gd_drain(c, nic);
}

/* ---- queue pairs ----------------------------------------------------------------------- */

static bool gd_make_qps(gd_channel *ch, gd_ctx *c)
{
	ch->qps = tw__calloc((size_t)c->num_nics * ch->num_remote, sizeof(*ch->qps));
	if (!ch->qps) {
		tw__cuda_chan_fail(&ch->c, TW_ERR_NOMEM, "out of memory for queue pairs");
		return false;
	}
	for (int l = 0; l < c->num_nics; l++) {
		gd_nic *nic = &c->nics[l];
		for (uint32_t r = 0; r < ch->num_remote; r++) {
			struct ibv_qp_init_attr qa;
			memset(&qa, 0, sizeof(qa));
			qa.qp_type = IBV_QPT_RC;
			qa.send_cq = nic->cq;
			qa.recv_cq = nic->cq;
			qa.cap.max_send_wr = nic->wr_max;
			qa.cap.max_recv_wr = nic->wr_max;
			qa.cap.max_send_sge = 1;
			qa.cap.max_recv_sge = 1;
			qa.sq_sig_all = 1;
			struct ibv_qp *qp = ibv_create_qp(nic->pd, &qa);
			if (!qp) {
				gd_fail_verb(ch, "ibv_create_qp", nic->ch.dev_name, errno);
				return false;
			}
			ch->qps[(size_t)l * ch->num_remote + r].qp = qp;
			int rc = tw__ibv_qp_init(qp, nic->ch.port);
			if (rc != 0) {
				gd_fail_verb(ch, "ibv_modify_qp to INIT", nic->ch.dev_name, rc);
				return false;
			}
		}
	}
	return true;
}

static void gd_gid_split(const union ibv_gid *g, uint64_t *hi, uint64_t *lo)
{
	memcpy(hi, g->raw, 8);
	memcpy(lo, g->raw + 8, 8);
}

static tw_status_t gd_write_setup(gd_channel *ch, gd_ctx *c)
{
	tw_wire_cuda_gdr_setup v = { (size_t)c->num_nics, NULL };
	v.row = tw__calloc((size_t)c->num_nics, sizeof(*v.row));
	tw_wire_cuda_gdr_qp *all = tw__calloc((size_t)c->num_nics * ch->num_remote, sizeof(*all));
	if (!v.row || !all) {
		tw__free(v.row);
		tw__free(all);
		tw__cuda_chan_fail(&ch->c, TW_ERR_NOMEM, "out of memory for the set-up information");
		return TW_ERR_NOMEM;
	}
	for (int l = 0; l < c->num_nics; l++) {
		const tw_ibv_choice *nc = &c->nics[l].ch;
		v.row[l].n = ch->num_remote;
		v.row[l].qps = all + (size_t)l * ch->num_remote;
		for (uint32_t r = 0; r < ch->num_remote; r++) {
			tw_wire_cuda_gdr_qp *q = &v.row[l].qps[r];
			q->lid = nc->lid;
			gd_gid_split(&nc->gid, &q->gid_subnet_prefix, &q->gid_interface_id);
			q->qpn = ch->qps[(size_t)l * ch->num_remote + r].qp->qp_num;
			q->mtu = (uint32_t)nc->mtu;
			q->max_msg_size = nc->max_msg_sz;
		}
	}
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_cuda_gdr_setup(&w, &v);
	tw__free(all);
	tw__free(v.row);
	return gd_write_obj(ch, 1, &w);
}

static void gd_on_setup(tw_conn *conn, tw_status_t st, const char *detail, void *buf, uint64_t len,
                        void *arg)
{
	gd_channel *ch = arg;
	gd_ctx *c = GD_CTX(ch);
	tw_wire_cuda_gdr_setup v;
	memset(&v, 0, sizeof(v));
	size_t used = 0;
	char d[TW_DETAIL_MAX];
	if (st != TW_OK) {
		tw__cuda_chan_fail(&ch->c, st, detail);
	} else if (ch->c.failed != TW_OK) {
		/* closed meanwhile */
	} else if (tw__wire_decode_cuda_gdr_setup(buf, len, &v, &used, d, sizeof(d)) != TW_OK ||
	           used != len) {
		tw__cuda_chan_fail(&ch->c, TW_ERR_PROTO, used != len && used ? "HandshakeSetupInfo: "
		                   "bytes after its end" : d);
	} else {
		bool ok = v.rows == ch->num_remote;
		for (size_t i = 0; ok && i < v.rows; i++)
			ok = v.row[i].n == (size_t)c->num_nics;
		if (!ok) {
			tw__detail(d, sizeof(d), "HandshakeSetupInfo has %zu rows of %zu entries; %u rows "
			           "of %d expected (one per NIC of each side)", v.rows,
			           v.rows ? v.row[0].n : (size_t)0, ch->num_remote, c->num_nics);
			tw__cuda_chan_fail(&ch->c, TW_ERR_PROTO, d);
		}
		for (uint32_t r = 0; ok && r < ch->num_remote; r++)
			for (int l = 0; ok && l < c->num_nics; l++) {
				const tw_wire_cuda_gdr_qp *q = &v.row[r].qps[l];
				gd_nic *nic = &c->nics[l];
				gd_qp *qp = &ch->qps[(size_t)l * ch->num_remote + r];
				if (q->mtu < IBV_MTU_256 || q->mtu > IBV_MTU_4096 || q->qpn == 0 ||
				    q->qpn > 0xffffff || q->lid > 0xffff || q->max_msg_size == 0) {
					tw__detail(d, sizeof(d), "HandshakeSetupInfo entry [%u][%d]: QP number "
					           "0x%x, MTU %u, LID %u, max message size %u (a 24-bit QP "
					           "number, an MTU enum from 1 to 5, a message size above 0)",
					           r, l, q->qpn, q->mtu, q->lid, q->max_msg_size);
					tw__cuda_chan_fail(&ch->c, TW_ERR_PROTO, d);
					ok = false;
					break;
				}
				tw_ibv_peer_qp pq = { .lid = q->lid, .qpn = q->qpn, .mtu = (enum ibv_mtu)q->mtu };
				memcpy(pq.gid.raw, &q->gid_subnet_prefix, 8);
				memcpy(pq.gid.raw + 8, &q->gid_interface_id, 8);
				const char *verb = "";
				int rc = tw__ibv_qp_connect(qp->qp, &nic->ch, nic->ch.gid_index, &pq, &verb);
				if (rc != 0) {
					gd_fail_verb(ch, verb, nic->ch.dev_name, rc);
					ok = false;
					break;
				}
				qp->chunk = q->max_msg_size < nic->ch.max_msg_sz ? q->max_msg_size
				                                                  : nic->ch.max_msg_sz;
				if (TW_MUTANT("gdr_chunks_unsplit"))
					qp->chunk = UINT32_C(1) << 31;
			}
		if (ok)
			ch->phase = GD_READY;
	}
	tw__wire_cuda_gdr_setup_free(&v);
	tw__free(buf);
	tw__cuda_chan_schedule(&ch->c);
	tw__cuda_chan_unref(&ch->c);
}

static void gd_on_num_nics(tw_conn *conn, tw_status_t st, const char *detail, void *buf,
                           uint64_t len, void *arg)
{
	gd_channel *ch = arg;
	gd_ctx *c = GD_CTX(ch);
	uint64_t n = 0;
	if (st != TW_OK) {
		tw__cuda_chan_fail(&ch->c, st, detail);
	} else if (ch->c.failed == TW_OK && gd_read_index(ch, buf, len, "HandshakeNumNics", &n)) {
		if (n == 0 || n > TW_GDR_MAX_NICS) {
			char d[TW_DETAIL_MAX];
			tw__detail(d, sizeof(d), "HandshakeNumNics says the peer uses %" PRIu64 " NICs "
			           "(1 to %d taken)", n, TW_GDR_MAX_NICS);
			tw__cuda_chan_fail(&ch->c, TW_ERR_PROTO, d);
		} else {
			ch->num_remote = (uint32_t)n;
			ch->phase = GD_SETUP;
			if (gd_make_qps(ch, c) && gd_write_setup(ch, c) == TW_OK) {
				if (ch->conn[1]->ops->read_alloc(ch->conn[1], TW_GDR_OBJ_MAX, gd_on_setup, ch) ==
				    TW_OK)
					ch->c.refs++;
				else
					tw__cuda_chan_fail(&ch->c, TW_ERR_NOMEM, "out of memory queueing a read");
			}
		}
	}
	tw__free(buf);
	tw__cuda_chan_schedule(&ch->c);
	tw__cuda_chan_unref(&ch->c);
}

/* ---- per tensor ------------------------------------------------------------------------ */

static void gd_on_ready(void *arg)
{
	gd_chunk *k = arg;
	gd_channel *ch = (gd_channel *)k->c.op->ch;
	k->ready = true;
	k->pending--;
	gd_chunk_settle(ch, k);
	tw__cuda_chan_schedule(&ch->c);
	tw__cuda_chan_unref(&ch->c);
}

static void gd_on_peer_index(tw_conn *conn, tw_status_t st, const char *detail, void *buf,
                             uint64_t len, void *arg)
{
	gd_chunk *k = arg;
	gd_channel *ch = (gd_channel *)k->c.op->ch;
	uint64_t v = 0;
	k->ctl_wait = false;
	const char *what = k->c.which == 0 ? "ReadyToReceive" : "Descriptor";
	if (st != TW_OK) {
		tw__cuda_chan_fail(&ch->c, st, detail);
	} else if (gd_read_index(ch, buf, len, what, &v)) {
		if (v >= ch->num_remote) {
			char d[TW_DETAIL_MAX];
			tw__detail(d, sizeof(d), "%s names NIC %" PRIu64 " of a peer with %u", what, v,
			           ch->num_remote);
			tw__cuda_chan_fail(&ch->c, TW_ERR_PROTO, d);
		} else {
			k->peer_nic = (uint32_t)v;
			k->got_peer = true;
		}
	}
	gd_chunk_settle(ch, k);
	tw__free(buf);
	tw__cuda_chan_schedule(&ch->c);
	tw__cuda_chan_unref(&ch->c);
}

/* Posts what it can of a tensor's work requests; false: out of work
 * requests or staging slots (later tensors wait), or the channel failed. */
static bool gd_post_some(gd_channel *ch, gd_chunk *k)
{
	gd_ctx *c = GD_CTX(ch);
	int l = c->gpu_nic[k->c.dev];
	gd_nic *nic = &c->nics[l];
	gd_qp *qp = &ch->qps[(size_t)l * ch->num_remote + k->peer_nic];
	bool recv = k->c.which == 1;
	char d[TW_DETAIL_MAX];
	if (!k->mr && !(k->mr = gd_mr_of(c, nic, k->c.dev, k->c.ptr, d, sizeof(d)))) {
		tw__cuda_chan_fail(&ch->c, TW_ERR_SYS, d);
		return false;
	}
	struct ibv_mr *mr = k->mr;
	while (k->posted < k->c.n) {
		uint64_t n = k->c.n - k->posted < qp->chunk ? k->c.n - k->posted : qp->chunk;
		bool staged = recv && n <= TW_GDR_CQE_BYTES && !TW_MUTANT("gdr_small_into_device");
		if ((recv ? nic->recvs_avail : nic->sends_avail) == 0)
			return false;
		int slot = staged ? gd_stage_get(nic) : -1;
		if (staged && slot < 0)
			return false;
		uint32_t id;
		gd_req *r = gd_req_get(nic, ch, k, recv, &id);
		if (!r) {
			if (slot >= 0)
				nic->stage_used[slot] = false;
			return false;
		}
		r->n = n;
		r->stage = slot;
		r->dst = k->c.ptr + k->posted;
		struct ibv_sge sge = { (uintptr_t)(k->c.ptr + k->posted), (uint32_t)n, mr->lkey };
		if (staged) {
			sge.addr = (uintptr_t)(nic->stage + (size_t)slot * TW_GDR_CQE_BYTES);
			sge.lkey = nic->stage_mr->lkey;
		}
		int rc;
		if (recv) {
			struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
			rc = ibv_post_recv(qp->qp, &wr, &bad);
		} else {
			struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
				                      .opcode = IBV_WR_SEND }, *bad = NULL;
			rc = ibv_post_send(qp->qp, &wr, &bad);
		}
		if (rc != 0) {
			if (slot >= 0)
				nic->stage_used[slot] = false;
			gd_req_put(nic, id);
			tw__cuda_chan_unref(&ch->c);
			gd_fail_verb(ch, recv ? "ibv_post_recv" : "ibv_post_send", nic->ch.dev_name, rc);
			return false;
		}
		if (recv)
			nic->recvs_avail--;
		else
			nic->sends_avail--;
		k->pending++;
		k->posted += n;
	}
	return true;
}

/* The receiver's ReadyToReceive goes once the tensor's receives are posted,
 * or as many as the device takes now: the sender's SENDs beyond them wait
 * in the NIC's receiver-not-ready retries (without end) until completions
 * free work requests for the rest, so a tensor of more chunks than the
 * device has work requests cannot deadlock. */
static bool gd_post(gd_channel *ch, gd_chunk *k)
{
	gd_ctx *c = GD_CTX(ch);
	bool done = gd_post_some(ch, k);
	if (ch->c.failed != TW_OK)
		return false;
	if (k->c.which == 1 && !k->rtr_sent && (done || k->posted > 0)) {
		if (gd_write_index(ch, 1, (uint64_t)c->gpu_nic[k->c.dev]) != TW_OK)
			return false;
		k->rtr_sent = true;
	}
	if (!done)
		return false;
	k->all_posted = true;
	gd_chunk_settle(ch, k);
	return true;
}



/* One direction, in order: control messages, then work requests. */
static void gd_pump_dir(gd_channel *ch, int which)
{
	gd_ctx *c = GD_CTX(ch);
	bool may_ctl = true, may_post = true;
	for (tw_cuda_chunk *kc = ch->c.q[which]; kc && ch->c.failed == TW_OK; kc = kc->next) {
		gd_chunk *k = (gd_chunk *)kc;
		char d[TW_DETAIL_MAX];
		if (kc->ended)
			continue;
		if (kc->dev < 0 || kc->dev >= c->cc.num_cuda || c->gpu_nic[kc->dev] < 0) {
			tw__detail(d, sizeof(d), "a tensor on %s%d, which this channel does not serve",
			           kc->dev < 0 ? "cpu:" : "cuda:", kc->dev < 0 ? 0 : kc->dev);
			tw__cuda_chan_fail(&ch->c, TW_ERR_INVAL, d);
			return;
		}
		if (!k->ready_asked) {
			k->ready_asked = true;
			kc->done.fn = gd_on_ready;
			kc->done.arg = k;
			tw_status_t st = tw__cuda_when_ready(&c->cc, kc->dev, kc->stream, &kc->done, d,
			                                     sizeof(d));
			if (st != TW_OK) {
				tw__cuda_chan_fail(&ch->c, st, d);
				return;
			}
			k->pending++;
			ch->c.refs++;
		}
		if (!k->ctl_posted && may_ctl) {
			if (which == 0 && gd_write_index(ch, 0, (uint64_t)c->gpu_nic[kc->dev]) != TW_OK)
				return;
			if (ch->conn[which == 0 ? 1 : 0]->ops->read_alloc(ch->conn[which == 0 ? 1 : 0],
			                                                   64, gd_on_peer_index, k) != TW_OK) {
				tw__cuda_chan_fail(&ch->c, TW_ERR_NOMEM, "out of memory queueing a read");
				return;
			}
			ch->c.refs++;
			k->ctl_posted = true;
			k->ctl_wait = true;
		}
		may_ctl = k->ctl_posted;
		if (!k->all_posted && may_post && k->got_peer && k->ready && !gd_post(ch, k))
			may_post = false;
		if (!k->all_posted)
			may_post = false;
	}
}

static void gd_qps_to_error(gd_channel *ch)
{
	if (ch->qps_dead || !ch->qps)
		return;
	ch->qps_dead = true;
	gd_ctx *c = GD_CTX(ch);
	for (size_t i = 0; i < (size_t)c->num_nics * ch->num_remote; i++)
		if (ch->qps[i].qp) {
			struct ibv_qp_attr a;
			memset(&a, 0, sizeof(a));
			a.qp_state = IBV_QPS_ERR;
			(void)ibv_modify_qp(ch->qps[i].qp, &a, IBV_QP_STATE); /* flushes what is posted */
		}
}

static void gd_pump(tw_cuda_chan *base)
{
	gd_channel *ch = (gd_channel *)base;
	ch->c.refs++;
	if (ch->c.failed == TW_OK && ch->c.open && ch->phase == GD_READY) {
		gd_pump_dir(ch, 0);
		gd_pump_dir(ch, 1);
	}
	if (ch->c.failed != TW_OK) {
		for (int i = 0; i < 2; i++)
			if (ch->conn[i]) {
				ch->conn[i]->ops->close(ch->conn[i]);
				ch->conn[i] = NULL;
			}
		gd_qps_to_error(ch);
		/* what waits for nothing ends now; the rest when its read, work
		 * requests (flushed) or copies call back */
		for (int which = 0; which < 2; which++)
			for (tw_cuda_chunk *kc = ch->c.q[which]; kc; kc = kc->next)
				gd_chunk_settle(ch, (gd_chunk *)kc);
	}
	tw__cuda_chan_sweep(&ch->c, 0, NULL);
	tw__cuda_chan_sweep(&ch->c, 1, NULL);
	tw__cuda_chan_unref(&ch->c);
}

static void gd_free(tw_cuda_chan *base)
{
	gd_channel *ch = (gd_channel *)base;
	gd_ctx *c = GD_CTX(ch);
	if (ch->prev_all)
		ch->prev_all->next_all = ch->next_all;
	else
		c->all = ch->next_all;
	if (ch->next_all)
		ch->next_all->prev_all = ch->prev_all;
	if (ch->qps)
		for (size_t i = 0; i < (size_t)c->num_nics * ch->num_remote; i++)
			if (ch->qps[i].qp)
				(void)ibv_destroy_qp(ch->qps[i].qp);
	tw__free(ch->qps);
	tw__free(ch);
}

static const tw_cuda_chan_ops gd_chan_ops = {
	.pump = gd_pump,
	.free = gd_free,
	.chunk_struct = sizeof(gd_chunk),
	.chunk_bytes = TW_GDR_CHUNK_ALL,
};

/* For tw_pipe_get_verdicts: each NIC this side uses, its port and GID,
 * and the chunk size agreed with the peer. */
static void gd_describe(tw_channel *base, char *buf, size_t len)
{
	gd_channel *ch = (gd_channel *)base;
	gd_ctx *c = GD_CTX(ch);
	if (ch->c.failed != TW_OK) {
		tw__detail(buf, len, "failed: %s", ch->c.fail_detail);
		return;
	}
	if (ch->phase != GD_READY) {
		tw__detail(buf, len, "the handshake (NICs, queue pairs) is under way");
		return;
	}
	size_t off = 0;
	for (int l = 0; l < c->num_nics && off + 1 < len; l++) {
		uint32_t chunk = ch->qps[(size_t)l * ch->num_remote].chunk;
		int n = snprintf(buf + off, len - off, "%sNIC %d: %s, chunks of at most %u bytes", l ? "; " : "",
		                 l, c->nics[l].ch.describe, chunk);
		if (n < 0)
			break;
		off += (size_t)n;
	}
	if (off + 1 < len)
		snprintf(buf + off, len - off, "; %u NIC(s) on the peer; receives of %d bytes or "
		         "less staged through host memory (spec 4.6.4.a)", ch->num_remote,
		         TW_GDR_CQE_BYTES);
}

static const tw_channel_instance_ops gd_instance_ops = {
	.send = tw__cuda_chan_send,
	.recv = tw__cuda_chan_recv,
	.describe = gd_describe,
	.close = tw__cuda_chan_close_op,
	.max_tensor = tw__cuda_chan_max_tensor,
};

static size_t gd_num_connections(tw_channel_ctx *base)
{
	(void)base;
	return 2;
}

static tw_status_t gd_open(tw_channel_ctx *base, tw_endpoint_t endpoint, tw_conn *const *conns,
                           size_t num_conns, unsigned flags, tw_channel **out, char *detail,
                           size_t detail_len)
{
	gd_ctx *c = (gd_ctx *)base;
	gd_channel *ch = num_conns == 2 ? tw__calloc(1, sizeof(*ch)) : NULL;
	if (!ch) {
		for (size_t i = 0; i < num_conns; i++)
			conns[i]->ops->close(conns[i]);
		if (num_conns != 2)
			tw__detail(detail, detail_len, GD_WHO ": needs 2 connections, got %zu", num_conns);
		else
			tw__detail(detail, detail_len, GD_WHO ": out of memory");
		return num_conns != 2 ? TW_ERR_INVAL : TW_ERR_NOMEM;
	}
	ch->conn[0] = conns[0];
	ch->conn[1] = conns[1];
	tw__cuda_chan_open(&ch->c, &c->cc, &gd_instance_ops, &gd_chan_ops);
	ch->next_all = c->all;
	if (c->all)
		c->all->prev_all = ch;
	c->all = ch;
	/* the completion queues are watched from the loop once a channel opens
	 * (create() may not touch the loop) */
	for (int i = 0; i < c->num_nics; i++) {
		gd_nic *nic = &c->nics[i];
		if (nic->polling)
			continue;
		uv_loop_t *uv = &c->cc.base.env->loop->uv;
		if (!nic->rearm_init) {
			(void)uv_timer_init(uv, &nic->rearm); /* cannot fail */
			nic->rearm.data = nic;
			nic->rearm_init = true;
		}
		int rc = uv_poll_init(uv, &nic->poll, nic->cc->fd);
		if (rc == 0) {
			nic->poll.data = nic;
			nic->polling = true;
			rc = uv_poll_start(&nic->poll, UV_READABLE, gd_on_cq_event);
		}
		if (rc != 0) {
			char d[TW_DETAIL_MAX];
			tw__detail(d, sizeof(d), "watching the completion channel of %s: %s",
			           nic->ch.dev_name, uv_strerror(rc));
			tw__cuda_chan_fail(&ch->c, TW_ERR_SYS, d);
		}
	}
	if (ch->c.failed == TW_OK && gd_write_index(ch, 1, (uint64_t)c->num_nics) == TW_OK) {
		if (ch->conn[1]->ops->read_alloc(ch->conn[1], 64, gd_on_num_nics, ch) == TW_OK)
			ch->c.refs++;
		else
			tw__cuda_chan_fail(&ch->c, TW_ERR_NOMEM, "out of memory queueing a read");
	}
	*out = &ch->c.base;
	return TW_OK;
}

/* ---- context --------------------------------------------------------------------------- */

static void gd_nic_fini(gd_ctx *c, gd_nic *nic)
{
	while (nic->mrs) {
		gd_mr *m = nic->mrs;
		nic->mrs = m->next;
		(void)ibv_dereg_mr(m->mr);
		tw__free(m);
	}
	if (nic->stage_mr)
		(void)ibv_dereg_mr(nic->stage_mr);
	if (nic->stage)
		(void)c->cc.cu->cuMemFreeHost(nic->stage);
	if (nic->cq)
		(void)ibv_destroy_cq(nic->cq);
	if (nic->cc)
		(void)ibv_destroy_comp_channel(nic->cc);
	if (nic->pd)
		(void)ibv_dealloc_pd(nic->pd);
	if (nic->ch.ctx)
		(void)ibv_close_device(nic->ch.ctx);
	tw__free(nic->reqs);
	memset(nic, 0, sizeof(*nic));
}

static void gd_destroy(tw_channel_ctx *base)
{
	gd_ctx *c = (gd_ctx *)base;
	/* a channel still alive here (its last callbacks never ran) keeps no
	 * queue pair past its NIC */
	for (gd_channel *ch = c->all; ch; ch = ch->next_all)
		for (size_t i = 0; ch->qps && i < (size_t)c->num_nics * ch->num_remote; i++)
			if (ch->qps[i].qp) {
				(void)ibv_destroy_qp(ch->qps[i].qp);
				ch->qps[i].qp = NULL;
			}
	for (int i = 0; i < c->num_nics; i++)
		gd_nic_fini(c, &c->nics[i]);
	tw__cuda_ctx_fini(&c->cc);
	tw__free(c);
}

static void gd_on_poll_closed(uv_handle_t *h)
{
	(void)h;
}

static void gd_shutdown(tw_channel_ctx *base)
{
	gd_ctx *c = (gd_ctx *)base;
	/* every channel is closed: its queue pairs go to the error state, so
	 * what they hold is flushed back; wait for it (bounded: a device that
	 * never flushes must not hang the context) */
	for (gd_channel *ch = c->all; ch; ch = ch->next_all)
		gd_qps_to_error(ch);
	for (int i = 0; i < c->num_nics; i++) {
		gd_nic *nic = &c->nics[i];
		for (int tries = 0; nic->outstanding && tries < 5000; tries++) {
			struct ibv_wc wc[32];
			int n = ibv_poll_cq(nic->cq, 32, wc);
			for (int j = 0; j < n; j++)
				gd_on_wc(c, nic, &wc[j]);
			if (n <= 0)
				(void)usleep(1000);
		}
		if (nic->polling) {
			uv_poll_stop(&nic->poll);
			uv_close((uv_handle_t *)&nic->poll, gd_on_poll_closed);
			nic->polling = false;
		}
		if (nic->rearm_init) {
			uv_timer_stop(&nic->rearm);
			uv_close((uv_handle_t *)&nic->rearm, gd_on_poll_closed);
			nic->rearm_init = false;
		}
	}
	tw__cuda_ctx_drain(&c->cc);
}

/* Opens a NIC: its port and GID (the ibv transport's rules), PD, CQ and
 * its completion channel, work request table, staging area. */
static tw_status_t gd_nic_init(gd_ctx *c, gd_nic *nic, const char *name, int gid_index, char *why,
                               size_t why_len)
{
	char spec[IBV_SYSFS_NAME_MAX + 2], eb[160];
	snprintf(spec, sizeof(spec), "=%s", name);
	tw_status_t st = tw__ibv_choose(spec, gid_index, &nic->ch, why, why_len);
	if (st != TW_OK)
		return st;
	const char *verb = "ibv_alloc_pd";
	int err = 0;
	if (!(nic->pd = ibv_alloc_pd(nic->ch.ctx)))
		err = errno;
	nic->owner = c;
	if (!err && !(nic->cc = ibv_create_comp_channel(nic->ch.ctx))) {
		verb = "ibv_create_comp_channel";
		err = errno;
	}
	if (!err) {
		int fl = fcntl(nic->cc->fd, F_GETFL);
		if (fl < 0 || fcntl(nic->cc->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
			verb = "fcntl(O_NONBLOCK) on the completion channel";
			err = errno;
		}
	}
	if (!err) {
		uint32_t wr = TW_GDR_WR_MAX;
		if ((uint32_t)nic->ch.dattr.max_qp_wr < wr)
			wr = (uint32_t)nic->ch.dattr.max_qp_wr;
		if ((uint32_t)nic->ch.dattr.max_cqe / 2 < wr)
			wr = (uint32_t)nic->ch.dattr.max_cqe / 2;
		nic->wr_max = wr ? wr : 1;
		nic->sends_avail = nic->recvs_avail = nic->wr_max;
		verb = "ibv_create_cq";
		if (!(nic->cq = ibv_create_cq(nic->ch.ctx, (int)(2 * nic->wr_max), nic, nic->cc, 0)))
			err = errno;
		else if ((err = ibv_req_notify_cq(nic->cq, 0)) != 0)
			verb = "ibv_req_notify_cq";
	}
	if (!err) {
		nic->reqs = tw__calloc(2 * (size_t)nic->wr_max, sizeof(*nic->reqs));
		if (!nic->reqs) {
			verb = "allocating the work request table";
			err = ENOMEM;
		} else {
			for (uint32_t i = 0; i < 2 * nic->wr_max; i++)
				nic->reqs[i].next_free = i + 1 < 2 * nic->wr_max ? i + 1 : UINT32_MAX;
			nic->free_head = 0;
		}
	}
	if (!err) {
		/* pinned memory is the driver's: any device's context may make it */
		void *m = NULL;
		st = tw__cuda_use_device(c->cc.cu, 0, why, why_len);
		if (st != TW_OK)
			return st;
		CUresult r = c->cc.cu->cuMemAllocHost_v2(&m, TW_GDR_STAGE_SLOTS * TW_GDR_CQE_BYTES);
		if (r != TW_CUDA_SUCCESS) {
			tw__detail(why, why_len, GD_WHO ": cuMemAllocHost of the staging area: %s",
			           tw__cuda_strerror(c->cc.cu, r, eb, sizeof(eb)));
			return TW_ERR_NOMEM;
		}
		nic->stage = m;
		verb = "ibv_reg_mr of the staging area";
		if (!(nic->stage_mr = ibv_reg_mr(nic->pd, m, TW_GDR_STAGE_SLOTS * TW_GDR_CQE_BYTES,
		                                 IBV_ACCESS_LOCAL_WRITE)))
			err = errno;
	}
	if (err) {
		tw__detail(why, why_len, GD_WHO ": %s on %s: %s", verb, nic->ch.dev_name,
		           tw__strerror(err, eb, sizeof(eb)));
		return err == ENOMEM ? TW_ERR_NOMEM : TW_ERR_SYS;
	}
	return TW_OK;
}

/* Pairs GPUs with NICs (gdr_plan.h), opens the NICs used, numbered in
 * list order as stock numbers them, and proves each GPU's NIC registers its
 * memory. */
static tw_status_t gd_pair(gd_ctx *c, char *why, size_t why_len)
{
	char eb[128];
	tw_gdr_plan *plan = tw__calloc(1, sizeof(*plan));
	if (!plan) {
		tw__detail(why, why_len, GD_WHO ": out of memory");
		return TW_ERR_NOMEM;
	}
	tw_status_t pst = tw__gdr_plan_make(c->cc.cu, c->cc.num_cuda, "/sys", plan);
	if (pst != TW_OK) {
		tw__detail(why, why_len, GD_WHO ": %s%s", pst == TW_ERR_INVAL ? "" : "not viable: ",
		           plan->why);
		tw__free(plan);
		return pst;
	}
	snprintf(why, why_len, "%s", plan->why);
	int nic_of_cand[TW_GDR_MAX_NICS];
	for (int x = 0; x < plan->num_cand; x++) {
		nic_of_cand[x] = -1;
		bool used = false;
		for (int g = 0; g < plan->num_gpus; g++)
			used = used || plan->gpu_cand[g] == x;
		if (!used)
			continue;
		char w[TW_DETAIL_MAX];
		gd_nic *nic = &c->nics[c->num_nics];
		if (gd_nic_init(c, nic, plan->cand[x], plan->gid_index, w, sizeof(w)) != TW_OK) {
			tw__ibv_why(why, why_len, "%s", w);
			gd_nic_fini(c, nic);
			continue;
		}
		nic_of_cand[x] = c->num_nics++;
	}
	int served = 0;
	for (int g = 0; g < c->cc.num_cuda; g++) {
		int x = g < plan->num_gpus ? plan->gpu_cand[g] : -1;
		c->gpu_nic[g] = x >= 0 ? nic_of_cand[x] : -1;
		if (x < 0)
			tw__ibv_why(why, why_len, "cuda:%d: %s", g, plan->gpu_note[g]);
		if (c->gpu_nic[g] < 0)
			continue;
		/* the proof: the NIC registers this GPU's memory */
		CUdeviceptr p = 0;
		char w[TW_DETAIL_MAX];
		tw_status_t st = tw__cuda_use_device(c->cc.cu, g, w, sizeof(w));
		CUresult r = st == TW_OK ? c->cc.cu->cuMemAlloc_v2(&p, 4096) : TW_CUDA_SUCCESS;
		if (st == TW_OK && r != TW_CUDA_SUCCESS)
			tw__detail(w, sizeof(w), "cuMemAlloc: %s",
			           tw__cuda_strerror(c->cc.cu, r, eb, sizeof(eb)));
		gd_nic *nic = &c->nics[c->gpu_nic[g]];
		struct ibv_mr *mr = st == TW_OK && r == TW_CUDA_SUCCESS
		                            ? ibv_reg_mr(nic->pd, (void *)(uintptr_t)p, 4096,
		                                         IBV_ACCESS_LOCAL_WRITE)
		                            : NULL;
		if (st == TW_OK && r == TW_CUDA_SUCCESS && !mr)
			tw__detail(w, sizeof(w),
			           "ibv_reg_mr of cuda:%d memory on %s: %s (GPUDirect RDMA needs a "
			           "peer-memory client, such as the nvidia-peermem module)",
			           g, nic->ch.dev_name, tw__strerror(errno, eb, sizeof(eb)));
		if (mr)
			(void)ibv_dereg_mr(mr);
		if (p)
			(void)c->cc.cu->cuMemFree_v2(p);
		if (!mr) {
			tw__ibv_why(why, why_len, "cuda:%d: %s", g, w);
			c->gpu_nic[g] = -1;
			continue;
		}
		served++;
	}
	tw__free(plan);
	if (!served) {
		char r2[TW_DETAIL_MAX];
		snprintf(r2, sizeof(r2), "%s", why[0] ? why : "no GPU has a usable NIC");
		tw__detail(why, why_len, GD_WHO ": not viable: %s", r2);
		return TW_ERR_UNSUPPORTED;
	}
	return TW_OK;
}

static tw_status_t gd_create(const tw_channel_env *env, const char *options, tw_channel_ctx **out,
                             char *detail, size_t detail_len)
{
	tw_status_t st = tw__options_parse(GD_WHO, options, NULL, 0, NULL, NULL, 0, detail,
	                                   detail_len);
	if (st != TW_OK)
		return st;
	gd_ctx *c = tw__calloc(1, sizeof(*c));
	if (!c) {
		tw__detail(detail, detail_len, GD_WHO ": out of memory");
		return TW_ERR_NOMEM;
	}
	st = tw__cuda_ctx_init(&c->cc, &tw__cuda_gdr_channel_ops, env, false, detail, detail_len);
	if (st != TW_OK) {
		tw__free(c);
		return st;
	}
	char why[TW_DETAIL_MAX] = "";
	/* its NICs register memory: fork safety first, as the ibv transport */
	char fw[TW_DETAIL_MAX];
	st = tw__ibv_fork_opted_out() ? TW_OK : tw__ibv_fork_safe(fw, sizeof(fw));
	if (st != TW_OK)
		tw__detail(why, sizeof(why), GD_WHO ": not viable: %s", fw);
	else
		st = gd_pair(c, why, sizeof(why));
	if (st != TW_OK) {
		tw__detail(detail, detail_len, "%s", why);
		gd_destroy(&c->cc.base);
		return st;
	}
	/* only the GPUs served are offered, each with "*" */
	size_t k = 0;
	for (size_t i = 0; i < c->cc.base.num_devices; i++) {
		tw_channel_device dv = c->cc.base.devices[i];
		if (c->gpu_nic[dv.device.index] < 0)
			continue;
		dv.descriptor = tw__memdup_str("*", 1);
		dv.descriptor_len = 1;
		if (!dv.descriptor) {
			tw__detail(detail, detail_len, GD_WHO ": out of memory");
			c->cc.base.num_devices = k;
			gd_destroy(&c->cc.base);
			return TW_ERR_NOMEM;
		}
		c->cc.base.devices[k++] = dv;
	}
	c->cc.base.num_devices = k;
	*out = &c->cc.base;
	return TW_OK;
}

const tw_channel_ops tw__cuda_gdr_channel_ops = {
	.kind = "cuda_gdr",
	.create = gd_create,
	.num_connections = gd_num_connections,
	.open = gd_open,
	.shutdown = gd_shutdown,
	.destroy = gd_destroy,
};
