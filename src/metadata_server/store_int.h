/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_int.h - what the store's files share (store.c names them and their
 * order); handler.c, server.c and main.c use store.h only
 *
 * The entity types are store.h's.  These are the functions one concern
 * offers the others: each is defined, with its comment, in the file its
 * group names.
 */
#ifndef MARU_MDS_STORE_INT_H
#define MARU_MDS_STORE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "util.h"

struct jr_rec;

/* eviction's bounds, which an allocation applies too */
#define EVICT_TICK_KEYS 50000 /* background victims per tick */
#define EVICT_WALK_MAX 100000 /* entries walked to choose victims */

/* ---- small helpers, inline (hot paths) ---- */

static inline struct ix_key str_key(struct mds_str s)
{
	struct ix_key k = {(const uint8_t *)s.ptr, s.len, KEY_STR};

	return k;
}

static inline struct ix_key id_key(const uint64_t *id_le, uint8_t *buf)
{
	struct ix_key k = {buf, 8, KEY_UINT};

	put_u64le(buf, *id_le);
	return k;
}

static inline struct mds_region *region_find(struct mds *s, uint64_t id,
					     uint32_t *slot)
{
	uint8_t kb[8];
	struct ix_key k = id_key(&id, kb);
	struct ix_entry *e;

	e = ix_find(&s->region_map, &k, ix_hash(&s->region_map, &k));
	if (!e)
		return NULL;
	if (slot)
		*slot = e->slot;
	return &s->regions[e->slot];
}

/* ---- store.c: helpers ---- */

char *dup_str(struct mds_str s);
int grow(void **v, uint32_t *n, size_t size);

/* ---- owners.c: labels, owners, connections, authority, leases ---- */

uint32_t label_find(struct mds *s, struct mds_str id);
uint32_t inst_create(struct mds *s, struct mds_str id, struct mds_str lease);
void inst_maybe_gc(struct mds *s, uint32_t slot);
void inst_bytes(struct mds *s, struct mds_inst *in, int64_t d, int64_t p);
void inst_deadline(struct mds *s, struct mds_inst *in);
struct mds_conn *peer_conn(struct mds *s, struct mds_peer *peer);
bool may_act(struct mds *s, struct mds_peer *peer, uint32_t slot,
	     uint32_t lslot);
bool claim(struct mds *s, struct mds_peer *peer, uint32_t slot, uint32_t lslot);
bool inst_is(const struct mds_inst *in, struct mds_str id);
uint32_t owner_resolve(struct mds *s, struct mds_str inst, struct mds_str lease,
		       struct mds_peer *peer, bool create, uint32_t *lslot,
		       int *err);
uint32_t wait_owner(const struct mds *s, const struct mds_wait *w);
void revive(struct mds *s, uint32_t slot);
bool lease_ended(struct mds *s, struct mds_str id);
uint32_t lease_find(struct mds *s, struct mds_str id);
uint32_t lease_create(struct mds *s, struct mds_str id, uint32_t owner);
void remember_ended(struct mds *s, struct mds_str id);
void lease_end(struct mds *s, uint32_t slot, bool expired);
void declare_dead(struct mds *s, uint32_t slot);

/* ---- regions.c: the region table and its lifecycle ---- */

void regions_lose_owner(struct mds *s, uint32_t islot, uint32_t lslot);
void region_set(struct mds *s, struct mds_region *r, uint8_t state,
		uint8_t why);
void queue_free(struct mds *s, const struct rm_handle *h);
void flush_pending(struct mds *s);
void region_forget(struct mds *s, uint32_t slot);
void region_release(struct mds *s, uint32_t slot);
void region_done(struct mds *s, uint32_t slot);
int region_add(struct mds *s, const struct rm_handle *h, uint32_t owner,
	       uint32_t lease);

/* ---- kv.c: keys and pins ---- */

struct ix_entry *pin_entry(const struct ix_entry *rec);
struct ix_entry *pin_find(struct mds *s, const struct ix_entry *e,
			  const struct mds_pins *hp);
int pin_add(struct mds *s, struct ix_entry *e, struct mds_pins *hp,
	    uint64_t ttl_ms);
void unpinned(struct mds *s, struct ix_entry *e);
void pin_put(struct mds *s, struct mds_pins *hp, struct ix_entry *rec,
	     bool all);
