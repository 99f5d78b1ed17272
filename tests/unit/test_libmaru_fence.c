/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libmaru_fence.c - fencing a mapping in place (mapper.c, ownership.c)
 *
 * A memfd stands in for the shared pool: the mapper's mapping of a "region"
 * and a second shared mapping (another process's view) cover the same
 * pages.  After maru__mapper_fence() the old pointer must stay usable
 * (reads, writes, no fault) while nothing written through it reaches the
 * pool; lookups skip the fenced mapping, retiring takes it out of the table
 * without freeing it, and destroy unmaps it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "private.h"

#define LEN (2u << 20)

struct fixture {
	struct maru_config *cfg;
	struct maru_handler *h; /* only for the mapper's logging */
	struct maru__mapper mp;
	int fd;		/* the "pool" */
	uint8_t *other; /* another client's view of region 7's bytes */
};

static struct maru__mapping *add_mapping(struct fixture *f, uint64_t rid,
					 off_t off)
{
	struct maru__mapping *m = calloc(1, sizeof(*m));
	size_t b = rid % MARU_MAP_BUCKETS;

	assert_non_null(m);
	m->handle.region_id = rid;
	m->handle.offset = (uint64_t)off;
	m->handle.length = LEN;
	m->len = LEN;
	m->owned = true;
	m->addr =
		mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, off);
	assert_true(m->addr != MAP_FAILED);
	atomic_init(&m->fenced, false);
	/* as maru__mapper_map() publishes a new mapping */
	m->next = atomic_load(&f->mp.buckets[b]);
	atomic_store(&f->mp.buckets[b], m);
	return m;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(maru_config_new(&f->cfg), 0);
	assert_int_equal(maru_handler_new(f->cfg, &f->h), 0);
	maru__mapper_init(&f->mp, f->h, false);
	f->fd = memfd_create("maru-fence-test", MFD_CLOEXEC);
	assert_true(f->fd >= 0);
	assert_int_equal(ftruncate(f->fd, 2 * LEN), 0);
	f->other =
		mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
	assert_true(f->other != MAP_FAILED);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	maru__mapper_destroy(&f->mp);
	munmap(f->other, LEN);
	close(f->fd);
	maru_handler_free(f->h);
	maru_config_free(f->cfg);
	free(f);
	return 0;
}

static void test_fence_in_place(void **state)
{
	struct fixture *f = *state;
	/* 7 and 7 + 256 share a bucket: 263 is the head, 7 behind it */
	struct maru__mapping *a = add_mapping(f, 7, 0);
	struct maru__mapping *b = add_mapping(f, 7 + MARU_MAP_BUCKETS, LEN);
	volatile uint8_t *p = a->addr;

	p[0] = 'A';
	p[LEN - 1] = 'Z';
	assert_int_equal(f->other[0], 'A');
	assert_ptr_equal(maru__mapper_find(&f->mp, 7), a);

	assert_true(maru__mapper_fence(&f->mp, a));
	assert_false(maru__mapper_fence(&f->mp, a)); /* idempotent */
	assert_true(atomic_load(&a->fenced));
	/* the pointer still works, but the pool no longer sees its writes */
	p[0] = 'X';
	p[LEN - 1] = 'Y';
	assert_int_equal(p[0], 'X');
	assert_int_equal(p[LEN - 1], 'Y');
	assert_int_equal(f->other[0], 'A');
	assert_int_equal(f->other[LEN - 1], 'Z');
	/* and the pool's later bytes do not show through */
	f->other[1] = 'B';
	assert_int_equal(p[1], 0);

	/* lookups skip it; its bucket neighbour is unaffected */
	assert_null(maru__mapper_find(&f->mp, 7));
	assert_ptr_equal(maru__mapper_find(&f->mp, 7 + MARU_MAP_BUCKETS), b);
	assert_false(maru__mapper_is_retired(&f->mp, 7));

	/* fence_all fences what is left, once */
	assert_int_equal(maru__mapper_fence_all(&f->mp), 1);
	assert_int_equal(maru__mapper_fence_all(&f->mp), 0);
	assert_null(maru__mapper_find(&f->mp, 7 + MARU_MAP_BUCKETS));
}

static void test_retire(void **state)
{
	struct fixture *f = *state;
	struct maru__mapping *a = add_mapping(f, 7, 0);
	struct maru__mapping *b = add_mapping(f, 7 + MARU_MAP_BUCKETS, LEN);
	struct maru__mapping *c = add_mapping(f, 8, LEN);
	volatile uint8_t *p = a->addr;

	/* fence the one behind the head and the head: both leave the table */
	maru__mapper_fence(&f->mp, a);
	maru__mapper_retire_fenced(&f->mp);
	assert_true(maru__mapper_is_retired(&f->mp, 7));
	assert_false(maru__mapper_is_retired(&f->mp, 8));
	assert_ptr_equal(atomic_load(&f->mp.buckets[7]), b);
	assert_null(b->next);
	/* a reader that stood on @a still walks on: a->next is untouched */
	assert_ptr_equal(a->next, NULL);
	maru__mapper_fence(&f->mp, b);
	maru__mapper_retire_fenced(&f->mp);
	assert_null(atomic_load(&f->mp.buckets[7]));
	assert_true(maru__mapper_is_retired(&f->mp, 7 + MARU_MAP_BUCKETS));
	assert_ptr_equal(maru__mapper_find(&f->mp, 8), c);

	/* retired memory stays mapped until destroy */
	p[5] = 'q';
	assert_int_equal(p[5], 'q');
	assert_int_equal(f->other[5], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fence_in_place, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_retire, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
