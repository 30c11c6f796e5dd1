/*
 * build.c - well-formed traffic for the wire fuzzer, built with
 * ref/src/wire's nop writer (canonical encodings, spec/wire.md section 1),
 * recording where every value starts, how long its prefix and
 * count/length/integer payload are, and its path in the packet, so that
 * mutate.c can break exactly one field.
 *
 * The base scenarios (README.md, "Scenarios") exercise every packet of
 * spec/wire.md section 3 in both directions over uv with the basic channel.
 * It must not run anything or judge anything.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wf.h"
#include "wire/nop.h"

/* ---- the messages ------------------------------------------------------------------ */

static twc_agent_payload msg_a_payloads[] = {
	{.data = {8, 12}, .metadata = {2, 13}},
	{.data = {0, 14}, .metadata = {0, 0}},
};
static twc_agent_tensor msg_a_tensors[] = {
	{.data = {16, 15}, .metadata = {3, 16}, .source_device = {"cpu", 0},
	 .has_target_device = true, .target_device = {"cpu", 0}},
	{.data = {8, 17}, .metadata = {0, 0}, .source_device = {"cpu", 0}},
	{.data = {0, 18}, .metadata = {1, 19}, .source_device = {"cpu", 0},
	 .has_target_device = true, .target_device = {"cpu", 0}},
};
static twc_agent_payload msg_b_payloads[] = {{.data = {4, 22}, .metadata = {0, 0}}};
static twc_agent_payload msg_out_payloads[] = {{.data = {4, 32}, .metadata = {1, 33}}};
static twc_agent_tensor msg_out_tensors[] = {
	{.data = {12, 34}, .metadata = {2, 35}, .source_device = {"cpu", 0}},
};

/* A: sent to the IUT first: two payloads (one empty), a tensor with a target
 * device, one without (the IUT owes a DescriptorReply), an empty one.
 * B: sent right after A: one small payload, so a desynchronised stream shows.
 * OUT: what the driver makes the IUT write on every pipe: one payload and a
 * tensor without target device (the fuzzer owes it a DescriptorReply). */
static const twc_agent_msg msgs[] = {
	[WF_MSG_A] = {.metadata = {5, 11}, .num_payloads = 2, .payloads = msg_a_payloads,
	              .num_tensors = 3, .tensors = msg_a_tensors},
	[WF_MSG_B] = {.metadata = {1, 21}, .num_payloads = 1, .payloads = msg_b_payloads},
	[WF_MSG_OUT] = {.metadata = {6, 31}, .num_payloads = 1, .payloads = msg_out_payloads,
	                .num_tensors = 1, .tensors = msg_out_tensors},
};

const twc_agent_msg *wf_msg(wf_msg_id id)
{
	return &msgs[id];
}

/* ---- a writer that records the value map -------------------------------------------- */

#define MAX_FIELDS 256
#define MAX_DEPTH 16

typedef struct bld {
	tw_nop_writer w;
	wf_field f[MAX_FIELDS];
	int nf;
	int open[MAX_DEPTH]; /* fields whose length is known only when they end */
	int nopen;
	char path[96];
	wf_mark marks[WF_MAX_MARKS];
	int nmarks;
	bool overflow;
} bld;

static void b_init(bld *b)
{
	memset(b, 0, sizeof(*b));
	tw__nop_writer_init(&b->w);
}

static int b_field(bld *b, wf_vkind kind, const char *name, uint64_t n, uint8_t width)
{
	if (b->nf == MAX_FIELDS) {
		b->overflow = true;
		return -1;
	}
	wf_field *f = &b->f[b->nf];
	memset(f, 0, sizeof(*f));
	f->off = (uint32_t)b->w.len;
	f->kind = (uint8_t)kind;
	f->n = n;
	f->width = width;
	if (name[0] == '[' || !b->path[0])
		snprintf(f->path, sizeof(f->path), "%.63s%.31s", b->path, name);
	else
		snprintf(f->path, sizeof(f->path), "%.63s.%.31s", b->path, name);
	return b->nf++;
}

