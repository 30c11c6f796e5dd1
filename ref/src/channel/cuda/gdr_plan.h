/*
 * gdr_plan.h - which NIC each GPU would use for GPUDirect RDMA (cuda_gdr,
 * spec/wire.md 4.6.4.b-c; field failure T31), decided without opening
 * anything: cuda_gdr builds its NICs from the plan, and tensorwire-probe
 * prints it.
 *
 * Candidates are the verbs devices in list order that TW_IB_HCA allows,
 * usable when the ibv transport's rules find an active port and a GID on
 * them (TW_IB_GID_INDEX honoured). A GPU that sysfs shows gets the nearest
 * usable NIC by PCI path components (platform/pci.h), unless its BAR1 size
 * cannot be learned (then none); a GPU sysfs does not show (simulated, or
 * no host /sys here) gets the usable NIC given to the fewest GPUs so far,
 * the first listed among equals.
 */
#ifndef TW_CHANNEL_CUDA_GDR_PLAN_H
#define TW_CHANNEL_CUDA_GDR_PLAN_H

#include <infiniband/verbs.h>
#include <stdbool.h>

#include "channel/cuda/cuda_common.h"

#define TW_GDR_MAX_NICS 16

typedef struct tw_gdr_plan {
	int num_cand;
	char cand[TW_GDR_MAX_NICS][IBV_SYSFS_NAME_MAX];
	bool usable[TW_GDR_MAX_NICS];
	int gid_index; /* TW_IB_GID_INDEX, or -1 */
	int num_gpus;
	int gpu_cand[TW_CUDA_CTX_MAX_DEVICES];     /* index in cand, -1: none */
	int gpu_distance[TW_CUDA_CTX_MAX_DEVICES]; /* PCI distance, -1: GPU not in sysfs */
	char gpu_note[TW_CUDA_CTX_MAX_DEVICES][192]; /* why none (BAR1, bus id, no NIC) */
	char why[TW_DETAIL_MAX]; /* the NICs left out and why */
} tw_gdr_plan;

/* Fills *p for GPUs 0..num_gpus-1 of cu, reading sysfs under `sysfs`
 * ("/sys"). TW_ERR_UNSUPPORTED with the reason in p->why when the host has
 * no verbs device at all; TW_ERR_INVAL when TW_IB_GID_INDEX is set but not
 * an index. */
TW_NODISCARD tw_status_t tw__gdr_plan_make(const tw_cuda *cu, int num_gpus, const char *sysfs,
                                           tw_gdr_plan *p);

#endif /* TW_CHANNEL_CUDA_GDR_PLAN_H */
