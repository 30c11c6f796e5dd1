/*
 * report.c - turns the runs into what people read: results.md (tables in the
 * published layout: one row per system and buffer policy, one column per
 * size, in ms), results.json (jansson) and one log-log plot per network,
 * placement, policy and transport family, with the published points of that
 * family (gnuplot, SVG). It must not run or re-time anything.
 */
#define _GNU_SOURCE
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- helpers ---------------------------------------------------------------------- */

static void twr__size_label(uint64_t size, char *b, size_t n)
{
	const double k = 1024.0;
	double s = (double)size;
	if (s >= k * k * k)
		snprintf(b, n, "%.2f GB", s / (k * k * k));
	else if (s >= k * k)
		snprintf(b, n, "%.2f MB", s / (k * k));
	else if (s >= k)
		snprintf(b, n, "%.2f KB", s / k);
	else
		snprintf(b, n, "%llu B", (unsigned long long)size);
}

/* Milliseconds with three significant digits, no exponent. */
static void twr__ms(double v, char *b, size_t n)
{
	if (v <= 0)
		snprintf(b, n, "-");
	else if (v >= 100)
		snprintf(b, n, "%.0f", v);
	else if (v >= 10)
		snprintf(b, n, "%.1f", v);
	else if (v >= 1)
		snprintf(b, n, "%.2f", v);
	else if (v >= 0.1)
		snprintf(b, n, "%.3f", v);
	else if (v >= 0.01)
		snprintf(b, n, "%.4f", v);
	else if (v >= 0.001)
		snprintf(b, n, "%.5f", v);
	else
		snprintf(b, n, "%.6f", v);
}

static const twr_run *twr__find(const twr_report *rep, const char *net, const char *cpu,
                                twb_policy_t policy, const char *system)
{
	for (size_t i = 0; i < rep->num_runs; i++) {
		const twr_run *r = &rep->runs[i];
		if (r->policy == policy && !strcmp(r->net, net) && !strcmp(r->cpu, cpu) &&
		    !strcmp(r->sys->name, system))
			return r;
	}
	return NULL;
}

static const twr_stat *twr__stat(const twr_run *r, uint64_t size)
{
	if (!r || r->status != TWR_OK)
		return NULL;
	for (size_t i = 0; i < r->num_stats; i++)
		if (r->stats[i].size == size)
			return &r->stats[i];
	return NULL;
}

void twr_report_ratios(twr_report *rep)
{
	for (size_t i = 0; i < rep->num_runs; i++) {
		twr_run *r = &rep->runs[i];
		const twr_run *stock = r->sys->stock
		    ? twr__find(rep, r->net, r->cpu, r->policy, r->sys->stock) : NULL;
		const twr_run *limit = r->sys->limit
		    ? twr__find(rep, r->net, r->cpu, r->policy, r->sys->limit) : NULL;
		for (size_t k = 0; k < r->num_stats; k++) {
			twr_stat *st = &r->stats[k];
			const twr_stat *a = twr__stat(stock, st->size), *b = twr__stat(limit, st->size);
			st->ratio_stock = a && a->median_ms > 0 ? st->median_ms / a->median_ms : 0;
			st->ratio_limit = b && b->median_ms > 0 ? st->median_ms / b->median_ms : 0;
		}
	}
}

static void twr__read_first_line(const char *path, const char *prefix, char *out, size_t n)
{
	char line[512];
	FILE *f = fopen(path, "r");
	snprintf(out, n, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (!prefix || !strncmp(line, prefix, strlen(prefix))) {
			char *v = prefix ? strchr(line, ':') : line;
			v = v ? (prefix ? v + 1 : v) : line;
			while (*v == ' ' || *v == '\t')
				v++;
			v[strcspn(v, "\n")] = '\0';
			size_t len = strnlen(v, n - 1);
			memcpy(out, v, len);
			out[len] = '\0';
			break;
		}
	}
	fclose(f);
}

