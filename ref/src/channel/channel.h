/*
 * channel.h - what a channel is to the core (spec/wire.md section 4).
 *
 * A channel moves tensor bytes between two pipe endpoints. The core only
 * uses it through two objects:
 *
 *   tw_channel_ctx  one per registered channel per context: viability, the
 *                   devices it serves with their device descriptors, how many
 *                   connections one channel instance needs, and opening an
 *                   instance over those connections.
 *   tw_channel      one per pipe that selected the channel: send/recv.
 *
 * Rules every implementation follows (the core relies on them):
 *   - Loop thread only (except create/destroy, see below).
 *   - Callbacks never run inside the call that queued them; every send/recv
 *     gets exactly one callback.
 *   - send(k) on one side is matched with recv(k) on the other: operations
 *     are FIFO per channel and carry no tags; lengths are known to both sides
 *     from the Descriptor and are never sent by the channel.
 *   - Zero-length send/recv complete locally with no wire traffic (spec 4.1).
 *   - The channel owns the connections handed to open() and closes them on
 *     close(). An error fails the operation that saw it (later ones fail
 *     too); the core then closes the whole pipe. After close() the channel
 *     never touches a caller buffer again and pending operations fail with
 *     TW_ERR_CLOSED.
 *   - A channel that needs more than the pipe's connections (mpt's lanes)
 *     creates its own transport instances and listeners through
 *     tw_channel_env: the core knows nothing of them.
 *   - Detail strings name the channel ("basic channel: ...") and pass the
 *     transport's detail along.
 */
#ifndef TW_CHANNEL_CHANNEL_H
#define TW_CHANNEL_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>

#include "platform/loop.h"
#include "tensorwire/tensorwire.h"
#include "transport/transport.h"
#include "wire/nop.h"

typedef struct tw_channel_ctx tw_channel_ctx;
typedef struct tw_channel tw_channel;

/* Which end of the pipe an instance is on: the client opened the
 * connections ("connect"), the server received them ("listen"). */
typedef enum tw_endpoint { TW_ENDPOINT_CONNECT = 0, TW_ENDPOINT_LISTEN = 1 } tw_endpoint_t;

/* A buffer on some device. */
typedef struct tw_buffer {
	void *ptr;
	uint64_t len;
	tw_device device;
	void *cuda_stream; /* cuda:N: see tw_tensor.cuda_stream */
} tw_buffer;

typedef void (*tw_channel_cb)(tw_channel *ch, tw_status_t status, const char *detail, void *arg);

/* What a channel context may use from its host context. */
typedef struct tw_channel_env tw_channel_env;
struct tw_channel_env {
	tw_loop *loop;
	/* Looks up a built-in transport kind (for lanes); NULL if unknown. */
	const tw_transport_ops *(*find_transport_kind)(const char *kind);
	/* Loop thread: the context's bounds and interface rules for the
	 * connections and listeners a channel opens itself (lanes), as the
	 * pipe's own get them (tensorwire.h: connect timeout, liveness,
	 * tw_context_set_socket_ifname). May be NULL: no bounds. */
	void (*conn_opts)(const tw_channel_env *env, tw_conn_opts *out);
};

/* A device this channel serves and its device descriptor (spec 6.1). */
typedef struct tw_channel_device {
	tw_device device;
	char *descriptor;
	size_t descriptor_len;
} tw_channel_device;

#define TW_CHANNEL_PROOF 1u /* open(): both ends agreed on spec 8.3 */

/* Every device descriptor the peer offered for one channel, in its order. */
typedef struct tw_channel_offer {
	size_t num;
	const char *const *descriptor;
	const size_t *len;
} tw_channel_offer;

typedef struct tw_channel_ops {
	const char *kind; /* "basic" */
	/* Any thread. TW_ERR_UNSUPPORTED with the reason if not viable here,
	 * TW_ERR_INVAL for bad options. Fills the base's device list. */
	tw_status_t (*create)(const tw_channel_env *env, const char *options, tw_channel_ctx **out,
	                      char *detail, size_t detail_len);
	/* NULL means string equality of the two device descriptors. `remote`
	 * is one of `offer`'s, the rest let a channel decide what the peer
	 * would decide, since both ends select (spec 3.7). */
	bool (*can_communicate)(tw_channel_ctx *c, const tw_channel_device *local,
	                        const char *remote, size_t remote_len,
	                        const tw_channel_offer *offer);
	/* Connections of the pipe's transport one instance needs (basic: 1). */
	size_t (*num_connections)(tw_channel_ctx *c);
	/* Speaks the proof of spec 8.3 (a same-host mechanism shows it works
	 * between the two processes before the first tensor, and falls back
	 * to the pipe's transport if not). The core asks for the extension when
	 * a registered channel does, and opens instances with TW_CHANNEL_PROOF
	 * on the pipes that agreed on it. */
	bool speaks_proof;
	/* Loop thread. Takes ownership of conns[0..n) (also on failure). flags:
	 * TW_CHANNEL_PROOF or 0. */
	tw_status_t (*open)(tw_channel_ctx *c, tw_endpoint_t endpoint, tw_conn *const *conns,
	                    size_t num_conns, unsigned flags, tw_channel **out, char *detail,
	                    size_t detail_len);
	/* Loop thread, context shutting down after every instance closed. */
	void (*shutdown)(tw_channel_ctx *c);
	/* Any thread, after the loop stopped. */
	void (*destroy)(tw_channel_ctx *c);
} tw_channel_ops;

