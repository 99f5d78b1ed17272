/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mds_codec.c - the server's MessagePack reader/writer (msgpk.c) and
 * request decoder (codec.c), cross-checked against msgpack-c: every
 * encoding of every type, truncation at every byte, smallest-form
 * integer output, and request decoding for each message type with the
 * malformed variants the server must refuse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "codec.h"
#include "msgpk.h"
#include "test_mds_util.h"

/* ---- reader vs msgpack-c's packer ---- */

static void read_one(msgpack_sbuffer *sb, struct mp_val *v)
{
	struct mp_rd r;

	mp_rd_init(&r, (const uint8_t *)sb->data, sb->size);
	assert_int_equal(mp_read(&r, v), 0);
}

static void test_read_ints(void **state)
{
	static const uint64_t us[] = {0,
				      1,
				      127,
				      128,
				      255,
				      256,
				      65535,
				      65536,
				      UINT32_MAX,
				      (uint64_t)UINT32_MAX + 1,
				      (1ull << 63) - 1,
				      1ull << 63,
				      UINT64_MAX};
	static const int64_t ns[] = {
		-1,	  -32,	     -33,
		-128,	  -129,	     -32768,
		-32769,	  INT32_MIN, (int64_t)INT32_MIN - 1,
		INT64_MIN};
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct mp_val v;
	size_t i;

	for (i = 0; i < sizeof(us) / sizeof(us[0]); i++) {
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_uint64(&pk, us[i]);
		read_one(&sb, &v);
		assert_int_equal(v.type, MP_UINT);
		assert_true(v.u == us[i]);
		msgpack_sbuffer_destroy(&sb);
	}
	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_int64(&pk, ns[i]);
		read_one(&sb, &v);
		assert_int_equal(v.type, MP_NINT);
		assert_true(v.i == ns[i]);
		msgpack_sbuffer_destroy(&sb);
	}
	/* a non-negative value in a signed encoding is still an MP_UINT */
	{
		static const uint8_t s8[] = {0xd0, 0x05};
		static const uint8_t s64[] = {0xd3, 0, 0, 0, 0, 0, 0, 1, 0};
		struct mp_rd r;

		mp_rd_init(&r, s8, sizeof(s8));
		assert_int_equal(mp_read(&r, &v), 0);
		assert_int_equal(v.type, MP_UINT);
		assert_int_equal(v.u, 5);
		mp_rd_init(&r, s64, sizeof(s64));
		assert_int_equal(mp_read(&r, &v), 0);
		assert_int_equal(v.type, MP_UINT);
		assert_int_equal(v.u, 256);
	}
}

static void test_read_other_types(void **state)
{
	static const uint32_t lens[] = {0, 1, 31, 32, 255, 256, 65535, 65536};
	char *big = calloc(1, 70000);
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct mp_val v;
	size_t i;

	assert_non_null(big);
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_str(&pk, lens[i]);
		msgpack_pack_str_body(&pk, big, lens[i]);
		read_one(&sb, &v);
		assert_int_equal(v.type, MP_STR);
		assert_int_equal(v.len, lens[i]);
		assert_ptr_equal(v.ptr, (uint8_t *)sb.data + sb.size - lens[i]);
		msgpack_sbuffer_clear(&sb);
		msgpack_pack_bin(&pk, lens[i]);
		msgpack_pack_bin_body(&pk, big, lens[i]);
		read_one(&sb, &v);
		assert_int_equal(v.type, MP_BIN);
		assert_int_equal(v.len, lens[i]);
		msgpack_sbuffer_clear(&sb);
		msgpack_pack_ext(&pk, lens[i], 7);
		msgpack_pack_ext_body(&pk, big, lens[i]);
		read_one(&sb, &v);
		assert_int_equal(v.type, MP_EXT);
		assert_int_equal(v.len, lens[i]);
		msgpack_sbuffer_clear(&sb);
		msgpack_pack_array(&pk, lens[i]);
		read_one(&sb, &v);
		assert_int_equal(v.type, MP_ARRAY);
		assert_int_equal(v.n, lens[i]);
		msgpack_sbuffer_clear(&sb);
		msgpack_pack_map(&pk, lens[i]);
		read_one(&sb, &v);
		assert_int_equal(v.type, MP_MAP);
		assert_int_equal(v.n, lens[i]);
		msgpack_sbuffer_destroy(&sb);
	}
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_nil(&pk);
	read_one(&sb, &v);
	assert_int_equal(v.type, MP_NIL);
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_true(&pk);
	read_one(&sb, &v);
	assert_true(v.type == MP_BOOL && v.b);
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_float(&pk, 1.5f);
	read_one(&sb, &v);
	assert_true(v.type == MP_FLOAT && v.f == 1.5);
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_double(&pk, -2.25e300);
	read_one(&sb, &v);
	assert_true(v.type == MP_FLOAT && v.f == -2.25e300);
	msgpack_sbuffer_destroy(&sb);
	free(big);
}

