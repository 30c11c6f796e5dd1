/*
 * cuda_ipc_device.c - fuzz target for the decoder of the cuda_ipc channel's device descriptor (spec/wire.md 4.6.3):
 * the checks of fuzz_target.h on every input. Corpus: fuzz/corpus/cuda_ipc_device/.
 */
#include "fuzz_target.h"

TW_FUZZ_PACKET_TARGET(cuda_ipc_device)
