/*
 * replay_main.c - a main() for a fuzz target when libFuzzer is not linked:
 *
 *   fuzz_replay_<t> DIR|FILE...   runs the target once over every file (each
 *                                 directory's files in name order): the
 *                                 fuzz-regress CTest tests; needs no clang.
 *   fuzz_replay_<t>               reads one input from stdin: AFL++ in its
 *                                 plain mode (afl-fuzz ... -- ./fuzz_replay_<t>).
 * Built with afl-clang-fast/afl-clang-lto it also offers AFL++'s persistent,
 * shared-memory mode (__AFL_FUZZ_TESTCASE_LEN is then defined).
 *
 * A missing directory counts as empty (regress/<t>/ may not exist yet); a
 * missing file is an error. A property violation aborts inside the target.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT();
#endif

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t cap = 4096, len = 0;
	uint8_t *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *bigger = realloc(buf, cap * 2);
			if (!bigger) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = bigger;
			cap *= 2;
		}
	}
	int err = ferror(f);
	fclose(f);
	if (!buf || err) {
		fprintf(stderr, "replay: %s: read failed\n", path);
		free(buf);
		return -1;
	}
	/* an exact-size copy, so ASan sees reads past the input */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of `dir`; returns the count, or -1 on error. */
static long run_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == ENOENT) {
			printf("# %s: no such directory, nothing to replay\n", dir);
			return 0;
		}
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	char **names = NULL;
	size_t num = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;  /* ., .., and dotfiles such as .gitkeep */
		if (num == cap) {
			cap = cap ? 2 * cap : 64;
			char **bigger = realloc(names, cap * sizeof(*names));
			if (!bigger)
				break;
			names = bigger;
		}
		names[num++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, num, sizeof(*names), cmp_str);
	long count = 0;
	for (size_t i = 0; i < num; i++) {
		char path[4096];
		struct stat sb;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
			if (run_file(path) != 0)
				count = -1;
			else if (count >= 0)
				count++;
		}
		free(names[i]);
	}
	free(names);
	return count;
}

int main(int argc, char **argv)
{
	if (argc > 1) {
		long total = 0;
		for (int i = 1; i < argc; i++) {
			struct stat sb;
			long n;
			if (stat(argv[i], &sb) == 0 && S_ISREG(sb.st_mode))
				n = run_file(argv[i]) == 0 ? 1 : -1;
			else
				n = run_dir(argv[i]);
			if (n < 0)
				return 1;
			printf("ok - %s: %ld inputs\n", argv[i], n);
			total += n;
		}
		printf("# %ld inputs replayed without a crash or a broken property\n", total);
		return 0;
	}
#ifdef __AFL_FUZZ_TESTCASE_LEN
	__AFL_INIT();
	const uint8_t *buf = __AFL_FUZZ_TESTCASE_BUF;
	while (__AFL_LOOP(10000)) {
		size_t len = (size_t)__AFL_FUZZ_TESTCASE_LEN;
		LLVMFuzzerTestOneInput(buf, len);
	}
	return 0;
#else
	return run_file("/dev/stdin") == 0 ? 0 : 1;
#endif
}
