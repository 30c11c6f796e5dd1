/*
 * basic.h - the basic channel's vtable (spec 4.2). Everything else about it
 * is private to basic.c.
 */
#ifndef TW_CHANNEL_BASIC_BASIC_H
#define TW_CHANNEL_BASIC_BASIC_H

#include "channel/channel.h"

extern const tw_channel_ops tw__basic_channel_ops;

#endif /* TW_CHANNEL_BASIC_BASIC_H */
