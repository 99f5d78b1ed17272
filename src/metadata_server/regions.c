/* SPDX-License-Identifier: Apache-2.0 */
/*
 * regions.c - the regions maru-server allocated at the resource manager:
 * the table, their lifecycle, the queue of FREEs, and the requests that
 * make and return them (REQUEST_ALLOC, RETURN_ALLOC)
 *
 * "refs" counts the KV entries pointing at a region; a region leaves the
 * table only when its owner is done with it (returned, or detected dead)
 * and no entry references it (region_done()), after the eviction grace
 * if an eviction emptied pages of it lately (a reader may still copy
 * them).  A FREE the RM cannot take now is queued and retried from the
 * tick; a region is never forgotten before the RM confirmed (or
 * definitively refused) its FREE, and the shared index's removals of its
 * keys are in memory first (mds_fence()).
 *
 * A REQUEST_ALLOC resolves its owner (owners.c), asks the RM (never
 * blocking: a request may be parked, struct mds_wait), and when the pool
 * is full goes to evict.c, which evicts and may park it for capacity.
 */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "log.h"
#include "pubidx.h"

/* Move a region to @state, keeping the owner's counters right. */
void region_set(struct mds *s, struct mds_region *r, uint8_t state, uint8_t why)
{
	struct mds_inst *in = &s->insts[r->owner];

	if (r->state == REG_LIVE && r->lease == IX_NO_SLOT)
		in->npeer--;
	if (r->state == REG_GONE && r->gone_why == GONE_PEER)
		in->npeer_gone--;
	r->state = state;
	r->gone_why = state == REG_GONE ? why : 0;
	if (r->state == REG_LIVE && r->lease == IX_NO_SLOT)
		in->npeer++;
	if (r->state == REG_GONE && r->gone_why == GONE_PEER)
		in->npeer_gone++;
	inst_deadline(s, in);
	if (state != REG_UNUSED)
		log_region(s, r); /* (UNUSED: its FREE says it, queue_free()) */
}

void mds_fence(void *arg)
{
	struct mds *s = arg;

	pub_fence(s->pub);
}

/* Queue a FREE for the RM; flush_pending() sends it. */
void queue_free(struct mds *s, const struct rm_handle *h)
{
	uint64_t hv[4] = {h->region_id, h->offset, h->length, h->auth_token};

	/* the shared index's removals of its keys are in memory before the
	 * region can go to anyone else */
	pub_fence(s->pub);
	if (s->jr)
		jr_put_free(s->jr, hv);
	if (s->npending == s->pending_cap) {
		uint32_t cap = s->pending_cap ? s->pending_cap * 2 : 16;
		struct rm_handle *v = realloc(s->pending, cap * sizeof(*v));

		if (v) {
			s->pending = v;
			s->pending_cap = cap;
		}
	}
	if (s->npending < s->pending_cap)
		s->pending[s->npending++] = *h;
	else
		log_err("region %llu: out of memory queueing its FREE; "
			"the resource manager keeps it until we exit",
			(unsigned long long)h->region_id);
}

void flush_pending(struct mds *s)
{
	uint32_t i = 0, j;
	int rc;

	if (s->replaying)
		return; /* mds_recovered() and the ticks send them */
	while (i < s->npending) {
		rc = s->rm->free(s->rm_arg, &s->pending[i]);
		if (rc == -EAGAIN) {
			s->ctr.rm_free_retries++;
			break;
		}
		if (rc == 0) {
			s->ctr.rm_frees++;
			s->cap_freed = true; /* room for whoever waits (tick) */
			log_dbg("region %llu: freed at the resource manager",
				(unsigned long long)s->pending[i].region_id);
		} else {
			log_err("region %llu: resource manager refused FREE "
				"(%d); forgetting it",
				(unsigned long long)s->pending[i].region_id,
				rc);
		}
		if (s->jr)
			jr_put_freed(s->jr, s->pending[i].region_id);
		i++;
	}
	if (i) {
		for (j = i; j < s->npending; j++)
			s->pending[j - i] = s->pending[j];
		s->npending -= i;
	}
}

