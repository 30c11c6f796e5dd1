/*
 * core.h - the internal objects behind the public handles: context,
 * listener, pipe, and the messages a pipe carries. Shared by the files of
 * src/core only; transports and channels must not include it.
 *
 * Threads. Each context runs one loop thread (loop.h). Public functions
 * validate their arguments and copy what they must on the caller's thread,
 * then post a command to the loop; everything that touches pipe, listener or
 * connection state runs on the loop thread. The few fields that other
 * threads read (handles' reference counts, the "info" a pipe reports, the
 * descriptor awaiting tw_pipe_read) are marked (mu): guarded by ctx->mu.
 *
 * Lifetimes. A pipe or listener is freed when its reference count drops to
 * zero. References: the application's handle (dropped by *_destroy), "live"
 * (held while the loop still works on the object: dropped once it is closed
 * and its last internal callback has run), and one per posted command. The
 * context frees whatever is left when it is destroyed.
 */
#ifndef TW_CORE_CORE_H
#define TW_CORE_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "channel/channel.h"
#include "platform/error.h"
#include "platform/list.h"
#include "platform/loop.h"
#include "tensorwire/tensorwire.h"
#include "transport/transport.h"
#include "wire/packets.h"

#define TW_NAME_MAX 32 /* wire names of transports and channels, with NUL */
#define TW_REGS_MAX 16
#define TW_DEFAULT_MAX_OBJECT ((uint64_t)64 << 20)
#define TW_URL_MAX 128

/* tensorwire's extensions (spec/wire.md 8). The Brochure entry that asks for
 * them: a transport name that is never a real transport, whose value lists
 * the extensions, joined by ','. The BrochureAnswer's acknowledgement: this
 * extra transportRegistrationIds key, whose value is a bit mask. */
#define TW_EXT_BROCHURE_NAME "tensorwire.ext"
#define TW_EXT_ANSWER_KEY UINT64_C(0x74770001)
#define TW_EXT_GOODBYE "goodbye"
#define TW_EXT_GOODBYE_BIT UINT64_C(1)
/* proof (spec 8.3): same-host channels prove their mechanism works between
 * the two processes before their first tensor, and fall back if not. Asked
 * for only when a registered channel speaks it. */
#define TW_EXT_PROOF "proof"
#define TW_EXT_PROOF_BIT UINT64_C(2)
/* eager (spec 8.4): small CPU tensors travel on the descriptor connection
 * right after the payloads, as payloads do, instead of on a channel after a
 * DescriptorReply: one hop per message. Asked for and acknowledged only by
 * contexts that enable it (tw_context_set_eager, TW_EAGER). */
#define TW_EXT_EAGER "eager"
#define TW_EXT_EAGER_BIT UINT64_C(4)
/* The largest tensor that travels eagerly (spec 8.4: a fixed bound, so that
 * both ends pick the same tensors without saying which). */
#define TW_EAGER_MAX_BYTES 65536
/* noreply (spec 8.5): on a pipe whose device pairs are all CPU to CPU, no
 * DescriptorReply at all: a tensor without a target device is received on
 * the CPU, so it takes its channel at once. Asked for and acknowledged with
 * eager (the same switch). */
#define TW_EXT_NOREPLY "noreply"
#define TW_EXT_NOREPLY_BIT UINT64_C(8)
/* Bounds of the end of a pipe (spec 8.2): how long an established goodbye
 * pipe whose peer is leaving waits for the verdict (the goodbye, or R's end
 * without one) after the first end it noticed; how long a closing pipe waits
 * for its goodbye to be written. What the peer wrote before it left is never
 * bounded by a timer: it is handed over however slowly the application
 * reads (spec 5.6.c). */
