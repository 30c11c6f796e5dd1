/*
 * brochure.c - fuzz target for the decoder of the Brochure (spec/wire.md 3.4):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/brochure/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(brochure)
