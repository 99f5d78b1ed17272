/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handler.c - request dispatch and response encoding (see handler.h)
 *
 * Responses keep upstream's key order (Python dicts are ordered, and the
 * tests compare maps, not bytes, but byte-identical replies make captures
 * easy to diff).  Integers take their smallest encoding, floats are
 * float64, handles are four unsigned fields passed through verbatim.
 *
 * Mutating batches are validated completely by mds_decode() before the
 * first element is applied; read-only ones are simply walked.
 */
#include "handler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "journal.h"
#include "pubidx.h"
#include "log.h"
#include "util.h"

static void put_handle(struct mp_wr *w, const struct rm_handle *h)
{
	mp_put_map(w, 4);
	mp_put_key(w, "region_id");
	mp_put_uint(w, h->region_id);
	mp_put_key(w, "offset");
	mp_put_uint(w, h->offset);
	mp_put_key(w, "length");
	mp_put_uint(w, h->length);
	mp_put_key(w, "auth_token");
	mp_put_uint(w, h->auth_token);
}

static void put_bool_kv(struct mp_wr *w, const char *k, size_t kl, bool v)
{
	mp_put_map(w, 1);
	mp_put_str(w, k, (uint32_t)kl);
	mp_put_bool(w, v);
}

#define PUT_BOOL_MAP(w, lit, v) put_bool_kv((w), (lit), sizeof(lit) - 1, (v))

static void put_lookup(struct mp_wr *w, const struct ix_entry *e,
		       const struct mds_region *r)
{
	if (!e) {
		PUT_BOOL_MAP(w, "found", false);
		return;
	}
	/* everything up to kv_offset's value was encoded with the region */
	mp_put_raw(w, r->hit, r->hit_len);
	mp_put_uint(w, e->off);
	mp_put_key(w, "kv_length");
	mp_put_uint(w, e->len);
	/* the hit's ticket: re-check it after use (eviction may reuse the
	 * page) */
	mp_put_key(w, "kv_gen");
	mp_put_uint(w, e->gen);
}

/*
 * Eviction notices for one instance, optional reply fields
 * that upstream clients ignore (and never get: only a client that said
 * "evict_notices" in its HEARTBEAT has any):
 *   "evicted": [region_id, kv_offset, kv_gen, ...]  pages of yours whose
 *	entry (registered as kv_gen) was evicted, the grace passed: reuse
 *	them, if that registration still holds them
 *   "release": [region_id, ...]  regions of yours that eviction emptied
 *	and the pool needs: RETURN_ALLOC them if you hold no page there
 *   "evicted_seq": [first, last]  the numbers of those notices: the
 *	client acknowledges with "evicted_ack": N (HEARTBEAT, REQUEST_ALLOC)
 *	once it has every notice up to N; unacknowledged ones come again
 *   "granted_regions": [handle, ...]  the regions of the pages these
 *	notices grant (a gen of 0, pages.c), to map them: only for a client
 *	that said its "page_size"
 *   "pages_run": N  for a client that said its "page_size": this
 *	process's number for its grants; when it changes (a restart), the
 *	pages the client was granted of others' regions are not its own
 *	any more
 *   "renew_ms": N  heartbeat again within N ms (more is coming)
 * A HEARTBEAT may carry "touched": [key, ...], uses of keys the client made
 * without a request: the policy counts them as uses.
 */
#define NOTICES_MAX 1024 /* pages told per reply */
#define RELEASE_MAX 64
#define GRANTED_REGIONS_MAX NOTICES_MAX /* one per notice at most */
#define RENEW_MS 100

struct notices {
	uint64_t ev[3 * NOTICES_MAX];
	uint64_t rel[RELEASE_MAX];
	struct rm_handle gr[GRANTED_REGIONS_MAX]; /* "granted_regions" */
	uint64_t first, last; /* the notices' numbers: "evicted_seq" */
	uint32_t nev, nrel, ngr;
	uint64_t run; /* "pages_run" (0: not a client that takes pages) */
	bool renew;
};

/* the handles of the regions the grants among @nt's notices name */
static void granted_regions(struct mds *s, struct notices *nt)
{
	const struct rm_handle *h;
	uint32_t i, j;

	nt->ngr = 0;
	for (i = 0; i < nt->nev; i++) {
		if (nt->ev[3 * i + 2] != 0)
			continue;
		for (j = 0; j < nt->ngr && nt->gr[j].region_id != nt->ev[3 * i];
		     j++)
			;
		if (j < nt->ngr)
			continue;
		h = mds_region_handle(s, nt->ev[3 * i]);
		if (h)
			nt->gr[nt->ngr++] = *h;
	}
}

/* @alloc: a REQUEST_ALLOC's reply (the requester is short of room: only
 * regions emptied for another's request are asked back) */
static void notices_take(struct mds *s, uint32_t islot, bool alloc,
			 struct notices *nt)
{
	nt->nrel = mds_release_wanted(s, islot, nt->rel, RELEASE_MAX, alloc);
	nt->nev = mds_take_notices(s, islot, nt->ev, NOTICES_MAX, &nt->first,
				   &nt->last, nt->rel, nt->nrel);
	granted_regions(s, nt);
	nt->run = islot != IX_NO_SLOT && s->insts[islot].page_size
			  ? mds_pages_run(s)
			  : 0;
	nt->renew = islot != IX_NO_SLOT && s->insts[islot].notices &&
		    (mds_notices_pending(s, islot) || mds_under_pressure(s));
}

static uint32_t notices_fields(const struct notices *nt)
{
	return (nt->nev != 0) + (nt->last != 0) + (nt->nrel != 0) +
	       (nt->ngr != 0) + (nt->run != 0) + nt->renew;
}

static void put_notices(struct mp_wr *w, const struct notices *nt)
{
	uint32_t i;

	if (nt->nev) {
		mp_put_key(w, "evicted");
		mp_put_array(w, 3 * nt->nev);
		for (i = 0; i < 3 * nt->nev; i++)
			mp_put_uint(w, nt->ev[i]);
	}
	if (nt->last) {
		/* acknowledge with "evicted_ack": last, once every notice
		 * before first was had too */
		mp_put_key(w, "evicted_seq");
		mp_put_array(w, 2);
		mp_put_uint(w, nt->first);
		mp_put_uint(w, nt->last);
	}
	if (nt->run) {
		mp_put_key(w, "pages_run");
		mp_put_uint(w, nt->run);
	}
	if (nt->ngr) {
		mp_put_key(w, "granted_regions");
		mp_put_array(w, nt->ngr);
		for (i = 0; i < nt->ngr; i++)
			put_handle(w, &nt->gr[i]);
	}
	if (nt->nrel) {
		mp_put_key(w, "release");
		mp_put_array(w, nt->nrel);
		for (i = 0; i < nt->nrel; i++)
			mp_put_uint(w, nt->rel[i]);
	}
	if (nt->renew) {
		mp_put_key(w, "renew_ms");
		mp_put_uint(w, RENEW_MS);
	}
}

/*
 * Why a REQUEST_ALLOC of @size bytes failed with @rc: the "error" text
 * after "Allocation failed: " (upstream's words, which clients may match)
 * into @buf, and a short "cause" for programs (docs/protocol.md §2).
 */
