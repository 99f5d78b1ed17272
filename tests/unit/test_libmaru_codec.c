/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libmaru_codec.c - libmaru's metadata payload codec (codec.c) and
 * configuration (config.c, and MARU_LOG in log.c)
 *
 * Requests are checked byte for byte against upstream's worked example and
 * against msgpack-c's own unpacker (keys keep their kind, u64 >= 2^63 goes
 * out as 0xCF).  Replies are built with msgpack-c's packer and decoded with
 * our bounded reader, then malformed variants must give -EPROTO.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <msgpack.h>

#include "mds_proto.h"
#include "private.h"

static const uint8_t *payload(const struct maru__msg *m, size_t *len)
{
	*len = m->len - MDS_HDR_SIZE;
	return m->data + MDS_HDR_SIZE;
}

/* unpack a request payload with msgpack-c; the caller destroys @u */
static msgpack_object unpack(const struct maru__msg *m, msgpack_unpacked *u)
{
	size_t len, off = 0;
	const uint8_t *p = payload(m, &len);

	msgpack_unpacked_init(u);
	assert_int_equal(msgpack_unpack_next(u, (const char *)p, len, &off),
			 MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(off, len);
	return u->data;
}

static msgpack_object *map_get(msgpack_object *o, const char *k)
{
	uint32_t i;

	assert_int_equal(o->type, MSGPACK_OBJECT_MAP);
	for (i = 0; i < o->via.map.size; i++) {
		msgpack_object *key = &o->via.map.ptr[i].key;

		if (key->type == MSGPACK_OBJECT_STR &&
		    key->via.str.size == strlen(k) &&
		    !memcmp(key->via.str.ptr, k, strlen(k)))
			return &o->via.map.ptr[i].val;
	}
	return NULL;
}

static void test_enc_spec_example(void **state)
{
	static const uint8_t want[] = {0x81, 0xA3, 'k', 'e',
				       'y',  0xA2, 'k', '1'};
	struct maru_key k = maru_key_str("k1", 2);
	struct maru__msg m;
	const uint8_t *p;
	size_t len;

	maru__msg_init(&m, 0x12);
	assert_int_equal(maru__enc_key(&m, &k), 0);
	p = payload(&m, &len);
	assert_int_equal(len, sizeof(want));
	assert_memory_equal(p, want, sizeof(want));
	maru__msg_release(&m);

	maru__msg_init(&m, 0xF1);
	assert_int_equal(maru__enc_empty(&m), 0);
	p = payload(&m, &len);
	assert_int_equal(len, 1);
	assert_int_equal(p[0], 0x80);
	maru__msg_release(&m);
}

static void test_enc_key_kinds(void **state)
{
	struct maru_key keys[5] = {
		maru_key_int(42),
		maru_key_int(-7),
		maru_key_uint(0xF000000000000001ull),
		maru_key_str("42", 2),
		{MARU_KEY_BIN, 3, "a\0b", 0, 0},
	};
	msgpack_object o, *a;
	msgpack_unpacked u;
	struct maru__msg m;
	const uint8_t *p;
	size_t len;

	maru__msg_init(&m, MDS_BATCH_LOOKUP_KV);
	assert_int_equal(maru__enc_batch_keys(&m, keys, 5), 0);
	o = unpack(&m, &u);
	a = map_get(&o, "keys");
	assert_non_null(a);
	assert_int_equal(a->via.array.size, 5);
	assert_int_equal(a->via.array.ptr[0].type,
			 MSGPACK_OBJECT_POSITIVE_INTEGER);
	assert_int_equal(a->via.array.ptr[0].via.u64, 42);
	assert_int_equal(a->via.array.ptr[1].type,
			 MSGPACK_OBJECT_NEGATIVE_INTEGER);
	assert_int_equal(a->via.array.ptr[1].via.i64, -7);
	assert_int_equal(a->via.array.ptr[2].via.u64, 0xF000000000000001ull);
	assert_int_equal(a->via.array.ptr[3].type, MSGPACK_OBJECT_STR);
	assert_int_equal(a->via.array.ptr[4].type, MSGPACK_OBJECT_BIN);
	assert_int_equal(a->via.array.ptr[4].via.bin.size, 3);
	msgpack_unpacked_destroy(&u);
	/* the big key goes out as uint64 (0xCF) */
	p = payload(&m, &len);
	assert_non_null(memchr(p, 0xCF, len));
	maru__msg_release(&m);

	/* an unknown key kind is refused */
	keys[0].type = 99;
	maru__msg_init(&m, MDS_LOOKUP_KV);
	assert_int_equal(maru__enc_key(&m, &keys[0]), -EINVAL);
	maru__msg_release(&m);
}

static void test_enc_requests(void **state)
{
	struct maru_key k = maru_key_str("kk", 2);
	struct maru__reg regs[40];
	msgpack_object o, *v;
	msgpack_unpacked u;
	struct maru__msg m;
	struct maru__stat_entry se = {"store", "none", 5, 1.5};
	int i;

	maru__msg_init(&m, MDS_REQUEST_ALLOC);
	assert_int_equal(
		maru__enc_request_alloc(&m, "inst", 1ull << 40, "L1", 0, 0), 0);
	o = unpack(&m, &u);
	assert_int_equal(map_get(&o, "size")->via.u64, 1ull << 40);
	v = map_get(&o, "lease_id");
	assert_non_null(v);
	assert_int_equal(v->via.str.size, 2);
	msgpack_unpacked_destroy(&u);
	maru__msg_release(&m);

	maru__msg_init(&m, MDS_REQUEST_ALLOC);
	assert_int_equal(maru__enc_request_alloc(&m, "inst", 4096, NULL, 7, 0),
			 0);
	o = unpack(&m, &u);
	assert_null(map_get(&o, "lease_id"));
	assert_int_equal(map_get(&o, "evicted_ack")->via.u64, 7);
	msgpack_unpacked_destroy(&u);
	maru__msg_release(&m);

	maru__msg_init(&m, MDS_LIST_ALLOCATIONS);
	assert_int_equal(maru__enc_list_allocations(&m, NULL), 0);
	o = unpack(&m, &u);
	assert_int_equal(o.via.map.size, 0);
	msgpack_unpacked_destroy(&u);
	maru__msg_release(&m);

	maru__msg_init(&m, MDS_HEARTBEAT);
	assert_int_equal(maru__enc_heartbeat(&m, "i", "L", true, 0, NULL), 0);
	o = unpack(&m, &u);
	assert_true(map_get(&o, "lease_release")->via.boolean);
	assert_true(map_get(&o, "evict_notices")->via.boolean);
	assert_null(map_get(&o, "evicted_ack"));
	assert_null(map_get(&o, "remote")); /* no agent: nothing said */
	msgpack_unpacked_destroy(&u);
	maru__msg_release(&m);

	/* with an agent: "remote" and what every counter grew by, 0s too
	 * (the map's count checked by unpack: the whole payload read) */
	{
		struct maru__hb_report hr = {0};

		hr.remote = hr.remote_on = true;
		hr.rt[MDS_RT_PUTS] = 3;
		hr.rt[MDS_RT_PUT_BYTES] = 3 << 20;
		hr.rt[MDS_RT_GETS] = 2;
		hr.rt[MDS_RT_GET_BYTES] = 2 << 20;
		hr.page_size = 4096;
		maru__msg_init(&m, MDS_HEARTBEAT);
		assert_int_equal(
			maru__enc_heartbeat(&m, "i", "L", false, 0, &hr), 0);
		o = unpack(&m, &u);
		assert_true(map_get(&o, "remote")->via.boolean);
		assert_int_equal(map_get(&o, "remote_puts")->via.u64, 3);
		assert_int_equal(map_get(&o, "remote_put_bytes")->via.u64,
				 3 << 20);
		assert_int_equal(map_get(&o, "remote_gets")->via.u64, 2);
		assert_int_equal(map_get(&o, "remote_get_bytes")->via.u64,
				 2 << 20);
		assert_int_equal(map_get(&o, "remote_errors")->via.u64, 0);
		assert_null(map_get(&o, "remote_connects"));
		assert_int_equal(map_get(&o, "page_size")->via.u64, 4096);
		msgpack_unpacked_destroy(&u);
		maru__msg_release(&m);
	}

	/* a batch big enough to move the message to the heap */
	for (i = 0; i < 40; i++)
		regs[i] = (struct maru__reg){&k, 1ull << 63, (uint64_t)i << 20,
					     4096};
	maru__msg_init(&m, MDS_BATCH_REGISTER_KV);
	assert_int_equal(maru__enc_batch_register(&m, regs, 40), 0);
	assert_ptr_not_equal(m.data, m.small);
	o = unpack(&m, &u);
	v = map_get(&o, "entries");
	assert_int_equal(v->via.array.size, 40);
	assert_int_equal(map_get(&v->via.array.ptr[39], "kv_offset")->via.u64,
			 39ull << 20);
	assert_int_equal(map_get(&v->via.array.ptr[0], "region_id")->via.u64,
			 1ull << 63);
	msgpack_unpacked_destroy(&u);
	maru__msg_release(&m);

	maru__msg_init(&m, MDS_REPORT_STATS);
	assert_int_equal(maru__enc_report_stats(&m, "c", &se, 1), 0);
	o = unpack(&m, &u);
	v = &map_get(&o, "entries")->via.array.ptr[0];
	assert_true(map_get(v, "latency_us")->via.f64 == 1.5);
	msgpack_unpacked_destroy(&u);
	maru__msg_release(&m);
}

/* ---- replies ---------------------------------------------------------- */

static int sbuf_pack_handle(msgpack_packer *pk, uint64_t rid, uint64_t tok)
{
	msgpack_pack_map(pk, 4);
	msgpack_pack_str_with_body(pk, "region_id", 9);
	msgpack_pack_uint64(pk, rid);
	msgpack_pack_str_with_body(pk, "offset", 6);
	msgpack_pack_uint64(pk, 2 << 20);
	msgpack_pack_str_with_body(pk, "length", 6);
	msgpack_pack_uint64(pk, 64 << 20);
	msgpack_pack_str_with_body(pk, "auth_token", 10);
	return msgpack_pack_uint64(pk, tok);
}

static void test_dec_lookup(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct maru__reply r;
	size_t cut;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 5);
	msgpack_pack_str_with_body(&pk, "found", 5);
	msgpack_pack_true(&pk);
	msgpack_pack_str_with_body(&pk, "handle", 6);
	sbuf_pack_handle(&pk, 3, 0xFEDCBA9876543210ull);
	msgpack_pack_str_with_body(&pk, "kv_offset", 9);
	msgpack_pack_uint32(&pk, 1 << 20);
	msgpack_pack_str_with_body(&pk, "kv_length", 9);
	msgpack_pack_uint8(&pk, 77);
	msgpack_pack_str_with_body(&pk, "extra", 5); /* ignored */
	msgpack_pack_array(&pk, 2);
	msgpack_pack_nil(&pk);
	msgpack_pack_double(&pk, 1.0);

	memset(&r, 0, sizeof(r));
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 0);
	assert_true(r.lookup.found);
	assert_true(r.lookup.has_handle);
	assert_int_equal(r.lookup.handle.region_id, 3);
	assert_int_equal(r.lookup.handle.auth_token, 0xFEDCBA9876543210ull);
	assert_int_equal(r.lookup.handle.length, 64 << 20);
	assert_int_equal(r.lookup.kv_offset, 1 << 20);
	assert_int_equal(r.lookup.kv_length, 77);
	assert_false(r.error);
	/* every truncation is refused, never read past */
	for (cut = 0; cut < sb.size; cut++) {
		uint8_t *copy = malloc(cut ? cut : 1);

		memcpy(copy, sb.data, cut);
		assert_int_equal(maru__decode_reply(copy, cut, &r), -EPROTO);
		free(copy);
	}
	msgpack_sbuffer_destroy(&sb);
}

