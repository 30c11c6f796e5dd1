/*
 * semantic.c - the semantic suite: behaviour a user sees through the API,
 * driven through the adapters (spec/agent.md) with the IUT on both ends of
 * one pipe, and with the reference implementation on either end (the runner
 * runs every case as iut->iut, iut->ref and ref->iut, so a bug that both ends
 * of one implementation share cannot pass): per-pipe ordering, many writes
 * in flight, both sides writing at once, closing with operations pending, a
 * peer that closes versus one that is killed, and the priorities of
 * transports and channels.
 *
 * Every case ends with the orderly shutdown of harness/session.c, which also
 * checks that every callback fired exactly once and that the adapters exit
 * cleanly (so leaks and sanitizer reports fail the case too).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adapter_proc.h"
#include "case.h"
#include "combo.h"
#include "suites.h"
#include "session.h"

/* ---- message shapes -------------------------------------------------------------- */

static int parts(twc_agent_msg *m, size_t np, size_t nt)
{
	memset(m, 0, sizeof(*m));
	m->num_payloads = np;
	m->num_tensors = nt;
	if (np && !(m->payloads = calloc(np, sizeof(*m->payloads))))
		return -1;
	if (nt && !(m->tensors = calloc(nt, sizeof(*m->tensors))))
		return -1;
	for (size_t i = 0; i < nt; i++) {
		(void)twc_agent_device_parse("cpu:0", &m->tensors[i].source_device);
		m->tensors[i].has_target_device = true;
		(void)twc_agent_device_parse("cpu:0", &m->tensors[i].target_device);
	}
	return 0;
}

/* Every message differs in size, so a swap or a loss shows in the descriptor. */
static int shape_ordered(int i, twc_agent_msg *m)
{
	if (parts(m, 1, 1))
		return -1;
	m->metadata.len = 1 + (uint64_t)i;
	m->payloads[0].data.len = 3 + (uint64_t)i * 7;
	m->tensors[0].data.len = 100 + (uint64_t)i * 13;
	return 0;
}

/* Every other message has a tensor without a target device, so it waits for
 * its DescriptorReply while the one behind it is ready to go (the case
 * switches spec 8.4 and 8.5 off, which would send none). Every tensor is
 * above 64 KiB, the bound of 8.4's eager tensors. */
static int shape_reply_gaps(int i, twc_agent_msg *m)
{
	if (shape_ordered(i, m))
		return -1;
	m->tensors[0].has_target_device = i % 2 != 0;
	m->tensors[0].data.len = 65537 + (uint64_t)i * 13;
	return 0;
}

static int shape_64k(int i, twc_agent_msg *m)
{
	if (parts(m, 0, 1))
		return -1;
	m->metadata.len = 8;
	m->tensors[0].data.len = 64 * 1024 + (uint64_t)(i % 17);
	return 0;
}

static int shape_4m(int i, twc_agent_msg *m)
{
	if (parts(m, 1, 1))
		return -1;
	m->payloads[0].data.len = 1000 + (uint64_t)i;
	m->tensors[0].data.len = (4u << 20) + (uint64_t)i;
	return 0;
}

static int shape_small(int i, twc_agent_msg *m)
{
	if (parts(m, 1, 1))
		return -1;
	m->metadata.len = 5;
	m->payloads[0].data.len = 10 + (uint64_t)i;
	m->tensors[0].data.len = 1000;
	return 0;
}

/* ---- helpers ------------------------------------------------------------------------- */

static twc_outcome_t from_session(twc_session *s, twc_case_env *env, int rc)
{
	snprintf(env->transport, sizeof(env->transport), "%s", s->transport);
	snprintf(env->channel, sizeof(env->channel), "%s", s->channel);
	twc_session_destroy(s);
	if (rc == 0)
		return TWC_PASS;
	return twc_case_result(env, TWC_FAIL, "%s", s->reason);
}

/* The client is the IUT; the server is the peer the runner chose (the IUT
 * itself, or the reference implementation for a cross run). */
static int begin(twc_session *s, twc_case_env *env, const json_t *ctx, const json_t *urls)
{
	const char *scmd = env->peer_cmd ? env->peer_cmd : env->iut_cmd;
	const char *sname = env->peer_cmd ? env->peer_name : env->iut_name;
	int rc = twc_session_start(s, env->iut_cmd, scmd, env->iut_name, sname, env->wait_ms, ctx,
	                          urls);
	if (rc == 0)
		rc = twc_session_connect(s, NULL);
	return rc;
}

/* A pending operation must end with exactly one error event. */
static int expect_error_event(twc_session *s, twc_adapter *a, json_int_t id, const char *name,
                              const char *want_kind, char *kind_out, size_t kind_len)
{
	json_t *ev;
	if (twc_session_event(s, a, id, name, &ev))
		return -1;
	int rc = 0;
	const char *kind = twc_event_error_kind(ev);
	if (json_is_true(json_object_get(ev, "ok")))
		rc = twc_session_fail(s, "%s: the pending %s succeeded; it should have failed",
		                     twc_adapter_label(a), name);
	else if (want_kind && (!kind || strcmp(kind, want_kind) != 0))
		rc = twc_session_fail(s, "%s: the pending %s failed with kind '%s' (%s), expected '%s'",
		                     twc_adapter_label(a), name, kind ? kind : "?",
		                     twc_event_error_text(ev), want_kind);
	else
		printf("# %s: pending %s failed as it should: %s (%s)\n", twc_adapter_label(a), name,
		       kind ? kind : "?", twc_event_error_text(ev));
	if (kind_out)
		snprintf(kind_out, kind_len, "%s", kind ? kind : "?");
	json_decref(ev);
	return rc;
}

/* ---- cases ----------------------------------------------------------------------------- */

/* n messages shaped by `shape` each way, all written before the first read. */
static twc_outcome_t both_ways_ctx(twc_case_env *env, const json_t *ctx, twc_shape_fn shape,
                                   int n, uint64_t seed)
{
	twc_session s;
	int rc = begin(&s, env, ctx, NULL);
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape, n, true, seed);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape, n, true, seed + 1999000);
	if (rc == 0)
		rc = twc_session_check_info(&s, NULL, NULL);
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

static twc_outcome_t both_ways(twc_case_env *env, twc_shape_fn shape, int n, uint64_t seed)
{
	return both_ways_ctx(env, NULL, shape, n, seed);
}

/* "D carries, per direction: descriptor0, payloads0..., descriptor1,
 * payloads1..., strictly in message order. [...] Callbacks are delivered to the
 * application in message order" (wire.md 3.11) */
static twc_outcome_t run_ordering(const twc_case *c, twc_case_env *env)
{
	return both_ways(env, shape_ordered, 200, 1000);
}

/* (3.12.a) again, where a message waits for its DescriptorReply (3.11) and
 * the messages behind it need none: their tensors must still follow its
 * tensors on the channel, never overtake them. */
static twc_outcome_t run_ordering_behind_reply(const twc_case *c, twc_case_env *env)
{
	/* replies are what the case is about: spec 8.5 would drop them all */
	json_t *ctx = twc_session_reply_context();
	twc_outcome_t o = both_ways_ctx(env, ctx, shape_reply_gaps, 40, 1500000);
	json_decref(ctx);
	return o;
}

/* Every kind of tensor spec 8.4 tells apart, in one message: empty and
 * small ones without a target device (eager), one of exactly 64 KiB with
 * a CPU target (eager), one of 64 KiB + 1 without a target (the channel,
 * after a DescriptorReply) and a small targeted one behind it (eager). */
static int shape_eager_mix(int i, twc_agent_msg *m)
{
	static const uint64_t len[5] = {0, 1000, 65536, 65537, 3};
	if (parts(m, 1, 5))
		return -1;
	m->metadata.len = 4 + (uint64_t)i;
	m->payloads[0].data.len = 7 + (uint64_t)i;
	for (size_t k = 0; k < 5; k++) {
		m->tensors[k].data.len = len[k] + (k == 1 || k == 3 ? (uint64_t)i : 0);
		m->tensors[k].has_target_device = k == 2 || k == 4;
	}
	return 0;
}

/* What both ends' info says of extension `ext` (spec/agent.md 6.9),
 * against `want`. */
static int check_ext_used(twc_session *s, const char *ext, bool want)
{
	char key[40];
	snprintf(key, sizeof(key), ",%s,", ext);
	for (int side = 0; side < 2; side++) {
		const char *xs = s->exts[side], *who = side ? "client" : "server";
		if (!strcmp(xs, "?")) {
			printf("# the %s cannot tell which extensions its pipe uses\n", who);
			continue;
		}
		if ((strstr(xs, key) != NULL) != want)
			return twc_session_fail(s, "the %s reports extensions [%s]; the pipe should %suse "
			                           "%s (8.4.a, 8.5.a)",
			                        who, xs, want ? "" : "not ", ext);
	}
	return 0;
}

/* One session where the client asks extension `ext` (eager or noreply) or
 * not, and the server agrees to it or not (spec/agent.md 6.2
 * "extensions"): messages of every kind go both ways, the first direction
 * in a burst, and arrive intact; the pipe uses it exactly when both ends
 * have it on. */
