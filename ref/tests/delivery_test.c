/*
 * delivery_test.c - nothing lost, nothing reported wrongly at the end of a
 * pipe (spec/wire.md 5.6.c, 5.6.d):
 *
 *   - everything a writer got TW_OK for before it closed gracefully reaches
 *     a reader that is much slower than any grace period (in one process
 *     and with the writer in another process that exits after closing);
 *   - a write queued behind a stalled one never reports TW_OK when the pipe
 *     closes or the peer goes away before the peer could receive it: each
 *     callback fires once, with the error of the close, of the peer's
 *     goodbye, or of its death;
 *   - a write the reader read before it said goodbye reports TW_OK, also
 *     when the confirmation of an earlier write (a cma completion, ibv's
 *     landing) comes back after the goodbye;
 *   - a peer that writes and leaves while a write of ours waits for it
 *     (crossed): what it wrote is still read, only our write fails.
 */
#include <signal.h>
#include <sys/wait.h>

#include <poll.h>

#include "pair_util.h"

enum { SLOW_LEN = 1024 };

/* How many messages a writer gets TW_OK for before its reader reads any:
 * the 3000 where the kernel's socket buffers hold them (uv), and
 * what fits a ring transport's 2 MiB inbox with the descriptors in front
 * of the payloads (about 1.1 KB a message) on shm and ibv. A writer that
 * waited for more would wait for its reader, not test it. */
static size_t slow_msgs(void)
{
	const char *t = tu_combo_get()->transport;
	return strcmp(t, "shm") == 0 || strcmp(t, "ibv") == 0 ? 1500 : 3000;
}
#define SLOW_MSGS slow_msgs()

/* ---- a slow reader after a graceful close ------------------------------------------------ */

typedef struct slow_writer {
	uint8_t *bufs;     /* SLOW_MSGS payloads, each filled from its index */
	tw_payload *pays;
	tw_message *msgs;
	tu_waiter ok;      /* counts TW_OK callbacks */
	tu_waiter all;     /* counts every callback */
} slow_writer;

static void slow_on_written(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	slow_writer *w = arg;
	if (st == TW_OK)
		tu_signal(&w->ok);
	else
		fprintf(stderr, "write failed: %s: %s\n", tw_status_name(st), detail);
	tu_signal(&w->all);
}

/* Writes SLOW_MSGS messages of one payload each and waits until every
 * callback said TW_OK. */
static void slow_write_all(slow_writer *w, tw_pipe *p)
{
	w->bufs = malloc((size_t)SLOW_MSGS * SLOW_LEN);
	w->pays = calloc(SLOW_MSGS, sizeof(*w->pays));
	w->msgs = calloc(SLOW_MSGS, sizeof(*w->msgs));
	CHECK(w->bufs && w->pays && w->msgs);
	tu_waiter_init(&w->ok);
	tu_waiter_init(&w->all);
	for (size_t i = 0; i < SLOW_MSGS; i++) {
		uint8_t *b = w->bufs + i * SLOW_LEN;
		tu_fill_at(b, SLOW_LEN, 1000 + i);
		w->pays[i].data = b;
		w->pays[i].length = SLOW_LEN;
		w->msgs[i].num_payloads = 1;
		w->msgs[i].payloads = &w->pays[i];
		CHECK_OK(tw_pipe_write(p, &w->msgs[i], slow_on_written, w));
	}
	tu_wait(&w->all, SLOW_MSGS);
	CHECK((size_t)tu_count(&w->ok) == SLOW_MSGS);
}

static void slow_writer_free(slow_writer *w)
{
	free(w->bufs);
	free(w->pays);
	free(w->msgs);
	tu_waiter_destroy(&w->ok);
	tu_waiter_destroy(&w->all);
}

/* Reads messages one at a time, sleeping `sleep_us` after each, until a
 * descriptor read fails; returns how many arrived intact and checks that the
 * failure is `want` with `substr` in its detail. */
