/*
 * eager_test.c - the eager extension (spec/wire.md 8.4) on the wire, against
 * a raw peer that speaks it byte by byte:
 *   - server: ours accepts with eager on; a raw client that asks for
 *     "goodbye,eager" gets both bits acknowledged; CPU tensors of at most
 *     64 KiB (with no target device, with a CPU one, empty) come as frames
 *     on D after the payload and are delivered intact with no
 *     DescriptorReply written; a 64 KiB + 1 tensor still takes the channel
 *     after a reply; an eager frame of the wrong length fails the pipe with
 *     a protocol error;
 *   - server_off: ours accepts with eager off: only goodbye is acknowledged;
 *     with eager on and a client that does not ask, the server's verdicts
 *     say so;
 *   - client: ours connects with eager on to a raw server that acknowledges
 *     it: the tensor comes on D right after the payload, and the write
 *     completes with no reply; client_unacked: the raw server acknowledges
 *     goodbye only, so the tensor waits for the reply and takes the channel;
 *   - noreply (spec/wire.md 8.5): server_noreply: a raw client that asks
 *     for "goodbye,noreply" sends an untargeted tensor on the channel at
 *     once and gets it delivered with nothing on R; client_noreply: our
 *     client, told noreply but not eager, sends it on the channel with no
 *     reply, and its write completes.
 * What a user checks: the bytes (checksums), each callback once with its
 * status, no hang (watchdog).
 *
 * Usage: eager_test <case>
 */
#include <poll.h>

#include "pair_util.h"
#include "raw_util.h"

/* spec/wire.md 8.1 and 8.4, written out here independently of the library. */
#define EXT_ANSWER_KEY UINT64_C(0x74770001)
#define EXT_GOODBYE_BIT UINT64_C(1)
#define EXT_EAGER_BIT UINT64_C(4)
#define EXT_NOREPLY_BIT UINT64_C(8)
#define EAGER_MAX 65536

enum { PAY_LEN = 3000, A_LEN = 1000 };

/* DescriptorReply [cpu:0] (spec/wire.md 3.11). */
static const uint8_t reply_cpu0[] = { 0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02,
	                              0xbd, 0x03, 0x63, 0x70, 0x75, 0x00 };


/* True if fd has bytes (or its end) to read within ms. */
static bool readable(int fd, int ms)
{
	struct pollfd pfd = { fd, POLLIN, 0 };
	return poll(&pfd, 1, ms) == 1;
}

/* ---- ours as the server ------------------------------------------------------------------ */

typedef struct raw_client {
	tw_context *ctx;
	tw_listener *l;
	int port;
	int d, r, basic;
	uint64_t mask;
	tw_pipe *p; /* the server pipe */
} raw_client;

/* Our listener (eager as asked), a raw client that asks for goodbye and
 * eager, and the accepted, established pipe. */
static void raw_client_open_asking(raw_client *rc, bool eager, const char *exts)
{
	memset(rc, 0, sizeof(*rc));
	tu_ctx(&rc->ctx, "server");
	CHECK_OK(tw_context_set_eager(rc->ctx, eager));
	char url[128];
	rc->l = tu_listen(rc->ctx, "uv://127.0.0.1:0", url, sizeof(url));
	rc->port = atoi(strrchr(url, ':') + 1);
	tu_rec acc, est;
	tu_rec_init(&acc), tu_rec_init(&est);
	CHECK_OK(tw_listener_accept(rc->l, tu_on_accept, &acc));
	rc->d = raw_connect(rc->port);
	raw_send_frame(rc->d, raw_hello_empty, sizeof(raw_hello_empty));
	raw_send_brochure(rc->d, exts, "basic", "any");
	tw_wire_brochure_answer a;
	raw_recv_answer(rc->d, &a);
	uint64_t id_r = 0, id_basic = 0;
	for (size_t i = 0; i < a.num_transport_ids; i++) {
		if (a.transport_ids[i].key == 1)
			id_r = a.transport_ids[i].id;
		else if (a.transport_ids[i].key == EXT_ANSWER_KEY)
			rc->mask = a.transport_ids[i].id;
	}
	CHECK(a.num_channel_ids == 1 && a.channel_ids[0].num_ids == 1);
	id_basic = a.channel_ids[0].ids[0];
	tw__wire_brochure_answer_free(&a);
	rc->r = raw_connect(rc->port);
	send_requested(rc->r, id_r);
	rc->basic = raw_connect(rc->port);
	send_requested(rc->basic, id_basic);
	tu_expect(&acc, TW_OK, NULL);
	rc->p = acc.pipe;
	CHECK_OK(tw_pipe_on_established(rc->p, tu_on_status, &est));
	tu_expect(&est, TW_OK, NULL);
	tu_once(&acc), tu_once(&est);
}

