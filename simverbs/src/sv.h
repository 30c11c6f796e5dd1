/* simverbs internal header: the objects behind the public verbs structs, the
 * configuration model and the engine interface shared by the files of
 * libibverbs.so.1 (simverbs). Nothing here is exported; the public ABI is
 * <infiniband/verbs.h> plus the version script generated at build time.
 *
 * Locking: one process-wide mutex (sv_lock) protects every object below. The
 * application's threads take it in the verbs calls, the progress thread while
 * it moves data. It is never held across a blocking call. */
#ifndef SIMVERBS_SV_H
#define SIMVERBS_SV_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SV_EXPORT __attribute__((visibility("default")))

#define SV_MAX_DEV 8
#define SV_MAX_PORT 4
#define SV_MAX_GID 16
#define SV_MAX_SGE 32
#define SV_MAX_INLINE 256
#define SV_PKT (256u * 1024u) /* payload bytes per wire packet */

/* ---- configuration ------------------------------------------------------ */
enum sv_fork_mode { SV_FORK_MODERN, SV_FORK_LEGACY, SV_FORK_STRICT };
enum sv_memlock_mode { SV_MEMLOCK_KERNEL, SV_MEMLOCK_ALWAYS, SV_MEMLOCK_OFF };

struct sv_port_cfg {
	enum ibv_port_state state;   /* current state (config, control file, netdev) */
	enum ibv_port_state cfg_state;
	uint8_t link_layer;          /* IBV_LINK_LAYER_ETHERNET or _INFINIBAND */
	char netdev[IF_NAMESIZE + 8]; /* "lo", "auto" (first up non-loopback), a name */
	uint32_t max_msg_sz;
	enum ibv_mtu max_mtu, active_mtu;
	uint16_t lid;
	bool netdev_down;            /* bound interface lost IFF_UP/RUNNING */
	bool ctl_down;               /* forced down through the control file */
	int gid_layout;              /* 0: RoCE v2 per address; 1: v1; 2: v1 then v2 (mlx5-like) */
	/* GID table, refreshed from getifaddrs() of the current namespace,
	 * unless the configuration fixes it (gids_fixed: port1.gids) */
	int ngid;
	union ibv_gid gid[SV_MAX_GID];
	enum ibv_gid_type gid_type[SV_MAX_GID];
	bool gids_fixed;
	uint8_t gid_state[SV_MAX_GID]; /* SV_GID_OK, SV_GID_EMPTY, SV_GID_FAIL */
};

enum { SV_GID_OK = 0, SV_GID_EMPTY = 1, SV_GID_FAIL = 2 };

struct sv_dev_cfg {
	char name[64];
	uint64_t guid;               /* host order */
	uint32_t vendor_id, vendor_part_id, hw_ver;
	char fw_ver[64], board_id[64], pci[32];
	int numa_node;
	int nports;
	struct sv_port_cfg port[SV_MAX_PORT];
	int max_qp, max_qp_wr, max_sge, max_cq, max_cqe, max_mr, max_pd;
	int max_srq, max_srq_wr, max_srq_sge, max_qp_rd_atom, max_inline;
	int round_queues; /* SRQs are rounded up to a power of two, and say so (mlx5, rxe) */
	uint64_t max_mr_size;
};

struct sv_config {
	int ndev;
	struct sv_dev_cfg dev[SV_MAX_DEV];
	enum sv_fork_mode fork_mode;
	enum sv_memlock_mode memlock;
	int devmem_max_msg;          /* receives of <= this many bytes into device memory are
	                                scattered to the CQE (copied by the CPU in poll_cq) */
	enum ibv_wc_status devmem_status;
	bool peer_memory;            /* register simcuda device memory (nvidia-peermem's role) */
	bool err_cqe_garbage;        /* error CQEs: fields other than status/wr_id/qp_num are junk */
	double time_scale;           /* multiplies IB timeouts (ack, RNR) */
	uint64_t ack_latency_ns;     /* ACKs reach their requester this much later */
	uint32_t srq_post_fail_every; /* every Nth receive offered to an SRQ fails (ENOMEM) */
	uint32_t srq_post_fail_after; /* and every one after the Nth */
	bool no_last_wqe;            /* QP_LAST_WQE_REACHED is never raised (last_wqe_event = 0) */
	bool async_fd_error;         /* a context's async_fd polls as an error; no event is read */
	uint64_t recv_cqe_lag_ns;    /* receive completions of QPs on an SRQ are written this much later */
	char fail_verb[48];          /* SIMVERBS_FAIL=<verb>:<N>: that verb's Nth call fails */
	unsigned long fail_at;       /* (sv_fail; 0: none) */
	char control[512];           /* control file: "<dev> <port> up|down" lines */
	bool trace;
};

extern struct sv_config sv_cfg;
void sv_config_load(void);                 /* once; reads SIMVERBS_CONFIG */
void sv_port_refresh(struct sv_dev_cfg *d, int port_idx); /* GIDs + netdev state */
int sv_find_port_by_ip(uint32_t ip_be, int *dev_out, int *port_out, int *gid_out);

