/* SPDX-License-Identifier: Apache-2.0 */
/*
 * state.c - durability: the state directory, WAL appends and checkpoints
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
 * each pool_<id>.meta and then global.meta (src/common/atomicfile.h: tmp
 * file, fsync, rename; then one fsync of the directory) and then empties
 * the WAL.
 *
 * Reading these files back is recovery.c's, at start-up; it hands the
 * WAL over with state_wal_open() once it knows where the last good
 * record ends.
 *
 * Layering: region.c calls the appends here as part of an allocation or
 * a free; this file calls nothing of region.c.  A checkpoint reads the
 * region table (rm->regions, struct region in rm.h) as data, and
 * state_alloc_of() is the one place that turns a region into its durable
 * record.
 *
 * Ownership: @rm owns the WAL fd, the directory fd and its lock.
 * Context: the event-loop thread only.
 */
#include "rm.h"

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
#include "statedir.h"

void state_alloc_of(const struct region *r, struct state_alloc *a)
{
	memset(a, 0, sizeof(*a));
	a->handle.region_id = r->id;
	a->handle.offset = r->pool->kind == POOL_FS_DAX ? 0 : r->offset;
	a->handle.length = r->length;
	a->handle.auth_token = r->token;
	memcpy(a->owner, r->owner->id, r->owner->idlen);
	a->requested_size = r->requested;
	a->alloc_length = r->length;
	a->nonce = r->nonce;
	a->pool_id = r->pool->id;
	a->real_offset = r->offset;
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

int state_wal_open(struct rm *rm, uint64_t keep, unsigned records)
{
	struct stat st;
	int rc;

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
	rm->ops_since_ckpt = records;
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

	state_alloc_of(r, &a);
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

static int cmp_region_id(const void *a, const void *b)
{
	const struct region *x = *(struct region *const *)a;
	const struct region *y = *(struct region *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* Every region of the table, in id order (global.meta is sorted). */
static int sorted_regions(struct rm *rm, struct region ***out, size_t *n)
{
	struct region **v;
	struct hnode *hn, *next;
	size_t i, k = 0;

	v = malloc((rm->nregions ? rm->nregions : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	htab_for_each(&rm->regions, i, hn, next) v[k++] =
		container_of(hn, struct region, hn);
	qsort(v, k, sizeof(*v), cmp_region_id);
	*out = v;
	*n = k;
	return 0;
}

int state_checkpoint(struct rm *rm)
{
	struct region **v = NULL;
	struct buf b = BUF_INIT;
	struct state_alloc a;
	char name[64];
	size_t i, n = 0;
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
			rc = atomicfile_write(rm->state_dirfd, name, b.data,
					      b.len, 0600);
	}
	if (rc == 0)
		rc = sorted_regions(rm, &v, &n);
	if (rc < 0)
		goto out;
	buf_reset(&b);
	rc = state_global_meta_begin(&b, rm->next_region_id);
	for (i = 0; i < n && rc == 0; i++) {
		state_alloc_of(v[i], &a);
		rc = state_global_meta_add(&b, &a);
	}
	if (rc < 0)
		goto out;
	state_global_meta_end(&b, n);
	rc = atomicfile_write(rm->state_dirfd, "global.meta", b.data, b.len,
			      0600);
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
	log_dbg("checkpoint: %zu region(s), %zu pool(s)", n, rm->npools);
out:
	if (rc < 0)
		log_err("checkpoint to %s failed: %s (the WAL is kept)",
			rm->cfg.state_dir, strerror(-rc));
	free(v);
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
