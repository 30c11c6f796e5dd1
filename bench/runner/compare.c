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
 *
 * A row and size the baselines measured that no candidate run did (its run
 * failed, or it is missing) is MISSING, and one whose candidate runs saw
 * wrong bytes is WRONG: both count as a failure, since a change that
 * breaks a row must not read as "no slower". A file that is not a
 * results.json, or a result whose size is not a positive integer or whose
 * median is not a positive finite number, is an input error. Files
 * measured on another host, by another command or under another sanitizer
 * than the first baseline are named in a warning.
 *
 * Exit: 0 nothing worse, missing or wrong; 1 some row is; 2 usage or input
 * error.
 */
#define _GNU_SOURCE
#include "runner.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMP_MAX_FILES 16
#define CMP_FALLBACK_SPREAD 0.20
#define CMP_FLOOR 0.05
#define CMP_KEY 512

typedef struct cmp_cell {
	char key[CMP_KEY];
	long long size;
	double base[CMP_MAX_FILES], cand[CMP_MAX_FILES];
	int nbase, ncand;
	bool cand_wrong, base_wrong;
	char sanitizer[2][32]; /* as each side's first run of the row says */
} cmp_cell;

typedef struct cmp_set {
	cmp_cell *v;
	size_t n, cap;
	char why_missing[64][CMP_KEY + 96]; /* candidate runs that are not ok, and why */
	size_t n_missing;
	/* the first baseline's host and command, to warn about the others */
	char host[256], command[1024];
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

static const char *cmp_str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k)) ?: "?";
}

/* The command a file was measured with, without its --out (every run
 * writes somewhere else). */
static void cmp_command(json_t *root, char *out, size_t len)
{
	const char *cmd = cmp_str(root, "command");
	size_t o = 0;
	out[0] = '\0';
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", cmd);
	bool skip = false;
	for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		if (skip) {
			skip = false;
			continue;
		}
		if (!strcmp(t, "--out")) {
			skip = true;
			continue;
		}
		if (!strncmp(t, "--out=", 6))
			continue;
		o += (size_t)snprintf(out + o, o < len ? len - o : 0, "%s%s", o ? " " : "", t);
	}
}

/* Adds every ok run's per-size medians of `path` to side `cand`; runs of
 * the candidate that are not ok are kept as the reason a row is missing. */
