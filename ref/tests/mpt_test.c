/*
 * mpt_test.c - what the battery does not reach in the mpt channel
 * (spec/wire.md 4.3):
 *
 *   chunks     lanes=3: tensors of 1, 2, 3, 4 and 1 MiB + 1 bytes (fewer
 *              bytes than lanes: empty chunks on some lanes) and an empty
 *              one, in one message and in order, arrive intact
 *   mismatch   2 lanes against 3: the device descriptors differ, so mpt
 *              is not selected (no handshake that cannot work); the pipe
 *              still carries payloads and a tensor write fails alone,
 *              naming the device pair
 *   options    a bad lane count or option is refused naming the option
 *   fixed_ports  listen=127.0.0.1:P with 3 lanes: lanes listen on P, P+1
 *              and P+2 (one port for all failed from the second lane on)
 *   stalled_lanes  a reader that reads nothing: the writer's lanes get the
 *              context's liveness bound, so a tensor write fails with
 *              TW_ERR_TIMEDOUT within it (the lanes had no bound before,
 *              and the write waited forever)
 *   peer_left_before_lanes  a raw client gets the server's mpt instance
 *              set up (the control connection, the ServerHello), sends a
 *              message whose tensor goes on mpt, and leaves without
 *              connecting a lane: the server's read fails within the lanes'
 *              grace (1 s) with the end of file the pipe saw (before, it
 *              waited for lanes for good: the read never called back)
 *   netns_lanes  two hosts (network namespaces, netns_pair.sh): the
 *              server's host also has an interface the client cannot reach,
 *              listed first; its lane listeners (a wildcard) are advertised
 *              at the address the client reached the server at, so a tensor
 *              over mpt arrives (before, the lanes were advertised at the
 *              unreachable address and the pipe failed)
 *
 * One process, two contexts, uv transport (netns_lanes: two processes).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include "pair_util.h"
#include "proc_util.h"
#include "raw_util.h"

static void mpt_ctx(tw_context **c, const char *name, const char *options)
{
	CHECK_OK(tw_context_create(name, c));
	CHECK_OK(tw_context_register_transport(*c, "uv", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(*c, "mpt", NULL, 0, options));
}

static void case_chunks(void)
{
	tu_pair p = { 0 };
	mpt_ctx(&p.sctx, "server", "lanes=3,listen=127.0.0.1:0");
	mpt_ctx(&p.cctx, "client", "lanes=3,listen=127.0.0.1:0");
	tu_pair_open(&p, "tcp://127.0.0.1:0");
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p.c, &info));
	CHECK(strcmp(info.channel, "mpt") == 0);
	enum { N = 6 };
	static const size_t lens[N] = { 1, 2, 3, 0, 4, (1u << 20) + 1 };
	uint8_t *src[N], *dst[N];
	tw_tensor t[N];
	tw_tensor_allocation ta[N];
	for (int i = 0; i < N; i++) {
		src[i] = malloc(lens[i] + 1);
		dst[i] = calloc(1, lens[i] + 1);
		CHECK(src[i] && dst[i]);
		tu_fill_at(src[i], lens[i], 500 + (uint64_t)i);
		t[i] = (tw_tensor){ .data = src[i], .length = lens[i], .source_device = tw_device_cpu(),
			            .has_target_device = true, .target_device = tw_device_cpu() };
		ta[i] = (tw_tensor_allocation){ .data = dst[i], .device = tw_device_cpu() };
	}
	tw_message m = { .num_tensors = N, .tensors = t };
	for (int round = 0; round < 3; round++) {
		tu_rec w, d, r;
		tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
		CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
		CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
		tu_expect(&d, TW_OK, NULL);
		CHECK(d.desc->num_tensors == N);
		tw_allocation a = { .num_tensors = N, .tensors = ta };
		CHECK_OK(tw_pipe_read(p.s, &a, tu_on_status, &r));
		tu_expect(&r, TW_OK, NULL);
		tu_expect(&w, TW_OK, NULL);
		for (int i = 0; i < N; i++)
			CHECK(memcmp(src[i], dst[i], lens[i]) == 0);
		tu_once(&w), tu_once(&d), tu_once(&r);
		memset(dst[N - 1], 0, lens[N - 1]);
	}
	tu_pair_close(&p);
	for (int i = 0; i < N; i++)
		free(src[i]), free(dst[i]);
}

static void case_mismatch(void)
{
	tu_pair p = { 0 };
	mpt_ctx(&p.sctx, "server", "lanes=2,listen=127.0.0.1:0");
	mpt_ctx(&p.cctx, "client", "lanes=3,listen=127.0.0.1:0");
	tu_pair_open(&p, "tcp://127.0.0.1:0");
	/* Established without a channel: messages without tensors still go. */
	tu_send_text(p.c, "payloads still travel");
	tu_expect_text(p.s, "payloads still travel");
	/* A tensor fails alone, naming why, before anything is sent. */
	static uint8_t data[16];
	tw_tensor t = { .data = data, .length = sizeof(data), .source_device = tw_device_cpu(),
		        .has_target_device = true, .target_device = tw_device_cpu() };
	tw_message m = { .num_tensors = 1, .tensors = &t };
	tu_rec w;
	tu_rec_init(&w);
	CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
	tu_wait(&w.w, 1);
	printf("# the tensor write: %s: %s\n", tw_status_name(w.status), w.detail);
	CHECK(w.status == TW_ERR_UNSUPPORTED && strstr(w.detail, "cpu:0"));
	tu_send_text(p.c, "and after it");
	tu_expect_text(p.s, "and after it");
	tu_pair_close(&p);
	tu_once(&w);
}

