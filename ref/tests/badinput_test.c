/*
 * badinput_test.c - malformed input from a raw-socket peer (spec/wire.md
 * 5.3, issue 2 item 9). For each case a hand-written client (or server)
 * sends bad bytes to a tensorwire listener (or client); the test checks the
 * status and detail our side reports through the public API - the listener's
 * error observer for connections that never became pipes, the pipe's
 * callbacks otherwise - and then proves the listener still accepts by running
 * a good tensorwire client through it.
 *
 * Usage: badinput_test <case>|all      (all: every case on one listener)
 */
#include "raw_util.h"

/* ---- the server under test ----------------------------------------------------------- */

static struct {
	tw_context *ctx;
	tw_listener *l;
	int port;
	char url[128];
	tu_reports reports;
	tw_context *good; /* a well-behaved client context */
} S;

/* Waits for the next observer report and checks it. */
static void expect_report(tw_status_t want, const char *substr)
{
	tu_expect_report(&S.reports, want, substr, 5000);
}

typedef struct box {
	tu_waiter w;
	tw_status_t status;
	char detail[512];
	tw_pipe *pipe;
	const tw_message *desc;
} box;

static void box_init(box *b)
{
	memset(b, 0, sizeof(*b));
	tu_waiter_init(&b->w);
}

static void on_accept(tw_listener *l, tw_status_t st, const char *detail, tw_pipe *p, void *arg)
{
	box *b = arg;
	b->status = st;
	snprintf(b->detail, sizeof(b->detail), "%s", detail);
	b->pipe = p;
	tu_signal(&b->w);
}

static void on_status(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	box *b = arg;
	b->status = st;
	snprintf(b->detail, sizeof(b->detail), "%s", detail);
	tu_signal(&b->w);
}

static void on_desc(tw_pipe *p, tw_status_t st, const char *detail, const tw_message *d, void *arg)
{
	box *b = arg;
	b->status = st;
	b->desc = d;
	snprintf(b->detail, sizeof(b->detail), "%s", detail);
	tu_signal(&b->w);
}

static void expect_box(box *b, tw_status_t want, const char *substr)
{
	CHECK(tu_wait_for(&b->w, 1, 5000));
	printf("   pipe reported %s: %s\n", tw_status_name(b->status), b->detail);
	CHECK_STATUS(b->status, want);
	if (!strstr(b->detail, substr)) {
		fprintf(stderr, "detail '%s' lacks '%s'\n", b->detail, substr);
		abort();
	}
}

/* Accepts the next pipe (armed before the raw client connects). */
static void arm_accept(box *b)
{
	box_init(b);
	CHECK_OK(tw_listener_accept(S.l, on_accept, b));
}

static tw_pipe *accepted(box *b)
{
	CHECK(tu_wait_for(&b->w, 1, 5000));
	CHECK_OK(b->status);
	return b->pipe;
}

/* Proves the listener still works: a good client sends a message with a
 * payload and a tensor; the server side checks the bytes. */
static void good_client_round(void)
{
	box acc;
	arm_accept(&acc);
	tw_pipe *cp;
	CHECK_OK(tw_context_connect(S.good, S.url, &cp));
	uint8_t pay[100], ten[3000];
	tu_fill_at(pay, sizeof(pay), 11);
	tu_fill_at(ten, sizeof(ten), 12);
	tw_payload p = { pay, sizeof(pay), NULL, 0 };
	tw_tensor t = { ten, sizeof(ten), tw_device_cpu(), false, tw_device_cpu(), "m", 1, NULL };
	tw_message m = { "hi", 2, 1, &p, 1, &t };
	box wr;
	box_init(&wr);
	CHECK_OK(tw_pipe_write(cp, &m, on_status, &wr));
	tw_pipe *sp = accepted(&acc);
	box d;
	box_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(sp, on_desc, &d));
	expect_box(&d, TW_OK, "");
	CHECK(d.desc->num_payloads == 1 && d.desc->num_tensors == 1);
	uint8_t rpay[100], rten[3000];
	void *pays[1] = { rpay };
	tw_tensor_allocation ta = { rten, tw_device_cpu(), NULL };
	tw_allocation a = { 1, pays, 1, &ta };
	box rd;
	box_init(&rd);
	CHECK_OK(tw_pipe_read(sp, &a, on_status, &rd));
	expect_box(&rd, TW_OK, "");
	expect_box(&wr, TW_OK, "");
	CHECK(tu_hash(rpay, sizeof(rpay)) == tu_expected_hash(sizeof(rpay), 11));
	CHECK(tu_hash(rten, sizeof(rten)) == tu_expected_hash(sizeof(rten), 12));
	tw_pipe_destroy(cp);
	tw_pipe_destroy(sp);
	printf("   good client still served\n");
}

