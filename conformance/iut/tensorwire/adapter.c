/*
 * adapter.c - the agent-protocol adapter (spec/agent.md) over libtensorwire,
 * through its public header only (tensorwire/tensorwire.h).
 *
 * The harness spawns this program and speaks JSON lines over stdin/stdout.
 * Requests are handled one at a time on the main thread; the library runs
 * its callbacks on the context's loop thread, and each callback becomes
 * exactly one event line (output is serialised in common/agent.c). This
 * program adds no behaviour of its own: it must not retry, reorder, filter or
 * deduplicate anything the library does, because the harness judges the
 * library through it. Diagnostics go to stderr; stdout carries protocol lines
 * only.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorwire/tensorwire.h>

#include "agent.h"
#include "agent_cuda.h"

/* ---- adapter state ------------------------------------------------------------ */

#define MAX_DESCS 64

typedef struct pipe_entry {
	char id[24];
	tw_pipe *pipe;
	bool is_server;
	/* descriptors delivered and not read yet (owned by the library) */
	const tw_message *descs[MAX_DESCS];
	size_t ndescs;
} pipe_entry;

typedef struct listener_entry {
	char id[24];
	tw_listener *listener;
} listener_entry;

/* g_lock guards the tables and every pipe_entry; it is never held while
 * calling the library. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pipe_entry **g_pipes;
static size_t g_npipes, g_cappipes;
static listener_entry **g_listeners;
static size_t g_nlisteners, g_caplisteners;
static unsigned long g_next_pipe = 1, g_next_listener = 1;
static tw_context *g_ctx;
static bool g_ctx_closed;

static const char *kind_of(tw_status_t st)
{
	switch (st) {
	case TW_OK: return "ok";
	case TW_ERR_NOMEM: return "nomem";
	case TW_ERR_INVAL: return "inval";
	case TW_ERR_PROTO: return "proto";
	case TW_ERR_CLOSED: return "closed";
	case TW_ERR_EOF: return "eof";
	case TW_ERR_TIMEDOUT: return "timedout";
	case TW_ERR_CANCELED: return "canceled";
	case TW_ERR_UNSUPPORTED: return "unsupported";
	case TW_ERR_NODEV: return "nodev";
	case TW_ERR_SYS: return "sys";
	case TW_ERR_CONNRESET: return "reset";
	}
	return "other";
}

static void respond_status(json_int_t id, tw_status_t st, const char *call)
{
	char text[1024];
	snprintf(text, sizeof(text), "%s: %s", call, tw_last_error());
	twc_agent_respond_err(id, kind_of(st), tw_status_name(st), text);
}

static void event_status(const char *name, json_int_t id, tw_status_t st, const char *detail)
{
	twc_agent_event_err(name, id, kind_of(st), tw_status_name(st), detail ? detail : "");
}

static pipe_entry *add_pipe(tw_pipe *p, bool is_server)
{
	pipe_entry *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->pipe = p;
	e->is_server = is_server;
	pthread_mutex_lock(&g_lock);
	if (g_npipes == g_cappipes) {
		size_t ncap = g_cappipes ? 2 * g_cappipes : 16;
		pipe_entry **n = realloc(g_pipes, ncap * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&g_lock);
			free(e);
			return NULL;
		}
		g_pipes = n;
		g_cappipes = ncap;
	}
	snprintf(e->id, sizeof(e->id), "p%lu", g_next_pipe++);
	g_pipes[g_npipes++] = e;
	pthread_mutex_unlock(&g_lock);
	return e;
}

static pipe_entry *find_pipe(const json_t *req)
{
	const char *id = json_string_value(json_object_get(req, "pipe"));
	pipe_entry *r = NULL;
	if (!id)
		return NULL;
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < g_npipes; i++) {
		if (strcmp(g_pipes[i]->id, id) == 0)
			r = g_pipes[i];
	}
	pthread_mutex_unlock(&g_lock);
	return r;
}

static listener_entry *find_listener(const json_t *req)
{
	const char *id = json_string_value(json_object_get(req, "listener"));
	listener_entry *r = NULL;
	if (!id)
		return NULL;
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < g_nlisteners; i++) {
		if (strcmp(g_listeners[i]->id, id) == 0)
			r = g_listeners[i];
	}
	pthread_mutex_unlock(&g_lock);
	return r;
}

/* Callback argument: the request id, boxed (callbacks get a void *). */
typedef struct op {
	json_int_t id;
	pipe_entry *pe;
	void **bufs;      /* write: source buffers; read: destination buffers */
	size_t nbufs;
	size_t *lens;     /* read: lengths, payloads then tensors */
	char (*devs)[48]; /* read: tensor devices */
	int *cuda;        /* per buffer: the CUDA device it is memory of, or -1 (host) */
	size_t npayloads, ntensors;
} op;

