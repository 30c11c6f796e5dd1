/*
 * negotiate.c - the handshake's decisions (spec/wire.md 3.4 to 3.7): what a
 * client puts in its Brochure, how the server picks a transport and the
 * channel for each device pair (registration priority, higher wins), what
 * goes into the BrochureAnswer, and how the client checks that answer by
 * recomputing the channel selection with its own priorities. Also the
 * extensions of spec 8: the client always asks for them with the reserved
 * Brochure entry; the server acknowledges what it supports only when asked,
 * so stock peers never see anything new.
 *
 * Pure decisions over the registry and decoded packets: this file must not
 * touch connections (pipe.c opens them).
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "platform/mutant.h"
#include "platform/platform.h"

static void tw__wdev(tw_wire_device *dst, const tw_device *src)
{
	dst->type.s = (char *)src->type;
	dst->type.n = strnlen(src->type, TW_DEVICE_TYPE_MAX);
	dst->index = src->index;
}

static bool tw__wire_str_eq(const tw_wire_str *w, const char *s, size_t n)
{
	return w->n == n && (n == 0 || memcmp(w->s, s, n) == 0);
}

static bool tw__transport_accepts(tw_transport_reg *reg, const tw_wire_str *remote)
{
	if (reg->ops->can_communicate)
		return reg->ops->can_communicate(reg->t, remote->s, remote->n);
	const char *mine = reg->ops->domain_descriptor(reg->t);
	return tw__wire_str_eq(remote, mine, strlen(mine));
}

static bool tw__channel_accepts(tw_channel_reg *creg, const tw_channel_device *local,
                                const tw_wire_str *remote, const tw_channel_offer *offer)
{
	if (creg->ops->can_communicate)
		return creg->ops->can_communicate(creg->c, local, remote->s, remote->n, offer);
	return tw__wire_str_eq(remote, local->descriptor, local->descriptor_len);
}

/* Does a registered channel speak the proof (spec 8.3)? Then this context
 * asks for it as a client and acknowledges it as a server. */
static bool tw__ext_we_ask_proof(const tw_context *ctx)
{
	if (TW_MUTANT("proof_ignored"))
		return false;
	for (size_t i = 0; i < ctx->num_channels; i++)
		if (ctx->channels[i].ops->speaks_proof)
			return true;
	return false;
}

/* eager and noreply (spec 8.4, 8.5) hold on a pipe whose every device pair
 * is CPU to CPU:
 * then a tensor's receiver can only choose a CPU buffer, and both ends,
 * which hold the same pairs, pick the same tensors. */
static bool tw__pairs_cpu_only(const tw_pipe *p)
{
	for (size_t i = 0; i < p->num_pairs; i++)
		if (!tw__device_is_cpu(&p->pairs[i].local) || !tw__device_is_cpu(&p->pairs[i].remote))
			return false;
	return true;
}

/* Both ends, once the pairs and the acknowledged bits are known: which of
 * eager and noreply the pipe uses. */
static void tw__settle_cpu_exts(tw_pipe *p)
{
	bool cpu_only = tw__pairs_cpu_only(p);
	p->ext_eager = p->eager_acked && cpu_only;
	p->ext_noreply = p->noreply_acked && cpu_only;
}

/* ---- Brochure (client) ------------------------------------------------------ */

