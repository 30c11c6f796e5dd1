/*
 * transport.h - what a transport is to the core (spec/wire.md section 2).
 *
 * A transport moves frames over connections. The core never knows whether a
 * connection is a TCP socket, a pair of shared-memory rings or a verbs queue
 * pair; it only uses the three objects below through their vtables:
 *
 *   tw_transport   one per registered transport per context: viability,
 *                  the domain descriptor, listen, connect.
 *   tw_tlistener   a bound listener; reports each accepted connection.
 *   tw_conn        a connection carrying frames in order in both directions.
 *
 * Rules every implementation follows (the core relies on them):
 *   - Everything runs on the context's loop thread (tw_loop), including the
 *     create call's caller; nothing here is thread-safe by itself.
 *   - Callbacks never run inside the call that queued them (use
 *     tw__loop_defer), and every queued operation gets exactly one callback.
 *   - A connection fails as a whole: after the first error every pending and
 *     later operation completes with that status and detail. Close() fails
 *     every pending operation with TW_ERR_CLOSED; after close() returns the
 *     connection never touches a caller buffer again, and the conn pointer
 *     stays valid until its last callback has run (then the transport frees
 *     it: the owner must not use it after close()). Unless it lingers (see
 *     TW_WRITE_HELLO), its end is sent to the peer before close() returns
 *     (a socket's sending side is shut down there, not when the loop gets
 *     round to closing its descriptor), so the end is out before any
 *     callback the close causes: a peer that copies out of this process's
 *     memory learns of it before the memory is handed back (peer_left).
 *   - Detail strings name the transport and the failing call, e.g.
 *     "tcp transport: connect 127.0.0.1:9: Connection refused".
 *   - Frames: a write() is one frame made of the concatenation of its iovecs
 *     (the transport adds its own length prefix: u64le on uv/tcp, u32le in
 *     shm/ibv rings). read_into() expects a frame of exactly `len` bytes and
 *     fails the connection with TW_ERR_PROTO before touching the body if the
 *     prefix says otherwise. read_alloc() accepts a frame of at most
 *     `max_len` bytes and checks the prefix against that limit before
 *     allocating. Both loop over short transfers, so frames may exceed 4 GiB
 *     where the framing allows it (a transport whose prefix is narrower must
 *     fail such a write with TW_ERR_UNSUPPORTED, not truncate).
 *   - TW_WRITE_OBJECT marks a frame that holds a nop object: ring transports
 *     must write it in one piece (spec 2.3.6); stream transports ignore it.
 *     read_alloc() is only used for nop objects. A transport may enforce a
 *     lower limit of its own (shm/ibv rings: a nop object must fit the 2 MiB
 *     ring): fail the read with TW_ERR_PROTO, or the write with
 *     TW_ERR_UNSUPPORTED, through the callback and with a detail.
 *   - TW_WRITE_HELLO marks the first frame of a connection this side
 *     opened with connect() (its hello, spec 3.3). A stock TensorPipe
 *     listener fails its next pending accept when a connection ends before
 *     its hello (wire.md 3.3.f, 3.3.g), so a connection closed while that frame is
 *     not yet out lingers: the transport keeps a private copy of what is
 *     left of it, finishes the connect, writes it and only then closes the
 *     socket, within TW_HELLO_LINGER_MS (a connect still pending then is
 *     abandoned). To its owner the close is the same as any other: the
 *     write's callback reports TW_ERR_CLOSED and nothing else is heard.
 *     shm lingers the same way through its descriptor exchange (a socket
 *     not yet connected is not waited for); ibv needs no flag: a closed
 *     connection with frames in its outbox lingers until they land
 *     (spec 2.4.4.b).
 *   - TW_WRITE_MORE says the caller writes another frame on this
 *     connection right after this one, in the same loop pass (a Descriptor
 *     and the frames that follow it, spec 3.10): a stream transport may hold
 *     this frame back until a write without the flag, and put them out with
 *     one system call, so the peer is woken once. The caller must follow
 *     with a write without the flag (or fail the connection, or close it);
 *     a transport may ignore the flag.
 *   - Several connections to the same peer are independent: the core opens
 *     one per descriptor, reply and channel connection (spec 3.1), and a
 *     channel with lanes (mpt) opens more through its own transport instances.
 *   - The end of a connection must be noticeable without reading (spec
 *     5.6.b): watch_end() asks to hear of it, in two steps.
 *       The end: the connection failed (the peer closed it with nothing left
 *       unread, a reset, any error). While no read is queued and no received
 *       byte waits unread, the transport watches for it (tcp: readability,
 *       then a MSG_PEEK; a ring: the peer's closed flag with the ring empty,
 *       or its bootstrap socket). It never consumes or reorders a byte, so
 *       frames that arrived before the end stay readable and the end is
 *       reported only after the last of them was read: a peer that writes
 *       and then closes is not cut short by the watch.
 *       The hang-up: the peer closed its end in order (tcp: its FIN, seen
 *       through EPOLLRDHUP / uv_poll's UV_DISCONNECT; a ring: the peer's
 *       closed flag) while bytes it sent still wait unread and no read is
 *       queued to reach them. The transport reports it without reading
 *       anything, at most once, as soon as it can see it (not only once a
 *       read is queued); the bytes stay readable in order, and the end
 *       follows once the last of them was read (or the owner closes). A
 *       hang-up with nothing unread is simply the end. The owner decides
 *       what a hang-up means: a pipe being set up fails, an established one
 *       lets the application read what is left for a bounded time.
 *   - A peer that is gone (a reset, a broken pipe, its closed socket) can
 *     take no more bytes, but what it sent before is still to be read:
 *     every write then fails, queued or later, with the end's status, while
 *     the reads go on until what it sent was read; only then does the
 *     connection fail (tw__conn_fail_writes). A write waiting for the peer
 *     to read never takes the bytes it sent with it.
 */
