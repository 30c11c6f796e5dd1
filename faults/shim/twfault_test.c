/*
 * twfault_test.c - unit test of libtwfault with the shim compiled into this
 * program (so the sanitizer of the build, ASan or TSan, instruments the
 * shim's own code): every fault mode on real sockets, that other fds are
 * never touched, determinism from the seed, and many threads at once.
 *
 * What it checks is what a user of the shim relies on: a short transfer is
 * short and loses nothing, a reset reaches the peer as a reset, EMFILE
 * leaves the connection queued, truncated descriptors are closed (no leak),
 * and the counters say what was injected.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <dirent.h>

#include "config.h"
#include "twfault.h"

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			printf("not ok - %s:%d: %s (errno %d %s)\n", __FILE__, __LINE__, \
			       #cond, errno, strerror(errno));                       \
			failures++;                                                  \
		}                                                                    \
	} while (0)

static void configure(const char *spec)
{
	char err[256];
	if (twfault_configure(spec, err, sizeof(err)) != 0) {
		printf("not ok - twfault_configure(%s): %s\n", spec, err);
		failures++;
	}
}

static twfault_counters counters(void)
{
	twfault_counters c;
	twfault_get_counters(&c);
	return c;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(twf_mix64(seed + i / 8) >> (8 * (i % 8)));
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	(void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* A connected TCP pair over loopback: *c from connect, *s from accept. */
static int tcp_pair(int *c, int *s)
{
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 8) ||
	    getsockname(l, (struct sockaddr *)&a, &al))
		return -1;
	*c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*c < 0 || connect(*c, (struct sockaddr *)&a, sizeof(a)))
		return -1;
	do
		*s = accept(l, NULL, NULL);
	while (*s < 0 && errno == EINTR);
	close(l);
	return *s < 0 ? -1 : 0;
}

/* Moves n bytes from wfd to rfd (both non-blocking) through whichever call
 * `how` names, retrying EINTR and EAGAIN as a correct program must; returns
 * the largest single transfer seen, or -1 on an error. */
enum how { HOW_RW, HOW_V, HOW_SR, HOW_MSG };

static ssize_t pump(int wfd, int rfd, const uint8_t *src, uint8_t *dst, size_t n, enum how how)
{
	size_t sent = 0, got = 0;
	ssize_t biggest = 0;
	while (got < n) {
		if (sent < n) {
			size_t want = n - sent;
			ssize_t w;
			struct iovec iov[3];
			size_t third = want / 3;
			iov[0] = (struct iovec){(void *)(src + sent), third};
			iov[1] = (struct iovec){(void *)(src + sent + third), third};
			iov[2] = (struct iovec){(void *)(src + sent + 2 * third), want - 2 * third};
			struct msghdr m = {.msg_iov = iov, .msg_iovlen = 3};
			switch (how) {
			case HOW_RW: w = write(wfd, src + sent, want); break;
			case HOW_V: w = writev(wfd, iov, 3); break;
			case HOW_SR: w = send(wfd, src + sent, want, MSG_NOSIGNAL); break;
			default: w = sendmsg(wfd, &m, MSG_NOSIGNAL); break;
			}
			if (w > 0) {
				sent += (size_t)w;
				biggest = w > biggest ? w : biggest;
			} else if (w < 0 && errno != EINTR && errno != EAGAIN) {
				return -1;
			}
		}
		size_t room = n - got;
		ssize_t r;
		struct iovec iov[2] = {{dst + got, room / 2}, {dst + got + room / 2, room - room / 2}};
		struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
		switch (how) {
		case HOW_RW: r = read(rfd, dst + got, room); break;
		case HOW_V: r = readv(rfd, iov, 2); break;
		case HOW_SR: r = recv(rfd, dst + got, room, 0); break;
		default: r = recvmsg(rfd, &m, 0); break;
		}
		if (r > 0) {
			got += (size_t)r;
			biggest = r > biggest ? r : biggest;
		} else if (r == 0) {
			return -1;
		} else if (errno == EAGAIN) {
			struct pollfd p[2] = {{rfd, POLLIN, 0}, {wfd, sent < n ? POLLOUT : 0, 0}};
			(void)poll(p, 2, 1000);
		} else if (errno != EINTR) {
			return -1;
		}
	}
	return biggest;
}

