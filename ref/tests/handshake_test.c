/*
 * handshake_test.c - the server side of a handshake that never completes
 * (spec/wire.md 3.8.b, 3.8.e, 5.6.b):
 *   - a client that wrote frames on a connection and then closed it, before
 *     the server pipe was established, fails the pipe at once (the end watch
 *     sees the peer's FIN behind unread bytes), with no handshake timeout;
 *     this includes the wire fuzzer's finding stock-listener-dies-server-2;
 *   - with a handshake timeout: a client that never opens its requested
 *     connections, or only some of them, fails the server pipe with
 *     TW_ERR_TIMEDOUT naming what never came; a RequestedConnection that
 *     comes later is closed (its registration id was released);
 *   - a connection that sends no hello (or half of one) is closed and
 *     reported to the listener's error observer; one that sends its hello
 *     and nothing more becomes a pipe that fails with "no Brochure";
 *   - a client that is slow but within the bound is not failed.
 * After each case a good tensorwire client still gets through the listener.
 * What a user checks: statuses and details of callbacks and observer
 * reports, every callback once, sockets closed by our side, no hang
 * (watchdog), no leak (LeakSanitizer).
 *
 * Usage: handshake_test <case>
 */
#include "pair_util.h"
#include "raw_util.h"

/* The bound used by the timeout cases; generous against a loaded machine
 * for the good client's round (which runs under the default bound). */
enum { BOUND_MS = 600 };

/* ---- the server under test, with a recorder of listener reports -------------------- */

static struct {
	tw_context *ctx;
	tw_listener *l;
	char url[128];
	int port;
	tu_reports reports;
} S;

/* Waits (up to 10 s) for the next listener report and checks it. */
static void expect_report(tw_status_t want, const char *substr)
{
	tu_expect_report(&S.reports, want, substr, 10000);
}

static void server_up(uint64_t bound_ms)
{
	tu_reports_init(&S.reports);
	tu_ctx(&S.ctx, "server");
	CHECK_OK(tw_context_set_handshake_timeout(S.ctx, bound_ms));
	const char *urls[] = { "uv://127.0.0.1:0" };
	CHECK_OK(tw_context_listen(S.ctx, urls, 1, &S.l));
	CHECK_OK(tw_listener_on_error(S.l, tu_on_listener_error, &S.reports));
	CHECK_OK(tw_listener_url(S.l, NULL, S.url, sizeof(S.url)));
	S.port = atoi(strrchr(S.url, ':') + 1);
	CHECK(S.port > 0);
}

/* A well-formed tensorwire client still gets through the listener (under
 * the default bound: the timeout applies to connections accepted later). */
/* A well-formed client still gets through, under the default bound (the
 * timeout applies to connections accepted after the call). */
static void good_client_round(void)
{
	CHECK_OK(tw_context_set_handshake_timeout(S.ctx, 30000));
	tu_good_client_round(S.l, S.url);
}

static void server_down(void)
{
	/* Each bad connection cost exactly the reports checked, nothing more. */
	tu_expect_no_report(&S.reports, 200);
	tw_listener_destroy(S.l);
	CHECK_OK(tw_context_join(S.ctx));
	tw_context_destroy(S.ctx);
	tu_reports_destroy(&S.reports);
	memset(&S, 0, sizeof(S));
}

/* ---- a raw client -------------------------------------------------------------------- */

typedef struct raw_client {
	int boot;
	uint64_t id_r, id_basic;
} raw_client;

/* hello + Brochure {uv, basic} on a new bootstrap connection; reads the
 * answer (no transport switch: only R and one basic connection). */
static void raw_start(raw_client *rc)
{
	rc->boot = raw_connect(S.port);
	raw_handshake_ids(rc->boot, &rc->id_r, &rc->id_basic);
}

/* A descriptor (metadata "m", one 64-byte payload) and its payload frame. */
static void raw_send_message(int fd)
{
	tw_wire_payload_desc pd = { 64, { (char *)"", 0 } };
	tw_wire_descriptor desc = { { (char *)"m", 1 }, 1, &pd, 0, NULL };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_descriptor(&w, &desc);
	encode_send(fd, &w);
	uint8_t pay[64];
	memset(pay, 0x5a, sizeof(pay));
	raw_send_frame(fd, pay, sizeof(pay));
}

/* Arms accept, runs `client` and returns the accepted server pipe with its
 * established notification and a descriptor read pending. */
typedef struct server_pipe {
	tu_rec acc, est, rd;
} server_pipe;

static void server_pipe_arm(server_pipe *sp)
{
	tu_rec_init(&sp->acc), tu_rec_init(&sp->est), tu_rec_init(&sp->rd);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &sp->acc));
}

