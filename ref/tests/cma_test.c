/*
 * cma_test.c - the cma channel's failure paths (spec/wire.md 4.4), with the
 * fault points of platform/fault_points.h (built against tw_ref_faulty):
 *
 *   copy_denied   process_vm_readv refused (EPERM, as under a seccomp
 *                 filter or a peer made non-dumpable after the handshake):
 *                 the receive fails naming the mechanism, the call and the
 *                 errno, the writer's write fails too, each callback once,
 *                 nothing hangs
 *   short_copies  every process_vm_readv copies one byte: the copies are
 *                 resumed where they stopped and every byte arrives
 *
 * One process, two contexts, uv+cma. The first two process_vm_readv calls
 * are the two contexts' viability probes; the fault rules start after them.
 */
#include "pair_util.h"

static void open_cma_pair(tu_pair *p)
{
	setenv("TW_TEST_COMBO", "uv+cma", 1);
	tu_pair_open(p, NULL);
	tw_pipe_info info;
	CHECK_OK(tw_pipe_get_info(p->c, &info));
	CHECK(strcmp(info.channel, "cma") == 0);
}

static void case_copy_denied(void)
{
	setenv("TW_FAULTS", "sys/vm_readv/fail:3+", 1);
	tu_pair p = { 0 };
	open_cma_pair(&p);
	static uint8_t data[100000], got[100000];
	tu_fill_at(data, sizeof(data), 7);
	tw_tensor t = { .data = data, .length = sizeof(data), .source_device = tw_device_cpu(),
		        .has_target_device = true, .target_device = tw_device_cpu() };
	tw_message m = { .num_tensors = 1, .tensors = &t };
	tu_rec w, d, r;
	tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
	CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	tw_tensor_allocation ta = { .data = got, .device = tw_device_cpu() };
	tw_allocation a = { .num_tensors = 1, .tensors = &ta };
	CHECK_OK(tw_pipe_read(p.s, &a, tu_on_status, &r));
	tu_wait(&r.w, 1);
	CHECK(r.status != TW_OK);
	CHECK(strstr(r.detail, "cma channel") && strstr(r.detail, "process_vm_readv") &&
	      strstr(r.detail, "Operation not permitted"));
	printf("# the receive: %s: %s\n", tw_status_name(r.status), r.detail);
	tu_wait(&w.w, 1);
	CHECK(w.status != TW_OK);
	printf("# the write: %s: %s\n", tw_status_name(w.status), w.detail);
	tu_pair_close(&p);
	tu_once(&w), tu_once(&d), tu_once(&r);
}

static void case_short_copies(void)
{
	setenv("TW_FAULTS", "sys/vm_readv/short:3+", 1);
	tu_pair p = { 0 };
	open_cma_pair(&p);
	enum { N = 3, LEN = 5000 };
	static uint8_t data[N][LEN], got[N][LEN];
	tu_rec w[N], d[N], r[N];
	for (int i = 0; i < N; i++) {
		tu_fill_at(data[i], LEN, 100 + (uint64_t)i);
		tw_tensor t = { .data = data[i], .length = LEN, .source_device = tw_device_cpu(),
			        .has_target_device = true, .target_device = tw_device_cpu() };
		tw_message m = { .num_tensors = 1, .tensors = &t };
		tu_rec_init(&w[i]), tu_rec_init(&d[i]), tu_rec_init(&r[i]);
		CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w[i]));
	}
	for (int i = 0; i < N; i++) {
		CHECK_OK(tw_pipe_read_descriptor(p.s, tu_on_desc, &d[i]));
		tu_expect(&d[i], TW_OK, NULL);
		tw_tensor_allocation ta = { .data = got[i], .device = tw_device_cpu() };
		tw_allocation a = { .num_tensors = 1, .tensors = &ta };
		CHECK_OK(tw_pipe_read(p.s, &a, tu_on_status, &r[i]));
		tu_expect(&r[i], TW_OK, NULL);
		CHECK(tu_hash(got[i], LEN) == tu_expected_hash(LEN, 100 + (uint64_t)i));
	}
	for (int i = 0; i < N; i++)
		tu_expect(&w[i], TW_OK, NULL);
	tu_pair_close(&p);
	for (int i = 0; i < N; i++)
		tu_once(&w[i]), tu_once(&d[i]), tu_once(&r[i]);
}

int main(int argc, char **argv)
{
	static const tu_case cases[] = {
		{ "copy_denied", case_copy_denied },
		{ "short_copies", case_short_copies },
	};
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 120);
}
