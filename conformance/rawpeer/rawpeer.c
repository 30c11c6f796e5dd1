/*
 * rawpeer.c - a raw uv peer for the harness and the library's tests (see
 * rawpeer.h).
 */
#define _GNU_SOURCE
#include "rawpeer.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int twc_raw_connect(const char *addr, int timeout_ms, char *err, size_t errlen)
{
	const char *a = strstr(addr, "://");
	a = a ? a + 3 : addr;
	char host[64];
	const char *colon = strrchr(a, ':');
	if (!colon || (size_t)(colon - a) >= sizeof(host)) {
		snprintf(err, errlen, "raw connect: cannot parse address '%s'", addr);
		return -1;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - a), a);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
		snprintf(err, errlen, "raw connect: '%s' is not an IPv4 address", host);
		return -1;
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "raw connect: socket: %s", strerror(errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 && errno != EINPROGRESS) {
		snprintf(err, errlen, "raw connect %s: %s", a, strerror(errno));
		close(fd);
		return -1;
	}
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int soerr = 0;
	socklen_t sl = sizeof(soerr);
	if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) ||
	    soerr) {
		snprintf(err, errlen, "raw connect %s: %s", a, soerr ? strerror(soerr) : "timed out");
		close(fd);
		return -1;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

int twc_raw_listen(int *port_out, char *err, size_t errlen)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(fd, 16) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sin, &sl) != 0) {
		snprintf(err, errlen, "raw listen: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port_out = ntohs(sin.sin_port);
	return fd;
}

int twc_raw_accept(int lfd, int timeout_ms, char *err, size_t errlen)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	if (poll(&p, 1, timeout_ms) != 1) {
		snprintf(err, errlen, "raw accept: no connection within %d ms", timeout_ms);
		return -1;
	}
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "raw accept: %s", strerror(errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int twc_raw_send(int fd, const void *buf, size_t len, char *err, size_t errlen)
{
	const unsigned char *p = buf;
	while (len > 0) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			snprintf(err, errlen, "raw send: %s", strerror(errno));
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int twc_raw_send_frame(int fd, const void *body, size_t len, char *err, size_t errlen)
{
	unsigned char hdr[8];
	for (int i = 0; i < 8; i++)
		hdr[i] = (unsigned char)((uint64_t)len >> (8 * i));
	if (twc_raw_send(fd, hdr, 8, err, errlen))
		return -1;
	return twc_raw_send(fd, body, len, err, errlen);
}

static int recv_exact(int fd, unsigned char *buf, size_t n, long long deadline, char *err,
                      size_t errlen)
{
	size_t got = 0;
	while (got < n) {
		long long left = deadline - now_ms();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, (int)left) != 1) {
			snprintf(err, errlen, "raw recv: timed out with %zu of %zu bytes", got, n);
			return -1;
		}
		ssize_t r = recv(fd, buf + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 && got == 0)
			return -2;
		if (r <= 0) {
			snprintf(err, errlen, "raw recv: %s after %zu of %zu bytes",
			         r == 0 ? "EOF" : strerror(errno), got, n);
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

int twc_raw_recv_exact(int fd, void *buf, size_t n, int timeout_ms, char *err, size_t errlen)
{
	return recv_exact(fd, buf, n, now_ms() + timeout_ms, err, errlen);
}

long twc_raw_recv_frame(int fd, unsigned char *body, size_t cap, int timeout_ms, char *err,
                       size_t errlen)
{
	long long deadline = now_ms() + timeout_ms;
	unsigned char hdr[8];
	int rc = recv_exact(fd, hdr, 8, deadline, err, errlen);
	if (rc)
		return rc;
	uint64_t len = 0;
	for (int i = 0; i < 8; i++)
		len |= (uint64_t)hdr[i] << (8 * i);
	if (len > cap) {
		snprintf(err, errlen, "raw recv: frame of %llu bytes exceeds %zu", (unsigned long long)len,
		         cap);
		return -1;
	}
	rc = recv_exact(fd, body, (size_t)len, deadline, err, errlen);
	if (rc == -2) {
		snprintf(err, errlen, "raw recv: EOF inside a frame");
		return -1;
	}
	return rc ? -1 : (long)len;
}

int twc_raw_wait_closed(int fd, int timeout_ms)
{
	long long deadline = now_ms() + timeout_ms;
	unsigned char junk[4096];
	for (;;) {
		long long left = deadline - now_ms();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, (int)left) != 1)
			return 0;
		ssize_t r = recv(fd, junk, sizeof(junk), 0);
		if (r <= 0 && !(r < 0 && errno == EINTR))
			return 1;
	}
}

/* ---- packets ---------------------------------------------------------------------- */

/* {uv: "uv:*"}, {basic: {cpu:0: "any"}} (reference §3.4, observed) */
const unsigned char twc_raw_brochure_uv_basic[] = {
	0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x02, 'u', 'v', 0xbd, 0x04, 'u', 'v', ':', '*',
	0xbb, 0x01, 0xbd, 0x05, 'b', 'a', 's', 'i', 'c', 0xbb, 0x01, 0xb9, 0x02, 0xbd,
	0x03, 'c', 'p', 'u', 0x00, 0xbd, 0x03, 'a', 'n', 'y'};
const size_t twc_raw_brochure_uv_basic_len = sizeof(twc_raw_brochure_uv_basic);

static size_t put_u64(uint64_t v, unsigned char *b)
{
	if (v < 0x80) {
		b[0] = (unsigned char)v;
		return 1;
	}
	int w = v < (1ull << 8) ? 1 : v < (1ull << 16) ? 2 : v < (1ull << 32) ? 4 : 8;
	b[0] = (unsigned char)(w == 1 ? 0x80 : w == 2 ? 0x81 : w == 4 ? 0x82 : 0x83);
	for (int i = 0; i < w; i++)
		b[1 + i] = (unsigned char)(v >> (8 * i));
	return 1 + (size_t)w;
}

static size_t put_str(const char *v, unsigned char *b)
{
	size_t n = strlen(v);
	b[0] = 0xbd;
	b[1] = (unsigned char)n; /* < 0x80: the length is its own prefix */
	memcpy(b + 2, v, n);
	return 2 + n;
}

size_t twc_raw_brochure_with(const char *transport, const char *domain, const char *channel,
                             const char *descriptor, unsigned char *buf, size_t cap)
{
	size_t tl = strlen(transport), dl = strlen(domain), cl = strlen(channel),
	       xl = strlen(descriptor);
	if (tl >= 0x80 || dl >= 0x80 || cl >= 0x80 || xl >= 0x80 ||
	    cap < 4 + (2 + tl) + (2 + dl) + 2 + (2 + cl) + 10 + (2 + xl))
		return 0;
	size_t k = 0;
	buf[k++] = 0xb9, buf[k++] = 0x02; /* Brochure: 2 members */
	buf[k++] = 0xbb, buf[k++] = 0x01; /* one transport */
	k += put_str(transport, buf + k);
	k += put_str(domain, buf + k);
	buf[k++] = 0xbb, buf[k++] = 0x01; /* one channel */
	k += put_str(channel, buf + k);
	buf[k++] = 0xbb, buf[k++] = 0x01; /* one device: cpu:0 */
	buf[k++] = 0xb9, buf[k++] = 0x02;
	k += put_str("cpu", buf + k);
	buf[k++] = 0x00;
	k += put_str(descriptor, buf + k);
	return k;
}

size_t twc_raw_brochure(const char *transport, const char *domain, unsigned char *buf,
                        size_t cap)
{
	return twc_raw_brochure_with(transport, domain, "basic", "any", buf, cap);
}

int twc_raw_boot_id(char *out, size_t len)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (!f)
		return 0;
	int ok = fgets(out, (int)len, f) != NULL;
	fclose(f);
	out[strcspn(out, "\n")] = '\0';
	return ok && strlen(out) == 36;
}

int twc_raw_ns_id(const char *ns, char *out, size_t len)
{
	return twc_raw_ns_id_of(0, ns, out, len);
}

int twc_raw_ns_id_of(int pid, const char *ns, char *out, size_t len)
{
	char path[64];
	struct stat st;
	if (pid > 0)
		snprintf(path, sizeof(path), "/proc/%d/ns/%s", pid, ns);
	else
		snprintf(path, sizeof(path), "/proc/self/ns/%s", ns);
	if (stat(path, &st) != 0)
		return 0;
	snprintf(out, len, "%llx_%llx", (unsigned long long)st.st_dev,
	         (unsigned long long)st.st_ino);
	return 1;
}

/* The inode of the loopback TCP socket whose local port is `port` and
 * remote port `rport`, from one /proc/net file; 0 if none listed. */
static unsigned long tcp_inode_by_ports(const char *file, unsigned port, unsigned rport)
{
	FILE *f = fopen(file, "r");
	if (!f)
		return 0;
	char line[512];
	unsigned long found = 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *tok[12];
		int n = 0;
		for (char *save, *t = strtok_r(line, " \t\n", &save); t && n < 12;
		     t = strtok_r(NULL, " \t\n", &save))
			tok[n++] = t;
		if (n < 10 || !strchr(tok[1], ':') || !strchr(tok[2], ':'))
			continue;
		unsigned lp = (unsigned)strtoul(strrchr(tok[1], ':') + 1, NULL, 16);
		unsigned rp = (unsigned)strtoul(strrchr(tok[2], ':') + 1, NULL, 16);
		if (lp == port && rp == rport)
			found = strtoul(tok[9], NULL, 10);
	}
	fclose(f);
	return found;
}

