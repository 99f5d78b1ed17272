/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_proto.c - resource manager codec: byte layouts of protocol.md §1,
 * round trips of every message, and rejection of malformed input
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "rm_auth.h"
#include "rm_proto.h"

static const struct rm_handle H = {
	.region_id = 7,
	.offset = 2u << 20,
	.length = 4u << 20,
	.auth_token = 0xFEDCBA9876543210ull, /* >= 2^63, like real tokens */
};

static void assert_str(struct rm_str s, const char *want)
{
	assert_int_equal(s.len, strlen(want));
	assert_memory_equal(s.ptr, want, s.len);
}

static void test_header_bytes(void **state)
{
	static const uint8_t want[] = {0x55, 0x52, 0x41, 0x4D, 2, 0,
				       5,    0,	   0,	 0,    0, 0};
	struct buf b = BUF_INIT;
	struct rm_hdr h;

	assert_int_equal(rm_encode_stats_req(&b), 0);
	assert_int_equal(b.len, 12);
	assert_memory_equal(b.data, want, 12);
	assert_int_equal(rm_hdr_decode(b.data, 11, RM_MAX_PAYLOAD, &h), 0);
	assert_int_equal(rm_hdr_decode(b.data, 12, RM_MAX_PAYLOAD, &h), 12);
	assert_int_equal(h.type, RM_STATS_REQ);
	b.data[0] ^= 1;
	assert_int_equal(rm_hdr_decode(b.data, 12, RM_MAX_PAYLOAD, &h),
			 -EPROTO);
	b.data[0] ^= 1;
	b.data[4] = 1; /* version 1 */
	assert_int_equal(rm_hdr_decode(b.data, 12, RM_MAX_PAYLOAD, &h),
			 -EPROTO);
	b.data[4] = 2;
	put_u32le(b.data + 8, RM_MAX_PAYLOAD + 1);
	assert_int_equal(rm_hdr_decode(b.data, 12, RM_MAX_PAYLOAD, &h),
			 -EMSGSIZE);
	buf_free(&b);
}

static void test_alloc_req(void **state)
{
	struct rm_alloc_req in =
				    {
					    .size = 100 << 20,
					    .dax_path =
						    rm_str_from("/dev/dax0.0"),
					    .client_id = rm_str_from("host:42"),
					    .request_id = 9,
				    },
			    out;
	struct buf b = BUF_INIT;
	const char *why = NULL;
	const uint8_t *p;

	assert_int_equal(rm_encode_alloc_req(&b, &in), 0);
	p = b.data + RM_HDR_SIZE;
	assert_int_equal(b.len, 12 + 16 + 11 + 2 + 7 + 8);
	assert_int_equal(get_u64le(p), 100 << 20);
	assert_int_equal(get_u32le(p + 8), 11);
	assert_int_equal(get_u32le(p + 12), 0);
	assert_memory_equal(p + 16, "/dev/dax0.0", 11);
	assert_int_equal(get_u16le(p + 27), 7);
	assert_int_equal(get_u64le(p + 36), 9);
	assert_int_equal(rm_decode_alloc_req(p, b.len - 12, &out, &why), 0);
	assert_int_equal(out.size, in.size);
	assert_str(out.dax_path, "/dev/dax0.0");
	assert_str(out.client_id, "host:42");
	assert_int_equal(out.request_id, 9);

	/* without request id, then without client id */
	assert_int_equal(rm_decode_alloc_req(p, b.len - 12 - 8, &out, &why), 0);
	assert_int_equal(out.request_id, 0);
	assert_str(out.client_id, "host:42");
	assert_int_equal(rm_decode_alloc_req(p, 16 + 11, &out, &why), 0);
	assert_int_equal(out.client_id.len, 0);
	/* two bytes left: too few for a client id, treated as absent */
	assert_int_equal(rm_decode_alloc_req(p, 16 + 11 + 2, &out, &why), 0);
	assert_int_equal(out.client_id.len, 0);
	buf_free(&b);
}

