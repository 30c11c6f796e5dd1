/*
 * limits_test.c - a message a pipe cannot carry fails alone (tensorwire.h,
 * tw_pipe_write; spec/wire.md 2.5).
 *
 * The client's uv transport is registered with "max_frame" and
 * "max_packet", the limits a ring transport has (shm, ibv: frames under
 * 4 GiB, packets of 2 MiB), scaled down so the test moves kilobytes. Four
 * messages are queued at once: a payload one byte over the frame limit, a
 * tensor over it, metadata whose Descriptor is over the packet limit, and
 * one exactly at every limit. The first three fail with
 * TW_ERR_UNSUPPORTED and a detail naming the part, the limit and the
 * backend; the fourth arrives intact, as the next message the peer reads,
 * and so does a later one: nothing of the refused messages reached the
 * wire, and the pipe lives on. Every callback fires once.
 *
 *   limits_test refused   the above
 *   limits_test options   bad option strings are refused, naming the key
 *   limits_test small_object  a server whose frames are limited to 4 KiB
 *                         (max_object_bytes=4096) reads a message of 100
 *                         one-byte tensors (a Descriptor of about 2 KiB, within
 *                         its limit) intact: what such a frame takes decoded
 *                         (about twenty times its size, spec/wire.md 5.3.d) is
 *                         no reason to refuse it
 *   limits_test ring      on the real shm transport (shm+basic), a tensor of
 *                         4.5 GiB is refused before any of it is read (its
 *                         buffer is 16 bytes: touching it would fault),
 *                         naming the 2^32-1 limit; the pipe lives on
 */
#include "pair_util.h"

enum { LIMIT = 1000, PACKET = 300 };

