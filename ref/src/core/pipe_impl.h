/*
 * pipe_impl.h - what the files of the pipe (pipe.c, pipe_end.c,
 * pipe_handshake.c, pipe_write.c, pipe_read.c) share with each other and
 * with nothing else. Loop thread only, like the rest of the pipe's state
 * machine; core.h holds the pipe's struct and what other core files call.
 */
#ifndef TW_CORE_PIPE_IMPL_H
#define TW_CORE_PIPE_IMPL_H

#include "core/core.h"

/* pipe.c: references, lifetime, failure, operation deadlines */
void tw__pipe_ref(tw_pipe *p);
void tw__pipe_release(tw_pipe *p);
void tw__conn_close(tw_conn **c);
void tw__pipe_fail(tw_pipe *p, tw_status_t status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void tw__pipe_op_deadline(tw_pipe *p, uint64_t timeout_ms, uint64_t *deadline);
uint64_t tw__pipe_op_timeout(tw_pipe *p);
/* Whether tensor t of a message travels on D (spec 8.4), both ends. */
bool tw__pipe_eager(const tw_pipe *p, const tw_tensor *t);
/* Whether the DescriptorReply names tensor t's device (spec 3.11, 8.4). */
bool tw__pipe_needs_reply(const tw_pipe *p, const tw_tensor *t);

/* pipe_end.c: timers, end watches, the verdict, goodbye */
void tw__ptimer_start(tw_pipe *p, tw_pipe_timer *pt, uv_timer_cb cb, uint64_t ms);
void tw__ptimer_stop(tw_pipe_timer *pt);
void tw__ptimer_close(tw_pipe_timer *pt);
void tw__pipe_timer_close(tw_pipe *p);
void tw__pipe_timer_start(tw_pipe *p, uint64_t ms);
void tw__pipe_send_goodbye(tw_pipe *p);
void tw__pipe_try_end(tw_pipe *p);
/* A write waits for confirmations from the peer's side (pipe_end.c). */
bool tw__pipe_writes_landing(tw_pipe *p);
/* Appended to a detail when the server dropped a client's connection unheard. */
extern const char tw__pipe_dropped_hint[];
bool tw__status_is_end(tw_status_t st);
/* The same for one operation on c, a write (`write`) or a read. */
void tw__pipe_conn_op_failed(tw_pipe *p, tw_conn *c, bool write, tw_status_t status,
                             const char *what, const char *detail);
void tw__pipe_conn_failed(tw_pipe *p, tw_conn *c, tw_status_t status, const char *what,
                          const char *detail);
TW_NODISCARD tw_status_t tw__pipe_watch(tw_pipe *p, tw_conn *c);
/* On establishment: an end or hang-up held before it (core.h, early_conn)
 * is replayed as an established pipe's. */
void tw__pipe_early_end_established(tw_pipe *p);

/* pipe_handshake.c: handshake and establishment */
void tw__pipe_deliver_established(void *arg);
const tw_pipe_pair *tw__pipe_find_pair(const tw_pipe *p, const tw_device *local,
                                       const tw_device *remote);
void tw__pipe_client_lost(tw_pipe *p, tw_status_t status, const char *what,
                          const char *detail);
void tw__pipe_client_timer(tw_pipe *p);

/* pipe_write.c: writing, and R's reader */
void tw__mutant_ignore_cb(tw_pipe *p, tw_status_t status, const char *detail, void *arg);
void tw__pipe_out_check_all(tw_pipe *p);
void tw__pipe_read_r(tw_pipe *p);
void tw__pipe_pump_writes(tw_pipe *p);

/* pipe_read.c: reading */
void tw__pipe_in_check_all(tw_pipe *p);
void tw__pipe_pump_reads(tw_pipe *p);

#endif
