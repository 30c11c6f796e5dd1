/*
 * cuda.h - the CUDA driver, loaded with dlopen on first use and never
 * linked, so that libtensorwire and every CPU-only program run where CUDA is
 * absent, stubbed or has no device (field failure T08). The CUDA channels
 * reach the driver only through the table tw__cuda_get() returns.
 *
 * Viability is decided once per process and remembered with its reason:
 * the library loads (TW_CUDA_LIBRARY names another file than libcuda.so.1),
 * every entry point in cuda_abi.h resolves, cuInit(0) succeeds and at least
 * one device is visible.
 */
#ifndef TW_PLATFORM_CUDA_H
#define TW_PLATFORM_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "platform/cuda_abi.h"
#include "tensorwire/tensorwire.h"

typedef struct tw_cuda {
#define TW_CUDA_MEMBER(name, ret, args) ret(*name) args;
	TW_CUDA_FUNCS(TW_CUDA_MEMBER)
#undef TW_CUDA_MEMBER
	int num_devices;
} tw_cuda;

/* The driver, or NULL with TW_ERR_UNSUPPORTED and why CUDA is not usable
 * here in detail ("cuda: cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable
 * device is detected)"). Any thread; the first call loads. */
TW_NODISCARD tw_status_t tw__cuda_get(const tw_cuda **out, char *detail, size_t detail_len);

/* "NAME (text)" for a driver result, into buf. */
const char *tw__cuda_strerror(const tw_cuda *cu, CUresult r, char *buf, size_t len);

/* Makes the primary context of `device` current on this thread (retained
 * once per process and device, released never: the driver tears it down at
 * exit). TW_ERR_INVAL naming the call on failure. */
TW_NODISCARD tw_status_t tw__cuda_use_device(const tw_cuda *cu, int device, char *detail,
                                             size_t detail_len);

#endif /* TW_PLATFORM_CUDA_H */
