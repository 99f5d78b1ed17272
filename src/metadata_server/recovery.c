/* SPDX-License-Identifier: Apache-2.0 */
/*
 * recovery.c - what a restart keeps: the journal's records as changes are
 * made, their replay, snapshots, and the check of recovered regions at
 * the resource manager (journal.h has the format)
 *
 * Every change to what a restart must keep is appended to
 * s->jr (journal.h) where it is made, as an absolute statement: a key's
 * location (register), its removal (delete, eviction), a region's state
 * (region_set(), and the lease it hangs on), a FREE queued for the RM and
 * its answer, a lease begun or ended, the pin count one instance holds on
 * a key.  The loop commits the buffer before any reply leaves, so what a
 * client was told is in the journal first.  Not journaled: connections
 * (they die with the process), pins held by connections that named no
 * instance (as at any disconnection), lease deadlines (a restart gives
 * every lease a fresh TTL), eviction notices not yet acknowledged (the
 * client does not reuse those pages: they come back with the region),
 * the LRU order (replay order) and the counters.
 *
 * Replay (mds_apply) applies each record with the same functions the
 * requests use, with s->jr NULL (nothing is logged again) and
 * s->replaying set (no RM call, no region freed but by its own JR_FREE
 * record).  Records are absolute, so a record that repeats the state
 * (a snapshot's) changes nothing.
 *
 * Snapshot.  When the journal outgrows max(snap_min, 2 x its size after
 * the last snapshot), mds_tick() rotates to a new segment and writes the
 * whole state into it as records -- leases, ended leases, regions,
 * queued FREEs at once, then the keys MDS_SNAP_STEP_NS per tick with an
 * ix_scan() cursor, then every instance's pins -- interleaved with the
 * live records of the requests served meanwhile.  Both are in time
 * order in one file, so the new segment alone gives the current state
 * once SNAP_END is in it (a key deleted before the cursor reached it is
 * not written; one registered after is written live, and perhaps again
 * by the scan); then the older segments are unlinked.  A crash before
 * that replays old and new segments, which is just as correct.
 */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "journal.h"
#include "log.h"
#include "pubidx.h"

/* ---- journal records, as changes are made ---- */

void log_region(struct mds *s, const struct mds_region *r)
{
	const struct mds_inst *in = &s->insts[r->owner];
	const struct mds_lease *l =
		r->lease != IX_NO_SLOT ? &s->leases[r->lease] : NULL;
	uint64_t h[4] = {r->h.region_id, r->h.offset, r->h.length,
			 r->h.auth_token};

	if (s->jr)
		jr_put_region(s->jr, h, in->id, in->id_len, l ? l->id : NULL,
			      l ? l->id_len : 0, r->state, r->gone_why);
}

void log_key(struct mds *s, const struct ix_entry *e)
{
	if (s->jr)
		jr_put_key(s->jr, ix_entry_tag(e), e->key, ix_entry_klen(e),
			   e->slot == IX_NO_SLOT
				   ? UINT64_MAX
				   : s->regions[e->slot].h.region_id,
			   e->off, e->len, e->gen);
}

void log_del(struct mds *s, const struct ix_entry *e)
{
	if (s->jr)
		jr_put_del(s->jr, ix_entry_tag(e), e->key, ix_entry_klen(e));
}

/* the count @hp now holds on @e, if @hp is an instance's */
void log_pin(struct mds *s, const struct mds_pins *hp, const struct ix_entry *e,
	     uint64_t count)
{
	const struct mds_inst *in;

	if (!s->jr || !hp->owner1)
		return;
	in = &s->insts[hp->owner1 - 1];
	jr_put_pin(s->jr, in->id, in->id_len, in->lease_id, in->lease_len,
		   ix_entry_tag(e), e->key, ix_entry_klen(e), count);
}

static struct mds_str rec_str(const struct jr_bytes *b)
{
	struct mds_str v = {(const char *)b->p, b->len};

	return v;
}

