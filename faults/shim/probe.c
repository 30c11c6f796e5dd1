/*
 * probe.c - a small program that knows nothing of the shim but finds it at
 * run time (dlsym of twfault_get_counters): it moves 4 MiB over a loopback
 * TCP connection with a correct retry loop, then checks that every byte
 * arrived, that the shim saw the traffic, and that a pipe next to it was
 * left alone. probe_check.sh runs it under twfault-run, once built like the
 * rest of the tree (sanitizer runtime first in LD_PRELOAD) and once plain.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "twfault.h"

#define TOTAL (4u << 20)

static int fail(const char *what)
{
	printf("FAIL: %s (errno %d %s)\n", what, errno, strerror(errno));
	return 1;
}

int main(void)
{
	void (*get)(twfault_counters *) =
	        (void (*)(twfault_counters *))dlsym(RTLD_DEFAULT, "twfault_get_counters");
	if (!get)
		return fail("libtwfault is not loaded (run me under twfault-run)");
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4) ||
	    getsockname(l, (struct sockaddr *)&a, &al))
		return fail("listen on loopback");
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)))
		return fail("connect");
	int s;
	do
		s = accept(l, NULL, NULL);
	while (s < 0 && (errno == EINTR || errno == EAGAIN));
	if (s < 0)
		return fail("accept");
	(void)fcntl(c, F_SETFL, O_NONBLOCK);
	(void)fcntl(s, F_SETFL, O_NONBLOCK);
	uint8_t *src = malloc(TOTAL), *dst = malloc(TOTAL);
	if (!src || !dst)
		return fail("malloc");
	for (size_t i = 0; i < TOTAL; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 13);
	size_t sent = 0, got = 0;
	while (got < TOTAL) {
		if (sent < TOTAL) {
			ssize_t w = write(c, src + sent, TOTAL - sent);
			if (w > 0)
				sent += (size_t)w;
			else if (w < 0 && errno != EINTR && errno != EAGAIN)
				return fail("write");
		}
		ssize_t r = read(s, dst + got, TOTAL - got);
		if (r > 0) {
			got += (size_t)r;
		} else if (r == 0) {
			return fail("unexpected end of file");
		} else if (errno == EAGAIN) {
			struct pollfd p[2] = {{s, POLLIN, 0}, {c, sent < TOTAL ? POLLOUT : 0, 0}};
			(void)poll(p, 2, 1000);
		} else if (errno != EINTR) {
			return fail("read");
		}
	}
	if (memcmp(src, dst, TOTAL) != 0)
		return fail("bytes differ");
	int p[2];
	if (pipe(p) || write(p[1], "pipe", 4) != 4)
		return fail("pipe write");
	char buf[8];
	if (read(p[0], buf, sizeof(buf)) != 4)
		return fail("pipe read");
	twfault_counters n;
	get(&n);
	if (n.bytes_in != TOTAL || n.bytes_out != TOTAL || n.connections != 2)
		return fail("the shim's byte or connection counts are wrong");
	printf("ok - probe: 4 MiB intact over loopback; shim saw %llu calls (%llu short, %llu "
	       "EINTR, %llu EAGAIN)\n",
	       (unsigned long long)n.calls, (unsigned long long)n.shorts,
	       (unsigned long long)n.eintrs, (unsigned long long)n.eagains);
	free(src);
	free(dst);
	close(p[0]);
	close(p[1]);
	close(c);
	close(s);
	close(l);
	return 0;
}