/* Buffers of op o: n slots, each host memory until moved to a device. */
static bool op_bufs(op *o, size_t n)
{
	o->bufs = calloc(n + 1, sizeof(void *));
	o->cuda = calloc(n + 1, sizeof(int));
	if (!o->bufs || !o->cuda)
		return false;
	for (size_t i = 0; i <= n; i++)
		o->cuda[i] = -1;
	return true;
}

/* Buffer k of o, host memory holding len bytes, moves to the device `dev`
 * names when it is a CUDA device; -1 with the reason otherwise. */
static int op_to_device(op *o, size_t k, const tw_device *dev, size_t len, char *err,
                        size_t errlen)
{
	if (strcmp(dev->type, "cuda") != 0)
		return 0;
	void *d;
	if (twc_cuda_alloc(dev->index, len, &d, err, errlen) ||
	    twc_cuda_copy(dev->index, d, o->bufs[k], len, err, errlen)) {
		return -1;
	}
	free(o->bufs[k]);
	o->bufs[k] = d;
	o->cuda[k] = dev->index;
	return 0;
}

static op *op_new(json_int_t id, pipe_entry *pe)
{
	op *o = calloc(1, sizeof(*o));
	if (o) {
		o->id = id;
		o->pe = pe;
	}
	return o;
}

static void op_free(op *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->nbufs; i++) {
		if (o->cuda && o->cuda[i] >= 0)
			twc_cuda_free(o->cuda[i], o->bufs[i]);
		else
			free(o->bufs[i]);
	}
	free(o->bufs);
	free(o->lens);
	free(o->devs);
	free(o->cuda);
	free(o);
}

/* ---- commands ------------------------------------------------------------------- */

/* The kinds libtensorwire implements. A context naming any other fails
 * with unsupported, where a kind the library refuses here is only not
 * viable (spec/agent.md 6.2). hello lists the `offered` ones (6.1), those
 * the battery stamps its cases over: not the "tcp" alias of uv, not xth
 * (both ends in one process, an adapter is one end), not the CUDA
 * channels (device tensors: the cuda suite asks for them itself). */
