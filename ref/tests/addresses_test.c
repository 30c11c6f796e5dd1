/*
 * addresses_test.c - addresses a remote peer can use (tensorwire.h:
 * tw_context_set_socket_ifname; spec/wire.md 3.6.d). Two hosts in network
 * namespaces behind a router (netns_pair.sh): the server (a child) in A.
 *
 *   wildcard_v4      a listener on 0.0.0.0 advertises A's address, not
 *                    0.0.0.0, and a client in B gets a working pipe
 *   wildcard_v6      the same on [::] with A's IPv6 address
 *   ifname_exclude   TW_SOCKET_IFNAME=^twa leaves only loopback: that is
 *                    what the listener advertises
 *   ifname_missing   TW_SOCKET_IFNAME naming no interface: the listen fails
 *                    at once with an error naming it
 *   link_local       a listener on A's IPv6 link-local address, a client in
 *                    the router R on the same link (its interface has
 *                    another name and index): the URL carries the scope as
 *                    a name, and the client's pipe works
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <signal.h>
#include <sys/wait.h>

#include "pair_util.h"
#include "proc_util.h"

/* A's IPv6 link-local address on its link to R, e.g. "fe80::1c2:3ff:fe4:5",
 * into buf; false while the interface has none (it may take a moment to
 * appear). */
static bool link_local_of(const char *dev, char *buf, size_t len)
{
	struct ifaddrs *ifs;
	CHECK(getifaddrs(&ifs) == 0);
	buf[0] = '\0';
	for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6 || strcmp(i->ifa_name, dev))
			continue;
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)i->ifa_addr;
		if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
			inet_ntop(AF_INET6, &in6->sin6_addr, buf, (socklen_t)len);
	}
	freeifaddrs(ifs);
	return buf[0] != '\0';
}

/* The server, in A: listens on `listen_url` ("LL" = A's link-local
 * address), sends its URL, serves one pipe (a message each way), exits. */
static void server(int from, const char *listen_url)
{
	tu_watchdog(100);
	tu_enter_netns("TW_NS_A");
	char url[160];
	if (!strcmp(listen_url, "LL")) {
		char ll[INET6_ADDRSTRLEN];
		/* the link-local address may take a moment to appear (up to 5 s) */
		bool have = false;
		for (int i = 0; i < 50 && !(have = link_local_of(tu_env("TW_DEV_A"), ll, sizeof(ll)));
		     i++)
			usleep(100 * 1000);
		CHECK(have);
		snprintf(url, sizeof(url), "uv://[%s%%%s]:0", ll, tu_env("TW_DEV_A"));
	} else {
		snprintf(url, sizeof(url), "%s", listen_url);
	}
	tw_context *ctx;
	tu_ctx(&ctx, "server");
	const char *urls[] = { url };
	tw_listener *l;
	tw_status_t st = tw_context_listen(ctx, urls, 1, &l);
	if (st != TW_OK) {
		snprintf(url, sizeof(url), "ERR %s: %s", tw_status_name(st), tw_last_error());
		tu_put(from, url, sizeof(url));
		tw_context_destroy(ctx);
		_exit(0);
	}
	CHECK_OK(tw_listener_url(l, NULL, url, sizeof(url)));
	tu_put(from, url, sizeof(url));
	tu_rec acc;
	tu_rec_init(&acc);
	CHECK_OK(tw_listener_accept(l, tu_on_accept, &acc));
	tu_expect(&acc, TW_OK, NULL);
	tu_expect_text(acc.pipe, "hello");
	tu_send_text(acc.pipe, "hello back");
	tw_pipe_destroy(acc.pipe);
	tw_listener_destroy(l);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
	tu_once(&acc);
	_exit(0);
}

static pid_t server_start(const char *listen_url, char *url, size_t url_len)
{
	int from[2];
	CHECK(pipe(from) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(from[0]);
		server(from[1], listen_url);
	}
	close(from[1]);
	char buf[160];
	tu_get(from[0], buf, sizeof(buf));
	close(from[0]);
	snprintf(url, url_len, "%s", buf);
	printf("   server in %s: %s\n", tu_env("TW_NS_A"), url);
	return pid;
}