#ifndef TW_TRANSPORT_TRANSPORT_H
#define TW_TRANSPORT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "platform/loop.h"
#include "tensorwire/tensorwire.h"

typedef struct tw_transport tw_transport;
typedef struct tw_tlistener tw_tlistener;
typedef struct tw_conn tw_conn;

/* One piece of a frame to write (the caller's memory, not copied). */
typedef struct tw_iov {
	const void *base;
	uint64_t len;
} tw_iov;

enum { TW_WRITE_OBJECT = 1u << 0, TW_WRITE_HELLO = 1u << 1, TW_WRITE_MORE = 1u << 2 };

/* How long a closed connection may linger to get its hello out (above). */
#define TW_HELLO_LINGER_MS 1000

/* The context's bounds on a connection (tensorwire.h), handed to connect()
 * and listen(); 0 means no bound of that kind. A transport that cannot
 * honour one ignores it and says so in its file comment.
 *   connect_timeout_ms  a connect that has not completed by then fails its
 *                       operations with TW_ERR_TIMEDOUT;
 *   liveness_ms         an established connection whose peer acknowledges
 *                       nothing for this long (a silent network, a peer
 *                       whose kernel is gone) fails with TW_ERR_TIMEDOUT, even
 *                       while idle. */
typedef struct tw_conn_opts {
	uint64_t connect_timeout_ms;
	uint64_t liveness_ms;
	/* Which local interfaces a listener bound to a wildcard address may
	 * advertise (tensorwire.h, tw_context_set_socket_ifname): a list like
	 * "eth0,ib" (prefixes), "^docker,lo" (all but these), "=eth0" (exact
	 * names); "" for the default rules. family: 0, AF_INET or AF_INET6. */
	char ifname[128];
	int family;
} tw_conn_opts;

/* What one connection of a transport instance carries at most (spec 2.5):
 * the body of one frame (a payload or a tensor), and one packet (a nop
 * object frame: hello, Brochure, Descriptor...). The pipe checks a message
 * against them before sending any of it, so a message that cannot travel
 * fails alone (tw_pipe_write) instead of failing the connection. */
typedef struct tw_transport_limits {
	uint64_t max_frame;
	uint64_t max_packet;
	/* A write's callback runs only once its bytes are in the peer's memory
	 * (ibv: the RDMA writes completed), not when they were handed over. */
	bool writes_land;
} tw_transport_limits;

typedef void (*tw_conn_write_cb)(tw_conn *conn, tw_status_t status, const char *detail,
                                 void *arg);
/* read_into: buf is the caller's buffer, len its expected length.
 * read_alloc: buf is a fresh tw__malloc'd block the callee now owns (NULL if
 * len is 0 or on error), len the frame length. */
typedef void (*tw_conn_read_cb)(tw_conn *conn, tw_status_t status, const char *detail,
                                void *buf, uint64_t len, void *arg);
/* The connection ended: `status` is the connection's failure (TW_ERR_EOF the
 * peer closed it, TW_ERR_CONNRESET a reset, or whatever error a read or
 * write met first, with that operation's detail), or TW_ERR_CLOSED when the
 * owner closed it first. */
typedef void (*tw_conn_end_cb)(tw_conn *conn, tw_status_t status, const char *detail, void *arg);
/* The peer hung up while bytes it sent still wait unread (the rules above):
 * `detail` names the transport, the peer and what happened. */
