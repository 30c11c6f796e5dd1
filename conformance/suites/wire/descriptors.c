/*
 * descriptors.c - spec/wire.md 6 (6.a): an implementation that offers a
 * same-host mechanism stock also offers builds its descriptor exactly as
 * stock does, or stock never selects it.
 *
 * The harness is a raw uv server. The IUT's adapter registers uv plus every
 * same-host backend its hello offers (shm; cma, xth) and connects; the
 * harness reads the Brochure and looks in it for each descriptor as a
 * complete string, computed here from this host's facts (boot id,
 * namespaces, ids, capabilities) independently of libtensorwire. The
 * adapter is a child of this process: same host, same namespaces, same
 * user. A backend the adapter declines as not viable here is reported and
 * not expected; an IUT that offers none of them is a SKIP.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "case.h"
#include "rawpeer.h"
#include "suites.h"

/* ---- this host's facts, read here (not through ref/) ----------------------------- */

typedef struct expect {
	const char *kind;  /* "shm", "cma", "xth" */
	char want[512];    /* exact, or a prefix for xth (the adapter's pid follows) */
	bool prefix;
	bool offered, registered, found;
} expect;

static bool build_expectations(expect *e, char *why, size_t whylen)
{
	char boot[64], net[64], pid[64], user[64];
	if (!twc_raw_boot_id(boot, sizeof(boot)) || !twc_raw_ns_id("net", net, sizeof(net)) ||
	    !twc_raw_ns_id("pid", pid, sizeof(pid)) || !twc_raw_ns_id("user", user, sizeof(user))) {
		snprintf(why, whylen, "cannot read this host's boot id or namespaces");
		return false;
	}
	snprintf(e[0].want, sizeof(e[0].want), "shm:%s_%s", boot, net);
	if (!twc_raw_cma_descriptor(e[1].want, sizeof(e[1].want))) {
		snprintf(why, whylen, "cannot build this process's cma descriptor (capget failed)");
		return false;
	}
	snprintf(e[2].want, sizeof(e[2].want), "%s_%s_", boot, pid);
	e[2].prefix = true;
	return true;
}

/* Whether the Brochure holds `want` as a complete nop string (its length
 * prefix just before it; spec 1.5), or as a prefix of one. */
static bool holds_string(const unsigned char *b, size_t n, const char *want, bool prefix)
{
	size_t wl = strlen(want);
	for (size_t i = 1; i + wl <= n; i++) {
		if (memcmp(b + i, want, wl) != 0)
			continue;
		if (prefix) {
			if (i + wl < n && b[i + wl] >= '0' && b[i + wl] <= '9')
				return true;
			continue;
		}
		/* a short string: 1-byte length prefix (0x80 | len for len < 128) */
		if (wl < 128 && b[i - 1] == (0x80 | wl))
			return true;
		/* a longer one: 0xbd, u8 length */
		if (i >= 2 && b[i - 2] == 0xbd && b[i - 1] == wl)
			return true;
	}
	return false;
}

static bool listed(const json_t *arr, const char *name)
{
	size_t i;
	const json_t *v;
	json_array_foreach(arr, i, v)
		if (json_string_value(v) && !strcmp(json_string_value(v), name))
			return true;
	return false;
}

