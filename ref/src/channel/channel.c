/*
 * channel.c - what every channel may share (see channel.h).
 */
#include <stdio.h>
#include <unistd.h>

#include "channel/channel.h"

#include "platform/error.h"
#include "platform/platform.h"

typedef struct tw_obj_write {
	tw_nop_writer w;
	tw_conn_write_cb cb;
	void *arg;
} tw_obj_write;

static void tw_channel_on_obj_written(tw_conn *c, tw_status_t st, const char *detail, void *arg)
{
	tw_obj_write *ow = arg;
	tw_conn_write_cb cb = ow->cb;
	void *cb_arg = ow->arg;
	tw__nop_writer_free(&ow->w);
	tw__free(ow);
	cb(c, st, detail, cb_arg);
}

tw_status_t tw__channel_write_obj(tw_conn *c, tw_nop_writer *w, tw_conn_write_cb cb, void *arg)
{
	tw_status_t st = tw__nop_writer_finish(w);
	tw_obj_write *ow = st == TW_OK ? tw__calloc(1, sizeof(*ow)) : NULL;
	if (!ow) {
		tw__nop_writer_free(w);
		return st == TW_OK ? TW_ERR_NOMEM : st;
	}
	ow->w = *w;
	ow->cb = cb;
	ow->arg = arg;
	tw__nop_writer_init(w);
	tw_iov iov = { ow->w.buf, ow->w.len };
	st = c->ops->write(c, &iov, 1, TW_WRITE_OBJECT, tw_channel_on_obj_written, ow);
	if (st != TW_OK) {
		tw__nop_writer_free(&ow->w);
		tw__free(ow);
	}
	return st;
}

tw_status_t tw__channel_peer_is(tw_conn *c, pid_t pid, char *detail, size_t detail_len)
{
	char why[256] = "this transport cannot tell who its peer is";
	int is = c->ops->peer_of ? c->ops->peer_of(c, pid, why, sizeof(why)) : -1;
	if (is == 1)
		return TW_OK;
	char whose[48] = "this process";
	if (pid != getpid())
		snprintf(whose, sizeof(whose), "process %d", (int)pid);
	tw__detail(detail, detail_len,
	           "refused the peer %s: it names memory of %s by address, but it %s (%s)",
	           c->ops->peer(c), whose,
	           is == 0 ? "is another process" : "could not be checked to be that process", why);
	return TW_ERR_PROTO;
}

bool tw__channel_peer_left(tw_conn *c)
{
	return c && c->ops->peer_left && c->ops->peer_left(c);
}

bool tw__channel_writer_left(tw_conn *c, char *detail, size_t detail_len)
{
	if (!tw__channel_peer_left(c))
		return false;
	tw__detail(detail, detail_len,
	           "the writer at %s ended its side before this tensor was copied out of its "
	           "memory: its write failed there and the bytes may have changed since, so none "
	           "are delivered (spec 4.4.e)",
	           c->ops->peer(c));
	return true;
}