/* ---- hello-level cases: the connection never becomes a pipe ------------------------------ */

static void hello_bytes_case(const uint8_t *frame, size_t n, const char *substr)
{
	int fd = raw_connect(S.port);
	raw_send_frame(fd, frame, n);
	expect_report(TW_ERR_PROTO, substr);
	CHECK(raw_closed_by_peer(fd));
	close(fd);
}

static void case_bad_type(void)
{
	static const uint8_t f[] = { 0xff, 0xff, 0xff, 0xff, 0xff };
	hello_bytes_case(f, sizeof(f), "bad hello");
}

static void case_bad_variant(void)
{
	static const uint8_t f[] = { 0xb8, 0x02, 0xb9, 0x01, 0x00 };
	hello_bytes_case(f, sizeof(f), "bad hello");
}

static void case_truncated(void)
{
	static const uint8_t f[] = { 0xb8, 0x00, 0xb9, 0x01, 0xbd, 0x40 };
	hello_bytes_case(f, sizeof(f), "bad hello");
}

static void case_empty_variant(void)
{
	static const uint8_t f[] = { 0xb8, 0xff, 0xbe };
	hello_bytes_case(f, sizeof(f), "empty Packet variant");
}

static void case_huge_prefix(void)
{
	int fd = raw_connect(S.port);
	raw_send_header(fd, (uint64_t)1 << 62);
	expect_report(TW_ERR_PROTO, "more than the limit");
	CHECK(raw_closed_by_peer(fd));
	close(fd);
}

static void case_unknown_id(void)
{
	int fd = raw_connect(S.port);
	send_requested(fd, 12345);
	expect_report(TW_ERR_PROTO, "unknown registration id 12345");
	CHECK(raw_closed_by_peer(fd));
	close(fd);
}

static void case_close_before_hello(void)
{
	int fd = raw_connect(S.port);
	close(fd);
	expect_report(TW_ERR_PROTO, "closed before its hello");
	/* And a connection that dies in the middle of its hello's header. */
	fd = raw_connect(S.port);
	raw_send(fd, "\x06\x00\x00", 3);
	close(fd);
	expect_report(TW_ERR_PROTO, "closed before its hello");
}

/* Not an error: stock ignores bytes after the object (spec 1.12), so do we. */
static void case_junk_after_hello(void)
{
	box acc;
	arm_accept(&acc);
	int fd = raw_connect(S.port);
	uint8_t f[sizeof(raw_hello_empty) + 4];
	memcpy(f, raw_hello_empty, sizeof(raw_hello_empty));
	memcpy(f + sizeof(raw_hello_empty), "JUNK", 4);
	raw_send_frame(fd, f, sizeof(f));
	tw_pipe *p = accepted(&acc);
	close(fd); /* the pipe then fails on its Brochure read */
	box est;
	box_init(&est);
	CHECK_OK(tw_pipe_on_established(p, on_status, &est));
	expect_box(&est, TW_ERR_EOF, "Brochure");
	tw_pipe_destroy(p);
}

/* ---- brochure-level cases: the pipe exists and fails ---------------------------------------- */

