/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mds_index.c - the metadata server's KV index (src/metadata_server/
 * index.c): basic operations, tags, growth and shrink with incremental
 * rehash, deletes in the middle of a rehash, keys built to collide, the
 * scan cursor across resizes, failed allocations, and a long randomized
 * run checked against a trivially correct model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "index.h"

static struct ix_key mkkey(const char *s, uint8_t tag)
{
	struct ix_key k = {(const uint8_t *)s, (uint32_t)strlen(s), tag};

	return k;
}

static struct ix_entry *put(struct ix *ix, const char *s, uint8_t tag,
			    int *isnew)
{
	struct ix_key k = mkkey(s, tag);
	struct ix_entry *e = NULL;
	int rc = ix_insert(ix, &k, ix_hash(ix, &k), &e);

	assert_true(rc >= 0);
	if (isnew)
		*isnew = rc;
	return e;
}

static struct ix_entry *get(struct ix *ix, const char *s, uint8_t tag)
{
	struct ix_key k = mkkey(s, tag);

	return ix_find(ix, &k, ix_hash(ix, &k));
}

static void test_basic(void **state)
{
	struct ix ix;
	struct ix_entry *e;
	int isnew;

	ix_init(&ix, 42);
	assert_null(get(&ix, "a", KEY_STR));
	e = put(&ix, "a", KEY_STR, &isnew);
	assert_int_equal(isnew, 1);
	assert_int_equal(e->slot, IX_NO_SLOT);
	assert_int_equal(e->pins, 0);
	e->off = 7;
	e->len = 9;
	assert_ptr_equal(put(&ix, "a", KEY_STR, &isnew), e);
	assert_int_equal(isnew, 0);
	assert_ptr_equal(get(&ix, "a", KEY_STR), e);
	assert_int_equal(get(&ix, "a", KEY_STR)->off, 7);
	/* same bytes under another tag is another key */
	assert_null(get(&ix, "a", KEY_BIN));
	assert_ptr_not_equal(put(&ix, "a", KEY_BIN, &isnew), e);
	assert_int_equal(isnew, 1);
	/* the empty key and prefixes are keys of their own */
	put(&ix, "", KEY_STR, &isnew);
	assert_int_equal(isnew, 1);
	put(&ix, "ab", KEY_STR, &isnew);
	assert_int_equal(isnew, 1);
	assert_int_equal(ix.count, 4);
	assert_int_equal(ix_entry_klen(get(&ix, "ab", KEY_STR)), 2);
	assert_int_equal(ix_entry_tag(get(&ix, "a", KEY_BIN)), KEY_BIN);
	ix_delete(&ix, e);
	assert_null(get(&ix, "a", KEY_STR));
	assert_non_null(get(&ix, "a", KEY_BIN));
	assert_non_null(get(&ix, "", KEY_STR));
	assert_int_equal(ix.count, 3);
	ix_destroy(&ix);
	assert_int_equal(ix.count, 0);
}

static void test_key_too_long(void **state)
{
	struct ix ix;
	struct ix_key k = {(const uint8_t *)"", IX_KEY_MAX + 1u, KEY_STR};
	struct ix_entry *e = NULL;

	ix_init(&ix, 1);
	assert_int_equal(ix_insert(&ix, &k, 0, &e), -E2BIG);
	assert_null(e);
	ix_destroy(&ix);
}

/* insert n keys "k<i>", checking a sample after every insert */
static void fill(struct ix *ix, int from, int to, bool *saw_rehash)
{
	char s[32];
	int i, isnew;

	for (i = from; i < to; i++) {
		snprintf(s, sizeof(s), "k%d", i);
		put(ix, s, KEY_STR, &isnew)->off = (uint64_t)i;
		assert_int_equal(isnew, 1);
		if (ix_rehashing(ix) && saw_rehash)
			*saw_rehash = true;
		if (i % 97 == 0) {
			snprintf(s, sizeof(s), "k%d", from + (i - from) / 2);
			assert_non_null(get(ix, s, KEY_STR));
		}
	}
}