tw_status_t tw__negotiate_brochure(tw_pipe *p, tw_nop_writer *w)
{
	tw_context *ctx = p->ctx;
	p->eager_asked = __atomic_load_n(&ctx->eager, __ATOMIC_RELAXED);
	tw_wire_brochure b;
	memset(&b, 0, sizeof(b));
	tw_wire_kv kv[TW_REGS_MAX + 1];
	tw_wire_channel_devices chans[TW_REGS_MAX];
	memset(chans, 0, sizeof(chans));
	tw_status_t st = TW_ERR_NOMEM;
	for (size_t i = 0; i < ctx->num_transports; i++) {
		tw_transport_reg *reg = &ctx->transports[i];
		const char *d = reg->ops->domain_descriptor(reg->t);
		kv[i].key.s = reg->name;
		kv[i].key.n = reg->name_len;
		kv[i].value.s = (char *)d;
		kv[i].value.n = strlen(d);
	}
	/* The extensions we ask for (spec 8.1): last, after every transport. */
	kv[ctx->num_transports].key.s = (char *)TW_EXT_BROCHURE_NAME;
	kv[ctx->num_transports].key.n = strlen(TW_EXT_BROCHURE_NAME);
	char asked[64];
	snprintf(asked, sizeof(asked), "%s%s%s", TW_EXT_GOODBYE,
	         tw__ext_we_ask_proof(ctx) ? "," TW_EXT_PROOF : "",
	         p->eager_asked ? "," TW_EXT_EAGER "," TW_EXT_NOREPLY : "");
	kv[ctx->num_transports].value.s = asked;
	kv[ctx->num_transports].value.n = strlen(asked);
	b.num_transports = ctx->num_transports + 1;
	b.transports = kv;
	for (size_t i = 0; i < ctx->num_channels; i++) {
		tw_channel_reg *creg = &ctx->channels[i];
		chans[i].channel.s = creg->name;
		chans[i].channel.n = creg->name_len;
		chans[i].num_devices = creg->c->num_devices;
		chans[i].devices = tw__calloc(creg->c->num_devices, sizeof(tw_wire_device_desc));
		if (!chans[i].devices)
			goto out;
		for (size_t k = 0; k < creg->c->num_devices; k++) {
			tw__wdev(&chans[i].devices[k].device, &creg->c->devices[k].device);
			chans[i].devices[k].descriptor.s = creg->c->devices[k].descriptor;
			chans[i].devices[k].descriptor.n = creg->c->devices[k].descriptor_len;
		}
	}
	b.num_channels = ctx->num_channels;
	b.channels = chans;
	tw__wire_encode_brochure(w, &b);
	st = tw__nop_writer_finish(w);
out:
	for (size_t i = 0; i < ctx->num_channels; i++)
		tw__free(chans[i].devices);
	return st;
}

/* ---- channel selection (both sides, spec 3.5 and 3.7 step 5) ----------------- */

/* The channel that took the pair (l, r) already ("" for the one being
 * selected, which has no entry yet), or NULL. */
static const char *tw__pipe_pair_taken(tw_pipe *p, const tw_device *l, const tw_device *r)
{
	for (size_t i = 0; i < p->num_pairs; i++)
		if (tw__device_eq(&p->pairs[i].local, l) && tw__device_eq(&p->pairs[i].remote, r))
			return p->pairs[i].chan < p->num_chans ? p->chans[p->pairs[i].chan].reg->name : "";
	return NULL;
}

/* The most devices a peer may offer over all its channels (spec 3.5.e). */
#define TW_PEER_DEVICES_MAX 4096

/* For each of our channels, highest priority first, that the peer also
 * offers: assign every (local, remote) device pair not yet taken whose
 * descriptors are compatible. A channel that won a pair joins p->chans. */
