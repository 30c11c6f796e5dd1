/*
 * select.c - the user's choice of backends (see select.h).
 */
#include "core/select.h"

#include <stdio.h>
#include <string.h>

#include "platform/error.h"

static const char *const tw__known_transports[] = { "uv", "shm", "ibv", NULL };
static const char *const tw__known_channels[] = { "basic",    "mpt",      "cma",      "xth",
	                                          "cuda_basic", "cuda_ipc", "cuda_gdr",
	                                          "cuda_xth", NULL };

/* Calls fn on each item of spec (without its '^'); stops at a non-zero. */
static int tw__select_each(const char *spec, int (*fn)(const char *item, size_t len, bool excl,
                                                       size_t index, void *arg),
                           void *arg)
{
	size_t index = 0;
	for (const char *p = spec; p && *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		bool excl = len > 0 && p[0] == '^';
		int rc = fn(p + excl, len - excl, excl, index++, arg);
		if (rc)
			return rc;
		p += len + (e ? 1 : 0);
	}
	return 0;
}

typedef struct check_ctx {
	const char *const *known;
	int excl, incl;
	char bad[64];
	const char *why;
} check_ctx;

static int tw__select_check_item(const char *item, size_t len, bool excl, size_t index, void *arg)
{
	check_ctx *c = arg;
	(void)index;
	snprintf(c->bad, sizeof(c->bad), "%.*s%.*s", excl ? 1 : 0, "^", (int)len, item);
	if (len == 0) {
		c->why = "an empty item";
		return 1;
	}
	bool found = false;
	for (size_t i = 0; c->known[i]; i++)
		found |= strlen(c->known[i]) == len && !strncmp(c->known[i], item, len);
	if (!found) {
		c->why = "no such kind";
		return 1;
	}
	if (excl)
		c->excl++;
	else
		c->incl++;
	return 0;
}

tw_status_t tw__select_check_spec(const char *spec, bool transports, const char *source,
                                  char *detail, size_t detail_len)
{
	if (!spec || !*spec)
		return TW_OK;
	check_ctx c = { transports ? tw__known_transports : tw__known_channels, 0, 0, "", NULL };
	if (tw__select_each(spec, tw__select_check_item, &c)) {
		char known[160] = "";
		for (size_t i = 0; c.known[i]; i++)
			snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s", i ? ", " : "",
			         c.known[i]);
		tw__detail(detail, detail_len, "%s: '%s' is %s (%s kinds: %s)", source, c.bad, c.why,
		           transports ? "transport" : "channel", known);
		return TW_ERR_INVAL;
	}
	if (c.excl && c.incl) {
		tw__detail(detail, detail_len,
		           "%s: mixes kinds to keep and kinds to leave out ('^'); use one form", source);
		return TW_ERR_INVAL;
	}
	return TW_OK;
}

typedef struct apply_ctx {
	const char *kind;
	bool listed, excl;
	size_t index, count;
} apply_ctx;

static int tw__select_apply_item(const char *item, size_t len, bool excl, size_t index, void *arg)
{
	apply_ctx *a = arg;
	a->count++;
	a->excl = excl;
	if (strlen(a->kind) == len && !strncmp(a->kind, item, len) && !a->listed) {
		a->listed = true;
		a->index = index;
	}
	return 0;
}

tw_status_t tw__select_apply(const char *spec, const char *source, const char *kind,
                             int64_t *priority, char *detail, size_t detail_len)
{
	if (!spec || !*spec)
		return TW_OK;
	apply_ctx a = { kind, false, false, 0, 0 };
	tw__select_each(spec, tw__select_apply_item, &a);
	if (a.excl && a.listed) {
		tw__detail(detail, detail_len, "%s leaves %s out", source, kind);
		return TW_ERR_UNSUPPORTED;
	}
	if (!a.excl && !a.listed) {
		tw__detail(detail, detail_len, "%s does not list %s", source, kind);
		return TW_ERR_UNSUPPORTED;
	}
	if (!a.excl)
		*priority = (int64_t)(a.count - a.index) * 100; /* the list's order wins */
	return TW_OK;
}
