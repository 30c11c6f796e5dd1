/*
 * packets.c - encoders and decoders for TensorPipe's wire types
 * (spec/wire.md sections 3 and 4): Packet, Brochure, BrochureAnswer,
 * Descriptor, DescriptorReply and the mpt/cma/xth channel packets.
 *
 * Decoders build into a zeroed local value, free it on any failure and copy
 * it out only on success. Arrays are calloc'd with a count already bounded by
 * the bytes left (nop.c), so a partly decoded value can always be freed.
 * Error details carry the field path ("Descriptor.tensors[2].sourceDevice.type:
 * ..."). This file must not do I/O or know about transports.
 */
#include "wire/packets.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "wire/alloc.h"

/* Smallest encodings of each element, used to bound counts before
 * allocating (spec/wire.md 1.13). Each is the size of the element with every
 * string empty and every integer a fixint. */
enum {
	TW__MIN_STRING = 2,                                   /* bd 00 */
	TW__MIN_DEVICE = 2 + TW__MIN_STRING + 1,              /* b9 02 bd 00 00 */
	TW__MIN_KV = 2 * TW__MIN_STRING,                      /* map<string,string> pair */
	TW__MIN_DEVICE_DESC = TW__MIN_DEVICE + TW__MIN_STRING, /* map<Device,string> pair */
	TW__MIN_CHANNEL_DEVICES = TW__MIN_STRING + 2,         /* string, bb 00 */
	TW__MIN_CHANNEL_IDS = TW__MIN_STRING + 2,             /* string, bc 00 */
	TW__MIN_ID_ENTRY = 2,                                 /* 00 00 */
	TW__MIN_DEVICE_PAIR = 2 + 2 * TW__MIN_DEVICE + TW__MIN_STRING, /* ba 02 dev dev, string */
	TW__MIN_PAYLOAD = 2 + 1 + TW__MIN_STRING,             /* b9 02 00 bd 00 */
	TW__MIN_TENSOR = 2 + 1 + TW__MIN_DEVICE + 1 + TW__MIN_STRING, /* b9 04 00 dev be bd 00 */
	TW__MIN_LANE = 2 + TW__MIN_STRING + 1,                /* b9 02 bd 00 00 */
	TW__MIN_GDR_QP = 2 + 1 + 4 + 3,                       /* b9 05 00 b9 02 00 00 00 00 00 */
};

#define TW__PATH_MAX 160
#define TW__SMALL_DEDUPE 16

/* ---- decoding context -------------------------------------------------------- */

typedef struct tw__dec {
	tw_nop_reader r;
	char path[TW__PATH_MAX];
	size_t path_len;
	size_t left;  /* heap bytes the decoded value may still take (SIZE_MAX: no bound) */
	size_t limit; /* what it might take in all */
} tw__dec;

/* Appends a path segment; returns the mark to pass to tw__dec_pop. */
static size_t tw__dec_push(tw__dec *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static size_t tw__dec_push(tw__dec *d, const char *fmt, ...)
{
	size_t mark = d->path_len;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d->path + d->path_len, sizeof(d->path) - d->path_len, fmt, ap);
	va_end(ap);
	d->path_len += strlen(d->path + d->path_len);
	return mark;
}

static void tw__dec_pop(tw__dec *d, size_t mark)
{
	d->path_len = mark;
	d->path[mark] = '\0';
}

static tw_status_t tw__dec_nomem(tw__dec *d, size_t bytes)
{
	if (d->r.detail[0] == '\0' &&
	    snprintf(d->r.detail, sizeof(d->r.detail), "%s: out of memory allocating %zu bytes",
	             d->path, bytes) < 0)
		d->r.detail[0] = '\0';
	return TW_ERR_NOMEM;
}

size_t tw__wire_heap_cost(size_t n)
{
	if (n > SIZE_MAX - 32)
		return SIZE_MAX;
	size_t c = (n + 8 + 15) & ~(size_t)15;
	return c < 32 ? 32 : c;
}

/* Takes what an allocation of n bytes costs from the decode's bound. */
static tw_status_t tw__dec_charge(tw__dec *d, size_t n)
{
	size_t cost = tw__wire_heap_cost(n);
	if (cost <= d->left) {
		d->left -= cost;
		return TW_OK;
	}
	if (d->r.detail[0] == '\0' &&
	    snprintf(d->r.detail, sizeof(d->r.detail),
	             "%s: decoded, the value takes more than the limit of %zu bytes", d->path,
	             d->limit) < 0)
		d->r.detail[0] = '\0';
	return TW_ERR_PROTO;
}

/* calloc of a bounded count; NULL for count 0 (*out stays NULL). */
static tw_status_t tw__dec_array(tw__dec *d, size_t count, size_t size, void **out)
{
	*out = NULL;
	if (count == 0)
		return TW_OK;
	tw_status_t st = tw__dec_charge(d, count > SIZE_MAX / size ? SIZE_MAX : count * size);
	if (st != TW_OK)
		return st;
	*out = tw__wire_calloc(count, size);
	return *out ? TW_OK : tw__dec_nomem(d, count * size);
}

static tw_status_t tw__dec_str(tw__dec *d, tw_wire_str *out)
{
	const uint8_t *s = NULL;
	size_t n = 0;
	tw_status_t st = tw__nop_get_string(&d->r, &s, &n);
	if (st == TW_OK)
		st = tw__dec_charge(d, n + 1);
	if (st != TW_OK)
		return st;
	char *c = tw__wire_malloc(n + 1);
	if (!c)
		return tw__dec_nomem(d, n + 1);
	memcpy(c, s, n);
	c[n] = '\0';
	out->s = c;
	out->n = n;
	return TW_OK;
}

static tw_status_t tw__dec_member_str(tw__dec *d, const char *name, tw_wire_str *out)
{
	size_t mark = tw__dec_push(d, ".%s", name);
	tw_status_t st = tw__dec_str(d, out);
	if (st == TW_OK)
		tw__dec_pop(d, mark);
	return st;
}

static tw_status_t tw__dec_member_uint(tw__dec *d, const char *name, unsigned width,
                                       uint64_t *out)
{
	size_t mark = tw__dec_push(d, ".%s", name);
	tw_status_t st = tw__nop_get_uint(&d->r, width, out);
	if (st == TW_OK)
		tw__dec_pop(d, mark);
	return st;
}

static tw_status_t tw__dec_member_int(tw__dec *d, const char *name, unsigned width,
                                      int64_t *out)
{
	size_t mark = tw__dec_push(d, ".%s", name);
	tw_status_t st = tw__nop_get_int(&d->r, width, out);
	if (st == TW_OK)
		tw__dec_pop(d, mark);
	return st;
}

