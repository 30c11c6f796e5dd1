/*
 * mpt_lanes.c - spec/wire.md 4.3 (4.3.b) from a hostile peer: the harness
 * is a raw client of a pipe that selects mpt with two lanes. It reads the
 * IUT's ServerHello on the channel's control connection, then connects to
 * the first lane listener it names and sends a first frame that is not a
 * ClientHello with a registered id (garbage, an id nobody handed out, a
 * ServerHello), or nothing at all.
 *
 * A conforming IUT closes that lane connection within a few seconds, keeps
 * its process, and still serves a well-formed mpt pipe from a second
 * adapter of the same implementation (one message each way, every byte
 * checked, both adapters ending cleanly).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "case.h"
#include "hostile.h"
#include "rawpeer.h"
#include "session.h"
#include "suites.h"

typedef enum lane_bad {
	LANE_GARBAGE,
	LANE_UNKNOWN_ID,
	LANE_SERVER_HELLO,
	LANE_SILENT_CLOSE,
	LANE_FUZZ = 100, /* + seed: the right ClientHello, mutated at random */
} lane_bad;

/* Sends a fuzzed first frame for lane id `id` (seed): the ClientHello, then
 * one to three of: bits flipped, bytes cut off the end, random bytes added,
 * or the frame's length prefix claiming more than comes (then the
 * connection closes). 0, or -1 with err. */
static int lane_fuzz(int fd, unsigned seed, uint64_t id, char *err, size_t errlen)
{
	uint64_t x = twc_hostile_seed(UINT64_C(0xd1b54a32d192ed03), seed);
	unsigned char b[128];
	size_t n = twc_raw_requested(id, b, 64);
	bool lie = false;
	for (int i = 0, ops = 1 + (int)(twc_hostile_next(&x) % 3); i < ops && n; i++) {
		switch (twc_hostile_next(&x) % 4) {
		case 0:
			for (int j = 0, k = 1 + (int)(twc_hostile_next(&x) % 3); j < k; j++)
				b[twc_hostile_next(&x) % n] ^= (unsigned char)(1u << (twc_hostile_next(&x) % 8));
			break;
		case 1:
			n -= 1 + twc_hostile_next(&x) % n;
			break;
		case 2:
			for (size_t j = 0, k = 1 + twc_hostile_next(&x) % 16; j < k && n < sizeof(b); j++)
				b[n++] = (unsigned char)twc_hostile_next(&x);
			break;
		default:
			lie = true;
			break;
		}
	}
	char hex[3 * sizeof(b) + 1] = "";
	for (size_t i = 0; i < n; i++)
		snprintf(hex + 3 * i, sizeof(hex) - 3 * i, "%02x ", b[i]);
	printf("# lane 0 first frame (seed %u): %zu bytes%s: %s\n", seed, n,
	       lie ? ", its prefix promising 1 KiB more, then the end" : "", n ? hex : "(empty)");
	if (!lie)
		return twc_raw_send_frame(fd, b, n, err, errlen);
	/* a uv frame prefix (u64 little-endian) that promises 1 KiB more */
	unsigned char pre[8];
	uint64_t claim = (uint64_t)n + 1024;
	for (int i = 0; i < 8; i++)
		pre[i] = (unsigned char)(claim >> (8 * i));
	if (write(fd, pre, 8) != 8 || (n && write(fd, b, n) != (ssize_t)n)) {
		snprintf(err, errlen, "%s", strerror(errno));
		return -1;
	}
	return 0;
}

static int shape_one(int index, twc_agent_msg *m)
{
	return twc_msg_one_tensor(m, 3, (UINT64_C(1) << 20) + 3 + (uint64_t)index);
}

/* The raw pipe up to the ServerHello; then the hostile lane. 0, or -1 with
 * the reason (a "harness:" prefix when the harness could not do its part). */
