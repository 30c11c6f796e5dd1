/*
 * context.c - the context: its loop thread, the registry of transports and
 * channels (sorted by priority, spec 3.5), URL resolution, and the
 * close / join / destroy sequence.
 *
 * Shutdown: tw_context_close posts one command that closes every listener
 * and pipe on the loop thread. When the last of them has finished (every
 * callback delivered), the loop shuts the transports and channels down and
 * stops accepting work; the thread exits once libuv has closed every handle.
 * tw_context_join waits for that; tw_context_destroy frees what is left.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/socket.h>

#include "core/core.h"
#include "core/select.h"
#include "platform/options.h"
#include "platform/platform.h"


tw_device tw_device_cpu(void)
{
	tw_device d;
	memset(&d, 0, sizeof(d));
	memcpy(d.type, "cpu", 4);
	d.index = 0;
	return d;
}

/* ---- the loop refused work --------------------------------------------- */

tw_status_t tw__ctx_unposted(const tw_context *ctx, const char *fn)
{
	if (tw__loop_forked(&ctx->loop))
		return tw__api_fail(TW_ERR_INVAL,
		                    "%s: this context belongs to process %d and this is its forked "
		                    "child %d: a context does not survive fork (its loop thread is the "
		                    "parent's); create a new one in the child",
		                    fn, (int)ctx->loop.pid, (int)getpid());
	return tw__api_fail(TW_ERR_CLOSED, "%s: the context is closed", fn);
}

/* ---- loop-side shutdown ----------------------------------------------- */

void tw__ctx_check_done(tw_context *ctx)
{
	if (!ctx->closing || ctx->finished)
		return;
	if (!tw__list_empty(&ctx->live_pipes) || !tw__list_empty(&ctx->live_listeners))
		return;
	if (!tw__loop_finish(&ctx->loop))
		return; /* work still queued: we come back after it ran */
	ctx->finished = true;
	for (size_t i = 0; i < ctx->num_transports; i++)
		if (ctx->transports[i].ops->shutdown)
			ctx->transports[i].ops->shutdown(ctx->transports[i].t);
	for (size_t i = 0; i < ctx->num_channels; i++)
		if (ctx->channels[i].ops->shutdown)
			ctx->channels[i].ops->shutdown(ctx->channels[i].c);
}

static void tw__ctx_idle_check(void *arg)
{
	tw__ctx_check_done(arg);
}

static void tw__ctx_do_close(void *arg)
{
	tw_context *ctx = arg;
	if (ctx->closing)
		return;
	ctx->closing = true;
	tw_list *it, *tmp;
	TW_LIST_FOREACH_SAFE(it, tmp, &ctx->live_listeners)
	{
		tw_listener *l = TW_CONTAINER_OF(it, tw_listener, live_link);
		tw__listener_close_internal(l);
	}
	/* Closing one pipe may finish (and unlink) others, so start over from
	 * the front each time. */
	for (;;) {
		tw_pipe *victim = NULL;
		for (it = ctx->live_pipes.next; it != &ctx->live_pipes; it = it->next) {
			tw_pipe *p = TW_CONTAINER_OF(it, tw_pipe, live_link);
			if (p->state != TW_PIPE_FAILED) {
				victim = p;
				break;
			}
		}
		if (!victim)
			break;
		tw__pipe_close_internal(victim, TW_ERR_CLOSED, "context closed");
	}
	tw__ctx_check_done(ctx);
}

/* ---- registry ------------------------------------------------------------ */

tw_transport_reg *tw__ctx_find_transport(tw_context *ctx, const char *name, size_t len)
{
	for (size_t i = 0; i < ctx->num_transports; i++)
		if (ctx->transports[i].name_len == len && memcmp(ctx->transports[i].name, name, len) == 0)
			return &ctx->transports[i];
	return NULL;
}

tw_channel_reg *tw__ctx_find_channel(tw_context *ctx, const char *name, size_t len)
{
	for (size_t i = 0; i < ctx->num_channels; i++)
		if (ctx->channels[i].name_len == len && memcmp(ctx->channels[i].name, name, len) == 0)
			return &ctx->channels[i];
	return NULL;
}

