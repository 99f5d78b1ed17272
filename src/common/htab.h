/* SPDX-License-Identifier: Apache-2.0 */
/*
 * htab.h - a small intrusive chained hash table
 *
 * For the maps that are not the KV index (which has its own, measured
 * design: src/metadata_server/index.h): the resource manager's regions by
 * id and clients by id string, libmaru's key map.  (libmaru's mapping
 * table is not one of them: its readers are lock-free, mapper.c.)  The element
 *embeds a struct hnode and keeps its own key; the table stores each node's
 *hash, so growing (at load factor 1, doubling from HTAB_MIN) never calls back
 *into the user, and a lookup compares keys only on a full hash match.
 *
 *	struct region { ...; struct hnode hn; };
 *	h = htab_hash_u64(id);
 *	htab_for_hash(&t, h, n) {
 *		r = container_of(n, struct region, hn);
 *		if (r->id == id)
 *			return r;
 *	}
 *
 * Ownership: the table owns its bucket array only; it borrows the nodes.
 * Context: not thread-safe (each user's table lives in one thread).
 */
#ifndef MARU_COMMON_HTAB_H
#define MARU_COMMON_HTAB_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef container_of
#define container_of(p, type, member)                                          \
	((type *)(void *)((char *)(p)-offsetof(type, member)))
#endif

#define HTAB_MIN 64

struct hnode {
	struct hnode *next;
	uint64_t hash;
};

struct htab {
	struct hnode **b; /* owns: @cap buckets, NULL while empty */
	size_t cap;	  /* a power of two, or 0 */
	size_t n;	  /* nodes linked */
};

#define HTAB_INIT                                                              \
	{                                                                      \
		NULL, 0, 0                                                     \
	}

#define HTAB_FNV_INIT 1469598103934665603ull

/* FNV-1a of @n more bytes after @h (HTAB_FNV_INIT to start) */
static inline uint64_t htab_fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *s = p;

	while (n--) {
		h ^= *s++;
		h *= 1099511628211ull;
	}
	return h;
}

/* FNV-1a of @n bytes, for string keys */
static inline uint64_t htab_hash_bytes(const void *p, size_t n)
{
	return htab_fnv(HTAB_FNV_INIT, p, n);
}

/* a 64-bit mix (splitmix64's finaliser), for integer keys */
static inline uint64_t htab_hash_u64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* the nodes whose hash is @h (and others sharing their bucket) */
#define htab_for_hash(t, h, node)                                              \
	for ((node) = (t)->cap ? (t)->b[(h) & ((t)->cap - 1)] : NULL; (node);  \
	     (node) = (node)->next)

/* every node; @tmp keeps the walk valid when @node is removed */
#define htab_for_each(t, i, node, tmp)                                         \
	for ((i) = 0; (i) < (t)->cap; (i)++)                                   \
		for ((node) = (t)->b[i]; (node) && ((tmp) = (node)->next, 1);  \
		     (node) = (tmp))

/* room for one more node.  Return: 0 or -ENOMEM (nothing changed) */
static inline int htab_reserve(struct htab *t)
{
	size_t cap = t->cap ? t->cap * 2 : HTAB_MIN, i;
	struct hnode **nb, *n, *next;

	if (t->n < t->cap)
		return 0;
	nb = calloc(cap, sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	for (i = 0; i < t->cap; i++) {
		for (n = t->b[i]; n; n = next) {
			next = n->next;
			n->next = nb[n->hash & (cap - 1)];
			nb[n->hash & (cap - 1)] = n;
		}
	}
	free(t->b);
	t->b = nb;
	t->cap = cap;
	return 0;
}

/* link @n with hash @h; htab_reserve() succeeded before */
static inline void htab_insert(struct htab *t, struct hnode *n, uint64_t h)
{
	struct hnode **bp = &t->b[h & (t->cap - 1)];

	n->hash = h;
	n->next = *bp;
	*bp = n;
	t->n++;
}

/* unlink @n (linked in @t) */
static inline void htab_remove(struct htab *t, struct hnode *n)
{
	struct hnode **pp;

	for (pp = &t->b[n->hash & (t->cap - 1)]; *pp; pp = &(*pp)->next) {
		if (*pp == n) {
			*pp = n->next;
			t->n--;
			return;
		}
	}
}

/* free the buckets (the nodes are the caller's) */
static inline void htab_free(struct htab *t)
{
	free(t->b);
	t->b = NULL;
	t->cap = t->n = 0;
}

/* htab_destroy - free(3) every node's element (@off: where its hnode is,
 * offsetof(type, member)), then the table */
static inline void htab_destroy(struct htab *t, size_t off)
{
	struct hnode *n, *next;
	size_t i;

	htab_for_each(t, i, n, next) free((char *)n - off);
	htab_free(t);
}

#endif
