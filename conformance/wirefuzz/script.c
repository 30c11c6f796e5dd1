/*
 * script.c - inputs of the wire fuzzer as step lists, and the reproducer
 * file format (README.md, "Reproducer format"): one step per line, frame
 * bodies in hex with $tokens for values only known at run time.
 *
 * It must not run anything: exec.c does.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wf.h"

static const char *const op_names[] = {
	[WF_CONNECT] = "connect", [WF_ACCEPT] = "accept", [WF_ACCEPT_REQUESTED] = "accept-requested",
	[WF_SEND] = "send",       [WF_RECV] = "recv",     [WF_RECV_ANSWER] = "recv-answer",
	[WF_CLOSE] = "close",     [WF_WAIT] = "wait",
};

static const char *const token_names[] = {
	[WF_TOK_NONE] = "", [WF_TOK_REPLY_ID] = "$reply_id", [WF_TOK_BASIC_ID] = "$basic_id",
	[WF_TOK_ADDR] = "$addr",
};

const char *wf_op_name(wf_op op)
{
	return (unsigned)op < sizeof(op_names) / sizeof(op_names[0]) ? op_names[op] : "?";
}

void wf_script_init(wf_script *s, wf_role role)
{
	memset(s, 0, sizeof(*s));
	s->role = role;
	s->mutated_step = -1;
}

void wf_step_free(wf_step *st)
{
	free(st->body);
	free(st->fields);
	free(st->expect);
	st->body = NULL;
	st->fields = NULL;
	st->expect = NULL;
	st->len = st->expect_len = 0;
	st->nfields = 0;
}

void wf_script_free(wf_script *s)
{
	for (int i = 0; i < s->nsteps; i++)
		wf_step_free(&s->steps[i]);
	free(s->steps);
	wf_role role = s->role;
	wf_script_init(s, role);
}

static void *dup_bytes(const void *p, size_t n)
{
	void *q = malloc(n ? n : 1);
	if (q && n)
		memcpy(q, p, n);
	return q;
}

static int step_copy(wf_step *dst, const wf_step *src)
{
	*dst = *src;
	dst->body = NULL;
	dst->fields = NULL;
	dst->expect = NULL;
	if (src->body && !(dst->body = dup_bytes(src->body, src->len)))
		goto err;
	if (src->fields && !(dst->fields = dup_bytes(src->fields, sizeof(wf_field) * (size_t)src->nfields)))
		goto err;
	if (src->expect && !(dst->expect = dup_bytes(src->expect, src->expect_len)))
		goto err;
	return 0;
err:
	wf_step_free(dst);
	return -1;
}

static int grow(wf_script *s)
{
	if (s->nsteps < s->cap)
		return 0;
	int ncap = s->cap ? s->cap * 2 : 32;
	wf_step *n = realloc(s->steps, sizeof(*n) * (size_t)ncap);
	if (!n)
		return -1;
	s->steps = n;
	s->cap = ncap;
	return 0;
}

int wf_script_insert(wf_script *s, int i, const wf_step *st)
{
	if (i < 0 || i > s->nsteps || grow(s))
		return -1;
	wf_step c;
	if (step_copy(&c, st))
		return -1;
	memmove(&s->steps[i + 1], &s->steps[i], sizeof(wf_step) * (size_t)(s->nsteps - i));
	s->steps[i] = c;
	s->nsteps++;
	if (s->mutated_step >= i)
		s->mutated_step++;
	return i;
}

int wf_script_add(wf_script *s, const wf_step *st)
{
	return wf_script_insert(s, s->nsteps, st);
}

void wf_script_remove(wf_script *s, int i)
{
	if (i < 0 || i >= s->nsteps)
		return;
	wf_step_free(&s->steps[i]);
	memmove(&s->steps[i], &s->steps[i + 1], sizeof(wf_step) * (size_t)(s->nsteps - i - 1));
	s->nsteps--;
	if (s->mutated_step == i)
		s->mutated_step = -1;
	else if (s->mutated_step > i)
		s->mutated_step--;
}

int wf_script_copy(wf_script *dst, const wf_script *src)
{
	wf_script_init(dst, src->role);
	for (int i = 0; i < src->nsteps; i++) {
		if (wf_script_add(dst, &src->steps[i]) < 0) {
			wf_script_free(dst);
			return -1;
		}
	}
	memcpy(dst->klass, src->klass, sizeof(dst->klass));
	memcpy(dst->mutation, src->mutation, sizeof(dst->mutation));
	memcpy(dst->signature, src->signature, sizeof(dst->signature));
	memcpy(dst->origin, src->origin, sizeof(dst->origin));
	memcpy(dst->case_id, src->case_id, sizeof(dst->case_id));
	memcpy(dst->spec, src->spec, sizeof(dst->spec));
	memcpy(dst->expect, src->expect, sizeof(dst->expect));
	memcpy(dst->fail_kind, src->fail_kind, sizeof(dst->fail_kind));
	dst->should = src->should;
	dst->mutated_step = src->mutated_step;
	return 0;
}

int wf_step_splice(wf_step *st, size_t off, size_t oldlen, const uint8_t *with, size_t n)
{
	if (off > st->len || oldlen > st->len - off)
		return -1;
	size_t nlen = st->len - oldlen + n;
	uint8_t *nb = malloc(nlen ? nlen : 1);
	if (!nb)
		return -1;
	memcpy(nb, st->body, off);
	if (n)
		memcpy(nb + off, with, n);
	memcpy(nb + off + n, st->body + off + oldlen, st->len - off - oldlen);
	free(st->body);
	st->body = nb;
	st->len = nlen;
	/* marks: inside the replaced span (or overlapping it) become concrete */
	int k = 0;
	for (int i = 0; i < st->nmarks; i++) {
		wf_mark m = st->marks[i];
		size_t mend = (size_t)m.off + m.len;
		if (mend <= off && !(oldlen == 0 && mend == off && m.len == 0)) {
			st->marks[k++] = m;            /* before: unchanged */
		} else if (m.off >= off + oldlen) {
			m.off = (uint32_t)(m.off - oldlen + n); /* after: shifted */
			st->marks[k++] = m;
		}
	}
	st->nmarks = k;
	free(st->fields);
	st->fields = NULL;
	st->nfields = 0;
	return 0;
}

