/*
 * nop_test.c - unit tests of the libnop value codec (nop.c): the reference
 * vectors of spec/wire.md 1.14, which prefixes each declared type accepts
 * (all 256 prefix bytes for every integer width), truncation at every byte,
 * huge lengths and counts rejected before any allocation, round trips of
 * boundary values, the generic walker, and out-of-memory paths.
 */
#include <inttypes.h>
#include <math.h>

#include "wire/alloc.h"
#include "wire/nop.h"
#include "wire/test_util.h"

typedef enum kind {
	K_U8, K_U16, K_U32, K_U64, K_I8, K_I16, K_I32, K_I64, K_BOOL, K_F32, K_F64, K_STRING,
	K_BINARY,
} kind;

/* One value of spec/wire.md 1.14 and its encoding. */
typedef struct vec {
	kind k;
	uint64_t u;   /* unsigned value, or bool */
	int64_t i;    /* signed value */
	double f;
	const char *s;  /* string / binary contents (hex for binary) */
	const char *hex;
} vec;

static const vec vectors[] = {
	{K_U8, 5, 0, 0, NULL, "05"},
	{K_U8, 127, 0, 0, NULL, "7f"},
	{K_U8, 128, 0, 0, NULL, "80 80"},
	{K_U16, 255, 0, 0, NULL, "80 ff"},
	{K_U16, 256, 0, 0, NULL, "81 00 01"},
	{K_U32, 65535, 0, 0, NULL, "81 ff ff"},
	{K_U32, 65536, 0, 0, NULL, "82 00 00 01 00"},
	{K_U64, 4294967295u, 0, 0, NULL, "82 ff ff ff ff"},
	{K_U64, 4294967296u, 0, 0, NULL, "83 00 00 00 00 01 00 00 00"},
	{K_U64, 0x0123456789abcdefu, 0, 0, NULL, "83 ef cd ab 89 67 45 23 01"},
	{K_I8, 0, -1, 0, NULL, "ff"},
	{K_I8, 0, -64, 0, NULL, "c0"},
	{K_I8, 0, -65, 0, NULL, "84 bf"},
	{K_I32, 0, 128, 0, NULL, "85 80 00"},
	{K_I32, 0, -128, 0, NULL, "84 80"},
	{K_I32, 0, -129, 0, NULL, "85 7f ff"},
	{K_I32, 0, 32768, 0, NULL, "86 00 80 00 00"},
	{K_I32, 0, -100000, 0, NULL, "86 60 79 fe ff"},
	{K_I64, 0, -4294967296LL, 0, NULL, "87 00 00 00 00 ff ff ff ff"},
	{K_BOOL, 0, 0, 0, NULL, "00"},
	{K_BOOL, 1, 0, 0, NULL, "01"},
	{K_F32, 0, 0, 1.0, NULL, "88 00 00 80 3f"},
	{K_F64, 0, 0, 1.0, NULL, "89 00 00 00 00 00 00 f0 3f"},
	{K_STRING, 0, 0, 0, "", "bd 00"},
	{K_STRING, 0, 0, 0, "abc", "bd 03 61 62 63"},
	{K_BINARY, 0, 0, 0, "01000000", "bc 04 01 00 00 00"},  /* vector<uint32_t>{1} */
};

static unsigned kind_width(kind k)
{
	switch (k) {
	case K_U8: case K_I8: return 1;
	case K_U16: case K_I16: return 2;
	case K_U32: case K_I32: return 4;
	default: return 8;
	}
}

static void encode_vec(tw_nop_writer *w, const vec *v)
{
	uint8_t bin[64];
	long n;
	switch (v->k) {
	case K_U8: case K_U16: case K_U32: case K_U64: tw__nop_put_uint(w, v->u); break;
	case K_I8: case K_I16: case K_I32: case K_I64: tw__nop_put_int(w, v->i); break;
	case K_BOOL: tw__nop_put_bool(w, v->u != 0); break;
	case K_F32: tw__nop_put_f32(w, (float)v->f); break;
	case K_F64: tw__nop_put_f64(w, v->f); break;
	case K_STRING: tw__nop_put_string(w, v->s, strlen(v->s)); break;
	case K_BINARY:
		n = tw_test_unhex(v->s, bin, sizeof(bin));
		tw__nop_put_binary(w, bin, (size_t)n);
		break;
	}
}

