/*
 * ipc.c - the calls same-host mechanisms stand on: abstract UNIX socket
 * names, descriptor passing (SCM_RIGHTS), shared memory files and their
 * mappings, and cross-memory copies (see platform.h). Fault points are
 * listed in fault_points.h.
 */
#define _GNU_SOURCE /* O_TMPFILE, fallocate, process_vm_readv, MSG_CMSG_CLOEXEC */
#include "platform/platform.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "platform/error.h"
#include "platform/fault.h"

#define TW_FDS_MAX 8 /* the most descriptors one message carries (shm: 4) */

int tw__sockaddr_abstract(struct sockaddr_un *addr, socklen_t *addr_len, const char *name,
                          size_t len)
{
	if (len > TW_ABSTRACT_NAME_MAX) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	memcpy(addr->sun_path + 1, name, len); /* sun_path[0] = 0: abstract */
	*addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
	return 0;
}

/* A one-iovec message with room for up to TW_FDS_MAX descriptors. */
typedef struct tw_fds_msg {
	struct msghdr msg;
	struct iovec iov;
	union {
		char buf[CMSG_SPACE(sizeof(int) * TW_FDS_MAX)];
		struct cmsghdr align;
	} ctl;
} tw_fds_msg;

/* Checks a descriptor count and sets up m for len bytes at buf and control
 * room for exactly nfds descriptors (none: no control at all). -1 and
 * errno on a bad count (or an injected EINTR). */
static int tw__fds_msg_init(tw_fds_msg *m, void *buf, size_t len, int nfds)
{
	if (nfds < 0 || nfds > TW_FDS_MAX) {
		errno = EINVAL;
		return -1;
	}
	if (TW_FAULT_POINT("sys/eintr")) {
		errno = EINTR;
		return -1;
	}
	memset(m, 0, sizeof(*m));
	m->iov = (struct iovec){ buf, len };
	m->msg.msg_iov = &m->iov;
	m->msg.msg_iovlen = 1;
	if (nfds > 0) {
		m->msg.msg_control = m->ctl.buf;
		m->msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
	}
	return 0;
}

ssize_t tw__sys_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	tw_fds_msg m;
	if (tw__fds_msg_init(&m, (void *)buf, len, nfds) != 0)
		return -1;
	if (TW_FAULT_POINT("sys/fds/send")) {
		errno = EPIPE;
		return -1;
	}
	if (nfds > 0) {
		struct cmsghdr *c = CMSG_FIRSTHDR(&m.msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	return sendmsg(fd, &m.msg, MSG_NOSIGNAL);
}

/* Takes the descriptors an SCM_RIGHTS message brought: the first `keep`
 * into fds[], every other one closed. Returns how many were kept. */
static int tw__take_passed(struct msghdr *msg, int *fds, int keep)
{
	int got = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int one;
			memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (got < keep)
				fds[got++] = tw__fd_own(one);
			else
				close(one);
		}
	}
	return got;
}