static tw_status_t tw__dec_device(tw__dec *d, tw_wire_device *out)
{
	int64_t index = 0;
	tw_status_t st = tw__nop_get_struct(&d->r, 2);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "type", &out->type);
	if (st == TW_OK)
		st = tw__dec_member_int(d, "index", 4, &index);
	if (st != TW_OK)
		return st;
	out->index = (int32_t)index;
	return TW_OK;
}

/* ---- duplicate map keys: the first one wins (stock's emplace) ----------------- */

typedef int (*tw__key_cmp)(const void *a, const void *b);

typedef struct tw__sort_ctx {
	const uint8_t *base;
	size_t size;
	tw__key_cmp cmp;
} tw__sort_ctx;

/* Orders entry indices by key, then by wire position, so the first entry of
 * each run of equal keys is the earliest on the wire. */
static int tw__sort_less(const tw__sort_ctx *c, size_t a, size_t b)
{
	int k = c->cmp(c->base + a * c->size, c->base + b * c->size);
	return k < 0 || (k == 0 && a < b);
}

static void tw__sift_down(const tw__sort_ctx *c, size_t *idx, size_t root, size_t n)
{
	while (2 * root + 1 < n) {
		size_t child = 2 * root + 1;
		if (child + 1 < n && tw__sort_less(c, idx[child], idx[child + 1]))
			child++;
		if (!tw__sort_less(c, idx[root], idx[child]))
			return;
		size_t t = idx[root];
		idx[root] = idx[child];
		idx[child] = t;
		root = child;
	}
}

/* In-place heap sort: O(n log n) time and no memory beyond `idx`, so the
 * decoder's allocations stay a small multiple of its input (spec 1.13). */
static void tw__sort_indices(const tw__sort_ctx *c, size_t *idx, size_t n)
{
	for (size_t start = n / 2; start-- > 0;)
		tw__sift_down(c, idx, start, n);
	for (size_t end = n; end-- > 1;) {
		size_t t = idx[0];
		idx[0] = idx[end];
		idx[end] = t;
		tw__sift_down(c, idx, 0, end);
	}
}

/* Removes entries whose key equals an earlier entry's, keeping wire order and
 * freeing the dropped entries with `drop`. */
static tw_status_t tw__dedupe(tw__dec *d, void *base, size_t *n, size_t size, tw__key_cmp cmp,
                              void (*drop)(void *))
{
	size_t count = *n;
	uint8_t *arr = base;
	if (count < 2)
		return TW_OK;
	bool *dup = tw__wire_calloc(count, sizeof(*dup));
	if (!dup)
		return tw__dec_nomem(d, count);
	if (count <= TW__SMALL_DEDUPE) {
		for (size_t i = 1; i < count; i++)
			for (size_t j = 0; j < i && !dup[i]; j++)
				if (cmp(arr + i * size, arr + j * size) == 0)
					dup[i] = true;
	} else {
		size_t *idx = tw__wire_malloc(count * sizeof(*idx));
		if (!idx) {
			tw__wire_free(dup);
			return tw__dec_nomem(d, count * sizeof(*idx));
		}
		for (size_t i = 0; i < count; i++)
			idx[i] = i;
		tw__sort_ctx c = {arr, size, cmp};
		tw__sort_indices(&c, idx, count);
		/* within a run of equal keys the first is the earliest on the wire */
		for (size_t k = 1; k < count; k++)
			if (cmp(arr + idx[k - 1] * size, arr + idx[k] * size) == 0)
				dup[idx[k]] = true;
		tw__wire_free(idx);
	}
	size_t kept = 0;
	for (size_t i = 0; i < count; i++) {
		if (dup[i]) {
			drop(arr + i * size);
		} else {
			if (kept != i)
				memcpy(arr + kept * size, arr + i * size, size);
			kept++;
		}
	}
	tw__wire_free(dup);
	*n = kept;
	return TW_OK;
}

static int tw__str_cmp(const tw_wire_str *a, const tw_wire_str *b)
{
	size_t n = a->n < b->n ? a->n : b->n;
	int c = n ? memcmp(a->s, b->s, n) : 0;
	if (c != 0)
		return c;
	return (a->n > b->n) - (a->n < b->n);
}

static int tw__device_cmp(const tw_wire_device *a, const tw_wire_device *b)
{
	int c = tw__str_cmp(&a->type, &b->type);
	if (c != 0)
		return c;
	return (a->index > b->index) - (a->index < b->index);
}

static int tw__kv_cmp(const void *a, const void *b)
{
	return tw__str_cmp(&((const tw_wire_kv *)a)->key, &((const tw_wire_kv *)b)->key);
}

static int tw__device_desc_cmp(const void *a, const void *b)
{
	return tw__device_cmp(&((const tw_wire_device_desc *)a)->device,
	                      &((const tw_wire_device_desc *)b)->device);
}

static int tw__channel_devices_cmp(const void *a, const void *b)
{
	return tw__str_cmp(&((const tw_wire_channel_devices *)a)->channel,
	                   &((const tw_wire_channel_devices *)b)->channel);
}

static int tw__channel_ids_cmp(const void *a, const void *b)
{
	return tw__str_cmp(&((const tw_wire_channel_ids *)a)->channel,
	                   &((const tw_wire_channel_ids *)b)->channel);
}

static int tw__id_entry_cmp(const void *a, const void *b)
{
	uint64_t x = ((const tw_wire_id_entry *)a)->key, y = ((const tw_wire_id_entry *)b)->key;
	return (x > y) - (x < y);
}

static int tw__device_pair_cmp(const void *a, const void *b)
{
	const tw_wire_device_pair *x = a, *y = b;
	int c = tw__device_cmp(&x->server_device, &y->server_device);
	return c != 0 ? c : tw__device_cmp(&x->client_device, &y->client_device);
}

/* ---- freeing ----------------------------------------------------------------- */

void tw__wire_str_free(tw_wire_str *s)
{
	if (!s)
		return;
	tw__wire_free(s->s);
	s->s = NULL;
	s->n = 0;
}

tw_status_t tw__wire_str_set(tw_wire_str *dst, const void *s, size_t n)
{
	if (n == SIZE_MAX)
		return TW_ERR_NOMEM;
	char *c = tw__wire_malloc(n + 1);
	if (!c)
		return TW_ERR_NOMEM;
	if (n)
		memcpy(c, s, n);
	c[n] = '\0';
	dst->s = c;
	dst->n = n;
	return TW_OK;
}

static void tw__device_free(tw_wire_device *dev)
{
	tw__wire_str_free(&dev->type);
}

static void tw__kv_drop(void *p)
{
	tw_wire_kv *kv = p;
	tw__wire_str_free(&kv->key);
	tw__wire_str_free(&kv->value);
}

