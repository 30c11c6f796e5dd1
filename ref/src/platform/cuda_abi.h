/*
 * cuda_abi.h - the subset of the CUDA driver API (libcuda.so.1) that
 * libtensorwire and simcuda use, declared from the driver's documented ABI
 * so that nothing in the default build needs the CUDA toolkit. Where the
 * toolkit's cuda.h exists, ref/tests/cuda_abi_test.c checks every value and
 * signature here against it.
 *
 * TW_CUDA_FUNCS lists each entry point once, with the exact symbol name the
 * driver exports (the _v2 names where the toolkit maps the plain name to
 * one), its return and argument types. platform/cuda.c resolves them with
 * dlsym; simcuda defines them.
 */
#ifndef TW_PLATFORM_CUDA_ABI_H
#define TW_PLATFORM_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef void (*CUhostFn)(void *user_data);

#define TW_CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
	char reserved[TW_CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
typedef struct CUipcEventHandle_st {
	char reserved[TW_CU_IPC_HANDLE_SIZE];
} CUipcEventHandle;

typedef struct CUuuid_st {
	char bytes[16];
} CUuuid;

enum {
	TW_CUDA_SUCCESS = 0,
	TW_CUDA_ERROR_INVALID_VALUE = 1,
	TW_CUDA_ERROR_OUT_OF_MEMORY = 2,
	TW_CUDA_ERROR_NOT_INITIALIZED = 3,
	TW_CUDA_ERROR_DEINITIALIZED = 4,
	TW_CUDA_ERROR_STUB_LIBRARY = 34,
	TW_CUDA_ERROR_NO_DEVICE = 100,
	TW_CUDA_ERROR_INVALID_DEVICE = 101,
	TW_CUDA_ERROR_INVALID_CONTEXT = 201,
	TW_CUDA_ERROR_MAP_FAILED = 205,
	TW_CUDA_ERROR_OPERATING_SYSTEM = 304,
	TW_CUDA_ERROR_INVALID_HANDLE = 400,
	TW_CUDA_ERROR_NOT_FOUND = 500,
	TW_CUDA_ERROR_NOT_READY = 600,
	TW_CUDA_ERROR_ILLEGAL_ADDRESS = 700,
	TW_CUDA_ERROR_NOT_SUPPORTED = 801,
	TW_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
	TW_CUDA_ERROR_UNKNOWN = 999,
};

enum {
	TW_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
	TW_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
	TW_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
	TW_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
};

enum {
	TW_CU_POINTER_ATTRIBUTE_CONTEXT = 1,
	TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
	TW_CU_POINTER_ATTRIBUTE_BUFFER_ID = 7, /* unsigned long long, unique per allocation */
	TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
};

enum {
	TW_CU_MEMORYTYPE_HOST = 1,
	TW_CU_MEMORYTYPE_DEVICE = 2,
};

enum {
	TW_CU_STREAM_NON_BLOCKING = 0x1,
	TW_CU_EVENT_DISABLE_TIMING = 0x2,
	TW_CU_EVENT_INTERPROCESS = 0x4,
	TW_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1,
};

/* X(symbol, return type, (parameters)) */
#define TW_CUDA_FUNCS(X)                                                                   \
	X(cuInit, CUresult, (unsigned int flags))                                           \
	X(cuDriverGetVersion, CUresult, (int *version))                                     \
	X(cuGetErrorName, CUresult, (CUresult error, const char **str))                     \
	X(cuGetErrorString, CUresult, (CUresult error, const char **str))                   \
	X(cuDeviceGetCount, CUresult, (int *count))                                         \
	X(cuDeviceGet, CUresult, (CUdevice * device, int ordinal))                          \
	X(cuDeviceGetName, CUresult, (char *name, int len, CUdevice dev))                   \
	X(cuDeviceGetUuid_v2, CUresult, (CUuuid * uuid, CUdevice dev))                      \
	X(cuDeviceGetPCIBusId, CUresult, (char *pciBusId, int len, CUdevice dev))           \
	X(cuDeviceGetAttribute, CUresult, (int *pi, int attrib, CUdevice dev))              \
	X(cuDeviceTotalMem_v2, CUresult, (size_t * bytes, CUdevice dev))                    \
	X(cuDeviceCanAccessPeer, CUresult, (int *can, CUdevice dev, CUdevice peer))         \
	X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext * pctx, CUdevice dev))             \
	X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice dev))                           \
	X(cuCtxSetCurrent, CUresult, (CUcontext ctx))                                       \
	X(cuCtxGetCurrent, CUresult, (CUcontext * pctx))                                    \
	X(cuMemAlloc_v2, CUresult, (CUdeviceptr * dptr, size_t bytesize))                   \
	X(cuMemFree_v2, CUresult, (CUdeviceptr dptr))                                       \
	X(cuMemAllocHost_v2, CUresult, (void **pp, size_t bytesize))                        \
	X(cuMemFreeHost, CUresult, (void *p))                                               \
	X(cuMemGetAddressRange_v2, CUresult,                                                \
	  (CUdeviceptr * pbase, size_t * psize, CUdeviceptr dptr))                          \
	X(cuMemcpy, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t bytes))             \
	X(cuMemcpyAsync, CUresult,                                                          \
	  (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))                \
	X(cuMemsetD8_v2, CUresult, (CUdeviceptr dst, unsigned char value, size_t n))        \
	X(cuStreamCreate, CUresult, (CUstream * pstream, unsigned int flags))               \
	X(cuStreamDestroy_v2, CUresult, (CUstream stream))                                  \
	X(cuStreamSynchronize, CUresult, (CUstream stream))                                 \
	X(cuStreamWaitEvent, CUresult, (CUstream stream, CUevent event, unsigned int flags)) \
	X(cuLaunchHostFunc, CUresult, (CUstream stream, CUhostFn fn, void *user_data))      \
	X(cuEventCreate, CUresult, (CUevent * pevent, unsigned int flags))                  \
	X(cuEventRecord, CUresult, (CUevent event, CUstream stream))                        \
	X(cuEventQuery, CUresult, (CUevent event))                                          \
	X(cuEventSynchronize, CUresult, (CUevent event))                                    \
	X(cuEventDestroy_v2, CUresult, (CUevent event))                                     \
	X(cuIpcGetMemHandle, CUresult, (CUipcMemHandle * handle, CUdeviceptr dptr))         \
	X(cuIpcOpenMemHandle_v2, CUresult,                                                  \
	  (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int flags))                 \
	X(cuIpcCloseMemHandle, CUresult, (CUdeviceptr dptr))                                \
	X(cuIpcGetEventHandle, CUresult, (CUipcEventHandle * handle, CUevent event))        \
	X(cuIpcOpenEventHandle, CUresult, (CUevent * event, CUipcEventHandle handle))       \
	X(cuPointerGetAttribute, CUresult, (void *data, int attribute, CUdeviceptr ptr))

#endif /* TW_PLATFORM_CUDA_ABI_H */
