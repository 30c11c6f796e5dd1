/*
 * fuzz.c - the wire fuzzer's loop (README.md, "The loop"): inputs for each
 * role in turn, the IUT restarted whenever an input killed it or left it
 * unable to serve, failures deduplicated by signature, each new signature
 * confirmed by a replay on a fresh IUT and minimised, leaks found by a clean
 * shutdown every N inputs and attributed by bisecting that batch, and the
 * number of distinct signatures over time written down so that saturation
 * can be seen.
 *
 * It must not judge an input itself (exec.c does) nor know anything about a
 * particular implementation.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "wf.h"

#define MAX_SIGS 256
#define MAX_CLASSES 12
#define MAX_BATCH 1000

typedef struct sigrec {
	char sig[256];
	wf_kind kind;
	wf_role role;
	long hits;
	long first_input;
	double first_s;
	char classes[MAX_CLASSES][128];
	int nclasses;
	char file[600];
	bool confirmed;
	char detail[1024];
	char mutation[256];
	char stopped[160];
	int min_steps, orig_steps;
} sigrec;

typedef struct rstate {
	bool on;
	wf_iut *iut;
	wf_script base;
	int sys_n, sys_next;
	uint64_t rng;
	long in_session;
	wf_script batch[MAX_BATCH];
	int nbatch;
	char baseline[2048];
	char version[160];
} rstate;

typedef struct fz {
	const wf_fuzz_opts *o;
	wf_fuzz_stats *st;
	rstate r[WF_SC_COUNT];
	sigrec sigs[MAX_SIGS];
	int nsigs;
	long long t0;
	FILE *progress;
} fz;

static double elapsed(const fz *f)
{
	return (double)(twc_now_ms() - f->t0) / 1000.0;
}

static bool out_of_budget(const fz *f)
{
	if (f->o->max_inputs > 0 && f->st->inputs >= f->o->max_inputs)
		return true;
	if (f->o->max_seconds > 0 && elapsed(f) >= f->o->max_seconds)
		return true;
	return false;
}

static const char *role_name(wf_role r)
{
	return r == WF_SERVER ? "server" : "client";
}

static void say(const fz *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const fz *f, const char *fmt, ...)
{
	if (f->o->quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	printf("[%7.1fs] ", elapsed(f));
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
}

static void batch_clear(rstate *r)
{
	for (int i = 0; i < r->nbatch; i++)
		wf_script_free(&r->batch[i]);
	r->nbatch = 0;
}

static void session_end(rstate *r)
{
	wf_iut_destroy(r->iut);
	r->iut = NULL;
	r->in_session = 0;
	batch_clear(r);
}

/* ---- confirming and minimising ------------------------------------------------------------ */

static bool reproduces(const fz *f, const wf_script *s, wf_kind kind, const char *sig)
{
	wf_result rr;
	char err[1024];
	if (wf_replay(f->o->iut_cmd, s, &f->o->run, &rr, err, sizeof(err)))
		return false;
	return rr.kind == kind && !strcmp(rr.signature, sig);
}

