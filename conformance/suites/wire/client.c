/*
 * client.c - wire-level cases with the IUT as the client: the harness is a
 * raw uv server (harness/rawpeer.h) that the IUT's adapter connects to. It
 * reads the hello and the Brochure byte by byte, answers with a
 * BrochureAnswer of its own (well-formed, or broken on purpose), accepts the
 * requested connections, and then checks every byte of a message the IUT
 * sends, and the DescriptorReply it sends for a message the harness sends.
 *
 * Expected bytes are built here, independently of ref/src/wire, with the
 * canonical encoding of spec/wire.md §1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "case.h"
#include "suites.h"
#include "rawpeer.h"
#include "session.h"

/* ---- a small canonical encoder for expected bytes --------------------------------- */

typedef struct buf {
	unsigned char b[8192];
	size_t n;
} buf;

static void put(buf *w, const void *p, size_t n)
{
	if (w->n + n <= sizeof(w->b)) {
		memcpy(w->b + w->n, p, n);
		w->n += n;
	}
}

static void put_byte(buf *w, unsigned v)
{
	unsigned char c = (unsigned char)v;
	put(w, &c, 1);
}

static void put_uint(buf *w, uint64_t v)
{
	if (v < 0x80) {
		put_byte(w, (unsigned)v);
		return;
	}
	int width = v < (1ull << 8) ? 1 : v < (1ull << 16) ? 2 : v < (1ull << 32) ? 4 : 8;
	put_byte(w, width == 1 ? 0x80 : width == 2 ? 0x81 : width == 4 ? 0x82 : 0x83);
	for (int i = 0; i < width; i++)
		put_byte(w, (unsigned)(v >> (8 * i)) & 0xff);
}

static void put_str(buf *w, const void *s, size_t n)
{
	put_byte(w, 0xbd);
	put_uint(w, n);
	put(w, s, n);
}

static void put_cstr(buf *w, const char *s)
{
	put_str(w, s, strlen(s));
}

static void put_cpu0(buf *w)
{
	put_byte(w, 0xb9);
	put_byte(w, 0x02);
	put_cstr(w, "cpu");
	put_byte(w, 0x00);
}

static void put_gen_str(buf *w, const twc_agent_buf *b)
{
	unsigned char tmp[256];
	size_t n = b->len < sizeof(tmp) ? (size_t)b->len : sizeof(tmp);
	twc_agent_gen_fill(tmp, n, b->seed);
	put_str(w, tmp, n);
}

/* Descriptor of a message (spec/wire.md 3.2, 3.10), canonical. */
static void put_descriptor(buf *w, const twc_agent_msg *m)
{
	put_byte(w, 0xb9);
	put_byte(w, 0x03);
	put_gen_str(w, &m->metadata);
	put_byte(w, 0xba);
	put_uint(w, m->num_payloads);
	for (size_t i = 0; i < m->num_payloads; i++) {
		put_byte(w, 0xb9);
		put_byte(w, 0x02);
		put_uint(w, m->payloads[i].data.len);
		put_gen_str(w, &m->payloads[i].metadata);
	}
	put_byte(w, 0xba);
	put_uint(w, m->num_tensors);
	for (size_t i = 0; i < m->num_tensors; i++) {
		put_byte(w, 0xb9);
		put_byte(w, 0x04);
		put_uint(w, m->tensors[i].data.len);
		put_cpu0(w);
		if (m->tensors[i].has_target_device)
			put_cpu0(w);
		else
			put_byte(w, 0xbe);
		put_gen_str(w, &m->tensors[i].metadata);
	}
}

typedef enum answer_kind { ANSWER_GOOD, ANSWER_UNKNOWN_TRANSPORT, ANSWER_BAD_CHANNELS,
                           ANSWER_TRUNCATED } answer_kind;

enum { REPLY_ID = 100, BASIC_ID = 101 };

/* BrochureAnswer for uv + basic (spec/wire.md 3.6) with opaque ids 100/101. */
static void put_answer(buf *w, answer_kind k, int port)
{
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	put_byte(w, 0xb9);
	put_byte(w, 0x07);
	put_cstr(w, k == ANSWER_UNKNOWN_TRANSPORT ? "zz" : "uv");
	put_cstr(w, addr);
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_uint(w, 1);
	put_uint(w, REPLY_ID);
	put_cstr(w, k == ANSWER_UNKNOWN_TRANSPORT ? "zz:*" : "uv:*");
	/* channelRegistrationIds {"basic": [101]} (Binary vector<uint64>) */
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_cstr(w, "basic");
	put_byte(w, 0xbc);
	put_uint(w, 8);
	for (int i = 0; i < 8; i++)
		put_byte(w, i == 0 ? BASIC_ID : 0);
	/* channelDeviceDescriptors {"basic": {cpu:0: "any"}} */
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_cstr(w, "basic");
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_cpu0(w);
	put_cstr(w, "any");
	/* channelForDevicePair {(cpu:0, cpu:0): "basic"} */
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_byte(w, 0xba);
	put_byte(w, 0x02);
	put_cpu0(w);
	put_cpu0(w);
	put_cstr(w, k == ANSWER_BAD_CHANNELS ? "zz" : "basic");
	if (k == ANSWER_TRUNCATED)
		w->n = 5; /* b9 07 bd 02 75: the transport name runs past the frame */
}