static const struct {
	const char *kind;
	bool channel, offered;
} kinds[] = {
	{ "uv", false, true },          { "tcp", false, false },       { "shm", false, true },
	{ "ibv", false, true },         { "basic", true, true },       { "cma", true, true },
	{ "mpt", true, true },          { "xth", true, false },        { "cuda_basic", true, false },
	{ "cuda_xth", true, false },    { "cuda_ipc", true, false },   { "cuda_gdr", true, false },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static bool known_kind(const char *kind, bool channel)
{
	for (size_t i = 0; i < NKINDS; i++)
		if (kinds[i].channel == channel && !strcmp(kinds[i].kind, kind))
			return true;
	return false;
}

static json_t *offered_kinds(bool channel)
{
	json_t *a = json_array();
	for (size_t i = 0; i < NKINDS; i++)
		if (kinds[i].channel == channel && kinds[i].offered)
			json_array_append_new(a, json_string(kinds[i].kind));
	return a;
}

static void cmd_hello(json_int_t id)
{
	/* The mutation suite's build (TW_ADAPTER_MUTANTS) says which seeded
	 * defect it runs with, so every report shows it. */
	char version[128] = TW_VERSION_STRING;
#ifdef TW_ADAPTER_MUTANTS
	const char *mut = getenv("TW_MUTANT");
	snprintf(version, sizeof(version), "%s+mutant.%s", TW_VERSION_STRING,
	         mut && *mut ? mut : "none");
#endif
	twc_agent_respond_ok(id, json_pack("{s:s,s:s,s:s,s:i,s:o,s:o}", "impl", "tensorwire",
	                                  "version", version, "adapter",
	                                  "tw-iut-ours " TW_VERSION_STRING, "protocol",
	                                  TWC_AGENT_PROTOCOL_VERSION, "transports",
	                                  offered_kinds(false), "channels", offered_kinds(true)));
}

/* {"k": v, ...} -> "k=v,k=v" (NULL when empty). */
static char *options_string(const json_t *opts)
{
	if (!json_is_object(opts) || json_object_size(opts) == 0)
		return NULL;
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	const char *k;
	json_t *v;
	bool first = true;
	json_object_foreach((json_t *)opts, k, v) {
		fprintf(f, "%s%s=", first ? "" : ",", k);
		if (json_is_string(v))
			fputs(json_string_value(v), f);
		else if (json_is_integer(v))
			fprintf(f, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		else if (json_is_boolean(v))
			fputs(json_is_true(v) ? "1" : "0", f);
		first = false;
	}
	fclose(f);
	return s;
}

static size_t g_transports; /* registered (viable) in g_ctx */

static void cmd_context(json_int_t id, const json_t *req)
{
	if (g_ctx) {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     "context: this adapter already has a context");
		return;
	}
	twc_agent_context_req r;
	char err[256];
	if (twc_agent_parse_context(req, &r, err, sizeof(err))) {
		twc_agent_respond_err(id, "inval", "bad_request", err);
		return;
	}
	tw_context *ctx = NULL;
	tw_status_t st = tw_context_create(r.name, &ctx);
	const char *fn = "tw_context_create";
	if (st == TW_OK && r.has_handshake_timeout) {
		st = tw_context_set_handshake_timeout(ctx, r.handshake_timeout_ms);
		fn = "tw_context_set_handshake_timeout";
	}
	if (st == TW_OK && r.has_operation_timeout) {
		st = tw_context_set_operation_timeout(ctx, r.operation_timeout_ms);
		fn = "tw_context_set_operation_timeout";
	}
	/* spec/agent.md 6.2: eager and noreply (spec/wire.md 8.4, 8.5) are the
	 * extensions a user can switch, both with one call; any other name is
	 * one this library does not have */
	json_t *unhonoured = json_array();
	const char *ext;
	const json_t *on;
	int small = -1; /* the eager/noreply switch as asked, -1: not asked */
	json_object_foreach((json_t *)r.extensions, ext, on) {
		bool ours = !strcmp(ext, "eager") || !strcmp(ext, "noreply");
		if (ours && small >= 0 && small != json_is_true(on)) {
			json_array_append_new(unhonoured,
			                      json_pack("{s:s,s:s}", "name", ext, "reason",
			                                "tensorwire switches eager and noreply together "
			                                "(tw_context_set_eager)"));
		} else if (ours && st == TW_OK) {
			small = json_is_true(on);
			st = tw_context_set_eager(ctx, small);
			fn = "tw_context_set_eager";
		} else if (!ours && (!strcmp(ext, "goodbye") || !strcmp(ext, "proof"))) {
			/* always asked for (proof: where a registered channel speaks it) */
			if (!json_is_true(on))
				json_array_append_new(unhonoured,
				                      json_pack("{s:s,s:s}", "name", ext, "reason",
				                                "tensorwire always uses it where it applies; "
				                                "it cannot be switched off"));
		} else if (!ours && json_is_true(on)) {
			json_array_append_new(unhonoured,
			                      json_pack("{s:s,s:s}", "name", ext, "reason",
			                                "tensorwire implements no extension of that name"));
		}
	}
	json_t *skipped = json_array();
	size_t transports = 0;
	err[0] = '\0'; /* an unknown kind, said below */
	for (int pass = 0; pass < 2 && st == TW_OK && !err[0]; pass++) {
		const twc_agent_backend *bs = pass ? r.channels : r.transports;
		size_t n = pass ? r.num_channels : r.num_transports;
		for (size_t i = 0; i < n && st == TW_OK; i++) {
			if (!known_kind(bs[i].kind, pass)) {
				snprintf(err, sizeof(err), "context: unknown %s kind '%.64s'",
				         pass ? "channel" : "transport", bs[i].kind);
				break;
			}
			char *opts = options_string(bs[i].options);
			st = pass ? tw_context_register_channel(ctx, bs[i].kind, bs[i].name,
			                                        (int64_t)bs[i].priority, opts)
			          : tw_context_register_transport(ctx, bs[i].kind, bs[i].name,
			                                          (int64_t)bs[i].priority, opts);
			free(opts);
			fn = pass ? "tw_context_register_channel" : "tw_context_register_transport";
			if (st == TW_ERR_UNSUPPORTED) {
				json_array_append_new(skipped, json_pack("{s:s,s:o}", "name", bs[i].name,
				                                         "reason", twc_agent_jstr(tw_last_error())));
				st = TW_OK;
			} else if (st == TW_OK && !pass) {
				transports++;
			}
		}
	}
	twc_agent_context_req_clear(&r);
	if (st != TW_OK || err[0]) {
		if (err[0])
			twc_agent_respond_err(id, "unsupported", "unknown_kind", err);
		else
			respond_status(id, st, fn);
		json_decref(skipped);
		json_decref(unhonoured);
		if (ctx)
			tw_context_destroy(ctx);
		return;
	}
	g_ctx = ctx;
	g_transports = transports;
	json_t *resp = json_pack("{s:o}", "skipped", skipped);
	if (json_array_size(unhonoured) > 0)
		json_object_set_new(resp, "unhonoured", unhonoured);
	else
		json_decref(unhonoured);
	twc_agent_respond_ok(id, resp);
}

static bool need_ctx(json_int_t id)
{
	if (!g_ctx || g_ctx_closed) {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     g_ctx ? "the context is closed" : "no context: send 'context' first");
		return false;
	}
	return true;
}

