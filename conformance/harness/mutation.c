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

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mutant {
	char name[64], klass[48], killers[512], what[512];
	tw_iut_info iut;
	char cmd[4096];
	char killed_by[2048]; /* the killing cases ("id [shape]"), ", "-separated */
	char first_reason[512];
	int runs, kills;
	bool ran;
	double seconds;
} mutant;

/* One run shape of a case for IUT m: 0 = m alone, 1 = m->m, 2 = m->ref, 3 = ref->m. */
static int shapes_of(const tw_case *c, int out[3])
{
	if (!c->cross && !c->pairwise) {
		out[0] = 0;
		return 1;
	}
	out[0] = 1;
	out[1] = 2;
	out[2] = 3;
	return 3;
}

static const char *const shape_names[] = {"", "mutant->mutant", "mutant->ref", "ref->mutant"};

static void set_run(tw_result *r, const tw_case *c, int shape, const tw_iut_info *m,
                    const tw_iut_info *ref)
{
	memset(r, 0, sizeof(*r));
	r->c = c;
	r->iut = shape == 3 ? ref : m;
	r->peer = shape == 0 ? NULL : shape == 2 ? ref : m;
}

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

static bool is_kill(tw_outcome_t o)
{
	return o == TW_FAIL || o == TW_ERROR || o == TW_TIMEOUT;
}

typedef struct baseline {
	const tw_case *c;
	int shape;
	tw_outcome_t outcome;
	char reason[256];
} baseline;

static void md_escape(FILE *f, const char *s)
{
	for (; *s; s++)
		if (*s == '|')
			fputs("\\|", f);
		else
			fputc(*s, f);
}

static int write_report(const char *path, const tw_mutation_opts *o, const mutant *ms, int n,
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

int tw_mutation_run(const tw_mutation_opts *o, const tw_case *const *sel, int nsel,
                    const tw_iut_info *ref, tw_run_fn run, void *ctx)
{
	mutant *ms = NULL;
	int n = 0;
	if (read_list(o->list, &ms, &n))
		return 2;
	int nbase = 0, capbase = 0;
	baseline *base = NULL;
	tw_iut_info basei;
	memset(&basei, 0, sizeof(basei));
	char basecmd[4096];
	snprintf(basecmd, sizeof(basecmd), "env -u TW_MUTANT %s", o->adapter);
	snprintf(basei.name, sizeof(basei.name), "unmutated");
	snprintf(basei.impl, sizeof(basei.impl), "tensorwire");
	snprintf(basei.version, sizeof(basei.version), "mutant build, none switched on");
	snprintf(basei.profile, sizeof(basei.profile), "none (mutation runs use no profile)");
	basei.cmd = basecmd;
	basei.available = true;
	int killed = 0, considered = 0;
	for (int i = 0; i < n; i++) {
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
		for (int pass = 0; pass < 2 && (o->full || !m->kills); pass++) {
			for (int k = 0; k < nsel && (o->full || !m->kills); k++) {
				if (expected_killer(m, sel[k]->id) != (pass == 0))
					continue;
				int shapes[3], ns = shapes_of(sel[k], shapes);
				for (int s = 0; s < ns && (o->full || !m->kills); s++) {
					tw_result r;
					set_run(&r, sel[k], shapes[s], &m->iut, ref);
					run(ctx, &r);
					m->runs++;
					m->seconds += r.seconds;
					bool kill = is_kill(r.outcome);
					if (kill) {
						/* the same case and shape without the defect */
						baseline *b = NULL;
						for (int j = 0; j < nbase && !b; j++)
							if (base[j].c == sel[k] && base[j].shape == shapes[s])
								b = &base[j];
						if (!b && nbase == capbase) {
							capbase = capbase ? 2 * capbase : 16;
							baseline *nb = realloc(base, (size_t)capbase * sizeof(*nb));
							if (!nb) {
								free(r.log);
								free(base);
								free(ms);
								return 2;
							}
							base = nb;
						}
						if (!b) {
							tw_result br;
							set_run(&br, sel[k], shapes[s], &basei, ref);
							run(ctx, &br);
							b = &base[nbase++];
							b->c = sel[k];
							b->shape = shapes[s];
							b->outcome = br.outcome;
							snprintf(b->reason, sizeof(b->reason), "%.250s", br.reason);
							free(br.log);
						}
						if (b->outcome != TW_PASS) {
							kill = false;
							fprintf(stderr, "tensorwire-conform: %s [%s] fails without a "
							                "mutant too (%s: %s): not counted as a kill\n",
							        sel[k]->id, shape_names[shapes[s]],
							        tw_outcome_name(b->outcome), b->reason);
						}
					}
					fprintf(stderr, "[mutant %s] %-36s %-15s %s (%.1f s)%s%.160s\n", m->name,
					        sel[k]->id, shape_names[shapes[s]], tw_outcome_name(r.outcome),
					        r.seconds, kill ? ": KILLED: " : "", kill ? r.reason : "");
					if (kill) {
						if (!m->kills)
							snprintf(m->first_reason, sizeof(m->first_reason), "%.500s",
							         r.reason);
						m->kills++;
						size_t l = strlen(m->killed_by);
						snprintf(m->killed_by + l, sizeof(m->killed_by) - l, "%s%s%s%s%s",
						         l ? ", " : "", sel[k]->id, shapes[s] ? " [" : "",
						         shape_names[shapes[s]], shapes[s] ? "]" : "");
					}
					free(r.log);
				}
			}
		}
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
	printf("# mutation score: %d / %d killed\n", killed, considered);
	int rc = killed == considered ? 0 : 1;
	if (o->report && write_report(o->report, o, ms, n, killed, considered, nsel))
		rc = 2;
	free(base);
	free(ms);
	return rc;
}
