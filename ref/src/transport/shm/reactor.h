/*
 * reactor.h - the wake-ups of the shm transport (spec/wire.md 2.3.1): one
 * ring per transport instance (40-byte header, 4 MiB of data) that peers
 * write u32le tokens into, and the thread that reads them.
 *
 * Every connection owns two tokens (stock: "data is in your inbox" and
 * "your outbox has room"); a peer that wrote into our inbox, or consumed
 * from its own, writes the matching token into our reactor ring. This
 * file turns a token into a call of `wake(conn)` on the loop thread; what
 * the connection then does is shm.c's business. Both tokens of a
 * connection wake it the same way: the connection re-checks both rings.
 *
 * Waiting. Stock's reactor thread spins on its ring (yielding when idle).
 * Ours is polled by the loop thread for a short while after activity
 * (busy polling, below); after that a reading thread sleeps in futex(2)
 * on the low word of the ring's head marker: our own producers
 * (tw__shm_reactor_notify) wake it at once after each token; a producer
 * that does not (a stock peer) is caught by the sleep's bound, 50 us right
 * after activity, doubling to `idle_us` (1 ms by default). So a message
 * within the busy bound of the last costs no wake-up, ours to ours wakes at
 * once after that without burning a core, and stock to ours costs at most
 * idle_us of latency after a quiet spell.
 *
 * A peer can write anything into our ring: a token that is not a live
 * connection's is ignored; markers a peer made inconsistent stop token
 * reading for good, and from then on every connection is woken on each
 * bound: a slower transport that still works, since every connection
 * re-checks its own rings (which the peer cannot break for others).
 */
#ifndef TW_TRANSPORT_SHM_REACTOR_H
#define TW_TRANSPORT_SHM_REACTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/loop.h"
#include "tensorwire/tensorwire.h"
#include "transport/ring/ring.h"

#define TW_SHM_MAX_CONNS 32768u /* per transport instance: two tokens each */

typedef struct tw_shm_reactor tw_shm_reactor;

/* Any thread: creates the ring (nothing runs yet). `wake` runs on the loop
 * thread for a connection one of whose tokens came in. */
TW_NODISCARD tw_status_t tw__shm_reactor_new(tw_loop *loop, uint64_t idle_us,
                                             void (*wake)(void *conn), tw_shm_reactor **out,
                                             char *detail, size_t detail_len);
/* Busy polling (option busy_poll_us of the shm transport,
 * TW_LOOP_BUSY_DEFAULT_US unless given): for `us` microseconds after the
 * last token or write, the loop thread itself reads the reactor ring on
 * every pass instead of sleeping, so a message crosses no thread hand-off;
 * it burns that thread's core while it does. 0 leaves it off: every
 * wake-up goes through the reading thread. Before the first connection. */
void tw__shm_reactor_set_busy_poll(tw_shm_reactor *r, uint64_t us);
/* Loop thread: there was activity (a write to a peer): keep polling. */
void tw__shm_reactor_kick(tw_shm_reactor *r);
/* Loop thread: registers a connection and gives it its two tokens (inbox,
 * outbox), starting the reading thread on first use. TW_ERR_NOMEM with a
 * detail once TW_SHM_MAX_CONNS connections are open. */
TW_NODISCARD tw_status_t tw__shm_reactor_add(tw_shm_reactor *r, void *conn, uint32_t tokens[2],
                                             char *detail, size_t detail_len);
/* Loop thread: the connection is gone; its tokens may be reused (a late
 * token then wakes the next owner once, which costs it nothing). */
void tw__shm_reactor_remove(tw_shm_reactor *r, const uint32_t tokens[2]);
/* The ring's two descriptors, to send to a peer (still ours). */
void tw__shm_reactor_fds(const tw_shm_reactor *r, int fds[2]);
/* Loop thread, once no connection is left: stops the thread and closes
 * the loop handle. */
void tw__shm_reactor_stop(tw_shm_reactor *r);
/* Any thread, after the loop stopped. */
void tw__shm_reactor_free(tw_shm_reactor *r);

/* Writes `token` into a peer's reactor ring and wakes its reader. A busy
 * ring (another producer in its transaction) is retried briefly; *done_out
 * false means busy or full still, so the caller tries again later.
 * TW_ERR_PROTO if the peer's markers are inconsistent. */
TW_NODISCARD tw_status_t tw__shm_reactor_notify(tw_ring *peer_reactor, uint32_t token,
                                                bool *done_out, char *detail,
                                                size_t detail_len);

#endif /* TW_TRANSPORT_SHM_REACTOR_H */