int twc_raw_peer_pid(int fd)
{
	struct sockaddr_storage me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
		return -1;
	unsigned mport = ntohs(((struct sockaddr_in *)&me)->sin_port); /* same offset in v6 */
	unsigned pport = ntohs(((struct sockaddr_in *)&peer)->sin_port);
	unsigned long inode = tcp_inode_by_ports("/proc/net/tcp", pport, mport);
	if (!inode)
		inode = tcp_inode_by_ports("/proc/net/tcp6", pport, mport);
	if (!inode)
		return -1; /* not accepted yet: a queued connection has no inode */
	char want[48];
	snprintf(want, sizeof(want), "socket:[%lu]", inode);
	DIR *proc = opendir("/proc");
	if (!proc)
		return -1;
	int pid = -1;
	for (struct dirent *p; pid < 0 && (p = readdir(proc));) {
		if (p->d_name[0] < '1' || p->d_name[0] > '9')
			continue;
		char dir[300];
		snprintf(dir, sizeof(dir), "/proc/%s/fd", p->d_name);
		DIR *fds = opendir(dir);
		if (!fds)
			continue;
		for (struct dirent *e; pid < 0 && (e = readdir(fds));) {
			char link[64];
			ssize_t n = readlinkat(dirfd(fds), e->d_name, link, sizeof(link) - 1);
			if (n > 0 && (link[n] = '\0', !strcmp(link, want)))
				pid = atoi(p->d_name);
		}
		closedir(fds);
	}
	closedir(proc);
	return pid;
}

