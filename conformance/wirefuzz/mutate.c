/*
 * mutate.c - structure-aware mutations of a built script (README.md,
 * "Mutations"). Each mutation starts from the well-formed base scenario and
 * breaks one thing: a value's prefix, a count, a length, a member count, a
 * variant index, an integer, a string; a frame's length header; the stream,
 * cut at any byte; or the step list (a frame dropped, doubled, sent on the
 * wrong connection, a connection closed early).
 *
 * wf_mutate_nth() enumerates them all in a fixed order (frame by frame, in
 * the order the scenario sends them), so a run of N inputs always tries the
 * same N first; wf_mutate_random() then draws from the same operators with a
 * seeded generator, sometimes two at once. It must not run anything.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wf.h"

uint64_t wf_rand(uint64_t *state)
{
	/* splitmix64 */
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* ---- encoding helpers ----------------------------------------------------------------- */

size_t wf_enc_uint(uint8_t *o, uint64_t v)
{
	if (v < 0x80) {
		o[0] = (uint8_t)v;
		return 1;
	}
	int w = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffull ? 4 : 8;
	o[0] = w == 1 ? 0x80 : w == 2 ? 0x81 : w == 4 ? 0x82 : 0x83;
	for (int i = 0; i < w; i++)
		o[1 + i] = (uint8_t)(v >> (8 * i));
	return 1 + (size_t)w;
}

/* Fixed-width form with an explicit prefix (non-canonical or wrong on purpose). */
static size_t enc_wide(uint8_t *o, uint8_t prefix, uint64_t v, int width)
{
	o[0] = prefix;
	for (int i = 0; i < width; i++)
		o[1 + i] = (uint8_t)(v >> (8 * i));
	return 1 + (size_t)width;
}

static size_t enc_int(uint8_t *o, int64_t v)
{
	if (v >= -64 && v <= 127) {
		o[0] = (uint8_t)(int8_t)v;
		return 1;
	}
	if (v >= INT8_MIN && v <= INT8_MAX)
		return enc_wide(o, 0x84, (uint64_t)v, 1);
	if (v >= INT16_MIN && v <= INT16_MAX)
		return enc_wide(o, 0x85, (uint64_t)v, 2);
	if (v >= INT32_MIN && v <= INT32_MAX)
		return enc_wide(o, 0x86, (uint64_t)v, 4);
	return enc_wide(o, 0x87, (uint64_t)v, 8);
}

/* ---- the operators ------------------------------------------------------------------------ */

/* Operators on one value; which apply depends on its kind. */
typedef enum vop {
	V_PREFIX_RESERVED, V_PREFIX_NIL, V_PREFIX_CONFUSE, V_DELETE, V_DUPLICATE,
	/* counts: struct members, array/map elements, string/binary lengths */
	V_N_PLUS1, V_N_MINUS1, V_N_ZERO, V_N_HUGE, V_N_MAX,
	/* integers */
	V_INT_ZERO, V_INT_PLUS1, V_INT_MINUS1, V_INT_HUGE, V_INT_MAX, V_INT_NONCANON,
	V_INT_TOO_WIDE,
	/* variants */
	V_VAR_MINUS2, V_VAR_EMPTY, V_VAR_NALTS, V_VAR_127, V_VAR_I32MAX, V_VAR_UNSIGNED,
	V_VAR_NONCANON,
	/* strings and binaries */
	V_STR_RENAME, V_STR_EMPTY, V_STR_LONG, V_STR_NUL, V_BIN_ODD,
	/* nil (an empty optional) */
	V_NIL_STRING, V_NIL_STRUCT0,
	V_COUNT
} vop;

static const char *const vop_names[V_COUNT] = {
	"prefix-reserved", "prefix-nil", "prefix-confused", "value-deleted", "value-doubled",
	"count+1", "count-1", "count=0", "count=2^62", "count=2^64-1",
	"int=0", "int+1", "int-1", "int=2^62", "int=max", "int-noncanonical", "int-too-wide",
	"variant=-2", "variant=-1-not-nil", "variant=alternatives", "variant=127",
	"variant=2^31-1", "variant-unsigned-prefix", "variant-noncanonical",
	"string-renamed", "string-emptied", "string-300-bytes", "string-nul", "binary-odd-length",
	"nil-as-string", "nil-as-empty-struct",
};

