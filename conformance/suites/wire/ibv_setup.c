/*
 * ibv_setup.c - spec/wire.md 2.4.1 from a hostile peer: the harness connects
 * to the IUT's ibv listener as a raw TCP client and sends a set-up record
 * with one thing wrong (a QP number of 0 or wider than 24 bits, an MTU enum
 * outside 1..5, bytes after the record), or a short one, or none at all.
 *
 * A conforming IUT closes that connection within a few seconds (a protocol
 * error, 2.4.1.b; the end, 2.4.1.c), keeps its process and its listener,
 * and then serves a well-formed pipe over ibv from a second adapter of the
 * same implementation: one message each way, every byte checked, both
 * adapters ending cleanly. Needs a verbs device (simverbs under
 * simverbs-run, or rxe or an HCA): the IUT must listen on ibv.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "case.h"
#include "hostile.h"
#include "rawpeer.h"
#include "session.h"
#include "suites.h"

typedef enum ibv_bad {
	IBV_BAD_QPN_ZERO,    /* QP number 0 */
	IBV_BAD_QPN_WIDE,    /* QP number wider than 24 bits */
	IBV_BAD_MTU,         /* MTU enum 9 */
	IBV_BAD_TRAILING,    /* a well-formed record, then 8 more bytes */
	IBV_BAD_SHORT_CLOSE, /* 20 bytes, then close */
	IBV_BAD_SILENT,      /* connect and close */
	IBV_GOOD,            /* nothing wrong (the fuzzer's start) */
	IBV_FUZZ = 100,      /* + seed: a well-formed record mutated at random */
} ibv_bad;

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* A record as a RoCE peer on 127.0.0.1 would send it, with one field
 * changed by `kind`. The inbox address and rkey point nowhere: the IUT must
 * not get as far as writing to them. */
static size_t build(ibv_bad kind, uint8_t *rec, size_t cap)
{
	memset(rec, 0, cap);
	rec[18] = rec[19] = 0xff; /* GID ::ffff:127.0.0.1 at offset 8 */
	rec[20] = 127, rec[23] = 1;
	put32(rec + 24, kind == IBV_BAD_QPN_ZERO ? 0 : kind == IBV_BAD_QPN_WIDE ? 0x1234567 : 0x4242);
	put32(rec + 28, kind == IBV_BAD_MTU ? 9 : 5);
	put32(rec + 32, 1u << 30);
	put32(rec + 40, 0x10000000);
	put32(rec + 48, 0x77);
	if (kind == IBV_BAD_TRAILING)
		return 56 + 8;
	if (kind == IBV_BAD_SHORT_CLOSE)
		return 20;
	return 56;
}

/* A fuzzed record for seed: a well-formed one, then one to three of: bits
 * flipped in random bytes, a field (LID, GID, QP number, MTU, max_msg_sz,
 * inbox address or rkey) set to 0, all ones or a random value, the record
 * cut short, or random bytes after it. Returns the length to send; *close_early
 * when the sender should close right after (a short record). */
static size_t fuzz_build(unsigned seed, uint8_t *rec, size_t cap, bool *close_early)
{
	static const uint8_t field_off[] = { 0, 8, 16, 24, 28, 32, 40, 44, 48 };
	uint64_t x = twc_hostile_seed(UINT64_C(0x9e3779b97f4a7c15), seed);
	size_t n = build(IBV_GOOD, rec, cap);
	*close_early = false;
	int ops = 1 + (int)(twc_hostile_next(&x) % 3);
	for (int i = 0; i < ops; i++) {
		switch (twc_hostile_next(&x) % 4) {
		case 0: /* bit flips */
			for (int j = 0, k = 1 + (int)(twc_hostile_next(&x) % 4); j < k; j++)
				rec[twc_hostile_next(&x) % 56] ^= (uint8_t)(1u << (twc_hostile_next(&x) % 8));
			break;
		case 1: { /* one 32-bit field to an extreme */
			uint8_t off = field_off[twc_hostile_next(&x) % sizeof(field_off)];
			uint64_t v = twc_hostile_next(&x);
			uint32_t val = v % 3 == 0 ? 0 : v % 3 == 1 ? 0xffffffffu : (uint32_t)(v >> 16);
			put32(rec + off, val);
			break;
		}
		case 2: /* cut short, then close */
			n = twc_hostile_next(&x) % 56;
			*close_early = true;
			break;
		default: /* trailing bytes */
			if (!*close_early) {
				size_t extra = 1 + twc_hostile_next(&x) % (cap - 56);
				for (size_t j = 0; j < extra; j++)
					rec[56 + j] = (uint8_t)twc_hostile_next(&x);
				n = 56 + extra;
			}
			break;
		}
	}
	return n;
}

