/*
 * acceptor.h - the listening half of a stream transport: a bound,
 * listening socket (TCP, or a UNIX socket for shm's bootstrap) watched on
 * the loop, that hands each accepted descriptor to its owner. Shared by the
 * transports whose connections start as stream sockets (tcp now; shm and
 * ibv set-up next), so the hard parts are written once:
 *
 *   - each wake-up accepts until the queue is empty, from a backlog of 4096
 *     (the kernel caps it at net.core.somaxconn), so a connection storm is
 *     drained as fast as it arrives;
 *   - out of descriptors (EMFILE, ENFILE), it stops accepting for
 *     TW_ACCEPT_BACKOFF_MS (a shortage that passes costs the waiting client
 *     nothing); if the next accept meets it again, it gives up a spare
 *     descriptor it keeps for this, accepts the waiting connection and
 *     resets it at once, so clients learn in a moment instead of waiting in
 *     the queue; the owner hears of every such connection;
 *   - a failed poll backs off the same way instead of spinning.
 *
 * What an accepted descriptor becomes (socket options, framing, a
 * connection object) is the owner's business: this file must not know
 * about frames, connections or peers beyond formatting their address.
 * Loop thread only.
 */
#ifndef TW_TRANSPORT_STREAM_ACCEPTOR_H
#define TW_TRANSPORT_STREAM_ACCEPTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "platform/loop.h"
#include "tensorwire/tensorwire.h"

#define TW_ACCEPT_BACKLOG 4096
#define TW_ACCEPT_BACKOFF_MS 100

typedef struct tw_acceptor tw_acceptor;

/* Formats a peer's address for details ("127.0.0.1:5555"). */
typedef void (*tw_acceptor_format_fn)(const struct sockaddr *addr, char *out, size_t out_len);

/* An accepted connection: fd >= 0 (the owner now owns it) and its peer's
 * address, status TW_OK. Or a failure that did not stop the acceptor
 * (fd -1): status and a detail naming the acceptor, the call and errno. */
typedef void (*tw_acceptor_cb)(tw_acceptor *a, tw_status_t status, const char *detail, int fd,
                               const struct sockaddr *peer, void *arg);

/* Creates a stream socket for `addr`, binds it (SO_REUSEADDR first if
 * reuse_addr), listens and starts accepting. `who` and `label` name the
 * transport and the address in details ("tcp transport", "0.0.0.0:0").
 * The bound address goes to *bound_out. On failure nothing is left open. */
TW_NODISCARD tw_status_t tw__acceptor_open(tw_loop *loop, const char *who, const char *label,
                                           const struct sockaddr *addr, socklen_t addr_len,
                                           bool reuse_addr, tw_acceptor_format_fn format,
                                           tw_acceptor_cb cb, void *arg, tw_acceptor **out,
                                           struct sockaddr_storage *bound_out, char *detail,
                                           size_t detail_len);
/* Sets the address used in details from now on (e.g. the advertised one). */
void tw__acceptor_set_label(tw_acceptor *a, const char *label);
/* Stops accepting; no callback runs after this returns. Frees itself once
 * its loop handles are closed. */
void tw__acceptor_close(tw_acceptor *a);

#endif /* TW_TRANSPORT_STREAM_ACCEPTOR_H */
