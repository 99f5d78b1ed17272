/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shmidx.h - the shared index: the layout and line protocol of the hash
 * index that maru-server publishes into shared memory and that libmaru
 * searches with no RPC (docs/shm-index.md)
 *
 * One writer (maru-server's loop thread) and any number of readers, in
 * other processes and possibly on other hosts behind one CXL switch,
 * share an *area*: a file on /dev/shm or a region of the pool.
 *
 *	[0, 64)         the superblock line: state, where the table is
 *	[64, 4096)      unused
 *	[table_off, +n_groups * 256)   the table: groups of 4 entries
 *
 * Entries.  A key is named by a 128-bit digest (the first 16 bytes of
 * SHA-256 over "MK1" || tag || key bytes, si_digest()); a key lives in
 * one of two groups chosen by the two halves of its digest (both in one
 * 4 KiB page: si_groups) and never moves.  An entry is one 64-byte line
 * that verifies itself: a sequence number (odd while the writer is in the
 * middle of it) and a 64-bit check over the other words.  All-zero memory
 * fails the check, so a fresh or punched page reads as "unstable", never
 * as an entry.  A group whose two choices were full (or that holds a key
 * the writer would not publish) carries the OVF mark in its slot 0: a
 * miss there is not final.  OVF is sticky for the table's life; the
 * writer rebuilds a table that collects too many.
 *
 * Superblock.  Word 0 is the state: odd while the writer changes the
 * layout (a start, a rebuild), else the epoch of the current table.  A
 * reader snapshots the line before and reads the state again after it
 * read the entries; any change means the entries may belong to another
 * table, and the lookup starts over.  The writer may therefore reuse the
 * memory of a table as soon as the superblock no longer names it.
 *
 * Coherence.  In SI_FLUSH mode (device-DAX shared by hosts without
 * hardware coherence) the writer writes every line it changes back
 * (clwb) and fences (sfence) before it acknowledges anything; the reader
 * invalidates (clflushopt) the lines it is about to read, then fences
 * (mfence), so that it loads memory's copy.  SI_SIMULATE is the same
 * protocol over a private copy (tests): the writer's stores reach the
 * shared memory only through si_wb(), the reader sees the shared memory
 * only through si_inv(), so a missing write-back or invalidation shows
 * on a coherent machine.
 *
 * Ownership: a struct si_map borrows its mapping (the caller maps and
 * unmaps it) and owns its simulation copy.  Readers never store to the
 * area.
 * Context: the writer functions from one thread; the reader functions
 * from any thread, lock-free.
 */
#ifndef MARU_COMMON_SHMIDX_H
#define MARU_COMMON_SHMIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SI_MAGIC 0x3158444955524153ull /* "SURIDX1" + a version byte */
#define SI_LAYOUT                                                              \
	3 /* 2: a key's two groups share a 4 KiB page; 3: SI_F_ASK             \
	   */
#define SI_LINE 64
#define SI_GROUP 4 /* entries per group */
#define SI_GROUP_BYTES (SI_GROUP * SI_LINE)
#define SI_HDR 4096 /* the superblock's page */
#define SI_DIGEST 16
#define SI_PAGE_SHIFT 4 /* 16 groups: 4 KiB */
#define SI_PAGE_GROUPS (1u << SI_PAGE_SHIFT)
#define SI_RETRIES 16 /* unstable snapshots before a lookup asks the server */

enum {
	SI_F_LIVE = 0x0001, /* a binding */
	SI_F_ASK = 0x0002,  /* with LIVE: the key is the server's to answer
			     * (evicted, its page in the grace: a LOOKUP
			     * brings it back); a lookup says SI_ASK */
	SI_F_OVF = 0x0100,  /* slot 0 only: the group overflowed */
};

enum {
	SI_SB_NONCOHERENT = 1, /* readers must invalidate (SI_FLUSH) */
	SI_SB_SIMULATE = 2,    /* ... in the tests' simulation */
};

/* One entry, one cache line.  Words 0..6 are covered by @check. */
struct si_entry {
	uint32_t seq;	/* even: stable; odd: being written */
	uint16_t flags; /* SI_F_* */
	uint16_t rsvd0;
	uint8_t digest[SI_DIGEST];
	uint64_t region_id; /* the resource manager's region id */
	uint64_t kv_offset; /* in the region */
	uint32_t kv_length;
	uint32_t rsvd1;
	uint64_t gen;	/* the registration number: names the binding */
	uint64_t check; /* si_check() of words 0..6 */
} __attribute__((aligned(64)));

/* The superblock line. */
struct si_super {
	uint64_t state;	    /* odd: changing; even: the table's epoch */
	uint64_t magic;	    /* SI_MAGIC */
	uint32_t layout;    /* SI_LAYOUT */
	uint32_t flags;	    /* SI_SB_* */
	uint64_t area_id;   /* random, from the area's creation */
	uint64_t table_off; /* bytes from the area's start */
	uint64_t n_groups;
	uint64_t boot; /* writer starts that used this area */
	uint64_t check;
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct si_entry) == SI_LINE, "an entry is a line");
_Static_assert(sizeof(struct si_super) == SI_LINE, "the superblock is a line");

