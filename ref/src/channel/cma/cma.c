/*
 * cma.c - the cma channel (spec/wire.md 4.4): two connections of the
 * pipe's transport; per non-empty tensor the sender writes a cma Descriptor
 * {pid, ptr} on connection 0 and waits for a zero-length completion frame
 * on connection 1; the receiver copies the bytes out of the sender's memory
 * with process_vm_readv and then writes the completion. Device cpu:0 with
 * the descriptor stock builds (platform/identity.c), so stock peers on the
 * same host select it.
 *
 * Viability (as stock decides it, and said when refused): ids that differ,
 * a process that is not dumpable, YAMA ptrace scope 2 or 3, or a
 * process_vm_readv on itself that fails. YAMA scope 1 is met as stock meets
 * it (letting any process trace this one, PR_SET_PTRACER_ANY) only when the
 * user asks with option ptracer_any, and then with a warning on stderr;
 * otherwise cma is not viable there (field failure T02).
 *
 * The proof (spec 8.3, when both ends agreed on it; cuda_ipc has its own form, 8.3.1): before its
 * first tensor each end writes a probe Descriptor on 0 pointing at 16 known
 * bytes, copies the peer's probe and answers on 1 with an empty frame
 * (proven) or the reason it could not. A direction whose copy was refused
 * carries its tensors inline: the bytes themselves on 0, in pieces of at
 * most CMA_INLINE_CHUNK, each still acknowledged by a completion on 1.
 * Operations wait while the proof is under way.
 *
 * Copies run on the loop thread, one received tensor at a time in receive
 * order (so completions go out in that order, 4.4.b), at most
 * CMA_COPY_BUDGET bytes per pass of the loop, so a 4 GiB tensor neither
 * blocks the other pipes nor needs more than the kernel's per-call limit
 * (0x7ffff000); a partial copy is resumed where it stopped. A copy that
 * fails fails that receive with the call and errno named and the channel
 * with it (4.4.c); the core then closes the pipe.
 *
 * xth (spec 4.5) is the same flow inside one process: its Descriptor is
 * {ptr} alone and the receiver copies with memcpy, in the same bounded
 * steps. Its device descriptor names the process (identity.c), so two
 * honest processes never select it; a peer that only claims to be this
 * process (anyone can build that string) is refused before its first
 * pointer is read: the other end of connection 0 must be one of this
 * process's own sockets (4.5.b). Details name whichever of the two it is.
 *
 * This file must not know about descriptors of messages or pipes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "channel/cma/cma.h"
#include "channel/channel.h"
#include "platform/error.h"
#include "platform/identity.h"
#include "platform/list.h"
#include "platform/mutant.h"
#include "platform/options.h"
#include "platform/platform.h"
#include "wire/packets.h"

#define CMA_COPY_BUDGET ((uint64_t)8 << 20)
#define CMA_DESC_MAX 64
/* The proof (spec 8.3): what a probe holds, the longest answer, and the
 * pieces a tensor travels in when copies were refused (each one frame). */
#define CMA_PROOF_MAGIC "twproof1"
#define CMA_PROOF_LEN 16
#define CMA_ANSWER_MAX 200
#define CMA_INLINE_CHUNK ((uint64_t)256 << 20)

/* How one direction of an instance moves tensors. */
typedef enum cma_mode {
	CMA_MODE_PROVING = 0, /* the proof is under way: operations wait */
	CMA_MODE_COPY,        /* descriptors and copies (4.4), as stock */
	CMA_MODE_INLINE,      /* the bytes themselves on connection 0 (8.3.c) */
} cma_mode_t;

typedef struct cma_channel {
	tw_channel base;
	bool xth;           /* the same-process flavour (spec 4.5) */
	/* the process found at the other end of connection 0, whose memory the
	 * peer's Descriptors may name (4.4.d; xth: this one, 4.5.b); 0 until then */
	uint32_t peer_pid;
	int peer_pidfd;     /* that process, -1 if none (xth, or no pidfd_open) */
	tw_conn *conn[2];   /* 0: descriptors, 1: completions */
	unsigned refs;      /* 1 while open + one per operation not yet called back */
	tw_list copies;     /* cma_op receives with a descriptor, in receive order */
	bool copying;       /* a copy step is deferred */
	tw_deferred copy_dfr;
	bool closed;
	tw_status_t failed; /* TW_OK, or the error that failed the channel */
	char failed_detail[TW_DETAIL_MAX];
	/* spec 8.3, with TW_CHANNEL_PROOF (cma only); otherwise both COPY */
	bool proof;
	cma_mode_t send_mode, recv_mode;
	tw_list held_sends, held_recvs; /* cma_op waiting for their direction's mode */
	uint8_t probe[CMA_PROOF_LEN];   /* what the peer copies to prove it can */
	uint8_t probe_desc[CMA_DESC_MAX];
	size_t probe_desc_len;
	char answer[CMA_ANSWER_MAX];    /* our answer to the peer's probe ("" = proven) */
	char send_note[TW_DETAIL_MAX], recv_note[TW_DETAIL_MAX]; /* why INLINE */
} cma_channel;

