/*
 * fault_points.h - every fault point the library declares, in one list, so
 * that TW_FAULTS can be checked against it: a rule naming a point that does
 * not exist stops the program (fault.c) instead of letting a fault run pass
 * without a single fault.
 *
 * TW_FAULT_POINTS(X) calls X(name, what firing does) once per point. A new
 * TW_FAULT_POINT("...") anywhere in the library needs its line here;
 * platform_test checks that each of these fires where it says.
 */
#ifndef TW_PLATFORM_FAULT_POINTS_H
#define TW_PLATFORM_FAULT_POINTS_H

#define TW_FAULT_POINTS(X)                                                                    \
	/* memory (platform.c) */                                                                 \
	X("malloc", "tw__malloc/calloc/realloc return NULL")                                     \
	/* sockets (platform.c) */                                                                \
	X("sys/socket", "socket() fails with EMFILE")                                            \
	X("sys/bind", "bind() fails with EADDRINUSE")                                            \
	X("sys/accept", "accept4() fails with EMFILE")                                           \
	X("sys/connect", "connect() fails with ECONNREFUSED")                                    \
	X("sys/read/short", "readv() reads at most 1 byte")                                      \
	X("sys/read/fail", "readv() fails with ECONNRESET")                                      \
	X("sys/write/short", "sendmsg() writes at most 1 byte")                                  \
	X("sys/write/fail", "sendmsg() fails with EPIPE")                                        \
	X("sys/eintr", "readv()/sendmsg()/recv() fail once with EINTR")                          \
	X("sys/peek/fail", "the MSG_PEEK recv() fails with ECONNRESET")                          \
	X("sys/peer_left", "the peer-left poll() says the peer ended its side")                  \
	/* descriptor passing (ipc.c) */                                                          \
	X("sys/fds/send", "the SCM_RIGHTS sendmsg() fails with EPIPE")                           \
	X("sys/fds/ctrunc", "the SCM_RIGHTS recvmsg() comes back with MSG_CTRUNC")               \
	/* shared memory (ipc.c) */                                                               \
	X("sys/memfd/eperm", "memfd_create() fails with EPERM (a seccomp filter)")               \
	X("sys/memfd/enosys", "memfd_create() fails with ENOSYS (an old kernel)")                \
	X("sys/tmpfile", "open(O_TMPFILE) fails with EACCES")                                    \
	X("sys/ftruncate", "ftruncate() fails with EFBIG")                                       \
	X("sys/fallocate", "fallocate() fails with ENOSPC (a full /dev/shm)")                    \
	X("sys/mmap", "mmap() fails with ENOMEM")                                                \
	X("sys/seal", "sealing a memfd's size fails with EINVAL")                                \
	/* cross-memory attach (ipc.c) */                                                         \
	X("sys/vm_readv/fail", "process_vm_readv() fails with EPERM")                            \
	X("sys/vm_readv/esrch", "process_vm_readv() fails with ESRCH (the peer process is gone)") \
	X("sys/vm_readv/short", "process_vm_readv() copies at most 1 byte")                      \
	X("sys/peer_of", "telling whose socket a peer is fails with EACCES")                     \
	/* who and where this process is (host.c) */                                              \
	X("sys/boot_id", "reading the boot id fails with ENOENT")                                \
	X("sys/ns", "stat() of /proc/self/ns/<ns> fails with ENOENT")                            \
	X("sys/read_file", "reading a small /proc or /sys file fails with EACCES")                \
	X("sys/capget", "capget() fails with EPERM")

#endif /* TW_PLATFORM_FAULT_POINTS_H */
