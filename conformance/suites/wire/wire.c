/*
 * wire.c - the wire suite's server-side cases: the harness itself is the raw
 * TCP client (harness/rawserver.h) of an IUT listener driven through its
 * adapter. Every case checks that the IUT fails only the offending
 * connection or pipe, keeps running and keeps accepting well-formed clients,
 * plus the case's own rule (what the BrochureAnswer chose, the
 * DescriptorReply bytes, data intact, the error kind the spec names).
 *
 * Sections cite spec/wire.md with the numbered requirement checked
 * ("wire.md 5.2 (5.2.c)"); each requirement is quoted from there. Every case
 * also checks ALWAYS below.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case.h"
#include "rawserver.h"
#include "suites.h"

typedef twc_raw_ctx ctx;

static const unsigned char empty_descriptor[] = {0xb9, 0x03, 0xbd, 0x00, 0xba, 0x00, 0xba, 0x00};
/* ---- what the raw client sends -------------------------------------------------------------------------- */

static int send_close_before_hello(ctx *c)
{
	int fd = twc_raw_open(c);
	if (fd < 0)
		return -1;
	close(fd);
	c->nfds--;
	return 0;
}

static int send_frame_only(ctx *c, const unsigned char *b, size_t n)
{
	int fd = twc_raw_open(c);
	return fd < 0 ? -1 : twc_raw_frame(c, fd, b, n);
}

static int send_bad_type_byte(ctx *c)
{
	static const unsigned char b[] = {0xff, 0xff, 0xff, 0xff, 0xff};
	return send_frame_only(c, b, sizeof(b));
}

static int send_bad_variant(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0x02, 0xb9, 0x01, 0x00};
	return send_frame_only(c, b, sizeof(b));
}

static int send_empty_variant(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0xff, 0xbe};
	return send_frame_only(c, b, sizeof(b));
}

static int send_unknown_id(ctx *c)
{
	unsigned char b[16];
	return send_frame_only(c, b, twc_raw_requested(12345, b, sizeof(b)));
}

static int send_truncated_hello(ctx *c)
{
	static const unsigned char b[] = {0xb8, 0x00, 0xb9, 0x01, 0xbd, 0x40};
	return send_frame_only(c, b, sizeof(b));
}

static int send_huge_length(ctx *c)
{
	static const unsigned char hdr[] = {0, 0, 0, 0, 0, 0, 0, 0x40}; /* 2^62 */
	int fd = twc_raw_open(c);
	if (fd < 0)
		return -1;
	if (twc_raw_send(fd, hdr, sizeof(hdr), c->err, sizeof(c->err))) {
		twc_raw_note(c, "%.250s", c->err);
		return -1;
	}
	return 0;
}

static int send_silent_mid_header(ctx *c)
{
	static const unsigned char half[] = {0x09, 0x00, 0x00, 0x00}; /* 4 of 8 header bytes */
	int fd = twc_raw_open(c);
	if (fd < 0)
		return -1;
	if (twc_raw_send(fd, half, sizeof(half), c->err, sizeof(c->err))) {
		twc_raw_note(c, "%.250s", c->err);
		return -1;
	}
	return 0; /* and stay connected, silent, while the listener is probed */
}

static int send_silent_mid_body(ctx *c)
{
	/* header announces 64 bytes; only the 6 of a hello follow */
	static const unsigned char b[] = {0x40, 0, 0, 0, 0, 0, 0, 0, 0xb8, 0x00, 0xb9, 0x01, 0xbd,
	                                  0x00};
	int fd = twc_raw_open(c);
	if (fd < 0)
		return -1;
	if (twc_raw_send(fd, b, sizeof(b), c->err, sizeof(c->err))) {
		twc_raw_note(c, "%.250s", c->err);
		return -1;
	}
	return 0;
}

static int send_trailing_junk(ctx *c)
{
	unsigned char b[64];
	int fd = twc_raw_open(c);
	if (fd < 0)
		return -1;
	size_t n = twc_raw_hello("junk", b, sizeof(b));
	memcpy(b + n, "\xde\xad\xbe\xef", 4);
	if (twc_raw_frame(c, fd, b, n + 4) ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, true))
		return -1;
	return twc_raw_frame(c, fd, empty_descriptor, sizeof(empty_descriptor));
}

static int send_no_common_transport(ctx *c)
{
	/* {ibv: "ibv:*"}, {basic: {cpu:0: "any"}} */
	static const unsigned char br[] = {
		0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x03, 'i', 'b', 'v', 0xbd, 0x05, 'i', 'b', 'v', ':', '*',
		0xbb, 0x01, 0xbd, 0x05, 'b', 'a', 's', 'i', 'c', 0xbb, 0x01, 0xb9, 0x02, 0xbd,
		0x03, 'c', 'p', 'u', 0x00, 0xbd, 0x03, 'a', 'n', 'y'};
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "nocommon") || twc_raw_frame(c, fd, br, sizeof(br)))
		return -1;
	return 0;
}

static int send_no_channels(ctx *c)
{
	/* {uv: "uv:*"}, {} */
	static const unsigned char br[] = {0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x02, 'u', 'v',
	                                   0xbd, 0x04, 'u', 'v', ':', '*', 0xbb, 0x00};
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "nochan") || twc_raw_handshake(c, fd, br, sizeof(br), true))
		return -1;
	return twc_raw_frame(c, fd, empty_descriptor, sizeof(empty_descriptor));
}

