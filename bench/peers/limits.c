/*
 * limits.c - the machine's limits, as ping-pong drivers with the same
 * schedule, pattern and check as the libraries under test:
 *   memcpy  one copy into the receive buffer (solo; the sample is one-way)
 *   tcp     raw TCP socket ping-pong, TCP_NODELAY, blocking read/write
 *   unix    raw AF_UNIX stream ping-pong
 *   shm     shared-memory flag ping-pong: the sender copies into a shared
 *           region and bumps a sequence flag, the receiver spins on it and
 *           copies out (2 memcpy per direction, as a shm transport must)
 *   cma     the same flags, but the receiver copies the message straight
 *           out of the sender's buffer with process_vm_readv: one copy per
 *           direction, the limit of a channel that reads its peer's memory
 *           (cma)
 * These are what no library can beat on this machine; they must stay
 * minimal (no framing, no allocation beyond the buffer policy).
 */
#define _GNU_SOURCE
#include "twb.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- memcpy ---------------------------------------------------------------- */

static void limits_memcpy(const twb_args *a)
{
	const twb_schedule *s = &a->sched;
	uint64_t max = twb_schedule_max(s);
	unsigned char *src = twb_alloc_prefaulted(max);
	unsigned char *dst = a->policy == TWB_POLICY_REUSED ? twb_alloc_prefaulted(max) : NULL;
	twb_results res;
	twb_cursor c = {0, 0};

	twb_results_init(&res, s);
	res.one_way = true;
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		uint64_t len = s->sizes[c.idx], t0, t1;
		unsigned char *d;
		twb_fill(src, len, twb_seed(c.idx, c.iter));
		t0 = twb_now_ns();
		d = dst ? dst : twb_alloc_fresh(len);
		memcpy(d, src, len);
		t1 = twb_now_ns();
		twb_fault_apply(d, len);
		twb_record(&res, &c, t0, t1, d, len);
		if (!dst)
			free(d);
	}
	twb_results_write(&res, a, "memcpy of one message into the receive buffer (fresh: malloc "
	                  "per message inside the timed region); samples are one-way");
	twb_results_free(&res);
	free(src);
	free(dst);
}

/* ---- sockets ----------------------------------------------------------------- */

static int limits_listen(const twb_args *a, bool is_unix, char *addr, size_t addrlen)
{
	int fd;
	if (is_unix) {
		struct sockaddr_un sun;
		const char *tmp = getenv("TMPDIR");
		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/twb-unix-%d.sock",
		         tmp && *tmp ? tmp : "/tmp", (int)getpid());
		unlink(sun.sun_path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			twb_die_errno("socket(AF_UNIX)");
		if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0)
			twb_die_errno("bind(AF_UNIX)");
		snprintf(addr, addrlen, "%s", sun.sun_path);
	} else {
		struct sockaddr_in sin;
		socklen_t sl = sizeof(sin);
		int one = 1;
		memset(&sin, 0, sizeof(sin));
		sin.sin_family = AF_INET;
		if (inet_pton(AF_INET, a->bind_ip, &sin.sin_addr) != 1)
			twb_die(2, "bad --bind address '%s'", a->bind_ip);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			twb_die_errno("socket(AF_INET)");
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0)
			twb_die_errno("bind(AF_INET)");
		if (getsockname(fd, (struct sockaddr *)&sin, &sl) != 0)
			twb_die_errno("getsockname");
		snprintf(addr, addrlen, "%s:%u", a->bind_ip, (unsigned)ntohs(sin.sin_port));
	}
	if (listen(fd, 1) != 0)
		twb_die_errno("listen");
	return fd;
}

static int limits_connect(const twb_args *a, bool is_unix)
{
	int fd;
	if (is_unix) {
		struct sockaddr_un sun;
		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", a->addr);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			twb_die_errno("socket(AF_UNIX)");
		if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0)
			twb_die_errno("connect(AF_UNIX)");
	} else {
		struct sockaddr_in sin;
		char host[64];
		const char *colon = strrchr(a->addr, ':');
		int one = 1;
		if (!colon || (size_t)(colon - a->addr) >= sizeof(host))
			twb_die(2, "bad --addr '%s' (want ip:port)", a->addr);
		memcpy(host, a->addr, (size_t)(colon - a->addr));
		host[colon - a->addr] = '\0';
		memset(&sin, 0, sizeof(sin));
		sin.sin_family = AF_INET;
		sin.sin_port = htons((uint16_t)atoi(colon + 1));
		if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
			twb_die(2, "bad --addr '%s'", a->addr);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			twb_die_errno("socket(AF_INET)");
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0)
			twb_die_errno("connect(AF_INET)");
		if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
			twb_die_errno("setsockopt(TCP_NODELAY)");
	}
	return fd;
}

