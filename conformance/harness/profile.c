/*
 * profile.c - loading an IUT's known exceptions (see profile.h).
 */
#define _GNU_SOURCE
#include "profile.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct twc_profile {
	size_t n;
	char **glob;
	char **role; /* "client", "server" or NULL (any) */
	char **reason;
	char sources[2048]; /* the files read, ", "-separated */
};

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* Adds the exceptions of one file; -1 with err naming file and line. */
static int profile_read(twc_profile *p, const char *path, char *err, unsigned long errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "profile %s: %s", path, strerror(errno));
		return -1;
	}
	char *line = NULL;
	size_t cap = 0;
	int lineno = 0;
	while (getline(&line, &cap, f) > 0) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = trim(line);
		if (!*s)
			continue;
		char *glob = s;
		char *sp = glob + strcspn(glob, " \t");
		if (!*sp)
			goto bad;
		*sp++ = '\0';
		char *rest = trim(sp);
		const char *role = NULL;
		if (!strncmp(rest, "role=client", 11) || !strncmp(rest, "role=server", 11)) {
			if (!isspace((unsigned char)rest[11]))
				goto bad;
			role = rest[5] == 'c' ? "client" : "server";
			rest = trim(rest + 11);
		}
		if (strncmp(rest, "XFAIL", 5) != 0 || !isspace((unsigned char)rest[5]))
			goto bad;
		char *reason = trim(rest + 5);
		if (!*reason || !strstr(reason, "--"))
			goto bad;
		char **ng = realloc(p->glob, (p->n + 1) * sizeof(char *));
		if (ng)
			p->glob = ng;
		char **nr = realloc(p->reason, (p->n + 1) * sizeof(char *));
		if (nr)
			p->reason = nr;
		char **nro = realloc(p->role, (p->n + 1) * sizeof(char *));
		if (nro)
			p->role = nro;
		if (!ng || !nr || !nro)
			goto bad;
		p->role[p->n] = role ? strdup(role) : NULL;
		p->glob[p->n] = strdup(glob);
		p->reason[p->n] = strdup(reason);
		p->n++;
		continue;
bad:
		snprintf(err, errlen,
		         "profile %s:%d: expected '<case glob> [role=client|role=server] XFAIL <reason> "
		         "-- <link>'",
		         path, lineno);
		free(line);
		fclose(f);
		return -1;
	}
	free(line);
	if (ferror(f)) { /* a directory, an unreadable file: not an empty profile */
		snprintf(err, errlen, "profile %s: %s", path, strerror(errno ? errno : EIO));
		fclose(f);
		return -1;
	}
	fclose(f);
	size_t l = strlen(p->sources);
	snprintf(p->sources + l, sizeof(p->sources) - l, "%s%s", l ? ", " : "", path);
	return 0;
}

twc_profile *twc_profile_load(const char *const *dirs, int ndirs, const char *impl, char *err,
                            unsigned long errlen)
{
	twc_profile *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "profile: out of memory");
		return NULL;
	}
	for (int i = 0; i < ndirs; i++) {
		char path[4096];
		struct stat st;
		if (stat(dirs[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
			snprintf(err, errlen, "profile directory %s: %s", dirs[i],
			         stat(dirs[i], &st) != 0 ? strerror(errno) : "not a directory");
			twc_profile_free(p);
			return NULL;
		}
		snprintf(path, sizeof(path), "%s/%s.profile", dirs[i], impl);
		if (access(path, F_OK) != 0)
			continue; /* this directory has nothing for impl */
		if (profile_read(p, path, err, errlen)) {
			twc_profile_free(p);
			return NULL;
		}
	}
	return p;
}

const char *twc_profile_sources(const twc_profile *p)
{
	return p && p->sources[0] ? p->sources : "none";
}

const char *twc_profile_find(const twc_profile *p, const char *id, const char *role)
{
	for (size_t i = 0; p && i < p->n; i++) {
		if (p->role[i] && (!role || (strcmp(role, "both") && strcmp(role, p->role[i]))))
			continue;
		if (fnmatch(p->glob[i], id, 0) == 0)
			return p->reason[i];
	}
	return NULL;
}

void twc_profile_free(twc_profile *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		free(p->glob[i]);
		free(p->role[i]);
		free(p->reason[i]);
	}
	free(p->glob);
	free(p->role);
	free(p->reason);
	free(p);
}
