/*
 * twfault.c - libtwfault, the LD_PRELOAD fault shim: it wraps the socket
 * calls any program makes through libc (read, write, readv, writev, send,
 * recv, sendto, recvfrom, sendmsg, recvmsg, accept, accept4, connect, the
 * _FORTIFY_SOURCE variants __read_chk, __recv_chk, __recvfrom_chk) and
 * process_vm_readv/writev, and injects what the kernel can really answer:
 * short transfers, EINTR, EAGAIN (non-blocking fds only), a connection reset
 * after N bytes (a real RST reaches the peer), EMFILE from accept, SCM_RIGHTS
 * truncation (MSG_CTRUNC), and "the Nth socket call fails" for sweeps. The
 * plan comes from TWFAULT (config.h); the counters can be printed at exit.
 *
 * Only sockets are touched: each call fstat()s its fd (S_ISSOCK) and keeps
 * what it learned about that socket in a per-fd table keyed by the socket's
 * inode, so a descriptor number reused by a new socket, or closed behind the
 * shim's back (libuv closes with syscall(SYS_close), which no wrapper of
 * close() sees), is never mistaken for the old one. Pipes, files, eventfds
 * and terminals go straight to libc: an adapter's stdin/stdout protocol with
 * its harness is never disturbed.
 *
 * Rules this file keeps, because it runs inside programs we did not write:
 * no allocation, no locks and no stdio on the paths of wrapped calls (they
 * may run on any thread and in signal handlers), errno preserved on every
 * pass-through, every decision a pure function of (seed, connection number,
 * call number on that connection) so a seed reproduces a run. It must not
 * retry, log to stdout or change the semantics of a call it does not fault.
 *
 * Preloading into sanitizer-instrumented programs: the sanitizer runtime
 * must come first in LD_PRELOAD ("libasan.so.8 libtwfault.so"); its
 * interceptors then find this shim as "the next read" and this shim finds
 * libc. twfault-run (launcher.c) works the order out from the program's
 * DT_NEEDED entries.
 */
#undef _FORTIFY_SOURCE /* we define read() and friends ourselves */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "config.h"
#include "twfault.h"

#define TWF_API __attribute__((visibility("default")))

/* ---- the real functions ------------------------------------------------------ */

typedef ssize_t (*twf_read_fn)(int, void *, size_t);
typedef ssize_t (*twf_write_fn)(int, const void *, size_t);
typedef ssize_t (*twf_readv_fn)(int, const struct iovec *, int);
typedef ssize_t (*twf_send_fn)(int, const void *, size_t, int);
typedef ssize_t (*twf_recv_fn)(int, void *, size_t, int);
typedef ssize_t (*twf_sendto_fn)(int, const void *, size_t, int, const struct sockaddr *,
                                 socklen_t);