static void check_all(struct ix *ix, int from, int to)
{
	struct ix_entry *e;
	char s[32];
	int i;

	for (i = from; i < to; i++) {
		snprintf(s, sizeof(s), "k%d", i);
		e = get(ix, s, KEY_STR);
		assert_non_null(e);
		assert_int_equal(e->off, (uint64_t)i);
	}
}

static void test_growth(void **state)
{
	struct ix ix;
	bool saw = false;

	ix_init(&ix, 7);
	fill(&ix, 0, 200000, &saw);
	assert_true(saw);
	assert_int_equal(ix.count, 200000);
	check_all(&ix, 0, 200000);
	/* load factor stays <= 1 (plus the table being filled in a move) */
	assert_true(ix.t[0].size + ix.t[1].size >= 200000 / 2);
	/* operations never unmap: the old tables wait for the timer */
	assert_true(ix.nrel > 0);
	assert_true(ix_mem_tables(&ix) > ix.t[0].size * sizeof(void *));
	while (ix_rehash_for(&ix, 1000000) || ix_release_for(&ix, 1000000))
		;
	assert_false(ix_rehashing(&ix));
	assert_int_equal(ix.nrel, 0);
	assert_int_equal(ix_mem_tables(&ix), ix.t[0].size * sizeof(void *));
	assert_true(ix.t[0].size >= 200000 / 2);
	check_all(&ix, 0, 200000);
	ix_destroy(&ix);
}

/*
 * During a resize every key has one home: t[1] only once its t[0] bucket
 * has moved.  Inserts therefore never write t[1] ahead of the move (where
 * its pages are not faulted in yet), and every key stays findable.
 */
static void check_homes(struct ix *ix)
{
	struct ix_entry *e;
	uint64_t i, m0;

	if (!ix_rehashing(ix))
		return;
	m0 = ix->t[0].size - 1;
	for (i = 0; i < ix->t[1].size; i++)
		for (e = ix->t[1].b[i]; e; e = e->next)
			assert_true((e->hash & m0) < (uint64_t)ix->rehash_idx);
	for (i = (uint64_t)ix->rehash_idx; i <= m0; i++)
		for (e = ix->t[0].b[i]; e; e = e->next)
			assert_int_equal(e->hash & m0, i);
}

static void test_one_home_during_resize(void **state)
{
	struct ix ix;
	char s[32];
	int i, isnew, checked = 0;

	(void)state;
	ix_init(&ix, 11);
	for (i = 0; i < 70000; i++) {
		snprintf(s, sizeof(s), "k%d", i);
		put(&ix, s, KEY_STR, &isnew)->off = (uint64_t)i;
		assert_int_equal(isnew, 1);
		/* deletes move buckets too: remove every 5th key again */
		if (i % 5 == 4) {
			snprintf(s, sizeof(s), "k%d", i - 2);
			ix_delete(&ix, get(&ix, s, KEY_STR));
		}
		if (ix_rehashing(&ix) && i % 61 == 0) {
			check_homes(&ix);
			checked++;
		}
	}
	assert_true(checked > 10);
	for (i = 0; i < 70000; i++) {
		snprintf(s, sizeof(s), "k%d", i);
		if (i % 5 == 2)
			assert_null(get(&ix, s, KEY_STR));
		else
			assert_int_equal(get(&ix, s, KEY_STR)->off,
					 (uint64_t)i);
	}
	ix_destroy(&ix);
}

static void test_delete_during_rehash(void **state)
{
	struct ix ix;
	char s[32];
	int i, n = 0, deleted = 0;

	ix_init(&ix, 9);
	/* grow until a move is in progress, with a sizeable table */
	for (;;) {
		fill(&ix, n, n + 1, NULL);
		n++;
		if (ix_rehashing(&ix) && n > 5000)
			break;
	}
	/* delete every other key while the move is running */
	for (i = 0; i < n; i += 2) {
		struct ix_entry *e;

		snprintf(s, sizeof(s), "k%d", i);
		e = get(&ix, s, KEY_STR);
		assert_non_null(e);
		ix_delete(&ix, e);
		deleted++;
		assert_null(get(&ix, s, KEY_STR));
	}
	assert_int_equal(ix.count, (uint64_t)(n - deleted));
	for (i = 1; i < n; i += 2) {
		snprintf(s, sizeof(s), "k%d", i);
		assert_non_null(get(&ix, s, KEY_STR));
	}
	ix_destroy(&ix);
}

