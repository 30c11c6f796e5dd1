/*
 * interop.c - tw-interop, the interop driver: pairs two adapters (spec/agent.md)
 * as client and server, runs one interop case (suites/interop/cases.c) in
 * both directions over one pipe, and checks what a user would check: every
 * buffer arrives with the checksum of the bytes the sender generated, the
 * descriptor fields are those the sender described, every callback fires
 * exactly once, both sides report the chosen transport and channel, and both
 * adapters exit cleanly (no crash, no sanitizer report).
 *
 *   tw-interop list
 *   tw-interop run CASE --client CMD --server CMD
 *   tw-interop matrix [--iut NAME=CMD]... [--case CASE]... [--large]
 *
 * It must not trust an adapter's own verdicts: expected checksums are
 * computed here from the seeds the harness chose.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adapter_proc.h"
#include "agent.h"
#include "cases.h"
#include "session.h"

#ifndef TW_IUT_OURS
#define TW_IUT_OURS "unavailable:this tw-interop was built without the tensorwire adapter"
#endif
#ifndef TW_IUT_STOCK
#define TW_IUT_STOCK "unavailable:this tw-interop was built without the stock TensorPipe adapter"
#endif

#define EXIT_SKIP 77
#define REASON_MAX 4096

static int run_case(const tw_interop_case *c, const char *ccmd, const char *scmd,
                    const char *cname, const char *sname, int wait_s, const char *expect_fail)
{
	char reason[TW_REASON_MAX];
	int rc = tw_interop_run_case(c, ccmd, scmd, cname, sname, wait_s, reason, sizeof(reason),
	                             NULL, NULL);
	if (rc == EXIT_SKIP) {
		printf("SKIP: %s\n", reason);
		return EXIT_SKIP;
	}
	if (expect_fail) {
		/* Harness self-test: the case must fail, for the expected reason. */
		if (rc == 0) {
			printf("FAIL: expected a failure mentioning '%s', but the case passed\n",
			       expect_fail);
			return 1;
		}
		if (!strstr(reason, expect_fail)) {
			printf("FAIL: expected a failure mentioning '%s', got: %s\n", expect_fail, reason);
			return 1;
		}
		printf("PASS: failed as expected: %s\n", reason);
		return 0;
	}
	if (rc == 0) {
		printf("PASS: %s %s->%s\n", c->id, cname, sname);
		return 0;
	}
	printf("FAIL: %s\n", reason);
	return 1;
}

/* ---- matrix ------------------------------------------------------------------- */

typedef struct iut {
	char name[32];
	const char *cmd;
} iut;

typedef struct cell {
	char outcome[8];      /* PASS, FAIL, SKIP */
	char reason[512];
	double seconds;
} cell;

static void run_child(const char *self, const char *case_id, const iut *cl, const iut *sv,
                      cell *out)
{
	char *cmd = NULL;
	char *qc = NULL, *qs = NULL;
	/* Quote commands for /bin/sh: wrap in single quotes, escaping embedded ones. */
	const char *srcs[2] = {cl->cmd, sv->cmd};
	char **dsts[2] = {&qc, &qs};
	for (int i = 0; i < 2; i++) {
		size_t n = strlen(srcs[i]);
		char *q = malloc(4 * n + 3), *p = q;
		*p++ = '\'';
		for (const char *s = srcs[i]; *s; s++) {
			if (*s == '\'') {
				memcpy(p, "'\\''", 4);
				p += 4;
			} else {
				*p++ = *s;
			}
		}
		*p++ = '\'';
		*p = '\0';
		*dsts[i] = q;
	}
	if (asprintf(&cmd, "'%s' run %s --client %s --server %s --client-name %s --server-name %s 2>&1",
	             self, case_id, qc, qs, cl->name, sv->name) < 0)
		cmd = NULL;
	free(qc);
	free(qs);
	snprintf(out->outcome, sizeof(out->outcome), "FAIL");
	snprintf(out->reason, sizeof(out->reason), "could not run the case");
	long long t0 = tw_now_ms();
	FILE *f = cmd ? popen(cmd, "r") : NULL;
	free(cmd);
	if (!f)
		return;
	char line[REASON_MAX + 64];
	char last[REASON_MAX + 64] = "";
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "PASS", 4) || !strncmp(line, "FAIL", 4) || !strncmp(line, "SKIP", 4))
			snprintf(last, sizeof(last), "%s", line);
	}
	int st = pclose(f);
	out->seconds = (double)(tw_now_ms() - t0) / 1000.0;
	last[strcspn(last, "\n")] = '\0';
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	if (code == 0 && !strncmp(last, "PASS", 4)) {
		snprintf(out->outcome, sizeof(out->outcome), "PASS");
		out->reason[0] = '\0';
	} else if (code == EXIT_SKIP) {
		snprintf(out->outcome, sizeof(out->outcome), "SKIP");
		snprintf(out->reason, sizeof(out->reason), "%.500s", last[0] ? last + 6 : "(no reason)");
	} else {
		snprintf(out->reason, sizeof(out->reason), "%.500s",
		         last[0] ? (strncmp(last, "FAIL: ", 6) ? last : last + 6)
		                 : "the driver died without a verdict");
	}
}

