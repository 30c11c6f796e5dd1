/*
 * pci.c - see pci.h.
 */
#define _GNU_SOURCE
#include "platform/pci.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "platform/error.h"
#include "platform/platform.h"

/* "0000:3B:00.0" or "00000000:3b:00.0" (the CUDA driver's forms) as sysfs
 * names it: a 4-digit domain, lower case. */
static bool pci_norm_bus_id(const char *in, char *out, size_t out_len)
{
	unsigned dom, bus, dev, fn;
	char tail;
	if (sscanf(in, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4 || dom > 0xffff ||
	    bus > 0xff || dev > 0x1f || fn > 7)
		return false;
	snprintf(out, out_len, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return true;
}

/* The place of the device whose sysfs link is `link`: the components of
 * its real path below <sysfs>/devices, and its NUMA node. */
static tw_status_t pci_place_of_link(const char *sysfs, const char *link, tw_pci_place *out,
                                     char *why, size_t why_len)
{
	char eb[128], root[PATH_MAX], real[PATH_MAX], devices[PATH_MAX + 16];
	memset(out, 0, sizeof(*out));
	out->numa = -1;
	if (!realpath(sysfs, root)) {
		int e = errno;
		tw__detail(why, why_len, "realpath %s: %s", sysfs, tw__strerror(e, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	if (!realpath(link, real)) {
		int e = errno;
		tw__detail(why, why_len, "realpath %s: %s", link, tw__strerror(e, eb, sizeof(eb)));
		return e == ENOENT ? TW_ERR_NODEV : TW_ERR_SYS;
	}
	snprintf(devices, sizeof(devices), "%s/devices/", strcmp(root, "/") == 0 ? "" : root);
	size_t n = strlen(devices);
	if (strncmp(real, devices, n) != 0) {
		tw__detail(why, why_len, "%s leads to %s, outside %s", link, real, devices);
		return TW_ERR_SYS;
	}
	char *save = NULL;
	for (char *c = strtok_r(real + n, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (out->depth == TW_PCI_MAX_DEPTH || strlen(c) >= TW_PCI_COMP_MAX) {
			tw__detail(why, why_len, "%s: a PCI path deeper or longer than this reads", link);
			return TW_ERR_SYS;
		}
		snprintf(out->comp[out->depth++], TW_PCI_COMP_MAX, "%s", c);
	}
	if (out->depth == 0 || strncmp(out->comp[0], "pci", 3) != 0) {
		tw__detail(why, why_len, "%s is not below a PCI root complex (%s)", link, real);
		return TW_ERR_NODEV;
	}
	/* the NUMA node, where the kernel knows it */
	char numa[PATH_MAX + 16];
	snprintf(numa, sizeof(numa), "%s/numa_node", link);
	FILE *f = fopen(numa, "re");
	if (f) {
		int v;
		if (fscanf(f, "%d", &v) == 1 && v >= 0)
			out->numa = v;
		fclose(f);
	}
	return TW_OK;
}

tw_status_t tw__pci_place_of_bus_id(const char *sysfs, const char *bus_id, tw_pci_place *out,
                                    char *why, size_t why_len)
{
	char id[32], link[PATH_MAX];
	if (!pci_norm_bus_id(bus_id, id, sizeof(id))) {
		tw__detail(why, why_len, "'%s' is not a PCI bus id (domain:bus:device.function)",
		           bus_id);
		return TW_ERR_INVAL;
	}
	snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", sysfs, id);
	return pci_place_of_link(sysfs, link, out, why, why_len);
}

tw_status_t tw__pci_place_of_ib_device(const char *sysfs, const char *name, tw_pci_place *out,
                                       char *why, size_t why_len)
{
	char link[PATH_MAX];
	snprintf(link, sizeof(link), "%s/class/infiniband/%s/device", sysfs, name);
	return pci_place_of_link(sysfs, link, out, why, why_len);
}

int tw__pci_distance(const tw_pci_place *a, const tw_pci_place *b)
{
	int common = 0;
	while (common < a->depth && common < b->depth &&
	       strcmp(a->comp[common], b->comp[common]) == 0)
		common++;
	if (common > 0)
		return (a->depth - common) + (b->depth - common);
	int d = TW_PCI_OTHER_ROOT + a->depth + b->depth;
	if (a->numa < 0 || b->numa < 0 || a->numa != b->numa)
		d += TW_PCI_OTHER_NUMA;
	return d;
}

tw_status_t tw__pci_bar1_size(const char *sysfs, const char *bus_id, uint64_t *size, char *why,
                              size_t why_len)
{
	char id[32], path[PATH_MAX], eb[128];
	if (!pci_norm_bus_id(bus_id, id, sizeof(id))) {
		tw__detail(why, why_len, "'%s' is not a PCI bus id (domain:bus:device.function)",
		           bus_id);
		return TW_ERR_INVAL;
	}
	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/resource1", sysfs, id);
	struct stat st;
	if (stat(path, &st) != 0) {
		int e = errno;
		tw__detail(why, why_len, "stat %s: %s (BAR1 unknown)", path,
		           tw__strerror(e, eb, sizeof(eb)));
		return e == ENOENT ? TW_ERR_NODEV : TW_ERR_SYS;
	}
	*size = (uint64_t)st.st_size;
	return TW_OK;
}

void tw__pci_pair(const tw_pci_place *gpus, int ngpus, const tw_pci_nic *nics, int nnics,
                  int *pick)
{
	int *given = tw__calloc((size_t)(nnics > 0 ? nnics : 1), sizeof(int));
	for (int g = 0; g < ngpus; g++) {
		int best = -1, best_d = INT_MAX;
		for (int i = 0; i < nnics; i++) {
			if (!nics[i].usable || !nics[i].has_place)
				continue;
			int d = tw__pci_distance(&gpus[g], &nics[i].place);
			int share = given ? given[i] : 0, best_share = best >= 0 && given ? given[best] : 0;
			if (d < best_d || (d == best_d && share < best_share)) {
				best = i;
				best_d = d;
			}
		}
		pick[g] = best;
		if (best >= 0 && given)
			given[best]++;
	}
	tw__free(given);
}
