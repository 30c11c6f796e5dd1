/*
 * scenarios.c - tw-faults, the fault scenarios: two adapters (spec/agent.md)
 * of any implementations, each started through twfault-run with its own
 * fault plan, and what a user of a pipe would check afterwards:
 *
 *   tw-faults t18 CASE   ...  T18 cheap variant: the interop case with every
 *                             socket transfer capped at 4093 bytes and random
 *                             EINTR and EAGAIN in both adapters; bytes intact
 *   tw-faults reset      ...  the client's connection is reset after 1 MiB of
 *                             an 8 MiB tensor: both pipes fail (reset or eof),
 *                             each callback once, later operations fail too
 *   tw-faults emfile     ...  the server's first accept() fails with EMFILE:
 *                             the queued connection is still served, and so
 *                             is the next one
 *   tw-faults sweep      ...  failcall=N on one side of a small session, for
 *                             N = 1, 2, ... until no fault fires: every run
 *                             ends with each callback once, clean exits
 *
 * Common options: --run PATH (twfault-run), --client CMD, --server CMD,
 * --client-name N, --server-name N, --dir DIR (reports), --expect-fail TEXT
 * (the observed behaviour of an implementation that does not pass: PASS only
 * if the scenario fails with TEXT in its reason; "a|b" accepts either). Exit
 * 0 PASS, 1 FAIL, 77 SKIP.
 *
 * It must not trust the shim blindly: every scenario reads the shim's
 * reports and fails when the faults it needs did not fire.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adapter_proc.h"
#include "agent.h"
#include "cases.h"
#include "session.h"

#define EXIT_SKIP 77
#define KiB 1024u
#define MiB (1024u * 1024u)

typedef struct opts {
	const char *run, *client, *server, *cname, *sname, *dir, *expect_fail;
	const char *side; /* sweep: which side gets the fault */
	int max_runs;
	int first_run; /* sweep: the first N (to repeat one run) */
	int wait_s;
} opts;

/* ---- small helpers ----------------------------------------------------------------------- */

static char g_reason[TWC_REASON_MAX];

static int failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int failf(const char *fmt, ...)
{
	if (g_reason[0])
		return -1; /* the first failure wins */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_reason, sizeof(g_reason), fmt, ap);
	va_end(ap);
	return -1;
}

/* "RUN --spec SPEC --report FILE -- IUT" for /bin/sh; an unavailable IUT
 * stays as it is (the session turns it into a SKIP). */
static char *wrap(const opts *o, const char *iut, const char *spec, const char *report)
{
	char *out = NULL;
	if (strncmp(iut, "unavailable:", 12) == 0)
		return strdup(iut);
	/* TWFAULT_VERBOSE=1: every injected fault on the adapter's stderr */
	const char *v = getenv("TWFAULT_VERBOSE");
	bool verbose = v && !strcmp(v, "1");
	if (asprintf(&out, "'%s' --spec '%s%s' --report '%s' -- %s", o->run, spec,
	             verbose ? ",verbose=1" : "", report, iut) < 0)
		return NULL;
	return out;
}

static void report_path(const opts *o, const char *name, char *out, size_t len)
{
	snprintf(out, len, "%s/%s.txt", o->dir, name);
	(void)unlink(out); /* the shim appends */
}

/* The counter `key` from the last summary line in the report at path. */
static int report_get(const char *path, const char *key, uint64_t *val)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return failf("no twfault report at %s (was the shim loaded?): %s", path, strerror(errno));
	char line[1024], last[1024] = "";
	while (fgets(line, sizeof(line), f))
		snprintf(last, sizeof(last), "%s", line);
	fclose(f);
	char pat[64];
	snprintf(pat, sizeof(pat), " %s=", key);
	const char *p = strstr(last, pat);
	if (!p)
		return failf("twfault report %s has no '%s' count: %s", path, key, last);
	*val = strtoull(p + strlen(pat), NULL, 10);
	return 0;
}

static bool cmd_unavailable(const opts *o, const char **why)
{
	return twc_cmd_unavailable(o->client, why) || twc_cmd_unavailable(o->server, why);
}

/* Waits for the event of `id`: 1 = "ok": true, 0 = an error event (its kind
 * in kind_out), -1 = no event in time or the adapter died (reason set). */