static void test_alloc_req_malformed(void **state)
{
	uint8_t p[64] = {0};
	struct rm_alloc_req m;
	const char *why;

	assert_int_equal(rm_decode_alloc_req(p, 15, &m, &why), -EPROTO);
	assert_string_equal(why, "bad alloc req");
	put_u32le(p + 8, RM_PATH_MAX + 1);
	assert_int_equal(rm_decode_alloc_req(p, 64, &m, &why), -EPROTO);
	assert_non_null(strstr(why, "too long"));
	put_u32le(p + 8, 49);
	assert_int_equal(rm_decode_alloc_req(p, 64, &m, &why), -EPROTO);
	assert_non_null(strstr(why, "truncated"));
	put_u32le(p + 8, 4);
	memcpy(p + 16, "a\0bc", 4);
	assert_int_equal(rm_decode_alloc_req(p, 64, &m, &why), -EPROTO);
	assert_non_null(strstr(why, "null byte"));
	/* client id with a NUL, or too long, or zero length: absent */
	memcpy(p + 16, "abcd", 4);
	put_u16le(p + 20, 3);
	memcpy(p + 22, "x\0y", 3);
	assert_int_equal(rm_decode_alloc_req(p, 25, &m, &why), 0);
	assert_int_equal(m.client_id.len, 0);
	put_u16le(p + 20, 128);
	assert_int_equal(rm_decode_alloc_req(p, 64, &m, &why), 0);
	assert_int_equal(m.client_id.len, 0);
	put_u16le(p + 20, 0);
	assert_int_equal(rm_decode_alloc_req(p, 64, &m, &why), 0);
	assert_int_equal(m.client_id.len, 0);
	put_u16le(p + 20, 50); /* runs past the payload */
	assert_int_equal(rm_decode_alloc_req(p, 64, &m, &why), 0);
	assert_int_equal(m.client_id.len, 0);
}

static void test_free_and_get_access_req(void **state)
{
	struct rm_free_req fin = {.handle = H,
				  .client_id = rm_str_from("h:1"),
				  .request_id = 77},
			   fout;
	struct rm_get_access_req gin = {.handle = H,
					.client_id = rm_str_from("h:2")},
				 gout;
	struct buf b = BUF_INIT;
	const char *why;

	assert_int_equal(rm_encode_free_req(&b, &fin), 0);
	assert_int_equal(get_u16le(b.data + 6), RM_FREE_REQ);
	assert_int_equal(
		rm_decode_free_req(b.data + 12, b.len - 12, &fout, &why), 0);
	assert_memory_equal(&fout.handle, &H, sizeof(H));
	assert_str(fout.client_id, "h:1");
	assert_int_equal(fout.request_id, 77);
	assert_int_equal(rm_decode_free_req(b.data + 12, 31, &fout, &why),
			 -EPROTO);
	assert_string_equal(why, "bad free req");

	buf_reset(&b);
	assert_int_equal(rm_encode_get_access_req(&b, &gin), 0);
	assert_int_equal(b.len, 12 + 32 + 2 + 3);
	assert_int_equal(
		rm_decode_get_access_req(b.data + 12, b.len - 12, &gout, &why),
		0);
	assert_memory_equal(&gout.handle, &H, sizeof(H));
	assert_str(gout.client_id, "h:2");
	assert_int_equal(rm_decode_get_access_req(b.data + 12, 32, &gout, &why),
			 0);
	assert_int_equal(gout.client_id.len, 0);
	assert_int_equal(rm_decode_get_access_req(b.data + 12, 20, &gout, &why),
			 -EPROTO);
	buf_free(&b);
}

static void test_alloc_resp(void **state)
{
	const char *uuid = "0123456789abcdef0123456789abcdef";
	struct rm_alloc_resp in =
				     {
					     .handle = H,
					     .requested_size = 3 << 20,
					     .path = rm_str_from(
						     "/dev/shm/pool"),
					     .uuid = rm_str_from(uuid),
				     },
			     out, fail = {.status = -ENOMEM};
	struct buf b = BUF_INIT;

	assert_int_equal(rm_encode_alloc_resp(&b, &in), 0);
	assert_int_equal(b.len, 12 + 54 + 13 + 32);
	assert_int_equal(rm_decode_alloc_resp(b.data + 12, b.len - 12, &out),
			 0);
	assert_int_equal(out.status, 0);
	assert_memory_equal(&out.handle, &H, sizeof(H));
	assert_int_equal(out.requested_size, 3 << 20);
	assert_str(out.path, "/dev/shm/pool");
	assert_str(out.uuid, uuid);
	assert_int_equal(rm_decode_alloc_resp(b.data + 12, b.len - 13, &out),
			 -EPROTO);

	buf_reset(&b);
	assert_int_equal(rm_encode_alloc_resp(&b, &fail), 0);
	assert_int_equal(b.len, 12 + 54); /* upstream's failure size */
	assert_int_equal(rm_decode_alloc_resp(b.data + 12, 54, &out), 0);
	assert_int_equal(out.status, -ENOMEM);
	assert_int_equal(out.path.len, 0);
	assert_int_equal(rm_decode_alloc_resp(b.data + 12, 53, &out), -EPROTO);
	buf_free(&b);
}

