/*
 * twb.h - what every ping-pong driver in bench/ shares: the command line, the
 * schedule of sizes and iterations, the byte pattern and its checker, the
 * clock, buffers for the two buffer policies, and the result file.
 *
 * A driver is one executable per family of systems (limits, nng, stock
 * TensorPipe, tensorwire). The runner starts it twice, as server and as
 * client, pinned as asked. The server prints "READY <address>" on stdout once
 * it listens; the client connects to that address, runs the schedule, and
 * writes its samples (round-trip times, wrong bytes) as JSON to --out.
 *
 * Correctness: the client fills each message with a pattern seeded by (size,
 * iteration) before taking t0, the server echoes the bytes it received, and
 * the client checks every byte of the echo after taking t1 - outside the
 * timed region. The echo makes the check end to end: a byte damaged or stale
 * in either direction is counted.
 *
 * This file must not know about any particular library under test.
 */
#ifndef TWB_H
#define TWB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TWB_MAX_SIZES 16

/* Exit code of a driver that cannot run on this machine (reason on stderr). */
#define TWB_EXIT_UNSUPPORTED 77

typedef enum twb_policy {
	TWB_POLICY_REUSED = 0, /* one preallocated, prefaulted receive buffer */
	TWB_POLICY_FRESH = 1,  /* a new malloc per received message, freed after */
} twb_policy_t;

typedef enum twb_role {
	TWB_ROLE_SERVER = 0,
	TWB_ROLE_CLIENT = 1,
	TWB_ROLE_SOLO = 2, /* one process (memcpy) */
} twb_role_t;

typedef struct twb_schedule {
	size_t count;
	uint64_t sizes[TWB_MAX_SIZES];
	uint32_t iters[TWB_MAX_SIZES];  /* timed iterations per size */
	uint32_t warmup[TWB_MAX_SIZES]; /* untimed iterations before them */
} twb_schedule;

typedef struct twb_args {
	const char *system;  /* which system of the driver's family, e.g. "tcp" */
	twb_role_t role;
	twb_policy_t policy;
	const char *addr;    /* client: where the server listens */
	const char *bind_ip; /* server: address to listen on (default 127.0.0.1) */
	const char *out;     /* client/solo: result file */
	twb_schedule sched;
} twb_args;

/* Parses the common command line; exits with status 2 and a usage line on
 * error. Never returns on failure. */
void twb_args_parse(int argc, char **argv, twb_args *args_out);

/* Total number of messages (warm-up included) in the schedule. */
uint64_t twb_schedule_total(const twb_schedule *sched);

/* Largest size in the schedule. */
uint64_t twb_schedule_max(const twb_schedule *sched);

/* Monotonic clock in nanoseconds. */
uint64_t twb_now_ns(void);

/* The pattern seed of message `iter` (warm-up counted) of size index `idx`. */
uint64_t twb_seed(size_t idx, uint64_t iter);

/* Fills buf[0..len) with the pattern for `seed`. */
void twb_fill(void *buf, uint64_t len, uint64_t seed);

/* Counts the bytes of buf[0..len) that differ from the pattern for `seed`. */
uint64_t twb_verify(const void *buf, uint64_t len, uint64_t seed);

/* Allocates len bytes (at least 1) and touches every page so later use does
 * not fault. Exits with a message on failure. */
void *twb_alloc_prefaulted(uint64_t len);

/* Allocates len bytes (at least 1) without touching them. Exits on failure. */
void *twb_alloc_fresh(uint64_t len);

/* Prints "<driver>: <what>: <strerror(errno)>" on stderr and exits 1. */
void twb_die_errno(const char *what);

/* Prints "<driver>: <message>" on stderr and exits with `code`. */
void twb_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Server: when the environment has TWB_FAULT_FLIP=1, flips one byte in the
 * middle of every message before echoing it. Exists only so a test can show
 * that the client's check counts damage (the check must be able to fail). */
void twb_fault_apply(void *buf, uint64_t len);

/* What the drivers were compiled with: "" or "address" / "thread" sanitizer.
 * Timings from a sanitizer build are not representative. */
const char *twb_build_sanitizer(void);

/* Server: announces its address to the runner (one line on stdout). */
void twb_ready(const char *addr);

/* Samples the client collects; one per timed iteration. */
typedef struct twb_results {
	const twb_schedule *sched;
	uint64_t *rtt_ns[TWB_MAX_SIZES];
	uint64_t wrong_bytes[TWB_MAX_SIZES];
	uint64_t messages[TWB_MAX_SIZES]; /* messages checked, warm-up included */
	bool one_way; /* samples are one-way times (memcpy), not round trips */
} twb_results;

void twb_results_init(twb_results *res, const twb_schedule *sched);
void twb_results_free(twb_results *res);

/* Writes the result file (JSON, via jansson). `info` is a free-text note on
 * what the driver measured (which calls, which thread). Exits on failure. */
void twb_results_write(const twb_results *res, const twb_args *args, const char *info);

/* Walks the schedule: the position of one message. */
typedef struct twb_cursor {
	size_t idx;    /* size index */
	uint64_t iter; /* message number within this size, warm-up first */
} twb_cursor;

/* True while the cursor points at a message. */
bool twb_cursor_valid(const twb_cursor *c, const twb_schedule *sched);
/* True if the message is timed (past the warm-up). */
bool twb_cursor_timed(const twb_cursor *c, const twb_schedule *sched);
void twb_cursor_next(twb_cursor *c, const twb_schedule *sched);

/* Records one finished round trip at the cursor: checks the bytes (outside
 * the timed region: the caller took t1 already) and stores the sample. */
void twb_record(twb_results *res, const twb_cursor *c, uint64_t t0, uint64_t t1,
                const void *buf, uint64_t len);

/* Full writes / reads on a file descriptor (loops over short transfers and
 * EINTR). Return 0, or -1 with errno set (EPIPE style), or 1 on EOF. */
int twb_write_full(int fd, const void *buf, uint64_t len);
int twb_read_full(int fd, void *buf, uint64_t len);

#ifdef __cplusplus
}
#endif

#endif /* TWB_H */
