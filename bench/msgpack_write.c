/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msgpack_write.c - MessagePack writing on the paths where it costs most:
 * the project's writer (src/common/msgpk.h, mp_put_*) against msgpack-c's
 * packer into its own msgpack_sbuffer
 *
 *   msgpack-write [--keys 256] [--index 1000000] [--rounds 15] [--call-us 23]
 *
 * The question it answered: one writer for the project -- msgpack-c's,
 * unless writing with it costs at least 1.3x on a hot path.  The project
 * then had a writer of its own (mpwr below); it did not reach 1.3x on any
 * path (docs/architecture.md, "Dependencies", has the figures), so the
 * writer is msgpack-c's packer, and mp_put_* only give it a struct buf to
 * write into (its calls inline: what a value costs is the same as with the
 * hand-written writer).  What this measures now: msgpack-c's packer
 * writing through mp_wr (mpwr) against writing into an msgpack_sbuffer
 * through a function pointer (msgpackc), on the same values.
 *
 * Measured in one process, the variants alternating round by round,
 * medians of --rounds rounds:
 *
 *  batch  maru-server's BATCH_LOOKUP_KV reply of --keys hits, written as
 *         the server writes it (a map, "entries", an array; per hit the
 *         bytes up to kv_offset's value copied from the region's
 *         pre-encoded prefix, then kv_offset, kv_length, kv_gen)
 *    mpwr      mp_put_* into a reused buffer
 *    msgpackc  msgpack-c's packer into a reused msgpack_sbuffer (cleared,
 *              not freed), the prefix copied with msgpack_sbuffer_write()
 *    handler   the whole request in maru-server's code: mds_handle() on an
 *              index of --index keys (decode, every lookup, the reply)
 *    "server ratio" = (handler - mpwr + msgpackc) / handler: what the
 *    request would cost the server with msgpack-c writing.
 *
 *  record  maru-server's journal record of a REGISTER (array: type, tag,
 *          key, region, offset, length, gen): the other writing on the
 *          REGISTER path, against the REGISTER handler's time
 *
 *  request libmaru's BATCH_REGISTER_KV of 64 entries (a store of 64 keys)
 *          as libmaru writes it (msgpack-c today) and with the project's
 *          writer; "call ratio" puts the difference on a libmaru call of
 *          --call-us
 *
 * Output: RESULT lines, then a verdict line.
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
#include "nop_rm.h"
#include "store.h"
#include "util.h"

#define KEYFMT "lmcache@model-8b@1@0@%016" PRIx64
#define MAX_ROUNDS 99
#define NREG 64

static volatile uint64_t sink;

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

/* ---- the batch reply, both ways ---- */

static void reply_mpwr(struct buf *b, const struct mds_region *r, uint32_t n)
{
	struct mp_wr w = {b, 0};
	uint32_t i;

	b->len = 0;
	mp_put_map(&w, 1);
	mp_put_key(&w, "entries");
	mp_put_array(&w, n);
	for (i = 0; i < n; i++) {
		mp_put_raw(&w, r->hit, r->hit_len);
		mp_put_uint(&w, (uint64_t)i * 4096);
		mp_put_key(&w, "kv_length");
		mp_put_uint(&w, 4096);
		mp_put_key(&w, "kv_gen");
		mp_put_uint(&w, 1000000 + i);
	}
	sink += b->len;
}

static void reply_msgpackc(msgpack_sbuffer *sb, const struct mds_region *r,
			   uint32_t n)
{
	msgpack_packer pk;
	uint32_t i;

	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	pack_str(&pk, "entries", 7);
	msgpack_pack_array(&pk, n);
	for (i = 0; i < n; i++) {
		msgpack_sbuffer_write(sb, (const char *)r->hit, r->hit_len);
		msgpack_pack_uint64(&pk, (uint64_t)i * 4096);
		pack_str(&pk, "kv_length", 9);
		msgpack_pack_uint64(&pk, 4096);
		pack_str(&pk, "kv_gen", 6);
		msgpack_pack_uint64(&pk, 1000000 + i);
	}
	sink += sb->size;
}

/* ---- a REGISTER's journal record, both ways ---- */

