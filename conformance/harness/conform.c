/*
 * conform.c - tensorwire-conform, the conformance runner (tensorwire issue 3).
 *
 * Chooses suites, cases and implementations under test (IUTs, each reached
 * through an adapter that speaks spec/agent.md), runs every case in its own
 * process with a timeout, turns what it saw into PASS, FAIL, SKIP(reason),
 * XFAIL(reason from the IUT's profile), ERROR or TIMEOUT, prints TAP on
 * stdout as it goes and a summary matrix at the end, and writes JUnit XML and
 * JSON lines on request. Run with --help for the details.
 *
 * It must not interpret results beyond the rules written here: a case
 * decides PASS/FAIL/SKIP/ERROR for itself; profiles turn known failures into
 * XFAIL; strict mode turns SKIP into FAIL; the level decides what counts
 * against the exit status.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conform.h"
#include "combo.h"
#include "launch.h"
#include "mutation.h"
#include "profile.h"
#include "report.h"
#include "runs.h"
#include "session.h"

/* The suites the runner's main handed over (twc_conform_main), and every
 * case of them, freed at exit. */
static const twc_suite *g_suites;
static size_t g_nsuites;
static const twc_case **g_all;
static int g_nall;

static void free_cases(void)
{
	free(g_all);
	g_all = NULL;
}

static const twc_case **all_cases(int *count_out)
{
	if (!g_all) {
		g_all = twc_cases_collect(g_suites, g_nsuites, &g_nall);
		if (g_all)
			atexit(free_cases);
	}
	*count_out = g_nall;
	return g_all;
}

#ifndef TW_IUT_OURS
#define TW_IUT_OURS "unavailable:built without the tensorwire adapter"
#endif
#ifndef TW_IUT_STOCK
#define TW_IUT_STOCK "unavailable:built without the stock TensorPipe adapter"
#endif
#ifndef TW_IUT_MUTANT
#define TW_IUT_MUTANT "unavailable:built without the mutant adapter (tw-iut-mutant)"
#endif
#ifndef TW_PROFILES_DIR
#define TW_PROFILES_DIR "conformance/profiles"
#endif
#ifndef TW_SPEC_DIR
#define TW_SPEC_DIR "spec"
#endif

#define EXIT_SKIP 77
#define MAX_IUTS 8
#define MAX_SEL 64

typedef struct options {
	const char *suites[MAX_SEL];
	int nsuites;
	const char *cases[MAX_SEL];
	int ncases;
	twc_iut_info iuts[MAX_IUTS];
	int niuts;
	bool strict, large, verbose, list, uncovered;
	const char *junit, *json;
	const char *profiles[MAX_SEL]; /* [0] the built-in directory, then --profiles */
	int nprofiles;
	const char *spec;
	double timeout_scale;
	int wait_ms;       /* --wait-s: bound on any single wait (0: half the case's timeout) */
	twc_iut_info ref;   /* the reference implementation of cross and pairwise runs */
	bool no_ref;       /* --reference none */
	const char *pairs[MAX_SEL]; /* --pair CLIENT:SERVER */
	int npairs;
	const char *expect_fail;    /* --expect-fail TEXT */
	const char *combos[MAX_SEL]; /* --combo T+C, or "all" */
	int ncombos;
	bool battery_only;           /* --battery-only */
	twc_mutation_opts mut;
} options;

static const char *default_cmd(const char *compiled, char *buf, size_t len);
static const char *installed_data(const char *what, char *buf, size_t len);

static void usage(FILE *f)
{
	char ob[PATH_MAX], sb[PATH_MAX], pb[PATH_MAX], db[PATH_MAX];
	const char *prof = installed_data("profiles", pb, sizeof(pb));
	const char *spec = installed_data("spec", db, sizeof(db));
	fprintf(f,
	"tensorwire-conform - check implementations of the TensorPipe wire protocol\n"
	"\n"
	"It drives each implementation under test (IUT) through an adapter program that\n"
	"speaks the agent protocol (spec/agent.md), runs the conformance cases against it\n"
	"(each case in its own process, with a timeout) and reports who passes what.\n"
	"\n"
	"usage: tensorwire-conform [options]\n"
	"\n"
	"choosing what runs:\n"
	"  --suite NAME        wire (the harness is the raw TCP peer), semantic (API\n"
	"                      behaviour through the adapters), interop (every ordered pair\n"
	"                      of IUTs). Repeatable; default: all three.\n"
	"  --case GLOB         only cases whose id matches (e.g. 'wire.*', '*.ordering').\n"
	"                      Repeatable.\n"
	"  --iut NAME=CMD      an IUT: NAME labels it in reports, CMD starts its adapter\n"
	"                      (run by /bin/sh). Repeatable. Default: the adapters built\n"
	"                      with this runner:\n"
	"                        ours=%s\n"
	"                        stock=%s\n"
	"  --large             also the multi-GiB interop cases (need ~10 GiB of memory)\n"
	"  --combo T+C         run the battery cases (semantic, interop) on transport T and\n"
	"                      channel C (e.g. shm+cma); repeatable; 'all' is every\n"
	"                      transport with every channel the IUTs' hellos offer. A pair\n"
	"                      without one of them is a SKIP with the reason. Default: the\n"
	"                      session's uv+basic, under the plain case names.\n"
	"  --battery-only      only the battery cases (those --combo multiplies)\n"
	"  --pair CLIENT:SERVER  of the runs with two IUTs (interop, cross), only those\n"
	"                      with IUT CLIENT as the client and SERVER as the server;\n"
	"                      runs of one IUT only for CLIENT or SERVER. Repeatable.\n"
	"  --reference NAME=CMD  the reference implementation that cross cases (the\n"
	"                      semantic suite) and pairwise cases (interop) also pair each\n"
	"                      IUT with, in both roles; default ours (above); 'none' pairs\n"
	"                      an IUT with itself only\n"
	"  --list              print the selected cases (id, level, section, description)\n"
	"                      and exit\n"
	"  --uncovered         print every section of spec/*.md that states a MUST and has\n"
	"                      no case, and exit; with --combo, a battery case also covers\n"
	"                      the sections of those runs' backends (shm: 2.3.x, mpt: 4.3)\n"
	"\n"
	"judging:\n"
	"  --strict            a SKIP counts as a FAIL (nothing may be left unchecked)\n"
	"  --profiles DIR      more known exceptions, DIR/<impl>.profile, added to the\n"
	"                      built-in ones (%s). Repeatable. A listed failure\n"
	"                      becomes XFAIL(reason), reported, not hidden; every report\n"
	"                      names the profile files each IUT was judged with. A\n"
	"                      missing DIR or a malformed line is an error naming it.\n"
	"  --timeout-scale X   multiply every case's timeout by X (slow machines,\n"
	"                      sanitizer builds)\n"
	"  --expect-fail TEXT  invert the verdict, for tests of the harness itself: exit 0\n"
	"                      only if something ran and every run failed (FAIL, ERROR\n"
	"                      or TIMEOUT) with TEXT in its reason\n"
	"  --wait-s N          bound any single wait for an event to N seconds (default:\n"
	"                      half the case's timeout); --mutants defaults to 10\n"
	"\n"
	"reports:\n"
	"  stdout              TAP version 13 as cases finish, then the summary matrix\n"
	"                      (as TAP comments); progress lines go to stderr\n"
	"  --junit FILE        JUnit XML, one <testsuite> per suite and IUT (or pair)\n"
	"  --json FILE         JSON lines, one object per case run: id, suite, section,\n"
	"                      level, outcome, reason, duration_s, iut and peer (name,\n"
	"                      impl, version, adapter, protocol), transport, channel,\n"
	"                      required_failure, runner (version, agent_protocol,\n"
	"                      spec_revision)\n"
	"  --verbose           show every case's log in the TAP stream, not only failures'\n"
	"  --spec DIR          where spec/*.md live, for --uncovered (default %s)\n"
	"  --launch ROLE=TEMPLATE  run ROLE's adapter (server or client of a session) with\n"
	"                      TEMPLATE: {cmd} the adapter command as one shell word,\n"
	"                      {host} the role's --host, {role}; e.g. 'ssh {host} {cmd}',\n"
	"                      'ip netns exec nsA sh -c {cmd}', 'srun -w {host} sh -c {cmd}',\n"
	"                      'kubectl exec -i {host} -- sh -c {cmd}' (harness/launch.h)\n"
	"  --host ROLE=NAME    what {host} is in ROLE's template\n"
	"  --address ROLE=IP   the address ROLE's listeners bind and advertise (default\n"
	"                      127.0.0.1; the server's is what the client connects to)\n"
	"  --version           the runner's version, agent protocol and spec revision (every\n"
	"                      report carries them, with each IUT's and adapter's)\n"
	"\n"
	"mutation (the harness judged, tensorwire issue 17):\n"
	"  --mutants FILE      run the selected suites against each seeded defect of FILE\n"
	"                      (conformance/mutants/mutants.list) instead of the IUTs: a\n"
	"                      mutant is killed by a case that fails with it and passes\n"
	"                      without it. Exit 1 if any mutant survives every case.\n"
	"  --mutant-adapter CMD  the adapter built on the mutant library (default\n"
	"                      tw-iut-mutant next to this runner)\n"
	"  --mutants-only LIST   only these mutants (comma-separated)\n"
	"  --mutants-full      run every case for every mutant (the kill matrix), instead\n"
	"                      of stopping at the first kill\n"
	"  --mutation-report FILE  the score and each mutant's killing cases, Markdown\n"
	"\n"
	"outcomes: PASS, FAIL, SKIP(reason), XFAIL(reason), ERROR (the harness could not\n"
	"carry the case out), TIMEOUT. A MUST case that ends FAIL, ERROR or TIMEOUT (or\n"
	"SKIP with --strict) fails the run; SHOULD cases are reported but do not.\n"
	"\n"
	"exit status: 0 every required case passed (or is an XFAIL of the profile),\n"
	"             1 a required case failed (or, with --strict, nothing ran),\n"
	"             77 nothing could run (no case selected, or each one skipped),\n"
	"             2 usage error or\n"
	"             an --iut adapter that does not answer hello or speaks another\n"
	"             agent protocol.\n"
	"\n"
	"examples:\n"
	"  tensorwire-conform                                   everything, ours and stock\n"
	"  tensorwire-conform --suite wire --iut mine='python3 adapter.py' --junit out.xml\n"
	"  tensorwire-conform --case 'interop.*' --iut ours=... --iut stock=...\n",
	default_cmd(TW_IUT_OURS, ob, sizeof(ob)), default_cmd(TW_IUT_STOCK, sb, sizeof(sb)),
	prof ? prof : TW_PROFILES_DIR, spec ? spec : TW_SPEC_DIR);
}

