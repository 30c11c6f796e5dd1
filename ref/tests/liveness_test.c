/*
 * liveness_test.c - a silent network or a silent peer never leaves an
 * operation pending forever (tensorwire.h: connect, liveness and operation
 * timeouts). Two processes in two network namespaces A and B that reach
 * each other through a router namespace R (run through netns_pair.sh): the
 * server (a child) in A, the client in B; the path is silenced in R.
 *
 *   silent_drop       every packet is dropped in R (a tbf qdisc that passes
 *                     nothing, on both of R's links): the pending operations
 *                     on both sides fail with TW_ERR_TIMEDOUT within the
 *                     liveness bound plus a margin
 *   silent_blackhole  the same with blackhole routes in R
 *   connect_dropped   SYNs are dropped: the connect fails with
 *                     TW_ERR_TIMEDOUT within the connect timeout
 *   stopped_peer      the server is stopped with SIGSTOP (its kernel still
 *                     answers TCP): a read_descriptor with an operation
 *                     timeout fails with TW_ERR_TIMEDOUT, and a big write and
 *                     a small one queued behind it fail with it at once
 *
 * After each, the block is lifted and a new pipe between the same two
 * processes carries a message: nothing was left broken.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>

#include "pair_util.h"
#include "proc_util.h"

/* LIVENESS_TEST_UNBOUNDED=1 sets every bound to 0 (none, as before they
 * existed), to show what each case guards against: it then hangs until its
 * watchdog. */
#define BOUND_MS bound_ms()
static uint64_t bound_ms(void)
{
	const char *u = getenv("LIVENESS_TEST_UNBOUNDED");
	return u && *u == '1' ? 0 : 2000;
}
/* Detection lags the bound by up to one keepalive interval (1 s here) and
 * a retransmission; under sanitizers and on a loaded 2-core machine give it
 * a few seconds more. Without the bounds these operations stayed pending
 * for minutes. */
#define MARGIN_MS 6000

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	printf("   $ %s\n", cmd);
	CHECK(system(cmd) == 0);
}

enum block_how { BLOCK_DROP, BLOCK_BLACKHOLE };

/* Silences the path between the hosts in the router (netns_pair.sh), or
 * lifts that: the hosts see nothing at all, no local error. */
static void block(enum block_how how, bool on)
{
	const char *r = tu_env("TW_NS_R");
	const char *dev[2] = { tu_env("TW_DEV_RA"), tu_env("TW_DEV_RB") };
	const char *host[2] = { tu_env("TW_ADDR_A"), tu_env("TW_ADDR_B") };
	for (int i = 0; i < 2; i++) {
		if (how == BLOCK_DROP && on) /* a bucket of 1 byte passes no packet */
			sh("tc -n %s qdisc replace dev %s root tbf rate 8bit burst 1 limit 1", r, dev[i]);
		else if (how == BLOCK_DROP)
			sh("tc -n %s qdisc del dev %s root", r, dev[i]);
		else
			sh("ip -n %s route %s blackhole %s/32", r, on ? "add" : "del", host[i]);
	}
}

/* ---- the server, a child process in namespace A ----------------------------------------- */

typedef struct peer {
	pid_t pid;
	int to;   /* parent -> child commands */
	int from; /* child -> parent: URL, then reports */
} peer;

typedef struct report {
	int32_t status;
	uint64_t at_ms;
	char detail[600];
} report;

/* Commands: 'w' arm a read_descriptor on the current pipe and report its
 * outcome; 'a' accept a new pipe, read one message on it and answer;
 * 'q' quit. The first accept happens at once. */
static void server_main(peer *pp)
{
	tu_watchdog(100); /* a fork does not inherit the parent's alarm */
	tu_enter_netns("TW_NS_A");
	tw_context *ctx;
	tu_ctx(&ctx, "server");
	CHECK_OK(tw_context_set_liveness_timeout(ctx, BOUND_MS));
	char lurl[128], url[128];
	snprintf(lurl, sizeof(lurl), "uv://%s:0", tu_env("TW_ADDR_A"));
	tw_listener *l = tu_listen(ctx, lurl, url, sizeof(url));
	tu_put(pp->from, url, sizeof(url));
	tw_pipe *p = NULL;
	for (;;) {
		char cmd;
		tu_get(pp->to, &cmd, 1);
		if (cmd == 'q')
			break;
		if (cmd == 'a') {
			tu_rec acc;
			tu_rec_init(&acc);
			CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
			tu_expect(&acc, TW_OK, NULL);
			if (p)
				tw_pipe_destroy(p);
			p = acc.pipe;
			tu_expect_text(p, "hello");
			tu_send_text(p, "hello back");
			tu_put(pp->from, "k", 1);
		} else if (cmd == 'w') {
			tu_rec d;
			tu_rec_init(&d);
			CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
			tu_put(pp->from, "r", 1); /* armed */
			tu_wait(&d.w, 1);
			report r = { .status = d.status, .at_ms = tu_now_ms() };
			snprintf(r.detail, sizeof(r.detail), "%s", d.detail);
			tu_put(pp->from, &r, sizeof(r));
			tu_once(&d);
		}
	}
	if (p)
		tw_pipe_destroy(p);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
	_exit(0);
}