static int ext_session(twc_case_env *env, const char *ext, bool client_on, bool server_on, int n,
                       twc_session *s)
{
	json_t *ctx = twc_session_combo_context();
	json_object_set_new(ctx, "extensions_by_role",
	                    json_pack("{s:{s:b},s:{s:b}}", "client", ext, client_on, "server", ext,
	                              server_on));
	printf("# %s: client %s, server %s\n", ext, client_on ? "on" : "off",
	       server_on ? "on" : "off");
	int rc = begin(s, env, ctx, NULL);
	json_decref(ctx);
	if (rc == 0)
		rc = twc_session_transfer(s, true, shape_eager_mix, n, true, 17000000);
	if (rc == 0)
		rc = twc_session_transfer(s, false, shape_eager_mix, n, false, 17500000);
	if (rc == 0)
		rc = twc_session_check_info(s, NULL, NULL);
	if (rc == 0)
		rc = check_ext_used(s, ext, client_on && server_on);
	if (rc == 0)
		rc = twc_session_finish(s);
	return rc;
}

/* Extension `ext` on at both ends, then off at the client, then at the
 * server (ext_session). The data is the judge: a tensor taken from the
 * wrong place, or a reply missing or extra, fails its checksum or hangs.
 * An IUT without the extension SKIPs. */
static twc_outcome_t run_ext_sessions(twc_case_env *env, const char *ext)
{
	static const bool on[3][2] = {{true, true}, {false, true}, {true, false}};
	twc_session s;
	int rc = 0;
	for (int k = 0;; k++) {
		rc = ext_session(env, ext, on[k][0], on[k][1], k == 0 ? 30 : 5, &s);
		if (rc || k == 2)
			break;
		twc_session_destroy(&s);
	}
	return from_session(&s, env, rc);
}

/* Spec 8.4: with both ends on, small CPU tensors travel on D and the rest
 * on the channel, mixed in one message, in both directions; with either
 * end off, the pipe follows 3.10 and 3.11 only. */
static twc_outcome_t run_eager(const twc_case *c, twc_case_env *env)
{
	return run_ext_sessions(env, "eager");
}

/* Spec 8.5 the same way: with both ends on, no DescriptorReply, and the
 * tensors without a target device (the 64 KiB + 1 one on the channel,
 * the small ones eager where 8.4 is on too) land in CPU buffers. */
static twc_outcome_t run_noreply(const twc_case *c, twc_case_env *env)
{
	return run_ext_sessions(env, "noreply");
}

/* "Stock sender pipelining: [...] up to several descriptors can be in flight
 * [...] there is no flow control beyond the transports'." (wire.md 3.11);
 * "many writes in flight before any read" (issue 3 item 5) */
static twc_outcome_t run_in_flight(const twc_case *c, twc_case_env *env)
{
	twc_session s;
	int rc = begin(&s, env, NULL, NULL);
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_64k, 1000, true, 3000000);
	if (rc == 0)
		rc = twc_session_check_info(&s, NULL, NULL);
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* "both sides writing at once" (issue 3 item 5): each side queues 8 messages
 * of 4 MiB before either side reads; nothing may deadlock or mix. */
