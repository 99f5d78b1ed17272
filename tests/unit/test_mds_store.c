/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mds_store.c - maru-server semantics through mds_handle(), with a
 * fake resource manager and a fake clock: every message type, first
 * writer wins, pins, deferred free, LIST_ALLOCATIONS exclusion, batches,
 * statistics, leases (expiry, release, refusal, renewal after expiry),
 * connection-based dead-client detection, RM failures and retries, error
 * replies, and failed allocations at every point of a scenario.  The
 * store's invariants (mds_check) are verified after every test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "handler.h"
#include "log.h"
#include "store.h"
#include "test_mds_util.h"

#define SEC 1000000000ull

static struct mds S;
static struct fake_rm F;
static struct buf OUT;
static struct reply R;
static bool have_reply;
static uint32_t seq;

static void start(uint64_t lease_ttl, uint64_t grace)
{
	struct mds_config c = {
		.rm_address = "10.0.0.1:9850",
		.lease_ttl_ns = lease_ttl,
		.peer_grace_ns = grace,
		.max_key = 4096,
		.eviction = "none",
	};

	memset(&F, 0, sizeof(F));
	F.total = 1ull << 34;
	assert_int_equal(mds_init(&S, &c, &fake_ops, &F, 1234), 0);
	S.vnow = 1000 * SEC;
	seq = 0;
}

static int teardown(void **state)
{
	if (have_reply)
		reply_free(&R);
	have_reply = false;
	assert_int_equal(mds_check(&S), 0);
	mds_destroy(&S);
	buf_free(&OUT);
	return 0;
}

/* send the request, parse the reply into R, check the echoed header */
static msgpack_object *call_peer(struct req *r, struct mds_peer *p)
{
	uint8_t type = (uint8_t)r->sb.data[3];

	req_end(r);
	if (have_reply)
		reply_free(&R);
	mds_handle(&S, (uint8_t *)r->sb.data, r->sb.size, p, &OUT, NULL);
	req_free(r);
	assert_int_equal(reply_parse(&OUT, &R), 0);
	have_reply = true;
	assert_int_equal(R.h.sequence, seq);
	assert_int_equal(R.h.msg_type, type | 0x80);
	return R.root;
}

static msgpack_object *call(struct req *r)
{
	return call_peer(r, NULL);
}

static void begin(struct req *r, uint8_t type, uint32_t npairs)
{
	req_begin(r, type, ++seq);
	msgpack_pack_map(&r->pk, npairs);
}

static struct rm_handle alloc_p(const char *inst, uint64_t size,
				const char *lease, struct mds_peer *p)
{
	struct rm_handle h = {0};
	msgpack_object *m, *hh;
	struct req r;

	begin(&r, MDS_REQUEST_ALLOC, lease ? 3 : 2);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, inst);
	pk_str(&r.pk, "size");
	msgpack_pack_uint64(&r.pk, size);
	if (lease) {
		pk_str(&r.pk, "lease_id");
		pk_str(&r.pk, lease);
	}
	m = call_peer(&r, p);
	if (mbool(mget(m, "success")) != 1)
		return h;
	hh = mget(m, "handle");
	assert_int_equal(hh->via.map.size, 4);
	h.region_id = mget(hh, "region_id")->via.u64;
	h.offset = mget(hh, "offset")->via.u64;
	h.length = mget(hh, "length")->via.u64;
	h.auth_token = mget(hh, "auth_token")->via.u64;
	return h;
}

static struct rm_handle alloc(const char *inst, uint64_t size)
{
	return alloc_p(inst, size, NULL, NULL);
}

/* REGISTER_KV; returns is_new, or -1 when success was false */
static int reg_p(const char *key, uint64_t region, uint64_t off, uint64_t len,
		 struct mds_peer *p)
{
	msgpack_object *m;
	struct req r;

	begin(&r, MDS_REGISTER_KV, 4);
	pk_str(&r.pk, "key");
	pk_str(&r.pk, key);
	pk_str(&r.pk, "region_id");
	msgpack_pack_uint64(&r.pk, region);
	pk_str(&r.pk, "kv_offset");
	msgpack_pack_uint64(&r.pk, off);
	pk_str(&r.pk, "kv_length");
	msgpack_pack_uint64(&r.pk, len);
	m = call_peer(&r, p);
	if (mbool(mget(m, "success")) != 1)
		return -1;
	return mbool(mget(m, "is_new"));
}

static int reg(const char *key, uint64_t region, uint64_t off, uint64_t len)
{
	return reg_p(key, region, off, len, NULL);
}

/* a single-key message from @p; returns its one bool field */
static int keyop_p(uint8_t type, const char *key, struct mds_peer *p)
{
	msgpack_object *m;
	struct req r;

	begin(&r, type, 1);
	pk_str(&r.pk, "key");
	pk_str(&r.pk, key);
	m = call_peer(&r, p);
	assert_true(m->via.map.size >= 1);
	return mbool(&m->via.map.ptr[0].val);
}

static int keyop(uint8_t type, const char *key)
{
	return keyop_p(type, key, NULL);
}

static msgpack_object *lookup(const char *key)
{
	struct req r;

	begin(&r, MDS_LOOKUP_KV, 1);
	pk_str(&r.pk, "key");
	pk_str(&r.pk, key);
	return call(&r);
}

static int ret_alloc_p(const char *inst, uint64_t region, struct mds_peer *p)
{
	struct req r;

	begin(&r, MDS_RETURN_ALLOC, 2);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, inst);
	pk_str(&r.pk, "region_id");
	msgpack_pack_uint64(&r.pk, region);
	return mbool(mget(call_peer(&r, p), "success"));
}

static int ret_alloc(const char *inst, uint64_t region)
{
	return ret_alloc_p(inst, region, NULL);
}

static msgpack_object *list_allocs(const char *exclude)
{
	struct req r;

	begin(&r, MDS_LIST_ALLOCATIONS, exclude ? 1 : 0);
	if (exclude) {
		pk_str(&r.pk, "exclude_instance_id");
		pk_str(&r.pk, exclude);
	}
	return mget(call(&r), "allocations");
}

static msgpack_object *simple(uint8_t type)
{
	struct req r;

	begin(&r, type, 0);
	return call(&r);
}

static msgpack_object *heartbeat(const char *inst, const char *lease,
				 bool release, struct mds_peer *p)
{
	struct req r;

	begin(&r, MDS_HEARTBEAT, (inst ? 1 : 0) + (lease ? 1 : 0) + release);
	if (inst) {
		pk_str(&r.pk, "instance_id");
		pk_str(&r.pk, inst);
	}
	if (lease) {
		pk_str(&r.pk, "lease_id");
		pk_str(&r.pk, lease);
	}
	if (release) {
		pk_str(&r.pk, "lease_release");
		msgpack_pack_true(&r.pk);
	}
	return call_peer(&r, p);
}

/*
 * HEARTBEAT of @inst with lease @lease from @p carrying the remote path's
 * figures: "remote": @on (unless @n_only), what the counters grew by @n
 */
static msgpack_object *heartbeat_rt(const char *inst, const char *lease,
				    bool release, bool on, bool n_only,
				    const uint64_t n[MDS_RT_N],
				    struct mds_peer *p)
{
	char name[32];
	struct req r;
	int i;

	begin(&r, MDS_HEARTBEAT, 2 + release + !n_only + MDS_RT_N);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, inst);
	pk_str(&r.pk, "lease_id");
	pk_str(&r.pk, lease);
	if (release) {
		pk_str(&r.pk, "lease_release");
		msgpack_pack_true(&r.pk);
	}
	if (!n_only) {
		pk_str(&r.pk, "remote");
		if (on)
			msgpack_pack_true(&r.pk);
		else
			msgpack_pack_false(&r.pk);
	}
	for (i = 0; i < MDS_RT_N; i++) {
		snprintf(name, sizeof(name), "remote_%s", mds_rt_name(i));
		pk_str(&r.pk, name);
		msgpack_pack_uint64(&r.pk, n[i]);
	}
	return call_peer(&r, p);
}

/* GET_STATS "remote" figures: @inst's (NULL: the pool's) into @n, and
 * the remote clients; -1 when @inst is not listed */
static int64_t remote_of(const char *inst, uint64_t n[MDS_RT_N])
{
	msgpack_object *m = mget(simple(MDS_GET_STATS), "remote");
	int i;

	assert_non_null(m);
	if (inst)
		m = mget(mget(m, "instances"), inst);
	if (!m)
		return -1;
	for (i = 0; i < MDS_RT_N; i++)
		n[i] = (uint64_t)muint(mget(m, mds_rt_name(i)));
	return muint(mget(m, "clients"));
}

/* ---- tests ---- */

static void test_alloc_register_lookup(void **state)
{
	struct rm_handle h;
	msgpack_object *m, *hh;

	start(0, 0);
	h = alloc("A", 3 << 20);
	assert_int_equal(h.region_id, 1);
	assert_int_equal(h.length, 4 << 20);
	assert_true(h.auth_token >= 1ull << 63);
	assert_int_equal(reg("k1", h.region_id, 4096, 100), 1);
	m = lookup("k1");
	assert_int_equal(m->via.map.size, 5);
	assert_int_equal(mbool(mget(m, "found")), 1);
	assert_true(muint(mget(m, "kv_gen")) >= 1);
	assert_int_equal(muint(mget(m, "kv_offset")), 4096);
	assert_int_equal(muint(mget(m, "kv_length")), 100);
	hh = mget(m, "handle");
	/* the token comes back as an unsigned 64-bit value, exactly */
	assert_int_equal(mget(hh, "auth_token")->type,
			 MSGPACK_OBJECT_POSITIVE_INTEGER);
	assert_true(mget(hh, "auth_token")->via.u64 == h.auth_token);
	assert_true(mget(hh, "offset")->via.u64 == h.offset);
	m = lookup("nope");
	assert_int_equal(m->via.map.size, 1);
	assert_int_equal(mbool(mget(m, "found")), 0);
	assert_int_equal(keyop(MDS_EXISTS_KV, "k1"), 1);
	assert_int_equal(keyop(MDS_EXISTS_KV, "k2"), 0);
}

/* a location lies inside its region, and a key of an
 * unknown region (upstream accepts it, it never resolves) cannot make the
 * byte count wrap */
static void test_locations_are_checked(void **state)
{
	struct rm_handle h;

	(void)state;
	start(0, 0);
	h = alloc("A", 3 << 20); /* 4 MiB */
	assert_int_equal(reg("end", h.region_id, (4 << 20) - 100, 100), 1);
	assert_int_equal(reg("all", h.region_id, 0, 4 << 20), 1);
	assert_int_equal(reg("empty", h.region_id, 4 << 20, 0), 1);
	assert_int_equal(reg("past", h.region_id, (4 << 20) - 100, 101), -1);
	assert_int_equal(reg("off", h.region_id, (4 << 20) + 1, 0), -1);
	assert_int_equal(reg("wrap", h.region_id, 4096, UINT64_MAX - 100), -1);
	assert_int_equal(keyop(MDS_EXISTS_KV, "past"), 0);
	{ /* --max-key-bytes (4096 here) */
		char big[4098];

		memset(big, 'k', sizeof(big) - 1);
		big[4097] = '\0';
		assert_int_equal(reg(big, h.region_id, 0, 1), -1);
		big[4096] = '\0';
		assert_int_equal(reg(big, h.region_id, 0, 1), 1);
		assert_int_equal(keyop(MDS_DELETE_KV, big), 1);
	}
	assert_int_equal(keyop(MDS_EXISTS_KV, "wrap"), 0);
	assert_true(S.kv_bytes == 100 + (4 << 20));
	assert_int_equal(reg("ghost1", 999, 0, UINT64_MAX), 1);
	assert_int_equal(reg("ghost2", 999, 0, UINT64_MAX), 1);
	assert_true(S.kv_bytes == 100 + (4 << 20));
	assert_int_equal(keyop(MDS_DELETE_KV, "ghost1"), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "end"), 1);
	assert_true(S.kv_bytes == 4 << 20);
}

