/*
 * rawcases.c - wire-level cases with the harness as a raw uv client of an
 * IUT's listener (see rawcases.h).
 */
#define _GNU_SOURCE
#include "rawcases.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "adapter_proc.h"
#include "agent.h"
#include "rawpeer.h"

#define MAX_FDS 8

struct tw_raw_ctx {
	tw_adapter *a;
	char url[128];        /* uv://127.0.0.1:port */
	char lid[32];
	json_int_t accept_id;
	char spipe[32];       /* the accepted pipe, if any */
	json_int_t rd_id, read_id;
	bool want_read;       /* issue read after the descriptor */
	int fds[MAX_FDS];     /* [0] bootstrap, then R and the basic channel after a handshake */
	int nfds;
	int reply_fd, basic_fd;
	tw_raw_answer ans;
	bool have_ans;
	/* tensors the raw client sends, to check the read event against */
	int nexpect;
	tw_agent_buf expect[4];
	tw_raw_obs *o;
};
typedef struct tw_raw_ctx ctx;

static char errbuf[2048];

static void notef(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notef(ctx *c, const char *fmt, ...)
{
	if (c->o->note[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->o->note, sizeof(c->o->note), fmt, ap);
	va_end(ap);
}

static void checkf(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void checkf(ctx *c, const char *fmt, ...)
{
	if (c->o->check[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->o->check, sizeof(c->o->check), fmt, ap);
	va_end(ap);
}

static int keep_fd(ctx *c, int fd)
{
	if (c->nfds == MAX_FDS) {
		close(fd);
		notef(c, "harness: too many raw connections");
		return -1;
	}
	c->fds[c->nfds++] = fd;
	return fd;
}

static int raw_open(ctx *c)
{
	int fd = tw_raw_connect(c->url, 2000, errbuf, sizeof(errbuf));
	if (fd < 0) {
		notef(c, "%.250s", errbuf);
		return -1;
	}
	return keep_fd(c, fd);
}

static int frame(ctx *c, int fd, const void *b, size_t n)
{
	if (tw_raw_send_frame(fd, b, n, errbuf, sizeof(errbuf))) {
		notef(c, "%.250s", errbuf);
		return -1;
	}
	return 0;
}

static int hello(ctx *c, int fd, const char *name)
{
	unsigned char h[64];
	return frame(c, fd, h, tw_raw_hello(name, h, sizeof(h)));
}

static int requested(ctx *c, const char *what, uint64_t id)
{
	unsigned char rq[16];
	int fd = tw_raw_connect(c->ans.address, 2000, errbuf, sizeof(errbuf));
	if (fd < 0 || frame(c, fd, rq, tw_raw_requested(id, rq, sizeof(rq)))) {
		notef(c, "%s connection: %.200s", what, errbuf);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return keep_fd(c, fd);
}

/* Brochure, BrochureAnswer, then (open_conns) the descriptor-reply and basic
 * channel connections, each with its RequestedConnection (reference §3.4-3.8). */
static int handshake(ctx *c, int fd, const unsigned char *brochure, size_t blen, bool open_conns)
{
	if (frame(c, fd, brochure, blen))
		return -1;
	unsigned char ans[4096];
	long n = tw_raw_recv_frame(fd, ans, sizeof(ans), 3000, errbuf, sizeof(errbuf));
	if (n < 0) {
		notef(c, "no BrochureAnswer: %.200s", n == -2 ? "connection closed" : errbuf);
		return -1;
	}
	if (tw_raw_parse_answer(ans, (size_t)n, &c->ans, errbuf, sizeof(errbuf))) {
		checkf(c, "%.200s", errbuf);
		return -1;
	}
	c->have_ans = true;
	if (!open_conns)
		return 0;
	if (c->ans.has_descriptor_id) {
		notef(c, "the answer changes the transport (%s); this raw client speaks uv only",
		      c->ans.transport);
		return -1;
	}
	if ((c->reply_fd = requested(c, "descriptor-reply", c->ans.reply_id)) < 0)
		return -1;
	if (c->ans.has_basic && (c->basic_fd = requested(c, "basic channel", c->ans.basic_id)) < 0)
		return -1;
	return 0;
}

static const unsigned char empty_descriptor[] = {0xb9, 0x03, 0xbd, 0x00, 0xba, 0x00, 0xba, 0x00};

/* ---- watching the IUT ---------------------------------------------------------------- */

static json_t *call(tw_adapter *a, json_t *req)
{
	return tw_adapter_call(a, req, 5000, errbuf, sizeof(errbuf));
}

static void describe_event(const json_t *ev, char *buf, size_t len)
{
	if (json_is_true(json_object_get(ev, "ok"))) {
		snprintf(buf, len, "ok");
		return;
	}
	const json_t *e = json_object_get(ev, "error");
	snprintf(buf, len, "error %s: %s", json_string_value(json_object_get(e, "kind")) ?: "?",
	         json_string_value(json_object_get(e, "text")) ?: "");
}

/* The kind of the accepted pipe's first failed operation. */
static void note_kind(ctx *c, const json_t *ev)
{
	if (c->o->pipe_kind[0] || json_is_true(json_object_get(ev, "ok")))
		return;
	snprintf(c->o->pipe_kind, sizeof(c->o->pipe_kind), "%s",
	         json_string_value(json_object_get(json_object_get(ev, "error"), "kind")) ?: "?");
}

static bool alive(ctx *c)
{
	int st;
	if (!tw_adapter_exited(c->a, &st))
		return true;
	tw_adapter_describe_status(st, c->o->process, sizeof(c->o->process));
	return false;
}

static void check_read_sums(ctx *c, const json_t *ev)
{
	const json_t *ts = json_object_get(ev, "tensors");
	for (int i = 0; i < c->nexpect; i++) {
		const json_t *t = json_array_get(ts, (size_t)i);
		char want[17];
		tw_agent_hex64(tw_agent_gen_xxh3(c->expect[i].seed, c->expect[i].len), want);
		const char *got = json_string_value(json_object_get(t, "xxh3"));
		if (!got || strcmp(got, want) != 0)
			checkf(c, "tensor %d arrived with xxh3 %s, the raw client sent %s", i,
			       got ? got : "(none)", want);
	}
}

/* Pumps the adapter for up to `ms`, reacting to the accept and read events;
 * returns early once a read has been issued when stop_at_read is set. */
static void observe(ctx *c, int ms, bool stop_at_read)
{
	long long deadline = tw_now_ms() + ms;
	while (tw_now_ms() < deadline) {
		tw_adapter_pump(20);
		if (!alive(c))
			return;
		json_t *ev;
		if (c->accept_id > 0 && !c->o->accept[0] &&
		    tw_adapter_events_seen(c->a, c->accept_id) > 0 &&
		    (ev = tw_adapter_event(c->a, c->accept_id, "accept", 0, errbuf, sizeof(errbuf)))) {
			describe_event(ev, c->o->accept, sizeof(c->o->accept));
			const char *p = json_string_value(json_object_get(ev, "pipe"));
			if (p) {
				snprintf(c->spipe, sizeof(c->spipe), "%s", p);
				json_t *r = call(c->a, json_pack("{s:s,s:s}", "cmd", "read_descriptor",
				                                 "pipe", c->spipe));
				if (r) {
					c->rd_id = json_integer_value(json_object_get(r, "id"));
					json_decref(r);
				}
			}
			json_decref(ev);
		}
		if (c->rd_id > 0 && !c->o->pipe[0] && tw_adapter_events_seen(c->a, c->rd_id) > 0 &&
		    (ev = tw_adapter_event(c->a, c->rd_id, "read_descriptor", 0, errbuf,
		                           sizeof(errbuf)))) {
			char d[200];
			describe_event(ev, d, sizeof(d));
			snprintf(c->o->pipe, sizeof(c->o->pipe), "read_descriptor: %s", d);
			note_kind(c, ev);
			if (json_is_true(json_object_get(ev, "ok")) && c->want_read) {
				json_t *r = call(c->a, json_pack("{s:s,s:s}", "cmd", "read", "pipe", c->spipe));
				if (r) {
					c->read_id = json_integer_value(json_object_get(r, "id"));
					json_decref(r);
				}
			}
			json_decref(ev);
		}
		if (c->read_id > 0 && tw_adapter_events_seen(c->a, c->read_id) > 0 &&
		    (ev = tw_adapter_event(c->a, c->read_id, "read", 0, errbuf, sizeof(errbuf)))) {
			char d[200];
			describe_event(ev, d, sizeof(d));
			size_t l = strlen(c->o->pipe);
			snprintf(c->o->pipe + l, sizeof(c->o->pipe) - l, "; read: %s", d);
			note_kind(c, ev);
			if (json_is_true(json_object_get(ev, "ok")))
				check_read_sums(c, ev);
			c->read_id = -1; /* reported */
			json_decref(ev);
		}
		if (stop_at_read && c->read_id != 0)
			return;
	}
}

/* ---- the cases -------------------------------------------------------------------------- */

static int send_close_before_hello(ctx *c)
{
	int fd = raw_open(c);
	if (fd < 0)
		return -1;
	close(fd);
	c->nfds--;
	return 0;
}

static int send_frame_only(ctx *c, const unsigned char *b, size_t n)
{
	int fd = raw_open(c);
	return fd < 0 ? -1 : frame(c, fd, b, n);
}

static int send_bad_type_byte(ctx *c)
{
	static const unsigned char b[] = {0xff, 0xff, 0xff, 0xff, 0xff};
	return send_frame_only(c, b, sizeof(b));
}

static int send_bad_variant(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0x02, 0xb9, 0x01, 0x00};
	return send_frame_only(c, b, sizeof(b));
}

static int send_empty_variant(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0xff, 0xbe};
	return send_frame_only(c, b, sizeof(b));
}

static int send_unknown_id(ctx *c)
{
	unsigned char b[16];
	return send_frame_only(c, b, tw_raw_requested(12345, b, sizeof(b)));
}

static int send_truncated_hello(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0x00, 0xb9, 0x01, 0xbd, 0x40};
	return send_frame_only(c, b, sizeof(b));
}

static int send_huge_length(ctx *c)
{
	static const unsigned char hdr[] = {0, 0, 0, 0, 0, 0, 0, 0x40}; /* 2^62 */
	int fd = raw_open(c);
	if (fd < 0)
		return -1;
	if (tw_raw_send(fd, hdr, sizeof(hdr), errbuf, sizeof(errbuf))) {
		notef(c, "%.250s", errbuf);
		return -1;
	}
	return 0;
}

static int send_silent_mid_header(ctx *c)
{
	static const unsigned char half[] = {0x09, 0x00, 0x00, 0x00}; /* 4 of 8 header bytes */
	int fd = raw_open(c);
	if (fd < 0)
		return -1;
	if (tw_raw_send(fd, half, sizeof(half), errbuf, sizeof(errbuf))) {
		notef(c, "%.250s", errbuf);
		return -1;
	}
	return 0; /* and stay connected, silent, while the listener is probed */
}

static int send_silent_mid_body(ctx *c)
{
	/* header announces 64 bytes; only the 6 of a hello follow */
	static const unsigned char b[] = {0x40, 0, 0, 0, 0, 0, 0, 0, 0xb8, 0x00, 0xb9, 0x01, 0xbd,
	                                  0x00};
	int fd = raw_open(c);
	if (fd < 0)
		return -1;
	if (tw_raw_send(fd, b, sizeof(b), errbuf, sizeof(errbuf))) {
		notef(c, "%.250s", errbuf);
		return -1;
	}
	return 0;
}

static int send_trailing_junk(ctx *c)
{
	unsigned char b[64];
	int fd = raw_open(c);
	if (fd < 0)
		return -1;
	size_t n = tw_raw_hello("junk", b, sizeof(b));
	memcpy(b + n, "\xde\xad\xbe\xef", 4);
	if (frame(c, fd, b, n + 4) ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, true))
		return -1;
	return frame(c, fd, empty_descriptor, sizeof(empty_descriptor));
}

static int send_no_common_transport(ctx *c)
{
	/* {ibv: "ibv:*"}, {basic: {cpu:0: "any"}} */
	static const unsigned char br[] = {
		0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x03, 'i', 'b', 'v', 0xbd, 0x05, 'i', 'b', 'v', ':', '*',
		0xbb, 0x01, 0xbd, 0x05, 'b', 'a', 's', 'i', 'c', 0xbb, 0x01, 0xb9, 0x02, 0xbd,
		0x03, 'c', 'p', 'u', 0x00, 0xbd, 0x03, 'a', 'n', 'y'};
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "nocommon") || frame(c, fd, br, sizeof(br)))
		return -1;
	return 0;
}

