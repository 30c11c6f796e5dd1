/*
 * rdma.c - the rdma suite: the verbs hazards of the field (issue 12 item 6;
 * field failures T19, T24, T30 and hazard H2 of the shared references;
 * spec/wire.md 2.4.3.d and 2.4.5), each a host whose RDMA devices are
 * arranged the way the hazard needs, with both adapters on it.
 *
 * On simverbs (the default fabric: the runner runs under simverbs-run, so
 * both adapters load its libibverbs) each case writes its device
 * configuration to a file and starts both adapters with SIMVERBS_CONFIG
 * naming it. Both get contexts with ibv and basic only, and move 4 MiB
 * tensors both ways (twice the ring, so it wraps; 64 times a small
 * max_msg_sz). A case passes when every byte arrives over ibv and both
 * adapters end cleanly. `fork_stream` instead streams 1 MiB messages while
 * the client forks (T26), with simverbs' strict fork model in both
 * adapters' environment. `srq_churn` then carries more pipes between the
 * same two contexts, each ending as the peer's last writes land, on a
 * device that writes receive completions 2 ms late (as hardware may, after
 * the queue pair went to ERR); `srq_post_fails` the same where every 7th
 * receive posted to the queue fails. Where the adapters find no usable verbs
 * device at all (no simverbs, no HCA), the case is a SKIP with the reason
 * they gave.
 *
 * On a real rxe or HCA host the configuration file means nothing: set
 * TWC_RDMA_NATIVE=1 and the cases run on the devices as they are (the
 * soft-RoCE issue arranges rxe devices to match).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case.h"
#include "session.h"
#include "suites.h"

#define MiB (UINT64_C(1) << 20)

typedef struct rdma_spec {
	const char *config; /* simverbs configuration (INI text) */
	uint64_t tensor_len;
	int messages; /* per direction */
	const char *env; /* more of the adapters' environment ("NAME=value "), or NULL */
	int forks;       /* > 0: the client forks this many children while it sends */
	int churn;       /* > 0: this many more pipes after the first (churn_pipes) */
} rdma_spec;

static uint64_t g_len;

static int shape_one(int index, twc_agent_msg *m)
{
	(void)index;
	return twc_msg_one_tensor(m, 16, g_len);
}

/* The client forks sp->forks children, each writing every page of a 64 MiB
 * heap block (the agent's "forks", spec/agent.md 6.14), while it sends
 * messages of sp->tensor_len to the server, four at a time, every byte
 * checked on arrival: at least sp->messages, and on until the last child
 * was reaped (at most 100 rounds). 1: the adapter cannot fork (SKIP). */
static int fork_while_sending(twc_session *s, const rdma_spec *sp)
{
	json_t *r = twc_session_call(s, s->client, json_pack("{s:s,s:i,s:i}", "cmd", "forks",
	                                                    "children", sp->forks, "heap_mb", 64));
	if (!r)
		return strstr(s->reason, "unsupported") ? 1 : -1;
	json_int_t id = json_integer_value(json_object_get(r, "id"));
	json_decref(r);
	int sent = 0, rc = 0;
	for (int round = 0; rc == 0 && round < 100; round++) {
		if (sent >= sp->messages && twc_adapter_events_seen(s->client, id) > 0)
			break;
		rc = twc_session_transfer(s, true, shape_one, 4, false,
		                          (UINT64_C(3) << 40) + (uint64_t)round * 16);
		sent += 4;
	}
	printf("# %d messages of %llu bytes sent while the client forked %d children\n", sent,
	       (unsigned long long)sp->tensor_len, sp->forks);
	json_t *ev;
	if (rc == 0 && (rc = twc_session_ok_event(s, s->client, id, "forks", &ev)) == 0)
		json_decref(ev);
	return rc;
}

/* Closes one end of the session's pipe; its id is forgotten (finish skips it). */
static int close_pipe(twc_session *s, twc_adapter *a, char *pipe)
{
	int rc = twc_session_close_pipe(s, a, pipe);
	pipe[0] = '\0';
	return rc;
}

