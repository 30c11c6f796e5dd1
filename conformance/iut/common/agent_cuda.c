/*
 * agent_cuda.c - see agent_cuda.h. The driver's calls are declared here by
 * hand (CUresult is an int, CUdeviceptr a 64-bit integer): the adapters
 * depend on neither the toolkit's headers nor libtensorwire's.
 */
#define _GNU_SOURCE
#include "agent_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

typedef int cu_result;
typedef unsigned long long cu_ptr;

static struct {
	pthread_once_t once;
	char why[256];
	int ndev;
	void *ctx[16];
	cu_result (*init)(unsigned);
	cu_result (*count)(int *);
	cu_result (*get)(int *, int);
	cu_result (*retain)(void **, int);
	cu_result (*set_current)(void *);
	cu_result (*alloc)(cu_ptr *, size_t);
	cu_result (*release)(cu_ptr);
	cu_result (*copy)(cu_ptr, cu_ptr, size_t);
	cu_result (*name)(cu_result, const char **);
} g = { .once = PTHREAD_ONCE_INIT };

static void cuda_load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(g.why, sizeof(g.why), "no CUDA driver: %s", dlerror());
		return;
	}
#define SYM(field, sym)                                                                     \
	if (!(*(void **)&g.field = dlsym(lib, sym))) {                                      \
		snprintf(g.why, sizeof(g.why), "the CUDA driver lacks %s", sym);            \
		return;                                                                     \
	}
	SYM(init, "cuInit")
	SYM(count, "cuDeviceGetCount")
	SYM(get, "cuDeviceGet")
	SYM(retain, "cuDevicePrimaryCtxRetain")
	SYM(set_current, "cuCtxSetCurrent")
	SYM(alloc, "cuMemAlloc_v2")
	SYM(release, "cuMemFree_v2")
	SYM(copy, "cuMemcpy")
	SYM(name, "cuGetErrorName")
#undef SYM
	cu_result r = g.init(0);
	if (r == 0)
		r = g.count(&g.ndev);
	if (r != 0) {
		const char *n = "?";
		g.name(r, &n);
		snprintf(g.why, sizeof(g.why), "cuInit: %s", n);
		g.ndev = 0;
		return;
	}
	if (g.ndev > 16)
		g.ndev = 16;
	for (int i = 0; i < g.ndev; i++) {
		int d;
		if (g.get(&d, i) != 0 || g.retain(&g.ctx[i], d) != 0) {
			snprintf(g.why, sizeof(g.why), "cuda:%d: no primary context", i);
			g.ndev = i;
			return;
		}
	}
	if (!g.ndev)
		snprintf(g.why, sizeof(g.why), "the CUDA driver shows no device");
}

/* Makes cuda:dev current; -1 and the reason otherwise. */
static int cuda_use(int dev, char *err, size_t errlen)
{
	pthread_once(&g.once, cuda_load);
	if (dev < 0 || dev >= g.ndev) {
		snprintf(err, errlen, "cuda:%d: %s", dev,
		         g.ndev ? "no such device" : g.why);
		return -1;
	}
	if (g.set_current(g.ctx[dev]) != 0) {
		snprintf(err, errlen, "cuda:%d: cuCtxSetCurrent failed", dev);
		return -1;
	}
	return 0;
}

static int cuda_fail(const char *call, cu_result r, char *err, size_t errlen)
{
	const char *n = "?";
	g.name(r, &n);
	snprintf(err, errlen, "%s: %s", call, n);
	return -1;
}

int twc_cuda_alloc(int dev, size_t len, void **out, char *err, size_t errlen)
{
	if (cuda_use(dev, err, errlen))
		return -1;
	cu_ptr p;
	cu_result r = g.alloc(&p, len ? len : 1);
	if (r != 0)
		return cuda_fail("cuMemAlloc", r, err, errlen);
	*out = (void *)(uintptr_t)p;
	return 0;
}

void twc_cuda_free(int dev, void *p)
{
	char err[320];
	if (p && cuda_use(dev, err, sizeof(err)) == 0)
		(void)g.release((cu_ptr)(uintptr_t)p);
}

int twc_cuda_copy(int dev, void *dst, const void *src, size_t len, char *err, size_t errlen)
{
	if (!len)
		return 0;
	if (cuda_use(dev, err, errlen))
		return -1;
	cu_result r = g.copy((cu_ptr)(uintptr_t)dst, (cu_ptr)(uintptr_t)src, len);
	return r ? cuda_fail("cuMemcpy", r, err, errlen) : 0;
}
