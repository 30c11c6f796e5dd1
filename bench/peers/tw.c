/*
 * tw.c - ping-pong driver for libtensorwire (ours), through the public API
 * only (tensorwire.h). Systems are "<transport>-<channel>" kinds passed to
 * the library as they are: uv-basic, shm-basic, shm-cma, uv-mpt, ibv-basic,
 * and with a CUDA channel (uv-cuda_basic, uv-cuda_ipc, uv-cuda_gdr) the tensors are
 * device memory of cuda:0 on both sides (a kind the library reports
 * TW_ERR_UNSUPPORTED for, or no CUDA driver, makes this driver exit 77 with
 * the reason). Device tensors are filled from, and checked through, host
 * copies made outside the timed span (t0 is taken after the copy in, t1
 * before the copy out).
 *
 * Same chain as the stock driver (tp.cc), so the two rows compare like for
 * like: the client's read callback takes t1, checks the bytes and, once the
 * write callback has fired too, starts the next round; the server re-arms
 * read_descriptor from its read callback and writes the buffer back.
 */
#include "twb.h"

#include <tensorwire/tensorwire.h>

#include "agent_cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct twd_done {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	char error[512];
};

static void twd_finish(struct twd_done *d, const char *what, tw_status_t st, const char *detail)
{
	pthread_mutex_lock(&d->mu);
	if (!d->done) {
		d->done = true;
		if (what)
			snprintf(d->error, sizeof(d->error), "%s: %s: %s", what, tw_status_name(st),
			         detail ? detail : "");
		pthread_cond_broadcast(&d->cv);
	}
	pthread_mutex_unlock(&d->mu);
}

