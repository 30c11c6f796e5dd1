/* simverbs configuration: the simulated devices and ports, their limits and
 * the hazard models. Read once from the file named by SIMVERBS_CONFIG (an INI
 * file, see docs/simverbs.md); without it one active RoCE device "simrdma0"
 * bound to the loopback interface. Environment variables override the file.
 * Also computes a port's GID table from the addresses of the network
 * namespace the process runs in. Never opens a socket. */
#include "sv.h"

#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <arpa/inet.h>

struct sv_config sv_cfg;

void sv_log(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "simverbs[%d]: %s\n", (int)getpid(), buf);
}

static void dev_defaults(struct sv_dev_cfg *d, int idx)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "simrdma%d", idx);
	d->guid = 0x5356000000000001ull + (uint64_t)idx;
	d->vendor_id = 0x5353; /* unknown to perftest: old post_send path, no inline */
	d->vendor_part_id = 1;
	d->hw_ver = 1;
	snprintf(d->fw_ver, sizeof(d->fw_ver), "0.1.0-sim");
	snprintf(d->board_id, sizeof(d->board_id), "SIM-%04d", idx + 1);
	snprintf(d->pci, sizeof(d->pci), "0000:%02x:00.0", 0x50 + idx);
	d->numa_node = 0;
	d->nports = 1;
	d->max_qp = 16384;
	d->max_qp_wr = 16384;
	d->max_sge = 16;
	d->max_cq = 16384;
	d->max_cqe = 1 << 20;
	d->max_mr = 1 << 20;
	d->max_pd = 1 << 16;
	d->max_srq = 1024;
	d->max_srq_wr = 16384;
	d->max_srq_sge = 16;
	d->max_qp_rd_atom = 16;
	d->max_inline = SV_MAX_INLINE;
	d->max_mr_size = ~0ull;
	for (int p = 0; p < SV_MAX_PORT; p++) {
		struct sv_port_cfg *pc = &d->port[p];
		pc->cfg_state = IBV_PORT_ACTIVE;
		pc->link_layer = IBV_LINK_LAYER_ETHERNET;
		snprintf(pc->netdev, sizeof(pc->netdev), "lo");
		pc->max_msg_sz = 1u << 30;
		pc->max_mtu = IBV_MTU_4096;
		pc->active_mtu = IBV_MTU_4096;
		pc->state = IBV_PORT_ACTIVE;
	}
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

static unsigned long long num(const char *v)
{
	return strtoull(v, NULL, 0);
}

static enum ibv_mtu mtu_of(const char *v)
{
	switch (atoi(v)) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	default:
		sv_log("config: mtu '%s' is none of 256, 512, 1024, 2048, 4096; 4096 used", v);
		return IBV_MTU_4096;
	}
}

static void set_fork(const char *v)
{
	if (!strcmp(v, "legacy"))
		sv_cfg.fork_mode = SV_FORK_LEGACY;
	else if (!strcmp(v, "strict"))
		sv_cfg.fork_mode = SV_FORK_STRICT;
	else if (!strcmp(v, "modern"))
		sv_cfg.fork_mode = SV_FORK_MODERN;
	else
		sv_log("fork mode '%s' is none of modern, legacy, strict; modern used", v);
}

static void set_memlock(const char *v)
{
	if (!strcmp(v, "always"))
		sv_cfg.memlock = SV_MEMLOCK_ALWAYS;
	else if (!strcmp(v, "off"))
		sv_cfg.memlock = SV_MEMLOCK_OFF;
	else if (!strcmp(v, "kernel"))
		sv_cfg.memlock = SV_MEMLOCK_KERNEL;
	else
		sv_log("memlock mode '%s' is none of kernel, always, off; kernel used", v);
}

/* port1.gids = fe80::1/v1, fail, , ::ffff:127.0.0.1/v2: a fixed GID table,
 * one entry per comma: an address with its type, "fail" (queries of that
 * index fail with EINVAL, as some drivers' holes do) or nothing (an empty
 * slot: ENODATA). The port's netdev still decides whether it is up. */
