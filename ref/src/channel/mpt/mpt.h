/*
 * mpt.h - the mpt channel's vtable (spec 4.3). Everything else about it is
 * private to mpt.c.
 */
#ifndef TW_CHANNEL_MPT_MPT_H
#define TW_CHANNEL_MPT_MPT_H

#include "channel/channel.h"

extern const tw_channel_ops tw__mpt_channel_ops;

#endif /* TW_CHANNEL_MPT_MPT_H */
