/*
 * vectors_test.c - checks every golden vector under spec/vectors/ against
 * the codec (format: spec/vectors/README.md). A positive vector must decode,
 * consume the declared bytes and re-encode to the same bytes (or to its
 * `canonical:` form); a negative one must fail with TW_ERR_PROTO and a detail
 * containing its `detail:` text. Every packet type must have at least one
 * positive vector, so a deleted file cannot go unnoticed.
 *
 * Usage: wire_vectors_test <spec/vectors directory>
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>

#include "wire/alloc.h"
#include "wire/frame.h"
#include "wire/packets.h"
#include "wire/test_util.h"

#define MAX_BYTES 65536

typedef struct vector_file {
	char name[256];
	char type[64];
	char expect[16];
	char frame[16];
	char detail[256];
	char canonical[4096];
	char value[64];
	long consumed;       /* -1 = all bytes */
	uint64_t limit;      /* frame length limit for uv/ring framing */
	uint8_t bytes[MAX_BYTES];
	size_t len;
} vector_file;

/* ---- nop-level types: transcode (decode while writing the canonical form) ---- */

static tw_status_t tc_device(tw_nop_reader *r, tw_nop_writer *w)
{
	const uint8_t *s;
	size_t n;
	int64_t i;
	tw_status_t st = tw__nop_get_struct(r, 2);
	if (st == TW_OK)
		st = tw__nop_get_string(r, &s, &n);
	if (st == TW_OK)
		st = tw__nop_get_int(r, 4, &i);
	if (st != TW_OK)
		return st;
	tw__nop_put_struct(w, 2);
	tw__nop_put_string(w, s, n);
	tw__nop_put_int(w, i);
	return TW_OK;
}

/* Returns 1 and sets *st if `type` is a nop-level type; `value` (if any) is
 * checked for integer types. */
