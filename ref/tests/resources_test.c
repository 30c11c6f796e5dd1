/*
 * resources_test.c - a server short of resources, and many clients at once
 * (spec/wire.md 5.8.d, 5.8.e):
 *
 *   emfile_none_left  the server process has no free descriptor at all: a
 *                     client's pipe fails promptly (not after a handshake
 *                     timeout) with an error that says the server dropped
 *                     its connection; the server's error observer hears
 *                     EMFILE; a pipe the server already has keeps working;
 *                     once descriptors are free again a new client is served
 *   emfile_two_left   the server has two descriptors left: the bootstrap
 *                     connection gets in, the pipe's other connections do
 *                     not; both ends learn promptly, the same way
 *   emfile_shm_client a client with two descriptors left connects over shm:
 *                     the pipe fails with TW_ERR_SYS naming the call
 *   storm             200 clients connect at once, three rounds, from one
 *                     network namespace to another (netns_pair.sh): every
 *                     pipe is established on both ends and carries a
 *                     message, and the server's listen queue never
 *                     overflows (its kernel counter, per namespace)
 *
 * The server is a child process (its descriptor limit is its own); the
 * parent is the client.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "pair_util.h"
#include "proc_util.h"

#define PROMPT_MS 5000 /* "promptly": well below the 30 s handshake timeout */

/* The highest descriptor open now, plus one. */
static int fd_ceiling(void)
{
	DIR *d = opendir("/proc/self/fd");
	CHECK(d);
	int top = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		int fd = atoi(e->d_name);
		if (fd != dirfd(d) && fd + 1 > top)
			top = fd + 1;
	}
	closedir(d);
	return top;
}

static void set_nofile(rlim_t soft)
{
	struct rlimit rl;
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	rl.rlim_cur = soft;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
}

/* Leaves exactly `spare` descriptors free: a limit just above the highest
 * one open, and every free number below it filled with /dev/null (into
 * fillers, at most 1024; returns how many). */
static int leave_free(int spare, int *fillers)
{
	int top = fd_ceiling();
	set_nofile((rlim_t)(top + spare));
	int nfill = 0;
	for (;;) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
		CHECK(nfill < 1024);
		fillers[nfill++] = fd;
	}
	CHECK(errno == EMFILE && nfill >= spare);
	for (int i = 0; i < spare; i++)
		close(fillers[--nfill]);
	printf("   descriptor limit %d, %d free\n", top + spare, spare);
	return nfill;
}

/* ---- out of descriptors ----------------------------------------------------------------- */

typedef struct child {
	pid_t pid;
	int to, from;
} child;

static void child_start(child *c, void (*fn)(int to, int from, int arg), int arg, char *url,
                        size_t url_len)
{
	int to[2], from[2];
	CHECK(pipe(to) == 0 && pipe(from) == 0);
	fflush(NULL);
	c->pid = fork();
	CHECK(c->pid >= 0);
	if (c->pid == 0) {
		tu_watchdog(100); /* a fork does not inherit the parent's alarm */
		close(to[1]), close(from[0]);
		fn(to[0], from[1], arg);
		_exit(0);
	}
	close(to[0]), close(from[1]);
	c->to = to[1];
	c->from = from[0];
	char buf[128];
	tu_get(c->from, buf, sizeof(buf));
	snprintf(url, url_len, "%s", buf);
}