tw_status_t tw__ctx_freeze(tw_context *ctx, const char *fn)
{
	pthread_mutex_lock(&ctx->mu);
	bool closed = ctx->close_posted;
	ctx->frozen = true;
	pthread_mutex_unlock(&ctx->mu);
	if (closed)
		return tw__api_fail(TW_ERR_CLOSED, "%s: the context is closed", fn);
	return TW_OK;
}

tw_status_t tw__ctx_resolve_url(tw_context *ctx, const char *fn, const char *url,
                                bool for_listen, tw_transport_reg **reg_out,
                                const char **address_out)
{
	const char *sep = strstr(url, "://");
	if (!sep)
		return tw__api_fail(TW_ERR_INVAL, "%s: URL '%s' has no scheme (want e.g. uv://127.0.0.1:0)",
		                    fn, url);
	size_t slen = (size_t)(sep - url);
	if (strlen(url) >= TW_URL_MAX)
		return tw__api_fail(TW_ERR_INVAL, "%s: URL '%s' is longer than %d bytes", fn, url,
		                    TW_URL_MAX - 1);
	tw_transport_reg *reg = tw__ctx_find_transport(ctx, url, slen);
	for (size_t i = 0; !reg && i < ctx->num_transports; i++) {
		const tw_transport_ops *ops = ctx->transports[i].ops;
		if (strlen(ops->kind) == slen && memcmp(ops->kind, url, slen) == 0)
			reg = &ctx->transports[i];
		for (size_t k = 0; !reg && ops->schemes && ops->schemes[k]; k++)
			if (strlen(ops->schemes[k]) == slen && memcmp(ops->schemes[k], url, slen) == 0)
				reg = &ctx->transports[i];
	}
	if (!reg)
		return tw__api_fail(TW_ERR_INVAL,
		                    "%s: no registered transport for the scheme of '%s' (register one "
		                    "with tw_context_register_transport first)",
		                    fn, url);
	if (reg->ops->check_address) {
		char detail[TW_DETAIL_MAX];
		if (reg->ops->check_address(sep + 3, for_listen, detail, sizeof(detail)) != TW_OK)
			return tw__api_fail(TW_ERR_INVAL, "%s: URL '%s': %s", fn, url, detail);
	}
	*reg_out = reg;
	*address_out = sep + 3;
	return TW_OK;
}

/* Splits "max_object_bytes=N" out of an options string; the rest goes to the
 * kind. Returns INVAL on a bad value. */
static tw_status_t tw__ctx_split_options(const char *fn, const char *options, char *rest,
                                         size_t rest_len, uint64_t *max_object)
{
	static const tw_option table[] = {
		{ "max_object_bytes", TW_OPT_U64, 0, 0, 1, UINT64_MAX },
	};
	char detail[TW_DETAIL_MAX];
	tw_status_t st = tw__options_parse(fn, options, table, 1, max_object, rest, rest_len, detail,
	                                   sizeof(detail));
	if (st != TW_OK)
		return tw__api_fail(st, "%s", detail);
	return TW_OK;
}

static tw_status_t tw__ctx_check_name(const char *fn, const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n >= TW_NAME_MAX)
		return tw__api_fail(TW_ERR_INVAL, "%s: name '%s' must have 1 to %d bytes", fn, name,
		                    TW_NAME_MAX - 1);
	return TW_OK;
}

/* Where a registration table keeps its slots: tw_transport_reg and
 * tw_channel_reg both open with the wire name and its length, and say where
 * their priority sits. */
typedef struct tw_reg_table {
	const char *what; /* "transport" or "channel", for details */
	void *slots;
	size_t *num;
	size_t slot_size;
	size_t priority_off;
} tw_reg_table;

_Static_assert(offsetof(tw_transport_reg, name) == 0 && offsetof(tw_channel_reg, name) == 0 &&
                       offsetof(tw_transport_reg, name_len) == offsetof(tw_channel_reg, name_len),
               "registrations open with name and name_len");

static int64_t tw__reg_priority(const tw_reg_table *tab, const uint8_t *slot)
{
	int64_t prio;
	memcpy(&prio, slot + tab->priority_off, sizeof(prio));
	return prio;
}

