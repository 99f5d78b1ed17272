/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rm_proto.c - every resource manager decoder on arbitrary bytes
 *
 * The first byte picks the decoder (its value modulo 13); the rest is the
 * message.  Whatever a
 * decoder accepts is re-encoded and decoded again, and must come back equal.
 */
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "rm_proto.h"
#include "fuzz.h"

static void touch(struct rm_str s)
{
	volatile char c;
	uint32_t i;

	for (i = 0; i < s.len; i++)
		c = s.ptr[i];
	(void)c;
}

static void check_alloc_req(const uint8_t *p, size_t n)
{
	struct rm_alloc_req a, b;
	struct rm_hdr h;
	struct buf out = BUF_INIT;
	const char *why;

	if (rm_decode_alloc_req(p, n, &a, &why) < 0)
		return;
	touch(a.dax_path);
	touch(a.client_id);
	if (!a.client_id.len)
		a.request_id = 0;
	if (rm_encode_alloc_req(&out, &a) == 0) {
		CHECK(rm_hdr_decode(out.data, out.len, RM_MAX_PAYLOAD * 2,
				    &h) == RM_HDR_SIZE);
		CHECK(rm_decode_alloc_req(out.data + RM_HDR_SIZE,
					  out.len - RM_HDR_SIZE, &b,
					  &why) == 0);
		CHECK(a.size == b.size && rm_str_eq(a.dax_path, b.dax_path) &&
		      rm_str_eq(a.client_id, b.client_id) &&
		      a.request_id == b.request_id);
	}
	buf_free(&out);
}

/* an accepted AUTH_REQ re-encodes to the same fields */
static void check_auth_req(const uint8_t *p, size_t n)
{
	struct rm_auth_req a, b;
	struct buf out = BUF_INIT;
	const char *why;

	if (rm_decode_auth_req(p, n, &a, &why) < 0)
		return;
	touch(a.client_id);
	CHECK(a.step == 1 || a.step == 2);
	if (rm_encode_auth_req(&out, &a) == 0) {
		CHECK(rm_decode_auth_req(out.data + RM_HDR_SIZE,
					 out.len - RM_HDR_SIZE, &b, &why) == 0);
		CHECK(a.step == b.step &&
		      !memcmp(a.data, b.data, sizeof(a.data)) &&
		      rm_str_eq(a.client_id, b.client_id) &&
		      b.hold_ms == (a.client_id.len ? a.hold_ms : 0) &&
		      b.write_ms == (a.client_id.len ? a.write_ms : 0));
	}
	buf_free(&out);
}

static void check_auth_resp(const uint8_t *p, size_t n)
{
	struct rm_auth_resp a, b;
	struct buf out = BUF_INIT;

	if (rm_decode_auth_resp(p, n, &a) < 0)
		return;
	if (rm_encode_auth_resp(&out, &a) == 0) {
		CHECK(rm_decode_auth_resp(out.data + RM_HDR_SIZE,
					  out.len - RM_HDR_SIZE, &b) == 0);
		CHECK(!memcmp(&a, &b, sizeof(a)));
	}
	buf_free(&out);
}

/* the owners an accepted OWNERS_RESP walks to re-encode to the same */
static void check_owners_resp(const uint8_t *p, size_t n)
{
	struct rm_owners_resp r, r2;
	struct rm_owner o, o2;
	struct buf out = BUF_INIT;
	size_t cur = 0, cur2 = 0, start;
	uint32_t k = 0;

	if (rm_decode_owners_resp(p, n, &r) < 0)
		return;
	if (rm_encode_owners_begin(&out, &start) < 0)
		return;
	while (k < r.num && rm_owners_next(&r, &cur, &o) == 1) {
		CHECK(o.id.len >= 1 && o.id.len <= RM_CLIENT_ID_MAX);
		touch(o.id);
		CHECK(rm_encode_owners_add(&out, &o) == 0);
		k++;
	}
	rm_encode_owners_end(&out, start, k, r.omitted);
	CHECK(rm_decode_owners_resp(out.data + RM_HDR_SIZE,
				    out.len - RM_HDR_SIZE, &r2) == 0);
	CHECK(r2.num == k && r2.omitted == r.omitted);
	cur = 0;
	while (k-- && rm_owners_next(&r, &cur, &o) == 1) {
		CHECK(rm_owners_next(&r2, &cur2, &o2) == 1);
		CHECK(rm_str_eq(o.id, o2.id) && o.regions == o2.regions &&
		      o.connections == o2.connections && o.bytes == o2.bytes &&
		      o.hold_ms == o2.hold_ms && o.away_since == o2.away_since);
	}
	buf_free(&out);
}

