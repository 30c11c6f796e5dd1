/*
 * pipe_test.c - ours <-> ours through the public API, in one process (two
 * contexts, two loop threads) or in two processes (fork), on the battery's
 * transport and channel (TW_TEST_COMBO, test_util.h; uv+basic by default).
 *
 * Usage: pipe_test <case> [1proc|2proc]
 * Each case sends a set of messages client -> server, then the same shapes
 * server -> client, and checks what a user would: every byte (xxHash of the
 * received buffer against the generator's), descriptors (lengths, metadata,
 * target devices), every callback exactly once and in order, the pipe info,
 * and a clean shutdown (LeakSanitizer checks the rest). A watchdog turns a
 * hang into a failure.
 */
#include <sys/wait.h>

#include "test_util.h"
#ifdef TW_FAULT_INJECTION
#include "platform/fault.h"
#endif

/* ---- message shapes ---------------------------------------------------------- */

typedef struct shape {
	size_t meta_len;
	size_t np;
	size_t plen[8];
	size_t pmeta[8];
	size_t nt;
	size_t *tlen;
	bool *targeted;
	size_t tmeta;
} shape;

typedef struct plan {
	size_t n;
	shape *msgs;
	bool write_all_before_read;
} plan;

static shape *plan_add(plan *p)
{
	p->msgs = realloc(p->msgs, (p->n + 1) * sizeof(shape));
	CHECK(p->msgs);
	shape *s = &p->msgs[p->n++];
	memset(s, 0, sizeof(*s));
	return s;
}

static void shape_tensors(shape *s, size_t nt)
{
	s->nt = nt;
	s->tlen = calloc(nt ? nt : 1, sizeof(size_t));
	s->targeted = calloc(nt ? nt : 1, sizeof(bool));
	CHECK(s->tlen && s->targeted);
}

static void plan_free(plan *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->msgs[i].tlen);
		free(p->msgs[i].targeted);
	}
	free(p->msgs);
}

static bool make_plan(const char *name, plan *p)
{
	memset(p, 0, sizeof(*p));
	if (strcmp(name, "metadata") == 0) {
		size_t sizes[] = { 0, 5, 1000, 70000 };
		for (size_t i = 0; i < 4; i++)
			plan_add(p)->meta_len = sizes[i];
	} else if (strcmp(name, "payloads") == 0) {
		shape *s = plan_add(p);
		s->np = 3;
		s->plen[0] = 1, s->plen[1] = 1000, s->plen[2] = 100000;
		s->pmeta[1] = 12;
		s = plan_add(p);
		s->np = 1;
		s->plen[0] = 0;
		s = plan_add(p);
		s->np = 2;
		s->plen[0] = 7, s->plen[1] = 7;
	} else if (strcmp(name, "tensors") == 0) {
		shape *s = plan_add(p);
		shape_tensors(s, 3);
		s->tlen[0] = 16, s->tlen[1] = 4096, s->tlen[2] = 1 << 20;
		for (size_t i = 0; i < 3; i++)
			s->targeted[i] = true;
		s = plan_add(p);
		shape_tensors(s, 1);
		s->tlen[0] = 333;
		s->targeted[0] = true;
	} else if (strcmp(name, "mixed") == 0) {
		for (size_t m = 0; m < 5; m++) {
			shape *s = plan_add(p);
			s->meta_len = 10 * m;
			s->np = 2;
			s->plen[0] = 100 + m, s->plen[1] = 50000 * m;
			s->pmeta[0] = m;
			shape_tensors(s, 3);
			s->tmeta = 3;
			for (size_t i = 0; i < 3; i++) {
				s->tlen[i] = 1000 * (i + 1) + m;
				s->targeted[i] = (i + m) % 2 == 0;
			}
		}
	} else if (strcmp(name, "zero_length") == 0) {
		shape *s = plan_add(p);
		s->np = 3;
		s->plen[0] = 0, s->plen[1] = 3, s->plen[2] = 0;
		size_t tl[] = { 0, 100, 0, 0, 5000, 0 };
		shape_tensors(s, 6);
		for (size_t i = 0; i < 6; i++) {
			s->tlen[i] = tl[i];
			s->targeted[i] = i % 2 == 1;
		}
		s = plan_add(p);
		shape_tensors(s, 2); /* only empty tensors, one without target */
		s->targeted[0] = true;
	} else if (strcmp(name, "hundred_tensors") == 0) {
		shape *s = plan_add(p);
		shape_tensors(s, 100);
		s->tmeta = 5;
		for (size_t i = 0; i < 100; i++) {
			s->tlen[i] = (i * 37) % 1000;
			s->targeted[i] = i % 3 != 0;
		}
	} else if (strcmp(name, "thousand_messages") == 0) {
		for (size_t m = 0; m < 1000; m++) {
			shape *s = plan_add(p);
			s->meta_len = 8;
			s->np = 1;
			s->plen[0] = 16 + m % 7;
			shape_tensors(s, 1);
			s->tlen[0] = 32 + m % 5;
			s->targeted[0] = m % 3 != 0;
		}
		p->write_all_before_read = true;
	} else if (strcmp(name, "big") == 0) {
		shape *s = plan_add(p);
		s->np = 1;
		s->plen[0] = 1 << 20;
		shape_tensors(s, 1);
		s->tlen[0] = (size_t)64 << 20;
		s->targeted[0] = true;
	} else if (strcmp(name, "no_target_device") == 0) {
		for (size_t m = 0; m < 3; m++) {
			shape *s = plan_add(p);
			shape_tensors(s, 2);
			s->tlen[0] = 64 + m, s->tlen[1] = 128;
			s->targeted[0] = false;
			s->targeted[1] = m == 1;
		}
	} else {
		return false;
	}
	return true;
}