static void brochure_case(const uint8_t *brochure, size_t n, tw_status_t want, const char *substr)
{
	box acc;
	arm_accept(&acc);
	int fd = raw_connect(S.port);
	raw_send_frame(fd, raw_hello_empty, sizeof(raw_hello_empty));
	if (brochure)
		raw_send_frame(fd, brochure, n);
	else
		raw_send_header(fd, (uint64_t)1 << 62);
	tw_pipe *p = accepted(&acc);
	box est;
	box_init(&est);
	CHECK_OK(tw_pipe_on_established(p, on_status, &est));
	expect_box(&est, want, substr);
	tw_pipe_info info;
	CHECK_STATUS(tw_pipe_get_info(p, &info), want);
	CHECK(raw_closed_by_peer(fd));
	close(fd);
	tw_pipe_destroy(p);
}

static void case_no_common_transport(void)
{
	/* {ibv: "ibv:*"}, {basic: {cpu:0: "any"}} */
	static const uint8_t only_ibv[] = {
		0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x03, 'i', 'b', 'v', 0xbd, 0x05, 'i', 'b', 'v', ':', '*',
		0xbb, 0x01, 0xbd, 0x05, 'b', 'a', 's', 'i', 'c', 0xbb, 0x01, 0xb9, 0x02, 0xbd, 0x03,
		'c', 'p', 'u', 0x00, 0xbd, 0x03, 'a', 'n', 'y',
	};
	brochure_case(only_ibv, sizeof(only_ibv), TW_ERR_PROTO, "no common transport");
	/* {uv: "uv:foo"}: the name matches, the domain descriptor does not. */
	static const uint8_t uv_foo[] = {
		0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x02, 'u', 'v', 0xbd, 0x06, 'u', 'v', ':', 'f', 'o', 'o',
		0xbb, 0x00,
	};
	brochure_case(uv_foo, sizeof(uv_foo), TW_ERR_PROTO, "no common transport");
}

/* A pipe that fails before the application accepts it (its Brochure
 * offers no common transport; no accept is armed) is not handed to the next
 * accept as a live pipe: that accept gets the next good client, and the
 * failure goes to the listener's observer. */
static void case_failed_before_accept(void)
{
	static const uint8_t ibv_only[] = { 0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x03, 'i', 'b', 'v',
		                            0xbd, 0x05, 'i', 'b', 'v', ':', '*', 0xbb, 0x01,
		                            0xbd, 0x05, 'b', 'a', 's', 'i', 'c', 0xbb, 0x01,
		                            0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00,
		                            0xbd, 0x03, 'a', 'n', 'y' };
	int fd = raw_connect(S.port);
	raw_send_frame(fd, raw_hello_empty, sizeof(raw_hello_empty));
	raw_send_frame(fd, ibv_only, sizeof(ibv_only));
	CHECK(raw_closed_by_peer(fd)); /* the pipe has failed */
	close(fd);
	good_client_round();
	expect_report(TW_ERR_PROTO, "failed before it was accepted");
}

static void case_bad_brochure(void)
{
	static const uint8_t bad[] = { 0xb9, 0x02, 0xff };
	brochure_case(bad, sizeof(bad), TW_ERR_PROTO, "bad Brochure");
	brochure_case(NULL, 0, TW_ERR_PROTO, "more than the limit");
}

/* A Brochure whose basic channel offers 200000 devices (cpu:0, cpu:1, ...,
 * each "any": 2.6 MB on the wire): pairing them is quadratic, and took the
 * server's loop thread for minutes, stalling every pipe of the context.
 * Refused at once (spec 3.5.e); case `all` shows the listener serving
 * the cases after it. */