typedef ssize_t (*twf_recvfrom_fn)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
typedef ssize_t (*twf_sendmsg_fn)(int, const struct msghdr *, int);
typedef ssize_t (*twf_recvmsg_fn)(int, struct msghdr *, int);
typedef int (*twf_accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*twf_accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef int (*twf_connect_fn)(int, const struct sockaddr *, socklen_t);
typedef ssize_t (*twf_pvm_fn)(pid_t, const struct iovec *, unsigned long, const struct iovec *,
                              unsigned long, unsigned long);
typedef ssize_t (*twf_read_chk_fn)(int, void *, size_t, size_t);
typedef ssize_t (*twf_recv_chk_fn)(int, void *, size_t, size_t, int);
typedef ssize_t (*twf_recvfrom_chk_fn)(int, void *, size_t, size_t, int, struct sockaddr *,
                                       socklen_t *);

enum twf_real_id {
	R_READ, R_WRITE, R_READV, R_WRITEV, R_SEND, R_RECV, R_SENDTO, R_RECVFROM, R_SENDMSG,
	R_RECVMSG, R_ACCEPT, R_ACCEPT4, R_CONNECT, R_PVM_READV, R_PVM_WRITEV, R_READ_CHK,
	R_RECV_CHK, R_RECVFROM_CHK, R_COUNT
};
static const char *const twf_real_names[R_COUNT] = {
	"read", "write", "readv", "writev", "send", "recv", "sendto", "recvfrom", "sendmsg",
	"recvmsg", "accept", "accept4", "connect", "process_vm_readv", "process_vm_writev",
	"__read_chk", "__recv_chk", "__recvfrom_chk",
};
static _Atomic(void *) twf_reals[R_COUNT];

/* The next definition after this object (libc, or a sanitizer's interceptor
 * when this shim is compiled into an instrumented program). The constructor
 * resolves them all, so the lazy path (dlsym is not async-signal-safe) only
 * runs for calls made before it, from other constructors. */
static void *twf_real(enum twf_real_id id)
{
	void *p = atomic_load_explicit(&twf_reals[id], memory_order_acquire);
	if (!p) {
		p = dlsym(RTLD_NEXT, twf_real_names[id]);
		atomic_store_explicit(&twf_reals[id], p, memory_order_release);
	}
	return p;
}

#define REAL(type, id) ((type)twf_real(id))
/* A real function that cannot be found (a libc without it): fail the call. */
#define NEED(fn)                 \
	do {                     \
		if (!(fn)) {     \
			errno = ENOSYS; \
			return -1; \
		}                \
	} while (0)

/* ---- state ------------------------------------------------------------------- */

static twf_config g_cfg;
static _Atomic int g_init; /* 0 not yet, 1 being set up, 2 ready */

static struct {
	_Atomic uint64_t calls, connections, accepts, bytes_in, bytes_out, shorts, eintrs, eagains,
	        resets, emfiles, ctruncs, failcalls, cma_shorts;
	_Atomic uint64_t rights_msgs, cma_calls;
	_Atomic uint32_t conn_seq;
	_Atomic int reset_fired;
	_Atomic int failcall_fired;
} g_n;

#define TWF_MAX_FD 16384

enum { TWF_K_KNOWN = 1u, TWF_K_STREAM = 2u, TWF_K_MATCH = 4u };
enum { TWF_S_OPEN, TWF_S_RESET_PENDING, TWF_S_RESET_DONE };

/* What the shim knows about the socket behind one descriptor number. */
typedef struct twf_fd {
	_Atomic uint64_t key;   /* inode + 1 of the socket described; 0 = none */
	_Atomic uint32_t busy;  /* being (re)described */
	_Atomic uint32_t kind;  /* TWF_K_* */
	_Atomic uint32_t conn;  /* connection number (1-based), 0 = not assigned */
	_Atomic uint32_t state; /* TWF_S_* */
	_Atomic uint64_t calls; /* wrapped calls on it */
	_Atomic uint64_t bytes; /* moved (read + written) */
} twf_fd;

static twf_fd g_fds[TWF_MAX_FD];

/* ---- async-signal-safe logging ---------------------------------------------- */

static void twf_say(const char *s)
{
	twf_write_fn w = REAL(twf_write_fn, R_WRITE);
	size_t n = strlen(s);
	while (w && n > 0) {
		ssize_t r = w(2, s, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		s += r;
		n -= (size_t)r;
	}
}

static char *twf_utoa(uint64_t v, char *end)
{
	*--end = '\0';
	do {
		*--end = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return end;
}

/* Appends s to the line being built in [*p, end). */
static void twf_cat(char **p, char *end, const char *s)
{
	while (*s && *p < end - 1)
		*(*p)++ = *s++;
	**p = '\0';
}

/* "twfault: EINTR in read on fd 7 (connection 2, call 15)", in one write so
 * lines from several threads or processes do not interleave. */
static void twf_log(const char *fault, const char *call, int fd, uint32_t conn, uint64_t k)
{
	if (!g_cfg.verbose)
		return;
	char b1[24], b2[24], b3[24], line[256];
	char *p = line, *end = line + sizeof(line);
	int saved = errno;
	twf_cat(&p, end, "twfault: ");
	twf_cat(&p, end, fault);
	twf_cat(&p, end, " in ");
	twf_cat(&p, end, call);
	twf_cat(&p, end, " on fd ");
	twf_cat(&p, end, twf_utoa((uint64_t)(fd < 0 ? 0 : fd), b1 + sizeof(b1)));
	twf_cat(&p, end, " (connection ");
	twf_cat(&p, end, twf_utoa(conn, b2 + sizeof(b2)));
	twf_cat(&p, end, ", call ");
	twf_cat(&p, end, twf_utoa(k, b3 + sizeof(b3)));
	twf_cat(&p, end, ")\n");
	twf_say(line);
	errno = saved;
}

/* ---- set-up ------------------------------------------------------------------ */

static void twf_reset_state(void)
{
	memset(&g_n, 0, sizeof(g_n));
	memset(g_fds, 0, sizeof(g_fds));
}

static bool twf_ready(void)
{
	int s = atomic_load_explicit(&g_init, memory_order_acquire);
	if (s == 2)
		return true;
	if (s == 1)
		return false; /* a call made while the constructor runs: pass it through */
	int expect = 0;
	if (!atomic_compare_exchange_strong(&g_init, &expect, 1))
		return atomic_load_explicit(&g_init, memory_order_acquire) == 2;
	int saved = errno;
	for (int i = 0; i < R_COUNT; i++)
		(void)twf_real((enum twf_real_id)i);
	char err[256];
	twf_config c;
	if (twf_config_parse(getenv("TWFAULT"), &c, err, sizeof(err)) != 0) {
		/* Running without the faults asked for would pass tests that
		 * should have been tested: refuse, loudly. */
		twf_say("twfault: ");
		twf_say(err);
		twf_say("; exiting\n");
		_exit(2);
	}
	g_cfg = c;
	errno = saved;
	atomic_store_explicit(&g_init, 2, memory_order_release);
	return true;
}

__attribute__((constructor)) static void twf_constructor(void)
{
	(void)twf_ready();
}

/* ---- classifying descriptors --------------------------------------------------- */

static bool twf_family_matches(int family)
{
	switch (g_cfg.fds) {
	case TWF_FDS_TCP:
		return family == AF_INET || family == AF_INET6;
	case TWF_FDS_UNIX:
		return family == AF_UNIX;
	case TWF_FDS_SOCKETS:
	default:
		return true;
	}
}

/* The entry for fd if it is a socket that faults apply to, else NULL. Keeps
 * errno. */
static twf_fd *twf_lookup(int fd)
{
	if (fd < 0 || !twf_ready())
		return NULL;
	int saved = errno;
	struct stat st;
	twf_fd *e = NULL;
	if (fd >= TWF_MAX_FD || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
		goto out;
	e = &g_fds[fd];
	uint64_t key = (uint64_t)st.st_ino + 1;
	if (atomic_load_explicit(&e->key, memory_order_acquire) != key) {
		uint32_t idle = 0;
		if (!atomic_compare_exchange_strong(&e->busy, &idle, 1)) {
			e = NULL; /* another thread is describing it right now: no fault this call */
			goto out;
		}
		if (atomic_load_explicit(&e->key, memory_order_acquire) != key) {
			int type = 0, family = 0;
			socklen_t l = sizeof(type);
			(void)getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l);
			l = sizeof(family);
			(void)getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &l);
			uint32_t kind = TWF_K_KNOWN;
			if (type == SOCK_STREAM)
				kind |= TWF_K_STREAM;
			if (twf_family_matches(family))
				kind |= TWF_K_MATCH;
			atomic_store(&e->kind, kind);
			atomic_store(&e->conn, 0);
			atomic_store(&e->state, TWF_S_OPEN);
			atomic_store(&e->calls, 0);
			atomic_store(&e->bytes, 0);
			atomic_store_explicit(&e->key, key, memory_order_release);
		}
		atomic_store(&e->busy, 0);
	}
	if (!(atomic_load(&e->kind) & TWF_K_MATCH))
		e = NULL;
out:
	errno = saved;
	return e;
}

static bool twf_is_stream(twf_fd *e)
{
	return atomic_load(&e->kind) & TWF_K_STREAM;
}

/* The connection number of a stream socket, assigned on first need: at
 * connect, right after accept, or at its first transfer. */
static uint32_t twf_conn_of(twf_fd *e)
{
	uint32_t c = atomic_load(&e->conn);
	if (c || !twf_is_stream(e))
		return c;
	uint32_t mine = atomic_fetch_add(&g_n.conn_seq, 1) + 1;
	uint32_t none = 0;
	if (atomic_compare_exchange_strong(&e->conn, &none, mine)) {
		atomic_fetch_add(&g_n.connections, 1);
		return mine;
	}
	return none; /* another thread numbered it first */
}

static bool twf_nonblocking(int fd, int flags)
{
	if (flags & MSG_DONTWAIT)
		return true;
	int saved = errno;
	int fl = fcntl(fd, F_GETFL);
	errno = saved;
	return fl >= 0 && (fl & O_NONBLOCK);
}

/* Breaks the connection for real, so the peer sees what a reset looks like:
 * connect(AF_UNSPEC) makes TCP send an RST (tcp_disconnect); where that is
 * not possible (UNIX sockets) a shutdown gives the peer an end of file. */
static void twf_break(int fd)
{
	int saved = errno;
	struct sockaddr sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_family = AF_UNSPEC;
	twf_connect_fn real_connect = REAL(twf_connect_fn, R_CONNECT);
	if (!real_connect || real_connect(fd, &sa, sizeof(sa)) != 0)
		(void)shutdown(fd, SHUT_RDWR);
	errno = saved;
}

/* ---- the transfer decision --------------------------------------------------- */

enum twf_verdict { TWF_GO, TWF_FAIL, TWF_EOF };

typedef struct twf_call {
	const char *name; /* for the log */
	twf_fd *e;
	int fd;
	bool write, peek, nosignal;
	int flags;
	size_t want; /* bytes asked for */
	size_t cap;  /* bytes the real call may move (<= want) */
	int err;     /* for TWF_FAIL */
	uint32_t conn;
} twf_call;

static bool twf_begin(twf_call *c, const char *name, int fd, bool write, size_t want, int flags)
{
	twf_fd *e = twf_lookup(fd);
	if (!e)
		return false;
	memset(c, 0, sizeof(*c));
	c->name = name;
	c->e = e;
	c->fd = fd;
	c->write = write;
	c->flags = flags;
	c->peek = !write && (flags & MSG_PEEK);
	c->nosignal = write && (flags & MSG_NOSIGNAL);
	c->want = want;
	c->cap = want;
	return true;
}

static bool twf_reset_applies(const twf_call *c)
{
	return g_cfg.reset_on && !c->peek && twf_is_stream(c->e) &&
	       !atomic_load(&g_n.reset_fired) &&
	       (g_cfg.reset_conn == 0 || g_cfg.reset_conn == c->conn);
}

/* failcall: the Nth faultable call fails, or the first call after it that
 * can (an accept with nothing queued cannot); once per process. */
static bool twf_failcall_due(uint64_t n)
{
	return g_cfg.failcall_at && n >= g_cfg.failcall_at && !atomic_load(&g_n.failcall_fired);
}

static bool twf_failcall_claim(void)
{
	int no = 0;
	return atomic_compare_exchange_strong(&g_n.failcall_fired, &no, 1);
}

static enum twf_verdict twf_before(twf_call *c)
{
	twf_fd *e = c->e;
	uint64_t n = atomic_fetch_add(&g_n.calls, 1) + 1;
	uint64_t k = atomic_fetch_add(&e->calls, 1) + 1;
	c->conn = twf_conn_of(e);
	if (twf_failcall_due(n) && twf_failcall_claim()) {
		twf_break(c->fd);
		atomic_store(&e->state, TWF_S_RESET_DONE);
		atomic_fetch_add(&g_n.failcalls, 1);
		twf_log("failcall ECONNRESET", c->name, c->fd, c->conn, k);
		c->err = ECONNRESET;
		return TWF_FAIL;
	}
	uint32_t st = atomic_load(&e->state);
	if (st == TWF_S_RESET_PENDING) {
		/* the kernel reports a reset once; afterwards reads see the end
		 * and writes EPIPE */
		atomic_store(&e->state, TWF_S_RESET_DONE);
		c->err = ECONNRESET;
		return TWF_FAIL;
	}
	if (st == TWF_S_RESET_DONE) {
		if (!c->write)
			return TWF_EOF;
		if (!c->nosignal)
			(void)raise(SIGPIPE);
		c->err = EPIPE;
		return TWF_FAIL;
	}
	/* a connection draws from its own stream; other sockets from the
	 * process-wide call count */
	uint64_t r = c->conn ? twf_draw(g_cfg.seed, c->conn, k)
	                     : twf_draw(g_cfg.seed, (UINT64_C(1) << 32) | (uint64_t)c->fd, n);
	if (g_cfg.eintr_ppm && r % TWF_PPM < g_cfg.eintr_ppm) {
		atomic_fetch_add(&g_n.eintrs, 1);
		twf_log("EINTR", c->name, c->fd, c->conn, k);
		c->err = EINTR;
		return TWF_FAIL;
	}
	if (g_cfg.eagain_ppm && (r >> 24) % TWF_PPM < g_cfg.eagain_ppm &&
	    twf_nonblocking(c->fd, c->flags)) {
		atomic_fetch_add(&g_n.eagains, 1);
		twf_log("EAGAIN", c->name, c->fd, c->conn, k);
		c->err = EAGAIN;
		return TWF_FAIL;
	}
	if (g_cfg.short_max && twf_is_stream(e)) {
		uint64_t cap = g_cfg.short_min;
		if (g_cfg.short_max > g_cfg.short_min)
			cap += twf_mix64(r) % (g_cfg.short_max - g_cfg.short_min + 1);
		if (c->cap > cap) {
			c->cap = (size_t)cap;
			atomic_fetch_add(&g_n.shorts, 1);
		}
	}
	if (twf_reset_applies(c)) {
		uint64_t done = atomic_load(&e->bytes);
		uint64_t left = g_cfg.reset_bytes > done ? g_cfg.reset_bytes - done : 0;
		if (left == 0) {
			int no = 0;
			if (atomic_compare_exchange_strong(&g_n.reset_fired, &no, 1)) {
				twf_break(c->fd);
				atomic_store(&e->state, TWF_S_RESET_DONE);
				atomic_fetch_add(&g_n.resets, 1);
				twf_log("reset ECONNRESET", c->name, c->fd, c->conn, k);
				c->err = ECONNRESET;
				return TWF_FAIL;
			}
		} else if (c->cap > left) {
			c->cap = (size_t)left;
		}
	}
	return TWF_GO;
}

static void twf_after(twf_call *c, ssize_t got)
{
	if (got <= 0 || c->peek || !twf_is_stream(c->e))
		return;
	atomic_fetch_add(c->write ? &g_n.bytes_out : &g_n.bytes_in, (uint64_t)got);
	uint64_t total = atomic_fetch_add(&c->e->bytes, (uint64_t)got) + (uint64_t)got;
	if (twf_reset_applies(c) && total >= g_cfg.reset_bytes) {
		int no = 0;
		if (atomic_compare_exchange_strong(&g_n.reset_fired, &no, 1)) {
			/* the RST goes out now, so a peer waiting for more bytes hears
			 * of it; this side gets ECONNRESET from its next call */
			twf_break(c->fd);
			uint32_t open = TWF_S_OPEN;
			(void)atomic_compare_exchange_strong(&c->e->state, &open, TWF_S_RESET_PENDING);
			atomic_fetch_add(&g_n.resets, 1);
			twf_log("reset (RST sent; ECONNRESET next)", c->name, c->fd, c->conn,
			        atomic_load(&c->e->calls));
		}
	}
}

/* Returns -1 with errno for TWF_FAIL, 0 for TWF_EOF. */
static ssize_t twf_verdict_result(const twf_call *c, enum twf_verdict v)
{
	if (v == TWF_EOF)
		return 0;
	errno = c->err;
	return -1;
}

/* ---- iovec helpers ----------------------------------------------------------- */

#define TWF_IOV_MAX 64

static size_t twf_iov_total(const struct iovec *iov, size_t n)
{
	size_t t = 0;
	for (size_t i = 0; i < n; i++) {
		if (iov[i].iov_len > SIZE_MAX - t)
			return SIZE_MAX;
		t += iov[i].iov_len;
	}
	return t;
}

/* Copies the first entries of iov, holding at most cap bytes, into out
 * (TWF_IOV_MAX entries). Returns the entry count, or -1 when no cut is
 * needed (or possible without making the call move nothing). */
static int twf_iov_cut(const struct iovec *iov, size_t n, size_t cap, struct iovec *out)
{
	size_t sum = 0;
	size_t k;
	for (k = 0; k < n && k < TWF_IOV_MAX; k++) {
		out[k] = iov[k];
		if (iov[k].iov_len >= cap - sum) {
			out[k].iov_len = cap - sum;
			return (int)k + 1;
		}
		sum += iov[k].iov_len;
	}
	if (k < n && sum > 0)
		return (int)k; /* more entries than we copy: still a short transfer */
	return -1;
}

/* ---- read and write family --------------------------------------------------- */

TWF_API ssize_t read(int fd, void *buf, size_t n)
{
	twf_read_fn real = REAL(twf_read_fn, R_READ);
	NEED(real);
	twf_call c;
	if (n == 0 || !twf_begin(&c, "read", fd, false, n, 0))
		return real(fd, buf, n);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	ssize_t r = real(fd, buf, c.cap);
	twf_after(&c, r);
	return r;
}

TWF_API ssize_t write(int fd, const void *buf, size_t n)
{
	twf_write_fn real = REAL(twf_write_fn, R_WRITE);
	NEED(real);
	twf_call c;
	if (n == 0 || !twf_begin(&c, "write", fd, true, n, 0))
		return real(fd, buf, n);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	ssize_t r = real(fd, buf, c.cap);
	twf_after(&c, r);
	return r;
}

static ssize_t twf_rwv(enum twf_real_id id, const char *name, bool write, int fd,
                       const struct iovec *iov, int iovcnt)
{
	twf_readv_fn real = REAL(twf_readv_fn, id);
	NEED(real);
	twf_call c;
	size_t want = iovcnt > 0 ? twf_iov_total(iov, (size_t)iovcnt) : 0;
	if (want == 0 || !twf_begin(&c, name, fd, write, want, 0))
		return real(fd, iov, iovcnt);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	struct iovec cut[TWF_IOV_MAX];
	int nc = c.cap < want ? twf_iov_cut(iov, (size_t)iovcnt, c.cap, cut) : -1;
	ssize_t r = nc > 0 ? real(fd, cut, nc) : real(fd, iov, iovcnt);
	twf_after(&c, r);
	return r;
}

TWF_API ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	return twf_rwv(R_READV, "readv", false, fd, iov, iovcnt);
}

TWF_API ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	return twf_rwv(R_WRITEV, "writev", true, fd, iov, iovcnt);
}