/* After the first pipe (closed here): sp->churn more between the same two
 * contexts, one after the other. Each moves a message each way; then one
 * end (the server on even pipes, the client on odd ones) writes three
 * more and the other end closes its pipe at once, so that their bytes land
 * on connections that are going; then the writer closes too, and its
 * writes may end either way. Every pipe must connect and move its
 * messages: the receives a going connection took from a shared receive
 * queue must come back to it, or the queue runs dry and a later pipe waits
 * for a receive forever. */
static int churn_pipes(twc_session *s, const rdma_spec *sp)
{
	int rc = close_pipe(s, s->client, s->cpipe) || close_pipe(s, s->server, s->spipe) ? -1 : 0;
	for (int i = 0; rc == 0 && i < sp->churn; i++) {
		uint64_t seed = (UINT64_C(5) << 40) + (uint64_t)i * 64;
		rc = twc_session_connect(s, NULL);
		if (rc == 0)
			rc = twc_session_transfer(s, true, shape_one, 1, false, seed);
		if (rc == 0)
			rc = twc_session_transfer(s, false, shape_one, 1, false, seed + 16);
		twc_adapter *writer = i % 2 ? s->client : s->server;
		twc_adapter *goer = i % 2 ? s->server : s->client;
		char *wpipe = i % 2 ? s->cpipe : s->spipe, *gpipe = i % 2 ? s->spipe : s->cpipe;
		json_int_t wids[3];
		for (int k = 0; rc == 0 && k < 3; k++) {
			twc_agent_msg m;
			if (shape_one(k, &m))
				return twc_session_fail(s, "harness: out of memory");
			twc_msg_assign_seeds(&m, seed + 32 + (uint64_t)k * 4);
			wids[k] = twc_session_arm(s, writer, json_pack("{s:s,s:s,s:o}", "cmd", "write",
			                                               "pipe", wpipe, "message",
			                                               twc_msg_json(&m)));
			twc_msg_clear(&m);
			rc = wids[k] < 0 ? -1 : 0;
		}
		if (rc == 0)
			rc = close_pipe(s, goer, gpipe);
		if (rc == 0)
			rc = close_pipe(s, writer, wpipe);
		for (int k = 0; rc == 0 && k < 3; k++) { /* delivered or failed: either */
			json_t *ev = NULL;
			rc = twc_session_event(s, writer, wids[k], "write", &ev);
			json_decref(ev);
		}
		if (rc) { /* the reason is set: it gets the pipe's number in front */
			char why[TWC_REASON_MAX];
			snprintf(why, sizeof(why), "%s", s->reason);
			snprintf(s->reason, sizeof(s->reason), "pipe %d of %d after the first: %.3900s", i + 1,
			         sp->churn, why);
		}
	}
	if (rc == 0)
		printf("# %d more pipes between the same contexts, each ending as the peer's last "
		       "writes landed\n",
		       sp->churn);
	return rc;
}

