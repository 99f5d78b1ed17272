/* SPDX-License-Identifier: Apache-2.0 */
/*
 * index.h - the KV index of maru-server: opaque byte keys -> entries
 *
 * A chained hash table in the style of Redis dict.c, built for tens of
 * millions of keys: two power-of-two bucket arrays during a resize, moved
 * over a few buckets per operation (and on an idle timer), so no single
 * call pays for a whole rehash.  Each entry is one malloc() holding the
 * value fields and the key bytes inline (no separate key allocation).
 *
 * Keys are (tag, bytes): the tag keeps a string, a byte string and an
 * integer with the same bytes apart.  The index does not interpret the
 * value fields; maru-server stores a KV record in them, and reuses the
 * same structure for its small id -> slot maps.
 *
 * Context: single-threaded; the caller serialises every call.
 */
#ifndef MARU_MDS_INDEX_H
#define MARU_MDS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keyform.h" /* the tags: enum key_tag */

#define IX_KEY_MAX ((1u << 30) - 1) /* longest key in bytes */
#define IX_NO_SLOT UINT32_MAX
#define IX_MAX_REL 8 /* released tables waiting to be unmapped */

struct ix_key {
	const uint8_t *ptr; /* borrows */
	uint32_t len;	    /* <= IX_KEY_MAX */
	uint8_t tag;	    /* enum key_tag */
};

/*
 * One entry.  64 bytes of header, then the key: with glibc's 16-byte
 * chunks a 24-byte key costs 96 bytes and a 40-byte key 112.  The
 * eviction policy's links and the registration generation (policy.h)
 * are 24 of those bytes; the small id maps leave them zero.
 */
struct ix_entry {
	struct ix_entry *next; /* owns: next in the bucket chain */
	uint64_t off;	       /* value: kv_offset */
	uint64_t len;	       /* value: kv_length */
	uint32_t hash;	       /* low 32 bits of the key hash */
	uint32_t slot;	       /* value: region slot, or IX_NO_SLOT */
	uint32_t pins;	       /* value: pin count */
	uint32_t klen_tag;     /* key length | tag << 30 */
	struct ix_entry *pol_prev, *pol_next; /* policy.h's list; borrows */
	uint64_t gen;			      /* value: registration number */
	uint8_t key[]; /* key bytes, not NUL-terminated */
};

struct ix_table {
	struct ix_entry **b; /* owns: mmap()ed bucket array, or NULL */
	uint64_t size;	     /* buckets, a power of two (0 when b NULL) */
	uint64_t used;	     /* entries in this table */
	uint64_t dropped;    /* bytes at the start already given back */
};

struct ix {
	struct ix_table t[2];  /* t[1] only during a resize */
	int64_t rehash_idx;    /* next t[0] bucket to move, -1 if none */
	uint64_t count;	       /* entries in both tables */
	uint64_t seed;	       /* hash seed (random per process) */
	uint64_t min_size;     /* never shrink below this many buckets */
	uint64_t max_pause_ns; /* longest idle rehash step (stats) */
	struct {
		uint8_t *p; /* owns: a released table, still mapped */
		size_t len; /* ... bytes of it, unmapped piecemeal */
	} rel[IX_MAX_REL];
	int nrel;
};

static inline uint32_t ix_entry_klen(const struct ix_entry *e)
{
	return e->klen_tag & IX_KEY_MAX;
}

static inline uint8_t ix_entry_tag(const struct ix_entry *e)
{
	return (uint8_t)(e->klen_tag >> 30);
}

/**
 * ix_init - an empty index
 * @seed: hash seed; pass a random value in daemons (hash flooding)
 * Return: 0 (no allocation happens until the first insert).
 */
int ix_init(struct ix *ix, uint64_t seed);

/* ix_destroy - free every entry and both tables; @ix may be re-inited */
void ix_destroy(struct ix *ix);