static void case_many_devices(void)
{
	enum { N = 200000 };
	tw_wire_device_desc *dd = calloc(N, sizeof(*dd));
	char(*types)[4] = calloc(N, sizeof(*types));
	CHECK(dd && types);
	for (size_t i = 0; i < N; i++) {
		memcpy(types[i], "cpu", 3);
		dd[i].device.type.s = types[i];
		dd[i].device.type.n = 3;
		dd[i].device.index = i;
		dd[i].descriptor.s = (char *)"any";
		dd[i].descriptor.n = 3;
	}
	tw_wire_kv uv = { { (char *)"uv", 2 }, { (char *)"uv:*", 4 } };
	tw_wire_channel_devices basic = { { (char *)"basic", 5 }, N, dd };
	tw_wire_brochure b = { 1, &uv, 1, &basic };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_brochure(&w, &b);
	CHECK(tw__nop_writer_finish(&w) == TW_OK);
	printf("   a Brochure of %zu bytes offering %d devices\n", w.len, N);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	brochure_case(w.buf, w.len, TW_ERR_PROTO, "devices");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("   refused in %.0f ms\n",
	       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	tw__nop_writer_free(&w);
	free(dd);
	free(types);
}

/* ---- message-level cases: a raw client completes the handshake ------------------------------ */

typedef struct raw_pipe {
	int d, r, basic;
	tw_pipe *server; /* our side */
} raw_pipe;

static void raw_handshake(raw_pipe *rp)
{
	box acc;
	arm_accept(&acc);
	rp->d = raw_connect(S.port);
	uint64_t id_r, id_basic;
	raw_handshake_ids(rp->d, &id_r, &id_basic);
	rp->r = raw_connect(S.port);
	send_requested(rp->r, id_r);
	rp->basic = raw_connect(S.port);
	send_requested(rp->basic, id_basic);
	rp->server = accepted(&acc);
	box est;
	box_init(&est);
	CHECK_OK(tw_pipe_on_established(rp->server, on_status, &est));
	expect_box(&est, TW_OK, "");
}

static void raw_close(raw_pipe *rp)
{
	CHECK(raw_closed_by_peer(rp->d));
	close(rp->d);
	close(rp->r);
	close(rp->basic);
	tw_pipe_destroy(rp->server);
}

/* A Descriptor with one payload of `plen` bytes and one targeted cpu
 * tensor of `tlen` bytes (either may be absent: SIZE_MAX). */
static void send_descriptor(int fd, size_t plen, size_t tlen, bool targeted)
{
	tw_wire_descriptor d;
	memset(&d, 0, sizeof(d));
	tw_wire_payload_desc pd = { plen, { (char *)"", 0 } };
	tw_wire_tensor_desc td;
	memset(&td, 0, sizeof(td));
	td.length = tlen;
	td.source_device.type.s = (char *)"cpu";
	td.source_device.type.n = 3;
	td.has_target_device = targeted;
	td.target_device = td.source_device;
	d.metadata.s = (char *)"md";
	d.metadata.n = 2;
	if (plen != SIZE_MAX) {
		d.num_payloads = 1;
		d.payloads = &pd;
	}
	if (tlen != SIZE_MAX) {
		d.num_tensors = 1;
		d.tensors = &td;
	}
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_descriptor(&w, &d);
	encode_send(fd, &w);
}

static void case_truncated_descriptor(void)
{
	raw_pipe rp;
	raw_handshake(&rp);
	box d;
	box_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(rp.server, on_desc, &d));
	static const uint8_t f[] = { 0xb9, 0x03, 0xbd, 0x01 };
	raw_send_frame(rp.d, f, sizeof(f));
	expect_box(&d, TW_ERR_PROTO, "bad Descriptor");
	raw_close(&rp);
}

static void case_huge_descriptor(void)
{
	raw_pipe rp;
	raw_handshake(&rp);
	box d;
	box_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(rp.server, on_desc, &d));
	raw_send_header(rp.d, (uint64_t)1 << 62);
	expect_box(&d, TW_ERR_PROTO, "more than the limit");
	raw_close(&rp);
}

