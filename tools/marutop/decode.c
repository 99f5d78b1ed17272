/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decode.c - marutop's decoders of maru-server's GET_USAGE and GET_STATS
 * replies, and the sample they fill
 *
 * The decoders walk the MessagePack replies with msgpk.c and keep only
 * what they know: unknown keys are skipped, absent ones stay MT_NA.  That
 * is how marutop reads upstream's Python server (no "keys", "pinned",
 * "eviction", ...) and later servers with more keys alike.  They are pure
 * and bounded: fuzz_marutop_reply feeds them arbitrary bytes.  The
 * connection that brings the replies is fetch.c's.
 *
 * Context: single thread; a sample belongs to the caller.
 */
#include "mt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msgpk.h"
#include "util.h"

void mt_snap_free(struct mt_snap *s)
{
	size_t i;

	for (i = 0; i < s->n; i++) {
		free(s->v[i].id);
		free(s->v[i].devices);
		free(s->v[i].host);
	}
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* remote figures not sent (yet) */
static void rt_init(struct mt_rt *rt)
{
	rt->clients = rt->puts = rt->put_bytes = MT_NA;
	rt->gets = rt->get_bytes = rt->errors = MT_NA;
	rt->put_rate = rt->get_rate = -1;
}

void mt_snap_init(struct mt_snap *s)
{
	memset(s, 0, sizeof(*s));
	rt_init(&s->rt);
	s->pool_total = s->pool_free = MT_NA;
	s->entries = s->kv_bytes = s->held_bytes = MT_NA;
	s->nalloc = s->total_alloc = s->active_clients = MT_NA;
	s->evictions = s->evicted_bytes = s->recovered_keys = MT_NA;
	s->lk_keys = s->lk_hits = s->lk_batch_keys = s->lk_prefix = MT_NA;
	s->eviction_rate = s->elapsed = s->lookup_rate = -1;
	s->p50_us = s->p99_us = -1;
}

static bool key_is(const struct mp_val *k, const char *lit)
{
	size_t n = strlen(lit);

	return k->type == MP_STR && k->len == n && !memcmp(k->ptr, lit, n);
}

/* a non-negative integer value, else MT_NA (value consumed either way) */
static int get_uint(struct mp_rd *r, uint64_t *out)
{
	struct mp_val v;
	int rc = mp_read(r, &v);

	if (rc < 0)
		return rc;
	if (v.type == MP_UINT)
		*out = v.u;
	else if (v.type == MP_FLOAT && v.f >= 0 && v.f < 0x1p64)
		*out = (uint64_t)v.f; /* in range: the cast is defined */
	else
		*out = MT_NA;
	return mp_skip_rest(r, &v);
}

static int get_double(struct mp_rd *r, double *out)
{
	struct mp_val v;
	int rc = mp_read(r, &v);

	if (rc < 0)
		return rc;
	if (v.type == MP_FLOAT)
		*out = v.f;
	else if (v.type == MP_UINT)
		*out = (double)v.u;
	return mp_skip_rest(r, &v);
}

/* a string copy with control bytes as '?'; NULL on -ENOMEM */
static char *dup_clean(const uint8_t *p, uint32_t n)
{
	char *s = malloc((size_t)n + 1);
	uint32_t i;

	if (!s)
		return NULL;
	for (i = 0; i < n; i++)
		s[i] = p[i] < 0x20 || p[i] == 0x7f ? '?' : (char)p[i];
	s[n] = '\0';
	return s;
}

/* Read a map header.  Return: its pairs, or -EPROTO if not a map. */
static int read_map(struct mp_rd *r)
{
	struct mp_val v;

	if (mp_read(r, &v) < 0)
		return -EPROTO;
	if (v.type != MP_MAP) {
		mp_skip_rest(r, &v);
		return -ENOENT;
	}
	return (int)(v.n > INT32_MAX ? INT32_MAX : v.n);
}

static int append_text(char **dst, const char *add)
{
	size_t a = *dst ? strlen(*dst) : 0, b = strlen(add);
	char *s = realloc(*dst, a + b + 2);

	if (!s)
		return -ENOMEM;
	if (a)
		s[a++] = ' ';
	memcpy(s + a, add, b + 1);
	*dst = s;
	return 0;
}

/*
 * upstream's InstanceUsage.devices: a list of {dax_path, bytes|used|
 * allocated|size} or a map {dax_path: bytes}; kept as text.
 */
static int decode_devices(struct mp_rd *r, struct mt_inst *in)
{
	struct mp_val v, k, pv;
	uint64_t bytes;
	char path[256], txt[300], nb[32];
	uint32_t i, j, m;
	int rc;

	if (mp_read(r, &v) < 0)
		return -EPROTO;
	if (v.type != MP_ARRAY && v.type != MP_MAP)
		return mp_skip_rest(r, &v);
	for (i = 0; i < v.n; i++) {
		path[0] = '\0';
		bytes = MT_NA;
		if (v.type == MP_MAP) {
			if (mp_read(r, &k) < 0)
				return -EPROTO;
			if (k.type == MP_STR)
				snprintf(path, sizeof(path), "%.*s", (int)k.len,
					 (const char *)k.ptr);
			else if (mp_skip_rest(r, &k) < 0)
				return -EPROTO;
			if (get_uint(r, &bytes) < 0)
				return -EPROTO;
		} else {
			rc = read_map(r);
			if (rc == -EPROTO)
				return rc;
			m = rc < 0 ? 0 : (uint32_t)rc;
			for (j = 0; j < m; j++) {
				if (mp_read(r, &k) < 0)
					return -EPROTO;
				if (key_is(&k, "dax_path") ||
				    key_is(&k, "path")) {
					if (mp_read(r, &pv) < 0)
						return -EPROTO;
					if (pv.type == MP_STR)
						snprintf(path, sizeof(path),
							 "%.*s", (int)pv.len,
							 (const char *)pv.ptr);
					if (mp_skip_rest(r, &pv) < 0)
						return -EPROTO;
				} else if (key_is(&k, "bytes") ||
					   key_is(&k, "used") ||
					   key_is(&k, "allocated") ||
					   key_is(&k, "size")) {
					if (get_uint(r, &bytes) < 0)
						return -EPROTO;
				} else if (mp_skip_rest(r, &k) < 0 ||
					   mp_skip(r) < 0) {
					return -EPROTO;
				}
			}
		}
		for (j = 0; path[j]; j++)
			if ((unsigned char)path[j] < 0x20 || path[j] == ' ')
				path[j] = '?';
		if (bytes == MT_NA)
			snprintf(nb, sizeof(nb), "-");
		else
			snprintf(nb, sizeof(nb), "%llu",
				 (unsigned long long)bytes);
		snprintf(txt, sizeof(txt), "%s=%s", path[0] ? path : "?", nb);
		if (append_text(&in->devices, txt) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int decode_uints(struct mp_rd *r, const char *const *names,
			uint64_t **outs, int nn);

/* GET_USAGE's "lookups" of an instance (maru-server's own count) */
static int decode_inst_lookups(struct mp_rd *r, struct mt_inst *in)
{
	static const char *const names[] = {"keys", "hits"};
	uint64_t keys = MT_NA, hits = MT_NA;
	uint64_t *outs[] = {&keys, &hits};
	int rc = decode_uints(r, names, outs, 2);

	if (rc < 0 || keys == MT_NA || hits == MT_NA || hits > keys)
		return rc;
	in->lookups = keys;
	in->hits = hits;
	in->misses = keys - hits;
	in->counted = true;
	return 0;
}

static int decode_inst(struct mp_rd *r, struct mt_inst *in)
{
	struct mp_val k, v;
	int n, i, rc = 0;

	memset(in, 0, sizeof(*in));
	in->regions = in->allocated = in->used = in->pinned = MT_NA;
	in->held = MT_NA;
	in->keys = in->leases = in->conns = MT_NA;
	in->stores = in->lookups = in->hits = in->misses = MT_NA;
	in->store_rate = in->lookup_rate = -1;
	in->pid = MT_NA;
	rt_init(&in->rt);
	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "instance_id")) {
			if (mp_read(r, &v) < 0)
				return -EPROTO;
			if (v.type == MP_STR && !in->id) {
				in->id = dup_clean(v.ptr, v.len);
				if (!in->id)
					return -ENOMEM;
			}
			rc = mp_skip_rest(r, &v);
		} else if (key_is(&k, "regions")) {
			rc = get_uint(r, &in->regions);
		} else if (key_is(&k, "allocated")) {
			rc = get_uint(r, &in->allocated);
		} else if (key_is(&k, "used")) {
			rc = get_uint(r, &in->used);
		} else if (key_is(&k, "held")) {
			rc = get_uint(r, &in->held);
		} else if (key_is(&k, "pinned")) {
			rc = get_uint(r, &in->pinned);
		} else if (key_is(&k, "keys")) {
			rc = get_uint(r, &in->keys);
		} else if (key_is(&k, "leases")) {
			rc = get_uint(r, &in->leases);
		} else if (key_is(&k, "connections")) {
			rc = get_uint(r, &in->conns);
		} else if (key_is(&k, "devices")) {
			rc = decode_devices(r, in);
		} else if (key_is(&k, "host")) {
			if (mp_read(r, &v) < 0)
				return -EPROTO;
			if (v.type == MP_STR && v.len && !in->host) {
				in->host = dup_clean(v.ptr, v.len);
				if (!in->host)
					return -ENOMEM;
			}
			rc = mp_skip_rest(r, &v);
		} else if (key_is(&k, "pid")) {
			rc = get_uint(r, &in->pid);
		} else if (key_is(&k, "lookups")) {
			rc = decode_inst_lookups(r, in);
		} else if (key_is(&k, "stores")) {
			rc = get_uint(r, &in->stores);
			in->counted = true;
		} else {
			rc = mp_skip_rest(r, &k);
			if (rc == 0)
				rc = mp_skip(r);
		}
	}
	if (rc == 0 && !in->id)
		in->id = dup_clean((const uint8_t *)"?", 1);
	return rc < 0 ? rc : in->id ? 0 : -ENOMEM;
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp(((const struct mt_inst *)a)->id,
		      ((const struct mt_inst *)b)->id);
}

/* is the reply {"error": ...}? */
static bool is_error(const uint8_t *p, size_t n)
{
	struct mp_rd r;
	struct mp_val v;

	mp_rd_init(&r, p, n);
	return mp_read(&r, &v) == 0 && v.type == MP_MAP && v.n >= 1 &&
	       mp_read(&r, &v) == 0 && key_is(&v, "error");
}

int mt_decode_usage(struct mt_snap *s, const uint8_t *p, size_t n)
{
	struct mp_rd r;
	struct mp_val k, v;
	int np, i, rc = 0;
	uint32_t j;

	if (is_error(p, n))
		return -EPROTO;
	mp_rd_init(&r, p, n);
	np = read_map(&r);
	if (np < 0)
		return -EPROTO;
	for (i = 0; i < np && rc == 0; i++) {
		if (mp_read(&r, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "pool_total")) {
			rc = get_uint(&r, &s->pool_total);
		} else if (key_is(&k, "pool_free")) {
			rc = get_uint(&r, &s->pool_free);
		} else if (key_is(&k, "instances")) {
			if (mp_read(&r, &v) < 0)
				return -EPROTO;
			if (v.type != MP_ARRAY) {
				rc = mp_skip_rest(&r, &v);
				continue;
			}
			for (j = 0; j < v.n && rc == 0; j++) {
				if (s->n == s->cap &&
				    array_grow(&s->v, &s->cap, s->n,
					       sizeof(*s->v), 8) < 0)
					return -ENOMEM;
				rc = decode_inst(&r, &s->v[s->n]);
				if (s->v[s->n].id)
					s->n++; /* kept, even half decoded */
				else {
					free(s->v[s->n].devices);
					free(s->v[s->n].host);
				}
			}
		} else {
			rc = mp_skip_rest(&r, &k);
			if (rc == 0)
				rc = mp_skip(&r);
		}
	}
	if (rc < 0)
		return rc;
	if (s->n)
		qsort(s->v, s->n, sizeof(*s->v), cmp_id);
	return 0;
}

/* the "operations" of one stats_manager client, into @ops (may be NULL) */
struct opsum {
	uint64_t stores, lookups, hits, misses;
	bool any;
};

static int decode_acc(struct mp_rd *r, uint64_t *count, uint64_t *hit,
		      uint64_t *miss, double *lat_sum)
{
	struct mp_val k;
	int n, i, rc = 0;

	*count = *hit = *miss = 0;
	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "count"))
			rc = get_uint(r, count);
		else if (key_is(&k, "hit_count"))
			rc = get_uint(r, hit);
		else if (key_is(&k, "miss_count"))
			rc = get_uint(r, miss);
		else if (key_is(&k, "latency_sum_us") && lat_sum)
			rc = get_double(r, lat_sum);
		else if ((rc = mp_skip_rest(r, &k)) == 0)
			rc = mp_skip(r);
	}
	return rc;
}