static bool is_counted(wf_vkind k)
{
	return k == WF_V_STRUCT || k == WF_V_ARRAY || k == WF_V_MAP || k == WF_V_STRING ||
	       k == WF_V_BINARY;
}

static bool vop_applies(const wf_field *f, vop op)
{
	wf_vkind k = (wf_vkind)f->kind;
	switch (op) {
	case V_PREFIX_RESERVED: case V_DELETE: case V_DUPLICATE:
		return true;
	case V_PREFIX_NIL:
		return k != WF_V_NIL;
	case V_PREFIX_CONFUSE:
		return true;
	case V_N_PLUS1: case V_N_ZERO: case V_N_HUGE: case V_N_MAX:
		return is_counted(k);
	case V_N_MINUS1:
		return is_counted(k) && f->n > 0;
	case V_INT_ZERO: case V_INT_PLUS1: case V_INT_HUGE: case V_INT_NONCANON:
		return k == WF_V_UINT || k == WF_V_INT;
	case V_INT_MINUS1:
		return (k == WF_V_UINT && f->n > 0) || k == WF_V_INT;
	case V_INT_MAX:
		return k == WF_V_UINT || k == WF_V_INT;
	case V_INT_TOO_WIDE:
		return k == WF_V_INT && f->width < 8;
	case V_VAR_MINUS2: case V_VAR_EMPTY: case V_VAR_NALTS: case V_VAR_127: case V_VAR_I32MAX:
	case V_VAR_UNSIGNED: case V_VAR_NONCANON:
		return k == WF_V_VARIANT;
	case V_STR_RENAME: case V_STR_NUL:
		return k == WF_V_STRING && f->n > 0;
	case V_STR_EMPTY:
		return k == WF_V_STRING && f->n > 0;
	case V_STR_LONG:
		return k == WF_V_STRING;
	case V_BIN_ODD:
		return k == WF_V_BINARY && f->n > 0;
	case V_NIL_STRING: case V_NIL_STRUCT0:
		return k == WF_V_NIL;
	case V_COUNT:
		break;
	}
	return false;
}

static uint8_t confused_prefix(wf_vkind k)
{
	switch (k) {
	case WF_V_UINT: return 0x84;   /* a signed prefix for an unsigned type (1.3.c) */
	case WF_V_INT: return 0x80;    /* an unsigned prefix for a signed type (1.3.c) */
	case WF_V_STRING: return 0xbc; /* Binary where a string is declared */
	case WF_V_BINARY: return 0xba; /* Array where an integer vector is declared (1.6.b) */
	case WF_V_STRUCT: return 0xba; /* Array where a structure is declared */
	case WF_V_ARRAY: return 0xbc;  /* Binary where a non-integer vector is declared (1.6.b) */
	case WF_V_MAP: return 0xba;    /* Array where a map is declared */
	case WF_V_VARIANT: return 0xb9;
	case WF_V_NIL: return 0xbd;
	}
	return 0xbf;
}

