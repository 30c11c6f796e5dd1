/*
 * packets_test.c - unit tests of the packet codec (packets.c): the observed
 * packets of spec/wire.md sections 3 and 4 encoded from values and decoded
 * back, truncation at every byte, trailing bytes, duplicate map keys, error
 * details that name the field path, huge counts rejected before allocating,
 * out-of-memory at every allocation, an allocation bound, and round trips of
 * generated values.
 */
#include <inttypes.h>

#include "wire/alloc.h"
#include "wire/packets.h"
#include "wire/test_util.h"

/* ---- building values -------------------------------------------------------- */

static tw_wire_str S(const char *s)
{
	tw_wire_str out = {NULL, 0};
	CHECK(tw__wire_str_set(&out, s, strlen(s)) == TW_OK);
	return out;
}

static tw_wire_device DEV(const char *type, int32_t index)
{
	tw_wire_device d = {S(type), index};
	return d;
}

static int str_eq(const tw_wire_str *a, const tw_wire_str *b)
{
	return a->n == b->n && (a->n == 0 || memcmp(a->s, b->s, a->n) == 0) &&
	       a->s[a->n] == '\0';
}

static int dev_eq(const tw_wire_device *a, const tw_wire_device *b)
{
	return str_eq(&a->type, &b->type) && a->index == b->index;
}

static int chdev_eq(size_t n, const tw_wire_channel_devices *a, const tw_wire_channel_devices *b)
{
	for (size_t i = 0; i < n; i++) {
		if (!str_eq(&a[i].channel, &b[i].channel) || a[i].num_devices != b[i].num_devices)
			return 0;
		for (size_t j = 0; j < a[i].num_devices; j++)
			if (!dev_eq(&a[i].devices[j].device, &b[i].devices[j].device) ||
			    !str_eq(&a[i].devices[j].descriptor, &b[i].devices[j].descriptor))
				return 0;
	}
	return 1;
}

static int packet_eq(const tw_wire_packet *a, const tw_wire_packet *b)
{
	if (a->kind != b->kind)
		return 0;
	if (a->kind == TW_PACKET_SPONTANEOUS)
		return str_eq(&a->context_name, &b->context_name);
	if (a->kind == TW_PACKET_REQUESTED)
		return a->registration_id == b->registration_id;
	return 1;
}

static int brochure_eq(const tw_wire_brochure *a, const tw_wire_brochure *b)
{
	if (a->num_transports != b->num_transports || a->num_channels != b->num_channels)
		return 0;
	for (size_t i = 0; i < a->num_transports; i++)
		if (!str_eq(&a->transports[i].key, &b->transports[i].key) ||
		    !str_eq(&a->transports[i].value, &b->transports[i].value))
			return 0;
	return chdev_eq(a->num_channels, a->channels, b->channels);
}

static int answer_eq(const tw_wire_brochure_answer *a, const tw_wire_brochure_answer *b)
{
	if (!str_eq(&a->transport, &b->transport) || !str_eq(&a->address, &b->address) ||
	    !str_eq(&a->transport_domain_descriptor, &b->transport_domain_descriptor) ||
	    a->num_transport_ids != b->num_transport_ids || a->num_channel_ids != b->num_channel_ids ||
	    a->num_channels != b->num_channels || a->num_device_pairs != b->num_device_pairs)
		return 0;
	for (size_t i = 0; i < a->num_transport_ids; i++)
		if (a->transport_ids[i].key != b->transport_ids[i].key ||
		    a->transport_ids[i].id != b->transport_ids[i].id)
			return 0;
	for (size_t i = 0; i < a->num_channel_ids; i++) {
		if (!str_eq(&a->channel_ids[i].channel, &b->channel_ids[i].channel) ||
		    a->channel_ids[i].num_ids != b->channel_ids[i].num_ids)
			return 0;
		for (size_t j = 0; j < a->channel_ids[i].num_ids; j++)
			if (a->channel_ids[i].ids[j] != b->channel_ids[i].ids[j])
				return 0;
	}
	for (size_t i = 0; i < a->num_device_pairs; i++)
		if (!dev_eq(&a->device_pairs[i].server_device, &b->device_pairs[i].server_device) ||
		    !dev_eq(&a->device_pairs[i].client_device, &b->device_pairs[i].client_device) ||
		    !str_eq(&a->device_pairs[i].channel, &b->device_pairs[i].channel))
			return 0;
	return chdev_eq(a->num_channels, a->channels, b->channels);
}

static int descriptor_eq(const tw_wire_descriptor *a, const tw_wire_descriptor *b)
{
	if (!str_eq(&a->metadata, &b->metadata) || a->num_payloads != b->num_payloads ||
	    a->num_tensors != b->num_tensors)
		return 0;
	for (size_t i = 0; i < a->num_payloads; i++)
		if (a->payloads[i].length != b->payloads[i].length ||
		    !str_eq(&a->payloads[i].metadata, &b->payloads[i].metadata))
			return 0;
	for (size_t i = 0; i < a->num_tensors; i++) {
		const tw_wire_tensor_desc *x = &a->tensors[i], *y = &b->tensors[i];
		if (x->length != y->length || !dev_eq(&x->source_device, &y->source_device) ||
		    x->has_target_device != y->has_target_device ||
		    (x->has_target_device && !dev_eq(&x->target_device, &y->target_device)) ||
		    !str_eq(&x->metadata, &y->metadata))
			return 0;
	}
	return 1;
}

static int reply_eq(const tw_wire_descriptor_reply *a, const tw_wire_descriptor_reply *b)
{
	if (a->num_target_devices != b->num_target_devices)
		return 0;
	for (size_t i = 0; i < a->num_target_devices; i++)
		if (!dev_eq(&a->target_devices[i], &b->target_devices[i]))
			return 0;
	return 1;
}

static int mpt_eq(const tw_wire_mpt_packet *a, const tw_wire_mpt_packet *b)
{
	if (a->kind != b->kind)
		return 0;
	if (a->kind == TW_MPT_CLIENT_HELLO)
		return a->registration_id == b->registration_id;
	if (a->kind != TW_MPT_SERVER_HELLO)
		return 1;
	if (a->num_lanes != b->num_lanes)
		return 0;
	for (size_t i = 0; i < a->num_lanes; i++)
		if (!str_eq(&a->lanes[i].address, &b->lanes[i].address) ||
		    a->lanes[i].registration_id != b->lanes[i].registration_id)
			return 0;
	return 1;
}