static void case_options(void)
{
	static const char *const bad[][2] = {
		{ "lanes=0", "lanes" }, { "lanes=65", "lanes" }, { "lanes=two", "lanes" },
		{ "lane=2", "lane" }, { "lanes=2,listen=127.0.0.1:65535", "listen" },
		{ "listen=localhost:5", "listen" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tw_context *c;
		CHECK_OK(tw_context_create("opts", &c));
		tw_status_t st = tw_context_register_channel(c, "mpt", NULL, 0, bad[i][0]);
		printf("# '%s': %s: %s\n", bad[i][0], tw_status_name(st), tw_last_error());
		CHECK(st == TW_ERR_INVAL);
		CHECK(strstr(tw_last_error(), "mpt channel") && strstr(tw_last_error(), bad[i][1]));
		tw_context_destroy(c);
	}
}

/* Binds 127.0.0.1:port (SO_REUSEADDR, as listeners do); the socket, or -1. */
static int bind_port(unsigned port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	int on = 1;
	CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void case_fixed_ports(void)
{
	enum { LANES = 3 };
	unsigned base = 0;
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	for (int tries = 0; tries < 100 && !base; tries++) { /* three free ports in a row */
		unsigned p = 20000 + (unsigned)(rand() % 20000);
		int fds[LANES], n = 0;
		while (n < LANES && (fds[n] = bind_port(p + (unsigned)n)) >= 0)
			n++;
		for (int i = 0; i < n; i++)
			close(fds[i]);
		if (n == LANES)
			base = p;
	}
	CHECK(base != 0);
	char opts[96];
	snprintf(opts, sizeof(opts), "lanes=%d,listen=127.0.0.1:%u", LANES, base);
	printf("# server: %s\n", opts);
	tu_pair p = { 0 };
	mpt_ctx(&p.sctx, "server", opts);
	mpt_ctx(&p.cctx, "client", "lanes=3,listen=127.0.0.1:0");
	tu_pair_open(&p, "tcp://127.0.0.1:0");
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p.c, &info));
	CHECK(strcmp(info.channel, "mpt") == 0);
	tw_tensor t;
	tw_message m;
	size_t len = (size_t)1 << 20;
	uint8_t *src = tu_big_message(len, &t, &m), *dst = malloc(len);
	CHECK(dst);
	tu_fill_at(src, len, 7);
	tu_rec w, d, r;
	tw_tensor_allocation ta = { .data = dst, .device = t.source_device };
	tu_move_tensor(p.c, p.s, &t, &ta, &w, &d, &r);
	tu_expect(&r, TW_OK, NULL);
	tu_expect(&w, TW_OK, NULL);
	CHECK(memcmp(src, dst, len) == 0);
	tu_once(&w), tu_once(&d), tu_once(&r);
	for (unsigned i = 0; i < LANES; i++) { /* each lane holds its own port */
		int fd = bind_port(base + i);
		printf("# port %u: %s\n", base + i, fd < 0 ? "taken by a lane listener" : "free");
		CHECK(fd < 0);
	}
	free(src), free(dst);
	tu_pair_close(&p);
}

