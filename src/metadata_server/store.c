/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c - regions, instances, leases, connections and the KV semantics
 * of maru-server (see store.h)
 *
 * Region lifecycle (docs/metadata-server.md, with our detection):
 *
 *	REQUEST_ALLOC --> LIVE --RETURN_ALLOC------------> RETURNED
 *	                   |                                  |
 *	                   +--lease expired / peer dead--> GONE
 *	                                                      |
 *	   (RETURNED or GONE) and refs == 0 --> FREE at the RM, forgotten
 *
 * "refs" counts the KV entries pointing at the region; a region leaves
 * the table only when its owner is done with it (returned, or detected
 * dead) and no entry references it.  Registrations into a region whose
 * lease ended are refused; into a region whose owner was declared dead
 * by connection tracking they are taken as proof of life instead and
 * revive the owner (that detection is a heuristic, the lease is not).
 *
 * Entries name their region by slot (32 bits), never by pointer; a slot
 * is reused only after its region left the table, which requires refs ==
 * 0, so no entry can point at a reused slot.  An entry registered against
 * a region id the server does not track gets IX_NO_SLOT and never
 * resolves in LOOKUP (upstream: same, unless that id is allocated later).
 *
 * Dead-client detection without leases: every connection (fd) collects
 * the instances claimed on it (REQUEST/RETURN_ALLOC, HEARTBEAT, a
 * REGISTER into their regions; see "Authority" in store.h).  An instance
 * that owns live lease-less regions and has no open connection left for
 * peer_grace_ns is declared dead: those regions become GONE.
 *
 * Pins: mds.pin_map holds one record per (KV entry, holder) with the
 * holder's count (ix_entry.off) and its position in the holder's array
 * (ix_entry.len); ix_entry.pins of the KV entry is the sum over holders.
 * A pinned entry is never deleted, so a record's entry address stays
 * valid.  A holder's pins are released with it: a connection's when it
 * closes, an instance's when one of its leases ends or its last
 * connection closes while it has no lease.
 *
 * Ownership: the store owns every string it keeps (instance and lease
 * ids are copied); request data is borrowed only for the call.
 */
#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "journal.h"
#include "pubidx.h"
#include "log.h"
#include "util.h"

#define HOLDER_MAX_PINS (1u << 20) /* distinct keys one holder may pin */

/* ---- small helpers ---- */

static struct ix_key str_key(struct mds_str s)
{
	struct ix_key k = {(const uint8_t *)s.ptr, s.len, IX_STR};

	return k;
}

static struct ix_key id_key(const uint64_t *id_le, uint8_t *buf)
{
	struct ix_key k = {buf, 8, IX_UINT};

	put_u64le(buf, *id_le);
	return k;
}

static char *dup_str(struct mds_str s)
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
static int grow(void **v, uint32_t *n, size_t size)
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

/* ---- journal records, as changes are made (see "Journal") ---- */

static void log_region(struct mds *s, const struct mds_region *r)
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

static void log_key(struct mds *s, const struct ix_entry *e)
{
	if (s->jr)
		jr_put_key(s->jr, ix_entry_tag(e), e->key, ix_entry_klen(e),
			   e->slot == IX_NO_SLOT
				   ? UINT64_MAX
				   : s->regions[e->slot].h.region_id,
			   e->off, e->len, e->gen);
}

static void log_del(struct mds *s, const struct ix_entry *e)
{
	if (s->jr)
		jr_put_del(s->jr, ix_entry_tag(e), e->key, ix_entry_klen(e));
}

/* the count @hp now holds on @e, if @hp is an instance's */
static void log_pin(struct mds *s, const struct mds_pins *hp,
		    const struct ix_entry *e, uint64_t count)
{
	const struct mds_inst *in;

	if (!s->jr || !hp->owner1)
		return;
	in = &s->insts[hp->owner1 - 1];
	jr_put_pin(s->jr, in->id, in->id_len, in->lease_id, in->lease_len,
		   ix_entry_tag(e), e->key, ix_entry_klen(e), count);
}

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

static uint32_t label_find(struct mds *s, struct mds_str id)
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
static uint32_t inst_create(struct mds *s, struct mds_str id,
			    struct mds_str lease)
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

