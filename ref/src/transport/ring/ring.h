/*
 * ring.h - the shared-memory ring of spec/wire.md 2.3.2 and the framing
 * inside it (2.3.3), shared by the ring transports: shm writes into its
 * peer's inbox and reads its own; ibv frames into a local ring that RDMA
 * copies to the peer.
 *
 * A ring is a 40-byte header segment and a data segment of `capacity`
 * bytes (a power of two), each its own file so that it can be passed to
 * another process. The header is shared with a process we do not control:
 *   - every access to a flag or marker is an atomic at stock's offset and
 *     width (a byte exchange for a flag, 8-byte loads and adds for markers);
 *   - capacity and mask are read once, when the ring is loaded, and checked
 *     against the data segment's real size; later changes by the peer are
 *     ignored;
 *   - markers are checked on every use: a peer whose head and tail are more
 *     than `capacity` apart is reported (TW_ERR_PROTO), never trusted into an
 *     out-of-bounds copy.
 *
 * Roles. A ring has one consumer side (reads, advances the tail) and one
 * producer side (writes, advances the head). Each side takes its
 * in-transaction flag for the length of one transaction; a flag already
 * taken (another writer to a reactor ring) means "busy, try again": this
 * layer never spins or sleeps. What the rings mean (inboxes, reactor
 * tokens, wake-ups) belongs to the transport, not to this file; it makes no
 * system call except when it creates, loads or unmaps a ring.
 *
 * Framing: each frame is u32le(length) then the bytes. The length is
 * written only when all 4 bytes fit; a nop object (TW_WRITE_OBJECT) goes in
 * one piece with its length, so it must fit the ring; a raw buffer streams
 * through in pieces as room frees up. A frame of 4 GiB or more cannot be
 * written (the length does not fit): the writer refuses it before writing
 * a byte (2.3.3.d), where stock truncates the length.
 */
#ifndef TW_TRANSPORT_RING_RING_H
#define TW_TRANSPORT_RING_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"
#include "transport/transport.h"

#define TW_RING_HEADER_SIZE 40
#define TW_RING_INBOX_CAPACITY ((uint64_t)2 << 20)   /* spec 2.3.2.c */
#define TW_RING_REACTOR_CAPACITY ((uint64_t)4 << 20) /* spec 2.3.2 */
#define TW_RING_FRAME_MAX ((uint64_t)UINT32_MAX)      /* largest body (2.3.3.d) */

/* Header offsets (spec 2.3.2). */
enum {
	TW_RING_OFF_CAPACITY = 0,
	TW_RING_OFF_MASK = 8,
	TW_RING_OFF_CONSUMER_FLAG = 16,
	TW_RING_OFF_PRODUCER_FLAG = 17,
	TW_RING_OFF_TAIL = 24,
	TW_RING_OFF_HEAD = 32,
};

typedef enum tw_ring_role { TW_RING_CONSUMER = 0, TW_RING_PRODUCER = 1 } tw_ring_role;

typedef struct tw_ring {
	uint8_t *header;   /* TW_RING_HEADER_SIZE bytes, shared */
	uint8_t *data;     /* capacity bytes, shared */
	uint64_t capacity; /* ours: read once, checked */
	uint64_t mask;
	int header_fd, data_fd; /* -1 unless this process created or loaded them */
	bool mapped;            /* header and data are our mappings (unmap frees) */
} tw_ring;

/* A contiguous piece of ring memory. */
typedef struct tw_ring_span {
	uint8_t *ptr;
	uint64_t len;
} tw_ring_span;

/* One transaction on one side of a ring. */
typedef struct tw_ring_tx {
	tw_ring *ring;
	tw_ring_role role;
	uint64_t size; /* bytes claimed so far, committed together */
} tw_ring_tx;

/* ---- making rings ---- */

/* Wraps memory the caller owns (tests, ibv's registered ring) and writes a
 * fresh header into it: capacity and mask, flags clear, markers 0.
 * capacity must be a power of two of at least 8. */
TW_NODISCARD tw_status_t tw__ring_init(tw_ring *r, void *header, void *data, uint64_t capacity,
                                       char *detail, size_t detail_len);