/* spec 6: one capability mask per "capability" entry of the LSM list
 * (capability,yama assumed where securityfs is not readable). */
static int capability_entries(void)
{
	FILE *f = fopen("/sys/kernel/security/lsm", "r");
	if (!f)
		return 1;
	char line[512] = "";
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	int n = 0;
	for (char *save, *t = strtok_r(line, ",\n", &save); t; t = strtok_r(NULL, ",\n", &save))
		n += !strcmp(t, "capability");
	return n;
}

int twc_raw_cma_descriptor(char *out, size_t len)
{
	char boot[64], pid[64], user[64];
	if (!twc_raw_boot_id(boot, sizeof(boot)) || !twc_raw_ns_id("pid", pid, sizeof(pid)) ||
	    !twc_raw_ns_id("user", user, sizeof(user)))
		return 0;
	int at = snprintf(out, len, "cma:%s_%s_%s_%u_%u", boot, pid, user, (unsigned)getuid(),
	                  (unsigned)getgid());
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d) != 0)
		return 0;
	uint64_t caps = (uint64_t)d[0].permitted | (uint64_t)d[1].permitted << 32;
	for (int i = capability_entries(); i > 0 && at > 0 && (size_t)at < len; i--)
		at += snprintf(out + at, len - (size_t)at, "_%" PRIx64, caps);
	return at > 0 && (size_t)at < len;
}

size_t twc_raw_u64(uint64_t v, unsigned char *b)
{
	return put_u64(v, b);
}

