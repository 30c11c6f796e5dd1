/*
 * socket.c - see socket.h.
 *
 * Advertised addresses: a listener bound to a wildcard address advertises
 * one concrete address of this host instead, since 0.0.0.0 in a
 * BrochureAnswer sends a remote client to itself: an interface passing the
 * tw_context_set_socket_ifname list (by default: up, not loopback, not a
 * container bridge), of the bound family first, and loopback only when
 * nothing else exists and no list was given.
 */
#include "transport/tcp/socket.h"

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "platform/error.h"
#include "platform/platform.h"
#include "transport/stream/listener.h"
#include "transport/tcp/addr.h"

void tw__tcp_set_nodelay(int fd)
{
	int one = 1;
	/* Best effort, as in stock: a failure only costs latency. */
	(void)tw__sys_setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void tw__tcp_set_user_timeout(int fd, uint64_t ms)
{
	unsigned user = ms > INT_MAX ? INT_MAX : (unsigned)ms; /* the kernel takes an int */
	(void)tw__sys_setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof(user));
}

void tw__tcp_set_liveness(int fd, uint64_t ms)
{
	tw__tcp_set_user_timeout(fd, ms);
	int on = ms > 0;
	(void)tw__sys_setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	if (!on)
		return;
	uint64_t idle_s = ms / 3000, intvl_s = ms / 6000;
	int idle = idle_s < 1 ? 1 : idle_s > 32767 ? 32767 : (int)idle_s;
	int intvl = intvl_s < 1 ? 1 : intvl_s > 32767 ? 32767 : (int)intvl_s;
	int cnt = 6;
	(void)tw__sys_setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	(void)tw__sys_setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	(void)tw__sys_setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* ---- addresses and connecting ------------------------------------------- */

tw_status_t tw__tcp_check_address(const char *who, const char *address, bool for_listen,
                                  char *detail, size_t detail_len)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	tw_status_t st = tw__tcp_addr_parse(address, &ss, &sl, detail, detail_len);
	if (st != TW_OK)
		return st;
	if (!for_listen && tw__tcp_addr_port(&ss) == 0) {
		tw__detail(detail, detail_len,
		           "%s: '%s' has no port (connecting needs one: A.B.C.D:port or "
		           "[v6addr]:port)",
		           who, address);
		return TW_ERR_INVAL;
	}
	return TW_OK;
}

void tw__tcp_answer_address(int boot_fd, const char *advertised, char *out, size_t out_len)
{
	snprintf(out, out_len, "%s", advertised);
	struct sockaddr_storage adv, peer;
	socklen_t al, pl = sizeof(peer);
	char ignored[TW_DETAIL_MAX];
	/* The server's scope ("%eth0") may name no interface here: drop it. */
	char bare[TW_TCP_ADDR_MAX];
	const char *pct = strchr(advertised, '%'), *rb = pct ? strchr(pct, ']') : NULL;
	if (pct && rb && (size_t)(pct - advertised) + strlen(rb) < sizeof(bare))
		snprintf(bare, sizeof(bare), "%.*s%s", (int)(pct - advertised), advertised, rb);
	else
		snprintf(bare, sizeof(bare), "%s", advertised);
	if (boot_fd < 0 || tw__tcp_addr_parse(bare, &adv, &al, ignored, sizeof(ignored)) ||
	    adv.ss_family != AF_INET6 ||
	    !IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)&adv)->sin6_addr) ||
	    getpeername(boot_fd, (struct sockaddr *)&peer, &pl) != 0 || peer.ss_family != AF_INET6)
		return;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&adv, *p6 = (struct sockaddr_in6 *)&peer;
	if (memcmp(&a6->sin6_addr, &p6->sin6_addr, sizeof(a6->sin6_addr)) != 0)
		return;
	p6->sin6_port = a6->sin6_port; /* the same host, our own scope */
	tw__tcp_addr_format((struct sockaddr *)p6, out, out_len);
}

int tw__tcp_connect_result(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);
	if (tw__sys_getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = errno;
	return err == EALREADY ? EINPROGRESS : err;
}

int tw__tcp_connect_start(const char *who, const char *address, const tw_conn_opts *opts,
                          char *peer, size_t peer_len, int *err_out, char *detail,
                          size_t detail_len)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	*err_out = EINVAL;
	if (tw__tcp_addr_parse(address, &ss, &sl, detail, detail_len) != TW_OK)
		return -1;
	tw__tcp_addr_format((struct sockaddr *)&ss, peer, peer_len);
	int fd = tw__sys_socket(ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0) {
		char eb[128];
		*err_out = errno;
		tw__detail(detail, detail_len, "%s: socket for %s: %s", who, peer,
		           tw__strerror(errno, eb, sizeof(eb)));
		return -1;
	}
	tw__tcp_set_nodelay(fd);
	/* The SYNs' bound; the liveness bound replaces it once connected. */
	tw__tcp_set_user_timeout(fd, opts->connect_timeout_ms);
	*err_out = tw__sys_connect(fd, (struct sockaddr *)&ss, sl) == 0 ? 0 : errno;
	return fd;
}

/* ---- listening ----------------------------------------------------------- */

/* Does interface `name` pass the list `spec` (tw_context_set_socket_ifname)?
 * *named_out is set when the list names it (included or excluded). */
