/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shmidx.c - the shared index's line protocol (src/common/shmidx.c)
 *
 * Single-threaded: digests against SHA-256 vectors (Python's hashlib made
 * them), insert / lookup / remove, overflow marks, the superblock's
 * states, torn and zeroed lines.
 *
 * The churn stress (the design's correctness counters, docs/shm-index.md
 * "Tests"): a writer thread binds keys to pages of a small pool, deletes
 * them and reuses each freed page at once (LIFO), and now and then moves
 * the whole index to a new table, reusing the old table's memory; reader
 * threads look keys up (with the hint of where each was last found, as
 * libmaru does; one by one and as batches of one), read the page (a header
 * naming the key and its registration, a pattern derived from both), then
 * re-check the hit. Every page a reader accepts must be the key's: 0 wrong. The
 * same run without the re-check (the control), with readers that never
 * invalidate their copy, and with a writer that does not write removals back
 * (both in the simulated non-coherent mode) must go wrong, so that the counters
 * are known to see what they count.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "shmidx.h"

static uint8_t *area_new(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

static void hex16(const char *hex, uint8_t out[16])
{
	int i;

	for (i = 0; i < 16; i++)
		sscanf(hex + 2 * i, "%2hhx", &out[i]);
}

static void test_digest_vectors(void **state)
{
	uint8_t d[16], want[16], k[100];
	uint64_t v = 42;

	si_digest(0, "abc", 3, d);
	hex16("bc50ac9d52d7e5cbafdbc392c52791f2", want);
	assert_memory_equal(d, want, 16);
	si_digest(1, "", 0, d);
	hex16("23165cd871d3c4044a7934c5fb1dfa74", want);
	assert_memory_equal(d, want, 16);
	si_digest(2, &v, 8, d); /* little-endian on x86 */
	hex16("ab1b23406d2d8c023f08e535d1d4d100", want);
	assert_memory_equal(d, want, 16);
	memset(k, 'x', sizeof(k)); /* two SHA-256 blocks */
	si_digest(0, k, sizeof(k), d);
	hex16("6b59cd8f6682406c5e7c591aeb49f75b", want);
	assert_memory_equal(d, want, 16);
}

/* an area with one table of @n groups at SI_HDR, state 2 */
static void setup_area(struct si_map *m, uint8_t *mem, size_t len,
		       struct si_table *t, uint64_t n, int coh)
{
	struct si_super sb = {0};

	assert_int_equal(si_map_init(m, mem, len, coh, true), 0);
	t->off = SI_HDR;
	t->n_groups = n;
	si_format(m, t);
	sb.state = 2;
	sb.magic = SI_MAGIC;
	sb.layout = SI_LAYOUT;
	sb.flags = coh != SI_COHERENT ? SI_SB_NONCOHERENT : 0;
	sb.area_id = 77;
	sb.table_off = t->off;
	sb.n_groups = n;
	si_wb_fence(m);
	si_super_write(m, &sb);
}

static struct si_entry entry(uint64_t key, uint64_t gen)
{
	struct si_entry e;

	memset(&e, 0, sizeof(e));
	si_digest(2, &key, 8, e.digest);
	e.region_id = 5;
	e.kv_offset = key * 64;
	e.kv_length = 64;
	e.gen = gen;
	return e;
}

static int look(const struct si_map *m, uint64_t key, struct si_hit *h)
{
	struct si_layout lay = {0};
	struct si_rstats st = {0};
	uint8_t d[16];

	si_digest(2, &key, 8, d);
	return si_lookup(m, &lay, d, 0, false, h, &st);
}

/* layout 2: a key's two groups are two groups of one 4 KiB page, the
 * second evenly among the other 15; a table of another size takes the
 * second anywhere */
static void test_groups_share_a_page(void **state)
{
	static const uint64_t pages[] = {16, 64, 1u << 20, 3 * 16};
	static const uint64_t odd[] = {1, 2, 5, 17, 24};
	unsigned seen[SI_PAGE_GROUPS] = {0};
	uint64_t g1, g2, k, n;
	uint8_t d[16];
	size_t i, j;

	(void)state;
	for (i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
		n = pages[i];
		for (k = 0; k < 20000; k++) {
			si_digest(2, &k, 8, d);
			si_groups(d, n, &g1, &g2);
			assert_true(g1 < n && g2 < n);
			assert_true(g1 != g2);
			assert_int_equal(g1 / SI_PAGE_GROUPS,
					 g2 / SI_PAGE_GROUPS);
			if (n == (1u << 20))
				seen[(g2 - g1) & (SI_PAGE_GROUPS - 1)]++;
		}
	}
	/* 20000 keys over 15 partners: ~1333 each */
	assert_int_equal(seen[0], 0);
	for (j = 1; j < SI_PAGE_GROUPS; j++)
		assert_true(seen[j] > 1100 && seen[j] < 1600);
	for (i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		n = odd[i];
		for (k = 0; k < 2000; k++) {
			si_digest(2, &k, 8, d);
			si_groups(d, n, &g1, &g2);
			assert_true(g1 < n && g2 < n);
			assert_true(n == 1 || g1 != g2);
		}
	}
}

static void test_insert_lookup_remove(void **state)
{
	size_t len = SI_HDR + si_table_bytes(64);
	uint8_t *mem = area_new(len);
	struct si_map m;
	struct si_table t = {0};
	struct si_entry e;
	struct si_hit h;
	uint64_t k;

	setup_area(&m, mem, len, &t, 64, SI_COHERENT);
	for (k = 0; k < 40; k++) {
		e = entry(k, 100 + k);
		assert_int_equal(si_insert(&m, &t, &e), 1);
	}
	e = entry(3, 999);
	assert_int_equal(si_insert(&m, &t, &e), -EEXIST);
	for (k = 0; k < 40; k++) {
		assert_int_equal(look(&m, k, &h), SI_HIT);
		assert_int_equal(h.gen, 100 + k);
		assert_int_equal(h.kv_offset, k * 64);
		assert_int_equal(h.region_id, 5);
	}
	assert_int_equal(look(&m, 1000, &h), SI_MISS);
	assert_int_equal(si_remove(&m, &t, entry(7, 0).digest), 1);
	assert_int_equal(si_remove(&m, &t, entry(7, 0).digest), 0);
	assert_int_equal(look(&m, 7, &h), SI_MISS);
	assert_int_equal(look(&m, 8, &h), SI_HIT);
	si_map_destroy(&m);
	munmap(mem, len);
}

static int look_hint(const struct si_map *m, uint64_t key, uint32_t hint,
		     struct si_hit *h)
{
	struct si_layout lay = {0};
	struct si_rstats st = {0};
	uint8_t d[16];

	si_digest(2, &key, 8, d);
	return si_lookup(m, &lay, d, hint, false, h, &st);
}

/* an entry marked SI_F_ASK (an evicted key the server still has: a
 * lookup must ask it) answers SI_ASK -- alone, with the hint of its own
 * line, in a batch; replaced by the key itself it is a hit again */
static void test_ask_marks(void **state)
{
	size_t len = SI_HDR + si_table_bytes(64);
	uint8_t *mem = area_new(len);
	struct si_map m;
	struct si_table t = {0};
	struct si_layout lay = {0};
	struct si_rstats st = {0};
	struct si_entry e;
	struct si_hit h, out[3];
	uint8_t dg[3][SI_DIGEST];
	uint32_t slot;
	int res[3];
	uint64_t k;

	setup_area(&m, mem, len, &t, 64, SI_COHERENT);
	for (k = 0; k < 3; k++) {
		e = entry(k, 10 + k);
		e.flags = k == 1 ? SI_F_ASK : 0;
		assert_int_equal(si_insert(&m, &t, &e), 1);
		si_digest(2, &k, 8, dg[k]);
	}
	assert_int_equal(look(&m, 0, &h), SI_HIT);
	slot = (uint32_t)(si_live(&m, &t, dg[1]) -
			  (const struct si_entry *)(m.base + t.off)) +
	       1;
	assert_int_equal(look(&m, 1, &h), SI_ASK);
	assert_int_equal(look_hint(&m, 1, slot, &h), SI_ASK);
	si_lookup_batch(&m, &lay, 3, (const uint8_t(*)[SI_DIGEST])dg, NULL, res,
			out, &st);
	assert_int_equal(res[0], SI_HIT);
	assert_int_equal(res[1], SI_ASK);
	assert_int_equal(res[2], SI_HIT);
	/* a lookup brought it back: the marker out, the key in */
	assert_int_equal(si_remove(&m, &t, dg[1]), 1);
	e = entry(1, 11);
	assert_int_equal(si_insert(&m, &t, &e), 1);
	assert_int_equal(look(&m, 1, &h), SI_HIT);
	assert_int_equal(h.gen, 11);
	si_map_destroy(&m);
	munmap(mem, len);
}

/* @key removed and stored again as registration @gen: back in its line
 * (1 + slot @slot), written back */
static void rebind(const struct si_map *m, const struct si_table *t,
		   uint64_t key, uint64_t gen, uint32_t slot)
{
	struct si_entry e = entry(key, gen);

	assert_int_equal(si_remove(m, t, e.digest), 1);
	assert_int_equal(si_insert(m, t, &e), 1);
	assert_ptr_equal(si_live(m, t, e.digest),
			 (struct si_entry *)(m->base + t->off) + slot - 1);
	si_wb_fence(m);
}

/*
 * Hints (si_hit.slot): a right one finds the key in its one line; any
 * other -- another key's slot, a slot since emptied or reused, one past
 * the table -- gives the answer a lookup without it gives; a batch with
 * hints of every kind answers as one without.  Coherent and simulated.
 */
static void test_hints(void **state)
{
	enum { N = 40 };
	static const int cohs[] = {SI_COHERENT, SI_SIMULATE};
	size_t len = SI_HDR + si_table_bytes(64);
	uint8_t dg[N + 2][SI_DIGEST];
	uint32_t slot[N], hints[N + 2];
	int res[N + 2], res0[N + 2];
	struct si_hit h, out[N + 2], out0[N + 2];
	struct si_layout lay = {0};
	struct si_rstats st = {0};
	struct si_table t = {0};
	struct si_entry e;
	struct si_map m, rd;
	uint64_t k, x;
	uint32_t old7;
	size_t c, i;

	for (c = 0; c < sizeof(cohs) / sizeof(cohs[0]); c++) {
		uint8_t *mem = area_new(len);

		setup_area(&m, mem, len, &t, 64, cohs[c]);
		assert_int_equal(si_map_init(&rd, mem, len, cohs[c], false), 0);
		for (k = 0; k < N; k++) {
			e = entry(k, 100 + k);
			assert_int_equal(si_insert(&m, &t, &e), 1);
		}
		si_wb_fence(&m);
		for (k = 0; k < N; k++) {
			assert_int_equal(look_hint(&rd, k, 0, &h), SI_HIT);
			assert_true(h.slot >= 1 && h.slot <= 64 * SI_GROUP);
			slot[k] = h.slot;
			/* the slot is the entry's */
			assert_memory_equal(
				((struct si_entry *)(m.base +
						     t.off))[h.slot - 1]
					.digest,
				entry(k, 0).digest, SI_DIGEST);
			memset(&h, 0, sizeof(h));
			assert_int_equal(look_hint(&rd, k, slot[k], &h),
					 SI_HIT);
			assert_int_equal(h.gen, 100 + k);
			assert_int_equal(h.slot, slot[k]);
			/* another key's slot, past the table, all ones */
			assert_int_equal(
				look_hint(&rd, k, slot[(k + 1) % N], &h),
				SI_HIT);
			assert_int_equal(h.gen, 100 + k);
			assert_int_equal(h.slot, slot[k]);
			assert_int_equal(
				look_hint(&rd, k, 64 * SI_GROUP + 1, &h),
				SI_HIT);
			assert_int_equal(look_hint(&rd, k, UINT32_MAX, &h),
					 SI_HIT);
			assert_int_equal(h.kv_offset, k * 64);
		}
		/*
		 * The writer moves things while the reader looks elsewhere
		 * (in SI_SIMULATE its copies of those lines are stale now: a
		 * lookup must invalidate what it reads): 7 goes, a key X
		 * takes its slot, 7 comes back elsewhere.
		 */
		old7 = slot[7];
		assert_int_equal(si_remove(&m, &t, entry(7, 0).digest), 1);
		for (x = 500; x < 100000; x++) {
			e = entry(x, 1);
			assert_int_equal(si_insert(&m, &t, &e), 1);
			if (si_live(&m, &t, e.digest) ==
			    (struct si_entry *)(m.base + t.off) + old7 - 1)
				break;
			assert_int_equal(si_remove(&m, &t, e.digest), 1);
		}
		assert_true(x < 100000);
		e = entry(7, 777);
		assert_int_equal(si_insert(&m, &t, &e), 1);
		si_wb_fence(&m);
		/* a batch: right, wrong, stale, outside, none; 2 misses */
		for (i = 0; i < N + 2; i++) {
			k = i < N ? i : 2000 + i;
			si_digest(2, &k, 8, dg[i]);
			hints[i] = i >= N	? slot[i % N]
				   : i % 5 == 0 ? slot[i]
				   : i % 5 == 1 ? slot[(i + 3) % N]
				   : i % 5 == 2 ? UINT32_MAX
				   : i % 5 == 3
					   ? 0
					   : 64 * SI_GROUP + 1 + (uint32_t)i;
		}
		hints[7] = old7; /* X's line now */
		memset(out, 0, sizeof(out));
		si_lookup_batch(&rd, &lay, N + 2,
				(const uint8_t(*)[SI_DIGEST])dg, hints, res,
				out, &st);
		for (i = 0; i < N + 2; i++) {
			assert_int_equal(res[i], i < N ? SI_HIT : SI_MISS);
			if (i >= N)
				continue;
			assert_int_equal(out[i].gen, i == 7 ? 777 : 100 + i);
			assert_int_equal(out[i].kv_offset, i * 64);
		}
		assert_true(out[7].slot != old7);
		slot[7] = out[7].slot;
		/* ... as a batch without hints */
		si_lookup_batch(&rd, &lay, N + 2,
				(const uint8_t(*)[SI_DIGEST])dg, NULL, res0,
				out0, &st);
		for (i = 0; i < N + 2; i++) {
			assert_int_equal(res0[i], res[i]);
			if (i < N)
				assert_int_equal(out0[i].slot, out[i].slot);
		}
		assert_int_equal(look_hint(&rd, 7, old7, &h), SI_HIT);
		assert_int_equal(h.gen, 777);
		assert_int_equal(look_hint(&rd, x, old7, &h), SI_HIT);
		assert_int_equal(h.gen, 1);
		/* 7 stored again in the line the reader holds a copy of, one
		 * by one and in a batch: the new registration, not the copy */
		rebind(&m, &t, 7, 888, slot[7]);
		assert_int_equal(look_hint(&rd, 7, slot[7], &h), SI_HIT);
		assert_int_equal(h.gen, 888);
		rebind(&m, &t, 7, 999, slot[7]);
		si_lookup_batch(&rd, &lay, 1,
				(const uint8_t(*)[SI_DIGEST])dg[7], &slot[7],
				res, out, &st);
		assert_int_equal(res[0], SI_HIT);
		assert_int_equal(out[0].gen, 999);
		/* gone: a miss, with the hint of its line; never there: too */
		assert_int_equal(si_remove(&m, &t, entry(x, 0).digest), 1);
		si_wb_fence(&m);
		assert_int_equal(look_hint(&rd, x, old7, &h), SI_MISS);
		assert_int_equal(look_hint(&rd, 1000, slot[3], &h), SI_MISS);
		si_map_destroy(&rd);
		si_map_destroy(&m);
		munmap(mem, len);
		memset(&lay, 0, sizeof(lay));
		memset(&t, 0, sizeof(t));
	}
}

static void test_overflow_marks(void **state)
{
	size_t len = SI_HDR + si_table_bytes(2);
	uint8_t *mem = area_new(len);
	struct si_map m;
	struct si_table t = {0};
	struct si_entry e;
	struct si_hit h;
	uint64_t k, placed = 0, over = 0;

	/* 2 groups, 8 slots: the ninth key and on overflow */
	setup_area(&m, mem, len, &t, 2, SI_COHERENT);
	for (k = 0; k < 12; k++) {
		e = entry(k, k + 1);
		if (si_insert(&m, &t, &e) == 1)
			placed++;
		else
			over++;
	}
	assert_int_equal(placed, 8);
	assert_int_equal(over, 4);
	/* published keys hit; the others (and any miss) must ask */
	for (k = 0; k < 12; k++) {
		int r = look(&m, k, &h);

		assert_true(r == SI_HIT || r == SI_ASK);
	}
	assert_int_equal(look(&m, 500, &h), SI_ASK);
	/* a removal keeps the mark: still not final */
	for (k = 0; k < 12; k++)
		si_remove(&m, &t, entry(k, 0).digest);
	assert_int_equal(look(&m, 0, &h), SI_ASK);
	si_map_destroy(&m);
	munmap(mem, len);
}

static void test_superblock_states(void **state)
{
	size_t len = SI_HDR + 2 * si_table_bytes(16);
	uint8_t *mem = area_new(len);
	struct si_layout lay = {0};
	struct si_rstats st = {0};
	struct si_super sb, cur;
	struct si_table t = {0}, t2 = {0};
	struct si_entry e;
	struct si_map m;
	struct si_hit h;
	uint8_t d[16];
	uint64_t k = 9;

	setup_area(&m, mem, len, &t, 16, SI_COHERENT);
	e = entry(k, 1);
	assert_int_equal(si_insert(&m, &t, &e), 1);
	si_digest(2, &k, 8, d);
	assert_int_equal(si_lookup(&m, &lay, d, 0, false, &h, &st), SI_HIT);
	assert_int_equal(lay.state, 2);
	/* being changed: ask */
	assert_int_equal(si_super_read(&m, &cur, &lay), 0);
	sb = cur;
	sb.state = 3;
	si_super_write(&m, &sb);
	assert_int_equal(si_super_read(&m, &cur, &lay), -EBUSY);
	assert_int_equal(si_lookup(&m, &lay, d, 0, false, &h, &st), SI_ASK);
	/* a new table elsewhere: a reader holding the old layout follows */
	t2.off = SI_HDR + si_table_bytes(16);
	t2.n_groups = 16;
	si_format(&m, &t2);
	e = entry(k, 2);
	assert_int_equal(si_insert(&m, &t2, &e), 1);
	sb.state = 4;
	sb.table_off = t2.off;
	si_super_write(&m, &sb);
	lay.state = 2;
	lay.table_off = t.off;
	lay.n_groups = 16;
	assert_int_equal(si_lookup(&m, &lay, d, 0, false, &h, &st), SI_HIT);
	assert_int_equal(h.gen, 2);
	assert_int_equal(lay.state, 4);
	assert_int_equal(lay.table_off, t2.off);
	/* a table outside the mapping, a wrong magic: never read */
	sb.state = 6;
	sb.table_off = len;
	si_super_write(&m, &sb);
	assert_int_equal(si_super_read(&m, &cur, &lay), -EBADF);
	lay.state = 0;
	assert_int_equal(si_lookup(&m, &lay, d, 0, false, &h, &st), SI_ASK);
	sb.table_off = t2.off;
	sb.magic = 1;
	si_super_write(&m, &sb);
	assert_int_equal(si_super_read(&m, &cur, &lay), -EBADF);
	si_map_destroy(&m);
	munmap(mem, len);
}

/*
 * What the check word is for (non-coherent hosts: a line may come from
 * memory half written back); a coherent reader relies on the seqlock
 * alone and reads only the words it needs
 */
static void test_torn_and_zero_lines(void **state)
{
	size_t len = SI_HDR + si_table_bytes(1);
	uint8_t *mem = area_new(len);
	struct si_table t = {0};
	struct si_entry e, *slot;
	struct si_map m;
	struct si_hit h;

	setup_area(&m, mem, len, &t, 1, SI_FLUSH);
	e = entry(1, 1);
	assert_int_equal(si_insert(&m, &t, &e), 1);
	slot = (struct si_entry *)(mem + SI_HDR);
	while (!(slot->flags & SI_F_LIVE))
		slot++;
	/* a word changed behind the check: unstable, then ask */
	slot->kv_offset ^= 1;
	assert_int_equal(look(&m, 1, &h), SI_ASK);
	slot->kv_offset ^= 1;
	assert_int_equal(look(&m, 1, &h), SI_HIT);
	/* zeroed memory (a punched page) is no entry at all */
	memset(mem + SI_HDR, 0, si_table_bytes(1));
	assert_int_equal(look(&m, 1, &h), SI_ASK);
	/* an odd sequence (a writer stopped mid-line) likewise */
	si_format(&m, &t);
	assert_int_equal(si_insert(&m, &t, &e), 1);
	assert_int_equal(look(&m, 1, &h), SI_HIT);
	slot = (struct si_entry *)(mem + SI_HDR);
	while (!(slot->flags & SI_F_LIVE))
		slot++;
	slot->seq |= 1;
	assert_int_equal(look(&m, 1, &h), SI_ASK);
	si_map_destroy(&m);
	munmap(mem, len);
}

/* ------------------------------------------------------------------ */
/* the churn stress                                                     */

#define NKEYS 96
#define NPAGES 72
#define PAGE 256
#define NGROUPS 64 /* 256 slots for at most 72 live keys */

struct page_hdr {
	uint64_t key, gen, sum;
};

struct churn {
	int coh;
	int fault;    /* SI_FAULT_* for the simulated mode */
	bool recheck; /* readers re-check hits (off: the control) */
	double seconds;
	uint8_t *mem; /* the index area */
	size_t len;
	uint8_t *pool; /* NPAGES pages */
	uint8_t digest[NKEYS][16];
	atomic_bool stop;
	/* results */
	atomic_ullong lookups, hits, misses, asks, wrong, detected, flips;
};

static uint64_t pat(uint64_t key, uint64_t gen, int i)
{
	return (key * 0x9e3779b97f4a7c15ull) ^ (gen << 20) ^ (uint64_t)i;
}

static void fill_page(uint8_t *p, uint64_t key, uint64_t gen)
{
	uint64_t *w = (uint64_t *)(p + sizeof(struct page_hdr));
	struct page_hdr *hd = (struct page_hdr *)p;
	int i, n = (PAGE - (int)sizeof(*hd)) / 8;
	uint64_t sum = 0;

	/* the owner writes the page; the header last, as a marker */
	for (i = 0; i < n; i++) {
		w[i] = pat(key, gen, i);
		sum += w[i];
	}
	__atomic_store_n(&hd->sum, sum, __ATOMIC_RELAXED);
	__atomic_store_n(&hd->gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&hd->key, key, __ATOMIC_RELEASE);
}

static uint64_t now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *writer(void *arg)
{
	struct churn *c = arg;
	struct si_map m;
	struct si_table t[2] = {{0}};
	struct si_super sb = {0};
	struct si_entry e;
	int64_t page_of[NKEYS];
	uint64_t gen_of[NKEYS], gen = 0, seed = 12345, end, ops = 0;
	int freel[NPAGES], nfree = NPAGES, cur = 0, i, k;

	assert_int_equal(si_map_init(&m, c->mem, c->len, c->coh, true), 0);
	m.fault = c->fault;
	for (i = 0; i < NPAGES; i++)
		freel[i] = NPAGES - 1 - i;
	for (k = 0; k < NKEYS; k++)
		page_of[k] = -1;
	t[0].off = SI_HDR;
	t[1].off = SI_HDR + si_table_bytes(NGROUPS);
	t[0].n_groups = t[1].n_groups = NGROUPS;
	/* the writer's shadow, as maru-server keeps one */
	assert_int_equal(si_shadow_new(&t[0]), 0);
	assert_int_equal(si_shadow_new(&t[1]), 0);
	si_format(&m, &t[0]);
	sb.state = 2;
	sb.magic = SI_MAGIC;
	sb.layout = SI_LAYOUT;
	sb.flags = c->coh != SI_COHERENT ? SI_SB_NONCOHERENT : 0;
	sb.table_off = t[0].off;
	sb.n_groups = NGROUPS;
	si_wb_fence(&m);
	si_super_write(&m, &sb);
	end = now() + (uint64_t)(c->seconds * 1e9);
	while (now() < end) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		k = (int)((seed >> 33) % NKEYS);
		if (page_of[k] >= 0) {
			/* delete: published before the "reply", then the
			 * owner reuses the page at once */
			si_remove(&m, &t[cur], c->digest[k]);
			si_wb_fence(&m);
			freel[nfree++] = (int)page_of[k];
			page_of[k] = -1;
		} else if (nfree) {
			int p = freel[--nfree];

			fill_page(c->pool + (size_t)p * PAGE, (uint64_t)k,
				  ++gen);
			memset(&e, 0, sizeof(e));
			memcpy(e.digest, c->digest[k], 16);
			e.region_id = 1;
			e.kv_offset = (uint64_t)p * PAGE;
			e.kv_length = PAGE;
			e.gen = gen;
			si_insert(&m, &t[cur], &e);
			si_wb_fence(&m);
			page_of[k] = p;
			gen_of[k] = gen;
		}
		if (++ops % 20000 == 0) {
			/* move to the other table; the old one's memory is
			 * formatted again at the next move */
			int nx = !cur;

			si_format(&m, &t[nx]);
			for (i = 0; i < NKEYS; i++) {
				if (page_of[i] < 0)
					continue;
				memset(&e, 0, sizeof(e));
				memcpy(e.digest, c->digest[i], 16);
				e.region_id = 1;
				e.kv_offset = (uint64_t)page_of[i] * PAGE;
				e.kv_length = PAGE;
				e.gen = gen_of[i];
				si_insert(&m, &t[nx], &e);
			}
			si_wb_fence(&m);
			sb.state += 2;
			sb.table_off = t[nx].off;
			si_super_write(&m, &sb);
			cur = nx;
			c->flips++;
		}
	}
	atomic_store(&c->stop, true);
	si_shadow_free(&t[0]);
	si_shadow_free(&t[1]);
	si_map_destroy(&m);
	return NULL;
}

