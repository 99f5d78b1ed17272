/* SPDX-License-Identifier: Apache-2.0 */
/*
 * journal.h - maru-server's journal: what a restart recovers
 * (docs/metadata-server.md, Restart)
 *
 * A directory (--state-dir) of segments "journal.<16 hex digits>", read
 * in the order of their numbers.  A segment is a sequence of frames
 *
 *	u32le length | u32le crc32 (zlib) of the payload | payload
 *
 * and each payload one MessagePack array [type, fields...] (the
 * project's writer and reader, msgpk.h).  Every record states a part of
 * the state absolutely (a key and its location, a region and its state,
 * a holder's pin count), never a difference, so that replaying any
 * in-order sequence of them gives the state of its last record, and a
 * snapshot is just the current state written as more records after the
 * live ones (store.c, "Journal").  The first record of a segment is a
 * HEAD carrying the server's identity; segments before the newest
 * complete snapshot are unlinked.
 *
 * Durability (docs/metadata-server.md, "Restart"): records are buffered
 * (jr_put_*) and written by jr_commit(), which the loop calls before any
 * reply leaves (server.c, conn_flush()): one write(2) per batch of
 * replies.  JR_PROCESS stops there -- the page cache survives the
 * process (kill -9, a crash), the failure domain of a pool on /dev/shm;
 * JR_HOST adds fdatasync(2) -- it survives the host.
 *
 * Reading is pure and bounded so that it can be fuzzed on raw bytes
 * (tests/fuzz/fuzz_mds_journal.c): jr_next() finds the frames, and
 * jr_decode() checks one payload against the schema of its type.
 * Recovery replays the longest valid prefix, truncates the segment there,
 * renames the segments after it "*.bad", and says what it dropped.
 *
 * Ownership: struct jr owns its fds, its buffer and the directory lock
 * (flock on "lock": one server per directory).  Decoded records borrow
 * from the bytes they were decoded from.
 * Context: the server's loop thread only.
 */
#ifndef MARU_MDS_JOURNAL_H
#define MARU_MDS_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define JR_VERSION 1
#define JR_FRAME_HDR 8
#define JR_REC_MAX ((1u << 30) + 4096) /* a key of IX_KEY_MAX, and more */

enum jr_type {
	JR_HEAD = 1,	   /* version, server_id, segment number */
	JR_SNAP_BEGIN = 2, /* gen: a snapshot of the state follows */
	JR_SNAP_END = 3,   /* ... it is complete */
	JR_LEASE = 4,	   /* lease_id, instance: an active lease */
	JR_LEASE_END = 5,  /* lease_id: ended (remembered as such) */
	JR_REGION = 6,	   /* region_id, offset, length, token, instance,
			    * lease_id|nil, state, gone_why */
	JR_FREE = 7,	   /* region_id, offset, length, token: untracked,
			    * its FREE at the RM queued */
	JR_FREED = 8,	   /* region_id: the RM answered its FREE */
	JR_KEY = 9,	   /* tag, key, region_id|nil, off, len, gen */
	JR_DEL = 10,	   /* tag, key: gone */
	JR_PIN = 11,	   /* instance, tag, key, count (0: none), the
			    * holder's lease|nil (absent in older journals:
			    * nil) */
	JR_NTYPES
};

enum jr_durability {
	JR_NONE = 0,	/* no journal: a restart starts empty */
	JR_PROCESS = 1, /* write(2) before the reply: survives the process */
	JR_HOST = 2,	/* ... and fdatasync(2): survives the host */
};

struct jr_bytes {
	const uint8_t *p; /* borrows; NULL for nil */
	uint32_t len;
};

/* One decoded record: numbers in u[], strings and keys in s[], in order. */
struct jr_rec {
	uint8_t type; /* enum jr_type */
	uint8_t nu, ns;
	bool nil_u; /* an optional number was nil (KEY: no region); its
		     * u[] is UINT64_MAX */
	uint64_t u[6];
	struct jr_bytes s[3];
};

/**
 * jr_next - the frame at *@off of @p[0..@len)
 * Return: 1 with *@payload and *@plen set and *@off advanced, 0 at the end,
 * -EAGAIN for a torn tail (a frame cut by the end, or zeroes), -EPROTO
 * for a bad checksum or length.
 */
int jr_next(const uint8_t *p, size_t len, size_t *off, const uint8_t **payload,
	    uint32_t *plen);

/**
 * jr_decode - check @p against its type's schema and fill @rec
 * Return: 0 or -EPROTO (unknown type, wrong field count or kinds).
 */
int jr_decode(const uint8_t *p, size_t len, struct jr_rec *rec);

struct jr {
	char *dir;	    /* owns */
	int dirfd, lockfd;  /* owns; -1 */
	int fd;		    /* owns: the segment appended to; -1 */
	uint64_t seq;	    /* its number */
	bool sync;	    /* JR_HOST */
	bool failed;	    /* a write failed: journaling stopped */
	struct buf out;	    /* owns: records not written yet */
	uint64_t total;	    /* bytes in all live segments */
	uint64_t base;	    /* ... right after the last snapshot/recovery */
	char server_id[17]; /* from the HEADs */
	/* counters */
	uint64_t commits, syncs, written;
};