/* RELEASE: the request's owner and the response come back equal */
static void check_release(const uint8_t *p, size_t n)
{
	struct rm_release_resp a, b;
	struct buf out = BUF_INIT;
	struct rm_str id, id2;
	const char *why;

	if (rm_decode_release_req(p, n, &id, &why) == 0) {
		touch(id);
		CHECK(rm_encode_release_req(&out, id) == 0);
		CHECK(rm_decode_release_req(out.data + RM_HDR_SIZE,
					    out.len - RM_HDR_SIZE, &id2,
					    &why) == 0);
		CHECK(rm_str_eq(id, id2));
		buf_reset(&out);
	}
	if (rm_decode_release_resp(p, n, &a) == 0) {
		CHECK(rm_encode_release_resp(&out, &a) == 0);
		CHECK(rm_decode_release_resp(out.data + RM_HDR_SIZE,
					     out.len - RM_HDR_SIZE, &b) == 0);
		CHECK(!memcmp(&a, &b, sizeof(a)));
	}
	buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rm_free_req fr;
	struct rm_get_access_req gr;
	struct rm_alloc_resp ar;
	struct rm_get_access_resp gar;
	struct rm_stats_resp sr;
	struct rm_counters_resp kr;
	struct rm_counter kv;
	struct rm_pool_stat ps;
	struct rm_error_resp er;
	struct rm_hdr h;
	const char *why;
	int32_t st;
	size_t cur = 0;

	if (size < 1)
		return 0;
	switch (data[0] % 13) {
	case 0:
		rm_hdr_decode(data + 1, size - 1, RM_MAX_PAYLOAD, &h);
		break;
	case 1:
		check_alloc_req(data + 1, size - 1);
		break;
	case 2:
		if (rm_decode_free_req(data + 1, size - 1, &fr, &why) == 0)
			touch(fr.client_id);
		break;
	case 3:
		if (rm_decode_get_access_req(data + 1, size - 1, &gr, &why) ==
		    0)
			touch(gr.client_id);
		break;
	case 4:
		if (rm_decode_alloc_resp(data + 1, size - 1, &ar) == 0) {
			touch(ar.path);
			touch(ar.uuid);
		}
		break;
	case 5:
		rm_decode_free_resp(data + 1, size - 1, &st);
		break;
	case 6:
		if (rm_decode_get_access_resp(data + 1, size - 1, &gar) == 0) {
			touch(gar.path);
			touch(gar.uuid);
		}
		break;
	case 7: /* the two walked responses see the same bytes */
		if (rm_decode_stats_resp(data + 1, size - 1, &sr) == 0)
			while (rm_stats_next(&sr, &cur, &ps) == 1)
				touch(ps.path);
		cur = 0;
		if (rm_decode_counters_resp(data + 1, size - 1, &kr) == 0)
			while (rm_counters_next(&kr, &cur, &kv) == 1) {
				CHECK(kv.name.len >= 1 &&
				      kv.name.len <= RM_COUNTER_NAME_MAX);
				touch(kv.name);
			}
		break;
	case 8:
		if (rm_decode_error_resp(data + 1, size - 1, &er) == 0)
			touch(er.msg);
		break;
	case 9:
		check_auth_req(data + 1, size - 1);
		break;
	case 10:
		check_auth_resp(data + 1, size - 1);
		break;
	case 11:
		check_owners_resp(data + 1, size - 1);
		break;
	case 12:
		check_release(data + 1, size - 1);
		break;
	}
	return 0;
}