typedef struct cma_op {
	tw_deferred dfr;
	tw_list link;
	cma_channel *ch;
	tw_channel_cb cb;
	void *arg;
	int pending;        /* transport operations not yet called back */
	tw_status_t status; /* the first error */
	char detail[TW_DETAIL_MAX];
	/* send */
	uint8_t desc[CMA_DESC_MAX];
	size_t desc_len;
	/* receive (and a held or inline send: its buffer) */
	uint8_t *buf;
	uint64_t len, done;
	uint32_t pid;
	uint64_t ptr;
} cma_op;

static void cma_unref(cma_channel *ch)
{
	if (--ch->refs != 0)
		return;
	if (ch->peer_pidfd >= 0)
		tw__sys_close(ch->peer_pidfd);
	tw__free(ch);
}

static void cma_fail_op(cma_op *op, tw_status_t st, const char *detail)
{
	if (op->status == TW_OK) {
		op->status = st;
		snprintf(op->detail, sizeof(op->detail), "%s", detail);
	}
}

/* Calls back once every transport operation of op has. */
static void cma_settle(cma_op *op)
{
	if (--op->pending > 0)
		return;
	cma_channel *ch = op->ch;
	char buf[TW_DETAIL_MAX];
	const char *detail = "";
	if (op->status != TW_OK) {
		tw__detail(buf, sizeof(buf), "%s channel: %s", ch->xth ? "xth" : "cma", op->detail);
		detail = buf;
	}
	op->cb(&ch->base, op->status, detail, op->arg);
	tw__free(op);
	cma_unref(ch);
}

static void cma_on_settle(void *arg)
{
	cma_settle(arg);
}

/* ---- sending ---------------------------------------------------------------------- */

static void cma_on_desc_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	(void)c;
	if (st != TW_OK)
		cma_fail_op(arg, st, detail);
	cma_settle(arg);
}

static void cma_on_completion(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                              uint64_t len, void *arg)
{
	(void)c;
	(void)buf;
	(void)len;
	if (st != TW_OK)
		cma_fail_op(arg, st, detail);
	cma_settle(arg);
}

/* A new operation holding a reference on ch; NULL when out of memory. A
 * zero-length one is settled in a later pass with no traffic (spec 4.1):
 * *empty_out says so. */
static cma_op *cma_op_new(cma_channel *ch, const tw_buffer *buf, tw_channel_cb cb, void *arg,
                          bool *empty_out)
{
	cma_op *op = tw__calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	op->ch = ch;
	op->cb = cb;
	op->arg = arg;
	ch->refs++;
	op->pending = 1;
	*empty_out = buf->len == 0;
	if (*empty_out)
		tw__loop_defer(ch->base.ctx->env->loop, &op->dfr, cma_on_settle, op);
	return op;
}

/* Queues what moves op's bytes in the send mode: the Descriptor (or, when
 * the peer's copies were refused, the bytes in CMA_INLINE_CHUNK pieces) on
 * 0, and the read of the completion on 1: the peer answers in receive
 * order, so completions match sends in order. TW_ERR_NOMEM when nothing
 * could be queued (op->pending is then 0); a later failure fails op. */
static tw_status_t cma_send_start(cma_channel *ch, cma_op *op)
{
	op->pending = 0;
	if (ch->send_mode == CMA_MODE_INLINE) {
		for (uint64_t off = 0; off < op->len; off += CMA_INLINE_CHUNK) {
			uint64_t n = op->len - off < CMA_INLINE_CHUNK ? op->len - off : CMA_INLINE_CHUNK;
			tw_iov iov = { op->buf + off, n };
			if (ch->conn[0]->ops->write(ch->conn[0], &iov, 1, 0, cma_on_desc_written, op) !=
			    TW_OK) {
				if (op->pending == 0)
					return TW_ERR_NOMEM;
				cma_fail_op(op, TW_ERR_NOMEM, "out of memory queueing a piece of a tensor");
				return TW_OK;
			}
			op->pending++;
		}
	} else {
		tw_nop_writer w;
		tw__nop_writer_init(&w);
		if (ch->xth) {
			tw_wire_xth_descriptor d = { (uint64_t)(uintptr_t)op->buf };
			tw__wire_encode_xth_descriptor(&w, &d);
		} else {
			tw_wire_cma_descriptor d = { (uint32_t)getpid(), (uint64_t)(uintptr_t)op->buf };
			tw__wire_encode_cma_descriptor(&w, &d);
		}
		if (tw__nop_writer_finish(&w) != TW_OK || w.len > sizeof(op->desc)) {
			tw__nop_writer_free(&w);
			return TW_ERR_NOMEM;
		}
		memcpy(op->desc, w.buf, w.len);
		op->desc_len = w.len;
		tw__nop_writer_free(&w);
		tw_iov iov = { op->desc, op->desc_len };
		if (ch->conn[0]->ops->write(ch->conn[0], &iov, 1, TW_WRITE_OBJECT, cma_on_desc_written,
		                            op) != TW_OK)
			return TW_ERR_NOMEM;
		op->pending = 1;
	}
	if (ch->conn[1]->ops->read_into(ch->conn[1], NULL, 0, cma_on_completion, op) != TW_OK) {
		/* completions match sends in order: without this one's read a
		 * later send would take its completion, so no send may follow */
		cma_fail_op(op, TW_ERR_NOMEM, "out of memory queueing the completion read");
		if (ch->failed == TW_OK) {
			ch->failed = TW_ERR_NOMEM;
			tw__detail(ch->failed_detail, sizeof(ch->failed_detail), "%s", op->detail);
		}
	} else {
		op->pending++;
	}
	return TW_OK;
}

