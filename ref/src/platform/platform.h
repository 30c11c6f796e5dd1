/*
 * platform.h - the one door between libtensorwire and the operating system.
 *
 * Every allocation and every system call the library makes (sockets,
 * descriptor passing, shared memory, cross-memory copies, and what it reads
 * about the host it runs on) goes through these wrappers, so that fault
 * points (fault.h) can make any of them fail or come up short, and so that a
 * port to another OS touches one folder.
 * The wrappers keep the system's conventions (-1 and errno, NULL) and add
 * nothing else: they must not log, retry or interpret errors - that is the
 * caller's job.
 *
 * Fault points: fault_points.h lists every one, with the errno it injects.
 */
#ifndef TW_PLATFORM_PLATFORM_H
#define TW_PLATFORM_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>

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
/* Descriptors the library holds. Every wrapper that makes one (socket,
 * accept, memfd, a /dev/shm file, descriptors received, a pidfd) records
 * it, and tw__sys_close forgets it. A child forked without exec closes
 * every one of them at once (a pthread_atfork handler): its copies of the
 * library's objects are dead (calls fail there), and its copies of their
 * sockets would otherwise keep the parent's connections open after the
 * parent died, so its peers would not notice. vfork and posix_spawn run
 * no handler and close nothing. Returns fd. */
int tw__fd_own(int fd);
/* Whether the peer of the connected stream socket fd has ended its side
 * (its FIN, a reset, an error), as the kernel knows it now, however many of
 * its bytes wait unread (poll with POLLRDHUP and no wait). Consumes
 * nothing; a failing poll reads as true. Fault point "sys/peer_left". */
bool tw__sys_peer_left(int fd);
/* Ends this side's sending on the stream socket fd at once (shutdown
 * SHUT_WR: the peer sees the end after the bytes already sent), so a
 * close that has to wait for the loop does not delay what the peer learns.
 * Errors are ignored (a socket the peer already reset). */
void tw__sys_shutdown_write(int fd);
int tw__sys_close(int fd);

/* ---- UNIX sockets and descriptor passing (ipc.c) ---- */
#define TW_ABSTRACT_NAME_MAX 107 /* sun_path less the leading NUL */
/* Fills *addr with the abstract-namespace name `name` (len bytes, no NUL
 * needed: a leading NUL is added) and *addr_len with its exact length. -1
 * with ENAMETOOLONG if it does not fit. Makes no system call. */
int tw__sockaddr_abstract(struct sockaddr_un *addr, socklen_t *addr_len, const char *name,
                          size_t len);
/* One sendmsg (MSG_NOSIGNAL) of len data bytes with nfds descriptors in one
 * SCM_RIGHTS message (nfds may be 0). Returns bytes sent or -1 and errno. */
ssize_t tw__sys_send_fds(int fd, const void *buf, size_t len, const int *fds, int nfds);
/* One recvmsg (MSG_CMSG_CLOEXEC) of up to len bytes and up to maxfds
 * descriptors, stored in fds[] with their number in *nfds_out; the caller
 * owns them. If the control data came truncated (MSG_CTRUNC: the sender
 * passed more than maxfds, or this process is out of descriptors), every
 * descriptor that did arrive is closed and the call fails with EMSGSIZE.
 * Returns bytes received (0: the peer closed) or -1 and errno. */
ssize_t tw__sys_recv_fds(int fd, void *buf, size_t len, int *fds, int maxfds, int *nfds_out);

/* ---- shared memory (ipc.c) ---- */
/* memfd_create(name, MFD_CLOEXEC), through syscall() so that a libc without
 * the wrapper still works; ENOSYS where the kernel lacks it. */
int tw__sys_memfd_create(const char *name);
/* An unnamed file in directory `dir` (open with O_TMPFILE | O_EXCL |
 * O_RDWR | O_CLOEXEC): the fallback where memfd_create is missing. */
int tw__sys_open_tmpfile(const char *dir);
int tw__sys_ftruncate(int fd, uint64_t len);
/* Reserves len bytes now, so that a full tmpfs fails here (ENOSPC) rather
 * than with SIGBUS on first touch. */
int tw__sys_fallocate(int fd, uint64_t len);
/* The size of the file behind fd (fstat), for checking received segments. */
/* Fixes a memfd's size for good (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL):
 * a peer given the descriptor can then no longer truncate the file under
 * this process's mapping (a SIGBUS on its next access). -1 and errno
 * (EINVAL: not a memfd made with sealing allowed, e.g. a /dev/shm file).
 * Fault point "sys/seal" (EINVAL). */
