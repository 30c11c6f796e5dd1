/*
 * adapter_proc.c - spawning adapters and speaking JSON lines with them
 * (see adapter_proc.h).
 */
#define _GNU_SOURCE
#include "adapter_proc.h"
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void signal_tree(pid_t pid, int sig, int depth);

#define TW_ADAPTERS_MAX 16
#define TW_STDERR_TAIL 16384

struct twc_adapter {
	char label[64];
	pid_t pid;
	int in_fd, out_fd, err_fd;
	char *wbuf;
	size_t wlen, wcap;
	char *rbuf;
	size_t rlen, rcap;
	char errtail[TW_STDERR_TAIL];
	size_t errlen;
	json_t *inbox;   /* lines received and not consumed yet, in order */
	json_t *armed;   /* "id" -> command whose event is expected */
	json_t *seen;    /* "id" -> number of events received */
	json_t *stray;   /* descriptions of lines that broke the protocol */
	json_t *answered; /* "id" -> true once its response came */
	json_int_t next_id;
	bool out_eof, err_eof, exited;
	bool signalled; /* the case killed or signalled it on purpose */
	int wstatus;
};

static twc_adapter *live[TW_ADAPTERS_MAX];

/* How long an adapter's output may stay open after the adapter exited. */
#define TW_LEFTOVER_GRACE_MS 2000

long long twc_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

const char *twc_adapter_label(const twc_adapter *a)
{
	return a->label;
}

const char *twc_adapter_stderr(const twc_adapter *a)
{
	return a->errtail;
}