/* a nested document; every proper prefix must fail, the whole must skip */
static void test_skip_and_truncation(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct mp_rd r;
	size_t n;
	int i;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	pk_str(&pk, "a");
	msgpack_pack_array(&pk, 20);
	for (i = 0; i < 20; i++) {
		msgpack_pack_map(&pk, 1);
		pk_str(&pk, "deep");
		msgpack_pack_array(&pk, 2);
		msgpack_pack_uint64(&pk, UINT64_MAX - (uint64_t)i);
		msgpack_pack_double(&pk, i);
	}
	pk_str(&pk, "b");
	pk_bin(&pk, "xyz", 3);
	pk_str(&pk, "c");
	msgpack_pack_ext(&pk, 4, 1);
	msgpack_pack_ext_body(&pk, "abcd", 4);

	mp_rd_init(&r, (const uint8_t *)sb.data, sb.size);
	assert_int_equal(mp_skip(&r), 0);
	assert_ptr_equal(r.p, (const uint8_t *)sb.data + sb.size);
	for (n = 0; n < sb.size; n++) {
		mp_rd_init(&r, (const uint8_t *)sb.data, n);
		assert_int_equal(mp_skip(&r), -EPROTO);
	}
	msgpack_sbuffer_destroy(&sb);

	/* 0xc1 is never valid; huge counts without elements fail cleanly */
	{
		static const uint8_t c1[] = {0xc1};
		static const uint8_t arr[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 1};
		static const uint8_t str[] = {0xdb, 0xff, 0xff, 0xff, 0xff};

		mp_rd_init(&r, c1, 1);
		assert_int_equal(mp_skip(&r), -EPROTO);
		mp_rd_init(&r, arr, sizeof(arr));
		assert_int_equal(mp_skip(&r), -EPROTO);
		mp_rd_init(&r, str, sizeof(str));
		assert_int_equal(mp_skip(&r), -EPROTO);
	}
}

/* ---- writer vs msgpack-c's unpacker ---- */