static void tw__device_desc_drop(void *p)
{
	tw_wire_device_desc *e = p;
	tw__device_free(&e->device);
	tw__wire_str_free(&e->descriptor);
}

static void tw__channel_devices_drop(void *p)
{
	tw_wire_channel_devices *e = p;
	tw__wire_str_free(&e->channel);
	for (size_t i = 0; i < e->num_devices; i++)
		tw__device_desc_drop(&e->devices[i]);
	tw__wire_free(e->devices);
	e->devices = NULL;
	e->num_devices = 0;
}

static void tw__channel_ids_drop(void *p)
{
	tw_wire_channel_ids *e = p;
	tw__wire_str_free(&e->channel);
	tw__wire_free(e->ids);
	e->ids = NULL;
	e->num_ids = 0;
}

static void tw__id_entry_drop(void *p)
{
	(void)p;
}

static void tw__device_pair_drop(void *p)
{
	tw_wire_device_pair *e = p;
	tw__device_free(&e->server_device);
	tw__device_free(&e->client_device);
	tw__wire_str_free(&e->channel);
}

void tw__wire_packet_free(tw_wire_packet *v)
{
	if (!v)
		return;
	tw__wire_str_free(&v->context_name);
	memset(v, 0, sizeof(*v));
}

static void tw__channel_devices_free(size_t n, tw_wire_channel_devices *a)
{
	for (size_t i = 0; i < n; i++)
		tw__channel_devices_drop(&a[i]);
	tw__wire_free(a);
}

void tw__wire_brochure_free(tw_wire_brochure *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->num_transports; i++)
		tw__kv_drop(&v->transports[i]);
	tw__wire_free(v->transports);
	tw__channel_devices_free(v->num_channels, v->channels);
	memset(v, 0, sizeof(*v));
}

void tw__wire_brochure_answer_free(tw_wire_brochure_answer *v)
{
	if (!v)
		return;
	tw__wire_str_free(&v->transport);
	tw__wire_str_free(&v->address);
	tw__wire_free(v->transport_ids);
	tw__wire_str_free(&v->transport_domain_descriptor);
	for (size_t i = 0; i < v->num_channel_ids; i++)
		tw__channel_ids_drop(&v->channel_ids[i]);
	tw__wire_free(v->channel_ids);
	tw__channel_devices_free(v->num_channels, v->channels);
	for (size_t i = 0; i < v->num_device_pairs; i++)
		tw__device_pair_drop(&v->device_pairs[i]);
	tw__wire_free(v->device_pairs);
	memset(v, 0, sizeof(*v));
}

void tw__wire_descriptor_free(tw_wire_descriptor *v)
{
	if (!v)
		return;
	tw__wire_str_free(&v->metadata);
	for (size_t i = 0; i < v->num_payloads; i++)
		tw__wire_str_free(&v->payloads[i].metadata);
	tw__wire_free(v->payloads);
	for (size_t i = 0; i < v->num_tensors; i++) {
		tw__device_free(&v->tensors[i].source_device);
		tw__device_free(&v->tensors[i].target_device);
		tw__wire_str_free(&v->tensors[i].metadata);
	}
	tw__wire_free(v->tensors);
	memset(v, 0, sizeof(*v));
}

void tw__wire_descriptor_reply_free(tw_wire_descriptor_reply *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->num_target_devices; i++)
		tw__device_free(&v->target_devices[i]);
	tw__wire_free(v->target_devices);
	memset(v, 0, sizeof(*v));
}

void tw__wire_mpt_packet_free(tw_wire_mpt_packet *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->num_lanes; i++)
		tw__wire_str_free(&v->lanes[i].address);
	tw__wire_free(v->lanes);
	memset(v, 0, sizeof(*v));
}

void tw__wire_cma_descriptor_free(tw_wire_cma_descriptor *v)
{
	if (v)
		memset(v, 0, sizeof(*v));
}

void tw__wire_xth_descriptor_free(tw_wire_xth_descriptor *v)
{
	if (v)
		memset(v, 0, sizeof(*v));
}

void tw__wire_cuda_xth_descriptor_free(tw_wire_cuda_xth_descriptor *v)
{
	if (v)
		memset(v, 0, sizeof(*v));
}

void tw__wire_cuda_gdr_setup_free(tw_wire_cuda_gdr_setup *v)
{
	if (!v)
		return;
	for (size_t i = 0; v->row && i < v->rows; i++)
		tw__wire_free(v->row[i].qps);
	tw__wire_free(v->row);
	memset(v, 0, sizeof(*v));
}

void tw__wire_cuda_gdr_index_free(tw_wire_cuda_gdr_index *v)
{
	if (v)
		memset(v, 0, sizeof(*v));
}

void tw__wire_cuda_ipc_device_free(tw_wire_cuda_ipc_device *v)
{
	if (!v)
		return;
	tw__wire_str_free(&v->boot_id);
	tw__wire_str_free(&v->device_uuid);
}

void tw__wire_cuda_ipc_descriptor_free(tw_wire_cuda_ipc_descriptor *v)
{
	if (!v)
		return;
	tw__wire_str_free(&v->process);
	tw__wire_str_free(&v->mem_handle);
	for (size_t i = 0; i < v->num_events; i++)
		tw__wire_str_free(&v->events[i]);
	tw__wire_free(v->events);
	memset(v, 0, sizeof(*v));
}

void tw__wire_cuda_basic_device_free(tw_wire_cuda_basic_device *v)
{
	if (!v)
		return;
	tw__wire_str_free(&v->device_type);
	tw__wire_str_free(&v->cpu_descriptor);
}

/* ---- map and array decoders ------------------------------------------------ */

/* map<string,string> */
static tw_status_t tw__dec_kv_map(tw__dec *d, size_t *n_out, tw_wire_kv **out)
{
	size_t n = 0;
	tw_status_t st = tw__nop_get_map_count(&d->r, TW__MIN_KV, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(**out), (void **)out);
	if (st != TW_OK)
		return st;
	*n_out = n;
	for (size_t i = 0; i < n; i++) {
		size_t mark = tw__dec_push(d, "[%zu]", i);
		st = tw__dec_member_str(d, "key", &(*out)[i].key);
		if (st == TW_OK)
			st = tw__dec_member_str(d, "value", &(*out)[i].value);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark);
	}
	return tw__dedupe(d, *out, n_out, sizeof(**out), tw__kv_cmp, tw__kv_drop);
}