/* A Descriptor of n cpu tensors of 0 bytes, without target devices or
 * metadata: 14 bytes each on the wire (11 with an empty device type, the
 * smallest a tensor takes, which the view refuses after decoding). */
static void send_wide_descriptor(int fd, size_t n)
{
	tw_wire_descriptor d;
	memset(&d, 0, sizeof(d));
	d.num_tensors = n;
	d.tensors = calloc(n, sizeof(*d.tensors));
	CHECK(d.tensors);
	for (size_t i = 0; i < n; i++) {
		d.tensors[i].source_device.type.s = (char *)"cpu";
		d.tensors[i].source_device.type.n = 3;
	}
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_descriptor(&w, &d);
	free(d.tensors);
	encode_send(fd, &w);
}

/* The server's frames are limited to SERVER_MAX_OBJECT bytes (16 MiB, a
 * quarter of the default, so that what follows stays small), so what a
 * decoded packet may take is twice that (spec 5.3.d). 600000 tensors fit in
 * a frame (8.4 MB) but would take more than 86 MB decoded (144 bytes each
 * before the view): refused before any of it is allocated. 10000 (140 KB
 * on the wire) are delivered. */
#define SERVER_MAX_OBJECT (16u << 20)

static void case_wide_descriptor(void)
{
	raw_pipe rp;
	raw_handshake(&rp);
	box d;
	box_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(rp.server, on_desc, &d));
	send_wide_descriptor(rp.d, 600000);
	expect_box(&d, TW_ERR_PROTO, "more than the limit of 33554432 bytes");
	raw_close(&rp);

	/* Just under the bound decoded (each tensor: its array element and two
	 * strings of at most 32 heap bytes), over it with the view the
	 * application would get: refused by the view's count. */
	size_t n = (2 * (size_t)SERVER_MAX_OBJECT - 4096) / (sizeof(tw_wire_tensor_desc) + 64);
	char want[128];
	snprintf(want, sizeof(want), "with 0 payloads and %zu tensors, the message takes more than", n);
	raw_handshake(&rp);
	box_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(rp.server, on_desc, &d));
	send_wide_descriptor(rp.d, n);
	expect_box(&d, TW_ERR_PROTO, want);
	raw_close(&rp);

	raw_handshake(&rp);
	box_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(rp.server, on_desc, &d));
	send_wide_descriptor(rp.d, 10000);
	expect_box(&d, TW_OK, "");
	CHECK(d.desc->num_tensors == 10000 && !d.desc->tensors[9999].has_target_device);
	tw_pipe_destroy(rp.server);
	CHECK(raw_closed_by_peer(rp.d));
	close(rp.d);
	close(rp.r);
	close(rp.basic);
}

static void case_payload_length(void)
{
	raw_pipe rp;
	raw_handshake(&rp);
	box d;
	box_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(rp.server, on_desc, &d));
	send_descriptor(rp.d, 8, SIZE_MAX, false);
	raw_send_frame(rp.d, "123456789", 9); /* the descriptor said 8 */
	expect_box(&d, TW_OK, "");
	CHECK(d.desc->num_payloads == 1 && d.desc->payloads[0].length == 8);
	uint8_t buf[8];
	void *pays[1] = { buf };
	tw_allocation a = { 1, pays, 0, NULL };
	box rd;
	box_init(&rd);
	CHECK_OK(tw_pipe_read(rp.server, &a, on_status, &rd));
	expect_box(&rd, TW_ERR_PROTO, "9 bytes where 8 were expected");
	raw_close(&rp);
}

static void case_tensor_length(void)
{
	raw_pipe rp;
	raw_handshake(&rp);
	box d;
	box_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(rp.server, on_desc, &d));
	send_descriptor(rp.d, SIZE_MAX, 16, true);
	raw_send_frame(rp.basic, "0123456789abcdefX", 17); /* the descriptor said 16 */
	expect_box(&d, TW_OK, "");
	uint8_t buf[16];
	tw_tensor_allocation ta = { buf, tw_device_cpu(), NULL };
	tw_allocation a = { 0, NULL, 1, &ta };
	box rd;
	box_init(&rd);
	CHECK_OK(tw_pipe_read(rp.server, &a, on_status, &rd));
	expect_box(&rd, TW_ERR_PROTO, "17 bytes where 16 were expected");
	raw_close(&rp);
}