static twc_outcome_t run_both_write(const twc_case *c, twc_case_env *env)
{
	enum { N = 8 };
	twc_session s;
	twc_agent_msg msgs[2][N];
	json_int_t wids[2][N];
	memset(msgs, 0, sizeof(msgs));
	int rc = begin(&s, env, NULL, NULL);
	twc_adapter *side[2] = {s.client, s.server};
	const char *pipe[2] = {s.cpipe, s.spipe};
	for (int d = 0; rc == 0 && d < 2; d++) {
		for (int i = 0; rc == 0 && i < N; i++) {
			if (shape_4m(i, &msgs[d][i])) {
				rc = twc_session_fail(&s, "harness: out of memory");
				break;
			}
			twc_msg_assign_seeds(&msgs[d][i], 4000000 + (uint64_t)d * 100000 + (uint64_t)i * 100);
		}
	}
	/* every write on both sides first */
	for (int i = 0; rc == 0 && i < N; i++) {
		for (int d = 0; d < 2 && rc == 0; d++) {
			wids[d][i] = twc_session_arm(&s, side[d], json_pack("{s:s,s:s,s:o}", "cmd", "write",
			                                                   "pipe", pipe[d], "message",
			                                                   twc_msg_json(&msgs[d][i])));
			rc = wids[d][i] < 0 ? -1 : 0;
		}
	}
	/* then both sides read what the other wrote, alternating */
	for (int i = 0; rc == 0 && i < N; i++) {
		for (int d = 0; d < 2 && rc == 0; d++) {
			twc_adapter *rx = side[1 - d];
			char why[1024];
			json_t *ev = NULL;
			json_int_t id = twc_session_arm(&s, rx, json_pack("{s:s,s:s}", "cmd",
			                                                 "read_descriptor", "pipe",
			                                                 pipe[1 - d]));
			rc = id < 0 || twc_session_ok_event(&s, rx, id, "read_descriptor", &ev) ? -1 : 0;
			if (rc == 0 && twc_msg_check_descriptor(&msgs[d][i], json_object_get(ev, "descriptor"),
			                                       why, sizeof(why)))
				rc = twc_session_fail(&s, "message %d from %s: %s", i,
				                     twc_adapter_label(side[d]), why);
			json_decref(ev);
			ev = NULL;
			if (rc)
				break;
			id = twc_session_arm(&s, rx, json_pack("{s:s,s:s}", "cmd", "read", "pipe",
			                                      pipe[1 - d]));
			rc = id < 0 || twc_session_ok_event(&s, rx, id, "read", &ev) ? -1 : 0;
			if (rc == 0 && twc_msg_check_read(&msgs[d][i], ev, why, sizeof(why)))
				rc = twc_session_fail(&s, "message %d from %s: %s", i,
				                     twc_adapter_label(side[d]), why);
			json_decref(ev);
		}
	}
	for (int i = 0; rc == 0 && i < N; i++)
		for (int d = 0; d < 2 && rc == 0; d++)
			rc = twc_session_ok_event(&s, side[d], wids[d][i], "write", NULL);
	for (int d = 0; d < 2; d++)
		for (int i = 0; i < N; i++)
			twc_msg_clear(&msgs[d][i]);
	if (rc == 0)
		rc = twc_session_check_info(&s, NULL, NULL);
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* Message 0 of the limit case: 3 MiB of metadata, so its Descriptor packet
 * is over the 2 MiB a ring transport carries (spec 2.5); then small ones. */
static int shape_big_descriptor(int i, twc_agent_msg *m)
{
	if (parts(m, 1, 1))
		return -1;
	m->metadata.len = i == 0 ? UINT64_C(3) << 20 : 7;
	m->payloads[0].data.len = 100;
	m->tensors[0].data.len = 1000 + (uint64_t)i;
	return 0;
}

/* (2.5.a) on the run's transport: a ring (shm, ibv) must refuse the message
 * whose Descriptor does not fit a packet, alone, before sending any of it,
 * naming the limit; the next messages travel. A stream (uv) carries it. */
static twc_outcome_t run_packet_limit(const twc_case *c, twc_case_env *env)
{
	const char *t = twc_combo_current()->transport;
	bool ring = !strcmp(t, "shm") || !strcmp(t, "ibv");
	twc_session s;
	int rc = begin(&s, env, NULL, NULL);
	if (rc == 0 && !ring)
		rc = twc_session_transfer(&s, true, shape_big_descriptor, 3, false, 7100000);
	if (rc == 0 && ring) {
		twc_agent_msg m;
		if (shape_big_descriptor(0, &m))
			rc = twc_session_fail(&s, "harness: out of memory");
		twc_msg_assign_seeds(&m, 7000000);
		json_int_t w = rc ? -1 : twc_session_arm(&s, s.client,
		                                         json_pack("{s:s,s:s,s:o}", "cmd", "write",
		                                                   "pipe", s.cpipe, "message",
		                                                   twc_msg_json(&m)));
		twc_msg_clear(&m);
		json_t *ev = NULL;
		rc = w < 0 ? -1 : twc_session_event(&s, s.client, w, "write", &ev);
		if (rc == 0 && json_is_true(json_object_get(ev, "ok")))
			rc = twc_session_fail(&s, "on %s a message whose Descriptor is over 3 MiB was "
			                          "written; a ring packet is at most 2 MiB (2.5.a)",
			                      t);
		else if (rc == 0)
			printf("# refused as it must be: %s\n", twc_event_error_text(ev));
		json_decref(ev);
		/* the pipe and the peer are not affected: the next messages travel */
		if (rc == 0)
			rc = twc_session_transfer(&s, true, shape_small, 3, false, 7200000);
	}
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape_small, 3, false, 7300000);
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* "Every callback fires exactly once, with an error if the object closes
 * first." (STYLE.md; tensorwire.h: "on close each pending callback fires with
 * an error") - here: a descriptor delivered and never read, then close. */
static twc_outcome_t run_descriptor_then_close(const twc_case *c, twc_case_env *env)
{
	twc_session s;
	twc_agent_msg m;
	json_t *ev = NULL;
	int rc = begin(&s, env, NULL, NULL);
	memset(&m, 0, sizeof(m));
	if (rc == 0 && shape_small(0, &m))
		rc = twc_session_fail(&s, "harness: out of memory");
	twc_msg_assign_seeds(&m, 5000000);
	json_int_t w = rc ? -1 : twc_session_arm(&s, s.client, json_pack("{s:s,s:s,s:o}", "cmd",
	                                                                "write", "pipe", s.cpipe,
	                                                                "message", twc_msg_json(&m)));
	json_int_t rd = w < 0 ? -1 : twc_session_arm(&s, s.server, json_pack("{s:s,s:s}", "cmd",
	                                                                    "read_descriptor", "pipe",
	                                                                    s.spipe));
	rc = rd < 0 ? -1 : twc_session_ok_event(&s, s.server, rd, "read_descriptor", &ev);
	json_decref(ev);
	twc_msg_clear(&m);
	if (rc == 0) {
		json_t *r = twc_session_call(&s, s.server, json_pack("{s:s,s:s}", "cmd", "close", "pipe",
		                                                    s.spipe));
		rc = r ? 0 : -1;
		json_decref(r);
	}
	/* the writer's callback fires once, whether it completed or failed */
	if (rc == 0)
		rc = twc_session_event(&s, s.client, w, "write", &ev);
	if (rc == 0) {
		printf("# the client's write ended: %s\n",
		       json_is_true(json_object_get(ev, "ok")) ? "ok" : twc_event_error_text(ev));
		json_decref(ev);
	}
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* "Every callback fires exactly once, with an error if the object closes
 * first." (STYLE.md) and tensorwire.h: "When the object closes first, each
 * pending callback fires with an error (TW_ERR_CLOSED for a local close)". */
static twc_outcome_t run_close_with_pending(const twc_case *c, twc_case_env *env)
{
	twc_session s;
	twc_agent_msg m;
	int rc = begin(&s, env, NULL, NULL);
	memset(&m, 0, sizeof(m));
	/* one message first, so that every connection of the pipe has reached
	 * the server: a connection closed before its hello is another matter
	 * (wire.md 3.3.f, 3.3.g; wire.close_before_hello), and a stock listener
	 * would fail the pending accept below with that connection's EOF */
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_small, 1, false, 5900000);
	/* a write that cannot finish: its tensor has no target device, so it
	 * waits for a DescriptorReply the server never sends (it never reads),
	 * or, where spec 8.5 drops the reply, for the server to read 64 MiB off
	 * the channel: more than any transport buffers */
	if (rc == 0 && parts(&m, 0, 1))
		rc = twc_session_fail(&s, "harness: out of memory");
	if (rc == 0) {
		m.tensors[0].data.len = 64 << 20;
		m.tensors[0].has_target_device = false;
		twc_msg_assign_seeds(&m, 6000000);
	}
	json_int_t w = rc ? -1 : twc_session_arm(&s, s.client, json_pack("{s:s,s:s,s:o}", "cmd",
	                                                                "write", "pipe", s.cpipe,
	                                                                "message", twc_msg_json(&m)));
	twc_msg_clear(&m);
	json_int_t crd = w < 0 ? -1 : twc_session_arm(&s, s.client, json_pack("{s:s,s:s}", "cmd",
	                                                                     "read_descriptor",
	                                                                     "pipe", s.cpipe));
	json_int_t acc = crd < 0 ? -1 : twc_session_arm(&s, s.server, json_pack("{s:s,s:s}", "cmd",
	                                                                       "accept", "listener",
	                                                                       s.lid));
	rc = acc < 0 ? -1 : 0;
	/* close the client's pipe: its write and read_descriptor are pending */
	json_t *r = rc ? NULL : twc_session_call(&s, s.client, json_pack("{s:s,s:s}", "cmd", "close",
	                                                                "pipe", s.cpipe));
	rc = rc || !r ? -1 : 0;
	json_decref(r);
	if (rc == 0)
		rc = expect_error_event(&s, s.client, w, "write", "closed", NULL, 0);
	if (rc == 0)
		rc = expect_error_event(&s, s.client, crd, "read_descriptor", "closed", NULL, 0);
	/* close the listener: its accept is pending */
	r = rc ? NULL : twc_session_call(&s, s.server, json_pack("{s:s,s:s}", "cmd", "close",
	                                                        "listener", s.lid));
	rc = rc || !r ? -1 : 0;
	json_decref(r);
	if (rc == 0)
		rc = expect_error_event(&s, s.server, acc, "accept", "closed", NULL, 0);
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* The adapter has exited cleanly with every callback once. */
static int adapter_done(twc_session *s, twc_adapter *a)
{
	char err[TWC_REASON_MAX];
	if (twc_adapter_finish(a, 30000, err, sizeof(err)) ||
	    twc_adapter_check_callbacks(a, err, sizeof(err)))
		return twc_session_fail(s, "%s", err);
	return 0;
}

/* One side alone ends in order (its peer is gone or finished): close its
 * pipe, shut it down, and adapter_done. */
static int finish_one(twc_session *s, twc_adapter *a, const char *pipe)
{
	json_t *r = twc_session_close_pipe(s, a, pipe)
	                    ? NULL
	                    : twc_session_call(s, a, json_pack("{s:s}", "cmd", "shutdown"));
	json_decref(r);
	return r ? adapter_done(s, a) : -1;
}

/* One run of "the peer goes away while the server waits for a descriptor":
 * gracefully (close, shutdown, exit) or killed with SIGKILL. */
static int peer_gone(twc_case_env *env, bool kill_it, char *kind, size_t kind_len, char *why,
                     size_t why_len)
{
	twc_session s;
	int rc = begin(&s, env, NULL, NULL);
	/* one message first, so the pipe is established on both ends (a peer that
	 * leaves mid-handshake is a wire-suite case, wire.close_after_answer) */
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_small, 1, false, 9000000);
	json_int_t rd = rc ? -1 : twc_session_arm(&s, s.server, json_pack("{s:s,s:s}", "cmd",
	                                                                 "read_descriptor", "pipe",
	                                                                 s.spipe));
	rc = rd < 0 ? -1 : 0;
	if (rc == 0 && kill_it) {
		printf("# killing the client with SIGKILL\n");
		twc_adapter_kill(s.client);
	} else if (rc == 0) {
		json_t *r = twc_session_call(&s, s.client, json_pack("{s:s,s:s}", "cmd", "close", "pipe",
		                                                    s.cpipe));
		json_decref(r);
		r = r ? twc_session_call(&s, s.client, json_pack("{s:s}", "cmd", "shutdown")) : NULL;
		rc = r ? 0 : -1;
		json_decref(r);
	}
	if (rc == 0)
		rc = expect_error_event(&s, s.server, rd, "read_descriptor", NULL, kind, kind_len);
	if (rc == 0 && strcmp(kind, "eof") != 0 && strcmp(kind, "reset") != 0)
		rc = twc_session_fail(&s, "the pending read failed with kind '%s', not an end-of-file or "
		                         "connection-reset error (wire.md 5.6.a)", kind);
	/* end the server in order; the client is gone (or going) */
	if (rc == 0)
		rc = finish_one(&s, s.server, s.spipe);
	if (rc == 0 && !kill_it)
		rc = adapter_done(&s, s.client);
	snprintf(why, why_len, "%s", s.reason);
	twc_session_destroy(&s);
	return rc;
}

/* "a graceful close versus a peer killed with SIGKILL (distinguishable
 * errors)" (issue 3 item 5). The MUST half: either way the pending operation
 * ends with exactly one error, no hang. The SHOULD half (arg != NULL): the two
 * errors are of different kinds. */
static twc_outcome_t run_peer_gone(const twc_case *c, twc_case_env *env)
{
	char k1[32] = "", k2[32] = "", why[TWC_REASON_MAX];
	if (peer_gone(env, false, k1, sizeof(k1), why, sizeof(why)))
		return twc_case_result(env, TWC_FAIL, "graceful close: %s", why);
	if (peer_gone(env, true, k2, sizeof(k2), why, sizeof(why)))
		return twc_case_result(env, TWC_FAIL, "SIGKILL: %s", why);
	if (c->arg && !strcmp(k1, k2))
		return twc_case_result(env, TWC_FAIL, "a graceful close and a SIGKILL both end the "
		                                    "peer's pending read with kind '%s'", k1);
	/* Distinct is not enough: the close must read as an end-of-file and the
	 * death as a reset (wire.md 8.2), not the other way round. */
	if (c->arg && (strcmp(k1, "eof") != 0 || strcmp(k2, "reset") != 0))
		return twc_case_result(env, TWC_FAIL, "a graceful close ended the peer's pending read "
		                                    "with kind '%s' and a SIGKILL with '%s'; expected "
		                                    "'eof' and 'reset'", k1, k2);
	return twc_case_result(env, TWC_PASS, "graceful close: %s; SIGKILL: %s", k1, k2);
}

/* "The server iterates its own viable transports from highest to lowest
 * priority and picks the first one that (a) its listener also listens on, (b)
 * appears in the client's brochure [...]. Channels: iterating its channels
 * from highest to lowest priority [...]" (wire.md 3.5) */
static twc_outcome_t run_channel_priority(const twc_case *c, twc_case_env *env)
{
	json_t *ctx = json_pack("{s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i},{s:s,s:s,s:i}]}", "transports",
	                        "name", "uv", "kind", "uv", "priority", 0, "channels", "name",
	                        "basic", "kind", "basic", "priority", 0, "name", "basic_hi", "kind",
	                        "basic", "priority", 10);
	twc_session s;
	int rc = begin(&s, env, ctx, NULL);
	json_decref(ctx);
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_small, 3, false, 7000000);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape_small, 3, false, 7100000);
	if (rc == 0)
		rc = twc_session_check_info(&s, "uv", "basic_hi");
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

static twc_outcome_t run_transport_priority(const twc_case *c, twc_case_env *env)
{
	json_t *ctx = json_pack("{s:[{s:s,s:s,s:i},{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "transports",
	                        "name", "uv", "kind", "uv", "priority", 0, "name", "uv_hi", "kind",
	                        "uv", "priority", 10, "channels", "name", "basic", "kind", "basic",
	                        "priority", 0);
	json_t *urls = json_pack("[s,s]", "uv://127.0.0.1:0", "uv_hi://127.0.0.1:0");
	twc_session s;
	/* the client connects through "uv"; the server must move the pipe to
	 * "uv_hi", the higher priority, which means a new descriptor connection */
	int rc = begin(&s, env, ctx, urls);
	json_decref(ctx);
	json_decref(urls);
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_small, 3, false, 8000000);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape_small, 3, false, 8100000);
	if (rc == 0)
		rc = twc_session_check_info(&s, "uv_hi", "basic");
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* ---- the end of a pipe and liveness (issue 10) ---------------------------------------- */

