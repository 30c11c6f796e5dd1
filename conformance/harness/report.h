/*
 * report.h - the runner's reports: TAP lines on stdout as cases finish,
 * JUnit XML (--junit FILE) and JSON lines (--json FILE, one object per case
 * run) at the end, and the readable summary matrix. Writers only: they never
 * decide an outcome.
 */
#ifndef TWC_HARNESS_REPORT_H
#define TWC_HARNESS_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "case.h"

typedef struct twc_iut_info {
	char name[32];      /* as given on the command line ("ours") */
	const char *cmd;
	char impl[64];      /* from hello ("tensorwire") */
	char version[64];
	char adapter[96];   /* the adapter's own name and version, from hello ("" if none) */
	int protocol;       /* the agent protocol its hello named (0: none) */
	bool broken;        /* a real adapter that failed hello or speaks another protocol */
	char profile[2048]; /* the profile files it is judged with, or "none" */
	bool available;
	char why[512];      /* when not available */
	char transports[256], channels[256]; /* what hello offers, "uv,shm" */
} twc_iut_info;

typedef struct twc_result {
	const twc_case *c;
	const twc_iut_info *iut;   /* the IUT (client side for pairwise cases) */
	const twc_iut_info *peer;  /* pairwise: server side; else NULL */
	twc_outcome_t outcome;
	char reason[1024];
	double seconds;
	char transport[32], channel[32];
	char combo[72];           /* battery runs: "shm+cma"; "" for the case's own */
	bool required_failure;    /* counts against the exit status */
	bool unexcused;           /* the case said no profile may excuse this failure */
	char gone[32];            /* the IUT whose adapter went away first, "" if none */
	char *log;                /* what the case printed (owned) */
} twc_result;

/* "ours", or "ours->stock" for a pairwise run; a battery run on another
 * combination than uv+basic adds it: "ours->stock shm+cma". */
void twc_result_target(const twc_result *r, char *buf, size_t len);

/* Provenance, in every report: this runner's version and the revision of
 * spec/ it was built from (the first 12 hex digits of the SHA-256 of
 * spec/wire.md and spec/agent.md). */
const char *twc_runner_version(void);
const char *twc_spec_revision(void);
/* Which verbs provider served the run's RDMA: TW_RDMA_PROVIDER as
 * simverbs-run (simverbs) or softroce/softroce.sh (rxe-host, rxe-guest,
 * hardware) set it; "system" (whatever libibverbs finds) when unset. */
const char *twc_rdma_provider(void);

void twc_tap_plan(FILE *f, int n);
void twc_tap_result(FILE *f, int index, const twc_result *r, bool verbose);

int twc_junit_write(const char *path, const twc_result *rs, int n, char *err, size_t errlen);
int twc_json_write(const char *path, const twc_result *rs, int n, char *err, size_t errlen);

/* The matrix: one table for per-IUT cases (columns: IUTs), one for pairwise
 * cases (columns: client->server), notes for every non-PASS cell. */
void twc_matrix_print(FILE *f, const twc_result *rs, int n);

#endif /* TWC_HARNESS_REPORT_H */
