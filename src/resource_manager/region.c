/* SPDX-License-Identifier: Apache-2.0 */
/*
 * region.c - the region table, and allocate/free as durable operations
 *
 * An allocation is: pick a pool and an extent (pool.c), create the region
 * file for FS_DAX pools, draw a nonce and compute the token (auth.c),
 * append an ALLOC record to the WAL with fdatasync (state.c), and only
 * then insert the region and answer.  Any failure before the WAL append undoes
 * the earlier steps, so a failed ALLOC leaves nothing behind (this also fixes
 * upstream's extent leak when FS_DAX file creation fails).  A free logs
 * the FREE record first and then releases the extent and the file.
 *
 * Table: chained hash on the region id, doubled at load 1.  Region ids
 * are global, start at 1 and are never reused, even after a failed
 * allocation.
 *
 * Layering: this file calls down into state.c (the WAL), auth.c, client.c,
 * pool.c and dev.c; none of them calls it back.  Recovery (recovery.c)
 * sits above and rebuilds the table with region_restore() and
 * region_unrestore(), which write nothing to the WAL.
 *
 * Ownership: @rm owns every region; a region borrows its pool and its
 * owner (counted in owner->nallocs).  Context: the event-loop thread.
 */
#include "rm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

struct region *region_find(struct rm *rm, uint64_t id)
{
	struct hnode *n;
	struct region *r;

	htab_for_hash(&rm->regions, htab_hash_u64(id), n)
	{
		r = container_of(n, struct region, hn);
		if (r->id == id)
			return r;
	}
	return NULL;
}

static int table_reserve(struct rm *rm)
{
	return htab_reserve(&rm->regions);
}

/* Insert @r; the caller has called table_reserve(). */
static void table_insert(struct rm *rm, struct region *r)
{
	htab_insert(&rm->regions, &r->hn, htab_hash_u64(r->id));
	rm->nregions++;
	r->owner->nallocs++;
	r->owner->bytes += r->length;
}

static void table_remove(struct rm *rm, struct region *r)
{
	htab_remove(&rm->regions, &r->hn);
	rm->nregions--;
	r->owner->nallocs--;
	r->owner->bytes -= r->length;
}

const char *region_path(const struct region *r, char *buf, size_t len)
{
	if (r->pool->kind != POOL_FS_DAX)
		return r->pool->path;
	snprintf(buf, len, "%s/maru_%" PRIu64 ".dat", r->pool->path, r->id);
	return buf;
}

/*
 * FS_DAX: create the region's file exclusively, --pool-mode/--pool-group
 * (dev_file_perm), sized to the aligned length (sparse: ftruncate
 * allocates nothing).
 */
static int fsdax_create(const struct rm *rm, const struct region *r)
{
	char path[4200];
	int fd, rc = 0;

	region_path(r, path, sizeof(path));
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		log_err("region %" PRIu64 ": cannot create %s: %s", r->id, path,
			strerror(errno));
		return rc;
	}
	rc = dev_file_perm(&rm->cfg, fd, path);
	if (rc < 0) {
		unlink(path);
	} else if (ftruncate(fd, (off_t)r->length) < 0) {
		rc = -errno;
		log_err("region %" PRIu64 ": cannot size %s: %s", r->id, path,
			strerror(errno));
		unlink(path);
	}
	close(fd);
	return rc;
}

