/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kv.c - the KV calls of a connected handler: pages (alloc, free), store,
 * retrieve, recheck, exists, pin, unpin, delete and their batch forms
 *
 * Semantics: docs/python-api.md, with two deliberate differences, both
 * invisible to well-behaved callers: store sends one REGISTER_KV (no
 * EXISTS_KV first: REGISTER already answers "existed"), and a batch entry
 * that lost the first-writer race has its page freed instead of leaked.
 *
 * Writes (alloc, free, store, batch_store, delete) run under @wlock
 * (handler.c says what each lock guards).  A key this handler stored is
 * remembered with its page and the server's registration number (the key
 * map and each page's key list): a second store of it is answered
 * locally, and an eviction notice (evict.c) finds its page.  An allocation
 * first applies the notices that came in (maru__evict_apply), then asks
 * for a new region when no page is free (maru__region_expand).  Reads take
 * no lock: the shared index (shmindex.c) answers first where it can, with
 * no request; the rest ask the server, and a region is mapped at its first
 * use (mapper.c; lookups are lock-free).
 *
 * Loss of ownership (ownership.c): alloc, store and batch_store pass
 * maru__write_gate() first, which recovers from a fence and verifies after a
 * dropped connection or a stale lease; a page of a fenced region is never
 * registered (-ESTALE) and fenced regions are never returned to a server.
 *
 * Dependencies (docs/threads.md): the top of libmaru.  This file ->
 * handler.c (the state check, new regions) -> evict.c (every request
 * through maru__call, pages released, the inbox applied) -> ownership.c
 * (the write gate) -> rpc.c, mapper.c, shmindex.c -> codec.c.  Nothing
 * calls into it but the application.
 *
 * Error mapping (see maru.h): -ENOTCONN / -ESHUTDOWN for the state checks,
 * -EREMOTEIO for an "error" reply, -ETIMEDOUT from rpc.c, -ENOSPC /
 * -ENOMEM / -ENOBUFS for the three alloc failures of upstream, -ESTALE for
 * a page whose region was fenced.
 */
#include "private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mds_proto.h"

/* ------------------------------------------------------------------------ */
/* Pages                                                                    */

/* link @e into its page's key list (@wlock held) */
static void page_link_key(struct maru_handler *h, struct maru__keyent *e)
{
	struct maru__owned_region *r =
		maru__owned_find(&h->owned, e->region_id);

	if (!r || e->page >= r->pa.page_count)
		return;
	e->page_next = r->page_keys[e->page];
	r->page_keys[e->page] = e;
}

/*
 * Does a key of ours still live in (@rid, @page)? (@wlock held)  Then the
 * server still points at it: a free() of it keeps the page, which goes
 * when the key is deleted or evicted (the notice frees it).  Freeing it at
 * once (upstream) would let the page be reused under a registered key --
 * and, with eviction, let a late free() release a page a notice had
 * already freed and another key then took.
 */
static bool page_stored(struct maru_handler *h, uint64_t rid, uint64_t page)
{
	struct maru__owned_region *r = maru__owned_find(&h->owned, rid);

	return r && page < r->pa.page_count && r->page_keys[page] &&
	       maru__pagealloc_is_allocated(&r->pa, page);
}

static int page_alloc_locked(struct maru_handler *h, size_t size,
			     struct maru_page *out)
{
	struct maru__owned_region *r;
	uint64_t rid, page;
	int rc;

	int tries;

	/* evicted pages: ours again; regions asked back: returned now, or
	 * this allocation could fill the one another instance waits for */
	maru__evict_apply(h);
	pthread_mutex_lock(&h->olock);
	rc = maru__owned_alloc(&h->owned, maru__now_ns(), &rid, &page);
	pthread_mutex_unlock(&h->olock);
	for (tries = 0; rc == -ENOSPC; tries++) {
		if (!h->cfg.auto_expand && h->owned.n)
			return maru__fail(
				h, -ENOSPC,
				"every page of this handler's regions "
				"is taken and auto_expand is off");
		rc = maru__region_expand(h);
		/* the pool is full and the server evicted pages of ours
		 * instead (its reply said which): use those */
		if (rc < 0 &&
		    (tries >= 4 || (!maru__evict_apply(h) && rc != -EAGAIN))) {
			char why[512];

			snprintf(why, sizeof(why), "%s", maru__fail_text(h));
			return maru__fail(
				h, -ENOMEM,
				"no free page in this handler's "
				"regions, and %s",
				why[0] ? why : "no new region could be had");
		}
		pthread_mutex_lock(&h->olock);
		rc = maru__owned_alloc(&h->owned, maru__now_ns(), &rid, &page);
		pthread_mutex_unlock(&h->olock);
		if (rc < 0 && tries >= 4)
			return maru__fail(h, -ENOBUFS,
					  "a new region was had, but others "
					  "took its pages first");
	}
	r = maru__owned_find(&h->owned, rid);
	out->region_id = rid;
	out->page_index = page;
	out->size = size;
	out->ptr = r->map->addr + page * h->cfg.chunk_size;
	return 0;
}

MARU_EXPORT int maru_page_alloc(struct maru_handler *h, size_t size,
				struct maru_page *out)
{
	uint64_t t0 = maru__now_ns();
	int rc;

	if (size > h->cfg.chunk_size)
		return maru__fail(h, -EINVAL,
				  "value of %zu bytes is larger than a page "
				  "(chunk_size_bytes %" PRIu64 ")",
				  size, h->cfg.chunk_size);
	pthread_mutex_lock(&h->wlock);
	rc = maru__state_check(h);
	if (rc == 0)
		rc = maru__write_gate(h);
	if (rc == 0)
		rc = page_alloc_locked(h, size, out);
	pthread_mutex_unlock(&h->wlock);
	if (rc == 0)
		maru__stats_record(h, "alloc", "none", size, t0);
	return rc;
}