/* Decodes the vector's declared type; returns the status, checks the value. */
static tw_status_t decode_vec(tw_nop_reader *r, const vec *v, int *value_ok)
{
	uint64_t u = 0;
	int64_t i = 0;
	bool b = false;
	float f = 0;
	double d = 0;
	const uint8_t *s = NULL;
	size_t n = 0;
	uint8_t bin[64];
	tw_status_t st = TW_OK;
	*value_ok = 0;
	switch (v->k) {
	case K_U8: case K_U16: case K_U32: case K_U64:
		st = tw__nop_get_uint(r, kind_width(v->k), &u);
		*value_ok = u == v->u;
		break;
	case K_I8: case K_I16: case K_I32: case K_I64:
		st = tw__nop_get_int(r, kind_width(v->k), &i);
		*value_ok = i == v->i;
		break;
	case K_BOOL:
		st = tw__nop_get_bool(r, &b);
		*value_ok = b == (v->u != 0);
		break;
	case K_F32:
		st = tw__nop_get_f32(r, &f);
		*value_ok = f == (float)v->f;
		break;
	case K_F64:
		st = tw__nop_get_f64(r, &d);
		*value_ok = d == v->f;
		break;
	case K_STRING:
		st = tw__nop_get_string(r, &s, &n);
		*value_ok = n == strlen(v->s) && (n == 0 || memcmp(s, v->s, n) == 0);
		break;
	case K_BINARY:
		st = tw__nop_get_binary(r, &s, &n);
		*value_ok = (long)n == tw_test_unhex(v->s, bin, sizeof(bin)) &&
		            memcmp(s, bin, n) == 0;
		break;
	}
	return st;
}

static void test_reference_vectors(void)
{
	for (size_t k = 0; k < sizeof(vectors) / sizeof(vectors[0]); k++) {
		const vec *v = &vectors[k];
		uint8_t want[64];
		long want_n = tw_test_unhex(v->hex, want, sizeof(want));
		CHECK(want_n > 0);

		/* encoder is canonical */
		tw_nop_writer w;
		tw__nop_writer_init(&w);
		encode_vec(&w, v);
		CHECK(tw__nop_writer_finish(&w) == TW_OK);
		CHECKF(tw_test_bytes_eq(v->hex, w.buf, w.len, want, (size_t)want_n), "vector %zu", k);
		tw__nop_writer_free(&w);

		/* decoder reads it back and consumes exactly the encoding */
		tw_nop_reader r;
		int ok;
		tw__nop_reader_init(&r, want, (size_t)want_n);
		CHECKF(decode_vec(&r, v, &ok) == TW_OK, "vector %s: %s", v->hex, r.detail);
		CHECKF(ok, "vector %s decoded to a different value", v->hex);
		CHECK(r.pos == (size_t)want_n);

		/* the generic walker agrees on the length */
		tw__nop_reader_init(&r, want, (size_t)want_n);
		CHECK(tw__nop_skip_value(&r, 8) == TW_OK && r.pos == (size_t)want_n);

		/* every truncation fails cleanly, with a detail, and never reads past the end */
		for (long cut = 0; cut < want_n; cut++) {
			uint8_t *copy = malloc(cut ? (size_t)cut : 1);
			memcpy(copy, want, (size_t)cut);
			tw__nop_reader_init(&r, copy, (size_t)cut);
			tw_status_t st = decode_vec(&r, v, &ok);
			CHECKF(st == TW_ERR_PROTO, "vector %s cut at %ld accepted", v->hex, cut);
			CHECK(r.detail[0] != '\0');
			CHECK(r.pos <= (size_t)cut);
			tw__nop_reader_init(&r, copy, (size_t)cut);
			CHECK(tw__nop_skip_value(&r, 8) == TW_ERR_PROTO);
			free(copy);
		}
	}
}

/* Every prefix byte against every declared integer type: accepted exactly
 * when stock's libnop accepts it (spec 1.3), with the right value. */
