/*
 * platform.h - the one door between libtensorwire and the operating system.
 *
 * Every allocation and every socket system call the library makes goes
 * through these wrappers, so that fault points (fault.h) can make any of them
 * fail or come up short, and so that a port to another OS touches one folder.
 * The wrappers keep the system's conventions (-1 and errno, NULL) and add
 * nothing else: they must not log, retry or interpret errors - that is the
 * caller's job.
 *
 * Fault points declared here:
 *   malloc              tw__malloc/calloc/realloc return NULL
 *   sys/socket          socket() fails with EMFILE
 *   sys/accept          accept4() fails with EMFILE
 *   sys/connect         connect() fails with ECONNREFUSED
 *   sys/read/short      readv() reads at most 1 byte
 *   sys/read/fail       readv() fails with ECONNRESET
 *   sys/write/short     sendmsg() writes at most 1 byte
 *   sys/write/fail      sendmsg() fails with EPIPE
 *   sys/eintr           readv()/sendmsg()/recv() fail once with EINTR
 *   sys/peek/fail       the MSG_PEEK recv() fails with ECONNRESET
 */
#ifndef TW_PLATFORM_PLATFORM_H
#define TW_PLATFORM_PLATFORM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Linux moves at most this many bytes in one read/write call. */
#define TW_RW_MAX ((size_t)0x7ffff000)

/* ---- memory ---- */
void *tw__malloc(size_t n);                 /* n = 0 allocates 1 byte */
void *tw__calloc(size_t count, size_t size);
void *tw__realloc(void *p, size_t n);
void tw__free(void *p);
/* Copies n bytes and adds a NUL; NULL on failure. */
char *tw__memdup_str(const void *s, size_t n);

/* ---- sockets (all non-blocking and close-on-exec where they create fds) ---- */
int tw__sys_socket(int domain, int type, int protocol);
int tw__sys_bind(int fd, const struct sockaddr *addr, socklen_t len);
int tw__sys_listen(int fd, int backlog);
int tw__sys_accept(int fd, struct sockaddr *addr, socklen_t *len);
int tw__sys_connect(int fd, const struct sockaddr *addr, socklen_t len);
int tw__sys_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
int tw__sys_getsockopt(int fd, int level, int name, void *val, socklen_t *len);
int tw__sys_getsockname(int fd, struct sockaddr *addr, socklen_t *len);
int tw__sys_getpeername(int fd, struct sockaddr *addr, socklen_t *len);
ssize_t tw__sys_readv(int fd, const struct iovec *iov, int iovcnt);
/* sendmsg with MSG_NOSIGNAL: a closed peer gives EPIPE, never SIGPIPE. */
ssize_t tw__sys_writev(int fd, const struct iovec *iov, int iovcnt);
/* recv of 1 byte with MSG_PEEK | MSG_DONTWAIT: > 0 bytes are waiting, 0 the
 * peer closed with nothing left unread, -1 and errno otherwise. Consumes
 * nothing. */
ssize_t tw__sys_peek(int fd);
int tw__sys_close(int fd);

/* strerror that is safe from any thread; returns buf. */
const char *tw__strerror(int err, char *buf, size_t buflen);

#endif /* TW_PLATFORM_PLATFORM_H */
