/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libmaru_alloc.c - the page allocator, the owned-region manager and
 * the local key map of libmaru (alloc.c, keymap.c)
 *
 * Those two files are compiled into this binary with their allocations
 * routed through cmocka's test allocator (leaks fail the test) and a
 * countdown that makes the Nth allocation fail; the *_oom tests walk every
 * N until the operation succeeds, checking that each failure is clean.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "private.h"
#define LIBMARU_TESTALLOC_NO_MACROS
#include "libmaru_testalloc.h"

/* ---- allocation fault injection ---------------------------------------- */

static int fail_countdown = -1; /* -1: never fail; 0: fail the next one */

static bool should_fail(void)
{
	if (fail_countdown < 0)
		return false;
	return fail_countdown-- == 0;
}

void *tmalloc(size_t n)
{
	return should_fail() ? NULL : test_malloc(n);
}

void *tcalloc(size_t n, size_t m)
{
	return should_fail() ? NULL : test_calloc(n, m);
}

void *trealloc(void *p, size_t n)
{
	return should_fail() ? NULL : test_realloc(p, n);
}

void tfree(void *p)
{
	test_free(p);
}

/* ---- page allocator ----------------------------------------------------- */

static void test_pagealloc_fifo(void **state)
{
	struct maru__pagealloc pa;
	int64_t p;
	int i;

	assert_int_equal(maru__pagealloc_init(&pa, 4 * 4096 + 100, 4096), 0);
	assert_int_equal(pa.page_count, 4);
	/* allocate pops the front: 0, 1, 2, 3 */
	for (i = 0; i < 4; i++)
		assert_int_equal(maru__pagealloc_alloc(&pa), i);
	assert_int_equal(maru__pagealloc_alloc(&pa), -ENOSPC);
	assert_int_equal(pa.nfree, 0);
	/* free appends to the back: 2 then 0 come back in that order */
	assert_int_equal(maru__pagealloc_free(&pa, 2), 0);
	assert_int_equal(maru__pagealloc_free(&pa, 0), 0);
	assert_int_equal(pa.nfree, 2);
	p = maru__pagealloc_alloc(&pa);
	assert_int_equal(p, 2);
	p = maru__pagealloc_alloc(&pa);
	assert_int_equal(p, 0);
	maru__pagealloc_destroy(&pa);
}

static void test_pagealloc_fifo_wraps(void **state)
{
	struct maru__pagealloc pa;
	int i;

	assert_int_equal(maru__pagealloc_init(&pa, 3, 1), 0);
	/* pages 0,1 out; 0 back: free list is 2, 0 */
	assert_int_equal(maru__pagealloc_alloc(&pa), 0);
	assert_int_equal(maru__pagealloc_alloc(&pa), 1);
	assert_int_equal(maru__pagealloc_free(&pa, 0), 0);
	assert_int_equal(maru__pagealloc_free(&pa, 1), 0);
	/* order must be 2, 0, 1 across the ring's wrap-around */
	assert_int_equal(maru__pagealloc_alloc(&pa), 2);
	assert_int_equal(maru__pagealloc_alloc(&pa), 0);
	assert_int_equal(maru__pagealloc_alloc(&pa), 1);
	for (i = 0; i < 3; i++)
		assert_true(maru__pagealloc_is_allocated(&pa, i));
	assert_false(maru__pagealloc_is_allocated(&pa, 3));
	maru__pagealloc_destroy(&pa);
}

