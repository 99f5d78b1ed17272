/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_core.c - the daemon's modules without the network: regions,
 * tokens, WAL + checkpoint + recovery, the idempotency cache, clients and
 * the reaper, on a real emulated pool file and a temporary state dir.
 *
 * "Crash" below means dropping the in-memory state without a checkpoint,
 * exactly what kill -9 leaves behind: the WAL and whatever checkpoint
 * existed.  Under ASan (dev.sh test) this also checks the modules for
 * leaks and memory errors.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "log.h"
#include "rm.h"

#define MiB (1ull << 20)

struct fixture {
	char dir[64]; /* mkdtemp: holds state/ and pool */
	char state[96];
	char pool[96];
	const char *pools[1];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	strcpy(f->dir, "/tmp/test_rm_core.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->state, sizeof(f->state), "%s/state", f->dir);
	snprintf(f->pool, sizeof(f->pool), "%s/pool", f->dir);
	f->pools[0] = f->pool;
	log_init("test_rm_core", LOG_ERR);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

/* Start a daemon state the way main() does, minus the socket. */
static int rm_start(struct fixture *f, struct rm **out)
{
	struct rm *rm = calloc(1, sizeof(*rm));
	int rc;

	assert_non_null(rm);
	rm->cfg.host = "127.0.0.1";
	rm->cfg.state_dir = f->state;
	rm->cfg.pools.v = f->pools;
	rm->cfg.pools.n = 1;
	rm->cfg.emulate_size = 64 * MiB;
	rm->cfg.grace_period = 30;
	rm->cfg.max_clients = 4;
	rm->cfg.msg_timeout = 30;
	rm->cfg.checkpoint_ops = 100;
	rm_init(rm);
	assert_int_equal(evloop_new(&rm->el), 0);
	rc = rm_open(rm);
	*out = rm;
	return rc;
}

/* Drop everything in memory; with @clean, checkpoint first (SIGTERM). */
static void rm_stop(struct rm *rm, bool clean)
{
	if (clean)
		assert_int_equal(state_checkpoint(rm), 0);
	rm_close(rm);
	free(rm);
}

static struct client *cl(struct rm *rm, const char *id)
{
	struct client *c = client_get(rm, rm_str_from(id), true);

	assert_non_null(c);
	return c;
}

struct snap {
	uint64_t id, offset, length, token;
	char owner[128];
};

static void snap_one(struct rm *rm, struct region *r, void *arg)
{
	struct snap *s = arg;

	while (s->id)
		s++;
	s->id = r->id;
	s->offset = r->offset;
	s->length = r->length;
	s->token = r->token;
	snprintf(s->owner, sizeof(s->owner), "%s", r->owner->id);
}

static int cmp_snap(const void *a, const void *b)
{
	const struct snap *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* The set of live regions, sorted by id, in @s (zeroed, room for 32). */
static size_t snapshot(struct rm *rm, struct snap *s)
{
	memset(s, 0, 32 * sizeof(*s));
	assert_true(rm->nregions < 32);
	region_for_each(rm, snap_one, s);
	qsort(s, rm->nregions, sizeof(*s), cmp_snap);
	return rm->nregions;
}

static void check_tokens(struct rm *rm, struct region *r, void *arg)
{
	struct rm_handle h = {r->id, r->offset, r->length, r->token};

	assert_true(auth_check(rm, r, &h));
	h.auth_token ^= 1;
	assert_false(auth_check(rm, r, &h));
	h.auth_token ^= 1;
	h.offset += r->pool->align;
	assert_false(auth_check(rm, r, &h));
}

static void test_alloc_free_and_recover(void **state)
{
	struct fixture *f = *state;
	struct snap before[32], after[32];
	struct region *r[6];
	struct rm *rm;
	uint64_t free_size;
	size_t n;
	int i;

	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(rm->npools, 1);
	assert_int_equal(rm->pools[0]->total_size, 62 * MiB);
	for (i = 0; i < 6; i++)
		assert_int_equal(region_alloc(rm, cl(rm, i % 2 ? "a:1" : "b:2"),
					      (uint64_t)(i + 1) * MiB,
					      rm_str_from(NULL), 0, &r[i]),
				 0);
	assert_int_equal(r[0]->id, 1);
	assert_int_equal(r[5]->id, 6);
	assert_int_equal(region_free(rm, r[2], 0, "test"), 0);
	assert_int_equal(rm->ops_since_ckpt, 7);
	region_for_each(rm, check_tokens, NULL);
	n = snapshot(rm, before);
	free_size = rm->pools[0]->free_size;
	rm_stop(rm, false); /* crash: only the WAL survives */

	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(snapshot(rm, after), n);
	assert_memory_equal(before, after, sizeof(before));
	assert_int_equal(rm->pools[0]->free_size, free_size);
	assert_true(pool_check(rm->pools[0]));
	assert_int_equal(rm->next_region_id, 7);
	region_for_each(rm, check_tokens, NULL);
	/* owners were rebuilt with their counts, grace timers running */
	assert_int_equal(cl(rm, "a:1")->nallocs, 3);
	assert_int_equal(cl(rm, "b:2")->nallocs, 2);
	assert_true(cl(rm, "a:1")->gone_ms != 0);
	rm_stop(rm, true); /* clean stop: checkpoint, empty WAL */

	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(rm->wal_size, 0);
	assert_int_equal(snapshot(rm, after), n);
	assert_memory_equal(before, after, sizeof(before));
	/* ids are never reused after a restart */
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r[0]),
		0);
	assert_int_equal(r[0]->id, 7);
	rm_stop(rm, false);
}

static void append(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_APPEND);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	close(fd);
}

