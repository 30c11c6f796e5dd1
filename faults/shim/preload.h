/*
 * preload.h - works out the LD_PRELOAD value that puts libtwfault into a
 * program: the program's sanitizer runtime first when it has one as a
 * DT_NEEDED entry (GCC links libasan and libtsan dynamically, and they refuse
 * to start unless they come first in the initial library list), then the
 * shim, then whatever LD_PRELOAD already held.
 *
 * It only reads the program's ELF headers; it must not run the program or
 * the dynamic loader (ldd would), so it is safe on any file.
 */
#ifndef TW_FAULTS_SHIM_PRELOAD_H
#define TW_FAULTS_SHIM_PRELOAD_H

#include <stddef.h>

/* Finds `prog` as execvp would (PATH when it has no '/'). Returns 0 with
 * the path in out, or -1 with the reason in err. */
int twf_find_program(const char *prog, char *out, size_t outlen, char *err, size_t errlen);

/* Looks for a sanitizer runtime among the DT_NEEDED entries of the ELF file
 * at `path` (libasan.so*, libtsan.so*, libhwasan.so*). Returns 1 with its
 * soname in soname_out, 0 when there is none (including: not a 64-bit ELF
 * file of this machine's byte order, e.g. a script), -1 when the file cannot
 * be read (reason in err). */
int twf_sanitizer_needed(const char *path, char *soname_out, size_t len, char *err,
                         size_t errlen);

/* LD_PRELOAD for running `path` with `shim` preloaded: "[sanitizer ]shim[
 * existing]" (an existing entry equal to the sanitizer or the shim is not
 * repeated). Returns 0, or -1 with the reason in err. */
int twf_preload_value(const char *path, const char *shim, const char *existing, char *out,
                      size_t outlen, char *err, size_t errlen);

#endif /* TW_FAULTS_SHIM_PRELOAD_H */