/* ---- IUTs ------------------------------------------------------------------------------- */

/* A JSON array of names as "a,b,c". */
static void join_names(const json_t *arr, char *out, size_t len)
{
	size_t at = 0;
	size_t i;
	const json_t *v;
	out[0] = '\0';
	json_array_foreach(arr, i, v) {
		const char *n = json_string_value(v);
		if (n && at + strlen(n) + 2 < len)
			at += (size_t)snprintf(out + at, len - at, "%s%s", at ? "," : "", n);
	}
}

/* Whether the comma list `list` holds `name`. */
static bool offers(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ',');
		size_t k = e ? (size_t)(e - p) : strlen(p);
		if (k == n && !strncmp(p, name, n))
			return true;
		p += k + (e ? 1 : 0);
	}
	return false;
}

/* Why `who` cannot run a battery case on `combo` ("" when it can). */
static void combo_unoffered(const twc_iut_info *who, const char *combo, char *why, size_t len)
{
	twc_combo cb;
	why[0] = '\0';
	if (!twc_combo_parse(combo, &cb))
		snprintf(why, len, "bad combination '%s'", combo);
	else if (!offers(who->transports, cb.transport))
		snprintf(why, len, "IUT %s offers no transport %s (its hello lists %s)", who->name,
		         cb.transport, who->transports[0] ? who->transports : "none");
	else if (!offers(who->channels, cb.channel))
		snprintf(why, len, "IUT %s offers no channel %s (its hello lists %s)", who->name,
		         cb.channel, who->channels[0] ? who->channels : "none");
}

/* A profile's exception for a run: "<id>@<combo>" first, then the plain id,
 * which holds on every combination. */
static const char *profile_find(const twc_profile *p, const char *key, const char *id,
                                const char *role)
{
	const char *x = twc_profile_find(p, key, role);
	return x ? x : twc_profile_find(p, id, role);
}

/* The side implementation `who` plays in run r (profile.h), or NULL. */
static const char *run_role(const twc_result *r, const twc_iut_info *who)
{
	if (!r->peer)
		return NULL;
	return who == r->iut && who == r->peer ? "both" : who == r->iut ? "client" : "server";
}

/* Whether a battery run's IUT or peer lacks its combination (why says). */
static bool run_unoffered(const twc_result *r, char *why, size_t len)
{
	why[0] = '\0';
	if (!r->combo[0])
		return false;
	combo_unoffered(r->iut, r->combo, why, len);
	if (!why[0] && r->peer)
		combo_unoffered(r->peer, r->combo, why, len);
	return why[0] != '\0';
}

/* The combinations battery cases run on: none given, none (the session's
 * default, uv+basic, under the case's plain name); "all": every transport
 * any available IUT offers with every channel any offers (a pair that
 * lacks one is a SKIP with the reason). */
static int select_combos(const options *opt, twc_iut_info *const *who, int nwho,
                         const char **out, int max)
{
	static char names[MAX_SEL * 4][72];
	int n = 0;
	for (int k = 0; k < opt->ncombos && n < max; k++) {
		if (strcmp(opt->combos[k], "all")) {
			out[n++] = opt->combos[k];
			continue;
		}
		char ts[1024] = "", cs[1024] = "";
		for (int i = 0; i < nwho; i++) {
			if (!who[i]->available)
				continue;
			for (int pass = 0; pass < 2; pass++) {
				const char *list = pass ? who[i]->channels : who[i]->transports;
				char *acc = pass ? cs : ts;
				char tmp[256];
				snprintf(tmp, sizeof(tmp), "%s", list);
				for (char *save, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save))
					if (!offers(acc, t) && strlen(acc) + strlen(t) + 2 < sizeof(ts))
						snprintf(acc + strlen(acc), sizeof(ts) - strlen(acc), "%s%s",
						         acc[0] ? "," : "", t);
			}
		}
		char tcopy[1024];
		snprintf(tcopy, sizeof(tcopy), "%s", ts);
		for (char *s1, *t = strtok_r(tcopy, ",", &s1); t; t = strtok_r(NULL, ",", &s1)) {
			char ccopy[1024];
			snprintf(ccopy, sizeof(ccopy), "%s", cs);
			for (char *s2, *c = strtok_r(ccopy, ",", &s2); c && n < max;
			     c = strtok_r(NULL, ",", &s2)) {
				snprintf(names[n], sizeof(names[n]), "%s+%s", t, c);
				out[n] = names[n];
				n++;
			}
		}
	}
	return n;
}