static void test_dec_handle_rules(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct maru__reply r;

	/* a handle missing a key is a protocol error */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "handle", 6);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "region_id", 9);
	msgpack_pack_uint8(&pk, 1);
	memset(&r, 0, sizeof(r));
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 -EPROTO);
	msgpack_sbuffer_clear(&sb);
	/* a negative field too */
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "handle", 6);
	msgpack_pack_map(&pk, 4);
	msgpack_pack_str_with_body(&pk, "region_id", 9);
	msgpack_pack_int8(&pk, -1);
	msgpack_pack_str_with_body(&pk, "offset", 6);
	msgpack_pack_uint8(&pk, 1);
	msgpack_pack_str_with_body(&pk, "length", 6);
	msgpack_pack_uint8(&pk, 1);
	msgpack_pack_str_with_body(&pk, "auth_token", 10);
	msgpack_pack_uint8(&pk, 1);
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 -EPROTO);
	msgpack_sbuffer_clear(&sb);
	/* nil handle: no handle, not an error */
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "success", 7);
	msgpack_pack_false(&pk);
	msgpack_pack_str_with_body(&pk, "handle", 6);
	msgpack_pack_nil(&pk);
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 0);
	assert_false(r.lookup.has_handle);
	assert_false(r.success);
	assert_false(r.held);
	msgpack_sbuffer_clear(&sb);
	/* a refusal for an instance another client holds says so in a key,
	 * not only in its text (msgpack-c's encoding of what the server
	 * sends) */
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "error", 5);
	msgpack_pack_str_with_body(&pk, "no", 2);
	msgpack_pack_str_with_body(&pk, "held", 4);
	msgpack_pack_true(&pk);
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 0);
	assert_true(r.error && r.held);
	msgpack_sbuffer_clear(&sb);
	/* the words alone are not the flag */
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "error", 5);
	msgpack_pack_str_with_body(&pk, "held by another", 15);
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 0);
	assert_true(r.error);
	assert_false(r.held);
	msgpack_sbuffer_destroy(&sb);
}