static int cmp_load(cmp_set *s, const char *path, bool cand, bool first)
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
	json_t *h = json_object_get(root, "host");
	char host[256], command[1024];
	snprintf(host, sizeof(host), "%s, %lld CPUs, %s", cmp_str(h, "cpu_model"),
	         (long long)json_integer_value(json_object_get(h, "cpus")), cmp_str(h, "kernel"));
	cmp_command(root, command, sizeof(command));
	if (first) {
		snprintf(s->host, sizeof(s->host), "%s", host);
		snprintf(s->command, sizeof(s->command), "%s", command);
	} else {
		if (strcmp(host, s->host) != 0)
			printf("warning: %s was measured on another host (%s) than the first baseline "
			       "(%s): its ratios mean little\n", path, host, s->host);
		if (strcmp(command, s->command) != 0)
			printf("warning: %s was measured by another command (%s) than the first "
			       "baseline (%s)\n", path, command, s->command);
	}
	size_t i, j;
	json_t *r, *x;
	int rc = 0;
	json_array_foreach(runs, i, r) {
		char key[CMP_KEY];
		int kl = snprintf(key, sizeof(key), "%s/%s/%s/%s", cmp_str(r, "net"), cmp_str(r, "cpu"),
		                  cmp_str(r, "policy"), cmp_str(r, "system"));
		if (kl < 0 || (size_t)kl >= sizeof(key)) {
			fprintf(stderr, "compare: %s: run %zu: its name is longer than %d bytes\n", path,
			        i, CMP_KEY - 1);
			rc = -1;
			break;
		}
		const char *status = cmp_str(r, "status");
		if (strcmp(status, "ok") != 0) {
			if (cand && s->n_missing < sizeof(s->why_missing) / sizeof(s->why_missing[0]))
				snprintf(s->why_missing[s->n_missing++], sizeof(s->why_missing[0]),
				         "%s: %s %s: %s", key, status, path, cmp_str(r, "reason"));
			continue;
		}
		json_array_foreach(json_object_get(r, "results"), j, x) {
			json_t *sz = json_object_get(x, "size"), *m = json_object_get(x, "median_ms"),
			       *wb = json_object_get(x, "wrong_bytes");
			double med = json_is_number(m) ? json_number_value(m) : NAN;
			if (!json_is_integer(sz) || json_integer_value(sz) <= 0 || !isfinite(med) ||
			    med <= 0) {
				fprintf(stderr, "compare: %s: %s, result %zu: the size must be a positive "
				                "integer and median_ms a positive number\n", path, key, j);
				rc = -1;
				break;
			}
			cmp_cell *c = cmp_cell_get(s, key, json_integer_value(sz));
			if (!c) {
				rc = -1;
				break;
			}
			int *n = cand ? &c->ncand : &c->nbase;
			if (*n < CMP_MAX_FILES)
				(cand ? c->cand : c->base)[(*n)++] = med;
			if (json_integer_value(wb) > 0)
				*(cand ? &c->cand_wrong : &c->base_wrong) = true;
			char *san = c->sanitizer[cand];
			if (!san[0])
				snprintf(c->sanitizer[cand], sizeof(c->sanitizer[cand]), "%s",
				         cmp_str(r, "sanitizer"));
		}
		if (rc)
			break;
	}
	json_decref(root);
	return rc;
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
	for (int i = 1; i < sep; i++)
		for (int k = 1; k < i; k++)
			if (!strcmp(argv[i], argv[k]))
				printf("warning: baseline %s is given twice: the spread between its copies "
				       "is no run-to-run spread\n", argv[i]);
	cmp_set *s = calloc(1, sizeof(*s));
	if (!s)
		return 2;
	for (int i = 1; i < argc; i++)
		if (i != sep && cmp_load(s, argv[i], i > sep, i == 1) != 0) {
			free(s->v);
			free(s);
			return 2;
		}
	int nbase = sep - 1, worse = 0, missing = 0, wrong = 0, compared = 0;
	if (nbase == 1)
		printf("one baseline run: its run-to-run spread cannot be measured; using %.0f %% "
		       "(run the baseline at least twice on this machine)\n",
		       CMP_FALLBACK_SPREAD * 100);
	printf("%-44s %12s %11s %11s %8s %8s  %s\n", "run (net/cpu/policy/system)", "size",
	       "base ms", "new ms", "change", "spread", "verdict");
	for (size_t i = 0; i < s->n; i++) {
		cmp_cell *c = &s->v[i];
		if (!c->nbase)
			continue; /* measured by the candidate only: nothing to compare with */
		if (!c->ncand) {
			missing++;
			printf("%-44s %12lld %11s %11s %8s %8s  MISSING (no new run measured it)\n", c->key,
			       c->size, "", "", "", "");
			continue;
		}
		if (strcmp(c->sanitizer[0], c->sanitizer[1]) != 0)
			printf("warning: %s was measured under sanitizer '%s' in the baseline and '%s' "
			       "in the new runs\n", c->key, c->sanitizer[0], c->sanitizer[1]);
		double lo = c->base[0], hi = c->base[0];
		for (int k = 1; k < c->nbase; k++) {
			lo = c->base[k] < lo ? c->base[k] : lo;
			hi = c->base[k] > hi ? c->base[k] : hi;
		}
		double base = cmp_median(c->base, c->nbase), cand = cmp_median(c->cand, c->ncand);
		double spread = c->nbase > 1 ? (hi - lo) / base : CMP_FALLBACK_SPREAD;
		double limit = spread > CMP_FLOOR ? spread : CMP_FLOOR;
		double change = cand / base - 1;
		bool bad = change > limit;
		worse += bad;
		wrong += c->cand_wrong;
		compared++;
		printf("%-44s %12lld %11.4g %11.4g %+7.0f%% %7.0f%%  %s%s%s\n", c->key, c->size, base,
		       cand, change * 100, spread * 100,
		       bad ? "WORSE" : change < -limit ? "better" : "same",
		       c->cand_wrong ? ", WRONG bytes in the new runs" : "",
		       c->base_wrong ? ", wrong bytes in the baseline" : "");
	}
	for (size_t i = 0; i < s->n_missing; i++)
		printf("not ok in the new runs: %s\n", s->why_missing[i]);
	free(s->v);
	free(s);
	if (!compared && !missing) {
		fprintf(stderr, "compare: no run and size is in both sides\n");
		return 2;
	}
	printf("%d of %d compared row-sizes got worse beyond the baseline's spread; %d missing "
	       "from the new runs; %d with wrong bytes in them\n",
	       worse, compared, missing, wrong);
	return worse || missing || wrong ? 1 : 0;
}
