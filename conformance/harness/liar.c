/*
 * liar.c - tw-agent-liar, a harness self-test tool: runs a real adapter and
 * relays its agent-protocol lines (spec/agent.md) unchanged, except for one
 * deliberate lie. The harness tests (harness.selftest.*) run an interop case
 * through it (tensorwire-conform --expect-fail) and expect it to FAIL with the
 * matching reason, which proves the interop checks can fail.
 *
 *   tw-agent-liar FAULT CMD...
 *
 * FAULT is one of:
 *   corrupt-read     the first successful "read" event reports a wrong xxh3
 *   wrong-target     the first descriptor reports tensor 0 without target device
 *   double-event     the first "write" event is sent twice
 *   drop-event       the first "write" event is never sent
 *   wrong-channel    "info" reports channel "mpt"
 *   crash            the first "read" request kills the adapter and the liar
 *                    with SIGABRT
 *   banner           after the hello's response, a 300-byte log line that is
 *                    not JSON, with a two-byte character across byte 200
 *   nul-line         after the hello's response, a line that starts with a
 *                    NUL byte and then holds a JSON object
 *   extra-object     after the hello's response, a JSON object that is
 *                    neither a response nor an event
 *   dup-response     the hello's response is sent twice
 *   info-unsupported "info" is answered with an error of kind unsupported
 *   all-unviable     the context's response says uv and basic are not viable
 *                    here (the adapter registered them all the same)
 *   utf8-exit        no lie on stdout; at the end, 1400 bytes of two-byte
 *                    characters and " [\xff]" on stderr, and exit status 3
 *                    (a report must keep the run whatever its reason holds)
 *   slow             no lie: every event is held back a random 0-50 ms before
 *                    it is relayed (a slow implementation, for the flake hunt
 *                    of tensorwire issue 17: a case's verdict must not depend
 *                    on timing; seed on stderr, TW_LIAR_SEED sets it)
 *
 * It must never be used outside these self-tests.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

static int child_in = -1;
static pid_t child;
static const char *fault;
static int done_once;
static bool after_hello_due; /* the hello's response went out: after_hello */
static unsigned slow_seed;

static void *pump_stdin(void *arg)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	(void)arg;
	while ((n = getline(&line, &cap, stdin)) > 0) {
		if (!strcmp(fault, "crash") && strstr(line, "\"read\"") &&
		    strstr(line, "\"cmd\"")) {
			kill(child, SIGKILL);
			signal(SIGABRT, SIG_DFL);
			abort();
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(child_in, line + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				goto out;
			off += w;
		}
	}
out:
	free(line);
	close(child_in);
	return NULL;
}

/* Lines that break the protocol, written once after the hello's response
 * (nothing for the other faults). */
static void after_hello(void)
{
	if (!strcmp(fault, "banner")) {
		char b[301];
		memset(b, 'a', 300);
		memcpy(b, "INFO ", 5);
		memcpy(b + 199, "\xc3\xa9", 2); /* U+00E9 across byte 200 */
		b[300] = '\0';
		printf("%s\n", b);
	} else if (!strcmp(fault, "nul-line")) {
		static const char nul_line[] = "\0{\"note\":\"after a NUL\"}\n";
		fwrite(nul_line, 1, sizeof(nul_line) - 1, stdout);
	} else if (!strcmp(fault, "extra-object")) {
		printf("{\"note\":\"an object nobody asked for\"}\n");
	}
}