/* map<Device,string> */
static tw_status_t tw__dec_device_desc_map(tw__dec *d, size_t *n_out, tw_wire_device_desc **out)
{
	size_t n = 0;
	tw_status_t st = tw__nop_get_map_count(&d->r, TW__MIN_DEVICE_DESC, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(**out), (void **)out);
	if (st != TW_OK)
		return st;
	*n_out = n;
	for (size_t i = 0; i < n; i++) {
		size_t mark = tw__dec_push(d, "[%zu].key", i);
		st = tw__dec_device(d, &(*out)[i].device);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark);
		mark = tw__dec_push(d, "[%zu].value", i);
		st = tw__dec_str(d, &(*out)[i].descriptor);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark);
	}
	return tw__dedupe(d, *out, n_out, sizeof(**out), tw__device_desc_cmp,
	                  tw__device_desc_drop);
}

/* map<string, map<Device,string>> */
static tw_status_t tw__dec_channel_devices_map(tw__dec *d, size_t *n_out,
                                               tw_wire_channel_devices **out)
{
	size_t n = 0;
	tw_status_t st = tw__nop_get_map_count(&d->r, TW__MIN_CHANNEL_DEVICES, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(**out), (void **)out);
	if (st != TW_OK)
		return st;
	*n_out = n;
	for (size_t i = 0; i < n; i++) {
		tw_wire_channel_devices *e = &(*out)[i];
		size_t mark = tw__dec_push(d, "[%zu]", i);
		st = tw__dec_member_str(d, "key", &e->channel);
		if (st != TW_OK)
			return st;
		size_t mark2 = tw__dec_push(d, ".value");
		st = tw__dec_device_desc_map(d, &e->num_devices, &e->devices);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark2);
		tw__dec_pop(d, mark);
	}
	return tw__dedupe(d, *out, n_out, sizeof(**out), tw__channel_devices_cmp,
	                  tw__channel_devices_drop);
}

/* map<uint64,uint64> */
static tw_status_t tw__dec_id_map(tw__dec *d, size_t *n_out, tw_wire_id_entry **out)
{
	size_t n = 0;
	tw_status_t st = tw__nop_get_map_count(&d->r, TW__MIN_ID_ENTRY, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(**out), (void **)out);
	if (st != TW_OK)
		return st;
	*n_out = n;
	for (size_t i = 0; i < n; i++) {
		size_t mark = tw__dec_push(d, "[%zu]", i);
		st = tw__dec_member_uint(d, "key", 8, &(*out)[i].key);
		if (st == TW_OK)
			st = tw__dec_member_uint(d, "value", 8, &(*out)[i].id);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark);
	}
	return tw__dedupe(d, *out, n_out, sizeof(**out), tw__id_entry_cmp, tw__id_entry_drop);
}

/* map<string, vector<uint64>> (the vectors are Binary, spec 1.6) */
static tw_status_t tw__dec_channel_ids_map(tw__dec *d, size_t *n_out, tw_wire_channel_ids **out)
{
	size_t n = 0;
	tw_status_t st = tw__nop_get_map_count(&d->r, TW__MIN_CHANNEL_IDS, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(**out), (void **)out);
	if (st != TW_OK)
		return st;
	*n_out = n;
	for (size_t i = 0; i < n; i++) {
		tw_wire_channel_ids *e = &(*out)[i];
		size_t mark = tw__dec_push(d, "[%zu]", i);
		st = tw__dec_member_str(d, "key", &e->channel);
		if (st != TW_OK)
			return st;
		size_t mark2 = tw__dec_push(d, ".value");
		st = tw__nop_get_u64_vector(&d->r, &e->ids, &e->num_ids);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark2);
		tw__dec_pop(d, mark);
	}
	return tw__dedupe(d, *out, n_out, sizeof(**out), tw__channel_ids_cmp, tw__channel_ids_drop);
}

/* std::pair: an Array of exactly 2 (spec 1.8). */
static tw_status_t tw__dec_pair_header(tw__dec *d)
{
	size_t n = 0;
	tw_status_t st = tw__nop_get_array_count(&d->r, 1, &n);
	if (st != TW_OK)
		return st;
	if (n != 2)
		return tw__nop_fail(&d->r, "a pair is an array of 2 elements, this one has %zu", n);
	return TW_OK;
}

/* map<pair<Device,Device>, string> */
static tw_status_t tw__dec_device_pair_map(tw__dec *d, size_t *n_out, tw_wire_device_pair **out)
{
	size_t n = 0;
	tw_status_t st = tw__nop_get_map_count(&d->r, TW__MIN_DEVICE_PAIR, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(**out), (void **)out);
	if (st != TW_OK)
		return st;
	*n_out = n;
	for (size_t i = 0; i < n; i++) {
		tw_wire_device_pair *e = &(*out)[i];
		size_t mark = tw__dec_push(d, "[%zu].key", i);
		st = tw__dec_pair_header(d);
		if (st != TW_OK)
			return st;
		size_t mark2 = tw__dec_push(d, ".first");
		st = tw__dec_device(d, &e->server_device);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark2);
		mark2 = tw__dec_push(d, ".second");
		st = tw__dec_device(d, &e->client_device);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark);
		mark = tw__dec_push(d, "[%zu].value", i);
		st = tw__dec_str(d, &e->channel);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, mark);
	}
	return tw__dedupe(d, *out, n_out, sizeof(**out), tw__device_pair_cmp, tw__device_pair_drop);
}

/* A struct member that is itself a map/array: pushes ".name" around `st_expr`. */
#define TW__MEMBER(d, name, call)                              \
	do {                                                       \
		size_t mark_ = tw__dec_push((d), "." name);            \
		tw_status_t st_ = (call);                              \
		if (st_ != TW_OK)                                      \
			return st_;                                        \
		tw__dec_pop((d), mark_);                               \
	} while (0)

/* ---- packet bodies ----------------------------------------------------------- */

static tw_status_t tw__dec_packet(tw__dec *d, void *out)
{
	tw_wire_packet *v = out;
	int32_t kind = 0;
	tw_status_t st = tw__nop_get_variant(&d->r, 2, &kind);
	if (st != TW_OK)
		return st;
	v->kind = kind;
	if (kind == TW_PACKET_SPONTANEOUS) {
		tw__dec_push(d, ".SpontaneousConnection");
		st = tw__nop_get_struct(&d->r, 1);
		if (st == TW_OK)
			st = tw__dec_member_str(d, "contextName", &v->context_name);
	} else if (kind == TW_PACKET_REQUESTED) {
		tw__dec_push(d, ".RequestedConnection");
		st = tw__nop_get_struct(&d->r, 1);
		if (st == TW_OK)
			st = tw__dec_member_uint(d, "registrationId", 8, &v->registration_id);
	}
	return st;
}

