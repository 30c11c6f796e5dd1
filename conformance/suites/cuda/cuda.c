/*
 * cuda.c - the cuda suite (tensorwire issue 14 item 3; spec/wire.md 4.6 and
 * 6.3; field failures T03, T08, T19, T20): device tensors between two
 * adapters, each a process of its own, on whatever CUDA driver the runner
 * finds (simcuda's under simcuda-run, a GPU host's otherwise: capability
 * "cuda"; the cases that set simcuda's modes need "simcuda").
 *
 * Adapters place a tensor the harness puts on "cuda:N" in memory of that
 * device and checksum what they read from a host copy (spec/agent.md 5.2).
 * An implementation that cannot register a CUDA channel here says so when
 * its context is made, and the case is a SKIP with its reason (stock
 * TensorPipe as Debian builds it has no CUDA channels; ours has cuda_gdr
 * wherever a verbs device can register device memory: simverbs over
 * simcuda here, nvidia-peermem on a GPU host).
 *
 *   device_pair     cuda_basic: tensors of 1, 8, 31, 32, 33, 64 bytes and
 *                   1 MiB + 1 from cuda:0 to cuda:0, each way
 *   ipc             cuda_ipc (with cuda_basic below it): the same and a
 *                   20 MiB tensor (more than one staging slot)
 *   host_device     cuda_basic: from cpu:0 into cuda:0, and back
 *   disjoint_devices the two processes see different GPUs (two containers
 *                   given one GPU each, T03): with cuda_ipc registered on
 *                   both, device tensors still arrive (never cuda_ipc
 *                   between devices one side cannot see)
 *   ipc_asymmetric  the server sees both GPUs, the client one: both ends
 *                   select alike, never cuda_ipc for a device one side
 *                   cannot see (the pipe would fail as inconsistent)
 *   ipc_containers  the server in a container of its own (pid, ipc, /proc,
 *                   /dev/shm), the same GPUs: cuda_ipc is selected and no
 *                   handle opens; with the proof (8.3) the tensors still
 *                   arrive, inline (T03)
 *   unusable_*      CUDA present but unusable (T08: a stub driver, no
 *                   device, none visible, no driver on the library path):
 *                   the CUDA channels are reported not viable, and a CPU
 *                   pipe of the same contexts carries its tensors
 *   gdr_small       cuda_gdr: tensors of 1 to 64 bytes mixed with 1 MiB ones
 *                   (T20: a receive of 32 bytes or less must not land in
 *                   device memory by a CPU copy)
 *   gdr_chunked     cuda_gdr on a port whose max_msg_sz is 64 KiB, a 4 MiB
 *                   tensor (T19: sends chunked to the smaller limit)
 *   gdr_nic_counts  cuda_gdr between a side with two NICs and a side with
 *                   one: the set-up matrix is not square, so rows and
 *                   columns (and the NIC indices per tensor) must be read
 *                   the way stock writes them
 *   gdr_first_port_down the first NIC's port is down: GPUs use the second
 *   gdr_no_peer_memory  the NIC cannot register GPU memory: cuda_gdr is
 *                   not viable (with the reason), CPU pipes work
 *   gdr_peer_killed the reader is killed while device tensors wait for it:
 *                   the writes fail (end of file or reset), nothing hangs
 *   ipc_writer_killed the writer is killed with its copy into a cuda_ipc
 *                   staging slot queued: the read fails, nothing hangs
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "case.h"
#include "session.h"
#include "suites.h"

#define MiB (UINT64_C(1) << 20)

typedef struct cuda_spec {
	const char *channels;   /* comma-separated kinds, highest priority first */
	const char *src, *dst;  /* devices of every tensor */
	const uint64_t *sizes;  /* tensor lengths of each message, 0-terminated */
	const char *server_env; /* prefixed to the server's command ("" none) */
	const char *client_env;
	const char *unusable;   /* set: T08, the CUDA channels must be reported not viable */
	const char *simverbs;   /* a simverbs configuration for the adapters, or NULL */
	bool server_contained;  /* the server in a container of its own (T03) */
} cuda_spec;

static const cuda_spec *g_spec;