static void test_pagealloc_errors(void **state)
{
	struct maru__pagealloc pa;

	assert_int_equal(maru__pagealloc_init(&pa, 100, 0), -EINVAL);
	assert_int_equal(maru__pagealloc_init(&pa, 100, 101), -EINVAL);
	assert_int_equal(maru__pagealloc_init(&pa, 1ull << 40, 1), -EINVAL);
	assert_int_equal(maru__pagealloc_init(&pa, 8, 4), 0);
	/* never allocated */
	assert_int_equal(maru__pagealloc_free(&pa, 0), -EINVAL);
	/* out of range */
	assert_int_equal(maru__pagealloc_free(&pa, 2), -ERANGE);
	assert_int_equal(maru__pagealloc_free(&pa, UINT64_MAX), -ERANGE);
	assert_int_equal(maru__pagealloc_alloc(&pa), 0);
	assert_int_equal(maru__pagealloc_free(&pa, 0), 0);
	/* double free */
	assert_int_equal(maru__pagealloc_free(&pa, 0), -EINVAL);
	assert_int_equal(pa.nfree, 2);
	maru__pagealloc_destroy(&pa);
}

static void test_pagealloc_oom(void **state)
{
	struct maru__pagealloc pa;
	int n, rc;

	for (n = 0;; n++) {
		fail_countdown = n;
		rc = maru__pagealloc_init(&pa, 64, 1);
		fail_countdown = -1;
		if (rc == 0)
			break;
		assert_int_equal(rc, -ENOMEM);
	}
	assert_true(n > 0);
	maru__pagealloc_destroy(&pa);
}

/* ---- owned-region manager ------------------------------------------------ */

static void test_owned_active_switch(void **state)
{
	struct maru__owned o;
	uint64_t rid, page;

	maru__owned_init(&o, 10);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), -ENOSPC);
	assert_int_equal(maru__owned_add(&o, 7, 20, NULL, false), 0);
	assert_int_equal(maru__owned_add(&o, 7, 20, NULL, false), -EEXIST);
	/* region 7 has pages 0, 1 */
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(rid, 7);
	assert_int_equal(page, 0);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(page, 1);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), -ENOSPC);
	/* an added region becomes active */
	assert_int_equal(maru__owned_add(&o, 9, 35, NULL, false), 0);
	assert_int_equal(o.regions[1]->pa.page_count, 3);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(rid, 9);
	/* free a page of 7: the active region (9) is still used first */
	assert_int_equal(maru__owned_free(&o, 7, 0), 0);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(rid, 9);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(rid, 9);
	/* 9 full: falls back to 7 and makes it active */
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(rid, 7);
	assert_int_equal(page, 0);
	assert_int_equal(o.regions[o.active]->region_id, 7);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), -ENOSPC);
	/* errors */
	assert_int_equal(maru__owned_free(&o, 8, 0), -ENOENT);
	assert_int_equal(maru__owned_free(&o, 9, 3), -ERANGE);
	assert_int_equal(maru__owned_free(&o, 9, 2), 0);
	assert_int_equal(maru__owned_free(&o, 9, 2), -EINVAL);
	assert_non_null(maru__owned_find(&o, 9));
	assert_null(maru__owned_find(&o, 10));
	/* a region smaller than one page cannot be managed */
	assert_int_equal(maru__owned_add(&o, 11, 5, NULL, false), -EINVAL);
	assert_int_equal(o.n, 2);
	maru__owned_destroy(&o);
	assert_int_equal(o.n, 0);
}

/* pages away: taken by the server, granted back; borrowed regions */
static void test_owned_away_and_granted(void **state)
{
	struct maru__owned o;
	struct maru__owned_region *r;
	uint64_t rid, page;

	maru__owned_init(&o, 10);
	assert_int_equal(maru__owned_add(&o, 7, 30, NULL, false), 0);
	r = maru__owned_find(&o, 7);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(page, 0);
	/* only a handed-out page can go away; then it is neither free nor
	 * handed out */
	assert_int_equal(maru__pagealloc_away(&r->pa, 1), -EINVAL);
	assert_int_equal(maru__pagealloc_away(&r->pa, 0), 0);
	assert_false(maru__pagealloc_is_allocated(&r->pa, 0));
	assert_int_equal(maru__pagealloc_free(&r->pa, 0), -EINVAL);
	assert_int_equal(maru__pagealloc_away(&r->pa, 0), -EINVAL);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), -ENOSPC);
	/* granted back: free again, once */
	assert_int_equal(maru__pagealloc_grant(&r->pa, 0), 0);
	assert_int_equal(maru__pagealloc_grant(&r->pa, 0), -EINVAL);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(page, 0);
	/* a borrowed region: every page away until granted */
	assert_int_equal(maru__owned_add(&o, 9, 40, NULL, true), 0);
	r = maru__owned_find(&o, 9);
	assert_true(r->borrowed);
	assert_int_equal(r->pa.naway, 4);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), -ENOSPC);
	assert_int_equal(maru__pagealloc_grant(&r->pa, 2), 0);
	assert_int_equal(maru__pagealloc_grant(&r->pa, 4), -EINVAL);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(rid, 9);
	assert_int_equal(page, 2);
	assert_int_equal(r->pa.naway, 3);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), -ENOSPC);
	maru__owned_destroy(&o);
}

