/*
 * suites.h - the conformance suites (one folder each) and the table that
 * hands them to the runner. The harness (harness/) knows none of them.
 */
#ifndef TWC_SUITES_SUITES_H
#define TWC_SUITES_SUITES_H

#include <stddef.h>

#include "case.h"

/* The case tables, each built once. */
const twc_case *twc_suite_wire(int *count_out);        /* wire/wire.c: the IUT as server */
const twc_case *twc_suite_wire_client(int *count_out); /* wire/client.c: the IUT as client */
const twc_case *twc_suite_wire_fuzz(int *count_out);   /* wire/fuzz_findings.c: reproducers */
const twc_case *twc_suite_wire_descriptors(int *count_out); /* wire/descriptors.c: spec 6 */
const twc_case *twc_suite_wire_shm(int *count_out);    /* wire/shm_bootstrap.c: 2.3.1-2 */
const twc_case *twc_suite_wire_mpt(int *count_out);    /* wire/mpt_lanes.c: 4.3.b */
const twc_case *twc_suite_wire_ibv(int *count_out);    /* wire/ibv_setup.c: hostile ibv set-up */
const twc_case *twc_suite_wire_ibv_ring(int *count_out); /* wire/ibv_ring.c: ibv ring traffic */
const twc_case *twc_suite_semantic(int *count_out);    /* semantic/semantic.c */
const twc_case *twc_suite_interop(int *count_out);     /* interop/suite.c */
const twc_case *twc_suite_contain(int *count_out);     /* contain/contain.c: containers, sandboxes */
const twc_case *twc_suite_rdma(int *count_out);        /* rdma/rdma.c: verbs devices, ports, GIDs */
const twc_case *twc_suite_cuda(int *count_out);        /* cuda/cuda.c: device tensors, T03, T08 */

/* Every table, in the order the runner lists and runs them. */
extern const twc_suite twc_suites[];
extern const size_t twc_num_suites;

#endif /* TWC_SUITES_SUITES_H */
