/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mds_util.h - helpers for the maru-server unit tests
 *
 * Requests are built and replies read with msgpack-c (libmsgpackc), an
 * encoder and decoder independent of the server's own, so the tests
 * check the wire format rather than the server agreeing with itself.
 * Also a fake resource manager for the store.
 */
#ifndef TEST_MDS_UTIL_H
#define TEST_MDS_UTIL_H

#include <stdint.h>
#include <string.h>
#include <msgpack.h>

#include "handler.h"
#include "mds_proto.h"
#include "store.h"

/* ---- building requests ---- */

struct req {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

static inline void req_begin(struct req *r, uint8_t type, uint32_t seq)
{
	uint8_t h[MDS_HDR_SIZE];

	msgpack_sbuffer_init(&r->sb);
	msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
	mds_hdr_put(h, type, 0, seq, 0);
	msgpack_sbuffer_write(&r->sb, (const char *)h, sizeof(h));
}

/* patch payload_length; the body is r->sb.data / r->sb.size */
static inline void req_end(struct req *r)
{
	put_u32be((uint8_t *)r->sb.data + 12,
		  (uint32_t)(r->sb.size - MDS_HDR_SIZE));
}

static inline void req_free(struct req *r)
{
	msgpack_sbuffer_destroy(&r->sb);
}

static inline void pk_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static inline void pk_bin(msgpack_packer *pk, const char *s, size_t n)
{
	msgpack_pack_bin(pk, n);
	msgpack_pack_bin_body(pk, s, n);
}

/* ---- reading replies ---- */

struct reply {
	struct mds_hdr h;
	msgpack_unpacked u;
	msgpack_object *root; /* the payload map */
};

/* Parse a reply body; the payload must be exactly one map. */
static inline int reply_parse(const struct buf *b, struct reply *r)
{
	size_t off = 0;

	msgpack_unpacked_init(&r->u);
	if (mds_hdr_decode(b->data, b->len, &r->h) < 0)
		return -1;
	if (r->h.payload_len != b->len - MDS_HDR_SIZE)
		return -1;
	if (msgpack_unpack_next(&r->u, (const char *)b->data + MDS_HDR_SIZE,
				r->h.payload_len,
				&off) != MSGPACK_UNPACK_SUCCESS ||
	    off != r->h.payload_len || r->u.data.type != MSGPACK_OBJECT_MAP)
		return -1;
	r->root = &r->u.data;
	return 0;
}

static inline void reply_free(struct reply *r)
{
	msgpack_unpacked_destroy(&r->u);
}

/* value of a str key in a map, or NULL */
static inline msgpack_object *mget(msgpack_object *m, const char *k)
{
	size_t n = strlen(k);
	uint32_t i;

	if (!m || m->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (i = 0; i < m->via.map.size; i++) {
		msgpack_object *key = &m->via.map.ptr[i].key;

		if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == n &&
		    !memcmp(key->via.str.ptr, k, n))
			return &m->via.map.ptr[i].val;
	}
	return NULL;
}

static inline int mbool(msgpack_object *o)
{
	if (!o || o->type != MSGPACK_OBJECT_BOOLEAN)
		return -1;
	return o->via.boolean;
}

static inline int64_t muint(msgpack_object *o)
{
	if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return -1;
	return (int64_t)o->via.u64;
}

/* ---- fake resource manager ---- */

#define FAKE_MAX 4096
#define FAKE_ALIGN (2ull << 20)

struct fake_rm {
	uint64_t next_id;
	int fail_alloc;	     /* next allocs fail with this */
	int free_rc;	     /* next frees return this */
	bool live[FAKE_MAX]; /* allocated, not freed */
	uint64_t len[FAKE_MAX];
	uint64_t nfrees, nallocs;
	uint64_t total; /* pool size */
	uint64_t used;
	int usage_calls;
	/* like the real RM session: answer later (the test calls done) */
	bool defer;
	struct mds_wait *waits; /* borrowed, by ->next */
};

/* the fake's deferred ALLOCs / STATS: the oldest one, unlinked */
static inline struct mds_wait *fake_take_wait(struct fake_rm *f)
{
	struct mds_wait *w = f->waits, **pp = &f->waits;

	if (!w)
		return NULL;
	while (w->next) {
		pp = &w->next;
		w = w->next;
	}
	*pp = NULL;
	return w;
}

static inline int fake_alloc(void *arg, uint64_t size, struct mds_wait *w,
			     struct rm_handle *out)
{
	struct fake_rm *f = arg;
	uint64_t id, len;

	if (f->defer && w) {
		/* allocate now, give the outcome when the test says so */
		f->defer = false;
		w->rc = fake_alloc(arg, size, NULL, &w->h);
		f->defer = true;
		w->next = f->waits;
		f->waits = w;
		return -EINPROGRESS;
	}
	if (f->fail_alloc)
		return f->fail_alloc;
	len = (size + FAKE_ALIGN - 1) / FAKE_ALIGN * FAKE_ALIGN;
	if (!size || f->used + len > f->total || f->next_id + 1 >= FAKE_MAX)
		return -ENOMEM;
	id = ++f->next_id;
	f->live[id] = true;
	f->len[id] = len;
	f->used += len;
	f->nallocs++;
	out->region_id = id;
	out->offset = id * FAKE_ALIGN;
	out->length = len;
	/* >= 2^63, like real tokens often are */
	out->auth_token = 0xf000000000000000ull | id;
	return 0;
}

static inline int fake_free(void *arg, const struct rm_handle *h)
{
	struct fake_rm *f = arg;

	if (f->free_rc)
		return f->free_rc;
	if (h->region_id >= FAKE_MAX || !f->live[h->region_id] ||
	    h->auth_token != (0xf000000000000000ull | h->region_id))
		return -EACCES;
	f->live[h->region_id] = false;
	f->used -= f->len[h->region_id];
	f->nfrees++;
	return 0;
}

static inline int fake_usage(void *arg, bool dax_only, uint64_t *total,
			     uint64_t *avail, struct mds_wait *w)
{
	struct fake_rm *f = arg;

	(void)dax_only;
	if (f->defer && w) {
		w->rc = 0;
		w->next = f->waits;
		f->waits = w;
		return -EINPROGRESS;
	}
	f->usage_calls++;
	*total = f->total;
	*avail = f->total - f->used;
	return 0;
}

static const struct mds_rm_ops fake_ops = {fake_alloc, fake_free, fake_usage,
					   NULL};

/* what the maru-server fuzz targets run: leases, peer tracking, eviction */
static inline struct mds_config fuzz_mds_config(void)
{
	return (struct mds_config){
		.rm_address = "127.0.0.1:9850",
		.lease_ttl_ns = 5000000000ull,
		.peer_grace_ns = 2000000000ull,
		.max_key = 65536,
		.eviction = "lru",
		.evict_grace_ns = 300000000ull,
		.evict_wait_ns = 1500000000ull,
		.evict_high_pm = 950,
		.evict_low_pm = 900,
	};
}

#endif