static twc_outcome_t run_rdma(const twc_case *c, twc_case_env *env)
{
	const rdma_spec *sp = c->arg;
	const char *scmd = env->peer_cmd ? env->peer_cmd : env->iut_cmd;
	const char *sname = env->peer_cmd ? env->peer_name : env->iut_name;
	const char *why;
	if (twc_cmd_unavailable(env->iut_cmd, &why) || twc_cmd_unavailable(scmd, &why))
		return twc_case_result(env, TWC_SKIP, "an adapter is not built here: %s", why);
	char path[PATH_MAX] = "", prefix[2 * PATH_MAX] = "";
	const char *native = getenv("TWC_RDMA_NATIVE");
	if (native && !strcmp(native, "1") && sp->churn)
		return twc_case_result(env, TWC_SKIP,
		                       "TWC_RDMA_NATIVE=1: the case needs a shared receive queue of 8 "
		                       "receives and, for some, posts to it that fail (a simverbs "
		                       "configuration); a real device's holds hundreds, which %d "
		                       "pipes cannot use up", sp->churn);
	if (!(native && !strcmp(native, "1")) &&
	    twc_env_file("SIMVERBS_CONFIG", c->id, sp->config, path, sizeof(path), prefix,
	                 sizeof(prefix)) != 0)
		return twc_case_result(env, TWC_ERROR, "cannot write the simverbs configuration %s",
		                       path);
	static char ccmd[4 * PATH_MAX], scmd2[4 * PATH_MAX];
	/* more of the environment: after the configuration's "env NAME=path ",
	 * or behind an "env" of its own (a runner may put "exec" in front) */
	const char *more = sp->env ? sp->env : "";
	const char *env_word = more[0] && !prefix[0] ? "env " : "";
	snprintf(ccmd, sizeof(ccmd), "%s%s%s%s", env_word, prefix, more, env->iut_cmd);
	snprintf(scmd2, sizeof(scmd2), "%s%s%s%s", env_word, prefix, more, scmd);
	printf("# client: %s\n# server: %s\n", ccmd, scmd2);
	json_t *ctx = json_pack("{s:[{s:s,s:s,s:i}],s:[{s:s,s:s,s:i}]}", "transports", "name", "ibv",
	                        "kind", "ibv", "priority", 0, "channels", "name", "basic", "kind",
	                        "basic", "priority", 0);
	json_t *urls = json_pack("[s]", "ibv://127.0.0.1:0");
	g_len = sp->tensor_len;
	twc_session s;
	/* 4 MiB move in well under a second here: a peer that makes no
	 * progress for 15 s is stuck (an accept waiting for a hello that a
	 * dead queue pair never delivers), not slow */
	int wait_ms = env->wait_ms < 15000 ? env->wait_ms : 15000;
	int rc = twc_session_start(&s, ccmd, scmd2, env->iut_name, sname, wait_ms, ctx, urls);
	json_decref(ctx);
	json_decref(urls);
	if (rc == 0)
		rc = twc_session_connect(&s, NULL);
	if (rc == 0 && sp->forks)
		rc = fork_while_sending(&s, sp);
	else if (rc == 0)
		rc = twc_session_transfer(&s, true, shape_one, sp->messages, false, UINT64_C(3) << 40);
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape_one, sp->messages, false, UINT64_C(4) << 40);
	if (rc == 0)
		rc = twc_session_check_info(&s, "ibv", "basic");
	if (rc == 0 && sp->churn)
		rc = churn_pipes(&s, sp);
	snprintf(env->transport, sizeof(env->transport), "%s", s.transport);
	snprintf(env->channel, sizeof(env->channel), "%s", s.channel);
	if (rc == 0)
		rc = twc_session_finish(&s);
	twc_session_destroy(&s);
	if (path[0])
		unlink(path);
	if (rc == 1)
		return twc_case_result(env, TWC_SKIP, "the client adapter cannot fork: %s", s.reason);
	if (rc != 0)
		return twc_case_result(env, TWC_FAIL, "%s", s.reason);
	return TWC_PASS;
}

static const rdma_spec first_port_down = {
	.config = "[device simrdma0]\nport1.state = down\n[device simrdma1]\n",
	.tensor_len = 4 * MiB, .messages = 2};
static const rdma_spec gid_link_local_first = {
	.config = "[device simrdma0]\n"
	          "port1.gids = fe80::1/v1, fail, , ::ffff:127.0.0.1/v2\n",
	.tensor_len = 4 * MiB, .messages = 2};
static const rdma_spec no_srq = {
	.config = "[device simrdma0]\nmax_srq = 0\n", .tensor_len = 4 * MiB, .messages = 2};
static const rdma_spec small_max_msg = {
	.config = "[device simrdma0]\nport1.max_msg_sz = 65536\n", .tensor_len = 4 * MiB,
	.messages = 2};
static const rdma_spec small_queues = {
	.config = "[device simrdma0]\nmax_qp_wr = 16\nmax_srq_wr = 16\nmax_cqe = 64\n",
	.tensor_len = 4 * MiB, .messages = 2};

static const rdma_spec srq_churn = {
	.config = "[device simrdma0]\nmax_srq_wr = 8\n[limits]\nrecv_cqe_lag_us = 2000\n",
	.tensor_len = 64 << 10, .messages = 2,
	.churn = 60};

static const rdma_spec srq_post_fails = {
	.config = "[device simrdma0]\nmax_srq_wr = 8\n[hazards]\nsrq_post_fail_every = 7\n",
	.tensor_len = 64 << 10, .messages = 2,
	.churn = 30};