static void test_first_writer_wins(void **state)
{
	struct rm_handle a, b;

	start(0, 0);
	a = alloc("A", 1);
	b = alloc("B", 1);
	assert_int_equal(reg("k", a.region_id, 1, 10), 1);
	assert_int_equal(reg("k", b.region_id, 2, 20), 0);
	assert_int_equal(muint(mget(lookup("k"), "kv_offset")), 1);
	/* an unknown region is accepted, but never resolves */
	assert_int_equal(reg("ghost", 999, 0, 1), 1);
	assert_int_equal(keyop(MDS_EXISTS_KV, "ghost"), 1);
	assert_int_equal(mbool(mget(lookup("ghost"), "found")), 0);
	assert_int_equal(keyop(MDS_DELETE_KV, "ghost"), 1);
	/* int, str and bin keys with the same bytes stay apart */
	{
		struct req r;

		begin(&r, MDS_REGISTER_KV, 4);
		pk_str(&r.pk, "key");
		msgpack_pack_uint64(&r.pk, 7);
		pk_str(&r.pk, "region_id");
		msgpack_pack_uint64(&r.pk, a.region_id);
		pk_str(&r.pk, "kv_offset");
		msgpack_pack_uint64(&r.pk, 70);
		pk_str(&r.pk, "kv_length");
		msgpack_pack_uint64(&r.pk, 1);
		assert_int_equal(mbool(mget(call(&r), "is_new")), 1);
		assert_int_equal(reg("7", a.region_id, 71, 1), 1);
		begin(&r, MDS_LOOKUP_KV, 1);
		pk_str(&r.pk, "key");
		msgpack_pack_int64(&r.pk, 7); /* another int encoding */
		assert_int_equal(muint(mget(call(&r), "kv_offset")), 70);
		begin(&r, MDS_EXISTS_KV, 1);
		pk_str(&r.pk, "key");
		pk_bin(&r.pk, "7", 1);
		assert_int_equal(mbool(mget(call(&r), "exists")), 0);
	}
}

static void test_pins(void **state)
{
	struct rm_handle a;

	start(0, 0);
	a = alloc("A", 1);
	reg("k", a.region_id, 0, 1);
	assert_int_equal(keyop(MDS_PIN_KV, "k"), 1);
	assert_int_equal(keyop(MDS_PIN_KV, "k"), 1);
	assert_int_equal(keyop(MDS_PIN_KV, "missing"), 0);
	assert_int_equal(keyop(MDS_DELETE_KV, "k"), 0); /* pinned */
	assert_int_equal(keyop(MDS_UNPIN_KV, "k"), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "k"), 0); /* still once */
	assert_int_equal(keyop(MDS_UNPIN_KV, "k"), 1);
	assert_int_equal(keyop(MDS_UNPIN_KV, "k"), 0); /* count is 0 */
	assert_int_equal(keyop(MDS_UNPIN_KV, "missing"), 0);
	assert_int_equal(keyop(MDS_DELETE_KV, "k"), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "k"), 0);
}

static void test_deferred_free(void **state)
{
	struct rm_handle a, b;
	msgpack_object *m;

	start(0, 0);
	a = alloc("A", 1);
	b = alloc("A", 1);
	reg("k1", a.region_id, 0, 10);
	reg("k2", a.region_id, 10, 10);
	assert_int_equal(ret_alloc("B", a.region_id), 0); /* not owner */
	assert_int_equal(ret_alloc("A", 12345), 0);	  /* unknown */
	assert_int_equal(ret_alloc("A", a.region_id), 1);
	assert_int_equal(F.nfrees, 0);			  /* deferred */
	assert_int_equal(ret_alloc("A", a.region_id), 1); /* again */
	/* deferred: not listed, still counted, still resolvable */
	m = list_allocs(NULL);
	assert_int_equal(m->via.array.size, 1);
	assert_true(mget(&m->via.array.ptr[0], "region_id")->via.u64 ==
		    b.region_id);
	m = mget(simple(MDS_GET_STATS), "allocation_manager");
	assert_int_equal(muint(mget(m, "num_allocations")), 2);
	assert_int_equal(muint(mget(m, "active_clients")), 1);
	assert_int_equal(mbool(mget(lookup("k1"), "found")), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "k1"), 1);
	assert_int_equal(F.nfrees, 0);
	assert_int_equal(keyop(MDS_PIN_KV, "k2"), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "k2"), 0);
	assert_int_equal(F.nfrees, 0);
	keyop(MDS_UNPIN_KV, "k2");
	assert_int_equal(keyop(MDS_DELETE_KV, "k2"), 1);
	assert_int_equal(F.nfrees, 1); /* now */
	assert_false(F.live[a.region_id]);
	assert_int_equal(ret_alloc("A", a.region_id), 0); /* gone */
	/* an empty region is freed at once on return */
	assert_int_equal(ret_alloc("A", b.region_id), 1);
	assert_int_equal(F.nfrees, 2);
	m = mget(simple(MDS_GET_STATS), "allocation_manager");
	assert_int_equal(muint(mget(m, "num_allocations")), 0);
	assert_int_equal(muint(mget(m, "active_clients")), 0);
}

static void test_list_exclusion(void **state)
{
	struct rm_handle a, b, c;
	msgpack_object *m;

	start(0, 0);
	a = alloc("A", 1);
	b = alloc("B", 1);
	c = alloc("A", 1);
	m = list_allocs(NULL);
	assert_int_equal(m->via.array.size, 3);
	m = list_allocs("A");
	assert_int_equal(m->via.array.size, 1);
	assert_true(mget(&m->via.array.ptr[0], "region_id")->via.u64 ==
		    b.region_id);
	m = list_allocs("B");
	assert_int_equal(m->via.array.size, 2);
	/* insertion order */
	assert_true(mget(&m->via.array.ptr[0], "region_id")->via.u64 ==
		    a.region_id);
	assert_true(mget(&m->via.array.ptr[1], "region_id")->via.u64 ==
		    c.region_id);
	assert_int_equal(mget(&m->via.array.ptr[1], "auth_token")->type,
			 MSGPACK_OBJECT_POSITIVE_INTEGER);
}

