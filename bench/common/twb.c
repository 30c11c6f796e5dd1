/*
 * twb.c - the shared part of the bench drivers (see twb.h): command line,
 * pattern, clock, buffers and the result file. It must not time anything
 * itself; drivers take t0 and t1 where their messages start and finish.
 */
#include "twb.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *twb__prog = "twb";

void twb_die(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", twb__prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

void twb_die_errno(const char *what)
{
	twb_die(1, "%s: %s", what, strerror(errno));
}

static size_t twb__parse_list(const char *s, uint64_t *out, size_t max, const char *what)
{
	size_t n = 0;
	const char *p = s;
	while (*p) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(p, &end, 10);
		if (end == p || errno)
			twb_die(2, "bad number in --%s: '%s'", what, s);
		if (n == max)
			twb_die(2, "too many entries in --%s (max %zu)", what, max);
		out[n++] = v;
		p = end;
		if (*p == ',')
			p++;
		else if (*p)
			twb_die(2, "bad separator in --%s: '%s'", what, s);
	}
	return n;
}

void twb_args_parse(int argc, char **argv, twb_args *args_out)
{
	static const struct option opts[] = {
		{"system", required_argument, NULL, 's'},
		{"role", required_argument, NULL, 'r'},
		{"policy", required_argument, NULL, 'p'},
		{"addr", required_argument, NULL, 'a'},
		{"bind", required_argument, NULL, 'b'},
		{"out", required_argument, NULL, 'o'},
		{"sizes", required_argument, NULL, 'S'},
		{"iters", required_argument, NULL, 'I'},
		{"warmup", required_argument, NULL, 'W'},
		{NULL, 0, NULL, 0},
	};
	twb_args a;
	uint64_t tmp[TWB_MAX_SIZES];
	size_t n_iters = 0, n_warm = 0;
	int c;

	memset(&a, 0, sizeof(a));
	a.bind_ip = "127.0.0.1";
	a.role = TWB_ROLE_CLIENT;
	if (argc > 0 && argv[0]) {
		const char *slash = strrchr(argv[0], '/');
		twb__prog = slash ? slash + 1 : argv[0];
	}
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': a.system = optarg; break;
		case 'r':
			if (!strcmp(optarg, "server")) a.role = TWB_ROLE_SERVER;
			else if (!strcmp(optarg, "client")) a.role = TWB_ROLE_CLIENT;
			else if (!strcmp(optarg, "solo")) a.role = TWB_ROLE_SOLO;
			else twb_die(2, "--role must be server, client or solo");
			break;
		case 'p':
			if (!strcmp(optarg, "reused")) a.policy = TWB_POLICY_REUSED;
			else if (!strcmp(optarg, "fresh")) a.policy = TWB_POLICY_FRESH;
			else twb_die(2, "--policy must be reused or fresh");
			break;
		case 'a': a.addr = optarg; break;
		case 'b': a.bind_ip = optarg; break;
		case 'o': a.out = optarg; break;
		case 'S': a.sched.count = twb__parse_list(optarg, a.sched.sizes, TWB_MAX_SIZES, "sizes"); break;
		case 'I':
			n_iters = twb__parse_list(optarg, tmp, TWB_MAX_SIZES, "iters");
			for (size_t i = 0; i < n_iters; i++)
				a.sched.iters[i] = (uint32_t)tmp[i];
			break;
		case 'W':
			n_warm = twb__parse_list(optarg, tmp, TWB_MAX_SIZES, "warmup");
			for (size_t i = 0; i < n_warm; i++)
				a.sched.warmup[i] = (uint32_t)tmp[i];
			break;
		default:
			twb_die(2, "usage: %s --system S --role server|client|solo --policy reused|fresh "
			        "--sizes N,.. --iters N,.. --warmup N,.. [--addr A] [--bind IP] [--out F]",
			        twb__prog);
		}
	}
	if (!a.system)
		twb_die(2, "--system is required");
	if (a.sched.count == 0 || n_iters != a.sched.count || n_warm != a.sched.count)
		twb_die(2, "--sizes, --iters and --warmup need the same number of entries");
	for (size_t i = 0; i < a.sched.count; i++)
		if (a.sched.iters[i] == 0)
			twb_die(2, "--iters entries must be > 0");
	if (a.role == TWB_ROLE_CLIENT && !a.addr)
		twb_die(2, "a client needs --addr");
	if (a.role != TWB_ROLE_SERVER && !a.out)
		twb_die(2, "a client needs --out");
	*args_out = a;
}

