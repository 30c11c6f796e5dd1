/*
 * bad_input.c - tw-bad-input: sends each malformed input of reference §5.3
 * (tensorwire issue 2 item 9), and the other raw-peer wire cases of
 * harness/rawcases.c, from a raw TCP client (the harness) to a
 * listener of an implementation driven through its adapter (spec/agent.md),
 * and records what happened: did the process survive (exit status, signal,
 * stderr), what did the pending accept / read callbacks report, was the
 * connection dropped, does the listener still accept a well-formed client.
 *
 *   tw-bad-input --iut CMD [--name NAME] [--case ID]... [--expect stock|robust]
 *                [--markdown] [--window-ms N]
 *
 * --expect stock   compares with stock TensorPipe's documented behaviour
 *                  (docs/stock-bad-input.md): each case prints XFAIL when stock
 *                  did what the document says (crashing is expected there, not
 *                  approved), and FAIL when the observation differs, so the
 *                  document never silently goes stale.
 * --expect robust  what spec/wire.md asks of a conforming implementation: the
 *                  process survives, only that connection or pipe fails, and
 *                  the listener keeps accepting.
 * Without --expect it only observes. --markdown prints the table for docs/.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rawcases.h"

#define EXIT_SKIP 77

/* ---- main ----------------------------------------------------------------------------- */

static void md_escape(const char *s, char *out, size_t len)
{
	size_t k = 0;
	for (; *s && k + 2 < len; s++) {
		if (*s == '|' && k + 3 < len)
			out[k++] = '\\';
		out[k++] = *s == '\n' ? ' ' : *s;
	}
	out[k] = '\0';
}

int main(int argc, char **argv)
{
	const char *cmd = NULL, *name = "iut", *expect = NULL;
	const char *only[64];
	int nonly = 0, window_ms = 1500;
	bool markdown = false;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iut") && i + 1 < argc)
			cmd = argv[++i];
		else if (!strcmp(argv[i], "--name") && i + 1 < argc)
			name = argv[++i];
		else if (!strcmp(argv[i], "--expect") && i + 1 < argc)
			expect = argv[++i];
		else if (!strcmp(argv[i], "--case") && i + 1 < argc && nonly < 64)
			only[nonly++] = argv[++i];
		else if (!strcmp(argv[i], "--window-ms") && i + 1 < argc)
			window_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--markdown"))
			markdown = true;
		else if (!strcmp(argv[i], "--list")) {
			for (int k = 0; k < tw_raw_num_cases; k++)
				printf("%-24s %-5s %s\n", tw_raw_cases[k].id, tw_raw_cases[k].section,
				       tw_raw_cases[k].what);
			return 0;
		} else {
			fprintf(stderr, "usage: tw-bad-input --iut CMD [--name NAME] [--case ID]... "
			                "[--expect stock|robust] [--markdown] [--window-ms N] | --list\n"
			                "(see the comment at the top of bad_input.c)\n");
			return 2;
		}
	}
	if (!cmd || (expect && strcmp(expect, "stock") && strcmp(expect, "robust"))) {
		fprintf(stderr, "tw-bad-input: --iut CMD is required; --expect takes stock or robust\n");
		return 2;
	}
	if (!strncmp(cmd, "unavailable:", 12)) {
		printf("SKIP: %s\n", cmd + 12);
		return EXIT_SKIP;
	}
	int failures = 0, ran = 0;
	static tw_raw_obs results[64];
	bool did[64] = {false};
	for (int k = 0; k < tw_raw_num_cases && k < 64; k++) {
		const tw_raw_case *rc = &tw_raw_cases[k];
		bool want = nonly == 0;
		for (int j = 0; j < nonly; j++)
			want |= !strcmp(only[j], rc->id);
		if (!want)
			continue;
		tw_raw_obs *o = &results[k];
		did[k] = true;
		ran++;
		if (tw_raw_case_run(cmd, rc, window_ms, o) != 0) {
			printf("ERROR %s: %s\n", rc->id, o->note);
			failures++;
			continue;
		}
		printf("# %s: %s\n#   process: %s\n#   stderr: %s\n#   accept: %s\n#   pipe: %s\n"
		       "#   connection dropped: %s\n#   listener: %s\n#   class: %s%s%s%s%s\n",
		       rc->id, rc->what, o->process, o->stderr_line[0] ? o->stderr_line : "-",
		       o->accept[0] ? o->accept : "-", o->pipe[0] ? o->pipe : "-",
		       o->conn_dropped ? "yes" : "no", o->listener, o->klass,
		       o->check[0] ? "\n#   check: " : "", o->check, o->note[0] ? "\n#   note: " : "",
		       o->note);
		if (!expect)
			continue;
		if (!strcmp(expect, "stock")) {
			if (tw_raw_case_as_stock(rc, o)) {
				printf("XFAIL %s: %s did what docs/stock-bad-input.md records: %s%s%s\n", rc->id,
				       name, o->klass, o->stderr_line[0] ? ": " : "", o->stderr_line);
			} else {
				failures++;
				printf("FAIL %s: docs/stock-bad-input.md records '%s'%s%s, observed '%s' (%s)\n",
				       rc->id, rc->stock_class, rc->stock_stderr ? " with " : "",
				       rc->stock_stderr ? rc->stock_stderr : "", o->klass, o->stderr_line);
			}
		} else {
			char why[512];
			if (tw_raw_case_robust(rc, o, why, sizeof(why))) {
				printf("PASS %s: survived (%s); listener %s\n", rc->id, o->klass, o->listener);
			} else if (!rc->must) {
				printf("FAIL(SHOULD) %s: %s (a SHOULD: reported, not counted)\n", rc->id, why);
			} else {
				failures++;
				printf("FAIL %s: %s\n", rc->id, why);
			}
		}
	}
	if (markdown) {
		printf("\n| case | input | process | stderr (telling line) | accept callback | "
		       "pipe (read_descriptor/read) | connection dropped | listener afterwards | class |\n"
		       "|---|---|---|---|---|---|---|---|---|\n");
		for (int k = 0; k < tw_raw_num_cases && k < 64; k++) {
			if (!did[k])
				continue;
			const tw_raw_case *rc = &tw_raw_cases[k];
			tw_raw_obs *o = &results[k];
			char e1[320], e2[320], e3[320];
			md_escape(o->stderr_line[0] ? o->stderr_line : "-", e1, sizeof(e1));
			md_escape(o->accept[0] ? o->accept : "-", e2, sizeof(e2));
			md_escape(o->pipe[0] ? o->pipe : "-", e3, sizeof(e3));
			printf("| `%s` | %s | %s | `%s` | %s | %s | %s | %s | **%s** |\n", rc->id,
			       rc->what, o->process, e1, e2, e3, o->conn_dropped ? "yes" : "no",
			       o->listener, o->klass);
		}
	}
	if (ran == 0) {
		printf("SKIP: no case selected\n");
		return EXIT_SKIP;
	}
	printf("%d case(s), %d %s\n", ran, failures,
	       expect ? "not as expected" : "could not be run");
	return failures ? 1 : 0;
}
