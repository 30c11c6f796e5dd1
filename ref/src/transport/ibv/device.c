/*
 * device.c - see device.h.
 */
#include "transport/ibv/device.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/error.h"
#include "platform/mutant.h"
#include "platform/platform.h"

/* Appends one reason ("; "-separated) to why, cutting what does not fit. */
void tw__ibv_why(char *why, size_t why_len, const char *fmt, ...)
{
	size_t off = strlen(why);
	if (off + 3 >= why_len)
		return;
	if (off) {
		memcpy(why + off, "; ", 3);
		off += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why + off, why_len - off, fmt, ap);
	va_end(ap);
}

/* Does device `dev`, port `port` pass the user's list (device.h)?
 * *named_out: some entry names this device (for "matches nothing"). */
static bool ibv_hca_listed(const char *spec, const char *dev, unsigned port, bool *named_out)
{
	if (!spec || !spec[0])
		return true;
	bool exclude = spec[0] == '^';
	const char *p = spec + exclude;
	bool exact = p[0] == '=';
	p += exact;
	bool hit = false;
	while (*p) {
		size_t n = strcspn(p, ",");
		const char *colon = memchr(p, ':', n);
		size_t name_len = colon ? (size_t)(colon - p) : n;
		unsigned want_port = colon ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
		bool name_ok = name_len > 0 && (exact ? strlen(dev) == name_len &&
		                                            !memcmp(dev, p, name_len)
		                                      : !strncmp(dev, p, name_len));
		if (name_ok)
			*named_out = true;
		if (name_ok && (want_port == 0 || want_port == port))
			hit = true;
		p += n + (p[n] == ',');
	}
	return exclude ? !hit : hit;
}

bool tw__ibv_hca_allows(const char *spec, const char *dev)
{
	bool named = false;
	for (unsigned port = 1; port <= 32; port++)
		if (ibv_hca_listed(spec, dev, port, &named))
			return true;
	return false;
}

static bool ibv_gid_zero(const union ibv_gid *g)
{
	static const uint8_t zero[16];
	return !memcmp(g->raw, zero, sizeof(zero));
}

static bool ibv_gid_v4_mapped(const union ibv_gid *g)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return !memcmp(g->raw, pfx, sizeof(pfx));
}

static bool ibv_gid_link_local(const union ibv_gid *g)
{
	return g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80;
}

/* The rank of a RoCE GID-table entry (device.h): 0 unusable, 1 link-local
 * (only when nothing else exists), 2 v1 routable, 3 v2 IPv6, 4 v2 IPv4. */
static int ibv_gid_rank(const struct ibv_gid_entry *e)
{
	if (ibv_gid_zero(&e->gid))
		return 0;
	if (ibv_gid_link_local(&e->gid))
		return 1;
	if (e->gid_type == IBV_GID_TYPE_ROCE_V2)
		return ibv_gid_v4_mapped(&e->gid) ? 4 : 3;
	return 2;
}

tw_ibv_gid_family tw__ibv_gid_family(const union ibv_gid *g)
{
	return ibv_gid_zero(g)         ? TW_IBV_GID_ZERO
	       : ibv_gid_link_local(g) ? TW_IBV_GID_LINK_LOCAL
	       : ibv_gid_v4_mapped(g)  ? TW_IBV_GID_V4
	                               : TW_IBV_GID_V6;
}

const char *tw__ibv_gid_family_name(tw_ibv_gid_family f)
{
	static const char *const names[] = { "zero", "link-local IPv6", "IPv4-mapped",
		                             "IPv6" };
	return names[f];
}

bool tw__ibv_match_gid(const tw_ibv_choice *ch, const union ibv_gid *peer, int *index,
                       union ibv_gid *gid)
{
	*index = ch->gid_index;
	*gid = ch->gid;
	tw_ibv_gid_family want = tw__ibv_gid_family(peer);
	if (ch->lid != 0 || ch->gid_forced || want == TW_IBV_GID_ZERO ||
	    tw__ibv_gid_family(&ch->gid) == want)
		return true;
	struct ibv_port_attr pa;
	if (ibv_query_port(ch->ctx, ch->port, &pa) != 0)
		return false;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		if (ibv_query_gid_ex(ch->ctx, ch->port, (uint32_t)i, &e, 0) != 0)
			continue; /* a hole, or an entry that fails: the search goes on */
		if (tw__ibv_gid_family(&e.gid) == want) {
			*index = i;
			*gid = e.gid;
			return true;
		}
	}
	return false;
}

