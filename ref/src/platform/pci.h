/*
 * pci.h - where PCI devices sit in the host's PCI tree, as sysfs shows it,
 * for matching a GPU with the RDMA NIC nearest to it (field failure T31;
 * spec/wire.md 4.6.4).
 *
 * A device's place is its sysfs path below <sysfs>/devices, read through
 * the symbolic links <sysfs>/bus/pci/devices/<bus id> (a GPU, by the bus id
 * the CUDA driver reports) and <sysfs>/class/infiniband/<name>/device (a
 * verbs device), as a list of path components: the root complex
 * ("pci0000:17"), then each bridge and the device ("0000:17:00.0", ...).
 *
 * Two places are compared component by component, never by characters:
 * "pci0000:17" and "pci0000:1a" share no component, though they share the
 * characters "pci0000:1" (stock TensorPipe's cuda_gdr counts characters,
 * so a NIC under another root complex can look nearer than it is).
 *
 * The distance of two devices under one root complex is the number of
 * links from each up to their deepest common bridge, added. Devices under
 * different root complexes are farther than any two under one, and farther
 * still when their NUMA nodes (<device>/numa_node) differ.
 *
 * sysfs is the root to read ("/sys" on a host; tests build a tree
 * elsewhere). Nothing here touches a device.
 */
#ifndef TW_PLATFORM_PCI_H
#define TW_PLATFORM_PCI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"

#define TW_PCI_MAX_DEPTH 16
#define TW_PCI_COMP_MAX 32

typedef struct tw_pci_place {
	char comp[TW_PCI_MAX_DEPTH][TW_PCI_COMP_MAX];
	int depth;
	int numa; /* -1: unknown */
} tw_pci_place;

/* A different root complex costs this much, another NUMA node as much again. */
#define TW_PCI_OTHER_ROOT 1000
#define TW_PCI_OTHER_NUMA 1000

/* The place of the PCI device with this bus id ("0000:3b:00.0"; an upper
 * case or 8-digit-domain id as the CUDA driver writes it is accepted).
 * TW_ERR_NODEV (no such device) or TW_ERR_SYS with the path and errno in
 * why. */
TW_NODISCARD tw_status_t tw__pci_place_of_bus_id(const char *sysfs, const char *bus_id,
                                                 tw_pci_place *out, char *why, size_t why_len);

/* The place of the verbs device `name` ("mlx5_0"). */
TW_NODISCARD tw_status_t tw__pci_place_of_ib_device(const char *sysfs, const char *name,
                                                    tw_pci_place *out, char *why,
                                                    size_t why_len);

/* The distance defined above (0: the same device). */
int tw__pci_distance(const tw_pci_place *a, const tw_pci_place *b);

/* The size of BAR1 (<device>/resource1) of the PCI device with this bus id:
 * the window through which a NIC reaches a GPU's memory. A missing file is
 * TW_ERR_NODEV naming the path (a GPU whose BAR1 cannot be learned is
 * no use for GPUDirect RDMA, not a reason to fail). */
TW_NODISCARD tw_status_t tw__pci_bar1_size(const char *sysfs, const char *bus_id, uint64_t *size,
                                           char *why, size_t why_len);

typedef struct tw_pci_nic {
	const char *name;
	bool usable;        /* an active port: only usable NICs are chosen */
	tw_pci_place place; /* valid when has_place */
	bool has_place;
} tw_pci_nic;

/* For each GPU in order, the usable NIC nearest to it; among equally near
 * ones the one given to the fewest GPUs so far, then the first in list
 * order (so eight GPUs over two equally near NICs alternate). pick[i] is
 * the index in nics, or -1 when no usable NIC has a place. */
void tw__pci_pair(const tw_pci_place *gpus, int ngpus, const tw_pci_nic *nics, int nnics,
                  int *pick);

#endif /* TW_PLATFORM_PCI_H */
