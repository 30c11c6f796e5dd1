/*
 * suite.c - the interop matrix of tensorwire issue 2 item 8 as conformance
 * cases: every case of cases.c, run for every ordered pair of IUTs (the
 * first one connects, the second accepts; messages go both ways).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "suites.h"
#include "cases.h"

static twc_outcome_t run_interop(const twc_case *c, twc_case_env *env)
{
	const twc_interop_case *ic = c->arg;
	/* the case's own bound on each wait, or the runner's if that is shorter */
	int wait_s = env->wait_ms > 0 ? (env->wait_ms + 999) / 1000 : ic->wait_s;
	if (wait_s > ic->wait_s)
		wait_s = ic->wait_s;
	int rc = twc_interop_run_case(ic, env->iut_cmd, env->peer_cmd, env->iut_name, env->peer_name,
	                             wait_s, env->reason, sizeof(env->reason), env->transport,
	                             env->channel);
	return rc == 0 ? TWC_PASS : rc == 77 ? TWC_SKIP : TWC_FAIL;
}

/* xth (spec 4.5) between the two implementations: both in one process,
 * which only tw-xth-dual (built when stock is) can be. The client IUT's
 * implementation connects to the server's; a pair of one implementation is
 * a SKIP (ours<->ours xth runs in the ref batteries ref.uv_xth.*). */
static twc_outcome_t run_xth_one_process(const twc_case *c, twc_case_env *env)
{
	(void)c;
	const char *ci = env->iut_impl, *si = env->peer_impl ? env->peer_impl : "";
	bool ours_c = !strcmp(ci, "tensorwire"), ours_s = !strcmp(si, "tensorwire");
	bool stock_c = !strcmp(ci, "tensorpipe"), stock_s = !strcmp(si, "tensorpipe");
	if (!((ours_c && stock_s) || (stock_c && ours_s)))
		return twc_case_result(env, TWC_SKIP,
		                       "xth joins two implementations in one process; this pair is %s "
		                       "and %s (each one's own xth runs in its own tests: ours in the "
		                       "ref.uv_xth.* batteries)",
		                       ci, si);
	char tool[PATH_MAX], cmd[PATH_MAX + 64];
	if (twc_tool_path("tw-xth-dual", tool, sizeof(tool)) != 0)
		return twc_case_result(env, TWC_SKIP, "tw-xth-dual is not built (it needs stock "
		                                      "TensorPipe's headers and library)");
	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", tool, ours_c ? "ours-connects" : "stock-connects");
	snprintf(env->transport, sizeof(env->transport), "uv");
	snprintf(env->channel, sizeof(env->channel), "xth");
	FILE *f = popen(cmd, "r");
	if (!f)
		return twc_case_result(env, TWC_ERROR, "popen %s failed", tool);
	char line[1024], last[1024] = "";
	while (fgets(line, sizeof(line), f)) {
		fputs(line, stdout);
		snprintf(last, sizeof(last), "%.*s", (int)strcspn(line, "\n"), line);
	}
	int st = pclose(f);
	if (st == 0)
		return TWC_PASS;
	return twc_case_result(env, TWC_FAIL, "%s (status %d)", last, st);
}

/* "Interop tests [...] each ours->stock, stock->ours and ours<->ours: [...]
 * Data is compared by checksum." (tensorwire issue 2 item 8; spec/agent.md 8) */
const twc_case *twc_suite_interop(int *count_out)
{
	static twc_case *cases;
	static char (*ids)[64], (*descs)[160], (*secs)[96];
	static int n = -1;
	if (n < 0) {
		n = 0;
		size_t k = (size_t)twc_interop_num_cases + 1;
		cases = calloc(k, sizeof(*cases));
		ids = calloc(k, sizeof(*ids));
		descs = calloc(k, sizeof(*descs));
		secs = calloc(k, sizeof(*secs));
		if (!cases || !ids || !descs || !secs) {
			fprintf(stderr, "tensorwire-conform: out of memory\n");
			exit(2);
		}
		for (int i = 0; i < twc_interop_num_cases; i++) {
			const twc_interop_case *ic = &twc_interop_cases[i];
			snprintf(ids[n], sizeof(ids[n]), "interop.%s", ic->id);
			snprintf(descs[n], sizeof(descs[n]), "%s, both directions over one pipe", ic->title);
			/* every case runs the handshake and the message flow between the two
			 * IUTs; some also exercise a rule of their own */
			const char *extra = !strcmp(ic->id, "zero_length")        ? ", wire.md 4.1 (4.1.a)"
			                    : !strcmp(ic->id, "no_target_device") ? ", wire.md 3.11"
			                    : !strcmp(ic->id, "burst_1000")       ? ", wire.md 3.12"
			                    : !strcmp(ic->id, "tensors_100")      ? ", wire.md 3.10 (3.10.d)"
			                                                          : "";
			snprintf(secs[n], sizeof(secs[n]), "agent.md 8, wire.md 3.9, wire.md 3.10%s", extra);
			cases[n] = (twc_case){
				.id = ids[n],
				.suite = "interop",
				.section = secs[n],
				.level = TWC_MUST,
				.needs = ic->large ? "memory:10GiB" : "",
				.description = descs[n],
				.requirement = "every received buffer's xxh3 and len equal those of the bytes "
				               "the sender was told to generate; every descriptor field equals "
				               "what the sender described; every request that armed a callback "
				               "got exactly one event; info names the expected transport and "
				               "channel; both adapters exit with status 0 (spec/agent.md 8)",
				.accepts = 0,
				.timeout_s = ic->large ? 3000 : 300,
				.pairwise = true,
				.battery = true,
				.large = ic->large,
				.run = run_interop,
				.arg = ic,
			};
			n++;
		}
	}
	static bool xth_added;
	if (!xth_added) {
		xth_added = true;
		cases[n++] = (twc_case){
			.id = "interop.xth_one_process",
			.suite = "interop",
			.section = "wire.md 4.5 (4.5.a)",
			.level = TWC_MUST,
			.needs = "",
			.description = "stock and ours in one process select xth and move tensors of 0 B "
			               "to 9 MiB both ways, either one connecting",
			.requirement = "(4.5.a) An implementation MUST NOT advertise xth unless it speaks "
			               "exactly this protocol, since a stock instance in the same process "
			               "would select it.",
			.timeout_s = 120,
			.pairwise = true,
			.run = run_xth_one_process,
		};
	}
	*count_out = n;
	return cases;
}
