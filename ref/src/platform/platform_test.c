/*
 * platform_test.c - unit tests of the operating-system door (platform.h)
 * that same-host mechanisms stand on, and of its fault points.
 *
 *   platform_test calls   each call does what platform.h says, against the
 *                         real kernel: descriptors passed and truncated,
 *                         shared memory seen by two mappings, cross-memory
 *                         copies, abstract names, boot id and namespaces
 *   platform_test faults  (built against tw_ref_faulty) every point in
 *                         fault_points.h that the platform declares fires
 *                         with the errno it lists, in a child of its own;
 *                         a rule naming no point, or a malformed rule, stops
 *                         the program with a message instead of passing
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "platform/fault.h"
#include "platform/fault_points.h"
#include "platform/platform.h"
#include "wire/test_util.h"

static int count_open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

/* ---- the calls --------------------------------------------------------------------- */

static void test_pass_fds(void)
{
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	int before = count_open_fds();

	/* Four descriptors and 8 bytes in one message, as shm's bootstrap does. */
	int send[4];
	for (int i = 0; i < 4; i++) {
		send[i] = tw__sys_memfd_create("platform_test");
		CHECK(send[i] >= 0);
		CHECK(tw__sys_ftruncate(send[i], 4096u * (unsigned)(i + 1)) == 0);
	}
	const uint8_t data[8] = { 1, 0, 0, 0, 2, 0, 0, 0 };
	CHECK(tw__sys_send_fds(sv[0], data, sizeof(data), send, 4) == 8);
	uint8_t got[8];
	int fds[4] = { -1, -1, -1, -1 }, nfds = -1;
	CHECK(tw__sys_recv_fds(sv[1], got, sizeof(got), fds, 4, &nfds) == 8);
	CHECK(nfds == 4 && memcmp(got, data, 8) == 0);
	for (int i = 0; i < 4 && i < nfds; i++) {
		uint64_t size = 0;
		CHECK(tw__sys_fd_size(fds[i], &size) == 0);
		CHECKF(size == 4096u * (unsigned)(i + 1), "fd %d: size %llu", i, (unsigned long long)size);
		CHECK((fcntl(fds[i], F_GETFD) & FD_CLOEXEC) != 0);
		tw__sys_close(fds[i]);
	}

	/* More descriptors than the receiver asked for: MSG_CTRUNC, reported as
	 * EMSGSIZE, and none of them left open in this process. */
	CHECK(tw__sys_send_fds(sv[0], data, sizeof(data), send, 4) == 8);
	errno = 0;
	CHECK(tw__sys_recv_fds(sv[1], got, sizeof(got), fds, 2, &nfds) == -1);
	CHECKF(errno == EMSGSIZE, "errno %d", errno);
	CHECK(nfds == 0);
	for (int i = 0; i < 4; i++)
		tw__sys_close(send[i]);
	CHECKF(count_open_fds() == before, "open fds %d, before %d", count_open_fds(), before);

	/* No descriptors at all, and the peer's close. */
	CHECK(tw__sys_send_fds(sv[0], "x", 1, NULL, 0) == 1);
	CHECK(tw__sys_recv_fds(sv[1], got, sizeof(got), fds, 4, &nfds) == 1 && nfds == 0);
	close(sv[0]);
	CHECK(tw__sys_recv_fds(sv[1], got, sizeof(got), fds, 4, &nfds) == 0 && nfds == 0);
	close(sv[1]);

	/* Bad counts are refused before any system call. */
	errno = 0;
	CHECK(tw__sys_send_fds(-1, data, 1, send, 9) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(tw__sys_recv_fds(-1, got, 1, fds, -1, &nfds) == -1 && errno == EINVAL);
}

static void test_shared_memory(void)
{
	const size_t len = 2u << 20;
	int fd = tw__sys_memfd_create("platform_test");
	CHECK(fd >= 0);
	CHECK(tw__sys_fallocate(fd, len) == 0);
	uint64_t size = 0;
	CHECK(tw__sys_fd_size(fd, &size) == 0 && size == len);
	uint8_t *a = tw__sys_mmap_shared(fd, len);
	uint8_t *b = tw__sys_mmap_shared(fd, len);
	CHECK(a && b && a != b);
	if (a && b) {
		a[0] = 0x5a;
		a[len - 1] = 0xa5;
		CHECK(b[0] == 0x5a && b[len - 1] == 0xa5);
	}
	CHECK(tw__sys_munmap(a, len) == 0 && tw__sys_munmap(b, len) == 0);
	tw__sys_close(fd);

	/* The fallback where memfd_create is missing: an unnamed file in a
	 * tmpfs directory. */
	fd = tw__sys_open_tmpfile("/dev/shm");
	if (fd < 0) {
		printf("# /dev/shm O_TMPFILE: %s (not checked here)\n", strerror(errno));
	} else {
		CHECK(tw__sys_ftruncate(fd, 4096) == 0);
		CHECK(tw__sys_fd_size(fd, &size) == 0 && size == 4096);
		tw__sys_close(fd);
	}
	errno = 0;
	CHECK(tw__sys_mmap_shared(-1, 4096) == NULL && errno == EBADF);
}

static void test_vm_readv(void)
{
	static char src[100000];
	static char dst[100000];
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (char)(i * 7 + 3);
	struct iovec l[2] = { { dst, 60000 }, { dst + 60000, 40000 } };
	struct iovec r = { src, sizeof(src) };
	CHECK(tw__sys_process_vm_readv(getpid(), l, 2, &r, 1) == (ssize_t)sizeof(src));
	CHECK(memcmp(src, dst, sizeof(src)) == 0);
	/* A remote range that is not mapped: EFAULT, nothing copied. */
	struct iovec bad = { (void *)8, 16 };
	errno = 0;
	CHECK(tw__sys_process_vm_readv(getpid(), l, 1, &bad, 1) == -1 && errno == EFAULT);
}

static void test_abstract(void)
{
	struct sockaddr_un a;
	socklen_t alen;
	char name[64];
	int n = snprintf(name, sizeof(name), "tensorwire-platform-test-%d", (int)getpid());
	CHECK(tw__sockaddr_abstract(&a, &alen, name, (size_t)n) == 0);
	CHECK(a.sun_path[0] == '\0' && memcmp(a.sun_path + 1, name, (size_t)n) == 0);
	int l = tw__sys_socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(l >= 0 && tw__sys_bind(l, (struct sockaddr *)&a, alen) == 0);
	CHECK(tw__sys_listen(l, 4) == 0);
	/* The name is taken now. */
	int l2 = tw__sys_socket(AF_UNIX, SOCK_STREAM, 0);
	errno = 0;
	CHECK(tw__sys_bind(l2, (struct sockaddr *)&a, alen) == -1 && errno == EADDRINUSE);
	tw__sys_close(l2);
	int c = tw__sys_socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(tw__sys_connect(c, (struct sockaddr *)&a, alen) == 0);
	struct sockaddr_un back;
	socklen_t blen = sizeof(back);
	CHECK(tw__sys_getpeername(c, (struct sockaddr *)&back, &blen) == 0);
	CHECK(blen == alen && memcmp(&back, &a, alen) == 0);
	tw__sys_close(c);
	tw__sys_close(l);

	char longname[200];
	memset(longname, 'x', sizeof(longname));
	errno = 0;
	CHECK(tw__sockaddr_abstract(&a, &alen, longname, TW_ABSTRACT_NAME_MAX) == 0);
	CHECK(tw__sockaddr_abstract(&a, &alen, longname, TW_ABSTRACT_NAME_MAX + 1) == -1 &&
	      errno == ENAMETOOLONG);
}

/* A TCP connection over loopback (v4 or v6): *a connects, *b accepted. */
static bool tcp_pair(int family, int *a, int *b)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	socklen_t len;
	if (family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		len = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_addr = in6addr_loopback;
		len = sizeof(*in6);
	}
	int l = socket(family, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&ss, len) != 0 || listen(l, 4) != 0 ||
	    getsockname(l, (struct sockaddr *)&ss, &len) != 0) {
		if (l >= 0)
			close(l);
		return false;
	}
	*a = socket(family, SOCK_STREAM, 0);
	bool ok = *a >= 0 && connect(*a, (struct sockaddr *)&ss, len) == 0 &&
	          (*b = accept(l, NULL, NULL)) >= 0;
	close(l);
	return ok;
}

