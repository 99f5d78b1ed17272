/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_statefmt.c - state-directory codecs and the device header
 *
 * Round trips of every record and file, upstream byte offsets checked by
 * hand, every truncation of a WAL (torn tail vs corrupt record), CRC and
 * size validation of both checkpoint files, and the MARUDEV header.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>
#include <zlib.h>

#include "devhdr.h"
#include "statefmt.h"

static void sample(struct state_alloc *a, uint64_t id)
{
	memset(a, 0, sizeof(*a));
	a->handle.region_id = id;
	a->handle.offset = 0x200000 * id;
	a->handle.length = 0x400000;
	a->handle.auth_token = 0x1122334455667788ull ^ id;
	snprintf(a->owner, sizeof(a->owner), "host-%llu:%llu",
		 (unsigned long long)id, (unsigned long long)(1000 + id));
	a->requested_size = 0x3fffff;
	a->alloc_length = 0x400000;
	a->nonce = 0xdeadbeefcafef00dull + id;
	a->pool_id = 7;
	a->real_offset = a->handle.offset;
}

static void test_alloc_record_layout(void **state)
{
	struct state_alloc a, b;
	uint8_t rec[STATE_ALLOC_REC_SIZE];

	sample(&a, 3);
	memset(rec, 0xee, sizeof(rec));
	state_alloc_put(rec, &a);
	/* upstream offsets (docs/resource-manager.md, State directory) */
	assert_int_equal(get_u64le(rec), 3);
	assert_int_equal(get_u64le(rec + 24), a.handle.auth_token);
	assert_string_equal((char *)rec + 32, "host-3:1003");
	assert_int_equal(rec[159], 0); /* the owner field is zero-padded */
	assert_int_equal(get_u64le(rec + 160), 0x3fffff);
	assert_int_equal(get_u64le(rec + 168), 0x400000);
	assert_int_equal(get_u64le(rec + 176), a.nonce);
	assert_int_equal(get_u32le(rec + 184), 7);
	assert_int_equal(get_u32le(rec + 188), 0);
	assert_int_equal(get_u64le(rec + 192), a.real_offset);
	assert_int_equal(state_alloc_get(rec, &b), 0);
	assert_memory_equal(&a, &b, sizeof(a));
	/* owner: empty or unterminated is refused */
	rec[32] = 0;
	assert_int_equal(state_alloc_get(rec, &b), -EPROTO);
	memset(rec + 32, 'x', 128);
	assert_int_equal(state_alloc_get(rec, &b), -EPROTO);
	rec[159] = 0; /* 127 characters is the longest owner */
	assert_int_equal(state_alloc_get(rec, &b), 0);
	assert_int_equal(strlen(b.owner), 127);
}

/* a WAL of ALLOC(1), ALLOC(2), FREE(1) */
static void make_wal(struct buf *b, size_t *ends)
{
	struct state_alloc a;

	sample(&a, 1);
	assert_int_equal(state_wal_encode_alloc(b, &a, 0x100000002ull, 1000),
			 0);
	ends[0] = b->len;
	sample(&a, 2);
	assert_int_equal(state_wal_encode_alloc(b, &a, 0, 1001), 0);
	ends[1] = b->len;
	assert_int_equal(state_wal_encode_free(b, 1, 9, 1002), 0);
	ends[2] = b->len;
}

