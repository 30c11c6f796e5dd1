/*
 * spawn.c - runs one benchmark: starts the driver's server (pinned, in the
 * server namespace for netns runs), waits for its READY line, starts the
 * client, enforces the deadline, and turns the client's result file into
 * statistics. Also sets up and removes the two network namespaces.
 * It must not interpret the samples beyond statistics (min, median, p99).
 */
#define _GNU_SOURCE
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- processes ------------------------------------------------------------------- */

typedef struct twr_proc {
	pid_t pid;
	int out_fd; /* read end of its stdout (server), or -1 */
	int status; /* from waitpid, once reaped */
	bool reaped;
} twr_proc;

/* Process groups of the drivers running now, for twr_kill_children(). */
static volatile pid_t twr__live[2];

void twr_kill_children(void)
{
	for (int i = 0; i < 2; i++)
		if (twr__live[i] > 0)
			kill(-twr__live[i], SIGKILL);
}

static void twr__sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Forks and execs argv[0] with its stdout to a pipe (want_out) or the log,
 * stderr to the log, pinned to `cpu` (-1: as the runner), inside network
 * namespace `ns` (NULL: the runner's). Writes *p on success. */
static int twr__spawn(char *const argv[], int cpu, const char *ns, const char *log, bool want_out,
                      twr_proc *p, char *err, size_t errlen)
{
	int fds[2] = {-1, -1}, nsfd = -1, logfd;
	pid_t pid;

	logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (logfd < 0) {
		snprintf(err, errlen, "open %s: %s", log, strerror(errno));
		return -1;
	}
	if (ns) {
		char path[128];
		snprintf(path, sizeof(path), "/run/netns/%s", ns);
		nsfd = open(path, O_RDONLY | O_CLOEXEC);
		if (nsfd < 0) {
			snprintf(err, errlen, "open %s: %s", path, strerror(errno));
			close(logfd);
			return -1;
		}
	}
	if (want_out && pipe2(fds, O_CLOEXEC) != 0) {
		snprintf(err, errlen, "pipe2: %s", strerror(errno));
		close(logfd);
		if (nsfd >= 0)
			close(nsfd);
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		close(logfd);
		if (nsfd >= 0)
			close(nsfd);
		if (fds[0] >= 0) {
			close(fds[0]);
			close(fds[1]);
		}
		return -1;
	}
	if (pid == 0) {
		setpgid(0, 0);
		if (cpu >= 0) {
			cpu_set_t set;
			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			if (sched_setaffinity(0, sizeof(set), &set) != 0) {
				dprintf(logfd, "runner: sched_setaffinity(cpu %d): %s\n", cpu, strerror(errno));
				_exit(126);
			}
		}
		if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) != 0) {
			dprintf(logfd, "runner: setns(%s): %s\n", ns, strerror(errno));
			_exit(126);
		}
		dup2(want_out ? fds[1] : logfd, STDOUT_FILENO);
		dup2(logfd, STDERR_FILENO);
		execv(argv[0], argv);
		dprintf(logfd, "runner: execv %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid); /* also here, so a kill right after fork reaches it */
	twr__live[want_out ? 1 : 0] = pid;
	close(logfd);
	if (nsfd >= 0)
		close(nsfd);
	if (want_out)
		close(fds[1]);
	p->pid = pid;
	p->out_fd = want_out ? fds[0] : -1;
	p->reaped = false;
	p->status = 0;
	return 0;
}

static void twr__kill(twr_proc *p)
{
	if (p->pid > 0 && !p->reaped) {
		kill(-p->pid, SIGKILL);
		if (waitpid(p->pid, &p->status, 0) == p->pid)
			p->reaped = true;
	}
	for (int i = 0; i < 2; i++)
		if (twr__live[i] == p->pid)
			twr__live[i] = 0;
	if (p->out_fd >= 0) {
		close(p->out_fd);
		p->out_fd = -1;
	}
}

/* Waits until the process exits or the deadline (ms since the epoch of
 * twb_now_ns) passes. Returns true if it exited. */
static bool twr__wait(twr_proc *p, uint64_t deadline_ns)
{
	while (!p->reaped) {
		pid_t r = waitpid(p->pid, &p->status, WNOHANG);
		if (r == p->pid) {
			p->reaped = true;
			break;
		}
		if (r < 0 && errno != EINTR) {
			p->reaped = true;
			p->status = 0x7f00; /* reads as exit 127 */
			break;
		}
		if (twb_now_ns() >= deadline_ns)
			return false;
		twr__sleep_ms(2);
	}
	for (int i = 0; i < 2; i++)
		if (twr__live[i] == p->pid)
			twr__live[i] = 0;
	return true;
}

static int twr__exit_code(const twr_proc *p)
{
	if (WIFEXITED(p->status))
		return WEXITSTATUS(p->status);
	if (WIFSIGNALED(p->status))
		return 128 + WTERMSIG(p->status);
	return -1;
}

/* The last non-empty line of a log file, for a reason string. */
static void twr__last_line(const char *log, char *out, size_t outlen)
{
	char line[1024], last[1024] = "";
	FILE *f = fopen(log, "r");
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			size_t n = strlen(line);
			while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
				line[--n] = '\0';
			if (n)
				snprintf(last, sizeof(last), "%s", line);
		}
		fclose(f);
	}
	snprintf(out, outlen, "%s", last[0] ? last : "(no message)");
}

