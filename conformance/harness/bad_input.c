/*
 * bad_input.c - tw-bad-input: sends each malformed input of reference §5.3
 * (tensorwire issue 2 item 9) from a raw TCP client (the harness) to a
 * listener of an implementation driven through its adapter (spec/agent.md),
 * and records what happened: did the process survive (exit status, signal,
 * stderr), what did the pending accept / read callbacks report, was the
 * connection dropped, does the listener still accept a well-formed client.
 *
 *   tw-bad-input --iut CMD [--name NAME] [--case ID]... [--expect stock|robust]
 *                [--markdown] [--window-ms N]
 *
 * --expect stock   compares with stock TensorPipe's documented behaviour
 *                  (docs/stock-bad-input.md): each case prints XFAIL when stock
 *                  did what the document says (crashing is expected there, not
 *                  approved), and FAIL when the observation differs, so the
 *                  document never silently goes stale.
 * --expect robust  what spec/wire.md asks of a conforming implementation: the
 *                  process survives, only that connection or pipe fails, and
 *                  the listener keeps accepting.
 * Without --expect it only observes. --markdown prints the table for docs/.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adapter_proc.h"
#include "rawpeer.h"

#define EXIT_SKIP 77

/* ---- observation -------------------------------------------------------------- */

typedef struct obs {
	char process[96];     /* "alive" or how it ended */
	char stderr_line[256];
	char accept[256];     /* the first accept callback: "ok" or "error <kind>: text" */
	char pipe[256];       /* the accepted pipe's read_descriptor/read outcome */
	bool conn_dropped;    /* the server closed the raw connection */
	char listener[192];   /* does a well-formed client still get accepted */
	char klass[32];       /* summary class, see classify() */
	char note[256];       /* what the raw client could not do */
} obs;

typedef struct ctx {
	tw_adapter *a;
	char url[128];        /* uv://127.0.0.1:port */
	char lid[32];
	json_int_t accept_id;
	char spipe[32];       /* the accepted pipe, if any */
	json_int_t rd_id, read_id;
	bool want_read;       /* issue read after the descriptor */
	int fds[4];
	int nfds;
	obs *o;
} ctx;

typedef struct bad_case {
	const char *id;
	const char *what;     /* the input, in words */
	int (*send)(ctx *c);  /* performs the raw client's part */
	/* stock's documented reaction (reference §5.3, re-observed by this tool) */
	const char *stock_class;
	const char *stock_stderr; /* substring of the stderr line, or NULL */
} bad_case;

static char errbuf[2048];

static void notef(ctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->o->note, sizeof(c->o->note), fmt, ap);
	va_end(ap);
}

static int raw_open(ctx *c)
{
	int fd = tw_raw_connect(c->url, 2000, errbuf, sizeof(errbuf));
	if (fd < 0) {
		notef(c, "%s", errbuf);
		return -1;
	}
	c->fds[c->nfds++] = fd;
	return fd;
}

static int frame(ctx *c, int fd, const void *b, size_t n)
{
	if (tw_raw_send_frame(fd, b, n, errbuf, sizeof(errbuf))) {
		notef(c, "%s", errbuf);
		return -1;
	}
	return 0;
}

static int hello(ctx *c, int fd, const char *name)
{
	unsigned char h[64];
	return frame(c, fd, h, tw_raw_hello(name, h, sizeof(h)));
}

/* hello + brochure + answer + the requested connections of uv/basic. */
static int handshake(ctx *c, int fd, const unsigned char *brochure, size_t blen, bool open_conns)
{
	if (frame(c, fd, brochure, blen))
		return -1;
	unsigned char ans[4096];
	long n = tw_raw_recv_frame(fd, ans, sizeof(ans), 3000, errbuf, sizeof(errbuf));
	if (n < 0) {
		notef(c, "no BrochureAnswer: %s", n == -2 ? "connection closed" : errbuf);
		return -1;
	}
	tw_raw_answer a;
	if (tw_raw_parse_answer(ans, (size_t)n, &a, errbuf, sizeof(errbuf))) {
		notef(c, "%s", errbuf);
		return -1;
	}
	if (!open_conns)
		return 0;
	char url[160];
	snprintf(url, sizeof(url), "%s", a.address);
	unsigned char rq[16];
	int r = tw_raw_connect(url, 2000, errbuf, sizeof(errbuf));
	if (r < 0 || frame(c, r, rq, tw_raw_requested(a.reply_id, rq, sizeof(rq)))) {
		notef(c, "descriptor-reply connection: %s", errbuf);
		return -1;
	}
	c->fds[c->nfds++] = r;
	if (a.has_basic) {
		int b = tw_raw_connect(url, 2000, errbuf, sizeof(errbuf));
		if (b < 0 || frame(c, b, rq, tw_raw_requested(a.basic_id, rq, sizeof(rq)))) {
			notef(c, "basic channel connection: %s", errbuf);
			return -1;
		}
		c->fds[c->nfds++] = b;
	}
	return 0;
}