static void test_torn_wal_tail(void **state)
{
	struct fixture *f = *state;
	struct region *r;
	struct rm *rm;
	char wal[160];
	struct stat st;
	uint8_t junk[40];

	snprintf(wal, sizeof(wal), "%s/%s", f->state, RM_WAL_NAME);
	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r),
		0);
	rm_stop(rm, false);
	/* a record header that promises a payload that never came */
	memset(junk, 0, sizeof(junk));
	put_u32le(junk, WAL_MAGIC);
	put_u32le(junk + 4, WAL_VERSION);
	put_u32le(junk + 8, WAL_ALLOC);
	put_u32le(junk + 16, STATE_ALLOC_REC_SIZE);
	append(wal, junk, sizeof(junk));
	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(rm->nregions, 1);
	/* the torn tail was cut: the next record follows good ones */
	assert_int_equal(stat(wal, &st), 0);
	assert_int_equal(st.st_size, WAL_HDR_SIZE + STATE_ALLOC_REC_SIZE);
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r),
		0);
	rm_stop(rm, false);
	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(rm->nregions, 2);
	rm_stop(rm, false);

	/* garbage that is not a torn tail is refused */
	memset(junk, 0x5a, sizeof(junk));
	append(wal, junk, sizeof(junk));
	assert_int_equal(rm_start(f, &rm), -EPROTO);
	rm_stop(rm, false);
}

/*
 * An append that fails and cannot even be cut off (here: the WAL fd is a
 * pipe, where fdatasync and ftruncate fail, and junk stands for the partial
 * record left in the real file): no record may follow the junk.  The next
 * append must checkpoint first, and fail while it cannot.
 */
static void test_wal_undo_failure(void **state)
{
	struct fixture *f = *state;
	struct region *r1, *r2;
	uint8_t junk[100];
	uint64_t id2;
	struct rm *rm;
	char wal[160];
	int p[2], real;

	snprintf(wal, sizeof(wal), "%s/%s", f->state, RM_WAL_NAME);
	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r1),
		0);
	assert_int_equal(pipe(p), 0);
	real = rm->wal_fd;
	rm->wal_fd = p[1];
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r2),
		-EIO);
	assert_true(rm->wal_torn);
	memset(junk, 0x5a, sizeof(junk));
	append(wal, junk, sizeof(junk));
	/* the checkpoint cannot empty the log yet: refused, nothing written */
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r2),
		-EIO);
	assert_true(rm->wal_torn);
	rm->wal_fd = real;
	close(p[0]);
	close(p[1]);
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r2),
		0);
	assert_false(rm->wal_torn);
	assert_int_equal(rm->wal_size, WAL_HDR_SIZE + STATE_ALLOC_REC_SIZE);
	id2 = r2->id;
	rm_stop(rm, false);
	/* a crash now recovers exactly the two acknowledged regions */
	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(rm->nregions, 2);
	assert_non_null(region_find(rm, 1));
	assert_non_null(region_find(rm, id2));
	rm_stop(rm, false);
}

