/*
 * ipc.c - the calls same-host mechanisms stand on: abstract UNIX socket
 * names, descriptor passing (SCM_RIGHTS), shared memory files and their
 * mappings, and cross-memory copies (see platform.h). Fault points are
 * listed in fault_points.h.
 */
#define _GNU_SOURCE /* O_TMPFILE, fallocate, process_vm_readv, MSG_CMSG_CLOEXEC */
#include "platform/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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
				fds[got++] = one;
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
	return (int)syscall(SYS_memfd_create, name, 1U /* MFD_CLOEXEC */);
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
	return open(dir, O_TMPFILE | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
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

ssize_t tw__sys_process_vm_readv(pid_t pid, const struct iovec *local, unsigned long nlocal,
                                 const struct iovec *remote, unsigned long nremote)
{
	if (TW_FAULT_POINT("sys/vm_readv/fail")) {
		errno = EPERM;
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
