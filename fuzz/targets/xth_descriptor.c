/*
 * xth_descriptor.c - fuzz target for the decoder of the xth channel's Descriptor (spec/wire.md 4.5):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/xth_descriptor/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(xth_descriptor)