static void parse_gids(struct sv_port_cfg *pc, const char *v)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", v);
	pc->gids_fixed = true;
	pc->ngid = 0;
	char *save = NULL;
	for (char *item = buf; pc->ngid < SV_MAX_GID; item = NULL) {
		/* strtok_r skips empty items: split by hand */
		char *s = item ? item : save;
		if (!s)
			break;
		char *comma = strchr(s, ',');
		save = comma ? comma + 1 : NULL;
		if (comma)
			*comma = 0;
		s = trim(s);
		int i = pc->ngid++;
		memset(&pc->gid[i], 0, sizeof(pc->gid[i]));
		pc->gid_type[i] = IBV_GID_TYPE_ROCE_V2;
		pc->gid_state[i] = SV_GID_OK;
		if (!*s) {
			pc->gid_state[i] = SV_GID_EMPTY;
			continue;
		}
		if (!strcmp(s, "fail")) {
			pc->gid_state[i] = SV_GID_FAIL;
			continue;
		}
		char *slash = strchr(s, '/');
		if (slash) {
			*slash = 0;
			pc->gid_type[i] = !strcmp(slash + 1, "v1") ? IBV_GID_TYPE_ROCE_V1
								  : IBV_GID_TYPE_ROCE_V2;
		}
		if (inet_pton(AF_INET6, s, pc->gid[i].raw) != 1) {
			sv_log("config: gids entry '%s' is no IPv6 address; left empty", s);
			pc->gid_state[i] = SV_GID_EMPTY;
		}
		if (!save)
			break;
	}
}

static void port_key(struct sv_dev_cfg *d, int p, const char *k, const char *v)
{
	struct sv_port_cfg *pc = &d->port[p];
	if (!strcmp(k, "state")) {
		if (strcmp(v, "down") && strcmp(v, "active") && strcmp(v, "up"))
			sv_log("config: port state '%s' is none of active, down; active used", v);
		pc->cfg_state = !strcmp(v, "down") ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
	} else if (!strcmp(k, "link_layer")) {
		if (strcmp(v, "infiniband") && strcmp(v, "ethernet"))
			sv_log("config: link_layer '%s' is none of ethernet, infiniband; ethernet used",
			       v);
		pc->link_layer = !strcmp(v, "infiniband") ? IBV_LINK_LAYER_INFINIBAND
							  : IBV_LINK_LAYER_ETHERNET;
	}
	else if (!strcmp(k, "netdev"))
		snprintf(pc->netdev, sizeof(pc->netdev), "%s", v);
	else if (!strcmp(k, "max_msg_sz"))
		pc->max_msg_sz = (uint32_t)num(v);
	else if (!strcmp(k, "mtu") || !strcmp(k, "active_mtu"))
		pc->active_mtu = mtu_of(v);
	else if (!strcmp(k, "lid"))
		pc->lid = (uint16_t)num(v);
	else if (!strcmp(k, "gid_types"))
		pc->gid_layout = !strcmp(v, "v1") ? 1 : !strcmp(v, "v1,v2") ? 2 : 0;
	else if (!strcmp(k, "gids"))
		parse_gids(pc, v);
	else
		sv_log("config: unknown port key '%s' ignored", k);
}

static void dev_key(struct sv_dev_cfg *d, const char *k, const char *v)
{
	if (!strncmp(k, "port", 4) && isdigit((unsigned char)k[4]) && k[5] == '.') {
		int p = k[4] - '1';
		if (p >= 0 && p < SV_MAX_PORT)
			port_key(d, p, k + 6, v);
		return;
	}
	if (!strcmp(k, "ports")) {
		d->nports = (int)num(v);
		if (d->nports < 1 || d->nports > SV_MAX_PORT)
			sv_log("config: ports = %s is outside 1..%d; %d used", v, SV_MAX_PORT,
			       d->nports < 1 ? 1 : SV_MAX_PORT);
		if (d->nports < 1)
			d->nports = 1;
		if (d->nports > SV_MAX_PORT)
			d->nports = SV_MAX_PORT;
	} else if (!strcmp(k, "vendor_id"))
		d->vendor_id = (uint32_t)num(v);
	else if (!strcmp(k, "vendor_part_id"))
		d->vendor_part_id = (uint32_t)num(v);
	else if (!strcmp(k, "guid"))
		d->guid = num(v);
	else if (!strcmp(k, "pci"))
		snprintf(d->pci, sizeof(d->pci), "%s", v);
	else if (!strcmp(k, "numa_node"))
		d->numa_node = atoi(v);
	else if (!strcmp(k, "board_id"))
		snprintf(d->board_id, sizeof(d->board_id), "%s", v);
	else if (!strcmp(k, "max_qp_wr"))
		d->max_qp_wr = (int)num(v);
	else if (!strcmp(k, "max_qp"))
		d->max_qp = (int)num(v);
	else if (!strcmp(k, "max_srq"))
		d->max_srq = (int)num(v);
	else if (!strcmp(k, "max_srq_wr"))
		d->max_srq_wr = (int)num(v);
	else if (!strcmp(k, "max_cqe"))
		d->max_cqe = (int)num(v);
	else if (!strcmp(k, "round_queues"))
		d->round_queues = (int)num(v);
	else if (!strcmp(k, "max_sge")) {
		d->max_sge = (int)num(v);
		if (d->max_sge > SV_MAX_SGE)
			d->max_sge = SV_MAX_SGE;
	} else if (!strcmp(k, "max_inline_data")) {
		d->max_inline = (int)num(v);
		if (d->max_inline > SV_MAX_INLINE)
			d->max_inline = SV_MAX_INLINE;
	} else
		sv_log("config: unknown device key '%s' ignored", k);
}