static int send_unknown_names(ctx *c)
{
	/* {uv: "uv:*", zz: "zz:*"}, {basic: {cpu:0: "any"}, yy: {cpu:0: "any"}} */
	static const unsigned char br[] = {
		0xb9, 0x02,
		0xbb, 0x02, 0xbd, 0x02, 'u', 'v', 0xbd, 0x04, 'u', 'v', ':', '*',
		0xbd, 0x02, 'z', 'z', 0xbd, 0x04, 'z', 'z', ':', '*',
		0xbb, 0x02, 0xbd, 0x05, 'b', 'a', 's', 'i', 'c', 0xbb, 0x01, 0xb9, 0x02, 0xbd, 0x03,
		'c', 'p', 'u', 0x00, 0xbd, 0x03, 'a', 'n', 'y',
		0xbd, 0x02, 'y', 'y', 0xbb, 0x01, 0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00, 0xbd,
		0x03, 'a', 'n', 'y'};
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "names") || twc_raw_handshake(c, fd, br, sizeof(br), true))
		return -1;
	if (strcmp(c->ans.transport, "uv") != 0)
		twc_raw_check(c, "the answer chose transport '%s', not 'uv'", c->ans.transport);
	if (strcmp(c->ans.channels, "basic") != 0)
		twc_raw_check(c, "the answer selected channels '%s', not just 'basic'", c->ans.channels);
	return twc_raw_frame(c, fd, empty_descriptor, sizeof(empty_descriptor));
}

/* Appends v canonically (spec 1.3), as a uint64 (a count) or, `sign`, as
 * the int32 of a Device's index (v < 2^31). */
static size_t put_int(unsigned char *p, uint32_t v, bool sign)
{
	if (v < 0x80) {
		p[0] = (unsigned char)v;
		return 1;
	}
	/* past the fixints: a signed value of 128 or more needs I16 at least */
	size_t w = !sign && v < 0x100 ? 1 : v < (sign ? 0x8000u : 0x10000u) ? 2 : 4;
	p[0] = (unsigned char)((sign ? 0x84 : 0x80) + (w == 1 ? 0 : w == 2 ? 1 : 2));
	for (size_t i = 0; i < w; i++)
		p[1 + i] = (unsigned char)(v >> (8 * i));
	return 1 + w;
}

enum { MANY_DEVICES = 200000 };

static int send_many_devices(ctx *c)
{
	/* {uv: "uv:*"}, {basic: {cpu:0: "any", cpu:1: "any", ... cpu:199999: "any"}} */
	static const unsigned char head[] = { 0xb9, 0x02, 0xbb, 0x01, 0xbd, 0x02, 'u', 'v', 0xbd, 0x04,
		                              'u', 'v', ':', '*', 0xbb, 0x01, 0xbd, 0x05, 'b', 'a',
		                              's', 'i', 'c', 0xbb };
	static const unsigned char dev[] = { 0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u' };
	static const unsigned char any[] = { 0xbd, 0x03, 'a', 'n', 'y' };
	size_t cap = sizeof(head) + 5 + (size_t)MANY_DEVICES * (sizeof(dev) + 5 + sizeof(any));
	unsigned char *br = malloc(cap), *p = br;
	if (!br) {
		twc_raw_note(c, "out of memory for a Brochure of %zu bytes", cap);
		return -1;
	}
	memcpy(p, head, sizeof(head));
	p += sizeof(head);
	p += put_int(p, MANY_DEVICES, false);
	for (uint32_t i = 0; i < MANY_DEVICES; i++) {
		memcpy(p, dev, sizeof(dev));
		p += sizeof(dev);
		p += put_int(p, i, true);
		memcpy(p, any, sizeof(any));
		p += sizeof(any);
	}
	int fd = twc_raw_open(c);
	int rc = fd < 0 || twc_raw_say_hello(c, fd, "devices") ||
	                 twc_raw_frame(c, fd, br, (size_t)(p - br))
	                 ? -1
	                 : 0;
	free(br);
	return rc;
}

static int send_reused_registration_id(ctx *c)
{
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "reuse") ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, true))
		return -1;
	/* a second connection claiming the descriptor-reply id again */
	int dup = twc_raw_open_requested(c, "duplicate", c->ans.reply_id);
	if (dup < 0)
		return -1;
	if (twc_raw_frame(c, fd, empty_descriptor, sizeof(empty_descriptor)))
		return -1;
	if (twc_raw_wait_closed(dup, 1000) != 1)
		twc_raw_check(c, "a connection reusing registration id %llu was not closed within 1 s",
		       (unsigned long long)c->ans.reply_id);
	return 0;
}

static int send_truncated_descriptor(ctx *c)
{
	static const unsigned char d[] = {0xb9, 0x03, 0xbd, 0x01};
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "truncdesc") ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, true))
		return -1;
	return twc_raw_frame(c, fd, d, sizeof(d));
}

static int send_huge_descriptor(ctx *c)
{
	static const unsigned char hdr[] = {0, 0, 0, 0, 0, 0, 0, 0x40}; /* 2^62 */
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "hugedesc") ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, true))
		return -1;
	if (twc_raw_send(fd, hdr, sizeof(hdr), c->err, sizeof(c->err))) {
		twc_raw_note(c, "%.250s", c->err);
		return -1;
	}
	return 0;
}

static int send_payload_mismatch(ctx *c)
{
	/* Descriptor{"", [Payload{8, ""}], []}, then a 9-byte payload frame */
	static const unsigned char d[] = {0xb9, 0x03, 0xbd, 0x00, 0xba, 0x01, 0xb9,
	                                  0x02, 0x08, 0xbd, 0x00, 0xba, 0x00};
	c->want_read = true;
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "mismatch") ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, true))
		return -1;
	return twc_raw_frame(c, fd, d, sizeof(d)) || twc_raw_frame(c, fd, "123456789", 9) ? -1 : 0;
}

/* Descriptor{"", [], [Tensor{16, cpu:0, cpu:0, ""}]} */
static const unsigned char one_tensor_descriptor[] = {
	0xb9, 0x03, 0xbd, 0x00, 0xba, 0x00, 0xba, 0x01, 0xb9, 0x04, 0x10,
	0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00,
	0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00, 0xbd, 0x00};