static twc_outcome_t end_session(twc_session *s, twc_case_env *env, int rc)
{
	char why[TWC_REASON_MAX];
	snprintf(why, sizeof(why), "%s", s->reason);
	twc_session_destroy(s);
	return rc == 0 ? TWC_PASS : twc_case_result(env, TWC_FAIL, "%s", why);
}

/* The server reads the next message, which must be m (number i). */
static int server_read_checked(twc_session *s, const twc_agent_msg *m, int i)
{
	char why[1024];
	json_t *ev = NULL;
	json_int_t id = twc_session_arm(s, s->server, json_pack("{s:s,s:s}", "cmd", "read_descriptor",
	                                                       "pipe", s->spipe));
	int rc = id < 0 || twc_session_ok_event(s, s->server, id, "read_descriptor", &ev) ? -1 : 0;
	if (rc == 0 &&
	    twc_msg_check_descriptor(m, json_object_get(ev, "descriptor"), why, sizeof(why)))
		rc = twc_session_fail(s, "message %d: %s", i, why);
	json_decref(ev);
	ev = NULL;
	id = rc ? -1 : twc_session_arm(s, s->server, json_pack("{s:s,s:s}", "cmd", "read", "pipe",
	                                                      s->spipe));
	rc = id < 0 || twc_session_ok_event(s, s->server, id, "read", &ev) ? -1 : 0;
	if (rc == 0 && twc_msg_check_read(m, ev, why, sizeof(why)))
		rc = twc_session_fail(s, "message %d: %s", i, why);
	json_decref(ev);
	return rc;
}

/* The server's next read_descriptor meets the end: eof or reset. */
static int server_reads_end(twc_session *s)
{
	json_int_t last = twc_session_arm(s, s->server, json_pack("{s:s,s:s}", "cmd",
	                                                         "read_descriptor", "pipe", s->spipe));
	char kind[32] = "";
	int rc = last < 0 ? -1 : expect_error_event(s, s->server, last, "read_descriptor", NULL, kind,
	                                            sizeof(kind));
	if (rc == 0 && strcmp(kind, "eof") != 0 && strcmp(kind, "reset") != 0)
		rc = twc_session_fail(s, "the read after the last message failed with kind '%s', not "
		                         "an end-of-file or reset error", kind);
	return rc;
}

/* "(5.6.c) An implementation MUST hand the application every frame that
 * reached it before the end of the peer's connections [...] however slowly
 * the application reads: no timer may discard them." The client writes
 * 600 messages of 1 KiB, waits for every write to succeed, closes its pipe
 * and exits; the server reads nothing for 3 s more, then reads them one at
 * a time through the adapter with 5 ms between messages (3 s in all), and
 * the read after the last one fails with an end-of-file or reset error.
 * Neither the pause nor the pace may cost a message. 600 KiB is more than
 * the reader's receive window on loopback, so the writer's kernel still
 * holds bytes (and the FIN behind them) while the server pauses, and less
 * than the writer's send buffer holds however the writes are packed into
 * segments: with 1500 x 1 KiB a slow adapter's trickled writes did not
 * always fit, and the case then hung until a liveness bound ended it. */
static twc_outcome_t run_delivered_after_close(const twc_case *c, twc_case_env *env)
{
	enum { N = 600, LEN = 1024, PAUSE_MS = 3000, PACE_US = 5000 };
	twc_session s;
	int rc = begin(&s, env, NULL, NULL);
	twc_agent_msg *msgs = calloc(N, sizeof(*msgs));
	json_int_t *wids = calloc(N, sizeof(*wids));
	if (!msgs || !wids)
		rc = rc ? rc : twc_session_fail(&s, "harness: out of memory");
	for (int i = 0; rc == 0 && i < N; i++) {
		if (parts(&msgs[i], 1, 0)) {
			rc = twc_session_fail(&s, "harness: out of memory");
			break;
		}
		msgs[i].payloads[0].data.len = LEN;
		twc_msg_assign_seeds(&msgs[i], 11000000 + (uint64_t)i * 10);
		wids[i] = twc_session_arm(&s, s.client, json_pack("{s:s,s:s,s:o}", "cmd", "write",
		                                                 "pipe", s.cpipe, "message",
		                                                 twc_msg_json(&msgs[i])));
		rc = wids[i] < 0 ? -1 : 0;
	}
	for (int i = 0; rc == 0 && i < N; i++)
		rc = twc_session_ok_event(&s, s.client, wids[i], "write", NULL);
	if (rc == 0) {
		printf("# %d writes succeeded; the client closes its pipe and exits\n", N);
		rc = finish_one(&s, s.client, s.cpipe);
	}
	if (rc == 0) {
		printf("# the server reads nothing for %d ms\n", PAUSE_MS);
		usleep(PAUSE_MS * 1000);
	}
	int got = 0;
	long long t0 = twc_now_ms();
	for (int i = 0; rc == 0 && i < N; i++, got++) {
		rc = server_read_checked(&s, &msgs[i], i);
		usleep(PACE_US); /* a slow reader: 3 s in all, beyond any grace period */
	}
	printf("# the server read %d of %d messages in %lld ms after the writer left\n", got, N,
	       twc_now_ms() - t0);
	if (rc && got < N)
		rc = twc_session_fail(&s, "only %d of %d acknowledged messages were delivered after the "
		                         "writer closed (first loss at message %d): %s",
		                     got, N, got, s.reason);
	if (rc == 0)
		rc = server_reads_end(&s);
	if (rc == 0)
		rc = finish_one(&s, s.server, s.spipe);
	for (int i = 0; msgs && i < N; i++)
		twc_msg_clear(&msgs[i]);
	free(msgs);
	free(wids);
	return end_session(&s, env, rc);
}

/* The writes of the 5.6.d cases: a 64 MiB tensor the server never reads
 * (more than the socket buffers hold) and three small messages behind it,
 * whose bytes travel on other connections and leave at once. */
enum { QUEUED_WRITES = 4 };

static int queue_behind_stalled(twc_session *s, json_int_t wids[QUEUED_WRITES])
{
	int rc = 0;
	for (int i = 0; rc == 0 && i < QUEUED_WRITES; i++) {
		twc_agent_msg m;
		if (i == 0 ? parts(&m, 0, 1) : parts(&m, i == 3 ? 0 : 1, i == 3 ? 1 : 0))
			return twc_session_fail(s, "harness: out of memory");
		if (i == 0)
			m.tensors[0].data.len = (uint64_t)64 << 20;
		else if (i == 3)
			m.tensors[0].data.len = 1024;
		else
			m.payloads[0].data.len = 1024;
		m.metadata.len = 16;
		twc_msg_assign_seeds(&m, 12000000 + (uint64_t)i * 100);
		wids[i] = twc_session_arm(s, s->client, json_pack("{s:s,s:s,s:o}", "cmd", "write", "pipe",
		                                                 s->cpipe, "message", twc_msg_json(&m)));
		twc_msg_clear(&m);
		rc = wids[i] < 0 ? -1 : 0;
	}
	/* let the transport hand over all it can */
	long long until = twc_now_ms() + 500;
	while (rc == 0 && twc_now_ms() < until)
		twc_adapter_pump(50);
	for (int i = 0; rc == 0 && i < QUEUED_WRITES; i++)
		if (twc_adapter_events_seen(s->client, wids[i]))
			rc = twc_session_fail(s, "write %d completed before the server read anything", i);
	return rc;
}

/* "(5.6.c) An implementation MUST hand the application every frame that
 * reached it before the end of the peer's connections": also when a write
 * of its own waits for that peer. The server writes a message with one
 * 16 MiB payload that the client never reads (it waits on the pipe's
 * descriptor connection); the client writes 3 messages on that same
 * connection, each succeeds, then it closes its pipe and exits. The server
 * must still read all 3, then meet an end-of-file or reset; its big write
 * must fail. */
