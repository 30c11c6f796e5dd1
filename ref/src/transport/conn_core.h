/*
 * conn_core.h - the half of a connection that is the same in every
 * transport, written once: the queues of operations, failing as a whole,
 * the end watch and its two reports, and the reference count that keeps a
 * connection alive until its last callback ran (the rules of transport.h).
 *
 * A transport embeds a tw_conn_core first in its connection and a
 * tw_conn_op first in its operations, and keeps only what moves bytes:
 * sockets, rings, queue pairs, and when to look at them. It tells the core
 * when an operation is done (tw__conn_op_done), when the connection failed
 * (tw__conn_fail) and when the peer hung up with bytes unread
 * (tw__conn_hangup); the core defers every callback and fires each once.
 *
 * Phases: SETUP (connecting, exchanging set-up messages) and OPEN are the
 * transport's to tell apart; FAILED and CLOSED are the core's: after
 * either, queued and later operations complete with the connection's
 * error.
 *
 * Loop thread only.
 */
#ifndef TW_TRANSPORT_CONN_CORE_H
#define TW_TRANSPORT_CONN_CORE_H

#include <stdbool.h>
#include <stdint.h>

#include "platform/error.h"
#include "platform/loop.h"
#include "transport/transport.h"

enum tw_conn_phase { TW_CONN_SETUP, TW_CONN_OPEN, TW_CONN_FAILED, TW_CONN_CLOSED };

typedef struct tw_conn_core tw_conn_core;

typedef struct tw_conn_op {
	struct tw_conn_op *next;
	tw_deferred dfr;
	tw_conn_core *conn;
	bool is_write;
	tw_status_t status;
	tw_conn_write_cb wcb;
	tw_conn_read_cb rcb;
	void *arg;
	/* a read's result, set by the transport before tw__conn_op_done(OK) */
	void *buf;
	uint64_t len;
} tw_conn_op;

typedef struct tw_conn_core_ops {
	/* Frees an operation after its callback ran; `ok` false: it failed,
	 * so a buffer a read allocated was not handed over and is the
	 * transport's to free. */
	void (*free_op)(tw_conn_op *op, bool ok);
	/* Frees the connection once nothing refers to it any more. */
	void (*free_conn)(tw_conn_core *c);
	/* After the connection failed (queues emptied, watch fired): stop
	 * watching what the transport watches. May be NULL. */
	void (*failed)(tw_conn_core *c);
	/* After tw__conn_fail_writes emptied the write queue: forget any
	 * pointer into it. May be NULL. */
	void (*writes_failed)(tw_conn_core *c);
} tw_conn_core_ops;

struct tw_conn_core {
	tw_conn base;
	const tw_conn_core_ops *cops;
	const char *who; /* "tcp transport" */
	enum tw_conn_phase phase;
	tw_status_t err;
	char err_detail[TW_DETAIL_MAX];
	/* tw__conn_fail_writes: the peer is gone, reads go on */
	tw_status_t wr_err;
	char wr_detail[TW_DETAIL_MAX];
	tw_conn_op *wq_head, *wq_tail;
	tw_conn_op *rq_head, *rq_tail;
	unsigned refs; /* the transport's (handles) + every op and report not yet delivered */
	/* the end watch */
	bool watch_armed;
	bool hup_reported;
	tw_conn_end_cb watch_cb;
	tw_conn_hangup_cb hup_cb;
	void *watch_arg;
	tw_status_t watch_status;
	tw_deferred watch_dfr;
	tw_deferred hup_dfr;
	char peer[160];
};

/* Makes the connection's poll handle watch `want` (uv_poll events, 0:
 * nothing), *current being what it watches now; a uv_poll_start that
 * fails fails the connection naming it. For transports whose connection
 * is a descriptor on the loop (tcp, shm's socket). */
void tw__conn_poll(tw_conn_core *c, uv_poll_t *poll, int *current, int want, uv_poll_cb cb);

/* Sets up the core part of a new connection with `refs` references held
 * by the transport (one per loop handle it will close). */
void tw__conn_core_init(tw_conn_core *c, const tw_conn_ops *ops, const tw_conn_core_ops *cops,
                        tw_transport *t, const char *who, const char *peer,
                        enum tw_conn_phase phase, unsigned refs);
/* Drops one of the transport's references (a handle closed). */
void tw__conn_core_unref(tw_conn_core *c);

static inline bool tw__conn_done(const tw_conn_core *c)
{
	return c->phase == TW_CONN_FAILED || c->phase == TW_CONN_CLOSED;
}

/* tw_conn_ops.peer_left of a connection over socket fd (-1: none left):
 * done here, or the peer's end seen on the socket. */
bool tw__conn_peer_left(const tw_conn_core *c, int fd);

/* Queues op (its callback fields set) on the write or read queue; on a
 * failed or closed connection it completes at once with the error instead
 * (deferred). Returns true if it was queued (the caller drives). */
bool tw__conn_queue(tw_conn_core *c, tw_conn_op *op, bool is_write);
/* Completes the operation at the head of a queue with TW_OK (deferred). */
void tw__conn_op_done(tw_conn_core *c, bool is_write);

/* Fails the connection: every pending and later operation gets `status`,
 * the watch reports it. Nothing if it already failed or was closed. */
__attribute__((format(printf, 3, 4))) void tw__conn_fail(tw_conn_core *c, tw_status_t status,
                                                         const char *fmt, ...);
/* The peer is gone while what it sent is still to be read: every queued
 * write fails with `status` now, and every later one at once; reads go on,
 * and the transport fails the connection once they reach the end
 * (transport.h). Nothing if the connection is done or writes failed
 * already. */
__attribute__((format(printf, 3, 4))) void tw__conn_fail_writes(tw_conn_core *c,
                                                                tw_status_t status,
                                                                const char *fmt, ...);
/* The common half of close(): pending operations and the watch complete
 * with TW_ERR_CLOSED; the transport then closes its handles. Returns false
 * if the connection was closed already. */
bool tw__conn_close_ops(tw_conn_core *c);

/* Arms the end watch (tw_conn_ops' watch_end). On a connection that has
 * failed already it reports that (deferred) and returns false; true: the
 * transport should start watching. */
bool tw__conn_watch_arm(tw_conn_core *c, tw_conn_end_cb cb, tw_conn_hangup_cb hup_cb, void *arg);
/* Whether a hang-up may still be reported (armed, with a hang-up callback,
 * not reported yet, nothing read queued). */
bool tw__conn_hangup_wanted(const tw_conn_core *c);
/* Reports the hang-up (deferred), if tw__conn_hangup_wanted. */
void tw__conn_hangup(tw_conn_core *c);

#endif /* TW_TRANSPORT_CONN_CORE_H */