/* ---- the mapping and its coherence ---- */

enum si_coh {
	SI_COHERENT = 0, /* one host (or hardware coherence): plain loads */
	SI_FLUSH = 1,	 /* write back / invalidate every line */
	SI_SIMULATE = 2, /* SI_FLUSH's rules over a private copy (tests) */
};

/* test knobs of SI_SIMULATE (MARU_SHM_INDEX_FAULT): break the protocol */
enum {
	SI_FAULT_NO_WB_DEL = 1, /* the writer does not write back removals */
	SI_FAULT_NO_INV = 2,	/* the reader does not invalidate */
};

struct si_map {
	uint8_t *base; /* what the code reads and writes */
	uint8_t *mem;  /* borrows: the shared mapping (== base but in
			* SI_SIMULATE, where base is owned) */
	size_t len;
	int coh;   /* enum si_coh */
	int fault; /* SI_FAULT_* (SI_SIMULATE only) */
};

/**
 * si_map_init - the coherence model over a mapping of @len bytes at @mem
 * @writer: the simulation copy starts as the memory's content (a reader's
 *	starts empty: every line is invalidated before it is read)
 * Return: 0, -ENOTSUP (SI_FLUSH on a CPU without the instructions), or
 * -ENOMEM.
 */
int si_map_init(struct si_map *m, void *mem, size_t len, int coh, bool writer);
void si_map_destroy(struct si_map *m);

/* si_coh_name / si_coh_parse - "none", "flush", "simulate" */
const char *si_coh_name(int coh);
int si_coh_parse(const char *s);

/* writer: send the line holding @p towards memory; si_wb_fence() orders
 * every si_wb() before later stores (and before replies) */
void si_wb(const struct si_map *m, const void *p);
void si_wb_fence(const struct si_map *m);
/* reader: drop this host's copy of the line holding @p (before reading) */
void si_inv(const struct si_map *m, const void *p);

/* ---- keys ---- */

/* si_digest - the digest of a key in its canonical form (keyform.h): @tag,
 * and @key its bytes */
void si_digest(uint8_t tag, const void *key, size_t len,
	       uint8_t out[SI_DIGEST]);

/* si_check - the check word of an entry (or of the superblock) */
uint64_t si_check(const void *line);

/* ---- readers ---- */

/* Where the table is, as a superblock said it. */
struct si_layout {
	uint64_t state;
	uint64_t table_off;
	uint64_t n_groups;
};

enum si_result {
	SI_HIT = 0,  /* *out holds the binding */
	SI_MISS = 1, /* absent at some instant during the lookup: final */
	SI_ASK = 2,  /* not known here: ask the server */
};

struct si_hit {
	uint64_t region_id;
	uint64_t kv_offset;
	uint64_t kv_length;
	uint64_t gen;
	uint32_t slot; /* 1 + the entry's slot in the table (a hint for the
			* next lookup of the key), 0 with no hit */
};

/* Counters of one reader (for tests and stats; not atomic). */
struct si_rstats {
	uint64_t unstable; /* snapshots rejected */
	uint64_t restarts; /* lookups started over (state moved) */
};

/**
 * si_super_read - a consistent snapshot of the superblock (invalidated
 * first in SI_FLUSH mode)
 * Return: 0 with *@lay (state even), -EBUSY (the writer marked it "being
 * changed": a start, a stop), -EAGAIN (a torn line: try again), -EBADF
 * (not an index of this layout, or a table outside the mapping).
 */
int si_super_read(const struct si_map *m, struct si_super *out,
		  struct si_layout *lay);

/**
 * si_lookup - find digest @d
 * @lay: in: the layout last used (state 0: none yet); out: refreshed when
 *	the superblock moved on (the caller keeps it for the next lookup)
 * @hint: 0, or where an earlier lookup found the key (si_hit.slot): that
 *	one line is read first, and the groups only when it no longer holds
 *	the key (any value is safe: a line proves itself, and one outside
 *	the table is ignored)
 * @after_use: the caller read bytes of an earlier hit and now re-checks
 *	it (SI_FLUSH: those reads are complete before any line is dropped)
 * Return: enum si_result.
 */
