/* SPDX-License-Identifier: Apache-2.0 */
/*
 * owners.c - who holds what: instance ids (labels), owners, connections,
 * authority, leases, and dead clients (store.h, "Authority")
 *
 * An instance id is a label clients choose; any number of clients may
 * use one.  What a client allocates belongs to its owner (struct
 * mds_inst): the holder of one lease, or the lease-less connections that
 * claimed it.  Labels (struct mds_label) sum their owners' bytes for the
 * quota and group them for usage; an owner is forgotten when nothing of
 * it is left (regions, connections, leases, parked requests), and its
 * label with its last owner.
 *
 * Connections: every connection (fd) collects the owners claimed on it
 * (REQUEST/RETURN_ALLOC, HEARTBEAT, a REGISTER into their regions).  An
 * owner with live lease-less regions and no open connection left for
 * peer_grace_ns is declared dead: those regions become GONE (a later
 * write into one is taken as proof of life and revives them).
 *
 * Leases are renewed by HEARTBEAT; one that is not renewed within its
 * TTL ends, and with it its owner's hold on its regions and its pins
 * (regions.c decides what becomes of a region whose owner is done).
 * The ids of the last MDS_ENDED_LEASES ended leases are remembered: a
 * late renewal is told its lease expired.
 */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "log.h"
#include "stats.h"

/* ---- instance ids (labels) and their owners ----
 *
 * An instance id is a label that clients choose (a worker's configured
 * id, a uuid shared by the handlers of one MaruConfig); it owns nothing.
 * What a client allocates belongs to an *owner* (struct mds_inst): the
 * holder of one lease, or -- for a client without leases (an upstream
 * one) -- the connections that claimed a lease-less owner of that id.
 * Any number of owners may share a label: several handlers, threads or
 * processes, a restarted worker beside its dying predecessor.  Usage,
 * quotas, the event stream and the statistics group owners by label
 * (struct mds_label); authority is the owner's (see "Authority" in
 * store.h): nothing is granted by naming an instance id.
 */

uint32_t label_find(struct mds *s, struct mds_str id)
{
	struct ix_key k = str_key(id);
	struct ix_entry *e;

	if (!id.ptr)
		return IX_NO_SLOT;
	e = ix_find(&s->label_map, &k, ix_hash(&s->label_map, &k));
	return e ? e->slot : IX_NO_SLOT;
}

/* the label @id, created (and said to have joined) if new */
static uint32_t label_get(struct mds *s, struct mds_str id)
{
	struct ix_key k = str_key(id);
	struct mds_label *lb;
	struct ix_entry *e;
	uint32_t slot = label_find(s, id);

	if (slot != IX_NO_SLOT)
		return slot;
	if (s->label_free == IX_NO_SLOT) {
		uint32_t old = s->nlabel_slots, i;

		if (grow((void **)&s->labels, &s->nlabel_slots,
			 sizeof(*s->labels)) < 0)
			return IX_NO_SLOT;
		for (i = s->nlabel_slots; i-- > old;) {
			s->labels[i].next_free = s->label_free;
			s->label_free = i;
		}
	}
	slot = s->label_free;
	lb = &s->labels[slot];
	lb->id = dup_str(id);
	if (!lb->id)
		return IX_NO_SLOT;
	if (ix_insert(&s->label_map, &k, ix_hash(&s->label_map, &k), &e) < 0) {
		free(lb->id);
		lb->id = NULL;
		return IX_NO_SLOT;
	}
	s->label_free = lb->next_free;
	lb->id_len = id.len;
	lb->nowners = 0;
	lb->first = IX_NO_SLOT;
	lb->bytes = lb->pending = 0;
	memset(&lb->lk, 0, sizeof(lb->lk));
	memset(&lb->rt, 0, sizeof(lb->rt));
	lb->stores = lb->stored_bytes = 0;
	lb->ie = e;
	e->slot = slot;
	if (!s->replaying) {
		s->ctr.inst_joined++;
		log_info("instance %s: joined", lb->id);
	}
	return slot;
}

/* the last owner of label @slot went: forget it */
static void label_gc(struct mds *s, uint32_t slot)
{
	struct mds_label *lb = &s->labels[slot];

	if (lb->nowners)
		return;
	if (!s->replaying) {
		s->ctr.inst_left++;
		log_info("instance %s: left (no region, lease or connection "
			 "of it remains)",
			 lb->id);
	}
	ix_delete(&s->label_map, lb->ie);
	stats_forget(&s->stats, lb->id, lb->id_len);
	free(lb->id);
	memset(lb, 0, sizeof(*lb));
	lb->next_free = s->label_free;
	s->label_free = slot;
}