static msgpack_object unpack_all(struct buf *b, msgpack_unpacked *u)
{
	size_t off = 0;

	msgpack_unpacked_init(u);
	assert_int_equal(
		msgpack_unpack_next(u, (const char *)b->data, b->len, &off),
		MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(off, b->len);
	return u->data;
}

static void test_writer(void **state)
{
	static const uint64_t us[] = {
		0,     127,	   128,	       255,	   256,	      65535,
		65536, UINT32_MAX, 1ull << 32, 1ull << 63, UINT64_MAX};
	static const size_t ulen[] = {1, 1, 2, 2, 3, 3, 5, 5, 9, 9, 9};
	static const int64_t ns[] = {-1,     -32,    -33,	-128,	   -129,
				     -32768, -32769, INT32_MIN, INT64_MIN, 5};
	static const size_t nlen[] = {1, 1, 2, 2, 3, 3, 5, 5, 9, 1};
	struct buf b = BUF_INIT;
	struct mp_wr w = {&b, 0};
	msgpack_unpacked u;
	msgpack_object o;
	char s300[300];
	size_t i;

	for (i = 0; i < sizeof(us) / sizeof(us[0]); i++) {
		buf_reset(&b);
		mp_put_uint(&w, us[i]);
		assert_int_equal(b.len, ulen[i]); /* smallest form */
		o = unpack_all(&b, &u);
		assert_int_equal(o.type, MSGPACK_OBJECT_POSITIVE_INTEGER);
		assert_true(o.via.u64 == us[i]);
		msgpack_unpacked_destroy(&u);
	}
	/* a handle field >= 2^63 is uint64 (0xcf), never int64 */
	buf_reset(&b);
	mp_put_uint(&w, 0xfedcba9876543210ull);
	assert_int_equal(b.data[0], 0xcf);
	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		buf_reset(&b);
		mp_put_int(&w, ns[i]);
		assert_int_equal(b.len, nlen[i]); /* smallest form */
		o = unpack_all(&b, &u);
		if (ns[i] < 0) {
			assert_int_equal(o.type,
					 MSGPACK_OBJECT_NEGATIVE_INTEGER);
			assert_true(o.via.i64 == ns[i]);
		} else {
			assert_int_equal(o.type,
					 MSGPACK_OBJECT_POSITIVE_INTEGER);
		}
		msgpack_unpacked_destroy(&u);
	}
	memset(s300, 'q', sizeof(s300));
	for (i = 0; i < 300; i += 31) {
		buf_reset(&b);
		mp_put_str(&w, s300, (uint32_t)i);
		/* smallest form: fixstr, str8 (as Python), str16 */
		assert_int_equal(b.len, i + (i < 32 ? 1 : i < 256 ? 2 : 3));
		o = unpack_all(&b, &u);
		assert_int_equal(o.type, MSGPACK_OBJECT_STR);
		assert_int_equal(o.via.str.size, i);
		msgpack_unpacked_destroy(&u);
		buf_reset(&b);
		mp_put_bin(&w, s300, (uint32_t)i);
		assert_int_equal(b.len, i + (i < 256 ? 2 : 3));
		o = unpack_all(&b, &u);
		assert_int_equal(o.type, MSGPACK_OBJECT_BIN);
		msgpack_unpacked_destroy(&u);
	}
	buf_reset(&b);
	mp_put_map(&w, 3);
	mp_put_key(&w, "f");
	mp_put_float(&w, 0.1);
	mp_put_key(&w, "n");
	mp_put_nil(&w);
	mp_put_key(&w, "a");
	mp_put_array(&w, 70000);
	for (i = 0; i < 70000; i++)
		mp_put_bool(&w, i & 1);
	assert_int_equal(w.err, 0);
	o = unpack_all(&b, &u);
	assert_int_equal(o.type, MSGPACK_OBJECT_MAP);
	assert_true(mget(&o, "f")->via.f64 == 0.1);
	assert_int_equal(mget(&o, "n")->type, MSGPACK_OBJECT_NIL);
	assert_int_equal(mget(&o, "a")->via.array.size, 70000);
	msgpack_unpacked_destroy(&u);
	buf_free(&b);
}

/* ---- request decoding ---- */

static int decode(struct req *r, struct mds_req *q, const char **why)
{
	static char wb[128];

	req_end(r);
	return mds_decode((const uint8_t *)r->sb.data, r->sb.size, q, why, wb,
			  sizeof(wb));
}

