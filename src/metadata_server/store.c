/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c - maru-server's state: set up, torn down, the clock's tick, and
 * the invariants that tie its parts together (see store.h)
 *
 * The state is one struct mds (store.h: every entity type) whose parts
 * live in files by concern, in this order of dependence (a file calls
 * the ones after it, and those before it only through store_int.h's
 * helpers that do not call back):
 *
 *   store.c     this file: init/destroy, mds_tick() (what is due: lease
 *               expiry, peer deaths, FREE retries, deferred frees,
 *               background reclaim, snapshots), mds_check()
 *   owners.c    instance ids (labels), owners, connections, authority,
 *               leases, HEARTBEAT, dead clients
 *   regions.c   the region table, its lifecycle, the FREE queue, and
 *               REQUEST_ALLOC / RETURN_ALLOC
 *   kv.c        the KV semantics: register, lookup, exists, delete, pins;
 *               key_gone(), the one place a key leaves the index
 *   evict.c     eviction, its notices to owners, and the REQUEST_ALLOCs
 *               that wait for capacity
 *   pages.c     pages granted one by one: page holders, the pool of free
 *               pages, grants (below evict.c and kv.c, which call it)
 *   recovery.c  the journal: records as changes are made, replay,
 *               snapshots, and the check of recovered regions at the RM
 *
 * Region lifecycle (docs/metadata-server.md):
 *
 *	REQUEST_ALLOC --> LIVE --RETURN_ALLOC------------> RETURNED
 *	                   |                                  |
 *	                   +--lease expired / peer dead--> GONE
 *	                                                      |
 *	   (RETURNED or GONE) and refs == 0 --> FREE at the RM, forgotten
 *
 * Entries name their region by slot (32 bits), never by pointer; a slot
 * is reused only after its region left the table, which requires refs ==
 * 0, so no entry can point at a reused slot.
 *
 * Ownership: the store owns every string it keeps (instance and lease
 * ids are copied); request data is borrowed only for the call.
 * Context: single-threaded; the main loop owns the struct mds.
 */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "log.h"

char *dup_str(struct mds_str s)
{
	char *p = malloc((size_t)s.len + 1);

	if (p) {
		if (s.len)
			memcpy(p, s.ptr, s.len);
		p[s.len] = '\0';
	}
	return p;
}

/* Grow a slot array of @size-byte elements; new slots are zeroed. */
int grow(void **v, uint32_t *n, size_t size)
{
	uint32_t nn = *n ? *n * 2 : 16;
	uint8_t *p;

	if (*n >= (1u << 30))
		return -ENOMEM;
	p = realloc(*v, (size_t)nn * size);
	if (!p)
		return -ENOMEM;
	memset(p + (size_t)*n * size, 0, (size_t)(nn - *n) * size);
	*v = p;
	*n = nn;
	return 0;
}

/* ---- init ---- */

int mds_init(struct mds *s, const struct mds_config *cfg,
	     const struct mds_rm_ops *rm, void *rm_arg, uint64_t seed)
{
	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	s->rm = rm;
	s->rm_arg = rm_arg;
	ix_init(&s->kv, seed);
	ix_init(&s->region_map, seed ^ 1);
	ix_init(&s->label_map, seed ^ 2);
	ix_init(&s->lease_map, seed ^ 3);
	ix_init(&s->ended, seed ^ 4);
	stats_init(&s->stats, seed ^ 5);
	ix_init(&s->pin_map, seed ^ 6);
	if (pol_init(&s->pol, cfg->eviction ? cfg->eviction : "lru") < 0)
		return -EINVAL;
	s->anon_pins.uid = ++s->next_uid;
	s->soft_next = UINT64_MAX;
	s->reg_free = s->reg_head = s->reg_tail = IX_NO_SLOT;
	s->inst_free = s->lease_free = s->label_free = IX_NO_SLOT;
	s->ended_ring = calloc(MDS_ENDED_LEASES, sizeof(*s->ended_ring));
	if (!s->ended_ring)
		return -ENOMEM;
	return 0;
}

void mds_destroy(struct mds *s)
{
	uint32_t i;
	int fd;

	/* first: answering them still looks at their instances */
	while (s->cap_head) {
		struct mds_wait *w = s->cap_head;

		s->cap_head = w->next;
		if (!s->cap_head)
			s->cap_tail = NULL;
		s->ncap--;
		w->next = NULL;
		w->rc = -ECANCELED;
		w->done(w);
	}
	for (i = 0; i < s->ninst_slots; i++) {
		free(s->insts[i].id);
		free(s->insts[i].lease_id);
		free(s->insts[i].pins.rec);
		free(s->insts[i].nq);
	}
	for (i = 0; i < s->nlabel_slots; i++)
		free(s->labels[i].id);
	free(s->labels);
	for (i = 0; i < s->nlease_slots; i++)
		free(s->leases[i].id);
	for (fd = 0; fd < s->nconn_slots; fd++) {
		free(s->conns[fd].inst);
		free(s->conns[fd].pins.rec);
	}
	free(s->anon_pins.rec);
	ix_destroy(&s->pin_map);
	free(s->insts);
	free(s->leases);
	for (i = 0; i < s->nreg_slots; i++)
		pages_drop(&s->regions[i]);
	pages_destroy(s);
	free(s->regions);
	free(s->conns);
	free(s->pending);
	free(s->ended_ring);
	ix_destroy(&s->kv);
	ix_destroy(&s->region_map);
	ix_destroy(&s->label_map);
	ix_destroy(&s->lease_map);
	ix_destroy(&s->ended);
	stats_destroy(&s->stats);
	while (s->ndevs)
		free(s->devs[--s->ndevs]);
	memset(s, 0, sizeof(*s));
}

