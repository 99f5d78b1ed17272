/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc.c - the page allocator and the owned-region manager
 *
 * Page management is client-side only (the server knows regions, not
 * pages).  Each owned region is cut into page_count = length / chunk_size
 * pages.  Like upstream's PagedMemoryAllocator the free list is FIFO:
 * allocate pops the front, free appends to the back, so a page just freed is
 * the last to be reused.  It is a ring of page numbers (O(1) both ways) plus
 * one byte per page that catches double frees and frees of pages never
 * handed out.
 *
 * Pages away.  Where maru-server hands pages out one by one (its
 * "capacity by the page"), a page of ours can be taken (the server evicted
 * its last key and pooled the page) and a page of another client's region
 * granted to us: such a region is "borrowed", all its pages away but the
 * granted ones.  An away page is neither free nor handed out: it is never
 * allocated or freed until the server grants it (maru__pagealloc_grant).
 *
 * The owned-region manager (upstream's OwnedRegionManager) keeps regions in
 * insertion order and an active region: allocation tries the active one,
 * then the others in order, and the one that had a page becomes active.  A
 * region added by expansion becomes active at once.
 *
 * Context: not locked here.  The handler's files (kv.c, evict.c,
 * handler.c, ownership.c) call it under its write lock, and hold its olock
 * around every change and around the reads of threads without the write
 * lock (docs/threads.md).
 */