/* tw__sys_socket_peer_of: a UNIX pair and TCP connections inside this
 * process are ours; the end a forked child holds alone is the child's. */
static void test_peer_of(void)
{
	char why[256] = "";
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECKF(tw__sys_socket_peer_of(sv[0], getpid(), why, sizeof(why)) == 1, "unix: %s", why);
	CHECK(tw__sys_socket_peer_of(sv[0], getpid() + 1, why, sizeof(why)) == 0);
	CHECKF(strstr(why, "UNIX socket's peer is process"), "%s", why);
	close(sv[0]);
	close(sv[1]);
	static const int families[] = { AF_INET, AF_INET6 };
	for (size_t i = 0; i < 2; i++) {
		int a = -1, b = -1;
		if (!tcp_pair(families[i], &a, &b)) {
			CHECKF(families[i] == AF_INET6, "no IPv4 loopback connection: %s", strerror(errno));
			printf("# no IPv6 loopback here: %s\n", strerror(errno));
			continue;
		}
		CHECKF(tw__sys_socket_peer_of(a, getpid(), why, sizeof(why)) == 1, "tcp %zu: %s", i,
		       why);
		CHECKF(tw__sys_socket_peer_of(b, getpid(), why, sizeof(why)) == 1, "tcp %zu: %s", i,
		       why);
		/* b goes to a child alone: a's peer is then the child's, not ours */
		int go[2];
		CHECK(pipe(go) == 0);
		pid_t child = fork();
		if (child == 0) {
			char x;
			close(go[1]);
			(void)!read(go[0], &x, 1);
			_exit(0);
		}
		close(b);
		close(go[0]);
		CHECK(tw__sys_socket_peer_of(a, getpid(), why, sizeof(why)) == 0);
		CHECKF(strstr(why, "is not a descriptor of process"), "%s", why);
		CHECKF(tw__sys_socket_peer_of(a, child, why, sizeof(why)) == 1, "child: %s", why);
		close(go[1]);
		int st;
		CHECK(waitpid(child, &st, 0) == child);
		close(a);
	}
	/* not connected: cannot tell */
	int u = socket(AF_INET, SOCK_STREAM, 0);
	errno = 0;
	CHECK(tw__sys_socket_peer_of(u, getpid(), why, sizeof(why)) == -1 && errno == ENOTCONN);
	CHECKF(strstr(why, "getpeername"), "%s", why);
	close(u);
}