/* Reads the server's "READY <addr>" line. Returns 0, or -1 if the server
 * exited or the deadline passed first. */
static int twr__read_ready(twr_proc *p, uint64_t deadline_ns, char *addr, size_t addrlen)
{
	char buf[512];
	size_t have = 0;
	for (;;) {
		struct pollfd pfd = {p->out_fd, POLLIN, 0};
		uint64_t now = twb_now_ns();
		int ms, r;
		char *nl;
		if (now >= deadline_ns)
			return -1;
		ms = (int)((deadline_ns - now) / 1000000ull) + 1;
		r = poll(&pfd, 1, ms > 1000 ? 1000 : ms);
		if (r < 0 && errno != EINTR)
			return -1;
		if (r <= 0)
			continue;
		ssize_t n = read(p->out_fd, buf + have, sizeof(buf) - 1 - have);
		if (n <= 0)
			return -1; /* EOF: the server exited (or closed stdout) */
		have += (size_t)n;
		buf[have] = '\0';
		nl = strchr(buf, '\n');
		if (nl) {
			*nl = '\0';
			if (strncmp(buf, "READY ", 6) != 0)
				return -1;
			snprintf(addr, addrlen, "%s", buf + 6);
			return 0;
		}
		if (have == sizeof(buf) - 1)
			return -1;
	}
}

/* ---- statistics ------------------------------------------------------------------- */

static int twr__cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int twr__parse_results(const char *path, twr_run *run, const twb_schedule *sched)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, 0, &jerr), *arr;
	bool one_way;
	size_t i;

	if (!root) {
		snprintf(run->reason, sizeof(run->reason), "result file %s: %s (line %d)", path,
		         jerr.text, jerr.line);
		return -1;
	}
	one_way = !strcmp(json_string_value(json_object_get(root, "samples")) ?: "", "one_way_ns");
	snprintf(run->info, sizeof(run->info), "%s",
	         json_string_value(json_object_get(root, "info")) ?: "");
	snprintf(run->sanitizer, sizeof(run->sanitizer), "%s",
	         json_string_value(json_object_get(root, "sanitizer")) ?: "");
	arr = json_object_get(root, "results");
	if (!json_is_array(arr) || json_array_size(arr) != sched->count) {
		snprintf(run->reason, sizeof(run->reason), "result file %s: %zu results, expected %zu",
		         path, json_array_size(arr), sched->count);
		json_decref(root);
		return -1;
	}
	for (i = 0; i < sched->count; i++) {
		json_t *r = json_array_get(arr, i), *samples = json_object_get(r, "rtt_ns");
		size_t n = json_array_size(samples), k;
		twr_stat *st = &run->stats[i];
		uint64_t *v;
		double sum = 0, scale = (one_way ? 1.0 : 0.5) / 1e6;

		memset(st, 0, sizeof(*st));
		st->size = (uint64_t)json_integer_value(json_object_get(r, "size"));
		st->wrong_bytes = (uint64_t)json_integer_value(json_object_get(r, "wrong_bytes"));
		st->messages_checked = (uint64_t)json_integer_value(json_object_get(r, "messages_checked"));
		st->iters = (uint32_t)n;
		if (n == 0 || st->size != sched->sizes[i]) {
			snprintf(run->reason, sizeof(run->reason), "result file %s: size %zu has no samples",
			         path, i);
			json_decref(root);
			return -1;
		}
		v = malloc(n * sizeof(*v));
		if (!v) {
			json_decref(root);
			return -1;
		}
		for (k = 0; k < n; k++) {
			v[k] = (uint64_t)json_integer_value(json_array_get(samples, k));
			sum += (double)v[k];
		}
		qsort(v, n, sizeof(*v), twr__cmp_u64);
		st->min_ms = (double)v[0] * scale;
		st->median_ms = (n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2) * scale;
		st->p99_ms = (double)v[(size_t)ceil(0.99 * (double)n) - 1] * scale; /* nearest rank */
		st->p999_ms = (double)v[(size_t)ceil(0.999 * (double)n) - 1] * scale;
		st->mean_ms = sum / (double)n * scale;
		free(v);
	}
	run->num_stats = sched->count;
	json_decref(root);
	return 0;
}

