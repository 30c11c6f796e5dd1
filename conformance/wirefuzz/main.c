/*
 * main.c - tensorwire-wirefuzz, the black-box wire fuzzer (tensorwire issue
 * 5 item 4): the command line over fuzz.c (fuzz), exec.c (replay) and
 * mutate.c (list). See README.md and --help.
 *
 * It must not hold any logic of its own beyond options and exit statuses.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wf.h"

#define EXIT_SKIP 77

static void usage(FILE *f)
{
	fprintf(f,
	"tensorwire-wirefuzz - black-box fuzzer of the TensorPipe wire protocol\n"
	"\n"
	"It drives an implementation under test (IUT) through its agent-protocol adapter\n"
	"(spec/agent.md), plays the raw TCP peer of its listener (role server) or of its\n"
	"client (role client), sends well-formed traffic with one thing broken, and after\n"
	"every input checks that the IUT is alive, that its operations on that pipe end,\n"
	"that every callback fired once, and that a fresh well-formed peer is still fully\n"
	"served. Failures are deduplicated by signature and saved as reproducers.\n"
	"\n"
	"usage:\n"
	"  tensorwire-wirefuzz fuzz --iut CMD [options]\n"
	"  tensorwire-wirefuzz replay --iut CMD [--expect robust|failure] FILE...\n"
	"  tensorwire-wirefuzz list [--role server|client|server-ext] [--save K FILE]\n"
	"\n"
	"fuzz options:\n"
	"  --iut CMD          the adapter command (run by /bin/sh); 'unavailable:<why>' skips (77)\n"
	"  --name NAME        the IUT's name in reports (default: iut)\n"
	"  --role R           server, client, server-ext or both (default both); server\n"
	"                     runs two scenarios, the plain one and server-ext (a Brochure\n"
	"                     asking for the goodbye extension, spec/wire.md 8)\n"
	"  --no-ext           leave the server-ext scenario out\n"
	"  --seed N           seed of the random phase (default 1)\n"
	"  --inputs N         stop after N inputs (N >= 1)\n"
	"  --time S           stop after S seconds (S > 0; default 60 when neither bound is\n"
	"                     given)\n"
	"  --out DIR          write DIR/findings/*.twr, DIR/pending/*.twr, DIR/summary.md,\n"
	"                     DIR/progress.tsv (new signatures over time), DIR/adapters.log\n"
	"  --no-systematic    skip the enumeration of every mutation; random from the start\n"
	"  --start K          begin the enumeration at mutation K (see list)\n"
	"  --no-minimise      save reproducers as found\n"
	"  --leak-every N     clean shutdown and LeakSanitizer check every N inputs (default\n"
	"                     100; 0 = never)\n"
	"  --step-ms MS       bound on each raw read/accept of an input (default 600)\n"
	"  --settle-ms MS     bound for a pipe's operations to end after its connections\n"
	"                     closed (default 2000)\n"
	"  --check-ms MS      bound on each wait of the good check (default 5000)\n"
	"  --expect-clean     exit 1 if any MUST-level failure was found (for ours)\n"
	"  --expect-findings  exit 1 if no MUST-level failure was found (a self-check of the\n"
	"                     fuzzer against an IUT known to fail)\n"
	"  --verbose          print every input and its outcome\n"
	"  --quiet            print only the summary\n"
	"\n"
	"list: prints the base scenario and every systematic mutation (index, class,\n"
	"description); --save K FILE writes mutation K (-1: the base) as a reproducer.\n"
	"\n"
	"replay: runs each reproducer against a fresh IUT and prints PASS (the IUT survived,\n"
	"only that pipe failed, a well-formed peer is still served, no leak) or FAIL with\n"
	"the signature. --expect failure inverts the exit status (the failure must happen).\n"
	"\n"
	"exit status: 0 as expected, 1 not as expected, 2 usage (or, for replay, a\n"
	"reproducer that cannot be read or run), 77 the IUT is unavailable.\n");
}

static bool unavailable(const char *cmd)
{
	if (strncmp(cmd, "unavailable:", 12) != 0)
		return false;
	printf("SKIP: %s\n", cmd + 12);
	return true;
}

static int opt_int(const char *v, int *out)
{
	char *end;
	long n = strtol(v, &end, 10);
	if (*end || n < 0 || n > 100000000)
		return -1;
	*out = (int)n;
	return 0;
}

static int cmd_list(int argc, char **argv)
{
	wf_scenario sc = WF_SC_SERVER;
	int save_k = -1;
	const char *save_path = NULL;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--role") && i + 1 < argc) {
			const char *r = argv[++i];
			if (strcmp(r, "client") && strcmp(r, "server-ext") && strcmp(r, "server")) {
				fprintf(stderr, "tensorwire-wirefuzz: list --role '%s': want server, client "
				                "or server-ext\n", r);
				return 2;
			}
			sc = !strcmp(r, "client") ? WF_SC_CLIENT : !strcmp(r, "server-ext") ? WF_SC_SERVER_EXT
			                                                                   : WF_SC_SERVER;
		} else if (!strcmp(argv[i], "--save") && i + 2 < argc) {
			char *end;
			long k = strtol(argv[++i], &end, 10);
			if (end == argv[i] || *end || k < -1 || k > 100000000) {
				fprintf(stderr, "tensorwire-wirefuzz: list --save '%s': want a mutation "
				                "index (see list), or -1 for the base\n", argv[i]);
				return 2;
			}
			save_k = (int)k;
			save_path = argv[++i];
		} else {
			return usage(stderr), 2;
		}
	}
	wf_script base;
	if (wf_build_scenario(&base, sc, "127.0.0.1:65535", false))
		return 1;
	if (save_path) {
		int n = wf_mutate_count(&base);
		if (save_k >= n) {
			fprintf(stderr, "tensorwire-wirefuzz: list --save %d: the %s scenario has "
			                "mutations 0 to %d\n", save_k, wf_scenario_name(sc), n - 1);
			wf_script_free(&base);
			return 2;
		}
		wf_script m;
		int rc = save_k < 0 ? wf_script_copy(&m, &base) : wf_mutate_nth(&base, save_k, &m);
		if (rc == 0) {
			errno = 0;
			rc = wf_script_save(&m, save_path, NULL);
			wf_script_free(&m);
			if (rc)
				fprintf(stderr, "tensorwire-wirefuzz: list --save %d: writing %s: %s\n",
				        save_k, save_path, errno ? strerror(errno) : "failed");
		} else {
			fprintf(stderr, "tensorwire-wirefuzz: list --save %d: mutation %d cannot be "
			                "built\n", save_k, save_k);
		}
		wf_script_free(&base);
		return rc ? 1 : 0;
	}
	printf("# base scenario %s\n", wf_scenario_name(sc));
	wf_script_write(&base, stdout);
	int n = wf_mutate_count(&base);
	printf("# %d systematic mutations\n", n);
	for (int k = 0; k < n; k++) {
		wf_script m;
		if (wf_mutate_nth(&base, k, &m))
			continue;
		printf("%d\t%s\t%s\n", k, m.klass, m.mutation);
		wf_script_free(&m);
	}
	wf_script_free(&base);
	return 0;
}

static int cmd_replay(int argc, char **argv)
{
	const char *iut = NULL;
	bool expect_failure = false;
	wf_opts o;
	wf_opts_default(&o);
	int first = -1;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		if (!strcmp(a, "--iut") && has) {
			iut = argv[++i];
		} else if (!strcmp(a, "--expect") && has) {
			const char *e = argv[++i];
			if (!strcmp(e, "failure"))
				expect_failure = true;
			else if (strcmp(e, "robust") != 0)
				return usage(stderr), 2;
		} else if (!strcmp(a, "--check-ms") && has) {
			if (opt_int(argv[++i], &o.check_ms))
				return usage(stderr), 2;
		} else if (a[0] == '-') {
			return usage(stderr), 2;
		} else {
			first = i;
			break;
		}
	}
	if (!iut || first < 0)
		return usage(stderr), 2;
	if (unavailable(iut))
		return EXIT_SKIP;
	int bad = 0, errors = 0;
	for (int i = first; i < argc; i++) {
		wf_script s;
		char err[2048];
		if (wf_script_load(argv[i], &s, err, sizeof(err))) {
			printf("ERROR %s\n", err); /* it names the file */
			errors++;
			continue;
		}
		wf_result r;
		if (wf_replay(iut, &s, &o, &r, err, sizeof(err))) {
			printf("ERROR %s: %s\n", argv[i], err);
			errors++;
		} else if (wf_result_failed(&r)) {
			printf("%s %s: %s\n#   observed: %s\n#   script: %s\n",
			       expect_failure ? "PASS" : "FAIL", argv[i], r.signature, r.detail, r.stopped);
			if (s.signature[0] && strcmp(s.signature, r.signature) != 0)
				printf("#   (the file was saved for: %s)\n", s.signature);
			bad += !expect_failure;
		} else {
			printf("%s %s: survived%s%s\n#   script: %s\n", expect_failure ? "FAIL" : "PASS",
			       argv[i], r.pending[0] ? "; SHOULD not met: " : "", r.pending, r.stopped);
			bad += expect_failure;
		}
		fflush(stdout);
		wf_script_free(&s);
	}
	/* a reproducer that cannot be read, or run, checked nothing */
	return errors ? 2 : bad ? 1 : 0;
}