/* An operation on a channel that already failed fails the same way, in a
 * later pass. */
static bool cma_refuse_if_failed(cma_channel *ch, cma_op *op)
{
	if (ch->failed == TW_OK)
		return false;
	cma_fail_op(op, ch->failed, ch->failed_detail);
	tw__loop_defer(ch->base.ctx->env->loop, &op->dfr, cma_on_settle, op);
	return true;
}

static tw_status_t cma_send(tw_channel *base, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	cma_channel *ch = (cma_channel *)base;
	bool empty;
	cma_op *op = cma_op_new(ch, buf, cb, arg, &empty);
	if (!op)
		return TW_ERR_NOMEM;
	if (empty || cma_refuse_if_failed(ch, op))
		return TW_OK;
	op->buf = buf->ptr;
	op->len = buf->len;
	if (ch->send_mode == CMA_MODE_PROVING) {
		tw__list_push_back(&ch->held_sends, &op->link);
		return TW_OK;
	}
	tw_status_t st = cma_send_start(ch, op);
	if (st != TW_OK) {
		ch->refs--;
		tw__free(op);
	}
	return st;
}

/* ---- receiving --------------------------------------------------------------------- */

static void cma_copy_step(void *arg);

/* The next copy step: at once in the loop's pass, or, after a step that
 * copied (`yield`), in its next pass, so that a long copy lets the loop
 * poll its sockets between steps of CMA_COPY_BUDGET. */
static void cma_schedule(cma_channel *ch, bool yield)
{
	if (!ch->copying && !tw__list_empty(&ch->copies)) {
		ch->copying = true;
		ch->refs++;
		(yield ? tw__loop_yield : tw__loop_defer)(ch->base.ctx->env->loop, &ch->copy_dfr,
		                                          cma_copy_step, ch);
	}
}

static void cma_on_completion_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	(void)c;
	if (st != TW_OK)
		cma_fail_op(arg, st, detail);
	cma_settle(arg);
}

/* Ends the copy step of the oldest receive, op, with the channel's
 * failure, and goes on with the next. */
static void cma_copy_failed(cma_channel *ch, cma_op *op)
{
	tw__list_remove(&op->link);
	cma_fail_op(op, ch->failed, ch->failed_detail);
	cma_settle(op);
	cma_schedule(ch, false);
	cma_unref(ch);
}

/* Whether the writer ended its side of the channel (spec 4.4.e). It hands
 * the buffers of the sends that failed with it back to its user only once
 * its end is out (transport.h, close), so from then on a copy may read
 * bytes its user wrote later: a receive whose copy was not over before the
 * end was seen fails, the channel with it. Asked once per receive, when
 * its last piece is in: that covers every piece before it. */
static bool cma_writer_left(cma_channel *ch)
{
	if (!tw__channel_writer_left(ch->conn[0], ch->failed_detail, sizeof(ch->failed_detail)))
		return false;
	ch->failed = TW_ERR_EOF;
	return true;
}

/* Copies the next piece of the oldest receive; when it is whole, writes
 * its completion and goes on with the next. */
static void cma_copy_step(void *arg)
{
	cma_channel *ch = arg;
	ch->copying = false;
	if (ch->closed || tw__list_empty(&ch->copies)) {
		cma_unref(ch);
		return;
	}
	cma_op *op = TW_CONTAINER_OF(ch->copies.next, cma_op, link);
	if (ch->failed != TW_OK) {
		cma_copy_failed(ch, op);
		return;
	}
	uint64_t n = op->len - op->done;
	if (n > CMA_COPY_BUDGET)
		n = CMA_COPY_BUDGET;
	if (n > TW_RW_MAX)
		n = TW_RW_MAX;
	struct iovec l = { op->buf + op->done, (size_t)n };
	struct iovec r = { (void *)(uintptr_t)(op->ptr + op->done), (size_t)n };
	ssize_t got;
	if (ch->xth) { /* the sender is this process: its buffer is ours to read */
		memcpy(l.iov_base, r.iov_base, l.iov_len);
		got = (ssize_t)n;
	} else {
		got = tw__sys_process_vm_readv((pid_t)op->pid, &l, 1, &r, 1);
	}
	if (got < 0 && errno == EINTR)
		got = 0; /* the next pass tries again */
	else if (got <= 0) {
		char eb[128];
		tw__detail(ch->failed_detail, sizeof(ch->failed_detail),
		           "process_vm_readv of %llu bytes at 0x%llx from pid %u (byte %llu of %llu): %s",
		           (unsigned long long)n, (unsigned long long)(op->ptr + op->done),
		           (unsigned)op->pid, (unsigned long long)op->done, (unsigned long long)op->len,
		           got < 0 ? tw__strerror(errno, eb, sizeof(eb)) : "copied nothing");
		/* a copy refused is the host's policy; a writer whose process
		 * is gone died (its connections reset with it) */
		ch->failed = got < 0 && errno == EPERM   ? TW_ERR_UNSUPPORTED
		             : got < 0 && errno == ESRCH ? TW_ERR_CONNRESET
		                                         : TW_ERR_SYS;
		cma_copy_failed(ch, op);
		return;
	}
	op->done += (uint64_t)got;
	if (op->done == op->len && cma_writer_left(ch)) {
		cma_copy_failed(ch, op); /* its last piece may be the user's later bytes */
		return;
	}
	if (op->done == op->len) {
		tw__list_remove(&op->link);
		tw_iov none = { NULL, 0 };
		if (ch->conn[1]->ops->write(ch->conn[1], &none, 1, 0, cma_on_completion_written, op) !=
		    TW_OK) {
			cma_fail_op(op, TW_ERR_NOMEM, "out of memory queueing a completion");
			cma_settle(op);
		}
	}
	cma_schedule(ch, true);
	cma_unref(ch);
}

