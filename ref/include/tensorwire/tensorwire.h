/*
 * tensorwire.h - the public C11 API of libtensorwire, a reference
 * implementation of TensorPipe-style tensor pipes that speaks stock
 * TensorPipe's wire protocol (spec/wire.md).
 *
 * Objects: a context owns an event-loop thread, the registered transports and
 * channels, its listeners and its pipes. A listener accepts pipes on one or
 * more URLs. A pipe carries messages (metadata, payloads, tensors) in order.
 *
 * Rules that hold for every function below unless its comment says otherwise:
 *   - Thread safety: any function may be called from any thread, including
 *     from inside a callback.
 *   - Blocking: no function blocks except tw_context_join().
 *     tw_context_listen() and tw_pipe_get_verdicts() wait for the context's
 *     loop thread to do their work (at once on that thread). Callbacks of
 *     two contexts calling them on each other's objects at the same time
 *     both return: a loop thread that waits runs the other's call. The same
 *     holds for a callback that joins or destroys another context while
 *     that context's callbacks call into the first one. Not broken: two
 *     callbacks that join each other's contexts (neither loop can end
 *     while its callback waits), or two threads joining one context while
 *     its callback calls into one of them.
 *   - Callbacks: every callback runs on the context's loop thread, never
 *     inline inside the caller's stack, and exactly once. When the object
 *     closes (or fails) first, each pending callback fires with an error
 *     (TW_ERR_CLOSED for a local close, the failure's status otherwise).
 *   - Errors: functions return tw_status_t; on failure the thread-local
 *     tw_last_error() names the failing call and the reason. Callbacks get the
 *     status and a detail string that is valid only during the callback.
 *   - Outputs (*_out) are written only on success.
 *   - Lifetime: close (start shutdown, non-blocking), join (wait), destroy
 *     (free) are separate steps. A pipe or listener handle stays valid until
 *     its destroy call; the library frees it once its callbacks have run.
 *   - The peer going away (spec/wire.md 5.6, 8.2): a pipe notices the end of
 *     any of its connections even when nothing is pending on it and even
 *     when the peer sent bytes nobody has read yet, also while a server pipe
 *     still waits for its requested connections (then it fails with
 *     TW_ERR_EOF or TW_ERR_CONNRESET, and so do its pending accept-side
 *     notifications; a client that never completes the handshake fails it
 *     with TW_ERR_TIMEDOUT, see tw_context_set_handshake_timeout). Once
 *     established, everything the peer wrote before it left is still
 *     delivered, however slowly the application reads (no timer discards it;
 *     what is not read yet stays in the kernel's socket buffers); the pipe
 *     fails once the last of it was read (or a read met the end). Writes are
 *     different: as soon as it is known how the peer left, every write whose
 *     callback has not run fails, and so does every later one, because the
 *     peer can receive none of them. A write callback reports TW_OK only if
 *     all of its bytes were handed to the transport and every earlier write
 *     reported TW_OK (spec/wire.md 5.6.c, 5.6.d). The error says how the peer
 *     left:
 *       TW_ERR_EOF        the peer closed the pipe (tw_pipe_close,
 *                         tw_pipe_destroy or tw_context_close/destroy of a
 *                         tensorwire peer, which says goodbye first), or a
 *                         stock TensorPipe peer's connection ended (FIN);
 *       TW_ERR_CONNRESET  a tensorwire peer's connections were lost without
 *                         a goodbye: it died (SIGKILL, crash, exit without
 *                         closing) or the network failed; or a stock peer's
 *                         connection was reset.
 *     Stock TensorPipe peers cannot say goodbye (their wire has no such
 *     message), so with them a FIN is TW_ERR_EOF whether the peer closed or
 *     died. Closing discards what this side has not read yet.
 *
 * This header must not expose internals: all objects are opaque; only the
 * message description types are plain structs.
 */