static int minimise(fz *f, wf_script *best, wf_kind kind, const char *sig)
{
	int attempts = 0;
	const int max = 24;
	wf_script cand;
	/* 1. nothing after the mutated step (and the close that follows it) */
	if (best->mutated_step >= 0) {
		int keep = best->mutated_step + 1;
		if (keep < best->nsteps && best->steps[keep].op == WF_CLOSE)
			keep++;
		if (keep < best->nsteps && !wf_script_copy(&cand, best)) {
			while (cand.nsteps > keep)
				wf_script_remove(&cand, cand.nsteps - 1);
			attempts++;
			if (reproduces(f, &cand, kind, sig)) {
				wf_script_free(best);
				*best = cand;
			} else {
				wf_script_free(&cand);
			}
		}
	} else {
		/* the shortest prefix that still does it */
		int lo = 1, hi = best->nsteps;
		while (lo < hi && attempts < max / 2) {
			int mid = (lo + hi) / 2;
			if (wf_script_copy(&cand, best))
				break;
			while (cand.nsteps > mid)
				wf_script_remove(&cand, cand.nsteps - 1);
			attempts++;
			bool ok = reproduces(f, &cand, kind, sig);
			wf_script_free(&cand);
			if (ok)
				hi = mid;
			else
				lo = mid + 1;
		}
		if (hi < best->nsteps && !wf_script_copy(&cand, best)) {
			while (cand.nsteps > hi)
				wf_script_remove(&cand, cand.nsteps - 1);
			wf_script_free(best);
			*best = cand;
		}
	}
	/* 2. every other step dropped in turn, last first */
	for (int i = best->nsteps - 1; i >= 0 && attempts < max; i--) {
		if (i == best->mutated_step)
			continue;
		if (f->o->max_seconds > 0 && elapsed(f) >= f->o->max_seconds)
			break;
		if (wf_script_copy(&cand, best))
			break;
		wf_script_remove(&cand, i);
		attempts++;
		if (reproduces(f, &cand, kind, sig)) {
			wf_script_free(best);
			*best = cand;
		} else {
			wf_script_free(&cand);
		}
	}
	/* 3. the mutated frame shortened (its tail dropped), while it still does it */
	int m = best->mutated_step;
	while (m >= 0 && m < best->nsteps && best->steps[m].op == WF_SEND &&
	       best->steps[m].len > 1 && attempts < max) {
		if (wf_script_copy(&cand, best))
			break;
		wf_step *st = &cand.steps[m];
		size_t nl = st->len / 2;
		bool inside_mark = false;
		for (int k = 0; k < st->nmarks; k++)
			inside_mark |= st->marks[k].off + st->marks[k].len > nl;
		if (inside_mark || wf_step_splice(st, nl, st->len - nl, NULL, 0)) {
			wf_script_free(&cand);
			break;
		}
		if (st->cut >= 0 && (size_t)st->cut > 8 + st->len) {
			wf_script_free(&cand);
			break;
		}
		attempts++;
		if (!reproduces(f, &cand, kind, sig)) {
			wf_script_free(&cand);
			break;
		}
		wf_script_free(best);
		*best = cand;
	}
	return attempts;
}

/* ---- recording ------------------------------------------------------------------------------ */

/* Failures are deduplicated per role: the same throw site reached from a
 * malformed hello and from a malformed BrochureAnswer are two findings, each
 * with its own reproducer and wire-suite case. */
static sigrec *find_sig(fz *f, wf_role role, const char *sig)
{
	for (int i = 0; i < f->nsigs; i++)
		if (f->sigs[i].role == role && !strcmp(f->sigs[i].sig, sig))
			return &f->sigs[i];
	return NULL;
}

static void add_class(sigrec *s, const char *klass)
{
	for (int i = 0; i < s->nclasses; i++)
		if (!strcmp(s->classes[i], klass))
			return;
	if (s->nclasses < MAX_CLASSES)
		snprintf(s->classes[s->nclasses++], sizeof(s->classes[0]), "%s", klass);
}

static void slug(const char *in, char *out, size_t len)
{
	size_t k = 0;
	bool dash = false;
	for (const char *p = in; *p && k + 1 < len && k < 48; p++) {
		char c = *p;
		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
			out[k++] = c;
			dash = false;
		} else if (c >= 'A' && c <= 'Z') {
			out[k++] = (char)(c - 'A' + 'a');
			dash = false;
		} else if (!dash && k > 0) {
			out[k++] = '-';
			dash = true;
		}
	}
	while (k > 0 && out[k - 1] == '-')
		k--;
	out[k] = '\0';
}

