/*
 * end_test.c - how a pipe ends when its peer goes away (spec/wire.md 5.6 and
 * 8; tensorwire issues 2 and 3):
 *   - a client that leaves right after the BrochureAnswer fails the server
 *     pipe (its accept-side notifications too) instead of leaving it pending;
 *   - frames a client sends before the server pipe is established are kept
 *     (not consumed by the end watch) and arrive intact;
 *   - the end of one connection of an established pipe ends the pipe even
 *     when nothing is pending on that connection;
 *   - the goodbye extension: asked for and acknowledged only between two
 *     tensorwire ends (a stock-like raw peer never sees it), a graceful close
 *     read as TW_ERR_EOF, a killed or exiting peer as TW_ERR_CONNRESET,
 *     DescriptorReplies through R's standing read, and what the peer wrote
 *     before it left still delivered.
 * Peers are ours (one process, or a forked process that closes, exits or is
 * killed with SIGKILL) or a raw-socket peer that speaks the wire byte by
 * byte. What a user checks: status and detail of each pending callback,
 * every callback once, bytes intact (checksums), no hang (watchdog), no leak
 * (LeakSanitizer).
 *
 * Usage: end_test <case>
 */
#include <signal.h>
#include <sys/wait.h>

#include "pair_util.h"
#include "raw_util.h"

/* spec/wire.md 8.1, written out here independently of the library. */
#define EXT_ANSWER_KEY UINT64_C(0x74770001)
#define EXT_GOODBYE_BIT UINT64_C(1)

/* Vector brochure-uv-basic-ext (spec/wire.md 8.1); brochure-uv-basic is in raw_util.h. */
static const uint8_t brochure_ext[] = {
	0xb9, 0x02, 0xbb, 0x02, 0xbd, 0x02, 0x75, 0x76, 0xbd, 0x04, 0x75, 0x76, 0x3a, 0x2a, 0xbd, 0x0e,
	0x74, 0x65, 0x6e, 0x73, 0x6f, 0x72, 0x77, 0x69, 0x72, 0x65, 0x2e, 0x65, 0x78, 0x74, 0xbd, 0x07,
	0x67, 0x6f, 0x6f, 0x64, 0x62, 0x79, 0x65, 0xbb, 0x01, 0xbd, 0x05, 0x62, 0x61, 0x73, 0x69, 0x63,
	0xbb, 0x01, 0xb9, 0x02, 0xbd, 0x03, 0x63, 0x70, 0x75, 0x00, 0xbd, 0x03, 0x61, 0x6e, 0x79,
};
/* DescriptorReply [cpu:0] (spec/wire.md 3.11). */
static const uint8_t reply_cpu0[] = { 0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02,
	                              0xbd, 0x03, 0x63, 0x70, 0x75, 0x00 };

/* ---- our server ----------------------------------------------------------------------- */

static struct {
	tw_context *ctx;
	tw_listener *l;
	char url[128];
	int port;
} S;

static void server_up(void)
{
	tu_ctx(&S.ctx, "server");
	const char *urls[] = { "uv://127.0.0.1:0" };
	CHECK_OK(tw_context_listen(S.ctx, urls, 1, &S.l));
	CHECK_OK(tw_listener_url(S.l, NULL, S.url, sizeof(S.url)));
	S.port = atoi(strrchr(S.url, ':') + 1);
	CHECK(S.port > 0);
}

static void server_down(void)
{
	tw_listener_destroy(S.l);
	CHECK_OK(tw_context_join(S.ctx));
	tw_context_destroy(S.ctx);
	memset(&S, 0, sizeof(S));
}

/* A well-formed tensorwire client still gets through the listener. */
static void server_still_accepts(void)
{
	tu_good_client_round(S.l, S.url);
}

/* ---- messages: one payload and one cpu tensor, bytes from a seed -------------------- */

enum { PAY_LEN = 32 * 1024, TEN_LEN = 16 * 1024 };

typedef struct out_msg {
	uint8_t meta[5];
	uint8_t *pay, *ten;
	tw_payload p;
	tw_tensor t;
	tw_message m;
} out_msg;