/*
 * A new owner under label @id: the holder of lease @lease, or (empty) a
 * lease-less one.  Its lease, if any, is the caller's to create.
 */
uint32_t inst_create(struct mds *s, struct mds_str id, struct mds_str lease)
{
	uint32_t slot, lab = label_get(s, id);
	struct mds_label *lb;
	struct mds_inst *in;

	if (lab == IX_NO_SLOT)
		return IX_NO_SLOT;
	if (s->inst_free == IX_NO_SLOT) {
		uint32_t old = s->ninst_slots, i;

		if (grow((void **)&s->insts, &s->ninst_slots,
			 sizeof(*s->insts)) < 0)
			goto fail;
		for (i = s->ninst_slots; i-- > old;) {
			s->insts[i].next_free = s->inst_free;
			s->inst_free = i;
		}
	}
	slot = s->inst_free;
	in = &s->insts[slot];
	in->id = dup_str(id);
	in->lease_id = lease.len ? dup_str(lease) : NULL;
	if (!in->id || (lease.len && !in->lease_id)) {
		free(in->id);
		free(in->lease_id);
		in->id = in->lease_id = NULL;
		goto fail;
	}
	s->inst_free = in->next_free;
	in->id_len = id.len;
	in->lease_len = lease.len;
	in->nregions = in->npeer = in->npeer_gone = in->nconns = 0;
	in->nleases = 0;
	in->bytes = in->pending = 0;
	in->dead_at = 0;
	in->last_fd = -1;
	in->host[0] = '\0';
	in->pid = 0;
	in->rt_on = false;
	in->hb_at = 0;
	in->pins.uid = ++s->next_uid;
	in->pins.owner1 = slot + 1;
	/* first in its label's list */
	lb = &s->labels[lab];
	in->label = lab;
	in->sib_prev = IX_NO_SLOT;
	in->sib_next = lb->first;
	if (lb->first != IX_NO_SLOT)
		s->insts[lb->first].sib_prev = slot;
	lb->first = slot;
	lb->nowners++;
	if (!s->replaying)
		log_dbg("instance %s: a client joined (%s; %u of them)", in->id,
			lease.len ? "with a lease" : "no lease", lb->nowners);
	return slot;
fail:
	label_gc(s, lab);
	return IX_NO_SLOT;
}