#ifndef TENSORWIRE_TENSORWIRE_H
#define TENSORWIRE_TENSORWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TW_NODISCARD __attribute__((warn_unused_result))
#else
#define TW_NODISCARD
#endif

#define TW_VERSION_STRING "0.1.0"

/* ---- status -------------------------------------------------------------- */

typedef enum tw_status {
	TW_OK = 0,
	TW_ERR_NOMEM = -1,       /* allocation failed */
	TW_ERR_INVAL = -2,       /* bad argument from the caller */
	TW_ERR_PROTO = -3,       /* the peer broke the protocol (spec/wire.md) */
	TW_ERR_CLOSED = -4,      /* the object was closed locally */
	TW_ERR_EOF = -5,         /* the peer closed the pipe or connection (see above) */
	TW_ERR_TIMEDOUT = -6,    /* a deadline passed */
	TW_ERR_CANCELED = -7,    /* the operation was canceled */
	TW_ERR_UNSUPPORTED = -8, /* not supported by this build, backend or peer */
	TW_ERR_NODEV = -9,       /* no usable device (RDMA, GPU) */
	TW_ERR_SYS = -10,        /* a system call failed; the detail names it */
	TW_ERR_CONNRESET = -11,  /* the connection was reset or lost without a goodbye (peer died) */
} tw_status_t;

/* Short constant name of a status ("TW_ERR_PROTO"). Never NULL. */
const char *tw_status_name(tw_status_t status);

/* Detail of the last failing tensorwire call on this thread, e.g.
 * "tw_context_listen: tcp transport: bind 127.0.0.1:80: Permission denied".
 * Empty string if none. Valid until the next tensorwire call on this thread. */
const char *tw_last_error(void);

/* ---- devices and messages -------------------------------------------------- */

#define TW_DEVICE_TYPE_MAX 16 /* including the terminating NUL */

/* A memory location kind and index: {"cpu", 0}, {"cuda", 1}. */
typedef struct tw_device {
	char type[TW_DEVICE_TYPE_MAX];
	int32_t index;
} tw_device;

/* Convenience: {"cpu", 0}. */
tw_device tw_device_cpu(void);

/* A payload: host memory that travels on the descriptor connection. */
typedef struct tw_payload {
	void *data;              /* write: source; read side: NULL in descriptors */
	size_t length;
	const void *metadata;    /* opaque bytes, may be NULL when metadata_length = 0 */
	size_t metadata_length;
} tw_payload;

/* A tensor: memory on some device that travels over a channel. */
typedef struct tw_tensor {
	void *data;              /* write: source; read side: NULL in descriptors */
	size_t length;
	tw_device source_device; /* device holding the sender's buffer */
	bool has_target_device;  /* false: the receiver picks (DescriptorReply) */
	tw_device target_device;
	const void *metadata;
	size_t metadata_length;
	/* cuda:N sources only: the CUstream the data is ready on (NULL: the
	 * legacy default stream). The channel reads the buffer only after the
	 * work queued on it before tw_pipe_write() returned; it looks at the
	 * stream when it gets to each chunk of the tensor, so the stream must
	 * stay valid until the write's callback (a destroyed one fails the
	 * write naming cuEventRecord), and work queued on it meanwhile may be
	 * waited for too. */
	void *cuda_stream;
} tw_tensor;

/* A message. For tw_pipe_write() it describes what to send; in a
 * read-descriptor callback it describes what arrived (data pointers NULL). */
typedef struct tw_message {
	const void *metadata;
	size_t metadata_length;
	size_t num_payloads;
	const tw_payload *payloads;
	size_t num_tensors;
	const tw_tensor *tensors;
} tw_message;

/* Where the receiver wants a tensor: a buffer of the descriptor's length on
 * `device`. For a tensor that had a target device, `device` must equal it. */