static int send_tensor_mismatch(ctx *c)
{
	unsigned char t[17];
	c->want_read = true;
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "tmismatch") ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, true))
		return -1;
	if (c->basic_fd <= 0) {
		twc_raw_note(c, "the answer selected no basic channel");
		return -1;
	}
	twc_agent_gen_fill(t, sizeof(t), 5);
	return twc_raw_frame(c, fd, one_tensor_descriptor, sizeof(one_tensor_descriptor)) ||
	       twc_raw_frame(c, c->basic_fd, t, sizeof(t)) ? -1 : 0;
}

/* The start of the first readable mapping of process pid; 0 if none. */
static uint64_t readable_address(int pid)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *f = fopen(path, "r");
	unsigned long long start = 0;
	char perms[8];
	while (f && !start && fgets(line, sizeof(line), f))
		if (sscanf(line, "%llx-%*[0-9a-f] %7s", &start, perms) != 2 || perms[0] != 'r')
			start = 0;
	if (f)
		fclose(f);
	return start;
}

/* (4.5.b) The raw client claims to be the IUT's own process: it offers xth
 * with the descriptor any local user can build from /proc (boot id, the
 * IUT's pid namespace and pid), gets xth selected, and sends a 16-byte
 * tensor whose xth Descriptor names memory of the IUT by address: an
 * unmapped page, or the IUT's first readable mapping. */
static int send_xth_forged(ctx *c, bool mapped)
{
	c->want_read = true;
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "xth-forged"))
		return -1;
	int pid = -1;
	for (int i = 0; i < 300 && pid < 0; i++)
		if ((pid = twc_raw_peer_pid(fd)) < 0)
			usleep(10000);
	char boot[64], pidns[64], desc[160];
	if (pid < 0 || !twc_raw_boot_id(boot, sizeof(boot)) ||
	    !twc_raw_ns_id_of(pid, "pid", pidns, sizeof(pidns))) {
		twc_raw_note(c, "cannot tell the IUT's process from /proc (pid %d)", pid);
		return -1;
	}
	snprintf(desc, sizeof(desc), "%s_%s_%d", boot, pidns, pid);
	uint64_t ptr = mapped ? readable_address(pid) : 0x1000;
	if (!ptr) {
		twc_raw_note(c, "no readable mapping in /proc/%d/maps", pid);
		return -1;
	}
	printf("# claiming to be process %d (%s); pointer 0x%llx\n", pid, desc,
	       (unsigned long long)ptr);
	unsigned char br[512];
	size_t bl = twc_raw_brochure_with("uv", "uv:*", "xth", desc, br, sizeof(br));
	if (!bl || twc_raw_handshake(c, fd, br, bl, true))
		return -1;
	if (strcmp(c->ans.other, "xth") != 0 || c->ans.other_n != 2) {
		twc_raw_note(c, "the answer did not select xth with 2 connections (channels: %s)",
		             c->ans.channels);
		return -1;
	}
	int x0 = twc_raw_open_requested(c, "xth connection 0", c->ans.other_ids[0]);
	if (x0 < 0 || twc_raw_open_requested(c, "xth connection 1", c->ans.other_ids[1]) < 0)
		return -1;
	unsigned char d[11] = { 0xb9, 0x01, 0x83 }; /* xth Descriptor {ptr} */
	for (int i = 0; i < 8; i++)
		d[3 + i] = (unsigned char)(ptr >> (8 * i));
	return twc_raw_frame(c, fd, one_tensor_descriptor, sizeof(one_tensor_descriptor)) ||
	               twc_raw_frame(c, x0, d, sizeof(d))
	           ? -1
	           : 0;
}

static int send_xth_unmapped(ctx *c)
{
	return send_xth_forged(c, false);
}

static int send_xth_mapped(ctx *c)
{
	return send_xth_forged(c, true);
}

/* (4.4.d) The raw client as a well-formed cma peer of the IUT: it offers
 * cma with its own descriptor (same host, user and namespaces as the IUT,
 * its child), gets cma selected and sends a 16-byte tensor whose cma
 * Descriptor names process `pid` and address `ptr`. */
static int send_cma_tensor(ctx *c, int pid, const void *ptr, uint64_t seed)
{
	/* under YAMA ptrace_scope 1 the IUT, our child, may copy from us only
	 * with our consent */
	(void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	c->want_read = true;
	c->nexpect = 1;
	c->expect[0] = (twc_agent_buf){.len = 16, .seed = seed};
	char desc[512];
	unsigned char br[1024];
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "cma-raw"))
		return -1;
	size_t bl = twc_raw_cma_descriptor(desc, sizeof(desc))
	                ? twc_raw_brochure_with("uv", "uv:*", "cma", desc, br, sizeof(br))
	                : 0;
	if (!bl) {
		twc_raw_note(c, "cannot build a Brochure with this process's cma descriptor");
		return -1;
	}
	if (twc_raw_handshake(c, fd, br, bl, true))
		return -1;
	if (strcmp(c->ans.other, "cma") != 0 || c->ans.other_n != 2) {
		char scope[8] = "";
		FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
		if (f && fgets(scope, sizeof(scope), f) && scope[0] >= '2')
			twc_raw_skip(c, "YAMA ptrace_scope %c: no process may copy from another here, so "
			                "cma is not offered", scope[0]);
		else
			twc_raw_note(c, "the answer did not select cma with 2 connections (channels: %s)",
			             c->ans.channels);
		if (f)
			fclose(f);
		return -1;
	}
	int x0 = twc_raw_open_requested(c, "cma connection 0", c->ans.other_ids[0]);
	if (x0 < 0 || twc_raw_open_requested(c, "cma connection 1", c->ans.other_ids[1]) < 0)
		return -1;
	unsigned char d[24] = { 0xb9, 0x02 }; /* cma Descriptor {pid, ptr} */
	size_t k = 2;
	k += twc_raw_u64((uint64_t)pid, d + k);
	k += twc_raw_u64((uint64_t)(uintptr_t)ptr, d + k);
	printf("# cma Descriptor: pid %d (the raw client is %d), address %p\n", pid, (int)getpid(),
	       ptr);
	return twc_raw_frame(c, fd, one_tensor_descriptor, sizeof(one_tensor_descriptor)) ||
	               twc_raw_frame(c, x0, d, k)
	           ? -1
	           : 0;
}

