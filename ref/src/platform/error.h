/*
 * error.h - the thread-local "last error" behind tw_last_error() and the
 * helpers that format detail strings. A detail names the layer, the failing
 * call and the reason ("tcp transport: connect 127.0.0.1:9: Connection
 * refused"). The function that decides an error records it once; callers
 * only propagate the status. Nothing here allocates.
 */
#ifndef TW_PLATFORM_ERROR_H
#define TW_PLATFORM_ERROR_H

#include <stddef.h>

#include "tensorwire/tensorwire.h"

#define TW_DETAIL_MAX 512

/* Records `fmt` as this thread's last error and returns `status`. */
tw_status_t tw__api_fail(tw_status_t status, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Clears this thread's last error (called on entry of API functions). */
void tw__api_clear(void);
/* snprintf into a detail buffer (never overflows, always NUL-terminated). */
void tw__detail(char *buf, size_t buflen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* TW_PLATFORM_ERROR_H */
