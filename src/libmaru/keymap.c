/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keymap.c - the keys this handler stored: key -> (region, page)
 *
 * Upstream keeps a dict of the keys a handler registered so that a second
 * store of the same key costs no round trip, delete can free the page, and
 * freeing a page forgets its keys.  Here it is a chained hash table
 * (src/common/htab.h) over a canonical byte form of the key: a type byte,
 * then the UTF-8/bin bytes or the integer in little-endian.  All non-negative
 * integers share one form (the server sees the same msgpack uint whether the
 * caller said INT or UINT), negative ones another; strings and bytes never
 * collide with integers or with each other.
 *
 * Each entry is also linked into its page's list (owned_region.page_keys),
 * maintained by kv.c (a store links it) and evict.c (a release or an
 * eviction unlinks it).
 *
 * Context: the handler's files (kv.c, evict.c, handler.c, ownership.c's
 * recovery) call it under the handler's write lock only.
 */
#include "private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

/*
 * the canonical form of a key (keyform.h, maru__keyform()): its tag byte
 * into @hdr, its bytes in *@body (for an integer, @ib)
 */
static size_t key_form(const struct maru_key *k, uint8_t hdr[1],
		       const uint8_t **body, size_t *bodylen,
		       uint8_t ib[KEY_INT_BYTES])
{
	hdr[0] = maru__keyform(k, body, bodylen, ib);
	return 1;
}

static uint64_t key_hash(const uint8_t *hdr, size_t hl, const uint8_t *body,
			 size_t bl)
{
	return htab_fnv(htab_fnv(HTAB_FNV_INIT, hdr, hl), body, bl);
}

void maru__keymap_init(struct maru__keymap *km)
{
	memset(km, 0, sizeof(*km));
}

void maru__keymap_destroy(struct maru__keymap *km)
{
	htab_destroy(&km->t, offsetof(struct maru__keyent, hn));
	htab_destroy(&km->orph, offsetof(struct maru__keyent, hn));
}

struct maru__keyent *maru__keymap_find(const struct maru__keymap *km,
				       const struct maru_key *key)
{
	const uint8_t *body;
	struct maru__keyent *e;
	struct hnode *n;
	size_t hl, bl;
	uint8_t hdr[1], ib[KEY_INT_BYTES];
	uint64_t h;

	if (!km->t.n)
		return NULL;
	hl = key_form(key, hdr, &body, &bl, ib);
	h = key_hash(hdr, hl, body, bl);
	htab_for_hash(&km->t, h, n)
	{
		e = container_of(n, struct maru__keyent, hn);
		if (n->hash == h && e->klen == hl + bl &&
		    !memcmp(e->kbytes, hdr, hl) &&
		    (!bl || !memcmp(e->kbytes + hl, body, bl)))
			return e;
	}
	return NULL;
}

struct maru__keyent *maru__keymap_insert(struct maru__keymap *km,
					 const struct maru_key *key,
					 uint64_t region_id, uint64_t page)
{
	const uint8_t *body;
	struct maru__keyent *e;
	size_t hl, bl;
	uint8_t hdr[1], ib[KEY_INT_BYTES];

	if (htab_reserve(&km->t) < 0)
		return NULL;
	hl = key_form(key, hdr, &body, &bl, ib);
	if (bl > SIZE_MAX - sizeof(*e) - hl)
		return NULL;
	e = malloc(sizeof(*e) + hl + bl);
	if (!e)
		return NULL;
	memcpy(e->kbytes, hdr, hl);
	if (bl)
		memcpy(e->kbytes + hl, body, bl);
	e->klen = hl + bl;
	e->region_id = region_id;
	e->page = page;
	e->page_next = NULL;
	e->gen = 0;
	e->orphan = false;
	htab_insert(&km->t, &e->hn, key_hash(hdr, hl, body, bl));
	return e;
}

void maru__keymap_remove(struct maru__keymap *km, struct maru__keyent *e)
{
	htab_remove(e->orphan ? &km->orph : &km->t, &e->hn);
	free(e);
}

int maru__keymap_orphan(struct maru__keymap *km, struct maru__keyent *e)
{
	if (htab_reserve(&km->orph) < 0)
		return -ENOMEM;
	htab_remove(&km->t, &e->hn);
	htab_insert(&km->orph, &e->hn, e->hn.hash);
	e->orphan = true;
	return 0;
}
