/*
 * cma.h - the cma channel's vtable (spec 4.4). Everything else about it is
 * private to cma.c.
 */
#ifndef TW_CHANNEL_CMA_CMA_H
#define TW_CHANNEL_CMA_CMA_H

#include "channel/channel.h"

extern const tw_channel_ops tw__cma_channel_ops;

#endif /* TW_CHANNEL_CMA_CMA_H */