static int shape_cuda(int index, twc_agent_msg *m)
{
	(void)index;
	memset(m, 0, sizeof(*m));
	size_t n = 0;
	while (g_spec->sizes[n])
		n++;
	if (!(m->tensors = calloc(n, sizeof(*m->tensors))))
		return -1;
	m->num_tensors = n;
	m->metadata.len = 8;
	for (size_t i = 0; i < n; i++) {
		m->tensors[i].data.len = g_spec->sizes[i];
		(void)twc_agent_device_parse(g_spec->src, &m->tensors[i].source_device);
		m->tensors[i].has_target_device = true;
		(void)twc_agent_device_parse(g_spec->dst, &m->tensors[i].target_device);
	}
	return 0;
}

static int shape_cpu(int index, twc_agent_msg *m)
{
	(void)index;
	return twc_msg_one_tensor(m, 16, 256 * 1024);
}

/* The context request: uv, basic at the bottom, the spec's channels above
 * it in the order given. */
static json_t *context_for(const cuda_spec *sp, bool tolerate)
{
	json_t *chans = json_array();
	json_array_append_new(chans, json_pack("{s:s,s:s,s:i}", "name", "basic", "kind", "basic",
	                                       "priority", 0));
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", sp->channels);
	int prio = 100;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
		json_array_append_new(chans, json_pack("{s:s,s:s,s:i}", "name", t, "kind", t,
		                                       "priority", prio--));
	json_t *ctx = json_pack("{s:[{s:s,s:s,s:i}],s:o}", "transports", "name", "uv", "kind", "uv",
	                        "priority", 0, "channels", chans);
	if (tolerate)
		json_object_set_new(ctx, "tolerate_skipped", json_true());
	return ctx;
}

/* LD_LIBRARY_PATH without the folders that hold a libcuda.so.1 (the "no
 * driver" variant of T08), into out; -1 when the system's own folders would
 * still offer one (a GPU host). */
static int path_without_cuda(char *out, size_t len)
{
	const char *lp = getenv("LD_LIBRARY_PATH");
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", lp ? lp : "");
	out[0] = '\0';
	for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char f[PATH_MAX];
		snprintf(f, sizeof(f), "%s/libcuda.so.1", d);
		if (access(f, F_OK) == 0)
			continue;
		size_t n = strlen(out);
		snprintf(out + n, len - n, "%s%s", n ? ":" : "", d);
	}
	static const char *const sys[] = { "/lib/x86_64-linux-gnu/libcuda.so.1",
		                           "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
		                           "/usr/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1" };
	for (size_t i = 0; i < sizeof(sys) / sizeof(sys[0]); i++)
		if (access(sys[i], F_OK) == 0)
			return -1;
	return 0;
}

/* The server's command and name (the peer's in a cross run); NULL, or why
 * an adapter cannot run here. */
static const char *adapters_missing(const twc_case_env *env, const char **scmd,
                                    const char **sname)
{
	const char *why = NULL;
	*scmd = env->peer_cmd ? env->peer_cmd : env->iut_cmd;
	*sname = env->peer_cmd ? env->peer_name : env->iut_name;
	if (twc_cmd_unavailable(env->iut_cmd, &why) || twc_cmd_unavailable(*scmd, &why))
		return why;
	return NULL;
}

/* Starts the case's two adapters (client ccmd, server scmd named sname)
 * with the spec's context and connects a pipe: 0, or -1 with s->reason. */
static int cuda_session(twc_session *s, const cuda_spec *sp, twc_case_env *env,
                        const char *ccmd, const char *scmd, const char *sname)
{
	json_t *ctx = context_for(sp, sp->unusable != NULL);
	g_spec = sp;
	int rc = twc_session_start(s, ccmd, scmd, env->iut_name, sname, env->wait_ms, ctx, NULL);
	json_decref(ctx);
	if (rc == 0)
		rc = twc_session_connect(s, NULL);
	return rc;
}