/* The raw client names its own process: the copy an honest peer asks for. */
static int send_cma_own(ctx *c)
{
	static unsigned char own[16];
	twc_agent_gen_fill(own, sizeof(own), 80);
	return send_cma_tensor(c, (int)getpid(), own, 80);
}

/* The raw client names a third process of the same user (a grandchild of
 * the harness, alive until the run ends) and an address of its memory. */
static int send_cma_other_pid(ctx *c)
{
	static unsigned char secret[16];
	twc_agent_gen_fill(secret, sizeof(secret), 81);
	int life[2], told[2];
	if (c->nfds >= TWC_RAW_MAX_FDS - 5 || pipe(life) != 0) {
		twc_raw_note(c, "cannot make the third process's pipes");
		return -1;
	}
	if (pipe(told) != 0) {
		close(life[0]);
		close(life[1]);
		twc_raw_note(c, "cannot make the third process's pipes");
		return -1;
	}
	pid_t mid = fork();
	if (mid == 0) {
		if (fork() == 0) { /* the third process: it keeps `secret` until `life` closes */
			pid_t me = getpid();
			/* copyable by the IUT under YAMA scope 1 too, as the harness */
			(void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
			/* hold nothing of the harness's: the IUT's stdin must close */
			for (int fd = 0; fd < 65536; fd++)
				if (fd != life[0] && fd != told[1])
					close(fd);
			(void)!write(told[1], &me, sizeof(me));
			char x;
			(void)!read(life[0], &x, 1);
		}
		_exit(0);
	}
	close(life[0]);
	close(told[1]);
	pid_t third = -1;
	if (mid > 0)
		(void)waitpid(mid, NULL, 0);
	if (mid < 0 || read(told[0], &third, sizeof(third)) != (ssize_t)sizeof(third)) {
		close(told[0]);
		close(life[1]);
		twc_raw_note(c, "cannot start the third process");
		return -1;
	}
	close(told[0]);
	c->fds[c->nfds++] = life[1]; /* closed with the run's connections: the third one exits */
	return send_cma_tensor(c, (int)third, secret, 81);
}

static int send_descriptor_reply(ctx *c)
{
	/* Descriptor{"", [], [Tensor{16, cpu:0, cpu:0, ""}, Tensor{8, cpu:0, none, ""}]} */
	static const unsigned char d[] = {
		0xb9, 0x03, 0xbd, 0x00, 0xba, 0x00, 0xba, 0x02,
		0xb9, 0x04, 0x10, 0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00,
		0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00, 0xbd, 0x00,
		0xb9, 0x04, 0x08, 0xb9, 0x02, 0xbd, 0x03, 'c', 'p', 'u', 0x00, 0xbe, 0xbd, 0x00};
	/* DescriptorReply{[cpu:0]}: one device, for the one tensor without a target */
	static const unsigned char want[] = {0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02, 0xbd,
	                                     0x03, 'c', 'p', 'u', 0x00};
	unsigned char t0[16], t1[8], reply[256];
	c->want_read = true;
	c->nexpect = 2;
	c->expect[0] = (twc_agent_buf){.len = 16, .seed = 70};
	c->expect[1] = (twc_agent_buf){.len = 8, .seed = 71};
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "reply") ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, true) ||
	    twc_raw_frame(c, fd, d, sizeof(d)))
		return -1;
	if (c->basic_fd <= 0) {
		twc_raw_note(c, "the answer selected no basic channel");
		return -1;
	}
	/* The IUT sends its DescriptorReply once the application reads. */
	twc_raw_observe(c, 3000, TWC_OBSERVE_STOP_AT_READ);
	long n = twc_raw_recv_frame(c->reply_fd, reply, sizeof(reply), 3000, c->err, sizeof(c->err));
	if (n < 0) {
		twc_raw_check(c, "no DescriptorReply on the descriptor-reply connection: %.150s",
		       n == -2 ? "closed" : c->err);
		return -1;
	}
	if ((size_t)n != sizeof(want) || memcmp(reply, want, sizeof(want)) != 0) {
		char hex[3 * 64 + 1] = "";
		for (long i = 0; i < n && i < 64; i++)
			snprintf(hex + 3 * i, 4, "%02x ", reply[i]);
		twc_raw_check(c, "DescriptorReply is %s, expected b9 01 ba 01 b9 02 bd 03 63 70 75 00", hex);
	}
	twc_agent_gen_fill(t0, sizeof(t0), 70);
	twc_agent_gen_fill(t1, sizeof(t1), 71);
	return twc_raw_frame(c, c->basic_fd, t0, sizeof(t0)) || twc_raw_frame(c, c->basic_fd, t1, sizeof(t1)) ? -1
	                                                                                       : 0;
}

static int send_close_after_answer(ctx *c)
{
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "quitter") ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, false))
		return -1;
	close(fd);
	c->nfds--;
	return 0;
}

/* Stays connected and silent after the answer: only a handshake timeout
 * can end the server pipe (the case asks the IUT for one, 3.8.e). */
static int send_registration_timeout(ctx *c)
{
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "dawdler") ||
	    twc_raw_handshake(c, fd, twc_raw_brochure_uv_basic, twc_raw_brochure_uv_basic_len, false))
		return -1;
	return 0;
}