static void save_repro(fz *f, sigrec *s, wf_script *sc, const char *sub)
{
	if (!f->o->out_dir)
		return;
	char dir[512], name[160], sl[64];
	snprintf(dir, sizeof(dir), "%s/%s", f->o->out_dir, sub);
	mkdir(dir, 0777);
	slug(s->sig, sl, sizeof(sl));
	snprintf(name, sizeof(name), "%02d-%s-%s.twr", (int)(s - f->sigs) + 1, role_name(s->role), sl);
	snprintf(s->file, sizeof(s->file), "%s/%s", sub, name);
	char path[1200], comment[2400];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(sc->signature, sizeof(sc->signature), "%s", s->sig);
	snprintf(sc->origin, sizeof(sc->origin), "seed %" PRIu64 " input %ld (%.1f s into the run)",
	         f->o->seed, s->first_input, s->first_s);
	snprintf(comment, sizeof(comment),
	         "kind: %s\nIUT: %s (%s)\nwhat it did: %s\nscript: %s\n%s%s%s",
	         wf_kind_name(s->kind), f->o->iut_name ? f->o->iut_name : "?",
	         f->r[s->role].version, s->detail, s->stopped,
	         s->confirmed ? "confirmed: a replay on a fresh IUT gives the same signature"
	                      : "NOT confirmed: a replay on a fresh IUT did not give the same signature",
	         s->orig_steps ? "; " : "", "");
	if (s->orig_steps) {
		size_t k = strlen(comment);
		snprintf(comment + k, sizeof(comment) - k, "minimised from %d to %d steps",
		         s->orig_steps, s->min_steps);
	}
	if (wf_script_save(sc, path, comment))
		say(f, "cannot write %s: %s", path, strerror(errno));
}

static void progress_line(fz *f, const sigrec *s)
{
	if (!f->progress)
		return;
	fprintf(f->progress, "%.1f\t%ld\t%s\t%s\t%s\n", elapsed(f), f->st->inputs,
	        role_name(s->role), wf_kind_name(s->kind), s->sig);
	fflush(f->progress);
}

static void record(fz *f, wf_role role, const wf_script *input, const wf_result *res,
                   bool leak_confirmed)
{
	sigrec *s = find_sig(f, role, res->signature);
	if (s) {
		s->hits++;
		add_class(s, input->klass);
		return;
	}
	if (f->nsigs == MAX_SIGS)
		return;
	s = &f->sigs[f->nsigs++];
	memset(s, 0, sizeof(*s));
	snprintf(s->sig, sizeof(s->sig), "%s", res->signature);
	s->kind = res->kind;
	s->role = role;
	s->hits = 1;
	s->first_input = f->st->inputs;
	s->first_s = elapsed(f);
	add_class(s, input->klass);
	snprintf(s->detail, sizeof(s->detail), "%s", res->kind == WF_K_PENDING ? res->pending
	                                                                        : res->detail);
	snprintf(s->mutation, sizeof(s->mutation), "%s", input->mutation);
	snprintf(s->stopped, sizeof(s->stopped), "%s", res->stopped);
	say(f, "NEW %s [%s] %s (input %ld, class %s)", wf_kind_name(res->kind), role_name(role),
	    res->signature, f->st->inputs, input->klass);
	progress_line(f, s);
	if (res->kind == WF_K_PENDING) {
		f->st->pending_sigs++;
		wf_script keep;
		if (!wf_script_copy(&keep, input)) {
			s->confirmed = reproduces(f, &keep, res->kind, res->signature);
			save_repro(f, s, &keep, "pending");
			wf_script_free(&keep);
		}
		return;
	}
	f->st->must_sigs++;
	f->st->findings++;
	wf_script best;
	if (wf_script_copy(&best, input))
		return;
	s->confirmed = leak_confirmed;
	for (int t = 0; t < 2 && !s->confirmed; t++)
		s->confirmed = reproduces(f, &best, res->kind, res->signature);
	if (!s->confirmed)
		f->st->unconfirmed++;
	if (s->confirmed && f->o->minimise &&
	    !(f->o->max_seconds > 0 && elapsed(f) >= f->o->max_seconds)) {
		s->orig_steps = best.nsteps;
		int n = minimise(f, &best, res->kind, res->signature);
		s->min_steps = best.nsteps;
		say(f, "    minimised: %d -> %d steps (%d replays)", s->orig_steps, s->min_steps, n);
	}
	save_repro(f, s, &best, s->confirmed ? "findings" : "unconfirmed");
	wf_script_free(&best);
}

/* ---- leaks ------------------------------------------------------------------------------------- */

/* Runs inputs [lo, hi) of the batch on a fresh IUT, shuts it down cleanly,
 * and returns the leak signatures not in the baseline (count). */
