/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c - REPORT_STATS accumulators (see stats.h)
 *
 * Items live in one growable array; an index maps a (client, op) pair to
 * its position.  Map keys are length-prefixed so that no client id can
 * make two different pairs collide; "_all" items use a different key tag,
 * so a client that calls itself "_all" stays a client of its own.
 *
 * GET_STATS sorts pointers to the items (clients, then ops, by byte
 * order), emits them grouped, and resets the interval figures.
 *
 * reqstats: a slot per message type (rq_slot(), a switch), a fixed
 * histogram of latencies in 1-2.5-5 steps from 1 us to 100 ms; a
 * request costs one linear search of 16 bounds and a few additions.
 */
#include "stats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mds_proto.h"

void stats_init(struct mds_stats *st, uint64_t seed)
{
	memset(st, 0, sizeof(*st));
	ix_init(&st->map, seed);
}

void stats_destroy(struct mds_stats *st)
{
	uint32_t i;

	for (i = 0; i < st->n; i++) {
		free(st->items[i].client);
		free(st->items[i].op);
	}
	free(st->items);
	ix_destroy(&st->map);
	memset(st, 0, sizeof(*st));
}

static char *dup_n(const char *s, uint32_t n)
{
	char *p = malloc(n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

#define KEY_MAX (4 + 2 * STATS_MAX_NAME)

/* the map key of (client, op) in @kb; client NULL = "_all" */
static struct ix_key item_key(uint8_t kb[KEY_MAX], const char *client,
			      uint32_t clen, const char *op, uint32_t oplen)
{
	struct ix_key k = {kb, 0, client ? KEY_STR : KEY_BIN};

	if (!client)
		clen = 0;
	kb[0] = (uint8_t)clen;
	kb[1] = (uint8_t)(clen >> 8);
	kb[2] = kb[3] = 0;
	if (clen)
		memcpy(kb + 4, client, clen);
	memcpy(kb + 4 + clen, op, oplen);
	k.len = 4 + clen + oplen;
	return k;
}

static struct ix_entry *item_entry(struct mds_stats *st,
				   const struct st_item *it)
{
	uint8_t kb[KEY_MAX];
	struct ix_key k =
		item_key(kb, it->client, it->client_len, it->op, it->op_len);

	return ix_find(&st->map, &k, ix_hash(&st->map, &k));
}

#define NO_ITEM UINT32_MAX

/*
 * Find or create the item for (client, op); client NULL = "_all".
 * Return: its index (a pointer would not survive the array's growth by
 * the next call), or NO_ITEM.
 */
static uint32_t item(struct mds_stats *st, const char *client, uint32_t clen,
		     const char *op, uint32_t oplen)
{
	uint8_t kb[KEY_MAX];
	struct ix_key k = item_key(kb, client, clen, op, oplen);
	struct ix_entry *e;
	struct st_item *it;
	int rc;

	e = ix_find(&st->map, &k, ix_hash(&st->map, &k));
	if (e)
		return e->slot;
	if (st->n >= STATS_MAX_ITEMS)
		return NO_ITEM;
	if (st->n == st->cap) {
		uint32_t cap = st->cap ? st->cap * 2 : 64;
		struct st_item *v = realloc(st->items, cap * sizeof(*v));

		if (!v)
			return NO_ITEM;
		st->items = v;
		st->cap = cap;
	}
	it = &st->items[st->n];
	memset(it, 0, sizeof(*it));
	it->op = dup_n(op, oplen);
	it->op_len = oplen;
	if (client) {
		it->client = dup_n(client, clen);
		it->client_len = clen;
	}
	if (!it->op || (client && !it->client))
		goto out_free;
	rc = ix_insert(&st->map, &k, ix_hash(&st->map, &k), &e);
	if (rc < 0)
		goto out_free;
	e->slot = st->n;
	return st->n++;

out_free:
	free(it->op);
	free(it->client);
	return NO_ITEM;
}

static void acc_add(struct st_acc *a, bool hit, bool miss, int64_t size,
		    double lat)
{
	if (a->count == 0 || lat < a->min)
		a->min = lat;
	if (a->count == 0 || lat > a->max)
		a->max = lat;
	if (a->icount == 0 || lat < a->imin)
		a->imin = lat;
	if (a->icount == 0 || lat > a->imax)
		a->imax = lat;
	a->count++;
	a->icount++;
	a->hit += hit;
	a->miss += miss;
	a->bytes += size;
	a->sum += lat;
	a->isum += lat;
}

int stats_record(struct mds_stats *st, const char *client, uint32_t clen,
		 const char *op, uint32_t oplen, const char *result,
		 uint32_t rlen, int64_t size, double latency_us)
{
	bool hit = rlen == 3 && !memcmp(result, "hit", 3);
	bool miss = rlen == 4 && !memcmp(result, "miss", 4);
	uint32_t c, all;

	if (clen > STATS_MAX_NAME || oplen > STATS_MAX_NAME ||
	    !isfinite(latency_us)) {
		st->dropped++;
		return -ENOSPC;
	}
	c = item(st, client, clen, op, oplen);
	all = c != NO_ITEM ? item(st, NULL, 0, op, oplen) : NO_ITEM;
	if (all == NO_ITEM) {
		st->dropped++;
		return st->n >= STATS_MAX_ITEMS ? -ENOSPC : -ENOMEM;
	}
	acc_add(&st->items[c].a, hit, miss, size, latency_us);
	acc_add(&st->items[all].a, hit, miss, size, latency_us);
	return 0;
}

void stats_forget(struct mds_stats *st, const char *client, uint32_t clen)
{
	struct ix_entry *e;
	struct st_item *it;
	uint32_t i = 0;

	while (i < st->n) {
		it = &st->items[i];
		if (!it->client || it->client_len != clen ||
		    memcmp(it->client, client, clen)) {
			i++;
			continue;
		}
		if ((e = item_entry(st, it)))
			ix_delete(&st->map, e);
		free(it->client);
		free(it->op);
		/* the last item moves into the hole */
		if (i != --st->n) {
			*it = st->items[st->n];
			if ((e = item_entry(st, it)))
				e->slot = i;
		}
	}
}

/* Python's round(x, 1) for the values we emit */
static double r1(double x)
{
	return round(x * 10.0) / 10.0;
}

static void put_acc(struct mp_wr *w, const struct st_acc *a)
{
	mp_put_map(w, 12);
	mp_put_key(w, "count");
	mp_put_uint(w, a->count);
	mp_put_key(w, "hit_count");
	mp_put_uint(w, a->hit);
	mp_put_key(w, "miss_count");
	mp_put_uint(w, a->miss);
	mp_put_key(w, "total_bytes");
	mp_put_int(w, a->bytes);
	mp_put_key(w, "latency_sum_us");
	mp_put_float(w, r1(a->sum));
	mp_put_key(w, "avg_latency_us");
	mp_put_float(w, a->count ? r1(a->sum / (double)a->count) : 0.0);
	mp_put_key(w, "min_latency_us");
	mp_put_float(w, a->count ? r1(a->min) : 0.0);
	mp_put_key(w, "max_latency_us");
	mp_put_float(w, a->count ? r1(a->max) : 0.0);
	mp_put_key(w, "interval_count");
	mp_put_uint(w, a->icount);
	mp_put_key(w, "interval_avg_us");
	mp_put_float(w, a->icount ? r1(a->isum / (double)a->icount) : 0.0);
	mp_put_key(w, "interval_min_us");
	mp_put_float(w, a->icount ? r1(a->imin) : 0.0);
	mp_put_key(w, "interval_max_us");
	mp_put_float(w, a->icount ? r1(a->imax) : 0.0);
}

static int cmp_bytes(const char *a, uint32_t al, const char *b, uint32_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	if (c)
		return c;
	return al < bl ? -1 : al > bl;
}

/* "_all" items first, then by client, then by op */
static int cmp_item(const void *x, const void *y)
{
	const struct st_item *a = *(struct st_item *const *)x;
	const struct st_item *b = *(struct st_item *const *)y;
	int c;

	if (!a->client != !b->client)
		return a->client ? 1 : -1;
	if (a->client) {
		c = cmp_bytes(a->client, a->client_len, b->client,
			      b->client_len);
		if (c)
			return c;
	}
	return cmp_bytes(a->op, a->op_len, b->op, b->op_len);
}

static bool same_client(const struct st_item *a, const struct st_item *b)
{
	if (!a->client || !b->client)
		return !a->client && !b->client;
	return a->client_len == b->client_len &&
	       !memcmp(a->client, b->client, a->client_len);
}

int stats_encode(struct mds_stats *st, struct mp_wr *w)
{
	struct st_item **v = NULL;
	uint32_t i, j, nclients = 0;

	if (st->n) {
		v = malloc(st->n * sizeof(*v));
		if (!v) {
			w->err = -ENOMEM;
			return -ENOMEM;
		}
	}
	for (i = 0; i < st->n; i++)
		v[i] = &st->items[i];
	if (st->n)
		qsort(v, st->n, sizeof(*v), cmp_item);
	for (i = 0; i < st->n; i++)
		if (v[i]->client && (i == 0 || !same_client(v[i - 1], v[i])))
			nclients++;

	mp_put_map(w, 1);
	mp_put_key(w, "clients");
	mp_put_map(w, nclients + 1);
	/* "_all" always, even with no reports */
	mp_put_key(w, "_all");
	for (i = 0; i < st->n && !v[i]->client; i++)
		;
	mp_put_map(w, 1);
	mp_put_key(w, "operations");
	mp_put_map(w, i);
	for (j = 0; j < i; j++) {
		mp_put_str(w, v[j]->op, v[j]->op_len);
		put_acc(w, &v[j]->a);
	}
	while (i < st->n) {
		for (j = i; j < st->n && same_client(v[i], v[j]); j++)
			;
		mp_put_str(w, v[i]->client, v[i]->client_len);
		mp_put_map(w, 1);
		mp_put_key(w, "operations");
		mp_put_map(w, j - i);
		for (; i < j; i++) {
			mp_put_str(w, v[i]->op, v[i]->op_len);
			put_acc(w, &v[i]->a);
		}
	}
	free(v);
	if (w->err)
		return w->err;
	for (i = 0; i < st->n; i++) {
		st->items[i].a.icount = 0;
		st->items[i].a.isum = 0;
		st->items[i].a.imin = 0;
		st->items[i].a.imax = 0;
	}
	return 0;
}

/* ---- requests by type (reqstats) ---- */

static const uint64_t rq_bounds_ns[RQ_NBOUNDS] = {
	1000,	  2500,	    5000,     10000,	 25000,	  50000,
	100000,	  250000,   500000,   1000000,	 2500000, 5000000,
	10000000, 25000000, 50000000, 100000000,
};

/* slot -> name as upstream's MessageType spells it */
static const char *const rq_names[RQ_NTYPES] = {
	"REQUEST_ALLOC",     "RETURN_ALLOC",	"LIST_ALLOCATIONS",
	"REGISTER_KV",	     "LOOKUP_KV",	"EXISTS_KV",
	"DELETE_KV",	     "PIN_KV",		"UNPIN_KV",
	"BATCH_REGISTER_KV", "BATCH_LOOKUP_KV", "BATCH_EXISTS_KV",
	"BATCH_PIN_KV",	     "BATCH_UNPIN_KV",	"GET_STATS",
	"HEARTBEAT",	     "REPORT_STATS",	"GET_USAGE",
	"HANDSHAKE",	     "SHUTDOWN",	"invalid",
};

static unsigned int rq_slot(uint8_t type)
{
	switch (type) {
	case MDS_REQUEST_ALLOC:
		return 0;
	case MDS_RETURN_ALLOC:
		return 1;
	case MDS_LIST_ALLOCATIONS:
		return 2;
	case MDS_REGISTER_KV:
	case MDS_LOOKUP_KV:
	case MDS_EXISTS_KV:
	case MDS_DELETE_KV:
	case MDS_PIN_KV:
	case MDS_UNPIN_KV:
		return 3 + (type - MDS_REGISTER_KV);
	case MDS_BATCH_REGISTER_KV:
	case MDS_BATCH_LOOKUP_KV:
	case MDS_BATCH_EXISTS_KV:
	case MDS_BATCH_PIN_KV:
	case MDS_BATCH_UNPIN_KV:
		return 9 + (type - MDS_BATCH_REGISTER_KV);
	case MDS_GET_STATS:
	case MDS_HEARTBEAT:
	case MDS_REPORT_STATS:
	case MDS_GET_USAGE:
		return 14 + (type - MDS_GET_STATS);
	case MDS_HANDSHAKE:
		return 18;
	case MDS_SHUTDOWN:
		return 19;
	default:
		return RQ_NTYPES - 1;
	}
}

void reqstats_record(struct mds_reqstats *r, uint8_t type, enum rq_outcome out,
		     uint64_t ns)
{
	struct rq_type *t = &r->t[rq_slot(type)];
	unsigned int b = 0;

	while (b < RQ_NBOUNDS && ns > rq_bounds_ns[b])
		b++;
	t->n[out]++;
	t->sum_ns += ns;
	t->bucket[b]++;
}

void reqstats_encode(const struct mds_reqstats *r, struct mp_wr *w)
{
	const struct rq_type *t;
	uint32_t i, b, used = 0;
	uint64_t cum;

	for (i = 0; i < RQ_NTYPES; i++)
		used += r->t[i].n[RQ_OK] + r->t[i].n[RQ_ERROR] +
				r->t[i].n[RQ_ABANDONED] >
			0;
	mp_put_map(w, 2);
	mp_put_key(w, "latency_bounds_us");
	mp_put_array(w, RQ_NBOUNDS);
	for (b = 0; b < RQ_NBOUNDS; b++)
		mp_put_float(w, (double)rq_bounds_ns[b] / 1000.0);
	mp_put_key(w, "by_type");
	mp_put_map(w, used);
	for (i = 0; i < RQ_NTYPES; i++) {
		t = &r->t[i];
		if (!(t->n[RQ_OK] + t->n[RQ_ERROR] + t->n[RQ_ABANDONED]))
			continue;
		mp_put_str(w, rq_names[i], (uint32_t)strlen(rq_names[i]));
		mp_put_map(w, 5);
		mp_put_key(w, "ok");
		mp_put_uint(w, t->n[RQ_OK]);
		mp_put_key(w, "error");
		mp_put_uint(w, t->n[RQ_ERROR]);
		mp_put_key(w, "abandoned");
		mp_put_uint(w, t->n[RQ_ABANDONED]);
		mp_put_key(w, "latency_sum_us");
		mp_put_float(w, (double)t->sum_ns / 1000.0);
		mp_put_key(w, "latency_buckets");
		mp_put_array(w, RQ_NBOUNDS + 1);
		for (b = 0, cum = 0; b <= RQ_NBOUNDS; b++) {
			cum += t->bucket[b];
			mp_put_uint(w, cum);
		}
	}
}