static void case_bad_reply(void)
{
	raw_pipe rp;
	raw_handshake(&rp);
	/* Our server sends a tensor without a target device: it waits for a
	 * DescriptorReply on R, and gets garbage. */
	uint8_t ten[32] = { 0 };
	tw_tensor t = { ten, sizeof(ten), tw_device_cpu(), false, tw_device_cpu(), NULL, 0, NULL };
	tw_message m = { NULL, 0, 0, NULL, 1, &t };
	box wr;
	box_init(&wr);
	CHECK_OK(tw_pipe_write(rp.server, &m, on_status, &wr));
	size_t n;
	free(raw_recv_frame(rp.d, &n)); /* the Descriptor */
	static const uint8_t bad[] = { 0xb9, 0x01, 0xba, 0x05, 0x00 };
	raw_send_frame(rp.r, bad, sizeof(bad));
	expect_box(&wr, TW_ERR_PROTO, "bad DescriptorReply");
	raw_close(&rp);
}

/* ---- client side: our client against a raw server ---------------------------------------- */

static void answer_case(const uint8_t *answer, size_t n, const char *substr)
{
	int port;
	int lfd = raw_listen(&port);
	char url[64];
	snprintf(url, sizeof(url), "uv://127.0.0.1:%d", port);
	tw_pipe *p;
	CHECK_OK(tw_context_connect(S.good, url, &p));
	int fd = raw_accept(lfd);
	size_t len;
	free(raw_recv_frame(fd, &len)); /* hello */
	free(raw_recv_frame(fd, &len)); /* Brochure */
	raw_send_frame(fd, answer, n);
	box est;
	box_init(&est);
	CHECK_OK(tw_pipe_on_established(p, on_status, &est));
	expect_box(&est, TW_ERR_PROTO, substr);
	CHECK(raw_closed_by_peer(fd));
	close(fd);
	close(lfd);
	tw_pipe_destroy(p);
}

static void case_bad_answer(void)
{
	/* Picks "ibv", which the client never offered (stock aborts). */
	tw_wire_brochure_answer ans;
	memset(&ans, 0, sizeof(ans));
	ans.transport.s = (char *)"ibv";
	ans.transport.n = 3;
	ans.address.s = (char *)"127.0.0.1:1";
	ans.address.n = 11;
	tw_wire_id_entry ids[1] = { { 1, 0 } };
	ans.num_transport_ids = 1;
	ans.transport_ids = ids;
	ans.transport_domain_descriptor.s = (char *)"ibv:*";
	ans.transport_domain_descriptor.n = 5;
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_brochure_answer(&w, &ans);
	CHECK(tw__nop_writer_finish(&w) == TW_OK);
	answer_case(w.buf, w.len, "which we did not offer");
	tw__nop_writer_free(&w);
	static const uint8_t truncated[] = { 0xb9, 0x07, 0xbd, 0x02, 'u' };
	answer_case(truncated, sizeof(truncated), "bad BrochureAnswer");

	/* Picks basic for (cpu:0, cpu:0) while advertising a basic device
	 * descriptor the client's own selection cannot match (stock aborts:
	 * "Inconsistent channel selection"). */
	memset(&ans, 0, sizeof(ans));
	ans.transport.s = (char *)"uv";
	ans.transport.n = 2;
	ans.address.s = (char *)"127.0.0.1:1";
	ans.address.n = 11;
	ans.num_transport_ids = 1;
	ans.transport_ids = ids;
	ans.transport_domain_descriptor.s = (char *)"uv:*";
	ans.transport_domain_descriptor.n = 4;
	uint64_t basic_id = 1;
	tw_wire_channel_ids cid = { { (char *)"basic", 5 }, 1, &basic_id };
	tw_wire_device_desc dd = { { { (char *)"cpu", 3 }, 0 }, { (char *)"nope", 4 } };
	tw_wire_channel_devices cd = { { (char *)"basic", 5 }, 1, &dd };
	tw_wire_device_pair pair = { { { (char *)"cpu", 3 }, 0 }, { { (char *)"cpu", 3 }, 0 },
		                     { (char *)"basic", 5 } };
	ans.num_channel_ids = 1;
	ans.channel_ids = &cid;
	ans.num_channels = 1;
	ans.channels = &cd;
	ans.num_device_pairs = 1;
	ans.device_pairs = &pair;
	tw__nop_writer_init(&w);
	tw__wire_encode_brochure_answer(&w, &ans);
	CHECK(tw__nop_writer_finish(&w) == TW_OK);
	answer_case(w.buf, w.len, "channel");
	tw__nop_writer_free(&w);
}

