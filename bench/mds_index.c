/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mds_index.c - microbenchmark of maru-server's KV index and request path
 *
 *   mds-index [--sizes 10000,1000000,10000000] [--lookups 2000000]
 *             [--fault-trace 1]
 *
 * For each index size N (keys like LMCache's, ~37 bytes):
 *  - insert N keys one by one through the index, timing every insert:
 *    the longest single insert is the worst pause of incremental growth
 *    (the table doubles ~log2(N) times on the way).  Reported twice: wall
 *    clock per insert, and this thread's CPU time per block of 64 inserts
 *    (an upper bound of any single insert's CPU time; a preemption by
 *    another process on a shared machine does not inflate it, a stolen
 *    VM CPU may);
 *  - bytes per key: resident memory (/proc/self/statm) added by the index
 *    and its entries, divided by N, plus its split into bucket arrays and
 *    malloc()ed entries;
 *  - lookup cost, ns per lookup (hash included):
 *      hot     10 000 distinct keys of the index, looked up repeatedly:
 *              the algorithmic cost (chain walk), cache-resident
 *      uniform keys drawn from all N: includes the cache and TLB misses
 *              that any structure larger than the caches pays
 *      batch   uniform, in groups of 8 with the buckets prefetched first,
 *              as BATCH_LOOKUP_KV does
 *  - the pause floor: a loop that only reads the clock, for as long as
 *    the inserts took, and the longest gap between two reads (on a VM the
 *    host takes the vCPU away now and then: no code is faster than that);
 *  - the resize still in progress after the last insert: buckets left to
 *    move and the time ix_rehash_for() takes to finish it (what maru-server
 *    does while idle);
 *  - the whole in-process request path (decode, lookup, encode) of a
 *    LOOKUP_KV hit through mds_handle(), uniform keys.
 * --fault-trace 1 counts the page faults of every insert (two more system
 * calls each) and says how many of the inserts over 100 us and over 1 ms
 * took one: on our VMs a page fault itself sometimes takes over 1 ms.
 * Output: one key=value line per size.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "handler.h"
#include "index.h"
#include "store.h"
#include "nop_rm.h"
#include "util.h"

#define KEYFMT "lmcache@model-8b@1@0@%016" PRIx64
#define HOT 10000

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static int key_of(char *s, size_t n, uint64_t i)
{
	return snprintf(s, n, KEYFMT, mix(i));
}

/* page faults of this thread so far (minor and major) */
static uint64_t faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return (uint64_t)(ru.ru_minflt + ru.ru_majflt);
}

/*
 * The pause floor of the machine: spin for @ns reading the clock and
 * count the gaps between consecutive reads.  On a VM whose vCPU the host
 * takes away now and then, a loop that does nothing also "pauses"; an
 * insert pause is the index's own only where this loop has none.
 */
static void gap_floor(uint64_t ns, uint64_t *max, uint64_t *over_100us,
		      uint64_t *over_1ms)
{
	uint64_t p = now_ns(), end = p + ns, t, d;

	*max = *over_100us = *over_1ms = 0;
	while (p < end) {
		t = now_ns();
		d = t - p;
		if (d > *max)
			*max = d;
		*over_100us += d > 100000;
		*over_1ms += d > 1000000;
		p = t;
	}
}

static bool fault_trace; /* --fault-trace: page faults of every insert */

/* keys to look up, pre-formatted so that formatting is not timed */
struct keyset {
	char (*k)[40];
	uint8_t *len;
	size_t n;
};

static void keyset_make(struct keyset *ks, size_t n, uint64_t range,
			uint64_t seed)
{
	size_t i;

	ks->k = malloc(n * sizeof(*ks->k));
	ks->len = malloc(n);
	if (!ks->k || !ks->len)
		exit(1);
	ks->n = n;
	for (i = 0; i < n; i++)
		ks->len[i] = (uint8_t)key_of(ks->k[i], sizeof(ks->k[i]),
					     mix(seed + i) % range);
}

static void keyset_free(struct keyset *ks)
{
	free(ks->k);
	free(ks->len);
}

static double time_lookups(struct ix *ix, const struct keyset *ks,
			   uint64_t total)
{
	uint64_t t0 = now_ns(), i, miss = 0;
	struct ix_key k = {NULL, 0, KEY_STR};

	for (i = 0; i < total; i++) {
		size_t j = i % ks->n;

		k.ptr = (const uint8_t *)ks->k[j];
		k.len = ks->len[j];
		miss += !ix_find(ix, &k, ix_hash(ix, &k));
	}
	if (miss)
		fprintf(stderr, "unexpected misses: %" PRIu64 "\n", miss);
	return (double)(now_ns() - t0) / (double)total;
}

