/*
 * packet.c - fuzz target for the decoder of the hello / RequestedConnection Packet (spec/wire.md 3.3):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/packet/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(packet)
