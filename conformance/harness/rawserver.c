/*
 * rawserver.c - the harness as a raw uv client of an IUT's listener: the
 * toolkit of the wire suite's server-side cases (see rawserver.h).
 */
#define _GNU_SOURCE
#include "rawserver.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>


typedef struct twc_raw_ctx ctx;


/* The first of a kind is kept: what went wrong first explains the rest. */
#define TWC_KEEP_FIRST(field)                                                                   \
	do {                                                                                    \
		if (c->o->field[0])                                                             \
			return;                                                                 \
		va_list ap;                                                                     \
		va_start(ap, fmt);                                                              \
		vsnprintf(c->o->field, sizeof(c->o->field), fmt, ap);                           \
		va_end(ap);                                                                     \
	} while (0)

void twc_raw_note(ctx *c, const char *fmt, ...)
{
	TWC_KEEP_FIRST(note);
}

void twc_raw_skip(ctx *c, const char *fmt, ...)
{
	TWC_KEEP_FIRST(skip);
}

void twc_raw_check(ctx *c, const char *fmt, ...)
{
	TWC_KEEP_FIRST(check);
}

static int keep_fd(ctx *c, int fd)
{
	if (c->nfds == TWC_RAW_MAX_FDS) {
		close(fd);
		twc_raw_note(c, "harness: too many raw connections");
		return -1;
	}
	c->fds[c->nfds++] = fd;
	return fd;
}

int twc_raw_open(ctx *c)
{
	int fd = twc_raw_connect(c->url, 2000, c->err, sizeof(c->err));
	if (fd < 0) {
		twc_raw_note(c, "%.250s", c->err);
		return -1;
	}
	return keep_fd(c, fd);
}

int twc_raw_frame(ctx *c, int fd, const void *b, size_t n)
{
	if (twc_raw_send_frame(fd, b, n, c->err, sizeof(c->err))) {
		twc_raw_note(c, "%.250s", c->err);
		return -1;
	}
	return 0;
}

int twc_raw_say_hello(ctx *c, int fd, const char *name)
{
	unsigned char h[64];
	return twc_raw_frame(c, fd, h, twc_raw_hello(name, h, sizeof(h)));
}