static int count_handles(void *arg, const struct maru_region_handle *h)
{
	uint64_t *sum = arg;

	*sum += h->region_id;
	return 0;
}

static void test_dec_arrays(void **state)
{
	struct maru__lookup ents[2];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct maru__reply r;
	uint64_t sum = 0;
	bool res[2];

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 5);
	msgpack_pack_str_with_body(&pk, "results", 7);
	msgpack_pack_array(&pk, 3); /* one more than the sink holds */
	msgpack_pack_true(&pk);
	msgpack_pack_false(&pk);
	msgpack_pack_true(&pk);
	msgpack_pack_str_with_body(&pk, "entries", 7);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "found", 5);
	msgpack_pack_false(&pk);
	msgpack_pack_map(&pk, 4);
	msgpack_pack_str_with_body(&pk, "found", 5);
	msgpack_pack_true(&pk);
	msgpack_pack_str_with_body(&pk, "handle", 6);
	sbuf_pack_handle(&pk, 9, 1);
	msgpack_pack_str_with_body(&pk, "kv_offset", 9);
	msgpack_pack_uint8(&pk, 0);
	msgpack_pack_str_with_body(&pk, "kv_length", 9);
	msgpack_pack_uint8(&pk, 10);
	msgpack_pack_str_with_body(&pk, "allocations", 11);
	msgpack_pack_array(&pk, 2);
	sbuf_pack_handle(&pk, 5, 1);
	sbuf_pack_handle(&pk, 6, 1);
	msgpack_pack_str_with_body(&pk, "lease_ttl", 9);
	msgpack_pack_double(&pk, 2.5);
	msgpack_pack_str_with_body(&pk, "rm_address", 10);
	msgpack_pack_str_with_body(&pk, "10.0.0.1:9850", 13);

	memset(&r, 0, sizeof(r));
	r.results = res;
	r.nresults = 2;
	r.entries = ents;
	r.nentries = 2;
	r.on_handle = count_handles;
	r.arg = &sum;
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 0);
	assert_int_equal(r.results_len, 3);
	assert_true(res[0]);
	assert_false(res[1]);
	assert_int_equal(r.entries_len, 2);
	assert_false(ents[0].found);
	assert_true(ents[1].found);
	assert_int_equal(ents[1].handle.region_id, 9);
	assert_int_equal(ents[1].kv_length, 10);
	assert_int_equal(r.handles_len, 2);
	assert_int_equal(sum, 11);
	assert_true(r.lease_ttl == 2.5);
	assert_int_equal(r.rm_address_len, 13);
	assert_memory_equal(r.rm_address, "10.0.0.1:9850", 13);
	msgpack_sbuffer_destroy(&sb);
}