static void out_msg_make_len(out_msg *o, uint64_t seed, bool targeted, size_t ten_len)
{
	memset(o, 0, sizeof(*o));
	memcpy(o->meta, "hello", 5);
	o->pay = malloc(PAY_LEN);
	o->ten = malloc(ten_len);
	CHECK(o->pay && o->ten);
	tu_fill_at(o->pay, PAY_LEN, seed);
	tu_fill_at(o->ten, ten_len, seed + 1);
	o->p = (tw_payload){ o->pay, PAY_LEN, NULL, 0 };
	o->t = (tw_tensor){ o->ten, ten_len, tw_device_cpu(), targeted, tw_device_cpu(), NULL, 0, NULL };
	o->m = (tw_message){ o->meta, sizeof(o->meta), 1, &o->p, 1, &o->t };
}

static void out_msg_make(out_msg *o, uint64_t seed, bool targeted)
{
	out_msg_make_len(o, seed, targeted, TEN_LEN);
}

static void out_msg_free(out_msg *o)
{
	free(o->pay);
	free(o->ten);
}

/* Reads the next message on `p` and checks it is out_msg_make(seed). */
static void read_msg(tw_pipe *p, uint64_t seed)
{
	tu_rec d, r;
	tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	const tw_message *m = d.desc;
	CHECK(m->metadata_length == 5 && memcmp(m->metadata, "hello", 5) == 0);
	CHECK(m->num_payloads == 1 && m->payloads[0].length == PAY_LEN);
	CHECK(m->num_tensors == 1 && m->tensors[0].length == TEN_LEN);
	void *pay = malloc(PAY_LEN);
	tw_tensor_allocation ta = { malloc(TEN_LEN), tw_device_cpu(), NULL };
	CHECK(pay && ta.data);
	tw_allocation a = { 1, &pay, 1, &ta };
	CHECK_OK(tw_pipe_read(p, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	CHECK(tu_hash(pay, PAY_LEN) == tu_expected_hash(PAY_LEN, seed));
	CHECK(tu_hash(ta.data, TEN_LEN) == tu_expected_hash(TEN_LEN, seed + 1));
	free(pay);
	free(ta.data);
	tu_once(&d), tu_once(&r);
}

/* ---- a raw client: a stock-like peer, or one that asks for goodbye ------------------ */

typedef struct raw_client {
	int d, r, basic;
	uint64_t id_r, id_basic;
	bool have_ext;
	uint64_t ext_mask;
} raw_client;

/* hello + Brochure on a new bootstrap connection, then reads the answer. */
static void raw_start(raw_client *rc, bool ask_ext)
{
	memset(rc, 0, sizeof(*rc));
	rc->r = rc->basic = -1;
	rc->d = raw_connect(S.port);
	raw_send_frame(rc->d, raw_hello_empty, sizeof(raw_hello_empty));
	if (ask_ext)
		raw_send_frame(rc->d, brochure_ext, sizeof(brochure_ext));
	else
		raw_send_frame(rc->d, raw_brochure_uv_basic, sizeof(raw_brochure_uv_basic));
	tw_wire_brochure_answer a;
	raw_recv_answer(rc->d, &a);
	bool have_r = false;
	for (size_t i = 0; i < a.num_transport_ids; i++) {
		if (a.transport_ids[i].key == 1) {
			rc->id_r = a.transport_ids[i].id;
			have_r = true;
		} else if (a.transport_ids[i].key == EXT_ANSWER_KEY) {
			rc->have_ext = true;
			rc->ext_mask = a.transport_ids[i].id;
		} else {
			CHECK(!"unexpected transportRegistrationIds key");
		}
	}
	CHECK(have_r);
	/* The server acknowledges goodbye exactly when asked (spec 8.1.c). */
	CHECK(rc->have_ext == ask_ext);
	CHECK(!ask_ext || rc->ext_mask == EXT_GOODBYE_BIT);
	CHECK(a.num_transport_ids == (ask_ext ? 2u : 1u));
	CHECK(a.num_channel_ids == 1 && a.channel_ids[0].num_ids == 1);
	rc->id_basic = a.channel_ids[0].ids[0];
	tw__wire_brochure_answer_free(&a);
}

static void raw_open_conns(raw_client *rc)
{
	rc->r = raw_connect(S.port);
	send_requested(rc->r, rc->id_r);
	rc->basic = raw_connect(S.port);
	send_requested(rc->basic, rc->id_basic);
}

/* Descriptor (metadata "hello", one PAY_LEN payload, one targeted cpu tensor
 * of TEN_LEN) and the payload frame on d; the tensor frame on basic. */
static void raw_send_msg_desc(raw_client *rc, uint64_t seed)
{
	tw_wire_payload_desc pd = { PAY_LEN, { (char *)"", 0 } };
	tw_wire_tensor_desc td;
	memset(&td, 0, sizeof(td));
	td.length = TEN_LEN;
	td.source_device.type = (tw_wire_str){ (char *)"cpu", 3 };
	td.has_target_device = true;
	td.target_device = td.source_device;
	tw_wire_descriptor desc = { { (char *)"hello", 5 }, 1, &pd, 1, &td };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_descriptor(&w, &desc);
	encode_send(rc->d, &w);
	uint8_t *b = malloc(PAY_LEN);
	CHECK(b);
	tu_fill_at(b, PAY_LEN, seed);
	raw_send_frame(rc->d, b, PAY_LEN);
	free(b);
}

static void raw_send_msg_tensor(raw_client *rc, uint64_t seed)
{
	uint8_t *b = malloc(TEN_LEN);
	CHECK(b);
	tu_fill_at(b, TEN_LEN, seed + 1);
	raw_send_frame(rc->basic, b, TEN_LEN);
	free(b);
}

static void raw_close_all(raw_client *rc)
{
	close(rc->d);
	if (rc->r >= 0)
		close(rc->r);
	if (rc->basic >= 0)
		close(rc->basic);
}

static tw_pipe *accept_established(tu_rec *acc)
{
	tu_expect(acc, TW_OK, NULL);
	tu_rec est;
	tu_rec_init(&est);
	CHECK_OK(tw_pipe_on_established(acc->pipe, tu_on_status, &est));
	tu_expect(&est, TW_OK, NULL);
	return acc->pipe;
}

/* ---- feature 1: the end noticed without a read (spec 5.6.b, issue 2) ------------------ */

static void leave_after_answer(bool ask_ext)
{
	server_up();
	tu_rec acc, est, rd;
	tu_rec_init(&acc), tu_rec_init(&est), tu_rec_init(&rd);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	raw_client rc;
	raw_start(&rc, ask_ext);
	close(rc.d); /* gone right after the answer: no requested connection ever comes */
	tu_expect(&acc, TW_OK, NULL);
	CHECK_OK(tw_pipe_on_established(acc.pipe, tu_on_status, &est));
	CHECK_OK(tw_pipe_read_descriptor(acc.pipe, tu_on_desc, &rd));
	tu_expect(&est, TW_ERR_EOF, "before the pipe was established");
	tu_expect(&rd, TW_ERR_EOF, "before the pipe was established");
	printf("   server pipe: %s: %s\n", tw_status_name(est.status), est.detail);
	server_still_accepts();
	tw_pipe_destroy(acc.pipe);
	server_down();
	tu_once(&acc), tu_once(&est), tu_once(&rd);
}

static void case_leave_after_answer(void)
{
	leave_after_answer(false);
}

static void case_leave_after_answer_ext(void)
{
	leave_after_answer(true);
}

/* A message written on the bootstrap connection before the requested
 * connections exist (3.7.f) waits in the socket while the end watch looks at
 * it, and arrives intact once the pipe is established. */
static void case_early_frames_kept(void)
{
	server_up();
	tu_rec acc;
	tu_rec_init(&acc);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	raw_client rc;
	raw_start(&rc, false);
	raw_send_msg_desc(&rc, 100);
	usleep(300 * 1000); /* the server pipe waits, watching the bootstrap connection */
	raw_open_conns(&rc);
	raw_send_msg_tensor(&rc, 100);
	tw_pipe *p = accept_established(&acc);
	read_msg(p, 100);
	/* A stock-like peer leaves without a goodbye: a FIN is TW_ERR_EOF. */
	tu_rec rd;
	tu_rec_init(&rd);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	raw_close_all(&rc);
	tu_expect(&rd, TW_ERR_EOF, "closed by peer");
	tw_pipe_destroy(p);
	server_down();
	tu_once(&acc), tu_once(&rd);
}

/* When the server moves the pipe to another transport, the client drops the
 * bootstrap connection (spec 3.7.b): that end is no reason to fail the
 * pipe, even when it comes before the other connections. */
static void case_replacement_boot_closed(void)
{
	CHECK_OK(tw_context_create("server", &S.ctx));
	CHECK_OK(tw_context_register_transport(S.ctx, "uv", "uv", 0, NULL));
	CHECK_OK(tw_context_register_transport(S.ctx, "uv", "uvhi", 10, NULL));
	CHECK_OK(tw_context_register_channel(S.ctx, "basic", NULL, 0, NULL));
	const char *urls[] = { "uv://127.0.0.1:0", "uvhi://127.0.0.1:0" };
	CHECK_OK(tw_context_listen(S.ctx, urls, 2, &S.l));
	CHECK_OK(tw_listener_url(S.l, "uv", S.url, sizeof(S.url)));
	S.port = atoi(strrchr(S.url, ':') + 1);
	tu_rec acc, rd;
	tu_rec_init(&acc), tu_rec_init(&rd);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	/* Brochure: uv and uvhi (both "uv:*"), basic. */
	int boot = raw_connect(S.port);
	raw_send_frame(boot, raw_hello_empty, sizeof(raw_hello_empty));
	tw_wire_kv kv[2] = { { { (char *)"uv", 2 }, { (char *)"uv:*", 4 } },
		             { { (char *)"uvhi", 4 }, { (char *)"uv:*", 4 } } };
	tw_wire_device_desc dd = { { { (char *)"cpu", 3 }, 0 }, { (char *)"any", 3 } };
	tw_wire_channel_devices cdev = { { (char *)"basic", 5 }, 1, &dd };
	tw_wire_brochure b = { 2, kv, 1, &cdev };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_brochure(&w, &b);
	encode_send(boot, &w);
	tw_wire_brochure_answer a;
	raw_recv_answer(boot, &a);
	CHECK(a.transport.n == 4 && memcmp(a.transport.s, "uvhi", 4) == 0);
	raw_client rc = { .d = -1, .r = -1, .basic = -1 };
	uint64_t id_d = UINT64_MAX;
	for (size_t i = 0; i < a.num_transport_ids; i++) {
		if (a.transport_ids[i].key == 0)
			id_d = a.transport_ids[i].id;
		else if (a.transport_ids[i].key == 1)
			rc.id_r = a.transport_ids[i].id;
	}
	CHECK(id_d != UINT64_MAX);
	CHECK(a.num_channel_ids == 1 && a.channel_ids[0].num_ids == 1);
	rc.id_basic = a.channel_ids[0].ids[0];
	int hi_port = atoi(strrchr(a.address.s, ':') + 1);
	tw__wire_brochure_answer_free(&a);
	/* The bootstrap connection goes first, well before the others come. */
	close(boot);
	usleep(300 * 1000);
	S.port = hi_port;
	rc.d = raw_connect(S.port);
	send_requested(rc.d, id_d);
	raw_open_conns(&rc);
	raw_send_msg_desc(&rc, 1000);
	raw_send_msg_tensor(&rc, 1000);
	tw_pipe *p = accept_established(&acc);
	read_msg(p, 1000);
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p, &info));
	CHECK(strcmp(info.transport, "uvhi") == 0);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	raw_close_all(&rc);
	tu_expect(&rd, TW_ERR_EOF, NULL);
	tw_pipe_destroy(p);
	server_down();
	tu_once(&acc), tu_once(&rd);
}