/* DEV_DAX pool ids: upstream's region number for daxX.0 (state dirs of
 * an upstream install are adopted), distinct ids for further devices. */
static void test_devdax_pool_ids(void **state)
{
	(void)state;
	assert_int_equal(dev_devdax_pool_id("dax0.0", "/dev/dax0.0"), 0);
	assert_int_equal(dev_devdax_pool_id("dax1.0", "/dev/dax1.0"), 1);
	assert_int_equal(dev_devdax_pool_id("dax12.0", "/dev/dax12.0"), 12);
	assert_int_equal(dev_devdax_pool_id("dax0.5", "/dev/dax0.5"),
			 DEV_DAX_EXTRA_ID | 5);
	assert_int_equal(dev_devdax_pool_id("dax5.1", "/dev/dax5.1"),
			 DEV_DAX_EXTRA_ID | 5001);
	/* not daxX.Y: the path hash, in its own range */
	assert_true(dev_devdax_pool_id("dax0.0x", "/dev/x") >= 0x40000000u);
	assert_true(dev_devdax_pool_id("pmem0", "/dev/pmem0") >= 0x40000000u);
}

static void corrupt_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	uint8_t b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, at), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

static void test_corrupt_checkpoint_refused(void **state)
{
	struct fixture *f = *state;
	struct region *r;
	struct rm *rm;
	char path[160];
	uint32_t id;

	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r),
		0);
	id = rm->pools[0]->id;
	rm_stop(rm, true);
	snprintf(path, sizeof(path), "%s/global.meta", f->state);
	corrupt_byte(path, 40); /* inside the record: CRC mismatch */
	assert_int_equal(rm_start(f, &rm), -EPROTO);
	assert_int_equal(rm->nregions, 0); /* nothing half-loaded */
	rm_stop(rm, false);
	corrupt_byte(path, 40); /* repaired */
	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(rm->nregions, 1);
	rm_stop(rm, true);
	snprintf(path, sizeof(path), "%s/pool_%u.meta", f->state, id);
	corrupt_byte(path, 0); /* bad magic */
	assert_int_equal(rm_start(f, &rm), -EPROTO);
	rm_stop(rm, false);
}

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, n), (ssize_t)n);
	close(fd);
}

static void test_overlap_refused(void **state)
{
	struct fixture *f = *state;
	struct buf b = BUF_INIT;
	struct state_alloc a;
	struct rm *rm;
	char path[160];
	uint32_t id;

	assert_int_equal(rm_start(f, &rm), 0); /* creates pool and secret */
	id = rm->pools[0]->id;
	rm_stop(rm, false);
	memset(&a, 0, sizeof(a));
	a.handle.region_id = 1;
	a.handle.offset = a.real_offset = 2 * MiB;
	a.handle.length = a.alloc_length = 4 * MiB;
	strcpy(a.owner, "a:1");
	a.pool_id = id;
	assert_int_equal(state_global_meta_begin(&b, 3), 0);
	assert_int_equal(state_global_meta_add(&b, &a), 0);
	a.handle.region_id = 2;
	a.handle.offset = a.real_offset = 4 * MiB; /* overlaps region 1 */
	assert_int_equal(state_global_meta_add(&b, &a), 0);
	state_global_meta_end(&b, 2);
	snprintf(path, sizeof(path), "%s/global.meta", f->state);
	write_file(path, b.data, b.len);
	assert_int_equal(rm_start(f, &rm), -EPROTO);
	rm_stop(rm, false);
	/* without the overlap it loads */
	buf_reset(&b);
	assert_int_equal(state_global_meta_begin(&b, 3), 0);
	a.handle.region_id = 1;
	a.handle.offset = a.real_offset = 2 * MiB;
	assert_int_equal(state_global_meta_add(&b, &a), 0);
	a.handle.region_id = 2;
	a.handle.offset = a.real_offset = 6 * MiB;
	assert_int_equal(state_global_meta_add(&b, &a), 0);
	state_global_meta_end(&b, 2);
	write_file(path, b.data, b.len);
	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(rm->nregions, 2);
	assert_int_equal(rm->next_region_id, 3);
	rm_stop(rm, false);
	buf_free(&b);
}