/* a reply repeating "allocations": each list goes to on_handle, and
 * handles_len counts them all (found by fuzz_libmaru_codec) */
static void test_dec_repeated_allocations(void **state)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct maru__reply r;
	uint64_t sum = 0;
	int i;

	(void)state;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	for (i = 0; i < 2; i++) {
		msgpack_pack_str_with_body(&pk, "allocations", 11);
		msgpack_pack_array(&pk, 2 - i);
		sbuf_pack_handle(&pk, 5, 1);
		if (i == 0)
			sbuf_pack_handle(&pk, 6, 1);
	}
	memset(&r, 0, sizeof(r));
	r.on_handle = count_handles;
	r.arg = &sum;
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 0);
	assert_int_equal(sum, 16);
	assert_int_equal(r.handles_len, 3);
	msgpack_sbuffer_destroy(&sb);
}

static void test_dec_error_and_defaults(void **state)
{
	/* {"error": "internal server error"} */
	static const uint8_t err[] = {0x81, 0xA5, 'e',	'r', 'r',
				      'o',  'r',  0xA1, 'x'};
	/* {} */
	static const uint8_t empty[] = {0x80};
	struct maru__reply r;

	memset(&r, 0, sizeof(r));
	assert_int_equal(maru__decode_reply(err, sizeof(err), &r), 0);
	assert_true(r.error);
	assert_int_equal(maru__decode_reply(empty, sizeof(empty), &r), 0);
	assert_false(r.error);
	assert_false(r.success);
	assert_false(r.lookup.found);
	assert_true(r.lease_ttl == 0);
	assert_null(r.server_id);
	assert_int_equal(r.server_id_len, 0);
}

