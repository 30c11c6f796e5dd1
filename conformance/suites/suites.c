/*
 * suites.c - tensorwire-conform: the runner of harness/conform.c with the
 * suites of this folder.
 */
#include "conform.h"
#include "suites.h"

const twc_suite twc_suites[] = {
	{"wire", twc_suite_wire},
	{"wire", twc_suite_wire_client},
	{"wire", twc_suite_wire_fuzz},
	{"wire", twc_suite_wire_descriptors},
	{"wire", twc_suite_wire_shm},
	{"wire", twc_suite_wire_mpt},
	{"wire", twc_suite_wire_ibv},
	{"wire", twc_suite_wire_ibv_ring},
	{"semantic", twc_suite_semantic},
	{"interop", twc_suite_interop},
	{"contain", twc_suite_contain},
	{"rdma", twc_suite_rdma},
	{"cuda", twc_suite_cuda},
};
const size_t twc_num_suites = sizeof(twc_suites) / sizeof(twc_suites[0]);

int main(int argc, char **argv)
{
	return twc_conform_main(argc, argv, twc_suites, twc_num_suites);
}
