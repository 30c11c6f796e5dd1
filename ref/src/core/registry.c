/*
 * registry.c - the transport and channel kinds built into libtensorwire.
 * A new transport or channel adds one line here and its own folder; the
 * core finds it by kind name and uses it only through its vtable.
 */
#include <string.h>

#include "channel/basic/basic.h"
#include "channel/cma/cma.h"
#include "channel/cuda/cuda.h"
#include "channel/mpt/mpt.h"
#include "core/core.h"
#include "transport/ibv/ibv.h"
#include "transport/shm/shm.h"
#include "transport/tcp/tcp.h"

const tw_transport_ops *const tw__transport_kinds[] = {
	&tw__tcp_transport_ops,
	&tw__shm_transport_ops,
	&tw__ibv_transport_ops,
	NULL,
};

const tw_channel_ops *const tw__channel_kinds[] = {
	&tw__basic_channel_ops,
	&tw__cma_channel_ops,
	&tw__mpt_channel_ops,
	&tw__xth_channel_ops,
	&tw__cuda_basic_channel_ops,
	&tw__cuda_xth_channel_ops,
	&tw__cuda_ipc_channel_ops,
	&tw__cuda_gdr_channel_ops,
	NULL,
};

const tw_transport_ops *tw__transport_find_kind(const char *kind)
{
	for (size_t i = 0; tw__transport_kinds[i]; i++)
		if (strcmp(tw__transport_kinds[i]->kind, kind) == 0)
			return tw__transport_kinds[i];
	/* "tcp" is what the public header calls the uv transport too. */
	if (strcmp(kind, "tcp") == 0)
		return &tw__tcp_transport_ops;
	return NULL;
}

const tw_channel_ops *tw__channel_find_kind(const char *kind)
{
	for (size_t i = 0; tw__channel_kinds[i]; i++)
		if (strcmp(tw__channel_kinds[i]->kind, kind) == 0)
			return tw__channel_kinds[i];
	return NULL;
}