static void limits_socket_server(const twb_args *a, bool is_unix)
{
	const twb_schedule *s = &a->sched;
	char addr[128];
	int lfd = limits_listen(a, is_unix, addr, sizeof(addr));
	int fd, one = 1;
	unsigned char *buf = a->policy == TWB_POLICY_REUSED
	                     ? twb_alloc_prefaulted(twb_schedule_max(s)) : NULL;
	twb_cursor c = {0, 0};

	twb_ready(addr);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		twb_die_errno("accept");
	close(lfd);
	if (is_unix)
		unlink(addr);
	else if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
		twb_die_errno("setsockopt(TCP_NODELAY)");
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		uint64_t len = s->sizes[c.idx];
		unsigned char *b = buf ? buf : twb_alloc_fresh(len);
		int rc = twb_read_full(fd, b, len);
		if (rc != 0)
			twb_die(1, "server read: %s", rc > 0 ? "peer closed early" : strerror(errno));
		twb_fault_apply(b, len);
		if (twb_write_full(fd, b, len) != 0)
			twb_die_errno("server write");
		if (!buf)
			free(b);
	}
	close(fd);
	free(buf);
}

static void limits_socket_client(const twb_args *a, bool is_unix)
{
	const twb_schedule *s = &a->sched;
	uint64_t max = twb_schedule_max(s);
	int fd = limits_connect(a, is_unix);
	unsigned char *sbuf = twb_alloc_prefaulted(max);
	unsigned char *rbuf = a->policy == TWB_POLICY_REUSED ? twb_alloc_prefaulted(max) : NULL;
	twb_results res;
	twb_cursor c = {0, 0};

	twb_results_init(&res, s);
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		uint64_t len = s->sizes[c.idx], t0, t1;
		unsigned char *r;
		int rc;
		twb_fill(sbuf, len, twb_seed(c.idx, c.iter));
		t0 = twb_now_ns();
		if (twb_write_full(fd, sbuf, len) != 0)
			twb_die_errno("client write");
		r = rbuf ? rbuf : twb_alloc_fresh(len);
		rc = twb_read_full(fd, r, len);
		if (rc != 0)
			twb_die(1, "client read: %s", rc > 0 ? "peer closed early" : strerror(errno));
		t1 = twb_now_ns();
		twb_record(&res, &c, t0, t1, r, len);
		if (!rbuf)
			free(r);
	}
	twb_results_write(&res, a, is_unix
	                  ? "blocking write+read of the whole message on an AF_UNIX stream"
	                  : "blocking write+read of the whole message on TCP, TCP_NODELAY both ends");
	twb_results_free(&res);
	close(fd);
	free(sbuf);
	free(rbuf);
}

/* ---- shared-memory flag ping-pong ------------------------------------------------ */

struct limits_shm_hdr {
	_Alignas(64) _Atomic uint64_t c2s; /* sequence number of the client's last message */
	_Alignas(64) _Atomic uint64_t s2c; /* sequence number of the server's last reply */
	_Alignas(64) _Atomic uint64_t attached;
};

#define LIMITS_SHM_DATA 4096 /* data starts one page in */

/* Spins on the flag; yields the CPU now and then so two processes placed on
 * one CPU still make progress (a pure spin would burn whole time slices). */
static void limits_wait(_Atomic uint64_t *flag, uint64_t want)
{
	unsigned spins = 0;
	while (atomic_load_explicit(flag, memory_order_acquire) != want) {
		if (++spins % 256 == 0)
			sched_yield();
		else
			__builtin_ia32_pause();
	}
}