/* The end of a connection nothing reads (the basic channel's) ends the pipe:
 * the pending read on D fails and our side closes D too (spec 5.6.a). */
static void case_channel_end_noticed(void)
{
	server_up();
	tu_rec acc, rd;
	tu_rec_init(&acc), tu_rec_init(&rd);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	raw_client rc;
	raw_start(&rc, false);
	raw_open_conns(&rc);
	tw_pipe *p = accept_established(&acc);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	CHECK(!tu_wait_for(&rd.w, 1, 100));
	CHECK(shutdown(rc.basic, SHUT_WR) == 0);
	tu_expect(&rd, TW_ERR_EOF, "a channel connection ended");
	CHECK(raw_closed_by_peer(rc.d));
	raw_close_all(&rc);
	tw_pipe_destroy(p);
	server_down();
	tu_once(&acc), tu_once(&rd);
}

/* What a stock-like peer wrote before it closed is delivered first. */
static void case_raw_delivered_before_end(void)
{
	server_up();
	tu_rec acc;
	tu_rec_init(&acc);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	raw_client rc;
	raw_start(&rc, false);
	raw_open_conns(&rc);
	tw_pipe *p = accept_established(&acc);
	for (uint64_t k = 0; k < 3; k++) {
		raw_send_msg_desc(&rc, 200 + 10 * k);
		raw_send_msg_tensor(&rc, 200 + 10 * k);
	}
	raw_close_all(&rc);
	for (uint64_t k = 0; k < 3; k++)
		read_msg(p, 200 + 10 * k);
	tu_rec rd;
	tu_rec_init(&rd);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	tu_expect(&rd, TW_ERR_EOF, NULL);
	tw_pipe_destroy(p);
	server_down();
	tu_once(&acc), tu_once(&rd);
}

