/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msgpack_read.c - the project's one MessagePack reader (src/common/msgpk.h)
 * against msgpack-c's unpacker, the library the design names
 *
 *   msgpack-read [--keys 256] [--index 1000000] [--rounds 15] [--call-us 23]
 *
 * The question: is a hand-written reader worth having, i.e. does
 * reading with msgpack-c cost at least 1.3x on maru-server's
 * BATCH_LOOKUP_KV keys/s or on a libmaru call?  Measured in one process,
 * the variants alternating round by round, medians of --rounds rounds:
 *
 *  batch  a BATCH_LOOKUP_KV request of --keys LMCache-like keys (~37 bytes)
 *    msgpk     the walk maru-server's codec does: map, "keys", array, every
 *              string (its bytes touched)
 *    msgpackc  msgpack_unpack_next() into one msgpack_unpacked reused for
 *              every request (its zone kept: msgpack-c at its best), then
 *              the same walk over the object tree
 *    handler   the whole request in maru-server's code: mds_handle() on an
 *              index of --index keys (decode, every lookup, the reply)
 *    The server's cost with msgpack-c reading is handler - msgpk +
 *    msgpackc; "server ratio" is that over handler: keys/s would drop by it.
 *
 *  reply  a LOOKUP_KV hit reply as libmaru decodes it (found, handle with
 *         four fields, kv_offset, kv_length)
 *    msgpk     maru__decode_reply()
 *    msgpackc  msgpack_unpack_next() into a reused msgpack_unpacked, then
 *              the same fields found in the tree
 *    "call ratio" puts the difference on a libmaru call of --call-us
 *    (23 us on one core here, docs/performance.md).
 *
 *  memory  what reading one hostile but well-formed request costs in
 *         memory: a BATCH_EXISTS_KV body {"x": [nil x N]} of
 *         --hostile-mb MiB (an unknown key, which maru-server skips).
 *    msgpk     mds_handle() on it: the reader skips the list in place
 *    msgpackc  msgpack_unpack_next() on it: a 24-byte msgpack_object per
 *              value, held until the zone is cleared
 *    Resident memory is read from /proc/self/statm right after each
 *    decode (the tree still held); "amplification" is growth / payload,
 *    and "at_max_msg" what one request of SERVER_MAX_MSG would cost.
 *
 * Output: RESULT lines, then a verdict line per question.
 */
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "handler.h"
#include "mds_proto.h"
#include "msgpk.h"
#include "private.h"
#include "server.h"
#include "store.h"
#include "nop_rm.h"
#include "util.h"

#define KEYFMT "lmcache@model-8b@1@0@%016" PRIx64
#define MAX_ROUNDS 99

static volatile uint64_t sink;

/* ---- the requests and replies ---- */

static void pack_str(msgpack_packer *pk, const char *s, size_t n)
{
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

/* header + {"keys": [k0 .. kn-1]} with keys i * stride */
static void batch_body(msgpack_sbuffer *sb, uint32_t n, uint64_t stride)
{
	uint8_t hdr[MDS_HDR_SIZE] = {0};
	msgpack_packer pk;
	char k[64];
	uint32_t i;

	msgpack_sbuffer_init(sb);
	msgpack_sbuffer_write(sb, (const char *)hdr, sizeof(hdr));
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	pack_str(&pk, "keys", 4);
	msgpack_pack_array(&pk, n);
	for (i = 0; i < n; i++)
		pack_str(&pk, k,
			 (size_t)snprintf(k, sizeof(k), KEYFMT, i * stride));
	mds_hdr_put((uint8_t *)sb->data, MDS_BATCH_LOOKUP_KV, 0, 1,
		    (uint32_t)(sb->size - MDS_HDR_SIZE));
}

static void lookup_reply(msgpack_sbuffer *sb)
{
	static const char *hk[] = {"region_id", "offset", "length",
				   "auth_token"};
	static const uint64_t hv[] = {7, 6ull << 30, 1ull << 30,
				      0xf00dfacecafebeefull};
	msgpack_packer pk;
	int i;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 4);
	pack_str(&pk, "found", 5);
	msgpack_pack_true(&pk);
	pack_str(&pk, "handle", 6);
	msgpack_pack_map(&pk, 4);
	for (i = 0; i < 4; i++) {
		pack_str(&pk, hk[i], strlen(hk[i]));
		msgpack_pack_uint64(&pk, hv[i]);
	}
	pack_str(&pk, "kv_offset", 9);
	msgpack_pack_uint64(&pk, 123ull << 20);
	pack_str(&pk, "kv_length", 9);
	msgpack_pack_uint64(&pk, 1ull << 20);
}