static uint64_t seed_of(int dir, size_t msg, int kind, size_t idx)
{
	return ((((uint64_t)dir * 1000003u + msg) * 31u + (uint64_t)kind) * 1009u + idx) + 1;
}

enum { K_META = 1, K_PAY = 2, K_PMETA = 3, K_TEN = 4, K_TMETA = 5 };

/* ---- sending ------------------------------------------------------------------------ */

typedef struct tx_msg {
	uint8_t *meta;
	tw_payload pay[8];
	tw_tensor *ten;
	uint8_t **bufs; /* everything to free */
	size_t nbufs;
} tx_msg;

typedef struct sender {
	const plan *pl;
	int dir;
	tx_msg *msgs;
	int *cb_count;
	size_t next_cb;      /* write callbacks must come in order */
	bool order_ok;
	tu_waiter done;
	struct write_arg *args;
} sender;

static uint8_t *tx_buf(tx_msg *t, size_t len, uint64_t seed)
{
	uint8_t *b = malloc(len ? len : 1);
	CHECK(b);
	tu_fill_at(b, len, seed);
	t->bufs = realloc(t->bufs, (t->nbufs + 1) * sizeof(*t->bufs));
	CHECK(t->bufs);
	t->bufs[t->nbufs++] = b;
	return b;
}

static void on_write(tw_pipe *p, tw_status_t st, const char *detail, void *arg);

struct write_arg;
typedef struct write_arg {
	sender *s;
	size_t idx;
} write_arg;

static void send_all(tw_pipe *pipe, sender *s, const plan *pl, int dir)
{
	memset(s, 0, sizeof(*s));
	s->pl = pl;
	s->dir = dir;
	s->order_ok = true;
	s->msgs = calloc(pl->n, sizeof(tx_msg));
	s->cb_count = calloc(pl->n, sizeof(int));
	write_arg *args = calloc(pl->n, sizeof(write_arg));
	CHECK(s->msgs && s->cb_count && args);
	tu_waiter_init(&s->done);
	for (size_t m = 0; m < pl->n; m++) {
		const shape *sh = &pl->msgs[m];
		tx_msg *t = &s->msgs[m];
		tw_message msg;
		memset(&msg, 0, sizeof(msg));
		t->meta = tx_buf(t, sh->meta_len, seed_of(dir, m, K_META, 0));
		msg.metadata = t->meta;
		msg.metadata_length = sh->meta_len;
		for (size_t i = 0; i < sh->np; i++) {
			t->pay[i].data = tx_buf(t, sh->plen[i], seed_of(dir, m, K_PAY, i));
			t->pay[i].length = sh->plen[i];
			t->pay[i].metadata = tx_buf(t, sh->pmeta[i], seed_of(dir, m, K_PMETA, i));
			t->pay[i].metadata_length = sh->pmeta[i];
		}
		msg.num_payloads = sh->np;
		msg.payloads = t->pay;
		t->ten = calloc(sh->nt ? sh->nt : 1, sizeof(tw_tensor));
		CHECK(t->ten);
		for (size_t i = 0; i < sh->nt; i++) {
			tw_tensor *x = &t->ten[i];
			x->data = tx_buf(t, sh->tlen[i], seed_of(dir, m, K_TEN, i));
			x->length = sh->tlen[i];
			x->source_device = tw_device_cpu();
			x->has_target_device = sh->targeted[i];
			x->target_device = tw_device_cpu();
			x->metadata = tx_buf(t, sh->tmeta, seed_of(dir, m, K_TMETA, i));
			x->metadata_length = sh->tmeta;
		}
		msg.num_tensors = sh->nt;
		msg.tensors = t->ten;
		args[m].s = s;
		args[m].idx = m;
		CHECK_OK(tw_pipe_write(pipe, &msg, on_write, &args[m]));
	}
	s->args = args;
}