static void test_decode_every_type(void **state)
{
	struct mds_req q;
	struct mds_iter it;
	struct mds_key k;
	struct mds_reg e;
	struct mds_report rep;
	const char *why;
	struct req r;

	/* REQUEST_ALLOC with a lease */
	req_begin(&r, MDS_REQUEST_ALLOC, 7);
	msgpack_pack_map(&r.pk, 4);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "inst-1");
	pk_str(&r.pk, "size");
	msgpack_pack_uint64(&r.pk, 1ull << 40);
	pk_str(&r.pk, "unknown");
	msgpack_pack_array(&r.pk, 2);
	msgpack_pack_map(&r.pk, 0);
	msgpack_pack_nil(&r.pk);
	pk_str(&r.pk, "lease_id");
	pk_str(&r.pk, "L1");
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_int_equal(q.hdr.msg_type, MDS_REQUEST_ALLOC);
	assert_int_equal(q.hdr.sequence, 7);
	assert_int_equal(q.instance_id.len, 6);
	assert_memory_equal(q.instance_id.ptr, "inst-1", 6);
	assert_true(q.size == 1ull << 40);
	assert_int_equal(q.lease_id.len, 2);
	req_free(&r);

	/* RETURN_ALLOC */
	req_begin(&r, MDS_RETURN_ALLOC, 8);
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "region_id");
	msgpack_pack_uint64(&r.pk, UINT64_MAX);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "i");
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_true(q.region_id == UINT64_MAX);
	req_free(&r);

	/* LIST_ALLOCATIONS: absent, nil and present exclusion */
	req_begin(&r, MDS_LIST_ALLOCATIONS, 9);
	msgpack_pack_map(&r.pk, 0);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_null(q.exclude.ptr);
	req_free(&r);
	req_begin(&r, MDS_LIST_ALLOCATIONS, 9);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "exclude_instance_id");
	msgpack_pack_nil(&r.pk);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_null(q.exclude.ptr);
	req_free(&r);

	/* REGISTER_KV with an int key */
	req_begin(&r, MDS_REGISTER_KV, 10);
	msgpack_pack_map(&r.pk, 4);
	pk_str(&r.pk, "key");
	msgpack_pack_int64(&r.pk, -42);
	pk_str(&r.pk, "region_id");
	msgpack_pack_uint64(&r.pk, 3);
	pk_str(&r.pk, "kv_offset");
	msgpack_pack_uint64(&r.pk, 4096);
	pk_str(&r.pk, "kv_length");
	msgpack_pack_uint64(&r.pk, 512);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_int_equal(q.reg.key.tag, KEY_NINT);
	assert_int_equal(q.reg.region_id, 3);
	assert_int_equal(q.reg.kv_offset, 4096);
	assert_int_equal(q.reg.kv_length, 512);
	req_free(&r);

	/* the single-key messages with str / bin / uint keys */
	{
		static const uint8_t types[] = {MDS_LOOKUP_KV, MDS_EXISTS_KV,
						MDS_DELETE_KV, MDS_PIN_KV,
						MDS_UNPIN_KV};
		size_t i;

		for (i = 0; i < sizeof(types); i++) {
			req_begin(&r, types[i], 11);
			msgpack_pack_map(&r.pk, 1);
			pk_str(&r.pk, "key");
			if (i % 3 == 0)
				pk_str(&r.pk, "k1");
			else if (i % 3 == 1)
				pk_bin(&r.pk, "k1", 2);
			else
				msgpack_pack_uint64(&r.pk, 1ull << 63);
			assert_int_equal(decode(&r, &q, &why), 0);
			assert_int_equal(q.reg.key.tag, i % 3 == 0 ? KEY_STR
							: i % 3 == 1
								? KEY_BIN
								: KEY_UINT);
			req_free(&r);
		}
	}

	/* BATCH_REGISTER_KV */
	req_begin(&r, MDS_BATCH_REGISTER_KV, 12);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "entries");
	msgpack_pack_array(&r.pk, 2);
	for (int i = 0; i < 2; i++) {
		msgpack_pack_map(&r.pk, 4);
		pk_str(&r.pk, "kv_length");
		msgpack_pack_uint64(&r.pk, 100 + (uint64_t)i);
		pk_str(&r.pk, "key");
		pk_str(&r.pk, i ? "b" : "a");
		pk_str(&r.pk, "kv_offset");
		msgpack_pack_uint64(&r.pk, 0);
		pk_str(&r.pk, "region_id");
		msgpack_pack_uint64(&r.pk, 1);
	}
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_int_equal(q.list.n, 2);
	mds_iter_init(&it, &q.list);
	assert_true(mds_next_reg(&it, &e));
	assert_int_equal(e.kv_length, 100);
	assert_true(mds_next_reg(&it, &e));
	assert_int_equal(e.kv_length, 101);
	assert_memory_equal(e.key.ptr, "b", 1);
	assert_false(mds_next_reg(&it, &e));
	req_free(&r);

	/* BATCH_LOOKUP_KV, keys optional */
	req_begin(&r, MDS_BATCH_LOOKUP_KV, 13);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_array(&r.pk, 3);
	pk_str(&r.pk, "x");
	msgpack_pack_int64(&r.pk, -1);
	pk_bin(&r.pk, "", 0);
	assert_int_equal(decode(&r, &q, &why), 0);
	mds_iter_init(&it, &q.list);
	assert_true(mds_next_key(&it, &k) && k.tag == KEY_STR);
	assert_true(mds_next_key(&it, &k) && k.tag == KEY_NINT);
	assert_true(mds_next_key(&it, &k) && k.tag == KEY_BIN && k.len == 0);
	assert_false(mds_next_key(&it, &k));
	req_free(&r);
	req_begin(&r, MDS_BATCH_EXISTS_KV, 13);
	msgpack_pack_map(&r.pk, 0);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_int_equal(q.list.n, 0);
	req_free(&r);

	/* HEARTBEAT: empty, and with lease fields */
	req_begin(&r, MDS_HEARTBEAT, 14);
	msgpack_pack_map(&r.pk, 0);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_false(q.lease_release);
	req_free(&r);
	req_begin(&r, MDS_HEARTBEAT, 14);
	msgpack_pack_map(&r.pk, 3);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "i");
	pk_str(&r.pk, "lease_id");
	pk_str(&r.pk, "L");
	pk_str(&r.pk, "lease_release");
	msgpack_pack_true(&r.pk);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_true(q.lease_release);
	assert_int_equal(q.lease_id.len, 1);
	req_free(&r);

	/* REPORT_STATS with defaults */
	req_begin(&r, MDS_REPORT_STATS, 15);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "entries");
	msgpack_pack_array(&r.pk, 2);
	msgpack_pack_map(&r.pk, 0);
	msgpack_pack_map(&r.pk, 5);
	pk_str(&r.pk, "client_id");
	pk_str(&r.pk, "c");
	pk_str(&r.pk, "op_type");
	pk_str(&r.pk, "store");
	pk_str(&r.pk, "result");
	pk_str(&r.pk, "hit");
	pk_str(&r.pk, "size");
	msgpack_pack_int64(&r.pk, 10);
	pk_str(&r.pk, "latency_us");
	msgpack_pack_uint64(&r.pk, 3);
	assert_int_equal(decode(&r, &q, &why), 0);
	mds_iter_init(&it, &q.list);
	assert_true(mds_next_report(&it, &rep));
	assert_memory_equal(rep.client_id.ptr, "_unknown", 8);
	assert_memory_equal(rep.result.ptr, "none", 4);
	assert_true(mds_next_report(&it, &rep));
	assert_int_equal(rep.size, 10);
	assert_true(rep.latency_us == 3.0);
	req_free(&r);

	/* the admin messages with empty maps; HANDSHAKE ignores its fields */
	{
		static const uint8_t types[] = {MDS_GET_STATS, MDS_GET_USAGE,
						MDS_HANDSHAKE};
		size_t i;

		for (i = 0; i < sizeof(types); i++) {
			req_begin(&r, types[i], 16);
			msgpack_pack_map(&r.pk, 0);
			assert_int_equal(decode(&r, &q, &why), 0);
			req_free(&r);
		}
	}
	req_begin(&r, MDS_HANDSHAKE, 16);
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "client_version");
	pk_str(&r.pk, "not an int, ignored");
	pk_str(&r.pk, "instance_id");
	msgpack_pack_array(&r.pk, 1);
	msgpack_pack_array(&r.pk, 0);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_null(q.instance_id.ptr);
	req_free(&r);
}