static void test_integer_prefixes(void)
{
	static const unsigned widths[] = {1, 2, 4, 8};
	uint8_t buf[9];
	for (unsigned wi = 0; wi < 4; wi++) {
		unsigned width = widths[wi];
		for (unsigned b = 0; b < 256; b++) {
			buf[0] = (uint8_t)b;
			for (unsigned j = 1; j < 9; j++)
				buf[j] = (uint8_t)(0xa0 + j);  /* payload a1 a2 ... */

			/* unsigned */
			bool fix = b <= 0x7f;
			bool pfx = b >= 0x80 && b <= 0x83 && (1u << (b - 0x80)) <= width;
			tw_nop_reader r;
			uint64_t u = 0;
			tw__nop_reader_init(&r, buf, sizeof(buf));
			tw_status_t st = tw__nop_get_uint(&r, width, &u);
			CHECKF((st == TW_OK) == (fix || pfx), "uint%u prefix %02x: %d", width * 8, b, st);
			if (fix) {
				CHECK(u == b && r.pos == 1);
			} else if (pfx) {
				unsigned n = 1u << (b - 0x80);
				uint64_t want = 0;
				for (unsigned j = 0; j < n; j++)
					want |= (uint64_t)buf[1 + j] << (8 * j);
				CHECK(u == want && r.pos == 1 + n);
			} else {
				CHECK(strstr(r.detail, "unexpected encoding") != NULL);
			}

			/* signed */
			bool sfix = b <= 0x7f || b >= 0xc0;
			bool spfx = b >= 0x84 && b <= 0x87 && (1u << (b - 0x84)) <= width;
			int64_t i = 0;
			tw__nop_reader_init(&r, buf, sizeof(buf));
			st = tw__nop_get_int(&r, width, &i);
			CHECKF((st == TW_OK) == (sfix || spfx), "int%u prefix %02x: %d", width * 8, b, st);
			if (sfix) {
				CHECK(i == (int8_t)b && r.pos == 1);
			} else if (spfx) {
				unsigned n = 1u << (b - 0x84);
				uint64_t raw = 0;
				for (unsigned j = 0; j < n; j++)
					raw |= (uint64_t)buf[1 + j] << (8 * j);
				/* payload bytes a1.. have the top bit set: the value is negative */
				int64_t want = (int64_t)(raw | (n < 8 ? ~0ull << (8 * n) : 0));
				CHECKF(i == want && r.pos == 1 + n, "int%u %02x: %" PRId64 " vs %" PRId64,
				       width * 8, b, i, want);
			}
		}
	}
	/* non-minimal widths decode to the same value */
	uint8_t nm1[] = {0x83, 5, 0, 0, 0, 0, 0, 0, 0};
	tw_nop_reader r;
	uint64_t u;
	tw__nop_reader_init(&r, nm1, sizeof(nm1));
	CHECK(tw__nop_get_uint(&r, 8, &u) == TW_OK && u == 5);
	uint8_t nm2[] = {0x86, 0xff, 0xff, 0xff, 0xff};
	int64_t i;
	tw__nop_reader_init(&r, nm2, sizeof(nm2));
	CHECK(tw__nop_get_int(&r, 4, &i) == TW_OK && i == -1);
	/* a bad width is a caller bug, not a protocol error */
	tw__nop_reader_init(&r, nm1, sizeof(nm1));
	CHECK(tw__nop_get_uint(&r, 3, &u) == TW_ERR_INVAL);
	CHECK(tw__nop_get_int(&r, 16, &i) == TW_ERR_INVAL);
}

static void roundtrip_uint(uint64_t v, size_t want_len)
{
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__nop_put_uint(&w, v);
	CHECK(tw__nop_writer_finish(&w) == TW_OK);
	CHECKF(w.len == want_len, "uint %" PRIu64 ": %zu bytes, want %zu", v, w.len, want_len);
	tw_nop_reader r;
	uint64_t got = 0;
	tw__nop_reader_init(&r, w.buf, w.len);
	CHECK(tw__nop_get_uint(&r, 8, &got) == TW_OK && got == v && r.pos == w.len);
	/* a narrower declared type rejects it exactly when the prefix is wider */
	for (unsigned width = 1; width < 8; width *= 2) {
		tw__nop_reader_init(&r, w.buf, w.len);
		tw_status_t st = tw__nop_get_uint(&r, width, &got);
		bool fits = w.len == 1 || w.len - 1 <= width;
		CHECKF((st == TW_OK) == fits, "uint %" PRIu64 " as uint%u", v, width * 8);
	}
	tw__nop_writer_free(&w);
}

static void roundtrip_int(int64_t v, size_t want_len)
{
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__nop_put_int(&w, v);
	CHECK(tw__nop_writer_finish(&w) == TW_OK);
	CHECKF(w.len == want_len, "int %" PRId64 ": %zu bytes, want %zu", v, w.len, want_len);
	tw_nop_reader r;
	int64_t got = 0;
	tw__nop_reader_init(&r, w.buf, w.len);
	CHECK(tw__nop_get_int(&r, 8, &got) == TW_OK && got == v && r.pos == w.len);
	tw__nop_writer_free(&w);
}