static tw_status_t tw__select_channels(tw_pipe *p, const tw_wire_channel_devices *remote,
                                       size_t num_remote, char *detail, size_t detail_len)
{
	tw_context *ctx = p->ctx;
	size_t max_pairs = 0;
	for (size_t i = 0; i < num_remote; i++)
		max_pairs += remote[i].num_devices;
	if (max_pairs > TW_PEER_DEVICES_MAX) {
		tw__detail(detail, detail_len,
		           "the peer offers %zu devices over its channels, more than the %d "
		           "tensorwire pairs (spec 3.5.e)",
		           max_pairs, TW_PEER_DEVICES_MAX);
		return TW_ERR_PROTO;
	}
	p->chans = tw__calloc(ctx->num_channels, sizeof(tw_pipe_channel));
	size_t local_devs = 0;
	for (size_t i = 0; i < ctx->num_channels; i++)
		local_devs += ctx->channels[i].c->num_devices;
	/* A pair needs a local device and a remote device. */
	p->pairs = tw__calloc(max_pairs * (local_devs ? local_devs : 1), sizeof(tw_pipe_pair));
	if (!p->chans || !p->pairs) {
		tw__detail(detail, detail_len, "out of memory selecting channels");
		return TW_ERR_NOMEM;
	}
	for (size_t j = 0; j < ctx->num_channels; j++) {
		size_t i = TW_MUTANT("channel_priority_ignored") ? ctx->num_channels - 1 - j : j;
		tw_channel_reg *creg = &ctx->channels[i];
		const tw_wire_channel_devices *rc = NULL;
		for (size_t k = 0; k < num_remote && !rc; k++)
			if (tw__wire_str_eq(&remote[k].channel, creg->name, creg->name_len))
				rc = &remote[k];
		if (!rc) {
			/* A client sees only what the server selected. */
			tw__detail(p->chan_why[i], TW_WHY_MAX,
			           p->is_server ? "the peer does not offer %s"
			                        : "the server did not select %s (the server does not offer "
			                          "it, or its device pairs went to a channel of higher "
			                          "priority there)",
			           creg->name);
			continue;
		}
		size_t idx = p->num_chans;
		bool won = false;
		const char *taken_by = NULL; /* a channel of higher priority */
		const char **od = tw__calloc(rc->num_devices + 1, sizeof(*od));
		size_t *ol = tw__calloc(rc->num_devices + 1, sizeof(*ol));
		if (!od || !ol) {
			tw__free(od);
			tw__free(ol);
			tw__detail(detail, detail_len, "out of memory selecting channels");
			return TW_ERR_NOMEM;
		}
		for (size_t b = 0; b < rc->num_devices; b++) {
			od[b] = rc->devices[b].descriptor.s;
			ol[b] = rc->devices[b].descriptor.n;
		}
		tw_channel_offer offer = { rc->num_devices, od, ol };
		for (size_t a = 0; a < creg->c->num_devices; a++) {
			const tw_channel_device *ld = &creg->c->devices[a];
			for (size_t b = 0; b < rc->num_devices; b++) {
				tw_device rd;
				if (rc->devices[b].device.type.n == 0 ||
				    rc->devices[b].device.type.n >= TW_DEVICE_TYPE_MAX)
					continue; /* a device we could not name cannot match ours */
				tw__device_from_wire(&rd, &rc->devices[b].device);
				const char *taken = tw__pipe_pair_taken(p, &ld->device, &rd);
				if (taken) {
					taken_by = *taken ? taken : taken_by;
					continue;
				}
				if (!tw__channel_accepts(creg, ld, &rc->devices[b].descriptor, &offer))
					continue;
				tw_pipe_pair *pp = &p->pairs[p->num_pairs++];
				pp->local = ld->device;
				pp->remote = rd;
				pp->chan = idx;
				won = true;
			}
		}
		tw__free(od);
		tw__free(ol);
		if (!won && taken_by) {
			tw__detail(p->chan_why[i], TW_WHY_MAX,
			           "its device pairs went to channel %s, of higher priority", taken_by);
			continue;
		}
		if (!won) {
			const tw_wire_str *rd = rc->num_devices ? &rc->devices[0].descriptor : NULL;
			tw__detail(p->chan_why[i], TW_WHY_MAX,
			           "no device pair: the peer's descriptor \"%.*s\" is not ours \"%.*s\" "
			           "(another host, namespace or user)",
			           rd ? (int)(rd->n > 48 ? 48 : rd->n) : 0, rd ? rd->s : "",
			           creg->c->num_devices ? (int)(creg->c->devices[0].descriptor_len > 48
			                                            ? 48
			                                            : creg->c->devices[0].descriptor_len)
			                                : 0,
			           creg->c->num_devices ? creg->c->devices[0].descriptor : "");
			continue;
		}
		p->chan_why[i][0] = '\0';
		tw_pipe_channel *pc = &p->chans[p->num_chans++];
		pc->reg = creg;
		pc->num_conns = creg->ops->num_connections(creg->c);
		pc->conns = tw__calloc(pc->num_conns, sizeof(tw_conn *));
		pc->ids = tw__calloc(pc->num_conns, sizeof(uint64_t));
		if (!pc->conns || !pc->ids) {
			tw__detail(detail, detail_len, "out of memory selecting channels");
			return TW_ERR_NOMEM;
		}
	}
	return TW_OK;
}

/* ---- extensions (spec 8.1) ------------------------------------------------------ */

