/*
 * fuzz_findings.c - the wire suite's cases from the black-box fuzzer's
 * catalogue (docs/stock-tensorpipe-findings.md): one case per reproducer
 * file in conformance/wirefuzz/findings/, each a distinct failure the fuzzer
 * found in stock TensorPipe. A case replays its file against a fresh IUT
 * (conformance/wirefuzz/exec.c, wf_replay) and passes when the IUT survives,
 * fails only the pipe the input belongs to, fires every callback once, still
 * serves a fresh well-formed peer, and leaks nothing. Stock's known failures
 * are XFAILs of profiles/tensorpipe.profile; ours must pass every one.
 *
 * The cases are read from the files when the runner starts: a file's `case`
 * line is the case id, its `spec` line the requirements it checks (quoted
 * below), its `class` and `expect` lines the description. Adding a reproducer
 * adds a case; `level should` makes it a SHOULD case, which an operation still
 * pending after every connection closed fails (spec/wire.md 5.6.b). It must
 * not judge anything beyond what wf_replay reports.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "suites.h"
#include "wf.h"

#ifndef TW_WIREFUZZ_FINDINGS_DIR
#define TW_WIREFUZZ_FINDINGS_DIR "conformance/wirefuzz/findings"
#endif

/* The requirements a catalogued failure breaks, quoted from spec/wire.md. */
static const struct {
	const char *id;
	const char *text;
} quotes[] = {
	{"1.12.b", "(1.12.b) A decoder MUST NOT read beyond the end of the frame, whatever the "
	           "counts and lengths inside the value claim."},
	{"2.2.b", "(2.2.b) A receiver MUST NOT allocate memory for a frame on the strength of its "
	          "length prefix alone when that length exceeds its configured limit for the kind of "
	          "frame it expects."},
	{"3.3.f", "(3.3.f) A listener MUST keep accepting after any of these, and after any error "
	          "on one accepted connection (5.4)."},
	{"3.5.b", "(3.5.b) If no transport qualifies, a server MUST fail only that pipe (closing the "
	          "bootstrap connection) with a protocol error, and keep its listener accepting."},
	{"3.7.a", "(3.7.a) A client MUST fail the pipe with a protocol error if transport names a "
	          "transport it did not offer, or if it does not accept transportDomainDescriptor."},
	{"3.7.d", "(3.7.d) A client MUST recompute the channel selection [...] and fail the pipe "
	          "with a protocol error unless [...] the answer holds [...] the same channel, and "
	          "both maps have the same number of entries."},
	{"3.8.b", "(3.8.b) A listener MUST close a connection whose RequestedConnection names an id "
	          "that is not registered."},
	{"3.11.c", "(3.11.c) A sender MUST fail the pipe with a protocol error if a "
	           "DescriptorReply's device count differs from the number of tensors that lacked a "
	           "target device."},
	{"4.2.a", "(4.2.a) A receiver MUST fail the channel (and pipe) with a protocol error if the "
	          "frame's length differs from the tensor's length."},
	{"5.2.a", "(5.2.a) An implementation that receives a malformed packet MUST fail only the "
	          "connection, or the pipe the connection belongs to, with a protocol error."},
	{"5.2.b", "(5.2.b) It MUST NOT terminate the process, and MUST NOT disturb other pipes of "
	          "the same context."},
	{"5.2.c", "(5.2.c) A listener that receives a malformed hello MUST close that connection and "
	          "keep accepting."},
	{"5.2.e", "(5.2.e) A decoder MUST NOT read outside the frame or allocate beyond the bound of "
	          "1.13 while finding out that a packet is malformed."},
	{"5.3.a", "(5.3.a) A frame length above the receiver's limit for what it expects MUST fail "
	          "that connection or pipe with a protocol error, before any allocation of that "
	          "size."},
	{"5.4.a", "(5.4.a) A connection that closes, or sends a malformed hello, before its hello is "
	          "complete MUST be dropped without affecting the listener."},
	{"5.4.d", "(5.4.d) No viable transport, an unknown transport in the answer, or an "
	          "inconsistent channel selection MUST fail that pipe with a protocol error."},
	{"5.5.a", "(5.5.a) A payload or basic-channel frame whose length differs from the Descriptor "
	          "MUST fail the pipe with a protocol error."},
	{"5.5.b", "(5.5.b) A DescriptorReply that does not match the message (3.11.c) MUST fail the "
	          "pipe with a protocol error."},
	{"5.6.a", "(5.6.a) An implementation MUST treat the end of any connection of a pipe as the "
	          "end of the pipe and fail its pending operations with an end-of-file or "
	          "connection-reset error."},
};

typedef struct finding {
	char path[1024];
	wf_script s;
	char section[200], desc[800], req[2048]; /* its case's */
} finding;

static void add_quotes(const char *spec, char *out, size_t len)
{
	out[0] = '\0';
	for (size_t i = 0; i < sizeof(quotes) / sizeof(quotes[0]); i++) {
		/* "(5.2.b, 5.2.c)": match the numbered id as a whole word */
		const char *p = strstr(spec, quotes[i].id);
		size_t n = strlen(quotes[i].id);
		while (p && ((p > spec && (p[-1] == '.' || (p[-1] >= '0' && p[-1] <= '9'))) ||
		             (p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'z')))
			p = strstr(p + 1, quotes[i].id);
		if (!p)
			continue;
		size_t l = strlen(out);
		snprintf(out + l, len - l, "%s%s", l ? " " : "", quotes[i].text);
	}
	for (size_t i = 0; !out[0] && i < sizeof(quotes) / sizeof(quotes[0]); i++)
		if (!strcmp(quotes[i].id, "5.2.b"))
			snprintf(out, len, "%s", quotes[i].text);
}

