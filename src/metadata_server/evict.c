/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evict.c - a full pool: eviction, its notices to owners, and the
 * REQUEST_ALLOCs that wait for capacity (docs/metadata-server.md,
 * "Eviction")
 *
 * The policy (policy.h) orders the unpinned entries of tracked regions.
 * An evicted key leaves the index at once; its page is told to its live
 * owner as a numbered notice after the grace (a reader may still copy
 * it), which the owner acknowledges; a region eviction emptied is freed
 * after the grace when its owner is done, or asked back from its owner
 * when the pool needs it.  REQUEST_ALLOCs the pool has no room for wait
 * in a FIFO (cap_head) served from the tick; background reclaim keeps
 * the pool under its high watermark and room for stores while it is
 * full.
 */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "journal.h"
#include "log.h"
#include "pubidx.h"

/* a region emptied for instance @islot's request was freed: its waiting
 * request (if it still waits) is served first (cap_serve) */
void earmark(struct mds *s, uint32_t islot)
{
	struct mds_wait *w;

	if (islot >= s->ninst_slots || !s->insts[islot].id)
		return;
	for (w = s->cap_head; w; w = w->next)
		if (!w->cap_quota && wait_owner(s, w) == islot) {
			w->earmarked++;
			return;
		}
}

/* ---- eviction ---- */

#define EVICT_SKIP_MAX 1024	     /* unreclaimable entries passed per pass */
#define EVICT_TICK_REGIONS 4	     /* done owners' regions emptied per tick */
#define WANTED_NS 2000000000ull	     /* a region asked back counts that long */
#define EVICT_LOG_NS 1000000000ull   /* a burst ends after 1 s without one */
#define EVICT_FULL_NS 10000000000ull /* "full" lasts 10 s after the RM said */
#define NOTICE_RESEND_NS 2000000000ull	/* unacknowledged: sent again */
#define NOTICE_GIVEUP_NS 30000000000ull /* ... and given up on */

bool evict_on(const struct mds *s)
{
	return pol_evicts(&s->pol);
}

/*
 * Who stored @e, as far as its page goes: its page's holder where pages
 * are handed out (PG_NOBODY: a holder that is done), else its region's
 * owner.
 */
static uint32_t entry_holder(const struct mds *s, const struct ix_entry *e)
{
	const struct mds_region *r = &s->regions[e->slot];

	if (r->pg && e->off / r->pg->size < r->pg->n)
		return r->pg->holder[e->off / r->pg->size];
	return r->owner;
}

/*
 * Does evicting @e give its page to someone?  Yes when its region's owner
 * is done (the region is freed once empty) or takes notices (it reuses the
 * page).  A live owner that takes none (an upstream client) would never
 * reuse it: evicting would lose the key and free nothing.
 */
static bool reclaimable(const struct mds *s, const struct ix_entry *e)
{
	const struct mds_region *r = &s->regions[e->slot];
	uint32_t h = entry_holder(s, e);

	return r->state != REG_LIVE || h == PG_NOBODY || s->insts[h].notices;
}

/*
 * Is @r's owner here to take pages and regions back: it takes notices and
 * has a connection open, or sent a HEARTBEAT within HERE_NS (it may be
 * reconnecting)?  An owner whose process died keeps its lease (and its
 * regions LIVE) until the lease ends, but nobody would reuse a page of its
 * evicted now nor give one of its regions back: evicting its keys then
 * loses them and makes no room.
 */
#define HERE_NS 2000000000ull /* four of libmaru's heartbeat periods */

static bool inst_here(const struct mds *s, uint32_t islot)
{
	const struct mds_inst *in = &s->insts[islot];

	return in->notices && (in->nconns || s->vnow - in->hb_at < HERE_NS);
}

static bool owner_here(const struct mds *s, const struct mds_region *r)
{
	return inst_here(s, r->owner);
}

/* is whoever stored @e here (owner_here(), of its page's holder)? */
static bool holder_here(const struct mds *s, const struct ix_entry *e)
{
	uint32_t h = entry_holder(s, e);

	return h == PG_NOBODY || inst_here(s, h);
}

/* queue notice @kind of page (@rid, @off) for @in (NQ_EVICTED: due after
 * the grace, the others at once). Return: 0 or -ENOMEM */