/* HEARTBEAT/HANDSHAKE "server_id" (docs/protocol.md §2 additions) */
static void test_dec_server_id(void **state)
{
	/* {"lease_expired": false, "server_id": "00ff00ff00ff00ff"} */
	static const uint8_t hb[] = {
		0x82, 0xAD, 'l', 'e', 'a',  's',  'e', '_', 'e', 'x', 'p',
		'i',  'r',  'e', 'd', 0xC2, 0xA9, 's', 'e', 'r', 'v', 'e',
		'r',  '_',  'i', 'd', 0xB0, '0',  '0', 'f', 'f', '0', '0',
		'f',  'f',  '0', '0', 'f',  'f',  '0', '0', 'f', 'f'};
	/* {"server_id": nil} reads as absent, {"server_id": 1} is refused */
	static const uint8_t nil[] = {0x81, 0xA9, 's', 'e', 'r', 'v',
				      'e',  'r',  '_', 'i', 'd', 0xC0};
	static const uint8_t bad[] = {0x81, 0xA9, 's', 'e', 'r', 'v',
				      'e',  'r',  '_', 'i', 'd', 0x01};
	struct maru__reply r;

	memset(&r, 0, sizeof(r));
	assert_int_equal(maru__decode_reply(hb, sizeof(hb), &r), 0);
	assert_false(r.lease_expired);
	assert_int_equal(r.server_id_len, 16);
	assert_memory_equal(r.server_id, "00ff00ff00ff00ff", 16);
	assert_int_equal(maru__decode_reply(nil, sizeof(nil), &r), 0);
	assert_null(r.server_id);
	assert_int_equal(maru__decode_reply(bad, sizeof(bad), &r), -EPROTO);
}

/* pack a str key with msgpack-c */
static void pk_key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str(pk, strlen(k));
	msgpack_pack_str_body(pk, k, strlen(k));
}