static void fsdax_remove(const struct region *r)
{
	char path[4200];

	region_path(r, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("region %" PRIu64 ": cannot remove %s: %s", r->id,
			 path, strerror(errno));
}

int region_alloc(struct rm *rm, struct client *owner, uint64_t size,
		 struct rm_str dax_path, uint64_t request_id,
		 struct region **out)
{
	struct region *r;
	struct pool *pool = NULL;
	uint64_t off = 0, len = 0;
	int rc;

	/* before anything changes: it may write a checkpoint */
	rc = state_wal_ready(rm);
	if (rc < 0)
		return rc;
	/* --client-quota: what one client may hold */
	if (rm->cfg.client_quota &&
	    (size > rm->cfg.client_quota ||
	     owner->bytes > rm->cfg.client_quota - size))
		return -EDQUOT;
	rc = table_reserve(rm);
	if (rc < 0)
		return -ENOMEM;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	rc = pool_pick_alloc(rm->pools, rm->npools, dax_path, size, &pool, &off,
			     &len);
	if (rc < 0)
		goto out_free;
	r->id = rm->next_region_id++;
	r->pool = pool;
	r->owner = owner;
	r->offset = off;
	r->length = len;
	r->requested = size;
	rc = rm_auth_random(&r->nonce, sizeof(r->nonce));
	if (rc < 0)
		goto out_extent;
	r->token = auth_token(rm, r->id, pool->kind == POOL_FS_DAX ? 0 : off,
			      len, r->nonce, owner->id, owner->idlen);
	if (pool->kind == POOL_FS_DAX) {
		rc = fsdax_create(rm, r);
		if (rc < 0) {
			rc = -ENOMEM; /* the status upstream clients know */
			goto out_extent;
		}
	}
	rc = state_log_alloc(rm, r, request_id);
	if (rc < 0)
		goto out_file;
	table_insert(rm, r);
	/* the pid-reuse rule compares against the start time seen now */
	if (owner->local && !owner->starttime) {
		char st;

		if (client_read_stat(owner->pid, &st, &owner->starttime) < 0)
			owner->starttime = 0;
	}
	log_dbg("region %" PRIu64 ": %" PRIu64 " bytes at %" PRIu64
		" in pool %u for %s",
		r->id, len, off, pool->id, owner->id);
	rm->ctr.allocs++;
	*out = r;
	return 0;

out_file:
	if (pool->kind == POOL_FS_DAX)
		fsdax_remove(r);
out_extent:
	pool_free(pool, off, len);
out_free:
	free(r);
	return rc;
}

/* Release a region that is already out of the WAL's view. */
static void region_destroy(struct rm *rm, struct region *r)
{
	struct client *owner = r->owner;

	table_remove(rm, r);
	if (pool_free(r->pool, r->offset, r->length) < 0)
		log_err("region %" PRIu64 ": pool %u refused the free "
			"(allocator inconsistency)",
			r->id, r->pool->id);
	if (r->pool->kind == POOL_FS_DAX)
		fsdax_remove(r);
	free(r);
	client_maybe_release(rm, owner);
}

int region_free(struct rm *rm, struct region *r, uint64_t request_id,
		const char *why)
{
	int rc = state_log_free(rm, r, request_id);

	if (rc < 0)
		return rc;
	log_dbg("region %" PRIu64 ": freed (%s)", r->id, why);
	rm->ctr.frees++;
	region_destroy(rm, r);
	return 0;
}

int region_restore(struct rm *rm, const struct state_alloc *a)
{
	struct region *r;
	struct pool *pool = NULL;
	struct client *owner;
	size_t i;
	int rc;

	for (i = 0; i < rm->npools; i++)
		if (rm->pools[i]->id == a->pool_id)
			pool = rm->pools[i];
	if (!pool)
		return -ENOENT;
	if (region_find(rm, a->handle.region_id) || a->handle.region_id == 0)
		return -EEXIST;
	if (a->alloc_length != a->handle.length || a->alloc_length == 0 ||
	    a->alloc_length % pool->align || a->real_offset % pool->align ||
	    a->handle.offset !=
		    (pool->kind == POOL_FS_DAX ? 0 : a->real_offset))
		return -EINVAL;
	rc = table_reserve(rm);
	if (rc < 0)
		return rc;
	owner = client_get(rm, rm_str_from(a->owner), true);
	if (!owner)
		return -ENOMEM;
	r = calloc(1, sizeof(*r));
	if (!r) {
		client_maybe_release(rm, owner);
		return -ENOMEM;
	}
	rc = pool_reserve(pool, a->real_offset, a->alloc_length);
	if (rc < 0) {
		free(r);
		client_maybe_release(rm, owner);
		return rc;
	}
	r->id = a->handle.region_id;
	r->pool = pool;
	r->owner = owner;
	r->offset = a->real_offset;
	r->length = a->alloc_length;
	r->requested = a->requested_size;
	r->nonce = a->nonce;
	r->token = a->handle.auth_token;
	table_insert(rm, r);
	if (r->id >= rm->next_region_id)
		rm->next_region_id = r->id + 1;
	return 0;
}

void region_unrestore(struct rm *rm, struct region *r)
{
	region_destroy(rm, r);
}

void region_for_each(struct rm *rm,
		     void (*fn)(struct rm *, struct region *, void *),
		     void *arg)
{
	struct hnode *n, *next;
	size_t i;

	htab_for_each(&rm->regions, i, n, next)
		fn(rm, container_of(n, struct region, hn), arg);
}

void region_table_free(struct rm *rm)
{
	htab_destroy(&rm->regions, offsetof(struct region, hn));
	rm->nregions = 0;
}