/* Applies op to field f of step st. Writes the description; 0 or -1. */
static int apply_vop(wf_step *st, const wf_field *f, vop op, int salt, char *desc, size_t dlen)
{
	uint8_t h[32];
	size_t hn = 0;
	const uint8_t reserved[] = {0x8a, 0xb5, 0xb6, 0xb7, 0xbf, 0xa0};
	wf_vkind k = (wf_vkind)f->kind;
	/* the value's payload after its header (string bytes, members, elements) */
	size_t off = f->off, hdr = f->hdr;
	uint64_t n = f->n;
	switch (op) {
	case V_PREFIX_RESERVED:
		h[0] = reserved[(unsigned)salt % sizeof(reserved)];
		snprintf(desc, dlen, "prefix %02x -> %02x", st->body[off], h[0]);
		return wf_step_splice(st, off, 1, h, 1);
	case V_PREFIX_NIL:
		h[0] = 0xbe;
		snprintf(desc, dlen, "prefix %02x -> be (Nil)", st->body[off]);
		return wf_step_splice(st, off, 1, h, 1);
	case V_PREFIX_CONFUSE:
		h[0] = confused_prefix(k);
		snprintf(desc, dlen, "prefix %02x -> %02x", st->body[off], h[0]);
		return wf_step_splice(st, off, 1, h, 1);
	case V_DELETE:
		snprintf(desc, dlen, "the %u-byte value removed", (unsigned)f->len);
		return wf_step_splice(st, off, f->len, NULL, 0);
	case V_DUPLICATE: {
		uint8_t *copy = malloc(f->len ? f->len : 1);
		if (!copy)
			return -1;
		memcpy(copy, st->body + off, f->len);
		snprintf(desc, dlen, "the %u-byte value written twice", (unsigned)f->len);
		int rc = wf_step_splice(st, off + f->len, 0, copy, f->len);
		free(copy);
		return rc;
	}
	case V_N_PLUS1: case V_N_MINUS1: case V_N_ZERO: case V_N_HUGE: case V_N_MAX: {
		uint64_t nv = op == V_N_PLUS1 ? n + 1 : op == V_N_MINUS1 ? n - 1 : op == V_N_ZERO ? 0
		            : op == V_N_HUGE ? (1ull << 62) : UINT64_MAX;
		h[0] = st->body[off];
		hn = 1 + wf_enc_uint(h + 1, nv);
		snprintf(desc, dlen, "%s %" PRIu64 " -> %" PRIu64,
		         k == WF_V_STRUCT ? "member count" : (k == WF_V_STRING || k == WF_V_BINARY)
		                 ? "length" : "count", n, nv);
		return wf_step_splice(st, off, hdr, h, hn);
	}
	case V_INT_ZERO: case V_INT_PLUS1: case V_INT_MINUS1: case V_INT_HUGE: case V_INT_MAX: {
		if (k == WF_V_UINT) {
			uint64_t max = f->width >= 8 ? UINT64_MAX : (1ull << (8 * f->width)) - 1;
			uint64_t nv = op == V_INT_ZERO ? 0 : op == V_INT_PLUS1 ? n + 1
			            : op == V_INT_MINUS1 ? n - 1 : op == V_INT_HUGE ? (1ull << 62) : max;
			hn = wf_enc_uint(h, nv);
			snprintf(desc, dlen, "%" PRIu64 " -> %" PRIu64, n, nv);
		} else {
			int64_t v = (int64_t)n;
			int64_t max = f->width >= 8 ? INT64_MAX : (int64_t)((1ull << (8 * f->width - 1)) - 1);
			int64_t nv = op == V_INT_ZERO ? 0 : op == V_INT_PLUS1 ? v + 1
			           : op == V_INT_MINUS1 ? v - 1 : op == V_INT_HUGE ? -max - 1 : max;
			hn = enc_int(h, nv);
			snprintf(desc, dlen, "%" PRId64 " -> %" PRId64, v, nv);
		}
		return wf_step_splice(st, off, hdr, h, hn);
	}
	case V_INT_NONCANON:
		/* the longest form of the same value: valid (1.3.b) */
		if (k == WF_V_UINT)
			hn = enc_wide(h, f->width >= 8 ? 0x83 : f->width == 4 ? 0x82 : f->width == 2 ? 0x81
			              : 0x80, n, f->width >= 8 ? 8 : f->width);
		else
			hn = enc_wide(h, f->width >= 8 ? 0x87 : f->width == 4 ? 0x86 : f->width == 2 ? 0x85
			              : 0x84, n, f->width >= 8 ? 8 : f->width);
		snprintf(desc, dlen, "value %" PRId64 " in its %d-byte form (valid, 1.3.b)", (int64_t)n,
		         f->width);
		return wf_step_splice(st, off, hdr, h, hn);
	case V_INT_TOO_WIDE:
		hn = enc_wide(h, 0x87, n, 8);
		snprintf(desc, dlen, "value %" PRId64 " as I64 for an int%d", (int64_t)n, f->width * 8);
		return wf_step_splice(st, off, hdr, h, hn);
	case V_VAR_MINUS2: case V_VAR_EMPTY: case V_VAR_NALTS: case V_VAR_127: case V_VAR_I32MAX:
	case V_VAR_UNSIGNED: case V_VAR_NONCANON: {
		int64_t idx = op == V_VAR_MINUS2 ? -2 : op == V_VAR_EMPTY ? -1 : op == V_VAR_NALTS
		            ? f->width : op == V_VAR_127 ? 127 : INT32_MAX;
		h[0] = 0xb8;
		if (op == V_VAR_UNSIGNED) {
			hn = 1 + enc_wide(h + 1, 0x80, n, 1);
			snprintf(desc, dlen, "index %" PRId64 " with the unsigned prefix 80", (int64_t)n);
		} else if (op == V_VAR_NONCANON) {
			hn = 1 + enc_wide(h + 1, 0x85, n, 2);
			snprintf(desc, dlen, "index %" PRId64 " as I16 (valid, 1.11.c)", (int64_t)n);
		} else {
			hn = 1 + enc_int(h + 1, idx);
			snprintf(desc, dlen, "index %" PRId64 " -> %" PRId64, (int64_t)n, idx);
		}
		return wf_step_splice(st, off, hdr, h, hn);
	}
	case V_STR_RENAME: {
		/* same length, every byte 'z' (an unknown name; "cpu" -> "zzz") */
		uint8_t *z = malloc(n);
		if (!z)
			return -1;
		memset(z, 'z', n);
		snprintf(desc, dlen, "'%.*s' -> '%.*s'", (int)(n < 24 ? n : 24), st->body + off + hdr,
		         (int)(n < 24 ? n : 24), z);
		int rc = wf_step_splice(st, off + hdr, n, z, n);
		free(z);
		return rc;
	}
	case V_STR_EMPTY:
		h[0] = 0xbd;
		h[1] = 0x00;
		snprintf(desc, dlen, "'%.*s' -> ''", (int)(n < 24 ? n : 24), st->body + off + hdr);
		return wf_step_splice(st, off, f->len, h, 2);
	case V_STR_LONG: {
		uint8_t big[1 + 9 + 300];
		big[0] = 0xbd;
		size_t ln = wf_enc_uint(big + 1, 300);
		memset(big + 1 + ln, 'x', 300);
		snprintf(desc, dlen, "a 300-byte string instead of %" PRIu64 " bytes", n);
		return wf_step_splice(st, off, f->len, big, 1 + ln + 300);
	}
	case V_STR_NUL:
		h[0] = 0x00;
		snprintf(desc, dlen, "first byte '%c' -> NUL", st->body[off + hdr]);
		return wf_step_splice(st, off + hdr, 1, h, 1);
	case V_BIN_ODD:
		h[0] = 0xbc;
		hn = 1 + wf_enc_uint(h + 1, n - 1);
		snprintf(desc, dlen, "byte length %" PRIu64 " -> %" PRIu64 " (not a multiple of 8)", n,
		         n - 1);
		/* shorten header and drop the last byte so the value stays self-consistent */
		if (wf_step_splice(st, off + hdr + n - 1, 1, NULL, 0))
			return -1;
		return wf_step_splice(st, off, hdr, h, hn);
	case V_NIL_STRING:
		h[0] = 0xbd;
		h[1] = 0x00;
		snprintf(desc, dlen, "Nil -> '' (a string where optional<Device> is declared)");
		return wf_step_splice(st, off, 1, h, 2);
	case V_NIL_STRUCT0:
		h[0] = 0xb9;
		h[1] = 0x00;
		snprintf(desc, dlen, "Nil -> an empty structure");
		return wf_step_splice(st, off, 1, h, 2);
	case V_COUNT:
		break;
	}
	return -1;
}