/* ---- the decoders compared ---- */

static int batch_msgpk(const uint8_t *p, size_t n)
{
	struct mp_rd r;
	struct mp_val v;
	uint64_t s = 0;
	uint32_t i, k;

	mp_rd_init(&r, p, n);
	if (mp_read(&r, &v) || v.type != MP_MAP || mp_read(&r, &v) ||
	    v.type != MP_STR || mp_read(&r, &v) || v.type != MP_ARRAY)
		return -1;
	k = v.n;
	for (i = 0; i < k; i++) {
		if (mp_read(&r, &v) || v.type != MP_STR)
			return -1;
		s += v.len + v.ptr[v.len - 1];
	}
	sink += s;
	return 0;
}

static int batch_msgpackc(msgpack_unpacked *u, const uint8_t *p, size_t n)
{
	const msgpack_object_array *a;
	const msgpack_object *o;
	size_t off = 0;
	uint64_t s = 0;
	uint32_t i;

	if (msgpack_unpack_next(u, (const char *)p, n, &off) !=
		    MSGPACK_UNPACK_SUCCESS ||
	    u->data.type != MSGPACK_OBJECT_MAP || u->data.via.map.size != 1)
		return -1;
	o = &u->data.via.map.ptr[0].val;
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return -1;
	a = &o->via.array;
	for (i = 0; i < a->size; i++) {
		o = &a->ptr[i];
		if (o->type != MSGPACK_OBJECT_STR)
			return -1;
		s += o->via.str.size +
		     (uint8_t)o->via.str.ptr[o->via.str.size - 1];
	}
	sink += s;
	return 0;
}

static bool key_eq(const msgpack_object *k, const char *lit)
{
	size_t n = strlen(lit);

	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	       !memcmp(k->via.str.ptr, lit, n);
}

static int reply_msgpackc(msgpack_unpacked *u, const uint8_t *p, size_t n)
{
	const msgpack_object_kv *kv, *hk;
	size_t off = 0;
	uint64_t s = 0;
	uint32_t i, j;

	if (msgpack_unpack_next(u, (const char *)p, n, &off) !=
		    MSGPACK_UNPACK_SUCCESS ||
	    u->data.type != MSGPACK_OBJECT_MAP)
		return -1;
	for (i = 0; i < u->data.via.map.size; i++) {
		kv = &u->data.via.map.ptr[i];
		if (key_eq(&kv->key, "found")) {
			s += kv->val.via.boolean;
		} else if (key_eq(&kv->key, "handle")) {
			for (j = 0; j < kv->val.via.map.size; j++) {
				hk = &kv->val.via.map.ptr[j];
				if (key_eq(&hk->key, "region_id") ||
				    key_eq(&hk->key, "offset") ||
				    key_eq(&hk->key, "length") ||
				    key_eq(&hk->key, "auth_token"))
					s += hk->val.via.u64;
			}
		} else if (key_eq(&kv->key, "kv_offset") ||
			   key_eq(&kv->key, "kv_length")) {
			s += kv->val.via.u64;
		}
	}
	sink += s;
	return 0;
}

/* ---- timing ---- */

/* {"x": [nil x n]} after a BATCH_EXISTS_KV header: well-formed, skipped */
static uint8_t *hostile_body(size_t n, size_t *len)
{
	uint8_t *b = malloc(MDS_HDR_SIZE + 8 + n);

	if (!b)
		return NULL;
	mds_hdr_put(b, MDS_BATCH_EXISTS_KV, 0, 1, (uint32_t)(8 + n));
	memcpy(b + MDS_HDR_SIZE, "\x81\xa1x\xdd", 4);
	put_u32be(b + MDS_HDR_SIZE + 4, (uint32_t)n);
	memset(b + MDS_HDR_SIZE + 8, 0xc0, n);
	*len = MDS_HDR_SIZE + 8 + n;
	return b;
}

