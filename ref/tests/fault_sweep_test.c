/*
 * fault_sweep_test.c - "fail the Nth call" sweeps over the library's fault
 * points (platform/fault_points.h), SQLite-style: for N = 1, 2, ... a child
 * process runs a small but complete scenario (listen, connect, handshake, a
 * message with a payload, a tensor with a target device and one without,
 * close) with
 * TW_FAULTS=<point>:<N>, until a run where the point never fired. Each run
 * must end with an allowed outcome: every API call either succeeds or fails
 * with a status and detail, every armed callback fires exactly once, nothing
 * hangs (watchdog), nothing leaks (LeakSanitizer runs at the child's exit).
 *
 * Needs the library built with TW_FAULT_INJECTION (links tw_ref_faulty).
 * Usage: fault_sweep_test <point> [max_n]
 *
 * A point "verbs:<verb>" fails the Nth call of that verb of the device
 * instead (simverbs' SIMVERBS_FAIL, ENOMEM as a provider out of resources
 * would; run under simverbs-run with TW_TEST_COMBO=ibv+...).
 */
#include <dlfcn.h>
#include <sys/wait.h>

#include "pair_util.h"
#include "platform/fault.h"

enum { EXIT_NO_FAULT = 3 };

static bool g_verbs; /* the point is a verb of simverbs */

/* How many faults fired in this process. */
static unsigned long fired(void)
{
	if (!g_verbs)
		return (unsigned long)tw__fault_fired();
	unsigned long (*sv_fired)(void) =
	        (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "simverbs_fails_fired");
	if (!sv_fired) {
		fprintf(stderr, "a verbs point needs simverbs (simverbs-run)\n");
		abort();
	}
	return sv_fired();
}

/* The battery's transport and channel (TW_TEST_COMBO; uv+basic without
 * it), whose registration may fail too. */
static bool register_combo(tw_context *ctx)
{
	const tu_combo *k = tu_combo_get();
	return tw_context_register_transport(ctx, k->transport, NULL, 0,
	                                     k->options[0] ? k->options : NULL) == TW_OK &&
	       tw_context_register_channel(ctx, k->channel, NULL, 0, NULL) == TW_OK;
}

/* Each step may fail; a failure is an allowed outcome as long as
 * everything armed so far still completes exactly once. A run in which
 * the fault never fired must deliver the message intact. After it, a
 * second message (256 KiB) is written and its descriptor asked for, and
 * the client's context closes at once: the close meets them under way. */