/* one malformed request: expect MDS_EINVAL and the header echoed */
static void expect_bad(struct req *r, uint32_t seq, const char *why_part)
{
	struct mds_req q;
	const char *why = NULL;

	assert_int_equal(decode(r, &q, &why), MDS_EINVAL);
	assert_int_equal(q.hdr.sequence, seq);
	assert_non_null(why);
	if (why_part && !strstr(why, why_part))
		fail_msg("reason \"%s\" lacks \"%s\"", why, why_part);
	req_free(r);
}

/*
 * HEARTBEAT's remote path ("remote", "remote_*"): absent from an old
 * client's (nothing said, 0s), each field on its own, nil is absent, and
 * a value of the wrong type refuses the request naming the field
 */
static void test_decode_heartbeat_remote(void **state)
{
	static const uint64_t want[MDS_RT_N] = {3, 3 << 20, 2, 2 << 20,
						UINT64_MAX};
	struct mds_req q;
	const char *why;
	char name[32];
	struct req r;
	int i;

	(void)state;
	req_begin(&r, MDS_HEARTBEAT, 40);
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "i");
	pk_str(&r.pk, "lease_id");
	pk_str(&r.pk, "L");
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_false(q.remote.has_on);
	assert_false(q.remote.on);
	for (i = 0; i < MDS_RT_N; i++)
		assert_true(q.remote.n[i] == 0);
	req_free(&r);

	req_begin(&r, MDS_HEARTBEAT, 41);
	msgpack_pack_map(&r.pk, 2 + MDS_RT_N);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "i");
	pk_str(&r.pk, "remote");
	msgpack_pack_true(&r.pk);
	for (i = 0; i < MDS_RT_N; i++) {
		snprintf(name, sizeof(name), "remote_%s", mds_rt_name(i));
		pk_str(&r.pk, name);
		msgpack_pack_uint64(&r.pk, want[i]);
	}
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_true(q.remote.has_on && q.remote.on);
	assert_memory_equal(q.remote.n, want, sizeof(want));
	req_free(&r);

	/* a counter alone says nothing of "remote"; nil is absent */
	req_begin(&r, MDS_HEARTBEAT, 42);
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "remote");
	msgpack_pack_nil(&r.pk);
	pk_str(&r.pk, "remote_get_bytes");
	msgpack_pack_uint64(&r.pk, 7);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_false(q.remote.has_on);
	assert_false(q.remote.on);
	assert_true(q.remote.n[MDS_RT_GET_BYTES] == 7);
	req_free(&r);
	req_begin(&r, MDS_HEARTBEAT, 43);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "remote");
	msgpack_pack_nil(&r.pk);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_false(q.remote.has_on);
	req_free(&r);
	req_begin(&r, MDS_HEARTBEAT, 43);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "remote");
	msgpack_pack_false(&r.pk);
	assert_int_equal(decode(&r, &q, &why), 0);
	assert_true(q.remote.has_on && !q.remote.on);
	req_free(&r);

	/* wrong types: the field is named */
	req_begin(&r, MDS_HEARTBEAT, 44);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "remote");
	msgpack_pack_uint64(&r.pk, 1);
	expect_bad(&r, 44, "'remote' must be a bool");
	req_begin(&r, MDS_HEARTBEAT, 45);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "remote_put_bytes");
	msgpack_pack_int64(&r.pk, -1);
	expect_bad(&r, 45, "'remote_put_bytes'");
	req_begin(&r, MDS_HEARTBEAT, 46);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "remote_errors");
	pk_str(&r.pk, "12");
	expect_bad(&r, 46, "'remote_errors'");
}

