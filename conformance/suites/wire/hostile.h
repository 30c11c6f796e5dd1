/*
 * hostile.h - the shape the raw-client wire cases share (shm_bootstrap.c,
 * mpt_lanes.c, ibv_setup.c): an IUT listens; the harness, as a raw client,
 * does one hostile thing to it; then the same listener must still serve a
 * well-formed pipe from a second adapter of the same implementation (one
 * message each way, every byte checked, both adapters ending cleanly).
 */
#ifndef TWC_SUITES_WIRE_HOSTILE_H
#define TWC_SUITES_WIRE_HOSTILE_H

#include <stddef.h>
#include <stdint.h>

#include "case.h"
#include "session.h"

/* The hostile step, against the IUT of session s (s->url is its listener).
 * 0, or -1 with why; a why that starts with "harness:" is the harness's own
 * failure (an ERROR), anything else the IUT's (a FAIL). */
typedef int (*twc_hostile_fn)(twc_session *s, int kind, char *why, size_t len);

typedef struct twc_hostile_run {
	json_t *ctx;            /* the adapters' context request (taken over) */
	json_t *urls;           /* where the IUT listens (taken over; NULL: the default) */
	const char *transport;  /* what the good pipe must use */
	const char *channel;
	twc_hostile_fn hostile;
	int kind;
	twc_shape_fn shape;     /* the good pipe's message */
	uint64_t seed_base;
	const char *after;      /* "after the hostile set-up" */
} twc_hostile_run;

twc_outcome_t twc_hostile_then_good(twc_case_env *env, const twc_hostile_run *r);

/* The common shape of it: contexts with `transport` and basic only, the IUT
 * listening on `url`, the good pipe's message one tensor of tensor_len
 * (plus the message's index) bytes each way. */
twc_outcome_t twc_hostile_basic(twc_case_env *env, const char *transport, const char *url,
                                twc_hostile_fn hostile, int kind, uint64_t tensor_len,
                                uint64_t seed_base, const char *after);

/* For a hostile step whose traffic may have got as far as a hello and a
 * Brochure: the pipe that made the listener accept is the application's
 * to take (twc_session_take_strays, 1 s); 0, or -1 with why. */
int twc_hostile_take_strays(twc_session *s, char *why, size_t len);

/* The seeded mutation cases' generator (xorshift64): the next value of *x,
 * which must start non-zero (twc_hostile_seed). */
uint64_t twc_hostile_next(uint64_t *x);
static inline uint64_t twc_hostile_seed(uint64_t salt, unsigned seed)
{
	return salt * (seed + 1);
}

/* The table entries of a seeded family, seeds 0 to 11: M(0), ..., M(11). */
#define TWC_SEEDS_12(M)                                                                            \
	M(0), M(1), M(2), M(3), M(4), M(5), M(6), M(7), M(8), M(9), M(10), M(11)

#endif /* TWC_SUITES_WIRE_HOSTILE_H */