/* a key of a record: checks the tag and the length of integer keys */
static int rec_key(uint64_t tag, const struct jr_bytes *b, struct ix_key *k)
{
	if (tag > KEY_NINT || b->len > IX_KEY_MAX ||
	    (tag >= KEY_UINT && b->len != 8))
		return -EPROTO;
	k->ptr = b->p;
	k->len = b->len;
	k->tag = (uint8_t)tag;
	return 0;
}

/*
 * A replay's owner: the one of lease @lease under instance id @id (an
 * active lease's, or one made for it that outlived it), or, for an empty
 * @lease, @id's lease-less owner (a restart has no connections: lease-less
 * owners of one id are one); made when missing.  IX_NO_SLOT: @id empty, a
 * lease of another id, or -ENOMEM.
 */
static uint32_t inst_get(struct mds *s, struct mds_str id, struct mds_str lease)
{
	uint32_t lab, slot, lslot;
	const struct mds_inst *in;

	if (!id.len)
		return IX_NO_SLOT;
	if (lease.len && (lslot = lease_find(s, lease)) != IX_NO_SLOT) {
		slot = s->leases[lslot].owner;
		return inst_is(&s->insts[slot], id) ? slot : IX_NO_SLOT;
	}
	lab = label_find(s, id);
	for (slot = lab != IX_NO_SLOT ? s->labels[lab].first : IX_NO_SLOT;
	     slot != IX_NO_SLOT; slot = in->sib_next) {
		in = &s->insts[slot];
		if (lease.len ? in->lease_id && in->lease_len == lease.len &&
					!memcmp(in->lease_id, lease.ptr,
						lease.len)
			      : !in->lease_id)
			return slot;
	}
	return inst_create(s, id, lease);
}

/* a replay moves region @r to owner @islot of the same instance id (its
 * lease ended: the journal names the lease-less owner from then on) */
static void region_reown(struct mds *s, struct mds_region *r, uint32_t islot)
{
	uint8_t state = r->state, why = r->gone_why;
	uint32_t old = r->owner;

	region_set(s, r, REG_RETURNED, 0); /* out of the peer counts */
	s->insts[old].nregions--;
	inst_bytes(s, &s->insts[old], -(int64_t)r->h.length, 0);
	r->owner = islot;
	s->insts[islot].nregions++;
	inst_bytes(s, &s->insts[islot], (int64_t)r->h.length, 0);
	region_set(s, r, state, why);
	inst_maybe_gc(s, old);
}

/*
 * A key record is at least JR_KEY_BYTES on disk (frame, array, type,
 * a short key, the numbers): sizing the key index for journal bytes /
 * JR_KEY_BYTES before the replay spares it every resize on the way
 * (a sixth of a replay's time), at the cost of buckets for the records
 * that are not keys, which the first deletes give back.
 */
#define JR_KEY_BYTES 64

void mds_replay_hint(struct mds *s, uint64_t journal_bytes)
{
	(void)ix_reserve(&s->kv, journal_bytes / JR_KEY_BYTES);
}

static int apply_key(struct mds *s, const struct jr_rec *rec)
{
	struct ix_key k;
	struct ix_entry *e;
	uint32_t slot = IX_NO_SLOT;
	uint64_t h;
	int rc;

	if (rec_key(rec->u[0], &rec->s[0], &k) < 0)
		return -EPROTO;
	if (!rec->nil_u && !region_find(s, rec->u[1], &slot))
		slot = IX_NO_SLOT; /* freed since: as a register would */
	if (slot != IX_NO_SLOT &&
	    (rec->u[2] > s->regions[slot].h.length ||
	     rec->u[3] > s->regions[slot].h.length - rec->u[2]))
		return -EPROTO;
	h = ix_hash(&s->kv, &k);
	rc = ix_insert(&s->kv, &k, h, &e); /* one lookup for a new key */
	if (rc == 0) {
		if (e->slot == slot && e->off == rec->u[2] &&
		    e->len == rec->u[3] && e->gen == rec->u[4])
			return 0; /* a snapshot repeating it */
		key_gone(s, e, KG_REPLAY);
		rc = ix_insert(&s->kv, &k, h, &e);
	}
	if (rc < 0)
		return rc;
	e->off = rec->u[2];
	e->len = rec->u[3];
	e->gen = rec->u[4];
	if (e->gen > s->gen)
		s->gen = e->gen;
	if (slot != IX_NO_SLOT) {
		s->kv_bytes += e->len;
		e->slot = slot;
		s->regions[slot].refs++;
		s->regions[slot].used += e->len;
		pol_add(&s->pol, e);
	}
	return 0;
}