static int cmd_fuzz(int argc, char **argv)
{
	wf_fuzz_opts o;
	memset(&o, 0, sizeof(o));
	wf_opts_default(&o.run);
	o.iut_name = "iut";
	bool ext = true;
	for (int k = 0; k < WF_SC_COUNT; k++)
		o.scenarios[k] = true;
	o.seed = 1;
	o.systematic = true;
	o.minimise = true;
	o.leak_every = 100;
	bool expect_clean = false, expect_findings = false;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		int v;
		if (!strcmp(a, "--iut") && has) {
			o.iut_cmd = argv[++i];
		} else if (!strcmp(a, "--name") && has) {
			o.iut_name = argv[++i];
		} else if (!strcmp(a, "--role") && has) {
			const char *r = argv[++i];
			if (strcmp(r, "server") && strcmp(r, "server-ext") && strcmp(r, "client") &&
			    strcmp(r, "both")) {
				fprintf(stderr, "tensorwire-wirefuzz: --role '%s': want server, client, "
				                "server-ext or both\n", r);
				return 2;
			}
			o.scenarios[WF_SC_SERVER] = !strcmp(r, "server") || !strcmp(r, "both");
			o.scenarios[WF_SC_SERVER_EXT] = o.scenarios[WF_SC_SERVER] || !strcmp(r, "server-ext");
			o.scenarios[WF_SC_CLIENT] = !strcmp(r, "client") || !strcmp(r, "both");
			if (!o.scenarios[WF_SC_SERVER_EXT] && !o.scenarios[WF_SC_CLIENT])
				return usage(stderr), 2;
		} else if (!strcmp(a, "--no-ext")) {
			ext = false;
		} else if (!strcmp(a, "--seed") && has) {
			o.seed = strtoull(argv[++i], NULL, 10);
		} else if (!strcmp(a, "--inputs") && has) {
			if (opt_int(argv[++i], &v) || v == 0) {
				fprintf(stderr, "tensorwire-wirefuzz: --inputs '%s': want a whole number "
				                "from 1 to 100000000\n", argv[i]);
				return 2;
			}
			o.max_inputs = v;
		} else if (!strcmp(a, "--time") && has) {
			char *end;
			o.max_seconds = strtod(argv[++i], &end);
			if (end == argv[i] || *end || !(o.max_seconds > 0 && o.max_seconds <= 1e7)) {
				fprintf(stderr, "tensorwire-wirefuzz: --time '%s': want seconds, more than "
				                "0\n", argv[i]);
				return 2;
			}
		} else if (!strcmp(a, "--out") && has) {
			o.out_dir = argv[++i];
		} else if (!strcmp(a, "--no-systematic")) {
			o.systematic = false;
		} else if (!strcmp(a, "--start") && has) {
			if (opt_int(argv[++i], &o.start))
				return usage(stderr), 2;
		} else if (!strcmp(a, "--no-minimise")) {
			o.minimise = false;
		} else if (!strcmp(a, "--leak-every") && has) {
			if (opt_int(argv[++i], &o.leak_every))
				return usage(stderr), 2;
		} else if (!strcmp(a, "--step-ms") && has) {
			if (opt_int(argv[++i], &o.run.step_ms))
				return usage(stderr), 2;
		} else if (!strcmp(a, "--settle-ms") && has) {
			if (opt_int(argv[++i], &o.run.settle_ms))
				return usage(stderr), 2;
		} else if (!strcmp(a, "--check-ms") && has) {
			if (opt_int(argv[++i], &o.run.check_ms))
				return usage(stderr), 2;
		} else if (!strcmp(a, "--expect-clean")) {
			expect_clean = true;
		} else if (!strcmp(a, "--expect-findings")) {
			expect_findings = true;
		} else if (!strcmp(a, "--verbose")) {
			o.verbose_inputs = true;
		} else if (!strcmp(a, "--quiet")) {
			o.quiet = true;
		} else {
			fprintf(stderr, "tensorwire-wirefuzz: unknown option '%s'\n", a);
			return usage(stderr), 2;
		}
	}
	if (!ext)
		o.scenarios[WF_SC_SERVER_EXT] = false;
	if (!o.iut_cmd)
		return usage(stderr), 2;
	if (expect_clean && expect_findings) {
		fprintf(stderr, "tensorwire-wirefuzz: --expect-clean and --expect-findings "
		                "contradict each other\n");
		return 2;
	}
	/* the reproducers must have somewhere to go, or a finding is lost */
	if (o.out_dir && mkdir(o.out_dir, 0777) != 0 && errno != EEXIST) {
		fprintf(stderr, "tensorwire-wirefuzz: --out %s: %s\n", o.out_dir, strerror(errno));
		return 2;
	}
	if (o.out_dir) {
		struct stat sb;
		if (stat(o.out_dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
		    access(o.out_dir, W_OK | X_OK) != 0) {
			fprintf(stderr, "tensorwire-wirefuzz: --out %s: not a folder this process can "
			                "write to\n", o.out_dir);
			return 2;
		}
	}
	if (unavailable(o.iut_cmd))
		return EXIT_SKIP;
	if (o.max_inputs == 0 && o.max_seconds <= 0)
		o.max_seconds = 60;
	/* the adapters' stderr (echoed by the harness) goes to a log, not the terminal */
	char logpath[600];
	snprintf(logpath, sizeof(logpath), "%s/adapters.log", o.out_dir ? o.out_dir : "");
	int logfd = o.out_dir ? open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)
	                      : open("/dev/null", O_WRONLY | O_CLOEXEC);
	int saved_err = dup(2);
	if (logfd >= 0) {
		dup2(logfd, 2);
		close(logfd);
	}
	wf_fuzz_stats st;
	char err[2048];
	int rc = wf_fuzz(&o, &st, err, sizeof(err));
	if (saved_err >= 0) {
		dup2(saved_err, 2);
		close(saved_err);
	}
	if (rc) {
		printf("ERROR: %s\n", err);
		return 1;
	}
	printf("%ld inputs in %.0f s, %ld IUT starts: %d MUST-level signatures (%ld unconfirmed), "
	       "%ld SHOULD-level\n", st.inputs, st.seconds, st.restarts, st.must_sigs, st.unconfirmed,
	       st.pending_sigs);
	if (expect_clean && st.must_sigs > 0) {
		printf("FAIL: --expect-clean, but the IUT failed %d way(s)\n", st.must_sigs);
		return 1;
	}
	if (expect_findings && st.must_sigs == 0) {
		printf("FAIL: --expect-findings, but the fuzzer found nothing in %ld inputs\n",
		       st.inputs);
		return 1;
	}
	if (st.inputs == 0) {
		printf("FAIL: no input could be run\n");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "fuzz"))
		return cmd_fuzz(argc, argv);
	if (!strcmp(argv[1], "replay"))
		return cmd_replay(argc, argv);
	if (!strcmp(argv[1], "list"))
		return cmd_list(argc, argv);
	usage(stderr);
	return 2;
}