static int send_no_channels(ctx *c)
{
	/* {uv: "uv:*"}, {} */
	static const unsigned char br[] = {0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x02, 'u', 'v',
	                                   0xbd, 0x04, 'u', 'v', ':', '*', 0xbb, 0x00};
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "nochan") || handshake(c, fd, br, sizeof(br), true))
		return -1;
	return frame(c, fd, empty_descriptor, sizeof(empty_descriptor));
}

static int send_unknown_names(ctx *c)
{
	/* {uv: "uv:*", zz: "zz:*"}, {basic: {cpu:0: "any"}, yy: {cpu:0: "any"}} */
	static const unsigned char br[] = {
		0xb9, 0x02,
		0xbb, 0x02, 0xbd, 0x02, 'u', 'v', 0xbd, 0x04, 'u', 'v', ':', '*',
		0xbd, 0x02, 'z', 'z', 0xbd, 0x04, 'z', 'z', ':', '*',
		0xbb, 0x02, 0xbd, 0x05, 'b', 'a', 's', 'i', 'c', 0xbb, 0x01, 0xb9, 0x02, 0xbd, 0x03,
		'c', 'p', 'u', 0x00, 0xbd, 0x03, 'a', 'n', 'y',
		0xbd, 0x02, 'y', 'y', 0xbb, 0x01, 0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00, 0xbd,
		0x03, 'a', 'n', 'y'};
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "names") || handshake(c, fd, br, sizeof(br), true))
		return -1;
	if (strcmp(c->ans.transport, "uv") != 0)
		checkf(c, "the answer chose transport '%s', not 'uv'", c->ans.transport);
	if (strcmp(c->ans.channels, "basic") != 0)
		checkf(c, "the answer selected channels '%s', not just 'basic'", c->ans.channels);
	return frame(c, fd, empty_descriptor, sizeof(empty_descriptor));
}

