/*
 * contain.c - the containment suite: same-host mechanisms between processes
 * that a container, a sandbox or a hardened host set apart (issue 11 item
 * 4; field failures T01, T02, T04 and T07 of the shared field-failures list;
 * spec/wire.md 6.b and 8.3).
 *
 * Each case starts both adapters the way the situation needs, through
 * tw-sandbox (seccomp denials, capability drops, a small /dev/shm, a YAMA
 * ptrace scope as read in the peer's mount namespace; built
 * beside tensorwire-conform) and unshare(1) (namespaces), gives them
 * contexts with the same-host backends and their fallbacks, moves checked
 * tensors both ways and asks what was selected. A case passes when every
 * byte arrives, or, where the situation leaves no working path, when the
 * transfer fails with an error that names the call and its errno while both
 * adapters still end cleanly (no abort, no hang, every callback once).
 * Cases that need what this machine lacks (root, namespaces) SKIP with the
 * reason tw-sandbox or unshare gave.
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

typedef enum harden { HARDEN_NONE, HARDEN_BEFORE_USE, HARDEN_IN_USE } harden_t;

typedef struct contain_spec {
	const char *sandbox;    /* tw-sandbox options for both adapters ("" none) */
	const char *unshare;    /* unshare(1) options for each adapter (NULL none) */
	const char *transports; /* in priority order, first highest */
	const char *channels;
	uint64_t tensor_len;
	int messages;           /* per direction */
	harden_t harden;        /* the server made non-dumpable (agent.md 6.13) */
	const char *want_transport, *want_channel; /* NULL: whichever works */
} contain_spec;

static uint64_t g_len; /* the running case's tensor size, for the shape */

static int shape_one(int index, twc_agent_msg *m)
{
	(void)index;
	return twc_msg_one_tensor(m, 16, g_len);
}

/* "a,b,c" as adapter backends, priorities 200, 100, 0 (first highest). */
static json_t *list_json(const char *csv)
{
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", csv);
	const char *names[8];
	int n = 0;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < 8;
	     t = strtok_r(NULL, ",", &save))
		names[n++] = t;
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:s,s:s,s:i}", "name", names[i], "kind", names[i],
		                                   "priority", 100 * (n - 1 - i)));
	return a;
}

static int set_dumpable(twc_session *s, twc_adapter *a, bool on)
{
	json_t *r = twc_session_call(s, a, json_pack("{s:s,s:b}", "cmd", "dumpable", "dumpable", on));
	if (!r)
		return -1;
	json_decref(r);
	return 0;
}