/* Frame-level operators on a SEND step. */
typedef enum fop {
	F_LEN_PLUS1, F_LEN_MINUS1, F_LEN_ZERO, F_LEN_HUGE, F_LEN_2_63, F_LEN_MAX, F_LEN_WRAP32,
	F_TRAILING, F_EMPTY,
	F_COUNT
} fop;

static const char *const fop_names[F_COUNT] = {
	"header+1", "header-1", "header=0", "header=2^62", "header=2^63", "header=2^64-1",
	"header+2^32", "trailing-bytes", "empty-frame",
};

/* Step-level operators. */
typedef enum sop {
	S_DROP, S_DOUBLE, S_WRONG_CONN, S_CLOSE_AFTER, S_CLOSE_BEFORE, S_STALL,
	S_COUNT
} sop;

static const char *const sop_names[S_COUNT] = {
	"frame-dropped", "frame-doubled", "wrong-connection", "closed-after", "closed-before",
	"stalled-mid-frame",
};

static bool is_packet(const wf_step *st)
{
	return st->nfields > 0;
}

/* The class of a value: its path without indexes
 * ("Descriptor.tensors[1].length" -> "Descriptor.tensors[].length"). */
static void class_path(const wf_step *st, const wf_field *f, char *out, size_t len)
{
	size_t k = 0;
	for (const char *p = f ? f->path : st->what; *p && k + 1 < len; p++) {
		if (*p == '[') {
			out[k++] = '[';
			while (*p && *p != ']')
				p++;
			if (k + 1 < len)
				out[k++] = ']';
			continue;
		}
		out[k++] = *p;
	}
	out[k] = '\0';
}

