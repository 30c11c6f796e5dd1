/*
 * alloc.h - the one door through which the wire codec allocates memory.
 *
 * Every malloc/realloc the codec makes (decoded strings and arrays, the
 * writer's buffer) goes through these functions so that tests and fuzz
 * targets can (1) count the bytes a decoder asked for and check them against
 * a bound derived from the input length, and (2) make the Nth allocation fail
 * to prove that every TW_ERR_NOMEM path cleans up. Both counters are
 * thread-local: a thread only sees the allocations it made itself.
 *
 * This file must not know about libnop or packets.
 */
#ifndef TW_WIRE_ALLOC_H
#define TW_WIRE_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* malloc/realloc/free; NULL on failure (or on an injected failure). A request
 * of 0 bytes allocates 1 byte so that NULL always means failure. */
void *tw__wire_malloc(size_t n);
void *tw__wire_calloc(size_t count, size_t size);
void *tw__wire_realloc(void *p, size_t n);
void tw__wire_free(void *p);

/* Bytes requested by this thread since the last reset (realloc counts its
 * new size). Used by tests and fuzz targets to bound decoder allocations. */
size_t tw__wire_alloc_bytes(void);
/* Number of allocation calls made by this thread since the last reset. */
size_t tw__wire_alloc_calls(void);
/* Zeroes both counters and turns failure injection off. */
void tw__wire_alloc_reset(void);

/* Make the allocation call number `n` (1-based, counted from now, in this
 * thread) and every later one fail; 0 turns injection off. */
void tw__wire_alloc_fail_after(size_t n);

#ifdef __cplusplus
}
#endif

#endif /* TW_WIRE_ALLOC_H */
