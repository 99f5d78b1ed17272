/* SPDX-License-Identifier: Apache-2.0 */
/*
 * retire.c - the grace as a second chance: an evicted key stays findable
 * while its page waits out the grace (docs/metadata-server.md,
 * "Eviction")
 *
 * An evicted key leaves the index at once, and its page goes to the pool
 * of free pages usable only after the grace, so that a reader that looked
 * the key up just before may still copy it (pages.c).  Until the page is
 * handed out again its bytes are the key's, untouched.  At the rate a
 * full pool turns over, those pages are a share of the pool (stores/s x
 * the grace) that would hold no key: capacity lost to the grace.  Here
 * they still answer: the key is kept as *retired*, and a lookup of it
 * (LOOKUP, EXISTS, their batch forms, a HEARTBEAT's "touched") brings it
 * back -- *rescued* -- into the index, its page with it (out of the pool,
 * held by nobody, as the pages of a holder that is done), its location
 * and registration number unchanged, at the warm end of the eviction
 * order.  So the pool's keys are what the index holds plus what waits in
 * the grace, and the grace costs the pages that are ready only.
 *
 * What the rest sees:
 *  - readers of the shared index find a retired key marked SI_F_ASK
 *    (pub_put_ask): they ask the server, which rescues it; a reader never
 *    reads a retired key's bytes without that request, so the grace
 *    still counts from the moment the key left the index;
 *  - a rescue is a registration in the journal and a "stored" event with
 *    no instance; the eviction was an eviction (its notices were sent:
 *    the page's former holder forgot the key, as it would have);
 *  - a REGISTER or a DELETE of the key forgets the retired one (a
 *    deleted key never comes back; a new one is the new writer's);
 *  - the page leaving the pool (handed out, its region gone or wanted
 *    back) ends the retired key: pages.c calls retire_page_gone() for
 *    every entry it takes off the pool.  A rescued page's entry stays in
 *    the pool's FIFO, orphaned (its number no longer the page's: pages.c
 *    skips it), so that a page evicted again waits a full grace.
 *
 * Only keys of regions whose pages are handed out (pages.c) and whose
 * owner is live are retired, one per page (the page's last key).  A
 * rescue takes a page the writers might have had: it is allowed only
 * while the pool of free pages holds more than the supply the grants
 * need (pages_may_rescue), so readers that want every key back cannot
 * starve writers; a key refused stays retired (maybe rescued later).
 *
 * Ownership: the records and their copies of the entries are the store's
 * (two hash tables, by key and by page; freed by retire_destroy).
 * Context: the server's main thread.
 */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "pubidx.h"

struct mds_retired {
	struct hnode by_key;  /* s->ret_keys: ix_hash() of the key */
	struct hnode by_page; /* s->ret_pages: page_hash() */
	uint64_t region_id;
	uint32_t slot, page;
	struct ix_entry *e; /* owns: a copy of the evicted entry (key,
			     * location, registration number) */
};

static uint64_t page_hash(uint64_t region_id, uint32_t page)
{
	return htab_hash_u64(region_id * 0x9E3779B97F4A7C15ull ^ page);
}

static bool same_key(const struct ix_entry *e, const struct ix_key *k)
{
	return ix_entry_klen(e) == k->len && ix_entry_tag(e) == k->tag &&
	       !memcmp(e->key, k->ptr, k->len);
}

static struct mds_retired *by_key(struct mds *s, const struct ix_key *k,
				  uint64_t h)
{
	struct hnode *n;

	htab_for_hash(&s->ret_keys, h, n)
	{
		struct mds_retired *t =
			container_of(n, struct mds_retired, by_key);

		if (n->hash == h && same_key(t->e, k))
			return t;
	}
	return NULL;
}

static struct mds_retired *by_page(struct mds *s, uint64_t region_id,
				   uint32_t page)
{
	uint64_t h = page_hash(region_id, page);
	struct hnode *n;

	htab_for_hash(&s->ret_pages, h, n)
	{
		struct mds_retired *t =
			container_of(n, struct mds_retired, by_page);

		if (n->hash == h && t->region_id == region_id &&
		    t->page == page)
			return t;
	}
	return NULL;
}

/* @t ends: out of both tables and of the shared index (@unpublish) */
static void drop(struct mds *s, struct mds_retired *t, bool unpublish)
{
	htab_remove(&s->ret_keys, &t->by_key);
	htab_remove(&s->ret_pages, &t->by_page);
	if (unpublish)
		pub_del(s->pub, t->e);
	free(t->e);
	free(t);
}

