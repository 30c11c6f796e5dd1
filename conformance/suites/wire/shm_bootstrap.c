/*
 * shm_bootstrap.c - spec/wire.md 2.3.1 and 2.3.2 from a hostile peer: the
 * harness connects to the IUT's shm listener as a raw client and sends a
 * descriptor exchange with one thing wrong (bytes, descriptor count, segment
 * sizes, a capacity the segments do not have), or none at all.
 *
 * A conforming IUT closes that connection (a protocol error, 2.3.1.b,
 * 2.3.2.a) within a few seconds, maps nothing it was not given, keeps its
 * process and its listener, and then serves a well-formed pipe over shm
 * from a second adapter of the same implementation: one message each way,
 * every byte checked, both adapters ending cleanly.
 *
 * The ring cases (2.3.1.e, 2.3.2, 2.3.3) go one step further: the harness
 * completes a well-formed exchange, maps the IUT's inbox and reactor, and
 * writes ring traffic into them by hand (the hello and a Brochure, each
 * u32le(length) + bytes, then the IUT's inbox token into its reactor):
 * well-formed once (`shm_ring_good`: the IUT must answer in the harness's
 * inbox), and mutated at random in the fuzz cases (lengths, bodies, the
 * markers and flags of the header, stray tokens, the reactor's own
 * markers). The same oracle follows: the IUT survives and serves the next
 * pipe.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "case.h"
#include "hostile.h"
#include "rawpeer.h"
#include "session.h"
#include "suites.h"

#define MiB (UINT64_C(1) << 20)

typedef enum bad_kind {
	BAD_BYTES_ONLY,     /* 8 bytes, no descriptors */
	BAD_TWO_FDS,        /* 8 bytes, 2 descriptors */
	BAD_FIVE_FDS,       /* 8 bytes, 5 descriptors */
	BAD_NINE_BYTES,     /* 9 bytes, 4 descriptors */
	BAD_TINY_SEGMENTS,  /* 4 descriptors of 16 bytes each */
	BAD_LYING_CAPACITY, /* 40-byte headers claiming 1 TiB over small data segments */
	BAD_SILENT_CLOSE,   /* connect, send nothing, close */
	RING_GOOD,          /* a good exchange, hello and Brochure; the answer read */
	RING_MISALIGNED,    /* the same after one stray byte committed into the IUT's reactor */
	RING_TRUNCATE,      /* the same, the IUT's inbox data segment truncated before the token */
	BAD_FUZZ = 100,     /* + seed: a well-formed exchange mutated at random */
	RING_FUZZ = 200,    /* + seed: a good exchange, then ring traffic mutated at random */
} bad_kind;

/* A ring's two segments: a 40-byte header announcing `claimed` bytes and
 * a data segment of `actual` bytes. */