void mds_inst_label(struct mds *s, uint32_t slot, struct mds_str host,
		    uint64_t pid)
{
	struct mds_inst *in;
	size_t n;

	if (slot == IX_NO_SLOT || (!host.len && !pid))
		return;
	in = &s->insts[slot];
	if (host.len) {
		/* UTF-8 checked by the codec; cut at a character start */
		n = host.len < MDS_HOST_MAX ? host.len : MDS_HOST_MAX;
		while (n && n < host.len && (host.ptr[n] & 0xc0) == 0x80)
			n--;
		memcpy(in->host, host.ptr, n);
		in->host[n] = '\0';
	}
	if (pid && pid <= UINT32_MAX)
		in->pid = (uint32_t)pid;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* owner @in is a client of maru-agent, or no longer: @on */
static void inst_remote_on(struct mds *s, struct mds_inst *in, bool on)
{
	struct mds_label *lb = &s->labels[in->label];

	if (in->rt_on == on)
		return;
	in->rt_on = on;
	if (on) {
		lb->rt.clients++;
		s->rt.clients++;
	} else {
		lb->rt.clients--;
		s->rt.clients--;
	}
}

void mds_inst_remote(struct mds *s, uint32_t slot,
		     const struct mds_remote_rep *r)
{
	if (slot != IX_NO_SLOT && r->has_on)
		inst_remote_on(s, &s->insts[slot], r->on);
}

void mds_count_remote(struct mds *s, uint32_t label,
		      const struct mds_remote_rep *r)
{
	struct mds_remote *l = NULL;
	int i;

	if (label != IX_NO_SLOT && label < s->nlabel_slots &&
	    s->labels[label].id)
		l = &s->labels[label].rt;
	for (i = 0; i < MDS_RT_N; i++) {
		s->rt.n[i] = sat_add(s->rt.n[i], r->n[i]);
		if (l)
			l->n[i] = sat_add(l->n[i], r->n[i]);
	}
}

/* Forget an owner nobody refers to any more (and its label, if last). */
void inst_maybe_gc(struct mds *s, uint32_t slot)
{
	struct mds_inst *in = &s->insts[slot];
	struct mds_label *lb;
	uint32_t lab;

	if (!in->id || in->nregions || in->nconns || in->nleases || in->pending)
		return;
	/* nobody acts for it any more: its pages of others' regions go */
	pages_lose_holder(s, slot);
	/* (what it moved stays counted; it is no remote client now) */
	inst_remote_on(s, in, false);
	pins_release(s, &in->pins);
	if (!s->replaying)
		log_dbg("instance %s: a client left", in->id);
	free(in->pins.rec);
	free(in->nq);
	free(in->lease_id);
	free(in->id);
	lab = in->label;
	lb = &s->labels[lab];
	if (in->sib_prev != IX_NO_SLOT)
		s->insts[in->sib_prev].sib_next = in->sib_next;
	else
		lb->first = in->sib_next;
	if (in->sib_next != IX_NO_SLOT)
		s->insts[in->sib_next].sib_prev = in->sib_prev;
	lb->nowners--;
	memset(in, 0, sizeof(*in));
	in->next_free = s->inst_free;
	s->inst_free = slot;
	label_gc(s, lab);
}

/* its label's and its own byte counts move by @d (regions), @p (parked) */
void inst_bytes(struct mds *s, struct mds_inst *in, int64_t d, int64_t p)
{
	in->bytes += (uint64_t)d;
	s->labels[in->label].bytes += (uint64_t)d;
	in->pending += (uint64_t)p;
	s->labels[in->label].pending += (uint64_t)p;
}

/* (Re)compute when a lease-less instance would be declared dead. */
void inst_deadline(struct mds *s, struct mds_inst *in)
{
	if (!s->cfg.peer_grace_ns || in->nconns || !in->npeer) {
		in->dead_at = 0;
		return;
	}
	if (!in->dead_at)
		in->dead_at = s->vnow + s->cfg.peer_grace_ns;
}

/* ---- connections ---- */

static struct mds_conn *conn_of(struct mds *s, int fd)
{
	if (fd < 0 || fd >= s->nconn_slots || !s->conns[fd].open)
		return NULL;
	return &s->conns[fd];
}

void mds_conn_open(struct mds *s, int fd)
{
	struct mds_conn *c;

	if (fd < 0 || fd > (1 << 24))
		return;
	if (fd >= s->nconn_slots) {
		int n = s->nconn_slots ? s->nconn_slots : 64;
		struct mds_conn *v;

		while (n <= fd)
			n *= 2;
		v = realloc(s->conns, (size_t)n * sizeof(*v));
		if (!v)
			return; /* untracked: its instances just never die */
		memset(v + s->nconn_slots, 0,
		       (size_t)(n - s->nconn_slots) * sizeof(*v));
		s->conns = v;
		s->nconn_slots = n;
	}
	c = &s->conns[fd];
	if (c->open)
		mds_conn_close(s, fd); /* we missed its close event */
	c->open = true;
	c->gen++;
	c->has_rid = false;
	c->ninst = 0;
	c->pins.uid = ++s->next_uid;
	log_dbg("connection fd %d: accepted", fd);
}

void mds_conn_close(struct mds *s, int fd)
{
	struct mds_conn *c = conn_of(s, fd);
	uint32_t i, slot;

	if (!c)
		return;
	log_dbg("connection fd %d: closed (%u instance(s))", fd, c->ninst);
	c->open = false;
	pins_release(s, &c->pins);
	free(c->pins.rec);
	memset(&c->pins, 0, sizeof(c->pins));
	for (i = 0; i < c->ninst; i++) {
		slot = c->inst[i];
		if (!--s->insts[slot].nconns && !s->insts[slot].nleases)
			pins_release(s, &s->insts[slot].pins);
		inst_deadline(s, &s->insts[slot]);
		inst_maybe_gc(s, slot);
	}
	c->ninst = 0;
}

bool mds_conn_check(struct mds *s, struct mds_peer *peer)
{
	struct mds_conn *c = conn_of(s, peer->fd);

	if (!c)
		return true;
	if (!c->has_rid) {
		c->has_rid = true;
		c->rid_hash = peer->rid_hash;
		return true;
	}
	return c->rid_hash == peer->rid_hash;
}

static int peer_fd(struct mds_peer *p)
{
	if (p && p->fd == MDS_FD_LAZY)
		p->fd = p->resolve ? p->resolve(p) : -1;
	return p ? p->fd : -1;
}

/* @peer's connection, if tracked and not a newer one on a reused fd */
struct mds_conn *peer_conn(struct mds *s, struct mds_peer *peer)
{
	int fd = peer_fd(peer);
	struct mds_conn *c = conn_of(s, fd);

	if (!c || (c->has_rid && c->rid_hash != peer->rid_hash))
		return NULL;
	c->has_rid = true;
	c->rid_hash = peer->rid_hash;
	return c;
}

uint32_t mds_peer_label(struct mds *s, struct mds_peer *peer)
{
	struct mds_conn *c = peer ? peer_conn(s, peer) : NULL;

	return c && c->ninst ? s->insts[c->inst[0]].label : IX_NO_SLOT;
}

void mds_count_lookups(struct mds *s, struct mds_peer *peer, uint32_t label,
		       const struct mds_lookups *d)
{
	struct mds_lookups *l = NULL, v = *d;
	int i;

	/* (a client's figures: consistent, and never wrapping a counter) */
	if (v.n[MDS_LK_HITS] > v.n[MDS_LK_KEYS])
		v.n[MDS_LK_HITS] = v.n[MDS_LK_KEYS];
	if (v.n[MDS_LK_PREFIX_HITS] > v.n[MDS_LK_BATCH_KEYS])
		v.n[MDS_LK_PREFIX_HITS] = v.n[MDS_LK_BATCH_KEYS];

	/* the instance id its connection claimed first (lookups name none) */
	if (label == IX_NO_SLOT)
		label = mds_peer_label(s, peer);
	if (label != IX_NO_SLOT && label < s->nlabel_slots &&
	    s->labels[label].id)
		l = &s->labels[label].lk;
	for (i = 0; i < MDS_LK_N; i++) {
		s->lk.n[i] = sat_add(s->lk.n[i], v.n[i]);
		if (l)
			l->n[i] = sat_add(l->n[i], v.n[i]);
	}
}

static bool conn_has(const struct mds_conn *c, uint32_t slot)
{
	uint32_t i;

	for (i = c->ninst; i-- > 0;)
		if (c->inst[i] == slot)
			return true;
	return false;
}

/* the connection @slot was last attributed to, still open: a cheap check */
static bool last_conn(struct mds *s, struct mds_peer *peer, uint32_t slot)
{
	struct mds_inst *in = &s->insts[slot];

	return in->last_fd >= 0 && in->last_rid == peer->rid_hash &&
	       in->last_fd < s->nconn_slots && s->conns[in->last_fd].open &&
	       s->conns[in->last_fd].gen == in->last_gen &&
	       (peer->fd == MDS_FD_LAZY || peer->fd == in->last_fd);
}

/*
 * Attribute @peer's connection to instance @slot.
 * Return: whether it is (now) one of the instance's connections.
 */
static bool attach(struct mds *s, struct mds_peer *peer, uint32_t slot)
{
	struct mds_inst *in = &s->insts[slot];
	struct mds_conn *c;

	if (last_conn(s, peer, slot))
		return true;
	c = peer_conn(s, peer);
	if (!c)
		return false;
	if (!conn_has(c, slot)) {
		if (c->ninst >= MDS_CONN_MAX_INST)
			return false;
		if (c->ninst == c->cap) {
			uint32_t cap = c->cap ? c->cap * 2 : 2;
			uint32_t *v = realloc(c->inst, cap * sizeof(*v));

			if (!v)
				return false;
			c->inst = v;
			c->cap = cap;
		}
		c->inst[c->ninst++] = slot;
		in->nconns++;
		inst_deadline(s, in);
		log_dbg("instance %s: claimed on connection fd %d", in->id,
			peer->fd);
	}
	/* remembered only once it is true (the fast path trusts it) */
	in->last_fd = peer->fd;
	in->last_gen = c->gen;
	in->last_rid = peer->rid_hash;
	return true;
}

/* a lease-less owner that nobody holds: a reconnecting client takes it */
static bool inst_free_leaseless(const struct mds_inst *in)
{
	return !in->lease_id && !in->nconns && !in->nleases;
}

/*
 * May @peer act for owner @slot (store.h, "Authority")?  Yes when its
 * connection is the owner's, when it presents the owner's active lease
 * @lslot, or when the owner is lease-less and free.  No peer: a trusted
 * caller.
 */
bool may_act(struct mds *s, struct mds_peer *peer, uint32_t slot,
	     uint32_t lslot)
{
	struct mds_inst *in = &s->insts[slot];
	struct mds_conn *c;

	if (!peer || last_conn(s, peer, slot))
		return true;
	c = peer_conn(s, peer);
	if (!c)
		return false;
	if (conn_has(c, slot))
		return true;
	if (lslot != IX_NO_SLOT && s->leases[lslot].owner == slot)
		return true;
	return inst_free_leaseless(in);
}

/*
 * may_act(), and then the connection is the owner's.  A lease @lslot
 * that belongs to another owner proves nothing: refused.
 */
bool claim(struct mds *s, struct mds_peer *peer, uint32_t slot, uint32_t lslot)
{
	if ((lslot != IX_NO_SLOT && s->leases[lslot].owner != slot) ||
	    !may_act(s, peer, slot, lslot)) {
		log_dbg("instance %s: a client's region or pin refused to "
			"connection fd %d (not its owner)",
			s->insts[slot].id, peer ? peer->fd : -1);
		return false;
	}
	return !peer || attach(s, peer, slot);
}

bool inst_is(const struct mds_inst *in, struct mds_str id)
{
	return in->id_len == id.len &&
	       (!id.len || !memcmp(in->id, id.ptr, id.len));
}

/*
 * An owner of label @lab that @peer's connection belongs to (no peer, a
 * trusted caller: the label's first lease-less owner, else its first).
 */
static uint32_t owner_on_conn(struct mds *s, struct mds_peer *peer,
			      uint32_t lab)
{
	uint32_t i, slot, any = IX_NO_SLOT;
	struct mds_conn *c;

	if (!peer) {
		for (slot = s->labels[lab].first; slot != IX_NO_SLOT;
		     slot = s->insts[slot].sib_next) {
			if (!s->insts[slot].lease_id)
				return slot;
			if (any == IX_NO_SLOT)
				any = slot;
		}
		return any;
	}
	c = peer_conn(s, peer);
	for (i = 0; c && i < c->ninst; i++)
		if (s->insts[c->inst[i]].label == lab)
			return c->inst[i];
	return IX_NO_SLOT;
}

/*
 * The owner a request naming instance @inst, with lease @lease (empty:
 * none), from @peer acts as (store.h, "Authority"): the lease's owner; a
 * new owner, with its lease, for a new lease; else the owner of @inst
 * @peer's connection belongs to; else a lease-less owner of @inst that
 * nobody holds; else a new lease-less one.  With !@create, nothing is
 * made.  *@lslot: the lease's slot (IX_NO_SLOT: none).
 * Return: the owner's slot, or IX_NO_SLOT with *@err: -EPERM (the lease
 * is another instance id's), -ENOENT (none, !@create), -ENOMEM.
 */
uint32_t owner_resolve(struct mds *s, struct mds_str inst, struct mds_str lease,
		       struct mds_peer *peer, bool create, uint32_t *lslot,
		       int *err)
{
	uint32_t lab, slot;

	*lslot = IX_NO_SLOT;
	*err = -ENOENT;
	if (!s->cfg.lease_ttl_ns)
		lease.len = 0; /* no leases granted: a lease id is nothing */
	if (lease.len) {
		*lslot = lease_find(s, lease);
		if (*lslot != IX_NO_SLOT) {
			slot = s->leases[*lslot].owner;
			if (inst_is(&s->insts[slot], inst))
				return slot;
			*lslot = IX_NO_SLOT;
			*err = -EPERM;
			return IX_NO_SLOT;
		}
		if (!create)
			return IX_NO_SLOT;
		*err = -ENOMEM;
		slot = inst_create(s, inst, lease);
		if (slot == IX_NO_SLOT)
			return IX_NO_SLOT;
		*lslot = lease_create(s, lease, slot);
		if (*lslot == IX_NO_SLOT) {
			inst_maybe_gc(s, slot);
			return IX_NO_SLOT;
		}
		return slot;
	}
	lab = label_find(s, inst);
	if (lab != IX_NO_SLOT) {
		slot = owner_on_conn(s, peer, lab);
		if (slot != IX_NO_SLOT)
			return slot;
		for (slot = s->labels[lab].first; slot != IX_NO_SLOT;
		     slot = s->insts[slot].sib_next)
			if (inst_free_leaseless(&s->insts[slot]))
				return slot;
	}
	if (!create)
		return IX_NO_SLOT;
	slot = inst_create(s, inst, (struct mds_str){NULL, 0});
	*err = -ENOMEM;
	return slot;
}

/* the owner @w waits for, if it is still there */
uint32_t wait_owner(const struct mds *s, const struct mds_wait *w)
{
	return w->oslot < s->ninst_slots && s->insts[w->oslot].id &&
			       s->insts[w->oslot].pins.uid == w->ouid
		       ? w->oslot
		       : IX_NO_SLOT;
}

/* Owner proved alive: regions GONE by peer detection are LIVE again. */
void revive(struct mds *s, uint32_t slot)
{
	struct mds_inst *in = &s->insts[slot];
	uint32_t i;

	if (!in->npeer_gone)
		return;
	log_info("instance %s: seen again, its regions are live again", in->id);
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		struct mds_region *r = &s->regions[i];

		if (r->owner == slot && r->state == REG_GONE &&
		    r->gone_why == GONE_PEER) {
			region_set(s, r, REG_LIVE, 0);
			if (r->deferred) {
				r->deferred = 0;
				s->ndeferred--;
			}
		}
	}
}