int notice_push(struct mds *s, struct mds_inst *in, uint64_t rid, uint64_t off,
		uint64_t gen, enum notice_kind kind)
{
	if (in->nq_n == in->nq_cap) {
		uint32_t cap = in->nq_cap ? in->nq_cap * 2 : 64, i;
		struct mds_notice *v;

		if (cap < in->nq_cap)
			return -ENOMEM;
		v = malloc((size_t)cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		for (i = 0; i < in->nq_n; i++)
			v[i] = in->nq[(in->nq_head + i) % in->nq_cap];
		free(in->nq);
		in->nq = v;
		in->nq_cap = cap;
		in->nq_head = 0;
	}
	if (!in->nq_seq0)
		in->nq_seq0 = 1; /* numbers start at 1: an ack of 0 is none */
	in->nq[(in->nq_head + in->nq_n) % in->nq_cap] = (struct mds_notice){
		rid, off, gen,
		kind == NQ_EVICTED ? s->vnow + s->cfg.evict_grace_ns : s->vnow,
		(uint8_t)kind};
	in->nq_n++;
	return 0;
}

/*
 * Evict one entry: it leaves the index at once (lookups miss from now
 * on); its page is told to its live owner after the grace, or its region
 * is freed after the grace once empty and its owner done.
 */
static void evict_why(struct mds *s, struct ix_entry *e, int why)
{
	struct mds_region *r = &s->regions[e->slot];

	if (r->state != REG_LIVE)
		why = EV_OWNER_GONE;
	s->ctr.evictions[why]++;
	s->ctr.evicted_bytes[why] += e->len;
	s->burst_keys++;
	s->burst_bytes += e->len;
	s->burst_last = s->vnow;
	r->evicted = 1;
	r->quiet_at = s->vnow + s->cfg.evict_grace_ns;
	key_gone(s, e, why == EV_OWNER_GONE ? KG_OWNER_GONE : KG_EVICTED);
}

static void evict_entry(struct mds *s, struct ix_entry *e)
{
	evict_why(s, e, EV_LRU);
}

/*
 * Evict up to @bytes (and at most @max_keys keys), coldest first.  Keys
 * that would free nothing are passed over: an upstream client's go to the
 * warm end (they stay unevictable while it lives); those of an owner that
 * is away (owner_here()) keep their place, in a walk of at most
 * EVICT_WALK_MAX of them.  Return: bytes evicted.
 */
uint64_t evict_some(struct mds *s, uint64_t bytes, uint64_t max_keys)
{
	uint64_t got = 0, keys = 0;
	uint32_t skips = 0, away = 0;
	struct ix_entry *e, *next;

	for (e = pol_coldest(&s->pol); e && got < bytes && keys < max_keys;
	     e = next) {
		const struct mds_region *r = &s->regions[e->slot];

		next = pol_warmer(&s->pol, e);
		if (!reclaimable(s, e)) {
			if (++skips > EVICT_SKIP_MAX)
				break;
			pol_touch(&s->pol, e); /* passed over, for now */
			continue;
		}
		if (r->state == REG_LIVE && !holder_here(s, e)) {
			if (++away > EVICT_WALK_MAX)
				break;
			continue;
		}
		got += e->len ? e->len : 1;
		keys++;
		evict_entry(s, e);
	}
	if (keys)
		s->ctr.evict_bursts++;
	return got;
}

/*
 * A request waits for capacity.  The entries it may take without hurting
 * the cache are the coldest: the cold eighth of the LRU (at least 64
 * entries, at most EVICT_WALK_MAX).
 */
static uint32_t cold_window(const struct mds *s)
{
	uint64_t w = s->pol.n / 8;

	return (uint32_t)(w < 64	       ? 64
			  : w > EVICT_WALK_MAX ? EVICT_WALK_MAX
					       : w);
}

/* may evicting @e give its page back to the live instance @islot? */
static bool owned_by(const struct mds *s, const struct ix_entry *e,
		     uint32_t islot)
{
	const struct mds_region *r = &s->regions[e->slot];

	return r->owner == islot && r->state == REG_LIVE &&
	       s->insts[islot].notices;
}

/*
 * The requester's own keys in the cold window: evicted first, since their
 * pages are the requester's at once (after the grace), without moving a
 * region.  Return: bytes evicted (at most about @bytes).
 */
uint64_t evict_own(struct mds *s, uint32_t islot, uint64_t bytes, uint32_t walk,
		   int why)
{
	struct ix_entry *e, *next;
	uint64_t got = 0;

	if (islot == IX_NO_SLOT || !s->insts[islot].notices)
		return 0;
	for (e = pol_coldest(&s->pol); e && walk-- && got < bytes; e = next) {
		next = pol_warmer(&s->pol, e);
		if (owned_by(s, e, islot)) {
			got += e->len ? e->len : 1;
			evict_why(s, e, why);
		}
	}
	return got;
}

static uint64_t evict_own_cold(struct mds *s, uint32_t islot, uint64_t bytes)
{
	return evict_own(s, islot, bytes, cold_window(s), EV_LRU);
}

/*
 * No region is free and none can be given back: empty the coldest region,
 * by evicting its remaining entries (a walk of the LRU of at most
 * EVICT_WALK_MAX), so that its owner can be asked for it -- or, when its
 * owner is done (returned it, lease ended, declared dead), so that it is
 * freed after the grace with nobody to ask.  Coldest: of
 * the regions whose entries all lie in the walked part of the LRU (all of
 * it, up to EVICT_WALK_MAX entries), the one whose warmest entry is the
 * coldest -- emptying it evicts nothing warmer than that; when none lies
 * wholly in it, the one with the largest share there.
 * @for_islot: the instance whose request waits (IX_NO_SLOT: none): the
 *	region, once freed, goes to it first
 * @done_only: only a region whose owner is done
 * Return: keys evicted.
 */
static uint64_t empty_a_region(struct mds *s, uint32_t for_islot,
			       bool done_only)
{
	uint32_t i, pos = 0, best = IX_NO_SLOT;
	/* the whole order (bounded): the warmest entries rank regions too */
	uint32_t walk =
		s->pol.n < EVICT_WALK_MAX ? (uint32_t)s->pol.n : EVICT_WALK_MAX;
	struct ix_entry *e, *next;
	uint32_t *cold, *warm;
	uint64_t keys = 0;
	bool whole = false;

	cold = calloc(2 * (size_t)(s->nreg_slots ? s->nreg_slots : 1),
		      sizeof(*cold));
	if (!cold)
		return 0;
	warm = cold + (s->nreg_slots ? s->nreg_slots : 1);
	for (e = pol_coldest(&s->pol); e && walk--;
	     e = pol_warmer(&s->pol, e), pos++) {
		cold[e->slot]++;
		warm[e->slot] = pos;
	}
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		const struct mds_region *r = &s->regions[i];
		bool w = cold[i] == r->refs; /* wholly in the window */

		/* a live owner's (it is asked to give it back: so it must
		 * take notices and be here), or a region whose owner is done
		 * (returned, gone: freed once empty) */
		if (!r->refs || !cold[i] ||
		    (r->state == REG_LIVE &&
		     (done_only || !owner_here(s, r) || r->owner == for_islot)))
			continue;
		if (best == IX_NO_SLOT || (w && !whole) ||
		    (w && warm[i] < warm[best]) ||
		    (!w && !whole &&
		     (uint64_t)cold[i] * s->regions[best].refs >
			     (uint64_t)cold[best] * r->refs)) {
			best = i;
			whole = w;
		}
	}
	free(cold);
	if (best == IX_NO_SLOT)
		return 0;
	s->regions[best].wanted = 1;
	s->regions[best].wanted_for = for_islot + 1; /* (IX_NO_SLOT: 0) */
	s->regions[best].wanted_uid =
		for_islot != IX_NO_SLOT ? s->insts[for_islot].pins.uid : 0;
	s->any_wanted = true;
	log_dbg("region %llu: emptied for a waiting request",
		(unsigned long long)s->regions[best].h.region_id);
	walk = EVICT_WALK_MAX;
	for (e = pol_coldest(&s->pol); e && walk-- && s->regions[best].refs;
	     e = next) {
		next = pol_warmer(&s->pol, e);
		if (e->slot == best) {
			evict_why(s, e, EV_REGION);
			keys++;
		}
	}
	return keys;
}