static void child_wait(child *c)
{
	int status;
	CHECK(waitpid(c->pid, &status, 0) == c->pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(c->to), close(c->from);
}

/* The server: serves one pipe (a message each way), then limits its
 * descriptors to what it has open plus `spare`, says 'l', and on 'r'
 * checks what its error observer heard, lifts the limit, serves a second
 * pipe on the old one and a third new one, and exits on 'q'. */
static void emfile_server(int to, int from, int spare)
{
	tw_context *ctx;
	tu_ctx(&ctx, "server");
	char url[128];
	tw_listener *l = tu_listen(ctx, NULL, url, sizeof(url));
	tu_reports rep;
	tu_reports_init(&rep);
	CHECK_OK(tw_listener_on_error(l, tu_on_listener_error, &rep));
	tu_put(from, url, sizeof(url));
	tu_rec acc;
	tu_rec_init(&acc);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
	tu_expect(&acc, TW_OK, NULL);
	tw_pipe *kept = acc.pipe;
	tu_expect_text(kept, "first");
	tu_send_text(kept, "first back");
	/* An accept stays armed through the shortage: whatever it gets must
	 * be the client that comes after it. */
	tu_rec acc2;
	tu_rec_init(&acc2);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc2));
	struct rlimit old;
	CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
	usleep(100 * 1000); /* the loop thread settles its descriptors */
	int fillers[1024], nfill = leave_free(spare, fillers);
	tu_put(from, "l", 1);
	char cmd;
	tu_get(to, &cmd, 1);
	CHECK(cmd == 'r');
	/* What the observer heard: the refused connection, named. */
	tu_expect_report(&rep, TW_ERR_SYS, "Too many open files", 1000);
	/* The pipe it had still works during the shortage. */
	tu_expect_text(kept, "still there");
	tu_send_text(kept, "still here");
	set_nofile(old.rlim_cur);
	while (nfill > 0)
		close(fillers[--nfill]);
	tu_put(from, "u", 1);
	/* With descriptors to spare, the shortage client's bootstrap connection
	 * got in, so the armed accept may hand over its pipe, which then fails
	 * to establish (its other connections were refused): skip it. */
	tu_rec *a = &acc2, acc3;
	tw_pipe *next;
	for (;;) {
		tu_expect(a, TW_OK, NULL);
		tu_rec e;
		tu_rec_init(&e);
		CHECK_OK(tw_pipe_on_established(a->pipe, tu_on_status, &e));
		tu_wait(&e.w, 1);
		tu_once(&e);
		if (e.status == TW_OK) {
			next = a->pipe;
			break;
		}
		printf("   server: the shortage's pipe failed: %s: %s\n", tw_status_name(e.status),
		       e.detail);
		CHECK(spare > 0 && a == &acc2);
		tw_pipe_destroy(a->pipe);
		tu_rec_init(&acc3);
		CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc3));
		a = &acc3;
	}
	tu_expect_text(next, "after");
	tu_send_text(next, "after back");
	tu_get(to, &cmd, 1);
	CHECK(cmd == 'q');
	tw_pipe_destroy(next);
	tw_pipe_destroy(kept);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
	tu_once(&acc), tu_once(a);
	tu_reports_destroy(&rep);
}

static void emfile(int spare)
{
	char url[128];
	child c;
	child_start(&c, emfile_server, spare, url, sizeof(url));
	tw_context *ctx;
	tu_ctx(&ctx, "client");
	tw_pipe *kept;
	CHECK_OK(tw_context_connect(ctx, url, &kept));
	tu_send_text(kept, "first");
	tu_expect_text(kept, "first back");
	char b;
	tu_get(c.from, &b, 1);
	CHECK(b == 'l');
	/* A client during the shortage: a pending read and the established
	 * notification both fail, promptly, saying what happened. */
	uint64_t t0 = tu_now_ms();
	tw_pipe *p;
	CHECK_OK(tw_context_connect(ctx, url, &p));
	tu_rec est, rd;
	tu_rec_init(&est), tu_rec_init(&rd);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	CHECK_OK(tw_pipe_on_established(p, tu_on_status, &est));
	tu_wait(&rd.w, 1);
	uint64_t took = tu_now_ms() - t0;
	printf("   client during the shortage: %s after %llu ms: %s\n", tw_status_name(rd.status),
	       (unsigned long long)took, rd.detail);
	CHECK(rd.status == TW_ERR_CONNRESET || rd.status == TW_ERR_EOF);
	/* before the BrochureAnswer: "the server dropped the connection"; after
	 * it: "it may have dropped the connection (out of file descriptors" */
	CHECK(strstr(rd.detail, "dropped the connection") && strstr(rd.detail, "file descriptors"));
	CHECK(took < PROMPT_MS);
	tu_wait(&est.w, 1);
	tu_once(&rd), tu_once(&est);
	tw_pipe_destroy(p);
	tu_put(c.to, "r", 1);
	/* The pipe the server had keeps working. */
	tu_send_text(kept, "still there");
	tu_expect_text(kept, "still here");
	tu_get(c.from, &b, 1);
	CHECK(b == 'u');
	/* Descriptors are free again: a new client is served. */
	CHECK_OK(tw_context_connect(ctx, url, &p));
	tu_send_text(p, "after");
	tu_expect_text(p, "after back");
	tu_put(c.to, "q", 1);
	child_wait(&c);
	tw_pipe_destroy(p);
	tw_pipe_destroy(kept);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
}

