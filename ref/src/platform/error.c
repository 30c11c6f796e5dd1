/*
 * error.c - tw_last_error(), tw_status_name() and detail formatting.
 */
#include "platform/error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[TW_DETAIL_MAX];

const char *tw_last_error(void)
{
	return last_error;
}

tw_status_t tw__api_fail(tw_status_t status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return status;
}

void tw__api_clear(void)
{
	last_error[0] = '\0';
}

void tw__detail(char *buf, size_t buflen, const char *fmt, ...)
{
	if (buflen == 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, buflen, fmt, ap);
	va_end(ap);
}

const char *tw_status_name(tw_status_t status)
{
	switch (status) {
	case TW_OK: return "TW_OK";
	case TW_ERR_NOMEM: return "TW_ERR_NOMEM";
	case TW_ERR_INVAL: return "TW_ERR_INVAL";
	case TW_ERR_PROTO: return "TW_ERR_PROTO";
	case TW_ERR_CLOSED: return "TW_ERR_CLOSED";
	case TW_ERR_EOF: return "TW_ERR_EOF";
	case TW_ERR_TIMEDOUT: return "TW_ERR_TIMEDOUT";
	case TW_ERR_CANCELED: return "TW_ERR_CANCELED";
	case TW_ERR_UNSUPPORTED: return "TW_ERR_UNSUPPORTED";
	case TW_ERR_NODEV: return "TW_ERR_NODEV";
	case TW_ERR_SYS: return "TW_ERR_SYS";
	case TW_ERR_CONNRESET: return "TW_ERR_CONNRESET";
	}
	return "TW_ERR_UNKNOWN";
}
