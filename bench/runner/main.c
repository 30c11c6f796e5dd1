/*
 * main.c - tensorwire-bench: the command line, the systems (rows), the
 * schedule (published sizes, iterations scaled by size), and the loop over
 * network x CPU placement x buffer policy x system. See docs/bench.md.
 * It must not time anything: drivers do.
 */
#define _GNU_SOURCE
#include "runner.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define G_LIM "Physical limits"
#define G_TP "TensorPipe (Debian libtensorpipe0)"
#define G_TW "tensorwire (ours)"
#define G_NNG "nng (Debian libnng1) pair0"
#define G_TORCH "torch.distributed.rpc (Debian python3-torch, its libtensorpipe0)"

const twr_system twr_systems[] = {
	{"memcpy", "memcpy 1 copy", G_LIM, "twb-limits", "memcpy", true, false, true, NULL, NULL},
	{"raw-tcp", "raw TCP ping-pong, NODELAY", G_LIM, "twb-limits", "tcp", false, true, true,
	 NULL, NULL},
	{"raw-unix", "raw AF_UNIX stream ping-pong", G_LIM, "twb-limits", "unix", false, false, true,
	 NULL, NULL},
	{"shm-flag", "shm spin-flag + 2 memcpy/direction", G_LIM, "twb-limits", "shm", false, false,
	 true, NULL, NULL},
	{"cma-flag", "shm flags + 1 process_vm_readv/direction", G_LIM, "twb-limits", "cma", false,
	 false, false, NULL, NULL},
	{"tp-uv-basic", "TP uv(TCP)+basic", G_TP, "twb-tp", "uv-basic", false, true, true, NULL,
	 "raw-tcp"},
	{"tp-uv-mpt", "TP uv+mpt (2 uv lanes)", G_TP, "twb-tp", "uv-mpt", false, true, false, NULL,
	 "raw-tcp"},
	{"tp-shm-basic", "TP shm+basic", G_TP, "twb-tp", "shm-basic", false, false, false, NULL,
	 "shm-flag"},
	{"tp-shm-cma", "TP shm+cma", G_TP, "twb-tp", "shm-cma", false, false, false, NULL,
	 "cma-flag"},
	{"tw-uv-basic", "tensorwire uv(TCP)+basic", G_TW, "twb-tw", "uv-basic", false, true, true,
	 "tp-uv-basic", "raw-tcp"},
	{"tp-uv-basic-td", "TP uv(TCP)+basic, target device named", G_TP, "twb-tp", "uv-basic-td",
	 false, true, false, NULL, "raw-tcp"},
	{"tw-uv-basic-td", "tensorwire uv(TCP)+basic, target device named", G_TW, "twb-tw",
	 "uv-basic-td", false, true, false, "tp-uv-basic-td", "raw-tcp"},
	{"tw-uv-basic-spin", "tensorwire uv(TCP)+basic, busy_poll_us=100000", G_TW, "twb-tw",
	 "uv-basic-spin", false, true, false, "tp-uv-basic", "raw-tcp"},
	{"tw-uv-basic-td-spin", "tensorwire uv(TCP)+basic, target device named, busy_poll_us=100000",
	 G_TW, "twb-tw", "uv-basic-spin-td", false, true, false, "tp-uv-basic-td", "raw-tcp"},
	{"tw-uv-basic-noeager", "tensorwire uv(TCP)+basic, eager tensors off (spec 8.4)", G_TW,
	 "twb-tw", "uv-basic-noeager", false, true, false, "tp-uv-basic", "raw-tcp"},
	{"tw-uv-mpt", "tensorwire uv+mpt", G_TW, "twb-tw", "uv-mpt", false, true, false,
	 "tp-uv-mpt", "raw-tcp"},
	{"tw-shm-basic", "tensorwire shm+basic (polls 1 ms after activity)", G_TW, "twb-tw", "shm-basic", false, false, false,
	 "tp-shm-basic", "shm-flag"},
	{"tw-shm-cma", "tensorwire shm+cma (polls 1 ms after activity)", G_TW, "twb-tw", "shm-cma", false, false, false,
	 "tp-shm-cma", "cma-flag"},
	{"tw-shm-basic-spin", "tensorwire shm+basic, busy_poll_us=100000", G_TW, "twb-tw",
	 "shm-basic-spin", false, false, false, "tp-shm-basic", "shm-flag"},
	{"tw-shm-cma-spin", "tensorwire shm+cma, busy_poll_us=100000", G_TW, "twb-tw",
	 "shm-cma-spin", false, false, false, "tp-shm-cma", "cma-flag"},
	{"tw-shm-basic-noeager", "tensorwire shm+basic, eager tensors off (spec 8.4)", G_TW,
	 "twb-tw", "shm-basic-noeager", false, false, false, "tp-shm-basic", "shm-flag"},
	{"tw-shm-cma-noeager", "tensorwire shm+cma, eager tensors off (spec 8.4)", G_TW,
	 "twb-tw", "shm-cma-noeager", false, false, false, "tp-shm-cma", "cma-flag"},
	{"tw-shm-basic-sleep", "tensorwire shm+basic, busy_poll_us=0 (wake-ups only)", G_TW,
	 "twb-tw", "shm-basic-sleep", false, false, false, "tp-shm-basic", "shm-flag"},
	{"tp-ibv-basic", "TP ibv+basic (simverbs or a device)", G_TP, "twb-tp", "ibv-basic", false,
	 true, false, NULL, NULL},
	{"tw-ibv-basic", "tensorwire ibv+basic (polls 1 ms after activity)", G_TW, "twb-tw", "ibv-basic", false, true, false,
	 "tp-ibv-basic", NULL},
	{"tw-ibv-basic-spin", "tensorwire ibv+basic, busy_poll_us=100000", G_TW, "twb-tw",
	 "ibv-basic-spin", false, true, false, "tp-ibv-basic", NULL},
	{"tw-ibv-basic-sleep", "tensorwire ibv+basic, busy_poll_us=0 (completion events only)",
	 G_TW, "twb-tw", "ibv-basic-sleep", false, true, false, "tp-ibv-basic", NULL},
	{"tw-uv-cuda_basic", "tensorwire uv+cuda_basic, cuda:0 tensors", G_TW, "twb-tw",
	 "uv-cuda_basic", false, false, false, "torchrpc-uv-cuda_basic", NULL},
	{"tw-uv-cuda_ipc", "tensorwire uv+cuda_ipc, cuda:0 tensors", G_TW, "twb-tw", "uv-cuda_ipc",
	 false, false, false, "torchrpc-uv-cuda_ipc", NULL},
	{"tw-uv-cuda_gdr", "tensorwire uv+cuda_gdr, cuda:0 tensors", G_TW, "twb-tw", "uv-cuda_gdr",
	 false, true, false, "torchrpc-uv-cuda_gdr", NULL},
	{"torchrpc-uv-cuda_gdr", "torch RPC over TP cuda_gdr, cuda:0 tensors", G_TORCH,
	 "twb-torchrpc", "uv-cuda_gdr", false, true, false, NULL, NULL},
	{"torchrpc-uv-cuda_basic", "torch RPC over TP cuda_basic, cuda:0 tensors", G_TORCH,
	 "twb-torchrpc", "uv-cuda_basic", false, false, false, NULL, NULL},
	{"torchrpc-uv-cuda_ipc", "torch RPC over TP cuda_ipc, cuda:0 tensors", G_TORCH,
	 "twb-torchrpc", "uv-cuda_ipc", false, false, false, NULL, NULL},
	{"torchrpc-uv-basic", "torch RPC over TP uv+basic", G_TORCH, "twb-torchrpc", "uv-basic",
	 false, true, false, "tp-uv-basic", "raw-tcp"},
	{"torchrpc-shm-basic", "torch RPC over TP shm+basic", G_TORCH, "twb-torchrpc", "shm-basic",
	 false, false, false, "tp-shm-basic", "shm-flag"},
	{"torchrpc-shm-cma", "torch RPC over TP shm+cma", G_TORCH, "twb-torchrpc", "shm-cma", false,
	 false, false, "tp-shm-cma", "cma-flag"},
	{"nng-tcp", "nng-TCP", G_NNG, "twb-nng", "tcp", false, true, true, "tp-uv-basic", "raw-tcp"},
	{"nng-ipc", "nng-IPC (unix socket)", G_NNG, "twb-nng", "ipc", false, false, true,
	 "tp-shm-basic", "raw-unix"},
};
const size_t twr_num_systems = sizeof(twr_systems) / sizeof(twr_systems[0]);