static void server_pipe_watch(server_pipe *sp)
{
	tu_expect(&sp->acc, TW_OK, NULL);
	CHECK_OK(tw_pipe_on_established(sp->acc.pipe, tu_on_status, &sp->est));
	CHECK_OK(tw_pipe_read_descriptor(sp->acc.pipe, tu_on_desc, &sp->rd));
}

/* Both pending callbacks fail with `want`, the detail naming `substr`. */
static void server_pipe_expect(server_pipe *sp, tw_status_t want, const char *substr)
{
	tu_expect(&sp->est, want, substr);
	tu_expect(&sp->rd, want, substr);
	printf("   server pipe: %s: %s\n", tw_status_name(sp->est.status), sp->est.detail);
	tw_pipe_destroy(sp->acc.pipe);
	tu_once(&sp->acc), tu_once(&sp->est), tu_once(&sp->rd);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the peer's FIN behind unread bytes (spec 5.6.b), no bound -------------------------- */

/* The client writes a message on the bootstrap connection before the pipe
 * is established (3.7.f), then closes it: the server pipe cannot complete
 * any more and must fail although no read reaches the end of file. */
static void case_frames_then_leave(void)
{
	server_up(0);
	server_pipe sp;
	server_pipe_arm(&sp);
	raw_client rc;
	raw_start(&rc);
	server_pipe_watch(&sp);
	raw_send_message(rc.boot);
	usleep(100 * 1000); /* the frames wait unread in the server's socket */
	close(rc.boot);
	server_pipe_expect(&sp, TW_ERR_EOF, "before the pipe was established");
	good_client_round();
	server_down();
}

/* conformance/wirefuzz/findings/stock-listener-dies-server-2: descriptor
 * frames on the bootstrap connection; the reply connection opened and closed
 * before its RequestedConnection; the basic connection opened properly,
 * with a tensor frame on it; then everything closed. Every connection the
 * pipe holds ends behind bytes nobody reads. */
static void case_fuzz_finding(void)
{
	server_up(0);
	server_pipe sp;
	server_pipe_arm(&sp);
	raw_client rc;
	raw_start(&rc);
	server_pipe_watch(&sp);
	raw_send_message(rc.boot);
	int r = raw_connect(S.port);
	close(r);
	int basic = raw_connect(S.port);
	send_requested(basic, rc.id_basic);
	uint8_t tensor[16];
	memset(tensor, 0xa5, sizeof(tensor));
	raw_send_frame(basic, tensor, sizeof(tensor)); /* stays unread too */
	expect_report(TW_ERR_PROTO, "closed before its hello");
	usleep(100 * 1000);
	close(basic);
	close(rc.boot);
	server_pipe_expect(&sp, TW_ERR_EOF, "before the pipe was established");
	good_client_round();
	server_down();
}

/* ---- the handshake's bound (spec 3.8.e) ------------------------------------------------- */

/* No requested connection ever comes: the pipe fails naming both, the
 * bootstrap connection is closed, and a late RequestedConnection is closed
 * with an unknown-id report (3.8.b). */
static void case_no_requested(void)
{
	server_up(BOUND_MS);
	server_pipe sp;
	server_pipe_arm(&sp);
	double t0 = now_s();
	raw_client rc;
	raw_start(&rc);
	server_pipe_watch(&sp);
	tu_expect(&sp.est, TW_ERR_TIMEDOUT, "descriptor-reply");
	/* Not before the bound (the hello came after t0). */
	CHECK(now_s() - t0 >= BOUND_MS / 1000.0 - 0.05);
	CHECK(strstr(sp.est.detail, "channel 'basic' #0"));
	server_pipe_expect(&sp, TW_ERR_TIMEDOUT, "handshake timed out");
	CHECK(raw_closed_by_peer(rc.boot));
	close(rc.boot);
	int late = raw_connect(S.port);
	send_requested(late, rc.id_r);
	expect_report(TW_ERR_PROTO, "unknown registration id");
	CHECK(raw_closed_by_peer(late));
	close(late);
	good_client_round();
	server_down();
}

/* Only the basic connection comes: the detail names just the reply one. */
static void case_no_reply_conn(void)
{
	server_up(BOUND_MS);
	server_pipe sp;
	server_pipe_arm(&sp);
	raw_client rc;
	raw_start(&rc);
	server_pipe_watch(&sp);
	int basic = raw_connect(S.port);
	send_requested(basic, rc.id_basic);
	tu_expect(&sp.est, TW_ERR_TIMEDOUT, "descriptor-reply");
	CHECK(!strstr(sp.est.detail, "channel 'basic'"));
	server_pipe_expect(&sp, TW_ERR_TIMEDOUT, "handshake timed out");
	CHECK(raw_closed_by_peer(basic));
	CHECK(raw_closed_by_peer(rc.boot));
	close(basic);
	close(rc.boot);
	good_client_round();
	server_down();
}

/* A connection that says nothing, or half a hello, is closed and reported;
 * no pipe is handed to the pending accept. */
static void no_hello(bool half)
{
	server_up(BOUND_MS);
	tu_rec acc;
	tu_rec_init(&acc);
	CHECK_OK(tw_listener_accept(S.l, tu_on_accept, &acc));
	int fd = raw_connect(S.port);
	if (half) {
		raw_send_header(fd, sizeof(raw_hello_empty));
		raw_send(fd, raw_hello_empty, 2);
	}
	expect_report(TW_ERR_TIMEDOUT, "sent no complete hello");
	CHECK(raw_closed_by_peer(fd));
	close(fd);
	CHECK(tu_count(&acc.w) == 0);
	/* The pending accept takes the good client's pipe. */
	CHECK_OK(tw_context_set_handshake_timeout(S.ctx, 30000));
	tw_context *c;
	tu_ctx(&c, "good");
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, S.url, &p));
	tu_expect(&acc, TW_OK, NULL);
	tu_rec est;
	tu_rec_init(&est);
	CHECK_OK(tw_pipe_on_established(acc.pipe, tu_on_status, &est));
	tu_expect(&est, TW_OK, NULL);
	tw_pipe_destroy(acc.pipe);
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
	tu_once(&acc), tu_once(&est);
	good_client_round();
	server_down();
}