static const char *alloc_why(struct mds *s, int rc, uint64_t size,
			     uint32_t islot, char *buf, size_t len)
{
	char a[32], b[32];

	switch (rc) {
	case MDS_RC_RECLAIMED:
		if (islot != IX_NO_SLOT && s->insts[islot].page_size &&
		    s->insts[islot].notices) {
			snprintf(buf, len,
				 "pages are granted one by one (see evicted "
				 "and granted_regions)");
			return "granted";
		}
		snprintf(buf, len,
			 "pool full; pages of yours were evicted "
			 "(see evicted)");
		return "reclaimed";
	case -ENOSPC:
		if (s->pinned_bytes && !s->pol.n) {
			format_bytes(s->pinned_bytes, a, sizeof(a));
			snprintf(buf, len,
				 "pool exhausted: it is full of pinned "
				 "entries (%s pinned): unpin keys",
				 a);
			return "pinned";
		}
		format_bytes(size, a, sizeof(a));
		snprintf(buf, len,
			 "pool exhausted: no room for a region of %s, and "
			 "eviction freed none in time (the pool's regions "
			 "hold pinned keys, pages not stored yet, or keys of "
			 "clients that take no eviction notices)",
			 a);
		return "pool_full";
	case -ESTALE:
		snprintf(buf, len, "lease expired");
		return "lease_expired";
	case -EPERM:
		snprintf(buf, len, "%s", MDS_HELD_WHY);
		return "held";
	case -EDQUOT:
		format_bytes(s->cfg.inst_quota, a, sizeof(a));
		format_bytes(islot != IX_NO_SLOT
				     ? s->labels[s->insts[islot].label].bytes
				     : 0,
			     b, sizeof(b));
		snprintf(buf, len,
			 "quota exceeded: the instance id holds %s of its "
			 "--instance-quota of %s",
			 b, a);
		return "quota";
	default:
		if (s->rm->why)
			s->rm->why(s->rm_arg, rc, size, buf, len);
		else
			snprintf(buf, len, "%s", strerror(rc < 0 ? -rc : rc));
		return rc == -ENOMEM || rc == -ENODEV || rc == -ENOENT
			       ? "pool_full"
		       : rc == -EACCES ? "rm_refused"
				       : "rm_unreachable";
	}
}

/*
 * the REQUEST_ALLOC reply for @rc (0: @h) of @size bytes, with the
 * requester's notices (@islot: IX_NO_SLOT for none)
 */
static void put_alloc(struct mds *s, struct mp_wr *w, int rc, uint64_t size,
		      const struct rm_handle *h, uint32_t islot)
{
	struct notices nt;
	char why[512], text[540];
	const char *cause;

	notices_take(s, islot, true, &nt);
	if (rc != 0) {
		cause = alloc_why(s, rc, size, islot, why, sizeof(why));
		snprintf(text, sizeof(text), "Allocation failed: %s", why);
		log_dbg("REQUEST_ALLOC failed: %s", text);
		mp_put_map(w, 3 + (rc == -EPERM) + notices_fields(&nt));
		mp_put_key(w, "success");
		mp_put_bool(w, false);
		if (rc == -EPERM) {
			mp_put_key(w, "held"); /* mds_held_reply() */
			mp_put_bool(w, true);
		}
		mp_put_key(w, "error");
		mp_put_str(w, text, (uint32_t)strlen(text));
		/* an addition: the cause, for programs */
		mp_put_key(w, "cause");
		mp_put_str(w, cause, (uint32_t)strlen(cause));
		put_notices(w, &nt);
		return;
	}
	mp_put_map(w, 2 + notices_fields(&nt));
	mp_put_key(w, "success");
	mp_put_bool(w, true);
	mp_put_key(w, "handle");
	put_handle(w, h);
	put_notices(w, &nt);
}

void mds_wait_free(struct mds_wait *w)
{
	if (!w)
		return;
	free((char *)w->inst.ptr);
	free((char *)w->lease.ptr);
	free(w->path);
	free(w);
}

static int dup_str(struct mds_str *dst, struct mds_str src)
{
	char *p = malloc(src.len ? src.len : 1);

	if (!p)
		return -ENOMEM;
	if (src.len)
		memcpy(p, src.ptr, src.len);
	dst->ptr = p;
	dst->len = src.len;
	return 0;
}

/* a wait for @q, when the caller can park it (@wp); NULL otherwise */
static struct mds_wait *wait_new(const struct mds_req *q,
				 const struct mds_peer *peer,
				 struct mds_wait **wp)
{
	struct mds_wait *w;

	if (!wp)
		return NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->hdr = q->hdr;
	w->kind = q->hdr.msg_type;
	w->size = q->size;
	w->peer_fd = peer ? peer->fd : -1;
	w->peer_rid = peer ? peer->rid_hash : 0;
	w->no_peer = !peer;
	snprintf(w->host, sizeof(w->host), "%.*s", (int)q->host.len,
		 q->host.ptr ? q->host.ptr : "");
	w->pid = q->pid <= UINT32_MAX ? (uint32_t)q->pid : 0;
	w->page_size = q->page_size;
	if (w->kind == MDS_REQUEST_ALLOC &&
	    (dup_str(&w->inst, q->instance_id) < 0 ||
	     dup_str(&w->lease, q->lease_id) < 0)) {
		mds_wait_free(w);
		return NULL;
	}
	return w;
}

/* Return: 0, or 1 when the request was parked in *@wp */
static int do_alloc(struct mds *s, const struct mds_req *q,
		    struct mds_peer *peer, struct mp_wr *w,
		    struct mds_wait **wp)
{
	struct mds_wait *wt = wait_new(q, peer, wp);
	struct rm_handle h;
	uint32_t islot;
	int rc;

	rc = mds_alloc(s, q->instance_id, q->lease_id, q->size, peer, &h, wt);
	/* (only once the request was let act for the instance: else anyone
	 * naming it could renumber its notices; no "evicted_ack" on a lease
	 * is 0, which a new lease's first request may well say) */
	if ((q->ack || q->lease_id.len) && rc != -EPERM && rc != -ESTALE)
		mds_ack_notices(
			s, mds_inst_for(s, q->instance_id, q->lease_id, peer),
			q->lease_id, q->ack);
	if (rc == -EINPROGRESS) {
		*wp = wt;
		return 1;
	}
	mds_wait_free(wt);
	islot = rc == -EPERM
			? IX_NO_SLOT
			: mds_inst_for(s, q->instance_id, q->lease_id, peer);
	if (rc == 0)
		mds_inst_label(s, islot, q->host, q->pid);
	put_alloc(s, w, rc, q->size, &h, islot);
	return 0;
}

static bool listed(const struct mds *s, const struct mds_region *r,
		   struct mds_str ex)
{
	const struct mds_inst *in = mds_region_owner(s, r);

	if (r->state != REG_LIVE)
		return false;
	return !ex.ptr || in->id_len != ex.len ||
	       memcmp(in->id, ex.ptr, ex.len) != 0;
}

static void do_list(struct mds *s, const struct mds_req *q, struct mp_wr *w)
{
	const struct mds_region *r;
	uint32_t n = 0;

	for (r = mds_first_region(s); r; r = mds_next_region(s, r))
		n += listed(s, r, q->exclude);
	mp_put_map(w, 2);
	mp_put_key(w, "success");
	mp_put_bool(w, true);
	mp_put_key(w, "allocations");
	mp_put_array(w, n);
	for (r = mds_first_region(s); r; r = mds_next_region(s, r))
		if (listed(s, r, q->exclude))
			mp_put_raw(w, r->hit + MDS_HIT_HANDLE_OFF,
				   r->hit_len - MDS_HIT_HANDLE_OFF -
					   (sizeof("kv_offset") - 1 + 1));
}

