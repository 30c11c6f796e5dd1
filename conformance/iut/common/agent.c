/*
 * agent.c - shared adapter helpers: generator, checksums, message
 * descriptions and serialised JSON-line output (see agent.h).
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

/* ---- UTF-8 ---------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at p (RFC 3629), 0 if none. */
static size_t utf8_seq(const unsigned char *p)
{
	unsigned c = p[0];
	if (c < 0x80)
		return 1;
	size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
	if (!n)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0; /* also a NUL: the sequence is cut */
	if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) || (c == 0xf0 && p[1] < 0x90) ||
	    (c == 0xf4 && p[1] > 0x8f))
		return 0; /* overlong, surrogate, past U+10FFFF */
	return n;
}

void twc_agent_utf8_scrub(char *s)
{
	unsigned char *p = (unsigned char *)s;
	while (*p) {
		size_t n = utf8_seq(p);
		if (n)
			p += n;
		else
			*p++ = '?';
	}
}

json_t *twc_agent_jstr(const char *s)
{
	char *c = strdup(s ? s : "");
	if (!c)
		return NULL;
	twc_agent_utf8_scrub(c);
	json_t *j = json_string(c);
	free(c);
	return j;
}

/* ---- generator ------------------------------------------------------------------ */

#define TW_AGENT_GAMMA UINT64_C(0x9E3779B97F4A7C15)

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

uint64_t twc_agent_gen_word(uint64_t seed, uint64_t k)
{
	return mix64(seed + (k + 1) * TW_AGENT_GAMMA);
}

static void store_le64(unsigned char *p, uint64_t w)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(w >> (8 * i));
}

/* Fills `len` bytes that start at byte offset `first_word * 8` of the stream. */
static void gen_fill_from(unsigned char *p, size_t len, uint64_t seed, uint64_t first_word)
{
	uint64_t state = seed + (first_word + 1) * TW_AGENT_GAMMA;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		store_le64(p + i, mix64(state));
		state += TW_AGENT_GAMMA;
	}
	if (i < len) {
		unsigned char tail[8];
		store_le64(tail, mix64(state));
		memcpy(p + i, tail, len - i);
	}
}

void twc_agent_gen_fill(void *buf, size_t len, uint64_t seed)
{
	if (len > 0)
		gen_fill_from(buf, len, seed, 0);
}

uint64_t twc_agent_xxh3(const void *data, size_t len)
{
	static const unsigned char empty[1];
	return XXH3_64bits(len ? data : empty, len);
}

uint64_t twc_agent_gen_xxh3(uint64_t seed, uint64_t len)
{
	enum { CHUNK = 64 << 10 }; /* a multiple of 8, so chunks start on words */
	unsigned char chunk[CHUNK];
	if (len <= CHUNK) {
		gen_fill_from(chunk, (size_t)len, seed, 0);
		return twc_agent_xxh3(chunk, (size_t)len);
	}
	XXH3_state_t *st = XXH3_createState();
	if (!st) {
		fprintf(stderr, "twc_agent_gen_xxh3: XXH3_createState: out of memory\n");
		abort();
	}
	XXH3_64bits_reset(st);
	for (uint64_t off = 0; off < len; off += CHUNK) {
		size_t n = (size_t)(len - off < CHUNK ? len - off : CHUNK);
		gen_fill_from(chunk, n, seed, off / 8);
		XXH3_64bits_update(st, chunk, n);
	}
	uint64_t h = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return h;
}

void twc_agent_hex64(uint64_t h, char out[17])
{
	snprintf(out, 17, "%016" PRIx64, h);
}

/* ---- devices ---------------------------------------------------------------------- */

int twc_agent_device_parse(const char *s, twc_agent_device *dev)
{
	const char *colon = strchr(s, ':');
	if (!colon || colon == s || (size_t)(colon - s) >= TWC_AGENT_DEVICE_TYPE_MAX)
		return -1;
	char *end;
	errno = 0;
	long idx = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || idx < INT32_MIN || idx > INT32_MAX)
		return -1;
	memset(dev, 0, sizeof(*dev));
	memcpy(dev->type, s, (size_t)(colon - s));
	dev->index = (int32_t)idx;
	return 0;
}