/* does the page at @off hold key @key's registration @gen, whole? */
static bool page_is(const struct churn *c, uint64_t off, uint64_t key,
		    uint64_t gen)
{
	const uint8_t *p = c->pool + off;
	const struct page_hdr *hd = (const struct page_hdr *)p;
	const volatile uint64_t *w =
		(const volatile uint64_t *)(p + sizeof(*hd));
	uint64_t sum = 0, k, g, s;
	int i, n = (PAGE - (int)sizeof(*hd)) / 8, bad = 0;

	k = __atomic_load_n(&hd->key, __ATOMIC_ACQUIRE);
	g = __atomic_load_n(&hd->gen, __ATOMIC_RELAXED);
	s = __atomic_load_n(&hd->sum, __ATOMIC_RELAXED);
	for (i = 0; i < n; i++) {
		uint64_t v = w[i];

		sum += v;
		bad |= v != pat(key, gen, i);
	}
	return k == key && g == gen && s == sum && !bad;
}

static void *reader(void *arg)
{
	struct churn *c = arg;
	struct si_layout lay = {0}, lay2;
	struct si_rstats st = {0};
	struct si_hit h, h2;
	struct si_map m;
	uint64_t seed = (uint64_t)(uintptr_t)&lay, n = 0;
	uint32_t hint[NKEYS] = {0}; /* as libmaru's memo: where each was */
	bool ok, valid;
	int k, r, spin;

	assert_int_equal(si_map_init(&m, c->mem, c->len, c->coh, false), 0);
	m.fault = c->fault;
	while (!atomic_load(&c->stop)) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		k = (int)((seed >> 33) % NKEYS);
		if ((seed >> 40) & 1)
			r = si_lookup(&m, &lay, c->digest[k], hint[k], false,
				      &h, &st);
		else /* the batch path (one key) */
			si_lookup_batch(
				&m, &lay, 1,
				(const uint8_t(*)[SI_DIGEST])c->digest[k],
				&hint[k], &r, &h, &st);
		hint[k] = r == SI_HIT ? h.slot : 0;
		n++;
		if (r == SI_MISS) {
			c->misses++;
			continue;
		}
		if (r == SI_ASK) {
			c->asks++;
			continue;
		}
		c->hits++;
		/* consume the bytes (a copy that takes a while) */
		for (spin = 0; spin < (int)(seed >> 60) * 20; spin++)
			__asm__ volatile("" ::: "memory");
		ok = h.kv_length == PAGE && h.kv_offset % PAGE == 0 &&
		     h.kv_offset < (uint64_t)NPAGES * PAGE &&
		     page_is(c, h.kv_offset, (uint64_t)k, h.gen);
		valid = true;
		if (c->recheck) {
			lay2 = lay;
			valid = si_lookup(&m, &lay2, c->digest[k], hint[k],
					  true, &h2, &st) == SI_HIT &&
				h2.gen == h.gen && h2.kv_offset == h.kv_offset;
		}
		if (valid && !ok)
			c->wrong++;
		else if (!valid && !ok)
			c->detected++;
	}
	c->lookups += n;
	si_map_destroy(&m);
	return NULL;
}