const twr_system *twr_system_find(const char *name)
{
	for (size_t i = 0; i < twr_num_systems; i++)
		if (!strcmp(twr_systems[i].name, name))
			return &twr_systems[i];
	return NULL;
}

const char *twr_status_name(twr_status_t st)
{
	switch (st) {
	case TWR_OK: return "ok";
	case TWR_SKIPPED: return "skipped";
	case TWR_FAILED: return "failed";
	case TWR_TIMEOUT: return "timeout";
	}
	return "?";
}

const char *twr_policy_name(twb_policy_t p)
{
	return p == TWB_POLICY_FRESH ? "fresh" : "reused";
}

/* ---- schedule ------------------------------------------------------------------ */

/* The published sizes: 1.25 KB, 20 KB, 1.25 MB, 10 MB, 40 MB, 640 MB, 1.25 GB
 * (and 2.5 GB with --big). */
static const uint64_t twr_published[] = {1280ull, 20480ull, 1310720ull, 10485760ull,
                                         41943040ull, 671088640ull, 1342177280ull};
#define TWR_BIG 2684354560ull

/* Iterations by size, as in the measured reference (peer-latency-measured.md):
 * many for small messages (their medians are noisy), few for huge ones (each
 * takes up to a second and the fill and check cost as much again). */