#define TW_PIPE_VERDICT_WAIT_MS 1000
#define TW_PIPE_GOODBYE_WAIT_MS 1000
/* The default bound of a handshake's server side (spec 3.8.e): the hello of
 * an accepted connection, then the Brochure and every registered connection
 * of a server pipe. Generous enough for a loaded host or a lossy network (a
 * connect whose SYNs are lost takes 1 + 2 + 4 + 8 = 15 s to get through on
 * Linux, and a client opens its connections one after another), below the
 * 60 s that RPC frameworks on top (PyTorch's rpc_timeout) wait by default,
 * so the server has given up and released the resources first. */
#define TW_DEFAULT_HANDSHAKE_TIMEOUT_MS 30000
/* The client's bound from tw_context_connect to the BrochureAnswer: a SYN
 * nobody answers is retried at 1, 3, 7 and 15 s on Linux, so 20 s lets four
 * retries through and still fails well before the server's handshake bound
 * and the 60 s RPC frameworks wait. */
#define TW_DEFAULT_CONNECT_TIMEOUT_MS 20000
/* An established connection whose peer acknowledges nothing for this long
 * is gone (tensorwire.h). */
#define TW_DEFAULT_LIVENESS_TIMEOUT_MS 30000
/* A bootstrap connection refused, reset or closed before the BrochureAnswer
 * is tried again this many times, after 10, 20, 40, ... ms, within the
 * connect timeout (a listen queue that overflowed in a connection storm). */
#define TW_CONNECT_RETRIES 5
#define TW_CONNECT_RETRY_FIRST_MS 10

/* ---- registrations ------------------------------------------------------ */

typedef struct tw_transport_reg {
	char name[TW_NAME_MAX];
	size_t name_len;
	const tw_transport_ops *ops;
	tw_transport *t;
	int64_t priority;
} tw_transport_reg;

typedef struct tw_channel_reg {
	char name[TW_NAME_MAX];
	size_t name_len;
	const tw_channel_ops *ops;
	tw_channel_ctx *c;
	int64_t priority;
} tw_channel_reg;

/* ---- context --------------------------------------------------------------- */

struct tw_context {
	tw_loop loop;
	tw_channel_env chenv;
	char *name;
	size_t name_len;
	uint64_t max_object; /* limit for nop-object frames (spec 2.2 has none) */
	uint64_t handshake_timeout_ms; /* atomic; 0: unbounded (spec 3.8.e) */
	/* tw_context_select: the user's choice of backends (select.h), used
	 * instead of TW_TRANSPORTS / TW_CHANNELS when set. Registration only. */
	char sel_transports[256], sel_channels[256];
	bool sel_transports_set, sel_channels_set;
	uint64_t connect_timeout_ms;   /* atomic; 0: unbounded */
	uint64_t liveness_ms;          /* atomic; 0: the system's defaults */
	uint64_t operation_timeout_ms; /* atomic; default of new pipes, 0: none */
	bool eager;                    /* atomic; tw_context_set_eager / TW_EAGER (spec 8.4) */
	char socket_ifname[128];       /* (mu) tw_context_set_socket_ifname / TW_SOCKET_IFNAME */
	int socket_family;             /* (mu) 0, AF_INET, AF_INET6 */

	pthread_mutex_t mu;
	/* registry: sorted by priority, highest first; frozen (mu) by the first
	 * listen or connect, read-only afterwards */
	tw_transport_reg transports[TW_REGS_MAX];
	size_t num_transports;
	tw_channel_reg channels[TW_REGS_MAX];
	size_t num_channels;
	bool frozen;                 /* (mu) */
	/* (mu) registrations refused as not viable, one line each ("channel
	 * cma: not offered: ..."), for tw_pipe_get_verdicts */
	char refused[2048];
	tw_list all_pipes;           /* (mu) every pipe not yet freed */
	tw_list all_listeners;       /* (mu) */
	bool close_posted;           /* (mu) */
	tw_deferred close_cmd;

	pthread_mutex_t join_mu;     /* serialises join/destroy */
	bool joined;                 /* (join_mu) */