static void case_emfile_none_left(void)
{
	emfile(0);
}

static void case_emfile_two_left(void)
{
	emfile(2);
}

/* A client process with two descriptors left connects over shm: its
 * connection's socket takes one, the inbox's header segment the other, and
 * the data segment cannot be made. The pipe fails with TW_ERR_SYS naming
 * the call and the errno (before: TW_ERR_NOMEM, "allocation failed"). */
static void case_emfile_shm_client(void)
{
	tw_context *s, *c;
	CHECK_OK(tw_context_create("server", &s));
	CHECK_OK(tw_context_create("client", &c));
	tw_status_t st = tw_context_register_transport(s, "shm", NULL, 0, NULL);
	if (st == TW_ERR_UNSUPPORTED) {
		printf("SKIP: shm is not viable here: %s\n", tw_last_error());
		exit(77);
	}
	CHECK_OK(st);
	CHECK_OK(tw_context_register_transport(c, "shm", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(s, "basic", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(c, "basic", NULL, 0, NULL));
	const char *urls[] = { "shm://" };
	tw_listener *l;
	CHECK_OK(tw_context_listen(s, urls, 1, &l));
	char url[128];
	CHECK_OK(tw_listener_url(l, NULL, url, sizeof(url)));
	tu_rec acc, e;
	tu_rec_init(&acc), tu_rec_init(&e);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
	usleep(100 * 1000); /* the loop threads settle their descriptors */
	struct rlimit old;
	CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
	int fillers[1024], nfill = leave_free(2, fillers);
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, url, &p));
	CHECK_OK(tw_pipe_on_established(p, tu_on_status, &e));
	tu_wait(&e.w, 1);
	set_nofile(old.rlim_cur);
	while (nfill > 0)
		close(fillers[--nfill]);
	printf("   client with two descriptors left: %s: %s\n", tw_status_name(e.status), e.detail);
	tu_expect(&e, TW_ERR_SYS, "Too many open files");
	tu_once(&e);
	tw_pipe_destroy(p);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(c));
	CHECK_OK(tw_context_join(s));
	tw_context_destroy(c);
	tw_context_destroy(s);
	if (acc.calls && acc.status == TW_OK)
		tw_pipe_destroy(acc.pipe);
}

/* ---- a connection storm ----------------------------------------------------------------- */

/* TcpExt ListenOverflows of this network namespace: connections the kernel
 * dropped because a listen queue was full (their clients wait for a SYN
 * retransmission, 1 s or more, or fail). */
static long long listen_overflows(void)
{
	FILE *f = fopen("/proc/net/netstat", "r");
	CHECK(f);
	static char names[8192], values[8192];
	long long v = -1;
	while (fgets(names, sizeof(names), f) && fgets(values, sizeof(values), f)) {
		if (strncmp(names, "TcpExt:", 7) != 0)
			continue;
		char *sn, *sv;
		char *n = strtok_r(names, " \n", &sn), *x = strtok_r(values, " \n", &sv);
		while (n && x) {
			if (strcmp(n, "ListenOverflows") == 0)
				v = atoll(x);
			n = strtok_r(NULL, " \n", &sn);
			x = strtok_r(NULL, " \n", &sv);
		}
	}
	fclose(f);
	CHECK(v >= 0);
	return v;
}

enum { STORM = 200, ROUNDS = 3 };

/* The server: for each round, accepts STORM pipes, reads one message on
 * each and answers it (a pipe it cannot serve fails its checks and ends the
 * child), then reports the round's listen-queue overflows. */