/* ---- leases ---- */

bool lease_ended(struct mds *s, struct mds_str id)
{
	struct ix_key k = str_key(id);

	return ix_find(&s->ended, &k, ix_hash(&s->ended, &k)) != NULL;
}

uint32_t lease_find(struct mds *s, struct mds_str id)
{
	struct ix_key k = str_key(id);
	struct ix_entry *e;

	e = ix_find(&s->lease_map, &k, ix_hash(&s->lease_map, &k));
	return e ? e->slot : IX_NO_SLOT;
}

uint32_t lease_create(struct mds *s, struct mds_str id, uint32_t owner)
{
	struct ix_key k = str_key(id);
	struct mds_lease *l;
	struct ix_entry *e;
	uint32_t slot;

	if (s->nleases >= MDS_MAX_LEASES) {
		log_warn("lease limit (%u) reached; not granting another",
			 MDS_MAX_LEASES);
		return IX_NO_SLOT;
	}
	if (s->lease_free == IX_NO_SLOT) {
		uint32_t old = s->nlease_slots, i;

		if (grow((void **)&s->leases, &s->nlease_slots,
			 sizeof(*s->leases)) < 0)
			return IX_NO_SLOT;
		for (i = s->nlease_slots; i-- > old;) {
			s->leases[i].next_free = s->lease_free;
			s->lease_free = i;
		}
	}
	slot = s->lease_free;
	l = &s->leases[slot];
	l->id = dup_str(id);
	if (!l->id)
		return IX_NO_SLOT;
	if (ix_insert(&s->lease_map, &k, ix_hash(&s->lease_map, &k), &e) < 0) {
		free(l->id);
		l->id = NULL;
		return IX_NO_SLOT;
	}
	s->lease_free = l->next_free;
	l->id_len = id.len;
	l->nregions = 0;
	l->owner = owner;
	s->insts[owner].nleases++;
	l->deadline = s->vnow + s->cfg.lease_ttl_ns;
	l->ie = e;
	e->slot = slot;
	s->nleases++;
	if (s->jr)
		jr_put_lease(s->jr, l->id, l->id_len, s->insts[owner].id,
			     s->insts[owner].id_len);
	return slot;
}