static void on_write(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	write_arg *wa = arg;
	sender *s = wa->s;
	if (st != TW_OK) {
		fprintf(stderr, "write %zu failed: %s: %s\n", wa->idx, tw_status_name(st), detail);
		abort();
	}
	s->cb_count[wa->idx]++;
	if (wa->idx != s->next_cb)
		s->order_ok = false;
	s->next_cb++;
	tu_signal(&s->done);
}

static void sender_finish(sender *s)
{
	tu_wait(&s->done, (long)s->pl->n);
	CHECK(s->order_ok);
	for (size_t m = 0; m < s->pl->n; m++) {
		CHECK(s->cb_count[m] == 1);
		for (size_t b = 0; b < s->msgs[m].nbufs; b++)
			free(s->msgs[m].bufs[b]);
		free(s->msgs[m].bufs);
		free(s->msgs[m].ten);
	}
	free(s->msgs);
	free(s->cb_count);
	free(s->args);
	tu_waiter_destroy(&s->done);
}

/* ---- receiving ------------------------------------------------------------------------ */

typedef struct rx_msg {
	void *pay[8];
	tw_tensor_allocation *ten;
	int desc_cbs;
	int read_cbs;
} rx_msg;

typedef struct receiver {
	const plan *pl;
	int dir;
	tw_pipe *pipe;
	rx_msg *msgs;
	size_t next_desc;
	size_t next_read;
	bool failed;
	tu_waiter done;
	const tw_message *descs; /* unused: descriptors are checked in the callback */
} receiver;

static void on_desc(tw_pipe *p, tw_status_t st, const char *detail, const tw_message *d, void *arg);

static void check_bytes(const void *buf, size_t len, uint64_t seed, const char *what, size_t m,
                        size_t i)
{
	if (len == 0)
		return;
	CHECK(buf);
	if (tu_hash(buf, len) != tu_expected_hash(len, seed)) {
		fprintf(stderr, "message %zu %s %zu: checksum mismatch (%zu bytes)\n", m, what, i, len);
		abort();
	}
}

static void on_read(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	receiver *r = arg;
	size_t m = r->next_read++;
	if (st != TW_OK) {
		fprintf(stderr, "read %zu failed: %s: %s\n", m, tw_status_name(st), detail);
		abort();
	}
	const shape *sh = &r->pl->msgs[m];
	rx_msg *x = &r->msgs[m];
	x->read_cbs++;
	for (size_t i = 0; i < sh->np; i++) {
		check_bytes(x->pay[i], sh->plen[i], seed_of(r->dir, m, K_PAY, i), "payload", m, i);
		free(x->pay[i]);
	}
	for (size_t i = 0; i < sh->nt; i++) {
		check_bytes(x->ten[i].data, sh->tlen[i], seed_of(r->dir, m, K_TEN, i), "tensor", m, i);
		free(x->ten[i].data);
	}
	free(x->ten);
	tu_signal(&r->done);
}