static int send_reused_registration_id(ctx *c)
{
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "reuse") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, true))
		return -1;
	/* a second connection claiming the descriptor-reply id again */
	int dup = requested(c, "duplicate", c->ans.reply_id);
	if (dup < 0)
		return -1;
	if (frame(c, fd, empty_descriptor, sizeof(empty_descriptor)))
		return -1;
	if (tw_raw_wait_closed(dup, 1000) != 1)
		checkf(c, "a connection reusing registration id %llu was not closed within 1 s",
		       (unsigned long long)c->ans.reply_id);
	return 0;
}

static int send_truncated_descriptor(ctx *c)
{
	static const unsigned char d[] = {0xb9, 0x03, 0xbd, 0x01};
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "truncdesc") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, true))
		return -1;
	return frame(c, fd, d, sizeof(d));
}

static int send_huge_descriptor(ctx *c)
{
	static const unsigned char hdr[] = {0, 0, 0, 0, 0, 0, 0, 0x40}; /* 2^62 */
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "hugedesc") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, true))
		return -1;
	if (tw_raw_send(fd, hdr, sizeof(hdr), errbuf, sizeof(errbuf))) {
		notef(c, "%.250s", errbuf);
		return -1;
	}
	return 0;
}

static int send_payload_mismatch(ctx *c)
{
	/* Descriptor{"", [Payload{8, ""}], []}, then a 9-byte payload frame */
	static const unsigned char d[] = {0xb9, 0x03, 0xbd, 0x00, 0xba, 0x01, 0xb9,
	                                  0x02, 0x08, 0xbd, 0x00, 0xba, 0x00};
	c->want_read = true;
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "mismatch") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, true))
		return -1;
	return frame(c, fd, d, sizeof(d)) || frame(c, fd, "123456789", 9) ? -1 : 0;
}