size_t twc_raw_hello(const char *name, unsigned char *buf, size_t cap)
{
	size_t n = strlen(name);
	if (cap < n + 16)
		return 0;
	size_t k = 0;
	buf[k++] = 0xb8; /* variant */
	buf[k++] = 0x00; /* index 0: SpontaneousConnection */
	buf[k++] = 0xb9; /* struct */
	buf[k++] = 0x01; /* 1 member */
	buf[k++] = 0xbd; /* string */
	k += put_u64(n, buf + k);
	memcpy(buf + k, name, n);
	return k + n;
}

size_t twc_raw_requested(uint64_t id, unsigned char *buf, size_t cap)
{
	if (cap < 16)
		return 0;
	size_t k = 0;
	buf[k++] = 0xb8;
	buf[k++] = 0x01; /* index 1: RequestedConnection */
	buf[k++] = 0xb9;
	buf[k++] = 0x01;
	return k + put_u64(id, buf + k);
}

/* ---- a minimal nop reader ------------------------------------------------------------ */

typedef struct rd {
	const unsigned char *p;
	size_t n, off;
	const char *why;
} rd;

static int get_byte(rd *r, unsigned char *b)
{
	if (r->off >= r->n) {
		r->why = "truncated";
		return -1;
	}
	*b = r->p[r->off++];
	return 0;
}

static int get_le(rd *r, int w, uint64_t *v)
{
	if (r->n - r->off < (size_t)w) {
		r->why = "truncated integer";
		return -1;
	}
	*v = 0;
	for (int i = 0; i < w; i++)
		*v |= (uint64_t)r->p[r->off + (size_t)i] << (8 * i);
	r->off += (size_t)w;
	return 0;
}

static int get_u64(rd *r, uint64_t *v)
{
	unsigned char pfx;
	if (get_byte(r, &pfx))
		return -1;
	if (pfx < 0x80) {
		*v = pfx;
		return 0;
	}
	if (pfx >= 0x80 && pfx <= 0x83)
		return get_le(r, 1 << (pfx - 0x80), v);
	r->why = "expected an unsigned integer";
	return -1;
}

static int get_string(rd *r, char *buf, size_t cap)
{
	unsigned char pfx;
	uint64_t len;
	if (get_byte(r, &pfx) || pfx != 0xbd || get_u64(r, &len)) {
		r->why = r->why ? r->why : "expected a string";
		return -1;
	}
	if (len > r->n - r->off) {
		r->why = "string longer than the frame";
		return -1;
	}
	if (buf) {
		snprintf(buf, cap, "%.*s", (int)(len < cap ? len : cap - 1),
		         (const char *)r->p + r->off);
	}
	r->off += (size_t)len;
	return 0;
}

static int skip_value(rd *r, int depth)
{
	unsigned char pfx;
	uint64_t n, v;
	if (depth > 32) {
		r->why = "nested too deeply";
		return -1;
	}
	if (get_byte(r, &pfx))
		return -1;
	if (pfx < 0x80 || pfx >= 0xc0 || pfx == 0xbe)
		return 0;
	if (pfx >= 0x80 && pfx <= 0x87)
		return get_le(r, 1 << ((pfx - 0x80) & 3), &v);
	if (pfx == 0x88 || pfx == 0x89)
		return get_le(r, pfx == 0x88 ? 4 : 8, &v);
	switch (pfx) {
	case 0xb8: /* variant: int32 index, then the element */
		return skip_value(r, depth + 1) || skip_value(r, depth + 1) ? -1 : 0;
	case 0xb9: /* struct */
	case 0xba: /* array */
		if (get_u64(r, &n))
			return -1;
		for (uint64_t i = 0; i < n; i++)
			if (skip_value(r, depth + 1))
				return -1;
		return 0;
	case 0xbb: /* map */
		if (get_u64(r, &n))
			return -1;
		for (uint64_t i = 0; i < 2 * n; i++)
			if (skip_value(r, depth + 1))
				return -1;
		return 0;
	case 0xbc: /* binary */
	case 0xbd: /* string */
		if (get_u64(r, &n))
			return -1;
		if (n > r->n - r->off) {
			r->why = "length longer than the frame";
			return -1;
		}
		r->off += (size_t)n;
		return 0;
	}
	r->why = "unexpected prefix byte";
	return -1;
}