static void test_boundaries(void)
{
	roundtrip_uint(0, 1);
	roundtrip_uint(127, 1);
	roundtrip_uint(128, 2);
	roundtrip_uint(255, 2);
	roundtrip_uint(256, 3);
	roundtrip_uint(65535, 3);
	roundtrip_uint(65536, 5);
	roundtrip_uint(UINT32_MAX, 5);
	roundtrip_uint((uint64_t)UINT32_MAX + 1, 9);
	roundtrip_uint(UINT64_MAX, 9);

	roundtrip_int(0, 1);
	roundtrip_int(127, 1);
	roundtrip_int(-64, 1);
	roundtrip_int(-65, 2);
	roundtrip_int(-128, 2);
	roundtrip_int(128, 3);    /* signed 128..255 use I16, never U8 */
	roundtrip_int(255, 3);
	roundtrip_int(-129, 3);
	roundtrip_int(INT16_MAX, 3);
	roundtrip_int(INT16_MIN, 3);
	roundtrip_int(INT16_MAX + 1, 5);
	roundtrip_int(INT16_MIN - 1, 5);
	roundtrip_int(INT32_MAX, 5);
	roundtrip_int(INT32_MIN, 5);
	roundtrip_int((int64_t)INT32_MAX + 1, 9);
	roundtrip_int((int64_t)INT32_MIN - 1, 9);
	roundtrip_int(INT64_MAX, 9);
	roundtrip_int(INT64_MIN, 9);

	/* floats: only their own prefix, bit-exact round trip */
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__nop_put_f32(&w, -0.0f);
	tw__nop_put_f64(&w, INFINITY);
	tw__nop_put_f64(&w, 1e-300);
	CHECK(tw__nop_writer_finish(&w) == TW_OK && w.len == 5 + 9 + 9);
	tw_nop_reader r;
	float f;
	double d;
	tw__nop_reader_init(&r, w.buf, w.len);
	CHECK(tw__nop_get_f32(&r, &f) == TW_OK && f == 0.0f && signbit(f));
	CHECK(tw__nop_get_f64(&r, &d) == TW_OK && isinf(d));
	CHECK(tw__nop_get_f64(&r, &d) == TW_OK && d == 1e-300);
	tw__nop_reader_init(&r, w.buf, w.len);
	CHECK(tw__nop_get_f64(&r, &d) == TW_ERR_PROTO);  /* F32 is not an F64 */
	tw__nop_reader_init(&r, w.buf + 5, w.len - 5);
	CHECK(tw__nop_get_f32(&r, &f) == TW_ERR_PROTO);  /* nor the reverse */
	tw__nop_writer_free(&w);

	/* bool is exactly 00 or 01 */
	uint8_t two = 2;
	bool b;
	tw__nop_reader_init(&r, &two, 1);
	CHECK(tw__nop_get_bool(&r, &b) == TW_ERR_PROTO);
}