/* The prefix and its payload have been written: the header ends here. */
static void b_hdr_done(bld *b, int fi)
{
	if (fi >= 0)
		b->f[fi].hdr = (uint16_t)(b->w.len - b->f[fi].off);
}

static void b_done(bld *b, int fi)
{
	if (fi >= 0)
		b->f[fi].len = (uint32_t)(b->w.len - b->f[fi].off);
}

/* Containers: the path grows while their members are written. */
static size_t b_push(bld *b, int fi)
{
	size_t saved = strlen(b->path);
	if (fi >= 0)
		snprintf(b->path, sizeof(b->path), "%s", b->f[fi].path);
	if (b->nopen < MAX_DEPTH)
		b->open[b->nopen++] = fi;
	return saved;
}

static void b_pop(bld *b, size_t saved)
{
	if (b->nopen > 0)
		b_done(b, b->open[--b->nopen]);
	b->path[saved] = '\0';
}

static void b_uint(bld *b, const char *name, uint64_t v, uint8_t width)
{
	int fi = b_field(b, WF_V_UINT, name, v, width);
	tw__nop_put_uint(&b->w, v);
	b_hdr_done(b, fi);
	b_done(b, fi);
}

static void b_int(bld *b, const char *name, int64_t v, uint8_t width)
{
	int fi = b_field(b, WF_V_INT, name, (uint64_t)v, width);
	tw__nop_put_int(&b->w, v);
	b_hdr_done(b, fi);
	b_done(b, fi);
}

static void b_str(bld *b, const char *name, const void *s, size_t n)
{
	int fi = b_field(b, WF_V_STRING, name, n, 0);
	tw__nop_put_raw(&b->w, (const uint8_t[]){TW_NOP_STRING}, 1);
	tw__nop_put_uint(&b->w, n);
	b_hdr_done(b, fi);
	tw__nop_put_raw(&b->w, s, n);
	b_done(b, fi);
}

static void b_cstr(bld *b, const char *name, const char *s)
{
	b_str(b, name, s, strlen(s));
}

static void b_gen_str(bld *b, const char *name, const twc_agent_buf *buf)
{
	unsigned char tmp[256];
	size_t n = buf->len < sizeof(tmp) ? (size_t)buf->len : sizeof(tmp);
	twc_agent_gen_fill(tmp, n, buf->seed);
	b_str(b, name, tmp, n);
}

static size_t b_struct(bld *b, const char *name, uint64_t members)
{
	int fi = b_field(b, WF_V_STRUCT, name, members, 0);
	tw__nop_put_struct(&b->w, members);
	b_hdr_done(b, fi);
	return b_push(b, fi);
}

static size_t b_array(bld *b, const char *name, uint64_t count)
{
	int fi = b_field(b, WF_V_ARRAY, name, count, 0);
	tw__nop_put_array(&b->w, count);
	b_hdr_done(b, fi);
	return b_push(b, fi);
}

static size_t b_map(bld *b, const char *name, uint64_t count)
{
	int fi = b_field(b, WF_V_MAP, name, count, 0);
	tw__nop_put_map(&b->w, count);
	b_hdr_done(b, fi);
	return b_push(b, fi);
}

static size_t b_variant(bld *b, const char *name, int32_t index, uint8_t alternatives)
{
	int fi = b_field(b, WF_V_VARIANT, name, (uint64_t)(int64_t)index, alternatives);
	tw__nop_put_variant(&b->w, index);
	b_hdr_done(b, fi);
	return b_push(b, fi);
}

static void b_nil(bld *b, const char *name)
{
	int fi = b_field(b, WF_V_NIL, name, 0, 0);
	tw__nop_put_nil(&b->w);
	b_hdr_done(b, fi);
	b_done(b, fi);
}