TWF_API ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	twf_send_fn real = REAL(twf_send_fn, R_SEND);
	NEED(real);
	twf_call c;
	if (n == 0 || !twf_begin(&c, "send", fd, true, n, flags))
		return real(fd, buf, n, flags);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	ssize_t r = real(fd, buf, c.cap, flags);
	twf_after(&c, r);
	return r;
}

TWF_API ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	twf_recv_fn real = REAL(twf_recv_fn, R_RECV);
	NEED(real);
	twf_call c;
	if (n == 0 || !twf_begin(&c, "recv", fd, false, n, flags))
		return real(fd, buf, n, flags);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	ssize_t r = real(fd, buf, c.cap, flags);
	twf_after(&c, r);
	return r;
}

TWF_API ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
                       socklen_t alen)
{
	twf_sendto_fn real = REAL(twf_sendto_fn, R_SENDTO);
	NEED(real);
	twf_call c;
	if (n == 0 || !twf_begin(&c, "sendto", fd, true, n, flags))
		return real(fd, buf, n, flags, addr, alen);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	ssize_t r = real(fd, buf, c.cap, flags, addr, alen);
	twf_after(&c, r);
	return r;
}

TWF_API ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
                         socklen_t *alen)
{
	twf_recvfrom_fn real = REAL(twf_recvfrom_fn, R_RECVFROM);
	NEED(real);
	twf_call c;
	if (n == 0 || !twf_begin(&c, "recvfrom", fd, false, n, flags))
		return real(fd, buf, n, flags, addr, alen);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	ssize_t r = real(fd, buf, c.cap, flags, addr, alen);
	twf_after(&c, r);
	return r;
}