static double time_batch_lookups(struct ix *ix, const struct keyset *ks,
				 uint64_t total)
{
	uint64_t t0 = now_ns(), i, h[8], miss = 0;
	struct ix_key k[8];
	int n;

	for (i = 0; i < total; i += 8) {
		for (n = 0; n < 8; n++) {
			size_t j = (i + (uint64_t)n) % ks->n;

			k[n].ptr = (const uint8_t *)ks->k[j];
			k[n].len = ks->len[j];
			k[n].tag = KEY_STR;
			h[n] = ix_hash(ix, &k[n]);
			ix_prefetch(ix, h[n]);
		}
		for (n = 0; n < 8; n++)
			miss += !ix_find(ix, &k[n], h[n]);
	}
	if (miss)
		fprintf(stderr, "unexpected misses: %" PRIu64 "\n", miss);
	return (double)(now_ns() - t0) / (double)total;
}

/* LOOKUP_KV through mds_handle() with pre-built bodies */

static double time_requests(uint64_t n, uint64_t total)
{
	struct mds_config cfg = {.rm_address = "x", .eviction = "none"};
	struct buf out = BUF_INIT, body = BUF_INIT;
	struct mds_str inst = {"bench", 5}, none = {NULL, 0};
	struct keyset ks;
	struct rm_handle h;
	struct mds s;
	uint64_t i, t0;
	double r;

	mds_init(&s, &cfg, &nop_ops, NULL, 99);
	mds_alloc(&s, inst, none, 2 << 20, NULL, &h, NULL);
	for (i = 0; i < n; i++) {
		struct mds_reg e = {{NULL, 0, KEY_STR, {0}}, 1, i, 4096};
		char k[40];

		e.key.len = (uint32_t)key_of(k, sizeof(k), i);
		e.key.ptr = (const uint8_t *)k;
		mds_register(&s, &e, NULL);
	}
	while (ix_rehash_for(&s.kv, 1000000000))
		;
	keyset_make(&ks, 4096, n, 777);
	/* bodies: header + {"key": k} */
	t0 = now_ns();
	for (i = 0; i < total; i++) {
		size_t j = i % ks.n;
		uint8_t hdr[MDS_HDR_SIZE];
		uint8_t m[2 + 3 + 2];

		buf_reset(&body);
		mds_hdr_put(hdr, MDS_LOOKUP_KV, 0, (uint32_t)i,
			    (uint32_t)(1 + 4 + 2 + ks.len[j]));
		buf_put(&body, hdr, sizeof(hdr));
		m[0] = 0x81;
		m[1] = 0xa3;
		memcpy(m + 2, "key", 3);
		m[5] = 0xd9;
		m[6] = ks.len[j];
		buf_put(&body, m, 7);
		buf_put(&body, ks.k[j], ks.len[j]);
		mds_handle(&s, body.data, body.len, NULL, &out, NULL);
		if (out.len < 30)
			fprintf(stderr, "lookup missed\n");
	}
	r = (double)(now_ns() - t0) / (double)total;
	keyset_free(&ks);
	buf_free(&out);
	buf_free(&body);
	mds_destroy(&s);
	return r;
}