/* A context with no transport can neither listen nor connect
 * (spec/agent.md 6.2). */
static bool need_transport(json_int_t id, const char *cmd)
{
	if (g_transports > 0)
		return true;
	char text[96];
	snprintf(text, sizeof(text), "%s: the context has no transport", cmd);
	twc_agent_respond_err(id, "unsupported", "no_transport", text);
	return false;
}

static void cmd_listen(json_int_t id, const json_t *req)
{
	if (!need_ctx(id) || !need_transport(id, "listen"))
		return;
	const char **urls;
	size_t n;
	char err[256];
	if (twc_agent_parse_urls(req, &urls, &n, err, sizeof(err))) {
		twc_agent_respond_err(id, "inval", "bad_request", err);
		return;
	}
	tw_listener *l;
	tw_status_t st = tw_context_listen(g_ctx, urls, n, &l);
	if (st != TW_OK) {
		free(urls);
		respond_status(id, st, "tw_context_listen");
		return;
	}
	json_t *bound = json_array();
	for (size_t i = 0; i < n; i++) {
		char scheme[64], buf[512];
		const char *sep = strstr(urls[i], "://");
		size_t sl = sep ? (size_t)(sep - urls[i]) : 0;
		snprintf(scheme, sizeof(scheme), "%.*s", (int)(sl < sizeof(scheme) ? sl : 0), urls[i]);
		st = tw_listener_url(l, scheme[0] ? scheme : NULL, buf, sizeof(buf));
		json_array_append_new(bound, json_string(st == TW_OK ? buf : ""));
	}
	free(urls);
	listener_entry *e = calloc(1, sizeof(*e));
	pthread_mutex_lock(&g_lock);
	listener_entry **nl = NULL;
	if (e && g_nlisteners == g_caplisteners) {
		size_t ncap = g_caplisteners ? 2 * g_caplisteners : 8;
		nl = realloc(g_listeners, ncap * sizeof(*nl));
		if (nl) {
			g_listeners = nl;
			g_caplisteners = ncap;
		}
	}
	if (!e || g_nlisteners == g_caplisteners) {
		pthread_mutex_unlock(&g_lock);
		free(e);
		json_decref(bound);
		tw_listener_destroy(l);
		twc_agent_respond_err(id, "nomem", "malloc", "listen: out of memory");
		return;
	}
	e->listener = l;
	snprintf(e->id, sizeof(e->id), "l%lu", g_next_listener++);
	g_listeners[g_nlisteners++] = e;
	pthread_mutex_unlock(&g_lock);
	twc_agent_respond_ok(id, json_pack("{s:s,s:o}", "listener", e->id, "urls", bound));
}

static void on_accept(tw_listener *listener, tw_status_t status, const char *detail, tw_pipe *pipe,
                      void *arg)
{
	op *o = arg;
	if (status != TW_OK) {
		event_status("accept", o->id, status, detail);
	} else {
		pipe_entry *e = add_pipe(pipe, true);
		if (!e) {
			tw_pipe_destroy(pipe);
			twc_agent_event_err("accept", o->id, "nomem", "adapter", "adapter: out of memory");
		} else {
			twc_agent_event_ok("accept", o->id, json_pack("{s:s}", "pipe", e->id));
		}
	}
	op_free(o);
}

static void cmd_accept(json_int_t id, const json_t *req)
{
	listener_entry *le = find_listener(req);
	if (!le) {
		twc_agent_respond_err(id, "inval", "bad_request", "accept: unknown listener");
		return;
	}
	op *o = op_new(id, NULL);
	if (!o) {
		twc_agent_respond_err(id, "nomem", "malloc", "accept: out of memory");
		return;
	}
	/* The event may overtake the response (spec/agent.md 3.4). On failure
	 * the library runs no callback, so the op is still ours to free. */
	tw_status_t st = tw_listener_accept(le->listener, on_accept, o);
	if (st != TW_OK) {
		op_free(o);
		respond_status(id, st, "tw_listener_accept");
		return;
	}
	twc_agent_respond_ok(id, NULL);
}