ssize_t tw__sys_recv_fds(int fd, void *buf, size_t len, int *fds, int maxfds, int *nfds_out)
{
	*nfds_out = 0;
	tw_fds_msg m;
	/* Room for exactly maxfds: one more makes the kernel set MSG_CTRUNC. */
	if (tw__fds_msg_init(&m, buf, len, maxfds) != 0)
		return -1;
	ssize_t n = recvmsg(fd, &m.msg, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -1;
	if ((m.msg.msg_flags & MSG_CTRUNC) || TW_FAULT_POINT("sys/fds/ctrunc")) {
		tw__take_passed(&m.msg, NULL, 0);
		errno = EMSGSIZE;
		return -1;
	}
	*nfds_out = tw__take_passed(&m.msg, fds, maxfds);
	return n;
}

int tw__sys_memfd_create(const char *name)
{
	if (TW_FAULT_POINT("sys/memfd/eperm")) {
		errno = EPERM;
		return -1;
	}
	if (TW_FAULT_POINT("sys/memfd/enosys")) {
		errno = ENOSYS;
		return -1;
	}
#ifdef SYS_memfd_create
	return tw__fd_own(
		(int)syscall(SYS_memfd_create, name, 1U /* MFD_CLOEXEC */ | 2U /* MFD_ALLOW_SEALING */));
#else
	(void)name;
	errno = ENOSYS;
	return -1;
#endif
}

int tw__sys_open_tmpfile(const char *dir)
{
	if (TW_FAULT_POINT("sys/tmpfile")) {
		errno = EACCES;
		return -1;
	}
	return tw__fd_own(open(dir, O_TMPFILE | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
}

int tw__sys_ftruncate(int fd, uint64_t len)
{
	if (TW_FAULT_POINT("sys/ftruncate")) {
		errno = EFBIG;
		return -1;
	}
	if (len > (uint64_t)INT64_MAX) {
		errno = EFBIG;
		return -1;
	}
	return ftruncate(fd, (off_t)len);
}

int tw__sys_fallocate(int fd, uint64_t len)
{
	if (TW_FAULT_POINT("sys/fallocate")) {
		errno = ENOSPC;
		return -1;
	}
	if (len > (uint64_t)INT64_MAX) {
		errno = EFBIG;
		return -1;
	}
	return fallocate(fd, 0, 0, (off_t)len);
}

int tw__sys_seal_size(int fd)
{
	if (TW_FAULT_POINT("sys/seal")) {
		errno = EINVAL;
		return -1;
	}
	return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
}

int tw__sys_fd_size(int fd, uint64_t *size_out)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return -1;
	*size_out = (uint64_t)st.st_size;
	return 0;
}

void *tw__sys_mmap_shared(int fd, size_t len)
{
	if (TW_FAULT_POINT("sys/mmap")) {
		errno = ENOMEM;
		return NULL;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *tw__sys_mmap_private(size_t len)
{
	if (TW_FAULT_POINT("sys/mmap")) {
		errno = ENOMEM;
		return NULL;
	}
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

int tw__sys_munmap(void *p, size_t len)
{
	return munmap(p, len);
}

int tw__sys_futex_wait_shared(const uint32_t *addr, uint32_t expected, uint64_t timeout_ns)
{
	struct timespec ts = { (time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u) };
	long rc = syscall(SYS_futex, addr, FUTEX_WAIT, expected, timeout_ns ? &ts : NULL, NULL, 0);
	return rc < 0 ? -1 : 0;
}

int tw__sys_futex_wake_shared(const uint32_t *addr)
{
	long rc = syscall(SYS_futex, addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
	return rc < 0 ? -1 : (int)rc;
}

void tw__sys_thread_name(const char *name)
{
	(void)prctl(PR_SET_NAME, name, 0, 0, 0);
}

ssize_t tw__sys_process_vm_readv(pid_t pid, const struct iovec *local, unsigned long nlocal,
                                 const struct iovec *remote, unsigned long nremote)
{
	if (TW_FAULT_POINT("sys/vm_readv/fail")) {
		errno = EPERM;
		return -1;
	}
	if (TW_FAULT_POINT("sys/vm_readv/esrch")) {
		errno = ESRCH;
		return -1;
	}
	if (nlocal > 0 && nremote > 0 && TW_FAULT_POINT("sys/vm_readv/short")) {
		/* One byte, from the first non-empty iovec of each side. */
		unsigned long i = 0, k = 0;
		while (i < nlocal && local[i].iov_len == 0)
			i++;
		while (k < nremote && remote[k].iov_len == 0)
			k++;
		if (i < nlocal && k < nremote) {
			struct iovec l1 = { local[i].iov_base, 1 }, r1 = { remote[k].iov_base, 1 };
			return process_vm_readv(pid, &l1, 1, &r1, 1, 0);
		}
	}
	return process_vm_readv(pid, local, nlocal, remote, nremote, 0);
}

/* ---- who is at the other end of a socket ------------------------------- */

/* A TCP endpoint as /proc/net/tcp{,6} shows it: an IPv4 address is kept as
 * its IPv4-mapped IPv6 form, so that a dual-stack socket and a plain IPv4
 * one compare equal. */
typedef struct tw_tcp_end {
	unsigned char addr[16];
	unsigned port;
} tw_tcp_end;

static void tw__tcp_end_v4(tw_tcp_end *e, const void *v4, unsigned port)
{
	memset(e->addr, 0, 10);
	e->addr[10] = e->addr[11] = 0xff;
	memcpy(e->addr + 12, v4, 4);
	e->port = port;
}

static bool tw__tcp_end_of(const struct sockaddr_storage *ss, tw_tcp_end *e)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		tw__tcp_end_v4(e, &in->sin_addr, ntohs(in->sin_port));
		return true;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		memcpy(e->addr, &in6->sin6_addr, 16);
		e->port = ntohs(in6->sin6_port);
		return true;
	}
	return false;
}

/* "0100007F:1F90" (tcp) or 32 hex digits and a port (tcp6): the kernel
 * prints each 32-bit word of the address as the number it is in memory. */
static bool tw__tcp_end_parse(const char *s, tw_tcp_end *e)
{
	size_t n = strcspn(s, ":");
	if ((n != 8 && n != 32) || s[n] != ':')
		return false;
	uint32_t words[4];
	for (size_t w = 0; w < n / 8; w++) {
		char hex[9], *end;
		memcpy(hex, s + 8 * w, 8);
		hex[8] = '\0';
		words[w] = (uint32_t)strtoul(hex, &end, 16);
		if (end != hex + 8)
			return false;
	}
	char *end;
	unsigned long port = strtoul(s + n + 1, &end, 16);
	if (end == s + n + 1 || port > 0xffff)
		return false;
	if (n == 8)
		tw__tcp_end_v4(e, words, (unsigned)port);
	else {
		memcpy(e->addr, words, 16);
		e->port = (unsigned)port;
	}
	return true;
}

/* /proc/<pid>/<a><b>, or /proc/self/... for this process: /proc may be
 * the mount of another pid namespace (unshare -p without a new /proc),
 * where our own number names another process or none. */
static void tw__proc_path(char *out, size_t len, pid_t pid, const char *a, const char *b)
{
	if (pid == getpid())
		snprintf(out, len, "/proc/self/%s%s", a, b);
	else
		snprintf(out, len, "/proc/%d/%s%s", (int)pid, a, b);
}

/* The inode of the socket that /proc/<pid>/net/<file> lists as local `mine`
 * and remote `theirs`; 0 if none. -1 and errno if the file cannot be read. */
static int tw__tcp_find_inode(pid_t pid, const char *file, const tw_tcp_end *local,
                              const tw_tcp_end *remote, unsigned long *inode_out)
{
	char path[64], line[512];
	tw__proc_path(path, sizeof(path), pid, "net/", file);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	*inode_out = 0;
	while (!*inode_out && fgets(line, sizeof(line), f)) {
		char l[64], r[64];
		unsigned long inode;
		tw_tcp_end le, re;
		/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line, " %*s %63s %63s %*s %*s %*s %*s %*s %*s %lu", l, r, &inode) != 3 ||
		    !tw__tcp_end_parse(l, &le) || !tw__tcp_end_parse(r, &re))
			continue; /* the heading */
		if (inode && le.port == local->port && re.port == remote->port &&
		    !memcmp(le.addr, local->addr, 16) && !memcmp(re.addr, remote->addr, 16))
			*inode_out = inode;
	}
	fclose(f);
	return 0;
}

/* 1 if socket `inode` is one of pid's descriptors, 0 if not, -1 and errno
 * if its descriptors cannot be listed. */
static int tw__fd_table_has_socket(pid_t pid, unsigned long inode)
{
	char path[64], want[48], link[64];
	tw__proc_path(path, sizeof(path), pid, "fd", "");
	snprintf(want, sizeof(want), "socket:[%lu]", inode);
	/* open() then fdopendir(), not opendir(): ThreadSanitizer sees the
	 * descriptor made (glibc's opendir opens it out of its sight, so the
	 * closedir of a number another thread's closed descriptor had before
	 * reads to it as a race) */
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		errno = e;
		return -1;
	}
	int found = 0;
	for (struct dirent *de; !found && (de = readdir(d));) {
		ssize_t n = readlinkat(dirfd(d), de->d_name, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			found = !strcmp(link, want);
		}
	}
	closedir(d);
	return found;
}

int tw__sys_socket_peer_of(int fd, pid_t pid, char *why, size_t why_len)
{
	char eb[128];
	if (TW_FAULT_POINT("sys/peer_of")) {
		errno = EACCES;
		tw__detail(why, why_len, "reading /proc/%d: %s", (int)pid,
		           tw__strerror(errno, eb, sizeof(eb)));
		return -1;
	}
	if (fd < 0) {
		tw__detail(why, why_len, "the connection has no socket (closed, or not open yet)");
		errno = EBADF;
		return -1;
	}
	if (pid <= 0) {
		tw__detail(why, why_len, "%d names no process", (int)pid);
		return 0;
	}
	struct sockaddr_storage mine, theirs;
	socklen_t ml = sizeof(mine), tl = sizeof(theirs);
	if (getsockname(fd, (struct sockaddr *)&mine, &ml) != 0 ||
	    getpeername(fd, (struct sockaddr *)&theirs, &tl) != 0) {
		tw__detail(why, why_len, "getpeername: %s", tw__strerror(errno, eb, sizeof(eb)));
		return -1;
	}
	if (mine.ss_family == AF_UNIX) {
		struct ucred cred;
		socklen_t cl = sizeof(cred);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
			tw__detail(why, why_len, "getsockopt(SO_PEERCRED): %s",
			           tw__strerror(errno, eb, sizeof(eb)));
			return -1;
		}
		if (cred.pid == pid)
			return 1;
		tw__detail(why, why_len, "the UNIX socket's peer is process %d%s", (int)cred.pid,
		           cred.pid == 0 ? " (not visible from this pid namespace)" : "");
		return 0;
	}
	tw_tcp_end me, peer;
	if (!tw__tcp_end_of(&mine, &me) || !tw__tcp_end_of(&theirs, &peer)) {
		tw__detail(why, why_len, "a socket of address family %d", (int)mine.ss_family);
		errno = EAFNOSUPPORT;
		return -1;
	}
	/* the peer's socket: local address = our peer, remote = us */
	unsigned long inode = 0;
	static const char *const files[] = { "tcp", "tcp6" };
	for (size_t i = 0; i < 2 && !inode; i++)
		if (tw__tcp_find_inode(pid, files[i], &peer, &me, &inode) != 0) {
			tw__detail(why, why_len, "reading /proc/%d/net/%s: %s", (int)pid, files[i],
			           tw__strerror(errno, eb, sizeof(eb)));
			return -1;
		}
	if (!inode) {
		tw__detail(why, why_len, "no socket of process %d's network namespace is the other end "
		                         "of this TCP connection", (int)pid);
		return 0;
	}
	int has = tw__fd_table_has_socket(pid, inode);
	if (has < 0)
		tw__detail(why, why_len, "listing /proc/%d/fd: %s", (int)pid,
		           tw__strerror(errno, eb, sizeof(eb)));
	else if (!has)
		tw__detail(why, why_len, "the other end of this TCP connection (socket inode %lu) is "
		                         "not a descriptor of process %d", inode, (int)pid);
	return has;
}

int tw__sys_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
	return tw__fd_own((int)syscall(SYS_pidfd_open, pid, 0));
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

bool tw__sys_pidfd_exited(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
}
