/*
 * cuda_xth_descriptor.c - fuzz target for the decoder of the cuda_xth channel's Descriptor (spec/wire.md 4.6.1):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/cuda_xth_descriptor/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(cuda_xth_descriptor)
