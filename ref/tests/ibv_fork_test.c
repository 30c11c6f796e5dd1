/*
 * ibv_fork_test.c - fork safety of the ibv transport (spec/wire.md 2.4.5,
 * field failure T26), on simverbs in its "strict" fork model: without
 * ibv_fork_init, every private page the device has registered detaches
 * from the device at fork(), so the device keeps reading and writing the
 * pre-fork copy while the parent uses its own (the pre-5.13 kernel
 * hazard). CTest runs it with SIMVERBS_FORK=strict through simverbs-run.
 *
 *   order    a context with ibv leaves fork handling enabled in the verbs
 *            library (ibv_is_fork_initialized: ENABLED), so its first
 *            registration came after ibv_fork_init, or the call would have
 *            failed and ibv would not have been offered; on a real kernel
 *            (softroce.sh) UNNEEDED is right too: the kernel keeps
 *            registered pages with the parent by itself
 *   order_gdr the same for a context with cuda_gdr and no ibv transport
 *            (its NICs register memory when it is registered)
 *   late     memory registered by someone else before the first context:
 *            ibv_fork_init can no longer help, and ibv is refused with a
 *            reason naming it (not offered silently unsafe)
 *   stream   the parent streams 1 MiB checksummed messages over ibv (60, and
 *            on until the last child has exited) while
 *            a thread forks 20 children that each write to every page of
 *            a 64 MiB heap block and exit: every message verifies, within
 *            a bound. With TW_IB_FORK_SAFE=0 (case stream_unsafe, expected
 *            to fail: CTest WILL_FAIL) the same run corrupts or stalls,
 *            which shows the case can see the hazard.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pair_util.h"

enum { MSG_BYTES = 1 << 20, MESSAGES = 60, CHILDREN = 20, HEAP_BYTES = 64 << 20 };

static void case_order(void)
{
	tw_context *ctx;
	CHECK_OK(tw_context_create("fork-order", &ctx));
	CHECK_OK(tw_context_register_transport(ctx, "ibv", NULL, 0, NULL));
	enum ibv_fork_status fs = ibv_is_fork_initialized();
	/* On a real kernel (softroce.sh sets TW_RDMA_PROVIDER) from 5.13 on,
	 * registered pages stay with the parent across fork by themselves and
	 * the library says UNNEEDED; simverbs' strict model is the older
	 * kernel, where only ENABLED is safe. */
	const char *prov = getenv("TW_RDMA_PROVIDER");
	bool real = prov && strcmp(prov, "simverbs") != 0;
	printf("   ibv_is_fork_initialized: %d (want %d, enabled%s)\n", (int)fs, (int)IBV_FORK_ENABLED,
	       real ? ", or 2, unneeded: a real kernel" : "");
	CHECK(fs == IBV_FORK_ENABLED || (real && fs == IBV_FORK_UNNEEDED));
	tw_context_destroy(ctx);
}

/* cuda_gdr alone (no ibv transport) registers memory on its NICs when it
 * is registered: fork handling must be on before that too. Run under
 * simcuda and simverbs. */
static void case_order_gdr(void)
{
	tw_context *ctx;
	CHECK_OK(tw_context_create("fork-order-gdr", &ctx));
	CHECK_OK(tw_context_register_transport(ctx, "uv", NULL, 0, NULL));
	tw_status_t st = tw_context_register_channel(ctx, "cuda_gdr", NULL, 0, NULL);
	printf("   register cuda_gdr: %s %s\n", tw_status_name(st), st ? tw_last_error() : "");
	CHECK_OK(st);
	enum ibv_fork_status fs = ibv_is_fork_initialized();
	const char *prov = getenv("TW_RDMA_PROVIDER");
	bool real = prov && strcmp(prov, "simverbs") != 0;
	printf("   ibv_is_fork_initialized: %d (want %d, enabled)\n", (int)fs, (int)IBV_FORK_ENABLED);
	CHECK(fs == IBV_FORK_ENABLED || (real && fs == IBV_FORK_UNNEEDED));
	tw_context_destroy(ctx);
}

static void case_late(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0);
	struct ibv_context *vc = ibv_open_device(list[0]);
	CHECK(vc);
	struct ibv_pd *pd = ibv_alloc_pd(vc);
	CHECK(pd);
	static uint8_t early[1 << 16];
	struct ibv_mr *mr = ibv_reg_mr(pd, early, sizeof(early), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr);
	tw_context *ctx;
	CHECK_OK(tw_context_create("fork-late", &ctx));
	tw_status_t st = tw_context_register_transport(ctx, "ibv", NULL, 0, NULL);
	printf("   register ibv: %s: %s\n", tw_status_name(st), tw_last_error());
	CHECK(st == TW_ERR_UNSUPPORTED && strstr(tw_last_error(), "ibv_fork_init"));
	tw_context_destroy(ctx);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(vc) == 0);
	ibv_free_device_list(list);
}