/* resident growth while @which holds a decoded hostile body of @n values */
static void memory_cost(size_t n, struct mds *s, struct buf *out)
{
	uint64_t r0, g_mp, g_mc;
	msgpack_unpacked u;
	size_t len, off = 0;
	uint8_t *b = hostile_body(n, &len);

	if (!b)
		return;
	r0 = bench_rss_bytes();
	out->len = 0;
	mds_handle(s, b, len, NULL, out, NULL);
	g_mp = bench_rss_bytes() - r0;
	if (out->len < MDS_HDR_SIZE || memmem(out->data, out->len, "error", 5))
		fprintf(stderr, "msgpack-read: the server refused the body\n");
	msgpack_unpacked_init(&u);
	r0 = bench_rss_bytes();
	if (msgpack_unpack_next(&u, (const char *)b + MDS_HDR_SIZE,
				len - MDS_HDR_SIZE,
				&off) != MSGPACK_UNPACK_SUCCESS)
		fprintf(stderr, "msgpack-read: msgpack-c refused the body\n");
	g_mc = bench_rss_bytes() - r0;
	msgpack_unpacked_destroy(&u);
	printf("RESULT what=memory payload_mb=%.1f msgpk_growth_mb=%.1f "
	       "msgpackc_growth_mb=%.1f amplification=%.1f "
	       "at_max_msg_mb=%.0f\n",
	       (double)len / 1048576, (double)g_mp / 1048576,
	       (double)g_mc / 1048576, (double)g_mc / (double)len,
	       (double)g_mc / (double)len * (double)SERVER_MAX_MSG / 1048576);
	printf("verdict: one well-formed %.0f MiB request makes maru-server "
	       "hold %.0f MiB more with msgpack-c reading (%.1f MiB with its "
	       "own reader); at the %lld MiB message limit, %.0f MiB\n",
	       (double)len / 1048576, (double)g_mc / 1048576,
	       (double)g_mp / 1048576, SERVER_MAX_MSG >> 20,
	       (double)g_mc / (double)len * (double)SERVER_MAX_MSG / 1048576);
	free(b);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[n / 2];
}

