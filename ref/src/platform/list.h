/*
 * list.h - an intrusive doubly-linked list with a sentinel head, used for
 * queues (pending messages, accepts, pipes of a context). It must not
 * allocate and does no locking: the owner decides which thread touches it.
 */
#ifndef TW_PLATFORM_LIST_H
#define TW_PLATFORM_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tw_list {
	struct tw_list *prev, *next;
} tw_list;

#define TW_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

static inline void tw__list_init(tw_list *head) { head->prev = head->next = head; }
static inline bool tw__list_empty(const tw_list *head) { return head->next == head; }
static inline bool tw__list_linked(const tw_list *node) { return node->next != NULL && node->next != node; }

static inline void tw__list_push_back(tw_list *head, tw_list *node)
{
	node->prev = head->prev;
	node->next = head;
	head->prev->next = node;
	head->prev = node;
}

static inline void tw__list_remove(tw_list *node)
{
	node->prev->next = node->next;
	node->next->prev = node->prev;
	node->prev = node->next = node;
}

static inline tw_list *tw__list_front(const tw_list *head) { return tw__list_empty(head) ? NULL : head->next; }

#define TW_LIST_FOREACH_SAFE(it, tmp, head) \
	for ((it) = (head)->next, (tmp) = (it)->next; (it) != (head); (it) = (tmp), (tmp) = (it)->next)

#endif /* TW_PLATFORM_LIST_H */