static int step_close(wf_script *s, int at, int conn)
{
	wf_step c;
	memset(&c, 0, sizeof(c));
	c.op = WF_CLOSE;
	c.conn = conn;
	c.cut = -1;
	return wf_script_insert(s, at, &c) < 0 ? -1 : 0;
}

/* Drops every step after index `last` that uses connection conn (after a
 * close or a cut nothing more is sent on it). */
static void drop_after_on(wf_script *s, int last, int conn)
{
	for (int i = s->nsteps - 1; i > last; i--)
		if (s->steps[i].conn == conn && s->steps[i].op != WF_WAIT &&
		    s->steps[i].op != WF_ACCEPT_REQUESTED)
			wf_script_remove(s, i);
}

/* ---- enumeration --------------------------------------------------------------------------- */

/* The systematic list, in order: for each SEND step of the base (in scenario
 * order): every value operator on every value; every frame operator; every
 * cut of the stream (closed afterwards); every short frame (header = k, the
 * first k bytes); the step operators. Returns the number of mutations seen;
 * when `want` is reached it builds that one into out and sets *built. */
static int enumerate(const wf_script *base, int want, wf_script *out, bool *built)
{
	int k = 0;
	*built = false;
#define HIT() (k++ == want)
	for (int i = 0; i < base->nsteps; i++) {
		const wf_step *st = &base->steps[i];
		if (st->op != WF_SEND)
			continue;
		char desc[200], cls[128], path[96];
		/* value operators */
		for (int fi = 0; fi < st->nfields; fi++) {
			const wf_field *f = &st->fields[fi];
			for (int op = 0; op < V_COUNT; op++) {
				if (!vop_applies(f, (vop)op) || !HIT())
					continue;
				if (wf_script_copy(out, base))
					return -1;
				wf_step *m = &out->steps[i];
				wf_field fc = *f;
				if (apply_vop(m, &fc, (vop)op, fi, desc, sizeof(desc))) {
					wf_script_free(out);
					return k;
				}
				class_path(st, f, path, sizeof(path));
				if (!strncmp(path, "Packet", 6)) /* hello or RequestedConnection */
					snprintf(cls, sizeof(cls), "%.20s:%.70s:%.30s", st->what, path,
					         vop_names[op]);
				else
					snprintf(cls, sizeof(cls), "%.90s:%.30s", path, vop_names[op]);
				snprintf(out->klass, sizeof(out->klass), "%s", cls);
				snprintf(out->mutation, sizeof(out->mutation), "step %d (%s on connection %d) "
				         "value %.70s: %.100s", i, st->what, st->conn, f->path, desc);
				out->mutated_step = i;
				*built = true;
				return k;
			}
		}
		/* frame operators */
		for (int op = 0; op < F_COUNT; op++) {
			if ((op == F_TRAILING && !is_packet(st)) || (op == F_EMPTY && st->len == 0) ||
			    (op == F_LEN_MINUS1 && st->len == 0) || !HIT())
				continue;
			if (wf_script_copy(out, base))
				return -1;
			wf_step *m = &out->steps[i];
			switch ((fop)op) {
			case F_LEN_PLUS1: m->hdr = WF_HDR_DELTA; m->hdr_delta = 1; break;
			case F_LEN_MINUS1: m->hdr = WF_HDR_DELTA; m->hdr_delta = -1; break;
			case F_LEN_ZERO: m->hdr = WF_HDR_FIXED; m->hdr_value = 0; break;
			case F_LEN_HUGE: m->hdr = WF_HDR_FIXED; m->hdr_value = 1ull << 62; break;
			case F_LEN_2_63: m->hdr = WF_HDR_FIXED; m->hdr_value = 1ull << 63; break;
			case F_LEN_MAX: m->hdr = WF_HDR_FIXED; m->hdr_value = UINT64_MAX; break;
			case F_LEN_WRAP32: m->hdr = WF_HDR_DELTA; m->hdr_delta = 1ll << 32; break;
			case F_TRAILING: {
				static const uint8_t junk[] = {0xde, 0xad, 0xbe, 0xef};
				(void)wf_step_splice(m, m->len, 0, junk, 4);
				break;
			}
			case F_EMPTY:
				(void)wf_step_splice(m, 0, m->len, NULL, 0);
				break;
			case F_COUNT:
				break;
			}
			snprintf(out->klass, sizeof(out->klass), "%s.frame:%s", st->what, fop_names[op]);
			snprintf(out->mutation, sizeof(out->mutation), "step %d (%s on connection %d): %s",
			         i, st->what, st->conn, fop_names[op]);
			out->mutated_step = i;
			*built = true;
			return k;
		}
		/* cuts: the first c bytes of header + body, then the connection closes.
		 * Every byte of a packet; a few places in a raw buffer. */
		size_t total = 8 + st->len;
		for (size_t c = 0; c < total; c++) {
			if (!is_packet(st) && !(c == 0 || c == 4 || c == 8 || c == 8 + st->len / 2))
				continue;
			if (!HIT())
				continue;
			if (wf_script_copy(out, base))
				return -1;
			out->steps[i].cut = (long)c;
			drop_after_on(out, i, st->conn);
			if (step_close(out, i + 1, st->conn)) {
				wf_script_free(out);
				return -1;
			}
			snprintf(out->klass, sizeof(out->klass), "%s.frame:cut-%s", st->what,
			         c == 0 ? "before" : c < 8 ? "in-header" : "in-body");
			snprintf(out->mutation, sizeof(out->mutation), "step %d (%s on connection %d): "
			         "only %zu of its %zu bytes (header included) sent, then the connection "
			         "closed", i, st->what, st->conn, c, total);
			out->mutated_step = i;
			*built = true;
			return k;
		}
		/* short frames: a consistent header over the first c bytes of the body */
		for (size_t c = 0; is_packet(st) && c < st->len; c++) {
			if (!HIT())
				continue;
			if (wf_script_copy(out, base))
				return -1;
			wf_step *m = &out->steps[i];
			(void)wf_step_splice(m, c, m->len - c, NULL, 0);
			snprintf(out->klass, sizeof(out->klass), "%s.frame:truncated-value", st->what);
			snprintf(out->mutation, sizeof(out->mutation), "step %d (%s on connection %d): "
			         "the frame holds only the first %zu of its %zu bytes", i, st->what,
			         st->conn, c, st->len);
			out->mutated_step = i;
			*built = true;
			return k;
		}
		/* step operators */
		for (int op = 0; op < S_COUNT; op++) {
			if ((op == S_WRONG_CONN && st->conn == 0 && i < 4) ||
			    (op == S_STALL && !is_packet(st)) || !HIT())
				continue;
			if (wf_script_copy(out, base))
				return -1;
			wf_step *m = &out->steps[i];
			int rc = 0;
			switch ((sop)op) {
			case S_DROP:
				wf_script_remove(out, i);
				break;
			case S_DOUBLE:
				rc = wf_script_insert(out, i + 1, m) < 0;
				break;
			case S_WRONG_CONN:
				m->conn = st->conn == 0 ? 1 : 0;
				break;
			case S_CLOSE_AFTER:
				drop_after_on(out, i, st->conn);
				rc = step_close(out, i + 1, st->conn);
				break;
			case S_CLOSE_BEFORE:
				drop_after_on(out, i - 1, st->conn);
				rc = step_close(out, i, st->conn);
				break;
			case S_STALL:
				/* half the frame, then silence on that connection (kept open) */
				m->cut = (long)(8 + st->len / 2);
				drop_after_on(out, i, st->conn);
				break;
			case S_COUNT:
				break;
			}
			if (rc) {
				wf_script_free(out);
				return -1;
			}
			snprintf(out->klass, sizeof(out->klass), "%s.step:%s", st->what, sop_names[op]);
			snprintf(out->mutation, sizeof(out->mutation), "step %d (%s on connection %d): %s",
			         i, st->what, st->conn, sop_names[op]);
			out->mutated_step = op == S_DROP ? -1 : i;
			*built = true;
			return k;
		}
	}
#undef HIT
	return k;
}