static void storm_server(int to, int from, int unused)
{
	tu_enter_netns("TW_NS_A");
	tw_context *ctx;
	tu_ctx(&ctx, "server");
	char listen_url[128];
	snprintf(listen_url, sizeof(listen_url), "uv://%s:0", tu_env("TW_ADDR_A"));
	char url[128];
	tw_listener *l = tu_listen(ctx, listen_url, url, sizeof(url));
	tu_put(from, url, sizeof(url));
	static tu_rec acc[STORM];
	for (int round = 0; round < ROUNDS; round++) {
		for (int i = 0; i < STORM; i++) {
			tu_rec_init(&acc[i]);
			CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc[i]));
		}
		long long overflows = listen_overflows();
		tu_put(from, "a", 1); /* armed */
		for (int i = 0; i < STORM; i++) {
			tu_expect(&acc[i], TW_OK, NULL);
			tu_expect_text(acc[i].pipe, "storm");
			tu_send_text(acc[i].pipe, "calm");
		}
		overflows = listen_overflows() - overflows;
		tu_put(from, &overflows, sizeof(overflows));
		char b;
		tu_get(to, &b, 1); /* the client has read every answer */
		for (int i = 0; i < STORM; i++) {
			tw_pipe_destroy(acc[i].pipe);
			tu_once(&acc[i]);
		}
	}
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
}

static void case_storm(void)
{
	struct rlimit rl;
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 4 * STORM + 64) {
		printf("SKIP: the descriptor limit (%llu) is below the %d this storm needs\n",
		       (unsigned long long)rl.rlim_max, 4 * STORM + 64);
		exit(77);
	}
	set_nofile(rl.rlim_max == RLIM_INFINITY ? 65536 : rl.rlim_max);
	char url[128];
	child c;
	child_start(&c, storm_server, 0, url, sizeof(url));
	tu_enter_netns("TW_NS_B");
	tw_context *ctx;
	tu_ctx(&ctx, "client");
	static tw_pipe *p[STORM];
	static tu_rec est[STORM];
	static tu_rec wr[STORM];
	static tu_rec rd[STORM];
	static const char text[] = "storm";
	tw_message m = { .metadata = text, .metadata_length = strlen(text) };
	for (int round = 0; round < ROUNDS; round++) {
		char b;
		tu_get(c.from, &b, 1);
		/* All at once: connects, writes and reads queued before any
		 * handshake completes. */
		for (int i = 0; i < STORM; i++) {
			tu_rec_init(&est[i]), tu_rec_init(&wr[i]), tu_rec_init(&rd[i]);
			CHECK_OK(tw_context_connect(ctx, url, &p[i]));
			CHECK_OK(tw_pipe_on_established(p[i], tu_on_status, &est[i]));
			CHECK_OK(tw_pipe_write(p[i], &m, tu_on_status, &wr[i]));
			CHECK_OK(tw_pipe_read_descriptor(p[i], tu_on_desc, &rd[i]));
		}
		int lost = 0;
		for (int i = 0; i < STORM; i++) {
			tu_wait(&rd[i].w, 1);
			tu_wait(&wr[i].w, 1);
			tu_wait(&est[i].w, 1);
			if (rd[i].status != TW_OK || wr[i].status != TW_OK || est[i].status != TW_OK) {
				if (lost++ < 5)
					printf("   lost pipe %d: established %s, write %s, read %s: %s\n", i,
					       tw_status_name(est[i].status), tw_status_name(wr[i].status),
					       tw_status_name(rd[i].status), rd[i].detail);
				continue;
			}
			CHECK(rd[i].desc->metadata_length == 4 &&
			      memcmp(rd[i].desc->metadata, "calm", 4) == 0);
			tu_rec r;
			tu_rec_init(&r);
			tw_allocation a = { 0 };
			CHECK_OK(tw_pipe_read(p[i], &a, tu_on_status, &r));
			tu_expect(&r, TW_OK, NULL);
			tu_once(&r);
		}
		long long overflows = -1;
		if (lost == 0)
			tu_get(c.from, &overflows, sizeof(overflows));
		printf("   round %d: %d clients at once, %d pipes lost, %lld listen-queue overflows\n",
		       round + 1, STORM, lost, overflows);
		/* An overflow costs its client a SYN retransmission (1 s) at best. */
		CHECK(lost == 0 && overflows == 0);
		tu_put(c.to, "d", 1);
		for (int i = 0; i < STORM; i++) {
			tu_once(&est[i]);
			tu_once(&wr[i]);
			tu_once(&rd[i]);
			tw_pipe_destroy(p[i]);
		}
	}
	child_wait(&c);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
}

static const tu_case cases[] = {
	{ "emfile_none_left", case_emfile_none_left },
	{ "emfile_two_left", case_emfile_two_left },
	{ "emfile_shm_client", case_emfile_shm_client },
	{ "storm", case_storm },
};

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
