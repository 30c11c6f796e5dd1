/*
 * gdr_plan.c - GPU-to-NIC pairing for GPUDirect RDMA (see gdr_plan.h).
 */
#include "channel/cuda/gdr_plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/error.h"
#include "platform/platform.h"
#include "platform/pci.h"
#include "transport/ibv/device.h"

/* The candidates: devices TW_IB_HCA allows, usable with an active port. */
static tw_status_t gdr_candidates(tw_gdr_plan *p, tw_pci_nic *cand, const char *sysfs)
{
	const char *hca = getenv("TW_IB_HCA");
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	char eb[128];
	if (!list || n == 0) {
		snprintf(p->why, sizeof(p->why), "%s",
		         list ? "no verbs device on this host" : tw__strerror(errno, eb, sizeof(eb)));
		if (list)
			ibv_free_device_list(list);
		return TW_ERR_UNSUPPORTED;
	}
	for (int d = 0; d < n && p->num_cand < TW_GDR_MAX_NICS; d++) {
		const char *name = ibv_get_device_name(list[d]);
		if (hca && *hca && !tw__ibv_hca_allows(hca, name))
			continue;
		int i = p->num_cand++;
		char spec[IBV_SYSFS_NAME_MAX + 2], w[TW_DETAIL_MAX];
		snprintf(spec, sizeof(spec), "=%s", name);
		snprintf(p->cand[i], sizeof(p->cand[i]), "%s", name);
		tw_pci_nic *x = &cand[i];
		memset(x, 0, sizeof(*x));
		x->name = p->cand[i];
		tw_ibv_choice probe;
		p->usable[i] = x->usable = tw__ibv_choose(spec, p->gid_index, &probe, w, sizeof(w)) ==
		                           TW_OK;
		if (x->usable)
			ibv_close_device(probe.ctx);
		else
			tw__ibv_why(p->why, sizeof(p->why), "%s", w);
		x->has_place = tw__pci_place_of_ib_device(sysfs, name, &x->place, w, sizeof(w)) == TW_OK;
	}
	ibv_free_device_list(list);
	return TW_OK;
}

tw_status_t tw__gdr_plan_make(const tw_cuda *cu, int num_gpus, const char *sysfs, tw_gdr_plan *p)
{
	memset(p, 0, sizeof(*p));
	const char *gi = getenv("TW_IB_GID_INDEX");
	p->gid_index = -1;
	if (gi && *gi) {
		char *end = NULL;
		unsigned long v = strtoul(gi, &end, 10);
		if (*end || v > 65535 || gi[0] == '-') {
			snprintf(p->why, sizeof(p->why),
			         "TW_IB_GID_INDEX='%.40s' is not a GID index (0 to 65535)", gi);
			return TW_ERR_INVAL;
		}
		p->gid_index = (int)v;
	}
	if (num_gpus > TW_CUDA_CTX_MAX_DEVICES)
		num_gpus = TW_CUDA_CTX_MAX_DEVICES;
	p->num_gpus = num_gpus;
	for (int g = 0; g < num_gpus; g++) {
		p->gpu_cand[g] = -1;
		p->gpu_distance[g] = -1;
	}
	tw_pci_nic cand[TW_GDR_MAX_NICS];
	tw_status_t st = gdr_candidates(p, cand, sysfs);
	if (st != TW_OK)
		return st;
	tw_pci_place places[TW_CUDA_CTX_MAX_DEVICES];
	int placed[TW_CUDA_CTX_MAX_DEVICES], np = 0;
	bool unplaced[TW_CUDA_CTX_MAX_DEVICES] = { false };
	int given[TW_GDR_MAX_NICS] = { 0 };
	for (int g = 0; g < num_gpus; g++) {
		CUdevice dev;
		char bus[32] = "", w[TW_DETAIL_MAX];
		if (cu->cuDeviceGet(&dev, g) != TW_CUDA_SUCCESS ||
		    cu->cuDeviceGetPCIBusId(bus, sizeof(bus), dev) != TW_CUDA_SUCCESS) {
			snprintf(p->gpu_note[g], sizeof(p->gpu_note[g]), "no PCI bus id from the driver");
			continue;
		}
		if (tw__pci_place_of_bus_id(sysfs, bus, &places[np], w, sizeof(w)) != TW_OK) {
			unplaced[g] = true; /* paired below */
			continue;
		}
		uint64_t bar1 = 0;
		if (tw__pci_bar1_size(sysfs, bus, &bar1, w, sizeof(w)) != TW_OK) {
			tw__detail(p->gpu_note[g], sizeof(p->gpu_note[g]), "%s", w);
			continue;
		}
		placed[np++] = g;
	}
	int pick[TW_CUDA_CTX_MAX_DEVICES];
	tw__pci_pair(places, np, cand, p->num_cand, pick);
	for (int i = 0; i < np; i++) {
		int g = placed[i];
		if ((p->gpu_cand[g] = pick[i]) >= 0) {
			given[pick[i]]++;
			p->gpu_distance[g] = tw__pci_distance(&places[i], &cand[pick[i]].place);
		}
	}
	for (int g = 0; g < num_gpus; g++) {
		if (!unplaced[g])
			continue;
		for (int x = 0; x < p->num_cand; x++)
			if (cand[x].usable &&
			    (p->gpu_cand[g] < 0 || given[x] < given[p->gpu_cand[g]]))
				p->gpu_cand[g] = x;
		if (p->gpu_cand[g] >= 0)
			given[p->gpu_cand[g]]++;
	}
	for (int g = 0; g < num_gpus; g++)
		if (p->gpu_cand[g] < 0 && !p->gpu_note[g][0])
			snprintf(p->gpu_note[g], sizeof(p->gpu_note[g]), "no NIC with an active port%s",
			         unplaced[g] ? "" : " and a PCI place");
	return TW_OK;
}