static int ring_fds(uint64_t claimed, uint64_t actual, int out[2])
{
	out[0] = memfd_create("twc-hostile-header", MFD_CLOEXEC);
	out[1] = memfd_create("twc-hostile-data", MFD_CLOEXEC);
	if (out[0] < 0 || out[1] < 0)
		return -1;
	uint8_t h[40] = {0};
	for (int i = 0; i < 8; i++) {
		h[i] = (uint8_t)(claimed >> (8 * i));
		h[8 + i] = (uint8_t)((claimed - 1) >> (8 * i));
	}
	if (pwrite(out[0], h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    ftruncate(out[1], (off_t)actual) != 0)
		return -1;
	return 0;
}

static int send_exchange(int sock, const uint8_t *bytes, size_t n, const int *fds, int nfds)
{
	struct iovec iov = {(void *)bytes, n};
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* A fuzzed exchange for seed on sock: well-formed rings (4 and 2 MiB), then
 * one to three of: a header's capacity or mask word set to 0, all ones, a
 * random value or one off; a segment resized; the 8 bytes changed or one
 * added or removed; a descriptor dropped or one added. Sent, then the
 * connection stays 1 s and closes. 0, or -1 when the harness could not
 * build it. */
static int fuzz_exchange(int sock, unsigned seed)
{
	uint64_t x = twc_hostile_seed(UINT64_C(0xa0761d6478bd642f), seed);
	int r[2], in[2];
	if (ring_fds(4 * MiB, 4 * MiB, r) || ring_fds(2 * MiB, 2 * MiB, in))
		return -1;
	int fds[6] = {r[0], r[1], in[0], in[1], -1, -1}, nfds = 4;
	int dups[8], ndups = 0;
	uint8_t bytes[16] = {1, 0, 0, 0, 2, 0, 0, 0};
	size_t nbytes = 8;
	for (int i = 0, ops = 1 + (int)(twc_hostile_next(&x) % 3); i < ops; i++) {
		uint64_t v = twc_hostile_next(&x);
		switch (twc_hostile_next(&x) % 4) {
		case 0: { /* a header word */
			int h = twc_hostile_next(&x) % 2 ? r[0] : in[0];
			off_t at = (off_t)(8 * (twc_hostile_next(&x) % 2));
			uint64_t cur = 0;
			uint8_t w[8];
			if (pread(h, w, 8, at) == 8)
				for (int b = 0; b < 8; b++)
					cur |= (uint64_t)w[b] << (8 * b);
			uint64_t nv = v % 4 == 0 ? 0 : v % 4 == 1 ? ~UINT64_C(0) : v % 4 == 2 ? v >> 8 : cur + 1;
			for (int b = 0; b < 8; b++)
				w[b] = (uint8_t)(nv >> (8 * b));
			if (pwrite(h, w, 8, at) != 8)
				return -1;
			break;
		}
		case 1: /* a segment's size */
			if (ftruncate(fds[twc_hostile_next(&x) % 4], (off_t)(twc_hostile_next(&x) % (8 * MiB))) != 0)
				return -1;
			break;
		case 2: /* the bytes */
			if (v % 3 == 0)
				bytes[twc_hostile_next(&x) % nbytes] ^= (uint8_t)(1u << (twc_hostile_next(&x) % 8));
			else if (v % 3 == 1 && nbytes < sizeof(bytes))
				bytes[nbytes++] = (uint8_t)twc_hostile_next(&x);
			else if (nbytes > 1)
				nbytes--;
			break;
		default: /* the descriptors */
			if (v % 2 && nfds > 0)
				nfds--;
			else if (nfds < 6 && ndups < 8 && (dups[ndups] = dup(r[0])) >= 0)
				fds[nfds++] = dups[ndups++];
			break;
		}
	}
	printf("# fuzzed exchange (seed %u): %zu bytes, %d descriptors\n", seed, nbytes, nfds);
	/* the IUT may have closed already: judged by what follows */
	(void)send_exchange(sock, bytes, nbytes, fds, nfds);
	close(r[0]), close(r[1]), close(in[0]), close(in[1]);
	for (int i = 0; i < ndups; i++)
		close(dups[i]);
	(void)twc_raw_wait_closed(sock, 1000);
	return 0;
}

/* Connects to the IUT's shm listener (an abstract UNIX socket named by the
 * URL); the socket, or -1 with why. */
static int shm_connect(const char *url, char *why, size_t len)
{
	const char *name = url + strlen("shm://");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t nl = strlen(name);
	if (nl + 1 > sizeof(sa.sun_path)) {
		snprintf(why, len, "harness: shm address '%s' too long", name);
		return -1;
	}
	memcpy(sa.sun_path + 1, name, nl); /* abstract: a leading NUL */
	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa,
	                        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl)) != 0) {
		snprintf(why, len, "harness: connect to the IUT's shm listener %s: %s", url,
		         strerror(errno));
		if (sock >= 0)
			close(sock);
		return -1;
	}
	return sock;
}

/* ---- ring traffic: a raw client past the exchange ------------------------------------- */

enum { SEG_REACTOR_H, SEG_REACTOR_D, SEG_INBOX_H, SEG_INBOX_D };

typedef struct raw_shm {
	int sock;
	int mine[4];       /* our reactor's and inbox's segments (the IUT has copies) */
	uint8_t *my_inbox_h, *my_inbox_d;
	uint8_t *seg[4];   /* the IUT's, in exchange order */
	size_t seglen[4];
	uint32_t inbox_token; /* the IUT's, from its 8 bytes */
	int theirs[4];        /* the IUT's segments' descriptors, kept open */
} raw_shm;

#define OFF_CFLAG 16
#define OFF_PFLAG 17
#define OFF_TAIL 24
#define OFF_HEAD 32

static uint64_t marker(const uint8_t *h, int off)
{
	return __atomic_load_n((const uint64_t *)(const void *)(h + off), __ATOMIC_ACQUIRE);
}

static void set_marker(uint8_t *h, int off, uint64_t v)
{
	__atomic_store_n((uint64_t *)(void *)(h + off), v, __ATOMIC_RELEASE);
}

