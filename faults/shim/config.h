/*
 * config.h - the fault plan of libtwfault: what the TWFAULT environment
 * variable asks for, parsed into plain numbers the interposers can test
 * without allocating, locking or touching floating point (they may run in a
 * signal handler).
 *
 * The grammar (docs/faults.md has the full table):
 *   TWFAULT = item { "," item }     item = key "=" value | "off"
 *   seed=N  fds=sockets|tcp|unix  short=N | short=A-B  eintr=P  eagain=P
 *   reset=K:B  emfile=N[:M]  ctrunc=N|all  failcall=N  report=PATH
 *   summary=0|1  verbose=0|1
 * P is a probability ("0.05", "5%", "1"); N, A, B, M are counts or sizes with
 * an optional k/m/g suffix (KiB, MiB, GiB).
 *
 * This file must not know about file descriptors or system calls: it is a
 * pure function from a string to a plan, so it is unit-tested on its own and
 * shared with the launcher (twfault-run checks a spec before it preloads).
 */
#ifndef TW_FAULTS_SHIM_CONFIG_H
#define TW_FAULTS_SHIM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Which sockets faults apply to (other fds are never touched). */
enum twf_fds {
	TWF_FDS_SOCKETS = 0, /* every socket (TCP, UNIX, others) */
	TWF_FDS_TCP = 1,     /* AF_INET and AF_INET6 sockets only */
	TWF_FDS_UNIX = 2,    /* AF_UNIX sockets only */
};

#define TWF_PPM 1000000u      /* probabilities are in parts per million */
#define TWF_REPORT_MAX 512

typedef struct twf_config {
	uint64_t seed;
	enum twf_fds fds;
	/* short transfers: each read/write-family call on a stream socket (and
	 * each process_vm_readv/writev) moves at most a cap drawn uniformly from
	 * [short_min, short_max]; 0 = off */
	uint64_t short_min, short_max;
	uint32_t eintr_ppm;  /* chance of EINTR before a call does anything */
	uint32_t eagain_ppm; /* chance of EAGAIN, non-blocking fds only */
	/* ECONNRESET after reset_bytes bytes (read + written) on connection
	 * number reset_conn (1-based, in order of connect/accept; 0 = the first
	 * connection to get there); once per process */
	bool reset_on;
	uint32_t reset_conn;
	uint64_t reset_bytes;
	/* EMFILE from accept calls emfile_at .. emfile_at + emfile_count - 1
	 * (1-based count of accept calls on faultable listeners; 0 = off) */
	uint64_t emfile_at, emfile_count;
	/* SCM_RIGHTS truncation: the ctrunc_at-th recvmsg that receives
	 * descriptors loses them (closed, MSG_CTRUNC set); ctrunc_all = every one */
	uint64_t ctrunc_at;
	bool ctrunc_all;
	/* the failcall_at-th faultable socket call fails (1-based, process-wide;
	 * 0 = off), or the first call after it that can (an accept with nothing
	 * queued cannot: it answers EAGAIN and the fault stays due); once: ECONNRESET for transfers, ECONNABORTED for accept,
	 * ECONNREFUSED for connect */
	uint64_t failcall_at;
	char report[TWF_REPORT_MAX]; /* append the summary here at exit ("" = no) */
	bool summary;                /* print the summary on stderr at exit */
	bool verbose;                /* one stderr line per injected fault */
} twf_config;

/* Parses `spec` (NULL or "" = no faults, only counting) into *out. Returns 0,
 * or -1 with a message naming the bad item in err; *out is written only on
 * success. */
int twf_config_parse(const char *spec, twf_config *out, char *err, size_t errlen);

/* splitmix64: the shim's only source of randomness. */
static inline uint64_t twf_mix64(uint64_t z)
{
	z += UINT64_C(0x9E3779B97F4A7C15);
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* The random word for call number `call` on connection `conn` (both
 * 1-based; conn 0 = a socket that is not a connection): a pure function, so
 * one seed gives the same faults on the same connection whatever the
 * threads did elsewhere. */
static inline uint64_t twf_draw(uint64_t seed, uint64_t conn, uint64_t call)
{
	return twf_mix64(twf_mix64(seed ^ twf_mix64(conn)) ^ call);
}

#endif /* TW_FAULTS_SHIM_CONFIG_H */