/* ---- feature 2: goodbye with a raw peer (spec 8) --------------------------------------- */

/* A raw client that asked for goodbye; the server has a read_descriptor and
 * a write waiting for a DescriptorReply pending when the client leaves. */
static void raw_leaves(bool say_goodbye, tw_status_t want, const char *substr)
{
	server_up();
	tu_rec acc, rd, w;
	tu_rec_init(&acc), tu_rec_init(&rd), tu_rec_init(&w);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	raw_client rc;
	raw_start(&rc, true);
	raw_open_conns(&rc);
	tw_pipe *p = accept_established(&acc);
	out_msg o;
	out_msg_make(&o, 300, false);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	CHECK_OK(tw_pipe_write(p, &o.m, tu_on_status, &w));
	/* The Descriptor and payload arrive; the raw client never replies. */
	size_t n;
	free(raw_recv_frame(rc.d, &n));
	free(raw_recv_frame(rc.d, &n));
	CHECK(n == PAY_LEN);
	if (say_goodbye)
		raw_send_frame(rc.r, "", 0);
	raw_close_all(&rc);
	tu_expect(&rd, want, substr);
	tu_expect(&w, want, substr);
	printf("   server pipe: %s: %s\n", tw_status_name(rd.status), rd.detail);
	tw_pipe_destroy(p);
	server_down();
	out_msg_free(&o);
	tu_once(&acc), tu_once(&rd), tu_once(&w);
}