static size_t slow_read_all(tw_pipe *p, unsigned sleep_us, tw_status_t want, const char *substr)
{
	static uint8_t buf[SLOW_LEN];
	size_t got = 0;
	for (;;) {
		tu_rec d, r;
		tu_rec_init(&d), tu_rec_init(&r);
		CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
		tu_wait(&d.w, 1);
		if (d.status != TW_OK) {
			printf("   after %zu messages: %s: %s\n", got, tw_status_name(d.status), d.detail);
			tu_expect(&d, want, substr);
			tu_once(&d);
			return got;
		}
		CHECK(d.desc->num_payloads == 1 && d.desc->payloads[0].length == SLOW_LEN);
		void *bufs[1] = { buf };
		tw_allocation a = { 1, bufs, 0, NULL };
		CHECK_OK(tw_pipe_read(p, &a, tu_on_status, &r));
		tu_expect(&r, TW_OK, NULL);
		CHECK(tu_hash(buf, SLOW_LEN) == tu_expected_hash(SLOW_LEN, 1000 + got));
		got++;
		tu_once(&d), tu_once(&r);
		if (sleep_us)
			usleep(sleep_us);
	}
}

/* Ours -> ours in one process: the writer closes its pipe and its whole
 * context once all its writes said TW_OK; the reader takes 1 ms per
 * message (3 s in all, three times the old 1 s grace), and still gets all
 * of them, then the goodbye's TW_ERR_EOF. */
static void case_slow_reader_after_close(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	slow_writer w;
	slow_write_all(&w, p.c);
	tw_pipe_destroy(p.c);
	CHECK_OK(tw_context_join(p.cctx)); /* the writer is gone for good */
	tw_context_destroy(p.cctx);
	size_t got = slow_read_all(p.s, 1000, TW_ERR_EOF, "the peer closed the pipe");
	CHECK(got == SLOW_MSGS);
	tw_pipe_destroy(p.s);
	tw_listener_destroy(p.l);
	CHECK_OK(tw_context_join(p.sctx));
	tw_context_destroy(p.sctx);
	slow_writer_free(&w);
}

/* The writer is another process that closes and exits once its writes said
 * TW_OK (with `liveness_ms` as its liveness bound unless 0); the reader
 * starts reading only `pause_ms` after the writer exited, then sleeps
 * `sleep_us` after each message. */
static void reader_after_writer_exited(uint64_t liveness_ms, unsigned pause_ms, unsigned sleep_us)
{
	int url_pipe[2];
	char url[128];
	pid_t pid = tu_fork_url_child(url_pipe, url, sizeof(url));
	if (pid == 0) {
		tw_context *c;
		tu_ctx(&c, "writer");
		if (liveness_ms)
			CHECK_OK(tw_context_set_liveness_timeout(c, liveness_ms));
		tw_pipe *p;
		CHECK_OK(tw_context_connect(c, url, &p));
		slow_writer w;
		slow_write_all(&w, p);
		tw_pipe_destroy(p);
		CHECK_OK(tw_context_join(c));
		tw_context_destroy(c);
		slow_writer_free(&w);
		_exit(0);
	}
	close(url_pipe[0]);
	tw_context *s;
	tu_ctx(&s, "reader");
	tw_listener *l = tu_listen(s, NULL, url, sizeof(url));
	tu_rec acc;
	tu_rec_init(&acc);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
	tu_url_send(url_pipe, url);
	tu_expect(&acc, TW_OK, NULL);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (pause_ms) {
		printf("   the writer exited; nothing is read for %u ms\n", pause_ms);
		usleep(pause_ms * 1000u);
	}
	size_t got = slow_read_all(acc.pipe, sleep_us, TW_ERR_EOF, "the peer closed the pipe");
	CHECK(got == SLOW_MSGS);
	tw_pipe_destroy(acc.pipe);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(s));
	tw_context_destroy(s);
	tu_once(&acc);
}

static void case_slow_reader_writer_exited(void)
{
	reader_after_writer_exited(0, 0, 500);
}

/* The writer's liveness bound is 1 s, and the reader leaves its receive
 * window closed for 5 s after the writer exited: the bound ended with the
 * writer's operations, so the bytes its kernel still holds arrive. (They
 * were lost to a reset when the closed socket kept TCP_USER_TIMEOUT.) */
static void case_stalled_reader_writer_exited(void)
{
	reader_after_writer_exited(1000, 5000, 0);
}

/* Fan-in: FAN writers, each its own context, write FAN_MSGS messages each
 * into one consumer and close as soon as their writes said TW_OK; the
 * consumer serves the pipes round-robin and sleeps 200 us per message (the
 * issue's measurement lost 27798 of 32000 this way). Every message arrives,
 * in order per pipe, then each pipe ends with TW_ERR_EOF. */
enum { FAN = 8, FAN_MSGS = 500 };