static void test_no_faults(void)
{
	configure("");
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	set_nonblock(sv[0]);
	set_nonblock(sv[1]);
	static uint8_t a[300000], b[300000];
	fill(a, sizeof(a), 1);
	CHECK(pump(sv[0], sv[1], a, b, sizeof(a), HOW_RW) > 4093);
	CHECK(memcmp(a, b, sizeof(a)) == 0);
	twfault_counters c = counters();
	CHECK(c.calls > 0 && c.shorts == 0 && c.eintrs == 0 && c.eagains == 0);
	CHECK(c.bytes_in == sizeof(a) && c.bytes_out == sizeof(a));
	close(sv[0]);
	close(sv[1]);
}

static void test_short(void)
{
	static uint8_t a[1 << 20], b[1 << 20];
	fill(a, sizeof(a), 2);
	for (int how = HOW_RW; how <= HOW_MSG; how++) {
		configure("short=4093");
		int c, s;
		CHECK(tcp_pair(&c, &s) == 0);
		set_nonblock(c);
		set_nonblock(s);
		memset(b, 0, sizeof(b));
		ssize_t big = pump(c, s, a, b, sizeof(a), (enum how)how);
		CHECK(big > 0 && big <= 4093);
		CHECK(memcmp(a, b, sizeof(a)) == 0);
		twfault_counters n = counters();
		CHECK(n.shorts >= 2 * (sizeof(a) / 4093) - 2);
		CHECK(n.bytes_in == sizeof(a) && n.bytes_out == sizeof(a));
		CHECK(n.connections == 2);
		close(c);
		close(s);
	}
	/* a random cap in a range, the same sequence for the same seed */
	size_t seq[2][64];
	for (int round = 0; round < 2; round++) {
		configure("short=1-100,seed=42");
		int sv[2];
		CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
		for (int i = 0; i < 64; i++) {
			ssize_t w = write(sv[0], a, 1000);
			CHECK(w >= 1 && w <= 100);
			seq[round][i] = w > 0 ? (size_t)w : 0;
			char sink[100];
			CHECK(read(sv[1], sink, sizeof(sink)) > 0 || true);
		}
		close(sv[0]);
		close(sv[1]);
	}
	CHECK(memcmp(seq[0], seq[1], sizeof(seq[0])) == 0);
	bool varied = false;
	for (int i = 1; i < 64; i++)
		varied |= seq[0][i] != seq[0][0];
	CHECK(varied);
}

static void test_eintr_eagain(void)
{
	configure("eintr=1");
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	errno = 0;
	CHECK(write(sv[0], "x", 1) == -1 && errno == EINTR);
	CHECK(send(sv[0], "x", 1, 0) == -1 && errno == EINTR);
	char ch;
	CHECK(read(sv[1], &ch, 1) == -1 && errno == EINTR);
	CHECK(counters().eintrs == 3);

	/* EAGAIN only where the kernel could answer it: non-blocking fds */
	configure("eagain=1");
	CHECK(write(sv[0], "y", 1) == 1); /* blocking socket: never EAGAIN */
	CHECK(read(sv[1], &ch, 1) == 1 && ch == 'y');
	CHECK(send(sv[0], "z", 1, MSG_DONTWAIT) == -1 && errno == EAGAIN);
	set_nonblock(sv[0]);
	CHECK(write(sv[0], "z", 1) == -1 && errno == EAGAIN);
	CHECK(counters().eagains == 2);

	/* with chances below one, a correct retry loop loses nothing */
	configure("eintr=0.3,eagain=0.3,short=1-3000,seed=9");
	set_nonblock(sv[1]);
	static uint8_t a[200000], b[200000];
	fill(a, sizeof(a), 3);
	CHECK(pump(sv[0], sv[1], a, b, sizeof(a), HOW_V) > 0);
	CHECK(memcmp(a, b, sizeof(a)) == 0);
	twfault_counters n = counters();
	CHECK(n.eintrs > 10 && n.eagains > 10 && n.shorts > 10);
	close(sv[0]);
	close(sv[1]);
}