static void case_raw_goodbye(void)
{
	raw_leaves(true, TW_ERR_EOF, "the peer closed the pipe");
}

static void case_raw_no_goodbye(void)
{
	raw_leaves(false, TW_ERR_CONNRESET, "without a goodbye");
}

/* With goodbye, R's standing read brings the DescriptorReply (spec 8.2.a)... */
static void case_raw_reply(void)
{
	server_up();
	tu_rec acc, w, rd;
	tu_rec_init(&acc), tu_rec_init(&w), tu_rec_init(&rd);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	raw_client rc;
	raw_start(&rc, true);
	raw_open_conns(&rc);
	tw_pipe *p = accept_established(&acc);
	out_msg o;
	out_msg_make(&o, 400, false);
	CHECK_OK(tw_pipe_write(p, &o.m, tu_on_status, &w));
	size_t n;
	free(raw_recv_frame(rc.d, &n));
	uint8_t *pay = raw_recv_frame(rc.d, &n);
	CHECK(n == PAY_LEN && tu_hash(pay, n) == tu_expected_hash(PAY_LEN, 400));
	free(pay);
	CHECK(!tu_wait_for(&w.w, 1, 100)); /* the tensor waits for the reply */
	raw_send_frame(rc.r, reply_cpu0, sizeof(reply_cpu0));
	uint8_t *ten = raw_recv_frame(rc.basic, &n);
	CHECK(n == TEN_LEN && tu_hash(ten, n) == tu_expected_hash(TEN_LEN, 401));
	free(ten);
	tu_expect(&w, TW_OK, NULL);
	/* ...and then the goodbye. */
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	raw_send_frame(rc.r, "", 0);
	raw_close_all(&rc);
	tu_expect(&rd, TW_ERR_EOF, "the peer closed the pipe");
	tw_pipe_destroy(p);
	server_down();
	out_msg_free(&o);
	tu_once(&acc), tu_once(&w), tu_once(&rd);
}