TWF_API ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	twf_sendmsg_fn real = REAL(twf_sendmsg_fn, R_SENDMSG);
	NEED(real);
	twf_call c;
	size_t want = msg ? twf_iov_total(msg->msg_iov, msg->msg_iovlen) : 0;
	/* a message of control data only is one unit: never cut, still failed */
	if (!msg || !twf_begin(&c, "sendmsg", fd, true, want, flags))
		return real(fd, msg, flags);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	struct iovec cut[TWF_IOV_MAX];
	int nc = c.cap < want ? twf_iov_cut(msg->msg_iov, msg->msg_iovlen, c.cap, cut) : -1;
	ssize_t r;
	if (nc > 0) {
		struct msghdr m = *msg;
		m.msg_iov = cut;
		m.msg_iovlen = (size_t)nc;
		r = real(fd, &m, flags);
	} else {
		r = real(fd, msg, flags);
	}
	twf_after(&c, r);
	return r;
}

/* SCM_RIGHTS truncation: the descriptors a message carried are closed and
 * the control data dropped, as the kernel does when they do not fit. */
static void twf_maybe_ctrunc(int fd, struct msghdr *msg)
{
	if (!(g_cfg.ctrunc_all || g_cfg.ctrunc_at) || msg->msg_controllen == 0 || !msg->msg_control)
		return;
	bool rights = false;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(msg); h; h = CMSG_NXTHDR(msg, h))
		rights |= h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS;
	if (!rights)
		return;
	uint64_t m = atomic_fetch_add(&g_n.rights_msgs, 1) + 1;
	if (!g_cfg.ctrunc_all && m != g_cfg.ctrunc_at)
		return;
	int saved = errno;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(msg); h; h = CMSG_NXTHDR(msg, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int passed;
			memcpy(&passed, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
			(void)close(passed);
		}
	}
	errno = saved;
	msg->msg_controllen = 0;
	msg->msg_flags |= MSG_CTRUNC;
	atomic_fetch_add(&g_n.ctruncs, 1);
	twf_log("SCM_RIGHTS truncated (MSG_CTRUNC)", "recvmsg", fd, 0, m);
}