void twc_agent_device_format(const twc_agent_device *dev, char *buf, size_t buflen)
{
	snprintf(buf, buflen, "%s:%" PRId32, dev->type, dev->index);
}

/* ---- message descriptions ------------------------------------------------------------ */

static int parse_buf(const json_t *j, const char *what, twc_agent_buf *b, char *err,
                     size_t errlen)
{
	b->len = 0;
	b->seed = 0;
	if (!j || json_is_null(j))
		return 0;
	if (!json_is_object(j)) {
		snprintf(err, errlen, "%s: expected an object {\"len\", \"seed\"}", what);
		return -1;
	}
	const json_t *len = json_object_get(j, "len");
	const json_t *seed = json_object_get(j, "seed");
	if (len && (!json_is_integer(len) || json_integer_value(len) < 0)) {
		snprintf(err, errlen, "%s.len: expected a non-negative integer", what);
		return -1;
	}
	if (seed && (!json_is_integer(seed) || json_integer_value(seed) < 0)) {
		snprintf(err, errlen, "%s.seed: expected a non-negative integer", what);
		return -1;
	}
	b->len = len ? (uint64_t)json_integer_value(len) : 0;
	b->seed = seed ? (uint64_t)json_integer_value(seed) : 0;
	if (b->len > SIZE_MAX / 2) {
		snprintf(err, errlen, "%s.len: %" PRIu64 " is too large", what, b->len);
		return -1;
	}
	return 0;
}

static int parse_device(const json_t *j, const char *what, twc_agent_device *dev, char *err,
                        size_t errlen)
{
	if (!json_is_string(j) || twc_agent_device_parse(json_string_value(j), dev) != 0) {
		snprintf(err, errlen, "%s: expected a device string such as \"cpu:0\"", what);
		return -1;
	}
	return 0;
}

void twc_agent_msg_free(twc_agent_msg *m)
{
	if (!m)
		return;
	free(m->payloads);
	free(m->tensors);
	free(m);
}

int twc_agent_msg_parse(const json_t *j, twc_agent_msg **out, char *err, size_t errlen)
{
	char what[64];
	if (!json_is_object(j)) {
		snprintf(err, errlen, "message: expected an object");
		return -1;
	}
	twc_agent_msg *m = calloc(1, sizeof(*m));
	if (!m)
		goto err_nomem;
	if (parse_buf(json_object_get(j, "metadata"), "message.metadata", &m->metadata, err,
	              errlen))
		goto err_free;
	const json_t *ps = json_object_get(j, "payloads");
	const json_t *ts = json_object_get(j, "tensors");
	if ((ps && !json_is_array(ps)) || (ts && !json_is_array(ts))) {
		snprintf(err, errlen, "message.payloads/tensors: expected arrays");
		goto err_free;
	}
	m->num_payloads = ps ? json_array_size(ps) : 0;
	m->num_tensors = ts ? json_array_size(ts) : 0;
	if (m->num_payloads) {
		m->payloads = calloc(m->num_payloads, sizeof(*m->payloads));
		if (!m->payloads)
			goto err_nomem;
	}
	if (m->num_tensors) {
		m->tensors = calloc(m->num_tensors, sizeof(*m->tensors));
		if (!m->tensors)
			goto err_nomem;
	}
	for (size_t i = 0; i < m->num_payloads; i++) {
		const json_t *p = json_array_get(ps, i);
		snprintf(what, sizeof(what), "message.payloads[%zu]", i);
		if (parse_buf(p, what, &m->payloads[i].data, err, errlen))
			goto err_free;
		snprintf(what, sizeof(what), "message.payloads[%zu].metadata", i);
		if (parse_buf(json_object_get(p, "metadata"), what, &m->payloads[i].metadata, err,
		              errlen))
			goto err_free;
	}
	for (size_t i = 0; i < m->num_tensors; i++) {
		const json_t *t = json_array_get(ts, i);
		twc_agent_tensor *tt = &m->tensors[i];
		snprintf(what, sizeof(what), "message.tensors[%zu]", i);
		if (parse_buf(t, what, &tt->data, err, errlen))
			goto err_free;
		snprintf(what, sizeof(what), "message.tensors[%zu].metadata", i);
		if (parse_buf(json_object_get(t, "metadata"), what, &tt->metadata, err, errlen))
			goto err_free;
		const json_t *src = json_object_get(t, "source_device");
		snprintf(what, sizeof(what), "message.tensors[%zu].source_device", i);
		if (src) {
			if (parse_device(src, what, &tt->source_device, err, errlen))
				goto err_free;
		} else {
			(void)twc_agent_device_parse("cpu:0", &tt->source_device);
		}
		const json_t *dst = json_object_get(t, "target_device");
		snprintf(what, sizeof(what), "message.tensors[%zu].target_device", i);
		if (dst && !json_is_null(dst)) {
			if (parse_device(dst, what, &tt->target_device, err, errlen))
				goto err_free;
			tt->has_target_device = true;
		}
	}
	*out = m;
	return 0;

err_nomem:
	snprintf(err, errlen, "message: out of memory");
err_free:
	twc_agent_msg_free(m);
	return -1;
}

