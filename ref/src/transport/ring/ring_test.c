/*
 * ring_test.c - unit tests of the ring layer (ring.h) against spec/wire.md
 * 2.3.2 and 2.3.3:
 *
 *   ring_test layout    the header's bytes at stock's offsets, a frame's
 *                       bytes in the data segment (stock's observed inbox)
 *   ring_test framing   the length only when 4 bytes fit, objects whole,
 *                       raw bodies streamed, wrap-around, the 4 GiB and
 *                       ring-size limits, read_into/read_alloc checks
 *   ring_test hostile   a peer's broken markers, sizes and header, a flag
 *                       left taken: reported, never trusted
 *   ring_test threads   a producer and a consumer thread on one ring, 20000
 *                       frames of random sizes and budgets, checksummed
 *   ring_test process   a ring created here, passed to a child with
 *                       SCM_RIGHTS, loaded and written there, read here
 *   ring_test faults    (faulty build) memfd_create failing falls back to
 *                       /dev/shm; a full tmpfs fails at create with ENOSPC
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "platform/platform.h"
#include "transport/ring/ring.h"
#include "wire/test_util.h"

static char detail[512];

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A ring in this process's memory. */
typedef struct mem_ring {
	_Alignas(64) uint8_t header[TW_RING_HEADER_SIZE];
	uint8_t data[1 << 16];
	tw_ring r;
} mem_ring;

static void mem_ring_init(mem_ring *m, uint64_t capacity)
{
	memset(m->data, 0xee, sizeof(m->data));
	CHECK(tw__ring_init(&m->r, m->header, m->data, capacity, detail, sizeof(detail)) == TW_OK);
}

/* Writes one frame made of one piece until done (the reader must make
 * room); returns bytes moved in the first call. */
static uint64_t write_once(tw_ring *r, const void *p, uint64_t n, unsigned flags, tw_ring_writer *w,
                           tw_iov *iov)
{
	iov->base = p;
	iov->len = n;
	CHECK(tw__ring_writer_init(w, iov, 1, flags, r->capacity, "test", detail, sizeof(detail)) ==
	      TW_OK);
	uint64_t moved = 0;
	CHECK(tw__ring_write_some(r, w, 0, &moved, detail, sizeof(detail)) == TW_OK);
	return moved;
}

/* ---- layout ------------------------------------------------------------------------ */

static void test_layout(void)
{
	static mem_ring m;
	mem_ring_init(&m, 16);
	const uint8_t fresh[40] = { 16, 0, 0, 0, 0, 0, 0, 0, 15 };
	CHECK(tw_test_bytes_eq("fresh header", m.header, 40, fresh, 40));

	tw_ring_writer w;
	tw_iov iov;
	CHECK(write_once(&m.r, "hello", 5, 0, &w, &iov) == 9 && tw__ring_writer_done(&w));
	CHECK(le64(m.header + TW_RING_OFF_HEAD) == 9 && le64(m.header + TW_RING_OFF_TAIL) == 0);
	CHECK(m.header[TW_RING_OFF_PRODUCER_FLAG] == 0 && m.header[TW_RING_OFF_CONSUMER_FLAG] == 0);
	CHECK(tw_test_bytes_eq("frame", m.data, 9, (const uint8_t *)"\x05\0\0\0hello", 9));

	char out[5];
	tw_ring_reader rd;
	uint64_t moved;
	tw__ring_reader_into(&rd, out, 5);
	CHECK(tw__ring_read_some(&m.r, &rd, 0, &moved, "test", detail, sizeof(detail)) == TW_OK);
	CHECK(moved == 9 && tw__ring_reader_done(&rd) && memcmp(out, "hello", 5) == 0);
	CHECK(le64(m.header + TW_RING_OFF_TAIL) == 9);

	/* spec 2.3.3: the descriptor inbox of a uv+shm pipe begins with a
	 * RequestedConnection{0} object. */
	static mem_ring m2;
	mem_ring_init(&m2, TW_RING_INBOX_CAPACITY >> 5);
	CHECK(write_once(&m2.r, "\xb8\x01\xb9\x01\x00", 5, TW_WRITE_OBJECT, &w, &iov) == 9);
	CHECK(tw_test_bytes_eq("requested connection", m2.data, 9,
	                       (const uint8_t *)"\x05\x00\x00\x00\xb8\x01\xb9\x01\x00", 9));

	/* Tokens (reactor rings) are bare u32le, no framing. */
	bool done = false;
	uint32_t tok = 0x01020304, back = 0;
	CHECK(tw__ring_write_all(&m2.r, &tok, 4, &done, detail, sizeof(detail)) == TW_OK && done);
	CHECK(tw_test_bytes_eq("token", m2.data + 9, 4, (const uint8_t *)"\x04\x03\x02\x01", 4));
	uint8_t skip[9];
	CHECK(tw__ring_read_all(&m2.r, skip, 9, &done, detail, sizeof(detail)) == TW_OK && done);
	CHECK(tw__ring_read_all(&m2.r, &back, 4, &done, detail, sizeof(detail)) == TW_OK && done);
	CHECK(back == tok);
	CHECK(tw__ring_read_all(&m2.r, &back, 4, &done, detail, sizeof(detail)) == TW_OK && !done);
	CHECK(tw__ring_init(&m2.r, m2.header, m2.data, 24, detail, sizeof(detail)) == TW_ERR_INVAL);
}