void twc_adapter_describe_status(int status, char *buf, size_t buflen)
{
	if (WIFEXITED(status))
		snprintf(buf, buflen, "exit %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, buflen, "killed by signal %d (SIG%s)", WTERMSIG(status),
		         sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
	else
		snprintf(buf, buflen, "status 0x%x", status);
}

twc_adapter *twc_adapter_spawn(const char *cmd, const char *label, char *err, size_t errlen)
{
	int in[2], out[2], errp[2];
	int slot = -1;
	for (int i = 0; i < TW_ADAPTERS_MAX; i++) {
		if (!live[i]) {
			slot = i;
			break;
		}
	}
	if (slot < 0) {
		set_err(err, errlen, "spawn %s: too many adapters", label);
		return NULL;
	}
	if (pipe2(in, O_CLOEXEC) != 0)
		goto err_pipe;
	if (pipe2(out, O_CLOEXEC) != 0)
		goto err_pipe_in;
	if (pipe2(errp, O_CLOEXEC) != 0)
		goto err_pipe_out;
	signal(SIGPIPE, SIG_IGN);
	pid_t pid = fork();
	if (pid < 0) {
		set_err(err, errlen, "spawn %s: fork: %s", label, strerror(errno));
		goto err_fork;
	}
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		dup2(errp[1], 2);
		signal(SIGPIPE, SIG_DFL);
		char *shcmd;
		if (asprintf(&shcmd, "exec %s", cmd) < 0)
			_exit(127);
		execl("/bin/sh", "sh", "-c", shcmd, (char *)NULL);
		dprintf(2, "spawn: /bin/sh: %s\n", strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	close(errp[1]);
	twc_adapter *a = calloc(1, sizeof(*a));
	if (!a) {
		set_err(err, errlen, "spawn %s: out of memory", label);
		close(in[1]);
		close(out[0]);
		close(errp[0]);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return NULL;
	}
	snprintf(a->label, sizeof(a->label), "%s", label);
	a->pid = pid;
	a->in_fd = in[1];
	a->out_fd = out[0];
	a->err_fd = errp[0];
	fcntl(a->in_fd, F_SETFL, fcntl(a->in_fd, F_GETFL) | O_NONBLOCK);
	a->inbox = json_array();
	a->armed = json_object();
	a->seen = json_object();
	a->stray = json_array();
	a->answered = json_object();
	a->next_id = 1;
	live[slot] = a;
	return a;

err_fork:
	close(errp[0]);
	close(errp[1]);
err_pipe_out:
	close(out[0]);
	close(out[1]);
err_pipe_in:
	close(in[0]);
	close(in[1]);
	return NULL;
err_pipe:
	set_err(err, errlen, "spawn %s: pipe2: %s", label, strerror(errno));
	return NULL;
}

static void id_key(json_int_t id, char key[32])
{
	snprintf(key, 32, "%" JSON_INTEGER_FORMAT, id);
}

/* Notes a line that broke the protocol: what, and the line's first 200
 * bytes made printable as UTF-8 (a note that cannot be made is still one). */
static void stray(twc_adapter *a, const char *what, const char *line)
{
	char head[201];
	snprintf(head, sizeof(head), "%s", line);
	twc_agent_utf8_scrub(head);
	json_t *note = json_sprintf("%s %s: %s", a->label, what, head);
	json_array_append_new(a->stray, note ? note : json_string("(an adapter broke the protocol)"));
}

/* Every response answers a request that was sent, once (spec/agent.md
 * 3.2); anything else on stdout breaks the protocol. */
static void check_response(twc_adapter *a, const json_t *msg, const char *line)
{
	const json_t *idj = json_object_get(msg, "id");
	if (!json_is_integer(idj) || !json_is_boolean(json_object_get(msg, "ok"))) {
		stray(a, "wrote a JSON object that is neither a response nor an event", line);
		return;
	}
	json_int_t id = json_integer_value(idj);
	char key[32];
	id_key(id, key);
	if (id < 1 || id >= a->next_id) /* the harness counts from 1 */
		stray(a, "answered a request the harness never sent", line);
	else if (json_object_get(a->answered, key))
		stray(a, "answered a request a second time", line);
	else
		json_object_set_new(a->answered, key, json_true());
}

static void handle_line(twc_adapter *a, char *line, size_t len)
{
	if (len == 0)
		return;
	if (strlen(line) != len) {
		stray(a, "wrote a line with a NUL byte in it", line[0] ? line : "(starts with NUL)");
		return;
	}
	json_error_t jerr;
	json_t *msg = json_loads(line, 0, &jerr);
	if (!msg || !json_is_object(msg)) {
		stray(a, "wrote a line that is not a JSON object", line);
		json_decref(msg);
		return;
	}
	if (!json_object_get(msg, "event")) {
		check_response(a, msg, line);
	} else {
		const json_t *idj = json_object_get(msg, "id");
		if (!json_is_integer(idj)) {
			stray(a, "sent an event without an integer id", line);
		} else {
			char key[32];
			id_key(json_integer_value(idj), key);
			json_int_t n = json_integer_value(json_object_get(a->seen, key));
			json_object_set_new(a->seen, key, json_integer(n + 1));
		}
	}
	json_array_append_new(a->inbox, msg);
}

static void read_out(twc_adapter *a)
{
	if (a->rcap - a->rlen < 65536) {
		size_t ncap = a->rcap ? a->rcap * 2 : 131072;
		char *n = realloc(a->rbuf, ncap);
		if (!n) {
			fprintf(stderr, "harness: out of memory reading %s\n", a->label);
			abort();
		}
		a->rbuf = n;
		a->rcap = ncap;
	}
	ssize_t n = read(a->out_fd, a->rbuf + a->rlen, a->rcap - a->rlen - 1);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		a->out_eof = true;
		if (a->rlen) {
			a->rbuf[a->rlen] = '\0';
			stray(a, "ended its output with an unterminated line", a->rbuf);
			a->rlen = 0;
		}
		return;
	}
	a->rlen += (size_t)n;
	size_t start = 0;
	for (size_t i = a->rlen - (size_t)n; i < a->rlen; i++) {
		if (a->rbuf[i] == '\n') {
			a->rbuf[i] = '\0';
			handle_line(a, a->rbuf + start, i - start);
			start = i + 1;
		}
	}
	memmove(a->rbuf, a->rbuf + start, a->rlen - start);
	a->rlen -= start;
}

static void read_err(twc_adapter *a)
{
	char buf[4096];
	ssize_t n = read(a->err_fd, buf, sizeof(buf));
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		a->err_eof = true;
		return;
	}
	/* Echo to our stderr so a failing test shows what the adapter said. */
	fprintf(stderr, "[%s stderr] %.*s", a->label, (int)n, buf);
	if (buf[n - 1] != '\n')
		fputc('\n', stderr);
	size_t keep = TW_STDERR_TAIL - 1; /* > sizeof(buf), so one read always fits */
	if (a->errlen + (size_t)n > keep) {
		size_t drop = a->errlen + (size_t)n - keep;
		memmove(a->errtail, a->errtail + drop, a->errlen - drop);
		a->errlen -= drop;
	}
	memcpy(a->errtail + a->errlen, buf, (size_t)n);
	a->errlen += (size_t)n;
	a->errtail[a->errlen] = '\0';
}

