/*
 * wf.h - the black-box wire fuzzer's pieces (tensorwire issue 5 item 4),
 * shared by the tool (main.c) and the wire suite's replay cases
 * (suites/wire/fuzz_findings.c).
 *
 *   script.c     an input: a sequence of steps on numbered raw connections,
 *                the reproducer file format (README.md) and its parser
 *   build.c      valid traffic built with ref/src/wire's nop writer, with a
 *                map of where every value, count, length and index starts
 *   mutate.c     structure-aware mutations of a built script, enumerated in a
 *                fixed order, then drawn from a seed
 *   exec.c       one live IUT (an adapter process, spec/agent.md), the driver
 *                that answers its callbacks, running a script against it and
 *                judging what happened (alive, settled, good client served)
 *   signature.c  what a failure looks like, normalised so that the same bug
 *                gives the same signature (sanitizer reports, C++ aborts,
 *                LeakSanitizer, hangs)
 *   fuzz.c       the loop: budgets, restarts, deduplication, confirmation,
 *                minimisation, leak batches, saturation statistics
 *
 * It judges an implementation only from the outside: the adapter's exit
 * status and stderr, its events, and whether a well-formed peer is still
 * served. Nothing here may depend on which implementation is under test.
 */
#ifndef TWC_WIREFUZZ_WF_H
#define TWC_WIREFUZZ_WF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "adapter_proc.h"
#include "agent.h"

/* ---- scripts ------------------------------------------------------------------ */

/* The IUT's role: WF_SERVER = its listener faces the fuzzer as a raw client;
 * WF_CLIENT = it connects to the fuzzer, a raw server. */
typedef enum wf_role { WF_SERVER = 0, WF_CLIENT = 1 } wf_role;

typedef enum wf_op {
	WF_CONNECT,         /* server role: open connection C to the IUT's listener */
	WF_ACCEPT,          /* client role: accept the IUT's next connection as C */
	WF_ACCEPT_REQUESTED,/* client role: accept `arg` connections, placed by their first frame */
	WF_SEND,            /* one frame on C (header mode, optional cut) */
	WF_RECV,            /* read one frame from C */
	WF_RECV_ANSWER,     /* read one frame from C and parse it as a BrochureAnswer */
	WF_CLOSE,           /* close C */
	WF_WAIT,            /* let the IUT run for `arg` ms */
} wf_op;

/* Run-time values a frame refers to, resolved when the step is sent. */
typedef enum wf_token {
	WF_TOK_NONE = 0,
	WF_TOK_REPLY_ID,  /* the answer's transportRegistrationIds[1], as a nop uint */
	WF_TOK_BASIC_ID,  /* the answer's channelRegistrationIds["basic"][0] */
	WF_TOK_ADDR,      /* the raw server's address "127.0.0.1:port", as a nop string */
} wf_token;

typedef struct wf_mark {
	uint32_t off, len;  /* span of body that the token replaces */
	wf_token token;
} wf_mark;

#define WF_MAX_MARKS 4
#define WF_MAX_CONNS 8

typedef enum wf_hdr { WF_HDR_AUTO = 0, WF_HDR_DELTA, WF_HDR_FIXED } wf_hdr;

/* The kinds of nop values a built frame is made of. */
typedef enum wf_vkind {
	WF_V_UINT, WF_V_INT, WF_V_STRING, WF_V_BINARY, WF_V_STRUCT, WF_V_ARRAY, WF_V_MAP,
	WF_V_VARIANT, WF_V_NIL
} wf_vkind;

/* Where one value sits in a frame body (built frames only; not saved). */
typedef struct wf_field {
	uint32_t off, len;  /* the whole value */
	uint16_t hdr;       /* prefix byte plus its count/length/int payload */
	uint8_t kind;       /* wf_vkind */
	uint8_t width;      /* UINT/INT: declared width in bytes; VARIANT: alternatives */
	uint64_t n;         /* the value, count, member count, length or variant index */
	char path[96];      /* "Descriptor.tensors[1].sourceDevice.type" */
} wf_field;

typedef struct wf_step {
	wf_op op;
	int conn;
	int arg;             /* ACCEPT_REQUESTED: how many; WAIT: ms */
	uint8_t *body;       /* SEND: the frame body (owned) */
	size_t len;
	wf_mark marks[WF_MAX_MARKS];
	int nmarks;
	wf_hdr hdr;
	int64_t hdr_delta;   /* WF_HDR_DELTA: header = resolved length + delta */
	uint64_t hdr_value;  /* WF_HDR_FIXED */
	long cut;            /* -1: the whole frame; else only the first `cut` bytes of header + body */
	char what[32];       /* packet name for messages and classes ("Brochure", "payload") */
	wf_field *fields;    /* built frames: the value map (owned), else NULL */
	int nfields;
	/* RECV in a good check: the bytes the IUT must send (owned), or NULL */
	uint8_t *expect;
	size_t expect_len;
} wf_step;