void pins_release(struct mds *s, struct mds_pins *hp);
/* the soft pins past their deadline go (mds_tick) */
void pins_expire(struct mds *s);
/* why a key leaves the index (key_gone()) */
enum key_gone_why {
	KG_DELETED,	/* DELETE_KV */
	KG_DELETED_OWN, /* DELETE_KV by the holder of its page (pages.c) */
	KG_EVICTED,	/* evicted from a live owner's region */
	KG_OWNER_GONE,	/* evicted from a region whose owner is done */
	KG_LOST,	/* its region is gone at the RM (recovery) */
	KG_REPLAY,	/* the journal says so (nothing logged or told) */
};
void key_gone(struct mds *s, struct ix_entry *e, enum key_gone_why why);

/* ---- evict.c: eviction, notices, capacity ---- */

void earmark(struct mds *s, uint32_t islot);
bool evict_on(const struct mds *s);
int notice_push(struct mds *s, struct mds_inst *in, uint64_t rid, uint64_t off,
		uint64_t gen, enum notice_kind kind);
bool pool_full(const struct mds *s);
uint64_t evict_some(struct mds *s, uint64_t bytes, uint64_t max_keys);
uint64_t evict_own(struct mds *s, uint32_t islot, uint64_t bytes, uint32_t walk,
		   int why);
bool notices_due(struct mds *s, const struct mds_inst *in);
uint64_t waiting_bytes(struct mds *s);
void cap_append(struct mds *s, struct mds_wait *w);
int reclaim_for(struct mds *s, struct mds_wait *w);
void evict_tick(struct mds *s);
void deferred_tick(struct mds *s);

/* ---- pages.c: capacity by the page ---- */

int pages_enable(struct mds *s, uint32_t slot, uint32_t size);
void pages_drop(struct mds_region *r);
void pages_forget_region(struct mds *s, struct mds_region *r);
bool pages_lent(const struct mds_region *r);
int pages_check(struct mds *s, const struct mds_region *r,
		struct mds_peer *peer, uint64_t off, uint64_t len,
		uint32_t *holder);
void pages_ref(struct mds_region *r, uint64_t off);
void pages_key_gone(struct mds *s, uint32_t slot, const struct ix_entry *e,
		    enum key_gone_why why);
bool pages_held_by(struct mds *s, const struct mds_region *r, uint64_t off,
		   struct mds_peer *peer);
uint64_t pages_ready(struct mds *s, uint32_t size);
uint64_t pages_pooled(struct mds *s, uint32_t size);
uint64_t pages_want(const struct mds *s, uint32_t islot, uint64_t bytes);
uint32_t pages_grant(struct mds *s, uint32_t islot, uint64_t bytes);
uint64_t pages_region_size(const struct mds *s, uint32_t islot, uint64_t size);
bool pages_granted_to(struct mds *s, uint32_t islot, uint64_t rid,
		      uint64_t off);
void pages_lose_holder(struct mds *s, uint32_t islot);
bool pages_give_back(struct mds *s, uint32_t slot, struct mds_str inst,
		     struct mds_peer *peer, uint64_t ack);
uint32_t pages_release_wanted(struct mds *s, uint32_t islot, uint64_t *out,
			      uint32_t max);
uint64_t pages_reserve_need(struct mds *s);
bool pages_may_rescue(struct mds *s, uint32_t size);
void pages_repool(struct mds *s, uint32_t slot);
void pages_owner_returned(struct mds *s, uint32_t slot);
void pages_rate_tick(struct mds *s);
void pages_destroy(struct mds *s);
void pages_unpool(struct mds *s, struct mds_region *r, uint32_t page);

/* ---- retire.c: evicted keys findable while their page is in the grace */

void retire_add(struct mds *s, uint32_t slot, const struct ix_entry *e);
void retire_forget(struct mds *s, const struct ix_key *k, uint64_t h);
void retire_page_gone(struct mds *s, uint64_t region_id, uint32_t page);
uint64_t retire_count(const struct mds *s);
void retire_destroy(struct mds *s);

/* ---- recovery.c: the journal ---- */

void log_region(struct mds *s, const struct mds_region *r);
void log_key(struct mds *s, const struct ix_entry *e);
void log_del(struct mds *s, const struct ix_entry *e);
void log_pin(struct mds *s, const struct mds_pins *hp, const struct ix_entry *e,
	     uint64_t count);
void snap_tick(struct mds *s, uint64_t ns);

#endif
