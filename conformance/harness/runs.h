/*
 * runs.h - which runs a case gets: the one place that expands a case into
 * (IUT, peer) runs, for the runner (conform.c) and the mutation suite
 * (mutation.c) alike.
 *
 *   plain case     each IUT alone
 *   pairwise case  every ordered pair of IUTs (mixed pairs first), each IUT
 *                  with the reference both ways (when the reference is not
 *                  one of the IUTs), then each IUT with itself
 *   cross case     each IUT with itself, then with the reference both ways
 *                  (IUT as client first)
 *
 * and a battery case all of that once per selected transport+channel.
 */
#ifndef TWC_HARNESS_RUNS_H
#define TWC_HARNESS_RUNS_H

#include <stdbool.h>

#include "report.h"

/* The runs of one invocation, grown as needed; oom is set (and the run
 * dropped) when memory runs out, so the caller can refuse to go on. */
typedef struct twc_runs {
	twc_result *v;
	int n, cap;
	bool oom;
} twc_runs;

void twc_runs_add(twc_runs *rl, const twc_case *c, const twc_iut_info *iut, const twc_iut_info *peer,
                  const char *combo);

/* Appends the runs of case c for iuts[0..niuts) (an array) and the reference
 * ref (NULL: none; may point into iuts): a battery case (case.h) once per
 * combination in combos[0..ncombos) ("shm+cma"), every other case once (and
 * a battery case too when ncombos is 0: the session's default, uv+basic). */
void twc_runs_add_case(twc_runs *rl, const twc_case *c, const twc_iut_info *iuts, int niuts,
                      const twc_iut_info *ref, const char *const *combos, int ncombos);

#endif /* TWC_HARNESS_RUNS_H */