void retire_add(struct mds *s, uint32_t slot, const struct ix_entry *e)
{
	struct mds_region *r = &s->regions[slot];
	struct mds_retired *t, *old;
	struct ix_key k;
	uint32_t page;
	size_t sz;

	if (!r->pg || r->state != REG_LIVE || e->off / r->pg->size >= r->pg->n)
		return;
	page = (uint32_t)(e->off / r->pg->size);
	/* the page is free and waits in the pool: its bytes are the key's */
	if (r->pg->refs[page] || r->pg->holder[page] != PG_NOBODY ||
	    !r->pg->pooled[page])
		return;
	if (htab_reserve(&s->ret_keys) < 0 || htab_reserve(&s->ret_pages) < 0)
		return;
	k = (struct ix_key){e->key, ix_entry_klen(e), ix_entry_tag(e)};
	if ((old = by_key(s, &k, ix_hash(&s->kv, &k))))
		drop(s, old, true); /* (cannot be: a new REGISTER forgot it) */
	if ((old = by_page(s, r->h.region_id, page)))
		drop(s, old, true);
	sz = sizeof(*e) + ix_entry_klen(e);
	t = malloc(sizeof(*t));
	if (t)
		t->e = malloc(sz);
	if (!t || !t->e) {
		free(t);
		return; /* (evicted for good: nothing else changes) */
	}
	memcpy(t->e, e, sz);
	t->e->next = t->e->pol_prev = t->e->pol_next = NULL;
	t->e->pins = 0;
	t->region_id = r->h.region_id;
	t->slot = slot;
	t->page = page;
	htab_insert(&s->ret_keys, &t->by_key, ix_hash(&s->kv, &k));
	htab_insert(&s->ret_pages, &t->by_page, page_hash(t->region_id, page));
	s->ctr.retired++;
	pub_put_ask(s->pub, t->e, t->region_id);
}

struct ix_entry *mds_rescue(struct mds *s, const struct ix_key *k, uint64_t h)
{
	struct mds_retired *t = s->ret_keys.n ? by_key(s, k, h) : NULL;
	struct mds_region *r;
	struct ix_entry *e;

	if (!t)
		return NULL;
	r = &s->regions[t->slot];
	/* still the page it was evicted from, free, in the pool (pages.c
	 * ends the record when the page leaves the pool: checked anyway) */
	if (r->state != REG_LIVE || r->h.region_id != t->region_id || !r->pg ||
	    r->wanted || t->page >= r->pg->n || r->pg->refs[t->page] ||
	    r->pg->holder[t->page] != PG_NOBODY || !r->pg->pooled[t->page]) {
		drop(s, t, true);
		return NULL;
	}
	/* only out of the spare: never a page the writers are promised */
	if (!pages_may_rescue(s, r->pg->size))
		return NULL;
	if (ix_insert(&s->kv, k, h, &e) != 1) {
		drop(s, t, true);
		return NULL;
	}
	e->off = t->e->off;
	e->len = t->e->len;
	e->gen = t->e->gen; /* the same binding: a reader's ticket holds */
	e->slot = t->slot;
	s->kv_bytes += e->len;
	r->refs++;
	r->used += e->len;
	pages_ref(r, e->off);
	pages_unpool(s, r, t->page); /* its pool entry is an orphan now */
	pol_add(&s->pol, e);	     /* used now: the warm end */
	log_key(s, e);
	drop(s, t, true); /* the marker out, then the key in (one digest) */
	pub_put(s->pub, e, r->h.region_id);
	ev_stored(s->ev, ix_entry_tag(e), e->key, ix_entry_klen(e), NULL, 0,
		  r->h.region_id, e->off, e->len);
	s->ctr.rescued++;
	return e;
}

void retire_forget(struct mds *s, const struct ix_key *k, uint64_t h)
{
	struct mds_retired *t = s->ret_keys.n ? by_key(s, k, h) : NULL;

	if (t)
		drop(s, t, true);
}

void retire_page_gone(struct mds *s, uint64_t region_id, uint32_t page)
{
	struct mds_retired *t =
		s->ret_pages.n ? by_page(s, region_id, page) : NULL;

	if (t)
		drop(s, t, true);
}

uint64_t retire_count(const struct mds *s)
{
	return s->ret_keys.n;
}

void retire_destroy(struct mds *s)
{
	struct hnode *n, *next;
	size_t i;

	htab_for_each(&s->ret_keys, i, n, next)
	{
		struct mds_retired *t =
			container_of(n, struct mds_retired, by_key);

		free(t->e);
		free(t);
	}
	htab_free(&s->ret_keys);
	htab_free(&s->ret_pages);
}
