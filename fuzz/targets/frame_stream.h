/*
 * frame_stream.h - the body shared by the uv_frame and ring_frame fuzz
 * targets: the input is a byte stream as a bootstrap connection would carry
 * it (spec/wire.md 2.2, 2.3.3, 3.9). It is split into frames under a limit;
 * every frame is offered again one byte short (the splitter must wait, not
 * misread); the frames, re-framed, must give back the consumed bytes; and
 * each body goes through the packet checks of fuzz_target.h in handshake
 * order: hello, Brochure, BrochureAnswer, then Descriptors.
 *
 * Only for the two frame targets.
 */
#ifndef TW_FUZZ_FRAME_STREAM_H
#define TW_FUZZ_FRAME_STREAM_H

#include "fuzz_target.h"
#include "wire/frame.h"

TW_FUZZ_DEFINE_PACKET(packet)
TW_FUZZ_DEFINE_PACKET(brochure)
TW_FUZZ_DEFINE_PACKET(brochure_answer)
TW_FUZZ_DEFINE_PACKET(descriptor)

/* A small limit, so that the fuzzer meets it often. */
#define TW_FUZZ_FRAME_LIMIT 4096

typedef tw_status_t (*tw_fuzz_split_fn)(const void *, size_t, uint64_t, const uint8_t **,
                                        size_t *, size_t *, char *, size_t);

static void tw_fuzz_frame_stream(const uint8_t *data, size_t size, size_t hdr_size,
                                 tw_fuzz_split_fn split)
{
	size_t pos = 0;
	for (unsigned frame = 0;; frame++) {
		const uint8_t *body = NULL;
		size_t body_len = 0, used = 0;
		char detail[128] = "";
		tw_status_t st = split(data + pos, size - pos, TW_FUZZ_FRAME_LIMIT, &body, &body_len,
		                       &used, detail, sizeof(detail));
		if (st != TW_OK) {
			TW_FUZZ_ASSERT(st == TW_ERR_PROTO && detail[0] && used == 0, "split: %d", st);
			TW_FUZZ_ASSERT(size - pos >= hdr_size, "error without a whole header");
			return;
		}
		if (used == 0) {
			/* incomplete: either no whole header, or the body is short */
			if (size - pos >= hdr_size) {
				uint64_t declared = hdr_size == TW_FRAME_UV_HEADER_SIZE
				                        ? tw__frame_uv_header_get(data + pos)
				                        : tw__frame_ring_header_get(data + pos);
				TW_FUZZ_ASSERT(declared > size - pos - hdr_size,
				               "complete frame of %llu bytes reported incomplete",
				               (unsigned long long)declared);
			}
			return;
		}
		TW_FUZZ_ASSERT(used == hdr_size + body_len && body == data + pos + hdr_size &&
		               used <= size - pos && body_len <= TW_FUZZ_FRAME_LIMIT,
		               "frame %u: used %zu, body %zu", frame, used, body_len);

		/* one byte short must not produce the frame */
		const uint8_t *b2 = NULL;
		size_t l2 = 0, u2 = 7;
		st = split(data + pos, used - 1, TW_FUZZ_FRAME_LIMIT, &b2, &l2, &u2, detail,
		           sizeof(detail));
		TW_FUZZ_ASSERT(st == TW_OK && u2 == 0, "a frame one byte short was produced");

		/* the header re-encodes to the same bytes */
		uint8_t hdr[8];
		if (hdr_size == TW_FRAME_UV_HEADER_SIZE) {
			tw__frame_uv_header_put(hdr, body_len);
		} else {
			st = tw__frame_ring_header_put(hdr, body_len, detail, sizeof(detail));
			TW_FUZZ_ASSERT(st == TW_OK, "ring header put: %s", detail);
		}
		TW_FUZZ_ASSERT(memcmp(hdr, data + pos, hdr_size) == 0, "header does not round-trip");

		switch (frame) {
		case 0: tw_fuzz_packet(body, body_len); break;
		case 1: tw_fuzz_brochure(body, body_len); break;
		case 2: tw_fuzz_brochure_answer(body, body_len); break;
		default: tw_fuzz_descriptor(body, body_len); break;
		}
		pos += used;
	}
}

#endif /* TW_FUZZ_FRAME_STREAM_H */
