/*
 * ibv_device_test.c - the ibv transport's device, port and GID choice and
 * the device's limits (spec/wire.md 2.4.3.d, 2.4.5; field failures T19,
 * T24, T30), on simverbs configured by ref/tests/ibv/<name>.conf
 * (SIMVERBS_CONFIG). TW_WANT is what the case must find.
 *
 *   choice   a pipe pair over ibv is established, tw_pipe_info's
 *            transport_detail contains TW_WANT on both ends, and a 3 MiB
 *            patterned tensor crosses intact both ways (more than a ring,
 *            so the ring wraps; split by a small max_msg_sz where the
 *            configuration has one)
 *   refused  registering ibv fails with TW_ERR_UNSUPPORTED and a reason
 *            containing TW_WANT (naming the device, port and verb)
 *   memo     (a port whose GID 0 is of another family than the choice) two
 *            pipes from one client context to one listener: the first's
 *            client answers the listener's record, which the listener sent
 *            after waiting for the client's (spec 2.4.5.b); the second's
 *            client sends its record first, in the family the listener
 *            used before, and the listener answers it without waiting
 *            (2.4.5.d); both pipes carry 3 MiB both ways. TW_WANT is the
 *            GID both ends use. Run with a long TW_IB_ANSWER_WAIT_MS, so
 *            that "without waiting" holds on a loaded machine too
 *   churn    one client context and one listener carry 40 pipes, one after
 *            the other, on a device whose shared receive queue holds 4
 *            receives: each pipe moves a message each way, then one end
 *            writes 3 more that land as the other end destroys its pipe.
 *            A receive that a closed connection used up must be put back,
 *            whenever its completion is seen: else the queue runs dry and
 *            the next pipe's writes wait for a receive forever (receiver-
 *            not-ready retries never end). The case must finish, every
 *            message of a live pipe arriving. TW_WANT: the queue's size
 *            in the transport's detail; TW_CHURN_PIPES: other than 40 pipes
 *   dry      every post to the shared receive queue fails from some point
 *            on (srq_post_fail_after): messages go from client to server
 *            until one fails; it must, with TW_ERR_NOMEM and TW_WANT in
 *            its detail (the verb that emptied the queue), not hang
 *   port_down the port goes down (simverbs' control file, SIMVERBS_CONTROL)
 *            while a pipe carries 3 MiB messages: the write in flight fails
 *            within 20 s (the queue pair's retries run out), with a detail
 *            naming the transport and TW_WANT; nothing hangs
 */
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pair_util.h"

enum { BIG = 3 << 20 };

static const char *want(void)
{
	const char *w = getenv("TW_WANT");
	CHECK(w && *w);
	return w;
}

static void check_detail_has(tw_pipe *p, const char *also)
{
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p, &info));
	printf("   %s: transport %s, %s\n", info.is_server ? "server" : "client", info.transport,
	       info.transport_detail);
	CHECK(!strcmp(info.transport, "ibv"));
	CHECK(strstr(info.transport_detail, want()));
	CHECK(!also || strstr(info.transport_detail, also));
}

static void check_detail(tw_pipe *p)
{
	check_detail_has(p, NULL);
}