static twc_outcome_t run_cuda(const twc_case *c, twc_case_env *env)
{
	const cuda_spec *sp = c->arg;
	const char *scmd, *sname, *why;
	if ((why = adapters_missing(env, &scmd, &sname)))
		return twc_case_result(env, TWC_SKIP, "an adapter is not built here: %s", why);
	char senv[3 * PATH_MAX], cenv[3 * PATH_MAX], conf[PATH_MAX] = "";
	snprintf(senv, sizeof(senv), "%s", sp->server_env);
	snprintf(cenv, sizeof(cenv), "%s", sp->client_env);
	if (sp->unusable && !strcmp(sp->unusable, "no driver")) {
		char lp[4096];
		if (path_without_cuda(lp, sizeof(lp)) != 0)
			return twc_case_result(env, TWC_SKIP,
			                       "this host's own library folders hold a libcuda.so.1: no "
			                       "process here can be without a driver");
		snprintf(senv, sizeof(senv), "env LD_LIBRARY_PATH=%s ", lp);
		snprintf(cenv, sizeof(cenv), "env LD_LIBRARY_PATH=%s ", lp);
	}
	if (sp->server_contained) {
		/* as a container without --ipc=host: pid and ipc namespaces (and a /proc)
		 * of its own (the server is pid 1 there) and a /dev/shm of its own */
		char pre[2 * PATH_MAX], reason[512];
		twc_outcome_t o = twc_contain_prefix("--pid --fork --kill-child --ipc --mount --mount-proc",
		                                     "--shm-size 64m", pre, sizeof(pre), reason,
		                                     sizeof(reason));
		if (o != TWC_PASS)
			return twc_case_result(env, o, "%s", reason);
		size_t n = strlen(senv);
		snprintf(senv + n, sizeof(senv) - n, "%s", pre);
	}
	if (sp->simverbs) {
		char pre[PATH_MAX + 40];
		if (twc_env_file("SIMVERBS_CONFIG", c->id, sp->simverbs, conf, sizeof(conf), pre,
		                 sizeof(pre)) != 0)
			return twc_case_result(env, TWC_ERROR, "cannot write %s", conf);
		size_t n = strlen(senv);
		snprintf(senv + n, sizeof(senv) - n, "%s", pre);
		n = strlen(cenv);
		snprintf(cenv + n, sizeof(cenv) - n, "%s", pre);
	}
	static char ccmd[5 * PATH_MAX], scmd2[5 * PATH_MAX];
	snprintf(ccmd, sizeof(ccmd), "%s%s", cenv, env->iut_cmd);
	snprintf(scmd2, sizeof(scmd2), "%s%s", senv, scmd);
	printf("# client: %s\n# server: %s\n", ccmd, scmd2);
	twc_session s;
	int rc = cuda_session(&s, sp, env, ccmd, scmd2, sname);
	if (rc == 0 && sp->unusable) {
		/* every CUDA channel asked for was found not viable (T08), and the
		 * pipe still works on the CPU */
		char buf[128];
		snprintf(buf, sizeof(buf), "%s", sp->channels);
		for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && rc == 0;
		     t = strtok_r(NULL, ",", &save)) {
			char key[40];
			snprintf(key, sizeof(key), ",%s,", t);
			if (!strstr(s.server_skipped, key))
				rc = twc_session_fail(&s, "with CUDA unusable (%s) the server registered %s "
				                      "as viable (it reported not viable: '%s')",
				                      sp->unusable, t, s.server_skipped);
		}
		if (rc == 0)
			rc = twc_session_transfer(&s, true, shape_cpu, 2, false, UINT64_C(7) << 40);
		if (rc == 0)
			rc = twc_session_transfer(&s, false, shape_cpu, 2, false, UINT64_C(8) << 40);
	} else if (rc == 0) {
		rc = twc_session_transfer(&s, true, shape_cuda, 2, false, UINT64_C(5) << 40);
		if (rc == 0)
			rc = twc_session_transfer(&s, false, shape_cuda, 2, false, UINT64_C(6) << 40);
	}
	snprintf(env->transport, sizeof(env->transport), "%s", s.transport);
	snprintf(env->channel, sizeof(env->channel), "%s", s.channel);
	if (rc == 0)
		rc = twc_session_finish(&s);
	twc_session_destroy(&s);
	if (conf[0])
		unlink(conf);
	if (rc != 0)
		return twc_case_result(env, TWC_FAIL, "%s", s.reason);
	return TWC_PASS;
}

