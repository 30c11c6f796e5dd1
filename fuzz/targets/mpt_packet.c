/*
 * mpt_packet.c - fuzz target for the decoder of the mpt channel's ServerHello / ClientHello Packet (spec/wire.md 4.3):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/mpt_packet/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(mpt_packet)
