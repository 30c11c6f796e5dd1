/*
 * identity.c - the descriptors of same-host mechanisms (see identity.h).
 */
#define _GNU_SOURCE /* getresuid */
#include "platform/identity.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "platform/error.h"
#include "platform/platform.h"

tw_status_t tw__identity_ns(const char *ns, char *out, size_t out_len, char *detail,
                            size_t detail_len)
{
	uint64_t dev, ino;
	if (tw__sys_ns_id(ns, &dev, &ino) != 0) {
		char eb[128];
		tw__detail(detail, detail_len, "stat /proc/self/ns/%s: %s", ns,
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	snprintf(out, out_len, "%" PRIx64 "_%" PRIx64, dev, ino);
	return TW_OK;
}

tw_status_t tw__identity_boot(char *out, size_t out_len, char *detail, size_t detail_len)
{
	if (tw__sys_boot_id(out, out_len) != 0) {
		char eb[128];
		tw__detail(detail, detail_len, "read /proc/sys/kernel/random/boot_id: %s",
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	return TW_OK;
}

/* The boot id and one namespace's identity, which every descriptor starts
 * with. */
static tw_status_t tw__identity_boot_ns(const char *ns, char *boot, size_t boot_len, char *nsid,
                                        size_t nsid_len, char *detail, size_t detail_len)
{
	tw_status_t st = tw__identity_boot(boot, boot_len, detail, detail_len);
	return st == TW_OK ? tw__identity_ns(ns, nsid, nsid_len, detail, detail_len) : st;
}

tw_status_t tw__identity_shm(char *out, size_t out_len, char *detail, size_t detail_len)
{
	char boot[TW_BOOT_ID_LEN + 1], net[64];
	tw_status_t st =
		tw__identity_boot_ns("net", boot, sizeof(boot), net, sizeof(net), detail, detail_len);
	if (st == TW_OK)
		snprintf(out, out_len, "shm:%s_%s", boot, net);
	return st;
}

tw_status_t tw__identity_xth(char *out, size_t out_len, char *detail, size_t detail_len)
{
	char boot[TW_BOOT_ID_LEN + 1], pidns[64];
	tw_status_t st =
		tw__identity_boot_ns("pid", boot, sizeof(boot), pidns, sizeof(pidns), detail, detail_len);
	if (st == TW_OK)
		snprintf(out, out_len, "%s_%s_%d", boot, pidns, (int)getpid());
	return st;
}

/* How many times "capability" appears in the LSM list (stock appends the
 * capability mask once per entry); the list is assumed "capability,yama"
 * where securityfs cannot be read, as stock does. */
static int tw__identity_capability_entries(void)
{
	char lsm[512];
	if (tw__sys_read_file("/sys/kernel/security/lsm", lsm, sizeof(lsm)) < 0)
		return 1;
	int n = 0;
	for (char *save, *t = strtok_r(lsm, ",\n", &save); t; t = strtok_r(NULL, ",\n", &save))
		n += strcmp(t, "capability") == 0;
	return n;
}

tw_status_t tw__identity_cma(char *out, size_t out_len, char *detail, size_t detail_len)
{
	char boot[TW_BOOT_ID_LEN + 1], pidns[64], userns[64];
	tw_status_t st =
		tw__identity_boot_ns("pid", boot, sizeof(boot), pidns, sizeof(pidns), detail, detail_len);
	if (st == TW_OK)
		st = tw__identity_ns("user", userns, sizeof(userns), detail, detail_len);
	if (st != TW_OK)
		return st;
	uid_t ru, eu, su;
	gid_t rg, eg, sg;
	if (getresuid(&ru, &eu, &su) != 0 || getresgid(&rg, &eg, &sg) != 0) {
		char eb[128];
		tw__detail(detail, detail_len, "getresuid/getresgid: %s",
		           tw__strerror(errno, eb, sizeof(eb)));
		return TW_ERR_SYS;
	}
	if (ru != eu || ru != su || rg != eg || rg != sg) {
		tw__detail(detail, detail_len,
		           "user ids %u/%u/%u or group ids %u/%u/%u (real/effective/saved) differ: "
		           "another process of the same user could not attach to this one",
		           (unsigned)ru, (unsigned)eu, (unsigned)su, (unsigned)rg, (unsigned)eg,
		           (unsigned)sg);
		return TW_ERR_UNSUPPORTED;
	}
	int at = snprintf(out, out_len, "cma:%s_%s_%s_%u_%u", boot, pidns, userns, (unsigned)ru,
	                  (unsigned)rg);
	int entries = tw__identity_capability_entries();
	if (entries > 0) {
		uint64_t caps;
		if (tw__sys_capget_permitted(&caps) != 0) {
			char eb[128];
			tw__detail(detail, detail_len, "capget: %s", tw__strerror(errno, eb, sizeof(eb)));
			return TW_ERR_SYS;
		}
		for (int i = 0; i < entries && at > 0 && (size_t)at < out_len; i++)
			at += snprintf(out + at, out_len - (size_t)at, "_%" PRIx64, caps);
	}
	if (at < 0 || (size_t)at >= out_len) {
		tw__detail(detail, detail_len, "cma descriptor longer than %zu bytes", out_len - 1);
		return TW_ERR_INVAL;
	}
	return TW_OK;
}
