/*
 * host.c - what the library reads about the host and the process it runs
 * in: the boot id, namespace identities, small procfs and sysfs files (see
 * platform.h). Same-host mechanisms build their descriptors (spec/wire.md
 * section 6) from these. Fault points are listed in fault_points.h.
 */
#include "platform/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "platform/fault.h"

static ssize_t tw__read_small(const char *path, char *buf, size_t len)
{
	if (len == 0) {
		errno = EINVAL;
		return -1;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t got = 0;
	while (got < len - 1) {
		ssize_t n = read(fd, buf + got, len - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	return (ssize_t)got;
}

ssize_t tw__sys_read_file(const char *path, char *buf, size_t len)
{
	if (TW_FAULT_POINT("sys/read_file")) {
		errno = EACCES;
		return -1;
	}
	return tw__read_small(path, buf, len);
}

int tw__sys_boot_id(char *out, size_t len)
{
	if (TW_FAULT_POINT("sys/boot_id")) {
		errno = ENOENT;
		return -1;
	}
	if (len < TW_BOOT_ID_LEN + 1) {
		errno = EINVAL;
		return -1;
	}
	char buf[64];
	ssize_t n = tw__read_small("/proc/sys/kernel/random/boot_id", buf, sizeof(buf));
	if (n < 0)
		return -1;
	size_t line = strcspn(buf, "\n");
	if (line != TW_BOOT_ID_LEN) {
		errno = EPROTO;
		return -1;
	}
	memcpy(out, buf, TW_BOOT_ID_LEN);
	out[TW_BOOT_ID_LEN] = '\0';
	return 0;
}

int tw__sys_ns_id(const char *ns, uint64_t *dev_out, uint64_t *ino_out)
{
	if (TW_FAULT_POINT("sys/ns")) {
		errno = ENOENT;
		return -1;
	}
	char path[64];
	if ((size_t)snprintf(path, sizeof(path), "/proc/self/ns/%s", ns) >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	struct stat st;
	if (stat(path, &st) != 0)
		return -1;
	*dev_out = (uint64_t)st.st_dev;
	*ino_out = (uint64_t)st.st_ino;
	return 0;
}

int tw__sys_capget_permitted(uint64_t *mask_out)
{
	if (TW_FAULT_POINT("sys/capget")) {
		errno = EPERM;
		return -1;
	}
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d) != 0)
		return -1;
	*mask_out = (uint64_t)d[0].permitted | (uint64_t)d[1].permitted << 32;
	return 0;
}
