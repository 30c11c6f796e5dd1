/*
 * fault.c - the rule table behind TW_FAULT_POINT() (see fault.h). Rules are
 * parsed once from TW_FAULTS; hit counters are atomics so any thread may pass
 * a fault point. Compiled in every build (it is tiny) so that tests can link
 * it, but only consulted when TW_FAULT_INJECTION is defined.
 */
#include "platform/fault.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/fault_points.h"

#define TW_FAULT_RULES_MAX 16
#define TW_FAULT_NAME_MAX 48

struct tw_fault_rule {
	char name[TW_FAULT_NAME_MAX];
	unsigned long nth;
	bool and_later;
	unsigned long hits; /* atomic */
};

static struct tw_fault_rule rules[TW_FAULT_RULES_MAX];
static int num_rules;
static unsigned long fired; /* atomic */
static pthread_once_t rules_once = PTHREAD_ONCE_INIT;

#define TW_FAULT_NAME_OF(name, what) name,
static const char *const known_points[] = { TW_FAULT_POINTS(TW_FAULT_NAME_OF) };

bool tw__fault_point_known(const char *name)
{
	for (size_t i = 0; i < sizeof(known_points) / sizeof(known_points[0]); i++)
		if (strcmp(known_points[i], name) == 0)
			return true;
	return false;
}

/* A rule that would silently inject nothing is a mistake in the test that
 * set it: say which and stop. */
static void tw__fault_bad_rule(const char *rule, size_t len, const char *why)
{
	fprintf(stderr, "libtensorwire: TW_FAULTS: bad rule '%.*s': %s\n", (int)len, rule, why);
	abort();
}

static void tw__fault_parse(void)
{
	const char *env = getenv("TW_FAULTS");
	if (!env)
		return;
	while (*env) {
		const char *end = strchr(env, ',');
		size_t len = end ? (size_t)(end - env) : strlen(env);
		const char *colon = memchr(env, ':', len);
		if (!colon)
			tw__fault_bad_rule(env, len, "expected <point>:<n> or <point>:<n>+");
		if ((size_t)(colon - env) >= TW_FAULT_NAME_MAX)
			tw__fault_bad_rule(env, len, "point name too long");
		if (num_rules == TW_FAULT_RULES_MAX)
			tw__fault_bad_rule(env, len, "too many rules (at most 16)");
		struct tw_fault_rule *r = &rules[num_rules];
		memcpy(r->name, env, (size_t)(colon - env));
		r->name[colon - env] = '\0';
		if (!tw__fault_point_known(r->name))
			tw__fault_bad_rule(env, len, "no such fault point (see platform/fault_points.h)");
		char *num_end;
		r->nth = strtoul(colon + 1, &num_end, 10);
		r->and_later = num_end < env + len && *num_end == '+';
		if (r->nth == 0 || num_end == colon + 1 ||
		    num_end + (r->and_later ? 1 : 0) != env + len)
			tw__fault_bad_rule(env, len, "<n> must be a number from 1 up, optionally followed by +");
		num_rules++;
		env += len;
		if (*env == ',')
			env++;
	}
}

bool tw__fault_hit(const char *name)
{
	pthread_once(&rules_once, tw__fault_parse);
	for (int i = 0; i < num_rules; i++) {
		struct tw_fault_rule *r = &rules[i];
		if (strcmp(r->name, name) != 0)
			continue;
		unsigned long n = __atomic_add_fetch(&r->hits, 1, __ATOMIC_RELAXED);
		if (n == r->nth || (r->and_later && n > r->nth)) {
			__atomic_add_fetch(&fired, 1, __ATOMIC_RELAXED);
			return true;
		}
		return false;
	}
	return false;
}

unsigned long tw__fault_fired(void)
{
	return __atomic_load_n(&fired, __ATOMIC_RELAXED);
}