static twc_outcome_t run_contain(const twc_case *c, twc_case_env *env)
{
	const contain_spec *sp = c->arg;
	const char *scmd = env->peer_cmd ? env->peer_cmd : env->iut_cmd;
	const char *sname = env->peer_cmd ? env->peer_name : env->iut_name;
	const char *simpl = env->peer_cmd ? env->peer_impl : env->iut_impl;
	const char *why;
	if (twc_cmd_unavailable(env->iut_cmd, &why) || twc_cmd_unavailable(scmd, &why))
		return twc_case_result(env, TWC_SKIP, "an adapter is not built here: %s", why);
	char prefix[2 * PATH_MAX], reason[512];
	twc_outcome_t o = twc_contain_prefix(sp->unshare, sp->sandbox, prefix, sizeof(prefix), reason,
	                                     sizeof(reason));
	if (o != TWC_PASS)
		return twc_case_result(env, o, "%s", reason);
	static char ccmd[4 * PATH_MAX], scmd2[4 * PATH_MAX];
	snprintf(ccmd, sizeof(ccmd), "%s%s", prefix, env->iut_cmd);
	snprintf(scmd2, sizeof(scmd2), "%s%s", prefix, scmd);
	printf("# client: %s\n# server: %s\n", ccmd, scmd2);

	json_t *ctx = json_pack("{s:o,s:o,s:b}", "transports", list_json(sp->transports), "channels",
	                        list_json(sp->channels), "tolerate_skipped", 1);
	/* With shm, the server listens on uv and shm and the client connects
	 * through uv: the Brochure moves the pipe to shm, as PyTorch's RPC does. */
	json_t *urls = strstr(sp->transports, "shm")
	                       ? json_pack("[s,s]", "uv://127.0.0.1:0", "shm://")
	                       : NULL;
	g_len = sp->tensor_len;
	twc_session s;
	int rc = twc_session_start(&s, ccmd, scmd2, env->iut_name, sname, env->wait_ms, ctx, urls);
	json_decref(ctx);
	json_decref(urls);
	if (rc == 0 && sp->harden == HARDEN_BEFORE_USE)
		rc = set_dumpable(&s, s.server, false);
	if (rc == 0)
		rc = twc_session_connect(&s, NULL);
	bool moving = false; /* a failure from here on may be the case's expected end */
	if (rc == 0 && sp->harden == HARDEN_IN_USE) {
		rc = twc_session_transfer(&s, false, shape_one, 1, false, UINT64_C(7) << 40);
		if (rc == 0)
			rc = set_dumpable(&s, s.server, false);
	}
	if (rc == 0) {
		moving = true;
		rc = twc_session_transfer(&s, true, shape_one, sp->messages, false, UINT64_C(1) << 40);
	}
	if (rc == 0)
		rc = twc_session_transfer(&s, false, shape_one, sp->messages, false, UINT64_C(2) << 40);
	if (rc == 0)
		rc = twc_session_check_info(&s, sp->want_transport, sp->want_channel);
	snprintf(env->transport, sizeof(env->transport), "%s", s.transport);
	snprintf(env->channel, sizeof(env->channel), "%s", s.channel);
	if (rc == 0) {
		rc = twc_session_finish(&s);
		twc_session_destroy(&s);
		if (rc != 0)
			return twc_case_result(env, TWC_FAIL, "%s", s.reason);
		return TWC_PASS;
	}
	/* A transfer failed. Allowed only where no path can work (a copy the
	 * peer refuses after it was proven, or a peer that cannot run the
	 * proof), and only cleanly: the error names the call and the errno,
	 * and both adapters still end in order. */
	char first[TWC_REASON_MAX];
	snprintf(first, sizeof(first), "%s", s.reason);
	/* Before use, a pair where exactly one end speaks the proof can do no
	 * better than a clean error; two tensorwire ends must deliver (8.3),
	 * and two ends that both trust the descriptors fail 6.b. */
	bool ours_c = !strcmp(env->iut_impl, "tensorwire"), ours_s = !strcmp(simpl, "tensorwire");
	bool allowed = moving && (sp->harden == HARDEN_IN_USE ||
	                          (sp->harden == HARDEN_BEFORE_USE && ours_c != ours_s));
	if (!allowed) {
		twc_session_destroy(&s);
		return twc_case_result(env, TWC_FAIL, "%s", first);
	}
	if (!strstr(first, "process_vm_readv") || !strstr(first, "Operation not permitted")) {
		twc_session_destroy(&s);
		return twc_case_result(env, TWC_FAIL,
		                       "the transfer failed without naming process_vm_readv and its "
		                       "errno: %s",
		                       first);
	}
	s.reason[0] = '\0';
	rc = twc_session_finish(&s);
	twc_session_destroy(&s);
	if (rc != 0)
		return twc_case_result(env, TWC_FAIL, "the transfer failed cleanly (%s), but then: %s",
		                       first, s.reason);
	printf("# failed cleanly, as allowed here: %s\n", first);
	return TWC_PASS;
}

static const contain_spec seccomp_cma = {
	.sandbox = "--deny process_vm_readv:EPERM", .transports = "uv", .channels = "cma,basic",
	.tensor_len = 64 * MiB, .messages = 1, .want_transport = "uv", .want_channel = "basic"};
static const contain_spec refused_before_use = {
	.sandbox = "--drop-cap sys_ptrace", .transports = "uv", .channels = "cma,basic",
	.tensor_len = 8 * MiB, .messages = 2, .harden = HARDEN_BEFORE_USE,
	.want_transport = "uv", .want_channel = "cma"};
static const contain_spec refused_in_use = {
	.sandbox = "--drop-cap sys_ptrace", .transports = "uv", .channels = "cma,basic",
	.tensor_len = 8 * MiB, .messages = 2, .harden = HARDEN_IN_USE,
	.want_transport = "uv", .want_channel = "cma"};
static const contain_spec yama_scope2 = {
	.sandbox = "--yama-scope 2", .transports = "uv", .channels = "cma,basic",
	.tensor_len = 8 * MiB, .messages = 2, .want_transport = "uv", .want_channel = "basic"};