int wf_mutate_count(const wf_script *base)
{
	wf_script dummy;
	bool built;
	int n = enumerate(base, -1, &dummy, &built);
	return n;
}

int wf_mutate_nth(const wf_script *base, int k, wf_script *out)
{
	bool built;
	wf_script_init(out, base->role);
	if (enumerate(base, k, out, &built) < 0 || !built)
		return -1;
	return 0;
}

int wf_mutate_random(const wf_script *base, uint64_t *rng, wf_script *out)
{
	int n = wf_mutate_count(base);
	if (n <= 0)
		return -1;
	int k = (int)(wf_rand(rng) % (uint64_t)n);
	if (wf_mutate_nth(base, k, out))
		return -1;
	/* one time in three, a second mutation on another frame of the result
	 * (its value map is gone where the first one changed the bytes) */
	if (wf_rand(rng) % 3 != 0)
		return 0;
	wf_script tmp;
	int k2 = (int)(wf_rand(rng) % (uint64_t)n);
	if (wf_mutate_nth(base, k2, &tmp))
		return 0;
	int si = tmp.mutated_step;
	if (si < 0 || si == out->mutated_step || si >= out->nsteps || si >= tmp.nsteps ||
	    out->nsteps != base->nsteps || tmp.nsteps != base->nsteps ||
	    out->steps[si].op != WF_SEND) {
		wf_script_free(&tmp);
		return 0;
	}
	/* take step si from tmp */
	wf_step *dst = &out->steps[si];
	wf_step_free(dst);
	wf_step *src = &tmp.steps[si];
	*dst = *src;
	memset(src, 0, sizeof(*src));
	src->op = WF_WAIT;
	size_t l = strlen(out->klass);
	snprintf(out->klass + l, sizeof(out->klass) - l, "+%s", tmp.klass);
	l = strlen(out->mutation);
	snprintf(out->mutation + l, sizeof(out->mutation) - l, "; and %s", tmp.mutation);
	wf_script_free(&tmp);
	return 0;
}
