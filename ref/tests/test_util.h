/*
 * test_util.h - helpers shared by the reference library's integration
 * tests: checks that print where they failed, a watchdog, a waiter for
 * callbacks that run on loop threads, and deterministic pseudo-random data
 * with checksums (xxHash) so the receiver can verify bytes without holding a
 * second copy. Header-only; tests only.
 */
#ifndef TW_TESTS_TEST_UTIL_H
#define TW_TESTS_TEST_UTIL_H

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "tensorwire/tensorwire.h"

#define CHECK(cond)                                                                      \
	do {                                                                             \
		if (!(cond)) {                                                           \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
			fflush(stderr);                                                  \
			abort();                                                         \
		}                                                                        \
	} while (0)

#define CHECK_OK(expr)                                                                   \
	do {                                                                             \
		tw_status_t st_ = (expr);                                                \
		if (st_ != TW_OK) {                                                      \
			fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__,  \
			        #expr, tw_status_name(st_), tw_last_error());            \
			fflush(stderr);                                                  \
			abort();                                                         \
		}                                                                        \
	} while (0)

#define CHECK_STATUS(got, want)                                                          \
	do {                                                                             \
		tw_status_t g_ = (got), w_ = (want);                                     \
		if (g_ != w_) {                                                          \
			fprintf(stderr, "%s:%d: got %s, want %s\n", __FILE__, __LINE__,      \
			        tw_status_name(g_), tw_status_name(w_));                  \
			fflush(stderr);                                                  \
			abort();                                                         \
		}                                                                        \
	} while (0)

static inline void tu_on_alarm(int sig)
{
	static const char msg[] = "watchdog: test hung, aborting\n";
	(void)sig;
	(void)!write(2, msg, sizeof(msg) - 1);
	abort();
}

/* Aborts the process if it runs longer than `seconds`. */
static inline void tu_watchdog(unsigned seconds)
{
	signal(SIGALRM, tu_on_alarm);
	alarm(seconds);
}

/* A counter that loop-thread callbacks bump and the test thread waits on. */
typedef struct tu_waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	long count;
} tu_waiter;

/* Milliseconds of CLOCK_MONOTONIC: comparable between processes. */
static inline uint64_t tu_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void tu_waiter_init(tu_waiter *w)
{
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->count = 0;
}

static inline void tu_waiter_destroy(tu_waiter *w)
{
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
}

static inline void tu_signal(tu_waiter *w)
{
	pthread_mutex_lock(&w->mu);
	w->count++;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static inline long tu_count(tu_waiter *w)
{
	pthread_mutex_lock(&w->mu);
	long c = w->count;
	pthread_mutex_unlock(&w->mu);
	return c;
}

/* Waits until count >= n (the watchdog catches a hang). */
static inline void tu_wait(tu_waiter *w, long n)
{
	pthread_mutex_lock(&w->mu);
	while (w->count < n)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

/* Waits up to ms milliseconds; true if count >= n. */
static inline bool tu_wait_for(tu_waiter *w, long n, long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&w->mu);
	while (w->count < n)
		if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) != 0)
			break;
	bool ok = w->count >= n;
	pthread_mutex_unlock(&w->mu);
	return ok;
}

/* Records what a listener's error observer hears (tw_listener_on_error with
 * tu_on_listener_error and the recorder as arg), for the test thread to
 * check one report after the other. */
enum { TU_REPORTS_MAX = 64 };
typedef struct tu_reports {
	tu_waiter w; /* count: reports heard */
	tw_status_t status[TU_REPORTS_MAX];
	char detail[TU_REPORTS_MAX][512];
	long seen;   /* test thread: reports checked so far */
} tu_reports;

static inline void tu_reports_init(tu_reports *r)
{
	memset(r, 0, sizeof(*r));
	tu_waiter_init(&r->w);
}

static inline void tu_reports_destroy(tu_reports *r)
{
	tu_waiter_destroy(&r->w);
}