static int hostile(twc_session *s, int k, char *why, size_t len)
{
	ibv_bad kind = (ibv_bad)k;
	char err[256];
	int sock = twc_raw_connect(s->url, 3000, err, sizeof(err));
	if (sock < 0) {
		snprintf(why, len, "harness: connect to the IUT's ibv listener: %s", err);
		return -1;
	}
	if (kind == IBV_BAD_SILENT) {
		close(sock);
		return 0;
	}
	uint8_t rec[72];
	bool fuzz = k >= IBV_FUZZ, close_early = false;
	size_t n = fuzz ? fuzz_build((unsigned)(k - IBV_FUZZ), rec, sizeof(rec), &close_early)
	                : build(kind, rec, sizeof(rec));
	if (fuzz) {
		/* judged only by what follows: the process and its listener serve
		 * the good pipe; an IUT may take a record that still makes sense */
		if (n)
			(void)send(sock, rec, n, MSG_NOSIGNAL);
		if (!close_early)
			(void)twc_raw_wait_closed(sock, 1000);
		close(sock);
		return 0;
	}
	if (send(sock, rec, n, MSG_NOSIGNAL) != (ssize_t)n) {
		snprintf(why, len, "harness: sending the set-up record: %s", strerror(errno));
		close(sock);
		return -1;
	}
	int rc = 0;
	if (kind != IBV_BAD_SHORT_CLOSE && twc_raw_wait_closed(sock, 3000) != 1) {
		snprintf(why, len, "the IUT kept the connection open for 3 s after a set-up record %s",
		         kind == IBV_BAD_TRAILING ? "followed by 8 more bytes (2.4.1.c: the end)"
		                                  : "it must reject (2.4.1.b: a protocol error)");
		rc = -1;
	}
	close(sock);
	return rc;
}

static twc_outcome_t run_ibv_setup(const twc_case *c, twc_case_env *env)
{
	return twc_hostile_basic(env, "ibv", "ibv://127.0.0.1:0", hostile, (int)(intptr_t)c->arg,
	                         3 * 1024 * 1024, UINT64_C(13) << 40, "after the hostile set-up");
}

#define IBV_BAD(id_, sec_, what_, req_, kind_)                                                    \
	{.id = "wire.ibv_" id_, .suite = "wire", .section = "wire.md " sec_, .level = TWC_MUST,      \
	 .needs = "rdma", .description = "raw ibv client: " what_ "; then a good pipe over ibv",   \
	 .requirement = req_, .timeout_s = 60, .run = run_ibv_setup,                              \
	 .arg = (const void *)(intptr_t)(kind_)}

#define REQ_REJECT "(2.4.1.b) A receiver MUST reject a record whose QP number is 0 or wider "     \
	           "than 24 bits, or whose MTU enum is outside 1 to 5"
#define REQ_END "(2.4.1.c) Any readable event on the socket after the record MUST be treated as " \
	        "the end of the connection"

static const twc_case cases[] = {
	IBV_BAD("qpn_zero", "2.4.1 (2.4.1.b)", "a set-up record with QP number 0", REQ_REJECT,
	        IBV_BAD_QPN_ZERO),
	IBV_BAD("qpn_wide", "2.4.1 (2.4.1.b)", "a set-up record with QP number 0x1234567",
	        REQ_REJECT, IBV_BAD_QPN_WIDE),
	IBV_BAD("bad_mtu", "2.4.1 (2.4.1.b)", "a set-up record with MTU enum 9", REQ_REJECT,
	        IBV_BAD_MTU),
	IBV_BAD("trailing_bytes", "2.4.1 (2.4.1.c)", "a set-up record followed by 8 more bytes",
	        REQ_END, IBV_BAD_TRAILING),
	IBV_BAD("short_record", "2.4.1 (2.4.1.a)", "20 bytes of a set-up record, then close",
	        "(2.4.1.a) A receiver MUST read exactly 56 bytes for the set-up record; a listener "
	        "MUST keep accepting after any error on one accepted connection (3.3.f)",
	        IBV_BAD_SHORT_CLOSE),
	IBV_BAD("silent_close", "2.4.1", "connect and close without a record",
	        "A listener MUST keep accepting after any error on one accepted connection (3.3.f).",
	        IBV_BAD_SILENT),
#define IBV_FUZZ_CASE(n_)                                                                        \
	IBV_BAD("fuzz_record_" #n_, "2.4.1",                                                     \
	        "a set-up record mutated at random (seed " #n_ "): bits flipped, a field at 0, "   \
	        "all ones or random, cut short or followed by bytes",                              \
	        "A receiver MUST survive any set-up record and its listener MUST serve the next "  \
	        "peer (2.4.1, 3.3.f).",                                                            \
	        IBV_FUZZ + n_)
	TWC_SEEDS_12(IBV_FUZZ_CASE),
};

const twc_case *twc_suite_wire_ibv(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