/* Drop a region from the table (nothing at the RM). */
/*
 * regions_lose_owner - the one place an owner's end reaches its regions:
 * those under lease @lslot (its lease ended) or, with IX_NO_SLOT, the
 * live lease-less ones of owner @islot (declared dead) become GONE; the
 * ones no key refers to go now (region_done()), the others when their
 * last key does.  May free the owner.
 */
void regions_lose_owner(struct mds *s, uint32_t islot, uint32_t lslot)
{
	struct mds_lease *l = lslot != IX_NO_SLOT ? &s->leases[lslot] : NULL;
	uint32_t i, nx;

	/* the pages it holds in others' regions go first (pages.c) */
	pages_lose_holder(s, islot);
	for (i = s->reg_head; i != IX_NO_SLOT && (!l || l->nregions); i = nx) {
		struct mds_region *r = &s->regions[i];

		nx = r->next;
		if (l ? r->lease != lslot
		      : r->owner != islot || r->state != REG_LIVE ||
				    r->lease != IX_NO_SLOT)
			continue;
		if (r->state == REG_LIVE)
			region_set(s, r, REG_GONE, l ? GONE_LEASE : GONE_PEER);
		if (r->refs == 0 && !pages_lent(r)) {
			region_done(s, i);
			if (r->state == REG_UNUSED)
				continue;
		}
		if (l) {
			/* it hangs on no lease from now on */
			r->lease = IX_NO_SLOT;
			l->nregions--;
			log_region(s, r);
		}
	}
}

void region_forget(struct mds *s, uint32_t slot)
{
	struct mds_region *r = &s->regions[slot];
	uint8_t kb[8];
	struct ix_key k = id_key(&r->h.region_id, kb);
	struct ix_entry *e;
	uint32_t owner = r->owner;

	region_set(s, r, REG_UNUSED, 0);
	e = ix_find(&s->region_map, &k, ix_hash(&s->region_map, &k));
	if (e)
		ix_delete(&s->region_map, e);
	if (r->prev != IX_NO_SLOT)
		s->regions[r->prev].next = r->next;
	else
		s->reg_head = r->next;
	if (r->next != IX_NO_SLOT)
		s->regions[r->next].prev = r->prev;
	else
		s->reg_tail = r->prev;
	if (r->lease != IX_NO_SLOT)
		s->leases[r->lease].nregions--;
	s->nregions--;
	s->total_allocated -= r->h.length;
	s->insts[owner].nregions--;
	inst_bytes(s, &s->insts[owner], -(int64_t)r->h.length, 0);

	if (r->deferred)
		s->ndeferred--;
	pages_forget_region(s, r);
	pages_drop(r);
	memset(r, 0, sizeof(*r));
	r->next = s->reg_free;
	s->reg_free = slot;
	inst_maybe_gc(s, owner);
}

/*
 * The region's owner is done and no entry refers to it: drop it from the
 * table and free it at the RM (now, or from the retry queue).
 */
void region_release(struct mds *s, uint32_t slot)
{
	struct mds_region *r = &s->regions[slot];
	struct rm_handle h = r->h;

	if (r->state == REG_GONE) {
		s->ctr.regions_reclaimed++;
		log_info("region %llu: reclaimed from instance %s (%s), %llu "
			 "bytes freed",
			 (unsigned long long)h.region_id, s->insts[r->owner].id,
			 r->gone_why == GONE_LEASE ? "lease ended"
						   : "no connection left",
			 (unsigned long long)h.length);
	}
	if (r->wanted_for &&
	    s->insts[r->wanted_for - 1].pins.uid == r->wanted_uid)
		earmark(s, r->wanted_for - 1);
	region_forget(s, slot);
	queue_free(s, &h);
	s->cap_freed = true; /* capacity for whoever waits (tick) */
	flush_pending(s);
}

/*
 * The region's owner is done and its last entry went: free it, unless an
 * eviction emptied pages of it less than the grace ago (a reader of an
 * evicted key may still be copying them); mds_tick() frees it then.
 */
