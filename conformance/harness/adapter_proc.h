/*
 * adapter_proc.h - the harness side of the agent protocol (spec/agent.md):
 * spawns an adapter process, sends requests, waits for responses and events,
 * and keeps the books that let a case assert "every callback exactly once"
 * (spec/agent.md 6).
 *
 * Single-threaded: one poll loop pumps every live adapter, so one adapter
 * blocking on a full pipe never stalls another. It must not interpret
 * message contents; cases do that.
 */
#ifndef TWC_HARNESS_ADAPTER_PROC_H
#define TWC_HARNESS_ADAPTER_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

typedef struct twc_adapter twc_adapter;

/* Starts `cmd` (run by /bin/sh -c "exec cmd") with piped stdin, stdout and
 * stderr. `label` names it in messages ("client ours"). NULL on failure, with
 * the reason in err. */
twc_adapter *twc_adapter_spawn(const char *cmd, const char *label, char *err, size_t errlen);

const char *twc_adapter_label(const twc_adapter *a);
/* The label of the first adapter of this process that closed its output
 * (exited, crashed) while the harness waited for it; "" if none did. A
 * profile may excuse such a failure only for that adapter's own
 * implementation. */
const char *twc_adapter_first_gone(void);

/* Sends `req` (stolen; "id" is set here) and waits up to timeout_ms for its
 * response. Returns the response (caller decrefs), whatever its "ok", or NULL
 * on timeout or adapter exit, with the reason in err. A successful response
 * to accept, write, read_descriptor or read arms one expected event. */
json_t *twc_adapter_request(twc_adapter *a, json_t *req, int timeout_ms, char *err, size_t errlen);

/* Like twc_adapter_request, but also fails (NULL) when "ok" is not true, with
 * the adapter's error text in err. */
json_t *twc_adapter_call(twc_adapter *a, json_t *req, int timeout_ms, char *err, size_t errlen);

/* Sends `req` without waiting; returns its id, or -1 (reason in err). */
json_int_t twc_adapter_send(twc_adapter *a, json_t *req, char *err, size_t errlen);

/* Waits for the response to a request sent with twc_adapter_send. */
json_t *twc_adapter_response(twc_adapter *a, json_int_t id, int timeout_ms, char *err,
                            size_t errlen);

/* Waits up to timeout_ms for the event armed by request `id`, and checks its
 * name. Returns it (caller decrefs) or NULL with the reason in err. */
json_t *twc_adapter_event(twc_adapter *a, json_int_t id, const char *name, int timeout_ms,
                         char *err, size_t errlen);

/* Sends nothing more: closes the adapter's stdin, reads its output to the
 * end, and waits up to timeout_ms for it to exit (then kills it). Returns 0
 * on a clean exit with status 0, -1 otherwise (err says how it ended). */
int twc_adapter_finish(twc_adapter *a, int timeout_ms, char *err, size_t errlen);

/* After twc_adapter_finish: checks that every armed request got exactly one
 * event and no event arrived for anything else. Returns the number of
 * violations and describes the first ones in err. */
int twc_adapter_check_callbacks(twc_adapter *a, char *err, size_t errlen);

/* Number of events received so far for request `id`. */
int twc_adapter_events_seen(twc_adapter *a, json_int_t id);

/* True once the process has exited; *status_out gets the waitpid status. */
bool twc_adapter_exited(twc_adapter *a, int *status_out);

/* Polls every live adapter for up to timeout_ms (0 = just drain). */
void twc_adapter_pump(int timeout_ms);

/* The last bytes the adapter wrote to stderr (NUL-terminated). */
const char *twc_adapter_stderr(const twc_adapter *a);

/* Describes a waitpid status: "exit 0", "killed by signal 6 (SIGABRT)". */
void twc_adapter_describe_status(int status, char *buf, size_t buflen);

/* Sends SIGKILL to the adapter now, to every process of it (its
 * descendants first, then the one spawned), so a wrapper's child cannot
 * see the wrapper die and close in order. Reaped by later pumps or
 * destroy. */
void twc_adapter_kill(twc_adapter *a);

/* Sends `sig` to every process of the adapter as twc_adapter_kill does
 * (SIGSTOP, SIGCONT: a peer that is alive to TCP but silent). 0, or -1 if
 * it exited. */
int twc_adapter_signal(twc_adapter *a, int sig);

/* Kills (SIGKILL) if still running, reaps, frees. */
void twc_adapter_destroy(twc_adapter *a);

/* Milliseconds on a monotonic clock. */
long long twc_now_ms(void);

#endif /* TWC_HARNESS_ADAPTER_PROC_H */