static void test_host(void)
{
	char id[TW_BOOT_ID_LEN + 1], again[TW_BOOT_ID_LEN + 1];
	CHECK(tw__sys_boot_id(id, sizeof(id)) == 0);
	CHECK(strlen(id) == TW_BOOT_ID_LEN && id[8] == '-' && id[13] == '-');
	CHECK(tw__sys_boot_id(again, sizeof(again)) == 0 && strcmp(id, again) == 0);
	errno = 0;
	CHECK(tw__sys_boot_id(id, TW_BOOT_ID_LEN) == -1 && errno == EINVAL);

	uint64_t dev, ino, dev2, ino2;
	const char *nss[] = { "pid", "ipc", "user", "mnt", "net" };
	for (size_t i = 0; i < sizeof(nss) / sizeof(nss[0]); i++) {
		CHECKF(tw__sys_ns_id(nss[i], &dev, &ino) == 0, "ns %s: %s", nss[i], strerror(errno));
		struct stat st;
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/ns/%s", nss[i]);
		CHECK(stat(path, &st) == 0 && (uint64_t)st.st_ino == ino && (uint64_t)st.st_dev == dev);
	}
	/* A child shares them; different namespaces differ (pid vs net). */
	CHECK(tw__sys_ns_id("pid", &dev, &ino) == 0 && tw__sys_ns_id("net", &dev2, &ino2) == 0);
	CHECK(ino != ino2);
	errno = 0;
	CHECK(tw__sys_ns_id("no-such-namespace", &dev, &ino) == -1 && errno == ENOENT);

	char buf[8];
	CHECK(tw__sys_read_file("/proc/sys/kernel/random/boot_id", buf, sizeof(buf)) == 7);
	CHECK(strlen(buf) == 7 && memcmp(buf, id, 7) == 0);
	errno = 0;
	CHECK(tw__sys_read_file("/proc/no-such-file", buf, sizeof(buf)) == -1 && errno == ENOENT);
}