static void churn_run(struct churn *c)
{
	pthread_t w, r[2];
	int k, i;

	c->len = SI_HDR + 2 * si_table_bytes(NGROUPS);
	c->mem = area_new(c->len);
	c->pool = area_new((size_t)NPAGES * PAGE);
	for (k = 0; k < NKEYS; k++) {
		uint64_t key = (uint64_t)k;

		si_digest(2, &key, 8, c->digest[k]);
	}
	atomic_store(&c->stop, false);
	assert_int_equal(pthread_create(&w, NULL, writer, c), 0);
	/* the readers start once the superblock is there */
	while (!__atomic_load_n((uint64_t *)c->mem, __ATOMIC_ACQUIRE))
		;
	for (i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&r[i], NULL, reader, c), 0);
	pthread_join(w, NULL);
	for (i = 0; i < 2; i++)
		pthread_join(r[i], NULL);
	print_message(
		"  %s%s%s: %llu lookups, %llu hits, %llu misses, %llu "
		"asks, %llu table moves; %llu races detected, %llu "
		"wrong\n",
		si_coh_name(c->coh),
		c->fault == SI_FAULT_NO_INV	 ? " (no invalidation)"
		: c->fault == SI_FAULT_NO_WB_DEL ? " (no write-back)"
						 : "",
		c->recheck ? "" : " (no re-check)",
		(unsigned long long)c->lookups, (unsigned long long)c->hits,
		(unsigned long long)c->misses, (unsigned long long)c->asks,
		(unsigned long long)c->flips, (unsigned long long)c->detected,
		(unsigned long long)c->wrong);
	munmap(c->mem, c->len);
	munmap(c->pool, (size_t)NPAGES * PAGE);
}