void region_done(struct mds *s, uint32_t slot)
{
	struct mds_region *r = &s->regions[slot];

	if (s->replaying)
		return; /* the journal says when it went (JR_FREE) */
	if (r->quiet_at <= s->vnow) {
		region_release(s, slot);
		return;
	}
	if (!r->deferred) {
		r->deferred = 1;
		s->ndeferred++;
	}
}

int region_add(struct mds *s, const struct rm_handle *h, uint32_t owner,
	       uint32_t lease)
{
	uint8_t kb[8], hit[MDS_HIT_PREFIX_MAX];
	struct ix_key k = id_key(&h->region_id, kb);
	size_t hit_len = mds_encode_hit_prefix(h, hit);
	struct mds_region *r;
	struct ix_entry *e;
	uint32_t slot;
	int rc;

	if (!hit_len)
		return -ENOMEM;
	if (s->reg_free == IX_NO_SLOT) {
		uint32_t old = s->nreg_slots, i;

		if (grow((void **)&s->regions, &s->nreg_slots,
			 sizeof(*s->regions)) < 0)
			return -ENOMEM;
		for (i = s->nreg_slots; i-- > old;) {
			s->regions[i].next = s->reg_free;
			s->reg_free = i;
		}
	}
	rc = ix_insert(&s->region_map, &k, ix_hash(&s->region_map, &k), &e);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return -EEXIST;
	slot = s->reg_free;
	r = &s->regions[slot];
	s->reg_free = r->next;
	e->slot = slot;
	memset(r, 0, sizeof(*r));
	r->h = *h;
	r->owner = owner;
	r->lease = lease;
	memcpy(r->hit, hit, hit_len);
	r->hit_len = (uint8_t)hit_len;
	r->next = IX_NO_SLOT;
	r->prev = s->reg_tail;
	if (s->reg_tail != IX_NO_SLOT)
		s->regions[s->reg_tail].next = slot;
	else
		s->reg_head = slot;
	s->reg_tail = slot;
	s->nregions++;
	s->total_allocated += h->length;
	s->insts[owner].nregions++;
	inst_bytes(s, &s->insts[owner], (int64_t)h->length, 0);
	if (lease != IX_NO_SLOT)
		s->leases[lease].nregions++;
	r->state = REG_UNUSED;
	region_set(s, r, REG_LIVE, 0);
	return 0;
}

/* ---- allocations ---- */

/*
 * A region of @size is larger than the whole pool: no eviction makes it
 * fit (the RM's -ENOMEM then goes to the client as it is).
 */
static bool never_fits(struct mds *s, uint64_t size)
{
	uint64_t total = 0, avail;

	if (!s->pool_total && s->rm->pool_usage(s->rm_arg, s->cfg.dax_only,
						&total, &avail, NULL) == 0)
		s->pool_total = total;
	return s->pool_total && size > s->pool_total;
}

/* Before the RM: the owner (and lease) slots the region will have. */
static int alloc_prepare(struct mds *s, struct mds_str inst,
			 struct mds_str lease, struct mds_peer *peer,
			 uint32_t *islotp, uint32_t *lslotp)
{
	uint32_t islot, lslot;
	int err;

	if (!s->cfg.lease_ttl_ns)
		lease.len = 0; /* no leases granted: plain allocation */
	if (lease.len && lease_ended(s, lease))
		return -ESTALE;
	islot = owner_resolve(s, inst, lease, peer, true, &lslot, &err);
	if (islot == IX_NO_SLOT)
		return err;
	if (!claim(s, peer, islot, lslot)) {
		inst_maybe_gc(s, islot);
		return -EPERM;
	}
	revive(s, islot);
	*islotp = islot;
	*lslotp = lslot;
	return 0;
}

/* After the RM: track @h, or give it back when we cannot. */
static int alloc_track(struct mds *s, const struct rm_handle *h, uint32_t islot,
		       uint32_t lslot, struct rm_handle *out)
{
	int rc = region_add(s, h, islot, lslot);
	uint32_t slot;

	/* a client that takes pages one by one: a page table (pages.c; no
	 * memory for one: its owner keeps every page, as without) */
	if (rc == 0 && s->insts[islot].page_size &&
	    region_find(s, h->region_id, &slot))
		(void)pages_enable(s, slot, s->insts[islot].page_size);

	if (rc < 0) {
		log_err("region %llu: cannot track it (%d); freeing it",
			(unsigned long long)h->region_id, rc);
		if (rc != -EEXIST) {
			queue_free(s, h);
			flush_pending(s);
		}
		inst_maybe_gc(s, islot);
		return rc;
	}
	*out = *h;
	return 0;
}

