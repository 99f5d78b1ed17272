/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nop_rm.h - a resource manager that answers at once, for benchmarks of
 * maru-server's store in process (mds_index.c, msgpack_read.c): every
 * ALLOC gets region 1, FREEs succeed, the pool has no figures.
 */
#ifndef MARU_BENCH_NOP_RM_H
#define MARU_BENCH_NOP_RM_H

#include "store.h"

static int nop_alloc(void *a, uint64_t s, struct mds_wait *w,
		     struct rm_handle *h)
{
	(void)a;
	(void)w;
	h->region_id = 1;
	h->offset = 2 << 20;
	h->length = s;
	h->auth_token = 0xfedcba9876543210ull;
	return 0;
}

static int nop_free(void *a, const struct rm_handle *h)
{
	(void)a;
	(void)h;
	return 0;
}

static int nop_usage(void *a, bool d, uint64_t *t, uint64_t *f,
		     struct mds_wait *w)
{
	(void)a;
	(void)d;
	(void)w;
	*t = *f = 0;
	return 0;
}

static const struct mds_rm_ops nop_ops = {nop_alloc, nop_free, nop_usage, NULL};

#endif