typedef struct tw_tensor_allocation {
	void *data;
	tw_device device;
	/* cuda:N only: the CUstream whose queued work must finish before the
	 * channel overwrites `data` (NULL: the legacy default stream); it must
	 * stay valid until the read's callback. The read callback runs once
	 * the bytes are in `data`, on every device. */
	void *cuda_stream;
} tw_tensor_allocation;

/* The receiver's buffers for one message: counts must equal the descriptor's;
 * payload i gets `payloads[i]` of the descriptor's payload length. A buffer
 * may be NULL only when its length is 0. */
typedef struct tw_allocation {
	size_t num_payloads;
	void *const *payloads;
	size_t num_tensors;
	const tw_tensor_allocation *tensors;
} tw_allocation;

/* ---- objects ----------------------------------------------------------------- */

typedef struct tw_context tw_context;
typedef struct tw_listener tw_listener;
typedef struct tw_pipe tw_pipe;

/* ---- context ------------------------------------------------------------------- */

/* Creates a context and starts its loop thread. `name` (may be NULL = "") is
 * sent to peers in the hello of every pipe this context connects.
 * On success the caller owns *ctx_out and must close, join and destroy it.
 * A context belongs to the process that created it: in a forked child,
 * calls on it fail at once with TW_ERR_INVAL naming the fork, join too, and
 * destroy returns without freeing (the child creates its own context). The
 * child's copies of the library's descriptors (sockets, shared memory) are
 * closed as fork() returns in it, so a worker forked by a process that
 * then dies does not keep that process's connections open: its peers see
 * it gone at once (vfork and posix_spawn close nothing; exec closes them
 * anyway). */
TW_NODISCARD tw_status_t tw_context_create(const char *name, tw_context **ctx_out);

/* Registers a transport. `kind` selects the implementation ("uv" = TCP; "shm",
 * "ibv" as they land); `name` is the name used on the wire (NULL = kind);
 * higher `priority` wins. `options` is NULL or "key=value,key=value", kind
 * specific, plus one key every kind accepts: "max_object_bytes=N", the
 * largest nop-object frame (hello, Brochure, Descriptor...) this context
 * accepts from a peer before failing that pipe with TW_ERR_PROTO (default
 * 64 MiB; the last registration that sets it wins; payload and tensor frames
 * are not limited by it). Twice that, and at least 16 MiB, bounds what such
 * a frame may take in memory once decoded (a Descriptor of many small
 * tensors grows about twentyfold): more fails the pipe with TW_ERR_PROTO
 * too (spec/wire.md 5.3.d). Must be called before the first listen or connect.
 * Opt-in busy polling, "busy_poll_us=N" (uv, shm and ibv; 0 = off, the default):
 * after work, the context's loop thread polls for N microseconds instead of
 * sleeping, so a message that arrives meanwhile costs no wake-up; that
 * thread uses a whole CPU while it polls, and two polling peers pinned to
 * one CPU slow each other down badly. On uv the bound is the context's (the
 * longest asked for by a registered transport that carries a connection
 * wins). On ibv the completion queues are polled unarmed for the bound, so
 * a completion costs no event (a read of the completion channel and a
 * re-arm, each a system call on rxe).
 * Names starting with "tensorwire." are reserved (spec/wire.md 8.1) and
 * refused with TW_ERR_INVAL.
 * Returns TW_ERR_UNSUPPORTED (with the reason) if the kind is not viable on
 * this machine; the context stays usable without it. */
TW_NODISCARD tw_status_t tw_context_register_transport(tw_context *ctx, const char *kind,
                                                       const char *name, int64_t priority,
                                                       const char *options);