/* ---- framing ----------------------------------------------------------------------- */

static void drain(tw_ring *r, uint64_t n)
{
	uint8_t junk[64];
	bool done;
	CHECK(n <= sizeof(junk));
	CHECK(tw__ring_read_all(r, junk, n, &done, detail, sizeof(detail)) == TW_OK && done);
}

static void test_framing(void)
{
	static mem_ring m;
	tw_ring_writer w;
	tw_iov iov;
	uint64_t moved;

	/* 2.3.3.a: with 3 bytes free the length is not written at all. */
	mem_ring_init(&m, 16);
	CHECK(write_once(&m.r, "0123456789", 9, 0, &w, &iov) == 13);
	CHECK(write_once(&m.r, "ab", 2, 0, &w, &iov) == 0 && !w.length_done);
	drain(&m.r, 1); /* 4 free now: the length goes, the body waits */
	CHECK(tw__ring_write_some(&m.r, &w, 0, &moved, detail, sizeof(detail)) == TW_OK);
	CHECK(moved == 4 && w.length_done && w.done == 0);
	/* The length wrapped around the end of the data segment. */
	CHECK(m.data[13] == 2 && m.data[14] == 0 && m.data[15] == 0 && m.data[0] == 0);
	drain(&m.r, 12);
	CHECK(tw__ring_write_some(&m.r, &w, 0, &moved, detail, sizeof(detail)) == TW_OK);
	CHECK(moved == 2 && tw__ring_writer_done(&w));

	/* 2.3.3.b: an object goes whole with its length, or not at all. */
	mem_ring_init(&m, 16);
	CHECK(write_once(&m.r, "xx", 2, 0, &w, &iov) == 6);
	CHECK(write_once(&m.r, "0123456789", 10, TW_WRITE_OBJECT, &w, &iov) == 0);
	drain(&m.r, 3); /* 13 free: still not 14 */
	CHECK(tw__ring_write_some(&m.r, &w, 0, &moved, detail, sizeof(detail)) == TW_OK && moved == 0);
	drain(&m.r, 3);
	CHECK(tw__ring_write_some(&m.r, &w, 3, &moved, detail, sizeof(detail)) == TW_OK);
	CHECK(moved == 14 && tw__ring_writer_done(&w)); /* a budget cannot split an object */
	/* ... and must fit the ring with its length. */
	CHECK(tw__ring_writer_init(&w, &iov, 1, TW_WRITE_OBJECT, 16, "shm transport", detail,
	                           sizeof(detail)) == TW_OK);
	iov.len = 13;
	CHECK(tw__ring_writer_init(&w, &iov, 1, TW_WRITE_OBJECT, 16, "shm transport", detail,
	                           sizeof(detail)) == TW_ERR_UNSUPPORTED);
	CHECKF(strstr(detail, "shm transport: a packet of 13 bytes") && strstr(detail, "2.3.3.b"),
	       "%s", detail);

	/* 2.3.3.c: a raw body streams through in pieces; a budget bounds each. */
	mem_ring_init(&m, 16);
	char big[40], got[40];
	for (int i = 0; i < 40; i++)
		big[i] = (char)('A' + i);
	CHECK(write_once(&m.r, big, 40, 0, &w, &iov) == 16);
	tw_ring_reader rd;
	tw__ring_reader_into(&rd, got, 40);
	int rounds = 0;
	while (!tw__ring_reader_done(&rd) && rounds++ < 100) {
		uint64_t before = rd.done;
		CHECK(tw__ring_read_some(&m.r, &rd, 5, &moved, "test", detail, sizeof(detail)) == TW_OK);
		CHECK(rd.done - before <= 5);
		before = w.done;
		CHECK(tw__ring_write_some(&m.r, &w, 7, &moved, detail, sizeof(detail)) == TW_OK);
		CHECK(w.done - before <= 7);
	}
	CHECK(tw__ring_reader_done(&rd) && memcmp(big, got, 40) == 0);

	/* 2.3.3.d: 4 GiB or more is refused before a byte is written (stock
	 * truncates the length). The pieces are never touched. */
	tw_iov huge[2] = { { big, (uint64_t)UINT32_MAX }, { big, 1 } };
	CHECK(tw__ring_writer_init(&w, huge, 2, 0, 16, "shm transport", detail, sizeof(detail)) ==
	      TW_ERR_UNSUPPORTED);
	CHECKF(strstr(detail, "4294967296 bytes") && strstr(detail, "32 bits"), "%s", detail);
	CHECK(tw__ring_writer_init(&w, huge, 1, 0, 16, "shm transport", detail, sizeof(detail)) ==
	      TW_OK);

	/* read_into: a length that differs is a protocol error and consumes
	 * nothing. */
	mem_ring_init(&m, 64);
	CHECK(write_once(&m.r, "abcdef", 6, 0, &w, &iov) == 10);
	tw__ring_reader_into(&rd, got, 5);
	CHECK(tw__ring_read_some(&m.r, &rd, 0, &moved, "shm transport", detail, sizeof(detail)) ==
	      TW_ERR_PROTO);
	CHECKF(strstr(detail, "expected a frame of 5 bytes, the peer sent one of 6"), "%s", detail);
	CHECK(le64(m.header + TW_RING_OFF_TAIL) == 0 && m.header[TW_RING_OFF_CONSUMER_FLAG] == 0);

	/* read_alloc: the bound, and the ring's own size (2.3.3.b). */
	tw__ring_reader_alloc(&rd, 5);
	CHECK(tw__ring_read_some(&m.r, &rd, 0, &moved, "shm transport", detail, sizeof(detail)) ==
	      TW_ERR_PROTO);
	CHECKF(strstr(detail, "6 bytes exceeds the limit of 5"), "%s", detail);
	tw__ring_reader_alloc(&rd, 100);
	CHECK(tw__ring_read_some(&m.r, &rd, 0, &moved, "shm transport", detail, sizeof(detail)) ==
	      TW_OK);
	CHECK(tw__ring_reader_done(&rd) && rd.len == 6);
	char *obj = tw__ring_reader_take(&rd);
	CHECK(obj && memcmp(obj, "abcdef", 6) == 0);
	tw__free(obj);
	mem_ring_init(&m, 64);
	put_le64(m.header + TW_RING_OFF_HEAD, 4);
	memcpy(m.data, "\x41\x00\x00\x00", 4); /* 65 > 64 */
	tw__ring_reader_alloc(&rd, 1000);
	CHECK(tw__ring_read_some(&m.r, &rd, 0, &moved, "shm transport", detail, sizeof(detail)) ==
	      TW_ERR_PROTO);
	CHECKF(strstr(detail, "2.3.3.b"), "%s", detail);

	/* An empty frame. */
	mem_ring_init(&m, 16);
	CHECK(write_once(&m.r, NULL, 0, 0, &w, &iov) == 4 && tw__ring_writer_done(&w));
	tw__ring_reader_alloc(&rd, 10);
	CHECK(tw__ring_read_some(&m.r, &rd, 0, &moved, "t", detail, sizeof(detail)) == TW_OK);
	CHECK(moved == 4 && tw__ring_reader_done(&rd) && tw__ring_reader_take(&rd) == NULL);
}

