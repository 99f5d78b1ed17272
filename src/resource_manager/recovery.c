/* SPDX-License-Identifier: Apache-2.0 */
/*
 * recovery.c - start-up: the checkpoint and the WAL back into the tables
 *
 * Reads what state.c wrote (byte layouts in statefmt.h) and rebuilds the
 * region table through region.c, then hands the WAL back to state.c
 * (state_wal_open()) for appending.  It runs once, before the loop, and
 * sits above both: it calls region.c and state.c, neither calls it.
 *
 * The allocation table is the source of truth:
 *   1. global.meta, if present, must validate (magic, version, size, CRC)
 *      or the daemon refuses to start.  Its allocations are re-applied to
 *      the pools with pool_reserve() (region_restore()), which rejects any
 *      overlap, any range outside the pool and duplicates: refusal again.
 *   2. Each configured pool's pool_<id>.meta must validate the same way
 *      (and describe a pool of the same size); its free list is then
 *      *not* used: free lists are rebuilt as "data area minus allocations",
 *      which stays right even if a crash interrupted a checkpoint between
 *      two of its files.
 *   3. The WAL is replayed.  An ALLOC whose region id is below the
 *      checkpoint's next_region_id is already in global.meta (a crash
 *      between the global.meta rename and the WAL truncation) and is
 *      skipped; a FREE of an unknown region is skipped for the same
 *      reason.  A torn last record (short, or zero fill) is ignored with a
 *      warning and cut off; anything else malformed refuses the start.
 *   4. Records with a request_id refill the idempotency cache (see idem.c).
 *   5. FS_DAX pools: a live region's missing file is re-created empty, a
 *      file of no live region is removed (reconcile_fsdax()).
 * Allocations that belong to a pool that is not configured any more, or to
 * a pool whose header or file was (re)created at this start, are dropped
 * with a warning: their memory is gone.
 *
 * Context: the event-loop thread, at start-up (rm_open()).
 */
#include "rm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomicfile.h"
#include "log.h"

static struct pool *pool_by_id(struct rm *rm, uint32_t id)
{
	size_t i;

	for (i = 0; i < rm->npools; i++)
		if (rm->pools[i]->id == id)
			return rm->pools[i];
	return NULL;
}

/* What recovery saw, for the summary line and the drop warnings. */
struct recovery {
	uint64_t ckpt_next; /* next_region_id of global.meta */
	size_t from_ckpt;   /* allocations loaded from global.meta */
	size_t replayed;    /* WAL records applied */
	size_t skipped;	    /* WAL records already in the checkpoint */
	size_t dropped;	    /* allocations of missing or new pools */
};

/*
 * Apply one recovered allocation.  Return: 0 (applied or dropped with a
 * warning), or -EPROTO after logging why the state is inconsistent.
 */
static int restore_one(struct rm *rm, struct recovery *rec,
		       const struct state_alloc *a, const char *where)
{
	struct pool *p = pool_by_id(rm, a->pool_id);
	int rc;

	if (a->handle.region_id >= rm->next_region_id)
		rm->next_region_id = a->handle.region_id + 1;
	if (!p || p->fresh) {
		log_warn("%s: region %" PRIu64 " of %s pool %u dropped "
			 "(its memory is gone)",
			 where, a->handle.region_id,
			 p ? "re-created" : "unknown", a->pool_id);
		rec->dropped++;
		return 0;
	}
	rc = region_restore(rm, a);
	if (rc == 0)
		return 0;
	if (rc == -EEXIST)
		log_err("%s: region %" PRIu64 " appears twice: refusing to "
			"start",
			where, a->handle.region_id);
	else if (rc == -EINVAL)
		log_err("%s: region %" PRIu64 " [%" PRIu64 ", +%" PRIu64
			") is misaligned, outside pool %u or overlaps another "
			"region: refusing to start",
			where, a->handle.region_id, a->real_offset,
			a->alloc_length, a->pool_id);
	else
		log_err("%s: region %" PRIu64 ": %s", where,
			a->handle.region_id, strerror(-rc));
	return -EPROTO;
}

static int load_global(struct rm *rm, struct recovery *rec)
{
	struct global_meta m;
	struct state_alloc a;
	const char *why = "";
	uint8_t *data = NULL;
	size_t len = 0;
	uint64_t i;
	int rc;

	rc = atomicfile_read(rm->state_dirfd, "global.meta", &data, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0) {
		log_err("%s/global.meta: %s: refusing to start",
			rm->cfg.state_dir, strerror(-rc));
		return rc;
	}
	rc = state_global_meta_parse(data, len, &m, &why);
	if (rc < 0) {
		log_err("%s/global.meta: %s: refusing to start (a corrupt "
			"checkpoint is never half-loaded; move the state "
			"directory aside to start empty)",
			rm->cfg.state_dir, why);
		goto out;
	}
	if (m.next_region_id > rm->next_region_id)
		rm->next_region_id = m.next_region_id;
	for (i = 0; i < m.count; i++) {
		if (state_global_meta_get(&m, i, &a) < 0) {
			log_err("%s/global.meta: record %" PRIu64 " has a bad "
				"owner: refusing to start",
				rm->cfg.state_dir, i);
			rc = -EPROTO;
			goto out;
		}
		rc = restore_one(rm, rec, &a, "global.meta");
		if (rc < 0)
			goto out;
		rec->from_ckpt++;
	}
	rec->ckpt_next = rm->next_region_id;
out:
	free(data);
	return rc;
}

