/*
 * options.c - "key=value,..." option strings (see options.h).
 */
#include "platform/options.h"

#include <stdio.h>
#include <string.h>

#include "platform/error.h"

/* Parses a u64 with an optional k/m/g/t suffix; false if malformed or it
 * overflows. */
static bool tw__opt_u64(const char *s, size_t n, uint64_t *out)
{
	if (n == 0)
		return false;
	uint64_t v = 0;
	size_t i = 0;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (i == 0)
		return false;
	if (i < n) {
		if (i + 1 != n)
			return false;
		unsigned shift;
		switch (s[i]) {
		case 'k': case 'K': shift = 10; break;
		case 'm': case 'M': shift = 20; break;
		case 'g': case 'G': shift = 30; break;
		case 't': case 'T': shift = 40; break;
		default: return false;
		}
		if (v > (UINT64_MAX >> shift))
			return false;
		v <<= shift;
	}
	*out = v;
	return true;
}

static bool tw__opt_bool(const char *s, size_t n, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes" }, *const no[] = { "0", "false", "no" };
	for (size_t i = 0; i < 3; i++) {
		if (strlen(yes[i]) == n && memcmp(s, yes[i], n) == 0)
			return (*out = true), true;
		if (strlen(no[i]) == n && memcmp(s, no[i], n) == 0)
			return (*out = false), true;
	}
	return false;
}

/* Lists the table's keys into buf for a detail ("a, b, c" or "none"). */
static void tw__opt_keys(const tw_option *table, size_t n, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && at + 1 < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", table[i].key);
	if (n == 0)
		snprintf(buf, len, "none");
}

tw_status_t tw__options_parse(const char *who, const char *options, const tw_option *table,
                              size_t num_options, void *dest, char *rest, size_t rest_len,
                              char *detail, size_t detail_len)
{
	size_t rest_at = 0;
	if (rest && rest_len)
		rest[0] = '\0';
	const char *p = options ? options : "";
	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		size_t klen = eq ? (size_t)(eq - p) : len;
		const tw_option *o = NULL;
		for (size_t i = 0; i < num_options && eq; i++)
			if (strlen(table[i].key) == klen && memcmp(table[i].key, p, klen) == 0)
				o = &table[i];
		if (len == 0) {
			/* an empty item (",,") is nothing */
		} else if (!o && eq && klen > 0 && rest) {
			if (rest_at + len + 2 > rest_len) {
				tw__detail(detail, detail_len, "%s: options too long: '%s'", who, options);
				return TW_ERR_INVAL;
			}
			if (rest_at)
				rest[rest_at++] = ',';
			memcpy(rest + rest_at, p, len);
			rest_at += len;
			rest[rest_at] = '\0';
		} else if (!o) {
			char keys[256];
			tw__opt_keys(table, num_options, keys, sizeof(keys));
			tw__detail(detail, detail_len, "%s: %s '%.*s' (it takes: %s)", who,
			           eq ? "unknown option" : "expected key=value, got", (int)len, p, keys);
			return TW_ERR_INVAL;
		} else {
			const char *v = eq + 1;
			size_t vlen = len - klen - 1;
			char *field = (char *)dest + o->offset;
			uint64_t u;
			bool b;
			switch (o->type) {
			case TW_OPT_U64:
				if (!tw__opt_u64(v, vlen, &u) || u < o->min || u > o->max) {
					tw__detail(detail, detail_len,
					           "%s: option '%.*s': must be a number from %llu to %llu "
					           "(k, m, g, t suffixes allowed)",
					           who, (int)len, p, (unsigned long long)o->min,
					           (unsigned long long)o->max);
					return TW_ERR_INVAL;
				}
				memcpy(field, &u, sizeof(u));
				break;
			case TW_OPT_BOOL:
				if (!tw__opt_bool(v, vlen, &b)) {
					tw__detail(detail, detail_len,
					           "%s: option '%.*s': must be 0, 1, true, false, yes or no", who,
					           (int)len, p);
					return TW_ERR_INVAL;
				}
				memcpy(field, &b, sizeof(b));
				break;
			case TW_OPT_STR:
				if (vlen + 1 > o->size) {
					tw__detail(detail, detail_len,
					           "%s: option '%.*s': longer than %zu bytes", who, (int)len, p,
					           o->size - 1);
					return TW_ERR_INVAL;
				}
				memcpy(field, v, vlen);
				field[vlen] = '\0';
				break;
			}
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return TW_OK;
}
