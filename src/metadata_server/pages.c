/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pages.c - capacity by the page: pages of any region granted to whoever
 * needs them (docs/architecture.md, "Capacity by the page")
 *
 * A client allocates pages inside the regions it owns; the server knows
 * regions, not pages.  With nothing more, capacity moves between instances
 * only in whole regions (one is emptied and given back, another client
 * asks for it), so a pool shared by clients that ask for large regions is
 * partitioned, not shared.  A client that says its page size
 * ("page_size" in REQUEST_ALLOC and HEARTBEAT: libmaru's chunk size) takes
 * part in the page model instead:
 *
 *  - the regions allocated for it get a page table (struct mds_pages):
 *    each page has a holder, its owner at first;
 *  - a REGISTER into such a region must name one page, held by the
 *    registering client (as a region's owner is checked otherwise);
 *  - when a key there is evicted (or deleted by another client), its
 *    holder is told to forget it (NQ_FORGET, at once) and, once no key is
 *    left in the page, the page goes to the pool of free pages of its
 *    size, usable after the grace (a reader may still copy the evicted
 *    bytes).  A holder's own DELETE leaves the page with it, as before;
 *  - a REQUEST_ALLOC of such a client that the RM has no room for is
 *    answered with pages from the pool (NQ_GRANTED notices, and the
 *    handles of their regions so that it can map them), and the
 *    background reclaim keeps the pool ahead of the rate pages are
 *    granted, so that allocating stays local and cheap while the whole
 *    pool follows one eviction order;
 *  - a holder that is done (lease ended, declared dead) holds nothing
 *    from then on: its free pages go to the pool, its stored pages when
 *    their keys go; a region whose owner is done is freed once no key and
 *    no other client's page is left in it (borrowers are asked to give
 *    theirs back, as owners are asked for regions: "release").
 *
 * The pool is a FIFO per page size of (region, page, usable from), ordered
 * by that time: an evicted page goes to its tail (the grace is the same
 * for all), a page never written (of a new region) to its head.  An entry
 * is checked when it is taken (its region may have gone meanwhile).
 *
 * The page tables are not in the journal: after a restart the regions of
 * clients that say their page size get a page table again, every page
 * held by its owner (docs/metadata-server.md says what that costs).
 *
 * Ownership: a region's page table is the region's (freed with it in
 * region_forget); the pools are the store's (pages_destroy).
 */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "log.h"

#define GRANT_MAX 128 /* pages granted per reply */

struct pg_free {
	uint64_t region_id;
	uint64_t ready; /* vclock: usable from */
	uint32_t slot, page;
	uint32_t num; /* the page's pooled[] when it was pushed: an entry
		       * whose page was taken out meanwhile (a rescue,
		       * retire.c) no longer matches.  (32 bits, to keep
		       * the page tables small: an orphan would have to stay
		       * in its pool through 2^32 other pushes to be taken
		       * for its page's entry) */
};

struct mds_pgpool {
	uint32_t size; /* page bytes */
	struct pg_free *v;
	uint32_t head, n, cap;
	uint32_t orphans; /* entries of pages rescued meanwhile (retire.c) */
};

static struct mds_pgpool *pool_of(struct mds *s, uint32_t size, bool create)
{
	struct mds_pgpool *v;
	uint32_t i;

	for (i = 0; i < s->npgpools; i++)
		if (s->pgpools[i].size == size)
			return &s->pgpools[i];
	if (!create)
		return NULL;
	v = realloc(s->pgpools, (s->npgpools + 1) * sizeof(*v));
	if (!v)
		return NULL;
	s->pgpools = v;
	v = &s->pgpools[s->npgpools++];
	memset(v, 0, sizeof(*v));
	v->size = size;
	return v;
}

/* @f to the pool's tail, or its head (@front: usable now, ahead of the
 * pages in their grace) */
static int pool_push(struct mds_pgpool *p, const struct pg_free *f, bool front)
{
	if (p->n == p->cap) {
		uint32_t cap = p->cap ? p->cap * 2 : 256, i;
		struct pg_free *v;

		if (cap < p->cap)
			return -ENOMEM;
		v = malloc((size_t)cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		for (i = 0; i < p->n; i++)
			v[i] = p->v[(p->head + i) % p->cap];
		free(p->v);
		p->v = v;
		p->cap = cap;
		p->head = 0;
	}
	if (front) {
		p->head = (p->head + p->cap - 1) % p->cap;
		p->v[p->head] = *f;
	} else {
		p->v[(p->head + p->n) % p->cap] = *f;
	}
	p->n++;
	return 0;
}

static struct pg_free *pool_head(struct mds_pgpool *p)
{
	return p->n ? &p->v[p->head] : NULL;
}

static void pool_pop(struct mds_pgpool *p)
{
	p->head = (p->head + 1) % p->cap;
	p->n--;
}

void pages_destroy(struct mds *s)
{
	uint32_t i;

	retire_destroy(s);
	for (i = 0; i < s->npgpools; i++)
		free(s->pgpools[i].v);
	free(s->pgpools);
	s->pgpools = NULL;
	s->npgpools = 0;
}

/* ---- page tables ---- */

int pages_enable(struct mds *s, uint32_t slot, uint32_t size)
{
	struct mds_region *r = &s->regions[slot];
	struct mds_pages *pg;
	uint64_t n;
	uint32_t i;

	if (r->pg || !size || r->h.length < size)
		return 0;
	n = r->h.length / size;
	if (n > UINT32_MAX / 2)
		return -EINVAL;
	pg = calloc(1, sizeof(*pg));
	if (!pg)
		return -ENOMEM;
	pg->holder = malloc(n * sizeof(*pg->holder));
	pg->refs = calloc(n, sizeof(*pg->refs));
	pg->pooled = calloc(n, sizeof(*pg->pooled));
	if (!pg->holder || !pg->refs || !pg->pooled) {
		free(pg->holder);
		free(pg->refs);
		free(pg->pooled);
		free(pg);
		return -ENOMEM;
	}
	pg->size = size;
	pg->n = (uint32_t)n;
	for (i = 0; i < pg->n; i++)
		pg->holder[i] = r->owner;
	r->pg = pg;
	/* keys it has already (a restart): counted by the caller, in one
	 * scan of the index for all its regions (count_refs) */
	pg->fresh = r->refs != 0;
	return 0;
}

/* the keys of the regions whose page tables are fresh, each in its page
 * (pinned ones too: every entry of the index; one counted twice across
 * a resize keeps its page, never frees it) */
static void count_one(struct ix_entry *e, void *arg)
{
	struct mds *s = arg;
	struct mds_pages *pg;

	if (e->slot == IX_NO_SLOT || e->slot >= s->nreg_slots)
		return;
	pg = s->regions[e->slot].pg;
	if (pg && pg->fresh && e->off / pg->size < pg->n)
		pg->refs[e->off / pg->size]++;
}

static void count_refs(struct mds *s)
{
	uint64_t cursor = 0;
	uint32_t i;

	do
		cursor = ix_scan(&s->kv, cursor, count_one, s);
	while (cursor);
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next)
		if (s->regions[i].pg)
			s->regions[i].pg->fresh = 0;
}

void pages_drop(struct mds_region *r)
{
	if (!r->pg)
		return;
	free(r->pg->holder);
	free(r->pg->refs);
	free(r->pg->pooled);
	free(r->pg);
	r->pg = NULL;
}

bool pages_lent(const struct mds_region *r)
{
	return r->pg && r->pg->nlent;
}

/* @in's page @page of region @slot is no longer held by @holder (not
 * PG_NOBODY) */
static void unhold(struct mds *s, struct mds_region *r, uint32_t page)
{
	uint32_t h = r->pg->holder[page];

	if (h == PG_NOBODY)
		return;
	if (h != r->owner) {
		r->pg->nlent--;
		if (s->insts[h].ngranted)
			s->insts[h].ngranted--;
	}
	r->pg->holder[page] = PG_NOBODY;
}

static void pool_page(struct mds *s, uint32_t slot, uint32_t page,
		      uint64_t ready, bool front);

/* page @page of region @slot holds nothing and nobody holds it: to the
 * pool, usable from @ready -- also when the region's owner is done: the
 * region is the pool's then, freed once no key and no holder is left */
static void page_free_at(struct mds *s, uint32_t slot, uint32_t page,
			 uint64_t ready)
{
	struct mds_region *r = &s->regions[slot];

	unhold(s, r, page);
	r->pg->nfree++;
	pool_page(s, slot, page, ready, false);
}

/* an entry for free page @page of region @slot to the pool, once: at its
 * tail, or at its head (@front: a page that held nothing, usable now,
 * ahead of the evicted ones, whose keys stay findable while they wait) */
static void pool_page(struct mds *s, uint32_t slot, uint32_t page,
		      uint64_t ready, bool front)
{
	struct mds_region *r = &s->regions[slot];
	struct mds_pgpool *p;
	uint32_t num;

	if (r->pg->pooled[page])
		return; /* (its entry is there already: never twice) */
	p = pool_of(s, r->pg->size, true);
	num = ++s->pool_num ? s->pool_num : ++s->pool_num; /* never 0 */
	if (!p ||
	    pool_push(p,
		      &(struct pg_free){r->h.region_id, ready, slot, page, num},
		      front) < 0)
		return; /* (lost to the pool: freed with its region) */
	r->pg->pooled[page] = num;
	s->ctr.pages_pooled++;
}

void pages_unpool(struct mds *s, struct mds_region *r, uint32_t page)
{
	struct mds_pgpool *p = pool_of(s, r->pg->size, false);

	r->pg->pooled[page] = 0; /* its entry: an orphan, skipped */
	r->pg->nfree--;
	if (p)
		p->orphans++;
}

/* ... after the grace: a reader may still copy what it held */
static void page_free(struct mds *s, uint32_t slot, uint32_t page)
{
	page_free_at(s, slot, page, s->vnow + s->cfg.evict_grace_ns);
}

/*
 * The size of a region asked for by @islot, which takes pages one by one:
 * what it asked (@size), but no more than a 16th of the pool (a whole
 * number of 2 MiB, the resource manager's unit).  Its pages are the
 * client's as any region's until it writes them; what it has not written
 * when the pool fills is nobody else's, so a client that asks for the
 * whole pool must not get it whole.  (And no pool is left with a
 * remainder too small for anybody.)
 */
#define CARVE_UNIT (2ull << 20)
#define CARVE_PARTS 16

static uint64_t ps_or_unit(uint32_t ps)
{
	return ps > CARVE_UNIT ? ps : CARVE_UNIT;
}
uint64_t pages_region_size(const struct mds *s, uint32_t islot, uint64_t size)
{
	uint64_t part = s->pool_total / CARVE_PARTS / CARVE_UNIT * CARVE_UNIT;
	uint64_t free = s->pool_total > s->total_allocated
				? s->pool_total - s->total_allocated
				: 0;
	uint64_t min = ps_or_unit(s->insts[islot].page_size);

	if (part < min)
		part = min;
	/* the pool's last part: what is left of it, if it holds pages */
	free = free / CARVE_UNIT * CARVE_UNIT;
	if (free < part && free >= min)
		part = free;
	return size > part ? part : size;
}

/* ---- registrations ---- */

int pages_check(struct mds *s, const struct mds_region *r,
		struct mds_peer *peer, uint64_t off, uint64_t len,
		uint32_t *holder)
{
	const struct mds_pages *pg = r->pg;
	uint64_t page = off / pg->size;
	uint32_t h;

	if (page >= pg->n || len > pg->size - off % pg->size)
		return -EXDEV; /* one page, inside the region's pages */
	h = pg->holder[page];
	if (h == PG_NOBODY || !claim(s, peer, h, IX_NO_SLOT))
		return -EACCES; /* not the registering client's page */
	*holder = h;
	return 0;
}

void pages_ref(struct mds_region *r, uint64_t off)
{
	struct mds_pages *pg = r->pg;
	uint64_t page = off / pg->size;

	if (page < pg->n)
		pg->refs[page]++;
}

void pages_key_gone(struct mds *s, uint32_t slot, const struct ix_entry *e,
		    enum key_gone_why why)
{
	struct mds_region *r = &s->regions[slot];
	struct mds_pages *pg = r->pg;
	uint64_t page = e->off / pg->size;
	uint32_t h;

	if (page >= pg->n || !pg->refs[page])
		return;
	pg->refs[page]--;
	h = pg->holder[page];
	if (why == KG_REPLAY || why == KG_LOST)
		return;
	if (why == KG_DELETED_OWN) {
		/* its holder deleted it: the page stays its own (its client
		 * frees it when the DELETE succeeds) */
		if (!pg->refs[page] && h == PG_NOBODY)
			page_free(s, slot, (uint32_t)page);
		return;
	}
	if (h != PG_NOBODY && s->insts[h].notices)
		(void)notice_push(s, &s->insts[h], r->h.region_id,
				  page * pg->size, e->gen, NQ_FORGET);
	if (why == KG_EVICTED)
		s->full_at = s->vnow; /* the pool is full: pages are reused
				       * (evict_tick keeps the reserve) */
	if (!pg->refs[page])
		page_free(s, slot, (uint32_t)page);
}

bool pages_held_by(struct mds *s, const struct mds_region *r, uint64_t off,
		   struct mds_peer *peer)
{
	uint64_t page = off / r->pg->size;
	uint32_t h;

	if (page >= r->pg->n)
		return false;
	h = r->pg->holder[page];
	return h != PG_NOBODY && may_act(s, peer, h, IX_NO_SLOT);
}

/* ---- grants ---- */

/* the region of pool entry @f, if it is still the one the entry names */
static struct mds_region *entry_region(struct mds *s, const struct pg_free *f,
				       uint32_t size)
{
	struct mds_region *r;

	if (f->slot >= s->nreg_slots)
		return NULL;
	r = &s->regions[f->slot];
	if (r->h.region_id != f->region_id || r->state == REG_UNUSED ||
	    !r->pg || r->pg->size != size || f->page >= r->pg->n)
		return NULL;
	return r;
}

/* may a pool entry @f still be handed out?  (Not a page of a region
 * emptied for another's request: pages_repool() puts it back) */
static struct mds_region *entry_valid(struct mds *s, const struct pg_free *f,
				      uint32_t size)
{
	struct mds_region *r = entry_region(s, f, size);

	if (!r || r->wanted || r->pg->pooled[f->page] != f->num ||
	    r->pg->holder[f->page] != PG_NOBODY || r->pg->refs[f->page])
		return NULL;
	return r;
}

/* the head entry @f of @p leaves the pool (and with it the page's retired
 * key, retire.c: the page is handed out or gone) -- an orphan changes
 * nothing */
static void entry_pop(struct mds *s, struct mds_pgpool *p,
		      const struct pg_free *f)
{
	struct mds_region *r = entry_region(s, f, p->size);

	if (!r || r->pg->pooled[f->page] == f->num) {
		if (r)
			r->pg->pooled[f->page] = 0;
		retire_page_gone(s, f->region_id, f->page);
	} else if (p->orphans) {
		p->orphans--;
	}
	pool_pop(p);
}

void pages_repool(struct mds *s, uint32_t slot)
{
	struct mds_region *r = &s->regions[slot];
	uint32_t i;

	/* (after the grace of its last eviction: a reader may still copy) */
	for (i = 0; r->pg && i < r->pg->n; i++)
		if (r->pg->holder[i] == PG_NOBODY && !r->pg->refs[i])
			pool_page(s, slot, i,
				  r->quiet_at > s->vnow ? r->quiet_at : s->vnow,
				  r->quiet_at <= s->vnow);
}

uint64_t pages_ready(struct mds *s, uint32_t size)
{
	struct mds_pgpool *p = pool_of(s, size, false);
	struct pg_free *f;

	while (p && (f = pool_head(p)) && !entry_valid(s, f, size))
		entry_pop(s, p, f);
	return p && p->n && pool_head(p)->ready <= s->vnow ? p->n : 0;
}

static uint64_t valid_entries(const struct mds_pgpool *p);

uint64_t pages_pooled(struct mds *s, uint32_t size)
{
	struct mds_pgpool *p = pool_of(s, size, false);

	return p ? valid_entries(p) : 0; /* (not the orphans) */
}

void pages_forget_region(struct mds *s, struct mds_region *r)
{
	struct mds_pgpool *p;
	uint32_t i;

	/* its orphans in the pool: never told at their pop (no region) */
	if (!r->pg || !(p = pool_of(s, r->pg->size, false)) || !p->orphans)
		return;
	for (i = 0; i < p->n && p->orphans; i++) {
		const struct pg_free *f = &p->v[(p->head + i) % p->cap];

		if (f->region_id == r->h.region_id && f->page < r->pg->n &&
		    r->pg->pooled[f->page] != f->num)
			p->orphans--;
	}
}

/*
 * The pages a request of @bytes by @islot is granted at most: no client
 * takes more than a 16th of the pool (or GRANT_MAX) at once.  Return: in
 * bytes.
 */
uint64_t mds_pages_run(struct mds *s)
{
	while (!s->pages_run)
		if (getrandom(&s->pages_run, sizeof(s->pages_run), 0) !=
		    sizeof(s->pages_run))
			s->pages_run = (uint64_t)time(NULL) * 2654435761u;
	return s->pages_run;
}

uint64_t pages_want(const struct mds *s, uint32_t islot, uint64_t bytes)
{
	uint32_t size = s->insts[islot].page_size;
	uint64_t want, cap;

	if (!size)
		return 0;
	want = bytes / size ? bytes / size : 1;
	cap = s->pool_total ? s->pool_total / size / 16 : GRANT_MAX;
	cap = cap < 1 ? 1 : cap > GRANT_MAX ? GRANT_MAX : cap;
	return (want < cap ? want : cap) * size;
}

uint32_t pages_grant(struct mds *s, uint32_t islot, uint64_t bytes)
{
	struct mds_inst *in = &s->insts[islot];
	uint32_t size = in->page_size, n = 0;
	struct mds_pgpool *p;
	struct pg_free *f;
	uint64_t want, skip;

	if (!size || !in->notices)
		return 0;
	p = pool_of(s, size, false);
	if (!p)
		return 0;
	want = pages_want(s, islot, bytes) / size;
	skip = p->n;
	while (n < want && (f = pool_head(p)) && f->ready <= s->vnow) {
		struct mds_region *r = entry_valid(s, f, size);
		struct pg_free g = *f;

		entry_pop(s, p, f);
		if (!r)
			continue;
		if (r->state != REG_LIVE && r->owner == islot) {
			/* not to the owner that gave it back (its client
			 * ignores grants of it): to the tail, for others */
			if (skip-- == 0 || pool_push(p, &g, false) < 0)
				break;
			r->pg->pooled[g.page] = g.num;
			continue;
		}
		if (notice_push(s, in, g.region_id, (uint64_t)g.page * size, 0,
				NQ_GRANTED) < 0)
			break; /* (the page is lost to the pool: see above) */
		r->pg->holder[g.page] = islot;
		r->pg->nfree--;
		if (islot != r->owner) {
			r->pg->nlent++;
			in->ngranted++;
		}
		n++;
	}
	s->ctr.pages_granted += n;
	s->grant_n += n;
	/* what was taken, evicted again at once while the pool is full:
	 * the pool of free pages refilled as it drains, not a tick later
	 * (the background reclaim's work, done here in step with it) */
	if (n && pool_full(s)) {
		uint64_t k = pages_reserve_need(s);

		if (k)
			evict_some(s, UINT64_MAX, k < n ? k : n);
	}
	return n;
}

bool pages_granted_to(struct mds *s, uint32_t islot, uint64_t rid, uint64_t off)
{
	const struct mds_region *r = region_find(s, rid, NULL);
	uint64_t page;

	if (!r || !r->pg || r->state == REG_UNUSED)
		return false;
	page = off / r->pg->size;
	return page < r->pg->n && r->pg->holder[page] == islot;
}

void mds_inst_page_size(struct mds *s, uint32_t slot, uint32_t size)
{
	struct mds_inst *in;
	bool any = false;
	uint32_t i;

	if (slot == IX_NO_SLOT || !size || s->insts[slot].page_size == size)
		return;
	in = &s->insts[slot];
	/* only an owner with a lease: one that connection tracking
	 * declares dead may come back (revive()) and find the pages it
	 * held granted to others */
	if (!in->nleases)
		return;
	/* (nor under --instance-quota: granted pages are not counted in
	 * an instance's bytes; its clients own whole regions) */
	if (s->cfg.inst_quota)
		return;
	if (in->page_size) {
		/* another size: its pages of the old size stay as they are,
		 * its new regions get the new one */
		in->page_size = size;
		return;
	}
	in->page_size = size;
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next)
		if (s->regions[i].owner == slot &&
		    s->regions[i].state == REG_LIVE && !s->regions[i].pg &&
		    pages_enable(s, i, size) == 0 && s->regions[i].pg &&
		    s->regions[i].pg->fresh)
			any = true;
	if (any)
		count_refs(s);
}