static int decode_ops(struct mp_rd *r, struct opsum *sum, struct mt_snap *all)
{
	struct mp_val k, op;
	uint64_t count, hit, miss;
	double lat;
	int n, i, m, j, rc = 0;

	memset(sum, 0, sizeof(*sum));
	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		if (!key_is(&k, "operations")) {
			if ((rc = mp_skip_rest(r, &k)) == 0)
				rc = mp_skip(r);
			continue;
		}
		m = read_map(r);
		if (m < 0) {
			rc = m == -ENOENT ? 0 : m;
			continue;
		}
		for (j = 0; j < m && rc == 0; j++) {
			if (mp_read(r, &op) < 0 || op.type != MP_STR)
				return -EPROTO;
			lat = 0;
			rc = decode_acc(r, &count, &hit, &miss, &lat);
			if (rc < 0)
				break;
			if (count == MT_NA)
				count = 0;
			if (hit == MT_NA)
				hit = 0;
			if (miss == MT_NA)
				miss = 0;
			sum->any = true;
			if (key_is(&op, "store") ||
			    key_is(&op, "batch_store")) {
				sum->stores += count;
			} else if (key_is(&op, "retrieve") ||
				   key_is(&op, "batch_retrieve")) {
				sum->lookups += count;
				sum->hits += hit;
				sum->misses += miss;
			}
			if (all && all->nops < MT_MAX_OPS) {
				struct mt_op *o = &all->ops[all->nops++];

				snprintf(o->name, sizeof(o->name), "%.*s",
					 (int)op.len, (const char *)op.ptr);
				o->count = count;
				o->lat_sum_us = lat;
				o->rate = o->lat_us = -1;
			}
		}
	}
	return rc;
}

