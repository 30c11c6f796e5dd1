/*
 * case.c - the case registry and outcome helpers (see case.h).
 */
#include "case.h"

#include <stdarg.h>
#include <stdio.h>

const char *tw_outcome_name(tw_outcome_t o)
{
	static const char *const names[] = {"PASS", "FAIL", "SKIP", "XFAIL", "ERROR", "TIMEOUT"};
	return (unsigned)o < TW_OUTCOME_COUNT ? names[o] : "?";
}

tw_outcome_t tw_case_result(tw_case_env *env, tw_outcome_t o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(env->reason, sizeof(env->reason), fmt, ap);
	va_end(ap);
	return o;
}

const tw_case *const *tw_cases_all(int *count_out)
{
	static const tw_case *all[256];
	static int n = -1;
	if (n < 0) {
		const tw_case *(*suites[])(int *) = {tw_suite_wire, tw_suite_wire_client,
		                                       tw_suite_wire_fuzz, tw_suite_semantic,
		                                       tw_suite_interop};
		n = 0;
		for (size_t s = 0; s < sizeof(suites) / sizeof(suites[0]); s++) {
			int k;
			const tw_case *cs = suites[s](&k);
			for (int i = 0; i < k && n < 256; i++)
				all[n++] = &cs[i];
		}
	}
	*count_out = n;
	return all;
}