static void case_stalled_lanes(void)
{
	enum { BOUND_MS = 1000, MARGIN_MS = 8000 };
	tu_pair p = { 0 };
	mpt_ctx(&p.sctx, "server", "lanes=2,listen=127.0.0.1:0");
	mpt_ctx(&p.cctx, "client", "lanes=2,listen=127.0.0.1:0");
	CHECK_OK(tw_context_set_liveness_timeout(p.cctx, BOUND_MS));
	tu_pair_open(&p, "tcp://127.0.0.1:0");
	/* 256 MiB: far more than loopback's socket buffers hold, so the
	 * lanes' windows close with the reader reading nothing. */
	tw_tensor t;
	tw_message m;
	uint8_t *big = tu_big_message((size_t)256 << 20, &t, &m);
	tu_rec w;
	tu_rec_init(&w);
	uint64_t t0 = tu_now_ms();
	CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
	tu_wait(&w.w, 1);
	uint64_t took = tu_now_ms() - t0;
	printf("# write: %s after %llu ms: %s\n", tw_status_name(w.status), (unsigned long long)took,
	       w.detail);
	tu_expect(&w, TW_ERR_TIMEDOUT, "liveness bound");
	CHECK(took <= BOUND_MS + MARGIN_MS);
	tu_once(&w);
	free(big);
	tu_pair_close(&p);
}

static void case_netns_lanes(void)
{
	enum { LEN = 1 << 20 };
	int url_pipe[2];
	CHECK(pipe(url_pipe) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		tu_watchdog(50);
		tu_enter_netns("TW_NS_A");
		/* an interface the client has no route to, ahead of the one it uses */
		CHECK(system("ip link add twx0 type veth peer name twx1 && "
		             "ip addr add 10.99.99.1/24 dev twx0 && ip link set twx0 up && "
		             "ip link set twx1 up") == 0);
		tw_context *s;
		mpt_ctx(&s, "server", "lanes=2");
		char lurl[64], url[128];
		snprintf(lurl, sizeof(lurl), "uv://%s:0", tu_env("TW_ADDR_A"));
		tw_listener *l = tu_listen(s, lurl, url, sizeof(url));
		tu_rec acc, d, r;
		tu_rec_init(&acc), tu_rec_init(&d), tu_rec_init(&r);
		CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
		close(url_pipe[0]);
		tu_url_send(url_pipe, url);
		tu_expect(&acc, TW_OK, NULL);
		CHECK_OK(tw_pipe_read_descriptor(acc.pipe, tu_on_desc, &d));
		tu_expect(&d, TW_OK, NULL);
		uint8_t *buf = malloc(LEN), *want = malloc(LEN);
		CHECK(buf && want);
		tw_tensor_allocation ta = { .data = buf, .device = tw_device_cpu() };
		tw_allocation a = { .num_tensors = 1, .tensors = &ta };
		CHECK_OK(tw_pipe_read(acc.pipe, &a, tu_on_status, &r));
		tu_expect(&r, TW_OK, NULL);
		tu_fill_at(want, LEN, 31);
		CHECK(memcmp(buf, want, LEN) == 0);
		printf("# server: the tensor arrived over mpt\n");
		tw_pipe_destroy(acc.pipe);
		tw_listener_destroy(l);
		CHECK_OK(tw_context_join(s));
		tw_context_destroy(s);
		_exit(0);
	}
	char url[128];
	tu_url_recv(url_pipe, url, sizeof(url));
	tu_enter_netns("TW_NS_B");
	tw_context *c;
	mpt_ctx(&c, "client", "lanes=2");
	CHECK_OK(tw_context_set_connect_timeout(c, 5000));
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, url, &p));
	tw_tensor t;
	tw_message m;
	uint8_t *src = tu_big_message(LEN, &t, &m);
	tu_fill_at(src, LEN, 31);
	tu_rec w;
	tu_rec_init(&w);
	CHECK_OK(tw_pipe_write(p, &m, tu_on_status, &w));
	tu_wait(&w.w, 1);
	printf("# client: write %s: %s\n", tw_status_name(w.status), w.detail);
	tu_expect(&w, TW_OK, NULL);
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p, &info));
	CHECK(strcmp(info.channel, "mpt") == 0);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	tu_once(&w);
	free(src);
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
}