static void write_in(twc_adapter *a)
{
	while (a->wlen > 0) {
		ssize_t n = write(a->in_fd, a->wbuf, a->wlen);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				a->wlen = 0; /* the adapter is gone; its exit is noticed elsewhere */
			return;
		}
		memmove(a->wbuf, a->wbuf + n, a->wlen - (size_t)n);
		a->wlen -= (size_t)n;
	}
}

static void reap(twc_adapter *a)
{
	if (a->exited)
		return;
	int st;
	pid_t r = waitpid(a->pid, &st, WNOHANG);
	if (r == a->pid) {
		a->exited = true;
		a->wstatus = st;
	}
}

void twc_adapter_pump(int timeout_ms)
{
	struct pollfd pfd[3 * TW_ADAPTERS_MAX];
	twc_adapter *owner[3 * TW_ADAPTERS_MAX];
	int kind[3 * TW_ADAPTERS_MAX];
	int n = 0;
	for (int i = 0; i < TW_ADAPTERS_MAX; i++) {
		twc_adapter *a = live[i];
		if (!a)
			continue;
		if (!a->out_eof) {
			pfd[n] = (struct pollfd){.fd = a->out_fd, .events = POLLIN};
			owner[n] = a;
			kind[n++] = 1;
		}
		if (!a->err_eof) {
			pfd[n] = (struct pollfd){.fd = a->err_fd, .events = POLLIN};
			owner[n] = a;
			kind[n++] = 2;
		}
		if (a->wlen > 0 && a->in_fd >= 0) {
			pfd[n] = (struct pollfd){.fd = a->in_fd, .events = POLLOUT};
			owner[n] = a;
			kind[n++] = 3;
		}
	}
	if (n == 0) {
		if (timeout_ms > 0)
			usleep((useconds_t)(timeout_ms > 20 ? 20 : timeout_ms) * 1000);
	} else if (poll(pfd, (nfds_t)n, timeout_ms) > 0) {
		for (int i = 0; i < n; i++) {
			if (!pfd[i].revents)
				continue;
			if (kind[i] == 1)
				read_out(owner[i]);
			else if (kind[i] == 2)
				read_err(owner[i]);
			else
				write_in(owner[i]);
		}
	}
	for (int i = 0; i < TW_ADAPTERS_MAX; i++) {
		if (live[i] && live[i]->out_eof && live[i]->err_eof)
			reap(live[i]);
	}
}