/* ---- objects ------------------------------------------------------------ */
struct sv_device {
	struct ibv_device ibdev;
	int index;
};

struct sv_async_ev {
	struct ibv_async_event ev;
	struct sv_async_ev *next;
};

struct sv_context {
	int dev_index;
	bool dead;                   /* inherited across fork() */
	struct sv_async_ev *aq_head, *aq_tail;
	struct sv_context *next;     /* engine's list of open contexts */
	enum ibv_port_state last_state[SV_MAX_PORT];
	struct verbs_context vctx;   /* must be last: ends with struct ibv_context */
};

struct sv_pd {
	struct ibv_pd pd;
};

struct sv_mr {
	struct ibv_mr mr;
	unsigned access;
	uint64_t iova;               /* address the peer uses for this MR (iova == addr by default) */
	bool devmem;
	/* device memory of the CUDA driver (simcuda's peer-memory client,
	 * simcuda_peer_alias): where the "HCA" reaches mr.addr's bytes */
	uint8_t *alias;
	size_t pinned;               /* bytes counted against RLIMIT_MEMLOCK */
	/* fork hazard: pages whose "device view" detached from the process view */
	uint8_t *shadow;             /* page-aligned copy of the pages, NULL when none */
	uintptr_t pg_start;          /* first page of the MR */
	size_t npages;
	uint8_t *detached;           /* per page: 1 = device uses shadow */
	uint8_t *private_pg;         /* per page: 1 = MAP_PRIVATE (copy-on-write after fork) */
};

/* one completion queue entry: the work completion, and the bytes a
 * scatter-to-CQE receive carries (scat_n of them, for scat_dst) */
struct sv_cqe {
	struct ibv_wc wc;
	uint64_t scat_dst;
	uint8_t scat_n;
	uint8_t scat[64];
};

struct sv_cq {
	struct ibv_cq cq;
	struct sv_cqe *ring;
	int cap, head, count;
	bool armed, solicited_only;
	bool overflowed;
	bool dead;
	int users;                   /* QPs that use it */
	uint32_t comp_reported;      /* events handed out by ibv_get_cq_event */
	uint32_t async_reported;
};

struct sv_chan_ev {
	struct sv_cq *cq;            /* NULL: tombstone of a destroyed CQ */
	struct sv_chan_ev *next;
};

struct sv_channel {
	struct ibv_comp_channel ch;
	struct sv_chan_ev *head, *tail;
};

struct sv_rwqe {
	uint64_t wr_id;
	int num_sge;
	struct ibv_sge sge[SV_MAX_SGE];
};

struct sv_srq {
	struct ibv_srq srq;
	struct sv_rwqe *ring;
	int cap, head, count, max_sge;
	uint32_t limit;              /* 0: not armed */
	bool dead;
	int users;
	uint32_t async_reported;
};

enum sv_wqe_state { SV_W_QUEUED, SV_W_SENDING, SV_W_WAIT_ACK, SV_W_DONE };

struct sv_swqe {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	unsigned flags;              /* IBV_SEND_* */
	uint32_t imm;                /* network order, as posted */
	uint64_t raddr;
	uint32_t rkey;
	int num_sge;
	struct ibv_sge sge[SV_MAX_SGE];
	uint8_t *inl;                /* inline copy (malloc) or NULL */
	uint64_t len;                /* total length */
	uint64_t sent;               /* payload bytes put on the wire */
	uint64_t got;                /* READ: response bytes placed */
	uint32_t psn;
	enum sv_wqe_state st;
	bool signaled;
	bool rnr_wait;               /* responder parked it: ack timer suspended */
	uint8_t retries;             /* retransmissions left (retry_cnt) */
	uint64_t deadline_ns;        /* ack timeout; 0 = none */
};

struct sv_inmsg;                     /* a message parked by the responder (RNR) */

struct sv_link;

struct sv_qp {
	struct ibv_qp qp;
	enum ibv_qp_state st;        /* true state (qp.state is only updated by modify/query) */
	int slot;
	uint8_t port;
	unsigned access;             /* qp_access_flags */
	uint16_t pkey_index;
	enum ibv_mtu path_mtu;
	uint32_t dest_qpn, rq_psn, sq_psn;
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic;
	struct ibv_ah_attr ah;
	uint32_t peer_ip;            /* network order, from ah.grh.dgid or LID registry */
	uint16_t peer_port;          /* host order, from dest_qpn */
	bool sq_sig_all;
	struct ibv_qp_cap cap;
	/* send queue: ring of max_send_wr entries */
	struct sv_swqe *sq;
	int sq_cap, sq_head, sq_count, sq_tx; /* sq_tx: index (from head) of next to transmit */
	uint32_t next_psn;
	bool tx_blocked;             /* a WQE failed locally: nothing after it goes out */
	/* receive queue */
	struct sv_rwqe *rq;
	int rq_cap, rq_head, rq_count;
	/* responder */
	uint32_t exp_psn;
	bool in_active;              /* a multi-packet message is being received */
	bool in_failed;              /* drop the rest of the current message */
	struct sv_rwqe in_wqe;
	bool in_has_wqe;
	bool in_dup;                 /* receiving a retransmitted, already executed message */
	uint32_t dup_psn;
	uint64_t in_off;
	struct sv_inmsg *parked_head, *parked_tail;
	uint64_t rnr_deadline_ns;
	struct sv_link *in_link;     /* link the current request stream arrives on */
	struct sv_link *link;        /* link to the peer engine (requester side) */
	bool last_wqe_sent;
	bool dead;
	uint32_t async_reported;
	struct sv_qp *next_active;
};