static int apply_del(struct mds *s, const struct jr_rec *rec)
{
	struct ix_key k;
	struct ix_entry *e;

	if (rec_key(rec->u[0], &rec->s[0], &k) < 0)
		return -EPROTO;
	e = ix_find(&s->kv, &k, ix_hash(&s->kv, &k));
	if (e)
		key_gone(s, e, KG_REPLAY);
	return 0;
}

/*
 * The holder of a pin record written before records named the holder's
 * lease: the instance id's one owner with an active lease (the pins of an
 * instance were its leased process's), else its lease-less owner.
 */
static uint32_t pin_owner_unnamed(struct mds *s, struct mds_str id)
{
	uint32_t lab = label_find(s, id), slot, leased = IX_NO_SLOT, n = 0;

	for (slot = lab != IX_NO_SLOT ? s->labels[lab].first : IX_NO_SLOT;
	     slot != IX_NO_SLOT; slot = s->insts[slot].sib_next)
		if (s->insts[slot].nleases) {
			leased = slot;
			n++;
		}
	return n == 1 ? leased : inst_get(s, id, (struct mds_str){NULL, 0});
}

static int apply_pin(struct mds *s, const struct jr_rec *rec)
{
	struct mds_str id = rec_str(&rec->s[0]);
	bool named = rec->ns > 2 && rec->s[2].p;
	uint32_t islot = named ? inst_get(s, id, rec_str(&rec->s[2]))
			       : pin_owner_unnamed(s, id);
	struct ix_entry *e, *pr;
	struct mds_pins *hp;
	struct ix_key k;
	uint64_t cur;

	if (rec_key(rec->u[0], &rec->s[1], &k) < 0 || rec->u[1] > UINT32_MAX ||
	    !id.len)
		return -EPROTO;
	/* a lease id that is now another instance id's (ended, forgotten,
	 * taken again): its pins went when it ended */
	if (islot == IX_NO_SLOT && named)
		return 0;
	if (islot == IX_NO_SLOT)
		return -ENOMEM;
	e = ix_find(&s->kv, &k, ix_hash(&s->kv, &k));
	if (!e) {
		inst_maybe_gc(s, islot);
		return 0; /* deleted since (a snapshot's pins come last) */
	}
	hp = &s->insts[islot].pins;
	pr = pin_find(s, e, hp);
	if (!rec->u[1]) {
		if (pr)
			pin_put(s, hp, pr, true);
		return 0;
	}
	if (!pr) {
		int rc = pin_add(s, e, hp, 0);

		if (rc < 0)
			return rc == -ENOMEM ? rc : -EPROTO;
		pr = pin_find(s, e, hp);
		if (!pr)
			return 0; /* the key's count is saturated */
	}
	/* the count set at once, not pin by pin (2^32 steps at worst) */
	cur = pr->off;
	if (rec->u[1] > cur) {
		uint64_t add = rec->u[1] - cur;

		if (add > (uint64_t)(UINT32_MAX - e->pins))
			add = UINT32_MAX - e->pins;
		pr->off += add;
		e->pins += (uint32_t)add;
	} else if (rec->u[1] < cur) {
		/* e->pins >= pr->off: it stays >= 1 */
		pr->off = rec->u[1];
		e->pins -= (uint32_t)(cur - rec->u[1]);
	}
	return 0;
}