static void test_decode_rejects(void **state)
{
	uint8_t raw[64] = {0};
	struct mds_req q;
	const char *why;
	char wb[128];
	struct req r;

	/* fewer than 16 bytes: nothing to echo */
	assert_int_equal(mds_decode(raw, 15, &q, &why, wb, sizeof(wb)),
			 MDS_EBADHDR);

	/* bad magic, bad version, short payload */
	req_begin(&r, MDS_HEARTBEAT, 21);
	msgpack_pack_map(&r.pk, 0);
	req_end(&r);
	r.sb.data[0] = 0x12;
	assert_int_equal(mds_decode((uint8_t *)r.sb.data, r.sb.size, &q, &why,
				    wb, sizeof(wb)),
			 MDS_EINVAL);
	assert_int_equal(q.hdr.sequence, 21);
	r.sb.data[0] = (char)0xcf;
	r.sb.data[2] = 2;
	assert_int_equal(mds_decode((uint8_t *)r.sb.data, r.sb.size, &q, &why,
				    wb, sizeof(wb)),
			 MDS_EINVAL);
	r.sb.data[2] = 1;
	put_u32be((uint8_t *)r.sb.data + 12, 2);
	assert_int_equal(mds_decode((uint8_t *)r.sb.data, r.sb.size, &q, &why,
				    wb, sizeof(wb)),
			 MDS_EINVAL);
	/* bytes after the announced payload are ignored */
	put_u32be((uint8_t *)r.sb.data + 12, 1);
	msgpack_sbuffer_write(&r.sb, "junk", 4);
	assert_int_equal(mds_decode((uint8_t *)r.sb.data, r.sb.size, &q, &why,
				    wb, sizeof(wb)),
			 0);
	req_free(&r);

	/* unknown types and SHUTDOWN */
	req_begin(&r, 0x02, 22);
	msgpack_pack_map(&r.pk, 0);
	expect_bad(&r, 22, "Unknown message type: 2");
	req_begin(&r, MDS_SHUTDOWN, 23);
	msgpack_pack_map(&r.pk, 0);
	expect_bad(&r, 23, "Unknown message type: 255");

	/* payload not a map, trailing data, non-str map key */
	req_begin(&r, MDS_LOOKUP_KV, 24);
	msgpack_pack_array(&r.pk, 0);
	expect_bad(&r, 24, "not a MessagePack map");
	req_begin(&r, MDS_HEARTBEAT, 25);
	msgpack_pack_map(&r.pk, 0);
	msgpack_pack_nil(&r.pk);
	expect_bad(&r, 25, "trailing");
	req_begin(&r, MDS_HEARTBEAT, 26);
	msgpack_pack_map(&r.pk, 1);
	msgpack_pack_uint64(&r.pk, 1);
	msgpack_pack_nil(&r.pk);
	expect_bad(&r, 26, "map keys");

	/* missing required keys */
	req_begin(&r, MDS_LOOKUP_KV, 27);
	msgpack_pack_map(&r.pk, 0);
	expect_bad(&r, 27, "missing 'key'");
	req_begin(&r, MDS_REQUEST_ALLOC, 28);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "i");
	expect_bad(&r, 28, "missing 'size'");

	/* wrong types */
	req_begin(&r, MDS_REQUEST_ALLOC, 29);
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "instance_id");
	pk_str(&r.pk, "i");
	pk_str(&r.pk, "size");
	msgpack_pack_int64(&r.pk, -5);
	expect_bad(&r, 29, "'size'");
	req_begin(&r, MDS_REQUEST_ALLOC, 30);
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "instance_id");
	msgpack_pack_uint64(&r.pk, 1);
	pk_str(&r.pk, "size");
	msgpack_pack_uint64(&r.pk, 1);
	expect_bad(&r, 30, "'instance_id'");
	req_begin(&r, MDS_LOOKUP_KV, 31);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "key");
	msgpack_pack_double(&r.pk, 1.0);
	expect_bad(&r, 31, "'key'");
	req_begin(&r, MDS_LOOKUP_KV, 32);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "key");
	msgpack_pack_nil(&r.pk);
	expect_bad(&r, 32, "'key'");
	req_begin(&r, MDS_HEARTBEAT, 33);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "lease_release");
	msgpack_pack_uint64(&r.pk, 1);
	expect_bad(&r, 33, "bool");

	/* a bad element late in a batch fails the whole batch */
	req_begin(&r, MDS_BATCH_REGISTER_KV, 34);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "entries");
	msgpack_pack_array(&r.pk, 100);
	for (int i = 0; i < 100; i++) {
		msgpack_pack_map(&r.pk, i == 99 ? 3 : 4);
		pk_str(&r.pk, "key");
		pk_str(&r.pk, "k");
		pk_str(&r.pk, "region_id");
		msgpack_pack_uint64(&r.pk, 1);
		pk_str(&r.pk, "kv_offset");
		msgpack_pack_uint64(&r.pk, 1);
		if (i != 99) {
			pk_str(&r.pk, "kv_length");
			msgpack_pack_uint64(&r.pk, 1);
		}
	}
	expect_bad(&r, 34, "kv_length");
	req_begin(&r, MDS_BATCH_LOOKUP_KV, 35);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_array(&r.pk, 2);
	pk_str(&r.pk, "ok");
	msgpack_pack_true(&r.pk);
	expect_bad(&r, 35, "'keys'");
	req_begin(&r, MDS_BATCH_LOOKUP_KV, 36);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_map(&r.pk, 0);
	expect_bad(&r, 36, "list");

	/* absurd batch sizes are refused from the header alone */
	req_begin(&r, MDS_BATCH_EXISTS_KV, 37);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_array(&r.pk, MDS_MAX_BATCH + 1);
	expect_bad(&r, 37, "too many");
	/* a count larger than the data is a truncated list */
	req_begin(&r, MDS_BATCH_EXISTS_KV, 38);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "keys");
	msgpack_pack_array(&r.pk, 1000);
	pk_str(&r.pk, "only one");
	expect_bad(&r, 38, "truncated");
	/* truncated map */
	req_begin(&r, MDS_LOOKUP_KV, 39);
	msgpack_pack_map(&r.pk, 2);
	pk_str(&r.pk, "key");
	pk_str(&r.pk, "k");
	expect_bad(&r, 39, "truncated");
}

