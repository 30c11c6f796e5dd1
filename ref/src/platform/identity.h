/*
 * identity.h - who and where this process is, as the same-host mechanisms
 * advertise it (spec/wire.md section 6): the domain and device descriptors
 * of shm, cma and xth, built exactly as stock builds them (6.a), so that a
 * stock peer on the same host selects ours and ours selects it.
 *
 * A descriptor only says "we could be on the same host, in the same
 * namespaces"; it does not prove that the mechanism works between the two
 * processes (6.b: boot_id is shared by every container on a host). Proving
 * it is the backend's job; this file only reads and formats.
 */
#ifndef TW_PLATFORM_IDENTITY_H
#define TW_PLATFORM_IDENTITY_H

#include <stddef.h>

#include "tensorwire/tensorwire.h"

#define TW_IDENTITY_MAX 256

/* The first line of /proc/sys/kernel/random/boot_id. */
TW_NODISCARD tw_status_t tw__identity_boot(char *out, size_t out_len, char *detail,
                                           size_t detail_len);
/* "<st_dev>_<st_ino>" of /proc/self/ns/<ns>, lowercase hex without 0x. */
TW_NODISCARD tw_status_t tw__identity_ns(const char *ns, char *out, size_t out_len, char *detail,
                                         size_t detail_len);
/* "shm:<boot_id>_<netns>" (stock's shm transport). */
TW_NODISCARD tw_status_t tw__identity_shm(char *out, size_t out_len, char *detail,
                                          size_t detail_len);
/* "cma:<boot_id>_<pidns>_<userns>_<uid>_<gid>" then "_<permitted capability
 * mask, hex>" once per "capability" entry in the LSM list (stock's cma
 * channel). TW_ERR_UNSUPPORTED with the reason where stock would not offer
 * cma from this process: real, effective and saved ids differ. */
TW_NODISCARD tw_status_t tw__identity_cma(char *out, size_t out_len, char *detail,
                                          size_t detail_len);
/* "<boot_id>_<pidns>_<pid>" (stock's xth channel). */
TW_NODISCARD tw_status_t tw__identity_xth(char *out, size_t out_len, char *detail,
                                          size_t detail_len);

#endif /* TW_PLATFORM_IDENTITY_H */