static struct churn *churn_new(int coh, int fault, bool recheck)
{
	struct churn *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	c->coh = coh;
	c->fault = fault;
	c->recheck = recheck;
	c->seconds = 1.0;
	return c;
}

static void test_churn_is_never_wrong(void **state)
{
	int modes[] = {SI_COHERENT, SI_FLUSH, SI_SIMULATE};
	size_t i;

	for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct churn *c = churn_new(modes[i], 0, true);

		churn_run(c);
		assert_true(c->hits > 1000);
		assert_int_equal(c->wrong, 0);
		assert_true(c->flips > 0);
		free(c);
	}
}

/* the control: the same churn read without the re-check goes wrong */
static void test_churn_control_goes_wrong(void **state)
{
	struct churn *c = churn_new(SI_COHERENT, 0, false);

	churn_run(c);
	assert_true(c->wrong > 0);
	free(c);
}

/* a reader that never invalidates, a writer that does not write its
 * removals back: the non-coherence injector makes both fail */
static void test_fault_injector_catches(void **state)
{
	struct churn *c = churn_new(SI_SIMULATE, SI_FAULT_NO_INV, true);

	churn_run(c);
	assert_true(c->wrong > 0);
	free(c);
	c = churn_new(SI_SIMULATE, SI_FAULT_NO_WB_DEL, true);
	churn_run(c);
	assert_true(c->wrong > 0);
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_digest_vectors),
		cmocka_unit_test(test_groups_share_a_page),
		cmocka_unit_test(test_insert_lookup_remove),
		cmocka_unit_test(test_ask_marks),
		cmocka_unit_test(test_hints),
		cmocka_unit_test(test_overflow_marks),
		cmocka_unit_test(test_superblock_states),
		cmocka_unit_test(test_torn_and_zero_lines),
		cmocka_unit_test(test_churn_is_never_wrong),
		cmocka_unit_test(test_churn_control_goes_wrong),
		cmocka_unit_test(test_fault_injector_catches),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
