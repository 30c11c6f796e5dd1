/*
 * signature.c - what a failure of an implementation under test looks like,
 * reduced to a line that is the same every time the same bug fires and
 * differs between bugs (README.md, "Signatures").
 *
 * Sources, in order of precedence: an AddressSanitizer report (its bug type
 * and the top frames of its stack, past the allocator and the C++ runtime),
 * an UndefinedBehaviorSanitizer report (file:line and message), a C++
 * exception that reached std::terminate (its type and what(), as stock
 * TensorPipe prints it), a LeakSanitizer report (per leak: the top frames of
 * the allocation), and finally the plain signal or exit status. Addresses,
 * pids, thread ids, timestamps, sizes and other numbers inside messages
 * become N. It must not look at anything but the text it is given.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "wf.h"

void wf_sig_normalise(const char *in, char *out, size_t outlen)
{
	size_t k = 0;
	bool space = false;
	for (const char *p = in; *p && k + 2 < outlen; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '0' && (p[1] == 'x' || p[1] == 'X') && isxdigit((unsigned char)p[2])) {
			p += 2;
			while (isxdigit((unsigned char)p[1]))
				p++;
			out[k++] = 'N';
			space = false;
			continue;
		}
		if (isdigit(c)) {
			while (isdigit((unsigned char)p[1]))
				p++;
			out[k++] = 'N';
			space = false;
			continue;
		}
		if (isspace(c)) {
			if (!space && k > 0)
				out[k++] = ' ';
			space = true;
			continue;
		}
		out[k++] = (char)c;
		space = false;
	}
	while (k > 0 && out[k - 1] == ' ')
		k--;
	out[k] = '\0';
}

/* The line of `text` that contains `needle` (first occurrence from `from`). */
static const char *line_with(const char *text, const char *needle, char *out, size_t outlen)
{
	const char *p = strstr(text, needle);
	if (!p)
		return NULL;
	const char *b = p;
	while (b > text && b[-1] != '\n')
		b--;
	size_t n = strcspn(b, "\n");
	snprintf(out, outlen, "%.*s", (int)n, b);
	return p;
}

/* Frames of the runtime (allocator, sanitizer, C and C++ libraries), not of
 * the program: matched on the frame's name. */
static bool runtime_frame(const char *name)
{
	static const char *const prefix[] = {
		"__interceptor_", "__asan", "__sanitizer", "__lsan", "__ubsan", "__GI_", "__cxa_",
		"__gnu_cxx::__verbose_terminate", "std::terminate", "__libc_", "_Unwind", "std::__throw",
		"__internal_", "__wrap_", "__pthread", "libasan.so", "libubsan.so", "libc.so",
		"libstdc++.so", "libgcc_s.so",
	};
	static const char *const exact[] = {
		"malloc", "calloc", "realloc", "free", "strdup", "strndup", "abort", "raise", "gsignal",
		"pthread_kill", "posix_memalign", "aligned_alloc", "memalign", "memcpy", "memmove",
		"memset", "operator", "start_thread", "clone", "clone3",
	};
	for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++)
		if (!strncmp(name, prefix[i], strlen(prefix[i])))
			return true;
	for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
		if (!strcmp(name, exact[i]))
			return true;
	return false;
}

/* The name of a stack frame line ("    #3 0x55d0 in foo(int) /src/x.c:12" ->
 * "foo"; "#3 0x7f (/usr/lib/libtensorpipe.so.0+0x1a2e8e)" ->
 * "libtensorpipe.so.0+0x1a2e8e"). */