MARU_EXPORT int maru_page_free(struct maru_handler *h, uint64_t region_id,
			       uint64_t page_index)
{
	uint64_t t0 = maru__now_ns();
	int rc;

	pthread_mutex_lock(&h->wlock);
	rc = maru__state_check(h);
	if (rc == 0 && page_stored(h, region_id, page_index))
		rc = 1; /* kept: see page_stored() */
	else if (rc == 0)
		rc = maru__page_release(h, region_id, page_index);
	/* the page went with its fenced region: nothing left to free */
	if (rc == -ENOENT && maru__mapper_is_retired(&h->mapper, region_id))
		rc = 0;
	pthread_mutex_unlock(&h->wlock);
	if (rc == -ERANGE)
		rc = -EINVAL;
	if (rc == 1)
		rc = 0;
	if (rc == 0)
		maru__stats_record(h, "free", "none", 0, t0);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Store                                                                    */

/* is @p an allocated page of an owned region? (@wlock held) */
static bool page_valid(struct maru_handler *h, const struct maru_page *p)
{
	struct maru__owned_region *r;
	bool ok;

	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, p->region_id);
	ok = r && maru__pagealloc_is_allocated(&r->pa, p->page_index) &&
	     p->size <= h->cfg.chunk_size;
	pthread_mutex_unlock(&h->olock);
	return ok;
}

/* the alarm flags: nonzero after a drop or a loss of ownership (ownership.c) */
static inline unsigned alarm_flags(struct maru_handler *h)
{
	return (unsigned)(atomic_load_explicit(&h->fence.alarm,
					       memory_order_relaxed) &
			  MARU_ALARM_FLAGS);
}

/*
 * was region @rid fenced (still owned, awaiting recovery, or retired)?
 * Off the fast path: callers ask only when an alarm is up or a page is
 * not valid.
 */
static bool region_fenced(struct maru_handler *h, uint64_t rid)
{
	struct maru__owned_region *r;
	bool owned, fenced = false;

	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, rid);
	owned = r != NULL;
	if (r && r->map)
		fenced = atomic_load(&r->map->fenced);
	pthread_mutex_unlock(&h->olock);
	return owned ? fenced : maru__mapper_is_retired(&h->mapper, rid);
}

/*
 * a key registered into a region fenced while the REGISTER was in flight:
 * its bytes never reached the pool, so take it back (best effort)
 */
static void unregister(struct maru_handler *h, const struct maru_key *key)
{
	struct maru__reply r;
	struct maru__msg m;

	maru__reply_init(&r);
	maru__msg_init(&m, MDS_DELETE_KV);
	if (maru__send(h, &m, maru__enc_key(&m, key), &r) < 0 || !r.success)
		ldbg(h, "DELETE_KV of a key in a fenced region failed");
}

/*
 * Does the server evict (or others delete) our keys?  Then a key in our
 * local map may be gone from the server before its notice came: a store
 * of it asks the server instead of answering "already stored" locally.
 */
static bool evicting(struct maru_handler *h)
{
	return atomic_load_explicit(&h->inbox.ack, memory_order_relaxed) != 0;
}

/* is @p the page our local entry @e of its key is stored in? */
static bool same_page(const struct maru__keyent *e, const struct maru_page *p)
{
	return e && e->region_id == p->region_id && e->page == p->page_index;
}

/* the key is already stored locally: drop this page unless it is the same */
static void store_dup(struct maru_handler *h, const struct maru__keyent *e,
		      const struct maru_page *p)
{
	if (!same_page(e, p))
		maru__page_release(h, p->region_id, p->page_index);
}

static void remember(struct maru_handler *h, const struct maru_key *key,
		     const struct maru_page *p, uint64_t gen)
{
	struct maru__keyent *e;

	/* stored before, evicted, stored again: the old entry waits for its
	 * notice (which frees its page), the new one takes the key */
	e = maru__keymap_find(&h->keys, key);
	if (e && maru__keymap_orphan(&h->keys, e) < 0) {
		lwarn(h, "key map full: a later store of this key costs a "
			 "round trip");
		return;
	}
	e = maru__keymap_insert(&h->keys, key, p->region_id, p->page_index);
	if (e)
		e->gen = gen; /* what an eviction notice of it names */
	if (!e) {
		lwarn(h, "key map full: a later store of this key costs a "
			 "round trip");
		return;
	}
	page_link_key(h, e);
}

/*
 * A remote handler's pages go to the pool before their keys are
 * registered (remote.c): maru__remote_xfer() returns once the agent said
 * the bytes are there.  @regs: what will be registered.  Pages of regions
 * mapped here are left alone.  @keep: after a failure, the pages may
 * still be written by bytes of this store arriving late at the agent:
 * the caller must not free them (they stay taken until close).
 * Return: 0 or -errno (nothing may be registered then).
 */
static int remote_put(struct maru_handler *h, const struct maru__reg *regs,
		      size_t n, bool *keep)
{
	struct maru__xfer *x;
	struct maru__mapping *m;
	size_t i, k = 0;
	int rc;

	*keep = false;
	if (!maru__remote_on(h->remote))
		return 0;
	x = calloc(n, sizeof(*x));
	if (!x)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		m = maru__mapper_find(&h->mapper, regs[i].region_id);
		if (!m) {
			free(x);
			return -ESTALE;
		}
		if (!m->remote)
			continue;
		x[k++] = (struct maru__xfer){m, regs[i].kv_offset,
					     (size_t)regs[i].kv_length,
					     m->addr + regs[i].kv_offset};
	}
	rc = maru__remote_xfer(h->remote, x, k, true, keep);
	free(x);
	if (*keep)
		lwarn(h,
		      "%zu page(s) whose store failed stay out of use: bytes "
		      "of it may still reach the agent",
		      k);
	return rc;
}