static void test_refused(void)
{
	tu_pair p = { 0 };
	tu_ctx(&p.sctx, "server");
	CHECK_OK(tw_context_create("client", &p.cctx));
	CHECK_OK(tw_context_register_transport(p.cctx, "uv", NULL, 0, "max_frame=1000,max_packet=300"));
	CHECK_OK(tw_context_register_channel(p.cctx, "basic", NULL, 0, NULL));
	tu_pair_open(&p, NULL);

	static uint8_t over[LIMIT + 1], pay[LIMIT], ten[LIMIT], meta[PACKET];
	tu_fill_at(over, sizeof(over), 1);
	tu_fill_at(pay, sizeof(pay), 2);
	tu_fill_at(ten, sizeof(ten), 3);
	memset(meta, 'm', sizeof(meta));
	tw_device cpu = tw_device_cpu();
	tw_payload big_pay = { .data = over, .length = LIMIT + 1 };
	tw_tensor big_ten = { .data = over, .length = LIMIT + 1, .source_device = cpu,
		              .has_target_device = true, .target_device = cpu };
	tw_message m_pay = { .num_payloads = 1, .payloads = &big_pay };
	tw_message m_ten = { .num_tensors = 1, .tensors = &big_ten };
	tw_message m_meta = { .metadata = (const char *)meta, .metadata_length = PACKET };
	tw_payload ok_pay = { .data = pay, .length = LIMIT };
	tw_tensor ok_ten = { .data = ten, .length = LIMIT, .source_device = cpu,
		             .has_target_device = true, .target_device = cpu };
	tw_message m_ok = { .metadata = "fits", .metadata_length = 4, .num_payloads = 1,
		            .payloads = &ok_pay, .num_tensors = 1, .tensors = &ok_ten };

	tu_rec w_pay, w_ten, w_meta, w_ok;
	tu_rec_init(&w_pay), tu_rec_init(&w_ten), tu_rec_init(&w_meta), tu_rec_init(&w_ok);
	CHECK_OK(tw_pipe_write(p.c, &m_pay, tu_on_status, &w_pay));
	CHECK_OK(tw_pipe_write(p.c, &m_ten, tu_on_status, &w_ten));
	CHECK_OK(tw_pipe_write(p.c, &m_meta, tu_on_status, &w_meta));
	CHECK_OK(tw_pipe_write(p.c, &m_ok, tu_on_status, &w_ok));
	tu_expect(&w_pay, TW_ERR_UNSUPPORTED,
	          "payload 0 is 1001 bytes; transport uv carries frames of at most 1000 bytes");
	tu_expect(&w_ten, TW_ERR_UNSUPPORTED,
	          "tensor 0 is 1001 bytes; channel basic over transport uv moves at most 1000 bytes");
	tu_expect(&w_meta, TW_ERR_UNSUPPORTED, "transport uv carries packets of at most 300 bytes");
	tu_expect(&w_ok, TW_OK, NULL);

	/* The peer's next message is the one that fit, intact. */
	tu_rec d, r;
	tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	CHECK(d.desc->metadata_length == 4 && memcmp(d.desc->metadata, "fits", 4) == 0);
	CHECK(d.desc->num_payloads == 1 && d.desc->payloads[0].length == LIMIT);
	CHECK(d.desc->num_tensors == 1 && d.desc->tensors[0].length == LIMIT);
	static uint8_t rpay[LIMIT], rten[LIMIT];
	void *pa[1] = { rpay };
	tw_tensor_allocation ta = { .data = rten, .device = cpu };
	tw_allocation a = { .num_payloads = 1, .payloads = pa, .num_tensors = 1, .tensors = &ta };
	CHECK_OK(tw_pipe_read(p.s, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	CHECK(tu_hash(rpay, LIMIT) == tu_expected_hash(LIMIT, 2));
	CHECK(tu_hash(rten, LIMIT) == tu_expected_hash(LIMIT, 3));

	/* The pipe lives on, both ways. */
	tu_send_text(p.c, "after");
	tu_expect_text(p.s, "after");
	tu_send_text(p.s, "back");
	tu_expect_text(p.c, "back");

	tu_pair_close(&p);
	tu_once(&w_pay), tu_once(&w_ten), tu_once(&w_meta), tu_once(&w_ok);
	tu_once(&d), tu_once(&r);
}

static void expect_refused(const char *kind, const char *options, const char *substr)
{
	tw_context *c;
	CHECK_OK(tw_context_create("c", &c));
	tw_status_t st = strcmp(kind, "basic") == 0
	                         ? tw_context_register_channel(c, kind, NULL, 0, options)
	                         : tw_context_register_transport(c, kind, NULL, 0, options);
	const char *why = tw_last_error();
	if (st != TW_ERR_INVAL || !strstr(why, substr)) {
		fprintf(stderr, "%s '%s': got %s '%s', want TW_ERR_INVAL '%s'\n", kind, options,
		        tw_status_name(st), why, substr);
		abort();
	}
	tw_context_destroy(c);
}

static void test_ring(void)
{
	setenv("TW_TEST_COMBO", "shm+basic", 1);
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	static uint8_t small[16];
	tw_device cpu = tw_device_cpu();
	tw_tensor huge = { .data = small, .length = (uint64_t)9 << 29, .source_device = cpu,
		           .has_target_device = true, .target_device = cpu };
	tw_message m = { .num_tensors = 1, .tensors = &huge };
	tu_rec w;
	tu_rec_init(&w);
	CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
	tu_wait(&w.w, 1);
	printf("# the 4.5 GiB tensor: %s: %s\n", tw_status_name(w.status), w.detail);
	tu_expect(&w, TW_ERR_UNSUPPORTED, "4294967295");
	CHECK(strstr(w.detail, "shm") != NULL);
	tu_send_text(p.c, "the pipe lives on");
	tu_expect_text(p.s, "the pipe lives on");
	tu_pair_close(&p);
	tu_once(&w);
}

static void test_small_object(void)
{
	enum { N = 100 };
	tu_pair p = { 0 };
	CHECK_OK(tw_context_create("server", &p.sctx));
	CHECK_OK(tw_context_register_transport(p.sctx, "uv", NULL, 0, "max_object_bytes=4096"));
	CHECK_OK(tw_context_register_channel(p.sctx, "basic", NULL, 0, NULL));
	tu_pair_open(&p, NULL);
	static uint8_t out[N], in[N];
	static tw_tensor ts[N];
	static tw_tensor_allocation as[N];
	for (int i = 0; i < N; i++) {
		out[i] = (uint8_t)(i * 7 + 1);
		ts[i] = (tw_tensor){ .data = &out[i], .length = 1, .source_device = tw_device_cpu(),
			             .has_target_device = true, .target_device = tw_device_cpu() };
		as[i] = (tw_tensor_allocation){ &in[i], tw_device_cpu(), NULL };
	}
	tw_message m = { .num_tensors = N, .tensors = ts };
	tu_rec w, d, r;
	tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
	tu_wait(&d.w, 1);
	printf("# %d one-byte tensors to a 4 KiB frame limit: %s: %s\n", N, tw_status_name(d.status),
	       d.detail);
	tu_expect(&d, TW_OK, NULL);
	CHECK(d.desc->num_tensors == N);
	tw_allocation a = { .num_tensors = N, .tensors = as };
	CHECK_OK(tw_pipe_read(p.s, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	tu_expect(&w, TW_OK, NULL);
	CHECK(memcmp(out, in, N) == 0);
	tu_pair_close(&p);
	tu_once(&w), tu_once(&d), tu_once(&r);
}

static void test_options(void)
{
	expect_refused("uv", "max_frame=abc",
	               "tcp transport: option 'max_frame=abc': must be a number from 1");
	expect_refused("uv", "max_packet=10", "option 'max_packet=10': must be a number from 64");
	expect_refused("uv", "max_frame=99999999999999999999", "must be a number");
	expect_refused("uv", "bogus=1", "tcp transport: unknown option 'bogus=1' (it takes: "
	                                "max_frame, max_packet, busy_poll_us)");
	expect_refused("uv", "busy_poll_us=20000000",
	               "tcp transport: option 'busy_poll_us=20000000': must be a number from 0");
	expect_refused("uv", "max_frame", "expected key=value, got 'max_frame'");
	expect_refused("uv", "max_object_bytes=0", "option 'max_object_bytes=0'");
	expect_refused("basic", "x=1", "basic channel: unknown option 'x=1' (it takes: none)");
	/* Suffixes, and the key every kind accepts, pass. */
	tw_context *c;
	CHECK_OK(tw_context_create("c", &c));
	CHECK_OK(tw_context_register_transport(c, "uv", NULL, 0,
	                                       "max_frame=4g,max_object_bytes=1m,max_packet=2m"));
	tw_context_destroy(c);
}

int main(int argc, char **argv)
{
	static const tu_case cases[] = {
		{ "refused", test_refused },
		{ "options", test_options },
		{ "small_object", test_small_object },
		{ "ring", test_ring },
	};
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 60);
}
