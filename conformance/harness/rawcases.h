/*
 * rawcases.h - wire-level cases with the harness as the raw TCP client of a
 * listener that an implementation under test runs through its adapter
 * (spec/agent.md): the malformed inputs of reference §5.3 and the other
 * wire rules a raw peer can probe (negotiation with unknown names,
 * registration ids, DescriptorReply contents, a peer that stalls mid-frame,
 * frames longer than announced).
 *
 * A case sends its bytes; the harness then watches the IUT for a while
 * (process fate, stderr, accept / read_descriptor / read callbacks, whether
 * the connection was dropped), checks that a well-formed client is still
 * accepted, and shuts the IUT down. Each case runs against a fresh IUT
 * process. Used by tw-bad-input (the stock observation tool) and by the wire
 * suite of tensorwire-conform. It judges nothing itself beyond recording;
 * see tw_raw_case_robust() for what spec/wire.md asks.
 */
#ifndef TW_HARNESS_RAWCASES_H
#define TW_HARNESS_RAWCASES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tw_raw_obs {
	char process[96];     /* "alive" or how it ended ("killed by signal 6 (SIGABRT)") */
	char stderr_line[256];/* the most telling stderr line */
	char accept[256];     /* the first accept callback: "ok" or "error <kind>: text" */
	char pipe[320];       /* the accepted pipe: "read_descriptor: ...; read: ..." */
	char pipe_kind[32];   /* the error kind of its first failed operation ("proto"), or "" */
	bool conn_dropped;    /* the server closed the raw client's first connection */
	char listener[192];   /* "alive (...)" when a well-formed client is still accepted */
	char klass[32];       /* crash, listener-dies, message-delivered, descriptor-delivered,
	                         pipe-failed, pipe-pending, connection-dropped, ignored */
	char check[256];      /* a case-specific check that failed (bytes the IUT sent) */
	char note[256];       /* what the raw client or the harness could not do */
} tw_raw_obs;

typedef struct tw_raw_ctx tw_raw_ctx;

typedef struct tw_raw_case {
	const char *id;
	const char *section;      /* where the rule is (reference numbering, see wire suite) */
	bool must;                /* MUST (else SHOULD) */
	const char *what;         /* the input, in words */
	int (*send)(tw_raw_ctx *c);
	/* What a conforming implementation does: NULL = any outcome in which
	 * the process survives and the listener keeps accepting; else also this
	 * class. */
	const char *robust_class;
	/* Stock TensorPipe's recorded reaction (docs/stock-bad-input.md). */
	const char *stock_class;
	const char *stock_stderr; /* alternatives separated by '|', or NULL */
	/* > 0: the context command asks the IUT for this handshake timeout
	 * (spec/agent.md 6.2); the harness then watches for that long plus
	 * 3 s, and an adapter that says it cannot honour it fails the case. */
	int handshake_timeout_ms;
	/* When the accepted pipe fails, the error kind its operations must
	 * fail with ("proto" where the spec says "fails with a protocol
	 * error"); NULL = any kind. */
	const char *robust_kind;
} tw_raw_case;

extern const tw_raw_case tw_raw_cases[];
extern const int tw_raw_num_cases;

const tw_raw_case *tw_raw_case_find(const char *id);

/* Runs one case against a fresh adapter started with `cmd`. Returns 0 when
 * the observation is complete, -1 when the harness could not set up (reason
 * in o->note). window_ms: how long to watch after the input. */
int tw_raw_case_run(const char *cmd, const tw_raw_case *rc, int window_ms, tw_raw_obs *o);

/* Does the observation meet what spec/wire.md asks (the process survives,
 * only that connection or pipe fails, the listener keeps accepting, the
 * case's own checks pass)? why gets the first shortfall. */
bool tw_raw_case_robust(const tw_raw_case *rc, const tw_raw_obs *o, char *why, size_t whylen);

/* Does the observation match stock's recorded reaction? */
bool tw_raw_case_as_stock(const tw_raw_case *rc, const tw_raw_obs *o);

#endif /* TW_HARNESS_RAWCASES_H */