MARU_EXPORT int maru_kv_store(struct maru_handler *h,
			      const struct maru_key *key,
			      const struct maru_page *page)
{
	uint64_t t0 = maru__now_ns();
	struct maru__keyent *e;
	struct maru__reply r;
	struct maru__msg m;
	struct maru__reg reg;
	bool keep;
	int rc;

	pthread_mutex_lock(&h->wlock);
	rc = maru__state_check(h);
	if (rc < 0)
		goto out_unlock;
	rc = -EINVAL;
	if (!key)
		goto out_unlock;
	if (h->max_key &&
	    (key->type == MARU_KEY_STR || key->type == MARU_KEY_BIN) &&
	    key->len > h->max_key) {
		rc = maru__fail(h, -E2BIG,
				"key of %zu bytes is longer than the server's "
				"--max-key-bytes (%" PRIu64 ")",
				(size_t)key->len, h->max_key);
		if (page_valid(h, page))
			maru__page_release(h, page->region_id,
					   page->page_index);
		goto out_unlock;
	}
	/* a page of a fenced region is never registered, and costs no RPC */
	rc = -ESTALE;
	if (alarm_flags(h) && region_fenced(h, page->region_id))
		goto out_unlock;
	rc = maru__write_gate(h);
	if (rc < 0) {
		if (page_valid(h, page))
			maru__page_release(h, page->region_id,
					   page->page_index);
		goto out_unlock;
	}
	if (!page_valid(h, page)) {
		/* (a recovery in the gate may just have retired its region) */
		rc = region_fenced(h, page->region_id) ? -ESTALE : -EINVAL;
		goto out_unlock;
	}
	e = maru__keymap_find(&h->keys, key);
	if (e && !evicting(h)) {
		store_dup(h, e, page);
		rc = 0;
		goto out_unlock;
	}
	reg = (struct maru__reg){key, page->region_id,
				 page->page_index * h->cfg.chunk_size,
				 page->size};
	rc = remote_put(h, &reg, 1, &keep);
	if (rc < 0) {
		/* the bytes are not in the pool: nothing is registered */
		if (!same_page(e, page) && !keep)
			maru__page_release(h, page->region_id,
					   page->page_index);
		goto out_unlock;
	}
	maru__reply_init(&r);
	maru__msg_init(&m, MDS_REGISTER_KV);
	rc = maru__send(h, &m, maru__enc_register(&m, &reg), &r);
	if (rc == 0 && !r.success)
		rc = maru__fail(
			h, -EREMOTEIO, "maru-server refused the key: %s",
			r.why[0] ? r.why : "REGISTER_KV answered false");
	if (rc < 0) {
		ldbg(h, "REGISTER_KV failed: %s", strerror(-rc));
		if (!same_page(e, page))
			maru__page_release(h, page->region_id,
					   page->page_index);
	} else if (!r.is_new) {
		/* first writer wins: someone else stored it (or we did) */
		if (!same_page(e, page))
			maru__page_release(h, page->region_id,
					   page->page_index);
		rc = 0;
	} else if ((alarm_flags(h) & MARU_ALARM_LOST) &&
		   region_fenced(h, page->region_id)) {
		/* fenced meanwhile (another thread found out) */
		unregister(h, key);
		rc = -ESTALE;
	} else {
		remember(h, key, page, r.kv_gen);
		rc = 1;
	}
out_unlock:
	pthread_mutex_unlock(&h->wlock);
	if (rc >= 0)
		maru__stats_record(h, "store", "none", page->size, t0);
	return rc;
}

MARU_EXPORT int maru_kv_batch_store(struct maru_handler *h,
				    const struct maru_key *keys,
				    const struct maru_page *pages, size_t n,
				    bool *results)
{
	uint64_t t0 = maru__now_ns();
	struct maru__keyent *e;
	struct maru__reg *regs = NULL;
	size_t *idx = NULL;
	struct maru__reply r;
	struct maru__msg m;
	bool *res = NULL;
	size_t i, j, k = 0;
	uint64_t gens = 0, gen;
	bool lost, keep = false;
	int rc, hits = 0;

	if (n && (!keys || !pages || !results))
		return -EINVAL;
	for (i = 0; i < n; i++)
		results[i] = false;
	pthread_mutex_lock(&h->wlock);
	rc = maru__state_check(h);
	if (rc < 0 || !n)
		goto out_unlock;
	rc = -ENOMEM;
	regs = malloc(n * sizeof(*regs));
	idx = malloc(n * sizeof(*idx));
	res = calloc(n, sizeof(*res));
	if (!regs || !idx || !res)
		goto out_unlock;

	/* answer locally what we stored ourselves; queue the rest */
	for (i = 0; i < n; i++) {
		if (!page_valid(h, &pages[i]))
			continue; /* false: not a page of ours */
		if (h->max_key &&
		    (keys[i].type == MARU_KEY_STR ||
		     keys[i].type == MARU_KEY_BIN) &&
		    keys[i].len > h->max_key) {
			/* false, and said: the page stays the caller's */
			maru__fail(h, -E2BIG,
				   "key of %zu bytes is longer than the "
				   "server's --max-key-bytes (%" PRIu64 ")",
				   (size_t)keys[i].len, h->max_key);
			continue;
		}
		if (alarm_flags(h) && region_fenced(h, pages[i].region_id))
			continue; /* false: fenced, never registered */
		e = maru__keymap_find(&h->keys, &keys[i]);
		if (e && !evicting(h)) {
			store_dup(h, e, &pages[i]);
			results[i] = true;
			hits++;
			continue;
		}
		regs[k] = (struct maru__reg){
			&keys[i], pages[i].region_id,
			pages[i].page_index * h->cfg.chunk_size, pages[i].size};
		idx[k++] = i;
	}
	rc = 0;
	if (!k)
		goto out_unlock;
	rc = maru__write_gate(h);
	if (rc == 0) {
		/* a recovery in the gate retires fenced regions: drop those */
		for (i = j = 0; i < k; i++) {
			if (!page_valid(h, &pages[idx[i]]))
				continue;
			regs[j] = regs[i];
			idx[j++] = idx[i];
		}
		k = j;
	}
	if (rc == 0 && k)
		rc = remote_put(h, regs, k, &keep); /* all in the pool, or
						     * none */
	if (rc == 0 && k) {
		maru__reply_init(&r);
		r.results = res;
		r.nresults = k;
		maru__msg_init(&m, MDS_BATCH_REGISTER_KV);
		rc = maru__send(h, &m, maru__enc_batch_register(&m, regs, k),
				&r);
		if (rc == 0 && !r.success)
			rc = -EREMOTEIO;
	}
	lost = rc == 0 && (alarm_flags(h) & MARU_ALARM_LOST);
	for (i = 0; i < k; i++) {
		const struct maru_page *p = &pages[idx[i]];

		/* the server numbers the new entries in order */
		gen = rc == 0 && i < r.results_len && res[i] && r.kv_gen_first
			      ? r.kv_gen_first + gens++
			      : 0;
		if (lost && region_fenced(h, p->region_id)) {
			/* fenced meanwhile: false (see maru_kv_store) */
			maru__page_release(h, p->region_id, p->page_index);
			continue;
		}
		if (rc == 0 && i < r.results_len && res[i]) {
			remember(h, &keys[idx[i]], p, gen);
			results[idx[i]] = true;
			hits++;
		} else {
			/* lost race (true), or failure (false): page freed --
			 * unless it is the very page that holds the key */
			e = maru__keymap_find(&h->keys, &keys[idx[i]]);
			if (!same_page(e, p) && !keep)
				maru__page_release(h, p->region_id,
						   p->page_index);
			if (rc == 0 && i < r.results_len) {
				results[idx[i]] = true;
				hits++;
			}
		}
	}
	if (rc < 0)
		ldbg(h, "BATCH_REGISTER_KV failed: %s", strerror(-rc));
out_unlock:
	pthread_mutex_unlock(&h->wlock);
	free(regs);
	free(idx);
	free(res);
	if (rc >= 0)
		maru__stats_record(h, "batch_store", "none", 0, t0);
	return rc < 0 ? rc : hits;
}

