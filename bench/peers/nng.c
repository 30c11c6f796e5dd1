/*
 * nng.c - nng pair0 ping-pong over tcp:// and ipc:// (Debian libnng).
 * Client: nng_send (nng copies the buffer into a new message), then
 *   fresh:  nng_recvmsg - nng allocates the received message (its own
 *           policy: nng always receives into a message it allocates);
 *   reused: nng_recv into the caller's preallocated buffer (nng still
 *           allocates internally, then copies once more into ours).
 * Server: nng_recvmsg, then nng_sendmsg of the same message (no copy).
 * nng's blocking calls are used as nng users write them; each one waits for
 * an aio completed by nng's own threads. RECVMAXSZ = 0 lifts the 1 MiB limit.
 */
#include "twb.h"

#include <nng/nng.h>
#include <nng/protocol/pair0/pair.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void nngb_check(int rv, const char *what)
{
	if (rv != 0)
		twb_die(1, "%s: %s", what, nng_strerror(rv));
}

static atomic_int nngb_peer_gone;

static void nngb_on_pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	atomic_store(&nngb_peer_gone, 1);
}

static nng_socket nngb_open(void)
{
	nng_socket s;
	nngb_check(nng_pair0_open(&s), "nng_pair0_open");
	nngb_check(nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0), "nng_socket_set_size(RECVMAXSZ)");
	return s;
}

static void nngb_server(const twb_args *a, bool is_ipc)
{
	const twb_schedule *s = &a->sched;
	nng_socket sock = nngb_open();
	nng_listener l;
	char url[256];
	twb_cursor c = {0, 0};

	if (is_ipc) {
		const char *tmp = getenv("TMPDIR");
		snprintf(url, sizeof(url), "ipc://%s/twb-nng-%d.ipc", tmp && *tmp ? tmp : "/tmp",
		         (int)getpid());
		nngb_check(nng_listen(sock, url, &l, 0), "nng_listen(ipc)");
	} else {
		int port;
		snprintf(url, sizeof(url), "tcp://%s:0", a->bind_ip);
		nngb_check(nng_listen(sock, url, &l, 0), "nng_listen(tcp)");
		nngb_check(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port),
		           "nng_listener_get_int(TCP_BOUND_PORT)");
		snprintf(url, sizeof(url), "tcp://%s:%d", a->bind_ip, port);
	}
	nngb_check(nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, nngb_on_pipe_removed, NULL),
	           "nng_pipe_notify");
	twb_ready(url);
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		nng_msg *m;
		nngb_check(nng_recvmsg(sock, &m, 0), "server nng_recvmsg");
		if (nng_msg_len(m) != s->sizes[c.idx])
			twb_die(1, "server: got %zu bytes, expected %llu", nng_msg_len(m),
			        (unsigned long long)s->sizes[c.idx]);
		twb_fault_apply(nng_msg_body(m), nng_msg_len(m));
		nngb_check(nng_sendmsg(sock, m, 0), "server nng_sendmsg");
	}
	/* nng_sendmsg only queues: closing now could drop the last reply, so wait
	 * until the client, which has it, hangs up */
	while (!atomic_load(&nngb_peer_gone))
		usleep(1000);
	nng_close(sock);
}

static void nngb_client(const twb_args *a)
{
	const twb_schedule *s = &a->sched;
	uint64_t max = twb_schedule_max(s);
	nng_socket sock = nngb_open();
	unsigned char *sbuf = twb_alloc_prefaulted(max);
	unsigned char *rbuf = a->policy == TWB_POLICY_REUSED ? twb_alloc_prefaulted(max) : NULL;
	twb_results res;
	twb_cursor c = {0, 0};

	nngb_check(nng_dial(sock, a->addr, NULL, 0), "nng_dial");
	twb_results_init(&res, s);
	for (; twb_cursor_valid(&c, s); twb_cursor_next(&c, s)) {
		uint64_t len = s->sizes[c.idx], t0, t1;
		twb_fill(sbuf, len, twb_seed(c.idx, c.iter));
		t0 = twb_now_ns();
		nngb_check(nng_send(sock, sbuf, len, 0), "client nng_send");
		if (rbuf) {
			size_t got = max;
			nngb_check(nng_recv(sock, rbuf, &got, 0), "client nng_recv");
			t1 = twb_now_ns();
			twb_record(&res, &c, t0, t1, rbuf, got);
		} else {
			nng_msg *m;
			nngb_check(nng_recvmsg(sock, &m, 0), "client nng_recvmsg");
			t1 = twb_now_ns();
			twb_record(&res, &c, t0, t1, nng_msg_body(m), nng_msg_len(m));
			nng_msg_free(m);
		}
	}
	twb_results_write(&res, a, rbuf
	                  ? "pair0; nng_send, nng_recv into the preallocated buffer (blocking)"
	                  : "pair0; nng_send, nng_recvmsg (nng allocates the message; blocking)");
	twb_results_free(&res);
	nng_close(sock);
	free(sbuf);
	free(rbuf);
}

int main(int argc, char **argv)
{
	twb_args a;
	bool is_ipc;
	twb_args_parse(argc, argv, &a);
	if (strcmp(a.system, "tcp") && strcmp(a.system, "ipc"))
		twb_die(2, "unknown --system '%s' (tcp, ipc)", a.system);
	is_ipc = a.system[0] == 'i';
	if (a.role == TWB_ROLE_SERVER)
		nngb_server(&a, is_ipc);
	else
		nngb_client(&a);
	nng_fini();
	return 0;
}