static void test_shrink(void **state)
{
	struct ix ix;
	uint64_t big;
	char s[32];
	int i;

	ix_init(&ix, 3);
	fill(&ix, 0, 50000, NULL);
	while (ix_rehash_for(&ix, 1000000))
		;
	big = ix.t[0].size;
	for (i = 10; i < 50000; i++) {
		snprintf(s, sizeof(s), "k%d", i);
		ix_delete(&ix, get(&ix, s, KEY_STR));
	}
	while (ix_rehash_for(&ix, 1000000))
		;
	assert_true(ix.t[0].size < big / 64);
	check_all(&ix, 0, 10);
	assert_int_equal(ix.count, 10);
	ix_destroy(&ix);
}

/* keys whose hashes agree in their low @bits bits: one long chain */
static void test_collisions(void **state)
{
	struct ix ix;
	char(*keys)[24] = calloc(3000, sizeof(*keys));
	struct ix_entry *e;
	int n = 0, i, isnew;
	uint64_t want = 0, h;

	assert_non_null(keys);
	ix_init(&ix, 11);
	for (i = 0; n < 3000; i++) {
		struct ix_key k;

		snprintf(keys[n], sizeof(keys[n]), "c%d", i);
		k = mkkey(keys[n], KEY_STR);
		h = ix_hash(&ix, &k);
		if (n == 0)
			want = h & 0x3ff;
		if ((h & 0x3ff) == want)
			n++;
	}
	for (i = 0; i < n; i++) {
		e = put(&ix, keys[i], KEY_STR, &isnew);
		assert_int_equal(isnew, 1);
		e->off = (uint64_t)i;
	}
	for (i = 0; i < n; i++) {
		e = get(&ix, keys[i], KEY_STR);
		assert_non_null(e);
		assert_int_equal(e->off, (uint64_t)i);
	}
	for (i = 0; i < n; i += 3)
		ix_delete(&ix, get(&ix, keys[i], KEY_STR));
	for (i = 0; i < n; i++) {
		e = get(&ix, keys[i], KEY_STR);
		if (i % 3 == 0)
			assert_null(e);
		else
			assert_int_equal(e->off, (uint64_t)i);
	}
	ix_destroy(&ix);
	free(keys);
}

struct hk {
	uint32_t h;
	int i;
};

static int cmp_hk(const void *a, const void *b)
{
	const struct hk *x = a, *y = b;

	return x->h < y->h ? -1 : x->h > y->h;
}

/* different keys with the very same stored 32-bit hash */
static void test_full_hash32_collision(void **state)
{
	enum { N = 300000 };
	struct hk *v = malloc(N * sizeof(*v));
	struct ix ix;
	char a[24], b[24];
	int i, pairs = 0, isnew;

	assert_non_null(v);
	ix_init(&ix, 5);
	for (i = 0; i < N; i++) {
		struct ix_key k;

		snprintf(a, sizeof(a), "x%d", i);
		k = mkkey(a, KEY_STR);
		v[i].h = (uint32_t)ix_hash(&ix, &k);
		v[i].i = i;
	}
	qsort(v, N, sizeof(*v), cmp_hk);
	for (i = 1; i < N && pairs < 4; i++) {
		if (v[i].h != v[i - 1].h)
			continue;
		snprintf(a, sizeof(a), "x%d", v[i - 1].i);
		snprintf(b, sizeof(b), "x%d", v[i].i);
		put(&ix, a, KEY_STR, &isnew)->off = 1;
		assert_int_equal(isnew, 1);
		put(&ix, b, KEY_STR, &isnew)->off = 2;
		assert_int_equal(isnew, 1);
		assert_int_equal(get(&ix, a, KEY_STR)->off, 1);
		assert_int_equal(get(&ix, b, KEY_STR)->off, 2);
		ix_delete(&ix, get(&ix, a, KEY_STR));
		assert_null(get(&ix, a, KEY_STR));
		assert_int_equal(get(&ix, b, KEY_STR)->off, 2);
		pairs++;
	}
	/* 300k keys over 2^32 hashes: about ten colliding pairs expected */
	assert_true(pairs > 0);
	ix_destroy(&ix);
	free(v);
}