/* ---- one run ------------------------------------------------------------------------ */

static void twr__join_list(char *out, size_t outlen, const twb_schedule *s, int which)
{
	size_t off = 0;
	out[0] = '\0';
	for (size_t i = 0; i < s->count && off < outlen; i++) {
		unsigned long long v = which == 0 ? s->sizes[i] : which == 1 ? s->iters[i] : s->warmup[i];
		off += (size_t)snprintf(out + off, outlen - off, "%s%llu", i ? "," : "", v);
	}
}

void twr_run_one(const twr_env *env, const twb_schedule *sched, twr_run *run)
{
	char exe[1024], key[256], slog[1200], clog[1200], res[1200], addr[512] = "";
	char sizes[512], iters[512], warm[512], err[512];
	bool netns = !strcmp(run->net, "netns");
	const char *policy = twr_policy_name(run->policy);
	int cpu_client = -1, cpu_server = -1;
	twr_proc server = {0, -1, 0, true}, client = {0, -1, 0, true};
	uint64_t deadline;

	run->status = TWR_FAILED;
	run->num_stats = 0;
	run->reason[0] = '\0';
	if (netns && !env->ns_client[0]) {
		run->status = TWR_SKIPPED;
		snprintf(run->reason, sizeof(run->reason), "%s", env->netns_reason);
		return;
	}
	if (!strcmp(run->cpu, "same")) {
		cpu_client = cpu_server = env->cpu_a;
	} else if (!strcmp(run->cpu, "split")) {
		if (env->cpu_b < 0) {
			run->status = TWR_SKIPPED;
			snprintf(run->reason, sizeof(run->reason), "split placement needs 2 CPUs, have %d",
			         env->ncpus);
			return;
		}
		cpu_client = env->cpu_a;
		cpu_server = env->cpu_b;
	}
	snprintf(exe, sizeof(exe), "%s/%s", env->bindir, run->sys->driver);
	if (access(exe, X_OK) != 0) {
		run->status = TWR_SKIPPED;
		snprintf(run->reason, sizeof(run->reason), "driver %s not built", run->sys->driver);
		return;
	}
	snprintf(key, sizeof(key), "%s-%s-%s-%s", run->net, run->cpu, policy, run->sys->name);
	snprintf(slog, sizeof(slog), "%s/logs/%s.server.log", env->outdir, key);
	snprintf(clog, sizeof(clog), "%s/logs/%s.client.log", env->outdir, key);
	snprintf(res, sizeof(res), "%s/raw/%s.json", env->outdir, key);
	unlink(res);
	twr__join_list(sizes, sizeof(sizes), sched, 0);
	twr__join_list(iters, sizeof(iters), sched, 1);
	twr__join_list(warm, sizeof(warm), sched, 2);
	deadline = twb_now_ns() + (uint64_t)env->timeout_s * 1000000000ull;

	if (!run->sys->solo) {
		char *sargv[] = {exe, "--system", (char *)run->sys->arg, "--role", "server",
		                 "--policy", (char *)policy, "--bind",
		                 netns ? (char *)env->ip_server : "127.0.0.1",
		                 "--sizes", sizes, "--iters", iters, "--warmup", warm, NULL};
		if (twr__spawn(sargv, cpu_server, netns ? env->ns_server : NULL, slog, true, &server,
		               err, sizeof(err)) != 0) {
			snprintf(run->reason, sizeof(run->reason), "start server: %s", err);
			return;
		}
		uint64_t ready_by = twb_now_ns() + 60ull * 1000000000ull;
		if (twr__read_ready(&server, ready_by < deadline ? ready_by : deadline, addr,
		                    sizeof(addr)) != 0) {
			char last[400];
			bool exited = twr__wait(&server, twb_now_ns() + 2000000000ull);
			twr__last_line(slog, last, sizeof(last));
			if (exited && twr__exit_code(&server) == TWB_EXIT_UNSUPPORTED) {
				run->status = TWR_SKIPPED;
				snprintf(run->reason, sizeof(run->reason), "%s", last);
			} else {
				run->status = exited ? TWR_FAILED : TWR_TIMEOUT;
				snprintf(run->reason, sizeof(run->reason), "server never ready: %s", last);
			}
			twr__kill(&server);
			return;
		}
	}
	{
		char *cargv[] = {exe, "--system", (char *)run->sys->arg, "--role",
		                 run->sys->solo ? "solo" : "client", "--policy", (char *)policy,
		                 "--addr", addr, "--bind",
		                 netns ? (char *)env->ip_client : "127.0.0.1", "--out", res,
		                 "--sizes", sizes, "--iters", iters, "--warmup", warm, NULL};
		if (twr__spawn(cargv, cpu_client, netns ? env->ns_client : NULL, clog, false, &client,
		               err, sizeof(err)) != 0) {
			snprintf(run->reason, sizeof(run->reason), "start client: %s", err);
			twr__kill(&server);
			return;
		}
	}
	if (!twr__wait(&client, deadline)) {
		run->status = TWR_TIMEOUT;
		snprintf(run->reason, sizeof(run->reason), "no result after %u s (see %s)",
		         env->timeout_s, clog);
		twr__kill(&client);
		twr__kill(&server);
		return;
	}
	if (!run->sys->solo && !twr__wait(&server, twb_now_ns() + 10000000000ull)) {
		/* the client has its samples; a server that does not notice the end
		 * is a fault of the system under test, so say so */
		twr__kill(&server);
		run->status = TWR_FAILED;
		snprintf(run->reason, sizeof(run->reason), "server did not exit within 10 s after the "
		         "client finished");
		twr__kill(&client);
		return;
	}
	twr__kill(&server); /* closes its stdout pipe; reaped already */
	{
		int cc = twr__exit_code(&client), sc = run->sys->solo ? 0 : twr__exit_code(&server);
		char last[400];
		if (cc == TWB_EXIT_UNSUPPORTED || sc == TWB_EXIT_UNSUPPORTED) {
			twr__last_line(cc == TWB_EXIT_UNSUPPORTED ? clog : slog, last, sizeof(last));
			run->status = TWR_SKIPPED;
			snprintf(run->reason, sizeof(run->reason), "%s", last);
			return;
		}
		if (cc != 0 || sc != 0) {
			twr__last_line(cc != 0 ? clog : slog, last, sizeof(last));
			snprintf(run->reason, sizeof(run->reason), "%s exit %d: %s",
			         cc != 0 ? "client" : "server", cc != 0 ? cc : sc, last);
			return;
		}
	}
	if (twr__parse_results(res, run, sched) != 0)
		return;
	run->status = TWR_OK;
}