static void test_strings_and_lengths(void)
{
	tw_nop_reader r;
	const uint8_t *s;
	size_t n;

	/* a non-minimal length is fine (stock reads it as a uint64) */
	uint8_t nm[] = {0xbd, 0x82, 3, 0, 0, 0, 'a', 'b', 'c'};
	tw__nop_reader_init(&r, nm, sizeof(nm));
	CHECK(tw__nop_get_string(&r, &s, &n) == TW_OK && n == 3 && memcmp(s, "abc", 3) == 0);

	/* a signed length prefix is not */
	uint8_t sl[] = {0xbd, 0x84, 3, 'a', 'b', 'c'};
	tw__nop_reader_init(&r, sl, sizeof(sl));
	CHECK(tw__nop_get_string(&r, &s, &n) == TW_ERR_PROTO);

	/* 2^62 with 3 bytes left: rejected, no allocation, detail names the field */
	uint8_t huge[] = {0xbd, 0x83, 0, 0, 0, 0, 0, 0, 0, 0x40, 'a', 'b', 'c'};
	tw__wire_alloc_reset();
	tw__nop_reader_init(&r, huge, sizeof(huge));
	r.field = "Descriptor.tensors[2].sourceDevice.type";
	CHECK(tw__nop_get_string(&r, &s, &n) == TW_ERR_PROTO);
	CHECKF(strcmp(r.detail, "Descriptor.tensors[2].sourceDevice.type: string length "
	                        "4611686018427387904 exceeds the 3 bytes left") == 0,
	       "detail: %s", r.detail);
	CHECK(tw__wire_alloc_calls() == 0);

	/* the first error wins */
	CHECK(tw__nop_fail(&r, "second") == TW_ERR_PROTO);
	CHECK(strstr(r.detail, "second") == NULL);

	/* a string where a binary is declared, and the reverse */
	uint8_t str[] = {0xbd, 0};
	tw__nop_reader_init(&r, str, sizeof(str));
	CHECK(tw__nop_get_binary(&r, &s, &n) == TW_ERR_PROTO);
	CHECK(strstr(r.detail, "expected Binary (0xbc), got 0xbd (String)") != NULL);
	uint8_t bin[] = {0xbc, 0};
	tw__nop_reader_init(&r, bin, sizeof(bin));
	CHECK(tw__nop_get_string(&r, &s, &n) == TW_ERR_PROTO);

	/* embedded NULs are kept */
	uint8_t nul[] = {0xbd, 3, 'a', 0, 'b'};
	tw__nop_reader_init(&r, nul, sizeof(nul));
	CHECK(tw__nop_get_string(&r, &s, &n) == TW_OK && n == 3 && s[1] == 0);
}

static void test_containers(void)
{
	tw_nop_reader r;
	size_t count;

	/* struct member count must be exact; non-minimal width is fine */
	uint8_t st2[] = {0xb9, 0x80, 0x02};
	tw__nop_reader_init(&r, st2, sizeof(st2));
	CHECK(tw__nop_get_struct(&r, 2) == TW_OK && r.pos == 3);
	uint8_t st3[] = {0xb9, 0x03};
	tw__nop_reader_init(&r, st3, sizeof(st3));
	CHECK(tw__nop_get_struct(&r, 2) == TW_ERR_PROTO);
	CHECK(strstr(r.detail, "structure has 3 members, expected 2") != NULL);
	tw__nop_reader_init(&r, st3, sizeof(st3));
	CHECK(tw__nop_get_struct(&r, 4) == TW_ERR_PROTO);

	/* array counts bounded by the bytes left / minimal element size */
	uint8_t arr[] = {0xba, 0x03, 1, 2, 3, 4, 5, 6};  /* 6 bytes left */
	tw__nop_reader_init(&r, arr, sizeof(arr));
	CHECK(tw__nop_get_array_count(&r, 2, &count) == TW_OK && count == 3);
	tw__nop_reader_init(&r, arr, sizeof(arr));
	CHECK(tw__nop_get_array_count(&r, 3, &count) == TW_ERR_PROTO);
	tw__nop_reader_init(&r, arr, sizeof(arr));
	CHECK(tw__nop_get_array_count(&r, 0, &count) == TW_OK && count == 3);
	uint8_t huge[] = {0xba, 0x83, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0};
	tw__nop_reader_init(&r, huge, sizeof(huge));
	CHECK(tw__nop_get_array_count(&r, 1, &count) == TW_ERR_PROTO);
	CHECK(strstr(r.detail, "array count 18446744073709551615 exceeds") != NULL);
	huge[0] = 0xbb;
	tw__nop_reader_init(&r, huge, sizeof(huge));
	CHECK(tw__nop_get_map_count(&r, 2, &count) == TW_ERR_PROTO);
	tw__nop_reader_init(&r, huge, sizeof(huge));
	CHECK(tw__nop_get_array_count(&r, 1, &count) == TW_ERR_PROTO);  /* Map is not Array */
	CHECK(strstr(r.detail, "expected Array (0xba), got 0xbb (Map)") != NULL);

	/* variants */
	int32_t idx;
	uint8_t v_empty[] = {0xb8, 0xff, 0xbe};
	tw__nop_reader_init(&r, v_empty, sizeof(v_empty));
	CHECK(tw__nop_get_variant(&r, 2, &idx) == TW_OK && idx == -1 && r.pos == 3);
	uint8_t v_empty_bad[] = {0xb8, 0xff, 0x00};
	tw__nop_reader_init(&r, v_empty_bad, sizeof(v_empty_bad));
	CHECK(tw__nop_get_variant(&r, 2, &idx) == TW_ERR_PROTO);
	CHECK(strstr(r.detail, "must hold Nil") != NULL);
	uint8_t v_minus2[] = {0xb8, 0xfe, 0xbe};
	tw__nop_reader_init(&r, v_minus2, sizeof(v_minus2));
	CHECK(tw__nop_get_variant(&r, 2, &idx) == TW_ERR_PROTO);
	uint8_t v_two[] = {0xb8, 0x02, 0xb9, 0x01, 0x00};
	tw__nop_reader_init(&r, v_two, sizeof(v_two));
	CHECK(tw__nop_get_variant(&r, 2, &idx) == TW_ERR_PROTO);
	CHECK(strstr(r.detail, "variant index 2 outside [-1, 2)") != NULL);
	uint8_t v_i16[] = {0xb8, 0x85, 0x01, 0x00};
	tw__nop_reader_init(&r, v_i16, sizeof(v_i16));
	CHECK(tw__nop_get_variant(&r, 2, &idx) == TW_OK && idx == 1);
	uint8_t v_u8[] = {0xb8, 0x80, 0x01};  /* the index is an int32: U8 is refused */
	tw__nop_reader_init(&r, v_u8, sizeof(v_u8));
	CHECK(tw__nop_get_variant(&r, 2, &idx) == TW_ERR_PROTO);
	uint8_t v_i64[] = {0xb8, 0x87, 1, 0, 0, 0, 0, 0, 0, 0};
	tw__nop_reader_init(&r, v_i64, sizeof(v_i64));
	CHECK(tw__nop_get_variant(&r, 2, &idx) == TW_ERR_PROTO);

	/* optional */
	bool nil;
	uint8_t opt[] = {0xbe, 0xb9};
	tw__nop_reader_init(&r, opt, sizeof(opt));
	CHECK(tw__nop_get_optional_nil(&r, &nil) == TW_OK && nil && r.pos == 1);
	CHECK(tw__nop_get_optional_nil(&r, &nil) == TW_OK && !nil && r.pos == 1);
	tw__nop_reader_init(&r, opt, 0);
	CHECK(tw__nop_get_optional_nil(&r, &nil) == TW_ERR_PROTO);
}