/* Return: 0, or -ENOMEM when the caller must send an error instead. */
static int do_register(struct mds *s, const struct mds_req *q,
		       struct mds_peer *peer, struct mp_wr *w)
{
	int rc = mds_register(s, &q->reg, peer);
	char why[200];

	if (rc == -ENOMEM)
		return rc;
	mp_put_map(w, 2 + (rc == 1) + (rc < 0));
	mp_put_key(w, "success");
	mp_put_bool(w, rc >= 0);
	mp_put_key(w, "is_new");
	mp_put_bool(w, rc == 1);
	if (rc < 0) {
		/* an addition: why it was refused (upstream's clients see
		 * success false, as before) */
		if (rc == -E2BIG)
			snprintf(why, sizeof(why),
				 "key of %u bytes is longer than the server's "
				 "--max-key-bytes (%u)",
				 q->reg.key.len, s->cfg.max_key);
		else if (rc == -ERANGE)
			snprintf(why, sizeof(why),
				 "kv_offset %llu + kv_length %llu lies "
				 "outside region %llu",
				 (unsigned long long)q->reg.kv_offset,
				 (unsigned long long)q->reg.kv_length,
				 (unsigned long long)q->reg.region_id);
		else if (rc == -EXDEV)
			snprintf(why, sizeof(why),
				 "kv_offset %llu + kv_length %llu is not "
				 "inside one page of region %llu (its pages "
				 "are handed out one by one)",
				 (unsigned long long)q->reg.kv_offset,
				 (unsigned long long)q->reg.kv_length,
				 (unsigned long long)q->reg.region_id);
		else if (rc == -EACCES)
			snprintf(why, sizeof(why),
				 "the page at kv_offset %llu of region %llu is "
				 "not this client's (another client's, or the "
				 "server took it back)",
				 (unsigned long long)q->reg.kv_offset,
				 (unsigned long long)q->reg.region_id);
		else
			snprintf(why, sizeof(why),
				 "region %llu is not this client's (another "
				 "client's, or its lease ended)",
				 (unsigned long long)q->reg.region_id);
		mp_put_key(w, "why");
		mp_put_str(w, why, (uint32_t)strlen(why));
	}
	if (rc == 1) {
		/* what an eviction notice of this entry will name */
		mp_put_key(w, "kv_gen");
		mp_put_uint(w, s->gen);
	}
	return 0;
}

static int do_batch_register(struct mds *s, const struct mds_req *q,
			     struct mds_peer *peer, struct mp_wr *w)
{
	struct mds_iter it;
	struct mds_reg e;
	int rc;

	mp_put_map(w, 3);
	mp_put_key(w, "success");
	mp_put_bool(w, true);
	/* the new entries are numbered from here on, in order */
	mp_put_key(w, "kv_gen_first");
	mp_put_uint(w, s->gen + 1);
	mp_put_key(w, "results");
	mp_put_array(w, q->list.n);
	mds_iter_init(&it, &q->list);
	while (mds_next_reg(&it, &e)) {
		rc = mds_register(s, &e, peer);
		/* registering is idempotent: an error reply is safe to retry */
		if (rc == -ENOMEM)
			return rc;
		mp_put_bool(w, rc == 1);
	}
	return 0;
}

#define PF 8	/* pipeline distance, keys */
#define PF2 4	/* distance of the chain's second entry, keys (< PF) */
#define RING 32 /* > 2 * PF */

/*
 * BATCH_LOOKUP_KV, software-pipelined so that the cache misses of
 * consecutive keys overlap instead of adding up: key i + 2*PF is decoded,
 * hashed and its bucket prefetched; the first entry of key i + PF's
 * bucket (in cache by now) is prefetched; if key i + PF2's first entry is
 * another key, the second is prefetched; key i is looked up and encoded.
 */
/* a batch's lookups: keys, hits and their bytes, the found prefix */
struct lk_batch {
	struct mds_lookups d;
	bool run; /* every key so far found */
};

static void lk_batch_init(struct lk_batch *b, uint32_t n)
{
	memset(b, 0, sizeof(*b));
	b->d.n[MDS_LK_BATCHES] = 1;
	b->d.n[MDS_LK_BATCH_KEYS] = n;
	b->run = true;
}

static void lk_batch_key(struct lk_batch *b, const struct ix_entry *e)
{
	b->d.n[MDS_LK_KEYS]++;
	b->run = b->run && e;
	if (!e)
		return;
	b->d.n[MDS_LK_HITS]++;
	b->d.n[MDS_LK_HIT_BYTES] += e->len;
	b->d.n[MDS_LK_PREFIX_HITS] += b->run;
}

/* one key's lookup, unless its client counts it ("count": false) */
static void count_one(struct mds *s, const struct mds_req *q,
		      struct mds_peer *peer, const struct ix_entry *e)
{
	struct mds_lookups d = {{0}};

	if (q->uncounted)
		return;
	d.n[MDS_LK_KEYS] = 1;
	d.n[MDS_LK_HITS] = e != NULL;
	d.n[MDS_LK_HIT_BYTES] = e ? e->len : 0;
	mds_count_lookups(s, peer, IX_NO_SLOT, &d);
}

static void do_batch_lookup(struct mds *s, const struct mds_req *q,
			    struct mds_peer *peer, struct mp_wr *w)
{
	struct lk_batch lb;
	struct mds_key k[RING];
	uint64_t h[RING];
	struct ix_key x;
	struct mds_iter it;
	const struct mds_region *r;
	struct ix_entry *e;
	uint32_t n = q->list.n, dec = 0, i;

	lk_batch_init(&lb, n);
	mp_put_map(w, 1);
	mp_put_key(w, "entries");
	mp_put_array(w, n);
	mds_iter_init(&it, &q->list);
	for (i = 0; i < n; i++) {
		while (dec < n && dec <= i + 2 * PF) {
			if (!mds_next_key(&it, &k[dec % RING]))
				return; /* cannot happen: validated */
			x = mds_key_ix(&k[dec % RING]);
			h[dec % RING] = ix_hash(&s->kv, &x);
			ix_prefetch(&s->kv, h[dec % RING]);
			dec++;
		}
		if (i + PF < dec)
			ix_prefetch_entry(&s->kv, h[(i + PF) % RING]);
		if (i + PF2 < dec)
			ix_prefetch_next(&s->kv, h[(i + PF2) % RING]);
		x = mds_key_ix(&k[i % RING]);
		e = ix_find(&s->kv, &x, h[i % RING]);
		if (!e)
			e = mds_rescue(s, &x, h[i % RING]); /* retire.c */
		r = e && e->slot != IX_NO_SLOT ? &s->regions[e->slot] : NULL;
		if (r)
			pol_touch(&s->pol, e);
		put_lookup(w, r ? e : NULL, r);
		lk_batch_key(&lb, r ? e : NULL);
	}
	if (!q->uncounted)
		mds_count_lookups(s, peer, IX_NO_SLOT, &lb.d);
}

/* BATCH_EXISTS / BATCH_PIN (prefix stop) / BATCH_UNPIN */
static void do_batch_bools(struct mds *s, const struct mds_req *q,
			   struct mds_peer *peer, struct mp_wr *w)
{
	uint8_t t = q->hdr.msg_type;
	const struct ix_entry *e;
	struct lk_batch lb;
	struct mds_iter it;
	struct mds_key k;
	bool stopped = false, v;

