/*
 * rawserver.h - the harness as the raw TCP client of a listener that an
 * implementation under test runs through its adapter (spec/agent.md): the
 * toolkit of the wire suite's cases that probe an IUT server with malformed
 * inputs (reference §5.3) and the other wire rules a raw peer can check
 * (negotiation with unknown names, registration ids, DescriptorReply
 * contents, a peer that stalls mid-frame, frames longer than announced).
 *
 * A wire case is an ordinary twc_case (case.h) whose arg is a twc_raw_input:
 * the bytes to send (a send function written with the helpers below) and
 * what a conforming implementation does. twc_raw_run() starts a fresh IUT
 * process, lets it listen, runs the send function, then watches the IUT for
 * a while (process fate, stderr, accept / read_descriptor / read callbacks,
 * whether the connection was dropped), checks that a well-formed client is
 * still accepted, and shuts the IUT down. It judges nothing itself beyond
 * recording; twc_raw_robust() says whether that meets spec/wire.md.
 */
#ifndef TWC_HARNESS_RAWSERVER_H
#define TWC_HARNESS_RAWSERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adapter_proc.h"
#include "agent.h"
#include "rawpeer.h"

typedef struct twc_raw_obs {
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
	char skip[256];       /* why this host cannot run the case (it is then a SKIP) */
} twc_raw_obs;

/* One run: the IUT, the raw client's connections and what it learnt. Send
 * functions read and set the fields marked for them. */
#define TWC_RAW_MAX_FDS 8

struct twc_raw_ctx {
	twc_adapter *a;
	char url[128];        /* uv://127.0.0.1:port */
	char lid[32];
	json_int_t accept_id;
	char spipe[32];       /* the accepted pipe, if any */
	json_int_t rd_id, read_id;
	bool want_read;       /* issue read after the descriptor */
	int fds[TWC_RAW_MAX_FDS];     /* [0] bootstrap, then R and the basic channel after a handshake */
	int nfds;
	int reply_fd, basic_fd;
	twc_raw_answer ans;
	bool have_ans;
	/* tensors the raw client sends, to check the read event against */
	int nexpect;
	twc_agent_buf expect[4];
	twc_raw_obs *o;
	char err[2048];       /* the one error buffer of a run: the toolkit's and the send
	                       * functions' calls of rawpeer.h and of the adapter */
};
typedef struct twc_raw_ctx twc_raw_ctx;

/* The raw-peer side of a wire case (its twc_case.arg). */
typedef struct twc_raw_input {
	int (*send)(twc_raw_ctx *c);
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
	/* NULL, or a channel kind the IUT registers besides basic, above it in
	 * priority ("xth"), so that a Brochure offering it gets it selected. */
	const char *channel;
} twc_raw_input;

/* Runs `in` against a fresh adapter started with `cmd` (`label` names it in
 * logs). Returns 0 when the observation is complete, -1 when the harness
 * could not set up (reason in o->note). window_ms: how long to watch after
 * the input at most: a pipe that reached its outcome ends the watch early
 * (TWC_OBSERVE_UNTIL_SETTLED); one still pending is watched to the end. */
int twc_raw_run(const char *cmd, const char *label, const twc_raw_input *in, int window_ms,
               twc_raw_obs *o);

/* Does the observation meet what spec/wire.md asks (the process survives,
 * only that connection or pipe fails, the listener keeps accepting, the
 * case's own checks pass)? why gets the first shortfall. */
bool twc_raw_robust(const twc_raw_input *in, const twc_raw_obs *o, char *why, size_t whylen);

/* Does the observation match stock's recorded reaction? */
bool twc_raw_as_stock(const twc_raw_input *in, const twc_raw_obs *o);

/* ---- for send functions ---------------------------------------------------------------- */

/* What the raw client could not do (the first note is kept). */
void twc_raw_note(twc_raw_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* This host cannot run the case (say YAMA forbids what it needs): a SKIP
 * with the reason, whatever else was observed (the first is kept). */
void twc_raw_skip(twc_raw_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A case-specific check of what the IUT sent failed (the first is kept). */
void twc_raw_check(twc_raw_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A new connection to the IUT's listener, kept for the run (the first one
 * is watched for being dropped). Returns the fd or -1 (noted). */
int twc_raw_open(twc_raw_ctx *c);
/* Sends one uv frame on fd; -1 on error (noted). */
int twc_raw_frame(twc_raw_ctx *c, int fd, const void *b, size_t n);
/* Sends a hello naming `name`. */
int twc_raw_say_hello(twc_raw_ctx *c, int fd, const char *name);
/* A new connection to the answer's address carrying RequestedConnection{id};
 * `what` names it in notes. Returns the fd or -1. */
int twc_raw_open_requested(twc_raw_ctx *c, const char *what, uint64_t id);
/* Brochure, BrochureAnswer (into c->ans), then (open_conns) the
 * descriptor-reply and basic channel connections, each with its
 * RequestedConnection (reference §3.4-3.8). */
int twc_raw_handshake(twc_raw_ctx *c, int fd, const unsigned char *brochure, size_t blen,
                     bool open_conns);
/* How twc_raw_observe may end before its time is up. */
enum {
	TWC_OBSERVE_STOP_AT_READ = 1, /* once a read has been issued */
	/* once the pipe's outcome is known (its read_descriptor and any read
	 * reported), or, with no pipe accepted, once the IUT has closed the
	 * raw client's first connection; after a grace of TWC_OBSERVE_GRACE_MS
	 * for what follows at once (a process that dies right after) */
	TWC_OBSERVE_UNTIL_SETTLED = 2,
};
#define TWC_OBSERVE_GRACE_MS 150
/* Pumps the adapter for up to `ms`, reacting to the accept and read events;
 * `flags` (TWC_OBSERVE_*) may end it early. */
void twc_raw_observe(twc_raw_ctx *c, int ms, int flags);

#endif /* TWC_HARNESS_RAWSERVER_H */