/* Descriptor{"", [], [Tensor{16, cpu:0, cpu:0, ""}]} */
static const unsigned char one_tensor_descriptor[] = {
	0xb9, 0x03, 0xbd, 0x00, 0xba, 0x00, 0xba, 0x01, 0xb9, 0x04, 0x10,
	0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00,
	0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00, 0xbd, 0x00};

static int send_tensor_mismatch(ctx *c)
{
	unsigned char t[17];
	c->want_read = true;
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "tmismatch") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, true))
		return -1;
	if (c->basic_fd <= 0) {
		notef(c, "the answer selected no basic channel");
		return -1;
	}
	tw_agent_gen_fill(t, sizeof(t), 5);
	return frame(c, fd, one_tensor_descriptor, sizeof(one_tensor_descriptor)) ||
	       frame(c, c->basic_fd, t, sizeof(t)) ? -1 : 0;
}

static int send_descriptor_reply(ctx *c)
{
	/* Descriptor{"", [], [Tensor{16, cpu:0, cpu:0, ""}, Tensor{8, cpu:0, none, ""}]} */
	static const unsigned char d[] = {
		0xb9, 0x03, 0xbd, 0x00, 0xba, 0x00, 0xba, 0x02,
		0xb9, 0x04, 0x10, 0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00,
		0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00, 0xbd, 0x00,
		0xb9, 0x04, 0x08, 0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00, 0xbe, 0xbd, 0x00};
	/* DescriptorReply{[cpu:0]}: one device, for the one tensor without a target */
	static const unsigned char want[] = {0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02, 0xbd,
	                                     0x03, 'c', 'p', 'u', 0x00};
	unsigned char t0[16], t1[8], reply[256];
	c->want_read = true;
	c->nexpect = 2;
	c->expect[0] = (tw_agent_buf){.len = 16, .seed = 70};
	c->expect[1] = (tw_agent_buf){.len = 8, .seed = 71};
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "reply") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, true) ||
	    frame(c, fd, d, sizeof(d)))
		return -1;
	if (c->basic_fd <= 0) {
		notef(c, "the answer selected no basic channel");
		return -1;
	}
	/* The IUT sends its DescriptorReply once the application reads. */
	observe(c, 3000, true);
	long n = tw_raw_recv_frame(c->reply_fd, reply, sizeof(reply), 3000, errbuf, sizeof(errbuf));
	if (n < 0) {
		checkf(c, "no DescriptorReply on the descriptor-reply connection: %.150s",
		       n == -2 ? "closed" : errbuf);
		return -1;
	}
	if ((size_t)n != sizeof(want) || memcmp(reply, want, sizeof(want)) != 0) {
		char hex[3 * 64 + 1] = "";
		for (long i = 0; i < n && i < 64; i++)
			snprintf(hex + 3 * i, 4, "%02x ", reply[i]);
		checkf(c, "DescriptorReply is %s, expected b9 01 ba 01 b9 02 bd 03 63 70 75 00", hex);
	}
	tw_agent_gen_fill(t0, sizeof(t0), 70);
	tw_agent_gen_fill(t1, sizeof(t1), 71);
	return frame(c, c->basic_fd, t0, sizeof(t0)) || frame(c, c->basic_fd, t1, sizeof(t1)) ? -1
	                                                                                       : 0;
}

