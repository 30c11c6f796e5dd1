/*
 * ibv_peer.c - libtensorwire's twin of simverbs/tests/tp_ibv_peer.cc (stock
 * TensorPipe's ibv peer), speaking the same exchange, so that any pairing of
 * the two runs across processes and network namespaces (simverbs'
 * pair.sh): ours<->ours, ours->stock, stock->ours.
 *
 *   tw_ibv_peer serve ADDR PORT    echo every message back (one pipe)
 *   tw_ibv_peer connect ADDR PORT  send one message per size, check echoes
 *
 * A message is metadata "message of N", one payload of N/2+1 bytes and one
 * tensor of N bytes (N = 1 B .. 8 MiB), patterned as the stock peer does;
 * every byte is checked. ibv and basic only. Exit 0 = all intact; 77 =
 * SKIP (no usable verbs device).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pair_util.h"

static const size_t sizes[] = { 1, 100, 4096, 65536, 1 << 20, 8 << 20 };
enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]) };

static uint8_t *pattern(size_t n, uint8_t seed)
{
	uint8_t *v = malloc(n ? n : 1);
	CHECK(v);
	for (size_t i = 0; i < n; i++)
		v[i] = (uint8_t)(seed + i * 13 + (i >> 9));
	return v;
}

typedef struct msg_in {
	tw_status_t status;
	char detail[512];
	char meta[64];
	size_t plen, tlen;
	uint8_t *payload, *tensor;
} msg_in;

/* Reads one message into fresh buffers (status != TW_OK: the pipe ended). */
static void receive(tw_pipe *p, msg_in *m)
{
	memset(m, 0, sizeof(*m));
	tu_rec d, r;
	tu_rec_init(&d), tu_rec_init(&r);
	CHECK_OK(tw_pipe_read_descriptor(p, tu_on_desc, &d));
	tu_wait(&d.w, 1);
	m->status = d.status;
	snprintf(m->detail, sizeof(m->detail), "%s", d.detail);
	if (d.status != TW_OK)
		return;
	CHECK(d.desc->num_payloads == 1 && d.desc->num_tensors == 1);
	snprintf(m->meta, sizeof(m->meta), "%.*s", (int)d.desc->metadata_length,
	         (const char *)d.desc->metadata);
	m->plen = d.desc->payloads[0].length;
	m->tlen = d.desc->tensors[0].length;
	m->payload = malloc(m->plen ? m->plen : 1);
	m->tensor = malloc(m->tlen ? m->tlen : 1);
	CHECK(m->payload && m->tensor);
	void *pb[1] = { m->payload };
	tw_tensor_allocation ta = { m->tensor, tw_device_cpu(), NULL };
	tw_allocation a = { 1, pb, 1, &ta };
	CHECK_OK(tw_pipe_read(p, &a, tu_on_status, &r));
	tu_wait(&r.w, 1);
	m->status = r.status;
	snprintf(m->detail, sizeof(m->detail), "%s", r.detail);
}

/* Writes one message and waits for its callback; TW_OK or the error. */
static tw_status_t send_msg(tw_pipe *p, const char *meta, uint8_t *payload, size_t plen,
                            uint8_t *tensor, size_t tlen, char *detail, size_t dlen)
{
	tw_payload pay = { .data = payload, .length = plen };
	tw_tensor t = { .data = tensor, .length = tlen, .source_device = tw_device_cpu() };
	tw_message m = { .metadata = meta, .metadata_length = strlen(meta), .num_payloads = 1,
		         .payloads = &pay, .num_tensors = 1, .tensors = &t };
	tu_rec w;
	tu_rec_init(&w);
	CHECK_OK(tw_pipe_write(p, &m, tu_on_status, &w));
	tu_wait(&w.w, 1);
	snprintf(detail, dlen, "%s", w.detail);
	return w.status;
}

static tw_context *context(void)
{
	tw_context *ctx;
	CHECK_OK(tw_context_create("tw-ibv-peer", &ctx));
	if (tw_context_register_transport(ctx, "ibv", NULL, 0, NULL) != TW_OK) {
		printf("SKIP: libtensorwire's ibv transport is not usable: %s\n", tw_last_error());
		exit(77);
	}
	CHECK_OK(tw_context_register_channel(ctx, "basic", NULL, 0, NULL));
	return ctx;
}

static int serve(const char *url)
{
	tw_context *ctx = context();
	tw_listener *l;
	const char *urls[1] = { url };
	CHECK_OK(tw_context_listen(ctx, urls, 1, &l));
	char bound[256];
	CHECK_OK(tw_listener_url(l, NULL, bound, sizeof(bound)));
	printf("listening on %s\n", bound);
	fflush(stdout);
	tu_rec acc;
	tu_rec_init(&acc);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
	tu_wait(&acc.w, 1);
	if (acc.status != TW_OK) {
		printf("accept: %s\n", acc.detail);
		return 1;
	}
	int echoed = 0;
	for (;;) {
		msg_in m;
		receive(acc.pipe, &m);
		if (m.status != TW_OK)
			break; /* the client closed its pipe */
		char d[512];
		tw_status_t st = send_msg(acc.pipe, m.meta, m.payload, m.plen, m.tensor, m.tlen, d,
		                          sizeof(d));
		free(m.payload);
		free(m.tensor);
		if (st != TW_OK) {
			printf("write: %s\n", d);
			return 1;
		}
		echoed++;
	}
	printf("echoed %d messages\n", echoed);
	tw_pipe_destroy(acc.pipe);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
	return echoed == NSIZES ? 0 : 1;
}

static int connect_and_check(const char *url)
{
	tw_context *ctx = context();
	tw_pipe *p;
	CHECK_OK(tw_context_connect(ctx, url, &p));
	int passed = 0, failed = 0;
	unsigned seed = 1;
	for (size_t i = 0; i < NSIZES; i++) {
		size_t n = sizes[i];
		uint8_t *payload = pattern(n / 2 + 1, (uint8_t)seed++);
		uint8_t *tensor = pattern(n, (uint8_t)seed++);
		char meta[64], d[512];
		snprintf(meta, sizeof(meta), "message of %zu", n);
		tw_status_t st = send_msg(p, meta, payload, n / 2 + 1, tensor, n, d, sizeof(d));
		msg_in m = { 0 };
		if (st == TW_OK)
			receive(p, &m);
		bool ok = st == TW_OK && m.status == TW_OK && !strcmp(m.meta, meta) &&
		          m.plen == n / 2 + 1 && m.tlen == n && !memcmp(m.payload, payload, m.plen) &&
		          !memcmp(m.tensor, tensor, n);
		printf("%s - %zu-byte tensor echoed by the server%s%s\n", ok ? "ok" : "not ok", n,
		       ok ? "" : ": ", ok ? "" : st != TW_OK ? d : m.detail);
		*(ok ? &passed : &failed) += 1;
		free(payload);
		free(tensor);
		free(m.payload);
		free(m.tensor);
	}
	printf("%d passed, %d failed\n", passed, failed);
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 4 || (strcmp(argv[1], "serve") && strcmp(argv[1], "connect"))) {
		fprintf(stderr, "usage: tw_ibv_peer serve|connect ADDR PORT\n");
		return 2;
	}
	char url[256];
	snprintf(url, sizeof(url), "ibv://%s:%s", argv[2], argv[3]);
	return !strcmp(argv[1], "serve") ? serve(url) : connect_and_check(url);
}