static enum ibv_wc_status status_of(const char *v)
{
	if (!strcmp(v, "REM_ACCESS_ERR"))
		return IBV_WC_REM_ACCESS_ERR;
	if (!strcmp(v, "GENERAL_ERR"))
		return IBV_WC_GENERAL_ERR;
	return IBV_WC_LOC_PROT_ERR;
}

static void global_key(const char *sec, const char *k, const char *v)
{
	if (!strcmp(k, "fork"))
		set_fork(v);
	else if (!strcmp(k, "memlock"))
		set_memlock(v);
	else if (!strcmp(k, "devmem_max_msg"))
		sv_cfg.devmem_max_msg = (int)num(v);
	else if (!strcmp(k, "devmem_status"))
		sv_cfg.devmem_status = status_of(v);
	else if (!strcmp(k, "peer_memory"))
		sv_cfg.peer_memory = !strcmp(v, "on") || num(v) != 0;
	else if (!strcmp(k, "srq_post_fail_every"))
		sv_cfg.srq_post_fail_every = (uint32_t)num(v);
	else if (!strcmp(k, "srq_post_fail_after"))
		sv_cfg.srq_post_fail_after = (uint32_t)num(v);
	else if (!strcmp(k, "last_wqe_event"))
		sv_cfg.no_last_wqe = num(v) == 0;
	else if (!strcmp(k, "async_fd_error"))
		sv_cfg.async_fd_error = num(v) != 0;
	else if (!strcmp(k, "err_cqe_garbage"))
		sv_cfg.err_cqe_garbage = num(v) != 0;
	else if (!strcmp(k, "time_scale"))
		sv_cfg.time_scale = strtod(v, NULL);
	else if (!strcmp(k, "ack_latency_us"))
		sv_cfg.ack_latency_ns = strtoull(v, NULL, 10) * 1000ull;
	else if (!strcmp(k, "recv_cqe_lag_us"))
		sv_cfg.recv_cqe_lag_ns = strtoull(v, NULL, 10) * 1000ull;
	else if (!strcmp(k, "control"))
		snprintf(sv_cfg.control, sizeof(sv_cfg.control), "%s", v);
	else if (!strcmp(k, "trace"))
		sv_cfg.trace = num(v) != 0;
	else
		sv_log("config: unknown key '%s' in [%s] ignored", k, sec);
}

static void parse_file(const char *path)
{
	FILE *f = fopen(path, "r");
	struct stat sb;
	if (f && fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
		fclose(f);
		f = NULL;
		errno = EISDIR;
	}
	if (!f) {
		sv_log("config: cannot open SIMVERBS_CONFIG=%s: %s; using the default device",
		       path, strerror(errno));
		return;
	}
	char line[1024], sec[128] = "";
	struct sv_dev_cfg *cur = NULL;
	bool any_dev = false;
	while (fgets(line, sizeof(line), f)) {
		char *c = strpbrk(line, ";#");
		if (c)
			*c = 0;
		char *s = trim(line);
		if (!*s)
			continue;
		if (*s == '[') {
			char *e = strchr(s, ']');
			if (e)
				*e = 0;
			snprintf(sec, sizeof(sec), "%s", trim(s + 1));
			cur = NULL;
			if (!strncmp(sec, "device", 6)) {
				if (!any_dev) {
					sv_cfg.ndev = 0;
					any_dev = true;
				}
				if (sv_cfg.ndev < SV_MAX_DEV) {
					cur = &sv_cfg.dev[sv_cfg.ndev];
					dev_defaults(cur, sv_cfg.ndev);
					char *n = trim(sec + 6);
					if (*n)
						snprintf(cur->name, sizeof(cur->name), "%s", n);
					sv_cfg.ndev++;
				}
			}
			continue;
		}
		char *eq = strchr(s, '=');
		if (!eq)
			continue;
		*eq = 0;
		char *k = trim(s), *v = trim(eq + 1);
		if (cur)
			dev_key(cur, k, v);
		else if (strncmp(sec, "device", 6))
			global_key(sec, k, v);
	}
	fclose(f);
}

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