/* The last field written gets a token: its bytes are replaced at run time. */
static void b_mark_last(bld *b, wf_token tok)
{
	if (b->nf == 0 || b->nmarks == WF_MAX_MARKS)
		return;
	const wf_field *f = &b->f[b->nf - 1];
	b->marks[b->nmarks++] = (wf_mark){.off = f->off, .len = f->len, .token = tok};
}

static void b_device(bld *b, const char *name, const twc_agent_device *d)
{
	size_t s = b_struct(b, name, 2);
	b_cstr(b, "type", d->type);
	b_int(b, "index", d->index, 4);
	b_pop(b, s);
}

static const twc_agent_device cpu0 = {"cpu", 0};

/* ---- packets (spec/wire.md 3.2) ------------------------------------------------------- */

static void p_hello(bld *b, const char *name)
{
	size_t v = b_variant(b, "Packet", 0, 2);
	size_t s = b_struct(b, "SpontaneousConnection", 1);
	b_cstr(b, "contextName", name);
	b_pop(b, s);
	b_pop(b, v);
}

static void p_requested(bld *b, uint64_t id, wf_token tok)
{
	size_t v = b_variant(b, "Packet", 1, 2);
	size_t s = b_struct(b, "RequestedConnection", 1);
	b_uint(b, "registrationId", id, 8);
	if (tok != WF_TOK_NONE)
		b_mark_last(b, tok);
	b_pop(b, s);
	b_pop(b, v);
}

static void p_brochure(bld *b, bool ext)
{
	size_t s = b_struct(b, "Brochure", 2);
	size_t m = b_map(b, "transportDomainDescriptors", ext ? 2 : 1);
	b_cstr(b, "[0].key", "uv");
	b_cstr(b, "[0].value", "uv:*");
	if (ext) {
		/* spec/wire.md 8.1: ask for the goodbye extension */
		b_cstr(b, "[1].key", "tensorwire.ext");
		b_cstr(b, "[1].value", "goodbye");
	}
	b_pop(b, m);
	m = b_map(b, "channelDeviceDescriptors", 1);
	b_cstr(b, "[0].key", "basic");
	size_t m2 = b_map(b, "[0].value", 1);
	b_device(b, "[0].key", &cpu0);
	b_cstr(b, "[0].value", "any");
	b_pop(b, m2);
	b_pop(b, m);
	b_pop(b, s);
}

enum { WF_ANSWER_REPLY_ID = 100, WF_ANSWER_BASIC_ID = 101 };

static void p_answer(bld *b, const char *addr)
{
	size_t s = b_struct(b, "BrochureAnswer", 7);
	b_cstr(b, "transport", "uv");
	b_cstr(b, "address", addr);
	b_mark_last(b, WF_TOK_ADDR);
	size_t m = b_map(b, "transportRegistrationIds", 1);
	b_uint(b, "[0].key", 1, 8);
	b_uint(b, "[0].value", WF_ANSWER_REPLY_ID, 8);
	b_pop(b, m);
	b_cstr(b, "transportDomainDescriptor", "uv:*");
	m = b_map(b, "channelRegistrationIds", 1);
	b_cstr(b, "[0].key", "basic");
	uint8_t ids[8] = {WF_ANSWER_BASIC_ID};
	int fi = b_field(b, WF_V_BINARY, "[0].value", 8, 0);
	tw__nop_put_raw(&b->w, (const uint8_t[]){TW_NOP_BINARY}, 1);
	tw__nop_put_uint(&b->w, 8);
	b_hdr_done(b, fi);
	tw__nop_put_raw(&b->w, ids, 8);
	b_done(b, fi);
	b_pop(b, m);
	m = b_map(b, "channelDeviceDescriptors", 1);
	b_cstr(b, "[0].key", "basic");
	size_t m2 = b_map(b, "[0].value", 1);
	b_device(b, "[0].key", &cpu0);
	b_cstr(b, "[0].value", "any");
	b_pop(b, m2);
	b_pop(b, m);
	m = b_map(b, "channelForDevicePair", 1);
	size_t pr = b_array(b, "[0].key", 2);
	b_device(b, "[0]", &cpu0);
	b_device(b, "[1]", &cpu0);
	b_pop(b, pr);
	b_cstr(b, "[0].value", "basic");
	b_pop(b, m);
	b_pop(b, s);
}