static unsigned char *limits_shm_map(const char *name, uint64_t max, bool create)
{
	int fd = shm_open(name, create ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR, 0600);
	void *p;
	if (fd < 0)
		twb_die_errno("shm_open");
	if (create && ftruncate(fd, (off_t)(LIMITS_SHM_DATA + max)) != 0)
		twb_die_errno("ftruncate(shm)");
	p = mmap(NULL, LIMITS_SHM_DATA + max, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		twb_die_errno("mmap(shm)");
	close(fd);
	return p;
}

static void limits_shm_server(const twb_args *a)
{
	const twb_schedule *s = &a->sched;
	uint64_t max = twb_schedule_max(s), seq = 0;
	char name[64];
	unsigned char *map, *data, *buf;
	struct limits_shm_hdr *h;
	twb_cursor c = {0, 0};

	snprintf(name, sizeof(name), "/twb-shm-%d", (int)getpid());
	map = limits_shm_map(name, max, true);
	h = (struct limits_shm_hdr *)map;
	data = map + LIMITS_SHM_DATA;
	memset(data, 0, max); /* prefault the region once, outside any timing */
	buf = a->policy == TWB_POLICY_REUSED ? twb_alloc_prefaulted(max) : NULL;
	twb_ready(name);
	limits_wait(&h->attached, 1);
	shm_unlink(name);
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		uint64_t len = s->sizes[c.idx];
		unsigned char *b;
		limits_wait(&h->c2s, ++seq);
		b = buf ? buf : twb_alloc_fresh(len);
		memcpy(b, data, len);
		twb_fault_apply(b, len);
		memcpy(data, b, len);
		atomic_store_explicit(&h->s2c, seq, memory_order_release);
		if (!buf)
			free(b);
	}
	munmap(map, LIMITS_SHM_DATA + max);
	free(buf);
}

static void limits_shm_client(const twb_args *a)
{
	const twb_schedule *s = &a->sched;
	uint64_t max = twb_schedule_max(s), seq = 0;
	unsigned char *map = limits_shm_map(a->addr, max, false);
	struct limits_shm_hdr *h = (struct limits_shm_hdr *)map;
	unsigned char *data = map + LIMITS_SHM_DATA;
	unsigned char *sbuf = twb_alloc_prefaulted(max);
	unsigned char *rbuf = a->policy == TWB_POLICY_REUSED ? twb_alloc_prefaulted(max) : NULL;
	twb_results res;
	twb_cursor c = {0, 0};

	atomic_store_explicit(&h->attached, 1, memory_order_release);
	twb_results_init(&res, s);
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		uint64_t len = s->sizes[c.idx], t0, t1;
		unsigned char *r;
		twb_fill(sbuf, len, twb_seed(c.idx, c.iter));
		t0 = twb_now_ns();
		memcpy(data, sbuf, len);
		atomic_store_explicit(&h->c2s, ++seq, memory_order_release);
		r = rbuf ? rbuf : twb_alloc_fresh(len);
		limits_wait(&h->s2c, seq);
		memcpy(r, data, len);
		t1 = twb_now_ns();
		twb_record(&res, &c, t0, t1, r, len);
		if (!rbuf)
			free(r);
	}
	twb_results_write(&res, a, "shared region + sequence flags, spin (pause, sched_yield every "
	                  "256 spins), memcpy in and out on each side: 2 copies per direction");
	twb_results_free(&res);
	munmap(map, LIMITS_SHM_DATA + max);
	free(sbuf);
	free(rbuf);
}

/* ---- cma: one process_vm_readv per direction ------------------------------------ */

struct limits_cma_hdr {
	struct limits_shm_hdr f;
	_Alignas(64) _Atomic uint64_t client_pid, client_buf, server_pid, server_buf;
};

/* Copies len bytes of process pid at addr into dst, in as many calls as
 * the kernel needs (one call moves at most 0x7ffff000 bytes). */
static void limits_cma_read(pid_t pid, uint64_t addr, unsigned char *dst, uint64_t len)
{
	uint64_t done = 0;
	while (done < len) {
		struct iovec l = {dst + done, (size_t)(len - done)};
		struct iovec r = {(void *)(uintptr_t)(addr + done), (size_t)(len - done)};
		ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
		if (n <= 0)
			twb_die_errno("process_vm_readv");
		done += (uint64_t)n;
	}
}