static void cmd_connect(json_int_t id, const json_t *req)
{
	if (!need_ctx(id) || !need_transport(id, "connect"))
		return;
	const char *url = json_string_value(json_object_get(req, "url"));
	tw_pipe *p;
	tw_status_t st = tw_context_connect(g_ctx, url ? url : "", &p);
	if (st != TW_OK) {
		respond_status(id, st, "tw_context_connect");
		return;
	}
	pipe_entry *e = add_pipe(p, false);
	if (!e) {
		tw_pipe_destroy(p);
		twc_agent_respond_err(id, "nomem", "malloc", "connect: out of memory");
		return;
	}
	twc_agent_respond_ok(id, json_pack("{s:s}", "pipe", e->id));
}

static void on_write(tw_pipe *pipe, tw_status_t status, const char *detail, void *arg)
{
	op *o = arg;
	if (status != TW_OK)
		event_status("write", o->id, status, detail);
	else
		twc_agent_event_ok("write", o->id, NULL);
	op_free(o);
}

static void to_tw_device(const twc_agent_device *d, tw_device *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->type, sizeof(out->type), "%s", d->type);
	out->index = d->index;
}

static void cmd_write(json_int_t id, const json_t *req)
{
	pipe_entry *pe = find_pipe(req);
	if (!pe) {
		twc_agent_respond_err(id, "inval", "bad_request", "write: unknown pipe");
		return;
	}
	char err[256];
	twc_agent_msg *m;
	if (twc_agent_msg_parse(json_object_get(req, "message"), &m, err, sizeof(err)) != 0) {
		twc_agent_respond_err(id, "inval", "bad_request", err);
		return;
	}
	/* Metadata arrays are copied by tw_pipe_write; data buffers live in the op. */
	size_t nb = 1 + 2 * m->num_payloads + 2 * m->num_tensors;
	op *o = op_new(id, pe);
	tw_payload *ps = calloc(m->num_payloads + 1, sizeof(*ps));
	tw_tensor *ts = calloc(m->num_tensors + 1, sizeof(*ts));
	bool failed = !o || !ps || !ts || !op_bufs(o, nb);
#define MAKE(b) (failed ? NULL : (o->bufs[o->nbufs++] = twc_agent_buf_make((b), &failed)))
	tw_message msg = {0};
	msg.metadata = MAKE(&m->metadata);
	msg.metadata_length = (size_t)m->metadata.len;
	for (size_t i = 0; i < m->num_payloads && !failed; i++) {
		ps[i].data = MAKE(&m->payloads[i].data);
		ps[i].length = (size_t)m->payloads[i].data.len;
		ps[i].metadata = MAKE(&m->payloads[i].metadata);
		ps[i].metadata_length = (size_t)m->payloads[i].metadata.len;
	}
	char derr[256] = "";
	for (size_t i = 0; i < m->num_tensors && !failed; i++) {
		const twc_agent_tensor *t = &m->tensors[i];
		ts[i].data = MAKE(&t->data);
		ts[i].length = (size_t)t->data.len;
		to_tw_device(&t->source_device, &ts[i].source_device);
		if (!failed && op_to_device(o, o->nbufs - 1, &ts[i].source_device, ts[i].length, derr,
		                            sizeof(derr)) != 0)
			break;
		ts[i].data = o->bufs[o->nbufs - 1];
		ts[i].has_target_device = t->has_target_device;
		if (t->has_target_device)
			to_tw_device(&t->target_device, &ts[i].target_device);
		ts[i].metadata = MAKE(&t->metadata);
		ts[i].metadata_length = (size_t)t->metadata.len;
	}
#undef MAKE
	msg.num_payloads = m->num_payloads;
	msg.payloads = ps;
	msg.num_tensors = m->num_tensors;
	msg.tensors = ts;
	twc_agent_msg_free(m);
	if (failed || derr[0]) {
		free(ps);
		free(ts);
		op_free(o);
		if (derr[0])
			twc_agent_respond_err(id, "unsupported", "device", derr);
		else
			twc_agent_respond_err(id, "nomem", "malloc",
			                      "write: cannot allocate the message's buffers");
		return;
	}
	tw_status_t st = tw_pipe_write(pe->pipe, &msg, on_write, o);
	free(ps);
	free(ts);
	if (st != TW_OK) {
		op_free(o);
		respond_status(id, st, "tw_pipe_write");
		return;
	}
	twc_agent_respond_ok(id, NULL);
}

