/* SPDX-License-Identifier: Apache-2.0 */
/*
 * state.c - durability: write-ahead log, checkpoints and recovery
 *
 * Files in the state directory (byte layouts in statefmt.h; formats are
 * upstream's, documented in docs/resource-manager.md):
 *   maru-resource-manager.wal   one record per acknowledged alloc/free
 *   global.meta                 allocation table + next region id
 *   pool_<id>.meta              free-extent list of one pool
 *
 * Write path.  Every allocation and free is appended to the WAL with one
 * write(2) and an fdatasync(2) before the client sees the answer.  If the
 * write is short or fails, the file is truncated back to its previous size
 * so that the log never holds a torn record followed by good ones (if even
 * that fails, the next append writes a checkpoint first).  Every
 * checkpoint_ops records (100) and at clean shutdown, a checkpoint writes
 * each pool_<id>.meta and then global.meta (tmp file, fsync, rename, fsync
 * of the directory) and then empties the WAL.
 *
 * Recovery (state_open).  The allocation table is the source of truth:
 *   1. global.meta, if present, must validate (magic, version, size, CRC)
 *      or the daemon refuses to start.  Its allocations are re-applied to
 *      the pools with pool_reserve(), which rejects any overlap, any range
 *      outside the pool and duplicates: refusal again.
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
 * Allocations that belong to a pool that is not configured any more, or to
 * a pool whose header or file was (re)created at this start, are dropped
 * with a warning: their memory is gone.
 *
 * Ownership: @rm owns the WAL fd and the directory fd.
 * Context: the event-loop thread only.
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

#include "log.h"
#include "statedir.h"

/*
 * Read a whole file of the state dir.  Return: 0 (@out owns a malloc()ed
 * copy, possibly NULL when empty), -ENOENT if missing, or -errno.
 */