TWF_API ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	twf_recvmsg_fn real = REAL(twf_recvmsg_fn, R_RECVMSG);
	NEED(real);
	twf_call c;
	size_t want = msg ? twf_iov_total(msg->msg_iov, msg->msg_iovlen) : 0;
	if (!msg || !twf_begin(&c, "recvmsg", fd, false, want, flags))
		return real(fd, msg, flags);
	enum twf_verdict v = twf_before(&c);
	if (v != TWF_GO)
		return twf_verdict_result(&c, v);
	struct iovec cut[TWF_IOV_MAX];
	int nc = c.cap < want ? twf_iov_cut(msg->msg_iov, msg->msg_iovlen, c.cap, cut) : -1;
	ssize_t r;
	if (nc > 0) {
		struct msghdr m = *msg;
		m.msg_iov = cut;
		m.msg_iovlen = (size_t)nc;
		r = real(fd, &m, flags);
		msg->msg_namelen = m.msg_namelen;
		msg->msg_controllen = m.msg_controllen;
		msg->msg_flags = m.msg_flags;
	} else {
		r = real(fd, msg, flags);
	}
	if (r >= 0)
		twf_maybe_ctrunc(fd, msg);
	twf_after(&c, r);
	return r;
}

/* _FORTIFY_SOURCE builds call these instead; the size check stays libc's. */
TWF_API ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
TWF_API ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
TWF_API ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                               struct sockaddr *addr, socklen_t *alen);