/* Remember @id as ended (bounded FIFO: the oldest is forgotten). */
void remember_ended(struct mds *s, struct mds_str id)
{
	struct ix_key k = str_key(id);
	struct ix_entry *e;

	if (s->jr)
		jr_put_lease_end(s->jr, id.ptr, id.len);
	if (s->ended_n == MDS_ENDED_LEASES) {
		ix_delete(&s->ended, s->ended_ring[s->ended_pos]);
		s->ended_pos = (s->ended_pos + 1) % MDS_ENDED_LEASES;
		s->ended_n--;
	}
	if (ix_insert(&s->ended, &k, ix_hash(&s->ended, &k), &e) != 1)
		return;
	s->ended_ring[(s->ended_pos + s->ended_n) % MDS_ENDED_LEASES] = e;
	s->ended_n++;
}

/*
 * End a lease: its live regions lose their owner (empty ones are freed
 * now, the others when their last entry goes), its instance's pins are
 * released and its id is remembered.
 */
void lease_end(struct mds *s, uint32_t slot, bool expired)
{
	struct mds_lease *l = &s->leases[slot];
	struct mds_str id = {l->id, l->id_len};
	uint32_t owner = l->owner;

	if (expired)
		log_info("lease %s: expired, %u region(s) lose their owner",
			 l->id, l->nregions);
	regions_lose_owner(s, owner, slot);
	remember_ended(s, id);
	ix_delete(&s->lease_map, l->ie);
	free(l->id);
	memset(l, 0, sizeof(*l));
	l->next_free = s->lease_free;
	s->lease_free = slot;
	s->nleases--;
	if (expired)
		s->ctr.lease_expired++;
	s->insts[owner].nleases--;
	pins_release(s, &s->insts[owner].pins);
	inst_maybe_gc(s, owner);
}