static void test_decode_every_truncation(void **state)
{
	struct req r;
	struct mds_req q;
	const char *why;
	char wb[128];
	size_t n;

	req_begin(&r, MDS_BATCH_REGISTER_KV, 40);
	msgpack_pack_map(&r.pk, 1);
	pk_str(&r.pk, "entries");
	msgpack_pack_array(&r.pk, 3);
	for (int i = 0; i < 3; i++) {
		msgpack_pack_map(&r.pk, 4);
		pk_str(&r.pk, "key");
		pk_str(&r.pk, "some-key-string");
		pk_str(&r.pk, "region_id");
		msgpack_pack_uint64(&r.pk, UINT64_MAX);
		pk_str(&r.pk, "kv_offset");
		msgpack_pack_uint64(&r.pk, 1);
		pk_str(&r.pk, "kv_length");
		msgpack_pack_uint64(&r.pk, 1);
	}
	req_end(&r);
	assert_int_equal(mds_decode((uint8_t *)r.sb.data, r.sb.size, &q, &why,
				    wb, sizeof(wb)),
			 0);
	/*
	 * every shorter payload is refused, except the empty one, which
	 * reads as an empty map (a batch without entries)
	 */
	for (n = 0; n + MDS_HDR_SIZE < r.sb.size; n++) {
		int rc;

		put_u32be((uint8_t *)r.sb.data + 12, (uint32_t)n);
		rc = mds_decode((uint8_t *)r.sb.data, MDS_HDR_SIZE + n, &q,
				&why, wb, sizeof(wb));
		assert_int_equal(rc, n == 0 ? 0 : MDS_EINVAL);
	}
	req_free(&r);
}