/* A non-empty frame on R that no message waits for breaks spec 8.2.e. */
static void case_raw_unexpected_reply(void)
{
	server_up();
	tu_rec acc, rd;
	tu_rec_init(&acc), tu_rec_init(&rd);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	raw_client rc;
	raw_start(&rc, true);
	raw_open_conns(&rc);
	tw_pipe *p = accept_established(&acc);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	raw_send_frame(rc.r, reply_cpu0, sizeof(reply_cpu0));
	tu_expect(&rd, TW_ERR_PROTO, "no message waits for one");
	CHECK(raw_closed_by_peer(rc.d));
	raw_close_all(&rc);
	tw_pipe_destroy(p);
	server_down();
	tu_once(&acc), tu_once(&rd);
}

/* Our client against a raw server: it asks for goodbye in its Brochure
 * (bytes of vector brochure-uv-basic-ext), says goodbye on close only if the
 * answer acknowledged it, and behaves like stock otherwise. */
static void client_vs_raw_server(bool ack)
{
	tw_context *c;
	tu_ctx(&c, "");
	/* goodbye alone, so the Brochure is that vector (eager, on by default,
	 * adds its name: ref.eager.client checks that one) */
	CHECK_OK(tw_context_set_eager(c, false));
	int lfd, port;
	tw_pipe *p;
	int boot = raw_server_for(c, &lfd, &port, &p);
	size_t n;
	uint8_t *f = raw_recv_frame(boot, &n);
	CHECK(n == sizeof(raw_hello_empty) && memcmp(f, raw_hello_empty, n) == 0);
	free(f);
	f = raw_recv_frame(boot, &n);
	CHECK(n == sizeof(brochure_ext) && memcmp(f, brochure_ext, n) == 0);
	free(f);
	/* The answer: uv, basic, ids 100 (R) and 101 (basic), maybe the ack. */
	tw_wire_id_entry ids[2] = { { 1, 100 }, { EXT_ANSWER_KEY, EXT_GOODBYE_BIT } };
	raw_send_answer_uv_basic(boot, port, ids, ack ? 2u : 1u);
	int fds[2];
	raw_accept_requested(lfd, 2, (const uint64_t[]){ 100, 101 }, fds);
	int r = fds[0], basic = fds[1];
	/* A message goes through as usual. */
	out_msg o;
	out_msg_make(&o, 500, true);
	tu_rec wr, est;
	tu_rec_init(&wr), tu_rec_init(&est);
	CHECK_OK(tw_pipe_write(p, &o.m, tu_on_status, &wr));
	tu_expect(&wr, TW_OK, NULL);
	free(raw_recv_frame(boot, &n));
	free(raw_recv_frame(boot, &n));
	CHECK(n == PAY_LEN);
	f = raw_recv_frame(basic, &n);
	CHECK(n == TEN_LEN && tu_hash(f, n) == tu_expected_hash(TEN_LEN, 501));
	free(f);
	CHECK_OK(tw_pipe_on_established(p, tu_on_status, &est));
	tu_expect(&est, TW_OK, NULL);
	/* Close: R carries a goodbye (a zero-length frame) only if acknowledged;
	 * then every connection ends. */
	tw_pipe_close(p);
	int got = raw_try_recv_frame(r, &f, &n);
	if (ack) {
		CHECK(got == 1 && n == 0);
		free(f);
		got = raw_try_recv_frame(r, &f, &n);
	}
	CHECK(got == 0);
	CHECK(raw_try_recv_frame(boot, &f, &n) == 0);
	CHECK(raw_try_recv_frame(basic, &f, &n) == 0);
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
	close(boot), close(r), close(basic), close(lfd);
	out_msg_free(&o);
	tu_once(&wr), tu_once(&est);
}

static void case_client_goodbye_acked(void)
{
	client_vs_raw_server(true);
}

static void case_client_goodbye_not_acked(void)
{
	client_vs_raw_server(false);
}

/* ---- feature 2: ours <-> ours ------------------------------------------------------------- */