/* Any thread: what registering a transport and a channel share. Under the
 * lock, refuses a frozen registry, a name taken already and a full table;
 * else copies `slot` (filled in by the caller) into the table at the place
 * its priority sorts to (highest first; equal priorities in registration
 * order), and sets the context's max_object if given (non-zero) in the same
 * step. On failure the caller still owns what the slot points to. */
static tw_status_t tw__ctx_add_registration(tw_context *ctx, const char *fn,
                                            const tw_reg_table *tab, const void *slot,
                                            uint64_t max_object)
{
	const char *name = slot;
	size_t name_len;
	memcpy(&name_len, (const uint8_t *)slot + offsetof(tw_transport_reg, name_len),
	       sizeof(name_len));
	int64_t prio = tw__reg_priority(tab, slot);
	uint8_t *base = tab->slots;
	tw_status_t st = TW_OK;
	pthread_mutex_lock(&ctx->mu);
	if (ctx->frozen || ctx->close_posted) {
		st = tw__api_fail(TW_ERR_INVAL, "%s: must be called before the first listen or connect",
		                  fn);
		goto out;
	}
	bool taken = *tab->num == TW_REGS_MAX;
	for (size_t i = 0; i < *tab->num && !taken; i++)
		taken = memcmp(base + i * tab->slot_size, name, name_len + 1) == 0;
	if (taken) {
		st = tw__api_fail(TW_ERR_INVAL, "%s: %s name '%s' already registered (or too many)", fn,
		                  tab->what, name);
		goto out;
	}
	size_t pos = *tab->num;
	while (pos > 0 && tw__reg_priority(tab, base + (pos - 1) * tab->slot_size) < prio)
		pos--;
	memmove(base + (pos + 1) * tab->slot_size, base + pos * tab->slot_size,
	        (*tab->num - pos) * tab->slot_size);
	memcpy(base + pos * tab->slot_size, slot, tab->slot_size);
	(*tab->num)++;
	if (max_object)
		ctx->max_object = max_object;
out:
	pthread_mutex_unlock(&ctx->mu);
	return st;
}

/* The user's choice of backends (select.h) for registering `kind`:
 * tw_context_select's, else the environment's. */
static tw_status_t tw__ctx_selected(tw_context *ctx, const char *fn, bool transports,
                                    const char *kind, int64_t *priority)
{
	const char *var = transports ? "TW_TRANSPORTS" : "TW_CHANNELS";
	char chosen[sizeof(ctx->sel_transports)]; /* a copy: tw_context_select may run now */
	pthread_mutex_lock(&ctx->mu);
	bool set = transports ? ctx->sel_transports_set : ctx->sel_channels_set;
	if (set)
		snprintf(chosen, sizeof(chosen), "%s",
		         transports ? ctx->sel_transports : ctx->sel_channels);
	pthread_mutex_unlock(&ctx->mu);
	const char *spec = set ? chosen : getenv(var);
	if (!spec || !*spec)
		return TW_OK;
	char source[TW_SELECT_MAX + 64], detail[TW_DETAIL_MAX];
	snprintf(source, sizeof(source), "%s%s='%.255s'%s", set ? "tw_context_select(" : "",
	         set ? (transports ? "transports" : "channels") : var, spec, set ? ")" : "");
	tw_status_t st = tw__select_check_spec(spec, transports, source, detail, sizeof(detail));
	if (st == TW_OK)
		st = tw__select_apply(spec, source, kind, priority, detail, sizeof(detail));
	return st == TW_OK ? TW_OK : tw__api_fail(st, "%s: %s", fn, detail);
}

tw_status_t tw_context_select(tw_context *ctx, const char *transports, const char *channels)
{
	static const char fn[] = "tw_context_select";
	tw__api_clear();
	if (!ctx)
		return tw__api_fail(TW_ERR_INVAL, "%s: ctx must not be NULL", fn);
	char detail[TW_DETAIL_MAX];
	const char *specs[2] = { transports, channels };
	for (int i = 0; i < 2; i++) {
		if (!specs[i])
			continue;
		if (strlen(specs[i]) >= TW_SELECT_MAX)
			return tw__api_fail(TW_ERR_INVAL, "%s: %s list longer than %d bytes", fn,
			                    i ? "channels" : "transports", TW_SELECT_MAX - 1);
		if (tw__select_check_spec(specs[i], i == 0, i ? "channels" : "transports", detail,
		                          sizeof(detail)) != TW_OK)
			return tw__api_fail(TW_ERR_INVAL, "%s: %s", fn, detail);
	}
	pthread_mutex_lock(&ctx->mu);
	if (transports) {
		snprintf(ctx->sel_transports, sizeof(ctx->sel_transports), "%s", transports);
		ctx->sel_transports_set = true;
	}
	if (channels) {
		snprintf(ctx->sel_channels, sizeof(ctx->sel_channels), "%s", channels);
		ctx->sel_channels_set = true;
	}
	pthread_mutex_unlock(&ctx->mu);
	return TW_OK;
}