static void test_missing_secret_refused(void **state)
{
	struct fixture *f = *state;
	struct region *r;
	struct rm *rm;
	char path[160];

	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r),
		0);
	rm_stop(rm, false);
	snprintf(path, sizeof(path), "%s/secret", f->state);
	assert_int_equal(unlink(path), 0);
	assert_true(rm_start(f, &rm) < 0);
	rm_stop(rm, false);
}

static void test_recreated_pool_drops_regions(void **state)
{
	struct fixture *f = *state;
	struct region *r;
	struct rm *rm;

	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r),
		0);
	rm_stop(rm, true);
	/* e.g. /dev/shm after a reboot: the memory behind them is gone */
	assert_int_equal(unlink(f->pool), 0);
	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(rm->nregions, 0);
	assert_int_equal(rm->pools[0]->free_size, rm->pools[0]->total_size);
	rm_stop(rm, false);
}

static void test_wal_refills_idempotency_cache(void **state)
{
	struct fixture *f = *state;
	const struct idem_entry *e;
	struct region *r, *r2;
	struct rm *rm;
	uint64_t id;

	assert_int_equal(rm_start(f, &rm), 0);
	assert_int_equal(region_alloc(rm, cl(rm, "a:1"), 3 * MiB,
				      rm_str_from(NULL), 41, &r),
			 0);
	id = r->id;
	assert_int_equal(
		region_alloc(rm, cl(rm, "a:1"), 1, rm_str_from(NULL), 0, &r2),
		0);
	assert_int_equal(region_free(rm, r2, 42, "test"), 0);
	rm_stop(rm, false);
	assert_int_equal(rm_start(f, &rm), 0);
	/* outcomes, from which server.c encodes the answer again */
	e = idem_lookup(rm, RM_ALLOC_REQ, "a:1", 41);
	assert_non_null(e);
	assert_int_equal(e->status, 0);
	assert_int_equal(e->region_id, id);
	assert_non_null(region_find(rm, id));
	e = idem_lookup(rm, RM_FREE_REQ, "a:1", 42);
	assert_non_null(e);
	assert_int_equal(e->status, 0);
	assert_null(idem_lookup(rm, RM_FREE_REQ, "a:1", 41));
	assert_null(idem_lookup(rm, RM_ALLOC_REQ, "b:1", 41));
	rm_stop(rm, false);
}

static void test_idem_cache(void **state)
{
	struct fixture *f = *state;
	const struct idem_entry *e;
	struct rm *rm;
	uint64_t i;

	assert_int_equal(rm_start(f, &rm), 0);
	assert_null(idem_lookup(rm, RM_ALLOC_REQ, "a:1", 0));
	idem_store(rm, RM_ALLOC_REQ, "a:1", 0, 0, 9, 0);
	assert_null(idem_lookup(rm, RM_ALLOC_REQ, "a:1", 0));
	/* an entry older than the TTL is not kept */
	idem_store(rm, RM_ALLOC_REQ, "a:1", 5, 0, 9, RM_IDEM_TTL_MS);
	assert_null(idem_lookup(rm, RM_ALLOC_REQ, "a:1", 5));
	idem_store(rm, RM_ALLOC_REQ, "a:1", 5, 0, 9, 0);
	e = idem_lookup(rm, RM_ALLOC_REQ, "a:1", 5);
	assert_non_null(e);
	assert_int_equal(e->region_id, 9);
	/* a failure is an outcome too */
	idem_store(rm, RM_ALLOC_REQ, "a:1", 6, -ENOMEM, 0, 0);
	assert_int_equal(idem_lookup(rm, RM_ALLOC_REQ, "a:1", 6)->status,
			 -ENOMEM);
	/* fill the ring: the oldest is evicted, the newest stay */
	for (i = 100; i < 100 + RM_IDEM_MAX; i++)
		idem_store(rm, RM_FREE_REQ, "b:2", i, 0, 0, 0);
	assert_null(idem_lookup(rm, RM_ALLOC_REQ, "a:1", 5));
	assert_non_null(idem_lookup(rm, RM_FREE_REQ, "b:2", 100));
	assert_non_null(
		idem_lookup(rm, RM_FREE_REQ, "b:2", 100 + RM_IDEM_MAX - 1));
	idem_store(rm, RM_FREE_REQ, "b:2", 7, 0, 0, 0);
	assert_null(idem_lookup(rm, RM_FREE_REQ, "b:2", 100));
	rm_stop(rm, false);
}

