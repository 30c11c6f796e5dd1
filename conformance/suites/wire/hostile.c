/*
 * hostile.c - see hostile.h.
 */
#define _GNU_SOURCE
#include "hostile.h"

#include <stdio.h>
#include <string.h>

twc_outcome_t twc_hostile_then_good(twc_case_env *env, const twc_hostile_run *r)
{
	twc_session s;
	int rc = twc_session_start(&s, env->iut_cmd, env->iut_cmd, env->iut_name, env->iut_name,
	                          env->wait_ms, r->ctx, r->urls);
	json_decref(r->ctx);
	json_decref(r->urls);
	snprintf(env->transport, sizeof(env->transport), "%s", r->transport);
	snprintf(env->channel, sizeof(env->channel), "%s", r->channel);
	if (rc != 0) {
		twc_session_destroy(&s);
		return twc_case_result(env, TWC_ERROR, "%s", s.reason);
	}
	char why[1024] = "";
	if (r->hostile(&s, r->kind, why, sizeof(why)) != 0) {
		int st;
		twc_adapter_pump(100);
		if (s.server && twc_adapter_exited(s.server, &st)) { /* say how it ended */
			char how[96];
			twc_adapter_describe_status(st, how, sizeof(how));
			size_t l = strlen(why);
			snprintf(why + l, sizeof(why) - l, "; the IUT's process ended: %s", how);
		}
		twc_session_destroy(&s);
		return twc_case_result(env, strncmp(why, "harness:", 8) ? TWC_FAIL : TWC_ERROR, "%s",
		                       why);
	}
	/* the listener and the process still serve a well-formed pipe */
	rc = twc_session_connect(&s, NULL);
	if (rc == 0)
		rc = twc_session_transfer(&s, true, r->shape, 1, false, r->seed_base);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, r->shape, 1, false, r->seed_base + 1);
	if (rc == 0)
		rc = twc_session_check_info(&s, r->transport, r->channel);
	if (rc == 0)
		rc = twc_session_finish(&s);
	twc_session_destroy(&s);
	if (rc != 0)
		return twc_case_result(env, TWC_FAIL, "%s: %s", r->after, s.reason);
	return TWC_PASS;
}

static uint64_t g_tensor_len;

static int shape_len(int index, twc_agent_msg *m)
{
	return twc_msg_one_tensor(m, 5, g_tensor_len + (uint64_t)index);
}

twc_outcome_t twc_hostile_basic(twc_case_env *env, const char *transport, const char *url,
                                twc_hostile_fn hostile, int kind, uint64_t tensor_len,
                                uint64_t seed_base, const char *after)
{
	g_tensor_len = tensor_len; /* one case at a time in a runner's child */
	twc_hostile_run r = {
		.ctx = json_pack("{s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "transports", "name",
		                 transport, "kind", transport, "priority", 0, "channels", "name", "basic",
		                 "kind", "basic", "priority", 0),
		.urls = json_pack("[s]", url), .transport = transport, .channel = "basic",
		.hostile = hostile, .kind = kind, .shape = shape_len, .seed_base = seed_base,
		.after = after};
	return twc_hostile_then_good(env, &r);
}

int twc_hostile_take_strays(twc_session *s, char *why, size_t len)
{
	if (twc_session_take_strays(s, 1000) < 0) {
		snprintf(why, len, "%s", s->reason);
		return -1;
	}
	return 0;
}

uint64_t twc_hostile_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}
