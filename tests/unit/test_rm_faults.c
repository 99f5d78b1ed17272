/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_faults.c - fault injection through the daemon's modules
 *
 * Every resource-manager source is compiled into this test with
 * test_rm_alloc_hook.h, so each malloc/calloc/realloc/strdup can be made
 * to fail and cmocka checks that nothing leaks.  A scenario (start with
 * recovery, allocate, cache a response, free, reap, checkpoint, stop) is
 * run with the 1st, 2nd, 3rd ... allocation failing, until it runs clean.
 * After every run a fault-free restart must recover exactly the
 * operations that were acknowledged: a failed operation changes nothing
 * durable, and no error path crashes or leaks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "log.h"
#include "rm.h"

int rm_fail_after = -1;
int rm_fail_always;

#define MiB (1ull << 20)

static char dir[64], state_dir[96], pool_path[96];
static const char *pools[1] = {pool_path};

static int rm_start(struct rm **out)
{
	struct rm *rm = calloc(1, sizeof(*rm));
	int rc;

	if (!rm)
		return -ENOMEM;
	rm->cfg.host = "127.0.0.1";
	rm->cfg.state_dir = state_dir;
	rm->cfg.pools.v = pools;
	rm->cfg.pools.n = 1;
	rm->cfg.emulate_size = 64 * MiB;
	rm->cfg.grace_period = 30;
	rm->cfg.max_clients = 4;
	rm->cfg.msg_timeout = 30;
	rm->cfg.checkpoint_ops = 100;
	rm_init(rm);
	*out = rm;
	rc = evloop_new(&rm->el);
	if (rc == 0)
		rc = rm_open(rm);
	return rc;
}

static void rm_stop(struct rm *rm)
{
	if (!rm)
		return;
	rm_close(rm);
	free(rm);
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

/*
 * The scenario, on a state dir holding @base regions.  Return: the number
 * of regions that must survive a crash now (acknowledged allocations minus
 * acknowledged frees).
 */
static long scenario(pid_t dead, long base)
{
	struct region *r[3] = {NULL, NULL, NULL};
	struct client *a, *d;
	struct buf b = BUF_INIT;
	struct rm *rm = NULL;
	char id[300];
	long acked = base; /* a failed start changes nothing durable */
	int i, rc;

	rc = rm_start(&rm);
	if (rc < 0)
		goto out;
	assert_int_equal((long)rm->nregions, base);
	a = client_get(rm, rm_str_from("a:1"), true);
	if (!a)
		goto out;
	client_pin(rm, a);
	for (i = 0; i < 3; i++) {
		rc = region_alloc(rm, a, MiB, rm_str_from(NULL), 10 + i, &r[i]);
		assert_true(pool_check(rm->pools[0]));
		if (rc < 0) {
			assert_int_equal(rc, -ENOMEM);
			goto out;
		}
		acked++;
	}
	if (server_encode_alloc_ok(rm, &b, r[0]) == 0)
		idem_store(rm, RM_ALLOC_REQ, a->id, 10, 0, r[0]->id, 0);
	rc = region_free(rm, r[1], 11, "test");
	if (rc == 0)
		acked--;
	/* a dead local owner for the reaper */
	snprintf(id, sizeof(id), "%s:%d", rm->hostname, (int)dead);
	d = client_get(rm, rm_str_from(id), true);
	if (!d)
		goto out;
	client_pin(rm, d);
	rc = region_alloc(rm, d, MiB, rm_str_from(NULL), 0, &r[1]);
	client_unpin(rm, d);
	if (rc < 0)
		goto out;
	acked++;
	reaper_tick(rm); /* may fail to allocate: then it did nothing */
	acked = (long)rm->nregions;
	rc = state_checkpoint(rm);
out:
	buf_free(&b);
	rm_stop(rm);
	return acked;
}

static void seed(struct rm *rm)
{
	struct client *o = client_get(rm, rm_str_from("old:1"), true);
	struct region *r;

	assert_non_null(o);
	assert_int_equal(region_alloc(rm, o, MiB, rm_str_from(NULL), 0, &r), 0);
	assert_int_equal(state_checkpoint(rm), 0);
	assert_int_equal(region_alloc(rm, o, MiB, rm_str_from(NULL), 5, &r), 0);
}

static void test_every_allocation_failure(void **state)
{
	char cmd[160];
	struct rm *rm;
	long want;
	int n, injected = 0;
	pid_t dead = dead_pid();

	for (n = 0; n < 10000; n++) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s/state %s/pool", dir, dir);
		assert_int_equal(system(cmd), 0);
		/*
		 * A first, fault-free run leaves a pool, a secret, a
		 * checkpoint with one region and a WAL with another (with a
		 * request id), so the faulty start walks all of recovery.
		 */
		rm_fail_after = -1;
		assert_int_equal(rm_start(&rm), 0);
		seed(rm);
		rm_stop(rm);
		rm_fail_after = n;
		want = scenario(dead, 2);
		if (rm_fail_after != -2)
			break; /* the scenario needed fewer than n: done */
		injected++;
		rm_fail_after = -1;
		/* what was acknowledged is exactly what recovers */
		assert_int_equal(rm_start(&rm), 0);
		assert_int_equal((long)rm->nregions, want);
		assert_true(pool_check(rm->pools[0]));
		rm_stop(rm);
	}
	rm_fail_after = -1;
	printf("injected %d allocation failures\n", injected);
	assert_true(injected > 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_allocation_failure),
	};
	char cmd[160];
	int rc;

	strcpy(dir, "/tmp/test_rm_faults.XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
	snprintf(pool_path, sizeof(pool_path), "%s/pool", dir);
	log_init("test_rm_faults", LOG_CRIT);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		rc = 1;
	return rc;
}