static inline void tu_on_listener_error(tw_listener *l, tw_status_t st, const char *detail,
                                        void *arg)
{
	tu_reports *r = arg;
	pthread_mutex_lock(&r->w.mu);
	if (r->w.count < TU_REPORTS_MAX) {
		r->status[r->w.count] = st;
		snprintf(r->detail[r->w.count], sizeof(r->detail[0]), "%s", detail);
	}
	r->w.count++;
	pthread_cond_broadcast(&r->w.cv);
	pthread_mutex_unlock(&r->w.mu);
}

/* Waits up to `ms` for the next report and checks its status and detail. */
static inline void tu_expect_report(tu_reports *r, tw_status_t want, const char *substr, long ms)
{
	CHECK(tu_wait_for(&r->w, r->seen + 1, ms));
	CHECK(r->seen < TU_REPORTS_MAX);
	pthread_mutex_lock(&r->w.mu);
	tw_status_t st = r->status[r->seen];
	char detail[512];
	snprintf(detail, sizeof(detail), "%s", r->detail[r->seen]);
	pthread_mutex_unlock(&r->w.mu);
	r->seen++;
	printf("   listener reported %s: %s\n", tw_status_name(st), detail);
	CHECK_STATUS(st, want);
	if (!strstr(detail, substr)) {
		fprintf(stderr, "detail '%s' lacks '%s'\n", detail, substr);
		abort();
	}
}

/* Nothing more is reported within `ms`: each bad connection cost exactly
 * the reports checked. */
static inline void tu_expect_no_report(tu_reports *r, long ms)
{
	CHECK(!tu_wait_for(&r->w, r->seen + 1, ms));
}

/* Deterministic bytes: xorshift64* over 8-byte words, seeded per buffer. */
static inline uint64_t tu_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

/* tu_fill_at's bytes in pieces: each call continues where the last ended
 * (every piece but the last a multiple of 8 bytes). */
typedef struct tu_filler {
	uint64_t s;
} tu_filler;

static inline tu_filler tu_filler_start(uint64_t seed)
{
	tu_filler f = { seed * 0x9E3779B97F4A7C15ULL + 1 };
	return f;
}

static inline void tu_filler_next(tu_filler *f, uint8_t *buf, size_t len)
{
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v = tu_next(&f->s);
		memcpy(buf + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = tu_next(&f->s);
		memcpy(buf + i, &v, len - i);
	}
}

static inline void tu_fill_at(uint8_t *buf, size_t len, uint64_t seed)
{
	tu_filler f = tu_filler_start(seed);
	tu_filler_next(&f, buf, len);
}

/* Checksum of what tu_fill_at(len, seed) produces, without a buffer of len. */
static inline uint64_t tu_expected_hash(size_t len, uint64_t seed)
{
	XXH3_state_t *st = XXH3_createState();
	XXH3_64bits_reset(st);
	tu_filler f = tu_filler_start(seed);
	uint8_t chunk[1 << 16];
	for (size_t done = 0; done < len;) {
		size_t n = len - done < sizeof(chunk) ? len - done : sizeof(chunk);
		tu_filler_next(&f, chunk, n);
		XXH3_64bits_update(st, chunk, n);
		done += n;
	}
	uint64_t h = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return h;
}

static inline uint64_t tu_hash(const void *buf, size_t len)
{
	return XXH3_64bits(buf, len);
}

/* Hands a URL to a forked peer over a pipe: the parent writes it with its
 * NUL and closes; the child reads it whole (closing the write end first). */
static inline void tu_url_send(int fds[2], const char *url)
{
	CHECK(write(fds[1], url, strlen(url) + 1) == (ssize_t)(strlen(url) + 1));
	close(fds[1]);
}

static inline void tu_url_recv(int fds[2], char *url, size_t len)
{
	close(fds[1]);
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fds[0], url + got, len - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	CHECK(got > 0 && got < len && url[got - 1] == '\0');
}