static int send_close_after_answer(ctx *c)
{
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "quitter") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, false))
		return -1;
	close(fd);
	c->nfds--;
	return 0;
}

/* Stays connected and silent after the answer: only a handshake timeout
 * can end the server pipe (the case asks the IUT for one, 3.8.e). */
static int send_registration_timeout(ctx *c)
{
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "dawdler") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, false))
		return -1;
	return 0;
}

/* Sections: spec/wire.md, with the numbered requirement checked. */
const tw_raw_case tw_raw_cases[] = {
	{"close_before_hello", "5.4 (5.4.a)", true,
	 "TCP connect, then close without sending anything", send_close_before_hello, NULL,
	 "listener-dies", NULL, 0, NULL},
	{"bad_type_byte", "5.2 (5.2.c)", true, "hello frame ff ff ff ff ff (no such nop type)",
	 send_bad_type_byte, NULL, "crash", "Unexpected Encoding Type", 0, NULL},
	{"bad_variant_index", "5.2 (5.2.c)", true,
	 "hello with Packet variant index 2 (b8 02 b9 01 00)", send_bad_variant, NULL, "crash",
	 "Unexpected Variant Type", 0, NULL},
	{"empty_variant", "3.3 (3.3.e)", true, "hello = the empty variant (b8 ff be)",
	 send_empty_variant, "connection-dropped", "connection-dropped", NULL, 0, NULL},
	{"unknown_registration_id", "3.8 (3.8.b)", true,
	 "RequestedConnection{12345}, an id never handed out", send_unknown_id,
	 "connection-dropped", "connection-dropped", NULL, 0, NULL},
	{"truncated_hello", "5.2 (5.2.c)", true,
	 "hello whose string length runs past the frame (b8 00 b9 01 bd 40)", send_truncated_hello,
	 NULL, "crash", "Read Limit Reached", 0, NULL},
	/* Under AddressSanitizer the allocation is refused by ASan's allocator
	 * (which aborts) before std::bad_alloc could be thrown. */
	{"huge_length_prefix", "5.3 (5.3.a), wire.md 2.2 (2.2.b, 2.2.c)", true, "uv length prefix 2^62", send_huge_length,
	 NULL, "crash",
	 "bad_alloc|AddressSanitizer: allocator is out of memory|AddressSanitizer: requested "
	 "allocation size", 0, NULL},
	{"silent_mid_header", "3.3 (3.3.f)", true,
	 "4 of the 8 bytes of a frame header, then silence (connection kept open)",
	 send_silent_mid_header, NULL, "ignored", NULL, 0, NULL},
	{"silent_mid_body", "3.3 (3.3.f)", true,
	 "a frame header announcing 64 bytes, 6 of them, then silence (connection kept open)",
	 send_silent_mid_body, NULL, "ignored", NULL, 0, NULL},
	{"trailing_junk", "1.12 (1.12.a)", true,
	 "hello followed by 4 junk bytes in the same frame, then a normal handshake and an empty "
	 "message",
	 send_trailing_junk, "descriptor-delivered", "descriptor-delivered", NULL, 0, NULL},
	{"no_common_transport", "3.5 (3.5.b)", true, "Brochure offering only ibv",
	 send_no_common_transport, NULL, "crash", "Could not find a viable transport", 0, NULL},
	{"no_channels", "3.5 (3.5.c)", true, "Brochure with no channels, then an empty message",
	 send_no_channels, "descriptor-delivered", "descriptor-delivered", NULL, 0, NULL},
	{"unknown_names", "3.5 (3.5.d)", true,
	 "Brochure with an unknown transport (zz) and channel (yy) besides uv and basic, then an "
	 "empty message: the answer must pick uv and basic only",
	 send_unknown_names, "descriptor-delivered", "descriptor-delivered", NULL, 0, NULL},
	{"reused_registration_id", "3.8 (3.8.b)", true,
	 "after a handshake, a second connection with the descriptor-reply id already used, then "
	 "an empty message on the first",
	 send_reused_registration_id, "descriptor-delivered", "descriptor-delivered", NULL, 0, NULL},
	{"truncated_descriptor", "5.2 (5.2.a)", true,
	 "after the handshake, Descriptor frame b9 03 bd 01", send_truncated_descriptor,
	 "pipe-failed", "crash", "Read Limit Reached", 0, "proto"},
	{"huge_descriptor_length", "5.3 (5.3.a), wire.md 2.2 (2.2.b)", true,
	 "after the handshake, a Descriptor frame whose length prefix says 2^62 bytes",
	 send_huge_descriptor, "pipe-failed", "crash",
	 "bad_alloc|AddressSanitizer: allocator is out of memory|AddressSanitizer: requested "
	 "allocation size", 0, "proto"},
	{"payload_length_mismatch", "5.5 (5.5.a), wire.md 3.10 (3.10.c), wire.md 2.2 (2.2.d)", true,
	 "Descriptor announcing an 8-byte payload, then a 9-byte frame", send_payload_mismatch,
	 "pipe-failed", "crash", "Expected readLength_", 0, "proto"},
	{"tensor_length_mismatch", "4.2 (4.2.a)", true,
	 "Descriptor announcing a 16-byte tensor, then a 17-byte frame on the basic channel",
	 send_tensor_mismatch, "pipe-failed", "crash", "Expected readLength_", 0, "proto"},
	{"descriptor_reply", "3.11 (3.11.a)", true,
	 "Descriptor with a tensor that has a target device and one that has none: the IUT must "
	 "answer DescriptorReply [cpu:0] on the reply connection, then receive both tensors",
	 send_descriptor_reply, "message-delivered", "message-delivered", NULL, 0, NULL},
	{"close_after_answer", "5.4 (5.4.a)", true,
	 "client closes the bootstrap connection right after the BrochureAnswer",
	 send_close_after_answer, NULL, "pipe-pending", NULL, 0, NULL},
	{"close_after_answer_noticed", "5.6 (5.6.b)", false,
	 "client closes the bootstrap connection right after the BrochureAnswer: the server pipe "
	 "should fail rather than wait forever",
	 send_close_after_answer, "pipe-failed", "pipe-pending", NULL, 0, NULL},
	{"registration_timeout", "3.8 (3.8.e)", false,
	 "hello and Brochure, then nothing: the requested connections never come (the bootstrap "
	 "connection stays open); with the IUT's handshake timeout set to 2 s the server pipe "
	 "should fail within 5 s",
	 send_registration_timeout, "pipe-failed", "pipe-pending", NULL, 2000, NULL},
};
const int tw_raw_num_cases = (int)(sizeof(tw_raw_cases) / sizeof(tw_raw_cases[0]));