json_int_t twc_adapter_send(twc_adapter *a, json_t *req, char *err, size_t errlen)
{
	json_int_t id = a->next_id++;
	json_object_set_new(req, "id", json_integer(id));
	char *line = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!line) {
		set_err(err, errlen, "%s: json_dumps failed", a->label);
		return -1;
	}
	if (a->in_fd < 0 || a->out_eof) {
		set_err(err, errlen, "%s: the adapter is gone (output closed)", a->label);
		free(line);
		return -1;
	}
	size_t len = strlen(line);
	if (a->wcap - a->wlen < len + 1) {
		size_t ncap = (a->wlen + len + 1) * 2;
		char *nb = realloc(a->wbuf, ncap);
		if (!nb) {
			free(line);
			set_err(err, errlen, "%s: out of memory", a->label);
			return -1;
		}
		a->wbuf = nb;
		a->wcap = ncap;
	}
	memcpy(a->wbuf + a->wlen, line, len);
	a->wbuf[a->wlen + len] = '\n';
	a->wlen += len + 1;
	free(line);
	write_in(a);
	return id;
}

/* Takes the first inbox line that is (event != NULL: the named event of) /
 * (event == NULL: the response to) request id. */
static json_t *take(twc_adapter *a, json_int_t id, bool want_event)
{
	size_t i;
	json_t *m;
	json_array_foreach(a->inbox, i, m) {
		const json_t *idj = json_object_get(m, "id");
		bool is_event = json_object_get(m, "event") != NULL;
		if (is_event == want_event && json_is_integer(idj) && json_integer_value(idj) == id) {
			json_incref(m);
			json_array_remove(a->inbox, i);
			return m;
		}
	}
	return NULL;
}

/* The first adapter that went away while the harness waited for it, in
 * this (case) process: its label ("server ours"). */
static char first_gone[64];

const char *twc_adapter_first_gone(void)
{
	return first_gone;
}

static void describe_gone(twc_adapter *a, char *err, size_t errlen, const char *waiting)
{
	if (!first_gone[0] && !a->signalled)
		snprintf(first_gone, sizeof(first_gone), "%s", a->label);
	char st[64] = "still running";
	for (int i = 0; i < 50 && !a->exited; i++) {
		twc_adapter_pump(10);
		reap(a);
	}
	if (a->exited)
		twc_adapter_describe_status(a->wstatus, st, sizeof(st));
	const char *tail = a->errtail;
	size_t tl = strlen(tail);
	if (tl > 600)
		tail += tl - 600;
	set_err(err, errlen, "%s closed its output while %s (%s); stderr tail: %s", a->label,
	        waiting, st, tail[0] ? tail : "(empty)");
}

static json_t *wait_for(twc_adapter *a, json_int_t id, bool want_event, int timeout_ms,
                        char *err, size_t errlen)
{
	long long deadline = twc_now_ms() + timeout_ms;
	for (;;) {
		json_t *m = take(a, id, want_event);
		if (m)
			return m;
		char what[96];
		snprintf(what, sizeof(what), "the harness waited for the %s of request %" JSON_INTEGER_FORMAT,
		         want_event ? "event" : "response", id);
		if (a->out_eof) {
			describe_gone(a, err, errlen, what);
			return NULL;
		}
		long long left = deadline - twc_now_ms();
		if (left <= 0) {
			set_err(err, errlen, "%s: timed out after %d ms: %s", a->label, timeout_ms, what);
			return NULL;
		}
		twc_adapter_pump(left > 200 ? 200 : (int)left);
	}
}

json_t *twc_adapter_response(twc_adapter *a, json_int_t id, int timeout_ms, char *err,
                            size_t errlen)
{
	json_t *r = wait_for(a, id, false, timeout_ms, err, errlen);
	return r;
}

static void arm_if_needed(twc_adapter *a, const char *cmd, json_int_t id, const json_t *resp)
{
	static const char *const armers[] = {"accept", "write", "read_descriptor", "read", "forks"};
	if (!json_is_true(json_object_get(resp, "ok")))
		return;
	for (size_t i = 0; i < sizeof(armers) / sizeof(armers[0]); i++) {
		if (strcmp(cmd, armers[i]) == 0) {
			char key[32];
			id_key(id, key);
			json_object_set_new(a->armed, key, json_string(cmd));
		}
	}
}

