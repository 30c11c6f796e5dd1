/*
 * alloc.c - counting, failure-injecting allocation wrappers for the wire
 * codec (see alloc.h). Counters are thread-local, so this file needs no
 * locks and is clean under TSan.
 */
#include "wire/alloc.h"

#include <stdlib.h>

static _Thread_local size_t alloc_bytes;
static _Thread_local size_t alloc_calls;
static _Thread_local size_t fail_at;  /* 0 = never; else the call number that fails */

static int tw__wire_alloc_should_fail(size_t n)
{
	alloc_calls++;
	alloc_bytes += n;
	return fail_at != 0 && alloc_calls >= fail_at;
}

void *tw__wire_malloc(size_t n)
{
	if (n == 0)
		n = 1;
	if (tw__wire_alloc_should_fail(n))
		return NULL;
	return malloc(n);
}

void *tw__wire_calloc(size_t count, size_t size)
{
	if (count == 0 || size == 0)
		count = size = 1;
	if (size != 0 && count > (size_t)-1 / size)
		return NULL;
	if (tw__wire_alloc_should_fail(count * size))
		return NULL;
	return calloc(count, size);
}

void *tw__wire_realloc(void *p, size_t n)
{
	if (n == 0)
		n = 1;
	if (tw__wire_alloc_should_fail(n))
		return NULL;
	return realloc(p, n);
}

void tw__wire_free(void *p)
{
	free(p);
}

size_t tw__wire_alloc_bytes(void)
{
	return alloc_bytes;
}

size_t tw__wire_alloc_calls(void)
{
	return alloc_calls;
}

void tw__wire_alloc_reset(void)
{
	alloc_bytes = 0;
	alloc_calls = 0;
	fail_at = 0;
}

void tw__wire_alloc_fail_after(size_t n)
{
	fail_at = n == 0 ? 0 : alloc_calls + n;
}
