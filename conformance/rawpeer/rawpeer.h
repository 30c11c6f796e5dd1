/*
 * rawpeer.h - a raw TCP peer of the uv transport, the one that the
 * conformance harness and the library's own tests (ref/tests/raw_util.h)
 * share: framed writes and reads (u64le length + bytes, spec/wire.md /
 * reference §2.2), hand-built packets, and a minimal reader of the nop
 * encoding, enough to pull the address and registration ids out of a
 * BrochureAnswer.
 *
 * Deliberately independent of ref/src/wire: the harness must not judge an
 * implementation with that implementation's own codec. Blocking sockets with
 * timeouts; single-threaded; libc only (library tw_rawpeer).
 */
#ifndef TWC_RAWPEER_RAWPEER_H
#define TWC_RAWPEER_RAWPEER_H

#include <stddef.h>
#include <stdint.h>

/* Connects to "A.B.C.D:port" (or a "uv://" URL); returns the fd or -1. */
int twc_raw_connect(const char *addr, int timeout_ms, char *err, size_t errlen);

/* Listens on 127.0.0.1 with an ephemeral port; returns the fd (port in
 * *port_out) or -1. */
int twc_raw_listen(int *port_out, char *err, size_t errlen);

/* Accepts one connection within timeout_ms; returns the fd or -1. */
int twc_raw_accept(int lfd, int timeout_ms, char *err, size_t errlen);

/* Sends raw bytes; returns 0 or -1 (err). */
int twc_raw_send(int fd, const void *buf, size_t len, char *err, size_t errlen);

/* Sends one uv frame: u64le(len) followed by the bytes. */
int twc_raw_send_frame(int fd, const void *body, size_t len, char *err, size_t errlen);

/* Reads exactly n bytes within timeout_ms: 0, -1 on error or timeout (err),
 * -2 on a clean EOF before any byte. */
int twc_raw_recv_exact(int fd, void *buf, size_t n, int timeout_ms, char *err, size_t errlen);

/* Reads one uv frame (at most `cap` bytes of body) within timeout_ms.
 * Returns the body length, -1 on error/timeout (err), -2 on a clean EOF
 * before any byte. */
long twc_raw_recv_frame(int fd, unsigned char *body, size_t cap, int timeout_ms, char *err,
                       size_t errlen);

/* Waits up to timeout_ms for the peer to close: 1 = EOF or reset seen,
 * 0 = still open (bytes that arrive meanwhile are discarded). */
int twc_raw_wait_closed(int fd, int timeout_ms);

/* The parts of a BrochureAnswer (reference §3.6) a raw client needs. */
typedef struct twc_raw_answer {
	char transport[32];
	char address[128];
	uint64_t reply_id;        /* transportRegistrationIds[1] */
	int has_descriptor_id;
	uint64_t descriptor_id;   /* transportRegistrationIds[0], if the transport changed */
	int has_basic;
	uint64_t basic_id;        /* channelRegistrationIds["basic"][0] */
	char channels[128];       /* the channels of channelRegistrationIds, comma-separated */
	int has_ext;
	uint64_t ext_mask;        /* transportRegistrationIds[0x74770001], spec/wire.md 8.1 */
	int has_mpt;
	uint64_t mpt_id;          /* channelRegistrationIds["mpt"][0], its control connection */
	char other[32];           /* the first channel besides basic and mpt, */
	uint64_t other_ids[4];    /* and its registration ids, one per connection */
	int other_n;
} twc_raw_answer;

/* One lane of an mpt ServerHello (spec/wire.md 4.3). */
typedef struct twc_raw_lane {
	char address[128];
	uint64_t id;
} twc_raw_lane;

/* Parses an mpt ServerHello packet into at most `max` lanes. */
int twc_raw_parse_server_hello(const unsigned char *b, size_t n, twc_raw_lane *lanes, int max,
                               int *count_out, char *err, size_t errlen);

/* Parses a BrochureAnswer body; 0 on success, -1 with the reason. */
int twc_raw_parse_answer(const unsigned char *b, size_t n, twc_raw_answer *out, char *err,
                        size_t errlen);

/* Canned packets (reference §3.3, §3.4, §3.7, Appendix B). */
extern const unsigned char twc_raw_brochure_uv_basic[];
extern const size_t twc_raw_brochure_uv_basic_len;

/* Builds Packet{SpontaneousConnection{name}} into buf; returns its length. */
size_t twc_raw_hello(const char *name, unsigned char *buf, size_t cap);
/* Builds Packet{RequestedConnection{id}} into buf; returns its length. */
size_t twc_raw_requested(uint64_t id, unsigned char *buf, size_t cap);

/* Builds Packet{Brochure} offering one transport (name, domain descriptor)
 * and the basic channel for cpu:0 (descriptor "any"); twc_raw_brochure("uv",
 * "uv:*", ...) is twc_raw_brochure_uv_basic. Returns its length, or 0 when it
 * does not fit or a string is 128 bytes or longer. */
size_t twc_raw_brochure(const char *transport, const char *domain, unsigned char *buf,
                        size_t cap);
/* The same, offering `channel` instead of basic, with `descriptor` for
 * cpu:0 (xth: the process it claims to be). */
size_t twc_raw_brochure_with(const char *transport, const char *domain, const char *channel,
                             const char *descriptor, unsigned char *buf, size_t cap);

/* This host's facts, read from /proc (spec/wire.md 6): the boot id (36
 * characters), and a namespace's id as "<st_dev>_<st_ino>" in lowercase hex
 * of /proc/self/ns/<ns>. false when unreadable. */
int twc_raw_boot_id(char *out, size_t len);
int twc_raw_ns_id(const char *ns, char *out, size_t len);
/* This process's cma device descriptor for cpu:0, built as stock builds it
 * (spec 6.a: boot id, pid and user namespaces, uid, gid, capabilities). 0
 * when a fact cannot be read. */
int twc_raw_cma_descriptor(char *out, size_t len);
/* A nop unsigned integer (its narrowest form) into b (9 bytes at most). */
size_t twc_raw_u64(uint64_t v, unsigned char *b);
/* The same for process pid's namespace. */
int twc_raw_ns_id_of(int pid, const char *ns, char *out, size_t len);
/* The process holding the other end of the loopback TCP connection fd (an
 * IUT's accepted socket: whichever process of the host that is, whatever
 * wrapper started it), found through /proc/net/tcp{,6} and /proc/<pid>/fd;
 * -1 while it has not been accepted, or when /proc does not say. */
int twc_raw_peer_pid(int fd);

#endif /* TWC_RAWPEER_RAWPEER_H */
