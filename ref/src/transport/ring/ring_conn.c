/*
 * ring_conn.c - see ring_conn.h.
 */
#include "transport/ring/ring_conn.h"

#include <string.h>

#include "platform/error.h"
#include "platform/platform.h"

static tw_ring_op *tw__ring_op_new(void)
{
	tw_ring_op *op = tw__calloc(1, sizeof(*op));
	if (op)
		op->iov = op->iov_inline;
	return op;
}

tw_ring_op *tw__ring_op_write(const tw_iov *iov, size_t num_iov, unsigned flags,
                              uint64_t capacity, const char *who, tw_status_t *init_st,
                              char *detail, size_t detail_len)
{
	tw_ring_op *op = tw__ring_op_new();
	if (!op)
		return NULL;
	if (num_iov > sizeof(op->iov_inline) / sizeof(op->iov_inline[0])) {
		op->iov = tw__calloc(num_iov, sizeof(tw_iov));
		if (!op->iov) {
			tw__free(op);
			return NULL;
		}
	}
	memcpy(op->iov, iov, num_iov * sizeof(*iov));
	op->hello = (flags & TW_WRITE_HELLO) != 0;
	*init_st = tw__ring_writer_init(&op->w, op->iov, num_iov, flags, capacity, who, detail,
	                                detail_len);
	return op;
}

tw_ring_op *tw__ring_op_read_into(void *buf, uint64_t len)
{
	tw_ring_op *op = tw__ring_op_new();
	if (op)
		tw__ring_reader_into(&op->rd, buf, len);
	return op;
}

tw_ring_op *tw__ring_op_read_alloc(uint64_t max_len)
{
	tw_ring_op *op = tw__ring_op_new();
	if (op)
		tw__ring_reader_alloc(&op->rd, max_len);
	return op;
}

void tw__ring_op_free(tw_conn_op *base, bool ok)
{
	tw_ring_op *op = (tw_ring_op *)base;
	(void)ok; /* a read's allocation is the reader's until taken */
	tw__ring_reader_drop(&op->rd);
	if (op->iov != op->iov_inline)
		tw__free(op->iov);
	tw__free(op);
}

uint64_t tw__ring_conn_unread(const tw_conn_core *c, const tw_ring *inbox)
{
	uint64_t used = 0;
	char d[TW_DETAIL_MAX];
	if (c->phase != TW_CONN_OPEN || tw__ring_used(inbox, &used, d, sizeof(d)) != TW_OK)
		return 0;
	return used;
}

bool tw__ring_conn_drive_reads(tw_conn_core *c, tw_ring *inbox)
{
	bool moved_any = false;
	while (c->phase == TW_CONN_OPEN && c->rq_head) {
		tw_ring_op *op = (tw_ring_op *)c->rq_head;
		uint64_t moved = 0;
		char d[TW_DETAIL_MAX];
		tw_status_t st = tw__ring_read_some(inbox, &op->rd, 0, &moved, c->who, d, sizeof(d));
		if (st != TW_OK) {
			tw__conn_fail(c, st, "%s (from peer %s)", d, c->peer);
			break;
		}
		moved_any |= moved > 0;
		if (!tw__ring_reader_done(&op->rd))
			break;
		op->op.buf = op->rd.alloc ? tw__ring_reader_take(&op->rd) : op->rd.buf;
		op->op.len = op->rd.len;
		tw__conn_op_done(c, false);
	}
	return moved_any;
}

void tw__ring_conn_drive_end(tw_conn_core *c, const tw_ring *inbox, tw_status_t gone_status,
                             const char *gone_detail, const char *waiting)
{
	if (c->phase != TW_CONN_OPEN)
		return;
	uint64_t used = tw__ring_conn_unread(c, inbox);
	if (used == 0) {
		tw__conn_fail(c, gone_status, "%s", gone_detail);
		return;
	}
	if (c->rq_head) {
		/* The reads were driven just before: one still queued waits for
		 * bytes that will never come (a frame cut short, a flag the peer
		 * left taken). */
		tw__conn_fail(c, gone_status,
		              "%s, with %llu bytes in the inbox that are not the whole frame a read "
		              "waits for",
		              gone_detail, (unsigned long long)used);
		return;
	}
	/* What it wrote stays readable (spec 2.3.1.d); writes cannot land any
	 * more. */
	tw__conn_fail_writes(c, gone_status, "%s (while %s)", gone_detail, waiting);
	tw__conn_hangup(c);
}
