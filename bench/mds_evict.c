/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mds_evict.c - what eviction costs maru-server, in process
 *
 *   mds-evict [--keys 1000000]
 *
 * N LMCache-like keys (~37 bytes) registered into one region, twice: with
 * --eviction none and with lru.  Reported, same run:
 *  - bytes per key: resident memory added by the index and its entries
 *    divided by N (the LRU's links and the registration number live in
 *    every entry: the difference is its overhead);
 *  - register ns/key of each (the LRU insert on every new key);
 *  - LOOKUP-path touch: ns per mds_lookup() hit, none vs lru (the move to
 *    the list head on every use);
 *  - CPU per eviction: all N evicted through mds_evict(), the owner taking
 *    notices (each eviction queues one), in this thread's CPU time.
 * Output: key=value lines.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "index.h"
#include "nop_rm.h"
#include "store.h"
#include "util.h"

#define KEYFMT "lmcache@model-8b@1@0@%016" PRIx64

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

struct result {
	double bytes_per_key, reg_ns, lookup_ns, evict_cpu_ns;
};

static void run(const char *policy, uint64_t n, struct result *res)
{
	struct mds_config cfg = {.rm_address = "x", .eviction = policy};
	struct mds_str inst = {"bench", 5}, none = {NULL, 0};
	struct rm_handle h;
	const struct mds_region *reg;
	struct mds s;
	uint64_t i, t0, rss0, got, lookups = 2000000;
	char k[48];

	malloc_trim(0);
	rss0 = bench_rss_bytes();
	mds_init(&s, &cfg, &nop_ops, NULL, 99);
	mds_alloc(&s, inst, none, 1ull << 40, NULL, &h, NULL);
	/* the owner takes notices: each eviction queues one */
	mds_heartbeat(&s, inst, none, false, true, NULL);
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		struct mds_reg e = {{NULL, 0, KEY_STR, {0}}, 1, i * 4096, 4096};

		e.key.len = (uint32_t)snprintf(k, sizeof(k), KEYFMT, mix(i));
		e.key.ptr = (const uint8_t *)k;
		mds_register(&s, &e, NULL);
	}
	res->reg_ns = (double)(now_ns() - t0) / (double)n;
	while (ix_rehash_for(&s.kv, 1000000000))
		;
	res->bytes_per_key = (double)(bench_rss_bytes() - rss0) / (double)n;
	t0 = now_ns();
	for (i = 0; i < lookups; i++) {
		struct mds_key key = {NULL, 0, KEY_STR, {0}};

		/* a hot set of 10 000 keys: the touch, not the cache misses */
		key.len = (uint32_t)snprintf(k, sizeof(k), KEYFMT,
					     mix(i % 10000));
		key.ptr = (const uint8_t *)k;
		if (!mds_lookup(&s, &key, &reg))
			fprintf(stderr, "lookup missed\n");
	}
	res->lookup_ns = (double)(now_ns() - t0) / (double)lookups;
	res->evict_cpu_ns = 0;
	if (strcmp(policy, "none")) {
		t0 = bench_cpu_ns();
		got = mds_evict(&s, UINT64_MAX);
		res->evict_cpu_ns = (double)(bench_cpu_ns() - t0) / (double)n;
		if (got != n * 4096 || s.kv.count)
			fprintf(stderr,
				"evicted %" PRIu64 " bytes, %" PRIu64
				" keys left\n",
				got, (uint64_t)s.kv.count);
	}
	mds_destroy(&s);
}

int main(int argc, char **argv)
{
	uint64_t n = 1000000;
	struct result a, b;

	if (argc == 3 && !strcmp(argv[1], "--keys"))
		n = strtoull(argv[2], NULL, 10);
	run("none", n, &a);
	run("lru", n, &b);
	printf("keys=%" PRIu64 "\n", n);
	printf("bytes_per_key none=%.1f lru=%.1f overhead=%.1f\n",
	       a.bytes_per_key, b.bytes_per_key,
	       b.bytes_per_key - a.bytes_per_key);
	printf("register_ns none=%.1f lru=%.1f ratio=%.2f\n", a.reg_ns,
	       b.reg_ns, b.reg_ns / a.reg_ns);
	printf("lookup_hot_ns none=%.1f lru=%.1f ratio=%.2f\n", a.lookup_ns,
	       b.lookup_ns, b.lookup_ns / a.lookup_ns);
	printf("evict_cpu_ns_per_key lru=%.1f\n", b.evict_cpu_ns);
	return 0;
}