static struct mt_inst *find_inst(struct mt_snap *s, const uint8_t *id,
				 uint32_t n)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		if (strlen(s->v[i].id) == n && !memcmp(s->v[i].id, id, n))
			return &s->v[i];
	return NULL;
}

static int decode_clients(struct mp_rd *r, struct mt_snap *s)
{
	struct mp_val k, c;
	struct opsum sum;
	struct mt_inst *in;
	int n, i, m, j, rc = 0;

	n = read_map(r); /* stats_manager */
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		if (!key_is(&k, "clients")) {
			if ((rc = mp_skip_rest(r, &k)) == 0)
				rc = mp_skip(r);
			continue;
		}
		m = read_map(r);
		if (m < 0) {
			rc = m == -ENOENT ? 0 : m;
			continue;
		}
		for (j = 0; j < m && rc == 0; j++) {
			if (mp_read(r, &c) < 0)
				return -EPROTO;
			if (c.type != MP_STR) {
				if ((rc = mp_skip_rest(r, &c)) == 0)
					rc = mp_skip(r);
				continue;
			}
			if (key_is(&c, "_all")) {
				rc = decode_ops(r, &sum, s);
				continue;
			}
			rc = decode_ops(r, &sum, NULL);
			in = find_inst(s, c.ptr, c.len);
			/* (the server's own counts win: GET_USAGE) */
			if (rc == 0 && in && sum.any && !in->counted) {
				in->stores = sum.stores;
				in->lookups = sum.lookups;
				in->hits = sum.hits;
				in->misses = sum.misses;
			}
		}
	}
	return rc;
}