	/* loop thread */
	bool closing;
	tw_list live_pipes;
	tw_list live_listeners;
	bool finished;
};

/* Loop thread: look up a registration by wire name (NULL if none). */
tw_transport_reg *tw__ctx_find_transport(tw_context *ctx, const char *name, size_t len);
tw_channel_reg *tw__ctx_find_channel(tw_context *ctx, const char *name, size_t len);
/* Any thread: resolve "scheme://address" to a registration; INVAL with
 * tw_last_error set (prefixed with `fn`) if nothing matches. */
tw_status_t tw__ctx_resolve_url(tw_context *ctx, const char *fn, const char *url,
                                bool for_listen, tw_transport_reg **reg_out,
                                const char **address_out);
/* Any thread: freezes the registry; TW_ERR_CLOSED if the context is closing. */
tw_status_t tw__ctx_freeze(tw_context *ctx, const char *fn);
/* Loop thread: an object finished; maybe the context can stop. */
void tw__ctx_check_done(tw_context *ctx);
/* Any thread: the API's failure when the context's loop refused work (fn
 * names the call): TW_ERR_CLOSED once the context is closed, TW_ERR_INVAL
 * naming the fork in a forked child of the process that made it. */
tw_status_t tw__ctx_unposted(const tw_context *ctx, const char *fn);
/* Any thread: the context's bounds for a new connection or listener. */
void tw__ctx_conn_opts(tw_context *ctx, tw_conn_opts *opts);

/* ---- listener ---------------------------------------------------------------- */

typedef struct tw_listener_entry {
	tw_listener *listener;
	tw_transport_reg *reg;
	tw_tlistener *tl;
	char address[TW_URL_MAX]; /* transport syntax, immutable once listening */
} tw_listener_entry;

/* A connection that has not sent its hello yet. */
typedef struct tw_hello_wait {
	tw_list link;
	tw_listener *listener;
	tw_conn *conn;
	tw_transport_reg *reg;
	uint64_t deadline;      /* uv_now() by which the hello must be in (UINT64_MAX: none) */
	uint64_t timeout_ms;
	bool timed_out;         /* the listener closed conn for it; its read comes back */
	char peer[TW_URL_MAX];
} tw_hello_wait;

/* Where a RequestedConnection with this id goes (spec 3.8). */
typedef struct tw_registration {
	uint64_t id;
	tw_pipe *pipe;
	int slot; /* TW_SLOT_* or the index of a channel connection */
} tw_registration;

enum { TW_SLOT_DESCRIPTOR = -1, TW_SLOT_REPLY = -2 };

typedef struct tw_accept_req {
	tw_list link;
	tw_deferred dfr;
	tw_listener *listener;
	tw_accept_cb cb;
	void *arg;
	tw_pipe *pipe;
	tw_status_t status;
	char detail[TW_DETAIL_MAX];
} tw_accept_req;

struct tw_listener {
	tw_context *ctx;
	tw_list all_link;       /* (mu) ctx->all_listeners */
	int refs;               /* atomic */
	size_t num_entries;     /* immutable after listen */
	tw_listener_entry entries[TW_REGS_MAX];
	tw_listener_error_cb err_cb; /* (mu) */
	void *err_arg;               /* (mu) */
	bool close_posted;           /* (mu) */
	tw_deferred close_cmd;

	/* loop thread */
	tw_list live_link;
	bool closed;
	bool live;
	unsigned inflight;
	tw_list accepts;        /* tw_accept_req waiting for a pipe */
	tw_list ready;          /* server pipes waiting for an accept */
	size_t num_ready;       /* how many (at most TW_LISTENER_READY_MAX) */
	tw_list hellos;         /* tw_hello_wait, in arrival order */
	uv_timer_t hello_timer; /* the earliest deadline of a hello wait (spec 3.8.e) */
	bool hello_timer_open;
	uint64_t hello_due;     /* when it fires, while active */
	uint64_t next_id;       /* registration ids, per listener (spec 3.8) */
	tw_registration *regs;
	size_t num_regs, cap_regs;
	bool mut_dead;          /* mutant listener_dies_on_bad_hello only */
};