static void raw_client_open(raw_client *rc, bool eager)
{
	raw_client_open_asking(rc, eager, "goodbye,eager");
}

static void raw_client_close(raw_client *rc)
{
	close(rc->d), close(rc->r), close(rc->basic);
	tw_pipe_destroy(rc->p);
	tw_listener_destroy(rc->l);
	CHECK_OK(tw_context_join(rc->ctx));
	tw_context_destroy(rc->ctx);
}

/* A Descriptor on D: metadata "m", one payload of PAY_LEN, and n CPU
 * tensors of the given lengths (targeted[i]: with target device cpu:0). */
static void send_descriptor(int d, size_t n, const uint64_t *lens, const bool *targeted)
{
	tw_wire_payload_desc pd = { PAY_LEN, raw_str("") };
	tw_wire_tensor_desc td[4];
	CHECK(n <= 4);
	memset(td, 0, sizeof(td));
	for (size_t i = 0; i < n; i++) {
		td[i].length = lens[i];
		td[i].source_device.type = raw_str("cpu");
		td[i].has_target_device = targeted[i];
		td[i].target_device = td[i].source_device;
	}
	tw_wire_descriptor desc = { raw_str("m"), 1, &pd, n, td };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_descriptor(&w, &desc);
	encode_send(d, &w);
}

static uint8_t *filled(size_t len, uint64_t seed)
{
	uint8_t *b = malloc(len ? len : 1);
	CHECK(b);
	tu_fill_at(b, len, seed);
	return b;
}

/* Reads the next message's descriptor on p and starts reading it into
 * fresh CPU buffers (*pay, bufs[i]); r gets the read's status. */
static void start_read(tw_pipe *p, size_t n, uint8_t **pay, uint8_t **bufs, tu_rec *r)
{
	tu_rec d;
	tu_rec_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	CHECK(d.desc->num_payloads == 1 && d.desc->num_tensors == n);
	*pay = malloc(PAY_LEN);
	void *pays[1] = { *pay };
	tw_tensor_allocation ta[4];
	for (size_t i = 0; i < n; i++) {
		bufs[i] = malloc(d.desc->tensors[i].length + 1);
		CHECK(bufs[i]);
		ta[i] = (tw_tensor_allocation){ bufs[i], tw_device_cpu(), NULL };
	}
	tw_allocation a = { 1, pays, n, ta };
	CHECK_OK(tw_pipe_read(p, &a, tu_on_status, r));
	tu_once(&d);
}

