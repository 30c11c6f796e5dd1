/*
 * sandbox.c - tw-sandbox: runs a command the way a container or a locked-
 * down host would, for the containment cases (issue 11 item 4, field
 * failures T01, T04, T07 of ../shared/reference/field-failures.md):
 *
 *   tw-sandbox [--deny SYSCALL:ERRNO]... [--drop-cap NAME]... [--shm-size SIZE]
 *              [--yama-scope N] [--check] -- COMMAND [ARG]...
 *
 *   --deny process_vm_readv:EPERM   a seccomp filter (libseccomp) makes that
 *                                   system call fail with that errno
 *                                   (EPERM, ENOSYS, EINVAL, EACCES)
 *   --drop-cap sys_ptrace           the capability leaves the bounding,
 *                                   permitted, effective, inheritable and
 *                                   ambient sets (libcap), so even root
 *                                   cannot copy from a non-dumpable peer
 *   --shm-size 1m                   a private mount namespace whose /dev/shm
 *                                   is a fresh tmpfs of that size
 *   --yama-scope 2                  a private mount namespace in which
 *                                   /proc/sys/kernel/yama/ptrace_scope
 *                                   reads N, as on a host whose YAMA is set
 *                                   so (T02): what a library reads to decide
 *                                   whether processes may copy from each
 *                                   other. The kernel's own setting is left
 *                                   alone (it is the host's, and a kernel
 *                                   without YAMA has none): the case checks
 *                                   what the library decides, not what the
 *                                   kernel enforces. Where the kernel has no
 *                                   YAMA the directory is added: a tmpfs
 *                                   over /proc/sys/kernel holds a bind mount
 *                                   of every entry that was there, and yama/;
 *                                   a securityfs list of modules without
 *                                   yama gets it added the same way.
 *   --check                         does all of it, then exits 0 instead of
 *                                   running COMMAND (the cases ask first)
 *
 * Exit status: COMMAND's (it is exec'd), 2 for bad usage, 77 when a step is
 * not possible here (not root, no mount namespaces, an unknown system call
 * or capability), with the reason on stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_ITEMS 16

static int unavailable(const char *what, int err)
{
	fprintf(stderr, "tw-sandbox: %s: %s\n", what, strerror(err));
	return 77;
}

static int errno_by_name(const char *s)
{
	static const struct {
		const char *name;
		int value;
	} names[] = { { "EPERM", EPERM }, { "ENOSYS", ENOSYS }, { "EINVAL", EINVAL },
		      { "EACCES", EACCES } };
	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
		if (!strcmp(s, names[i].name))
			return names[i].value;
	return -1;
}

static int deny(char *const *rules, int n)
{
	if (n == 0)
		return 0;
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	if (!f)
		return unavailable("seccomp_init", ENOMEM);
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		char name[64];
		const char *colon = strchr(rules[i], ':');
		int e = colon ? errno_by_name(colon + 1) : -1;
		snprintf(name, sizeof(name), "%.*s", colon ? (int)(colon - rules[i]) : 0, rules[i]);
		int nr = seccomp_syscall_resolve_name(name);
		if (e < 0 || nr == __NR_SCMP_ERROR) {
			fprintf(stderr, "tw-sandbox: --deny %s: want SYSCALL:ERRNO with a known system call "
			                "and one of EPERM, ENOSYS, EINVAL, EACCES\n",
			        rules[i]);
			rc = 2;
		} else if ((rc = seccomp_rule_add(f, SCMP_ACT_ERRNO((unsigned)e), nr, 0)) != 0) {
			rc = unavailable("seccomp_rule_add", -rc);
		}
	}
	if (rc == 0 && (rc = seccomp_load(f)) != 0)
		rc = unavailable("seccomp_load", -rc);
	seccomp_release(f);
	return rc;
}

static int drop_caps(char *const *names, int n)
{
	if (n == 0)
		return 0;
	cap_t caps = cap_get_proc();
	if (!caps)
		return unavailable("cap_get_proc", errno);
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		char full[64];
		snprintf(full, sizeof(full), "cap_%s", names[i]);
		cap_value_t v;
		if (cap_from_name(full, &v) != 0) {
			fprintf(stderr, "tw-sandbox: --drop-cap %s: no such capability\n", names[i]);
			rc = 2;
			break;
		}
		if (prctl(PR_CAPBSET_DROP, v, 0, 0, 0) != 0 && errno != EINVAL)
			rc = unavailable("prctl(PR_CAPBSET_DROP)", errno);
		(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, v, 0, 0);
		if (rc == 0 && (cap_set_flag(caps, CAP_EFFECTIVE, 1, &v, CAP_CLEAR) != 0 ||
		                cap_set_flag(caps, CAP_PERMITTED, 1, &v, CAP_CLEAR) != 0 ||
		                cap_set_flag(caps, CAP_INHERITABLE, 1, &v, CAP_CLEAR) != 0))
			rc = unavailable("cap_set_flag", errno);
	}
	if (rc == 0 && cap_set_proc(caps) != 0)
		rc = unavailable("cap_set_proc", errno);
	cap_free(caps);
	return rc;
}

/* A mount namespace of our own, once: what we mount stays in it. */
static int private_mounts(void)
{
	static bool done;
	if (done)
		return 0;
	if (unshare(CLONE_NEWNS) != 0)
		return unavailable("unshare(CLONE_NEWNS)", errno);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return unavailable("mount(/, MS_REC|MS_PRIVATE)", errno);
	done = true;
	return 0;
}