static int batch_leaks(fz *f, rstate *r, int lo, int hi, char *leaks, size_t len)
{
	char err[1024];
	leaks[0] = '\0';
	wf_iut *iut = wf_iut_start(f->o->iut_cmd, r->base.role, &f->o->run, err, sizeof(err));
	if (!iut)
		return -1;
	for (int i = lo; i < hi; i++) {
		wf_result res;
		wf_run_input(iut, &r->batch[i], &res);
		if (wf_result_failed(&res)) {
			wf_iut_destroy(iut);
			return -1;
		}
	}
	char status[64], all[2048];
	(void)wf_iut_stop(iut, status, sizeof(status));
	int n = wf_sig_leaks(wf_iut_stderr(iut), all, sizeof(all));
	wf_iut_destroy(iut);
	int k = 0;
	for (char *save = NULL, *t = n > 0 ? strtok_r(all, "\n", &save) : NULL; t;
	     t = strtok_r(NULL, "\n", &save)) {
		if (strstr(r->baseline, t))
			continue;
		size_t l = strlen(leaks);
		snprintf(leaks + l, len - l, "%s%s", l ? "\n" : "", t);
		k++;
	}
	return k;
}

static void check_leaks(fz *f, rstate *r)
{
	char status[64], all[2048];
	(void)wf_iut_stop(r->iut, status, sizeof(status));
	int n = wf_sig_leaks(wf_iut_stderr(r->iut), all, sizeof(all));
	wf_iut_destroy(r->iut);
	r->iut = NULL;
	r->in_session = 0;
	char fresh[2048] = "";
	for (char *save = NULL, *t = n > 0 ? strtok_r(all, "\n", &save) : NULL; t;
	     t = strtok_r(NULL, "\n", &save)) {
		if (!strstr(r->baseline, t) && !find_sig(f, r->base.role, t)) {
			size_t l = strlen(fresh);
			snprintf(fresh + l, sizeof(fresh) - l, "%s%s", l ? "\n" : "", t);
		}
	}
	if (!fresh[0]) {
		batch_clear(r);
		return;
	}
	say(f, "leak after a batch of %d inputs: bisecting", r->nbatch);
	/* assume one input causes it: halve the batch until one is left */
	int lo = 0, hi = r->nbatch;
	char leaks[2048];
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;
		int k = batch_leaks(f, r, lo, mid, leaks, sizeof(leaks));
		if (k > 0)
			hi = mid;
		else
			lo = mid;
	}
	wf_result res;
	memset(&res, 0, sizeof(res));
	char err[1024];
	bool ok = lo < r->nbatch && !wf_replay(f->o->iut_cmd, &r->batch[lo], &f->o->run, &res, err,
	                                       sizeof(err)) &&
	          res.kind == WF_K_LEAK;
	if (ok) {
		record(f, r->base.role, &r->batch[lo], &res, true);
	} else {
		/* not attributable to one input: record the batch's first leak */
		memset(&res, 0, sizeof(res));
		res.kind = WF_K_LEAK;
		snprintf(res.signature, sizeof(res.signature), "%.*s", (int)strcspn(fresh, "\n"), fresh);
		snprintf(res.detail, sizeof(res.detail), "after a batch of %d inputs; no single input "
		         "reproduces it alone", r->nbatch);
		record(f, r->base.role, &r->batch[r->nbatch - 1], &res, false);
	}
	batch_clear(r);
}

/* ---- the loop ----------------------------------------------------------------------------------- */

static int start_session(fz *f, rstate *r, char *err, size_t errlen)
{
	r->iut = wf_iut_start(f->o->iut_cmd, r->base.role, &f->o->run, err, errlen);
	if (!r->iut) {
		/* once more: a start can fail when the previous process is still going */
		r->iut = wf_iut_start(f->o->iut_cmd, r->base.role, &f->o->run, err, errlen);
		if (!r->iut)
			return -1;
	}
	f->st->restarts++;
	r->in_session = 0;
	return 0;
}