/* Chooses which backends this context may register, instead of the
 * environment's TW_TRANSPORTS / TW_CHANNELS: each a comma list of kinds,
 * either "shm,uv" (only these; the order is their priority, first highest,
 * whatever the registration says) or "^cma,^xth" (all but these). NULL
 * keeps the environment's (an empty variable counts as unset); "" sets no
 * restriction: every kind, whatever the environment says. Registering a
 * kind the
 * choice leaves out fails with TW_ERR_UNSUPPORTED naming the choice. A
 * malformed list, or one naming a kind stock TensorPipe does not have (uv,
 * shm, ibv; basic, mpt, cma, xth, cuda_basic, cuda_ipc, cuda_gdr,
 * cuda_xth), is TW_ERR_INVAL here; in the environment, at the first
 * registration. Call it before registering. */
TW_NODISCARD tw_status_t tw_context_select(tw_context *ctx, const char *transports,
                                           const char *channels);

/* Registers a channel, with the same conventions ("basic"; "mpt", "cma",
 * "xth", "cuda_ipc", "cuda_gdr" as they land). */
TW_NODISCARD tw_status_t tw_context_register_channel(tw_context *ctx, const char *kind,
                                                     const char *name, int64_t priority,
                                                     const char *options);

/* Bounds the server side of every handshake (spec/wire.md 3.8.e): a
 * connection a listener accepted must send its hello, and a server pipe must
 * get its Brochure and every connection it registered (it is established),
 * within `timeout_ms` milliseconds of the connection's accept and of the
 * pipe's hello respectively. A connection without its hello in time is
 * closed (the error observer of tw_listener_on_error hears TW_ERR_TIMEDOUT;
 * the listener keeps serving). A server pipe that is not established in time
 * fails with TW_ERR_TIMEDOUT and a detail naming what never arrived ("no
 * Brochure", or the registered connections: "descriptor-reply (id 0),
 * channel 'basic' #0 (id 1)"); its registration ids are released, so a
 * RequestedConnection that comes later is closed. 0 removes the bound (as
 * in stock TensorPipe: a silent client then holds the resources until the
 * application closes the pipe or listener).
 * Default: 30000 (30 s): a loaded host or a lossy network must not fail
 * good clients (a connect whose SYNs are lost needs 15 s on Linux, and a
 * client opens its connections one after another), and it stays below the
 * 60 s RPC frameworks on top wait by default (PyTorch's rpc_timeout).
 * Any thread, any time; does not block; no callback. Applies to connections
 * accepted and server pipes started after the call; those already waiting
 * keep the bound they started with. Client pipes are not bounded by it.
 * TW_ERR_INVAL if ctx is NULL. */
TW_NODISCARD tw_status_t tw_context_set_handshake_timeout(tw_context *ctx, uint64_t timeout_ms);

/* Bounds a client pipe's handshake: from tw_context_connect until the
 * server's BrochureAnswer arrived. Past it the pipe fails with
 * TW_ERR_TIMEDOUT ("connect timed out: no BrochureAnswer from ... within N
 * ms"), and so does each of its pending callbacks; the TCP connects of the
 * pipe's connections are bounded by it too (SYNs nobody answers). Within it,
 * a bootstrap connection whose connect failed (refused, or reset before it
 * was established: a server whose listen queue overflowed) is tried again
 * up to 5 times, after 10, 20, 40, 80 and 160 ms; the last failure names
 * the number of attempts ("Connection refused (6 attempts)"). One that was
 * established is never tried again, since the server may have taken its
 * hello already: its loss before the answer fails the pipe at once, saying
 * the server dropped it (out of descriptors or memory, or it died). 0
 * removes the bound (the kernel's SYN retries, about 2 min on Linux, then
 * still apply). Default: 20000 (20 s: four SYN retries get through). Any
 * thread, any time; applies to pipes connected after the call (the bound
 * in force when tw_context_connect was called).
 * TW_ERR_INVAL if ctx is NULL. */
TW_NODISCARD tw_status_t tw_context_set_connect_timeout(tw_context *ctx, uint64_t timeout_ms);