void *twc_agent_buf_make(const twc_agent_buf *b, bool *failed)
{
	*failed = false;
	if (b->len == 0)
		return NULL;
	void *p = malloc((size_t)b->len);
	if (!p) {
		*failed = true;
		return NULL;
	}
	twc_agent_gen_fill(p, (size_t)b->len, b->seed);
	return p;
}

json_t *twc_agent_sum_json(const void *data, size_t len)
{
	char hex[17];
	twc_agent_hex64(twc_agent_xxh3(data, len), hex);
	return json_pack("{s:I,s:s}", "len", (json_int_t)len, "xxh3", hex);
}

/* ---- JSON lines ------------------------------------------------------------------------- */

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

void twc_agent_emit(json_t *obj)
{
	char *line = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!line) {
		fprintf(stderr, "agent: json_dumps failed (out of memory)\n");
		abort();
	}
	pthread_mutex_lock(&out_lock);
	fputs(line, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
	free(line);
}

static json_t *id_json(json_int_t id)
{
	return id < 0 ? json_null() : json_integer(id);
}

json_t *twc_agent_error_json(const char *kind, const char *status, const char *text)
{
	/* the IUT's own words, maybe cut to fit mid-character: made valid
	 * UTF-8, so that the error is never lost from its response */
	return json_pack("{s:s,s:o,s:o}", "kind", kind, "status", twc_agent_jstr(status), "text",
	                 twc_agent_jstr(text));
}

void twc_agent_respond_ok(json_int_t id, json_t *fields)
{
	json_t *o = fields ? fields : json_object();
	json_object_set_new(o, "id", id_json(id));
	json_object_set_new(o, "ok", json_true());
	twc_agent_emit(o);
}

void twc_agent_respond_err(json_int_t id, const char *kind, const char *status,
                          const char *text)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", id_json(id));
	json_object_set_new(o, "ok", json_false());
	json_object_set_new(o, "error", twc_agent_error_json(kind, status, text));
	twc_agent_emit(o);
}

void twc_agent_event_ok(const char *name, json_int_t id, json_t *fields)
{
	json_t *o = fields ? fields : json_object();
	json_object_set_new(o, "event", json_string(name));
	json_object_set_new(o, "id", id_json(id));
	json_object_set_new(o, "ok", json_true());
	twc_agent_emit(o);
}

void twc_agent_event_err(const char *name, json_int_t id, const char *kind, const char *status,
                        const char *text)
{
	json_t *o = json_object();
	json_object_set_new(o, "event", json_string(name));
	json_object_set_new(o, "id", id_json(id));
	json_object_set_new(o, "ok", json_false());
	json_object_set_new(o, "error", twc_agent_error_json(kind, status, text));
	twc_agent_emit(o);
}