static void probe_iut(twc_iut_info *i)
{
	const char *why;
	if (twc_cmd_unavailable(i->cmd, &why)) {
		i->available = false;
		snprintf(i->why, sizeof(i->why), "%s", why);
		snprintf(i->impl, sizeof(i->impl), "unavailable");
		snprintf(i->version, sizeof(i->version), "-");
		return;
	}
	char err[2048];
	twc_adapter *a = twc_adapter_spawn(i->cmd, i->name, err, sizeof(err));
	json_t *r = a ? twc_adapter_call(a, json_pack("{s:s}", "cmd", "hello"), 15000, err, sizeof(err))
	              : NULL;
	if (!r) {
		i->available = false;
		i->broken = true;
		snprintf(i->why, sizeof(i->why), "its adapter does not answer hello: %.400s", err);
		snprintf(i->impl, sizeof(i->impl), "unknown");
		snprintf(i->version, sizeof(i->version), "-");
	} else {
		i->available = true;
		snprintf(i->impl, sizeof(i->impl), "%s",
		         json_string_value(json_object_get(r, "impl")) ?: "unknown");
		snprintf(i->version, sizeof(i->version), "%s",
		         json_string_value(json_object_get(r, "version")) ?: "unknown");
		snprintf(i->adapter, sizeof(i->adapter), "%s",
		         json_string_value(json_object_get(r, "adapter")) ?: "unnamed");
		join_names(json_object_get(r, "transports"), i->transports, sizeof(i->transports));
		join_names(json_object_get(r, "channels"), i->channels, sizeof(i->channels));
		const json_t *pj = json_object_get(r, "protocol");
		i->protocol = json_is_integer(pj) ? (int)json_integer_value(pj) : 0;
		if (i->protocol != TWC_AGENT_PROTOCOL_VERSION) {
			/* spec/agent.md 9: a mismatch is refused, never guessed at */
			i->available = false;
			i->broken = true;
			if (json_is_integer(pj))
				snprintf(i->why, sizeof(i->why),
				         "its adapter speaks agent protocol %d; this runner (%s) speaks %d "
				         "(spec/agent.md 9): use an adapter written for protocol %d, or a "
				         "runner of its protocol",
				         i->protocol, twc_runner_version(), TWC_AGENT_PROTOCOL_VERSION,
				         TWC_AGENT_PROTOCOL_VERSION);
			else
				snprintf(i->why, sizeof(i->why),
				         "its adapter's hello has no integer 'protocol' member; this runner "
				         "(%s) speaks agent protocol %d (spec/agent.md 6.1, 9)",
				         twc_runner_version(), TWC_AGENT_PROTOCOL_VERSION);
		}
		json_decref(r);
	}
	if (a)
		(void)twc_adapter_finish(a, 10000, err, sizeof(err));
	twc_adapter_destroy(a);
}

/* The directory of this executable ("" if unknown). */
static const char *self_dir(void)
{
	static char dir[PATH_MAX];
	static bool done;
	if (!done) {
		done = true;
		ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
		dir[n > 0 ? n : 0] = '\0';
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		else
			dir[0] = '\0';
	}
	return dir;
}

/* An installed runner (cmake --install, the .deb) finds its data in
 * <bindir>/../share/tensorwire/<what>: that is used whenever it exists, so
 * that an installed runner never reads a build or source tree that happens
 * to remain on the machine. NULL when this runner is not installed. */
static const char *installed_data(const char *what, char *buf, size_t len)
{
	struct stat st;
	if (!self_dir()[0])
		return NULL;
	int n = snprintf(buf, len, "%s/../share/tensorwire/%s", self_dir(), what);
	char real[PATH_MAX];
	if (n < 0 || (size_t)n >= len || stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
		return NULL;
	if (realpath(buf, real) && strlen(real) < len)
		memcpy(buf, real, strlen(real) + 1);
	return buf;
}

/* Resolves a built-in adapter: for an installed runner the same file name
 * next to it; else the compiled path. */
static const char *default_cmd(const char *compiled, char *buf, size_t len)
{
	char probe[PATH_MAX];
	const char *base = strrchr(compiled, '/');
	if (twc_cmd_unavailable(compiled, NULL) || !base)
		return compiled;
	if (installed_data("profiles", probe, sizeof(probe)) || access(compiled, X_OK) != 0) {
		int n = snprintf(buf, len, "%s%s", self_dir(), base);
		if (n > 0 && (size_t)n < len && access(buf, X_OK) == 0)
			return buf;
	}
	return compiled;
}

/* ---- capabilities ------------------------------------------------------------------------ */

/* Capability "rdma": a verbs device is listed, asked of the libibverbs this
 * process would load (simverbs' under simverbs-run, rdma-core's otherwise),
 * through dlopen so that the harness itself does not depend on it. */
static bool have_rdma(char *why, size_t len)
{
	void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(why, len, "needs an RDMA verbs device: no libibverbs.so.1 (%s)", dlerror());
		return false;
	}
	typedef void **(*get_list_fn)(int *);
	typedef void (*free_list_fn)(void **);
	get_list_fn get_list = (get_list_fn)dlsym(lib, "ibv_get_device_list");
	free_list_fn free_list = (free_list_fn)dlsym(lib, "ibv_free_device_list");
	int n = 0;
	void **list = get_list && free_list ? get_list(&n) : NULL;
	if (list)
		free_list(list);
	if (n <= 0)
		snprintf(why, len,
		         "needs an RDMA verbs device: ibv_get_device_list found none (run under "
		         "simverbs-run, or on a host with rxe or an HCA)");
	/* not dlclose'd: providers may keep threads */
	return n > 0;
}

/* Capability "cuda": the libcuda.so.1 this process would load (simcuda's
 * under simcuda-run, the real driver on a GPU host) initialises and shows a
 * device; "simcuda": and it is simcuda, whose modes a case may set. Asked in
 * a child, so that this process never initialises CUDA before it forks. */
static bool have_cuda(bool sim, char *why, size_t len)
{
	int fds[2];
	if (pipe(fds) != 0) {
		snprintf(why, len, "needs CUDA: pipe: %s", strerror(errno));
		return false;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		char msg[256] = "";
		void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		typedef int (*init_fn)(unsigned);
		typedef int (*count_fn)(int *);
		init_fn init = lib ? (init_fn)dlsym(lib, "cuInit") : NULL;
		count_fn count = lib ? (count_fn)dlsym(lib, "cuDeviceGetCount") : NULL;
		int n = 0;
		if (!lib)
			snprintf(msg, sizeof(msg), "no libcuda.so.1 (%s): run under simcuda-run, or on a "
			         "host with a GPU", dlerror());
		else if (!init || !count || init(0) != 0 || count(&n) != 0 || n <= 0)
			snprintf(msg, sizeof(msg), "libcuda.so.1 initialises no device");
		else if (sim && !dlsym(lib, "simcuda_version"))
			snprintf(msg, sizeof(msg), "the CUDA driver here is not simcuda (the case sets "
			         "simcuda's modes): run under simcuda-run");
		ssize_t w = write(fds[1], msg, strlen(msg));
		(void)w;
		_exit(0);
	}
	close(fds[1]);
	char msg[256] = "";
	ssize_t r = pid > 0 ? read(fds[0], msg, sizeof(msg) - 1) : -1;
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	if (r > 0) {
		msg[r] = '\0';
		snprintf(why, len, "needs %s: %s", sim ? "simcuda" : "CUDA", msg);
		return false;
	}
	if (pid < 0) {
		snprintf(why, len, "needs CUDA: fork: %s", strerror(errno));
		return false;
	}
	return true;
}

