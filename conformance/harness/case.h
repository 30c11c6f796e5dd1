/*
 * case.h - how a conformance case is declared and what one run of it gets.
 *
 * A case carries its id, the spec section it checks, its level (MUST or
 * SHOULD), the capabilities it needs, a one-line description, the requirement
 * it checks quoted from the spec, and the outcomes it accepts besides PASS.
 * The runner (conform.c) runs each case in its own process with a timeout,
 * against one implementation under test (IUT) or, for pairwise cases, against
 * every ordered pair of IUTs, and turns what the case reports into PASS,
 * FAIL, SKIP(reason), XFAIL(reason, from the IUT's profile), ERROR or
 * TIMEOUT.
 *
 * A case function must only report what it saw; levels, profiles and strict
 * mode are the runner's business.
 */
#ifndef TWC_HARNESS_CASE_H
#define TWC_HARNESS_CASE_H

#include <stdbool.h>

#include "session.h"

typedef enum twc_level { TWC_MUST, TWC_SHOULD } twc_level_t;

typedef enum twc_outcome {
	TWC_PASS = 0,
	TWC_FAIL,
	TWC_SKIP,
	TWC_XFAIL,
	TWC_ERROR,   /* the harness could not carry the case out */
	TWC_TIMEOUT,
	TWC_OUTCOME_COUNT
} twc_outcome_t;

#define TWC_ACCEPTS(o) (1u << (o))

/* What one run of a case gets: the IUT (for pairwise cases the client side)
 * and, for pairwise cases, the peer (the server side). */
typedef struct twc_case_env {
	const char *iut_name, *iut_cmd;
	const char *peer_name, *peer_cmd;
	const char *iut_impl, *peer_impl; /* what their adapters said in hello ("tensorpipe") */
	/* Set by a case whose failure is not the one documented for this
	 * implementation: no profile may excuse it (the record is stale). */
	bool unexcused;
	int wait_ms;                  /* bound on any single wait */
	char reason[TWC_REASON_MAX];   /* why, for anything but PASS */
	char transport[32], channel[32];
} twc_case_env;

typedef struct twc_case twc_case;
struct twc_case {
	const char *id;          /* "wire.bad_type_byte" */
	const char *suite;       /* "wire", "semantic", "interop" */
	const char *section;     /* "wire.md 5.3": file under spec/ and section number */
	twc_level_t level;
	const char *needs;       /* capabilities, comma-separated ("" = none) */
	const char *description; /* one line */
	const char *requirement; /* the requirement, quoted */
	unsigned accepts;        /* outcomes accepted besides PASS (TWC_ACCEPTS(TWC_SKIP)...) */
	int timeout_s;
	bool pairwise;           /* run for every ordered pair of IUTs */
	bool cross;              /* also with the reference implementation as the peer, in
	                            both roles (iut->iut, iut->ref, ref->iut); the case
	                            reads env->peer_cmd for the server side */
	bool large;              /* only with --large (multi-GiB) */
	bool battery;            /* runs once per transport+channel the invocation selects
	                            (--combo, combo.h); builds its contexts and listener
	                            through the session's defaults, which use it */
	twc_outcome_t (*run)(const twc_case *c, twc_case_env *env);
	const void *arg;         /* case-specific data */
};

/* A table of cases of one suite. The suites live in suites/ and are handed
 * to the runner by its main (suites/suites.c): the harness knows none. */
typedef struct twc_suite {
	const char *name;                        /* "wire", "semantic", "interop" */
	const twc_case *(*cases)(int *count_out); /* its cases (built once) */
} twc_suite;

/* Every case of `suites`, in order, in a new NULL-terminated array (free
 * it); NULL when out of memory. */
const twc_case **twc_cases_collect(const twc_suite *suites, size_t nsuites, int *count_out);

const char *twc_outcome_name(twc_outcome_t o);

/* The path of a helper program built beside the runner (tw-sandbox,
 * tw-xth-dual) into buf; -1 when it is not there or not executable. */
int twc_tool_path(const char *name, char *buf, size_t len);

/* The prefix that starts a command the way a container would (unshare(1)
 * with `unshare`'s options, then tw-sandbox with `sandbox`'s, either NULL
 * or "" for none), each tried first: TWC_PASS with the prefix (ending in a
 * space), TWC_SKIP with the reason where this machine cannot (not root, no
 * namespaces, what tw-sandbox said), TWC_ERROR when tw-sandbox is missing. */
twc_outcome_t twc_contain_prefix(const char *unshare, const char *sandbox, char *prefix,
                                 size_t len, char *why, size_t why_len);

/* Sets env->reason and returns the outcome, for one-line returns. */
twc_outcome_t twc_case_result(twc_case_env *env, twc_outcome_t o, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

#endif /* TWC_HARNESS_CASE_H */