static json_t *device_json(const tw_device *d)
{
	char buf[48];
	snprintf(buf, sizeof(buf), "%s:%" PRId32, d->type, d->index);
	return json_string(buf);
}

static json_t *descriptor_json(const tw_message *d)
{
	json_t *ps = json_array(), *ts = json_array();
	for (size_t i = 0; i < d->num_payloads; i++) {
		const tw_payload *p = &d->payloads[i];
		json_array_append_new(ps, json_pack("{s:I,s:o}", "len", (json_int_t)p->length,
		                                    "metadata",
		                                    twc_agent_sum_json(p->metadata, p->metadata_length)));
	}
	for (size_t i = 0; i < d->num_tensors; i++) {
		const tw_tensor *t = &d->tensors[i];
		json_array_append_new(
		        ts, json_pack("{s:I,s:o,s:o,s:o}", "len", (json_int_t)t->length, "source_device",
		                      device_json(&t->source_device), "target_device",
		                      t->has_target_device ? device_json(&t->target_device) : json_null(),
		                      "metadata", twc_agent_sum_json(t->metadata, t->metadata_length)));
	}
	return json_pack("{s:o,s:o,s:o}", "metadata",
	                 twc_agent_sum_json(d->metadata, d->metadata_length), "payloads", ps, "tensors",
	                 ts);
}

static void on_descriptor(tw_pipe *pipe, tw_status_t status, const char *detail,
                          const tw_message *desc, void *arg)
{
	op *o = arg;
	if (status != TW_OK) {
		event_status("read_descriptor", o->id, status, detail);
		op_free(o);
		return;
	}
	json_t *dj = descriptor_json(desc);
	bool overflow = false;
	pthread_mutex_lock(&g_lock);
	if (o->pe->ndescs < MAX_DESCS)
		o->pe->descs[o->pe->ndescs++] = desc;
	else
		overflow = true;
	pthread_mutex_unlock(&g_lock);
	if (overflow)
		fprintf(stderr, "tensorwire adapter: more than %d unread descriptors; "
		                "the harness should read before asking for more\n", MAX_DESCS);
	twc_agent_event_ok("read_descriptor", o->id, json_pack("{s:o}", "descriptor", dj));
	op_free(o);
}

static void cmd_read_descriptor(json_int_t id, const json_t *req)
{
	pipe_entry *pe = find_pipe(req);
	if (!pe) {
		twc_agent_respond_err(id, "inval", "bad_request", "read_descriptor: unknown pipe");
		return;
	}
	op *o = op_new(id, pe);
	if (!o) {
		twc_agent_respond_err(id, "nomem", "malloc", "read_descriptor: out of memory");
		return;
	}
	tw_status_t st = tw_pipe_read_descriptor(pe->pipe, on_descriptor, o);
	if (st != TW_OK) {
		op_free(o);
		respond_status(id, st, "tw_pipe_read_descriptor");
		return;
	}
	twc_agent_respond_ok(id, NULL);
}

static void on_read(tw_pipe *pipe, tw_status_t status, const char *detail, void *arg)
{
	op *o = arg;
	if (status != TW_OK) {
		event_status("read", o->id, status, detail);
		op_free(o);
		return;
	}
	json_t *ps = json_array(), *ts = json_array();
	for (size_t i = 0; i < o->npayloads; i++)
		json_array_append_new(ps, twc_agent_sum_json(o->bufs[i], o->lens[i]));
	for (size_t i = 0; i < o->ntensors; i++) {
		size_t k = o->npayloads + i;
		json_t *tj;
		if (o->cuda[k] >= 0) { /* checksummed from a host copy */
			char derr[256];
			void *h = malloc(o->lens[k] + 1);
			if (!h || twc_cuda_copy(o->cuda[k], h, o->bufs[k], o->lens[k], derr,
			                           sizeof(derr)) != 0) {
				free(h);
				json_decref(ps);
				json_decref(ts);
				event_status("read", o->id, TW_ERR_SYS, h ? derr : "out of memory");
				op_free(o);
				return;
			}
			tj = twc_agent_sum_json(h, o->lens[k]);
			free(h);
		} else {
			tj = twc_agent_sum_json(o->bufs[k], o->lens[k]);
		}
		json_object_set_new(tj, "device", json_string(o->devs[i]));
		json_array_append_new(ts, tj);
	}
	twc_agent_event_ok("read", o->id, json_pack("{s:o,s:o}", "payloads", ps, "tensors", ts));
	op_free(o);
}