	lk_batch_init(&lb, q->list.n);
	mp_put_map(w, 1);
	mp_put_key(w, "results");
	mp_put_array(w, q->list.n);
	mds_iter_init(&it, &q->list);
	while (mds_next_key(&it, &k)) {
		if (t == MDS_BATCH_EXISTS_KV) {
			e = mds_exists(s, &k);
			lk_batch_key(&lb, e);
			v = e != NULL;
		} else if (t == MDS_BATCH_UNPIN_KV) {
			v = mds_unpin(s, &k, peer);
		} else {
			v = !stopped && mds_pin(s, &k, peer, q->ttl_ms);
			stopped = !v;
		}
		mp_put_bool(w, v);
	}
	if (t == MDS_BATCH_EXISTS_KV && !q->uncounted)
		mds_count_lookups(s, peer, IX_NO_SLOT, &lb.d);
}

static void do_report(struct mds *s, const struct mds_req *q, struct mp_wr *w)
{
	struct mds_iter it;
	struct mds_report e;

	mds_iter_init(&it, &q->list);
	while (mds_next_report(&it, &e))
		stats_record(&s->stats, e.client_id.ptr, e.client_id.len,
			     e.op_type.ptr, e.op_type.len, e.result.ptr,
			     e.result.len, e.size, e.latency_us);
	PUT_BOOL_MAP(w, "success", true);
}

/*
 * The pool's figures for GET_STATS / GET_USAGE, from the RM session's
 * cache; when that is stale the request is parked (*@wp, return 1) until
 * a fresh STATS is in.  Unknown figures are 0.  Return: 0 or 1.
 */
static int pool_figures(struct mds *s, bool dax_only, const struct mds_req *q,
			struct mds_peer *peer, struct mds_wait **wp,
			uint64_t *total, uint64_t *avail)
{
	struct mds_wait *wt = q ? wait_new(q, peer, wp) : NULL;
	int rc;

	rc = s->rm->pool_usage(s->rm_arg, dax_only, total, avail, wt);
	if (rc == -EINPROGRESS) {
		*wp = wt;
		return 1;
	}
	mds_wait_free(wt);
	if (rc < 0)
		*total = *avail = 0;
	return 0;
}

/* GET_STATS "eviction" "pages": capacity by the page (pages.c) */
static void put_pages(const struct mds *s, struct mp_wr *w)
{
	struct mds_pages_stats ps;

	mds_pages_stats(s, &ps);
	mp_put_key(w, "pages");
	mp_put_map(w, 8);
	mp_put_key(w, "granted");
	mp_put_uint(w, s->ctr.pages_granted);
	mp_put_key(w, "pooled");
	mp_put_uint(w, s->ctr.pages_pooled);
	mp_put_key(w, "retired"); /* retire.c: evicted keys in the grace */
	mp_put_uint(w, ps.retired);
	mp_put_key(w, "retired_total");
	mp_put_uint(w, s->ctr.retired);
	mp_put_key(w, "rescued");
	mp_put_uint(w, s->ctr.rescued);
	mp_put_key(w, "free");
	mp_put_uint(w, ps.free);
	mp_put_key(w, "lent");
	mp_put_uint(w, ps.lent);
	mp_put_key(w, "regions");
	mp_put_uint(w, ps.regions);
}

/* GET_STATS "eviction" (docs/metadata-server.md, Eviction) */
static void put_eviction(const struct mds *s, struct mp_wr *w)
{
	static const char *const why[EV_NWHY] = {"lru", "owner_gone", "region",
						 "quota"};
	uint64_t n = 0, b = 0;
	int i;

	for (i = 0; i < EV_NWHY; i++) {
		n += s->ctr.evictions[i];
		b += s->ctr.evicted_bytes[i];
	}
	mp_put_key(w, "eviction");
	mp_put_map(w, 12);
	mp_put_key(w, "policy");
	mp_put_str(w, s->pol.ops->name, (uint32_t)strlen(s->pol.ops->name));
	mp_put_key(w, "evictions");
	mp_put_uint(w, n);
	mp_put_key(w, "evicted_bytes");
	mp_put_uint(w, b);
	mp_put_key(w, "by_reason");
	mp_put_map(w, EV_NWHY);
	for (i = 0; i < EV_NWHY; i++) {
		mp_put_str(w, why[i], (uint32_t)strlen(why[i]));
		mp_put_map(w, 2);
		mp_put_key(w, "count");
		mp_put_uint(w, s->ctr.evictions[i]);
		mp_put_key(w, "bytes");
		mp_put_uint(w, s->ctr.evicted_bytes[i]);
	}
	mp_put_key(w, "pinned_bytes");
	mp_put_uint(w, s->pinned_bytes);
	mp_put_key(w, "evictable_entries");
	mp_put_uint(w, s->pol.n);
	mp_put_key(w, "alloc_waits");
	mp_put_uint(w, s->ctr.cap_waits);
	mp_put_key(w, "alloc_wait_failures");
	mp_put_uint(w, s->ctr.cap_fails);
	mp_put_key(w, "pages_told");
	mp_put_uint(w, s->ctr.notices_sent);
	mp_put_key(w, "regions_released");
	mp_put_uint(w, s->ctr.released);
	mp_put_key(w, "grace_ms");
	mp_put_uint(w, s->cfg.evict_grace_ns / 1000000);
	put_pages(s, w);
}

/* GET_STATS "journal" (docs/metadata-server.md "Restart") */
static void put_journal(const struct mds *s, struct mp_wr *w)
{
	const struct mds_recovered *r = &s->rec;

	mp_put_key(w, "journal");
	mp_put_map(w, 6);
	mp_put_key(w, "enabled");
	mp_put_bool(w, s->jr != NULL);
	mp_put_key(w, "bytes");
	mp_put_uint(w, s->jr ? s->jr->total : 0);
	mp_put_key(w, "commits");
	mp_put_uint(w, s->jr ? s->jr->commits : 0);
	mp_put_key(w, "syncs");
	mp_put_uint(w, s->jr ? s->jr->syncs : 0);
	mp_put_key(w, "snapshots");
	mp_put_uint(w, s->snaps);
	mp_put_key(w, "recovery");
	mp_put_map(w, 10);
	mp_put_key(w, "recovered");
	mp_put_bool(w, r->found);
	mp_put_key(w, "discarded");
	mp_put_bool(w, r->discarded);
	mp_put_key(w, "keys");
	mp_put_uint(w, r->keys);
	mp_put_key(w, "regions");
	mp_put_uint(w, r->regions);
	mp_put_key(w, "leases");
	mp_put_uint(w, r->leases);
	mp_put_key(w, "pins");
	mp_put_uint(w, r->pins);
	mp_put_key(w, "ms");
	mp_put_uint(w, r->ms);
	mp_put_key(w, "dropped_bytes");
	mp_put_uint(w, r->dropped_bytes);
	mp_put_key(w, "regions_lost");
	mp_put_uint(w, r->regions_lost);
	mp_put_key(w, "keys_lost");
	mp_put_uint(w, r->keys_lost);
}

/*
 * GET_STATS "operator_events" and "events": the events the
 * operator's log lines report, counted for metrics, and the KV event
 * stream's counters (docs/metadata-server.md "Watching it").
 */
static void put_operator_events(const struct mds *s, struct mp_wr *w)
{
	mp_put_key(w, "operator_events");
	mp_put_map(w, 7);
	mp_put_key(w, "instances_joined");
	mp_put_uint(w, s->ctr.inst_joined);
	mp_put_key(w, "instances_left");
	mp_put_uint(w, s->ctr.inst_left);
	mp_put_key(w, "leases_expired");
	mp_put_uint(w, s->ctr.lease_expired);
	mp_put_key(w, "instances_dead");
	mp_put_uint(w, s->ctr.peer_dead);
	mp_put_key(w, "regions_reclaimed");
	mp_put_uint(w, s->ctr.regions_reclaimed);
	mp_put_key(w, "eviction_bursts");
	mp_put_uint(w, s->ctr.evict_burst_lines);
	mp_put_key(w, "recoveries");
	mp_put_uint(w, s->ctr.recoveries);
	mp_put_key(w, "events");
	ev_encode(s->ev, w);
}

