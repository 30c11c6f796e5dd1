/*
 * wirefuzz_test.c - unit tests of the wire fuzzer's pieces that need no IUT:
 * the reproducer format round-trips every base scenario and every
 * systematic mutation byte for byte; every committed reproducer under the
 * directory given as argv[1] parses; tokens resolve to the same place after
 * a splice; signatures are stable for the stderr shapes we meet (a C++
 * exception that reached std::terminate, an AddressSanitizer report, a
 * LeakSanitizer report) and differ between different bugs.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "wf.h"

static int failures;

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		if (!(cond)) {                                                            \
			failures++;                                                       \
			printf("not ok: %s:%d: ", __FILE__, __LINE__);                    \
			printf(__VA_ARGS__);                                              \
			printf("\n");                                                     \
		}                                                                         \
	} while (0)

static bool same_steps(const wf_script *a, const wf_script *b, char *why, size_t len)
{
	if (a->nsteps != b->nsteps || a->role != b->role) {
		snprintf(why, len, "%d steps (role %d) vs %d (role %d)", a->nsteps, a->role, b->nsteps,
		         b->role);
		return false;
	}
	for (int i = 0; i < a->nsteps; i++) {
		const wf_step *x = &a->steps[i], *y = &b->steps[i];
		if (x->op != y->op || x->conn != y->conn || x->arg != y->arg || x->hdr != y->hdr ||
		    x->hdr_delta != y->hdr_delta || x->hdr_value != y->hdr_value || x->cut != y->cut ||
		    x->nmarks != y->nmarks) {
			snprintf(why, len, "step %d differs in its op, connection or options", i);
			return false;
		}
		if (x->op != WF_SEND)
			continue;
		/* compare bodies with marked spans removed (a saved token has no bytes) */
		size_t xi = 0, yi = 0;
		for (int m = 0; m <= x->nmarks; m++) {
			size_t xe = m < x->nmarks ? x->marks[m].off : x->len;
			size_t ye = m < y->nmarks ? y->marks[m].off : y->len;
			if (xe - xi != ye - yi || memcmp(x->body + xi, y->body + yi, xe - xi) != 0) {
				snprintf(why, len, "step %d: bytes differ", i);
				return false;
			}
			if (m < x->nmarks) {
				if (x->marks[m].token != y->marks[m].token) {
					snprintf(why, len, "step %d: token %d differs", i, m);
					return false;
				}
				xi = xe + x->marks[m].len;
				yi = ye + y->marks[m].len;
			}
		}
	}
	return true;
}

static void roundtrip(const wf_script *s, const char *what)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	CHECK(f && wf_script_write(s, f) == 0, "%s: write", what);
	if (f)
		fclose(f);
	wf_script back;
	char err[512], why[256];
	if (wf_script_parse(text ? text : "", &back, err, sizeof(err))) {
		CHECK(false, "%s: the saved text does not parse: %s", what, err);
	} else {
		CHECK(same_steps(s, &back, why, sizeof(why)), "%s: round trip: %s", what, why);
		CHECK(!strcmp(s->klass, back.klass), "%s: class '%s' came back as '%s'", what, s->klass,
		      back.klass);
		wf_script_free(&back);
	}
	free(text);
}

static void test_roundtrips(void)
{
	for (int role = 0; role < WF_SC_COUNT; role++) {
		wf_script base;
		CHECK(wf_build_scenario(&base, (wf_scenario)role, "127.0.0.1:5555", false) == 0,
		      "base %d", role);
		roundtrip(&base, role ? "client base" : "server base");
		int n = wf_mutate_count(&base);
		CHECK(n > 1000, "role %d: only %d systematic mutations", role, n);
		int built = 0;
		for (int k = 0; k < n; k++) {
			wf_script m;
			if (wf_mutate_nth(&base, k, &m))
				continue;
			built++;
			char what[200];
			snprintf(what, sizeof(what), "role %d mutation %d (%.128s)", role, k, m.klass);
			CHECK(m.klass[0] && m.mutation[0], "%s: no class or description", what);
			roundtrip(&m, what);
			wf_script_free(&m);
		}
		CHECK(built == n, "role %d: %d of %d mutations could be built", role, built, n);
		/* the random phase is a function of the seed */
		uint64_t r1 = 7, r2 = 7;
		for (int k = 0; k < 50; k++) {
			wf_script a, b;
			int ra = wf_mutate_random(&base, &r1, &a), rb = wf_mutate_random(&base, &r2, &b);
			CHECK(ra == rb, "random %d: one seed, two outcomes", k);
			if (!ra && !rb) {
				char why[256];
				CHECK(same_steps(&a, &b, why, sizeof(why)), "random %d: %s", k, why);
				wf_script_free(&a);
				wf_script_free(&b);
			}
		}
		wf_script_free(&base);
	}
}