/* ---- network namespaces --------------------------------------------------------------- */

static char twr__ns[2][32];
static bool twr__ns_made[2];

static int twr__ip(char *errbuf, size_t errlen, const char *a0, ...)
{
	char *argv[16];
	size_t n = 0;
	va_list ap;
	pid_t pid;
	int status;
	posix_spawn_file_actions_t fa;

	argv[n++] = "ip";
	va_start(ap, a0);
	for (const char *s = a0; s && n < 15; s = va_arg(ap, const char *))
		argv[n++] = (char *)s;
	va_end(ap);
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
	if (posix_spawnp(&pid, "ip", &fa, NULL, argv, environ) != 0) {
		posix_spawn_file_actions_destroy(&fa);
		snprintf(errbuf, errlen, "cannot run ip(8) (package iproute2)");
		return -1;
	}
	posix_spawn_file_actions_destroy(&fa);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		size_t off = (size_t)snprintf(errbuf, errlen, "'ip");
		for (size_t i = 1; i < n && off < errlen; i++)
			off += (size_t)snprintf(errbuf + off, errlen - off, " %s", argv[i]);
		if (off < errlen)
			snprintf(errbuf + off, errlen - off, "' failed");
		return -1;
	}
	return 0;
}

void twr_netns_teardown(void)
{
	char err[256];
	for (int i = 0; i < 2; i++) {
		if (twr__ns_made[i]) {
			twr__ip(err, sizeof(err), "netns", "del", twr__ns[i], NULL);
			twr__ns_made[i] = false;
		}
	}
}

