/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.h - one memory pool and its first-fit allocator
 *
 * A pool is a byte range [base, base + total_size) of a device, a file or a
 * filesystem, carved into aligned extents.  The allocator keeps the free
 * extents in one array sorted by offset and always coalesced (no two free
 * extents touch), which makes first fit, split and merge simple loops and
 * lets pool_check() verify the invariants in tests.
 *
 * Memory: the extent array can only grow in pool_alloc() and
 * pool_reserve(); they keep room for nallocs + 1 extents (the most a pool
 * can ever have: free extents are separated by allocations), so
 * pool_free() never allocates and never fails for a valid range.
 *
 * Pure and single-threaded: no I/O, no logging.  Device specifics (headers,
 * discovery, FS_DAX files) are in dev.c.
 */
#ifndef MARU_RM_POOL_H
#define MARU_RM_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rm_proto.h"

#define POOL_MAX_ALLOC (1ull << 48) /* larger requests are -EINVAL */
#define POOL_MAX_ALIGN (1ull << 30) /* 1 GiB: the largest device-dax align */
#define POOL_MIN_ALIGN 4096ull

enum pool_kind {
	POOL_DEV_DAX,  /* /dev/daxX.Y through libdaxctl */
	POOL_FS_DAX,   /* a DAX-mounted filesystem, one file per region */
	POOL_EMULATED, /* a (sparse) file treated exactly like DEV_DAX */
};

struct pool_extent {
	uint64_t offset; /* pool-space offset (DEV_DAX: device offset) */
	uint64_t length; /* bytes, > 0 */
};

struct pool {
	uint32_t id; /* stable across restarts, see dev.c */
	enum pool_kind kind;
	char *path;	     /* owns: device, mount point or file */
	uint64_t dev_size;   /* bytes of the device / file / filesystem */
	uint64_t align;	     /* power of two, POOL_MIN_ALIGN..POOL_MAX_ALIGN */
	uint64_t base;	     /* first usable offset: align, or 0 for FS_DAX */
	uint64_t total_size; /* usable bytes: dev_size - base */
	uint64_t free_size;  /* sum of free extent lengths */
	struct pool_extent *ext; /* owns: free extents, sorted, coalesced */
	size_t next;		 /* extents in use */
	size_t ext_cap;		 /* extents allocated */
	size_t nallocs;		 /* allocated ranges (for the capacity rule) */
	bool has_uuid;		 /* DEV_DAX and EMULATED carry a MARUDEV uuid */
	uint8_t uuid[16];
	char uuid_str[37]; /* 8-4-4-4-12 lowercase hex, NUL-terminated */
	bool fresh;	   /* header written or file created at this
			    * start: recovered regions cannot be in it */
	int lockfd;	   /* owns: @path opened and flock()ed while we
			    * serve it (one resource manager per pool) */
};

/**
 * pool_init - set up the allocator with one free extent [base, base + size)
 * @p: zeroed by the caller (or fresh); path/kind/id are left untouched
 * @align: a power of two
 * Return: 0 or -EINVAL (bad alignment, empty range, overflow), -ENOMEM.
 */
int pool_init(struct pool *p, uint64_t base, uint64_t size, uint64_t align);

/* pool_fini - release the extent array and path; @p may be pool_init()ed again
 */
void pool_fini(struct pool *p);

/**
 * pool_alloc - first fit with alignment
 * @size: requested bytes; rounded up to the pool alignment
 * @offset: gets the start of the allocated range (a multiple of align)
 * @aligned: gets the allocated length
 * Return: 0, -EINVAL (size 0 or > POOL_MAX_ALLOC), -ENOMEM (no extent fits,
 * or out of memory).  On error the pool is unchanged.
 */
int pool_alloc(struct pool *p, uint64_t size, uint64_t *offset,
	       uint64_t *aligned);

/**
 * pool_free - return [offset, offset + length) to the free list, merging
 * with its neighbours
 * Return: 0, or -EINVAL if the range lies outside the pool or overlaps a
 * free extent (a double free); the pool is then unchanged.
 */
int pool_free(struct pool *p, uint64_t offset, uint64_t length);

/**
 * pool_reserve - mark exactly [offset, offset + length) as allocated (used
 * by recovery to re-apply allocations)
 * Return: 0, -EINVAL if the range is not entirely inside one free extent
 * (an overlap with another allocation or outside the pool), -ENOMEM.
 */
int pool_reserve(struct pool *p, uint64_t offset, uint64_t length);

/**
 * pool_check - verify the free list invariants: sorted, coalesced, inside
 * [base, base + total_size), lengths > 0, free_size equals their sum
 * Return: true if all hold.
 */
bool pool_check(const struct pool *p);

/**
 * pool_pick_alloc - the allocation policy across pools
 * @pools: @n borrowed pools in list order
 * @dax_path: empty = any pool, fill-first in list order; otherwise only
 *            the pool whose path is exactly equal
 * @out: gets the pool that satisfied the request
 * Return: 0, -EINVAL (size), -ENODEV (no pools), -ENOENT (no pool has
 * @dax_path), -ENOMEM (nothing fits).
 */
int pool_pick_alloc(struct pool *const *pools, size_t n, struct rm_str dax_path,
		    uint64_t size, struct pool **out, uint64_t *offset,
		    uint64_t *aligned);

/* pool_is_pow2 - true for a non-zero power of two */
static inline bool pool_is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

#endif