static const uint64_t small_and_mib[] = { 1, 8, 31, 32, 33, 64, MiB + 1, 0 };
static const uint64_t ipc_sizes[] = { 1, 31, 32, 33, MiB + 1, 20 * MiB, 0 };
static const uint64_t gdr_small_sizes[] = { 1, MiB, 8, 31, MiB, 32, 33, 64, MiB, 0 };
static const uint64_t four_mib[] = { 4 * MiB, 0 };

static const cuda_spec device_pair = { "cuda_basic", "cuda:0", "cuda:0", small_and_mib, "", "",
	                               NULL, NULL, false };
static const cuda_spec ipc = { "cuda_ipc,cuda_basic", "cuda:0", "cuda:0", ipc_sizes, "", "",
	                       NULL, NULL, false };
static const cuda_spec host_to_device = { "cuda_basic", "cpu:0", "cuda:0", small_and_mib, "", "",
	                                  NULL, NULL, false };
static const cuda_spec device_to_host = { "cuda_basic", "cuda:0", "cpu:0", small_and_mib, "", "",
	                                  NULL, NULL, false };
static const cuda_spec disjoint = { "cuda_ipc,cuda_basic", "cuda:0", "cuda:0", ipc_sizes,
	                            "env CUDA_VISIBLE_DEVICES=0 ", "env CUDA_VISIBLE_DEVICES=1 ", NULL,
	                            NULL, false };
/* T03 as containers meet it: the same GPUs, but the server in its own pid
 * and ipc namespaces with its own /dev/shm (docker without --ipc=host).
 * The descriptors match (one boot, different pids, the same UUIDs), so
 * cuda_ipc is selected, and no IPC handle opens across (simcuda, as the
 * driver, reaches the exporter's memory through names the other side
 * cannot see). */
static const cuda_spec ipc_containers = { "cuda_ipc,cuda_basic", "cuda:0", "cuda:0", ipc_sizes, "",
	                                  "", NULL, NULL, true };
/* Visibility one way only: the server sees both GPUs, the client only the
 * second, and tensors go between the server's first GPU and the client's
 * only one. The server sees the client's device and the two reach each
 * other; the client does not see the server's. Both ends select (spec
 * 3.7), so they must decide alike, or the pipe fails. */
static const cuda_spec ipc_asymmetric = { "cuda_ipc,cuda_basic", "cuda:0", "cuda:0", ipc_sizes,
	                                  "", "env CUDA_VISIBLE_DEVICES=1 ", NULL, NULL, false };
static const cuda_spec unusable_stub = { "cuda_ipc,cuda_basic", NULL, NULL, NULL,
	                                 "env SIMCUDA_MODE=stub ", "env SIMCUDA_MODE=stub ",
	                                 "a stub driver", NULL, false };
static const cuda_spec unusable_no_device = { "cuda_ipc,cuda_basic", NULL, NULL, NULL,
	                                      "env SIMCUDA_MODE=no_device ",
	                                      "env SIMCUDA_MODE=no_device ", "no device", NULL, false };
static const cuda_spec unusable_none_visible = { "cuda_ipc,cuda_basic", NULL, NULL, NULL,
	                                         "env CUDA_VISIBLE_DEVICES= ",
	                                         "env CUDA_VISIBLE_DEVICES= ", "none visible",
	                                         NULL, false };
static const cuda_spec unusable_no_driver = { "cuda_ipc,cuda_basic", NULL, NULL, NULL, "", "",
	                                      "no driver", NULL, false };
static const cuda_spec gdr_small = { "cuda_gdr", "cuda:0", "cuda:0", gdr_small_sizes, "", "",
	                             NULL, NULL, false };
static const cuda_spec gdr_chunked = { "cuda_gdr", "cuda:0", "cuda:0", four_mib, "", "", NULL,
	                               "[device simrdma0]\nport1.max_msg_sz = 65536\n", false };
static const uint64_t nic_sizes[] = { 1, MiB + 1, 33, 0 };
static const cuda_spec gdr_nic_counts = { "cuda_gdr", "cuda:1", "cuda:0", nic_sizes,
	                                  "env TW_IB_HCA==simrdma1 ", "", NULL,
	                                  "[device simrdma0]\n[device simrdma1]\n", false };