static tw_status_t tw__dec_brochure(tw__dec *d, void *out)
{
	tw_wire_brochure *v = out;
	tw_status_t st = tw__nop_get_struct(&d->r, 2);
	if (st != TW_OK)
		return st;
	TW__MEMBER(d, "transportDomainDescriptors",
	           tw__dec_kv_map(d, &v->num_transports, &v->transports));
	TW__MEMBER(d, "channelDeviceDescriptors",
	           tw__dec_channel_devices_map(d, &v->num_channels, &v->channels));
	return TW_OK;
}

static tw_status_t tw__dec_brochure_answer(tw__dec *d, void *out)
{
	tw_wire_brochure_answer *v = out;
	tw_status_t st = tw__nop_get_struct(&d->r, 7);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "transport", &v->transport);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "address", &v->address);
	if (st != TW_OK)
		return st;
	TW__MEMBER(d, "transportRegistrationIds",
	           tw__dec_id_map(d, &v->num_transport_ids, &v->transport_ids));
	st = tw__dec_member_str(d, "transportDomainDescriptor", &v->transport_domain_descriptor);
	if (st != TW_OK)
		return st;
	TW__MEMBER(d, "channelRegistrationIds",
	           tw__dec_channel_ids_map(d, &v->num_channel_ids, &v->channel_ids));
	TW__MEMBER(d, "channelDeviceDescriptors",
	           tw__dec_channel_devices_map(d, &v->num_channels, &v->channels));
	TW__MEMBER(d, "channelForDevicePair",
	           tw__dec_device_pair_map(d, &v->num_device_pairs, &v->device_pairs));
	return TW_OK;
}

static tw_status_t tw__dec_payload_desc(tw__dec *d, tw_wire_payload_desc *p)
{
	tw_status_t st = tw__nop_get_struct(&d->r, 2);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "length", 8, &p->length);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "metadata", &p->metadata);
	return st;
}

static tw_status_t tw__dec_tensor_desc(tw__dec *d, tw_wire_tensor_desc *t)
{
	tw_status_t st = tw__nop_get_struct(&d->r, 4);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "length", 8, &t->length);
	if (st != TW_OK)
		return st;
	TW__MEMBER(d, "sourceDevice", tw__dec_device(d, &t->source_device));
	size_t mark = tw__dec_push(d, ".targetDevice");
	bool nil = false;
	st = tw__nop_get_optional_nil(&d->r, &nil);
	if (st == TW_OK && !nil)
		st = tw__dec_device(d, &t->target_device);
	if (st != TW_OK)
		return st;
	tw__dec_pop(d, mark);
	t->has_target_device = !nil;
	return tw__dec_member_str(d, "metadata", &t->metadata);
}

static tw_status_t tw__dec_descriptor(tw__dec *d, void *out)
{
	tw_wire_descriptor *v = out;
	size_t n = 0;
	tw_status_t st = tw__nop_get_struct(&d->r, 3);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "metadata", &v->metadata);
	if (st != TW_OK)
		return st;

	size_t mark = tw__dec_push(d, ".payloads");
	st = tw__nop_get_array_count(&d->r, TW__MIN_PAYLOAD, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(*v->payloads), (void **)&v->payloads);
	if (st != TW_OK)
		return st;
	v->num_payloads = n;
	for (size_t i = 0; i < n; i++) {
		size_t m = tw__dec_push(d, "[%zu]", i);
		st = tw__dec_payload_desc(d, &v->payloads[i]);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, m);
	}
	tw__dec_pop(d, mark);

	mark = tw__dec_push(d, ".tensors");
	st = tw__nop_get_array_count(&d->r, TW__MIN_TENSOR, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(*v->tensors), (void **)&v->tensors);
	if (st != TW_OK)
		return st;
	v->num_tensors = n;
	for (size_t i = 0; i < n; i++) {
		size_t m = tw__dec_push(d, "[%zu]", i);
		st = tw__dec_tensor_desc(d, &v->tensors[i]);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, m);
	}
	tw__dec_pop(d, mark);
	return TW_OK;
}

static tw_status_t tw__dec_descriptor_reply(tw__dec *d, void *out)
{
	tw_wire_descriptor_reply *v = out;
	size_t n = 0;
	tw_status_t st = tw__nop_get_struct(&d->r, 1);
	if (st != TW_OK)
		return st;
	size_t mark = tw__dec_push(d, ".targetDevices");
	st = tw__nop_get_array_count(&d->r, TW__MIN_DEVICE, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(*v->target_devices), (void **)&v->target_devices);
	if (st != TW_OK)
		return st;
	v->num_target_devices = n;
	for (size_t i = 0; i < n; i++) {
		size_t m = tw__dec_push(d, "[%zu]", i);
		st = tw__dec_device(d, &v->target_devices[i]);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, m);
	}
	tw__dec_pop(d, mark);
	return TW_OK;
}

static tw_status_t tw__dec_mpt_packet(tw__dec *d, void *out)
{
	tw_wire_mpt_packet *v = out;
	int32_t kind = 0;
	size_t n = 0;
	tw_status_t st = tw__nop_get_variant(&d->r, 2, &kind);
	if (st != TW_OK)
		return st;
	v->kind = kind;
	if (kind == TW_MPT_CLIENT_HELLO) {
		tw__dec_push(d, ".ClientHello");
		st = tw__nop_get_struct(&d->r, 1);
		if (st == TW_OK)
			st = tw__dec_member_uint(d, "registrationId", 8, &v->registration_id);
		return st;
	}
	if (kind != TW_MPT_SERVER_HELLO)
		return TW_OK;
	tw__dec_push(d, ".ServerHello");
	st = tw__nop_get_struct(&d->r, 1);
	if (st != TW_OK)
		return st;
	tw__dec_push(d, ".laneAdvertisements");
	st = tw__nop_get_array_count(&d->r, TW__MIN_LANE, &n);
	if (st == TW_OK)
		st = tw__dec_array(d, n, sizeof(*v->lanes), (void **)&v->lanes);
	if (st != TW_OK)
		return st;
	v->num_lanes = n;
	for (size_t i = 0; i < n; i++) {
		size_t m = tw__dec_push(d, "[%zu]", i);
		st = tw__nop_get_struct(&d->r, 2);
		if (st == TW_OK)
			st = tw__dec_member_str(d, "address", &v->lanes[i].address);
		if (st == TW_OK)
			st = tw__dec_member_uint(d, "registrationId", 8, &v->lanes[i].registration_id);
		if (st != TW_OK)
			return st;
		tw__dec_pop(d, m);
	}
	return TW_OK;
}