static bool have_capability(const char *cap, char *why, size_t len)
{
	if (!strcmp(cap, "cuda") || !strcmp(cap, "simcuda"))
		return have_cuda(!strcmp(cap, "simcuda"), why, len);
	if (!strncmp(cap, "memory:", 7)) {
		unsigned long want_gib = strtoul(cap + 7, NULL, 10), kb = 0;
		FILE *f = fopen("/proc/meminfo", "r");
		char line[256];
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "MemAvailable: %lu kB", &kb) == 1)
				break;
		if (f)
			fclose(f);
		if (kb / (1024 * 1024) >= want_gib)
			return true;
		snprintf(why, len, "needs %lu GiB of available memory, /proc/meminfo says %lu MiB",
		         want_gib, kb / 1024);
		return false;
	}
	if (!strcmp(cap, "rdma"))
		return have_rdma(why, len);
	snprintf(why, len, "unknown capability '%s'", cap);
	return false;
}

static bool needs_met(const twc_case *c, char *why, size_t len)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", c->needs ? c->needs : "");
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (*t && !have_capability(t, why, len))
			return false;
	return true;
}

/* ---- running a case in a child process ------------------------------------------------------ */

static int child_main(const char *id, const char *iut, const char *peer, const char *impls,
                      int wait_ms)
{
	int n;
	const twc_case **all = all_cases(&n);
	if (!all) {
		printf("RESULT ERROR out of memory\n");
		return 0;
	}
	const twc_case *c = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(all[i]->id, id))
			c = all[i];
	if (!c) {
		printf("RESULT ERROR no case '%s'\n", id);
		return 0;
	}
	twc_case_env env = {.wait_ms = wait_ms};
	char iname[32] = "", pname[32] = "", iimpl[64] = "", pimpl[64] = "";
	/* impls: "IUT_IMPL" or "IUT_IMPL,PEER_IMPL" */
	const char *comma = strchr(impls, ',');
	snprintf(iimpl, sizeof(iimpl), "%.*s", comma ? (int)(comma - impls) : (int)strlen(impls),
	         impls);
	snprintf(pimpl, sizeof(pimpl), "%s", comma ? comma + 1 : "");
	env.iut_impl = iimpl;
	env.peer_impl = pimpl;
	const char *eq = strchr(iut, '=');
	snprintf(iname, sizeof(iname), "%.*s", eq ? (int)(eq - iut) : 0, iut);
	env.iut_name = iname;
	env.iut_cmd = eq ? eq + 1 : iut;
	if (peer) {
		eq = strchr(peer, '=');
		snprintf(pname, sizeof(pname), "%.*s", eq ? (int)(eq - peer) : 0, peer);
		env.peer_name = pname;
		env.peer_cmd = eq ? eq + 1 : peer;
	}
	printf("# %s: %s\n# %s\n", c->id, c->description, c->section);
	snprintf(env.transport, sizeof(env.transport), "%s", twc_combo_current()->transport);
	snprintf(env.channel, sizeof(env.channel), "%s", twc_combo_current()->channel);
	fflush(stdout);
	twc_outcome_t o = c->run(c, &env);
	const char *unavailable = twc_session_unavailable(), *unchecked = twc_session_unchecked();
	if ((o == TWC_FAIL || o == TWC_ERROR) && unavailable) {
		o = TWC_SKIP; /* a backend the run needs is not viable here */
		snprintf(env.reason, sizeof(env.reason), "not viable here: %s", unavailable);
	} else if (o == TWC_PASS && unchecked) {
		o = TWC_SKIP; /* what the case was to check was not */
		snprintf(env.reason, sizeof(env.reason), "%s", unchecked);
	}
	printf("INFO transport=%s channel=%s\n", env.transport, env.channel);
	if (env.unexcused)
		printf("UNEXCUSED\n");
	if (twc_adapter_first_gone()[0])
		printf("GONE %s\n", twc_adapter_first_gone());
	char reason[TWC_REASON_MAX];
	size_t k = 0;
	for (const char *p = env.reason; *p && k + 1 < sizeof(reason); p++)
		reason[k++] = *p == '\n' ? ' ' : *p;
	reason[k] = '\0';
	printf("RESULT %s %s\n", twc_outcome_name(o), reason);
	fflush(stdout);
	return 0;
}

static char *append(char *buf, size_t *len, size_t *cap, const char *data, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t ncap = (*len + n + 1) * 2;
		char *nb = realloc(buf, ncap);
		if (!nb)
			return buf;
		buf = nb;
		*cap = ncap;
	}
	memcpy(buf + *len, data, n);
	*len += n;
	buf[*len] = '\0';
	return buf;
}