typedef struct twr_host {
	char cpu_model[256], mem[128], kernel[256], cpuidle[64], thp[128], date[64];
} twr_host;

static void twr__host(twr_host *h)
{
	struct utsname u;
	time_t now = time(NULL);
	struct tm tm;
	twr__read_first_line("/proc/cpuinfo", "model name", h->cpu_model, sizeof(h->cpu_model));
	twr__read_first_line("/proc/meminfo", "MemTotal", h->mem, sizeof(h->mem));
	twr__read_first_line("/sys/devices/system/cpu/cpuidle/current_driver", NULL, h->cpuidle,
	                     sizeof(h->cpuidle));
	twr__read_first_line("/sys/kernel/mm/transparent_hugepage/enabled", NULL, h->thp,
	                     sizeof(h->thp));
	if (uname(&u) == 0)
		snprintf(h->kernel, sizeof(h->kernel), "%s %s %s", u.sysname, u.release, u.machine);
	else
		snprintf(h->kernel, sizeof(h->kernel), "unknown");
	gmtime_r(&now, &tm);
	strftime(h->date, sizeof(h->date), "%Y-%m-%d %H:%M UTC", &tm);
}

static const char *twr__cpu_words(const twr_env *env, const char *cpu, char *b, size_t n)
{
	if (!strcmp(cpu, "same"))
		snprintf(b, n, "same CPU: client and server both pinned to CPU %d", env->cpu_a);
	else if (!strcmp(cpu, "split"))
		snprintf(b, n, "split: client pinned to CPU %d, server to CPU %d", env->cpu_a, env->cpu_b);
	else
		snprintf(b, n, "free: both processes unpinned (the scheduler places them)");
	return b;
}

static const char *twr__net_words(const char *net)
{
	return !strcmp(net, "netns")
	       ? "two hosts on one machine: client and server in two network namespaces joined by "
	         "a veth pair (10.77.0.1 <-> 10.77.0.2)"
	       : "one host: loopback (127.0.0.1), AF_UNIX and shared memory";
}

/* ---- Markdown -------------------------------------------------------------------------- */

enum twr_col { COL_MEDIAN, COL_MIN, COL_P99, COL_WRONG, COL_RSTOCK, COL_RLIMIT };

static void twr__md_table(FILE *f, const twr_report *rep, const char *net, const char *cpu,
                          enum twr_col col, const char *title)
{
	const twb_schedule *s = rep->sched;
	const char *group = NULL;
	char b[64];
	bool any = false;