uint32_t mds_inst_named(struct mds *s, struct mds_str inst,
			struct mds_str lease, struct mds_peer *peer)
{
	uint32_t lslot;
	int err;

	return owner_resolve(s, inst, lease, peer, false, &lslot, &err);
}

uint32_t mds_inst_for(struct mds *s, struct mds_str inst, struct mds_str lease,
		      struct mds_peer *peer)
{
	uint32_t lslot, slot;
	int err;

	slot = owner_resolve(s, inst, lease, peer, false, &lslot, &err);
	if (slot == IX_NO_SLOT || lslot != IX_NO_SLOT || !peer ||
	    last_conn(s, peer, slot))
		return slot;
	/* without a lease: only an owner the connection belongs to (not a
	 * free lease-less one it did not claim) */
	return owner_on_conn(s, peer, s->insts[slot].label) == slot
		       ? slot
		       : IX_NO_SLOT;
}

/* ---- leases and peers ---- */

int mds_heartbeat(struct mds *s, struct mds_str inst, struct mds_str lease,
		  bool release, bool notices, struct mds_peer *peer)
{
	bool leased = s->cfg.lease_ttl_ns && lease.ptr && lease.len;
	uint32_t islot, lslot;
	int err;

	if (!inst.ptr || !inst.len)
		return 0; /* a ping: leases belong to an instance */
	if (!leased) {
		/* a keep-alive proves nothing and claims nothing: another
		 * connection of the owner (a heartbeat thread's) must not
		 * take it, nor be refused */
		islot = owner_resolve(s, inst, lease, peer, false, &lslot,
				      &err);
		if (islot != IX_NO_SLOT &&
		    (!peer || last_conn(s, peer, islot) ||
		     owner_on_conn(s, peer, s->insts[islot].label) == islot)) {
			revive(s, islot);
			if (notices) {
				s->insts[islot].notices = true;
				s->insts[islot].hb_at = s->vnow;
			}
		}
		return 0;
	}
	if (lease_ended(s, lease))
		return 1;
	/* a new owner needs a connection, and ending a lease makes none */
	islot = owner_resolve(s, inst, lease, peer,
			      !release && (!peer || peer_conn(s, peer)), &lslot,
			      &err);
	if (islot == IX_NO_SLOT) {
		if (release)
			remember_ended(s, lease);
		return err == -EPERM ? -EPERM : 0;
	}
	if (!claim(s, peer, islot, lslot)) {
		inst_maybe_gc(s, islot);
		return -EPERM;
	}
	revive(s, islot);
	if (notices) {
		s->insts[islot].notices = true;
		s->insts[islot].hb_at = s->vnow;
	}
	if (release)
		lease_end(s, lslot, false);
	else
		s->leases[lslot].deadline = s->vnow + s->cfg.lease_ttl_ns;
	inst_maybe_gc(s, islot);
	return 0;
}

void declare_dead(struct mds *s, uint32_t slot)
{
	struct mds_inst *in = &s->insts[slot];

	log_info("instance %s: no connection left for %llu ms, %u region(s) "
		 "lose their owner",
		 in->id, (unsigned long long)(s->cfg.peer_grace_ns / 1000000),
		 in->npeer);
	in->dead_at = 0;
	s->ctr.peer_dead++;
	regions_lose_owner(s, slot, IX_NO_SLOT); /* may free the owner */
}
