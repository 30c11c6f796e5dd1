/*
 * combo.h - the transport x channel axis of the conformance suites (nng's
 * NUTS pattern): a case marked `battery` (case.h) is written once and runs
 * once per combination the invocation selects (--combo), against each IUT
 * pair that offers both backends; the session builds its contexts and its
 * listener from the run's combination, so no battery case names "uv" or
 * "basic" by hand.
 *
 * A combination is "<transport>+<channel>" ("uv+basic", "shm+cma"). The
 * default is uv+basic, the one every implementation has.
 */
#ifndef TWC_HARNESS_COMBO_H
#define TWC_HARNESS_COMBO_H

#include <stdbool.h>
#include <stddef.h>

#define TWC_COMBO_DEFAULT "uv+basic"

typedef struct twc_combo {
	char transport[32];
	char channel[32];
} twc_combo;

/* Parses "t+c" into *out; false if malformed. */
bool twc_combo_parse(const char *spec, twc_combo *out);

/* The combination this (case) process runs with: set once by the runner's
 * child from its command line; uv+basic until then. */
const twc_combo *twc_combo_current(void);
bool twc_combo_set_current(const char *spec);

/* The spec sections every battery case exercises when it runs on backend
 * `name` (a transport or a channel): its bootstrap, framing and messages,
 * which a pair of two implementations must get right byte for byte for any
 * battery case to pass ("wire.md 2.3.1, wire.md 2.3.2, ..."); "" for one
 * with nothing beyond the base sections (uv, basic). --uncovered credits
 * them to the battery cases of the --combo runs it is given. */
const char *twc_combo_sections(const char *name);

/* A URL to listen on with `transport` that lets the system pick the rest
 * ("uv://127.0.0.1:0", "shm://"); false (out "") for a transport the
 * harness does not know how to listen on. */
bool twc_combo_listen_url(const char *transport, char *out, size_t out_len);

#endif /* TWC_HARNESS_COMBO_H */