	fprintf(f, "\n#### %s\n\n| system (policy) |", title);
	for (size_t k = 0; k < s->count; k++) {
		twr__size_label(s->sizes[k], b, sizeof(b));
		fprintf(f, " %s |", b);
	}
	fprintf(f, "%s\n|---|", col == COL_RSTOCK || col == COL_RLIMIT ? " compared with |" : "");
	for (size_t k = 0; k < s->count; k++)
		fprintf(f, "---:|");
	if (col == COL_RSTOCK || col == COL_RLIMIT)
		fprintf(f, "---|");
	fprintf(f, "\n");
	for (size_t i = 0; i < twr_num_systems; i++) {
		const twr_system *sys = &twr_systems[i];
		const char *other = col == COL_RSTOCK ? sys->stock : col == COL_RLIMIT ? sys->limit : "";
		if (!other)
			continue;
		for (int p = 1; p >= 0; p--) { /* fresh first, as published */
			const twr_run *r = twr__find(rep, net, cpu, (twb_policy_t)p, sys->name);
			if (!r)
				continue;
			if (col == COL_RSTOCK || col == COL_RLIMIT) {
				const twr_run *o = twr__find(rep, net, cpu, (twb_policy_t)p, other);
				if (r->status != TWR_OK || !o || o->status != TWR_OK)
					continue;
			}
			if (!group || strcmp(group, sys->group)) {
				group = sys->group;
				fprintf(f, "| **%s** |", group);
				for (size_t k = 0; k < s->count; k++)
					fprintf(f, " |");
				fprintf(f, "%s\n", col == COL_RSTOCK || col == COL_RLIMIT ? " |" : "");
			}
			any = true;
			fprintf(f, "| %s, %s |", sys->label, twr_policy_name(r->policy));
			for (size_t k = 0; k < s->count; k++) {
				const twr_stat *st = twr__stat(r, s->sizes[k]);
				if (!st) {
					fprintf(f, " %s |", r->status == TWR_OK ? "-" : twr_status_name(r->status));
					continue;
				}
				switch (col) {
				case COL_MEDIAN: twr__ms(st->median_ms, b, sizeof(b)); break;
				case COL_MIN: twr__ms(st->min_ms, b, sizeof(b)); break;
				case COL_P99: twr__ms(st->p99_ms, b, sizeof(b)); break;
				case COL_WRONG:
					snprintf(b, sizeof(b), "%llu / %llu", (unsigned long long)st->wrong_bytes,
					         (unsigned long long)st->messages_checked);
					break;
				case COL_RSTOCK:
				case COL_RLIMIT: {
					double v = col == COL_RSTOCK ? st->ratio_stock : st->ratio_limit;
					if (v > 0)
						snprintf(b, sizeof(b), "%.2f", v);
					else
						snprintf(b, sizeof(b), "-");
					break;
				}
				}
				fprintf(f, " %s |", b);
			}
			if (col == COL_RSTOCK || col == COL_RLIMIT) {
				const twr_system *os = twr_system_find(other);
				fprintf(f, " %s, %s |", os ? os->label : other, twr_policy_name(r->policy));
			}
			fprintf(f, "\n");
		}
	}
	if (!any)
		fprintf(f, "| (no row) |\n");
}