TWF_API ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen) {
		twf_read_chk_fn real = REAL(twf_read_chk_fn, R_READ_CHK);
		NEED(real);
		return real(fd, buf, n, buflen);
	}
	return read(fd, buf, n);
}

TWF_API ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (n > buflen) {
		twf_recv_chk_fn real = REAL(twf_recv_chk_fn, R_RECV_CHK);
		NEED(real);
		return real(fd, buf, n, buflen, flags);
	}
	return recv(fd, buf, n, flags);
}

TWF_API ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                               struct sockaddr *addr, socklen_t *alen)
{
	if (n > buflen) {
		twf_recvfrom_chk_fn real = REAL(twf_recvfrom_chk_fn, R_RECVFROM_CHK);
		NEED(real);
		return real(fd, buf, n, buflen, flags, addr, alen);
	}
	return recvfrom(fd, buf, n, flags, addr, alen);
}

/* ---- accept and connect ---------------------------------------------------------- */

static int twf_accept_common(const char *name, int fd, struct sockaddr *addr, socklen_t *alen,
                             int flags, bool four)
{
	twf_accept4_fn real4 = REAL(twf_accept4_fn, R_ACCEPT4);
	twf_accept_fn real = REAL(twf_accept_fn, R_ACCEPT);
	if (four)
		NEED(real4);
	else
		NEED(real);
	twf_fd *e = twf_lookup(fd);
	if (!e)
		return four ? real4(fd, addr, alen, flags) : real(fd, addr, alen);
	uint64_t n = atomic_fetch_add(&g_n.calls, 1) + 1;
	uint64_t a = atomic_fetch_add(&g_n.accepts, 1) + 1;
	if (twf_failcall_due(n) && real4) {
		/* ECONNABORTED means the queued connection died before it was
		 * accepted: take it off the queue and reset it, so its client
		 * sees what a client of a real abort sees */
		int nfd = real4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (nfd < 0)
			return -1; /* nothing queued (EAGAIN ...): the real answer; still due */
		if (!twf_failcall_claim()) {
			/* another thread's call took the fault meanwhile: this
			 * connection was never in danger, hand it over */
			if (flags & SOCK_NONBLOCK)
				(void)fcntl(nfd, F_SETFL, fcntl(nfd, F_GETFL) | O_NONBLOCK);
			if (!(flags & SOCK_CLOEXEC))
				(void)fcntl(nfd, F_SETFD, 0);
			if (addr && alen)
				(void)getpeername(nfd, addr, alen);
			twf_fd *ne = twf_lookup(nfd);
			if (ne)
				(void)twf_conn_of(ne);
			return nfd;
		}
		struct linger lg = {1, 0};
		(void)setsockopt(nfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		(void)close(nfd);
		atomic_fetch_add(&g_n.failcalls, 1);
		twf_log("failcall ECONNABORTED", name, fd, 0, a);
		errno = ECONNABORTED;
		return -1;
	}
	if (g_cfg.emfile_at && a >= g_cfg.emfile_at && a - g_cfg.emfile_at < g_cfg.emfile_count) {
		/* like the kernel's EMFILE: the connection stays queued */
		atomic_fetch_add(&g_n.emfiles, 1);
		twf_log("EMFILE", name, fd, 0, a);
		errno = EMFILE;
		return -1;
	}
	uint64_t r = twf_draw(g_cfg.seed, (UINT64_C(2) << 32) | (uint64_t)fd, a);
	if (g_cfg.eintr_ppm && r % TWF_PPM < g_cfg.eintr_ppm) {
		atomic_fetch_add(&g_n.eintrs, 1);
		twf_log("EINTR", name, fd, 0, a);
		errno = EINTR;
		return -1;
	}
	if (g_cfg.eagain_ppm && (r >> 24) % TWF_PPM < g_cfg.eagain_ppm && twf_nonblocking(fd, 0)) {
		atomic_fetch_add(&g_n.eagains, 1);
		twf_log("EAGAIN", name, fd, 0, a);
		errno = EAGAIN;
		return -1;
	}
	int nfd = four ? real4(fd, addr, alen, flags) : real(fd, addr, alen);
	if (nfd >= 0) {
		twf_fd *ne = twf_lookup(nfd);
		if (ne)
			(void)twf_conn_of(ne);
	}
	return nfd;
}

TWF_API int accept(int fd, struct sockaddr *addr, socklen_t *alen)
{
	return twf_accept_common("accept", fd, addr, alen, 0, false);
}

TWF_API int accept4(int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	return twf_accept_common("accept4", fd, addr, alen, flags, true);
}

TWF_API int connect(int fd, const struct sockaddr *addr, socklen_t alen)
{
	twf_connect_fn real = REAL(twf_connect_fn, R_CONNECT);
	NEED(real);
	twf_fd *e = addr && addr->sa_family != AF_UNSPEC ? twf_lookup(fd) : NULL;
	if (!e)
		return real(fd, addr, alen);
	uint64_t n = atomic_fetch_add(&g_n.calls, 1) + 1;
	uint32_t conn = twf_conn_of(e);
	if (twf_failcall_due(n) && twf_failcall_claim()) {
		atomic_fetch_add(&g_n.failcalls, 1);
		twf_log("failcall ECONNREFUSED", "connect", fd, conn, 1);
		errno = ECONNREFUSED;
		return -1;
	}
	/* No EINTR or EAGAIN here: after EINTR the kernel goes on connecting,
	 * which a fault injected before the call could not imitate. */
	return real(fd, addr, alen);
}

/* ---- cross-memory attach ------------------------------------------------------- */

/* Cuts both vectors to `cap` bytes; returns false when no cut is needed. */
static bool twf_pvm_cut(const struct iovec *l, unsigned long ln, const struct iovec *rv,
                        unsigned long rn, size_t cap, struct iovec *lo, int *lno,
                        struct iovec *ro, int *rno)
{
	size_t lt = twf_iov_total(l, ln), rt = twf_iov_total(rv, rn);
	if ((lt < rt ? lt : rt) <= cap)
		return false;
	*lno = twf_iov_cut(l, ln, cap, lo);
	*rno = twf_iov_cut(rv, rn, cap, ro);
	return *lno > 0 && *rno > 0;
}

static ssize_t twf_pvm(enum twf_real_id id, pid_t pid, const struct iovec *l, unsigned long ln,
                       const struct iovec *rv, unsigned long rn, unsigned long flags)
{
	twf_pvm_fn real = REAL(twf_pvm_fn, id);
	NEED(real);
	if (!twf_ready() || !g_cfg.short_max)
		return real(pid, l, ln, rv, rn, flags);
	uint64_t k = atomic_fetch_add(&g_n.cma_calls, 1) + 1;
	uint64_t cap = g_cfg.short_min;
	if (g_cfg.short_max > g_cfg.short_min)
		cap += twf_mix64(twf_draw(g_cfg.seed, UINT64_C(3) << 32, k)) %
		       (g_cfg.short_max - g_cfg.short_min + 1);
	struct iovec lo[TWF_IOV_MAX], ro[TWF_IOV_MAX];
	int lno, rno;
	if (!twf_pvm_cut(l, ln, rv, rn, (size_t)cap, lo, &lno, ro, &rno))
		return real(pid, l, ln, rv, rn, flags);
	atomic_fetch_add(&g_n.cma_shorts, 1);
	return real(pid, lo, (unsigned long)lno, ro, (unsigned long)rno, flags);
}

TWF_API ssize_t process_vm_readv(pid_t pid, const struct iovec *l, unsigned long ln,
                                 const struct iovec *rv, unsigned long rn, unsigned long flags)
{
	return twf_pvm(R_PVM_READV, pid, l, ln, rv, rn, flags);
}

TWF_API ssize_t process_vm_writev(pid_t pid, const struct iovec *l, unsigned long ln,
                                  const struct iovec *rv, unsigned long rn, unsigned long flags)
{
	return twf_pvm(R_PVM_WRITEV, pid, l, ln, rv, rn, flags);
}

/* ---- counters, summary, control ----------------------------------------------------- */

TWF_API void twfault_get_counters(twfault_counters *out)
{
	twfault_counters c;
	c.calls = atomic_load(&g_n.calls);
	c.connections = atomic_load(&g_n.connections);
	c.accepts = atomic_load(&g_n.accepts);
	c.bytes_in = atomic_load(&g_n.bytes_in);
	c.bytes_out = atomic_load(&g_n.bytes_out);
	c.shorts = atomic_load(&g_n.shorts);
	c.eintrs = atomic_load(&g_n.eintrs);
	c.eagains = atomic_load(&g_n.eagains);
	c.resets = atomic_load(&g_n.resets);
	c.emfiles = atomic_load(&g_n.emfiles);
	c.ctruncs = atomic_load(&g_n.ctruncs);
	c.failcalls = atomic_load(&g_n.failcalls);
	c.cma_shorts = atomic_load(&g_n.cma_shorts);
	*out = c;
}

TWF_API int twfault_format_summary(char *buf, unsigned long buflen)
{
	twfault_counters c;
	twfault_get_counters(&c);
	return snprintf(buf, buflen,
	                "twfault: pid=%ld calls=%llu connections=%llu accepts=%llu bytes_in=%llu "
	                "bytes_out=%llu short=%llu eintr=%llu eagain=%llu reset=%llu emfile=%llu "
	                "ctrunc=%llu failcall=%llu cma_short=%llu\n",
	                (long)getpid(), (unsigned long long)c.calls,
	                (unsigned long long)c.connections, (unsigned long long)c.accepts,
	                (unsigned long long)c.bytes_in, (unsigned long long)c.bytes_out,
	                (unsigned long long)c.shorts, (unsigned long long)c.eintrs,
	                (unsigned long long)c.eagains, (unsigned long long)c.resets,
	                (unsigned long long)c.emfiles, (unsigned long long)c.ctruncs,
	                (unsigned long long)c.failcalls, (unsigned long long)c.cma_shorts);
}

TWF_API int twfault_configure(const char *spec, char *err, unsigned long errlen)
{
	(void)twf_ready();
	twf_config c;
	if (twf_config_parse(spec, &c, err, errlen) != 0)
		return -1;
	twf_reset_state();
	g_cfg = c;
	return 0;
}

__attribute__((destructor)) static void twf_destructor(void)
{
	if (atomic_load(&g_init) != 2 || (!g_cfg.summary && !g_cfg.report[0]))
		return;
	int saved = errno;
	char line[512];
	int n = twfault_format_summary(line, sizeof(line));
	if (n > 0 && (size_t)n >= sizeof(line))
		n = (int)sizeof(line) - 1;
	if (g_cfg.summary && n > 0)
		twf_say(line);
	if (g_cfg.report[0] && n > 0) {
		int fd = open(g_cfg.report, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			twf_write_fn w = REAL(twf_write_fn, R_WRITE);
			if (w && w(fd, line, (size_t)n) != n)
				twf_say("twfault: could not write the report\n");
			(void)close(fd);
		} else {
			twf_say("twfault: could not open the report file ");
			twf_say(g_cfg.report);
			twf_say("\n");
		}
	}
	errno = saved;
}