/* Does the comma-separated list `list` name `token`? */
static bool tw__ext_list_has(const tw_wire_str *list, const char *token)
{
	size_t tn = strlen(token);
	const char *p = list->s, *end = list->s + list->n;
	while (p <= end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *stop = comma ? comma : end;
		if ((size_t)(stop - p) == tn && memcmp(p, token, tn) == 0)
			return true;
		if (!comma)
			break;
		p = comma + 1;
	}
	return false;
}

/* The extensions of spec section 8 by name and answer bit. */
static const struct {
	const char *name;
	uint64_t bit;
} tw__exts[] = {
	{ TW_EXT_GOODBYE, TW_EXT_GOODBYE_BIT },
	{ TW_EXT_PROOF, TW_EXT_PROOF_BIT },
	{ TW_EXT_EAGER, TW_EXT_EAGER_BIT },
	{ TW_EXT_NOREPLY, TW_EXT_NOREPLY_BIT },
};

/* The extensions a Brochure asks for, as a bit mask (unknown ones ignored). */
static uint64_t tw__ext_asked(const tw_wire_brochure *b)
{
	size_t n = strlen(TW_EXT_BROCHURE_NAME);
	for (size_t i = 0; i < b->num_transports; i++) {
		/* Duplicate keys were dropped by the decoder: the first one counts. */
		if (!tw__wire_str_eq(&b->transports[i].key, TW_EXT_BROCHURE_NAME, n))
			continue;
		uint64_t mask = 0;
		for (size_t k = 0; k < sizeof(tw__exts) / sizeof(tw__exts[0]); k++)
			if (tw__ext_list_has(&b->transports[i].value, tw__exts[k].name))
				mask |= tw__exts[k].bit;
		return mask;
	}
	return 0;
}

/* ---- server ------------------------------------------------------------------- */

static char *tw__offer_list(const tw_wire_brochure *b, char *buf, size_t n)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < b->num_transports && off + 1 < n; i++) {
		int w = snprintf(buf + off, n - off, "%s%.*s=\"%.*s\"", i ? ", " : "",
		                 (int)(b->transports[i].key.n > 40 ? 40 : b->transports[i].key.n),
		                 b->transports[i].key.s,
		                 (int)(b->transports[i].value.n > 60 ? 60 : b->transports[i].value.n),
		                 b->transports[i].value.s);
		if (w < 0)
			break;
		off += (size_t)w;
	}
	if (b->num_transports == 0)
		snprintf(buf, n, "nothing");
	return buf;
}

