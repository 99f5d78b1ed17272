/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rm_checkpoint.c - the checkpoint readers on arbitrary bytes
 *
 * The first byte picks pool_<id>.meta (even) or global.meta (odd).  An
 * accepted pool meta must re-encode to exactly the input; an accepted
 * global.meta must re-encode to an image that parses to the same records.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "statefmt.h"
#include "fuzz.h"

static void pool_meta(const uint8_t *p, size_t n)
{
	struct pool_extent *ext;
	struct buf b = BUF_INIT;
	struct pool_meta m;
	const char *why;
	uint64_t i;

	if (state_pool_meta_parse(p, n, &m, &why) < 0)
		return;
	CHECK(m.count == (n - POOL_META_HDR_SIZE) / POOL_META_EXTENT_SIZE);
	ext = malloc((m.count ? m.count : 1) * sizeof(*ext));
	if (!ext)
		return;
	for (i = 0; i < m.count; i++) {
		state_pool_meta_extent(&m, i, &ext[i].offset, &ext[i].length);
		CHECK(ext[i].length > 0);
		CHECK(i == 0 ||
		      ext[i].offset >= ext[i - 1].offset + ext[i - 1].length);
	}
	if (state_pool_meta_encode(&b, m.pool_id, m.total_size, ext, m.count) ==
	    0) {
		CHECK(b.len == n);
		CHECK(memcmp(b.data, p, n) == 0);
	}
	buf_free(&b);
	free(ext);
}

static void global_meta(const uint8_t *p, size_t n)
{
	struct state_alloc a, c;
	struct global_meta m, m2;
	struct buf b = BUF_INIT;
	const char *why;
	uint64_t i, good = 0;

	if (state_global_meta_parse(p, n, &m, &why) < 0)
		return;
	CHECK(m.count == (n - GLOBAL_META_HDR_SIZE) / STATE_ALLOC_REC_SIZE);
	if (state_global_meta_begin(&b, m.next_region_id) < 0)
		return;
	for (i = 0; i < m.count; i++) {
		if (state_global_meta_get(&m, i, &a) < 0)
			continue; /* recovery refuses such a file */
		if (state_global_meta_add(&b, &a) < 0)
			goto out;
		good++;
	}
	state_global_meta_end(&b, good);
	CHECK(state_global_meta_parse(b.data, b.len, &m2, &why) == 0);
	CHECK(m2.count == good && m2.next_region_id == m.next_region_id);
	for (i = 0, good = 0; i < m.count; i++) {
		if (state_global_meta_get(&m, i, &a) < 0)
			continue;
		CHECK(state_global_meta_get(&m2, good++, &c) == 0);
		CHECK(memcmp(&a, &c, sizeof(a)) == 0);
	}
out:
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		global_meta(data + 1, size - 1);
	else
		pool_meta(data + 1, size - 1);
	return 0;
}
