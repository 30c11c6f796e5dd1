/*
 * config.c - parses TWFAULT into a twf_config (see config.h). Hand-written
 * number parsing: locale-free, no floating point, exact limits.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Decimal digits [s, e) with an optional k/m/g suffix (powers of 1024). */
static int parse_size(const char *s, const char *e, uint64_t *out)
{
	uint64_t v = 0, mul = 1;
	if (s == e)
		return -1;
	char last = e[-1];
	if (last == 'k' || last == 'K')
		mul = UINT64_C(1) << 10;
	else if (last == 'm' || last == 'M')
		mul = UINT64_C(1) << 20;
	else if (last == 'g' || last == 'G')
		mul = UINT64_C(1) << 30;
	if (mul != 1)
		e--;
	if (s == e)
		return -1;
	for (const char *p = s; p < e; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		uint64_t d = (uint64_t)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	if (v > UINT64_MAX / mul)
		return -1;
	*out = v * mul;
	return 0;
}

/* "0.05", ".5", "1", "5%", "0.5%" -> parts per million (rounded down). */
static int parse_prob(const char *s, const char *e, uint32_t *out)
{
	bool pct = false;
	if (s < e && e[-1] == '%') {
		pct = true;
		e--;
	}
	if (s == e)
		return -1;
	uint64_t whole = 0, frac = 0, scale = 1;
	const char *p = s;
	for (; p < e && *p != '.'; p++) {
		if (*p < '0' || *p > '9' || whole > 1000)
			return -1;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (p < e) { /* the '.' */
		p++;
		if (p == e && p - 1 == s)
			return -1;
		for (; p < e; p++) {
			if (*p < '0' || *p > '9')
				return -1;
			if (scale < UINT64_C(100000000)) { /* keep 8 decimals, drop the rest */
				frac = frac * 10 + (uint64_t)(*p - '0');
				scale *= 10;
			}
		}
	}
	/* value = whole + frac/scale, times 10^6 (or 10^4 for a percentage) */
	uint64_t unit = pct ? 10000 : TWF_PPM;
	uint64_t ppm = whole * unit + frac * unit / scale;
	if (ppm > TWF_PPM)
		return -1;
	*out = (uint32_t)ppm;
	return 0;
}

static bool key_is(const char *k, size_t kl, const char *name)
{
	return strlen(name) == kl && memcmp(k, name, kl) == 0;
}

static int parse_bool(const char *s, const char *e, bool *out)
{
	if (e - s == 1 && (*s == '0' || *s == '1')) {
		*out = *s == '1';
		return 0;
	}
	return -1;
}

int twf_config_parse(const char *spec, twf_config *out, char *err, size_t errlen)
{
	twf_config c;
	memset(&c, 0, sizeof(c));
	c.seed = 1;
	const char *p = spec ? spec : "";
	while (*p) {
		const char *end = strchr(p, ',');
		if (!end)
			end = p + strlen(p);
		const char *eq = memchr(p, '=', (size_t)(end - p));
		size_t kl = (size_t)((eq ? eq : end) - p);
		const char *v = eq ? eq + 1 : end;
		int bad = 0;
		if (kl == 0 && end == p) {
			/* empty item (",,"): ignore */
		} else if (!eq) {
			if (key_is(p, kl, "off"))
				memset(&c, 0, sizeof(c)), c.seed = 1;
			else
				return fail(err, errlen, "TWFAULT: item '%.*s' has no '=' (want key=value)",
				            (int)kl, p);
		} else if (key_is(p, kl, "seed")) {
			bad = parse_size(v, end, &c.seed);
		} else if (key_is(p, kl, "fds")) {
			size_t vl = (size_t)(end - v);
			if (vl == 7 && !memcmp(v, "sockets", 7))
				c.fds = TWF_FDS_SOCKETS;
			else if (vl == 3 && !memcmp(v, "tcp", 3))
				c.fds = TWF_FDS_TCP;
			else if (vl == 4 && !memcmp(v, "unix", 4))
				c.fds = TWF_FDS_UNIX;
			else
				bad = 1;
		} else if (key_is(p, kl, "short")) {
			const char *dash = memchr(v, '-', (size_t)(end - v));
			if (dash) {
				bad = parse_size(v, dash, &c.short_min) || parse_size(dash + 1, end, &c.short_max) ||
				      c.short_min == 0 || c.short_min > c.short_max;
			} else {
				bad = parse_size(v, end, &c.short_max);
				c.short_min = c.short_max;
			}
		} else if (key_is(p, kl, "eintr")) {
			bad = parse_prob(v, end, &c.eintr_ppm);
		} else if (key_is(p, kl, "eagain")) {
			bad = parse_prob(v, end, &c.eagain_ppm);
		} else if (key_is(p, kl, "reset")) {
			const char *colon = memchr(v, ':', (size_t)(end - v));
			uint64_t conn = 0;
			if (colon) {
				bad = parse_size(v, colon, &conn) || conn > UINT32_MAX ||
				      parse_size(colon + 1, end, &c.reset_bytes);
			} else {
				bad = parse_size(v, end, &c.reset_bytes);
			}
			c.reset_conn = (uint32_t)conn;
			c.reset_on = !bad;
		} else if (key_is(p, kl, "emfile")) {
			const char *colon = memchr(v, ':', (size_t)(end - v));
			c.emfile_count = 1;
			if (colon)
				bad = parse_size(v, colon, &c.emfile_at) ||
				      parse_size(colon + 1, end, &c.emfile_count) || c.emfile_count == 0;
			else
				bad = parse_size(v, end, &c.emfile_at);
		} else if (key_is(p, kl, "ctrunc")) {
			if (end - v == 3 && !memcmp(v, "all", 3))
				c.ctrunc_all = true;
			else
				bad = parse_size(v, end, &c.ctrunc_at);
		} else if (key_is(p, kl, "failcall")) {
			bad = parse_size(v, end, &c.failcall_at);
		} else if (key_is(p, kl, "report")) {
			size_t vl = (size_t)(end - v);
			if (vl == 0 || vl >= sizeof(c.report))
				bad = 1;
			else
				memcpy(c.report, v, vl), c.report[vl] = '\0';
		} else if (key_is(p, kl, "summary")) {
			bad = parse_bool(v, end, &c.summary);
		} else if (key_is(p, kl, "verbose")) {
			bad = parse_bool(v, end, &c.verbose);
		} else {
			return fail(err, errlen,
			            "TWFAULT: unknown key '%.*s' (keys: seed fds short eintr eagain reset "
			            "emfile ctrunc failcall report summary verbose)",
			            (int)kl, p);
		}
		if (bad)
			return fail(err, errlen, "TWFAULT: bad value in '%.*s'", (int)(end - p), p);
		p = *end ? end + 1 : end;
	}
	*out = c;
	return 0;
}
