/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.h - which KV entry to evict next (docs/metadata-server.md, Eviction)
 *
 * A policy orders the evictable entries of the index: those not pinned.
 * The store tells it every use of an entry (REGISTER, LOOKUP, EXISTS,
 * PIN, single and batch, and the touched keys clients report), every
 * entry that stops being evictable (pinned, deleted, evicted) and every
 * one that becomes evictable again (unpinned); it asks for the coldest.
 * Each call is O(1): the entries carry the policy's links themselves
 * (ix_entry.pol_prev/pol_next), so a policy allocates nothing.
 *
 * Two policies exist: "lru" (least recently used first; a doubly linked
 * list, most recent at the head) and "none" (nothing is ever evicted:
 * --eviction none keeps the store-only behaviour).  Another policy (LFU,
 * TTL) is one more struct pol_ops.
 *
 * Context: single-threaded, like the index.
 */
#ifndef MARU_MDS_POLICY_H
#define MARU_MDS_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "index.h"

struct pol;

struct pol_ops {
	const char *name;
	/* @e became evictable (registered, unpinned): a use */
	void (*add)(struct pol *p, struct ix_entry *e);
	/* a use of an evictable entry */
	void (*touch)(struct pol *p, struct ix_entry *e);
	/* @e is no longer evictable (pinned, deleted, evicted) */
	void (*remove)(struct pol *p, struct ix_entry *e);
	/* the next victim, or NULL when nothing is evictable */
	struct ix_entry *(*coldest)(struct pol *p);
	/* the victim after @e (NULL: none) */
	struct ix_entry *(*warmer)(struct pol *p, struct ix_entry *e);
};

struct pol {
	const struct pol_ops *ops;
	struct ix_entry *head, *tail; /* borrows: lru, most recent first */
	uint64_t n;		      /* entries in the list */
};

/**
 * pol_init - an empty policy by name ("lru", "none")
 * Return: 0, or -EINVAL for an unknown name.
 */
int pol_init(struct pol *p, const char *name);

static inline bool pol_evicts(const struct pol *p)
{
	return p->ops->coldest != NULL;
}

static inline void pol_add(struct pol *p, struct ix_entry *e)
{
	p->ops->add(p, e);
}

static inline void pol_touch(struct pol *p, struct ix_entry *e)
{
	p->ops->touch(p, e);
}

static inline void pol_remove(struct pol *p, struct ix_entry *e)
{
	p->ops->remove(p, e);
}

static inline struct ix_entry *pol_coldest(struct pol *p)
{
	return p->ops->coldest ? p->ops->coldest(p) : NULL;
}

static inline struct ix_entry *pol_warmer(struct pol *p, struct ix_entry *e)
{
	return p->ops->warmer ? p->ops->warmer(p, e) : NULL;
}

#endif /* MARU_MDS_POLICY_H */
