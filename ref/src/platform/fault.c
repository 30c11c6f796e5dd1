/*
 * fault.c - the rule table behind TW_FAULT_POINT() (see fault.h). Rules are
 * parsed once from TW_FAULTS; hit counters are atomics so any thread may pass
 * a fault point. Compiled in every build (it is tiny) so that tests can link
 * it, but only consulted when TW_FAULT_INJECTION is defined.
 */
#include "platform/fault.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

static void tw__fault_parse(void)
{
	const char *env = getenv("TW_FAULTS");
	if (!env)
		return;
	while (*env && num_rules < TW_FAULT_RULES_MAX) {
		const char *end = strchr(env, ',');
		size_t len = end ? (size_t)(end - env) : strlen(env);
		const char *colon = memchr(env, ':', len);
		if (colon && (size_t)(colon - env) < TW_FAULT_NAME_MAX) {
			struct tw_fault_rule *r = &rules[num_rules];
			memcpy(r->name, env, (size_t)(colon - env));
			r->name[colon - env] = '\0';
			char *num_end;
			r->nth = strtoul(colon + 1, &num_end, 10);
			r->and_later = num_end < env + len && *num_end == '+';
			if (r->nth > 0)
				num_rules++;
		}
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
