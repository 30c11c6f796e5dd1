/*
 * device.h - which verbs device, port and GID the ibv transport uses
 * (spec/wire.md 2.4.1), and fork safety before the first registration.
 *
 * Stock TensorPipe takes the first device of ibv_get_device_list, port 1 and
 * GID index 0, whatever their state; a host whose first HCA is down, or
 * whose GID 0 is a link-local RoCE v1 entry, then fails every connection
 * with "transport retry counter exceeded" (field failures T19, T24). Here:
 *
 *   - devices come in ibv_get_device_list's order, filtered by the user's
 *     list (TW_IB_HCA, NCCL's syntax: "mlx5_0:1,mlx5_1" prefixes, "=name"
 *     exact names, "^..." all but these; a ":port" narrows to one port);
 *   - only ACTIVE ports count;
 *   - on an InfiniBand port the GID index is 0 and the LID routes;
 *   - on a RoCE port every GID-table entry is ranked: RoCE v2 with an
 *     IPv4-mapped address first, then v2 with a routable IPv6 address, then
 *     v1 with a routable address, and a link-local or zero entry only when
 *     nothing else exists anywhere. An entry whose query fails (EINVAL on a
 *     hole in the table) is skipped, not fatal;
 *   - TW_IB_GID_INDEX forces the index on every port;
 *   - the best rank over all devices and ports wins; the first in list order
 *     among equals.
 *
 * When nothing is usable the reason names each device, port and verb that
 * ruled it out, for tw_pipe_get_verdicts and tensorwire-probe.
 */
#ifndef TW_TRANSPORT_IBV_DEVICE_H
#define TW_TRANSPORT_IBV_DEVICE_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"

#define TW_IBV_WHO "ibv transport"

typedef struct tw_ibv_choice {
	struct ibv_context *ctx; /* open; the caller closes it */
	char dev_name[IBV_SYSFS_NAME_MAX];
	uint8_t port;
	int gid_index;
	bool gid_forced; /* TW_IB_GID_INDEX: never changed towards a peer */
	/* stock TensorPipe's GID on this port (index 0) is of another family
	 * than ours: a stock peer must be answered in its family (ibv.c) */
	bool stock_gid_differs;
	const char *gid_kind; /* "IB", "RoCE v1", "RoCE v2" */
	union ibv_gid gid;
	uint16_t lid;       /* 0 on RoCE */
	enum ibv_mtu mtu;   /* the port's active MTU */
	uint32_t max_msg_sz;
	struct ibv_device_attr dattr;
	char describe[160]; /* "simrdma1 port 1, GID 3 (RoCE v2 ::ffff:10.0.0.1)" */
} tw_ibv_choice;

/* Picks the device, port and GID by the rules above. hca: the device list
 * ("" or NULL: every device); gid_index: forced index, or -1. TW_OK and an
 * open context in out->ctx; TW_ERR_UNSUPPORTED with every reason in why. */
TW_NODISCARD tw_status_t tw__ibv_choose(const char *hca, int gid_index, tw_ibv_choice *out,
                                        char *why, size_t why_len);

/* Appends one reason ("; "-separated) to why, cutting what does not fit. */
void tw__ibv_why(char *why, size_t why_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Whether the user's device list (TW_IB_HCA's syntax) lets device `dev`
 * be used on some port. */
bool tw__ibv_hca_allows(const char *spec, const char *dev);

/* The address family of a RoCE GID, for matching the peer's: a packet from
 * a GID of one family cannot reach a GID of another (an IPv4-mapped source
 * builds an IPv4 packet; a link-local one is routed by IPv6 on its link). */
typedef enum tw_ibv_gid_family {
	TW_IBV_GID_ZERO,
	TW_IBV_GID_LINK_LOCAL, /* fe80::/10 */
	TW_IBV_GID_V4,         /* ::ffff:a.b.c.d */
	TW_IBV_GID_V6,         /* any other IPv6 address */
} tw_ibv_gid_family;

tw_ibv_gid_family tw__ibv_gid_family(const union ibv_gid *g);
const char *tw__ibv_gid_family_name(tw_ibv_gid_family f);

/* The GID of ch's port to use towards a peer whose set-up record names
 * `peer` (spec 2.4.5): ch's own when it is of the peer's family (or forced,
 * or the port is InfiniBand), else the lowest index of the peer's family
 * (stock TensorPipe always uses index 0: a link-local peer is most likely
 * stock, and the lowest link-local index is the entry it would use).
 * False, with *index and *gid left as ch's, when the port has none. */
bool tw__ibv_match_gid(const tw_ibv_choice *ch, const union ibv_gid *peer, int *index,
                       union ibv_gid *gid);

/* The peer's end of an RC queue pair, as a set-up record carries it. */
typedef struct tw_ibv_peer_qp {
	uint32_t lid; /* 0: route by GID */
	union ibv_gid gid;
	uint32_t qpn;
	enum ibv_mtu mtu;
} tw_ibv_peer_qp;

/* Moves a new RC queue pair to INIT on `port` (local and remote write
 * allowed). 0, or the errno of ibv_modify_qp. */
int tw__ibv_qp_init(struct ibv_qp *qp, uint8_t port);

/* Moves a queue pair in INIT to RTR towards `peer` and then to RTS, with
 * stock TensorPipe's attributes (packet sequence numbers 0, the smaller
 * MTU, timeout 14, 7 retries, RNR retries without end). 0, or the errno
 * with the transition that failed in *verb. */
int tw__ibv_qp_connect(struct ibv_qp *qp, const tw_ibv_choice *ch, int gid_index,
                       const tw_ibv_peer_qp *peer, const char **verb);

/* Makes registered memory safe across fork (rdma-core's ibv_fork_init),
 * unless the kernel makes it unneeded (ibv_is_fork_initialized says
 * IBV_FORK_UNNEEDED) or it is done already. Must run before this process
 * registers any memory; TW_ERR_UNSUPPORTED with the reason if it fails
 * (memory was registered before, by someone else). */
TW_NODISCARD tw_status_t tw__ibv_fork_safe(char *why, size_t why_len);

/* Whether the user opted out of that (TW_IB_FORK_SAFE=0, documented in
 * tensorwire.h), for the ibv transport and cuda_gdr alike. */
bool tw__ibv_fork_opted_out(void);

#endif /* TW_TRANSPORT_IBV_DEVICE_H */