static void test_client_identity(void **state)
{
	struct fixture *f = *state;
	struct rm *rm;
	struct client *c;
	char id[300], st;
	uint64_t start = 0;

	assert_int_equal(rm_start(f, &rm), 0);
	snprintf(id, sizeof(id), "%s:%d", rm->hostname, (int)getpid());
	c = cl(rm, id);
	assert_true(c->local);
	assert_int_equal(c->pid, getpid());
	assert_ptr_equal(client_get(rm, rm_str_from(id), false), c);
	assert_false(cl(rm, "elsewhere:12")->local);
	snprintf(id, sizeof(id), "%s:12x", rm->hostname);
	assert_false(cl(rm, id)->local);
	snprintf(id, sizeof(id), "%s:0", rm->hostname);
	assert_false(cl(rm, id)->local);
	assert_false(cl(rm, "nocolon")->local);
	assert_null(client_get(rm, rm_str_from(""), true));
	assert_int_equal(client_read_stat(getpid(), &st, &start), 0);
	assert_true(start > 0);
	assert_true(st == 'R' || st == 'S');
	rm_stop(rm, false);
}

static pid_t dead_pid(void)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	return pid;
}

static void test_reaper(void **state)
{
	struct fixture *f = *state;
	struct region *r;
	struct client *c, *alive;
	struct rm *rm;
	char id[300], dead[300];

	assert_int_equal(rm_start(f, &rm), 0);
	/* a local client whose process is gone */
	snprintf(dead, sizeof(dead), "%s:%d", rm->hostname, (int)dead_pid());
	c = cl(rm, dead);
	client_pin(rm, c);
	assert_int_equal(region_alloc(rm, c, 1, rm_str_from(NULL), 0, &r), 0);
	assert_int_equal(region_alloc(rm, c, 1, rm_str_from(NULL), 0, &r), 0);
	/* a live local client, connected */
	snprintf(id, sizeof(id), "%s:%d", rm->hostname, (int)getpid());
	alive = cl(rm, id);
	client_pin(rm, alive);
	assert_int_equal(region_alloc(rm, alive, 1, rm_str_from(NULL), 0, &r),
			 0);
	assert_true(alive->starttime > 0);
	client_unpin(rm, c); /* its connection closed too */
	reaper_tick(rm);
	assert_int_equal(rm->nregions, 1);
	assert_null(client_get(rm, rm_str_from(dead), false));
	/* a pid-reuse: pretend the start time seen at allocation differs */
	alive->starttime += 1;
	reaper_tick(rm);
	assert_int_equal(rm->nregions, 0);

	/*
	 * grace 30 s: a tick whose clock reads before the disconnect
	 * stamp (stamps were once "now | 1", a millisecond ahead half the
	 * time) reaps nothing; the difference wrapped and freed at once
	 */
	c = cl(rm, "remote:2");
	client_pin(rm, c);
	assert_int_equal(region_alloc(rm, c, 1, rm_str_from(NULL), 0, &r), 0);
	client_unpin(rm, c);
	c->gone_ms = evloop_now_ms() + 1; /* what T | 1 was for an even T */
	reaper_tick(rm);
	assert_int_equal(rm->nregions, 1);
	client_pin(rm, c);
	assert_int_equal(region_free(rm, r, 0, "test"), 0);
	client_unpin(rm, c);

	/* grace: remote client, disconnected, grace period 0 */
	rm->cfg.grace_period = 0;
	c = cl(rm, "remote:1");
	client_pin(rm, c);
	assert_int_equal(region_alloc(rm, c, 1, rm_str_from(NULL), 0, &r), 0);
	client_pin(rm, c); /* two connections with this id */
	client_unpin(rm, c);
	reaper_tick(rm); /* one still open: no timer, nothing reaped */
	assert_int_equal(rm->nregions, 1);
	assert_int_equal(c->gone_ms, 0);
	client_unpin(rm, c);
	assert_true(c->gone_ms != 0);
	client_pin(rm, c); /* came back in time */
	reaper_tick(rm);
	assert_int_equal(rm->nregions, 1);
	client_unpin(rm, c);
	reaper_tick(rm);
	assert_int_equal(rm->nregions, 0);
	assert_null(client_get(rm, rm_str_from("remote:1"), false));
	rm_stop(rm, false);
}