void mds_pages_stats(const struct mds *s, struct mds_pages_stats *ps)
{
	uint32_t i;

	memset(ps, 0, sizeof(*ps));
	for (i = 0; i < s->npgpools; i++)
		ps->free += valid_entries(&s->pgpools[i]);
	ps->retired = retire_count(s);
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next)
		if (s->regions[i].pg) {
			ps->regions++;
			ps->lent += s->regions[i].pg->nlent;
		}
}

const struct rm_handle *mds_region_handle(struct mds *s, uint64_t rid)
{
	const struct mds_region *r = region_find(s, rid, NULL);

	return r ? &r->h : NULL;
}

/* ---- holders that are done ---- */

/* every page @islot holds in region @slot goes: its free ones to the
 * pool, its stored ones when their keys go.  Return: pages let go */
static uint32_t let_go(struct mds *s, uint32_t slot, uint32_t islot)
{
	struct mds_region *r = &s->regions[slot];
	uint32_t i, n = 0;

	for (i = 0; i < r->pg->n; i++) {
		if (r->pg->holder[i] != islot)
			continue;
		n++;
		if (r->pg->refs[i])
			unhold(s, r, i);
		else
			page_free(s, slot, i);
	}
	return n;
}

void pages_owner_returned(struct mds *s, uint32_t slot)
{
	if (s->regions[slot].pg)
		let_go(s, slot, s->regions[slot].owner);
}

