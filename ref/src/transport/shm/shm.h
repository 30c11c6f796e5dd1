/*
 * shm.h - the shared-memory transport ("shm", spec/wire.md 2.3).
 */
#ifndef TW_TRANSPORT_SHM_SHM_H
#define TW_TRANSPORT_SHM_SHM_H

#include "transport/transport.h"

extern const tw_transport_ops tw__shm_transport_ops;

#endif /* TW_TRANSPORT_SHM_SHM_H */
