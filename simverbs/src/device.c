/* simverbs devices and contexts: the device list, open/close, the query verbs
 * (device, port, GID, GID type, P_Key), the async event queue, and the small
 * helpers libibverbs exports (strings, rates, sysfs reads). The data path
 * lives in objects.c and engine.c. */
#include "sv.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <arpa/inet.h>

#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_get_device_list

enum ibv_gid_type_sysfs { SV_GID_TYPE_SYSFS_IB_ROCE_V1, SV_GID_TYPE_SYSFS_ROCE_V2 };
SV_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
				 unsigned int index, enum ibv_gid_type_sysfs *type);
SV_EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev,
					const char *fnfmt, ...);
/* <infiniband/driver.h> is not installed: the two sysfs helpers' prototypes */
SV_EXPORT const char *ibv_get_sysfs_path(void);
SV_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

static struct sv_device sv_devs[SV_MAX_DEV];
static pthread_once_t devs_once = PTHREAD_ONCE_INIT;

static void devs_init(void)
{
	sv_config_load();
	for (int i = 0; i < sv_cfg.ndev; i++) {
		struct sv_device *d = &sv_devs[i];
		d->index = i;
		d->ibdev.node_type = IBV_NODE_CA;
		d->ibdev.transport_type = IBV_TRANSPORT_IB;
		snprintf(d->ibdev.name, sizeof(d->ibdev.name), "%s", sv_cfg.dev[i].name);
		snprintf(d->ibdev.dev_name, sizeof(d->ibdev.dev_name), "uverbs%d", i);
		/* not real sysfs paths: ibv_read_sysfs_file() serves them from the model */
		snprintf(d->ibdev.dev_path, sizeof(d->ibdev.dev_path),
			 "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(d->ibdev.ibdev_path, sizeof(d->ibdev.ibdev_path),
			 "/sys/class/infiniband/%s", sv_cfg.dev[i].name);
	}
}

SV_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	pthread_once(&devs_once, devs_init);
	struct ibv_device **l = calloc((size_t)sv_cfg.ndev + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < sv_cfg.ndev; i++)
		l[i] = &sv_devs[i].ibdev;
	if (num_devices)
		*num_devices = sv_cfg.ndev;
	return l;
}

SV_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

SV_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

SV_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct sv_device *d = (struct sv_device *)device;
	return htobe64(sv_cfg.dev[d->index].guid);
}

SV_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return ((struct sv_device *)device)->index;
}

static struct sv_dev_cfg *dcfg(struct ibv_context *c)
{
	return &sv_cfg.dev[sv_ctx(c)->dev_index];
}

void sv_die_if_dead(struct ibv_context *c)
{
	if (c && sv_ctx(c)->dead) {
		sv_log("a verbs context was used in a child process after fork(); "
		       "the child must open its own device (as on real hardware)");
		abort();
	}
}


static int query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a,
			 size_t len);
static int query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *a, size_t len);

/* [hazards] async_fd_error: an fd whose every poll says POLLERR (the write
 * end of a pipe with no reader) and whose read fails (EBADF): how a
 * context's async_fd looks to a program once it has gone bad. */
static int broken_fd(void)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	close(p[0]);
	return p[1];
}

SV_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	pthread_once(&devs_once, devs_init);
	struct sv_device *d = (struct sv_device *)device;
	if (d < sv_devs || d >= sv_devs + sv_cfg.ndev) {
		errno = ENODEV;
		return NULL;
	}
	if (sv_fail("ibv_open_device")) {
		errno = ENOMEM;
		return NULL;
	}
	int err = sv_engine_start();
	if (err) {
		errno = err;
		return NULL;
	}
	struct sv_context *ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->dev_index = d->index;
	struct verbs_context *v = &ctx->vctx;
	v->sz = sizeof(*v);
	v->query_port = query_port_ex;
	v->query_device_ex = query_device_ex;
	v->context.device = device;
	v->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	v->context.num_comp_vectors = 1;
	v->context.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	v->context.async_fd = sv_cfg.async_fd_error ? broken_fd()
	                                            : eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (v->context.cmd_fd < 0 || v->context.async_fd < 0) {
		err = errno;
		if (v->context.cmd_fd >= 0)
			close(v->context.cmd_fd);
		if (v->context.async_fd >= 0)
			close(v->context.async_fd);
		free(ctx);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&v->context.mutex, NULL);
	sv_fill_ops(ctx);
	pthread_mutex_lock(&sv_lock);
	struct sv_dev_cfg *dc = &sv_cfg.dev[d->index];
	for (int p = 0; p < dc->nports; p++) {
		sv_port_refresh(dc, p);
		ctx->last_state[p] = dc->port[p].state;
	}
	sv_engine_register_ctx(ctx);
	pthread_mutex_unlock(&sv_lock);
	return &v->context;
}

