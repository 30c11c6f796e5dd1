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
 */
#ifndef TW_HARNESS_RUNS_H
#define TW_HARNESS_RUNS_H

#include <stdbool.h>

#include "report.h"

/* The runs of one invocation, grown as needed; oom is set (and the run
 * dropped) when memory runs out, so the caller can refuse to go on. */
typedef struct tw_runs {
	tw_result *v;
	int n, cap;
	bool oom;
} tw_runs;

void tw_runs_add(tw_runs *rl, const tw_case *c, const tw_iut_info *iut, const tw_iut_info *peer);

/* Appends the runs of case c for iuts[0..niuts) (an array) and the reference
 * ref (NULL: none; may point into iuts). */
void tw_runs_add_case(tw_runs *rl, const tw_case *c, const tw_iut_info *iuts, int niuts,
                      const tw_iut_info *ref);

#endif /* TW_HARNESS_RUNS_H */