/* ---- writing ---------------------------------------------------------------------- */

static void write_hex(FILE *f, const wf_step *st)
{
	int col = 0;
	for (size_t i = 0; i <= st->len;) {
		/* tokens at this offset: a built one stands for its representative
		 * bytes (skipped), a parsed one has none */
		size_t skip = 0;
		for (int k = 0; k < st->nmarks; k++) {
			if (st->marks[k].off != i)
				continue;
			fprintf(f, " %s", token_names[st->marks[k].token]);
			col += 2;
			if (st->marks[k].len > skip)
				skip = st->marks[k].len;
		}
		if (skip) {
			i += skip;
			continue;
		}
		if (i == st->len)
			break;
		if (col >= 32) {
			fprintf(f, " \\\n   ");
			col = 0;
		}
		fprintf(f, " %02x", st->body[i++]);
		col++;
	}
}

int wf_script_write(const wf_script *s, FILE *f)
{
	fprintf(f, "tensorwire-wirefuzz 1\n");
	fprintf(f, "role %s\n", s->role == WF_SERVER ? "server" : "client");
	if (s->klass[0])
		fprintf(f, "class %s\n", s->klass);
	if (s->mutation[0])
		fprintf(f, "mutation %s\n", s->mutation);
	if (s->signature[0])
		fprintf(f, "signature %s\n", s->signature);
	if (s->origin[0])
		fprintf(f, "origin %s\n", s->origin);
	if (s->case_id[0])
		fprintf(f, "case %s\n", s->case_id);
	if (s->spec[0])
		fprintf(f, "spec %s\n", s->spec);
	if (s->expect[0])
		fprintf(f, "expect %s\n", s->expect);
	if (s->fail_kind[0])
		fprintf(f, "kind %s\n", s->fail_kind);
	if (s->should)
		fprintf(f, "level should\n");
	for (int i = 0; i < s->nsteps; i++) {
		const wf_step *st = &s->steps[i];
		switch (st->op) {
		case WF_SEND:
			fprintf(f, "send %d %s", st->conn, st->what[0] ? st->what : "frame");
			if (st->hdr == WF_HDR_DELTA)
				fprintf(f, " len=%+" PRId64, st->hdr_delta);
			else if (st->hdr == WF_HDR_FIXED)
				fprintf(f, " len=%" PRIu64, st->hdr_value);
			if (st->cut >= 0)
				fprintf(f, " cut=%ld", st->cut);
			fprintf(f, " :");
			write_hex(f, st);
			fprintf(f, "\n");
			break;
		case WF_ACCEPT_REQUESTED:
		case WF_WAIT:
			fprintf(f, "%s %d\n", wf_op_name(st->op), st->arg);
			break;
		default:
			fprintf(f, "%s %d\n", wf_op_name(st->op), st->conn);
		}
	}
	/* the script is whole: a file cut short has no end line */
	fprintf(f, "end\n");
	return ferror(f) ? -1 : 0;
}