static void *reader_thread(void *arg)
{
	tw_pipe *p = arg;
	for (uint64_t k = 0; k < 3; k++)
		read_msg(p, 600 + 10 * k);
	tu_rec rd;
	tu_rec_init(&rd);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	tu_expect(&rd, TW_ERR_EOF, "the peer closed the pipe");
	tu_once(&rd);
	return NULL;
}

/* The client writes three messages and closes as soon as their callbacks
 * ran, while the server reads them one by one on another thread: it still
 * gets all three, then the goodbye's TW_ERR_EOF. Repeated, because the
 * goodbye races the data still on D and on the channel. The middle message
 * has a tensor without target device: its write completes only after the
 * server's DescriptorReply, so the close overlaps the server's reading. */
static void case_delivered_before_end(void)
{
	for (int round = 0; round < 10; round++) {
		tu_pair p = { 0 };
		tu_pair_open(&p, NULL);
		pthread_t th;
		CHECK(pthread_create(&th, NULL, reader_thread, p.s) == 0);
		out_msg o[3];
		tu_rec w[3];
		for (int k = 0; k < 3; k++) {
			out_msg_make(&o[k], 600 + 10 * (uint64_t)k, k != 1);
			tu_rec_init(&w[k]);
			CHECK_OK(tw_pipe_write(p.c, &o[k].m, tu_on_status, &w[k]));
		}
		for (int k = 0; k < 3; k++)
			tu_expect(&w[k], TW_OK, NULL);
		tw_pipe_destroy(p.c);
		p.c = NULL;
		CHECK(pthread_join(th, NULL) == 0);
		tw_pipe_destroy(p.s);
		tw_listener_destroy(p.l);
		CHECK_OK(tw_context_join(p.cctx));
		CHECK_OK(tw_context_join(p.sctx));
		tw_context_destroy(p.cctx);
		tw_context_destroy(p.sctx);
		for (int k = 0; k < 3; k++) {
			tu_once(&w[k]);
			out_msg_free(&o[k]);
		}
	}
}

/* The writer closes right after its write callbacks, before the reader has
 * asked for anything: what is already on D still arrives. */
static void case_close_right_after_write(void)
{
	for (int round = 0; round < 10; round++) {
		tu_pair p = { 0 };
		tu_pair_open(&p, NULL);
		out_msg o[2];
		tu_rec w[2];
		for (int k = 0; k < 2; k++) {
			out_msg_make(&o[k], 700 + 10 * (uint64_t)k, true);
			tu_rec_init(&w[k]);
			CHECK_OK(tw_pipe_write(p.c, &o[k].m, tu_on_status, &w[k]));
		}
		for (int k = 0; k < 2; k++)
			tu_expect(&w[k], TW_OK, NULL);
		tw_pipe_destroy(p.c);
		p.c = NULL;
		for (int k = 0; k < 2; k++)
			read_msg(p.s, 700 + 10 * (uint64_t)k);
		tu_rec rd;
		tu_rec_init(&rd);
		CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &rd));
		tu_expect(&rd, TW_ERR_EOF, "the peer closed the pipe");
		tw_pipe_destroy(p.s);
		tw_listener_destroy(p.l);
		CHECK_OK(tw_context_join(p.cctx));
		CHECK_OK(tw_context_join(p.sctx));
		tw_context_destroy(p.cctx);
		tw_context_destroy(p.sctx);
		for (int k = 0; k < 2; k++) {
			tu_once(&w[k]);
			out_msg_free(&o[k]);
		}
		tu_once(&rd);
	}
}

/* Two processes: the client (a child) writes one message and then, on the
 * parent's word, closes gracefully, exits without closing, or waits to be
 * killed with SIGKILL. */
enum peer_end { END_CLOSE, END_EXIT, END_KILL };

