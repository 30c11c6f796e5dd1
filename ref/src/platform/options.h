/*
 * options.h - the one parser for "key=value,key=value" option strings that
 * tw_context_register_transport/_channel hand to a backend, so each
 * backend declares a table instead of splitting strings itself, and every
 * bad option is reported the same way: the backend, the key, what it
 * accepts.
 *
 * Values: TW_OPT_U64 takes a decimal number with an optional binary suffix
 * (k, m, g, t: KiB, MiB, GiB, TiB) within [min, max]; TW_OPT_STR takes any
 * text without ',' that fits the field (NUL-terminated); TW_OPT_BOOL takes
 * 0/1/true/false/yes/no. A key given twice: the last wins.
 *
 * Nothing here allocates or keeps state; it must not know what any option
 * means.
 */
#ifndef TW_PLATFORM_OPTIONS_H
#define TW_PLATFORM_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"

typedef enum tw_opt_type { TW_OPT_U64, TW_OPT_STR, TW_OPT_BOOL } tw_opt_type;

typedef struct tw_option {
	const char *key;
	tw_opt_type type;
	size_t offset; /* where in the destination struct (offsetof) */
	size_t size;   /* TW_OPT_STR: the field's size, NUL included */
	uint64_t min, max; /* TW_OPT_U64 */
} tw_option;

/* Parses `options` (NULL or "" is nothing to do) against `table` into
 * `dest`. A key not in the table is copied to `rest` ("k=v,k=v", at most
 * rest_len bytes with its NUL) when rest is not NULL, and is an error
 * otherwise. TW_ERR_INVAL with a detail such as "shm transport: option
 * 'ring_bytes=3': must be a power of two from 8 to 1g" on any bad item;
 * dest may then hold some of the values. */
TW_NODISCARD tw_status_t tw__options_parse(const char *who, const char *options,
                                           const tw_option *table, size_t num_options,
                                           void *dest, char *rest, size_t rest_len,
                                           char *detail, size_t detail_len);

#endif /* TW_PLATFORM_OPTIONS_H */