/* the pre-5.13 kernel's hazard (simverbs' strict fork model, docs/simverbs.md) */
static const rdma_spec fork_stream = {
	.config = "[device simrdma0]\n", .tensor_len = 1 * MiB, .messages = 60,
	.env = "SIMVERBS_FORK=strict ", .forks = 20};

#define RDMA(id_, sec_, desc_, req_, spec_)                                                        \
	{.id = "rdma." id_, .suite = "rdma", .section = sec_, .level = TWC_MUST, .needs = "rdma",  \
	 .description = desc_, .requirement = req_, .timeout_s = 45, .run = run_rdma,               \
	 .cross = true, .arg = &(spec_)}

static const twc_case cases[] = {
	RDMA("first_port_down", "wire.md 2.4.5",
	     "two devices, the first one's port down: 4 MiB tensors each way arrive over ibv on the "
	     "second (T19, tensorpipe#455)",
	     "2.4.5: only ports whose state is ACTIVE; the best rank over every device and port wins",
	     first_port_down),
	RDMA("gid_link_local_first", "wire.md 2.4.5",
	     "GID 0 a link-local RoCE v1 entry, GID 1 failing with EINVAL, GID 2 empty, GID 3 a RoCE "
	     "v2 IPv4-mapped address: 4 MiB tensors each way arrive over ibv (T24)",
	     "2.4.5: RoCE v2 with an IPv4-mapped address first [...] An entry that cannot be read "
	     "(EINVAL, an empty slot) is skipped and the search goes on",
	     gid_link_local_first),
	RDMA("no_srq", "wire.md 2.4.3",
	     "a device without a shared receive queue (max_srq 0, ibv_create_srq fails): 4 MiB "
	     "tensors each way arrive over ibv (T30)",
	     "2.4.3: receive buffers [...] to a shared receive queue when the device has one and to "
	     "each queue pair otherwise; the wire is the same",
	     no_srq),
	RDMA("small_max_msg", "wire.md 2.4.3 (2.4.3.d)",
	     "a port whose max_msg_sz is 64 KiB: 4 MiB tensors each way arrive over ibv (H2: RDMA "
	     "writes split to the port's limit)",
	     "(2.4.3.d) A sender MUST NOT exceed the port's maximum message size with one RDMA write",
	     small_max_msg),
	RDMA("small_queues", "wire.md 2.4.3 (2.4.3.d)",
	     "a device allowing 16 work requests per queue and 64 completion-queue entries: 4 MiB "
	     "tensors each way arrive over ibv",
	     "(2.4.3.d) [...] nor its send queue depth with outstanding work requests, nor let its "
	     "completion queue overflow",
	     small_queues),
	RDMA("srq_churn", "wire.md 2.4.3 (2.4.3.h)",
	     "a shared receive queue of 8 receives: 60 more pipes between the same two contexts, "
	     "one after the other, each closed while the peer's last writes land; every pipe "
	     "connects and moves its messages",
	     "(2.4.3.h) Before it destroys a queue pair on a shared receive queue, a receiver MUST "
	     "[...] drain its completion queue and post a receive for every receive completion "
	     "found there",
	     srq_churn),
	RDMA("srq_post_fails", "wire.md 2.4.3 (2.4.3.h)",
	     "a shared receive queue of 8 receives where every 7th receive posted to it fails with "
	     "ENOMEM: 64 KiB tensors each way, then 30 more pipes as in srq_churn; "
	     "every pipe connects and moves its messages",
	     "(2.4.3.h) A post that fails MUST be retried later, not dropped, and does not fail the "
	     "connection that happened to make it",
	     srq_post_fails),
	RDMA("fork_stream", "wire.md 2.4.5",
	     "the client streams 1 MiB messages over ibv while it forks 20 children that each write "
	     "to every page of a 64 MiB heap block, on a fabric where memory registered without "
	     "fork handling stays with the pre-fork pages (T26): every byte arrives",
	     "2.4.5: before the first memory registration the library turns fork handling on "
	     "(ibv_fork_init) unless the verbs library reports it unneeded",
	     fork_stream),
};

const twc_case *twc_suite_rdma(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