static int apply_region(struct mds *s, const struct jr_rec *rec)
{
	struct rm_handle h = {rec->u[0], rec->u[1], rec->u[2], rec->u[3]};
	struct mds_str lid = rec_str(&rec->s[1]);
	uint32_t islot, lslot = IX_NO_SLOT, slot;
	struct mds_region *r;
	uint64_t state = rec->u[4], why = rec->u[5];

	if (state < REG_LIVE || state > REG_GONE ||
	    (state == REG_GONE && why != GONE_LEASE && why != GONE_PEER) ||
	    (state != REG_GONE && why) || !h.length)
		return -EPROTO;
	islot = inst_get(s, rec_str(&rec->s[0]), lid);
	if (islot == IX_NO_SLOT)
		return -EPROTO;
	if (rec->s[1].p) {
		lslot = lease_find(s, lid);
		if (lslot == IX_NO_SLOT)
			lslot = lease_create(s, lid, islot);
		if (lslot == IX_NO_SLOT || s->leases[lslot].owner != islot)
			return -EPROTO;
	}
	r = region_find(s, h.region_id, &slot);
	if (!r) {
		if (region_add(s, &h, islot, lslot) < 0)
			return -ENOMEM;
		r = region_find(s, h.region_id, &slot);
	} else if (memcmp(&r->h, &h, sizeof(h)) ||
		   (r->owner != islot &&
		    !inst_is(&s->insts[r->owner], rec_str(&rec->s[0])))) {
		return -EPROTO;
	} else if (r->owner != islot && !rec->s[1].p) {
		/* its lease ended (the record names none since): it stays
		 * its owner's, as it did while we ran */
		inst_maybe_gc(s, islot);
		islot = r->owner;
	}
	if (r->owner != islot)
		region_reown(s, r, islot);
	if (r->lease != lslot) {
		/* region_set() counts lease-less live regions: out, in */
		region_set(s, r, REG_RETURNED, 0);
		if (r->lease != IX_NO_SLOT)
			s->leases[r->lease].nregions--;
		r->lease = lslot;
		if (lslot != IX_NO_SLOT)
			s->leases[lslot].nregions++;
	}
	if (r->state != state || r->gone_why != why)
		region_set(s, r, (uint8_t)state, (uint8_t)why);
	return 0;
}

/* the region leaves the table (its owner done, no key), FREE queued */
static int apply_free(struct mds *s, const struct jr_rec *rec)
{
	struct rm_handle h = {rec->u[0], rec->u[1], rec->u[2], rec->u[3]};
	struct mds_region *r;
	uint32_t slot, i;

	r = region_find(s, h.region_id, &slot);
	if (r) {
		if (r->refs)
			return -EPROTO;
		region_forget(s, slot);
	}
	for (i = 0; i < s->npending; i++)
		if (s->pending[i].region_id == h.region_id)
			return 0;
	queue_free(s, &h);
	return 0;
}

static int apply_lease(struct mds *s, const struct jr_rec *rec)
{
	struct mds_str id = rec_str(&rec->s[0]);
	uint32_t islot, lslot;

	if (!id.len)
		return -EPROTO;
	lslot = lease_find(s, id);
	if (lslot != IX_NO_SLOT)
		return 0;
	islot = inst_get(s, rec_str(&rec->s[1]), id);
	if (islot == IX_NO_SLOT)
		return -EPROTO;
	if (lease_create(s, id, islot) == IX_NO_SLOT) {
		inst_maybe_gc(s, islot);
		return -ENOMEM;
	}
	return 0;
}

static int apply_lease_end(struct mds *s, const struct jr_rec *rec)
{
	struct mds_str id = rec_str(&rec->s[0]);
	uint32_t lslot;

	if (!id.len)
		return -EPROTO;
	lslot = lease_find(s, id);
	if (lslot != IX_NO_SLOT)
		lease_end(s, lslot, false); /* remembers it */
	else if (!lease_ended(s, id))
		remember_ended(s, id);
	return 0;
}

