/*
 * ibv_test.c - the RDMA verbs transport against the connection contract of
 * transport.h (conn_contract_test.h), through tw_conn_ops directly: both
 * ends in one process, on simverbs (CTest runs it through simverbs-run).
 * argv[2], when given, is the transport's option string ("srq=false": the
 * per-QP receive queues of a device without a shared one).
 */
#include "transport/conn_contract_test.h"
#include "transport/ibv/ibv.h"

int main(int argc, char **argv)
{
	tw_conn_fixture fx = { &tw__ibv_transport_ops, argc > 2 ? argv[2] : NULL, "127.0.0.1:0" };
	return tw_conn_contract_main(&fx, argc > 2 ? 2 : argc, argv);
}