static void test_other_fds_untouched(void)
{
	configure("eintr=1,eagain=1,short=1,failcall=1");
	int p[2];
	CHECK(pipe(p) == 0);
	CHECK(write(p[1], "hello", 5) == 5);
	char buf[8];
	CHECK(read(p[0], buf, sizeof(buf)) == 5);
	int ev = eventfd(0, EFD_NONBLOCK);
	uint64_t one = 1;
	CHECK(write(ev, &one, sizeof(one)) == sizeof(one));
	CHECK(read(ev, &one, sizeof(one)) == sizeof(one));
	close(ev);
	/* a socket closed behind the shim's back (libuv closes with
	 * syscall(SYS_close)) whose number a pipe reuses */
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(write(sv[0], "q", 1) == -1 && errno == ECONNRESET); /* failcall=1 */
	int num = sv[0];
	CHECK(syscall(SYS_close, num) == 0);
	close(p[0]);
	close(p[1]);
	CHECK(pipe(p) == 0);
	int moved = p[1] == num ? p[1] : dup2(p[1], num);
	CHECK(moved == num);
	CHECK(write(num, "abc", 3) == 3);
	CHECK(read(p[0], buf, sizeof(buf)) == 3);
	twfault_counters c = counters();
	CHECK(c.calls == 1 && c.eintrs == 0 && c.eagains == 0 && c.shorts == 0);
	if (p[1] != num)
		close(p[1]);
	close(num);
	close(p[0]);
	close(sv[1]);
}

static void test_reset(void)
{
	/* first connection to reach 1000 bytes: the writer sees its last
	 * bytes go, then ECONNRESET, then EPIPE; the peer a real reset */
	configure("reset=1000");
	int c, s;
	CHECK(tcp_pair(&c, &s) == 0);
	static uint8_t a[5000];
	fill(a, sizeof(a), 4);
	CHECK(write(c, a, 600) == 600);
	CHECK(write(c, a + 600, 600) == 400);
	errno = 0;
	CHECK(write(c, a + 1000, 100) == -1 && errno == ECONNRESET);
	CHECK(send(c, a, 10, MSG_NOSIGNAL) == -1 && errno == EPIPE);
	char buf[2000];
	CHECK(read(c, buf, 10) == 0);
	ssize_t r;
	size_t got = 0;
	errno = 0;
	while ((r = read(s, buf, sizeof(buf))) > 0)
		got += (size_t)r;
	/* the RST may overtake bytes the peer had not read yet */
	CHECK(r == -1 && errno == ECONNRESET);
	CHECK(got <= 1000);
	CHECK(counters().resets == 1);
	close(c);
	close(s);

	/* once per process: a later connection is left alone */
	int c2, s2;
	CHECK(tcp_pair(&c2, &s2) == 0);
	CHECK(write(c2, a, 2000) == 2000);
	CHECK(counters().resets == 1);
	close(c2);
	close(s2);

	/* connection numbers: connect is 1, its accepted end 2 */
	configure("reset=2:10");
	CHECK(tcp_pair(&c, &s) == 0);
	CHECK(write(c, a, 100) == 100);
	CHECK(read(s, buf, 100) == 10);
	CHECK(read(s, buf, 100) == -1 && errno == ECONNRESET);
	CHECK(read(s, buf, 100) == 0);
	CHECK(counters().resets == 1 && counters().connections == 2);
	close(c);
	close(s);
}