const tw_raw_case *tw_raw_case_find(const char *id)
{
	for (int i = 0; i < tw_raw_num_cases; i++)
		if (!strcmp(tw_raw_cases[i].id, id))
			return &tw_raw_cases[i];
	return NULL;
}

/* ---- running one case ----------------------------------------------------------------- */

/* Does a well-formed client still get accepted? */
static void probe_listener(ctx *c, int window_ms)
{
	json_int_t id = c->accept_id;
	if (c->o->accept[0]) {
		json_t *r = tw_adapter_request(c->a, json_pack("{s:s,s:s}", "cmd", "accept",
		                                               "listener", c->lid),
		                               5000, errbuf, sizeof(errbuf));
		if (!r) {
			snprintf(c->o->listener, sizeof(c->o->listener), "no answer to accept: %.150s",
			         errbuf);
			return;
		}
		if (!json_is_true(json_object_get(r, "ok"))) {
			snprintf(c->o->listener, sizeof(c->o->listener), "dead (accept refused: %.120s)",
			         json_string_value(json_object_get(json_object_get(r, "error"), "text")) ?: "");
			json_decref(r);
			return;
		}
		id = json_integer_value(json_object_get(r, "id"));
		json_decref(r);
	}
	int fd = tw_raw_connect(c->url, 2000, errbuf, sizeof(errbuf));
	if (fd < 0) {
		snprintf(c->o->listener, sizeof(c->o->listener), "dead (%.150s)", errbuf);
		return;
	}
	unsigned char h[32];
	size_t hn = tw_raw_hello("probe", h, sizeof(h));
	if (tw_raw_send_frame(fd, h, hn, errbuf, sizeof(errbuf)) == 0)
		(void)tw_raw_send_frame(fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len,
		                        errbuf, sizeof(errbuf));
	json_t *ev = tw_adapter_event(c->a, id, "accept", window_ms, errbuf, sizeof(errbuf));
	if (!ev) {
		if (!alive(c))
			snprintf(c->o->listener, sizeof(c->o->listener),
			         "n/a (the process died on the probe)");
		else
			snprintf(c->o->listener, sizeof(c->o->listener),
			         "dead (a well-formed client was not accepted)");
	} else if (json_is_true(json_object_get(ev, "ok"))) {
		snprintf(c->o->listener, sizeof(c->o->listener),
		         "alive (a well-formed client was accepted)");
	} else {
		char d[160];
		describe_event(ev, d, sizeof(d));
		snprintf(c->o->listener, sizeof(c->o->listener), "dead (accept: %s)", d);
	}
	json_decref(ev);
	close(fd);
}

