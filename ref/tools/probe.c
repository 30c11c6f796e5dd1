/*
 * probe.c - tensorwire-probe: what this host and this process can use for
 * tensor pipes, and why (tensorwire issue 11 item 8).
 *
 * For every transport and channel kind stock TensorPipe registers, it asks
 * libtensorwire to register it in a fresh context (the library's own
 * viability check) and prints the verdict with the library's reason. Then
 * it prints the facts the same-host mechanisms depend on, each with how it
 * was learned: the boot id and namespaces, the descriptors ours and stock
 * advertise (spec/wire.md 6), whether shared memory can be made (a 2 MiB
 * ring, as shm's inboxes), and whether process_vm_readv works on this
 * process (as cma's copies). A fact that cannot be learned says so with the
 * call and errno; the probe itself never fails for it.
 *
 *   tensorwire-probe          the report
 *   tensorwire-probe --help   what it does
 *   exit status 0; 2 when libtensorwire cannot create a context at all, or
 *   on an argument it does not know
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "core/core.h"
#include "platform/cuda.h"
#include "platform/identity.h"
#include "channel/cuda/gdr_plan.h"
#include "platform/pci.h"
#include "platform/platform.h"
#include "tensorwire/tensorwire.h"
#include "transport/ring/ring.h"

static void kind_line(tw_context *ctx, bool transport, const char *kind)
{
	tw_status_t st = transport ? tw_context_register_transport(ctx, kind, NULL, 0, NULL)
	                           : tw_context_register_channel(ctx, kind, NULL, 0, NULL);
	const tw_transport_reg *reg =
	    transport && st == TW_OK && ctx->num_transports ? &ctx->transports[ctx->num_transports - 1]
	                                                    : NULL;
	if (reg && reg->ops->describe) /* what it would use (ibv: device, port, GID) */
		printf("  %-11s usable: %s\n", kind, reg->ops->describe(reg->t));
	else if (st == TW_OK)
		printf("  %-11s usable\n", kind);
	else
		printf("  %-11s not usable: %s: %s\n", kind, tw_status_name(st), tw_last_error());
}

/* Each GPU's NIC for GPUDirect RDMA, as cuda_gdr pairs them (gdr_plan.h,
 * spec/wire.md 4.6.4, T31), and each GPU's BAR1. */
static void probe_gpus(void)
{
	printf("\nGPUs and RDMA NICs (cuda_gdr's pairing: a GPU's nearest NIC with an active port, "
	       "compared by PCI path components):\n");
	const tw_cuda *cu;
	char d[512];
	if (tw__cuda_get(&cu, d, sizeof(d)) != TW_OK) {
		printf("  no GPU: %s\n", d);
		return;
	}
	static tw_gdr_plan plan;
	if (tw__gdr_plan_make(cu, cu->num_devices, "/sys", &plan) != TW_OK) {
		printf("  no NIC: %s\n", plan.why);
		return;
	}
	for (int x = 0; x < plan.num_cand; x++) {
		tw_pci_place pl;
		char why[512];
		bool placed = tw__pci_place_of_ib_device("/sys", plan.cand[x], &pl, why, sizeof(why)) ==
		              TW_OK;
		printf("  NIC %-10s %s; %s%s\n", plan.cand[x],
		       plan.usable[x] ? "a port active" : "no usable port",
		       placed ? "PCI " : "no PCI place: ", placed ? pl.comp[pl.depth - 1] : why);
	}
	if (plan.why[0])
		printf("  left out: %s\n", plan.why);
	for (int g = 0; g < plan.num_gpus; g++) {
		CUdevice dev;
		char bus[32] = "?", why[512];
		uint64_t bar1 = 0;
		if (cu->cuDeviceGet(&dev, g) == TW_CUDA_SUCCESS)
			(void)cu->cuDeviceGetPCIBusId(bus, sizeof(bus), dev);
		if (tw__pci_bar1_size("/sys", bus, &bar1, why, sizeof(why)) == TW_OK)
			printf("  cuda:%d %s: BAR1 %llu MiB\n", g, bus, (unsigned long long)(bar1 >> 20));
		int x = plan.gpu_cand[g];
		if (x < 0)
			printf("  cuda:%d: no GPUDirect RDMA: %s\n", g, plan.gpu_note[g]);
		else if (plan.gpu_distance[g] >= 0)
			printf("  cuda:%d: NIC %s (PCI distance %d)\n", g, plan.cand[x],
			       plan.gpu_distance[g]);
		else
			printf("  cuda:%d: NIC %s (the GPU is not in this host's sysfs: the NIC with the "
			       "fewest GPUs)\n", g, plan.cand[x]);
	}
}