void tw__listener_unref(tw_listener *l);
/* Frees without any check (context destroy, last reference). */
void tw__listener_free(tw_listener *l);
/* Loop thread: closes the listener (accepts fail, waiting pipes fail). */
void tw__listener_close_internal(tw_listener *l);
/* Loop thread, for pipes: registration ids (spec 3.8). */
tw_status_t tw__listener_register(tw_listener *l, tw_pipe *p, int slot, uint64_t *id_out);
void tw__listener_unregister_pipe(tw_listener *l, tw_pipe *p);
tw_listener_entry *tw__listener_entry_for(tw_listener *l, tw_transport_reg *reg);
/* Loop thread: a server pipe stopped needing the listener. */
void tw__listener_pipe_released(tw_listener *l);

/* ---- messages ------------------------------------------------------------------ */

enum tw_out_state { TW_OUT_QUEUED, TW_OUT_WAIT_REPLY, TW_OUT_READY, TW_OUT_SENDING };

/* A message being written (spec 3.10, sender side). */
typedef struct tw_out_msg {
	tw_list link;
	tw_deferred dfr;
	tw_pipe *pipe;
	tw_write_cb cb;
	void *arg;
	/* copy of the application's message (buffers are the application's) */
	tw_message msg;
	tw_payload *payloads;
	tw_tensor *tensors;
	uint8_t *meta;          /* all metadata bytes, one block */
	tw_nop_writer desc;     /* the encoded Descriptor */
	/* tensors whose device the DescriptorReply names (tw__pipe_needs_reply),
	 * counted when the Descriptor is posted */
	size_t num_untargeted;
	tw_device *targets;     /* per tensor: the device it goes to */
	enum tw_out_state state;
	uint64_t deadline;      /* uv_now() by which the callback is due (0: none) */
	uint64_t timeout_ms;    /* the pipe's operation timeout when tw_pipe_write was called */
	unsigned pending;       /* transport/channel operations in flight */
	bool held;              /* an operation failed as the peer left: wait for the verdict */
	bool peer_acked;        /* every non-empty tensor went through a channel whose send
	                           completes on the peer's confirmation (acked_by_peer),
	                           or every write of it completes once landed (ibv) */
	bool done;
	bool done_before_end;   /* done while the peer was there (before the pipe's end began) */
	tw_status_t status;
	char detail[TW_DETAIL_MAX];
} tw_out_msg;

enum tw_in_state { TW_IN_WANT_DESC, TW_IN_DESC_POSTED, TW_IN_DESC_READY, TW_IN_READING };

/* A message being read (spec 3.10, receiver side). */
typedef struct tw_in_msg {
	tw_list link;
	tw_deferred desc_dfr;
	tw_deferred read_dfr;
	tw_pipe *pipe;
	tw_read_descriptor_cb desc_cb;
	void *desc_arg;
	tw_read_cb read_cb;
	void *read_arg;
	bool desc_cb_fired;
	bool read_requested;
	bool read_cb_fired;
	enum tw_in_state state;
	uint64_t deadline;         /* uv_now() by which the pending callback is due (0: none) */
	/* the pipe's operation timeout when tw_pipe_read_descriptor and
	 * tw_pipe_read were called (caller's thread, before the post): the
	 * deadline's, read_requested says which */
	uint64_t desc_timeout_ms, read_timeout_ms;
	tw_wire_descriptor wire;   /* decoded Descriptor */
	bool have_wire;
	tw_message view;           /* what the application sees */
	tw_payload *payloads;
	tw_tensor *tensors;
	/* the allocation, copied */
	void **pay_bufs;
	tw_tensor_allocation *ten_allocs;
	tw_nop_writer reply;       /* encoded DescriptorReply, if any */
	unsigned pending;
	bool held;                 /* an operation failed as the peer left: wait for the verdict */
	tw_status_t status;
	char detail[TW_DETAIL_MAX];
} tw_in_msg;

