/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec.c - metadata-server payloads (docs/protocol.md §2)
 *
 * Requests are packed with msgpack-c's packer straight into a struct
 * maru__msg, behind 16 bytes left free for the header (rpc.c writes it with
 * the sequence number at send time).  Keys keep their kind: str, int or bin
 * are packed as such, never converted, and every handle-sized integer that
 * is >= 2^63 goes out as uint64 (0xCF).
 *
 * Replies come from the network, so they are read by a small reader of our
 * own instead of msgpack-c's unpacker: pure, bounded (never reads outside
 * [p, p + len), recursion depth capped, a container cannot announce more
 * elements than there are bytes left), and allocation-free, so a hostile
 * reply cannot make us allocate gigabytes.  Decoders know every key of every
 * reply, apply upstream's defaults for missing keys and skip unknown ones;
 * arrays are delivered into caller-provided sinks.  fuzz_libmaru_codec.c
 * feeds them arbitrary bytes.
 *
 * The MARUDEV device header is not here: src/common/devhdr.c reads and
 * writes it for every part.
 *
 * Context: every function is reentrant; no shared state.
 */
#include "private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <msgpack.h>

#include "buf.h"
#include "mds_proto.h"
#include "msgpk.h"

/* ------------------------------------------------------------------------ */
/* Outgoing messages                                                        */

void maru__msg_init(struct maru__msg *m, uint8_t type)
{
	m->data = m->small;
	m->cap = sizeof(m->small);
	m->len = MDS_HDR_SIZE; /* header filled in by rpc.c */
	m->type = type;
}

void maru__msg_release(struct maru__msg *m)
{
	if (m->data != m->small)
		free(m->data);
	m->data = m->small;
	m->cap = sizeof(m->small);
	m->len = MDS_HDR_SIZE;
}

/* msgpack-c write callback: append to the message, growing it on the heap */
static int msg_write(void *data, const char *p, size_t n)
{
	struct maru__msg *m = data;
	uint8_t *nd;
	size_t ncap;

	if (n > SIZE_MAX / 2 - m->len)
		return -1;
	if (m->len + n > m->cap) {
		ncap = m->cap * 2;
		while (ncap < m->len + n)
			ncap *= 2;
		if (m->data == m->small) {
			nd = malloc(ncap);
			if (nd)
				memcpy(nd, m->small, m->len);
		} else {
			nd = realloc(m->data, ncap);
		}
		if (!nd)
			return -1;
		m->data = nd;
		m->cap = ncap;
	}
	memcpy(m->data + m->len, p, n);
	m->len += n;
	return 0;
}

/* pack a C string as a msgpack str */
static int pack_cstr(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

int maru__pack_key(msgpack_packer *pk, const struct maru_key *k)
{
	switch (k->type) {
	case MARU_KEY_STR:
		if (k->len > UINT32_MAX || (k->len && !k->str))
			return -1;
		return msgpack_pack_str(pk, k->len) |
		       msgpack_pack_str_body(pk, k->str, k->len);
	case MARU_KEY_BIN:
		if (k->len > UINT32_MAX || (k->len && !k->str))
			return -1;
		return msgpack_pack_bin(pk, k->len) |
		       msgpack_pack_bin_body(pk, k->str, k->len);
	case MARU_KEY_INT:
		/* non-negative values use the unsigned encodings, as Python */
		return msgpack_pack_int64(pk, k->i);
	case MARU_KEY_UINT:
		return msgpack_pack_uint64(pk, k->u);
	default:
		return -1;
	}
}

/* a failed pack is either our callback's ENOMEM or a bad key */
static int pack_rc(int rc, const struct maru__msg *m)
{
	return rc ? -EINVAL : 0;
}

int maru__enc_raw(struct maru__msg *m, const void *p, size_t n)
{
	return n && msg_write(m, p, n) ? -ENOMEM : 0;
}

int maru__enc_empty(struct maru__msg *m)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, m, msg_write);
	return pack_rc(msgpack_pack_map(&pk, 0), m);
}

static char host_name[65];
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_init(void)
{
	if (gethostname(host_name, sizeof(host_name) - 1) < 0)
		host_name[0] = '\0';
}

/*
 * "host" and "pid" (2 map entries; additions maru-server shows in
 * GET_USAGE, other servers skip unknown keys): where this client runs
 */
static int pack_whereabouts(msgpack_packer *pk)
{
	pthread_once(&host_once, host_init);
	return pack_cstr(pk, "host") | pack_cstr(pk, host_name) |
	       pack_cstr(pk, "pid") |
	       msgpack_pack_uint32(pk, (uint32_t)getpid());
}

