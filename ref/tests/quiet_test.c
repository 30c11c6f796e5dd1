/*
 * quiet_test.c - what a steady stream of small messages costs the TCP
 * transport in system calls beyond the reads and writes themselves.
 *
 * Case watch_no_peek: the server echoes nothing, it only takes 200 messages
 * of one 1.25 KB tensor with a named target device, arming each read inside
 * the descriptor's callback (as an RPC layer does). Each tensor's bytes come
 * on the channel's connection right behind the Descriptor, before the read
 * for them is queued. The transport's end watch must not peek at those bytes
 * (a recvfrom each, plus two changes of the polled events, each a pair of
 * epoll_ctl calls in libuv) when the read that takes them is queued in the
 * loop's next pass (tcp.c, the end watch). Counted with the fault point
 * sys/peek/fail (the library built with TW_FAULT_INJECTION): the test runs
 * with TW_FAULTS=sys/peek/fail:20, so the 20th peek would fire. Before the
 * watch's grace pass the server peeked once per message.
 */
#include "pair_util.h"
#include "platform/fault.h"

#define QT_MESSAGES 200
#define QT_LEN 1250

typedef struct qt_server {
	tw_pipe *pipe;
	uint8_t buf[QT_LEN];
	tu_waiter w;
	int taken;
	tw_status_t failed;
	char detail[256];
} qt_server;

static void qt_arm(qt_server *s);

static void qt_fail(qt_server *s, tw_status_t st, const char *detail)
{
	pthread_mutex_lock(&s->w.mu);
	s->failed = st;
	snprintf(s->detail, sizeof(s->detail), "%s", detail ? detail : "(null)");
	pthread_mutex_unlock(&s->w.mu);
	tu_signal(&s->w);
}

static void qt_on_read(tw_pipe *p, tw_status_t st, const char *detail, void *arg)
{
	qt_server *s = arg;
	if (st != TW_OK) {
		qt_fail(s, st, detail);
		return;
	}
	pthread_mutex_lock(&s->w.mu);
	s->taken++;
	pthread_mutex_unlock(&s->w.mu);
	tu_signal(&s->w);
	qt_arm(s);
}

static void qt_on_desc(tw_pipe *p, tw_status_t st, const char *detail, const tw_message *d,
                       void *arg)
{
	qt_server *s = arg;
	if (st != TW_OK) {
		qt_fail(s, st, detail);
		return;
	}
	CHECK(d->num_tensors == 1 && d->tensors[0].length == QT_LEN);
	tw_tensor_allocation ta = { s->buf, tw_device_cpu(), NULL };
	tw_allocation a = { 0, NULL, 1, &ta };
	tw_status_t rs = tw_pipe_read(p, &a, qt_on_read, s);
	if (rs != TW_OK)
		qt_fail(s, rs, tw_last_error());
}

static void qt_arm(qt_server *s)
{
	pthread_mutex_lock(&s->w.mu);
	bool more = s->taken < QT_MESSAGES;
	pthread_mutex_unlock(&s->w.mu);
	if (!more)
		return;
	tw_status_t st = tw_pipe_read_descriptor(s->pipe, qt_on_desc, s);
	if (st != TW_OK)
		qt_fail(s, st, tw_last_error());
}

static void case_watch_no_peek(void)
{
	tu_pair p = { 0 };
	tu_pair_open(&p, "uv://127.0.0.1:0");
	qt_server s = { .pipe = p.s };
	tu_waiter_init(&s.w);
	qt_arm(&s);
	uint8_t data[QT_LEN];
	tu_fill_at(data, sizeof(data), 7);
	tw_tensor t = { data, sizeof(data), tw_device_cpu(), true, tw_device_cpu(), NULL, 0, NULL };
	tw_message m = { NULL, 0, 0, NULL, 1, &t };
	for (int i = 1; i <= QT_MESSAGES; i++) {
		tu_rec w;
		tu_rec_init(&w);
		CHECK_OK(tw_pipe_write(p.c, &m, tu_on_status, &w));
		tu_expect(&w, TW_OK, NULL);
		pthread_mutex_lock(&s.w.mu);
		while (s.taken < i && s.failed == TW_OK)
			pthread_cond_wait(&s.w.cv, &s.w.mu);
		pthread_mutex_unlock(&s.w.mu);
		if (s.failed != TW_OK) {
			fprintf(stderr, "message %d: %s: %s\n", i, tw_status_name(s.failed), s.detail);
			if (tw__fault_fired())
				fprintf(stderr, "(the 20th peek of the end watch failed as a reset: it "
				                "peeked 20 times in %d messages)\n", i);
			CHECK(s.failed == TW_OK);
		}
		CHECK(memcmp(s.buf, data, sizeof(data)) == 0);
	}
	/* before anything closes (closing may peek, legitimately) */
	unsigned long fired = tw__fault_fired();
	if (fired)
		fprintf(stderr, "the end watch peeked 20 times or more in %d messages\n",
		        QT_MESSAGES);
	CHECK(fired == 0);
	tu_pair_close(&p);
}

static const tu_case cases[] = {
	{ "watch_no_peek", case_watch_no_peek },
};

int main(int argc, char **argv)
{
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 120);
}
