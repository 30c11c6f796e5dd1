/*
 * ring.c - shared-memory rings and the framing inside them (see ring.h).
 */
#include "transport/ring/ring.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "platform/error.h"
#include "platform/mutant.h"
#include "platform/platform.h"

/* ---- the shared header ---- */

static uint8_t *tw__ring_flag(const tw_ring *r, tw_ring_role role)
{
	return r->header + (role == TW_RING_CONSUMER ? TW_RING_OFF_CONSUMER_FLAG
	                                             : TW_RING_OFF_PRODUCER_FLAG);
}

static uint64_t *tw__ring_marker(const tw_ring *r, tw_ring_role role)
{
	return (uint64_t *)(void *)(r->header +
	                            (role == TW_RING_CONSUMER ? TW_RING_OFF_TAIL : TW_RING_OFF_HEAD));
}

uint64_t tw__ring_load_marker(const tw_ring *r, tw_ring_role role)
{
	return __atomic_load_n(tw__ring_marker(r, role), __ATOMIC_ACQUIRE);
}

static void tw__le64_put(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t tw__le64_get(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static bool tw__is_pow2(uint64_t v)
{
	return v && (v & (v - 1)) == 0;
}

tw_status_t tw__ring_init(tw_ring *r, void *header, void *data, uint64_t capacity, char *detail,
                          size_t detail_len)
{
	if (!tw__is_pow2(capacity) || capacity < 8) {
		tw__detail(detail, detail_len, "ring: capacity %llu is not a power of two of at least 8",
		           (unsigned long long)capacity);
		return TW_ERR_INVAL;
	}
	memset(r, 0, sizeof(*r));
	r->header = header;
	r->data = data;
	r->capacity = capacity;
	r->mask = capacity - 1;
	r->header_fd = r->data_fd = -1;
	memset(r->header, 0, TW_RING_HEADER_SIZE);
	tw__le64_put(r->header + TW_RING_OFF_CAPACITY, capacity);
	tw__le64_put(r->header + TW_RING_OFF_MASK, capacity - 1);
	/* No fence: the ring reaches another process or thread only through a
	 * system call (SCM_RIGHTS) or a thread start, which orders these. */
	return TW_OK;
}

/* A shared-memory file of len bytes, its size sealed: memfd, else an
 * unnamed /dev/shm file (not sealed). */
static int tw__ring_segment(uint64_t len, const char *who, const char *what, char *detail,
                            size_t detail_len)
{
	char eb[128];
	int fd = tw__sys_memfd_create("tensorwire-ring");
	if (fd < 0) {
		int memfd_errno = errno;
		fd = tw__sys_open_tmpfile("/dev/shm");
		if (fd < 0) {
			int e = errno;
			char eb2[128];
			tw__detail(detail, detail_len,
			           "%s: %s segment: memfd_create: %s; open(/dev/shm, O_TMPFILE): %s", who,
			           what, tw__strerror(memfd_errno, eb, sizeof(eb)),
			           tw__strerror(e, eb2, sizeof(eb2)));
			return -1;
		}
	}
	if (tw__sys_fallocate(fd, len) != 0) {
		int e = errno;
		if (e != EOPNOTSUPP || tw__sys_ftruncate(fd, len) != 0) {
			tw__detail(detail, detail_len, "%s: %s segment: fallocate %llu bytes: %s", who,
			           what, (unsigned long long)len, tw__strerror(e, eb, sizeof(eb)));
			tw__sys_close(fd);
			return -1;
		}
		/* a filesystem without fallocate: sized at least */
	}
	/* The peer gets this descriptor: sealed, it cannot shrink the file under
	 * our mapping (spec 2.3.2.e). A /dev/shm file cannot be sealed. */
	if (!TW_MUTANT("segments_unsealed"))
		(void)tw__sys_seal_size(fd);
	return fd;
}

static tw_status_t tw__ring_map(tw_ring *r, const char *who, char *detail, size_t detail_len)
{
	char eb[128];
	r->header = tw__sys_mmap_shared(r->header_fd, TW_RING_HEADER_SIZE);
	if (!r->header) {
		tw__detail(detail, detail_len, "%s: mmap ring header: %s", who,
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	r->data = tw__sys_mmap_shared(r->data_fd, (size_t)r->capacity);
	if (!r->data) {
		tw__detail(detail, detail_len, "%s: mmap ring data (%llu bytes): %s", who,
		           (unsigned long long)r->capacity, tw__strerror(errno, eb, sizeof(eb)));
		tw__sys_munmap(r->header, TW_RING_HEADER_SIZE);
		r->header = NULL;
		return TW_ERR_SYS;
	}
	r->mapped = true;
	return TW_OK;
}

tw_status_t tw__ring_create(tw_ring *r, uint64_t capacity, const char *who, char *detail,
                            size_t detail_len)
{
	tw__ring_none(r);
	if (!tw__is_pow2(capacity) || capacity < 8 || capacity > SIZE_MAX / 2) {
		tw__detail(detail, detail_len, "%s: ring capacity %llu is not a power of two", who,
		           (unsigned long long)capacity);
		return TW_ERR_INVAL;
	}
	r->capacity = capacity;
	r->header_fd = tw__ring_segment(TW_RING_HEADER_SIZE, who, "ring header", detail, detail_len);
	if (r->header_fd < 0)
		return TW_ERR_SYS;
	r->data_fd = tw__ring_segment(capacity, who, "ring data", detail, detail_len);
	if (r->data_fd < 0)
		goto err_close;
	tw_status_t st = tw__ring_map(r, who, detail, detail_len);
	if (st != TW_OK)
		goto err_close;
	int hfd = r->header_fd, dfd = r->data_fd;
	st = tw__ring_init(r, r->header, r->data, capacity, detail, detail_len);
	r->header_fd = hfd;
	r->data_fd = dfd;
	r->mapped = true;
	return st;

err_close:
	if (r->header_fd >= 0)
		tw__sys_close(r->header_fd);
	if (r->data_fd >= 0)
		tw__sys_close(r->data_fd);
	r->header_fd = r->data_fd = -1;
	return TW_ERR_SYS;
}

tw_status_t tw__ring_load(tw_ring *r, int header_fd, int data_fd, uint64_t want_capacity,
                          const char *who, char *detail, size_t detail_len)
{
	memset(r, 0, sizeof(*r));
	r->header_fd = header_fd;
	r->data_fd = data_fd;
	char eb[128];
	uint64_t hsize = 0, dsize = 0;
	tw_status_t st = TW_ERR_PROTO;
	if (tw__sys_fd_size(header_fd, &hsize) != 0 || tw__sys_fd_size(data_fd, &dsize) != 0) {
		tw__detail(detail, detail_len, "%s: fstat of a ring segment: %s", who,
		           tw__strerror(errno, eb, sizeof(eb)));
		st = TW_ERR_SYS;
		goto err_close;
	}
	if (hsize != TW_RING_HEADER_SIZE) {
		tw__detail(detail, detail_len,
		           "%s: the peer's ring header segment is %llu bytes, not %d (spec 2.3.2.a)", who,
		           (unsigned long long)hsize, TW_RING_HEADER_SIZE);
		goto err_close;
	}
	if (!tw__is_pow2(dsize) || dsize < 8 || dsize > SIZE_MAX / 2 ||
	    (want_capacity && dsize != want_capacity)) {
		tw__detail(detail, detail_len,
		           "%s: the peer's ring data segment is %llu bytes; expected %s%llu (spec 2.3.2)",
		           who, (unsigned long long)dsize, want_capacity ? "" : "a power of two, e.g. ",
		           (unsigned long long)(want_capacity ? want_capacity : TW_RING_INBOX_CAPACITY));
		goto err_close;
	}
	r->capacity = dsize;
	r->mask = dsize - 1;
	st = tw__ring_map(r, who, detail, detail_len);
	if (st != TW_OK)
		goto err_close;
	uint64_t cap = tw__le64_get(r->header + TW_RING_OFF_CAPACITY);
	uint64_t mask = tw__le64_get(r->header + TW_RING_OFF_MASK);
	if (cap != dsize || mask != dsize - 1) {
		tw__detail(detail, detail_len,
		           "%s: the peer's ring header says capacity %llu mask %llu for a %llu-byte data "
		           "segment (spec 2.3.2.a)",
		           who, (unsigned long long)cap, (unsigned long long)mask,
		           (unsigned long long)dsize);
		tw__ring_unmap(r);
		return TW_ERR_PROTO;
	}
	return TW_OK;

err_close:
	tw__sys_close(header_fd);
	tw__sys_close(data_fd);
	r->header_fd = r->data_fd = -1;
	return st;
}

void tw__ring_none(tw_ring *r)
{
	memset(r, 0, sizeof(*r));
	r->header_fd = r->data_fd = -1;
}

void tw__ring_unmap(tw_ring *r)
{
	if (r->mapped) {
		tw__sys_munmap(r->header, TW_RING_HEADER_SIZE);
		tw__sys_munmap(r->data, (size_t)r->capacity);
		r->mapped = false;
	}
	if (r->header_fd >= 0)
		tw__sys_close(r->header_fd);
	if (r->data_fd >= 0)
		tw__sys_close(r->data_fd);
	r->header_fd = r->data_fd = -1;
	r->header = r->data = NULL;
}

/* ---- transactions ---- */

bool tw__ring_begin(tw_ring *r, tw_ring_role role, tw_ring_tx *tx)
{
	if (__atomic_exchange_n(tw__ring_flag(r, role), 1, __ATOMIC_ACQUIRE) != 0)
		return false;
	tx->ring = r;
	tx->role = role;
	tx->size = 0;
	return true;
}

tw_status_t tw__ring_used(const tw_ring *r, uint64_t *used_out, char *detail, size_t detail_len)
{
	uint64_t tail = tw__ring_load_marker(r, TW_RING_CONSUMER);
	uint64_t head = tw__ring_load_marker(r, TW_RING_PRODUCER);
	uint64_t used = head - tail;
	if (used > r->capacity) {
		tw__detail(detail, detail_len,
		           "ring: head %llu and tail %llu are more than the capacity (%llu) apart: the "
		           "peer broke the ring (spec 2.3.2)",
		           (unsigned long long)head, (unsigned long long)tail,
		           (unsigned long long)r->capacity);
		return TW_ERR_PROTO;
	}
	*used_out = used;
	return TW_OK;
}

tw_status_t tw__ring_room(const tw_ring_tx *tx, uint64_t *room_out, char *detail,
                          size_t detail_len)
{
	uint64_t used;
	tw_status_t st = tw__ring_used(tx->ring, &used, detail, detail_len);
	if (st != TW_OK)
		return st;
	uint64_t room = tx->role == TW_RING_CONSUMER ? used : tx->ring->capacity - used;
	*room_out = room > tx->size ? room - tx->size : 0;
	return TW_OK;
}

int tw__ring_claim(tw_ring_tx *tx, uint64_t n, tw_ring_span spans_out[2])
{
	if (n == 0)
		return 0;
	tw_ring *r = tx->ring;
	uint64_t start = (tw__ring_load_marker(r, tx->role) + tx->size) & r->mask;
	tx->size += n;
	uint64_t first = r->capacity - start;
	if (n <= first) {
		spans_out[0] = (tw_ring_span){ r->data + start, n };
		return 1;
	}
	spans_out[0] = (tw_ring_span){ r->data + start, first };
	spans_out[1] = (tw_ring_span){ r->data, n - first };
	return 2;
}

void tw__ring_commit(tw_ring_tx *tx)
{
	tw_ring *r = tx->ring;
	if (tx->size)
		__atomic_fetch_add(tw__ring_marker(r, tx->role), tx->size, __ATOMIC_RELEASE);
	tx->size = 0;
	__atomic_store_n(tw__ring_flag(r, tx->role), 0, __ATOMIC_RELEASE);
}

void tw__ring_cancel(tw_ring_tx *tx)
{
	tx->size = 0;
	__atomic_store_n(tw__ring_flag(tx->ring, tx->role), 0, __ATOMIC_RELEASE);
}

/* Begins a transaction on `role` and says how much it may claim. TW_OK and
 * *opened false when the flag is taken (busy: nothing to do now); an error
 * leaves no transaction open. */
static tw_status_t tw__ring_open_tx(tw_ring *r, tw_ring_role role, tw_ring_tx *tx,
                                    uint64_t *room_out, bool *opened_out, char *detail,
                                    size_t detail_len)
{
	*opened_out = false;
	if (!tw__ring_begin(r, role, tx))
		return TW_OK;
	tw_status_t st = tw__ring_room(tx, room_out, detail, detail_len);
	if (st != TW_OK) {
		tw__ring_cancel(tx);
		return st;
	}
	*opened_out = true;
	return TW_OK;
}

/* Copies between a flat buffer and claimed spans. */
static void tw__ring_put(const tw_ring_span *sp, int n, const uint8_t *src)
{
	for (int i = 0; i < n; i++) {
		memcpy(sp[i].ptr, src, (size_t)sp[i].len);
		src += sp[i].len;
	}
}

static void tw__ring_get(const tw_ring_span *sp, int n, uint8_t *dst)
{
	for (int i = 0; i < n; i++) {
		memcpy(dst, sp[i].ptr, (size_t)sp[i].len);
		dst += sp[i].len;
	}
}

/* Moves exactly len bytes in one transaction, or nothing. */
static tw_status_t tw__ring_move_all(tw_ring *r, tw_ring_role role, void *buf, uint64_t len,
                                     bool *done_out, char *detail, size_t detail_len)
{
	*done_out = false;
	tw_ring_tx tx;
	uint64_t room;
	bool opened;
	tw_status_t st = tw__ring_open_tx(r, role, &tx, &room, &opened, detail, detail_len);
	if (st != TW_OK || !opened)
		return st;
	if (room < len) {
		tw__ring_cancel(&tx);
		return TW_OK;
	}
	tw_ring_span sp[2];
	int n = tw__ring_claim(&tx, len, sp);
	if (role == TW_RING_PRODUCER)
		tw__ring_put(sp, n, buf);
	else
		tw__ring_get(sp, n, buf);
	tw__ring_commit(&tx);
	*done_out = true;
	return TW_OK;
}

tw_status_t tw__ring_write_all(tw_ring *r, const void *buf, uint64_t len, bool *done_out,
                               char *detail, size_t detail_len)
{
	return tw__ring_move_all(r, TW_RING_PRODUCER, (void *)buf, len, done_out, detail, detail_len);
}

tw_status_t tw__ring_read_all(tw_ring *r, void *buf, uint64_t len, bool *done_out, char *detail,
                              size_t detail_len)
{
	return tw__ring_move_all(r, TW_RING_CONSUMER, buf, len, done_out, detail, detail_len);
}

unsigned tw__ring_repair(tw_ring *r, uint64_t item, tw_ring_watch *watch)
{
	unsigned mended = 0;
	/* called on every look at an empty reactor: loads only, unless
	 * something is wrong (a write would take the header's cache line from
	 * the producers each time) */
	uint8_t *cflag = tw__ring_flag(r, TW_RING_CONSUMER);
	if (__atomic_load_n(cflag, __ATOMIC_ACQUIRE) &&
	    __atomic_exchange_n(cflag, 0, __ATOMIC_ACQ_REL))
		mended |= TW_RING_REPAIRED_CONSUMER_FLAG;
	uint64_t head = tw__ring_load_marker(r, TW_RING_PRODUCER);
	uint64_t apart = head - tw__ring_load_marker(r, TW_RING_CONSUMER);
	if (apart > r->capacity || (item > 1 && apart % item != 0)) {
		/* producers only ever move the head: a tail equal to a head they
		 * published is consistent whatever they do next */
		__atomic_store_n(tw__ring_marker(r, TW_RING_CONSUMER), head, __ATOMIC_RELEASE);
		mended |= TW_RING_REPAIRED_MARKERS;
	}
	if (watch) {
		bool taken = __atomic_load_n(tw__ring_flag(r, TW_RING_PRODUCER), __ATOMIC_ACQUIRE) != 0;
		head = tw__ring_load_marker(r, TW_RING_PRODUCER);
		if (taken && watch->taken && head == watch->head) {
			__atomic_store_n(tw__ring_flag(r, TW_RING_PRODUCER), 0, __ATOMIC_RELEASE);
			mended |= TW_RING_REPAIRED_PRODUCER_FLAG;
			taken = false;
		}
		watch->taken = taken;
		watch->head = head;
	}
	return mended;
}

/* ---- frames ---- */

tw_status_t tw__ring_writer_init(tw_ring_writer *w, const tw_iov *iov, size_t num_iov,
                                 unsigned flags, uint64_t capacity, const char *who, char *detail,
                                 size_t detail_len)
{
	memset(w, 0, sizeof(*w));
	uint64_t len = 0;
	for (size_t i = 0; i < num_iov; i++) {
		if (iov[i].len > UINT64_MAX - len) {
			len = UINT64_MAX;
			break;
		}
		len += iov[i].len;
	}
	if (len > TW_RING_FRAME_MAX) {
		tw__detail(detail, detail_len,
		           "%s: a frame of %llu bytes cannot be sent: a ring frame's length is 32 bits, so "
		           "at most %llu bytes (spec 2.3.3.d)",
		           who, (unsigned long long)len, (unsigned long long)TW_RING_FRAME_MAX);
		return TW_ERR_UNSUPPORTED;
	}
	bool object = (flags & TW_WRITE_OBJECT) != 0;
	if (object && len + 4 > capacity) {
		tw__detail(detail, detail_len,
		           "%s: a packet of %llu bytes cannot be sent: with its 4-byte length it must "
		           "fit the %llu-byte ring in one piece (spec 2.3.3.b)",
		           who, (unsigned long long)len, (unsigned long long)capacity);
		return TW_ERR_UNSUPPORTED;
	}
	w->iov = iov;
	w->num_iov = num_iov;
	w->len = len;
	w->object = object;
	return TW_OK;
}

/* Copies n body bytes from the writer's pieces into the spans. */
static void tw__ring_writer_fill(tw_ring_writer *w, const tw_ring_span *sp, uint64_t n)
{
	int s = 0;
	uint64_t s_off = 0;
	while (n > 0) {
		while (w->iov[w->at_iov].len == w->at_off) {
			w->at_iov++;
			w->at_off = 0;
		}
		while (sp[s].len == s_off) {
			s++;
			s_off = 0;
		}
		uint64_t k = w->iov[w->at_iov].len - w->at_off;
		if (k > sp[s].len - s_off)
			k = sp[s].len - s_off;
		if (k > n)
			k = n;
		memcpy(sp[s].ptr + s_off, (const uint8_t *)w->iov[w->at_iov].base + w->at_off, (size_t)k);
		w->at_off += k;
		s_off += k;
		w->done += k;
		n -= k;
	}
}

tw_status_t tw__ring_write_some(tw_ring *r, tw_ring_writer *w, uint64_t budget,
                                uint64_t *moved_out, char *detail, size_t detail_len)
{
	*moved_out = 0;
	if (tw__ring_writer_done(w))
		return TW_OK;
	tw_ring_tx tx;
	uint64_t room;
	bool opened;
	tw_status_t st =
		tw__ring_open_tx(r, TW_RING_PRODUCER, &tx, &room, &opened, detail, detail_len);
	if (st != TW_OK || !opened)
		return st;
	tw_ring_span sp[2];
	if (!w->length_done) {
		/* The length only when all 4 bytes fit; an object only with it, in
		 * one piece (the budget cannot split it). */
		uint64_t need = 4 + (w->object ? w->len : 0);
		if (room < need) {
			tw__ring_cancel(&tx);
			return TW_OK;
		}
		uint8_t h[4];
		h[0] = (uint8_t)w->len;
		h[1] = (uint8_t)(w->len >> 8);
		h[2] = (uint8_t)(w->len >> 16);
		h[3] = (uint8_t)(w->len >> 24);
		int n = tw__ring_claim(&tx, 4, sp);
		tw__ring_put(sp, n, h);
		w->length_done = true;
		room -= 4;
		if (w->object)
			budget = 0;
	}
	if (budget && room > budget)
		room = budget;
	uint64_t body = w->len - w->done;
	if (body > room)
		body = room;
	if (body) {
		tw__ring_claim(&tx, body, sp);
		tw__ring_writer_fill(w, sp, body);
	}
	*moved_out = tx.size;
	tw__ring_commit(&tx);
	return TW_OK;
}

void tw__ring_reader_into(tw_ring_reader *rd, void *buf, uint64_t len)
{
	memset(rd, 0, sizeof(*rd));
	rd->buf = buf;
	rd->len = len;
}

void tw__ring_reader_alloc(tw_ring_reader *rd, uint64_t max_len)
{
	memset(rd, 0, sizeof(*rd));
	rd->alloc = true;
	rd->max_len = max_len;
}

tw_status_t tw__ring_read_some(tw_ring *r, tw_ring_reader *rd, uint64_t budget,
                               uint64_t *moved_out, const char *who, char *detail,
                               size_t detail_len)
{
	*moved_out = 0;
	if (tw__ring_reader_done(rd))
		return TW_OK;
	tw_ring_tx tx;
	uint64_t room;
	bool opened;
	char why[TW_DETAIL_MAX];
	tw_status_t st = tw__ring_open_tx(r, TW_RING_CONSUMER, &tx, &room, &opened, why, sizeof(why));
	if (st != TW_OK) {
		tw__detail(detail, detail_len, "%s: %s", who, why); /* the ring's own words */
		return st;
	}
	if (!opened)
		return st;
	tw_ring_span sp[2];
	if (!rd->length_done) { /* the length is read whole, whatever the budget */
		if (room < 4) {
			tw__ring_cancel(&tx);
			return TW_OK;
		}
		uint8_t h[4];
		int n = tw__ring_claim(&tx, 4, sp);
		tw__ring_get(sp, n, h);
		uint64_t len = (uint64_t)h[0] | (uint64_t)h[1] << 8 | (uint64_t)h[2] << 16 |
		               (uint64_t)h[3] << 24;
		if (!rd->alloc && len != rd->len) {
			tw__ring_cancel(&tx);
			tw__detail(detail, detail_len,
			           "%s: expected a frame of %llu bytes, the peer sent one of %llu", who,
			           (unsigned long long)rd->len, (unsigned long long)len);
			return TW_ERR_PROTO;
		}
		if (rd->alloc && (len > rd->max_len || len > r->capacity)) {
			tw__ring_cancel(&tx);
			tw__detail(detail, detail_len,
			           "%s: a packet frame of %llu bytes exceeds the limit of %llu bytes "
			           "(spec %s)",
			           who, (unsigned long long)len,
			           (unsigned long long)(rd->max_len < r->capacity ? rd->max_len
			                                                          : r->capacity),
			           len > r->capacity ? "2.3.3.b" : "5.3");
			return TW_ERR_PROTO;
		}
		if (rd->alloc) {
			rd->len = len;
			if (len) {
				rd->buf = tw__malloc((size_t)len);
				if (!rd->buf) {
					tw__ring_cancel(&tx);
					tw__detail(detail, detail_len, "%s: out of memory for a %llu-byte packet",
					           who, (unsigned long long)len);
					return TW_ERR_NOMEM;
				}
			}
		}
		rd->length_done = true;
		room -= 4;
	}
	if (budget && room > budget)
		room = budget;
	uint64_t body = rd->len - rd->done;
	if (body > room)
		body = room;
	if (body) {
		int n = tw__ring_claim(&tx, body, sp);
		tw__ring_get(sp, n, rd->buf + rd->done);
		rd->done += body;
	}
	*moved_out = tx.size;
	tw__ring_commit(&tx);
	return TW_OK;
}

void *tw__ring_reader_take(tw_ring_reader *rd)
{
	void *b = rd->buf;
	rd->buf = NULL;
	return b;
}

void tw__ring_reader_drop(tw_ring_reader *rd)
{
	if (rd->alloc)
		tw__free(rd->buf);
	rd->buf = NULL;
}
