/*
 * shm_test.c - the shared-memory transport against the connection
 * contract of transport.h (conn_contract_test.h), through tw_conn_ops
 * directly: both ends in one process, each with its own rings, through
 * one reactor; and one case of its own:
 *   hello_linger_bound  a connection closed with its hello queued while the
 *                       listener never answers the descriptor exchange (a
 *                       raw socket that accepts nothing) gives up within
 *                       TW_HELLO_LINGER_MS: the write's callback says
 *                       TW_ERR_CLOSED once and the loop finishes (no handle,
 *                       descriptor, ring or buffer left; ASan and LSan
 *                       watch)
 */
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "transport/conn_contract_test.h"
#include "transport/shm/shm.h"

static char mute_address[64];

/* An abstract UNIX socket that listens and never accepts: a connect
 * completes (the backlog holds it), the exchange is never answered. */
static int raw_listen_mute(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(mute_address, sizeof(mute_address), "tw-shm-test-mute-%ld", (long)getpid());
	size_t n = strlen(mute_address);
	memcpy(sa.sun_path + 1, mute_address, n);
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, len) || listen(l, 4))
		return -1;
	return l;
}

static int hello_linger_bound(const tw_conn_fixture *fx)
{
	int l = raw_listen_mute();
	if (l < 0) {
		perror("not ok - a mute abstract listener");
		return 1;
	}
	int rc = cc_hello_linger_bound(fx, mute_address, "shm");
	close(l);
	return rc;
}

int main(int argc, char **argv)
{
	static const tw_conn_fixture fx = { &tw__shm_transport_ops, NULL, "" };
	if (argc == 2 && !strcmp(argv[1], "hello_linger_bound")) {
		alarm(60);
		return hello_linger_bound(&fx);
	}
	return tw_conn_contract_main(&fx, argc, argv);
}