static int scenario(void)
{
	tw_context *s = NULL, *c = NULL;
	tw_listener *l = NULL;
	tw_pipe *cp = NULL;
	tu_rec acc, est, w, d, r;
	tu_rec_init(&acc), tu_rec_init(&est), tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
	bool armed_acc = false, armed_est = false, armed_w = false, armed_d = false, armed_r = false;
	bool delivered = false;
	tu_rec w2, d2;
	tu_rec_init(&w2), tu_rec_init(&d2);
	bool armed_w2 = false, armed_d2 = false;
	static uint8_t big[256 << 10];
	tu_fill_at(big, sizeof(big), 4);
	uint8_t pay[300], ten[2000], ten2[700], rpay[300], rten[2000], rten2[700];
	tu_fill_at(pay, sizeof(pay), 1);
	tu_fill_at(ten, sizeof(ten), 2);
	tu_fill_at(ten2, sizeof(ten2), 3);

	if (tw_context_create("s", &s) != TW_OK || !register_combo(s))
		goto out;
	if (tw_context_create("c", &c) != TW_OK || !register_combo(c))
		goto out;
	const char *urls[] = { tu_combo_get()->listen_url };
	if (tw_context_listen(s, urls, 1, &l) != TW_OK)
		goto out;
	char url[128];
	CHECK_OK(tw_listener_url(l, NULL, url, sizeof(url)));
	if (tw_listener_accept(l, tu_on_accept, &acc) != TW_OK)
		goto out;
	armed_acc = true;
	if (tw_context_connect(c, url, &cp) != TW_OK)
		goto out;
	if (tw_pipe_on_established(cp, tu_on_status, &est) == TW_OK)
		armed_est = true;
	tw_payload p = { pay, sizeof(pay), NULL, 0 };
	/* one tensor whose target device is named (its bytes go at once, and
	 * wait unread on the server's channel connection until the read: the
	 * transport's end watch sees them) and one without (the receiver
	 * answers with a DescriptorReply first) */
	tw_tensor t[2] = {
		{ ten2, sizeof(ten2), tw_device_cpu(), true, tw_device_cpu(), NULL, 0, NULL },
		{ ten, sizeof(ten), tw_device_cpu(), false, tw_device_cpu(), NULL, 0, NULL },
	};
	tw_message m = { "m", 1, 1, &p, 2, t };
	if (tw_pipe_write(cp, &m, tu_on_status, &w) != TW_OK)
		goto out; /* no message: nothing more to wait for */
	armed_w = true;
	/* The accept may never come (the client's connect failed): wait a bit. */
	if (!tu_wait_unless_failed(&acc, &est, &w))
		goto out;
	if (tw_pipe_read_descriptor(acc.pipe, tu_on_desc, &d) != TW_OK)
		goto out;
	armed_d = true;
	if (!tu_wait_unless_failed(&d, &est, &w))
		goto out;
	/* the named tensor's bytes sit unread meanwhile (see above) */
	usleep(20000);
	void *pays[1] = { rpay };
	tw_tensor_allocation ta[2] = { { rten2, tw_device_cpu(), NULL }, { rten, tw_device_cpu(), NULL } };
	tw_allocation a = { 1, pays, 2, ta };
	if (tw_pipe_read(acc.pipe, &a, tu_on_status, &r) != TW_OK)
		goto out;
	armed_r = true;
	if (tu_wait_unless_failed(&r, &est, &w)) {
		/* If it says it worked, the bytes must be right. */
		CHECK(memcmp(rpay, pay, sizeof(pay)) == 0);
		CHECK(memcmp(rten, ten, sizeof(ten)) == 0);
		CHECK(memcmp(rten2, ten2, sizeof(ten2)) == 0);
		delivered = true;
		tw_tensor t2 = { big, sizeof(big), tw_device_cpu(), false, tw_device_cpu(), NULL, 0, NULL };
		tw_message m2 = { "n", 1, 0, NULL, 1, &t2 };
		armed_w2 = tw_pipe_write(cp, &m2, tu_on_status, &w2) == TW_OK;
		armed_d2 = tw_pipe_read_descriptor(acc.pipe, tu_on_desc, &d2) == TW_OK;
	}
out:
	if (!fired() && !delivered) {
		fprintf(stderr, "the fault never fired, yet the message was not delivered\n");
		abort();
	}
	/* Close everything (the client first: the server may hear it go, with
	 * its read of the second descriptor pending); then every armed
	 * callback has fired exactly once. */
	tu_rec *const armed[] = { armed_acc ? &acc : NULL, armed_est ? &est : NULL,
		                  armed_w ? &w : NULL,     armed_d ? &d : NULL,
		                  armed_r ? &r : NULL,     armed_w2 ? &w2 : NULL,
		                  armed_d2 ? &d2 : NULL };
	tu_sweep_end(s, c, l, acc.pipe, cp, armed_d2 ? &d2 : NULL, armed,
	             sizeof(armed) / sizeof(armed[0]));
	return fired() > 0 ? 0 : EXIT_NO_FAULT;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s <point> [max_n]\n", argv[0]);
		return 2;
	}
	long max_n = argc > 2 ? atol(argv[2]) : 1000;
	g_verbs = strncmp(argv[1], "verbs:", 6) == 0;
	tu_watchdog(600);
	long n;
	int failures = 0;
	for (n = 1; n <= max_n; n++) {
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			alarm(0);
			tu_watchdog(30);
			char rule[96];
			snprintf(rule, sizeof(rule), "%s:%ld", argv[1] + (g_verbs ? 6 : 0), n);
			setenv(g_verbs ? "SIMVERBS_FAIL" : "TW_FAULTS", rule, 1);
			exit(scenario()); /* exit, not _exit: LeakSanitizer runs at exit */
		}
		int status;
		CHECK(waitpid(pid, &status, 0) == pid);
		if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_NO_FAULT)
			break;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "not ok - %s:%ld (status 0x%x)\n", argv[1], n, status);
			failures++;
		}
	}
	if (n == 1) {
		printf("SKIP: fault point %s never fired (built without TW_FAULT_INJECTION?)\n",
		       argv[1]);
		return 77;
	}
	printf("%s - %s: %ld runs, %d failed\n", failures ? "not ok" : "ok", argv[1], n - 1, failures);
	return failures ? 1 : 0;
}