static void fan_on_written(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	if (st != TW_OK)
		fprintf(stderr, "write failed: %s: %s\n", tw_status_name(st), detail);
	CHECK(st == TW_OK);
	tu_signal(arg);
}

static void case_fan_in(void)
{
	tw_context *s;
	tu_ctx(&s, "consumer");
	char url[128];
	tw_listener *l = tu_listen(s, NULL, url, sizeof(url));
	tw_context *wc[FAN];
	tw_pipe *wp[FAN], *rp[FAN];
	static uint8_t bufs[FAN][FAN_MSGS][64];
	static tw_payload pays[FAN][FAN_MSGS];
	static tw_message msgs[FAN][FAN_MSGS];
	tu_waiter done;
	tu_waiter_init(&done);
	for (int k = 0; k < FAN; k++) {
		tu_rec acc;
		tu_rec_init(&acc);
		CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
		tu_ctx(&wc[k], "writer");
		CHECK_OK(tw_context_connect(wc[k], url, &wp[k]));
		tu_expect(&acc, TW_OK, NULL);
		rp[k] = acc.pipe;
		for (int i = 0; i < FAN_MSGS; i++) {
			tu_fill_at(bufs[k][i], 64, (uint64_t)k * 100000 + (uint64_t)i);
			pays[k][i] = (tw_payload){ .data = bufs[k][i], .length = 64 };
			msgs[k][i] = (tw_message){ .num_payloads = 1, .payloads = &pays[k][i] };
			CHECK_OK(tw_pipe_write(wp[k], &msgs[k][i], fan_on_written, &done));
		}
	}
	/* The writers leave once every write said TW_OK. */
	tu_wait(&done, FAN * FAN_MSGS);
	tu_waiter_destroy(&done);
	for (int k = 0; k < FAN; k++) {
		tw_pipe_destroy(wp[k]);
		CHECK_OK(tw_context_join(wc[k]));
		tw_context_destroy(wc[k]);
	}
	int got[FAN] = { 0 };
	bool ended[FAN] = { false };
	int live = FAN;
	while (live > 0) {
		for (int k = 0; k < FAN; k++) {
			if (ended[k])
				continue;
			tu_rec d, r;
			tu_rec_init(&d), tu_rec_init(&r);
			CHECK_OK(tw_pipe_read_descriptor(rp[k], tu_on_desc, &d));
			tu_wait(&d.w, 1);
			if (d.status != TW_OK) {
				printf("   pipe %d: %d of %d, then %s: %s\n", k, got[k], FAN_MSGS,
				       tw_status_name(d.status), d.detail);
				CHECK(got[k] == FAN_MSGS);
				tu_expect(&d, TW_ERR_EOF, "the peer closed the pipe");
				ended[k] = true;
				live--;
				continue;
			}
			uint8_t buf[64];
			void *pb[1] = { buf };
			tw_allocation a = { 1, pb, 0, NULL };
			CHECK(d.desc->num_payloads == 1 && d.desc->payloads[0].length == 64);
			CHECK_OK(tw_pipe_read(rp[k], &a, tu_on_status, &r));
			tu_expect(&r, TW_OK, NULL);
			CHECK(tu_hash(buf, 64) ==
			      tu_expected_hash(64, (uint64_t)k * 100000 + (uint64_t)got[k]));
			got[k]++;
			usleep(200);
		}
	}
	for (int k = 0; k < FAN; k++)
		tw_pipe_destroy(rp[k]);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(s));
	tw_context_destroy(s);
}

/* ---- writes queued behind a stalled one ---------------------------------------------------- */

enum { STALL_LEN = 64 << 20, QUEUED = 4, SMALL_LEN = 1024 };

/* One 64 MiB tensor (more than the socket buffers hold, with nobody
 * reading), then QUEUED small messages behind it: two payload-only ones,
 * one metadata-only, one with a small tensor. The small ones' bytes are
 * handed to the transport in full early (D and the channel's connection are
 * separate), but the peer can never receive them before the big one. */
typedef struct stalled {
	uint8_t *big;
	uint8_t small[QUEUED][SMALL_LEN];
	tw_tensor big_t, small_t;
	tw_payload pay[2];
	tw_message m[1 + QUEUED];
	tu_rec w[1 + QUEUED];
} stalled;

