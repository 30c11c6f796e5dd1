/*
 * launch.c - where a session's adapters run (see launch.h).
 */
#define _GNU_SOURCE
#include "launch.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env_name(const char *what, const char *role, char *buf, size_t len)
{
	snprintf(buf, len, "TWC_%s_%s", what, !strcmp(role, "server") ? "SERVER" : "CLIENT");
	return buf;
}

static const char *setting(const char *what, const char *role)
{
	char name[64];
	return getenv(env_name(what, role, name, sizeof(name)));
}

int twc_launch_option(const char *opt, const char *arg, char *err, size_t errlen)
{
	const char *eq = strchr(arg, '=');
	size_t rl = eq ? (size_t)(eq - arg) : 0;
	if (!eq || !((rl == 6 && !strncmp(arg, "server", 6)) || (rl == 6 && !strncmp(arg, "client", 6)))) {
		snprintf(err, errlen, "%s %s: expected server=VALUE or client=VALUE", opt, arg);
		return -1;
	}
	const char *role = rl == 6 && !strncmp(arg, "server", 6) ? "server" : "client";
	const char *val = eq + 1;
	const char *what;
	if (!strcmp(opt, "--launch")) {
		what = "LAUNCH";
		if (!strstr(val, "{cmd}")) {
			snprintf(err, errlen, "--launch %s: the template must contain {cmd}", arg);
			return -1;
		}
	} else if (!strcmp(opt, "--host")) {
		what = "HOST";
	} else {
		what = "ADDRESS";
		unsigned char a[16];
		if (inet_pton(AF_INET, val, a) != 1) {
			snprintf(err, errlen, "--address %s: '%s' is not an IPv4 address", arg, val);
			return -1;
		}
	}
	char name[64];
	setenv(env_name(what, role, name, sizeof(name)), val, 1);
	return 0;
}

/* "exec CMD" as one single-quoted shell word. */
static char *quoted_exec(const char *cmd)
{
	size_t n = strlen(cmd);
	char *q = malloc(4 * n + 16), *o = q;
	if (!q)
		return NULL;
	o += sprintf(o, "'exec ");
	for (const char *c = cmd; *c; c++) {
		if (*c == '\'') {
			memcpy(o, "'\\''", 4);
			o += 4;
		} else {
			*o++ = *c;
		}
	}
	*o++ = '\'';
	*o = '\0';
	return q;
}

char *twc_launch_command(const char *role, const char *cmd)
{
	const char *tpl = setting("LAUNCH", role);
	if (!tpl)
		return strdup(cmd);
	const char *host = setting("HOST", role);
	char *word = quoted_exec(cmd);
	if (!word)
		return NULL;
	const char *subs[3][2] = { { "{cmd}", word }, { "{host}", host ? host : "" }, { "{role}", role } };
	size_t cap = strlen(tpl) + 1;
	for (const char *p = tpl; *p; p++)
		for (int k = 0; k < 3; k++)
			if (!strncmp(p, subs[k][0], strlen(subs[k][0])))
				cap += strlen(subs[k][1]);
	char *out = malloc(cap), *o = out;
	if (!out) {
		free(word);
		return NULL;
	}
	for (const char *p = tpl; *p;) {
		int k;
		for (k = 0; k < 3; k++)
			if (!strncmp(p, subs[k][0], strlen(subs[k][0])))
				break;
		if (k < 3) {
			o = stpcpy(o, subs[k][1]);
			p += strlen(subs[k][0]);
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
	free(word);
	return out;
}

const char *twc_launch_address(const char *role)
{
	const char *a = setting("ADDRESS", role);
	return a && *a ? a : "127.0.0.1";
}

const char *twc_launch_summary(void)
{
	static char buf[1024];
	buf[0] = '\0';
	const char *roles[2] = { "server", "client" };
	for (int i = 0; i < 2; i++) {
		const char *t = setting("LAUNCH", roles[i]), *h = setting("HOST", roles[i]);
		const char *a = setting("ADDRESS", roles[i]);
		if (!t && !a)
			continue;
		size_t off = strlen(buf);
		snprintf(buf + off, sizeof(buf) - off, "%s%s: %s%s%s%s", off ? "; " : "", roles[i],
		         t ? t : "here", h ? " (host " : "", h ? h : "", h ? ")" : "");
		if (a) {
			off = strlen(buf);
			snprintf(buf + off, sizeof(buf) - off, ", listening on %s", a);
		}
	}
	return buf;
}
