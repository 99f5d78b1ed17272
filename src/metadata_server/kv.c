/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kv.c - the KV semantics of maru-server: REGISTER (first writer wins),
 * LOOKUP, EXISTS, DELETE, PIN, UNPIN
 *
 * A key lives in the index (index.h) with its region slot, location and
 * registration number.  Only keys of tracked regions count in kv_bytes
 * and enter the eviction order; a key of a region id the server does not
 * track never resolves (as upstream).
 *
 * Pins: mds.pin_map holds one record per (KV entry, holder) with the
 * holder's count (ix_entry.off) and its position in the holder's array
 * (ix_entry.len); ix_entry.pins of the KV entry is the sum over holders.
 * Of a record's count, ix_entry.pins of the record are soft pins (PIN_KV
 * with "ttl_ms"), all dropped at the record's deadline (ix_entry.gen,
 * vclock): mds_tick() calls pins_expire() when the earliest is due.  Soft
 * pins are not journaled (log_pin() writes the others): a restart ends
 * them, as it ends a connection's pins.
 * A pinned entry is never deleted or evicted, so a record's entry address
 * stays valid.  A holder's pins are released with it: a connection's when
 * it closes, an owner's when its lease ends or its last connection closes
 * while it has no lease.
 */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "journal.h"
#include "mds_proto.h"
#include "pubidx.h"
#include "util.h"

#define HOLDER_MAX_PINS (1u << 20) /* distinct keys one holder may pin */

/* ---- pins ---- */

struct pin_key {
	uint64_t entry; /* address of the KV entry */
	uint64_t uid;	/* the holder's */
};

static struct ix_key pin_key(const struct ix_entry *e,
			     const struct mds_pins *hp, struct pin_key *b)
{
	struct ix_key k = {(const uint8_t *)b, sizeof(*b), KEY_BIN};

	b->entry = (uint64_t)(uintptr_t)e;
	b->uid = hp->uid;
	return k;
}

struct ix_entry *pin_entry(const struct ix_entry *rec)
{
	struct pin_key b;

	memcpy(&b, rec->key, sizeof(b));
	return (struct ix_entry *)(uintptr_t)b.entry;
}

struct ix_entry *pin_find(struct mds *s, const struct ix_entry *e,
			  const struct mds_pins *hp)
{
	struct pin_key b;
	struct ix_key k = pin_key(e, hp, &b);

	return ix_find(&s->pin_map, &k, ix_hash(&s->pin_map, &k));
}

/* the pins of record @rec that outlive a restart (journaled) */
static uint64_t hard_pins(const struct ix_entry *rec)
{
	return rec->off - rec->pins;
}

/* a soft pin's deadline: the earliest is the one mds_tick() waits for */
static void soft_deadline(struct mds *s, struct mds_pins *hp,
			  struct ix_entry *rec, uint64_t ttl_ms)
{
	uint64_t at = s->vnow + ttl_ms * 1000000ull;

	if (!rec->pins++) {
		s->soft_recs++;
		hp->nsoft++;
		rec->gen = at;
	} else if (at > rec->gen) {
		rec->gen = at;
	}
	if (at < s->soft_next)
		s->soft_next = at;
}

/*
 * one more pin of @e by @hp (@ttl_ms > 0: a soft one)
 * Return: 0, -ENOSPC (holder's cap), -ENOMEM
 */
int pin_add(struct mds *s, struct ix_entry *e, struct mds_pins *hp,
	    uint64_t ttl_ms)
{
	struct pin_key b;
	struct ix_key k = pin_key(e, hp, &b);
	struct ix_entry *rec;
	size_t cap = hp->cap;
	int rc;

	if (e->pins == UINT32_MAX)
		return 0;      /* saturated: counted no further */
	pol_touch(&s->pol, e); /* a use (a no-op once pinned) */
	rec = ix_find(&s->pin_map, &k, ix_hash(&s->pin_map, &k));
	if (!rec) {
		if (hp->n >= HOLDER_MAX_PINS)
			return -ENOSPC;
		if (array_grow(&hp->rec, &cap, hp->n, sizeof(*hp->rec), 8) < 0)
			return -ENOMEM;
		hp->cap = (uint32_t)cap;
		rc = ix_insert(&s->pin_map, &k, ix_hash(&s->pin_map, &k), &rec);
		if (rc < 0)
			return rc;
		if (rc == 1) {
			rec->len = hp->n;
			rec->pins = 0;
			rec->gen = 0;
			hp->rec[hp->n++] = rec;
			hp->bytes += e->len;
		}
	}
	rec->off++;
	if (!e->pins++) {
		/* pins are absolute: out of the eviction order */
		pol_remove(&s->pol, e);
		s->pinned_bytes += e->len;
	}
	if (ttl_ms)
		soft_deadline(s, hp, rec, ttl_ms);
	else
		log_pin(s, hp, e, hard_pins(rec));
	return 0;
}