/* ---- the run -------------------------------------------------------------------------- */

typedef struct run {
	twc_case_env *env;
	twc_adapter *a;
	int lfd, port;
	int req_lfd, req_port; /* where the answer sends the requested connections (-1: lfd) */
	int boot, reply, basic;
	char pipe[32];
	char why[TWC_REASON_MAX];
} run;

static int failf(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int failf(run *r, const char *fmt, ...)
{
	if (r->why[0])
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	return -1;
}

static void hex(const unsigned char *b, size_t n, char *out, size_t len)
{
	out[0] = '\0';
	for (size_t i = 0, k = 0; i < n && k + 4 < len; i++, k += 3)
		snprintf(out + k, len - k, "%02x ", b[i]);
	if (n * 3 + 4 > len && len > 4)
		snprintf(out + len - 5, 5, "...");
}

static int expect_frame(run *r, int fd, const char *what, const unsigned char *want, size_t wn)
{
	static unsigned char got[1 << 16];
	char err[512];
	long n = twc_raw_recv_frame(fd, got, sizeof(got), r->env->wait_ms, err, sizeof(err));
	if (n < 0)
		return failf(r, "%s: %s", what, n == -2 ? "the IUT closed the connection" : err);
	if ((size_t)n != wn || memcmp(got, want, wn) != 0) {
		char g[400], w[400];
		hex(got, (size_t)n, g, sizeof(g));
		hex(want, wn, w, sizeof(w));
		return failf(r, "%s: got %ld bytes [%s], expected %zu [%s]", what, n, g, wn, w);
	}
	return 0;
}

/* The Brochure: uv + basic (twc_raw_brochure_uv_basic), where the transports
 * map may also hold the extension request of spec/wire.md §8.1, one entry
 * "tensorwire.ext" -> any string, before or after "uv" (map order is the
 * writer's, §1.7). */
static bool ext_brochure(const unsigned char *g, size_t n)
{
	const unsigned char *plain = twc_raw_brochure_uv_basic;
	static const unsigned char head[] = {0xb9, 0x02, 0xbb, 0x02};
	static const unsigned char ext[] = {0xbd, 0x0e, 't', 'e', 'n', 's', 'o', 'r', 'w',
	                                    'i', 'r', 'e', '.', 'e', 'x', 't'};
	const size_t uv_len = 10, rest_off = 14; /* plain: b9 02 bb 01 <uv entry> <channels> */
	const size_t rest_len = twc_raw_brochure_uv_basic_len - rest_off;
	if (n < sizeof(head) || memcmp(g, head, sizeof(head)) != 0)
		return false;
	for (int ext_first = 0; ext_first < 2; ext_first++) {
		size_t k = sizeof(head);
		for (int part = 0; part < 2; part++) {
			if ((part == 0) != (ext_first == 1)) {
				if (n - k < uv_len || memcmp(g + k, plain + 4, uv_len) != 0)
					goto next;
				k += uv_len;
			} else {
				/* the key, then a string of up to 127 bytes */
				if (n - k < sizeof(ext) + 2 || memcmp(g + k, ext, sizeof(ext)) != 0 ||
				    g[k + sizeof(ext)] != 0xbd || g[k + sizeof(ext) + 1] >= 0x80)
					goto next;
				k += sizeof(ext) + 2 + g[k + sizeof(ext) + 1];
				if (k > n)
					goto next;
			}
		}
		if (n - k == rest_len && memcmp(g + k, plain + rest_off, rest_len) == 0)
			return true;
	next:;
	}
	return false;
}

static int expect_brochure(run *r)
{
	static unsigned char got[1 << 16];
	char err[512];
	const char *what = "Brochure (wire.md 3.4.a, uv + basic)";
	long n = twc_raw_recv_frame(r->boot, got, sizeof(got), r->env->wait_ms, err, sizeof(err));
	if (n < 0)
		return failf(r, "%s: %s", what, n == -2 ? "the IUT closed the connection" : err);
	if (((size_t)n == twc_raw_brochure_uv_basic_len &&
	     memcmp(got, twc_raw_brochure_uv_basic, (size_t)n) == 0) ||
	    ext_brochure(got, (size_t)n))
		return 0;
	char g[400], w[400];
	hex(got, (size_t)n, g, sizeof(g));
	hex(twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, w, sizeof(w));
	return failf(r, "%s: got %ld bytes [%s], expected %zu [%s] (or with a tensorwire.ext entry, "
	                "wire.md 8.1)", what, n, g, twc_raw_brochure_uv_basic_len, w);
}

static json_t *call(run *r, json_t *req)
{
	char err[1024];
	json_t *resp = twc_adapter_call(r->a, req, r->env->wait_ms, err, sizeof(err));
	if (!resp)
		failf(r, "%s", err);
	return resp;
}

static json_int_t arm(run *r, json_t *req)
{
	json_t *resp = call(r, req);
	json_int_t id = resp ? json_integer_value(json_object_get(resp, "id")) : -1;
	json_decref(resp);
	return id;
}

static json_t *event(run *r, json_int_t id, const char *name)
{
	char err[1024];
	json_t *ev = twc_adapter_event(r->a, id, name, r->env->wait_ms, err, sizeof(err));
	if (!ev)
		failf(r, "%s", err);
	return ev;
}

static int send_frame(run *r, int fd, const void *b, size_t n, const char *what)
{
	char err[256];
	if (twc_raw_send_frame(fd, b, n, err, sizeof(err)))
		return failf(r, "sending %s: %s", what, err);
	return 0;
}

/* The IUT connects; the harness checks hello and Brochure, then answers. */
/* hello; a context with uv and `channel`; a pipe connecting to the raw
 * server. *skipped (if not NULL): the IUT declared the channel not viable. */
static int connect_iut(run *r, const char *channel, bool *skipped)
{
	json_t *resp = call(r, json_pack("{s:s}", "cmd", "hello"));
	json_decref(resp);
	resp = resp ? call(r, json_pack("{s:s,s:s,s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "cmd",
	                                "context", "name", "rawtest", "transports", "name", "uv",
	                                "kind", "uv", "priority", 0, "channels", "name", channel,
	                                "kind", channel, "priority", 0))
	            : NULL;
	if (!resp)
		return -1;
	if (skipped)
		*skipped = json_array_size(json_object_get(resp, "skipped")) > 0;
	json_decref(resp);
	char url[64];
	snprintf(url, sizeof(url), "uv://127.0.0.1:%d", r->port);
	resp = call(r, json_pack("{s:s,s:s}", "cmd", "connect", "url", url));
	if (!resp)
		return -1;
	snprintf(r->pipe, sizeof(r->pipe), "%s", json_string_value(json_object_get(resp, "pipe")) ?: "");
	json_decref(resp);
	return 0;
}

static int handshake(run *r, answer_kind kind, const twc_agent_msg *first, json_int_t *wid)
{
	char err[512];
	if (connect_iut(r, "basic", NULL))
		return -1;
	/* a write right away: a client may write before the handshake ends (3.7.f) */
	*wid = arm(r, json_pack("{s:s,s:s,s:o}", "cmd", "write", "pipe", r->pipe, "message",
	                        twc_msg_json(first)));
	if (*wid < 0)
		return -1;
	if ((r->boot = twc_raw_accept(r->lfd, r->env->wait_ms, err, sizeof(err))) < 0)
		return failf(r, "the IUT did not connect: %s", err);
	unsigned char hello[64];
	size_t hn = twc_raw_hello("rawtest", hello, sizeof(hello));
	if (expect_frame(r, r->boot, "hello (wire.md 3.3.a: SpontaneousConnection{\"rawtest\"})",
	                 hello, hn) ||
	    expect_brochure(r))
		return -1;
	buf ans = {.n = 0};
	put_answer(&ans, kind, r->req_lfd >= 0 ? r->req_port : r->port);
	return send_frame(r, r->boot, ans.b, ans.n, "the BrochureAnswer");
}

/* The requested connections, in any order (wire.md 3.7.c, 3.7.e, 3.9.a). */
static int accept_requested(run *r)
{
	char err[512];
	for (int k = 0; k < 2; k++) {
		int fd = twc_raw_accept(r->req_lfd >= 0 ? r->req_lfd : r->lfd, r->env->wait_ms, err,
		                        sizeof(err));
		if (fd < 0)
			return failf(r, "requested connection %d of 2 never came: %s", k + 1, err);
		unsigned char f[64], want_r[16], want_b[16];
		size_t rn = twc_raw_requested(REPLY_ID, want_r, sizeof(want_r));
		size_t bn = twc_raw_requested(BASIC_ID, want_b, sizeof(want_b));
		long n = twc_raw_recv_frame(fd, f, sizeof(f), r->env->wait_ms, err, sizeof(err));
		if (n == (long)rn && !memcmp(f, want_r, rn) && r->reply < 0) {
			r->reply = fd;
		} else if (n == (long)bn && !memcmp(f, want_b, bn) && r->basic < 0) {
			r->basic = fd;
		} else {
			char g[200];
			hex(f, n > 0 ? (size_t)n : 0, g, sizeof(g));
			close(fd);
			return failf(r, "a requested connection began with [%s], not "
			                "RequestedConnection{100} or {101} (wire.md 3.7.c, 3.7.e)", g);
		}
	}
	return 0;
}

static int shape(twc_agent_msg *m, size_t np, size_t nt)
{
	memset(m, 0, sizeof(*m));
	m->num_payloads = np;
	m->num_tensors = nt;
	m->payloads = np ? calloc(np, sizeof(*m->payloads)) : NULL;
	m->tensors = nt ? calloc(nt, sizeof(*m->tensors)) : NULL;
	if ((np && !m->payloads) || (nt && !m->tensors))
		return -1;
	for (size_t i = 0; i < nt; i++)
		(void)twc_agent_device_parse("cpu:0", &m->tensors[i].source_device);
	return 0;
}

static int finish(run *r)
{
	char err[TWC_REASON_MAX];
	json_t *resp = call(r, json_pack("{s:s,s:s}", "cmd", "close", "pipe", r->pipe));
	json_decref(resp);
	resp = resp ? call(r, json_pack("{s:s}", "cmd", "shutdown")) : NULL;
	json_decref(resp);
	if (!resp)
		return -1;
	if (twc_adapter_finish(r->a, 30000, err, sizeof(err)) ||
	    twc_adapter_check_callbacks(r->a, err, sizeof(err)))
		return failf(r, "%s", err);
	return 0;
}

/* "(3.3.a) A client MUST send a SpontaneousConnection as the first frame of the
 * bootstrap connection. (3.4.a) A client MUST send the Brochure as the second
 * frame [...] (3.7.c) A client MUST open the descriptor-reply connection and
 * send RequestedConnection{transportRegistrationIds[1]} first. (3.10.a) A
 * sender MUST write the Descriptor and then exactly one frame per payload on
 * D [...] (3.11.a) A receiver MUST send exactly one DescriptorReply per
 * message that has at least one tensor without a target device" */
static int client_handshake(run *r)
{
	twc_agent_msg out, in;
	json_int_t wid;
	int rc = -1;
	if (shape(&out, 1, 1) || shape(&in, 1, 1)) {
		failf(r, "harness: out of memory");
		goto done;
	}
	out.metadata = (twc_agent_buf){5, 11};
	out.payloads[0].data = (twc_agent_buf){8, 12};
	out.payloads[0].metadata = (twc_agent_buf){2, 13};
	out.tensors[0].data = (twc_agent_buf){16, 14};
	out.tensors[0].metadata = (twc_agent_buf){3, 15};
	out.tensors[0].has_target_device = true;
	(void)twc_agent_device_parse("cpu:0", &out.tensors[0].target_device);
	in.metadata = (twc_agent_buf){4, 21};
	in.payloads[0].data = (twc_agent_buf){6, 22};
	in.tensors[0].data = (twc_agent_buf){12, 23}; /* no target device: DescriptorReply */
	if (handshake(r, ANSWER_GOOD, &out, &wid) || accept_requested(r))
		goto done;
	/* the IUT's message, byte for byte */
	buf d = {.n = 0};
	put_descriptor(&d, &out);
	unsigned char pay[8], ten[16], ten_in[12], pay_in[6];
	twc_agent_gen_fill(pay, sizeof(pay), 12);
	twc_agent_gen_fill(ten, sizeof(ten), 14);
	if (expect_frame(r, r->boot, "the IUT's Descriptor (wire.md 3.10.a, 3.2.a)", d.b, d.n) ||
	    expect_frame(r, r->boot, "the IUT's payload frame (wire.md 3.10.b)", pay, sizeof(pay)) ||
	    expect_frame(r, r->basic, "the IUT's tensor on the basic channel (wire.md 4.2)", ten,
	                 sizeof(ten)))
		goto done;
	json_t *ev = event(r, wid, "write");
	if (!ev)
		goto done;
	if (!json_is_true(json_object_get(ev, "ok"))) {
		failf(r, "the IUT's write failed: %s", twc_event_error_text(ev));
		json_decref(ev);
		goto done;
	}
	json_decref(ev);
	/* the harness's message: the IUT must answer with DescriptorReply [cpu:0] */
	json_int_t rd = arm(r, json_pack("{s:s,s:s}", "cmd", "read_descriptor", "pipe", r->pipe));
	buf d2 = {.n = 0};
	put_descriptor(&d2, &in);
	twc_agent_gen_fill(pay_in, sizeof(pay_in), 22);
	if (rd < 0 || send_frame(r, r->boot, d2.b, d2.n, "a Descriptor") ||
	    send_frame(r, r->boot, pay_in, sizeof(pay_in), "a payload"))
		goto done;
	char why[1024];
	if (!(ev = event(r, rd, "read_descriptor")))
		goto done;
	if (!json_is_true(json_object_get(ev, "ok")) ||
	    twc_msg_check_descriptor(&in, json_object_get(ev, "descriptor"), why, sizeof(why))) {
		failf(r, "the IUT's read_descriptor: %s",
		      json_is_true(json_object_get(ev, "ok")) ? why : twc_event_error_text(ev));
		json_decref(ev);
		goto done;
	}
	json_decref(ev);
	json_int_t rid = arm(r, json_pack("{s:s,s:s}", "cmd", "read", "pipe", r->pipe));
	static const unsigned char reply[] = {0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02, 0xbd,
	                                      0x03, 'c', 'p', 'u', 0x00};
	twc_agent_gen_fill(ten_in, sizeof(ten_in), 23);
	if (rid < 0 ||
	    expect_frame(r, r->reply, "the IUT's DescriptorReply (wire.md 3.11.a, 3.11.b)", reply,
	                 sizeof(reply)) ||
	    send_frame(r, r->basic, ten_in, sizeof(ten_in), "a tensor"))
		goto done;
	if (!(ev = event(r, rid, "read")))
		goto done;
	if (!json_is_true(json_object_get(ev, "ok")) ||
	    twc_msg_check_read(&in, ev, why, sizeof(why))) {
		failf(r, "the IUT's read: %s",
		      json_is_true(json_object_get(ev, "ok")) ? why : twc_event_error_text(ev));
		json_decref(ev);
		goto done;
	}
	json_decref(ev);
	rc = finish(r);
done:
	twc_msg_clear(&out);
	twc_msg_clear(&in);
	return rc;
}

/* "(5.6.e) A client's write callback MUST NOT report success before every
 * handshake object the client wrote (each RequestedConnection, 3.7) has been
 * handed to its transport" -- the answer sends the requested connections to
 * a second listener whose accept queue is full, so the kernel drops their
 * SYNs: the descriptor and payload go out on the bootstrap connection at
 * once, but no RequestedConnection can leave until the harness makes room.
 * A write that succeeds meanwhile would let a writer that closes on its
 * callback take the unsent connections down, and the server could never
 * establish its side (the message lost). Then the queue opens, the
 * connections arrive (after the IUT's SYN retransmission, about 3 s) and
 * the write must succeed. */
enum { HELD_MS = 1500 };

static int client_write_waits(run *r)
{
	twc_agent_msg out;
	json_int_t wid;
	int rc = -1, filler = -1;
	char err[512];
	if (shape(&out, 1, 0)) {
		failf(r, "harness: out of memory");
		goto done;
	}
	out.payloads[0].data = (twc_agent_buf){8, 41};
	/* listen(fd, 0) holds one connection: the harness's own fills it */
	if ((r->req_lfd = twc_raw_listen(&r->req_port, err, sizeof(err))) < 0 ||
	    listen(r->req_lfd, 0) != 0) {
		failf(r, "harness: second listener: %s", r->req_lfd < 0 ? err : strerror(errno));
		goto done;
	}
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", r->req_port);
	if ((filler = twc_raw_connect(addr, r->env->wait_ms, err, sizeof(err))) < 0) {
		failf(r, "harness: filling the second listener's queue: %s", err);
		goto done;
	}
	if (handshake(r, ANSWER_GOOD, &out, &wid))
		goto done;
	buf d = {.n = 0};
	put_descriptor(&d, &out);
	unsigned char pay[8];
	twc_agent_gen_fill(pay, sizeof(pay), 41);
	if (expect_frame(r, r->boot, "the IUT's Descriptor (wire.md 3.10.a)", d.b, d.n) ||
	    expect_frame(r, r->boot, "the IUT's payload frame (wire.md 3.10.b)", pay, sizeof(pay)))
		goto done;
	json_t *ev = twc_adapter_event(r->a, wid, "write", HELD_MS, err, sizeof(err));
	if (ev) {
		failf(r, "the IUT's write reported %s while its RequestedConnections could not be "
		         "connected (the kernel dropped their SYNs for %d ms): a writer that closes "
		         "on that callback loses the message (wire.md 5.6.e)",
		      json_is_true(json_object_get(ev, "ok")) ? "success" : twc_event_error_text(ev),
		      HELD_MS);
		json_decref(ev);
		goto done;
	}
	int st;
	if (twc_adapter_exited(r->a, &st)) {
		failf(r, "the IUT ended while its connections were held: %s", err);
		goto done;
	}
	/* room in the queue: the IUT's next SYN gets through */
	if (listen(r->req_lfd, 16) != 0) {
		failf(r, "harness: listen: %s", strerror(errno));
		goto done;
	}
	int served = twc_raw_accept(r->req_lfd, r->env->wait_ms, err, sizeof(err));
	if (served >= 0)
		close(served); /* the filler's own, first in the queue */
	if (accept_requested(r))
		goto done;
	if (!(ev = event(r, wid, "write")))
		goto done;
	if (!json_is_true(json_object_get(ev, "ok"))) {
		failf(r, "the IUT's write failed once its connections arrived: %s",
		      twc_event_error_text(ev));
		json_decref(ev);
		goto done;
	}
	json_decref(ev);
	rc = finish(r);
done:
	if (filler >= 0)
		close(filler);
	twc_msg_clear(&out);
	return rc;
}

/* A BrochureAnswer the client must refuse: the pipe fails with a protocol
 * error (its pending write reports it), and the process lives on. */
static int client_refuses(run *r, answer_kind kind)
{
	twc_agent_msg out;
	json_int_t wid;
	int rc = -1;
	if (shape(&out, 1, 0)) {
		failf(r, "harness: out of memory");
		goto done;
	}
	out.payloads[0].data = (twc_agent_buf){8, 31};
	if (handshake(r, kind, &out, &wid))
		goto done;
	json_t *ev = event(r, wid, "write");
	if (!ev)
		goto done;
	const char *k = twc_event_error_kind(ev);
	if (json_is_true(json_object_get(ev, "ok")))
		failf(r, "the IUT accepted the answer: its write succeeded");
	else if (!k || strcmp(k, "proto") != 0)
		failf(r, "the pipe failed with kind '%s' (%s), not a protocol error", k ? k : "?",
		      twc_event_error_text(ev));
	else
		printf("# the pipe failed as it should: %s\n", twc_event_error_text(ev));
	json_decref(ev);
	if (!r->why[0])
		rc = finish(r);
done:
	twc_msg_clear(&out);
	return rc;
}

/* ---- the proof of cma (spec/wire.md 8.3), with the IUT as client ------------------------- */

enum { CMA_ID0 = 101, CMA_ID1 = 102 };

/* The string value that starts with `prefix` in b (a nop string: 0xbd and
 * its length just before it), into out; false if there is none. */
static bool find_str(const unsigned char *b, size_t n, const char *prefix, char *out, size_t len)
{
	size_t pl = strlen(prefix);
	for (size_t i = 2; i + pl <= n; i++) {
		if (memcmp(b + i, prefix, pl) != 0)
			continue;
		size_t sl;
		if (b[i - 2] == 0xbd && b[i - 1] < 0x80)
			sl = b[i - 1];
		else if (i >= 3 && b[i - 3] == 0xbd && b[i - 2] == 0x80)
			sl = b[i - 1];
		else
			continue;
		if (i + sl > n || sl + 1 > len)
			return false;
		memcpy(out, b + i, sl);
		out[sl] = '\0';
		return true;
	}
	return false;
}

/* A nop unsigned integer at b[*k] (spec 1.3). */
static bool get_uint(const unsigned char *b, size_t n, size_t *k, uint64_t *v)
{
	if (*k >= n)
		return false;
	unsigned p = b[(*k)++];
	if (p < 0x80) {
		*v = p;
		return true;
	}
	int w = p == 0x80 ? 1 : p == 0x81 ? 2 : p == 0x82 ? 4 : p == 0x83 ? 8 : 0;
	if (!w || n - *k < (size_t)w)
		return false;
	*v = 0;
	for (int i = 0; i < w; i++)
		*v |= (uint64_t)b[(*k)++] << (8 * i);
	return true;
}

/* BrochureAnswer selecting uv and cma (ids 101, 102) with the IUT's own cma
 * descriptor, acknowledging goodbye and proof (key 0x74770001 = 3). */
static void put_cma_answer(buf *w, int port, const char *desc)
{
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	put_byte(w, 0xb9);
	put_byte(w, 0x07);
	put_cstr(w, "uv");
	put_cstr(w, addr);
	put_byte(w, 0xbb);
	put_byte(w, 0x02);
	put_uint(w, 1);
	put_uint(w, REPLY_ID);
	put_uint(w, UINT64_C(0x74770001));
	put_uint(w, 3);
	put_cstr(w, "uv:*");
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_cstr(w, "cma");
	put_byte(w, 0xbc);
	put_uint(w, 16);
	for (int i = 0; i < 16; i++)
		put_byte(w, i == 0 ? CMA_ID0 : i == 8 ? CMA_ID1 : 0);
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_cstr(w, "cma");
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_cpu0(w);
	put_cstr(w, desc);
	put_byte(w, 0xbb);
	put_byte(w, 0x01);
	put_byte(w, 0xba);
	put_byte(w, 0x02);
	put_cpu0(w);
	put_cpu0(w);
	put_cstr(w, "cma");
}

/* "(8.3.b) An end MUST answer with an empty frame only when the copy
 * returned the 16 bytes it expected" and step 1 (the IUT's probe holds
 * twproof1 and its own address): the IUT connects with uv + cma, the
 * harness selects cma and acknowledges proof, checks the IUT's probe by
 * copying it, sends a probe whose bytes are right or wrong, and reads the
 * IUT's answer: empty for the right bytes, a reason for the wrong ones. */
static int client_proof(run *r, bool right_bytes)
{
	char err[512];
	bool skipped = false;
	if (connect_iut(r, "cma", &skipped))
		return -1;
	if (skipped)
		return failf(r, "SKIP: cma is not viable in the IUT here");
	if ((r->boot = twc_raw_accept(r->lfd, r->env->wait_ms, err, sizeof(err))) < 0)
		return failf(r, "the IUT did not connect: %s", err);
	static unsigned char f[1 << 16];
	long n = twc_raw_recv_frame(r->boot, f, sizeof(f), r->env->wait_ms, err, sizeof(err));
	if (n >= 0)
		n = twc_raw_recv_frame(r->boot, f, sizeof(f), r->env->wait_ms, err, sizeof(err));
	if (n < 0)
		return failf(r, "no hello and Brochure: %s", n == -2 ? "closed" : err);
	char desc[512], asked[128];
	if (!find_str(f, (size_t)n, "cma:", desc, sizeof(desc)))
		return failf(r, "the Brochure offers no cma descriptor");
	if (!find_str(f, (size_t)n, "goodbye", asked, sizeof(asked)) || !strstr(asked, "proof"))
		return failf(r, "SKIP: the IUT does not ask for the proof extension (spec 8.3; every "
		                "stock client)");
	buf ans = {.n = 0};
	put_cma_answer(&ans, r->port, desc);
	if (send_frame(r, r->boot, ans.b, ans.n, "the BrochureAnswer"))
		return -1;
	/* the descriptor-reply and the two cma connections, in any order */
	int cma[2] = {-1, -1};
	for (int k = 0; k < 3; k++) {
		int fd = twc_raw_accept(r->lfd, r->env->wait_ms, err, sizeof(err));
		if (fd < 0)
			return failf(r, "requested connection %d of 3 never came: %s", k + 1, err);
		unsigned char g[64], w[16];
		long gn = twc_raw_recv_frame(fd, g, sizeof(g), r->env->wait_ms, err, sizeof(err));
		uint64_t ids[3] = {REPLY_ID, CMA_ID0, CMA_ID1};
		int which = -1;
		for (int i = 0; i < 3; i++) {
			size_t wn = twc_raw_requested(ids[i], w, sizeof(w));
			if (gn == (long)wn && !memcmp(g, w, wn))
				which = i;
		}
		if (which < 0) {
			close(fd);
			return failf(r, "a requested connection did not present id 100, 101 or 102");
		}
		if (which == 0)
			r->reply = fd;
		else
			cma[which - 1] = fd;
	}
	r->basic = cma[0]; /* closed with the run's other descriptors */
	int rc = -1;
	/* 1: the IUT's probe, copied out of its memory */
	n = twc_raw_recv_frame(cma[0], f, sizeof(f), r->env->wait_ms, err, sizeof(err));
	size_t k = 2;
	uint64_t pid = 0, ptr = 0;
	if (n < 2 || f[0] != 0xb9 || f[1] != 0x02 || !get_uint(f, (size_t)n, &k, &pid) ||
	    !get_uint(f, (size_t)n, &k, &ptr)) {
		failf(r, "the first frame on cma connection 0 is not a probe Descriptor (8.3 step 1)");
		goto out;
	}
	uint8_t got[16] = {0}, want[16];
	memcpy(want, "twproof1", 8);
	for (int i = 0; i < 8; i++)
		want[8 + i] = (uint8_t)(ptr >> (8 * i));
	struct iovec l = {got, sizeof(got)}, rm = {(void *)(uintptr_t)ptr, sizeof(got)};
	if (process_vm_readv((pid_t)pid, &l, 1, &rm, 1, 0) != (ssize_t)sizeof(got) ||
	    memcmp(got, want, sizeof(want)) != 0) {
		failf(r, "the IUT's probe {pid %llu, ptr 0x%llx} does not hold twproof1 and its own "
		         "address (8.3 step 1)",
		      (unsigned long long)pid, (unsigned long long)ptr);
		goto out;
	}
	/* 2: our probe (right or wrong bytes), and our answer to theirs */
	static uint8_t probe[16];
	memcpy(probe, "twproof1", 8);
	for (int i = 0; i < 8; i++)
		probe[8 + i] = right_bytes ? (uint8_t)((uint64_t)(uintptr_t)probe >> (8 * i)) : 0x5a;
	buf pd = {.n = 0};
	put_byte(&pd, 0xb9);
	put_byte(&pd, 0x02);
	put_uint(&pd, (uint64_t)getpid());
	put_uint(&pd, (uint64_t)(uintptr_t)probe);
	if (send_frame(r, cma[0], pd.b, pd.n, "our probe") ||
	    send_frame(r, cma[1], "", 0, "our answer"))
		goto out;
	/* 3: the IUT's answer to our probe */
	n = twc_raw_recv_frame(cma[1], f, sizeof(f), r->env->wait_ms, err, sizeof(err));
	if (n < 0) {
		failf(r, "no answer to our probe on cma connection 1: %s", n == -2 ? "closed" : err);
		goto out;
	}
	printf("# the IUT's answer to our %s probe: %ld bytes: %.*s\n", right_bytes ? "right" : "wrong",
	       n, (int)(n > 200 ? 200 : n), (const char *)f);
	if (right_bytes && n != 0)
		failf(r, "our probe held the right bytes, the IUT answered '%.*s' (8.3 step 2: an "
		         "empty frame)",
		      (int)(n > 200 ? 200 : n), (const char *)f);
	else if (!right_bytes && n == 0)
		failf(r, "our probe held the wrong bytes, the IUT answered with an empty frame (8.3.b)");
	else if (n > 200)
		failf(r, "the answer is %ld bytes, at most 200 (8.3 step 2)", n);
	else
		rc = finish(r);
out:
	if (cma[1] >= 0)
		close(cma[1]);
	return rc;
}

static twc_outcome_t run_client_case(const twc_case *c, twc_case_env *env)
{
	run r = {.env = env, .boot = -1, .reply = -1, .basic = -1, .req_lfd = -1};
	char err[1024];
	if ((r.lfd = twc_raw_listen(&r.port, err, sizeof(err))) < 0)
		return twc_case_result(env, TWC_ERROR, "%s", err);
	if (!(r.a = twc_adapter_spawn(env->iut_cmd, "client", err, sizeof(err)))) {
		close(r.lfd);
		return twc_case_result(env, TWC_ERROR, "%s", err);
	}
	const char *which = c->arg;
	int rc;
	if (!strcmp(which, "handshake"))
		rc = client_handshake(&r);
	else if (!strcmp(which, "unknown_transport"))
		rc = client_refuses(&r, ANSWER_UNKNOWN_TRANSPORT);
	else if (!strcmp(which, "bad_channels"))
		rc = client_refuses(&r, ANSWER_BAD_CHANNELS);
	else if (!strcmp(which, "write_waits"))
		rc = client_write_waits(&r);
	else if (!strcmp(which, "proof_right") || !strcmp(which, "proof_wrong"))
		rc = client_proof(&r, !strcmp(which, "proof_right"));
	else
		rc = client_refuses(&r, ANSWER_TRUNCATED);
	if (rc != 0) {
		int st;
		if (twc_adapter_exited(r.a, &st)) {
			char s[64];
			twc_adapter_describe_status(st, s, sizeof(s));
			const char *tail = twc_adapter_stderr(r.a);
			size_t tl = strlen(tail);
			printf("# the IUT ended: %s; stderr tail: %s\n", s, tl > 400 ? tail + tl - 400 : tail);
		}
	}
	int fds[5] = {r.boot, r.reply, r.basic, r.lfd, r.req_lfd};
	for (int i = 0; i < 5; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	twc_adapter_destroy(r.a);
	snprintf(env->transport, sizeof(env->transport), "uv");
	snprintf(env->channel, sizeof(env->channel), strncmp(which, "proof", 5) ? "basic" : "cma");
	if (rc == 0)
		return TWC_PASS;
	if (!strncmp(r.why, "SKIP: ", 6))
		return twc_case_result(env, TWC_SKIP, "%s", r.why + 6);
	return twc_case_result(env, TWC_FAIL, "%s", r.why);
}

static const twc_case cases[] = {
	{.id = "wire.client_handshake", .suite = "wire",
	 .section = "wire.md 3.3 (3.3.a), wire.md 3.4 (3.4.a), wire.md 3.7 (3.7.c, 3.7.e), "
	            "wire.md 3.10 (3.10.a, 3.10.b), wire.md 3.11 (3.11.a, 3.11.b), wire.md 2.2 (2.2.a), "
	            "wire.md 3.2 (3.2.a), wire.md 2.1 (2.1.a)",
	 .level = TWC_MUST, .needs = "",
	 .description = "raw server: the IUT connects; hello, Brochure, requested connections, a "
	                "message and a DescriptorReply checked byte for byte",
	 .requirement = "(3.3.a) A client MUST send a SpontaneousConnection as the first frame of "
	                "the bootstrap connection. (3.4.a) A client MUST send the Brochure as the "
	                "second frame of the bootstrap connection. (3.7.c) A client MUST open the "
	                "descriptor-reply connection and send RequestedConnection{"
	                "transportRegistrationIds[1]} first. (3.10.a) A sender MUST write the "
	                "Descriptor and then exactly one frame per payload on D, in that order. "
	                "(3.11.b) Its targetDevices MUST hold one Device per tensor that lacked a "
	                "target device, in tensor order.",
	 .timeout_s = 60, .run = run_client_case, .arg = "handshake"},
	{.id = "wire.client_unknown_transport", .suite = "wire", .section = "wire.md 3.7 (3.7.a)",
	 .level = TWC_MUST, .needs = "",
	 .description = "raw server: a BrochureAnswer naming transport 'zz', which the client never "
	                "offered: the pipe fails with a protocol error",
	 .requirement = "(3.7.a) A client MUST fail the pipe with a protocol error if transport "
	                "names a transport it did not offer, or if it does not accept "
	                "transportDomainDescriptor.",
	 .timeout_s = 60, .run = run_client_case, .arg = "unknown_transport"},
	{.id = "wire.client_bad_channels", .suite = "wire", .section = "wire.md 3.7 (3.7.d)",
	 .level = TWC_MUST, .needs = "",
	 .description = "raw server: a BrochureAnswer whose channelForDevicePair names channel "
	                "'zz': the pipe fails with a protocol error",
	 .requirement = "(3.7.d) A client MUST recompute the channel selection with its own "
	                "priorities over the server's descriptors and fail the pipe with a protocol "
	                "error unless, for each of its pairs [...] the answer holds [...] the same "
	                "channel",
	 .timeout_s = 60, .run = run_client_case, .arg = "bad_channels"},
	{.id = "wire.client_truncated_answer", .suite = "wire", .section = "wire.md 5.2 (5.2.a)",
	 .level = TWC_MUST, .needs = "",
	 .description = "raw server: a BrochureAnswer cut inside its first string: the pipe fails "
	                "with a protocol error",
	 .requirement = "(5.2.a) An implementation that receives a malformed packet MUST fail only "
	                "the connection, or the pipe the connection belongs to, with a protocol "
	                "error. (5.2.b) It MUST NOT terminate the process",
	 .timeout_s = 60, .run = run_client_case, .arg = "truncated"},
	{.id = "wire.client_write_waits_for_requested", .suite = "wire",
	 .section = "wire.md 5.6 (5.6.e)", .level = TWC_MUST, .needs = "",
	 .description = "raw server: the requested connections cannot connect for 1.5 s (a full "
	                "accept queue drops their SYNs); the IUT's first write must not report "
	                "success meanwhile, and must once they arrive",
	 .requirement = "(5.6.e) A client's write callback MUST NOT report success before every "
	                "handshake object the client wrote (each RequestedConnection, 3.7) has been "
	                "handed to its transport as completely as a message's bytes would be.",
	 .timeout_s = 60, .run = run_client_case, .arg = "write_waits"},
	{.id = "wire.cma_proof_right_bytes", .suite = "wire", .section = "wire.md 8.3 (8.3.a)",
	 .level = TWC_MUST, .needs = "",
	 .description = "raw server: cma selected with proof; the IUT's probe is copied and checked, "
	                "a probe with the right bytes must get an empty answer",
	 .requirement = "(8.3 step 2) answers on connection 1 (its first frame there): an empty "
	                "frame when the copy returned exactly the expected bytes, otherwise [...] why",
	 .timeout_s = 60, .run = run_client_case, .arg = "proof_right"},
	{.id = "wire.cma_proof_wrong_bytes", .suite = "wire", .section = "wire.md 8.3 (8.3.b)",
	 .level = TWC_MUST, .needs = "",
	 .description = "raw server: cma selected with proof; a probe whose 16 bytes are not "
	                "twproof1 and its address must get a non-empty answer",
	 .requirement = "(8.3.b) An end MUST answer with an empty frame only when the copy returned "
	                "the 16 bytes it expected.",
	 .timeout_s = 60, .run = run_client_case, .arg = "proof_wrong"},
};

const twc_case *twc_suite_wire_client(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
