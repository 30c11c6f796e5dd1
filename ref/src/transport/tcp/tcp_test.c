/*
 * tcp_test.c - the TCP transport ("uv") against the connection contract
 * of transport.h (conn_contract_test.h), through tw_conn_ops directly, and
 * one case of its own:
 *   hello_linger_bound  a connection closed with its hello queued while its
 *                       connect cannot complete (the listener's accept
 *                       queue is full, so the SYN is dropped) gives up
 *                       within TW_HELLO_LINGER_MS: the write's callback says
 *                       TW_ERR_CLOSED once and the loop finishes (no handle,
 *                       descriptor or buffer left; ASan and LSan watch)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "transport/conn_contract_test.h"
#include "transport/tcp/tcp.h"

static int raw_listen_full(char *address, size_t len, int *filler)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 0) ||
	    getsockname(l, (struct sockaddr *)&sa, &sl))
		return -1;
	/* a backlog of 0 holds one connection: this one fills it */
	*filler = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*filler < 0 || connect(*filler, (struct sockaddr *)&sa, sizeof(sa)))
		return -1;
	snprintf(address, len, "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
	return l;
}

static int hello_linger_bound(const tw_conn_fixture *fx)
{
	char address[64];
	int filler = -1;
	int l = raw_listen_full(address, sizeof(address), &filler);
	if (l < 0) {
		perror("not ok - a listener with a full accept queue");
		return 1;
	}
	int rc = cc_hello_linger_bound(fx, address, "uv");
	close(filler);
	close(l);
	return rc;
}

int main(int argc, char **argv)
{
	static const tw_conn_fixture fx = { &tw__tcp_transport_ops, NULL, "127.0.0.1:0" };
	if (argc == 2 && !strcmp(argv[1], "hello_linger_bound")) {
		alarm(60);
		return hello_linger_bound(&fx);
	}
	return tw_conn_contract_main(&fx, argc, argv);
}