static int transcode_nop(const vector_file *v, tw_nop_reader *r, tw_nop_writer *w,
                         tw_status_t *st)
{
	static const struct { const char *name; unsigned width; int is_signed; } ints[] = {
		{"uint8", 1, 0}, {"uint16", 2, 0}, {"uint32", 4, 0}, {"uint64", 8, 0},
		{"int8", 1, 1},  {"int16", 2, 1},  {"int32", 4, 1},  {"int64", 8, 1},
	};
	for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
		if (strcmp(v->type, ints[k].name) != 0)
			continue;
		if (ints[k].is_signed) {
			int64_t i;
			*st = tw__nop_get_int(r, ints[k].width, &i);
			if (*st == TW_OK) {
				tw__nop_put_int(w, i);
				if (v->value[0])
					CHECKF(i == strtoll(v->value, NULL, 0), "%s: value %" PRId64, v->name, i);
			}
		} else {
			uint64_t u;
			*st = tw__nop_get_uint(r, ints[k].width, &u);
			if (*st == TW_OK) {
				tw__nop_put_uint(w, u);
				if (v->value[0])
					CHECKF(u == strtoull(v->value, NULL, 0), "%s: value %" PRIu64, v->name, u);
			}
		}
		return 1;
	}
	const uint8_t *s;
	size_t n;
	if (strcmp(v->type, "bool") == 0) {
		bool b;
		*st = tw__nop_get_bool(r, &b);
		if (*st == TW_OK)
			tw__nop_put_bool(w, b);
	} else if (strcmp(v->type, "float") == 0) {
		float f;
		*st = tw__nop_get_f32(r, &f);
		if (*st == TW_OK)
			tw__nop_put_f32(w, f);
	} else if (strcmp(v->type, "double") == 0) {
		double d;
		*st = tw__nop_get_f64(r, &d);
		if (*st == TW_OK)
			tw__nop_put_f64(w, d);
	} else if (strcmp(v->type, "string") == 0) {
		*st = tw__nop_get_string(r, &s, &n);
		if (*st == TW_OK)
			tw__nop_put_string(w, s, n);
	} else if (strcmp(v->type, "vector-uint32") == 0) {
		*st = tw__nop_get_binary(r, &s, &n);
		if (*st == TW_OK && n % 4 != 0)
			*st = tw__nop_fail(r, "Binary length %zu is not a multiple of 4", n);
		if (*st == TW_OK)
			tw__nop_put_binary(w, s, n);
	} else if (strcmp(v->type, "vector-uint64") == 0) {
		uint64_t *ids;
		*st = tw__nop_get_u64_vector(r, &ids, &n);
		if (*st == TW_OK) {
			tw__nop_put_u64_vector(w, ids, n);
			tw__wire_free(ids);
		}
	} else if (strcmp(v->type, "vector-string") == 0) {
		*st = tw__nop_get_array_count(r, 2, &n);
		if (*st == TW_OK)
			tw__nop_put_array(w, n);
		for (size_t i = 0; *st == TW_OK && i < n; i++) {
			size_t sn;
			*st = tw__nop_get_string(r, &s, &sn);
			if (*st == TW_OK)
				tw__nop_put_string(w, s, sn);
		}
	} else if (strcmp(v->type, "map-string-string") == 0) {
		*st = tw__nop_get_map_count(r, 4, &n);
		if (*st == TW_OK)
			tw__nop_put_map(w, n);
		for (size_t i = 0; *st == TW_OK && i < 2 * n; i++) {
			size_t sn;
			*st = tw__nop_get_string(r, &s, &sn);
			if (*st == TW_OK)
				tw__nop_put_string(w, s, sn);
		}
	} else if (strcmp(v->type, "map-uint64-uint64") == 0) {
		*st = tw__nop_get_map_count(r, 2, &n);
		if (*st == TW_OK)
			tw__nop_put_map(w, n);
		for (size_t i = 0; *st == TW_OK && i < 2 * n; i++) {
			uint64_t u;
			*st = tw__nop_get_uint(r, 8, &u);
			if (*st == TW_OK)
				tw__nop_put_uint(w, u);
		}
	} else if (strcmp(v->type, "device") == 0) {
		*st = tc_device(r, w);
	} else if (strcmp(v->type, "optional-device") == 0) {
		bool nil;
		*st = tw__nop_get_optional_nil(r, &nil);
		if (*st == TW_OK && nil)
			tw__nop_put_nil(w);
		else if (*st == TW_OK)
			*st = tc_device(r, w);
	} else if (strcmp(v->type, "pair-device-device") == 0) {
		*st = tw__nop_get_array_count(r, 1, &n);
		if (*st == TW_OK && n != 2)
			*st = tw__nop_fail(r, "a pair is an array of 2 elements, this one has %zu", n);
		if (*st == TW_OK) {
			tw__nop_put_array(w, 2);
			*st = tc_device(r, w);
		}
		if (*st == TW_OK)
			*st = tc_device(r, w);
	} else if (strcmp(v->type, "empty-variant") == 0) {
		int32_t idx;
		*st = tw__nop_get_variant(r, 2, &idx);
		if (*st == TW_OK && idx != -1)
			*st = tw__nop_fail(r, "expected the empty variant, got index %d", idx);
		if (*st == TW_OK) {
			tw__nop_put_variant(w, -1);
			tw__nop_put_nil(w);
		}
	} else {
		return 0;
	}
	return 1;
}

/* ---- packet types ------------------------------------------------------------ */

#define PACKET_TYPES(X)                                             \
	X(packet, "packet") X(brochure, "brochure")                     \
	X(brochure_answer, "brochure-answer") X(descriptor, "descriptor") \
	X(descriptor_reply, "descriptor-reply") X(mpt_packet, "mpt-packet") \
	X(cma_descriptor, "cma-descriptor") X(xth_descriptor, "xth-descriptor") \
	X(cuda_xth_descriptor, "cuda-xth-descriptor")                   \
	X(cuda_basic_device, "cuda-basic-device")                       \
	X(cuda_ipc_device, "cuda-ipc-device")                           \
	X(cuda_ipc_descriptor, "cuda-ipc-descriptor")                   \
	X(cuda_gdr_setup, "cuda-gdr-setup")                             \
	X(cuda_gdr_index, "cuda-gdr-index")

#define COUNT_ONE(T, name) +1
enum { NUM_PACKET_TYPES = 0 PACKET_TYPES(COUNT_ONE) };

#define TRANSCODE_PACKET(T, name)                                                         \
	if (strcmp(type, name) == 0) {                                                         \
		tw_wire_##T val;                                                                   \
		tw_status_t st = tw__wire_decode_##T(b, n, &val, consumed, detail, detail_len);    \
		if (st == TW_OK) {                                                                 \
			tw__wire_encode_##T(w, &val);                                                  \
			tw__wire_##T##_free(&val);                                                     \
		}                                                                                  \
		*known = 1;                                                                        \
		return st;                                                                         \
	}

