/*
 * mutation.c - the mutation suite of the harness (see mutation.h).
 *
 * For each mutant of the list, the cases run in this order: those the list
 * names as its expected killers first, then every other selected case. A
 * case that fails with the mutant is checked once against the same adapter
 * without a mutant (the baseline, cached per case and shape): only a case
 * that passes there counts as a kill, so a flaky or broken case can never
 * pass for a sharp one. Without --mutants-full a mutant's runs stop at its
 * first kill.
 */
#define _GNU_SOURCE
#include "mutation.h"
#include "runs.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mutant {
	char name[64], klass[48], killers[512], what[512];
	twc_iut_info iut;
	char cmd[4096];
	char killed_by[2048]; /* the killing cases ("id [shape]"), ", "-separated */
	char first_reason[512];
	int runs, kills;
	bool ran;
	double seconds;
} mutant;

/* Where mutant m sits in run r (runs.h): 0 alone, 1 m->m, 2 m->ref, 3 ref->m. */
static int shape_of(const twc_result *r, const twc_iut_info *m)
{
	return !r->peer ? 0 : r->iut != m ? 3 : r->peer == m ? 1 : 2;
}

static const char *const shape_names[] = {"", "mutant->mutant", "mutant->ref", "ref->mutant"};

static int read_list(const char *path, mutant **out, int *n_out)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "tensorwire-conform: --mutants %s: %s\n", path, strerror(errno));
		return -1;
	}
	mutant *v = NULL;
	int n = 0, lineno = 0;
	char line[2048];
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *p = line;
		while (isspace((unsigned char)*p))
			p++;
		if (!*p || *p == '#')
			continue;
		mutant m;
		memset(&m, 0, sizeof(m));
		int used = 0;
		if (sscanf(p, "%63s %47s %511s %n", m.name, m.klass, m.killers, &used) < 3 || !used) {
			fprintf(stderr, "tensorwire-conform: %s:%d: expected '<mutant> <class> "
			                "<killing case globs, comma-separated> <what it breaks>'\n",
			        path, lineno);
			free(v);
			fclose(f);
			return -1;
		}
		snprintf(m.what, sizeof(m.what), "%.*s", (int)strcspn(p + used, "\n"), p + used);
		mutant *nv = realloc(v, (size_t)(n + 1) * sizeof(*v));
		if (!nv) {
			free(v);
			fclose(f);
			return -1;
		}
		v = nv;
		v[n++] = m;
	}
	fclose(f);
	*out = v;
	*n_out = n;
	return 0;
}

static bool in_csv(const char *csv, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = csv; p && *p;) {
		size_t k = strcspn(p, ",");
		if (k == n && !strncmp(p, name, n))
			return true;
		p += k + (p[k] ? 1 : 0);
	}
	return false;
}

static bool expected_killer(const mutant *m, const char *id)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", m->killers);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (fnmatch(t, id, 0) == 0)
			return true;
	return false;
}

static bool is_kill(twc_outcome_t o)
{
	return o == TWC_FAIL || o == TWC_ERROR || o == TWC_TIMEOUT;
}

/* A case and shape run without any mutant, once per invocation. */
typedef struct baseline {
	const twc_case *c;
	int shape;
	twc_outcome_t outcome;
	char reason[256];
} baseline;

typedef struct baselines {
	baseline *v;
	int n, cap;
	twc_iut_info iut; /* the mutant adapter with TW_MUTANT unset */
	char cmd[4096];
} baselines;

/* Does run r, with mutant m replaced by the unmutated adapter, pass? Runs
 * it the first time a case and shape needs it. NULL: out of memory. */