static void p_descriptor(bld *b, const twc_agent_msg *msg)
{
	char name[32];
	size_t s = b_struct(b, "Descriptor", 3);
	b_gen_str(b, "metadata", &msg->metadata);
	size_t a = b_array(b, "payloads", msg->num_payloads);
	for (size_t i = 0; i < msg->num_payloads; i++) {
		snprintf(name, sizeof(name), "[%zu]", i);
		size_t p = b_struct(b, name, 2);
		b_uint(b, "length", msg->payloads[i].data.len, 8);
		b_gen_str(b, "metadata", &msg->payloads[i].metadata);
		b_pop(b, p);
	}
	b_pop(b, a);
	a = b_array(b, "tensors", msg->num_tensors);
	for (size_t i = 0; i < msg->num_tensors; i++) {
		const twc_agent_tensor *t = &msg->tensors[i];
		snprintf(name, sizeof(name), "[%zu]", i);
		size_t p = b_struct(b, name, 4);
		b_uint(b, "length", t->data.len, 8);
		b_device(b, "sourceDevice", &t->source_device);
		if (t->has_target_device)
			b_device(b, "targetDevice", &t->target_device);
		else
			b_nil(b, "targetDevice");
		b_gen_str(b, "metadata", &t->metadata);
		b_pop(b, p);
	}
	b_pop(b, a);
	b_pop(b, s);
}

/* DescriptorReply for the tensors of msg that lack a target device: cpu:0 each. */
static void p_reply(bld *b, const twc_agent_msg *msg)
{
	size_t n = 0;
	for (size_t i = 0; i < msg->num_tensors; i++)
		n += !msg->tensors[i].has_target_device;
	size_t s = b_struct(b, "DescriptorReply", 1);
	size_t a = b_array(b, "targetDevices", n);
	char name[32];
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "[%zu]", i);
		b_device(b, name, &cpu0);
	}
	b_pop(b, a);
	b_pop(b, s);
}

/* ---- steps --------------------------------------------------------------------------- */

static int add_simple(wf_script *s, wf_op op, int conn, int arg)
{
	wf_step st;
	memset(&st, 0, sizeof(st));
	st.op = op;
	st.conn = conn;
	st.arg = arg;
	st.cut = -1;
	return wf_script_add(s, &st) < 0 ? -1 : 0;
}

/* A frame built by b (consumed) on conn. */
static int add_built(wf_script *s, int conn, const char *what, bld *b)
{
	int rc = -1;
	wf_step st;
	memset(&st, 0, sizeof(st));
	st.op = WF_SEND;
	st.conn = conn;
	st.cut = -1;
	snprintf(st.what, sizeof(st.what), "%s", what);
	if (b->overflow || tw__nop_writer_finish(&b->w) != TW_OK)
		goto out;
	st.body = b->w.buf;
	st.len = b->w.len;
	st.fields = b->f;
	st.nfields = b->nf;
	memcpy(st.marks, b->marks, sizeof(st.marks));
	st.nmarks = b->nmarks;
	rc = wf_script_add(s, &st) < 0 ? -1 : 0; /* deep copy */
out:
	tw__nop_writer_free(&b->w);
	return rc;
}