static void case_server(void)
{
	raw_client rc;
	raw_client_open(&rc, true);
	/* Both asked for and supported: both acknowledged (spec 8.1.c). */
	CHECK(rc.mask == (EXT_GOODBYE_BIT | EXT_EAGER_BIT));

	/* 1. Three eager tensors: their frames follow the payload on D. */
	uint64_t lens[3] = { A_LEN, EAGER_MAX, 0 };
	bool targeted[3] = { false, true, false };
	send_descriptor(rc.d, 3, lens, targeted);
	uint8_t *pay = filled(PAY_LEN, 10);
	raw_send_frame(rc.d, pay, PAY_LEN);
	uint8_t *src[3];
	for (size_t i = 0; i < 3; i++) {
		src[i] = filled(lens[i], 11 + i);
		raw_send_frame(rc.d, src[i], lens[i]);
	}
	uint8_t *got_pay, *got[3];
	tu_rec r;
	tu_rec_init(&r);
	start_read(rc.p, 3, &got_pay, got, &r);
	tu_expect(&r, TW_OK, NULL);
	CHECK(memcmp(got_pay, pay, PAY_LEN) == 0);
	for (size_t i = 0; i < 3; i++) {
		CHECK(memcmp(got[i], src[i], lens[i]) == 0);
		free(got[i]), free(src[i]);
	}
	free(got_pay), free(pay);
	tu_once(&r);
	/* No DescriptorReply: every tensor without a target device was eager
	 * (spec 8.4.c). Without eager one would be on R now. */
	CHECK(!readable(rc.r, 200));
	CHECK(!readable(rc.basic, 0));

	/* 2. One byte over the bound: the channel, after a reply (spec 3.11). */
	uint64_t big = EAGER_MAX + 1;
	bool untargeted = false;
	send_descriptor(rc.d, 1, &big, &untargeted);
	pay = filled(PAY_LEN, 20);
	raw_send_frame(rc.d, pay, PAY_LEN);
	tu_rec_init(&r);
	start_read(rc.p, 1, &got_pay, got, &r);
	size_t n;
	uint8_t *reply = raw_recv_frame(rc.r, &n);
	CHECK(n == sizeof(reply_cpu0) && memcmp(reply, reply_cpu0, n) == 0);
	free(reply);
	src[0] = filled(big, 21);
	raw_send_frame(rc.basic, src[0], big);
	tu_expect(&r, TW_OK, NULL);
	CHECK(memcmp(got_pay, pay, PAY_LEN) == 0 && memcmp(got[0], src[0], big) == 0);
	free(got[0]), free(src[0]), free(got_pay), free(pay);
	tu_once(&r);

	/* 3. An eager frame shorter than its tensor breaks the pipe (8.4.d). */
	send_descriptor(rc.d, 1, lens, targeted);
	pay = filled(PAY_LEN, 30);
	raw_send_frame(rc.d, pay, PAY_LEN);
	raw_send_frame(rc.d, pay, A_LEN - 1);
	tu_rec_init(&r);
	start_read(rc.p, 1, &got_pay, got, &r);
	tu_expect(&r, TW_ERR_PROTO, "where 1000 were expected");
	printf("   %s\n", r.detail);
	free(got[0]), free(got_pay), free(pay);
	tu_once(&r);
	raw_client_close(&rc);
}

/* noreply without eager (spec 8.5): the untargeted tensor comes on the
 * channel right behind its Descriptor, and no DescriptorReply is written. */
static void case_server_noreply(void)
{
	raw_client rc;
	raw_client_open_asking(&rc, true, "goodbye,noreply");
	CHECK(rc.mask == (EXT_GOODBYE_BIT | EXT_NOREPLY_BIT));
	uint64_t len = A_LEN;
	bool untargeted = false;
	send_descriptor(rc.d, 1, &len, &untargeted);
	uint8_t *pay = filled(PAY_LEN, 50), *src = filled(len, 51);
	raw_send_frame(rc.d, pay, PAY_LEN);
	raw_send_frame(rc.basic, src, len);
	uint8_t *got_pay, *got[1];
	tu_rec r;
	tu_rec_init(&r);
	start_read(rc.p, 1, &got_pay, got, &r);
	tu_expect(&r, TW_OK, NULL);
	CHECK(memcmp(got_pay, pay, PAY_LEN) == 0 && memcmp(got[0], src, len) == 0);
	CHECK(!readable(rc.r, 200));
	char v[2048];
	CHECK_OK(tw_pipe_get_verdicts(rc.p, v, sizeof(v)));
	CHECK(strstr(v, "extension noreply: used"));
	CHECK(strstr(v, "extension eager: not used: the client did not ask for it"));
	free(got[0]), free(got_pay), free(pay), free(src);
	tu_once(&r);
	raw_client_close(&rc);
}

static void case_server_off(void)
{
	raw_client rc;
	raw_client_open(&rc, false);
	/* Asked for but not enabled here: goodbye only (spec 8.1.c). */
	CHECK(rc.mask == EXT_GOODBYE_BIT);
	char v[2048];
	CHECK_OK(tw_pipe_get_verdicts(rc.p, v, sizeof(v)));
	CHECK(!strstr(v, "extension eager"));
	raw_client_close(&rc);
	/* Enabled here, not asked for: not acknowledged, and the server's
	 * verdicts say why. */
	raw_client_open_asking(&rc, true, "goodbye");
	CHECK(rc.mask == EXT_GOODBYE_BIT);
	CHECK_OK(tw_pipe_get_verdicts(rc.p, v, sizeof(v)));
	printf("%s", v);
	CHECK(strstr(v, "extension eager: not used: the client did not ask for it"));
	raw_client_close(&rc);
}

/* ---- ours as the client ------------------------------------------------------------------ */

/* Our client (eager on) against a raw server that acknowledges `mask`;
 * one message with a payload and an A_LEN tensor without target device. */