uint64_t mds_evict(struct mds *s, uint64_t bytes)
{
	return evict_on(s) ? evict_some(s, bytes, UINT64_MAX) : 0;
}

/* is @q's region one emptied for another's request, still @in's? */
static bool notice_wanted(struct mds *s, const struct mds_inst *in,
			  const struct mds_notice *q)
{
	const struct mds_region *r = region_find(s, q->region_id, NULL);

	return r && r->wanted && r->state == REG_LIVE &&
	       &s->insts[r->owner] == in;
}

/* has @in notices to be sent now (due, or to be sent again) in a reply
 * that asks for no region back (mds_take_notices)? */
bool notices_due(struct mds *s, const struct mds_inst *in)
{
	uint32_t i = in->nq_sent;
	const struct mds_notice *q;

	if (i && s->vnow - in->sent_at >= NOTICE_RESEND_NS)
		i = 0;
	if (i >= in->nq_n)
		return false;
	q = &in->nq[(in->nq_head + i) % in->nq_cap];
	return q->due <= s->vnow && !notice_wanted(s, in, q);
}

bool mds_notices_pending(const struct mds *s, uint32_t islot)
{
	return islot != IX_NO_SLOT &&
	       s->insts[islot].nq_n > s->insts[islot].nq_sent;
}

static struct mds_notice *nq_at(struct mds_inst *in, uint32_t i)
{
	return &in->nq[(in->nq_head + i) % in->nq_cap];
}

