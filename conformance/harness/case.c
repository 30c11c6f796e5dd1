/*
 * case.c - the case registry and outcome helpers (see case.h).
 */
#include "case.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *twc_outcome_name(twc_outcome_t o)
{
	static const char *const names[] = {"PASS", "FAIL", "SKIP", "XFAIL", "ERROR", "TIMEOUT"};
	return (unsigned)o < TWC_OUTCOME_COUNT ? names[o] : "?";
}

twc_outcome_t twc_case_result(twc_case_env *env, twc_outcome_t o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(env->reason, sizeof(env->reason), fmt, ap);
	va_end(ap);
	return o;
}

const twc_case **twc_cases_collect(const twc_suite *suites, size_t nsuites, int *count_out)
{
	const twc_case **all = NULL;
	int n = 0, cap = 0;
	for (size_t s = 0; s < nsuites; s++) {
		int k;
		const twc_case *cs = suites[s].cases(&k);
		if (n + k + 1 > cap) {
			cap = 2 * (n + k + 1);
			const twc_case **grown = realloc(all, (size_t)cap * sizeof(*grown));
			if (!grown) {
				free(all);
				return NULL;
			}
			all = grown;
		}
		for (int i = 0; i < k; i++)
			all[n++] = &cs[i];
	}
	if (!all)
		all = calloc(1, sizeof(*all));
	else
		all[n] = NULL;
	*count_out = n;
	return all;
}

int twc_tool_path(const char *name, char *buf, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -1;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	if (snprintf(buf, len, "%s/%s", self, name) >= (int)len)
		return -1;
	return access(buf, X_OK);
}

/* Runs `cmd`; 0 when it exits 0, else -1 with its first output line in why. */
static int try_cmd(const char *cmd, char *why, size_t len)
{
	char full[4 * PATH_MAX];
	if (snprintf(full, sizeof(full), "%s 2>&1", cmd) >= (int)sizeof(full))
		return -1;
	FILE *f = popen(full, "r");
	if (!f) {
		snprintf(why, len, "popen failed");
		return -1;
	}
	char line[512] = "";
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	while (fgetc(f) != EOF) {
	}
	int st = pclose(f);
	line[strcspn(line, "\n")] = '\0';
	snprintf(why, len, "%s", line[0] ? line : "it failed");
	return st == 0 ? 0 : -1;
}

twc_outcome_t twc_contain_prefix(const char *unshare, const char *sandbox, char *prefix,
                                 size_t len, char *why, size_t why_len)
{
	char sb[PATH_MAX], probe[3 * PATH_MAX], reason[512];
	prefix[0] = '\0';
	if (geteuid() != 0) {
		snprintf(why, why_len, "needs root (seccomp as root, capability drops, mount and pid "
		                       "namespaces)");
		return TWC_SKIP;
	}
	if (twc_tool_path("tw-sandbox", sb, sizeof(sb)) != 0) {
		snprintf(why, why_len, "tw-sandbox is not beside tensorwire-conform");
		return TWC_ERROR;
	}
	if (unshare) {
		snprintf(probe, sizeof(probe), "unshare %s -- true", unshare);
		if (try_cmd(probe, reason, sizeof(reason)) != 0) {
			snprintf(why, why_len, "unshare %s: %s", unshare, reason);
			return TWC_SKIP;
		}
		snprintf(prefix, len, "unshare %s -- ", unshare);
	}
	if (sandbox && sandbox[0]) {
		snprintf(probe, sizeof(probe), "%s%s %s --check --", prefix, sb, sandbox);
		if (try_cmd(probe, reason, sizeof(reason)) != 0) {
			snprintf(why, why_len, "tw-sandbox %s: %s", sandbox, reason);
			return TWC_SKIP;
		}
		size_t off = strlen(prefix);
		snprintf(prefix + off, len - off, "%s %s -- ", sb, sandbox);
	}
	return TWC_PASS;
}
