/*
 * frame_test.c - unit tests of the uv (u64le) and ring (u32le) framing
 * helpers (frame.c): header bytes, splitting a stream fed one byte at a
 * time, the length limit, and the framed hello vectors of spec/wire.md 2.2.
 */
#include "wire/frame.h"
#include "wire/packets.h"
#include "wire/test_util.h"

static void test_headers(void)
{
	uint8_t h8[8], h4[4];
	char detail[128] = "";
	tw__frame_uv_header_put(h8, 9);
	CHECK(tw_test_bytes_eq("uv 9", h8, 8, (const uint8_t *)"\x09\0\0\0\0\0\0\0", 8));
	tw__frame_uv_header_put(h8, (uint64_t)1 << 62);
	CHECK(tw__frame_uv_header_get(h8) == (uint64_t)1 << 62 && h8[7] == 0x40);
	CHECK(tw__frame_ring_header_put(h4, 0x22, detail, sizeof(detail)) == TW_OK);
	CHECK(tw_test_bytes_eq("ring 0x22", h4, 4, (const uint8_t *)"\x22\0\0\0", 4));
	CHECK(tw__frame_ring_header_get(h4) == 0x22);
	CHECK(tw__frame_ring_header_put(h4, UINT32_MAX, detail, sizeof(detail)) == TW_OK);
	CHECK(tw__frame_ring_header_get(h4) == UINT32_MAX);
	/* stock truncates a >= 4 GiB length to 32 bits; we refuse */
	CHECK(tw__frame_ring_header_put(h4, (uint64_t)UINT32_MAX + 1, detail, sizeof(detail)) ==
	      TW_ERR_INVAL);
	CHECK(strstr(detail, "ring frame: length 4294967296 does not fit") != NULL);
}

/* Feeds `stream` one more byte at a time and checks the frames come out
 * whole, in order, exactly when their last byte arrives. */
static void split_stream(int uv, const uint8_t *stream, size_t len, const size_t *frame_lens,
                         size_t num_frames)
{
	size_t start = 0, frame = 0;
	for (size_t avail = 0; avail <= len; avail++) {
		for (;;) {
			const uint8_t *body = NULL;
			size_t body_len = 0, used = 0;
			char detail[128];
			tw_status_t st = uv ? tw__frame_uv_split(stream + start, avail - start, 1 << 20,
			                                         &body, &body_len, &used, detail,
			                                         sizeof(detail))
			                    : tw__frame_ring_split(stream + start, avail - start, 1 << 20,
			                                           &body, &body_len, &used, detail,
			                                           sizeof(detail));
			CHECK(st == TW_OK);
			if (used == 0)
				break;
			size_t hdr = uv ? 8 : 4;
			CHECK(frame < num_frames);
			if (frame >= num_frames)
				return;
			CHECK(body_len == frame_lens[frame] && used == hdr + body_len);
			CHECK(body == stream + start + hdr);
			CHECK(start + used == avail);  /* produced on its last byte, not later */
			start += used;
			frame++;
		}
	}
	CHECK(frame == num_frames && start == len);
}

static void test_split(void)
{
	/* uv: hello "" (reference appendix B), a zero-length frame, "PAYLOAD!" */
	uint8_t uv[64];
	long n = tw_test_unhex("06 00 00 00 00 00 00 00 b8 00 b9 01 bd 00"
	                       " 00 00 00 00 00 00 00 00"
	                       " 08 00 00 00 00 00 00 00 50 41 59 4c 4f 41 44 21", uv, sizeof(uv));
	static const size_t uv_lens[] = {6, 0, 8};
	split_stream(1, uv, (size_t)n, uv_lens, 3);

	/* ring: spec 2.3.3 observed descriptor inbox: RequestedConnection{0}, payload */
	uint8_t ring[64];
	n = tw_test_unhex("05 00 00 00 b8 01 b9 01 00 00 00 00 00"
	                  " 08 00 00 00 50 41 59 4c 4f 41 44 21", ring, sizeof(ring));
	static const size_t ring_lens[] = {5, 0, 8};
	split_stream(0, ring, (size_t)n, ring_lens, 3);

	/* the framed hello decodes */
	const uint8_t *body;
	size_t body_len, used;
	char detail[128];
	CHECK(tw__frame_uv_split(uv, sizeof(uv), 1 << 20, &body, &body_len, &used, detail,
	                         sizeof(detail)) == TW_OK && used == 14);
	tw_wire_packet p;
	size_t consumed;
	CHECK(tw__wire_decode_packet(body, body_len, &p, &consumed, detail, sizeof(detail)) ==
	      TW_OK);
	CHECK(p.kind == TW_PACKET_SPONTANEOUS && p.context_name.n == 0 && consumed == 6);
	tw__wire_packet_free(&p);
}

static void test_limits(void)
{
	/* reference 5.3: an 8-byte length prefix of 2^62 */
	uint8_t huge[8] = {0, 0, 0, 0, 0, 0, 0, 0x40};
	const uint8_t *body = NULL;
	size_t body_len = 0, used = 7;
	char detail[128] = "";
	CHECK(tw__frame_uv_split(huge, sizeof(huge), 1 << 20, &body, &body_len, &used, detail,
	                         sizeof(detail)) == TW_ERR_PROTO);
	CHECKF(strcmp(detail, "uv frame: length 4611686018427387904 exceeds the limit of "
	                      "1048576 bytes") == 0, "%s", detail);
	CHECK(used == 0);
	/* the limit is inclusive */
	uint8_t at[8] = {0x10, 0, 0, 0, 0, 0, 0, 0};
	CHECK(tw__frame_uv_split(at, sizeof(at), 16, &body, &body_len, &used, detail,
	                         sizeof(detail)) == TW_OK && used == 0);
	CHECK(tw__frame_uv_split(at, sizeof(at), 15, &body, &body_len, &used, detail,
	                         sizeof(detail)) == TW_ERR_PROTO);
	uint8_t ring[4] = {0xff, 0xff, 0xff, 0xff};
	CHECK(tw__frame_ring_split(ring, sizeof(ring), TW_FRAME_RING_CAPACITY, &body, &body_len,
	                           &used, detail, sizeof(detail)) == TW_ERR_PROTO);
	CHECK(strstr(detail, "ring frame: length 4294967295 exceeds the limit of 2097152") != NULL);
	/* our default packet limit honours spec 2.2.c (MUST >= 2 MiB, SHOULD >= 16 MiB)
	 * and refuses the 2^62 header of reference 5.3 */
	CHECK(TW_FRAME_UV_PACKET_MAX >= (uint64_t)16 << 20);
	CHECK(tw__frame_uv_split(huge, sizeof(huge), TW_FRAME_UV_PACKET_MAX, &body, &body_len,
	                         &used, detail, sizeof(detail)) == TW_ERR_PROTO);
	/* the whole of UINT64_MAX as a limit accepts anything, and never overflows */
	CHECK(tw__frame_uv_split(huge, sizeof(huge), UINT64_MAX, &body, &body_len, &used, detail,
	                         sizeof(detail)) == TW_OK && used == 0);
}

int main(void)
{
	test_headers();
	test_split();
	test_limits();
	return tw_test_done("frame_test");
}