/* a map of { @name: uint } pairs into @outs (others skipped) */
static int decode_uints(struct mp_rd *r, const char *const *names,
			uint64_t **outs, int nn)
{
	struct mp_val k;
	int n, i, j, rc = 0;
	bool done;

	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		done = false;
		for (j = 0; j < nn && !done; j++)
			if (key_is(&k, names[j])) {
				rc = get_uint(r, outs[j]);
				done = true;
			}
		if (!done && (rc = mp_skip_rest(r, &k)) == 0)
			rc = mp_skip(r);
	}
	return rc;
}

/* journal: {..., recovery: {keys, ...}} */
static int decode_journal(struct mp_rd *r, struct mt_snap *s)
{
	static const char *const names[] = {"keys"};
	uint64_t *outs[] = {&s->recovered_keys};
	struct mp_val k;
	int n, i, rc = 0;

	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "recovery"))
			rc = decode_uints(r, names, outs, 1);
		else if ((rc = mp_skip_rest(r, &k)) == 0)
			rc = mp_skip(r);
	}
	return rc;
}

/* an array of up to @cap numbers into @out; Return: how many, or -errno */
static int decode_numbers(struct mp_rd *r, double *out, size_t cap)
{
	struct mp_val v;
	uint32_t i, n;
	size_t got = 0;
	double d;
	int rc;

	if (mp_read(r, &v) < 0)
		return -EPROTO;
	if (v.type != MP_ARRAY)
		return mp_skip_rest(r, &v) < 0 ? -EPROTO : 0;
	n = v.n;
	for (i = 0; i < n; i++) {
		d = -1;
		rc = get_double(r, &d);
		if (rc < 0)
			return rc;
		if (got < cap)
			out[got++] = d;
	}
	return (int)got;
}