/* the counters of @l as map entries (the caller counted MDS_LK_N) */
static void put_lk_fields(struct mp_wr *w, const struct mds_lookups *l)
{
	int i;

	for (i = 0; i < MDS_LK_N; i++) {
		mp_put_str(w, mds_lk_name(i), (uint32_t)strlen(mds_lk_name(i)));
		mp_put_uint(w, l->n[i]);
	}
}

static bool lk_any(const struct mds_lookups *l)
{
	return l->n[MDS_LK_KEYS] || l->n[MDS_LK_BATCHES];
}

/*
 * "lookups": {keys, hits, hit_bytes, batches, batch_keys, prefix_hits,
 * instances: {instance id: {the same}}} -- the instance ids present that
 * looked anything up (bounded as instance ids are)
 */
static void put_lookups(const struct mds *s, struct mp_wr *w)
{
	uint32_t i, n = 0;

	for (i = 0; i < s->nlabel_slots; i++)
		n += s->labels[i].id && lk_any(&s->labels[i].lk);
	mp_put_key(w, "lookups");
	mp_put_map(w, MDS_LK_N + 1);
	put_lk_fields(w, &s->lk);
	mp_put_key(w, "instances");
	mp_put_map(w, n);
	for (i = 0; i < s->nlabel_slots; i++) {
		const struct mds_label *lb = &s->labels[i];

		if (!lb->id || !lk_any(&lb->lk))
			continue;
		mp_put_str(w, lb->id, lb->id_len);
		mp_put_map(w, MDS_LK_N);
		put_lk_fields(w, &lb->lk);
	}
}

/* the figures of @r as map entries: "clients" and the MDS_RT_* counters */
static void put_rt_fields(struct mp_wr *w, const struct mds_remote *r)
{
	int i;

	mp_put_key(w, "clients");
	mp_put_uint(w, r->clients);
	for (i = 0; i < MDS_RT_N; i++) {
		mp_put_str(w, mds_rt_name(i), (uint32_t)strlen(mds_rt_name(i)));
		mp_put_uint(w, r->n[i]);
	}
}

static bool rt_any(const struct mds_remote *r)
{
	int i;

	for (i = 0; i < MDS_RT_N; i++)
		if (r->n[i])
			return true;
	return r->clients != 0;
}

/*
 * "remote": {clients, puts, put_bytes, gets, get_bytes, errors,
 * instances: {instance id: {the same}}} -- the clients of maru-agent now
 * and what they moved since the server started, as they reported in
 * HEARTBEAT; per instance id present that has a remote client now or had
 * one (bounded as instance ids are)
 */
static void put_remote(const struct mds *s, struct mp_wr *w)
{
	uint32_t i, n = 0;

	for (i = 0; i < s->nlabel_slots; i++)
		n += s->labels[i].id && rt_any(&s->labels[i].rt);
	mp_put_key(w, "remote");
	mp_put_map(w, 1 + MDS_RT_N + 1);
	put_rt_fields(w, &s->rt);
	mp_put_key(w, "instances");
	mp_put_map(w, n);
	for (i = 0; i < s->nlabel_slots; i++) {
		const struct mds_label *lb = &s->labels[i];

		if (!lb->id || !rt_any(&lb->rt))
			continue;
		mp_put_str(w, lb->id, lb->id_len);
		mp_put_map(w, 1 + MDS_RT_N);
		put_rt_fields(w, &lb->rt);
	}
}

/*
 * The bytes of the pages that hold @r's keys: one page per key, of its
 * page tables' size, else its owner's page size (said in REQUEST_ALLOC or
 * HEARTBEAT); a client that never said (upstream's) counts the bytes
 * stored.  What a full pool is made of: values smaller than their page
 * leave the rest of it unused.
 */
static uint64_t region_held(const struct mds *s, const struct mds_region *r)
{
	uint64_t size = r->pg ? r->pg->size : s->insts[r->owner].page_size;

	return size ? r->refs * size : r->used;
}

static void do_stats(struct mds *s, uint64_t total, uint64_t avail,
		     struct mp_wr *w)
{
	const struct mds_region *r;
	uint64_t held = 0;

	/* + put_operator_events(), put_lookups(), put_remote() */
	mp_put_map(w, 7 + 2 + 1 + 1 + (s->pub != NULL));
	for (r = mds_first_region(s); r; r = mds_next_region(s, r))
		held += region_held(s, r);
	mp_put_key(w, "kv_manager");
	mp_put_map(w, 3);
	mp_put_key(w, "total_entries");
	mp_put_uint(w, s->kv.count);
	mp_put_key(w, "total_size");
	mp_put_uint(w, s->kv_bytes);
	/* an addition: the bytes of the pages holding them */
	mp_put_key(w, "held_size");
	mp_put_uint(w, held);
	mp_put_key(w, "allocation_manager");
	mp_put_map(w, 3);
	mp_put_key(w, "num_allocations");
	mp_put_uint(w, s->nregions);
	mp_put_key(w, "total_allocated");
	mp_put_uint(w, s->total_allocated);
	mp_put_key(w, "active_clients");
	mp_put_uint(w, mds_active_clients(s));
	mp_put_key(w, "stats_manager");
	stats_encode(&s->stats, w);
	mp_put_key(w, "cxl_pool");
	mp_put_map(w, 2);
	mp_put_key(w, "total_size");
	mp_put_uint(w, total);
	mp_put_key(w, "free_size");
	mp_put_uint(w, avail);
	put_eviction(s, w);
	put_journal(s, w);
	/* an addition to upstream's reply: the server's own request counts */
	mp_put_key(w, "requests");
	reqstats_encode(&s->req, w);
	put_operator_events(s, w);
	/* an addition: lookups, pool-wide and per instance id */
	put_lookups(s, w);
	/* an addition: clients of maru-agent and what they moved */
	put_remote(s, w);
	/* an addition to upstream's reply: the shared index */
	if (s->pub) {
		mp_put_key(w, "shm_index");
		pub_encode_stats(s->pub, w, s->idx_clients);
	}
}

struct usage {
	uint32_t slot;
	uint32_t regions;
	uint64_t allocated;
	uint64_t used;
	uint64_t held; /* bytes of the pages holding them */
	uint64_t keys; /* KV entries in its regions */
	const struct mds_inst *in;
};

/* an instance's regions in one pool (GET_USAGE "devices") */
struct usage_dev {
	uint32_t pos; /* in the sorted usage array */
	uint16_t dev;
	uint32_t regions;
	uint64_t bytes;
};

static int cmp_usage(const void *a, const void *b)
{
	const struct mds_inst *x = ((const struct usage *)a)->in;
	const struct mds_inst *y = ((const struct usage *)b)->in;
	uint32_t n = x->id_len < y->id_len ? x->id_len : y->id_len;
	int c = memcmp(x->id, y->id, n);

	if (c)
		return c;
	return x->id_len < y->id_len ? -1 : x->id_len > y->id_len;
}

static int cmp_usage_dev(const void *a, const void *b)
{
	const struct usage_dev *x = a, *y = b;

	if (x->pos != y->pos)
		return x->pos < y->pos ? -1 : 1;
	return (x->dev > y->dev) - (x->dev < y->dev);
}