static const char *ibv_gid_kind(uint32_t type)
{
	return type == IBV_GID_TYPE_ROCE_V2   ? "RoCE v2"
	       : type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
	                                      : "IB";
}

typedef struct ibv_candidate {
	int rank;
	int dev;
	uint8_t port;
	int gid_index;
	uint32_t gid_type;
	union ibv_gid gid;
	uint16_t lid;
	enum ibv_mtu mtu;
	uint32_t max_msg_sz;
} ibv_candidate;

/* The best GID of one active port into *best (if better than it). */
static void ibv_rank_port(struct ibv_context *ctx, const char *name, int dev, uint8_t port,
                          const struct ibv_port_attr *pa, int forced, ibv_candidate *best,
                          char *why, size_t why_len)
{
	char eb[128];
	ibv_candidate c = { 0, dev, port, -1, IBV_GID_TYPE_IB, { { 0 } }, 0, pa->active_mtu,
		            pa->max_msg_sz };
	if (pa->link_layer == IBV_LINK_LAYER_INFINIBAND) {
		c.gid_index = forced >= 0 ? forced : 0;
		int rc = ibv_query_gid(ctx, port, c.gid_index, &c.gid);
		if (rc != 0) {
			tw__ibv_why(why, why_len, "%s port %u: ibv_query_gid index %d: %s", name, port,
			        c.gid_index, tw__strerror(rc < 0 ? errno : rc, eb, sizeof(eb)));
			return;
		}
		c.lid = pa->lid;
		c.rank = 4; /* the LID routes */
	} else {
		if (TW_MUTANT("ibv_gid_index_zero"))
			forced = 0;
		int first = forced >= 0 ? forced : 0;
		int last = forced >= 0 ? forced + 1 : pa->gid_tbl_len;
		for (int i = first; i < last; i++) {
			struct ibv_gid_entry e;
			int rc = ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0);
			if (rc != 0) {
				/* a hole in the table (ENODATA) is normal; anything else
				 * is noted, and the search goes on */
				if (rc != ENODATA || forced >= 0)
					tw__ibv_why(why, why_len, "%s port %u: ibv_query_gid_ex index %d: %s",
					        name, port, i, tw__strerror(rc, eb, sizeof(eb)));
				continue;
			}
			int r = ibv_gid_rank(&e);
			if (r > c.rank) {
				c.rank = r;
				c.gid_index = i;
				c.gid_type = e.gid_type;
				c.gid = e.gid;
			}
		}
		if (c.rank == 0) {
			tw__ibv_why(why, why_len, "%s port %u: no usable GID (%s)", name, port,
			        forced >= 0 ? "TW_IB_GID_INDEX" : "every entry empty or failing");
			return;
		}
	}
	if (c.rank > best->rank)
		*best = c;
}

