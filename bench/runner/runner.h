/*
 * runner.h - tensorwire-bench, the runner: plans the runs (network x CPU
 * placement x buffer policy x system), starts each driver as server and
 * client (pinned, in a network namespace when asked), gathers the samples,
 * and writes the table (Markdown), results.json and the plots.
 *
 * The runner measures nothing itself: every number comes from a driver's
 * result file. It must not change the machine beyond the namespaces it
 * creates (and removes).
 */
#ifndef TWR_RUNNER_H
#define TWR_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "twb.h"

/* ---- systems (rows) ---------------------------------------------------------- */

typedef struct twr_system {
	const char *name;   /* CLI and JSON name, e.g. "tp-uv-basic" */
	const char *label;  /* table label, e.g. "TP uv(TCP)+basic" */
	const char *group;  /* table section */
	const char *driver; /* executable next to the runner */
	const char *arg;    /* its --system */
	bool solo;          /* one process (memcpy) */
	bool network;       /* meaningful between two hosts (runs across netns) */
	bool by_default;    /* in the default set */
	const char *stock;  /* stock TensorPipe row with the same transport, or NULL */
	const char *limit;  /* the machine's limit for its kind, or NULL */
} twr_system;

extern const twr_system twr_systems[];
extern const size_t twr_num_systems;
const twr_system *twr_system_find(const char *name);

/* ---- one run ---------------------------------------------------------------------- */

typedef enum twr_status {
	TWR_OK = 0,
	TWR_SKIPPED,  /* could not run here; reason says why */
	TWR_FAILED,   /* a driver failed; reason has its last words */
	TWR_TIMEOUT,  /* killed after the deadline */
} twr_status_t;

typedef struct twr_stat {
	uint64_t size;
	uint32_t iters;
	double min_ms, median_ms, p99_ms, p999_ms, mean_ms; /* one-way */
	uint64_t wrong_bytes;
	uint64_t messages_checked;
	double ratio_stock; /* median / stock's median, 0 if none */
	double ratio_limit; /* median / limit's median, 0 if none */
} twr_stat;

typedef struct twr_run {
	const twr_system *sys;
	const char *net;    /* "loopback" or "netns" */
	const char *cpu;    /* "free", "same" or "split" */
	twb_policy_t policy;
	twr_status_t status;
	char reason[2048];
	char info[512];     /* the driver's note on what it measured */
	char sanitizer[16]; /* the driver's build: "" or a sanitizer name */
	size_t num_stats;
	twr_stat stats[TWB_MAX_SIZES];
} twr_run;

const char *twr_status_name(twr_status_t st);
const char *twr_policy_name(twb_policy_t p);

/* ---- placement and spawning ----------------------------------------------------- */

typedef struct twr_env {
	const char *bindir;  /* where the drivers are */
	const char *outdir;
	int cpu_a, cpu_b;    /* the two CPUs used by "same" (a) and "split" (a, b) */
	int ncpus;
	/* network namespaces ("netns" runs); empty names when not set up */
	char ns_client[32], ns_server[32];
	char ip_client[32], ip_server[32];
	char netns_reason[256]; /* why netns runs are skipped, if they are */
	unsigned timeout_s;
	bool verbose;
} twr_env;

/* Runs one (net, cpu, policy, system) and fills run->status, reason, stats. */
void twr_run_one(const twr_env *env, const twb_schedule *sched, twr_run *run);

/* Creates two namespaces joined by a veth pair (needs root and ip(8)).
 * Returns false and fills env->netns_reason when it cannot. */
bool twr_netns_setup(twr_env *env);
void twr_netns_teardown(void);

/* Kills the drivers running now (for a signal handler). */
void twr_kill_children(void);

/* ---- reports ------------------------------------------------------------------------- */

typedef struct twr_report {
	const twb_schedule *sched;
	twr_run *runs;
	size_t num_runs;
	const char *const *nets;
	size_t num_nets;
	const char *const *cpus;
	size_t num_cpus;
	const twr_env *env;
	const char *command; /* the command line, for the record */
	const char *notes;   /* e.g. sizes dropped for lack of memory */
} twr_report;

/* Fills ratio_stock and ratio_limit of every run's stats. */
void twr_report_ratios(twr_report *rep);

/* Writes results.md, results.json and the plots into env->outdir. Returns 0,
 * or -1 after printing what failed. */
int twr_report_write(const twr_report *rep);

/* Checks an output folder as the smoke test does: results.json parses, every
 * run is ok with all sizes, no wrong byte, the table and plots exist. With
 * expect_damage (a run under TWB_FAULT_FLIP=1), every message must instead
 * show exactly one wrong byte. Prints each problem; returns the number of
 * problems (0 = pass). */
int twr_check(const char *outdir, bool expect_damage);

/* tensorwire-bench compare (issue 16 item 4, compare.c): reads results.json
 * files of a baseline and of a candidate and flags every row and size whose
 * median got worse by more than the baseline's run-to-run spread. Returns
 * the exit status (0 nothing worse, 1 something worse, 2 usage error). */
int twr_compare_main(int argc, char **argv);

#endif /* TWR_RUNNER_H */