static int cma_eq(const tw_wire_cma_descriptor *a, const tw_wire_cma_descriptor *b)
{
	return a->pid == b->pid && a->ptr == b->ptr;
}

static int xth_eq(const tw_wire_xth_descriptor *a, const tw_wire_xth_descriptor *b)
{
	return a->ptr == b->ptr;
}

/* ---- a generic check over every packet type ----------------------------------- */

/* Encodes `value`, compares with `hex` (if given), decodes, compares values,
 * re-encodes, then cuts the encoding at every byte, appends junk, and runs an
 * out-of-memory sweep. T is the type suffix (packet, brochure, ...). */
#define CHECK_CODEC(T, EQ, value, hex)                                                     \
	do {                                                                                   \
		tw_nop_writer w_;                                                                  \
		tw__nop_writer_init(&w_);                                                          \
		tw__wire_encode_##T(&w_, (value));                                                 \
		CHECK(tw__nop_writer_finish(&w_) == TW_OK);                                        \
		check_encoding(#T, &w_, (hex));                                                    \
		check_decode_##T(w_.buf, w_.len, (value));                                         \
		tw__nop_writer_free(&w_);                                                          \
	} while (0)

/* Compares the encoder's output with the expected hex (none for NULL). */
static void check_encoding(const char *what, const tw_nop_writer *w, const char *hex)
{
	static uint8_t want[4096];
	if (!hex)
		return;
	long n = tw_test_unhex(hex, want, sizeof(want));
	CHECK(n >= 0);
	CHECKF(tw_test_bytes_eq(what, w->buf, w->len, want, (size_t)n), "%s", hex);
}

/* Defines check_decode_<T>(bytes, len, expected). */
#define DEFINE_CHECK_DECODE(T, EQ)                                                          \
	static void check_decode_##T(const uint8_t *bytes, size_t len, const tw_wire_##T *want) \
	{                                                                                       \
		tw_wire_##T got;                                                                    \
		size_t used = 0;                                                                    \
		char detail[256];                                                                   \
		tw__wire_alloc_reset();                                                             \
		tw_status_t st = tw__wire_decode_##T(bytes, len, &got, &used, detail, sizeof(detail)); \
		CHECKF(st == TW_OK, #T ": %s", detail);                                             \
		if (st != TW_OK)                                                                    \
			return;                                                                         \
		/* allocation bound: a small multiple of the input */                             \
		CHECKF(tw__wire_alloc_bytes() <= 16 * len + 64, #T ": %zu bytes for %zu input",   \
		       tw__wire_alloc_bytes(), len);                                                \
		CHECK(used == len);                                                                 \
		CHECKF(EQ(&got, want), #T ": decoded value differs");                               \
		tw_nop_writer w2;                                                                   \
		tw__nop_writer_init(&w2);                                                           \
		tw__wire_encode_##T(&w2, &got);                                                     \
		CHECK(tw__nop_writer_finish(&w2) == TW_OK);                                         \
		CHECK(tw_test_bytes_eq(#T " re-encoded", w2.buf, w2.len, bytes, len));             \
		tw__nop_writer_free(&w2);                                                           \
		tw__wire_##T##_free(&got);                                                          \
		/* every strict prefix is rejected, cleanly */                                     \
		for (size_t cut = 0; cut < len; cut++) {                                            \
			uint8_t *copy = malloc(cut ? cut : 1);                                          \
			memcpy(copy, bytes, cut);                                                       \
			detail[0] = '\0';                                                               \
			st = tw__wire_decode_##T(copy, cut, &got, &used, detail, sizeof(detail));      \
			CHECKF(st == TW_ERR_PROTO, #T " cut at %zu: status %d", cut, st);             \
			CHECKF(detail[0] != '\0', #T " cut at %zu: no detail", cut);                   \
			free(copy);                                                                     \
		}                                                                                   \
		/* trailing bytes are not part of the object (stock ignores them) */              \
		uint8_t *longer = malloc(len + 4);                                                  \
		memcpy(longer, bytes, len);                                                         \
		memcpy(longer + len, "\xde\xad\xbe\xef", 4);                                        \
		st = tw__wire_decode_##T(longer, len + 4, &got, &used, detail, sizeof(detail));    \
		CHECK(st == TW_OK && used == len);                                                  \
		if (st == TW_OK)                                                                    \
			tw__wire_##T##_free(&got);                                                      \
		free(longer);                                                                       \
		/* out of memory at each allocation: NOMEM, nothing leaked (LSan) */              \
		for (size_t fail = 1;; fail++) {                                                    \
			tw__wire_alloc_reset();                                                         \
			tw__wire_alloc_fail_after(fail);                                                \
			st = tw__wire_decode_##T(bytes, len, &got, &used, detail, sizeof(detail));     \
			tw__wire_alloc_reset();                                                         \
			if (st == TW_OK) {                                                              \
				tw__wire_##T##_free(&got);                                                  \
				break;                                                                      \
			}                                                                               \
			CHECKF(st == TW_ERR_NOMEM, #T " fail alloc %zu: %d %s", fail, st, detail);    \
			if (st != TW_ERR_NOMEM || fail > 100000)                                        \
				break;                                                                      \
		}                                                                                   \
	}

DEFINE_CHECK_DECODE(packet, packet_eq)
DEFINE_CHECK_DECODE(brochure, brochure_eq)
DEFINE_CHECK_DECODE(brochure_answer, answer_eq)
DEFINE_CHECK_DECODE(descriptor, descriptor_eq)
DEFINE_CHECK_DECODE(descriptor_reply, reply_eq)
DEFINE_CHECK_DECODE(mpt_packet, mpt_eq)
DEFINE_CHECK_DECODE(cma_descriptor, cma_eq)
DEFINE_CHECK_DECODE(xth_descriptor, xth_eq)

/* ---- the observed packets (spec 3 and 4) ---------------------------------------- */

static void test_packet(void)
{
	tw_wire_packet p = {TW_PACKET_SPONTANEOUS, S(""), 0};
	CHECK_CODEC(packet, packet_eq, &p, "b8 00 b9 01 bd 00");
	tw__wire_packet_free(&p);
	p = (tw_wire_packet){TW_PACKET_SPONTANEOUS, S("worker0"), 0};
	CHECK_CODEC(packet, packet_eq, &p, "b8 00 b9 01 bd 07 77 6f 72 6b 65 72 30");
	tw__wire_packet_free(&p);
	p = (tw_wire_packet){TW_PACKET_SPONTANEOUS, S("cli"), 0};
	CHECK_CODEC(packet, packet_eq, &p, "b8 00 b9 01 bd 03 63 6c 69");
	tw__wire_packet_free(&p);
	static const struct { uint64_t id; const char *hex; } req[] = {
		{0, "b8 01 b9 01 00"}, {1, "b8 01 b9 01 01"}, {300, "b8 01 b9 01 81 2c 01"},
		{UINT64_MAX, "b8 01 b9 01 83 ff ff ff ff ff ff ff ff"},
	};
	for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		p = (tw_wire_packet){TW_PACKET_REQUESTED, {NULL, 0}, req[i].id};
		CHECK_CODEC(packet, packet_eq, &p, req[i].hex);
	}
	p = (tw_wire_packet){TW_PACKET_EMPTY, {NULL, 0}, 0};
	CHECK_CODEC(packet, packet_eq, &p, "b8 ff be");

	/* a kind the encoder cannot represent */
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	p.kind = 7;
	tw__wire_encode_packet(&w, &p);
	CHECK(tw__nop_writer_finish(&w) == TW_ERR_INVAL);
	tw__nop_writer_free(&w);
}

static void test_brochure(void)
{
	tw_wire_kv tr[] = {{S("uv"), S("uv:*")}};
	tw_wire_device_desc dd[] = {{DEV("cpu", 0), S("any")}};
	tw_wire_channel_devices ch[] = {{S("basic"), 1, dd}};
	tw_wire_brochure b = {1, tr, 1, ch};
	CHECK_CODEC(brochure, brochure_eq, &b,
	            "b9 02 bb 01 bd 02 75 76 bd 04 75 76 3a 2a bb 01 bd 05 62 61 73 69 63"
	            " bb 01 b9 02 bd 03 63 70 75 00 bd 03 61 6e 79");
	tw_wire_brochure empty = {0, NULL, 0, NULL};
	CHECK_CODEC(brochure, brochure_eq, &empty, "b9 02 bb 00 bb 00");
	tw__wire_str_free(&tr[0].key);
	tw__wire_str_free(&tr[0].value);
	tw__wire_str_free(&dd[0].device.type);
	tw__wire_str_free(&dd[0].descriptor);
	tw__wire_str_free(&ch[0].channel);
}

static void free_answer_parts(tw_wire_brochure_answer *a)
{
	/* the test builds answers from stack arrays: free only the strings */
	tw__wire_str_free(&a->transport);
	tw__wire_str_free(&a->address);
	tw__wire_str_free(&a->transport_domain_descriptor);
	for (size_t i = 0; i < a->num_channel_ids; i++)
		tw__wire_str_free(&a->channel_ids[i].channel);
	for (size_t i = 0; i < a->num_channels; i++) {
		tw__wire_str_free(&a->channels[i].channel);
		for (size_t j = 0; j < a->channels[i].num_devices; j++) {
			tw__wire_str_free(&a->channels[i].devices[j].device.type);
			tw__wire_str_free(&a->channels[i].devices[j].descriptor);
		}
	}
	for (size_t i = 0; i < a->num_device_pairs; i++) {
		tw__wire_str_free(&a->device_pairs[i].server_device.type);
		tw__wire_str_free(&a->device_pairs[i].client_device.type);
		tw__wire_str_free(&a->device_pairs[i].channel);
	}
}

static void test_brochure_answer(void)
{
	tw_wire_id_entry ids[] = {{1, 0}};
	uint64_t basic_ids[] = {1};
	tw_wire_channel_ids cids[] = {{S("basic"), 1, basic_ids}};
	tw_wire_device_desc dd[] = {{DEV("cpu", 0), S("any")}};
	tw_wire_channel_devices ch[] = {{S("basic"), 1, dd}};
	tw_wire_device_pair pairs[] = {{DEV("cpu", 0), DEV("cpu", 0), S("basic")}};
	tw_wire_brochure_answer a = {S("uv"), S("127.0.0.1:5555"), 1, ids, S("uv:*"), 1, cids,
	                             1, ch, 1, pairs};
	/* spec 3.6: 102 bytes, observed between two stock processes */
	CHECK_CODEC(brochure_answer, answer_eq, &a,
	            "b9 07 bd 02 75 76"
	            " bd 0e 31 32 37 2e 30 2e 30 2e 31 3a 35 35 35 35"
	            " bb 01 01 00"
	            " bd 04 75 76 3a 2a"
	            " bb 01 bd 05 62 61 73 69 63 bc 08 01 00 00 00 00 00 00 00"
	            " bb 01 bd 05 62 61 73 69 63 bb 01 b9 02 bd 03 63 70 75 00 bd 03 61 6e 79"
	            " bb 01 ba 02 b9 02 bd 03 63 70 75 00 b9 02 bd 03 63 70 75 00"
	            " bd 05 62 61 73 69 63");
	free_answer_parts(&a);

	/* shm + cma: {1:1, 0:0} and two cma ids, Binary of 16 bytes */
	tw_wire_id_entry ids2[] = {{1, 1}, {0, 0}};
	uint64_t cma_ids[] = {2, 3};
	tw_wire_channel_ids cids2[] = {{S("cma"), 2, cma_ids}};
	tw_wire_brochure_answer b = {S("shm"), S("a26e8"), 2, ids2, S("shm:x"), 1, cids2,
	                             0, NULL, 0, NULL};
	CHECK_CODEC(brochure_answer, answer_eq, &b,
	            "b9 07 bd 03 73 68 6d bd 05 61 32 36 65 38 bb 02 01 01 00 00"
	            " bd 05 73 68 6d 3a 78"
	            " bb 01 bd 03 63 6d 61 bc 10 02 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00"
	            " bb 00 bb 00");
	free_answer_parts(&b);
}

static void test_descriptor(void)
{
	tw_wire_payload_desc pl[] = {{8, S("pm")}};
	tw_wire_tensor_desc tn[] = {{16, DEV("cpu", 0), false, {{NULL, 0}, 0}, S("tm")}};
	tw_wire_descriptor d = {S("hello"), 1, pl, 1, tn};
	const char *hex = "b9 03 bd 05 68 65 6c 6c 6f"
	                  " ba 01 b9 02 08 bd 02 70 6d"
	                  " ba 01 b9 04 10 b9 02 bd 03 63 70 75 00 be bd 02 74 6d";
	CHECK_CODEC(descriptor, descriptor_eq, &d, hex);
	tn[0].has_target_device = true;
	tn[0].target_device = DEV("cpu", 0);
	CHECK_CODEC(descriptor, descriptor_eq, &d,
	            "b9 03 bd 05 68 65 6c 6c 6f"
	            " ba 01 b9 02 08 bd 02 70 6d"
	            " ba 01 b9 04 10 b9 02 bd 03 63 70 75 00 b9 02 bd 03 63 70 75 00 bd 02 74 6d");
	tw__wire_str_free(&d.metadata);
	tw__wire_str_free(&pl[0].metadata);
	tw__wire_str_free(&tn[0].source_device.type);
	tw__wire_str_free(&tn[0].target_device.type);
	tw__wire_str_free(&tn[0].metadata);

	tw_wire_descriptor empty = {S(""), 0, NULL, 0, NULL};
	CHECK_CODEC(descriptor, descriptor_eq, &empty, "b9 03 bd 00 ba 00 ba 00");
	tw__wire_str_free(&empty.metadata);
}

static void test_small_packets(void)
{
	tw_wire_device devs[] = {DEV("cpu", 0)};
	tw_wire_descriptor_reply r = {1, devs};
	CHECK_CODEC(descriptor_reply, reply_eq, &r, "b9 01 ba 01 b9 02 bd 03 63 70 75 00");
	tw__wire_str_free(&devs[0].type);
	tw_wire_descriptor_reply r0 = {0, NULL};
	CHECK_CODEC(descriptor_reply, reply_eq, &r0, "b9 01 ba 00");

	tw_wire_lane_advertisement lanes[] = {{S("127.0.0.1:42783"), 0}, {S("127.0.0.1:33919"), 1}};
	tw_wire_mpt_packet sh = {TW_MPT_SERVER_HELLO, 2, lanes, 0};
	CHECK_CODEC(mpt_packet, mpt_eq, &sh,
	            "b8 00 b9 01 ba 02"
	            " b9 02 bd 0f 31 32 37 2e 30 2e 30 2e 31 3a 34 32 37 38 33 00"
	            " b9 02 bd 0f 31 32 37 2e 30 2e 30 2e 31 3a 33 33 39 31 39 01");
	tw__wire_str_free(&lanes[0].address);
	tw__wire_str_free(&lanes[1].address);
	tw_wire_mpt_packet chl = {TW_MPT_CLIENT_HELLO, 0, NULL, 1};
	CHECK_CODEC(mpt_packet, mpt_eq, &chl, "b8 01 b9 01 01");
	tw_wire_mpt_packet me = {TW_PACKET_EMPTY, 0, NULL, 0};
	CHECK_CODEC(mpt_packet, mpt_eq, &me, "b8 ff be");

	tw_wire_cma_descriptor c = {1234, 0x7f0000001000u};
	CHECK_CODEC(cma_descriptor, cma_eq, &c, "b9 02 81 d2 04 83 00 10 00 00 00 7f 00 00");
	tw_wire_xth_descriptor x = {0x7f0000001000u};
	CHECK_CODEC(xth_descriptor, xth_eq, &x, "b9 01 83 00 10 00 00 00 7f 00 00");
}

/* ---- malformed input ------------------------------------------------------------- */

typedef tw_status_t (*decode_fn)(const uint8_t *, size_t, char *, size_t);

#define DEFINE_TRY(T)                                                                    \
	static tw_status_t try_##T(const uint8_t *b, size_t n, char *detail, size_t dl)      \
	{                                                                                    \
		tw_wire_##T v;                                                                   \
		size_t used;                                                                     \
		tw_status_t st = tw__wire_decode_##T(b, n, &v, &used, detail, dl);               \
		if (st == TW_OK)                                                                 \
			tw__wire_##T##_free(&v);                                                     \
		return st;                                                                       \
	}
DEFINE_TRY(packet)
DEFINE_TRY(brochure)
DEFINE_TRY(brochure_answer)
DEFINE_TRY(descriptor)
DEFINE_TRY(descriptor_reply)
DEFINE_TRY(mpt_packet)
DEFINE_TRY(cma_descriptor)

/* Expects TW_ERR_PROTO with `want` as the whole detail (or a substring when
 * `exact` is 0), and no large allocation. */
static void expect_proto(decode_fn fn, const char *hex, const char *want, int exact)
{
	uint8_t b[512];
	char detail[256] = "";
	long n = tw_test_unhex(hex, b, sizeof(b));
	CHECK(n >= 0);
	tw__wire_alloc_reset();
	tw_status_t st = fn(b, (size_t)n, detail, sizeof(detail));
	CHECKF(st == TW_ERR_PROTO, "%s: status %d", hex, st);
	CHECKF(tw__wire_alloc_bytes() <= 16 * (size_t)n + 64, "%s: %zu bytes allocated", hex,
	       tw__wire_alloc_bytes());
	if (exact)
		CHECKF(strcmp(detail, want) == 0, "detail \"%s\", want \"%s\"", detail, want);
	else
		CHECKF(strstr(detail, want) != NULL, "detail \"%s\" lacks \"%s\"", detail, want);
}

static void test_malformed(void)
{
	/* the example of the codec brief: the field path, the length, the bytes left */
	expect_proto(try_descriptor,
	             "b9 03 bd 00 ba 00 ba 03"
	             " b9 04 00 b9 02 bd 00 00 be bd 00"
	             " b9 04 00 b9 02 bd 00 00 be bd 00"
	             " b9 04 00 b9 02 bd 83 00 00 00 00 00 00 00 40 61 62 63",
	             "Descriptor.tensors[2].sourceDevice.type: string length 4611686018427387904 "
	             "exceeds the 3 bytes left", 1);
	/* huge counts are refused before allocating */
	expect_proto(try_descriptor, "b9 03 bd 00 ba 83 00 00 00 00 00 00 00 40 ba 00",
	             "Descriptor.payloads: array count 4611686018427387904 exceeds what the 2 "
	             "bytes left can hold (each takes at least 5)", 1);
	expect_proto(try_brochure, "b9 02 bb 83 ff ff ff ff ff ff ff ff bb 00",
	             "Brochure.transportDomainDescriptors: map count", 0);
	expect_proto(try_descriptor_reply, "b9 01 ba 02 b9 02 bd 00 00",
	             "DescriptorReply.targetDevices: array count 2 exceeds", 0);
	/* reference 5.3: bad type byte, variant index 2, truncation */
	expect_proto(try_packet, "ff ff ff ff ff",
	             "Packet: expected Variant (0xb8), got 0xff (negative fixint)", 1);
	expect_proto(try_packet, "b8 02 b9 01 00", "Packet: variant index 2 outside [-1, 2)", 1);
	expect_proto(try_packet, "b8 00 b9 01 bd 40",
	             "Packet.SpontaneousConnection.contextName: string length 64 exceeds the 0 "
	             "bytes left", 1);
	expect_proto(try_packet, "b8 ff 00", "must hold Nil", 0);
	expect_proto(try_packet, "b8 01 b9 01 84 01",
	             "Packet.RequestedConnection.registrationId: uint64: unexpected encoding 0x84",
	             0);
	expect_proto(try_descriptor, "b9 03 bd 01", "Descriptor.metadata: string length 1 "
	             "exceeds the 0 bytes left", 1);
	/* member counts must match exactly */
	expect_proto(try_brochure, "b9 03 bb 00 bb 00 00",
	             "Brochure: structure has 3 members, expected 2", 1);
	expect_proto(try_brochure_answer, "b9 06", "BrochureAnswer: structure has 6 members", 0);
	expect_proto(try_descriptor, "b9 03 bd 00 ba 01 b9 03 08 bd 00 00 ba 00",
	             "Descriptor.payloads[0]: structure has 3 members, expected 2", 1);
	/* a signed where an unsigned is declared and the reverse */
	expect_proto(try_descriptor,
	             "b9 03 bd 00 ba 00 ba 01 b9 04 00 b9 02 bd 00 80 05 be bd 00",
	             "Descriptor.tensors[0].sourceDevice.index: int32: unexpected encoding 0x80 (U8)", 0);
	expect_proto(try_cma_descriptor, "b9 02 83 01 00 00 00 00 00 00 00 00",
	             "CmaDescriptor.pid: uint32: unexpected encoding 0x83 (U64)", 0);
	/* optional<Device>: Nil or a Device, nothing else */
	expect_proto(try_descriptor,
	             "b9 03 bd 00 ba 00 ba 01 b9 04 00 b9 02 bd 00 00 bd 00 bd 00",
	             "Descriptor.tensors[0].targetDevice: expected Structure (0xb9), got 0xbd", 0);
	/* BrochureAnswer details */
	expect_proto(try_brochure_answer,
	             "b9 07 bd 00 bd 00 bb 00 bd 00 bb 01 bd 01 62 bc 04 01 00 00 00 bb 00 bb 00",
	             "BrochureAnswer.channelRegistrationIds[0].value: Binary length 4 of a "
	             "vector<uint64> is not a multiple of 8", 1);
	expect_proto(try_brochure_answer,
	             "b9 07 bd 00 bd 00 bb 00 bd 00 bb 01 bd 01 62 ba 01 01 bb 00 bb 00",
	             "BrochureAnswer.channelRegistrationIds[0].value: expected Binary", 0);
	expect_proto(try_brochure_answer,
	             "b9 07 bd 00 bd 00 bb 00 bd 00 bb 00 bb 00"
	             " bb 01 ba 03 b9 02 bd 00 00 b9 02 bd 00 00 b9 02 bd 00 00 bd 00",
	             "BrochureAnswer.channelForDevicePair[0].key: a pair is an array of 2 elements, "
	             "this one has 3", 1);
	expect_proto(try_brochure_answer,
	             "b9 07 bd 00 bd 00 bb 00 bd 00 bb 00 bb 00"
	             " bb 01 ba 02 b9 02 bd 00 00 b9 02 bd 03 63 70 75 85 01",
	             "BrochureAnswer.channelForDevicePair[0].key.second.index: int32: I16 needs 2 "
	             "payload bytes, only 1 left", 1);
	expect_proto(try_brochure,
	             "b9 02 bb 00 bb 01 bd 01 62 bb 01 b9 02 bd 03 63 70 75 00 bd 80",
	             "Brochure.channelDeviceDescriptors[0].value[0].value: string length: U8 needs "
	             "1 payload byte, only 0 left", 1);
	expect_proto(try_mpt_packet, "b8 00 b9 01 ba 01 b9 02 bd 00 84 00",
	             "MptPacket.ServerHello.laneAdvertisements[0].registrationId: uint64", 0);
}

/* ---- duplicate map keys: the first one wins -------------------------------------- */

static void test_duplicates(void)
{
	uint8_t b[8192];
	char detail[256];
	size_t used;

	long n = tw_test_unhex("b9 02 bb 03 bd 02 75 76 bd 01 61 bd 03 73 68 6d bd 01 62"
	                       " bd 02 75 76 bd 01 63 bb 00", b, sizeof(b));
	tw_wire_brochure br;
	CHECK(tw__wire_decode_brochure(b, (size_t)n, &br, &used, detail, sizeof(detail)) == TW_OK);
	CHECK(br.num_transports == 2);
	CHECK(strcmp(br.transports[0].key.s, "uv") == 0 && strcmp(br.transports[0].value.s, "a") == 0);
	CHECK(strcmp(br.transports[1].key.s, "shm") == 0);
	tw__wire_brochure_free(&br);

	/* more entries than the quadratic path handles: 40 entries, keys i % 25,
	 * values i; the first of each key wins and wire order is kept */
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__nop_put_struct(&w, 2);
	tw__nop_put_map(&w, 40);
	for (int i = 0; i < 40; i++) {
		char key[16], val[16];
		snprintf(key, sizeof(key), "k%d", (i * 7) % 25);
		snprintf(val, sizeof(val), "v%d", i);
		tw__nop_put_string(&w, key, strlen(key));
		tw__nop_put_string(&w, val, strlen(val));
	}
	tw__nop_put_map(&w, 0);
	CHECK(tw__nop_writer_finish(&w) == TW_OK);
	CHECK(tw__wire_decode_brochure(w.buf, w.len, &br, &used, detail, sizeof(detail)) == TW_OK);
	CHECK(br.num_transports == 25);
	for (size_t i = 0; i < br.num_transports && i < 25; i++) {
		char key[16], val[16];
		snprintf(key, sizeof(key), "k%d", (int)((i * 7) % 25));
		snprintf(val, sizeof(val), "v%zu", i);
		CHECKF(strcmp(br.transports[i].key.s, key) == 0 &&
		       strcmp(br.transports[i].value.s, val) == 0, "entry %zu: %s=%s", i,
		       br.transports[i].key.s, br.transports[i].value.s);
	}
	tw__wire_brochure_free(&br);
	tw__nop_writer_free(&w);

	/* uint64 keys, Device keys, pair<Device,Device> keys and channel keys */
	n = tw_test_unhex("b9 07 bd 00 bd 00 bb 03 01 05 00 06 81 01 00 07 bd 00"
	                  " bb 02 bd 01 62 bc 08 01 00 00 00 00 00 00 00 bd 01 62 bc 00"
	                  " bb 01 bd 01 62 bb 02 b9 02 bd 00 00 bd 01 31 b9 02 bd 00 00 bd 01 32"
	                  " bb 02 ba 02 b9 02 bd 00 00 b9 02 bd 00 01 bd 01 78"
	                  "       ba 02 b9 02 bd 00 00 b9 02 bd 00 01 bd 01 79", b, sizeof(b));
	tw_wire_brochure_answer a;
	tw_status_t st = tw__wire_decode_brochure_answer(b, (size_t)n, &a, &used, detail,
	                                                 sizeof(detail));
	CHECKF(st == TW_OK, "%s", detail);
	if (st == TW_OK) {
		CHECK(a.num_transport_ids == 2 && a.transport_ids[0].id == 5 &&
		      a.transport_ids[1].key == 0);  /* 81 01 00 = 1 again: dropped */
		CHECK(a.num_channel_ids == 1 && a.channel_ids[0].num_ids == 1);
		CHECK(a.num_channels == 1 && a.channels[0].num_devices == 1 &&
		      strcmp(a.channels[0].devices[0].descriptor.s, "1") == 0);
		CHECK(a.num_device_pairs == 1 && strcmp(a.device_pairs[0].channel.s, "x") == 0);
		tw__wire_brochure_answer_free(&a);
	}

	/* the densest map: 5000 two-byte uint64 pairs, all keys equal or all
	 * distinct; allocations stay within 16 x input + 64 (spec 1.13) */
	for (int distinct = 0; distinct < 2; distinct++) {
		tw__nop_writer_init(&w);
		tw__nop_put_struct(&w, 7);
		tw__nop_put_string(&w, "", 0);
		tw__nop_put_string(&w, "", 0);
		tw__nop_put_map(&w, 5000);
		for (int i = 0; i < 5000; i++) {
			tw__nop_put_uint(&w, distinct ? (uint64_t)(i * 7919 % 5000) : 0);
			tw__nop_put_uint(&w, (uint64_t)i % 100);
		}
		tw__nop_put_string(&w, "", 0);
		for (int i = 0; i < 3; i++)
			tw__nop_put_map(&w, 0);
		CHECK(tw__nop_writer_finish(&w) == TW_OK);
		tw__wire_alloc_reset();
		st = tw__wire_decode_brochure_answer(w.buf, w.len, &a, &used, detail, sizeof(detail));
		CHECKF(st == TW_OK, "%s", detail);
		CHECKF(tw__wire_alloc_bytes() <= 16 * w.len + 64, "%zu bytes for %zu input",
		       tw__wire_alloc_bytes(), w.len);
		if (st == TW_OK) {
			CHECK(a.num_transport_ids == (distinct ? 5000u : 1u));
			/* distinct keys come out in wire order; the first value wins */
			CHECK(a.transport_ids[0].id == 0);
			if (distinct)
				CHECK(a.transport_ids[4999].key == (uint64_t)(4999 * 7919 % 5000));
			tw__wire_brochure_answer_free(&a);
		}
		tw__nop_writer_free(&w);
	}
}


/* ---- minimal elements: the count bounds must not reject valid input ----------- */

/* N = 12 copies of the smallest possible element in every container (keys
 * may repeat: that is legal on the wire), so a minimal element size that is
 * one byte too large makes the decoder refuse a valid packet: the N extra
 * bytes it would need exceed the few bytes of the members that follow. */
#define N_MIN 12
static void put_min_device(tw_nop_writer *w)
{
	tw__nop_put_struct(w, 2);
	tw__nop_put_string(w, "", 0);
	tw__nop_put_int(w, 0);
}

static void put_min_channel_devices(tw_nop_writer *w, int outer, int inner)
{
	tw__nop_put_map(w, (uint64_t)outer);
	for (int i = 0; i < outer; i++) {
		tw__nop_put_string(w, "", 0);
		tw__nop_put_map(w, (uint64_t)inner);
		for (int j = 0; j < inner; j++) {
			put_min_device(w);
			tw__nop_put_string(w, "", 0);
		}
	}
}

#define EXPECT_ACCEPTS(T, w)                                                                \
	do {                                                                                    \
		tw_wire_##T v_;                                                                     \
		size_t used_ = 0;                                                                   \
		char detail_[256] = "";                                                             \
		CHECK(tw__nop_writer_finish(w) == TW_OK);                                           \
		tw_status_t st_ = tw__wire_decode_##T((w)->buf, (w)->len, &v_, &used_, detail_,    \
		                                      sizeof(detail_));                             \
		CHECKF(st_ == TW_OK && used_ == (w)->len, #T " minimal: %s", detail_);              \
		if (st_ == TW_OK)                                                                   \
			tw__wire_##T##_free(&v_);                                                       \
		tw__nop_writer_free(w);                                                             \
	} while (0)

/* Each container in turn holds N_MIN minimal elements while the others are
 * empty, so the bytes after it are as few as possible. */
static void test_minimal(void)
{
	tw_nop_writer w;

	for (int fill = 0; fill < 2; fill++) {
		tw__nop_writer_init(&w);
		tw__nop_put_struct(&w, 3);
		tw__nop_put_string(&w, "", 0);
		tw__nop_put_array(&w, fill == 0 ? N_MIN : 0);
		for (int i = 0; fill == 0 && i < N_MIN; i++) {
			tw__nop_put_struct(&w, 2);
			tw__nop_put_uint(&w, 0);
			tw__nop_put_string(&w, "", 0);
		}
		tw__nop_put_array(&w, fill == 1 ? N_MIN : 0);
		for (int i = 0; fill == 1 && i < N_MIN; i++) {
			tw__nop_put_struct(&w, 4);
			tw__nop_put_uint(&w, 0);
			put_min_device(&w);
			tw__nop_put_nil(&w);
			tw__nop_put_string(&w, "", 0);
		}
		EXPECT_ACCEPTS(descriptor, &w);
	}

	tw__nop_writer_init(&w);
	tw__nop_put_struct(&w, 1);
	tw__nop_put_array(&w, N_MIN);
	for (int i = 0; i < N_MIN; i++)
		put_min_device(&w);
	EXPECT_ACCEPTS(descriptor_reply, &w);

	for (int fill = 0; fill < 3; fill++) {
		tw__nop_writer_init(&w);
		tw__nop_put_struct(&w, 2);
		tw__nop_put_map(&w, fill == 0 ? N_MIN : 0);
		for (int i = 0; fill == 0 && i < 2 * N_MIN; i++)
			tw__nop_put_string(&w, "", 0);
		if (fill == 1)
			put_min_channel_devices(&w, N_MIN, 0);
		else if (fill == 2)
			put_min_channel_devices(&w, 1, N_MIN);
		else
			tw__nop_put_map(&w, 0);
		EXPECT_ACCEPTS(brochure, &w);
	}

	for (int fill = 0; fill < 5; fill++) {
		tw__nop_writer_init(&w);
		tw__nop_put_struct(&w, 7);
		tw__nop_put_string(&w, "", 0);
		tw__nop_put_string(&w, "", 0);
		tw__nop_put_map(&w, fill == 0 ? N_MIN : 0);
		for (int i = 0; fill == 0 && i < 2 * N_MIN; i++)
			tw__nop_put_uint(&w, 0);
		tw__nop_put_string(&w, "", 0);
		tw__nop_put_map(&w, fill == 1 ? N_MIN : 0);
		for (int i = 0; fill == 1 && i < N_MIN; i++) {
			tw__nop_put_string(&w, "", 0);
			tw__nop_put_u64_vector(&w, NULL, 0);
		}
		if (fill == 2)
			put_min_channel_devices(&w, N_MIN, 0);
		else if (fill == 3)
			put_min_channel_devices(&w, 1, N_MIN);
		else
			tw__nop_put_map(&w, 0);
		tw__nop_put_map(&w, fill == 4 ? N_MIN : 0);
		for (int i = 0; fill == 4 && i < N_MIN; i++) {
			tw__nop_put_array(&w, 2);
			put_min_device(&w);
			put_min_device(&w);
			tw__nop_put_string(&w, "", 0);
		}
		EXPECT_ACCEPTS(brochure_answer, &w);
	}

	tw__nop_writer_init(&w);
	tw__nop_put_variant(&w, TW_MPT_SERVER_HELLO);
	tw__nop_put_struct(&w, 1);
	tw__nop_put_array(&w, N_MIN);
	for (int i = 0; i < N_MIN; i++) {
		tw__nop_put_struct(&w, 2);
		tw__nop_put_string(&w, "", 0);
		tw__nop_put_uint(&w, 0);
	}
	EXPECT_ACCEPTS(mpt_packet, &w);
}

/* ---- generated values: decode(encode(x)) == x --------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* A value spread over every encoding width. */
static uint64_t rnd_u64(void)
{
	static const unsigned bits[] = {7, 8, 16, 32, 64};
	unsigned b = bits[rnd() % 5];
	return b == 64 ? rnd() : rnd() & ((1ull << b) - 1);
}

static int32_t rnd_i32(void)
{
	return (int32_t)(uint32_t)rnd_u64();
}

static tw_wire_str rnd_str(size_t i)
{
	char buf[300];
	size_t n = rnd() % 4 == 0 ? 130 + rnd() % 150 : rnd() % 12;
	for (size_t k = 0; k < n; k++)
		buf[k] = (char)(rnd() & 0xff);
	/* make map keys unique by a suffix that contains the entry number */
	int m = snprintf(buf + n, sizeof(buf) - n, "#%zu", i);
	tw_wire_str s = {NULL, 0};
	CHECK(tw__wire_str_set(&s, buf, n + (size_t)m) == TW_OK);
	return s;
}

static tw_wire_device rnd_dev(size_t i)
{
	tw_wire_device d = {rnd_str(i), rnd_i32()};
	return d;
}

static void rnd_channel_devices(size_t *n_out, tw_wire_channel_devices **out)
{
	size_t n = rnd() % 4;
	tw_wire_channel_devices *a = calloc(n ? n : 1, sizeof(*a));
	for (size_t i = 0; i < n; i++) {
		a[i].channel = rnd_str(i);
		a[i].num_devices = rnd() % 3;
		a[i].devices = calloc(a[i].num_devices ? a[i].num_devices : 1, sizeof(*a[i].devices));
		for (size_t j = 0; j < a[i].num_devices; j++) {
			a[i].devices[j].device = rnd_dev(j);
			a[i].devices[j].descriptor = rnd_str(j);
		}
	}
	*n_out = n;
	*out = a;
}

/* The generated values use the codec's allocator for strings and the libc one
 * for arrays, so free arrays by hand and strings with the codec. */
static void free_channel_devices(size_t n, tw_wire_channel_devices *a)
{
	for (size_t i = 0; i < n; i++) {
		tw__wire_str_free(&a[i].channel);
		for (size_t j = 0; j < a[i].num_devices; j++) {
			tw__wire_str_free(&a[i].devices[j].device.type);
			tw__wire_str_free(&a[i].devices[j].descriptor);
		}
		free(a[i].devices);
	}
	free(a);
}

static void test_generated(void)
{
	for (int round = 0; round < 150; round++) {
		/* Packet */
		tw_wire_packet p = {(int32_t)(rnd() % 3) - 1, {NULL, 0}, 0};
		if (p.kind == TW_PACKET_SPONTANEOUS)
			p.context_name = rnd_str(0);
		else if (p.kind == TW_PACKET_REQUESTED)
			p.registration_id = rnd_u64();
		CHECK_CODEC(packet, packet_eq, &p, NULL);
		tw__wire_str_free(&p.context_name);

		/* Brochure */
		tw_wire_brochure b = {0, NULL, 0, NULL};
		b.num_transports = rnd() % 4;
		b.transports = calloc(b.num_transports + 1, sizeof(*b.transports));
		for (size_t i = 0; i < b.num_transports; i++) {
			b.transports[i].key = rnd_str(i);
			b.transports[i].value = rnd_str(i);
		}
		rnd_channel_devices(&b.num_channels, &b.channels);
		CHECK_CODEC(brochure, brochure_eq, &b, NULL);
		for (size_t i = 0; i < b.num_transports; i++) {
			tw__wire_str_free(&b.transports[i].key);
			tw__wire_str_free(&b.transports[i].value);
		}
		free(b.transports);
		free_channel_devices(b.num_channels, b.channels);

		/* BrochureAnswer */
		tw_wire_brochure_answer a;
		memset(&a, 0, sizeof(a));
		a.transport = rnd_str(0);
		a.address = rnd_str(0);
		a.transport_domain_descriptor = rnd_str(0);
		a.num_transport_ids = rnd() % 3;
		a.transport_ids = calloc(a.num_transport_ids + 1, sizeof(*a.transport_ids));
		for (size_t i = 0; i < a.num_transport_ids; i++)
			a.transport_ids[i] = (tw_wire_id_entry){i, rnd_u64()};
		a.num_channel_ids = rnd() % 3;
		a.channel_ids = calloc(a.num_channel_ids + 1, sizeof(*a.channel_ids));
		for (size_t i = 0; i < a.num_channel_ids; i++) {
			a.channel_ids[i].channel = rnd_str(i);
			a.channel_ids[i].num_ids = rnd() % 4;
			a.channel_ids[i].ids = calloc(a.channel_ids[i].num_ids + 1, sizeof(uint64_t));
			for (size_t j = 0; j < a.channel_ids[i].num_ids; j++)
				a.channel_ids[i].ids[j] = rnd();
		}
		rnd_channel_devices(&a.num_channels, &a.channels);
		a.num_device_pairs = rnd() % 3;
		a.device_pairs = calloc(a.num_device_pairs + 1, sizeof(*a.device_pairs));
		for (size_t i = 0; i < a.num_device_pairs; i++) {
			a.device_pairs[i].server_device = rnd_dev(i);
			a.device_pairs[i].client_device = rnd_dev(i);
			a.device_pairs[i].channel = rnd_str(i);
		}
		CHECK_CODEC(brochure_answer, answer_eq, &a, NULL);
		tw__wire_str_free(&a.transport);
		tw__wire_str_free(&a.address);
		tw__wire_str_free(&a.transport_domain_descriptor);
		free(a.transport_ids);
		for (size_t i = 0; i < a.num_channel_ids; i++) {
			tw__wire_str_free(&a.channel_ids[i].channel);
			free(a.channel_ids[i].ids);
		}
		free(a.channel_ids);
		free_channel_devices(a.num_channels, a.channels);
		for (size_t i = 0; i < a.num_device_pairs; i++) {
			tw__wire_str_free(&a.device_pairs[i].server_device.type);
			tw__wire_str_free(&a.device_pairs[i].client_device.type);
			tw__wire_str_free(&a.device_pairs[i].channel);
		}
		free(a.device_pairs);

		/* Descriptor and DescriptorReply */
		tw_wire_descriptor d;
		memset(&d, 0, sizeof(d));
		d.metadata = rnd_str(0);
		d.num_payloads = rnd() % 4;
		d.payloads = calloc(d.num_payloads + 1, sizeof(*d.payloads));
		for (size_t i = 0; i < d.num_payloads; i++)
			d.payloads[i] = (tw_wire_payload_desc){rnd_u64(), rnd_str(i)};
		d.num_tensors = rnd() % 4;
		d.tensors = calloc(d.num_tensors + 1, sizeof(*d.tensors));
		tw_wire_descriptor_reply r = {0, calloc(d.num_tensors + 1, sizeof(tw_wire_device))};
		for (size_t i = 0; i < d.num_tensors; i++) {
			tw_wire_tensor_desc *t = &d.tensors[i];
			t->length = rnd_u64();
			t->source_device = rnd_dev(i);
			t->has_target_device = rnd() % 2;
			if (t->has_target_device)
				t->target_device = rnd_dev(i);
			else
				r.target_devices[r.num_target_devices++] = rnd_dev(i);
			t->metadata = rnd_str(i);
		}
		CHECK_CODEC(descriptor, descriptor_eq, &d, NULL);
		CHECK_CODEC(descriptor_reply, reply_eq, &r, NULL);
		tw__wire_str_free(&d.metadata);
		for (size_t i = 0; i < d.num_payloads; i++)
			tw__wire_str_free(&d.payloads[i].metadata);
		for (size_t i = 0; i < d.num_tensors; i++) {
			tw__wire_str_free(&d.tensors[i].source_device.type);
			tw__wire_str_free(&d.tensors[i].target_device.type);
			tw__wire_str_free(&d.tensors[i].metadata);
		}
		for (size_t i = 0; i < r.num_target_devices; i++)
			tw__wire_str_free(&r.target_devices[i].type);
		free(d.payloads);
		free(d.tensors);
		free(r.target_devices);

		/* channel packets */
		tw_wire_mpt_packet m = {(int32_t)(rnd() % 3) - 1, 0, NULL, 0};
		if (m.kind == TW_MPT_SERVER_HELLO) {
			m.num_lanes = rnd() % 17;
			m.lanes = calloc(m.num_lanes + 1, sizeof(*m.lanes));
			for (size_t i = 0; i < m.num_lanes; i++)
				m.lanes[i] = (tw_wire_lane_advertisement){rnd_str(i), rnd_u64()};
		} else if (m.kind == TW_MPT_CLIENT_HELLO) {
			m.registration_id = rnd_u64();
		}
		CHECK_CODEC(mpt_packet, mpt_eq, &m, NULL);
		for (size_t i = 0; i < m.num_lanes; i++)
			tw__wire_str_free(&m.lanes[i].address);
		free(m.lanes);
		tw_wire_cma_descriptor c = {(uint32_t)rnd_u64(), rnd_u64()};
		CHECK_CODEC(cma_descriptor, cma_eq, &c, NULL);
		tw_wire_xth_descriptor x = {rnd_u64()};
		CHECK_CODEC(xth_descriptor, xth_eq, &x, NULL);
	}
}

int main(void)
{
	test_packet();
	test_brochure();
	test_brochure_answer();
	test_descriptor();
	test_small_packets();
	test_malformed();
	test_duplicates();
	test_minimal();
	test_generated();
	return tw_test_done("packets_test");
}