json_t *twc_agent_read_request(void)
{
	char *line = NULL;
	size_t cap = 0;
	for (;;) {
		ssize_t n = getline(&line, &cap, stdin);
		if (n < 0) {
			free(line);
			return NULL;
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue; /* blank lines are allowed and ignored */
		json_error_t jerr;
		json_t *req = json_loads(line, 0, &jerr);
		if (!req || !json_is_object(req)) {
			char text[256];
			snprintf(text, sizeof(text), "request is not a JSON object: %s",
			         req ? "not an object" : jerr.text);
			json_decref(req);
			twc_agent_respond_err(-1, "inval", "bad_request", text);
			continue;
		}
		free(line);
		return req;
	}
}

/* ---- requests ----------------------------------------------------------------------------- */

static int parse_backends(const json_t *arr, const char *what, const twc_agent_backend *dflt,
                          twc_agent_backend **out, size_t *n, char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	if (!arr || json_is_null(arr)) {
		arr = NULL; /* the default (6.2): absent or null */
	} else if (!json_is_array(arr)) {
		snprintf(err, errlen, "context: '%s' must be an array (or absent for the default)", what);
		return -1;
	}
	size_t k = arr ? json_array_size(arr) : 1;
	*out = calloc(k + 1, sizeof(**out));
	if (!*out) {
		snprintf(err, errlen, "context: out of memory");
		return -1;
	}
	if (!arr) {
		(*out)[0] = *dflt;
		*n = 1;
		return 0;
	}
	for (size_t i = 0; i < k; i++) {
		const json_t *e = json_array_get(arr, i);
		const json_t *name = json_object_get(e, "name"), *kind = json_object_get(e, "kind");
		const json_t *prio = json_object_get(e, "priority"), *opts = json_object_get(e, "options");
		const char *bad = !json_is_object(e)                                   ? "an object"
		                  : !json_is_string(name) || !json_string_length(name) ? "a 'name' string"
		                  : kind && !json_is_null(kind) && !json_is_string(kind) ? "a string 'kind'"
		                  : prio && !json_is_integer(prio) ? "an integer 'priority'"
		                  : opts && !json_is_null(opts) && !json_is_object(opts)
		                          ? "an object 'options'"
		                          : NULL;
		if (bad) {
			snprintf(err, errlen, "context: %s[%zu] must be %s", what, i, bad);
			free(*out);
			*out = NULL;
			return -1;
		}
		twc_agent_backend *b = &(*out)[i];
		b->name = json_string_value(name);
		b->kind = json_is_string(kind) ? json_string_value(kind) : b->name;
		b->priority = prio ? json_integer_value(prio) : 0;
		b->options = json_is_object(opts) ? opts : NULL;
	}
	*n = k;
	return 0;
}

static int parse_bound(const json_t *req, const char *key, bool *has, uint64_t *ms, char *err,
                       size_t errlen)
{
	const json_t *v = json_object_get(req, key);
	*has = v != NULL;
	*ms = 0;
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		snprintf(err, errlen, "context: '%s' must be a non-negative integer", key);
		return -1;
	}
	*ms = (uint64_t)json_integer_value(v);
	return 0;
}

static int parse_extensions(const json_t *req, const json_t **out, char *err, size_t errlen)
{
	const json_t *v = json_object_get(req, "extensions");
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	const char *k;
	const json_t *on;
	bool ok = json_is_object(v);
	json_object_foreach((json_t *)v, k, on)
		ok = ok && json_is_boolean(on);
	if (!ok) {
		snprintf(err, errlen, "context: 'extensions' must be an object of booleans");
		return -1;
	}
	*out = v;
	return 0;
}

