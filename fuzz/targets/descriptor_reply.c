/*
 * descriptor_reply.c - fuzz target for the decoder of the DescriptorReply (spec/wire.md 3.11):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/descriptor_reply/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(descriptor_reply)