uint32_t mds_take_notices(struct mds *s, uint32_t islot, uint64_t *out,
			  uint32_t max, uint64_t *first, uint64_t *last,
			  const uint64_t *rel, uint32_t nrel)
{
	struct mds_inst *in;
	uint32_t n = 0, i;

	*first = *last = 0;
	if (islot == IX_NO_SLOT)
		return 0;
	in = &s->insts[islot];
	if (in->nq_sent && s->vnow - in->sent_at >= NOTICE_RESEND_NS)
		in->nq_sent = 0; /* a reply was lost: from the oldest again */
	for (i = in->nq_sent; i < in->nq_n && n < max; i++) {
		const struct mds_notice *q = nq_at(in, i);
		const struct mds_region *r;

		if (q->due > s->vnow)
			break;
		r = region_find(s, q->region_id, NULL);
		if (r && r->wanted && r->owner == islot &&
		    r->state == REG_LIVE) {
			uint32_t j = 0;

			while (j < nrel && rel[j] != q->region_id)
				j++;
			if (j == nrel)
				break; /* with the request for it, later */
		}
		if (!*first)
			*first = in->nq_seq0 + i;
		*last = in->nq_seq0 + i;
		/* on the wire the kind is in the gen: 0 granted, the top bit
		 * set "forget the registration, not the page" */
		if (q->kind == NQ_FORGET) {
			out[3 * n + 2] = q->gen | MDS_GEN_FORGET;
		} else if (q->kind == NQ_GRANTED) {
			if (!pages_granted_to(s, islot, q->region_id, q->off))
				continue; /* taken back meanwhile */
			out[3 * n + 2] = 0;
		} else if (!r || r->owner != islot || r->state != REG_LIVE) {
			continue; /* freed, returned, gone: not its page now */
		} else {
			out[3 * n + 2] = q->gen;
		}
		out[3 * n] = q->region_id;
		out[3 * n + 1] = q->off;
		n++;
	}
	if (i > in->nq_sent) {
		if (!in->nq_sent)
			in->sent_at = s->vnow;
		in->nq_sent = i;
	}
	if (*last > in->nq_hi)
		in->nq_hi = *last;
	s->ctr.notices_sent += n;
	if (n)
		in->told++;
	return n;
}

/* drop @in's notices up to number @ack: the instance has them */
static void notices_ack(struct mds_inst *in, uint64_t ack)
{
	while (in->nq_n && in->nq_seq0 <= ack) {
		in->nq_head = (in->nq_head + 1) % in->nq_cap;
		in->nq_n--;
		in->nq_seq0++;
		if (in->nq_sent)
			in->nq_sent--;
	}
}

/* the notices queued for @in are numbered from @ack + 1 (and sent again) */
static void notices_renumber(struct mds_inst *in, uint64_t ack)
{
	in->nq_seq0 = ack + 1;
	if (in->nq_hi < ack)
		in->nq_hi = ack;
	in->nq_sent = 0;
}

void mds_ack_notices(struct mds *s, uint32_t islot, struct mds_str lease,
		     uint64_t ack)
{
	struct ix_key k = str_key(lease);
	struct mds_inst *in;
	uint64_t lh;

	if (islot == IX_NO_SLOT || ack == UINT64_MAX)
		return;
	in = &s->insts[islot];
	lh = lease.len ? ix_hash(&s->lease_map, &k) | 1 : 0; /* 0: none */
	/*
	 * Another lease: another process of the instance (restarted with a
	 * configured instance id: it has nothing, 0), or this one after it
	 * lost its lease (it keeps its number).  Its number is the truth:
	 * the last process's acknowledgements say nothing of what it has.
	 */
	if (lh && lh != in->ack_lease) {
		in->ack_lease = lh;
		in->ack_hi = ack;
		notices_renumber(in, ack);
		return;
	}
	if (ack < in->ack_hi)
		return; /* an older request's, overtaken (another connection) */
	in->ack_hi = ack;
	/*
	 * The client's number and ours disagree; its number says what it
	 * has, so we go on from it and send what is queued again under the
	 * new numbers (applying a notice twice does nothing):
	 *  - it acknowledges numbers this record never sent: an earlier run
	 *    of this server's (a restart: notices are not in the journal) or
	 *    an earlier record's of the instance.  Else every notice up to
	 *    its number is dropped unsent, and its pages are lost to it;
	 *  - it is behind our head: we gave up on it (no acknowledgement for
	 *    NOTICE_GIVEUP_NS) and dropped numbers it never had, and it
	 *    takes no number past a gap (0 too: it never had any).
	 */
	if (ack > in->nq_hi || (in->nq_seq0 && ack + 1 < in->nq_seq0)) {
		notices_renumber(in, ack);
		return;
	}
	notices_ack(in, ack);
}