static void on_desc(tw_pipe *p, tw_status_t st, const char *detail, const tw_message *d, void *arg)
{
	receiver *r = arg;
	size_t m = r->next_desc++;
	if (st != TW_OK) {
		fprintf(stderr, "descriptor %zu failed: %s: %s\n", m, tw_status_name(st), detail);
		abort();
	}
	CHECK(m < r->pl->n);
	const shape *sh = &r->pl->msgs[m];
	rx_msg *x = &r->msgs[m];
	x->desc_cbs++;
	CHECK(d->metadata_length == sh->meta_len);
	check_bytes(d->metadata, d->metadata_length, seed_of(r->dir, m, K_META, 0), "metadata", m, 0);
	CHECK(d->num_payloads == sh->np);
	CHECK(d->num_tensors == sh->nt);
	for (size_t i = 0; i < sh->np; i++) {
		CHECK(d->payloads[i].length == sh->plen[i]);
		CHECK(d->payloads[i].data == NULL);
		CHECK(d->payloads[i].metadata_length == sh->pmeta[i]);
		check_bytes(d->payloads[i].metadata, sh->pmeta[i], seed_of(r->dir, m, K_PMETA, i),
		            "payload metadata", m, i);
		x->pay[i] = sh->plen[i] ? malloc(sh->plen[i]) : NULL;
		CHECK(sh->plen[i] == 0 || x->pay[i]);
	}
	x->ten = calloc(sh->nt ? sh->nt : 1, sizeof(tw_tensor_allocation));
	CHECK(x->ten);
	for (size_t i = 0; i < sh->nt; i++) {
		const tw_tensor *t = &d->tensors[i];
		CHECK(t->length == sh->tlen[i]);
		CHECK(t->has_target_device == sh->targeted[i]);
		CHECK(strcmp(t->source_device.type, "cpu") == 0 && t->source_device.index == 0);
		CHECK(t->metadata_length == sh->tmeta);
		check_bytes(t->metadata, sh->tmeta, seed_of(r->dir, m, K_TMETA, i), "tensor metadata", m,
		            i);
		x->ten[i].data = sh->tlen[i] ? malloc(sh->tlen[i]) : NULL;
		CHECK(sh->tlen[i] == 0 || x->ten[i].data);
		x->ten[i].device = tw_device_cpu();
	}
	tw_allocation a = { sh->np, x->pay, sh->nt, x->ten };
	CHECK_OK(tw_pipe_read(p, &a, on_read, r));
	/* Ask for the next descriptor at once: it is delivered after this
	 * read has queued its payload reads (spec 3.11). */
	if (r->next_desc < r->pl->n)
		CHECK_OK(tw_pipe_read_descriptor(p, on_desc, r));
}

static void recv_start(tw_pipe *pipe, receiver *r, const plan *pl, int dir)
{
	memset(r, 0, sizeof(*r));
	r->pl = pl;
	r->dir = dir;
	r->pipe = pipe;
	r->msgs = calloc(pl->n ? pl->n : 1, sizeof(rx_msg));
	CHECK(r->msgs);
	tu_waiter_init(&r->done);
	if (pl->n > 0)
		CHECK_OK(tw_pipe_read_descriptor(pipe, on_desc, r));
}

static void recv_finish(receiver *r)
{
	tu_wait(&r->done, (long)r->pl->n);
	for (size_t m = 0; m < r->pl->n; m++) {
		CHECK(r->msgs[m].desc_cbs == 1);
		CHECK(r->msgs[m].read_cbs == 1);
	}
	free(r->msgs);
	tu_waiter_destroy(&r->done);
}

/* ---- the two sides ------------------------------------------------------------------------ */

static void setup_ctx(tw_context **ctx, const char *name)
{
	CHECK_OK(tw_context_create(name, ctx));
	tu_register_combo(*ctx);
}

static void check_info(tw_pipe *p, bool is_server)
{
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p, &info));
	CHECK(strcmp(info.transport, tu_combo_get()->transport) == 0);
	CHECK(strcmp(info.channel, tu_combo_get()->channel) == 0);
	CHECK(info.is_server == is_server);
	CHECK(strcmp(info.remote_name, is_server ? "client-ctx" : "") == 0);
	tw_device cpu = tw_device_cpu();
	char ch[32];
	CHECK_OK(tw_pipe_channel_for(p, &cpu, &cpu, ch, sizeof(ch)));
	CHECK(strcmp(ch, tu_combo_get()->channel) == 0);
	/* Both ends run with eager on (the default) or with TW_EAGER=0 (spec
	 * 8.4): the verdicts say the extension is used, or say nothing of it. */
	char v[2048];
	CHECK_OK(tw_pipe_get_verdicts(p, v, sizeof(v)));
	const char *eager = getenv("TW_EAGER");
	bool want = !(eager && !strcmp(eager, "0"));
	bool used = strstr(v, "extension eager: used:") != NULL;
	bool said = strstr(v, "extension eager") != NULL;
	if (want != used || (!want && said))
		fprintf(stderr, "verdicts (TW_EAGER=%s):\n%s", eager ? eager : "", v);
	CHECK(want == used);
	CHECK(want || !said);
}

static void on_est(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	if (st != TW_OK) {
		fprintf(stderr, "establishment failed: %s: %s\n", tw_status_name(st), detail);
		abort();
	}
	tu_signal(arg);
}

typedef struct accept_box {
	tu_waiter w;
	tw_pipe *pipe;
} accept_box;

static void on_accept(tw_listener *l, tw_status_t st, const char *detail, tw_pipe *p, void *arg)
{
	accept_box *b = arg;
	if (st != TW_OK) {
		fprintf(stderr, "accept failed: %s: %s\n", tw_status_name(st), detail);
		abort();
	}
	b->pipe = p;
	tu_signal(&b->w);
}

/* Single-process rendezvous for write_all_before_read and the final bye. */
static tu_waiter client_wrote;