/* one type of "requests".by_type: {ok, error, abandoned, latency_buckets} */
static int decode_req(struct mp_rd *r, struct mt_req *q)
{
	double b[MT_LAT_BUCKETS];
	uint64_t v;
	struct mp_val k;
	int n, i, j, m, rc = 0;

	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "ok") || key_is(&k, "error") ||
		    key_is(&k, "abandoned")) {
			rc = get_uint(r, &v);
			if (rc == 0 && v != MT_NA)
				q->count += v;
		} else if (key_is(&k, "latency_buckets")) {
			m = decode_numbers(r, b, MT_LAT_BUCKETS);
			rc = m < 0 ? m : 0;
			for (j = 0; j < m; j++)
				q->buckets[j] = b[j] >= 0 && b[j] < 0x1p64
							? (uint64_t)b[j]
							: 0;
		} else if ((rc = mp_skip_rest(r, &k)) == 0) {
			rc = mp_skip(r);
		}
	}
	return rc;
}

/* requests: {latency_bounds_us: [...], by_type: {TYPE: {...}}} */
static int decode_requests(struct mp_rd *r, struct mt_snap *s)
{
	struct mp_val k, t;
	struct mt_req skip;
	int n, i, m, j, rc = 0;

	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "latency_bounds_us")) {
			m = decode_numbers(r, s->lat_bounds_us,
					   MT_LAT_BUCKETS - 1);
			rc = m < 0 ? m : 0;
			s->nbounds = m < 0 ? 0 : (size_t)m;
		} else if (key_is(&k, "by_type")) {
			m = read_map(r);
			if (m < 0) {
				rc = m == -ENOENT ? 0 : m;
				continue;
			}
			for (j = 0; j < m && rc == 0; j++) {
				struct mt_req *q = &skip;

				if (mp_read(r, &t) < 0 || t.type != MP_STR)
					return -EPROTO;
				if (s->nreqs < MT_MAX_REQS)
					q = &s->reqs[s->nreqs++];
				memset(q, 0, sizeof(*q));
				snprintf(q->name, sizeof(q->name), "%.*s",
					 (int)(t.len < sizeof(q->name) - 1
						       ? t.len
						       : sizeof(q->name) - 1),
					 (const char *)t.ptr);
				for (char *c = q->name; *c; c++)
					if ((unsigned char)*c < 0x20 ||
					    *c == 0x7f)
						*c = '?';
				rc = decode_req(r, q);
			}
		} else if ((rc = mp_skip_rest(r, &k)) == 0) {
			rc = mp_skip(r);
		}
	}
	return rc;
}

/* the value of key @k of a "remote" map into @rt if it is one of its
 * figures (clients, puts, put_bytes, gets, get_bytes, errors), else skipped */
