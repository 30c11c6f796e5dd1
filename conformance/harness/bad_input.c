/*
 * bad_input.c - tw-bad-input: the recorder behind docs/stock-bad-input.md.
 * It sends each raw-peer wire case of harness/rawcases.c (the malformed
 * inputs of reference §5.3 and the other wire rules a raw client can probe)
 * to a listener of an implementation driven through its adapter
 * (spec/agent.md), and records what happened: did the process survive (exit
 * status, signal, stderr), what did the pending accept / read callbacks
 * report, was the connection dropped, does the listener still accept a
 * well-formed client.
 *
 *   tw-bad-input --iut CMD [--case ID]... [--markdown] [--window-ms N] | --list
 *
 * It observes and judges nothing: tensorwire-conform's wire suite runs the
 * same cases and judges them (what spec/wire.md asks, and for stock
 * TensorPipe also whether it still fails the way the document records).
 * --markdown prints the document's table.
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
	const char *cmd = NULL;
	int window_ms = 1500;
	bool markdown = false;
	setvbuf(stdout, NULL, _IOLBF, 0);
	bool *want = calloc((size_t)tw_raw_num_cases, sizeof(*want));
	tw_raw_obs *results = calloc((size_t)tw_raw_num_cases, sizeof(*results));
	bool *did = calloc((size_t)tw_raw_num_cases, sizeof(*did));
	if (!want || !results || !did) {
		fprintf(stderr, "tw-bad-input: out of memory\n");
		return 2;
	}
	bool some = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iut") && i + 1 < argc) {
			cmd = argv[++i];
		} else if (!strcmp(argv[i], "--case") && i + 1 < argc) {
			const char *id = argv[++i];
			const tw_raw_case *rc = tw_raw_case_find(id);
			if (!rc) {
				fprintf(stderr, "tw-bad-input: no raw case '%s' (--list)\n", id);
				return 2;
			}
			want[rc - tw_raw_cases] = some = true;
		} else if (!strcmp(argv[i], "--window-ms") && i + 1 < argc) {
			window_ms = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--markdown")) {
			markdown = true;
		} else if (!strcmp(argv[i], "--list")) {
			for (int k = 0; k < tw_raw_num_cases; k++)
				printf("%-24s %-5s %s\n", tw_raw_cases[k].id, tw_raw_cases[k].section,
				       tw_raw_cases[k].what);
			return 0;
		} else {
			fprintf(stderr, "usage: tw-bad-input --iut CMD [--case ID]... [--markdown] "
			                "[--window-ms N] | --list\n"
			                "(see the comment at the top of bad_input.c)\n");
			return 2;
		}
	}
	if (!cmd) {
		fprintf(stderr, "tw-bad-input: --iut CMD is required\n");
		return 2;
	}
	if (!strncmp(cmd, "unavailable:", 12)) {
		printf("SKIP: %s\n", cmd + 12);
		return EXIT_SKIP;
	}
	int failures = 0;
	for (int k = 0; k < tw_raw_num_cases; k++) {
		const tw_raw_case *rc = &tw_raw_cases[k];
		if (some && !want[k])
			continue;
		tw_raw_obs *o = &results[k];
		did[k] = true;
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
	}
	if (markdown) {
		printf("\n| case | input | process | stderr (telling line) | accept callback | "
		       "pipe (read_descriptor/read) | connection dropped | listener afterwards | class |\n"
		       "|---|---|---|---|---|---|---|---|---|\n");
		for (int k = 0; k < tw_raw_num_cases; k++) {
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
	free(want);
	free(results);
	free(did);
	printf("%d case(s) could not be run\n", failures);
	return failures ? 1 : 0;
}
