/*
 * churn_test.c - backends that are not viable here, made and unmade many
 * times (field failure T09; issue 11 item 4): run under tw-sandbox with
 * process_vm_readv refused, memfd_create missing and a tiny /dev/shm, so
 * cma and shm are refused at registration (conformance/CMakeLists.txt).
 *
 *   nonviable_churn  1000 contexts: shm and cma refused with
 *                    TW_ERR_UNSUPPORTED and a reason naming the backend,
 *                    the call and the errno, uv and basic registered; every
 *                    tenth context also carries a pipe (established, one
 *                    tensor, closed) and reports the refusals in
 *                    tw_pipe_get_verdicts; contexts are destroyed in turn
 *                    with and without tw_context_join. No hang (watchdog),
 *                    no leak (LSan), no crash.
 */
#include "pair_util.h"

static void check_refused(tw_status_t st, const char *backend, const char *call)
{
	CHECK_STATUS(st, TW_ERR_UNSUPPORTED);
	const char *e = tw_last_error();
	if (!strstr(e, backend) || !strstr(e, call)) {
		fprintf(stderr, "not ok - the refusal does not name %s and %s: %s\n", backend, call, e);
		exit(1);
	}
}

static tw_context *churn_ctx(const char *name, int i)
{
	tw_context *ctx;
	CHECK_OK(tw_context_create(name, &ctx));
	check_refused(tw_context_register_transport(ctx, "shm", NULL, 200, NULL), "shm",
	              "fallocate");
	check_refused(tw_context_register_channel(ctx, "cma", NULL, 100, NULL), "cma",
	              "process_vm_readv");
	if (i == 0)
		printf("# refused: %s\n", tw_last_error());
	CHECK_OK(tw_context_register_transport(ctx, "uv", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(ctx, "basic", NULL, 0, NULL));
	return ctx;
}

static void case_nonviable_churn(void)
{
	for (int i = 0; i < 1000; i++) {
		if (i % 10 == 0) {
			tu_pair p = { 0 };
			p.sctx = churn_ctx("server", i);
			p.cctx = churn_ctx("client", i);
			tu_pair_open(&p, "uv://127.0.0.1:0");
			char v[2048];
			CHECK_OK(tw_pipe_get_verdicts(p.c, v, sizeof(v)));
			CHECK(strstr(v, "transport uv: selected") && strstr(v, "channel basic: selected") &&
			      strstr(v, "transport shm: not offered") &&
			      strstr(v, "channel cma: not offered"));
			if (i == 0)
				printf("# verdicts:\n%s", v);
			tu_pair_close(&p);
			continue;
		}
		tw_context *ctx = churn_ctx("churn", i);
		if (i % 2) {
			tw_context_close(ctx);
			CHECK_OK(tw_context_join(ctx));
		}
		tw_context_destroy(ctx);
	}
}

int main(int argc, char **argv)
{
	static const tu_case cases[] = {
		{ "nonviable_churn", case_nonviable_churn },
	};
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 240);
}