static void write_summary(fz *f)
{
	if (!f->o->out_dir)
		return;
	char path[600];
	snprintf(path, sizeof(path), "%s/summary.md", f->o->out_dir);
	FILE *o = fopen(path, "w");
	if (!o)
		return;
	fprintf(o, "# wire fuzzer run\n\n");
	fprintf(o, "- IUT: %s (`%s`)\n", f->o->iut_name ? f->o->iut_name : "?", f->o->iut_cmd);
	for (int k = 0; k < WF_SC_COUNT; k++)
		if (f->r[k].on)
			fprintf(o, "- scenario %s: %s; %d systematic mutations, %d run\n",
			        wf_scenario_name((wf_scenario)k), f->r[k].version, f->r[k].sys_n,
			        f->r[k].sys_next < f->r[k].sys_n ? f->r[k].sys_next : f->r[k].sys_n);
	fprintf(o, "- seed %" PRIu64 ", %ld inputs in %.0f s (%.1f/s), %ld IUT starts\n", f->o->seed,
	        f->st->inputs, f->st->seconds, f->st->seconds > 0 ? f->st->inputs / f->st->seconds : 0,
	        f->st->restarts);
	fprintf(o, "- step bound %d ms, settle bound %d ms, good-check bound %d ms, leak check every "
	        "%d inputs\n\n", f->o->run.step_ms, f->o->run.settle_ms, f->o->run.check_ms,
	        f->o->leak_every);
	fprintf(o, "| # | kind | role | signature | hits | first (input, s) | confirmed | reproducer "
	        "| classes |\n|---|---|---|---|---|---|---|---|---|\n");
	for (int i = 0; i < f->nsigs; i++) {
		const sigrec *s = &f->sigs[i];
		fprintf(o, "| %d | %s | %s | `%s` | %ld | %ld, %.0f | %s | %s | ", i + 1,
		        wf_kind_name(s->kind), role_name(s->role), s->sig, s->hits, s->first_input,
		        s->first_s, s->confirmed ? "yes" : "no", s->file[0] ? s->file : "-");
		for (int c = 0; c < s->nclasses; c++)
			fprintf(o, "%s`%s`", c ? ", " : "", s->classes[c]);
		fprintf(o, " |\n");
	}
	fprintf(o, "\n## Details\n\n");
	for (int i = 0; i < f->nsigs; i++) {
		const sigrec *s = &f->sigs[i];
		fprintf(o, "%d. `%s`\n   - first input: %s\n   - observed: %s\n   - script: %s\n", i + 1,
		        s->sig, s->mutation, s->detail, s->stopped);
	}
	fclose(o);
}