static const cuda_spec gdr_no_peer_memory = { "cuda_gdr", NULL, NULL, NULL, "", "",
	                                      "no peer-memory client",
	                                      "[hazards]\npeer_memory = off\n", false };
static const cuda_spec gdr_first_port_down = { "cuda_gdr", "cuda:0", "cuda:0", nic_sizes, "", "",
	                                       NULL,
	                                       "[device simrdma0]\nport1.state = down\n"
	                                       "[device simrdma1]\n", false };

/* The peer dies with device tensors under way (cuda_gdr): the client
 * writes two messages of an 8 MiB cuda:0 tensor while the server reads
 * nothing, the server is killed with SIGKILL, and both writes must fail
 * with an end-of-file or reset error (no hang, no success, every callback
 * once), and the client must end cleanly. */
static const uint64_t eight_mib[] = { 8 * MiB, 0 };
static const cuda_spec gdr_killed = { "cuda_gdr", "cuda:0", "cuda:0", eight_mib, "", "", NULL,
	                              NULL, false };

/* The end whose peer was killed closes its pipe and shuts down: it must
 * end cleanly (no hang) with every callback once. */
static int killed_survivor_ends(twc_session *s, twc_adapter *a, const char *pipe)
{
	json_t *r = twc_session_call(s, a, json_pack("{s:s,s:s}", "cmd", "close", "pipe", pipe));
	json_decref(r);
	r = r ? twc_session_call(s, a, json_pack("{s:s}", "cmd", "shutdown")) : NULL;
	json_decref(r);
	char err[TWC_REASON_MAX];
	if (!r)
		return -1;
	if (twc_adapter_finish(a, 30000, err, sizeof(err)) ||
	    twc_adapter_check_callbacks(a, err, sizeof(err)))
		return twc_session_fail(s, "%s", err);
	return 0;
}

/* The event `name` of a, armed as id, must be a failure of kind end of
 * file or reset: its peer was killed. */
static int killed_fails(twc_session *s, twc_adapter *a, json_int_t id, const char *name)
{
	json_t *ev = NULL;
	if (twc_session_event(s, a, id, name, &ev))
		return -1;
	const char *kind = twc_event_error_kind(ev);
	int rc = 0;
	if (json_is_true(json_object_get(ev, "ok")))
		rc = twc_session_fail(s, "the %s succeeded after its peer was killed", name);
	else if (!kind || (strcmp(kind, "eof") != 0 && strcmp(kind, "reset") != 0))
		rc = twc_session_fail(s, "the %s failed with kind '%s' (%s), not an end-of-file or "
		                      "reset error", name, kind ? kind : "?", twc_event_error_text(ev));
	else
		printf("# the %s failed as it should: %s (%s)\n", name, kind, twc_event_error_text(ev));
	json_decref(ev);
	return rc;
}

static twc_outcome_t run_gdr_killed(const twc_case *c, twc_case_env *env)
{
	const cuda_spec *sp = c->arg;
	const char *scmd, *sname, *why;
	if ((why = adapters_missing(env, &scmd, &sname)))
		return twc_case_result(env, TWC_SKIP, "an adapter is not built here: %s", why);
	twc_session s;
	int rc = cuda_session(&s, sp, env, env->iut_cmd, scmd, sname);
	json_int_t w[2] = { -1, -1 };
	for (int i = 0; rc == 0 && i < 2; i++) {
		twc_agent_msg m;
		if (shape_cuda(i, &m))
			rc = twc_session_fail(&s, "harness: out of memory");
		if (rc == 0) {
			twc_msg_assign_seeds(&m, (UINT64_C(7) << 40) + (uint64_t)i * 100);
			w[i] = twc_session_arm(&s, s.client, json_pack("{s:s,s:s,s:o}", "cmd", "write",
			                                                "pipe", s.cpipe, "message",
			                                                twc_msg_json(&m)));
			rc = w[i] < 0 ? -1 : 0;
		}
		twc_msg_clear(&m);
	}
	long long until = twc_now_ms() + 500;
	while (rc == 0 && twc_now_ms() < until)
		twc_adapter_pump(50);
	for (int i = 0; rc == 0 && i < 2; i++)
		if (twc_adapter_events_seen(s.client, w[i]))
			rc = twc_session_fail(&s, "write %d completed before the server read anything", i);
	if (rc == 0) {
		printf("# killing the server with SIGKILL\n");
		twc_adapter_kill(s.server);
	}
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = killed_fails(&s, s.client, w[i], "write");
	if (rc == 0)
		rc = killed_survivor_ends(&s, s.client, s.cpipe);
	char reason[TWC_REASON_MAX];
	snprintf(reason, sizeof(reason), "%s", s.reason);
	twc_session_destroy(&s);
	if (rc != 0)
		return twc_case_result(env, TWC_FAIL, "%s", reason);
	return TWC_PASS;
}