static void test_u64_vector(void)
{
	static const uint64_t ids[] = {1, 2, 0xffffffffffffffffu};
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__nop_put_u64_vector(&w, ids, 2);
	tw__nop_put_u64_vector(&w, NULL, 0);
	tw__nop_put_u64_vector(&w, ids, 3);
	CHECK(tw__nop_writer_finish(&w) == TW_OK);
	uint8_t want[] = {0xbc, 0x10, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xbc, 0x00};
	CHECK(w.len == sizeof(want) + 2 + 24);
	CHECK(tw_test_bytes_eq("vector<uint64>{1,2}", w.buf, sizeof(want), want, sizeof(want)));

	tw_nop_reader r;
	uint64_t *v;
	size_t n;
	tw__nop_reader_init(&r, w.buf, w.len);
	CHECK(tw__nop_get_u64_vector(&r, &v, &n) == TW_OK && n == 2 && v[0] == 1 && v[1] == 2);
	tw__wire_free(v);
	CHECK(tw__nop_get_u64_vector(&r, &v, &n) == TW_OK && n == 0 && v == NULL);
	CHECK(tw__nop_get_u64_vector(&r, &v, &n) == TW_OK && n == 3 && v[2] == ids[2]);
	tw__wire_free(v);
	CHECK(r.pos == w.len);
	tw__nop_writer_free(&w);

	uint8_t odd[] = {0xbc, 0x04, 1, 0, 0, 0};  /* 4 bytes: not a vector<uint64> */
	tw__nop_reader_init(&r, odd, sizeof(odd));
	CHECK(tw__nop_get_u64_vector(&r, &v, &n) == TW_ERR_PROTO);
	CHECK(strstr(r.detail, "not a multiple of 8") != NULL);
	uint8_t arr[] = {0xba, 0x01, 0x01};  /* an Array of uint64 is not what stock sends */
	tw__nop_reader_init(&r, arr, sizeof(arr));
	CHECK(tw__nop_get_u64_vector(&r, &v, &n) == TW_ERR_PROTO);
	uint8_t big[] = {0xbc, 0x83, 0, 0, 0, 0, 0, 0, 0, 0x10, 0};  /* 2^60 bytes */
	tw__wire_alloc_reset();
	tw__nop_reader_init(&r, big, sizeof(big));
	CHECK(tw__nop_get_u64_vector(&r, &v, &n) == TW_ERR_PROTO);
	CHECK(tw__wire_alloc_calls() == 0);

	/* out of memory is TW_ERR_NOMEM, not a protocol error, and leaks nothing */
	uint8_t one[] = {0xbc, 0x08, 7, 0, 0, 0, 0, 0, 0, 0};
	tw__wire_alloc_reset();
	tw__wire_alloc_fail_after(1);
	tw__nop_reader_init(&r, one, sizeof(one));
	CHECK(tw__nop_get_u64_vector(&r, &v, &n) == TW_ERR_NOMEM);
	tw__wire_alloc_reset();
}

