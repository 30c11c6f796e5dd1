/*
 * preload.c - the LD_PRELOAD order for libtwfault (see preload.h): a small
 * reader of ELF64 program headers, the dynamic section and its string table.
 */
#define _GNU_SOURCE
#include "preload.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_PHDRS 512
#define MAX_DYN_BYTES (1 << 20)
#define MAX_STRTAB_BYTES (16 << 20)

static int say(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int say(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

int twf_find_program(const char *prog, char *out, size_t outlen, char *err, size_t errlen)
{
	if (strchr(prog, '/')) {
		if ((size_t)snprintf(out, outlen, "%s", prog) >= outlen)
			return say(err, errlen, "program path too long: %s", prog);
		return 0;
	}
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path;;) {
		const char *colon = strchr(p, ':');
		size_t dl = colon ? (size_t)(colon - p) : strlen(p);
		char cand[4096];
		int n = snprintf(cand, sizeof(cand), "%.*s%s%s", (int)dl, p, dl ? "/" : "", prog);
		if (n > 0 && (size_t)n < sizeof(cand) && access(cand, X_OK) == 0) {
			struct stat st;
			if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
				if ((size_t)snprintf(out, outlen, "%s", cand) >= outlen)
					return say(err, errlen, "program path too long: %s", cand);
				return 0;
			}
		}
		if (!colon)
			break;
		p = colon + 1;
	}
	return say(err, errlen, "%s: not found in PATH", prog);
}

static bool read_at(int fd, void *buf, size_t n, uint64_t off)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		got += (size_t)r;
	}
	return true;
}

static bool is_sanitizer_runtime(const char *soname)
{
	static const char *const names[] = {"libasan.so", "libtsan.so", "libhwasan.so"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strncmp(soname, names[i], strlen(names[i])))
			return true;
	return false;
}

int twf_sanitizer_needed(const char *path, char *soname_out, size_t len, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return say(err, errlen, "open %s: %s", path, strerror(errno));
	int rc = 0;
	Elf64_Phdr *ph = NULL;
	Elf64_Dyn *dyn = NULL;
	char *strtab = NULL;
	Elf64_Ehdr eh;
	const uint16_t one = 1;
	const unsigned char host_data = *(const unsigned char *)&one ? ELFDATA2LSB : ELFDATA2MSB;
	if (!read_at(fd, &eh, sizeof(eh), 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != host_data ||
	    eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > MAX_PHDRS)
		goto out; /* not a program whose runtimes we can see: nothing to put first */
	ph = calloc(eh.e_phnum, sizeof(*ph));
	if (!ph || !read_at(fd, ph, eh.e_phnum * sizeof(*ph), eh.e_phoff))
		goto out;
	const Elf64_Phdr *dynph = NULL;
	for (int i = 0; i < eh.e_phnum; i++)
		if (ph[i].p_type == PT_DYNAMIC)
			dynph = &ph[i];
	if (!dynph || dynph->p_filesz == 0 || dynph->p_filesz > MAX_DYN_BYTES)
		goto out; /* static program: its own symbols come first anyway */
	size_t ndyn = dynph->p_filesz / sizeof(Elf64_Dyn);
	dyn = calloc(ndyn, sizeof(*dyn));
	if (!dyn || !read_at(fd, dyn, ndyn * sizeof(*dyn), dynph->p_offset))
		goto out;
	uint64_t strtab_vaddr = 0, strsz = 0;
	for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
		if (dyn[i].d_tag == DT_STRTAB)
			strtab_vaddr = dyn[i].d_un.d_ptr;
		else if (dyn[i].d_tag == DT_STRSZ)
			strsz = dyn[i].d_un.d_val;
	}
	if (!strtab_vaddr || !strsz || strsz > MAX_STRTAB_BYTES)
		goto out;
	uint64_t strtab_off = 0;
	bool mapped = false;
	for (int i = 0; i < eh.e_phnum && !mapped; i++) {
		if (ph[i].p_type == PT_LOAD && strtab_vaddr >= ph[i].p_vaddr &&
		    strtab_vaddr - ph[i].p_vaddr < ph[i].p_filesz) {
			strtab_off = strtab_vaddr - ph[i].p_vaddr + ph[i].p_offset;
			mapped = true;
		}
	}
	strtab = calloc(1, strsz + 1);
	if (!mapped || !strtab || !read_at(fd, strtab, strsz, strtab_off))
		goto out;
	for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
		if (dyn[i].d_tag != DT_NEEDED || dyn[i].d_un.d_val >= strsz)
			continue;
		const char *name = strtab + dyn[i].d_un.d_val;
		if (is_sanitizer_runtime(name)) {
			if ((size_t)snprintf(soname_out, len, "%s", name) < len)
				rc = 1;
			break;
		}
	}
out:
	free(strtab);
	free(dyn);
	free(ph);
	close(fd);
	return rc;
}

/* Appends `item` to the space-separated list in out. */
static int append(char *out, size_t outlen, const char *item, size_t itemlen, char *err,
                  size_t errlen)
{
	size_t used = strlen(out);
	if (used + (used ? 1 : 0) + itemlen + 1 > outlen)
		return say(err, errlen, "LD_PRELOAD value too long");
	if (used)
		out[used++] = ' ';
	memcpy(out + used, item, itemlen);
	out[used + itemlen] = '\0';
	return 0;
}

int twf_preload_value(const char *path, const char *shim, const char *existing, char *out,
                      size_t outlen, char *err, size_t errlen)
{
	char san[256] = "";
	int found = twf_sanitizer_needed(path, san, sizeof(san), err, errlen);
	if (found < 0)
		return -1;
	if (outlen == 0)
		return say(err, errlen, "no room for LD_PRELOAD");
	out[0] = '\0';
	if (found == 1 && append(out, outlen, san, strlen(san), err, errlen))
		return -1;
	if (append(out, outlen, shim, strlen(shim), err, errlen))
		return -1;
	/* LD_PRELOAD separates entries with spaces or colons */
	for (const char *p = existing ? existing : ""; *p;) {
		size_t n = strcspn(p, " :");
		bool dup = (n == strlen(shim) && !strncmp(p, shim, n)) ||
		           (found == 1 && n == strlen(san) && !strncmp(p, san, n));
		if (n && !dup && append(out, outlen, p, n, err, errlen))
			return -1;
		p += n;
		while (*p == ' ' || *p == ':')
			p++;
	}
	return 0;
}