static int wait_event(twc_session *s, twc_adapter *a, json_int_t id, const char *name, int ms,
                      char *kind_out, size_t kindlen, json_t **ev_out)
{
	char err[2048];
	json_t *ev = twc_adapter_event(a, id, name, ms, err, sizeof(err));
	if (!ev)
		return failf("%s", err);
	int ok = json_is_true(json_object_get(ev, "ok")) ? 1 : 0;
	if (kind_out)
		snprintf(kind_out, kindlen, "%s", ok ? "" : (twc_event_error_kind(ev) ?: "?"));
	if (!ok)
		printf("# %s: %s failed: %s (%s)\n", twc_adapter_label(a), name, twc_event_error_text(ev),
		       twc_event_error_kind(ev) ?: "?");
	if (ev_out)
		*ev_out = ev;
	else
		json_decref(ev);
	return ok;
}

static bool kind_is_end(const char *k)
{
	return !strcmp(k, "reset") || !strcmp(k, "eof");
}

static json_int_t arm(twc_session *s, twc_adapter *a, json_t *req)
{
	json_int_t id = twc_session_arm(s, a, req);
	if (id < 0)
		failf("%s", s->reason);
	return id;
}

static json_t *write_req(const char *pipe, const twc_agent_msg *m)
{
	return json_pack("{s:s,s:s,s:o}", "cmd", "write", "pipe", pipe, "message", twc_msg_json(m));
}

static json_t *pipe_req(const char *cmd, const char *pipe)
{
	return json_pack("{s:s,s:s}", "cmd", cmd, "pipe", pipe);
}

/* One tensor of `len` bytes with a target device, seeds from `base`. */
static int one_tensor(twc_agent_msg *m, uint64_t len, uint64_t base)
{
	memset(m, 0, sizeof(*m));
	m->metadata.len = 16;
	m->num_tensors = 1;
	if (!(m->tensors = calloc(1, sizeof(*m->tensors))))
		return -1;
	m->tensors[0].data.len = len;
	m->tensors[0].metadata.len = 8;
	(void)twc_agent_device_parse("cpu:0", &m->tensors[0].source_device);
	m->tensors[0].has_target_device = true;
	(void)twc_agent_device_parse("cpu:0", &m->tensors[0].target_device);
	twc_msg_assign_seeds(m, base);
	return 0;
}

/* Reads one message on `pipe` of `a` and checks it against m: 1 intact, 0 an
 * error event (kind in kind_out), -1 a failure (reason set). */
static int read_message(twc_session *s, twc_adapter *a, const char *pipe, const twc_agent_msg *m,
                        int ms, char *kind_out, size_t kindlen)
{
	char why[1024];
	json_int_t rd = arm(s, a, pipe_req("read_descriptor", pipe));
	if (rd < 0)
		return -1;
	json_t *ev;
	int r = wait_event(s, a, rd, "read_descriptor", ms, kind_out, kindlen, &ev);
	if (r <= 0) {
		if (r == 0)
			json_decref(ev);
		return r;
	}
	if (twc_msg_check_descriptor(m, json_object_get(ev, "descriptor"), why, sizeof(why))) {
		json_decref(ev);
		return failf("%s: %s", twc_adapter_label(a), why);
	}
	json_decref(ev);
	json_int_t rdd = arm(s, a, pipe_req("read", pipe));
	if (rdd < 0)
		return -1;
	r = wait_event(s, a, rdd, "read", ms, kind_out, kindlen, &ev);
	if (r == 1 && twc_msg_check_read(m, ev, why, sizeof(why))) {
		json_decref(ev);
		return failf("%s: %s", twc_adapter_label(a), why);
	}
	if (r >= 0)
		json_decref(ev);
	return r;
}

/* The verdict, with --expect-fail turning an observed failure into the
 * expected outcome (and a pass into a failure, so the note gets updated). */