static int twr__write_md(const twr_report *rep, const twr_host *h, char plots[][256],
                         size_t num_plots)
{
	const twr_env *env = rep->env;
	const twb_schedule *s = rep->sched;
	char path[1100], b[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/results.md", env->outdir);
	f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "tensorwire-bench: fopen %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "# tensorwire-bench: one-way latency = RTT/2, ms\n\n");
	fprintf(f, "Command: `%s`  \n", rep->command);
	fprintf(f, "Date: %s  \n", h->date);
	fprintf(f, "Host: %s, %d CPUs (pinning uses CPU %d and %d), MemTotal %s, %s, cpuidle %s, "
	        "THP %s\n\n", h->cpu_model, env->ncpus, env->cpu_a, env->cpu_b, h->mem, h->kernel,
	        h->cpuidle, h->thp);
	fprintf(f, "Method: ping-pong; the client takes t0 before sending and t1 when the echo has "
	        "fully arrived (in its read callback for callback APIs), one-way = (t1 - t0) / 2 "
	        "(memcpy: the time of one copy). Iterations (warm-up) per size:");
	for (size_t k = 0; k < s->count; k++) {
		twr__size_label(s->sizes[k], b, sizeof(b));
		fprintf(f, " %s %u (%u)%s", b, s->iters[k], s->warmup[k], k + 1 < s->count ? "," : ".");
	}
	fprintf(f, " Every message carries a pattern seeded by (size, iteration); the server "
	        "echoes what it received and the client checks every byte of the echo after t1, "
	        "outside the timed region, so a wrong byte in either direction is counted. "
	        "Policies: *fresh* = a new malloc for every received message (inside the timed "
	        "region, freed after), *reused* = one preallocated, prefaulted receive buffer per "
	        "side. Statistics over the timed iterations: median, min, p99 (nearest rank).\n");
	if (rep->notes && rep->notes[0])
		fprintf(f, "\nNotes: %s\n", rep->notes);
	for (size_t i = 0; i < rep->num_runs; i++) {
		if (rep->runs[i].sanitizer[0]) {
			fprintf(f, "\n**Warning: the drivers were built with the %s sanitizer; these "
			        "timings are not representative (use `cmake --preset release`).**\n",
			        rep->runs[i].sanitizer);
			break;
		}
	}
	for (size_t n = 0; n < rep->num_nets; n++) {
		for (size_t c = 0; c < rep->num_cpus; c++) {
			const char *net = rep->nets[n], *cpu = rep->cpus[c];
			bool header = false;
			fprintf(f, "\n## %s, CPU placement %s\n\n%s. Placement: %s.\n", net, cpu,
			        twr__net_words(net), twr__cpu_words(env, cpu, b, sizeof(b)));
			twr__md_table(f, rep, net, cpu, COL_MEDIAN, "One-way latency = RTT/2, median, ms");
			twr__md_table(f, rep, net, cpu, COL_MIN, "One-way latency, minimum, ms");
			twr__md_table(f, rep, net, cpu, COL_P99, "One-way latency, p99, ms");
			twr__md_table(f, rep, net, cpu, COL_RSTOCK,
			              "Ratio to stock TensorPipe, same transport (median / stock median; < 1 = faster)");
			twr__md_table(f, rep, net, cpu, COL_RLIMIT,
			              "Ratio to the machine's limit of the same kind (median / limit median)");
			twr__md_table(f, rep, net, cpu, COL_WRONG,
			              "Wrong bytes / messages checked (warm-up included; must be 0 / n)");
			for (size_t i = 0; i < rep->num_runs; i++) {
				const twr_run *r = &rep->runs[i];
				if (strcmp(r->net, net) || strcmp(r->cpu, cpu) || r->status == TWR_OK)
					continue;
				if (!header) {
					fprintf(f, "\nRows not measured:\n\n");
					header = true;
				}
				fprintf(f, "- %s, %s: %s: %s\n", r->sys->label, twr_policy_name(r->policy),
				        twr_status_name(r->status), r->reason);
			}
			for (size_t p = 0; p < num_plots; p++) {
				char prefix[128];
				snprintf(prefix, sizeof(prefix), "latency-%s-%s-", net, cpu);
				if (!strncmp(plots[p], prefix, strlen(prefix)))
					fprintf(f, "\n![%s](%s)\n", plots[p], plots[p]);
			}
		}
	}
	fprintf(f, "\nWhat each driver measured:\n\n");
	for (size_t i = 0; i < twr_num_systems; i++) {
		for (size_t r = 0; r < rep->num_runs; r++) {
			if (rep->runs[r].sys == &twr_systems[i] && rep->runs[r].info[0]) {
				fprintf(f, "- %s (%s): %s\n", twr_systems[i].label,
				        twr_policy_name(rep->runs[r].policy), rep->runs[r].info);
			}
		}
	}
	if (fclose(f) != 0) {
		fprintf(stderr, "tensorwire-bench: write %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* ---- plots ------------------------------------------------------------------------------- */

static int twr__gnuplot(const char *dir, const char *script)
{
	char *argv[] = {"gnuplot", (char *)script, NULL};
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int status, rc;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addchdir_np(&fa, dir);
	rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		fprintf(stderr, "tensorwire-bench: cannot run gnuplot (package gnuplot-nox): %s\n",
		        strerror(rc));
		return -1;
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "tensorwire-bench: gnuplot %s/%s failed\n", dir, script);
		return -1;
	}
	return 0;
}

/* The transport family a system's plot belongs to, from its driver's
 * --system: "tcp" (TCP: uv rows, nng-TCP, raw TCP), "ibv" (RDMA verbs) or
 * "shm" (one host: shared memory, AF_UNIX, memcpy). */
static const char *twr__family(const twr_system *s)
{
	if (!strcmp(s->arg, "tcp") || !strncmp(s->arg, "uv-", 3))
		return "tcp";
	if (!strncmp(s->arg, "ibv-", 4))
		return "ibv";
	return "shm";
}

/* The published one-way latencies (ms) of the seeds' torchrpc notes
 * (../shared/seeds: A100-80GB hosts, 200G HCA, GPU tensors, through
 * torch.distributed.rpc), overlaid as points on the plot of the family they
 * compare with. 0 = not published at that size. GPU-only rows (NVLink,
 * GPUDirect, CUDA shared tensors) wait for CUDA rows here. */
static const uint64_t twr__pub_sizes[] = {1280ull,       20480ull,       1310720ull,
                                          10485760ull,   41943040ull,    671088640ull,
                                          1342177280ull, 2684354560ull};
static const struct {
	const char *label, *family;
	double ms[8];
} twr__published[] = {
	{"published shm (intra-node)", "shm",
	 {0.3605, 0.352, 0.9924, 7.1229, 47.9575, 798.8635, 1548.782, 0}},
	{"published nng-TCP (inter-node)", "tcp",
	 {0, 5.7353, 9.6782, 30.5187, 172.9719, 3450.7418, 7083.6372, 14072.1213}},
	{"published torchrpc-TCP (inter-node)", "tcp",
	 {0, 5.6691, 5.4707, 14.0155, 39.4443, 580.333, 1154.0793, 2297.3776}},
	{"published nccl-TCP (inter-node)", "tcp",
	 {0, 0.0826, 1.321, 31.7813, 128.0672, 1259.72, 2477.2957, 5157.7578}},
	{"published torchrpc-IB (inter-node)", "ibv",
	 {0, 21.3884, 4.4093, 5.9105, 22.3012, 130.249, 236.8084, 477.2389}},
	{"published nccl-IB (inter-node)", "ibv",
	 {0, 0.0928, 0.5618, 2.1134, 7.1768, 120.131, 260.2628, 518.8091}},
};

/* One plot per (net, cpu, policy, transport family): x = size, y = median,
 * one line per system of the family, and the published points of that
 * family. Returns the number of measured lines (0: no plot). */
static int twr__write_plot(const twr_report *rep, const char *net, const char *cpu,
                           twb_policy_t p, const char *family, const char *base, size_t *lines)
{
	const twr_env *env = rep->env;
	char dat[1200], gp[1200];
	snprintf(dat, sizeof(dat), "%s/%s.dat", env->outdir, base);
	snprintf(gp, sizeof(gp), "%s/%s.gp", env->outdir, base);
	FILE *fd = fopen(dat, "w"), *fg = fopen(gp, "w");
	if (!fd || !fg) {
		fprintf(stderr, "tensorwire-bench: fopen %s: %s\n", fd ? gp : dat, strerror(errno));
		if (fd)
			fclose(fd);
		if (fg)
			fclose(fg);
		return -1;
	}
	fprintf(fg, "set terminal svg size 1000,720 dynamic background rgb 'white'\n"
	        "set output '%s.svg'\n"
	        "set title \"%s family: %s, CPU placement %s, %s buffers\" noenhanced\n"
	        "set logscale xy\nset grid\nset key outside below maxrows 5\n"
	        "set xlabel 'message size (bytes)'\n"
	        "set ylabel 'one-way latency = RTT/2, median (ms)'\n"
	        "set format x '10^{%%L}'\nset format y '10^{%%L}'\nplot ",
	        base, family, net, cpu, twr_policy_name(p));
	size_t index = 0;
	*lines = 0;
	for (size_t i = 0; i < twr_num_systems; i++) {
		const twr_run *r = twr__find(rep, net, cpu, p, twr_systems[i].name);
		if (!r || r->status != TWR_OK || strcmp(twr__family(r->sys), family) != 0)
			continue;
		fprintf(fd, "# %s\n", twr_systems[i].label);
		for (size_t k = 0; k < r->num_stats; k++)
			fprintf(fd, "%llu %.9g\n", (unsigned long long)r->stats[k].size,
			        r->stats[k].median_ms);
		fprintf(fd, "\n\n");
		fprintf(fg, "%s'%s.dat' index %zu with linespoints lw 2 title '%s' noenhanced",
		        index ? ", \\\n     " : "", base, index, twr_systems[i].label);
		index++;
		(*lines)++;
	}
	for (size_t i = 0; *lines && i < sizeof(twr__published) / sizeof(twr__published[0]); i++) {
		if (strcmp(twr__published[i].family, family) != 0)
			continue;
		fprintf(fd, "# %s\n", twr__published[i].label);
		for (size_t k = 0; k < sizeof(twr__pub_sizes) / sizeof(twr__pub_sizes[0]); k++)
			if (twr__published[i].ms[k] > 0)
				fprintf(fd, "%llu %.9g\n", (unsigned long long)twr__pub_sizes[k],
				        twr__published[i].ms[k]);
		fprintf(fd, "\n\n");
		fprintf(fg, ", \\\n     '%s.dat' index %zu with points pt 6 ps 1.5 title '%s' noenhanced",
		        base, index, twr__published[i].label);
		index++;
	}
	fprintf(fg, "\n");
	fclose(fd);
	fclose(fg);
	if (*lines == 0) {
		unlink(dat);
		unlink(gp);
		return 0;
	}
	char b[256];
	snprintf(b, sizeof(b), "%s.gp", base);
	return twr__gnuplot(env->outdir, b);
}

static int twr__write_plots(const twr_report *rep, char plots[][256], size_t max_plots,
                            size_t *num_out)
{
	static const char *const families[] = {"tcp", "shm", "ibv"};
	size_t num = 0;
	for (size_t n = 0; n < rep->num_nets; n++) {
		for (size_t c = 0; c < rep->num_cpus; c++) {
			for (int p = 1; p >= 0; p--) {
				for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
					char base[200];
					size_t lines;
					snprintf(base, sizeof(base), "latency-%s-%s-%s-%s", rep->nets[n],
					         rep->cpus[c], twr_policy_name((twb_policy_t)p), families[f]);
					if (twr__write_plot(rep, rep->nets[n], rep->cpus[c], (twb_policy_t)p,
					                    families[f], base, &lines) != 0)
						return -1;
					if (lines && num < max_plots)
						snprintf(plots[num++], 256, "%s.svg", base);
				}
			}
		}
	}
	*num_out = num;
	return 0;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static json_t *twr__num_or_null(double v)
{
	return v > 0 ? json_real(v) : json_null();
}

static int twr__write_json(const twr_report *rep, const twr_host *h, char plots[][256],
                           size_t num_plots)
{
	const twr_env *env = rep->env;
	const twb_schedule *s = rep->sched;
	json_t *root = json_object(), *host = json_object(), *sched = json_object();
	json_t *sizes = json_array(), *iters = json_array(), *warm = json_array();
	json_t *runs = json_array(), *jplots = json_array();
	char path[1100];

	json_object_set_new(root, "tool", json_string("tensorwire-bench"));
	json_object_set_new(root, "command", json_string(rep->command));
	json_object_set_new(root, "date", json_string(h->date));
	json_object_set_new(root, "unit", json_string("ms, one-way = RTT/2"));
	json_object_set_new(host, "cpu_model", json_string(h->cpu_model));
	json_object_set_new(host, "cpus", json_integer(env->ncpus));
	json_object_set_new(host, "cpu_a", json_integer(env->cpu_a));
	json_object_set_new(host, "cpu_b", json_integer(env->cpu_b));
	json_object_set_new(host, "mem_total", json_string(h->mem));
	json_object_set_new(host, "kernel", json_string(h->kernel));
	json_object_set_new(host, "cpuidle", json_string(h->cpuidle));
	json_object_set_new(host, "thp", json_string(h->thp));
	json_object_set_new(root, "host", host);
	for (size_t k = 0; k < s->count; k++) {
		json_array_append_new(sizes, json_integer((json_int_t)s->sizes[k]));
		json_array_append_new(iters, json_integer(s->iters[k]));
		json_array_append_new(warm, json_integer(s->warmup[k]));
	}
	json_object_set_new(sched, "sizes", sizes);
	json_object_set_new(sched, "iters", iters);
	json_object_set_new(sched, "warmup", warm);
	json_object_set_new(root, "schedule", sched);
	json_object_set_new(root, "notes", json_string(rep->notes ? rep->notes : ""));
	for (size_t i = 0; i < rep->num_runs; i++) {
		const twr_run *r = &rep->runs[i];
		json_t *jr = json_object(), *res = json_array();
		json_object_set_new(jr, "net", json_string(r->net));
		json_object_set_new(jr, "cpu", json_string(r->cpu));
		json_object_set_new(jr, "policy", json_string(twr_policy_name(r->policy)));
		json_object_set_new(jr, "system", json_string(r->sys->name));
		json_object_set_new(jr, "label", json_string(r->sys->label));
		json_object_set_new(jr, "group", json_string(r->sys->group));
		json_object_set_new(jr, "stock", r->sys->stock ? json_string(r->sys->stock) : json_null());
		json_object_set_new(jr, "limit", r->sys->limit ? json_string(r->sys->limit) : json_null());
		json_object_set_new(jr, "status", json_string(twr_status_name(r->status)));
		json_object_set_new(jr, "reason", json_string(r->reason));
		json_object_set_new(jr, "info", json_string(r->info));
		json_object_set_new(jr, "sanitizer", json_string(r->sanitizer));
		for (size_t k = 0; k < r->num_stats; k++) {
			const twr_stat *st = &r->stats[k];
			json_t *js = json_object();
			json_object_set_new(js, "size", json_integer((json_int_t)st->size));
			json_object_set_new(js, "iters", json_integer(st->iters));
			json_object_set_new(js, "messages_checked", json_integer((json_int_t)st->messages_checked));
			json_object_set_new(js, "wrong_bytes", json_integer((json_int_t)st->wrong_bytes));
			json_object_set_new(js, "min_ms", json_real(st->min_ms));
			json_object_set_new(js, "median_ms", json_real(st->median_ms));
			json_object_set_new(js, "p99_ms", json_real(st->p99_ms));
			json_object_set_new(js, "p999_ms", json_real(st->p999_ms));
			json_object_set_new(js, "mean_ms", json_real(st->mean_ms));
			json_object_set_new(js, "ratio_stock", twr__num_or_null(st->ratio_stock));
			json_object_set_new(js, "ratio_limit", twr__num_or_null(st->ratio_limit));
			json_array_append_new(res, js);
		}
		json_object_set_new(jr, "results", res);
		json_array_append_new(runs, jr);
	}
	json_object_set_new(root, "runs", runs);
	for (size_t p = 0; p < num_plots; p++)
		json_array_append_new(jplots, json_string(plots[p]));
	json_object_set_new(root, "plots", jplots);
	json_object_set_new(root, "markdown", json_string("results.md"));
	snprintf(path, sizeof(path), "%s/results.json", env->outdir);
	if (json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(6)) != 0) {
		fprintf(stderr, "tensorwire-bench: json_dump_file %s failed\n", path);
		json_decref(root);
		return -1;
	}
	json_decref(root);
	return 0;
}

int twr_report_write(const twr_report *rep)
{
	static char plots[64][256];
	size_t num_plots = 0;
	twr_host h;
	int rc = 0;

	twr__host(&h);
	if (twr__write_plots(rep, plots, 64, &num_plots) != 0)
		rc = -1;
	if (twr__write_md(rep, &h, plots, num_plots) != 0)
		rc = -1;
	if (twr__write_json(rep, &h, plots, num_plots) != 0)
		rc = -1;
	return rc;
}

/* ---- check ------------------------------------------------------------------------------------ */

int twr_check(const char *outdir, bool expect_damage)
{
	char path[1100];
	json_error_t jerr;
	json_t *root, *runs, *sizes, *plots, *run, *st, *pl;
	int problems = 0;
	size_t i, k;

	snprintf(path, sizeof(path), "%s/results.json", outdir);
	root = json_load_file(path, 0, &jerr);
	if (!root) {
		printf("FAIL %s does not parse: %s (line %d)\n", path, jerr.text, jerr.line);
		return 1;
	}
	sizes = json_object_get(json_object_get(root, "schedule"), "sizes");
	runs = json_object_get(root, "runs");
	if (!json_is_array(sizes) || json_array_size(sizes) == 0 || !json_is_array(runs) ||
	    json_array_size(runs) == 0) {
		printf("FAIL %s: no schedule or no runs\n", path);
		json_decref(root);
		return 1;
	}
	json_array_foreach(runs, i, run) {
		const char *name = json_string_value(json_object_get(run, "system"));
		const char *status = json_string_value(json_object_get(run, "status"));
		json_t *res = json_object_get(run, "results");
		char id[256];
		snprintf(id, sizeof(id), "%s/%s/%s/%s",
		         json_string_value(json_object_get(run, "net")) ?: "?",
		         json_string_value(json_object_get(run, "cpu")) ?: "?",
		         json_string_value(json_object_get(run, "policy")) ?: "?", name ? name : "?");
		int bad = 0;
		if (!status || strcmp(status, "ok")) {
			printf("FAIL %s: %s: %s\n", id, status ? status : "no status",
			       json_string_value(json_object_get(run, "reason")) ?: "");
			problems++;
			continue;
		}
		if (json_array_size(res) != json_array_size(sizes)) {
			printf("FAIL %s: %zu sizes measured, %zu asked\n", id, json_array_size(res),
			       json_array_size(sizes));
			problems++;
			continue;
		}
		json_array_foreach(res, k, st) {
			json_int_t size = json_integer_value(json_object_get(st, "size"));
			json_int_t wrong = json_integer_value(json_object_get(st, "wrong_bytes"));
			json_int_t checked = json_integer_value(json_object_get(st, "messages_checked"));
			json_int_t iters = json_integer_value(json_object_get(st, "iters"));
			double med = json_number_value(json_object_get(st, "median_ms"));
			if (size != json_integer_value(json_array_get(sizes, k)) || iters <= 0 ||
			    checked < iters || !(med > 0) ||
			    (expect_damage ? wrong != checked : wrong != 0)) {
				printf("FAIL %s size %lld: wrong_bytes %lld, checked %lld, iters %lld, "
				       "median %g ms\n", id, (long long)size, (long long)wrong,
				       (long long)checked, (long long)iters, med);
				bad++;
			}
		}
		problems += bad;
		if (!bad)
			printf("ok   %s: %zu sizes, %s\n", id, json_array_size(res),
			       expect_damage ? "1 wrong byte per message, as injected" : "0 wrong bytes");
	}
	plots = json_object_get(root, "plots");
	if (!json_is_array(plots) || json_array_size(plots) == 0) {
		printf("FAIL no plot listed\n");
		problems++;
	}
	json_array_foreach(plots, i, pl) {
		FILE *f;
		long len = 0;
		snprintf(path, sizeof(path), "%s/%s", outdir, json_string_value(pl) ?: "");
		f = fopen(path, "r");
		if (f) {
			fseek(f, 0, SEEK_END);
			len = ftell(f);
			fclose(f);
		}
		if (len <= 0) {
			printf("FAIL plot %s missing or empty\n", path);
			problems++;
		} else {
			printf("ok   plot %s (%ld bytes)\n", path, len);
		}
	}
	snprintf(path, sizeof(path), "%s/results.md", outdir);
	if (access(path, R_OK) != 0) {
		printf("FAIL %s missing\n", path);
		problems++;
	}
	json_decref(root);
	return problems;
}