static void test_owned_many_regions(void **state)
{
	struct maru__owned o;
	uint64_t rid, page, i;

	maru__owned_init(&o, 1);
	for (i = 1; i <= 20; i++)
		assert_int_equal(maru__owned_add(&o, i, 2, NULL, false), 0);
	/* 40 pages in all; the last added region is used first */
	for (i = 0; i < 40; i++)
		assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), 0);
	assert_int_equal(maru__owned_alloc(&o, 0, &rid, &page), -ENOSPC);
	maru__owned_destroy(&o);
}

/* a draining region hands out no page until its time is up */
static void test_owned_draining(void **state)
{
	struct maru__owned o;
	uint64_t rid, page;

	maru__owned_init(&o, 10);
	assert_int_equal(maru__owned_add(&o, 7, 30, NULL, false), 0);
	assert_int_equal(maru__owned_add(&o, 9, 20, NULL, false),
			 0); /* active */
	o.regions[1]->drain_until = 1000;
	assert_int_equal(maru__owned_alloc(&o, 500, &rid, &page), 0);
	assert_int_equal(rid, 7); /* not 9: draining */
	assert_int_equal(maru__owned_alloc(&o, 500, &rid, &page), 0);
	assert_int_equal(maru__owned_alloc(&o, 500, &rid, &page), 0);
	assert_int_equal(rid, 7);
	assert_int_equal(maru__owned_alloc(&o, 999, &rid, &page), -ENOSPC);
	assert_int_equal(maru__owned_alloc(&o, 1000, &rid, &page), 0);
	assert_int_equal(rid, 9);
	assert_int_equal(o.regions[1]->drain_until, 0);
	maru__owned_destroy(&o);
}

static void test_owned_oom(void **state)
{
	struct maru__owned o;
	int n, i, rc;

	maru__owned_init(&o, 1);
	/* walk every allocation of five additions (regions array growth) */
	for (n = 0;; n++) {
		maru__owned_destroy(&o);
		fail_countdown = n;
		for (i = 0, rc = 0; i < 5 && rc == 0; i++)
			rc = maru__owned_add(&o, (uint64_t)i + 1, 4, NULL,
					     false);
		fail_countdown = -1;
		if (rc == 0)
			break;
		assert_int_equal(rc, -ENOMEM);
		/* the failed add left nothing behind */
		assert_int_equal(o.n, (size_t)i - 1);
	}
	assert_int_equal(o.n, 5);
	maru__owned_destroy(&o);
}

/* ---- key map ------------------------------------------------------------- */

