/* SPDX-License-Identifier: Apache-2.0 */
/*
 * statefmt.h - byte layouts of the state directory (docs/resource-manager.md)
 *
 * Upstream's binary formats, little-endian, so that an upstream state
 * directory can be adopted:
 *
 *   allocation record (200 bytes)
 *     0 handle (region_id, offset, length, auth_token: 4 x u64)
 *    32 owner client_id char[128], NUL-terminated
 *   160 requested_size u64   168 alloc_length u64   176 nonce u64
 *   184 pool_id u32          188 padding u32        192 real_offset u64
 *
 *   WAL record = 32-byte header + payload
 *     0 magic u32 0x57414C21   4 version u32 6   8 type u32 (1 ALLOC, 2 FREE)
 *    12 reserved u32           16 payload_len u32 20 padding u32
 *    24 timestamp u64 (unix seconds)
 *     Our extension: "reserved" holds the low and "padding" the high 32
 *     bits of the request's request_id (0 = none, as upstream writes), so
 *     the idempotency cache survives a crash.  Upstream ignores both.
 *     payload: ALLOC = allocation record, FREE = region_id u64
 *
 *   pool_<id>.meta = header + extent_count x {offset u64, length u64}
 *     0 magic u32 0x4D455441   4 version u32 6   8 pool_id u32
 *    12 crc32 u32 of the extent array (0 if empty)
 *    16 total_size u64         24 extent_count u64
 *
 *   global.meta = header + alloc_count x allocation record
 *     0 magic u32 0x474C4F42   4 version u32 2   8 crc32 u32 of the records
 *    12 reserved u32           16 next_region_id u64  24 alloc_count u64
 *
 * Our own (not upstream's), in the same frame as the checkpoints:
 *
 *   holds.meta = header + count x hold record (144 bytes)
 *     0 magic u32 0x484F4C44   4 version u32 1   8 crc32 u32 of the records
 *    12 reserved u32           16 reserved u64    24 count u64
 *     record: 0 owner client_id char[128], NUL-terminated;
 *     128 away_since u64 (unix seconds its last connection closed, 0 if
 *     it was connected); 136 write_ms u32 (how long its clients may write
 *     after it goes: RELEASE waits that long); 140 reserved u32
 *   The clients whose regions are held until they return
 *   (RM_HOLD_UNTIL_BACK), so that a restart of the resource manager
 *   keeps holding them (holds.c).
 *
 * Every parser here is pure and bounded (reads only [p, p + len), never
 * allocates), so the WAL and checkpoint readers can be fuzzed on raw bytes
 * (tests/fuzz/fuzz_rm_wal.c, fuzz_rm_checkpoint.c).  Parsed structures
 * borrow from the input buffer where noted.
 */
#ifndef MARU_RM_STATEFMT_H
#define MARU_RM_STATEFMT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "pool.h"
#include "rm_proto.h"

#define STATE_ALLOC_REC_SIZE 200
#define STATE_OWNER_SIZE 128 /* char[128] with the NUL */

#define WAL_MAGIC 0x57414C21u
#define WAL_VERSION 6
#define WAL_HDR_SIZE 32
#define WAL_ALLOC 1
#define WAL_FREE 2
#define WAL_FREE_PAYLOAD 8

#define POOL_META_MAGIC 0x4D455441u
#define POOL_META_VERSION 6
#define POOL_META_HDR_SIZE 32
#define POOL_META_EXTENT_SIZE 16

#define GLOBAL_META_MAGIC 0x474C4F42u
#define GLOBAL_META_VERSION 2
#define GLOBAL_META_HDR_SIZE 32

#define HOLDS_META_MAGIC 0x484F4C44u
#define HOLDS_META_VERSION 1
#define HOLDS_META_HDR_SIZE 32
#define HOLDS_REC_SIZE 144

/* One allocation as stored in the WAL and in global.meta. */
struct state_alloc {
	struct rm_handle handle;
	char owner[STATE_OWNER_SIZE]; /* NUL-terminated, 1..127 chars */
	uint64_t requested_size;
	uint64_t alloc_length; /* == handle.length */
	uint64_t nonce;
	uint32_t pool_id;
	uint64_t real_offset; /* offset in pool space (FS_DAX too) */
};

/* One decoded WAL record. */
struct wal_rec {
	uint32_t type;		  /* WAL_ALLOC or WAL_FREE */
	uint64_t timestamp;	  /* unix seconds */
	struct state_alloc alloc; /* WAL_ALLOC */
	uint64_t region_id;	  /* WAL_FREE (and WAL_ALLOC: the handle's) */
	uint64_t request_id;	  /* 0 = none */
};