int maru__enc_request_alloc(struct maru__msg *m, const char *instance_id,
			    uint64_t size, const char *lease_id, uint64_t ack,
			    uint32_t page_size)
{
	msgpack_packer pk;
	int rc;

	msgpack_packer_init(&pk, m, msg_write);
	rc = msgpack_pack_map(&pk, 4 + (lease_id != NULL) + (ack != 0) +
					   (page_size != 0));
	rc |= pack_cstr(&pk, "instance_id") | pack_cstr(&pk, instance_id);
	rc |= pack_whereabouts(&pk);
	rc |= pack_cstr(&pk, "size") | msgpack_pack_uint64(&pk, size);
	if (lease_id)
		rc |= pack_cstr(&pk, "lease_id") | pack_cstr(&pk, lease_id);
	if (ack)
		rc |= pack_cstr(&pk, "evicted_ack") |
		      msgpack_pack_uint64(&pk, ack);
	/* pages of any region may be granted to us (docs/protocol.md) */
	if (page_size)
		rc |= pack_cstr(&pk, "page_size") |
		      msgpack_pack_uint32(&pk, page_size);
	return pack_rc(rc, m);
}

int maru__enc_return_alloc(struct maru__msg *m, const char *instance_id,
			   uint64_t region_id, uint64_t ack)
{
	msgpack_packer pk;
	int rc;

	msgpack_packer_init(&pk, m, msg_write);
	rc = msgpack_pack_map(&pk, 2 + (ack != 0));
	rc |= pack_cstr(&pk, "instance_id") | pack_cstr(&pk, instance_id);
	rc |= pack_cstr(&pk, "region_id") | msgpack_pack_uint64(&pk, region_id);
	/* the notices we had: pages granted after them stay ours */
	if (ack)
		rc |= pack_cstr(&pk, "evicted_ack") |
		      msgpack_pack_uint64(&pk, ack);
	return pack_rc(rc, m);
}

int maru__enc_list_allocations(struct maru__msg *m, const char *exclude)
{
	msgpack_packer pk;
	int rc;

	msgpack_packer_init(&pk, m, msg_write);
	/* upstream omits the key when there is nothing to exclude */
	if (!exclude || !*exclude)
		return pack_rc(msgpack_pack_map(&pk, 0), m);
	rc = msgpack_pack_map(&pk, 1);
	rc |= pack_cstr(&pk, "exclude_instance_id") | pack_cstr(&pk, exclude);
	return pack_rc(rc, m);
}

/* additions to a key request: "count": false, "ttl_ms" (@o may be NULL) */
static int pack_key_opts(msgpack_packer *pk, const struct maru__key_opts *o)
{
	int rc = 0;

	if (o && o->uncounted)
		rc |= pack_cstr(pk, "count") | msgpack_pack_false(pk);
	if (o && o->ttl_ms)
		rc |= pack_cstr(pk, "ttl_ms") |
		      msgpack_pack_uint32(pk, o->ttl_ms);
	return rc;
}

static uint32_t key_opts_n(const struct maru__key_opts *o)
{
	return o ? (o->uncounted != 0) + (o->ttl_ms != 0) : 0;
}

int maru__enc_key_opts(struct maru__msg *m, const struct maru_key *key,
		       const struct maru__key_opts *o)
{
	msgpack_packer pk;
	int rc;

	msgpack_packer_init(&pk, m, msg_write);
	rc = msgpack_pack_map(&pk, 1 + key_opts_n(o));
	rc |= pack_cstr(&pk, "key") | maru__pack_key(&pk, key);
	rc |= pack_key_opts(&pk, o);
	return pack_rc(rc, m);
}

int maru__enc_key(struct maru__msg *m, const struct maru_key *key)
{
	return maru__enc_key_opts(m, key, NULL);
}

static int pack_reg(msgpack_packer *pk, const struct maru__reg *r)
{
	int rc;

	rc = msgpack_pack_map(pk, 4);
	rc |= pack_cstr(pk, "key") | maru__pack_key(pk, r->key);
	rc |= pack_cstr(pk, "region_id") |
	      msgpack_pack_uint64(pk, r->region_id);
	rc |= pack_cstr(pk, "kv_offset") |
	      msgpack_pack_uint64(pk, r->kv_offset);
	rc |= pack_cstr(pk, "kv_length") |
	      msgpack_pack_uint64(pk, r->kv_length);
	return rc;
}

int maru__enc_register(struct maru__msg *m, const struct maru__reg *r)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, m, msg_write);
	return pack_rc(pack_reg(&pk, r), m);
}

