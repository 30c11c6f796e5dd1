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

uint64_t twc_hostile_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}
