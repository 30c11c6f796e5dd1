/*
 * tcp_test.c - the TCP transport ("uv") against the connection contract
 * of transport.h (conn_contract_test.h), through tw_conn_ops directly.
 */
#include "transport/conn_contract_test.h"
#include "transport/tcp/tcp.h"

int main(int argc, char **argv)
{
	static const tw_conn_fixture fx = { &tw__tcp_transport_ops, NULL, "127.0.0.1:0" };
	return tw_conn_contract_main(&fx, argc, argv);
}