static void cmd_read(json_int_t id, const json_t *req)
{
	pipe_entry *pe = find_pipe(req);
	if (!pe) {
		twc_agent_respond_err(id, "inval", "bad_request", "read: unknown pipe");
		return;
	}
	/* the oldest descriptor not read yet; it stays so until a read of it
	 * is accepted: a refused one may be asked again (spec/agent.md 3.2) */
	const tw_message *d = NULL;
	pthread_mutex_lock(&g_lock);
	if (pe->ndescs > 0)
		d = pe->descs[0];
	pthread_mutex_unlock(&g_lock);
	if (!d) {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     "read: no descriptor delivered that was not read yet");
		return;
	}
	const json_t *adev = json_object_get(json_object_get(req, "allocation"), "tensors");
	size_t np = d->num_payloads, nt = d->num_tensors, n = np + nt;
	op *o = op_new(id, pe);
	void **pbufs = calloc(np + 1, sizeof(void *));
	tw_tensor_allocation *tas = calloc(nt + 1, sizeof(*tas));
	if (o && op_bufs(o, n)) {
		o->lens = calloc(n + 1, sizeof(size_t));
		o->devs = calloc(nt + 1, sizeof(*o->devs));
		o->npayloads = np;
		o->ntensors = nt;
		o->nbufs = n;
	}
	if (!o || !pbufs || !tas || !o->bufs || !o->lens || !o->devs)
		goto err_nomem;
	for (size_t i = 0; i < np; i++) {
		o->lens[i] = d->payloads[i].length;
		if (o->lens[i] && !(o->bufs[i] = malloc(o->lens[i])))
			goto err_nomem;
		pbufs[i] = o->bufs[i];
	}
	for (size_t i = 0; i < nt; i++) {
		const tw_tensor *t = &d->tensors[i];
		size_t k = np + i;
		o->lens[k] = t->length;
		tas[i].device = t->has_target_device ? t->target_device : tw_device_cpu();
		const char *want =
		        json_string_value(json_object_get(json_array_get(adev, i), "device"));
		if (want) {
			twc_agent_device ad;
			if (twc_agent_device_parse(want, &ad) != 0) {
				op_free(o);
				free(pbufs);
				free(tas);
				twc_agent_respond_err(id, "inval", "bad_request",
				                     "read: allocation.tensors[].device is malformed");
				return;
			}
			to_tw_device(&ad, &tas[i].device);
		}
		snprintf(o->devs[i], sizeof(o->devs[i]), "%s:%" PRId32, tas[i].device.type,
		         tas[i].device.index);
		if (!strcmp(tas[i].device.type, "cuda")) {
			char derr[256];
			if (twc_cuda_alloc(tas[i].device.index, o->lens[k], &o->bufs[k], derr,
			                   sizeof(derr)) != 0) {
				op_free(o);
				free(pbufs);
				free(tas);
				twc_agent_respond_err(id, "unsupported", "device", derr);
				return;
			}
			o->cuda[k] = tas[i].device.index;
		} else if (o->lens[k] && !(o->bufs[k] = malloc(o->lens[k]))) {
			goto err_nomem;
		}
		tas[i].data = o->bufs[k];
	}
	tw_allocation alloc = {.num_payloads = np, .payloads = pbufs, .num_tensors = nt,
	                       .tensors = tas};
	tw_status_t st = tw_pipe_read(pe->pipe, &alloc, on_read, o);
	free(pbufs);
	free(tas);
	if (st != TW_OK) {
		op_free(o);
		respond_status(id, st, "tw_pipe_read");
		return;
	}
	pthread_mutex_lock(&g_lock); /* d is still the head: only this thread takes */
	memmove(pe->descs, pe->descs + 1, (pe->ndescs - 1) * sizeof(pe->descs[0]));
	pe->ndescs--;
	pthread_mutex_unlock(&g_lock);
	twc_agent_respond_ok(id, NULL);
	return;

err_nomem:
	op_free(o);
	free(pbufs);
	free(tas);
	twc_agent_respond_err(id, "nomem", "malloc", "read: cannot allocate the buffers");
}

static void cmd_info(json_int_t id, const json_t *req)
{
	pipe_entry *pe = find_pipe(req);
	if (!pe) {
		twc_agent_respond_err(id, "inval", "bad_request", "info: unknown pipe");
		return;
	}
	tw_pipe_info info;
	tw_status_t st = tw_pipe_get_info(pe->pipe, &info);
	if (st != TW_OK) {
		respond_status(id, st, "tw_pipe_get_info");
		return;
	}
	/* the extensions the pipe uses: its verdicts' "extension NAME: used" lines */
	char v[4096];
	json_t *exts = json_array();
	if (tw_pipe_get_verdicts(pe->pipe, v, sizeof(v)) == TW_OK) {
		for (char *line = v, *nl; *line; line = nl ? nl + 1 : line + strlen(line)) {
			nl = strchr(line, '\n');
			char name[32];
			int used = 0;
			if (sscanf(line, "extension %31[^:]: used%n", name, &used) == 1 && used > 0)
				json_array_append_new(exts, json_string(name));
		}
	}
	twc_agent_respond_ok(id, json_pack("{s:s,s:s,s:s,s:b,s:o}", "transport", info.transport,
	                                  "channel", info.channel, "remote_name", info.remote_name,
	                                  "is_server", info.is_server, "extensions", exts));
}

