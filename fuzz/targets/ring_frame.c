/*
 * ring_frame.c - fuzz target for the shm/ibv ring framing, u32le length +
 * bytes (spec/wire.md 2.3.3, 2.4), and the packets in the frames (see
 * frame_stream.h). Corpus: fuzz/corpus/ring_frame/.
 */
#include "frame_stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tw_fuzz_frame_stream(data, size, TW_FRAME_RING_HEADER_SIZE, tw__frame_ring_split);
	return 0;
}
