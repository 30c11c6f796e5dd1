/*
 * raw_util.h - a hand-written TensorPipe peer for tests: the raw uv peer
 * the conformance harness uses too (conformance/rawpeer, tw_rawpeer), with
 * every failure ending the test, plus the packets our codec encodes, so a
 * test can play a stock-like or a broken client or server byte by byte.
 * Tests only.
 */
#ifndef TW_TESTS_RAW_UTIL_H
#define TW_TESTS_RAW_UTIL_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h> /* shutdown(), for tests that half-close */

#include "rawpeer.h"
#include "test_util.h"
#include "wire/packets.h"

/* Spec 3.3 / 3.4 vectors (brochure-uv-basic): the hello of a context named
 * "" and the Brochure {uv: "uv:*"}, {basic: {cpu:0: "any"}}. */
static const uint8_t raw_hello_empty[] = { 0xb8, 0x00, 0xb9, 0x01, 0xbd, 0x00 };
static const uint8_t raw_brochure_uv_basic[] = {
	0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x02, 0x75, 0x76, 0xbd, 0x04, 0x75, 0x76, 0x3a,
	0x2a, 0xbb, 0x01, 0xbd, 0x05, 0x62, 0x61, 0x73, 0x69, 0x63, 0xbb, 0x01, 0xb9,
	0x02, 0xbd, 0x03, 0x63, 0x70, 0x75, 0x00, 0xbd, 0x03, 0x61, 0x6e, 0x79,
};

/* ---- raw socket helpers: tw_rawpeer (conformance/rawpeer), asserting ---------------- */

/* Waits long enough for anything a test does; the watchdog bounds the rest. */
#define RAW_WAIT_MS 30000

static inline int raw_connect(int port)
{
	char addr[32], err[256];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	int fd = twc_raw_connect(addr, RAW_WAIT_MS, err, sizeof(err));
	if (fd < 0)
		fprintf(stderr, "%s\n", err);
	CHECK(fd >= 0);
	return fd;
}

static inline void raw_send(int fd, const void *p, size_t n)
{
	char err[256];
	CHECK(twc_raw_send(fd, p, n, err, sizeof(err)) == 0);
}

static inline void raw_send_frame(int fd, const void *p, size_t n)
{
	char err[256];
	if (twc_raw_send_frame(fd, p, n, err, sizeof(err)) != 0) {
		fprintf(stderr, "raw_send_frame of %zu bytes: %s\n", n, err);
		abort();
	}
}

static inline void raw_send_header(int fd, uint64_t n)
{
	uint8_t h[8];
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)(n >> (8 * i));
	raw_send(fd, h, 8);
}

/* Reads exactly n bytes; false on EOF or reset. */
static inline bool raw_recv(int fd, void *p, size_t n)
{
	char err[256];
	return twc_raw_recv_exact(fd, p, n, RAW_WAIT_MS, err, sizeof(err)) == 0;
}

/* One frame (below 16 MiB) into a malloc'd buffer; 1 and the frame, 0 for an
 * end of file before the next frame, -1 for a reset (anything else ends the
 * test). */
static inline int raw_try_recv_frame(int fd, uint8_t **buf_out, size_t *len_out)
{
	uint8_t h[8];
	char err[256];
	int rc = twc_raw_recv_exact(fd, h, 8, RAW_WAIT_MS, err, sizeof(err));
	if (rc == -2)
		return 0;
	if (rc != 0 && strstr(err, strerror(ECONNRESET)))
		return -1;
	if (rc != 0)
		fprintf(stderr, "%s\n", err);
	CHECK(rc == 0);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = (n << 8) | h[i];
	CHECK(n < (1u << 24));
	uint8_t *b = malloc(n ? n : 1);
	CHECK(b);
	CHECK(n == 0 || twc_raw_recv_exact(fd, b, n, RAW_WAIT_MS, err, sizeof(err)) == 0);
	*buf_out = b;
	*len_out = n;
	return 1;
}

/* One frame (below 1 MiB) into a malloc'd buffer. */
static inline uint8_t *raw_recv_frame(int fd, size_t *len)
{
	uint8_t *b = NULL;
	CHECK(raw_try_recv_frame(fd, &b, len) == 1);
	CHECK(*len < (1u << 20));
	return b;
}

/* True if our side closed the connection (EOF or reset) within 5 s. */
static inline bool raw_closed_by_peer(int fd)
{
	return twc_raw_wait_closed(fd, 5000) == 1;
}

static inline void encode_send(int fd, tw_nop_writer *w)
{
	CHECK(tw__nop_writer_finish(w) == TW_OK);
	raw_send_frame(fd, w->buf, w->len);
	tw__nop_writer_free(w);
}

static inline void send_requested(int fd, uint64_t id)
{
	tw_wire_packet pkt;
	memset(&pkt, 0, sizeof(pkt));
	pkt.kind = TW_PACKET_REQUESTED;
	pkt.registration_id = id;
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_packet(&w, &pkt);
	encode_send(fd, &w);
}

/* Reads the next frame on `fd` and decodes it as a BrochureAnswer; anything
 * else ends the test. Free it with tw__wire_brochure_answer_free. */
static inline void raw_recv_answer(int fd, tw_wire_brochure_answer *a)
{
	size_t n, used;
	char detail[256];
	uint8_t *buf = raw_recv_frame(fd, &n);
	CHECK(tw__wire_decode_brochure_answer(buf, n, a, &used, detail, sizeof(detail)) == TW_OK);
	free(buf);
}