/* The writer dies mid-transfer (cuda_ipc): every copy of the client (the
 * writer) takes 2 s, so it is killed with SIGKILL while its copy into a
 * staging slot is queued and its Descriptor is out; the server's read must
 * fail with an end-of-file or reset error (an event the dead process
 * recorded may never complete: a reader whose copy waits for it on the GPU
 * hangs for good), and the server must end cleanly. */
static const uint64_t twenty_mib[] = { 20 * MiB, 0 };
static const cuda_spec ipc_writer_killed = { "cuda_ipc,cuda_basic", "cuda:0", "cuda:0",
	                                     twenty_mib, "",
	                                     "env SIMCUDA_COPY_DELAY_US=2000000 ", NULL, NULL,
	                                     false };

static twc_outcome_t run_ipc_writer_killed(const twc_case *c, twc_case_env *env)
{
	const cuda_spec *sp = c->arg;
	const char *scmd, *sname, *why;
	if ((why = adapters_missing(env, &scmd, &sname)))
		return twc_case_result(env, TWC_SKIP, "an adapter is not built here: %s", why);
	static char ccmd[2 * PATH_MAX];
	snprintf(ccmd, sizeof(ccmd), "%s%s", sp->client_env, env->iut_cmd);
	twc_session s;
	int rc = cuda_session(&s, sp, env, ccmd, scmd, sname);
	twc_agent_msg m;
	memset(&m, 0, sizeof(m));
	if (rc == 0 && shape_cuda(0, &m))
		rc = twc_session_fail(&s, "harness: out of memory");
	json_int_t w = -1, rd = -1;
	if (rc == 0) {
		twc_msg_assign_seeds(&m, UINT64_C(9) << 40);
		w = twc_session_arm(&s, s.client, json_pack("{s:s,s:s,s:o}", "cmd", "write", "pipe",
		                                           s.cpipe, "message", twc_msg_json(&m)));
		rc = w < 0 ? -1 : 0;
	}
	twc_msg_clear(&m);
	if (rc == 0) {
		json_int_t d = twc_session_arm(&s, s.server, json_pack("{s:s,s:s}", "cmd",
		                                                      "read_descriptor", "pipe", s.spipe));
		rc = d < 0 || twc_session_ok_event(&s, s.server, d, "read_descriptor", NULL) ? -1 : 0;
	}
	if (rc == 0) {
		rd = twc_session_arm(&s, s.server, json_pack("{s:s,s:s}", "cmd", "read", "pipe",
		                                            s.spipe));
		rc = rd < 0 ? -1 : 0;
	}
	long long until = twc_now_ms() + 300;
	while (rc == 0 && twc_now_ms() < until)
		twc_adapter_pump(50);
	if (rc == 0 && twc_adapter_events_seen(s.server, rd))
		rc = twc_session_fail(&s, "the read completed before the writer's first copy (2 s) "
		                      "could have ended");
	if (rc == 0) {
		printf("# killing the client (the writer) with SIGKILL\n");
		twc_adapter_kill(s.client);
		rc = killed_fails(&s, s.server, rd, "read");
	}
	if (rc == 0)
		rc = killed_survivor_ends(&s, s.server, s.spipe);
	char reason[TWC_REASON_MAX];
	snprintf(reason, sizeof(reason), "%s", s.reason);
	snprintf(env->transport, sizeof(env->transport), "%s", s.transport);
	snprintf(env->channel, sizeof(env->channel), "%s", s.channel);
	twc_session_destroy(&s);
	if (rc != 0)
		return twc_case_result(env, TWC_FAIL, "%s", reason);
	return TWC_PASS;
}