bool twr_netns_setup(twr_env *env)
{
	char err[256], err2[256], va[16], vb[16];
	int pid = (int)getpid();

	if (geteuid() != 0) {
		snprintf(env->netns_reason, sizeof(env->netns_reason),
		         "two-host runs need root (ip netns add); running as uid %d", (int)geteuid());
		return false;
	}
	snprintf(twr__ns[0], sizeof(twr__ns[0]), "twb%d-client", pid);
	snprintf(twr__ns[1], sizeof(twr__ns[1]), "twb%d-server", pid);
	snprintf(va, sizeof(va), "twb%da", pid % 10000000);
	snprintf(vb, sizeof(vb), "twb%db", pid % 10000000);
	for (int i = 0; i < 2; i++) {
		if (twr__ip(err, sizeof(err), "netns", "add", twr__ns[i], NULL) != 0)
			goto err_teardown;
		twr__ns_made[i] = true;
	}
	if (twr__ip(err, sizeof(err), "link", "add", va, "type", "veth", "peer", "name", vb, NULL) ||
	    twr__ip(err, sizeof(err), "link", "set", va, "netns", twr__ns[0], NULL) ||
	    twr__ip(err, sizeof(err), "link", "set", vb, "netns", twr__ns[1], NULL) ||
	    twr__ip(err, sizeof(err), "-n", twr__ns[0], "addr", "add", "10.77.0.1/24", "dev", va, NULL) ||
	    twr__ip(err, sizeof(err), "-n", twr__ns[1], "addr", "add", "10.77.0.2/24", "dev", vb, NULL) ||
	    twr__ip(err, sizeof(err), "-n", twr__ns[0], "link", "set", va, "up", NULL) ||
	    twr__ip(err, sizeof(err), "-n", twr__ns[1], "link", "set", vb, "up", NULL) ||
	    twr__ip(err, sizeof(err), "-n", twr__ns[0], "link", "set", "lo", "up", NULL) ||
	    twr__ip(err, sizeof(err), "-n", twr__ns[1], "link", "set", "lo", "up", NULL))
		goto err_teardown;
	snprintf(env->ns_client, sizeof(env->ns_client), "%s", twr__ns[0]);
	snprintf(env->ns_server, sizeof(env->ns_server), "%s", twr__ns[1]);
	snprintf(env->ip_client, sizeof(env->ip_client), "10.77.0.1");
	snprintf(env->ip_server, sizeof(env->ip_server), "10.77.0.2");
	return true;

err_teardown:
	/* the veth pair goes with the namespaces; if it was made before a
	 * namespace move failed, delete it by name too */
	twr__ip(err2, sizeof(err2), "link", "del", va, NULL);
	twr_netns_teardown();
	snprintf(env->netns_reason, sizeof(env->netns_reason), "netns setup: %.200s", err);
	return false;
}