/* Remembers a registration refused as not viable, for tw_pipe_get_verdicts. */
static void tw__ctx_note_refused(tw_context *ctx, const char *what, const char *name,
                                 tw_status_t st, const char *detail)
{
	if (st != TW_ERR_UNSUPPORTED)
		return;
	pthread_mutex_lock(&ctx->mu);
	size_t off = strlen(ctx->refused);
	if (off + 1 < sizeof(ctx->refused))
		snprintf(ctx->refused + off, sizeof(ctx->refused) - off, "%s %s: not offered: %s\n",
		         what, name, detail);
	pthread_mutex_unlock(&ctx->mu);
}

tw_status_t tw_context_register_transport(tw_context *ctx, const char *kind, const char *name,
                                          int64_t priority, const char *options)
{
	static const char fn[] = "tw_context_register_transport";
	tw__api_clear();
	if (!ctx || !kind)
		return tw__api_fail(TW_ERR_INVAL, "%s: ctx and kind must not be NULL", fn);
	const tw_transport_ops *ops = tw__transport_find_kind(kind);
	if (!ops)
		return tw__api_fail(TW_ERR_UNSUPPORTED, "%s: no transport kind '%s' in this build", fn,
		                    kind);
	if (!name)
		name = ops->kind;
	tw_status_t st = tw__ctx_check_name(fn, name);
	if (st != TW_OK)
		return st;
	/* Brochure entries under this prefix are not transports (spec 8.1.a). */
	if (strncmp(name, "tensorwire.", 11) == 0)
		return tw__api_fail(TW_ERR_INVAL,
		                    "%s: transport names starting with 'tensorwire.' are reserved (spec "
		                    "8.1): '%s'",
		                    fn, name);
	st = tw__ctx_selected(ctx, fn, true, ops->kind, &priority);
	if (st != TW_OK) {
		tw__ctx_note_refused(ctx, "transport", name, st, tw_last_error());
		return st;
	}
	char rest[256];
	uint64_t max_object = 0;
	st = tw__ctx_split_options(fn, options, rest, sizeof(rest), &max_object);
	if (st != TW_OK)
		return st;
	tw_transport_reg reg;
	memset(&reg, 0, sizeof(reg));
	char detail[TW_DETAIL_MAX] = "";
	st = ops->create(&ctx->loop, rest, &reg.t, detail, sizeof(detail));
	if (st != TW_OK) {
		tw__ctx_note_refused(ctx, "transport", name, st, detail);
		return tw__api_fail(st, "%s: %s", fn, detail);
	}
	reg.name_len = strlen(name);
	memcpy(reg.name, name, reg.name_len + 1);
	reg.ops = ops;
	reg.priority = priority;
	tw_reg_table tab = { "transport", ctx->transports, &ctx->num_transports, sizeof(reg),
		             offsetof(tw_transport_reg, priority) };
	st = tw__ctx_add_registration(ctx, fn, &tab, &reg, max_object);
	if (st != TW_OK)
		ops->destroy(reg.t);
	return st;
}