SV_EXPORT int ibv_close_device(struct ibv_context *c)
{
	struct sv_context *ctx = sv_ctx(c);
	if (ctx->dead)
		return 0; /* inherited over fork: nothing of it is ours to release */
	pthread_mutex_lock(&sv_lock);
	sv_engine_unregister_ctx(ctx);
	struct sv_async_ev *e = ctx->aq_head;
	while (e) {
		struct sv_async_ev *n = e->next;
		free(e);
		e = n;
	}
	pthread_mutex_unlock(&sv_lock);
	close(c->cmd_fd);
	close(c->async_fd);
	pthread_mutex_destroy(&c->mutex);
	free(ctx);
	return 0;
}

static void fill_device_attr(struct sv_dev_cfg *d, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", d->fw_ver);
	a->node_guid = htobe64(d->guid);
	a->sys_image_guid = htobe64(d->guid);
	a->max_mr_size = d->max_mr_size;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = d->vendor_id;
	a->vendor_part_id = d->vendor_part_id;
	a->hw_ver = d->hw_ver;
	a->max_qp = d->max_qp;
	a->max_qp_wr = d->max_qp_wr;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
			      IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT;
	if (d->max_srq > 0)
		a->device_cap_flags |= IBV_DEVICE_SRQ_RESIZE;
	a->max_sge = d->max_sge;
	a->max_sge_rd = d->max_sge;
	a->max_cq = d->max_cq;
	a->max_cqe = d->max_cqe;
	a->max_mr = d->max_mr;
	a->max_pd = d->max_pd;
	a->max_qp_rd_atom = d->max_qp_rd_atom;
	a->max_ee_rd_atom = 0;
	a->max_res_rd_atom = d->max_qp_rd_atom * d->max_qp;
	a->max_qp_init_rd_atom = d->max_qp_rd_atom;
	a->atomic_cap = IBV_ATOMIC_NONE;
	a->max_srq = d->max_srq;
	a->max_srq_wr = d->max_srq > 0 ? d->max_srq_wr : 0;
	a->max_srq_sge = d->max_srq > 0 ? d->max_srq_sge : 0;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 16;
	a->phys_port_cnt = (uint8_t)d->nports;
}

SV_EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	sv_die_if_dead(c);
	if (sv_fail("ibv_query_device"))
		return ENOMEM;
	fill_device_attr(dcfg(c), a);
	return 0;
}

static int query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *a, size_t len)
{
	sv_die_if_dead(c);
	if (in && in->comp_mask)
		return EINVAL;
	struct ibv_device_attr_ex tmp;
	memset(&tmp, 0, sizeof(tmp));
	fill_device_attr(dcfg(c), &tmp.orig_attr);
	if (len < sizeof(tmp.orig_attr))
		return EINVAL;
	memcpy(a, &tmp, len < sizeof(tmp) ? len : sizeof(tmp));
	return 0;
}

static void fill_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
	struct sv_dev_cfg *d = dcfg(c);
	struct sv_port_cfg *pc = &d->port[port - 1];
	memset(a, 0, sizeof(*a));
	a->state = pc->state;
	a->max_mtu = pc->max_mtu;
	a->active_mtu = pc->active_mtu;
	a->gid_tbl_len = SV_MAX_GID;
	a->port_cap_flags = IBV_PORT_CM_SUP;
	if (pc->link_layer == IBV_LINK_LAYER_ETHERNET)
		a->port_cap_flags |= IBV_PORT_IP_BASED_GIDS;
	a->max_msg_sz = pc->max_msg_sz;
	a->bad_pkey_cntr = 0;
	a->qkey_viol_cntr = 0;
	a->pkey_tbl_len = 1;
	a->lid = pc->link_layer == IBV_LINK_LAYER_INFINIBAND ? pc->lid : 0;
	a->sm_lid = pc->link_layer == IBV_LINK_LAYER_INFINIBAND ? 1 : 0;
	a->lmc = 0;
	a->max_vl_num = 1;
	a->sm_sl = 0;
	a->subnet_timeout = 18;
	a->init_type_reply = 0;
	a->active_width = 2;    /* 4x */
	a->active_speed = 32;   /* EDR-ish: 25 Gb/s per lane */
	a->phys_state = pc->state == IBV_PORT_ACTIVE ? 5 /* LinkUp */ : 3 /* Disabled */;
	a->link_layer = pc->link_layer;
	a->flags = 0;
	a->port_cap_flags2 = 0;
}