/* a region whose owner is done may go once nothing is left in it */
static void maybe_done(struct mds *s, uint32_t slot)
{
	struct mds_region *r = &s->regions[slot];

	if (r->state != REG_LIVE && r->state != REG_UNUSED && !r->refs &&
	    !pages_lent(r))
		region_done(s, slot);
}

void pages_lose_holder(struct mds *s, uint32_t islot)
{
	uint32_t i;
	bool any = false;

	if (!s->insts[islot].ngranted && !s->insts[islot].page_size)
		return;
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next)
		if (s->regions[i].pg && let_go(s, i, islot) &&
		    s->regions[i].owner != islot)
			any = true;
	s->insts[islot].ngranted = 0;
	/* then the regions nothing is left in: one at a time, from the
	 * head again (freeing one may free its owner, and that owner's
	 * pages, and other regions with them) */
again:
	for (i = s->reg_head; any && !s->replaying && i != IX_NO_SLOT;
	     i = s->regions[i].next) {
		struct mds_region *r = &s->regions[i];

		if (r->pg && r->state != REG_LIVE && !r->refs &&
		    !pages_lent(r) && !r->deferred) {
			region_done(s, i);
			goto again;
		}
	}
}

/*
 * Mark in @keep the pages of region @slot granted to @islot in notices
 * numbered after @ack (they were on their way when its client returned
 * the region: it will use them).
 */
