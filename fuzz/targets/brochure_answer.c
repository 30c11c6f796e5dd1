/*
 * brochure_answer.c - fuzz target for the decoder of the BrochureAnswer (spec/wire.md 3.6):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/brochure_answer/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(brochure_answer)