json_t *twc_adapter_request(twc_adapter *a, json_t *req, int timeout_ms, char *err, size_t errlen)
{
	const json_t *c = json_object_get(req, "cmd");
	char cmd[32];
	snprintf(cmd, sizeof(cmd), "%s", json_is_string(c) ? json_string_value(c) : "");
	json_int_t id = twc_adapter_send(a, req, err, errlen);
	if (id < 0)
		return NULL;
	json_t *r = wait_for(a, id, false, timeout_ms, err, errlen);
	if (r)
		arm_if_needed(a, cmd, id, r);
	return r;
}

json_t *twc_adapter_call(twc_adapter *a, json_t *req, int timeout_ms, char *err, size_t errlen)
{
	char cmd[32];
	const json_t *c = json_object_get(req, "cmd");
	snprintf(cmd, sizeof(cmd), "%s", json_is_string(c) ? json_string_value(c) : "?");
	json_t *r = twc_adapter_request(a, req, timeout_ms, err, errlen);
	if (!r)
		return NULL;
	if (!json_is_true(json_object_get(r, "ok"))) {
		const json_t *e = json_object_get(r, "error");
		set_err(err, errlen, "%s: %s failed: %s (%s, %s)", a->label, cmd,
		        json_string_value(json_object_get(e, "text")) ?: "(no text)",
		        json_string_value(json_object_get(e, "kind")) ?: "?",
		        json_string_value(json_object_get(e, "status")) ?: "?");
		json_decref(r);
		return NULL;
	}
	return r;
}

json_t *twc_adapter_event(twc_adapter *a, json_int_t id, const char *name, int timeout_ms,
                         char *err, size_t errlen)
{
	json_t *e = wait_for(a, id, true, timeout_ms, err, errlen);
	if (!e)
		return NULL;
	const char *got = json_string_value(json_object_get(e, "event"));
	if (!got || strcmp(got, name) != 0) {
		set_err(err, errlen, "%s: request %" JSON_INTEGER_FORMAT " expected a '%s' event, got '%s'",
		        a->label, id, name, got ? got : "(none)");
		json_decref(e);
		return NULL;
	}
	return e;
}

int twc_adapter_events_seen(twc_adapter *a, json_int_t id)
{
	char key[32];
	id_key(id, key);
	return (int)json_integer_value(json_object_get(a->seen, key));
}

bool twc_adapter_exited(twc_adapter *a, int *status_out)
{
	reap(a);
	if (a->exited && status_out)
		*status_out = a->wstatus;
	return a->exited;
}

int twc_adapter_finish(twc_adapter *a, int timeout_ms, char *err, size_t errlen)
{
	long long deadline = twc_now_ms() + timeout_ms;
	while (a->wlen > 0 && !a->out_eof && twc_now_ms() < deadline)
		twc_adapter_pump(50);
	if (a->in_fd >= 0) {
		close(a->in_fd);
		a->in_fd = -1;
	}
	/* once the adapter has exited, its output ends within the grace, or
	 * a process it left behind holds it */
	while (!(a->out_eof && a->err_eof && a->exited) && twc_now_ms() < deadline) {
		twc_adapter_pump(50);
		reap(a);
		if (a->exited && twc_now_ms() + TW_LEFTOVER_GRACE_MS < deadline)
			deadline = twc_now_ms() + TW_LEFTOVER_GRACE_MS;
	}
	if (a->exited && !(a->out_eof && a->err_eof)) {
		char st[64];
		twc_adapter_describe_status(a->wstatus, st, sizeof(st));
		set_err(err, errlen, "%s ended (%s), but a process it started still holds its %s "
		        "open %d ms later: an adapter must not leave processes behind",
		        a->label, st, !a->out_eof ? "stdout" : "stderr", TW_LEFTOVER_GRACE_MS);
		return -1;
	}
	if (!a->exited) {
		signal_tree(a->pid, SIGKILL, 0);
		waitpid(a->pid, &a->wstatus, 0);
		a->exited = true;
		set_err(err, errlen, "%s did not exit within %d ms after its stdin closed; killed",
		        a->label, timeout_ms);
		return -1;
	}
	if (!WIFEXITED(a->wstatus) || WEXITSTATUS(a->wstatus) != 0) {
		char st[64];
		twc_adapter_describe_status(a->wstatus, st, sizeof(st));
		const char *tail = a->errtail;
		size_t tl = strlen(tail);
		if (tl > 600)
			tail += tl - 600;
		set_err(err, errlen, "%s ended with %s; stderr tail: %s", a->label, st,
		        tail[0] ? tail : "(empty)");
		return -1;
	}
	return 0;
}

