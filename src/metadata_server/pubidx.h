/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pubidx.h - maru-server publishes its key index into shared memory
 * (docs/shm-index.md)
 *
 * The server stays the only writer of the shared index (src/common's
 * shmidx: its lines and their protocol); this module decides what goes
 * where.  Every key of a tracked region whose length fits 32 bits is
 * published; any other key marks its groups OVF, so that readers ask the
 * server about it.  The store calls pub_put() for a key it registered and
 * pub_del() for a key it removes, before it answers; the loop calls
 * pub_fence() before any reply leaves (non-coherent hosts: every line
 * written back first).
 *
 * Puts wait in a small queue until the fence (or a removal, a rebuild's
 * slice, a full queue, GET_STATS), which then publishes them in passes:
 * fetch every key's shadow groups and page, then find every key's line,
 * then fetch those lines, then write them.  A
 * put's misses (two random shadow lines, one table line, a page walk
 * each) then overlap those of the other puts of a burst instead of
 * following each other (what that gained, and what REGISTER still pays
 * for the index: docs/performance.md, "Shared index").  The queue keeps
 * the order of changes: a removal publishes the puts before it first.
 *
 * The area is a file on /dev/shm (mode 0644: readers of other users can
 * only map it read-only) or a region of the pool (--shm-index pool: the
 * only place other hosts can see; read-only there by convention).  It
 * holds the superblock and, placed first-fit inside it, the current table
 * and, while it is built, the next: a table that is more than half full,
 * or collected many overflow marks, is rebuilt at four times the size (or
 * the same) by pub_tick(), a slice at a time, every change written to both,
 * and the superblock moved to it when it holds every key.  A start marks
 * the area "being changed" (pub_open), builds a table from the recovered
 * index (pub_build) and only then publishes it; a clean stop marks it
 * again, so readers ask the server (pub_close).
 *
 * Ownership: struct pub owns its mapping, its file descriptor and its
 * path; it borrows the store's index and asks the store (through
 * @region_id) which region a key lives in.
 * Context: the server's main thread only.
 */
#ifndef MARU_MDS_PUBIDX_H
#define MARU_MDS_PUBIDX_H

#include <stdbool.h>
#include <stdint.h>

#include "index.h"
#include "msgpk.h"
#include "shmidx.h"

enum pub_mode {
	PUB_OFF = 0,
	PUB_FILE = 1, /* a file (tmpfs), this host's readers */
	PUB_POOL = 2, /* a region of the pool, every host's readers */
};

#define PUB_DEFAULT_FILE_SIZE (1ull << 30) /* sparse: tables only */
#define PUB_MIN_POOL_SIZE (4ull << 20)	   /* a region of the pool: */
#define PUB_MAX_POOL_SIZE (1ull << 30)	   /* ... a 64th of it, within these */
#define PUB_MIN_GROUPS 16384 /* 4 MiB: 32K keys before a rebuild */
#define PUB_REBUILD_GAP_NS (10ull * 1000000000) /* same-size rebuilds */
#define PUB_QUEUE 64 /* puts published together (a burst's) */

struct pub_config {
	int mode;	    /* enum pub_mode */
	const char *path;   /* PUB_FILE: the file (borrowed) */
	unsigned file_mode; /* PUB_FILE: its permission bits (never write) */
	long file_gid;	    /* PUB_FILE: its group; <= 0 ours */
	uint64_t size;	    /* the area's bytes */
	int coh;	    /* enum si_coh */
	int fault;	    /* SI_FAULT_* (tests, SI_SIMULATE) */
	uint64_t keys;	    /* the first table holds this many (0: the keys
			     * there are at start) */
	/* PUB_POOL: the region, allocated by the caller */
	void *pool_mem;	    /* borrowed: mapped read-write */
	uint64_t region_id; /* ... and its handle, for HANDSHAKE */
	uint64_t region_off, region_len, region_token;
};

struct pub_stats {
	uint64_t published; /* keys in the current table */
	uint64_t rpc_only;  /* keys only the server answers (OVF) */
	uint64_t rebuilds;  /* tables replaced while serving */
	uint64_t collisions;
	uint64_t build_ms; /* the start's build */
	uint64_t full;	   /* rebuilds refused: no room in the area */
};