static int matrix(iut *iuts, int niut, const char **cases, int ncases, bool large)
{
	char self[PATH_MAX];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl < 0) {
		perror("tw-interop matrix: readlink /proc/self/exe");
		return 1;
	}
	self[sl] = '\0';
	const tw_interop_case *sel[64];
	int nsel = 0;
	for (int i = 0; i < tw_interop_num_cases && nsel < 64; i++) {
		const tw_interop_case *c = &tw_interop_cases[i];
		bool wanted = ncases == 0 ? (large || !c->large) : false;
		for (int k = 0; k < ncases; k++)
			wanted |= strcmp(cases[k], c->id) == 0;
		if (wanted)
			sel[nsel++] = c;
	}
	/* Pairs: each ordered pair of distinct IUTs first, then each IUT with itself. */
	int pc[64], ps[64], npair = 0;
	for (int a = 0; a < niut; a++)
		for (int b = 0; b < niut; b++)
			if (a != b && npair < 64) {
				pc[npair] = a;
				ps[npair++] = b;
			}
	for (int a = 0; a < niut && npair < 64; a++) {
		pc[npair] = a;
		ps[npair++] = a;
	}
	cell *cells = calloc((size_t)(nsel * npair), sizeof(*cells));
	if (!cells)
		return 1;
	int total = nsel * npair, done = 0, fails = 0, passes = 0;
	for (int i = 0; i < nsel; i++) {
		for (int p = 0; p < npair; p++) {
			cell *ce = &cells[i * npair + p];
			run_child(self, sel[i]->id, &iuts[pc[p]], &iuts[ps[p]], ce);
			done++;
			fails += !strcmp(ce->outcome, "FAIL");
			passes += !strcmp(ce->outcome, "PASS");
			printf("[%d/%d] %-18s %s->%s: %s (%.1f s)%s%s\n", done, total, sel[i]->id,
			       iuts[pc[p]].name, iuts[ps[p]].name, ce->outcome, ce->seconds,
			       ce->reason[0] ? ": " : "", ce->reason);
			fflush(stdout);
		}
	}
	/* The table, with numbered notes for every cell that is not PASS. */
	char notes[64][512];
	int nnotes = 0;
	printf("\ninterop matrix (columns: client->server; every case sends both ways on one pipe)\n");
	printf("%-18s", "case");
	for (int p = 0; p < npair; p++) {
		char h[80];
		snprintf(h, sizeof(h), "%s->%s", iuts[pc[p]].name, iuts[ps[p]].name);
		printf(" %-14s", h);
	}
	printf("\n");
	for (int i = 0; i < nsel; i++) {
		printf("%-18s", sel[i]->id);
		for (int p = 0; p < npair; p++) {
			cell *ce = &cells[i * npair + p];
			char txt[32];
			if (!strcmp(ce->outcome, "PASS")) {
				snprintf(txt, sizeof(txt), "PASS");
			} else {
				int k;
				for (k = 0; k < nnotes; k++)
					if (!strcmp(notes[k], ce->reason))
						break;
				if (k == nnotes && nnotes < 64)
					snprintf(notes[nnotes++], sizeof(notes[0]), "%s", ce->reason);
				snprintf(txt, sizeof(txt), "%s[%d]", ce->outcome, k + 1);
			}
			printf(" %-14s", txt);
		}
		printf("\n");
	}
	for (int k = 0; k < nnotes; k++)
		printf("  [%d] %s\n", k + 1, notes[k]);
	printf("%d passed, %d failed, %d skipped\n", passes, fails, total - passes - fails);
	free(cells);
	return fails ? 1 : 0;
}