/* ------------------------------------------------------------------------ */
/* Reads                                                                    */

static const char *hit_result(size_t hits, size_t n)
{
	return hits == n ? "hit" : hits == 0 ? "miss" : "partial";
}

/* turn a lookup into a view, mapping the region on first use */
static int resolve(struct maru_handler *h, const struct maru__lookup *l,
		   struct maru_view *out)
{
	struct maru__mapping *m;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!l->found)
		return 0;
	if (!l->has_handle)
		return -EPROTO;
	m = maru__mapper_find(&h->mapper, l->handle.region_id);
	if (!m) {
		rc = maru__mapper_map(&h->mapper, &l->handle, false, true, &m);
		if (rc < 0)
			return rc;
	}
	if (l->kv_offset > m->len || l->kv_length > m->len - l->kv_offset) {
		lwarn(h,
		      "region %" PRIu64 ": entry [%" PRIu64 ", +%" PRIu64
		      ") outside the mapping",
		      l->handle.region_id, l->kv_offset, l->kv_length);
		return -EPROTO;
	}
	/* a remote region: the read mirror, which remote_fetch() fills */
	out->ptr = (m->rd ? m->rd : m->addr) + l->kv_offset;
	out->len = (size_t)l->kv_length;
	out->region_id = l->handle.region_id;
	out->offset = l->kv_offset;
	out->page_index = l->kv_offset / h->cfg.chunk_size;
	return 1;
}

/*
 * The view of a shared-index hit (docs/shm-index.md), when the region is mapped
 * here (the lookup is lock-free; a region not mapped yet, or fenced, is
 * left to the server's answer, which maps it).  Return: 1, or 0: ask.
 */
static int local_view(struct maru_handler *h, const struct si_hit *hit,
		      struct maru_view *out)
{
	struct maru__mapping *m = maru__mapper_find(&h->mapper, hit->region_id);

	if (!m || m->remote || hit->kv_offset > m->len ||
	    hit->kv_length > m->len - hit->kv_offset)
		return 0;
	out->ptr = m->addr + hit->kv_offset;
	out->len = (size_t)hit->kv_length;
	out->region_id = hit->region_id;
	out->offset = hit->kv_offset;
	out->page_index = hit->kv_offset / h->cfg.chunk_size;
	return 1;
}

/*
 * Answer a retrieve from the shared index: 1 hit (*@out, *@gen), 0 a
 * final miss, -1 ask the server.  Counted either way, in @cnt (the
 * caller adds them up: maru__idx_count).
 */
static int idx_answer(struct maru_handler *h, const struct maru_key *key,
		      uint64_t kh, int r, const struct si_hit *hit,
		      struct maru_view *out, uint64_t *gen, uint64_t cnt[3])
{
	if (r == MARU_IDX_NONE)
		return -1;
	if (r == SI_MISS) {
		cnt[SI_MISS]++;
		return 0;
	}
	if (r == SI_HIT && local_view(h, hit, out)) {
		cnt[SI_HIT]++;
		maru__idx_touch(h, key, kh);
		*gen = hit->gen;
		return 1;
	}
	cnt[SI_ASK]++;
	return -1;
}

/*
 * Lookups we answer ourselves are reported in the next HEARTBEAT;
 * maru-server counts the rest.  The keys and hits answered from the
 * shared index are its counters' (maru__idx_count: no second count on
 * the fast path); here only what those do not say: the bytes found, the
 * batches with their keys and found prefix, and the keys of a batch we
 * answered partly ourselves that the server answered the rest of (it was
 * told "count": false).
 */
static void lk_bytes(struct maru_handler *h, uint64_t bytes)
{
	uint64_t d[MDS_LK_N] = {0};

	d[MDS_LK_HIT_BYTES] = bytes;
	maru__lk_count(h, d);
}

/*
 * A whole batch: key i found when @found[i] (else @views[i] has a
 * pointer), its length @views[i].len (else @len[i]); @local[i]: answered
 * from the shared index (counted there)
 */
