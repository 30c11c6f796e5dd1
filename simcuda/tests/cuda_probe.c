/*
 * cuda_probe - asks the CUDA driver found as libcuda.so.1 (the real one or
 * simcuda) how it behaves where the CUDA channels depend on it, and prints
 * one "check: result" line per question. Run on a GPU host, its output is
 * the expectation simcuda is held to (simcuda/tests/driver.expect, compared
 * by the CTest simcuda.fidelity); lines that differ between machines (device
 * names, counts) are not printed.
 *
 * Usage: cuda_probe            run every check
 *        cuda_probe child HEX  open an IPC handle (hex) and print what it
 *                              holds; the probe runs itself so, in a fresh
 *                              process and in new pid and ipc namespaces.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "platform/cuda_abi.h"

static struct {
#define PROBE_MEMBER(name, ret, args) ret(*name) args;
	TW_CUDA_FUNCS(PROBE_MEMBER)
#undef PROBE_MEMBER
} cu;

static const char *ename(CUresult r)
{
	const char *n = NULL;
	if (cu.cuGetErrorName(r, &n) != TW_CUDA_SUCCESS || !n)
		return "?";
	return n;
}

static void line(const char *check, CUresult r)
{
	printf("%s: %s\n", check, ename(r));
	fflush(stdout);
}

static void text(const char *check, const char *v)
{
	printf("%s: %s\n", check, v);
	fflush(stdout);
}

static int load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		printf("load: %s\n", dlerror());
		return -1;
	}
#define PROBE_RESOLVE(name, ret, args)                 \
	*(void **)&cu.name = dlsym(lib, #name);            \
	if (!cu.name) {                                    \
		printf("load: no symbol %s\n", #name);         \
		return -1;                                     \
	}
	TW_CUDA_FUNCS(PROBE_RESOLVE)
#undef PROBE_RESOLVE
	return 0;
}

static int use_device0(void)
{
	CUdevice d;
	CUcontext c;
	if (cu.cuDeviceGet(&d, 0) || cu.cuDevicePrimaryCtxRetain(&c, d) || cu.cuCtxSetCurrent(c))
		return -1;
	return 0;
}

static int child(const char *hex)
{
	CUipcMemHandle h;
	for (int i = 0; i < TW_CU_IPC_HANDLE_SIZE; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return 2;
		h.reserved[i] = (char)v;
	}
	CUresult r = cu.cuInit(0);
	if (r != TW_CUDA_SUCCESS) {
		printf("%s (cuInit)\n", ename(r));
		return 0;
	}
	if (use_device0() != 0) {
		printf("no context\n");
		return 0;
	}
	CUdeviceptr p;
	r = cu.cuIpcOpenMemHandle_v2(&p, h, TW_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	if (r != TW_CUDA_SUCCESS) {
		printf("%s\n", ename(r));
		return 0;
	}
	unsigned char buf[4];
	r = cu.cuMemcpy((CUdeviceptr)(uintptr_t)buf, p, sizeof(buf));
	printf("%s %02x%02x%02x%02x\n", ename(r), buf[0], buf[1], buf[2], buf[3]);
	cu.cuIpcCloseMemHandle(p);
	return 0;
}

/* Runs "self child HEX" in a new process, after unshare(flags) (a new pid
 * namespace needs one more fork to enter it); prints its line. */
static void run_child(const char *check, const char *self, const char *hex, int flags,
                      const char *visible)
{
	printf("%s: ", check);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (flags && unshare(flags) != 0) {
			printf("unshare: %s\n", strerror(errno));
			_exit(0);
		}
		if (visible)
			setenv("CUDA_VISIBLE_DEVICES", visible, 1);
		if (flags & CLONE_NEWPID) {
			pid_t g = fork();
			if (g > 0) {
				int st;
				waitpid(g, &st, 0);
				_exit(0);
			}
			/* with a mount namespace too: a /proc of its own, as a
			 * container has */
			if ((flags & CLONE_NEWNS) &&
			    (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
			     mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)) {
				printf("mount /proc: %s\n", strerror(errno));
				_exit(0);
			}
		}
		execl(self, self, "child", hex, (char *)NULL);
		printf("exec: %s\n", strerror(errno));
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
}

