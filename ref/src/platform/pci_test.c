/*
 * pci_test.c - GPU-to-NIC matching on synthetic PCI trees (platform/pci.h;
 * field failure T31). Each case builds a sysfs tree in a fresh directory
 * (devices/pci..., bus/pci/devices/<id> and class/infiniband/<name>/device
 * as relative links, numa_node and resource1 files) and asks pci.h:
 *
 *   prefix_trap   a GPU under pci0000:17 with no NIC there; mlx5_0 under
 *                 pci0000:1a on the other NUMA node, mlx5_1 under pci0000:5d
 *                 on the GPU's: mlx5_1, where counting shared characters of
 *                 the paths (stock's cuda_gdr) picks mlx5_0 (checked here)
 *   same_root     GPU and NIC A under pci0000:17, NIC B under pci0000:1a:
 *                 A; with A's port down: B
 *   port_down     the NIC behind the GPU's own switch is down: the one
 *                 behind the other switch of the same root port, not one of
 *                 another root complex
 *   bar1          resource1's size is BAR1's; a missing resource1 is
 *                 TW_ERR_NODEV naming the file, never a crash
 *   two_sockets   8 GPUs and 8 NICs, four root complexes on two NUMA nodes,
 *                 a GPU and a NIC behind each PCIe switch, the NICs listed
 *                 in reverse: GPU i gets NIC i; with NIC 2 down GPU 2 shares
 *                 NIC 3 (same root complex); with socket 0's NICs down GPUs
 *                 0-3 get the four NICs of socket 1, one each
 *   in_namespace  two_sockets' tree mounted over /sys in a mount namespace
 *                 (as root; SKIP with the reason otherwise) and read through
 *                 "/sys", the path the library uses
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel/cuda/gdr_plan.h"
#include "platform/cuda.h"
#include "platform/pci.h"

#define CHECK(c)                                                                          \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
			abort();                                                          \
		}                                                                         \
	} while (0)

static char root[PATH_MAX];

/* snprintf into an array, never truncated */
#define FMT(buf, ...) CHECK(snprintf(buf, sizeof(buf), __VA_ARGS__) < (int)sizeof(buf))

static void mkdirs(const char *path)
{
	char p[PATH_MAX];
	FMT(p, "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			CHECK(mkdir(p, 0755) == 0 || errno == EEXIST);
			*s = '/';
		}
	CHECK(mkdir(p, 0755) == 0 || errno == EEXIST);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f);
	fputs(text, f);
	fclose(f);
}

/* A PCI device at `path` below devices/ ("pci0000:17/0000:17:01.0/..."),
 * on NUMA node numa, with a BAR1 of bar1 bytes (0: no resource1 file). */
static void mk_dev(const char *path, int numa, unsigned long long bar1)
{
	char d[PATH_MAX], f[PATH_MAX + 32], link[PATH_MAX], target[PATH_MAX];
	FMT(d, "%s/devices/%s", root, path);
	mkdirs(d);
	FMT(f, "%s/numa_node", d);
	char v[16];
	FMT(v, "%d\n", numa);
	write_file(f, v);
	if (bar1) {
		FMT(f, "%s/resource1", d);
		int fd = open(f, O_CREAT | O_WRONLY | O_TRUNC, 0644);
		CHECK(fd >= 0 && ftruncate(fd, (off_t)bar1) == 0);
		close(fd);
	}
	const char *id = strrchr(path, '/') + 1;
	FMT(d, "%s/bus/pci/devices", root);
	mkdirs(d);
	FMT(link, "%s/%s", d, id);
	FMT(target, "../../../devices/%s", path);
	CHECK(symlink(target, link) == 0);
}

static void mk_nic(const char *name, const char *path, int numa)
{
	mk_dev(path, numa, 0);
	char d[PATH_MAX], link[PATH_MAX + 16], target[PATH_MAX];
	FMT(d, "%s/class/infiniband/%s", root, name);
	mkdirs(d);
	FMT(link, "%s/device", d);
	FMT(target, "../../../devices/%s", path);
	CHECK(symlink(target, link) == 0);
}

