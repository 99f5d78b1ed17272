/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.c - chained hash table with incremental rehash (see index.h)
 *
 * Design (Redis dict.c, adapted):
 *  - Buckets are arrays of entry pointers, a power of two long.  The table
 *    grows when it holds as many entries as buckets (load factor 1) and
 *    shrinks when it is less than 1/8 full.
 *  - A resize allocates the second table and then moves t[0] bucket by
 *    bucket: two buckets per insert, one per lookup or delete, and a
 *    time-boxed batch from the daemon's idle timer.  Moving a bucket is a
 *    few pointer writes per entry because each entry keeps 32 bits of its
 *    hash; no key is rehashed.  Two buckets per insert finish the move long
 *    before the new table is full, so there are never three tables.
 *  - Large bucket arrays come from mmap(): the new table's pages are zeroed
 *    lazily by page faults, spread over the inserts that touch them.  The
 *    old table is never unmapped by an insert, lookup or delete: the
 *    daemon's timer calls ix_release_for(), which unmaps the part the
 *    move has passed (and, once the move is over, the rest) in 64 KiB
 *    pieces.  On our VMs unmapping (or MADV_DONTNEED of) 2 MiB at once
 *    took 0.5-10 ms, 64 KiB well under 1 ms.
 *  - Buckets of t[0] below rehash_idx are empty by construction; every
 *    walk skips them rather than reading pages already given back.
 *  - Every key has one home during a resize: t[1] if its t[0] bucket was
 *    moved already, else t[0] (an insert into a bucket not yet moved goes
 *    to t[0], and moves with it).  A lookup probes one table, never both,
 *    and inserts touch t[1] only behind the move, in pages the move has
 *    already faulted in.  (Inserting into t[1] at random, as dict.c does,
 *    makes nearly every insert after a doubling fault in a fresh page of
 *    the new table: ~20 us each here, 1-6 ms per 64 inserts.)
 *
 * Entries are single allocations with the key inline (index.h); the
 * 32-bit stored hash is also the bucket index, so tables stop growing at
 * 2^31 buckets (far beyond any memory we have).
 *
 * The hash is a wyhash-style multiply-mix (public domain construction),
 * seeded per process so that keys chosen by a client cannot be aimed at
 * one bucket without knowing the seed.
 *
 * Context: single-threaded (the server's main thread owns the index).
 */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util.h"

#define IX_INIT_SIZE 16
#define IX_MAX_SIZE (1ull << 31)
#define IX_MMAP_MIN (256u << 10)  /* bucket arrays this big are mmap()ed */
#define IX_DROP_CHUNK (64u << 10) /* give old buckets back in 64 KiB */
#define IX_EMPTY_VISITS 10	  /* empty buckets skipped per moved one */

int (*ix_fail_hook)(void);

/* ---- hashing ---------------------------------------------------------- */

static inline uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline uint64_t rd32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

/* 64x64 -> 128 multiply, folded: the mixing step of wyhash */
static inline uint64_t mix(uint64_t a, uint64_t b)
{
	__extension__ unsigned __int128 r = (unsigned __int128)a * b;

	return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static const uint64_t S0 = 0xa0761d6478bd642full, S1 = 0xe7037ed1a0b428dbull,
		      S2 = 0x8ebc6af09c88c6e3ull, S3 = 0x589965cc75374cc3ull;

static uint64_t hash_bytes(const uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t a, b, see1, see2;
	size_t i = len;

	seed ^= mix(seed ^ S0, S1);
	if (len <= 16) {
		if (len >= 4) {
			a = rd32(p) << 32 | rd32(p + ((len >> 3) << 2));
			b = rd32(p + len - 4) << 32 |
			    rd32(p + len - 4 - ((len >> 3) << 2));
		} else if (len > 0) {
			a = (uint64_t)p[0] << 16 | (uint64_t)p[len >> 1] << 8 |
			    p[len - 1];
			b = 0;
		} else {
			a = b = 0;
		}
	} else {
		if (i > 48) {
			see1 = see2 = seed;
			do {
				seed = mix(rd64(p) ^ S1, rd64(p + 8) ^ seed);
				see1 = mix(rd64(p + 16) ^ S2,
					   rd64(p + 24) ^ see1);
				see2 = mix(rd64(p + 32) ^ S3,
					   rd64(p + 40) ^ see2);
				p += 48;
				i -= 48;
			} while (i > 48);
			seed ^= see1 ^ see2;
		}
		while (i > 16) {
			seed = mix(rd64(p) ^ S1, rd64(p + 8) ^ seed);
			i -= 16;
			p += 16;
		}
		a = rd64(p + i - 16);
		b = rd64(p + i - 8);
	}
	a ^= S1;
	b ^= seed;
	{
		__extension__ unsigned __int128 r = (unsigned __int128)a * b;

		a = (uint64_t)r;
		b = (uint64_t)(r >> 64);
	}
	return mix(a ^ S0 ^ len, b ^ S1);
}

uint64_t ix_hash(const struct ix *ix, const struct ix_key *k)
{
	return hash_bytes(k->ptr, k->len,
			  ix->seed ^ ((uint64_t)(k->tag + 1) * S2));
}

/* ---- tables ----------------------------------------------------------- */

static inline size_t tbl_bytes(const struct ix_table *t)
{
	return (size_t)t->size * sizeof(struct ix_entry *);
}

static int tbl_alloc(struct ix_table *t, uint64_t size)
{
	size_t bytes = (size_t)size * sizeof(struct ix_entry *);
	void *p;

	if (ix_fail_hook && ix_fail_hook())
		return -ENOMEM;
	if (bytes >= IX_MMAP_MIN) {
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return -ENOMEM;
		/*
		 * No MADV_HUGEPAGE: with the common THP defrag setting
		 * "madvise" it lets a page fault compact memory
		 * synchronously, which can stall for milliseconds.
		 */
	} else {
		p = calloc(size, sizeof(struct ix_entry *));
		if (!p)
			return -ENOMEM;
	}
	t->b = p;
	t->size = size;
	t->used = 0;
	t->dropped = 0;
	return 0;
}

/* Unmap one piece of a table released earlier (see tbl_release). */
static bool release_step(struct ix *ix)
{
	size_t n;

	if (!ix->nrel)
		return false;
	n = ix->rel[0].len < IX_DROP_CHUNK ? ix->rel[0].len : IX_DROP_CHUNK;
	munmap(ix->rel[0].p, n);
	ix->rel[0].p += n;
	ix->rel[0].len -= n;
	if (!ix->rel[0].len) {
		memmove(&ix->rel[0], &ix->rel[1],
			(size_t)--ix->nrel * sizeof(ix->rel[0]));
	}
	return true;
}

static size_t rel_bytes(const struct ix *ix)
{
	size_t n = 0;
	int i;

	for (i = 0; i < ix->nrel; i++)
		n += ix->rel[i].len;
	return n;
}

/*
 * Free a table.  A large one is not unmapped here (that can take
 * milliseconds): what is still mapped is queued, and ix_release_for()
 * unmaps it IX_DROP_CHUNK at a time from the daemon's timer.
 */
static void tbl_release(struct ix *ix, struct ix_table *t)
{
	if (t->b && tbl_bytes(t) >= IX_MMAP_MIN) {
		if (ix->nrel == IX_MAX_REL) {
			/* the timer has not kept up for 8 resizes: catch up */
			munmap(ix->rel[0].p, ix->rel[0].len);
			memmove(&ix->rel[0], &ix->rel[1],
				(size_t)--ix->nrel * sizeof(ix->rel[0]));
		}
		ix->rel[ix->nrel].p = (uint8_t *)t->b + t->dropped;
		ix->rel[ix->nrel].len = tbl_bytes(t) - t->dropped;
		ix->nrel++;
	} else {
		free(t->b);
	}
	memset(t, 0, sizeof(*t));
}

/*
 * Unmap one chunk of the fully moved start of an mmap()ed t[0].  Nothing
 * reads buckets below rehash_idx (see bucket()), and a prefetch of an
 * unmapped address is harmless.  Return: whether a chunk was unmapped.
 */
static bool drop_behind(struct ix *ix)
{
	struct ix_table *t0 = &ix->t[0];
	uint64_t done;

	if (!ix_rehashing(ix) || tbl_bytes(t0) < IX_MMAP_MIN)
		return false;
	done = (uint64_t)ix->rehash_idx * sizeof(struct ix_entry *);
	if (done < t0->dropped + IX_DROP_CHUNK)
		return false;
	munmap((uint8_t *)t0->b + t0->dropped, IX_DROP_CHUNK);
	t0->dropped += IX_DROP_CHUNK;
	return true;
}

/*
 * Move up to @n non-empty buckets from t[0] to t[1], looking at no more
 * than IX_EMPTY_VISITS empty buckets per moved one.  Finishes the resize
 * when t[0] is empty.
 */
static void rehash_step(struct ix *ix, unsigned n)
{
	struct ix_table *t0 = &ix->t[0], *t1 = &ix->t[1];
	uint64_t m1 = t1->size - 1;
	unsigned empty = n * IX_EMPTY_VISITS;
	struct ix_entry *e, *nx;
	uint64_t i;

	while (n-- && t0->used) {
		while (!t0->b[ix->rehash_idx]) {
			ix->rehash_idx++;
			if (--empty == 0)
				goto out;
		}
		for (e = t0->b[ix->rehash_idx]; e; e = nx) {
			nx = e->next;
			i = e->hash & m1;
			e->next = t1->b[i];
			t1->b[i] = e;
			t0->used--;
			t1->used++;
		}
		t0->b[ix->rehash_idx++] = NULL;
	}
out:
	if (t0->used == 0) {
		tbl_release(ix, t0);
		*t0 = *t1;
		memset(t1, 0, sizeof(*t1));
		ix->rehash_idx = -1;
	}
}

/* Start moving to a table of @size buckets.  Failure just keeps t[0]. */
static void start_resize(struct ix *ix, uint64_t size)
{
	if (size == ix->t[0].size || tbl_alloc(&ix->t[1], size) < 0)
		return;
	ix->rehash_idx = 0;
}

static void maybe_grow(struct ix *ix)
{
	if (ix->t[0].size < IX_MAX_SIZE && ix->count >= ix->t[0].size)
		start_resize(ix, ix->t[0].size * 2);
}

static void maybe_shrink(struct ix *ix)
{
	uint64_t want = ix->min_size;

	if (ix->t[0].size <= ix->min_size || ix->count * 8 >= ix->t[0].size)
		return;
	while (want < ix->count * 2)
		want *= 2;
	if (want < ix->t[0].size)
		start_resize(ix, want);
}

/* ---- operations ------------------------------------------------------- */

int ix_init(struct ix *ix, uint64_t seed)
{
	memset(ix, 0, sizeof(*ix));
	ix->rehash_idx = -1;
	ix->seed = seed;
	ix->min_size = IX_INIT_SIZE;
	return 0;
}

void ix_destroy(struct ix *ix)
{
	struct ix_entry *e, *nx;
	uint64_t i;
	int t;

	for (t = 0; t < 2; t++) {
		struct ix_table *tb = &ix->t[t];

		for (i = 0; i < tb->size && tb->used; i++) {
			if (t == 0 && ix->rehash_idx >= 0 &&
			    i < (uint64_t)ix->rehash_idx)
				continue;
			for (e = tb->b[i]; e; e = nx) {
				nx = e->next;
				free(e);
				tb->used--;
			}
		}
		tbl_release(ix, tb);
	}
	while (ix->nrel) {
		munmap(ix->rel[0].p, ix->rel[0].len);
		memmove(&ix->rel[0], &ix->rel[1],
			(size_t)--ix->nrel * sizeof(ix->rel[0]));
	}
	ix_init(ix, ix->seed);
}

/* Bucket @i of table @t, or NULL when it was already moved. */
static inline struct ix_entry **bucket(struct ix *ix, int t, uint64_t i)
{
	if (t == 0 && ix->rehash_idx >= 0 && i < (uint64_t)ix->rehash_idx)
		return NULL;
	return &ix->t[t].b[i];
}

/*
 * The table a key with hash @h32 lives in (see the design notes: t[1]
 * once its t[0] bucket has moved), its bucket index in @i; -1 when no
 * table exists yet.
 */
static inline int home(const struct ix *ix, uint32_t h32, uint64_t *i)
{
	*i = 0;
	if (!ix->t[0].size)
		return -1;
	*i = h32 & (ix->t[0].size - 1);
	if (ix->rehash_idx >= 0 && *i < (uint64_t)ix->rehash_idx) {
		*i = h32 & (ix->t[1].size - 1);
		return 1;
	}
	return 0;
}

static struct ix_entry *find(struct ix *ix, const struct ix_key *k, uint64_t h)
{
	uint32_t h32 = (uint32_t)h;
	uint32_t kt = k->len | (uint32_t)k->tag << 30;
	struct ix_entry *e;
	uint64_t i;
	int t = home(ix, h32, &i);

	if (t < 0)
		return NULL;
	for (e = ix->t[t].b[i]; e; e = e->next)
		if (e->hash == h32 && e->klen_tag == kt &&
		    !memcmp(e->key, k->ptr, k->len))
			return e;
	return NULL;
}

struct ix_entry *ix_find(struct ix *ix, const struct ix_key *k, uint64_t h)
{
	if (!ix->count)
		return NULL;
	if (ix_rehashing(ix))
		rehash_step(ix, 1);
	return find(ix, k, h);
}

int ix_insert(struct ix *ix, const struct ix_key *k, uint64_t h,
	      struct ix_entry **out)
{
	struct ix_table *tb;
	struct ix_entry *e;
	uint64_t i;
	int t;

	if (k->len > IX_KEY_MAX)
		return -E2BIG;
	if (ix_rehashing(ix))
		rehash_step(ix, 2);
	e = ix->count ? find(ix, k, h) : NULL;
	if (e) {
		*out = e;
		return 0;
	}
	if (!ix->t[0].size) {
		if (tbl_alloc(&ix->t[0], ix->min_size) < 0)
			return -ENOMEM;
	} else if (!ix_rehashing(ix)) {
		maybe_grow(ix);
	}
	if (ix_fail_hook && ix_fail_hook())
		return -ENOMEM;
	e = malloc(offsetof(struct ix_entry, key) + k->len);
	if (!e)
		return -ENOMEM;
	e->off = 0;
	e->len = 0;
	e->hash = (uint32_t)h;
	e->slot = IX_NO_SLOT;
	e->pins = 0;
	e->pol_prev = e->pol_next = NULL;
	e->gen = 0;
	e->klen_tag = k->len | (uint32_t)k->tag << 30;
	if (k->len)
		memcpy(e->key, k->ptr, k->len);
	t = home(ix, e->hash, &i);
	tb = &ix->t[t];
	e->next = tb->b[i];
	tb->b[i] = e;
	tb->used++;
	ix->count++;
	*out = e;
	return 1;
}

int ix_reserve(struct ix *ix, uint64_t n)
{
	uint64_t size = ix->min_size;

	if (ix->count || ix->t[0].size)
		return ix->count ? -EBUSY : 0;
	while (size < n && size < IX_MAX_SIZE)
		size *= 2;
	return tbl_alloc(&ix->t[0], size);
}

void ix_delete(struct ix *ix, struct ix_entry *e)
{
	struct ix_entry **pp;
	uint64_t i;
	int t = home(ix, e->hash, &i);

	if (t < 0)
		return;
	for (pp = &ix->t[t].b[i]; *pp; pp = &(*pp)->next)
		if (*pp == e)
			break;
	/* not found: the caller broke the contract; keep the index intact */
	if (!*pp)
		return;
	*pp = e->next;
	ix->t[t].used--;
	ix->count--;
	free(e);
	if (ix_rehashing(ix))
		rehash_step(ix, 1);
	else
		maybe_shrink(ix);
}

bool ix_rehash_for(struct ix *ix, uint64_t ns)
{
	uint64_t start = now_ns(), el = 0;

	if (!ix_rehashing(ix))
		maybe_shrink(ix);
	while (ix_rehashing(ix) && el < ns) {
		rehash_step(ix, 64);
		el = now_ns() - start;
	}
	if (el > ix->max_pause_ns)
		ix->max_pause_ns = el;
	if (el < ns)
		ix_release_for(ix, ns - el);
	return ix_rehashing(ix);
}

bool ix_release_for(struct ix *ix, uint64_t ns)
{
	uint64_t start = now_ns();

	do {
		if (!drop_behind(ix) && !release_step(ix))
			return false;
	} while (now_ns() - start < ns);
	return ix->nrel ||
	       (ix_rehashing(ix) && tbl_bytes(&ix->t[0]) >= IX_MMAP_MIN &&
		(uint64_t)ix->rehash_idx * sizeof(struct ix_entry *) >=
			ix->t[0].dropped + IX_DROP_CHUNK);
}

void ix_prefetch(const struct ix *ix, uint64_t h)
{
	uint64_t i;
	int t = home(ix, (uint32_t)h, &i);

	if (t >= 0)
		__builtin_prefetch(&ix->t[t].b[i]);
}

void ix_prefetch_entry(const struct ix *ix, uint64_t h)
{
	const struct ix_entry *e;
	uint64_t i;
	int t = home(ix, (uint32_t)h, &i);

	if (t < 0)
		return;
	e = ix->t[t].b[i];
	if (e) {
		/* header and key usually span two cache lines */
		__builtin_prefetch(e);
		__builtin_prefetch((const uint8_t *)e + 64);
	}
}

void ix_prefetch_next(const struct ix *ix, uint64_t h)
{
	uint32_t h32 = (uint32_t)h;
	const struct ix_entry *e;
	uint64_t i;
	int t = home(ix, h32, &i);

	if (t < 0)
		return;
	e = ix->t[t].b[i];
	/* the first entry is (likely) in cache by now: if it is not the one,
	 * the lookup will walk on to the second */
	if (e && e->hash != h32 && e->next) {
		__builtin_prefetch(e->next);
		__builtin_prefetch((const uint8_t *)e->next + 64);
	}
}

static uint64_t rev64(uint64_t v)
{
	v = ((v >> 1) & 0x5555555555555555ull) |
	    ((v & 0x5555555555555555ull) << 1);
	v = ((v >> 2) & 0x3333333333333333ull) |
	    ((v & 0x3333333333333333ull) << 2);
	v = ((v >> 4) & 0x0f0f0f0f0f0f0f0full) |
	    ((v & 0x0f0f0f0f0f0f0f0full) << 4);
	return __builtin_bswap64(v);
}

static void scan_bucket(struct ix *ix, int t, uint64_t i,
			void (*fn)(struct ix_entry *, void *), void *arg)
{
	struct ix_entry **bp = bucket(ix, t, i), *e, *nx;

	for (e = bp ? *bp : NULL; e; e = nx) {
		nx = e->next;
		fn(e, arg);
	}
}

uint64_t ix_scan(struct ix *ix, uint64_t v,
		 void (*fn)(struct ix_entry *e, void *arg), void *arg)
{
	uint64_t m0, m1;
	int small, large;

	if (!ix->count)
		return 0;
	if (!ix_rehashing(ix)) {
		m0 = ix->t[0].size - 1;
		scan_bucket(ix, 0, v & m0, fn, arg);
		/* increment the reversed cursor over the masked bits */
		v |= ~m0;
		v = rev64(v);
		v++;
		return rev64(v);
	}
	small = ix->t[0].size <= ix->t[1].size ? 0 : 1;
	large = 1 - small;
	m0 = ix->t[small].size - 1;
	m1 = ix->t[large].size - 1;
	scan_bucket(ix, small, v & m0, fn, arg);
	/* then every bucket of the larger table that the small one expands to
	 */
	do {
		scan_bucket(ix, large, v & m1, fn, arg);
		v |= ~m1;
		v = rev64(v);
		v++;
		v = rev64(v);
	} while (v & (m0 ^ m1));
	return v;
}

uint64_t ix_mem_tables(const struct ix *ix)
{
	return tbl_bytes(&ix->t[0]) - ix->t[0].dropped + tbl_bytes(&ix->t[1]) -
	       ix->t[1].dropped + rel_bytes(ix);
}