tw_status_t tw_context_register_channel(tw_context *ctx, const char *kind, const char *name,
                                        int64_t priority, const char *options)
{
	static const char fn[] = "tw_context_register_channel";
	tw__api_clear();
	if (!ctx || !kind)
		return tw__api_fail(TW_ERR_INVAL, "%s: ctx and kind must not be NULL", fn);
	const tw_channel_ops *ops = tw__channel_find_kind(kind);
	if (!ops)
		return tw__api_fail(TW_ERR_UNSUPPORTED, "%s: no channel kind '%s' in this build", fn,
		                    kind);
	if (!name)
		name = ops->kind;
	tw_status_t st = tw__ctx_check_name(fn, name);
	if (st != TW_OK)
		return st;
	st = tw__ctx_selected(ctx, fn, false, ops->kind, &priority);
	if (st != TW_OK) {
		tw__ctx_note_refused(ctx, "channel", name, st, tw_last_error());
		return st;
	}
	tw_channel_reg reg;
	memset(&reg, 0, sizeof(reg));
	char detail[TW_DETAIL_MAX] = "";
	st = ops->create(&ctx->chenv, options ? options : "", &reg.c, detail, sizeof(detail));
	if (st != TW_OK) {
		tw__ctx_note_refused(ctx, "channel", name, st, detail);
		return tw__api_fail(st, "%s: %s", fn, detail);
	}
	reg.name_len = strlen(name);
	memcpy(reg.name, name, reg.name_len + 1);
	reg.ops = ops;
	reg.priority = priority;
	tw_reg_table tab = { "channel", ctx->channels, &ctx->num_channels, sizeof(reg),
		             offsetof(tw_channel_reg, priority) };
	st = tw__ctx_add_registration(ctx, fn, &tab, &reg, 0);
	if (st != TW_OK)
		ops->destroy(reg.c);
	return st;
}

/* Stores a millisecond setting of the context (at offset `off`). */
static tw_status_t tw__ctx_set_ms(tw_context *ctx, const char *fn, size_t off, uint64_t ms)
{
	tw__api_clear();
	if (!ctx)
		return tw__api_fail(TW_ERR_INVAL, "%s: ctx must not be NULL", fn);
	__atomic_store_n((uint64_t *)((char *)ctx + off), ms, __ATOMIC_RELAXED);
	return TW_OK;
}

tw_status_t tw_context_set_handshake_timeout(tw_context *ctx, uint64_t timeout_ms)
{
	return tw__ctx_set_ms(ctx, "tw_context_set_handshake_timeout",
	                      offsetof(tw_context, handshake_timeout_ms), timeout_ms);
}

tw_status_t tw_context_set_connect_timeout(tw_context *ctx, uint64_t timeout_ms)
{
	return tw__ctx_set_ms(ctx, "tw_context_set_connect_timeout",
	                      offsetof(tw_context, connect_timeout_ms), timeout_ms);
}

tw_status_t tw_context_set_liveness_timeout(tw_context *ctx, uint64_t timeout_ms)
{
	return tw__ctx_set_ms(ctx, "tw_context_set_liveness_timeout", offsetof(tw_context, liveness_ms),
	                      timeout_ms);
}

tw_status_t tw_context_set_operation_timeout(tw_context *ctx, uint64_t timeout_ms)
{
	return tw__ctx_set_ms(ctx, "tw_context_set_operation_timeout",
	                      offsetof(tw_context, operation_timeout_ms), timeout_ms);
}

tw_status_t tw_context_set_eager(tw_context *ctx, bool on)
{
	tw__api_clear();
	if (!ctx)
		return tw__api_fail(TW_ERR_INVAL, "tw_context_set_eager: ctx must not be NULL");
	__atomic_store_n(&ctx->eager, on, __ATOMIC_RELAXED);
	return TW_OK;
}

void tw__ctx_conn_opts(tw_context *ctx, tw_conn_opts *opts)
{
	opts->connect_timeout_ms = __atomic_load_n(&ctx->connect_timeout_ms, __ATOMIC_RELAXED);
	opts->liveness_ms = __atomic_load_n(&ctx->liveness_ms, __ATOMIC_RELAXED);
	pthread_mutex_lock(&ctx->mu);
	snprintf(opts->ifname, sizeof(opts->ifname), "%s", ctx->socket_ifname);
	opts->family = ctx->socket_family;
	pthread_mutex_unlock(&ctx->mu);
}

/* The channels' view of tw__ctx_conn_opts (channel.h). */
static void tw__ctx_chenv_conn_opts(const tw_channel_env *env, tw_conn_opts *out)
{
	tw__ctx_conn_opts(TW_CONTAINER_OF(env, tw_context, chenv), out);
}