int wf_script_save(const wf_script *s, const char *path, const char *header_comment)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	int rc = wf_script_write(s, f);
	if (header_comment && header_comment[0]) {
		/* comments go at the end, one '#' per line */
		const char *p = header_comment;
		while (*p) {
			size_t n = strcspn(p, "\n");
			fprintf(f, "# %.*s\n", (int)n, p);
			p += n + (p[n] == '\n');
		}
	}
	if (fclose(f) != 0 || rc != 0 || rename(tmp, path) != 0) {
		remove(tmp);
		return -1;
	}
	return 0;
}

/* ---- parsing ---------------------------------------------------------------------- */

static int perr(char *err, size_t errlen, int line, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int perr(char *err, size_t errlen, int line, const char *fmt, ...)
{
	int k = snprintf(err, errlen, "line %d: ", line);
	va_list ap;
	va_start(ap, fmt);
	if (k >= 0 && (size_t)k < errlen)
		vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
	va_end(ap);
	return -1;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Parses the hex/tokens after ':' into st. */
static int parse_body(char *p, wf_step *st, int line, char *err, size_t errlen)
{
	size_t cap = strlen(p) / 2 + 16;
	st->body = malloc(cap);
	if (!st->body)
		return perr(err, errlen, line, "out of memory");
	st->len = 0;
	char *save = NULL;
	for (char *t = strtok_r(p, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		if (t[0] == '$') {
			wf_token tok = WF_TOK_NONE;
			for (int k = 1; k < (int)(sizeof(token_names) / sizeof(token_names[0])); k++)
				if (!strcmp(t, token_names[k]))
					tok = (wf_token)k;
			if (tok == WF_TOK_NONE)
				return perr(err, errlen, line, "unknown token '%s'", t);
			if (st->nmarks == WF_MAX_MARKS)
				return perr(err, errlen, line, "more than %d tokens in one frame",
				            WF_MAX_MARKS);
			st->marks[st->nmarks++] = (wf_mark){.off = (uint32_t)st->len, .len = 0, .token = tok};
			continue;
		}
		if (strlen(t) != 2 || hexval(t[0]) < 0 || hexval(t[1]) < 0)
			return perr(err, errlen, line, "'%s' is neither a hex byte nor a $token", t);
		st->body[st->len++] = (uint8_t)(hexval(t[0]) * 16 + hexval(t[1]));
	}
	return 0;
}

static int parse_int(const char *t, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(t, &end, 10);
	if (errno || end == t || *end)
		return -1;
	*out = v;
	return 0;
}

static int parse_line(char *l, wf_script *s, int line, char *err, size_t errlen)
{
	char *colon = NULL;
	if (!strncmp(l, "send ", 5)) {
		colon = strchr(l, ':');
		if (!colon)
			return perr(err, errlen, line, "send without ':' before its bytes");
		*colon = '\0';
	}
	char *save = NULL;
	char *verb = strtok_r(l, " \t", &save);
	if (!verb)
		return 0;
	if (!strcmp(verb, "tensorwire-wirefuzz")) {
		char *v = strtok_r(NULL, " \t", &save);
		if (!v || strcmp(v, "1") != 0)
			return perr(err, errlen, line, "unsupported format version '%s'", v ? v : "");
		return 0;
	}
	char *rest = save ? save + strspn(save, " \t") : NULL;
	if (!strcmp(verb, "level")) {
		if (rest && !strncmp(rest, "should", 6))
			s->should = true;
		else if (rest && !strncmp(rest, "must", 4))
			s->should = false;
		else
			return perr(err, errlen, line, "level must be must or should");
		return 0;
	}
	if (!strcmp(verb, "role")) {
		if (rest && !strncmp(rest, "server", 6))
			s->role = WF_SERVER;
		else if (rest && !strncmp(rest, "client", 6))
			s->role = WF_CLIENT;
		else
			return perr(err, errlen, line, "role must be server or client");
		return 0;
	}
	struct {
		const char *key;
		char *dst;
		size_t n;
	} meta[] = {{"class", s->klass, sizeof(s->klass)},
	            {"mutation", s->mutation, sizeof(s->mutation)},
	            {"signature", s->signature, sizeof(s->signature)},
	            {"origin", s->origin, sizeof(s->origin)},
	            {"case", s->case_id, sizeof(s->case_id)},
	            {"spec", s->spec, sizeof(s->spec)},
	            {"expect", s->expect, sizeof(s->expect)},
	            {"kind", s->fail_kind, sizeof(s->fail_kind)}};
	for (size_t i = 0; i < sizeof(meta) / sizeof(meta[0]); i++) {
		if (!strcmp(verb, meta[i].key)) {
			snprintf(meta[i].dst, meta[i].n, "%s", rest ? rest : "");
			return 0;
		}
	}
	wf_step st;
	memset(&st, 0, sizeof(st));
	st.cut = -1;
	int op = -1;
	for (int k = 0; k < (int)(sizeof(op_names) / sizeof(op_names[0])); k++)
		if (!strcmp(verb, op_names[k]))
			op = k;
	if (op < 0)
		return perr(err, errlen, line, "unknown step '%s'", verb);
	st.op = (wf_op)op;
	char *a = strtok_r(NULL, " \t", &save);
	long v;
	if (!a || parse_int(a, &v) || v < 0 ||
	    (st.op != WF_WAIT && st.op != WF_ACCEPT_REQUESTED && v >= WF_MAX_CONNS))
		return perr(err, errlen, line, "%s needs a %s", verb,
		            st.op == WF_WAIT ? "duration in ms" : "connection number 0-7");
	if (st.op == WF_WAIT || st.op == WF_ACCEPT_REQUESTED)
		st.arg = (int)v;
	else
		st.conn = (int)v;
	if (st.op == WF_SEND) {
		char *what = strtok_r(NULL, " \t", &save);
		snprintf(st.what, sizeof(st.what), "%s", what ? what : "frame");
		for (char *t = strtok_r(NULL, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
			if (!strncmp(t, "len=", 4)) {
				const char *n = t + 4;
				char *end;
				errno = 0;
				if (n[0] == '+' || n[0] == '-') {
					st.hdr = WF_HDR_DELTA;
					st.hdr_delta = strtoll(n, &end, 10);
				} else {
					st.hdr = WF_HDR_FIXED;
					st.hdr_value = strtoull(n, &end, 10);
				}
				if (errno || *end)
					return perr(err, errlen, line, "bad %s", t);
			} else if (!strncmp(t, "cut=", 4)) {
				if (parse_int(t + 4, &v) || v < 0)
					return perr(err, errlen, line, "bad %s", t);
				st.cut = v;
			} else {
				return perr(err, errlen, line, "unknown send option '%s'", t);
			}
		}
		if (parse_body(colon + 1, &st, line, err, errlen)) {
			wf_step_free(&st);
			return -1;
		}
	}
	int rc = wf_script_add(s, &st);
	wf_step_free(&st);
	return rc < 0 ? perr(err, errlen, line, "out of memory") : 0;
}

int wf_script_parse(const char *text, wf_script *s, char *err, size_t errlen)
{
	wf_script_init(s, WF_SERVER);
	char *copy = strdup(text);
	if (!copy) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	/* join continuation lines (a trailing backslash) */
	for (char *p = copy; (p = strstr(p, "\\\n"));) {
		p[0] = ' ';
		p[1] = ' ';
	}
	int line = 0, rc = 0;
	bool have_magic = false, ended = false;
	char *save = NULL;
	for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		line++;
		while (isspace((unsigned char)*l))
			l++;
		if (!*l || *l == '#')
			continue;
		if (!have_magic) {
			if (strncmp(l, "tensorwire-wirefuzz ", 20) != 0) {
				rc = perr(err, errlen, line, "not a reproducer (the first line must be "
				          "'tensorwire-wirefuzz 1')");
				break;
			}
			have_magic = true;
		}
		size_t n = strlen(l);
		while (n > 0 && isspace((unsigned char)l[n - 1]))
			l[--n] = '\0';
		if (ended) {
			rc = perr(err, errlen, line, "a line after 'end'");
			break;
		}
		if (!strcmp(l, "end")) {
			ended = true;
			continue;
		}
		if ((rc = parse_line(l, s, line, err, errlen)))
			break;
	}
	free(copy);
	if (!rc && !have_magic)
		rc = perr(err, errlen, line, "empty reproducer");
	else if (!rc && !ended)
		rc = perr(err, errlen, line, "no 'end' line: the reproducer is cut short (a "
		          "reproducer ends with a line 'end' after its last step)");
	if (rc)
		wf_script_free(s);
	return rc;
}

int wf_script_load(const char *path, wf_script *s, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	char *text = NULL;
	size_t cap = 0, len = 0;
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 8192;
			char *n = realloc(text, cap);
			if (!n) {
				free(text);
				fclose(f);
				snprintf(err, errlen, "%s: out of memory", path);
				return -1;
			}
			text = n;
		}
		size_t r = fread(text + len, 1, cap - len - 1, f);
		len += r;
		if (r == 0)
			break;
	}
	fclose(f);
	text[len] = '\0';
	char perr_buf[512];
	int rc = wf_script_parse(text, s, perr_buf, sizeof(perr_buf));
	free(text);
	if (rc)
		snprintf(err, errlen, "%s: %s", path, perr_buf);
	return rc;
}