#include "private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int maru__pagealloc_init(struct maru__pagealloc *pa, uint64_t pool_size,
			 uint64_t chunk_size)
{
	uint64_t i, n;

	memset(pa, 0, sizeof(*pa));
	if (!chunk_size)
		return -EINVAL;
	n = pool_size / chunk_size;
	/* page numbers are 32-bit (LMCache packs them into 32 bits) */
	if (n == 0 || n > UINT32_MAX)
		return -EINVAL;
	pa->ring = malloc(n * sizeof(*pa->ring));
	pa->used = calloc(n, 1);
	if (!pa->ring || !pa->used) {
		maru__pagealloc_destroy(pa);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		pa->ring[i] = (uint32_t)i;
	pa->page_count = n;
	pa->chunk_size = chunk_size;
	pa->head = 0;
	pa->nfree = n;
	return 0;
}

void maru__pagealloc_destroy(struct maru__pagealloc *pa)
{
	free(pa->ring);
	free(pa->used);
	memset(pa, 0, sizeof(*pa));
}

int64_t maru__pagealloc_alloc(struct maru__pagealloc *pa)
{
	uint32_t page;

	if (!pa->nfree)
		return -ENOSPC;
	page = pa->ring[pa->head];
	pa->head = pa->head + 1 == pa->page_count ? 0 : pa->head + 1;
	pa->nfree--;
	pa->used[page] = PA_USED;
	return page;
}

int maru__pagealloc_free(struct maru__pagealloc *pa, uint64_t page)
{
	uint64_t tail;

	if (page >= pa->page_count)
		return -ERANGE;
	if (pa->used[page] != PA_USED)
		return -EINVAL; /* free, or away */
	/* a page can only be in use if at least one slot of the ring is free */
	tail = pa->head + pa->nfree;
	if (tail >= pa->page_count)
		tail -= pa->page_count;
	pa->ring[tail] = (uint32_t)page;
	pa->nfree++;
	pa->used[page] = 0;
	return 0;
}

bool maru__pagealloc_is_allocated(const struct maru__pagealloc *pa,
				  uint64_t page)
{
	return page < pa->page_count && pa->used[page] == PA_USED;
}

int maru__pagealloc_away(struct maru__pagealloc *pa, uint64_t page)
{
	if (page >= pa->page_count || pa->used[page] != PA_USED)
		return -EINVAL;
	pa->used[page] = PA_AWAY;
	pa->naway++;
	return 0;
}

int maru__pagealloc_grant(struct maru__pagealloc *pa, uint64_t page)
{
	if (page >= pa->page_count || pa->used[page] != PA_AWAY)
		return -EINVAL;
	pa->used[page] = PA_USED; /* and freed: to the ring's tail */
	pa->naway--;
	return maru__pagealloc_free(pa, page);
}

void maru__owned_init(struct maru__owned *o, uint64_t chunk_size)
{
	memset(o, 0, sizeof(*o));
	o->chunk_size = chunk_size;
}

static void region_free(struct maru__owned_region *r)
{
	maru__pagealloc_destroy(&r->pa);
	free(r->page_keys);
	free(r);
}

void maru__owned_destroy(struct maru__owned *o)
{
	size_t i;

	for (i = 0; i < o->n; i++)
		region_free(o->regions[i]);
	free(o->regions);
	maru__owned_init(o, o->chunk_size);
}

struct maru__owned_region *maru__owned_find(const struct maru__owned *o,
					    uint64_t rid)
{
	size_t i;

	/* few regions per handler: a scan beats a hash here */
	for (i = 0; i < o->n; i++)
		if (o->regions[i]->region_id == rid)
			return o->regions[i];
	return NULL;
}

int maru__owned_add(struct maru__owned *o, uint64_t region_id,
		    uint64_t pool_size, struct maru__mapping *map,
		    bool borrowed)
{
	struct maru__owned_region *r, **nr;
	size_t ncap;
	int rc;

	if (maru__owned_find(o, region_id))
		return -EEXIST;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	rc = maru__pagealloc_init(&r->pa, pool_size, o->chunk_size);
	if (rc < 0)
		goto out_free;
	if (borrowed) {
		/* every page away until granted */
		memset(r->pa.used, PA_AWAY, r->pa.page_count);
		r->pa.naway = r->pa.page_count;
		r->pa.nfree = 0;
		r->borrowed = true;
	}
	rc = -ENOMEM;
	r->page_keys = calloc(r->pa.page_count, sizeof(*r->page_keys));
	if (!r->page_keys)
		goto out_free;
	if (o->n == o->cap) {
		ncap = o->cap ? 2 * o->cap : 4;
		nr = realloc(o->regions, ncap * sizeof(*nr));
		if (!nr)
			goto out_free;
		o->regions = nr;
		o->cap = ncap;
	}
	r->region_id = region_id;
	r->map = map;
	o->regions[o->n] = r;
	o->active = o->n;
	o->n++;
	return 0;

out_free:
	region_free(r);
	return rc;
}

static int64_t region_page(struct maru__owned_region *r, uint64_t now)
{
	if (r->drain_until && now < r->drain_until)
		return -1;
	r->drain_until = 0;
	return maru__pagealloc_alloc(&r->pa);
}

int maru__owned_alloc(struct maru__owned *o, uint64_t now, uint64_t *rid,
		      uint64_t *page)
{
	int64_t p;
	size_t i;

	if (!o->n)
		return -ENOSPC;
	p = region_page(o->regions[o->active], now);
	if (p < 0) {
		for (i = 0; i < o->n; i++) {
			if (i == o->active)
				continue;
			p = region_page(o->regions[i], now);
			if (p >= 0) {
				o->active = i;
				break;
			}
		}
		if (p < 0)
			return -ENOSPC;
	}
	*rid = o->regions[o->active]->region_id;
	*page = (uint64_t)p;
	return 0;
}

int maru__owned_remove(struct maru__owned *o, uint64_t rid)
{
	size_t i;

	for (i = 0; i < o->n; i++) {
		if (o->regions[i]->region_id != rid)
			continue;
		region_free(o->regions[i]);
		/* keep the insertion order of the others */
		memmove(&o->regions[i], &o->regions[i + 1],
			(o->n - i - 1) * sizeof(*o->regions));
		o->n--;
		if (o->active > i || o->active >= o->n)
			o->active = o->active ? o->active - 1 : 0;
		return 0;
	}
	return -ENOENT;
}

int maru__owned_free(struct maru__owned *o, uint64_t rid, uint64_t page)
{
	struct maru__owned_region *r = maru__owned_find(o, rid);

	if (!r)
		return -ENOENT;
	return maru__pagealloc_free(&r->pa, page);
}