static void client_vs_raw_server(uint64_t mask)
{
	tw_context *c;
	tu_ctx(&c, "");
	CHECK_OK(tw_context_set_eager(c, true));
	int lfd, port;
	tw_pipe *p;
	int boot = raw_server_for(c, &lfd, &port, &p);
	size_t n;
	free(raw_recv_frame(boot, &n)); /* hello */
	uint8_t *f = raw_recv_frame(boot, &n);
	tw_wire_brochure b;
	size_t used;
	char detail[256];
	CHECK(tw__wire_decode_brochure(f, n, &b, &used, detail, sizeof(detail)) == TW_OK);
	bool asked = false;
	for (size_t i = 0; i < b.num_transports; i++)
		if (!strcmp(b.transports[i].key.s, "tensorwire.ext"))
			asked = strstr(b.transports[i].value.s, "eager") != NULL;
	CHECK(asked);
	tw__wire_brochure_free(&b);
	free(f);
	tw_wire_id_entry ids[2] = { { 1, 100 }, { EXT_ANSWER_KEY, mask } };
	raw_send_answer_uv_basic(boot, port, ids, 2);
	int fds[2];
	raw_accept_requested(lfd, 2, (const uint64_t[]){ 100, 101 }, fds);
	int r = fds[0], basic = fds[1];
	uint8_t *pay = filled(PAY_LEN, 40), *ten = filled(A_LEN, 41);
	tw_payload pl = { pay, PAY_LEN, NULL, 0 };
	tw_tensor t = { ten, A_LEN, tw_device_cpu(), false, tw_device_cpu(), NULL, 0, NULL };
	tw_message m = { NULL, 0, 1, &pl, 1, &t };
	tu_rec wr;
	tu_rec_init(&wr);
	CHECK_OK(tw_pipe_write(p, &m, tu_on_status, &wr));
	free(raw_recv_frame(boot, &n)); /* the Descriptor */
	f = raw_recv_frame(boot, &n);
	CHECK(n == PAY_LEN && memcmp(f, pay, n) == 0);
	free(f);
	if (mask & EXT_EAGER_BIT) {
		/* The tensor follows on D, and the write needs no reply. */
		f = raw_recv_frame(boot, &n);
		CHECK(n == A_LEN && memcmp(f, ten, n) == 0);
		free(f);
		tu_expect(&wr, TW_OK, NULL);
		CHECK(!readable(basic, 100));
	} else if (mask & EXT_NOREPLY_BIT) {
		/* spec 8.5: on the channel at once, no reply awaited */
		f = raw_recv_frame(basic, &n);
		CHECK(n == A_LEN && memcmp(f, ten, n) == 0);
		free(f);
		tu_expect(&wr, TW_OK, NULL);
		CHECK(!readable(boot, 100));
	} else {
		/* Not acknowledged: spec 3.11 as stock, the reply first. */
		CHECK(!tu_wait_for(&wr.w, 1, 100));
		raw_send_frame(r, reply_cpu0, sizeof(reply_cpu0));
		f = raw_recv_frame(basic, &n);
		CHECK(n == A_LEN && memcmp(f, ten, n) == 0);
		free(f);
		tu_expect(&wr, TW_OK, NULL);
		CHECK(!readable(boot, 100));
	}
	char v[2048];
	CHECK_OK(tw_pipe_get_verdicts(p, v, sizeof(v)));
	printf("%s", v);
	CHECK(strstr(v, (mask & EXT_EAGER_BIT) ? "extension eager: used"
	                                       : "extension eager: not used: the server did not") !=
	      NULL);
	CHECK(strstr(v, (mask & EXT_NOREPLY_BIT) ? "extension noreply: used"
	                                         : "extension noreply: not used: the server did not") !=
	      NULL);
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
	close(boot), close(r), close(basic), close(lfd);
	free(pay), free(ten);
	tu_once(&wr);
}

static void case_client(void)
{
	client_vs_raw_server(EXT_GOODBYE_BIT | EXT_EAGER_BIT);
}

static void case_client_unacked(void)
{
	client_vs_raw_server(EXT_GOODBYE_BIT);
}

static void case_client_noreply(void)
{
	client_vs_raw_server(EXT_GOODBYE_BIT | EXT_NOREPLY_BIT);
}

static const tu_case cases[] = {
	{ "server", case_server },
	{ "server_off", case_server_off },
	{ "client", case_client },
	{ "client_unacked", case_client_unacked },
	{ "server_noreply", case_server_noreply },
	{ "client_noreply", case_client_noreply },
};

int main(int argc, char **argv)
{
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 60);
}
