/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.c - the eviction policies (see policy.h)
 *
 * LRU: one intrusive doubly linked list through the entries, the most
 * recently used at the head, the victim at the tail.  An entry is in the
 * list exactly when it is evictable; pol_next == NULL && pol_prev == NULL
 * && head != e means "not in the list" (a one-entry list has e == head).
 */
#include "policy.h"

#include <errno.h>
#include <string.h>

static bool lru_linked(const struct pol *p, const struct ix_entry *e)
{
	return e->pol_prev || e->pol_next || p->head == e;
}

static void lru_unlink(struct pol *p, struct ix_entry *e)
{
	if (e->pol_prev)
		e->pol_prev->pol_next = e->pol_next;
	else
		p->head = e->pol_next;
	if (e->pol_next)
		e->pol_next->pol_prev = e->pol_prev;
	else
		p->tail = e->pol_prev;
	e->pol_prev = e->pol_next = NULL;
	p->n--;
}

static void lru_push(struct pol *p, struct ix_entry *e)
{
	e->pol_prev = NULL;
	e->pol_next = p->head;
	if (p->head)
		p->head->pol_prev = e;
	else
		p->tail = e;
	p->head = e;
	p->n++;
}

static void lru_add(struct pol *p, struct ix_entry *e)
{
	if (!lru_linked(p, e))
		lru_push(p, e);
}

static void lru_touch(struct pol *p, struct ix_entry *e)
{
	if (p->head == e || !lru_linked(p, e))
		return;
	lru_unlink(p, e);
	lru_push(p, e);
}

static void lru_remove(struct pol *p, struct ix_entry *e)
{
	if (lru_linked(p, e))
		lru_unlink(p, e);
}

static struct ix_entry *lru_coldest(struct pol *p)
{
	return p->tail;
}

static struct ix_entry *lru_warmer(struct pol *p, struct ix_entry *e)
{
	(void)p;
	return e->pol_prev;
}

static const struct pol_ops lru_ops = {
	"lru", lru_add, lru_touch, lru_remove, lru_coldest, lru_warmer,
};

static void none_entry(struct pol *p, struct ix_entry *e)
{
	(void)p;
	(void)e;
}

static const struct pol_ops none_ops = {
	"none", none_entry, none_entry, none_entry, NULL, NULL,
};

int pol_init(struct pol *p, const char *name)
{
	memset(p, 0, sizeof(*p));
	if (!strcmp(name, "lru"))
		p->ops = &lru_ops;
	else if (!strcmp(name, "none"))
		p->ops = &none_ops;
	else
		return -EINVAL;
	return 0;
}