static void stalled_write(stalled *s, tw_pipe *p)
{
	memset(s, 0, sizeof(*s));
	s->big = malloc(STALL_LEN);
	CHECK(s->big);
	memset(s->big, 0x5a, STALL_LEN);
	for (int i = 0; i < QUEUED; i++)
		tu_fill_at(s->small[i], SMALL_LEN, 50 + (uint64_t)i);
	s->big_t = (tw_tensor){ .data = s->big, .length = STALL_LEN, .source_device = tw_device_cpu(),
	                        .has_target_device = true, .target_device = tw_device_cpu() };
	s->m[0] = (tw_message){ .num_tensors = 1, .tensors = &s->big_t };
	s->pay[0] = (tw_payload){ .data = s->small[0], .length = SMALL_LEN };
	s->pay[1] = (tw_payload){ .data = s->small[1], .length = SMALL_LEN };
	s->m[1] = (tw_message){ .num_payloads = 1, .payloads = &s->pay[0] };
	s->m[2] = (tw_message){ .num_payloads = 1, .payloads = &s->pay[1] };
	s->m[3] = (tw_message){ .metadata = s->small[2], .metadata_length = SMALL_LEN };
	s->small_t = (tw_tensor){ .data = s->small[3], .length = SMALL_LEN,
	                          .source_device = tw_device_cpu(), .has_target_device = true,
	                          .target_device = tw_device_cpu() };
	s->m[4] = (tw_message){ .num_tensors = 1, .tensors = &s->small_t };
	for (int i = 0; i <= QUEUED; i++) {
		tu_rec_init(&s->w[i]);
		CHECK_OK(tw_pipe_write(p, &s->m[i], tu_on_status, &s->w[i]));
	}
	/* Give the transport time to hand over everything it can. */
	for (int i = 0; i <= QUEUED; i++)
		CHECK(!tu_wait_for(&s->w[i].w, 1, i == 0 ? 300 : 0));
}

/* Every callback fired exactly once, with `want` and `substr`. */
static void stalled_expect(stalled *s, tw_status_t want, const char *substr)
{
	for (int i = 0; i <= QUEUED; i++) {
		tu_wait(&s->w[i].w, 1);
		printf("   write %d: %s: %s\n", i, tw_status_name(s->w[i].status), s->w[i].detail);
	}
	for (int i = 0; i <= QUEUED; i++) {
		tu_expect(&s->w[i], want, substr);
		tu_once(&s->w[i]);
	}
	free(s->big);
}

/* Queues the stalled writes on the client, closes one end (`close_writer`:
 * the writer's own pipe, else the reader's, which says goodbye) and checks
 * that every write fails with `want`. */
static void queued_close(bool close_writer, tw_status_t want, const char *substr)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	stalled s;
	stalled_write(&s, p.c);
	tw_pipe_close(close_writer ? p.c : p.s);
	stalled_expect(&s, want, substr);
	tu_pair_close(&p);
}

/* The writer closes its pipe while its writes are queued: all get
 * TW_ERR_CLOSED. */
static void case_queued_local_close(void)
{
	queued_close(true, TW_ERR_CLOSED, "closed");
}

/* The reader closes its pipe (a goodbye) without reading: all writes get
 * the goodbye's TW_ERR_EOF. */
static void case_queued_peer_close(void)
{
	queued_close(false, TW_ERR_EOF, "the peer closed the pipe");
}

/* The reader is another process that never reads and is killed with
 * SIGKILL: all writes get TW_ERR_CONNRESET. */
/* In a forked reader: a context "reader" that listens, sends its URL up
 * url_pipe and accepts one pipe (the parent connects). */
static tw_pipe *child_accept_one(int url_pipe[2], tw_context **ctx, tw_listener **l)
{
	tu_ctx(ctx, "reader");
	char url[128];
	*l = tu_listen(*ctx, NULL, url, sizeof(url));
	tu_rec acc;
	tu_rec_init(&acc);
	CHECK_OK(tw_listener_accept(*l, tu_on_accept, &acc));
	close(url_pipe[0]);
	tu_url_send(url_pipe, url);
	tu_expect(&acc, TW_OK, NULL);
	return acc.pipe;
}

