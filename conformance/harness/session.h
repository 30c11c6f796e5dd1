/*
 * session.h - one pipe between two adapters (spec/agent.md), as the interop
 * and semantic cases use it: start both adapters, give them contexts, listen,
 * accept and connect, move described messages in either direction and check
 * every byte, descriptor field and callback, then end everything in order and
 * check that both adapters exit cleanly with every callback fired once.
 *
 * Every function returns 0 on success and -1 on failure, with the reason in
 * s->reason (the first failure wins). It must not decide outcomes beyond
 * pass/fail: profiles and levels are the runner's business.
 */
#ifndef TWC_HARNESS_SESSION_H
#define TWC_HARNESS_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "adapter_proc.h"
#include "agent.h"

#define TWC_REASON_MAX 4096

typedef struct twc_session {
	twc_adapter *server, *client;
	char sname[32], cname[32];
	char url[256], lid[64];
	char cpipe[64], spipe[64];
	json_int_t accept_id;
	int wait_ms;
	char reason[TWC_REASON_MAX];
	char impl[2][64], version[2][64]; /* [0] server, [1] client, from hello */
	char transport[32], channel[32];  /* what info reported (client side) */
	char server_skipped[256];         /* ",name," per entry the server found not viable */
	/* [0] server, [1] client: ",name," per extension twc_session_check_info
	 * heard the pipe uses (spec/agent.md 6.9); "?" if that side cannot tell */
	char exts[2][128];
} twc_session;

/* Shapes message `index` (counts, lengths, devices; seeds are assigned by the
 * session). Returns -1 on allocation failure. */
typedef int (*twc_shape_fn)(int index, twc_agent_msg *m);

/* True when cmd is "unavailable:<reason>" (the IUT is not built here). */
bool twc_cmd_unavailable(const char *cmd, const char **reason_out);

int twc_session_fail(twc_session *s, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Why a session of this process could not create its contexts as asked
 * (an adapter reported a transport or channel not viable here, e.g. ibv
 * without a device), or NULL. The runner's child turns the case's failure
 * into a SKIP with this reason. */
const char *twc_session_unavailable(void);
/* Why a session of this process could not check which transport and
 * channel a pipe uses (an adapter answered info with unsupported where a
 * case named them, spec/agent.md 6.9), or NULL. The runner's child turns
 * the case's PASS into a SKIP with this reason: the check did not run. */
const char *twc_session_unchecked(void);

/* The context request (without "cmd" and "name") a session makes when
 * given none: the run's transport and channel (combo.h), priority 0. New
 * reference; a case adds members (e.g. "extensions") and passes it to
 * twc_session_start. */
json_t *twc_session_combo_context(void);
/* The same with the extensions of spec/wire.md 8.4 and 8.5 switched off
 * (spec/agent.md 6.2), for cases about the channels or the
 * DescriptorReply: between two IUTs that have them, small tensors would
 * not touch the channel and no reply would be sent. */
json_t *twc_session_reply_context(void);

/* (A member "extensions_by_role": {"server": {...}, "client": {...}} of the
 * ctx given to twc_session_start, not sent, gives each role its own
 * "extensions".) */

/* Spawns both adapters, says hello and creates their contexts from `ctx`
 * (a "context" request without "name", borrowed; a member
 * "tolerate_skipped": true, not sent, lets entries the IUT finds not viable
 * be skipped instead of failing the start; NULL = the run's
 * transport and channel, combo.h, priority 0), then makes the server listen
 * on `urls` (NULL = that transport's listening URL, e.g. uv://127.0.0.1:0). */
int twc_session_start(twc_session *s, const char *ccmd, const char *scmd, const char *cname,
                     const char *sname, int wait_ms, const json_t *ctx, const json_t *urls);

/* After a raw peer (a hostile wire case) spoke to the server's listener:
 * the pipes its traffic made the listener accept are taken and closed, for
 * up to ms, so that the next twc_session_connect gets the well-formed
 * client's pipe. An accept still waiting then stays armed for it. The
 * number of pipes taken, or -1 (reason). */
int twc_session_take_strays(twc_session *s, int ms);

/* Arms an accept on the server, connects the client to the first bound URL
 * (or `url` if not NULL) and waits for the accepted pipe. */
int twc_session_connect(twc_session *s, const char *url);

/* Sends n messages shaped by `shape` from one side to the other over the
 * session's pipe, with the checks of spec/agent.md 8 (1-3). burst: every
 * write before the first read. */
int twc_session_transfer(twc_session *s, bool client_to_server, twc_shape_fn shape, int n,
                        bool burst, uint64_t seed_base);

/* Asks both sides for info and checks the transport and channel names (NULL
 * = do not check), the roles and the client's name as the server saw it. */
int twc_session_check_info(twc_session *s, const char *transport, const char *channel);

/* Asks adapter a to close its pipe `pipe` (a request that must succeed). */
int twc_session_close_pipe(twc_session *s, twc_adapter *a, const char *pipe);

/* Orderly end: closes both pipes, shuts both contexts down, waits for both
 * adapters to exit with status 0 and checks every callback fired once. */
int twc_session_finish(twc_session *s);

/* Kills what is left and frees. */
void twc_session_destroy(twc_session *s);

/* A request that must succeed; NULL (and s->reason) otherwise. */
json_t *twc_session_call(twc_session *s, twc_adapter *a, json_t *req);

/* Sends a request that arms a callback and returns its id (-1 on failure). */
json_int_t twc_session_arm(twc_session *s, twc_adapter *a, json_t *req);

/* Waits for the event of request id; *out gets it (caller decrefs). A
 * timeout or a dead adapter fails the session. */
int twc_session_event(twc_session *s, twc_adapter *a, json_int_t id, const char *name,
                     json_t **out);

/* Like twc_session_event, but the event must be "ok": true. */
int twc_session_ok_event(twc_session *s, twc_adapter *a, json_int_t id, const char *name,
                        json_t **out);

/* The error kind of a failed event ("closed", "eof", ...), or NULL. */
const char *twc_event_error_kind(const json_t *ev);
const char *twc_event_error_text(const json_t *ev);

/* Writes `text` to a file of this case's own (TMPDIR, named after id and
 * the pid) and puts its path in path and "env VAR=<path> " in prefix, for
 * an adapter's command (a simverbs configuration, say); -1 when it cannot
 * be written. The caller unlinks path. */
int twc_env_file(const char *var, const char *id, const char *text, char *path, size_t path_len,
                 char *prefix, size_t prefix_len);

/* Message helpers shared with the cases. */
void twc_msg_assign_seeds(twc_agent_msg *m, uint64_t base);
/* Shapes *m as a message with `meta` bytes of metadata and one tensor of
 * `len` bytes from cpu:0 to cpu:0 (no payloads); -1 when out of memory. */
int twc_msg_one_tensor(twc_agent_msg *m, uint64_t meta, uint64_t len);
json_t *twc_msg_json(const twc_agent_msg *m);
void twc_msg_clear(twc_agent_msg *m);
int twc_msg_check_descriptor(const twc_agent_msg *m, const json_t *d, char *why, size_t whylen);
int twc_msg_check_read(const twc_agent_msg *m, const json_t *ev, char *why, size_t whylen);

#endif /* TWC_HARNESS_SESSION_H */