static tw_status_t tw__dec_cma_descriptor(tw__dec *d, void *out)
{
	tw_wire_cma_descriptor *v = out;
	uint64_t pid = 0;
	tw_status_t st = tw__nop_get_struct(&d->r, 2);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "pid", 4, &pid);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "ptr", 8, &v->ptr);
	if (st == TW_OK)
		v->pid = (uint32_t)pid;
	return st;
}

static tw_status_t tw__dec_xth_descriptor(tw__dec *d, void *out)
{
	tw_wire_xth_descriptor *v = out;
	tw_status_t st = tw__nop_get_struct(&d->r, 1);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "ptr", 8, &v->ptr);
	return st;
}

static tw_status_t tw__dec_cuda_xth_descriptor(tw__dec *d, void *out)
{
	tw_wire_cuda_xth_descriptor *v = out;
	int64_t dev = 0;
	tw_status_t st = tw__nop_get_struct(&d->r, 4);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "startEvent", 8, &v->start_event);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "srcPtr", 8, &v->src_ptr);
	if (st == TW_OK)
		st = tw__dec_member_int(d, "srcDeviceIdx", 4, &dev);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "srcStream", 8, &v->src_stream);
	v->src_device = (int32_t)dev;
	return st;
}

static tw_status_t tw__dec_cuda_ipc_device(tw__dec *d, void *out)
{
	tw_wire_cuda_ipc_device *v = out;
	tw_status_t st = tw__nop_get_struct(&d->r, 3);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "bootId", &v->boot_id);
	if (st == TW_OK)
		st = tw__dec_member_int(d, "pid", 8, &v->pid);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "deviceUuid", &v->device_uuid);
	return st;
}

static tw_status_t tw__dec_cuda_ipc_descriptor(tw__dec *d, void *out)
{
	tw_wire_cuda_ipc_descriptor *v = out;
	int64_t dev = 0;
	tw_status_t st = tw__nop_get_struct(&d->r, 3);
	if (st == TW_OK)
		st = tw__dec_member_int(d, "deviceIdx", 4, &dev);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "slotIdx", 8, &v->slot);
	v->device = (int32_t)dev;
	if (st != TW_OK)
		return st;
	size_t mark = tw__dec_push(d, ".outboxInfo");
	bool nil = false;
	st = tw__nop_get_optional_nil(&d->r, &nil);
	if (st != TW_OK)
		return st;
	if (nil) {
		tw__dec_pop(d, mark);
		return TW_OK;
	}
	v->has_outbox = true;
	st = tw__nop_get_struct(&d->r, 3);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "processIdentifier", &v->process);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "memHandle", &v->mem_handle);
	size_t n = 0;
	if (st == TW_OK) {
		size_t m2 = tw__dec_push(d, ".eventHandles");
		st = tw__nop_get_array_count(&d->r, 1, &n);
		if (st == TW_OK)
			st = tw__dec_array(d, n, sizeof(*v->events), (void **)&v->events);
		if (st == TW_OK)
			v->num_events = n;
		for (size_t i = 0; st == TW_OK && i < n; i++) {
			size_t m3 = tw__dec_push(d, "[%zu]", i);
			st = tw__dec_str(d, &v->events[i]);
			if (st == TW_OK)
				tw__dec_pop(d, m3);
		}
		if (st == TW_OK)
			tw__dec_pop(d, m2);
	}
	if (st == TW_OK)
		tw__dec_pop(d, mark);
	return st;
}

static tw_status_t tw__dec_gdr_u32(tw__dec *d, const char *name, uint32_t *out)
{
	uint64_t u = 0;
	tw_status_t st = tw__dec_member_uint(d, name, 4, &u);
	*out = (uint32_t)u;
	return st;
}

static tw_status_t tw__dec_gdr_qp(tw__dec *d, tw_wire_cuda_gdr_qp *v)
{
	tw_status_t st = tw__nop_get_struct(&d->r, 5);
	if (st == TW_OK)
		st = tw__dec_gdr_u32(d, "localIdentifier", &v->lid);
	if (st == TW_OK) {
		size_t mark = tw__dec_push(d, ".globalIdentifier");
		st = tw__nop_get_struct(&d->r, 2);
		if (st == TW_OK)
			st = tw__dec_member_uint(d, "subnetPrefix", 8, &v->gid_subnet_prefix);
		if (st == TW_OK)
			st = tw__dec_member_uint(d, "interfaceId", 8, &v->gid_interface_id);
		if (st == TW_OK)
			tw__dec_pop(d, mark);
	}
	if (st == TW_OK)
		st = tw__dec_gdr_u32(d, "queuePairNumber", &v->qpn);
	if (st == TW_OK)
		st = tw__dec_gdr_u32(d, "maximumTransmissionUnit", &v->mtu);
	if (st == TW_OK)
		st = tw__dec_gdr_u32(d, "maximumMessageSize", &v->max_msg_size);
	return st;
}

static tw_status_t tw__dec_cuda_gdr_setup(tw__dec *d, void *out)
{
	tw_wire_cuda_gdr_setup *v = out;
	size_t rows = 0;
	tw_status_t st = tw__nop_get_struct(&d->r, 1);
	size_t mark = tw__dec_push(d, ".setupInfo");
	if (st == TW_OK)
		st = tw__nop_get_array_count(&d->r, 2, &rows);
	if (st == TW_OK)
		st = tw__dec_array(d, rows, sizeof(*v->row), (void **)&v->row);
	if (st == TW_OK)
		v->rows = rows;
	for (size_t i = 0; st == TW_OK && i < rows; i++) {
		size_t m2 = tw__dec_push(d, "[%zu]", i);
		size_t cols = 0;
		st = tw__nop_get_array_count(&d->r, TW__MIN_GDR_QP, &cols);
		if (st == TW_OK)
			st = tw__dec_array(d, cols, sizeof(*v->row[i].qps), (void **)&v->row[i].qps);
		if (st == TW_OK)
			v->row[i].n = cols;
		for (size_t j = 0; st == TW_OK && j < cols; j++) {
			size_t m3 = tw__dec_push(d, "[%zu]", j);
			st = tw__dec_gdr_qp(d, &v->row[i].qps[j]);
			if (st == TW_OK)
				tw__dec_pop(d, m3);
		}
		if (st == TW_OK)
			tw__dec_pop(d, m2);
	}
	if (st == TW_OK)
		tw__dec_pop(d, mark);
	return st;
}

static tw_status_t tw__dec_cuda_gdr_index(tw__dec *d, void *out)
{
	tw_wire_cuda_gdr_index *v = out;
	tw_status_t st = tw__nop_get_struct(&d->r, 1);
	if (st == TW_OK)
		st = tw__dec_member_uint(d, "index", 8, &v->value);
	return st;
}