static void cmd_close(json_int_t id, const json_t *req)
{
	if (json_object_get(req, "pipe")) {
		pipe_entry *pe = find_pipe(req);
		if (!pe) {
			twc_agent_respond_err(id, "inval", "bad_request", "close: unknown pipe");
			return;
		}
		tw_pipe_close(pe->pipe);
	} else if (json_object_get(req, "listener")) {
		listener_entry *le = find_listener(req);
		if (!le) {
			twc_agent_respond_err(id, "inval", "bad_request", "close: unknown listener");
			return;
		}
		tw_listener_close(le->listener);
	} else if (json_is_true(json_object_get(req, "context"))) {
		if (g_ctx && !g_ctx_closed) {
			g_ctx_closed = true;
			tw_context_close(g_ctx);
		}
	} else {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     "close: name a 'pipe', a 'listener' or 'context': true");
		return;
	}
	twc_agent_respond_ok(id, NULL);
}

static tw_status_t shutdown_context(void)
{
	if (!g_ctx)
		return TW_OK;
	g_ctx_closed = true;
	tw_context_close(g_ctx);
	return tw_context_join(g_ctx);
}

static void release_all(void)
{
	/* After join no callback can run, so the tables are ours alone. */
	for (size_t i = 0; i < g_npipes; i++) {
		tw_pipe_destroy(g_pipes[i]->pipe);
		free(g_pipes[i]);
	}
	for (size_t i = 0; i < g_nlisteners; i++) {
		tw_listener_destroy(g_listeners[i]->listener);
		free(g_listeners[i]);
	}
	free(g_pipes);
	free(g_listeners);
	g_pipes = NULL;
	g_listeners = NULL;
	g_npipes = g_nlisteners = 0;
	if (g_ctx)
		tw_context_destroy(g_ctx);
	g_ctx = NULL;
}

int main(void)
{
	json_t *req;
	while ((req = twc_agent_read_request()) != NULL) {
		const json_t *idj = json_object_get(req, "id");
		json_int_t id = json_is_integer(idj) ? json_integer_value(idj) : -1;
		const char *cmd = json_string_value(json_object_get(req, "cmd"));
		if (!cmd)
			cmd = "";
		if (id < 0)
			twc_agent_respond_err(-1, "inval", "bad_request",
			                     "request without a non-negative integer 'id'");
		else if (!strcmp(cmd, "hello"))
			cmd_hello(id);
		else if (!strcmp(cmd, "context"))
			cmd_context(id, req);
		else if (!strcmp(cmd, "listen"))
			cmd_listen(id, req);
		else if (!strcmp(cmd, "accept"))
			cmd_accept(id, req);
		else if (!strcmp(cmd, "connect"))
			cmd_connect(id, req);
		else if (!strcmp(cmd, "write"))
			cmd_write(id, req);
		else if (!strcmp(cmd, "read_descriptor"))
			cmd_read_descriptor(id, req);
		else if (!strcmp(cmd, "read"))
			cmd_read(id, req);
		else if (!strcmp(cmd, "info"))
			cmd_info(id, req);
		else if (!strcmp(cmd, "close"))
			cmd_close(id, req);
		else if (!strcmp(cmd, "fds"))
			twc_agent_cmd_fds(id, req);
		else if (!strcmp(cmd, "dumpable"))
			twc_agent_cmd_dumpable(id, req);
		else if (!strcmp(cmd, "forks"))
			twc_agent_cmd_forks(id, req);
		else if (!strcmp(cmd, "shutdown")) {
			tw_status_t st = shutdown_context();
			if (st != TW_OK)
				respond_status(id, st, "tw_context_join");
			else
				twc_agent_respond_ok(id, NULL);
		} else {
			char text[128];
			snprintf(text, sizeof(text), "unknown command '%.64s'", cmd);
			twc_agent_respond_err(id, "unsupported", "unknown_command", text);
		}
		json_decref(req);
	}
	(void)shutdown_context();
	release_all();
	return 0;
}