static void test_error_reply(void **state)
{
	struct buf b = BUF_INIT;
	struct mp_wr w = {&b, 0};
	struct mds_hdr h = {MDS_MAGIC, 1, MDS_LOOKUP_KV, 0x05, 77, 0};
	struct reply rp;

	mds_error_reply(&w, &h, "boom");
	assert_int_equal(reply_parse(&b, &rp), 0);
	assert_int_equal(rp.h.msg_type, MDS_LOOKUP_KV | 0x80);
	assert_int_equal(rp.h.flags, 0x05);
	assert_int_equal(rp.h.sequence, 77);
	assert_int_equal(mget(rp.root, "error")->type, MSGPACK_OBJECT_STR);
	reply_free(&rp);
	buf_reset(&b);
	mds_error_reply(&w, NULL, "no header");
	assert_int_equal(reply_parse(&b, &rp), 0);
	assert_int_equal(rp.h.msg_type, 0x80);
	assert_int_equal(rp.h.sequence, 0);
	reply_free(&rp);
	buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_ints),
		cmocka_unit_test(test_read_other_types),
		cmocka_unit_test(test_skip_and_truncation),
		cmocka_unit_test(test_writer),
		cmocka_unit_test(test_decode_every_type),
		cmocka_unit_test(test_decode_rejects),
		cmocka_unit_test(test_decode_heartbeat_remote),
		cmocka_unit_test(test_decode_every_truncation),
		cmocka_unit_test(test_error_reply),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