/* the eviction fields, packed by msgpack-c, the reference peer */
static void test_dec_eviction_fields(void **state)
{
	static const uint64_t ev[] = {7, 65536, 41, 7, 1ull << 40, 1ull << 63};
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct maru__reply r;
	const uint8_t *p;
	uint64_t v;
	int i;

	(void)state;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 6);
	pk_key(&pk, "evicted");
	msgpack_pack_array(&pk, 6);
	for (i = 0; i < 6; i++)
		msgpack_pack_uint64(&pk, ev[i]);
	pk_key(&pk, "evicted_seq");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, 3);
	msgpack_pack_uint64(&pk, 4);
	pk_key(&pk, "release");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_uint64(&pk, 9);
	pk_key(&pk, "renew_ms");
	msgpack_pack_uint64(&pk, 1); /* clamped to 10 */
	pk_key(&pk, "kv_gen");
	msgpack_pack_uint64(&pk, 77);
	pk_key(&pk, "kv_gen_first");
	msgpack_pack_uint64(&pk, 5);
	memset(&r, 0, sizeof(r));
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 0);
	assert_int_equal(r.evicted.n, 6);
	p = r.evicted.p;
	for (i = 0; i < 6; i++) {
		assert_int_equal(maru__uints_next(&p, r.evicted.end, &v), 0);
		assert_true(v == ev[i]);
	}
	assert_ptr_equal(p, r.evicted.end);
	assert_int_equal(r.evicted_first, 3);
	assert_int_equal(r.evicted_last, 4);
	assert_int_equal(r.release.n, 1);
	assert_int_equal(r.renew_ms, 10);
	assert_int_equal(r.kv_gen, 77);
	assert_int_equal(r.lookup.kv_gen, 77);
	assert_int_equal(r.kv_gen_first, 5);
	msgpack_sbuffer_destroy(&sb);

	/* refused: a count not a multiple of 3, a negative, an empty or
	 * backwards evicted_seq */
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	pk_key(&pk, "evicted");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, 1);
	msgpack_pack_uint64(&pk, 2);
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 -EPROTO);
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_map(&pk, 1);
	pk_key(&pk, "release");
	msgpack_pack_array(&pk, 1);
	msgpack_pack_int64(&pk, -1);
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 -EPROTO);
	msgpack_sbuffer_clear(&sb);
	msgpack_pack_map(&pk, 1);
	pk_key(&pk, "evicted_seq");
	msgpack_pack_array(&pk, 2);
	msgpack_pack_uint64(&pk, 5);
	msgpack_pack_uint64(&pk, 4);
	assert_int_equal(maru__decode_reply((uint8_t *)sb.data, sb.size, &r),
			 -EPROTO);
	msgpack_sbuffer_destroy(&sb);
}

static void test_dec_malformed(void **state)
{
	/* not a map */
	static const uint8_t arr[] = {0x90};
	/* reserved byte 0xc1 */
	static const uint8_t c1[] = {0x81, 0xA1, 'x', 0xC1};
	/* an array claiming 2^32-1 elements with 2 bytes left */
	static const uint8_t huge[] = {0x81, 0xA7, 'r',	 'e',  's',  'u',
				       'l',  't',  's',	 0xDD, 0xFF, 0xFF,
				       0xFF, 0xFF, 0xC3, 0xC3};
	/* "success": a string instead of a bool */
	static const uint8_t badtype[] = {0x81, 0xA7, 's', 'u',	 'c', 'c',
					  'e',	's',  's', 0xA1, 'y'};
	uint8_t deep[200];
	struct maru__reply r;
	size_t i;

	memset(&r, 0, sizeof(r));
	assert_int_equal(maru__decode_reply(arr, sizeof(arr), &r), -EPROTO);
	assert_int_equal(maru__decode_reply(c1, sizeof(c1), &r), -EPROTO);
	assert_int_equal(maru__decode_reply(huge, sizeof(huge), &r), -EPROTO);
	assert_int_equal(maru__decode_reply(badtype, sizeof(badtype), &r),
			 -EPROTO);
	assert_int_equal(maru__decode_reply(arr, 0, &r), -EPROTO);
	/* {"x": [[[[...]]]]}: an unknown key, however deep, is skipped
	 * without recursion (msgpk.c's pending counter) */
	deep[0] = 0x81;
	deep[1] = 0xA1;
	deep[2] = 'x';
	for (i = 3; i < sizeof(deep); i++)
		deep[i] = 0x91;
	deep[sizeof(deep) - 1] = 0xC0;
	assert_int_equal(maru__decode_reply(deep, sizeof(deep), &r), 0);
	/* ... and one cut short is refused */
	assert_int_equal(maru__decode_reply(deep, sizeof(deep) - 1, &r),
			 -EPROTO);
}