static int verdict(const opts *o, int rc, const char *what)
{
	if (rc == 0 && g_reason[0] == '\0') {
		if (o->expect_fail) {
			printf("FAIL: %s passed, but it was expected to fail with '%s': the "
			       "implementation changed; update docs/faults.md and the test\n",
			       what, o->expect_fail);
			return 1;
		}
		printf("PASS: %s\n", what);
		return 0;
	}
	if (o->expect_fail) {
		/* TEXT may list alternatives, "a|b": one observed failure or the
		 * other (a stock peer whose death depends on timing) */
		bool hit = false;
		const char *p = o->expect_fail;
		while (!hit && *p) {
			size_t n = strcspn(p, "|");
			char alt[512];
			snprintf(alt, sizeof(alt), "%.*s", (int)n, p);
			hit = n > 0 && strstr(g_reason, alt);
			p += n + (p[n] == '|');
		}
		if (hit) {
			printf("PASS: %s fails as recorded in docs/faults.md (expected: %s): %s\n", what,
			       o->expect_fail, g_reason);
			return 0;
		}
		printf("FAIL: %s: expected a failure mentioning '%s', got: %s\n", what,
		       o->expect_fail, g_reason);
		return 1;
	}
	printf("FAIL: %s: %s\n", what, g_reason);
	return 1;
}

/* Starts the session; the commands are already wrapped. */
static int start(twc_session *s, const opts *o, const char *ccmd, const char *scmd)
{
	if (twc_session_start(s, ccmd, scmd, o->cname, o->sname, o->wait_s * 1000, NULL, NULL))
		return failf("%s", s->reason);
	return 0;
}

static int finish(twc_session *s)
{
	if (twc_session_finish(s))
		return failf("ending the session: %s", s->reason);
	return 0;
}

/* ---- T18 cheap variant ------------------------------------------------------------------------ */

#define T18_SPEC "short=4093,eintr=0.05,eagain=0.05"

static int scenario_t18(const opts *o, const char *case_id)
{
	const twc_interop_case *c = twc_interop_case_find(case_id);
	if (!c) {
		fprintf(stderr, "tw-faults: no interop case '%s' (tensorwire-conform --list --suite interop)\n", case_id);
		return 2;
	}
	const char *why;
	if (cmd_unavailable(o, &why)) {
		printf("SKIP: %s\n", why);
		return EXIT_SKIP;
	}
	char crep[4096], srep[4096];
	report_path(o, "t18-client", crep, sizeof(crep));
	report_path(o, "t18-server", srep, sizeof(srep));
	char *ccmd = wrap(o, o->client, T18_SPEC ",seed=7", crep);
	char *scmd = wrap(o, o->server, T18_SPEC ",seed=8", srep);
	char reason[TWC_REASON_MAX] = "";
	int rc = ccmd && scmd ? twc_interop_run_case(c, ccmd, scmd, o->cname, o->sname, o->wait_s,
	                                            reason, sizeof(reason), NULL, NULL)
	                      : 1;
	free(ccmd);
	free(scmd);
	if (rc == EXIT_SKIP) {
		printf("SKIP: %s\n", reason);
		return EXIT_SKIP;
	}
	if (rc != 0)
		failf("%s", reason[0] ? reason : "out of memory");
	/* the faults must really have fired, on both sides */
	const char *reps[2] = {crep, srep};
	for (int i = 0; i < 2 && rc == 0; i++) {
		uint64_t shorts = 0, eintr = 0, eagain = 0, in = 0;
		if (report_get(reps[i], "short", &shorts) || report_get(reps[i], "eintr", &eintr) ||
		    report_get(reps[i], "eagain", &eagain) || report_get(reps[i], "bytes_in", &in)) {
			rc = 1;
			break;
		}
		printf("# %s: %" PRIu64 " short transfers, %" PRIu64 " EINTR, %" PRIu64
		       " EAGAIN, %" PRIu64 " bytes in\n",
		       i ? "server" : "client", shorts, eintr, eagain, in);
		if (shorts == 0 || eintr == 0 || eagain == 0)
			rc = failf("the %s's shim injected %" PRIu64 " short, %" PRIu64 " EINTR, %" PRIu64
			           " EAGAIN: the case did not run under the T18 faults",
			           i ? "server" : "client", shorts, eintr, eagain);
	}
	char what[128];
	snprintf(what, sizeof(what), "T18 cheap variant, %s, %s -> %s", case_id, o->cname, o->sname);
	return verdict(o, rc, what);
}

/* ---- reset in the middle of a message --------------------------------------------------------- */

#define RESET_TENSOR (8u * MiB)
#define RESET_AFTER "1m"