/* Message i: every 8-byte word is (i << 32 | word index). */
static void fill(uint8_t *buf, uint32_t i)
{
	uint64_t *w = (uint64_t *)(void *)buf;
	for (size_t k = 0; k < MSG_BYTES / 8; k++)
		w[k] = (uint64_t)i << 32 | k;
}

static bool verify(const uint8_t *buf, uint32_t i)
{
	const uint64_t *w = (const uint64_t *)(const void *)buf;
	for (size_t k = 0; k < MSG_BYTES / 8; k++)
		if (w[k] != ((uint64_t)i << 32 | k))
			return false;
	return true;
}

/* Set by the forker once its last child has exited: the stream goes on at
 * least until then, however fast it is, so that every fork happens while
 * messages are in flight. */
static atomic_bool forks_done;

static void *forker(void *arg)
{
	(void)arg;
	uint8_t *heap = malloc(HEAP_BYTES);
	CHECK(heap);
	memset(heap, 1, HEAP_BYTES);
	for (int i = 0; i < CHILDREN; i++) {
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			long page = sysconf(_SC_PAGESIZE);
			for (size_t off = 0; off < HEAP_BYTES; off += (size_t)page)
				heap[off] = (uint8_t)i;
			_exit(0);
		}
		int status = 0;
		CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
		usleep(20000);
	}
	free(heap);
	atomic_store(&forks_done, true);
	return NULL;
}

/* What the fork hazard does to a stream: a failed operation (the ring
 * framing broken by stale bytes) or a stall. Exit status 1, not an abort,
 * so that stream_unsafe can expect it. */
static void hazard(uint32_t i, const char *what, tw_status_t st, const char *detail)
{
	printf("   message %u: %s failed: %s: %s\n", i, what, tw_status_name(st), detail);
	exit(1);
}

static void case_stream(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, NULL);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, forker, NULL) == 0);
	uint8_t *out = malloc(MSG_BYTES), *in = malloc(MSG_BYTES);
	CHECK(out && in);
	int bad = 0;
	uint32_t i;
	for (i = 0; i < MESSAGES || !atomic_load(&forks_done); i++) {
		fill(out, i);
		tw_tensor t = { .data = out, .length = MSG_BYTES, .source_device = tw_device_cpu(),
			        .has_target_device = true, .target_device = tw_device_cpu() };
		tw_message m = { .num_tensors = 1, .tensors = &t };
		tu_rec w, d, r;
		tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
		CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
		CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
		/* a stalled transfer (the device writing the pre-fork pages) is a
		 * failure too, not a hang */
		if (!tu_wait_for(&d.w, 1, 20000)) {
			printf("   message %u: no descriptor within 20 s\n", i);
			exit(1);
		}
		if (d.status != TW_OK || d.desc->num_tensors != 1)
			hazard(i, "read_descriptor", d.status, d.detail);
		tw_tensor_allocation ta = { in, tw_device_cpu(), NULL };
		tw_allocation a = { 0, NULL, 1, &ta };
		CHECK_OK(tw_pipe_read(p.s, &a, tu_on_status, &r));
		if (!tu_wait_for(&r.w, 1, 20000) || !tu_wait_for(&w.w, 1, 20000)) {
			printf("   message %u: not delivered within 20 s\n", i);
			exit(1);
		}
		if (r.status != TW_OK || w.status != TW_OK)
			hazard(i, r.status != TW_OK ? "read" : "write",
			       r.status != TW_OK ? r.status : w.status,
			       r.status != TW_OK ? r.detail : w.detail);
		if (!verify(in, i))
			bad++;
	}
	CHECK(pthread_join(th, NULL) == 0);
	printf("   %u messages of 1 MiB, %d children forked meanwhile, %d corrupted\n", i,
	       CHILDREN, bad);
	if (bad)
		exit(1); /* the hazard seen: a plain failure (stream_unsafe expects one) */
	free(out);
	free(in);
	tu_pair_close(&p);
}

static const tu_case cases[] = {
	{ "order", case_order },
	{ "late", case_late },
	{ "order_gdr", case_order_gdr },
	{ "stream", case_stream },
};

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