static void test_dec_stats(void **state)
{
	struct maru_server_stats s;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	bool error;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	msgpack_pack_str_with_body(&pk, "kv_manager", 10);
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "total_entries", 13);
	msgpack_pack_uint8(&pk, 3);
	msgpack_pack_str_with_body(&pk, "total_size", 10);
	msgpack_pack_uint64(&pk, 1ull << 33);
	msgpack_pack_str_with_body(&pk, "allocation_manager", 18);
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "num_allocations", 15);
	msgpack_pack_uint8(&pk, 2);
	msgpack_pack_str_with_body(&pk, "active_clients", 14);
	msgpack_pack_uint8(&pk, 1);
	msgpack_pack_str_with_body(&pk, "stats_manager", 13);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, "clients", 7);
	msgpack_pack_map(&pk, 0);
	msgpack_pack_str_with_body(&pk, "cxl_pool", 8);
	msgpack_pack_map(&pk, 2);
	msgpack_pack_str_with_body(&pk, "total_size", 10);
	msgpack_pack_uint32(&pk, 1000);
	msgpack_pack_str_with_body(&pk, "free_size", 9);
	msgpack_pack_uint32(&pk, 600);
	assert_int_equal(
		maru__decode_stats((uint8_t *)sb.data, sb.size, &s, &error), 0);
	assert_false(error);
	assert_int_equal(s.total_entries, 3);
	assert_int_equal(s.total_size, 1ull << 33);
	assert_int_equal(s.num_allocations, 2);
	assert_int_equal(s.total_allocated, 0);
	assert_int_equal(s.active_clients, 1);
	assert_int_equal(s.pool_total_size, 1000);
	assert_int_equal(s.pool_free_size, 600);
	assert_int_equal(
		maru__decode_stats((uint8_t *)sb.data, sb.size - 1, &s, &error),
		-EPROTO);
	msgpack_sbuffer_destroy(&sb);
}

/* the public device functions on a file standing in for a device */
static void test_devhdr(void **state)
{
	uint8_t u[16], raw[32];
	char path[] = "/tmp/maru-devhdr-XXXXXX", uuid[37];
	uint32_t ver = 0;
	int fd, i;

	(void)state;
	for (i = 0; i < 16; i++)
		u[i] = (uint8_t)(0x10 * (i % 16) + i);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	assert_int_equal(maru_device_header_read(path, uuid, &ver), -ENOENT);
	assert_int_equal(maru_device_header_write(path, u), 0);
	assert_int_equal(maru_device_header_read(path, uuid, &ver), 0);
	assert_int_equal(ver, 1);
	assert_string_equal(uuid, "00112233-4455-6677-8899-aabbccddeeff");
	assert_int_equal(pread(fd, raw, sizeof(raw), 0), 32);
	assert_memory_equal(raw, "MARUDEV\0\1\0\0\0", 12);
	assert_int_equal(maru_device_header_write(path, NULL), 0);
	assert_int_equal(maru_device_header_read(path, uuid, &ver), -ENOENT);
	/* shorter than a header */
	assert_int_equal(ftruncate(fd, 31), 0);
	assert_int_equal(maru_device_header_read(path, uuid, &ver), -ENOENT);
	assert_int_equal(maru_device_header_write(path, u), -ENOSPC);
	close(fd);
	unlink(path);
	assert_int_equal(maru_device_header_read(path, uuid, &ver), -ENOENT);
}

/* ---- config ---------------------------------------------------------------
 */