static void fresh_root(void)
{
	const char *tmp = getenv("TMPDIR");
	char tmpl[PATH_MAX];
	FMT(tmpl, "%s/tw-pci-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(tmpl));
	FMT(root, "%s", tmpl);
}

static void rm_root(void)
{
	char cmd[PATH_MAX + 16];
	FMT(cmd, "rm -rf '%s'", root);
	CHECK(system(cmd) == 0);
}

static tw_pci_place gpu_place(const char *sysfs, const char *bus_id)
{
	tw_pci_place p;
	char why[256];
	tw_status_t st = tw__pci_place_of_bus_id(sysfs, bus_id, &p, why, sizeof(why));
	if (st != TW_OK) {
		fprintf(stderr, "GPU %s: %s\n", bus_id, why);
		abort();
	}
	return p;
}

static tw_pci_nic nic(const char *sysfs, const char *name, bool usable)
{
	tw_pci_nic n = { .name = name, .usable = usable };
	char why[256];
	tw_status_t st = tw__pci_place_of_ib_device(sysfs, name, &n.place, why, sizeof(why));
	if (st != TW_OK) {
		fprintf(stderr, "NIC %s: %s\n", name, why);
		abort();
	}
	n.has_place = true;
	return n;
}

/* The NIC the GPU pairs with, alone. */
static const char *pick1(const tw_pci_place *g, const tw_pci_nic *nics, int n)
{
	int pick;
	tw__pci_pair(g, 1, nics, n, &pick);
	return pick >= 0 ? nics[pick].name : "(none)";
}

/* How stock's cuda_gdr ranks: characters shared by the two real paths. */
static size_t char_prefix(const char *a, const char *b)
{
	size_t n = 0;
	while (a[n] && a[n] == b[n])
		n++;
	return n;
}

static void case_prefix_trap(void)
{
	fresh_root();
	mk_dev("pci0000:17/0000:17:00.0/0000:18:00.0", 0, 1ull << 35);
	mk_nic("mlx5_0", "pci0000:1a/0000:1a:00.0/0000:1b:00.0", 1);
	mk_nic("mlx5_1", "pci0000:5d/0000:5d:00.0/0000:5e:00.0", 0);
	tw_pci_place g = gpu_place(root, "0000:18:00.0");
	tw_pci_nic nics[] = { nic(root, "mlx5_0", true), nic(root, "mlx5_1", true) };
	const char *got = pick1(&g, nics, 2);
	printf("# GPU 0000:18:00.0 (pci0000:17, node 0): %s\n", got);
	CHECK(strcmp(got, "mlx5_1") == 0);
	/* the trap is real: by shared characters mlx5_0 would win */
	size_t p0 = char_prefix("/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0",
	                        "/sys/devices/pci0000:1a/0000:1a:00.0/0000:1b:00.0");
	size_t p1 = char_prefix("/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0",
	                        "/sys/devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0");
	printf("# shared characters: mlx5_0 %zu, mlx5_1 %zu\n", p0, p1);
	CHECK(p0 > p1);
	rm_root();
}

static void case_same_root(void)
{
	fresh_root();
	mk_dev("pci0000:17/0000:17:00.0/0000:18:00.0", 0, 1ull << 35);
	mk_nic("mlx5_a", "pci0000:17/0000:17:02.0/0000:19:00.0", 0);
	mk_nic("mlx5_b", "pci0000:1a/0000:1a:00.0/0000:1b:00.0", 0);
	tw_pci_place g = gpu_place(root, "0000:18:00.0");
	tw_pci_nic nics[] = { nic(root, "mlx5_b", true), nic(root, "mlx5_a", true) };
	CHECK(strcmp(pick1(&g, nics, 2), "mlx5_a") == 0);
	CHECK(tw__pci_distance(&g, &nics[1].place) == 4);
	nics[1].usable = false;
	CHECK(strcmp(pick1(&g, nics, 2), "mlx5_b") == 0);
	nics[0].usable = false;
	CHECK(strcmp(pick1(&g, nics, 2), "(none)") == 0);
	rm_root();
}

static void case_port_down(void)
{
	fresh_root();
	/* root port 17:01.0 -> switch 18:00.0 -> ports 19:00.0 (GPU), 19:01.0
	 * (NIC near, down), 19:02.0 -> switch 1c -> NIC far; another root too */
	mk_dev("pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0", 0, 1ull << 35);
	mk_nic("near", "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:01.0/0000:1b:00.0", 0);
	mk_nic("next", "pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:02.0/0000:1c:00.0/0000:1d:00.0/0000:1e:00.0", 0);
	mk_nic("other", "pci0000:36/0000:36:00.0/0000:37:00.0", 0);
	tw_pci_place g = gpu_place(root, "0000:1a:00.0");
	tw_pci_nic nics[] = { nic(root, "other", true), nic(root, "next", true),
		              nic(root, "near", true) };
	CHECK(strcmp(pick1(&g, nics, 3), "near") == 0);
	nics[2].usable = false;
	const char *got = pick1(&g, nics, 3);
	printf("# the nearest NIC down: %s (distance %d, against %d)\n", got,
	       tw__pci_distance(&g, &nics[1].place), tw__pci_distance(&g, &nics[0].place));
	CHECK(strcmp(got, "next") == 0);
	rm_root();
}

static void case_bar1(void)
{
	fresh_root();
	mk_dev("pci0000:17/0000:17:00.0/0000:18:00.0", 0, 32ull << 30);
	mk_dev("pci0000:17/0000:17:01.0/0000:19:00.0", 0, 0);
	uint64_t size = 0;
	char why[512];
	CHECK(tw__pci_bar1_size(root, "0000:18:00.0", &size, why, sizeof(why)) == TW_OK);
	CHECK(size == 32ull << 30);
	/* the CUDA driver's spelling of the same id */
	CHECK(tw__pci_bar1_size(root, "00000000:18:00.0", &size, why, sizeof(why)) == TW_OK);
	tw_status_t st = tw__pci_bar1_size(root, "0000:19:00.0", &size, why, sizeof(why));
	printf("# %s\n", why);
	CHECK(st == TW_ERR_NODEV && strstr(why, "0000:19:00.0/resource1"));
	CHECK(tw__pci_bar1_size(root, "not-an-id", &size, why, sizeof(why)) == TW_ERR_INVAL);
	tw_pci_place p;
	CHECK(tw__pci_place_of_bus_id(root, "0000:99:00.0", &p, why, sizeof(why)) == TW_ERR_NODEV);
	CHECK(tw__pci_place_of_ib_device(root, "mlx5_9", &p, why, sizeof(why)) == TW_ERR_NODEV);
	rm_root();
}

/* Two sockets, two root complexes each, two PCIe switches per root
 * complex, one GPU and one NIC behind each switch. */
static const char *const roots8[4] = { "15", "36", "97", "b8" };

static void build_two_sockets(void)
{
	for (int i = 0; i < 8; i++) {
		unsigned r = (unsigned)strtoul(roots8[i / 2], NULL, 16);
		unsigned up = r + 1 + 4 * (unsigned)(i % 2), down = up + 1, gpu = up + 2, n = up + 3;
		char gp[160], np[160], name[16];
		FMT(gp, "pci0000:%02x/0000:%02x:%02x.0/0000:%02x:00.0/0000:%02x:00.0/0000:%02x:00.0",
		         r, r, 1 + i % 2, up, down, gpu);
		FMT(np, "pci0000:%02x/0000:%02x:%02x.0/0000:%02x:00.0/0000:%02x:01.0/0000:%02x:00.0",
		         r, r, 1 + i % 2, up, down, n);
		mk_dev(gp, i / 4, 1ull << 36);
		FMT(name, "mlx5_%d", i);
		mk_nic(name, np, i / 4);
	}
}

static void check_two_sockets(const char *sysfs)
{
	tw_pci_place g[8];
	tw_pci_nic nics[8];
	static char names[8][16];
	for (int i = 0; i < 8; i++) {
		unsigned r = (unsigned)strtoul(roots8[i / 2], NULL, 16);
		char id[32];
		FMT(id, "0000:%02x:00.0", r + 3 + 4 * (unsigned)(i % 2));
		g[i] = gpu_place(sysfs, id);
		snprintf(names[7 - i], sizeof(names[0]), "mlx5_%d", 7 - i);
	}
	for (int i = 0; i < 8; i++) /* listed in reverse: list order must not decide */
		nics[i] = nic(sysfs, names[7 - i], true);
	int pick[8];
	tw__pci_pair(g, 8, nics, 8, pick);
	printf("# pairs:");
	for (int i = 0; i < 8; i++) {
		printf(" cuda:%d-%s", i, nics[pick[i]].name);
		char want[16];
		FMT(want, "mlx5_%d", i);
		CHECK(strcmp(nics[pick[i]].name, want) == 0);
	}
	printf("\n");
	/* NIC 2 down: GPU 2 goes to NIC 3, behind the other switch of its root
	 * complex */
	nics[7 - 2].usable = false;
	tw__pci_pair(g, 8, nics, 8, pick);
	CHECK(strcmp(nics[pick[2]].name, "mlx5_3") == 0 && strcmp(nics[pick[3]].name, "mlx5_3") == 0);
	for (int i = 0; i < 8; i++)
		if (i != 2 && i != 3)
			CHECK(pick[i] == 7 - i);
	/* socket 0's NICs all down: GPUs 0-3 spread over socket 1's four */
	for (int i = 0; i < 4; i++)
		nics[7 - i].usable = false;
	tw__pci_pair(g, 8, nics, 8, pick);
	bool used[8] = { false };
	printf("# socket 0's NICs down:");
	for (int i = 0; i < 4; i++) {
		int n = atoi(nics[pick[i]].name + 5);
		printf(" cuda:%d-%s", i, nics[pick[i]].name);
		CHECK(n >= 4 && !used[n]);
		used[n] = true;
	}
	printf("\n");
	for (int i = 4; i < 8; i++)
		CHECK(pick[i] == 7 - i);
}

static void case_two_sockets(void)
{
	fresh_root();
	build_two_sockets();
	check_two_sockets(root);
	rm_root();
}

static int case_in_namespace(void)
{
	fresh_root();
	build_two_sockets();
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) != 0) {
			printf("SKIP: unshare(CLONE_NEWNS): %s (needs root)\n", strerror(errno));
			fflush(NULL);
			_exit(77);
		}
		if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
		    mount(root, "/sys", NULL, MS_BIND | MS_REC, NULL) != 0) {
			printf("SKIP: bind-mounting the tree over /sys: %s\n", strerror(errno));
			fflush(NULL);
			_exit(77);
		}
		check_two_sockets("/sys");
		fflush(NULL);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	rm_root();
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		return 77;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return 0;
}