/* ---- a hostile or broken peer ------------------------------------------------------ */

static void test_hostile(void)
{
	static mem_ring m;
	tw_ring_writer w;
	tw_ring_reader rd;
	tw_iov iov;
	uint64_t moved;
	char buf[8];

	/* Markers more than the capacity apart: reported, nothing copied, the
	 * flag released. */
	mem_ring_init(&m, 16);
	put_le64(m.header + TW_RING_OFF_HEAD, 1000);
	put_le64(m.header + TW_RING_OFF_TAIL, 3);
	iov = (tw_iov){ "ab", 2 };
	CHECK(tw__ring_writer_init(&w, &iov, 1, 0, 16, "t", detail, sizeof(detail)) == TW_OK);
	CHECK(tw__ring_write_some(&m.r, &w, 0, &moved, detail, sizeof(detail)) == TW_ERR_PROTO);
	CHECKF(strstr(detail, "head 1000 and tail 3"), "%s", detail);
	tw__ring_reader_into(&rd, buf, 2);
	CHECK(tw__ring_read_some(&m.r, &rd, 0, &moved, "t", detail, sizeof(detail)) == TW_ERR_PROTO);
	CHECK(m.header[TW_RING_OFF_PRODUCER_FLAG] == 0 && m.header[TW_RING_OFF_CONSUMER_FLAG] == 0);
	/* A tail ahead of the head (the difference wraps): the same. */
	put_le64(m.header + TW_RING_OFF_HEAD, 3);
	put_le64(m.header + TW_RING_OFF_TAIL, 5);
	uint64_t used;
	CHECK(tw__ring_used(&m.r, &used, detail, sizeof(detail)) == TW_ERR_PROTO);

	/* A flag left taken (a writer that died mid-transaction): busy, never
	 * a spin and never a write. */
	mem_ring_init(&m, 16);
	m.header[TW_RING_OFF_PRODUCER_FLAG] = 1;
	CHECK(tw__ring_write_some(&m.r, &w, 0, &moved, detail, sizeof(detail)) == TW_OK && !moved);
	bool done = true;
	CHECK(tw__ring_write_all(&m.r, "abcd", 4, &done, detail, sizeof(detail)) == TW_OK && !done);
	CHECK(le64(m.header + TW_RING_OFF_HEAD) == 0);
	m.header[TW_RING_OFF_PRODUCER_FLAG] = 0;
	CHECK(tw__ring_write_all(&m.r, "abcd", 4, &done, detail, sizeof(detail)) == TW_OK && done);

	/* Capacity fields changed by the peer after load are not believed. */
	put_le64(m.header + TW_RING_OFF_CAPACITY, 1u << 30);
	put_le64(m.header + TW_RING_OFF_MASK, (1u << 30) - 1);
	tw_ring_tx tx;
	CHECK(tw__ring_begin(&m.r, TW_RING_PRODUCER, &tx));
	CHECK(tw__ring_room(&tx, &used, detail, sizeof(detail)) == TW_OK && used == 12);
	tw__ring_cancel(&tx);

	/* The owner of a ring every peer writes (a reactor) mends it instead of
	 * giving up on it. Nothing wrong: nothing done. */
	mem_ring_init(&m, 16);
	CHECK(tw__ring_write_all(&m.r, "abcd", 4, &done, detail, sizeof(detail)) == TW_OK && done);
	tw_ring_watch seen = { false, 0 };
	CHECK(tw__ring_repair(&m.r, 4, &seen) == 0 && !seen.taken && seen.head == 4);
	CHECK(le64(m.header + TW_RING_OFF_HEAD) == 4 && le64(m.header + TW_RING_OFF_TAIL) == 0);
	/* Markers apart by more than the capacity: the tail joins the head and
	 * the ring reads empty, then works again. */
	put_le64(m.header + TW_RING_OFF_HEAD, 4 + 17);
	CHECK(tw__ring_repair(&m.r, 4, NULL) == TW_RING_REPAIRED_MARKERS);
	CHECK(tw__ring_used(&m.r, &used, detail, sizeof(detail)) == TW_OK && used == 0);
	CHECK(tw__ring_write_all(&m.r, "wxyz", 4, &done, detail, sizeof(detail)) == TW_OK && done);
	CHECK(tw__ring_read_all(&m.r, buf, 4, &done, detail, sizeof(detail)) == TW_OK && done &&
	      !memcmp(buf, "wxyz", 4));
	/* Markers a stranger moved by less than a whole item (a token is 4
	 * bytes): every later item would be read shifted, so the tail joins
	 * the head too; whole items apart are left alone. */
	CHECK(tw__ring_write_all(&m.r, "abcd", 4, &done, detail, sizeof(detail)) == TW_OK && done);
	CHECK(tw__ring_repair(&m.r, 4, NULL) == 0);
	put_le64(m.header + TW_RING_OFF_HEAD, le64(m.header + TW_RING_OFF_HEAD) + 1);
	CHECK(tw__ring_repair(&m.r, 4, NULL) == TW_RING_REPAIRED_MARKERS);
	CHECK(tw__ring_used(&m.r, &used, detail, sizeof(detail)) == TW_OK && used == 0);
	CHECK(tw__ring_write_all(&m.r, "wxyz", 4, &done, detail, sizeof(detail)) == TW_OK && done);
	CHECK(tw__ring_read_all(&m.r, buf, 4, &done, detail, sizeof(detail)) == TW_OK && done &&
	      !memcmp(buf, "wxyz", 4));
	/* A consumer flag a stranger left taken: released at once (the caller
	 * keeps its own consumers out). */
	m.header[TW_RING_OFF_CONSUMER_FLAG] = 1;
	CHECK(tw__ring_repair(&m.r, 4, NULL) == TW_RING_REPAIRED_CONSUMER_FLAG);
	CHECK(m.header[TW_RING_OFF_CONSUMER_FLAG] == 0);
	/* A producer flag: left alone at the first look (a producer may be at
	 * work), released when the next look still finds it taken, and left
	 * alone when the caller did not ask. */
	m.header[TW_RING_OFF_PRODUCER_FLAG] = 1;
	CHECK(tw__ring_repair(&m.r, 4, NULL) == 0 && m.header[TW_RING_OFF_PRODUCER_FLAG] == 1);
	seen = (tw_ring_watch){ false, 0 };
	CHECK(tw__ring_repair(&m.r, 4, &seen) == 0 && seen.taken);
	CHECK(m.header[TW_RING_OFF_PRODUCER_FLAG] == 1);
	CHECK(tw__ring_repair(&m.r, 4, &seen) == TW_RING_REPAIRED_PRODUCER_FLAG && !seen.taken);
	CHECK(m.header[TW_RING_OFF_PRODUCER_FLAG] == 0);
	/* taken, released in between, taken again: never two looks in a row */
	m.header[TW_RING_OFF_PRODUCER_FLAG] = 1;
	CHECK(tw__ring_repair(&m.r, 4, &seen) == 0 && seen.taken);
	m.header[TW_RING_OFF_PRODUCER_FLAG] = 0;
	CHECK(tw__ring_repair(&m.r, 4, &seen) == 0 && !seen.taken);
	/* taken at both looks, but items were written in between (the head
	 * moved): producers at work, each holding it a moment; left alone */
	m.header[TW_RING_OFF_PRODUCER_FLAG] = 1;
	CHECK(tw__ring_repair(&m.r, 4, &seen) == 0 && seen.taken);
	put_le64(m.header + TW_RING_OFF_HEAD, le64(m.header + TW_RING_OFF_HEAD) + 4);
	CHECK(tw__ring_repair(&m.r, 4, &seen) == 0 && seen.taken);
	CHECK(m.header[TW_RING_OFF_PRODUCER_FLAG] == 1);
	CHECK(tw__ring_repair(&m.r, 4, &seen) == TW_RING_REPAIRED_PRODUCER_FLAG && !seen.taken);
	CHECK(tw__ring_read_all(&m.r, buf, 4, &done, detail, sizeof(detail)) == TW_OK && done);
	m.header[TW_RING_OFF_PRODUCER_FLAG] = 0;
	CHECK(tw__ring_write_all(&m.r, "abcd", 4, &done, detail, sizeof(detail)) == TW_OK && done);
}

