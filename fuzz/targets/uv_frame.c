/*
 * uv_frame.c - fuzz target for the uv (TCP) framing, u64le length + bytes
 * (spec/wire.md 2.2), and the packets in the frames (see frame_stream.h).
 * Corpus: fuzz/corpus/uv_frame/.
 */
#include "frame_stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tw_fuzz_frame_stream(data, size, TW_FRAME_UV_HEADER_SIZE, tw__frame_uv_split);
	return 0;
}
