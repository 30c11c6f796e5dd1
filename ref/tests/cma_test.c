/*
 * cma_test.c - the cma channel's failure paths (spec/wire.md 4.4), with the
 * fault points of platform/fault_points.h (built against tw_ref_faulty):
 *
 *   proof_refused the proof's copies refused (EPERM, as between two
 *                 containers whose descriptors match, spec 8.3): the pipe
 *                 still selects cma, both directions fall back to inline
 *                 bytes, every tensor arrives intact and
 *                 tw_pipe_get_verdicts says why
 *   copy_denied   process_vm_readv refused after the proof passed (EPERM,
 *                 as when a peer is made non-dumpable after the
 *                 handshake): the receive fails naming the mechanism, the
 *                 call and the errno, the writer's write fails too, each
 *                 callback once, nothing hangs
 *   writer_gone   process_vm_readv fails with ESRCH after the proof passed
 *                 (the writer's process is gone): the receive fails with
 *                 TW_ERR_CONNRESET, as for a peer that died, naming the
 *                 call and the errno (copy_denied: TW_ERR_UNSUPPORTED)
 *   short_copies  every process_vm_readv copies one byte: the copies are
 *                 resumed where they stopped and every byte arrives
 *
 * One process, two contexts, uv+cma. The first two process_vm_readv calls
 * are the two contexts' viability probes, the next two the pipe's proofs
 * (one per direction); the fault rules start after the ones they spare.
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

/* Waits (bounded) until the client's cma line no longer says the proof is
 * under way, and returns it in v. */
static void wait_proof(tu_pair *p, char *v, size_t len)
{
	for (int i = 0; i < 1000; i++) {
		CHECK_OK(tw_pipe_get_verdicts(p->c, v, len));
		if (!strstr(v, "under way"))
			return;
		usleep(10000);
	}
	CHECK(!"the proof did not end within 10 s");
}

/* One tensor of `len` bytes (seed `seed`) from `from` to `to`, checked. */
static void move_one(tw_pipe *from, tw_pipe *to, uint8_t *data, uint8_t *got, size_t len,
                     uint64_t seed)
{
	tu_fill_at(data, len, seed);
	tw_tensor t = { .data = data, .length = len, .source_device = tw_device_cpu(),
		        .has_target_device = true, .target_device = tw_device_cpu() };
	tw_message m = { .num_tensors = 1, .tensors = &t };
	tu_rec w, d, r;
	tu_rec_init(&w), tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_write(from, &m, tu_on_status, &w));
	CHECK_OK(tw_pipe_read_descriptor(to, tu_on_desc, &d));
	tu_expect(&d, TW_OK, NULL);
	tw_tensor_allocation ta = { .data = got, .device = tw_device_cpu() };
	tw_allocation a = { .num_tensors = 1, .tensors = &ta };
	CHECK_OK(tw_pipe_read(to, &a, tu_on_status, &r));
	tu_expect(&r, TW_OK, NULL);
	tu_expect(&w, TW_OK, NULL);
	CHECK(tu_hash(got, len) == tu_expected_hash(len, seed));
	tu_once(&w), tu_once(&d), tu_once(&r);
}

static void case_proof_refused(void)
{
	setenv("TW_FAULTS", "sys/vm_readv/fail:3+", 1);
	tu_pair p = { 0 };
	open_cma_pair(&p);
	static uint8_t data[300000], got[300000];
	for (int round = 0; round < 3; round++) {
		move_one(p.c, p.s, data, got, sizeof(data) - (size_t)round, 7 + (uint64_t)round);
		move_one(p.s, p.c, data, got, 1 + (size_t)round * 1000, 70 + (uint64_t)round);
	}
	char v[2048];
	CHECK_OK(tw_pipe_get_verdicts(p.c, v, sizeof(v)));
	printf("# verdicts (client):\n%s", v);
	CHECK(strstr(v, "channel cma: selected: the peer cannot copy from this process "
	                "(process_vm_readv from pid") &&
	      strstr(v, "Operation not permitted") && strstr(v, "travel inline") &&
	      strstr(v, "copies from the peer refused"));
	CHECK(strstr(v, "transport uv: selected\n"));
	char small[8];
	CHECK(tw_pipe_get_verdicts(p.c, small, sizeof(small)) == TW_ERR_INVAL);
	tu_pair_close(&p);
}

/* The proof passes, then every copy fails as `faults` says: the receive
 * fails with `want`, naming the call and `errno_text`. */
static void copy_fails(const char *faults, tw_status_t want, const char *errno_text)
{
	setenv("TW_FAULTS", faults, 1);
	tu_pair p = { 0 };
	open_cma_pair(&p);
	char v[2048];
	wait_proof(&p, v, sizeof(v));
	CHECK(strstr(v, "channel cma: selected: copies proven both ways"));
	static uint8_t data[100000], got[100000];
	tu_fill_at(data, sizeof(data), 7);
	tw_tensor t = { .data = data, .length = sizeof(data), .source_device = tw_device_cpu(),
		        .has_target_device = true, .target_device = tw_device_cpu() };
	tw_tensor_allocation ta = { .data = got, .device = tw_device_cpu() };
	tu_rec w, d, r;
	tu_move_tensor(p.c, p.s, &t, &ta, &w, &d, &r);
	tu_wait(&r.w, 1);
	printf("# the receive: %s: %s\n", tw_status_name(r.status), r.detail);
	CHECK(r.status == want);
	CHECK(strstr(r.detail, "cma channel") && strstr(r.detail, "process_vm_readv") &&
	      strstr(r.detail, errno_text));
	tu_wait(&w.w, 1);
	CHECK(w.status != TW_OK);
	printf("# the write: %s: %s\n", tw_status_name(w.status), w.detail);
	tu_pair_close(&p);
	tu_once(&w), tu_once(&d), tu_once(&r);
}

static void case_copy_denied(void)
{
	copy_fails("sys/vm_readv/fail:5+", TW_ERR_UNSUPPORTED, "Operation not permitted");
}

static void case_writer_gone(void)
{
	copy_fails("sys/vm_readv/esrch:5+", TW_ERR_CONNRESET, "No such process");
}

static void case_short_copies(void)
{
	setenv("TW_FAULTS", "sys/vm_readv/short:5+", 1);
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
		{ "proof_refused", case_proof_refused },
		{ "copy_denied", case_copy_denied },
		{ "writer_gone", case_writer_gone },
		{ "short_copies", case_short_copies },
	};
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 120);
}
