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
 * stream the user owns and may destroy after the callback. Each device has
 * two: copies run on one, and the host functions that report their ends
 * on the other, each after an event recorded behind its copy.
 */
#ifndef TW_CHANNEL_CUDA_COMMON_H
#define TW_CHANNEL_CUDA_COMMON_H

#include "channel/channel.h"
#include "platform/cuda.h"
#include "platform/error.h"

#define TW_CUDA_CTX_MAX_DEVICES 64

typedef struct tw_cuda_chan tw_cuda_chan;

typedef struct tw_cuda_ctx {
	tw_channel_ctx base;
	const tw_cuda *cu;
	int num_cuda;
	CUstream streams[TW_CUDA_CTX_MAX_DEVICES]; /* lazily, non-blocking */
	/* where completions are reported (cuLaunchHostFunc), after an event of
	 * the copy stream: a host function holds up the stream it is on until
	 * the driver has run it, and must not hold up the copies */
	CUstream notify[TW_CUDA_CTX_MAX_DEVICES];
	tw_cuda_chan *chans; /* open chunked channels (tw__cuda_chan_wake) */
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
 * and lists the devices: cpu:0 first if with_cpu, then cuda:0..N-1; the
 * caller fills their descriptors. */
TW_NODISCARD tw_status_t tw__cuda_ctx_init(tw_cuda_ctx *c, const tw_channel_ops *ops,
                                           const tw_channel_env *env, bool with_cpu,
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

/* Loop thread: runs done->fn on the loop once the work queued so far on
 * `stream` (a user CUstream of cuda:dev, NULL = legacy default stream) is
 * over. On failure nothing was queued and done will not run. */
TW_NODISCARD tw_status_t tw__cuda_when_ready(tw_cuda_ctx *c, int dev, void *stream,
                                             tw_cuda_done *done, char *detail,
                                             size_t detail_len);

/* Loop thread: a new event recorded now on `stream` (of cuda:dev). */
TW_NODISCARD tw_status_t tw__cuda_record(tw_cuda_ctx *c, int dev, void *stream, CUevent *out,
                                         char *detail, size_t detail_len);

/* ---- chunked channels (cuda_basic, cuda_ipc) --------------------------------------- */
/*
 * A chunked channel cuts each tensor in chunks of a fixed size, queued in
 * order per direction, and moves them in a pump that runs in a later pass
 * of the loop (so no callback runs inside send/recv). A tensor calls back
 * once its last chunk ended, with the first failure any chunk met. The
 * first failure of the channel (or its close) is kept; the pump then ends
 * the chunks nothing is under way for, the others end when their copy or
 * I/O calls back.
 */

/* one tensor */
typedef struct tw_cuda_op {
	tw_cuda_chan *ch;
	tw_channel_cb cb;
	void *arg;
	unsigned chunks_left;
	tw_status_t status;
	char detail[TW_DETAIL_MAX];
	tw_deferred dfr;
} tw_cuda_op;

/* What every chunk has; a channel's chunk type starts with it. */
typedef struct tw_cuda_chunk {
	tw_cuda_op *op;
	struct tw_cuda_chunk *next;
	int which;    /* 0 send, 1 receive */
	char *ptr;    /* the user's buffer at this chunk */
	uint64_t n;
	int dev;      /* -1: host memory */
	void *stream; /* the tensor's */
	int slot;     /* the channel's staging slot, -1 none */
	bool ended;
	tw_cuda_done done;
} tw_cuda_chunk;

typedef struct tw_cuda_chan_ops {
	void (*pump)(tw_cuda_chan *ch); /* moves chunks on, ends what is over */
	void (*free)(tw_cuda_chan *ch); /* the last reference went */
	size_t chunk_struct;            /* sizeof the channel's chunk type */
	uint64_t chunk_bytes;           /* the longest chunk */
} tw_cuda_chan_ops;

struct tw_cuda_chan {
	tw_channel base;
	tw_cuda_ctx *ctx;
	const tw_cuda_chan_ops *cops;
	unsigned refs; /* 1 while open + one per callback or operation pending */
	tw_status_t failed;
	char fail_detail[TW_DETAIL_MAX];
	tw_cuda_chunk *q[2]; /* [0] sends, [1] receives, in order */
	bool pump_queued;
	tw_deferred pump_dfr;
	tw_cuda_chan *next_open, *prev_open;
	bool open;
};

/* Loop thread: an opened channel (refs 1, on the context's open list). */
void tw__cuda_chan_open(tw_cuda_chan *ch, tw_cuda_ctx *c, const tw_channel_instance_ops *ops,
                        const tw_cuda_chan_ops *cops);
void tw__cuda_chan_unref(tw_cuda_chan *ch);
/* Runs the pump in a later pass (once, however often asked). */
void tw__cuda_chan_schedule(tw_cuda_chan *ch);
/* Keeps the first failure ("<kind> channel: detail") and schedules. */
void tw__cuda_chan_fail(tw_cuda_chan *ch, tw_status_t st, const char *detail);
/* close(): what is pending fails with TW_ERR_CLOSED. */
void tw__cuda_chan_close(tw_cuda_chan *ch);
/* A staging slot freed: every open channel of c looks again. */
void tw__cuda_chan_wake(tw_cuda_ctx *c);
/* send/recv: the tensor's chunks queued (or, zero-length or refused, its
 * callback deferred); cpu:0 buffers are chunks with dev -1. */
TW_NODISCARD tw_status_t tw__cuda_chan_queue(tw_cuda_chan *ch, const tw_buffer *buf,
                                             tw_channel_cb cb, void *arg, int which);
/* A control frame's write callback (arg: the channel, one reference):
 * a failure fails the channel. */
void tw__cuda_chan_on_written(tw_conn *c, tw_status_t st, const char *detail, void *arg);
/* Instance ops of every chunked channel (send, recv, close, max_tensor). */
TW_NODISCARD tw_status_t tw__cuda_chan_send(tw_channel *ch, const tw_buffer *buf,
                                            tw_channel_cb cb, void *arg);
TW_NODISCARD tw_status_t tw__cuda_chan_recv(tw_channel *ch, const tw_buffer *buf,
                                            tw_channel_cb cb, void *arg);
void tw__cuda_chan_close_op(tw_channel *ch);
uint64_t tw__cuda_chan_max_tensor(tw_channel *ch);
/* A chunk is over, whatever its outcome; the pump unlinks it
 * (tw__cuda_chan_sweep). Calls the tensor back after its last chunk. */
void tw__cuda_chunk_end(tw_cuda_chunk *k, tw_status_t st, const char *detail);
/* Unlinks and frees the ended chunks of one direction. */
void tw__cuda_chan_sweep(tw_cuda_chan *ch, int which, void (*free_chunk)(tw_cuda_chunk *k));

#endif /* TW_CHANNEL_CUDA_COMMON_H */
