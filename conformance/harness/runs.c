/*
 * runs.c - expanding cases into runs (see runs.h).
 */
#include "runs.h"

#include <stdio.h>
#include <stdlib.h>

void twc_runs_add(twc_runs *rl, const twc_case *c, const twc_iut_info *iut, const twc_iut_info *peer,
                  const char *combo)
{
	if (rl->n == rl->cap) {
		int cap = rl->cap ? 2 * rl->cap : 64;
		twc_result *v = realloc(rl->v, (size_t)cap * sizeof(*v));
		if (!v) {
			rl->oom = true;
			return;
		}
		rl->v = v;
		rl->cap = cap;
	}
	rl->v[rl->n] = (twc_result){.c = c, .iut = iut, .peer = peer};
	snprintf(rl->v[rl->n].combo, sizeof(rl->v[rl->n].combo), "%s", combo ? combo : "");
	rl->n++;
}

static void twc_runs_add_pairs(twc_runs *rl, const twc_case *c, const twc_iut_info *iuts,
                               int niuts, const twc_iut_info *ref, const char *combo)
{
	bool ref_is_iut = false;
	for (int a = 0; a < niuts; a++)
		ref_is_iut |= ref == &iuts[a];
	if (c->pairwise) {
		for (int a = 0; a < niuts; a++)
			for (int b = 0; b < niuts; b++)
				if (a != b)
					twc_runs_add(rl, c, &iuts[a], &iuts[b], combo);
		for (int a = 0; ref && !ref_is_iut && a < niuts; a++) {
			twc_runs_add(rl, c, &iuts[a], ref, combo);
			twc_runs_add(rl, c, ref, &iuts[a], combo);
		}
		for (int a = 0; a < niuts; a++)
			twc_runs_add(rl, c, &iuts[a], &iuts[a], combo);
	} else if (c->cross) {
		for (int a = 0; a < niuts; a++) {
			twc_runs_add(rl, c, &iuts[a], &iuts[a], combo);
			if (ref && ref != &iuts[a]) {
				twc_runs_add(rl, c, &iuts[a], ref, combo);
				twc_runs_add(rl, c, ref, &iuts[a], combo);
			}
		}
	} else {
		for (int a = 0; a < niuts; a++)
			twc_runs_add(rl, c, &iuts[a], NULL, combo);
	}
}

void twc_runs_add_case(twc_runs *rl, const twc_case *c, const twc_iut_info *iuts, int niuts,
                      const twc_iut_info *ref, const char *const *combos, int ncombos)
{
	if (!c->battery || ncombos == 0) {
		twc_runs_add_pairs(rl, c, iuts, niuts, ref, NULL);
		return;
	}
	for (int k = 0; k < ncombos; k++)
		twc_runs_add_pairs(rl, c, iuts, niuts, ref, combos[k]);
}