static twc_outcome_t run_crossed_close(const twc_case *c, twc_case_env *env)
{
	enum { N = 3, BIG = 16 << 20 };
	twc_session s;
	int rc = begin(&s, env, NULL, NULL);
	twc_agent_msg big, msgs[N];
	memset(msgs, 0, sizeof(msgs));
	memset(&big, 0, sizeof(big));
	json_int_t wbig = -1;
	if (rc == 0 && parts(&big, 1, 0))
		rc = twc_session_fail(&s, "harness: out of memory");
	if (rc == 0) {
		big.payloads[0].data.len = BIG;
		twc_msg_assign_seeds(&big, 13000000);
		wbig = twc_session_arm(&s, s.server, json_pack("{s:s,s:s,s:o}", "cmd", "write", "pipe",
		                                              s.spipe, "message", twc_msg_json(&big)));
		rc = wbig < 0 ? -1 : 0;
	}
	long long until = twc_now_ms() + 500; /* the big write stalls: nobody reads it */
	while (rc == 0 && twc_now_ms() < until)
		twc_adapter_pump(50);
	if (rc == 0 && twc_adapter_events_seen(s.server, wbig))
		rc = twc_session_fail(&s, "the 16 MiB write completed before the client read anything");
	for (int i = 0; rc == 0 && i < N; i++) {
		if (parts(&msgs[i], 1, 0)) {
			rc = twc_session_fail(&s, "harness: out of memory");
			break;
		}
		msgs[i].payloads[0].data.len = 1024;
		msgs[i].metadata.len = 16;
		twc_msg_assign_seeds(&msgs[i], 13100000 + (uint64_t)i * 10);
		json_int_t id = twc_session_arm(&s, s.client, json_pack("{s:s,s:s,s:o}", "cmd", "write",
		                                                       "pipe", s.cpipe, "message",
		                                                       twc_msg_json(&msgs[i])));
		rc = id < 0 ? -1 : twc_session_ok_event(&s, s.client, id, "write", NULL);
	}
	if (rc == 0) {
		printf("# %d writes succeeded; the client closes its pipe and exits\n", N);
		rc = finish_one(&s, s.client, s.cpipe);
	}
	if (rc == 0)
		usleep(300 * 1000); /* the server reads late: the end is known by now */
	int got = 0;
	for (int i = 0; rc == 0 && i < N; i++, got++) {
		rc = server_read_checked(&s, &msgs[i], i);
	}
	printf("# the server read %d of %d messages after the client left\n", got, N);
	if (rc && got < N)
		rc = twc_session_fail(&s, "only %d of %d acknowledged messages were delivered while a "
		                         "write of the reader waited for the writer that left: %s",
		                     got, N, s.reason);
	if (rc == 0)
		rc = server_reads_end(&s);
	if (rc == 0)
		rc = expect_error_event(&s, s.server, wbig, "write", NULL, NULL, 0);
	if (rc == 0)
		rc = finish_one(&s, s.server, s.spipe);
	twc_msg_clear(&big);
	for (int i = 0; i < N; i++)
		twc_msg_clear(&msgs[i]);
	return end_session(&s, env, rc);
}

/* "(5.6.d) A write callback MUST report success only if every byte of the
 * message was handed to the transport and every message before it
 * succeeded. Once the pipe fails [...] every write whose callback has not
 * run [...] MUST fail with that error." Here the writer closes its pipe:
 * all four fail with kind 'closed'. */
static twc_outcome_t run_writes_fail_at_close(const twc_case *c, twc_case_env *env)
{
	twc_session s;
	json_int_t wids[QUEUED_WRITES];
	int rc = begin(&s, env, NULL, NULL);
	if (rc == 0)
		rc = queue_behind_stalled(&s, wids);
	json_t *r = rc ? NULL : twc_session_call(&s, s.client, json_pack("{s:s,s:s}", "cmd", "close",
	                                                                "pipe", s.cpipe));
	rc = rc || !r ? -1 : 0;
	json_decref(r);
	for (int i = 0; rc == 0 && i < QUEUED_WRITES; i++)
		rc = expect_error_event(&s, s.client, wids[i], "write", "closed", NULL, 0);
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* The same when the reader is killed with SIGKILL: all four fail with an
 * end-of-file or reset error, none reports success. */
static twc_outcome_t run_writes_fail_at_peer_death(const twc_case *c, twc_case_env *env)
{
	twc_session s;
	json_int_t wids[QUEUED_WRITES];
	int rc = begin(&s, env, NULL, NULL);
	if (rc == 0)
		rc = queue_behind_stalled(&s, wids);
	if (rc == 0) {
		printf("# killing the server with SIGKILL\n");
		twc_adapter_kill(s.server);
	}
	for (int i = 0; rc == 0 && i < QUEUED_WRITES; i++) {
		char kind[32] = "";
		rc = expect_error_event(&s, s.client, wids[i], "write", NULL, kind, sizeof(kind));
		if (rc == 0 && strcmp(kind, "eof") != 0 && strcmp(kind, "reset") != 0)
			rc = twc_session_fail(&s, "write %d failed with kind '%s', not an end-of-file or "
			                         "reset error", i, kind);
	}
	if (rc == 0)
		rc = finish_one(&s, s.client, s.cpipe);
	return end_session(&s, env, rc);
}

/* "(5.8.c) An implementation MAY offer a deadline per operation. When an
 * operation's deadline passes, that operation MUST fail with a timeout
 * error [...] the pipe MUST then fail too, with every other pending
 * operation." A silent peer: the server is stopped with SIGSTOP (its kernel
 * still answers TCP, so only a deadline can bound the wait); the client's
 * context sets operation_timeout_ms (spec/agent.md 6.2). Its pending
 * read_descriptor must fail with kind 'timedout' within the bound plus a
 * margin, and a later write with it too. */
#define OP_TIMEOUT_MS 1500
static twc_outcome_t run_silent_peer_deadline(const twc_case *c, twc_case_env *env)
{
	twc_session s;
	json_t *ctx = json_pack("{s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}],s:i}", "transports", "name",
	                        "uv", "kind", "uv", "priority", 0, "channels", "name", "basic", "kind",
	                        "basic", "priority", 0, "operation_timeout_ms", OP_TIMEOUT_MS);
	int rc = begin(&s, env, ctx, NULL);
	json_decref(ctx);
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_small, 1, false, 13000000);
	if (rc == 0 && twc_adapter_signal(s.server, SIGSTOP) != 0)
		rc = twc_session_fail(&s, "cannot stop the server adapter");
	long long t0 = twc_now_ms();
	json_int_t rd = rc ? -1 : twc_session_arm(&s, s.client, json_pack("{s:s,s:s}", "cmd",
	                                                                "read_descriptor", "pipe",
	                                                                s.cpipe));
	json_t *ev = NULL;
	char err[TWC_REASON_MAX];
	if (rd >= 0 && !(ev = twc_adapter_event(s.client, rd, "read_descriptor",
	                                       OP_TIMEOUT_MS + 6000, err, sizeof(err))))
		rc = twc_session_fail(&s, "the client's read_descriptor was still pending %d ms after "
		                         "it was armed, with operation_timeout_ms %d and the peer "
		                         "stopped: %s",
		                     OP_TIMEOUT_MS + 6000, OP_TIMEOUT_MS, err);
	else if (rd < 0)
		rc = -1;
	const char *kind = ev ? twc_event_error_kind(ev) : NULL;
	if (rc == 0 && (json_is_true(json_object_get(ev, "ok")) || !kind ||
	                strcmp(kind, "timedout") != 0))
		rc = twc_session_fail(&s, "the client's read_descriptor ended with kind '%s' (%s), "
		                         "expected 'timedout'", kind ? kind : "ok",
		                     twc_event_error_text(ev));
	if (rc == 0)
		printf("# read_descriptor failed after %lld ms: %s (%s)\n", twc_now_ms() - t0, kind,
		       twc_event_error_text(ev));
	json_decref(ev);
	/* nothing waits behind it: a later write fails too */
	twc_agent_msg m;
	memset(&m, 0, sizeof(m));
	if (rc == 0 && parts(&m, 1, 0))
		rc = twc_session_fail(&s, "harness: out of memory");
	if (rc == 0) {
		m.payloads[0].data.len = 10;
		twc_msg_assign_seeds(&m, 13100000);
	}
	json_int_t w = rc ? -1 : twc_session_arm(&s, s.client, json_pack("{s:s,s:s,s:o}", "cmd",
	                                                                "write", "pipe", s.cpipe,
	                                                                "message", twc_msg_json(&m)));
	twc_msg_clear(&m);
	rc = rc || w < 0 ? -1 : expect_error_event(&s, s.client, w, "write", "timedout", NULL, 0);
	twc_adapter_signal(s.server, SIGCONT);
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* "(5.8.d) A listener that cannot take a connection for want of a file
 * descriptor SHOULD refuse it promptly [...] and MUST keep serving the pipes
 * it has and accept again once descriptors are free." The server adapter
 * holds every free descriptor (spec/agent.md 6.12); a second client pipe
 * must then fail within REFUSE_MS (it must not wait in the listen queue or
 * for a handshake timeout), the first pipe must still carry messages both
 * ways, and once the descriptors are released a third client pipe must be
 * accepted and carry messages. */
#define REFUSE_MS 10000
static int fds_call(twc_session *s, json_t *free_count, bool *unsupported)
{
	char err[512];
	json_t *r = twc_adapter_request(s->server, json_pack("{s:s,s:o}", "cmd", "fds", "free",
	                                                    free_count),
	                               s->wait_ms, err, sizeof(err));
	if (!r)
		return twc_session_fail(s, "fds: %s", err);
	int rc = 0;
	if (!json_is_true(json_object_get(r, "ok"))) {
		const char *kind = json_string_value(json_object_get(json_object_get(r, "error"),
		                                                     "kind"));
		*unsupported = kind && !strcmp(kind, "unsupported");
		rc = twc_session_fail(s, "fds: %s", twc_event_error_text(r));
	} else {
		printf("# server adapter holds %" JSON_INTEGER_FORMAT " descriptors\n",
		       json_integer_value(json_object_get(r, "held")));
	}
	json_decref(r);
	return rc;
}

static twc_outcome_t run_listener_out_of_fds(const twc_case *c, twc_case_env *env)
{
	twc_session s;
	bool unsupported = false;
	int rc = begin(&s, env, NULL, NULL);
	/* the first pipe carries a message each way first: a server's accept
	 * can come before the client's channel connections arrived (stock
	 * calls it back after its BrochureAnswer), and a connection still to
	 * come would meet the held descriptors (this case failed so, once) */
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_small, 1, false, 13800000);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape_small, 1, false, 13900000);
	if (rc == 0)
		rc = fds_call(&s, json_integer(0), &unsupported);
	if (unsupported) {
		snprintf(env->transport, sizeof(env->transport), "uv");
		twc_session_destroy(&s);
		return twc_case_result(env, TWC_SKIP, "the server's adapter has no 'fds' command");
	}
	/* a second client pipe while the server has no descriptor to spare */
	char p2[64] = "";
	json_t *r = rc ? NULL : twc_session_call(&s, s.client, json_pack("{s:s,s:s}", "cmd",
	                                                                 "connect", "url", s.url));
	if (r)
		snprintf(p2, sizeof(p2), "%s", json_string_value(json_object_get(r, "pipe")) ?: "");
	json_decref(r);
	rc = rc || !r ? -1 : 0;
	json_int_t rd = rc ? -1 : twc_session_arm(&s, s.client, json_pack("{s:s,s:s}", "cmd",
	                                                                "read_descriptor", "pipe",
	                                                                p2));
	long long t0 = twc_now_ms();
	char err[512];
	json_t *ev = rd < 0 ? NULL
	                    : twc_adapter_event(s.client, rd, "read_descriptor", REFUSE_MS, err,
	                                       sizeof(err));
	if (rd >= 0 && !ev)
		rc = twc_session_fail(&s, "a client pipe to a server out of descriptors was still "
		                         "pending after %d ms (it must be refused promptly): %s",
		                     REFUSE_MS, err);
	else if (ev && json_is_true(json_object_get(ev, "ok")))
		rc = twc_session_fail(&s, "a read_descriptor on a pipe the server could not take "
		                         "succeeded");
	else if (ev)
		printf("# the second client pipe failed after %lld ms: %s: %s\n", twc_now_ms() - t0,
		       twc_event_error_kind(ev) ?: "?", twc_event_error_text(ev) ?: "");
	json_decref(ev);
	/* the pipe the server has is still served, while it is short */
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_small, 2, false, 14000000);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape_small, 2, false, 14100000);
	if (rc == 0)
		rc = fds_call(&s, json_null(), &unsupported);
	/* descriptors are free again: a new client pipe is accepted and works */
	if (rc == 0) {
		json_t *cr = twc_session_call(&s, s.client, json_pack("{s:s,s:s}", "cmd", "close",
		                                                     "pipe", s.cpipe));
		json_t *sr = cr ? twc_session_call(&s, s.server, json_pack("{s:s,s:s}", "cmd",
		                                                          "close", "pipe", s.spipe))
		                : NULL;
		rc = cr && sr ? 0 : -1;
		json_decref(cr);
		json_decref(sr);
	}
	if (rc == 0)
		rc = twc_session_connect(&s, NULL);
	if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_small, 2, false, 14200000);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape_small, 2, false, 14300000);
	if (rc == 0)
		rc = twc_session_finish(&s);
	return from_session(&s, env, rc);
}