static int small_dev_shm(const char *size)
{
	if (!size)
		return 0;
	char opts[64];
	snprintf(opts, sizeof(opts), "size=%s,mode=1777", size);
	int rc = private_mounts();
	if (rc != 0)
		return rc;
	if (mount("tw-sandbox", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
		return unavailable("mount(tmpfs, /dev/shm)", errno);
	return 0;
}

/* /proc/sys/kernel as it was, on a tmpfs: each entry bind-mounted back
 * from the original directory (still reached through `dirfd`). */
static int kernel_dir_copy(void)
{
	int dirfd = open("/proc/sys/kernel", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return unavailable("open(/proc/sys/kernel)", errno);
	DIR *d = fdopendir(dup(dirfd));
	if (!d) {
		close(dirfd);
		return unavailable("fdopendir(/proc/sys/kernel)", errno);
	}
	int rc = 0;
	if (mount("tw-sandbox", "/proc/sys/kernel", "tmpfs", MS_NOSUID | MS_NODEV, "mode=555") != 0)
		rc = unavailable("mount(tmpfs, /proc/sys/kernel)", errno);
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char from[PATH_MAX], to[PATH_MAX];
		snprintf(from, sizeof(from), "/proc/self/fd/%d/%s", dirfd, e->d_name);
		snprintf(to, sizeof(to), "/proc/sys/kernel/%s", e->d_name);
		int fd = -1;
		if (e->d_type == DT_DIR ? mkdir(to, 0555) != 0
		                        : (fd = open(to, O_CREAT | O_WRONLY | O_CLOEXEC, 0444)) < 0)
			rc = unavailable("creating a mount point on /proc/sys/kernel's tmpfs", errno);
		else if (mount(from, to, NULL, MS_BIND | MS_REC, NULL) != 0)
			rc = unavailable("bind mount of a /proc/sys/kernel entry", errno);
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
	close(dirfd);
	if (rc == 0 && mkdir("/proc/sys/kernel/yama", 0555) != 0)
		rc = unavailable("mkdir(/proc/sys/kernel/yama)", errno);
	return rc;
}

/* A library may ask which security modules are active before it reads
 * YAMA's file (stock TensorPipe does, where securityfs is mounted): a
 * list without yama gets ",yama" added, on a tmpfs over its directory. */
static int lsm_with_yama(void)
{
	char list[512] = "";
	FILE *f = fopen("/sys/kernel/security/lsm", "r");
	if (!f)
		return 0; /* not mounted here: such a library assumes YAMA may be there */
	size_t n = fread(list, 1, sizeof(list) - 8, f);
	fclose(f);
	list[n] = '\0';
	if (strstr(list, "yama"))
		return 0;
	if (mount("tw-sandbox", "/sys/kernel/security", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755") != 0)
		return unavailable("mount(tmpfs, /sys/kernel/security)", errno);
	while (n > 0 && (list[n - 1] == '\n' || list[n - 1] == '\0'))
		list[--n] = '\0';
	f = fopen("/sys/kernel/security/lsm", "w");
	if (!f || fprintf(f, "%s%syama", list, n ? "," : "") < 0 || fclose(f) != 0)
		return unavailable("writing /sys/kernel/security/lsm", errno);
	return 0;
}

static int yama_scope(const char *scope)
{
	if (!scope)
		return 0;
	if (strlen(scope) != 1 || scope[0] < '0' || scope[0] > '3') {
		fprintf(stderr, "tw-sandbox: --yama-scope takes 0, 1, 2 or 3\n");
		return 2;
	}
	int rc = private_mounts();
	if (rc == 0 && access("/proc/sys/kernel/yama", F_OK) != 0)
		rc = kernel_dir_copy();
	/* a tmpfs of our own over yama/, holding the one file */
	if (rc == 0 &&
	    mount("tw-sandbox", "/proc/sys/kernel/yama", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755") != 0)
		rc = unavailable("mount(tmpfs, /proc/sys/kernel/yama)", errno);
	if (rc != 0)
		return rc;
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "w");
	if (!f || fprintf(f, "%s\n", scope) < 0 || fclose(f) != 0)
		return unavailable("writing /proc/sys/kernel/yama/ptrace_scope", errno);
	if (mount(NULL, "/proc/sys/kernel/yama", NULL, MS_REMOUNT | MS_RDONLY | MS_BIND, NULL) != 0)
		return unavailable("mount(/proc/sys/kernel/yama, MS_RDONLY)", errno);
	return lsm_with_yama();
}

int main(int argc, char **argv)
{
	char *denies[MAX_ITEMS], *caps[MAX_ITEMS];
	int nd = 0, nc = 0, i = 1;
	const char *shm = NULL, *yama = NULL;
	bool check = false;
	for (; i < argc && strcmp(argv[i], "--"); i++) {
		bool more = i + 1 < argc;
		if (!strcmp(argv[i], "--deny") && more && nd < MAX_ITEMS)
			denies[nd++] = argv[++i];
		else if (!strcmp(argv[i], "--drop-cap") && more && nc < MAX_ITEMS)
			caps[nc++] = argv[++i];
		else if (!strcmp(argv[i], "--shm-size") && more)
			shm = argv[++i];
		else if (!strcmp(argv[i], "--yama-scope") && more)
			yama = argv[++i];
		else if (!strcmp(argv[i], "--check"))
			check = true;
		else
			break;
	}
	if (i >= argc || strcmp(argv[i], "--") || (!check && i + 1 >= argc)) {
		fprintf(stderr, "usage: tw-sandbox [--deny SYSCALL:ERRNO]... [--drop-cap NAME]... "
		                "[--shm-size SIZE] [--yama-scope N] [--check] -- COMMAND [ARG]...\n");
		return 2;
	}
	int rc = small_dev_shm(shm);
	if (rc == 0)
		rc = yama_scope(yama);
	if (rc == 0)
		rc = drop_caps(caps, nc);
	if (rc == 0)
		rc = deny(denies, nd); /* last: the filter also binds what sets it up */
	if (rc != 0 || check)
		return rc;
	execvp(argv[i + 1], argv + i + 1);
	fprintf(stderr, "tw-sandbox: exec %s: %s\n", argv[i + 1], strerror(errno));
	return 127;
}