/* The liveness bound of established connections: a connection whose peer
 * acknowledges nothing for `timeout_ms` milliseconds (a silent network:
 * dropped packets, a blackhole route, a host gone; also a peer that stops
 * reading while this side has data to send, so that its receive window
 * stays closed) fails its pipe with TW_ERR_TIMEDOUT on this side, whether or
 * not an operation is pending: TCP keepalive probes from a third of the
 * bound on notice an idle connection's silence, TCP_USER_TIMEOUT bounds
 * unacknowledged data. These are socket options of this side only; a stock
 * TensorPipe peer is unaffected (and has no such bound). A peer whose
 * process is stopped (SIGSTOP) but whose kernel still answers is alive to
 * TCP: only an operation timeout (below) bounds waiting for it. 0 leaves
 * the system's defaults (no keepalive; about 15 min of retransmissions).
 * Default: 30000 (30 s). Any thread, any time; applies to connections
 * connected or accepted (listeners created) after the call. TW_ERR_INVAL if
 * ctx is NULL. */
TW_NODISCARD tw_status_t tw_context_set_liveness_timeout(tw_context *ctx, uint64_t timeout_ms);

/* The default operation timeout of pipes created after the call (see
 * tw_pipe_set_operation_timeout). Default: 0 (none). Any thread, any time.
 * TW_ERR_INVAL if ctx is NULL. */
TW_NODISCARD tw_status_t tw_context_set_operation_timeout(tw_context *ctx,
                                                          uint64_t timeout_ms);

/* Eager small tensors (spec/wire.md 8.4): on pipes between two tensorwire
 * contexts that both enable it, and whose channels all move CPU memory to
 * CPU memory, each CPU tensor of at most 64 KiB travels on the pipe's
 * descriptor connection right after the message's payloads, instead of on
 * a channel after the receiver's DescriptorReply: one hop per message
 * instead of three when a tensor names no target device. Larger tensors,
 * and every tensor of a pipe with a CUDA channel or a stock peer, go as
 * before. The receiver's buffer for such a tensor must be CPU memory, as
 * on any pipe whose channels are all CPU ones. The write of a message
 * whose tensors are all eager completes once its bytes are handed to the
 * transport, as a message of payloads does, without waiting for the
 * receiver's buffers: a write's callback never means the receiver has
 * read it. The same switch asks for noreply (spec/wire.md 8.5): on such
 * pipes no DescriptorReply at all, and a larger tensor without a target
 * device takes its channel at once, to be received in CPU memory.
 * Default: on, or TW_EAGER=0 in the environment at tw_context_create
 * turns both off (1 or empty: on; any other value makes
 * tw_context_create fail with TW_ERR_INVAL naming it). Any thread, any
 * time; applies to pipes connected or accepted after the call.
 * TW_ERR_INVAL if ctx is NULL. */
TW_NODISCARD tw_status_t tw_context_set_eager(tw_context *ctx, bool on);

/* Which local interfaces a TCP listener bound to a wildcard address
 * ("uv://0.0.0.0:0", "uv://[::]:0") may advertise to clients (its
 * BrochureAnswer and tw_listener_url carry one concrete address; a remote
 * client cannot use 0.0.0.0). `ifnames` is a comma list in the manner of
 * NCCL_SOCKET_IFNAME: "eth0,ib" takes interfaces whose names start so,
 * "=eth0" exact names, "^docker,lo" every interface but those; NULL or ""
 * keeps the default rules: an interface that is up, not loopback, not a
 * container bridge (docker*, br-*, virbr*, lxcbr*, cni*, flannel*, cali*,
 * veth*), with an address that is not link-local; IPv4 first for 0.0.0.0,
 * IPv6 first for [::]; loopback only when nothing else qualifies. `family`:
 * 0 either, 4 IPv4 only, 6 IPv6 only. A list that names no existing
 * interface makes tw_context_listen fail with TW_ERR_INVAL naming it.
 * Defaults come from the environment at tw_context_create: TW_SOCKET_IFNAME
 * (same syntax) and TW_SOCKET_FAMILY (4, 6, AF_INET, AF_INET6). Any thread;
 * applies to listeners created after the call. TW_ERR_INVAL if ctx is NULL,
 * family is not 0, 4 or 6, or the list is longer than 127 bytes. */
