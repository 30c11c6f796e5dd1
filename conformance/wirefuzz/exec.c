/*
 * exec.c - one live implementation under test, driven through its adapter
 * (spec/agent.md), and the running and judging of one input (README.md,
 * "What is checked after each input").
 *
 * The driver plays a plain application: as a server it always has an accept
 * armed and, on every pipe it accepts, writes message OUT and reads every
 * message (read_descriptor, read, again); as a client it connects to the
 * fuzzer's raw listener, writes OUT and reads the same way. The raw side runs
 * the script step by step, pumping the adapter while it waits, and stops at
 * the first step that cannot be carried out (the IUT closed, said nothing
 * within the step bound, or sent something unparsable where the script needs
 * a value from it).
 *
 * After the script every raw connection is closed and the input is judged:
 * is the process alive; do its operations on that input's pipes complete
 * (they must fail once every connection is gone); after closing those pipes,
 * did every callback fire exactly once; and is a fresh well-formed peer still
 * fully served (the good check: the base scenario, every byte and checksum
 * verified). It must not decide anything about deduplication or files:
 * fuzz.c does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rawpeer.h"
#include "session.h"
#include "wf.h"

#define MAX_PIPES 16
#define MAX_IDS 32

typedef struct drv_pipe {
	char name[32];
	bool good;               /* belongs to a good check: verify what arrives */
	json_int_t write_id, rd_id, read_id;  /* armed and not reported yet (0 = none) */
	json_int_t ids[MAX_IDS]; /* every request that armed a callback on this pipe */
	int nids;
	int writes_ok, rds_ok, reads_ok;
	bool closed;             /* the harness asked the adapter to close it */
	char err[256];           /* the first operation that failed, or was refused */
	char kind[32];           /* the error kind of the first failed callback */
	char bad[320];           /* good check: what arrived wrong */
} drv_pipe;

struct wf_iut {
	twc_adapter *a;
	wf_role role;
	wf_opts o;
	char cmd[2048];
	char version[160];
	/* server role */
	char url[160], lid[32];
	json_int_t accept_id;
	char accept_err[256];
	/* client role */
	int lfd, port;
	char addr[64];
	/* the current input */
	drv_pipe pipes[MAX_PIPES];
	int npipes;
	int conns[WF_MAX_CONNS];
	twc_raw_answer ans;
	bool have_ans;
	bool unresponsive;       /* a request got no response in time */
	int input_first;         /* pipes [input_first, npipes) belong to the running script */
	char err[2048];
};

static const char *const kind_names[] = {"none", "crash", "listener", "hang", "callback", "leak",
                                         "pending"};

const char *wf_kind_name(wf_kind k)
{
	return (unsigned)k < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[k] : "?";
}

void wf_opts_default(wf_opts *o)
{
	o->step_ms = 600;
	o->settle_ms = 2000;
	o->check_ms = 5000;
	o->fail_wait_ms = 0;
	o->verbose = false;
}

const char *wf_iut_addr(const wf_iut *iut)
{
	return iut->addr;
}

const char *wf_iut_version(const wf_iut *iut)
{
	return iut->version;
}

const char *wf_iut_stderr(const wf_iut *iut)
{
	return twc_adapter_stderr(iut->a);
}

bool wf_iut_alive(wf_iut *iut)
{
	return !twc_adapter_exited(iut->a, NULL);
}

/* ---- requests ------------------------------------------------------------------------ */

/* TW_WIREFUZZ_TRACE=1: every request, response and event with a timestamp
 * on stdout, to debug the harness or an IUT's timing. */
static int trace_on = -1;

static void trace(const char *what, const json_t *j)
{
	if (trace_on < 0)
		trace_on = getenv("TW_WIREFUZZ_TRACE") != NULL;
	if (!trace_on)
		return;
	char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
	printf("%lld %s %.300s\n", twc_now_ms(), what, t ? t : "");
	free(t);
}

static json_t *request(wf_iut *iut, json_t *req)
{
	trace(">", req);
	json_t *r = twc_adapter_request(iut->a, req, iut->o.check_ms, iut->err, sizeof(iut->err));
	trace(r ? "<" : "< (no response)", r);
	if (!r && wf_iut_alive(iut))
		iut->unresponsive = true;
	return r;
}

static void event_text(const json_t *ev, char *buf, size_t len)
{
	const json_t *e = json_object_get(ev, "error");
	snprintf(buf, len, "%s: %s", json_string_value(json_object_get(e, "kind")) ?: "?",
	         json_string_value(json_object_get(e, "text")) ?: "");
}

static void note_kind(drv_pipe *p, const json_t *ev)
{
	if (!p->kind[0])
		snprintf(p->kind, sizeof(p->kind), "%s",
		         json_string_value(json_object_get(json_object_get(ev, "error"), "kind")) ?: "?");
}