static void test_free_resp_and_error(void **state)
{
	struct buf b = BUF_INIT;
	struct rm_error_resp e;
	int32_t st;

	assert_int_equal(rm_encode_free_resp(&b, -EPERM), 0);
	assert_int_equal(b.len, 16);
	assert_int_equal(rm_decode_free_resp(b.data + 12, 4, &st), 0);
	assert_int_equal(st, -EPERM);
	assert_int_equal(rm_decode_free_resp(b.data + 12, 3, &st), -EPROTO);

	buf_reset(&b);
	assert_int_equal(rm_encode_error_resp(&b, -EACCES, "invalid authToken"),
			 0);
	assert_int_equal(get_u16le(b.data + 6), RM_ERROR_RESP);
	assert_int_equal(rm_decode_error_resp(b.data + 12, b.len - 12, &e), 0);
	assert_int_equal(e.status, -EACCES);
	assert_str(e.msg, "invalid authToken");
	assert_int_equal(rm_decode_error_resp(b.data + 12, b.len - 13, &e),
			 -EPROTO);
	buf_free(&b);
}

static void test_get_access_resp(void **state)
{
	struct rm_get_access_resp in =
					  {
						  .path = rm_str_from(
							  "/dev/dax1.0"),
						  .offset = H.offset,
						  .length = H.length,
						  .uuid = rm_str_from("u"),
					  },
				  out;
	struct buf b = BUF_INIT;

	assert_int_equal(rm_encode_get_access_resp(&b, &in), 0);
	assert_int_equal(b.len, 12 + 26 + 11 + 1);
	assert_int_equal(
		rm_decode_get_access_resp(b.data + 12, b.len - 12, &out), 0);
	assert_str(out.path, "/dev/dax1.0");
	assert_int_equal(out.offset, H.offset);
	assert_int_equal(out.length, H.length);
	assert_str(out.uuid, "u");
	assert_int_equal(
		rm_decode_get_access_resp(b.data + 12, b.len - 13, &out),
		-EPROTO);
	buf_free(&b);
}

static void test_stats_resp(void **state)
{
	struct rm_pool_stat a = {RM_DEV_DAX, 1 << 30, 1 << 29, 2 << 20,
				 rm_str_from("/dev/dax0.0")};
	struct rm_pool_stat c = {RM_FS_DAX, 5, 4, 4096, rm_str_from("/mnt")};
	struct rm_stats_resp s;
	struct rm_pool_stat o;
	struct buf b = BUF_INIT;
	size_t start, cur = 0;

	assert_int_equal(rm_encode_stats_begin(&b, &start), 0);
	assert_int_equal(rm_encode_stats_add(&b, &a), 0);
	assert_int_equal(rm_encode_stats_add(&b, &c), 0);
	rm_encode_stats_end(&b, start, 2);
	assert_int_equal(get_u32le(b.data + 8), b.len - 12);
	assert_int_equal(b.len, 12 + 4 + 32 + 11 + 32 + 4);
	assert_int_equal(rm_decode_stats_resp(b.data + 12, b.len - 12, &s), 0);
	assert_int_equal(s.num_pools, 2);
	assert_int_equal(rm_stats_next(&s, &cur, &o), 1);
	assert_int_equal(o.dax_type, RM_DEV_DAX);
	assert_int_equal(o.total_size, 1 << 30);
	assert_int_equal(o.free_size, 1 << 29);
	assert_int_equal(o.align_bytes, 2 << 20);
	assert_str(o.path, "/dev/dax0.0");
	assert_int_equal(rm_stats_next(&s, &cur, &o), 1);
	assert_str(o.path, "/mnt");
	assert_int_equal(rm_stats_next(&s, &cur, &o), 0);

	/* a truncated second record */
	assert_int_equal(rm_decode_stats_resp(b.data + 12, b.len - 13, &s), 0);
	cur = 0;
	assert_int_equal(rm_stats_next(&s, &cur, &o), 1);
	assert_int_equal(rm_stats_next(&s, &cur, &o), -EPROTO);
	buf_free(&b);
}