uint64_t twb_schedule_total(const twb_schedule *sched)
{
	uint64_t t = 0;
	for (size_t i = 0; i < sched->count; i++)
		t += (uint64_t)sched->iters[i] + sched->warmup[i];
	return t;
}

uint64_t twb_schedule_max(const twb_schedule *sched)
{
	uint64_t m = 0;
	for (size_t i = 0; i < sched->count; i++)
		if (sched->sizes[i] > m)
			m = sched->sizes[i];
	return m;
}

uint64_t twb_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t twb__mix(uint64_t x)
{
	/* splitmix64 finaliser: spreads (size, iteration) over all 64 bits */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t twb_seed(size_t idx, uint64_t iter)
{
	return twb__mix(((uint64_t)idx << 40) ^ iter);
}

/* Word k of the pattern is seed ^ (k+1) * odd constant: every word differs
 * from its neighbours, from the same offset of another message, and from an
 * all-zero (never written) page. Cheap enough to run at memory speed. */
#define TWB__STEP 0xd1342543de82ef95ull

void twb_fill(void *buf, uint64_t len, uint64_t seed)
{
	unsigned char *p = buf;
	uint64_t words = len / 8, acc = 0;
	for (uint64_t k = 0; k < words; k++) {
		acc += TWB__STEP;
		uint64_t w = acc ^ seed;
		memcpy(p + k * 8, &w, 8);
	}
	if (len % 8) {
		acc += TWB__STEP;
		uint64_t w = acc ^ seed;
		memcpy(p + words * 8, &w, len % 8);
	}
}

static uint64_t twb__diff_bytes(uint64_t x, unsigned n)
{
	uint64_t bad = 0;
	for (unsigned b = 0; b < n; b++)
		bad += ((x >> (8 * b)) & 0xff) != 0;
	return bad;
}

uint64_t twb_verify(const void *buf, uint64_t len, uint64_t seed)
{
	const unsigned char *p = buf;
	uint64_t words = len / 8, acc = 0, bad = 0;
	for (uint64_t k = 0; k < words; k++) {
		uint64_t w;
		acc += TWB__STEP;
		memcpy(&w, p + k * 8, 8);
		if (__builtin_expect(w != (acc ^ seed), 0))
			bad += twb__diff_bytes(w ^ acc ^ seed, 8);
	}
	if (len % 8) {
		uint64_t w = 0, want;
		acc += TWB__STEP;
		want = acc ^ seed;
		memcpy(&w, p + words * 8, len % 8);
		bad += twb__diff_bytes(w ^ want, (unsigned)(len % 8));
	}
	return bad;
}

void *twb_alloc_fresh(uint64_t len)
{
	void *p = malloc(len ? len : 1);
	if (!p)
		twb_die(1, "malloc(%llu): out of memory", (unsigned long long)len);
	return p;
}

void *twb_alloc_prefaulted(uint64_t len)
{
	void *p = twb_alloc_fresh(len);
	memset(p, 0xa5, len ? len : 1);
	return p;
}

void twb_fault_apply(void *buf, uint64_t len)
{
	static int on = -1;
	if (on < 0) {
		const char *e = getenv("TWB_FAULT_FLIP");
		on = e && *e && strcmp(e, "0") != 0;
	}
	if (on && len > 0)
		((unsigned char *)buf)[len / 2] ^= 0x5a;
}

const char *twb_build_sanitizer(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return "address";
#elif defined(__SANITIZE_THREAD__)
	return "thread";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
	return "address";
#elif __has_feature(thread_sanitizer)
	return "thread";
#else
	return "";
#endif
#else
	return "";
#endif
}

void twb_ready(const char *addr)
{
	printf("READY %s\n", addr);
	fflush(stdout);
}

void twb_results_init(twb_results *res, const twb_schedule *sched)
{
	memset(res, 0, sizeof(*res));
	res->sched = sched;
	for (size_t i = 0; i < sched->count; i++) {
		res->rtt_ns[i] = calloc(sched->iters[i], sizeof(uint64_t));
		if (!res->rtt_ns[i])
			twb_die(1, "calloc: out of memory");
	}
}

void twb_results_free(twb_results *res)
{
	for (size_t i = 0; i < TWB_MAX_SIZES; i++)
		free(res->rtt_ns[i]);
	memset(res, 0, sizeof(*res));
}

void twb_results_write(const twb_results *res, const twb_args *args, const char *info)
{
	json_t *root = json_object(), *arr = json_array();
	const twb_schedule *s = res->sched;
	char tmp[4096];

	json_object_set_new(root, "system", json_string(args->system));
	json_object_set_new(root, "policy",
	                    json_string(args->policy == TWB_POLICY_FRESH ? "fresh" : "reused"));
	json_object_set_new(root, "info", json_string(info ? info : ""));
	json_object_set_new(root, "sanitizer", json_string(twb_build_sanitizer()));
	json_object_set_new(root, "samples", json_string(res->one_way ? "one_way_ns" : "rtt_ns"));
	for (size_t i = 0; i < s->count; i++) {
		json_t *r = json_object(), *samples = json_array();
		for (uint32_t k = 0; k < s->iters[i]; k++)
			json_array_append_new(samples, json_integer((json_int_t)res->rtt_ns[i][k]));
		json_object_set_new(r, "size", json_integer((json_int_t)s->sizes[i]));
		json_object_set_new(r, "iters", json_integer(s->iters[i]));
		json_object_set_new(r, "warmup", json_integer(s->warmup[i]));
		json_object_set_new(r, "messages_checked", json_integer((json_int_t)res->messages[i]));
		json_object_set_new(r, "wrong_bytes", json_integer((json_int_t)res->wrong_bytes[i]));
		json_object_set_new(r, "rtt_ns", samples);
		json_array_append_new(arr, r);
	}
	json_object_set_new(root, "results", arr);
	snprintf(tmp, sizeof(tmp), "%s.tmp", args->out);
	if (json_dump_file(root, tmp, JSON_COMPACT) != 0)
		twb_die(1, "json_dump_file %s: failed", tmp);
	json_decref(root);
	if (rename(tmp, args->out) != 0)
		twb_die_errno("rename result file");
}

bool twb_cursor_valid(const twb_cursor *c, const twb_schedule *sched)
{
	return c->idx < sched->count;
}

bool twb_cursor_timed(const twb_cursor *c, const twb_schedule *sched)
{
	return c->iter >= sched->warmup[c->idx];
}

void twb_cursor_next(twb_cursor *c, const twb_schedule *sched)
{
	c->iter++;
	if (c->iter >= (uint64_t)sched->warmup[c->idx] + sched->iters[c->idx]) {
		c->idx++;
		c->iter = 0;
	}
}

void twb_record(twb_results *res, const twb_cursor *c, uint64_t t0, uint64_t t1,
                const void *buf, uint64_t len)
{
	const twb_schedule *s = res->sched;
	uint64_t want = s->sizes[c->idx];
	uint64_t common = len < want ? len : want;
	uint64_t bad = twb_verify(buf, common, twb_seed(c->idx, c->iter));
	bad += (len > want ? len - want : want - len); /* missing or extra bytes */
	res->wrong_bytes[c->idx] += bad;
	res->messages[c->idx]++;
	if (twb_cursor_timed(c, s))
		res->rtt_ns[c->idx][c->iter - s->warmup[c->idx]] = t1 - t0;
}

int twb_write_full(int fd, const void *buf, uint64_t len)
{
	const char *p = buf;
	while (len > 0) {
		size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t n = write(fd, p, chunk);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (uint64_t)n;
	}
	return 0;
}

int twb_read_full(int fd, void *buf, uint64_t len)
{
	char *p = buf;
	while (len > 0) {
		size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t n = read(fd, p, chunk);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0)
			return 1;
		p += n;
		len -= (uint64_t)n;
	}
	return 0;
}