static int pack_reg_at(msgpack_packer *pk, const void *v, size_t i)
{
	return pack_reg(pk, &((const struct maru__reg *)v)[i]);
}

static int pack_key_at(msgpack_packer *pk, const void *v, size_t i)
{
	return maru__pack_key(pk, &((const struct maru_key *)v)[i]);
}

/* {@name: [@n elements of @v, each packed by @one]} */
static int enc_list(struct maru__msg *m, const char *name, const void *v,
		    size_t n,
		    int (*one)(msgpack_packer *, const void *, size_t),
		    const struct maru__key_opts *o)
{
	msgpack_packer pk;
	size_t i;
	int rc;

	if (n > UINT32_MAX)
		return -EINVAL;
	msgpack_packer_init(&pk, m, msg_write);
	rc = msgpack_pack_map(&pk, 1 + key_opts_n(o));
	rc |= pack_cstr(&pk, name) | msgpack_pack_array(&pk, n);
	for (i = 0; i < n && !rc; i++)
		rc |= one(&pk, v, i);
	rc |= pack_key_opts(&pk, o);
	return pack_rc(rc, m);
}

int maru__enc_batch_register(struct maru__msg *m, const struct maru__reg *r,
			     size_t n)
{
	return enc_list(m, "entries", r, n, pack_reg_at, NULL);
}

int maru__enc_batch_keys_opts(struct maru__msg *m, const struct maru_key *keys,
			      size_t n, const struct maru__key_opts *o)
{
	return enc_list(m, "keys", keys, n, pack_key_at, o);
}

int maru__enc_batch_keys(struct maru__msg *m, const struct maru_key *keys,
			 size_t n)
{
	return maru__enc_batch_keys_opts(m, keys, n, NULL);
}

/*
 * The remote path's figures: whether the bytes go through the agent, and
 * what each counter grew by since the last report, every one (0s too)
 */
