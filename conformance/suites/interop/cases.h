/*
 * cases.h - the interop cases of tensorwire issue 2 item 8: which messages a
 * case sends, in both directions of one pipe, between two implementations.
 * A case only shapes messages (counts, lengths, devices); the driver
 * (harness/interop.c) assigns seeds, sends, receives and checks.
 */
#ifndef TWC_SUITES_INTEROP_CASES_H
#define TWC_SUITES_INTEROP_CASES_H

#include <stdbool.h>

#include "agent.h"

typedef struct twc_interop_case {
	const char *id;      /* stable name used in test names and the matrix */
	const char *title;   /* one line for humans */
	int num_messages;    /* per direction */
	bool burst;          /* write every message before the first read */
	bool large;          /* CTest label `large`: needs ~10 GiB, run alone */
	int wait_s;          /* how long any single wait may take */
	/* Shapes message `index`: counts, lengths, devices (seeds are the
	 * driver's). Returns -1 on allocation failure. */
	int (*shape)(int index, twc_agent_msg *m);
	/* The case checks a channel's framing or the DescriptorReply: both
	 * contexts switch the eager and noreply extensions off (spec/agent.md
	 * 6.2), so that small tensors between two tensorwire IUTs still take the
	 * channel, after a reply where they name no target (spec/wire.md 8.4,
	 * 8.5). */
	bool eager_off;
} twc_interop_case;

extern const twc_interop_case twc_interop_cases[];
extern const int twc_interop_num_cases;

const twc_interop_case *twc_interop_case_find(const char *id);

/* Runs one case: `ccmd` as client, `scmd` as server (spec/agent.md adapter
 * commands, or "unavailable:<reason>"). wait_s > 0 overrides the case's
 * bound on each wait. Returns 0 (PASS), 1 (FAIL) or 77 (SKIP), with the
 * reason in `reason`; `transport`/`channel` (32 bytes each, may be NULL) get
 * what the client reported. Progress lines ("# ...") go to stdout. */
int twc_interop_run_case(const twc_interop_case *c, const char *ccmd, const char *scmd,
                        const char *cname, const char *sname, int wait_s, char *reason,
                        size_t reasonlen, char *transport, char *channel);

#endif /* TWC_SUITES_INTEROP_CASES_H */