/* TcpExt ListenOverflows of this network namespace (the adapters listen on
 * loopback here): connections the kernel dropped from a full listen queue,
 * each costing its client a SYN retransmission (1 s or more). -1 when the
 * counter cannot be read. */
static long long listen_overflows(void)
{
	FILE *f = fopen("/proc/net/netstat", "r");
	if (!f)
		return -1;
	static char names[8192], values[8192];
	long long v = -1;
	while (v < 0 && fgets(names, sizeof(names), f) && fgets(values, sizeof(values), f)) {
		if (strncmp(names, "TcpExt:", 7) != 0)
			continue;
		char *sn, *sv;
		char *n = strtok_r(names, " \n", &sn), *x = strtok_r(values, " \n", &sv);
		for (; n && x; n = strtok_r(NULL, " \n", &sn), x = strtok_r(NULL, " \n", &sv))
			if (strcmp(n, "ListenOverflows") == 0)
				v = atoll(x);
	}
	fclose(f);
	return v;
}

/* Message i of the storm: its metadata length (1 + i) names the client pipe
 * it came from, whichever accepted pipe it arrives on. */
static int shape_storm(int i, twc_agent_msg *m)
{
	if (parts(m, 1, 0))
		return -1;
	m->metadata.len = 1 + (uint64_t)i;
	m->payloads[0].data.len = 64;
	return 0;
}

/* Pumps the adapters until every event of ids[0..n) has arrived on `a` or
 * the deadline passes; returns how many arrived. */
static int await_events(twc_adapter *a, const json_int_t *ids, int n, long long deadline)
{
	for (;;) {
		int seen = 0;
		for (int i = 0; i < n; i++)
			seen += ids[i] >= 0 && twc_adapter_events_seen(a, ids[i]) > 0;
		if (seen == n || twc_now_ms() >= deadline)
			return seen;
		twc_adapter_pump(50);
	}
}

enum { STORM = 200, STORM_MS = 60000, PROMPT_MS = 1000 };

/* Waits for the storm's accepts until all have arrived, the deadline
 * passes, or every client write has ended (succeeded or failed) and no
 * accept came for 2 s (the rest are lost: their clients gave up). Returns
 * the accepts seen. */
static int await_storm(twc_session *s, const json_int_t *acc, const json_int_t *wr,
                       long long deadline)
{
	int last = -1;
	long long since = twc_now_ms();
	for (;;) {
		int accepted = 0, ended = 0;
		for (int i = 0; i < STORM; i++) {
			accepted += twc_adapter_events_seen(s->server, acc[i]) > 0;
			ended += wr[i] >= 0 && twc_adapter_events_seen(s->client, wr[i]) > 0;
		}
		long long now = twc_now_ms();
		if (accepted != last)
			last = accepted, since = now;
		if (accepted == STORM || now >= deadline || (ended == STORM && now - since >= 2000))
			return accepted;
		twc_adapter_pump(20);
	}
}

/* "(5.8.f) A listener MUST NOT lose a pipe to a burst of clients." STORM
 * client pipes are connected at once (every connect request is sent before
 * the first answer is read, and each pipe's write is queued before its
 * handshake can have completed) while the server has STORM accepts armed.
 * Every pipe must be accepted and deliver its message intact; a pipe whose
 * accept never comes, whose write fails or whose message does not arrive
 * within STORM_MS is lost. The listen-queue overflows seen meanwhile are
 * printed (a figure, not a verdict: each costs a client a SYN
 * retransmission, not its pipe). With arg "prompt" (5.8.f's SHOULD) the
 * accepts must also all arrive within PROMPT_MS of the first connect, that
 * is before the kernel's first SYN retransmission (1 s). */
