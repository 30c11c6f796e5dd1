/*
 * cpu_ctx.c - the context of a channel that serves cpu:0 alone with one
 * device descriptor (basic, cma, xth, mpt): see channel.h.
 */
#include <string.h>

#include "channel/channel.h"
#include "platform/error.h"
#include "platform/platform.h"

typedef struct tw_cpu_ctx {
	tw_channel_ctx base;
	tw_channel_device cpu;
} tw_cpu_ctx;

tw_status_t tw__channel_cpu_ctx_new(const tw_channel_ops *ops, const tw_channel_env *env,
                                    const char *descriptor, tw_channel_ctx **out, char *detail,
                                    size_t detail_len)
{
	tw_cpu_ctx *c = tw__calloc(1, sizeof(*c));
	size_t n = strlen(descriptor);
	if (!c || !(c->cpu.descriptor = tw__memdup_str(descriptor, n))) {
		tw__free(c);
		tw__detail(detail, detail_len, "%s channel: out of memory", ops->kind);
		return TW_ERR_NOMEM;
	}
	c->cpu.device = tw_device_cpu();
	c->cpu.descriptor_len = n;
	c->base.ops = ops;
	c->base.env = env;
	c->base.num_devices = 1;
	c->base.devices = &c->cpu;
	*out = &c->base;
	return TW_OK;
}

void tw__channel_cpu_ctx_free(tw_channel_ctx *base)
{
	tw_cpu_ctx *c = (tw_cpu_ctx *)base;
	tw__free(c->cpu.descriptor);
	tw__free(c);
}