int mds_alloc(struct mds *s, struct mds_str inst, struct mds_str lease,
	      uint64_t size, struct mds_peer *peer, struct rm_handle *out,
	      struct mds_wait *w)
{
	uint32_t islot, lslot;
	struct rm_handle h;
	int rc;

	rc = alloc_prepare(s, inst, lease, peer, &islot, &lslot);
	if (rc < 0)
		return rc;
	if (w) {
		w->oslot = islot;
		w->ouid = s->insts[islot].pins.uid;
		if (w->page_size)
			mds_inst_page_size(s, islot, w->page_size);
		w->rm_size = size;
		if (s->insts[islot].page_size && s->insts[islot].notices) {
			/* pages of the pool first (pages.c) */
			if (pages_ready(s, s->insts[islot].page_size) &&
			    pages_grant(s, islot, size))
				return MDS_RC_RECLAIMED;
			/* else a region, smaller than asked for if the pool
			 * has no room for that much */
			if (!never_fits(s, size))
				w->rm_size = pages_region_size(s, islot, size);
		}
	}
	/* --instance-quota: what one instance id may hold, all its owners */
	if (s->cfg.inst_quota &&
	    (size > s->cfg.inst_quota ||
	     s->labels[s->insts[islot].label].bytes +
			     s->labels[s->insts[islot].label].pending >
		     s->cfg.inst_quota - size)) {
		/*
		 * At its quota the instance's own coldest keys go, whatever
		 * other instances hold: one tenant cannot evict everyone.
		 * It waits for their pages (after the grace), as for a full
		 * pool, and never gets a region past its quota.
		 */
		if (!w || !evict_on(s) || size > s->cfg.inst_quota ||
		    (!evict_own(s, islot, size, EVICT_WALK_MAX, EV_QUOTA) &&
		     !mds_notices_pending(s, islot))) {
			inst_maybe_gc(s, islot);
			return -EDQUOT;
		}
		w->cap_quota = true;
		w->cap_deadline = s->vnow + s->cfg.evict_wait_ns;
		w->cap_told = s->insts[islot].told;
		s->ctr.cap_waits++;
		cap_append(s, w);
		rc = -EINPROGRESS;
	} else if (w && evict_on(s) && waiting_bytes(s)) {
		/* requests wait for regions: in turn (freed capacity goes to
		 * them), not to one that comes now and asks the RM first */
		rc = -ENOMEM;
	} else {
		rc = s->rm->alloc(s->rm_arg, w ? w->rm_size : size, w, &h);
	}
	if (rc == -ENOMEM && never_fits(s, size)) {
		inst_maybe_gc(s, islot);
		return rc;
	}
	if (rc == -ENOMEM && evict_on(s)) {
		/* the pool is full: what the RM session would have said */
		if (!w) {
			s->full_at = s->vnow;
			evict_some(s, size, EVICT_TICK_KEYS);
			rc = notices_due(s, &s->insts[islot]) ? MDS_RC_RECLAIMED
							      : -ENOSPC;
			inst_maybe_gc(s, islot);
			return rc;
		}
		rc = reclaim_for(s, w);
		if (rc != -EINPROGRESS) {
			inst_maybe_gc(s, islot);
			return rc;
		}
	}
	if (rc == -EINPROGRESS) {
		/* the slots stay; mds_alloc_finish() resolves */
		if (lslot != IX_NO_SLOT)
			s->leases[lslot].parked++;
		inst_bytes(s, &s->insts[islot], 0, (int64_t)size);
		return rc;
	}
	if (rc < 0) {
		inst_maybe_gc(s, islot);
		return rc;
	}
	return alloc_track(s, &h, islot, lslot, out);
}