/* "4", "AF_INET", "ipv4" and the same for 6; 0 for NULL or "". */
static int tw__ctx_parse_family(const char *s, bool *ok)
{
	*ok = true;
	if (!s || !*s)
		return 0;
	if (!strcmp(s, "4") || !strcasecmp(s, "AF_INET") || !strcasecmp(s, "ipv4"))
		return AF_INET;
	if (!strcmp(s, "6") || !strcasecmp(s, "AF_INET6") || !strcasecmp(s, "ipv6"))
		return AF_INET6;
	*ok = false;
	return 0;
}

tw_status_t tw_context_set_socket_ifname(tw_context *ctx, const char *ifnames, int family)
{
	static const char fn[] = "tw_context_set_socket_ifname";
	tw__api_clear();
	if (!ctx)
		return tw__api_fail(TW_ERR_INVAL, "%s: ctx must not be NULL", fn);
	if (family != 0 && family != 4 && family != 6)
		return tw__api_fail(TW_ERR_INVAL, "%s: family %d is not 0, 4 or 6", fn, family);
	if (ifnames && strlen(ifnames) >= sizeof(ctx->socket_ifname))
		return tw__api_fail(TW_ERR_INVAL, "%s: interface list of %zu bytes is too long", fn,
		                    strlen(ifnames));
	pthread_mutex_lock(&ctx->mu);
	snprintf(ctx->socket_ifname, sizeof(ctx->socket_ifname), "%s", ifnames ? ifnames : "");
	ctx->socket_family = family == 4 ? AF_INET : family == 6 ? AF_INET6 : 0;
	pthread_mutex_unlock(&ctx->mu);
	return TW_OK;
}

/* ---- lifecycle ------------------------------------------------------------ */

tw_status_t tw_context_create(const char *name, tw_context **ctx_out)
{
	static const char fn[] = "tw_context_create";
	tw__api_clear();
	if (!ctx_out)
		return tw__api_fail(TW_ERR_INVAL, "%s: ctx_out must not be NULL", fn);
	if (!name)
		name = "";
	tw_context *ctx = tw__calloc(1, sizeof(*ctx));
	if (!ctx)
		return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
	ctx->name_len = strlen(name);
	ctx->name = tw__memdup_str(name, ctx->name_len);
	if (!ctx->name) {
		tw__free(ctx);
		return tw__api_fail(TW_ERR_NOMEM, "%s: out of memory", fn);
	}
	ctx->max_object = TW_DEFAULT_MAX_OBJECT;
	ctx->handshake_timeout_ms = TW_DEFAULT_HANDSHAKE_TIMEOUT_MS;
	ctx->connect_timeout_ms = TW_DEFAULT_CONNECT_TIMEOUT_MS;
	ctx->liveness_ms = TW_DEFAULT_LIVENESS_TIMEOUT_MS;
	/* The environment's choice of interfaces, as NCCL_SOCKET_IFNAME and
	 * NCCL_SOCKET_FAMILY (tensorwire.h); the API overrides it. */
	const char *env_if = getenv("TW_SOCKET_IFNAME");
	bool fam_ok;
	ctx->socket_family = tw__ctx_parse_family(getenv("TW_SOCKET_FAMILY"), &fam_ok);
	if (!fam_ok || (env_if && strlen(env_if) >= sizeof(ctx->socket_ifname))) {
		tw__free(ctx->name);
		tw__free(ctx);
		return tw__api_fail(TW_ERR_INVAL,
		                    "%s: TW_SOCKET_IFNAME is too long or TW_SOCKET_FAMILY ('%s') is not "
		                    "4, 6, AF_INET or AF_INET6",
		                    fn, getenv("TW_SOCKET_FAMILY") ? getenv("TW_SOCKET_FAMILY") : "");
	}
	snprintf(ctx->socket_ifname, sizeof(ctx->socket_ifname), "%s", env_if ? env_if : "");
	const char *env_eager = getenv("TW_EAGER");
	if (env_eager && *env_eager && strcmp(env_eager, "0") != 0 && strcmp(env_eager, "1") != 0) {
		tw__free(ctx->name);
		tw__free(ctx);
		return tw__api_fail(TW_ERR_INVAL, "%s: TW_EAGER ('%s') is not 0 or 1", fn, env_eager);
	}
	/* spec 8.4: on unless TW_EAGER=0 */
	ctx->eager = !(env_eager && strcmp(env_eager, "0") == 0);
	pthread_mutex_init(&ctx->mu, NULL);
	pthread_mutex_init(&ctx->join_mu, NULL);
	tw__list_init(&ctx->all_pipes);
	tw__list_init(&ctx->all_listeners);
	tw__list_init(&ctx->live_pipes);
	tw__list_init(&ctx->live_listeners);
	ctx->chenv.loop = &ctx->loop;
	ctx->chenv.find_transport_kind = tw__transport_find_kind;
	ctx->chenv.conn_opts = tw__ctx_chenv_conn_opts;
	char detail[TW_DETAIL_MAX] = "";
	tw_status_t st = tw__loop_start(&ctx->loop, tw__ctx_idle_check, ctx, detail, sizeof(detail));
	if (st != TW_OK) {
		pthread_mutex_destroy(&ctx->mu);
		pthread_mutex_destroy(&ctx->join_mu);
		tw__free(ctx->name);
		tw__free(ctx);
		return tw__api_fail(st, "%s: %s", fn, detail);
	}
	*ctx_out = ctx;
	return TW_OK;
}