/* Whether `pid` is the process at the other end of connection 0, whose
 * memory a Descriptor may then name (4.4.d, 4.5.b). The kernel is asked
 * once: an honest peer names its own process every time, so another pid
 * later is refused, and so is the same one once that process has exited
 * (its number may be another process's by then; a pidfd, taken before the
 * lookup, keeps to the process that was found). */
static tw_status_t cma_check_peer(cma_channel *ch, uint32_t pid, char *detail, size_t len)
{
	if (ch->peer_pid != 0 && pid != ch->peer_pid) {
		tw__detail(detail, len,
		           "refused the peer %s: its Descriptors named process %u, now process %u "
		           "(a peer names its own process, always the same one)",
		           ch->conn[0]->ops->peer(ch->conn[0]), (unsigned)ch->peer_pid, (unsigned)pid);
		return TW_ERR_PROTO;
	}
	if (ch->peer_pid != 0 && ch->peer_pidfd >= 0 && tw__sys_pidfd_exited(ch->peer_pidfd)) {
		tw__detail(detail, len,
		           "refused the peer %s: process %u, found at the other end of this "
		           "connection, has exited (its number may now be another process's)",
		           ch->conn[0]->ops->peer(ch->conn[0]), (unsigned)pid);
		return TW_ERR_PROTO;
	}
	if (ch->peer_pid != 0)
		return TW_OK;
	int pidfd = ch->xth ? -1 : tw__sys_pidfd_open((pid_t)pid);
	tw_status_t st = tw__channel_peer_is(ch->conn[0], (pid_t)pid, detail, len);
	if (st == TW_OK && pidfd >= 0 && tw__sys_pidfd_exited(pidfd)) {
		tw__detail(detail, len, "refused the peer %s: process %u exited as it was checked",
		           ch->conn[0]->ops->peer(ch->conn[0]), (unsigned)pid);
		st = TW_ERR_PROTO;
	}
	if (st != TW_OK) {
		if (pidfd >= 0)
			tw__sys_close(pidfd);
		return st;
	}
	ch->peer_pid = pid;
	ch->peer_pidfd = pidfd;
	return TW_OK;
}

static void cma_on_desc(tw_conn *c, tw_status_t st, const char *detail, void *buf, uint64_t len,
                        void *arg)
{
	(void)c;
	cma_op *op = arg;
	cma_channel *ch = op->ch;
	if (st != TW_OK) {
		cma_fail_op(op, st, detail);
		cma_settle(op);
		return;
	}
	tw_wire_cma_descriptor d = { 0, 0 };
	size_t used;
	char dd[TW_DETAIL_MAX];
	if (ch->xth) {
		tw_wire_xth_descriptor x = { 0 };
		st = tw__wire_decode_xth_descriptor(buf, (size_t)len, &x, &used, dd, sizeof(dd));
		d.ptr = x.ptr;
	} else {
		st = tw__wire_decode_cma_descriptor(buf, (size_t)len, &d, &used, dd, sizeof(dd));
	}
	tw__free(buf);
	if (ch->closed) { /* its connections are gone: nothing to check the peer with */
		cma_fail_op(op, TW_ERR_CLOSED, "closed");
		cma_settle(op);
		return;
	}
	/* memory is only read from the process at the other end (4.4.d, 4.5.b) */
	if (st == TW_OK && !(ch->xth ? TW_MUTANT("xth_peer_trusted") : TW_MUTANT("cma_pid_trusted"))) {
		st = cma_check_peer(ch, ch->xth ? (uint32_t)getpid() : d.pid, dd, sizeof(dd));
		/* a writer that left holds no socket to find: say that, not "forged" */
		if (st != TW_OK && tw__channel_writer_left(ch->conn[0], dd, sizeof(dd)))
			st = TW_ERR_EOF;
	}
	if (st != TW_OK) { /* a broken or forged peer fails the channel (channel.h) */
		ch->failed = st == TW_ERR_EOF ? TW_ERR_EOF : TW_ERR_PROTO;
		tw__detail(ch->failed_detail, sizeof(ch->failed_detail), "%s", dd);
		cma_fail_op(op, ch->failed, dd);
		cma_settle(op);
		return;
	}
	op->pid = d.pid;
	op->ptr = d.ptr;
	tw__list_push_back(&ch->copies, &op->link);
	cma_schedule(ch, false);
}