/*
 * A client that declared a hold until it returns: never reaped, not by the
 * grace, not after a restart (holds.meta), until it frees its regions or
 * is released; an ordinary owner of the same restart is reaped as before;
 * a damaged holds.meta refuses the start.
 */
static void test_durable_hold(void **state)
{
	struct fixture *f = *state;
	struct client *c, *o;
	struct region *r, *r2;
	struct rm *rm;
	uint64_t bytes;
	uint32_t n;
	char path[160];

	assert_int_equal(rm_start(f, &rm), 0);
	rm->cfg.grace_period = 0;
	c = cl(rm, "maru-server/h/0001");
	client_pin(rm, c);
	assert_int_equal(holds_declare(rm, c, 5000), 0);
	assert_int_equal(region_alloc(rm, c, 1, rm_str_from(NULL), 0, &r), 0);
	assert_int_equal(region_alloc(rm, c, 1, rm_str_from(NULL), 0, &r2), 0);
	o = cl(rm, "remote:7");
	client_pin(rm, o);
	assert_int_equal(region_alloc(rm, o, 1, rm_str_from(NULL), 0, &r), 0);
	client_unpin(rm, c);
	assert_true(c->away_s > 0);
	holds_flush(rm);
	reaper_tick(rm);
	assert_int_equal(rm->nregions, 3); /* away, grace 0: still held */
	rm_stop(rm, false);		   /* a crash: WAL only */

	assert_int_equal(rm_start(f, &rm), 0);
	rm->cfg.grace_period = 0;
	rm->cfg.recovered_hold = 0;
	c = client_get(rm, rm_str_from("maru-server/h/0001"), false);
	assert_non_null(c);
	assert_true(c->durable && c->away_s > 0 && c->nallocs == 2);
	reaper_tick(rm);
	/* remote:7 (its connection gone with the restart) is reaped */
	assert_int_equal(rm->nregions, 2);
	assert_null(client_get(rm, rm_str_from("remote:7"), false));
	/* it comes back, then goes again: still held */
	client_pin(rm, c);
	assert_int_equal(c->away_s, 0);
	client_unpin(rm, c);
	reaper_tick(rm);
	assert_int_equal(rm->nregions, 2);
	rm_stop(rm, true); /* a clean stop: checkpoint */

	/* released by an operator: everything freed, nothing held */
	assert_int_equal(rm_start(f, &rm), 0);
	c = client_get(rm, rm_str_from("maru-server/h/0001"), false);
	assert_non_null(c);
	holds_undeclare(rm, c);
	assert_int_equal(reaper_free_owner(rm, c, "test", &n, &bytes), 0);
	assert_int_equal(n, 2);
	assert_int_equal(rm->nregions, 0);
	rm_stop(rm, true);
	assert_int_equal(rm_start(f, &rm), 0);
	assert_null(client_get(rm, rm_str_from("maru-server/h/0001"), false));
	rm_stop(rm, true);

	/* a damaged holds.meta: the start is refused */
	snprintf(path, sizeof(path), "%s/holds.meta", f->state);
	write_file(path, "HOLD", 4);
	assert_int_equal(rm_start(f, &rm), -EPROTO);
	rm_stop(rm, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_alloc_free_and_recover,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_torn_wal_tail, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_wal_undo_failure, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_checkpoint_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_overlap_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_missing_secret_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_recreated_pool_drops_regions, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_wal_refills_idempotency_cache, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idem_cache, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_client_identity, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reaper, setup, teardown),
		cmocka_unit_test_setup_teardown(test_durable_hold, setup,
						teardown),
		cmocka_unit_test(test_devdax_pool_ids),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