static tw_status_t tw__dec_cuda_basic_device(tw__dec *d, void *out)
{
	tw_wire_cuda_basic_device *v = out;
	tw_status_t st = tw__nop_get_struct(&d->r, 2);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "deviceType", &v->device_type);
	if (st == TW_OK)
		st = tw__dec_member_str(d, "descriptor", &v->cpu_descriptor);
	return st;
}

/* Runs one body decoder over (bytes, len) into `local` (zeroed by the caller);
 * on failure frees it with `free_fn` and copies the detail out. */
static tw_status_t tw__decode_run(const void *bytes, size_t len, size_t *budget,
                                  const char *root, tw_status_t (*body)(tw__dec *, void *),
                                  void *local, void (*free_fn)(void *), size_t *consumed_out,
                                  char *detail, size_t detail_len)
{
	tw__dec d;
	tw__nop_reader_init(&d.r, bytes, len);
	d.left = d.limit = budget ? *budget : SIZE_MAX;
	d.path_len = 0;
	d.path[0] = '\0';
	tw__dec_push(&d, "%s", root);
	d.r.field = d.path;
	tw_status_t st = body(&d, local);
	if (st != TW_OK) {
		free_fn(local);
		if (detail && detail_len) {
			if (d.r.detail[0] == '\0')
				snprintf(d.r.detail, sizeof(d.r.detail), "%s: decoding failed", root);
			snprintf(detail, detail_len, "%s", d.r.detail);
		}
		return st;
	}
	if (consumed_out)
		*consumed_out = d.r.pos;
	if (budget)
		*budget = d.left;
	if (detail && detail_len)
		detail[0] = '\0';
	return TW_OK;
}

#define TW__DEFINE_DECODE(T, root)                                                          \
	static void tw__##T##_free_any(void *p) { tw__wire_##T##_free(p); }                      \
	tw_status_t tw__wire_decode_##T##_within(const void *bytes, size_t len, size_t *budget, \
	                                         tw_wire_##T *out, size_t *consumed_out,       \
	                                         char *detail, size_t detail_len)              \
	{                                                                                       \
		tw_wire_##T local;                                                                  \
		size_t consumed = 0;                                                                \
		memset(&local, 0, sizeof(local));                                                   \
		tw_status_t st = tw__decode_run(bytes, len, budget, root, tw__dec_##T, &local,      \
		                                tw__##T##_free_any, &consumed, detail, detail_len); \
		if (st != TW_OK)                                                                    \
			return st;                                                                      \
		*out = local;                                                                       \
		if (consumed_out)                                                                   \
			*consumed_out = consumed;                                                       \
		return TW_OK;                                                                       \
	}                                                                                       \
	tw_status_t tw__wire_decode_##T(const void *bytes, size_t len, tw_wire_##T *out,       \
	                                size_t *consumed_out, char *detail, size_t detail_len) \
	{                                                                                       \
		return tw__wire_decode_##T##_within(bytes, len, NULL, out, consumed_out, detail,    \
		                                    detail_len);                                    \
	}

TW__DEFINE_DECODE(packet, "Packet")
TW__DEFINE_DECODE(brochure, "Brochure")
TW__DEFINE_DECODE(brochure_answer, "BrochureAnswer")
TW__DEFINE_DECODE(descriptor, "Descriptor")
TW__DEFINE_DECODE(descriptor_reply, "DescriptorReply")
TW__DEFINE_DECODE(mpt_packet, "MptPacket")
TW__DEFINE_DECODE(cma_descriptor, "CmaDescriptor")
TW__DEFINE_DECODE(xth_descriptor, "XthDescriptor")
TW__DEFINE_DECODE(cuda_xth_descriptor, "CudaXthDescriptor")
TW__DEFINE_DECODE(cuda_basic_device, "CudaBasicDeviceDescriptor")
TW__DEFINE_DECODE(cuda_ipc_device, "CudaIpcDeviceDescriptor")
TW__DEFINE_DECODE(cuda_ipc_descriptor, "CudaIpcDescriptor")
TW__DEFINE_DECODE(cuda_gdr_setup, "CudaGdrHandshakeSetupInfo")
TW__DEFINE_DECODE(cuda_gdr_index, "CudaGdrIndex")

/* ---- encoders ---------------------------------------------------------------- */

static void tw__enc_str(tw_nop_writer *w, const tw_wire_str *s)
{
	tw__nop_put_string(w, s->s, s->n);
}

static void tw__enc_device(tw_nop_writer *w, const tw_wire_device *dev)
{
	tw__nop_put_struct(w, 2);
	tw__enc_str(w, &dev->type);
	tw__nop_put_int(w, dev->index);
}

static void tw__enc_channel_devices(tw_nop_writer *w, size_t n,
                                    const tw_wire_channel_devices *a)
{
	tw__nop_put_map(w, n);
	for (size_t i = 0; i < n; i++) {
		tw__enc_str(w, &a[i].channel);
		tw__nop_put_map(w, a[i].num_devices);
		for (size_t j = 0; j < a[i].num_devices; j++) {
			tw__enc_device(w, &a[i].devices[j].device);
			tw__enc_str(w, &a[i].devices[j].descriptor);
		}
	}
}

void tw__wire_encode_packet(tw_nop_writer *w, const tw_wire_packet *v)
{
	switch (v->kind) {
	case TW_PACKET_SPONTANEOUS:
		tw__nop_put_variant(w, 0);
		tw__nop_put_struct(w, 1);
		tw__enc_str(w, &v->context_name);
		break;
	case TW_PACKET_REQUESTED:
		tw__nop_put_variant(w, 1);
		tw__nop_put_struct(w, 1);
		tw__nop_put_uint(w, v->registration_id);
		break;
	case TW_PACKET_EMPTY:
		tw__nop_put_variant(w, -1);
		tw__nop_put_nil(w);
		break;
	default:
		w->invalid = true;
		break;
	}
}

void tw__wire_encode_brochure(tw_nop_writer *w, const tw_wire_brochure *v)
{
	tw__nop_put_struct(w, 2);
	tw__nop_put_map(w, v->num_transports);
	for (size_t i = 0; i < v->num_transports; i++) {
		tw__enc_str(w, &v->transports[i].key);
		tw__enc_str(w, &v->transports[i].value);
	}
	tw__enc_channel_devices(w, v->num_channels, v->channels);
}