/* A raw buffer frame (payload or tensor bytes): no values inside. */
static int add_raw(wf_script *s, int conn, const char *what, const twc_agent_buf *buf)
{
	wf_step st;
	memset(&st, 0, sizeof(st));
	st.op = WF_SEND;
	st.conn = conn;
	st.cut = -1;
	snprintf(st.what, sizeof(st.what), "%s", what);
	st.len = (size_t)buf->len;
	st.body = malloc(st.len ? st.len : 1);
	if (!st.body)
		return -1;
	twc_agent_gen_fill(st.body, st.len, buf->seed);
	int rc = wf_script_add(s, &st) < 0 ? -1 : 0;
	free(st.body);
	return rc;
}

/* A RECV step; with_expect: the bytes the IUT must send (built by b or raw). */
static int add_recv(wf_script *s, int conn, const char *what, const uint8_t *expect, size_t n,
                    bool with_expect)
{
	wf_step st;
	memset(&st, 0, sizeof(st));
	st.op = WF_RECV;
	st.conn = conn;
	st.cut = -1;
	snprintf(st.what, sizeof(st.what), "%s", what);
	if (with_expect) {
		st.expect = (uint8_t *)expect;
		st.expect_len = n;
	}
	return wf_script_add(s, &st) < 0 ? -1 : 0;
}

static int add_recv_built(wf_script *s, int conn, const char *what, bld *b, bool with_expect)
{
	int rc = -1;
	if (!b->overflow && tw__nop_writer_finish(&b->w) == TW_OK)
		rc = add_recv(s, conn, what, b->w.buf ? b->w.buf : (const uint8_t *)"", b->w.len,
		              with_expect);
	tw__nop_writer_free(&b->w);
	return rc;
}

static int add_recv_raw(wf_script *s, int conn, const char *what, const twc_agent_buf *buf,
                        bool with_expect)
{
	uint8_t *tmp = malloc(buf->len ? (size_t)buf->len : 1);
	if (!tmp)
		return -1;
	twc_agent_gen_fill(tmp, (size_t)buf->len, buf->seed);
	int rc = add_recv(s, conn, what, tmp, (size_t)buf->len, with_expect);
	free(tmp);
	return rc;
}

/* Sends message m on D (its Descriptor and payload frames). */
static int send_message(wf_script *s, const twc_agent_msg *m)
{
	bld b;
	b_init(&b);
	p_descriptor(&b, m);
	if (add_built(s, 0, "Descriptor", &b))
		return -1;
	for (size_t i = 0; i < m->num_payloads; i++)
		if (add_raw(s, 0, "payload", &m->payloads[i].data))
			return -1;
	return 0;
}

static int send_tensors(wf_script *s, const twc_agent_msg *m)
{
	/* basic channel: one frame per non-empty tensor (spec/wire.md 4.1.a, 4.2) */
	for (size_t i = 0; i < m->num_tensors; i++)
		if (m->tensors[i].data.len > 0 && add_raw(s, 2, "tensor", &m->tensors[i].data))
			return -1;
	return 0;
}

/* The IUT's message OUT as it must arrive: Descriptor and payload on D, the
 * fuzzer's DescriptorReply on R, then its tensor on the basic channel. */
static int exchange_out(wf_script *s, bool with_expect)
{
	const twc_agent_msg *out = wf_msg(WF_MSG_OUT);
	bld b;
	b_init(&b);
	p_descriptor(&b, out);
	if (add_recv_built(s, 0, "Descriptor", &b, with_expect) ||
	    add_recv_raw(s, 0, "payload", &out->payloads[0].data, with_expect))
		return -1;
	b_init(&b);
	p_reply(&b, out);
	if (add_built(s, 1, "DescriptorReply", &b))
		return -1;
	return add_recv_raw(s, 2, "tensor", &out->tensors[0].data, with_expect);
}

static const char *const sc_names[WF_SC_COUNT] = {"server", "client", "server-ext"};

const char *wf_scenario_name(wf_scenario sc)
{
	return (unsigned)sc < WF_SC_COUNT ? sc_names[sc] : "?";
}

wf_role wf_scenario_role(wf_scenario sc)
{
	return sc == WF_SC_CLIENT ? WF_CLIENT : WF_SERVER;
}

