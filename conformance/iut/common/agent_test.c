/*
 * agent_test.c - unit test of the generator and checksum rules of
 * spec/agent.md section 4, against the golden values printed there (the
 * splitmix64 values are the published reference outputs for seed 0), and of
 * the request parsing every adapter shares (section 6).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

static int failures;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			failures++;                                           \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);           \
			printf(__VA_ARGS__);                                  \
			printf("\n");                                         \
		}                                                             \
	} while (0)

int main(void)
{
	/* splitmix64 from state 0: the first three outputs */
	CHECK(twc_agent_gen_word(0, 0) == UINT64_C(0xE220A8397B1DCDAF), "word 0");
	CHECK(twc_agent_gen_word(0, 1) == UINT64_C(0x6E789E6AA1B965F4), "word 1");
	CHECK(twc_agent_gen_word(0, 2) == UINT64_C(0x06C45D188009454F), "word 2");

	/* bytes are the words in little-endian order, the tail truncated */
	unsigned char b[11];
	twc_agent_gen_fill(b, sizeof(b), 0);
	static const unsigned char want[11] = {0xaf, 0xcd, 0x1d, 0x7b, 0x39, 0xa8,
	                                       0x20, 0xe2, 0xf4, 0x65, 0xb9};
	CHECK(memcmp(b, want, sizeof(want)) == 0, "gen bytes of (seed 0, len 11)");

	/* XXH3-64 of the empty input, and hex formatting */
	char hex[17];
	twc_agent_hex64(twc_agent_xxh3(NULL, 0), hex);
	CHECK(strcmp(hex, "2d06800538d394c2") == 0, "xxh3 of empty input: %s", hex);

	/* the streaming checksum equals the one-shot one, across chunk borders */
	static const uint64_t lens[] = {0, 1, 7, 8, 9, 65535, 65536, 65537, 200003, 1 << 20};
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		size_t n = (size_t)lens[i];
		unsigned char *p = malloc(n ? n : 1);
		if (!p)
			return 2;
		twc_agent_gen_fill(p, n, 12345 + i);
		CHECK(twc_agent_gen_xxh3(12345 + i, n) == twc_agent_xxh3(p, n), "streaming xxh3, len %zu",
		      n);
		free(p);
	}

	/* golden values quoted in spec/agent.md 4.3 */
	twc_agent_hex64(twc_agent_gen_xxh3(1, 5), hex);
	printf("gen_xxh3(seed 1, len 5)    = %s\n", hex);
	CHECK(strcmp(hex, "4a8e1c7c6c6ca1ee") == 0, "golden (1, 5): %s", hex);
	twc_agent_hex64(twc_agent_gen_xxh3(42, 1000), hex);
	printf("gen_xxh3(seed 42, len 1000) = %s\n", hex);
	CHECK(strcmp(hex, "749600834d19c48a") == 0, "golden (42, 1000): %s", hex);

	/* device strings */
	twc_agent_device d;
	CHECK(twc_agent_device_parse("cuda:3", &d) == 0 && !strcmp(d.type, "cuda") && d.index == 3,
	      "parse cuda:3");
	CHECK(twc_agent_device_parse("cpu", &d) != 0, "reject cpu");
	CHECK(twc_agent_device_parse(":0", &d) != 0, "reject :0");
	CHECK(twc_agent_device_parse("cpu:x", &d) != 0, "reject cpu:x");

	/* message descriptions: defaults and errors */
	json_t *j = json_loads("{\"metadata\":{\"len\":3,\"seed\":9},\"tensors\":[{\"len\":4}]}", 0,
	                       NULL);
	twc_agent_msg *m = NULL;
	char err[256];
	CHECK(twc_agent_msg_parse(j, &m, err, sizeof(err)) == 0, "parse: %s", err);
	if (m) {
		CHECK(m->metadata.len == 3 && m->metadata.seed == 9, "metadata");
		CHECK(m->num_payloads == 0 && m->num_tensors == 1, "counts");
		CHECK(!strcmp(m->tensors[0].source_device.type, "cpu") &&
		              !m->tensors[0].has_target_device,
		      "tensor defaults");
		twc_agent_msg_free(m);
	}
	json_decref(j);
	j = json_loads("{\"payloads\":[{\"len\":-1}]}", 0, NULL);
	CHECK(twc_agent_msg_parse(j, &m, err, sizeof(err)) != 0 && strstr(err, "payloads[0].len"),
	      "negative length rejected: %s", err);
	json_decref(j);

	/* context requests (spec/agent.md 6.2), parsed the same for every adapter */
	twc_agent_context_req r;
	j = json_loads("{\"cmd\":\"context\",\"name\":\"c\"}", 0, NULL);
	CHECK(twc_agent_parse_context(j, &r, err, sizeof(err)) == 0, "context: %s", err);
	CHECK(r.num_transports == 1 && !strcmp(r.transports[0].name, "uv") &&
	              r.num_channels == 1 && !strcmp(r.channels[0].kind, "basic") &&
	              !r.has_handshake_timeout && !strcmp(r.name, "c"),
	      "absent lists mean the defaults uv and basic");
	twc_agent_context_req_clear(&r);
	json_decref(j);
	j = json_loads("{\"transports\":[],\"channels\":[{\"name\":\"mpt_uv\",\"kind\":\"mpt\","
	               "\"priority\":10,\"options\":{\"lanes\":2}}],\"operation_timeout_ms\":0}",
	               0, NULL);
	CHECK(twc_agent_parse_context(j, &r, err, sizeof(err)) == 0, "context: %s", err);
	CHECK(r.num_transports == 0 && r.num_channels == 1 && r.channels[0].priority == 10 &&
	              !strcmp(r.channels[0].kind, "mpt") && r.channels[0].options &&
	              r.has_operation_timeout && r.operation_timeout_ms == 0,
	      "an empty list means none; kind, priority and options are kept");
	twc_agent_context_req_clear(&r);
	json_decref(j);
	static const struct {
		const char *json, *want;
	} bad[] = {
		{"{\"transports\":{}}", "'transports' must be an array"},
		{"{\"channels\":[{\"kind\":\"basic\"}]}", "channels[0] must be a 'name' string"},
		{"{\"channels\":[{\"name\":\"b\",\"priority\":\"hi\"}]}", "an integer 'priority'"},
		{"{\"handshake_timeout_ms\":-1}", "'handshake_timeout_ms' must be a non-negative"},
		{"{\"name\":7}", "'name' must be a string"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		j = json_loads(bad[i].json, 0, NULL);
		err[0] = '\0';
		CHECK(j && twc_agent_parse_context(j, &r, err, sizeof(err)) != 0 &&
		              strstr(err, bad[i].want),
		      "%s rejected naming %s: %s", bad[i].json, bad[i].want, err);
		json_decref(j);
	}
	const char **urls;
	size_t nurls;
	j = json_loads("{\"urls\":[\"uv://127.0.0.1:0\",3]}", 0, NULL);
	CHECK(twc_agent_parse_urls(j, &urls, &nurls, err, sizeof(err)) != 0 &&
	              strstr(err, "urls[1] must be a string"),
	      "a non-string URL is named: %s", err);
	json_decref(j);

	printf("%s\n", failures ? "FAIL" : "PASS");
	return failures ? 1 : 0;
}