/* Forks a peer that first learns a URL from the parent (tu_url_send on fds,
 * which this opens). Returns the child's pid in the parent and 0 in the
 * child, which has the URL in url by then. Fork before any context (and its
 * thread) exists. */
static inline pid_t tu_fork_url_child(int fds[2], char *url, size_t len)
{
	CHECK(pipe(fds) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		tu_url_recv(fds, url, len);
	return pid;
}

/* ---- the battery's axis: which transport and channel ---------------------------------- */

/* A test written once runs on every transport x channel combination the
 * build lists (CMake's tw_battery, TW_REF_COMBOS, nng's NUTS pattern): CTest
 * passes the combination as TW_TEST_COMBO="<transport>[@<options>]+<channel>"
 * (options: the transport's, e.g. uv@busy_poll_us=20000+basic) and the
 * test asks here instead of naming "uv" or "basic". Without the variable:
 * uv+basic. */
typedef struct tu_combo {
	char transport[32];
	char channel[32];
	char listen_url[64]; /* a URL to listen on that lets the system pick */
	char options[64];    /* "<transport>@<options>+<channel>": the transport's options */
} tu_combo;

static inline const tu_combo *tu_combo_get(void)
{
	static tu_combo c;
	if (c.transport[0])
		return &c;
	const char *env = getenv("TW_TEST_COMBO");
	const char *spec = env && *env ? env : "uv+basic";
	const char *plus = strchr(spec, '+');
	if (!plus || plus == spec || !plus[1] || (size_t)(plus - spec) >= sizeof(c.transport) ||
	    strlen(plus + 1) >= sizeof(c.channel)) {
		fprintf(stderr, "TW_TEST_COMBO='%s': expected <transport>+<channel>\n", spec);
		abort();
	}
	memcpy(c.transport, spec, (size_t)(plus - spec));
	snprintf(c.channel, sizeof(c.channel), "%s", plus + 1);
	char *at = strchr(c.transport, '@');
	if (at) {
		snprintf(c.options, sizeof(c.options), "%s", at + 1);
		*at = '\0';
	}
	/* One listening URL per transport: the only transport-specific fact a
	 * battery needs. */
	if (!strcmp(c.transport, "uv") || !strcmp(c.transport, "ibv"))
		snprintf(c.listen_url, sizeof(c.listen_url), "%s://127.0.0.1:0", c.transport);
	else if (!strcmp(c.transport, "shm"))
		snprintf(c.listen_url, sizeof(c.listen_url), "shm://");
	else {
		fprintf(stderr, "TW_TEST_COMBO='%s': no listening URL known for transport '%s' "
		                "(add it to tu_combo_get)\n", spec, c.transport);
		abort();
	}
	return &c;
}

/* Registers the combination's transport and channel on ctx. */
static inline void tu_register_combo(tw_context *ctx)
{
	const tu_combo *c = tu_combo_get();
	CHECK_OK(tw_context_register_transport(ctx, c->transport, NULL, 0,
	                                       c->options[0] ? c->options : NULL));
	CHECK_OK(tw_context_register_channel(ctx, c->channel, NULL, 0, NULL));
}

/* The cases of a test program, run one per process: `prog <case>`. */
typedef struct tu_case {
	const char *name;
	void (*fn)(void);
} tu_case;

/* Runs the case named by argv[1] under a watchdog of `watchdog_s`; 2 for a
 * bad command line or an unknown case. */
static inline int tu_main(int argc, char **argv, const tu_case *cases, size_t num_cases,
                          unsigned watchdog_s)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <case>\n", argv[0]);
		return 2;
	}
	tu_watchdog(watchdog_s);
	for (size_t i = 0; i < num_cases; i++) {
		if (strcmp(argv[1], cases[i].name) == 0) {
			printf("# %s\n", cases[i].name);
			cases[i].fn();
			printf("ok - %s\n", cases[i].name);
			return 0;
		}
	}
	fprintf(stderr, "unknown case '%s'\n", argv[1]);
	return 2;
}

#endif /* TW_TESTS_TEST_UTIL_H */