static void server_start(peer *pp, char *url, size_t url_len)
{
	int to[2], from[2];
	CHECK(pipe(to) == 0 && pipe(from) == 0);
	fflush(NULL);
	pp->pid = fork();
	CHECK(pp->pid >= 0);
	if (pp->pid == 0) {
		close(to[1]), close(from[0]);
		pp->to = to[0];
		pp->from = from[1];
		server_main(pp);
	}
	close(to[0]), close(from[1]);
	pp->to = to[1];
	pp->from = from[0];
	char buf[128];
	tu_get(pp->from, buf, sizeof(buf));
	snprintf(url, url_len, "%s", buf);
}

static void server_stop(peer *pp)
{
	tu_put(pp->to, "q", 1);
	int status;
	CHECK(waitpid(pp->pid, &status, 0) == pp->pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- the client, in namespace B -------------------------------------------------------- */

static tw_context *client_ctx(void)
{
	tw_context *c;
	tu_ctx(&c, "client");
	CHECK_OK(tw_context_set_liveness_timeout(c, BOUND_MS));
	CHECK_OK(tw_context_set_connect_timeout(c, BOUND_MS));
	return c;
}

/* Every case: the server in A, then this process into B with its client
 * context; and the orderly end of both. */
static tw_context *both_start(peer *pp, char *url, size_t url_len)
{
	server_start(pp, url, url_len);
	tu_enter_netns("TW_NS_B");
	return client_ctx();
}

static void both_stop(peer *pp, tw_context *c)
{
	server_stop(pp);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
}

/* A new pipe to the server carries a message each way. */
static tw_pipe *client_round(tw_context *c, peer *pp, const char *url)
{
	tu_put(pp->to, "a", 1);
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, url, &p));
	tu_send_text(p, "hello");
	tu_expect_text(p, "hello back");
	char k;
	tu_get(pp->from, &k, 1);
	return p;
}

/* The link works again: a new pipe carries a message each way; then both
 * ends stop in order. */
static void recovered_then_stop(tw_context *c, peer *pp, const char *url)
{
	tw_pipe_destroy(client_round(c, pp, url));
	both_stop(pp, c);
}

static void check_within(const char *who, uint64_t since, uint64_t at, uint64_t bound)
{
	uint64_t took = at - since;
	printf("   %s failed %llu ms after the block (bound %llu ms)\n", who,
	       (unsigned long long)took, (unsigned long long)bound);
	CHECK(bound > 0 && took <= bound + MARGIN_MS);
}

static void silent(enum block_how how)
{
	char url[128];
	peer pp;
	tw_context *c = both_start(&pp, url, sizeof(url));
	tw_pipe *p = client_round(c, &pp, url);
	/* Pending on both sides when the link goes silent: the server's and
	 * the client's read_descriptor, and a write the client makes after,
	 * larger than the socket buffers (a small one is handed to the kernel in
	 * full at once, which is all a write callback reports). */
	tu_put(pp.to, "w", 1);
	char armed;
	tu_get(pp.from, &armed, 1);
	tu_rec d, w;
	tu_rec_init(&d), tu_rec_init(&w);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
	block(how, true);
	uint64_t t0 = tu_now_ms();
	tw_tensor t;
	tw_message m;
	uint8_t *big = tu_big_message((size_t)64 << 20, &t, &m);
	CHECK_OK(tw_pipe_write(p, &m, tu_on_status, &w));
	tu_wait(&d.w, 1);
	uint64_t t_read = tu_now_ms();
	tu_wait(&w.w, 1);
	printf("   client read_descriptor: %s: %s\n", tw_status_name(d.status), d.detail);
	printf("   client write: %s: %s\n", tw_status_name(w.status), w.detail);
	tu_expect(&d, TW_ERR_TIMEDOUT, "liveness bound");
	tu_expect(&w, TW_ERR_TIMEDOUT, "liveness bound");
	check_within("client read_descriptor", t0, t_read, BOUND_MS);
	report r;
	tu_get(pp.from, &r, sizeof(r));
	printf("   server read_descriptor: %s: %s\n", tw_status_name((tw_status_t)r.status), r.detail);
	CHECK_STATUS((tw_status_t)r.status, TW_ERR_TIMEDOUT);
	CHECK(strstr(r.detail, "liveness bound"));
	check_within("server read_descriptor", t0, r.at_ms, BOUND_MS);
	tu_once(&d), tu_once(&w);
	free(big);
	tw_pipe_destroy(p);
	block(how, false);
	recovered_then_stop(c, &pp, url);
}