static int check_port(struct ibv_context *c, unsigned port)
{
	if (port < 1 || port > (unsigned)dcfg(c)->nports)
		return EINVAL;
	return 0;
}

static int query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a,
			 size_t len)
{
	sv_die_if_dead(c);
	if (check_port(c, port))
		return EINVAL;
	if (sv_fail("ibv_query_port"))
		return ENOMEM;
	struct ibv_port_attr tmp;
	pthread_mutex_lock(&sv_lock);
	fill_port(c, port, &tmp);
	pthread_mutex_unlock(&sv_lock);
	memcpy(a, &tmp, len < sizeof(tmp) ? len : sizeof(tmp));
	return 0;
}

/* The exported entry point takes the old layout: the prefix up to 'flags'. */
SV_EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port,
			     struct _compat_ibv_port_attr *a)
{
	sv_die_if_dead(c);
	if (check_port(c, port))
		return EINVAL;
	if (sv_fail("ibv_query_port"))
		return ENOMEM;
	struct ibv_port_attr tmp;
	pthread_mutex_lock(&sv_lock);
	fill_port(c, port, &tmp);
	pthread_mutex_unlock(&sv_lock);
	memcpy(a, &tmp, offsetof(struct ibv_port_attr, port_cap_flags2));
	return 0;
}

SV_EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	sv_die_if_dead(c);
	if (check_port(c, port) || index < 0 || index >= SV_MAX_GID)
		return -1;
	pthread_mutex_lock(&sv_lock);
	struct sv_port_cfg *pc = &dcfg(c)->port[port - 1];
	if (index < pc->ngid && pc->gid_state[index] == SV_GID_FAIL) {
		pthread_mutex_unlock(&sv_lock);
		errno = EINVAL;
		return -1;
	}
	if (index < pc->ngid)
		*gid = pc->gid[index];
	else
		memset(gid, 0, sizeof(*gid));
	pthread_mutex_unlock(&sv_lock);
	return 0;
}

SV_EXPORT int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index,
				 enum ibv_gid_type_sysfs *type)
{
	if (check_port(c, port) || index >= SV_MAX_GID) {
		errno = EINVAL;
		return -1;
	}
	struct sv_port_cfg *pc = &dcfg(c)->port[port - 1];
	pthread_mutex_lock(&sv_lock); /* the progress thread refreshes the table */
	int r = 0;
	if (index >= (unsigned)pc->ngid || pc->gid_state[index] != SV_GID_OK) {
		errno = index < (unsigned)pc->ngid && pc->gid_state[index] == SV_GID_FAIL ? EINVAL
											: ENODATA;
		r = -1;
	} else if (pc->link_layer == IBV_LINK_LAYER_INFINIBAND ||
		   pc->gid_type[index] == IBV_GID_TYPE_ROCE_V1)
		*type = SV_GID_TYPE_SYSFS_IB_ROCE_V1;
	else
		*type = SV_GID_TYPE_SYSFS_ROCE_V2;
	pthread_mutex_unlock(&sv_lock);
	return r;
}

static void fill_gid_entry(struct sv_port_cfg *pc, uint32_t port, uint32_t idx,
			   struct ibv_gid_entry *e)
{
	memset(e, 0, sizeof(*e));
	e->gid = pc->gid[idx];
	e->gid_index = idx;
	e->port_num = port;
	e->gid_type = pc->link_layer == IBV_LINK_LAYER_INFINIBAND ? IBV_GID_TYPE_IB
								   : pc->gid_type[idx];
	e->ndev_ifindex = if_nametoindex(pc->netdev);
}

SV_EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
				struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	if (flags || entry_size < sizeof(*entry) || check_port(c, port))
		return EINVAL;
	struct sv_port_cfg *pc = &dcfg(c)->port[port - 1];
	pthread_mutex_lock(&sv_lock);
	int r = 0;
	if (index >= (uint32_t)pc->ngid || pc->gid_state[index] == SV_GID_EMPTY)
		r = ENODATA;
	else if (pc->gid_state[index] == SV_GID_FAIL)
		r = EINVAL;
	else
		fill_gid_entry(pc, port, index, entry);
	pthread_mutex_unlock(&sv_lock);
	return r;
}