int twc_raw_open_requested(ctx *c, const char *what, uint64_t id)
{
	unsigned char rq[16];
	int fd = twc_raw_connect(c->ans.address, 2000, c->err, sizeof(c->err));
	if (fd < 0 || twc_raw_frame(c, fd, rq, twc_raw_requested(id, rq, sizeof(rq)))) {
		twc_raw_note(c, "%s connection: %.200s", what, c->err);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return keep_fd(c, fd);
}

/* Brochure, BrochureAnswer, then (open_conns) the descriptor-reply and basic
 * channel connections, each with its RequestedConnection (reference §3.4-3.8). */
int twc_raw_handshake(ctx *c, int fd, const unsigned char *brochure, size_t blen, bool open_conns)
{
	if (twc_raw_frame(c, fd, brochure, blen))
		return -1;
	unsigned char ans[4096];
	long n = twc_raw_recv_frame(fd, ans, sizeof(ans), 3000, c->err, sizeof(c->err));
	if (n < 0) {
		twc_raw_note(c, "no BrochureAnswer: %.200s", n == -2 ? "connection closed" : c->err);
		return -1;
	}
	if (twc_raw_parse_answer(ans, (size_t)n, &c->ans, c->err, sizeof(c->err))) {
		twc_raw_check(c, "%.200s", c->err);
		return -1;
	}
	c->have_ans = true;
	if (!open_conns)
		return 0;
	if (c->ans.has_descriptor_id) {
		twc_raw_note(c, "the answer changes the transport (%s); this raw client speaks uv only",
		      c->ans.transport);
		return -1;
	}
	if ((c->reply_fd = twc_raw_open_requested(c, "descriptor-reply", c->ans.reply_id)) < 0)
		return -1;
	if (c->ans.has_basic && (c->basic_fd = twc_raw_open_requested(c, "basic channel", c->ans.basic_id)) < 0)
		return -1;
	return 0;
}


/* ---- watching the IUT ---------------------------------------------------------------- */

static json_t *call(ctx *c, json_t *req)
{
	return twc_adapter_call(c->a, req, 5000, c->err, sizeof(c->err));
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
	if (!twc_adapter_exited(c->a, &st))
		return true;
	twc_adapter_describe_status(st, c->o->process, sizeof(c->o->process));
	return false;
}

static void check_read_sums(ctx *c, const json_t *ev)
{
	const json_t *ts = json_object_get(ev, "tensors");
	for (int i = 0; i < c->nexpect; i++) {
		const json_t *t = json_array_get(ts, (size_t)i);
		char want[17];
		twc_agent_hex64(twc_agent_gen_xxh3(c->expect[i].seed, c->expect[i].len), want);
		const char *got = json_string_value(json_object_get(t, "xxh3"));
		if (!got || strcmp(got, want) != 0)
			twc_raw_check(c, "tensor %d arrived with xxh3 %s, the raw client sent %s", i,
			       got ? got : "(none)", want);
	}
}

/* Pumps the adapter for up to `ms`, reacting to the accept and read events;
 * `flags` (TWC_OBSERVE_*) may end it early. */
void twc_raw_observe(ctx *c, int ms, int flags)
{
	long long deadline = twc_now_ms() + ms;
	while (twc_now_ms() < deadline) {
		twc_adapter_pump(20);
		if (!alive(c))
			return;
		json_t *ev;
		if (c->accept_id > 0 && !c->o->accept[0] &&
		    twc_adapter_events_seen(c->a, c->accept_id) > 0 &&
		    (ev = twc_adapter_event(c->a, c->accept_id, "accept", 0, c->err, sizeof(c->err)))) {
			describe_event(ev, c->o->accept, sizeof(c->o->accept));
			const char *p = json_string_value(json_object_get(ev, "pipe"));
			if (p) {
				snprintf(c->spipe, sizeof(c->spipe), "%s", p);
				json_t *r = call(c, json_pack("{s:s,s:s}", "cmd", "read_descriptor",
				                                 "pipe", c->spipe));
				if (r) {
					c->rd_id = json_integer_value(json_object_get(r, "id"));
					json_decref(r);
				}
			}
			json_decref(ev);
		}
		if (c->rd_id > 0 && !c->o->pipe[0] && twc_adapter_events_seen(c->a, c->rd_id) > 0 &&
		    (ev = twc_adapter_event(c->a, c->rd_id, "read_descriptor", 0, c->err,
		                           sizeof(c->err)))) {
			char d[200];
			describe_event(ev, d, sizeof(d));
			snprintf(c->o->pipe, sizeof(c->o->pipe), "read_descriptor: %s", d);
			note_kind(c, ev);
			if (json_is_true(json_object_get(ev, "ok")) && c->want_read) {
				json_t *r = call(c, json_pack("{s:s,s:s}", "cmd", "read", "pipe", c->spipe));
				if (r) {
					c->read_id = json_integer_value(json_object_get(r, "id"));
					json_decref(r);
				}
			}
			json_decref(ev);
		}
		if (c->read_id > 0 && twc_adapter_events_seen(c->a, c->read_id) > 0 &&
		    (ev = twc_adapter_event(c->a, c->read_id, "read", 0, c->err, sizeof(c->err)))) {
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
		if ((flags & TWC_OBSERVE_STOP_AT_READ) && c->read_id != 0)
			return;
		/* settled: the descriptor's outcome is in and no read is pending
		 * (read_id 0: none asked for, -1: reported); or no pipe was
		 * accepted and the IUT has closed the raw client's connection
		 * (a 1 ms wait: twc_raw_wait_closed does not look at all with 0).
		 * Once settled the deadline is the grace's end; later passes
		 * find it no later */
		if ((flags & TWC_OBSERVE_UNTIL_SETTLED) &&
		    ((c->o->pipe[0] && c->read_id <= 0) ||
		     (!c->o->accept[0] && c->nfds > 0 && twc_raw_wait_closed(c->fds[0], 1) == 1))) {
			long long grace = twc_now_ms() + TWC_OBSERVE_GRACE_MS;
			if (grace < deadline)
				deadline = grace;
		}
	}
}

/* ---- running one case ----------------------------------------------------------------- */

/* Does a well-formed client still get accepted? */
static void probe_listener(ctx *c, int window_ms)
{
	json_int_t id = c->accept_id;
	if (c->o->accept[0]) {
		json_t *r = twc_adapter_request(c->a, json_pack("{s:s,s:s}", "cmd", "accept",
		                                               "listener", c->lid),
		                               5000, c->err, sizeof(c->err));
		if (!r) {
			snprintf(c->o->listener, sizeof(c->o->listener), "no answer to accept: %.150s",
			         c->err);
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
	int fd = twc_raw_connect(c->url, 2000, c->err, sizeof(c->err));
	if (fd < 0) {
		snprintf(c->o->listener, sizeof(c->o->listener), "dead (%.150s)", c->err);
		return;
	}
	unsigned char h[32];
	size_t hn = twc_raw_hello("probe", h, sizeof(h));
	if (twc_raw_send_frame(fd, h, hn, c->err, sizeof(c->err)) == 0)
		(void)twc_raw_send_frame(fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len,
		                        c->err, sizeof(c->err));
	/* a live listener answers at once, so a longer wait costs only a dead
	 * one; an IUT still busy with the hostile input (stock decodes a 3 MB
	 * Brochure for over a second) is not taken for dead */
	json_t *ev = twc_adapter_event(c->a, id, "accept", window_ms > 4000 ? window_ms : 4000,
	                               c->err, sizeof(c->err));
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

static void classify(const ctx *c, twc_raw_obs *o)
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

int twc_raw_run(const char *cmd, const char *label_id, const twc_raw_input *rc, int window_ms,
               twc_raw_obs *o)
{
	ctx c = {.o = o};
	memset(o, 0, sizeof(*o));
	snprintf(o->process, sizeof(o->process), "alive");
	char label[64];
	snprintf(label, sizeof(label), "iut[%s]", label_id);
	c.a = twc_adapter_spawn(cmd, label, c.err, sizeof(c.err));
	if (!c.a) {
		snprintf(o->note, sizeof(o->note), "%.250s", c.err);
		return -1;
	}
	json_t *r;
	if (!(r = call(&c, json_pack("{s:s}", "cmd", "hello"))))
		goto err;
	json_decref(r);
	json_t *creq = json_pack("{s:s,s:s,s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "cmd", "context",
	                         "name", "server", "transports", "name", "uv", "kind", "uv",
	                         "priority", 0, "channels", "name", "basic", "kind", "basic",
	                         "priority", 0);
	if (rc->channel) /* cma: allowed to be copied from under YAMA scope 1 too */
		json_array_append_new(json_object_get(creq, "channels"),
		                      json_pack("{s:s,s:s,s:i,s:o}", "name", rc->channel, "kind",
		                                rc->channel, "priority", 10, "options",
		                                strcmp(rc->channel, "cma")
		                                    ? json_object()
		                                    : json_pack("{s:b}", "ptracer_any", 1)));
	if (rc->handshake_timeout_ms > 0) {
		json_object_set_new(creq, "handshake_timeout_ms",
		                    json_integer(rc->handshake_timeout_ms));
		if (window_ms < rc->handshake_timeout_ms + 3000)
			window_ms = rc->handshake_timeout_ms + 3000;
	}
	if (!(r = call(&c, creq)))
		goto err;
	/* An adapter that cannot honour a setting says so (spec/agent.md 6.2). */
	size_t ui;
	json_t *u;
	json_array_foreach(json_object_get(r, "unhonoured"), ui, u) {
		twc_raw_note(&c, "the IUT cannot honour %s: %.180s",
		      json_string_value(json_object_get(u, "name")) ?: "?",
		      json_string_value(json_object_get(u, "reason")) ?: "");
	}
	json_decref(r);
	if (!(r = call(&c, json_pack("{s:s,s:[s]}", "cmd", "listen", "urls", "uv://127.0.0.1:0"))))
		goto err;
	snprintf(c.url, sizeof(c.url), "%s",
	         json_string_value(json_array_get(json_object_get(r, "urls"), 0)) ?: "");
	snprintf(c.lid, sizeof(c.lid), "%s", json_string_value(json_object_get(r, "listener")) ?: "");
	json_decref(r);
	if (!(r = call(&c, json_pack("{s:s,s:s}", "cmd", "accept", "listener", c.lid))))
		goto err;
	c.accept_id = json_integer_value(json_object_get(r, "id"));
	json_decref(r);

	(void)rc->send(&c);
	twc_raw_observe(&c, window_ms, TWC_OBSERVE_UNTIL_SETTLED);
	/* Was the raw client's first connection dropped by the server? */
	if (c.nfds > 0)
		o->conn_dropped = twc_raw_wait_closed(c.fds[0], alive(&c) ? 100 : 0) == 1;
	if (alive(&c)) {
		probe_listener(&c, window_ms);
		twc_raw_observe(&c, 50, 0);
	}
	if (!alive(&c) && !o->listener[0])
		snprintf(o->listener, sizeof(o->listener), "n/a (process gone)");
	if (alive(&c)) {
		r = twc_adapter_request(c.a, json_pack("{s:s}", "cmd", "shutdown"), 10000, c.err,
		                       sizeof(c.err));
		if (!r) {
			size_t l = strlen(o->note);
			snprintf(o->note + l, sizeof(o->note) - l, "%sshutdown did not complete: %.150s",
			         l ? "; " : "", c.err);
		}
		json_decref(r);
		if (twc_adapter_finish(c.a, 10000, c.err, sizeof(c.err)) != 0) {
			size_t l = strlen(o->note);
			snprintf(o->note + l, sizeof(o->note) - l, "%sexit: %.150s", l ? "; " : "",
			         c.err);
		}
	}
	for (int i = 0; i < c.nfds; i++)
		close(c.fds[i]);
	pick_stderr_line(twc_adapter_stderr(c.a), o->stderr_line, sizeof(o->stderr_line));
	classify(&c, o);
	twc_adapter_destroy(c.a);
	return 0;
err:
	snprintf(o->note, sizeof(o->note), "setup failed: %.200s", c.err);
	twc_adapter_destroy(c.a);
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

bool twc_raw_as_stock(const twc_raw_input *rc, const twc_raw_obs *o)
{
	return !strcmp(o->klass, rc->stock_class) && stderr_matches(o->stderr_line, rc->stock_stderr);
}

bool twc_raw_robust(const twc_raw_input *rc, const twc_raw_obs *o, char *why, size_t whylen)
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
