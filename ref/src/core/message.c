/*
 * message.c - messages as the core holds them: the copy of an application's
 * message made by tw_pipe_write (validated, metadata gathered in one block,
 * its Descriptor encoded once, spec 3.10), and the application's view of a
 * received Descriptor. Payload and tensor bytes are never copied here.
 *
 * This file must not know about connections or the pipe state machine.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "platform/mutant.h"
#include "platform/platform.h"

bool tw__device_valid(const tw_device *d)
{
	size_t n = strnlen(d->type, TW_DEVICE_TYPE_MAX);
	return n > 0 && n < TW_DEVICE_TYPE_MAX;
}

bool tw__device_eq(const tw_device *a, const tw_device *b)
{
	return a->index == b->index && strncmp(a->type, b->type, TW_DEVICE_TYPE_MAX) == 0;
}

bool tw__device_is_cpu(const tw_device *d)
{
	return strncmp(d->type, "cpu", TW_DEVICE_TYPE_MAX) == 0;
}

const char *tw__device_str(const tw_device *d, char *buf, size_t buflen)
{
	snprintf(buf, buflen, "%.*s:%d", TW_DEVICE_TYPE_MAX, d->type, (int)d->index);
	return buf;
}

void tw__device_from_wire(tw_device *dst, const tw_wire_device *src)
{
	memset(dst, 0, sizeof(*dst));
	size_t n = src->type.n < TW_DEVICE_TYPE_MAX - 1 ? src->type.n : TW_DEVICE_TYPE_MAX - 1;
	memcpy(dst->type, src->type.s, n);
	dst->index = src->index;
}

static void tw__wire_device_view(tw_wire_device *dst, const tw_device *src)
{
	dst->type.s = (char *)src->type;
	dst->type.n = strnlen(src->type, TW_DEVICE_TYPE_MAX);
	dst->index = src->index;
}

void tw__out_msg_free(tw_out_msg *m)
{
	if (!m)
		return;
	tw__nop_writer_free(&m->desc);
	tw__free(m->payloads);
	tw__free(m->tensors);
	tw__free(m->targets);
	tw__free(m->meta);
	tw__free(m);
}

static tw_status_t tw__check_bytes(const char *fn, const char *what, size_t i, const void *p,
                                   size_t n)
{
	if (n > 0 && !p)
		return tw__api_fail(TW_ERR_INVAL, "%s: %s %zu is NULL with length %zu", fn, what, i, n);
	return TW_OK;
}

tw_status_t tw__out_msg_new(const char *fn, const tw_message *msg, tw_out_msg **out)
{
	if (!msg)
		return tw__api_fail(TW_ERR_INVAL, "%s: message is NULL", fn);
	if ((msg->num_payloads && !msg->payloads) || (msg->num_tensors && !msg->tensors))
		return tw__api_fail(TW_ERR_INVAL, "%s: payload or tensor array is NULL", fn);
	tw_status_t st = tw__check_bytes(fn, "message metadata", 0, msg->metadata, msg->metadata_length);
	if (st != TW_OK)
		return st;
	size_t meta_total = msg->metadata_length;
	for (size_t i = 0; i < msg->num_payloads; i++) {
		const tw_payload *p = &msg->payloads[i];
		if ((st = tw__check_bytes(fn, "payload", i, p->data, p->length)) != TW_OK ||
		    (st = tw__check_bytes(fn, "payload metadata", i, p->metadata, p->metadata_length)) !=
		            TW_OK)
			return st;
		if (meta_total + p->metadata_length < meta_total)
			return tw__api_fail(TW_ERR_INVAL, "%s: metadata sizes overflow", fn);
		meta_total += p->metadata_length;
	}
	for (size_t i = 0; i < msg->num_tensors; i++) {
		const tw_tensor *t = &msg->tensors[i];
		if ((st = tw__check_bytes(fn, "tensor", i, t->data, t->length)) != TW_OK ||
		    (st = tw__check_bytes(fn, "tensor metadata", i, t->metadata, t->metadata_length)) !=
		            TW_OK)
			return st;
		if (!tw__device_valid(&t->source_device) ||
		    (t->has_target_device && !tw__device_valid(&t->target_device)))
			return tw__api_fail(TW_ERR_INVAL,
			                    "%s: tensor %zu has a device type that is empty or not "
			                    "NUL-terminated within %d bytes",
			                    fn, i, TW_DEVICE_TYPE_MAX);
		if (meta_total + t->metadata_length < meta_total)
			return tw__api_fail(TW_ERR_INVAL, "%s: metadata sizes overflow", fn);
		meta_total += t->metadata_length;
	}

	tw_out_msg *m = tw__calloc(1, sizeof(*m));
	if (!m)
		return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
	tw__nop_writer_init(&m->desc);
	tw__list_init(&m->link);
	m->meta = tw__malloc(meta_total);
	m->payloads = tw__calloc(msg->num_payloads, sizeof(tw_payload));
	m->tensors = tw__calloc(msg->num_tensors, sizeof(tw_tensor));
	m->targets = tw__calloc(msg->num_tensors, sizeof(tw_device));
	tw_wire_payload_desc *wp = tw__calloc(msg->num_payloads, sizeof(*wp));
	tw_wire_tensor_desc *wt = tw__calloc(msg->num_tensors, sizeof(*wt));
	if (!m->meta || !m->payloads || !m->tensors || !m->targets || !wp || !wt)
		goto err_nomem;

	/* Gather metadata into one block and point the copies at it. */
	size_t off = 0;
	uint8_t *meta = m->meta;
	if (msg->metadata_length)
		memcpy(meta, msg->metadata, msg->metadata_length);
	m->msg.metadata = meta;
	m->msg.metadata_length = msg->metadata_length;
	off += msg->metadata_length;
	for (size_t i = 0; i < msg->num_payloads; i++) {
		m->payloads[i] = msg->payloads[i];
		if (m->payloads[i].metadata_length)
			memcpy(meta + off, msg->payloads[i].metadata, m->payloads[i].metadata_length);
		m->payloads[i].metadata = meta + off;
		off += m->payloads[i].metadata_length;
		wp[i].length = m->payloads[i].length;
		wp[i].metadata.s = (char *)m->payloads[i].metadata;
		wp[i].metadata.n = m->payloads[i].metadata_length;
	}
	for (size_t i = 0; i < msg->num_tensors; i++) {
		m->tensors[i] = msg->tensors[i];
		if (m->tensors[i].metadata_length)
			memcpy(meta + off, msg->tensors[i].metadata, m->tensors[i].metadata_length);
		m->tensors[i].metadata = meta + off;
		off += m->tensors[i].metadata_length;
		wt[i].length = m->tensors[i].length;
		tw__wire_device_view(&wt[i].source_device, &m->tensors[i].source_device);
		wt[i].has_target_device = m->tensors[i].has_target_device;
		if (wt[i].has_target_device) {
			tw__wire_device_view(&wt[i].target_device, &m->tensors[i].target_device);
			m->targets[i] = m->tensors[i].target_device;
		}
		wt[i].metadata.s = (char *)m->tensors[i].metadata;
		wt[i].metadata.n = m->tensors[i].metadata_length;
	}
	m->msg.num_payloads = msg->num_payloads;
	m->msg.payloads = m->payloads;
	m->msg.num_tensors = msg->num_tensors;
	m->msg.tensors = m->tensors;

	tw_wire_descriptor wd;
	memset(&wd, 0, sizeof(wd));
	wd.metadata.s = (char *)m->msg.metadata;
	wd.metadata.n = m->msg.metadata_length;
	if (TW_MUTANT("metadata_truncated_at_nul")) /* metadata taken for a C string */
		wd.metadata.n = strnlen(wd.metadata.s, wd.metadata.n);
	wd.num_payloads = msg->num_payloads;
	wd.payloads = wp;
	wd.num_tensors = msg->num_tensors;
	wd.tensors = wt;
	tw__wire_encode_descriptor(&m->desc, &wd);
	tw__free(wp);
	tw__free(wt);
	if (tw__nop_writer_finish(&m->desc) != TW_OK) {
		tw__out_msg_free(m);
		return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory encoding the Descriptor", fn);
	}
	*out = m;
	return TW_OK;