static void case_silent_drop(void)
{
	silent(BLOCK_DROP);
}

static void case_silent_blackhole(void)
{
	silent(BLOCK_BLACKHOLE);
}

static void case_connect_dropped(void)
{
	char url[128];
	peer pp;
	tw_context *c = both_start(&pp, url, sizeof(url));
	block(BLOCK_DROP, true);
	uint64_t t0 = tu_now_ms();
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, url, &p));
	tu_rec est, w;
	tu_rec_init(&est), tu_rec_init(&w);
	static const char text[] = "never sent";
	tw_message m = { .metadata = text, .metadata_length = sizeof(text) };
	CHECK_OK(tw_pipe_write(p, &m, tu_on_status, &w));
	CHECK_OK(tw_pipe_on_established(p, tu_on_status, &est));
	tu_wait(&est.w, 1);
	uint64_t t1 = tu_now_ms();
	tu_wait(&w.w, 1);
	printf("   connect: %s: %s\n", tw_status_name(est.status), est.detail);
	tu_expect(&est, TW_ERR_TIMEDOUT, "connect");
	tu_expect(&w, TW_ERR_TIMEDOUT, "connect");
	check_within("the connect", t0, t1, BOUND_MS);
	tu_once(&est), tu_once(&w);
	tw_pipe_destroy(p);
	block(BLOCK_DROP, false);
	recovered_then_stop(c, &pp, url);
}

static void case_stopped_peer(void)
{
	char url[128];
	peer pp;
	tw_context *c = both_start(&pp, url, sizeof(url));
	tw_pipe *p = client_round(c, &pp, url);
	CHECK(kill(pp.pid, SIGSTOP) == 0);
	printf("   server (pid %d) stopped with SIGSTOP\n", (int)pp.pid);
	CHECK_OK(tw_pipe_set_operation_timeout(p, BOUND_MS));
	uint64_t t0 = tu_now_ms();
	/* A read nobody answers, a write too big for the socket buffers of a
	 * peer that reads nothing, and a small write queued behind it. */
	tw_tensor t;
	tw_message mb;
	uint8_t *big = tu_big_message((size_t)64 << 20, &t, &mb);
	static const char text[] = "behind the big one";
	tw_message ms = { .metadata = text, .metadata_length = sizeof(text) };
	tu_rec d, wb, ws;
	tu_rec_init(&d), tu_rec_init(&wb), tu_rec_init(&ws);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
	CHECK_OK(tw_pipe_write(p, &mb, tu_on_status, &wb));
	CHECK_OK(tw_pipe_write(p, &ms, tu_on_status, &ws));
	tu_wait(&d.w, 1);
	uint64_t t1 = tu_now_ms();
	tu_wait(&wb.w, 1);
	tu_wait(&ws.w, 1);
	printf("   read_descriptor: %s: %s\n", tw_status_name(d.status), d.detail);
	printf("   big write: %s: %s\n", tw_status_name(wb.status), wb.detail);
	printf("   small write: %s: %s\n", tw_status_name(ws.status), ws.detail);
	tu_expect(&d, TW_ERR_TIMEDOUT, "operation timeout");
	tu_expect(&wb, TW_ERR_TIMEDOUT, "operation timeout");
	tu_expect(&ws, TW_ERR_TIMEDOUT, "operation timeout");
	check_within("the first operation", t0, t1, BOUND_MS);
	/* A later operation fails at once, with the same error. */
	tu_rec d2;
	tu_rec_init(&d2);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d2));
	tu_expect(&d2, TW_ERR_TIMEDOUT, "operation timeout");
	tu_once(&d), tu_once(&wb), tu_once(&ws), tu_once(&d2);
	free(big);
	tw_pipe_destroy(p);
	CHECK(kill(pp.pid, SIGCONT) == 0);
	recovered_then_stop(c, &pp, url);
}

static const tu_case cases[] = {
	{ "silent_drop", case_silent_drop },
	{ "silent_blackhole", case_silent_blackhole },
	{ "connect_dropped", case_connect_dropped },
	{ "stopped_peer", case_stopped_peer },
};

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
