/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idxstart.c - where maru-server's shared index lives (docs/shm-index.md)
 *
 * auto chooses a region of the pool when the pool is device-DAX (every
 * host's clients read it there), else a file (this host's); the pool's
 * region is kept across restarts (its id in the state directory, so
 * readers stay attached), and a file path is --shm-index-path, a unit's
 * RuntimeDirectory=, else /dev/shm/maru-index-PORT.  The region is taken
 * on the resource manager's blocking start-up connection, before the
 * loop runs; the index is built from the recovered keys before the
 * server listens.
 */
#include "start.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "shmidx.h"
#include "util.h"

/* ---- the shared index at start (docs/shm-index.md) ---- */

#define IDX_REGION_FILE "shm-index.region"

/* the region of an earlier start (the state directory), if any */
static bool idx_saved(const struct idx_start *x, struct rm_handle *h)
{
	unsigned long long v[4];
	char path[4200];
	FILE *f;
	int n;

	if (!x->dir)
		return false;
	snprintf(path, sizeof(path), "%s/" IDX_REGION_FILE, x->dir);
	f = fopen(path, "re");
	if (!f)
		return false;
	n = fscanf(f, "%llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3]);
	fclose(f);
	if (n != 4)
		return false;
	*h = (struct rm_handle){v[0], v[1], v[2], v[3]};
	return true;
}

static void idx_save(const struct idx_start *x)
{
	char path[4200], tmp[4210];
	FILE *f;

	if (!x->dir)
		return;
	snprintf(path, sizeof(path), "%s/" IDX_REGION_FILE, x->dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f)
		return;
	fprintf(f, "%llu %llu %llu %llu\n", (unsigned long long)x->h.region_id,
		(unsigned long long)x->h.offset,
		(unsigned long long)x->h.length,
		(unsigned long long)x->h.auth_token);
	if (fclose(f) == 0)
		(void)rename(tmp, path);
}

/*
 * PUB_POOL: the region of an earlier start if the RM still has it (its
 * readers stay attached), else a new one; mapped read-write.
 * Return: 0 or -errno (said).
 */
static int idx_pool_region(struct idx_start *x, struct rm_client *c,
			   const struct rmsess *rm)
{
	uint64_t pool = rm->ndax ? rm->total_dax : rm->total_all;
	uint64_t size = x->c->shm_size;

	/* by default a 64th of the pool, within [4 MiB, 1 GiB]: 4 MiB
	 * holds a table for 8K keys, 1 GiB for 4M (at most half full) */
	if (!size) {
		size = pool / 64;
		size = size < PUB_MIN_POOL_SIZE	  ? PUB_MIN_POOL_SIZE
		       : size > PUB_MAX_POOL_SIZE ? PUB_MAX_POOL_SIZE
						  : size;
	}
	struct rm_access_result acc;
	struct rm_alloc_result ar;
	const char *path = NULL;
	void *mem;
	int fd, rc;

	if (idx_saved(x, &x->h) && rm_client_get_access(c, &x->h, &acc) == 0 &&
	    acc.offset == x->h.offset && acc.length == x->h.length) {
		path = acc.path;
	} else {
		rc = rm_client_alloc(c, size, rm->ndax ? rm->dax[0] : NULL,
				     &ar);
		if (rc < 0) {
			log_err("shared index: ALLOC of %llu bytes at the "
				"resource manager: %s",
				(unsigned long long)size, strerror(-rc));
			return rc;
		}
		x->h = ar.handle;
		snprintf(acc.path, sizeof(acc.path), "%s", ar.path);
		path = acc.path;
		idx_save(x);
	}
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		log_err("shared index: open %s: %s", path, strerror(errno));
		return -errno;
	}
	mem = mmap(NULL, (size_t)x->h.length, PROT_READ | PROT_WRITE,
		   MAP_SHARED, fd, (off_t)x->h.offset);
	close(fd);
	if (mem == MAP_FAILED) {
		log_err("shared index: mmap %s: %s", path, strerror(errno));
		return -errno;
	}
	x->mem = mem;
	x->len = (size_t)x->h.length;
	return 0;
}

/*
 * Who may read an index file: exactly who may read the pool (its digests
 * say which keys are cached; docs/shm-index.md).  The pool's owner -- this
 * user normally, maru-server and the resource manager running as one --
 * and, when the pool is group-readable (--pool-group), its group; anyone
 * only if anyone may read the pool.  A pool we cannot see (another user's
 * directory): the owner only.
 */
