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
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
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
	BAD_FUZZ = 100,     /* + seed: a well-formed exchange mutated at random */
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

/* The hostile connection: its exchange, then whether the IUT dropped it. */
static int hostile(twc_session *s, int k, char *why, size_t len)
{
	bad_kind kind = (bad_kind)k;
	const char *url = s->url;
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

static int shape_one(int index, twc_agent_msg *m)
{
	return twc_msg_one_tensor(m, 5, 65536 + (uint64_t)index);
}

static twc_outcome_t run_shm_bootstrap(const twc_case *c, twc_case_env *env)
{
	twc_hostile_run r = {
		.ctx = json_pack("{s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "transports", "name", "shm",
		                 "kind", "shm", "priority", 0, "channels", "name", "basic", "kind",
		                 "basic", "priority", 0),
		.urls = json_pack("[s]", "shm://"), .transport = "shm", .channel = "basic",
		.hostile = hostile, .kind = (int)(intptr_t)c->arg, .shape = shape_one,
		.seed_base = UINT64_C(9) << 40, .after = "after the hostile exchange"};
	return twc_hostile_then_good(env, &r);
}

#define SHM_BAD(id_, sec_, what_, req_, kind_)                                                    \
	{.id = "wire.shm_" id_, .suite = "wire", .section = "wire.md " sec_, .level = TWC_MUST,      \
	 .needs = "", .description = "raw shm client: " what_ "; then a good pipe over shm",       \
	 .requirement = req_, .timeout_s = 60, .run = run_shm_bootstrap,                          \
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
	SHM_FUZZ(0), SHM_FUZZ(1), SHM_FUZZ(2), SHM_FUZZ(3), SHM_FUZZ(4), SHM_FUZZ(5),
	SHM_FUZZ(6), SHM_FUZZ(7), SHM_FUZZ(8), SHM_FUZZ(9), SHM_FUZZ(10), SHM_FUZZ(11),
};

const twc_case *twc_suite_wire_shm(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