/* ---- process-wide state ------------------------------------------------- */
extern pthread_mutex_t sv_lock;
void sv_die_if_dead(struct ibv_context *ctx); /* contexts inherited over fork */

static inline struct sv_context *sv_ctx(struct ibv_context *c)
{
	return (struct sv_context *)((char *)c - offsetof(struct sv_context, vctx.context));
}

/* events (caller holds sv_lock) */
void sv_async_purge(struct sv_context *ctx, void *element);
void sv_async_push(struct sv_context *ctx, enum ibv_event_type type, void *element);
void sv_engine_drop_late(struct sv_qp *qp);
void sv_recv_complete(struct sv_qp *qp, const struct ibv_wc *wc, bool solicited);
void sv_last_wqe_reached(struct sv_qp *qp);
void sv_cq_push(struct sv_cq *cq, const struct ibv_wc *wc, bool solicited);
/* A receive completion whose payload (n <= 64 bytes) travels in the CQE and
 * is copied to dst by the CPU inside ibv_poll_cq (mlx5's scatter-to-CQE). */
void sv_cq_push_scatter(struct sv_cq *cq, const struct ibv_wc *wc, uint64_t dst,
			const uint8_t *data, uint8_t n);
void sv_qp_to_error(struct sv_qp *qp, bool raise_fatal);
bool sv_rq_take(struct sv_qp *qp, struct sv_rwqe *out);

/* memory registrations (caller holds sv_lock) */
struct sv_mr *sv_mr_by_lkey(uint32_t lkey);
struct sv_mr *sv_mr_by_rkey(uint32_t rkey);
/* Copies between a registered range and a buffer as the HCA would (honours
 * detached pages after fork). 0 or -1 (EFAULT: memory gone). */
int sv_dma_write(struct sv_mr *mr, uint64_t addr, const void *src, size_t len);
int sv_dma_read(struct sv_mr *mr, uint64_t addr, void *dst, size_t len);

/* engine */
int sv_engine_start(void);             /* listener + progress thread; 0 or errno */
uint16_t sv_engine_port(void);
void sv_engine_kick(void);             /* doorbell */
int sv_engine_add_qp(struct sv_qp *qp); /* assigns qp_num; caller holds sv_lock */
void sv_engine_del_qp(struct sv_qp *qp);
void sv_engine_qp_ready(struct sv_qp *qp); /* caller holds sv_lock */
void sv_engine_register_ctx(struct sv_context *ctx);
void sv_engine_unregister_ctx(struct sv_context *ctx);
struct sv_qp *sv_engine_qp_by_num(uint32_t qpn);

uint64_t sv_now_ns(void);
uint64_t sv_ib_timeout_ns(uint8_t exp);   /* 4.096us * 2^exp, scaled */
uint64_t sv_rnr_timer_ns(uint8_t code);

void sv_engine_drop_parked(struct sv_qp *qp);
int sv_resolve_peer(struct sv_qp *qp, const struct ibv_ah_attr *ah, uint8_t port);
void sv_fill_ops(struct sv_context *ctx);

/* SIMVERBS_FAIL="<verb>:<N>": the Nth call of that verb in this process
 * fails as a provider out of resources would (config.c). true: fail this
 * call. */
bool sv_fail(const char *verb);

/* exported under SIMVERBS_PRIVATE_1 (see simverbs/include/simverbs.h) */
SV_EXPORT unsigned long simverbs_fails_fired(void);
SV_EXPORT int simverbs_mark_device_memory(void *addr, size_t len);
/* rdma_cm (rdmacm.c): QP qpn to ERR if it is still `expect` (never
 * dereferenced: the application may have destroyed it) */
SV_EXPORT void simverbs_qp_error_if_live(uint32_t qpn, const struct ibv_qp *expect);
SV_EXPORT int simverbs_find_port_by_ip(uint32_t ip_be, int *dev_out, int *port_out,
				       int *gid_out);

/* fork hazard */
void sv_fork_init_once(void);
int sv_fork_on_reg(struct sv_mr *mr);   /* DONTFORK or page bookkeeping */
void sv_fork_on_dereg(struct sv_mr *mr);
bool sv_fork_registered_any(void);
void sv_fork_wp(struct sv_mr *mr, size_t page_index, bool on);
void sv_fork_parent_hook(void);

/* logging */
void sv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define SV_TRACE(...) do { if (sv_cfg.trace) sv_log(__VA_ARGS__); } while (0)

#endif