static void granted_after(struct mds *s, uint32_t slot, uint32_t islot,
			  uint64_t ack, uint8_t *keep)
{
	const struct mds_inst *in = &s->insts[islot];
	const struct mds_region *r = &s->regions[slot];
	uint32_t i;

	for (i = 0; i < in->nq_n; i++) {
		const struct mds_notice *q =
			&in->nq[(in->nq_head + i) % in->nq_cap];

		if (q->kind == NQ_GRANTED && in->nq_seq0 + i > ack &&
		    q->region_id == r->h.region_id &&
		    q->off / r->pg->size < r->pg->n)
			keep[q->off / r->pg->size] = 1;
	}
}

bool pages_give_back(struct mds *s, uint32_t slot, struct mds_str inst,
		     struct mds_peer *peer, uint64_t ack)
{
	struct mds_region *r = &s->regions[slot];
	uint32_t i, h = PG_NOBODY;
	uint8_t *keep = NULL;

	if (!r->pg || !r->pg->nlent)
		return false;
	for (i = 0; i < r->pg->n && h == PG_NOBODY; i++)
		if (r->pg->holder[i] != PG_NOBODY &&
		    r->pg->holder[i] != r->owner &&
		    inst_is(&s->insts[r->pg->holder[i]], inst) &&
		    may_act(s, peer, r->pg->holder[i], IX_NO_SLOT))
			h = r->pg->holder[i];
	if (h == PG_NOBODY)
		return false;
	if (ack && (keep = calloc(r->pg->n, 1)))
		granted_after(s, slot, h, ack, keep);
	for (i = 0; i < r->pg->n; i++) {
		if (r->pg->holder[i] != h || (keep && keep[i]))
			continue;
		if (r->pg->refs[i])
			unhold(s, r, i);
		else
			page_free(s, slot, i);
	}
	free(keep);
	maybe_done(s, slot);
	return true;
}