static void limits_cma_server(const twb_args *a)
{
	const twb_schedule *s = &a->sched;
	uint64_t max = twb_schedule_max(s), seq = 0;
	char name[64];
	unsigned char *buf, *prev = NULL;
	struct limits_cma_hdr *h;
	twb_cursor c = {0, 0};

	(void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); /* YAMA scope 1 */
	snprintf(name, sizeof(name), "/twb-cma-%d", (int)getpid());
	h = (struct limits_cma_hdr *)limits_shm_map(name, 0, true);
	atomic_store(&h->server_pid, (uint64_t)getpid());
	buf = a->policy == TWB_POLICY_REUSED ? twb_alloc_prefaulted(max) : NULL;
	twb_ready(name);
	limits_wait(&h->f.attached, 1);
	shm_unlink(name);
	pid_t peer = (pid_t)atomic_load(&h->client_pid);
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		uint64_t len = s->sizes[c.idx];
		limits_wait(&h->f.c2s, ++seq);
		unsigned char *b = buf ? buf : twb_alloc_fresh(len);
		if (!buf) { /* the client has read the last reply: it sent again */
			free(prev);
			prev = b;
		}
		limits_cma_read(peer, atomic_load(&h->client_buf), b, len);
		twb_fault_apply(b, len);
		atomic_store(&h->server_buf, (uint64_t)(uintptr_t)b);
		atomic_store_explicit(&h->f.s2c, seq, memory_order_release);
	}
	limits_wait(&h->f.attached, 2); /* the client read the last reply */
	munmap(h, LIMITS_SHM_DATA);
	free(prev);
	free(buf);
}

static void limits_cma_client(const twb_args *a)
{
	const twb_schedule *s = &a->sched;
	uint64_t max = twb_schedule_max(s), seq = 0;
	struct limits_cma_hdr *h = (struct limits_cma_hdr *)limits_shm_map(a->addr, 0, false);
	unsigned char *sbuf = twb_alloc_prefaulted(max);
	unsigned char *rbuf = a->policy == TWB_POLICY_REUSED ? twb_alloc_prefaulted(max) : NULL;
	twb_results res;
	twb_cursor c = {0, 0};

	(void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	atomic_store(&h->client_pid, (uint64_t)getpid());
	atomic_store(&h->client_buf, (uint64_t)(uintptr_t)sbuf);
	atomic_store_explicit(&h->f.attached, 1, memory_order_release);
	pid_t peer = (pid_t)atomic_load(&h->server_pid);
	twb_results_init(&res, s);
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		uint64_t len = s->sizes[c.idx], t0, t1;
		unsigned char *r;
		twb_fill(sbuf, len, twb_seed(c.idx, c.iter));
		t0 = twb_now_ns();
		atomic_store_explicit(&h->f.c2s, ++seq, memory_order_release);
		r = rbuf ? rbuf : twb_alloc_fresh(len);
		limits_wait(&h->f.s2c, seq);
		limits_cma_read(peer, atomic_load(&h->server_buf), r, len);
		t1 = twb_now_ns();
		twb_record(&res, &c, t0, t1, r, len);
		if (!rbuf)
			free(r);
	}
	atomic_store_explicit(&h->f.attached, 2, memory_order_release);
	twb_results_write(&res, a, "shared sequence flags, spin (pause, sched_yield every 256 "
	                  "spins); each side copies the message out of the other's buffer with "
	                  "process_vm_readv: 1 copy per direction");
	twb_results_free(&res);
	munmap(h, LIMITS_SHM_DATA);
	free(sbuf);
	free(rbuf);
}

int main(int argc, char **argv)
{
	twb_args a;
	twb_args_parse(argc, argv, &a);
	if (!strcmp(a.system, "memcpy")) {
		limits_memcpy(&a);
	} else if (!strcmp(a.system, "tcp") || !strcmp(a.system, "unix")) {
		bool is_unix = a.system[0] == 'u';
		if (a.role == TWB_ROLE_SERVER)
			limits_socket_server(&a, is_unix);
		else
			limits_socket_client(&a, is_unix);
	} else if (!strcmp(a.system, "shm")) {
		if (a.role == TWB_ROLE_SERVER)
			limits_shm_server(&a);
		else
			limits_shm_client(&a);
	} else if (!strcmp(a.system, "cma")) {
		if (a.role == TWB_ROLE_SERVER)
			limits_cma_server(&a);
		else
			limits_cma_client(&a);
	} else {
		twb_die(2, "unknown --system '%s' (memcpy, tcp, unix, shm, cma)", a.system);
	}
	return 0;
}