static void lk_batch(struct maru_handler *h, size_t n, const bool *local,
		     const bool *found, const struct maru_view *views,
		     const uint64_t *len)
{
	uint64_t d[MDS_LK_N] = {0};
	bool run = true, hit;
	size_t i;

	d[MDS_LK_BATCHES] = 1;
	d[MDS_LK_BATCH_KEYS] = n;
	for (i = 0; i < n; i++) {
		hit = found ? found[i] : views[i].ptr != NULL;
		run = run && hit;
		if (!local[i]) {
			d[MDS_LK_KEYS]++;
			d[MDS_LK_HITS] += hit;
		}
		if (!hit)
			continue;
		d[MDS_LK_HIT_BYTES] += views ? views[i].len : len ? len[i] : 0;
		d[MDS_LK_PREFIX_HITS] += run;
	}
	maru__lk_count(h, d);
}

static void idx_counted(struct maru_handler *h, const uint64_t cnt[3])
{
	int i;

	for (i = 0; i < 3; i++)
		maru__idx_count(h, i, cnt[i]);
}

static int idx_retrieve(struct maru_handler *h, const struct maru_key *key,
			struct maru_view *out, uint64_t *gen)
{
	uint64_t kh = 0, cnt[3] = {0, 0, 0};
	struct si_hit hit;
	int r = maru__idx_lookup(h, key, false, &hit, &kh);

	r = idx_answer(h, key, kh, r, &hit, out, gen, cnt);
	idx_counted(h, cnt);
	if (r == 1)
		lk_bytes(h, out->len);
	return r;
}

/* is @l (a lookup's answer) still the entry view @v was read from, with
 * registration number @ticket (0: any)? */
static bool same_entry(const struct maru__lookup *l, const struct maru_view *v,
		       uint64_t ticket)
{
	return l->found && l->has_handle &&
	       l->handle.region_id == v->region_id &&
	       l->kv_offset == v->offset && l->kv_length == v->len &&
	       (ticket == 0 || l->kv_gen == ticket);
}

/*
 * A remote handler's hits are copies (remote.c): the pages are read from
 * the agent (GET) into the region's read mirror, then the lookups are
 * asked again, uncounted.  A key evicted, deleted or stored again while its
 * page was read is a miss (its view cleared), never bytes that were not its
 * own. Views into mappings of this host are left alone. Return: the hits lost
 * to the second look, or -errno (the fetched views cleared).
 */
static int remote_fetch(struct maru_handler *h, const struct maru_key *keys,
			struct maru_view *views, const uint64_t *gens, size_t n)
{
	static const struct maru__key_opts uncounted = {.uncounted = true};
	struct maru__lookup *ents = NULL;
	struct maru_key *ask = NULL;
	struct maru__mapping *m;
	struct maru__xfer *x = NULL;
	struct maru__reply r;
	struct maru__msg msg;
	size_t i, j, k = 0, *idx = NULL;
	int rc, lost = 0;
	bool unsafe;

	if (!maru__remote_on(h->remote) || !n)
		return 0;
	x = calloc(n, sizeof(*x));
	idx = malloc(n * sizeof(*idx));
	if (!x || !idx) {
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (!views[i].ptr)
			continue;
		m = maru__mapper_find(&h->mapper, views[i].region_id);
		if (!m || !m->remote)
			continue;
		x[k] = (struct maru__xfer){m, views[i].offset, views[i].len,
					   (uint8_t *)views[i].ptr};
		idx[k++] = i;
	}
	rc = maru__remote_xfer(h->remote, x, k, false, &unsafe);
	if (rc < 0 || !k)
		goto out;
	/* the second look: the same entries? */
	ask = malloc(k * sizeof(*ask));
	ents = calloc(k, sizeof(*ents));
	rc = -ENOMEM;
	if (!ask || !ents)
		goto out;
	for (j = 0; j < k; j++)
		ask[j] = keys[idx[j]];
	maru__reply_init(&r);
	if (k == 1) {
		maru__msg_init(&msg, MDS_LOOKUP_KV);
		rc = maru__send(h, &msg,
				maru__enc_key_opts(&msg, ask, &uncounted), &r);
		if (rc == 0)
			ents[0] = r.lookup;
		r.entries_len = 1;
	} else {
		r.entries = ents;
		r.nentries = k;
		maru__msg_init(&msg, MDS_BATCH_LOOKUP_KV);
		rc = maru__send(
			h, &msg,
			maru__enc_batch_keys_opts(&msg, ask, k, &uncounted),
			&r);
	}
	if (rc < 0)
		goto out;
	for (j = 0; j < k; j++) {
		const struct maru__lookup *l = &ents[j];
		struct maru_view *v = &views[idx[j]];

		if (j < r.entries_len &&
		    same_entry(l, v, gens ? gens[idx[j]] : 0))
			continue;
		ldbg(h,
		     "remote read of region %" PRIu64 " at %" PRIu64
		     ": the key changed meanwhile, a miss",
		     v->region_id, v->offset);
		memset(v, 0, sizeof(*v));
		lost++;
	}
	rc = lost;
out:
	if (rc < 0)
		for (j = 0; j < k; j++)
			memset(&views[idx[j]], 0, sizeof(views[idx[j]]));
	free(x);
	free(idx);
	free(ask);
	free(ents);
	return rc;
}

MARU_EXPORT int maru_kv_retrieve(struct maru_handler *h,
				 const struct maru_key *key,
				 struct maru_view *out)
{
	return maru_kv_retrieve_ticket(h, key, out, NULL);
}

MARU_EXPORT int maru_kv_retrieve_ticket(struct maru_handler *h,
					const struct maru_key *key,
					struct maru_view *out, uint64_t *ticket)
{
	uint64_t t0 = maru__now_ns();
	struct maru__reply r;
	struct maru__msg m;
	int rc;

	uint64_t gen = 0;

