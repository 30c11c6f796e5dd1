/*
 * proc_util.h - for tests that run their peer in a child process, possibly
 * in another network namespace (netns_pair.sh): whole reads and writes on
 * the pipes between them, a monotonic clock shared by both, and entering a
 * namespace named by an environment variable. Header-only; tests only.
 */
#ifndef TW_TESTS_PROC_UTIL_H
#define TW_TESTS_PROC_UTIL_H

#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before including proc_util.h (setns)"
#endif
#include <fcntl.h>
#include <sched.h>

#include "test_util.h"

static inline void tu_put(int fd, const void *buf, size_t len)
{
	CHECK(write(fd, buf, len) == (ssize_t)len);
}

static inline void tu_get(int fd, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);
		CHECK(n > 0);
		got += (size_t)n;
	}
}

/* The value of an environment variable netns_pair.sh sets; exits with 2 if
 * it is missing (the test was not run through the script). */
static inline const char *tu_env(const char *name)
{
	const char *v = getenv(name);
	if (!v || !*v) {
		fprintf(stderr, "%s is not set: run this test through netns_pair.sh\n", name);
		exit(2);
	}
	return v;
}

/* Moves the calling process (before it starts threads) into the network
 * namespace named by environment variable `var`. */
static inline void tu_enter_netns(const char *var)
{
	char path[256];
	snprintf(path, sizeof(path), "/run/netns/%s", tu_env(var));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(setns(fd, CLONE_NEWNET) == 0);
	close(fd);
}

#endif /* TW_TESTS_PROC_UTIL_H */