static void case_no_hello(void)
{
	no_hello(false);
}

static void case_half_hello(void)
{
	no_hello(true);
}

/* The hello and nothing more: a pipe, which fails without a Brochure. */
static void case_hello_only(void)
{
	server_up(BOUND_MS);
	server_pipe sp;
	server_pipe_arm(&sp);
	int fd = raw_connect(S.port);
	raw_send_frame(fd, raw_hello_empty, sizeof(raw_hello_empty));
	server_pipe_watch(&sp);
	server_pipe_expect(&sp, TW_ERR_TIMEDOUT, "no Brochure");
	CHECK(raw_closed_by_peer(fd));
	close(fd);
	good_client_round();
	server_down();
}

/* A client that takes its time, within the bound, is served: a message it
 * sends arrives. */
static void case_slow_in_time(void)
{
	server_up(3000);
	server_pipe sp;
	server_pipe_arm(&sp);
	raw_client rc;
	raw_start(&rc);
	server_pipe_watch(&sp);
	usleep(300 * 1000);
	int r = raw_connect(S.port);
	send_requested(r, rc.id_r);
	usleep(300 * 1000);
	int basic = raw_connect(S.port);
	send_requested(basic, rc.id_basic);
	tu_expect(&sp.est, TW_OK, NULL);
	raw_send_message(rc.boot);
	tu_expect(&sp.rd, TW_OK, NULL);
	CHECK(sp.rd.desc->metadata_length == 1 && sp.rd.desc->num_payloads == 1);
	uint8_t pay[64];
	void *pp = pay;
	tw_allocation a = { 1, &pp, 0, NULL };
	tu_rec rr;
	tu_rec_init(&rr);
	CHECK_OK(tw_pipe_read(sp.acc.pipe, &a, tu_on_status, &rr));
	tu_expect(&rr, TW_OK, NULL);
	for (size_t i = 0; i < sizeof(pay); i++)
		CHECK(pay[i] == 0x5a);
	/* Past the bound now: establishment stopped it, the pipe lives on. */
	usleep(3000 * 1000);
	tu_rec rd2;
	tu_rec_init(&rd2);
	CHECK_OK(tw_pipe_read_descriptor(sp.acc.pipe, tu_on_desc, &rd2));
	CHECK(!tu_wait_for(&rd2.w, 1, 200));
	close(rc.boot);
	close(r);
	close(basic);
	tu_expect(&rd2, TW_ERR_EOF, NULL);
	tw_pipe_destroy(sp.acc.pipe);
	tu_once(&sp.acc), tu_once(&sp.est), tu_once(&sp.rd), tu_once(&rr), tu_once(&rd2);
	good_client_round();
	server_down();
}

static void case_setter(void)
{
	CHECK_STATUS(tw_context_set_handshake_timeout(NULL, 1), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "tw_context_set_handshake_timeout"));
}

static const tu_case cases[] = {
	{ "frames_then_leave", case_frames_then_leave },
	{ "fuzz_finding", case_fuzz_finding },
	{ "no_requested", case_no_requested },
	{ "no_reply_conn", case_no_reply_conn },
	{ "no_hello", case_no_hello },
	{ "half_hello", case_half_hello },
	{ "hello_only", case_hello_only },
	{ "slow_in_time", case_slow_in_time },
	{ "setter", case_setter },
};

int main(int argc, char **argv)
{
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 60);
}