static void test_writer_nomem(void)
{
	for (size_t fail = 1; fail <= 3; fail++) {
		tw_nop_writer w;
		tw__nop_writer_init(&w);
		tw__wire_alloc_reset();
		tw__wire_alloc_fail_after(fail);
		for (int i = 0; i < 200; i++)
			tw__nop_put_string(&w, "0123456789", 10);
		tw_status_t st = tw__nop_writer_finish(&w);
		CHECKF(st == TW_ERR_NOMEM, "fail after %zu: %d", fail, st);
		tw__nop_writer_free(&w);
	}
	tw__wire_alloc_reset();
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	for (int i = 0; i < 200; i++)
		tw__nop_put_string(&w, "0123456789", 10);
	CHECK(tw__nop_writer_finish(&w) == TW_OK && w.len == 200 * 12);
	tw__nop_writer_free(&w);
}

static void test_walker(void)
{
	tw_nop_reader r;
	/* a Brochure (spec 3.4) walks as one value */
	uint8_t brochure[128];
	long n = tw_test_unhex("b9 02 bb 01 bd 02 75 76 bd 04 75 76 3a 2a bb 01 bd 05 62 61 73 69 63"
	                       " bb 01 b9 02 bd 03 63 70 75 00 bd 03 61 6e 79", brochure,
	                       sizeof(brochure));
	tw__nop_reader_init(&r, brochure, (size_t)n);
	CHECK(tw__nop_skip_value(&r, 8) == TW_OK && r.pos == (size_t)n);
	/* depth limit */
	tw__nop_reader_init(&r, brochure, (size_t)n);
	CHECK(tw__nop_skip_value(&r, 2) == TW_ERR_PROTO);
	CHECK(strstr(r.detail, "nest deeper") != NULL);
	/* reserved and unused prefixes */
	static const uint8_t bad[] = {0x8a, 0xb4, 0xb5, 0xb6, 0xb7, 0xbf};
	for (size_t i = 0; i < sizeof(bad); i++) {
		tw__nop_reader_init(&r, &bad[i], 1);
		CHECK(tw__nop_skip_value(&r, 8) == TW_ERR_PROTO);
	}
	/* a deeply nested input cannot exhaust the stack */
	uint8_t deep[4096];
	for (size_t i = 0; i + 1 < sizeof(deep); i += 2) {
		deep[i] = 0xba;
		deep[i + 1] = 0x01;
	}
	tw__nop_reader_init(&r, deep, sizeof(deep));
	CHECK(tw__nop_skip_value(&r, 64) == TW_ERR_PROTO);
	/* variants: -1 needs Nil, other indexes one element */
	uint8_t var[] = {0xb8, 0x05, 0xbd, 0x00, 0xb8, 0xff, 0xbe};
	tw__nop_reader_init(&r, var, sizeof(var));
	CHECK(tw__nop_skip_value(&r, 8) == TW_OK && r.pos == 4);
	CHECK(tw__nop_skip_value(&r, 8) == TW_OK && r.pos == 7);
	/* prefix names */
	CHECK(strcmp(tw__nop_prefix_name(0x00), "positive fixint") == 0);
	CHECK(strcmp(tw__nop_prefix_name(0xff), "negative fixint") == 0);
	CHECK(strcmp(tw__nop_prefix_name(0x89), "F64") == 0);
	CHECK(strcmp(tw__nop_prefix_name(0x8a), "reserved") == 0);
	CHECK(strcmp(tw__nop_prefix_name(0xbf), "Extension") == 0);
}

int main(void)
{
	test_reference_vectors();
	test_integer_prefixes();
	test_boundaries();
	test_strings_and_lengths();
	test_containers();
	test_u64_vector();
	test_writer_nomem();
	test_walker();
	return tw_test_done("nop_test");
}