static const baseline *baseline_of(baselines *bs, const twc_result *r, const twc_iut_info *m,
                                   twc_run_fn run, void *ctx)
{
	int shape = shape_of(r, m);
	for (int j = 0; j < bs->n; j++)
		if (bs->v[j].c == r->c && bs->v[j].shape == shape)
			return &bs->v[j];
	if (bs->n == bs->cap) {
		int cap = bs->cap ? 2 * bs->cap : 16;
		baseline *v = realloc(bs->v, (size_t)cap * sizeof(*v));
		if (!v)
			return NULL;
		bs->v = v;
		bs->cap = cap;
	}
	twc_result br = {.c = r->c, .iut = r->iut == m ? &bs->iut : r->iut,
	                .peer = r->peer == m ? &bs->iut : r->peer};
	run(ctx, &br);
	baseline *b = &bs->v[bs->n++];
	*b = (baseline){.c = r->c, .shape = shape, .outcome = br.outcome};
	snprintf(b->reason, sizeof(b->reason), "%.250s", br.reason);
	free(br.log);
	return b;
}

/* Runs case c against mutant m (every shape, up to the first kill unless
 * full); records the kills. -1: out of memory. */
static int run_case(const twc_mutation_opts *o, mutant *m, const twc_case *c,
                    const twc_iut_info *ref, baselines *bs, twc_run_fn run, void *ctx)
{
	twc_runs rl = {0};
	twc_runs_add_case(&rl, c, &m->iut, 1, ref, NULL, 0);
	int rc = rl.oom ? -1 : 0;
	for (int i = 0; rc == 0 && i < rl.n && (o->full || !m->kills); i++) {
		twc_result *r = &rl.v[i];
		run(ctx, r);
		m->runs++;
		m->seconds += r->seconds;
		const char *shape = shape_names[shape_of(r, &m->iut)];
		bool kill = is_kill(r->outcome);
		if (kill) {
			/* the same case and shape without the defect must pass */
			const baseline *b = baseline_of(bs, r, &m->iut, run, ctx);
			if (!b)
				rc = -1;
			else if (b->outcome != TWC_PASS)
				fprintf(stderr, "tensorwire-conform: %s [%s] fails without a mutant too "
				                "(%s: %s): not counted as a kill\n",
				        c->id, shape, twc_outcome_name(b->outcome), b->reason);
			kill = b && b->outcome == TWC_PASS;
		}
		fprintf(stderr, "[mutant %s] %-36s %-15s %s (%.1f s)%s%.160s\n", m->name, c->id, shape,
		        twc_outcome_name(r->outcome), r->seconds, kill ? ": KILLED: " : "",
		        kill ? r->reason : "");
		if (kill) {
			if (!m->kills)
				snprintf(m->first_reason, sizeof(m->first_reason), "%.500s", r->reason);
			m->kills++;
			size_t l = strlen(m->killed_by);
			snprintf(m->killed_by + l, sizeof(m->killed_by) - l, "%s%s%s%s%s", l ? ", " : "",
			         c->id, *shape ? " [" : "", shape, *shape ? "]" : "");
		}
	}
	for (int i = 0; i < rl.n; i++)
		free(rl.v[i].log);
	free(rl.v);
	return rc;
}

static void md_escape(FILE *f, const char *s)
{
	for (; *s; s++)
		if (*s == '|')
			fputs("\\|", f);
		else
			fputc(*s, f);
}

static int write_report(const char *path, const twc_mutation_opts *o, const mutant *ms, int n,
                        int killed, int considered, int nsel)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "tensorwire-conform: --mutation-report %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "# Mutation score of the conformance suites\n\n"
	           "Written by `tensorwire-conform --mutants %s%s` over %d case(s). A mutant is a "
	           "seeded defect of libtensorwire (ref/src/platform/mutant.h), switched on by "
	           "TW_MUTANT in the test-only adapter tw-iut-mutant. A case kills it when the case "
	           "fails with the defect and passes without it, in the same shape (mutant alone, "
	           "or paired with itself or with the unmutated reference in either role).\n\n"
	           "**Score: %d / %d killed.**%s\n\n"
	           "| mutant | class | what it breaks | killed by |\n|---|---|---|---|\n",
	        strrchr(o->list, '/') ? strrchr(o->list, '/') + 1 : o->list,
	        o->full ? " --mutants-full" : "", nsel, killed, considered,
	        o->full ? "" : " (runs stop at a mutant's first kill: one killing case each; "
	                       "--mutants-full lists them all)");
	for (int i = 0; i < n; i++) {
		fprintf(f, "| %s | %s | ", ms[i].name, ms[i].klass);
		md_escape(f, ms[i].what);
		fprintf(f, " | ");
		md_escape(f, !ms[i].ran ? "(not run)" : ms[i].kills ? ms[i].killed_by : "**SURVIVED**");
		fprintf(f, " |\n");
	}
	fclose(f);
	return 0;
}