	if (ticket)
		*ticket = 0;
	memset(out, 0, sizeof(*out));
	rc = maru__state_check(h);
	if (rc < 0)
		return rc;
	if (!key)
		return -EINVAL;
	rc = idx_retrieve(h, key, out, &gen);
	if (rc >= 0) {
		if (rc == 1 && ticket)
			*ticket = gen;
		maru__stats_record(h, "retrieve", rc ? "hit" : "miss", out->len,
				   t0);
		return rc;
	}
	maru__reply_init(&r);
	maru__msg_init(&m, MDS_LOOKUP_KV);
	rc = maru__send(h, &m, maru__enc_key(&m, key), &r);
	if (rc == 0)
		rc = resolve(h, &r.lookup, out);
	if (rc == 1 && maru__remote_on(h->remote)) {
		gen = r.lookup.kv_gen;
		rc = remote_fetch(h, key, out, &gen, 1);
		rc = rc < 0 ? rc : out->ptr ? 1 : 0;
	}
	if (rc == 1 && ticket)
		*ticket = r.lookup.kv_gen;
	if (rc >= 0)
		maru__stats_record(h, "retrieve", rc ? "hit" : "miss", out->len,
				   t0);
	return rc;
}

MARU_EXPORT int maru_kv_recheck(struct maru_handler *h,
				const struct maru_key *key,
				const struct maru_view *v, uint64_t ticket)
{
	static const struct maru__key_opts uncounted = {.uncounted = true};
	struct maru__reply r;
	struct maru__msg m;
	struct si_hit hit;
	int rc;

	if (!key || !v)
		return -EINVAL;
	rc = maru__state_check(h);
	if (rc < 0)
		return rc;
	if (!v->ptr || !maru_view_valid(h, v))
		return 0; /* a miss, or a fenced mapping: not the pool's bytes
			   */
	/* the shared index: the entry read, still there? */
	rc = maru__idx_lookup(h, key, true, &hit, NULL);
	if (rc == SI_HIT || rc == SI_MISS) {
		/* not counted: the retrieve it checks was */
		return rc == SI_HIT && hit.region_id == v->region_id &&
		       hit.kv_offset == v->offset && hit.kv_length == v->len &&
		       (ticket == 0 || hit.gen == ticket);
	}
	maru__reply_init(&r);
	maru__msg_init(&m, MDS_LOOKUP_KV);
	/* (not a lookup to count: the retrieve it checks was) */
	rc = maru__send(h, &m, maru__enc_key_opts(&m, key, &uncounted), &r);
	if (rc < 0)
		return rc;
	/* the same entry: registration number and location */
	return same_entry(&r.lookup, v, ticket);
}

/* EXISTS_KV / PIN_KV / UNPIN_KV / DELETE_KV: one key, one boolean
 * (@ttl_ms: PIN_KV's soft pin) */
static int key_op(struct maru_handler *h, uint8_t type,
		  const struct maru_key *key, const char *op, uint32_t ttl_ms)
{
	struct maru__key_opts o = {.ttl_ms = ttl_ms};
	uint64_t t0 = maru__now_ns();
	struct maru__reply r;
	struct maru__msg m;
	int rc;

	rc = maru__state_check(h);
	if (rc < 0)
		return rc;
	if (!key)
		return -EINVAL;
	if (type == MDS_EXISTS_KV) {
		/* the shared index knows, wherever the region is */
		struct si_hit hit;
		uint64_t kh = 0;
		int ir = maru__idx_lookup(h, key, false, &hit, &kh);

		if (ir == SI_HIT || ir == SI_MISS) {
			maru__idx_count(h, ir, 1);
			if (ir == SI_HIT)
				lk_bytes(h, hit.kv_length);
			if (ir == SI_HIT)
				maru__idx_touch(h, key, kh);
			maru__stats_record(h, op, ir == SI_HIT ? "hit" : "miss",
					   0, t0);
			return ir == SI_HIT;
		}
		if (ir == SI_ASK)
			maru__idx_count(h, SI_ASK, 1);
	}
	maru__reply_init(&r);
	maru__msg_init(&m, type);
	rc = maru__send(h, &m, maru__enc_key_opts(&m, key, &o), &r);
	if (rc < 0)
		return rc;
	/* EXISTS and PIN answer "exists", UNPIN and DELETE "success" */
	rc = (type == MDS_EXISTS_KV || type == MDS_PIN_KV) ? r.exists
							   : r.success;
	maru__stats_record(h, op, rc ? "hit" : "miss", 0, t0);
	return rc;
}

MARU_EXPORT int maru_kv_exists(struct maru_handler *h,
			       const struct maru_key *key)
{
	return key_op(h, MDS_EXISTS_KV, key, "exists", 0);
}

MARU_EXPORT bool maru_view_valid(struct maru_handler *h,
				 const struct maru_view *v)
{
	struct maru__mapping *m;
	const uint8_t *p;

	if (!h || !v || !v->ptr || maru__state_check(h) < 0)
		return false;
	/* a fenced mapping is never found: the region maps afresh elsewhere */
	m = maru__mapper_find(&h->mapper, v->region_id);
	p = v->ptr;
	if (!m || atomic_load(&m->fenced) || v->len > m->len)
		return false;
	return (p >= m->addr && (size_t)(p - m->addr) <= m->len - v->len) ||
	       (m->rd && p >= m->rd && (size_t)(p - m->rd) <= m->len - v->len);
}

MARU_EXPORT int maru_kv_pin(struct maru_handler *h, const struct maru_key *key)
{
	return key_op(h, MDS_PIN_KV, key, "pin", 0);
}

MARU_EXPORT int maru_kv_pin_ttl(struct maru_handler *h,
				const struct maru_key *key, uint32_t ttl_ms)
{
	return key_op(h, MDS_PIN_KV, key, "pin", ttl_ms);
}

MARU_EXPORT int maru_kv_unpin(struct maru_handler *h,
			      const struct maru_key *key)
{
	if (maru__state_check(h) == 0)
		maru__rejoin(h);
	return key_op(h, MDS_UNPIN_KV, key, "unpin", 0);
}