static void cma_on_inline_piece(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                                uint64_t len, void *arg)
{
	(void)c;
	(void)buf;
	cma_op *op = arg;
	cma_channel *ch = op->ch;
	if (st != TW_OK) {
		cma_fail_op(op, st, detail);
	} else {
		op->done += len;
		if (op->done == op->len && op->status == TW_OK && !ch->closed) {
			tw_iov none = { NULL, 0 };
			if (ch->conn[1]->ops->write(ch->conn[1], &none, 1, 0, cma_on_completion_written,
			                            op) != TW_OK)
				cma_fail_op(op, TW_ERR_NOMEM, "out of memory queueing a completion");
			else
				op->pending++;
		}
	}
	cma_settle(op);
}

/* Queues the reads of op in the receive mode: its Descriptor (the copy
 * follows), or its bytes in CMA_INLINE_CHUNK pieces (the completion
 * follows the last). TW_ERR_NOMEM when nothing could be queued. */
static tw_status_t cma_recv_start(cma_channel *ch, cma_op *op)
{
	op->pending = 0;
	if (ch->recv_mode != CMA_MODE_INLINE) {
		if (ch->conn[0]->ops->read_alloc(ch->conn[0], CMA_DESC_MAX, cma_on_desc, op) != TW_OK)
			return TW_ERR_NOMEM;
		op->pending = 1;
		return TW_OK;
	}
	for (uint64_t off = 0; off < op->len; off += CMA_INLINE_CHUNK) {
		uint64_t n = op->len - off < CMA_INLINE_CHUNK ? op->len - off : CMA_INLINE_CHUNK;
		if (ch->conn[0]->ops->read_into(ch->conn[0], op->buf + off, n, cma_on_inline_piece,
		                                op) != TW_OK) {
			if (op->pending == 0)
				return TW_ERR_NOMEM;
			cma_fail_op(op, TW_ERR_NOMEM, "out of memory queueing a piece of a tensor");
			return TW_OK;
		}
		op->pending++;
	}
	return TW_OK;
}

static tw_status_t cma_recv(tw_channel *base, const tw_buffer *buf, tw_channel_cb cb, void *arg)
{
	cma_channel *ch = (cma_channel *)base;
	bool empty;
	cma_op *op = cma_op_new(ch, buf, cb, arg, &empty);
	if (!op)
		return TW_ERR_NOMEM;
	if (empty || cma_refuse_if_failed(ch, op))
		return TW_OK;
	op->buf = buf->ptr;
	op->len = buf->len;
	if (ch->recv_mode == CMA_MODE_PROVING) {
		tw__list_push_back(&ch->held_recvs, &op->link);
		return TW_OK;
	}
	tw_status_t st = cma_recv_start(ch, op);
	if (st != TW_OK) {
		ch->refs--;
		tw__free(op);
	}
	return st;
}

/* ---- the proof (spec 8.3) ---------------------------------------------------------- */

static void cma_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Fails, in a later pass, every operation of `held`. */
static void cma_fail_held(cma_channel *ch, tw_list *held, tw_status_t st, const char *detail)
{
	while (!tw__list_empty(held)) {
		cma_op *op = TW_CONTAINER_OF(held->next, cma_op, link);
		tw__list_remove(&op->link);
		cma_fail_op(op, st, detail);
		tw__loop_defer(ch->base.ctx->env->loop, &op->dfr, cma_on_settle, op);
	}
}

static void cma_proof_failed(cma_channel *ch, tw_status_t st, const char *what, const char *detail)
{
	if (ch->failed == TW_OK) {
		ch->failed = st;
		tw__detail(ch->failed_detail, sizeof(ch->failed_detail), "the proof (spec 8.3): %s: %s",
		           what, detail);
	}
	cma_fail_held(ch, &ch->held_sends, ch->failed, ch->failed_detail);
	cma_fail_held(ch, &ch->held_recvs, ch->failed, ch->failed_detail);
}

/* The mode of one direction is known: start what waited for it, in order. */
static void cma_release(cma_channel *ch, tw_list *held, bool sends)
{
	while (!tw__list_empty(held)) {
		cma_op *op = TW_CONTAINER_OF(held->next, cma_op, link);
		tw__list_remove(&op->link);
		if ((sends ? cma_send_start(ch, op) : cma_recv_start(ch, op)) != TW_OK) {
			cma_fail_op(op, TW_ERR_NOMEM, "out of memory queueing a tensor");
			op->pending = 1;
			cma_settle(op);
		}
	}
}

static void cma_on_proof_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	(void)c;
	cma_channel *ch = arg;
	if (st != TW_OK && !ch->closed)
		cma_proof_failed(ch, st, "writing", detail);
	cma_unref(ch);
}

/* A frame of the proof arrived (or its read failed): false when there is
 * nothing more to do with it (the instance closed, or the proof failed),
 * the frame freed and the read's reference dropped. */
static bool cma_proof_frame(cma_channel *ch, tw_status_t st, const char *what,
                            const char *detail, void *buf)
{
	if (!ch->closed && st == TW_OK)
		return true;
	tw__free(buf);
	if (!ch->closed)
		cma_proof_failed(ch, st, what, detail);
	cma_unref(ch);
	return false;
}

/* The peer's probe: copy it as every later tensor would be copied, and
 * answer with "" (proven) or why not; our receives then start in COPY or
 * INLINE mode. */