static tw_status_t transcode_packet(const char *type, const uint8_t *b, size_t n,
                                    tw_nop_writer *w, size_t *consumed, char *detail,
                                    size_t detail_len, int *known)
{
	*known = 0;
	PACKET_TYPES(TRANSCODE_PACKET)
	return TW_ERR_INVAL;
}

/* ---- the file format ------------------------------------------------------- */

static int parse_file(const char *dir, const char *name, vector_file *v)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	if (!f) {
		printf("# %s: %s\n", path, strerror(errno));
		return 0;
	}
	memset(v, 0, sizeof(*v));
	snprintf(v->name, sizeof(v->name), "%s", name);
	v->consumed = -1;
	v->limit = UINT64_MAX;
	static char hex[4 * MAX_BYTES];
	size_t hex_len = 0;
	char line[8192];
	int ok = 1;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '#') {
			static const char *const keys[] = {"type", "expect", "frame", "detail",
			                                   "canonical", "consumed", "value", "limit"};
			for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
				size_t kl = strlen(keys[k]);
				if (strncmp(line + 2, keys[k], kl) != 0 || line[2 + kl] != ':' ||
				    line[1] != ' ')
					continue;
				const char *val = line + 2 + kl + 1;
				while (*val == ' ')
					val++;
				switch (k) {
				case 0: snprintf(v->type, sizeof(v->type), "%s", val); break;
				case 1: snprintf(v->expect, sizeof(v->expect), "%s", val); break;
				case 2: snprintf(v->frame, sizeof(v->frame), "%s", val); break;
				case 3: snprintf(v->detail, sizeof(v->detail), "%s", val); break;
				case 4: snprintf(v->canonical, sizeof(v->canonical), "%s", val); break;
				case 5: v->consumed = strtol(val, NULL, 0); break;
				case 6: snprintf(v->value, sizeof(v->value), "%s", val); break;
				case 7: v->limit = strtoull(val, NULL, 0); break;
				}
			}
			continue;
		}
		size_t ll = strlen(line);
		if (hex_len + ll + 2 > sizeof(hex)) {
			ok = 0;
			break;
		}
		memcpy(hex + hex_len, line, ll);
		hex_len += ll;
		hex[hex_len++] = ' ';
	}
	fclose(f);
	hex[hex_len] = '\0';
	long n = ok ? tw_test_unhex(hex, v->bytes, sizeof(v->bytes)) : -1;
	CHECKF(n >= 0, "%s: bad hex", name);
	CHECKF(v->type[0] != '\0', "%s: no '# type:' line", name);
	CHECKF(strcmp(v->expect, "ok") == 0 || strcmp(v->expect, "proto") == 0,
	       "%s: '# expect:' must be ok or proto, not '%s'", name, v->expect);
	CHECKF(strcmp(v->expect, "proto") != 0 || v->detail[0] != '\0',
	       "%s: a negative vector needs '# detail:'", name);
	CHECKF(v->frame[0] == '\0' || strcmp(v->frame, "uv") == 0 || strcmp(v->frame, "ring") == 0,
	       "%s: unknown frame '%s'", name, v->frame);
	v->len = n < 0 ? 0 : (size_t)n;
	return n >= 0 && v->type[0] != '\0';
}