/* ---- driver --------------------------------------------------------------------------------- */

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{ "bad_type", case_bad_type },
	{ "bad_variant", case_bad_variant },
	{ "truncated", case_truncated },
	{ "empty_variant", case_empty_variant },
	{ "huge_prefix", case_huge_prefix },
	{ "unknown_id", case_unknown_id },
	{ "close_before_hello", case_close_before_hello },
	{ "junk_after_hello", case_junk_after_hello },
	{ "no_common_transport", case_no_common_transport },
	{ "bad_brochure", case_bad_brochure },
	{ "failed_before_accept", case_failed_before_accept },
	{ "many_devices", case_many_devices },
	{ "truncated_descriptor", case_truncated_descriptor },
	{ "huge_descriptor", case_huge_descriptor },
	{ "wide_descriptor", case_wide_descriptor },
	{ "payload_length", case_payload_length },
	{ "tensor_length", case_tensor_length },
	{ "bad_reply", case_bad_reply },
	{ "bad_answer", case_bad_answer },
};

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <case>|all\n", argv[0]);
		return 2;
	}
	tu_watchdog(100);
	tu_reports_init(&S.reports);
	CHECK_OK(tw_context_create("server", &S.ctx));
	char opts[64];
	snprintf(opts, sizeof(opts), "max_object_bytes=%u", SERVER_MAX_OBJECT);
	CHECK_OK(tw_context_register_transport(S.ctx, "uv", NULL, 0, opts));
	CHECK_OK(tw_context_register_channel(S.ctx, "basic", NULL, 0, NULL));
	const char *urls[] = { "uv://127.0.0.1:0" };
	CHECK_OK(tw_context_listen(S.ctx, urls, 1, &S.l));
	CHECK_OK(tw_listener_on_error(S.l, tu_on_listener_error, &S.reports));
	CHECK_OK(tw_listener_url(S.l, NULL, S.url, sizeof(S.url)));
	S.port = atoi(strrchr(S.url, ':') + 1);
	CHECK_OK(tw_context_create("good", &S.good));
	CHECK_OK(tw_context_register_transport(S.good, "uv", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(S.good, "basic", NULL, 0, NULL));

	int ran = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (strcmp(argv[1], "all") != 0 && strcmp(argv[1], cases[i].name) != 0)
			continue;
		printf("# %s\n", cases[i].name);
		cases[i].fn();
		good_client_round();
		printf("ok - %s\n", cases[i].name);
		ran++;
	}
	if (ran == 0) {
		fprintf(stderr, "unknown case '%s'\n", argv[1]);
		return 2;
	}
	/* Nothing else was reported: each bad connection cost exactly one
	 * report, and the good clients none. */
	tu_expect_no_report(&S.reports, 200);

	tw_listener_destroy(S.l);
	tw_context_destroy(S.ctx);
	tw_context_destroy(S.good);
	tu_reports_destroy(&S.reports);
	return 0;
}