TW_NODISCARD tw_status_t tw_context_set_socket_ifname(tw_context *ctx, const char *ifnames,
                                                      int family);

/* Listens on `num_urls` URLs ("uv://127.0.0.1:0", "tcp://[::1]:0"), one per
 * transport. The listener is owned by the caller (close, destroy). A
 * missing port means 0 (any); host names are refused as in
 * tw_context_connect. A wildcard address ("uv://0.0.0.0:0", "uv://[::]:0")
 * binds every interface and advertises one concrete address to clients
 * (tw_context_set_socket_ifname), which tw_listener_url reports. */
TW_NODISCARD tw_status_t tw_context_listen(tw_context *ctx, const char *const *urls,
                                           size_t num_urls, tw_listener **listener_out);

/* Starts connecting a pipe to `url`. Returns at once; writes and reads may be
 * queued before the handshake completes. The pipe is owned by the caller.
 * The URL is checked before return: an unknown scheme, an unparsable
 * address, a missing port ("uv://10.0.0.1") or a host name
 * ("uv://myhost:80": names are not resolved, since a lookup could block) is
 * TW_ERR_INVAL at once, with tw_last_error naming what is wrong. Addresses
 * are IP literals: "uv://10.0.0.1:5000", "uv://[fe80::1%eth0]:5000". */
TW_NODISCARD tw_status_t tw_context_connect(tw_context *ctx, const char *url,
                                            tw_pipe **pipe_out);

/* Starts shutdown: closes every listener and pipe of the context (their
 * pending callbacks fire with TW_ERR_CLOSED). Non-blocking, idempotent. */
void tw_context_close(tw_context *ctx);

/* Blocks until the context is closed and every callback has run, then stops
 * the loop thread. Must not be called from a callback (returns TW_ERR_INVAL). */
TW_NODISCARD tw_status_t tw_context_join(tw_context *ctx);

/* Frees the context. Closes and joins first if the caller did not. Handles of
 * its listeners and pipes must not be used afterwards (they are freed too). */
void tw_context_destroy(tw_context *ctx);

/* ---- listener ------------------------------------------------------------------- */

/* `pipe` is owned by the callee on success (NULL on error). */
typedef void (*tw_accept_cb)(tw_listener *listener, tw_status_t status, const char *detail,
                             tw_pipe *pipe, void *arg);

/* Arms one accept: `cb` fires once, with the next pipe whose hello arrived.
 * Several accepts may be pending; they are served in order. Connections that
 * arrive while no accept is pending wait in a queue. A bad connection
 * (malformed hello, closed before its hello, no hello within the handshake
 * timeout) never fails the listener. The pipe handed over may still be
 * handshaking: it fails with TW_ERR_TIMEDOUT if its client does not complete
 * the handshake in time (tw_context_set_handshake_timeout). */
TW_NODISCARD tw_status_t tw_listener_accept(tw_listener *listener, tw_accept_cb cb, void *arg);

/* Writes the URL clients should use for `transport` (a registered transport
 * name, its kind or one of its schemes such as "tcp" for uv, or NULL for the
 * first URL) into buf, e.g. "uv://127.0.0.1:43127": the bound address, or
 * for a wildcard listener the address it advertises. */
TW_NODISCARD tw_status_t tw_listener_url(tw_listener *listener, const char *transport,
                                         char *buf, size_t buflen);

/* Observes connections the listener dropped before they became pipes: a
 * malformed hello, one closed before its hello, one whose hello did not come
 * within the handshake timeout (TW_ERR_TIMEDOUT), an unknown registration id
 * (a RequestedConnection for a pipe that failed or timed out included), a
 * failed accept. `cb` runs on the loop thread once per dropped connection
 * (not once in all: it is an observer) with the status (TW_ERR_PROTO,
 * TW_ERR_EOF, ...) and a detail naming the peer and the problem; the listener
 * keeps accepting either way. Replaces any previous observer; cb NULL stops
 * observing. Optional. */