static void twd_wait(struct twd_done *d)
{
	pthread_mutex_lock(&d->mu);
	while (!d->done)
		pthread_cond_wait(&d->cv, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

static void twd_check(tw_status_t st, const char *what)
{
	if (st == TW_ERR_UNSUPPORTED)
		twb_die(TWB_EXIT_UNSUPPORTED, "%s: not viable here: %s", what, tw_last_error());
	if (st != TW_OK)
		twb_die(1, "%s: %s: %s", what, tw_status_name(st), tw_last_error());
}

/* The sender names each tensor's target device (cpu:0), so the receiver
 * sends no DescriptorReply and the tensor leaves right behind its
 * Descriptor (spec 3.11). */
static bool twd_target;

/* A CUDA channel: every tensor is memory of cuda:0 (and names it as its
 * target). */
static bool twd_cuda;

static tw_device twd_device(void)
{
	tw_device d = tw_device_cpu();
	if (twd_cuda) {
		snprintf(d.type, sizeof(d.type), "cuda");
		d.index = 0;
	}
	return d;
}

static void twd_tensor(tw_tensor *t, void *data, uint64_t len)
{
	memset(t, 0, sizeof(*t));
	t->data = data;
	t->length = len;
	t->source_device = twd_device();
	t->has_target_device = twd_target;
	t->target_device = twd_device();
}

/* A buffer of len bytes where the system's tensors live (see above). */
static void *twd_alloc(uint64_t len, bool prefault)
{
	if (!twd_cuda)
		return prefault ? twb_alloc_prefaulted(len) : twb_alloc_fresh(len);
	void *d;
	char err[320];
	if (twc_cuda_alloc(0, len, &d, err, sizeof(err)) != 0)
		twb_die(TWB_EXIT_UNSUPPORTED, "device memory: %s", err);
	return d;
}

static void twd_free(void *p)
{
	if (twd_cuda)
		twc_cuda_free(0, p);
	else
		free(p);
}

static void twd_copy(void *dst, const void *src, uint64_t len, bool to_device)
{
	char err[320];
	if (twc_cuda_copy(0, dst, src, len, err, sizeof(err)) != 0)
		twb_die(1, "copying a tensor %s the device: %s", to_device ? "to" : "from", err);
}

/* Cuts `suffix` off the end of s (longer than it); whether it was there. */
static bool twd_strip(char *s, const char *suffix)
{
	size_t sl = strlen(s), xl = strlen(suffix);
	if (sl <= xl || strcmp(s + sl - xl, suffix) != 0)
		return false;
	s[sl - xl] = '\0';
	return true;
}

static tw_context *twd_context(const twb_args *a, char *transport, size_t tlen)
{
	tw_context *ctx;
	/* "<transport>-<channel>[-spin|-sleep][-td][-noeager]": -spin asks the transport
	 * (uv, shm or ibv) to busy-poll for 100 ms after the last activity
	 * (option busy_poll_us), as stock's shm and ibv poll all the time;
	 * -sleep asks it not to poll at all (busy_poll_us=0: shm and ibv
	 * otherwise poll for 1 ms after activity);
	 * -td: every tensor names its target device (twd_target);
	 * -noeager: eager tensors (spec 8.4, on by default) switched off, so
	 * every tensor takes the channel */
	char sys[64], channel[32];
	snprintf(sys, sizeof(sys), "%s", a->system);
	bool noeager = twd_strip(sys, "-noeager");
	twd_target = twd_strip(sys, "-td");
	bool spin = twd_strip(sys, "-spin");
	bool nopoll = !spin && twd_strip(sys, "-sleep");
	const char *dash = strchr(sys, '-');
	if (!dash || (size_t)(dash - sys) >= tlen || !dash[1] || strlen(dash + 1) >= sizeof(channel))
		twb_die(2,
		        "bad --system '%s' (want <transport>-<channel>[-spin|-sleep][-td][-noeager], e.g. "
		        "uv-basic)",
		        a->system);
	memcpy(transport, sys, (size_t)(dash - sys));
	transport[dash - sys] = '\0';
	snprintf(channel, sizeof(channel), "%s", dash + 1);
	twd_cuda = !strncmp(channel, "cuda_", 5);
	if (twd_cuda) { /* the receiver needs no reply to learn the device */
		twd_target = true;
		void *probe;
		char err[320];
		if (twc_cuda_alloc(0, 1, &probe, err, sizeof(err)) != 0)
			twb_die(TWB_EXIT_UNSUPPORTED, "%s needs cuda:0: %s", a->system, err);
		twc_cuda_free(0, probe);
	}
	twd_check(tw_context_create(a->role == TWB_ROLE_SERVER ? "twb-server" : "twb-client", &ctx),
	          "tw_context_create");
	if (noeager)
		twd_check(tw_context_set_eager(ctx, false), "tw_context_set_eager");
	twd_check(tw_context_register_transport(ctx, transport, NULL, 0,
	                                        spin     ? "busy_poll_us=100000"
	                                        : nopoll ? "busy_poll_us=0"
	                                                 : NULL),
	          "tw_context_register_transport");
	twd_check(tw_context_register_channel(ctx, channel, NULL, 10, NULL),
	          "tw_context_register_channel");
	if (twd_cuda) /* the pipe's own CPU traffic needs no channel; a CPU one is usual beside */
		twd_check(tw_context_register_channel(ctx, "basic", NULL, 0, NULL),
		          "tw_context_register_channel");
	return ctx;
}

static void twd_close(tw_context *ctx)
{
	tw_context_close(ctx);
	if (tw_context_join(ctx) != TW_OK)
		twb_die(1, "tw_context_join: %s", tw_last_error());
	tw_context_destroy(ctx);
}

/* ---- server ------------------------------------------------------------------ */

struct twd_server {
	const twb_args *a;
	tw_pipe *pipe;
	unsigned char *buf; /* reused policy */
	uint64_t total, received;
	struct twd_done done;
};

struct twd_echo {
	struct twd_server *s;
	unsigned char *b;
	size_t len;
	tw_tensor_allocation ta;
};

static void twd_server_arm(struct twd_server *s);

static void twd_server_written(tw_pipe *pipe, tw_status_t st, const char *detail, void *arg)
{
	struct twd_echo *e = arg;
	if (st != TW_OK)
		twd_finish(&e->s->done, "server tw_pipe_write", st, detail);
	if (e->b != e->s->buf)
		twd_free(e->b);
	free(e);
}

static void twd_server_read(tw_pipe *pipe, tw_status_t st, const char *detail, void *arg)
{
	struct twd_echo *e = arg;
	struct twd_server *s = e->s;
	tw_tensor t;
	tw_message m;
	tw_status_t wst;

	if (st != TW_OK) {
		twd_finish(&s->done, "server tw_pipe_read", st, detail);
		if (e->b != s->buf)
			twd_free(e->b);
		free(e);
		return;
	}
	s->received++;
	if (!twd_cuda) /* a fault on the way back is applied to host bytes */
		twb_fault_apply(e->b, e->len);
	twd_tensor(&t, e->b, e->len);
	memset(&m, 0, sizeof(m));
	m.num_tensors = 1;
	m.tensors = &t;
	wst = tw_pipe_write(pipe, &m, twd_server_written, e);
	if (wst != TW_OK) {
		twd_finish(&s->done, "server tw_pipe_write", wst, tw_last_error());
		if (e->b != s->buf)
			twd_free(e->b);
		free(e);
		return;
	}
	twd_server_arm(s);
}

static void twd_server_descriptor(tw_pipe *pipe, tw_status_t st, const char *detail,
                                  const tw_message *desc, void *arg)
{
	struct twd_server *s = arg;
	struct twd_echo *e;
	tw_allocation alloc;
	tw_status_t rst;

	if (st != TW_OK) {
		/* the client hangs up after the last reply: that ends the run */
		twd_finish(&s->done, s->received == s->total ? NULL : "server tw_pipe_read_descriptor",
		           st, detail);
		return;
	}
	if (s->received == s->total || desc->num_tensors != 1 || desc->num_payloads != 0) {
		twd_finish(&s->done, "server: unexpected message", TW_ERR_PROTO,
		           "beyond the schedule, or not exactly one tensor");
		return;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		twb_die(1, "calloc: out of memory");
	e->s = s;
	e->len = desc->tensors[0].length;
	e->b = s->buf ? s->buf : twd_alloc(e->len, false);
	e->ta.data = e->b;
	e->ta.device = twd_device();
	memset(&alloc, 0, sizeof(alloc));
	alloc.num_tensors = 1;
	alloc.tensors = &e->ta;
	rst = tw_pipe_read(pipe, &alloc, twd_server_read, e);
	if (rst != TW_OK) {
		twd_finish(&s->done, "server tw_pipe_read", rst, tw_last_error());
		if (e->b != s->buf)
			twd_free(e->b);
		free(e);
	}
}

static void twd_server_arm(struct twd_server *s)
{
	tw_status_t st = tw_pipe_read_descriptor(s->pipe, twd_server_descriptor, s);
	if (st != TW_OK)
		twd_finish(&s->done, "server tw_pipe_read_descriptor", st, tw_last_error());
}

static void twd_server_accepted(tw_listener *l, tw_status_t st, const char *detail,
                                tw_pipe *pipe, void *arg)
{
	struct twd_server *s = arg;
	if (st != TW_OK) {
		twd_finish(&s->done, "server tw_listener_accept", st, detail);
		return;
	}
	s->pipe = pipe;
	twd_server_arm(s);
}

static int twd_server_run(const twb_args *a)
{
	struct twd_server s;
	char transport[32], url[256], bound[256];
	const char *urls[1] = {url};
	tw_listener *l;
	tw_context *ctx;

	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.done.mu, NULL);
	pthread_cond_init(&s.done.cv, NULL);
	s.a = a;
	s.total = twb_schedule_total(&a->sched);
	ctx = twd_context(a, transport, sizeof(transport));
	if (a->policy == TWB_POLICY_REUSED)
		s.buf = twd_alloc(twb_schedule_max(&a->sched), true);
	if (!strcmp(transport, "shm"))
		snprintf(url, sizeof(url), "shm://twb-tw-%d", (int)getpid());
	else
		snprintf(url, sizeof(url), "%s://%s:0", transport, a->bind_ip);
	twd_check(tw_context_listen(ctx, urls, 1, &l), "tw_context_listen");
	twd_check(tw_listener_accept(l, twd_server_accepted, &s), "tw_listener_accept");
	twd_check(tw_listener_url(l, NULL, bound, sizeof(bound)), "tw_listener_url");
	twb_ready(bound);
	twd_wait(&s.done);
	twd_close(ctx);
	if (s.buf)
		twd_free(s.buf);
	if (s.done.error[0])
		twb_die(1, "%s", s.done.error);
	return 0;
}

/* ---- client ------------------------------------------------------------------ */

struct twd_client {
	const twb_args *a;
	tw_pipe *pipe;
	twb_results res;
	twb_cursor cur;
	unsigned char *sbuf, *rbuf, *r;
	unsigned char *dsend, *dhost; /* CUDA: the device copy of sbuf; a host copy of r */
	size_t rlen;
	tw_tensor_allocation ta;
	uint64_t t0;
	atomic_int pending; /* write and read callbacks of this round */
	struct twd_done done;
};

static void twd_client_round(struct twd_client *c);

static void twd_client_part_done(struct twd_client *c)
{
	if (atomic_fetch_sub(&c->pending, 1) == 1) {
		twb_cursor_next(&c->cur, &c->a->sched);
		twd_client_round(c);
	}
}

static void twd_client_read(tw_pipe *pipe, tw_status_t st, const char *detail, void *arg)
{
	struct twd_client *c = arg;
	uint64_t t1 = twb_now_ns();
	if (st != TW_OK) {
		twd_finish(&c->done, "client tw_pipe_read", st, detail);
		return;
	}
	if (twd_cuda) {
		twd_copy(c->dhost, c->r, c->rlen, false);
		twb_record(&c->res, &c->cur, c->t0, t1, c->dhost, c->rlen);
	} else {
		twb_record(&c->res, &c->cur, c->t0, t1, c->r, c->rlen);
	}
	if (c->r != c->rbuf)
		twd_free(c->r);
	c->r = NULL;
	twd_client_part_done(c);
}

static void twd_client_descriptor(tw_pipe *pipe, tw_status_t st, const char *detail,
                                  const tw_message *desc, void *arg)
{
	struct twd_client *c = arg;
	tw_allocation alloc;
	tw_status_t rst;

	if (st != TW_OK) {
		twd_finish(&c->done, "client tw_pipe_read_descriptor", st, detail);
		return;
	}
	if (desc->num_tensors != 1 || desc->num_payloads != 0) {
		twd_finish(&c->done, "client: unexpected message", TW_ERR_PROTO,
		           "not exactly one tensor");
		return;
	}
	c->rlen = desc->tensors[0].length;
	c->r = c->rbuf ? c->rbuf : twd_alloc(c->rlen, false);
	c->ta.data = c->r;
	c->ta.device = twd_device();
	memset(&alloc, 0, sizeof(alloc));
	alloc.num_tensors = 1;
	alloc.tensors = &c->ta;
	rst = tw_pipe_read(pipe, &alloc, twd_client_read, c);
	if (rst != TW_OK)
		twd_finish(&c->done, "client tw_pipe_read", rst, tw_last_error());
}

static void twd_client_written(tw_pipe *pipe, tw_status_t st, const char *detail, void *arg)
{
	struct twd_client *c = arg;
	if (st != TW_OK) {
		twd_finish(&c->done, "client tw_pipe_write", st, detail);
		return;
	}
	twd_client_part_done(c);
}

static void twd_client_round(struct twd_client *c)
{
	const twb_schedule *s = &c->a->sched;
	uint64_t len;
	tw_tensor t;
	tw_message m;
	tw_status_t st;

	if (!twb_cursor_valid(&c->cur, s)) {
		twd_finish(&c->done, NULL, TW_OK, NULL);
		return;
	}
	len = s->sizes[c->cur.idx];
	twb_fill(c->sbuf, len, twb_seed(c->cur.idx, c->cur.iter));
	atomic_store(&c->pending, 2);
	st = tw_pipe_read_descriptor(c->pipe, twd_client_descriptor, c);
	if (st != TW_OK) {
		twd_finish(&c->done, "client tw_pipe_read_descriptor", st, tw_last_error());
		return;
	}
	if (twd_cuda)
		twd_copy(c->dsend, c->sbuf, len, true);
	twd_tensor(&t, twd_cuda ? c->dsend : c->sbuf, len);
	memset(&m, 0, sizeof(m));
	m.num_tensors = 1;
	m.tensors = &t;
	c->t0 = twb_now_ns();
	st = tw_pipe_write(c->pipe, &m, twd_client_written, c);
	if (st != TW_OK)
		twd_finish(&c->done, "client tw_pipe_write", st, tw_last_error());
}

static int twd_client_run(const twb_args *a)
{
	struct twd_client c;
	char transport[32], info[256];
	uint64_t max = twb_schedule_max(&a->sched);
	tw_context *ctx;

	memset(&c, 0, sizeof(c));
	pthread_mutex_init(&c.done.mu, NULL);
	pthread_cond_init(&c.done.cv, NULL);
	c.a = a;
	c.sbuf = twb_alloc_prefaulted(max);
	twb_results_init(&c.res, &a->sched);
	ctx = twd_context(a, transport, sizeof(transport));
	if (a->policy == TWB_POLICY_REUSED)
		c.rbuf = twd_alloc(max, true);
	if (twd_cuda) {
		c.dsend = twd_alloc(max, true);
		c.dhost = twb_alloc_prefaulted(max);
	}
	twd_check(tw_context_connect(ctx, a->addr, &c.pipe), "tw_context_connect");
	/* the first round runs on this thread; every later one on the loop thread */
	twd_client_round(&c);
	twd_wait(&c.done);
	tw_pipe_close(c.pipe);
	twd_close(ctx);
	if (c.done.error[0])
		twb_die(1, "%s", c.done.error);
	snprintf(info, sizeof(info), "tensorwire %s, one %s tensor per message%s, callback-chained; "
	         "t1 in the client's read callback", a->system, twd_cuda ? "cuda:0" : "CPU",
	         twd_target ? " naming its target device (no DescriptorReply)" : "");
	twb_results_write(&c.res, a, info);
	twb_results_free(&c.res);
	free(c.sbuf);
	if (c.rbuf)
		twd_free(c.rbuf);
	if (twd_cuda) {
		twd_free(c.dsend);
		free(c.dhost);
	}
	return 0;
}

int main(int argc, char **argv)
{
	twb_args a;
	twb_args_parse(argc, argv, &a);
	if (a.role == TWB_ROLE_SERVER)
		return twd_server_run(&a);
	return twd_client_run(&a);
}