int twc_agent_parse_context(const json_t *req, twc_agent_context_req *out, char *err,
                           size_t errlen)
{
	static const twc_agent_backend uv = {"uv", "uv", 0, NULL}, basic = {"basic", "basic", 0, NULL};
	memset(out, 0, sizeof(*out));
	const json_t *name = json_object_get(req, "name");
	if (name && !json_is_string(name)) {
		snprintf(err, errlen, "context: 'name' must be a string");
		return -1;
	}
	out->name = name ? json_string_value(name) : "";
	if (parse_bound(req, "handshake_timeout_ms", &out->has_handshake_timeout,
	                &out->handshake_timeout_ms, err, errlen) ||
	    parse_bound(req, "operation_timeout_ms", &out->has_operation_timeout,
	                &out->operation_timeout_ms, err, errlen) ||
	    parse_extensions(req, &out->extensions, err, errlen) ||
	    parse_backends(json_object_get(req, "transports"), "transports", &uv, &out->transports,
	                   &out->num_transports, err, errlen) ||
	    parse_backends(json_object_get(req, "channels"), "channels", &basic, &out->channels,
	                   &out->num_channels, err, errlen)) {
		twc_agent_context_req_clear(out);
		return -1;
	}
	return 0;
}

void twc_agent_context_req_clear(twc_agent_context_req *r)
{
	free(r->transports);
	free(r->channels);
	memset(r, 0, sizeof(*r));
}

int twc_agent_parse_urls(const json_t *req, const char ***urls, size_t *n, char *err,
                        size_t errlen)
{
	const json_t *us = json_object_get(req, "urls");
	*urls = NULL;
	*n = 0;
	if (!json_is_array(us) || json_array_size(us) == 0) {
		snprintf(err, errlen, "listen: 'urls' must list URLs");
		return -1;
	}
	size_t k = json_array_size(us);
	const char **v = calloc(k, sizeof(*v));
	if (!v) {
		snprintf(err, errlen, "listen: out of memory");
		return -1;
	}
	for (size_t i = 0; i < k; i++) {
		v[i] = json_string_value(json_array_get(us, i));
		if (!v[i]) {
			snprintf(err, errlen, "listen: urls[%zu] must be a string", i);
			free(v);
			return -1;
		}
	}
	*urls = v;
	*n = k;
	return 0;
}

/* ---- fds: a process short of descriptors --------------------------------------------------- */

static int *held_fds;
static size_t num_held;
static struct rlimit saved_limit;
static bool limit_saved;

static void release_fds(void)
{
	for (size_t i = 0; i < num_held; i++)
		close(held_fds[i]);
	free(held_fds);
	held_fds = NULL;
	num_held = 0;
	if (limit_saved)
		(void)setrlimit(RLIMIT_NOFILE, &saved_limit);
	limit_saved = false;
}

/* Opens /dev/null until the process is out of descriptors, then closes
 * `free_count` of them. The soft limit is first brought down to the highest
 * descriptor in use plus a margin, so that this takes hundreds of opens, not
 * a million. */
static int hold_fds(json_int_t free_count, char *err, size_t errlen)
{
	release_fds();
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
		snprintf(err, errlen, "fds: getrlimit: %s", strerror(errno));
		return -1;
	}
	int top = 0;
	for (int fd = 0; fd < 65536 && (rlim_t)fd < rl.rlim_cur; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			top = fd;
	rlim_t want = (rlim_t)top + 1 + 256 + (rlim_t)free_count;
	if (want < rl.rlim_cur) {
		saved_limit = rl;
		limit_saved = true;
		struct rlimit lower = {want, rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &lower) != 0) {
			snprintf(err, errlen, "fds: setrlimit(%llu): %s", (unsigned long long)want,
			         strerror(errno));
			release_fds();
			return -1;
		}
	}
	size_t cap = 0;
	for (;;) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				break;
			snprintf(err, errlen, "fds: open /dev/null: %s", strerror(errno));
			release_fds();
			return -1;
		}
		if (num_held == cap) {
			cap = cap ? 2 * cap : 256;
			int *grown = realloc(held_fds, cap * sizeof(*grown));
			if (!grown) {
				close(fd);
				snprintf(err, errlen, "fds: out of memory");
				release_fds();
				return -1;
			}
			held_fds = grown;
		}
		held_fds[num_held++] = fd;
	}
	for (json_int_t i = 0; i < free_count && num_held > 0; i++)
		close(held_fds[--num_held]);
	return (int)num_held;
}