static void test_keymap_kinds(void **state)
{
	struct maru__keymap km;
	struct maru_key s42 = maru_key_str("42", 2);
	struct maru_key i42 = maru_key_int(42);
	struct maru_key u42 = maru_key_uint(42);
	struct maru_key neg = maru_key_int(-42);
	struct maru_key big = maru_key_uint(1ull << 63);
	struct maru_key b42 = {MARU_KEY_BIN, 2, "42", 0, 0};
	struct maru__keyent *e;

	maru__keymap_init(&km);
	assert_null(maru__keymap_find(&km, &s42));
	assert_non_null(maru__keymap_insert(&km, &s42, 1, 10));
	/* an integer is never its decimal string, nor bytes the string */
	assert_null(maru__keymap_find(&km, &i42));
	assert_null(maru__keymap_find(&km, &b42));
	assert_non_null(maru__keymap_insert(&km, &i42, 1, 11));
	/* the same non-negative number, signed or not, is one key */
	e = maru__keymap_find(&km, &u42);
	assert_non_null(e);
	assert_int_equal(e->page, 11);
	assert_null(maru__keymap_find(&km, &neg));
	assert_non_null(maru__keymap_insert(&km, &neg, 2, 12));
	assert_non_null(maru__keymap_insert(&km, &big, 2, 13));
	assert_non_null(maru__keymap_insert(&km, &b42, 2, 14));
	assert_int_equal(maru__keymap_find(&km, &neg)->page, 12);
	assert_int_equal(maru__keymap_find(&km, &big)->page, 13);
	assert_int_equal(maru__keymap_find(&km, &b42)->page, 14);
	assert_int_equal(maru__keymap_find(&km, &s42)->page, 10);
	assert_int_equal(km.t.n, 5);
	maru__keymap_remove(&km, maru__keymap_find(&km, &s42));
	assert_null(maru__keymap_find(&km, &s42));
	assert_non_null(maru__keymap_find(&km, &i42));
	assert_int_equal(km.t.n, 4);
	maru__keymap_destroy(&km);
}

static void test_keymap_grow(void **state)
{
	struct maru__keymap km;
	struct maru_key k;
	char buf[32];
	int i;

	maru__keymap_init(&km);
	for (i = 0; i < 5000; i++) {
		snprintf(buf, sizeof(buf), "key-%d", i);
		k = maru_key_str(buf, strlen(buf));
		assert_non_null(maru__keymap_insert(&km, &k, 1, (uint64_t)i));
	}
	assert_true(km.t.cap >= 5000);
	for (i = 0; i < 5000; i++) {
		snprintf(buf, sizeof(buf), "key-%d", i);
		k = maru_key_str(buf, strlen(buf));
		assert_int_equal(maru__keymap_find(&km, &k)->page, i);
		if (i % 2)
			maru__keymap_remove(&km, maru__keymap_find(&km, &k));
	}
	assert_int_equal(km.t.n, 2500);
	k = maru_key_str("key-1", 5);
	assert_null(maru__keymap_find(&km, &k));
	k = maru_key_str("", 0);
	assert_non_null(maru__keymap_insert(&km, &k, 3, 3));
	assert_int_equal(maru__keymap_find(&km, &k)->region_id, 3);
	maru__keymap_destroy(&km);
}

static void test_keymap_oom(void **state)
{
	struct maru__keymap km;
	struct maru_key k = maru_key_str("a", 1);
	struct maru__keyent *e;
	int n;

	for (n = 0;; n++) {
		maru__keymap_init(&km);
		fail_countdown = n;
		e = maru__keymap_insert(&km, &k, 1, 1);
		fail_countdown = -1;
		if (e)
			break;
		assert_null(maru__keymap_find(&km, &k));
		maru__keymap_destroy(&km);
	}
	assert_true(n > 0);
	assert_ptr_equal(maru__keymap_find(&km, &k), e);
	maru__keymap_destroy(&km);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pagealloc_fifo),
		cmocka_unit_test(test_pagealloc_fifo_wraps),
		cmocka_unit_test(test_pagealloc_errors),
		cmocka_unit_test(test_pagealloc_oom),
		cmocka_unit_test(test_owned_active_switch),
		cmocka_unit_test(test_owned_away_and_granted),
		cmocka_unit_test(test_owned_many_regions),
		cmocka_unit_test(test_owned_draining),
		cmocka_unit_test(test_owned_oom),
		cmocka_unit_test(test_keymap_kinds),
		cmocka_unit_test(test_keymap_grow),
		cmocka_unit_test(test_keymap_oom),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