static void record_mpwr(struct buf *b, const char *k, size_t kn)
{
	struct mp_wr w = {b, 0};

	b->len = 0;
	mp_put_array(&w, 7);
	mp_put_uint(&w, 9);
	mp_put_uint(&w, 0);
	mp_put_bin(&w, k, (uint32_t)kn);
	mp_put_uint(&w, 7);
	mp_put_uint(&w, 123ull << 20);
	mp_put_uint(&w, 1ull << 20);
	mp_put_uint(&w, 99999);
	sink += b->len;
}

static void record_msgpackc(msgpack_sbuffer *sb, const char *k, size_t kn)
{
	msgpack_packer pk;

	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 7);
	msgpack_pack_uint64(&pk, 9);
	msgpack_pack_uint64(&pk, 0);
	msgpack_pack_bin(&pk, kn);
	msgpack_pack_bin_body(&pk, k, kn);
	msgpack_pack_uint64(&pk, 7);
	msgpack_pack_uint64(&pk, 123ull << 20);
	msgpack_pack_uint64(&pk, 1ull << 20);
	msgpack_pack_uint64(&pk, 99999);
	sink += sb->size;
}

/* ---- libmaru's BATCH_REGISTER_KV request, both ways ---- */

static void request_msgpackc(msgpack_sbuffer *sb, char (*keys)[64],
			     const size_t *kn)
{
	msgpack_packer pk;
	int i;

	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 1);
	pack_str(&pk, "entries", 7);
	msgpack_pack_array(&pk, NREG);
	for (i = 0; i < NREG; i++) {
		msgpack_pack_map(&pk, 4);
		pack_str(&pk, "key", 3);
		pack_str(&pk, keys[i], kn[i]);
		pack_str(&pk, "region_id", 9);
		msgpack_pack_uint64(&pk, 7);
		pack_str(&pk, "kv_offset", 9);
		msgpack_pack_uint64(&pk, (uint64_t)i << 20);
		pack_str(&pk, "kv_length", 9);
		msgpack_pack_uint64(&pk, 1ull << 20);
	}
	sink += sb->size;
}

