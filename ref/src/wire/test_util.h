/*
 * test_util.h - the few helpers the wire unit tests share: TAP-style checks
 * that keep going after a failure, hex parsing and printing.
 *
 * Only for the unit tests of wire/ and platform/ (*_test.c); must not be used
 * by the library.
 */
#ifndef TW_WIRE_TEST_UTIL_H
#define TW_WIRE_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tw_test_failures;
static int tw_test_checks;

#define CHECK(cond)                                                                 \
	do {                                                                            \
		tw_test_checks++;                                                           \
		if (!(cond)) {                                                              \
			tw_test_failures++;                                                     \
			printf("not ok - %s:%d: CHECK(%s)\n", __FILE__, __LINE__, #cond);      \
		}                                                                           \
	} while (0)

#define CHECKF(cond, ...)                                                           \
	do {                                                                            \
		tw_test_checks++;                                                           \
		if (!(cond)) {                                                              \
			tw_test_failures++;                                                     \
			printf("not ok - %s:%d: CHECK(%s): ", __FILE__, __LINE__, #cond);      \
			printf(__VA_ARGS__);                                                    \
			printf("\n");                                                           \
		}                                                                           \
	} while (0)

/* Parses hex digits, ignoring whitespace; returns the byte count or -1. */
static inline long tw_test_unhex(const char *hex, uint8_t *out, size_t cap)
{
	size_t n = 0;
	int half = -1;
	for (const char *p = hex; *p; p++) {
		int v;
		if (*p >= '0' && *p <= '9')
			v = *p - '0';
		else if (*p >= 'a' && *p <= 'f')
			v = *p - 'a' + 10;
		else if (*p >= 'A' && *p <= 'F')
			v = *p - 'A' + 10;
		else if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
			continue;
		else
			return -1;
		if (half < 0) {
			half = v;
		} else {
			if (n >= cap)
				return -1;
			out[n++] = (uint8_t)(half << 4 | v);
			half = -1;
		}
	}
	return half < 0 ? (long)n : -1;
}

static inline void tw_test_print_hex(const char *label, const uint8_t *p, size_t n)
{
	printf("#   %s (%zu):", label, n);
	for (size_t i = 0; i < n; i++)
		printf(" %02x", p[i]);
	printf("\n");
}

static inline int tw_test_bytes_eq(const char *what, const uint8_t *got, size_t got_n,
                                   const uint8_t *want, size_t want_n)
{
	if (got_n == want_n && (got_n == 0 || memcmp(got, want, got_n) == 0))
		return 1;
	printf("# %s: bytes differ\n", what);
	tw_test_print_hex("got ", got, got_n);
	tw_test_print_hex("want", want, want_n);
	return 0;
}

static inline int tw_test_done(const char *name)
{
	if (tw_test_failures) {
		printf("# %s: %d of %d checks failed\n", name, tw_test_failures, tw_test_checks);
		return 1;
	}
	printf("ok - %s: %d checks\n", name, tw_test_checks);
	return 0;
}

#endif /* TW_WIRE_TEST_UTIL_H */
