/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict.c - the eviction inbox: what the server takes back, and the
 * requests whose replies tell of it
 *
 * maru-server evicts keys of ours when the pool is full and asks back
 * regions that eviction emptied for another instance's request
 * (docs/metadata-server.md, "Eviction").  It says so in the replies of
 * any request: the replies on the main connection come through
 * maru__call(), those to HEARTBEATs (the lease thread's, a verification's)
 * through the hooks handler.c gives ownership.c (struct maru__hb_hooks:
 * maru__evict_ack, maru__evict_note, maru__evict_apply_try).  Whichever
 * thread decoded a reply copies its notices into the inbox
 * (maru__evict_note); they are applied under @wlock, by a writer before
 * its allocation (kv.c) or by the lease thread when @wlock is free
 * (maru__evict_apply_try: a try-lock, because a writer holding @wlock may
 * be joining the lease thread, a recovery stopping the lease).  Requests
 * acknowledge the last notice held ("evicted_ack": maru__evict_ack, and
 * handler.c's REQUEST_ALLOC).
 *
 * What it owns: the inbox (h->inbox, under its leaf lock @inbox.lock, made
 * and freed with the handler: maru__inbox_init/destroy).  It gives pages
 * back to their allocator with their keys (maru__page_release, for kv.c
 * too) and regions to the server (maru__region_return, RETURN_ALLOC: when
 * the server asks, and for handler.c at close or after a failed adoption).
 *
 * Dependencies (docs/threads.md): kv.c -> handler.c -> this file ->
 * ownership.c (maru__rejoin before RETURN_ALLOC) -> rpc.c, mapper.c (a
 * region given back is fenced first), alloc.c, keymap.c -> codec.c.  It
 * names nothing of handler.c or kv.c.
 *
 * Context: maru__evict_note and maru__evict_ack from any thread; the rest
 * with @wlock held, except maru__evict_apply_try, which takes it only if
 * it is free.
 */
#include "private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "mds_proto.h"

/* ------------------------------------------------------------------------ */
/* Requests on the main connection                                          */

/* every reply on the main connection: its notices noted before its bytes
 * go */
int maru__call(struct maru_handler *h, struct maru__msg *m,
	       struct maru__reply *r)
{
	struct maru__rpc_reply rr;
	int rc;

	rc = maru__rpc_call(&h->rpc, m, &rr);
	if (rc < 0)
		return rc;
	rc = maru__decode_reply(rr.payload, rr.len, r);
	if (rc == 0)
		maru__evict_note(h, r); /* before the reply's bytes go */
	maru__rpc_reply_release(&rr);
	if (rc < 0)
		return rc;
	return r->error ? -EREMOTEIO : 0;
}

int maru__send(struct maru_handler *h, struct maru__msg *m, int enc_rc,
	       struct maru__reply *r)
{
	int rc = enc_rc;

	if (rc == 0)
		rc = maru__call(h, m, r);
	maru__msg_release(m);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Giving pages and regions back                                            */

/* forget every local key stored in (@r, @page) (@wlock held) */
static void page_forget_keys(struct maru_handler *h,
			     struct maru__owned_region *r, uint64_t page)
{
	struct maru__keyent *e, *next;

	for (e = r->page_keys[page]; e; e = next) {
		next = e->page_next;
		maru__keymap_remove(&h->keys, e);
	}
	r->page_keys[page] = NULL;
}

/* return a page to its allocator and drop its keys (@wlock held) */
int maru__page_release(struct maru_handler *h, uint64_t rid, uint64_t page)
{
	struct maru__owned_region *r;
	int rc;

	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, rid);
	rc = r ? maru__pagealloc_free(&r->pa, page) : -ENOENT;
	pthread_mutex_unlock(&h->olock);
	if (rc == 0)
		page_forget_keys(h, r, page);
	return rc;
}

static uint64_t inbox_applied(struct maru__inbox *in)
{
	uint64_t v;

	pthread_mutex_lock(&in->lock);
	v = in->applied;
	pthread_mutex_unlock(&in->lock);
	return v;
}

/* RETURN_ALLOC; errors only logged (upstream close() does the same) */
void maru__region_return(struct maru_handler *h, uint64_t region_id)
{
	struct maru__reply r;
	struct maru__msg m;
	int rc;

	maru__rejoin(h);
	maru__reply_init(&r);
	maru__msg_init(&m, MDS_RETURN_ALLOC);
	rc = maru__send(h, &m,
			maru__enc_return_alloc(&m, h->instance_id, region_id,
					       inbox_applied(&h->inbox)),
			&r);
	if (rc < 0)
		lwarn(h, "region %" PRIu64 ": RETURN_ALLOC failed: %s",
		      region_id, strerror(-rc));
	else if (!r.success)
		lwarn(h, "region %" PRIu64 ": RETURN_ALLOC refused", region_id);
	else
		ldbg(h, "region %" PRIu64 ": returned", region_id);
}

/* ------------------------------------------------------------------------ */
/* The inbox                                                                */

/*
 * maru-server evicts keys of ours when the pool is full and tells us, once
 * a grace has passed (no reader still copies them), which pages it took:
 * (region, offset, gen).  We free such a page only while the registration
 * @gen still holds it -- a page freed and stored again since then is not
 * the evicted one.  It also asks back regions that eviction emptied: we
 * return those in which we hold no page.
 *
 * Where it hands pages out one by one (we said our "page_size"), the gen
 * says more (mds_proto.h): MDS_GEN_FORGET, forget the registration and,
 * once no key of ours is left in the page, the page too (it went to the
 * server's pool: away); 0, the page is granted to us -- of a region of
 * ours, or of another client's, which we map then ("granted_regions" has
 * its handle) and allocate from as a borrowed region.
 */

/* append @n values read from @u to *@v (cap *@cap, count *@nv) */
static bool inbox_put(uint64_t **v, size_t *nv, size_t *cap,
		      const struct maru__uints *u, size_t max)
{
	const uint8_t *p = u->p;
	size_t want = *nv + u->n, i;
	uint64_t *nb;

	if (want > max)
		return false;
	if (want > *cap) {
		size_t nc = *cap ? *cap : 64;

		while (nc < want)
			nc *= 2;
		nb = realloc(*v, nc * sizeof(*nb));
		if (!nb)
			return false;
		*v = nb;
		*cap = nc;
	}
	for (i = 0; i < u->n; i++)
		if (maru__uints_next(&p, u->end, &(*v)[*nv + i]) < 0)
			return false; /* (checked by the decoder) */
	*nv = want;
	return true;
}

/* keep the handles of @u (granted pages' regions) in @in (@in->lock) */
static bool inbox_put_handles(struct maru__inbox *in,
			      const struct maru__uints *u)
{
	const uint8_t *p = u->p;
	size_t want = in->ngr + u->n, i;
	struct maru_region_handle *nb;

	if (want > MARU_INBOX_MAX)
		return false;
	if (want > in->grcap) {
		size_t nc = in->grcap ? in->grcap : 16;

		while (nc < want)
			nc *= 2;
		nb = realloc(in->gr, nc * sizeof(*nb));
		if (!nb)
			return false;
		in->gr = nb;
		in->grcap = nc;
	}
	for (i = 0; i < u->n; i++)
		if (maru__handles_next(&p, u->end, &in->gr[in->ngr + i]) < 0)
			return false; /* (checked by the decoder) */
	in->ngr = want;
	return true;
}

void maru__evict_note(void *arg, const struct maru__reply *r)
{
	struct maru_handler *h = arg;
	struct maru__inbox *in = &h->inbox;
	bool ok = true, warn = false;

	if (!r->evicted.n && !r->release.n && !r->evicted_last && !r->pages_run)
		return;
	pthread_mutex_lock(&in->lock);
	if (r->pages_run && in->run && r->pages_run != in->run) {
		/* another server process: what it granted before is not
		 * ours any more (its page tables are not in the journal);
		 * its other notices still hold */
		size_t i, k = 0;

		for (i = 0; i + 2 < in->nev; i += 3)
			if (in->ev[i + 2]) {
				memmove(&in->ev[k], &in->ev[i],
					3 * sizeof(*in->ev));
				k += 3;
			}
		in->nev = k;
		free(in->gr);
		in->gr = NULL;
		in->ngr = in->grcap = 0;
		in->drop = true;
		atomic_store(&in->pending, true);
	}
	if (r->pages_run)
		in->run = r->pages_run;
	if (r->granted.n)
		ok = inbox_put_handles(in, &r->granted);
	if (r->evicted.n)
		ok &= inbox_put(&in->ev, &in->nev, &in->evcap, &r->evicted,
				3 * (size_t)MARU_INBOX_MAX);
	if (r->release.n)
		ok &= inbox_put(&in->rel, &in->nrel, &in->relcap, &r->release,
				MARU_INBOX_MAX);
	/*
	 * Acknowledge only what we hold, in order: a reply lost before this
	 * one (a timeout) leaves a gap, and the server sends again what we
	 * did not acknowledge (applying a notice twice does nothing).
	 */
	if (ok && r->evicted_last && r->evicted_first <= in->ack + 1 &&
	    r->evicted_last > in->ack)
		atomic_store(&in->ack, r->evicted_last);
	if (!ok && !in->dropped)
		warn = in->dropped = true;
	if (r->evicted.n || r->release.n)
		atomic_store(&in->pending, true);
	pthread_mutex_unlock(&in->lock);
	if (warn)
		lwarn(h, "eviction notices dropped (inbox full or out of "
			 "memory): they come again");
}

/*
 * Registration @gen of (@rid, @off) was evicted: forget its key, and free
 * the page once no key of ours is stored in it any more (two keys may
 * share a page) (@wlock held).  Return: whether the page was freed.
 */
static bool evict_page(struct maru_handler *h, uint64_t rid, uint64_t off,
		       uint64_t gen)
{
	struct maru__owned_region *r;
	struct maru__keyent *e, **pp;
	uint64_t page = off / h->cfg.chunk_size;

	if (!gen || off % h->cfg.chunk_size)
		return false;
	r = maru__owned_find(&h->owned, rid);
	if (!r || page >= r->pa.page_count)
		return false;
	for (pp = &r->page_keys[page]; (e = *pp); pp = &e->page_next)
		if (e->gen == gen)
			break;
	if (!e)
		return false; /* not that registration's page any more */
	*pp = e->page_next;
	maru__keymap_remove(&h->keys, e);
	if (r->page_keys[page])
		return false; /* another key of ours is still stored there */
	return maru__page_release(h, rid, page) == 0;
}

/*
 * Registration @gen of (@rid, @off) is gone and, once no key of ours is
 * left in it, the page is the server's (@wlock held).  Return: whether
 * the page went.
 */
static bool forget_page(struct maru_handler *h, uint64_t rid, uint64_t off,
			uint64_t gen)
{
	struct maru__owned_region *r = maru__owned_find(&h->owned, rid);
	uint64_t page = off / h->cfg.chunk_size;
	struct maru__keyent *e, **pp;
	int rc;

	if (!r || off % h->cfg.chunk_size || page >= r->pa.page_count)
		return false;
	for (pp = &r->page_keys[page]; (e = *pp); pp = &e->page_next)
		if (e->gen == gen)
			break;
	/* not that registration's page (any more): a notice sent again
	 * does nothing */
	if (!e)
		return false;
	*pp = e->page_next;
	maru__keymap_remove(&h->keys, e);
	if (r->page_keys[page])
		return false; /* another key of ours is still stored there */
	pthread_mutex_lock(&h->olock);
	rc = maru__pagealloc_away(&r->pa, page);
	pthread_mutex_unlock(&h->olock);
	return rc == 0;
}

/* @hd's region, borrowed: mapped and added to the manager (@wlock
 * held).  Return: it, or NULL */
static struct maru__owned_region *
borrow_region(struct maru_handler *h, const struct maru_region_handle *hd)
{
	struct maru__owned_region *r;
	struct maru__mapping *m;
	int rc;

	rc = maru__mapper_map(&h->mapper, hd, true, h->prefault, &m);
	if (rc < 0) {
		lwarn(h,
		      "region %" PRIu64 ": pages granted, but it cannot be "
		      "mapped: %s",
		      hd->region_id, strerror(-rc));
		return NULL;
	}
	pthread_mutex_lock(&h->olock);
	rc = maru__owned_add(&h->owned, hd->region_id, hd->length, m, true);
	r = rc == 0 ? maru__owned_find(&h->owned, hd->region_id) : NULL;
	pthread_mutex_unlock(&h->olock);
	if (!r) {
		lerr(h, "region %" PRIu64 ": cannot manage pages: %s",
		     hd->region_id, strerror(-rc));
		return NULL;
	}
	ldbg(h, "region %" PRIu64 ": borrowed (%" PRIu64 " bytes)",
	     hd->region_id, hd->length);
	if (h->on_added)
		h->on_added(h->on_added_arg, hd->region_id,
			    hd->length / h->cfg.chunk_size);
	return r;
}

/* page (@rid, @off) is granted to us (@wlock held); @gr: the handles of
 * the regions of this batch's grants.  Return: whether it is ours now */
static bool grant_page(struct maru_handler *h, uint64_t rid, uint64_t off,
		       const struct maru_region_handle *gr, size_t ngr)
{
	struct maru__owned_region *r = maru__owned_find(&h->owned, rid);
	uint64_t page = off / h->cfg.chunk_size;
	size_t i;
	int rc;

	if (off % h->cfg.chunk_size)
		return false;
	if (!r) {
		for (i = 0; i < 16; i++)
			if (h->inbox.returned[i] == rid)
				return false; /* ours, given back */
		for (i = 0; i < ngr && gr[i].region_id != rid; i++)
			;
		if (i == ngr || !(r = borrow_region(h, &gr[i])))
			return false; /* never written: the server's again
				       * when we are done */
	}
	pthread_mutex_lock(&h->olock);
	rc = maru__pagealloc_grant(&r->pa, page);
	pthread_mutex_unlock(&h->olock);
	return rc == 0;
}

/*
 * Give region @rid back: the server emptied it for another instance's
 * request, so every page of ours there is free or holds keys it evicted
 * (or keys stored since: they stay readable, the server's until it evicts
 * them).  Not while a page there is allocated without a stored key (being
 * written, or held by the application): no page of it is handed out for
 * MARU_DRAIN_NS then, and the server asks again.  (@wlock held)
 */
#define MARU_DRAIN_NS 2000000000ull
static bool evict_region(struct maru_handler *h, uint64_t rid)
{
	struct maru__owned_region *r = maru__owned_find(&h->owned, rid);
	bool borrowed;
	uint64_t p;

	if (!r || !maru__region_live(r))
		return false;
	borrowed = r->borrowed;
	for (p = 0; p < r->pa.page_count; p++) {
		if (r->pa.used[p] == PA_USED && !r->page_keys[p]) {
			/* being written: none of its pages goes out meanwhile,
			 * and the server asks again */
			pthread_mutex_lock(&h->olock);
			r->drain_until = maru__now_ns() + MARU_DRAIN_NS;
			pthread_mutex_unlock(&h->olock);
			return false;
		}
	}
	for (p = 0; p < r->pa.page_count; p++)
		if (r->pa.used[p] == PA_USED)
			maru__page_release(h, rid, p); /* and their keys */
	/*
	 * Fenced before it goes: a handle the application kept writes into
	 * private memory, not into the next owner's region.  The mapping
	 * stays in the table (readers look mappings up without a lock) and
	 * is never found again.
	 */
	if (r->map)
		maru__mapper_fence(&h->mapper, r->map);
	pthread_mutex_lock(&h->olock);
	maru__owned_remove(&h->owned, rid);
	pthread_mutex_unlock(&h->olock);
	if (!borrowed)
		h->inbox.returned[h->inbox.nreturned++ % 16] = rid;
	maru__region_return(h, rid);
	if (borrowed)
		ldbg(h, "region %" PRIu64 ": granted pages given back", rid);
	else
		ldbg(h, "region %" PRIu64 ": given back (eviction emptied it)",
		     rid);
	return true;
}

/*
 * maru-server restarted and its page tables with it: the regions we
 * borrowed are not ours to write (fenced: a handle kept writes into
 * private memory) and leave with their keys, without RETURN_ALLOC
 * (@wlock held).  The keys stay readable, the server's until evicted.
 */
static size_t drop_borrowed(struct maru_handler *h)
{
	struct maru__owned_region *r;
	size_t i = 0, n = 0;
	uint64_t p, rid;

	while (i < h->owned.n) {
		r = h->owned.regions[i];
		if (!r->borrowed) {
			i++;
			continue;
		}
		rid = r->region_id;
		for (p = 0; p < r->pa.page_count; p++)
			page_forget_keys(h, r, p);
		if (r->map)
			maru__mapper_fence(&h->mapper, r->map);
		pthread_mutex_lock(&h->olock);
		maru__owned_remove(&h->owned, rid);
		pthread_mutex_unlock(&h->olock);
		n++;
	}
	if (n)
		linfo(h,
		      "maru-server restarted: %zu region(s) we had pages of "
		      "dropped (its grants are not in its journal)",
		      n);
	return n;
}

size_t maru__evict_apply(struct maru_handler *h)
{
	struct maru__inbox *in = &h->inbox;
	size_t nev, nrel, ngr, i, freed = 0, given = 0, granted = 0;
	struct maru_region_handle *gr;
	uint64_t *ev, *rel;
	bool drop;

	if (!atomic_load(&in->pending))
		return 0;
	pthread_mutex_lock(&in->lock);
	drop = in->drop;
	in->drop = false;
	/* (every notice up to the acknowledged one is in this batch: the
	 * note adds both under the lock) */
	in->applied = atomic_load(&in->ack);
	ev = in->ev;
	nev = in->nev;
	in->ev = NULL;
	in->nev = in->evcap = 0;
	gr = in->gr;
	ngr = in->ngr;
	in->gr = NULL;
	in->ngr = in->grcap = 0;
	rel = in->rel;
	nrel = in->nrel;
	in->rel = NULL;
	in->nrel = in->relcap = 0;
	atomic_store(&in->pending, false);
	pthread_mutex_unlock(&in->lock);
	if (drop)
		drop_borrowed(h);
	for (i = 0; i + 2 < nev; i += 3) {
		if (!ev[i + 2])
			granted += grant_page(h, ev[i], ev[i + 1], gr, ngr);
		else if (ev[i + 2] & MDS_GEN_FORGET)
			forget_page(h, ev[i], ev[i + 1],
				    ev[i + 2] & ~MDS_GEN_FORGET);
		else
			freed += evict_page(h, ev[i], ev[i + 1], ev[i + 2]);
	}
	for (i = 0; i < nrel; i++)
		given += evict_region(h, rel[i]);
	if (freed || granted)
		ldbg(h, "eviction: %zu page(s) of ours free again, %zu granted",
		     freed, granted);
	free(ev);
	free(rel);
	free(gr);
	return freed + given + granted;
}

uint64_t maru__evict_ack(void *arg)
{
	struct maru_handler *h = arg;

	return atomic_load(&h->inbox.ack);
}

void maru__evict_apply_try(void *arg)
{
	struct maru_handler *h = arg;

	if (!atomic_load(&h->inbox.pending) || pthread_mutex_trylock(&h->wlock))
		return; /* a writer applies it at its next allocation */
	if (atomic_load(&h->state) == MARU_ST_CONNECTED)
		maru__evict_apply(h);
	pthread_mutex_unlock(&h->wlock);
}

void maru__inbox_init(struct maru_handler *h)
{
	pthread_mutex_init(&h->inbox.lock, NULL);
}

void maru__inbox_destroy(struct maru_handler *h)
{
	free(h->inbox.ev);
	free(h->inbox.rel);
	free(h->inbox.gr);
	pthread_mutex_destroy(&h->inbox.lock);
}
