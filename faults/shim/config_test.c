/*
 * config_test.c - unit test of the TWFAULT parser (config.c): every key, the
 * number forms, and that bad specs are refused with a message naming the
 * item (a typo must never run a test without its faults).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			printf("not ok - %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                  \
		}                                                                    \
	} while (0)

static twf_config parse_ok(const char *spec)
{
	twf_config c;
	char err[256] = "";
	memset(&c, 0xab, sizeof(c));
	if (twf_config_parse(spec, &c, err, sizeof(err)) != 0) {
		printf("not ok - '%s' refused: %s\n", spec, err);
		failures++;
		memset(&c, 0, sizeof(c));
	}
	return c;
}

static void parse_bad(const char *spec, const char *needle)
{
	twf_config c;
	memset(&c, 0x5a, sizeof(c));
	twf_config before = c;
	char err[256] = "";
	if (twf_config_parse(spec, &c, err, sizeof(err)) == 0) {
		printf("not ok - '%s' accepted\n", spec);
		failures++;
		return;
	}
	if (!strstr(err, needle)) {
		printf("not ok - '%s': message '%s' does not name '%s'\n", spec, err, needle);
		failures++;
	}
	CHECK(memcmp(&c, &before, sizeof(c)) == 0); /* output untouched on failure */
}

int main(void)
{
	twf_config c = parse_ok(NULL);
	CHECK(c.seed == 1 && c.short_max == 0 && c.eintr_ppm == 0 && !c.reset_on &&
	      c.failcall_at == 0 && c.fds == TWF_FDS_SOCKETS && c.report[0] == '\0');
	c = parse_ok("");
	CHECK(c.seed == 1 && c.short_max == 0);

	c = parse_ok("short=4093,eintr=0.05,eagain=0.05,seed=7,fds=sockets");
	CHECK(c.short_min == 4093 && c.short_max == 4093);
	CHECK(c.eintr_ppm == 50000 && c.eagain_ppm == 50000);
	CHECK(c.seed == 7 && c.fds == TWF_FDS_SOCKETS);

	c = parse_ok("short=1-4k,fds=tcp");
	CHECK(c.short_min == 1 && c.short_max == 4096 && c.fds == TWF_FDS_TCP);
	c = parse_ok("fds=unix,eintr=5%,eagain=1");
	CHECK(c.fds == TWF_FDS_UNIX && c.eintr_ppm == 50000 && c.eagain_ppm == TWF_PPM);
	c = parse_ok("eintr=.5,eagain=0.0000019");
	CHECK(c.eintr_ppm == 500000 && c.eagain_ppm == 1);
	c = parse_ok("eintr=0.5%");
	CHECK(c.eintr_ppm == 5000);

	c = parse_ok("reset=1M");
	CHECK(c.reset_on && c.reset_conn == 0 && c.reset_bytes == (1u << 20));
	c = parse_ok("reset=2:4096");
	CHECK(c.reset_on && c.reset_conn == 2 && c.reset_bytes == 4096);
	c = parse_ok("reset=3:0");
	CHECK(c.reset_on && c.reset_conn == 3 && c.reset_bytes == 0);

	c = parse_ok("emfile=3");
	CHECK(c.emfile_at == 3 && c.emfile_count == 1);
	c = parse_ok("emfile=2:5");
	CHECK(c.emfile_at == 2 && c.emfile_count == 5);

	c = parse_ok("ctrunc=1");
	CHECK(c.ctrunc_at == 1 && !c.ctrunc_all);
	c = parse_ok("ctrunc=all");
	CHECK(c.ctrunc_all);

	c = parse_ok("failcall=17,report=/tmp/some where/r.txt,summary=1,verbose=1");
	CHECK(c.failcall_at == 17 && c.summary && c.verbose);
	CHECK(strcmp(c.report, "/tmp/some where/r.txt") == 0);

	c = parse_ok("short=100,,seed=3,off");
	CHECK(c.short_max == 0 && c.seed == 1); /* "off" clears what came before */
	c = parse_ok("off,short=9");
	CHECK(c.short_max == 9);
	c = parse_ok("seed=18446744073709551615");
	CHECK(c.seed == UINT64_MAX);

	parse_bad("eintrr=0.1", "eintrr");
	parse_bad("short", "short");
	parse_bad("short=abc", "short=abc");
	parse_bad("short=10-5", "short=10-5");
	parse_bad("short=0-5", "short=0-5");
	parse_bad("eintr=1.5", "eintr=1.5");
	parse_bad("eintr=2", "eintr=2");
	parse_bad("eintr=", "eintr=");
	parse_bad("eagain=.", "eagain=.");
	parse_bad("eintr=-0.1", "eintr=-0.1");
	parse_bad("fds=files", "fds=files");
	parse_bad("reset=x:1", "reset=x:1");
	parse_bad("reset=1:", "reset=1:");
	parse_bad("emfile=2:0", "emfile=2:0");
	parse_bad("ctrunc=some", "ctrunc=some");
	parse_bad("summary=yes", "summary=yes");
	parse_bad("seed=18446744073709551616", "seed=");
	parse_bad("short=17179869184g", "short=");
	parse_bad("report=", "report=");

	/* the draw is a pure function of (seed, connection, call) */
	CHECK(twf_draw(7, 1, 1) == twf_draw(7, 1, 1));
	CHECK(twf_draw(7, 1, 1) != twf_draw(7, 1, 2));
	CHECK(twf_draw(7, 1, 1) != twf_draw(7, 2, 1));
	CHECK(twf_draw(7, 1, 1) != twf_draw(8, 1, 1));

	if (failures) {
		printf("config_test: %d check(s) failed\n", failures);
		return 1;
	}
	printf("ok - config_test: every key, number form and refusal\n");
	return 0;
}
