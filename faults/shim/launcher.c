/*
 * launcher.c - twfault-run, which runs any program with libtwfault
 * preloaded:
 *
 *   twfault-run [--spec SPEC] [--report FILE] [--summary] [--verbose]
 *               [--shim PATH] [--print] [--] PROGRAM [ARG]...
 *
 * It checks SPEC (default: $TWFAULT) before anything runs, puts the
 * program's sanitizer runtime first in LD_PRELOAD when the program needs one
 * (preload.h), sets TWFAULT and execs the program in its place, so the
 * caller waits for, signals and reads the program itself. The shim is found
 * from --shim, $TWFAULT_SHIM, or next to this launcher. --print shows the
 * environment it would set instead of running anything.
 *
 * It must not do anything to the program but set those two variables.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "preload.h"

#define EXIT_USAGE 2
#define EXIT_CANNOT_RUN 127

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: twfault-run [--spec SPEC] [--report FILE] [--summary] [--verbose]\n"
	        "                   [--shim PATH] [--print] [--] PROGRAM [ARG]...\n"
	        "Runs PROGRAM with libtwfault preloaded and TWFAULT=SPEC (default: $TWFAULT).\n"
	        "SPEC, comma-separated (docs/faults.md):\n"
	        "  seed=N            seed of every random choice (default 1)\n"
	        "  fds=sockets|tcp|unix   which sockets get faults (other fds never do)\n"
	        "  short=N | short=A-B    cap each transfer at N bytes (or a random cap in A..B)\n"
	        "  eintr=P  eagain=P      chance per call (0.05, 5%%); EAGAIN on non-blocking fds only\n"
	        "  reset=[K:]B       ECONNRESET (real RST to the peer) after B bytes on connection K\n"
	        "                    (1-based, order of connect/accept; 0 or none = the first to get there)\n"
	        "  emfile=N[:M]      accept calls N..N+M-1 fail with EMFILE\n"
	        "  ctrunc=N|all      the Nth recvmsg carrying SCM_RIGHTS loses them (MSG_CTRUNC)\n"
	        "  failcall=N        the Nth socket call (or the first after it that can) fails, once:\n"
	        "                    ECONNRESET / ECONNABORTED (accept) / ECONNREFUSED (connect)\n"
	        "  report=FILE summary=1 verbose=1   counters at exit (to FILE / stderr), log each fault\n"
	        "--report FILE, --summary and --verbose add those items. Exit status: the program's,\n"
	        "or 2 for a bad command line or SPEC, 127 when the program cannot be run.\n");
}

static int shim_path(const char *given, char *out, size_t outlen)
{
	if (!given)
		given = getenv("TWFAULT_SHIM");
	if (given) {
		if ((size_t)snprintf(out, outlen, "%s", given) >= outlen)
			return -1;
	} else {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0)
			return -1;
		self[n] = '\0';
		if ((size_t)snprintf(out, outlen, "%s/libtwfault.so", dirname(self)) >= outlen)
			return -1;
	}
	return access(out, R_OK) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	const char *spec = getenv("TWFAULT");
	const char *report = NULL, *shim = NULL;
	bool summary = false, verbose = false, print = false;
	int i = 1;
	for (; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-')
			break;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--summary")) {
			summary = true;
		} else if (!strcmp(a, "--verbose")) {
			verbose = true;
		} else if (!strcmp(a, "--print")) {
			print = true;
		} else if (i + 1 < argc && (!strcmp(a, "--spec") || !strcmp(a, "-s"))) {
			spec = argv[++i];
		} else if (i + 1 < argc && (!strcmp(a, "--report") || !strcmp(a, "-r"))) {
			report = argv[++i];
		} else if (i + 1 < argc && !strcmp(a, "--shim")) {
			shim = argv[++i];
		} else {
			fprintf(stderr, "twfault-run: unknown or incomplete option '%s'\n", a);
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	char full[8192];
	int n = snprintf(full, sizeof(full), "%s%s%s%s%s", spec ? spec : "",
	                 report ? ",report=" : "", report ? report : "",
	                 summary ? ",summary=1" : "", verbose ? ",verbose=1" : "");
	if (n < 0 || (size_t)n >= sizeof(full)) {
		fprintf(stderr, "twfault-run: fault spec too long\n");
		return EXIT_USAGE;
	}
	const char *fullspec = full[0] == ',' ? full + 1 : full;
	char err[512];
	twf_config cfg;
	if (twf_config_parse(fullspec, &cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "twfault-run: %s\n", err);
		return EXIT_USAGE;
	}
	char shimbuf[PATH_MAX];
	if (shim_path(shim, shimbuf, sizeof(shimbuf)) != 0) {
		fprintf(stderr,
		        "twfault-run: cannot find libtwfault.so (%s); give --shim PATH or set TWFAULT_SHIM\n",
		        shim ? shim : getenv("TWFAULT_SHIM") ? getenv("TWFAULT_SHIM") : "next to twfault-run");
		return EXIT_CANNOT_RUN;
	}
	char prog[PATH_MAX];
	if (twf_find_program(argv[i], prog, sizeof(prog), err, sizeof(err)) != 0) {
		fprintf(stderr, "twfault-run: %s\n", err);
		return EXIT_CANNOT_RUN;
	}
	char preload[16384];
	if (twf_preload_value(prog, shimbuf, getenv("LD_PRELOAD"), preload, sizeof(preload), err,
	                      sizeof(err)) != 0) {
		fprintf(stderr, "twfault-run: %s: %s\n", prog, err);
		return EXIT_CANNOT_RUN;
	}
	if (print) {
		printf("LD_PRELOAD='%s' TWFAULT='%s' %s\n", preload, fullspec, prog);
		return 0;
	}
	if (setenv("LD_PRELOAD", preload, 1) != 0 || setenv("TWFAULT", fullspec, 1) != 0) {
		fprintf(stderr, "twfault-run: setenv: %s\n", strerror(errno));
		return EXIT_CANNOT_RUN;
	}
	execv(prog, argv + i);
	fprintf(stderr, "twfault-run: exec %s: %s\n", prog, strerror(errno));
	return EXIT_CANNOT_RUN;
}
