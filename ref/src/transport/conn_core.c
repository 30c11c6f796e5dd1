/*
 * conn_core.c - what every transport's connection shares (see conn_core.h).
 */
#include "transport/conn_core.h"

#include <stdarg.h>
#include <stdio.h>

#include "platform/platform.h"

void tw__conn_core_init(tw_conn_core *c, const tw_conn_ops *ops, const tw_conn_core_ops *cops,
                        tw_transport *t, const char *who, const char *peer,
                        enum tw_conn_phase phase, unsigned refs)
{
	c->base.ops = ops;
	c->base.transport = t;
	c->cops = cops;
	c->who = who;
	c->phase = phase;
	c->refs = refs;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
}

void tw__conn_core_unref(tw_conn_core *c)
{
	if (--c->refs > 0)
		return;
	c->cops->free_conn(c);
}

/* ---- operations ---- */

static void tw__conn_op_deliver(void *arg)
{
	tw_conn_op *op = arg;
	tw_conn_core *c = op->conn;
	bool ok = op->status == TW_OK;
	const char *detail = ok ? ""
	                     : op->is_write && c->wr_err != TW_OK && op->status == c->wr_err
	                         ? c->wr_detail
	                         : c->err_detail;
	if (op->is_write)
		op->wcb(&c->base, op->status, detail, op->arg);
	else
		op->rcb(&c->base, op->status, detail, ok ? op->buf : NULL, ok ? op->len : 0, op->arg);
	c->cops->free_op(op, ok);
	tw__conn_core_unref(c);
}

static void tw__conn_op_complete(tw_conn_op *op, tw_status_t status)
{
	op->status = status;
	tw__loop_defer(op->conn->base.transport->loop, &op->dfr, tw__conn_op_deliver, op);
}

bool tw__conn_queue(tw_conn_core *c, tw_conn_op *op, bool is_write)
{
	op->conn = c;
	op->is_write = is_write;
	op->next = NULL;
	c->refs++;
	if (is_write && c->wr_err != TW_OK && !tw__conn_done(c)) {
		tw__conn_op_complete(op, c->wr_err);
		return false;
	}
	if (tw__conn_done(c)) {
		tw__conn_op_complete(op, c->err);
		return false;
	}
	tw_conn_op **head = is_write ? &c->wq_head : &c->rq_head;
	tw_conn_op **tail = is_write ? &c->wq_tail : &c->rq_tail;
	if (*tail)
		(*tail)->next = op;
	else
		*head = op;
	*tail = op;
	return true;
}

static tw_conn_op *tw__conn_pop(tw_conn_op **head, tw_conn_op **tail)
{
	tw_conn_op *op = *head;
	*head = op->next;
	if (!*head)
		*tail = NULL;
	op->next = NULL;
	return op;
}

void tw__conn_op_done(tw_conn_core *c, bool is_write)
{
	tw_conn_op *op = is_write ? tw__conn_pop(&c->wq_head, &c->wq_tail)
	                          : tw__conn_pop(&c->rq_head, &c->rq_tail);
	tw__conn_op_complete(op, TW_OK);
}

static void tw__conn_fail_queues(tw_conn_core *c, tw_status_t status)
{
	while (c->wq_head)
		tw__conn_op_complete(tw__conn_pop(&c->wq_head, &c->wq_tail), status);
	while (c->rq_head)
		tw__conn_op_complete(tw__conn_pop(&c->rq_head, &c->rq_tail), status);
}

/* ---- the end watch ---- */

/* A report still on its way when the owner closes the connection comes as
 * TW_ERR_CLOSED: once the owner has let a connection go it hears nothing
 * else of it (transport.h). */
static void tw__conn_watch_deliver(void *arg)
{
	tw_conn_core *c = arg;
	if (c->phase == TW_CONN_CLOSED) {
		char detail[TW_DETAIL_MAX];
		tw__detail(detail, sizeof(detail), "%s: closed locally", c->who);
		c->watch_cb(&c->base, TW_ERR_CLOSED, detail, c->watch_arg);
	} else {
		c->watch_cb(&c->base, c->watch_status, c->err_detail, c->watch_arg);
	}
	tw__conn_core_unref(c);
}