static int scenario_reset(const opts *o)
{
	const char *why;
	if (cmd_unavailable(o, &why)) {
		printf("SKIP: %s\n", why);
		return EXIT_SKIP;
	}
	char crep[4096];
	report_path(o, "reset-client", crep, sizeof(crep));
	char *ccmd = wrap(o, o->client, "reset=" RESET_AFTER, crep);
	twc_session s;
	twc_agent_msg m;
	memset(&m, 0, sizeof(m));
	int rc = ccmd ? 0 : failf("out of memory");
	int ms = o->wait_s * 1000;
	char kind[64];
	if (rc == 0)
		rc = start(&s, o, ccmd, o->server);
	if (rc == 0 && twc_session_connect(&s, NULL))
		rc = failf("%s", s.reason);
	if (rc == 0 && one_tensor(&m, RESET_TENSOR, UINT64_C(5) << 36))
		rc = failf("out of memory");
	json_int_t w = -1;
	if (rc == 0 && (w = arm(&s, s.client, write_req(s.cpipe, &m))) < 0)
		rc = -1;
	/* the receiver: descriptor then data, or an error on the way */
	if (rc == 0) {
		int r = read_message(&s, s.server, s.spipe, &m, ms, kind, sizeof(kind));
		if (r == 1)
			rc = failf("%s read the whole %u-byte tensor although its sender's connection "
			           "was reset after " RESET_AFTER,
			           twc_adapter_label(s.server), RESET_TENSOR);
		else if (r == 0 && !kind_is_end(kind))
			rc = failf("%s: the reset pipe failed with kind '%s', expected reset or eof",
			           twc_adapter_label(s.server), kind);
		else if (r < 0)
			rc = -1;
	}
	/* the sender whose connection was reset */
	if (rc == 0) {
		int r = wait_event(&s, s.client, w, "write", ms, kind, sizeof(kind), NULL);
		if (r == 1)
			rc = failf("%s: the write succeeded although its connection was reset after "
			           RESET_AFTER " of %u bytes",
			           twc_adapter_label(s.client), RESET_TENSOR);
		else if (r == 0 && !kind_is_end(kind))
			rc = failf("%s: the reset pipe failed its write with kind '%s', expected reset or "
			           "eof",
			           twc_adapter_label(s.client), kind);
		else if (r < 0)
			rc = -1;
	}
	/* the pipe stays failed on both ends: a new operation fails at once */
	twc_adapter *sides[2] = {s.client, s.server};
	const char *pipes[2] = {s.cpipe, s.spipe};
	for (int i = 0; i < 2 && rc == 0; i++) {
		json_int_t id = arm(&s, sides[i], pipe_req("read_descriptor", pipes[i]));
		int r = id < 0 ? -1 : wait_event(&s, sides[i], id, "read_descriptor", ms, kind,
		                                 sizeof(kind), NULL);
		if (r == 1)
			rc = failf("%s: a read_descriptor on the failed pipe succeeded",
			           twc_adapter_label(sides[i]));
		else if (r == 0 && !kind_is_end(kind))
			rc = failf("%s: a read_descriptor on the failed pipe got kind '%s', expected the "
			           "pipe's error (reset or eof)",
			           twc_adapter_label(sides[i]), kind);
		else if (r < 0)
			rc = -1;
	}
	if (rc == 0)
		rc = finish(&s);
	if (ccmd)
		twc_session_destroy(&s);
	twc_msg_clear(&m);
	free(ccmd);
	uint64_t resets = 0;
	if (rc == 0 && report_get(crep, "reset", &resets) == 0 && resets != 1)
		failf("the client's shim reports %" PRIu64 " resets, expected 1", resets);
	char what[128];
	snprintf(what, sizeof(what), "ECONNRESET after " RESET_AFTER " of an 8 MiB tensor, %s -> %s",
	         o->cname, o->sname);
	return verdict(o, rc, what);
}

/* ---- EMFILE on accept --------------------------------------------------------------------------- */