/* Is `word` one of the comma-separated words of `list`? */
static bool in_list(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; *p;) {
		size_t k = strcspn(p, ",");
		if (k == n && !strncmp(p, word, n))
			return true;
		p += k + (p[k] ? 1 : 0);
	}
	return false;
}

static twc_outcome_t run_finding(const twc_case *c, twc_case_env *env)
{
	const finding *f = c->arg;
	printf("# reproducer: %s\n# saved for (stock): %s\n# class: %s\n", f->path, f->s.signature,
	       f->s.klass);
	wf_opts o;
	wf_opts_default(&o);
	/* the runner gives each wait half the case's time; the good check needs less */
	if (env->wait_ms > 0 && env->wait_ms / 4 < o.check_ms)
		o.check_ms = env->wait_ms / 4;
	/* the kind is checked below: let the IUT report before the end */
	if (f->s.fail_kind[0])
		o.fail_wait_ms = 3000;
	wf_result r;
	char err[2048];
	snprintf(env->transport, sizeof(env->transport), "uv");
	snprintf(env->channel, sizeof(env->channel), "basic");
	if (wf_replay(env->iut_cmd, &f->s, &o, &r, err, sizeof(err)))
		return twc_case_result(env, TWC_ERROR, "%s", err);
	printf("# script: %s\n", r.stopped);
	if (r.pending[0])
		printf("# SHOULD not met: %s\n", r.pending);
	if (f->s.should && r.pending[0] && !wf_result_failed(&r))
		return twc_case_result(env, TWC_FAIL, "%s", r.pending);
	if (wf_result_failed(&r)) {
		printf("# observed: %s\n", r.detail);
		return twc_case_result(env, TWC_FAIL, "%s", r.signature);
	}
	/* The file's `kind` line ("proto" where the spec says "fails with a
	 * protocol error"): the kind, not only survival. A pipe of this input
	 * that failed must have failed with that kind (an input refused before
	 * any pipe existed has no kind to check). */
	printf("# pipe error kinds: %s\n", r.kinds[0] ? r.kinds : "-");
	if (f->s.fail_kind[0] && r.kinds[0] && !in_list(r.kinds, f->s.fail_kind))
		return twc_case_result(env, TWC_FAIL, "the input's pipe failed with kind '%s'; the spec "
		                                    "asks for '%s'", r.kinds, f->s.fail_kind);
	return twc_case_result(env, TWC_PASS, "survived; only that pipe failed; a well-formed peer "
	                      "is still served");
}

static int by_path(const void *a, const void *b)
{
	const finding *x = *(finding *const *)a, *y = *(finding *const *)b;
	return strcmp(x->path, y->path);
}

const twc_case *twc_suite_wire_fuzz(int *count_out)
{
	static twc_case *cases;
	static int n = -1;
	if (n >= 0) {
		*count_out = n;
		return cases;
	}
	n = 0;
	const char *dir = getenv("TW_WIREFUZZ_FINDINGS");
	if (!dir)
		dir = TW_WIREFUZZ_FINDINGS_DIR;
	DIR *d = opendir(dir);
	struct dirent *de;
	finding **findings = NULL;
	int nf = 0, cap = 0;
	while (d && (de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l < 5 || strcmp(de->d_name + l - 4, ".twr") != 0)
			continue;
		finding *f = calloc(1, sizeof(*f));
		if (!f)
			break;
		snprintf(f->path, sizeof(f->path), "%s/%s", dir, de->d_name);
		char err[512];
		if (wf_script_load(f->path, &f->s, err, sizeof(err)) || !f->s.case_id[0]) {
			fprintf(stderr, "tensorwire-conform: %s: %s\n", f->path,
			        f->s.case_id[0] ? err : "no 'case' line; not a catalogued reproducer");
			free(f);
			continue;
		}
		if (nf == cap) {
			cap = cap ? 2 * cap : 64;
			finding **grown = realloc(findings, (size_t)cap * sizeof(*grown));
			if (!grown) {
				fprintf(stderr, "tensorwire-conform: out of memory loading %s\n", dir);
				exit(2);
			}
			findings = grown;
		}
		findings[nf++] = f;
	}
	if (d)
		closedir(d);
	if (nf > 0)
		qsort(findings, (size_t)nf, sizeof(findings[0]), by_path);
	cases = calloc((size_t)nf + 1, sizeof(*cases));
	if (!cases) {
		fprintf(stderr, "tensorwire-conform: out of memory loading %s\n", dir);
		exit(2);
	}
	for (int i = 0; i < nf; i++) {
		finding *f = findings[i];
		snprintf(f->section, sizeof(f->section), "%s", f->s.spec[0] ? f->s.spec
		                                                          : "wire.md 5.2 (5.2.b)");
		snprintf(f->desc, sizeof(f->desc), "fuzzer reproducer (IUT as %s), %s: %s",
		         f->s.role == WF_SERVER ? "server" : "client", f->s.klass,
		         f->s.expect[0] ? f->s.expect : "the IUT survives and keeps serving");
		add_quotes(f->section, f->req, sizeof(f->req));
		cases[n] = (twc_case){
			.id = f->s.case_id,
			.suite = "wire",
			.section = f->section,
			.level = f->s.should ? TWC_SHOULD : TWC_MUST,
			.needs = "",
			.description = f->desc,
			.requirement = f->req,
			.accepts = 0,
			.timeout_s = 60,
			.run = run_finding,
			.arg = f,
		};
		n++;
	}
	free(findings);
	*count_out = n;
	return cases;
}