static void cma_on_peer_probe(tw_conn *c, tw_status_t st, const char *detail, void *buf,
                              uint64_t len, void *arg)
{
	(void)c;
	cma_channel *ch = arg;
	if (!cma_proof_frame(ch, st, "reading the peer's probe", detail, buf))
		return;
	tw_wire_cma_descriptor d = { 0, 0 };
	size_t used;
	char dd[TW_DETAIL_MAX];
	st = tw__wire_decode_cma_descriptor(buf, (size_t)len, &d, &used, dd, sizeof(dd));
	tw__free(buf);
	if (st != TW_OK) {
		cma_proof_failed(ch, TW_ERR_PROTO, "the peer's probe", dd);
		cma_unref(ch);
		return;
	}
	uint8_t got[CMA_PROOF_LEN] = { 0 };
	struct iovec l = { got, sizeof(got) };
	struct iovec r = { (void *)(uintptr_t)d.ptr, sizeof(got) };
	/* a probe naming another process than the peer's is not copied (4.4.d) */
	bool peer = TW_MUTANT("cma_pid_trusted") || cma_check_peer(ch, d.pid, dd, sizeof(dd)) == TW_OK;
	ssize_t n = peer ? tw__sys_process_vm_readv((pid_t)d.pid, &l, 1, &r, 1) : 0;
	int err = errno;
	uint8_t want[CMA_PROOF_LEN];
	memcpy(want, CMA_PROOF_MAGIC, 8);
	cma_put_le64(want + 8, d.ptr);
	char eb[128];
	if (TW_MUTANT("proof_trusting") ||
	    (n == (ssize_t)sizeof(got) && !memcmp(got, want, sizeof(want)))) {
		ch->recv_mode = CMA_MODE_COPY;
		ch->answer[0] = '\0';
	} else {
		if (!peer)
			tw__detail(ch->answer, sizeof(ch->answer), "%s", dd);
		else if (n < 0)
			tw__detail(ch->answer, sizeof(ch->answer), "process_vm_readv from pid %u: %s",
			           (unsigned)d.pid, tw__strerror(err, eb, sizeof(eb)));
		else
			tw__detail(ch->answer, sizeof(ch->answer),
			           "process_vm_readv from pid %u copied %zd bytes that are not the probe "
			           "(another process has that pid here)",
			           (unsigned)d.pid, n);
		ch->recv_mode = CMA_MODE_INLINE;
		tw__detail(ch->recv_note, sizeof(ch->recv_note),
		           "copies from the peer refused (%s): tensors from the peer travel inline",
		           ch->answer);
	}
	tw_iov iov = { ch->answer, strlen(ch->answer) };
	if (ch->conn[1]->ops->write(ch->conn[1], &iov, 1, TW_WRITE_OBJECT, cma_on_proof_written,
	                            ch) != TW_OK) {
		cma_proof_failed(ch, TW_ERR_NOMEM, "answering", "out of memory");
	} else {
		ch->refs++;
		cma_release(ch, &ch->held_recvs, false);
	}
	cma_unref(ch);
}

/* The peer's answer to our probe: our sends start in COPY or INLINE mode. */
static void cma_on_answer(tw_conn *c, tw_status_t st, const char *detail, void *buf, uint64_t len,
                          void *arg)
{
	(void)c;
	cma_channel *ch = arg;
	if (!cma_proof_frame(ch, st, "reading the answer to our probe", detail, buf))
		return;
	if (len == 0) {
		ch->send_mode = CMA_MODE_COPY;
	} else {
		char why[CMA_ANSWER_MAX + 1];
		size_t n = len < CMA_ANSWER_MAX ? (size_t)len : CMA_ANSWER_MAX;
		for (size_t i = 0; i < n; i++) { /* the peer's text: printable only */
			char ch8 = ((const char *)buf)[i];
			why[i] = ch8 >= 0x20 && ch8 < 0x7f ? ch8 : '?';
		}
		why[n] = '\0';
		ch->send_mode = CMA_MODE_INLINE;
		tw__detail(ch->send_note, sizeof(ch->send_note),
		           "the peer cannot copy from this process (%s): tensors to the peer travel "
		           "inline",
		           why);
	}
	tw__free(buf);
	cma_release(ch, &ch->held_sends, true);
	cma_unref(ch);
}

/* Starts the proof on a new instance: our probe on 0, the reads of the
 * peer's probe (first on 0) and of the answer to ours (first on 1). */
