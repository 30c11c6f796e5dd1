/*
 * cuda.h - the CUDA channels (spec/wire.md 4.6): cuda_basic (staged
 * through pinned host memory over a wrapped basic channel), cuda_xth (one
 * process, device to device), cuda_ipc (two processes of one host, CUDA
 * IPC) and cuda_gdr (GPUDirect RDMA over verbs). All need the CUDA driver
 * at run time (platform/cuda.h) and are not viable without it.
 */
#ifndef TW_CHANNEL_CUDA_CUDA_H
#define TW_CHANNEL_CUDA_CUDA_H

#include "channel/channel.h"

extern const tw_channel_ops tw__cuda_basic_channel_ops;
extern const tw_channel_ops tw__cuda_xth_channel_ops;
extern const tw_channel_ops tw__cuda_ipc_channel_ops;
extern const tw_channel_ops tw__cuda_gdr_channel_ops;

#endif /* TW_CHANNEL_CUDA_CUDA_H */