tw_status_t tw__ibv_choose(const char *hca, int gid_index, tw_ibv_choice *out, char *why,
                           size_t why_len)
{
	char eb[128];
	memset(out, 0, sizeof(*out));
	why[0] = '\0';
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		tw__detail(why, why_len, TW_IBV_WHO ": ibv_get_device_list: %s",
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_UNSUPPORTED;
	}
	if (n == 0) {
		ibv_free_device_list(list);
		tw__detail(why, why_len,
		           TW_IBV_WHO ": no verbs device on this host (ibv_get_device_list found none)");
		return TW_ERR_UNSUPPORTED;
	}
	ibv_candidate best = { .rank = 0, .dev = -1 };
	bool named = false;
	for (int d = 0; d < n; d++) {
		const char *name = ibv_get_device_name(list[d]);
		struct ibv_context *ctx = ibv_open_device(list[d]);
		if (!ctx) {
			tw__ibv_why(why, why_len, "%s: ibv_open_device: %s", name,
			        tw__strerror(errno, eb, sizeof(eb)));
			continue;
		}
		struct ibv_device_attr da;
		int rc = ibv_query_device(ctx, &da);
		if (rc != 0) {
			tw__ibv_why(why, why_len, "%s: ibv_query_device: %s", name,
			        tw__strerror(rc, eb, sizeof(eb)));
			ibv_close_device(ctx);
			continue;
		}
		for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
			if (!ibv_hca_listed(hca, name, p, &named))
				continue;
			struct ibv_port_attr pa;
			rc = ibv_query_port(ctx, p, &pa);
			if (rc != 0) {
				tw__ibv_why(why, why_len, "%s port %u: ibv_query_port: %s", name, p,
				        tw__strerror(rc, eb, sizeof(eb)));
				continue;
			}
			if (pa.state != IBV_PORT_ACTIVE && !TW_MUTANT("ibv_port_state_ignored")) {
				tw__ibv_why(why, why_len, "%s port %u: %s (ibv_query_port)", name, p,
				        ibv_port_state_str(pa.state));
				continue;
			}
			ibv_rank_port(ctx, name, d, p, &pa, gid_index, &best, why, why_len);
		}
		if (best.dev == d) { /* the best so far: keep it open */
			if (out->ctx)
				ibv_close_device(out->ctx);
			out->ctx = ctx;
			out->dattr = da;
		} else {
			ibv_close_device(ctx);
		}
	}
	if (hca && hca[0] && hca[0] != '^' && !named)
		tw__ibv_why(why, why_len, "TW_IB_HCA '%s' names no device of this host", hca);
	if (best.dev < 0 || !out->ctx) {
		char reasons[TW_DETAIL_MAX];
		snprintf(reasons, sizeof(reasons), "%s", why);
		tw__detail(why, why_len, TW_IBV_WHO ": no usable device port: %s", reasons);
		ibv_free_device_list(list);
		return TW_ERR_UNSUPPORTED;
	}
	snprintf(out->dev_name, sizeof(out->dev_name), "%s", ibv_get_device_name(list[best.dev]));
	ibv_free_device_list(list);
	out->port = best.port;
	out->gid_index = best.gid_index;
	out->gid_forced = gid_index >= 0;
	if (!best.lid && !out->gid_forced) {
		struct ibv_gid_entry e0;
		out->stock_gid_differs =
		        ibv_query_gid_ex(out->ctx, best.port, 0, &e0, 0) == 0 &&
		        tw__ibv_gid_family(&e0.gid) != tw__ibv_gid_family(&best.gid);
	}
	out->gid_kind = ibv_gid_kind(best.gid_type);
	out->gid = best.gid;
	out->lid = best.lid;
	out->mtu = best.mtu;
	out->max_msg_sz = best.max_msg_sz;
	char addr[INET6_ADDRSTRLEN] = "?";
	(void)inet_ntop(AF_INET6, best.gid.raw, addr, sizeof(addr));
	if (best.lid)
		snprintf(out->describe, sizeof(out->describe), "%s port %u, LID %u, GID %d (IB)",
		         out->dev_name, out->port, out->lid, out->gid_index);
	else
		snprintf(out->describe, sizeof(out->describe), "%s port %u, GID %d (%s %s)",
		         out->dev_name, out->port, out->gid_index, out->gid_kind, addr);
	if (best.rank == 1)
		tw__ibv_why(out->describe, sizeof(out->describe),
		        "link-local: nothing routable exists on this host");
	return TW_OK;
}

bool tw__ibv_fork_opted_out(void)
{
	const char *e = getenv("TW_IB_FORK_SAFE");
	return (e && !strcmp(e, "0")) || TW_MUTANT("ibv_fork_unsafe");
}

tw_status_t tw__ibv_fork_safe(char *why, size_t why_len)
{
	enum ibv_fork_status fs = ibv_is_fork_initialized();
	if (fs == IBV_FORK_UNNEEDED || fs == IBV_FORK_ENABLED)
		return TW_OK;
	int rc = ibv_fork_init();
	if (rc == 0)
		return TW_OK;
	char eb[128];
	tw__detail(why, why_len,
	           TW_IBV_WHO ": ibv_fork_init: %s (memory was registered in this process before "
	           "the first tensorwire context with ibv, so a fork could corrupt transfers; "
	           "set TW_IB_FORK_SAFE=0 to accept that risk)",
	           tw__strerror(rc, eb, sizeof(eb)));
	return TW_ERR_UNSUPPORTED;
}

int tw__ibv_qp_init(struct ibv_qp *qp, uint8_t port)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
	                                 IBV_QP_ACCESS_FLAGS);
}

int tw__ibv_qp_connect(struct ibv_qp *qp, const tw_ibv_choice *ch, int gid_index,
                       const tw_ibv_peer_qp *peer, const char **verb)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = peer->mtu < ch->mtu ? peer->mtu : ch->mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 20;
	a.ah_attr.port_num = ch->port;
	if (peer->lid != 0) {
		a.ah_attr.dlid = (uint16_t)peer->lid;
	} else {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer->gid;
		a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	*verb = "ibv_modify_qp to RTR";
	int rc = ibv_modify_qp(qp, &a,
	                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (rc != 0)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7; /* infinite: a peer out of receives is slow, not gone */
	a.max_rd_atomic = 1;
	*verb = "ibv_modify_qp to RTS";
	return ibv_modify_qp(qp, &a,
	                     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}
