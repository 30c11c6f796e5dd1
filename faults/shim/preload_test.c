/*
 * preload_test.c - unit test of preload.c: the LD_PRELOAD order twfault-run
 * builds. This program's own DT_NEEDED entries say which sanitizer runtime
 * the build linked (GCC links libasan / libtsan dynamically), so the test
 * knows the right answer for itself; a script and a missing file check the
 * other branches.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			printf("not ok - %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                  \
		}                                                                    \
	} while (0)

#if defined(__SANITIZE_ADDRESS__)
#define EXPECT_RUNTIME "libasan.so"
#elif defined(__SANITIZE_THREAD__)
#define EXPECT_RUNTIME "libtsan.so"
#else
#define EXPECT_RUNTIME NULL
#endif

int main(void)
{
	char self[4096], san[256], err[256], out[1024];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	CHECK(n > 0);
	self[n > 0 ? n : 0] = '\0';

	int found = twf_sanitizer_needed(self, san, sizeof(san), err, sizeof(err));
	if (EXPECT_RUNTIME) {
		CHECK(found == 1 && !strncmp(san, EXPECT_RUNTIME, strlen(EXPECT_RUNTIME)));
		CHECK(twf_preload_value(self, "/x/libtwfault.so", NULL, out, sizeof(out), err,
		                        sizeof(err)) == 0);
		char want[512];
		snprintf(want, sizeof(want), "%s /x/libtwfault.so", san);
		CHECK(!strcmp(out, want));
		/* what was preloaded already follows, without repeats */
		char existing[512];
		snprintf(existing, sizeof(existing), "libfoo.so:%s /x/libtwfault.so  libbar.so", san);
		CHECK(twf_preload_value(self, "/x/libtwfault.so", existing, out, sizeof(out), err,
		                        sizeof(err)) == 0);
		snprintf(want, sizeof(want), "%s /x/libtwfault.so libfoo.so libbar.so", san);
		CHECK(!strcmp(out, want));
	} else {
		CHECK(found == 0);
		CHECK(twf_preload_value(self, "/x/libtwfault.so", "libfoo.so", out, sizeof(out), err,
		                        sizeof(err)) == 0);
		CHECK(!strcmp(out, "/x/libtwfault.so libfoo.so"));
	}

	/* a script is no ELF program: nothing goes first */
	char script[] = "/tmp/twfault_preload_test_XXXXXX";
	int fd = mkstemp(script);
	CHECK(fd >= 0);
	if (fd >= 0) {
		CHECK(write(fd, "#!/bin/sh\nexit 0\n", 17) == 17);
		close(fd);
		CHECK(twf_sanitizer_needed(script, san, sizeof(san), err, sizeof(err)) == 0);
		unlink(script);
	}
	CHECK(twf_sanitizer_needed("/nonexistent/prog", san, sizeof(san), err, sizeof(err)) == -1);
	CHECK(strstr(err, "/nonexistent/prog") != NULL);

	/* PATH lookup as execvp does it */
	CHECK(twf_find_program("sh", out, sizeof(out), err, sizeof(err)) == 0 && strchr(out, '/'));
	CHECK(twf_find_program("./relative/prog", out, sizeof(out), err, sizeof(err)) == 0 &&
	      !strcmp(out, "./relative/prog"));
	CHECK(twf_find_program("no-such-program-twfault", out, sizeof(out), err, sizeof(err)) == -1);

	if (failures) {
		printf("preload_test: %d check(s) failed\n", failures);
		return 1;
	}
	printf("ok - preload_test: runtime first (%s), shim, then the rest\n",
	       EXPECT_RUNTIME ? EXPECT_RUNTIME : "no sanitizer in this build");
	return 0;
}