/* A validated pool_<id>.meta; extents borrow from the input. */
struct pool_meta {
	uint32_t pool_id;
	uint64_t total_size;
	uint64_t count;
	const uint8_t *extents; /* borrows: count x 16 bytes */
};

/* A validated global.meta; records borrow from the input. */
struct global_meta {
	uint64_t next_region_id;
	uint64_t count;
	const uint8_t *records; /* borrows: count x 200 bytes */
};

/* A validated holds.meta; records borrow from the input. */
struct holds_meta {
	uint64_t count;
	const uint8_t *records; /* borrows: count x 144 bytes */
};

/* One hold: a client whose regions stay until it comes back. */
struct state_hold {
	char owner[STATE_OWNER_SIZE]; /* NUL-terminated, 1..127 chars */
	uint64_t away_since;	      /* unix seconds; 0: was connected */
	uint32_t write_ms;	      /* its clients' window after it goes */
};

/* state_alloc_put - write @a as a 200-byte record at @p */
void state_alloc_put(uint8_t *p, const struct state_alloc *a);

/**
 * state_alloc_get - read a 200-byte record
 * Return: 0, or -EPROTO if the owner is empty or not NUL-terminated.
 * Range checks against pools are the caller's.
 */
int state_alloc_get(const uint8_t *p, struct state_alloc *a);

/**
 * state_wal_next - decode the WAL record at *off
 * Return: 1 and *off advanced past the record; 0 at a clean end;
 * -EAGAIN for a torn tail (an incomplete last record, or only zero bytes
 * left: a crash during an append); -EPROTO for a corrupt record (bad magic
 * or version followed by non-zero bytes, unknown type, wrong payload size,
 * bad allocation record), with *why set.  *off is unchanged on <= 0.
 */
int state_wal_next(const uint8_t *p, size_t len, size_t *off, struct wal_rec *r,
		   const char **why);

/* Append one WAL record to @b.  Return: 0 or -ENOMEM. */
int state_wal_encode_alloc(struct buf *b, const struct state_alloc *a,
			   uint64_t request_id, uint64_t timestamp);
int state_wal_encode_free(struct buf *b, uint64_t region_id,
			  uint64_t request_id, uint64_t timestamp);

/**
 * state_pool_meta_parse - validate a pool_<id>.meta image
 * Checks magic, version, that the size is exactly header + count x 16, the
 * CRC, and that the extents are sorted, non-empty and non-overlapping.
 * Return: 0, or -EPROTO with *why set to a short reason.
 */
int state_pool_meta_parse(const uint8_t *p, size_t len, struct pool_meta *m,
			  const char **why);

/* state_pool_meta_extent - extent @i of a parsed meta (i < m->count) */
void state_pool_meta_extent(const struct pool_meta *m, uint64_t i,
			    uint64_t *offset, uint64_t *length);

/* state_pool_meta_encode - a whole pool_<id>.meta image into @b */
int state_pool_meta_encode(struct buf *b, uint32_t pool_id, uint64_t total_size,
			   const struct pool_extent *ext, size_t count);

/**
 * state_global_meta_parse - validate a global.meta image
 * Checks magic, version, exact size, CRC; each record is decoded (owner
 * terminated) by state_global_meta_get().
 * Return: 0, or -EPROTO with *why set.
 */
int state_global_meta_parse(const uint8_t *p, size_t len, struct global_meta *m,
			    const char **why);

/* state_global_meta_get - record @i.  Return: 0 or -EPROTO */
int state_global_meta_get(const struct global_meta *m, uint64_t i,
			  struct state_alloc *a);

/*
 * global.meta encoding into an empty @b: begin (header placeholder), add
 * each allocation, end (count and CRC).  Return: 0 or -ENOMEM.
 */
int state_global_meta_begin(struct buf *b, uint64_t next_region_id);
int state_global_meta_add(struct buf *b, const struct state_alloc *a);
void state_global_meta_end(struct buf *b, uint64_t count);

/**
 * state_holds_parse - validate a holds.meta image (magic, version, exact
 * size, CRC); records are read with state_holds_get()
 * Return: 0, or -EPROTO with *why set.
 */
int state_holds_parse(const uint8_t *p, size_t len, struct holds_meta *m,
		      const char **why);

/* state_holds_get - record @i.  Return: 0, or -EPROTO (bad owner) */
int state_holds_get(const struct holds_meta *m, uint64_t i,
		    struct state_hold *h);

/* state_holds_encode - a whole holds.meta image of @n holds into @b */
int state_holds_encode(struct buf *b, const struct state_hold *h, size_t n);

#endif