/* Validate pool_<id>.meta of every configured pool (contents unused). */
static int check_pool_metas(struct rm *rm)
{
	struct pool_meta m;
	const char *why = "";
	char name[64];
	uint8_t *data;
	size_t i, len;
	int rc;

	for (i = 0; i < rm->npools; i++) {
		struct pool *p = rm->pools[i];

		snprintf(name, sizeof(name), "pool_%u.meta", p->id);
		data = NULL;
		rc = atomicfile_read(rm->state_dirfd, name, &data, &len);
		if (rc == -ENOENT)
			continue;
		if (rc < 0) {
			log_err("%s/%s: %s: refusing to start",
				rm->cfg.state_dir, name, strerror(-rc));
			return rc;
		}
		rc = state_pool_meta_parse(data, len, &m, &why);
		if (rc == 0 && m.pool_id != p->id) {
			why = "pool id does not match the file name";
			rc = -EPROTO;
		}
		if (rc == 0 && !p->fresh && m.total_size != p->total_size) {
			log_err("%s/%s: pool %s was %" PRIu64 " usable bytes, "
				"now %" PRIu64 ": refusing to start (move the "
				"state directory aside to start empty)",
				rm->cfg.state_dir, name, p->path, m.total_size,
				p->total_size);
			free(data);
			return -EPROTO;
		}
		free(data);
		if (rc < 0) {
			log_err("%s/%s: %s: refusing to start (a corrupt "
				"checkpoint is never half-loaded; move the "
				"state directory aside to start empty)",
				rm->cfg.state_dir, name, why);
			return rc;
		}
	}
	return 0;
}

/* Add the outcome a retried request must get back to the idem cache. */
static void remember_alloc(struct rm *rm, const struct region *r,
			   uint64_t request_id, uint64_t age_ms)
{
	idem_store(rm, RM_ALLOC_REQ, r->owner->id, request_id, 0, r->id,
		   age_ms);
}

static void remember_free(struct rm *rm, const char *owner, uint64_t request_id,
			  uint64_t age_ms)
{
	idem_store(rm, RM_FREE_REQ, owner, request_id, 0, 0, age_ms);
}

static uint64_t age_of(uint64_t timestamp)
{
	uint64_t now = (uint64_t)time(NULL);

	return timestamp >= now ? 0 : (now - timestamp) * 1000u;
}

/* Apply one WAL record.  Return: 0 or -EPROTO (logged). */
static int replay_one(struct rm *rm, struct recovery *rec,
		      const struct wal_rec *w, size_t off)
{
	char where[96];
	struct region *r;
	int rc;

	snprintf(where, sizeof(where), "WAL record at byte %zu", off);
	if (w->type == WAL_ALLOC) {
		if (w->region_id < rec->ckpt_next) {
			rec->skipped++;
			return 0;
		}
		rc = restore_one(rm, rec, &w->alloc, where);
		if (rc < 0)
			return rc;
		r = region_find(rm, w->region_id);
		if (r && w->request_id)
			remember_alloc(rm, r, w->request_id,
				       age_of(w->timestamp));
		rec->replayed++;
		return 0;
	}
	r = region_find(rm, w->region_id);
	if (!r) {
		rec->skipped++;
		return 0;
	}
	if (w->request_id)
		remember_free(rm, r->owner->id, w->request_id,
			      age_of(w->timestamp));
	region_unrestore(rm, r);
	rec->replayed++;
	return 0;
}

static int replay_wal(struct rm *rm, struct recovery *rec, uint64_t *keep)
{
	struct wal_rec w;
	const char *why = "";
	uint8_t *data = NULL;
	size_t len = 0, off = 0, at;
	int rc;

	rc = atomicfile_read(rm->state_dirfd, RM_WAL_NAME, &data, &len);
	*keep = 0;
	if (rc == -ENOENT)
		return 0;
	if (rc < 0) {
		log_err("%s/%s: %s: refusing to start", rm->cfg.state_dir,
			RM_WAL_NAME, strerror(-rc));
		return rc;
	}
	for (;;) {
		at = off;
		rc = state_wal_next(data, len, &off, &w, &why);
		if (rc == 0)
			break;
		if (rc == -EAGAIN) {
			log_warn("%s/%s: ignoring a torn last record at byte "
				 "%zu (%s, %zu bytes)",
				 rm->cfg.state_dir, RM_WAL_NAME, at, why,
				 len - at);
			rc = 0;
			break;
		}
		if (rc < 0) {
			log_err("%s/%s: record at byte %zu: %s: refusing to "
				"start (a corrupt log is never half-loaded)",
				rm->cfg.state_dir, RM_WAL_NAME, at, why);
			goto out;
		}
		rc = replay_one(rm, rec, &w, at);
		if (rc < 0)
			goto out;
	}
	*keep = at;
out:
	free(data);
	return rc;
}