/*
 * The regions of known pool in (instance, pool) order, one element per
 * pair, into *@out (NULL when there is none).  @pos: an instance slot's
 * place in the sorted usage array.  Return: elements, or -ENOMEM.
 */
static int64_t usage_devs(const struct mds *s, const uint32_t *pos,
			  struct usage_dev **out)
{
	const struct mds_region *r;
	struct usage_dev *d;
	uint64_t n = 0, i, k;

	*out = NULL;
	if (!s->ndevs || !s->nregions)
		return 0;
	d = calloc(s->nregions, sizeof(*d));
	if (!d)
		return -ENOMEM;
	for (r = mds_first_region(s); r && n < s->nregions;
	     r = mds_next_region(s, r)) {
		if (!r->dev)
			continue;
		d[n].pos = pos[r->owner];
		d[n].dev = r->dev;
		d[n].regions = 1;
		d[n++].bytes = r->h.length;
	}
	qsort(d, n, sizeof(*d), cmp_usage_dev);
	for (i = k = 0; i < n; i++) {
		if (k && d[k - 1].pos == d[i].pos && d[k - 1].dev == d[i].dev) {
			d[k - 1].regions++;
			d[k - 1].bytes += d[i].bytes;
		} else {
			d[k++] = d[i];
		}
	}
	*out = d;
	return (int64_t)k;
}

/* an instance id's figures: the sum over its owners (GET_USAGE) */
struct usage_group {
	const struct mds_inst *in; /* the first owner: id, host, pid */
	uint32_t regions, owners;
	uint64_t allocated, used, held, keys, pinned, leases, conns;
	const char *host; /* borrows: the first owner's that says */
	uint32_t pid;
};

/* Return: 0 or -ENOMEM. */
static int do_usage(struct mds *s, uint64_t total, uint64_t avail,
		    struct mp_wr *w)
{
	const struct mds_region *r;
	const struct mds_inst *in;
	struct usage *u = NULL;
	struct usage_group *g = NULL;
	struct usage_dev *d = NULL;
	uint32_t *pos = NULL, n = 0, ng = 0, i, nd;
	int64_t ndev;
	size_t k = 0, j;

	if (s->ninst_slots) {
		u = calloc(s->ninst_slots, sizeof(*u));
		g = calloc(s->ninst_slots, sizeof(*g));
		pos = malloc(s->ninst_slots * sizeof(*pos));
		if (!u || !g || !pos) {
			free(u);
			free(g);
			free(pos);
			return -ENOMEM;
		}
		for (i = 0; i < s->ninst_slots; i++)
			pos[i] = IX_NO_SLOT;
	}
	/* per owner */
	for (r = mds_first_region(s); r; r = mds_next_region(s, r)) {
		if (pos[r->owner] == IX_NO_SLOT) {
			pos[r->owner] = n;
			u[n].slot = r->owner;
			u[n].in = mds_region_owner(s, r);
			n++;
		}
		u[pos[r->owner]].regions++;
		u[pos[r->owner]].allocated += r->h.length;
		u[pos[r->owner]].used += r->used;
		u[pos[r->owner]].held += region_held(s, r);
		u[pos[r->owner]].keys += r->refs;
	}
	/* readers that own nothing but hold pins are listed too */
	for (i = 0; i < s->ninst_slots; i++)
		if (s->insts[i].id && pos[i] == IX_NO_SLOT &&
		    mds_pinned_bytes(&s->insts[i])) {
			u[n].slot = i;
			u[n].in = &s->insts[i];
			n++;
		}
	/* by instance id: its owners are one entry (sorted by id) */
	if (n)
		qsort(u, n, sizeof(*u), cmp_usage);
	for (i = 0; i < n; i++) {
		in = u[i].in;
		if (!ng || cmp_usage(&u[i - 1], &u[i]) != 0)
			g[ng++].in = in;
		pos[u[i].slot] = ng - 1;
		g[ng - 1].owners++;
		g[ng - 1].regions += u[i].regions;
		g[ng - 1].allocated += u[i].allocated;
		g[ng - 1].used += u[i].used;
		g[ng - 1].held += u[i].held;
		g[ng - 1].keys += u[i].keys;
		g[ng - 1].pinned += mds_pinned_bytes(in);
		g[ng - 1].leases += in->nleases;
		g[ng - 1].conns += in->nconns;
		if (!g[ng - 1].host && in->host[0])
			g[ng - 1].host = in->host;
		if (!g[ng - 1].pid)
			g[ng - 1].pid = in->pid;
	}
	ndev = usage_devs(s, pos, &d);
	if (ndev < 0) {
		free(u);
		free(g);
		free(pos);
		return -ENOMEM;
	}
	mp_put_map(w, 3);
	mp_put_key(w, "instances");
	mp_put_array(w, ng);
	for (i = 0; i < ng; i++) {
		in = g[i].in;
		for (j = k; j < (size_t)ndev && d[j].pos == i; j++)
			;
		nd = (uint32_t)(j - k);
		mp_put_map(w, 13 + (g[i].host != NULL) + (g[i].pid != 0) +
				      (nd != 0));
		mp_put_key(w, "instance_id");
		mp_put_str(w, in->id, in->id_len);
		mp_put_key(w, "regions");
		mp_put_uint(w, g[i].regions);
		mp_put_key(w, "allocated");
		mp_put_uint(w, g[i].allocated);
		mp_put_key(w, "used");
		mp_put_uint(w, g[i].used);
		/* an addition: the bytes of the pages holding them */
		mp_put_key(w, "held");
		mp_put_uint(w, g[i].held);
		/* an addition: bytes of the keys it holds pins on */
		mp_put_key(w, "pinned");
		mp_put_uint(w, g[i].pinned);
		/*
		 * additions for marutop: the keys stored in its regions, its
		 * active leases and open connections, and its clients (the
		 * owners that share the instance id)
		 */
		mp_put_key(w, "keys");
		mp_put_uint(w, g[i].keys);
		mp_put_key(w, "leases");
		mp_put_uint(w, g[i].leases);
		mp_put_key(w, "connections");
		mp_put_uint(w, g[i].conns);
		mp_put_key(w, "clients");
		mp_put_uint(w, g[i].owners);
		/* its lookups (GET_STATS "lookups" has the pool's), and
		 * the keys its clients registered (new ones), since the
		 * instance id appeared */
		mp_put_key(w, "lookups");
		mp_put_map(w, MDS_LK_N);
		put_lk_fields(w, &s->labels[in->label].lk);
		mp_put_key(w, "stores");
		mp_put_uint(w, s->labels[in->label].stores);
		mp_put_key(w, "stored_bytes");
		mp_put_uint(w, s->labels[in->label].stored_bytes);
		/* where it runs, as its (first) client said */
		if (g[i].host) {
			mp_put_key(w, "host");
			mp_put_str(w, g[i].host, (uint32_t)strlen(g[i].host));
		}
		if (g[i].pid) {
			mp_put_key(w, "pid");
			mp_put_uint(w, g[i].pid);
		}
		/* upstream's later InstanceUsage.devices: its regions' bytes
		 * per pool (a list of {dax_path, bytes, regions}) */
		if (nd) {
			mp_put_key(w, "devices");
			mp_put_array(w, nd);
		}
		for (; k < j; k++) {
			const char *p = s->devs[d[k].dev - 1];

			mp_put_map(w, 3);
			mp_put_key(w, "dax_path");
			mp_put_str(w, p, (uint32_t)strlen(p));
			mp_put_key(w, "bytes");
			mp_put_uint(w, d[k].bytes);
			mp_put_key(w, "regions");
			mp_put_uint(w, d[k].regions);
		}
	}
	mp_put_key(w, "pool_total");
	mp_put_uint(w, total);
	mp_put_key(w, "pool_free");
	mp_put_uint(w, avail);
	free(d);
	free(u);
	free(g);
	free(pos);
	return 0;
}