int main(int argc, char **argv)
{
	if (load() != 0)
		return 1;
	if (argc == 3 && strcmp(argv[1], "child") == 0)
		return child(argv[2]);

	line("init", cu.cuInit(0));
	CUdeviceptr p;
	line("alloc_without_context", cu.cuMemAlloc_v2(&p, 4096));
	if (use_device0() != 0) {
		text("context", "failed");
		return 1;
	}
	line("alloc_zero_bytes", cu.cuMemAlloc_v2(&p, 0));
	const size_t n = 1 << 20;
	CUresult r = cu.cuMemAlloc_v2(&p, n);
	line("alloc", r);
	if (r != TW_CUDA_SUCCESS)
		return 1;

	unsigned char *host = malloc(n), *back = malloc(n);
	for (size_t i = 0; i < n; i++)
		host[i] = (unsigned char)(i * 7 + 3);
	r = cu.cuMemcpy(p, (CUdeviceptr)(uintptr_t)host, n);
	CUresult r2 = cu.cuMemcpy((CUdeviceptr)(uintptr_t)back, p, n);
	text("copy_roundtrip", r || r2 ? ename(r ? r : r2) : memcmp(host, back, n) ? "differs" : "same");
	line("copy_past_allocation_end", cu.cuMemcpy((CUdeviceptr)(uintptr_t)back, p + n / 2, n));

	unsigned mt = 0;
	r = cu.cuPointerGetAttribute(&mt, TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
	printf("pointer_type_device: %s %u\n", ename(r), mt);
	int ord = -1;
	r = cu.cuPointerGetAttribute(&ord, TW_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p + 100);
	printf("pointer_ordinal_inside: %s %d\n", ename(r), ord);
	void *pinned = NULL;
	line("alloc_host", cu.cuMemAllocHost_v2(&pinned, 8192));
	mt = 0;
	r = cu.cuPointerGetAttribute(&mt, TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
	                             (CUdeviceptr)(uintptr_t)pinned);
	printf("pointer_type_pinned: %s %u\n", ename(r), mt);
	mt = 0;
	r = cu.cuPointerGetAttribute(&mt, TW_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
	                             (CUdeviceptr)(uintptr_t)host);
	printf("pointer_type_pageable: %s\n", ename(r));

	CUdeviceptr base = 0;
	size_t size = 0;
	r = cu.cuMemGetAddressRange_v2(&base, &size, p + 12345);
	printf("address_range_inside: %s %s\n", ename(r),
	       base == p && size >= n ? "base_and_size_ok" : "wrong");
	line("address_range_host", cu.cuMemGetAddressRange_v2(&base, &size,
	                                                       (CUdeviceptr)(uintptr_t)host));

	CUstream s;
	line("stream_create", cu.cuStreamCreate(&s, TW_CU_STREAM_NON_BLOCKING));
	CUevent ev;
	line("event_create", cu.cuEventCreate(&ev, TW_CU_EVENT_DISABLE_TIMING));
	line("event_query_unrecorded", cu.cuEventQuery(ev));
	memset(back, 0, n);
	cu.cuMemcpyAsync(p, (CUdeviceptr)(uintptr_t)host, n, s);
	cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)back, p, n, s);
	cu.cuEventRecord(ev, s);
	line("event_synchronize", cu.cuEventSynchronize(ev));
	text("stream_order", memcmp(host, back, n) ? "differs" : "same");
	line("event_query_done", cu.cuEventQuery(ev));
	line("stream_wait_event_null_stream", cu.cuStreamWaitEvent(NULL, ev, 0));

	/* IPC */
	CUipcMemHandle h;
	line("ipc_get_pinned_host", cu.cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)pinned));
	line("ipc_get_inside", cu.cuIpcGetMemHandle(&h, p + 4096));
	r = cu.cuIpcGetMemHandle(&h, p);
	line("ipc_get", r);
	CUdeviceptr q;
	line("ipc_open_same_process", cu.cuIpcOpenMemHandle_v2(&q, h, TW_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	char hex[2 * TW_CU_IPC_HANDLE_SIZE + 1];
	for (int i = 0; i < TW_CU_IPC_HANDLE_SIZE; i++)
		sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
	char self[4096];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl > 0) {
		self[sl] = 0;
		run_child("ipc_open_other_process", self, hex, 0, NULL);
		run_child("ipc_open_new_pid_namespace", self, hex, CLONE_NEWPID, NULL);
		run_child("ipc_open_new_pid_namespace_own_proc", self, hex, CLONE_NEWPID | CLONE_NEWNS,
		          NULL);
		run_child("ipc_open_new_ipc_namespace", self, hex, CLONE_NEWIPC, NULL);
		run_child("ipc_open_no_visible_device", self, hex, 0, "");
	}

	pid_t pid = fork();
	if (pid == 0) {
		volatile unsigned char *dp = (volatile unsigned char *)(uintptr_t)p;
		(void)dp[0];
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	text("host_reads_device_memory", WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "no fault");

	line("free", cu.cuMemFree_v2(p));
	line("free_twice", cu.cuMemFree_v2(p));
	line("free_host", cu.cuMemFreeHost(pinned));
	line("event_destroy", cu.cuEventDestroy_v2(ev));
	line("stream_destroy", cu.cuStreamDestroy_v2(s));
	const char *nm = NULL;
	cu.cuGetErrorName(TW_CUDA_ERROR_MAP_FAILED, &nm);
	text("error_name_205", nm ? nm : "none");
	free(host);
	free(back);
	return 0;
}