/* Any thread: copies and validates a message for writing (sets
 * tw_last_error prefixed with `fn` on failure). */
tw_status_t tw__out_msg_new(const char *fn, const tw_message *msg, tw_out_msg **out);
void tw__out_msg_free(tw_out_msg *m);
/* Loop thread: builds the application's view of a decoded descriptor. */
tw_status_t tw__in_msg_build_view(tw_in_msg *m, size_t budget, size_t limit, char *detail,
                                  size_t detail_len);

/* What one packet from a peer may take from the heap once decoded (spec
 * 5.3.d): twice the context's max_object (its frames' limit), saturating,
 * and never less than TW_DECODE_FLOOR: a frame of a few KiB decodes to
 * about twenty times its size, so a context that lowered max_object to
 * bound its frames would otherwise refuse a message of a few dozen
 * tensors that its own limit lets through. */
#define TW_DECODE_FLOOR ((size_t)16 << 20)
static inline size_t tw__ctx_decode_budget(const tw_context *ctx)
{
	size_t b = ctx->max_object > SIZE_MAX / 2 ? SIZE_MAX : (size_t)ctx->max_object * 2;
	return b < TW_DECODE_FLOOR ? TW_DECODE_FLOOR : b;
}
void tw__in_msg_free(tw_in_msg *m);
void tw__device_from_wire(tw_device *dst, const tw_wire_device *src);
bool tw__device_eq(const tw_device *a, const tw_device *b);
/* Is d a CPU device (any index)? */
bool tw__device_is_cpu(const tw_device *d);
/* "cpu:0" into buf. */
const char *tw__device_str(const tw_device *d, char *buf, size_t buflen);
/* Checks a tw_device from the application (NUL-terminated type). */
bool tw__device_valid(const tw_device *d);

/* ---- pipe ---------------------------------------------------------------------- */

enum tw_pipe_state {
	TW_PIPE_CLIENT_CONNECTING, /* hello + brochure sent, waiting for the answer */
	TW_PIPE_SERVER_BROCHURE,   /* waiting for the brochure */
	TW_PIPE_SERVER_CONNS,      /* answer sent, waiting for requested connections */
	TW_PIPE_ESTABLISHED,
	TW_PIPE_FAILED,            /* closed or failed: err holds why */
};

typedef struct tw_pipe_channel {
	tw_channel_reg *reg;
	tw_channel *ch;         /* once opened */
	size_t num_conns;
	tw_conn **conns;        /* gathered before open */
	size_t arrived;
	uint64_t *ids;          /* registration ids (server: ours; client: the answer's) */
} tw_pipe_channel;

/* Why a registered channel was not selected for a pipe (tw_pipe_get_verdicts). */
#define TW_WHY_MAX 160

/* A loop timer that holds its pipe alive (inflight) while its handle is
 * open; closed for good when the pipe fails (or later, see pipe.c). */
typedef struct tw_pipe_timer {
	uv_timer_t t;
	bool inited;
	bool closed;
} tw_pipe_timer;

typedef struct tw_pipe_pair {
	tw_device local;
	tw_device remote;
	size_t chan;            /* index into pipe->chans */
} tw_pipe_pair;

struct tw_pipe {
	tw_context *ctx;
	tw_list all_link;       /* (mu) ctx->all_pipes */
	int refs;               /* atomic */
	void *user_data;        /* atomic */
	bool is_server;
	char label[TW_URL_MAX + 48];

	/* (mu) what other threads may look at */
	tw_status_t info_status;    /* INVAL while handshaking, OK once established */
	char info_detail[TW_DETAIL_MAX];
	tw_pipe_info info;
	tw_in_msg *delivered;       /* descriptor delivered, tw_pipe_read() not yet called */
	bool est_armed;
	bool close_posted;
	tw_deferred close_cmd;