/* hello + Brochure {uv, basic} on the bootstrap connection `fd`, then the
 * answer, which must register exactly R and one basic connection (no
 * transport switch); their ids come back in *id_r and *id_basic. */
static inline void raw_handshake_ids(int fd, uint64_t *id_r, uint64_t *id_basic)
{
	raw_send_frame(fd, raw_hello_empty, sizeof(raw_hello_empty));
	raw_send_frame(fd, raw_brochure_uv_basic, sizeof(raw_brochure_uv_basic));
	tw_wire_brochure_answer a;
	raw_recv_answer(fd, &a);
	CHECK(a.num_transport_ids == 1 && a.transport_ids[0].key == 1);
	CHECK(a.num_channel_ids == 1 && a.channel_ids[0].num_ids == 1);
	*id_r = a.transport_ids[0].id;
	*id_basic = a.channel_ids[0].ids[0];
	tw__wire_brochure_answer_free(&a);
}

/* A listening socket on 127.0.0.1 (the harness side of a raw server). */
static inline int raw_listen(int *port_out)
{
	char err[256];
	int fd = twc_raw_listen(port_out, err, sizeof(err));
	CHECK(fd >= 0);
	return fd;
}

/* Accepts one connection. */
static inline int raw_accept(int lfd)
{
	char err[256];
	int fd = twc_raw_accept(lfd, RAW_WAIT_MS, err, sizeof(err));
	CHECK(fd >= 0);
	return fd;
}

static inline tw_wire_str raw_str(const char *s)
{
	return (tw_wire_str){ (char *)s, strlen(s) };
}

/* A Brochure {uv: "uv:*", and "tensorwire.ext": exts unless NULL} offering
 * one channel on cpu:0 with the given device descriptor. */
static inline void raw_send_brochure(int fd, const char *exts, const char *channel,
                                     const char *descriptor)
{
	tw_wire_kv kv[2] = { { raw_str("uv"), raw_str("uv:*") },
		             { raw_str("tensorwire.ext"), raw_str(exts ? exts : "") } };
	tw_wire_device_desc dd = { { raw_str("cpu"), 0 }, raw_str(descriptor) };
	tw_wire_channel_devices ch = { raw_str(channel), 1, &dd };
	tw_wire_brochure b = { exts ? 2 : 1, kv, 1, &ch };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_brochure(&w, &b);
	encode_send(fd, &w);
}

/* A raw server on 127.0.0.1 (its listening socket in *lfd, its port in
 * *port) that our context c connects to (*p): returns the accepted
 * bootstrap connection. */
static inline int raw_server_for(tw_context *c, int *lfd, int *port, tw_pipe **p)
{
	*lfd = raw_listen(port);
	char url[64];
	snprintf(url, sizeof(url), "uv://127.0.0.1:%d", *port);
	CHECK_OK(tw_context_connect(c, url, p));
	return raw_accept(*lfd);
}

/* A raw server's BrochureAnswer on `boot`: transport uv at 127.0.0.1:port
 * (no switch), the transport ids given (key 1: R), channel basic with
 * registration id 101 for (cpu:0, cpu:0). */
static inline void raw_send_answer_uv_basic(int boot, int port, const tw_wire_id_entry *ids,
                                            size_t num_ids)
{
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	uint64_t basic_id = 101;
	tw_wire_channel_ids cids = { raw_str("basic"), 1, &basic_id };
	tw_wire_device_desc dd = { { raw_str("cpu"), 0 }, raw_str("any") };
	tw_wire_channel_devices cdev = { raw_str("basic"), 1, &dd };
	tw_wire_device_pair pair = { { raw_str("cpu"), 0 }, { raw_str("cpu"), 0 }, raw_str("basic") };
	tw_wire_brochure_answer a = { raw_str("uv"), { addr, strlen(addr) }, num_ids,
		                      (tw_wire_id_entry *)ids, raw_str("uv:*"), 1, &cids, 1, &cdev, 1,
		                      &pair };
	tw_nop_writer w;
	tw__nop_writer_init(&w);
	tw__wire_encode_brochure_answer(&w, &a);
	encode_send(boot, &w);
}

/* A raw server's side of the registered connections: accepts n on lfd,
 * reads each one's RequestedConnection, and puts the connection that
 * registered ids[i] into fds[i]; every id must come. */
static inline void raw_accept_requested(int lfd, size_t n, const uint64_t *ids, int *fds)
{
	for (size_t i = 0; i < n; i++)
		fds[i] = -1;
	for (size_t k = 0; k < n; k++) {
		int fd = raw_accept(lfd);
		size_t len, used;
		char detail[128];
		uint8_t *f = raw_recv_frame(fd, &len);
		tw_wire_packet pkt;
		CHECK(tw__wire_decode_packet(f, len, &pkt, &used, detail, sizeof(detail)) == TW_OK);
		free(f);
		CHECK(pkt.kind == TW_PACKET_REQUESTED);
		for (size_t i = 0; i < n; i++)
			if (pkt.registration_id == ids[i])
				fds[i] = fd;
		tw__wire_packet_free(&pkt);
	}
	for (size_t i = 0; i < n; i++)
		CHECK(fds[i] >= 0);
}

#endif /* TW_TESTS_RAW_UTIL_H */