/*
 * "server_id" (an addition upstream clients ignore): a client that sees it
 * change knows the server restarted and its regions are gone.  The caller
 * counted the key in its map header.
 */
static void put_server_id(const struct mds *s, struct mp_wr *w)
{
	if (!s->server_id[0])
		return;
	mp_put_key(w, "server_id");
	mp_put_str(w, s->server_id, (uint32_t)strlen(s->server_id));
}

/* Return: 0, or -EPERM when refused (the caller sends an error instead) */
static int do_heartbeat(struct mds *s, const struct mds_req *q,
			struct mds_peer *peer, struct mp_wr *w)
{
	/*
	 * whose lookups (and remote traffic) the figures are: the instance
	 * its connection claimed (never a name it sends: any client can send
	 * any name); for a release, taken before it lets go of it
	 */
	uint32_t lk_label = mds_peer_label(s, peer);
	int rc = mds_heartbeat(s, q->instance_id, q->lease_id, q->lease_release,
			       q->notices, peer);
	struct notices nt;

	if (rc < 0)
		return rc;
	/* (with no "evicted_ack" a client that takes notices has none) */
	if ((q->ack || q->notices) && rc == 0)
		mds_ack_notices(
			s, mds_inst_for(s, q->instance_id, q->lease_id, peer),
			q->lease_id, q->ack);
	/* (informative: a keep-alive, which claims nothing, still says
	 * where the owner its name resolves to runs) */
	if (rc == 0 && !q->lease_release) {
		uint32_t islot =
			mds_inst_named(s, q->instance_id, q->lease_id, peer);

		mds_inst_label(s, islot, q->host, q->pid);
		mds_inst_page_size(s, islot, q->page_size);
		mds_inst_remote(s, islot, &q->remote);
	}
	/* what the client answered from the shared index since it last
	 * said (additions of counters: a repeat after a lost reply counts
	 * twice, statistics only) */
	s->idx_clients[0] += q->idx[0];
	s->idx_clients[1] += q->idx[1];
	s->idx_clients[2] += q->idx[2];
	/* ... and the lookups it answered itself (a label gone meanwhile:
	 * pool-wide only) */
	{
		struct mds_lookups d;
		int i;

		for (i = 0; i < MDS_LK_N; i++)
			d.n[i] = q->lk[i];
		/* (a renewal claimed its instance for the connection, maybe
		 * just now: its first report) */
		if (rc == 0 && !q->lease_release)
			lk_label = mds_peer_label(s, peer);
		if (lk_label != IX_NO_SLOT && !s->labels[lk_label].id)
			lk_label = IX_NO_SLOT;
		mds_count_lookups(s, NULL, lk_label, &d);
		/* ... and what moved through maru-agent, for the same */
		mds_count_remote(s, lk_label, &q->remote);
	}
	if (q->list.n) {
		/* "touched": uses the client made without a request (lookups
		 * in a shared index): the policy sees them too */
		struct mds_iter it;
		struct mds_key k;

		mds_iter_init(&it, &q->list);
		while (mds_next_key(&it, &k))
			(void)mds_exists(s, &k);
	}
	notices_take(
		s,
		rc == 1 || q->lease_release
			? IX_NO_SLOT
			: mds_inst_for(s, q->instance_id, q->lease_id, peer),
		false, &nt);
	mp_put_map(w, 2 + (s->server_id[0] != '\0') + notices_fields(&nt) +
			      (s->pub != NULL));
	/* the shared index the client should use: a client
	 * whose area differs (re)attaches (HANDSHAKE) */
	if (s->pub) {
		mp_put_key(w, "shm_index_id");
		mp_put_uint(w, pub_area_id(s->pub));
	}
	mp_put_key(w, "lease_ttl");
	mp_put_float(w, (double)s->cfg.lease_ttl_ns / 1e9);
	mp_put_key(w, "lease_expired");
	mp_put_bool(w, rc == 1);
	put_server_id(s, w);
	put_notices(w, &nt);
	return 0;
}

static void do_handshake(struct mds *s, struct mp_wr *w)
{
	const char *a = s->cfg.rm_address ? s->cfg.rm_address : "";
	bool idx = s->pub && s->pub->cur.n_groups;

	mp_put_map(w, 5 + (s->server_id[0] != '\0') + 2 * idx);
	/* an addition: the longest key REGISTER_KV takes, so that a client
	 * refuses a longer one itself, naming the limit */
	mp_put_key(w, "max_key_bytes");
	mp_put_uint(w, s->cfg.max_key ? s->cfg.max_key : IX_KEY_MAX);
	/* additions: lookups need no request (the shared index), where to
	 * map it */
	if (idx) {
		mp_put_key(w, "capabilities");
		mp_put_array(w, 1);
		mp_put_str(w, "shm_index_v1", 12);
		mp_put_key(w, "shm_index");
		pub_encode_descriptor(s->pub, w);
	}
	mp_put_key(w, "success");
	mp_put_bool(w, true);
	mp_put_key(w, "rm_address");
	mp_put_str(w, a, (uint32_t)strlen(a));
	mp_put_key(w, "server_version");
	mp_put_uint(w, MDS_SERVER_VERSION);
	mp_put_key(w, "lease_ttl");
	mp_put_float(w, (double)s->cfg.lease_ttl_ns / 1e9);
	put_server_id(s, w);
}

/*
 * Fill the payload for a decoded request.  Return: 0, 1 when it was
 * parked in *@wp (nothing written), -EPERM (refused), or -ENOMEM.
 */
static int dispatch(struct mds *s, const struct mds_req *q,
		    struct mds_peer *peer, struct mp_wr *w,
		    struct mds_wait **wp)
{
	const struct mds_region *r = NULL;
	const struct ix_entry *e;
	uint64_t total, avail;