static void test_batches(void **state)
{
	struct rm_handle a;
	msgpack_object *m, *e;
	struct req r;
	char k[32];
	int i;

	start(0, 0);
	a = alloc("A", 1);
	/* register 0..299 with a duplicate of key 5 at the end */
	begin(&r, MDS_BATCH_REGISTER_KV, 1);
	pk_str(&r.pk, "entries");
	msgpack_pack_array(&r.pk, 301);
	for (i = 0; i <= 300; i++) {
		snprintf(k, sizeof(k), "b%d", i == 300 ? 5 : i);
		msgpack_pack_map(&r.pk, 4);
		pk_str(&r.pk, "key");
		pk_str(&r.pk, k);
		pk_str(&r.pk, "region_id");
		msgpack_pack_uint64(&r.pk, a.region_id);
		pk_str(&r.pk, "kv_offset");
		msgpack_pack_uint64(&r.pk, (uint64_t)i * 10);
		pk_str(&r.pk, "kv_length");
		msgpack_pack_uint64(&r.pk, 10);
	}
	m = call(&r);
	assert_int_equal(mbool(mget(m, "success")), 1);
	e = mget(m, "results");
	assert_int_equal(e->via.array.size, 301);
	for (i = 0; i < 300; i++)
		assert_int_equal(mbool(&e->via.array.ptr[i]), 1);
	assert_int_equal(mbool(&e->via.array.ptr[300]), 0);

	/* lookup: hits for even i < 600 when i < 300, misses otherwise */
	begin(&r, MDS_BATCH_LOOKUP_KV, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_array(&r.pk, 333);
	for (i = 0; i < 333; i++) {
		snprintf(k, sizeof(k), "b%d", i * 2);
		pk_str(&r.pk, k);
	}
	e = mget(call(&r), "entries");
	assert_int_equal(e->via.array.size, 333);
	for (i = 0; i < 333; i++) {
		msgpack_object *x = &e->via.array.ptr[i];

		if (i * 2 < 300) {
			assert_int_equal(mbool(mget(x, "found")), 1);
			assert_int_equal(muint(mget(x, "kv_offset")), i * 20);
			assert_true(
				mget(mget(x, "handle"), "region_id")->via.u64 ==
				a.region_id);
		} else {
			assert_int_equal(x->via.map.size, 1);
			assert_int_equal(mbool(mget(x, "found")), 0);
		}
	}

	/* exists checks every key (no prefix stop) */
	begin(&r, MDS_BATCH_EXISTS_KV, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_array(&r.pk, 3);
	pk_str(&r.pk, "b1");
	pk_str(&r.pk, "zz");
	pk_str(&r.pk, "b2");
	e = mget(call(&r), "results");
	assert_int_equal(mbool(&e->via.array.ptr[0]), 1);
	assert_int_equal(mbool(&e->via.array.ptr[1]), 0);
	assert_int_equal(mbool(&e->via.array.ptr[2]), 1);

	/* pin stops at the first missing key; nothing after it is pinned */
	begin(&r, MDS_BATCH_PIN_KV, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_array(&r.pk, 4);
	pk_str(&r.pk, "b1");
	pk_str(&r.pk, "b2");
	pk_str(&r.pk, "zz");
	pk_str(&r.pk, "b3");
	e = mget(call(&r), "results");
	assert_int_equal(e->via.array.size, 4);
	assert_int_equal(mbool(&e->via.array.ptr[0]), 1);
	assert_int_equal(mbool(&e->via.array.ptr[1]), 1);
	assert_int_equal(mbool(&e->via.array.ptr[2]), 0);
	assert_int_equal(mbool(&e->via.array.ptr[3]), 0);
	assert_int_equal(keyop(MDS_DELETE_KV, "b3"), 1); /* not pinned */
	assert_int_equal(keyop(MDS_DELETE_KV, "b1"), 0); /* pinned */

	/* unpin: each on its own */
	begin(&r, MDS_BATCH_UNPIN_KV, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_array(&r.pk, 3);
	pk_str(&r.pk, "b1");
	pk_str(&r.pk, "zz");
	pk_str(&r.pk, "b2");
	e = mget(call(&r), "results");
	assert_int_equal(mbool(&e->via.array.ptr[0]), 1);
	assert_int_equal(mbool(&e->via.array.ptr[1]), 0);
	assert_int_equal(mbool(&e->via.array.ptr[2]), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "b1"), 1);

	/* empty and absent lists */
	begin(&r, MDS_BATCH_LOOKUP_KV, 0);
	assert_int_equal(mget(call(&r), "entries")->via.array.size, 0);
	m = mget(simple(MDS_GET_STATS), "kv_manager");
	assert_int_equal(muint(mget(m, "total_entries")), 298);
	assert_int_equal(muint(mget(m, "total_size")), 2980);
}

static void test_stats_and_usage(void **state)
{
	msgpack_object *m, *c, *all, *op;
	struct rm_handle a;
	struct req r;

	start(0, 0);
	m = mget(mget(simple(MDS_GET_STATS), "stats_manager"), "clients");
	assert_int_equal(m->via.map.size, 1);
	assert_int_equal(mget(mget(m, "_all"), "operations")->via.map.size, 0);

	begin(&r, MDS_REPORT_STATS, 1);
	pk_str(&r.pk, "entries");
	msgpack_pack_array(&r.pk, 3);
	msgpack_pack_map(&r.pk, 5);
	pk_str(&r.pk, "client_id");
	pk_str(&r.pk, "w1");
	pk_str(&r.pk, "op_type");
	pk_str(&r.pk, "retrieve");
	pk_str(&r.pk, "result");
	pk_str(&r.pk, "hit");
	pk_str(&r.pk, "size");
	msgpack_pack_int64(&r.pk, 100);
	pk_str(&r.pk, "latency_us");
	msgpack_pack_double(&r.pk, 10.04);
	msgpack_pack_map(&r.pk, 3);
	pk_str(&r.pk, "client_id");
	pk_str(&r.pk, "w1");
	pk_str(&r.pk, "op_type");
	pk_str(&r.pk, "retrieve");
	pk_str(&r.pk, "result");
	pk_str(&r.pk, "miss");
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "client_id");
	pk_str(&r.pk, "_all"); /* a client so named stays a client */
	pk_str(&r.pk, "result");
	pk_str(&r.pk, "partial");
	assert_int_equal(mbool(mget(call(&r), "success")), 1);

	m = simple(MDS_GET_STATS);
	assert_non_null(mget(m, "kv_manager"));
	assert_non_null(mget(m, "cxl_pool"));
	assert_true(mget(mget(m, "cxl_pool"), "total_size")->via.u64 ==
		    F.total);
	c = mget(mget(m, "stats_manager"), "clients");
	assert_int_equal(c->via.map.size, 3); /* _all, _all(client), w1 */
	all = mget(mget(c, "_all"), "operations");
	op = mget(all, "retrieve");
	assert_int_equal(muint(mget(op, "count")), 2);
	assert_int_equal(muint(mget(op, "hit_count")), 1);
	assert_int_equal(muint(mget(op, "miss_count")), 1);
	assert_int_equal(muint(mget(op, "total_bytes")), 100);
	assert_true(mget(op, "latency_sum_us")->via.f64 == 10.0);
	assert_true(mget(op, "min_latency_us")->via.f64 == 0.0);
	assert_true(mget(op, "max_latency_us")->via.f64 == 10.0);
	assert_true(mget(op, "avg_latency_us")->via.f64 == 5.0);
	assert_int_equal(muint(mget(op, "interval_count")), 2);
	assert_int_equal(mget(op, "interval_avg_us")->type,
			 MSGPACK_OBJECT_FLOAT64);
	assert_int_equal(mget(op, "interval_avg_us")->type,
			 MSGPACK_OBJECT_FLOAT64);
	op = mget(all, "unknown");
	assert_int_equal(muint(mget(op, "count")), 1);
	assert_int_equal(muint(mget(op, "hit_count")), 0);
	assert_int_equal(muint(mget(op, "miss_count")), 0);
	op = mget(mget(mget(c, "w1"), "operations"), "retrieve");
	assert_int_equal(muint(mget(op, "count")), 2);
	/* the previous GET_STATS started a new interval */
	m = simple(MDS_GET_STATS);
	c = mget(mget(m, "stats_manager"), "clients");
	op = mget(mget(mget(c, "_all"), "operations"), "retrieve");
	assert_int_equal(muint(mget(op, "count")), 2);
	assert_int_equal(muint(mget(op, "interval_count")), 0);
	assert_true(mget(op, "interval_min_us")->via.f64 == 0.0);

	/* GET_USAGE: per owner, sorted, with used bytes */
	a = alloc("zeta", 1);
	alloc("alpha", 1);
	alloc("zeta", 1);
	reg("u1", a.region_id, 0, 300);
	m = simple(MDS_GET_USAGE);
	c = mget(m, "instances");
	assert_int_equal(c->via.array.size, 2);
	assert_memory_equal(
		mget(&c->via.array.ptr[0], "instance_id")->via.str.ptr, "alpha",
		5);
	assert_int_equal(muint(mget(&c->via.array.ptr[1], "regions")), 2);
	assert_int_equal(muint(mget(&c->via.array.ptr[1], "allocated")),
			 4 << 20);
	assert_int_equal(muint(mget(&c->via.array.ptr[1], "used")), 300);
	assert_int_equal(muint(mget(&c->via.array.ptr[0], "used")), 0);
	assert_true(mget(m, "pool_total")->via.u64 == F.total);
	assert_true(mget(m, "pool_free")->via.u64 == F.total - (6 << 20));
}

/* one REPORT_STATS entry: @client did @op */
static void report(const char *client, const char *op)
{
	struct req r;

	begin(&r, MDS_REPORT_STATS, 1);
	pk_str(&r.pk, "entries");
	msgpack_pack_array(&r.pk, 1);
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "client_id");
	pk_str(&r.pk, client);
	pk_str(&r.pk, "op_type");
	pk_str(&r.pk, op);
	assert_int_equal(mbool(mget(call(&r), "success")), 1);
}

/* a client's accumulators go when its instance leaves: they stay bounded */
static void test_stats_leave_with_their_instance(void **state)
{
	msgpack_object *c;
	struct rm_handle a, b;

	(void)state;
	start(0, 0);
	a = alloc("w1", 1);
	b = alloc("w2", 1);
	report("w1", "store");
	report("w1", "retrieve");
	report("w2", "store");
	report("nobody", "store"); /* never an instance: stays (bounded) */
	c = mget(mget(simple(MDS_GET_STATS), "stats_manager"), "clients");
	assert_int_equal(c->via.map.size, 4);
	assert_int_equal(ret_alloc("w1", a.region_id), 1); /* its last region */
	c = mget(mget(simple(MDS_GET_STATS), "stats_manager"), "clients");
	assert_int_equal(c->via.map.size, 3);
	assert_null(mget(c, "w1"));
	assert_non_null(mget(c, "w2"));
	assert_non_null(mget(c, "nobody"));
	/* the aggregate keeps what w1 reported */
	assert_int_equal(
		muint(mget(mget(mget(mget(c, "_all"), "operations"), "store"),
			   "count")),
		3);
	assert_int_equal(S.stats.n, 1 + 1 + 2); /* w2, nobody, _all x2 */
	(void)b;
}

/* the accumulator array grows between a client's item and its "_all":
 * the client's must be the one updated (ASan: no use after free) */
static void test_stats_growth(void **state)
{
	msgpack_object *c, *op;
	char name[16];
	int i;

	(void)state;
	start(0, 0);
	for (i = 0; i < 31; i++) {
		snprintf(name, sizeof(name), "op%d", i);
		report("a", name); /* 62 items */
	}
	report("b", "op0"); /* 63 */
	report("c", "new"); /* 64, then "_all" of "new" grows the array */
	c = mget(mget(simple(MDS_GET_STATS), "stats_manager"), "clients");
	op = mget(mget(mget(c, "c"), "operations"), "new");
	assert_int_equal(muint(mget(op, "count")), 1);
	op = mget(mget(mget(c, "_all"), "operations"), "new");
	assert_int_equal(muint(mget(op, "count")), 1);
}

static void test_handshake_heartbeat_errors(void **state)
{
	msgpack_object *m;
	struct req r;

	start(30 * SEC, 0);
	m = simple(MDS_HANDSHAKE);
	assert_int_equal(mbool(mget(m, "success")), 1);
	assert_int_equal(mget(m, "rm_address")->via.str.size, 13);
	assert_memory_equal(mget(m, "rm_address")->via.str.ptr, "10.0.0.1:9850",
			    13);
	assert_int_equal(muint(mget(m, "server_version")), 1);
	m = simple(MDS_HEARTBEAT);
	assert_null(mget(m, "error"));
	assert_true(mget(m, "lease_ttl")->via.f64 == 30.0);
	assert_int_equal(mbool(mget(m, "lease_expired")), 0);

	/* SHUTDOWN is refused and changes nothing */
	req_begin(&r, MDS_SHUTDOWN, ++seq);
	msgpack_pack_map(&r.pk, 0);
	m = call(&r);
	assert_int_equal(R.h.msg_type, 0xff);
	assert_int_equal(mget(m, "error")->via.str.size, 25);
	/* a malformed request: error reply that echoes the sequence */
	begin(&r, MDS_LOOKUP_KV, 1);
	pk_str(&r.pk, "key");
	msgpack_pack_true(&r.pk);
	m = call(&r);
	assert_non_null(mget(m, "error"));
	/* no header at all: type 0x80, sequence 0 */
	mds_handle(&S, (const uint8_t *)"short", 5, NULL, &OUT, NULL);
	reply_free(&R);
	have_reply = false;
	assert_int_equal(reply_parse(&OUT, &R), 0);
	have_reply = true;
	assert_int_equal(R.h.sequence, 0);
	assert_int_equal(R.h.msg_type, 0x80);
	assert_non_null(mget(R.root, "error"));
}

/* "server_id" is sent in HANDSHAKE and HEARTBEAT only when set (main) */
static void test_server_id(void **state)
{
	msgpack_object *m;

	start(30 * SEC, 0);
	assert_null(mget(simple(MDS_HANDSHAKE), "server_id"));
	assert_null(mget(simple(MDS_HEARTBEAT), "server_id"));
	snprintf(S.server_id, sizeof(S.server_id), "0123456789abcdef");
	m = simple(MDS_HANDSHAKE);
	assert_int_equal(mget(m, "server_id")->via.str.size, 16);
	assert_memory_equal(mget(m, "server_id")->via.str.ptr,
			    "0123456789abcdef", 16);
	assert_int_equal(mbool(mget(m, "success")), 1);
	m = heartbeat("inst", "L1", false, NULL);
	assert_memory_equal(mget(m, "server_id")->via.str.ptr,
			    "0123456789abcdef", 16);
	assert_int_equal(mbool(mget(m, "lease_expired")), 0);
}

static void test_rm_failures(void **state)
{
	struct rm_handle a;
	msgpack_object *m;
	struct req r;

	start(0, 0);
	F.fail_alloc = -ENOMEM;
	begin(&r, MDS_REQUEST_ALLOC, 2);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "A");
	pk_str(&r.pk, "size");
	msgpack_pack_uint64(&r.pk, 1);
	m = call(&r);
	assert_int_equal(mbool(mget(m, "success")), 0);
	assert_non_null(mget(m, "error"));
	F.fail_alloc = 0;
	a = alloc("A", 1);
	/* the RM is away: the FREE is queued and retried on the timer */
	F.free_rc = -EAGAIN;
	assert_int_equal(ret_alloc("A", a.region_id), 1);
	assert_int_equal(F.nfrees, 0);
	assert_int_equal(S.npending, 1);
	mds_tick(&S, S.vnow + SEC);
	assert_int_equal(S.npending, 1);
	F.free_rc = 0;
	mds_tick(&S, S.vnow + SEC);
	assert_int_equal(S.npending, 0);
	assert_int_equal(F.nfrees, 1);
	/* a refusal for good is logged and forgotten */
	a = alloc("A", 1);
	F.free_rc = -EPERM;
	assert_int_equal(ret_alloc("A", a.region_id), 1);
	assert_int_equal(S.npending, 0);
}