static void test_emfile(void)
{
	configure("emfile=1");
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	CHECK(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 8) == 0);
	CHECK(getsockname(l, (struct sockaddr *)&a, &al) == 0);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(connect(c, (struct sockaddr *)&a, sizeof(a)) == 0);
	errno = 0;
	CHECK(accept(l, NULL, NULL) == -1 && errno == EMFILE);
	int s = accept4(l, NULL, NULL, SOCK_CLOEXEC); /* still queued */
	CHECK(s >= 0);
	CHECK(write(c, "ok", 2) == 2);
	char buf[4];
	CHECK(read(s, buf, sizeof(buf)) == 2);
	CHECK(counters().emfiles == 1 && counters().accepts == 2);
	close(s);
	close(c);
	close(l);
}

static int count_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static int send_fd(int sock, int fd)
{
	char c = 'F';
	struct iovec iov = {&c, 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
	                   .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(int));
	return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

/* Returns the received fd, -2 when the message came with MSG_CTRUNC and no
 * fd, -1 on error. */
static int recv_fd(int sock)
{
	char c;
	struct iovec iov = {&c, 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
	                   .msg_controllen = sizeof(u.buf)};
	if (recvmsg(sock, &m, 0) != 1)
		return -1;
	if (m.msg_flags & MSG_CTRUNC)
		return m.msg_controllen == 0 ? -2 : -1;
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	if (!h || h->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(h), sizeof(int));
	return fd;
}

static void test_ctrunc(void)
{
	configure("ctrunc=1");
	int sv[2], p[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(pipe(p) == 0);
	int before = count_fds();
	CHECK(send_fd(sv[0], p[0]) == 0);
	CHECK(recv_fd(sv[1]) == -2);
	CHECK(count_fds() == before); /* the truncated descriptor was closed */
	CHECK(send_fd(sv[0], p[0]) == 0);
	int got = recv_fd(sv[1]); /* only the first one is truncated */
	CHECK(got >= 0);
	if (got >= 0) {
		CHECK(write(p[1], "!", 1) == 1);
		char ch = 0;
		CHECK(read(got, &ch, 1) == 1 && ch == '!');
		close(got);
	}
	CHECK(counters().ctruncs == 1);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

static void test_failcall(void)
{
	/* transfers: ECONNRESET, and the peer hears a reset */
	configure("failcall=3");
	int c, s;
	CHECK(tcp_pair(&c, &s) == 0); /* call 1: connect; accept: 2 */
	CHECK(counters().calls == 2);
	errno = 0;
	CHECK(write(c, "abc", 3) == -1 && errno == ECONNRESET);
	char buf[8];
	errno = 0;
	ssize_t r = read(s, buf, sizeof(buf));
	CHECK(r == -1 && errno == ECONNRESET);
	CHECK(counters().failcalls == 1);
	close(c);
	close(s);

	/* accept: ECONNABORTED, and the connection it took is reset */
	configure("failcall=2");
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	CHECK(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 8) == 0);
	CHECK(getsockname(l, (struct sockaddr *)&a, &al) == 0);
	c = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(connect(c, (struct sockaddr *)&a, sizeof(a)) == 0); /* call 1 */
	errno = 0;
	CHECK(accept(l, NULL, NULL) == -1 && errno == ECONNABORTED); /* call 2 */
	struct pollfd pf = {c, POLLIN, 0};
	CHECK(poll(&pf, 1, 2000) == 1);
	errno = 0;
	r = read(c, buf, sizeof(buf));
	CHECK(r == -1 && errno == ECONNRESET);
	close(c);

	/* an accept with nothing queued cannot fail that way: it answers
	 * EAGAIN and the fault stays due for the next call that can */
	configure("failcall=1");
	set_nonblock(l);
	errno = 0;
	CHECK(accept(l, NULL, NULL) == -1 && errno == EAGAIN); /* call 1: nothing queued */
	CHECK(counters().failcalls == 0);
	c = socket(AF_INET, SOCK_STREAM, 0);
	errno = 0;
	CHECK(connect(c, (struct sockaddr *)&a, sizeof(a)) == -1 && errno == ECONNREFUSED);
	CHECK(counters().failcalls == 1);
	close(c);
	c = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(connect(c, (struct sockaddr *)&a, sizeof(a)) == 0); /* once only */
	CHECK(counters().failcalls == 1);
	close(c);
	int fl = fcntl(l, F_GETFL);
	(void)fcntl(l, F_SETFL, fl & ~O_NONBLOCK);

	/* connect: ECONNREFUSED */
	configure("failcall=1");
	c = socket(AF_INET, SOCK_STREAM, 0);
	errno = 0;
	CHECK(connect(c, (struct sockaddr *)&a, sizeof(a)) == -1 && errno == ECONNREFUSED);
	CHECK(counters().failcalls == 1);
	close(c);
	close(l);
}

static void test_process_vm(void)
{
	configure("short=100");
	static uint8_t a[10000], b[10000];
	fill(a, sizeof(a), 5);
	struct iovec lv = {b, sizeof(b)}, rv = {a, sizeof(a)};
	errno = 0;
	ssize_t r = process_vm_readv(getpid(), &lv, 1, &rv, 1, 0);
	if (r < 0 && (errno == EPERM || errno == ENOSYS)) {
		printf("# process_vm_readv not permitted here (%s): its cap is not checked\n",
		       strerror(errno));
		return;
	}
	CHECK(r == 100);
	CHECK(memcmp(a, b, 100) == 0);
	CHECK(counters().cma_shorts == 1);
}

/* Many threads, each with its own connection, through every wrapper. */
#define THREADS 6
#define PER_THREAD (256 * 1024)

static void *thread_main(void *arg)
{
	intptr_t id = (intptr_t)arg;
	uint8_t *a = malloc(PER_THREAD), *b = malloc(PER_THREAD);
	int sv[2];
	intptr_t ok = 0;
	if (a && b && socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
		set_nonblock(sv[0]);
		set_nonblock(sv[1]);
		fill(a, PER_THREAD, (uint64_t)id);
		ok = pump(sv[0], sv[1], a, b, PER_THREAD, (enum how)(id % 4)) > 0 &&
		     memcmp(a, b, PER_THREAD) == 0;
		close(sv[0]);
		close(sv[1]);
	}
	free(a);
	free(b);
	return (void *)ok;
}

static void test_threads(void)
{
	configure("short=997-4093,eintr=0.1,eagain=0.1,seed=11");
	pthread_t t[THREADS];
	for (intptr_t i = 0; i < THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, thread_main, (void *)i) == 0);
	for (int i = 0; i < THREADS; i++) {
		void *ok = NULL;
		CHECK(pthread_join(t[i], &ok) == 0);
		CHECK(ok == (void *)1);
	}
	twfault_counters c = counters();
	CHECK(c.bytes_in == (uint64_t)THREADS * PER_THREAD);
	CHECK(c.bytes_out == (uint64_t)THREADS * PER_THREAD);
	CHECK(c.connections == 2 * THREADS);
	CHECK(c.eintrs > 0 && c.eagains > 0 && c.shorts > 0);
}

static void test_summary(void)
{
	configure("eintr=1");
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(write(sv[0], "x", 1) == -1);
	char line[512];
	int n = twfault_format_summary(line, sizeof(line));
	CHECK(n > 0 && (size_t)n < sizeof(line));
	CHECK(strstr(line, " calls=1 ") && strstr(line, " eintr=1 ") && strstr(line, "twfault: pid="));
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	test_no_faults();
	test_short();
	test_eintr_eagain();
	test_other_fds_untouched();
	test_reset();
	test_emfile();
	test_ctrunc();
	test_failcall();
	test_process_vm();
	test_threads();
	test_summary();
	configure("");
	if (failures) {
		printf("twfault_test: %d check(s) failed\n", failures);
		return 1;
	}
	printf("ok - twfault_test: short, EINTR, EAGAIN, reset, EMFILE, SCM_RIGHTS, failcall, "
	       "process_vm, %d threads\n", THREADS);
	return 0;
}