int state_read_file(struct rm *rm, const char *name, uint8_t **out, size_t *len)
{
	struct stat st;
	uint8_t *data = NULL;
	size_t got = 0;
	ssize_t n;
	int fd, rc = 0;

	fd = openat(rm->state_dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out_close;
	}
	if (st.st_size > 0) {
		data = malloc((size_t)st.st_size);
		if (!data) {
			rc = -ENOMEM;
			goto out_close;
		}
	}
	while (got < (size_t)st.st_size) {
		n = read(fd, data + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			free(data);
			goto out_close;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	*out = data;
	*len = got;
out_close:
	close(fd);
	return rc;
}

int state_write_atomic(struct rm *rm, const char *name, const void *p,
		       size_t len, mode_t mode)
{
	const uint8_t *data = p;
	char tmp[256];
	size_t off = 0;
	ssize_t n;
	int fd, rc = 0;

	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	fd = openat(rm->state_dirfd, tmp,
		    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	(void)fchmod(fd, mode); /* whatever the umask */
	while (off < len) {
		n = write(fd, data + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto out_close;
		}
		off += (size_t)n;
	}
	if (fsync(fd) < 0) {
		rc = -errno;
		goto out_close;
	}
	close(fd);
	if (renameat(rm->state_dirfd, tmp, rm->state_dirfd, name) < 0) {
		rc = -errno;
		unlinkat(rm->state_dirfd, tmp, 0);
	}
	return rc;
out_close:
	close(fd);
	unlinkat(rm->state_dirfd, tmp, 0);
	return rc;
}

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

	rc = state_read_file(rm, "global.meta", &data, &len);
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
		rc = state_read_file(rm, name, &data, &len);
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

	rc = state_read_file(rm, RM_WAL_NAME, &data, &len);
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

int state_dir_open(struct rm *rm)
{
	char err[512];
	int rc;

	rc = statedir_mkdir_p(rm->cfg.state_dir, 0755);
	if (rc < 0) {
		log_err("state dir %s: %s", rm->cfg.state_dir, strerror(-rc));
		return rc;
	}
	rm->state_dirfd =
		open(rm->cfg.state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rm->state_dirfd < 0) {
		rc = -errno;
		log_err("state dir %s: %s", rm->cfg.state_dir, strerror(errno));
		return rc;
	}
	/* one resource manager per state directory */
	rm->state_lockfd =
		statedir_lock(rm->state_dirfd, rm->cfg.state_dir,
			      "maru-resource-manager", err, sizeof(err));
	if (rm->state_lockfd < 0) {
		log_err("%s: refusing to start", err);
		return rm->state_lockfd;
	}
	return 0;
}

int state_open(struct rm *rm)
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
	rm->wal_fd = openat(rm->state_dirfd, RM_WAL_NAME,
			    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (rm->wal_fd < 0) {
		rc = -errno;
		log_err("%s/%s: %s", rm->cfg.state_dir, RM_WAL_NAME,
			strerror(errno));
		return rc;
	}
	/* cut a torn tail off so that new records follow good ones */
	if (fstat(rm->wal_fd, &st) == 0 && (uint64_t)st.st_size != keep) {
		if (ftruncate(rm->wal_fd, (off_t)keep) < 0 ||
		    fdatasync(rm->wal_fd) < 0) {
			rc = -errno;
			log_err("%s/%s: cannot cut the torn tail: %s",
				rm->cfg.state_dir, RM_WAL_NAME,
				strerror(errno));
			return rc;
		}
	}
	rm->wal_size = keep;
	rm->ops_since_ckpt = (unsigned)(rec.replayed + rec.skipped);
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

/*
 * If an append failed and even its undo failed, the log ends in a torn
 * record; good records appended after it would turn that tail into
 * corruption in the middle (recovery refuses it, or worse, reads the next
 * record as its payload).  So nothing is appended until a checkpoint has
 * emptied the log.
 */
int state_wal_ready(struct rm *rm)
{
	if (rm->wal_fd < 0)
		return -EIO;
	if (rm->wal_torn && state_checkpoint(rm) < 0)
		return -EIO;
	return 0;
}

/* One record: one write, then fdatasync; undo a partial append. */
static int wal_append(struct rm *rm)
{
	ssize_t n;
	int err;

	if (state_wal_ready(rm) < 0)
		return -EIO;
	n = write(rm->wal_fd, rm->scratch.data, rm->scratch.len);
	if (n == (ssize_t)rm->scratch.len && fdatasync(rm->wal_fd) == 0) {
		rm->wal_size += (uint64_t)n;
		rm->ops_since_ckpt++;
		return 0;
	}
	err = n < 0 ? errno : n != (ssize_t)rm->scratch.len ? ENOSPC : errno;
	log_err("%s/%s: append failed: %s", rm->cfg.state_dir, RM_WAL_NAME,
		strerror(err));
	if (ftruncate(rm->wal_fd, (off_t)rm->wal_size) < 0) {
		log_err("%s/%s: cannot undo the partial record: %s",
			rm->cfg.state_dir, RM_WAL_NAME, strerror(errno));
		rm->wal_torn = true;
	}
	return -EIO;
}

int state_log_alloc(struct rm *rm, const struct region *r, uint64_t request_id)
{
	struct state_alloc a;

	region_to_state(r, &a);
	buf_reset(&rm->scratch);
	if (state_wal_encode_alloc(&rm->scratch, &a, request_id,
				   (uint64_t)time(NULL)) < 0)
		return -EIO;
	return wal_append(rm);
}

int state_log_free(struct rm *rm, const struct region *r, uint64_t request_id)
{
	buf_reset(&rm->scratch);
	if (state_wal_encode_free(&rm->scratch, r->id, request_id,
				  (uint64_t)time(NULL)) < 0)
		return -EIO;
	return wal_append(rm);
}

struct collect {
	struct region **v;
	size_t n;
};

static void collect_region(struct rm *rm, struct region *r, void *arg)
{
	struct collect *c = arg;

	c->v[c->n++] = r;
}

static int cmp_region_id(const void *a, const void *b)
{
	const struct region *x = *(struct region *const *)a;
	const struct region *y = *(struct region *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

int state_checkpoint(struct rm *rm)
{
	struct collect c = {NULL, 0};
	struct buf b = BUF_INIT;
	struct state_alloc a;
	char name[64];
	size_t i;
	int rc = 0;

	if (rm->state_dirfd < 0)
		return -EBADF;
	for (i = 0; i < rm->npools && rc == 0; i++) {
		struct pool *p = rm->pools[i];

		buf_reset(&b);
		snprintf(name, sizeof(name), "pool_%u.meta", p->id);
		rc = state_pool_meta_encode(&b, p->id, p->total_size, p->ext,
					    p->next);
		if (rc == 0)
			rc = state_write_atomic(rm, name, b.data, b.len, 0600);
	}
	if (rc < 0)
		goto out;
	c.v = malloc((rm->nregions ? rm->nregions : 1) * sizeof(*c.v));
	if (!c.v) {
		rc = -ENOMEM;
		goto out;
	}
	region_for_each(rm, collect_region, &c);
	qsort(c.v, c.n, sizeof(*c.v), cmp_region_id);
	buf_reset(&b);
	rc = state_global_meta_begin(&b, rm->next_region_id);
	for (i = 0; i < c.n && rc == 0; i++) {
		region_to_state(c.v[i], &a);
		rc = state_global_meta_add(&b, &a);
	}
	if (rc < 0)
		goto out;
	state_global_meta_end(&b, c.n);
	rc = state_write_atomic(rm, "global.meta", b.data, b.len, 0600);
	if (rc < 0)
		goto out;
	if (fsync(rm->state_dirfd) < 0) {
		rc = -errno;
		goto out;
	}
	/* the checkpoint holds everything: the log can go */
	if (rm->wal_fd >= 0) {
		if (ftruncate(rm->wal_fd, 0) < 0 || fdatasync(rm->wal_fd) < 0) {
			rc = -errno;
			goto out;
		}
		rm->wal_size = 0;
		rm->wal_torn = false;
	}
	rm->ops_since_ckpt = 0;
	rm->ctr.checkpoints++;
	log_dbg("checkpoint: %zu region(s), %zu pool(s)", c.n, rm->npools);
out:
	if (rc < 0)
		log_err("checkpoint to %s failed: %s (the WAL is kept)",
			rm->cfg.state_dir, strerror(-rc));
	free(c.v);
	buf_free(&b);
	return rc;
}

void state_maybe_checkpoint(struct rm *rm)
{
	if (rm->ops_since_ckpt < (unsigned)rm->cfg.checkpoint_ops)
		return;
	/* on failure the WAL stays whole; try again checkpoint_ops later */
	if (state_checkpoint(rm) < 0)
		rm->ops_since_ckpt = 0;
}

void state_close(struct rm *rm)
{
	if (rm->wal_fd >= 0)
		close(rm->wal_fd);
	if (rm->state_dirfd >= 0)
		close(rm->state_dirfd);
	if (rm->state_lockfd >= 0)
		close(rm->state_lockfd);
	rm->wal_fd = rm->state_dirfd = rm->state_lockfd = -1;
	buf_free(&rm->scratch);
}