SV_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries,
				       size_t max_entries, uint32_t flags, size_t entry_size)
{
	if (flags || entry_size < sizeof(*entries))
		return -EINVAL;
	struct sv_dev_cfg *d = dcfg(c);
	size_t n = 0;
	pthread_mutex_lock(&sv_lock);
	for (int p = 0; p < d->nports; p++)
		for (int g = 0; g < d->port[p].ngid; g++) {
			if (d->port[p].gid_state[g] != SV_GID_OK)
				continue;
			if (n >= max_entries) {
				pthread_mutex_unlock(&sv_lock);
				return -EINVAL;
			}
			fill_gid_entry(&d->port[p], (uint32_t)p + 1, (uint32_t)g,
				       (struct ibv_gid_entry *)((char *)entries + n * entry_size));
			n++;
		}
	pthread_mutex_unlock(&sv_lock);
	return (ssize_t)n;
}

SV_EXPORT int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	if (check_port(c, port) || index != 0)
		return -1;
	*pkey = htons(0xffff);
	return 0;
}

SV_EXPORT int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey)
{
	if (check_port(c, port))
		return -1;
	return (ntohs(pkey) & 0x7fff) == 0x7fff ? 0 : -1;
}

/* ---- async events -------------------------------------------------------- */
void sv_async_push(struct sv_context *ctx, enum ibv_event_type type, void *element)
{
	struct sv_async_ev *e = calloc(1, sizeof(*e));
	if (!e)
		return;
	e->ev.event_type = type;
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		e->ev.element.cq = element;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		e->ev.element.srq = element;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_GID_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
		e->ev.element.port_num = (int)(intptr_t)element;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	default:
		e->ev.element.qp = element;
		break;
	}
	if (ctx->aq_tail)
		ctx->aq_tail->next = e;
	else
		ctx->aq_head = e;
	ctx->aq_tail = e;
	uint64_t one = 1;
	if (!sv_cfg.async_fd_error) { /* that fd has no reader: EPIPE, SIGPIPE */
		ssize_t r = write(ctx->vctx.context.async_fd, &one, sizeof(one));
		(void)r;
	}
	SV_TRACE("async event %s", ibv_event_type_str(type));
}

/* caller holds sv_lock: drops queued events of an object being destroyed */
void sv_async_purge(struct sv_context *ctx, void *element)
{
	struct sv_async_ev **pp = &ctx->aq_head, *last = NULL;
	while (*pp) {
		struct sv_async_ev *e = *pp;
		if (e->ev.element.qp == element && e->ev.event_type != IBV_EVENT_PORT_ACTIVE &&
		    e->ev.event_type != IBV_EVENT_PORT_ERR && e->ev.event_type != IBV_EVENT_DEVICE_FATAL) {
			*pp = e->next;
			free(e);
		} else {
			last = e;
			pp = &e->next;
		}
	}
	ctx->aq_tail = last;
}

SV_EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *event)
{
	sv_die_if_dead(c);
	struct sv_context *ctx = sv_ctx(c);
	uint64_t v;
again:
	if (read(c->async_fd, &v, sizeof(v)) != sizeof(v))
		return -1; /* errno from read: EAGAIN when non-blocking */
	pthread_mutex_lock(&sv_lock);
	struct sv_async_ev *e = ctx->aq_head;
	if (e) {
		ctx->aq_head = e->next;
		if (!ctx->aq_head)
			ctx->aq_tail = NULL;
		switch (e->ev.event_type) {
		case IBV_EVENT_CQ_ERR:
			((struct sv_cq *)e->ev.element.cq)->async_reported++;
			break;
		case IBV_EVENT_SRQ_ERR:
		case IBV_EVENT_SRQ_LIMIT_REACHED:
			((struct sv_srq *)e->ev.element.srq)->async_reported++;
			break;
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_COMM_EST:
		case IBV_EVENT_SQ_DRAINED:
		case IBV_EVENT_PATH_MIG:
		case IBV_EVENT_PATH_MIG_ERR:
		case IBV_EVENT_QP_LAST_WQE_REACHED:
			((struct sv_qp *)e->ev.element.qp)->async_reported++;
			break;
		default:
			break;
		}
	}
	pthread_mutex_unlock(&sv_lock);
	if (!e)
		goto again; /* the event of an object destroyed since */
	*event = e->ev;
	free(e);
	return 0;
}

SV_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		return;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct ibv_qp *qp = event->element.qp;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		return;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = event->element.srq;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		return;
	}
	default:
		return;
	}
}

/* ---- strings and rates ---------------------------------------------------- */
SV_EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const n[] = {"unknown", "InfiniBand channel adapter",
					"InfiniBand switch", "InfiniBand router",
					"iWARP NIC", "usNIC", "usNIC UDP", "unspecified"};
	if (t < IBV_NODE_CA || t > IBV_NODE_UNSPECIFIED)
		return n[0];
	return n[t];
}