static void send_big(tw_pipe *from, tw_pipe *to, uint8_t seed)
{
	uint8_t *out = malloc(BIG), *in = calloc(1, BIG);
	CHECK(out && in);
	for (size_t i = 0; i < BIG; i++)
		out[i] = (uint8_t)(i * 31 + seed);
	tw_tensor t = { .data = out, .length = BIG, .source_device = tw_device_cpu(),
		        .has_target_device = true, .target_device = tw_device_cpu() };
	tw_message m = { .num_tensors = 1, .tensors = &t };
	tu_rec w, d, r;
	tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_write(from, &m, tu_on_status, &w));
	CHECK_OK(tw_pipe_read_descriptor(to, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	CHECK(d.desc->num_tensors == 1 && d.desc->tensors[0].length == BIG);
	tw_tensor_allocation ta = { in, tw_device_cpu(), NULL };
	tw_allocation a = { 0, NULL, 1, &ta };
	CHECK_OK(tw_pipe_read(to, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	tu_expect(&w, TW_OK, NULL);
	CHECK(memcmp(out, in, BIG) == 0);
	free(out);
	free(in);
}

static void case_choice(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	check_detail(p.c);
	check_detail(p.s);
	send_big(p.c, p.s, 1);
	send_big(p.s, p.c, 2);
	tu_pair_close(&p);
}

/* Another pipe from p's client context to p's listener, established at
 * both ends; *server gets the accepted end. The caller checks each of
 * recs (accept, both establishments) fired once when it is done. */
static tw_pipe *open_another(tu_pair *p, tw_pipe **server, tu_rec recs[3])
{
	for (int i = 0; i < 3; i++)
		tu_rec_init(&recs[i]);
	CHECK_OK(tw_listener_accept(p->l, tu_on_accept, &recs[0]));
	tw_pipe *c;
	CHECK_OK(tw_context_connect(p->cctx, p->url, &c));
	tu_expect(&recs[0], TW_OK, NULL);
	*server = recs[0].pipe;
	CHECK_OK(tw_pipe_on_established(*server, tu_on_status, &recs[1]));
	CHECK_OK(tw_pipe_on_established(c, tu_on_status, &recs[2]));
	tu_expect(&recs[1], TW_OK, NULL);
	tu_expect(&recs[2], TW_OK, NULL);
	return c;
}

static void once_each(tu_rec recs[3])
{
	for (int i = 0; i < 3; i++)
		tu_once(&recs[i]);
}

static void case_memo(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	check_detail_has(p.c, "set-up record answered the listener's");
	check_detail_has(p.s, "set-up record sent after waiting for the peer's");
	send_big(p.c, p.s, 4);
	/* a second pipe from the same client context to the same listener */
	tu_rec recs[3];
	tw_pipe *s2, *c2 = open_another(&p, &s2, recs);
	check_detail_has(c2, "set-up record sent first, in the family this listener used before");
	check_detail_has(s2, "set-up record answered the peer's, which came first");
	send_big(c2, s2, 5);
	send_big(s2, c2, 6);
	tw_pipe_destroy(c2);
	tw_pipe_destroy(s2);
	once_each(recs);
	tu_pair_close(&p);
}

static void case_refused(void)
{
	tw_context *ctx;
	CHECK_OK(tw_context_create("refused", &ctx));
	tw_status_t st = tw_context_register_transport(ctx, "ibv", NULL, 0, NULL);
	printf("   register ibv: %s: %s\n", tw_status_name(st), tw_last_error());
	CHECK(st == TW_ERR_UNSUPPORTED && strstr(tw_last_error(), want()));
	tw_context_destroy(ctx);
}

static void set_port(const char *ctl, const char *state)
{
	FILE *f = fopen(ctl, "w");
	CHECK(f);
	fprintf(f, "simrdma0 1 %s\n", state);
	CHECK(fclose(f) == 0);
}

static void case_port_down(void)
{
	const char *ctl = getenv("SIMVERBS_CONTROL");
	CHECK(ctl && *ctl);
	set_port(ctl, "up");
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	send_big(p.c, p.s, 3);
	set_port(ctl, "down");
	usleep(300000); /* simverbs reads the control file every 100 ms */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint8_t *out = calloc(1, BIG);
	CHECK(out);
	tw_tensor t = { .data = out, .length = BIG, .source_device = tw_device_cpu(),
		        .has_target_device = true, .target_device = tw_device_cpu() };
	tw_message m = { .num_tensors = 1, .tensors = &t };
	tu_rec w, d;
	tu_rec_init(&w), tu_rec_init(&d);
	CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
	CHECK(tu_wait_for(&w.w, 1, 20000));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("   write after the port went down: %s after %.2f s: %s\n", tw_status_name(w.status),
	       s, w.detail);
	CHECK(w.status != TW_OK && strstr(w.detail, "ibv transport") && strstr(w.detail, want()));
	set_port(ctl, "up");
	tw_pipe_close(p.c);
	tw_pipe_close(p.s);
	tu_wait(&d.w, 1); /* the pending read ends too, whatever its verdict */
	free(out);
	tu_pair_close(&p);
}

static void on_any_status(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	(void)p, (void)st, (void)detail;
	tu_signal(arg);
}

/* One message from c to s, both callbacks waited for; the first that
 * failed goes into *st and detail (both left alone when all succeed). */
static void move_text_or_fail(tw_pipe *c, tw_pipe *s, tw_status_t *st, char *detail, size_t n)
{
	tw_message m = { .metadata = "ping", .metadata_length = 4 };
	tu_rec w, d, r;
	tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_write(c, &m, tu_on_status, &w));
	CHECK_OK(tw_pipe_read_descriptor(s, tu_on_desc, &d));
	tu_wait(&d.w, 1);
	if (d.status == TW_OK) {
		tw_allocation a = { 0 };
		CHECK_OK(tw_pipe_read(s, &a, tu_on_status, &r));
		tu_wait(&r.w, 1);
	}
	tu_wait(&w.w, 1);
	tu_once(&w), tu_once(&d);
	if (d.status == TW_OK)
		tu_once(&r);
	const tu_rec *all[] = { &w, &d, &r };
	for (int i = 0; i < 3 && *st == TW_OK; i++)
		if (all[i]->calls && all[i]->status != TW_OK) {
			*st = all[i]->status;
			snprintf(detail, n, "%s", all[i]->detail);
		}
}

static void case_dry(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	tw_status_t st = TW_OK;
	char detail[512] = "";
	int i;
	for (i = 0; i < 1000 && st == TW_OK; i++)
		move_text_or_fail(p.c, p.s, &st, detail, sizeof(detail));
	printf("   message %d: %s '%s'\n", i, tw_status_name(st), detail);
	CHECK(st == TW_ERR_NOMEM);
	CHECK(strstr(detail, want()));
	tu_pair_close(&p);
}

static void case_churn(void)
{
	enum { LAST = 3 };
	const char *np = getenv("TW_CHURN_PIPES");
	int PIPES = np && atoi(np) > 0 ? atoi(np) : 40;
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	check_detail(p.c);
	for (int i = 0; i < PIPES; i++) {
		tu_rec recs[3];
		tw_pipe *s, *c = open_another(&p, &s, recs);
		tu_send_text(c, "ping");
		tu_expect_text(s, "ping");
		tu_send_text(s, "pong");
		tu_expect_text(c, "pong");
		/* the last writes land as the other end goes: the server's on
		 * even pipes, the client's on odd ones */
		tw_pipe *writer = i % 2 ? c : s, *goes = i % 2 ? s : c;
		tu_waiter done;
		tu_waiter_init(&done);
		tw_message m = { .metadata = "last", .metadata_length = 4 };
		for (int k = 0; k < LAST; k++)
			CHECK_OK(tw_pipe_write(writer, &m, on_any_status, &done));
		tw_pipe_destroy(goes);
		tw_pipe_destroy(writer);
		tu_wait(&done, LAST); /* delivered or failed: either is fine */
		once_each(recs);
		if ((i + 1) % 10 == 0)
			printf("   %d pipes\n", i + 1);
	}
	tu_pair_close(&p);
}

static const tu_case cases[] = {
	{ "churn", case_churn },
	{ "dry", case_dry },
	{ "choice", case_choice },
	{ "refused", case_refused },
	{ "memo", case_memo },
	{ "port_down", case_port_down },
};

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