static void test_wal_round_trip(void **state)
{
	struct buf b = BUF_INIT;
	struct wal_rec r;
	struct state_alloc a;
	const char *why = NULL;
	size_t ends[3], off = 0;

	make_wal(&b, ends);
	assert_int_equal(ends[0], WAL_HDR_SIZE + STATE_ALLOC_REC_SIZE);
	assert_int_equal(ends[2] - ends[1], WAL_HDR_SIZE + WAL_FREE_PAYLOAD);
	/* header fields at upstream offsets */
	assert_int_equal(get_u32le(b.data), WAL_MAGIC);
	assert_int_equal(get_u32le(b.data + 4), 6);
	assert_int_equal(get_u32le(b.data + 8), WAL_ALLOC);
	assert_int_equal(get_u32le(b.data + 16), STATE_ALLOC_REC_SIZE);
	assert_int_equal(get_u64le(b.data + 24), 1000);
	/* request_id split over reserved (low) and padding (high) */
	assert_int_equal(get_u32le(b.data + 12), 2);
	assert_int_equal(get_u32le(b.data + 20), 1);

	assert_int_equal(state_wal_next(b.data, b.len, &off, &r, &why), 1);
	sample(&a, 1);
	assert_int_equal(r.type, WAL_ALLOC);
	assert_int_equal(r.request_id, 0x100000002ull);
	assert_int_equal(r.region_id, 1);
	assert_memory_equal(&r.alloc, &a, sizeof(a));
	assert_int_equal(state_wal_next(b.data, b.len, &off, &r, &why), 1);
	assert_int_equal(r.region_id, 2);
	assert_int_equal(r.request_id, 0);
	assert_int_equal(state_wal_next(b.data, b.len, &off, &r, &why), 1);
	assert_int_equal(r.type, WAL_FREE);
	assert_int_equal(r.region_id, 1);
	assert_int_equal(r.request_id, 9);
	assert_int_equal(r.timestamp, 1002);
	assert_int_equal(off, b.len);
	assert_int_equal(state_wal_next(b.data, b.len, &off, &r, &why), 0);
	buf_free(&b);
}

/* Every prefix of a valid log: whole records, then at most a torn tail. */
static void test_wal_every_truncation(void **state)
{
	struct buf b = BUF_INIT;
	struct wal_rec r;
	const char *why;
	size_t ends[3], len, off;
	int n, rc, whole;

	make_wal(&b, ends);
	for (len = 0; len <= b.len; len++) {
		off = 0;
		n = 0;
		while ((rc = state_wal_next(b.data, len, &off, &r, &why)) == 1)
			n++;
		whole = (len >= ends[0]) + (len >= ends[1]) + (len >= ends[2]);
		assert_int_equal(n, whole);
		if (len == 0 || len == ends[0] || len == ends[1] ||
		    len == ends[2])
			assert_int_equal(rc, 0);
		else
			assert_int_equal(rc, -EAGAIN);
	}
	buf_free(&b);
}

static void test_wal_corruption(void **state)
{
	struct buf b = BUF_INIT;
	struct wal_rec r;
	const char *why;
	size_t ends[3], off;
	uint8_t *copy;

	make_wal(&b, ends);
	copy = malloc(b.len + 100);
	assert_non_null(copy);

	/* zero fill after the last record: a torn tail, not corruption */
	memcpy(copy, b.data, b.len);
	memset(copy + b.len, 0, 100);
	off = ends[2];
	assert_int_equal(state_wal_next(copy, b.len + 100, &off, &r, &why),
			 -EAGAIN);

	/* bad magic of a middle record followed by data: corrupt */
	memcpy(copy, b.data, b.len);
	copy[ends[0]] ^= 1;
	off = ends[0];
	assert_int_equal(state_wal_next(copy, b.len, &off, &r, &why), -EPROTO);
	assert_int_equal(off, ends[0]);

	/* bad version */
	memcpy(copy, b.data, b.len);
	put_u32le(copy + 4, 5);
	off = 0;
	assert_int_equal(state_wal_next(copy, b.len, &off, &r, &why), -EPROTO);

	/* unknown type, wrong payload sizes */
	memcpy(copy, b.data, b.len);
	put_u32le(copy + 8, 3);
	off = 0;
	assert_int_equal(state_wal_next(copy, b.len, &off, &r, &why), -EPROTO);
	memcpy(copy, b.data, b.len);
	put_u32le(copy + 16, 8);
	off = 0;
	assert_int_equal(state_wal_next(copy, b.len, &off, &r, &why), -EPROTO);
	memcpy(copy, b.data, b.len);
	put_u32le(copy + ends[1] + 16, 200);
	off = ends[1];
	assert_int_equal(state_wal_next(copy, b.len, &off, &r, &why), -EPROTO);

	/* an allocation record whose owner is not terminated */
	memcpy(copy, b.data, b.len);
	memset(copy + WAL_HDR_SIZE + 32, 'a', 128);
	off = 0;
	assert_int_equal(state_wal_next(copy, b.len, &off, &r, &why), -EPROTO);
	free(copy);
	buf_free(&b);
}