/*
 * An instance that said it takes notices but acknowledges none for 30 s
 * (it stopped heartbeating, or never will) takes none from now on: its
 * queue goes, and its live keys are no longer evicted (as an upstream
 * client's).  It opts in again with its next HEARTBEAT.
 */
static void notices_giveup(struct mds *s)
{
	uint32_t i;

	for (i = 0; i < s->ninst_slots; i++) {
		struct mds_inst *in = &s->insts[i];

		if (!in->id || !in->nq_n ||
		    nq_at(in, 0)->due + NOTICE_GIVEUP_NS > s->vnow)
			continue;
		log_warn(
			"instance %.*s: no eviction notice acknowledged for "
			"%llu s: none sent to it any more",
			(int)in->id_len, in->id,
			(unsigned long long)(NOTICE_GIVEUP_NS / 1000000000ull));
		in->notices = false;
		notices_ack(in, UINT64_MAX);
	}
}

/* @pm per mille of the pool, exactly */
static uint64_t pool_pm(const struct mds *s, uint32_t pm)
{
	return s->pool_total / 1000 * pm + s->pool_total % 1000 * pm / 1000;
}

static bool over_high(const struct mds *s)
{
	return s->pool_total && s->cfg.evict_high_pm &&
	       s->kv_bytes > pool_pm(s, s->cfg.evict_high_pm);
}

/* the RM said "no room" lately: regions are not to be had */
bool pool_full(const struct mds *s)
{
	return s->full_at && s->vnow - s->full_at < EVICT_FULL_NS;
}

bool mds_under_pressure(const struct mds *s)
{
	return evict_on(s) && (s->ncap || over_high(s) || pool_full(s));
}

/* does a REQUEST_ALLOC of instance @islot wait for capacity? */
static bool inst_waits(const struct mds *s, uint32_t islot)
{
	const struct mds_wait *w;

	for (w = s->cap_head; w; w = w->next)
		if (wait_owner(s, w) == islot)
			return true;
	return false;
}

uint32_t mds_release_wanted(struct mds *s, uint32_t islot, uint64_t *out,
			    uint32_t max, bool only_wanted)
{
	uint32_t i, n;
	bool waits, wanted;

	/* pages of regions whose owner is done, or that are wanted back:
	 * under pressure or not */
	n = pages_release_wanted(s, islot, out, max);
	if (islot == IX_NO_SLOT || !mds_under_pressure(s))
		return n;
	/*
	 * Regions eviction emptied, once quiet (a reader of an evicted key
	 * may still copy it from the owner's mapping, which goes with the
	 * region) -- not from one that waits for room itself (it would ask
	 * again).  A region emptied for another instance's waiting request:
	 * also from an owner that waits (a busy owner does, now and then, all
	 * the time), and whatever the owner stored there since (it fills
	 * what is free of it); what it stored stays readable after the
	 * return, the server's until evicted.
	 */
	waits = only_wanted || inst_waits(s, islot);
	wanted = waiting_bytes(s) != 0;
	for (i = s->reg_head; i != IX_NO_SLOT && n < max;
	     i = s->regions[i].next) {
		const struct mds_region *r = &s->regions[i];

		if (r->owner != islot || r->state != REG_LIVE ||
		    r->quiet_at > s->vnow)
			continue;
		/* (a region whose pages are granted is not asked back
		 * because eviction emptied it: its pages went to the pool;
		 * nor are the pages others hold of it when its owner is
		 * done: it is the pool's, until nobody holds any) */
		if ((r->wanted && wanted) ||
		    (!waits && r->evicted && !r->refs && !r->pg))
			out[n++] = r->h.region_id;
	}
	return n;
}

/*
 * Bytes of regions on their way to the RM: emptied by eviction, and
 * either to be asked back from an owner that is here, or (owner done)
 * to be freed after the grace.
 */
static uint64_t coming_bytes(const struct mds *s)
{
	uint64_t n = 0;
	uint32_t i;

	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		const struct mds_region *r = &s->regions[i];

		/* (an owner may hold on to one: a page of it held by the
		 * application; after WANTED_NS it counts no more) */
		if (r->state == REG_LIVE
			    ? r->evicted && !r->refs && !r->pg &&
				      owner_here(s, r) &&
				      r->quiet_at + WANTED_NS > s->vnow
			    : r->deferred)
			n += r->h.length;
	}
	return n;
}

/* does @islot take pages one by one (pages.c) rather than regions? */
static bool page_mode(const struct mds *s, uint32_t islot)
{
	return islot != IX_NO_SLOT && s->insts[islot].page_size &&
	       s->insts[islot].notices;
}

/* bytes the REQUEST_ALLOCs waiting for a region ask for (not those at
 * their quota, nor those with pages of their own coming: those are
 * answered with the pages) */