static void pipe_note(drv_pipe *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pipe_note(drv_pipe *p, const char *fmt, ...)
{
	if (p->err[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err, sizeof(p->err), fmt, ap);
	va_end(ap);
}

/* Arms one operation on pipe p; returns its id, 0 when refused (noted). */
static json_int_t arm(wf_iut *iut, drv_pipe *p, json_t *req, const char *what)
{
	json_t *r = request(iut, req);
	if (!r) {
		pipe_note(p, "%s: no response (%.200s)", what, iut->err);
		return 0;
	}
	json_int_t id = json_integer_value(json_object_get(r, "id"));
	if (!json_is_true(json_object_get(r, "ok"))) {
		char t[200];
		event_text(r, t, sizeof(t));
		pipe_note(p, "%s refused: %s", what, t);
		json_decref(r);
		return 0;
	}
	json_decref(r);
	if (p->nids < MAX_IDS)
		p->ids[p->nids++] = id;
	return id;
}

static json_int_t arm_rd(wf_iut *iut, drv_pipe *p)
{
	return arm(iut, p, json_pack("{s:s,s:s}", "cmd", "read_descriptor", "pipe", p->name),
	           "read_descriptor");
}

static drv_pipe *new_pipe(wf_iut *iut, const char *name, bool good)
{
	if (iut->npipes == MAX_PIPES)
		return NULL;
	drv_pipe *p = &iut->pipes[iut->npipes++];
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->good = good;
	/* the application's side: write OUT, read whatever comes */
	p->write_id = arm(iut, p, json_pack("{s:s,s:s,s:o}", "cmd", "write", "pipe", name, "message",
	                                    twc_msg_json(wf_msg(WF_MSG_OUT))),
	                  "write");
	p->rd_id = arm_rd(iut, p);
	return p;
}

static void arm_accept(wf_iut *iut)
{
	iut->accept_id = 0;
	json_t *r = request(iut, json_pack("{s:s,s:s}", "cmd", "accept", "listener", iut->lid));
	if (!r)
		return;
	if (json_is_true(json_object_get(r, "ok")))
		iut->accept_id = json_integer_value(json_object_get(r, "id"));
	else
		event_text(r, iut->accept_err, sizeof(iut->accept_err));
	json_decref(r);
}

/* Pipes accepted during a good check are its candidates (drv_pipe.good). */
static bool good_check_active;

/* Is candidate `name` the good check's own pipe? Its client's hello named
 * the context WF_GOOD_CHECK_NAME (wf_build_base). A pipe of an earlier input
 * whose accept came late is a candidate too, but never established, or not
 * under that name (tensorwire issue 17: such a pipe, taken for the good
 * check's, failed wire.fuzz_truncated_read_server_4 and _9 once each against
 * a slow implementation). Asked once the candidate has done its part, when
 * it must be established. */
static bool is_good_check_pipe(wf_iut *iut, const char *name)
{
	json_t *r = request(iut, json_pack("{s:s,s:s}", "cmd", "info", "pipe", name));
	bool good = r && json_is_true(json_object_get(r, "ok")) &&
	            !strcmp(json_string_value(json_object_get(r, "remote_name")) ?: "",
	                    WF_GOOD_CHECK_NAME);
	json_decref(r);
	return good;
}

/* Reacts to every event received so far. */
static void drive(wf_iut *iut)
{
	json_t *ev;
	char t[256];
	if (iut->role == WF_SERVER && iut->accept_id > 0 &&
	    twc_adapter_events_seen(iut->a, iut->accept_id) > 0 &&
	    (ev = twc_adapter_event(iut->a, iut->accept_id, "accept", 0, t, sizeof(t)))) {
		trace("event", ev);
		if (json_is_true(json_object_get(ev, "ok"))) {
			char name[32];
			snprintf(name, sizeof(name), "%s",
			         json_string_value(json_object_get(ev, "pipe")) ?: "");
			json_decref(ev);
			arm_accept(iut);
			if (name[0])
				(void)new_pipe(iut, name, good_check_active);
		} else {
			event_text(ev, iut->accept_err, sizeof(iut->accept_err));
			json_decref(ev);
			arm_accept(iut);
		}
	}
	for (int i = 0; i < iut->npipes; i++) {
		drv_pipe *p = &iut->pipes[i];
		if (p->write_id > 0 && twc_adapter_events_seen(iut->a, p->write_id) > 0 &&
		    (ev = twc_adapter_event(iut->a, p->write_id, "write", 0, t, sizeof(t)))) {
			trace("event", ev);
			p->write_id = 0;
			if (json_is_true(json_object_get(ev, "ok"))) {
				p->writes_ok++;
			} else {
				event_text(ev, t, sizeof(t));
				pipe_note(p, "write: %s", t);
				note_kind(p, ev);
			}
			json_decref(ev);
		}
		if (p->rd_id > 0 && twc_adapter_events_seen(iut->a, p->rd_id) > 0 &&
		    (ev = twc_adapter_event(iut->a, p->rd_id, "read_descriptor", 0, t, sizeof(t)))) {
			trace("event", ev);
			p->rd_id = 0;
			if (json_is_true(json_object_get(ev, "ok"))) {
				char why[256];
				const twc_agent_msg *want = wf_msg(p->rds_ok == 0 ? WF_MSG_A : WF_MSG_B);
				if (p->good && p->rds_ok < 2 && !p->bad[0] &&
				    twc_msg_check_descriptor(want, json_object_get(ev, "descriptor"), why,
				                            sizeof(why)))
					snprintf(p->bad, sizeof(p->bad), "message %d: %s", p->rds_ok, why);
				p->rds_ok++;
				p->read_id = arm(iut, p, json_pack("{s:s,s:s}", "cmd", "read", "pipe", p->name),
				                 "read");
			} else {
				event_text(ev, t, sizeof(t));
				pipe_note(p, "read_descriptor: %s", t);
				note_kind(p, ev);
			}
			json_decref(ev);
		}
		if (p->read_id > 0 && twc_adapter_events_seen(iut->a, p->read_id) > 0 &&
		    (ev = twc_adapter_event(iut->a, p->read_id, "read", 0, t, sizeof(t)))) {
			trace("event", ev);
			p->read_id = 0;
			if (json_is_true(json_object_get(ev, "ok"))) {
				char why[256];
				const twc_agent_msg *want = wf_msg(p->reads_ok == 0 ? WF_MSG_A : WF_MSG_B);
				if (p->good && p->reads_ok < 2 && !p->bad[0] &&
				    twc_msg_check_read(want, ev, why, sizeof(why)))
					snprintf(p->bad, sizeof(p->bad), "message %d: %s", p->reads_ok, why);
				p->reads_ok++;
				p->rd_id = arm_rd(iut, p);
			} else {
				event_text(ev, t, sizeof(t));
				pipe_note(p, "read: %s", t);
				note_kind(p, ev);
			}
			json_decref(ev);
		}
	}
}

static bool pipe_busy(const drv_pipe *p)
{
	return p->write_id > 0 || p->rd_id > 0 || p->read_id > 0;
}

/* Pumps the adapter and the driver for up to ms. */
static void run_for(wf_iut *iut, int ms)
{
	long long end = twc_now_ms() + ms;
	do {
		twc_adapter_pump(ms > 5 ? 5 : ms);
		drive(iut);
	} while (twc_now_ms() < end && wf_iut_alive(iut));
}

/* ---- raw I/O with the adapter pumped meanwhile ---------------------------------------- */

/* Has the IUT given up on every pipe of the running script (each failed, with
 * nothing pending)? Then it will send nothing more. */
static bool input_dead(const wf_iut *iut)
{
	if (iut->npipes <= iut->input_first)
		return false;
	for (int i = iut->input_first; i < iut->npipes; i++)
		if (!iut->pipes[i].err[0] || pipe_busy(&iut->pipes[i]))
			return false;
	return true;
}

/* 1 when fd is ready for `events` before the deadline, 0 otherwise (also
 * early, when waiting to read and the IUT has failed the script's pipes). */
static int io_wait(wf_iut *iut, int fd, short events, long long deadline)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, 3);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return 0;
		twc_adapter_pump(0);
		drive(iut);
		if (twc_now_ms() >= deadline)
			return 0;
		if (!wf_iut_alive(iut))
			return poll(&p, 1, 0) > 0;
		if (events == POLLIN && input_dead(iut)) {
			/* one last look, then give up */
			return poll(&p, 1, 0) > 0;
		}
	}
}