/* ---- scan ---- */

struct seen {
	uint8_t *hit; /* per key index: times reported */
	int n;
};

static void on_entry(struct ix_entry *e, void *arg)
{
	struct seen *s = arg;
	char buf[32];
	uint32_t n = ix_entry_klen(e);
	int i;

	/* keys are not NUL-terminated */
	assert_true(n > 1 && n < sizeof(buf));
	memcpy(buf, e->key, n);
	buf[n] = '\0';
	i = atoi(buf + 1);
	if (i >= 0 && i < s->n && s->hit[i] < 255)
		s->hit[i]++;
}

static void test_scan_plain(void **state)
{
	struct ix ix;
	struct seen s = {calloc(5000, 1), 5000};
	uint64_t cur = 0;
	int i;

	ix_init(&ix, 13);
	assert_int_equal(ix_scan(&ix, 0, on_entry, &s), 0);
	fill(&ix, 0, 5000, NULL);
	while (ix_rehash_for(&ix, 1000000))
		;
	do {
		cur = ix_scan(&ix, cur, on_entry, &s);
	} while (cur);
	/* without a resize every entry is reported exactly once */
	for (i = 0; i < 5000; i++)
		assert_int_equal(s.hit[i], 1);
	ix_destroy(&ix);
	free(s.hit);
}

static void test_scan_growth_during_iteration(void **state)
{
	enum { ORIG = 3000, MORE = 100000 };
	struct ix ix;
	struct seen s = {calloc(ORIG, 1), ORIG};
	uint64_t cur = 0;
	int i, next = ORIG, steps = 0;
	bool saw = false;

	ix_init(&ix, 17);
	fill(&ix, 0, ORIG, NULL);
	do {
		cur = ix_scan(&ix, cur, on_entry, &s);
		/* the table grows (several times) while the scan runs */
		if (next < ORIG + MORE) {
			fill(&ix, next, next + 200, &saw);
			next += 200;
		}
		steps++;
	} while (cur);
	assert_true(saw);
	for (i = 0; i < ORIG; i++)
		assert_true(s.hit[i] >= 1);
	ix_destroy(&ix);
	free(s.hit);
}

static void test_scan_shrink_during_iteration(void **state)
{
	enum { ORIG = 2000, EXTRA = 60000 };
	struct ix ix;
	struct seen s = {calloc(ORIG, 1), ORIG};
	uint64_t cur = 0;
	int i, del = ORIG;
	char k[32];

	ix_init(&ix, 19);
	fill(&ix, 0, ORIG + EXTRA, NULL);
	while (ix_rehash_for(&ix, 1000000))
		;
	do {
		cur = ix_scan(&ix, cur, on_entry, &s);
		for (i = 0; i < 3000 && del < ORIG + EXTRA; i++, del++) {
			snprintf(k, sizeof(k), "k%d", del);
			ix_delete(&ix, get(&ix, k, KEY_STR));
		}
	} while (cur);
	for (i = 0; i < ORIG; i++)
		assert_true(s.hit[i] >= 1);
	ix_destroy(&ix);
	free(s.hit);
}

/* ---- fault injection ---- */

static int fail_at, alloc_calls;

static int fail_nth(void)
{
	return ++alloc_calls == fail_at;
}