static void test_leases(void **state)
{
	struct rm_handle a, b, c;
	msgpack_object *m;

	start(10 * SEC, 0);
	heartbeat("inst", "L1", false, NULL);
	a = alloc_p("inst", 1, "L1", NULL);
	b = alloc_p("inst", 1, "L1", NULL);
	assert_int_equal(reg("k", b.region_id, 0, 5), 1);
	/* renewals keep it */
	mds_tick(&S, S.vnow + 6 * SEC);
	m = heartbeat("inst", "L1", false, NULL);
	assert_int_equal(mbool(mget(m, "lease_expired")), 0);
	mds_tick(&S, S.vnow + 6 * SEC);
	assert_int_equal(F.nfrees, 0);
	/* silence: expiry frees the empty region at once, not the other */
	mds_tick(&S, S.vnow + 11 * SEC);
	assert_int_equal(F.nfrees, 1);
	assert_false(F.live[a.region_id]);
	assert_true(F.live[b.region_id]);
	assert_int_equal(list_allocs(NULL)->via.array.size, 0);
	assert_int_equal(mbool(mget(lookup("k"), "found")), 1);
	/* new registrations into it are refused */
	assert_int_equal(reg("k2", b.region_id, 5, 5), -1);
	assert_int_equal(reg("k", b.region_id, 5, 5), 0); /* exists anyway */
	/* the renewal comes too late */
	m = heartbeat("inst", "L1", false, NULL);
	assert_int_equal(mbool(mget(m, "lease_expired")), 1);
	assert_int_equal(alloc_p("inst", 1, "L1", NULL).region_id, 0);
	/* the last entry goes: the region follows */
	assert_int_equal(keyop(MDS_DELETE_KV, "k"), 1);
	assert_int_equal(F.nfrees, 2);
	/* same instance id, new lease: unaffected by the old one */
	c = alloc_p("inst", 1, "L2", NULL);
	assert_int_not_equal(c.region_id, 0);
	heartbeat("inst", "L2", false, NULL);
	/* clean close: return, then release */
	assert_int_equal(ret_alloc("inst", c.region_id), 1);
	m = heartbeat("inst", "L2", true, NULL);
	assert_int_equal(mbool(mget(m, "lease_expired")), 0);
	assert_int_equal(F.nfrees, 3);
	m = heartbeat("inst", "L2", false, NULL);
	assert_int_equal(mbool(mget(m, "lease_expired")), 1);
	assert_int_equal(S.nleases, 0);
	/* lease-less allocations are not governed by leases */
	a = alloc("inst", 1);
	mds_tick(&S, S.vnow + 100 * SEC);
	assert_true(F.live[a.region_id]);
}

/*
 * The remote path's figures: clients send what their counters grew by;
 * the server adds it (a repeat adds again, as lookups do) for the
 * instance the connection claimed and pool-wide; "clients" are the
 * owners whose client says "remote": true, until they say otherwise or
 * go; an old client (no fields) changes nothing; a release's last
 * figures count; an instance's figures go with it, the pool's stay
 */
static void test_remote_figures(void **state)
{
	struct mds_peer p1 = {.fd = 10, .rid_hash = 111};
	struct mds_peer p2 = {.fd = 11, .rid_hash = 222};
	struct mds_peer p3 = {.fd = 12, .rid_hash = 333};
	const uint64_t a1[MDS_RT_N] = {1, 100, 2, 200, 0};
	const uint64_t a2[MDS_RT_N] = {2, 200, 0, 0, 1};
	const uint64_t a3[MDS_RT_N] = {1, 10, 0, 0, 0};
	const uint64_t b1[MDS_RT_N] = {0, 0, 5, 50, 0};
	const uint64_t none[MDS_RT_N] = {0};
	uint64_t n[MDS_RT_N];

	(void)state;
	start(10 * SEC, 0);
	mds_conn_open(&S, 10);
	mds_conn_open(&S, 11);
	mds_conn_open(&S, 12);
	/* nothing yet: present, all 0, no instance */
	assert_int_equal(remote_of(NULL, n), 0);
	assert_memory_equal(n, none, sizeof(n));
	assert_int_equal(remote_of("A", n), -1);

	heartbeat_rt("A", "LA", false, true, false, a1, &p1);
	assert_int_equal(remote_of(NULL, n), 1);
	assert_memory_equal(n, a1, sizeof(n));
	assert_int_equal(remote_of("A", n), 1);
	assert_memory_equal(n, a1, sizeof(n));
	heartbeat_rt("A", "LA", false, true, false, a2, &p1);
	heartbeat_rt("A", "LA", false, true, false, a2, &p1); /* adds again */
	assert_int_equal(remote_of("A", n), 1);
	assert_int_equal(n[MDS_RT_PUTS], 5);
	assert_int_equal(n[MDS_RT_PUT_BYTES], 500);
	assert_int_equal(n[MDS_RT_GET_BYTES], 200);
	assert_int_equal(n[MDS_RT_ERRORS], 2);

	/* counters without "remote": counted, not a remote client */
	heartbeat_rt("B", "LB", false, false, true, b1, &p2);
	assert_int_equal(remote_of("B", n), 0);
	assert_memory_equal(n, b1, sizeof(n));
	assert_int_equal(remote_of(NULL, n), 1);
	assert_int_equal(n[MDS_RT_GETS], 7);
	assert_int_equal(n[MDS_RT_GET_BYTES], 250);

	/* an old client says nothing: not listed, nothing changes */
	heartbeat("C", "LC", false, &p3);
	assert_int_equal(remote_of("C", n), -1);
	assert_int_equal(remote_of(NULL, n), 1);
	assert_int_equal(n[MDS_RT_PUT_BYTES], 500);

	/* a release's figures count; the client stays one until it goes */
	heartbeat_rt("A", "LA", true, true, false, a3, &p1);
	assert_int_equal(remote_of("A", n), 1);
	assert_int_equal(n[MDS_RT_PUT_BYTES], 510);
	assert_int_equal(mds_check(&S), 0);
	mds_conn_close(&S, 10);
	assert_int_equal(remote_of("A", n), -1); /* its label went */
	assert_int_equal(remote_of(NULL, n), 0);
	assert_int_equal(n[MDS_RT_PUTS], 6);
	assert_int_equal(n[MDS_RT_PUT_BYTES], 510);
	assert_int_equal(n[MDS_RT_GETS], 7);
	assert_int_equal(n[MDS_RT_GET_BYTES], 250);
	assert_int_equal(n[MDS_RT_ERRORS], 2);

	/* a client that says it is no longer remote is no remote client */
	heartbeat_rt("B", "LB", false, true, false, none, &p2);
	assert_int_equal(remote_of(NULL, n), 1);
	assert_int_equal(remote_of("B", n), 1);
	heartbeat_rt("B", "LB", false, false, false, none, &p2);
	assert_int_equal(remote_of(NULL, n), 0);
	assert_int_equal(remote_of("B", n), 0);
	assert_int_equal(n[MDS_RT_GET_BYTES], 50);
}

static void test_leases_disabled(void **state)
{
	struct rm_handle a;
	msgpack_object *m;

	start(0, 0);
	a = alloc_p("i", 1, "L", NULL);
	m = heartbeat("i", "L", false, NULL);
	assert_true(mget(m, "lease_ttl")->via.f64 == 0.0);
	assert_int_equal(mbool(mget(m, "lease_expired")), 0);
	mds_tick(&S, S.vnow + 1000 * SEC);
	assert_true(F.live[a.region_id]);
	assert_int_equal(S.nleases, 0);
}

static int resolved;

static int resolve12(struct mds_peer *p)
{
	resolved++;
	return 12;
}

static void test_peer_detection(void **state)
{
	struct mds_peer p1 = {.fd = 10, .rid_hash = 111};
	struct mds_peer p2 = {.fd = 11, .rid_hash = 222};
	struct mds_peer q = {
		.fd = MDS_FD_LAZY, .rid_hash = 333, .resolve = resolve12};
	struct mds_peer stale = {.fd = 10, .rid_hash = 999};
	struct rm_handle a, b, c;

	start(0, 5 * SEC);
	mds_conn_open(&S, 10);
	mds_conn_open(&S, 11);
	a = alloc_p("W", 1, NULL, &p1);
	b = alloc_p("W", 1, NULL, &p1);
	assert_int_equal(reg_p("k", b.region_id, 0, 1, &p1), 1);
	/* a second connection cannot write for W while p1 holds it; a
	 * lease-less keep-alive is answered but claims nothing */
	assert_int_equal(reg_p("k2", b.region_id, 1, 1, &p2), -1);
	assert_non_null(mget(heartbeat("W", NULL, false, &p2), "lease_ttl"));
	/* a message from another connection on a reused fd: not W's */
	assert_false(mds_conn_check(&S, &stale));
	mds_conn_close(&S, 10);
	/* W is free now: p2 takes it over (a reconnect) before the grace */
	mds_tick(&S, S.vnow + 1 * SEC);
	assert_int_equal(reg_p("k2", b.region_id, 1, 1, &p2), 1);
	mds_tick(&S, S.vnow + 60 * SEC);
	assert_true(F.live[a.region_id]); /* p2 still open */
	mds_conn_close(&S, 11);
	mds_tick(&S, S.vnow + 4 * SEC);
	assert_true(F.live[a.region_id]); /* grace not over */
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_false(F.live[a.region_id]); /* empty: freed */
	assert_true(F.live[b.region_id]);  /* entries keep it */
	assert_int_equal(list_allocs(NULL)->via.array.size, 0);
	assert_int_equal(keyop(MDS_DELETE_KV, "k"), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "k2"), 1);
	assert_false(F.live[b.region_id]);
	assert_int_equal(S.ctr.peer_dead, 1);

	/* a write into a region declared dead revives its owner */
	mds_conn_open(&S, 12);
	resolved = 0;
	c = alloc_p("V", 1, NULL, &q);
	assert_int_equal(resolved, 1); /* asked once, lazily */
	reg_p("v1", c.region_id, 0, 1, &q);
	mds_conn_close(&S, 12);
	mds_tick(&S, S.vnow + 6 * SEC);
	assert_true(F.live[c.region_id]);
	assert_int_equal(list_allocs(NULL)->via.array.size, 0);
	assert_int_equal(reg("v2", c.region_id, 1, 1), 1);
	assert_int_equal(list_allocs(NULL)->via.array.size, 1);
	/* and with no connection it goes again after the grace time */
	mds_tick(&S, S.vnow + 6 * SEC);
	assert_int_equal(list_allocs(NULL)->via.array.size, 0);
}

/* usage record of @inst in GET_USAGE (NULL: not listed) */
static msgpack_object *usage_of(const char *inst)
{
	msgpack_object *v = mget(simple(MDS_GET_USAGE), "instances");
	uint32_t i;

	for (i = 0; i < v->via.array.size; i++) {
		msgpack_object *id = mget(&v->via.array.ptr[i], "instance_id");

		if (id->via.str.size == strlen(inst) &&
		    !memcmp(id->via.str.ptr, inst, id->via.str.size))
			return &v->via.array.ptr[i];
	}
	return NULL;
}