static void test_parse_errors(void)
{
	static const char *const bad[] = {
		"role server\nconnect 0\n",                          /* no magic line */
		"tensorwire-wirefuzz 2\nrole server\n",              /* unknown version */
		"tensorwire-wirefuzz 1\nsend 0 hello : zz\n",        /* not hex */
		"tensorwire-wirefuzz 1\nsend 0 hello b8 00\n",       /* no ':' */
		"tensorwire-wirefuzz 1\nsend 9 hello : 00\n",        /* connection out of range */
		"tensorwire-wirefuzz 1\nsend 0 hello : $nope\n",     /* unknown token */
		"tensorwire-wirefuzz 1\nsend 0 hello cut=-1 : 00\n", /* bad cut */
		"tensorwire-wirefuzz 1\nfly 0\n",                    /* unknown step */
		"tensorwire-wirefuzz 1\nrole server\n",             /* no end: cut short */
		"tensorwire-wirefuzz 1\nrole server\nsend 0 hello : b8\n", /* the same */
		"tensorwire-wirefuzz 1\nend\nsend 0 hello : b8\n",  /* a step after the end */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		wf_script s;
		char err[256];
		int rc = wf_script_parse(bad[i], &s, err, sizeof(err));
		CHECK(rc != 0, "bad input %zu was accepted", i);
		if (rc == 0)
			wf_script_free(&s);
	}
	/* tokens and continuation lines */
	wf_script s;
	char err[256];
	int rc = wf_script_parse("tensorwire-wirefuzz 1\nrole server\n"
	                         "send 1 RequestedConnection len=+1 cut=9 : b8 01 \\\n   b9 01 $reply_id\n"
	                         "end\n# a comment after the end\n",
	                         &s, err, sizeof(err));
	CHECK(rc == 0, "a valid reproducer was refused: %s", err);
	if (rc == 0) {
		CHECK(s.nsteps == 1 && s.steps[0].len == 4 && s.steps[0].nmarks == 1 &&
		      s.steps[0].marks[0].off == 4 && s.steps[0].marks[0].token == WF_TOK_REPLY_ID &&
		      s.steps[0].hdr == WF_HDR_DELTA && s.steps[0].hdr_delta == 1 &&
		      s.steps[0].cut == 9,
		      "the reproducer did not parse as written");
		wf_script_free(&s);
	}
}

static void test_splice_marks(void)
{
	wf_step st;
	memset(&st, 0, sizeof(st));
	st.op = WF_SEND;
	uint8_t b[] = {0xb8, 0x01, 0xb9, 0x01, 0x00};
	st.body = malloc(sizeof(b));
	memcpy(st.body, b, sizeof(b));
	st.len = sizeof(b);
	st.marks[0] = (wf_mark){.off = 4, .len = 1, .token = WF_TOK_REPLY_ID};
	st.nmarks = 1;
	/* a wider variant index before the token shifts it */
	uint8_t wide[] = {0xb8, 0x85, 0x01, 0x00};
	CHECK(wf_step_splice(&st, 0, 2, wide, sizeof(wide)) == 0 && st.nmarks == 1 &&
	      st.marks[0].off == 6, "the token did not follow the splice (at %u)", st.marks[0].off);
	/* overwriting the token's span makes it concrete */
	uint8_t id[] = {0x83, 1, 2, 3, 4, 5, 6, 7, 8};
	CHECK(wf_step_splice(&st, 6, 1, id, sizeof(id)) == 0 && st.nmarks == 0,
	      "a token whose bytes were replaced survived");
	wf_step_free(&st);
}

static const char stock_abort[] =
	"E1121 10:00:00.123 1234 tensorpipe/core/listener_impl.cc:333] packet contained unknown content: -1\n"
	"terminate called after throwing an instance of 'std::runtime_error'\n"
	"  what():  In operator() at tensorpipe/transport/connection_impl_boilerplate.h:249 "
	"\"status.has_error()Error reading nop object: Read Limit Reached\"\n";
static const char stock_abort2[] =
	"terminate called after throwing an instance of 'std::runtime_error'\n"
	"  what():  In operator() at tensorpipe/transport/connection_impl_boilerplate.h:249 "
	"\"status.has_error()Error reading nop object: Unexpected Variant Type\"\n";
static const char stock_site[] =
	"terminate called after throwing an instance of 'std::invalid_argument'\n"
	"  what():  In getTransport at tensorpipe/core/context_impl.cc:147 \"unsupported transport zz\"\n";
static const char stock_site2[] =
	"terminate called after throwing an instance of 'std::invalid_argument'\n"
	"  what():  In getTransport at tensorpipe/core/context_impl.cc:147 \"unsupported transport \"\n";
