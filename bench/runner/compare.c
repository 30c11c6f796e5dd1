/*
 * compare.c - tensorwire-bench compare (issue 16 item 4): is a change
 * slower than main, beyond what this machine varies by itself?
 *
 *   tensorwire-bench compare BASE.json [BASE.json ...] -- NEW.json [NEW.json ...]
 *
 * Each file is a results.json of a run. For every run key (network, CPU
 * placement, policy, system) and size found on both sides, the baseline is
 * the median of its runs' medians and the spread is the baselines' own
 * run-to-run spread, (max - min) / median of their medians; with a single
 * baseline run there is none to measure, so it falls back to 20 % and says
 * so. A row and size is WORSE when the candidate's median (of its runs'
 * medians) exceeds the baseline by more than the spread (and at least 5 %).
 * Prints one line per compared cell and exits 1 if any is worse.
 */
#define _GNU_SOURCE
#include "runner.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMP_MAX_FILES 16
#define CMP_FALLBACK_SPREAD 0.20
#define CMP_FLOOR 0.05

typedef struct cmp_cell {
	char key[192];
	long long size;
	double base[CMP_MAX_FILES], cand[CMP_MAX_FILES];
	int nbase, ncand;
} cmp_cell;

typedef struct cmp_set {
	cmp_cell *v;
	size_t n, cap;
} cmp_set;

static cmp_cell *cmp_cell_get(cmp_set *s, const char *key, long long size)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].size == size && !strcmp(s->v[i].key, key))
			return &s->v[i];
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		cmp_cell *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		s->v = v;
		s->cap = cap;
	}
	cmp_cell *c = &s->v[s->n++];
	memset(c, 0, sizeof(*c));
	snprintf(c->key, sizeof(c->key), "%s", key);
	c->size = size;
	return c;
}

/* Adds every ok run's per-size medians of `path` to side `cand`. */
static int cmp_load(cmp_set *s, const char *path, bool cand)
{
	json_error_t e;
	json_t *root = json_load_file(path, 0, &e);
	json_t *runs = root ? json_object_get(root, "runs") : NULL;
	if (!json_is_array(runs)) {
		fprintf(stderr, "compare: %s: not a tensorwire-bench results.json (%s)\n", path,
		        root ? "no runs" : e.text);
		json_decref(root);
		return -1;
	}
	size_t i, j;
	json_t *r, *x;
	json_array_foreach(runs, i, r) {
		if (strcmp(json_string_value(json_object_get(r, "status")) ?: "", "ok") != 0)
			continue;
		char key[192];
		snprintf(key, sizeof(key), "%s/%s/%s/%s",
		         json_string_value(json_object_get(r, "net")) ?: "?",
		         json_string_value(json_object_get(r, "cpu")) ?: "?",
		         json_string_value(json_object_get(r, "policy")) ?: "?",
		         json_string_value(json_object_get(r, "system")) ?: "?");
		json_array_foreach(json_object_get(r, "results"), j, x) {
			json_t *m = json_object_get(x, "median_ms");
			if (!json_is_number(m))
				continue;
			cmp_cell *c = cmp_cell_get(s, key, json_integer_value(json_object_get(x, "size")));
			if (!c) {
				json_decref(root);
				return -1;
			}
			int *n = cand ? &c->ncand : &c->nbase;
			if (*n < CMP_MAX_FILES)
				(cand ? c->cand : c->base)[(*n)++] = json_number_value(m);
		}
	}
	json_decref(root);
	return 0;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double cmp_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int twr_compare_main(int argc, char **argv)
{
	int sep = -1;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--"))
			sep = i;
	if (sep < 2 || sep == argc - 1 || sep - 1 > CMP_MAX_FILES || argc - sep - 1 > CMP_MAX_FILES) {
		fprintf(stderr, "usage: tensorwire-bench compare BASE.json [BASE.json ...] -- NEW.json "
		                "[NEW.json ...]   (at most %d each side)\n", CMP_MAX_FILES);
		return 2;
	}
	cmp_set s = {0};
	for (int i = 1; i < argc; i++)
		if (i != sep && cmp_load(&s, argv[i], i > sep) != 0) {
			free(s.v);
			return 2;
		}
	int nbase = sep - 1, worse = 0, compared = 0;
	if (nbase == 1)
		printf("one baseline run: its run-to-run spread cannot be measured; using %.0f %% "
		       "(run the baseline at least twice on this machine)\n",
		       CMP_FALLBACK_SPREAD * 100);
	printf("%-44s %12s %11s %11s %8s %8s  %s\n", "run (net/cpu/policy/system)", "size",
	       "base ms", "new ms", "change", "spread", "verdict");
	for (size_t i = 0; i < s.n; i++) {
		cmp_cell *c = &s.v[i];
		if (!c->nbase || !c->ncand)
			continue;
		double lo = c->base[0], hi = c->base[0];
		for (int k = 1; k < c->nbase; k++) {
			lo = c->base[k] < lo ? c->base[k] : lo;
			hi = c->base[k] > hi ? c->base[k] : hi;
		}
		double base = cmp_median(c->base, c->nbase), cand = cmp_median(c->cand, c->ncand);
		double spread = c->nbase > 1 && base > 0 ? (hi - lo) / base : CMP_FALLBACK_SPREAD;
		double limit = spread > CMP_FLOOR ? spread : CMP_FLOOR;
		double change = base > 0 ? cand / base - 1 : 0;
		bool bad = change > limit;
		worse += bad;
		compared++;
		printf("%-44s %12lld %11.4g %11.4g %+7.0f%% %7.0f%%  %s\n", c->key, c->size, base, cand,
		       change * 100, spread * 100, bad ? "WORSE" : change < -limit ? "better" : "same");
	}
	free(s.v);
	if (!compared) {
		fprintf(stderr, "compare: no run and size is in both sides\n");
		return 2;
	}
	printf("%d of %d compared row-sizes got worse beyond the baseline's spread\n", worse, compared);
	return worse ? 1 : 0;
}
