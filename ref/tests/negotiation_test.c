/*
 * negotiation_test.c - what the handshake chooses (spec/wire.md 3.5 to
 * 3.8): registration priorities (higher wins) for transports and channels,
 * the replacement descriptor connection when the chosen transport is not the
 * one the client connected on, a client that disagrees with the server's
 * channel choice, and a pipe with no common channel. Checked through
 * tw_pipe_get_info / tw_pipe_channel_for and by moving bytes.
 *
 * Usage: negotiation_test <case>
 */
#include "pair_util.h"

static void finish(tu_pair *p)
{
	if (p->c)
		tw_pipe_destroy(p->c);
	if (p->s)
		tw_pipe_destroy(p->s);
	tw_listener_destroy(p->l);
	tw_context_destroy(p->cctx);
	tw_context_destroy(p->sctx);
}

/* One message client -> server with a payload and two tensors (one
 * without a target device: the DescriptorReply path), bytes checked. */
static void roundtrip(tw_pipe *from, tw_pipe *to)
{
	uint8_t pay[500], t0[7000], t1[300];
	tu_fill_at(pay, sizeof(pay), 1);
	tu_fill_at(t0, sizeof(t0), 2);
	tu_fill_at(t1, sizeof(t1), 3);
	tw_payload p = { pay, sizeof(pay), NULL, 0 };
	tw_tensor t[2] = {
		{ t0, sizeof(t0), tw_device_cpu(), true, tw_device_cpu(), NULL, 0, NULL },
		{ t1, sizeof(t1), tw_device_cpu(), false, tw_device_cpu(), NULL, 0, NULL },
	};
	tw_message m = { "x", 1, 1, &p, 2, t };
	tu_rec w, d, r;
	tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_write(from, &m, tu_on_status, &w));
	CHECK_OK(tw_pipe_read_descriptor(to, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	uint8_t rp[500], r0[7000], r1[300];
	void *pays[1] = { rp };
	tw_tensor_allocation ta[2] = { { r0, tw_device_cpu(), NULL }, { r1, tw_device_cpu(), NULL } };
	tw_allocation a = { 1, pays, 2, ta };
	CHECK_OK(tw_pipe_read(to, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	tu_expect(&w, TW_OK, NULL);
	CHECK(tu_hash(rp, sizeof(rp)) == tu_expected_hash(sizeof(rp), 1));
	CHECK(tu_hash(r0, sizeof(r0)) == tu_expected_hash(sizeof(r0), 2));
	CHECK(tu_hash(r1, sizeof(r1)) == tu_expected_hash(sizeof(r1), 3));
}

static void expect_choice(tw_pipe *p, const char *transport, const char *channel)
{
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p, &info));
	if (strcmp(info.transport, transport) != 0 || strcmp(info.channel, channel) != 0) {
		fprintf(stderr, "pipe chose %s/%s, want %s/%s\n", info.transport, info.channel,
		        transport, channel);
		abort();
	}
}

static void two_transports(tw_context **ctx, const char *name, int64_t hi)
{
	CHECK_OK(tw_context_create(name, ctx));
	CHECK_OK(tw_context_register_transport(*ctx, "uv", "uv", 0, NULL));
	CHECK_OK(tw_context_register_transport(*ctx, "uv", "uvhi", hi, NULL));
	CHECK_OK(tw_context_register_channel(*ctx, "basic", NULL, 0, NULL));
}

/* The client connects on "uv"; the server prefers "uvhi" (also a TCP
 * transport, under another wire name): the client must open a replacement
 * descriptor connection and drop the bootstrap one (spec 3.7 step 3). */
static void case_replacement(void)
{
	tu_pair p = { 0 };
	two_transports(&p.sctx, "server", 10);
	two_transports(&p.cctx, "client", 10);
	const char *urls[] = { "uv://127.0.0.1:0", "uvhi://127.0.0.1:0" };
	CHECK_OK(tw_context_listen(p.sctx, urls, 2, &p.l));
	CHECK_OK(tw_listener_url(p.l, "uv", p.url, sizeof(p.url)));
	char hi_url[128];
	CHECK_OK(tw_listener_url(p.l, "uvhi", hi_url, sizeof(hi_url)));
	CHECK(strncmp(hi_url, "uvhi://", 7) == 0);
	tu_rec acc, e;
	tu_rec_init(&acc), tu_rec_init(&e);
	CHECK_OK(tw_listener_accept(p.l, tu_on_accept, &acc));
	CHECK_OK(tw_context_connect(p.cctx, p.url, &p.c));
	tu_expect(&acc, TW_OK, NULL);
	p.s = acc.pipe;
	CHECK_OK(tw_pipe_on_established(p.s, tu_on_status, &e));
	tu_expect(&e, TW_OK, NULL);
	roundtrip(p.c, p.s);
	roundtrip(p.s, p.c);
	expect_choice(p.s, "uvhi", "basic");
	expect_choice(p.c, "uvhi", "basic");
	finish(&p);
}

/* The same, but the server ranks its transports the other way round: the
 * bootstrap transport wins and no replacement is needed. */
static void case_no_replacement(void)
{
	tu_pair p = { 0 };
	two_transports(&p.sctx, "server", -10);
	two_transports(&p.cctx, "client", 10);
	tu_pair_open(&p, "uv://127.0.0.1:0");
	roundtrip(p.c, p.s);
	expect_choice(p.s, "uv", "basic");
	expect_choice(p.c, "uv", "basic");
	finish(&p);
}

static void two_channels(tw_context **ctx, const char *name, int64_t basic_prio, int64_t fast_prio)
{
	CHECK_OK(tw_context_create(name, ctx));
	CHECK_OK(tw_context_register_transport(*ctx, "uv", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(*ctx, "basic", "basic", basic_prio, NULL));
	CHECK_OK(tw_context_register_channel(*ctx, "basic", "fast", fast_prio, NULL));
}

static void case_channel_priority(void)
{
	tu_pair p = { 0 };
	two_channels(&p.sctx, "server", 0, 10);
	two_channels(&p.cctx, "client", 0, 10);
	tu_pair_open(&p, NULL);
	roundtrip(p.c, p.s);
	roundtrip(p.s, p.c);
	expect_choice(p.s, "uv", "fast");
	expect_choice(p.c, "uv", "fast");
	finish(&p);
}

/* The client ranks the channels the other way round. The answer carries
 * only the channels the server selected, so the client's recomputation
 * (spec 3.7 step 5) lands on the server's choice: the server decides. */
static void case_server_decides(void)
{
	tu_pair p = { 0 };
	two_channels(&p.sctx, "server", 0, 10);
	two_channels(&p.cctx, "client", 10, 0);
	tu_pair_open(&p, NULL);
	roundtrip(p.c, p.s);
	expect_choice(p.s, "uv", "fast");
	expect_choice(p.c, "uv", "fast");
	finish(&p);
}

/* No channel in common: messages without tensors still work (verified
 * with stock too, spec 3.5); a tensor fails its write only. */
static void case_no_common_channel(void)
{
	tu_pair p = { 0 };
	CHECK_OK(tw_context_create("server", &p.sctx));
	CHECK_OK(tw_context_register_transport(p.sctx, "uv", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(p.sctx, "basic", NULL, 0, NULL));
	CHECK_OK(tw_context_create("client", &p.cctx));
	CHECK_OK(tw_context_register_transport(p.cctx, "uv", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(p.cctx, "basic", "other", 0, NULL));
	tu_pair_open(&p, NULL);
	expect_choice(p.s, "uv", "");
	expect_choice(p.c, "uv", "");
	tw_device cpu = tw_device_cpu();
	char ch[32];
	CHECK_STATUS(tw_pipe_channel_for(p.c, &cpu, &cpu, ch, sizeof(ch)), TW_ERR_UNSUPPORTED);

	uint8_t t0[16] = { 0 }, pay[4] = { 1, 2, 3, 4 };
	tw_tensor t = { t0, sizeof(t0), tw_device_cpu(), true, tw_device_cpu(), NULL, 0, NULL };
	tw_message with_tensor = { NULL, 0, 0, NULL, 1, &t };
	tw_payload pp = { pay, sizeof(pay), NULL, 0 };
	tw_message plain = { "m", 1, 1, &pp, 0, NULL };
	tu_rec w1, w2, d, r;
	tu_rec_init(&w1), tu_rec_init(&w2), tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_write(p.c, &with_tensor, tu_on_status, &w1));
	CHECK_OK(tw_pipe_write(p.c, &plain, tu_on_status, &w2));
	tu_expect(&w1, TW_ERR_UNSUPPORTED, "no channel");
	tu_expect(&w2, TW_OK, NULL);
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	CHECK(d.desc->num_tensors == 0 && d.desc->num_payloads == 1);
	uint8_t got[4];
	void *pays[1] = { got };
	tw_allocation a = { 1, pays, 0, NULL };
	CHECK_OK(tw_pipe_read(p.s, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	CHECK(memcmp(got, pay, 4) == 0);
	finish(&p);
}

/* IPv6 loopback: the address syntax "[::1]:port" end to end (spec 2.2). */
static void case_ipv6(void)
{
	tw_context *probe;
	tu_ctx(&probe, "probe");
	const char *u[] = { "uv://[::1]:0" };
	tw_listener *l;
	if (tw_context_listen(probe, u, 1, &l) != TW_OK) {
		printf("SKIP: no IPv6 loopback here: %s\n", tw_last_error());
		tw_context_destroy(probe);
		exit(77);
	}
	tw_listener_destroy(l);
	tw_context_destroy(probe);
	tu_pair p = { 0 };
	tu_pair_open(&p, "uv://[::1]:0");
	CHECK(strncmp(p.url, "uv://[::1]:", 11) == 0);
	roundtrip(p.c, p.s);
	roundtrip(p.s, p.c);
	expect_choice(p.c, "uv", "basic");
	finish(&p);
}

static const tu_case cases[] = {
	{ "ipv6", case_ipv6 },
	{ "replacement", case_replacement },
	{ "no_replacement", case_no_replacement },
	{ "channel_priority", case_channel_priority },
	{ "server_decides", case_server_decides },
	{ "no_common_channel", case_no_common_channel },
};

int main(int argc, char **argv)
{
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