static int pack_remote(msgpack_packer *pk, const struct maru__hb_report *rep)
{
	char name[32];
	int rc, i;

	rc = pack_cstr(pk, "remote") |
	     (rep->remote_on ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
	for (i = 0; i < MDS_RT_N; i++) {
		snprintf(name, sizeof(name), "remote_%s", mds_rt_name(i));
		rc |= pack_cstr(pk, name) | msgpack_pack_uint64(pk, rep->rt[i]);
	}
	return rc;
}

int maru__enc_heartbeat(struct maru__msg *m, const char *instance_id,
			const char *lease_id, bool release, uint64_t ack,
			const struct maru__hb_report *rep)
{
	static const char *const idx_names[3] = {"index_hits", "index_misses",
						 "index_fallbacks"};
	msgpack_packer pk;
	int rc, i, nidx = 0;

	msgpack_packer_init(&pk, m, msg_write);
	if (!instance_id)
		return pack_rc(msgpack_pack_map(&pk, 0), m);
	for (i = 0; rep && i < 3; i++)
		nidx += rep->idx[i] != 0;
	for (i = 0; rep && i < MDS_LK_N; i++)
		nidx += rep->lk[i] != 0;
	if (rep && rep->remote)
		nidx += 1 + MDS_RT_N;
	rc = msgpack_pack_map(&pk, 3 + 2 * !release + release + (ack != 0) +
					   (rep && rep->ntouched) + nidx +
					   (rep && rep->page_size));
	rc |= pack_cstr(&pk, "instance_id") | pack_cstr(&pk, instance_id);
	if (!release)
		rc |= pack_whereabouts(&pk);
	rc |= pack_cstr(&pk, "lease_id") |
	      pack_cstr(&pk, lease_id ? lease_id : "");
	/* we apply eviction notices: maru-server may evict our
	 * keys and tell us their pages */
	rc |= pack_cstr(&pk, "evict_notices") | msgpack_pack_true(&pk);
	if (ack) /* the notices we have, up to this number */
		rc |= pack_cstr(&pk, "evicted_ack") |
		      msgpack_pack_uint64(&pk, ack);
	if (release)
		rc |= pack_cstr(&pk, "lease_release") | msgpack_pack_true(&pk);
	/* the shared index: keys used with no request, for the
	 * server's eviction policy, and what was answered locally */
	if (rep && rep->ntouched) {
		rc |= pack_cstr(&pk, "touched") |
		      msgpack_pack_array(&pk, rep->ntouched);
		rc |= maru__enc_raw(m, rep->touched, rep->touched_len);
	}
	for (i = 0; rep && i < 3; i++)
		if (rep->idx[i])
			rc |= pack_cstr(&pk, idx_names[i]) |
			      msgpack_pack_uint64(&pk, rep->idx[i]);
	/* the lookups we answered ourselves: the server counts the rest */
	for (i = 0; rep && i < MDS_LK_N; i++)
		if (rep->lk[i]) {
			char name[32];

			snprintf(name, sizeof(name), "lookup_%s",
				 mds_lk_name(i));
			rc |= pack_cstr(&pk, name) |
			      msgpack_pack_uint64(&pk, rep->lk[i]);
		}
	if (rep && rep->page_size)
		rc |= pack_cstr(&pk, "page_size") |
		      msgpack_pack_uint32(&pk, rep->page_size);
	if (rep && rep->remote)
		rc |= pack_remote(&pk, rep);
	return pack_rc(rc, m);
}

struct report_list {
	const char *client_id;
	const struct maru__stat_entry *e;
};

static int pack_report_at(msgpack_packer *pk, const void *v, size_t i)
{
	const struct report_list *l = v;
	const struct maru__stat_entry *e = &l->e[i];
	int rc;

	rc = msgpack_pack_map(pk, 5);
	rc |= pack_cstr(pk, "client_id") | pack_cstr(pk, l->client_id);
	rc |= pack_cstr(pk, "op_type") | pack_cstr(pk, e->op_type);
	rc |= pack_cstr(pk, "result") | pack_cstr(pk, e->result);
	rc |= pack_cstr(pk, "size") | msgpack_pack_uint64(pk, e->size);
	rc |= pack_cstr(pk, "latency_us") |
	      msgpack_pack_double(pk, e->latency_us);
	return rc;
}

int maru__enc_report_stats(struct maru__msg *m, const char *client_id,
			   const struct maru__stat_entry *e, size_t n)
{
	struct report_list l = {client_id, e};

	return enc_list(m, "entries", &l, n, pack_report_at, NULL);
}

/* ------------------------------------------------------------------------ */
/* Reply decoders, over the one MessagePack reader (src/common/msgpk.h)      */

#define MP_MAX_DEPTH 32

static bool key_is(const struct mp_val *k, const char *lit)
{
	size_t n = strlen(lit);

	return k->type == MP_STR && k->len == n && !memcmp(k->ptr, lit, n);
}

/*
 * Truthiness like Python's resp.get(k, False): bools as such, nil false,
 * integers non-zero; anything else (enum mp_type lists nil, bool and the
 * integers first) is a protocol error.
 */
static int mp_truth(struct mp_rd *r, bool *out, int depth)
{
	struct mp_val it;

	(void)depth;
	if (mp_read(r, &it) || it.type > MP_NINT)
		return -EPROTO;
	*out = it.type == MP_BOOL   ? it.b
	       : it.type == MP_UINT ? it.u != 0
				    : it.type == MP_NINT;
	return 0;
}

static int mp_uint(struct mp_rd *r, uint64_t *out)
{
	struct mp_val it;

	if (mp_read(r, &it) || it.type != MP_UINT)
		return -EPROTO;
	*out = it.u;
	return 0;
}

/*
 * An array whose every element @one accepts (it reads one, 0 or -EPROTO),
 * left in place for the caller to walk again: @u->p its first element
 */
static int mp_array(struct mp_rd *r, struct maru__uints *u,
		    int (*one)(struct mp_rd *r))
{
	struct mp_val it;
	uint32_t i;

	if (mp_read(r, &it) || it.type != MP_ARRAY ||
	    it.n > (size_t)(r->end - r->p))
		return -EPROTO;
	u->p = r->p;
	u->n = (uint32_t)it.n;
	for (i = 0; i < u->n; i++)
		if (one(r))
			return -EPROTO;
	u->end = r->p;
	return 0;
}

static int one_uint(struct mp_rd *r)
{
	uint64_t v;

	return mp_uint(r, &v) ? -EPROTO : 0;
}

/* an array of unsigned integers, checked */
static int mp_uints(struct mp_rd *r, struct maru__uints *u)
{
	return mp_array(r, u, one_uint);
}

int maru__uints_next(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	struct mp_rd r = {*p, end};
	int rc = mp_uint(&r, v);

	*p = r.p;
	return rc;
}

/* a number as a double (float or integer); nil reads as 0 */
static int mp_number(struct mp_rd *r, double *out)
{
	struct mp_val it;

	if (mp_read(r, &it) || it.type == MP_BOOL || it.type > MP_FLOAT)
		return -EPROTO;
	*out = it.type == MP_FLOAT  ? it.f
	       : it.type == MP_UINT ? (double)it.u
	       : it.type == MP_NINT ? (double)it.i
				    : 0;
	return 0;
}

/* an optional str (borrowed from the input): nil leaves @s as it is */
static int mp_opt_str(struct mp_rd *r, const char **s, uint32_t *len)
{
	struct mp_val v;

	if (mp_read(r, &v))
		return -EPROTO;
	if (v.type == MP_STR) {
		*s = (const char *)v.ptr;
		*len = v.len;
	}
	return v.type == MP_STR || v.type == MP_NIL ? 0 : -EPROTO;
}

/* an optional map's header: 1 with @it, 0 for nil, or -EPROTO (not a
 * map, or nested deeper than MP_MAX_DEPTH) */
static int map_open(struct mp_rd *r, struct mp_val *it, int depth)
{
	if (mp_read(r, it))
		return -EPROTO;
	if (it->type == MP_NIL)
		return 0;
	return it->type == MP_MAP && depth < MP_MAX_DEPTH ? 1 : -EPROTO;
}

/* the next key of a map: its index in @names, @n for another key (its
 * value skipped), or -EPROTO */
static int map_key(struct mp_rd *r, const char *const *names, size_t n)
{
	struct mp_val k;
	size_t j;

	if (mp_read(r, &k))
		return -EPROTO;
	for (j = 0; j < n; j++)
		if (key_is(&k, names[j]))
			return (int)j;
	return mp_skip_rest(r, &k) || mp_skip(r) ? -EPROTO : (int)n;
}

/*
 * dec_uints - an optional map of unsigned ints, storing the ones named in
 * @names into @dst.  @seen NULL: lenient (stats counters: floats are
 * truncated, other types ignored); else strict (only ints, and each name
 * found sets its bit in *@seen).
 * Return: 1 for a map, 0 for nil, -EPROTO.
 */
static int dec_uints(struct mp_rd *r, const char *const *names,
		     uint64_t *const *dst, size_t n, int depth, unsigned *seen)
{
	struct mp_val it, v;
	uint32_t i;
	int rc, j;

	rc = map_open(r, &it, depth);
	if (rc <= 0)
		return rc;
	for (i = 0; i < it.n; i++) {
		j = map_key(r, names, n);
		if (j < 0)
			return j;
		if ((size_t)j == n)
			continue;
		if (seen) {
			if (mp_uint(r, dst[j]))
				return -EPROTO;
			*seen |= 1u << j;
			continue;
		}
		if (mp_read(r, &v))
			return -EPROTO;
		if (v.type == MP_UINT)
			*dst[j] = v.u;
		else if (v.type == MP_FLOAT && v.f >= 0 && v.f < 1.8e19)
			*dst[j] = (uint64_t)v.f;
		else if (mp_skip_rest(r, &v))
			return -EPROTO;
	}
	return 1;
}

/*
 * A MaruHandle map: all four keys are mandatory unsigned ints (protocol.md §2).
 * Return: 1 decoded, 0 nil (no handle), -EPROTO.
 */
static int mp_handle(struct mp_rd *r, struct maru_region_handle *h, int depth)
{
	static const char *const names[] = {"region_id", "offset", "length",
					    "auth_token"};
	uint64_t *const dst[] = {&h->region_id, &h->offset, &h->length,
				 &h->auth_token};
	unsigned seen = 0;
	int rc = dec_uints(r, names, dst, 4, depth, &seen);

	return rc <= 0 ? rc : seen == 15 ? 1 : -EPROTO;
}

static int one_handle(struct mp_rd *r)
{
	struct maru_region_handle h;

	return mp_handle(r, &h, 1) == 1 ? 0 : -EPROTO;
}

/* an array of handle maps, each checked (a "granted_regions" list) */
static int mp_handles(struct mp_rd *r, struct maru__uints *u)
{
	return mp_array(r, u, one_handle);
}

int maru__handles_next(const uint8_t **p, const uint8_t *end,
		       struct maru_region_handle *h)
{
	struct mp_rd r = {*p, end};
	int rc = mp_handle(&r, h, 1);

	*p = r.p;
	return rc == 1 ? 0 : -EPROTO;
}

/* a lookup map (LOOKUP_KV reply or BATCH_LOOKUP_KV entry) */
static int mp_lookup(struct mp_rd *r, struct maru__lookup *l, int depth)
{
	struct mp_val it, k;
	uint32_t i;
	int rc;

	memset(l, 0, sizeof(*l));
	rc = map_open(r, &it, depth);
	if (rc <= 0)
		return rc;
	for (i = 0; i < it.n; i++) {
		if (mp_read(r, &k))
			return -EPROTO;
		if (key_is(&k, "found")) {
			rc = mp_truth(r, &l->found, depth + 1);
		} else if (key_is(&k, "handle")) {
			rc = mp_handle(r, &l->handle, depth + 1);
			l->has_handle = rc == 1;
			rc = rc < 0 ? rc : 0;
		} else if (key_is(&k, "kv_offset")) {
			rc = mp_uint(r, &l->kv_offset);
		} else if (key_is(&k, "kv_length")) {
			rc = mp_uint(r, &l->kv_length);
		} else if (key_is(&k, "kv_gen")) {
			rc = mp_uint(r, &l->kv_gen);
		} else {
			rc = mp_skip_rest(r, &k) || mp_skip(r);
		}
		if (rc)
			return -EPROTO;
	}
	return 0;
}

static int mp_array_header(struct mp_rd *r, uint32_t *n, bool *nil)
{
	struct mp_val it;

	if (mp_read(r, &it))
		return -EPROTO;
	*nil = it.type == MP_NIL;
	if (*nil) {
		*n = 0;
		return 0;
	}
	/* every element takes a byte at least: callers size memory on @n */
	if (it.type != MP_ARRAY || it.n > (size_t)(r->end - r->p))
		return -EPROTO;
	*n = it.n;
	return 0;
}

/* HANDSHAKE's "shm_index" descriptor (docs/shm-index.md) */
static int mp_idx_desc(struct mp_rd *r, struct maru__idx_desc *d, int depth)
{
	struct mp_val it, k;
	const char *s = NULL;
	uint32_t i, n = 0;
	uint64_t layout = 0;
	bool digest_ok = false;
	int rc;

	memset(d, 0, sizeof(*d));
	rc = map_open(r, &it, depth);
	if (rc <= 0)
		return rc;
	d->present = true;
	for (i = 0; i < it.n; i++) {
		if (mp_read(r, &k))
			return -EPROTO;
		if (key_is(&k, "layout")) {
			rc = mp_uint(r, &layout);
		} else if (key_is(&k, "digest")) {
			s = NULL;
			rc = mp_opt_str(r, &s, &n);
			digest_ok = s && n == 14 &&
				    !memcmp(s, "sha256-128-mk1", 14);
		} else if (key_is(&k, "area_id")) {
			rc = mp_uint(r, &d->area_id);
		} else if (key_is(&k, "length")) {
			rc = mp_uint(r, &d->length);
		} else if (key_is(&k, "noncoherent")) {
			rc = mp_truth(r, &d->noncoherent, depth + 1);
		} else if (key_is(&k, "simulate")) {
			rc = mp_truth(r, &d->simulate, depth + 1);
		} else if (key_is(&k, "kind")) {
			s = NULL;
			rc = mp_opt_str(r, &s, &n);
			d->pool = s && n == 4 && !memcmp(s, "pool", 4);
		} else if (key_is(&k, "region")) {
			rc = mp_handle(r, &d->region, depth + 1);
			rc = rc < 0 ? rc : 0;
		} else if (key_is(&k, "path")) {
			rc = mp_opt_str(r, &d->path, &d->path_len);
		} else {
			rc = mp_skip_rest(r, &k) || mp_skip(r);
		}
		if (rc)
			return -EPROTO;
	}
	d->usable = layout == SI_LAYOUT && digest_ok && d->area_id &&
		    d->length &&
		    (d->pool ? d->region.length >= d->length : d->path_len > 0);
	return 0;
}

/* the lists a reply may carry */
enum { L_RESULTS, L_ENTRIES, L_HANDLES };

/*
 * dec_list - "results" (truth values), "entries" (lookups) or
 * "allocations" (handles, each handed to on_handle) into @rep; elements
 * past the caller's array are decoded (checked) and counted, not kept
 */
static int dec_list(struct mp_rd *r, struct maru__reply *rep, int kind,
		    int depth)
{
	struct maru_region_handle h;
	struct maru__lookup l;
	uint32_t n, i;
	bool nil, v;
	int rc;

	if (mp_array_header(r, &n, &nil))
		return -EPROTO;
	for (i = 0; i < n; i++) {
		if (kind == L_RESULTS) {
			if (mp_truth(r, &v, depth + 1))
				return -EPROTO;
			if (rep->results && i < rep->nresults)
				rep->results[i] = v;
		} else if (kind == L_ENTRIES) {
			if (mp_lookup(r, &l, depth + 1))
				return -EPROTO;
			if (rep->entries && i < rep->nentries)
				rep->entries[i] = l;
		} else {
			rc = mp_handle(r, &h, depth + 1);
			if (rc < 0)
				return -EPROTO;
			if (rc == 1 && rep->on_handle &&
			    (rc = rep->on_handle(rep->arg, &h)))
				return rc;
		}
	}
	if (kind == L_RESULTS)
		rep->results_len = n;
	else if (kind == L_ENTRIES)
		rep->entries_len = n;
	else /* a map that repeats the key: every list went to on_handle */
		rep->handles_len += n;
	return 0;
}

/* a string value into @buf (cut at @len - 1, control bytes '?'); any
 * other value skipped, @buf "".  Return: 0 or -EPROTO */
static int mp_text(struct mp_rd *r, char *buf, size_t len)
{
	struct mp_rd at = *r;
	struct mp_val v;
	size_t n, i;

	buf[0] = '\0';
	if (mp_read(r, &v) || v.type != MP_STR) {
		*r = at;
		return mp_skip(r) ? -EPROTO : 0;
	}
	n = v.len < len ? v.len : len - 1;
	for (i = 0; i < n; i++)
		buf[i] = (unsigned char)v.ptr[i] < 0x20 ? '?' : (char)v.ptr[i];
	buf[n] = '\0';
	return 0;
}

int maru__decode_reply(const uint8_t *p, size_t len, struct maru__reply *rep)
{
	struct mp_rd r = {p, p + len};
	struct mp_val it, k;
	uint32_t i;
	int rc;

	rep->error = rep->success = rep->is_new = rep->exists = false;
	rep->held = false;
	rep->error_text[0] = '\0';
	rep->cause[0] = rep->why[0] = '\0';
	rep->max_key = 0;
	rep->lease_expired = false;
	rep->lease_ttl = 0;
	memset(&rep->lookup, 0, sizeof(rep->lookup));
	rep->rm_address = NULL;
	rep->rm_address_len = 0;
	rep->server_id = NULL;
	rep->server_id_len = 0;
	rep->results_len = rep->entries_len = rep->handles_len = 0;
	rep->kv_gen = rep->kv_gen_first = 0;
	rep->renew_ms = 0;
	memset(&rep->idx, 0, sizeof(rep->idx));
	rep->has_idx_id = false;
	rep->idx_id = 0;
	rep->evicted_first = rep->evicted_last = 0;
	memset(&rep->evicted, 0, sizeof(rep->evicted));
	memset(&rep->release, 0, sizeof(rep->release));
	memset(&rep->granted, 0, sizeof(rep->granted));
	rep->pages_run = 0;

	if (mp_read(&r, &it) || it.type != MP_MAP)
		return -EPROTO;
	for (i = 0; i < it.n; i++) {
		if (mp_read(&r, &k))
			return -EPROTO;
		if (key_is(&k, "error")) {
			struct mp_rd at = r;
			struct mp_val v;

			rep->error = true;
			if (!mp_read(&r, &v) && v.type == MP_STR) {
				size_t n =
					v.len < sizeof(rep->error_text)
						? v.len
						: sizeof(rep->error_text) - 1;

				memcpy(rep->error_text, v.ptr, n);
				rep->error_text[n] = '\0';
				rc = 0;
			} else {
				r = at;
				rc = mp_skip(&r);
			}
		} else if (key_is(&k, "cause")) {
			rc = mp_text(&r, rep->cause, sizeof(rep->cause));
		} else if (key_is(&k, "why")) {
			rc = mp_text(&r, rep->why, sizeof(rep->why));
		} else if (key_is(&k, "max_key_bytes")) {
			rc = mp_uint(&r, &rep->max_key);
		} else if (key_is(&k, "success")) {
			rc = mp_truth(&r, &rep->success, 1);
		} else if (key_is(&k, "held")) {
			rc = mp_truth(&r, &rep->held, 1);
		} else if (key_is(&k, "is_new")) {
			rc = mp_truth(&r, &rep->is_new, 1);
		} else if (key_is(&k, "exists")) {
			rc = mp_truth(&r, &rep->exists, 1);
		} else if (key_is(&k, "found")) {
			rc = mp_truth(&r, &rep->lookup.found, 1);
		} else if (key_is(&k, "lease_expired")) {
			rc = mp_truth(&r, &rep->lease_expired, 1);
		} else if (key_is(&k, "lease_ttl")) {
			rc = mp_number(&r, &rep->lease_ttl);
		} else if (key_is(&k, "handle")) {
			rc = mp_handle(&r, &rep->lookup.handle, 1);
			rep->lookup.has_handle = rc == 1;
			rc = rc < 0 ? rc : 0;
		} else if (key_is(&k, "kv_offset")) {
			rc = mp_uint(&r, &rep->lookup.kv_offset);
		} else if (key_is(&k, "kv_length")) {
			rc = mp_uint(&r, &rep->lookup.kv_length);
		} else if (key_is(&k, "rm_address")) {
			rc = mp_opt_str(&r, &rep->rm_address,
					&rep->rm_address_len);
		} else if (key_is(&k, "server_id")) {
			/* HANDSHAKE/HEARTBEAT: which server process answers */
			rc = mp_opt_str(&r, &rep->server_id,
					&rep->server_id_len);
		} else if (key_is(&k, "kv_gen")) {
			rc = mp_uint(&r, &rep->kv_gen);
		} else if (key_is(&k, "kv_gen_first")) {
			rc = mp_uint(&r, &rep->kv_gen_first);
		} else if (key_is(&k, "renew_ms")) {
			uint64_t v = 0;

			rc = mp_uint(&r, &v);
			/* clamped: a server cannot make us spin, or sleep */
			rep->renew_ms = v > 60000 ? 60000
					: v < 10  ? 10
						  : (uint32_t)v;
		} else if (key_is(&k, "evicted")) {
			rc = mp_uints(&r, &rep->evicted);
			if (rc == 0 && rep->evicted.n % 3)
				rc = -EPROTO;
		} else if (key_is(&k, "release")) {
			rc = mp_uints(&r, &rep->release);
		} else if (key_is(&k, "pages_run")) {
			rc = mp_uint(&r, &rep->pages_run);
		} else if (key_is(&k, "granted_regions")) {
			rc = mp_handles(&r, &rep->granted);
		} else if (key_is(&k, "evicted_seq")) {
			struct maru__uints u;
			const uint8_t *p2;

			rc = mp_uints(&r, &u);
			p2 = u.p;
			if (rc == 0 && u.n == 2 &&
			    maru__uints_next(&p2, u.end, &rep->evicted_first) ==
				    0 &&
			    maru__uints_next(&p2, u.end, &rep->evicted_last) ==
				    0 &&
			    rep->evicted_first &&
			    rep->evicted_first <= rep->evicted_last)
				rc = 0;
			else
				rc = -EPROTO;
		} else if (key_is(&k, "shm_index")) {
			rc = mp_idx_desc(&r, &rep->idx, 1);
		} else if (key_is(&k, "shm_index_id")) {
			rc = mp_uint(&r, &rep->idx_id);
			rep->has_idx_id = true;
		} else if (key_is(&k, "results")) {
			rc = dec_list(&r, rep, L_RESULTS, 1);
		} else if (key_is(&k, "entries")) {
			rc = dec_list(&r, rep, L_ENTRIES, 1);
		} else if (key_is(&k, "allocations")) {
			rc = dec_list(&r, rep, L_HANDLES, 1);
			if (rc > 0)
				return rc;
		} else {
			rc = mp_skip_rest(&r, &k) || mp_skip(&r);
		}
		if (rc)
			return -EPROTO;
	}
	rep->lookup.kv_gen = rep->kv_gen; /* LOOKUP_KV's ticket */
	return 0;
}

int maru__decode_stats(const uint8_t *p, size_t len,
		       struct maru_server_stats *s, bool *error)
{
	static const char *const kv[] = {"total_entries", "total_size"};
	static const char *const am[] = {"num_allocations", "total_allocated",
					 "active_clients"};
	static const char *const cp[] = {"total_size", "free_size"};
	uint64_t *const kvd[] = {&s->total_entries, &s->total_size};
	uint64_t *const amd[] = {&s->num_allocations, &s->total_allocated,
				 &s->active_clients};
	uint64_t *const cpd[] = {&s->pool_total_size, &s->pool_free_size};
	struct mp_rd r = {p, p + len};
	struct mp_val it, k;
	uint32_t i;
	int rc;

	memset(s, 0, sizeof(*s));
	*error = false;
	if (mp_read(&r, &it) || it.type != MP_MAP)
		return -EPROTO;
	for (i = 0; i < it.n; i++) {
		if (mp_read(&r, &k))
			return -EPROTO;
		if (key_is(&k, "kv_manager")) {
			rc = dec_uints(&r, kv, kvd, 2, 1, NULL) < 0;
		} else if (key_is(&k, "allocation_manager")) {
			rc = dec_uints(&r, am, amd, 3, 1, NULL) < 0;
		} else if (key_is(&k, "cxl_pool")) {
			rc = dec_uints(&r, cp, cpd, 2, 1, NULL) < 0;
		} else if (key_is(&k, "error")) {
			*error = true;
			rc = mp_skip(&r);
		} else {
			rc = mp_skip_rest(&r, &k) || mp_skip(&r);
		}
		if (rc)
			return -EPROTO;
	}
	return 0;
}