uint32_t pages_release_wanted(struct mds *s, uint32_t islot, uint64_t *out,
			      uint32_t max)
{
	uint32_t i, p, n = 0;

	if (islot == IX_NO_SLOT || !s->insts[islot].ngranted)
		return 0;
	for (i = s->reg_head; i != IX_NO_SLOT && n < max;
	     i = s->regions[i].next) {
		const struct mds_region *r = &s->regions[i];

		if (!r->pg || !r->pg->nlent || r->owner == islot || !r->wanted)
			continue;
		for (p = 0; p < r->pg->n; p++)
			if (r->pg->holder[p] == islot) {
				out[n++] = r->h.region_id;
				break;
			}
	}
	return n;
}

/* ---- the reserve ---- */

/*
 * While the pool is full, the pool of free pages is kept ahead of the
 * grants: the *supply*, what they take in twice the grace and a few
 * ticks at the rate they come (at least a grant's worth or a 32nd of the
 * pool, at most a quarter of it), and on top of it a *spare* of a 16th
 * of the pool -- by evicting the coldest keys (of any holder).  With
 * pages of several sizes each size has its share of those bounds (the
 * pool's pages over the number of sizes).  A page
 * waiting there is not lost to the cache: its evicted key stays findable
 * until the page is handed out (retire.c).  A lookup may bring such a
 * key back only out of the spare (pages_may_rescue): readers that want
 * every key back cannot take the pages the writers wait for.
 */
