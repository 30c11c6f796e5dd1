/*
 * nop.c - the libnop value encoding (spec/wire.md section 1): a canonical
 * writer and a reader that accepts exactly what stock TensorPipe's libnop
 * accepts for each declared type.
 *
 * The reader never reads past (bytes, len), never aborts, and reports the
 * first problem once, naming the field path. It must not know about
 * TensorPipe packets (packets.c does).
 */
#include "wire/nop.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "wire/alloc.h"

/* ---- little-endian helpers ------------------------------------------------ */

static void tw__le_store(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t tw__le_load(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* ---- writer ------------------------------------------------------------------ */

void tw__nop_writer_init(tw_nop_writer *w)
{
	memset(w, 0, sizeof(*w));
}

void tw__nop_writer_free(tw_nop_writer *w)
{
	tw__wire_free(w->buf);
	memset(w, 0, sizeof(*w));
}

tw_status_t tw__nop_writer_finish(const tw_nop_writer *w)
{
	if (w->failed)
		return TW_ERR_NOMEM;
	if (w->invalid)
		return TW_ERR_INVAL;
	return TW_OK;
}

/* Makes room for `extra` more bytes; false (and `failed` set) if impossible. */
static bool tw__nop_reserve(tw_nop_writer *w, size_t extra)
{
	if (w->failed)
		return false;
	if (extra <= w->cap - w->len)
		return true;
	if (extra > SIZE_MAX - w->len) {
		w->failed = true;
		return false;
	}
	size_t need = w->len + extra;
	size_t cap = w->cap ? w->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	uint8_t *buf = tw__wire_realloc(w->buf, cap);
	if (!buf) {
		w->failed = true;
		return false;
	}
	w->buf = buf;
	w->cap = cap;
	return true;
}

void tw__nop_put_raw(tw_nop_writer *w, const void *bytes, size_t n)
{
	if (n == 0 || !tw__nop_reserve(w, n))
		return;
	memcpy(w->buf + w->len, bytes, n);
	w->len += n;
}

static void tw__nop_put_byte(tw_nop_writer *w, uint8_t b)
{
	tw__nop_put_raw(w, &b, 1);
}

/* Prefix byte followed by an n-byte little-endian payload. */
static void tw__nop_put_prefixed(tw_nop_writer *w, uint8_t prefix, uint64_t v, unsigned n)
{
	uint8_t tmp[9];
	tmp[0] = prefix;
	tw__le_store(tmp + 1, v, n);
	tw__nop_put_raw(w, tmp, 1 + n);
}

void tw__nop_put_uint(tw_nop_writer *w, uint64_t v)
{
	if (v < 0x80)
		tw__nop_put_byte(w, (uint8_t)v);
	else if (v <= UINT8_MAX)
		tw__nop_put_prefixed(w, TW_NOP_U8, v, 1);
	else if (v <= UINT16_MAX)
		tw__nop_put_prefixed(w, TW_NOP_U16, v, 2);
	else if (v <= UINT32_MAX)
		tw__nop_put_prefixed(w, TW_NOP_U32, v, 4);
	else
		tw__nop_put_prefixed(w, TW_NOP_U64, v, 8);
}

void tw__nop_put_int(tw_nop_writer *w, int64_t v)
{
	if (v >= -64 && v <= 127)
		tw__nop_put_byte(w, (uint8_t)(int8_t)v);  /* 00-7f or c0-ff */
	else if (v >= INT8_MIN && v <= INT8_MAX)
		tw__nop_put_prefixed(w, TW_NOP_I8, (uint64_t)v, 1);
	else if (v >= INT16_MIN && v <= INT16_MAX)
		tw__nop_put_prefixed(w, TW_NOP_I16, (uint64_t)v, 2);
	else if (v >= INT32_MIN && v <= INT32_MAX)
		tw__nop_put_prefixed(w, TW_NOP_I32, (uint64_t)v, 4);
	else
		tw__nop_put_prefixed(w, TW_NOP_I64, (uint64_t)v, 8);
}

void tw__nop_put_bool(tw_nop_writer *w, bool v)
{
	tw__nop_put_byte(w, v ? 1 : 0);
}

void tw__nop_put_f32(tw_nop_writer *w, float v)
{
	uint32_t bits;
	memcpy(&bits, &v, sizeof(bits));
	tw__nop_put_prefixed(w, TW_NOP_F32, bits, 4);
}

void tw__nop_put_f64(tw_nop_writer *w, double v)
{
	uint64_t bits = 0;
	memcpy(&bits, &v, sizeof(bits));
	tw__nop_put_prefixed(w, TW_NOP_F64, bits, 8);
}

void tw__nop_put_string(tw_nop_writer *w, const void *s, size_t n)
{
	tw__nop_put_byte(w, TW_NOP_STRING);
	tw__nop_put_uint(w, n);
	tw__nop_put_raw(w, s, n);
}

void tw__nop_put_binary(tw_nop_writer *w, const void *bytes, size_t n)
{
	tw__nop_put_byte(w, TW_NOP_BINARY);
	tw__nop_put_uint(w, n);
	tw__nop_put_raw(w, bytes, n);
}

void tw__nop_put_struct(tw_nop_writer *w, uint64_t num_members)
{
	tw__nop_put_byte(w, TW_NOP_STRUCT);
	tw__nop_put_uint(w, num_members);
}

void tw__nop_put_array(tw_nop_writer *w, uint64_t count)
{
	tw__nop_put_byte(w, TW_NOP_ARRAY);
	tw__nop_put_uint(w, count);
}

void tw__nop_put_map(tw_nop_writer *w, uint64_t count)
{
	tw__nop_put_byte(w, TW_NOP_MAP);
	tw__nop_put_uint(w, count);
}

void tw__nop_put_variant(tw_nop_writer *w, int32_t index)
{
	tw__nop_put_byte(w, TW_NOP_VARIANT);
	tw__nop_put_int(w, index);
}

void tw__nop_put_nil(tw_nop_writer *w)
{
	tw__nop_put_byte(w, TW_NOP_NIL);
}

void tw__nop_put_u64_vector(tw_nop_writer *w, const uint64_t *v, size_t n)
{
	if (n > SIZE_MAX / 8) {
		w->invalid = true;
		return;
	}
	tw__nop_put_byte(w, TW_NOP_BINARY);
	tw__nop_put_uint(w, (uint64_t)n * 8);
	if (!tw__nop_reserve(w, n * 8))
		return;
	for (size_t i = 0; i < n; i++)
		tw__le_store(w->buf + w->len + 8 * i, v[i], 8);
	w->len += n * 8;
}

/* ---- reader ------------------------------------------------------------------ */

void tw__nop_reader_init(tw_nop_reader *r, const void *bytes, size_t len)
{
	memset(r, 0, sizeof(*r));
	r->p = bytes;
	r->len = bytes ? len : 0;
}

tw_status_t tw__nop_fail(tw_nop_reader *r, const char *fmt, ...)
{
	if (r->detail[0] != '\0')
		return TW_ERR_PROTO;
	int n = snprintf(r->detail, sizeof(r->detail), "%s: ",
	                 r->field && r->field[0] ? r->field : "value");
	if (n < 0 || (size_t)n >= sizeof(r->detail))
		return TW_ERR_PROTO;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->detail + n, sizeof(r->detail) - (size_t)n, fmt, ap);
	va_end(ap);
	return TW_ERR_PROTO;
}

const char *tw__nop_prefix_name(uint8_t b)
{
	static const char *const ints[] = {"U8", "U16", "U32", "U64", "I8", "I16",
	                                   "I32", "I64", "F32", "F64"};
	static const char *const ext[] = {"Table", "Error", "Handle", "Variant", "Structure",
	                                  "Array", "Map", "Binary", "String", "Nil",
	                                  "Extension"};
	if (b <= 0x7f)
		return "positive fixint";
	if (b >= 0xc0)
		return "negative fixint";
	if (b <= 0x89)
		return ints[b - 0x80];
	if (b >= 0xb5)
		return ext[b - 0xb5];
	return "reserved";
}

/* Consumes the prefix byte. */
static tw_status_t tw__nop_take_prefix(tw_nop_reader *r, const char *what, uint8_t *b)
{
	if (r->pos >= r->len)
		return tw__nop_fail(r, "%s expected, but the input ends here", what);
	*b = r->p[r->pos++];
	return TW_OK;
}

/* Consumes an n-byte little-endian payload after `prefix`; `what` names the
 * value for messages ("string length", "int32"). */
static tw_status_t tw__nop_take_payload(tw_nop_reader *r, const char *what, uint8_t prefix,
                                        unsigned n, uint64_t *v)
{
	if (tw__nop_remaining(r) < n)
		return tw__nop_fail(r, "%s: %s needs %u payload byte%s, only %zu left", what,
		                    tw__nop_prefix_name(prefix), n, n == 1 ? "" : "s",
		                    tw__nop_remaining(r));
	*v = tw__le_load(r->p + r->pos, n);
	r->pos += n;
	return TW_OK;
}

static bool tw__nop_width_ok(unsigned width)
{
	return width == 1 || width == 2 || width == 4 || width == 8;
}

/* Unsigned integer read with a description for messages ("uint64", "string
 * length", ...). Accepts fixint 00-7f and U8..U(width) (spec 1.3). */
static tw_status_t tw__nop_get_uint_as(tw_nop_reader *r, unsigned width, const char *what,
                                       uint64_t *out)
{
	uint8_t b = 0;
	tw_status_t st = tw__nop_take_prefix(r, what, &b);
	if (st != TW_OK)
		return st;
	if (b <= 0x7f) {
		*out = b;
		return TW_OK;
	}
	if (b >= TW_NOP_U8 && b <= TW_NOP_U64) {
		unsigned n = 1u << (b - TW_NOP_U8);
		if (n <= width)
			return tw__nop_take_payload(r, what, b, n, out);
	}
	r->pos--;  /* point at the offending byte for callers that inspect pos */
	return tw__nop_fail(r, "%s: unexpected encoding 0x%02x (%s); a uint%u takes fixint or U8..U%u",
	                    what, b, tw__nop_prefix_name(b), width * 8, width * 8);
}

tw_status_t tw__nop_get_uint(tw_nop_reader *r, unsigned width, uint64_t *out)
{
	if (!tw__nop_width_ok(width))
		return TW_ERR_INVAL;
	static const char *const names[] = {"", "uint8", "uint16", "", "uint32", "", "", "", "uint64"};
	uint64_t v = 0;
	tw_status_t st = tw__nop_get_uint_as(r, width, names[width], &v);
	if (st == TW_OK)
		*out = v;
	return st;
}

tw_status_t tw__nop_get_int(tw_nop_reader *r, unsigned width, int64_t *out)
{
	if (!tw__nop_width_ok(width))
		return TW_ERR_INVAL;
	static const char *const names[] = {"", "int8", "int16", "", "int32", "", "", "", "int64"};
	uint8_t b = 0;
	tw_status_t st = tw__nop_take_prefix(r, names[width], &b);
	if (st != TW_OK)
		return st;
	if (b <= 0x7f || b >= 0xc0) {
		*out = (int8_t)b;
		return TW_OK;
	}
	if (b >= TW_NOP_I8 && b <= TW_NOP_I64) {
		unsigned n = 1u << (b - TW_NOP_I8);
		if (n <= width) {
			uint64_t u = 0;
			st = tw__nop_take_payload(r, names[width], b, n, &u);
			if (st != TW_OK)
				return st;
			/* sign-extend the n-byte two's complement value */
			unsigned shift = 64 - 8 * n;
			*out = (int64_t)(u << shift) >> shift;
			return TW_OK;
		}
	}
	r->pos--;
	return tw__nop_fail(r, "%s: unexpected encoding 0x%02x (%s); an int%u takes fixint or "
	                    "I8..I%u", names[width], b, tw__nop_prefix_name(b), width * 8,
	                    width * 8);
}

tw_status_t tw__nop_get_bool(tw_nop_reader *r, bool *out)
{
	uint8_t b = 0;
	tw_status_t st = tw__nop_take_prefix(r, "bool", &b);
	if (st != TW_OK)
		return st;
	if (b > 1) {
		r->pos--;
		return tw__nop_fail(r, "unexpected encoding 0x%02x (%s) for a bool (00 or 01)", b,
		                    tw__nop_prefix_name(b));
	}
	*out = b == 1;
	return TW_OK;
}

/* Consumes `expected` or fails naming what was found instead. */
static tw_status_t tw__nop_expect(tw_nop_reader *r, uint8_t expected)
{
	uint8_t b = 0;
	tw_status_t st = tw__nop_take_prefix(r, tw__nop_prefix_name(expected), &b);
	if (st != TW_OK)
		return st;
	if (b != expected) {
		r->pos--;
		return tw__nop_fail(r, "expected %s (0x%02x), got 0x%02x (%s)",
		                    tw__nop_prefix_name(expected), expected, b,
		                    tw__nop_prefix_name(b));
	}
	return TW_OK;
}

tw_status_t tw__nop_get_f32(tw_nop_reader *r, float *out)
{
	uint64_t bits = 0;
	tw_status_t st = tw__nop_expect(r, TW_NOP_F32);
	if (st == TW_OK)
		st = tw__nop_take_payload(r, "float", TW_NOP_F32, 4, &bits);
	if (st != TW_OK)
		return st;
	uint32_t b32 = (uint32_t)bits;
	memcpy(out, &b32, sizeof(*out));
	return TW_OK;
}

tw_status_t tw__nop_get_f64(tw_nop_reader *r, double *out)
{
	uint64_t bits = 0;
	tw_status_t st = tw__nop_expect(r, TW_NOP_F64);
	if (st == TW_OK)
		st = tw__nop_take_payload(r, "double", TW_NOP_F64, 8, &bits);
	if (st != TW_OK)
		return st;
	memcpy(out, &bits, sizeof(*out));
	return TW_OK;
}

/* String or Binary: prefix, uint64 byte length, bytes (a view). */
static tw_status_t tw__nop_get_bytes(tw_nop_reader *r, uint8_t prefix, const char *what,
                                     const uint8_t **s, size_t *n)
{
	uint64_t len = 0;
	tw_status_t st = tw__nop_expect(r, prefix);
	if (st == TW_OK)
		st = tw__nop_get_uint_as(r, 8, what, &len);
	if (st != TW_OK)
		return st;
	if (len > tw__nop_remaining(r))
		return tw__nop_fail(r, "%s %" PRIu64 " exceeds the %zu bytes left", what, len,
		                    tw__nop_remaining(r));
	*s = r->p + r->pos;
	*n = (size_t)len;
	r->pos += (size_t)len;
	return TW_OK;
}

tw_status_t tw__nop_get_string(tw_nop_reader *r, const uint8_t **s, size_t *n)
{
	return tw__nop_get_bytes(r, TW_NOP_STRING, "string length", s, n);
}

tw_status_t tw__nop_get_binary(tw_nop_reader *r, const uint8_t **b, size_t *n)
{
	return tw__nop_get_bytes(r, TW_NOP_BINARY, "Binary length", b, n);
}

tw_status_t tw__nop_get_struct(tw_nop_reader *r, uint64_t num_members)
{
	uint64_t n = 0;
	tw_status_t st = tw__nop_expect(r, TW_NOP_STRUCT);
	if (st == TW_OK)
		st = tw__nop_get_uint_as(r, 8, "member count", &n);
	if (st != TW_OK)
		return st;
	if (n != num_members)
		return tw__nop_fail(r, "structure has %" PRIu64 " members, expected %" PRIu64, n,
		                    num_members);
	return TW_OK;
}

/* Array / Map header with a count bounded by the bytes left. */
static tw_status_t tw__nop_get_count(tw_nop_reader *r, uint8_t prefix, const char *what,
                                     size_t min_elem_size, size_t *count)
{
	uint64_t n = 0;
	tw_status_t st = tw__nop_expect(r, prefix);
	if (st == TW_OK)
		st = tw__nop_get_uint_as(r, 8, what, &n);
	if (st != TW_OK)
		return st;
	if (min_elem_size == 0)
		min_elem_size = 1;
	size_t left = tw__nop_remaining(r);
	if (n > left / min_elem_size)
		return tw__nop_fail(r, "%s %" PRIu64 " exceeds what the %zu bytes left can hold "
		                    "(each takes at least %zu)", what, n, left, min_elem_size);
	*count = (size_t)n;
	return TW_OK;
}

tw_status_t tw__nop_get_array_count(tw_nop_reader *r, size_t min_elem_size, size_t *count)
{
	return tw__nop_get_count(r, TW_NOP_ARRAY, "array count", min_elem_size, count);
}

tw_status_t tw__nop_get_map_count(tw_nop_reader *r, size_t min_pair_size, size_t *count)
{
	return tw__nop_get_count(r, TW_NOP_MAP, "map count", min_pair_size, count);
}

tw_status_t tw__nop_get_variant(tw_nop_reader *r, int32_t num_alternatives, int32_t *index)
{
	int64_t idx = 0;
	tw_status_t st = tw__nop_expect(r, TW_NOP_VARIANT);
	if (st == TW_OK)
		st = tw__nop_get_int(r, 4, &idx);
	if (st != TW_OK)
		return st;
	if (idx < -1 || idx >= num_alternatives)
		return tw__nop_fail(r, "variant index %" PRId64 " outside [-1, %" PRId32 ")", idx,
		                    num_alternatives);
	if (idx == -1) {
		uint8_t b = 0;
		st = tw__nop_take_prefix(r, "Nil of the empty variant", &b);
		if (st != TW_OK)
			return st;
		if (b != TW_NOP_NIL) {
			r->pos--;
			return tw__nop_fail(r, "empty variant (index -1) must hold Nil (0xbe), got "
			                    "0x%02x (%s)", b, tw__nop_prefix_name(b));
		}
	}
	*index = (int32_t)idx;
	return TW_OK;
}

tw_status_t tw__nop_get_optional_nil(tw_nop_reader *r, bool *is_nil)
{
	if (r->pos >= r->len)
		return tw__nop_fail(r, "optional value expected, but the input ends here");
	if (r->p[r->pos] == TW_NOP_NIL) {
		r->pos++;
		*is_nil = true;
	} else {
		*is_nil = false;
	}
	return TW_OK;
}

tw_status_t tw__nop_get_u64_vector(tw_nop_reader *r, uint64_t **v, size_t *n)
{
	uint64_t len = 0;
	tw_status_t st = tw__nop_expect(r, TW_NOP_BINARY);
	if (st == TW_OK)
		st = tw__nop_get_uint_as(r, 8, "Binary length", &len);
	if (st != TW_OK)
		return st;
	if (len % 8 != 0)
		return tw__nop_fail(r, "Binary length %" PRIu64 " of a vector<uint64> is not a "
		                    "multiple of 8", len);
	if (len > tw__nop_remaining(r))
		return tw__nop_fail(r, "Binary length %" PRIu64 " exceeds the %zu bytes left", len,
		                    tw__nop_remaining(r));
	size_t count = (size_t)len / 8;
	uint64_t *out = NULL;
	if (count > 0) {
		out = tw__wire_malloc(count * sizeof(*out));
		if (!out) {
			snprintf(r->detail, sizeof(r->detail), "%s: out of memory for %zu uint64s",
			         r->field ? r->field : "value", count);
			return TW_ERR_NOMEM;
		}
		for (size_t i = 0; i < count; i++)
			out[i] = tw__le_load(r->p + r->pos + 8 * i, 8);
	}
	r->pos += (size_t)len;
	*v = out;
	*n = count;
	return TW_OK;
}

/* ---- generic walker ---------------------------------------------------------- */

tw_status_t tw__nop_skip_value(tw_nop_reader *r, unsigned max_depth)
{
	uint8_t b = 0;
	uint64_t v = 0;
	tw_status_t st = tw__nop_take_prefix(r, "value", &b);
	if (st != TW_OK)
		return st;
	if (b <= 0x7f || b >= 0xc0 || b == TW_NOP_NIL)
		return TW_OK;
	if (b >= TW_NOP_U8 && b <= TW_NOP_F64) {
		static const unsigned sizes[] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
		return tw__nop_take_payload(r, "value", b, sizes[b - TW_NOP_U8], &v);
	}
	switch (b) {
	case TW_NOP_STRING:
	case TW_NOP_BINARY: {
		const uint8_t *s = NULL;
		size_t n = 0;
		r->pos--;
		return tw__nop_get_bytes(r, b, b == TW_NOP_STRING ? "string length" : "Binary length",
		                         &s, &n);
	}
	case TW_NOP_STRUCT:
	case TW_NOP_ARRAY:
	case TW_NOP_MAP: {
		size_t count = 0;
		r->pos--;
		st = tw__nop_get_count(r, b, b == TW_NOP_STRUCT ? "member count"
		                             : b == TW_NOP_ARRAY ? "array count" : "map count",
		                       b == TW_NOP_MAP ? 2 : 1, &count);
		if (st != TW_OK)
			return st;
		if (count > 0 && max_depth == 0)
			return tw__nop_fail(r, "values nest deeper than the limit");
		size_t items = b == TW_NOP_MAP ? 2 * count : count;
		for (size_t i = 0; i < items; i++) {
			st = tw__nop_skip_value(r, max_depth - 1);
			if (st != TW_OK)
				return st;
		}
		return TW_OK;
	}
	case TW_NOP_VARIANT: {
		int64_t idx = 0;
		st = tw__nop_get_int(r, 4, &idx);
		if (st != TW_OK)
			return st;
		if (idx < -1)
			return tw__nop_fail(r, "variant index %" PRId64 " below -1", idx);
		if (idx == -1) {
			uint8_t nil = 0;
			st = tw__nop_take_prefix(r, "Nil of the empty variant", &nil);
			if (st != TW_OK)
				return st;
			if (nil != TW_NOP_NIL) {
				r->pos--;
				return tw__nop_fail(r, "empty variant (index -1) must hold Nil (0xbe), "
				                    "got 0x%02x (%s)", nil, tw__nop_prefix_name(nil));
			}
			return TW_OK;
		}
		if (max_depth == 0)
			return tw__nop_fail(r, "values nest deeper than the limit");
		return tw__nop_skip_value(r, max_depth - 1);
	}
	default:
		r->pos--;
		return tw__nop_fail(r, "prefix 0x%02x (%s) is not used by TensorPipe", b,
		                    tw__nop_prefix_name(b));
	}
}