uint64_t waiting_bytes(struct mds *s)
{
	const struct mds_wait *w;
	uint64_t n = 0;

	for (w = s->cap_head; w; w = w->next)
		if (!w->cap_quota && !page_mode(s, wait_owner(s, w)) &&
		    !mds_notices_pending(s, wait_owner(s, w)))
			n += w->size;
	return n;
}

/* ---- REQUEST_ALLOCs waiting for capacity ---- */

void cap_append(struct mds *s, struct mds_wait *w)
{
	w->next = NULL;
	if (s->cap_tail)
		s->cap_tail->next = w;
	else
		s->cap_head = w;
	s->cap_tail = w;
	s->ncap++;
}

static bool cap_unlink(struct mds *s, struct mds_wait *w)
{
	struct mds_wait **pp, *prev = NULL;

	for (pp = &s->cap_head; *pp; prev = *pp, pp = &(*pp)->next) {
		if (*pp != w)
			continue;
		*pp = w->next;
		if (s->cap_tail == w)
			s->cap_tail = prev;
		w->next = NULL;
		s->ncap--;
		return true;
	}
	return false;
}

bool mds_cap_forget(struct mds *s, struct mds_wait *w)
{
	if (!cap_unlink(s, w))
		return false;
	w->rc = -ECANCELED;
	w->done(w);
	return true;
}

/*
 * Pages of @w's instance are free for it: due now, or told since @w began
 * waiting (its heartbeat may have taken them while its writer waits here).
 */
static bool own_pages(struct mds *s, const struct mds_wait *w, uint32_t islot)
{
	return islot != IX_NO_SLOT && (notices_due(s, &s->insts[islot]) ||
				       s->insts[islot].told != w->cap_told);
}

/*
 * reclaim_for() for a client that takes pages one by one: pages from the
 * pool, else the coldest keys of anybody evicted -- their pages go to the
 * pool after the grace (cap_serve grants them), or, in regions whose
 * owner is done, the regions go to the RM (cap_serve asks it for one).
 */
static int reclaim_pages(struct mds *s, struct mds_wait *w, uint32_t islot)
{
	uint32_t size = s->insts[islot].page_size;
	uint64_t want = pages_want(s, islot, w->size), got = 0;

	if (pages_grant(s, islot, w->size))
		return MDS_RC_RECLAIMED;
	if (!w->cap_deadline) {
		w->cap_deadline = s->vnow + s->cfg.evict_wait_ns;
		w->cap_told = s->insts[islot].told;
		s->ctr.cap_waits++;
		/* (pages, not bytes: a page holds one key, however
		 * short its value) */
		if (pages_pooled(s, size) * size < want)
			got = evict_some(s, UINT64_MAX, want / size);
	}
	if (s->vnow >= w->cap_deadline ||
	    (!got && !pages_pooled(s, size) && !coming_bytes(s) &&
	     !mds_notices_pending(s, islot))) {
		s->ctr.cap_fails++;
		return -ENOSPC;
	}
	cap_append(s, w);
	return -EINPROGRESS;
}

/*
 * The RM has no room for @w (a REQUEST_ALLOC by a live requester): evict,
 * then answer with the requester's own reclaimed pages, or wait for a
 * region to be freed (by the grace, or an owner asked to give one back).
 * Return: MDS_RC_RECLAIMED, -EINPROGRESS (parked here: @w is answered
 * through its done()), or -ENOSPC (nothing to wait for).
 */
int reclaim_for(struct mds *s, struct mds_wait *w)
{
	uint32_t islot = wait_owner(s, w);
	uint64_t got = 0;

	s->full_at = s->vnow;
	if (page_mode(s, islot))
		return reclaim_pages(s, w, islot);
	if (!w->cap_deadline) {
		w->cap_deadline = s->vnow + s->cfg.evict_wait_ns;
		w->cap_told = islot != IX_NO_SLOT ? s->insts[islot].told : 0;
		s->ctr.cap_waits++;
		/* its own cold pages first; else a cold region for it; else
		 * plain LRU (it may empty one later) */
		got = evict_own_cold(s, islot, w->size);
		if (!got && coming_bytes(s) < waiting_bytes(s) + w->size)
			got = empty_a_region(s, islot, false);
		if (!got)
			got = evict_some(s, w->size, EVICT_TICK_KEYS);
	} else if (!own_pages(s, w, islot) &&
		   coming_bytes(s) < waiting_bytes(s) + w->size) {
		/* again (the region it waited for went to another request):
		 * another region, while the wait lasts */
		got = empty_a_region(s, islot, false);
	}
	if (own_pages(s, w, islot))
		return MDS_RC_RECLAIMED;
	/* nothing to wait for: no eviction now, no region to be freed by
	 * a grace or given back, no page of the requester's own pending */
	if (s->vnow >= w->cap_deadline ||
	    (!got && !coming_bytes(s) && !mds_notices_pending(s, islot))) {
		s->ctr.cap_fails++;
		return -ENOSPC;
	}
	cap_append(s, w);
	return -EINPROGRESS;
}