static uint64_t supply(const struct mds *s, const struct mds_pgpool *p)
{
	uint64_t need, rate = s->grant_rate, el,
		       pages = s->pool_total / p->size / s->npgpools;

	/* the rate of this second so far, when it is higher (a second
	 * started 100 ms ago or more: pages_rate_tick) */
	el = s->pool_at && s->vnow > s->pool_at ? s->vnow - s->pool_at : 0;
	if (el >= 100000000ull && s->grant_n * 1000000000ull / el > rate)
		rate = s->grant_n * 1000000000ull / el;
	need = rate * (2 * s->cfg.evict_grace_ns + 200000000ull) /
	       1000000000ull;
	if (need < GRANT_MAX / 4)
		need = pages / 32 < GRANT_MAX / 4 ? pages / 32 + 1
						  : GRANT_MAX / 4;
	if (pages && need > pages / 4)
		need = pages / 4; /* never more than a quarter */
	return need;
}

static uint64_t valid_entries(const struct mds_pgpool *p)
{
	return p->n > p->orphans ? p->n - p->orphans : 0;
}

uint64_t pages_reserve_need(struct mds *s)
{
	uint64_t need, have, keys = 0;
	uint32_t i;

	for (i = 0; i < s->npgpools; i++) {
		struct mds_pgpool *p = &s->pgpools[i];

		need = supply(s, p) +
		       s->pool_total / p->size / s->npgpools / 16;
		have = valid_entries(p);
		if (have < need)
			keys += need - have;
	}
	return keys;
}

bool pages_may_rescue(struct mds *s, uint32_t size)
{
	struct mds_pgpool *p = pool_of(s, size, false);

	return p && valid_entries(p) > supply(s, p);
}

void pages_rate_tick(struct mds *s)
{
	/* up at once, down by halves: a reserve sized to a rate that lags
	 * makes stores wait, which holds the rate down */
	s->grant_rate = s->grant_n > s->grant_rate
				? s->grant_n
				: (s->grant_rate + s->grant_n) / 2;
	s->grant_n = 0;
}