/* ---- main ----------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
	        "usage:\n"
	        "  tw-interop list\n"
	        "      the interop cases, one per line: id, large or not, title\n"
	        "  tw-interop run CASE --client CMD --server CMD [--client-name N] [--server-name N]\n"
	        "                 [--wait-s S] [--expect-fail TEXT]\n"
	        "      run one case: CMD starts an adapter that speaks spec/agent.md (run by\n"
	        "      /bin/sh). Exit 0 = PASS, 1 = FAIL, 77 = SKIP (a CMD of the form\n"
	        "      'unavailable:REASON' skips with REASON). --wait-s bounds each wait\n"
	        "      (default: the case's own); --expect-fail inverts the verdict for the\n"
	        "      harness self-tests: PASS only if the case fails with TEXT in its reason.\n"
	        "  tw-interop matrix [--iut NAME=CMD]... [--case CASE]... [--large]\n"
	        "      run every case for every ordered pair of IUTs (each in its own process)\n"
	        "      and print the matrix case x client->server -> PASS/FAIL/SKIP(reason).\n"
	        "      Without --iut: ours=%s\n"
	        "                     stock=%s\n"
	        "      --large adds the multi-GiB cases (about 10 GiB of memory).\n"
	        "Exit status of matrix: 0 when nothing failed (skips allowed), 1 otherwise.\n",
	        TW_IUT_OURS, TW_IUT_STOCK);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "list")) {
		for (int i = 0; i < tw_interop_num_cases; i++)
			printf("%-18s %-6s %s\n", tw_interop_cases[i].id,
			       tw_interop_cases[i].large ? "large" : "-", tw_interop_cases[i].title);
		return 0;
	}
	if (!strcmp(argv[1], "run") && argc >= 3) {
		const tw_interop_case *c = tw_interop_case_find(argv[2]);
		const char *ccmd = NULL, *scmd = NULL, *cname = "client", *sname = "server";
		const char *expect_fail = NULL;
		int wait_s = 0;
		for (int i = 3; i + 1 < argc; i += 2) {
			if (!strcmp(argv[i], "--client"))
				ccmd = argv[i + 1];
			else if (!strcmp(argv[i], "--server"))
				scmd = argv[i + 1];
			else if (!strcmp(argv[i], "--client-name"))
				cname = argv[i + 1];
			else if (!strcmp(argv[i], "--server-name"))
				sname = argv[i + 1];
			else if (!strcmp(argv[i], "--expect-fail"))
				expect_fail = argv[i + 1];
			else if (!strcmp(argv[i], "--wait-s"))
				wait_s = atoi(argv[i + 1]);
			else {
				usage(stderr);
				return 2;
			}
		}
		if (!c || !ccmd || !scmd) {
			fprintf(stderr, "tw-interop run: %s\n", c ? "--client and --server are required"
			                                          : "unknown case (see tw-interop list)");
			return 2;
		}
		return run_case(c, ccmd, scmd, cname, sname, wait_s, expect_fail);
	}
	if (!strcmp(argv[1], "matrix")) {
		iut iuts[8];
		int niut = 0;
		const char *cases[64];
		int ncases = 0;
		bool large = false;
		for (int i = 2; i < argc; i++) {
			if (!strcmp(argv[i], "--large")) {
				large = true;
			} else if (!strcmp(argv[i], "--case") && i + 1 < argc && ncases < 64) {
				cases[ncases++] = argv[++i];
			} else if (!strcmp(argv[i], "--iut") && i + 1 < argc && niut < 8) {
				const char *spec = argv[++i];
				const char *eq = strchr(spec, '=');
				if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof(iuts[0].name)) {
					fprintf(stderr, "tw-interop matrix: --iut wants NAME=CMD\n");
					return 2;
				}
				snprintf(iuts[niut].name, sizeof(iuts[0].name), "%.*s", (int)(eq - spec), spec);
				iuts[niut++].cmd = eq + 1;
			} else {
				usage(stderr);
				return 2;
			}
		}
		if (niut == 0) {
			snprintf(iuts[0].name, sizeof(iuts[0].name), "ours");
			iuts[0].cmd = TW_IUT_OURS;
			snprintf(iuts[1].name, sizeof(iuts[1].name), "stock");
			iuts[1].cmd = TW_IUT_STOCK;
			niut = 2;
		}
		return matrix(iuts, niut, cases, ncases, large);
	}
	usage(stderr);
	return 2;
}