/* does @islot hold a region emptied for another's request, to be asked
 * back now (mds_release_wanted), that no waiter of its was answered for
 * yet?  (Once: a region it cannot give back -- a page of it held by the
 * application -- must not fail its every request.)  Marks them. */
static bool holds_wanted(struct mds *s, uint32_t islot)
{
	bool any = false;
	uint32_t i;

	if (islot == IX_NO_SLOT || !s->any_wanted)
		return false;
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		struct mds_region *r = &s->regions[i];

		if (r->owner == islot && r->state == REG_LIVE && r->wanted &&
		    !r->kicked && r->quiet_at <= s->vnow) {
			r->kicked = 1;
			any = true;
		}
	}
	return any;
}

/* the waiters a freed region was emptied for to the head, in order */
static void cap_earmarked_first(struct mds *s)
{
	struct mds_wait *w, *next, *head = NULL, *last = NULL;
	uint32_t n = 0;

	for (w = s->cap_head; w; w = next) {
		next = w->next;
		if (!w->earmarked)
			continue;
		cap_unlink(s, w);
		if (last)
			last->next = w;
		else
			head = w;
		last = w;
		n++;
	}
	if (!head)
		return;
	last->next = s->cap_head;
	if (!s->cap_head)
		s->cap_tail = last;
	s->cap_head = head;
	s->ncap += n;
}

/* answer the waiters that can be: own pages due, a freed region, timeout */
static void cap_serve(struct mds *s)
{
	struct mds_wait *w, *next, *ready = NULL, **tail = &ready;
	bool freed = s->cap_freed;
	struct rm_handle h;
	uint32_t islot;
	int rc;

	s->cap_freed = false;
	/* capacity freed for some waiters' requests goes to them first:
	 * they go to the head of the queue */
	if (freed)
		cap_earmarked_first(s);
	/* as many regions on their way as are waited for (one emptied may
	 * have been refilled by its owner meanwhile), each for the first
	 * request that needs one: not at its quota, no pages of its own
	 * coming */
	for (w = s->cap_head; !freed && w; w = w->next) {
		islot = wait_owner(s, w);
		if (w->cap_quota || page_mode(s, islot) ||
		    mds_notices_pending(s, islot))
			continue;
		if (coming_bytes(s) < waiting_bytes(s))
			empty_a_region(s, islot, false);
		break;
	}
	for (w = s->cap_head; w; w = next) {
		next = w->next;
		islot = wait_owner(s, w);
		if (page_mode(s, islot) && !w->cap_quota &&
		    pages_grant(s, islot, w->size)) {
			w->rc = MDS_RC_RECLAIMED; /* pages of the pool */
		} else if ((!page_mode(s, islot) && own_pages(s, w, islot)) ||
			   (!w->cap_quota && holds_wanted(s, islot))) {
			/* (one that holds a region another request waits
			 * for: answered now, with the request for it, which
			 * its writer -- waiting here -- applies) */
			w->rc = MDS_RC_RECLAIMED;
		} else if (w->cap_quota) {
			if (w->cap_deadline > s->vnow)
				continue; /* only its own pages will do */
			s->ctr.cap_fails++;
			w->rc = -EDQUOT;
		} else if (freed &&
			   (w->earmarked || !mds_notices_pending(s, islot))) {
			/* (one whose own pages come waits for them: the
			 * region goes to one that has none coming) */
			cap_unlink(s, w);
			rc = s->rm->alloc(s->rm_arg, w->rm_size, w, &h);
			if (rc == -EINPROGRESS)
				continue; /* the RM session has it again */
			w->rc = rc;
			if (rc == 0)
				w->h = h;
			*tail = w;
			tail = &w->next;
			continue;
		} else if (w->cap_deadline <= s->vnow) {
			s->ctr.cap_fails++;
			w->rc = -ENOSPC;
		} else {
			continue;
		}
		cap_unlink(s, w);
		*tail = w;
		tail = &w->next;
	}
	*tail = NULL;
	/* answered outside the walk: done() may park them again */
	for (w = ready; w; w = next) {
		next = w->next;
		w->next = NULL;
		w->done(w);
	}
}

/* free bytes in the LIVE regions of owners that are here: what they can
 * store without a new region (pages hold one value each: kv_length is
 * what of a page is counted used) */
static uint64_t room_here(const struct mds *s, bool *any)
{
	uint64_t n = 0;
	uint32_t i;

	*any = false;
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		const struct mds_region *r = &s->regions[i];

		if (r->state != REG_LIVE || !owner_here(s, r))
			continue;
		*any = true;
		if (r->h.length > r->used)
			n += r->h.length - r->used;
	}
	return n;
}

