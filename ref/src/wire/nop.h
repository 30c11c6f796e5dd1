/*
 * nop.h - encoder and decoder for the libnop value encoding that TensorPipe
 * puts on the wire (spec/wire.md section 1).
 *
 * The writer emits canonical (shortest) forms for the declared type; the
 * reader accepts every width stock accepts for that type and nothing else.
 * Readers are pure functions over (bytes, length): they never read past the
 * end, never abort, and report the first problem as TW_ERR_PROTO with a
 * detail naming the field path and what was wrong. Any allocation a caller
 * makes from a decoded count is bounded by the bytes left (see
 * tw__nop_get_array_count).
 *
 * This file must not know about TensorPipe packet types: see packets.h.
 */
#ifndef TW_WIRE_NOP_H
#define TW_WIRE_NOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Prefix bytes (spec/wire.md 1.2). */
enum {
	TW_NOP_U8 = 0x80, TW_NOP_U16 = 0x81, TW_NOP_U32 = 0x82, TW_NOP_U64 = 0x83,
	TW_NOP_I8 = 0x84, TW_NOP_I16 = 0x85, TW_NOP_I32 = 0x86, TW_NOP_I64 = 0x87,
	TW_NOP_F32 = 0x88, TW_NOP_F64 = 0x89,
	TW_NOP_VARIANT = 0xb8, TW_NOP_STRUCT = 0xb9, TW_NOP_ARRAY = 0xba, TW_NOP_MAP = 0xbb,
	TW_NOP_BINARY = 0xbc, TW_NOP_STRING = 0xbd, TW_NOP_NIL = 0xbe,
};

/* ---- writer ------------------------------------------------------------------ */

/* A growable output buffer. On allocation failure `failed` is set and further
 * puts are no-ops; check it once at the end (tw__nop_writer_finish). An
 * encoder given a value it cannot represent (e.g. a packet kind outside its
 * enum) sets `invalid` instead of writing garbage. */
typedef struct tw_nop_writer {
	uint8_t *buf;
	size_t len;
	size_t cap;
	bool failed;
	bool invalid;
} tw_nop_writer;

void tw__nop_writer_init(tw_nop_writer *w);
void tw__nop_writer_free(tw_nop_writer *w);
/* TW_OK; TW_ERR_NOMEM if any put failed to grow the buffer; TW_ERR_INVAL if
 * an encoder was given a value it cannot represent. */
TW_NODISCARD tw_status_t tw__nop_writer_finish(const tw_nop_writer *w);
/* Appends raw bytes (no prefix): for callers that splice pre-encoded values. */
void tw__nop_put_raw(tw_nop_writer *w, const void *bytes, size_t n);

void tw__nop_put_uint(tw_nop_writer *w, uint64_t v);           /* any unsigned type */
void tw__nop_put_int(tw_nop_writer *w, int64_t v);             /* any signed type */
void tw__nop_put_bool(tw_nop_writer *w, bool v);
void tw__nop_put_f32(tw_nop_writer *w, float v);
void tw__nop_put_f64(tw_nop_writer *w, double v);
void tw__nop_put_string(tw_nop_writer *w, const void *s, size_t n);
void tw__nop_put_binary(tw_nop_writer *w, const void *bytes, size_t n); /* byte length */
void tw__nop_put_struct(tw_nop_writer *w, uint64_t num_members);
void tw__nop_put_array(tw_nop_writer *w, uint64_t count);
void tw__nop_put_map(tw_nop_writer *w, uint64_t count);
void tw__nop_put_variant(tw_nop_writer *w, int32_t index);     /* then the element */
void tw__nop_put_nil(tw_nop_writer *w);
/* vector<uint64_t> as Binary: bc, u(8*n), raw little-endian elements. */
void tw__nop_put_u64_vector(tw_nop_writer *w, const uint64_t *v, size_t n);

/* ---- reader ------------------------------------------------------------------ */

#define TW_NOP_DETAIL_MAX 192