	switch (q->hdr.msg_type) {
	case MDS_REQUEST_ALLOC:
		return do_alloc(s, q, peer, w, wp);
	case MDS_RETURN_ALLOC:
		PUT_BOOL_MAP(w, "success",
			     mds_return(s, q->instance_id, q->region_id, peer,
					q->ack));
		return 0;
	case MDS_LIST_ALLOCATIONS:
		do_list(s, q, w);
		return 0;
	case MDS_REGISTER_KV:
		return do_register(s, q, peer, w);
	case MDS_LOOKUP_KV:
		e = mds_lookup(s, &q->reg.key, &r);
		put_lookup(w, e, r);
		count_one(s, q, peer, e);
		return 0;
	case MDS_EXISTS_KV:
		e = mds_exists(s, &q->reg.key);
		PUT_BOOL_MAP(w, "exists", e != NULL);
		count_one(s, q, peer, e);
		return 0;
	case MDS_DELETE_KV: {
		/* an addition: which registration went ("kv_gen"): a client
		 * frees its page only if it was its own registration */
		uint64_t gen = mds_delete(s, &q->reg.key, peer);

		mp_put_map(w, 1 + (gen != 0));
		mp_put_key(w, "success");
		mp_put_bool(w, gen != 0);
		if (gen) {
			mp_put_key(w, "kv_gen");
			mp_put_uint(w, gen);
		}
		return 0;
	}
	case MDS_PIN_KV:
		PUT_BOOL_MAP(w, "exists",
			     mds_pin(s, &q->reg.key, peer, q->ttl_ms));
		return 0;
	case MDS_UNPIN_KV:
		PUT_BOOL_MAP(w, "success", mds_unpin(s, &q->reg.key, peer));
		return 0;
	case MDS_BATCH_REGISTER_KV:
		return do_batch_register(s, q, peer, w);
	case MDS_BATCH_LOOKUP_KV:
		do_batch_lookup(s, q, peer, w);
		return 0;
	case MDS_BATCH_EXISTS_KV:
	case MDS_BATCH_PIN_KV:
	case MDS_BATCH_UNPIN_KV:
		do_batch_bools(s, q, peer, w);
		return 0;
	case MDS_GET_STATS:
		if (pool_figures(s, s->cfg.dax_only, q, peer, wp, &total,
				 &avail))
			return 1;
		do_stats(s, total, avail, w);
		return 0;
	case MDS_HEARTBEAT:
		return do_heartbeat(s, q, peer, w);
	case MDS_REPORT_STATS:
		do_report(s, q, w);
		return 0;
	case MDS_GET_USAGE:
		if (pool_figures(s, false, q, peer, wp, &total, &avail))
			return 1;
		return do_usage(s, total, avail, w);
	case MDS_HANDSHAKE:
		do_handshake(s, w);
		return 0;
	default: /* mds_decode() refused every other type */
		return -ENOSYS;
	}
}

uint64_t mds_prefetch(struct mds *s, const uint8_t *body, size_t len)
{
	struct mds_key k;
	struct ix_key x;
	uint64_t h;

	if (!s->kv.count || mds_peek_key(body, len, &k) < 0)
		return 0;
	x = mds_key_ix(&k);
	h = ix_hash(&s->kv, &x);
	ix_prefetch(&s->kv, h);
	return h ? h : 1;
}

void mds_prefetch_entry(struct mds *s, uint64_t h)
{
	ix_prefetch_entry(&s->kv, h);
}

void mds_prefetch_next(struct mds *s, uint64_t h)
{
	ix_prefetch_next(&s->kv, h);
}

static int handle(struct mds *s, const uint8_t *body, size_t len,
		  struct mds_peer *peer, struct buf *out, struct mds_wait **wp)
{
	struct mp_wr w = {out, 0};
	char whybuf[128];
	const char *why = NULL;
	struct mds_req q;
	size_t at;
	int rc;

	buf_reset(out);
	s->ctr.requests++;
	rc = mds_decode(body, len, &q, &why, whybuf, sizeof(whybuf));
	if (rc < 0) {
		s->ctr.errors++;
		log_dbg("request type 0x%02x seq %u refused: %s",
			q.hdr.msg_type, q.hdr.sequence, why);
		mds_error_reply(&w, rc == MDS_EBADHDR ? NULL : &q.hdr, why);
		return 0;
	}
	at = mds_begin_reply(&w, &q.hdr);
	rc = dispatch(s, &q, peer, &w, wp);
	if (rc == 1) {
		buf_reset(out);
		return 1;
	}
	if (rc == 0 && !w.err) {
		mds_end_reply(&w, at);
		return 0;
	}
	if (rc == -EPERM) {
		s->ctr.errors++;
		buf_reset(out);
		mds_held_reply(&w, &q.hdr);
		return 0;
	}
	/* out of memory somewhere: answer anyway, with what we can */
	s->ctr.errors++;
	log_err("request type 0x%02x: out of memory", q.hdr.msg_type);
	buf_reset(out);
	w.err = 0;
	mds_error_reply(&w, &q.hdr, "internal server error: out of memory");
	return 0;
}

/*
 * handle() timed and counted by type and outcome (GET_STATS "requests");
 * a parked request keeps its start, for mds_resume() / mds_wait_abandon().
 * One clock read a request: within a loop turn, a request starts where
 * the one before it ended (s->req_t, cleared by mds_turn_done() before
 * the loop waits), so a pipelined burst pays one read each, not two.
 */
int mds_handle(struct mds *s, const uint8_t *body, size_t len,
	       struct mds_peer *peer, struct buf *out, struct mds_wait **wp)
{
	uint64_t t0 = s->req_t ? s->req_t : now_ns(), errors = s->ctr.errors;
	/* the header's type byte; 0 ("invalid") when there is no header */
	uint8_t type = len >= MDS_HDR_SIZE ? body[3] : 0;
	int rc = handle(s, body, len, peer, out, wp);

	s->req_t = now_ns();
	if (rc == 1) {
		(*wp)->t0_ns = t0;
		return 1;
	}
	reqstats_record(&s->req, type,
			s->ctr.errors != errors ? RQ_ERROR : RQ_OK,
			s->req_t - t0);
	return rc;
}

static int resume(struct mds *s, struct mds_wait *wt, struct buf *out)
{
	struct mds_peer peer = {wt->peer_fd, wt->peer_rid, NULL, NULL};
	struct mds_hdr hdr = wt->hdr;
	struct mp_wr w = {out, 0};
	uint64_t total = 0, avail = 0;
	struct rm_handle h;
	size_t at;
	int rc = 0;

	buf_reset(out);
	at = mds_begin_reply(&w, &hdr);
	if (wt->kind != MDS_REQUEST_ALLOC && wt->rc == 0 &&
	    s->rm->pool_usage(s->rm_arg,
			      wt->kind == MDS_GET_STATS && s->cfg.dax_only,
			      &total, &avail, NULL) < 0)
		total = avail = 0;
	switch (wt->kind) {
	case MDS_REQUEST_ALLOC:
		rc = mds_alloc_finish(s, wt, &peer, &h);
		if (rc == -EINPROGRESS) {
			buf_reset(out);
			return 1; /* waits again: for capacity, or the RM */
		}
		put_alloc(s, &w, rc, wt->size, &h,
			  rc == -EPERM
				  ? IX_NO_SLOT
				  : mds_inst_for(s, wt->inst, wt->lease,
						 wt->no_peer ? NULL : &peer));
		rc = 0;
		break;
	case MDS_GET_STATS:
		do_stats(s, total, avail, &w);
		break;
	default:
		rc = do_usage(s, total, avail, &w);
		break;
	}
	mds_wait_free(wt);
	if (rc == 0 && !w.err) {
		mds_end_reply(&w, at);
		return 0;
	}
	s->ctr.errors++;
	buf_reset(out);
	w.err = 0;
	mds_error_reply(&w, &hdr, "internal server error: out of memory");
	return 0;
}

/* resume() counted as mds_handle() counts (a request that waits again
 * is counted when it is answered) */
int mds_resume(struct mds *s, struct mds_wait *wt, struct buf *out)
{
	uint64_t t0 = wt->t0_ns, errors = s->ctr.errors;
	uint8_t type = wt->hdr.msg_type;
	int rc = resume(s, wt, out); /* frees @wt unless it returns 1 */

	if (rc != 1 && t0)
		reqstats_record(&s->req, type,
				s->ctr.errors != errors ? RQ_ERROR : RQ_OK,
				now_ns() - t0);
	return rc;
}

void mds_wait_abandon(struct mds *s, struct mds_wait *w)
{
	struct rm_handle h;

	if (w->t0_ns)
		reqstats_record(&s->req, w->hdr.msg_type, RQ_ABANDONED,
				now_ns() - w->t0_ns);

	if (w->kind == MDS_REQUEST_ALLOC)
		mds_alloc_finish(s, w, NULL, &h);
	mds_wait_free(w);
}