void evict_tick(struct mds *s)
{
	uint64_t total, avail, low;
	uint32_t i;

	if (!evict_on(s))
		return;
	if (!s->pool_at || s->vnow - s->pool_at >= 1000000000ull) {
		s->pool_at = s->vnow;
		s->reg_rate = (s->reg_rate + s->reg_bytes) / 2;
		s->reg_bytes = 0;
		pages_rate_tick(s);
		notices_giveup(s);
		if (s->cfg.evict_high_pm &&
		    s->rm->pool_usage(s->rm_arg, s->cfg.dax_only, &total,
				      &avail, NULL) == 0 &&
		    total)
			s->pool_total = total;
	}
	/*
	 * Ahead of the stores: above the high watermark of the pool, down to
	 * the low one; while the pool is full (no region to be had), down to
	 * leave the regions of the owners that are here the free pages that
	 * stores take within twice the grace (and the tick), at the rate
	 * they come, so that owners find pages (told after the grace)
	 * instead of waiting in REQUEST_ALLOC -- and no more (the keys are
	 * the cache), but never below the low fraction of the regions.  Room
	 * in the regions of an owner that is away or done counts for nobody:
	 * the latter's come back whole, as eviction empties them.
	 */
	low = UINT64_MAX;
	if (over_high(s)) {
		low = pool_pm(s, s->cfg.evict_low_pm);
	} else if (pool_full(s) && s->cfg.evict_low_pm) {
		uint64_t need =
			s->reg_rate / 1000 *
			((s->cfg.evict_grace_ns + 100000000ull) / 500000);
		uint64_t floor =
			s->total_allocated / 1000 * s->cfg.evict_low_pm;
		bool here;
		uint64_t room = room_here(s, &here);
		/* what the RM has free, as far as we know (our regions) */
		uint64_t rm_free = s->pool_total > s->total_allocated
					   ? s->pool_total - s->total_allocated
					   : 0;

		if (room < need && s->kv_bytes > floor)
			low = need - room < s->kv_bytes - floor
				      ? s->kv_bytes - (need - room)
				      : floor;
		/* and, for owners here that will want a region, whole
		 * regions of owners that are done (their keys one by one
		 * make room for nobody): a few a tick, while what the RM has
		 * free and what is on its way fall short (a pool of unknown
		 * size: only for requests that wait) */
		for (i = 0; here && s->pool_total && room < need &&
			    i < EVICT_TICK_REGIONS &&
			    coming_bytes(s) + rm_free < need - room;
		     i++)
			if (!empty_a_region(s, IX_NO_SLOT, true))
				break;
	}
	if (s->kv_bytes > low)
		evict_some(s, s->kv_bytes - low, EVICT_TICK_KEYS);
	/* the pool of free pages ahead of the grants (pages.c) */
	if (pool_full(s) && s->npgpools) {
		uint64_t n = pages_reserve_need(s);

		if (n)
			evict_some(s, UINT64_MAX,
				   n < EVICT_TICK_KEYS ? n : EVICT_TICK_KEYS);
	}
	if (s->ncap)
		cap_serve(s);
	if (s->any_wanted && !waiting_bytes(s)) {
		/* nobody waits for a region any more: none is wanted */
		for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
			if (s->regions[i].wanted && s->regions[i].pg) {
				s->regions[i].wanted = 0;
				pages_repool(s, i); /* its free pages */
			}
			s->regions[i].wanted = 0;
			s->regions[i].wanted_for = 0;
			s->regions[i].kicked = 0;
		}
		s->any_wanted = false;
	}
	if (s->burst_keys && s->vnow - s->burst_last >= EVICT_LOG_NS) {
		s->ctr.evict_burst_lines++;
		log_info("evicted %llu key(s), %llu bytes (pinned: %llu bytes, "
			 "keys left: %llu)",
			 (unsigned long long)s->burst_keys,
			 (unsigned long long)s->burst_bytes,
			 (unsigned long long)s->pinned_bytes,
			 (unsigned long long)s->kv.count);
		s->burst_keys = s->burst_bytes = 0;
	}
}

/* regions emptied by eviction whose owner is done: free them once quiet */
void deferred_tick(struct mds *s)
{
	uint32_t i, nx;

	for (i = s->reg_head; s->ndeferred && i != IX_NO_SLOT; i = nx) {
		struct mds_region *r = &s->regions[i];

		nx = r->next;
		if (r->deferred && !r->refs && r->state != REG_LIVE &&
		    !pages_lent(r) && r->quiet_at <= s->vnow)
			region_release(s, i);
	}
}