/* ---- the fault points -------------------------------------------------------------- */

/* Runs `fn` in a child with TW_FAULTS=`rule`; returns its wait status. The
 * child's stderr goes to /dev/null if `quiet`. */
static int in_child(const char *rule, int (*fn)(const char *), const char *point, bool quiet)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("TW_FAULTS", rule, 1);
		if (quiet)
			(void)!freopen("/dev/null", "w", stderr);
		_exit(fn(point));
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return status;
}

/* Exit codes of a fault child. */
enum { FIRED = 0, NOT_FIRED = 1, WRONG = 2 };

/* Exercises the call behind `point` once and says whether it failed the
 * way fault_points.h lists. */
static int trigger(const char *point)
{
	int sv[2]; /* non-blocking: a call the rule lets through must not wait */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
		return WRONG;
	char buf[16] = "0123456789";
	struct iovec iov = { buf, 10 };
	int fds[4], nfds;
	unsigned long before = tw__fault_fired();
	int want = 0;
	bool failed = false; /* the call reported failure (or came up short) */
	int err = 0;

#define FAILS(expr, e)                   \
	do {                                     \
		errno = 0;                           \
		failed = (expr);                     \
		err = errno;                         \
		want = (e);                          \
	} while (0)

	if (!strcmp(point, "malloc")) {
		void *p = tw__malloc(10);
		failed = p == NULL;
		free(p);
	} else if (!strcmp(point, "sys/socket")) {
		FAILS(tw__sys_socket(AF_UNIX, SOCK_STREAM, 0) < 0, EMFILE);
	} else if (!strcmp(point, "sys/bind")) {
		struct sockaddr_un a;
		socklen_t alen;
		tw__sockaddr_abstract(&a, &alen, "tw-platform-test-bind", 21);
		FAILS(tw__sys_bind(sv[0], (struct sockaddr *)&a, alen) < 0, EADDRINUSE);
	} else if (!strcmp(point, "sys/accept")) {
		FAILS(tw__sys_accept(sv[0], NULL, NULL) < 0, EMFILE);
	} else if (!strcmp(point, "sys/connect")) {
		struct sockaddr_un a;
		socklen_t alen;
		tw__sockaddr_abstract(&a, &alen, "tw-platform-test-conn", 21);
		FAILS(tw__sys_connect(sv[0], (struct sockaddr *)&a, alen) < 0, ECONNREFUSED);
	} else if (!strcmp(point, "sys/read/short")) {
		(void)!write(sv[1], buf, 10);
		failed = tw__sys_readv(sv[0], &iov, 1) == 1;
	} else if (!strcmp(point, "sys/read/fail")) {
		FAILS(tw__sys_readv(sv[0], &iov, 1) < 0, ECONNRESET);
	} else if (!strcmp(point, "sys/write/short")) {
		failed = tw__sys_writev(sv[0], &iov, 1) == 1;
	} else if (!strcmp(point, "sys/write/fail")) {
		FAILS(tw__sys_writev(sv[0], &iov, 1) < 0, EPIPE);
	} else if (!strcmp(point, "sys/eintr")) {
		FAILS(tw__sys_writev(sv[0], &iov, 1) < 0, EINTR);
	} else if (!strcmp(point, "sys/peek/fail")) {
		FAILS(tw__sys_peek(sv[0]) < 0, ECONNRESET);
	} else if (!strcmp(point, "sys/peer_left")) {
		failed = tw__sys_peer_left(sv[0]); /* sv[1] is open: not left */
	} else if (!strcmp(point, "sys/fds/send")) {
		FAILS(tw__sys_send_fds(sv[0], buf, 1, &sv[1], 1) < 0, EPIPE);
	} else if (!strcmp(point, "sys/fds/ctrunc")) {
		(void)!write(sv[1], buf, 1);
		FAILS(tw__sys_recv_fds(sv[0], buf, 1, fds, 4, &nfds) < 0, EMSGSIZE);
	} else if (!strcmp(point, "sys/memfd/eperm")) {
		FAILS(tw__sys_memfd_create("t") < 0, EPERM);
	} else if (!strcmp(point, "sys/memfd/enosys")) {
		FAILS(tw__sys_memfd_create("t") < 0, ENOSYS);
	} else if (!strcmp(point, "sys/tmpfile")) {
		FAILS(tw__sys_open_tmpfile("/tmp") < 0, EACCES);
	} else if (!strcmp(point, "sys/ftruncate")) {
		FAILS(tw__sys_ftruncate(sv[0], 1) < 0, EFBIG);
	} else if (!strcmp(point, "sys/fallocate")) {
		FAILS(tw__sys_fallocate(sv[0], 1) < 0, ENOSPC);
	} else if (!strcmp(point, "sys/mmap")) {
		FAILS(tw__sys_mmap_shared(sv[0], 4096) == NULL, ENOMEM);
	} else if (!strcmp(point, "sys/vm_readv/fail")) {
		struct iovec r = { buf + 10, 4 };
		FAILS(tw__sys_process_vm_readv(getpid(), &iov, 1, &r, 1) < 0, EPERM);
	} else if (!strcmp(point, "sys/vm_readv/esrch")) {
		struct iovec r = { buf + 10, 4 };
		FAILS(tw__sys_process_vm_readv(getpid(), &iov, 1, &r, 1) < 0, ESRCH);
	} else if (!strcmp(point, "sys/vm_readv/short")) {
		struct iovec r = { buf + 10, 4 };
		failed = tw__sys_process_vm_readv(getpid(), &iov, 1, &r, 1) == 1;
	} else if (!strcmp(point, "sys/seal")) {
		int m = tw__sys_memfd_create("t");
		FAILS(tw__sys_seal_size(m) < 0, EINVAL);
		tw__sys_close(m);
	} else if (!strcmp(point, "sys/peer_of")) {
		char why[256];
		FAILS(tw__sys_socket_peer_of(sv[0], getpid(), why, sizeof(why)) < 0, EACCES);
	} else if (!strcmp(point, "sys/boot_id")) {
		char id[TW_BOOT_ID_LEN + 1];
		FAILS(tw__sys_boot_id(id, sizeof(id)) < 0, ENOENT);
	} else if (!strcmp(point, "sys/ns")) {
		uint64_t d, i;
		FAILS(tw__sys_ns_id("net", &d, &i) < 0, ENOENT);
	} else if (!strcmp(point, "sys/capget")) {
		uint64_t caps;
		FAILS(tw__sys_capget_permitted(&caps) < 0, EPERM);
	} else if (!strcmp(point, "sys/read_file")) {
		FAILS(tw__sys_read_file("/proc/self/stat", buf, sizeof(buf)) < 0, EACCES);
	} else {
		printf("not ok - no trigger for fault point %s: add one to platform_test.c\n", point);
		return WRONG;
	}
#undef FAILS
	if (tw__fault_fired() == before)
		return NOT_FIRED;
	if (!failed || (want && err != want)) {
		printf("not ok - %s fired but the call gave errno %d, not %d\n", point, err, want);
		return WRONG;
	}
	return FIRED;
}

