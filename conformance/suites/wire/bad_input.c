/*
 * bad_input.c - tw-bad-input: the recorder behind docs/stock-bad-input.md.
 * It sends each raw-client case of the wire suite (wire.c: the malformed
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

#include "rawserver.h"
#include "suites.h"

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

/* "close_before_hello" for "wire.close_before_hello", as the document names it */
static const char *short_id(const twc_case *c)
{
	return strncmp(c->id, "wire.", 5) ? c->id : c->id + 5;
}

/* the input in words: the description without its "raw client: " */
static const char *what(const twc_case *c)
{
	static const char prefix[] = "raw client: ";
	return strncmp(c->description, prefix, sizeof(prefix) - 1)
	           ? c->description
	           : c->description + sizeof(prefix) - 1;
}

static int find_case(const twc_case *cases, int n, const char *id)
{
	for (int k = 0; k < n; k++)
		if (!strcmp(cases[k].id, id) || !strcmp(short_id(&cases[k]), id))
			return k;
	return -1;
}

/* One raw case's run: whether it was asked for and run, and what it saw. */
typedef struct row {
	bool want, did;
	twc_raw_obs obs;
} row;

/* The wire suite's raw cases and a row for each. */
typedef struct table {
	const twc_case *cases;
	int n;
	row *rows;
} table;

static void print_markdown(const table *t)
{
	printf("\n| case | input | process | stderr (telling line) | accept callback | "
	       "pipe (read_descriptor/read) | connection dropped | listener afterwards | class |\n"
	       "|---|---|---|---|---|---|---|---|---|\n");
	for (int k = 0; k < t->n; k++) {
		if (!t->rows[k].did)
			continue;
		const twc_case *rc = &t->cases[k];
		const twc_raw_obs *o = &t->rows[k].obs;
		char e1[320], e2[320], e3[320];
		md_escape(o->stderr_line[0] ? o->stderr_line : "-", e1, sizeof(e1));
		md_escape(o->accept[0] ? o->accept : "-", e2, sizeof(e2));
		md_escape(o->pipe[0] ? o->pipe : "-", e3, sizeof(e3));
		printf("| `%s` | %s | %s | `%s` | %s | %s | %s | %s | **%s** |\n", short_id(rc),
		       what(rc), o->process, e1, e2, e3, o->conn_dropped ? "yes" : "no", o->listener,
		       o->klass);
	}
}

static int run(int argc, char **argv, table *t)
{
	const twc_case *cases = t->cases;
	int ncases = t->n;
	const char *cmd = NULL;
	int window_ms = 1500;
	bool markdown = false;
	bool some = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iut") && i + 1 < argc) {
			cmd = argv[++i];
		} else if (!strcmp(argv[i], "--case") && i + 1 < argc) {
			const char *id = argv[++i];
			int k = find_case(cases, ncases, id);
			if (k < 0) {
				fprintf(stderr, "tw-bad-input: no raw case '%s' (--list)\n", id);
				return 2;
			}
			t->rows[k].want = some = true;
		} else if (!strcmp(argv[i], "--window-ms") && i + 1 < argc) {
			window_ms = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--markdown")) {
			markdown = true;
		} else if (!strcmp(argv[i], "--list")) {
			for (int k = 0; k < ncases; k++)
				printf("%-32s %-14s %s\n", short_id(&cases[k]), cases[k].section,
				       what(&cases[k]));
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
	for (int k = 0; k < ncases; k++) {
		const twc_case *rc = &cases[k];
		if (some && !t->rows[k].want)
			continue;
		twc_raw_obs *o = &t->rows[k].obs;
		t->rows[k].did = true;
		if (twc_raw_run(cmd, rc->id, rc->arg, window_ms, o) != 0) {
			printf("ERROR %s: %s\n", short_id(rc), o->note);
			failures++;
			continue;
		}
		printf("# %s: %s\n#   process: %s\n#   stderr: %s\n#   accept: %s\n#   pipe: %s\n"
		       "#   connection dropped: %s\n#   listener: %s\n#   class: %s%s%s%s%s\n",
		       short_id(rc), what(rc), o->process, o->stderr_line[0] ? o->stderr_line : "-",
		       o->accept[0] ? o->accept : "-", o->pipe[0] ? o->pipe : "-",
		       o->conn_dropped ? "yes" : "no", o->listener, o->klass,
		       o->check[0] ? "\n#   check: " : "", o->check, o->note[0] ? "\n#   note: " : "",
		       o->note);
	}
	if (markdown)
		print_markdown(t);
	printf("%d case(s) could not be run\n", failures);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	table t;
	t.cases = twc_suite_wire(&t.n);
	t.rows = calloc((size_t)t.n + 1, sizeof(*t.rows));
	int st = 2;
	if (t.rows)
		st = run(argc, argv, &t);
	else
		fprintf(stderr, "tw-bad-input: out of memory\n");
	free(t.rows);
	return st;
}