static int send_all(wf_iut *iut, int fd, const uint8_t *b, size_t n, long long deadline,
                    char *why, size_t whylen)
{
	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			if (!io_wait(iut, fd, POLLOUT, deadline)) {
				snprintf(why, whylen, "the IUT reads nothing: %zu bytes left unsent", n);
				return -1;
			}
			continue;
		}
		if (w < 0) {
			snprintf(why, whylen, "send: %s", strerror(errno));
			return -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads exactly n bytes by the deadline. Not rawpeer's twc_raw_recv_exact:
 * between reads this watches the IUT itself (io_wait), so a read that comes
 * up short says why (the IUT failed the input's pipe, its process ended, or
 * it went quiet), which is what a fuzzing finding needs. */
static int recv_all(wf_iut *iut, int fd, uint8_t *b, size_t n, long long deadline, char *why,
                    size_t whylen)
{
	size_t got = 0;
	while (got < n) {
		if (!io_wait(iut, fd, POLLIN, deadline)) {
			if (input_dead(iut))
				snprintf(why, whylen, "nothing more (%zu of %zu bytes): the IUT failed the pipe "
				         "(%.200s)", got, n, iut->pipes[iut->input_first].err);
			else if (!wf_iut_alive(iut))
				snprintf(why, whylen, "nothing more (%zu of %zu bytes): the process ended", got,
				         n);
			else
				snprintf(why, whylen, "nothing within %d ms (%zu of %zu bytes)", iut->o.step_ms,
				         got, n);
			return -1;
		}
		ssize_t r = recv(fd, b + got, n - got, MSG_DONTWAIT);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r == 0) {
			snprintf(why, whylen, "the IUT closed the connection (%zu of %zu bytes)", got, n);
			return -1;
		}
		if (r < 0) {
			snprintf(why, whylen, "recv: %s", strerror(errno));
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

#define MAX_IUT_FRAME (1u << 20)

/* One frame from the IUT into a malloc'd buffer. */
static long recv_frame(wf_iut *iut, int fd, uint8_t **body, int timeout_ms, char *why,
                       size_t whylen)
{
	long long deadline = twc_now_ms() + timeout_ms;
	uint8_t h[8];
	*body = NULL;
	if (recv_all(iut, fd, h, 8, deadline, why, whylen))
		return -1;
	uint64_t len = 0;
	for (int i = 0; i < 8; i++)
		len |= (uint64_t)h[i] << (8 * i);
	if (len > MAX_IUT_FRAME) {
		snprintf(why, whylen, "the IUT sent a frame of %" PRIu64 " bytes", len);
		return -1;
	}
	*body = malloc(len ? (size_t)len : 1);
	if (!*body) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	if (recv_all(iut, fd, *body, (size_t)len, deadline, why, whylen)) {
		free(*body);
		*body = NULL;
		return -1;
	}
	return (long)len;
}

static void set_nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int accept_conn(wf_iut *iut, int timeout_ms, char *why, size_t whylen)
{
	if (!io_wait(iut, iut->lfd, POLLIN, twc_now_ms() + timeout_ms)) {
		if (input_dead(iut))
			snprintf(why, whylen, "the IUT opened no connection and failed the pipe (%.200s)",
			         iut->pipes[iut->input_first].err);
		else
			snprintf(why, whylen, "the IUT opened no connection within %d ms%s", timeout_ms,
			         wf_iut_alive(iut) ? "" : " (the process ended)");
		return -1;
	}
	int fd = accept4(iut->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0) {
		snprintf(why, whylen, "accept: %s", strerror(errno));
		return -1;
	}
	return fd;
}

/* ---- running a script ---------------------------------------------------------------------- */

/* header + body with the tokens resolved; malloc'd, length in *n. */
static uint8_t *resolve(wf_iut *iut, const wf_step *st, size_t *n, char *why, size_t whylen)
{
	size_t cap = 8 + st->len + WF_MAX_MARKS * 80;
	uint8_t *b = malloc(cap);
	if (!b) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	size_t k = 8;
	for (size_t i = 0; i <= st->len;) {
		const wf_mark *m = NULL;
		for (int j = 0; j < st->nmarks; j++)
			if (st->marks[j].off == i)
				m = &st->marks[j];
		if (m) {
			if ((m->token == WF_TOK_REPLY_ID || m->token == WF_TOK_BASIC_ID) && !iut->have_ans) {
				snprintf(why, whylen, "no BrochureAnswer to take %s from",
				         m->token == WF_TOK_REPLY_ID ? "$reply_id" : "$basic_id");
				free(b);
				return NULL;
			}
			if (m->token == WF_TOK_BASIC_ID && !iut->ans.has_basic) {
				snprintf(why, whylen, "the BrochureAnswer selected no basic channel");
				free(b);
				return NULL;
			}
			if (m->token == WF_TOK_REPLY_ID) {
				k += wf_enc_uint(b + k, iut->ans.reply_id);
			} else if (m->token == WF_TOK_BASIC_ID) {
				k += wf_enc_uint(b + k, iut->ans.basic_id);
			} else {
				size_t al = strlen(iut->addr);
				b[k++] = 0xbd;
				k += wf_enc_uint(b + k, al);
				memcpy(b + k, iut->addr, al);
				k += al;
			}
			if (m->len > 0) {
				i += m->len;
				continue;
			}
		}
		if (i == st->len)
			break;
		b[k++] = st->body[i++];
	}
	uint64_t blen = k - 8;
	uint64_t hdr = st->hdr == WF_HDR_AUTO ? blen : st->hdr == WF_HDR_DELTA
	               ? blen + (uint64_t)st->hdr_delta : st->hdr_value;
	for (int j = 0; j < 8; j++)
		b[j] = (uint8_t)(hdr >> (8 * j));
	*n = k;
	if (st->cut >= 0 && (size_t)st->cut < k)
		*n = (size_t)st->cut;
	return b;
}

static void hexdump(const uint8_t *b, size_t n, char *out, size_t len)
{
	out[0] = '\0';
	size_t k = 0;
	for (size_t i = 0; i < n && k + 4 < len; i++, k += 3)
		snprintf(out + k, len - k, "%02x ", b[i]);
	if (n * 3 + 4 > len && len > 5)
		snprintf(out + len - 5, 5, "...");
}

static int conn_connect(wf_iut *iut, const char *addr, char *why, size_t whylen)
{
	int fd = twc_raw_connect(addr, iut->o.step_ms, why, whylen);
	if (fd >= 0)
		set_nonblock(fd);
	return fd;
}

/* Runs step i; 0, or -1 with the reason (the script stops there). *mismatch
 * is set when the IUT sent other bytes than a good check expects. */
static int run_step(wf_iut *iut, const wf_step *st, char *why, size_t whylen, bool *mismatch)
{
	int c = st->conn;
	switch (st->op) {
	case WF_CONNECT: {
		if (iut->role != WF_SERVER) {
			snprintf(why, whylen, "connect is a server-role step");
			return -1;
		}
		if (iut->conns[c] >= 0)
			close(iut->conns[c]);
		/* later connections go to the answer's address (spec/wire.md 3.7.c) */
		if (c > 0 && !iut->have_ans) {
			snprintf(why, whylen, "no BrochureAnswer, so no address for connection %d", c);
			return -1;
		}
		const char *to = c > 0 && iut->ans.address[0] ? iut->ans.address : iut->url;
		iut->conns[c] = conn_connect(iut, to, why, whylen);
		return iut->conns[c] < 0 ? -1 : 0;
	}
	case WF_ACCEPT:
		if (iut->role != WF_CLIENT) {
			snprintf(why, whylen, "accept is a client-role step");
			return -1;
		}
		if (iut->conns[c] >= 0)
			close(iut->conns[c]);
		iut->conns[c] = accept_conn(iut, iut->o.step_ms, why, whylen);
		return iut->conns[c] < 0 ? -1 : 0;
	case WF_ACCEPT_REQUESTED:
		for (int k = 0; k < st->arg; k++) {
			int fd = accept_conn(iut, iut->o.step_ms, why, whylen);
			if (fd < 0)
				return -1;
			uint8_t *f;
			long n = recv_frame(iut, fd, &f, iut->o.step_ms, why, whylen);
			if (n < 0) {
				close(fd);
				return -1;
			}
			/* RequestedConnection{100} is the descriptor-reply connection, {101}
			 * the basic channel (build.c's answer); anything else goes to 3.. */
			static const uint8_t r100[] = {0xb8, 0x01, 0xb9, 0x01, 0x64};
			static const uint8_t r101[] = {0xb8, 0x01, 0xb9, 0x01, 0x65};
			int slot = -1;
			if (n == 5 && !memcmp(f, r100, 5) && iut->conns[1] < 0)
				slot = 1;
			else if (n == 5 && !memcmp(f, r101, 5) && iut->conns[2] < 0)
				slot = 2;
			for (int s = 3; slot < 0 && s < WF_MAX_CONNS; s++)
				if (iut->conns[s] < 0)
					slot = s;
			free(f);
			if (slot < 0) {
				close(fd);
				snprintf(why, whylen, "too many connections");
				return -1;
			}
			iut->conns[slot] = fd;
		}
		return 0;
	case WF_SEND: {
		if (iut->conns[c] < 0) {
			snprintf(why, whylen, "connection %d is not open", c);
			return -1;
		}
		size_t n;
		uint8_t *b = resolve(iut, st, &n, why, whylen);
		if (!b)
			return -1;
		int rc = send_all(iut, iut->conns[c], b, n, twc_now_ms() + iut->o.step_ms, why, whylen);
		free(b);
		return rc;
	}
	case WF_RECV:
	case WF_RECV_ANSWER: {
		if (iut->conns[c] < 0) {
			snprintf(why, whylen, "connection %d is not open", c);
			return -1;
		}
		uint8_t *f;
		long n = recv_frame(iut, iut->conns[c], &f, iut->o.step_ms, why, whylen);
		if (n < 0)
			return -1;
		int rc = 0;
		if (st->op == WF_RECV_ANSWER) {
			char perr[256];
			if (twc_raw_parse_answer(f, (size_t)n, &iut->ans, perr, sizeof(perr))) {
				snprintf(why, whylen, "%s", perr);
				rc = -1;
			} else {
				iut->have_ans = true;
			}
		} else if (st->expect &&
		           ((size_t)n != st->expect_len || memcmp(f, st->expect, st->expect_len))) {
			char g[200], w[200];
			hexdump(f, (size_t)n, g, sizeof(g));
			hexdump(st->expect, st->expect_len, w, sizeof(w));
			snprintf(why, whylen, "the IUT's %s on connection %d is %ld bytes [%s], expected "
			         "%zu [%s]", st->what, c, n, g, st->expect_len, w);
			*mismatch = true;
			rc = -1;
		}
		free(f);
		return rc;
	}
	case WF_CLOSE:
		if (iut->conns[c] >= 0)
			close(iut->conns[c]);
		iut->conns[c] = -1;
		return 0;
	case WF_WAIT:
		run_for(iut, st->arg);
		return 0;
	}
	return 0;
}

static void close_conns(wf_iut *iut)
{
	for (int c = 0; c < WF_MAX_CONNS; c++) {
		if (iut->conns[c] >= 0)
			close(iut->conns[c]);
		iut->conns[c] = -1;
	}
}

/* Accepts and closes whatever the IUT left in the raw listener's queue. */
static void drain_listener(wf_iut *iut)
{
	if (iut->lfd < 0)
		return;
	for (;;) {
		int fd = accept4(iut->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		close(fd);
	}
}

/* Runs every step; returns the index of the step that stopped it, or nsteps. */
static int run_script(wf_iut *iut, const wf_script *s, char *why, size_t whylen, bool *mismatch)
{
	iut->have_ans = false;
	memset(&iut->ans, 0, sizeof(iut->ans));
	*mismatch = false;
	for (int i = 0; i < s->nsteps; i++) {
		if (!wf_iut_alive(iut)) {
			snprintf(why, whylen, "the IUT process ended");
			return i;
		}
		if (run_step(iut, &s->steps[i], why, whylen, mismatch))
			return i;
		twc_adapter_pump(0);
		drive(iut);
	}
	return s->nsteps;
}

/* ---- starting and stopping ------------------------------------------------------------ */

/* Sanitizer options for the adapters we start (README.md, "Sanitizers"):
 * an allocation the IUT cannot get fails like it does in production (NULL,
 * or std::bad_alloc) rather than by ASan's report, but nothing above 1 GiB is
 * handed out, so that a length field cannot make the machine swap; leaks are
 * reported at exit. Options the caller set already win. */
static void prepare_env(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	static const char *const want[] = {"allocator_may_return_null=1", "max_allocation_size_mb=1024",
	                                   "detect_leaks=1"};
	const char *cur = getenv("ASAN_OPTIONS");
	char buf[2048];
	snprintf(buf, sizeof(buf), "%s", cur ? cur : "");
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char key[64];
		snprintf(key, sizeof(key), "%.*s", (int)strcspn(want[i], "="), want[i]);
		if (strstr(buf, key))
			continue;
		size_t l = strlen(buf);
		snprintf(buf + l, sizeof(buf) - l, "%s%s", l ? ":" : "", want[i]);
	}
	setenv("ASAN_OPTIONS", buf, 1);
}

wf_iut *wf_iut_start(const char *cmd, wf_role role, const wf_opts *o, char *err, size_t errlen)
{
	prepare_env();
	wf_iut *iut = calloc(1, sizeof(*iut));
	if (!iut) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	iut->role = role;
	iut->o = *o;
	iut->lfd = -1;
	for (int c = 0; c < WF_MAX_CONNS; c++)
		iut->conns[c] = -1;
	snprintf(iut->cmd, sizeof(iut->cmd), "%s", cmd);
	if (role == WF_CLIENT) {
		if ((iut->lfd = twc_raw_listen(&iut->port, err, errlen)) < 0)
			goto err;
		set_nonblock(iut->lfd);
		snprintf(iut->addr, sizeof(iut->addr), "127.0.0.1:%d", iut->port);
	}
	iut->a = twc_adapter_spawn(cmd, role == WF_SERVER ? "iut-server" : "iut-client", err, errlen);
	if (!iut->a)
		goto err;
	json_t *r = twc_adapter_call(iut->a, json_pack("{s:s}", "cmd", "hello"), o->check_ms, err,
	                            errlen);
	if (!r)
		goto err;
	snprintf(iut->version, sizeof(iut->version), "%s %s",
	         json_string_value(json_object_get(r, "impl")) ?: "?",
	         json_string_value(json_object_get(r, "version")) ?: "?");
	json_decref(r);
	r = twc_adapter_call(iut->a,
	                    json_pack("{s:s,s:s,s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "cmd",
	                              "context", "name", role == WF_SERVER ? "wirefuzz-iut-server"
	                                                                   : "wirefuzz-iut",
	                              "transports", "name", "uv", "kind", "uv", "priority", 0,
	                              "channels", "name", "basic", "kind", "basic", "priority", 0),
	                    o->check_ms, err, errlen);
	if (!r)
		goto err;
	json_decref(r);
	if (role == WF_SERVER) {
		r = twc_adapter_call(iut->a, json_pack("{s:s,s:[s]}", "cmd", "listen", "urls",
		                                      "uv://127.0.0.1:0"),
		                    o->check_ms, err, errlen);
		if (!r)
			goto err;
		snprintf(iut->url, sizeof(iut->url), "%s",
		         json_string_value(json_array_get(json_object_get(r, "urls"), 0)) ?: "");
		snprintf(iut->lid, sizeof(iut->lid), "%s",
		         json_string_value(json_object_get(r, "listener")) ?: "");
		json_decref(r);
		arm_accept(iut);
		if (!iut->accept_id) {
			snprintf(err, errlen, "accept refused: %s", iut->accept_err);
			goto err;
		}
	}
	return iut;
err:
	wf_iut_destroy(iut);
	return NULL;
}

/* Reads what the adapter still has to say (after it died). */
static void drain_adapter(wf_iut *iut, int ms)
{
	long long end = twc_now_ms() + ms;
	while (twc_now_ms() < end) {
		twc_adapter_pump(10);
		if (twc_adapter_exited(iut->a, NULL)) {
			twc_adapter_pump(20);
			break;
		}
	}
}

int wf_iut_stop(wf_iut *iut, char *status, size_t statuslen)
{
	char err[1024];
	if (wf_iut_alive(iut)) {
		json_t *r = twc_adapter_request(iut->a, json_pack("{s:s}", "cmd", "shutdown"),
		                               iut->o.check_ms * 2, err, sizeof(err));
		json_decref(r);
	}
	int rc = twc_adapter_finish(iut->a, 15000, err, sizeof(err));
	int st = 0;
	if (status) {
		if (twc_adapter_exited(iut->a, &st))
			twc_adapter_describe_status(st, status, statuslen);
		else
			snprintf(status, statuslen, "still running");
	}
	return rc;
}

void wf_iut_destroy(wf_iut *iut)
{
	if (!iut)
		return;
	close_conns(iut);
	if (iut->lfd >= 0)
		close(iut->lfd);
	twc_adapter_destroy(iut->a);
	free(iut);
}

/* ---- judging ---------------------------------------------------------------------------- */

static void result(wf_result *r, wf_kind k, const char *sig, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void result(wf_result *r, wf_kind k, const char *sig, const char *fmt, ...)
{
	if (wf_result_failed(r))
		return; /* the first failure wins */
	r->kind = k;
	snprintf(r->signature, sizeof(r->signature), "%s", sig);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
	va_end(ap);
}

static bool crashed(wf_iut *iut, wf_result *r)
{
	int st;
	if (!twc_adapter_exited(iut->a, &st))
		return false;
	drain_adapter(iut, 300);
	char sig[256], line[512], stat[64];
	wf_sig_crash(st, twc_adapter_stderr(iut->a), sig, sizeof(sig), line, sizeof(line));
	twc_adapter_describe_status(st, stat, sizeof(stat));
	result(r, WF_K_CRASH, sig, "%s: %s", stat, line[0] ? line : "(no stderr)");
	return true;
}

/* Closes pipes [from, npipes) through the adapter and checks that every
 * callback armed on them fired exactly once (spec/agent.md 3.4, 6.10). */
static void close_pipes(wf_iut *iut, int from, wf_result *r)
{
	int bound = iut->o.settle_ms + 1000 > iut->o.check_ms ? iut->o.settle_ms + 1000
	                                                      : iut->o.check_ms;
	long long end = twc_now_ms() + bound;
	for (;;) {
		/* pipes accepted meanwhile (a late accept callback) are closed too */
		bool closing = false;
		for (int i = from; i < iut->npipes; i++) {
			drv_pipe *p = &iut->pipes[i];
			if (p->closed)
				continue;
			p->closed = closing = true;
			json_t *resp = request(iut, json_pack("{s:s,s:s}", "cmd", "close", "pipe", p->name));
			json_decref(resp);
			if (!resp)
				return;
		}
		bool busy = false;
		for (int i = from; i < iut->npipes; i++)
			busy |= pipe_busy(&iut->pipes[i]);
		if ((!busy && !closing) || twc_now_ms() >= end || !wf_iut_alive(iut))
			break;
		/* (drive may accept another pipe: the next pass closes it) */
		run_for(iut, busy ? 10 : 2);
	}
	if (crashed(iut, r))
		return;
	for (int i = from; i < iut->npipes; i++) {
		drv_pipe *p = &iut->pipes[i];
		for (int k = 0; k < p->nids; k++) {
			int n = twc_adapter_events_seen(iut->a, p->ids[k]);
			if (n > 1) {
				result(r, WF_K_CALLBACK, "callback: fired more than once",
				       "pipe %s: request %" JSON_INTEGER_FORMAT " got %d events", p->name,
				       p->ids[k], n);
				return;
			}
			if (n == 0) {
				const char *what = p->ids[k] == p->write_id ? "write"
				                 : p->ids[k] == p->rd_id ? "read_descriptor" : "read";
				/* late, or never? */
				long long t0 = twc_now_ms();
				while (twc_adapter_events_seen(iut->a, p->ids[k]) == 0 &&
				       twc_now_ms() - t0 < 10000 && wf_iut_alive(iut))
					run_for(iut, 20);
				bool late = twc_adapter_events_seen(iut->a, p->ids[k]) > 0;
				char sig[128];
				snprintf(sig, sizeof(sig), "callback: %s %s after its pipe was closed", what,
				         late ? "fired only seconds" : "never fired");
				result(r, WF_K_CALLBACK, sig, "pipe %s: request %" JSON_INTEGER_FORMAT
				       " (%s) %s %lld ms after close; the pipe's first error: %s; writes ok %d, "
				       "descriptors %d, reads %d", p->name, p->ids[k], what,
				       late ? "fired" : "still pending", bound + (twc_now_ms() - t0),
				       p->err[0] ? p->err : "none", p->writes_ok, p->rds_ok, p->reads_ok);
				return;
			}
		}
	}
}

static void pending_ops(const drv_pipe *p, char *out, size_t len)
{
	snprintf(out, len, "%s%s%s", p->write_id ? "write+" : "", p->rd_id ? "read_descriptor+" : "",
	         p->read_id ? "read+" : "");
	size_t n = strlen(out);
	if (n)
		out[n - 1] = '\0';
}

int wf_good_check(wf_iut *iut, char *why, size_t whylen)
{
	wf_result r;
	memset(&r, 0, sizeof(r));
	why[0] = '\0';
	wf_script base;
	if (wf_build_base(&base, iut->role, iut->addr, true)) {
		snprintf(why, whylen, "harness: cannot build the base scenario");
		return -1;
	}
	int first = iut->npipes;
	iut->input_first = first;
	drv_pipe *cp = NULL;
	wf_opts saved = iut->o;
	iut->o.step_ms = iut->o.check_ms;
	good_check_active = true;
	if (iut->role == WF_CLIENT) {
		drain_listener(iut);
		char url[96];
		snprintf(url, sizeof(url), "uv://%s", iut->addr);
		json_t *resp = request(iut, json_pack("{s:s,s:s}", "cmd", "connect", "url", url));
		if (!resp || !json_is_true(json_object_get(resp, "ok"))) {
			char t[200] = "";
			if (resp)
				event_text(resp, t, sizeof(t));
			snprintf(why, whylen, "connect: %s", resp ? t : iut->err);
			json_decref(resp);
			goto out;
		}
		cp = new_pipe(iut, json_string_value(json_object_get(resp, "pipe")) ?: "", true);
		json_decref(resp);
	}
	char swhy[512];
	bool mismatch;
	int stop = run_script(iut, &base, swhy, sizeof(swhy), &mismatch);
	if (stop < base.nsteps) {
		const wf_step *st = &base.steps[stop];
		snprintf(why, whylen, "step %d (%s %d %s): %s", stop, wf_op_name(st->op), st->conn,
		         st->what, swhy);
		goto out;
	}
	/* the IUT's side: OUT written, A and B read intact */
	long long end = twc_now_ms() + iut->o.check_ms;
	for (;;) {
		drv_pipe *done = NULL;
		for (int i = first; i < iut->npipes; i++) {
			drv_pipe *p = &iut->pipes[i];
			if (p->good && p->writes_ok == 1 && p->reads_ok >= 2 &&
			    (iut->role == WF_CLIENT || is_good_check_pipe(iut, p->name)))
				done = p;
		}
		if (done) {
			if (done->bad[0])
				snprintf(why, whylen, "pipe %s: %s", done->name, done->bad);
			break;
		}
		if (twc_now_ms() >= end || !wf_iut_alive(iut)) {
			drv_pipe *p = cp;
			for (int i = first; !p && i < iut->npipes; i++)
				if (iut->pipes[i].good)
					p = &iut->pipes[i];
			if (!p)
				snprintf(why, whylen, "no pipe was accepted for the well-formed client%s%s",
				         iut->accept_err[0] ? " (accept: " : "",
				         iut->accept_err[0] ? iut->accept_err : "");
			else
				snprintf(why, whylen, "pipe %s: write ok %d, read_descriptor ok %d, read ok "
				         "%d after %d ms%s%s", p->name, p->writes_ok, p->rds_ok, p->reads_ok,
				         iut->o.check_ms, p->err[0] ? "; " : "", p->err);
			break;
		}
		run_for(iut, 10);
	}
out:
	good_check_active = false;
	iut->o = saved;
	close_conns(iut);
	if (wf_iut_alive(iut))
		close_pipes(iut, first, &r);
	iut->npipes = first;
	wf_script_free(&base);
	if (!why[0] && wf_result_failed(&r))
		snprintf(why, whylen, "%s (%s)", r.signature, r.detail);
	return why[0] ? -1 : 0;
}

/* Classifies a failed good check into a stable signature. */
static void good_check_signature(wf_iut *iut, const char *why, wf_result *r)
{
	/* does the adapter still answer at all? */
	char err[512];
	json_t *h = twc_adapter_request(iut->a, json_pack("{s:s}", "cmd", "hello"), iut->o.check_ms,
	                               err, sizeof(err));
	if (!h) {
		if (crashed(iut, r))
			return;
		result(r, WF_K_HANG, "hang: the adapter answers no request (the IUT blocks its caller)",
		       "after the input: %s; then hello: %s", why, err);
		return;
	}
	json_decref(h);
	if (iut->role == WF_SERVER) {
		/* is the listening socket still there? */
		char cerr[256];
		int fd = twc_raw_connect(iut->url, 1000, cerr, sizeof(cerr));
		if (fd >= 0)
			close(fd);
		const char *sig;
		wf_kind k = WF_K_LISTENER;
		if (fd < 0 && strstr(cerr, "refused"))
			sig = "listener: closed (new connections are refused)";
		else if (strstr(why, "is ") && strstr(why, "expected"))
			sig = "listener: a well-formed client gets wrong bytes";
		else if (strstr(why, "closed the connection") || strstr(why, "reset"))
			sig = "listener: a well-formed client's connection is dropped";
		else if (strstr(why, "within") || strstr(why, "no pipe was accepted") ||
		         strstr(why, "after")) {
			sig = "hang: a well-formed client is not served in time (the IUT's loop is stuck)";
			k = WF_K_HANG;
		} else {
			sig = "listener: a well-formed client is not fully served";
		}
		result(r, k, sig, "after the input, the good check failed: %s%s%s", why,
		       fd < 0 ? "; a raw connect: " : "", fd < 0 ? cerr : "");
	} else {
		const char *sig;
		wf_kind k = WF_K_LISTENER;
		if (strstr(why, "connect:"))
			sig = "client: connect refused after the input";
		else if (strstr(why, "is ") && strstr(why, "expected"))
			sig = "client: a well-formed exchange gets wrong bytes after the input";
		else if (strstr(why, "within") || strstr(why, "after")) {
			sig = "hang: a well-formed exchange does not complete in time after the input";
			k = WF_K_HANG;
		} else {
			sig = "client: a well-formed exchange fails after the input";
		}
		result(r, k, sig, "after the input, the good check failed: %s", why);
	}
}

/* How far the handshake got when the script stopped at step `stop`: the
 * BrochureAnswer (received by the raw client or sent by the raw server),
 * then the requested connections. */
static const char *handshake_stage(const wf_script *s, int stop)
{
	int answer = -1, requested = -1;
	for (int i = 0; i < s->nsteps; i++) {
		const wf_step *st = &s->steps[i];
		if (st->op == WF_RECV_ANSWER || (st->op == WF_SEND && !strcmp(st->what, "BrochureAnswer")))
			answer = i;
		if (st->op == WF_ACCEPT_REQUESTED ||
		    (st->op == WF_SEND && !strcmp(st->what, "RequestedConnection")))
			requested = i;
	}
	if (answer < 0 || stop <= answer)
		return "before the BrochureAnswer";
	if (requested < 0 || stop <= requested)
		return "during the handshake";
	return "after the handshake";
}

void wf_run_input(wf_iut *iut, const wf_script *s, wf_result *r)
{
	memset(r, 0, sizeof(*r));
	int first = iut->npipes;
	iut->input_first = first;
	if (s->role != iut->role) {
		snprintf(r->stopped, sizeof(r->stopped), "not run: the script is for the other role");
		return;
	}
	if (iut->role == WF_CLIENT) {
		drain_listener(iut);
		char url[96];
		snprintf(url, sizeof(url), "uv://%s", iut->addr);
		json_t *resp = request(iut, json_pack("{s:s,s:s}", "cmd", "connect", "url", url));
		if (!resp) {
			if (!crashed(iut, r))
				result(r, WF_K_HANG, "hang: the adapter answers no request",
				       "connect: %s", iut->err);
			return;
		}
		if (json_is_true(json_object_get(resp, "ok")))
			(void)new_pipe(iut, json_string_value(json_object_get(resp, "pipe")) ?: "", false);
		json_decref(resp);
	}
	char why[512] = "";
	bool mismatch;
	int stop = run_script(iut, s, why, sizeof(why), &mismatch);
	if (stop < s->nsteps) {
		const wf_step *st = &s->steps[stop];
		snprintf(r->stopped, sizeof(r->stopped), "step %d (%s %d%s%s): %.100s", stop,
		         wf_op_name(st->op), st->conn, st->what[0] ? " " : "", st->what, why);
	} else {
		snprintf(r->stopped, sizeof(r->stopped), "completed");
	}
	/* the IUT's verdict on the input comes before the connections end */
	long long fail_end = twc_now_ms() + iut->o.fail_wait_ms;
	while (iut->o.fail_wait_ms > 0 && twc_now_ms() < fail_end && wf_iut_alive(iut)) {
		bool all = true;
		for (int i = first; i < iut->npipes; i++)
			all &= iut->pipes[i].kind[0] != '\0';
		if (all)
			break;
		run_for(iut, 10);
	}
	/* every raw connection closes: the IUT's operations on these pipes must end */
	close_conns(iut);
	long long end = twc_now_ms() + iut->o.settle_ms;
	for (;;) {
		bool busy = false;
		for (int i = first; i < iut->npipes; i++)
			busy |= pipe_busy(&iut->pipes[i]);
		if (!busy || twc_now_ms() >= end || !wf_iut_alive(iut))
			break;
		run_for(iut, 10);
	}
	if (crashed(iut, r))
		goto out;
	for (int i = first; i < iut->npipes; i++) {
		const char *k = iut->pipes[i].kind;
		if (k[0] && !strstr(r->kinds, k)) {
			size_t l = strlen(r->kinds);
			snprintf(r->kinds + l, sizeof(r->kinds) - l, "%s%s", l ? "," : "", k);
		}
	}
	if (iut->unresponsive) {
		result(r, WF_K_HANG, "hang: the adapter answers no request (the IUT blocks its caller)",
		       "%s", iut->err);
		goto out;
	}
	for (int i = first; i < iut->npipes; i++) {
		drv_pipe *p = &iut->pipes[i];
		if (!pipe_busy(p))
			continue;
		char ops[64];
		pending_ops(p, ops, sizeof(ops));
		const char *stage = handshake_stage(s, stop);
		r->kind = WF_K_PENDING;
		snprintf(r->signature, sizeof(r->signature), "pending: %s %s, every connection closed",
		         ops, stage);
		snprintf(r->pending, sizeof(r->pending), "pipe %s: %s still pending %d ms after every "
		         "connection closed (script %s)", p->name, ops, iut->o.settle_ms, r->stopped);
		break;
	}
	/* close this input's pipes: every callback exactly once */
	close_pipes(iut, first, r);
	if (wf_result_failed(r))
		goto out;
	iut->npipes = first;
	/* a fresh well-formed peer is served */
	char gwhy[1024];
	if (wf_good_check(iut, gwhy, sizeof(gwhy))) {
		if (!crashed(iut, r))
			good_check_signature(iut, gwhy, r);
		goto out;
	}
	run_for(iut, 5);
	(void)crashed(iut, r);
out:
	iut->npipes = first;
	if (r->kind == WF_K_PENDING && !r->pending[0])
		r->kind = WF_K_NONE;
}

int wf_replay(const char *cmd, const wf_script *s, const wf_opts *o, wf_result *r, char *err,
              size_t errlen)
{
	memset(r, 0, sizeof(*r));
	wf_iut *iut = wf_iut_start(cmd, s->role, o, err, errlen);
	if (!iut)
		return -1;
	char why[1024];
	if (wf_good_check(iut, why, sizeof(why))) {
		snprintf(err, errlen, "the IUT fails the well-formed base scenario before the input "
		         "(so the input cannot be judged): %s", why);
		wf_iut_destroy(iut);
		return -1;
	}
	wf_run_input(iut, s, r);
	if (!wf_result_failed(r)) {
		char status[64];
		int rc = wf_iut_stop(iut, status, sizeof(status));
		char leaks[1024];
		if (wf_sig_leaks(wf_iut_stderr(iut), leaks, sizeof(leaks)) > 0) {
			leaks[strcspn(leaks, "\n")] = '\0';
			r->kind = WF_K_LEAK;
			snprintf(r->signature, sizeof(r->signature), "%.255s", leaks);
			snprintf(r->detail, sizeof(r->detail), "LeakSanitizer at exit (%s)", status);
		} else if (rc != 0) {
			int st = 0;
			char sig[256], line[512];
			(void)twc_adapter_exited(iut->a, &st);
			wf_sig_crash(st, wf_iut_stderr(iut), sig, sizeof(sig), line, sizeof(line));
			r->kind = WF_K_CRASH;
			snprintf(r->signature, sizeof(r->signature), "at exit: %.240s", sig);
			snprintf(r->detail, sizeof(r->detail), "the adapter ended with %s after shutdown: %s",
			         status, line);
		}
	}
	wf_iut_destroy(iut);
	return 0;
}