int twc_adapter_check_callbacks(twc_adapter *a, char *err, size_t errlen)
{
	int bad = 0;
	size_t used = 0;
	err[0] = '\0';
#define TW_NOTE(...)                                                                   \
	do {                                                                           \
		bad++;                                                                 \
		if (used < errlen) {                                                   \
			int w = snprintf(err + used, errlen - used, __VA_ARGS__);      \
			if (w > 0)                                                     \
				used += (size_t)w;                                     \
		}                                                                      \
	} while (0)
	const char *key;
	json_t *v;
	json_object_foreach(a->armed, key, v) {
		json_int_t n = json_integer_value(json_object_get(a->seen, key));
		if (n != 1)
			TW_NOTE("%s: the callback of request %s (%s) fired %" JSON_INTEGER_FORMAT
			        " times, not once; ",
			        a->label, key, json_string_value(v), n);
	}
	json_object_foreach(a->seen, key, v) {
		if (!json_object_get(a->armed, key))
			TW_NOTE("%s: %" JSON_INTEGER_FORMAT " event(s) for request %s, which armed no "
			        "callback; ",
			        a->label, json_integer_value(v), key);
	}
	size_t i;
	json_array_foreach(a->stray, i, v) {
		TW_NOTE("%s; ", json_string_value(v));
	}
#undef TW_NOTE
	return bad;
}

/* Sends sig to the processes descended from pid (its children, theirs...),
 * deepest first, then to pid itself. An adapter may be several processes
 * (a wrapper script, a launcher, tw-agent-liar): "kill the adapter" must
 * reach the implementation itself, and a SIGKILL must not let a child see
 * its parent's pipes close first and shut down in order, which would turn
 * a crash into a graceful close. Children are found through
 * /proc/<pid>/task/<tid>/children. */
static void signal_tree(pid_t pid, int sig, int depth)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = depth < 16 ? opendir(path) : NULL;
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char cpath[320];
		snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/children", (int)pid, e->d_name);
		FILE *f = fopen(cpath, "r");
		if (!f)
			continue;
		int child;
		while (fscanf(f, "%d", &child) == 1)
			signal_tree(child, sig, depth + 1);
		fclose(f);
	}
	if (d)
		closedir(d);
	kill(pid, sig);
}

void twc_adapter_kill(twc_adapter *a)
{
	a->signalled = true;
	if (!a->exited)
		signal_tree(a->pid, SIGKILL, 0);
}

int twc_adapter_signal(twc_adapter *a, int sig)
{
	if (a->exited)
		return -1;
	a->signalled = true;
	signal_tree(a->pid, sig, 0);
	return 0;
}

void twc_adapter_destroy(twc_adapter *a)
{
	if (!a)
		return;
	if (!a->exited) {
		signal_tree(a->pid, SIGKILL, 0);
		waitpid(a->pid, &a->wstatus, 0);
	}
	for (int i = 0; i < TW_ADAPTERS_MAX; i++) {
		if (live[i] == a)
			live[i] = NULL;
	}
	if (a->in_fd >= 0)
		close(a->in_fd);
	close(a->out_fd);
	close(a->err_fd);
	json_decref(a->inbox);
	json_decref(a->armed);
	json_decref(a->seen);
	json_decref(a->stray);
	json_decref(a->answered);
	free(a->wbuf);
	free(a->rbuf);
	free(a);
}
