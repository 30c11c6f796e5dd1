/*
 * select_test.c - the user's choice of backends (tensorwire.h,
 * tw_context_select; TW_TRANSPORTS and TW_CHANNELS): a kind left out is
 * refused with the choice named, a typo or a mixed list is an error and not
 * a silent empty choice, the API call wins over the environment, and a
 * context whose choice keeps uv and basic still carries messages.
 */
#include <pthread.h>

#include "pair_util.h"

static void expect_reg(bool transport, const char *kind, tw_status_t want, const char *substr)
{
	tw_context *c;
	CHECK_OK(tw_context_create("sel", &c));
	tw_status_t st = transport ? tw_context_register_transport(c, kind, NULL, 0, NULL)
	                           : tw_context_register_channel(c, kind, NULL, 0, NULL);
	const char *why = tw_last_error();
	if (st != want || (substr && !strstr(why, substr))) {
		fprintf(stderr, "%s %s: got %s '%s', want %s '%s'\n", transport ? "transport" : "channel",
		        kind, tw_status_name(st), why, tw_status_name(want), substr ? substr : "");
		abort();
	}
	tw_context_destroy(c);
}

static void case_env_exclude(void)
{
	setenv("TW_TRANSPORTS", "^uv", 1);
	expect_reg(true, "uv", TW_ERR_UNSUPPORTED,
	           "tw_context_register_transport: TW_TRANSPORTS='^uv' leaves uv out");
	expect_reg(false, "basic", TW_OK, NULL); /* channels are another list */
	setenv("TW_CHANNELS", "^cma,^xth", 1);
	expect_reg(false, "basic", TW_OK, NULL);
}

static void case_env_include(void)
{
	setenv("TW_CHANNELS", "cma", 1);
	expect_reg(false, "basic", TW_ERR_UNSUPPORTED, "TW_CHANNELS='cma' does not list basic");
	setenv("TW_TRANSPORTS", "ibv,shm,uv", 1);
	setenv("TW_CHANNELS", "basic", 1);
	expect_reg(true, "uv", TW_OK, NULL);
	expect_reg(true, "shm", TW_OK, NULL);
	/* listed, but without a usable verbs device here (ctest runs this
	 * outside simverbs): refused with the transport's reason */
	expect_reg(true, "ibv", TW_ERR_UNSUPPORTED, "ibv transport: ");
	/* the choice keeps uv and basic: pipes work as before */
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	tu_send_text(p.c, "chosen");
	tu_expect_text(p.s, "chosen");
	tu_pair_close(&p);
}

static void case_env_typo(void)
{
	setenv("TW_TRANSPORTS", "uvv", 1);
	expect_reg(true, "uv", TW_ERR_INVAL,
	           "TW_TRANSPORTS='uvv': 'uvv' is no such kind (transport kinds: uv, shm, ibv)");
	setenv("TW_TRANSPORTS", "uv,^shm", 1);
	expect_reg(true, "uv", TW_ERR_INVAL, "mixes kinds to keep and kinds to leave out");
	setenv("TW_TRANSPORTS", "uv,,shm", 1);
	expect_reg(true, "uv", TW_ERR_INVAL, "'' is an empty item");
	unsetenv("TW_TRANSPORTS");
	setenv("TW_CHANNELS", "basic,cmaa", 1);
	expect_reg(false, "basic", TW_ERR_INVAL, "'cmaa' is no such kind (channel kinds: basic");
}

static void case_api(void)
{
	setenv("TW_TRANSPORTS", "uv", 1);
	tw_context *c;
	CHECK_OK(tw_context_create("sel", &c));
	CHECK_STATUS(tw_context_select(c, "bogus", NULL), TW_ERR_INVAL);
	CHECK(strstr(tw_last_error(), "tw_context_select: transports: 'bogus' is no such kind"));
	CHECK_OK(tw_context_select(c, "^uv", NULL));
	CHECK_STATUS(tw_context_register_transport(c, "uv", NULL, 0, NULL), TW_ERR_UNSUPPORTED);
	CHECK(strstr(tw_last_error(), "tw_context_select(transports='^uv') leaves uv out"));
	CHECK_OK(tw_context_select(c, "", "basic")); /* "": no restriction, uv again */
	CHECK_OK(tw_context_register_transport(c, "uv", NULL, 0, NULL));
	CHECK_OK(tw_context_register_channel(c, "basic", NULL, 0, NULL));
	CHECK_STATUS(tw_context_select(NULL, NULL, NULL), TW_ERR_INVAL);
	tw_context_destroy(c);
}

/* tw_context_select from one thread while another registers (which reads
 * the choice): every call stays whole (TSan: no race on the choice). */
static void *select_loop(void *arg)
{
	tw_context *c = arg;
	for (int i = 0; i < 2000; i++)
		CHECK_OK(tw_context_select(c, i % 2 ? "uv,shm" : "^ibv", i % 2 ? "basic" : "^mpt"));
	return NULL;
}

static void case_threads(void)
{
	tw_context *c;
	CHECK_OK(tw_context_create("sel", &c));
	pthread_t t;
	CHECK(pthread_create(&t, NULL, select_loop, c) == 0);
	int ok = 0;
	for (int i = 0; i < 2000; i++) {
		/* the first of each succeeds, the rest name a registered name */
		tw_status_t a = tw_context_register_transport(c, "uv", "u", 0, NULL);
		tw_status_t b = tw_context_register_channel(c, "basic", "b", 0, NULL);
		CHECK(a == TW_OK || a == TW_ERR_INVAL);
		CHECK(b == TW_OK || b == TW_ERR_INVAL);
		ok += (a == TW_OK) + (b == TW_OK);
	}
	CHECK(pthread_join(t, NULL) == 0);
	if (ok != 2) {
		fprintf(stderr, "%d registrations succeeded, want 2 (uv and basic, once each)\n", ok);
		abort();
	}
	tw_context_destroy(c);
}

int main(int argc, char **argv)
{
	unsetenv("TW_TRANSPORTS");
	unsetenv("TW_CHANNELS");
	static const tu_case cases[] = {
		{ "env_exclude", case_env_exclude },
		{ "env_include", case_env_include },
		{ "env_typo", case_env_typo },
		{ "api", case_api },
		{ "threads", case_threads },
	};
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 60);
}
