/*
 * select.h - the user's choice of backends (tensorwire issue 11 item 8):
 * TW_TRANSPORTS and TW_CHANNELS in the environment, or tw_context_select()
 * for one context, each a comma list of kinds in one of two forms:
 *
 *   "shm,uv"     only these kinds may be registered, and the order is their
 *                priority (first highest), whatever the registration said;
 *   "^cma,^xth"  every kind but these.
 *
 * A malformed list, or one naming a kind stock TensorPipe does not have
 * (a typo must not select nothing silently), is TW_ERR_INVAL at the first
 * registration, naming the variable and the item. Kinds are stock's names
 * (uv, shm, ibv; basic, mpt, cma, xth, cuda_*), whether or not this build
 * has them yet.
 */
#ifndef TW_CORE_SELECT_H
#define TW_CORE_SELECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"

#define TW_SELECT_MAX 256

/* Checks `spec` (NULL or "": no choice) for a list of `what` ("transport"
 * or "channel") kinds; `source` names where it came from in details
 * ("TW_TRANSPORTS='^uv'"). */
TW_NODISCARD tw_status_t tw__select_check_spec(const char *spec, bool transports,
                                               const char *source, char *detail,
                                               size_t detail_len);
/* Applies `spec` to registering `kind`: TW_OK (and *priority replaced by
 * the list's order if it is an inclusion list), or TW_ERR_UNSUPPORTED with
 * the reason when the list leaves the kind out. The spec must have passed
 * tw__select_check_spec. */
TW_NODISCARD tw_status_t tw__select_apply(const char *spec, const char *source, const char *kind,
                                          int64_t *priority, char *detail, size_t detail_len);

#endif /* TW_CORE_SELECT_H */
