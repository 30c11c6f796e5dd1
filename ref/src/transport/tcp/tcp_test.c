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

static char full_address[64];
static cc_rec bound_w;

static void do_connect_hello_close(void *arg)
{
	(void)arg;
	tw_conn *c = cc_connect_to(full_address);
	cc_write_hello(c, "hello", 5, &bound_w);
	c->ops->close(c);
}

static int hello_linger_bound(const tw_conn_fixture *fx)
{
	int filler = -1;
	int l = raw_listen_full(full_address, sizeof(full_address), &filler);
	if (l < 0) {
		perror("not ok - a listener with a full accept queue");
		return 1;
	}
	cc_setup(fx);
	cc_on_loop(do_connect_hello_close, NULL);
	CC_CHECK(cc_wait(&bound_w) && bound_w.status == TW_ERR_CLOSED);
	cc_teardown(); /* returns once the lingering connection gave up */
	CC_CHECK(cc_calls(&bound_w) == 1);
	close(filler);
	close(l);
	printf("%s - uv hello_linger_bound\n", CC.failures ? "not ok" : "ok");
	return CC.failures ? 1 : 0;
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
