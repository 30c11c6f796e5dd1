/*
 * shm_test.c - the shared-memory transport against the connection
 * contract of transport.h (conn_contract_test.h), through tw_conn_ops
 * directly: both ends in one process, each with its own rings, through
 * one reactor.
 */
#include "transport/conn_contract_test.h"
#include "transport/shm/shm.h"

int main(int argc, char **argv)
{
	static const tw_conn_fixture fx = { &tw__shm_transport_ops, NULL, "" };
	return tw_conn_contract_main(&fx, argc, argv);
}