uint16_t mds_dev_intern(struct mds *s, const char *path, size_t len)
{
	uint32_t i;

	if (!path || !len)
		return 0;
	for (i = 0; i < s->ndevs; i++)
		if (strlen(s->devs[i]) == len && !memcmp(s->devs[i], path, len))
			return (uint16_t)(i + 1);
	if (s->ndevs == MDS_MAX_DEVS)
		return 0;
	s->devs[s->ndevs] = strndup(path, len);
	if (!s->devs[s->ndevs])
		return 0;
	return (uint16_t)++s->ndevs;
}

void mds_tick(struct mds *s, uint64_t vnow)
{
	uint32_t i;

	s->vnow = vnow;
	for (i = 0; i < s->nlease_slots; i++)
		if (s->leases[i].id && !s->leases[i].parked &&
		    s->leases[i].deadline <= vnow)
			lease_end(s, i, true);
	for (i = 0; i < s->ninst_slots; i++)
		if (s->insts[i].id && s->insts[i].dead_at &&
		    s->insts[i].dead_at <= vnow)
			declare_dead(s, i);
	if (s->npending)
		flush_pending(s);
	if (s->ndeferred)
		deferred_tick(s);
	if (s->soft_recs && s->soft_next <= vnow)
		pins_expire(s);
	evict_tick(s);
	snap_tick(s, MDS_SNAP_STEP_NS);
	mds_journal_commit(s);
}

uint64_t mds_active_clients(const struct mds *s)
{
	uint64_t n = 0;
	uint32_t i, j;
	bool dup;

	/* owners are few; mark-free quadratic scan over LIVE regions */
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		if (s->regions[i].state != REG_LIVE)
			continue;
		dup = false;
		for (j = s->reg_head; j != i; j = s->regions[j].next)
			if (s->regions[j].state == REG_LIVE &&
			    s->regions[j].owner == s->regions[i].owner) {
				dup = true;
				break;
			}
		n += !dup;
	}
	return n;
}

/* ---- invariants (tests) ---- */

struct chk {
	struct mds *s;
	uint64_t *refs, *used;
	uint64_t entries, bytes, pins;
	uint64_t evictable, pinned_bytes; /* the policy's view */
	bool bad;
};

static void chk_entry(struct ix_entry *e, void *arg)
{
	struct chk *c = arg;

	c->entries++;
	c->pins += e->pins;
	if (e->pins)
		c->pinned_bytes += e->len;
	if (e->slot == IX_NO_SLOT)
		return;
	if (!e->pins)
		c->evictable++;
	c->bytes += e->len;
	if (e->slot >= c->s->nreg_slots ||
	    c->s->regions[e->slot].state == REG_UNUSED) {
		c->bad = true;
		return;
	}
	c->refs[e->slot]++;
	c->used[e->slot] += e->len;
}

/* a holder's records point back at their positions; Return: their pins */
static uint64_t chk_holder(const struct mds_pins *hp, uint64_t *nrec,
			   uint64_t *nsoft, bool *bad)
{
	uint64_t n = 0, bytes = 0, soft = 0;
	uint32_t i;

	for (i = 0; i < hp->n; i++) {
		if (hp->rec[i]->len != i || !hp->rec[i]->off ||
		    hp->rec[i]->pins > hp->rec[i]->off)
			*bad = true;
		n += hp->rec[i]->off;
		*nsoft += hp->rec[i]->pins != 0;
		soft += hp->rec[i]->pins != 0;
		bytes += pin_entry(hp->rec[i])->len;
	}
	if (bytes != hp->bytes || soft != hp->nsoft)
		*bad = true;
	*nrec += hp->n;
	return n;
}

