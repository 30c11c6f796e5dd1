/*
 * spin_test.c - busy polling (transport option busy_poll_us), stamped per
 * transport+channel: what a user sees of it is the CPU the process burns.
 *
 * Case cpu_after_work: the combination's transport and channel, twice: with
 * the transport's defaults (the combination's own options are left out:
 * they are the battery's business), then with busy_poll_us=300000. A
 * message goes from client to server; then the process's CPU time (every
 * thread: the loop threads, shm's reactor, simverbs' progress thread) is
 * sampled over 100 ms windows: while idle before it, just after it and,
 * with the long bound, once it has passed. With the long bound the window
 * after the message must show a polling thread (at least 40 ms of CPU),
 * the others must be quiet (at most 25 ms). With the defaults all must be
 * quiet: the default bound (shm and ibv poll for 1 ms after activity,
 * where stock polls all the time; uv does not) costs no more than that.
 */
#include <sys/resource.h>

#include "pair_util.h"

#define ST_BOUND_US 300000
#define ST_WINDOW_US 100000

static int64_t st_cpu_us(void)
{
	struct rusage ru;
	CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
	       ru.ru_stime.tv_usec;
}

/* CPU time of the process over the next window, in ms. */
static int64_t st_window_ms(void)
{
	int64_t a = st_cpu_us();
	usleep(ST_WINDOW_US);
	return (st_cpu_us() - a) / 1000;
}

static void st_ctx(tw_context **ctx, const char *name, const char *options)
{
	const tu_combo *c = tu_combo_get();
	CHECK_OK(tw_context_create(name, ctx));
	CHECK_OK(tw_context_register_transport(*ctx, c->transport, NULL, 0, options));
	CHECK_OK(tw_context_register_channel(*ctx, c->channel, NULL, 0, NULL));
}

static void st_message(tu_pair *p, uint64_t seed)
{
	uint8_t data[1250], got[1250];
	tu_fill_at(data, sizeof(data), seed);
	tw_tensor t = { data, sizeof(data), tw_device_cpu(), true, tw_device_cpu(), NULL, 0, NULL };
	tw_tensor_allocation ta = { got, tw_device_cpu(), NULL };
	tu_rec w, d, r;
	tu_move_tensor(p->c, p->s, &t, &ta, &w, &d, &r);
	tu_expect(&w, TW_OK, NULL);
	tu_expect(&r, TW_OK, NULL);
	tu_once(&w), tu_once(&d), tu_once(&r);
	CHECK(memcmp(got, data, sizeof(got)) == 0);
}

/* One pair with these transport options (NULL: the defaults); spin: they
 * ask for the long bound. */
static void st_measure(const char *options, bool spin)
{
	const tu_combo *c = tu_combo_get();
	uint64_t settle_us = spin ? ST_BOUND_US + 200000 : 200000;
	tu_pair p = { 0 };
	st_ctx(&p.sctx, "server", options);
	st_ctx(&p.cctx, "client", options);
	tu_pair_open(&p, NULL);
	st_message(&p, 1); /* every connection is up */
	usleep((useconds_t)settle_us);
	int64_t before = st_window_ms();
	st_message(&p, 2);
	int64_t after = st_window_ms();
	CHECK(before <= 25);
	if (spin) {
		usleep(ST_BOUND_US + 200000);
		int64_t later = st_window_ms();
		printf("# %s busy_poll_us=%d: CPU ms in 100 ms windows: %lld idle before a message, "
		       "%lld just after it, %lld once the bound has passed\n",
		       c->transport, ST_BOUND_US, (long long)before, (long long)after, (long long)later);
		CHECK(after >= 40);
		CHECK(later <= 25);
	} else {
		printf("# %s, the transport's defaults: CPU ms in 100 ms windows: %lld idle before a "
		       "message, %lld just after it\n",
		       c->transport, (long long)before, (long long)after);
		CHECK(after <= 25);
	}
	tu_pair_close(&p);
}

static void case_cpu_after_work(void)
{
	char opts[64];
	snprintf(opts, sizeof(opts), "busy_poll_us=%d", ST_BOUND_US);
	st_measure(NULL, false);
	st_measure(opts, true);
	printf("ok - cpu_after_work\n");
}

static const tu_case cases[] = {
	{ "cpu_after_work", case_cpu_after_work },
};

int main(int argc, char **argv)
{
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 120);
}