void tw__wire_encode_brochure_answer(tw_nop_writer *w, const tw_wire_brochure_answer *v)
{
	tw__nop_put_struct(w, 7);
	tw__enc_str(w, &v->transport);
	tw__enc_str(w, &v->address);
	tw__nop_put_map(w, v->num_transport_ids);
	for (size_t i = 0; i < v->num_transport_ids; i++) {
		tw__nop_put_uint(w, v->transport_ids[i].key);
		tw__nop_put_uint(w, v->transport_ids[i].id);
	}
	tw__enc_str(w, &v->transport_domain_descriptor);
	tw__nop_put_map(w, v->num_channel_ids);
	for (size_t i = 0; i < v->num_channel_ids; i++) {
		tw__enc_str(w, &v->channel_ids[i].channel);
		tw__nop_put_u64_vector(w, v->channel_ids[i].ids, v->channel_ids[i].num_ids);
	}
	tw__enc_channel_devices(w, v->num_channels, v->channels);
	tw__nop_put_map(w, v->num_device_pairs);
	for (size_t i = 0; i < v->num_device_pairs; i++) {
		tw__nop_put_array(w, 2);
		tw__enc_device(w, &v->device_pairs[i].server_device);
		tw__enc_device(w, &v->device_pairs[i].client_device);
		tw__enc_str(w, &v->device_pairs[i].channel);
	}
}

void tw__wire_encode_descriptor(tw_nop_writer *w, const tw_wire_descriptor *v)
{
	tw__nop_put_struct(w, 3);
	tw__enc_str(w, &v->metadata);
	tw__nop_put_array(w, v->num_payloads);
	for (size_t i = 0; i < v->num_payloads; i++) {
		tw__nop_put_struct(w, 2);
		tw__nop_put_uint(w, v->payloads[i].length);
		tw__enc_str(w, &v->payloads[i].metadata);
	}
	tw__nop_put_array(w, v->num_tensors);
	for (size_t i = 0; i < v->num_tensors; i++) {
		const tw_wire_tensor_desc *t = &v->tensors[i];
		tw__nop_put_struct(w, 4);
		tw__nop_put_uint(w, t->length);
		tw__enc_device(w, &t->source_device);
		if (t->has_target_device)
			tw__enc_device(w, &t->target_device);
		else
			tw__nop_put_nil(w);
		tw__enc_str(w, &t->metadata);
	}
}

void tw__wire_encode_descriptor_reply(tw_nop_writer *w, const tw_wire_descriptor_reply *v)
{
	tw__nop_put_struct(w, 1);
	tw__nop_put_array(w, v->num_target_devices);
	for (size_t i = 0; i < v->num_target_devices; i++)
		tw__enc_device(w, &v->target_devices[i]);
}

void tw__wire_encode_mpt_packet(tw_nop_writer *w, const tw_wire_mpt_packet *v)
{
	switch (v->kind) {
	case TW_MPT_SERVER_HELLO:
		tw__nop_put_variant(w, 0);
		tw__nop_put_struct(w, 1);
		tw__nop_put_array(w, v->num_lanes);
		for (size_t i = 0; i < v->num_lanes; i++) {
			tw__nop_put_struct(w, 2);
			tw__enc_str(w, &v->lanes[i].address);
			tw__nop_put_uint(w, v->lanes[i].registration_id);
		}
		break;
	case TW_MPT_CLIENT_HELLO:
		tw__nop_put_variant(w, 1);
		tw__nop_put_struct(w, 1);
		tw__nop_put_uint(w, v->registration_id);
		break;
	case TW_PACKET_EMPTY:
		tw__nop_put_variant(w, -1);
		tw__nop_put_nil(w);
		break;
	default:
		w->invalid = true;
		break;
	}
}

void tw__wire_encode_cma_descriptor(tw_nop_writer *w, const tw_wire_cma_descriptor *v)
{
	tw__nop_put_struct(w, 2);
	tw__nop_put_uint(w, v->pid);
	tw__nop_put_uint(w, v->ptr);
}

void tw__wire_encode_xth_descriptor(tw_nop_writer *w, const tw_wire_xth_descriptor *v)
{
	tw__nop_put_struct(w, 1);
	tw__nop_put_uint(w, v->ptr);
}

void tw__wire_encode_cuda_xth_descriptor(tw_nop_writer *w, const tw_wire_cuda_xth_descriptor *v)
{
	tw__nop_put_struct(w, 4);
	tw__nop_put_uint(w, v->start_event);
	tw__nop_put_uint(w, v->src_ptr);
	tw__nop_put_int(w, v->src_device);
	tw__nop_put_uint(w, v->src_stream);
}

void tw__wire_encode_cuda_basic_device(tw_nop_writer *w, const tw_wire_cuda_basic_device *v)
{
	tw__nop_put_struct(w, 2);
	tw__enc_str(w, &v->device_type);
	tw__enc_str(w, &v->cpu_descriptor);
}

void tw__wire_encode_cuda_ipc_device(tw_nop_writer *w, const tw_wire_cuda_ipc_device *v)
{
	tw__nop_put_struct(w, 3);
	tw__enc_str(w, &v->boot_id);
	tw__nop_put_int(w, v->pid);
	tw__enc_str(w, &v->device_uuid);
}

void tw__wire_encode_cuda_ipc_descriptor(tw_nop_writer *w, const tw_wire_cuda_ipc_descriptor *v)
{
	tw__nop_put_struct(w, 3);
	tw__nop_put_int(w, v->device);
	tw__nop_put_uint(w, v->slot);
	if (!v->has_outbox) {
		tw__nop_put_nil(w);
		return;
	}
	tw__nop_put_struct(w, 3);
	tw__enc_str(w, &v->process);
	tw__enc_str(w, &v->mem_handle);
	tw__nop_put_array(w, v->num_events);
	for (size_t i = 0; i < v->num_events; i++)
		tw__enc_str(w, &v->events[i]);
}

void tw__wire_encode_cuda_gdr_setup(tw_nop_writer *w, const tw_wire_cuda_gdr_setup *v)
{
	tw__nop_put_struct(w, 1);
	tw__nop_put_array(w, v->rows);
	for (size_t i = 0; i < v->rows; i++) {
		tw__nop_put_array(w, v->row[i].n);
		for (size_t j = 0; j < v->row[i].n; j++) {
			const tw_wire_cuda_gdr_qp *q = &v->row[i].qps[j];
			tw__nop_put_struct(w, 5);
			tw__nop_put_uint(w, q->lid);
			tw__nop_put_struct(w, 2);
			tw__nop_put_uint(w, q->gid_subnet_prefix);
			tw__nop_put_uint(w, q->gid_interface_id);
			tw__nop_put_uint(w, q->qpn);
			tw__nop_put_uint(w, q->mtu);
			tw__nop_put_uint(w, q->max_msg_size);
		}
	}
}

void tw__wire_encode_cuda_gdr_index(tw_nop_writer *w, const tw_wire_cuda_gdr_index *v)
{
	tw__nop_put_struct(w, 1);
	tw__nop_put_uint(w, v->value);
}
