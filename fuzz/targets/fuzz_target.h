/*
 * fuzz_target.h - what every wire fuzz target checks, beyond "no crash":
 *   - a decoder's allocations stay within TW_FUZZ_ALLOC_BOUND(input length)
 *     (spec/wire.md 1.13), counted through the codec's allocation hook;
 *   - a failure is TW_ERR_PROTO with a detail, and nothing leaks (LSan);
 *   - round trip: e = encode(decode(b)) is never longer than the bytes the
 *     decoder consumed, equals them exactly when b is canonical, and is a
 *     fixed point (decode(e) consumes all of e, encode(decode(e)) == e);
 *   - the generic value walker agrees with the typed decoder on the length;
 *   - out of memory at a data-chosen allocation gives TW_ERR_NOMEM, not a
 *     crash, a protocol error or a leak.
 * A violated property aborts, which libFuzzer, AFL++ and the replay driver
 * all report as a crash.
 *
 * Only for fuzz targets; must not be used by the library.
 */
#ifndef TW_FUZZ_TARGET_H
#define TW_FUZZ_TARGET_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/alloc.h"
#include "wire/nop.h"
#include "wire/packets.h"

/* spec/wire.md 1.13: our decoders promise 16 bytes per input byte plus 64. */
#define TW_FUZZ_ALLOC_BOUND(len) (16 * (size_t)(len) + 64)
/* Deeper than any TensorPipe packet nests. */
#define TW_FUZZ_WALK_DEPTH 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TW_FUZZ_ASSERT(cond, ...)                                                  \
	do {                                                                           \
		if (!(cond)) {                                                             \
			fprintf(stderr, "fuzz property failed: %s (%s:%d): ", #cond, __FILE__, \
			        __LINE__);                                                     \
			fprintf(stderr, __VA_ARGS__);                                          \
			fprintf(stderr, "\n");                                                 \
			abort();                                                               \
		}                                                                          \
	} while (0)

/* The walker must accept exactly the `used` bytes a typed decoder accepted. */
static inline void tw_fuzz_walker_agrees(const uint8_t *data, size_t size, size_t used)
{
	tw_nop_reader r;
	tw__nop_reader_init(&r, data, size);
	tw_status_t st = tw__nop_skip_value(&r, TW_FUZZ_WALK_DEPTH);
	TW_FUZZ_ASSERT(st == TW_OK && r.pos == used, "walker: status %d, %zu bytes, typed %zu: %s",
	               st, r.pos, used, r.detail);
}

/* Defines tw_fuzz_<T>(data, size), running every check on one packet type. */
#define TW_FUZZ_DEFINE_PACKET(T)                                                           \
	static void tw_fuzz_##T(const uint8_t *data, size_t size)                              \
	{                                                                                      \
		tw_wire_##T v;                                                                     \
		size_t used = 0;                                                                   \
		char detail[256] = "";                                                             \
		tw__wire_alloc_reset();                                                            \
		tw_status_t st = tw__wire_decode_##T(data, size, &v, &used, detail, sizeof(detail)); \
		size_t bytes = tw__wire_alloc_bytes(), calls = tw__wire_alloc_calls();             \
		TW_FUZZ_ASSERT(bytes <= TW_FUZZ_ALLOC_BOUND(size), "%zu bytes allocated for %zu",  \
		               bytes, size);                                                       \
		if (st != TW_OK) {                                                                 \
			TW_FUZZ_ASSERT(st == TW_ERR_PROTO && detail[0], "status %d, detail '%s'", st,  \
			               detail);                                                        \
			return;                                                                        \
		}                                                                                  \
		TW_FUZZ_ASSERT(used <= size, "consumed %zu of %zu", used, size);                   \
		tw_fuzz_walker_agrees(data, size, used);                                           \
                                                                                           \
		tw_nop_writer w;                                                                   \
		tw__nop_writer_init(&w);                                                           \
		tw__wire_encode_##T(&w, &v);                                                       \
		tw__wire_##T##_free(&v);                                                           \
		TW_FUZZ_ASSERT(tw__nop_writer_finish(&w) == TW_OK, "encode failed");               \
		TW_FUZZ_ASSERT(w.len <= used, "canonical form %zu bytes, input %zu", w.len, used); \
		if (w.len == used)                                                                 \
			TW_FUZZ_ASSERT(memcmp(w.buf, data, used) == 0,                                 \
			               "same length but different bytes: not canonical");              \
		tw_wire_##T v2;                                                                    \
		size_t used2 = 0;                                                                  \
		st = tw__wire_decode_##T(w.buf, w.len, &v2, &used2, detail, sizeof(detail));       \
		TW_FUZZ_ASSERT(st == TW_OK && used2 == w.len, "re-decode: %d %s", st, detail);    \
		tw_nop_writer w2;                                                                  \
		tw__nop_writer_init(&w2);                                                          \
		tw__wire_encode_##T(&w2, &v2);                                                     \
		tw__wire_##T##_free(&v2);                                                          \
		TW_FUZZ_ASSERT(tw__nop_writer_finish(&w2) == TW_OK && w2.len == w.len &&           \
		               memcmp(w2.buf, w.buf, w.len) == 0, "re-encoding is not a fixed point"); \
		tw__nop_writer_free(&w2);                                                          \
		tw__nop_writer_free(&w);                                                           \
                                                                                           \
		/* out of memory at one allocation, chosen from the input */                     \
		if (calls > 0) {                                                                   \
			size_t k = 1 + (size_t)((size * 2654435761u + (size ? data[size / 2] : 0)) %   \
			                        calls);                                                \
			tw__wire_alloc_reset();                                                        \
			tw__wire_alloc_fail_after(k);                                                  \
			st = tw__wire_decode_##T(data, size, &v, &used, detail, sizeof(detail));       \
			tw__wire_alloc_reset();                                                        \
			TW_FUZZ_ASSERT(st == TW_ERR_NOMEM, "allocation %zu of %zu failed: status %d", \
			               k, calls, st);                                                  \
		}                                                                                  \
	}

#define TW_FUZZ_PACKET_TARGET(T)                                         \
	TW_FUZZ_DEFINE_PACKET(T)                                             \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)         \
	{                                                                    \
		tw_fuzz_##T(data, size);                                         \
		return 0;                                                        \
	}

#endif /* TW_FUZZ_TARGET_H */