static void pick_stderr_line(const char *tail, char *out, size_t len)
{
	/* The most telling line: an exception's what() or a sanitizer's report,
	 * else the last non-empty line. */
	const char *best = NULL, *last = NULL;
	const char *p = tail;
	while (*p) {
		const char *e = strchr(p, '\n');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n > 0) {
			last = p;
			if (memmem(p, n, "ERROR: AddressSanitizer", 23) || memmem(p, n, "what()", 6))
				best = p;
			else if (!best && (memmem(p, n, "terminate called", 16) ||
			                   memmem(p, n, "Assertion", 9)))
				best = p;
		}
		p += n + (e ? 1 : 0);
	}
	const char *l = best ? best : last;
	if (!l) {
		out[0] = '\0';
		return;
	}
	snprintf(out, len, "%.*s", (int)strcspn(l, "\n"), l);
}

static void classify(const ctx *c, tw_raw_obs *o)
{
	const char *k;
	if (strcmp(o->process, "alive") != 0)
		k = "crash";
	else if (!strncmp(o->listener, "dead", 4))
		k = "listener-dies";
	else if (strstr(o->pipe, "read: ok"))
		k = "message-delivered";
	else if (strstr(o->pipe, "read_descriptor: ok") && !strstr(o->pipe, "read: error"))
		k = "descriptor-delivered";
	else if (o->pipe[0])
		k = "pipe-failed";
	else if (c->spipe[0])
		k = "pipe-pending";
	else if (o->conn_dropped)
		k = "connection-dropped";
	else
		k = "ignored";
	snprintf(o->klass, sizeof(o->klass), "%s", k);
}