static void case_queued_peer_killed(void)
{
	int url_pipe[2], ready[2];
	CHECK(pipe(url_pipe) == 0 && pipe(ready) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		tw_context *s;
		tw_listener *l;
		(void)child_accept_one(url_pipe, &s, &l);
		char b = 'r';
		CHECK(write(ready[1], &b, 1) == 1);
		for (;;)
			pause();
	}
	char url[128];
	tu_url_recv(url_pipe, url, sizeof(url));
	tw_context *c;
	tu_ctx(&c, "writer");
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, url, &p));
	char b;
	CHECK(read(ready[0], &b, 1) == 1);
	stalled s;
	stalled_write(&s, p);
	printf("   killing the reader (pid %d) with SIGKILL\n", (int)pid);
	CHECK(kill(pid, SIGKILL) == 0);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	stalled_expect(&s, TW_ERR_CONNRESET, "without a goodbye");
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
	close(ready[0]), close(ready[1]);
}

/* The peer forks a worker that never calls tensorwire (a data loader, say)
 * and is then killed with SIGKILL while the worker lives on. The worker's
 * copies of the peer's descriptors were closed as it was forked
 * (tensorwire.h, tw_context_create), so this end's pending read fails at
 * once with the peer's death; before, it stayed pending until the worker
 * exited, since the worker's copies kept every connection open. The worker
 * lives until released, at most 60 s; the read must fail within 20 s. */
static void case_peer_forked_then_died(void)
{
	int url_pipe[2], worker[2], release[2];
	CHECK(pipe(worker) == 0 && pipe(release) == 0);
	char url[128];
	pid_t pid = tu_fork_url_child(url_pipe, url, sizeof(url));
	if (pid == 0) {
		close(release[1]);
		tw_context *c;
		tu_ctx(&c, "forker");
		tw_pipe *p;
		CHECK_OK(tw_context_connect(c, url, &p));
		tu_rec e;
		tu_rec_init(&e);
		CHECK_OK(tw_pipe_on_established(p, tu_on_status, &e));
		tu_expect(&e, TW_OK, NULL);
		tu_send_text(p, "before the fork");
		fflush(NULL);
		pid_t w = fork();
		CHECK(w >= 0);
		if (w == 0) { /* the worker: waits, touching nothing of the library */
			struct pollfd pf = { release[0], POLLIN, 0 };
			(void)poll(&pf, 1, 60000);
			_exit(0);
		}
		CHECK(write(worker[1], &w, sizeof(w)) == (ssize_t)sizeof(w));
		for (;;)
			pause();
	}
	close(release[0]);
	tw_context *s;
	tu_ctx(&s, "reader");
	tw_listener *l = tu_listen(s, NULL, url, sizeof(url));
	tu_rec acc, est, d;
	tu_rec_init(&acc), tu_rec_init(&est), tu_rec_init(&d);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
	close(url_pipe[0]);
	tu_url_send(url_pipe, url);
	tu_expect(&acc, TW_OK, NULL);
	CHECK_OK(tw_pipe_on_established(acc.pipe, tu_on_status, &est));
	tu_expect(&est, TW_OK, NULL);
	tu_expect_text(acc.pipe, "before the fork");
	pid_t w;
	CHECK(read(worker[0], &w, sizeof(w)) == (ssize_t)sizeof(w));
	CHECK_OK(tw_pipe_read_descriptor(acc.pipe, tu_on_desc, &d));
	printf("   killing the peer (pid %d) with SIGKILL; its worker (pid %d) lives on\n", (int)pid,
	       (int)w);
	CHECK(kill(pid, SIGKILL) == 0);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	bool ended = tu_wait_for(&d.w, 1, 20000);
	bool worker_alive = kill(w, 0) == 0;
	CHECK(write(release[1], "x", 1) == 1); /* the worker may go */
	if (!ended || !worker_alive) {
		fprintf(stderr, "the pending read %s while the dead peer's worker %s\n",
		        ended ? "ended" : "was still pending 20 s after the peer's death",
		        worker_alive ? "lived" : "had already exited");
		abort();
	}
	tu_expect(&d, TW_ERR_CONNRESET, NULL);
	tu_once(&d), tu_once(&acc), tu_once(&est);
	tw_pipe_destroy(acc.pipe);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(s));
	tw_context_destroy(s);
	close(release[1]), close(worker[0]), close(worker[1]);
}

/* ---- crossed: the peer leaves while our write waits for it ------------------------------ */