static void test_encode_limits(void **state)
{
	char longid[200];
	struct rm_alloc_req m = {.size = 1};
	struct buf b = BUF_INIT;

	memset(longid, 'x', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = 0;
	m.client_id = rm_str_from(longid);
	assert_int_equal(rm_encode_alloc_req(&b, &m), -EINVAL);
	m.client_id.len = 0;
	m.request_id = 5; /* a request id needs a client id before it */
	assert_int_equal(rm_encode_alloc_req(&b, &m), -EINVAL);
	assert_int_equal(b.len, 0);
	buf_free(&b);
}

/* the AUTH messages round-trip; the proofs match Python's hmac module */
static void test_auth(void **state)
{
	static const char *want_s = "7ecacfd30966d543dbefafd825b2d34de93729ccd6"
				    "3e808f267f7328410ebbf4";
	static const char *want_c = "2d9a2406d70619f561cee802c90673e41144572fab"
				    "e7b5624a7569f389702d7a";
	uint8_t key[RM_AUTH_KEY_LEN], cn[32], sn[32], mac[32], back[32];
	struct rm_auth_req q = {.step = 1}, q2;
	struct rm_auth_resp a = {0}, a2;
	struct buf b = BUF_INIT;
	char text[66], hex[65], path[] = "/tmp/test_rm_auth.XXXXXX";
	const char *why;
	int i, fd;

	for (i = 0; i < 32; i++) {
		key[i] = (uint8_t)i;
		cn[i] = 1;
		sn[i] = 2;
	}
	rm_auth_mac(key, RM_AUTH_SERVER, cn, sn, rm_str_from("host:42"), mac);
	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", mac[i]);
	assert_string_equal(hex, want_s);
	rm_auth_mac(key, RM_AUTH_CLIENT, cn, sn, rm_str_from("host:42"), mac);
	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", mac[i]);
	assert_string_equal(hex, want_c);
	assert_true(rm_auth_equal(mac, mac));
	memcpy(back, mac, 32);
	back[31] ^= 1;
	assert_false(rm_auth_equal(mac, back));

	/* a client's step 2: the server's proof checked, ours made */
	memcpy(a.nonce, sn, 32);
	rm_auth_mac(key, RM_AUTH_SERVER, cn, sn, rm_str_from("host:42"),
		    a.proof);
	memset(back, 0, 32);
	assert_int_equal(
		rm_auth_prove(key, cn, rm_str_from("host:42"), &a, back), 0);
	assert_memory_equal(back, mac, 32); /* want_c */
	a.proof[0] ^= 1;		    /* not the server's */
	assert_int_equal(
		rm_auth_prove(key, cn, rm_str_from("host:42"), &a, back),
		-EKEYREJECTED);
	a.proof[0] ^= 1;
	key[0] ^= 1; /* another key than the server's */
	assert_int_equal(
		rm_auth_prove(key, cn, rm_str_from("host:42"), &a, back),
		-EKEYREJECTED);
	key[0] ^= 1;
	memset(&a, 0, sizeof(a));

	memcpy(q.data, cn, 32);
	q.client_id = rm_str_from("host:42");
	assert_int_equal(rm_encode_auth_req(&b, &q), 0);
	assert_int_equal(rm_decode_auth_req(b.data + RM_HDR_SIZE,
					    b.len - RM_HDR_SIZE, &q2, &why),
			 0);
	assert_int_equal(q2.step, 1);
	assert_memory_equal(q2.data, cn, 32);
	assert_true(rm_str_eq(q2.client_id, q.client_id));
	assert_int_equal(q2.hold_ms, 0); /* absent */
	buf_reset(&b);
	q.hold_ms = 37500;
	assert_int_equal(rm_encode_auth_req(&b, &q), 0);
	assert_int_equal(rm_decode_auth_req(b.data + RM_HDR_SIZE,
					    b.len - RM_HDR_SIZE, &q2, &why),
			 0);
	assert_int_equal(q2.hold_ms, 37500);
	/* a bad step, a short payload */
	b.data[RM_HDR_SIZE] = 3;
	assert_int_equal(rm_decode_auth_req(b.data + RM_HDR_SIZE,
					    b.len - RM_HDR_SIZE, &q2, &why),
			 -EPROTO);
	assert_int_equal(
		rm_decode_auth_req(b.data + RM_HDR_SIZE, 35, &q2, &why),
		-EPROTO);
	buf_reset(&b);
	a.status = -13;
	memcpy(a.nonce, sn, 32);
	memcpy(a.proof, mac, 32);
	assert_int_equal(rm_encode_auth_resp(&b, &a), 0);
	assert_int_equal(rm_decode_auth_resp(b.data + RM_HDR_SIZE,
					     b.len - RM_HDR_SIZE, &a2),
			 0);
	assert_memory_equal(&a, &a2, sizeof(a));
	assert_int_equal(rm_decode_auth_resp(b.data + RM_HDR_SIZE, 67, &a2),
			 -EPROTO);
	buf_free(&b);

	/* the key file: 64 hex digits and white space, nothing else */
	rm_auth_key_text(key, text);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	memset(back, 0, sizeof(back));
	assert_int_equal(rm_auth_key_load(path, back), 0);
	assert_memory_equal(back, key, 32);
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(rm_auth_key_load(path, back), -EINVAL);
	assert_int_equal(ftruncate(fd, 63), 0);
	assert_int_equal(rm_auth_key_load(path, back), -EINVAL);
	close(fd);
	unlink(path);
	assert_int_equal(rm_auth_key_load(path, back), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_bytes),
		cmocka_unit_test(test_alloc_req),
		cmocka_unit_test(test_alloc_req_malformed),
		cmocka_unit_test(test_free_and_get_access_req),
		cmocka_unit_test(test_alloc_resp),
		cmocka_unit_test(test_free_resp_and_error),
		cmocka_unit_test(test_get_access_resp),
		cmocka_unit_test(test_stats_resp),
		cmocka_unit_test(test_encode_limits),
		cmocka_unit_test(test_auth),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