static void run(uint64_t n, uint64_t lookups)
{
	struct keyset hot, uni;
	struct ix ix;
	uint64_t i, t, dt, max_ns = 0, over_100us = 0, over_1ms = 0;
	uint64_t max_cpu = 0, cpu_over_1ms = 0, blk_cpu;
	uint64_t flt = 0, slow_flt[2] = {0, 0}, slow[2] = {0, 0};
	uint64_t rss0, rss1, tables, left, fin, g_max, g_100us, g_1ms;
	struct mallinfo2 mi0, mi1;
	char k[40];
	double t_hot, t_uni, t_batch, t_req;

	malloc_trim(0);
	rss0 = bench_rss_bytes();
	mi0 = mallinfo2();
	ix_init(&ix, 0x5eed);
	t = now_ns();
	blk_cpu = bench_cpu_ns();
	for (i = 0; i < n; i++) {
		struct ix_key key = {(const uint8_t *)k, 0, KEY_STR};
		struct ix_entry *e;
		uint64_t a, b;

		key.len = (uint32_t)key_of(k, sizeof(k), i);
		if (fault_trace)
			flt = faults();
		a = now_ns();
		if (ix_insert(&ix, &key, ix_hash(&ix, &key), &e) != 1) {
			fprintf(stderr, "insert failed\n");
			exit(1);
		}
		e->slot = 0;
		e->off = i;
		e->len = 4096;
		b = now_ns();
		dt = b - a;
		if (dt > max_ns)
			max_ns = dt;
		over_100us += dt > 100000;
		over_1ms += dt > 1000000;
		if (fault_trace && dt > 100000) {
			bool f = faults() != flt;
			int j = dt > 1000000;

			slow[j]++;
			slow_flt[j] += f;
		}
		/* CPU time per block of 64 inserts: a cheap upper bound */
		if ((i & 63) == 63) {
			uint64_t c = bench_cpu_ns();

			if (c - blk_cpu > max_cpu)
				max_cpu = c - blk_cpu;
			cpu_over_1ms += c - blk_cpu > 1000000;
			blk_cpu = c;
		}
	}
	t = now_ns() - t;
	gap_floor(t, &g_max, &g_100us, &g_1ms);
	if (fault_trace)
		printf("fault_trace keys=%" PRIu64 " inserts_100us_1ms=%" PRIu64
		       " of_them_faulting=%" PRIu64 " inserts_over_1ms=%" PRIu64
		       " of_them_faulting=%" PRIu64 "\n",
		       n, slow[0], slow_flt[0], slow[1], slow_flt[1]);
	/* what is left of the last resize, as maru-server finishes it when
	 * idle (buckets still to move, and the time it takes) */
	left = ix_rehashing(&ix) ? ix.t[0].size - (uint64_t)ix.rehash_idx : 0;
	fin = now_ns();
	while (ix_rehash_for(&ix, 1000000000) ||
	       ix_release_for(&ix, 1000000000))
		;
	fin = now_ns() - fin;
	rss1 = bench_rss_bytes();
	mi1 = mallinfo2();
	tables = ix_mem_tables(&ix);

	keyset_make(&hot, n < HOT ? n : HOT, n, 1);
	keyset_make(&uni, 1 << 20, n, 2);
	time_lookups(&ix, &hot, 200000); /* warm */
	t_hot = time_lookups(&ix, &hot, lookups);
	t_uni = time_lookups(&ix, &uni, lookups);
	t_batch = time_batch_lookups(&ix, &uni, lookups);
	keyset_free(&hot);
	keyset_free(&uni);
	ix_destroy(&ix);
	t_req = time_requests(n, lookups / 2);

	printf("keys=%" PRIu64 " insert_ns=%.0f max_insert_pause_us=%.1f "
	       "max_block64_cpu_us=%.1f cpu_over_1ms=%" PRIu64 " "
	       "inserts_over_100us=%" PRIu64 " inserts_over_1ms=%" PRIu64
	       " bytes_per_key_rss=%.1f bytes_per_key_malloc=%.1f "
	       "table_bytes_per_key=%.1f key_len=%d lookup_hot_ns=%.1f "
	       "lookup_uniform_ns=%.1f lookup_batch_ns=%.1f "
	       "request_lookup_ns=%.1f resize_left_buckets=%" PRIu64
	       " resize_finish_ms=%.1f floor_max_gap_us=%.1f"
	       " floor_gaps_over_100us=%" PRIu64 " floor_gaps_over_1ms=%" PRIu64
	       "\n",
	       n, (double)t / (double)n, max_ns / 1e3, max_cpu / 1e3,
	       cpu_over_1ms, over_100us, over_1ms,
	       (double)(rss1 - rss0) / (double)n,
	       (double)(mi1.uordblks - mi0.uordblks + tables) / (double)n,
	       (double)tables / (double)n, key_of(k, sizeof(k), 1), t_hot,
	       t_uni, t_batch, t_req, left, fin / 1e6, g_max / 1e3, g_100us,
	       g_1ms);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	char sizes[256] = "10000,1000000,10000000", *tok, *save = NULL;
	uint64_t lookups = 2000000;
	int i;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--sizes"))
			snprintf(sizes, sizeof(sizes), "%s", argv[i + 1]);
		else if (!strcmp(argv[i], "--lookups"))
			lookups = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--fault-trace"))
			fault_trace = atoi(argv[i + 1]);
	}
	for (tok = strtok_r(sizes, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save))
		run(strtoull(tok, NULL, 10), lookups);
	return 0;
}