int tw_raw_case_run(const char *cmd, const tw_raw_case *rc, int window_ms, tw_raw_obs *o)
{
	ctx c = {.o = o};
	memset(o, 0, sizeof(*o));
	snprintf(o->process, sizeof(o->process), "alive");
	char label[64];
	snprintf(label, sizeof(label), "iut[%s]", rc->id);
	c.a = tw_adapter_spawn(cmd, label, errbuf, sizeof(errbuf));
	if (!c.a) {
		snprintf(o->note, sizeof(o->note), "%.250s", errbuf);
		return -1;
	}
	json_t *r;
	if (!(r = call(c.a, json_pack("{s:s}", "cmd", "hello"))))
		goto err;
	json_decref(r);
	json_t *creq = json_pack("{s:s,s:s,s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "cmd", "context",
	                         "name", "server", "transports", "name", "uv", "kind", "uv",
	                         "priority", 0, "channels", "name", "basic", "kind", "basic",
	                         "priority", 0);
	if (rc->handshake_timeout_ms > 0) {
		json_object_set_new(creq, "handshake_timeout_ms",
		                    json_integer(rc->handshake_timeout_ms));
		if (window_ms < rc->handshake_timeout_ms + 3000)
			window_ms = rc->handshake_timeout_ms + 3000;
	}
	if (!(r = call(c.a, creq)))
		goto err;
	/* An adapter that cannot honour a setting says so (spec/agent.md 6.2). */
	size_t ui;
	json_t *u;
	json_array_foreach(json_object_get(r, "unhonoured"), ui, u) {
		notef(&c, "the IUT cannot honour %s: %.180s",
		      json_string_value(json_object_get(u, "name")) ?: "?",
		      json_string_value(json_object_get(u, "reason")) ?: "");
	}
	json_decref(r);
	if (!(r = call(c.a, json_pack("{s:s,s:[s]}", "cmd", "listen", "urls", "uv://127.0.0.1:0"))))
		goto err;
	snprintf(c.url, sizeof(c.url), "%s",
	         json_string_value(json_array_get(json_object_get(r, "urls"), 0)) ?: "");
	snprintf(c.lid, sizeof(c.lid), "%s", json_string_value(json_object_get(r, "listener")) ?: "");
	json_decref(r);
	if (!(r = call(c.a, json_pack("{s:s,s:s}", "cmd", "accept", "listener", c.lid))))
		goto err;
	c.accept_id = json_integer_value(json_object_get(r, "id"));
	json_decref(r);

	(void)rc->send(&c);
	observe(&c, window_ms, false);
	/* Was the raw client's first connection dropped by the server? */
	if (c.nfds > 0)
		o->conn_dropped = tw_raw_wait_closed(c.fds[0], alive(&c) ? 100 : 0) == 1;
	if (alive(&c)) {
		probe_listener(&c, window_ms);
		observe(&c, 50, false);
	}
	if (!alive(&c) && !o->listener[0])
		snprintf(o->listener, sizeof(o->listener), "n/a (process gone)");
	if (alive(&c)) {
		r = tw_adapter_request(c.a, json_pack("{s:s}", "cmd", "shutdown"), 10000, errbuf,
		                       sizeof(errbuf));
		if (!r) {
			size_t l = strlen(o->note);
			snprintf(o->note + l, sizeof(o->note) - l, "%sshutdown did not complete: %.150s",
			         l ? "; " : "", errbuf);
		}
		json_decref(r);
		if (tw_adapter_finish(c.a, 10000, errbuf, sizeof(errbuf)) != 0) {
			size_t l = strlen(o->note);
			snprintf(o->note + l, sizeof(o->note) - l, "%sexit: %.150s", l ? "; " : "",
			         errbuf);
		}
	}
	for (int i = 0; i < c.nfds; i++)
		close(c.fds[i]);
	pick_stderr_line(tw_adapter_stderr(c.a), o->stderr_line, sizeof(o->stderr_line));
	classify(&c, o);
	tw_adapter_destroy(c.a);
	return 0;
err:
	snprintf(o->note, sizeof(o->note), "setup failed: %.200s", errbuf);
	tw_adapter_destroy(c.a);
	return -1;
}

/* `want` is NULL or alternatives separated by '|'; one must occur in `line`. */
static bool stderr_matches(const char *line, const char *want)
{
	if (!want)
		return true;
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", want);
	for (char *save = NULL, *t = strtok_r(buf, "|", &save); t; t = strtok_r(NULL, "|", &save))
		if (strstr(line, t))
			return true;
	return false;
}

bool tw_raw_case_as_stock(const tw_raw_case *rc, const tw_raw_obs *o)
{
	return !strcmp(o->klass, rc->stock_class) && stderr_matches(o->stderr_line, rc->stock_stderr);
}

bool tw_raw_case_robust(const tw_raw_case *rc, const tw_raw_obs *o, char *why, size_t whylen)
{
	if (strcmp(o->process, "alive") != 0)
		snprintf(why, whylen, "the process ended (%s): %s", o->process, o->stderr_line);
	else if (strncmp(o->listener, "alive", 5) != 0)
		snprintf(why, whylen, "the listener stopped accepting: %s", o->listener);
	else if (o->check[0])
		snprintf(why, whylen, "%s", o->check);
	else if (o->note[0])
		snprintf(why, whylen, "%s", o->note);
	else if (rc->robust_class && strcmp(o->klass, rc->robust_class) != 0)
		snprintf(why, whylen, "outcome '%s', expected '%s' (accept: %s; pipe: %s)", o->klass,
		         rc->robust_class, o->accept[0] ? o->accept : "-", o->pipe[0] ? o->pipe : "-");
	else if (rc->robust_kind && o->pipe_kind[0] && strcmp(o->pipe_kind, rc->robust_kind) != 0)
		snprintf(why, whylen, "the pipe failed with kind '%s', the spec asks for '%s' (%s)",
		         o->pipe_kind, rc->robust_kind, o->pipe);
	else
		return true;
	return false;
}
