/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keymap.c - the keys this handler stored: key -> (region, page)
 *
 * Upstream keeps a dict of the keys a handler registered so that a second
 * store of the same key costs no round trip, delete can free the page, and
 * freeing a page forgets its keys.  Here it is a chained hash table over a
 * canonical byte form of the key: a type byte, then the UTF-8/bin bytes or
 * the integer in little-endian.  All non-negative integers share one form
 * (the server sees the same msgpack uint whether the caller said INT or
 * UINT), negative ones another; strings and bytes never collide with
 * integers or with each other.
 *
 * Each entry is also linked into its page's list (owned_region.page_keys),
 * maintained by handler.c.
 *
 * Context: handler.c calls it under the handler's write lock only.
 */
#include "private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

#define KEYMAP_MIN_BUCKETS 64

/* canonical bytes of a key: header into @hdr, body pointer into *body */
static size_t key_form(const struct maru_key *k, uint8_t hdr[9],
		       const uint8_t **body, size_t *bodylen)
{
	switch (k->type) {
	case MARU_KEY_STR:
	case MARU_KEY_BIN:
		hdr[0] = k->type == MARU_KEY_STR ? 'S' : 'B';
		*body = (const uint8_t *)k->str;
		*bodylen = k->len;
		return 1;
	case MARU_KEY_INT:
		if (k->i < 0) {
			hdr[0] = 'I';
			put_u64le(hdr + 1, (uint64_t)k->i);
			break;
		}
		hdr[0] = 'U';
		put_u64le(hdr + 1, (uint64_t)k->i);
		break;
	default:
		hdr[0] = 'U';
		put_u64le(hdr + 1, k->u);
		break;
	}
	*body = NULL;
	*bodylen = 0;
	return 9;
}

/* FNV-1a over the canonical form */
static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint64_t key_hash(const uint8_t *hdr, size_t hl, const uint8_t *body,
			 size_t bl)
{
	return fnv(fnv(0xcbf29ce484222325ull, hdr, hl), body, bl);
}

void maru__keymap_init(struct maru__keymap *km)
{
	memset(km, 0, sizeof(*km));
}

void maru__keymap_destroy(struct maru__keymap *km)
{
	struct maru__keyent *e, *next;
	size_t i;

	for (i = 0; i < km->nbuckets; i++) {
		for (e = km->buckets[i]; e; e = next) {
			next = e->next;
			free(e);
		}
	}
	free(km->buckets);
	maru__keymap_init(km);
}

struct maru__keyent *maru__keymap_find(const struct maru__keymap *km,
				       const struct maru_key *key)
{
	const uint8_t *body;
	struct maru__keyent *e;
	size_t hl, bl;
	uint8_t hdr[9];
	uint64_t h;

	if (!km->nbuckets)
		return NULL;
	hl = key_form(key, hdr, &body, &bl);
	h = key_hash(hdr, hl, body, bl);
	for (e = km->buckets[h & (km->nbuckets - 1)]; e; e = e->next) {
		if (e->hash == h && e->klen == hl + bl &&
		    !memcmp(e->kbytes, hdr, hl) &&
		    (!bl || !memcmp(e->kbytes + hl, body, bl)))
			return e;
	}
	return NULL;
}

/* double the table when it is as full as it is wide */
static int keymap_grow(struct maru__keymap *km)
{
	struct maru__keyent **nb, *e, *next;
	size_t n, i;

	n = km->nbuckets ? km->nbuckets * 2 : KEYMAP_MIN_BUCKETS;
	nb = calloc(n, sizeof(*nb));
	if (!nb)
		return -ENOMEM;
	for (i = 0; i < km->nbuckets; i++) {
		for (e = km->buckets[i]; e; e = next) {
			next = e->next;
			e->next = nb[e->hash & (n - 1)];
			nb[e->hash & (n - 1)] = e;
		}
	}
	free(km->buckets);
	km->buckets = nb;
	km->nbuckets = n;
	return 0;
}

struct maru__keyent *maru__keymap_insert(struct maru__keymap *km,
					 const struct maru_key *key,
					 uint64_t region_id, uint64_t page)
{
	const uint8_t *body;
	struct maru__keyent *e;
	size_t hl, bl, b;
	uint8_t hdr[9];

	if (km->count >= km->nbuckets && keymap_grow(km) < 0)
		return NULL;
	hl = key_form(key, hdr, &body, &bl);
	if (bl > SIZE_MAX - sizeof(*e) - hl)
		return NULL;
	e = malloc(sizeof(*e) + hl + bl);
	if (!e)
		return NULL;
	memcpy(e->kbytes, hdr, hl);
	if (bl)
		memcpy(e->kbytes + hl, body, bl);
	e->klen = hl + bl;
	e->hash = key_hash(hdr, hl, body, bl);
	e->region_id = region_id;
	e->page = page;
	e->page_next = NULL;
	b = e->hash & (km->nbuckets - 1);
	e->next = km->buckets[b];
	km->buckets[b] = e;
	km->count++;
	return e;
}

void maru__keymap_remove(struct maru__keymap *km, struct maru__keyent *e)
{
	struct maru__keyent **pp;

	pp = &km->buckets[e->hash & (km->nbuckets - 1)];
	while (*pp && *pp != e)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = e->next;
		km->count--;
	}
	free(e);
}