/* cuda_gdr's plan end to end (gdr_plan.c), on simcuda's two GPUs (bus ids
 * 3b:00.0 and 86:00.0) and simverbs' simrdma0 and simrdma1
 * (simverbs/tests/two_nics.conf), placed in a synthetic tree: GPU 0 shares a
 * bridge with simrdma1 (the second NIC listed), GPU 1 has no resource1; then
 * GPU 1 absent from sysfs takes the NIC given to no GPU yet. */
static void case_gdr_plan(void)
{
	const tw_cuda *cu;
	char d[512];
	if (tw__cuda_get(&cu, d, sizeof(d)) != TW_OK || cu->num_devices < 2) {
		printf("# SKIP: two CUDA devices needed (run under simcuda-run): %s\n", d);
		exit(77);
	}
	for (int pass = 0; pass < 2; pass++) {
		fresh_root();
		mk_dev("pci0000:3a/0000:3a:00.0/0000:3b:00.0", 0, 1ull << 34);
		if (pass == 0)
			mk_dev("pci0000:85/0000:85:00.0/0000:86:00.0", 1, 0);
		mk_nic("simrdma0", "pci0000:85/0000:85:00.0/0000:87:00.0", 1);
		mk_nic("simrdma1", "pci0000:3a/0000:3a:00.0/0000:3c:00.0", 0);
		static tw_gdr_plan p;
		CHECK(tw__gdr_plan_make(cu, 2, root, &p) == TW_OK);
		CHECK(p.num_cand == 2 && p.usable[0] && p.usable[1]);
		CHECK(!strcmp(p.cand[0], "simrdma0") && !strcmp(p.cand[1], "simrdma1"));
		CHECK(p.gpu_cand[0] == 1 && p.gpu_distance[0] == 2);
		if (pass == 0) {
			printf("# cuda:1: %s\n", p.gpu_note[1]);
			CHECK(p.gpu_cand[1] == -1 && strstr(p.gpu_note[1], "resource1"));
		} else {
			CHECK(p.gpu_cand[1] == 0 && p.gpu_distance[1] == -1);
		}
		rm_root();
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CASE\n", argv[0]);
		return 2;
	}
	const char *c = argv[1];
	if (strcmp(c, "prefix_trap") == 0)
		case_prefix_trap();
	else if (strcmp(c, "same_root") == 0)
		case_same_root();
	else if (strcmp(c, "port_down") == 0)
		case_port_down();
	else if (strcmp(c, "bar1") == 0)
		case_bar1();
	else if (strcmp(c, "two_sockets") == 0)
		case_two_sockets();
	else if (strcmp(c, "gdr_plan") == 0)
		case_gdr_plan();
	else if (strcmp(c, "in_namespace") == 0) {
		int rc = case_in_namespace();
		if (rc)
			return rc;
	} else {
		fprintf(stderr, "unknown case '%s'\n", c);
		return 2;
	}
	printf("ok - %s\n", c);
	return 0;
}