static void server_wait(pid_t pid)
{
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A client in namespace `ns_var` connects to `url` and exchanges a message. */
static void client_round(const char *ns_var, const char *url)
{
	tu_enter_netns(ns_var);
	tw_context *ctx;
	tu_ctx(&ctx, "client");
	tw_pipe *p;
	CHECK_OK(tw_context_connect(ctx, url, &p));
	tu_send_text(p, "hello");
	tu_expect_text(p, "hello back");
	tw_pipe_destroy(p);
	CHECK_OK(tw_context_join(ctx));
	tw_context_destroy(ctx);
}

/* The URL's port, for building the client's own URL. */
static const char *port_of(const char *url)
{
	const char *c = strrchr(url, ':');
	CHECK(c);
	return c + 1;
}

static void wildcard(const char *listen_url, const char *want_host_var, bool v6)
{
	char url[160];
	pid_t pid = server_start(listen_url, url, sizeof(url));
	char want[160];
	snprintf(want, sizeof(want), v6 ? "uv://[%s]:" : "uv://%s:", tu_env(want_host_var));
	CHECK(strncmp(url, want, strlen(want)) == 0);
	/* The client dials A's address; the requested connections go where
	 * the BrochureAnswer says, which must be A again. */
	client_round("TW_NS_B", url);
	server_wait(pid);
}

static void case_wildcard_v4(void)
{
	wildcard("uv://0.0.0.0:0", "TW_ADDR_A", false);
}

static void case_wildcard_v6(void)
{
	wildcard("uv://[::]:0", "TW_ADDR6_A", true);
}

static void case_ifname_exclude(void)
{
	CHECK(setenv("TW_SOCKET_IFNAME", "^twa", 1) == 0);
	char url[160];
	pid_t pid = server_start("uv://0.0.0.0:0", url, sizeof(url));
	CHECK(strncmp(url, "uv://127.0.0.1:", 15) == 0);
	/* only a client on A's own host can use that */
	char mine[160];
	snprintf(mine, sizeof(mine), "uv://127.0.0.1:%s", port_of(url));
	client_round("TW_NS_A", mine);
	server_wait(pid);
}

static void case_ifname_missing(void)
{
	CHECK(setenv("TW_SOCKET_IFNAME", "eht0", 1) == 0);
	char url[160];
	pid_t pid = server_start("uv://0.0.0.0:0", url, sizeof(url));
	CHECK(strncmp(url, "ERR TW_ERR_INVAL", 16) == 0);
	CHECK(strstr(url, "tw_context_listen") && strstr(url, "'eht0'"));
	server_wait(pid);
}

static void case_link_local(void)
{
	char url[160];
	pid_t pid = server_start("LL", url, sizeof(url));
	/* The scope is written by name (stock writes names; a number means
	 * nothing on another host). */
	char want[64];
	snprintf(want, sizeof(want), "%%%s]:", tu_env("TW_DEV_A"));
	CHECK(strstr(url, want));
	/* The client, in R, reaches the same address through its own interface,
	 * whose name and index differ. */
	const char *lb = strchr(url, '['), *pct = strchr(url, '%');
	CHECK(lb && pct && pct > lb);
	char mine[160];
	snprintf(mine, sizeof(mine), "uv://%.*s%%%s]:%s", (int)(pct - lb), lb, tu_env("TW_DEV_RA"),
	         port_of(url));
	printf("   client in %s: %s\n", tu_env("TW_NS_R"), mine);
	client_round("TW_NS_R", mine);
	server_wait(pid);
}

static const tu_case cases[] = {
	{ "wildcard_v4", case_wildcard_v4 },
	{ "wildcard_v6", case_wildcard_v6 },
	{ "ifname_exclude", case_ifname_exclude },
	{ "ifname_missing", case_ifname_missing },
	{ "link_local", case_link_local },
};

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return tu_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]), 100);
}