int wf_fuzz(const wf_fuzz_opts *o, wf_fuzz_stats *st, char *err, size_t errlen)
{
	fz *f = calloc(1, sizeof(*f));
	if (!f) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int rc = -1;
	memset(st, 0, sizeof(*st));
	f->o = o;
	f->st = st;
	f->t0 = twc_now_ms();
	if (o->out_dir) {
		mkdir(o->out_dir, 0777);
		char path[600];
		snprintf(path, sizeof(path), "%s/progress.tsv", o->out_dir);
		f->progress = fopen(path, "w");
		if (f->progress)
			fprintf(f->progress, "elapsed_s\tinputs\trole\tkind\tsignature\n");
	}
	for (int k = 0; k < WF_SC_COUNT; k++) {
		rstate *r = &f->r[k];
		r->on = o->scenarios[k];
		if (!r->on)
			continue;
		wf_role role = wf_scenario_role((wf_scenario)k);
		if (wf_build_scenario(&r->base, (wf_scenario)k, "127.0.0.1:65535", false)) {
			snprintf(err, errlen, "cannot build the base scenario");
			goto out;
		}
		r->sys_n = o->systematic ? wf_mutate_count(&r->base) : 0;
		r->sys_next = o->start < r->sys_n ? o->start : r->sys_n;
		r->rng = o->seed * 4 + (uint64_t)k + 1;
		/* the base scenario must pass on a fresh IUT, and what a clean exit
		 * leaks without any input is the baseline */
		char why[1024];
		if (start_session(f, r, err, errlen))
			goto out;
		snprintf(r->version, sizeof(r->version), "%s", wf_iut_version(r->iut));
		if (wf_good_check(r->iut, why, sizeof(why))) {
			snprintf(err, errlen, "scenario %s: the IUT fails the well-formed base scenario on "
			         "a fresh start, so no input could be judged: %s",
			         wf_scenario_name((wf_scenario)k), why);
			goto out;
		}
		char status[64];
		(void)wf_iut_stop(r->iut, status, sizeof(status));
		(void)wf_sig_leaks(wf_iut_stderr(r->iut), r->baseline, sizeof(r->baseline));
		wf_iut_destroy(r->iut);
		r->iut = NULL;
		(void)role;
		say(f, "scenario %s: %s; base %d steps, %d systematic mutations%s%s",
		    wf_scenario_name((wf_scenario)k), r->version, r->base.nsteps, r->sys_n,
		    r->baseline[0] ? "; baseline leaks: " : "", r->baseline);
	}
	long long next_report = twc_now_ms() + 30000;
	int turn = 0;
	while (!out_of_budget(f)) {
		int k = -1;
		for (int t = 0; t < WF_SC_COUNT && k < 0; t++) {
			int c = (turn + t) % WF_SC_COUNT;
			if (f->r[c].on)
				k = c;
		}
		turn = k + 1;
		if (k < 0)
			break;
		rstate *r = &f->r[k];
		wf_role role = r->base.role;
		if (!r->iut && start_session(f, r, err, errlen))
			goto out;
		wf_script in;
		bool sys = r->sys_next < r->sys_n;
		int ok;
		if (sys)
			ok = wf_mutate_nth(&r->base, r->sys_next++, &in);
		else
			ok = wf_mutate_random(&r->base, &r->rng, &in);
		if (ok)
			continue;
		if (k == WF_SC_SERVER_EXT) {
			char cls[sizeof(in.klass)];
			snprintf(cls, sizeof(cls), "ext:%.120s", in.klass);
			memcpy(in.klass, cls, sizeof(in.klass));
		}
		wf_result res;
		wf_run_input(r->iut, &in, &res);
		st->inputs++;
		r->in_session++;
		if (o->verbose_inputs) {
			printf("input %ld [%s] %s: %s -> %s%s%s\n", st->inputs,
			       wf_scenario_name((wf_scenario)k),
			       in.klass, in.mutation, wf_kind_name(res.kind), res.signature[0] ? " " : "",
			       res.signature);
			printf("    script: %s\n", res.stopped);
		}
		if (wf_result_failed(&res)) {
			session_end(r);
			record(f, role, &in, &res, false);
			wf_script_free(&in);
		} else {
			if (res.kind == WF_K_PENDING)
				record(f, role, &in, &res, false);
			if (o->leak_every > 0 && r->nbatch < MAX_BATCH)
				r->batch[r->nbatch++] = in;
			else
				wf_script_free(&in);
			if (o->leak_every > 0 && r->in_session >= o->leak_every)
				check_leaks(f, r);
		}
		if (twc_now_ms() >= next_report) {
			next_report = twc_now_ms() + 30000;
			say(f, "%ld inputs (%.1f/s), %ld starts, %d MUST signatures, %ld SHOULD; "
			    "systematic server %d/%d client %d/%d server-ext %d/%d", st->inputs,
			    st->inputs / elapsed(f), st->restarts, st->must_sigs, st->pending_sigs,
			    f->r[0].sys_next, f->r[0].sys_n, f->r[1].sys_next, f->r[1].sys_n,
			    f->r[2].sys_next, f->r[2].sys_n);
		}
	}
	for (int k = 0; k < WF_SC_COUNT; k++)
		if (f->r[k].iut && o->leak_every > 0)
			check_leaks(f, &f->r[k]);
	rc = 0;
out:
	st->seconds = elapsed(f);
	if (rc == 0) {
		write_summary(f);
		if (f->progress)
			fprintf(f->progress, "%.1f\t%ld\t-\tend\t%d MUST signatures, %ld SHOULD\n",
			        st->seconds, st->inputs, st->must_sigs, st->pending_sigs);
		say(f, "done: %ld inputs in %.0f s, %ld starts, %d MUST signatures (%ld unconfirmed), "
		    "%ld SHOULD", st->inputs, st->seconds, st->restarts, st->must_sigs, st->unconfirmed,
		    st->pending_sigs);
		for (int i = 0; i < f->nsigs; i++)
			say(f, "  %-8s %-6s %5ld hits  %s", wf_kind_name(f->sigs[i].kind),
			    role_name(f->sigs[i].role), f->sigs[i].hits, f->sigs[i].sig);
	}
	if (f->progress)
		fclose(f->progress);
	for (int k = 0; k < WF_SC_COUNT; k++) {
		session_end(&f->r[k]);
		wf_script_free(&f->r[k].base);
	}
	free(f);
	return rc;
}