static int rt_field(struct mp_rd *r, const struct mp_val *k, struct mt_rt *rt)
{
	static const char *const names[] = {"clients", "puts",	    "put_bytes",
					    "gets",    "get_bytes", "errors"};
	uint64_t *outs[] = {&rt->clients, &rt->puts,	  &rt->put_bytes,
			    &rt->gets,	  &rt->get_bytes, &rt->errors};
	size_t i;
	int rc;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (key_is(k, names[i]))
			return get_uint(r, outs[i]);
	rc = mp_skip_rest(r, k);
	return rc ? rc : mp_skip(r);
}

/* "instances": {id: {figures}}, into the instances GET_USAGE listed */
static int decode_rt_instances(struct mp_rd *r, struct mt_snap *s)
{
	struct mt_rt skip, *rt;
	struct mt_inst *in;
	struct mp_val id, k;
	int n, i, m, j, rc = 0;

	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &id) < 0)
			return -EPROTO;
		in = id.type == MP_STR ? find_inst(s, id.ptr, id.len) : NULL;
		if (id.type != MP_STR && mp_skip_rest(r, &id) < 0)
			return -EPROTO;
		rt = in ? &in->rt : &skip;
		m = read_map(r);
		if (m < 0) {
			rc = m == -ENOENT ? 0 : m;
			continue;
		}
		for (j = 0; j < m && rc == 0; j++) {
			if (mp_read(r, &k) < 0)
				return -EPROTO;
			rc = rt_field(r, &k, rt);
		}
	}
	return rc;
}

/*
 * "remote" (maru-server): the pool's figures and those of the instance
 * ids listed under "instances"; an instance not listed has no remote
 * client and moved nothing (0s): the server lists every other one
 */
static int decode_remote(struct mp_rd *r, struct mt_snap *s)
{
	static const struct mt_rt zero = {0, 0, 0, 0, 0, 0, -1, -1};
	struct mp_val k;
	int n, i, rc = 0;
	size_t x;

	n = read_map(r);
	if (n < 0)
		return n == -ENOENT ? 0 : n;
	for (x = 0; x < s->n; x++)
		s->v[x].rt = zero;
	s->rt = zero;
	for (i = 0; i < n && rc == 0; i++) {
		if (mp_read(r, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "instances"))
			rc = decode_rt_instances(r, s);
		else
			rc = rt_field(r, &k, &s->rt);
	}
	return rc;
}

int mt_decode_stats(struct mt_snap *s, const uint8_t *p, size_t n)
{
	static const char *const kvn[] = {"total_entries", "total_size",
					  "held_size"};
	static const char *const amn[] = {"num_allocations", "total_allocated",
					  "active_clients"};
	static const char *const evn[] = {"evictions", "evicted_bytes"};
	static const char *const lkn[] = {"keys", "hits", "batch_keys",
					  "prefix_hits"};
	uint64_t *lko[] = {&s->lk_keys, &s->lk_hits, &s->lk_batch_keys,
			   &s->lk_prefix};
	uint64_t *kvo[] = {&s->entries, &s->kv_bytes, &s->held_bytes};
	uint64_t *amo[] = {&s->nalloc, &s->total_alloc, &s->active_clients};
	uint64_t *evo[] = {&s->evictions, &s->evicted_bytes};
	struct mp_rd r;
	struct mp_val k;
	int np, i, rc = 0;

	if (is_error(p, n))
		return -EPROTO;
	mp_rd_init(&r, p, n);
	np = read_map(&r);
	if (np < 0)
		return -EPROTO;
	for (i = 0; i < np && rc == 0; i++) {
		if (mp_read(&r, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "kv_manager"))
			rc = decode_uints(&r, kvn, kvo, 3);
		else if (key_is(&k, "allocation_manager"))
			rc = decode_uints(&r, amn, amo, 3);
		else if (key_is(&k, "eviction"))
			rc = decode_uints(&r, evn, evo, 2);
		else if (key_is(&k, "journal"))
			rc = decode_journal(&r, s);
		else if (key_is(&k, "stats_manager"))
			rc = decode_clients(&r, s);
		else if (key_is(&k, "requests"))
			rc = decode_requests(&r, s);
		else if (key_is(&k, "lookups"))
			rc = decode_uints(&r, lkn, lko, 4);
		else if (key_is(&k, "remote"))
			rc = decode_remote(&r, s);
		else if ((rc = mp_skip_rest(&r, &k)) == 0)
			rc = mp_skip(&r);
	}
	return rc < 0 ? rc : 0;
}