typedef struct tw_nop_reader {
	const uint8_t *p;
	size_t len;
	size_t pos;
	const char *field;  /* current field path for error messages, e.g. "Brochure.transports" */
	char detail[TW_NOP_DETAIL_MAX];  /* set on the first error */
} tw_nop_reader;

void tw__nop_reader_init(tw_nop_reader *r, const void *bytes, size_t len);
static inline size_t tw__nop_remaining(const tw_nop_reader *r) { return r->len - r->pos; }

/* Unsigned integer of a declared width in bytes (1, 2, 4, 8): accepts fixint
 * 00-7f and the U8..U64 prefixes up to that width. */
TW_NODISCARD tw_status_t tw__nop_get_uint(tw_nop_reader *r, unsigned width, uint64_t *out);
/* Signed integer of a declared width: fixints 00-7f, c0-ff, I8..I64 up to width. */
TW_NODISCARD tw_status_t tw__nop_get_int(tw_nop_reader *r, unsigned width, int64_t *out);
TW_NODISCARD tw_status_t tw__nop_get_bool(tw_nop_reader *r, bool *out);
TW_NODISCARD tw_status_t tw__nop_get_f32(tw_nop_reader *r, float *out);
TW_NODISCARD tw_status_t tw__nop_get_f64(tw_nop_reader *r, double *out);
/* String: a view into the input (not NUL-terminated, not copied). */
TW_NODISCARD tw_status_t tw__nop_get_string(tw_nop_reader *r, const uint8_t **s, size_t *n);
TW_NODISCARD tw_status_t tw__nop_get_binary(tw_nop_reader *r, const uint8_t **b, size_t *n);
/* Structure header whose member count must equal `num_members` exactly. */
TW_NODISCARD tw_status_t tw__nop_get_struct(tw_nop_reader *r, uint64_t num_members);
/* Array / map header. The count is rejected (TW_ERR_PROTO) if the remaining
 * bytes cannot hold `count` elements of at least `min_elem_size` bytes each
 * (a map pair counts as one element), so count * elem is bounded by input. */
TW_NODISCARD tw_status_t tw__nop_get_array_count(tw_nop_reader *r, size_t min_elem_size,
                                                 size_t *count);
TW_NODISCARD tw_status_t tw__nop_get_map_count(tw_nop_reader *r, size_t min_pair_size,
                                               size_t *count);
/* Variant index in [-1, num_alternatives); for -1 the Nil element is consumed too. */
TW_NODISCARD tw_status_t tw__nop_get_variant(tw_nop_reader *r, int32_t num_alternatives,
                                             int32_t *index);
/* True (and consumed) if the next byte is Nil; false if not; error if at end. */
TW_NODISCARD tw_status_t tw__nop_get_optional_nil(tw_nop_reader *r, bool *is_nil);
/* vector<uint64_t> as Binary; the byte length must be a multiple of 8. The
 * elements are copied into a malloc'd array (*v NULL when n = 0). */
TW_NODISCARD tw_status_t tw__nop_get_u64_vector(tw_nop_reader *r, uint64_t **v, size_t *n);

/* Skips one complete value of any type TensorPipe can put on the wire,
 * checking only what can be checked without knowing the declared type:
 * prefixes are known and not reserved/Table/Error/Handle/Extension, payloads
 * and lengths fit, containers nest at most `max_depth` deep, and an empty
 * variant (index -1) holds Nil. Linear time: every element costs >= 1 byte. */
TW_NODISCARD tw_status_t tw__nop_skip_value(tw_nop_reader *r, unsigned max_depth);

/* Name of a prefix byte for messages: "U8", "String", "positive fixint"... */
const char *tw__nop_prefix_name(uint8_t prefix);

/* Records an error (first one wins) and returns TW_ERR_PROTO. The message is
 * prefixed with the current field path ("Brochure.transports: "). */
tw_status_t tw__nop_fail(tw_nop_reader *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif /* TW_WIRE_NOP_H */