static int apply_freed(struct mds *s, const struct jr_rec *rec)
{
	uint32_t i;

	for (i = 0; i < s->npending; i++) {
		if (s->pending[i].region_id != rec->u[0])
			continue;
		memmove(&s->pending[i], &s->pending[i + 1],
			(s->npending - i - 1) * sizeof(*s->pending));
		s->npending--;
		break;
	}
	return 0;
}

void mds_ahead(void *arg, const struct jr_rec *rec, int stage)
{
	struct mds *s = arg;
	struct ix_key k;
	uint64_t h;

	if ((rec->type != JR_KEY && rec->type != JR_DEL) ||
	    rec_key(rec->u[0], &rec->s[0], &k) < 0)
		return;
	h = ix_hash(&s->kv, &k);
	if (stage == 0)
		ix_prefetch(&s->kv, h); /* the bucket */
	else
		ix_prefetch_entry(&s->kv, h); /* the chain's first entry */
}

int mds_apply(void *arg, const struct jr_rec *rec)
{
	struct mds *s = arg;
	int rc = 0;

	switch (rec->type) {
	case JR_SNAP_BEGIN:
		if (rec->u[0] > s->gen)
			s->gen = rec->u[0];
		break;
	case JR_SNAP_END:
		break; /* (what it closes was applied record by record) */
	case JR_LEASE:
		rc = apply_lease(s, rec);
		break;
	case JR_LEASE_END:
		rc = apply_lease_end(s, rec);
		break;
	case JR_REGION:
		rc = apply_region(s, rec);
		break;
	case JR_FREE:
		rc = apply_free(s, rec);
		break;
	case JR_FREED:
		rc = apply_freed(s, rec);
		break;
	case JR_KEY:
		rc = apply_key(s, rec);
		break;
	case JR_DEL:
		rc = apply_del(s, rec);
		break;
	case JR_PIN:
		rc = apply_pin(s, rec);
		break;
	default:
		rc = -EPROTO;
	}
	return rc;
}

void mds_recovered(struct mds *s, uint64_t vnow)
{
	uint32_t i, nx;

	s->replaying = false;
	s->vnow = vnow;
	s->ctr.recoveries++;
	for (i = 0; i < s->nlease_slots; i++)
		if (s->leases[i].id)
			s->leases[i].deadline = vnow + s->cfg.lease_ttl_ns;
	for (i = 0; i < s->ninst_slots; i++) {
		s->insts[i].dead_at = 0;
		if (s->insts[i].id)
			inst_deadline(s, &s->insts[i]);
	}
	/*
	 * Owner done, no key left: what region_done() would have done.  The
	 * journal does not say whether an eviction emptied it just before
	 * the crash, so each gets the eviction grace (a reader of an evicted
	 * key may still be copying); mds_tick() frees it after.
	 */
	for (i = s->reg_head; i != IX_NO_SLOT; i = nx) {
		nx = s->regions[i].next;
		if (s->regions[i].state == REG_LIVE || s->regions[i].refs)
			continue;
		s->regions[i].quiet_at = vnow + s->cfg.evict_grace_ns;
		region_done(s, i);
	}
	/*
	 * No connection survives the restart: what mds_conn_close() does
	 * for an instance with neither connection nor lease (its pins go)
	 * happens for every such instance now -- else they stayed forever.
	 */
	for (i = 0; i < s->ninst_slots; i++)
		if (s->insts[i].id && !s->insts[i].nleases)
			pins_release(s, &s->insts[i].pins);
	for (i = 0; i < s->ninst_slots; i++)
		if (s->insts[i].id)
			inst_maybe_gc(s, i);
	s->rec.keys = s->kv.count;
	s->rec.regions = s->nregions;
	s->rec.leases = s->nleases;
	s->rec.pins = s->pin_map.count;
	if (s->jr) {
		/* the size a snapshot of this state would have, so that a
		 * journal restarts do not compact keeps its bound */
		uint64_t avg =
			s->rec.records ? s->rec.bytes / s->rec.records : 64;
		uint64_t est = (s->kv.count + s->nregions + s->nleases +
				s->pin_map.count + 1) *
			       (avg ? avg : 1);

		if (est < s->jr->base)
			s->jr->base = est;
	}
}