int main(int argc, char **argv)
{
	uint32_t nkeys = 256, i;
	uint64_t nindex = 1000000, reps, j;
	int rounds = 15, rd, a;
	double call_us = 23;
	size_t hostile = 16u << 20;
	double t_mp[MAX_ROUNDS], t_mc[MAX_ROUNDS], t_h[MAX_ROUNDS];
	double t_rmp[MAX_ROUNDS], t_rmc[MAX_ROUNDS];
	double mp, mc, hd, rmp, rmc, server, call;
	struct mds_config cfg = {.rm_address = "x", .eviction = "none"};
	struct mds_str inst = {"bench", 5}, none = {NULL, 0};
	msgpack_sbuffer batch, reply;
	struct buf out = BUF_INIT;
	struct maru__reply rep;
	msgpack_unpacked u;
	struct rm_handle h;
	struct mds s;
	uint64_t t0;
	char k[64];

	for (a = 1; a + 1 < argc; a += 2) {
		if (!strcmp(argv[a], "--keys"))
			nkeys = (uint32_t)atoi(argv[a + 1]);
		else if (!strcmp(argv[a], "--index"))
			nindex = strtoull(argv[a + 1], NULL, 10);
		else if (!strcmp(argv[a], "--rounds"))
			rounds = atoi(argv[a + 1]);
		else if (!strcmp(argv[a], "--call-us"))
			call_us = atof(argv[a + 1]);
		else if (!strcmp(argv[a], "--hostile-mb"))
			hostile = (size_t)atoi(argv[a + 1]) << 20;
	}
	if (rounds < 1 || rounds > MAX_ROUNDS || !nkeys || !nindex) {
		fprintf(stderr,
			"usage: %s [--keys N] [--index N] "
			"[--rounds 1..%d] [--call-us US] [--hostile-mb N]\n",
			argv[0], MAX_ROUNDS);
		return 2;
	}

	/* an index of nindex keys; the batch asks for keys spread over it */
	mds_init(&s, &cfg, &nop_ops, NULL, 99);
	mds_alloc(&s, inst, none, 2 << 20, NULL, &h, NULL);
	for (j = 0; j < nindex; j++) {
		struct mds_reg e = {{NULL, 0, KEY_STR, {0}}, 1, j, 4096};

		e.key.len = (uint32_t)snprintf(k, sizeof(k), KEYFMT, j);
		e.key.ptr = (const uint8_t *)k;
		mds_register(&s, &e, NULL);
	}
	while (ix_rehash_for(&s.kv, 1000000000))
		;
	batch_body(&batch, nkeys, nindex / nkeys ? nindex / nkeys : 1);
	lookup_reply(&reply);
	msgpack_unpacked_init(&u);

	reps = 2000000 / nkeys + 1;
	for (rd = 0; rd < rounds; rd++) {
		const uint8_t *bp = (const uint8_t *)batch.data + MDS_HDR_SIZE;
		size_t bn = batch.size - MDS_HDR_SIZE;

		t0 = now_ns();
		for (j = 0; j < reps; j++)
			if (batch_msgpk(bp, bn))
				return 1;
		t_mp[rd] = (double)(now_ns() - t0) / (double)reps;
		t0 = now_ns();
		for (j = 0; j < reps; j++)
			if (batch_msgpackc(&u, bp, bn))
				return 1;
		t_mc[rd] = (double)(now_ns() - t0) / (double)reps;
		t0 = now_ns();
		for (j = 0; j < reps / 4 + 1; j++)
			mds_handle(&s, (const uint8_t *)batch.data, batch.size,
				   NULL, &out, NULL);
		t_h[rd] = (double)(now_ns() - t0) / (double)(reps / 4 + 1);

		t0 = now_ns();
		for (i = 0; i < 200000; i++)
			if (maru__decode_reply((const uint8_t *)reply.data,
					       reply.size, &rep) ||
			    !rep.lookup.found)
				return 1;
		t_rmp[rd] = (double)(now_ns() - t0) / 200000;
		t0 = now_ns();
		for (i = 0; i < 200000; i++)
			if (reply_msgpackc(&u, (const uint8_t *)reply.data,
					   reply.size))
				return 1;
		t_rmc[rd] = (double)(now_ns() - t0) / 200000;
	}
	mp = median(t_mp, rounds);
	mc = median(t_mc, rounds);
	hd = median(t_h, rounds);
	rmp = median(t_rmp, rounds);
	rmc = median(t_rmc, rounds);
	server = (hd - mp + mc) / hd;
	call = (call_us * 1000 + rmc - rmp) / (call_us * 1000);
	printf("RESULT what=batch keys=%u index=%" PRIu64 " msgpk_ns=%.0f "
	       "msgpackc_ns=%.0f decode_ratio=%.2f handler_ns=%.0f "
	       "handler_keys_per_s=%.0f server_ratio=%.3f\n",
	       nkeys, nindex, mp, mc, mc / mp, hd, nkeys / hd * 1e9, server);
	printf("RESULT what=reply msgpk_ns=%.0f msgpackc_ns=%.0f "
	       "decode_ratio=%.2f call_us=%.1f call_ratio=%.4f\n",
	       rmp, rmc, rmc / rmp, call_us, call);
	printf("verdict: BATCH_LOOKUP_KV(%u) in the server would cost %.3fx "
	       "with msgpack-c reading; a libmaru call %.4fx (keep a "
	       "hand-written reader only at >= 1.3x)\n",
	       nkeys, server, call);
	msgpack_unpacked_destroy(&u);
	if (hostile)
		memory_cost(hostile, &s, &out);
	msgpack_sbuffer_destroy(&batch);
	msgpack_sbuffer_destroy(&reply);
	buf_free(&out);
	mds_destroy(&s);
	return sink == 42; /* keeps the walks from being optimised away */
}
