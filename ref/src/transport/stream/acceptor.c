/*
 * acceptor.c - accepting stream connections on the loop (see acceptor.h).
 */
#define _GNU_SOURCE /* accept4 */
#include "transport/stream/acceptor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "platform/error.h"
#include "platform/mutant.h"
#include "platform/platform.h"

#define TW_ACCEPTOR_LABEL_MAX 128

struct tw_acceptor {
	int fd;
	uv_poll_t poll;
	uv_timer_t backoff;
	int open_handles;
	bool closed;
	int spare_fd;      /* given up to refuse a connection when out of descriptors */
	bool short_of_fds; /* the last accept met EMFILE/ENFILE: refuse the next */
	const char *who;
	char label[TW_ACCEPTOR_LABEL_MAX];
	tw_acceptor_format_fn format;
	tw_acceptor_cb cb;
	void *arg;
};

static void tw__acceptor_on_handle_closed(uv_handle_t *h)
{
	tw_acceptor *a = h->data;
	if (--a->open_handles == 0) {
		tw__sys_close(a->fd);
		if (a->spare_fd >= 0)
			close(a->spare_fd);
		tw__free(a);
	}
}

static int tw__acceptor_open_spare(void)
{
	return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Out of descriptors with a connection waiting (see acceptor.h): gives up
 * the spare descriptor to accept it and resets it at once. True if a
 * connection was refused this way (the caller reports it and goes on).
 * Plain system calls, not the tw__sys_ wrappers: a fault point injecting
 * EMFILE here would fail the very accept that answers EMFILE. */
static bool tw__acceptor_refuse_one(tw_acceptor *a, char *peer, size_t peer_len)
{
	if (a->spare_fd < 0)
		return false;
	close(a->spare_fd);
	a->spare_fd = -1;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = accept4(a->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	bool refused = fd >= 0;
	if (refused) {
		a->format((struct sockaddr *)&ss, peer, peer_len);
		struct linger lg = { 1, 0 }; /* close with a reset: the client hears at once */
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(fd);
	}
	a->spare_fd = tw__acceptor_open_spare();
	return refused;
}

static void tw__acceptor_on_readable(uv_poll_t *h, int status, int events);

static void tw__acceptor_resume(uv_timer_t *timer)
{
	tw_acceptor *a = timer->data;
	if (!a->closed)
		uv_poll_start(&a->poll, UV_READABLE, tw__acceptor_on_readable);
}

static void tw__acceptor_on_readable(uv_poll_t *h, int status, int events)
{
	tw_acceptor *a = h->data;
	char detail[TW_DETAIL_MAX];
	(void)events;
	if (status < 0) {
		/* The handle is stopped; try again a little later. */
		tw__detail(detail, sizeof(detail), "%s: poll on listener %s: %s", a->who, a->label,
		           uv_strerror(status));
		uv_timer_start(&a->backoff, tw__acceptor_resume, TW_ACCEPT_BACKOFF_MS, 0);
		a->cb(a, TW_ERR_SYS, detail, -1, NULL, a->arg);
		return;
	}
	while (!a->closed) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = tw__sys_accept(a->fd, (struct sockaddr *)&ss, &sl);
		if (fd >= 0) {
			a->short_of_fds = false;
			a->cb(a, TW_OK, "", fd, (struct sockaddr *)&ss, a->arg);
			continue;
		}
		int err = errno;
		if (err == EAGAIN || err == EWOULDBLOCK) {
			a->short_of_fds = false;
			return;
		}
		if (err == EINTR || err == ECONNABORTED)
			continue;
		char eb[128];
		char peer[TW_ACCEPTOR_LABEL_MAX];
		tw__strerror(err, eb, sizeof(eb));
		bool no_fd = err == EMFILE || err == ENFILE;
		if (no_fd && a->short_of_fds && tw__acceptor_refuse_one(a, peer, sizeof(peer))) {
			tw__detail(detail, sizeof(detail),
			           "%s: accept on %s: %s: the connection from %s was reset (no "
			           "descriptor for it)",
			           a->who, a->label, eb, peer);
			a->cb(a, TW_ERR_SYS, detail, -1, NULL, a->arg);
			continue;
		}
		tw__detail(detail, sizeof(detail), "%s: accept on %s: %s", a->who, a->label, eb);
		/* Out of descriptors or memory: back off instead of spinning. */
		a->short_of_fds = no_fd;
		uv_poll_stop(&a->poll);
		uv_timer_start(&a->backoff, tw__acceptor_resume, TW_ACCEPT_BACKOFF_MS, 0);
		a->cb(a, TW_ERR_SYS, detail, -1, NULL, a->arg);
		return;
	}
}

void tw__acceptor_set_label(tw_acceptor *a, const char *label)
{
	snprintf(a->label, sizeof(a->label), "%s", label);
}

void tw__acceptor_close(tw_acceptor *a)
{
	if (a->closed)
		return;
	a->closed = true;
	uv_poll_stop(&a->poll);
	uv_timer_stop(&a->backoff);
	uv_close((uv_handle_t *)&a->poll, tw__acceptor_on_handle_closed);
	uv_close((uv_handle_t *)&a->backoff, tw__acceptor_on_handle_closed);
}

tw_status_t tw__acceptor_open(tw_loop *loop, const char *who, const char *label,
                              const struct sockaddr *addr, socklen_t addr_len, bool reuse_addr,
                              tw_acceptor_format_fn format, tw_acceptor_cb cb, void *arg,
                              tw_acceptor **out, struct sockaddr_storage *bound_out, char *detail,
                              size_t detail_len)
{
	char eb[128];
	int fd = tw__sys_socket(addr->sa_family, SOCK_STREAM, 0);
	if (fd < 0) {
		tw__detail(detail, detail_len, "%s: socket for %s: %s", who, label,
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	if (reuse_addr) {
		int one = 1;
		(void)tw__sys_setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	}
	if (tw__sys_bind(fd, addr, addr_len) != 0) {
		tw__detail(detail, detail_len, "%s: bind %s: %s", who, label,
		           tw__strerror(errno, eb, sizeof(eb)));
		goto err_fd;
	}
	if (tw__sys_listen(fd, TW_MUTANT("listen_backlog_small") ? 8 : TW_ACCEPT_BACKLOG) != 0) {
		tw__detail(detail, detail_len, "%s: listen on %s: %s", who, label,
		           tw__strerror(errno, eb, sizeof(eb)));
		goto err_fd;
	}
	socklen_t sl = sizeof(*bound_out);
	memset(bound_out, 0, sizeof(*bound_out)); /* an abstract name ends at its first NUL */
	if (tw__sys_getsockname(fd, (struct sockaddr *)bound_out, &sl) != 0) {
		tw__detail(detail, detail_len, "%s: getsockname for %s: %s", who, label,
		           tw__strerror(errno, eb, sizeof(eb)));
		goto err_fd;
	}
	tw_acceptor *a = tw__calloc(1, sizeof(*a));
	if (!a) {
		tw__detail(detail, detail_len, "%s: listener on %s: out of memory", who, label);
		tw__sys_close(fd);
		return TW_ERR_NOMEM;
	}
	a->fd = fd;
	a->who = who;
	a->format = format;
	a->cb = cb;
	a->arg = arg;
	tw__acceptor_set_label(a, label);
	a->spare_fd = tw__acceptor_open_spare();
	int rc = uv_poll_init_socket(&loop->uv, &a->poll, fd);
	if (rc != 0) {
		tw__detail(detail, detail_len, "%s: uv_poll_init_socket for %s: %s", who, label,
		           uv_strerror(rc));
		if (a->spare_fd >= 0)
			close(a->spare_fd);
		tw__free(a);
		goto err_fd;
	}
	a->poll.data = a;
	uv_timer_init(&loop->uv, &a->backoff);
	a->backoff.data = a;
	a->open_handles = 2;
	rc = uv_poll_start(&a->poll, UV_READABLE, tw__acceptor_on_readable);
	if (rc != 0) {
		tw__detail(detail, detail_len, "%s: uv_poll_start for %s: %s", who, label,
		           uv_strerror(rc));
		tw__acceptor_close(a); /* closes fd and frees a */
		return TW_ERR_SYS;
	}
	*out = a;
	return TW_OK;
err_fd:
	tw__sys_close(fd);
	return TW_ERR_SYS;
}