typedef void (*tw_listener_error_cb)(tw_listener *listener, tw_status_t status,
                                     const char *detail, void *arg);
TW_NODISCARD tw_status_t tw_listener_on_error(tw_listener *listener, tw_listener_error_cb cb,
                                              void *arg);

/* Stops listening; pending accept callbacks fire with TW_ERR_CLOSED (an
 * accept already matched with a pipe before the close, whose callback is
 * on its way, still reports TW_OK with that pipe, which then fails as
 * below unless established). Server
 * pipes still waiting for their requested connections (spec 3.8) fail with
 * TW_ERR_CLOSED too (as in stock): keep the listener open until the pipes
 * you accepted are established (tw_pipe_on_established). */
void tw_listener_close(tw_listener *listener);

/* Closes if needed and releases the handle. */
void tw_listener_destroy(tw_listener *listener);

/* ---- pipe ------------------------------------------------------------------------ */

typedef void (*tw_write_cb)(tw_pipe *pipe, tw_status_t status, const char *detail, void *arg);

/* `desc` is owned by the pipe and valid until the matching tw_pipe_read()
 * callback has run (or the pipe is destroyed). NULL on error. */
typedef void (*tw_read_descriptor_cb)(tw_pipe *pipe, tw_status_t status, const char *detail,
                                      const tw_message *desc, void *arg);

typedef void (*tw_read_cb)(tw_pipe *pipe, tw_status_t status, const char *detail, void *arg);

/* Queues a message. The message struct, its arrays and metadata are copied
 * before return; payload and tensor data buffers must stay valid and
 * unchanged until `cb` runs. Messages arrive in write order.
 * A message the pipe cannot carry fails alone, before any of it is sent:
 * `cb` gets TW_ERR_UNSUPPORTED with a detail naming the part and the limit
 * when no channel of the pipe serves a tensor's devices, or when a payload,
 * a tensor or the Descriptor exceeds what the pipe's transport or the
 * tensor's channel carries (spec/wire.md 2.5: shm and ibv frames are under
 * 4 GiB, their packets at most 2 MiB); the pipe and later messages are not
 * affected. */
TW_NODISCARD tw_status_t tw_pipe_write(tw_pipe *pipe, const tw_message *msg, tw_write_cb cb,
                                       void *arg);

/* Asks for the next message's descriptor. At most one descriptor is
 * outstanding: after a descriptor callback, call tw_pipe_read() for that
 * message before the next descriptor can be delivered. */
TW_NODISCARD tw_status_t tw_pipe_read_descriptor(tw_pipe *pipe, tw_read_descriptor_cb cb,
                                                 void *arg);

/* Receives the message whose descriptor was delivered last into `alloc`
 * (copied before return; the buffers must stay valid until `cb` runs). */
TW_NODISCARD tw_status_t tw_pipe_read(tw_pipe *pipe, const tw_allocation *alloc, tw_read_cb cb,
                                      void *arg);

/* Closes the pipe: its connections are closed and each pending callback fires
 * with TW_ERR_CLOSED. Non-blocking, idempotent. If the pipe is established and
 * its peer is a tensorwire implementation, a goodbye (spec/wire.md 8.2) is
 * written first, so the peer's pipe fails with TW_ERR_EOF, not
 * TW_ERR_CONNRESET; the connection carrying it closes once it is written (at
 * most 1 s later: tw_context_join may wait that long). tw_pipe_destroy and
 * tw_context_close/destroy close this way too. */
void tw_pipe_close(tw_pipe *pipe);

/* Closes if needed and releases the handle. */
void tw_pipe_destroy(tw_pipe *pipe);