/* The writer's big payload waits on D for a reader that never reads it;
 * the reader writes CROSSED messages on the same connection, gets TW_OK
 * for each, and closes its pipe (or, `exit_after`, exits in another
 * process). Everything it got TW_OK for must still reach the writer,
 * however late the writer reads, and only the big write fails: on shm the
 * inbox once failed with the write that waited for room in the peer's
 * (the inbox cut short), on uv the reset of the peer's close failed the
 * connection past the reads already queued. With `crossed_tensors` the big
 * write is a tensor and each message carries one, so the crossing happens
 * on the channel's connections (mpt once failed its receives with a send
 * that met the end). */
enum { CROSSED = 3, CROSSED_BIG = 16 << 20, CROSSED_TENSOR = 4096 };
static bool crossed_tensors;

static void crossed_reader_writes(tw_pipe *p)
{
	char text[32];
	for (int i = 0; i < CROSSED; i++) {
		snprintf(text, sizeof(text), "crossed %d", i);
		if (!crossed_tensors) {
			tu_send_text(p, text); /* waits for its TW_OK */
			continue;
		}
		uint8_t buf[CROSSED_TENSOR];
		tu_fill_at(buf, sizeof(buf), 900 + (uint64_t)i);
		tw_tensor t = { .data = buf, .length = sizeof(buf), .source_device = tw_device_cpu(),
			        .has_target_device = true, .target_device = tw_device_cpu() };
		tw_message m = { .metadata = text, .metadata_length = strlen(text), .num_tensors = 1,
			         .tensors = &t };
		tu_rec w;
		tu_rec_init(&w);
		CHECK_OK(tw_pipe_write(p, &m, tu_on_status, &w));
		tu_expect(&w, TW_OK, NULL);
		tu_once(&w);
	}
}

static void crossed_big_write(tw_pipe *p, uint8_t **big, tw_payload *pay, tw_tensor *t,
                              tw_message *m, tu_rec *w)
{
	*big = malloc(CROSSED_BIG);
	CHECK(*big);
	memset(*big, 0x3c, CROSSED_BIG);
	*pay = (tw_payload){ .data = *big, .length = CROSSED_BIG };
	*t = (tw_tensor){ .data = *big, .length = CROSSED_BIG, .source_device = tw_device_cpu(),
		          .has_target_device = true, .target_device = tw_device_cpu() };
	*m = crossed_tensors ? (tw_message){ .num_tensors = 1, .tensors = t }
	                     : (tw_message){ .num_payloads = 1, .payloads = pay };
	tu_rec_init(w);
	CHECK_OK(tw_pipe_write(p, m, tu_on_status, w));
	CHECK(!tu_wait_for(&w->w, 1, 300)); /* stalled: nobody reads it */
}