/* @e lost its last pin: evictable again, and that was a use */
void unpinned(struct mds *s, struct ix_entry *e)
{
	s->pinned_bytes -= e->len;
	if (e->slot != IX_NO_SLOT)
		pol_add(&s->pol, e);
}

/*
 * drop @n pins (a soft one first) of record @rec of holder @hp; every
 * one with @all
 */
static void pin_drop(struct mds *s, struct mds_pins *hp, struct ix_entry *rec,
		     uint64_t n, bool all)
{
	struct ix_entry *e = pin_entry(rec);
	uint64_t hard = hard_pins(rec), soft = rec->pins;
	uint32_t i = (uint32_t)rec->len;

	if (all || n > rec->off)
		n = rec->off;
	if (n < rec->off) {
		/* soft pins go first; the journal counts the others */
		rec->off -= n;
		rec->pins = (uint32_t)(soft > n ? soft - n : 0);
		if (soft && !rec->pins) {
			s->soft_recs--;
			hp->nsoft--;
		}
		e->pins -= (uint32_t)n;
		if (!e->pins)
			unpinned(s, e);
		if (hard_pins(rec) != hard)
			log_pin(s, hp, e, hard_pins(rec));
		return;
	}
	if (hard)
		log_pin(s, hp, e, 0);
	if (soft) {
		s->soft_recs--;
		hp->nsoft--;
	}
	e->pins -= (uint32_t)rec->off;
	if (!e->pins)
		unpinned(s, e);
	hp->bytes -= e->len;
	hp->rec[i] = hp->rec[--hp->n];
	hp->rec[i]->len = i;
	ix_delete(&s->pin_map, rec);
}

/* drop one pin (@all: every pin) of record @rec of holder @hp */
void pin_put(struct mds *s, struct mds_pins *hp, struct ix_entry *rec, bool all)
{
	pin_drop(s, hp, rec, 1, all);
}

void pins_release(struct mds *s, struct mds_pins *hp)
{
	while (hp->n)
		pin_put(s, hp, hp->rec[hp->n - 1], true);
}

/* the soft pins of @hp past their deadline go; the next deadline kept */
static void pins_expire_holder(struct mds *s, struct mds_pins *hp,
			       uint64_t *next)
{
	struct ix_entry *rec;
	uint32_t i;

	/* backwards: pin_drop() moves the last record into a freed place */
	for (i = hp->n; hp->nsoft && i-- > 0;) {
		rec = hp->rec[i];
		if (!rec->pins)
			continue;
		if (rec->gen <= s->vnow)
			pin_drop(s, hp, rec, rec->pins, false);
		else if (rec->gen < *next)
			*next = rec->gen;
	}
}

/*
 * Every soft pin past its deadline goes.  A walk over the pin records of
 * the holders that have soft ones, when the earliest deadline is due: at
 * most once per tick (SERVER_TICK_MS), so a soft pin ends up to a tick
 * after its deadline, and the cost is bounded by the pins held (at most
 * HOLDER_MAX_PINS per holder) per tick -- nothing while soft pins come
 * and go before their deadlines, as pins around a read do.
 */
void pins_expire(struct mds *s)
{
	uint64_t next = UINT64_MAX;
	uint32_t i;
	int fd;

	if (!s->soft_recs || s->soft_next > s->vnow)
		return;
	for (i = 0; i < s->ninst_slots; i++)
		if (s->insts[i].id)
			pins_expire_holder(s, &s->insts[i].pins, &next);
	for (fd = 0; fd < s->nconn_slots; fd++)
		pins_expire_holder(s, &s->conns[fd].pins, &next);
	pins_expire_holder(s, &s->anon_pins, &next);
	s->soft_next = s->soft_recs ? next : UINT64_MAX;
}

/* ---- KV ---- */

int mds_register(struct mds *s, const struct mds_reg *reg,
		 struct mds_peer *peer)
{
	struct ix_key k = mds_key_ix(&reg->key);
	uint64_t h = ix_hash(&s->kv, &k);
	struct mds_region *r;
	struct ix_entry *e;
	uint32_t slot = IX_NO_SLOT, who = IX_NO_SLOT;
	bool too_long = s->cfg.max_key && reg->key.len > s->cfg.max_key;
	int rc;