static bool frame_name(const char *line, char *out, size_t outlen)
{
	const char *p = line;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p != '#' || !isdigit((unsigned char)p[1]))
		return false;
	const char *in = strstr(p, " in ");
	size_t n;
	if (in) {
		in += 4;
		if (!strncmp(in, "decltype(auto) ", 15))
			in += 15;
		/* template arguments collapse to <>; the name ends at the argument list
		 * of the outermost function (or at the file) */
		int depth = 0;
		size_t k = 0;
		for (n = 0; in[n] && in[n] != '\n' && k + 3 < outlen && k < 100; n++) {
			char c = in[n];
			if (c == '<') {
				if (depth++ == 0)
					out[k++] = '<';
				continue;
			}
			if (c == '>' && depth > 0) {
				if (--depth == 0)
					out[k++] = '>';
				continue;
			}
			if (depth > 0)
				continue;
			if (c == '(' || c == ' ') {
				/* "operator()" keeps its parentheses */
				if (c == '(' && in[n + 1] == ')' && k >= 8 && !strncmp(out + k - 8, "operator", 8)) {
					out[k++] = '(';
					out[k++] = ')';
					n++;
					continue;
				}
				break;
			}
			out[k++] = c;
		}
		out[k] = '\0';
	} else {
		const char *m = strchr(p, '(');
		if (!m)
			return false;
		m++;
		n = strcspn(m, ")\n");
		const char *slash = memrchr(m, '/', n);
		if (slash) {
			n -= (size_t)(slash + 1 - m);
			m = slash + 1;
		}
		snprintf(out, outlen, "%.*s", (int)(n > 80 ? 80 : n), m);
	}
	return out[0] != '\0';
}

/* The top `want` program frames of the stack that starts after `from`. */
static void top_frames(const char *from, int want, char *out, size_t outlen)
{
	out[0] = '\0';
	int got = 0;
	bool started = false;
	for (const char *l = strchr(from, '\n'); l && got < want; l = strchr(l + 1, '\n')) {
		const char *s = l + 1;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s != '#') {
			if (started)
				break; /* the stack ended */
			if (*s == '\0')
				break;
			continue;
		}
		started = true;
		char name[96];
		size_t len = strcspn(s, "\n");
		char line[512];
		snprintf(line, sizeof(line), "%.*s", (int)len, s);
		if (!frame_name(line, name, sizeof(name)) || runtime_frame(name))
			continue;
		size_t k = strlen(out);
		snprintf(out + k, outlen - k, "%s%s", got ? " < " : "", name);
		got++;
	}
}