/* Creates both segments as shared-memory files (memfd, or an unnamed file
 * in /dev/shm where memfd_create is missing), reserves them (a full tmpfs
 * fails here with ENOSPC, not later with SIGBUS), maps and initialises
 * them. `who` names the transport for details ("shm transport"). */
TW_NODISCARD tw_status_t tw__ring_create(tw_ring *r, uint64_t capacity, const char *who,
                                         char *detail, size_t detail_len);
/* Maps a ring another process created, from its two descriptors (taken
 * over: closed by tw__ring_unmap, or at once on failure). Checks the
 * segment sizes (header exactly 40 bytes, data a power of two and, if
 * want_capacity is not 0, exactly that) and that the header's capacity and
 * mask agree: TW_ERR_PROTO with a detail otherwise (spec 2.3.2.a). */
TW_NODISCARD tw_status_t tw__ring_load(tw_ring *r, int header_fd, int data_fd,
                                       uint64_t want_capacity, const char *who, char *detail,
                                       size_t detail_len);
/* A ring that holds nothing yet: unmap leaves it alone. (A ring zeroed
 * with memset is not one: its descriptors read as 0, stdin.) */
void tw__ring_none(tw_ring *r);
/* Unmaps and closes what create or load made; safe on a ring from
 * tw__ring_none, and on one whose create or load failed. */
void tw__ring_unmap(tw_ring *r);

/* ---- transactions ---- */

/* Takes the role's flag. false: another user holds it (try again later). */
TW_NODISCARD bool tw__ring_begin(tw_ring *r, tw_ring_role role, tw_ring_tx *tx);
/* How many more bytes this transaction may claim: readable bytes for the
 * consumer, free room for the producer. TW_ERR_PROTO if the markers are
 * inconsistent (more than `capacity` apart). */
TW_NODISCARD tw_status_t tw__ring_room(const tw_ring_tx *tx, uint64_t *room_out, char *detail,
                                       size_t detail_len);
/* Claims the next n bytes (n <= room) and returns where they are: 0, 1 or 2
 * spans (2 when they wrap around the end of the data segment). */
int tw__ring_claim(tw_ring_tx *tx, uint64_t n, tw_ring_span spans_out[2]);
/* Publishes the claimed bytes (advances the role's marker) and releases the
 * flag. */
void tw__ring_commit(tw_ring_tx *tx);
/* Releases the flag without moving the marker. */
void tw__ring_cancel(tw_ring_tx *tx);
/* Bytes currently readable (producer's head minus consumer's tail), from
 * either side, without a transaction; TW_ERR_PROTO as for room. */
TW_NODISCARD tw_status_t tw__ring_used(const tw_ring *r, uint64_t *used_out, char *detail,
                                       size_t detail_len);

/* The role's marker (producer: head, consumer: tail): the total of bytes
 * ever written or read, for a transport that keeps its own ring's state
 * (ibv copies what lies between two head positions to its peer). */
uint64_t tw__ring_load_marker(const tw_ring *r, tw_ring_role role);

/* Whole writes and reads of small fixed-size items (reactor tokens):
 * all-or-nothing in one transaction. TW_OK and *done_out true when moved;
 * TW_OK and false when busy or there is no room/data yet. */
TW_NODISCARD tw_status_t tw__ring_write_all(tw_ring *r, const void *buf, uint64_t len,
                                            bool *done_out, char *detail, size_t detail_len);
TW_NODISCARD tw_status_t tw__ring_read_all(tw_ring *r, void *buf, uint64_t len, bool *done_out,
                                           char *detail, size_t detail_len);

/* What tw__ring_repair found and mended. */
enum {
	TW_RING_REPAIRED_CONSUMER_FLAG = 1, /* taken by no consumer of ours: released */
	TW_RING_REPAIRED_MARKERS = 2,       /* more than capacity apart, or not a whole number of
	                                     * items: tail set to head */
	TW_RING_REPAIRED_PRODUCER_FLAG = 4, /* taken at both looks: released */
};

