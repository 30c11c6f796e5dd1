/*
 * frame.h - how frames are delimited on each transport (spec/wire.md
 * section 2): the uv (TCP) transport puts a u64le length before every frame,
 * the shm and ibv rings a u32le length.
 *
 * These helpers only encode/decode headers and split a byte buffer into
 * complete frames; they do no I/O and never allocate. A splitter rejects a
 * declared length above the caller's limit (TW_ERR_PROTO) before anyone
 * allocates for it, which is the defence against a 2^62-byte header
 * (spec/wire.md 5.3).
 *
 * This file must not know about libnop or packet types.
 */
#ifndef TW_WIRE_FRAME_H
#define TW_WIRE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "tensorwire/tensorwire.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
	TW_FRAME_UV_HEADER_SIZE = 8,    /* u64le length (spec 2.2) */
	TW_FRAME_RING_HEADER_SIZE = 4,  /* u32le length (spec 2.3.3, 2.4) */
};

/* Our default limit for a uv frame that should hold a packet (a nop value):
 * spec/wire.md 2.2 (2.2.c) asks for at least 2 MiB, SHOULD 16 MiB. Raw
 * payload and tensor frames are checked against their announced length
 * instead. */
#define TW_FRAME_UV_PACKET_MAX ((uint64_t)64 * 1024 * 1024)

/* Capacity of a shm connection inbox and an ibv inbox: a nop object (one
 * packet) sent over a ring must fit in it whole, header included (spec 2.3.3). */
#define TW_FRAME_RING_CAPACITY ((uint64_t)2 * 1024 * 1024)

/* Writes the 8-byte uv header for a frame of `len` bytes. */
void tw__frame_uv_header_put(uint8_t hdr[TW_FRAME_UV_HEADER_SIZE], uint64_t len);
/* Reads the length from an 8-byte uv header. */
uint64_t tw__frame_uv_header_get(const uint8_t hdr[TW_FRAME_UV_HEADER_SIZE]);

/* Writes the 4-byte ring header. TW_ERR_INVAL (detail set) if len does not fit
 * in 32 bits: stock would silently truncate it (spec 2.3.3), we refuse. */
TW_NODISCARD tw_status_t tw__frame_ring_header_put(uint8_t hdr[TW_FRAME_RING_HEADER_SIZE],
                                                   uint64_t len, char *detail,
                                                   size_t detail_len);
uint32_t tw__frame_ring_header_get(const uint8_t hdr[TW_FRAME_RING_HEADER_SIZE]);

/* Splits the next frame off the front of `buf` (uv: 8-byte header).
 * TW_OK with *consumed_out = 0 when `buf` does not yet hold a complete frame
 * (read more and call again); TW_OK with *body_out and *body_len_out set and
 * *consumed_out = header + body when it does; TW_ERR_PROTO (detail set, "uv
 * frame: length ... exceeds the limit ...") when the header declares more than
 * `max_len` bytes. Never reads past avail. */
TW_NODISCARD tw_status_t tw__frame_uv_split(const void *buf, size_t avail, uint64_t max_len,
                                            const uint8_t **body_out, size_t *body_len_out,
                                            size_t *consumed_out, char *detail,
                                            size_t detail_len);
/* Same for the shm/ibv ring framing (4-byte header). */
TW_NODISCARD tw_status_t tw__frame_ring_split(const void *buf, size_t avail, uint64_t max_len,
                                              const uint8_t **body_out, size_t *body_len_out,
                                              size_t *consumed_out, char *detail,
                                              size_t detail_len);

#ifdef __cplusplus
}
#endif

#endif /* TW_WIRE_FRAME_H */
