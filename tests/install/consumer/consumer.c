/*
 * consumer.c - a program outside this project that uses an installed
 * libtensorwire: one context listens on loopback, a second connects, and a
 * message with a payload and a CPU tensor goes across and is checked byte
 * for byte. Prints "consumer: ok <version>" and exits 0, or says what failed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensorwire/tensorwire.h>

typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
	tw_status_t st;
	tw_pipe *pipe;
	const tw_message *desc;
} waiter;

static waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, TW_OK, NULL, NULL };

static void signal_done(tw_status_t st)
{
	pthread_mutex_lock(&w.mu);
	if (st != TW_OK)
		w.st = st;
	w.done++;
	pthread_cond_signal(&w.cv);
	pthread_mutex_unlock(&w.mu);
}

static void wait_for(int n)
{
	pthread_mutex_lock(&w.mu);
	while (w.done < n)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
}

static void on_accept(tw_listener *l, tw_status_t st, const char *d, tw_pipe *p, void *a)
{
	w.pipe = p;
	signal_done(st);
}

static void on_status(tw_pipe *p, tw_status_t st, const char *d, void *a)
{
	if (st != TW_OK)
		fprintf(stderr, "consumer: %s: %s\n", (const char *)a, d);
	signal_done(st);
}

static void on_desc(tw_pipe *p, tw_status_t st, const char *d, const tw_message *m, void *a)
{
	w.desc = m;
	on_status(p, st, d, a);
}

static int fail(const char *what, tw_status_t st)
{
	fprintf(stderr, "consumer: %s: %s (%s)\n", what, tw_status_name(st), tw_last_error());
	return 1;
}

int main(void)
{
	tw_context *srv, *cli;
	tw_listener *l;
	tw_pipe *cp;
	tw_status_t st;
	char url[128];
	const char *urls[] = { "uv://127.0.0.1:0" };
	if ((st = tw_context_create("server", &srv)) || (st = tw_context_create("client", &cli)))
		return fail("tw_context_create", st);
	tw_context *both[] = { srv, cli };
	for (int i = 0; i < 2; i++)
		if ((st = tw_context_register_transport(both[i], "uv", NULL, 0, NULL)) ||
		    (st = tw_context_register_channel(both[i], "basic", NULL, 0, NULL)))
			return fail("register", st);
	if ((st = tw_context_listen(srv, urls, 1, &l)) || (st = tw_listener_url(l, NULL, url, sizeof(url))))
		return fail("listen", st);
	if ((st = tw_listener_accept(l, on_accept, NULL)) || (st = tw_context_connect(cli, url, &cp)))
		return fail("connect", st);
	static char payload[100], tensor[4096], got_p[100], got_t[4096];
	for (size_t i = 0; i < sizeof(tensor); i++)
		tensor[i] = (char)(i * 7 + 3), payload[i % sizeof(payload)] = (char)(i + 1);
	tw_payload pl = { .data = payload, .length = sizeof(payload) };
	tw_tensor tn = { .data = tensor, .length = sizeof(tensor), .source_device = tw_device_cpu(),
		         .has_target_device = true, .target_device = tw_device_cpu() };
	tw_message m = { .metadata = "hi", .metadata_length = 2, .num_payloads = 1, .payloads = &pl,
		         .num_tensors = 1, .tensors = &tn };
	if ((st = tw_pipe_write(cp, &m, on_status, "write")))
		return fail("tw_pipe_write", st);
	wait_for(2); /* accept, write */
	if (w.st != TW_OK)
		return 1;
	if ((st = tw_pipe_read_descriptor(w.pipe, on_desc, "read_descriptor")))
		return fail("tw_pipe_read_descriptor", st);
	wait_for(3);
	if (w.st != TW_OK || w.desc->num_payloads != 1 || w.desc->num_tensors != 1 ||
	    w.desc->metadata_length != 2 || memcmp(w.desc->metadata, "hi", 2) != 0) {
		fprintf(stderr, "consumer: the descriptor does not describe the message sent\n");
		return 1;
	}
	void *pp[] = { got_p };
	tw_tensor_allocation ta = { .data = got_t, .device = tw_device_cpu() };
	tw_allocation al = { 1, pp, 1, &ta };
	if ((st = tw_pipe_read(w.pipe, &al, on_status, "read")))
		return fail("tw_pipe_read", st);
	wait_for(4);
	if (w.st != TW_OK || memcmp(got_p, payload, sizeof(payload)) != 0 ||
	    memcmp(got_t, tensor, sizeof(tensor)) != 0) {
		fprintf(stderr, "consumer: the bytes read differ from those written\n");
		return 1;
	}
	tw_pipe_destroy(cp);
	tw_pipe_destroy(w.pipe);
	tw_listener_destroy(l);
	tw_context_destroy(cli);
	tw_context_destroy(srv);
	printf("consumer: ok %s\n", TW_VERSION_STRING);
	return 0;
}