SV_EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const n[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED",
					"PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
	if (s < IBV_PORT_NOP || s > IBV_PORT_ACTIVE_DEFER)
		return "invalid state";
	return n[s];
}

SV_EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const n[] = {
		"CQ error", "local work queue catastrophic error", "invalid request local work queue error",
		"local access violation work queue error", "communication established",
		"send queue drained", "path migrated", "path migration request error",
		"local catastrophic error", "port active", "port error", "LID change",
		"P_Key change", "SM change", "SRQ catastrophic error", "SRQ limit reached",
		"last WQE reached", "client reregistration", "GID table change", "WQ fatal"};
	if (e < IBV_EVENT_CQ_ERR || e > IBV_EVENT_WQ_FATAL)
		return "unknown";
	return n[e];
}

SV_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	static const char *const n[] = {
		"success", "local length error", "local QP operation error",
		"local EE context operation error", "local protection error",
		"Work Request Flushed Error", "memory management operation error",
		"bad response error", "local access error", "remote invalid request error",
		"remote access error", "remote operation error", "transport retry counter exceeded",
		"RNR retry counter exceeded", "local RDD violation error",
		"remote invalid RD request", "aborted error", "invalid EE context number",
		"invalid EE context state", "fatal error", "response timeout error",
		"general error", "TM error", "TM rendezvous error"};
	if (s < IBV_WC_SUCCESS || s > IBV_WC_TM_RNDV_INCOMPLETE)
		return "unknown";
	return n[s];
}

static const struct {
	enum ibv_rate rate;
	int mult, mbps;
} rates[] = {
	{IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},
	{IBV_RATE_10_GBPS, 4, 10000},     {IBV_RATE_20_GBPS, 8, 20000},
	{IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
	{IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},
	{IBV_RATE_120_GBPS, 48, 120000},  {IBV_RATE_14_GBPS, 5, 14062},
	{IBV_RATE_56_GBPS, 22, 56250},    {IBV_RATE_112_GBPS, 45, 112500},
	{IBV_RATE_168_GBPS, 67, 168750},  {IBV_RATE_25_GBPS, 10, 25781},
	{IBV_RATE_100_GBPS, 40, 103125},  {IBV_RATE_200_GBPS, 80, 206250},
	{IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
	{IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000},
	{IBV_RATE_600_GBPS, 240, 637500},
};

SV_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++)
		if (rates[i].rate == rate)
			return rates[i].mult;
	return -1;
}

SV_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++)
		if (rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

SV_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++)
		if (rates[i].rate == rate)
			return rates[i].mbps;
	return -1;
}

SV_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

/* ---- sysfs helpers: served from the model, never from /sys --------------- */
SV_EXPORT const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

static int sysfs_value(const char *path, char *buf, size_t size)
{
	pthread_once(&devs_once, devs_init);
	for (int i = 0; i < sv_cfg.ndev; i++) {
		struct sv_dev_cfg *d = &sv_cfg.dev[i];
		size_t n = strlen(sv_devs[i].ibdev.ibdev_path);
		const char *rest = NULL;
		if (!strncmp(path, sv_devs[i].ibdev.ibdev_path, n) && path[n] == '/')
			rest = path + n + 1;
		if (!rest)
			continue;
		char tmp[128];
		if (!strcmp(rest, "board_id"))
			snprintf(tmp, sizeof(tmp), "%s\n", d->board_id);
		else if (!strcmp(rest, "fw_ver"))
			snprintf(tmp, sizeof(tmp), "%s\n", d->fw_ver);
		else if (!strcmp(rest, "node_type"))
			snprintf(tmp, sizeof(tmp), "1: CA\n");
		else if (!strcmp(rest, "device/numa_node"))
			snprintf(tmp, sizeof(tmp), "%d\n", d->numa_node);
		else if (!strcmp(rest, "device/uevent"))
			snprintf(tmp, sizeof(tmp), "PCI_SLOT_NAME=%s\n", d->pci);
		else if (!strcmp(rest, "hca_type"))
			snprintf(tmp, sizeof(tmp), "simverbs\n");
		else
			return -ENOENT;
		size_t len = strlen(tmp);
		if (len >= size)
			len = size - 1;
		memcpy(buf, tmp, len);
		buf[len] = 0;
		return (int)len;
	}
	return -ENOENT;
}

SV_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int r = sysfs_value(path, buf, size);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return r;
}

/* Providers pass a struct verbs_sysfs_dev we never create: nothing to read. */
SV_EXPORT int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev,
					const char *fnfmt, ...)
{
	errno = ENOENT;
	return -1;
}