static void tw__conn_hangup_deliver(void *arg)
{
	tw_conn_core *c = arg;
	char detail[TW_DETAIL_MAX];
	tw__detail(detail, sizeof(detail),
	           "%s: connection closed by peer %s, with bytes it sent still unread", c->who,
	           c->peer);
	if (c->phase != TW_CONN_CLOSED) /* an owner that closed hears only the end */
		c->hup_cb(&c->base, detail, c->watch_arg);
	tw__conn_core_unref(c);
}

/* Reports the end to the watch, if one is armed (after the ops' callbacks,
 * which were deferred first). */
static void tw__conn_watch_fire(tw_conn_core *c, tw_status_t status)
{
	if (!c->watch_armed)
		return;
	c->watch_armed = false;
	c->watch_status = status;
	tw__loop_defer(c->base.transport->loop, &c->watch_dfr, tw__conn_watch_deliver, c);
}

bool tw__conn_watch_arm(tw_conn_core *c, tw_conn_end_cb cb, tw_conn_hangup_cb hup_cb, void *arg)
{
	c->watch_cb = cb;
	c->hup_cb = hup_cb;
	c->watch_arg = arg;
	c->watch_armed = true;
	c->refs++;
	if (tw__conn_done(c)) {
		tw__conn_watch_fire(c, c->err);
		return false;
	}
	return true;
}

bool tw__conn_hangup_wanted(const tw_conn_core *c)
{
	return c->phase == TW_CONN_OPEN && c->watch_armed && c->hup_cb && !c->hup_reported &&
	       !c->rq_head;
}

void tw__conn_hangup(tw_conn_core *c)
{
	if (!tw__conn_hangup_wanted(c))
		return;
	c->hup_reported = true;
	c->refs++;
	tw__loop_defer(c->base.transport->loop, &c->hup_dfr, tw__conn_hangup_deliver, c);
}

/* ---- failing and closing ---- */

void tw__conn_fail(tw_conn_core *c, tw_status_t status, const char *fmt, ...)
{
	if (tw__conn_done(c))
		return;
	c->phase = TW_CONN_FAILED;
	c->err = status;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err_detail, sizeof(c->err_detail), fmt, ap);
	va_end(ap);
	tw__conn_fail_queues(c, status);
	tw__conn_watch_fire(c, status);
	if (c->cops->failed)
		c->cops->failed(c);
}

void tw__conn_fail_writes(tw_conn_core *c, tw_status_t status, const char *fmt, ...)
{
	if (tw__conn_done(c) || c->wr_err != TW_OK)
		return;
	c->wr_err = status;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->wr_detail, sizeof(c->wr_detail), fmt, ap);
	va_end(ap);
	while (c->wq_head)
		tw__conn_op_complete(tw__conn_pop(&c->wq_head, &c->wq_tail), status);
	if (c->cops->writes_failed)
		c->cops->writes_failed(c);
}

bool tw__conn_close_ops(tw_conn_core *c)
{
	if (c->phase == TW_CONN_CLOSED)
		return false;
	if (c->phase != TW_CONN_FAILED) {
		c->err = TW_ERR_CLOSED;
		tw__detail(c->err_detail, sizeof(c->err_detail), "%s: connection to %s closed locally",
		           c->who, c->peer);
	}
	c->phase = TW_CONN_CLOSED;
	tw__conn_fail_queues(c, TW_ERR_CLOSED);
	tw__conn_watch_fire(c, TW_ERR_CLOSED);
	return true;
}

void tw__conn_poll(tw_conn_core *c, uv_poll_t *poll, int *current, int want, uv_poll_cb cb)
{
	if (want == *current)
		return;
	*current = want;
	if (want == 0) {
		uv_poll_stop(poll);
		return;
	}
	int rc = uv_poll_start(poll, want, cb);
	if (rc != 0) {
		*current = 0;
		tw__conn_fail(c, TW_ERR_SYS, "%s: uv_poll_start on connection to %s: %s", c->who,
		              c->peer, uv_strerror(rc));
	}
}

bool tw__conn_peer_left(const tw_conn_core *c, int fd)
{
	return fd < 0 || tw__conn_done(c) || tw__sys_peer_left(fd);
}