static uint32_t twr_iters_for(uint64_t size)
{
	if (size <= 20480)
		return 2000;
	if (size <= 1310720)
		return 300;
	if (size <= 10485760)
		return 60;
	if (size <= 41943040)
		return 20;
	if (size <= 671088640)
		return 5;
	return 3;
}

static void twr_add_size(twb_schedule *s, uint64_t size, double scale)
{
	uint32_t it = twr_iters_for(size);
	double scaled = (double)it * scale;
	if (s->count == TWB_MAX_SIZES) {
		fprintf(stderr, "tensorwire-bench: at most %d sizes\n", TWB_MAX_SIZES);
		exit(2);
	}
	it = scaled < 1 ? 1 : (uint32_t)scaled;
	s->sizes[s->count] = size;
	s->iters[s->count] = it;
	s->warmup[s->count] = size >= 1000000000ull ? 1 : (it / 10 ? it / 10 : 1);
	s->count++;
}

static uint64_t twr_mem_available(void)
{
	char line[256];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

/* ---- lists ------------------------------------------------------------------------- */

#define TWR_MAX_LIST 32

static size_t twr_split(char *s, const char **out, size_t max)
{
	size_t n = 0;
	for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ","))
		out[n++] = tok;
	return n;
}

/* A number option's value: all of `text` a finite number from min to max;
 * else false, naming the option. */
static bool twr_number(const char *opt, const char *text, double min, double max, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(v) || v < min || v > max) {
		fprintf(stderr, "tensorwire-bench: %s '%s': want a number from %.15g to %.15g\n", opt, text,
		        min, max);
		return false;
	}
	*out = v;
	return true;
}

