/*
 * platform.c - allocation and socket wrappers with fault points (see
 * platform.h; ipc.c and host.c hold the rest of the door). Nothing here keeps state except the fault rule table.
 */
#define _GNU_SOURCE /* accept4, GNU strerror_r */
#include "platform/platform.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "platform/fault.h"

void *tw__malloc(size_t n)
{
	if (TW_FAULT_POINT("malloc"))
		return NULL;
	return malloc(n ? n : 1);
}

void *tw__calloc(size_t count, size_t size)
{
	if (TW_FAULT_POINT("malloc"))
		return NULL;
	if (count == 0 || size == 0)
		count = size = 1;
	return calloc(count, size);
}

void *tw__realloc(void *p, size_t n)
{
	if (TW_FAULT_POINT("malloc"))
		return NULL;
	return realloc(p, n ? n : 1);
}

void tw__free(void *p)
{
	free(p);
}

char *tw__memdup_str(const void *s, size_t n)
{
	if (n == SIZE_MAX)
		return NULL;
	char *d = tw__malloc(n + 1);
	if (!d)
		return NULL;
	if (n)
		memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

/* ---- descriptors the library holds (tw__fd_own) ------------------------------------ */

static pthread_mutex_t fds_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *fds_bits; /* bit fd: held; under fds_mu */
static size_t fds_words;
static pthread_once_t fds_once = PTHREAD_ONCE_INIT;

static void fds_prepare(void)
{
	pthread_mutex_lock(&fds_mu);
}

static void fds_parent(void)
{
	pthread_mutex_unlock(&fds_mu);
}

/* The forked child: one thread, the lock taken by fds_prepare before the
 * fork. Its copies of the library's descriptors go (see platform.h). */
static void fds_child(void)
{
	for (size_t w = 0; w < fds_words; w++) {
		for (uint64_t b = fds_bits[w]; b; b &= b - 1)
			(void)close((int)(w * 64 + (size_t)__builtin_ctzll(b)));
		fds_bits[w] = 0;
	}
	pthread_mutex_unlock(&fds_mu);
}

static void fds_init(void)
{
	(void)pthread_atfork(fds_prepare, fds_parent, fds_child);
}

int tw__fd_own(int fd)
{
	if (fd < 0)
		return fd;
	pthread_once(&fds_once, fds_init);
	pthread_mutex_lock(&fds_mu);
	size_t w = (size_t)fd / 64;
	if (w >= fds_words) {
		size_t n = w + 1 > 2 * fds_words ? w + 1 : 2 * fds_words;
		uint64_t *nb = realloc(fds_bits, n * sizeof(*nb));
		if (nb) { /* else it stays unrecorded: a child keeps its copy */
			memset(nb + fds_words, 0, (n - fds_words) * sizeof(*nb));
			fds_bits = nb;
			fds_words = n;
		}
	}
	if (w < fds_words)
		fds_bits[w] |= UINT64_C(1) << (fd % 64);
	pthread_mutex_unlock(&fds_mu);
	return fd;
}

/* Forgets fd before it is closed (so a descriptor of the same number made
 * meanwhile by another thread is not forgotten in its place). */
static void fd_disown(int fd)
{
	if (fd < 0)
		return;
	pthread_mutex_lock(&fds_mu);
	size_t w = (size_t)fd / 64;
	if (w < fds_words)
		fds_bits[w] &= ~(UINT64_C(1) << (fd % 64));
	pthread_mutex_unlock(&fds_mu);
}

int tw__sys_socket(int domain, int type, int protocol)
{
	if (TW_FAULT_POINT("sys/socket")) {
		errno = EMFILE;
		return -1;
	}
	return tw__fd_own(socket(domain, type | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol));
}

int tw__sys_bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	if (TW_FAULT_POINT("sys/bind")) {
		errno = EADDRINUSE;
		return -1;
	}
	return bind(fd, addr, len);
}

int tw__sys_listen(int fd, int backlog)
{
	return listen(fd, backlog);
}

int tw__sys_accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	if (TW_FAULT_POINT("sys/accept")) {
		errno = EMFILE;
		return -1;
	}
	return tw__fd_own(accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC));
}

int tw__sys_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	if (TW_FAULT_POINT("sys/connect")) {
		errno = ECONNREFUSED;
		return -1;
	}
	return connect(fd, addr, len);
}

int tw__sys_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	return setsockopt(fd, level, name, val, len);
}

int tw__sys_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	return getsockopt(fd, level, name, val, len);
}

int tw__sys_getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	return getsockname(fd, addr, len);
}

int tw__sys_getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	return getpeername(fd, addr, len);
}

ssize_t tw__sys_readv(int fd, const struct iovec *iov, int iovcnt)
{
	if (TW_FAULT_POINT("sys/eintr")) {
		errno = EINTR;
		return -1;
	}
	if (TW_FAULT_POINT("sys/read/fail")) {
		errno = ECONNRESET;
		return -1;
	}
	if (iovcnt > 0 && TW_FAULT_POINT("sys/read/short")) {
		for (int i = 0; i < iovcnt; i++)
			if (iov[i].iov_len > 0)
				return read(fd, iov[i].iov_base, 1);
	}
	return readv(fd, iov, iovcnt);
}

ssize_t tw__sys_writev(int fd, const struct iovec *iov, int iovcnt)
{
	if (TW_FAULT_POINT("sys/eintr")) {
		errno = EINTR;
		return -1;
	}
	if (TW_FAULT_POINT("sys/write/fail")) {
		errno = EPIPE;
		return -1;
	}
	struct msghdr msg;
	memset(&msg, 0, sizeof(msg));
	msg.msg_iov = (struct iovec *)iov;
	msg.msg_iovlen = (size_t)iovcnt;
	if (iovcnt > 0 && TW_FAULT_POINT("sys/write/short")) {
		for (int i = 0; i < iovcnt; i++) {
			if (iov[i].iov_len > 0) {
				struct iovec one = { iov[i].iov_base, 1 };
				msg.msg_iov = &one;
				msg.msg_iovlen = 1;
				return sendmsg(fd, &msg, MSG_NOSIGNAL);
			}
		}
	}
	return sendmsg(fd, &msg, MSG_NOSIGNAL);
}

ssize_t tw__sys_peek(int fd)
{
	if (TW_FAULT_POINT("sys/eintr")) {
		errno = EINTR;
		return -1;
	}
	if (TW_FAULT_POINT("sys/peek/fail")) {
		errno = ECONNRESET;
		return -1;
	}
	unsigned char b;
	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
}

bool tw__sys_peer_left(int fd)
{
	if (TW_FAULT_POINT("sys/peer_left"))
		return true;
	struct pollfd pfd = { fd, POLLRDHUP, 0 };
	int n;
	do
		n = poll(&pfd, 1, 0);
	while (n < 0 && errno == EINTR);
	return n != 0 && (n < 0 || (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)));
}

void tw__sys_shutdown_write(int fd)
{
	(void)shutdown(fd, SHUT_WR);
}

int tw__sys_close(int fd)
{
	fd_disown(fd);
	return close(fd);
}

const char *tw__strerror(int err, char *buf, size_t buflen)
{
	/* GNU strerror_r may return a static string instead of filling buf. */
	const char *s = strerror_r(err, buf, buflen);
	if (s != buf) {
		size_t n = strlen(s);
		if (n >= buflen)
			n = buflen - 1;
		memcpy(buf, s, n);
		buf[n] = '\0';
	}
	return buf;
}