/*
 * An instance id is a name anyone can read (GET_USAGE) and use: a
 * connection that names it gets an owner of its own under it, and may not
 * act for another owner's regions or pins.
 */
static void test_authority(void **state)
{
	struct mds_peer v = {.fd = 20, .rid_hash = 1};	/* the victim */
	struct mds_peer v2 = {.fd = 21, .rid_hash = 2}; /* its lease thread */
	struct mds_peer x = {.fd = 22, .rid_hash = 3};	/* another client */
	struct rm_handle a, b, xa, xb;
	msgpack_object *m;

	start(10 * SEC, 5 * SEC);
	mds_conn_open(&S, 20);
	mds_conn_open(&S, 21);
	mds_conn_open(&S, 22);
	heartbeat("victim", "secret-lease", false, &v);
	a = alloc_p("victim", 1, "secret-lease", &v);
	assert_int_not_equal(a.region_id, 0);
	/* the lease id proves it: its second connection joins */
	m = heartbeat("victim", "secret-lease", false, &v2);
	assert_int_equal(mbool(mget(m, "lease_expired")), 0);
	assert_int_equal(reg_p("k", a.region_id, 0, 10, &v), 1);

	/* RETURN_ALLOC by name only is refused, nothing freed */
	assert_int_equal(ret_alloc_p("victim", a.region_id, &x), 0);
	assert_true(F.live[a.region_id]);
	/* (a keep-alive without a lease is answered, and claims nothing) */
	heartbeat("victim", NULL, false, &x);
	assert_int_equal(ret_alloc_p("victim", a.region_id, &x), 0);
	/* a lease of another instance proves nothing for a second name */
	assert_int_equal(alloc_p("x", 1, "secret-lease", &x).region_id, 0);
	/* writing into the victim's region is refused */
	assert_int_equal(reg_p("poison", a.region_id, 10, 10, &x), -1);
	assert_int_equal(mbool(mget(lookup("poison"), "found")), 0);
	/* --owner-delete: deleting its key too (it could be re-registered) */
	S.cfg.owner_delete = true;
	assert_int_equal(keyop_p(MDS_DELETE_KV, "k", &x), 0);
	assert_int_equal(mbool(mget(lookup("k"), "found")), 1);
	S.cfg.owner_delete = false;

	/* a pin belongs to who took it */
	assert_int_equal(keyop_p(MDS_PIN_KV, "k", &v), 1);
	assert_int_equal(keyop_p(MDS_UNPIN_KV, "k", &x), 0);
	assert_int_equal(keyop_p(MDS_PIN_KV, "k", &x), 1);
	assert_int_equal(muint(mget(usage_of("victim"), "pinned")), 10);
	/* ... the victim's second connection may release the victim's */
	assert_int_equal(keyop_p(MDS_UNPIN_KV, "k", &v2), 1);
	assert_int_equal(keyop_p(MDS_UNPIN_KV, "k", &v2), 0);
	assert_int_equal(muint(mget(usage_of("victim"), "pinned")), 0);
	assert_int_equal(keyop_p(MDS_DELETE_KV, "k", &v), 0); /* x's pin */
	/* the other client's pin goes with its connection */
	mds_conn_close(&S, 22);
	assert_int_equal(keyop_p(MDS_DELETE_KV, "k", &v), 1);

	/*
	 * The name is a label: another client allocates and takes a lease
	 * under it at once, as an owner of its own; GET_USAGE shows both
	 * under the one id.  It still cannot return, write into, nor unpin
	 * in the victim's regions, and the victim cannot in its.
	 */
	mds_conn_open(&S, 22);
	xa = alloc_p("victim", 1, "mine", &x);
	assert_int_not_equal(xa.region_id, 0);
	assert_int_not_equal(xa.region_id, a.region_id);
	assert_non_null(
		mget(heartbeat("victim", "mine", false, &x), "lease_ttl"));
	xb = alloc_p("victim", 1, NULL, &x); /* lease-less: the same owner */
	assert_int_not_equal(xb.region_id, 0);
	m = usage_of("victim");
	assert_int_equal(muint(mget(m, "regions")), 3);
	assert_int_equal(muint(mget(m, "clients")), 2);
	assert_int_equal(muint(mget(m, "leases")), 2);
	assert_int_equal(ret_alloc_p("victim", a.region_id, &x), 0);
	assert_int_equal(reg_p("poison", a.region_id, 10, 10, &x), -1);
	assert_int_equal(reg_p("xk", xa.region_id, 0, 10, &x), 1);
	assert_int_equal(reg_p("poison", xa.region_id, 10, 10, &v), -1);
	assert_int_equal(ret_alloc_p("victim", xa.region_id, &v), 0);
	assert_true(F.live[a.region_id] && F.live[xa.region_id]);
	assert_int_equal(keyop_p(MDS_DELETE_KV, "xk", &x), 1);
	assert_int_equal(ret_alloc_p("victim", xa.region_id, &x), 1);
	assert_int_equal(ret_alloc_p("victim", xb.region_id, &x), 1);
	assert_false(F.live[xa.region_id] || F.live[xb.region_id]);
	heartbeat("victim", "mine", true, &x); /* its lease released */
	mds_conn_close(&S, 22);
	assert_int_equal(muint(mget(usage_of("victim"), "clients")), 1);

	/* a dead client's pins go with its lease */
	b = alloc_p("victim", 1, "secret-lease", &v);
	assert_int_equal(reg_p("k2", b.region_id, 0, 5, &v), 1);
	assert_int_equal(keyop_p(MDS_PIN_KV, "k2", &v), 1);
	assert_int_equal(keyop_p(MDS_PIN_KV, "k2", &v), 1);
	mds_conn_close(&S, 20);
	mds_conn_close(&S, 21);
	assert_int_equal(muint(mget(usage_of("victim"), "pinned")), 5);
	mds_tick(&S, S.vnow + 11 * SEC);
	assert_int_equal(keyop(MDS_UNPIN_KV, "k2"), 0); /* no pin left */
	assert_int_equal(keyop_p(MDS_DELETE_KV, "k2", NULL), 1);
	assert_false(F.live[b.region_id]);

	/* with the victim gone, its id is still anyone's to use */
	mds_conn_open(&S, 22);
	assert_int_not_equal(alloc_p("victim", 1, NULL, &x).region_id, 0);
}

/*
 * A connection holds at most MDS_CONN_MAX_INST instances: one more is
 * refused, also the second time (the fast path must not remember a
 * connection that was never counted).
 */
static void test_instances_per_connection(void **state)
{
	struct mds_peer p = {.fd = 30, .rid_hash = 9};
	char id[16];
	int i;

	start(0, 5 * SEC);
	mds_conn_open(&S, 30);
	for (i = 0; i < MDS_CONN_MAX_INST; i++) {
		snprintf(id, sizeof(id), "i%d", i);
		assert_int_not_equal(alloc_p(id, 1, NULL, &p).region_id, 0);
	}
	assert_int_equal(alloc_p("one-more", 1, NULL, &p).region_id, 0);
	assert_int_equal(alloc_p("one-more", 1, NULL, &p).region_id, 0);
	mds_tick(&S, S.vnow + 10 * SEC);
	assert_int_equal(S.ctr.peer_dead, 0); /* all still attributed */
}

/* upstream's rule by default: any client deletes any key */
static void test_open_delete(void **state)
{
	struct mds_peer v = {.fd = 20, .rid_hash = 1};
	struct mds_peer x = {.fd = 22, .rid_hash = 3};
	struct rm_handle a;

	start(0, 0);
	mds_conn_open(&S, 20);
	mds_conn_open(&S, 22);
	a = alloc_p("v", 1, NULL, &v);
	assert_int_equal(reg_p("k", a.region_id, 0, 1, &v), 1);
	assert_int_equal(keyop_p(MDS_DELETE_KV, "k", &x), 1);
	/* ownership of regions still holds */
	assert_int_equal(reg_p("k", a.region_id, 0, 1, &x), -1);
}

/* ---- failed allocations anywhere in a scenario ---- */

static int fail_at, calls;

static int fail_nth(void)
{
	return ++calls == fail_at;
}

static void scenario(void)
{
	struct mds_peer p = {.fd = 5, .rid_hash = 1};
	struct rm_handle a;
	struct req r;
	char k[16];
	int i;

	mds_conn_open(&S, 5);
	heartbeat("I", "L", false, &p);
	a = alloc_p("I", 1, "L", &p);
	begin(&r, MDS_BATCH_REGISTER_KV, 1);
	pk_str(&r.pk, "entries");
	msgpack_pack_array(&r.pk, 40);
	for (i = 0; i < 40; i++) {
		snprintf(k, sizeof(k), "f%d", i);
		msgpack_pack_map(&r.pk, 4);
		pk_str(&r.pk, "key");
		pk_str(&r.pk, k);
		pk_str(&r.pk, "region_id");
		msgpack_pack_uint64(&r.pk, a.region_id);
		pk_str(&r.pk, "kv_offset");
		msgpack_pack_uint64(&r.pk, 0);
		pk_str(&r.pk, "kv_length");
		msgpack_pack_uint64(&r.pk, 1);
	}
	call_peer(&r, &p);
	keyop(MDS_DELETE_KV, "f3");
	ret_alloc("I", a.region_id);
	simple(MDS_GET_USAGE);
	mds_conn_close(&S, 5);
	mds_tick(&S, S.vnow + 100 * SEC);
}

static void test_alloc_failures(void **state)
{
	bool clean = false;

	for (fail_at = 1; !clean; fail_at++) {
		start(10 * SEC, 5 * SEC);
		calls = 0;
		ix_fail_hook = fail_nth;
		scenario(); /* every call must still be answered */
		ix_fail_hook = NULL;
		clean = calls < fail_at;
		if (have_reply)
			reply_free(&R);
		have_reply = false;
		assert_int_equal(mds_check(&S), 0);
		mds_destroy(&S);
	}
	assert_true(fail_at > 10);
	start(0, 0); /* for teardown */
}

/* REQUEST_ALLOC for @inst (lease @lease or none), parked: the wait */
static struct mds_wait *alloc_parked(const char *inst, const char *lease)
{
	struct mds_wait *w = NULL;
	struct req r;

	begin(&r, MDS_REQUEST_ALLOC, lease ? 3 : 2);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, inst);
	pk_str(&r.pk, "size");
	msgpack_pack_uint64(&r.pk, 1);
	if (lease) {
		pk_str(&r.pk, "lease_id");
		pk_str(&r.pk, lease);
	}
	req_end(&r);
	assert_int_equal(
		mds_handle(&S, (uint8_t *)r.sb.data, r.sb.size, NULL, &OUT, &w),
		1);
	req_free(&r);
	assert_non_null(w);
	assert_int_equal(OUT.len, 0); /* nothing to send yet */
	assert_ptr_equal(fake_take_wait(&F), w);
	return w;
}

