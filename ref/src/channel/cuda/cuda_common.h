/*
 * cuda_common.h - what the CUDA channels (cuda_basic, cuda_xth) share: a
 * context that loads the driver (platform/cuda.h) and lists cuda:0..N-1,
 * copies that run on the context's own stream per device, ordered after
 * the work the user queued on the tensor's stream, and completions that
 * come back to the loop thread once the bytes have landed.
 *
 * Why our own streams: a channel must know when a copy is over (to call
 * back, release a staging slot, or let a closing pipe finish), and the
 * context must be able to drain its copies at shutdown; neither works on a
 * stream the user owns and may destroy after the callback.
 */
#ifndef TW_CHANNEL_CUDA_COMMON_H
#define TW_CHANNEL_CUDA_COMMON_H

#include "channel/channel.h"
#include "platform/cuda.h"

#define TW_CUDA_CTX_MAX_DEVICES 64

typedef struct tw_cuda_ctx {
	tw_channel_ctx base;
	const tw_cuda *cu;
	int num_cuda;
	CUstream streams[TW_CUDA_CTX_MAX_DEVICES]; /* lazily, non-blocking */
} tw_cuda_ctx;

/* A completion of queued GPU work, run on the loop thread: fill fn and arg,
 * keep the struct alive until fn runs. */
typedef struct tw_cuda_done {
	tw_loop *loop;
	tw_deferred dfr;
	void (*fn)(void *arg);
	void *arg;
} tw_cuda_done;

/* Loads the driver (TW_ERR_UNSUPPORTED with the reason: field failure T08)
 * and allocates num_devices device slots (filled by the caller). */
TW_NODISCARD tw_status_t tw__cuda_ctx_init(tw_cuda_ctx *c, const tw_channel_ops *ops,
                                           const tw_channel_env *env, size_t num_devices,
                                           char *detail, size_t detail_len);
/* Frees the device list (after tw__cuda_ctx_drain). */
void tw__cuda_ctx_fini(tw_cuda_ctx *c);
/* Loop thread, at shutdown: waits for every copy queued and destroys the
 * streams. */
void tw__cuda_ctx_drain(tw_cuda_ctx *c);

/* Checks that [ptr, ptr+len) is device memory of cuda:`index` within one
 * allocation (or, for cpu, anything). TW_ERR_INVAL naming what is wrong. */
TW_NODISCARD tw_status_t tw__cuda_check_buffer(tw_cuda_ctx *c, const char *who,
                                               const tw_buffer *b, char *detail,
                                               size_t detail_len);

/* Loop thread: copies n bytes from src to dst (device or host pointers) on
 * the stream of cuda:dev, after the work queued so far on `after` (a user
 * CUstream, NULL = legacy default stream) and, if not NULL, after `event`;
 * then records `then_record` if not NULL, and runs done->fn on the loop. On
 * failure nothing was queued and done will not run. */
TW_NODISCARD tw_status_t tw__cuda_copy(tw_cuda_ctx *c, int dev, void *dst, const void *src,
                                       uint64_t n, void *after, CUevent event,
                                       CUevent then_record, tw_cuda_done *done, char *detail,
                                       size_t detail_len);

/* Loop thread: a new event recorded now on `stream` (of cuda:dev). */
TW_NODISCARD tw_status_t tw__cuda_record(tw_cuda_ctx *c, int dev, void *stream, CUevent *out,
                                         char *detail, size_t detail_len);

#endif /* TW_CHANNEL_CUDA_COMMON_H */