/* The verbs SIMVERBS_FAIL can fail (each calls sv_fail with its name). */
static const char *const fail_verbs[] = {
	"ibv_open_device", "ibv_query_device", "ibv_query_port", "ibv_alloc_pd",
	"ibv_reg_mr", "ibv_create_comp_channel", "ibv_create_cq", "ibv_create_srq",
	"ibv_create_qp", "ibv_modify_qp", "ibv_post_send", "ibv_post_recv",
	"ibv_post_srq_recv", "ibv_req_notify_cq",
};

/* SIMVERBS_FAIL=<verb>:<N>, N >= 1: a typo must not silently leave the
 * injection off (the sweep that set it would pass, checking nothing). */
static void set_fail(const char *e)
{
	const char *colon = strrchr(e, ':');
	char *end = NULL;
	unsigned long n = colon ? strtoul(colon + 1, &end, 10) : 0;
	bool known = false;
	for (size_t i = 0; colon && i < sizeof(fail_verbs) / sizeof(fail_verbs[0]); i++)
		known |= strlen(fail_verbs[i]) == (size_t)(colon - e) &&
		         !strncmp(fail_verbs[i], e, (size_t)(colon - e));
	if (!colon || !known || end == colon + 1 || *end || n == 0) {
		sv_log("SIMVERBS_FAIL='%s' ignored: want <verb>:<N> with N >= 1 and a verb of "
		       "docs/simverbs.md (ibv_open_device ... ibv_req_notify_cq); nothing is failed",
		       e);
		return;
	}
	memcpy(sv_cfg.fail_verb, e, (size_t)(colon - e));
	sv_cfg.fail_verb[colon - e] = '\0';
	sv_cfg.fail_at = n;
}

static void load(void)
{
	sv_cfg.ndev = 1;
	dev_defaults(&sv_cfg.dev[0], 0);
	sv_cfg.fork_mode = SV_FORK_MODERN;
	sv_cfg.memlock = SV_MEMLOCK_KERNEL;
	sv_cfg.devmem_max_msg = 32;
	sv_cfg.devmem_status = IBV_WC_LOC_PROT_ERR;
	sv_cfg.peer_memory = true;
	sv_cfg.err_cqe_garbage = true;
	sv_cfg.time_scale = 1.0;
	const char *e = getenv("SIMVERBS_CONFIG");
	if (e && *e)
		parse_file(e);
	if ((e = getenv("SIMVERBS_FORK")))
		set_fork(e);
	if ((e = getenv("SIMVERBS_MEMLOCK")))
		set_memlock(e);
	if ((e = getenv("SIMVERBS_TIME_SCALE"))) {
		char *end;
		double v = strtod(e, &end);
		if (end == e || *end || !(v > 0 && v <= 1e6))
			sv_log("SIMVERBS_TIME_SCALE='%s' ignored: want a number above 0", e);
		else
			sv_cfg.time_scale = v;
	}
	if ((e = getenv("SIMVERBS_ACK_LATENCY_US")))
		sv_cfg.ack_latency_ns = strtoull(e, NULL, 10) * 1000ull;
	if ((e = getenv("SIMVERBS_CONTROL")))
		snprintf(sv_cfg.control, sizeof(sv_cfg.control), "%s", e);
	if ((e = getenv("SIMVERBS_TRACE")))
		sv_cfg.trace = atoi(e) != 0;
	if ((e = getenv("SIMVERBS_FAIL")) && *e)
		set_fail(e);
	if ((e = getenv("SIMVERBS_NETDEV")) && *e)
		for (int d = 0; d < sv_cfg.ndev; d++)
			for (int p = 0; p < SV_MAX_PORT; p++)
				snprintf(sv_cfg.dev[d].port[p].netdev,
					 sizeof(sv_cfg.dev[d].port[p].netdev), "%s", e);
	if (sv_cfg.time_scale <= 0)
		sv_cfg.time_scale = 1.0;
	for (int d = 0; d < sv_cfg.ndev; d++)
		for (int p = 0; p < sv_cfg.dev[d].nports; p++)
			sv_port_refresh(&sv_cfg.dev[d], p);
}

void sv_config_load(void)
{
	pthread_once(&cfg_once, load);
}

/* ---- SIMVERBS_FAIL --------------------------------------------------------- */