static int raw_part(twc_session *s, int k, char *why, size_t len)
{
	lane_bad kind = (lane_bad)k;
	const char *addr = strstr(s->url, "://") ? strstr(s->url, "://") + 3 : s->url;
	char err[512] = "";
	int fds[4] = {-1, -1, -1, -1}, rc = -1;
	unsigned char b[512];
	size_t n;
	json_int_t acc = twc_session_arm(s, s->server, json_pack("{s:s,s:s}", "cmd", "accept",
	                                                        "listener", s->lid));
	if (acc < 0) {
		snprintf(why, len, "harness: %.900s", s->reason);
		return -1;
	}
	/* main connection: hello, Brochure (uv; mpt with 2 uv lanes) */
	static const unsigned char brochure[] = {
		0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x02, 'u', 'v', 0xbd, 0x04, 'u', 'v', ':', '*',
		0xbb, 0x01, 0xbd, 0x03, 'm', 'p', 't', 0xbb, 0x01, 0xb9, 0x02, 0xbd, 0x03, 'c', 'p',
		'u', 0x00, 0xbd, 0x0b, '2', ':', 'u', 'v', ':', '*', ':', 'u', 'v', ':', '*'};
	twc_raw_answer ans;
	if ((fds[0] = twc_raw_connect(addr, 3000, err, sizeof(err))) < 0 ||
	    !(n = twc_raw_hello("mpt-raw", b, sizeof(b))) ||
	    twc_raw_send_frame(fds[0], b, n, err, sizeof(err)) ||
	    twc_raw_send_frame(fds[0], brochure, sizeof(brochure), err, sizeof(err))) {
		snprintf(why, len, "harness: %s", err);
		goto out;
	}
	long got = twc_raw_recv_frame(fds[0], b, sizeof(b), 5000, err, sizeof(err));
	if (got < 0 || twc_raw_parse_answer(b, (size_t)got, &ans, err, sizeof(err))) {
		snprintf(why, len, "no usable BrochureAnswer: %s", got == -2 ? "connection closed" : err);
		goto out;
	}
	if (!ans.has_mpt) {
		snprintf(why, len, "the BrochureAnswer does not select mpt (channels: %s)", ans.channels);
		goto out;
	}
	/* the descriptor-reply and the mpt control connections */
	uint64_t ids[2] = {ans.reply_id, ans.mpt_id};
	for (int i = 0; i < 2; i++)
		if ((fds[1 + i] = twc_raw_connect(addr, 3000, err, sizeof(err))) < 0 ||
		    !(n = twc_raw_requested(ids[i], b, sizeof(b))) ||
		    twc_raw_send_frame(fds[1 + i], b, n, err, sizeof(err))) {
			snprintf(why, len, "harness: %s", err);
			goto out;
		}
	json_t *ev = NULL;
	if (twc_session_ok_event(s, s->server, acc, "accept", &ev)) {
		snprintf(why, len, "the raw pipe was not accepted: %.900s", s->reason);
		goto out;
	}
	char rawpipe[64];
	snprintf(rawpipe, sizeof(rawpipe), "%s", json_string_value(json_object_get(ev, "pipe")) ?: "");
	json_decref(ev);
	got = twc_raw_recv_frame(fds[2], b, sizeof(b), 5000, err, sizeof(err));
	twc_raw_lane lanes[4];
	int nl = 0;
	if (got < 0 || twc_raw_parse_server_hello(b, (size_t)got, lanes, 4, &nl, err, sizeof(err)) ||
	    nl != 2) {
		snprintf(why, len, "no ServerHello with 2 lanes on the mpt control connection: %s",
		         got < 0 ? (got == -2 ? "connection closed" : err) : err);
		goto out;
	}
	printf("# ServerHello: lane 0 %s id %llu, lane 1 %s id %llu\n", lanes[0].address,
	       (unsigned long long)lanes[0].id, lanes[1].address, (unsigned long long)lanes[1].id);
	/* the hostile lane */
	if ((fds[3] = twc_raw_connect(lanes[0].address, 3000, err, sizeof(err))) < 0) {
		snprintf(why, len, "harness: lane 0 at %s: %s", lanes[0].address, err);
		goto out;
	}
	static const unsigned char garbage[] = {0xff, 0xfe, 0x00, 0x13, 0x37};
	int sent = 0;
	if (k >= LANE_FUZZ) {
		/* judged by what follows only: a mutation may leave a valid hello */
		(void)lane_fuzz(fds[3], (unsigned)(k - LANE_FUZZ), lanes[0].id, err, sizeof(err));
		(void)twc_raw_wait_closed(fds[3], 1000);
		close(fds[3]);
		fds[3] = -1;
	} else switch (kind) {
	case LANE_GARBAGE:
		sent = twc_raw_send_frame(fds[3], garbage, sizeof(garbage), err, sizeof(err));
		break;
	case LANE_UNKNOWN_ID: {
		uint64_t bogus = lanes[0].id ^ lanes[1].id ^ UINT64_C(0x5eed0000);
		n = twc_raw_requested(bogus, b, sizeof(b)); /* ClientHello's bytes */
		sent = twc_raw_send_frame(fds[3], b, n, err, sizeof(err));
		break;
	}
	case LANE_SERVER_HELLO:
		sent = twc_raw_send_frame(fds[3], b, (size_t)got, err, sizeof(err));
		break;
	case LANE_SILENT_CLOSE:
		close(fds[3]);
		fds[3] = -1;
		break;
	default:
		break;
	}
	if (sent) {
		snprintf(why, len, "harness: sending on lane 0: %s", err);
		goto out;
	}
	if (fds[3] >= 0 && !twc_raw_wait_closed(fds[3], 3000)) {
		snprintf(why, len, "lane listener %s kept a connection whose first frame is not a "
		                   "ClientHello with a registered id open for 3 s (4.3.b)",
		         lanes[0].address);
		goto out;
	}
	/* the raw pipe is done with: closed through the adapter, then its sockets */
	json_t *r = twc_session_call(s, s->server, json_pack("{s:s,s:s}", "cmd", "close", "pipe",
	                                                    rawpipe));
	if (!r) {
		snprintf(why, len, "closing the raw pipe: %.900s", s->reason);
		goto out;
	}
	json_decref(r);
	rc = 0;
out:
	for (int i = 0; i < 4; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}

static twc_outcome_t run_mpt_lane(const twc_case *c, twc_case_env *env)
{
	twc_hostile_run r = {
		.ctx = json_pack("{s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i,s:{s:i}}]}", "transports", "name",
		                 "uv", "kind", "uv", "priority", 0, "channels", "name", "mpt", "kind",
		                 "mpt", "priority", 0, "options", "lanes", 2),
		.urls = NULL, .transport = "uv", .channel = "mpt", .hostile = raw_part,
		.kind = (int)(intptr_t)c->arg, .shape = shape_one, .seed_base = UINT64_C(11) << 40,
		.after = "after the hostile lane"};
	return twc_hostile_then_good(env, &r);
}

#define LANE_REQ "(4.3.b) A lane listener MUST close a connection whose first frame is not a " \
	         "ClientHello with a registered id."
#define MPT_BAD(id_, what_, kind_)                                                                \
	{.id = "wire.mpt_lane_" id_, .suite = "wire", .section = "wire.md 4.3 (4.3.b)",              \
	 .level = TWC_MUST, .needs = "",                                                             \
	 .description = "raw client of an mpt pipe: lane 0 gets " what_ "; then a good mpt pipe",   \
	 .requirement = LANE_REQ, .timeout_s = 60, .run = run_mpt_lane,                           \
	 .arg = (const void *)(intptr_t)(kind_)}

static const twc_case cases[] = {
	MPT_BAD("garbage", "a 5-byte frame that is no packet", LANE_GARBAGE),
	MPT_BAD("unknown_id", "a ClientHello with an id nobody handed out", LANE_UNKNOWN_ID),
	MPT_BAD("server_hello", "the ServerHello itself", LANE_SERVER_HELLO),
	MPT_BAD("silent_close", "a connect and a close without a frame", LANE_SILENT_CLOSE),
#define MPT_FUZZ(n_)                                                                              \
	{.id = "wire.mpt_lane_fuzz_" #n_, .suite = "wire", .section = "wire.md 4.3 (4.3.b)",        \
	 .level = TWC_MUST, .needs = "",                                                             \
	 .description = "raw client of an mpt pipe: lane 0 gets its ClientHello mutated at "        \
	                "random (seed " #n_ "): bits flipped, cut short, bytes added, or a frame "   \
	                "prefix promising more than comes; then a good mpt pipe",                   \
	 .requirement = "A lane listener MUST survive any first frame, and the IUT MUST serve the " \
	                "next mpt pipe (4.3.b, 3.3.f).",                                            \
	 .timeout_s = 60, .run = run_mpt_lane, .arg = (const void *)(intptr_t)(LANE_FUZZ + n_)}
	TWC_SEEDS_12(MPT_FUZZ),
};

const twc_case *twc_suite_wire_mpt(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