static void fact(const char *what, tw_status_t st, const char *value, const char *detail)
{
	printf("  %-22s %s\n", what, st == TW_OK ? value : detail);
}

int main(int argc, char **argv)
{
	if (argc > 1) {
		bool help = argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
		fprintf(help ? stdout : stderr,
		        "%susage: tensorwire-probe\n"
		        "Reports which transports and channels libtensorwire can use in this process "
		        "and why\n(the library's own viability checks), then the facts the same-host "
		        "mechanisms\ndepend on: boot id, namespaces, the descriptors ours and stock "
		        "advertise, shared\nmemory, process_vm_readv, and each GPU's RDMA NIC. It takes "
		        "no arguments; the\nenvironment the library reads (TW_IB_HCA, "
		        "CUDA_VISIBLE_DEVICES, ...) changes\nwhat it finds.\n",
		        help ? "" : "tensorwire-probe: no arguments are taken\n");
		return help ? 0 : 2;
	}
	printf("tensorwire-probe: libtensorwire %s, pid %d\n\n", TW_VERSION_STRING, (int)getpid());
	static const char *const transports[] = { "uv", "shm", "ibv" };
	static const char *const channels[] = { "basic", "mpt", "cma", "xth", "cuda_basic",
		                                "cuda_ipc", "cuda_gdr", "cuda_xth" };
	tw_context *ctx;
	if (tw_context_create("probe", &ctx) != TW_OK) {
		fprintf(stderr, "tensorwire-probe: tw_context_create: %s\n", tw_last_error());
		return 2;
	}
	printf("transports (registered in a fresh context):\n");
	for (size_t i = 0; i < sizeof(transports) / sizeof(*transports); i++)
		kind_line(ctx, true, transports[i]);
	printf("channels:\n");
	for (size_t i = 0; i < sizeof(channels) / sizeof(*channels); i++)
		kind_line(ctx, false, channels[i]);
	tw_context_destroy(ctx);

	char v[TW_IDENTITY_MAX], d[512];
	printf("\nsame host (spec/wire.md 6; equal descriptors do not prove a mechanism works "
	       "between two containers):\n");
	tw_status_t st = tw__identity_ns("net", v, sizeof(v), d, sizeof(d));
	fact("net namespace", st, v, d);
	st = tw__identity_ns("pid", v, sizeof(v), d, sizeof(d));
	fact("pid namespace", st, v, d);
	st = tw__identity_ns("user", v, sizeof(v), d, sizeof(d));
	fact("user namespace", st, v, d);
	st = tw__identity_shm(v, sizeof(v), d, sizeof(d));
	fact("shm descriptor", st, v, d);
	st = tw__identity_cma(v, sizeof(v), d, sizeof(d));
	fact("cma descriptor", st, v, d);
	st = tw__identity_xth(v, sizeof(v), d, sizeof(d));
	fact("xth descriptor", st, v, d);

	/* shared memory as shm's inboxes need it */
	tw_ring r;
	st = tw__ring_create(&r, TW_RING_INBOX_CAPACITY, "shm", d, sizeof(d));
	if (st == TW_OK) {
		tw__ring_unmap(&r);
		snprintf(v, sizeof(v), "works (a 2 MiB ring made, reserved and mapped)");
	}
	fact("shared memory", st, v, d);

	/* cross-memory attach as cma's copies need it: a copy from ourselves */
	char src[64] = "tensorwire-probe", dst[64] = "";
	struct iovec l = { dst, sizeof(dst) }, rm = { src, sizeof(src) };
	ssize_t n = tw__sys_process_vm_readv(getpid(), &l, 1, &rm, 1);
	char eb[128];
	if (n == (ssize_t)sizeof(src) && !strcmp(dst, src))
		snprintf(v, sizeof(v), "works on this process");
	else
		snprintf(v, sizeof(v), "fails on this process: %s",
		         n < 0 ? tw__strerror(errno, eb, sizeof(eb)) : "short copy");
	fact("process_vm_readv", TW_OK, v, "");
	int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	snprintf(v, sizeof(v), "%s", dumpable == 1 ? "yes" : dumpable == 0 ? "no (peers cannot attach)"
	                                                             : "unknown");
	fact("dumpable", TW_OK, v, "");
	char scope[16];
	if (tw__sys_read_file("/proc/sys/kernel/yama/ptrace_scope", scope, sizeof(scope)) > 0) {
		scope[strcspn(scope, "\n")] = '\0';
		snprintf(v, sizeof(v), "%s (0 classic, 1 restricted, 2 admin only, 3 none)", scope);
	} else {
		snprintf(v, sizeof(v), "not present (no YAMA)");
	}
	fact("yama ptrace_scope", TW_OK, v, "");
	probe_gpus();
	return 0;
}