static twc_outcome_t run_descriptors(const twc_case *c, twc_case_env *env)
{
	(void)c;
	snprintf(env->transport, sizeof(env->transport), "uv");
	snprintf(env->channel, sizeof(env->channel), "basic");
	expect e[3] = { { .kind = "shm" }, { .kind = "cma" }, { .kind = "xth" } };
	char err[1024], why[512];
	if (!build_expectations(e, why, sizeof(why)))
		return twc_case_result(env, TWC_SKIP, "%s", why);
	twc_adapter *a = twc_adapter_spawn(env->iut_cmd, "client", err, sizeof(err));
	if (!a)
		return twc_case_result(env, TWC_ERROR, "%s", err);
	twc_outcome_t o = TWC_ERROR;
	int lfd = -1, boot = -1, port = 0;
	json_t *hello = twc_adapter_call(a, json_pack("{s:s}", "cmd", "hello"), env->wait_ms, err,
	                                 sizeof(err));
	if (!hello) {
		o = twc_case_result(env, TWC_ERROR, "hello: %s", err);
		goto out;
	}
	e[0].offered = listed(json_object_get(hello, "transports"), "shm");
	e[1].offered = listed(json_object_get(hello, "channels"), "cma");
	e[2].offered = listed(json_object_get(hello, "channels"), "xth");
	json_decref(hello);
	if (!e[0].offered && !e[1].offered && !e[2].offered) {
		o = twc_case_result(env, TWC_SKIP, "the IUT offers none of shm, cma, xth");
		goto out;
	}
	json_t *tr = json_pack("[{s:s,s:s,s:i}]", "name", "uv", "kind", "uv", "priority", 0);
	json_t *ch = json_pack("[{s:s,s:s,s:i}]", "name", "basic", "kind", "basic", "priority", 0);
	if (e[0].offered)
		json_array_append_new(tr, json_pack("{s:s,s:s,s:i}", "name", "shm", "kind", "shm",
		                                     "priority", 100));
	for (int k = 1; k < 3; k++)
		if (e[k].offered)
			json_array_append_new(ch, json_pack("{s:s,s:s,s:i}", "name", e[k].kind, "kind",
			                                    e[k].kind, "priority", 100 + k));
	json_t *r = twc_adapter_call(a, json_pack("{s:s,s:s,s:o,s:o}", "cmd", "context", "name",
	                                          "rawtest", "transports", tr, "channels", ch),
	                             env->wait_ms, err, sizeof(err));
	if (!r) {
		o = twc_case_result(env, TWC_ERROR, "context: %s", err);
		goto out;
	}
	for (int k = 0; k < 3; k++) {
		e[k].registered = e[k].offered;
		size_t i;
		const json_t *v;
		json_array_foreach(json_object_get(r, "skipped"), i, v) {
			const char *nm = json_string_value(json_object_get(v, "name"));
			if (nm && !strcmp(nm, e[k].kind)) {
				e[k].registered = false;
				printf("# %s not registered: %s\n", e[k].kind,
				       json_string_value(json_object_get(v, "reason")) ?: "?");
			}
		}
	}
	json_decref(r);
	if ((lfd = twc_raw_listen(&port, err, sizeof(err))) < 0) {
		o = twc_case_result(env, TWC_ERROR, "%s", err);
		goto out;
	}
	char url[64];
	snprintf(url, sizeof(url), "uv://127.0.0.1:%d", port);
	json_decref(twc_adapter_call(a, json_pack("{s:s,s:s}", "cmd", "connect", "url", url),
	                             env->wait_ms, err, sizeof(err)));
	if ((boot = twc_raw_accept(lfd, env->wait_ms, err, sizeof(err))) < 0) {
		o = twc_case_result(env, TWC_FAIL, "the IUT did not connect: %s", err);
		goto out;
	}
	static unsigned char frame[65536];
	long n = twc_raw_recv_frame(boot, frame, sizeof(frame), env->wait_ms, err, sizeof(err));
	if (n >= 0)
		n = twc_raw_recv_frame(boot, frame, sizeof(frame), env->wait_ms, err, sizeof(err));
	if (n < 0) {
		o = twc_case_result(env, TWC_FAIL, "no Brochure: %s", n == -2 ? "closed" : err);
		goto out;
	}
	char missing[1024] = "";
	int checked = 0;
	for (int k = 0; k < 3; k++) {
		if (!e[k].registered)
			continue;
		checked++;
		e[k].found = holds_string(frame, (size_t)n, e[k].want, e[k].prefix);
		printf("# %s: %s '%s%s'\n", e[k].kind, e[k].found ? "found" : "MISSING", e[k].want,
		       e[k].prefix ? "<pid>" : "");
		if (!e[k].found)
			snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
			         "%s%s descriptor '%s%s'", missing[0] ? "; " : "", e[k].kind, e[k].want,
			         e[k].prefix ? "<pid>" : "");
	}
	if (checked == 0)
		o = twc_case_result(env, TWC_SKIP, "the IUT offers shm/cma/xth but registers none "
		                                   "of them here (not viable)");
	else if (missing[0])
		o = twc_case_result(env, TWC_FAIL, "the Brochure lacks the %s (6.a: built as stock "
		                                   "builds it)", missing);
	else
		o = twc_case_result(env, TWC_PASS, "%d descriptor(s) as stock builds them", checked);
out:
	if (boot >= 0)
		close(boot);
	if (lfd >= 0)
		close(lfd);
	twc_adapter_destroy(a);
	return o;
}

static const twc_case cases[] = {
	{.id = "wire.same_host_descriptors", .suite = "wire", .section = "wire.md 6 (6.a)",
	 .level = TWC_MUST, .needs = "",
	 .description = "raw server: the IUT registers every same-host backend it offers; its "
	                "Brochure carries the shm, cma and xth descriptors exactly as stock builds "
	                "them from this host's boot id, namespaces, ids and capabilities",
	 .requirement = "(6.a) An implementation that offers a mechanism stock also offers MUST "
	                "build its descriptor exactly as above, or stock will never select it.",
	 .timeout_s = 60, .run = run_descriptors},
};

const twc_case *twc_suite_wire_descriptors(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