struct key_pick {
	const uint8_t *drop; /* per region slot */
	struct ix_entry **v;
	size_t n, cap;
	bool oom;
};

static void pick_keys(struct ix_entry *e, void *arg)
{
	struct key_pick *kp = arg;

	if (e->slot == IX_NO_SLOT || !kp->drop[e->slot])
		return;
	if (array_grow(&kp->v, &kp->cap, kp->n, sizeof(*kp->v), 64) < 0) {
		kp->oom = true;
		return;
	}
	kp->v[kp->n++] = e;
}

int64_t mds_verify_regions(struct mds *s,
			   int (*check)(void *arg, const struct rm_handle *h,
					char *path, size_t pathlen),
			   void *arg)
{
	char path[RM_PATH_MAX + 1];
	struct key_pick kp = {NULL, NULL, 0, 0, false};
	uint8_t *drop;
	uint64_t cur = 0;
	int64_t kept = 0;
	uint32_t i, nx, ndrop = 0;
	size_t k;
	int rc;

	drop = calloc(s->nreg_slots + 1, 1);
	if (!drop)
		return -ENOMEM;
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		path[0] = '\0';
		rc = check(arg, &s->regions[i].h, path, sizeof(path));
		if (rc == -ENOENT || rc == -EACCES || rc == -EPERM ||
		    rc == -ESTALE) {
			drop[i] = 1;
			ndrop++;
			continue;
		}
		if (rc < 0) {
			free(drop);
			return rc;
		}
		s->regions[i].dev = mds_dev_intern(s, path, strlen(path));
		kept++;
	}
	if (ndrop) {
		kp.drop = drop;
		while (ix_rehash_for(&s->kv, 1000000000))
			;
		do {
			cur = ix_scan(&s->kv, cur, pick_keys, &kp);
		} while (cur && !kp.oom);
		if (kp.oom) {
			free(kp.v);
			free(drop);
			return -ENOMEM;
		}
		for (k = 0; k < kp.n; k++)
			key_gone(s, kp.v[k], KG_LOST);
		s->rec.keys_lost += kp.n;
		for (i = s->reg_head; i != IX_NO_SLOT; i = nx) {
			uint64_t h[4];

			nx = s->regions[i].next;
			if (!drop[i])
				continue;
			h[0] = s->regions[i].h.region_id;
			h[1] = s->regions[i].h.offset;
			h[2] = s->regions[i].h.length;
			h[3] = s->regions[i].h.auth_token;
			log_info("region %llu: the resource manager no longer "
				 "has it: dropped",
				 (unsigned long long)h[0]);
			if (s->jr) {
				jr_put_free(s->jr, h);
				jr_put_freed(s->jr, h[0]);
			}
			region_forget(s, i);
			s->rec.regions_lost++;
		}
	}
	free(kp.v);
	free(drop);
	s->rec.keys = s->kv.count;
	s->rec.regions = s->nregions;
	return kept;
}

/*
 * The journal failed (a write or a sync): what it holds cannot be
 * trusted any more, so it goes -- a restart then starts empty, under a
 * new identity, and clients fence as they would without a journal.
 */
/*
 * A write (or fdatasync) of the journal failed: the replies of this batch
 * have not left.  Either the journal goes entirely -- a restart then
 * starts empty under a new id, and clients fence -- and the server goes
 * on without one, or, if even that fails, the server stops here (as
 * Redis does when an appendfsync-always write fails): everything it ever
 * acknowledged is in what was committed before, and a restart recovers
 * it.  Going on with a stale journal behind it would not be safe: the
 * next restart would serve the old prefix under the same identity.
 */
