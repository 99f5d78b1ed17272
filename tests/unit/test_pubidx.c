/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pubidx.c - maru-server's publisher of the shared index
 * (src/metadata_server/pubidx.c): puts wait in a queue until the fence,
 * and the queue keeps the order of changes
 *
 * The store's index (struct ix) and a publisher on a file in the test's
 * temporary directory; a reader maps the same memory and looks keys up as
 * libmaru does.  Single-threaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "index.h"
#include "pubidx.h"

#define RID 7

struct fx {
	char path[64];
	struct ix ix;
	struct pub *p;
	struct si_map rd; /* the reader's view */
};

static uint64_t region_of(void *arg, const struct ix_entry *e)
{
	(void)arg;
	(void)e;
	return RID;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct pub_config c = {0};
	char err[256];

	assert_non_null(f);
	snprintf(f->path, sizeof(f->path), "/dev/shm/test-pubidx-%d",
		 (int)getpid());
	assert_int_equal(ix_init(&f->ix, 0x5eed), 0);
	c.mode = PUB_FILE;
	c.path = f->path;
	c.size = 16u << 20;
	c.coh = SI_COHERENT;
	c.keys = 1000;
	assert_int_equal(pub_open(&f->p, &c, err, sizeof(err)), 0);
	assert_int_equal(pub_build(f->p, &f->ix, region_of, NULL), 0);
	assert_int_equal(
		si_map_init(&f->rd, f->p->mem, f->p->len, SI_COHERENT, false),
		0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	si_map_destroy(&f->rd);
	pub_close(f->p);
	ix_destroy(&f->ix);
	unlink(f->path);
	free(f);
	return 0;
}

static struct ix_key key_of(uint64_t k, char *buf, size_t len)
{
	int n = snprintf(buf, len, "vllm@test@1@0@%016llx",
			 (unsigned long long)k);

	return (struct ix_key){(const uint8_t *)buf, (uint32_t)n, 0};
}

/* register key @k at @off (generation @gen) as the store does */
static struct ix_entry *reg(struct fx *f, uint64_t k, uint64_t off,
			    uint64_t gen)
{
	char buf[64];
	struct ix_key x = key_of(k, buf, sizeof(buf));
	struct ix_entry *e;

	assert_int_equal(ix_insert(&f->ix, &x, ix_hash(&f->ix, &x), &e), 1);
	e->off = off;
	e->len = 4096;
	e->gen = gen;
	pub_put(f->p, e, RID);
	return e;
}

static void del(struct fx *f, struct ix_entry *e)
{
	pub_del(f->p, e);
	ix_delete(&f->ix, e);
}

/* what a reader finds of key @k */
static int look(struct fx *f, uint64_t k, struct si_hit *h)
{
	struct si_layout lay = {0};
	struct si_rstats st = {0};
	char buf[64];
	struct ix_key x = key_of(k, buf, sizeof(buf));
	uint8_t d[SI_DIGEST];

	si_digest(x.tag, x.ptr, x.len, d);
	return si_lookup(&f->rd, &lay, d, 0, false, h, &st);
}

/* a put waits for the fence; a removal and a new put of the same key in
 * the same burst end as the last one said */
static void test_queue_keeps_order(void **state)
{
	struct fx *f = *state;
	struct ix_entry *e;
	struct si_hit h;

	e = reg(f, 1, 0, 1);
	assert_int_equal(f->p->nq, 1);
	assert_int_equal(look(f, 1, &h), SI_MISS); /* not yet: no reply */
	del(f, e);
	reg(f, 1, 8192, 2);
	reg(f, 2, 4096, 3);
	pub_fence(f->p);
	assert_int_equal(f->p->nq, 0);
	assert_int_equal(look(f, 1, &h), SI_HIT);
	assert_int_equal(h.kv_offset, 8192);
	assert_int_equal(h.gen, 2);
	assert_int_equal(h.region_id, RID);
	assert_int_equal(look(f, 2, &h), SI_HIT);
	assert_int_equal(h.gen, 3);
	/* a removal after a queued put of another key publishes both */
	e = reg(f, 3, 0, 4);
	del(f, e);
	assert_int_equal(f->p->nq, 0);
	assert_int_equal(look(f, 3, &h), SI_MISS);
	assert_int_equal(f->p->cur_keys, 2);
}

/* a full queue publishes itself; the stats count every key registered */
static void test_queue_full_and_stats(void **state)
{
	struct fx *f = *state;
	struct buf out = {0};
	struct mp_wr w = {&out, 0};
	const uint64_t clients[3] = {0, 0, 0};
	struct si_hit h;
	uint64_t k, seen = 0;

	for (k = 100; k < 300; k++)
		reg(f, k, k * 4096, k);
	assert_true(f->p->nq > 0 && f->p->nq <= PUB_QUEUE);
	for (k = 100; k < 300; k++)
		seen += look(f, k, &h) == SI_HIT;
	assert_int_equal(seen, 200 - f->p->nq);
	pub_encode_stats(f->p, &w, clients); /* counts the queued too */
	assert_int_equal(f->p->nq, 0);
	assert_int_equal(f->p->cur_keys, 200);
	for (k = 100; k < 300; k++) {
		assert_int_equal(look(f, k, &h), SI_HIT);
		assert_int_equal(h.kv_offset, k * 4096);
	}
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_queue_keeps_order, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_queue_full_and_stats,
						setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