static void case_peer_left_before_lanes(void)
{
	tw_context *s;
	mpt_ctx(&s, "server", "lanes=2,listen=127.0.0.1:0");
	char url[128];
	tw_listener *l = tu_listen(s, "uv://127.0.0.1:0", url, sizeof(url));
	int port = atoi(strrchr(url, ':') + 1);
	tu_rec acc, est, d, r;
	tu_rec_init(&acc), tu_rec_init(&est), tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
	/* The raw client: uv and mpt with 2 lanes (descriptor "2:uv:*:uv:*"). */
	int boot = raw_connect(port);
	raw_send_frame(boot, raw_hello_empty, sizeof(raw_hello_empty));
	raw_send_brochure(boot, NULL, "mpt", "2:uv:*:uv:*");
	tw_wire_brochure_answer a;
	raw_recv_answer(boot, &a);
	CHECK(a.num_transport_ids == 1 && a.transport_ids[0].key == 1);
	CHECK(a.num_channel_ids == 1 && a.channel_ids[0].num_ids == 1);
	int rfd = raw_connect(port), control = raw_connect(port);
	send_requested(rfd, a.transport_ids[0].id);
	send_requested(control, a.channel_ids[0].ids[0]);
	tw__wire_brochure_answer_free(&a);
	tu_expect(&acc, TW_OK, NULL);
	CHECK_OK(tw_pipe_on_established(acc.pipe, tu_on_status, &est));
	tu_expect(&est, TW_OK, NULL);
	size_t n;
	free(raw_recv_frame(control, &n)); /* the ServerHello */
	/* A message with a 1 MiB tensor for cpu:0: it goes on mpt's lanes. */
	tw_wire_tensor_desc td;
	memset(&td, 0, sizeof(td));
	td.length = 1 << 20;
	td.source_device.type = raw_str("cpu");
	td.has_target_device = true;
	td.target_device = td.source_device;
	tw_wire_descriptor desc = { raw_str(""), 0, NULL, 1, &td };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_descriptor(&w, &desc);
	encode_send(boot, &w);
	CHECK_OK(tw_pipe_read_descriptor(acc.pipe, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	uint8_t *buf = malloc(1 << 20);
	CHECK(buf);
	tw_tensor_allocation ta = { buf, tw_device_cpu(), NULL };
	tw_allocation al = { 0, NULL, 1, &ta };
	CHECK_OK(tw_pipe_read(acc.pipe, &al, tu_on_status, &r));
	/* The client leaves without a lane. */
	close(boot), close(rfd), close(control);
	tu_wait(&r.w, 1);
	printf("   read: %s: %s\n", tw_status_name(r.status), r.detail);
	CHECK(r.status == TW_ERR_EOF || r.status == TW_ERR_CONNRESET);
	tw_pipe_destroy(acc.pipe);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(s));
	tw_context_destroy(s);
	free(buf);
	tu_once(&acc), tu_once(&est), tu_once(&d), tu_once(&r);
}

static const tu_case cases[] = {
	{ "peer_left_before_lanes", case_peer_left_before_lanes },
	{ "netns_lanes", case_netns_lanes },
	{ "fixed_ports", case_fixed_ports },
	{ "stalled_lanes", case_stalled_lanes },
	{ "chunks", case_chunks },
	{ "mismatch", case_mismatch },
	{ "options", case_options },
};

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 60);
}