typedef struct wf_script {
	wf_role role;
	wf_step *steps;
	int nsteps, cap;
	char klass[128];     /* input class: "Brochure.transportDomainDescriptors.count:huge" */
	char mutation[256];  /* the mutation in words */
	char signature[256]; /* from a file: the signature it was saved for */
	char origin[128];    /* from a file: "seed 1 input 532" */
	/* catalogued reproducers (conformance/wirefuzz/findings): the wire-suite
	 * case they become, the spec/wire.md requirements they check, and what a
	 * conforming implementation does with the input */
	char case_id[64];
	char spec[160];
	char expect[320];
	/* the error kind a failed pipe of this input must report ("proto" where
	 * the spec says "fails with a protocol error"), or "" for any */
	char fail_kind[32];
	bool should;         /* "level should": a SHOULD-level case (a pending operation fails it) */
	int mutated_step;    /* index of the step the mutation touched, or -1 */
} wf_script;

/* A libnop unsigned integer in its shortest encoding (spec/wire.md 1.3) at o
 * (room for 9 bytes); returns the bytes written. */
size_t wf_enc_uint(uint8_t *o, uint64_t v);

void wf_script_init(wf_script *s, wf_role role);
void wf_script_free(wf_script *s);
int wf_script_copy(wf_script *dst, const wf_script *src);
/* Appends a step (deep copy of body/fields/expect); returns its index or -1. */
int wf_script_add(wf_script *s, const wf_step *st);
void wf_script_remove(wf_script *s, int i);
/* Inserts a copy of st before index i. */
int wf_script_insert(wf_script *s, int i, const wf_step *st);
void wf_step_free(wf_step *st);
/* Replaces body[off, off+oldlen) by `with` (n bytes): marks inside are
 * dropped (the bytes are concrete now), marks after are shifted; the field
 * map is dropped (it no longer describes the body). */
int wf_step_splice(wf_step *st, size_t off, size_t oldlen, const uint8_t *with, size_t n);

/* Reproducer files (README.md, "Reproducer format"). */
int wf_script_save(const wf_script *s, const char *path, const char *header_comment);
int wf_script_write(const wf_script *s, FILE *f);
int wf_script_load(const char *path, wf_script *s, char *err, size_t errlen);
int wf_script_parse(const char *text, wf_script *s, char *err, size_t errlen);
const char *wf_op_name(wf_op op);

/* ---- building valid traffic ------------------------------------------------------ */

/* The messages of the base scenarios (spec/agent.md 5.2 descriptions). */
typedef enum wf_msg_id { WF_MSG_A, WF_MSG_B, WF_MSG_OUT } wf_msg_id;
/* A described message; the pointers stay valid for the program's life. */
const twc_agent_msg *wf_msg(wf_msg_id id);

/* The base scenarios: the IUT as server (the fuzzer a raw client), as
 * client (the fuzzer a raw server), and as server with a Brochure that asks
 * for the goodbye extension (spec/wire.md 8; an IUT that does not know it
 * ignores the entry, 3.5.d). */
typedef enum wf_scenario { WF_SC_SERVER, WF_SC_CLIENT, WF_SC_SERVER_EXT, WF_SC_COUNT } wf_scenario;
const char *wf_scenario_name(wf_scenario sc);
wf_role wf_scenario_role(wf_scenario sc);

/* The base scenario: every step well-formed, with value maps; `addr` is the
 * raw server's address (client role; representative only, the frame carries
 * a $addr token). with_expect: RECV steps carry the bytes the IUT must send
 * (for the good check). */
int wf_build_scenario(wf_script *s, wf_scenario sc, const char *addr, bool with_expect);
/* The good check's scenario of a role (server or client): the plain one,
 * whose hello (server role) names the context WF_GOOD_CHECK_NAME, so the
 * driver tells the good check's pipe from a late pipe of an earlier input
 * by what the IUT reports, never by when its accept arrives. */
#define WF_GOOD_CHECK_NAME "wirefuzz-check"
int wf_build_base(wf_script *s, wf_role role, const char *addr, bool with_expect);

/* ---- mutations --------------------------------------------------------------------- */

/* Number of systematic mutations of `base` (every field with every operator,
 * every header change, every truncation, every step-level change). */
int wf_mutate_count(const wf_script *base);
/* Builds mutation k (0 <= k < count) of base into out. Returns 0, or -1 if
 * that mutation does not apply (out is then empty). */
int wf_mutate_nth(const wf_script *base, int k, wf_script *out);
/* A random mutation (one or two stacked) drawn from *rng. */
int wf_mutate_random(const wf_script *base, uint64_t *rng, wf_script *out);
uint64_t wf_rand(uint64_t *state);

/* ---- one live IUT and running inputs ------------------------------------------------ */

typedef struct wf_iut wf_iut;

typedef struct wf_opts {
	int step_ms;     /* bound on each raw read / accept in an input */
	int settle_ms;   /* after an input: bound for its pending operations to complete */
	int check_ms;    /* bound on each wait of the good check */
	/* > 0: after the script, and before the raw connections close, wait up
	 * to this long for each of the input's pipes to report a failure, so an
	 * error the IUT found in the input is not overtaken by the end of the
	 * connections (the catalogue cases whose spec asks for a protocol
	 * error check its kind) */
	int fail_wait_ms;
	bool verbose;
} wf_opts;

