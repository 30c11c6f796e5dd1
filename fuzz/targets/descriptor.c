/*
 * descriptor.c - fuzz target for the decoder of the Descriptor (spec/wire.md 3.10):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/descriptor/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(descriptor)