	e = ix_find(&s->kv, &k, h);
	if (e) {
		pol_touch(&s->pol, e); /* a use */
		return 0;	       /* first writer wins */
	}
	if (too_long)
		return -E2BIG; /* --max-key-bytes */
	r = region_find(s, reg->region_id, &slot);
	/* a location must lie inside its region */
	if (r && (reg->kv_offset > r->h.length ||
		  reg->kv_length > r->h.length - reg->kv_offset))
		return -ERANGE;
	/* (where pages are handed out, the page's holder decides: its owner
	 * held none from the end of its lease) */
	if (r && !r->pg && r->state == REG_GONE && r->gone_why == GONE_LEASE)
		return -EPERM;
	/* only the owner writes into its region; into a page of a region
	 * whose pages are handed out, only the page's holder */
	if (r && r->pg) {
		rc = pages_check(s, r, peer, reg->kv_offset, reg->kv_length,
				 &who);
		if (rc < 0)
			return rc;
	} else if (r) {
		if (!claim(s, peer, r->owner, IX_NO_SLOT))
			return -EPERM;
		who = r->owner;
	}
	if (r && r->state == REG_GONE && who == r->owner)
		revive(s, r->owner); /* a write is proof of life */
	rc = ix_insert(&s->kv, &k, h, &e);
	if (rc <= 0)
		return rc;
	retire_forget(s, &k, h); /* the new writer's now */
	e->off = reg->kv_offset;
	e->len = reg->kv_length;
	e->gen = ++s->gen;
	if (r) {
		/* only bytes in a tracked region count: a key of an unknown
		 * region never resolves, and its length is unchecked */
		s->kv_bytes += reg->kv_length;
		s->reg_bytes += reg->kv_length;
		e->slot = slot;
		r->refs++;
		r->used += reg->kv_length;
		if (r->pg)
			pages_ref(r, reg->kv_offset);
		pol_add(&s->pol, e); /* only these free anything if evicted */
		/* (GET_USAGE "stores": the writer's instance id) */
		s->labels[s->insts[who].label].stores++;
		s->labels[s->insts[who].label].stored_bytes += reg->kv_length;
	}
	log_key(s, e);
	pub_put(s->pub, e, r ? r->h.region_id : 0);
	ev_stored(s->ev, ix_entry_tag(e), e->key, ix_entry_klen(e),
		  r ? s->insts[who].id : NULL, r ? s->insts[who].id_len : 0,
		  reg->region_id, e->off, e->len);
	return 1;
}

const struct ix_entry *mds_lookup(struct mds *s, const struct mds_key *k,
				  const struct mds_region **reg)
{
	struct ix_key x = mds_key_ix(k);
	uint64_t h = ix_hash(&s->kv, &x);
	struct ix_entry *e = ix_find(&s->kv, &x, h);

	if (!e)
		e = mds_rescue(s, &x, h); /* (at the warm end) */
	else if (e->slot != IX_NO_SLOT)
		pol_touch(&s->pol, e);
	if (!e || e->slot == IX_NO_SLOT)
		return NULL;
	*reg = &s->regions[e->slot];
	return e;
}

const struct ix_entry *mds_exists(struct mds *s, const struct mds_key *k)
{
	struct ix_key x = mds_key_ix(k);
	uint64_t h = ix_hash(&s->kv, &x);
	struct ix_entry *e = ix_find(&s->kv, &x, h);

	if (e)
		pol_touch(&s->pol, e);
	else
		e = mds_rescue(s, &x, h);
	return e;
}

uint64_t mds_delete(struct mds *s, const struct mds_key *k,
		    struct mds_peer *peer)
{
	struct ix_key x = mds_key_ix(k);
	uint64_t h = ix_hash(&s->kv, &x);
	struct ix_entry *e = ix_find(&s->kv, &x, h);
	const struct mds_region *r;
	uint64_t gen;
	bool own;

	if (!e)
		retire_forget(s, &x, h); /* deleted: never back */
	if (!e || e->pins)
		return 0;
	r = e->slot != IX_NO_SLOT ? &s->regions[e->slot] : NULL;
	/* does the page's holder delete it (it keeps the page)? */
	own = r && r->pg && pages_held_by(s, r, e->off, peer);
	/* --owner-delete: a key in a live region is its owner's to delete
	 * (its page holder's, where pages are handed out) */
	if (r && s->cfg.owner_delete && r->state == REG_LIVE &&
	    (r->pg ? !own : !may_act(s, peer, r->owner, IX_NO_SLOT)))
		return 0;
	/* (its owner is told too: another client may have deleted it; its
	 * own delete freed the page, and the notice then does nothing) */
	gen = e->gen;
	key_gone(s, e, own ? KG_DELETED_OWN : KG_DELETED);
	/* (where pages are granted and the deleter does not hold the page:
	 * the page is not its own to reuse) */
	return r && r->pg && !own ? gen | MDS_GEN_FORGET : gen;
}

/* who a pin by @peer belongs to; NULL: an untracked connection */
static struct mds_pins *pin_holder(struct mds *s, struct mds_peer *peer)
{
	struct mds_conn *c;
	uint32_t i;