static const unsigned char empty_descriptor[] = {0xb9, 0x03, 0xbd, 0x00, 0xba, 0x00, 0xba, 0x00};

/* ---- the cases (reference §5.3) ------------------------------------------------ */

static int send_close_before_hello(ctx *c)
{
	int fd = raw_open(c);
	if (fd < 0)
		return -1;
	close(fd);
	c->nfds--;
	return 0;
}

static int send_bad_type_byte(ctx *c)
{
	static const unsigned char b[] = {0xff, 0xff, 0xff, 0xff, 0xff};
	int fd = raw_open(c);
	return fd < 0 ? -1 : frame(c, fd, b, sizeof(b));
}

static int send_bad_variant(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0x02, 0xb9, 0x01, 0x00};
	int fd = raw_open(c);
	return fd < 0 ? -1 : frame(c, fd, b, sizeof(b));
}

static int send_empty_variant(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0xff, 0xbe};
	int fd = raw_open(c);
	return fd < 0 ? -1 : frame(c, fd, b, sizeof(b));
}

static int send_unknown_id(ctx *c)
{
	unsigned char b[16];
	int fd = raw_open(c);
	return fd < 0 ? -1 : frame(c, fd, b, tw_raw_requested(12345, b, sizeof(b)));
}

static int send_truncated_hello(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0x00, 0xb9, 0x01, 0xbd, 0x40};
	int fd = raw_open(c);
	return fd < 0 ? -1 : frame(c, fd, b, sizeof(b));
}