/* Reads message i of crossed_reader_writes with its tensor, checking it. */
static void crossed_expect_tensor(tw_pipe *p, int i)
{
	char text[32];
	snprintf(text, sizeof(text), "crossed %d", i);
	tu_rec d, r;
	tu_rec_init(&r);
	tu_expect_desc_text(p, text, &d);
	CHECK(d.desc->num_tensors == 1 && d.desc->tensors[0].length == CROSSED_TENSOR);
	uint8_t buf[CROSSED_TENSOR], want[CROSSED_TENSOR];
	tw_tensor_allocation ta = { .data = buf, .device = tw_device_cpu() };
	tw_allocation a = { .num_tensors = 1, .tensors = &ta };
	CHECK_OK(tw_pipe_read(p, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	tu_fill_at(want, sizeof(want), 900 + (uint64_t)i);
	CHECK(memcmp(buf, want, sizeof(buf)) == 0);
	tu_once(&d), tu_once(&r);
}

/* After the peer left: its messages, in order, then the end; the big write
 * failed with an end of the pipe, never TW_OK. */
static void crossed_expect(tw_pipe *p, tu_rec *w, uint8_t *big)
{
	usleep(300 * 1000); /* the writer reads late: the end is known by now */
	char text[32];
	for (int i = 0; i < CROSSED; i++) {
		snprintf(text, sizeof(text), "crossed %d", i);
		if (crossed_tensors)
			crossed_expect_tensor(p, i);
		else
			tu_expect_text(p, text);
	}
	printf("   all %d messages read after the peer left\n", CROSSED);
	tu_rec d;
	tu_rec_init(&d);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
	tu_wait(&d.w, 1);
	printf("   next read: %s: %s\n", tw_status_name(d.status), d.detail);
	CHECK(d.status != TW_OK);
	tu_wait(&w->w, 1);
	printf("   big write: %s: %s\n", tw_status_name(w->status), w->detail);
	CHECK(w->status != TW_OK);
	tu_once(&d), tu_once(w);
	free(big);
}

static void case_crossed_close(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	uint8_t *big;
	tw_payload pay;
	tw_tensor t;
	tw_message m;
	tu_rec w;
	crossed_big_write(p.c, &big, &pay, &t, &m, &w);
	crossed_reader_writes(p.s);
	tw_pipe_close(p.s);
	crossed_expect(p.c, &w, big);
	tu_pair_close(&p);
}

/* The same with tensors, on the channel's connections. Channels whose
 * sends complete only once the reader has taken the tensor (cma, xth: the
 * reader copies it out of the writer's memory) cannot give the reader's
 * writes their TW_OK before the writer reads: there, no write is
 * acknowledged yet when the reader leaves, and the case does not arise. */
static void case_crossed_tensor_close(void)
{
	const char *ch = tu_combo_get()->channel;
	if (strcmp(ch, "cma") == 0 || strcmp(ch, "xth") == 0) {
		printf("SKIP: channel %s acknowledges a tensor only once the reader copied it, so "
		       "the crossing cannot happen with tensors\n",
		       ch);
		exit(77);
	}
	crossed_tensors = true;
	case_crossed_close();
}

static void case_crossed_exit(void)
{
	int url_pipe[2], go[2];
	CHECK(pipe(url_pipe) == 0 && pipe(go) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		tw_context *s;
		tw_listener *l;
		tw_pipe *rp = child_accept_one(url_pipe, &s, &l);
		char b;
		CHECK(read(go[0], &b, 1) == 1); /* the writer's big write is stalled */
		crossed_reader_writes(rp);
		tw_pipe_close(rp);
		tw_pipe_destroy(rp);
		tw_listener_destroy(l);
		CHECK_OK(tw_context_join(s));
		tw_context_destroy(s);
		_exit(0);
	}
	char url[128];
	tu_url_recv(url_pipe, url, sizeof(url));
	tw_context *c;
	tu_ctx(&c, "writer");
	tw_pipe *p;
	CHECK_OK(tw_context_connect(c, url, &p));
	uint8_t *big;
	tw_payload pay;
	tw_tensor t;
	tw_message m;
	tu_rec w;
	crossed_big_write(p, &big, &pay, &t, &m, &w);
	char b = 'g';
	CHECK(write(go[1], &b, 1) == 1);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	printf("   the reader wrote %d messages, closed and exited\n", CROSSED);
	crossed_expect(p, &w, big);
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(c));
	tw_context_destroy(c);
	close(go[0]), close(go[1]);
}

/* ---- read, then goodbye ---------------------------------------------------------------- */

static void close_on_read(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	tu_rec_hit(arg, st, detail);
	tw_pipe_close(p); /* the goodbye, as soon as the last message is in */
}

/* The reader reads a tensor message and a metadata-only one, and closes
 * its pipe in the second read's callback; the writer must hear TW_OK for
 * both. Where the first message's tensor is confirmed by the peer (cma's
 * completion, ibv's landing), that confirmation and the goodbye travel on
 * different connections, and the goodbye may be read first: the second
 * write, whose bytes are all out, once failed then with the goodbye's
 * TW_ERR_EOF, because the first was still waiting for its confirmation.
 * Repeated, since which comes first is up to the scheduler. */
static void case_read_then_goodbye(void)
{
	enum { ROUNDS = 40, LEN = 256 * 1024 };
	for (int i = 0; i < ROUNDS; i++) {
		tu_pair p = { 0 };
		tu_pair_open(&p, NULL);
		tw_tensor t;
		tw_message m0;
		uint8_t *src = tu_big_message(LEN, &t, &m0), *dst = malloc(LEN);
		CHECK(dst);
		memset(src, i + 1, LEN);
		tw_message m1 = { .metadata = "last", .metadata_length = 4 };
		tu_rec w0, w1, d0, r0, d1, r1;
		tu_rec_init(&w1), tu_rec_init(&d1), tu_rec_init(&r1);
		tw_tensor_allocation ta = { .data = dst, .device = t.source_device };
		tu_move_tensor(p.c, p.s, &t, &ta, &w0, &d0, &r0);
		CHECK_OK(tw_pipe_write(p.c, &m1, tu_on_status, &w1));
		tu_expect(&r0, TW_OK, NULL);
		CHECK(memcmp(src, dst, LEN) == 0);
		CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d1));
		tu_expect(&d1, TW_OK, NULL);
		tw_allocation none = { 0 };
		CHECK_OK(tw_pipe_read(p.s, &none, close_on_read, &r1));
		tu_expect(&r1, TW_OK, NULL);
		tu_wait(&w0.w, 1), tu_wait(&w1.w, 1);
		if (w0.status != TW_OK || w1.status != TW_OK)
			printf("   round %d: write 0 %s (%s), write 1 %s (%s)\n", i,
			       tw_status_name(w0.status), w0.detail, tw_status_name(w1.status),
			       w1.detail);
		tu_expect(&w0, TW_OK, NULL);
		tu_expect(&w1, TW_OK, NULL);
		tu_once(&w0), tu_once(&w1), tu_once(&d0), tu_once(&r0), tu_once(&d1), tu_once(&r1);
		tu_pair_close(&p);
		free(src);
		free(dst);
	}
	printf("   %d rounds: both writes TW_OK every time\n", ROUNDS);
}