/* Returns how many times to print the (possibly altered) line. */
static int lie(json_t *m)
{
	const char *ev = json_string_value(json_object_get(m, "event"));
	bool ok = json_is_true(json_object_get(m, "ok"));
	if (!ev && ok && json_object_get(m, "protocol")) { /* hello's response */
		after_hello_due = true;
		if (!strcmp(fault, "dup-response") && !done_once) {
			done_once = 1;
			return 2;
		}
	}
	if (!strcmp(fault, "all-unviable") && !ev && ok && json_object_get(m, "skipped")) {
		json_object_set_new(m, "skipped",
		                    json_pack("[{s:s,s:s},{s:s,s:s}]", "name", "uv", "reason",
		                              "liar: not viable", "name", "basic", "reason",
		                              "liar: not viable"));
		return 1;
	}
	if (!strcmp(fault, "info-unsupported") && !ev && ok && json_object_get(m, "channel") &&
	    json_object_get(m, "is_server")) {
		json_t *id = json_incref(json_object_get(m, "id"));
		json_object_clear(m);
		json_object_set_new(m, "id", id);
		json_object_set_new(m, "ok", json_false());
		json_object_set_new(m, "error", json_pack("{s:s,s:s,s:s}", "kind", "unsupported",
		                                          "status", "liar", "text",
		                                          "info: this adapter cannot tell"));
		return 1;
	}
	if (!strcmp(fault, "slow")) {
		if (ev)
			usleep((useconds_t)(rand_r(&slow_seed) % 50001));
		return 1;
	}
	if (done_once || !ok)
		return 1;
	if (!strcmp(fault, "corrupt-read") && ev && !strcmp(ev, "read")) {
		json_t *t = json_array_get(json_object_get(m, "tensors"), 0);
		if (!t)
			t = json_array_get(json_object_get(m, "payloads"), 0);
		if (t) {
			const char *h = json_string_value(json_object_get(t, "xxh3"));
			char buf[17];
			snprintf(buf, sizeof(buf), "%s", h ? h : "0000000000000000");
			buf[15] = buf[15] == '0' ? '1' : '0';
			json_object_set_new(t, "xxh3", json_string(buf));
			done_once = 1;
		}
	} else if (!strcmp(fault, "wrong-target") && ev && !strcmp(ev, "read_descriptor")) {
		json_t *t = json_array_get(json_object_get(json_object_get(m, "descriptor"), "tensors"), 0);
		if (t) {
			json_object_set_new(t, "target_device", json_null());
			done_once = 1;
		}
	} else if (!strcmp(fault, "double-event") && ev && !strcmp(ev, "write")) {
		done_once = 1;
		return 2;
	} else if (!strcmp(fault, "drop-event") && ev && !strcmp(ev, "write")) {
		done_once = 1;
		return 0;
	} else if (!strcmp(fault, "wrong-channel") && !ev && json_object_get(m, "channel")) {
		json_object_set_new(m, "channel", json_string("mpt"));
		done_once = 1;
	}
	return 1;
}

int main(int argc, char **argv)
{
	static const char *const faults[] = {"corrupt-read", "wrong-target", "double-event",
	                                     "drop-event", "wrong-channel", "crash", "slow",
	                                     "banner", "nul-line", "extra-object", "dup-response",
	                                     "info-unsupported", "utf8-exit", "all-unviable"};
	bool known = false;
	if (argc >= 2)
		for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
			known |= !strcmp(argv[1], faults[i]);
	if (argc < 3 || !known) {
		fprintf(stderr, "usage: tw-agent-liar FAULT CMD... (see liar.c for the faults)\n");
		return 2;
	}
	fault = argv[1];
	const char *seed = getenv("TW_LIAR_SEED");
	slow_seed = seed ? (unsigned)strtoul(seed, NULL, 10) : (unsigned)getpid() ^ (unsigned)time(NULL);
	if (!strcmp(fault, "slow"))
		fprintf(stderr, "tw-agent-liar: slow: events held 0-50 ms, seed %u\n", slow_seed);
	int in[2], out[2];
	if (pipe(in) || pipe(out)) {
		perror("tw-agent-liar: pipe");
		return 1;
	}
	pid_t parent = getpid();
	child = fork();
	if (child < 0) {
		perror("tw-agent-liar: fork");
		return 1;
	}
	if (child == 0) {
		/* The real adapter dies with its wrapper: a case that kills "the
		 * adapter" (SIGKILL, semantic.peer_gone) kills this process, and the
		 * peer must then see the IUT's connections reset, not closed in
		 * order by an adapter whose stdin ended. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* The wrapper died before prctl. (Not "getppid() == 1": in a pid
		 * namespace of its own, contain.namespaces, the wrapper is pid 1.) */
		if (getppid() != parent)
			_exit(1);
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		execvp(argv[2], argv + 2);
		fprintf(stderr, "tw-agent-liar: exec %s: %s\n", argv[2], strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	child_in = in[1];
	pthread_t th;
	pthread_create(&th, NULL, pump_stdin, NULL);
	FILE *f = fdopen(out[0], "r");
	char *line = NULL;
	size_t cap = 0;
	while (f && getline(&line, &cap, f) > 0) {
		json_t *m = json_loads(line, 0, NULL);
		if (!m) {
			fputs(line, stdout);
		} else {
			int times = lie(m);
			char *s = json_dumps(m, JSON_COMPACT);
			for (int i = 0; s && i < times; i++)
				printf("%s\n", s);
			free(s);
			if (after_hello_due) {
				after_hello_due = false;
				after_hello();
			}
			json_decref(m);
		}
		fflush(stdout);
	}
	free(line);
	pthread_join(th, NULL);
	int st = 0;
	waitpid(child, &st, 0);
	if (f)
		fclose(f);
	if (!strcmp(fault, "utf8-exit")) {
		for (int i = 0; i < 700; i++)
			fputs("\xc3\xa9", stderr); /* U+00E9 */
		fputs(" [\xff]\n", stderr); /* a byte no UTF-8 has, wherever the tail is cut */
		return 3;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
