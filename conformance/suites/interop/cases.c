/*
 * cases.c - the interop cases (see cases.h). Lengths are chosen to cross
 * the encodings' width boundaries (fixint, U8, U16, U32 lengths, §1.3 of the
 * reference) and the transports' buffer sizes.
 */
#include "cases.h"

#include <stdlib.h>
#include <string.h>

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

static int alloc_parts(twc_agent_msg *m, size_t np, size_t nt)
{
	memset(m, 0, sizeof(*m));
	m->num_payloads = np;
	m->num_tensors = nt;
	if (np && !(m->payloads = calloc(np, sizeof(*m->payloads))))
		return -1;
	if (nt && !(m->tensors = calloc(nt, sizeof(*m->tensors))))
		return -1;
	for (size_t i = 0; i < nt; i++)
		(void)twc_agent_device_parse("cpu:0", &m->tensors[i].source_device);
	return 0;
}

static void set_target_cpu(twc_agent_tensor *t)
{
	t->has_target_device = true;
	(void)twc_agent_device_parse("cpu:0", &t->target_device);
}

static int shape_metadata_only(int index, twc_agent_msg *m)
{
	static const uint64_t lens[] = {1, 127, 128, 65536 + 3};
	if (alloc_parts(m, 0, 0))
		return -1;
	m->metadata.len = lens[index % 4];
	return 0;
}

static int shape_payloads_only(int index, twc_agent_msg *m)
{
	static const uint64_t lens[] = {1, 255, 4096, 300 * KiB + 7};
	if (alloc_parts(m, 3, 0))
		return -1;
	for (size_t i = 0; i < 3; i++) {
		m->payloads[i].data.len = lens[(index + i) % 4];
		m->payloads[i].metadata.len = i * 5;
	}
	return 0;
}

static int shape_tensors_only(int index, twc_agent_msg *m)
{
	static const uint64_t lens[] = {8, 4096, 1 * MiB + 1};
	if (alloc_parts(m, 0, 3))
		return -1;
	for (size_t i = 0; i < 3; i++) {
		m->tensors[i].data.len = lens[(index + i) % 3];
		m->tensors[i].metadata.len = 2 + i;
		set_target_cpu(&m->tensors[i]);
	}
	return 0;
}

static int shape_mixed(int index, twc_agent_msg *m)
{
	if (alloc_parts(m, 2, 3))
		return -1;
	m->metadata.len = 33 + (uint64_t)index;
	m->payloads[0].data.len = 8;
	m->payloads[0].metadata.len = 2;
	m->payloads[1].data.len = 70000;
	for (size_t i = 0; i < 3; i++) {
		m->tensors[i].data.len = 1000 * (i + 1) + (uint64_t)index;
		m->tensors[i].metadata.len = 200;
		set_target_cpu(&m->tensors[i]);
	}
	return 0;
}

static int shape_zero_length(int index, twc_agent_msg *m)
{
	static const uint64_t lens[] = {0, 100, 0, 5000, 0};
	if (alloc_parts(m, 3, 5))
		return -1;
	m->payloads[0].data.len = 10;
	m->payloads[1].data.len = 0;
	m->payloads[2].data.len = 10;
	for (size_t i = 0; i < 5; i++) {
		m->tensors[i].data.len = lens[i];
		/* message 1 leaves the zero-length ones without a target device */
		if (!(index == 1 && lens[i] == 0))
			set_target_cpu(&m->tensors[i]);
	}
	return 0;
}

static int shape_100_tensors(int index, twc_agent_msg *m)
{
	if (alloc_parts(m, 0, 100))
		return -1;
	m->metadata.len = 16;
	for (size_t i = 0; i < 100; i++) {
		m->tensors[i].data.len = 1 + (i * 977) % (64 * KiB);
		m->tensors[i].metadata.len = i % 7;
		set_target_cpu(&m->tensors[i]);
	}
	(void)index;
	return 0;
}

static int shape_burst(int index, twc_agent_msg *m)
{
	if (alloc_parts(m, 1, 1))
		return -1;
	m->metadata.len = 16;
	m->payloads[0].data.len = 64 + (uint64_t)(index % 5);
	m->tensors[0].data.len = 128 + (uint64_t)(index % 3);
	set_target_cpu(&m->tensors[0]);
	return 0;
}

static int shape_64mib(int index, twc_agent_msg *m)
{
	if (alloc_parts(m, 0, 1))
		return -1;
	m->tensors[0].data.len = 64 * MiB;
	set_target_cpu(&m->tensors[0]);
	(void)index;
	return 0;
}

static int shape_no_target(int index, twc_agent_msg *m)
{
	if (alloc_parts(m, 1, 4))
		return -1;
	m->payloads[0].data.len = 5;
	for (size_t i = 0; i < 4; i++) {
		m->tensors[i].data.len = 512 * (i + 1);
		m->tensors[i].metadata.len = 3;
		/* message 0: no tensor has a target; message 1: every other one */
		if (index % 2 == 1 && i % 2 == 1)
			set_target_cpu(&m->tensors[i]);
	}
	return 0;
}

static int shape_2_5gib(int index, twc_agent_msg *m)
{
	if (alloc_parts(m, 0, 1))
		return -1;
	m->tensors[0].data.len = 5 * GiB / 2;
	set_target_cpu(&m->tensors[0]);
	(void)index;
	return 0;
}

static int shape_4_5gib(int index, twc_agent_msg *m)
{
	if (alloc_parts(m, 0, 1))
		return -1;
	m->tensors[0].data.len = 9 * GiB / 2;
	set_target_cpu(&m->tensors[0]);
	(void)index;
	return 0;
}

const twc_interop_case twc_interop_cases[] = {
	{"metadata_only", "message metadata only, no payloads or tensors", 4, false, false, 60,
	 shape_metadata_only, false},
	{"payloads_only", "three payloads per message, no tensors", 4, false, false, 60,
	 shape_payloads_only, false},
	{"tensors_only", "three CPU tensors per message, target device set", 3, false, false, 60,
	 shape_tensors_only, false},
	{"mixed", "metadata, two payloads and three tensors", 3, false, false, 60, shape_mixed, false},
	{"zero_length", "zero-length tensors and payloads among non-empty ones", 2, false, false,
	 60, shape_zero_length, true},
	{"tensors_100", "100 tensors in one message", 2, false, false, 60, shape_100_tensors, false},
	{"burst_1000", "1000 messages written before the first read", 1000, true, false, 120,
	 shape_burst, false},
	{"tensor_64mib", "one 64 MiB tensor", 1, false, false, 120, shape_64mib, false},
	{"no_target_device", "tensors without a target device (DescriptorReply)", 2, false, false,
	 60, shape_no_target, true},
	{"tensor_2_5gib", "one 2.5 GiB tensor", 1, false, true, 1200, shape_2_5gib, false},
	{"tensor_4_5gib", "one 4.5 GiB tensor", 1, false, true, 1200, shape_4_5gib, false},
};
const int twc_interop_num_cases = (int)(sizeof(twc_interop_cases) / sizeof(twc_interop_cases[0]));

const twc_interop_case *twc_interop_case_find(const char *id)
{
	for (int i = 0; i < twc_interop_num_cases; i++) {
		if (strcmp(twc_interop_cases[i].id, id) == 0)
			return &twc_interop_cases[i];
	}
	return NULL;
}