enum { WITHDRAWN_LEN = 1 << 20 };

static void refill_5a(void *buf)
{
	memset(buf, 0x5a, WITHDRAWN_LEN);
}

/* The reader has a tensor's descriptor; its loop thread is held (in a
 * callback) while it asks for the read and the writer closes its pipe. The
 * write fails, which hands its buffer back to the writer, who overwrites it
 * at once. Then the reader's loop runs, with the read, the writer's end and
 * the bytes the writer's channel sent before it all waiting. The reader
 * gets the bytes as they were written or an error, never the overwritten
 * ones with TW_OK: a channel that copies out of the writer's memory (cma,
 * xth) must not copy once the writer has ended its side (spec 4.4.e). A
 * write reported TW_OK must be read whole. (A first tensor went through
 * before, so the channel knows its peer.) */
static void case_withdrawn_tensor(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	tw_tensor t;
	tw_message m;
	uint8_t *src = tu_big_message(WITHDRAWN_LEN, &t, &m), *dst = malloc(WITHDRAWN_LEN);
	CHECK(dst);
	tw_tensor_allocation ta = { .data = dst, .device = tw_device_cpu() };
	tw_allocation a = { .num_tensors = 1, .tensors = &ta };
	tu_rec w, d, r;
	tu_move_tensor(p.c, p.s, &t, &ta, &w, &d, &r);
	tu_expect(&r, TW_OK, NULL);
	tu_expect(&w, TW_OK, NULL);
	tu_once(&w), tu_once(&d), tu_once(&r);
	memset(src, 0xa5, WITHDRAWN_LEN);
	memset(dst, 0, WITHDRAWN_LEN);
	tu_withdraw_write(&p, &m, &a, &w, &d, &r, refill_5a, src);
	if (r.status == TW_OK) {
		size_t bad = 0;
		while (bad < WITHDRAWN_LEN && dst[bad] == 0xa5)
			bad++;
		if (bad != WITHDRAWN_LEN) {
			fprintf(stderr, "read TW_OK, but byte %zu is 0x%02x, not the 0xa5 written%s\n", bad,
			        dst[bad], dst[bad] == 0x5a ? " (the writer's later use of its buffer)" : "");
			abort();
		}
	}
	usleep(50 * 1000); /* a second callback would come now */
	tu_once(&w), tu_once(&d), tu_once(&r);
	tu_pair_close(&p);
	free(src);
	free(dst);
}

static const tu_case cases[] = {
	{ "slow_reader_after_close", case_slow_reader_after_close },
	{ "slow_reader_writer_exited", case_slow_reader_writer_exited },
	{ "stalled_reader_writer_exited", case_stalled_reader_writer_exited },
	{ "fan_in", case_fan_in },
	{ "queued_local_close", case_queued_local_close },
	{ "queued_peer_close", case_queued_peer_close },
	{ "queued_peer_killed", case_queued_peer_killed },
	{ "read_then_goodbye", case_read_then_goodbye },
	{ "crossed_close", case_crossed_close },
	{ "crossed_exit", case_crossed_exit },
	{ "crossed_tensor_close", case_crossed_tensor_close },
	{ "withdrawn_tensor", case_withdrawn_tensor },
	{ "peer_forked_then_died", case_peer_forked_then_died },
};

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0); /* what was seen survives an abort */
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