typedef void (*tw_conn_hangup_cb)(tw_conn *conn, const char *detail, void *arg);
/* An accepted connection (status TW_OK), or a per-connection accept failure
 * that did not stop the listener (conn NULL, e.g. EMFILE). */
typedef void (*tw_tlistener_accept_cb)(tw_tlistener *listener, tw_status_t status,
                                       const char *detail, tw_conn *conn, void *arg);

typedef struct tw_conn_ops {
	/* Queues one frame. TW_OK: cb will run. Otherwise (only TW_ERR_NOMEM)
	 * nothing was queued and cb will not run. The iov array is copied; the
	 * memory it points to must stay valid until cb. */
	tw_status_t (*write)(tw_conn *c, const tw_iov *iov, size_t num_iov, unsigned flags,
	                     tw_conn_write_cb cb, void *arg);
	/* Queues the read of the next frame into buf (exactly len bytes). */
	tw_status_t (*read_into)(tw_conn *c, void *buf, uint64_t len, tw_conn_read_cb cb, void *arg);
	/* Queues the read of the next frame (at most max_len bytes) into a new
	 * allocation. */
	tw_status_t (*read_alloc)(tw_conn *c, uint64_t max_len, tw_conn_read_cb cb, void *arg);
	/* Arms the end watch (see the rules above): end_cb runs exactly once,
	 * when the connection fails for any reason (noticed by the watch or by
	 * a queued operation; then after the callbacks of the operations that
	 * failure completes) or with TW_ERR_CLOSED when it is closed first. A
	 * failure noticed but not yet reported when the owner closes the
	 * connection is reported as TW_ERR_CLOSED too (and a pending hang-up
	 * not at all): after close() the owner hears nothing else of it.
	 * hangup_cb (may be NULL) runs at most once, always before end_cb, when
	 * the peer hangs up with bytes unread; the connection still works (reads
	 * drain what is left, then fail with TW_ERR_EOF). At most one watch per
	 * connection, for its whole life; arming it on a connection that
	 * already failed reports that failure (deferred). Works alongside reads
	 * and writes. TW_OK: end_cb will run; otherwise (only TW_ERR_NOMEM)
	 * nothing was armed. */
	tw_status_t (*watch_end)(tw_conn *c, tw_conn_end_cb end_cb, tw_conn_hangup_cb hangup_cb,
	                         void *arg);
	/* Closes (see the rules above). Idempotent only in the sense that the
	 * owner calls it exactly once. */
	void (*close)(tw_conn *c);
	/* The peer's address for details ("127.0.0.1:5555"); never NULL. */
	const char *(*peer)(tw_conn *c);
	/* Whether bytes the peer sent wait unread on the connection (in the
	 * transport's buffers or the kernel's), so that only the reader's pace
	 * holds back what may follow them. Loop thread; never fails the
	 * connection (an error reads as false). */
	bool (*has_unread)(tw_conn *c);
	/* Whether the connection was ever established (a stream: its connect
	 * completed; an accepted one always). A client may try again a connect
	 * that failed before, never one the server may have seen bytes of. */
	bool (*was_connected)(tw_conn *c);
	/* Optional (NULL: the transport's describe says all): what
	 * tw_pipe_info's transport_detail says of a pipe whose descriptor
	 * connection this is, where a connection differs from its transport
	 * (ibv: the GID this connection uses, how its set-up went). Never NULL
	 * once established. Loop thread. */
	const char *(*describe)(tw_conn *c);
	/* Optional (NULL: none): this end's IP address and port, for a
	 * connection over IP (tcp's getsockname): a listener bound to a
	 * wildcard can then tell a peer the address it already reached this
	 * host at. False if unknown. Loop thread. */
	bool (*local_address)(tw_conn *c, struct sockaddr_storage *out);
	/* Optional (NULL: cannot tell): whether the other end of this
	 * connection is a descriptor of process pid, as the kernel knows the
	 * socket under it (tw__sys_socket_peer_of: tcp's socket, shm's UNIX
	 * socket, ibv's bootstrap socket). 1 yes, 0 no, -1 cannot tell; `why`
	 * says what was found. A channel that reads memory a peer names checks
	 * this first (spec 4.5.b). Loop thread; reads /proc. */
	int (*peer_of)(tw_conn *c, pid_t pid, char *why, size_t why_len);
	/* Optional (NULL: cannot tell): whether the peer has ended its side of
	 * the connection (closed it, or died) as far as this host knows at
	 * this moment, however many of its bytes are still unread; true too
	 * once the connection failed or was closed here. A channel that
	 * copies out of the peer's memory asks this after a copy: the peer
	 * hands its buffers back to its user only after its end is out (see
	 * close), so a copy that ended before the end was seen read bytes the
	 * peer still held (spec 4.4.e). Loop thread; one poll(), no wait. */
	bool (*peer_left)(tw_conn *c);
} tw_conn_ops;