/* A Brochure offering uv and basic that asks for the extensions `asked`
 * (spec 8.1), handshaken; the answer is in c->ans. */
static int ext_handshake(ctx *c, const char *asked, bool open_conns)
{
	unsigned char b[256];
	size_t n = 0, an = strlen(asked);
	static const unsigned char head[] = { 0xb9, 0x02, 0xbb, 0x02, 0xbd, 0x02, 'u', 'v',
		                              0xbd, 0x04, 'u', 'v', ':', '*', 0xbd, 0x0e };
	static const char name[] = "tensorwire.ext";
	if (an > 60)
		return -1;
	memcpy(b, head, sizeof(head));
	n = sizeof(head);
	memcpy(b + n, name, 14);
	n += 14;
	b[n++] = 0xbd;
	b[n++] = (unsigned char)an;
	memcpy(b + n, asked, an);
	n += an;
	/* the channels, as in the plain uv+basic Brochure (after its transports) */
	memcpy(b + n, twc_raw_brochure_uv_basic + 14, twc_raw_brochure_uv_basic_len - 14);
	n += twc_raw_brochure_uv_basic_len - 14;
	int fd = twc_raw_open(c);
	if (fd < 0 || twc_raw_say_hello(c, fd, "ext") || twc_raw_handshake(c, fd, b, n, open_conns))
		return -1;
	return fd;
}

/* Only names it does not know: no acknowledgement at all (8.1.b, 8.1.c). */
static int send_ext_unknown_only(ctx *c)
{
	if (ext_handshake(c, "zz-unknown,tensorwire.none", false) < 0)
		return -1;
	if (c->ans.has_ext)
		twc_raw_check(c, "asked only for unknown extensions, the answer acknowledges mask 0x%llx "
		                 "(spec 8.1.c: no key 0x74770001)",
		              (unsigned long long)c->ans.ext_mask);
	return 0;
}

/* goodbye among unknown names: at most bit 0 (8.1.b, 8.1.c). */
static int send_ext_bits_asked(ctx *c)
{
	if (ext_handshake(c, "zz-first,goodbye,zz-last", false) < 0)
		return -1;
	if (c->ans.has_ext && (c->ans.ext_mask & ~UINT64_C(1)))
		twc_raw_check(c, "asked for goodbye (bit 0) among unknown names, the answer sets mask "
		                 "0x%llx (spec 8.1.c: only bits asked for and supported)",
		              (unsigned long long)c->ans.ext_mask);
	if (c->ans.has_ext && c->ans.ext_mask == 0)
		twc_raw_check(c, "the answer has key 0x74770001 with no bit set (spec 8.1.c: the key "
		                 "only when an extension asked for is supported)");
	printf("# acknowledgement: %s 0x%llx\n", c->ans.has_ext ? "mask" : "none",
	       (unsigned long long)c->ans.ext_mask);
	return 0;
}

/* After asking for eager: the Descriptor of one 16-byte CPU tensor with a
 * CPU target, then its frame on D, `len` bytes (spec 8.4). Only an IUT that
 * acknowledges eager reads it there; one that does not SKIPs. */
static int send_eager_frame_of(ctx *c, size_t len, const char *rule)
{
	unsigned char t[16];
	c->want_read = true;
	int fd = ext_handshake(c, "eager", true);
	if (fd < 0)
		return -1;
	if (!c->ans.has_ext || !(c->ans.ext_mask & 4)) {
		twc_raw_skip(c, "the IUT does not acknowledge eager (answer mask %s0x%llx, spec 8.4: "
		                "bit 2): it implements no eager tensors, so %s does not apply",
		             c->ans.has_ext ? "" : "absent, ", (unsigned long long)c->ans.ext_mask, rule);
		return 0;
	}
	twc_agent_gen_fill(t, len, 6);
	return twc_raw_frame(c, fd, one_tensor_descriptor, sizeof(one_tensor_descriptor)) ||
	       twc_raw_frame(c, fd, t, len) ? -1 : 0;
}

/* 8.4.b: the tensor's whole frame on D is delivered, byte for byte. An IUT
 * that acknowledged eager but reads tensors elsewhere would take the frame
 * for the next Descriptor and fail the pipe instead. */
static int send_eager_frame(ctx *c)
{
	c->nexpect = 1;
	c->expect[0] = (twc_agent_buf){.len = 16, .seed = 6};
	return send_eager_frame_of(c, 16, "8.4.b");
}

/* 8.4.d: the frame one byte short. */
static int send_eager_short_frame(ctx *c)
{
	return send_eager_frame_of(c, 15, "8.4.d");
}

/* Sections: spec/wire.md, with the numbered requirement checked. */
/* ---- running and judging ------------------------------------------------------------- */

static twc_outcome_t run_raw(const twc_case *c, twc_case_env *env)
{
	const twc_raw_input *in = c->arg;
	twc_raw_obs o;
	if (twc_raw_run(env->iut_cmd, c->id, in, 1500, &o) != 0)
		return twc_case_result(env, TWC_ERROR, "%s", o.note);
	if (o.skip[0])
		return twc_case_result(env, TWC_SKIP, "%s", o.skip);
	printf("# process: %s\n# stderr: %s\n# accept: %s\n# pipe: %s\n# listener: %s\n"
	       "# class: %s\n",
	       o.process, o.stderr_line[0] ? o.stderr_line : "-", o.accept[0] ? o.accept : "-",
	       o.pipe[0] ? o.pipe : "-", o.listener, o.klass);
	snprintf(env->transport, sizeof(env->transport), "uv");
	snprintf(env->channel, sizeof(env->channel), "%s", in->channel ? in->channel : "basic");
	char why[1024];
	if (twc_raw_robust(in, &o, why, sizeof(why)))
		return twc_case_result(env, TWC_PASS, "%s", o.klass);
	/* Stock TensorPipe's failure here is recorded (docs/stock-bad-input.md)
	 * and excused by its profile; a different failure is news, and the
	 * record is stale: no profile may excuse it. */
	if (in->stock_class && env->iut_impl && !strcmp(env->iut_impl, "tensorpipe") &&
	    !twc_raw_as_stock(in, &o)) {
		env->unexcused = true;
		return twc_case_result(env, TWC_FAIL,
		                      "%s; docs/stock-bad-input.md records stock's outcome as '%s'%s%s, "
		                      "observed '%s' (stderr: %s)",
		                      why, in->stock_class, in->stock_stderr ? " with stderr " : "",
		                      in->stock_stderr ? in->stock_stderr : "", o.klass,
		                      o.stderr_line[0] ? o.stderr_line : "-");
	}
	return twc_case_result(env, TWC_FAIL, "%s", why);
}