/* answer a parked request; the reply into R */
static msgpack_object *resume(struct mds_wait *w)
{
	uint32_t rseq = w->hdr.sequence;
	uint8_t type = w->hdr.msg_type;

	if (have_reply)
		reply_free(&R);
	mds_resume(&S, w, &OUT);
	assert_int_equal(reply_parse(&OUT, &R), 0);
	have_reply = true;
	assert_int_equal(R.h.sequence, rseq);
	assert_int_equal(R.h.msg_type, type | 0x80);
	return R.root;
}

/* --instance-quota counts requests parked at the RM too */
static void test_quota_counts_parked(void **state)
{
	static const char quota[] = "Allocation failed: quota exceeded";
	struct mds_wait *w;
	msgpack_object *e;

	start(0, 0);
	S.cfg.inst_quota = 1;
	F.defer = true;
	w = alloc_parked("q", NULL);
	/* a second one while the first waits: over the quota, at once */
	assert_int_equal(alloc("q", 1).region_id, 0);
	e = mget(R.root, "error");
	assert_true(e->via.str.size >= sizeof(quota) - 1);
	assert_memory_equal(e->via.str.ptr, quota, sizeof(quota) - 1);
	assert_int_equal(mbool(mget(resume(w), "success")), 1);
	/* answered: its region counts instead of the request */
	F.defer = false;
	assert_int_equal(alloc("q", 1).region_id, 0);
	e = mget(R.root, "error");
	assert_memory_equal(e->via.str.ptr, quota, sizeof(quota) - 1);
	assert_int_not_equal(alloc("other", 1).region_id, 0);
}

/* the RM answers later: parked requests, resumed or abandoned */
static void test_parked_requests(void **state)
{
	struct mds_wait *w;
	msgpack_object *m;
	struct req r;

	start(10 * SEC, 0);
	F.defer = true;
	/* answered: tracked exactly as if it had been at once */
	w = alloc_parked("inst", NULL);
	assert_int_equal(S.nregions, 0);
	m = resume(w);
	assert_int_equal(mbool(mget(m, "success")), 1);
	assert_int_equal(S.nregions, 1);
	assert_int_equal(mget(mget(m, "handle"), "region_id")->via.u64, 1);
	/* the RM refused: a failure reply, no instance left behind */
	w = alloc_parked("other", NULL);
	w->rc = -ENOMEM;
	m = resume(w);
	assert_int_equal(mbool(mget(m, "success")), 0);
	/* the requester went away: the region goes back to the RM */
	w = alloc_parked("inst", NULL);
	assert_int_equal(w->rc, 0);
	assert_true(F.live[w->h.region_id]);
	mds_wait_abandon(&S, w);
	assert_false(F.live[3]);
	assert_int_equal(S.nregions, 1);
	/* the lease ended while the RM answered: refused and freed */
	heartbeat("inst", "L1", false, NULL);
	w = alloc_parked("inst", "L1");
	F.defer = false;
	heartbeat("inst", "L1", true, NULL); /* released */
	F.defer = true;
	m = resume(w);
	assert_int_equal(mget(m, "error")->via.str.size,
			 sizeof("Allocation failed: lease expired") - 1);
	assert_false(F.live[4]);
	assert_int_equal(S.nregions, 1);
	/* GET_STATS on stale figures waits for them, then answers */
	begin(&r, MDS_GET_STATS, 0);
	req_end(&r);
	w = NULL;
	assert_int_equal(
		mds_handle(&S, (uint8_t *)r.sb.data, r.sb.size, NULL, &OUT, &w),
		1);
	req_free(&r);
	assert_ptr_equal(fake_take_wait(&F), w);
	F.defer = false;
	m = resume(w);
	assert_int_equal(mget(mget(m, "cxl_pool"), "total_size")->via.u64,
			 F.total);
	/* a lease whose REQUEST_ALLOC waits does not expire meanwhile (its
	 * renewals may wait behind it on the same connection); the answer
	 * renews it */
	F.defer = false;
	heartbeat("inst", "L2", false, NULL);
	F.defer = true;
	w = alloc_parked("inst", "L2");
	mds_tick(&S, S.vnow + 11 * SEC);
	assert_int_equal(S.nleases, 1);
	m = resume(w);
	assert_int_equal(mbool(mget(m, "success")), 1);
	mds_tick(&S, S.vnow + 9 * SEC);
	assert_int_equal(S.nleases, 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_int_equal(S.nleases, 0);
	/* without a place to park (wp NULL) nothing waits */
	F.defer = true;
	assert_int_not_equal(alloc("inst", 1).region_id, 0);
	F.defer = false;
}

/* ---- eviction ---- */

static struct mds_wait *DONE; /* the last wait the store answered */

static void on_done(struct mds_wait *w)
{
	DONE = w;
}

/* LRU with a 1 s grace, 5 s capacity wait, no background reclaim; an
 * 8 MiB pool (four 2 MiB regions) */
static void start_ev(const char *policy, uint32_t high_pm, uint32_t low_pm)
{
	struct mds_config c = {
		.rm_address = "10.0.0.1:9850",
		.max_key = 4096,
		.eviction = policy,
		.evict_grace_ns = SEC,
		.evict_wait_ns = 5 * SEC,
		.evict_high_pm = high_pm,
		.evict_low_pm = low_pm,
	};

	memset(&F, 0, sizeof(F));
	F.total = 8ull << 20;
	assert_int_equal(mds_init(&S, &c, &fake_ops, &F, 1234), 0);
	S.vnow = 1000 * SEC;
	seq = 0;
	DONE = NULL;
}

/* REQUEST_ALLOC that may wait: NULL and *wp when parked, else the reply */
static msgpack_object *alloc_w(const char *inst, uint64_t size,
			       struct mds_wait **wp)
{
	struct req r;

	*wp = NULL;
	begin(&r, MDS_REQUEST_ALLOC, 2);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, inst);
	pk_str(&r.pk, "size");
	msgpack_pack_uint64(&r.pk, size);
	req_end(&r);
	if (have_reply)
		reply_free(&R);
	have_reply = false;
	if (mds_handle(&S, (uint8_t *)r.sb.data, r.sb.size, NULL, &OUT, wp) ==
	    1) {
		req_free(&r);
		(*wp)->done = on_done;
		return NULL;
	}
	req_free(&r);
	assert_int_equal(reply_parse(&OUT, &R), 0);
	have_reply = true;
	return R.root;
}

/* HEARTBEAT of a lease-less instance that takes eviction notices, with
 * an acknowledgement (0: none) */
/* HEARTBEAT taking notices, on lease @lease (or none), acknowledging
 * @ack (0: none) */
static msgpack_object *hb_lease_ack(const char *inst, const char *lease,
				    uint64_t ack)
{
	struct req r;

	begin(&r, MDS_HEARTBEAT, 2 + (lease != NULL) + (ack != 0));
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, inst);
	if (lease) {
		pk_str(&r.pk, "lease_id");
		pk_str(&r.pk, lease);
	}
	pk_str(&r.pk, "evict_notices");
	msgpack_pack_true(&r.pk);
	if (ack) {
		pk_str(&r.pk, "evicted_ack");
		msgpack_pack_uint64(&r.pk, ack);
	}
	return call(&r);
}

static msgpack_object *hb_ack(const char *inst, uint64_t ack)
{
	return hb_lease_ack(inst, NULL, ack);
}

static msgpack_object *hb_notices(const char *inst)
{
	return hb_ack(inst, 0);
}

/* REQUEST_ALLOC of 2 MiB by @inst on @lease, acknowledging @ack (0:
 * none) */
static msgpack_object *alloc_ack(const char *inst, const char *lease,
				 uint64_t ack)
{
	struct req r;

	begin(&r, MDS_REQUEST_ALLOC, 3 + (ack != 0));
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, inst);
	pk_str(&r.pk, "size");
	msgpack_pack_uint64(&r.pk, 2 << 20);
	pk_str(&r.pk, "lease_id");
	pk_str(&r.pk, lease);
	if (ack) {
		pk_str(&r.pk, "evicted_ack");
		msgpack_pack_uint64(&r.pk, ack);
	}
	return call(&r);
}