tw_status_t tw__negotiate_server(tw_pipe *p, const tw_wire_brochure *b, tw_nop_writer *w,
                                 char *detail, size_t detail_len)
{
	tw_context *ctx = p->ctx;
	tw_listener *l = p->listener;
	tw_listener_entry *entry = NULL;
	tw_status_t st;

	/* Transport: ours by priority, that we listen on, that the peer offers
	 * with an equal domain descriptor (spec 3.5). */
	for (size_t j = 0; j < ctx->num_transports && !entry; j++) {
		size_t i = TW_MUTANT("transport_priority_ignored") ? ctx->num_transports - 1 - j : j;
		tw_transport_reg *reg = &ctx->transports[i];
		tw_listener_entry *e = tw__listener_entry_for(l, reg);
		if (!e)
			continue;
		for (size_t k = 0; k < b->num_transports; k++) {
			if (tw__wire_str_eq(&b->transports[k].key, reg->name, reg->name_len) &&
			    tw__transport_accepts(reg, &b->transports[k].value)) {
				entry = e;
				break;
			}
		}
	}
	if (!entry) {
		char offers[200];
		char ours[120] = "";
		size_t off = 0;
		for (size_t i = 0; i < l->num_entries && off + 1 < sizeof(ours); i++) {
			int n = snprintf(ours + off, sizeof(ours) - off, "%s%s=\"%s\"", i ? ", " : "",
			                 l->entries[i].reg->name,
			                 l->entries[i].reg->ops->domain_descriptor(l->entries[i].reg->t));
			if (n < 0)
				break;
			off += (size_t)n;
		}
		tw__detail(detail, detail_len,
		           "Brochure: no common transport: the peer offers %s; this listener has %s",
		           tw__offer_list(b, offers, sizeof(offers)), ours);
		return TW_ERR_PROTO;
	}
	p->reg = entry->reg;

	uint64_t id_d = 0, id_r = 0;
	p->need_replacement = p->reg != p->boot_reg;
	if (p->need_replacement) {
		if ((st = tw__listener_register(l, p, TW_SLOT_DESCRIPTOR, &id_d)) != TW_OK)
			goto err_register;
		p->awaiting++;
	}
	if ((st = tw__listener_register(l, p, TW_SLOT_REPLY, &id_r)) != TW_OK)
		goto err_register;
	p->awaiting++;
	p->id_d = id_d;
	p->id_r = id_r;

	st = tw__select_channels(p, b->channels, b->num_channels, detail, detail_len);
	if (st != TW_OK)
		return st;
	for (size_t i = 0; i < p->num_chans; i++) {
		tw_pipe_channel *pc = &p->chans[i];
		for (size_t k = 0; k < pc->num_conns; k++) {
			if ((st = tw__listener_register(l, p, (int)((i << 16) | k), &pc->ids[k])) != TW_OK)
				goto err_register;
			p->awaiting++;
		}
	}

	/* The answer (spec 3.6). */
	tw_wire_brochure_answer a;
	memset(&a, 0, sizeof(a));
	const char *tdesc = p->reg->ops->domain_descriptor(p->reg->t);
	a.transport.s = p->reg->name;
	a.transport.n = p->reg->name_len;
	a.address.s = entry->address;
	a.address.n = strlen(entry->address);
	tw_wire_id_entry ids[3] = { { 1, id_r }, { 0, id_d } };
	a.num_transport_ids = p->need_replacement ? 2 : 1;
	/* Acknowledge what the client asked for and we support (spec 8.1.c);
	 * a client that asked for nothing (any stock client) gets no key. */
	uint64_t acked = tw__ext_asked(b) &
	                 (TW_EXT_GOODBYE_BIT | (tw__ext_we_ask_proof(ctx) ? TW_EXT_PROOF_BIT : 0) |
	                  (__atomic_load_n(&ctx->eager, __ATOMIC_RELAXED)
	                           ? TW_EXT_EAGER_BIT | TW_EXT_NOREPLY_BIT
	                           : 0));
	if (TW_MUTANT("ext_acked_unasked"))
		acked |= TW_EXT_PROOF_BIT;
	if (acked) {
		ids[a.num_transport_ids].key = TW_EXT_ANSWER_KEY;
		ids[a.num_transport_ids].id = acked;
		a.num_transport_ids++;
	}
	p->ext_goodbye = (acked & TW_EXT_GOODBYE_BIT) != 0;
	p->ext_proof = (acked & TW_EXT_PROOF_BIT) != 0;
	p->eager_asked = __atomic_load_n(&ctx->eager, __ATOMIC_RELAXED);
	p->eager_acked = (acked & TW_EXT_EAGER_BIT) != 0;
	p->noreply_acked = (acked & TW_EXT_NOREPLY_BIT) != 0;
	tw__settle_cpu_exts(p);
	a.transport_ids = ids;
	a.transport_domain_descriptor.s = (char *)tdesc;
	a.transport_domain_descriptor.n = strlen(tdesc);
	tw_wire_channel_ids cids[TW_REGS_MAX];
	tw_wire_channel_devices cdevs[TW_REGS_MAX];
	memset(cdevs, 0, sizeof(cdevs));
	tw_wire_device_pair *wpairs = tw__calloc(p->num_pairs, sizeof(*wpairs));
	st = TW_ERR_NOMEM;
	if (!wpairs)
		goto out;
	for (size_t i = 0; i < p->num_chans; i++) {
		tw_channel_reg *creg = p->chans[i].reg;
		cids[i].channel.s = creg->name;
		cids[i].channel.n = creg->name_len;
		cids[i].num_ids = p->chans[i].num_conns;
		cids[i].ids = p->chans[i].ids;
		cdevs[i].channel = cids[i].channel;
		cdevs[i].num_devices = creg->c->num_devices;
		cdevs[i].devices = tw__calloc(creg->c->num_devices, sizeof(tw_wire_device_desc));
		if (!cdevs[i].devices)
			goto out;
		for (size_t k = 0; k < creg->c->num_devices; k++) {
			tw__wdev(&cdevs[i].devices[k].device, &creg->c->devices[k].device);
			cdevs[i].devices[k].descriptor.s = creg->c->devices[k].descriptor;
			cdevs[i].devices[k].descriptor.n = creg->c->devices[k].descriptor_len;
		}
	}
	a.num_channel_ids = p->num_chans;
	a.channel_ids = cids;
	a.num_channels = p->num_chans;
	a.channels = cdevs;
	for (size_t i = 0; i < p->num_pairs; i++) {
		/* Key order on the wire: the server's (our) device first. */
		tw__wdev(&wpairs[i].server_device, &p->pairs[i].local);
		tw__wdev(&wpairs[i].client_device, &p->pairs[i].remote);
		wpairs[i].channel.s = p->chans[p->pairs[i].chan].reg->name;
		wpairs[i].channel.n = p->chans[p->pairs[i].chan].reg->name_len;
	}
	a.num_device_pairs = p->num_pairs;
	a.device_pairs = wpairs;
	tw__wire_encode_brochure_answer(w, &a);
	st = tw__nop_writer_finish(w);
out:
	for (size_t i = 0; i < p->num_chans; i++)
		tw__free(cdevs[i].devices);
	tw__free(wpairs);
	if (st != TW_OK)
		tw__detail(detail, detail_len, "out of memory encoding the BrochureAnswer");
	return st;
err_register:
	tw__detail(detail, detail_len, "registering connection ids: %s",
	           st == TW_ERR_CLOSED ? "listener closed" : "out of memory");
	return st;
}