int tw__sys_seal_size(int fd);
int tw__sys_fd_size(int fd, uint64_t *size_out);
/* mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); NULL and errno
 * on failure (never MAP_FAILED). */
void *tw__sys_mmap_shared(int fd, size_t len);
/* Private anonymous memory of len bytes, page-aligned and zeroed (memory
 * a device registers: its own pages, so that fork protection covers
 * nothing else); NULL and errno on failure. */
void *tw__sys_mmap_private(size_t len);
int tw__sys_munmap(void *p, size_t len);

/* Cross-process wake-ups on a 32-bit word of a shared mapping (futex(2),
 * not the private variant, so that waiters in other processes are reached).
 * wait: sleeps while *addr == expected, at most timeout_ns (0: no bound);
 * returns 0 when woken or -1 and errno (EAGAIN: the word had already
 * changed; ETIMEDOUT; EINTR). wake: wakes every waiter; returns how many or
 * -1 and errno. Neither has a fault point: a lost wake-up only costs the
 * waiter its timeout, which the caller always sets. */
int tw__sys_futex_wait_shared(const uint32_t *addr, uint32_t expected, uint64_t timeout_ns);
int tw__sys_futex_wake_shared(const uint32_t *addr);

/* Names the calling thread (at most 15 characters shown), so that the
 * library's threads can be told apart in top -H, /proc and a debugger. */
void tw__sys_thread_name(const char *name);

/* ---- cross-memory attach (ipc.c) ---- */
/* process_vm_readv(pid, local, nlocal, remote, nremote, 0). Like readv it
 * may copy less than asked (a partial copy stops at an iovec boundary or a
 * fault); the caller resumes. */
ssize_t tw__sys_process_vm_readv(pid_t pid, const struct iovec *local, unsigned long nlocal,
                                 const struct iovec *remote, unsigned long nremote);

/* ---- who is at the other end of a socket (ipc.c) ---- */
/* Whether the other end of the connected socket fd is a descriptor of
 * process pid (getpid() for this very process). A UNIX socket: the peer's
 * credentials (SO_PEERCRED). TCP: the socket that pid's network namespace
 * lists (/proc/<pid>/net/tcp, tcp6) with fd's two addresses swapped must be
 * one of pid's descriptors (/proc/<pid>/fd). 1 yes; 0 no, with *why saying
 * what was found instead; -1 could not tell, with errno and *why naming the
 * call. Blocks briefly on /proc; the cost grows with the host's sockets.
 * Fault point "sys/peer_of" (EACCES). */
int tw__sys_socket_peer_of(int fd, pid_t pid, char *why, size_t why_len);
/* A descriptor that stays with process pid, whatever its number becomes
 * once it exits (pidfd_open; -1 and errno, ENOSYS before Linux 5.3), and
 * whether that process has exited (a pidfd polls readable then). */
int tw__sys_pidfd_open(pid_t pid);
bool tw__sys_pidfd_exited(int pidfd);

/* ---- who and where this process runs (host.c) ---- */
#define TW_BOOT_ID_LEN 36 /* 8-4-4-4-12 hex digits and dashes */
/* The first line of /proc/sys/kernel/random/boot_id, NUL-terminated, into
 * out (at least TW_BOOT_ID_LEN + 1 bytes); -1 and errno (EPROTO if the file
 * does not hold one). */
int tw__sys_boot_id(char *out, size_t len);
/* st_dev and st_ino of /proc/self/ns/<ns> ("pid", "ipc", "user", "mnt",
 * "net", ...): two processes share that namespace iff both are equal. */
int tw__sys_ns_id(const char *ns, uint64_t *dev_out, uint64_t *ino_out);
/* The permitted capability set of this process (capget, version 3) as
 * one 64-bit mask. */
int tw__sys_capget_permitted(uint64_t *mask_out);
/* Reads at most len - 1 bytes of a small file (procfs, sysfs) and adds a
 * NUL. Returns the byte count or -1 and errno. */
ssize_t tw__sys_read_file(const char *path, char *buf, size_t len);

/* strerror that is safe from any thread; returns buf. */
const char *tw__strerror(int err, char *buf, size_t buflen);

#endif /* TW_PLATFORM_PLATFORM_H */
