/*
 * agent_cuda.h - device memory for adapters (spec/agent.md 5.2): a tensor
 * the harness puts on "cuda:N" is written from, and read into, memory of
 * that device. The CUDA driver (libcuda.so.1: simcuda's under simcuda-run,
 * the real one on a GPU host) is loaded with dlopen on first use, so an
 * adapter runs where CUDA is absent and answers such requests
 * "unsupported" with the reason.
 *
 * Any thread: each call makes the device's primary context current first.
 */
#ifndef TWC_AGENT_CUDA_H
#define TWC_AGENT_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 and *out (an address of device memory of cuda:dev holding len bytes,
 * at least one); -1 and the reason in err. */
int twc_cuda_alloc(int dev, size_t len, void **out, char *err, size_t errlen);
void twc_cuda_free(int dev, void *p);
/* A synchronous copy of len bytes between host memory and device memory of
 * cuda:dev, either way (the driver tells them apart by address). */
int twc_cuda_copy(int dev, void *dst, const void *src, size_t len, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TWC_AGENT_CUDA_H */