/* What the handshake chose. Valid once the pipe is established (before that,
 * and after a failed handshake, returns TW_ERR_INVAL / the failure). */
typedef struct tw_pipe_info {
	char transport[32];    /* wire name, e.g. "uv" */
	char channel[32];      /* wire name of the channel for (cpu:0, cpu:0), "" if none */
	char remote_name[256]; /* the peer context's name (server side), else "" */
	bool is_server;
	/* What the transport uses, where it has a choice: for ibv the device,
	 * port, GID index and type ("simrdma1 port 1, GID 3 (RoCE v2
	 * ::ffff:10.0.0.1); ..."), else "". */
	char transport_detail[512];
} tw_pipe_info;

TW_NODISCARD tw_status_t tw_pipe_get_info(tw_pipe *pipe, tw_pipe_info *info_out);

/* Every backend this pipe's context was asked to register, one line each
 * ("\n"-terminated), with its verdict for this pipe and the reason:
 *   "transport shm: selected"
 *   "transport uv: not selected: the pipe uses shm"
 *   "channel cma: selected: copies proven both ways (spec 8.3)"
 *   "channel cma: selected: the peer cannot copy from this process
 *    (process_vm_readv from pid 4242: Operation not permitted): tensors to
 *    the peer travel inline"
 *   "channel mpt: not selected: the peer does not offer mpt"
 *   "channel cma: not offered: cma channel: not viable: ..."  (registration
 *    refused on this host, or left out by TW_CHANNELS / tw_context_select)
 * Valid once the pipe is established (as tw_pipe_get_info). A channel's
 * line can change once, shortly after establishment, when its proof ends.
 * TW_ERR_INVAL if buf is too small (the text is cut, NUL-terminated). */
TW_NODISCARD tw_status_t tw_pipe_get_verdicts(tw_pipe *pipe, char *buf, size_t len);

/* The channel chosen for tensors going from `local` to `remote`, into buf. */
TW_NODISCARD tw_status_t tw_pipe_channel_for(tw_pipe *pipe, const tw_device *local,
                                             const tw_device *remote, char *buf,
                                             size_t buflen);

/* Arms a one-shot notification: `cb` fires once, with TW_OK when the pipe is
 * established (at once, deferred, if it already is) or with the error that
 * ended its handshake or the pipe. Optional; at most one armed at a time. */
typedef void (*tw_established_cb)(tw_pipe *pipe, tw_status_t status, const char *detail,
                                   void *arg);
TW_NODISCARD tw_status_t tw_pipe_on_established(tw_pipe *pipe, tw_established_cb cb, void *arg);

/* Bounds each operation of the pipe started after the call (tw_pipe_write,
 * tw_pipe_read_descriptor, tw_pipe_read): if its callback has not run
 * `timeout_ms` milliseconds after the call, the operation fails with
 * TW_ERR_TIMEDOUT and a detail naming it and the bound, and so does the
 * pipe: a write may have been partly sent and a read partly received, so
 * the stream cannot continue; every other pending callback fires with the
 * same error, at once (nothing waits behind a timed-out operation), and the
 * peer sees the pipe closed. A read_descriptor waits for the peer's next
 * message, so its bound is how long the application is ready to wait for
 * one. 0: no bound (the default, or the context's, see
 * tw_context_set_operation_timeout). Any thread, any time: an operation
 * keeps the bound in force when it was called, whenever the loop thread
 * gets to it. TW_ERR_INVAL if pipe is NULL. */
TW_NODISCARD tw_status_t tw_pipe_set_operation_timeout(tw_pipe *pipe, uint64_t timeout_ms);

/* User data slot, never touched by the library. */
void tw_pipe_set_user_data(tw_pipe *pipe, void *data);
void *tw_pipe_get_user_data(tw_pipe *pipe);

#ifdef __cplusplus
}
#endif

#endif /* TENSORWIRE_TENSORWIRE_H */
