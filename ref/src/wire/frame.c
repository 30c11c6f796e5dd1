/*
 * frame.c - length headers of the uv (u64le) and shm/ibv ring (u32le)
 * framings (spec/wire.md section 2). No I/O, no allocation.
 */
#include "wire/frame.h"

#include <inttypes.h>
#include <stdio.h>

static void tw__frame_store(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t tw__frame_load(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

void tw__frame_uv_header_put(uint8_t hdr[TW_FRAME_UV_HEADER_SIZE], uint64_t len)
{
	tw__frame_store(hdr, len, TW_FRAME_UV_HEADER_SIZE);
}

uint64_t tw__frame_uv_header_get(const uint8_t hdr[TW_FRAME_UV_HEADER_SIZE])
{
	return tw__frame_load(hdr, TW_FRAME_UV_HEADER_SIZE);
}

tw_status_t tw__frame_ring_header_put(uint8_t hdr[TW_FRAME_RING_HEADER_SIZE], uint64_t len,
                                      char *detail, size_t detail_len)
{
	if (len > UINT32_MAX) {
		if (detail && detail_len)
			snprintf(detail, detail_len, "ring frame: length %" PRIu64 " does not fit the "
			         "32-bit header (frames on shm/ibv must be < 4 GiB)", len);
		return TW_ERR_INVAL;
	}
	tw__frame_store(hdr, len, TW_FRAME_RING_HEADER_SIZE);
	return TW_OK;
}

uint32_t tw__frame_ring_header_get(const uint8_t hdr[TW_FRAME_RING_HEADER_SIZE])
{
	return (uint32_t)tw__frame_load(hdr, TW_FRAME_RING_HEADER_SIZE);
}

static tw_status_t tw__frame_split(const char *name, unsigned hdr_size, const void *buf,
                                   size_t avail, uint64_t max_len, const uint8_t **body_out,
                                   size_t *body_len_out, size_t *consumed_out, char *detail,
                                   size_t detail_len)
{
	const uint8_t *p = buf;
	*consumed_out = 0;
	if (avail < hdr_size)
		return TW_OK;
	uint64_t len = tw__frame_load(p, hdr_size);
	if (len > max_len) {
		if (detail && detail_len)
			snprintf(detail, detail_len, "%s frame: length %" PRIu64 " exceeds the limit of "
			         "%" PRIu64 " bytes", name, len, max_len);
		return TW_ERR_PROTO;
	}
	if (avail - hdr_size < len)
		return TW_OK;
	*body_out = p + hdr_size;
	*body_len_out = (size_t)len;
	*consumed_out = hdr_size + (size_t)len;
	return TW_OK;
}

tw_status_t tw__frame_uv_split(const void *buf, size_t avail, uint64_t max_len,
                               const uint8_t **body_out, size_t *body_len_out,
                               size_t *consumed_out, char *detail, size_t detail_len)
{
	return tw__frame_split("uv", TW_FRAME_UV_HEADER_SIZE, buf, avail, max_len, body_out,
	                       body_len_out, consumed_out, detail, detail_len);
}

tw_status_t tw__frame_ring_split(const void *buf, size_t avail, uint64_t max_len,
                                 const uint8_t **body_out, size_t *body_len_out,
                                 size_t *consumed_out, char *detail, size_t detail_len)
{
	return tw__frame_split("ring", TW_FRAME_RING_HEADER_SIZE, buf, avail, max_len, body_out,
	                       body_len_out, consumed_out, detail, detail_len);
}