static void test_pool_meta(void **state)
{
	struct pool_extent ext[3] = {{0x200000, 0x400000},
				     {0x800000, 0x200000},
				     {0x1000000, 0x3000000}};
	struct buf b = BUF_INIT;
	struct pool_meta m;
	const char *why;
	uint64_t off, len;
	size_t i;

	assert_int_equal(state_pool_meta_encode(&b, 42, 0x4000000, ext, 3), 0);
	assert_int_equal(b.len, POOL_META_HDR_SIZE + 3 * 16);
	assert_int_equal(get_u32le(b.data), POOL_META_MAGIC);
	assert_int_equal(get_u32le(b.data + 4), 6);
	assert_int_equal(get_u32le(b.data + 8), 42);
	assert_int_equal(get_u32le(b.data + 12),
			 (uint32_t)crc32(0, b.data + 32, 48));
	assert_int_equal(get_u64le(b.data + 16), 0x4000000);
	assert_int_equal(get_u64le(b.data + 24), 3);
	assert_int_equal(state_pool_meta_parse(b.data, b.len, &m, &why), 0);
	assert_int_equal(m.pool_id, 42);
	assert_int_equal(m.total_size, 0x4000000);
	assert_int_equal(m.count, 3);
	for (i = 0; i < 3; i++) {
		state_pool_meta_extent(&m, i, &off, &len);
		assert_int_equal(off, ext[i].offset);
		assert_int_equal(len, ext[i].length);
	}
	/* any flipped bit in magic, version, crc, count or extents fails */
	for (i = 0; i < b.len; i++) {
		if (i >= 8 && i < 12)
			continue; /* pool id: checked by the caller */
		if (i >= 16 && i < 24)
			continue; /* total size: checked by the caller */
		b.data[i] ^= 0x10;
		assert_int_equal(state_pool_meta_parse(b.data, b.len, &m, &why),
				 -EPROTO);
		b.data[i] ^= 0x10;
	}
	/* short or long files */
	assert_int_equal(state_pool_meta_parse(b.data, b.len - 1, &m, &why),
			 -EPROTO);
	assert_int_equal(state_pool_meta_parse(b.data, 31, &m, &why), -EPROTO);
	/* an empty free list has crc 0 */
	buf_reset(&b);
	assert_int_equal(state_pool_meta_encode(&b, 1, 100, NULL, 0), 0);
	assert_int_equal(get_u32le(b.data + 12), 0);
	assert_int_equal(state_pool_meta_parse(b.data, b.len, &m, &why), 0);
	/* overlapping extents with a valid CRC are still refused */
	buf_reset(&b);
	ext[1].offset = 0x300000;
	assert_int_equal(state_pool_meta_encode(&b, 1, 100, ext, 3), 0);
	assert_int_equal(state_pool_meta_parse(b.data, b.len, &m, &why),
			 -EPROTO);
	buf_free(&b);
}