static void run_child(const options *opt, const twc_case *c, twc_result *r)
{
	char self[PATH_MAX];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl < 0) {
		r->outcome = TWC_ERROR;
		snprintf(r->reason, sizeof(r->reason), "readlink /proc/self/exe: %s", strerror(errno));
		return;
	}
	self[sl] = '\0';
	int timeout_s = (int)(c->timeout_s * opt->timeout_scale);
	if (timeout_s < 1)
		timeout_s = 1;
	int wait_ms = timeout_s * 1000 / 2; /* any single wait: half the case's time */
	if (opt->wait_ms > 0 && opt->wait_ms < wait_ms)
		wait_ms = opt->wait_ms;
	char iutarg[4096], peerarg[4096], waitarg[32], impls[160];
	snprintf(impls, sizeof(impls), "%s%s%s", r->iut->impl, r->peer ? "," : "",
	         r->peer ? r->peer->impl : "");
	snprintf(iutarg, sizeof(iutarg), "%s=%s", r->iut->name, r->iut->cmd);
	if (r->peer)
		snprintf(peerarg, sizeof(peerarg), "%s=%s", r->peer->name, r->peer->cmd);
	snprintf(waitarg, sizeof(waitarg), "%d", wait_ms);
	int out[2];
	if (pipe2(out, O_CLOEXEC) != 0) {
		r->outcome = TWC_ERROR;
		snprintf(r->reason, sizeof(r->reason), "pipe2: %s", strerror(errno));
		return;
	}
	long long t0 = twc_now_ms();
	pid_t pid = fork();
	if (pid == 0) {
		setpgid(0, 0); /* its adapters share the group, so a timeout kills them too */
		dup2(out[1], 1);
		dup2(out[1], 2);
		const char *combo = r->combo[0] ? r->combo : TWC_COMBO_DEFAULT;
		if (r->peer)
			execl(self, self, "--child", c->id, "--child-iut", iutarg, "--child-peer", peerarg,
			      "--child-impls", impls, "--child-wait-ms", waitarg, "--child-combo", combo,
			      (char *)NULL);
		else
			execl(self, self, "--child", c->id, "--child-iut", iutarg, "--child-impls", impls,
			      "--child-wait-ms", waitarg, "--child-combo", combo, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	if (pid < 0) {
		close(out[0]);
		r->outcome = TWC_ERROR;
		snprintf(r->reason, sizeof(r->reason), "fork: %s", strerror(errno));
		return;
	}
	setpgid(pid, pid);
	char *log = NULL;
	size_t len = 0, cap = 0;
	bool timed_out = false;
	long long deadline = t0 + (long long)timeout_s * 1000;
	for (;;) {
		long long left = deadline - twc_now_ms();
		if (left <= 0) {
			timed_out = true;
			kill(-pid, SIGKILL);
			break;
		}
		struct pollfd p = {.fd = out[0], .events = POLLIN};
		int pr = poll(&p, 1, left > 1000 ? 1000 : (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			continue;
		char buf[8192];
		ssize_t n = read(out[0], buf, sizeof(buf));
		if (n <= 0)
			break;
		log = append(log, &len, &cap, buf, (size_t)n);
	}
	close(out[0]);
	int st;
	waitpid(pid, &st, 0);
	kill(-pid, SIGKILL); /* stray adapters of a child that died */
	r->seconds = (double)(twc_now_ms() - t0) / 1000.0;
	/* the verdict: the last RESULT line; INFO for transport and channel */
	char *res = NULL;
	for (char *p = log; p && *p;) {
		char *e = strchr(p, '\n');
		if (!strncmp(p, "RESULT ", 7))
			res = p;
		if (!strncmp(p, "UNEXCUSED\n", 10))
			r->unexcused = true;
		if (!strncmp(p, "GONE ", 5)) { /* "GONE server ours": keep "ours" */
			const char *sp = strchr(p + 5, ' '), *nl = strchr(p + 5, '\n');
			if (sp && (!nl || sp < nl)) /* a single IUT's adapter is just "client" */
				snprintf(r->gone, sizeof(r->gone), "%.*s", (int)strcspn(sp + 1, "\n"), sp + 1);
		}
		if (!strncmp(p, "INFO ", 5)) {
			const char *t = strstr(p, "transport="), *ch = strstr(p, "channel=");
			if (t && ch && t < ch) {
				snprintf(r->transport, sizeof(r->transport), "%.*s",
				         (int)(ch - t - 11 > 0 ? ch - t - 11 : 0), t + 10);
				snprintf(r->channel, sizeof(r->channel), "%.*s", (int)strcspn(ch + 8, " \n"),
				         ch + 8);
			}
		}
		if (!e)
			break;
		p = e + 1;
	}
	if (timed_out) {
		r->outcome = TWC_TIMEOUT;
		snprintf(r->reason, sizeof(r->reason), "no verdict within %d s", timeout_s);
	} else if (!res) {
		char st_txt[64];
		twc_adapter_describe_status(st, st_txt, sizeof(st_txt));
		r->outcome = TWC_ERROR;
		snprintf(r->reason, sizeof(r->reason), "the case process ended without a verdict (%s)",
		         st_txt);
	} else {
		char word[16] = "";
		sscanf(res + 7, "%15s", word);
		const char *why = res + 7 + strlen(word);
		while (*why == ' ')
			why++;
		snprintf(r->reason, sizeof(r->reason), "%.*s", (int)strcspn(why, "\n"), why);
		r->outcome = TWC_ERROR;
		for (int o = 0; o < TWC_OUTCOME_COUNT; o++)
			if (!strcmp(word, twc_outcome_name((twc_outcome_t)o)))
				r->outcome = (twc_outcome_t)o;
	}
	r->log = log;
}

/* The runner's state for run_one (mutation.h's twc_run_fn). */
typedef struct run_ctx {
	const options *opt;
} run_ctx;

static void run_one(void *ctx, twc_result *r)
{
	run_child(((run_ctx *)ctx)->opt, r->c, r);
}

/* ---- spec coverage ------------------------------------------------------------------------- */

/* Does a case's section list ("wire.md 5.2 (5.2.c), agent.md 8") cite
 * `want` ("wire.md 5.2")? Every "<file>.md <number>" in the list counts. */
static bool cites(const char *sections, const char *want)
{
	for (const char *md = strstr(sections, ".md "); md; md = strstr(md + 4, ".md ")) {
		const char *start = md;
		while (start > sections && start[-1] != ' ' && start[-1] != ',' && start[-1] != '(')
			start--;
		const char *num = md + 4;
		size_t numlen = strspn(num, "0123456789.");
		while (numlen > 0 && num[numlen - 1] == '.')
			numlen--;
		char entry[96];
		snprintf(entry, sizeof(entry), "%.*s %.*s", (int)(md + 3 - start), start, (int)numlen, num);
		if (!strcmp(entry, want))
			return true;
	}
	return false;
}

static int uncovered(const options *opt, const twc_case *const *sel, int nsel)
{
	DIR *d = opendir(opt->spec);
	if (!d) {
		fprintf(stderr, "tensorwire-conform: --uncovered: cannot open %s\n", opt->spec);
		return 2;
	}
	struct dirent *de;
	int missing = 0, musts = 0;
	while ((de = readdir(d))) {
		size_t nl = strlen(de->d_name);
		if (nl < 4 || strcmp(de->d_name + nl - 3, ".md") != 0)
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", opt->spec, de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		char line[4096], sec[32] = "", title[256] = "";
		bool has_must = false;
		for (bool eof = false; !eof;) {
			eof = !fgets(line, sizeof(line), f);
			const char *p = line;
			bool heading = false;
			char nsec[32] = "", ntitle[256] = "";
			if (!eof && *p == '#') {
				while (*p == '#')
					p++;
				while (*p == ' ')
					p++;
				size_t k = 0;
				while ((isdigit((unsigned char)*p) || *p == '.') && k + 1 < sizeof(nsec))
					nsec[k++] = *p++;
				while (k > 0 && nsec[k - 1] == '.')
					k--;
				nsec[k] = '\0';
				heading = k > 0 && *p == ' ';
				snprintf(ntitle, sizeof(ntitle), "%.*s", (int)strcspn(p + 1, "\n"), p + 1);
			}
			if (eof || heading) {
				if (sec[0] && has_must) {
					musts++;
					char want[64];
					snprintf(want, sizeof(want), "%s %s", de->d_name, sec);
					bool covered = false;
					for (int i = 0; i < nsel && !covered; i++) {
						covered = cites(sel[i]->section, want);
						/* a battery case also exercises its runs' backends */
						for (int k = 0; sel[i]->battery && k < opt->ncombos && !covered;
						     k++) {
							twc_combo cb;
							if (twc_combo_parse(opt->combos[k], &cb))
								covered = cites(twc_combo_sections(cb.transport), want) ||
								          cites(twc_combo_sections(cb.channel), want);
						}
					}
					if (!covered) {
						printf("%-16s %s\n", want, title);
						missing++;
					}
				}
				if (heading) {
					snprintf(sec, sizeof(sec), "%s", nsec);
					snprintf(title, sizeof(title), "%s", ntitle);
					has_must = false;
				}
			} else if (strstr(line, "MUST") && !strstr(line, "MUST NOT be used")) {
				has_must = true;
			}
		}
		fclose(f);
	}
	closedir(d);
	printf("%d of %d MUST section(s) in %s have no case\n", missing, musts, opt->spec);
	return 0;
}

/* ---- main ----------------------------------------------------------------------------------- */

/* --pair: a run of two IUTs is kept when it is one of the pairs named;
 * a run of one IUT when that IUT is named in one of them. */
static bool pair_selected(const options *opt, const twc_result *r)
{
	for (int i = 0; i < opt->npairs; i++) {
		const char *pr = opt->pairs[i], *colon = strchr(pr, ':');
		size_t cl = (size_t)(colon - pr);
		bool client = strlen(r->iut->name) == cl && !strncmp(r->iut->name, pr, cl);
		if (r->peer && client && !strcmp(r->peer->name, colon + 1))
			return true;
		if (!r->peer && (client || !strcmp(r->iut->name, colon + 1)))
			return true;
	}
	return false;
}

/* --expect-fail: the exit status of a harness self-test. */
static int expected_failures(const char *text, int as_expected, int nruns)
{
	if (nruns > 0 && as_expected == nruns) {
		printf("# expected: all %d run(s) failed with '%s'\n", nruns, text);
		return 0;
	}
	printf("# NOT as expected: %d of %d run(s) failed with '%s' (--expect-fail)\n", as_expected,
	       nruns, text);
	return 1;
}

static bool selected(const options *opt, const twc_case *c)
{
	if (c->large && !opt->large) {
		bool named = false;
		for (int i = 0; i < opt->ncases; i++)
			named |= fnmatch(opt->cases[i], c->id, 0) == 0 && !strchr(opt->cases[i], '*');
		if (!named)
			return false;
	}
	if (opt->battery_only && !c->battery)
		return false;
	bool suite_ok = opt->nsuites == 0;
	for (int i = 0; i < opt->nsuites; i++)
		suite_ok |= !strcmp(opt->suites[i], c->suite);
	bool case_ok = opt->ncases == 0;
	for (int i = 0; i < opt->ncases; i++)
		case_ok |= fnmatch(opt->cases[i], c->id, 0) == 0;
	return suite_ok && case_ok;
}

int twc_conform_main(int argc, char **argv, const twc_suite *suites, size_t nsuites)
{
	g_suites = suites;
	g_nsuites = nsuites;
	static options opt = {.timeout_scale = 1.0};
	static char ours_buf[PATH_MAX], stock_buf[PATH_MAX];
	const char *child = NULL, *child_iut = NULL, *child_peer = NULL, *child_impls = "";
	const char *child_combo = NULL;
	int child_wait = 60000;
	static char mut_buf[PATH_MAX], ref_buf[PATH_MAX];
	static char prof_buf[PATH_MAX], spec_buf[PATH_MAX];
	const char *inst_prof = installed_data("profiles", prof_buf, sizeof(prof_buf));
	const char *inst_spec = installed_data("spec", spec_buf, sizeof(spec_buf));
	opt.profiles[opt.nprofiles++] = inst_prof ? inst_prof : TW_PROFILES_DIR;
	opt.spec = inst_spec ? inst_spec : TW_SPEC_DIR;
	const char *ref_arg = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has = i + 1 < argc;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if ((!strcmp(a, "--launch") || !strcmp(a, "--host") || !strcmp(a, "--address")) &&
		           has) {
			char err[512];
			if (twc_launch_option(a, argv[++i], err, sizeof(err))) {
				fprintf(stderr, "tensorwire-conform: %s\n", err);
				return 2;
			}
		} else if (!strcmp(a, "--version")) {
			printf("tensorwire-conform %s\nagent protocol %d (spec/agent.md)\nspec revision %s\n",
			       twc_runner_version(), TWC_AGENT_PROTOCOL_VERSION, twc_spec_revision());
			return 0;
		} else if (!strcmp(a, "--child") && has) {
			child = argv[++i];
		} else if (!strcmp(a, "--child-iut") && has) {
			child_iut = argv[++i];
		} else if (!strcmp(a, "--child-peer") && has) {
			child_peer = argv[++i];
		} else if (!strcmp(a, "--child-impls") && has) {
			child_impls = argv[++i];
		} else if (!strcmp(a, "--child-wait-ms") && has) {
			child_wait = atoi(argv[++i]);
		} else if (!strcmp(a, "--suite") && has && opt.nsuites < MAX_SEL) {
			const char *s = argv[++i];
			bool known = false;
			for (size_t k = 0; k < nsuites; k++)
				known |= !strcmp(suites[k].name, s);
			if (!known) {
				fprintf(stderr, "tensorwire-conform: unknown suite '%s' (", s);
				for (size_t k = 0; k < nsuites; k++)
					if (k == 0 || strcmp(suites[k].name, suites[k - 1].name))
						fprintf(stderr, "%s%s", k ? ", " : "", suites[k].name);
				fprintf(stderr, ")\n");
				return 2;
			}
			opt.suites[opt.nsuites++] = s;
		} else if (!strcmp(a, "--case") && has && opt.ncases < MAX_SEL) {
			opt.cases[opt.ncases++] = argv[++i];
		} else if (!strcmp(a, "--iut") && has && opt.niuts < MAX_IUTS) {
			const char *spec = argv[++i];
			const char *eq = strchr(spec, '=');
			if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof(opt.iuts[0].name)) {
				fprintf(stderr, "tensorwire-conform: --iut wants NAME=CMD\n");
				return 2;
			}
			twc_iut_info *t = &opt.iuts[opt.niuts];
			snprintf(t->name, sizeof(t->name), "%.*s", (int)(eq - spec), spec);
			for (int k = 0; k < opt.niuts; k++)
				if (!strcmp(opt.iuts[k].name, t->name)) {
					fprintf(stderr, "tensorwire-conform: --iut %s: the name is given twice "
					                "(reports tell IUTs apart by name)\n", t->name);
					return 2;
				}
			opt.niuts++;
			t->cmd = eq + 1;
		} else if (!strcmp(a, "--strict")) {
			opt.strict = true;
		} else if (!strcmp(a, "--large")) {
			opt.large = true;
		} else if (!strcmp(a, "--verbose")) {
			opt.verbose = true;
		} else if (!strcmp(a, "--list")) {
			opt.list = true;
		} else if (!strcmp(a, "--uncovered")) {
			opt.uncovered = true;
		} else if (!strcmp(a, "--junit") && has) {
			opt.junit = argv[++i];
		} else if (!strcmp(a, "--json") && has) {
			opt.json = argv[++i];
		} else if (!strcmp(a, "--profiles") && has && opt.nprofiles < MAX_SEL) {
			opt.profiles[opt.nprofiles++] = argv[++i];
		} else if (!strcmp(a, "--reference") && has) {
			ref_arg = argv[++i];
		} else if (!strcmp(a, "--pair") && has && opt.npairs < MAX_SEL) {
			const char *pr = argv[++i];
			const char *colon = strchr(pr, ':');
			if (!colon || colon == pr || !colon[1]) {
				fprintf(stderr, "tensorwire-conform: --pair wants CLIENT:SERVER (IUT names)\n");
				return 2;
			}
			opt.pairs[opt.npairs++] = pr;
		} else if (!strcmp(a, "--combo") && has) {
			const char *cspec = argv[++i];
			twc_combo cb;
			if (strcmp(cspec, "all") && !twc_combo_parse(cspec, &cb)) {
				fprintf(stderr, "tensorwire-conform: --combo wants TRANSPORT+CHANNEL "
				                "(e.g. shm+cma) or all, not '%s'\n", cspec);
				return 2;
			}
			if (opt.ncombos == MAX_SEL) {
				fprintf(stderr, "tensorwire-conform: at most %d --combo\n", MAX_SEL);
				return 2;
			}
			opt.combos[opt.ncombos++] = cspec;
		} else if (!strcmp(a, "--battery-only")) {
			opt.battery_only = true;
		} else if (!strcmp(a, "--child-combo") && has) {
			child_combo = argv[++i];
		} else if (!strcmp(a, "--expect-fail") && has) {
			opt.expect_fail = argv[++i];
		} else if (!strcmp(a, "--wait-s") && has) {
			char *end;
			long v = strtol(argv[++i], &end, 10);
			if (end == argv[i] || *end || v <= 0 || v > INT_MAX / 1000) {
				fprintf(stderr, "tensorwire-conform: --wait-s wants a whole number of seconds "
				                "from 1 to %d, not '%s'\n", INT_MAX / 1000, argv[i]);
				return 2;
			}
			opt.wait_ms = (int)v * 1000;
		} else if (!strcmp(a, "--mutants") && has) {
			opt.mut.list = argv[++i];
		} else if (!strcmp(a, "--mutant-adapter") && has) {
			opt.mut.adapter = argv[++i];
		} else if (!strcmp(a, "--mutants-only") && has) {
			opt.mut.only = argv[++i];
		} else if (!strcmp(a, "--mutants-full")) {
			opt.mut.full = true;
		} else if (!strcmp(a, "--mutation-report") && has) {
			opt.mut.report = argv[++i];
		} else if (!strcmp(a, "--spec") && has) {
			opt.spec = argv[++i];
		} else if (!strcmp(a, "--timeout-scale") && has) {
			/* a case's timeout is whole seconds: a scale that leaves none
			 * would blame the IUT for the harness's setting */
			char *end;
			opt.timeout_scale = strtod(argv[++i], &end);
			if (end == argv[i] || *end || !(opt.timeout_scale >= 0.05) ||
			    !(opt.timeout_scale <= 100)) {
				fprintf(stderr, "tensorwire-conform: --timeout-scale wants a number from 0.05 "
				                "to 100, not '%s'\n", argv[i]);
				return 2;
			}
		} else {
			fprintf(stderr, "tensorwire-conform: unknown or incomplete option '%s' (see "
			                "--help)\n", a);
			return 2;
		}
	}
	/* a report that cannot be written is a usage error before anything
	 * runs, not after every case has */
	const char *const reports[] = { opt.junit, opt.json };
	for (int k = 0; k < 2 && !child; k++) { /* a case's child writes no report */
		if (!reports[k])
			continue;
		/* a file made only for the check goes again: a later usage
		 * error must not leave an empty report behind */
		bool existed = access(reports[k], F_OK) == 0;
		FILE *rf = fopen(reports[k], "a");
		if (!rf) {
			fprintf(stderr, "tensorwire-conform: --%s %s: %s\n", k ? "json" : "junit",
			        reports[k], strerror(errno));
			return 2;
		}
		fclose(rf);
		if (!existed)
			(void)unlink(reports[k]);
	}
	if (child) {
		if (child_combo && !twc_combo_set_current(child_combo)) {
			printf("RESULT ERROR bad --child-combo '%s'\n", child_combo);
			return 0;
		}
		return child_main(child, child_iut ? child_iut : "", child_peer, child_impls,
		                  child_wait);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	int nall;
	const twc_case **all = all_cases(&nall);
	if (!all) {
		fprintf(stderr, "tensorwire-conform: out of memory\n");
		return 2;
	}
	const twc_case **sel = calloc((size_t)nall + 1, sizeof(*sel));
	int nsel = 0;
	if (!sel)
		return 2;
	for (int i = 0; i < nall; i++)
		if (selected(&opt, all[i]))
			sel[nsel++] = all[i];
	if (opt.uncovered) {
		/* coverage is about the whole catalogue, not the selection */
		int st = uncovered(&opt, all, nall);
		free(sel);
		return st;
	}
	if (opt.list) {
		for (int i = 0; i < nsel; i++)
			printf("%-38s %-6s %-14s %s%s\n", sel[i]->id,
			       sel[i]->level == TWC_MUST ? "MUST" : "SHOULD", sel[i]->section,
			       sel[i]->pairwise ? "[pairs] " : "", sel[i]->description);
		printf("%d case(s)\n", nsel);
		free(sel);
		return 0;
	}
	/* the reference of cross and pairwise runs */
	if (ref_arg && !strcmp(ref_arg, "none")) {
		opt.no_ref = true;
	} else if (ref_arg) {
		const char *eq = strchr(ref_arg, '=');
		if (!eq || eq == ref_arg || (size_t)(eq - ref_arg) >= sizeof(opt.ref.name)) {
			fprintf(stderr, "tensorwire-conform: --reference wants NAME=CMD or none\n");
			free(sel);
			return 2;
		}
		snprintf(opt.ref.name, sizeof(opt.ref.name), "%.*s", (int)(eq - ref_arg), ref_arg);
		opt.ref.cmd = eq + 1;
	} else {
		snprintf(opt.ref.name, sizeof(opt.ref.name), "ours");
		opt.ref.cmd = default_cmd(TW_IUT_OURS, ref_buf, sizeof(ref_buf));
	}
	if (opt.mut.list) {
		if (!opt.mut.adapter)
			opt.mut.adapter = default_cmd(TW_IUT_MUTANT, mut_buf, sizeof(mut_buf));
		/* a mutant that never calls back is killed after this long, not after
		 * half the case's timeout; the baseline runs under the same bound */
		if (opt.wait_ms == 0)
			opt.wait_ms = 10000;
		const char *why;
		if (twc_cmd_unavailable(opt.mut.adapter, &why)) {
			printf("# mutation suite skipped: %s\n", why);
			free(sel);
			return EXIT_SKIP;
		}
		if (!opt.no_ref)
			probe_iut(&opt.ref);
		if (opt.no_ref || !opt.ref.available) {
			fprintf(stderr, "tensorwire-conform: --mutants needs the unmutated reference "
			                "(ours): %s\n", opt.no_ref ? "--reference none" : opt.ref.why);
			free(sel);
			return 2;
		}
		setvbuf(stderr, NULL, _IOLBF, 0);
		run_ctx rc = {.opt = &opt};
		int st = twc_mutation_run(&opt.mut, sel, nsel, &opt.ref, run_one, &rc);
		free(sel);
		return st;
	}
	if (opt.niuts == 0) {
		snprintf(opt.iuts[0].name, sizeof(opt.iuts[0].name), "ours");
		opt.iuts[0].cmd = default_cmd(TW_IUT_OURS, ours_buf, sizeof(ours_buf));
		snprintf(opt.iuts[1].name, sizeof(opt.iuts[1].name), "stock");
		opt.iuts[1].cmd = default_cmd(TW_IUT_STOCK, stock_buf, sizeof(stock_buf));
		opt.niuts = 2;
	}
	/* a --pair names IUTs (or the reference) */
	for (int p = 0; p < opt.npairs; p++) {
		const char *pr = opt.pairs[p], *colon = strchr(pr, ':');
		for (int side = 0; side < 2; side++) {
			const char *nm = side ? colon + 1 : pr;
			size_t len = side ? strlen(colon + 1) : (size_t)(colon - pr);
			bool known = !opt.no_ref && strlen(opt.ref.name) == len &&
			             !strncmp(opt.ref.name, nm, len);
			for (int k = 0; k < opt.niuts && !known; k++)
				known = strlen(opt.iuts[k].name) == len && !strncmp(opt.iuts[k].name, nm, len);
			if (!known) {
				fprintf(stderr, "tensorwire-conform: --pair %s: no IUT (or reference) named "
				                "'%.*s'\n", pr, (int)len, nm);
				free(sel);
				return 2;
			}
		}
	}
	/* every IUT and the reference, each with its profile */
	twc_iut_info *who[MAX_IUTS + 1];
	twc_profile *profiles[MAX_IUTS + 1] = {NULL};
	int nwho = 0;
	twc_iut_info *ref = NULL;
	for (int i = 0; i < opt.niuts; i++) {
		probe_iut(&opt.iuts[i]);
		who[nwho++] = &opt.iuts[i];
		if (!opt.no_ref && !ref && !strcmp(opt.iuts[i].cmd, opt.ref.cmd))
			ref = &opt.iuts[i];
	}
	if (!opt.no_ref && !ref) {
		probe_iut(&opt.ref);
		ref = &opt.ref;
		who[nwho++] = ref;
	}
	for (int i = 0; i < nwho; i++) {
		char err[512];
		bool refused = false;
		if (who[i]->available &&
		    !(profiles[i] = twc_profile_load(opt.profiles, opt.nprofiles, who[i]->impl, err,
		                                    sizeof(err)))) {
			fprintf(stderr, "tensorwire-conform: %s\n", err);
			refused = true;
		} else if (who[i]->broken) {
			/* An adapter that runs but cannot be talked to would otherwise
			 * turn every case into a SKIP: a gate must not pass on that. */
			fprintf(stderr, "tensorwire-conform: %s %s (%s): %s\n",
			        i >= opt.niuts ? "reference" : "IUT", who[i]->name, who[i]->cmd, who[i]->why);
			refused = true;
		}
		if (refused) {
			for (int k = 0; k <= i; k++)
				twc_profile_free(profiles[k]);
			free(sel);
			return 2;
		}
		snprintf(who[i]->profile, sizeof(who[i]->profile), "%s", twc_profile_sources(profiles[i]));
		fprintf(stderr, "tensorwire-conform: %s %s: %s %s, judged with profile %s%s%s\n",
		        i >= opt.niuts ? "reference" : "IUT", who[i]->name,
		        who[i]->impl, who[i]->version, who[i]->profile,
		        who[i]->available ? "" : " - ", who[i]->why);
	}

	/* the runs (runs.h) */
	const char *combos[MAX_SEL * 4];
	int ncombos = select_combos(&opt, who, nwho, combos, MAX_SEL * 4);
	twc_runs rl = {0};
	for (int i = 0; i < nsel; i++)
		twc_runs_add_case(&rl, sel[i], opt.iuts, opt.niuts, ref, combos, ncombos);
	if (rl.oom) {
		fprintf(stderr, "tensorwire-conform: out of memory\n");
		return 2;
	}
	if (opt.npairs > 0) {
		int kept = 0;
		for (int i = 0; i < rl.n; i++)
			if (pair_selected(&opt, &rl.v[i]))
				rl.v[kept++] = rl.v[i];
		rl.n = kept;
	}
	twc_result *rs = rl.v;
	int nruns = rl.n;
	twc_tap_plan(stdout, nruns);
	printf("# tensorwire-conform %s, agent protocol %d, spec revision %s\n", twc_runner_version(),
	       TWC_AGENT_PROTOCOL_VERSION, twc_spec_revision());
	printf("# rdma provider: %s\n", twc_rdma_provider());
	if (twc_launch_summary()[0])
		printf("# adapters placed: %s\n", twc_launch_summary());
	for (int i = 0; i < nwho; i++)
		printf("# %s %s: %s %s; adapter: %s (agent protocol %d); profile: %s\n",
		       i >= opt.niuts ? "reference" : "IUT", who[i]->name, who[i]->impl,
		       who[i]->version, who[i]->adapter[0] ? who[i]->adapter : "-", who[i]->protocol,
		       who[i]->profile);
	int ran = 0, required_failures = 0, fails_as_expected = 0;
	run_ctx rctx = {.opt = &opt};
	for (int i = 0; i < nruns; i++) {
		twc_result *r = &rs[i];
		char why[512];
		const twc_iut_info *gone = !r->iut->available ? r->iut
		                          : (r->peer && !r->peer->available) ? r->peer : NULL;
		if (gone) {
			r->outcome = TWC_SKIP;
			snprintf(r->reason, sizeof(r->reason), "IUT %s: %s", gone->name, gone->why);
		} else if (!needs_met(r->c, why, sizeof(why))) {
			r->outcome = TWC_SKIP;
			snprintf(r->reason, sizeof(r->reason), "%s", why);
		} else if (run_unoffered(r, why, sizeof(why))) {
			r->outcome = TWC_SKIP;
			snprintf(r->reason, sizeof(r->reason), "%s", why);
		} else {
			run_one(&rctx, r);
			/* a case that found nothing to check here (a backend the IUT
			 * says is not viable) did not run either */
			ran += r->outcome != TWC_SKIP;
		}
		/* profiles: a known failure of either implementation involved becomes XFAIL */
		/* a battery run on another combination is known to profiles as
		 * "<id>@<transport>+<channel>" (globs such as "semantic.*@shm+*"),
		 * or by its plain id, which holds on every combination */
		char pkey[256];
		if (r->combo[0] && strcmp(r->combo, TWC_COMBO_DEFAULT))
			snprintf(pkey, sizeof(pkey), "%s@%s", r->c->id, r->combo);
		else
			snprintf(pkey, sizeof(pkey), "%s", r->c->id);
		if (r->unexcused) {
			size_t used = strlen(r->reason);
			snprintf(r->reason + used, sizeof(r->reason) - used,
			         " [not the failure recorded for this implementation: no profile "
			         "excuses it]");
		} else if (r->outcome == TWC_FAIL || r->outcome == TWC_ERROR ||
		           r->outcome == TWC_TIMEOUT) {
			for (int p = 0; p < nwho; p++) {
				if (who[p] != r->iut && who[p] != r->peer)
					continue;
				/* One implementation's profile does not excuse the other's
				 * adapter dying in a mixed pair. */
				if (r->gone[0] && strcmp(r->gone, who[p]->name) != 0)
					continue;
				const char *x = profile_find(profiles[p], pkey, r->c->id, run_role(r, who[p]));
				if (x) {
					char was[1024];
					snprintf(was, sizeof(was), "%s", r->reason);
					snprintf(r->reason, sizeof(r->reason), "%s profile: %s (observed: %.600s)",
					         who[p]->impl, x, was);
					r->outcome = TWC_XFAIL;
					break;
				}
			}
		} else if (r->outcome == TWC_PASS) {
			/* only a run of that implementation alone says so: a mixed pair
			 * may pass because the other side did the part it gets wrong */
			for (int p = 0; p < nwho; p++)
				if (who[p] == r->iut && (!r->peer || r->peer == r->iut) &&
				    profile_find(profiles[p], pkey, r->c->id, run_role(r, who[p])))
					fprintf(stderr, "tensorwire-conform: note: %s passes now; its %s profile "
					                "exception can go\n", pkey, who[p]->impl);
		}
		if (opt.strict && r->outcome == TWC_SKIP) {
			char was[1024];
			snprintf(was, sizeof(was), "%s", r->reason);
			snprintf(r->reason, sizeof(r->reason), "strict mode: skipped: %.900s", was);
			r->outcome = TWC_FAIL;
		}
		bool bad = r->outcome == TWC_FAIL || r->outcome == TWC_ERROR || r->outcome == TWC_TIMEOUT;
		if (bad && (r->c->accepts & TWC_ACCEPTS(r->outcome)))
			bad = false;
		r->required_failure = bad && r->c->level == TWC_MUST;
		required_failures += r->required_failure;
		if (opt.expect_fail &&
		    (r->outcome == TWC_FAIL || r->outcome == TWC_ERROR || r->outcome == TWC_TIMEOUT) &&
		    strstr(r->reason, opt.expect_fail))
			fails_as_expected++;
		twc_tap_result(stdout, i + 1, r, opt.verbose);
		char target[96];
		twc_result_target(r, target, sizeof(target));
		fprintf(stderr, "[%d/%d] %-36s %-14s %s (%.1f s)%s%.200s\n", i + 1, nruns, r->c->id,
		        target, twc_outcome_name(r->outcome), r->seconds,
		        r->outcome == TWC_PASS ? "" : ": ", r->outcome == TWC_PASS ? "" : r->reason);
	}
	/* the matrix, as TAP comments */
	char *mtx = NULL;
	size_t mlen = 0;
	FILE *mf = open_memstream(&mtx, &mlen);
	if (mf) {
		twc_matrix_print(mf, rs, nruns);
		fclose(mf);
		for (char *p = mtx; p && *p;) {
			size_t n = strcspn(p, "\n");
			printf("# %.*s\n", (int)n, p);
			p += n + (p[n] ? 1 : 0);
		}
		free(mtx);
	}
	int rc = 0;
	char err[512];
	if (opt.junit && twc_junit_write(opt.junit, rs, nruns, err, sizeof(err))) {
		fprintf(stderr, "tensorwire-conform: %s\n", err);
		rc = 2;
	}
	if (opt.json && twc_json_write(opt.json, rs, nruns, err, sizeof(err))) {
		fprintf(stderr, "tensorwire-conform: %s\n", err);
		rc = 2;
	}
	for (int i = 0; i < nruns; i++)
		free(rs[i].log);
	free(rs);
	for (int i = 0; i < nwho; i++)
		twc_profile_free(profiles[i]);
	free(sel);
	if (rc)
		return rc;
	if (ran == 0 && !opt.strict) {
		printf("# nothing could run\n");
		return EXIT_SKIP;
	}
	if (opt.expect_fail)
		return expected_failures(opt.expect_fail, fails_as_expected, nruns);
	if (ran == 0) {
		/* strict: nothing may be left unchecked, and nothing was checked */
		printf("# strict mode: nothing ran (%d run(s) selected, each skipped or none)\n", nruns);
		return 1;
	}
	return required_failures ? 1 : 0;
}
