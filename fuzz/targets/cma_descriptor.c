/*
 * cma_descriptor.c - fuzz target for the decoder of the cma channel's Descriptor (spec/wire.md 4.4):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/cma_descriptor/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(cma_descriptor)