static void *map_fd(int fd, size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void raw_shm_close(raw_shm *p)
{
	if (p->sock >= 0)
		close(p->sock);
	for (int i = 0; i < 4; i++) {
		if (p->mine[i] >= 0)
			close(p->mine[i]);
		if (p->theirs[i] >= 0)
			close(p->theirs[i]);
		if (p->seg[i])
			munmap(p->seg[i], p->seglen[i]);
	}
	if (p->my_inbox_h)
		munmap(p->my_inbox_h, 40);
	if (p->my_inbox_d)
		munmap(p->my_inbox_d, 2 * MiB);
}

/* Receives the IUT's half of the exchange within 3 s and maps its four
 * segments, checking their sizes (2.3.1.a, 2.3.2.a): 0, or -1 with why. */
static int recv_exchange(raw_shm *p, char *why, size_t len)
{
	struct pollfd pf = {.fd = p->sock, .events = POLLIN};
	if (poll(&pf, 1, 3000) != 1) {
		snprintf(why, len, "the IUT sent no descriptor exchange within 3 s (2.3.1.a)");
		return -1;
	}
	uint8_t b[16];
	struct iovec iov = {b, sizeof(b)};
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
	                    .msg_controllen = sizeof(u.buf)};
	ssize_t n = recvmsg(p->sock, &mh, MSG_CMSG_CLOEXEC);
	int fds[8], nfds = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int) && nfds < 8; i++)
				memcpy(&fds[nfds++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	int rc = 0;
	if (n != 8 || nfds != 4) {
		snprintf(why, len, "the IUT's exchange is %zd bytes and %d descriptors, not 8 and 4 "
		                   "(2.3.1.a)", n, nfds);
		rc = -1;
	}
	static const size_t want[4] = {40, 4 * MiB, 40, 2 * MiB};
	for (int i = 0; i < 4 && rc == 0; i++) {
		struct stat st;
		if (fstat(fds[i], &st) != 0 || (size_t)st.st_size != want[i]) {
			snprintf(why, len, "the IUT's descriptor %d is a file of %lld bytes, not %zu "
			                   "(2.3.2.a)", i, (long long)st.st_size, want[i]);
			rc = -1;
		} else if (!(p->seg[i] = map_fd(fds[i], want[i]))) {
			snprintf(why, len, "harness: mmap of the IUT's segment %d: %s", i, strerror(errno));
			rc = -1;
		} else {
			p->seglen[i] = want[i];
		}
	}
	for (int i = 0; i < nfds; i++) {
		if (i < 4 && rc == 0)
			p->theirs[i] = fds[i];
		else
			close(fds[i]);
	}
	p->inbox_token = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	                 (uint32_t)b[3] << 24;
	return rc;
}

/* Connects, sends a well-formed exchange (our reactor of 4 MiB, our inbox
 * of 2 MiB, tokens 1 and 2) and receives the IUT's. */
static int raw_shm_open(raw_shm *p, const char *url, char *why, size_t len)
{
	*p = (raw_shm){.sock = -1, .mine = {-1, -1, -1, -1}, .theirs = {-1, -1, -1, -1}};
	if ((p->sock = shm_connect(url, why, len)) < 0)
		return -1;
	if (ring_fds(4 * MiB, 4 * MiB, p->mine) || ring_fds(2 * MiB, 2 * MiB, p->mine + 2) ||
	    !(p->my_inbox_h = map_fd(p->mine[2], 40)) ||
	    !(p->my_inbox_d = map_fd(p->mine[3], 2 * MiB))) {
		snprintf(why, len, "harness: making our rings: %s", strerror(errno));
		return -1;
	}
	static const uint8_t tokens[8] = {1, 0, 0, 0, 2, 0, 0, 0};
	if (send_exchange(p->sock, tokens, 8, p->mine, 4) != 0) {
		snprintf(why, len, "harness: sending the exchange: %s", strerror(errno));
		return -1;
	}
	return recv_exchange(p, why, len);
}

/* Copies n bytes into the IUT's inbox at stream position `at`. */
static void inbox_put(raw_shm *p, uint64_t at, const uint8_t *b, size_t n)
{
	uint64_t mask = p->seglen[SEG_INBOX_D] - 1;
	for (size_t i = 0; i < n; i++)
		p->seg[SEG_INBOX_D][(at + i) & mask] = b[i];
}

/* Writes a u32le token into the IUT's reactor as one more producer would:
 * its producer flag taken (bounded: 1 s), room checked, head advanced,
 * then a futex wake on the head word (how tensorwire sleeps; stock spins).
 * false when the flag stayed taken or the ring is full or inconsistent. */
static bool reactor_token(raw_shm *p, uint32_t token)
{
	uint8_t *h = p->seg[SEG_REACTOR_H], *d = p->seg[SEG_REACTOR_D];
	uint64_t cap = p->seglen[SEG_REACTOR_D];
	bool got = false;
	for (int i = 0; i < 1000 && !(got = !__atomic_exchange_n(h + OFF_PFLAG, 1, __ATOMIC_ACQ_REL));
	     i++)
		usleep(1000);
	if (!got)
		return false;
	uint64_t head = marker(h, OFF_HEAD), tail = marker(h, OFF_TAIL);
	bool room = head - tail <= cap - 4;
	if (room) {
		for (int i = 0; i < 4; i++)
			d[(head + (uint64_t)i) & (cap - 1)] = (uint8_t)(token >> (8 * i));
		set_marker(h, OFF_HEAD, head + 4);
	}
	__atomic_store_n(h + OFF_PFLAG, 0, __ATOMIC_RELEASE);
	(void)syscall(SYS_futex, h + OFF_HEAD, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
	return room;
}

/* Appends one frame (u32le length + body) to a stream; its length word's
 * offset goes to *at. */
static size_t put_frame(uint8_t *st, size_t n, const uint8_t *body, size_t bl, size_t *at)
{
	*at = n;
	for (int i = 0; i < 4; i++)
		st[n + (size_t)i] = (uint8_t)(bl >> (8 * i));
	memcpy(st + n + 4, body, bl);
	return n + 4 + bl;
}

/* The base traffic: hello, then a Brochure offering shm (this host's
 * domain descriptor, spec/wire.md 6) and basic. */
static size_t base_stream(uint8_t *st, size_t cap, size_t at[2])
{
	char boot[64], net[64], dom[160];
	if (!twc_raw_boot_id(boot, sizeof(boot)) || !twc_raw_ns_id("net", net, sizeof(net)))
		return 0;
	snprintf(dom, sizeof(dom), "shm:%s_%s", boot, net);
	uint8_t hello[64], br[256];
	size_t hl = twc_raw_hello("twc-hostile-ring", hello, sizeof(hello));
	size_t bl = twc_raw_brochure("shm", dom, br, sizeof(br));
	if (!hl || !bl || 8 + hl + bl > cap)
		return 0;
	size_t n = put_frame(st, 0, hello, hl, &at[0]);
	return put_frame(st, n, br, bl, &at[1]);
}

/* Reads one frame from our own inbox within timeout_ms (the IUT is its
 * producer): its length, or -1 with why. */
static long inbox_take(raw_shm *p, uint8_t *buf, size_t cap, int timeout_ms, char *why,
                       size_t len)
{
	uint8_t *h = p->my_inbox_h, *d = p->my_inbox_d;
	uint64_t mask = 2 * MiB - 1, tail = marker(h, OFF_TAIL), flen = 0;
	for (int waited = 0;; waited++) {
		uint64_t used = marker(h, OFF_HEAD) - tail;
		if (used > 2 * MiB) {
			snprintf(why, len, "the IUT's markers in our inbox are %llu bytes apart, more "
			                   "than its capacity (2.3.2)", (unsigned long long)used);
			return -1;
		}
		if (used >= 4) {
			flen = 0;
			for (int i = 0; i < 4; i++)
				flen |= (uint64_t)d[(tail + (uint64_t)i) & mask] << (8 * i);
			if (flen > cap) {
				snprintf(why, len, "the IUT's first frame is %llu bytes, more than a "
				                   "BrochureAnswer here (%zu)", (unsigned long long)flen, cap);
				return -1;
			}
			if (used >= 4 + flen)
				break;
		}
		if (waited >= timeout_ms) {
			snprintf(why, len, "no complete frame from the IUT in our inbox within %d ms "
			                   "(%llu bytes there)", timeout_ms, (unsigned long long)used);
			return -1;
		}
		usleep(1000);
	}
	for (uint64_t i = 0; i < flen; i++)
		buf[i] = d[(tail + 4 + i) & mask];
	set_marker(h, OFF_TAIL, tail + 4 + flen);
	return (long)flen;
}

/* Mutates the base stream for seed: one to three of a frame's length word
 * set to 0, all ones, the ring's capacity, one more or less than its body,
 * or random; bits flipped; the stream cut short; a random frame added; the
 * stream started near the end of the ring (wrapping); the markers made
 * inconsistent after the write; a flag left taken; stray tokens; the
 * reactor's own header harmed (its markers, a flag left taken, byte 18
 * set). Then written, the token sent, and the
 * connection kept 1 s. 0, or -1 with why (harness only). */
static int ring_fuzz(raw_shm *p, unsigned seed, char *why, size_t len)
{
	uint64_t x = twc_hostile_seed(UINT64_C(0x9e3779b97f4a7c15), seed);
	uint8_t st[1024];
	size_t at[3];
	size_t n = base_stream(st, sizeof(st), at);
	if (!n) {
		snprintf(why, len, "harness: could not build the hello and Brochure");
		return -1;
	}
	int nframes = 2;
	uint64_t cap = p->seglen[SEG_INBOX_D];
	uint8_t *ih = p->seg[SEG_INBOX_H];
	uint64_t start = marker(ih, OFF_HEAD), jump = 0;
	int behind = 0, stray = 0;
	bool cflag = false, pflag = false;
	unsigned reactor_harm = 0;
	char ops[256] = "";
	for (int i = 0, nops = 1 + (int)(twc_hostile_next(&x) % 3); i < nops; i++) {
		uint64_t v = twc_hostile_next(&x);
		size_t o = strlen(ops);
		const char *sep = o ? ", " : " ";
		switch (twc_hostile_next(&x) % 9) {
		case 0: { /* a length word */
			size_t f = at[twc_hostile_next(&x) % (uint64_t)nframes];
			uint32_t cur = (uint32_t)st[f] | (uint32_t)st[f + 1] << 8 |
			               (uint32_t)st[f + 2] << 16 | (uint32_t)st[f + 3] << 24;
			static const char *const names[] = {"0", "all ones", "capacity", "capacity-3",
			                                    "capacity+1", "one more", "one less", "random"};
			uint32_t vals[] = {0, UINT32_MAX, (uint32_t)cap, (uint32_t)cap - 3,
			                   (uint32_t)cap + 1, cur + 1, cur - 1, (uint32_t)(v >> 16)};
			int w = (int)(v % 8);
			for (int b = 0; b < 4; b++)
				st[f + (size_t)b] = (uint8_t)(vals[w] >> (8 * b));
			snprintf(ops + o, sizeof(ops) - o, "%slength@%zu=%s", sep, f, names[w]);
			break;
		}
		case 1: /* bits */
			for (int j = 0, k = 1 + (int)(v % 3); j < k; j++)
				st[twc_hostile_next(&x) % n] ^= (uint8_t)(1u << (twc_hostile_next(&x) % 8));
			snprintf(ops + o, sizeof(ops) - o, "%sbits", sep);
			break;
		case 2: /* cut short */
			n -= 1 + v % (n - 1);
			snprintf(ops + o, sizeof(ops) - o, "%scut to %zu", sep, n);
			break;
		case 3: { /* a random frame */
			uint8_t body[64];
			size_t bl = v % sizeof(body);
			for (size_t j = 0; j < bl; j++)
				body[j] = (uint8_t)twc_hostile_next(&x);
			if (n + 4 + bl <= sizeof(st) && nframes < 3)
				n = put_frame(st, n, body, bl, &at[nframes++]);
			snprintf(ops + o, sizeof(ops) - o, "%sframe of %zu random bytes", sep, bl);
			break;
		}
		case 4: /* wrap: start near the end of the ring */
			start = (start | (cap - 1)) + 1 - 1 - v % 7;
			snprintf(ops + o, sizeof(ops) - o, "%sstart at %llu", sep,
			         (unsigned long long)start);
			break;
		case 5: /* inconsistent markers after the write */
			if (v % 2)
				jump = cap + 1 + (twc_hostile_next(&x) % cap);
			else
				behind = 1 + (int)(twc_hostile_next(&x) % 16);
			snprintf(ops + o, sizeof(ops) - o, "%sthe inbox's head %s", sep,
			         v % 2 ? "beyond the capacity" : "behind the tail");
			break;
		case 6: /* a flag left taken */
			if (v % 2)
				cflag = true;
			else
				pflag = true;
			snprintf(ops + o, sizeof(ops) - o, "%sthe inbox's %s flag taken", sep,
			         v % 2 ? "consumer" : "producer");
			break;
		case 7: /* stray tokens */
			stray = 1 + (int)(v % 32);
			snprintf(ops + o, sizeof(ops) - o, "%s%d stray tokens", sep, stray);
			break;
		default: { /* the reactor's own header: every peer's to write */
			static const char *const what[] = {"head beyond its capacity", "consumer flag taken",
			                                   "producer flag taken", "polling byte set"};
			reactor_harm |= 1u << (v % 4);
			snprintf(ops + o, sizeof(ops) - o, "%sthe reactor's %s", sep, what[v % 4]);
			break;
		}
		}
	}
	printf("# ring traffic (seed %u): %zu bytes in %d frames;%s\n", seed, n, nframes, ops);
	fflush(stdout);
	if (start != marker(ih, OFF_HEAD)) {
		set_marker(ih, OFF_TAIL, start);
		set_marker(ih, OFF_HEAD, start);
	}
	if (cflag)
		__atomic_store_n(ih + OFF_CFLAG, 1, __ATOMIC_RELEASE);
	if (pflag)
		__atomic_store_n(ih + OFF_PFLAG, 1, __ATOMIC_RELEASE);
	inbox_put(p, start, st, n);
	uint64_t head = start + n;
	if (jump)
		head = marker(ih, OFF_TAIL) + jump;
	else if (behind)
		head = marker(ih, OFF_TAIL) - (uint64_t)behind;
	set_marker(ih, OFF_HEAD, head);
	for (int i = 0; i < stray; i++)
		(void)reactor_token(p, (uint32_t)twc_hostile_next(&x));
	uint8_t *rh = p->seg[SEG_REACTOR_H];
	if (reactor_harm & 1)
		set_marker(rh, OFF_HEAD, marker(rh, OFF_TAIL) + p->seglen[SEG_REACTOR_D] + 8);
	if (reactor_harm & 2)
		__atomic_store_n(rh + OFF_CFLAG, 1, __ATOMIC_RELEASE);
	if (reactor_harm & 4) /* then our own token waits for it (reactor_token: 1 s) */
		__atomic_store_n(rh + OFF_PFLAG, 1, __ATOMIC_RELEASE);
	if (reactor_harm & 8) /* byte 18: tensorwire's "polling" mark (spec 2.3.1.e) */
		__atomic_store_n(rh + 18, 1, __ATOMIC_RELEASE);
	(void)reactor_token(p, p->inbox_token);
	(void)twc_raw_wait_closed(p->sock, 1000);
	return 0;
}

/* The ring cases: a good exchange, then the traffic. */
static int ring_traffic(const char *url, int k, char *why, size_t len)
{
	raw_shm p;
	int rc = raw_shm_open(&p, url, why, len);
	if (rc == 0 && k == RING_MISALIGNED) {
		/* one byte, not a whole token: every token after it would be read
		 * shifted unless the IUT notices (2.3.2.d) */
		uint8_t *h = p.seg[SEG_REACTOR_H], *d = p.seg[SEG_REACTOR_D];
		uint64_t head = marker(h, OFF_HEAD);
		d[head & (p.seglen[SEG_REACTOR_D] - 1)] = 0x5a;
		set_marker(h, OFF_HEAD, head + 1);
	}
	if (rc == 0 && k >= RING_FUZZ) {
		rc = ring_fuzz(&p, (unsigned)(k - RING_FUZZ), why, len);
	} else if (rc == 0) {
		uint8_t st[1024], ans[4096];
		size_t at[2], n = base_stream(st, sizeof(st), at);
		if (!n) {
			snprintf(why, len, "harness: could not build the hello and Brochure");
			rc = -1;
		} else {
			uint64_t head = marker(p.seg[SEG_INBOX_H], OFF_HEAD);
			inbox_put(&p, head, st, n);
			set_marker(p.seg[SEG_INBOX_H], OFF_HEAD, head + n);
			if (k == RING_TRUNCATE) {
				/* the frames are in; the file under them goes (2.3.2.e) */
				if (ftruncate(p.theirs[SEG_INBOX_D], 0) == 0) {
					printf("# truncated the IUT's inbox data segment to 0 bytes\n");
				} else if (errno == EPERM) {
					printf("# the IUT's inbox data segment is sealed: %s\n", strerror(errno));
				} else {
					snprintf(why, len, "harness: ftruncate of the IUT's inbox: %s",
					         strerror(errno));
					rc = -1;
				}
				fflush(stdout);
			}
			if (rc == 0 && !reactor_token(&p, p.inbox_token)) {
				snprintf(why, len, "the IUT's reactor took no token within 1 s (its producer "
				                   "flag stayed taken, or the ring is full)");
				rc = -1;
			}
		}
		long al = rc ? -1 : inbox_take(&p, ans, sizeof(ans), 5000, why, len);
		twc_raw_answer a;
		char perr[256];
		if (rc == 0 && al < 0) {
			rc = -1;
		} else if (rc == 0 && twc_raw_parse_answer(ans, (size_t)al, &a, perr, sizeof(perr))) {
			snprintf(why, len, "the IUT's answer in our inbox is no BrochureAnswer: %s", perr);
			rc = -1;
		} else if (rc == 0 && strcmp(a.transport, "shm") != 0) {
			snprintf(why, len, "the IUT answered a Brochure offering only shm+basic with "
			                   "transport '%s'", a.transport);
			rc = -1;
		}
	}
	raw_shm_close(&p);
	return rc;
}

/* The hostile connection: its exchange, then whether the IUT dropped it. */
static int hostile(twc_session *s, int k, char *why, size_t len)
{
	bad_kind kind = (bad_kind)k;
	if (k == RING_GOOD || k == RING_MISALIGNED || k == RING_TRUNCATE || k >= RING_FUZZ) {
		if (ring_traffic(s->url, k, why, len) != 0)
			return -1;
		/* a hello and Brochure that got through made the listener accept a
		 * pipe (failed now: the harness is gone); the application takes it */
		return twc_hostile_take_strays(s, why, len);
	}
	int sock = shm_connect(s->url, why, len);
	if (sock < 0)
		return -1;
	if (k >= BAD_FUZZ) {
		int frc = fuzz_exchange(sock, (unsigned)(k - BAD_FUZZ));
		if (frc)
			snprintf(why, len, "harness: could not build the exchange: %s", strerror(errno));
		close(sock);
		return frc;
	}
	int fds[8], nfds = 0, rc = 0;
	uint8_t bytes[9] = {1, 0, 0, 0, 2, 0, 0, 0, 9};
	size_t nbytes = 8;
	int r[2] = {-1, -1}, in[2] = {-1, -1};
	switch (kind) {
	case BAD_SILENT_CLOSE:
		close(sock);
		return 0;
	case BAD_BYTES_ONLY:
		break;
	case BAD_TINY_SEGMENTS:
		for (nfds = 0; nfds < 4; nfds++) {
			fds[nfds] = memfd_create("twc-tiny", MFD_CLOEXEC);
			if (fds[nfds] < 0 || ftruncate(fds[nfds], 16) != 0)
				rc = -1;
		}
		break;
	case BAD_LYING_CAPACITY:
		rc = ring_fds(UINT64_C(1) << 40, 4 * MiB, r) | ring_fds(UINT64_C(1) << 40, 2 * MiB, in);
		fds[0] = r[0], fds[1] = r[1], fds[2] = in[0], fds[3] = in[1];
		nfds = 4;
		break;
	default: /* well-formed segments, wrong counts */
		rc = ring_fds(4 * MiB, 4 * MiB, r) | ring_fds(2 * MiB, 2 * MiB, in);
		fds[0] = r[0], fds[1] = r[1], fds[2] = in[0], fds[3] = in[1];
		nfds = kind == BAD_TWO_FDS ? 2 : 4;
		if (kind == BAD_FIVE_FDS)
			fds[nfds++] = dup(in[1]);
		if (kind == BAD_NINE_BYTES)
			nbytes = 9;
		break;
	}
	if (rc == 0)
		rc = send_exchange(sock, bytes, nbytes, fds, nfds);
	if (rc != 0)
		snprintf(why, len, "harness: could not build or send the exchange: %s", strerror(errno));
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	for (int i = nfds; i < 4 && kind != BAD_TINY_SEGMENTS; i++) {
		/* the segments a short exchange left out */
		int f = i < 2 ? r[i] : in[i - 2];
		if (f >= 0)
			close(f);
	}
	if (rc == 0 && twc_raw_wait_closed(sock, 3000) != 1) {
		snprintf(why, len, "the IUT kept the connection whose exchange was malformed open "
		                   "for 3 s (2.3.1.b: a protocol error)");
		rc = -1;
	}
	close(sock);
	return rc;
}

/* wire.requested_wrong_transport (3.8.f): over uv, a hello and a Brochure
 * offering shm only, so the answer moves the pipe to shm; then a second uv
 * connection claiming the answer's descriptor-reply id. It must be closed;
 * the registration is the shm connection's, which never comes. */
static int shape_shm(int index, twc_agent_msg *m)
{
	return twc_msg_one_tensor(m, 5, 65536 + (uint64_t)index);
}

static int wrong_transport(twc_session *s, int k, char *why, size_t len)
{
	(void)k;
	char boot[64], net[64], dom[160], err[512] = "";
	if (!twc_raw_boot_id(boot, sizeof(boot)) || !twc_raw_ns_id("net", net, sizeof(net))) {
		snprintf(why, len, "harness: no boot_id or net namespace id to build shm's domain");
		return -1;
	}
	snprintf(dom, sizeof(dom), "shm:%s_%s", boot, net);
	unsigned char hello[64], br[256], ans[4096], rq[16];
	size_t hl = twc_raw_hello("twc-wrong-transport", hello, sizeof(hello));
	size_t bl = twc_raw_brochure("shm", dom, br, sizeof(br));
	int fd = -1, wrong = -1, rc = -1;
	twc_raw_answer a;
	if (!hl || !bl) {
		snprintf(why, len, "harness: could not build the hello and Brochure");
		goto out;
	}
	if ((fd = twc_raw_connect(s->url, 2000, err, sizeof(err))) < 0 ||
	    twc_raw_send_frame(fd, hello, hl, err, sizeof(err)) ||
	    twc_raw_send_frame(fd, br, bl, err, sizeof(err))) {
		snprintf(why, len, "harness: hello and Brochure over %s: %.400s", s->url, err);
		goto out;
	}
	long n = twc_raw_recv_frame(fd, ans, sizeof(ans), 3000, err, sizeof(err));
	if (n < 0 || twc_raw_parse_answer(ans, (size_t)n, &a, err, sizeof(err))) {
		snprintf(why, len, "no BrochureAnswer to a Brochure offering shm+basic: %.400s",
		         n == -2 ? "connection closed" : err);
		goto out;
	}
	if (strcmp(a.transport, "shm") != 0 || !a.has_descriptor_id) {
		snprintf(why, len, "the IUT answered a Brochure offering only shm+basic over uv with "
		                   "transport '%s'%s", a.transport,
		         a.has_descriptor_id ? "" : " and no descriptor id");
		goto out;
	}
	size_t ql = twc_raw_requested(a.reply_id, rq, sizeof(rq));
	if (!ql || (wrong = twc_raw_connect(s->url, 2000, err, sizeof(err))) < 0 ||
	    twc_raw_send_frame(wrong, rq, ql, err, sizeof(err))) {
		snprintf(why, len, "harness: RequestedConnection over %s: %.400s", s->url, err);
		goto out;
	}
	if (twc_raw_wait_closed(wrong, 3000) != 1) {
		snprintf(why, len, "the IUT kept a uv connection open for 3 s whose "
		                   "RequestedConnection names id %llu, which its answer registered "
		                   "for a connection over shm (3.8.f)",
		         (unsigned long long)a.reply_id);
		goto out;
	}
	if (twc_raw_wait_closed(fd, 300) != 0) {
		snprintf(why, len, "the IUT closed the bootstrap connection after refusing the uv "
		                   "connection: it failed the pipe, where only that connection "
		                   "goes and the registration stays (3.8.f)");
		goto out;
	}
	rc = twc_hostile_take_strays(s, why, len);
out:
	if (wrong >= 0)
		close(wrong);
	if (fd >= 0)
		close(fd);
	return rc;
}

static twc_outcome_t run_wrong_transport(const twc_case *c, twc_case_env *env)
{
	(void)c;
	twc_hostile_run r = {
		.ctx = json_pack("{s:[{s:s,s:s,s:i},{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "transports",
		                 "name", "shm", "kind", "shm", "priority", 200, "name", "uv", "kind",
		                 "uv", "priority", 0, "channels", "name", "basic", "kind", "basic",
		                 "priority", 0),
		.urls = json_pack("[s,s]", "uv://127.0.0.1:0", "shm://"), .transport = "shm",
		.channel = "basic", .hostile = wrong_transport, .shape = shape_shm,
		.seed_base = UINT64_C(10) << 40, .after = "after the connection on the wrong transport"};
	return twc_hostile_then_good(env, &r);
}

static twc_outcome_t run_shm_bootstrap(const twc_case *c, twc_case_env *env)
{
	return twc_hostile_basic(env, "shm", "shm://", hostile, (int)(intptr_t)c->arg, 65536,
	                         UINT64_C(9) << 40, "after the hostile exchange");
}

#define SHM_BAD(id_, sec_, what_, req_, kind_)                                                    \
	{.id = "wire.shm_" id_, .suite = "wire", .section = "wire.md " sec_, .level = TWC_MUST,      \
	 .needs = "", .description = "raw shm client: " what_ "; then a good pipe over shm",       \
	 .requirement = req_, .timeout_s = 24, .run = run_shm_bootstrap,                          \
	 .arg = (const void *)(intptr_t)(kind_)}

#define REQ_B "(2.3.1.b) A receiver MUST treat a message with a different byte count or "        \
	      "descriptor count as a protocol error."
#define REQ_SIZES "(2.3.2.a) A header segment MUST be exactly 40 bytes and a data segment "       \
	          "exactly capacity bytes; a receiver MUST reject descriptors whose sizes differ."

static const twc_case cases[] = {
	SHM_BAD("bytes_only", "2.3.1 (2.3.1.b)", "8 bytes and no descriptors", REQ_B,
	        BAD_BYTES_ONLY),
	SHM_BAD("two_fds", "2.3.1 (2.3.1.b)", "8 bytes and 2 descriptors", REQ_B, BAD_TWO_FDS),
	SHM_BAD("five_fds", "2.3.1 (2.3.1.b)", "8 bytes and 5 descriptors", REQ_B, BAD_FIVE_FDS),
	SHM_BAD("nine_bytes", "2.3.1 (2.3.1.b)", "9 bytes and 4 descriptors", REQ_B, BAD_NINE_BYTES),
	SHM_BAD("tiny_segments", "2.3.2 (2.3.2.a)", "4 descriptors of 16-byte files", REQ_SIZES,
	        BAD_TINY_SEGMENTS),
	SHM_BAD("lying_capacity", "2.3.2 (2.3.2.a)",
	        "headers announcing 1 TiB rings over 4 and 2 MiB data segments", REQ_SIZES,
	        BAD_LYING_CAPACITY),
	SHM_BAD("silent_close", "2.3.1", "connect and close without an exchange",
	        "A listener MUST keep accepting after any error on one accepted connection (3.3.f).",
	        BAD_SILENT_CLOSE),
#define SHM_FUZZ(n_)                                                                              \
	SHM_BAD("fuzz_exchange_" #n_, "2.3.1, 2.3.2",                                             \
	        "a descriptor exchange mutated at random (seed " #n_ "): ring header words, "      \
	        "segment sizes, the bytes or the descriptor count",                                \
	        "A receiver MUST survive any exchange and its listener MUST serve the next peer "  \
	        "(2.3.1.b, 2.3.2.a, 3.3.f).",                                                      \
	        BAD_FUZZ + n_)
	TWC_SEEDS_12(SHM_FUZZ),
	SHM_BAD("ring_good", "2.3.1 (2.3.1.e), 2.3.3",
	        "a good exchange, then the hello and a Brochure (shm+basic) written into the "
	        "IUT's inbox by hand and its inbox token into its reactor; a BrochureAnswer "
	        "choosing shm must come back in the harness's inbox",
	        "(2.3.3.a) A sender MUST write the 4-byte length only when all 4 bytes fit in the "
	        "ring at once [...] (2.3.1.e) Wake-ups are u32le tokens written into the peer's "
	        "reactor ring after each write into its inbox.",
	        RING_GOOD),
	SHM_BAD("ring_misaligned_reactor", "2.3.2 (2.3.2.d)",
	        "a good exchange, then one stray byte committed into the IUT's reactor ring (its "
	        "head moved by 1, not by a whole token), then the hello and a Brochure as in "
	        "ring_good; the BrochureAnswer must come back within 5 s",
	        "(2.3.2.d) One hostile peer cannot stop the reactor for all the others: its "
	        "owner SHOULD notice markers that are not a whole number of tokens apart, drop "
	        "what is between them and re-check every connection.",
	        RING_MISALIGNED),
	SHM_BAD("ring_truncated_inbox", "2.3.2 (2.3.2.e)",
	        "a good exchange, the hello and a Brochure written into the IUT's inbox as in "
	        "ring_good, then the IUT's inbox data segment truncated to 0 bytes through the "
	        "descriptor the IUT sent, then its inbox token; the BrochureAnswer must come back "
	        "within 5 s",
	        "(2.3.2.e) An implementation MUST NOT let a peer take away the memory under its "
	        "own mappings: the segments it creates MUST have their size sealed where the "
	        "system allows it (a memfd), so that a truncation fails instead of ending the "
	        "owner with SIGBUS.",
	        RING_TRUNCATE),
	{.id = "wire.requested_wrong_transport", .suite = "wire", .section = "3.8 (3.8.f)",
	 .level = TWC_MUST, .needs = "",
	 .description = "over uv, a Brochure offering shm only (the answer moves the pipe to "
	                "shm), then a second uv connection whose RequestedConnection names the "
	                "answer's descriptor-reply id; then a good pipe over shm",
	 .requirement = "(3.8.f) A listener MUST close a connection whose RequestedConnection "
	                "names a registered id but comes over a transport other than the one "
	                "the pipe selected, and keep the registration.",
	 .timeout_s = 24, .run = run_wrong_transport},
#define SHM_RING_FUZZ(n_)                                                                         \
	SHM_BAD("fuzz_ring_" #n_, "2.3.1 (2.3.1.e), 2.3.2 (2.3.2.d), 2.3.3",                      \
	        "a good exchange, then ring traffic mutated at random (seed " #n_ "): frame "     \
	        "lengths, bodies, the inbox's markers and flags, stray tokens, the reactor's "    \
	        "header",                                                                         \
	        "A receiver MUST reject a packet frame whose length exceeds the ring's capacity " \
	        "(2.3.3.b), MUST ignore a token it did not hand out (2.3.1.e), MUST NOT trust "   \
	        "markers more than capacity apart (2.3.2), and its listener MUST serve the next " \
	        "peer (3.3.f).",                                                                  \
	        RING_FUZZ + n_)
	TWC_SEEDS_12(SHM_RING_FUZZ),
};

const twc_case *twc_suite_wire_shm(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