static void test_alloc_failures(void **state)
{
	struct ix ix;
	char s[32];
	int n, i, rc, ok;
	bool clean = false;

	for (fail_at = 1; !clean; fail_at++) {
		alloc_calls = 0;
		ix_fail_hook = fail_nth;
		ix_init(&ix, 23);
		ok = 0;
		for (i = 0; i < 100; i++) {
			struct ix_key k;
			struct ix_entry *e = NULL;

			snprintf(s, sizeof(s), "k%d", i);
			k = mkkey(s, KEY_STR);
			rc = ix_insert(&ix, &k, ix_hash(&ix, &k), &e);
			assert_true(rc == 1 || rc == -ENOMEM);
			if (rc == 1) {
				e->off = (uint64_t)i;
				ok++;
			} else {
				assert_null(e);
				assert_null(get(&ix, s, KEY_STR));
			}
		}
		ix_fail_hook = NULL;
		assert_int_equal(ix.count, (uint64_t)ok);
		for (n = 0, i = 0; i < 100; i++) {
			snprintf(s, sizeof(s), "k%d", i);
			if (get(&ix, s, KEY_STR))
				n++;
		}
		assert_int_equal(n, ok);
		clean = alloc_calls < fail_at;
		ix_destroy(&ix);
	}
	assert_true(fail_at > 100);
}

/* ---- randomized against a model ---- */

#define MK 4096

struct model {
	bool present[2][MK];
	uint64_t off[2][MK];
};

static uint64_t rng = 88172645463325252ull;

static uint64_t xs(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void test_random_model(void **state)
{
	struct model *m = calloc(1, sizeof(*m));
	struct ix ix;
	struct ix_entry *e;
	char s[32];
	uint64_t count = 0;
	int op, i, t, isnew;

	assert_non_null(m);
	ix_init(&ix, 29);
	for (op = 0; op < 400000; op++) {
		uint64_t r = xs();

		i = (int)(r % MK);
		t = (int)((r >> 20) & 1);
		snprintf(s, sizeof(s), "r%d", i);
		switch ((r >> 24) % 8) {
		case 0:
		case 1:
		case 2:
			e = put(&ix, s, t ? KEY_BIN : KEY_STR, &isnew);
			assert_int_equal(isnew, !m->present[t][i]);
			if (isnew) {
				e->off = r;
				m->off[t][i] = r;
				m->present[t][i] = true;
				count++;
			}
			assert_int_equal(e->off, m->off[t][i]);
			break;
		case 3:
		case 4:
			e = get(&ix, s, t ? KEY_BIN : KEY_STR);
			if (m->present[t][i]) {
				assert_non_null(e);
				ix_delete(&ix, e);
				m->present[t][i] = false;
				count--;
			} else {
				assert_null(e);
			}
			break;
		case 5:
			/* bursts of deletes push the table to shrink */
			if ((r >> 40) % 64 == 0) {
				for (i = 0; i < MK; i++) {
					snprintf(s, sizeof(s), "r%d", i);
					e = get(&ix, s, t ? KEY_BIN : KEY_STR);
					if (e) {
						ix_delete(&ix, e);
						m->present[t][i] = false;
						count--;
					}
				}
			}
			break;
		default:
			e = get(&ix, s, t ? KEY_BIN : KEY_STR);
			if (m->present[t][i])
				assert_int_equal(e->off, m->off[t][i]);
			else
				assert_null(e);
			break;
		}
		assert_int_equal(ix.count, count);
		if (op % 50000 == 0)
			ix_rehash_for(&ix, 100000);
	}
	ix_destroy(&ix);
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic),
		cmocka_unit_test(test_key_too_long),
		cmocka_unit_test(test_growth),
		cmocka_unit_test(test_delete_during_rehash),
		cmocka_unit_test(test_one_home_during_resize),
		cmocka_unit_test(test_shrink),
		cmocka_unit_test(test_collisions),
		cmocka_unit_test(test_full_hash32_collision),
		cmocka_unit_test(test_scan_plain),
		cmocka_unit_test(test_scan_growth_during_iteration),
		cmocka_unit_test(test_scan_shrink_during_iteration),
		cmocka_unit_test(test_alloc_failures),
		cmocka_unit_test(test_random_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