static unsigned long fail_calls, fail_fired;

bool sv_fail(const char *verb)
{
	sv_config_load();
	if (!sv_cfg.fail_at || strcmp(verb, sv_cfg.fail_verb) != 0)
		return false;
	if (__atomic_add_fetch(&fail_calls, 1, __ATOMIC_RELAXED) != sv_cfg.fail_at)
		return false;
	__atomic_add_fetch(&fail_fired, 1, __ATOMIC_RELAXED);
	SV_TRACE("%s fails (SIMVERBS_FAIL)", verb);
	return true;
}

SV_EXPORT unsigned long simverbs_fails_fired(void)
{
	return __atomic_load_n(&fail_fired, __ATOMIC_RELAXED);
}

/* "auto": the first interface that is up, not loopback, with an IPv4 address;
 * resolved once and then kept, so the port stays bound when that link goes down. */
static void resolve_auto(struct sv_port_cfg *pc, struct ifaddrs *ifs)
{
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
			continue;
		snprintf(pc->netdev, sizeof(pc->netdev), "%s", i->ifa_name);
		return;
	}
	snprintf(pc->netdev, sizeof(pc->netdev), "lo");
}

static void add_gid(struct sv_port_cfg *pc, const uint8_t raw[16])
{
	for (int t = 0; t < (pc->gid_layout == 2 ? 2 : 1); t++) {
		if (pc->ngid >= SV_MAX_GID)
			return;
		memcpy(pc->gid[pc->ngid].raw, raw, 16);
		bool v1 = pc->gid_layout == 1 || (pc->gid_layout == 2 && t == 0);
		pc->gid_type[pc->ngid] = v1 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
		pc->ngid++;
	}
}

void sv_port_refresh(struct sv_dev_cfg *d, int p)
{
	struct sv_port_cfg *pc = &d->port[p];
	struct ifaddrs *ifs = NULL;
	if (getifaddrs(&ifs) != 0)
		ifs = NULL;
	if (!strcmp(pc->netdev, "auto"))
		resolve_auto(pc, ifs);
	bool found = false, up = false;
	struct sv_port_cfg tmp = *pc;
	tmp.ngid = 0;
	for (int fam = 0; fam < 2; fam++)
		for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
			if (!i->ifa_addr || strcmp(i->ifa_name, pc->netdev))
				continue;
			found = true;
			if ((i->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_RUNNING))
				up = true;
			uint8_t raw[16] = {0};
			if (fam == 0 && i->ifa_addr->sa_family == AF_INET) {
				raw[10] = raw[11] = 0xff;
				memcpy(raw + 12, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
				add_gid(&tmp, raw);
			} else if (fam == 1 && i->ifa_addr->sa_family == AF_INET6) {
				memcpy(raw, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
				add_gid(&tmp, raw);
			}
		}
	if (ifs)
		freeifaddrs(ifs);
	if (!pc->gids_fixed) {
		pc->ngid = tmp.ngid;
		memcpy(pc->gid, tmp.gid, sizeof(pc->gid));
		memcpy(pc->gid_type, tmp.gid_type, sizeof(pc->gid_type));
		memset(pc->gid_state, SV_GID_OK, sizeof(pc->gid_state));
	}
	pc->netdev_down = !(found && up);
	bool active = pc->cfg_state == IBV_PORT_ACTIVE && !pc->netdev_down && !pc->ctl_down;
	pc->state = active ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
}

int sv_find_port_by_ip(uint32_t ip_be, int *dev_out, int *port_out, int *gid_out)
{
	sv_config_load();
	for (int d = 0; d < sv_cfg.ndev; d++)
		for (int p = 0; p < sv_cfg.dev[d].nports; p++) {
			struct sv_port_cfg *pc = &sv_cfg.dev[d].port[p];
			for (int g = 0; g < pc->ngid; g++) {
				const uint8_t *r = pc->gid[g].raw;
				static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
				if (!memcmp(r, pfx, 12) && !memcmp(r + 12, &ip_be, 4)) {
					*dev_out = d;
					*port_out = p + 1;
					*gid_out = g;
					return 0;
				}
			}
		}
	return -1;
}

int simverbs_find_port_by_ip(uint32_t ip_be, int *dev_out, int *port_out, int *gid_out)
{
	sv_config_load();
	pthread_mutex_lock(&sv_lock); /* the progress thread refreshes GID tables */
	int r = sv_find_port_by_ip(ip_be, dev_out, port_out, gid_out);
	pthread_mutex_unlock(&sv_lock);
	return r;
}