struct tw_conn {
	const tw_conn_ops *ops;
	tw_transport *transport;
};

typedef struct tw_tlistener_ops {
	/* The bound address in this transport's syntax, as sent in a
	 * BrochureAnswer ("127.0.0.1:43127"). */
	const char *(*address)(tw_tlistener *l);
	/* Stops accepting. No callback runs after this returns; the transport
	 * frees the listener itself. */
	void (*close)(tw_tlistener *l);
} tw_tlistener_ops;

struct tw_tlistener {
	const tw_tlistener_ops *ops;
	tw_transport *transport;
};

typedef struct tw_transport_ops {
	const char *kind;       /* implementation name, e.g. "uv" */
	/* Extra URL schemes that mean this kind besides its registered name
	 * ("tcp" for uv); NULL-terminated, may be NULL. */
	const char *const *schemes;
	/* Creates an instance for one context. TW_ERR_UNSUPPORTED with the
	 * reason in detail if the kind is not viable here; TW_ERR_INVAL for bad
	 * options. Runs on any thread (no loop handles may be created yet). */
	tw_status_t (*create)(tw_loop *loop, const char *options, tw_transport **out, char *detail,
	                      size_t detail_len);
	/* Any thread, never fails: this instance's limits. NULL: none (every
	 * field UINT64_MAX). */
	void (*limits)(tw_transport *t, tw_transport_limits *out);
	/* The domain descriptor advertised in Brochures (spec 6.1), e.g. "uv:*". */
	const char *(*domain_descriptor)(tw_transport *t);
	/* NULL means plain string equality with our own descriptor. */
	bool (*can_communicate)(tw_transport *t, const char *remote, size_t remote_len);
	/* Any thread, never blocks: TW_OK if `address` (transport syntax) is one
	 * this transport can connect to (for_listen false) or listen on, else
	 * TW_ERR_INVAL with a detail naming what is wrong. May be NULL. */
	tw_status_t (*check_address)(const char *address, bool for_listen, char *detail,
	                             size_t detail_len);
	/* Loop thread: the address a client should use for its other
	 * connections, given the one the server advertised and the client's
	 * bootstrap connection `boot` to it (e.g. a link-local address is only
	 * meaningful with the client's own scope). Writes it into out; may be
	 * NULL (the advertised address as it is). */
	void (*answer_address)(tw_conn *boot, const char *advertised, char *out, size_t out_len);
	/* Loop thread. Binds `address` (transport syntax, e.g. "127.0.0.1:0");
	 * accepted connections get opts->liveness_ms. */
	tw_status_t (*listen)(tw_transport *t, const char *address, const tw_conn_opts *opts,
	                      tw_tlistener_accept_cb cb, void *arg, tw_tlistener **out,
	                      char *detail, size_t detail_len);
	/* Loop thread. Starts connecting and returns the connection at once:
	 * operations may be queued right away; a connect failure fails them. A
	 * synchronous failure (bad address) returns an error and no conn. */
	tw_status_t (*connect)(tw_transport *t, const char *address, const tw_conn_opts *opts,
	                       tw_conn **out, char *detail, size_t detail_len);
	/* Loop thread, when the context shuts down after every connection and
	 * listener of this transport is closed: close loop handles (may be NULL). */
	void (*shutdown)(tw_transport *t);
	/* Any thread, after the loop stopped: frees the instance. */
	void (*destroy)(tw_transport *t);
	/* Any thread: what this instance uses, for tw_pipe_info (ibv: the
	 * device, port and GID). May be NULL. */
	const char *(*describe)(tw_transport *t);
} tw_transport_ops;

struct tw_transport {
	const tw_transport_ops *ops;
	tw_loop *loop;
};

/* The limits of `t` (its ops->limits, or none). */
static inline void tw__transport_limits(tw_transport *t, tw_transport_limits *out)
{
	out->max_frame = UINT64_MAX;
	out->max_packet = UINT64_MAX;
	out->writes_land = false;
	if (t->ops->limits)
		t->ops->limits(t, out);
}

/* The kinds built into this library, NULL-terminated (registry.c). */
extern const tw_transport_ops *const tw__transport_kinds[];
const tw_transport_ops *tw__transport_find_kind(const char *kind);

#endif /* TW_TRANSPORT_TRANSPORT_H */