static void cma_proof_start(cma_channel *ch)
{
	memcpy(ch->probe, CMA_PROOF_MAGIC, 8);
	cma_put_le64(ch->probe + 8, (uint64_t)(uintptr_t)ch->probe);
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw_wire_cma_descriptor d = { (uint32_t)getpid(), (uint64_t)(uintptr_t)ch->probe };
	tw__wire_encode_cma_descriptor(&w, &d);
	bool ok = tw__nop_writer_finish(&w) == TW_OK && w.len <= sizeof(ch->probe_desc);
	if (ok) {
		memcpy(ch->probe_desc, w.buf, w.len);
		ch->probe_desc_len = w.len;
	}
	tw__nop_writer_free(&w);
	tw_iov iov = { ch->probe_desc, ch->probe_desc_len };
	if (!ok || ch->conn[0]->ops->write(ch->conn[0], &iov, 1, TW_WRITE_OBJECT,
	                                   cma_on_proof_written, ch) != TW_OK) {
		cma_proof_failed(ch, TW_ERR_NOMEM, "writing our probe", "out of memory");
		return;
	}
	ch->refs++;
	if (ch->conn[0]->ops->read_alloc(ch->conn[0], CMA_DESC_MAX, cma_on_peer_probe, ch) !=
	    TW_OK) {
		cma_proof_failed(ch, TW_ERR_NOMEM, "reading the peer's probe", "out of memory");
		return;
	}
	ch->refs++;
	if (ch->conn[1]->ops->read_alloc(ch->conn[1], CMA_ANSWER_MAX, cma_on_answer, ch) != TW_OK) {
		cma_proof_failed(ch, TW_ERR_NOMEM, "reading the answer", "out of memory");
		return;
	}
	ch->refs++;
}

static void cma_describe(tw_channel *base, char *buf, size_t len)
{
	cma_channel *ch = (cma_channel *)base;
	if (ch->xth)
		tw__detail(buf, len, "copies within this process");
	else if (!ch->proof)
		tw__detail(buf, len, "copies, not proven (the peer does not speak spec 8.3, as stock)");
	else if (ch->failed != TW_OK)
		tw__detail(buf, len, "failed: %s", ch->failed_detail);
	else if (ch->send_mode == CMA_MODE_PROVING || ch->recv_mode == CMA_MODE_PROVING)
		tw__detail(buf, len, "the proof (spec 8.3) is under way");
	else if (ch->send_mode == CMA_MODE_COPY && ch->recv_mode == CMA_MODE_COPY)
		tw__detail(buf, len, "copies proven both ways (spec 8.3)");
	else
		tw__detail(buf, len, "%s%s%s", ch->send_mode == CMA_MODE_INLINE ? ch->send_note : "",
		           ch->send_mode == CMA_MODE_INLINE && ch->recv_mode == CMA_MODE_INLINE ? "; "
		                                                                               : "",
		           ch->recv_mode == CMA_MODE_INLINE ? ch->recv_note : "");
}

static void cma_close(tw_channel *base)
{
	cma_channel *ch = (cma_channel *)base;
	ch->closed = true;
	/* receives waiting for their copy: nothing touches their buffers now */
	while (!tw__list_empty(&ch->copies)) {
		cma_op *op = TW_CONTAINER_OF(ch->copies.next, cma_op, link);
		tw__list_remove(&op->link);
		cma_fail_op(op, TW_ERR_CLOSED, "closed with the copy not done");
		tw__loop_defer(ch->base.ctx->env->loop, &op->dfr, cma_on_settle, op);
	}
	cma_fail_held(ch, &ch->held_sends, TW_ERR_CLOSED, "closed during the proof (spec 8.3)");
	cma_fail_held(ch, &ch->held_recvs, TW_ERR_CLOSED, "closed during the proof (spec 8.3)");
	for (int i = 0; i < 2; i++) {
		ch->conn[i]->ops->close(ch->conn[i]);
		ch->conn[i] = NULL;
	}
	cma_unref(ch);
}

static const tw_channel_instance_ops cma_instance_ops = {
	.send = cma_send,
	.recv = cma_recv,
	.close = cma_close,
	.acked_by_peer = true, /* a send completes on the peer's completion frame */
	.max_tensor = NULL, /* process_vm_readv is resumed, inline bytes go in pieces: no limit */
	.describe = cma_describe,
};

static tw_status_t cma_open(tw_channel_ctx *c, tw_endpoint_t endpoint, tw_conn *const *conns,
                            size_t num_conns, unsigned flags, tw_channel **out, char *detail,
                            size_t detail_len)
{
	(void)endpoint;
	cma_channel *ch = num_conns == 2 ? tw__calloc(1, sizeof(*ch)) : NULL;
	if (!ch) {
		for (size_t i = 0; i < num_conns; i++)
			conns[i]->ops->close(conns[i]);
		tw__detail(detail, detail_len, "%s channel: %s", c->ops->kind,
		           num_conns == 2 ? "out of memory" : "needs 2 connections");
		return num_conns == 2 ? TW_ERR_NOMEM : TW_ERR_INVAL;
	}
	ch->base.ops = &cma_instance_ops;
	ch->base.ctx = c;
	ch->xth = c->ops == &tw__xth_channel_ops;
	ch->conn[0] = conns[0];
	ch->conn[1] = conns[1];
	ch->refs = 1;
	ch->peer_pidfd = -1;
	tw__list_init(&ch->copies);
	tw__list_init(&ch->held_sends);
	tw__list_init(&ch->held_recvs);
	ch->proof = (flags & TW_CHANNEL_PROOF) != 0 && !ch->xth;
	if (ch->proof)
		cma_proof_start(ch);
	else
		ch->send_mode = ch->recv_mode = CMA_MODE_COPY;
	*out = &ch->base;
	return TW_OK;
}

static size_t cma_num_connections(tw_channel_ctx *c)
{
	(void)c;
	return 2;
}

/* cma's options: YAMA scope 1 lets a process be traced only by its
 * ancestors, so peers can copy from it only after it lets any process of
 * its user trace it (PR_SET_PTRACER_ANY). Stock does that silently for the
 * whole process (field failure T02); ours only when asked, and says so. */