/* What jr_recover() found. */
struct jr_recovery {
	bool found;	   /* a valid HEAD: the identity is recovered */
	uint64_t records;  /* applied */
	uint64_t segments; /* read */
	uint64_t bytes;	   /* valid bytes */
	uint64_t dropped;  /* bytes after the first bad record */
	/*
	 * The stop was not where a write was cut off (a torn tail of the
	 * newest segment, which nobody was told of): valid records follow
	 * it, so acknowledged operations are lost and the prefix is a state
	 * the pool's bytes have moved on from (a lost DELETE would bring
	 * back a key whose pages were reused).  It must not be served.
	 */
	bool lossy;
	char why[160]; /* why they were dropped; "" */
};

/**
 * jr_open - take the directory (created if missing), lock it
 * @readonly: no lock, no creation (--verify-state)
 * Return: 0, -EWOULDBLOCK (another server holds it), or -errno (with
 * @err saying what failed).
 */
int jr_open(struct jr *j, const char *dir, bool sync, bool readonly, char *err,
	    size_t errlen);

/* jr_disk_bytes - the size of every segment together (0 if none) */
uint64_t jr_disk_bytes(struct jr *j);

/**
 * jr_recover - replay the segments through @apply, in order; stop at the
 * first bad frame or record (or one @apply refuses: < 0)
 * @readonly: leave the files as they are
 * @ahead: NULL, or told of each record some records before @apply gets
 *	   it (stage 0, then 1 closer to it): a hint to prefetch, no more
 * Then, unless @readonly, appends go on at the end of the valid prefix
 * (nothing is truncated when @out->lossy: jr_start() sets it all aside).
 * Return: 0, -ENOMEM (@apply ran out of memory: nothing on disk is
 * changed), or -errno (I/O).  A journal that is not valid is not an
 * error: @out says what was found.
 */
int jr_recover(struct jr *j, bool readonly,
	       int (*apply)(void *arg, const struct jr_rec *rec),
	       void (*ahead)(void *arg, const struct jr_rec *rec, int stage),
	       void *arg, struct jr_recovery *out);

/**
 * jr_start - begin appending: when recovery found nothing, a first
 * segment whose HEAD names @server_id (all older segments are removed)
 * Return: 0 or -errno.
 */
int jr_start(struct jr *j, const char *server_id);

/**
 * jr_rotate - a new segment (HEAD first) for a snapshot; the older ones
 * go with jr_drop_before() once the snapshot is complete and committed
 * Return: 0 or -errno (journaling then stopped: jr->failed).
 */
int jr_rotate(struct jr *j);

/* jr_drop_before - unlink the segments numbered below the current one */
void jr_drop_before(struct jr *j);

/* jr_dirty - records wait for jr_commit() */
static inline bool jr_dirty(const struct jr *j)
{
	return j->out.len != 0;
}

/**
 * jr_commit - write the buffered records (and fdatasync with JR_HOST)
 * Return: 0 or -errno; on failure journaling stops (jr->failed), and
 * the caller decides what that means (store.c: the journal is removed).
 */
int jr_commit(struct jr *j);

/*
 * jr_remove - unlink every segment (a journal that cannot be trusted)
 * Return: 0 once none is left and the directory is synced, or -errno
 * (some may be left: the caller must not go on as if there were none).
 */
int jr_remove(struct jr *j);

/* jr_close - commit, sync, close; the lock goes with it */
void jr_close(struct jr *j);

/* ---- records (buffered; the store calls these) ---- */

void jr_put_snap_begin(struct jr *j, uint64_t gen);
void jr_put_snap_end(struct jr *j);
void jr_put_lease(struct jr *j, const char *id, uint32_t idlen,
		  const char *inst, uint32_t ilen);
void jr_put_lease_end(struct jr *j, const char *id, uint32_t idlen);
void jr_put_region(struct jr *j, const uint64_t h[4], const char *inst,
		   uint32_t ilen, const char *lease, uint32_t llen,
		   uint8_t state, uint8_t why);
void jr_put_free(struct jr *j, const uint64_t h[4]);
void jr_put_freed(struct jr *j, uint64_t region_id);
/* @region_id: UINT64_MAX for none (a key of an untracked region) */
void jr_put_key(struct jr *j, uint8_t tag, const uint8_t *key, uint32_t klen,
		uint64_t region_id, uint64_t off, uint64_t len, uint64_t gen);
void jr_put_del(struct jr *j, uint8_t tag, const uint8_t *key, uint32_t klen);
/* @lease: the holder's lease (an owner of @inst), NULL for none */
void jr_put_pin(struct jr *j, const char *inst, uint32_t ilen,
		const char *lease, uint32_t llen, uint8_t tag,
		const uint8_t *key, uint32_t klen, uint64_t count);

#endif
