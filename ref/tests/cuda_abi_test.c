/*
 * cuda_abi_test.c - checks platform/cuda_abi.h (our own declaration of the
 * driver API subset, so that nothing needs the CUDA toolkit to build)
 * against the toolkit's cuda.h where it exists: every result code, attribute
 * and flag value, the sizes of the handle types, and that every entry point
 * we resolve with dlsym is a function the toolkit declares under that exact
 * name. Built only where cuda.h was found at configure time.
 */
#include <stdio.h>

#include <cuda.h>

/* our names, renamed so that they do not clash with cuda.h's */
#define CUresult tw_CUresult
#define CUdevice tw_CUdevice
#define CUdeviceptr tw_CUdeviceptr
#define CUcontext tw_CUcontext
#define CUstream tw_CUstream
#define CUevent tw_CUevent
#define CUhostFn tw_CUhostFn
#define CUipcMemHandle tw_CUipcMemHandle
#define CUipcMemHandle_st tw_CUipcMemHandle_st
#define CUipcEventHandle tw_CUipcEventHandle
#define CUipcEventHandle_st tw_CUipcEventHandle_st
#define CUuuid tw_CUuuid
#define CUuuid_st tw_CUuuid_st
#define CUctx_st tw_CUctx_st
#define CUstream_st tw_CUstream_st
#define CUevent_st tw_CUevent_st
#include "platform/cuda_abi.h"
#undef CUresult
#undef CUdevice
#undef CUdeviceptr
#undef CUcontext
#undef CUstream
#undef CUevent
#undef CUhostFn
#undef CUipcMemHandle
#undef CUipcEventHandle
#undef CUuuid

#define SAME(ours, theirs) _Static_assert((int)(ours) == (int)(theirs), #ours " != " #theirs)
SAME(TW_CUDA_SUCCESS, CUDA_SUCCESS);
SAME(TW_CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME(TW_CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME(TW_CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME(TW_CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_DEINITIALIZED);
SAME(TW_CUDA_ERROR_STUB_LIBRARY, CUDA_ERROR_STUB_LIBRARY);
SAME(TW_CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME(TW_CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME(TW_CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT);
SAME(TW_CUDA_ERROR_MAP_FAILED, CUDA_ERROR_MAP_FAILED);
SAME(TW_CUDA_ERROR_OPERATING_SYSTEM, CUDA_ERROR_OPERATING_SYSTEM);
SAME(TW_CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE);
SAME(TW_CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_FOUND);
SAME(TW_CUDA_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME(TW_CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_ILLEGAL_ADDRESS);
SAME(TW_CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
SAME(TW_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH);
SAME(TW_CUDA_ERROR_UNKNOWN, CUDA_ERROR_UNKNOWN);
SAME(TW_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
SAME(TW_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
SAME(TW_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
SAME(TW_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
SAME(TW_CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_CONTEXT);
SAME(TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME(TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
SAME(TW_CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST);
SAME(TW_CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
SAME(TW_CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME(TW_CU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
SAME(TW_CU_EVENT_INTERPROCESS, CU_EVENT_INTERPROCESS);
SAME(TW_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
SAME(TW_CU_IPC_HANDLE_SIZE, CU_IPC_HANDLE_SIZE);
_Static_assert(sizeof(tw_CUipcMemHandle) == sizeof(CUipcMemHandle), "CUipcMemHandle size");
_Static_assert(sizeof(tw_CUuuid) == sizeof(CUuuid), "CUuuid size");
_Static_assert(sizeof(tw_CUipcEventHandle) == sizeof(CUipcEventHandle), "CUipcEventHandle size");
_Static_assert(sizeof(tw_CUresult) == sizeof(CUresult), "CUresult size");
_Static_assert(sizeof(tw_CUdevice) == sizeof(CUdevice), "CUdevice size");
_Static_assert(sizeof(tw_CUdeviceptr) == sizeof(CUdeviceptr), "CUdeviceptr size");

int main(void)
{
	int n = 0;
	/* each symbol we dlsym is declared by the toolkit under that name */
#define DECLARED(name, ret, args) \
	(void)&name;                 \
	n++;
	TW_CUDA_FUNCS(DECLARED)
#undef DECLARED
	printf("ok - cuda_abi.h agrees with cuda.h %d.%d: %d entry points, every value and size\n",
	       CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10, n);
	return 0;
}