typedef struct cma_opts {
	bool ptracer_any;
} cma_opts;

/* Whether cma can work from this process at all: the checks stock makes,
 * except that YAMA scope 1 needs the user's consent. */
static tw_status_t cma_viable(const cma_opts *o, char *detail, size_t detail_len)
{
	int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	if (dumpable != 1) {
		tw__detail(detail, detail_len, "cma channel: not viable: this process is not "
		                               "dumpable (PR_GET_DUMPABLE %d): peers cannot attach",
		           dumpable);
		return TW_ERR_UNSUPPORTED;
	}
	char scope[16];
	if (tw__sys_read_file("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope)) > 0 &&
	    !TW_MUTANT("cma_yama_ignored")) {
		int s = scope[0] - '0';
		if (s >= 2) {
			tw__detail(detail, detail_len,
			           "cma channel: not viable: YAMA ptrace_scope is %d (2: admin only, 3: "
			           "none)", s);
			return TW_ERR_UNSUPPORTED;
		}
		if (s == 1 && !o->ptracer_any) {
			tw__detail(detail, detail_len,
			           "cma channel: not viable: YAMA ptrace_scope is 1, so peers could copy "
			           "from this process only if it let any process of its user trace it; "
			           "register cma with option ptracer_any=true to allow that");
			return TW_ERR_UNSUPPORTED;
		}
		if (s == 1) {
			if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0) {
				char eb[128];
				tw__detail(detail, detail_len,
				           "cma channel: not viable: YAMA ptrace_scope 1 and "
				           "prctl(PR_SET_PTRACER_ANY): %s",
				           tw__strerror(errno, eb, sizeof(eb)));
				return TW_ERR_UNSUPPORTED;
			}
			fprintf(stderr, "libtensorwire: warning: cma channel option ptracer_any: any "
			                "process of this user may now trace process %d (YAMA "
			                "ptrace_scope 1)\n",
			        (int)getpid());
		}
	}
	char src[8] = "probe", dst[8] = "";
	struct iovec l = { dst, sizeof(dst) }, r = { src, sizeof(src) };
	if (tw__sys_process_vm_readv(getpid(), &l, 1, &r, 1) != (ssize_t)sizeof(src)) {
		char eb[128];
		tw__detail(detail, detail_len,
		           "cma channel: not viable: process_vm_readv on this process: %s",
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_UNSUPPORTED;
	}
	return TW_OK;
}

/* cma and xth: the descriptor stock builds and (cma) its options and
 * viability checks; the reason is said when the channel is not viable. */
static tw_status_t cpu_same_host_create(const tw_channel_ops *ops,
                                        tw_status_t (*identity)(char *, size_t, char *, size_t),
                                        bool cma, const tw_channel_env *env, const char *options,
                                        tw_channel_ctx **out, char *detail, size_t detail_len)
{
	char who[32];
	snprintf(who, sizeof(who), "%s channel", ops->kind);
	static const tw_option table[] = {
		{ "ptracer_any", TW_OPT_BOOL, offsetof(cma_opts, ptracer_any), 0, 0, 0 },
	};
	cma_opts o = { false };
	tw_status_t st = tw__options_parse(who, options, table, cma ? 1 : 0, &o, NULL, 0, detail,
	                                   detail_len);
	if (st != TW_OK)
		return st;
	char desc[TW_IDENTITY_MAX], why[TW_DETAIL_MAX];
	st = identity(desc, sizeof(desc), why, sizeof(why));
	if (st != TW_OK) {
		tw__detail(detail, detail_len, "%s: not viable: %s", who, why);
		return TW_ERR_UNSUPPORTED;
	}
	st = cma ? cma_viable(&o, detail, detail_len) : TW_OK;
	if (st != TW_OK)
		return st;
	return tw__channel_cpu_ctx_new(ops, env, desc, out, detail, detail_len);
}

static tw_status_t cma_create(const tw_channel_env *env, const char *options,
                              tw_channel_ctx **out, char *detail, size_t detail_len)
{
	return cpu_same_host_create(&tw__cma_channel_ops, tw__identity_cma, true, env, options, out,
	                            detail, detail_len);
}

const tw_channel_ops tw__cma_channel_ops = {
	.kind = "cma",
	.create = cma_create,
	.can_communicate = NULL,
	.num_connections = cma_num_connections,
	.speaks_proof = true,
	.open = cma_open,
	.shutdown = NULL,
	.destroy = tw__channel_cpu_ctx_free,
};

/* xth: cma's flow inside one process (spec 4.5). Stock offers it under
 * the same rule: only a peer in this very process has this descriptor. */
static tw_status_t xth_create(const tw_channel_env *env, const char *options,
                              tw_channel_ctx **out, char *detail, size_t detail_len)
{
	return cpu_same_host_create(&tw__xth_channel_ops, tw__identity_xth, false, env, options, out,
	                            detail, detail_len);
}

const tw_channel_ops tw__xth_channel_ops = {
	.kind = "xth",
	.create = xth_create,
	.can_communicate = NULL,
	.num_connections = cma_num_connections,
	.open = cma_open,
	.shutdown = NULL,
	.destroy = tw__channel_cpu_ctx_free,
};