static bool tcp_if_listed(const char *spec, const char *name, bool *named_out)
{
	bool exclude = spec[0] == '^';
	const char *p = spec + exclude;
	bool exact = p[0] == '=';
	p += exact;
	bool hit = false;
	while (*p && !hit) {
		size_t n = strcspn(p, ",");
		hit = n > 0 && (exact ? strlen(name) == n && !memcmp(name, p, n)
		                      : !strncmp(name, p, n));
		p += n + (p[n] == ',');
	}
	if (hit)
		*named_out = true;
	return exclude ? !hit : hit;
}

static bool tcp_if_container(const char *name)
{
	static const char *const prefixes[] = { "docker", "br-", "virbr", "lxcbr", "cni",
		                                "flannel", "cali", "veth" };
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (!strncmp(name, prefixes[i], strlen(prefixes[i])))
			return true;
	return false;
}

/* The address a listener bound to a wildcard advertises (see the file
 * comment), with `port`, into out; TW_ERR_INVAL naming the list if it
 * matches no interface of this host. */
static tw_status_t tcp_pick_advertised(const char *who, int bound_family, uint16_t port,
                                       const tw_conn_opts *o, char *out, size_t out_len,
                                       char *detail, size_t detail_len)
{
	struct ifaddrs *ifs = NULL;
	if (getifaddrs(&ifs) != 0) {
		char eb[128];
		tw__detail(detail, detail_len, "%s: getifaddrs: %s", who,
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	const struct sockaddr *best = NULL;
	int best_rank = 0;
	bool named = false;
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		const struct sockaddr *sa = i->ifa_addr;
		bool listed = o->ifname[0] && tcp_if_listed(o->ifname, i->ifa_name, &named);
		if (!sa || !(i->ifa_flags & IFF_UP))
			continue;
		int fam = sa->sa_family;
		if ((fam != AF_INET && fam != AF_INET6) || (o->family && fam != o->family) ||
		    (bound_family == AF_INET && fam != AF_INET))
			continue;
		if (fam == AF_INET6 &&
		    IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr))
			continue;
		if (fam == AF_INET &&
		    (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 16) == 0xa9fe)
			continue; /* 169.254/16 */
		bool loop = i->ifa_flags & IFF_LOOPBACK;
		bool ok = o->ifname[0] ? listed : !loop && !tcp_if_container(i->ifa_name);
		/* rank: a listed or ordinary interface of the preferred family
		 * first, of the other family next, loopback last (only without a
		 * list: a host with nothing else still serves itself) */
		int rank = ok ? (fam == bound_family ? 4 : 3) : (!o->ifname[0] && loop ? 1 : 0);
		if (rank > best_rank) {
			best_rank = rank;
			best = sa;
		}
	}
	tw_status_t st = TW_OK;
	if (o->ifname[0] && o->ifname[0] != '^' && !named) {
		tw__detail(detail, detail_len,
		           "%s: no interface of this host matches '%s' (TW_SOCKET_IFNAME or "
		           "tw_context_set_socket_ifname)",
		           who, o->ifname);
		st = TW_ERR_INVAL;
	} else if (!best) {
		tw__detail(detail, detail_len,
		           "%s: no interface passing '%s' has a usable %s address to "
		           "advertise",
		           who, o->ifname[0] ? o->ifname : "the default rules",
		           o->family == AF_INET6 ? "IPv6" : o->family == AF_INET ? "IPv4" : "IP");
		st = TW_ERR_INVAL;
	} else {
		struct sockaddr_storage ss;
		memset(&ss, 0, sizeof(ss));
		memcpy(&ss, best, best->sa_family == AF_INET ? sizeof(struct sockaddr_in)
		                                             : sizeof(struct sockaddr_in6));
		tw__tcp_addr_set_port(&ss, port);
		tw__tcp_addr_format((struct sockaddr *)&ss, out, out_len);
	}
	freeifaddrs(ifs);
	return st;
}

tw_status_t tw__tcp_listen(tw_transport *base, const char *who, const char *address,
                           const tw_conn_opts *opts, tw_stream_conn_maker make,
                           tw_tlistener_accept_cb cb, void *arg, tw_tlistener **out,
                           char *detail, size_t detail_len)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	tw_status_t st = tw__tcp_addr_parse(address, &ss, &sl, detail, detail_len);
	if (st != TW_OK)
		return st;
	tw_stream_listener *l = tw__stream_listener_new(base, who, opts, make, cb, arg, detail,
	                                                detail_len);
	if (!l)
		return TW_ERR_NOMEM;
	struct sockaddr_storage bound;
	st = tw__acceptor_open(base->loop, who, address, (struct sockaddr *)&ss, sl, true,
	                       tw__tcp_addr_format, tw__stream_listener_on_accept, l, &l->acc, &bound,
	                       detail, detail_len);
	if (st != TW_OK) {
		tw__stream_listener_free(l);
		return st;
	}
	if (tw__tcp_addr_is_wildcard(&bound)) {
		st = tcp_pick_advertised(who, bound.ss_family, tw__tcp_addr_port(&bound), opts, l->address,
		                         sizeof(l->address), detail, detail_len);
		if (st != TW_OK) {
			tw__stream_listener_free(l);
			return st;
		}
	} else {
		tw__tcp_addr_format((struct sockaddr *)&bound, l->address, sizeof(l->address));
	}
	tw__acceptor_set_label(l->acc, l->address);
	*out = &l->base;
	return TW_OK;
}