static twc_outcome_t run_connect_storm(const twc_case *c, twc_case_env *env)
{
	twc_session s;
	int rc = begin(&s, env, NULL, NULL);
	json_int_t *acc = malloc(STORM * sizeof(*acc)), *wr = malloc(STORM * sizeof(*wr));
	json_int_t *req = malloc(STORM * sizeof(*req));
	json_int_t *rd = malloc(STORM * sizeof(*rd)), *rdd = malloc(STORM * sizeof(*rdd));
	char(*spipe)[64] = calloc(STORM, sizeof(*spipe));
	twc_agent_msg *msgs = calloc(STORM, sizeof(*msgs));
	bool *got = calloc(STORM, sizeof(*got));
	if (!acc || !wr || !req || !rd || !rdd || !spipe || !msgs || !got)
		rc = rc ? rc : twc_session_fail(&s, "harness: out of memory");
	for (int i = 0; i < STORM && acc && wr && req && rd && rdd; i++)
		acc[i] = wr[i] = req[i] = rd[i] = rdd[i] = -1;
	for (int i = 0; rc == 0 && i < STORM; i++) {
		if (shape_storm(i, &msgs[i]))
			rc = twc_session_fail(&s, "harness: out of memory");
		twc_msg_assign_seeds(&msgs[i], 15000000 + (uint64_t)i * 10);
	}
	for (int i = 0; rc == 0 && i < STORM; i++) {
		acc[i] = twc_session_arm(&s, s.server, json_pack("{s:s,s:s}", "cmd", "accept",
		                                                "listener", s.lid));
		rc = acc[i] < 0 ? -1 : 0;
	}
	long long ov0 = listen_overflows(), t0 = twc_now_ms();
	char err[512];
	for (int i = 0; rc == 0 && i < STORM; i++) {
		req[i] = twc_adapter_send(s.client, json_pack("{s:s,s:s}", "cmd", "connect", "url",
		                                             s.url), err, sizeof(err));
		if (req[i] < 0)
			rc = twc_session_fail(&s, "connect %d: %s", i, err);
	}
	for (int i = 0; rc == 0 && i < STORM; i++) {
		json_t *r = twc_adapter_response(s.client, req[i], s.wait_ms, err, sizeof(err));
		const char *p = json_string_value(json_object_get(r, "pipe"));
		if (!r || !json_is_true(json_object_get(r, "ok")) || !p)
			rc = twc_session_fail(&s, "connect %d was refused at once: %s", i,
			                     r ? twc_event_error_text(r) : err);
		else
			wr[i] = twc_session_arm(&s, s.client, json_pack("{s:s,s:s,s:o}", "cmd", "write",
			                                               "pipe", p, "message",
			                                               twc_msg_json(&msgs[i])));
		rc = rc || wr[i] < 0 ? -1 : 0;
		json_decref(r);
	}
	long long deadline = t0 + STORM_MS;
	bool prompt = c->arg && !strcmp(c->arg, "prompt");
	int accepted = rc ? 0 : await_storm(&s, acc, wr, prompt ? t0 + PROMPT_MS : deadline);
	long long t_acc = twc_now_ms() - t0;
	if (rc == 0 && prompt && accepted < STORM)
		rc = twc_session_fail(&s, "the server had accepted %d of %d client pipes connected at "
		                         "once %lld ms after the first connect: the others wait for a "
		                         "SYN retransmission at best (listen-queue overflows "
		                         "meanwhile: %lld)",
		                     accepted, STORM, t_acc, ov0 >= 0 ? listen_overflows() - ov0 : -1);
	/* every accepted pipe: which client it is, and its message intact */
	int delivered = 0, lost_writes = 0;
	char first_loss[1024] = "";
	for (int j = 0; rc == 0 && j < STORM; j++) {
		json_t *ev = NULL;
		if (!twc_adapter_events_seen(s.server, acc[j]))
			continue;
		if (twc_session_event(&s, s.server, acc[j], "accept", &ev))
			break;
		const char *p = json_string_value(json_object_get(ev, "pipe"));
		if (json_is_true(json_object_get(ev, "ok")) && p) {
			snprintf(spipe[j], sizeof(spipe[j]), "%s", p);
			rd[j] = twc_session_arm(&s, s.server, json_pack("{s:s,s:s}", "cmd",
			                                               "read_descriptor", "pipe", p));
			rc = rd[j] < 0 ? -1 : 0;
		} else if (!first_loss[0]) {
			snprintf(first_loss, sizeof(first_loss), "an accept failed: %s (%s)",
			         twc_event_error_text(ev), twc_event_error_kind(ev) ?: "?");
		}
		json_decref(ev);
	}
	if (rc == 0)
		(void)await_events(s.server, rd, STORM, deadline);
	for (int j = 0; rc == 0 && j < STORM; j++) {
		json_t *ev = NULL;
		char why[1024];
		if (rd[j] < 0 || !twc_adapter_events_seen(s.server, rd[j]))
			continue;
		if (twc_session_event(&s, s.server, rd[j], "read_descriptor", &ev))
			break;
		const json_t *md = json_object_get(json_object_get(ev, "descriptor"), "metadata");
		json_int_t i = json_integer_value(json_object_get(md, "len")) - 1;
		if (!json_is_true(json_object_get(ev, "ok"))) {
			if (!first_loss[0])
				snprintf(first_loss, sizeof(first_loss), "an accepted pipe's read_descriptor "
				         "failed: %s (%s)", twc_event_error_text(ev),
				         twc_event_error_kind(ev) ?: "?");
		} else if (i < 0 || i >= STORM || got[i]) {
			rc = twc_session_fail(&s, "an accepted pipe carried metadata of length %" JSON_INTEGER_FORMAT
			                     ": no client (or a second pipe of one) sent it", i + 1);
		} else if (twc_msg_check_descriptor(&msgs[i], json_object_get(ev, "descriptor"), why,
		                                    sizeof(why))) {
			rc = twc_session_fail(&s, "client pipe %" JSON_INTEGER_FORMAT ": %s", i, why);
		} else {
			json_t *rv = NULL;
			rdd[j] = twc_session_arm(&s, s.server, json_pack("{s:s,s:s}", "cmd", "read",
			                                                "pipe", spipe[j]));
			rc = rdd[j] < 0 || twc_session_ok_event(&s, s.server, rdd[j], "read", &rv) ? -1 : 0;
			if (rc == 0 && twc_msg_check_read(&msgs[i], rv, why, sizeof(why)))
				rc = twc_session_fail(&s, "client pipe %" JSON_INTEGER_FORMAT ": %s", i, why);
			json_decref(rv);
			got[i] = rc == 0;
			delivered += rc == 0;
		}
		json_decref(ev);
	}
	for (int i = 0; rc == 0 && i < STORM; i++) {
		json_t *ev = NULL;
		if (!twc_adapter_events_seen(s.client, wr[i]) && got[i])
			(void)await_events(s.client, &wr[i], 1, twc_now_ms() + s.wait_ms);
		if (!twc_adapter_events_seen(s.client, wr[i])) {
			lost_writes++;
			continue;
		}
		if (twc_session_event(&s, s.client, wr[i], "write", &ev))
			break;
		if (!json_is_true(json_object_get(ev, "ok"))) {
			lost_writes++;
			if (!first_loss[0])
				snprintf(first_loss, sizeof(first_loss), "client pipe %d's write failed: %s "
				         "(%s)", i, twc_event_error_text(ev), twc_event_error_kind(ev) ?: "?");
		}
		json_decref(ev);
	}
	long long ov1 = listen_overflows();
	if (rc == 0) {
		printf("# %d client pipes at once: %d accepted in %lld ms, %d delivered their message, "
		       "%d writes failed or pending; listen-queue overflows meanwhile: ",
		       STORM, accepted, t_acc, delivered, lost_writes);
		if (ov0 >= 0 && ov1 >= 0)
			printf("%lld\n", ov1 - ov0);
		else
			printf("unknown (/proc/net/netstat unreadable)\n");
	}
	if (rc == 0 && (delivered != STORM || lost_writes))
		rc = twc_session_fail(&s, "%d of %d pipes connected at once were lost (%d accepted, %d "
		                         "delivered their message, %d writes failed or pending after %d "
		                         "ms)%s%s",
		                     STORM - delivered, STORM, accepted, delivered, lost_writes,
		                     STORM_MS, first_loss[0] ? "; first: " : "", first_loss);
	if (rc == 0)
		rc = twc_session_finish(&s);
	for (int i = 0; msgs && i < STORM; i++)
		twc_msg_clear(&msgs[i]);
	free(got), free(msgs), free(spipe), free(acc), free(wr), free(req), free(rd), free(rdd);
	return from_session(&s, env, rc);
}

/* ---- declarations ---------------------------------------------------------------------- */