static void idx_file_access(struct idx_start *x, const struct rmsess *rm)
{
	const char *g = x->c->shm_group;
	struct group *gr;
	struct stat st;
	int i;

	x->file_mode = 0600;
	x->file_gid = -1;
	/* named: the pool's readers are that group (a unit that cannot see
	 * the pool: its devices are hidden from it) */
	if (g) {
		gr = getgrnam(g);
		if (gr) {
			x->file_mode = 0640;
			x->file_gid = (long)gr->gr_gid;
		} else {
			log_warn("shared index: --shm-index-group %s: no such "
				 "group: the file is readable by this user "
				 "only",
				 g);
		}
		return;
	}
	for (i = 0; i < rm->npools; i++)
		if (rm->pools[i] && stat(rm->pools[i], &st) == 0)
			break;
	if (i == rm->npools) {
		log_info("shared index: the pool's permissions are not known "
			 "here: the file is readable by this user only");
		return;
	}
	if (st.st_mode & S_IROTH) {
		x->file_mode = 0644;
	} else if (st.st_mode & S_IRGRP) {
		x->file_mode = 0640;
		x->file_gid = (long)st.st_gid;
	}
}

/* auto resolved, and the pool's region taken (the RM's blocking start) */
int idx_prepare(struct idx_start *x, struct rm_client *c,
		const struct rmsess *rm)
{
	const char *rd = getenv("RUNTIME_DIRECTORY");
	int rc;

	x->mode = x->c->shm_mode;
	if (x->mode == SHM_AUTO)
		x->mode = rm->any_devdax ? PUB_POOL : PUB_FILE;
	x->coh = x->c->coherence;
	if (x->coh < 0)
		x->coh = x->mode == PUB_POOL && rm->any_devdax ? SI_FLUSH
							       : SI_COHERENT;
	/* a file: --shm-index-path, a unit's RuntimeDirectory= (readable by
	 * its clients), else /dev/shm, one file per server port */
	if (x->c->shm_path)
		snprintf(x->path, sizeof(x->path), "%s", x->c->shm_path);
	else if (rd && *rd)
		snprintf(x->path, sizeof(x->path), "%.*s/shm-index",
			 (int)strcspn(rd, ":"), rd);
	else
		snprintf(x->path, sizeof(x->path), "/dev/shm/maru-index-%d",
			 x->c->port);
	if (x->mode != PUB_POOL) {
		struct rm_handle old;
		char path[4200];

		idx_file_access(x, rm);
		/* an earlier start's region of the pool: not used any more */
		if (idx_saved(x, &old) && rm_client_free(c, &old) == 0)
			log_info(
				"shared index: region %llu of an earlier start "
				"freed",
				(unsigned long long)old.region_id);
		if (x->dir) {
			snprintf(path, sizeof(path), "%s/" IDX_REGION_FILE,
				 x->dir);
			(void)unlink(path);
		}
		return 0;
	}
	rc = idx_pool_region(x, c, rm);
	if (rc < 0 && x->c->shm_mode == SHM_AUTO) {
		log_warn("shared index: no region of the pool; a file "
			 "instead (this host's clients only)");
		idx_file_access(x, rm);
		x->mode = PUB_FILE;
		x->coh = x->c->coherence < 0 ? SI_COHERENT : x->c->coherence;
		return 0;
	}
	return rc;
}

/*
 * Open and build the index (after recovery, before the loop).  Return:
 * the publisher, or NULL: none (off, or auto and not possible: said);
 * *@fatal when the asked-for mode failed.
 */
struct pub *idx_open(struct idx_start *x, struct mds *s, bool *fatal)
{
	struct pub_config pc = {0};
	const char *f = getenv("MARU_SHM_INDEX_FAULT");
	struct pub *p = NULL;
	char err[512] = "";
	int rc;

	*fatal = false;
	if (x->mode == PUB_OFF) {
		log_info("shared index: off (--shm-index off)");
		return NULL;
	}
	pc.mode = x->mode;
	pc.path = x->path;
	pc.file_mode = x->file_mode;
	pc.file_gid = x->file_gid;
	pc.coh = x->coh;
	pc.keys = x->c->shm_keys;
	/* the tests' fault injector (with --coherence simulate) */
	pc.fault = f && !strcmp(f, "no-wb-del") ? SI_FAULT_NO_WB_DEL : 0;
	if (x->mode == PUB_POOL) {
		pc.pool_mem = x->mem;
		pc.size = x->len;
		pc.region_id = x->h.region_id;
		pc.region_off = x->h.offset;
		pc.region_len = x->h.length;
		pc.region_token = x->h.auth_token;
	} else {
		pc.size =
			x->c->shm_size ? x->c->shm_size : PUB_DEFAULT_FILE_SIZE;
	}
	rc = pub_open(&p, &pc, err, sizeof(err));
	if (rc == 0)
		rc = pub_build(p, &s->kv, mds_entry_region_id, s);
	if (rc < 0) {
		if (!err[0])
			snprintf(err, sizeof(err), "%s", strerror(-rc));
		pub_close(p);
		if (x->c->shm_mode != SHM_AUTO) {
			log_err("shared index: %s", err);
			*fatal = true;
		} else {
			log_warn("shared index: %s: clients look keys up with "
				 "requests only",
				 err);
		}
		return NULL;
	}
	log_info("shared index: %s, coherence %s",
		 x->mode == PUB_POOL ? "a region of the pool" : x->path,
		 si_coh_name(x->coh));
	return p;
}