/* Runs one vector; returns 1 if it was a positive packet vector. */
static void run_vector(vector_file *v, int *positive_of_type)
{
	const uint8_t *body = v->bytes;
	size_t body_len = v->len;
	char detail[512] = "";
	tw_status_t st = TW_OK;
	int want_ok = strcmp(v->expect, "ok") == 0;

	/* framing first, if the vector includes the frame header */
	if (v->frame[0]) {
		size_t used = 0;
		int uv = strcmp(v->frame, "uv") == 0;
		st = uv ? tw__frame_uv_split(v->bytes, v->len, v->limit, &body, &body_len, &used,
		                             detail, sizeof(detail))
		        : tw__frame_ring_split(v->bytes, v->len, v->limit, &body, &body_len, &used,
		                               detail, sizeof(detail));
		if (st == TW_OK && used != v->len) {
			CHECKF(0, "%s: the frame header says %zu bytes, the file holds %zu after it",
			       v->name, body_len, v->len - (uv ? 8u : 4u));
			return;
		}
	}

	tw_nop_writer w;
	tw__nop_writer_init(&w);
	size_t consumed = 0;
	int known = 0;
	if (st == TW_OK && strcmp(v->type, "frame") != 0) {
		st = transcode_packet(v->type, body, body_len, &w, &consumed, detail, sizeof(detail),
		                      &known);
		if (!known) {
			tw_nop_reader r;
			tw__nop_reader_init(&r, body, body_len);
			r.field = v->type;
			if (!transcode_nop(v, &r, &w, &st)) {
				CHECKF(0, "%s: unknown type '%s'", v->name, v->type);
				tw__nop_writer_free(&w);
				return;
			}
			consumed = r.pos;
			snprintf(detail, sizeof(detail), "%s", r.detail);
		}
	} else if (st == TW_OK) {
		consumed = body_len;  /* a bare frame: nothing to decode */
		tw__nop_put_raw(&w, body, body_len);
	}

	if (want_ok) {
		CHECKF(st == TW_OK, "%s: rejected: %s", v->name, detail);
		if (st == TW_OK) {
			size_t want_consumed = v->consumed >= 0 ? (size_t)v->consumed : body_len;
			CHECKF(consumed == want_consumed, "%s: consumed %zu, want %zu", v->name, consumed,
			       want_consumed);
			CHECK(tw__nop_writer_finish(&w) == TW_OK);
			if (v->canonical[0]) {
				static uint8_t canon[4096];
				long cn = tw_test_unhex(v->canonical, canon, sizeof(canon));
				CHECKF(cn >= 0 && tw_test_bytes_eq(v->name, w.buf, w.len, canon, (size_t)cn),
				       "%s: canonical form", v->name);
			} else {
				CHECKF(tw_test_bytes_eq(v->name, w.buf, w.len, body, consumed),
				       "%s: re-encoding differs", v->name);
			}
			if (known)
				(*positive_of_type)++;
		}
	} else {
		CHECKF(st == TW_ERR_PROTO, "%s: status %d (%s), want TW_ERR_PROTO", v->name, st,
		       detail);
		CHECKF(strstr(detail, v->detail) != NULL, "%s: detail \"%s\" lacks \"%s\"", v->name,
		       detail, v->detail);
	}
	tw__nop_writer_free(&w);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <spec/vectors directory>\n", argv[0]);
		return 2;
	}
	DIR *dir = opendir(argv[1]);
	if (!dir) {
		printf("not ok - opendir %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	char *names[1024];
	size_t num = 0;
	struct dirent *de;
	while ((de = readdir(dir)) && num < 1024) {
		size_t l = strlen(de->d_name);
		if (l > 4 && strcmp(de->d_name + l - 4, ".hex") == 0)
			names[num++] = strdup(de->d_name);
	}
	closedir(dir);
	qsort(names, num, sizeof(names[0]), cmp_names);

	static const char *const types[] = {
#define NAME_OF(T, name) name,
		PACKET_TYPES(NAME_OF)
	};
	int positives[NUM_PACKET_TYPES] = {0};
	size_t num_ok = 0, num_proto = 0;
	static vector_file v;
	for (size_t i = 0; i < num; i++) {
		if (!parse_file(argv[1], names[i], &v)) {
			free(names[i]);
			continue;
		}
		int type_index = -1;
		for (int t = 0; t < NUM_PACKET_TYPES; t++)
			if (strcmp(v.type, types[t]) == 0)
				type_index = t;
		int dummy = 0;
		int before = tw_test_failures;
		run_vector(&v, type_index >= 0 ? &positives[type_index] : &dummy);
		printf("%s - %s (%s, expect %s)\n", tw_test_failures == before ? "ok" : "not ok",
		       v.name, v.type, v.expect);
		if (strcmp(v.expect, "ok") == 0)
			num_ok++;
		else
			num_proto++;
		free(names[i]);
	}
	for (int t = 0; t < NUM_PACKET_TYPES; t++)
		CHECKF(positives[t] > 0, "no positive vector of type %s", types[t]);
	CHECKF(num_proto > 0, "no negative vectors");
	printf("# %zu positive and %zu negative vectors\n", num_ok, num_proto);
	return tw_test_done("vectors_test");
}