static void request_mpwr(struct buf *b, char (*keys)[64], const size_t *kn)
{
	struct mp_wr w = {b, 0};
	int i;

	b->len = 0;
	mp_put_map(&w, 1);
	mp_put_key(&w, "entries");
	mp_put_array(&w, NREG);
	for (i = 0; i < NREG; i++) {
		mp_put_map(&w, 4);
		mp_put_key(&w, "key");
		mp_put_str(&w, keys[i], (uint32_t)kn[i]);
		mp_put_key(&w, "region_id");
		mp_put_uint(&w, 7);
		mp_put_key(&w, "kv_offset");
		mp_put_uint(&w, (uint64_t)i << 20);
		mp_put_key(&w, "kv_length");
		mp_put_uint(&w, 1ull << 20);
	}
	sink += b->len;
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

/* ns per call of @fn(@arg), @reps times */
#define TIME(reps, stmt)                                                       \
	({                                                                     \
		uint64_t t0_ = now_ns(), j_;                                   \
		for (j_ = 0; j_ < (reps); j_++)                                \
			stmt;                                                  \
		(double)(now_ns() - t0_) / (double)(reps);                     \
	})

int main(int argc, char **argv)
{
	uint32_t nkeys = 256;
	uint64_t nindex = 1000000, reps, j;
	int rounds = 15, rd, a, i;
	double call_us = 23;
	double t_mp[MAX_ROUNDS], t_mc[MAX_ROUNDS], t_h[MAX_ROUNDS];
	double t_jmp[MAX_ROUNDS], t_jmc[MAX_ROUNDS], t_reg[MAX_ROUNDS];
	double t_qmp[MAX_ROUNDS], t_qmc[MAX_ROUNDS];
	double mp, mc, hd, jmp, jmc, reg, qmp, qmc, server, regr, call;
	struct mds_config cfg = {.rm_address = "x", .eviction = "none"};
	struct mds_str inst = {"bench", 5}, none = {NULL, 0};
	struct buf out = BUF_INIT, wb = BUF_INIT;
	const struct mds_region *r;
	msgpack_sbuffer batch, sb;
	char keys[NREG][64];
	size_t kn[NREG];
	struct rm_handle h;
	struct mds s;
	char k[64];
	uint64_t next = 0;

	for (a = 1; a + 1 < argc; a += 2) {
		if (!strcmp(argv[a], "--keys"))
			nkeys = (uint32_t)atoi(argv[a + 1]);
		else if (!strcmp(argv[a], "--index"))
			nindex = strtoull(argv[a + 1], NULL, 10);
		else if (!strcmp(argv[a], "--rounds"))
			rounds = atoi(argv[a + 1]);
		else if (!strcmp(argv[a], "--call-us"))
			call_us = atof(argv[a + 1]);
	}
	if (rounds < 1 || rounds > MAX_ROUNDS || !nkeys || !nindex) {
		fprintf(stderr,
			"usage: %s [--keys N] [--index N] [--rounds 1..%d] "
			"[--call-us US]\n",
			argv[0], MAX_ROUNDS);
		return 2;
	}
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
	r = mds_first_region(&s);
	batch_body(&batch, nkeys, nindex / nkeys ? nindex / nkeys : 1);
	msgpack_sbuffer_init(&sb);
	for (i = 0; i < NREG; i++)
		kn[i] = (size_t)snprintf(keys[i], sizeof(keys[i]), KEYFMT,
					 (uint64_t)i);
	reps = 2000000 / nkeys + 1;
	for (rd = 0; rd < rounds; rd++) {
		t_mp[rd] = TIME(reps, reply_mpwr(&wb, r, nkeys));
		t_mc[rd] = TIME(reps, reply_msgpackc(&sb, r, nkeys));
		t_h[rd] = TIME(reps / 4 + 1,
			       mds_handle(&s, (const uint8_t *)batch.data,
					  batch.size, NULL, &out, NULL));
		t_jmp[rd] = TIME(2000000, record_mpwr(&wb, keys[0], kn[0]));
		t_jmc[rd] = TIME(2000000, record_msgpackc(&sb, keys[0], kn[0]));
		/* REGISTER of new keys (the index grows by 200000 a round) */
		t_reg[rd] = TIME(
			200000, ({
				struct mds_reg e = {
					{NULL, 0, KEY_STR, {0}}, 1, 0, 64};

				e.key.len = (uint32_t)snprintf(
					k, sizeof(k), "reg-%" PRIu64, next++);
				e.key.ptr = (const uint8_t *)k;
				mds_register(&s, &e, NULL);
			}));
		t_qmp[rd] = TIME(200000, request_mpwr(&wb, keys, kn));
		t_qmc[rd] = TIME(200000, request_msgpackc(&sb, keys, kn));
	}
	mp = median(t_mp, rounds);
	mc = median(t_mc, rounds);
	hd = median(t_h, rounds);
	jmp = median(t_jmp, rounds);
	jmc = median(t_jmc, rounds);
	reg = median(t_reg, rounds);
	qmp = median(t_qmp, rounds);
	qmc = median(t_qmc, rounds);
	server = (hd - mp + mc) / hd;
	regr = (reg - jmp + jmc) / reg;
	call = (call_us * 1000 + qmc - qmp) / (call_us * 1000);
	printf("RESULT what=batch keys=%u index=%" PRIu64 " mpwr_ns=%.0f "
	       "msgpackc_ns=%.0f write_ratio=%.2f handler_ns=%.0f "
	       "server_ratio=%.3f\n",
	       nkeys, nindex, mp, mc, mc / mp, hd, server);
	printf("RESULT what=record mpwr_ns=%.1f msgpackc_ns=%.1f "
	       "write_ratio=%.2f register_ns=%.0f register_ratio=%.3f\n",
	       jmp, jmc, jmc / jmp, reg, regr);
	printf("RESULT what=request entries=%d mpwr_ns=%.0f msgpackc_ns=%.0f "
	       "write_ratio=%.2f call_us=%.1f call_ratio=%.4f\n",
	       NREG, qmp, qmc, qmc / qmp, call_us, call);
	printf("verdict: writing into an msgpack_sbuffer instead, "
	       "BATCH_LOOKUP_KV(%u) in the server would cost %.3fx, a "
	       "REGISTER's journal record %.3fx, a libmaru "
	       "BATCH_REGISTER_KV(%d) "
	       "call %.4fx\n",
	       nkeys, server, regr, NREG, call);
	msgpack_sbuffer_destroy(&batch);
	msgpack_sbuffer_destroy(&sb);
	buf_free(&out);
	buf_free(&wb);
	mds_destroy(&s);
	return sink == 42;
}