/* For the owner of a ring that only it consumes (a reactor, which every
 * peer may write): mends what another process left broken, so that one
 * hostile peer cannot stop the ring for all the others. The caller must
 * hold its own consumers out (its lock, not the shared flag), so a taken
 * consumer flag can only be a stranger's. Markers more than capacity apart,
 * or not a whole number of `item`-byte items apart (0: any distance; every
 * later item would be read shifted), are re-synchronised, dropping what the
 * ring held. With `watch` (the caller's previous look, far enough back
 * that no producer holds the flag that long): a producer flag taken at
 * both looks, with no item written in between (the head where it was), is
 * released, and *watch becomes this look. Under traffic the flag can be
 * taken at any two looks, by different producers; the head they move tells
 * those apart from one that stopped holding it. Returns the
 * TW_RING_REPAIRED_* mask: the items dropped or blocked are lost, so the
 * caller must re-check everything they would have announced. */
typedef struct tw_ring_watch {
	bool taken;    /* the producer flag at the last look */
	uint64_t head; /* the head marker then */
} tw_ring_watch;
unsigned tw__ring_repair(tw_ring *r, uint64_t item, tw_ring_watch *watch);

/* ---- frames (spec 2.3.3) ---- */

/* One frame being written: its pieces are the caller's (see tw_conn_ops'
 * write) and must stay valid until done. */
typedef struct tw_ring_writer {
	const tw_iov *iov;
	size_t num_iov;
	uint64_t len;  /* body length */
	bool object;   /* TW_WRITE_OBJECT: length and body in one piece */
	bool length_done;
	uint64_t done; /* body bytes written */
	size_t at_iov; /* where the next body byte comes from */
	uint64_t at_off;
} tw_ring_writer;

/* Checks that the frame can travel on a ring of `capacity` bytes and sets
 * the writer up. TW_ERR_UNSUPPORTED with a detail naming the limit if the
 * body is 4 GiB or more, or if an object and its length do not fit the
 * ring; nothing is written then. */
TW_NODISCARD tw_status_t tw__ring_writer_init(tw_ring_writer *w, const tw_iov *iov,
                                              size_t num_iov, unsigned flags, uint64_t capacity,
                                              const char *who, char *detail, size_t detail_len);
/* Writes as much of the frame as fits, in one transaction, with at most
 * `budget` body bytes (0: no bound; the 4-byte length and an object are
 * never split by it). *moved_out says how many
 * bytes went in (0 when busy or full). TW_ERR_PROTO if the ring's markers
 * are inconsistent. */
TW_NODISCARD tw_status_t tw__ring_write_some(tw_ring *r, tw_ring_writer *w, uint64_t budget,
                                             uint64_t *moved_out, char *detail,
                                             size_t detail_len);
static inline bool tw__ring_writer_done(const tw_ring_writer *w)
{
	return w->length_done && w->done == w->len;
}

/* One frame being read: into the caller's buffer of exactly `len` bytes
 * (read_into), or into a new allocation of at most max_len bytes holding a
 * nop object (read_alloc), made once the length is known. */
typedef struct tw_ring_reader {
	uint8_t *buf;     /* read_into: the caller's; alloc: ours until taken */
	uint64_t len;     /* read_into: expected; alloc: from the length */
	uint64_t max_len; /* alloc only */
	bool alloc;
	bool length_done;
	uint64_t done;
} tw_ring_reader;

void tw__ring_reader_into(tw_ring_reader *rd, void *buf, uint64_t len);
void tw__ring_reader_alloc(tw_ring_reader *rd, uint64_t max_len);
/* Reads what is there of the frame in one transaction, at most `budget`
 * body bytes (0: no bound; the 4-byte length is always read whole). TW_ERR_PROTO before touching the body if the length
 * differs from read_into's, exceeds read_alloc's max_len, or is an object
 * longer than the ring can ever hold; TW_ERR_NOMEM if the allocation
 * fails. */
TW_NODISCARD tw_status_t tw__ring_read_some(tw_ring *r, tw_ring_reader *rd, uint64_t budget,
                                            uint64_t *moved_out, const char *who, char *detail,
                                            size_t detail_len);
static inline bool tw__ring_reader_done(const tw_ring_reader *rd)
{
	return rd->length_done && rd->done == rd->len;
}
/* Hands the allocation to the caller (read_alloc); NULL for an empty frame. */
void *tw__ring_reader_take(tw_ring_reader *rd);
/* Frees what the reader still owns. */
void tw__ring_reader_drop(tw_ring_reader *rd);

#endif /* TW_TRANSPORT_RING_RING_H */