static int touch_malloc(const char *unused)
{
	(void)unused;
	free(tw__malloc(1));
	return 0;
}

static void test_faults(void)
{
	/* This build must have its points compiled in (tw_ref_faulty). */
	int first = in_child("malloc:1", trigger, "malloc", false);
	CHECKF(WIFEXITED(first) && WEXITSTATUS(first) == FIRED,
	       "malloc:1 did not fire: built without TW_FAULT_INJECTION? (status 0x%x)", first);
	/* Every listed point that belongs to the platform fires as it says. */
#define TW_CHECK_POINT(name, what)                                                             \
	do {                                                                                   \
		char rule[80];                                                                 \
		snprintf(rule, sizeof(rule), "%s:1", name);                                     \
		int st = in_child(rule, trigger, name, false);                                  \
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == FIRED, "%s (%s): status 0x%x", name,  \
		       what, st);                                                              \
		snprintf(rule, sizeof(rule), "%s:2", name);                                     \
		st = in_child(rule, trigger, name, false);                                      \
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == NOT_FIRED, "%s:2 fired on hit 1", name); \
	} while (0);
	TW_FAULT_POINTS(TW_CHECK_POINT)
#undef TW_CHECK_POINT

	/* A rule that would inject nothing is an error, not a quiet pass. */
	const char *bad[] = { "sys/raed/short:1", "malloc", "malloc:0", "malloc:x", "malloc:1x",
		              "malloc:1,nope:2" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int st = in_child(bad[i], touch_malloc, NULL, true);
		CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "TW_FAULTS=%s: status 0x%x", bad[i],
		       st);
	}
	CHECK(tw__fault_point_known("sys/read/short") && !tw__fault_point_known("tcp/read/short"));
	/* Well-formed rules still parse: several points, "+" for every later hit. */
	int st = in_child("sys/socket:3,malloc:1+", trigger, "malloc", false);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == FIRED);
}