int twc_mutation_run(const twc_mutation_opts *o, const twc_case *const *sel, int nsel,
                    const twc_iut_info *ref, twc_run_fn run, void *ctx)
{
	mutant *ms = NULL;
	int n = 0;
	if (read_list(o->list, &ms, &n))
		return 2;
	baselines bs = {0};
	snprintf(bs.cmd, sizeof(bs.cmd), "env -u TW_MUTANT %s", o->adapter);
	snprintf(bs.iut.name, sizeof(bs.iut.name), "unmutated");
	snprintf(bs.iut.impl, sizeof(bs.iut.impl), "tensorwire");
	snprintf(bs.iut.version, sizeof(bs.iut.version), "mutant build, none switched on");
	snprintf(bs.iut.profile, sizeof(bs.iut.profile), "none (mutation runs use no profile)");
	bs.iut.cmd = bs.cmd;
	bs.iut.available = true;
	int killed = 0, considered = 0, rc = 0;
	for (int i = 0; rc == 0 && i < n; i++) {
		mutant *m = &ms[i];
		if (o->only && !in_csv(o->only, m->name))
			continue;
		considered++;
		m->ran = true;
		snprintf(m->cmd, sizeof(m->cmd), "env TW_MUTANT=%s %s", m->name, o->adapter);
		snprintf(m->iut.name, sizeof(m->iut.name), "%.31s", m->name);
		snprintf(m->iut.impl, sizeof(m->iut.impl), "tensorwire");
		snprintf(m->iut.version, sizeof(m->iut.version), "mutant.%.50s", m->name);
		snprintf(m->iut.profile, sizeof(m->iut.profile), "none (mutation runs use no profile)");
		m->iut.cmd = m->cmd;
		m->iut.available = true;
		/* expected killers first, then the rest */
		for (int pass = 0; rc == 0 && pass < 2; pass++)
			for (int k = 0; rc == 0 && k < nsel && (o->full || !m->kills); k++)
				if (expected_killer(m, sel[k]->id) == (pass == 0))
					rc = run_case(o, m, sel[k], ref, &bs, run, ctx);
		killed += m->kills > 0;
		printf("%s - mutant %s (%s): %s%s\n", m->kills ? "ok" : "not ok", m->name, m->klass,
		       m->kills ? "killed by " : "SURVIVED every case",
		       m->kills ? m->killed_by : "");
		if (m->kills)
			printf("#   %d run(s), %.1f s; first kill: %.300s\n", m->runs, m->seconds,
			       m->first_reason);
		else
			printf("#   %d run(s), %.1f s: a missing or weak case; add or sharpen one "
			       "(never weaken the mutant)\n", m->runs, m->seconds);
		fflush(stdout);
	}
	if (rc) {
		fprintf(stderr, "tensorwire-conform: --mutants: out of memory\n");
		free(bs.v);
		free(ms);
		return 2;
	}
	printf("# mutation score: %d / %d killed\n", killed, considered);
	rc = killed == considered ? 0 : 1;
	if (o->report && write_report(o->report, o, ms, n, killed, considered, nsel))
		rc = 2;
	free(bs.v);
	free(ms);
	return rc;
}