static shape bye_shape = { .meta_len = 3 };
static const plan bye_plan_value = { 1, &bye_shape, false };

static const plan *bye_plan(void)
{
	return &bye_plan_value;
}

static void run_server(tw_listener *l, const plan *pl, bool one_process)
{
	accept_box box;
	tu_waiter_init(&box.w);
	CHECK_OK(tw_listener_accept(l, on_accept, &box));
	tu_wait(&box.w, 1);
	tw_pipe *p = box.pipe;
	tu_waiter est;
	tu_waiter_init(&est);
	CHECK_OK(tw_pipe_on_established(p, on_est, &est));
	tu_wait(&est, 1);
	check_info(p, true);

	if (pl->write_all_before_read && one_process)
		tu_wait(&client_wrote, 1);
	receiver r;
	recv_start(p, &r, pl, 0);
	recv_finish(&r);

	sender s;
	send_all(p, &s, pl, 1);
	sender_finish(&s);

	receiver bye;
	recv_start(p, &bye, bye_plan(), 2);
	recv_finish(&bye);

	tw_pipe_destroy(p);
	tu_waiter_destroy(&est);
	tu_waiter_destroy(&box.w);
}

static void run_client(const char *url, const plan *pl, bool one_process)
{
	tw_context *ctx;
	setup_ctx(&ctx, "client-ctx");
	tw_pipe *p;
	CHECK_OK(tw_context_connect(ctx, url, &p));
	/* Written before the handshake completes: they must wait, in order. */
	sender s;
	send_all(p, &s, pl, 0);
	if (one_process)
		tu_signal(&client_wrote);
	sender_finish(&s);
	check_info(p, false);

	receiver r;
	recv_start(p, &r, pl, 1);
	recv_finish(&r);

	sender bye;
	send_all(p, &bye, bye_plan(), 2);
	sender_finish(&bye);

	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
}

struct server_thread_arg {
	tw_listener *l;
	const plan *pl;
};

static void *server_thread(void *arg)
{
	struct server_thread_arg *a = arg;
	run_server(a->l, a->pl, true);
	return NULL;
}

static int run_case(const char *name, bool two_process)
{
	plan pl;
	if (!make_plan(name, &pl)) {
		fprintf(stderr, "unknown case '%s'\n", name);
		return 2;
	}
	/* Two processes: fork before any context (and its thread) exists; the
	 * server tells the client its URL through a pipe. */
	int urlpipe[2] = { -1, -1 };
	pid_t pid = -1;
	if (two_process) {
		CHECK(pipe(urlpipe) == 0);
		fflush(NULL);
		pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			char url[128];
			tu_url_recv(urlpipe, url, sizeof(url));
			run_client(url, &pl, false);
			plan_free(&pl);
			_exit(0);
		}
		close(urlpipe[0]);
	}
	tu_waiter_init(&client_wrote);
	tw_context *srv;
	setup_ctx(&srv, "server-ctx");
	const tu_combo *combo = tu_combo_get();
	const char *urls[] = { combo->listen_url };
	tw_listener *l;
	CHECK_OK(tw_context_listen(srv, urls, 1, &l));
	char url[128];
	CHECK_OK(tw_listener_url(l, combo->transport, url, sizeof(url)));
	CHECK(strncmp(url, combo->transport, strlen(combo->transport)) == 0 &&
	      strncmp(url + strlen(combo->transport), "://", 3) == 0);

	if (!two_process) {
		pthread_t th;
		struct server_thread_arg a = { l, &pl };
		CHECK(pthread_create(&th, NULL, server_thread, &a) == 0);
		run_client(url, &pl, true);
		pthread_join(th, NULL);
	} else {
		tu_url_send(urlpipe, url);
		run_server(l, &pl, false);
		int status;
		CHECK(waitpid(pid, &status, 0) == pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "client process failed (status 0x%x)\n", status);
			return 1;
		}
	}
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(srv));
	tw_context_destroy(srv);
	tu_waiter_destroy(&client_wrote);
	plan_free(&pl);
#ifdef TW_FAULT_INJECTION
	/* Built against the fault-injecting twin: the rules in TW_FAULTS must
	 * really have fired, or this run proved nothing. */
	printf("fault points fired %lu times\n", tw__fault_fired());
	CHECK(tw__fault_fired() > 0);
#endif
	printf("ok - %s (%s)\n", name, two_process ? "two processes" : "one process");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s <case> [1proc|2proc]\n", argv[0]);
		return 2;
	}
	tu_watchdog(110);
	bool two = argc > 2 && strcmp(argv[2], "2proc") == 0;
	return run_case(argv[1], two);
}
