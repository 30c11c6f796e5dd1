/*
 * mutation.h - the harness judged by the defects it catches (tensorwire issue
 * 17): tensorwire-conform --mutants runs the selected cases against each
 * seeded defect of the reference implementation (ref/src/platform/mutant.h,
 * switched on by TW_MUTANT in the test-only adapter tw-iut-mutant) and
 * reports which cases kill it. A case kills a mutant when it fails (FAIL,
 * ERROR or TIMEOUT) with the defect and passes, in the same shape, without
 * it. A mutant that no case kills is a missing or weak case.
 */
#ifndef TWC_HARNESS_MUTATION_H
#define TWC_HARNESS_MUTATION_H

#include <stdbool.h>

#include "case.h"
#include "report.h"

typedef struct twc_mutation_opts {
	const char *list;    /* conformance/mutants/mutants.list (NULL: mutation mode off) */
	const char *adapter; /* the command of tw-iut-mutant */
	const char *only;    /* comma-separated mutant names, or NULL for all */
	bool full;           /* every case for every mutant, not only up to the first kill */
	const char *report;  /* Markdown report, or NULL */
} twc_mutation_opts;

/* Runs case r->c for r->iut (and r->peer) in a child process; fills the
 * outcome, reason, seconds and log of r. */
typedef void (*twc_run_fn)(void *ctx, twc_result *r);

/* Runs the mutation suite over the selected cases; ref is the unmutated
 * reference for cross and pairwise runs. Returns the exit status: 0 every
 * mutant killed, 1 a mutant survived, 2 the list or the report failed. */
int twc_mutation_run(const twc_mutation_opts *o, const twc_case *const *sel, int nsel,
                    const twc_iut_info *ref, twc_run_fn run, void *ctx);

#endif /* TWC_HARNESS_MUTATION_H */