int mds_check(struct mds *s)
{
	struct chk c = {s, NULL, NULL, 0, 0, 0, 0, 0, false};
	uint64_t pins = 0, nrec = 0, nsoft = 0;
	uint32_t *nl = NULL;
	uint64_t cur = 0, nreg = 0, total = 0, ndef = 0;
	uint32_t i, *nr = NULL, *np = NULL, *ng = NULL, *nc = NULL;
	int fd, rc = -EUCLEAN;

	/* a scan may report an entry twice only across a resize */
	while (ix_rehash_for(&s->kv, 1000000000))
		;
	c.refs = calloc(s->nreg_slots + 1, sizeof(*c.refs));
	c.used = calloc(s->nreg_slots + 1, sizeof(*c.used));
	nr = calloc(s->ninst_slots + 1, sizeof(*nr));
	np = calloc(s->ninst_slots + 1, sizeof(*np));
	ng = calloc(s->ninst_slots + 1, sizeof(*ng));
	nc = calloc(s->ninst_slots + 1, sizeof(*nc));
	nl = calloc(s->ninst_slots + 1, sizeof(*nl));
	if (!c.refs || !c.used || !nr || !np || !ng || !nc || !nl) {
		rc = -ENOMEM;
		goto out;
	}
	do {
		cur = ix_scan(&s->kv, cur, chk_entry, &c);
	} while (cur);
	if (c.bad || c.entries != s->kv.count || c.bytes != s->kv_bytes ||
	    c.pinned_bytes != s->pinned_bytes)
		goto out;
	/* every unpinned entry of a tracked region is in the policy's order */
	if (pol_evicts(&s->pol) && c.evictable != s->pol.n)
		goto out;
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		struct mds_region *r = &s->regions[i];

		if (r->state == REG_UNUSED || r->refs != c.refs[i] ||
		    r->used != c.used[i] || !s->insts[r->owner].id)
			goto out;
		/* an ownerless region without entries must have been freed,
		 * or wait for the grace of an eviction (region_done()) */
		if (r->state != REG_LIVE && r->refs == 0 && !r->deferred &&
		    !pages_lent(r))
			goto out;
		if (r->deferred)
			ndef++;
		nreg++;
		total += r->h.length;
		nr[r->owner]++;
		if (r->state == REG_LIVE && r->lease == IX_NO_SLOT)
			np[r->owner]++;
		if (r->state == REG_GONE && r->gone_why == GONE_PEER)
			ng[r->owner]++;
	}
	if (nreg != s->nregions || total != s->total_allocated ||
	    nreg != s->region_map.count || ndef != s->ndeferred)
		goto out;
	for (fd = 0; fd < s->nconn_slots; fd++) {
		for (i = 0; s->conns[fd].open && i < s->conns[fd].ninst; i++)
			nc[s->conns[fd].inst[i]]++;
		pins += chk_holder(&s->conns[fd].pins, &nrec, &nsoft, &c.bad);
	}
	for (i = 0; i < s->nlease_slots; i++)
		if (s->leases[i].id)
			nl[s->leases[i].owner]++;
	for (i = 0; i < s->ninst_slots; i++) {
		struct mds_inst *in = &s->insts[i];

		if (!in->id)
			continue;
		if (in->nregions != nr[i] || in->npeer != np[i] ||
		    in->npeer_gone != ng[i] || in->nconns != nc[i] ||
		    in->nleases != nl[i])
			goto out;
		if (!in->nregions && !in->nconns && !in->nleases &&
		    !in->pending)
			goto out; /* should have been collected */
		if (in->label >= s->nlabel_slots || !s->labels[in->label].id ||
		    s->labels[in->label].id_len != in->id_len ||
		    memcmp(s->labels[in->label].id, in->id, in->id_len))
			goto out;
		pins += chk_holder(&in->pins, &nrec, &nsoft, &c.bad);
	}
	/* each label: its owners' list, their counts and bytes, and its
	 * remote clients (theirs summed: the pool's) */
	for (i = 0, nreg = 0, cur = 0; i < s->nlabel_slots; i++) {
		const struct mds_label *lb = &s->labels[i];
		uint64_t bytes = 0, pend = 0;
		uint32_t o, n = 0, nrt = 0;

		if (!lb->id)
			continue;
		nreg++;
		for (o = lb->first; o != IX_NO_SLOT && n <= s->ninst_slots;
		     o = s->insts[o].sib_next, n++) {
			if (s->insts[o].label != i)
				goto out;
			bytes += s->insts[o].bytes;
			pend += s->insts[o].pending;
			nrt += s->insts[o].rt_on;
		}
		if (!n || n != lb->nowners || bytes != lb->bytes ||
		    pend != lb->pending || nrt != lb->rt.clients)
			goto out;
		cur += nrt;
	}
	if (nreg != s->label_map.count || cur != s->rt.clients)
		goto out;
	pins += chk_holder(&s->anon_pins, &nrec, &nsoft, &c.bad);
	if (c.bad || pins != c.pins || nrec != s->pin_map.count ||
	    nsoft != s->soft_recs)
		goto out;
	rc = 0;
out:
	free(c.refs);
	free(c.used);
	free(nr);
	free(np);
	free(ng);
	free(nc);
	free(nl);
	return rc;
}
