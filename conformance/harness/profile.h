/*
 * profile.h - an IUT's known exceptions (conformance/profiles/<impl>.profile):
 * cases it is known to fail, each with a reason and a link to the public
 * issue or the spec section. A failure listed there is reported as
 * XFAIL(reason) instead of FAIL. The profile documents; it never hides: the
 * reason travels into every report.
 *
 * File format, one exception per line ('#' starts a comment):
 *   <case id or glob>  XFAIL  <reason>  --  <link>
 * A battery case run on another transport+channel than uv+basic (--combo)
 * is looked up as <case id>@<transport>+<channel> first, then by its plain
 * id (an exception without '@' holds on every combination).
 * A pairwise case's exception may name the side the implementation's fault
 * is on: "<glob> role=client XFAIL ..." (or role=server) excuses a run only
 * where that implementation is the client (the server); where it is the
 * other side, the failure is the peer's to answer for.
 * e.g.
 *   wire.bad_type_byte  XFAIL  aborts the process (uncaught exception)  --  docs/stock-bad-input.md
 */
#ifndef TWC_HARNESS_PROFILE_H
#define TWC_HARNESS_PROFILE_H

typedef struct twc_profile twc_profile;

/* Loads <dir>/<impl>.profile from every directory in dirs that has one
 * (the built-in directory first, then the user's) and merges them. A
 * directory that does not exist, and a malformed line, are errors naming the
 * directory or the file and line (NULL, reason in err). No file anywhere is
 * an empty profile. */
twc_profile *twc_profile_load(const char *const *dirs, int ndirs, const char *impl, char *err,
                            unsigned long errlen);

/* The files a profile was read from (", "-separated), or "none". */
const char *twc_profile_sources(const twc_profile *p);

/* The exception for case `id` ("reason -- link"), or NULL. role: the
 * implementation's side in a pairwise run ("client", "server", "both" when
 * it is both), or NULL for a single-IUT run; an exception with a role holds
 * only where the role matches (never in a single-IUT run). */
const char *twc_profile_find(const twc_profile *p, const char *id, const char *role);

void twc_profile_free(twc_profile *p);

#endif /* TWC_HARNESS_PROFILE_H */