static void test_config(void **state)
{
	struct maru_config *c;
	char why[200];

	assert_int_equal(maru_config_new(&c), 0);
	assert_string_equal(maru_config_get_server_url(c),
			    "tcp://localhost:5555");
	assert_null(maru_config_get_instance_id(c));
	/* instance ids are text: the server refuses others */
	assert_int_equal(maru_config_set_instance_id(c, "bad\xff"), -EINVAL);
	assert_null(maru_config_get_instance_id(c));
	assert_int_equal(maru_config_get_pool_size(c), 100 << 20);
	assert_int_equal(maru_config_get_chunk_size(c), 1 << 20);
	assert_int_equal(maru_config_get_timeout_ms(c), 2000);
	assert_true(maru_config_get_use_async_rpc(c));
	assert_int_equal(maru_config_get_max_inflight(c), 64);
	assert_true(maru_config_get_eager_map(c));
	assert_true(maru_config_get_auto_expand(c));
	assert_int_equal(maru_config_get_expand_size(c), 0);
	assert_string_equal(maru_config_get_rm_address(c), "127.0.0.1:9850");
	assert_false(maru_config_get_enable_stats(c));
	assert_int_equal(maru_config_validate(c, why, sizeof(why)), 0);

	assert_int_equal(maru_config_set_chunk_size(c, 0), 0);
	assert_int_equal(maru_config_validate(c, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "chunk_size_bytes must be positive, got 0");
	maru_config_set_chunk_size(c, 4096);
	maru_config_set_pool_size(c, 100);
	assert_int_equal(maru_config_validate(c, why, sizeof(why)), -EINVAL);
	assert_string_equal(
		why, "pool_size (100) must be >= chunk_size_bytes (4096)");
	assert_int_equal(maru_config_validate(c, NULL, 0), -EINVAL);
	maru_config_set_pool_size(c, 8192);
	maru_config_set_auto_expand(c, false);
	maru_config_set_expand_size(c, 8192);
	assert_int_equal(maru_config_validate(c, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "expand_size requires auto_expand=True");
	maru_config_set_auto_expand(c, true);
	maru_config_set_expand_size(c, 10);
	assert_int_equal(maru_config_validate(c, why, sizeof(why)), -EINVAL);
	assert_string_equal(
		why, "expand_size (10) must be >= chunk_size_bytes (4096)");
	maru_config_set_expand_size(c, 0);
	assert_int_equal(maru_config_validate(c, why, sizeof(why)), 0);

	assert_int_equal(maru_config_set_server_url(c, ""), -EINVAL);
	assert_int_equal(maru_config_set_server_url(c, "tcp://h:1"), 0);
	assert_string_equal(maru_config_get_server_url(c), "tcp://h:1");
	assert_int_equal(maru_config_set_instance_id(c, "me"), 0);
	assert_string_equal(maru_config_get_instance_id(c), "me");
	assert_int_equal(maru_config_set_instance_id(c, NULL), 0);
	assert_null(maru_config_get_instance_id(c));
	assert_int_equal(maru_config_set_max_inflight(c, 0), -EINVAL);

	setenv("MARU_EAGER_MAP", " Off ", 1);
	setenv("MARU_STAT", "yes", 1);
	assert_int_equal(maru_config_apply_env(c, why, sizeof(why)), 0);
	assert_false(maru_config_get_eager_map(c));
	assert_true(maru_config_get_enable_stats(c));
	setenv("MARU_STAT", "maybe", 1);
	assert_int_equal(maru_config_apply_env(c, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "MARU_STAT must be one of: 1/0, true/false, "
				 "yes/no, on/off (got 'maybe')");
	unsetenv("MARU_STAT");
	unsetenv("MARU_EAGER_MAP");
	maru_config_free(c);
}

/* MARU_LOG: the daemons' level names, a digit, else errors only */
static void test_log_env(void **state)
{
	static const struct {
		const char *v;
		int prio;
	} cases[] = {
		{"debug", 7}, {"INFO", 6}, {"notice", 5}, {"Warning", 4},
		{"warn", 4},  {"err", 3},  {"error", 3},  {"0", 0},
		{"7", 7},     {"9", 7},	   {"loud", 3},	  {"10", 3},
	};
	size_t i;

	(void)state;
	unsetenv("MARU_LOG");
	assert_int_equal(maru__log_env_priority(), -1);
	setenv("MARU_LOG", "", 1);
	assert_int_equal(maru__log_env_priority(), -1);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		setenv("MARU_LOG", cases[i].v, 1);
		assert_int_equal(maru__log_env_priority(), cases[i].prio);
	}
	unsetenv("MARU_LOG");
}

static void test_uuid4(void **state)
{
	char a[37], b[37];

	maru__uuid4(a);
	maru__uuid4(b);
	assert_int_equal(strlen(a), 36);
	assert_int_equal(a[14], '4');
	assert_true(strchr("89ab", a[19]) != NULL);
	assert_string_not_equal(a, b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_enc_spec_example),
		cmocka_unit_test(test_enc_key_kinds),
		cmocka_unit_test(test_enc_requests),
		cmocka_unit_test(test_dec_lookup),
		cmocka_unit_test(test_dec_handle_rules),
		cmocka_unit_test(test_dec_arrays),
		cmocka_unit_test(test_dec_repeated_allocations),
		cmocka_unit_test(test_dec_error_and_defaults),
		cmocka_unit_test(test_dec_server_id),
		cmocka_unit_test(test_dec_eviction_fields),
		cmocka_unit_test(test_dec_malformed),
		cmocka_unit_test(test_dec_stats),
		cmocka_unit_test(test_devhdr),
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_log_env),
		cmocka_unit_test(test_uuid4),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