static void twr_mkdir(const char *path)
{
	if (mkdir(path, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "tensorwire-bench: mkdir %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

static void twr_on_signal(int sig)
{
	twr_kill_children();
	twr_netns_teardown();
	_exit(128 + sig);
}

static void twr_usage(FILE *f)
{
	fprintf(f,
	        "usage: tensorwire-bench [options]          run, write table, JSON and plots\n"
	        "       tensorwire-bench check DIR          check an output folder (smoke test)\n"
	        "       tensorwire-bench compare BASE.json... -- NEW.json...\n"
	        "                                           flag rows and sizes whose median got\n"
	        "                                           worse than the baselines' spread\n"
	        "       tensorwire-bench --list             list the systems\n"
	        "options:\n"
	        "  --full            published sizes 1.25 KB .. 1.25 GB (default)\n"
	        "  --big             add 2.5 GB (skipped, with a note, if memory is short)\n"
	        "  --smoke           1.25 KB, 20 KB, 1.25 MB with few iterations (correctness)\n"
	        "  --sizes LIST      sizes in bytes, iterations by the size rule\n"
	        "  --iters-scale F   multiply every iteration count (at least 1 remains)\n"
	        "  --systems LIST    system names, 'default' or 'all' (default: default)\n"
	        "  --policy LIST     fresh,reused (default: both)\n"
	        "  --cpu LIST        free,same,split (default: free)\n"
	        "  --net LIST        loopback,netns (default: both; netns needs root)\n"
	        "  --out DIR         output folder (default: bench-results)\n"
	        "  --timeout S       deadline per run in seconds (default 900)\n"
	        "  --check           check the output afterwards as 'check DIR' does\n"
	        "  --check-expect-damage  check instead that every message shows exactly one\n"
	        "                    wrong byte (for runs with TWB_FAULT_FLIP=1)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"full", no_argument, NULL, 'f'},
		{"big", no_argument, NULL, 'B'},
		{"smoke", no_argument, NULL, 'q'},
		{"sizes", required_argument, NULL, 'S'},
		{"iters-scale", required_argument, NULL, 'x'},
		{"systems", required_argument, NULL, 's'},
		{"policy", required_argument, NULL, 'p'},
		{"cpu", required_argument, NULL, 'c'},
		{"net", required_argument, NULL, 'n'},
		{"out", required_argument, NULL, 'o'},
		{"timeout", required_argument, NULL, 't'},
		{"check", no_argument, NULL, 'C'},
		{"check-expect-damage", no_argument, NULL, 'D'},
		{"list", no_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char systems_arg[512] = "default", policy_arg[64] = "fresh,reused", cpu_arg[64] = "free";
	char net_arg[64] = "loopback,netns", sizes_arg[512] = "", notes[2048] = "";
	char command[2048], exe[PATH_MAX], bindir[PATH_MAX], dir[PATH_MAX + 16];
	const char *sysnames[TWR_MAX_LIST], *policies[4], *cpus[4], *nets[4];
	size_t nsys, npol, ncpu, nnet, nruns = 0, off = 0;
	bool smoke = false, big = false, check = false, expect_damage = false, want_netns = false;
	double scale = 1.0, timeout = 900;
	twr_env env;
	twb_schedule sched;
	twr_run *runs;
	int c, failed = 0, ok = 0;

	memset(&env, 0, sizeof(env));
	env.outdir = "bench-results";
	env.timeout_s = 900;
	if (argc >= 2 && !strcmp(argv[1], "compare"))
		return twr_compare_main(argc - 1, argv + 1);
	if (argc == 3 && !strcmp(argv[1], "check")) {
		int problems = twr_check(argv[2], false);
		printf("check: %d problem(s)\n", problems);
		return problems ? 1 : 0;
	}
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'f': smoke = false; break;
		case 'B': big = true; break;
		case 'q': smoke = true; break;
		case 'S': snprintf(sizes_arg, sizeof(sizes_arg), "%s", optarg); break;
		case 'x':
			if (!twr_number("--iters-scale", optarg, 1e-6, 1e6, &scale))
				return 2;
			break;
		case 's': snprintf(systems_arg, sizeof(systems_arg), "%s", optarg); break;
		case 'p': snprintf(policy_arg, sizeof(policy_arg), "%s", optarg); break;
		case 'c': snprintf(cpu_arg, sizeof(cpu_arg), "%s", optarg); break;
		case 'n': snprintf(net_arg, sizeof(net_arg), "%s", optarg); break;
		case 'o': env.outdir = optarg; break;
		case 't':
			if (!twr_number("--timeout", optarg, 1, 86400, &timeout))
				return 2;
			env.timeout_s = (unsigned)timeout;
			break;
		case 'C': check = true; break;
		case 'D': check = expect_damage = true; break;
		case 'l':
			for (size_t i = 0; i < twr_num_systems; i++)
				printf("%-14s %-36s %s%s\n", twr_systems[i].name, twr_systems[i].label,
				       twr_systems[i].by_default ? "default" : "opt-in",
				       twr_systems[i].network ? ", network (also runs across netns)" : "");
			return 0;
		case 'h': twr_usage(stdout); return 0;
		default: twr_usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "tensorwire-bench: unexpected argument '%s' (see --help)\n",
		        argv[optind]);
		return 2;
	}
	for (int i = 0; i < argc && off < sizeof(command); i++)
		off += (size_t)snprintf(command + off, sizeof(command) - off, "%s%s", i ? " " : "",
		                        i ? argv[i] : "tensorwire-bench");

	/* drivers live next to this executable */
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		perror("tensorwire-bench: readlink /proc/self/exe");
		return 1;
	}
	exe[n] = '\0';
	snprintf(bindir, sizeof(bindir), "%s", exe);
	*strrchr(bindir, '/') = '\0';
	env.bindir = bindir;

	/* the schedule */
	memset(&sched, 0, sizeof(sched));
	if (sizes_arg[0]) {
		const char *list[TWB_MAX_SIZES + 1];
		size_t k = twr_split(sizes_arg, list, TWB_MAX_SIZES + 1);
		if (k > TWB_MAX_SIZES) {
			fprintf(stderr, "tensorwire-bench: --sizes: at most %d sizes\n", TWB_MAX_SIZES);
			return 2;
		}
		for (size_t i = 0; i < k; i++) {
			/* bytes, a whole number from 1 to 1 TiB */
			double v;
			char opt[32];
			snprintf(opt, sizeof(opt), "--sizes item %zu", i + 1);
			if (!twr_number(opt, list[i], 1, 1099511627776.0, &v))
				return 2;
			if (v != floor(v)) {
				fprintf(stderr, "tensorwire-bench: %s '%s': want a whole number of bytes\n",
				        opt, list[i]);
				return 2;
			}
			twr_add_size(&sched, (uint64_t)v, scale * (smoke ? 0.025 : 1.0));
		}
	} else if (smoke) {
		for (size_t i = 0; i < 3; i++)
			twr_add_size(&sched, twr_published[i], scale * 0.025);
	} else {
		for (size_t i = 0; i < sizeof(twr_published) / sizeof(twr_published[0]); i++)
			twr_add_size(&sched, twr_published[i], scale);
		if (big)
			twr_add_size(&sched, TWR_BIG, scale);
	}
	{
		/* each process holds a send and a receive buffer, the server one, a
		 * shared region or nng's copies more: ask for 6x the largest size */
		uint64_t avail = twr_mem_available();
		size_t k = 0;
		for (size_t i = 0; i < sched.count; i++) {
			if (avail && sched.sizes[i] > avail / 6) {
				size_t len = strlen(notes);
				snprintf(notes + len, sizeof(notes) - len,
				         "size %llu bytes dropped: needs about %llu MiB, MemAvailable %llu MiB. ",
				         (unsigned long long)sched.sizes[i],
				         (unsigned long long)(sched.sizes[i] * 6 >> 20),
				         (unsigned long long)(avail >> 20));
				continue;
			}
			sched.sizes[k] = sched.sizes[i];
			sched.iters[k] = sched.iters[i];
			sched.warmup[k] = sched.warmup[i];
			k++;
		}
		sched.count = k;
		if (k == 0) {
			fprintf(stderr, "tensorwire-bench: no size fits in memory: %s\n", notes);
			return 77;
		}
	}

	/* lists */
	if (!strcmp(systems_arg, "default") || !strcmp(systems_arg, "all")) {
		bool all = !strcmp(systems_arg, "all");
		nsys = 0;
		for (size_t i = 0; i < twr_num_systems; i++) {
			char path[PATH_MAX + 64];
			if (!all && !twr_systems[i].by_default)
				continue;
			snprintf(path, sizeof(path), "%s/%s", bindir, twr_systems[i].driver);
			if (access(path, X_OK) != 0) {
				size_t len = strlen(notes);
				snprintf(notes + len, sizeof(notes) - len, "%s not run: driver %s not built. ",
				         twr_systems[i].name, twr_systems[i].driver);
				continue;
			}
			sysnames[nsys++] = twr_systems[i].name;
		}
	} else {
		nsys = twr_split(systems_arg, sysnames, TWR_MAX_LIST);
		if (nsys == 0) {
			fprintf(stderr, "tensorwire-bench: --systems names no system (see --list)\n");
			return 2;
		}
	}
	npol = twr_split(policy_arg, policies, 4);
	ncpu = twr_split(cpu_arg, cpus, 4);
	nnet = twr_split(net_arg, nets, 4);
	for (size_t i = 0; i < nsys; i++)
		if (!twr_system_find(sysnames[i])) {
			fprintf(stderr, "tensorwire-bench: unknown system '%s' (see --list)\n", sysnames[i]);
			return 2;
		}
	for (size_t i = 0; i < npol; i++)
		if (strcmp(policies[i], "fresh") && strcmp(policies[i], "reused")) {
			fprintf(stderr, "tensorwire-bench: --policy takes fresh,reused\n");
			return 2;
		}
	for (size_t i = 0; i < ncpu; i++)
		if (strcmp(cpus[i], "free") && strcmp(cpus[i], "same") && strcmp(cpus[i], "split")) {
			fprintf(stderr, "tensorwire-bench: --cpu takes free,same,split\n");
			return 2;
		}
	for (size_t i = 0; i < nnet; i++) {
		if (strcmp(nets[i], "loopback") && strcmp(nets[i], "netns")) {
			fprintf(stderr, "tensorwire-bench: --net takes loopback,netns\n");
			return 2;
		}
		want_netns |= !strcmp(nets[i], "netns");
	}

	/* CPUs for pinning: the first two this process may use */
	{
		cpu_set_t set;
		env.cpu_a = env.cpu_b = -1;
		if (sched_getaffinity(0, sizeof(set), &set) == 0) {
			env.ncpus = CPU_COUNT(&set);
			for (int i = 0; i < CPU_SETSIZE; i++) {
				if (!CPU_ISSET(i, &set))
					continue;
				if (env.cpu_a < 0)
					env.cpu_a = i;
				else if (env.cpu_b < 0)
					env.cpu_b = i;
			}
		}
		if (env.cpu_a < 0)
			env.cpu_a = 0;
	}

	twr_mkdir(env.outdir);
	snprintf(dir, sizeof(dir), "%s/raw", env.outdir);
	twr_mkdir(dir);
	snprintf(dir, sizeof(dir), "%s/logs", env.outdir);
	twr_mkdir(dir);

	signal(SIGINT, twr_on_signal);
	signal(SIGTERM, twr_on_signal);
	signal(SIGPIPE, SIG_IGN);
	if (want_netns && !twr_netns_setup(&env))
		fprintf(stderr, "tensorwire-bench: netns runs skipped: %s\n", env.netns_reason);

	runs = calloc(nnet * ncpu * npol * nsys + 1, sizeof(*runs));
	if (!runs) {
		twr_netns_teardown();
		return 1;
	}
	for (size_t a = 0; a < nnet; a++)
		for (size_t b = 0; b < ncpu; b++)
			for (size_t p = 0; p < npol; p++)
				for (size_t s = 0; s < nsys; s++) {
					const twr_system *sys = twr_system_find(sysnames[s]);
					if (!strcmp(nets[a], "netns") && !sys->network)
						continue;
					runs[nruns].sys = sys;
					runs[nruns].net = nets[a];
					runs[nruns].cpu = cpus[b];
					runs[nruns].policy = strcmp(policies[p], "fresh") ? TWB_POLICY_REUSED
					                                                   : TWB_POLICY_FRESH;
					nruns++;
				}
	for (size_t i = 0; i < nruns; i++) {
		twr_run *r = &runs[i];
		uint64_t t0 = twb_now_ns();
		fprintf(stderr, "[%zu/%zu] %s %s %s %s ... ", i + 1, nruns, r->net, r->cpu,
		        twr_policy_name(r->policy), r->sys->name);
		twr_run_one(&env, &sched, r);
		fprintf(stderr, "%s (%.1f s)%s%s\n", twr_status_name(r->status),
		        (double)(twb_now_ns() - t0) / 1e9, r->reason[0] ? ": " : "", r->reason);
		if (r->status == TWR_OK) {
			ok++;
			for (size_t k = 0; k < r->num_stats; k++)
				if (r->stats[k].wrong_bytes)
					fprintf(stderr, "    %llu WRONG BYTES at size %llu\n",
					        (unsigned long long)r->stats[k].wrong_bytes,
					        (unsigned long long)r->stats[k].size);
		} else if (r->status != TWR_SKIPPED) {
			failed++;
		}
	}
	twr_netns_teardown();

	{
		twr_report rep = {&sched, runs, nruns, nets, nnet, cpus, ncpu, &env, command, notes};
		twr_report_ratios(&rep);
		if (twr_report_write(&rep) != 0)
			failed++;
		else
			fprintf(stderr, "tensorwire-bench: wrote %s/results.md, results.json and plots\n",
			        env.outdir);
	}
	free(runs);
	if (ok == 0 && failed) {
		fprintf(stderr, "tensorwire-bench: every run failed (reasons above)\n");
		return 1;
	}
	if (ok == 0) {
		fprintf(stderr, "tensorwire-bench: nothing could run here (reasons above)\n");
		return 77;
	}
	if (check) {
		int problems = twr_check(env.outdir, expect_damage);
		printf("check: %d problem(s)\n", problems);
		return problems ? 1 : 0;
	}
	return failed ? 1 : 0;
}