void wf_sig_crash(int wstatus, const char *tail, char *sig, size_t siglen, char *line,
                  size_t linelen)
{
	char buf[512], norm[512], frames[400];
	line[0] = '\0';
	const char *p;
	/* AddressSanitizer (also its allocator's fatal reports) */
	if ((p = line_with(tail, "ERROR: AddressSanitizer: ", buf, sizeof(buf)))) {
		snprintf(line, linelen, "%s", buf);
		const char *t = strstr(buf, "AddressSanitizer: ") + 18;
		char type[160];
		size_t n = strcspn(t, "(");
		const char *on = strstr(t, " on ");
		if (on && (size_t)(on - t) < n)
			n = (size_t)(on - t);
		snprintf(type, sizeof(type), "%.*s", (int)n, t);
		wf_sig_normalise(type, norm, sizeof(norm));
		top_frames(p, 3, frames, sizeof(frames));
		snprintf(sig, siglen, "crash: AddressSanitizer %s in %s", norm,
		         frames[0] ? frames : "?");
		return;
	}
	if ((p = line_with(tail, "runtime error: ", buf, sizeof(buf)))) {
		snprintf(line, linelen, "%s", buf);
		/* "/path/file.c:12:5: runtime error: ..." -> "file.c:12: ..." */
		const char *file = buf;
		const char *colon = strstr(buf, ": runtime error: ");
		const char *slash = colon ? memrchr(buf, '/', (size_t)(colon - buf)) : NULL;
		if (slash)
			file = slash + 1;
		char where[128] = "";
		if (colon) {
			snprintf(where, sizeof(where), "%.*s", (int)(colon - file), file);
			char *c2 = strrchr(where, ':'); /* drop the column */
			if (c2 && strchr(where, ':') != c2)
				*c2 = '\0';
		}
		wf_sig_normalise(colon ? colon + 17 : buf, norm, sizeof(norm));
		snprintf(sig, siglen, "crash: UBSan %s: %s", where, norm);
		return;
	}
	/* a C++ exception nothing caught (stock prints type and what()) */
	char type[128] = "";
	if (line_with(tail, "terminate called after throwing an instance of '", buf, sizeof(buf))) {
		const char *q = strstr(buf, "instance of '") + 13;
		snprintf(type, sizeof(type), "%.*s", (int)strcspn(q, "'"), q);
	}
	if (line_with(tail, "what():", buf, sizeof(buf))) {
		snprintf(line, linelen, "%s", buf);
		const char *w = strstr(buf, "what():") + 7;
		while (*w == ' ')
			w++;
		/* keep "In f at file:line" as is (a throw site), normalise the message */
		char site[200] = "";
		const char *q = strchr(w, '"');
		if (!strncmp(w, "In ", 3) && q) {
			snprintf(site, sizeof(site), "%.*s", (int)(q - w), w);
			w = q;
		}
		/* A throw site (function, file:line) names the bug; its message often
		 * quotes the input ("unsupported transport zz"), so it is left out,
		 * except for the one site that reports every nop decoding error,
		 * where the reason is a fixed text ("Read Limit Reached"). */
		if (site[0] && !strstr(w, "Error reading nop object")) {
			size_t sl = strlen(site);
			while (sl > 0 && site[sl - 1] == ' ')
				site[--sl] = '\0';
			snprintf(sig, siglen, "abort: uncaught %s: %s", type[0] ? type : "exception", site);
			return;
		}
		wf_sig_normalise(w, norm, sizeof(norm));
		snprintf(sig, siglen, "abort: uncaught %s: %s%s", type[0] ? type : "exception", site,
		         norm);
		return;
	}
	if (type[0]) {
		snprintf(line, linelen, "terminate called after throwing an instance of '%s'", type);
		snprintf(sig, siglen, "abort: uncaught %s", type);
		return;
	}
	/* an assertion of the C library, or of the IUT's own */
	if (line_with(tail, "Assertion", buf, sizeof(buf)) ||
	    line_with(tail, "Check failed", buf, sizeof(buf))) {
		snprintf(line, linelen, "%s", buf);
		const char *slash = strrchr(buf, '/');
		wf_sig_normalise(slash ? slash + 1 : buf, norm, sizeof(norm));
		snprintf(sig, siglen, "abort: %s", norm);
		return;
	}
	/* nothing telling: the status and the last line */
	const char *last = NULL;
	for (const char *l = tail; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] ? 1 : 0))
		if (l[0] != '\n' && strcspn(l, "\n") > 0)
			last = l;
	if (last)
		snprintf(line, linelen, "%.*s", (int)strcspn(last, "\n"), last);
	if (WIFSIGNALED(wstatus))
		snprintf(sig, siglen, "crash: signal %s", sigabbrev_np(WTERMSIG(wstatus)) ?: "?");
	else if (WIFEXITED(wstatus))
		snprintf(sig, siglen, "crash: exit %d", WEXITSTATUS(wstatus));
	else
		snprintf(sig, siglen, "crash: status 0x%x", wstatus);
}

int wf_sig_leaks(const char *tail, char *sigs, size_t siglen)
{
	sigs[0] = '\0';
	if (!strstr(tail, "ERROR: LeakSanitizer"))
		return 0;
	int n = 0;
	const char *kinds[] = {"Direct leak of ", "Indirect leak of "};
	for (int kind = 0; kind < 2 && n == 0; kind++) {
		for (const char *p = strstr(tail, kinds[kind]); p; p = strstr(p + 1, kinds[kind])) {
			char frames[400], one[480];
			top_frames(p, 3, frames, sizeof(frames));
			snprintf(one, sizeof(one), "leak: %s in %s", kind ? "indirect" : "direct",
			         frames[0] ? frames : "?");
			if (strstr(sigs, one))
				continue;
			size_t k = strlen(sigs);
			snprintf(sigs + k, siglen - k, "%s%s", k ? "\n" : "", one);
			n++;
		}
	}
	if (n == 0) {
		snprintf(sigs, siglen, "leak: LeakSanitizer reported without a stack");
		n = 1;
	}
	return n;
}