/* @m's array field @key equals @v[0..n) */
static void assert_uints(msgpack_object *m, const char *key, const uint64_t *v,
			 uint32_t n)
{
	msgpack_object *a = mget(m, key);
	uint32_t i;

	assert_non_null(a);
	assert_int_equal(a->type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(a->via.array.size, n);
	for (i = 0; i < n; i++)
		assert_true(a->via.array.ptr[i].via.u64 == v[i]);
}

/* a refused REQUEST_ALLOC: its text starts with @want (upstream's words;
 * the cause follows), and it says a cause for programs */
static void assert_error(msgpack_object *m, const char *want)
{
	msgpack_object *e = mget(m, "error");

	assert_int_equal(mbool(mget(m, "success")), 0);
	assert_non_null(e);
	assert_true(e->via.str.size >= strlen(want));
	assert_memory_equal(e->via.str.ptr, want, strlen(want));
	assert_non_null(mget(m, "cause"));
}

/* four 2 MiB regions of @inst holding keys a0..a7 of 1 MiB, two each;
 * allocated under lease @FILL_LEASE (NULL: none) */
static const char *FILL_LEASE;

static void fill(const char *inst, bool notices)
{
	char k[8];
	int i;

	for (i = 1; i <= 4; i++)
		assert_int_equal(
			alloc_p(inst, 2 << 20, FILL_LEASE, NULL).region_id, i);
	if (notices)
		hb_notices(inst);
	for (i = 0; i < 8; i++) {
		snprintf(k, sizeof(k), "a%d", i);
		assert_int_equal(reg(k, i / 2 + 1, (i % 2) << 20, 1 << 20), 1);
	}
}

static bool found(const char *key)
{
	return mbool(mget(lookup(key), "found")) == 1;
}

static uint64_t ev_stat(const char *name)
{
	return (uint64_t)muint(
		mget(mget(simple(MDS_GET_STATS), "eviction"), name));
}

/* capacity moves between owners: B's store evicts A's coldest keys, A is
 * told after the grace and gives the emptied region back, B gets it */
static void test_evict_moves_capacity(void **state)
{
	static const uint64_t ev[] = {3, 0, 5, 3, 1 << 20, 6}, rel[] = {3};
	struct mds_wait *w;
	msgpack_object *m;

	start_ev("lru", 0, 0);
	fill("A", true);
	/* uses: LOOKUP, EXISTS, PIN; the coldest are a4, a5 (region 3) */
	assert_true(found("a0"));
	assert_int_equal(keyop(MDS_EXISTS_KV, "a1"), 1);
	assert_int_equal(keyop(MDS_PIN_KV, "a2"), 1);
	assert_true(found("a3"));
	assert_null(alloc_w("B", 2 << 20, &w));
	assert_non_null(w);
	assert_false(found("a4"));
	assert_false(found("a5"));
	assert_true(found("a0") && found("a1") && found("a2") && found("a3") &&
		    found("a6") && found("a7"));
	/* before the grace A is not told (a reader may still copy them) */
	m = hb_notices("A");
	assert_null(mget(m, "evicted"));
	assert_int_equal(muint(mget(m, "renew_ms")), 100);
	mds_tick(&S, S.vnow + SEC);
	assert_null(DONE);
	m = hb_notices("A");
	assert_uints(m, "evicted", ev, 6);
	assert_uints(m, "release", rel, 1);
	/* told once */
	assert_null(mget(hb_notices("A"), "evicted"));
	assert_int_equal(ret_alloc("A", 3), 1);
	assert_false(F.live[3]);
	mds_tick(&S, S.vnow);
	assert_ptr_equal(DONE, w);
	m = resume(w);
	assert_int_equal(mbool(mget(m, "success")), 1);
	assert_int_equal(mget(mget(m, "handle"), "region_id")->via.u64, 5);
	assert_int_equal(ev_stat("evictions"), 2);
	assert_int_equal(ev_stat("pages_told"), 2);
	assert_int_equal(ev_stat("regions_released"), 1);
	assert_int_equal(ev_stat("alloc_waits"), 1);
	assert_int_equal(ev_stat("alloc_wait_failures"), 0);
	assert_int_equal(ev_stat("pinned_bytes"), 1 << 20);
	assert_int_equal(ev_stat("evictable_entries"), 5);
	assert_int_equal(
		muint(mget(mget(mget(mget(simple(MDS_GET_STATS), "eviction"),
				     "by_reason"),
				"region"),
			   "bytes")),
		2 << 20);
}

/* the coldest keys lie in two regions: the region for B is the one whose
 * warmest key is the coldest (region 2: a2, a3), not region 1 whose a1 is
 * the coldest key but whose a0 was just used */
static void test_evict_empties_a_region(void **state)
{
	static const uint64_t ev[] = {2, 0, 3, 2, 1 << 20, 4}, rel[] = {2};
	struct mds_wait *w;

	start_ev("lru", 0, 0);
	fill("A", true);
	assert_true(found("a0")); /* coldest: a1, a2, a3, ... a7, a0 */
	assert_null(alloc_w("B", 2 << 20, &w));
	assert_false(found("a2") || found("a3"));
	assert_true(found("a0") && found("a1") && found("a4"));
	mds_tick(&S, S.vnow + SEC);
	assert_uints(hb_notices("A"), "evicted", ev, 6);
	assert_uints(R.root, "release", rel, 1);
	assert_int_equal(ret_alloc("A", 2), 1);
	mds_tick(&S, S.vnow);
	assert_ptr_equal(DONE, w);
	assert_int_equal(mbool(mget(resume(w), "success")), 1);
}

/* an instance short of room evicts its own coldest pages: after the
 * grace its REQUEST_ALLOC answers with them, and it reuses them */
static void test_evict_own_pages(void **state)
{
	static const uint64_t ev[] = {1, 0, 1, 1, 1 << 20, 2};
	struct mds_wait *w;
	msgpack_object *m;

	start_ev("lru", 0, 0);
	fill("A", true);
	assert_null(alloc_w("A", 2 << 20, &w));
	mds_tick(&S, S.vnow + SEC / 2);
	assert_null(DONE);
	mds_tick(&S, S.vnow + SEC / 2);
	assert_ptr_equal(DONE, w);
	m = resume(w);
	assert_error(m, "Allocation failed: pool full; pages of yours were "
			"evicted (see evicted)");
	assert_uints(m, "evicted", ev, 6);
	assert_int_equal(reg("n0", 1, 0, 1 << 20), 1);
	assert_int_equal(muint(mget(R.root, "kv_gen")), 9);
	assert_true(found("n0"));
	assert_false(found("a0"));
	/* a page told is not told again, a released region is not asked */
	m = hb_notices("A");
	assert_null(mget(m, "evicted"));
	assert_null(mget(m, "release"));
}

/* pins are absolute; a live owner that takes no notices (an upstream
 * client) keeps its keys; the wait for capacity ends */
static void test_evict_pins_and_old_clients(void **state)
{
	struct mds_wait *w;
	msgpack_object *m;
	char k[8];
	int i;

	start_ev("lru", 0, 0);
	fill("A", false);
	for (i = 0; i < 8; i++) {
		snprintf(k, sizeof(k), "a%d", i);
		assert_int_equal(keyop(MDS_PIN_KV, k), 1);
	}
	/* nothing to evict, nothing to wait for: at once */
	m = alloc_w("B", 1, &w);
	assert_null(w);
	assert_error(m, "Allocation failed: pool exhausted: it is full of "
			"pinned entries");
	assert_int_equal(keyop(MDS_UNPIN_KV, "a0"), 1);
	/* a0 is unpinned, but A takes no notices: evicting frees nothing */
	m = alloc_w("B", 1, &w);
	assert_null(w);
	assert_error(m, "Allocation failed");
	assert_true(found("a0"));
	/* A takes notices now: a0 goes, but its region stays A's (a1 is
	 * pinned there) and nothing else is evictable: the wait times out */
	hb_notices("A");
	assert_null(alloc_w("B", 1, &w));
	assert_false(found("a0"));
	mds_tick(&S, S.vnow + 4 * SEC);
	assert_null(DONE);
	mds_tick(&S, S.vnow + SEC);
	assert_ptr_equal(DONE, w);
	assert_error(resume(w), "Allocation failed: pool exhausted: it is full "
				"of pinned entries");
	assert_int_equal(ev_stat("alloc_wait_failures"), 3);
	for (i = 1; i < 8; i++)
		assert_true(found((char[]){'a', (char)('0' + i), 0}));
}

/* notices stay until acknowledged, come again after 2 s, cover deletes
 * by others, and are given up on after 30 s without an acknowledgement */
static void test_evict_notice_acks(void **state)
{
	static const uint64_t ev[] = {1, 0, 1, 1, 1 << 20, 2}, sq[] = {1, 2},
			      del[] = {2, 1 << 20, 4}, sq2[] = {3, 3};
	struct mds_wait *w;
	msgpack_object *m;

	start_ev("lru", 0, 0);
	fill("A", true);
	assert_null(alloc_w("B", 2 << 20, &w)); /* a0, a1: region 1 */
	mds_tick(&S, S.vnow + SEC);
	m = hb_notices("A");
	assert_uints(m, "evicted", ev, 6);
	assert_uints(m, "evicted_seq", sq, 2);
	assert_null(mget(hb_notices("A"), "evicted")); /* sent, unacked */
	mds_tick(&S, S.vnow + 2 * SEC);
	m = hb_notices("A"); /* a reply may have been lost: again */
	assert_uints(m, "evicted", ev, 6);
	assert_uints(m, "evicted_seq", sq, 2);
	hb_ack("A", 2);
	mds_tick(&S, S.vnow + 3 * SEC);
	assert_null(mget(hb_notices("A"), "evicted"));
	/* a key of A's deleted by someone else: A is told too */
	assert_int_equal(keyop(MDS_DELETE_KV, "a3"), 1);
	mds_tick(&S, S.vnow + SEC);
	m = hb_ack("A", 2);
	assert_uints(m, "evicted", del, 3);
	assert_uints(m, "evicted_seq", sq2, 2);
	/* no acknowledgement for 30 s: A takes no notices any more */
	mds_tick(&S, S.vnow + 31 * SEC);
	m = heartbeat("A", NULL, false, NULL);
	assert_null(mget(m, "evicted"));
	assert_null(mget(m, "renew_ms"));
	assert_int_equal(keyop(MDS_DELETE_KV, "a4"), 1);
	mds_tick(&S, S.vnow + 3 * SEC);
	assert_null(mget(heartbeat("A", NULL, false, NULL), "evicted"));
	mds_tick(&S, S.vnow + 10 * SEC);
	mds_resume(&S, w, &OUT); /* B timed out meanwhile */
}

/*
 * A client that kept its numbers across a restart of the server (notices
 * are not in the journal: the new run numbers from 1 again) acknowledges
 * numbers this server never sent.  The server goes on from them: its
 * notices are not dropped unsent by the stale acknowledgement the client
 * repeats (they were, and the client's pages were lost to it for good).
 */
static void test_evict_notice_numbers_resume(void **state)
{
	static const uint64_t del[] = {1, 0, 1}, sq[] = {3001, 3001},
			      sq2[] = {3002, 3002};
	msgpack_object *m;

	start_ev("lru", 0, 0);
	fill("A", true);
	hb_ack("A", 3000); /* its last of the run before */
	assert_int_equal(keyop(MDS_DELETE_KV, "a0"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	m = hb_ack("A", 3000); /* again: it has nothing newer */
	assert_uints(m, "evicted", del, 3);
	assert_uints(m, "evicted_seq", sq, 2);
	hb_ack("A", 3001);
	assert_int_equal(keyop(MDS_DELETE_KV, "a2"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	m = hb_ack("A", 3001);
	assert_uints(m, "evicted_seq", sq2, 2);
	/* an older request's acknowledgement, overtaken: changes nothing
	 * (3002 is sent again after 2 s, not dropped nor renumbered) */
	hb_ack("A", 3000);
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_uints(hb_ack("A", 3001), "evicted_seq", sq2, 2);
	/* 30 s without an acknowledgement: given up on (3002 dropped);
	 * taken back on, A's next notice follows its 3001, not a gap it
	 * would never take */
	mds_tick(&S, S.vnow + 31 * SEC);
	hb_ack("A", 3001);
	assert_int_equal(keyop(MDS_DELETE_KV, "a4"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_uints(hb_ack("A", 3001), "evicted_seq", sq2, 2);
}

/* instance A on lease @lease (leases on), its keys a0..a7; a0 deleted:
 * notice 1 sent to it, not acknowledged */
static void notice_one(const char *lease)
{
	static const uint64_t sq1[] = {1, 1};

	start_ev("lru", 0, 0);
	S.cfg.lease_ttl_ns = 60 * SEC;
	FILL_LEASE = lease;
	fill("A", true);
	FILL_LEASE = NULL;
	hb_lease_ack("A", lease, 0);
	assert_int_equal(keyop(MDS_DELETE_KV, "a0"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_uints(hb_lease_ack("A", lease, 0), "evicted_seq", sq1, 2);
}

/*
 * Notices go to the owner of the pages: another process of the instance
 * id (a restarted worker with its configured id, another handler: another
 * lease) gets none of the first one's, and its own are numbered from 1.
 */
static void test_evict_notice_new_process(void **state)
{
	static const uint64_t sq1[] = {1, 1}, sq2[] = {2, 2}, sq3[] = {3, 3},
			      del4[] = {3, 0, 5}, own[] = {5, 0, 9};
	msgpack_object *m;
	int i;

	notice_one("lease-1");
	assert_int_equal(keyop(MDS_DELETE_KV, "a2"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_uints(hb_lease_ack("A", "lease-1", 1), "evicted_seq", sq2, 2);
	hb_lease_ack("A", "lease-1", 2);
	/* another process comes with the instance's id: nothing of the
	 * first one's pages is told to it */
	assert_int_equal(keyop(MDS_DELETE_KV, "a4"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	m = hb_lease_ack("A", "lease-2", 0);
	assert_null(mget(m, "evicted_seq"));
	assert_null(mget(m, "evicted"));
	m = hb_lease_ack("A", "lease-1", 2);
	assert_uints(m, "evicted_seq", sq3, 2);
	assert_uints(m, "evicted", del4, 3);
	hb_lease_ack("A", "lease-1", 3);
	/* its own region's pages are its own, numbered from 1 */
	F.total = 16ull << 20; /* room for it */
	assert_int_equal(
		mget(mget(alloc_ack("A", "lease-2", 0), "handle"), "region_id")
			->via.u64,
		5);
	assert_int_equal(reg("b0", 5, 0, 10), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "b0"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_null(mget(hb_lease_ack("A", "lease-1", 3), "evicted"));
	m = hb_lease_ack("A", "lease-2", 0);
	assert_uints(m, "evicted_seq", sq1, 2);
	assert_uints(m, "evicted", own, 3);
	hb_lease_ack("A", "lease-2", 1);
	mds_tick(&S, S.vnow + 3 * SEC);
	assert_null(mget(hb_lease_ack("A", "lease-2", 1), "evicted"));
	/* a lease of another instance's has no say in A's numbers, in a
	 * HEARTBEAT or a REQUEST_ALLOC naming A (both refused) */
	hb_lease_ack("B", "lease-b", 0);
	assert_non_null(mget(hb_lease_ack("A", "lease-b", 9), "error"));
	assert_non_null(mget(alloc_ack("A", "lease-b", 9), "error"));
	assert_int_equal(keyop(MDS_DELETE_KV, "a6"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	m = hb_lease_ack("A", "lease-1", 3);
	assert_int_equal(mget(m, "evicted_seq")->via.array.ptr[0].via.u64, 4);
	hb_lease_ack("A", "lease-1", 4);
	/* an owner that acknowledges nothing for 30 s is given up on (its
	 * queue dropped), taken back at its next HEARTBEAT; it still has
	 * nothing past 1, so its next notice is 2, not after the dropped
	 * ones */
	assert_int_equal(reg("b1", 5, 10, 10), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "b1"), 1);
	for (i = 0; i < 4; i++) {
		mds_tick(&S, S.vnow + 9 * SEC);
		hb_lease_ack("A", "lease-2", 1);
		hb_lease_ack("A", "lease-1", 4);
	}
	assert_int_equal(reg("b2", 5, 20, 10), 1);
	assert_int_equal(keyop(MDS_DELETE_KV, "b2"), 1);
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_uints(hb_lease_ack("A", "lease-2", 1), "evicted_seq", sq2, 2);
}

/* the acknowledgement in a REQUEST_ALLOC refused for room or quota (not
 * for authority) still counts: what it acknowledges is not sent again */
static void test_evict_notice_ack_in_refused_alloc(void **state)
{
	char k[8];
	int i;

	notice_one("la");
	/* at its quota with nothing of its own to evict: refused at once */
	S.cfg.inst_quota = 8 << 20;
	for (i = 1; i < 8; i++) {
		snprintf(k, sizeof(k), "a%d", i);
		assert_int_equal(keyop(MDS_PIN_KV, k), 1);
	}
	assert_error(alloc_ack("A", "la", 1), "Allocation failed: quota "
					      "exceeded");
	mds_tick(&S, S.vnow + 3 * SEC);
	assert_null(mget(hb_lease_ack("A", "la", 0), "evicted"));
}

/* at its --instance-quota an instance evicts its own coldest keys, not
 * other instances' (colder or not), and waits for their pages */
static void test_evict_quota(void **state)
{
	static const uint64_t ev[] = {1, 0, 2, 1, 1 << 20, 3};
	struct mds_wait *w;
	msgpack_object *m;

	start_ev("lru", 0, 0);
	S.cfg.inst_quota = 4 << 20;
	assert_int_equal(alloc("A", 2 << 20).region_id, 1);
	assert_int_equal(alloc("A", 2 << 20).region_id, 2);
	assert_int_equal(alloc("B", 2 << 20).region_id, 3);
	hb_notices("A");
	hb_notices("B");
	assert_int_equal(reg("b0", 3, 0, 1 << 20), 1); /* the coldest */
	assert_int_equal(reg("a0", 1, 0, 1 << 20), 1);
	assert_int_equal(reg("a1", 1, 1 << 20, 1 << 20), 1);
	assert_int_equal(reg("a2", 2, 0, 1 << 20), 1);
	assert_null(alloc_w("A", 2 << 20, &w));
	assert_false(found("a0") || found("a1"));
	assert_true(found("b0") && found("a2"));
	mds_tick(&S, S.vnow + SEC);
	assert_ptr_equal(DONE, w);
	m = resume(w);
	assert_error(m, "Allocation failed: pool full; pages of yours were "
			"evicted (see evicted)");
	assert_uints(m, "evicted", ev, 6);
	m = mget(mget(mget(simple(MDS_GET_STATS), "eviction"), "by_reason"),
		 "quota");
	assert_int_equal(muint(mget(m, "count")), 2);
	/* nothing of its own to evict: the quota error, at once */
	assert_int_equal(keyop(MDS_PIN_KV, "a2"), 1);
	m = alloc_w("A", 2 << 20, &w);
	assert_null(w);
	assert_error(m, "Allocation failed: quota exceeded");
	assert_true(found("b0"));
}

/* HEARTBEAT "touched": uses reported in a batch keep keys warm */
static void test_evict_touched(void **state)
{
	struct mds_wait *w;
	struct req r;

	start_ev("lru", 0, 0);
	fill("A", true);
	begin(&r, MDS_HEARTBEAT, 2);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "A");
	pk_str(&r.pk, "touched");
	msgpack_pack_array(&r.pk, 2);
	pk_str(&r.pk, "a0");
	pk_str(&r.pk, "a1");
	assert_null(mget(call(&r), "error"));
	/* the coldest region is now region 2 (a2, a3), not region 1 */
	assert_null(alloc_w("B", 2 << 20, &w));
	assert_true(found("a0") && found("a1"));
	assert_false(found("a2") || found("a3"));
	mds_tick(&S, S.vnow + 10 * SEC);
	mds_resume(&S, w, &OUT);
}

/* --eviction none: the store-only behaviour */
static void test_evict_none(void **state)
{
	struct mds_wait *w;

	start_ev("none", 950, 900);
	fill("A", true);
	mds_tick(&S, S.vnow + 10 * SEC);
	assert_error(alloc_w("B", 1, &w), "Allocation failed");
	assert_null(w);
	assert_true(found("a0") && found("a7"));
	assert_int_equal(ev_stat("evictions"), 0);
}

/* keys of an owner that is done: evicted whatever the owner does, and
 * their region is freed once the grace after the eviction passed */
static void test_evict_owner_gone(void **state)
{
	struct mds_wait *w;
	msgpack_object *m;

	start_ev("lru", 0, 0);
	fill("A", false);
	assert_int_equal(ret_alloc("A", 1), 1); /* a0, a1 keep region 1 */
	assert_null(alloc_w("B", 2 << 20, &w));
	assert_false(found("a0") || found("a1"));
	assert_true(found("a2"));
	assert_true(F.live[1]); /* not before the grace */
	assert_int_equal(S.ndeferred, 1);
	mds_tick(&S, S.vnow + SEC);
	assert_false(F.live[1]);
	assert_ptr_equal(DONE, w);
	m = resume(w);
	assert_int_equal(mbool(mget(m, "success")), 1);
	m = mget(mget(mget(simple(MDS_GET_STATS), "eviction"), "by_reason"),
		 "owner_gone");
	assert_int_equal(muint(mget(m, "count")), 2);
}

/* an owner that is away (no connection, no HEARTBEAT for HERE_NS: its
 * process may have died, its lease runs on) loses no key: nobody could
 * use the room; once it is back, its keys are evicted as before */
static void test_evict_owner_away(void **state)
{
	struct mds_wait *w;

	start_ev("lru", 0, 0);
	fill("A", true);
	mds_tick(&S, S.vnow + 3 * SEC);
	assert_error(alloc_w("B", 2 << 20, &w), "Allocation failed");
	assert_null(w);
	assert_int_equal(ev_stat("evictions"), 0);
	assert_true(found("a0") && found("a7"));
	hb_notices("A");
	assert_null(alloc_w("B", 2 << 20, &w));
	assert_non_null(w);
	assert_int_equal(ev_stat("evictions"), 2);
	mds_tick(&S, S.vnow + 10 * SEC);
	mds_resume(&S, w, &OUT);
}

/* above the high watermark the tick evicts down to the low one */
static void test_evict_background(void **state)
{
	start_ev("lru", 500, 250); /* 4 MiB, 2 MiB */
	fill("A", true);
	assert_true(found("a0"));
	mds_tick(&S, S.vnow + SEC);
	assert_int_equal(S.kv.count, 2);
	assert_true(found("a0") && found("a7"));
	assert_int_equal(ev_stat("evictions"), 6);
	mds_tick(&S, S.vnow + 2 * SEC);
	assert_int_equal(ev_stat("pages_told"), 0); /* told when asked */
	assert_int_equal(mget(hb_notices("A"), "evicted")->via.array.size, 18);
	assert_null(mget(hb_notices("A"), "evicted"));
	assert_int_equal(ev_stat("pages_told"), 6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_alloc_register_lookup, teardown),
		cmocka_unit_test_teardown(test_first_writer_wins, teardown),
		cmocka_unit_test_teardown(test_locations_are_checked, teardown),
		cmocka_unit_test_teardown(test_stats_leave_with_their_instance,
					  teardown),
		cmocka_unit_test_teardown(test_stats_growth, teardown),
		cmocka_unit_test_teardown(test_pins, teardown),
		cmocka_unit_test_teardown(test_deferred_free, teardown),
		cmocka_unit_test_teardown(test_list_exclusion, teardown),
		cmocka_unit_test_teardown(test_batches, teardown),
		cmocka_unit_test_teardown(test_stats_and_usage, teardown),
		cmocka_unit_test_teardown(test_handshake_heartbeat_errors,
					  teardown),
		cmocka_unit_test_teardown(test_server_id, teardown),
		cmocka_unit_test_teardown(test_rm_failures, teardown),
		cmocka_unit_test_teardown(test_leases, teardown),
		cmocka_unit_test_teardown(test_leases_disabled, teardown),
		cmocka_unit_test_teardown(test_peer_detection, teardown),
		cmocka_unit_test_teardown(test_authority, teardown),
		cmocka_unit_test_teardown(test_open_delete, teardown),
		cmocka_unit_test_teardown(test_instances_per_connection,
					  teardown),
		cmocka_unit_test_teardown(test_quota_counts_parked, teardown),
		cmocka_unit_test_teardown(test_alloc_failures, teardown),
		cmocka_unit_test_teardown(test_parked_requests, teardown),
		cmocka_unit_test_teardown(test_evict_moves_capacity, teardown),
		cmocka_unit_test_teardown(test_evict_own_pages, teardown),
		cmocka_unit_test_teardown(test_evict_empties_a_region,
					  teardown),
		cmocka_unit_test_teardown(test_evict_pins_and_old_clients,
					  teardown),
		cmocka_unit_test_teardown(test_evict_none, teardown),
		cmocka_unit_test_teardown(test_evict_notice_acks, teardown),
		cmocka_unit_test_teardown(test_evict_notice_new_process,
					  teardown),
		cmocka_unit_test_teardown(
			test_evict_notice_ack_in_refused_alloc, teardown),
		cmocka_unit_test_teardown(test_evict_notice_numbers_resume,
					  teardown),
		cmocka_unit_test_teardown(test_evict_quota, teardown),
		cmocka_unit_test_teardown(test_evict_touched, teardown),
		cmocka_unit_test_teardown(test_evict_owner_gone, teardown),
		cmocka_unit_test_teardown(test_evict_owner_away, teardown),
		cmocka_unit_test_teardown(test_evict_background, teardown),
		cmocka_unit_test_teardown(test_remote_figures, teardown),
	};

	log_init("test_mds_store", LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