static int build_scenario(wf_script *s, wf_scenario sc, const char *addr, bool with_expect,
                          const char *client_name);

int wf_build_base(wf_script *s, wf_role role, const char *addr, bool with_expect)
{
	return build_scenario(s, role == WF_CLIENT ? WF_SC_CLIENT : WF_SC_SERVER, addr,
	                      with_expect, WF_GOOD_CHECK_NAME);
}

int wf_build_scenario(wf_script *s, wf_scenario sc, const char *addr, bool with_expect)
{
	return build_scenario(s, sc, addr, with_expect, "wirefuzz");
}

/* client_name: the context name of the raw client's hello (server role). */
static int build_scenario(wf_script *s, wf_scenario sc, const char *addr, bool with_expect,
                          const char *client_name)
{
	wf_role role = wf_scenario_role(sc);
	wf_script_init(s, role);
	const twc_agent_msg *a = wf_msg(WF_MSG_A), *bm = wf_msg(WF_MSG_B);
	bld b;
	if (role == WF_SERVER) {
		/* the fuzzer is the client: hello, Brochure, answer, requested connections */
		if (add_simple(s, WF_CONNECT, 0, 0))
			goto err;
		b_init(&b);
		p_hello(&b, client_name);
		if (add_built(s, 0, "hello", &b))
			goto err;
		b_init(&b);
		p_brochure(&b, sc == WF_SC_SERVER_EXT);
		if (add_built(s, 0, "Brochure", &b) || add_simple(s, WF_RECV_ANSWER, 0, 0) ||
		    add_simple(s, WF_CONNECT, 1, 0))
			goto err;
		b_init(&b);
		p_requested(&b, 0, WF_TOK_REPLY_ID);
		if (add_built(s, 1, "RequestedConnection", &b) || add_simple(s, WF_CONNECT, 2, 0))
			goto err;
		b_init(&b);
		p_requested(&b, 1, WF_TOK_BASIC_ID);
		if (add_built(s, 2, "RequestedConnection", &b))
			goto err;
		/* message A to the IUT: it owes a DescriptorReply before the tensors */
		if (send_message(s, a))
			goto err;
		b_init(&b);
		p_reply(&b, a);
		if (add_recv_built(s, 1, "DescriptorReply", &b, with_expect) || send_tensors(s, a))
			goto err;
		/* the IUT's message OUT, then message B to the IUT */
		if (exchange_out(s, with_expect) || send_message(s, bm))
			goto err;
	} else {
		/* the fuzzer is the server: the IUT's hello and Brochure, our answer */
		if (add_simple(s, WF_ACCEPT, 0, 0))
			goto err;
		b_init(&b);
		p_hello(&b, "wirefuzz-iut");
		if (add_recv_built(s, 0, "hello", &b, with_expect))
			goto err;
		/* its Brochure is not compared: an implementation may ask for
		 * extensions in it (spec/wire.md 8.1) */
		if (add_recv(s, 0, "Brochure", NULL, 0, false))
			goto err;
		b_init(&b);
		p_answer(&b, addr);
		if (add_built(s, 0, "BrochureAnswer", &b) || add_simple(s, WF_ACCEPT_REQUESTED, 0, 2))
			goto err;
		if (exchange_out(s, with_expect) || send_message(s, a))
			goto err;
		b_init(&b);
		p_reply(&b, a);
		if (add_recv_built(s, 1, "DescriptorReply", &b, with_expect) || send_tensors(s, a) ||
		    send_message(s, bm))
			goto err;
	}
	snprintf(s->klass, sizeof(s->klass), "%s", sc == WF_SC_SERVER_EXT ? "base-ext" : "base");
	snprintf(s->mutation, sizeof(s->mutation), "none (the well-formed base scenario)");
	return 0;
err:
	wf_script_free(s);
	return -1;
}