int si_lookup(const struct si_map *m, struct si_layout *lay,
	      const uint8_t d[SI_DIGEST], uint32_t hint, bool after_use,
	      struct si_hit *out, struct si_rstats *st);

/**
 * si_lookup_batch - si_lookup() of @n digests, the superblock read once
 * per 32 keys and the next lines prefetched while one key is probed
 * @hint: NULL, or one si_lookup() hint per digest
 * @res: out: one enum si_result per digest; @out: the hits
 */
void si_lookup_batch(const struct si_map *m, struct si_layout *lay, size_t n,
		     const uint8_t (*d)[SI_DIGEST], const uint32_t *hint,
		     int *res, struct si_hit *out, struct si_rstats *st);

/*
 * the two groups of digest @d in a table of @n groups: the first from the
 * digest's first half; the second from its second half, inside the first
 * one's 4 KiB page (16 groups) when @n is a multiple of 16 -- a key then
 * costs a lookup or a change one page's translation, not two (on a VM a
 * TLB miss is a few hundred ns) -- else anywhere
 */
void si_groups(const uint8_t d[SI_DIGEST], uint64_t n, uint64_t *g1,
	       uint64_t *g2);

/* ---- the writer ---- */

/*
 * A table, as the writer sees it.  @sh, when set, is the writer's private
 * shadow of it (si_shadow_new): per group (8 bytes) a 16-bit fingerprint
 * of the digest in each slot (0: empty), so that placing, finding and
 * removing a key read the small shadow (8 MiB for a table of 4 M keys:
 * it mostly stays in the caches and the TLB) and touch the shared lines
 * only to write them, or to confirm a fingerprint's match.  A slot's
 * sequence number and the group's overflow mark are read from the line,
 * which the writer fetches anyway before it writes it.
 */
struct si_gshadow {
	uint16_t fp[SI_GROUP]; /* 0: empty */
};

struct si_table {
	uint64_t off; /* bytes from the area's start */
	uint64_t n_groups;
	struct si_gshadow *sh; /* owns (si_shadow_free): n_groups, or NULL */
};

_Static_assert(sizeof(struct si_gshadow) == 8, "eight groups a line");

/* si_shadow_new - a shadow for @t (empty, as si_format makes it).
 * Return: 0 or -ENOMEM. */
int si_shadow_new(struct si_table *t);
void si_shadow_free(struct si_table *t);

/* si_table_bytes - the size of a table of @n_groups */
static inline uint64_t si_table_bytes(uint64_t n_groups)
{
	return n_groups * SI_GROUP_BYTES;
}

/* si_format - every slot of @t a stable EMPTY line (written back) */
void si_format(const struct si_map *m, const struct si_table *t);

/**
 * si_insert - publish @v (its digest, location, gen; of its flags only
 * SI_F_ASK) into the emptier of its two groups
 * Return: 1 published, 0 no room (both groups are marked OVF), -EEXIST a
 * live entry has the same digest (nothing changed).
 */
int si_insert(const struct si_map *m, const struct si_table *t,
	      const struct si_entry *v);

/*
 * si_aim - the line si_insert() would put digest @d in, as things are
 * (with a shadow; else NULL): a writer that fetches it a while before the
 * insert finds it in its cache then
 */
const void *si_aim(const struct si_map *m, const struct si_table *t,
		   const uint8_t d[SI_DIGEST]);

/**
 * si_remove - make the entry of digest @d EMPTY, if there is one
 * Return: 1 removed, 0 not there.
 */
int si_remove(const struct si_map *m, const struct si_table *t,
	      const uint8_t d[SI_DIGEST]);

/* si_mark_ovf - mark both groups of @d OVF (a key not published) */
void si_mark_ovf(const struct si_map *m, const struct si_table *t,
		 const uint8_t d[SI_DIGEST]);

/* si_live - the live entry of digest @d in @t (the writer's view), NULL */
const struct si_entry *si_live(const struct si_map *m, const struct si_table *t,
			       const uint8_t d[SI_DIGEST]);

/**
 * si_super_write - publish a superblock: the state goes odd, the fields
 * are written, then the state becomes @sb->state (even: done; odd: the
 * area stays "being changed", readers ask the server)
 */
void si_super_write(const struct si_map *m, const struct si_super *sb);

#endif