static int transfer_small(twc_session *s, const char *cpipe, const char *spipe, uint64_t base,
                          int ms)
{
	twc_agent_msg m;
	char kind[64];
	if (one_tensor(&m, 70000, base))
		return failf("out of memory");
	int rc = 0;
	json_int_t w = arm(s, s->client, write_req(cpipe, &m));
	if (w < 0)
		rc = -1;
	if (rc == 0) {
		int r = read_message(s, s->server, spipe, &m, ms, kind, sizeof(kind));
		if (r == 0)
			rc = failf("%s: reading a message on %s failed (%s)", twc_adapter_label(s->server),
			           spipe, kind);
		else if (r < 0)
			rc = -1;
	}
	if (rc == 0 && wait_event(s, s->client, w, "write", ms, kind, sizeof(kind), NULL) != 1)
		rc = failf("%s: writing a message on %s failed (%s)", twc_adapter_label(s->client), cpipe,
		           kind);
	twc_msg_clear(&m);
	return rc;
}

/* How long the first connection may take to be served: ours backs off for
 * 100 ms after an accept error; a listener that has not answered in this
 * time is taken as not answering (the session goes on to see the rest). */
#define EMFILE_FIRST_WAIT_MS 1500

static void note(char *notes, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(char *notes, size_t len, const char *fmt, ...)
{
	size_t used = strlen(notes);
	if (used + 3 >= len)
		return;
	if (used)
		used += (size_t)snprintf(notes + used, len - used, "; ");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(notes + used, len - used, fmt, ap);
	va_end(ap);
}

/* Waits for accept `id` up to ms: 1 served (pipe in out), 0 failed or not in
 * time (described in notes), -1 the adapter is gone (reason set). */
static int wait_accept(twc_session *s, json_int_t id, int ms, const char *which, char *out,
                       size_t outlen, char *notes, size_t nlen)
{
	char err[2048];
	json_t *ev = twc_adapter_event(s->server, id, "accept", ms, err, sizeof(err));
	if (!ev) {
		int st;
		if (twc_adapter_exited(s->server, &st))
			return failf("%s", err);
		note(notes, nlen, "%s connection not served: the accept armed for it had no answer "
		                  "after %d ms", which, ms);
		return 0;
	}
	int ok = json_is_true(json_object_get(ev, "ok"));
	if (ok)
		snprintf(out, outlen, "%s", json_string_value(json_object_get(ev, "pipe")) ?: "");
	else
		note(notes, nlen, "%s connection not served: accept failed: %s (%s)", which,
		     twc_event_error_text(ev), twc_event_error_kind(ev) ?: "?");
	json_decref(ev);
	return ok;
}

static int scenario_emfile(const opts *o)
{
	const char *why;
	if (cmd_unavailable(o, &why)) {
		printf("SKIP: %s\n", why);
		return EXIT_SKIP;
	}
	char srep[4096];
	report_path(o, "emfile-server", srep, sizeof(srep));
	char *scmd = wrap(o, o->server, "emfile=1", srep);
	twc_session s;
	int rc = scmd ? 0 : failf("out of memory");
	int ms = o->wait_s * 1000;
	char c2[64] = "", s2[64] = "", notes[2048] = "";
	if (rc == 0)
		rc = start(&s, o, o->client, scmd);
	/* the first connection meets EMFILE in accept() and stays queued, as
	 * with the kernel's EMFILE: a listener that survives serves it later */
	json_int_t a1 = -1, a2 = -1;
	if (rc == 0 && (a1 = arm(&s, s.server, json_pack("{s:s,s:s}", "cmd", "accept", "listener",
	                                                  s.lid))) < 0)
		rc = -1;
	json_t *r = NULL;
	if (rc == 0 && !(r = twc_session_call(&s, s.client, json_pack("{s:s,s:s}", "cmd", "connect",
	                                                             "url", s.url))))
		rc = failf("%s", s.reason);
	if (r) {
		snprintf(s.cpipe, sizeof(s.cpipe), "%s", json_string_value(json_object_get(r, "pipe")) ?: "");
		json_decref(r);
	}
	int first = -1;
	if (rc == 0 && (first = wait_accept(&s, a1, EMFILE_FIRST_WAIT_MS, "the first (EMFILE)",
	                                    s.spipe, sizeof(s.spipe), notes, sizeof(notes))) < 0)
		rc = -1;
	if (rc == 0 && first == 1)
		rc = transfer_small(&s, s.cpipe, s.spipe, UINT64_C(6) << 36, ms);
	/* not served: what does its client see? (for the record) */
	if (rc == 0 && first == 0 && s.cpipe[0]) {
		json_int_t rd = arm(&s, s.client, pipe_req("read_descriptor", s.cpipe));
		char err[2048];
		json_t *ev = rd < 0 ? NULL
		                    : twc_adapter_event(s.client, rd, "read_descriptor", 1000, err,
		                                       sizeof(err));
		if (rd < 0)
			rc = -1;
		else if (!ev)
			note(notes, sizeof(notes), "its client pipe still waits (no error after 1000 ms)");
		else if (json_is_true(json_object_get(ev, "ok")))
			note(notes, sizeof(notes), "its client pipe read a message nobody sent");
		else
			note(notes, sizeof(notes), "its client pipe failed: %s (%s)",
			     twc_event_error_text(ev), twc_event_error_kind(ev) ?: "?");
		json_decref(ev);
	}
	/* the next connection is served as usual (by the first accept if that
	 * one is still pending) */
	bool a1_pending = rc == 0 && first == 0 && twc_adapter_events_seen(s.server, a1) == 0;
	if (rc == 0 && !a1_pending &&
	    (a2 = arm(&s, s.server, json_pack("{s:s,s:s}", "cmd", "accept", "listener", s.lid))) < 0)
		rc = -1;
	if (rc == 0 && !(r = twc_session_call(&s, s.client, json_pack("{s:s,s:s}", "cmd", "connect",
	                                                             "url", s.url))))
		rc = failf("%s", s.reason);
	if (rc == 0) {
		snprintf(c2, sizeof(c2), "%s", json_string_value(json_object_get(r, "pipe")) ?: "");
		json_decref(r);
		int second = wait_accept(&s, a1_pending ? a1 : a2, ms, "the next", s2, sizeof(s2),
		                         notes, sizeof(notes));
		if (second < 0)
			rc = -1;
		else if (second == 1)
			rc = transfer_small(&s, c2, s2, UINT64_C(7) << 36, ms);
	}
	twc_adapter *sides[2] = {s.client, s.server};
	const char *pipes[2] = {c2, s2};
	for (int i = 0; i < 2 && rc == 0; i++) {
		if (!pipes[i][0])
			continue;
		r = twc_session_call(&s, sides[i], pipe_req("close", pipes[i]));
		if (!r)
			rc = failf("%s", s.reason);
		json_decref(r);
	}
	/* an accept still pending is answered by the shutdown, once */
	if (rc == 0)
		rc = finish(&s);
	if (scmd)
		twc_session_destroy(&s);
	free(scmd);
	uint64_t emfiles = 0;
	if (rc == 0 && report_get(srep, "emfile", &emfiles) == 0 && emfiles != 1)
		failf("the server's shim reports %" PRIu64 " EMFILE faults, expected 1", emfiles);
	if (notes[0])
		failf("%s", notes);
	char what[128];
	snprintf(what, sizeof(what), "EMFILE on the first accept, %s -> %s", o->cname, o->sname);
	return verdict(o, rc, what);
}

/* ---- the failcall sweep ------------------------------------------------------------------------- */

/* One run with failcall=n on one side: a message each way when the pipe
 * lives, every operation's callback once, clean exits. Returns 0 when the run
 * ended well (*fired = whether the fault fired), -1 with the reason set. */
static int sweep_run(const opts *o, bool on_client, uint64_t n, bool *fired)
{
	char rep[4096], spec[64], name[64];
	snprintf(name, sizeof(name), "sweep-%s", on_client ? "client" : "server");
	report_path(o, name, rep, sizeof(rep));
	snprintf(spec, sizeof(spec), "failcall=%" PRIu64, n);
	char *w = wrap(o, on_client ? o->client : o->server, spec, rep);
	if (!w)
		return failf("out of memory");
	const char *ccmd = on_client ? w : o->client, *scmd = on_client ? o->server : w;
	int ms = o->wait_s * 1000;
	twc_session s;
	twc_agent_msg mc, ms_;
	memset(&mc, 0, sizeof(mc));
	memset(&ms_, 0, sizeof(ms_));
	char kind[64];
	int rc = start(&s, o, ccmd, scmd);
	if (rc == 0 && (one_tensor(&mc, 5000, (UINT64_C(8) << 36) + n * 64) ||
	                one_tensor(&ms_, 3000, (UINT64_C(9) << 36) + n * 64)))
		rc = failf("out of memory");
	json_int_t acc = -1, wc = -1, ws = -1;
	if (rc == 0)
		acc = arm(&s, s.server, json_pack("{s:s,s:s}", "cmd", "accept", "listener", s.lid));
	if (acc < 0)
		rc = -1;
	if (rc == 0) {
		/* a connect may fail at once (an error response) or later (events) */
		char err[2048];
		json_t *r = twc_adapter_request(s.client, json_pack("{s:s,s:s}", "cmd", "connect", "url",
		                                                   s.url), ms, err, sizeof(err));
		if (!r)
			rc = failf("%s", err);
		else if (json_is_true(json_object_get(r, "ok")))
			snprintf(s.cpipe, sizeof(s.cpipe), "%s",
			         json_string_value(json_object_get(r, "pipe")) ?: "");
		json_decref(r);
	}
	if (rc == 0 && s.cpipe[0] && (wc = arm(&s, s.client, write_req(s.cpipe, &mc))) < 0)
		rc = -1;
	/* the client's write ends first: written, or failed with its pipe */
	int wr = -2;
	if (rc == 0 && wc >= 0 && (wr = wait_event(&s, s.client, wc, "write", ms, kind,
	                                           sizeof(kind), NULL)) < 0)
		rc = -1;
	/* the accept: prompt when a connection got through; when the client's
	 * pipe already failed there may be none, and shutdown ends it */
	int ar = -2;
	if (rc == 0) {
		json_t *ev = NULL;
		char err[2048];
		int wait = wr == 1 ? ms : 300;
		ev = twc_adapter_event(s.server, acc, "accept", wait, err, sizeof(err));
		if (!ev && wr == 1)
			rc = failf("the client wrote a message but the server accepted nothing: %s", err);
		if (ev) {
			ar = json_is_true(json_object_get(ev, "ok"));
			if (ar)
				snprintf(s.spipe, sizeof(s.spipe), "%s",
				         json_string_value(json_object_get(ev, "pipe")) ?: "");
			json_decref(ev);
		}
	}
	/* the server reads the message (intact or an error) and answers */
	if (rc == 0 && s.spipe[0]) {
		int r = read_message(&s, s.server, s.spipe, &mc, ms, kind, sizeof(kind));
		if (r < 0)
			rc = -1;
		if (r == 1 && (ws = arm(&s, s.server, write_req(s.spipe, &ms_))) < 0)
			rc = -1;
	}
	if (rc == 0 && s.cpipe[0] && wr == 1 &&
	    read_message(&s, s.client, s.cpipe, &ms_, ms, kind, sizeof(kind)) < 0)
		rc = -1;
	if (rc == 0 && ws >= 0 && wait_event(&s, s.server, ws, "write", ms, kind, sizeof(kind), NULL) < 0)
		rc = -1;
	if (rc != 0) {
		printf("# client stderr (last lines):\n%s\n", twc_adapter_stderr(s.client));
		printf("# server stderr (last lines):\n%s\n", twc_adapter_stderr(s.server));
	}
	/* orderly end whatever happened: close what exists, shut down, exit 0,
	 * each callback once */
	if (rc == 0) {
		twc_adapter *sides[2] = {s.client, s.server};
		char *pipes[2] = {s.cpipe, s.spipe};
		for (int i = 0; i < 2 && rc == 0; i++) {
			if (!pipes[i][0])
				continue;
			json_t *r = twc_session_call(&s, sides[i], pipe_req("close", pipes[i]));
			if (!r)
				rc = failf("%s", s.reason);
			json_decref(r);
			pipes[i][0] = '\0';
		}
	}
	if (rc == 0)
		rc = finish(&s);
	twc_session_destroy(&s);
	twc_msg_clear(&mc);
	twc_msg_clear(&ms_);
	free(w);
	uint64_t fc = 0;
	if (rc == 0 && report_get(rep, "failcall", &fc))
		rc = -1;
	*fired = fc > 0;
	if (rc == 0)
		printf("# failcall=%" PRIu64 " on the %s: %s (write %s, accept %s)\n", n,
		       on_client ? "client" : "server", fc ? "fired" : "did not fire",
		       wr == 1 ? "ok" : wr == 0 ? "failed" : "not armed",
		       ar == 1 ? "ok" : ar == 0 ? "failed" : "none");
	return rc;
}

static int scenario_sweep(const opts *o)
{
	const char *why;
	if (cmd_unavailable(o, &why)) {
		printf("SKIP: %s\n", why);
		return EXIT_SKIP;
	}
	bool on_client = !o->side || strcmp(o->side, "server") != 0;
	uint64_t n = (uint64_t)o->first_run;
	int rc = 0;
	bool fired = true;
	for (; fired && n < (uint64_t)o->first_run + (uint64_t)o->max_runs; n++) {
		if (sweep_run(o, on_client, n, &fired)) {
			char tmp[TWC_REASON_MAX];
			snprintf(tmp, sizeof(tmp), "%s", g_reason);
			g_reason[0] = '\0';
			failf("failcall=%" PRIu64 " on the %s: %s", n, on_client ? "client" : "server", tmp);
			rc = -1;
			break;
		}
	}
	if (rc == 0 && fired)
		rc = failf("the fault still fired after %d runs: raise --max-runs", o->max_runs);
	if (rc == 0 && n - (uint64_t)o->first_run < 2)
		rc = failf("failcall=%d did not fire: the sweep tested nothing (is the shim loaded?)",
		           o->first_run);
	char what[128];
	snprintf(what, sizeof(what), "failcall sweep on the %s, %s -> %s, %" PRIu64 " runs",
	         on_client ? "client" : "server", o->cname, o->sname, n - 1);
	return verdict(o, rc, what);
}

/* mkdir -p */
static int mkdir_p(const char *dir)
{
	char buf[4096];
	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* ---- main ------------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f, "usage: tw-faults t18 CASE|reset|emfile|sweep --run TWFAULT_RUN --client CMD "
	           "--server CMD\n"
	           "                 [--client-name N] [--server-name N] [--dir DIR] [--wait-s S]\n"
	           "                 [--expect-fail TEXT] [--side client|server] [--first-run N] [--max-runs N]\n"
	           "Runs one fault scenario (see the head of faults/scenarios/scenarios.c and "
	           "docs/faults.md).\n"
	           "Exit: 0 PASS, 1 FAIL, 77 SKIP, 2 usage.\n");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	opts o = {.cname = "client", .sname = "server", .dir = ".", .wait_s = 20, .max_runs = 200,
	          .first_run = 1};
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *what = argv[1], *case_id = NULL;
	int i = 2;
	if (!strcmp(what, "-h") || !strcmp(what, "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(what, "t18")) {
		if (argc < 3) {
			usage(stderr);
			return 2;
		}
		case_id = argv[i++];
	}
	for (; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "tw-faults: option '%s' needs a value\n", a);
			return 2;
		}
		if (!strcmp(a, "--run"))
			o.run = v;
		else if (!strcmp(a, "--client"))
			o.client = v;
		else if (!strcmp(a, "--server"))
			o.server = v;
		else if (!strcmp(a, "--client-name"))
			o.cname = v;
		else if (!strcmp(a, "--server-name"))
			o.sname = v;
		else if (!strcmp(a, "--dir"))
			o.dir = v;
		else if (!strcmp(a, "--expect-fail"))
			o.expect_fail = v;
		else if (!strcmp(a, "--side"))
			o.side = v;
		else if (!strcmp(a, "--wait-s"))
			o.wait_s = atoi(v);
		else if (!strcmp(a, "--max-runs"))
			o.max_runs = atoi(v);
		else if (!strcmp(a, "--first-run"))
			o.first_run = atoi(v);
		else {
			fprintf(stderr, "tw-faults: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		}
		i++;
	}
	if (!o.run || !o.client || !o.server || o.wait_s <= 0 || o.max_runs <= 0 || o.first_run <= 0) {
		usage(stderr);
		return 2;
	}
	if (mkdir_p(o.dir) != 0) {
		fprintf(stderr, "tw-faults: mkdir %s: %s\n", o.dir, strerror(errno));
		return 2;
	}
	if (case_id)
		return scenario_t18(&o, case_id);
	if (!strcmp(what, "reset"))
		return scenario_reset(&o);
	if (!strcmp(what, "emfile"))
		return scenario_emfile(&o);
	if (!strcmp(what, "sweep"))
		return scenario_sweep(&o);
	fprintf(stderr, "tw-faults: unknown scenario '%s'\n", what);
	usage(stderr);
	return 2;
}