#define CUDA(id_, sec_, level_, needs_, desc_, req_, spec_)                                       \
	{.id = "cuda." id_, .suite = "cuda", .section = sec_, .level = level_, .needs = needs_,    \
	 .description = desc_, .requirement = req_, .timeout_s = 90, .run = run_cuda, .cross = true, \
	 .arg = &(spec_)}

static const twc_case cases[] = {
	CUDA("device_pair", "wire.md 4.6.2", TWC_MUST, "cuda",
	     "cuda_basic between two processes: device tensors of 1, 8, 31, 32, 33, 64 bytes and "
	     "1 MiB + 1 from cuda:0 to cuda:0, each way, arrive byte-exact on cuda:0",
	     "4.6.2: cuda_basic stages device tensors through pinned host memory over a CPU channel",
	     device_pair),
	CUDA("ipc", "wire.md 4.6.3", TWC_MUST, "cuda",
	     "cuda_ipc (over cuda_basic) between two processes of one host: device tensors up to "
	     "20 MiB (three staging slots) arrive byte-exact, each way",
	     "4.6.3: the receiver copies out of the sender's staging slot after the slot's event",
	     ipc),
	CUDA("host_to_device", "wire.md 4.6.2", TWC_MUST, "cuda",
	     "cuda_basic: tensors written from cpu:0 arrive in cuda:0 memory of the other process",
	     "4.6.2: cuda_basic serves (cpu, cuda) pairs", host_to_device),
	CUDA("device_to_host", "wire.md 4.6.2", TWC_MUST, "cuda",
	     "cuda_basic: tensors written from cuda:0 arrive in cpu:0 memory of the other process",
	     "4.6.2: cuda_basic serves (cuda, cpu) pairs", device_to_host),
	CUDA("disjoint_devices", "wire.md 6.3", TWC_MUST, "cuda",
	     "the two processes see different GPUs (CUDA_VISIBLE_DEVICES 0 and 1, as two "
	     "containers given one GPU each) and both register cuda_ipc: device tensors still "
	     "arrive, neither process aborts (T03)",
	     "6.3: cuda_ipc is offered for a device pair only when the peer's device is visible "
	     "here; otherwise the pipe uses another channel",
	     disjoint),
	CUDA("ipc_containers", "wire.md 8.3", TWC_MUST, "cuda",
	     "the server in a container of its own (pid and ipc namespaces, its own /dev/shm), "
	     "both seeing the same GPUs: the descriptors select cuda_ipc, no IPC handle opens "
	     "across, and device tensors up to 20 MiB still arrive, each way (T03)",
	     "8.3: with proof agreed, a cuda_ipc receiver that cannot open the sender's staging "
	     "area says so, and that direction carries its tensors inline",
	     ipc_containers),
	CUDA("ipc_asymmetric", "wire.md 8.3", TWC_MUST, "cuda",
	     "the server sees both GPUs, the client only the second, tensors between the server's "
	     "first and the client's only GPU: both ends select alike (no cuda_ipc for a device "
	     "the other side cannot see) and device tensors arrive, each way",
	     "6.3, 3.7: cuda_ipc pairs two devices only when each side sees the other's; both "
	     "ends select, and must agree",
	     ipc_asymmetric),
	CUDA("unusable_stub", "wire.md 4.6", TWC_MUST, "simcuda",
	     "a stub CUDA driver (every call CUDA_ERROR_STUB_LIBRARY): the CUDA channels are "
	     "reported not viable, and CPU tensors still move both ways (T08)",
	     "4.6: a CUDA channel that cannot work here is not registered, with the reason; the "
	     "context and its CPU pipes are unaffected",
	     unusable_stub),
	CUDA("unusable_no_device", "wire.md 4.6", TWC_MUST, "simcuda",
	     "cuInit fails with CUDA_ERROR_NO_DEVICE: the CUDA channels are reported not viable, "
	     "and CPU tensors still move both ways (T08)",
	     "4.6: the same", unusable_no_device),
	CUDA("unusable_none_visible", "wire.md 4.6", TWC_MUST, "cuda",
	     "CUDA_VISIBLE_DEVICES empty: the CUDA channels are reported not viable, and CPU "
	     "tensors still move both ways (T08)",
	     "4.6: the same", unusable_none_visible),
	CUDA("unusable_no_driver", "wire.md 4.6", TWC_MUST, "simcuda",
	     "no libcuda.so.1 on the library path: the CUDA channels are reported not viable, "
	     "and CPU tensors still move both ways (T08)",
	     "4.6: the same", unusable_no_driver),
	CUDA("gdr_small", "wire.md 4.6.4", TWC_MUST, "cuda,rdma",
	     "cuda_gdr: device tensors of 1, 8, 31, 32, 33 and 64 bytes mixed with 1 MiB ones "
	     "arrive byte-exact, each way (T20: on mlx5 a receive of 32 bytes or less is "
	     "scattered into the completion and copied by the CPU)",
	     "4.6.4: tensors small enough to go through the completion never land in device "
	     "memory by a CPU copy",
	     gdr_small),
	CUDA("gdr_chunked", "wire.md 4.6.4", TWC_MUST, "cuda,rdma",
	     "cuda_gdr on a port whose max_msg_sz is 64 KiB: a 4 MiB device tensor arrives, each "
	     "way (T19)",
	     "4.6.4: every transfer is chunked to the smaller of the two sides' max_msg_sz",
	     gdr_chunked),
	CUDA("gdr_nic_counts", "wire.md 4.6.4", TWC_MUST, "cuda,rdma",
	     "cuda_gdr between a process that uses two NICs (one per GPU) and one that uses a "
	     "single NIC (TW_IB_HCA): tensors from cuda:1 arrive on cuda:0, each way",
	     "4.6.4: HandshakeSetupInfo has one row per NIC of its writer and one entry per NIC "
	     "of its reader; Descriptor and ReadyToReceive name the NIC of each side",
	     gdr_nic_counts),
	CUDA("gdr_first_port_down", "wire.md 4.6.4", TWC_MUST, "cuda,rdma",
	     "cuda_gdr on a host whose first NIC's port is down: every GPU is paired with the "
	     "second NIC and device tensors arrive, each way (stock pairs by PCI path alone and "
	     "uses a NIC whatever its port state, T31)",
	     "4.6.4.b: a GPU's NIC is chosen among NICs with an active port",
	     gdr_first_port_down),
	CUDA("gdr_no_peer_memory", "wire.md 4.6.4", TWC_MUST, "cuda,rdma,simcuda",
	     "a verbs device that cannot register GPU memory (no peer-memory client such as "
	     "nvidia-peermem): cuda_gdr is reported not viable with the reason, and CPU tensors "
	     "still move both ways",
	     "4.6.4: a GPU is offered for GPUDirect RDMA only once its NIC registered its memory",
	     gdr_no_peer_memory),
	{.id = "cuda.gdr_peer_killed", .suite = "cuda", .section = "wire.md 4.6.4, 5.6",
	 .level = TWC_MUST, .needs = "cuda,rdma",
	 .description = "cuda_gdr: the reader is killed with SIGKILL while two writes of an 8 MiB "
	                "device tensor wait for it: both fail with an end-of-file or reset error, "
	                "and the writer ends cleanly with every callback once",
	 .requirement = "5.6: every pending write fails once the pipe fails; no operation hangs",
	 .timeout_s = 90, .run = run_gdr_killed, .cross = true, .arg = &gdr_killed},
	{.id = "cuda.ipc_writer_killed", .suite = "cuda", .section = "wire.md 4.6.3, 5.6",
	 .level = TWC_MUST, .needs = "cuda,simcuda",
	 .description = "cuda_ipc: the writer of a 20 MiB device tensor is killed with SIGKILL "
	                "with its copy into a staging slot queued (its copies take 2 s) and its "
	                "Descriptor out: the reader's read fails with an end-of-file or reset "
	                "error, and the reader ends cleanly with every callback once",
	 .requirement = "4.6.3.c: a peer that dies mid-transfer does not leave the other end "
	                "waiting for good (an event a dead process recorded may never complete)",
	 .timeout_s = 90, .run = run_ipc_writer_killed, .cross = true,
	 .arg = &ipc_writer_killed},
};

const twc_case *twc_suite_cuda(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