static int send_huge_length(ctx *c)
{
	static const unsigned char hdr[] = {0, 0, 0, 0, 0, 0, 0, 0x40}; /* 2^62 */
	int fd = raw_open(c);
	if (fd < 0)
		return -1;
	if (tw_raw_send(fd, hdr, sizeof(hdr), errbuf, sizeof(errbuf))) {
		notef(c, "%s", errbuf);
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

static int send_truncated_descriptor(ctx *c)
{
	static const unsigned char d[] = {0xb9, 0x03, 0xbd, 0x01};
	int fd = raw_open(c);
	if (fd < 0 || hello(c, fd, "truncdesc") ||
	    handshake(c, fd, tw_raw_brochure_uv_basic, tw_raw_brochure_uv_basic_len, true))
		return -1;
	return frame(c, fd, d, sizeof(d));
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

static const bad_case cases[] = {
	{"close_before_hello", "TCP connect, then close without sending anything",
	 send_close_before_hello, "listener-dies", NULL},
	{"bad_type_byte", "hello frame ff ff ff ff ff (no such nop type)", send_bad_type_byte,
	 "crash", "Unexpected Encoding Type"},
	{"bad_variant_index", "hello with Packet variant index 2 (b8 02 b9 01 00)",
	 send_bad_variant, "crash", "Unexpected Variant Type"},
	{"empty_variant", "hello = the empty variant (b8 ff be)", send_empty_variant,
	 "connection-dropped", NULL},
	{"unknown_registration_id", "RequestedConnection{12345}, an id never handed out",
	 send_unknown_id, "connection-dropped", NULL},
	{"truncated_hello", "hello whose string length runs past the frame (b8 00 b9 01 bd 40)",
	 send_truncated_hello, "crash", "Read Limit Reached"},
	/* Under AddressSanitizer the allocation is refused by ASan's allocator
	 * (which aborts) before std::bad_alloc could be thrown. */
	{"huge_length_prefix", "uv length prefix 2^62", send_huge_length, "crash",
	 "bad_alloc|AddressSanitizer: allocator is out of memory|AddressSanitizer: requested "
	 "allocation size"},
	{"trailing_junk", "hello followed by 4 junk bytes in the same frame, then a normal "
	                  "handshake and an empty message",
	 send_trailing_junk, "descriptor-delivered", NULL},
	{"no_common_transport", "Brochure offering only ibv", send_no_common_transport, "crash",
	 "Could not find a viable transport"},
	{"no_channels", "Brochure with no channels, then an empty message", send_no_channels,
	 "descriptor-delivered", NULL},
	{"truncated_descriptor", "after the handshake, Descriptor frame b9 03 bd 01",
	 send_truncated_descriptor, "crash", "Read Limit Reached"},
	{"payload_length_mismatch", "Descriptor announcing an 8-byte payload, then a 9-byte frame",
	 send_payload_mismatch, "crash", "Expected readLength_"},
	{"close_after_answer", "client closes the bootstrap connection right after the "
	                       "BrochureAnswer",
	 send_close_after_answer, "pipe-pending", NULL},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

/* ---- running one case ------------------------------------------------------------- */

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

static bool alive(ctx *c)
{
	int st;
	if (!tw_adapter_exited(c->a, &st))
		return true;
	tw_adapter_describe_status(st, c->o->process, sizeof(c->o->process));
	return false;
}

/* Pumps the adapter for `ms`, reacting to the accept and read events. */
static void observe(ctx *c, int ms)
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
			c->read_id = 0;
			json_decref(ev);
		}
	}
}

/* Does a well-formed client still get accepted? */
static void probe_listener(ctx *c, int window_ms)
{
	json_int_t id = c->accept_id;
	if (c->o->accept[0]) {
		json_t *r = tw_adapter_request(c->a, json_pack("{s:s,s:s}", "cmd", "accept",
		                                               "listener", c->lid),
		                               5000, errbuf, sizeof(errbuf));
		if (!r) {
			snprintf(c->o->listener, sizeof(c->o->listener), "no answer to accept: %.150s", errbuf);
			return;
		}
		if (!json_is_true(json_object_get(r, "ok"))) {
			snprintf(c->o->listener, sizeof(c->o->listener), "dead (accept refused: %s)",
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
			snprintf(c->o->listener, sizeof(c->o->listener), "n/a (the process died on the probe)");
		else
			snprintf(c->o->listener, sizeof(c->o->listener), "dead (a well-formed client "
			                                                  "was not accepted)");
	} else if (json_is_true(json_object_get(ev, "ok"))) {
		snprintf(c->o->listener, sizeof(c->o->listener), "alive (a well-formed client was "
		                                                  "accepted)");
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
	/* The most telling line: an exception's what(), else the last non-empty line. */
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

static void classify(const ctx *c, obs *o)
{
	if (strcmp(o->process, "alive") != 0)
		snprintf(o->klass, sizeof(o->klass), "crash");
	else if (!strncmp(o->listener, "dead", 4))
		snprintf(o->klass, sizeof(o->klass), "listener-dies");
	else if (strstr(o->pipe, "read_descriptor: ok") && !strstr(o->pipe, "read: error"))
		snprintf(o->klass, sizeof(o->klass), "descriptor-delivered");
	else if (o->pipe[0])
		snprintf(o->klass, sizeof(o->klass), "pipe-failed");
	else if (c->spipe[0])
		snprintf(o->klass, sizeof(o->klass), "pipe-pending");
	else if (o->conn_dropped)
		snprintf(o->klass, sizeof(o->klass), "connection-dropped");
	else
		snprintf(o->klass, sizeof(o->klass), "ignored");
}

static int run_one(const char *cmd, const bad_case *bc, int window_ms, obs *o)
{
	ctx c = {.o = o};
	memset(o, 0, sizeof(*o));
	snprintf(o->process, sizeof(o->process), "alive");
	char label[64];
	snprintf(label, sizeof(label), "iut[%s]", bc->id);
	c.a = tw_adapter_spawn(cmd, label, errbuf, sizeof(errbuf));
	if (!c.a) {
		snprintf(o->note, sizeof(o->note), "%.250s", errbuf);
		return -1;
	}
	json_t *r;
	if (!(r = call(c.a, json_pack("{s:s}", "cmd", "hello"))))
		goto err;
	json_decref(r);
	r = call(c.a, json_pack("{s:s,s:s,s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "cmd", "context",
	                        "name", "server", "transports", "name", "uv", "kind", "uv",
	                        "priority", 0, "channels", "name", "basic", "kind", "basic",
	                        "priority", 0));
	if (!r)
		goto err;
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

	(void)bc->send(&c);
	observe(&c, window_ms);
	/* Was the raw client's first connection dropped by the server? */
	if (c.nfds > 0)
		o->conn_dropped = tw_raw_wait_closed(c.fds[0], alive(&c) ? 100 : 0) == 1;
	if (alive(&c)) {
		probe_listener(&c, window_ms);
		observe(&c, 50);
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

/* ---- main ----------------------------------------------------------------------------- */

static void md_escape(const char *s, char *out, size_t len)
{
	size_t k = 0;
	for (; *s && k + 2 < len; s++) {
		if (*s == '|' && k + 3 < len)
			out[k++] = '\\';
		out[k++] = *s == '\n' ? ' ' : *s;
	}
	out[k] = '\0';
}

int main(int argc, char **argv)
{
	const char *cmd = NULL, *name = "iut", *expect = NULL;
	const char *only[NCASES];
	int nonly = 0, window_ms = 1500;
	bool markdown = false;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iut") && i + 1 < argc)
			cmd = argv[++i];
		else if (!strcmp(argv[i], "--name") && i + 1 < argc)
			name = argv[++i];
		else if (!strcmp(argv[i], "--expect") && i + 1 < argc)
			expect = argv[++i];
		else if (!strcmp(argv[i], "--case") && i + 1 < argc && nonly < NCASES)
			only[nonly++] = argv[++i];
		else if (!strcmp(argv[i], "--window-ms") && i + 1 < argc)
			window_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--markdown"))
			markdown = true;
		else if (!strcmp(argv[i], "--list")) {
			for (int k = 0; k < NCASES; k++)
				printf("%-24s %s\n", cases[k].id, cases[k].what);
			return 0;
		} else {
			fprintf(stderr, "usage: tw-bad-input --iut CMD [--name NAME] [--case ID]... "
			                "[--expect stock|robust] [--markdown] [--window-ms N] | --list\n"
			                "(see the comment at the top of bad_input.c)\n");
			return 2;
		}
	}
	if (!cmd || (expect && strcmp(expect, "stock") && strcmp(expect, "robust"))) {
		fprintf(stderr, "tw-bad-input: --iut CMD is required; --expect takes stock or robust\n");
		return 2;
	}
	if (!strncmp(cmd, "unavailable:", 12)) {
		printf("SKIP: %s\n", cmd + 12);
		return EXIT_SKIP;
	}
	int failures = 0, ran = 0;
	obs results[NCASES];
	bool did[NCASES] = {false};
	for (int k = 0; k < NCASES; k++) {
		bool want = nonly == 0;
		for (int j = 0; j < nonly; j++)
			want |= !strcmp(only[j], cases[k].id);
		if (!want)
			continue;
		obs *o = &results[k];
		did[k] = true;
		ran++;
		if (run_one(cmd, &cases[k], window_ms, o) != 0) {
			printf("ERROR %s: %s\n", cases[k].id, o->note);
			failures++;
			continue;
		}
		printf("# %s: %s\n#   process: %s\n#   stderr: %s\n#   accept: %s\n#   pipe: %s\n"
		       "#   connection dropped: %s\n#   listener: %s\n#   class: %s%s%s\n",
		       cases[k].id, cases[k].what, o->process, o->stderr_line[0] ? o->stderr_line : "-",
		       o->accept[0] ? o->accept : "-", o->pipe[0] ? o->pipe : "-",
		       o->conn_dropped ? "yes" : "no", o->listener, o->klass, o->note[0] ? "\n#   note: " : "",
		       o->note);
		if (!expect)
			continue;
		if (!strcmp(expect, "stock")) {
			bool match = !strcmp(o->klass, cases[k].stock_class) &&
			             stderr_matches(o->stderr_line, cases[k].stock_stderr);
			if (match) {
				printf("XFAIL %s: %s stock did what docs/stock-bad-input.md records: %s%s%s\n",
				       cases[k].id, name, o->klass, o->stderr_line[0] ? ": " : "",
				       o->stderr_line);
			} else {
				failures++;
				printf("FAIL %s: docs/stock-bad-input.md records '%s'%s%s, observed '%s' (%s)\n",
				       cases[k].id, cases[k].stock_class,
				       cases[k].stock_stderr ? " with " : "",
				       cases[k].stock_stderr ? cases[k].stock_stderr : "", o->klass,
				       o->stderr_line);
			}
		} else {
			bool ok = !strcmp(o->process, "alive") && !strncmp(o->listener, "alive", 5) &&
			          !o->note[0];
			if (ok) {
				printf("PASS %s: survived (%s); listener %s\n", cases[k].id, o->klass,
				       o->listener);
			} else {
				failures++;
				printf("FAIL %s: process %s, listener %s%s%s\n", cases[k].id, o->process,
				       o->listener, o->note[0] ? ", " : "", o->note);
			}
		}
	}
	if (markdown) {
		printf("\n| case | input | process | stderr (telling line) | accept callback | "
		       "pipe (read_descriptor/read) | connection dropped | listener afterwards | class |\n"
		       "|---|---|---|---|---|---|---|---|---|\n");
		for (int k = 0; k < NCASES; k++) {
			if (!did[k])
				continue;
			obs *o = &results[k];
			char e1[320], e2[320], e3[320];
			md_escape(o->stderr_line[0] ? o->stderr_line : "-", e1, sizeof(e1));
			md_escape(o->accept[0] ? o->accept : "-", e2, sizeof(e2));
			md_escape(o->pipe[0] ? o->pipe : "-", e3, sizeof(e3));
			printf("| `%s` | %s | %s | `%s` | %s | %s | %s | %s | **%s** |\n", cases[k].id,
			       cases[k].what, o->process, e1, e2, e3, o->conn_dropped ? "yes" : "no",
			       o->listener, o->klass);
		}
	}
	if (ran == 0) {
		printf("SKIP: no case selected\n");
		return EXIT_SKIP;
	}
	printf("%d case(s), %d %s\n", ran, failures,
	       expect ? "not as expected" : "could not be run");
	return failures ? 1 : 0;
}
