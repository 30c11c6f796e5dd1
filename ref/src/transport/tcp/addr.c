/*
 * addr.c - parse and format uv-transport addresses (see addr.h).
 */
#include "transport/tcp/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/error.h"

static int tw__tcp_parse_port(const char *p, unsigned *port)
{
	if (*p == '\0')
		return -1;
	char *end;
	errno = 0;
	unsigned long v = strtoul(p, &end, 10);
	if (errno != 0 || *end != '\0' || v > 65535 || *p < '0' || *p > '9')
		return -1;
	*port = (unsigned)v;
	return 0;
}

tw_status_t tw__tcp_addr_parse(const char *s, struct sockaddr_storage *ss, socklen_t *len_out,
                               char *detail, size_t detail_len)
{
	char host[TW_TCP_ADDR_MAX] = "";
	unsigned port = 0;
	const char *port_str = NULL;
	bool v6 = false;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close || (size_t)(close - s - 1) >= sizeof(host))
			goto bad;
		memcpy(host, s + 1, (size_t)(close - s - 1));
		host[close - s - 1] = '\0';
		if (close[1] == ':')
			port_str = close + 2;
		else if (close[1] != '\0')
			goto bad;
		v6 = true;
	} else {
		const char *colon = strrchr(s, ':');
		size_t hl = colon ? (size_t)(colon - s) : strlen(s);
		if (colon && memchr(s, ':', hl))
			goto bad; /* bare IPv6 needs brackets */
		if (hl >= sizeof(host))
			goto bad;
		memcpy(host, s, hl);
		host[hl] = '\0';
		if (colon)
			port_str = colon + 1;
	}
	if (port_str && tw__tcp_parse_port(port_str, &port) != 0)
		goto bad;

	memset(ss, 0, sizeof(*ss));
	if (!v6) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
			goto bad;
		*len_out = sizeof(*in);
		return TW_OK;
	}
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons((uint16_t)port);
	char *pct = strchr(host, '%');
	if (pct) {
		*pct = '\0';
		unsigned idx = if_nametoindex(pct + 1);
		if (idx == 0) {
			char *end;
			unsigned long v = strtoul(pct + 1, &end, 10);
			if (*end != '\0' || pct[1] == '\0')
				goto bad;
			idx = (unsigned)v;
		}
		in6->sin6_scope_id = idx;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
		goto bad;
	*len_out = sizeof(*in6);
	return TW_OK;
bad:
	if (s[0] != '[' && strpbrk(host, "ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ-_"))
		tw__detail(detail, detail_len,
		           "tcp transport: '%s' is a host name: tensorwire does not resolve names (a "
		           "lookup would block); give an IP address (A.B.C.D:port or [v6addr]:port)",
		           s);
	else
		tw__detail(detail, detail_len,
		           "tcp transport: bad address '%s' (want A.B.C.D:port or [v6addr]:port)", s);
	return TW_ERR_INVAL;
}

uint16_t tw__tcp_addr_port(const struct sockaddr_storage *ss)
{
	return ntohs(ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
	                                      : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

void tw__tcp_addr_set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

void tw__tcp_addr_format(const struct sockaddr *sa, char *buf, size_t buflen)
{
	char host[INET6_ADDRSTRLEN];
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, buflen, "%s:%u", host, (unsigned)ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		char ifname[IF_NAMESIZE];
		/* The scope by name, as stock writes it (a number means nothing
		 * on another host, and stock clients cannot parse one). */
		if (in6->sin6_scope_id != 0 && if_indextoname(in6->sin6_scope_id, ifname))
			snprintf(buf, buflen, "[%s%%%s]:%u", host, ifname, (unsigned)ntohs(in6->sin6_port));
		else if (in6->sin6_scope_id != 0)
			snprintf(buf, buflen, "[%s%%%u]:%u", host, (unsigned)in6->sin6_scope_id,
			         (unsigned)ntohs(in6->sin6_port));
		else
			snprintf(buf, buflen, "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
	} else {
		snprintf(buf, buflen, "(family %d)", (int)sa->sa_family);
	}
}

bool tw__tcp_addr_is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	return ss->ss_family == AF_INET6 &&
	       IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

bool tw__tcp_addr_unmap_v4(struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return true;
	if (ss->ss_family != AF_INET6)
		return false;
	const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
	if (!IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr))
		return true;
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = a6->sin6_port };
	memcpy(&a4.sin_addr, &a6->sin6_addr.s6_addr[12], 4);
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, &a4, sizeof(a4));
	return true;
}