void tw_context_close(tw_context *ctx)
{
	if (!ctx)
		return;
	pthread_mutex_lock(&ctx->mu);
	if (!ctx->close_posted) {
		ctx->close_posted = true;
		/* If the loop already finished there is nothing left to close. */
		if (!tw__loop_post(&ctx->loop, &ctx->close_cmd, tw__ctx_do_close, ctx)) {
		}
	}
	pthread_mutex_unlock(&ctx->mu);
}

tw_status_t tw_context_join(tw_context *ctx)
{
	static const char fn[] = "tw_context_join";
	tw__api_clear();
	if (!ctx)
		return tw__api_fail(TW_ERR_INVAL, "%s: ctx must not be NULL", fn);
	if (tw__loop_on_thread(&ctx->loop))
		return tw__api_fail(TW_ERR_INVAL,
		                    "%s: called on the context's loop thread (from a callback)", fn);
	if (tw__loop_forked(&ctx->loop))
		return tw__ctx_unposted(ctx, fn); /* no loop thread here to join */
	tw_context_close(ctx);
	pthread_mutex_lock(&ctx->join_mu);
	if (!ctx->joined) {
		tw__loop_join(&ctx->loop);
		for (size_t i = 0; i < ctx->num_transports; i++)
			ctx->transports[i].ops->destroy(ctx->transports[i].t);
		for (size_t i = 0; i < ctx->num_channels; i++)
			ctx->channels[i].ops->destroy(ctx->channels[i].c);
		ctx->joined = true;
	}
	pthread_mutex_unlock(&ctx->join_mu);
	return TW_OK;
}

void tw_context_destroy(tw_context *ctx)
{
	if (!ctx)
		return;
	if (tw__loop_on_thread(&ctx->loop)) {
		/* Freeing the loop from inside it cannot work; leaking is the only
		 * safe answer to this misuse. */
		(void)tw__api_fail(TW_ERR_INVAL,
		                   "tw_context_destroy: called on the context's loop thread; ignored");
		return;
	}
	if (tw_context_join(ctx) != TW_OK)
		return; /* the loop thread, or a forked child: nothing can be freed safely */
	/* The loop has stopped: whatever the application did not destroy goes. */
	while (!tw__list_empty(&ctx->all_pipes)) {
		tw_pipe *p = TW_CONTAINER_OF(ctx->all_pipes.next, tw_pipe, all_link);
		tw__list_remove(&p->all_link);
		tw__pipe_free(p);
	}
	while (!tw__list_empty(&ctx->all_listeners)) {
		tw_listener *l = TW_CONTAINER_OF(ctx->all_listeners.next, tw_listener, all_link);
		tw__list_remove(&l->all_link);
		tw__listener_free(l);
	}
	tw__loop_free(&ctx->loop);
	pthread_mutex_destroy(&ctx->mu);
	pthread_mutex_destroy(&ctx->join_mu);
	tw__free(ctx->name);
	tw__free(ctx);
}