static const contain_spec namespaces = {
	.sandbox = "", .unshare = "--pid --fork --kill-child --ipc --mount --user --map-root-user",
	.transports = "shm,uv", .channels = "cma,basic", .tensor_len = 8 * MiB, .messages = 2,
	.want_transport = "shm", .want_channel = "basic"};
static const contain_spec memfd_eperm = {
	.sandbox = "--deny memfd_create:EPERM", .transports = "shm,uv", .channels = "basic",
	.tensor_len = 10 * MiB, .messages = 2};
static const contain_spec memfd_enosys_small_shm = {
	.sandbox = "--deny memfd_create:ENOSYS --shm-size 1m", .transports = "shm,uv",
	.channels = "basic", .tensor_len = 10 * MiB, .messages = 2};

#define CONTAIN(id_, sec_, desc_, req_, spec_)                                                    \
	{.id = "contain." id_, .suite = "contain", .section = sec_, .level = TWC_MUST, .needs = "",  \
	 .description = desc_, .requirement = req_, .timeout_s = 180, .run = run_contain,            \
	 .cross = true, .arg = &(spec_)}

static const twc_case cases[] = {
	CONTAIN("cma_seccomp", "wire.md 6 (6.b)",
	        "both peers under a seccomp filter that refuses process_vm_readv (EPERM, as Docker's "
	        "default profile): 64 MiB each way arrive over basic (T01a)",
	        "(6.b) An implementation MUST advertise a same-host mechanism only when its own check "
	        "(connect, test copy) says it would work",
	        seccomp_cma),
	CONTAIN("cma_refused_before_use", "wire.md 8.3 (8.3.a, 8.3.c)",
	        "descriptors match but the server turned non-dumpable (no CAP_SYS_PTRACE) before the "
	        "pipe: between tensorwire peers the proof sends the bytes inline; with another "
	        "peer, a clean error naming the call and errno",
	        "(8.3.c) A sender whose probe was refused MUST carry that instance's tensors inline "
	        "[...] Neither end may fail the pipe because a probe was refused.",
	        refused_before_use),
	CONTAIN("cma_refused_in_use", "wire.md 8.3 (8.3.d), wire.md 4.4 (4.4.c)",
	        "the server turns non-dumpable (no CAP_SYS_PTRACE) after a first tensor: the next "
	        "copies fail with an error naming process_vm_readv and EPERM, no abort, no hang (T01b)",
	        "(4.4.c) A receiver whose copy fails MUST fail the channel and close both "
	        "connections; there is no error message on the wire.",
	        refused_in_use),
	CONTAIN("cma_yama_scope2", "wire.md 6 (6.b)",
	        "both peers on a host whose YAMA ptrace_scope reads 2 (admin-only attach: no process "
	        "may copy from another): cma is not selected, 8 MiB each way arrive over basic (T02; "
	        "the scope is what each peer reads in its own mount namespace, the kernel's own "
	        "setting is left alone)",
	        "(6.b) An implementation MUST advertise a same-host mechanism only when its own check "
	        "(connect, test copy) says it would work",
	        yama_scope2),
	CONTAIN("namespaces", "wire.md 6 (6.b)",
	        "each peer in its own pid, ipc, mount and user namespace on one host (same boot_id, "
	        "same netns): shm carries 8 MiB each way, cma is not selected",
	        "(6.b) [...] boot_id is shared by all containers on a host, so equal descriptors do "
	        "not prove the mechanism works between two containers.",
	        namespaces),
	CONTAIN("memfd_eperm", "wire.md 6 (6.b)",
	        "memfd_create refused with EPERM (a seccomp policy): 10 MiB each way arrive, over shm "
	        "through /dev/shm or over uv (T04b, T07)",
	        "(6.b) An implementation MUST advertise a same-host mechanism only when its own check "
	        "(connect, test copy) says it would work",
	        memfd_eperm),
	CONTAIN("memfd_enosys_small_shm", "wire.md 6 (6.b)",
	        "memfd_create missing (ENOSYS) and /dev/shm a 1 MiB tmpfs: 10 MiB each way arrive, "
	        "no SIGBUS (T04a)",
	        "(6.b) An implementation MUST advertise a same-host mechanism only when its own check "
	        "(connect, test copy) says it would work",
	        memfd_enosys_small_shm),
};

const twc_case *twc_suite_contain(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
