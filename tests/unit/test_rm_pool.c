/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_pool.c - the resource manager's first-fit allocator (pool.c)
 *
 * Fit, alignment, split and merge, exhaustion, fragmentation, double
 * frees, recovery's pool_reserve, the cross-pool policy, a randomized run
 * against a bitmap model that predicts every offset, and fault injection
 * that fails each allocation in turn (pool.c is compiled with
 * test_rm_alloc_hook.h, so cmocka also checks for leaks).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <cmocka.h>

#include "pool.h"

int rm_fail_after = -1;
int rm_fail_always;

#define MiB (1ull << 20)
#define A (2 * MiB) /* the usual alignment */

static void setup_pool(struct pool *p, uint64_t base, uint64_t size,
		       uint64_t align)
{
	memset(p, 0, sizeof(*p));
	assert_int_equal(pool_init(p, base, size, align), 0);
	assert_true(pool_check(p));
}

static uint64_t alloc_ok(struct pool *p, uint64_t size)
{
	uint64_t off = 0, len = 0;

	assert_int_equal(pool_alloc(p, size, &off, &len), 0);
	assert_int_equal(off % p->align, 0);
	assert_int_equal(len % p->align, 0);
	assert_true(len >= size && len - size < p->align);
	assert_true(pool_check(p));
	return off;
}

static void test_init_rejects(void **state)
{
	struct pool p;

	memset(&p, 0, sizeof(p));
	assert_int_equal(pool_init(&p, A, 0, A), -EINVAL);
	assert_int_equal(pool_init(&p, A, 10 * A, 3 * MiB), -EINVAL);
	assert_int_equal(pool_init(&p, A, 10 * A, 0), -EINVAL);
	assert_int_equal(pool_init(&p, UINT64_MAX - 5, 10, 4096), -EINVAL);
}

static void test_fit_and_rounding(void **state)
{
	struct pool p;
	uint64_t off, len;

	setup_pool(&p, A, 64 * MiB, A);
	assert_int_equal(pool_alloc(&p, 0, &off, &len), -EINVAL);
	assert_int_equal(pool_alloc(&p, POOL_MAX_ALLOC + 1, &off, &len),
			 -EINVAL);
	assert_int_equal(pool_alloc(&p, 1, &off, &len), 0);
	assert_int_equal(off, A); /* data starts after the header unit */
	assert_int_equal(len, A);
	assert_int_equal(pool_alloc(&p, A, &off, &len), 0);
	assert_int_equal(off, 2 * A);
	assert_int_equal(len, A);
	assert_int_equal(pool_alloc(&p, A + 1, &off, &len), 0);
	assert_int_equal(off, 3 * A);
	assert_int_equal(len, 2 * A);
	assert_int_equal(p.free_size, 64 * MiB - 4 * A);
	assert_int_equal(pool_alloc(&p, 64 * MiB, &off, &len), -ENOMEM);
	pool_fini(&p);
}

static void test_unaligned_extent_keeps_leading_fragment(void **state)
{
	struct pool p;
	uint64_t off;

	/* base 4 KiB, align 2 MiB: the first start rounds up to 2 MiB */
	setup_pool(&p, 4096, 16 * MiB - 4096, A);
	off = alloc_ok(&p, 1);
	assert_int_equal(off, A);
	assert_int_equal(p.next, 2);
	assert_int_equal(p.ext[0].offset, 4096);
	assert_int_equal(p.ext[0].length, A - 4096);
	assert_int_equal(pool_free(&p, off, A), 0);
	assert_int_equal(p.next, 1);
	assert_int_equal(p.ext[0].length, 16 * MiB - 4096);
	pool_fini(&p);
}

static void test_first_fit_reuses_holes(void **state)
{
	struct pool p;
	uint64_t a, b, c, d, e;

	setup_pool(&p, A, 32 * A, A);
	a = alloc_ok(&p, 2 * A);
	b = alloc_ok(&p, 3 * A);
	c = alloc_ok(&p, A);
	assert_int_equal(pool_free(&p, b, 3 * A), 0);
	assert_true(pool_check(&p));
	/* fits in b's hole: first fit takes its start */
	d = alloc_ok(&p, A);
	assert_int_equal(d, b);
	/* 3 A does not fit the rest of the hole (2 A): goes after c */
	e = alloc_ok(&p, 3 * A);
	assert_int_equal(e, c + A);
	/* 2 A fits exactly in the remaining hole */
	assert_int_equal(alloc_ok(&p, 2 * A), b + A);
	(void)a;
	pool_fini(&p);
}