struct tw_channel_ctx {
	const tw_channel_ops *ops;
	const tw_channel_env *env;
	size_t num_devices;
	tw_channel_device *devices;
};

typedef struct tw_channel_instance_ops {
	/* Queue a send/recv of buf->len bytes. TW_OK: cb will run; otherwise
	 * (TW_ERR_NOMEM) nothing was queued. */
	tw_status_t (*send)(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg);
	tw_status_t (*recv)(tw_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg);
	/* See the rules above. The owner calls it once and forgets the pointer. */
	void (*close)(tw_channel *ch);
	/* A send calls back only once the peer confirmed it has the bytes (cma:
	 * its completion). The pipe then counts a write whose last operation
	 * completes after the peer said goodbye as delivered, which it is. */
	bool acked_by_peer;
	/* Loop thread, optional: a send calls back only once its bytes are in
	 * the peer's memory (basic over ibv). With a transport whose writes land
	 * the same way, a write whose last operation completes after the peer's
	 * goodbye had been handed over in full before it, as a uv write that
	 * completed earlier had: it counts as delivered too. NULL: no. */
	bool (*sends_land)(tw_channel *ch);
	/* Loop thread, never fails: the longest tensor one send can move (basic:
	 * the frame limit of its connection's transport). NULL: no limit. The
	 * pipe fails a message with a longer tensor before sending any of it. */
	uint64_t (*max_tensor)(tw_channel *ch);
	/* Loop thread, optional: how the instance moves tensors now, for
	 * tw_pipe_get_info ("copies proven both ways"); "" when nothing to say. */
	void (*describe)(tw_channel *ch, char *buf, size_t len);
} tw_channel_instance_ops;

struct tw_channel {
	const tw_channel_instance_ops *ops;
	tw_channel_ctx *ctx;
};

/* A context serving cpu:0 alone, with `descriptor` (cpu_ctx.c): what basic,
 * cma and the other CPU channels create; free it with
 * tw__channel_cpu_ctx_free (their destroy). */
TW_NODISCARD tw_status_t tw__channel_cpu_ctx_new(const tw_channel_ops *ops,
                                                 const tw_channel_env *env,
                                                 const char *descriptor, tw_channel_ctx **out,
                                                 char *detail, size_t detail_len);
void tw__channel_cpu_ctx_free(tw_channel_ctx *c);

/* Writes the nop object in w as one frame on c and takes w's buffer over
 * (w is empty afterwards, also on failure): the transport reads the frame
 * until cb, which may be long after this returns (a tcp connection still
 * connecting, or a socket buffer full), so the bytes must outlive the call.
 * TW_OK: cb(c, status, detail, arg) will run once; otherwise it will not
 * (TW_ERR_NOMEM, or the writer's own failure). */
TW_NODISCARD tw_status_t tw__channel_write_obj(tw_conn *c, tw_nop_writer *w, tw_conn_write_cb cb,
                                               void *arg);

/* cma, xth and cuda_xth (spec 4.4.d, 4.5.b): a peer names memory by
 * address in a process (cma: the pid of its Descriptor; xth: this one), so
 * before the first copy from that process the channel makes sure the other
 * end of its connection c is that very process (transport.h, peer_of).
 * TW_OK if it is; otherwise TW_ERR_PROTO with a detail naming the peer and
 * what was found; the caller adds the channel's name. A peer that cannot
 * be checked is refused too. Loop thread; reads /proc, so a channel asks
 * once per pid and keeps the answer. */
TW_NODISCARD tw_status_t tw__channel_peer_is(tw_conn *c, pid_t pid, char *detail,
                                             size_t detail_len);

/* cma, xth, cuda_xth and cuda_ipc (spec 4.4.e): the receiver copies out of
 * memory the writer holds only while its write is pending, and the writer
 * hands it back (to its user, or to its pool of slots) only after its end
 * of the channel's connection c is out (transport.h, close). So a copy that
 * is over may deliver its bytes only if that end is not seen now: true if
 * it is, with a detail naming the peer (the caller adds the channel's
 * name), and the receive must then fail. Loop thread; one poll(). */
bool tw__channel_writer_left(tw_conn *c, char *detail, size_t detail_len);

/* Is the peer's end of c seen now (the transport's peer_left; false where
 * c is gone or its transport cannot tell)? Loop thread; one poll(). */
bool tw__channel_peer_left(tw_conn *c);

/* The kinds built into this library (registry.c). */
const tw_channel_ops *tw__channel_find_kind(const char *kind);

#endif /* TW_CHANNEL_CHANNEL_H */