static void pins_release(struct mds *s, struct mds_pins *hp);
static void snap_tick(struct mds *s, uint64_t ns);

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

/* Forget an owner nobody refers to any more (and its label, if last). */
static void inst_maybe_gc(struct mds *s, uint32_t slot)
{
	struct mds_inst *in = &s->insts[slot];
	struct mds_label *lb;
	uint32_t lab;

	if (!in->id || in->nregions || in->nconns || in->nleases || in->pending)
		return;
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
static void inst_bytes(struct mds *s, struct mds_inst *in, int64_t d, int64_t p)
{
	in->bytes += (uint64_t)d;
	s->labels[in->label].bytes += (uint64_t)d;
	in->pending += (uint64_t)p;
	s->labels[in->label].pending += (uint64_t)p;
}

/* (Re)compute when a lease-less instance would be declared dead. */
static void inst_deadline(struct mds *s, struct mds_inst *in)
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
static struct mds_conn *peer_conn(struct mds *s, struct mds_peer *peer)
{
	int fd = peer_fd(peer);
	struct mds_conn *c = conn_of(s, fd);

	if (!c || (c->has_rid && c->rid_hash != peer->rid_hash))
		return NULL;
	c->has_rid = true;
	c->rid_hash = peer->rid_hash;
	return c;
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
static bool may_act(struct mds *s, struct mds_peer *peer, uint32_t slot,
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
static bool claim(struct mds *s, struct mds_peer *peer, uint32_t slot,
		  uint32_t lslot)
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

static bool inst_is(const struct mds_inst *in, struct mds_str id)
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

static uint32_t lease_find(struct mds *s, struct mds_str id);
static uint32_t lease_create(struct mds *s, struct mds_str id, uint32_t owner);

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
static uint32_t owner_resolve(struct mds *s, struct mds_str inst,
			      struct mds_str lease, struct mds_peer *peer,
			      bool create, uint32_t *lslot, int *err)
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
static uint32_t wait_owner(const struct mds *s, const struct mds_wait *w)
{
	return w->oslot < s->ninst_slots && s->insts[w->oslot].id &&
			       s->insts[w->oslot].pins.uid == w->ouid
		       ? w->oslot
		       : IX_NO_SLOT;
}

/* ---- pins ---- */

struct pin_key {
	uint64_t entry; /* address of the KV entry */
	uint64_t uid;	/* the holder's */
};

static struct ix_key pin_key(const struct ix_entry *e,
			     const struct mds_pins *hp, struct pin_key *b)
{
	struct ix_key k = {(const uint8_t *)b, sizeof(*b), IX_BIN};

	b->entry = (uint64_t)(uintptr_t)e;
	b->uid = hp->uid;
	return k;
}

static struct ix_entry *pin_entry(const struct ix_entry *rec)
{
	struct pin_key b;

	memcpy(&b, rec->key, sizeof(b));
	return (struct ix_entry *)(uintptr_t)b.entry;
}

static struct ix_entry *pin_find(struct mds *s, const struct ix_entry *e,
				 const struct mds_pins *hp)
{
	struct pin_key b;
	struct ix_key k = pin_key(e, hp, &b);

	return ix_find(&s->pin_map, &k, ix_hash(&s->pin_map, &k));
}

/* one more pin of @e by @hp. Return: 0, -ENOSPC (holder's cap), -ENOMEM */
static int pin_add(struct mds *s, struct ix_entry *e, struct mds_pins *hp)
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
	if (rec) {
		rec->off++;
		e->pins++;
		log_pin(s, hp, e, rec->off);
		return 0;
	}
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
		hp->rec[hp->n++] = rec;
		hp->bytes += e->len;
	}
	rec->off++;
	if (!e->pins++) {
		/* pins are absolute: out of the eviction order */
		pol_remove(&s->pol, e);
		s->pinned_bytes += e->len;
	}
	log_pin(s, hp, e, rec->off);
	return 0;
}

/* @e lost its last pin: evictable again, and that was a use */
static void unpinned(struct mds *s, struct ix_entry *e)
{
	s->pinned_bytes -= e->len;
	if (e->slot != IX_NO_SLOT)
		pol_add(&s->pol, e);
}

/* drop one pin (@all: every pin) of record @rec of holder @hp */
static void pin_put(struct mds *s, struct mds_pins *hp, struct ix_entry *rec,
		    bool all)
{
	struct ix_entry *e = pin_entry(rec);
	uint32_t i = (uint32_t)rec->len;

	if (!all && rec->off > 1) {
		rec->off--;
		if (!--e->pins)
			unpinned(s, e);
		log_pin(s, hp, e, rec->off);
		return;
	}
	log_pin(s, hp, e, 0);
	e->pins -= (uint32_t)rec->off;
	if (!e->pins)
		unpinned(s, e);
	hp->bytes -= e->len;
	hp->rec[i] = hp->rec[--hp->n];
	hp->rec[i]->len = i;
	ix_delete(&s->pin_map, rec);
}

static void pins_release(struct mds *s, struct mds_pins *hp)
{
	while (hp->n)
		pin_put(s, hp, hp->rec[hp->n - 1], true);
}

/* ---- regions ---- */

static struct mds_region *region_find(struct mds *s, uint64_t id,
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

/* Move a region to @state, keeping the owner's counters right. */
static void region_set(struct mds *s, struct mds_region *r, uint8_t state,
		       uint8_t why)
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
static void queue_free(struct mds *s, const struct rm_handle *h)
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

static void flush_pending(struct mds *s)
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
static void region_forget(struct mds *s, uint32_t slot)
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
	memset(r, 0, sizeof(*r));
	r->next = s->reg_free;
	s->reg_free = slot;
	inst_maybe_gc(s, owner);
}

/* a region emptied for instance @islot's request was freed: its waiting
 * request (if it still waits) is served first (cap_serve) */
static void earmark(struct mds *s, uint32_t islot)
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

/*
 * The region's owner is done and no entry refers to it: drop it from the
 * table and free it at the RM (now, or from the retry queue).
 */
static void region_release(struct mds *s, uint32_t slot)
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
static void region_done(struct mds *s, uint32_t slot)
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

static int region_add(struct mds *s, const struct rm_handle *h, uint32_t owner,
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

/* Owner proved alive: regions GONE by peer detection are LIVE again. */
static void revive(struct mds *s, uint32_t slot)
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

static bool lease_ended(struct mds *s, struct mds_str id)
{
	struct ix_key k = str_key(id);

	return ix_find(&s->ended, &k, ix_hash(&s->ended, &k)) != NULL;
}

static uint32_t lease_find(struct mds *s, struct mds_str id)
{
	struct ix_key k = str_key(id);
	struct ix_entry *e;

	e = ix_find(&s->lease_map, &k, ix_hash(&s->lease_map, &k));
	return e ? e->slot : IX_NO_SLOT;
}

static uint32_t lease_create(struct mds *s, struct mds_str id, uint32_t owner)
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
static void remember_ended(struct mds *s, struct mds_str id)
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
static void lease_end(struct mds *s, uint32_t slot, bool expired)
{
	struct mds_lease *l = &s->leases[slot];
	struct mds_str id = {l->id, l->id_len};
	uint32_t i, nx, owner = l->owner;

	if (expired)
		log_info("lease %s: expired, %u region(s) lose their owner",
			 l->id, l->nregions);
	for (i = s->reg_head; l->nregions && i != IX_NO_SLOT; i = nx) {
		struct mds_region *r = &s->regions[i];

		nx = r->next;
		if (r->lease != slot)
			continue;
		if (r->state == REG_LIVE)
			region_set(s, r, REG_GONE, GONE_LEASE);
		if (r->refs == 0) {
			region_done(s, i);
			if (r->state == REG_UNUSED)
				continue;
		}
		r->lease = IX_NO_SLOT;
		l->nregions--;
		log_region(s, r);
	}
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

/* ---- eviction ---- */

#define EVICT_SKIP_MAX 1024	     /* unreclaimable entries passed per pass */
#define EVICT_TICK_KEYS 50000	     /* background victims per tick */
#define EVICT_WALK_MAX 100000	     /* entries walked to choose victims */
#define EVICT_TICK_REGIONS 4	     /* done owners' regions emptied per tick */
#define WANTED_NS 2000000000ull	     /* a region asked back counts that long */
#define EVICT_LOG_NS 1000000000ull   /* a burst ends after 1 s without one */
#define EVICT_FULL_NS 10000000000ull /* "full" lasts 10 s after the RM said */
#define NOTICE_RESEND_NS 2000000000ull	/* unacknowledged: sent again */
#define NOTICE_GIVEUP_NS 30000000000ull /* ... and given up on */

static bool evict_on(const struct mds *s)
{
	return pol_evicts(&s->pol);
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

	return r->state != REG_LIVE || s->insts[r->owner].notices;
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

static bool owner_here(const struct mds *s, const struct mds_region *r)
{
	const struct mds_inst *in = &s->insts[r->owner];

	return in->notices && (in->nconns || s->vnow - in->hb_at < HERE_NS);
}

/* queue "page (@rid, @off) was evicted" for @in. Return: 0 or -ENOMEM */
static int notice_push(struct mds *s, struct mds_inst *in, uint64_t rid,
		       uint64_t off, uint64_t gen)
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
		rid, off, gen, s->vnow + s->cfg.evict_grace_ns};
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
	uint32_t slot = e->slot;
	struct mds_region *r = &s->regions[slot];
	struct mds_inst *in = &s->insts[r->owner];

	if (r->state != REG_LIVE)
		why = EV_OWNER_GONE;

	pol_remove(&s->pol, e);
	s->ctr.evictions[why]++;
	s->ctr.evicted_bytes[why] += e->len;
	s->burst_keys++;
	s->burst_bytes += e->len;
	s->burst_last = s->vnow;
	s->kv_bytes -= e->len;
	r->refs--;
	r->used -= e->len;
	r->evicted = 1;
	r->quiet_at = s->vnow + s->cfg.evict_grace_ns;
	if (r->state == REG_LIVE && in->notices)
		(void)notice_push(s, in, r->h.region_id, e->off, e->gen);
	log_del(s, e);
	pub_del(s->pub, e); /* before an event can tell of it */
	ev_removed(s->ev, ix_entry_tag(e), e->key, ix_entry_klen(e),
		   why == EV_OWNER_GONE ? EVR_OWNER_GONE : EVR_EVICTED);
	ix_delete(&s->kv, e);
	if (r->refs == 0 && r->state != REG_LIVE)
		region_done(s, slot);
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
static uint64_t evict_some(struct mds *s, uint64_t bytes, uint64_t max_keys)
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
		if (r->state == REG_LIVE && !owner_here(s, r)) {
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
static uint64_t evict_own(struct mds *s, uint32_t islot, uint64_t bytes,
			  uint32_t walk, int why)
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
static bool notices_due(struct mds *s, const struct mds_inst *in)
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
		if (!r || r->owner != islot || r->state != REG_LIVE)
			continue; /* freed, returned, gone: not its page now */
		out[3 * n] = q->region_id;
		out[3 * n + 1] = q->off;
		out[3 * n + 2] = q->gen;
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
static bool pool_full(const struct mds *s)
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

static uint64_t waiting_bytes(struct mds *s);

uint32_t mds_release_wanted(struct mds *s, uint32_t islot, uint64_t *out,
			    uint32_t max, bool only_wanted)
{
	uint32_t i, n = 0;
	bool waits, wanted;

	if (islot == IX_NO_SLOT || !mds_under_pressure(s))
		return 0;
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
		if ((r->wanted && wanted) || (!waits && r->evicted && !r->refs))
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
			    ? r->evicted && !r->refs && owner_here(s, r) &&
				      r->quiet_at + WANTED_NS > s->vnow
			    : r->deferred)
			n += r->h.length;
	}
	return n;
}

/* bytes the REQUEST_ALLOCs waiting for a region ask for (not those at
 * their quota, nor those with pages of their own coming: those are
 * answered with the pages) */
static uint64_t waiting_bytes(struct mds *s)
{
	const struct mds_wait *w;
	uint64_t n = 0;

	for (w = s->cap_head; w; w = w->next)
		if (!w->cap_quota && !mds_notices_pending(s, wait_owner(s, w)))
			n += w->size;
	return n;
}

/* ---- REQUEST_ALLOCs waiting for capacity ---- */

static void cap_append(struct mds *s, struct mds_wait *w)
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
 * The RM has no room for @w (a REQUEST_ALLOC by a live requester): evict,
 * then answer with the requester's own reclaimed pages, or wait for a
 * region to be freed (by the grace, or an owner asked to give one back).
 * Return: MDS_RC_RECLAIMED, -EINPROGRESS (parked here: @w is answered
 * through its done()), or -ENOSPC (nothing to wait for).
 */
static int reclaim_for(struct mds *s, struct mds_wait *w)
{
	uint32_t islot = wait_owner(s, w);
	uint64_t got = 0;

	s->full_at = s->vnow;
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
		if (w->cap_quota || mds_notices_pending(s, islot))
			continue;
		if (coming_bytes(s) < waiting_bytes(s))
			empty_a_region(s, islot, false);
		break;
	}
	for (w = s->cap_head; w; w = next) {
		next = w->next;
		islot = wait_owner(s, w);
		if (own_pages(s, w, islot) ||
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
			rc = s->rm->alloc(s->rm_arg, w->size, w, &h);
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

static void evict_tick(struct mds *s)
{
	uint64_t total, avail, low;
	uint32_t i;

	if (!evict_on(s))
		return;
	if (!s->pool_at || s->vnow - s->pool_at >= 1000000000ull) {
		s->pool_at = s->vnow;
		s->reg_rate = (s->reg_rate + s->reg_bytes) / 2;
		s->reg_bytes = 0;
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
	if (s->ncap)
		cap_serve(s);
	if (s->any_wanted && !waiting_bytes(s)) {
		/* nobody waits for a region any more: none is wanted */
		for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
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
static void deferred_tick(struct mds *s)
{
	uint32_t i, nx;

	for (i = s->reg_head; s->ndeferred && i != IX_NO_SLOT; i = nx) {
		struct mds_region *r = &s->regions[i];

		nx = r->next;
		if (r->deferred && !r->refs && r->state != REG_LIVE &&
		    r->quiet_at <= s->vnow)
			region_release(s, i);
	}
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
		rc = s->rm->alloc(s->rm_arg, size, w, &h);
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
		struct mds_peer *peer)
{
	struct mds_region *r;
	struct mds_inst *in;
	uint32_t slot;

	r = region_find(s, region_id, &slot);
	if (!r)
		return false;
	in = &s->insts[r->owner];
	if (in->id_len != inst.len || memcmp(in->id, inst.ptr, inst.len))
		return false;
	if (!claim(s, peer, r->owner, IX_NO_SLOT))
		return false;
	if (r->state == REG_LIVE && r->evicted && !r->refs)
		s->ctr.released++; /* given back after eviction emptied it */
	if (r->state == REG_LIVE)
		region_set(s, r, REG_RETURNED, 0);
	if (r->refs == 0)
		region_done(s, slot);
	return true;
}

/* ---- KV ---- */

int mds_register(struct mds *s, const struct mds_reg *reg,
		 struct mds_peer *peer)
{
	struct ix_key k = mds_key_ix(&reg->key);
	uint64_t h = ix_hash(&s->kv, &k);
	struct mds_region *r;
	struct ix_entry *e;
	uint32_t slot = IX_NO_SLOT;
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
	/* a location must lie inside its region (issue 12) */
	if (r && (reg->kv_offset > r->h.length ||
		  reg->kv_length > r->h.length - reg->kv_offset))
		return -ERANGE;
	if (r && r->state == REG_GONE && r->gone_why == GONE_LEASE)
		return -EPERM;
	/* only the owner writes into its region (issue 12) */
	if (r && !claim(s, peer, r->owner, IX_NO_SLOT))
		return -EPERM;
	if (r && r->state == REG_GONE)
		revive(s, r->owner); /* a write is proof of life */
	rc = ix_insert(&s->kv, &k, h, &e);
	if (rc <= 0)
		return rc;
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
		pol_add(&s->pol, e); /* only these free anything if evicted */
	}
	log_key(s, e);
	pub_put(s->pub, e, r ? r->h.region_id : 0);
	ev_stored(s->ev, ix_entry_tag(e), e->key, ix_entry_klen(e),
		  r ? s->insts[r->owner].id : NULL,
		  r ? s->insts[r->owner].id_len : 0, reg->region_id, e->off,
		  e->len);
	return 1;
}

const struct ix_entry *mds_lookup(struct mds *s, const struct mds_key *k,
				  const struct mds_region **reg)
{
	struct ix_key x = mds_key_ix(k);
	struct ix_entry *e = ix_find(&s->kv, &x, ix_hash(&s->kv, &x));

	if (!e || e->slot == IX_NO_SLOT)
		return NULL;
	pol_touch(&s->pol, e);
	*reg = &s->regions[e->slot];
	return e;
}

bool mds_exists(struct mds *s, const struct mds_key *k)
{
	struct ix_key x = mds_key_ix(k);
	struct ix_entry *e = ix_find(&s->kv, &x, ix_hash(&s->kv, &x));

	if (e)
		pol_touch(&s->pol, e);
	return e != NULL;
}

bool mds_delete(struct mds *s, const struct mds_key *k, struct mds_peer *peer)
{
	struct ix_key x = mds_key_ix(k);
	struct ix_entry *e = ix_find(&s->kv, &x, ix_hash(&s->kv, &x));
	struct mds_region *r;
	uint32_t slot;

	if (!e || e->pins)
		return false;
	slot = e->slot;
	/* --owner-delete: a key in a live region is its owner's to delete */
	if (slot != IX_NO_SLOT && s->cfg.owner_delete &&
	    s->regions[slot].state == REG_LIVE &&
	    !may_act(s, peer, s->regions[slot].owner, IX_NO_SLOT))
		return false;
	if (slot != IX_NO_SLOT) {
		s->kv_bytes -= e->len;
		r = &s->regions[slot];
		r->refs--;
		r->used -= e->len;
		/* its owner learns it too: another client may have deleted
		 * it (its own delete freed the page; the notice then finds
		 * the registration gone and does nothing) */
		if (r->state == REG_LIVE && s->insts[r->owner].notices)
			(void)notice_push(s, &s->insts[r->owner],
					  r->h.region_id, e->off, e->gen);
	}
	pol_remove(&s->pol, e);
	log_del(s, e);
	pub_del(s->pub, e); /* before an event can tell of it */
	ev_removed(s->ev, ix_entry_tag(e), e->key, ix_entry_klen(e),
		   EVR_DELETED);
	ix_delete(&s->kv, e);
	if (slot != IX_NO_SLOT && s->regions[slot].refs == 0 &&
	    s->regions[slot].state != REG_LIVE)
		region_done(s, slot);
	return true;
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

bool mds_pin(struct mds *s, const struct mds_key *k, struct mds_peer *peer)
{
	struct ix_key x = mds_key_ix(k);
	struct ix_entry *e = ix_find(&s->kv, &x, ix_hash(&s->kv, &x));
	struct mds_pins *hp;

	if (!e)
		return false;
	hp = pin_holder(s, peer);
	return hp && pin_add(s, e, hp) == 0;
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

static void declare_dead(struct mds *s, uint32_t slot)
{
	struct mds_inst *in = &s->insts[slot];
	uint32_t i, nx;

	log_info("instance %s: no connection left for %llu ms, %u region(s) "
		 "lose their owner",
		 in->id, (unsigned long long)(s->cfg.peer_grace_ns / 1000000),
		 in->npeer);
	in->dead_at = 0;
	s->ctr.peer_dead++;
	for (i = s->reg_head; i != IX_NO_SLOT; i = nx) {
		struct mds_region *r = &s->regions[i];

		nx = r->next;
		if (r->owner != slot || r->state != REG_LIVE ||
		    r->lease != IX_NO_SLOT)
			continue;
		region_set(s, r, REG_GONE, GONE_PEER);
		if (r->refs == 0)
			region_done(s, i); /* may free the instance */
	}
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

/* ---- journal (issue 14) ----
 *
 * Journal.  Every change to what a restart must keep is appended to
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

static struct mds_str rec_str(const struct jr_bytes *b)
{
	struct mds_str v = {(const char *)b->p, b->len};

	return v;
}

/* a key of a record: checks the tag and the length of integer keys */
static int rec_key(uint64_t tag, const struct jr_bytes *b, struct ix_key *k)
{
	if (tag > IX_NINT || b->len > IX_KEY_MAX ||
	    (tag >= IX_UINT && b->len != 8))
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

uint64_t mds_entry_region_id(void *arg, const struct ix_entry *e)
{
	const struct mds *s = arg;

	return e->slot == IX_NO_SLOT ? 0 : s->regions[e->slot].h.region_id;
}

/* take a key out of the index (its region's counts, the policy's order) */
static void key_remove(struct mds *s, struct ix_entry *e)
{
	uint32_t slot = e->slot, i;

	if (e->pins) {
		/* only in a replay: a pinned key is never deleted */
		for (i = 0; i < s->ninst_slots && e->pins; i++) {
			struct ix_entry *rec;

			if (s->insts[i].id &&
			    (rec = pin_find(s, e, &s->insts[i].pins)))
				pin_put(s, &s->insts[i].pins, rec, true);
		}
	}
	if (slot != IX_NO_SLOT) {
		s->kv_bytes -= e->len;
		s->regions[slot].refs--;
		s->regions[slot].used -= e->len;
	}
	pol_remove(&s->pol, e);
	pub_del(s->pub, e); /* recovery's drops come before the index */
	ix_delete(&s->kv, e);
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
		key_remove(s, e);
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
		key_remove(s, e);
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
		int rc = pin_add(s, e, hp);

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
		for (k = 0; k < kp.n; k++) {
			log_del(s, kp.v[k]);
			ev_removed(s->ev, ix_entry_tag(kp.v[k]), kp.v[k]->key,
				   ix_entry_klen(kp.v[k]), EVR_EXPIRED);
			key_remove(s, kp.v[k]);
		}
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

		for (j = 0; s->insts[i].id && j < hp->n; j++)
			log_pin(s, hp, pin_entry(hp->rec[j]), hp->rec[j]->off);
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
static void snap_tick(struct mds *s, uint64_t ns)
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
static uint64_t chk_holder(const struct mds_pins *hp, uint64_t *nrec, bool *bad)
{
	uint64_t n = 0, bytes = 0;
	uint32_t i;

	for (i = 0; i < hp->n; i++) {
		if (hp->rec[i]->len != i || !hp->rec[i]->off)
			*bad = true;
		n += hp->rec[i]->off;
		bytes += pin_entry(hp->rec[i])->len;
	}
	if (bytes != hp->bytes)
		*bad = true;
	*nrec += hp->n;
	return n;
}

int mds_check(struct mds *s)
{
	struct chk c = {s, NULL, NULL, 0, 0, 0, 0, 0, false};
	uint64_t pins = 0, nrec = 0;
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
		if (r->state != REG_LIVE && r->refs == 0 && !r->deferred)
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
		pins += chk_holder(&s->conns[fd].pins, &nrec, &c.bad);
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
		pins += chk_holder(&in->pins, &nrec, &c.bad);
	}
	/* each label: its owners' list, their counts and bytes */
	for (i = 0, nreg = 0; i < s->nlabel_slots; i++) {
		const struct mds_label *lb = &s->labels[i];
		uint64_t bytes = 0, pend = 0;
		uint32_t o, n = 0;

		if (!lb->id)
			continue;
		nreg++;
		for (o = lb->first; o != IX_NO_SLOT && n <= s->ninst_slots;
		     o = s->insts[o].sib_next, n++) {
			if (s->insts[o].label != i)
				goto out;
			bytes += s->insts[o].bytes;
			pend += s->insts[o].pending;
		}
		if (!n || n != lb->nowners || bytes != lb->bytes ||
		    pend != lb->pending)
			goto out;
	}
	if (nreg != s->label_map.count)
		goto out;
	pins += chk_holder(&s->anon_pins, &nrec, &c.bad);
	if (c.bad || pins != c.pins || nrec != s->pin_map.count)
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