int twc_raw_parse_answer(const unsigned char *b, size_t n, twc_raw_answer *out, char *err,
                        size_t errlen)
{
	rd r = {.p = b, .n = n};
	unsigned char pfx;
	uint64_t members, count, k, v;
	memset(out, 0, sizeof(*out));
	if (get_byte(&r, &pfx) || pfx != 0xb9 || get_u64(&r, &members) || members != 7) {
		snprintf(err, errlen, "BrochureAnswer: expected a 7-member struct");
		return -1;
	}
	if (get_string(&r, out->transport, sizeof(out->transport)) ||
	    get_string(&r, out->address, sizeof(out->address)))
		goto bad;
	if (get_byte(&r, &pfx) || pfx != 0xbb || get_u64(&r, &count))
		goto bad;
	for (uint64_t i = 0; i < count; i++) {
		if (get_u64(&r, &k) || get_u64(&r, &v))
			goto bad;
		if (k == 1)
			out->reply_id = v;
		if (k == 0) {
			out->has_descriptor_id = 1;
			out->descriptor_id = v;
		}
		if (k == UINT64_C(0x74770001)) {
			out->has_ext = 1;
			out->ext_mask = v;
		}
	}
	if (get_string(&r, NULL, 0))
		goto bad;
	if (get_byte(&r, &pfx) || pfx != 0xbb || get_u64(&r, &count))
		goto bad;
	for (uint64_t i = 0; i < count; i++) {
		char name[64];
		uint64_t blen;
		if (get_string(&r, name, sizeof(name)) || get_byte(&r, &pfx) || pfx != 0xbc ||
		    get_u64(&r, &blen) || blen > r.n - r.off)
			goto bad;
		size_t cl = strlen(out->channels);
		snprintf(out->channels + cl, sizeof(out->channels) - cl, "%s%s", cl ? "," : "", name);
		if (!strcmp(name, "basic") && blen >= 8) {
			size_t save = r.off;
			(void)get_le(&r, 8, &out->basic_id);
			r.off = save;
			out->has_basic = 1;
		}
		if (!strcmp(name, "mpt") && blen >= 8) {
			size_t save = r.off;
			(void)get_le(&r, 8, &out->mpt_id);
			r.off = save;
			out->has_mpt = 1;
		}
		if (strcmp(name, "basic") && strcmp(name, "mpt") && !out->other[0]) {
			size_t save = r.off;
			snprintf(out->other, sizeof(out->other), "%.31s", name);
			for (uint64_t k8 = 0; k8 + 8 <= blen && out->other_n < 4; k8 += 8)
				(void)get_le(&r, 8, &out->other_ids[out->other_n++]);
			r.off = save;
		}
		r.off += (size_t)blen;
	}
	if (skip_value(&r, 0) || skip_value(&r, 0))
		goto bad;
	return 0;
bad:
	snprintf(err, errlen, "BrochureAnswer: %s at byte %zu", r.why ? r.why : "malformed", r.off);
	return -1;
}

int twc_raw_parse_server_hello(const unsigned char *b, size_t n, twc_raw_lane *lanes, int max,
                               int *count_out, char *err, size_t errlen)
{
	rd r = {b, n, 0, NULL};
	unsigned char pfx, idx;
	uint64_t members, count;
	if (get_byte(&r, &pfx) || pfx != 0xb8 || get_byte(&r, &idx) || idx != 0 ||
	    get_byte(&r, &pfx) || pfx != 0xb9 || get_u64(&r, &members) || members != 1 ||
	    get_byte(&r, &pfx) || pfx != 0xba || get_u64(&r, &count) || count > (uint64_t)max) {
		snprintf(err, errlen, "ServerHello: expected Variant 0 {Array of at most %d lanes}", max);
		return -1;
	}
	for (uint64_t i = 0; i < count; i++) {
		if (get_byte(&r, &pfx) || pfx != 0xb9 || get_u64(&r, &members) || members != 2 ||
		    get_string(&r, lanes[i].address, sizeof(lanes[i].address)) ||
		    get_u64(&r, &lanes[i].id)) {
			snprintf(err, errlen, "ServerHello: lane %llu: %s at byte %zu",
			         (unsigned long long)i, r.why ? r.why : "malformed", r.off);
			return -1;
		}
	}
	*count_out = (int)count;
	return 0;
}