struct pub {
	struct pub_config cfg;
	char *path;   /* owns (PUB_FILE) */
	int fd;	      /* owns (PUB_FILE); -1 */
	uint8_t *mem; /* owns the mapping (PUB_FILE), else borrowed */
	size_t len;
	struct si_map map;
	struct si_super sb;   /* as published */
	struct si_table cur;  /* what the superblock names (0 groups: none) */
	struct si_table next; /* being built (0 groups: none) */
	int phase;	      /* PUB_PH_* in pubidx.c */
	uint64_t fmt_done;    /* next's groups formatted so far */
	uint64_t scan_cursor; /* next's ix_scan cursor */
	bool scan_started;
	uint64_t ovf_since; /* keys marked OVF since the table was built */
	uint64_t cur_keys;  /* keys placed in cur (published) */
	uint64_t next_keys;
	uint64_t next_ovf; /* ... and marked OVF in next */
	bool need_fence;
	unsigned nq; /* puts queued (pub_put) */
	struct pub_q {
		uint8_t d[SI_DIGEST];
		uint64_t rid, off, len, gen;
		uint16_t flags; /* SI_F_ASK: a key in its grace */
	} q[PUB_QUEUE];
	bool said_full;
	bool grew;		    /* the file was made larger at open */
	uint64_t rebuilt_at;	    /* now_ns() of the last rebuild */
	uint8_t (*coll)[SI_DIGEST]; /* owns: digests two keys shared */
	size_t ncoll;
	struct pub_stats st;
	/* the store's: the index, and the region id of an entry (0: none) */
	struct ix *kv;
	uint64_t (*region_id)(void *arg, const struct ix_entry *e);
	void *arg;
};

/**
 * pub_open - open (or create) the area and mark it "being changed"
 * @out: gives the publisher; release with pub_close()
 * @err: a reason on failure
 * Return: 0 or -errno.
 */
int pub_open(struct pub **out, const struct pub_config *cfg, char *err,
	     size_t errlen);

/**
 * pub_build - publish every key of @kv in a new table and name it in the
 * superblock; from now on pub_put()/pub_del() keep it current
 * Return: 0 or -ENOSPC (the area cannot hold a table: nothing published,
 * readers ask the server).
 */
int pub_build(struct pub *p, struct ix *kv,
	      uint64_t (*region_id)(void *arg, const struct ix_entry *e),
	      void *arg);

/* pub_put - a key registered (new entry: queued, published by the next
 * pub_fence at the latest); pub_del - a key removed.  A NULL @p does
 * nothing. */
void pub_put(struct pub *p, const struct ix_entry *e, uint64_t region_id);
void pub_del(struct pub *p, const struct ix_entry *e);

/* pub_put_ask - key @e, evicted but still in its page (the grace: the
 * store's retire.c), published so that readers ask the server about it
 * (SI_F_ASK) instead of taking a final miss; pub_del() takes it out.
 * Markers are not carried into a rebuilt table (a miss there is final,
 * as without them). */
void pub_put_ask(struct pub *p, const struct ix_entry *e, uint64_t region_id);

/* pub_flush - publish the queued puts (pub_fence's first step) */
void pub_flush(struct pub *p);

/* pub_fence - every change so far is published and its lines are in
 * memory (before replies) */
static inline void pub_fence(struct pub *p)
{
	if (p && p->nq)
		pub_flush(p);
	if (p && p->need_fence) {
		si_wb_fence(&p->map);
		p->need_fence = false;
	}
}

/**
 * pub_tick - a slice of a rebuild (format, copy, switch), for about @ns
 * Return: true while a rebuild is in progress.
 */
bool pub_tick(struct pub *p, uint64_t ns);

/* pub_busy - a rebuild is in progress (the loop gives it idle time) */
static inline bool pub_busy(const struct pub *p)
{
	return p && p->phase != 0;
}

/* pub_close - mark the area "being changed" (readers ask), unmap; NULL ok */
void pub_close(struct pub *p);

/* HANDSHAKE's descriptor: "capabilities" is the caller's; this writes the
 * value of "shm_index" (a map) */
void pub_encode_descriptor(const struct pub *p, struct mp_wr *w);

/* GET_STATS "shm_index" (a map; the clients' counters come from @clients) */
void pub_encode_stats(struct pub *p, struct mp_wr *w,
		      const uint64_t clients[3]);

/* the area's id (0: no index), for HEARTBEAT replies */
static inline uint64_t pub_area_id(const struct pub *p)
{
	return p ? p->sb.area_id : 0;
}

#endif