MARU_EXPORT int maru_kv_delete(struct maru_handler *h,
			       const struct maru_key *key)
{
	uint64_t t0 = maru__now_ns();
	struct maru__keyent *e;
	struct maru__reply r;
	struct maru__msg m;
	uint64_t rid, page;
	int rc;

	if (!key)
		return -EINVAL;
	pthread_mutex_lock(&h->wlock);
	rc = maru__state_check(h);
	if (rc < 0)
		goto out_unlock;
	maru__reply_init(&r);
	maru__msg_init(&m, MDS_DELETE_KV);
	rc = maru__send(h, &m, maru__enc_key(&m, key), &r);
	if (rc < 0)
		goto out_unlock;
	rc = r.success;
	if (rc) {
		e = maru__keymap_find(&h->keys, key);
		/* ours, if the registration deleted is ours ("kv_gen"; an
		 * older server says none): the page is free again (drops
		 * its keys too).  Another's (ours was evicted, and another
		 * client stored the key since): our page is the notice's */
		if (e && (!r.kv_gen || r.kv_gen == e->gen)) {
			rid = e->region_id;
			page = e->page;
			maru__page_release(h, rid, page);
		}
	}
	maru__stats_record(h, "delete", rc ? "hit" : "miss", 0, t0);
out_unlock:
	pthread_mutex_unlock(&h->wlock);
	return rc;
}

MARU_EXPORT int maru_kv_batch_retrieve(struct maru_handler *h,
				       const struct maru_key *keys, size_t n,
				       struct maru_view *views)
{
	return maru_kv_batch_retrieve_tickets(h, keys, n, views, NULL);
}

/*
 * The keys of a batch the shared index could not answer: their
 * indices into the caller's arrays, and a copy of the keys to ask about.
 * Return: how many, or -ENOMEM (then *@idx and *@ask are NULL).
 */
static ssize_t batch_asks(const struct maru_key *keys, size_t n,
			  const bool *known, size_t **idx,
			  struct maru_key **ask)
{
	size_t i, k = 0;

	*idx = NULL;
	*ask = NULL;
	for (i = 0; i < n; i++)
		k += !known[i];
	if (!k)
		return 0;
	*idx = malloc(k * sizeof(**idx));
	*ask = malloc(k * sizeof(**ask));
	if (!*idx || !*ask) {
		free(*idx);
		free(*ask);
		*idx = NULL;
		*ask = NULL;
		return -ENOMEM;
	}
	for (i = k = 0; i < n; i++)
		if (!known[i]) {
			(*idx)[k] = i;
			(*ask)[k++] = keys[i];
		}
	return (ssize_t)k;
}

MARU_EXPORT int maru_kv_batch_retrieve_tickets(struct maru_handler *h,
					       const struct maru_key *keys,
					       size_t n,
					       struct maru_view *views,
					       uint64_t *tickets)
{
	uint64_t t0 = maru__now_ns(), gen;
	struct maru__key_opts o = {0};
	struct maru__lookup *ents = NULL;
	struct maru_key *ask = NULL;
	uint64_t *kh, cnt[3] = {0, 0, 0};
	struct si_hit *ih;
	struct maru__reply r;
	struct maru__msg m;
	size_t i, j, hits = 0, *idx = NULL;
	bool *known = NULL;
	ssize_t k;
	int rc, *ir;

	if (n && (!keys || !views))
		return -EINVAL;
	memset(views, 0, n * sizeof(*views));
	if (tickets)
		memset(tickets, 0, n * sizeof(*tickets));
	rc = maru__state_check(h);
	if (rc < 0 || !n)
		return rc;
	/* the shared index first; what it cannot answer, in one request */
	known = calloc(n, sizeof(*known));
	ir = malloc(n * sizeof(*ir));
	ih = malloc(n * sizeof(*ih));
	kh = malloc(n * sizeof(*kh));
	if (!known || !ir || !ih || !kh) {
		free(known);
		free(ir);
		free(ih);
		free(kh);
		return -ENOMEM;
	}
	if (maru__idx_lookup_batch(h, keys, n, ir, ih, kh) == 0) {
		for (i = 0; i < n; i++) {
			rc = idx_answer(h, &keys[i], kh[i], ir[i], &ih[i],
					&views[i], &gen, cnt);
			if (rc < 0)
				continue;
			known[i] = true;
			hits += rc;
			if (rc && tickets)
				tickets[i] = gen;
		}
		idx_counted(h, cnt);
	}
	free(ir);
	free(ih);
	free(kh);
	k = batch_asks(keys, n, known, &idx, &ask);
	rc = k < 0 ? (int)k : 0;
	if (k > 0) {
		ents = calloc((size_t)k, sizeof(*ents));
		rc = ents ? 0 : -ENOMEM;
	}
	if (k > 0 && rc == 0) {
		maru__reply_init(&r);
		r.entries = ents;
		r.nentries = (size_t)k;
		maru__msg_init(&m, MDS_BATCH_LOOKUP_KV);
		/* part of a batch: we count all of it (its prefix) */
		o.uncounted = (size_t)k < n;
		rc = maru__send(
			h, &m,
			maru__enc_batch_keys_opts(&m, ask, (size_t)k, &o), &r);
		for (j = 0; rc == 0 && j < (size_t)k && j < r.entries_len;
		     j++) {
			i = idx[j];
			/* a region that cannot be mapped is a miss */
			if (resolve(h, &ents[j], &views[i]) == 1)
				hits++;
			else
				memset(&views[i], 0, sizeof(views[i]));
			if (tickets)
				tickets[i] = views[i].ptr ? ents[j].kv_gen : 0;
		}
	}
	if (rc == 0 && k > 0 && maru__remote_on(h->remote)) {
		uint64_t *g = calloc(n, sizeof(*g));

		rc = g ? 0 : -ENOMEM;
		for (j = 0; g && j < (size_t)k && j < r.entries_len; j++)
			g[idx[j]] = views[idx[j]].ptr ? ents[j].kv_gen : 0;
		if (rc == 0)
			rc = remote_fetch(h, keys, views, g, n);
		free(g);
		if (rc > 0) {
			hits -= (size_t)rc;
			rc = 0;
		}
		for (i = 0; tickets && i < n; i++)
			if (!views[i].ptr)
				tickets[i] = 0;
	}
	if (rc == 0 && (size_t)k < n)
		lk_batch(h, n, known, NULL, views, NULL);
	if (rc == 0)
		maru__stats_record(h, "batch_retrieve", hit_result(hits, n), 0,
				   t0);
	free(ents);
	free(idx);
	free(ask);
	free(known);
	return rc < 0 ? rc : (int)hits;
}