err_nomem:
	tw__free(wp);
	tw__free(wt);
	tw__out_msg_free(m);
	return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
}

void tw__in_msg_free(tw_in_msg *m)
{
	if (!m)
		return;
	if (m->have_wire)
		tw__wire_descriptor_free(&m->wire);
	tw__nop_writer_free(&m->reply);
	tw__free(m->payloads);
	tw__free(m->tensors);
	tw__free(m->pay_bufs);
	tw__free(m->ten_allocs);
	tw__free(m);
}

static tw_status_t tw__check_wire_device(const tw_wire_device *d, const char *what, size_t i,
                                         char *detail, size_t detail_len)
{
	if (d->type.n == 0 || d->type.n >= TW_DEVICE_TYPE_MAX || memchr(d->type.s, '\0', d->type.n)) {
		tw__detail(detail, detail_len,
		           "Descriptor.tensors[%zu].%s.type has %zu bytes (want 1 to %d, no NUL)", i, what,
		           d->type.n, TW_DEVICE_TYPE_MAX - 1);
		return TW_ERR_PROTO;
	}
	return TW_OK;
}

tw_status_t tw__in_msg_build_view(tw_in_msg *m, size_t budget, size_t limit, char *detail,
                                  size_t detail_len)
{
	const tw_wire_descriptor *w = &m->wire;
	/* The view counts against what the decoded Descriptor may take. Both
	 * counts are bounded by the frame (spec 1.13), so neither product
	 * overflows. */
	size_t cost = tw__wire_heap_cost(w->num_payloads * sizeof(tw_payload));
	size_t tcost = tw__wire_heap_cost(w->num_tensors * sizeof(tw_tensor));
	if (cost > budget || tcost > budget - cost) {
		tw__detail(detail, detail_len,
		           "Descriptor: decoded, with %zu payloads and %zu tensors, the message takes "
		           "more than the limit of %zu bytes",
		           w->num_payloads, w->num_tensors, limit);
		return TW_ERR_PROTO;
	}
	m->payloads = tw__calloc(w->num_payloads, sizeof(tw_payload));
	m->tensors = tw__calloc(w->num_tensors, sizeof(tw_tensor));
	if (!m->payloads || !m->tensors) {
		tw__detail(detail, detail_len, "out of memory for a Descriptor with %zu payloads, %zu tensors",
		           w->num_payloads, w->num_tensors);
		return TW_ERR_NOMEM;
	}
	for (size_t i = 0; i < w->num_payloads; i++) {
		if (w->payloads[i].length > SIZE_MAX) {
			tw__detail(detail, detail_len, "Descriptor.payloads[%zu].length too large", i);
			return TW_ERR_PROTO;
		}
		m->payloads[i].data = NULL;
		m->payloads[i].length = (size_t)w->payloads[i].length;
		m->payloads[i].metadata = w->payloads[i].metadata.s;
		m->payloads[i].metadata_length = w->payloads[i].metadata.n;
	}
	for (size_t i = 0; i < w->num_tensors; i++) {
		const tw_wire_tensor_desc *t = &w->tensors[i];
		tw_status_t st = tw__check_wire_device(&t->source_device, "sourceDevice", i, detail,
		                                       detail_len);
		if (st == TW_OK && t->has_target_device)
			st = tw__check_wire_device(&t->target_device, "targetDevice", i, detail, detail_len);
		if (st != TW_OK)
			return st;
		m->tensors[i].data = NULL;
		m->tensors[i].length = (size_t)t->length;
		tw__device_from_wire(&m->tensors[i].source_device, &t->source_device);
		m->tensors[i].has_target_device = t->has_target_device;
		if (t->has_target_device)
			tw__device_from_wire(&m->tensors[i].target_device, &t->target_device);
		m->tensors[i].metadata = t->metadata.s;
		m->tensors[i].metadata_length = t->metadata.n;
	}
	m->view.metadata = w->metadata.s;
	m->view.metadata_length = w->metadata.n;
	m->view.num_payloads = w->num_payloads;
	m->view.payloads = m->payloads;
	m->view.num_tensors = w->num_tensors;
	m->view.tensors = m->tensors;
	return TW_OK;
}