static const char asan_segv[] =
	"==402==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000000 (pc 0x7fcbde4de1eb bp "
	"0x7fcbdbbfb30c sp 0x7fcbdbbfb2b0 T1)\n"
	"==402==The signal is caused by a READ memory access.\n"
	"    #0 0x7fcbde4de1eb in tensorpipe::NopHolder<nop::Variant<tensorpipe::SpontaneousConnection, "
	"tensorpipe::RequestedConnection> >::read(tensorpipe::NopReader&) "
	"(/lib/x86_64-linux-gnu/libtensorpipe.so.0+0xde1eb)\n"
	"    #1 0x7fcbde574fc6 in tensorpipe::transport::ConnectionImplBoilerplate<A, B, C>::readImplFromLoop"
	"(tensorpipe::AbstractNopHolder&)::{lambda(tensorpipe::Error const&)#1}::operator()(tensorpipe::Error "
	"const&) const (/lib/x86_64-linux-gnu/libtensorpipe.so.0+0x174fc6)\n"
	"    #2 0x7fcbdeec03a4  (/lib/x86_64-linux-gnu/libuv.so.1+0x1a3a4)\n"
	"\n";
static const char lsan[] =
	"=================================================================\n"
	"==7==ERROR: LeakSanitizer: detected memory leaks\n\n"
	"Direct leak of 40 byte(s) in 1 object(s) allocated from:\n"
	"    #0 0x7f00 in __interceptor_malloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:69\n"
	"    #1 0x5500 in tw__pipe_new /src/ref/src/core/pipe.c:120\n"
	"    #2 0x5501 in tw__listener_on_hello /src/ref/src/core/listener.c:300\n\n"
	"SUMMARY: AddressSanitizer: 40 byte(s) leaked in 1 allocation(s).\n";

static void test_signatures(void)
{
	char a[256], b[256], line[512];
	int abrt = 6; /* a wait status: killed by SIGABRT */
	wf_sig_crash(abrt, stock_abort, a, sizeof(a), line, sizeof(line));
	CHECK(strstr(a, "Read Limit Reached") && strstr(a, "std::runtime_error"),
	      "stock's abort: '%s'", a);
	CHECK(strstr(line, "what():"), "the telling line is '%s'", line);
	wf_sig_crash(abrt, stock_abort2, b, sizeof(b), line, sizeof(line));
	CHECK(strcmp(a, b) != 0, "two nop errors share a signature: '%s'", a);
	wf_sig_crash(abrt, stock_site, a, sizeof(a), line, sizeof(line));
	wf_sig_crash(abrt, stock_site2, b, sizeof(b), line, sizeof(line));
	CHECK(!strcmp(a, b) && strstr(a, "context_impl.cc:147") && !strstr(a, "zz"),
	      "a throw site that quotes the input: '%s' vs '%s'", a, b);
	wf_sig_crash(abrt, asan_segv, a, sizeof(a), line, sizeof(line));
	CHECK(!strcmp(a, "crash: AddressSanitizer SEGV in tensorpipe::NopHolder<>::read < "
	                 "tensorpipe::transport::ConnectionImplBoilerplate<>::readImplFromLoop < "
	                 "libuv.so.1+0x1a3a4"),
	      "ASan SEGV: '%s'", a);
	wf_sig_crash(abrt, "", a, sizeof(a), line, sizeof(line));
	CHECK(!strcmp(a, "crash: signal ABRT"), "a bare SIGABRT: '%s'", a);
	char leaks[512];
	CHECK(wf_sig_leaks(lsan, leaks, sizeof(leaks)) == 1 &&
	      !strcmp(leaks, "leak: direct in tw__pipe_new < tw__listener_on_hello"),
	      "LSan: '%s'", leaks);
	CHECK(wf_sig_leaks(stock_abort, leaks, sizeof(leaks)) == 0, "a leak where there is none");
	char norm[128];
	wf_sig_normalise("size 0x4000 at  12 and 7", norm, sizeof(norm));
	CHECK(!strcmp(norm, "size N at N and N"), "normalise: '%s'", norm);
}

static void test_committed(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		CHECK(false, "cannot open %s", dir);
		return;
	}
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l < 5 || strcmp(de->d_name + l - 4, ".twr") != 0)
			continue;
		char path[1024], err[512];
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		wf_script s;
		int rc = wf_script_load(path, &s, err, sizeof(err));
		CHECK(rc == 0, "%s", err);
		if (rc == 0) {
			CHECK(s.nsteps > 0 && s.signature[0] && s.klass[0],
			      "%s: no steps, signature or class", path);
			roundtrip(&s, de->d_name);
			wf_script_free(&s);
		}
		n++;
	}
	closedir(d);
	printf("# %d committed reproducers parsed\n", n);
}

int main(int argc, char **argv)
{
	test_roundtrips();
	test_parse_errors();
	test_splice_marks();
	test_signatures();
	if (argc > 1)
		test_committed(argv[1]);
	if (failures) {
		printf("%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