/* Is @name exactly "maru_<id>.dat" (the form region_path() makes)? */
static bool region_file_name(const char *name, uint64_t *id)
{
	char again[64];

	if (sscanf(name, "maru_%" SCNu64, id) != 1)
		return false;
	snprintf(again, sizeof(again), "maru_%" PRIu64 ".dat", *id);
	return strcmp(again, name) == 0;
}

/*
 * FS_DAX pools: each live region needs its file (re-created empty, with a
 * warning, if it vanished), and every other maru_<id>.dat is removed: a
 * freed region's, or one whose id was never logged (a crash between
 * creating the file and the WAL append, or a state directory moved aside
 * to start over).  Left in place, such a file would make the allocation
 * that draws its id fail (files are created exclusively).  One that
 * cannot be removed moves next_region_id past it instead.
 */
static void reconcile_fsdax(struct rm *rm)
{
	size_t i;

	for (i = 0; i < rm->npools; i++) {
		struct pool *p = rm->pools[i];
		struct dirent *e;
		uint64_t id;
		DIR *d;

		if (p->kind != POOL_FS_DAX)
			continue;
		d = opendir(p->path);
		if (!d)
			continue;
		while ((e = readdir(d))) {
			struct region *r;

			if (!region_file_name(e->d_name, &id))
				continue;
			r = region_find(rm, id);
			if (r && r->pool == p)
				continue;
			if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
				log_info("%s/%s: removed (region %" PRIu64
					 " is not allocated)",
					 p->path, e->d_name, id);
			} else {
				log_warn("%s/%s: cannot remove: %s", p->path,
					 e->d_name, strerror(errno));
				if (id >= rm->next_region_id && id < UINT64_MAX)
					rm->next_region_id = id + 1;
			}
		}
		closedir(d);
	}
}

static void ensure_fsdax_file(struct rm *rm, struct region *r, void *arg)
{
	char path[4200];
	struct stat st;
	int fd;

	if (r->pool->kind != POOL_FS_DAX)
		return;
	region_path(r, path, sizeof(path));
	if (stat(path, &st) == 0)
		return;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		(void)dev_file_perm(&rm->cfg, fd, path);
		if (ftruncate(fd, (off_t)r->length) < 0)
			log_warn("%s: %s", path, strerror(errno));
		close(fd);
	}
	log_warn("region %" PRIu64 ": %s was missing; re-created empty", r->id,
		 path);
}

int recovery_run(struct rm *rm)
{
	struct recovery rec = {0};
	struct stat st;
	uint64_t keep = 0;
	int rc;

	/* adopt upstream's old WAL name */
	if (fstatat(rm->state_dirfd, RM_WAL_NAME, &st, 0) < 0 &&
	    fstatat(rm->state_dirfd, RM_WAL_LEGACY_NAME, &st, 0) == 0) {
		if (renameat(rm->state_dirfd, RM_WAL_LEGACY_NAME,
			     rm->state_dirfd, RM_WAL_NAME) == 0)
			log_info("renamed %s to %s", RM_WAL_LEGACY_NAME,
				 RM_WAL_NAME);
	}
	if (rm->next_region_id == 0)
		rm->next_region_id = 1;
	rc = load_global(rm, &rec);
	if (rc < 0)
		return rc;
	rec.ckpt_next = rm->next_region_id;
	rc = check_pool_metas(rm);
	if (rc < 0)
		return rc;
	rc = replay_wal(rm, &rec, &keep);
	if (rc < 0)
		return rc;
	rc = state_wal_open(rm, keep, (unsigned)(rec.replayed + rec.skipped));
	if (rc < 0)
		return rc;
	region_for_each(rm, ensure_fsdax_file, NULL);
	reconcile_fsdax(rm);
	if (rec.from_ckpt || rec.replayed || rec.dropped)
		log_info("recovered %zu region(s): %zu from the checkpoint, "
			 "%zu WAL record(s) replayed, %zu already "
			 "checkpointed, %zu dropped; next region id %" PRIu64,
			 rm->nregions, rec.from_ckpt, rec.replayed, rec.skipped,
			 rec.dropped, rm->next_region_id);
	return 0;
}