/* ---- the cases -------------------------------------------------------------------------- */

/* (5.2.b) and (3.3.f), checked by every case. */
#define ALWAYS                                                                                   \
	"(5.2.b) It MUST NOT terminate the process, and MUST NOT disturb other pipes of the same "  \
	"context. (3.3.f) A listener MUST keep accepting after any of these, and after any error " \
	"on one accepted connection."

/* A raw-client case: id, section, level, the input in words, the
 * requirement quoted, then the twc_raw_input (send, robust class, stock's
 * class and stderr, handshake timeout, error kind). */
#define RAW(id_, sec_, level_, what_, req_, ...)                                                \
	{                                                                                       \
		.id = "wire." id_, .suite = "wire", .section = "wire.md " sec_, .level = level_, \
		.needs = "", .description = "raw client: " what_, .requirement = req_,          \
		.timeout_s = 60, .run = run_raw, .arg = &(const twc_raw_input){__VA_ARGS__},      \
	}

#define REQ_XTH_PEER                                                                            \
	"(4.5.b) A receiver MUST NOT read memory an xth Descriptor names unless it has made sure "  \
	"that the other end of the channel's connection is its own process; otherwise it MUST "    \
	"fail the channel, and the pipe, with a protocol error. And always: " ALWAYS

static const twc_case cases[] = {
	RAW("ext_unknown_only", "8.1 (8.1.b, 8.1.c)", TWC_MUST,
	    "a Brochure whose tensorwire.ext entry names only extensions nobody knows",
	    "(8.1.b) A server MUST ignore names in the value that it does not know, and an entry "
	    "whose value names none it supports. (8.1.c) A server MUST add key 0x74770001 to a "
	    "BrochureAnswer only when the Brochure asked for an extension it supports. And always: "
	    ALWAYS,
	    send_ext_unknown_only, NULL, NULL, NULL, 0, NULL, NULL),
	RAW("ext_bits_asked", "8.1 (8.1.c)", TWC_MUST,
	    "a Brochure asking for goodbye between two unknown extension names",
	    "(8.1.c) A server MUST add key 0x74770001 to a BrochureAnswer only when the Brochure "
	    "asked for an extension it supports, and MUST set only the bits of extensions that were "
	    "asked for and that it supports. And always: "
	    ALWAYS,
	    send_ext_bits_asked, NULL, NULL, NULL, 0, NULL, NULL),
	RAW("close_before_hello", "5.4 (5.4.a)", TWC_MUST,
	    "TCP connect, then close without sending anything",
	    "(5.4.a) A connection that closes, or sends a malformed hello, before its hello is complete "
	    "MUST be dropped without affecting the listener. And always: "
	    ALWAYS,
	    send_close_before_hello, NULL, "listener-dies", NULL, 0, NULL, NULL),
	RAW("bad_type_byte", "5.2 (5.2.c)", TWC_MUST,
	    "hello frame ff ff ff ff ff (no such nop type)",
	    "(5.2.c) A listener that receives a malformed hello MUST close that connection and keep "
	    "accepting. And always: "
	    ALWAYS,
	    send_bad_type_byte, NULL, "crash", "Unexpected Encoding Type", 0, NULL, NULL),
	RAW("bad_variant_index", "5.2 (5.2.c)", TWC_MUST,
	    "hello with Packet variant index 2 (b8 02 b9 01 00)",
	    "(5.2.c) A listener that receives a malformed hello MUST close that connection and keep "
	    "accepting. And always: "
	    ALWAYS,
	    send_bad_variant, NULL, "crash", "Unexpected Variant Type", 0, NULL, NULL),
	RAW("empty_variant", "3.3 (3.3.e)", TWC_MUST,
	    "hello = the empty variant (b8 ff be)",
	    "(3.3.e) On the empty variant a listener MUST close that connection and keep listening. And "
	    "always: "
	    ALWAYS,
	    send_empty_variant, "connection-dropped", "connection-dropped", NULL, 0, NULL, NULL),
	RAW("unknown_registration_id", "3.8 (3.8.b)", TWC_MUST,
	    "RequestedConnection{12345}, an id never handed out",
	    "(3.8.b) A listener MUST close a connection whose RequestedConnection names an id that is "
	    "not registered (never was, or was already used, or its pipe closed). And always: "
	    ALWAYS,
	    send_unknown_id, "connection-dropped", "connection-dropped", NULL, 0, NULL, NULL),
	RAW("truncated_hello", "5.2 (5.2.c)", TWC_MUST,
	    "hello whose string length runs past the frame (b8 00 b9 01 bd 40)",
	    "(5.2.c) A listener that receives a malformed hello MUST close that connection and keep "
	    "accepting. And always: "
	    ALWAYS,
	    send_truncated_hello, NULL, "crash", "Read Limit Reached", 0, NULL, NULL),
	RAW("huge_length_prefix", "5.3 (5.3.a), wire.md 2.2 (2.2.b, 2.2.c)", TWC_MUST,
	    "uv length prefix 2^62",
	    "(5.3.a) A frame length above the receiver's limit for what it expects MUST fail that "
	    "connection or pipe with a protocol error, before any allocation of that size. And always: "
	    ALWAYS,
	    send_huge_length, NULL, "crash", "bad_alloc|AddressSanitizer: allocator is out of memory|AddressSanitizer: requested "
	    "allocation size", 0, NULL, NULL),
	RAW("silent_mid_header", "3.3 (3.3.f)", TWC_MUST,
	    "4 of the 8 bytes of a frame header, then silence (connection kept open)",
	    "(3.3.f) A listener MUST keep accepting after any of these, and after any error on one "
	    "accepted connection. (issue 3 item 4: a peer that goes silent mid-frame) And always: "
	    ALWAYS,
	    send_silent_mid_header, NULL, "ignored", NULL, 0, NULL, NULL),
	RAW("silent_mid_body", "3.3 (3.3.f)", TWC_MUST,
	    "a frame header announcing 64 bytes, 6 of them, then silence (connection kept open)",
	    "(3.3.f) A listener MUST keep accepting after any of these, and after any error on one "
	    "accepted connection. (issue 3 item 4: a peer that goes silent mid-frame) And always: "
	    ALWAYS,
	    send_silent_mid_body, NULL, "ignored", NULL, 0, NULL, NULL),
	RAW("trailing_junk", "1.12 (1.12.a)", TWC_MUST,
	    "hello followed by 4 junk bytes in the same frame, then a normal handshake and an empty "
	    "message",
	    "(1.12.a) A decoder MUST ignore bytes left in a frame after the packet's value ends. And "
	    "always: "
	    ALWAYS,
	    send_trailing_junk, "descriptor-delivered", "descriptor-delivered", NULL, 0, NULL, NULL),
	RAW("no_common_transport", "3.5 (3.5.b)", TWC_MUST,
	    "Brochure offering only ibv",
	    "(3.5.b) If no transport qualifies, a server MUST fail only that pipe (closing the "
	    "bootstrap connection) with a protocol error, and keep its listener accepting. And always: "
	    ALWAYS,
	    send_no_common_transport, NULL, "crash", "Could not find a viable transport", 0, NULL, NULL),
	RAW("no_channels", "3.5 (3.5.c)", TWC_MUST,
	    "Brochure with no channels, then an empty message",
	    "(3.5.c) A brochure with no common channel MUST still yield a pipe; messages without "
	    "tensors then work. And always: "
	    ALWAYS,
	    send_no_channels, "descriptor-delivered", "descriptor-delivered", NULL, 0, NULL, NULL),
	RAW("unknown_names", "3.5 (3.5.d)", TWC_MUST,
	    "Brochure with an unknown transport (zz) and channel (yy) besides uv and basic, then an "
	    "empty message: the answer must pick uv and basic only",
	    "(3.5.d) A server MUST ignore transport and channel names it does not know. And always: "
	    ALWAYS,
	    send_unknown_names, "descriptor-delivered", "descriptor-delivered", NULL, 0, NULL, NULL),
	RAW("many_devices", "3.5 (3.5.e), wire.md 3.3 (3.3.f)", TWC_MUST,
	    "Brochure whose basic channel offers 200000 cpu devices (3.2 MB)",
	    "(3.5.e) A peer MAY refuse a Brochure that offers more than 4096 devices, failing that "
	    "pipe with a protocol error before pairing starts. Whether it refuses or pairs, "
	    "always: "
	    ALWAYS,
	    send_many_devices, NULL, NULL, NULL, 0, "proto", NULL),
	RAW("reused_registration_id", "3.8 (3.8.b)", TWC_MUST,
	    "after a handshake, a second connection with the descriptor-reply id already used, then an "
	    "empty message on the first",
	    "(3.8.b) A listener MUST close a connection whose RequestedConnection names an id that is "
	    "not registered (never was, or was already used, or its pipe closed). And always: "
	    ALWAYS,
	    send_reused_registration_id, "descriptor-delivered", "descriptor-delivered", NULL, 0, NULL, NULL),
	RAW("truncated_descriptor", "5.2 (5.2.a)", TWC_MUST,
	    "after the handshake, Descriptor frame b9 03 bd 01",
	    "(5.2.a) An implementation that receives a malformed packet MUST fail only the connection, "
	    "or the pipe the connection belongs to, with a protocol error. And always: "
	    ALWAYS,
	    send_truncated_descriptor, "pipe-failed", "crash", "Read Limit Reached", 0, "proto", NULL),
	RAW("huge_descriptor_length", "5.3 (5.3.a), wire.md 2.2 (2.2.b)", TWC_MUST,
	    "after the handshake, a Descriptor frame whose length prefix says 2^62 bytes",
	    "(5.3.a) A frame length above the receiver's limit for what it expects MUST fail that "
	    "connection or pipe with a protocol error, before any allocation of that size. And always: "
	    ALWAYS,
	    send_huge_descriptor, "pipe-failed", "crash", "bad_alloc|AddressSanitizer: allocator is out of memory|AddressSanitizer: requested "
	    "allocation size", 0, "proto", NULL),
	RAW("payload_length_mismatch", "5.5 (5.5.a), wire.md 3.10 (3.10.c), wire.md 2.2 (2.2.d)", TWC_MUST,
	    "Descriptor announcing an 8-byte payload, then a 9-byte frame",
	    "(5.5.a) A payload or basic-channel frame whose length differs from the Descriptor MUST "
	    "fail the pipe with a protocol error. And always: "
	    ALWAYS,
	    send_payload_mismatch, "pipe-failed", "crash", "Expected readLength_", 0, "proto", NULL),
	RAW("eager_frame", "8.4 (8.4.b)", TWC_MUST,
	    "asks for eager; a Descriptor announcing a 16-byte CPU tensor, then its 16 bytes on D",
	    "(8.4.b) On an eager pipe, a sender MUST write each eager tensor as one frame on D after "
	    "the payload frames: a receiver takes the tensor from there. SKIP where the IUT does "
	    "not acknowledge eager. And always: "
	    ALWAYS,
	    send_eager_frame, "message-delivered", NULL, NULL, 0, NULL, NULL),
	RAW("eager_short_frame", "8.4 (8.4.d)", TWC_MUST,
	    "asks for eager; a Descriptor announcing a 16-byte CPU tensor, then a 15-byte frame on D",
	    "(8.4.d) A receiver MUST fail the pipe with a protocol error if an eager tensor's frame "
	    "length differs from the tensor's length. SKIP where the IUT does not acknowledge "
	    "eager. And always: "
	    ALWAYS,
	    send_eager_short_frame, "pipe-failed", NULL, NULL, 0, "proto", NULL),
	RAW("tensor_length_mismatch", "4.2 (4.2.a)", TWC_MUST,
	    "Descriptor announcing a 16-byte tensor, then a 17-byte frame on the basic channel",
	    "(4.2.a) A receiver MUST fail the channel (and pipe) with a protocol error if the frame's "
	    "length differs from the tensor's length. (issue 3 item 4: a peer that sends more bytes "
	    "than announced) And always: "
	    ALWAYS,
	    send_tensor_mismatch, "pipe-failed", "crash", "Expected readLength_", 0, "proto", NULL),
	RAW("descriptor_reply", "3.11 (3.11.a)", TWC_MUST,
	    "Descriptor with a tensor that has a target device and one that has none: the IUT must "
	    "answer DescriptorReply [cpu:0] on the reply connection, then receive both tensors",
	    "(3.11.a) A receiver MUST send exactly one DescriptorReply per message that has at least "
	    "one tensor without a target device [...] (3.11.b) Its targetDevices MUST hold one Device "
	    "per tensor that lacked a target device, in tensor order. And always: "
	    ALWAYS,
	    send_descriptor_reply, "message-delivered", "message-delivered", NULL, 0, NULL, NULL),
	RAW("xth_forged_pointer", "4.5 (4.5.b)", TWC_MUST,
	    "a Brochure claiming to be the IUT's own process (its xth descriptor, built from /proc), "
	    "then a tensor whose xth Descriptor points at an unmapped page",
	    REQ_XTH_PEER,
	    send_xth_unmapped, "pipe-failed", "crash", NULL, 0, "proto", "xth"),
	RAW("xth_forged_mapped", "4.5 (4.5.b)", TWC_MUST,
	    "a Brochure claiming to be the IUT's own process, then a tensor whose xth Descriptor "
	    "points at the IUT's first readable mapping (its own memory, as the message's data)",
	    REQ_XTH_PEER,
	    send_xth_mapped, "pipe-failed", "message-delivered", NULL, 0, "proto", "xth"),
	RAW("cma_copy_from_peer", "4.4 (4.4.d)", TWC_MUST,
	    "a well-formed cma peer in another process (the raw client's own cma descriptor) sends "
	    "a 16-byte tensor whose cma Descriptor names its own pid: the IUT must copy it",
	    "(4.4.d) [...] A receiver MUST copy from a process it found at the other end of "
	    "connection 0. And always: "
	    ALWAYS,
	    send_cma_own, "message-delivered", "message-delivered", NULL, 0, NULL, "cma"),
	RAW("cma_forged_pid", "4.4 (4.4.d)", TWC_MUST,
	    "the same cma peer sends a tensor whose cma Descriptor names a third process of the "
	    "same user and an address of its memory",
	    "(4.4.d) A receiver MUST NOT copy from a process other than the one at the other end "
	    "of the channel's connection 0; it MUST fail the channel, and the pipe, with a protocol "
	    "error instead. And always: "
	    ALWAYS,
	    send_cma_other_pid, "pipe-failed", "message-delivered", NULL, 0, "proto", "cma"),
	RAW("close_after_answer", "5.4 (5.4.a)", TWC_MUST,
	    "client closes the bootstrap connection right after the BrochureAnswer",
	    "(5.4.a) A connection that closes [...] before its hello is complete MUST be dropped "
	    "without affecting the listener; here the handshake is abandoned later, after the "
	    "BrochureAnswer. And always: "
	    ALWAYS,
	    send_close_after_answer, NULL, "pipe-pending", NULL, 0, NULL, NULL),
	RAW("close_after_answer_noticed", "5.6 (5.6.b)", TWC_SHOULD,
	    "client closes the bootstrap connection right after the BrochureAnswer: the server pipe "
	    "should fail rather than wait forever",
	    "(5.6.b) An implementation SHOULD notice a peer's close even when no read is pending. "
	    "(3.8.e) A server SHOULD fail a pipe whose registered connections do not all arrive within "
	    "a bounded time. And always: "
	    ALWAYS,
	    send_close_after_answer, "pipe-failed", "pipe-pending", NULL, 0, NULL, NULL),
	RAW("registration_timeout", "3.8 (3.8.e)", TWC_SHOULD,
	    "hello and Brochure, then nothing: the requested connections never come (the bootstrap "
	    "connection stays open); with the IUT's handshake timeout set to 2 s the server pipe should "
	    "fail within 5 s",
	    "(3.8.e) A server SHOULD fail a pipe whose registered connections do not all arrive within "
	    "a bounded time. And always: "
	    ALWAYS,
	    send_registration_timeout, "pipe-failed", "pipe-pending", NULL, 2000, NULL, NULL),
};

const twc_case *twc_suite_wire(int *count_out)
{
	*count_out = (int)(sizeof(cases) / sizeof(cases[0]));
	return cases;
}