void wf_opts_default(wf_opts *o);

/* Starts the adapter `cmd` for `role`: context (uv + basic), then a listener
 * with an accept armed (server role) or a raw listener for it to connect to
 * (client role). NULL with the reason in err. */
wf_iut *wf_iut_start(const char *cmd, wf_role role, const wf_opts *o, char *err, size_t errlen);
/* The raw server's address (client role), "127.0.0.1:port". */
const char *wf_iut_addr(const wf_iut *iut);
/* Orderly end: shutdown, close stdin, wait for the exit. Fills `stderr_out`
 * (optional) with the stderr tail and returns 0 on exit status 0. */
int wf_iut_stop(wf_iut *iut, char *status, size_t statuslen);
void wf_iut_destroy(wf_iut *iut);
const char *wf_iut_stderr(const wf_iut *iut);
/* What the adapter said in hello: "impl version". */
const char *wf_iut_version(const wf_iut *iut);
bool wf_iut_alive(wf_iut *iut);

/* What one input did. */
typedef enum wf_kind {
	WF_K_NONE = 0,
	WF_K_CRASH,     /* the process ended (signal, abort, sanitizer report, exit) */
	WF_K_LISTENER,  /* alive, but a well-formed client is no longer served */
	WF_K_HANG,      /* alive, but the adapter or IUT makes no progress */
	WF_K_CALLBACK,  /* a callback fired twice, or never after its pipe was closed */
	WF_K_LEAK,      /* LeakSanitizer reported memory the IUT lost */
	WF_K_PENDING,   /* SHOULD level: an operation still pending after every connection closed */
} wf_kind;

typedef struct wf_result {
	wf_kind kind;
	char signature[256];
	char detail[1024];   /* exit status, the telling stderr line, what stalled */
	char stopped[160];   /* where the input's script stopped, and why */
	char pending[256];   /* SHOULD-level observation (operations left pending) */
	char kinds[128];     /* the error kinds the input's pipes first failed with ("proto,eof") */
} wf_result;

const char *wf_kind_name(wf_kind k);
/* MUST-level failure: anything but NONE and PENDING. */
static inline bool wf_result_failed(const wf_result *r)
{
	return r->kind != WF_K_NONE && r->kind != WF_K_PENDING;
}

/* Runs one input and judges it: the process, its pending operations after
 * every connection closed, exactly-once callbacks, then a fresh well-formed
 * peer (good check). A failure leaves the IUT to be restarted. */
void wf_run_input(wf_iut *iut, const wf_script *s, wf_result *r);
/* The good check alone (0 = a well-formed peer was fully served). */
int wf_good_check(wf_iut *iut, char *why, size_t whylen);

/* Replays one reproducer against a fresh IUT started with `cmd`: runs it,
 * judges it, shuts the IUT down and reads LeakSanitizer's report. Returns 0
 * when the run could be carried out (verdict in *r), -1 when the harness
 * could not (err). */
int wf_replay(const char *cmd, const wf_script *s, const wf_opts *o, wf_result *r, char *err,
              size_t errlen);

/* ---- signatures ------------------------------------------------------------------- */

/* From a dead process: its wait status and stderr tail. */
void wf_sig_crash(int wstatus, const char *stderr_tail, char *sig, size_t siglen, char *line,
                  size_t linelen);
/* LeakSanitizer reports in a stderr tail: one signature per distinct leak
 * (allocation stack), joined by '\n' into sigs. Returns how many. */
int wf_sig_leaks(const char *stderr_tail, char *sigs, size_t siglen);
/* Replaces digit runs by N and squeezes blanks, for messages. */
void wf_sig_normalise(const char *in, char *out, size_t outlen);

/* ---- the fuzzing loop ------------------------------------------------------------- */

typedef struct wf_fuzz_opts {
	const char *iut_cmd;
	const char *iut_name;   /* for file names and reports */
	bool scenarios[WF_SC_COUNT]; /* which scenarios to fuzz */
	uint64_t seed;
	long max_inputs;        /* 0 = no bound */
	double max_seconds;     /* 0 = no bound */
	const char *out_dir;    /* findings, progress.tsv, log; NULL = none written */
	bool systematic;        /* enumerate every mutation first */
	int start;              /* begin the enumeration at this index */
	bool minimise;
	int leak_every;         /* clean shutdown + LSan check every N inputs (0 = never) */
	wf_opts run;
	bool quiet;
	bool verbose_inputs;    /* print every input and its outcome */
} wf_fuzz_opts;

typedef struct wf_fuzz_stats {
	long inputs, restarts, findings, pending_sigs, unconfirmed;
	double seconds;
	int must_sigs;          /* distinct MUST-level signatures */
} wf_fuzz_stats;

/* Runs the loop; 0 when it ran (findings in stats), -1 when it could not
 * (err: the IUT is unavailable, or the base scenario fails on a fresh IUT). */
int wf_fuzz(const wf_fuzz_opts *o, wf_fuzz_stats *st, char *err, size_t errlen);

#endif /* TWC_WIREFUZZ_WF_H */
