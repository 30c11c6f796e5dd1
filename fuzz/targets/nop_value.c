/*
 * nop_value.c - fuzz target for the generic libnop value walker
 * (tw__nop_skip_value, spec/wire.md 1) and the typed readers and writers it
 * does not use: the input is read as one value of any type and transcoded to
 * its canonical form (unsigned prefixes as uint64, signed as int64, floats,
 * strings, binaries, containers, variants, Nil). Checks: the walker and the
 * transcoder agree on acceptance and length; the canonical form is never
 * longer, equals the input when the input is canonical, and is a fixed point.
 * Corpus: fuzz/corpus/nop_value/.
 */
#include "fuzz_target.h"

static tw_status_t tw_fuzz_transcode(tw_nop_reader *r, tw_nop_writer *w, unsigned depth)
{
	if (r->pos >= r->len)
		return tw__nop_fail(r, "value expected, but the input ends here");
	uint8_t b = r->p[r->pos];
	tw_status_t st;
	if (b <= 0x7f || (b >= TW_NOP_U8 && b <= TW_NOP_U64)) {
		uint64_t v;
		st = tw__nop_get_uint(r, 8, &v);
		if (st == TW_OK)
			tw__nop_put_uint(w, v);
		return st;
	}
	if (b >= 0xc0 || (b >= TW_NOP_I8 && b <= TW_NOP_I64)) {
		int64_t v;
		st = tw__nop_get_int(r, 8, &v);
		if (st == TW_OK)
			tw__nop_put_int(w, v);
		return st;
	}
	switch (b) {
	case TW_NOP_F32: {
		float f;
		st = tw__nop_get_f32(r, &f);
		if (st == TW_OK)
			tw__nop_put_raw(w, r->p + r->pos - 5, 5);  /* bit-exact, NaNs included */
		return st;
	}
	case TW_NOP_F64: {
		double d;
		st = tw__nop_get_f64(r, &d);
		if (st == TW_OK)
			tw__nop_put_raw(w, r->p + r->pos - 9, 9);
		return st;
	}
	case TW_NOP_STRING:
	case TW_NOP_BINARY: {
		const uint8_t *s;
		size_t n;
		if (b == TW_NOP_STRING) {
			st = tw__nop_get_string(r, &s, &n);
			if (st == TW_OK)
				tw__nop_put_string(w, s, n);
		} else {
			st = tw__nop_get_binary(r, &s, &n);
			if (st == TW_OK)
				tw__nop_put_binary(w, s, n);
		}
		return st;
	}
	case TW_NOP_NIL:
		r->pos++;
		tw__nop_put_nil(w);
		return TW_OK;
	case TW_NOP_STRUCT:
	case TW_NOP_ARRAY:
	case TW_NOP_MAP: {
		size_t n;
		if (b == TW_NOP_MAP) {
			st = tw__nop_get_map_count(r, 2, &n);
			if (st == TW_OK)
				tw__nop_put_map(w, n);
		} else if (b == TW_NOP_ARRAY) {
			st = tw__nop_get_array_count(r, 1, &n);
			if (st == TW_OK)
				tw__nop_put_array(w, n);
		} else {
			/* any member count: read it as the header of a 1-byte-element array */
			uint64_t count;
			r->pos++;
			st = tw__nop_get_uint(r, 8, &count);
			if (st == TW_OK && count > tw__nop_remaining(r))
				st = tw__nop_fail(r, "member count exceeds the bytes left");
			n = (size_t)count;
			if (st == TW_OK)
				tw__nop_put_struct(w, n);
		}
		if (st != TW_OK)
			return st;
		if (n > 0 && depth == 0)
			return tw__nop_fail(r, "values nest deeper than the limit");
		size_t items = b == TW_NOP_MAP ? 2 * n : n;
		for (size_t i = 0; i < items && st == TW_OK; i++)
			st = tw_fuzz_transcode(r, w, depth - 1);
		return st;
	}
	case TW_NOP_VARIANT: {
		int64_t idx;
		r->pos++;
		st = tw__nop_get_int(r, 4, &idx);
		if (st == TW_OK && idx < -1)
			st = tw__nop_fail(r, "variant index below -1");
		if (st != TW_OK)
			return st;
		tw__nop_put_variant(w, (int32_t)idx);
		if (idx == -1) {
			if (r->pos >= r->len || r->p[r->pos] != TW_NOP_NIL)
				return tw__nop_fail(r, "empty variant without Nil");
			r->pos++;
			tw__nop_put_nil(w);
			return TW_OK;
		}
		if (depth == 0)
			return tw__nop_fail(r, "values nest deeper than the limit");
		return tw_fuzz_transcode(r, w, depth - 1);
	}
	default:
		return tw__nop_fail(r, "prefix 0x%02x not used by TensorPipe", b);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tw_nop_reader walk, r;
	tw__nop_reader_init(&walk, data, size);
	tw_status_t walked = tw__nop_skip_value(&walk, TW_FUZZ_WALK_DEPTH);
	TW_FUZZ_ASSERT(walk.pos <= size, "walker went past the end");
	TW_FUZZ_ASSERT(walked == TW_OK || (walked == TW_ERR_PROTO && walk.detail[0]),
	               "walker: %d", walked);

	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__nop_reader_init(&r, data, size);
	tw__wire_alloc_reset();
	tw_status_t st = tw_fuzz_transcode(&r, &w, TW_FUZZ_WALK_DEPTH);
	TW_FUZZ_ASSERT((st == TW_OK) == (walked == TW_OK), "transcoder %d (%s), walker %d (%s)", st,
	               r.detail, walked, walk.detail);
	if (st == TW_OK) {
		TW_FUZZ_ASSERT(r.pos == walk.pos, "transcoder read %zu bytes, walker %zu", r.pos,
		               walk.pos);
		TW_FUZZ_ASSERT(tw__nop_writer_finish(&w) == TW_OK, "writer failed");
		TW_FUZZ_ASSERT(w.len <= r.pos, "canonical %zu bytes, input %zu", w.len, r.pos);
		if (w.len == r.pos)
			TW_FUZZ_ASSERT(memcmp(w.buf, data, w.len) == 0, "not canonical, same length");
		tw_nop_writer w2;
		tw__nop_writer_init(&w2);
		tw_nop_reader r2;
		tw__nop_reader_init(&r2, w.buf, w.len);
		st = tw_fuzz_transcode(&r2, &w2, TW_FUZZ_WALK_DEPTH);
		TW_FUZZ_ASSERT(st == TW_OK && r2.pos == w.len && w2.len == w.len &&
		               memcmp(w2.buf, w.buf, w.len) == 0, "canonical form is not a fixed point");
		tw__nop_writer_free(&w2);
	}
	tw__nop_writer_free(&w);
	return 0;
}
