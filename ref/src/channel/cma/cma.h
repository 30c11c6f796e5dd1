/*
 * cma.h - the vtables of the cma channel (spec 4.4) and of xth (4.5), the
 * same flow inside one process; both live in cma.c and everything else
 * about them is private to it.
 */
#ifndef TW_CHANNEL_CMA_CMA_H
#define TW_CHANNEL_CMA_CMA_H

#include "channel/channel.h"

extern const tw_channel_ops tw__cma_channel_ops;
extern const tw_channel_ops tw__xth_channel_ops;

#endif /* TW_CHANNEL_CMA_CMA_H */