/* tw__sys_peer_left: false while the peer's side is open, true once it
 * shut down its sending side (tw__sys_shutdown_write) even with its bytes
 * unread, and once it closed; TCP and UNIX alike. */
static void test_peer_left(void)
{
	int a = -1, b = -1, sv[2];
	CHECK(tcp_pair(AF_INET, &a, &b));
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	int rd[2] = { a, sv[0] }, wr[2] = { b, sv[1] };
	for (int i = 0; i < 2; i++) {
		CHECKF(!tw__sys_peer_left(rd[i]), "pair %d: open, yet left", i);
		CHECK(write(wr[i], "xyz", 3) == 3);
		CHECKF(!tw__sys_peer_left(rd[i]), "pair %d: bytes waiting, yet left", i);
		tw__sys_shutdown_write(wr[i]);
		for (int k = 0; k < 100 && !tw__sys_peer_left(rd[i]); k++)
			usleep(1000);
		CHECKF(tw__sys_peer_left(rd[i]), "pair %d: shut down with 3 bytes unread, not left", i);
		CHECK(tw__sys_peek(rd[i]) == 1); /* nothing consumed */
		close(wr[i]);
		CHECK(tw__sys_peer_left(rd[i]));
		close(rd[i]);
	}
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "calls";
	if (!strcmp(what, "calls")) {
		test_pass_fds();
		test_shared_memory();
		test_vm_readv();
		test_abstract();
		test_host();
		test_peer_of();
		test_peer_left();
	} else if (!strcmp(what, "faults")) {
		test_faults();
	} else {
		fprintf(stderr, "usage: %s calls|faults\n", argv[0]);
		return 2;
	}
	return tw_test_done(what);
}
