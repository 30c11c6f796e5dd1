/*
 * twfault.h - what libtwfault exports besides the system calls it wraps:
 * its counters and a way to change the plan at run time. Programs under test
 * never need this; the shim's own tests do (they find these functions with
 * dlsym(RTLD_DEFAULT, ...) when the shim is preloaded, or link them when the
 * shim is compiled in).
 *
 * It must not grow into a general API: the shim is configured from the
 * environment (TWFAULT, config.h) so that it reaches programs we cannot edit.
 */
#ifndef TW_FAULTS_SHIM_TWFAULT_H
#define TW_FAULTS_SHIM_TWFAULT_H

#include <stdint.h>

/* Everything the shim saw and did since the process started (or since the
 * last twfault_configure). "Faultable" = a socket that passes fds=. */
typedef struct twfault_counters {
	uint64_t calls;       /* wrapped calls on faultable sockets (failcall counts these) */
	uint64_t connections; /* stream connections seen (connect + accept, and others on first use) */
	uint64_t accepts;     /* accept/accept4 calls on faultable listeners */
	uint64_t bytes_in, bytes_out; /* moved by the real calls on faultable stream sockets */
	uint64_t shorts;      /* calls cut short (cap below what was asked) */
	uint64_t eintrs, eagains, resets, emfiles, ctruncs, failcalls; /* faults injected */
	uint64_t cma_shorts;  /* process_vm_readv/writev calls cut short */
} twfault_counters;

/* Copies the counters (each read atomically; the set is not a snapshot). */
void twfault_get_counters(twfault_counters *out);

/* Replaces the plan with `spec` (TWFAULT syntax) and zeroes the counters and
 * every per-connection state. Returns 0, or -1 with a message in err. Not
 * safe while other threads are inside wrapped calls: for tests. */
int twfault_configure(const char *spec, char *err, unsigned long errlen);

/* Formats the one-line summary that summary=1 and report= write at exit:
 * "twfault: pid=N calls=N connections=N ... failcall=N". Returns its length. */
int twfault_format_summary(char *buf, unsigned long buflen);

#endif /* TW_FAULTS_SHIM_TWFAULT_H */
