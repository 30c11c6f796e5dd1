/*
 * cuda.c - loading the CUDA driver with dlopen (see cuda.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/cuda.h"
#include "platform/error.h"

#define TW_CUDA_MAX_DEVICES 64

static struct {
	pthread_once_t once;
	pthread_mutex_t mu;
	tw_status_t status;
	char detail[TW_DETAIL_MAX];
	tw_cuda cu;
	CUcontext ctx[TW_CUDA_MAX_DEVICES];
} tw_cuda_state = { .once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER };

const char *tw__cuda_strerror(const tw_cuda *cu, CUresult r, char *buf, size_t len)
{
	const char *name = NULL, *text = NULL;
	if (cu && cu->cuGetErrorName)
		(void)cu->cuGetErrorName(r, &name);
	if (cu && cu->cuGetErrorString)
		(void)cu->cuGetErrorString(r, &text);
	if (name)
		snprintf(buf, len, "%s (%s)", name, text ? text : "?");
	else
		snprintf(buf, len, "CUDA error %d", r);
	return buf;
}

static void tw_cuda_load(void)
{
	tw_cuda *cu = &tw_cuda_state.cu;
	char *d = tw_cuda_state.detail;
	size_t dl = sizeof(tw_cuda_state.detail);
	tw_cuda_state.status = TW_ERR_UNSUPPORTED;
	const char *path = getenv("TW_CUDA_LIBRARY");
	if (!path || !*path)
		path = "libcuda.so.1";
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		tw__detail(d, dl, "cuda: no CUDA driver: dlopen %s: %s", path, e ? e : "failed");
		return;
	}
#define TW_CUDA_RESOLVE(name, ret, args)                                                   \
	*(void **)&cu->name = dlsym(lib, #name);                                               \
	if (!cu->name) {                                                                       \
		tw__detail(d, dl, "cuda: %s has no %s (a driver older than CUDA 12?)", path, #name); \
		dlclose(lib);                                                                      \
		memset(cu, 0, sizeof(*cu));                                                        \
		return;                                                                            \
	}
	TW_CUDA_FUNCS(TW_CUDA_RESOLVE)
#undef TW_CUDA_RESOLVE
	char eb[160];
	CUresult r = cu->cuInit(0);
	if (r != TW_CUDA_SUCCESS) {
		const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
		tw__detail(d, dl, "cuda: cuInit: %s%s%s%s", tw__cuda_strerror(cu, r, eb, sizeof(eb)),
		           cvd ? " (CUDA_VISIBLE_DEVICES=\"" : "", cvd ? cvd : "", cvd ? "\")" : "");
		return;
	}
	r = cu->cuDeviceGetCount(&cu->num_devices);
	if (r != TW_CUDA_SUCCESS || cu->num_devices <= 0) {
		tw__detail(d, dl, "cuda: cuDeviceGetCount: %s",
		           r != TW_CUDA_SUCCESS ? tw__cuda_strerror(cu, r, eb, sizeof(eb))
		                                : "no device visible");
		return;
	}
	if (cu->num_devices > TW_CUDA_MAX_DEVICES)
		cu->num_devices = TW_CUDA_MAX_DEVICES;
	tw_cuda_state.status = TW_OK;
}

tw_status_t tw__cuda_get(const tw_cuda **out, char *detail, size_t detail_len)
{
	pthread_once(&tw_cuda_state.once, tw_cuda_load);
	if (tw_cuda_state.status != TW_OK) {
		*out = NULL;
		tw__detail(detail, detail_len, "%s", tw_cuda_state.detail);
		return tw_cuda_state.status;
	}
	*out = &tw_cuda_state.cu;
	return TW_OK;
}

tw_status_t tw__cuda_use_device(const tw_cuda *cu, int device, char *detail, size_t detail_len)
{
	char eb[160];
	if (device < 0 || device >= cu->num_devices) {
		tw__detail(detail, detail_len, "cuda: device cuda:%d does not exist (%d visible)", device,
		           cu->num_devices);
		return TW_ERR_INVAL;
	}
	pthread_mutex_lock(&tw_cuda_state.mu);
	CUresult r = TW_CUDA_SUCCESS;
	if (!tw_cuda_state.ctx[device]) {
		CUdevice dev;
		r = cu->cuDeviceGet(&dev, device);
		if (r == TW_CUDA_SUCCESS)
			r = cu->cuDevicePrimaryCtxRetain(&tw_cuda_state.ctx[device], dev);
	}
	CUcontext ctx = tw_cuda_state.ctx[device];
	pthread_mutex_unlock(&tw_cuda_state.mu);
	if (r == TW_CUDA_SUCCESS)
		r = cu->cuCtxSetCurrent(ctx);
	if (r != TW_CUDA_SUCCESS) {
		tw__detail(detail, detail_len, "cuda: primary context of cuda:%d: %s", device,
		           tw__cuda_strerror(cu, r, eb, sizeof(eb)));
		return TW_ERR_INVAL;
	}
	return TW_OK;
}
