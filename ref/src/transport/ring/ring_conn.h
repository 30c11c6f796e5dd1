/*
 * ring_conn.h - what the ring transports (shm, ibv) share about their
 * connections beyond the ring itself: an operation that carries a ring
 * writer or reader, making and freeing one, reading queued frames out of
 * the inbox, and the end once the peer is gone (transport.h: frames the
 * peer wrote before it left stay readable). How bytes reach the peer and
 * how the peer is woken stay each transport's own.
 *
 * Loop thread only, like the connections themselves.
 */
#ifndef TW_TRANSPORT_RING_RING_CONN_H
#define TW_TRANSPORT_RING_RING_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/conn_core.h"
#include "transport/ring/ring.h"

typedef struct tw_ring_op {
	tw_conn_op op; /* first */
	tw_ring_writer w;
	tw_ring_reader rd;
	tw_iov *iov;
	tw_iov iov_inline[4];
	/* ibv: a write whose bytes are all in the outbox, and the outbox
	 * position after its last byte (it completes once that landed) */
	bool produced;
	uint64_t end_pos;
	bool hello; /* TW_WRITE_HELLO (transport.h) */
} tw_ring_op;

/* A write of one frame made of iov (copied) for a ring of `capacity`
 * bytes. NULL when out of memory. A frame the ring cannot carry gives an
 * op anyway, with *init_st set (and a detail): the pipe checks the limits
 * before it writes, so the caller treats that as a bug and fails the
 * connection. */
tw_ring_op *tw__ring_op_write(const tw_iov *iov, size_t num_iov, unsigned flags,
                              uint64_t capacity, const char *who, tw_status_t *init_st,
                              char *detail, size_t detail_len);
/* A read of the next frame into buf (exactly len bytes), or into a new
 * allocation of at most max_len bytes; NULL when out of memory. */
tw_ring_op *tw__ring_op_read_into(void *buf, uint64_t len);
tw_ring_op *tw__ring_op_read_alloc(uint64_t max_len);
/* tw_conn_core_ops' free_op for tw_ring_op. */
void tw__ring_op_free(tw_conn_op *op, bool ok);

/* Bytes of the peer's waiting in the inbox of an open connection (a broken
 * ring reads as none). */
uint64_t tw__ring_conn_unread(const tw_conn_core *c, const tw_ring *inbox);

/* Serves the queued reads of an open connection from its inbox, completing
 * each whose frame is whole; fails the connection (naming the peer) on a
 * framing error. Returns whether any byte was consumed. */
bool tw__ring_conn_drive_reads(tw_conn_core *c, tw_ring *inbox);

/* The peer is gone (gone_status and gone_detail say how), after the reads
 * were driven: on an open connection, the end is reported once the inbox is
 * empty, or at once when a read is still queued (its frame will never be
 * whole). Otherwise what is left stays readable: writes fail, queued and
 * later ones (they wait on room or on the peer: `waiting` says which, for
 * the detail), and the hang-up is reported. */
void tw__ring_conn_drive_end(tw_conn_core *c, const tw_ring *inbox, tw_status_t gone_status,
                             const char *gone_detail, const char *waiting);

#endif /* TW_TRANSPORT_RING_RING_CONN_H */