static void child_client(const char *url, int cmd_fd, int ready_fd, enum peer_end how)
{
	tw_context *c;
	tu_ctx(&c, "child");
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, url, &p));
	out_msg o;
	out_msg_make(&o, 800, true);
	tu_rec w;
	tu_rec_init(&w);
	CHECK_OK(tw_pipe_write(p, &o.m, tu_on_status, &w));
	tu_expect(&w, TW_OK, NULL);
	char b = 'r';
	CHECK(write(ready_fd, &b, 1) == 1);
	if (how == END_KILL)
		for (;;)
			pause();
	CHECK(read(cmd_fd, &b, 1) == 1); /* the parent's pipe is ready to see us go */
	if (how == END_EXIT)
		_exit(0); /* no close: no goodbye */
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
	tu_once(&w);
	out_msg_free(&o);
	_exit(0);
}

static void two_process(enum peer_end how, tw_status_t want, const char *substr)
{
	/* Fork before any context (and its thread) exists; the child learns the
	 * URL through url_pipe, and parent and child signal each other through
	 * cmd (parent -> child: go) and ready (child -> parent: written). */
	int cmd[2], ready[2], url_pipe[2];
	CHECK(pipe(cmd) == 0 && pipe(ready) == 0);
	char url[128];
	pid_t pid = tu_fork_url_child(url_pipe, url, sizeof(url));
	if (pid == 0)
		child_client(url, cmd[0], ready[1], how);
	close(url_pipe[0]);
	server_up();
	tu_rec acc, rd, w;
	tu_rec_init(&acc), tu_rec_init(&rd), tu_rec_init(&w);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	tu_url_send(url_pipe, S.url);
	tw_pipe *p = accept_established(&acc);
	read_msg(p, 800);
	char b;
	CHECK(read(ready[0], &b, 1) == 1);
	/* Pending when the peer goes: a descriptor read, and a write that waits
	 * for the child, which reads nothing: for its DescriptorReply, or with
	 * spec 8.5 (noreply, the default) for its read of a 64 MiB tensor that
	 * no socket buffer holds. A tensor under 8.4's eager bound (64 KiB)
	 * would go on the descriptor connection, and its write complete. */
	out_msg o;
	out_msg_make_len(&o, 900, false, (size_t)64 << 20);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &rd));
	CHECK_OK(tw_pipe_write(p, &o.m, tu_on_status, &w));
	CHECK(!tu_wait_for(&rd.w, 1, 100));
	if (how == END_KILL) {
		printf("   killing the client (pid %d) with SIGKILL\n", (int)pid);
		CHECK(kill(pid, SIGKILL) == 0);
	} else {
		CHECK(write(cmd[1], "g", 1) == 1);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	if (how == END_KILL)
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	else
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	tu_expect(&rd, want, substr);
	tu_expect(&w, want, substr);
	printf("   server pipe: %s: %s\n", tw_status_name(rd.status), rd.detail);
	tw_pipe_destroy(p);
	server_down();
	out_msg_free(&o);
	close(cmd[0]), close(cmd[1]), close(ready[0]), close(ready[1]);
	tu_once(&acc), tu_once(&rd), tu_once(&w);
}

static void case_peer_closes(void)
{
	two_process(END_CLOSE, TW_ERR_EOF, "the peer closed the pipe");
}

static void case_peer_exits(void)
{
	two_process(END_EXIT, TW_ERR_CONNRESET, "without a goodbye");
}

static void case_peer_killed(void)
{
	two_process(END_KILL, TW_ERR_CONNRESET, "without a goodbye");
}

static const tu_case cases[] = {
	{ "leave_after_answer", case_leave_after_answer },
	{ "leave_after_answer_ext", case_leave_after_answer_ext },
	{ "early_frames_kept", case_early_frames_kept },
	{ "replacement_boot_closed", case_replacement_boot_closed },
	{ "channel_end_noticed", case_channel_end_noticed },
	{ "raw_delivered_before_end", case_raw_delivered_before_end },
	{ "raw_goodbye", case_raw_goodbye },
	{ "raw_no_goodbye", case_raw_no_goodbye },
	{ "raw_reply", case_raw_reply },
	{ "raw_unexpected_reply", case_raw_unexpected_reply },
	{ "client_goodbye_acked", case_client_goodbye_acked },
	{ "client_goodbye_not_acked", case_client_goodbye_not_acked },
	{ "delivered_before_end", case_delivered_before_end },
	{ "close_right_after_write", case_close_right_after_write },
	{ "peer_closes", case_peer_closes },
	{ "peer_exits", case_peer_exits },
	{ "peer_killed", case_peer_killed },
};

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