	/* loop thread */
	tw_list live_link;
	tw_list ready_link;         /* server: listener->ready until accepted */
	bool live;
	bool started;
	enum tw_pipe_state state;
	tw_status_t err;
	char err_detail[TW_DETAIL_MAX];
	unsigned inflight;
	/* Handshake objects written and not yet completed. A client's
	 * RequestedConnections may still be on their way (a connection still
	 * connecting, an ibv set-up) when its first messages are written:
	 * their callbacks wait until every one has reached the server, which
	 * needs them all to establish its side (pipe_write.c). */
	unsigned hs_writes;
	tw_listener *listener;      /* server, until established or failed */
	tw_transport_reg *boot_reg; /* transport of the bootstrap connection */
	tw_transport_reg *reg;      /* chosen transport */
	const char *connect_address; /* client: the URL's address (points into url) */
	char url[TW_URL_MAX];
	tw_conn *boot;
	tw_conn *d;
	tw_conn *r;
	tw_conn *d_replacement;     /* server: arrived replacement descriptor connection */
	size_t awaiting;            /* server: requested connections still to arrive */
	bool need_replacement;
	uint64_t id_d, id_r;        /* server: registration ids of D (if replaced) and R */
	uint64_t handshake_ms;      /* server: the handshake's bound, 0 for none */
	tw_pipe_channel *chans;
	size_t num_chans;
	/* loop thread: per registered channel (context order), why it was not
	 * selected ("" when it was, or before selection) */
	char chan_why[TW_REGS_MAX][TW_WHY_MAX];
	tw_pipe_pair *pairs;
	size_t num_pairs;
	char remote_name[256];

	/* goodbye (spec 8.2): negotiated in the handshake; then R always has a
	 * read pending and a local close writes a goodbye on it first */
	bool ext_goodbye;
	bool ext_proof;             /* spec 8.3: channel instances open with TW_CHANNEL_PROOF */
	bool eager_asked;           /* this end wanted eager (spec 8.4): a client asked for it */
	bool eager_acked;           /* both ends asked for it / acknowledged it */
	/* spec 8.4: eager agreed and every device pair of the pipe is CPU to
	 * CPU; then tw__pipe_eager says which tensors go on D */
	bool ext_eager;
	bool noreply_acked;         /* spec 8.5, as eager_acked */
	bool ext_noreply;           /* spec 8.5: noreply agreed and every pair CPU to CPU */
	tw_conn *r_goodbye;         /* R after a local close, until the goodbye is written */
	/* The end of an established pipe (spec 5.6): the first connection that
	 * ends (EOF or reset) starts it. Once the verdict is known (goodbye
	 * pipes: from R, or TW_PIPE_VERDICT_WAIT_MS later), every write whose
	 * callback has not run gets it (writes_dead); the pipe itself fails only
	 * once D has handed over everything the peer wrote before it left and no
	 * read is in flight, or when a read met the end (the read side cannot go
	 * on in order), or when D neither ended, hung up nor delivered a frame
	 * for a whole TW_PIPE_VERDICT_WAIT_MS and holds no bytes unread (the
	 * peer left but keeps D open: nothing says more is coming). Bytes
	 * unread wait for the application however long it takes to read them.
	 * Operations that failed meanwhile are held. */
	bool ending;
	bool verdict_waited;        /* the verdict's wait ran out: take the first end */
	bool d_hup;                 /* D's peer hung up with bytes unread: they are coming */
	/* A server waiting for the client's other connections (SERVER_CONNS)
	 * heard one of the connections it has end or hang up: the client may
	 * have written everything and left before this server read its
	 * connections (a transport whose bytes land without the server
	 * reading, like ibv, or a busy server), and what it wrote may still
	 * establish the pipe. The first such report is held for
	 * TW_PIPE_VERDICT_WAIT_MS at most (or the handshake's bound): on
	 * establishment it is replayed as an established pipe's end, else the
	 * pipe fails with it. */
	tw_conn *early_conn;
	bool early_hup;             /* a hang-up (else an end with early_status) */
	tw_status_t early_status;
	char early_what[112];
	char early_detail[TW_DETAIL_MAX];
	bool d_stalled;             /* D, empty, neither ended nor moved for a whole wait */
	uint64_t d_frames;          /* frames D delivered (progress while ending) */
	bool heard;                 /* established: the peer sent a frame (D or R) */
	uint64_t d_frames_tick;     /* d_frames when the end's timer was last started */
	bool writes_dead;           /* the verdict is known: writes get wr_status */
	tw_status_t wr_status;
	char wr_detail[TW_DETAIL_MAX];
	bool d_ended;               /* D reported its end (after its last frame) */
	bool r_ended;               /* goodbye pipes: R ended without a goodbye */
	bool goodbye_seen;          /* goodbye pipes: R delivered the peer's goodbye */
	tw_status_t end_status;     /* the first end */
	char end_detail[TW_DETAIL_MAX];
	tw_pipe_timer timer;        /* server: the handshake's bound; client: the
	                             * connect timeout and its retries' back-off; then
	                             * the verdict's wait and the goodbye write's bound */
	tw_pipe_timer op_timer;     /* the earliest operation deadline */
	uint64_t op_due;            /* when op_timer fires (0: not armed) */
	uint64_t op_timeout_ms;     /* atomic: the bound of operations started from now */
	/* client: the connect timeout (spec: tensorwire.h) and the retries of a
	 * bootstrap connection lost before the BrochureAnswer */
	uint64_t connect_ms;
	uint64_t connect_deadline;  /* uv_now() by which the answer must be in (0: none) */
	unsigned attempts;          /* bootstrap connections tried so far */
	bool retry_pending;         /* the timer brings the next attempt */