	if (!peer)
		return &s->anon_pins;
	c = peer_conn(s, peer);
	if (!c)
		return NULL;
	/* the first owner the connection belongs to -- not one whose lease
	 * ended (its pins went with it; the client takes a new lease) */
	for (i = 0; i < c->ninst; i++) {
		const struct mds_inst *in = &s->insts[c->inst[i]];

		if (!in->lease_id || in->nleases)
			return &s->insts[c->inst[i]].pins;
	}
	return &c->pins;
}

bool mds_pin(struct mds *s, const struct mds_key *k, struct mds_peer *peer,
	     uint64_t ttl_ms)
{
	struct ix_key x = mds_key_ix(k);
	struct ix_entry *e = ix_find(&s->kv, &x, ix_hash(&s->kv, &x));
	struct mds_pins *hp;

	if (!e)
		return false;
	hp = pin_holder(s, peer);
	return hp && pin_add(s, e, hp, ttl_ms) == 0;
}

bool mds_unpin(struct mds *s, const struct mds_key *k, struct mds_peer *peer)
{
	struct ix_key x = mds_key_ix(k);
	struct ix_entry *e = ix_find(&s->kv, &x, ix_hash(&s->kv, &x));
	struct mds_pins *hp;
	struct ix_entry *rec;
	struct mds_conn *c;
	uint32_t i;

	if (!e || !e->pins)
		return false;
	if (!peer) {
		hp = &s->anon_pins;
		rec = pin_find(s, e, hp);
		goto out;
	}
	c = peer_conn(s, peer);
	if (!c)
		return false;
	/* the connection's own, or any instance's claimed on it */
	hp = &c->pins;
	rec = pin_find(s, e, hp);
	for (i = 0; !rec && i < c->ninst; i++) {
		hp = &s->insts[c->inst[i]].pins;
		rec = pin_find(s, e, hp);
	}
out:
	if (!rec)
		return false;
	pin_put(s, hp, rec, false);
	return true;
}

uint64_t mds_entry_region_id(void *arg, const struct ix_entry *e)
{
	const struct mds *s = arg;

	return e->slot == IX_NO_SLOT ? 0 : s->regions[e->slot].h.region_id;
}

/*
 * key_gone - @e leaves the index, for @why: the one place that decides
 * what a key's departure means for the rest -- its region's counts, the
 * eviction order, its owner's notice (a delete by anybody, an eviction:
 * the owner reuses the page), the journal, the shared index (before any
 * event can tell of it), the event stream, and its region when that was
 * its last key and its owner is done.  A pinned key leaves only with its
 * region (a replay, regions lost at the RM): its pins go with it.
 */
void key_gone(struct mds *s, struct ix_entry *e, enum key_gone_why why)
{
	static const uint8_t event[] = {
		[KG_DELETED] = EVR_DELETED, [KG_DELETED_OWN] = EVR_DELETED,
		[KG_EVICTED] = EVR_EVICTED, [KG_OWNER_GONE] = EVR_OWNER_GONE,
		[KG_LOST] = EVR_EXPIRED,
	};
	uint32_t slot = e->slot, i;
	struct mds_region *r = slot != IX_NO_SLOT ? &s->regions[slot] : NULL;
	bool told = why == KG_DELETED || why == KG_DELETED_OWN ||
		    why == KG_EVICTED || why == KG_OWNER_GONE;

	for (i = 0; e->pins && i < s->ninst_slots; i++) {
		struct ix_entry *rec;

		if (s->insts[i].id && (rec = pin_find(s, e, &s->insts[i].pins)))
			pin_put(s, &s->insts[i].pins, rec, true);
	}
	if (r) {
		s->kv_bytes -= e->len;
		r->refs--;
		r->used -= e->len;
		if (r->pg)
			pages_key_gone(s, slot, e, why); /* its page's holder */
		else if (told && r->state == REG_LIVE &&
			 s->insts[r->owner].notices)
			(void)notice_push(s, &s->insts[r->owner],
					  r->h.region_id, e->off, e->gen,
					  NQ_EVICTED);
	}
	pol_remove(&s->pol, e);
	if (why != KG_REPLAY)
		log_del(s, e);
	pub_del(s->pub, e); /* before an event can tell of it */
	if (why == KG_EVICTED && r)
		retire_add(s, slot, e); /* findable while in the grace */
	if (why != KG_REPLAY)
		ev_removed(s->ev, ix_entry_tag(e), e->key, ix_entry_klen(e),
			   event[why]);
	ix_delete(&s->kv, e);
	if (told && r && !r->refs && r->state != REG_LIVE && !pages_lent(r))
		region_done(s, slot);
}