/* ---- client ------------------------------------------------------------------- */

tw_status_t tw__negotiate_client(tw_pipe *p, const tw_wire_brochure_answer *a, uint64_t *id_d_out,
                                 bool *need_d_out, uint64_t *id_r_out, char *detail,
                                 size_t detail_len)
{
	tw_context *ctx = p->ctx;
	char db1[40], db2[40];
	tw_transport_reg *reg = tw__ctx_find_transport(ctx, a->transport.s, a->transport.n);
	if (!reg) {
		tw__detail(detail, detail_len, "BrochureAnswer picks transport \"%.*s\", which we did not offer",
		           (int)(a->transport.n > 40 ? 40 : a->transport.n), a->transport.s);
		return TW_ERR_PROTO;
	}
	if (!tw__transport_accepts(reg, &a->transport_domain_descriptor)) {
		tw__detail(detail, detail_len,
		           "BrochureAnswer: transport %s has domain descriptor \"%.*s\", ours is \"%s\"",
		           reg->name, (int)(a->transport_domain_descriptor.n > 60 ? 60 : a->transport_domain_descriptor.n),
		           a->transport_domain_descriptor.s, reg->ops->domain_descriptor(reg->t));
		return TW_ERR_PROTO;
	}
	if (a->address.n == 0 || a->address.n >= TW_URL_MAX || memchr(a->address.s, '\0', a->address.n)) {
		tw__detail(detail, detail_len, "BrochureAnswer: address of %zu bytes is unusable",
		           a->address.n);
		return TW_ERR_PROTO;
	}
	p->reg = reg;
	bool need_d = reg != p->boot_reg, have_d = false, have_r = false, have_ext = false;
	uint64_t acked = 0;
	for (size_t i = 0; i < a->num_transport_ids; i++) {
		if (a->transport_ids[i].key == 1 && !have_r) {
			*id_r_out = a->transport_ids[i].id;
			have_r = true;
		} else if (a->transport_ids[i].key == 0 && !have_d) {
			*id_d_out = a->transport_ids[i].id;
			have_d = true;
		} else if (a->transport_ids[i].key == TW_EXT_ANSWER_KEY && !have_ext) {
			acked = a->transport_ids[i].id;
			have_ext = true;
		}
	}
	/* Only what we asked for counts (spec 8.1.d); stock never sends the key. */
	p->ext_goodbye = (acked & TW_EXT_GOODBYE_BIT) != 0;
	p->ext_proof = (acked & TW_EXT_PROOF_BIT) != 0 && tw__ext_we_ask_proof(ctx);
	p->eager_acked = (acked & TW_EXT_EAGER_BIT) != 0 && p->eager_asked;
	p->noreply_acked = (acked & TW_EXT_NOREPLY_BIT) != 0 && p->eager_asked;
	if (!have_r) {
		tw__detail(detail, detail_len,
		           "BrochureAnswer has no registration id for the descriptor-reply connection (key 1)");
		return TW_ERR_PROTO;
	}
	if (need_d && !have_d) {
		tw__detail(detail, detail_len,
		           "BrochureAnswer switches transport to %s but has no registration id for the "
		           "descriptor connection (key 0)",
		           reg->name);
		return TW_ERR_PROTO;
	}
	*need_d_out = need_d;

	tw_status_t st = tw__select_channels(p, a->channels, a->num_channels, detail, detail_len);
	if (st != TW_OK)
		return st;
	for (size_t i = 0; i < p->num_chans; i++) {
		tw_pipe_channel *pc = &p->chans[i];
		const tw_wire_channel_ids *ci = NULL;
		for (size_t k = 0; k < a->num_channel_ids && !ci; k++)
			if (tw__wire_str_eq(&a->channel_ids[k].channel, pc->reg->name, pc->reg->name_len))
				ci = &a->channel_ids[k];
		if (!ci || ci->num_ids != pc->num_conns) {
			tw__detail(detail, detail_len,
			           "BrochureAnswer: channel %s needs %zu registration ids, the answer has %zu",
			           pc->reg->name, pc->num_conns, ci ? ci->num_ids : 0);
			return TW_ERR_PROTO;
		}
		memcpy(pc->ids, ci->ids, pc->num_conns * sizeof(uint64_t));
	}
	for (size_t k = 0; k < a->num_channel_ids; k++) {
		bool found = false;
		for (size_t i = 0; i < p->num_chans && !found; i++)
			found = tw__wire_str_eq(&a->channel_ids[k].channel, p->chans[i].reg->name,
			                        p->chans[i].reg->name_len);
		if (!found) {
			tw__detail(detail, detail_len,
			           "BrochureAnswer: registration ids for channel \"%.*s\", which our own "
			           "selection does not pick",
			           (int)(a->channel_ids[k].channel.n > 40 ? 40 : a->channel_ids[k].channel.n),
			           a->channel_ids[k].channel.s);
			return TW_ERR_PROTO;
		}
	}
	/* Inconsistent channel selection is fatal in stock too (spec 3.7). */
	if (a->num_device_pairs != p->num_pairs) {
		tw__detail(detail, detail_len,
		           "BrochureAnswer: inconsistent channel selection: the answer maps %zu device "
		           "pairs, our own selection %zu",
		           a->num_device_pairs, p->num_pairs);
		return TW_ERR_PROTO;
	}
	for (size_t i = 0; i < a->num_device_pairs; i++) {
		const tw_wire_device_pair *wp = &a->device_pairs[i];
		tw_device s, c;
		tw__device_from_wire(&s, &wp->server_device);
		tw__device_from_wire(&c, &wp->client_device);
		bool ok = false;
		for (size_t k = 0; k < p->num_pairs && !ok; k++) {
			tw_pipe_pair *pp = &p->pairs[k];
			ok = tw__device_eq(&pp->local, &c) && tw__device_eq(&pp->remote, &s) &&
			     tw__wire_str_eq(&wp->channel, p->chans[pp->chan].reg->name,
			                     p->chans[pp->chan].reg->name_len);
		}
		if (!ok) {
			tw__detail(detail, detail_len,
			           "BrochureAnswer: inconsistent channel selection for (server %s, client %s) "
			           "-> \"%.*s\"",
			           tw__device_str(&s, db1, sizeof(db1)), tw__device_str(&c, db2, sizeof(db2)),
			           (int)(wp->channel.n > 40 ? 40 : wp->channel.n), wp->channel.s);
			return TW_ERR_PROTO;
		}
	}
	tw__settle_cpu_exts(p);
	return TW_OK;
}