	tw_list out_msgs;           /* writes whose callback has not run */
	tw_list in_msgs;            /* reads whose callbacks have not all run */
	tw_in_msg *d_busy;          /* its descriptor is on D or awaits read() */
	tw_in_msg *mut_held_desc;   /* mutant descriptor_cb_late only (platform/mutant.h) */

	tw_established_cb est_cb;   /* set by the arming thread before posting */
	void *est_arg;
	tw_deferred est_cmd;
	tw_deferred est_dfr;
	bool est_pending;
	bool est_ok;
	tw_deferred start_cmd;
	tw_deferred finish_dfr;
};

void tw__pipe_unref(tw_pipe *p);
/* Frees without any check (context destroy, last reference). */
void tw__pipe_free(tw_pipe *p);
/* Loop thread. */
tw_pipe *tw__pipe_new_server(tw_listener *l, tw_transport_reg *reg, tw_conn *boot,
                             const char *remote_name, size_t remote_name_len, const char *peer);
void tw__pipe_on_requested(tw_pipe *p, int slot, tw_conn *conn);
void tw__pipe_close_internal(tw_pipe *p, tw_status_t status, const char *detail);
/* Loop thread: selection and answer helpers (negotiate.c). */
/* The client's Brochure for p; records whether it asks for eager. */
tw_status_t tw__negotiate_brochure(tw_pipe *p, tw_nop_writer *w);
tw_status_t tw__negotiate_server(tw_pipe *p, const tw_wire_brochure *b, tw_nop_writer *answer,
                                 char *detail, size_t detail_len);
tw_status_t tw__negotiate_client(tw_pipe *p, const tw_wire_brochure_answer *a,
                                 uint64_t *id_d_out, bool *need_d_out, uint64_t *id_r_out,
                                 char *detail, size_t detail_len);

/* ---- built-in kinds (registry.c) ---- */
extern const tw_channel_ops *const tw__channel_kinds[];

#endif /* TW_CORE_CORE_H */