/* ---- two threads --------------------------------------------------------------------- */

#define FRAMES 20000

struct pc {
	tw_ring *r;
	uint64_t sum_out, sum_in;
	int errors;
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

static void *producer(void *arg)
{
	struct pc *pc = arg;
	static uint8_t buf[3000];
	char d[256];
	for (int f = 0; f < FRAMES; f++) {
		uint64_t len = mix((uint64_t)f) % sizeof(buf);
		for (uint64_t i = 0; i < len; i++) {
			buf[i] = (uint8_t)mix((uint64_t)f * 7919 + i);
			pc->sum_out += buf[i];
		}
		tw_iov iov = { buf, len };
		tw_ring_writer w;
		unsigned flags = (f % 3 == 0 && len + 4 <= pc->r->capacity) ? TW_WRITE_OBJECT : 0;
		if (tw__ring_writer_init(&w, &iov, 1, flags, pc->r->capacity, "t", d, sizeof(d)) != TW_OK)
			pc->errors++;
		while (!tw__ring_writer_done(&w)) {
			uint64_t moved;
			if (tw__ring_write_some(pc->r, &w, mix((uint64_t)f) % 700, &moved, d, sizeof(d)) !=
			    TW_OK) {
				pc->errors++;
				return NULL;
			}
			if (!moved)
				sched_yield();
		}
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct pc *pc = arg;
	char d[256];
	for (int f = 0; f < FRAMES; f++) {
		tw_ring_reader rd;
		tw__ring_reader_alloc(&rd, 3000);
		while (!tw__ring_reader_done(&rd)) {
			uint64_t moved;
			if (tw__ring_read_some(pc->r, &rd, mix((uint64_t)f + 1) % 500, &moved, "t", d,
			                       sizeof(d)) != TW_OK) {
				pc->errors++;
				return NULL;
			}
			if (!moved)
				sched_yield();
		}
		uint64_t want = mix((uint64_t)f) % 3000;
		if (rd.len != want)
			pc->errors++;
		uint8_t *b = tw__ring_reader_take(&rd);
		for (uint64_t i = 0; i < rd.len; i++) {
			pc->sum_in += b[i];
			if (b[i] != (uint8_t)mix((uint64_t)f * 7919 + i))
				pc->errors++;
		}
		tw__free(b);
	}
	return NULL;
}

static void test_threads(void)
{
	static mem_ring m;
	mem_ring_init(&m, 4096);
	struct pc pc = { &m.r, 0, 0, 0 };
	pthread_t a, b;
	CHECK(pthread_create(&a, NULL, producer, &pc) == 0);
	CHECK(pthread_create(&b, NULL, consumer, &pc) == 0);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	CHECKF(pc.errors == 0, "%d errors", pc.errors);
	CHECK(pc.sum_in == pc.sum_out && pc.sum_out > 0);
	uint64_t used = 1;
	CHECK(tw__ring_used(&m.r, &used, detail, sizeof(detail)) == TW_OK && used == 0);
}

/* ---- two processes ----------------------------------------------------------------- */

static void test_process(void)
{
	tw_ring r;
	CHECK(tw__ring_create(&r, TW_RING_INBOX_CAPACITY, "shm transport", detail, sizeof(detail)) ==
	      TW_OK);
	const uint8_t fresh[16] = { 0, 0, 0x20, 0, 0, 0, 0, 0, 0xff, 0xff, 0x1f };
	CHECK(tw_test_bytes_eq("created header", r.header, 16, fresh, 16));
	/* sealed (spec 2.3.2.e): the peer that gets these descriptors cannot
	 * shrink them under our mapping, nor grow them */
	errno = 0;
	CHECKF(ftruncate(r.header_fd, 0) == -1 && errno == EPERM, "header shrunk: %s",
	       strerror(errno));
	errno = 0;
	CHECKF(ftruncate(r.data_fd, 4096) == -1 && errno == EPERM, "data shrunk: %s", strerror(errno));
	errno = 0;
	CHECK(ftruncate(r.data_fd, 2 * TW_RING_INBOX_CAPACITY) == -1 && errno == EPERM);
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int fds[2], n;
		char b[1];
		if (tw__sys_recv_fds(sv[1], b, 1, fds, 2, &n) != 1 || n != 2)
			_exit(10);
		tw_ring peer;
		if (tw__ring_load(&peer, fds[0], fds[1], TW_RING_INBOX_CAPACITY, "t", detail,
		                  sizeof(detail)) != TW_OK)
			_exit(11);
		static uint8_t big[3 << 20];
		for (size_t i = 0; i < sizeof(big); i++)
			big[i] = (uint8_t)mix(i);
		tw_iov iov = { big, sizeof(big) };
		tw_ring_writer w;
		if (tw__ring_writer_init(&w, &iov, 1, 0, peer.capacity, "t", detail, sizeof(detail)))
			_exit(12);
		while (!tw__ring_writer_done(&w)) {
			uint64_t moved;
			if (tw__ring_write_some(&peer, &w, 0, &moved, detail, sizeof(detail)) != TW_OK)
				_exit(13);
			if (!moved)
				usleep(100);
		}
		tw__ring_unmap(&peer);
		_exit(0);
	}
	int fds[2] = { r.header_fd, r.data_fd };
	CHECK(tw__sys_send_fds(sv[0], "r", 1, fds, 2) == 1);
	static uint8_t got[3 << 20];
	tw_ring_reader rd;
	tw__ring_reader_into(&rd, got, sizeof(got));
	for (int spins = 0; !tw__ring_reader_done(&rd) && spins < 2000000; spins++) {
		uint64_t moved;
		if (tw__ring_read_some(&r, &rd, 0, &moved, "t", detail, sizeof(detail)) != TW_OK)
			break;
		if (!moved)
			usleep(100);
	}
	CHECK(tw__ring_reader_done(&rd));
	bool same = true;
	for (size_t i = 0; i < sizeof(got); i++)
		same = same && got[i] == (uint8_t)mix(i);
	CHECK(same);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(sv[0]);
	close(sv[1]);

	/* Loading checks what the peer passed (spec 2.3.2.a). */
	tw_ring bad;
	int h = tw__sys_memfd_create("t"), d = tw__sys_memfd_create("t");
	CHECK(tw__sys_ftruncate(h, 41) == 0 && tw__sys_ftruncate(d, 1 << 21) == 0);
	CHECK(tw__ring_load(&bad, h, d, TW_RING_INBOX_CAPACITY, "shm transport", detail,
	                    sizeof(detail)) == TW_ERR_PROTO);
	CHECKF(strstr(detail, "header segment is 41 bytes, not 40"), "%s", detail);
	h = tw__sys_memfd_create("t"), d = tw__sys_memfd_create("t");
	CHECK(tw__sys_ftruncate(h, 40) == 0 && tw__sys_ftruncate(d, 1 << 20) == 0);
	CHECK(tw__ring_load(&bad, h, d, TW_RING_INBOX_CAPACITY, "shm transport", detail,
	                    sizeof(detail)) == TW_ERR_PROTO);
	CHECKF(strstr(detail, "data segment is 1048576 bytes; expected 2097152"), "%s", detail);
	h = tw__sys_memfd_create("t"), d = tw__sys_memfd_create("t");
	CHECK(tw__sys_ftruncate(h, 40) == 0 && tw__sys_ftruncate(d, 1 << 21) == 0);
	/* A header of zeros: its capacity disagrees with the segment. */
	CHECK(tw__ring_load(&bad, h, d, 0, "shm transport", detail, sizeof(detail)) == TW_ERR_PROTO);
	CHECKF(strstr(detail, "capacity 0 mask 0 for a 2097152-byte"), "%s", detail);
	tw__ring_unmap(&r);
}

/* ---- faults ----------------------------------------------------------------------- */

static int child_create(const char *rule)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("TW_FAULTS", rule, 1);
		tw_ring r;
		tw_status_t st = tw__ring_create(&r, 4096, "shm transport", detail, sizeof(detail));
		printf("# %s: %d %s\n", rule, st, st == TW_OK ? "" : detail);
		fflush(stdout);
		if (st == TW_OK)
			tw__ring_unmap(&r);
		_exit(st == TW_OK ? 0 : strstr(detail, "fallocate") ? 3 : 4);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static void test_faults(void)
{
	/* memfd_create refused (seccomp, or an old kernel): /dev/shm instead. */
	CHECK(child_create("sys/memfd/eperm:1+") == 0);
	CHECK(child_create("sys/memfd/enosys:1+") == 0);
	/* A full /dev/shm fails the create, with the call named. */
	CHECK(child_create("sys/fallocate:2") == 3);
	CHECK(child_create("sys/memfd/eperm:1+,sys/tmpfile:1+") == 4);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "layout";
	if (!strcmp(what, "layout"))
		test_layout();
	else if (!strcmp(what, "framing"))
		test_framing();
	else if (!strcmp(what, "hostile"))
		test_hostile();
	else if (!strcmp(what, "threads"))
		test_threads();
	else if (!strcmp(what, "process"))
		test_process();
	else if (!strcmp(what, "faults"))
		test_faults();
	else {
		fprintf(stderr, "usage: %s layout|framing|hostile|threads|process|faults\n", argv[0]);
		return 2;
	}
	return tw_test_done(what);
}