/* BATCH_EXISTS_KV: the shared index first, the rest in one request */
static int batch_exists(struct maru_handler *h, const struct maru_key *keys,
			size_t n, bool *results, uint64_t t0)
{
	uint64_t *kh, cnt[3] = {0, 0, 0};
	struct maru__key_opts o = {0};
	struct maru_key *ask = NULL;
	struct maru__reply r;
	struct maru__msg m;
	struct si_hit *hit;
	size_t i, j, hits = 0, *idx = NULL;
	bool *known, *res = NULL;
	ssize_t k;
	int rc, *ir;

	known = calloc(n, sizeof(*known));
	ir = malloc(n * sizeof(*ir));
	hit = malloc(n * sizeof(*hit));
	kh = malloc(n * sizeof(*kh));
	if (!known || !ir || !hit || !kh) {
		free(known);
		free(ir);
		free(hit);
		free(kh);
		return -ENOMEM;
	}
	if (maru__idx_lookup_batch(h, keys, n, ir, hit, kh) == 0) {
		for (i = 0; i < n; i++) {
			cnt[ir[i]]++;
			if (ir[i] == SI_ASK)
				continue;
			known[i] = true;
			results[i] = ir[i] == SI_HIT;
			if (ir[i] == SI_HIT)
				maru__idx_touch(h, &keys[i], kh[i]);
		}
		idx_counted(h, cnt);
	}
	/* kh now: the lengths of the keys found here (for the counters;
	 * BATCH_EXISTS's answer has none) */
	for (i = 0; i < n; i++)
		kh[i] = known[i] && results[i] ? hit[i].kv_length : 0;
	free(ir);
	free(hit);
	k = batch_asks(keys, n, known, &idx, &ask);
	rc = k < 0 ? (int)k : 0;
	if (k > 0) {
		res = calloc((size_t)k, sizeof(*res));
		rc = res ? 0 : -ENOMEM;
	}
	if (k > 0 && rc == 0) {
		maru__reply_init(&r);
		r.results = res;
		r.nresults = (size_t)k;
		maru__msg_init(&m, MDS_BATCH_EXISTS_KV);
		/* part of a batch: we count all of it (its prefix) */
		o.uncounted = (size_t)k < n;
		rc = maru__send(
			h, &m,
			maru__enc_batch_keys_opts(&m, ask, (size_t)k, &o), &r);
		for (j = 0; rc == 0 && j < (size_t)k; j++)
			results[idx[j]] = res[j];
	}
	if (rc == 0 && (size_t)k < n)
		lk_batch(h, n, known, results, NULL, kh);
	if (rc < 0) {
		for (i = 0; i < n; i++)
			results[i] = false;
	} else {
		for (i = 0; i < n; i++)
			hits += results[i];
		maru__stats_record(h, "batch_exists", hit_result(hits, n), 0,
				   t0);
	}
	free(res);
	free(idx);
	free(ask);
	free(known);
	free(kh);
	return rc < 0 ? rc : (int)hits;
}

/* BATCH_EXISTS_KV / BATCH_PIN_KV / BATCH_UNPIN_KV (@ttl_ms: a soft pin) */
static int batch_bool(struct maru_handler *h, uint8_t type,
		      const struct maru_key *keys, size_t n, bool *results,
		      const char *op, uint32_t ttl_ms)
{
	struct maru__key_opts o = {.ttl_ms = ttl_ms};
	uint64_t t0 = maru__now_ns();
	struct maru__reply r;
	struct maru__msg m;
	size_t i, hits = 0;
	int rc;

	if (n && (!keys || !results))
		return -EINVAL;
	for (i = 0; i < n; i++)
		results[i] = false;
	rc = maru__state_check(h);
	if (rc < 0 || !n)
		return rc;
	if (type == MDS_BATCH_UNPIN_KV)
		maru__rejoin(h);
	if (type == MDS_BATCH_EXISTS_KV)
		return batch_exists(h, keys, n, results, t0);
	maru__reply_init(&r);
	r.results = results;
	r.nresults = n;
	maru__msg_init(&m, type);
	rc = maru__send(h, &m, maru__enc_batch_keys_opts(&m, keys, n, &o), &r);
	if (rc < 0) {
		for (i = 0; i < n; i++)
			results[i] = false;
		return rc;
	}
	for (i = 0; i < n; i++)
		hits += results[i];
	maru__stats_record(h, op, hit_result(hits, n), 0, t0);
	return (int)hits;
}

MARU_EXPORT int maru_kv_batch_exists(struct maru_handler *h,
				     const struct maru_key *keys, size_t n,
				     bool *results)
{
	return batch_bool(h, MDS_BATCH_EXISTS_KV, keys, n, results,
			  "batch_exists", 0);
}

MARU_EXPORT int maru_kv_batch_pin(struct maru_handler *h,
				  const struct maru_key *keys, size_t n,
				  bool *results)
{
	return batch_bool(h, MDS_BATCH_PIN_KV, keys, n, results, "batch_pin",
			  0);
}

MARU_EXPORT int maru_kv_batch_pin_ttl(struct maru_handler *h,
				      const struct maru_key *keys, size_t n,
				      bool *results, uint32_t ttl_ms)
{
	return batch_bool(h, MDS_BATCH_PIN_KV, keys, n, results, "batch_pin",
			  ttl_ms);
}

MARU_EXPORT int maru_kv_batch_unpin(struct maru_handler *h,
				    const struct maru_key *keys, size_t n,
				    bool *results)
{
	return batch_bool(h, MDS_BATCH_UNPIN_KV, keys, n, results,
			  "batch_unpin", 0);
}