static const twc_case cases[] = {
	{.id = "semantic.ordering", .battery = true, .suite = "semantic", .section = "wire.md 3.12 (3.12.a, 3.12.c)",
	 .level = TWC_MUST, .needs = "",
	 .description = "200 messages of distinct sizes each way arrive in write order",
	 .requirement = "(3.12.a) D carries, per direction, descriptor0, payloads0..., descriptor1, "
	                "payloads1..., strictly in message order. (3.12.c) A receiver MUST deliver "
	                "messages to the application in the order their Descriptors arrived.",
	 .timeout_s = 300, .run = run_ordering, .cross = true},
	{.id = "semantic.ordering_behind_reply", .battery = true, .suite = "semantic",
	 .section = "wire.md 3.12 (3.12.a), wire.md 3.11 (3.11.a)", .level = TWC_MUST, .needs = "",
	 .description = "40 messages each way, every other one waiting for its DescriptorReply, "
	                "tensors above 64 KiB: tensors arrive in write order",
	 .requirement = "(3.12.a) D carries, per direction, descriptor0, payloads0..., descriptor1, "
	                "payloads1..., strictly in message order; a message that waits for its "
	                "DescriptorReply (3.11.a) holds back the tensors of the messages behind it.",
	 .timeout_s = 120, .run = run_ordering_behind_reply, .cross = true},
	{.id = "semantic.eager", .battery = true, .suite = "semantic",
	 .section = "wire.md 8.4 (8.4.a, 8.4.b, 8.4.c, 8.4.e)", .level = TWC_MUST, .needs = "",
	 .description = "eager on at both ends, then off at either: messages mixing empty, small, "
	                "64 KiB and 64 KiB + 1 tensors, with and without a target device, arrive "
	                "intact both ways, and info says eager is used exactly when both are on",
	 .requirement = "(8.4.a) each end MUST treat the pipe as eager exactly when it was asked "
	                "and acknowledged and every device pair is CPU to CPU; (8.4.b) an eager "
	                "tensor travels as one frame on D after the payloads; (8.4.c) a "
	                "DescriptorReply lists only the tensors that are not eager and lack a "
	                "target device; (8.4.e) a pipe that did not agree follows 3.10 and 3.11. "
	                "SKIP where an IUT does not implement eager (spec/agent.md 6.2).",
	 .timeout_s = 120, .run = run_eager, .cross = true},
	{.id = "semantic.noreply", .battery = true, .suite = "semantic",
	 .section = "wire.md 8.5 (8.5.a, 8.5.b, 8.5.c)", .level = TWC_MUST, .needs = "",
	 .description = "noreply on at both ends, then off at either: the messages of "
	                "semantic.eager arrive intact both ways, and info says noreply is used "
	                "exactly when both are on",
	 .requirement = "(8.5.a) each end MUST treat the pipe as noreply exactly when it was asked "
	                "and acknowledged and every device pair is CPU to CPU; (8.5.b) then no "
	                "DescriptorReply is sent and a sender MUST send each tensor without a "
	                "target device to the receiver's CPU at once; (8.5.c) a pipe that did not "
	                "agree follows 3.11. SKIP where an IUT does not implement noreply "
	                "(spec/agent.md 6.2).",
	 .timeout_s = 120, .run = run_noreply, .cross = true},
	{.id = "semantic.writes_in_flight", .battery = true, .suite = "semantic", .section = "wire.md 3.12 (3.12.a)",
	 .level = TWC_MUST, .needs = "",
	 .description = "1000 writes of 64 KiB tensors queued before the first read",
	 .requirement = "(3.12.a) D carries, per direction, descriptor0, payloads0..., descriptor1, "
	                "payloads1..., strictly in message order; with many writes in flight before "
	                "any read (issue 3 item 5)",
	 .timeout_s = 300, .run = run_in_flight, .cross = true},
	{.id = "semantic.both_sides_write", .battery = true, .suite = "semantic", .section = "wire.md 3.1",
	 .level = TWC_MUST, .needs = "",
	 .description = "both ends queue 8 x 4 MiB messages before either reads",
	 .requirement = "After its first frame every connection is symmetric. (wire.md 3.1) - "
	                "both sides writing at once (issue 3 item 5)",
	 .timeout_s = 300, .run = run_both_write, .cross = true},
	{.id = "semantic.packet_limit", .battery = true, .suite = "semantic",
	 .section = "wire.md 2.5 (2.5.a)", .level = TWC_MUST, .needs = "",
	 .description = "a message with 3 MiB of metadata: refused alone on a ring transport (its "
	                "Descriptor is over a 2 MiB packet), carried on uv; the next messages travel",
	 .requirement = "(2.5.a) A sender MUST check each message against what its pipe can carry "
	                "(the transport's largest frame and packet, each channel's largest tensor) "
	                "before it sends any part of it, and fail that message alone with an error "
	                "naming the part and the limit; the pipe, the messages after it and the peer "
	                "are not affected.",
	 .timeout_s = 120, .run = run_packet_limit, .cross = true},
	{.id = "semantic.descriptor_then_close", .battery = true, .suite = "semantic", .section = "agent.md 6.10",
	 .level = TWC_MUST, .needs = "",
	 .description = "read_descriptor without read, then close: every callback once, clean exit",
	 .requirement = "Every callback fires exactly once, with an error if the object closes "
	                "first. (STYLE.md)",
	 .timeout_s = 120, .run = run_descriptor_then_close, .cross = true},
	{.id = "semantic.close_with_pending", .battery = true, .suite = "semantic", .section = "agent.md 6.10",
	 .level = TWC_MUST, .needs = "",
	 .description = "closing a pipe and a listener fails their pending write, read_descriptor "
	                "and accept with kind 'closed', once each",
	 .requirement = "When the object closes (or fails) first, each pending callback fires with "
	                "an error (TW_ERR_CLOSED for a local close) (tensorwire.h); Every callback "
	                "fires exactly once (STYLE.md)",
	 .timeout_s = 120, .run = run_close_with_pending, .cross = true},
	{.id = "semantic.peer_gone", .battery = true, .suite = "semantic", .section = "wire.md 5.6 (5.6.a)",
	 .level = TWC_MUST, .needs = "",
	 .description = "a peer that closes, and one killed with SIGKILL: the pending read fails "
	                "once, no hang",
	 .requirement = "(5.6.a) An implementation MUST treat the end of any connection of a pipe "
	                "as the end of the pipe and fail its pending operations with an end-of-file "
	                "or connection-reset error.",
	 .timeout_s = 120, .run = run_peer_gone, .cross = true},
	{.id = "semantic.close_vs_kill_distinct", .battery = true, .suite = "semantic",
	 .section = "wire.md 5.6, wire.md 8.2 (8.2.c, 8.2.d)",
	 .level = TWC_SHOULD, .needs = "",
	 .description = "a graceful close and a SIGKILL of the peer give different error kinds",
	 .requirement = "a graceful close versus a peer killed with SIGKILL (distinguishable "
	                "errors) (issue 3 item 5); (8.2.c) end-of-file after a goodbye, (8.2.d) "
	                "connection reset without one",
	 .timeout_s = 120, .run = run_peer_gone, .cross = true, .arg = "distinct"},
	{.id = "semantic.delivered_after_close", .battery = true, .suite = "semantic",
	 .section = "wire.md 5.6 (5.6.c)", .level = TWC_MUST, .needs = "",
	 .description = "600 acknowledged messages, then the writer closes and exits; the reader "
	                "waits 3 s, reads them all, slowly, then gets eof",
	 .requirement = "(5.6.c) An implementation MUST hand the application every frame that "
	                "reached it before the end of the peer's connections [...] however slowly "
	                "the application reads: no timer may discard them.",
	 .timeout_s = 300, .run = run_delivered_after_close, .cross = true},
	{.id = "semantic.crossed_close", .battery = true, .suite = "semantic",
	 .section = "wire.md 5.6 (5.6.c)", .level = TWC_MUST, .needs = "",
	 .description = "the server's 16 MiB write waits for the client, which writes 3 messages "
	                "on the same connection, closes and exits; the server reads all 3, then "
	                "eof, and its write fails",
	 .requirement = "(5.6.c) An implementation MUST hand the application every frame that "
	                "reached it before the end of the peer's connections [...] however slowly "
	                "the application reads: no timer may discard them.",
	 .timeout_s = 120, .run = run_crossed_close, .cross = true},
	{.id = "semantic.writes_fail_at_close", .battery = true, .suite = "semantic",
	 .section = "wire.md 5.6 (5.6.d)", .level = TWC_MUST, .needs = "",
	 .description = "3 small writes queued behind a stalled 64 MiB one; the writer closes: all "
	                "4 fail with 'closed', none succeeds",
	 .requirement = "(5.6.d) A write callback MUST report success only if every byte of the "
	                "message was handed to the transport and every message before it "
	                "succeeded. Once the pipe fails [...] every write whose callback has not "
	                "run [...] MUST fail with that error.",
	 .timeout_s = 120, .run = run_writes_fail_at_close, .cross = true},
	{.id = "semantic.writes_fail_at_peer_death", .battery = true, .suite = "semantic",
	 .section = "wire.md 5.6 (5.6.d)", .level = TWC_MUST, .needs = "",
	 .description = "3 small writes queued behind a stalled 64 MiB one; the reader is killed: "
	                "all 4 fail with eof or reset, none succeeds",
	 .requirement = "(5.6.d) Once the pipe fails or the peer is known to be gone, every write "
	                "whose callback has not run, queued, partly sent, or fully sent behind one "
	                "that was not, MUST fail with that error.",
	 .timeout_s = 120, .run = run_writes_fail_at_peer_death, .cross = true},
	{.id = "semantic.silent_peer_deadline", .suite = "semantic",
	 .section = "wire.md 5.8 (5.8.c)", .level = TWC_SHOULD, .needs = "",
	 .description = "the peer is stopped (SIGSTOP); a read_descriptor under operation_timeout_ms "
	                "1500 fails 'timedout' in time, and a later write too",
	 .requirement = "(5.8.c) An implementation MAY offer a deadline per operation. When an "
	                "operation's deadline passes, that operation MUST fail with a timeout "
	                "error [...] the pipe MUST then fail too, with every other pending "
	                "operation.",
	 .timeout_s = 120, .run = run_silent_peer_deadline, .cross = true},
	{.id = "semantic.listener_out_of_fds", .suite = "semantic",
	 .section = "wire.md 5.8 (5.8.d)", .level = TWC_MUST, .needs = "",
	 .description = "the server holds every free descriptor: a new client pipe fails within "
	                "10 s, the existing pipe still works, and after the release a new pipe is "
	                "accepted",
	 .requirement = "(5.8.d) A listener that cannot take a connection for want of a file "
	                "descriptor SHOULD refuse it promptly [...] and MUST keep serving the pipes "
	                "it has and accept again once descriptors are free.",
	 .timeout_s = 120, .run = run_listener_out_of_fds, .cross = true},
	{.id = "semantic.connect_storm", .suite = "semantic",
	 .section = "wire.md 5.8 (5.8.f)", .level = TWC_MUST, .needs = "",
	 .description = "200 client pipes connect at once, each with a write queued before its "
	                "handshake: all are accepted and every message arrives intact",
	 .requirement = "(5.8.f) A listener MUST NOT lose a pipe to a burst of clients connecting "
	                "at once: each gets a working pipe, late at worst.",
	 .timeout_s = 180, .run = run_connect_storm, .cross = true},
	{.id = "semantic.connect_storm_prompt", .suite = "semantic",
	 .section = "wire.md 5.8 (5.8.f)", .level = TWC_SHOULD, .needs = "",
	 .description = "200 client pipes connect at once: all are accepted within 1 s, before any "
	                "client needs a SYN retransmission",
	 .requirement = "(5.8.f) It SHOULD take connections as fast as they arrive [...] and ask for "
	                "a backlog as large as the system allows, since each connection the kernel "
	                "drops from a full queue costs its client a SYN retransmission (1 s or more).",
	 .timeout_s = 180, .run = run_connect_storm, .cross = true, .arg = "prompt"},
	{.id = "semantic.channel_priority", .suite = "semantic", .section = "wire.md 3.5 (3.5.a)",
	 .level = TWC_MUST, .needs = "",
	 .description = "with channels basic (0) and basic_hi (10) on both ends, basic_hi is chosen",
	 .requirement = "Channels: the server walks its own channels from highest to lowest "
	                "priority. For each channel the brochure also names, and for each pair [...] "
	                "not already taken by a higher-priority channel [...] it records "
	                "channelForDevicePair[(L,R)] = channel. (3.5.a) A server MUST choose the "
	                "transport and channels as described",
	 .timeout_s = 120, .run = run_channel_priority, .cross = true},
	{.id = "semantic.transport_priority", .suite = "semantic", .section = "wire.md 3.5 (3.5.a), wire.md 3.6 (3.6.b), wire.md 3.7 (3.7.b)",
	 .level = TWC_MUST, .needs = "",
	 .description = "connected through uv, a server that also listens on uv_hi (10) moves the "
	                "pipe there",
	 .requirement = "Transport: the server walks its own transports from highest to lowest "
	                "priority and chooses the first one that (1) its listener is listening on, "
	                "(2) the brochure names, and (3) whose domain descriptor equals the client's. "
	                "(3.6.b) [...] a replacement descriptor connection under key 0 if and only "
	                "if the transport changed. (3.7.b) If the transport changed, a client MUST "
	                "open a connection to address [...]",
	 .timeout_s = 120, .run = run_transport_priority, .cross = true},
};

const twc_case *twc_suite_semantic(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