void mds_region_set_dev(struct mds *s, uint64_t region_id, const char *path,
			size_t len)
{
	struct mds_region *r = region_find(s, region_id, NULL);

	if (r)
		r->dev = mds_dev_intern(s, path, len);
}

int mds_alloc_finish(struct mds *s, struct mds_wait *w, struct mds_peer *peer,
		     struct rm_handle *out)
{
	uint32_t islot, lslot, waited;
	int rc;

	/* the pool is full: evict, and wait (again) for capacity */
	if (w->rc == -ENOMEM && peer && evict_on(s) &&
	    !never_fits(s, w->size)) {
		rc = reclaim_for(s, w);
		if (rc == -EINPROGRESS)
			return rc; /* still parked: nothing changes */
		(w)->rc = rc;
	}
	/* no longer parked (its owner was kept for this) */
	islot = wait_owner(s, w);
	if (islot != IX_NO_SLOT)
		inst_bytes(s, &s->insts[islot], 0,
			   -(int64_t)(s->insts[islot].pending < w->size
					      ? s->insts[islot].pending
					      : w->size));
	/* the request waited: it counts as a renewal of its lease */
	lslot = w->lease.len ? lease_find(s, w->lease) : IX_NO_SLOT;
	if (lslot != IX_NO_SLOT && s->leases[lslot].parked) {
		s->leases[lslot].parked--;
		s->leases[lslot].deadline = s->vnow + s->cfg.lease_ttl_ns;
	}
	if (w->rc != 0 || !peer) {
		if (islot != IX_NO_SLOT)
			inst_maybe_gc(s, islot);
		if (w->rc != 0)
			return w->rc;
		log_info("region %llu: its requester left before the "
			 "resource manager answered; freeing it",
			 (unsigned long long)w->h.region_id);
		queue_free(s, &w->h);
		flush_pending(s);
		return -ECANCELED;
	}
	/* by name again: the slots may have changed while we waited */
	waited = islot;
	rc = alloc_prepare(s, w->inst, w->lease, w->no_peer ? NULL : peer,
			   &islot, &lslot);
	if (rc < 0) {
		if (waited != IX_NO_SLOT)
			inst_maybe_gc(s, waited);
		log_info("region %llu: %s while the resource manager "
			 "answered; freeing it",
			 (unsigned long long)w->h.region_id,
			 rc == -ESTALE	? "the lease ended"
			 : rc == -EPERM ? "its lease is another instance's"
					: "out of memory");
		queue_free(s, &w->h);
		flush_pending(s);
		return rc;
	}
	rc = alloc_track(s, &w->h, islot, lslot, out);
	if (rc == 0) {
		if (w->path)
			mds_region_set_dev(s, w->h.region_id, w->path,
					   strlen(w->path));
		mds_inst_label(s, islot,
			       (struct mds_str){w->host, strlen(w->host)},
			       w->pid);
	}
	return rc;
}

bool mds_return(struct mds *s, struct mds_str inst, uint64_t region_id,
		struct mds_peer *peer, uint64_t ack)
{
	struct mds_region *r;
	struct mds_inst *in;
	uint32_t slot;

	r = region_find(s, region_id, &slot);
	if (!r)
		return false;
	in = &s->insts[r->owner];
	if (in->id_len != inst.len || memcmp(in->id, inst.ptr, inst.len) ||
	    (r->pg && !may_act(s, peer, r->owner, IX_NO_SLOT)))
		/* a client that holds pages of it gives them back */
		return pages_give_back(s, slot, inst, peer, ack);
	if (!claim(s, peer, r->owner, IX_NO_SLOT))
		return false;
	if (r->state == REG_LIVE && r->evicted && !r->refs)
		s->ctr.released++; /* given back after eviction emptied it */
	if (r->state == REG_LIVE)
		region_set(s, r, REG_RETURNED, 0);
	/* its client fenced it: the pages it held serve the pool (its
	 * client ignores grants of them from now on) */
	pages_owner_returned(s, slot);
	if (r->refs == 0 && !pages_lent(r))
		region_done(s, slot);
	return true;
}