static void test_global_meta(void **state)
{
	struct buf b = BUF_INIT;
	struct global_meta m;
	struct state_alloc a, got;
	const char *why;
	uint64_t i;

	assert_int_equal(state_global_meta_begin(&b, 99), 0);
	for (i = 1; i <= 3; i++) {
		sample(&a, i);
		assert_int_equal(state_global_meta_add(&b, &a), 0);
	}
	state_global_meta_end(&b, 3);
	assert_int_equal(b.len, GLOBAL_META_HDR_SIZE + 3 * 200);
	assert_int_equal(get_u32le(b.data), GLOBAL_META_MAGIC);
	assert_int_equal(get_u32le(b.data + 4), 2);
	assert_int_equal(get_u32le(b.data + 8),
			 (uint32_t)crc32(0, b.data + 32, 600));
	assert_int_equal(get_u64le(b.data + 16), 99);
	assert_int_equal(get_u64le(b.data + 24), 3);
	assert_int_equal(state_global_meta_parse(b.data, b.len, &m, &why), 0);
	assert_int_equal(m.next_region_id, 99);
	for (i = 0; i < 3; i++) {
		sample(&a, i + 1);
		assert_int_equal(state_global_meta_get(&m, i, &got), 0);
		assert_memory_equal(&a, &got, sizeof(a));
	}
	for (i = 0; i < b.len; i += 7) {
		if (i >= 12 && i < 24)
			continue; /* reserved and next id: not covered */
		b.data[i] ^= 0x01;
		assert_int_equal(
			state_global_meta_parse(b.data, b.len, &m, &why),
			-EPROTO);
		b.data[i] ^= 0x01;
	}
	assert_int_equal(state_global_meta_parse(b.data, b.len + 0, &m, &why),
			 0);
	assert_int_equal(state_global_meta_parse(b.data, b.len - 200, &m, &why),
			 -EPROTO);
	/* a huge count must not overflow the size check */
	put_u64le(b.data + 24, UINT64_MAX / 100);
	assert_int_equal(state_global_meta_parse(b.data, b.len, &m, &why),
			 -EPROTO);
	buf_reset(&b);
	assert_int_equal(state_global_meta_begin(&b, 1), 0);
	state_global_meta_end(&b, 0);
	assert_int_equal(state_global_meta_parse(b.data, b.len, &m, &why), 0);
	assert_int_equal(m.count, 0);
	buf_free(&b);
}

static void test_devhdr(void **state)
{
	uint8_t unit[64], uuid[16];
	struct devhdr h;
	char s[DEVHDR_UUID_STRLEN + 1];
	int i;

	memset(unit, 0, sizeof(unit));
	assert_int_equal(devhdr_parse(unit, sizeof(unit), &h), -ENOENT);
	assert_int_equal(devhdr_parse(unit, 31, &h), -EPROTO);
	for (i = 0; i < 16; i++)
		uuid[i] = (uint8_t)(0xf0 + i);
	devhdr_uuid_v4(uuid);
	assert_int_equal(uuid[6] >> 4, 4);
	assert_int_equal(uuid[8] >> 6, 2);
	devhdr_format(unit, uuid);
	assert_memory_equal(unit, "MARUDEV\0", 8);
	assert_int_equal(get_u32le(unit + 8), 1);
	assert_memory_equal(unit + 12, uuid, 16);
	assert_int_equal(get_u32le(unit + 28), 0);
	assert_int_equal(unit[32], 0); /* nothing beyond 32 bytes */
	assert_int_equal(devhdr_parse(unit, 32, &h), 0);
	assert_int_equal(h.version, 1);
	assert_memory_equal(h.uuid, uuid, 16);
	devhdr_uuid_str(uuid, s);
	assert_string_equal(s, "f0f1f2f3-f4f5-46f7-b8f9-fafbfcfdfeff");
	put_u32le(unit + 8, 2); /* other versions are reported, not refused */
	assert_int_equal(devhdr_parse(unit, 32, &h), 0);
	assert_int_equal(h.version, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_alloc_record_layout),
		cmocka_unit_test(test_wal_round_trip),
		cmocka_unit_test(test_wal_every_truncation),
		cmocka_unit_test(test_wal_corruption),
		cmocka_unit_test(test_pool_meta),
		cmocka_unit_test(test_global_meta),
		cmocka_unit_test(test_devhdr),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