static void test_split_and_merge_all_orders(void **state)
{
	static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
					 {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
	struct pool p;
	uint64_t off[3];
	int o, i;

	for (o = 0; o < 6; o++) {
		setup_pool(&p, A, 16 * A, A);
		for (i = 0; i < 3; i++)
			off[i] = alloc_ok(&p, (uint64_t)(i + 1) * A);
		assert_int_equal(p.next, 1);
		for (i = 0; i < 3; i++) {
			int k = orders[o][i];

			assert_int_equal(
				pool_free(&p, off[k], (uint64_t)(k + 1) * A),
				0);
			assert_true(pool_check(&p));
		}
		/* everything merged back into the one initial extent */
		assert_int_equal(p.next, 1);
		assert_int_equal(p.ext[0].offset, A);
		assert_int_equal(p.ext[0].length, 16 * A);
		assert_int_equal(p.free_size, 16 * A);
		pool_fini(&p);
	}
}

static void test_exhaustion(void **state)
{
	struct pool p;
	uint64_t off, len, i;

	setup_pool(&p, A, 10 * A, A);
	for (i = 0; i < 10; i++)
		assert_int_equal(alloc_ok(&p, A), A + i * A);
	assert_int_equal(p.free_size, 0);
	assert_int_equal(p.next, 0);
	assert_int_equal(pool_alloc(&p, 1, &off, &len), -ENOMEM);
	assert_int_equal(pool_free(&p, 5 * A, A), 0);
	assert_int_equal(alloc_ok(&p, 1), 5 * A);
	pool_fini(&p);
}

static void test_fragmentation(void **state)
{
	struct pool p;
	uint64_t off[16], o, len;
	int i;

	setup_pool(&p, A, 16 * A, A);
	for (i = 0; i < 16; i++)
		off[i] = alloc_ok(&p, A);
	for (i = 0; i < 16; i += 2)
		assert_int_equal(pool_free(&p, off[i], A), 0);
	/* half the pool is free, but in 2 MiB pieces */
	assert_int_equal(p.free_size, 8 * A);
	assert_int_equal(p.next, 8);
	assert_int_equal(pool_alloc(&p, 2 * A, &o, &len), -ENOMEM);
	/* freeing one neighbour makes a 3-unit hole at the start */
	assert_int_equal(pool_free(&p, off[1], A), 0);
	assert_int_equal(p.next, 7);
	assert_int_equal(alloc_ok(&p, 3 * A), off[0]);
	pool_fini(&p);
}

static void test_bad_frees_change_nothing(void **state)
{
	struct pool p;
	struct pool_extent before[8];
	uint64_t a, b, fs;
	size_t n;

	setup_pool(&p, A, 8 * A, A);
	a = alloc_ok(&p, A);
	b = alloc_ok(&p, 2 * A);
	n = p.next;
	fs = p.free_size;
	memcpy(before, p.ext, n * sizeof(*before));
	assert_int_equal(pool_free(&p, 0, A), -EINVAL);	    /* header unit */
	assert_int_equal(pool_free(&p, 9 * A, A), -EINVAL); /* past the end */
	assert_int_equal(pool_free(&p, a, 0), -EINVAL);
	assert_int_equal(pool_free(&p, b + 2 * A, A), -EINVAL); /* free */
	assert_int_equal(pool_free(&p, b, 3 * A), -EINVAL);	/* overlaps */
	assert_int_equal(pool_free(&p, UINT64_MAX - A, 2 * A), -EINVAL);
	assert_int_equal(p.next, n);
	assert_int_equal(p.free_size, fs);
	assert_memory_equal(p.ext, before, n * sizeof(*before));
	assert_int_equal(pool_free(&p, a, A), 0);
	assert_int_equal(pool_free(&p, a, A), -EINVAL); /* double free */
	assert_true(pool_check(&p));
	pool_fini(&p);
}

static void test_reserve(void **state)
{
	struct pool p;
	uint64_t off, len;

	setup_pool(&p, A, 10 * A, A);
	assert_int_equal(pool_reserve(&p, 4 * A, 2 * A), 0);
	assert_true(pool_check(&p));
	assert_int_equal(pool_reserve(&p, 5 * A, A), -EINVAL);	    /* taken */
	assert_int_equal(pool_reserve(&p, 3 * A, 2 * A), -EINVAL);  /* half */
	assert_int_equal(pool_reserve(&p, 0, A), -EINVAL);	    /* header */
	assert_int_equal(pool_reserve(&p, 10 * A, 2 * A), -EINVAL); /* end */
	assert_int_equal(pool_reserve(&p, A, A), 0);
	assert_int_equal(pool_reserve(&p, 10 * A, A), 0); /* last unit */
	assert_int_equal(p.free_size, 6 * A);
	/* first fit now starts at 2 A */
	assert_int_equal(pool_alloc(&p, 2 * A, &off, &len), 0);
	assert_int_equal(off, 2 * A);
	assert_int_equal(pool_free(&p, 4 * A, 2 * A), 0);
	assert_true(pool_check(&p));
	pool_fini(&p);
}

/* a copy the hooked free() in pool_fini() may release */
static char *dup_str(const char *s)
{
	char *p = malloc(strlen(s) + 1);

	assert_non_null(p);
	strcpy(p, s);
	return p;
}

static void test_pick_alloc_policy(void **state)
{
	struct pool a, b, *pools[2] = {&a, &b}, *got = NULL;
	uint64_t off, len;

	setup_pool(&a, A, 4 * A, A);
	setup_pool(&b, 0, 8 * A, A);
	a.path = dup_str("/dev/dax0.0");
	b.path = dup_str("/mnt/pmem0");
	assert_int_equal(pool_pick_alloc(pools, 0, rm_str_from(NULL), 1, &got,
					 &off, &len),
			 -ENODEV);
	assert_int_equal(pool_pick_alloc(pools, 2, rm_str_from(NULL), 0, &got,
					 &off, &len),
			 -EINVAL);
	assert_int_equal(pool_pick_alloc(pools, 2, rm_str_from("/dev/dax0"), 1,
					 &got, &off, &len),
			 -ENOENT);
	/* fill-first: a until it is full, then b */
	assert_int_equal(pool_pick_alloc(pools, 2, rm_str_from(NULL), 3 * A,
					 &got, &off, &len),
			 0);
	assert_ptr_equal(got, &a);
	assert_int_equal(pool_pick_alloc(pools, 2, rm_str_from(NULL), 2 * A,
					 &got, &off, &len),
			 0);
	assert_ptr_equal(got, &b);
	assert_int_equal(off, 0);
	assert_int_equal(pool_pick_alloc(pools, 2, rm_str_from(NULL), A, &got,
					 &off, &len),
			 0);
	assert_ptr_equal(got, &a);
	/* pinned to a full pool: no fallback */
	assert_int_equal(pool_pick_alloc(pools, 2, rm_str_from("/dev/dax0.0"),
					 A, &got, &off, &len),
			 -ENOMEM);
	assert_int_equal(pool_pick_alloc(pools, 2, rm_str_from("/mnt/pmem0"),
					 6 * A, &got, &off, &len),
			 0);
	assert_ptr_equal(got, &b);
	assert_int_equal(pool_pick_alloc(pools, 2, rm_str_from(NULL), A, &got,
					 &off, &len),
			 -ENOMEM);
	pool_fini(&a);
	pool_fini(&b);
}

/* xorshift64*: deterministic, so a failure is reproducible */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

#define UNITS 256

struct live {
	uint64_t off, len;
};

/* Lowest start of @k consecutive free units in the model, or -1. */
static int model_fit(const unsigned char *used, int k)
{
	int s, run = 0;

	for (s = 0; s < UNITS; s++) {
		run = used[s] ? 0 : run + 1;
		if (run == k)
			return s - k + 1;
	}
	return -1;
}

static void test_randomized_against_model(void **state)
{
	unsigned char used[UNITS];
	struct live *live = malloc(UNITS * sizeof(*live));
	uint64_t seed = 0x9E3779B97F4A7C15ull, off, len, free_units;
	struct pool p;
	int nlive = 0, step, i, k, want;

	assert_non_null(live);
	memset(used, 0, sizeof(used));
	setup_pool(&p, A, UNITS * A, A);
	for (step = 0; step < 20000; step++) {
		if (nlive && rnd(&seed) % 100 < 45) {
			i = (int)(rnd(&seed) % (uint64_t)nlive);
			assert_int_equal(
				pool_free(&p, live[i].off, live[i].len), 0);
			for (k = 0; k < (int)(live[i].len / A); k++)
				used[(live[i].off - A) / A + k] = 0;
			live[i] = live[--nlive];
		} else {
			/* mostly small, sometimes large, sizes not aligned */
			uint64_t sz = rnd(&seed) % 8 == 0
					      ? rnd(&seed) % (40 * A) + 1
					      : rnd(&seed) % (3 * A) + 1;

			k = (int)((sz + A - 1) / A);
			want = model_fit(used, k);
			if (want < 0) {
				assert_int_equal(pool_alloc(&p, sz, &off, &len),
						 -ENOMEM);
				continue;
			}
			assert_int_equal(pool_alloc(&p, sz, &off, &len), 0);
			assert_int_equal(off, A + (uint64_t)want * A);
			assert_int_equal(len, (uint64_t)k * A);
			for (i = 0; i < k; i++)
				used[want + i] = 1;
			live[nlive].off = off;
			live[nlive++].len = len;
		}
		free_units = 0;
		for (i = 0; i < UNITS; i++)
			free_units += !used[i];
		assert_int_equal(p.free_size, free_units * A);
		assert_true(pool_check(&p));
	}
	while (nlive) {
		nlive--;
		assert_int_equal(
			pool_free(&p, live[nlive].off, live[nlive].len), 0);
	}
	assert_int_equal(p.next, 1);
	assert_int_equal(p.free_size, UNITS * A);
	pool_fini(&p);
	free(live);
}

/*
 * Fail the 1st, 2nd, ... allocation of a scenario in turn: each failure
 * must surface as -ENOMEM with the pool intact, and frees must never need
 * memory (the capacity rule).
 */
static void test_fault_injection(void **state)
{
	struct live live[64];
	struct pool p;
	uint64_t off, len;
	int n, i, rc, failed, fails = 0;

	for (n = 0;; n++) {
		int nlive = 0;

		memset(&p, 0, sizeof(p));
		rm_fail_after = n;
		failed = 0;
		rc = pool_init(&p, A, 128 * A, A);
		if (rc < 0) {
			assert_int_equal(rc, -ENOMEM);
			rm_fail_after = -1;
			fails++;
			continue;
		}
		/* many small allocations, every other one freed: fragments */
		for (i = 0; i < 64; i++) {
			rc = pool_alloc(&p, A, &off, &len);
			if (rc < 0) {
				assert_int_equal(rc, -ENOMEM);
				failed = 1;
				break;
			}
			live[nlive].off = off;
			live[nlive++].len = len;
			assert_true(pool_check(&p));
		}
		/* no memory at all for the frees */
		rm_fail_always = 1;
		for (i = 0; i < nlive; i += 2)
			assert_int_equal(
				pool_free(&p, live[i].off, live[i].len), 0);
		for (i = 1; i < nlive; i += 2)
			assert_int_equal(
				pool_free(&p, live[i].off, live[i].len), 0);
		assert_true(pool_check(&p));
		assert_int_equal(p.free_size, 128 * A);
		rm_fail_always = 0;
		rm_fail_after = -1;
		pool_fini(&p);
		fails += failed;
		if (!failed)
			break;
	}
	assert_true(fails > 0); /* the loop did inject failures */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_rejects),
		cmocka_unit_test(test_fit_and_rounding),
		cmocka_unit_test(test_unaligned_extent_keeps_leading_fragment),
		cmocka_unit_test(test_first_fit_reuses_holes),
		cmocka_unit_test(test_split_and_merge_all_orders),
		cmocka_unit_test(test_exhaustion),
		cmocka_unit_test(test_fragmentation),
		cmocka_unit_test(test_bad_frees_change_nothing),
		cmocka_unit_test(test_reserve),
		cmocka_unit_test(test_pick_alloc_policy),
		cmocka_unit_test(test_randomized_against_model),
		cmocka_unit_test(test_fault_injection),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