void twc_agent_cmd_fds(json_int_t id, const json_t *req)
{
	const json_t *f = json_object_get(req, "free");
	if (json_is_null(f)) {
		release_fds();
		twc_agent_respond_ok(id, json_pack("{s:i}", "held", 0));
		return;
	}
	if (!json_is_integer(f) || json_integer_value(f) < 0 || json_integer_value(f) > 4096) {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     "fds: 'free' must be null or an integer 0..4096");
		return;
	}
	char err[256];
	int held = hold_fds(json_integer_value(f), err, sizeof(err));
	if (held < 0)
		twc_agent_respond_err(id, "sys", "fds", err);
	else
		twc_agent_respond_ok(id, json_pack("{s:i}", "held", held));
}

void twc_agent_cmd_dumpable(json_int_t id, const json_t *req)
{
	const json_t *v = json_object_get(req, "dumpable");
	if (!json_is_boolean(v)) {
		twc_agent_respond_err(id, "inval", "bad_request", "dumpable: 'dumpable' must be a boolean");
		return;
	}
	if (prctl(PR_SET_DUMPABLE, json_is_true(v) ? 1 : 0, 0, 0, 0) != 0) {
		char text[128];
		snprintf(text, sizeof(text), "prctl(PR_SET_DUMPABLE): %s", strerror(errno));
		twc_agent_respond_err(id, "sys", "dumpable", text);
		return;
	}
	twc_agent_respond_ok(id, json_pack("{s:i}", "dumpable", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)));
}

/* ---- forks (6.14) ---- */

typedef struct forks_job {
	json_int_t id;
	int children;
	size_t heap;
} forks_job;

static void *forks_main(void *arg)
{
	forks_job *j = arg;
	long page = sysconf(_SC_PAGESIZE);
	volatile unsigned char *heap = malloc(j->heap);
	int failed = 0, forked = 0;
	char why[160] = "";
	if (!heap) {
		twc_agent_event_err("forks", j->id, "nomem", "forks", "forks: malloc of the heap block");
		free(j);
		return NULL;
	}
	for (size_t k = 0; k < j->heap; k += (size_t)page)
		heap[k] = 1; /* the parent's pages exist before the first fork */
	for (int i = 0; i < j->children; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			/* the child: only memory writes and _exit (async-signal-safe) */
			for (size_t k = 0; k < j->heap; k += (size_t)page)
				heap[k] = (unsigned char)(k >> 12);
			_exit(0);
		}
		if (pid < 0) {
			snprintf(why, sizeof(why), "fork: %s", strerror(errno));
			failed++;
			break;
		}
		forked++;
		int st = 0;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			failed++;
			snprintf(why, sizeof(why), "child %d ended with status 0x%x", i, st);
		}
	}
	free((void *)heap);
	if (failed)
		twc_agent_event_err("forks", j->id, "sys", "forks", why);
	else
		twc_agent_event_ok("forks", j->id, json_pack("{s:i}", "children", forked));
	free(j);
	return NULL;
}

void twc_agent_cmd_forks(json_int_t id, const json_t *req)
{
	json_t *c = json_object_get(req, "children"), *h = json_object_get(req, "heap_mb");
	if (!json_is_integer(c) || json_integer_value(c) < 1 || json_integer_value(c) > 1000 ||
	    !json_is_integer(h) || json_integer_value(h) < 1 || json_integer_value(h) > 4096) {
		twc_agent_respond_err(id, "inval", "bad_request",
		                     "forks: 'children' must be 1..1000 and 'heap_mb' 1..4096");
		return;
	}
	forks_job *j = malloc(sizeof(*j));
	if (!j) {
		twc_agent_respond_err(id, "nomem", "forks", "forks: out of memory");
		return;
	}
	j->id = id;
	j->children = (int)json_integer_value(c);
	j->heap = (size_t)json_integer_value(h) << 20;
	/* the response first: the event must not overtake it */
	twc_agent_respond_ok(id, NULL);
	pthread_t t;
	if (pthread_create(&t, NULL, forks_main, j) != 0) {
		free(j);
		twc_agent_event_err("forks", id, "sys", "forks", "forks: cannot start the thread");
		return;
	}
	pthread_detach(t);
}