static void journal_failed(struct mds *s)
{
	int rc = jr_remove(s->jr);

	if (rc < 0) {
		log_err("journal %s: a write failed and the journal cannot be "
			"removed (%s): stopping; a restart recovers what was "
			"acknowledged",
			s->jr->dir, strerror(-rc));
		_exit(EXIT_FAILURE);
	}
	log_err("journal %s: a write failed; removed, going on without one "
		"(a restart will start empty, under a new server id)",
		s->jr->dir);
	s->jr = NULL;
	s->snap_on = false;
}

void mds_journal_commit(struct mds *s)
{
	if (s->jr && (jr_dirty(s->jr) || s->jr->failed) && jr_commit(s->jr) < 0)
		journal_failed(s);
}

/* ---- snapshot ---- */

static void snap_key(struct ix_entry *e, void *arg)
{
	log_key(arg, e);
}

/* leases, ended leases, regions, queued FREEs: the small part, at once */
static void snap_begin(struct mds *s)
{
	uint32_t i;

	if (jr_rotate(s->jr) < 0) {
		journal_failed(s);
		return;
	}
	jr_put_snap_begin(s->jr, s->gen);
	for (i = 0; i < s->nlease_slots; i++) {
		const struct mds_lease *l = &s->leases[i];

		if (l->id)
			jr_put_lease(s->jr, l->id, l->id_len,
				     s->insts[l->owner].id,
				     s->insts[l->owner].id_len);
	}
	for (i = 0; i < s->ended_n; i++) {
		const struct ix_entry *e =
			s->ended_ring[(s->ended_pos + i) % MDS_ENDED_LEASES];

		jr_put_lease_end(s->jr, (const char *)e->key, ix_entry_klen(e));
	}
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next)
		log_region(s, &s->regions[i]);
	for (i = 0; i < s->npending; i++) {
		const struct rm_handle *h = &s->pending[i];
		uint64_t v[4] = {h->region_id, h->offset, h->length,
				 h->auth_token};

		jr_put_free(s->jr, v);
	}
	s->snap_on = true;
	s->snap_cursor = 0;
}

/* the instances' pins, SNAP_END; then the older segments go */
static void snap_end(struct mds *s)
{
	uint32_t i, j;

	for (i = 0; i < s->ninst_slots; i++) {
		const struct mds_pins *hp = &s->insts[i].pins;

		/* (soft pins are not journaled: kv.c) */
		for (j = 0; s->insts[i].id && j < hp->n; j++)
			if (hp->rec[j]->off > hp->rec[j]->pins)
				log_pin(s, hp, pin_entry(hp->rec[j]),
					hp->rec[j]->off - hp->rec[j]->pins);
	}
	jr_put_snap_end(s->jr);
	s->snap_on = false;
	if (jr_commit(s->jr) < 0) {
		journal_failed(s);
		return;
	}
	if (s->jr->sync)
		(void)fdatasync(s->jr->fd);
	jr_drop_before(s->jr);
	s->snaps++;
	log_info("journal: snapshot of %llu key(s) written, %llu MiB",
		 (unsigned long long)s->kv.count,
		 (unsigned long long)(s->jr->total >> 20));
}

/* a step of the snapshot (at most @ns), starting one when it is due */
void snap_tick(struct mds *s, uint64_t ns)
{
	uint64_t t0, min = s->cfg.snap_min ? s->cfg.snap_min : MDS_SNAP_MIN;

	if (!s->jr)
		return;
	if (!s->snap_on) {
		if (s->jr->total + s->jr->out.len < min ||
		    s->jr->total + s->jr->out.len < 2 * s->jr->base)
			return;
		snap_begin(s);
		if (!s->jr)
			return;
	}
	t0 = now_ns();
	do {
		s->snap_cursor = ix_scan(&s->kv, s->snap_cursor, snap_key, s);
	} while (s->snap_cursor && now_ns() - t0 < ns);
	if (!s->snap_cursor)
		snap_end(s);
	else
		mds_journal_commit(s);
}

void mds_snapshot_all(struct mds *s)
{
	if (!s->jr)
		return;
	if (!s->snap_on)
		snap_begin(s);
	while (s->jr && s->snap_on)
		snap_tick(s, UINT64_MAX / 2);
}