/* ix_hash - the 64-bit hash of @k under this index's seed */
uint64_t ix_hash(const struct ix *ix, const struct ix_key *k);

/**
 * ix_find - look a key up
 * @h: ix_hash() of @k
 * Return: the entry (borrowed: valid until it is deleted), or NULL.
 */
struct ix_entry *ix_find(struct ix *ix, const struct ix_key *k, uint64_t h);

/**
 * ix_insert - find or add a key
 * @h: ix_hash() of @k
 * @out: the entry, borrowed; a new one has all value fields zero and
 *	 slot = IX_NO_SLOT
 * Return: 1 when the entry is new, 0 when the key was present, -ENOMEM
 * (*out untouched), -E2BIG for a key longer than IX_KEY_MAX.
 */
int ix_insert(struct ix *ix, const struct ix_key *k, uint64_t h,
	      struct ix_entry **out);

/**
 * ix_reserve - size an empty index for about @n entries at once (a
 * replay that knows how much is coming skips every resize on the way)
 * Return: 0, -EBUSY if @ix holds entries, -ENOMEM.
 */
int ix_reserve(struct ix *ix, uint64_t n);

/**
 * ix_delete - unlink and free an entry found with ix_find()/ix_insert()
 * @e: taken; freed before return
 */
void ix_delete(struct ix *ix, struct ix_entry *e);

/**
 * ix_rehash_for - move buckets of a resize in progress for about @ns
 * (then unmap what is no longer used for the rest of @ns)
 * Return: true while a resize is still in progress.  Called by the
 * daemon whenever no request is waiting, so that a resize finishes soon
 * after the traffic that started it.
 */
bool ix_rehash_for(struct ix *ix, uint64_t ns);

/**
 * ix_release_for - unmap bucket memory no longer used, for about @ns (at
 * least one 64 KiB piece if there is any)
 * Return: true while some is left.  Called by the daemon's timer; the
 * operations themselves never unmap (see index.c).
 */
bool ix_release_for(struct ix *ix, uint64_t ns);

static inline bool ix_rehashing(const struct ix *ix)
{
	return ix->rehash_idx >= 0;
}

/* ix_busy - a resize or a release is left for ix_rehash_for() to finish */
static inline bool ix_busy(const struct ix *ix)
{
	return ix->rehash_idx >= 0 || ix->nrel;
}

/* ix_prefetch - start loading the bucket of hash @h (batch lookups) */
void ix_prefetch(const struct ix *ix, uint64_t h);

/*
 * ix_prefetch_entry - start loading the first entry of @h's bucket; call
 * it some time after ix_prefetch() of the same hash, when the bucket is
 * (likely) in cache, and ix_find() some time later again
 */
void ix_prefetch_entry(const struct ix *ix, uint64_t h);

/*
 * ix_prefetch_next - start loading the second entry of @h's bucket when the
 * first (which must be in cache: call some time after ix_prefetch_entry())
 * is not @h's; at load factor 1 a third of the hits sit behind another key
 */
void ix_prefetch_next(const struct ix *ix, uint64_t h);

/**
 * ix_scan - visit the entries of one cursor step (Redis dictScan)
 * @cursor: 0 to start; pass back the returned value; 0 means done
 * @fn: called once per entry; must not insert or delete
 *
 * A complete scan reports every entry present from its start to its end
 * at least once, even if the index grows or shrinks between steps; an
 * entry may be reported more than once across a resize.
 * Return: the next cursor.
 */
uint64_t ix_scan(struct ix *ix, uint64_t cursor,
		 void (*fn)(struct ix_entry *e, void *arg), void *arg);

/* ix_mem_tables - bytes of bucket arrays currently mapped (all tables) */
uint64_t ix_mem_tables(const struct ix *ix);

/*
 * Fault injection for unit tests: when non-NULL, called before every
 * allocation; a non-zero return makes that allocation fail.
 */
extern int (*ix_fail_hook)(void);

#endif
