/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.c - first-fit allocator over a sorted, coalesced free-extent array
 *
 * Design: the free extents of a pool live in one array sorted by offset;
 * no two of them touch (they are merged as soon as they would).  Allocation
 * is first fit with alignment (docs/resource-manager.md, Allocation): for each
 * extent, start = round_up(offset, align); the first extent where
 * start + aligned fits wins.  The leading fragment [offset, start) and the
 * trailing fragment stay free, so one allocation can turn one extent into
 * two.  Free finds the insertion point by binary search and merges with the
 * left and/or right neighbour.  Both are O(extents), which is fine for the
 * few thousand regions a pool holds (regions are large: MiBs to GiBs).
 *
 * Capacity rule: free extents are separated by allocated ranges, so a pool
 * never has more than nallocs + 1 of them.  pool_alloc()/pool_reserve()
 * grow the array to that bound *before* they change anything, so they fail
 * cleanly on ENOMEM, and pool_free() never needs memory.
 *
 * Ownership: struct pool owns its extent array and its path string.
 * Context: the event-loop thread only.
 */
#include "pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int pool_init(struct pool *p, uint64_t base, uint64_t size, uint64_t align)
{
	if (!pool_is_pow2(align) || size == 0 || base + size < base)
		return -EINVAL;
	p->ext = malloc(4 * sizeof(*p->ext));
	if (!p->ext)
		return -ENOMEM;
	p->ext_cap = 4;
	p->ext[0].offset = base;
	p->ext[0].length = size;
	p->next = 1;
	p->nallocs = 0;
	p->align = align;
	p->base = base;
	p->total_size = size;
	p->free_size = size;
	return 0;
}

void pool_fini(struct pool *p)
{
	free(p->ext);
	free(p->path);
	p->ext = NULL;
	p->path = NULL;
	p->next = p->ext_cap = p->nallocs = 0;
}

/* Make room for @want extents.  Return: 0 or -ENOMEM, pool unchanged. */
static int ext_reserve(struct pool *p, size_t want)
{
	struct pool_extent *n;
	size_t cap = p->ext_cap ? p->ext_cap : 4;

	if (want <= p->ext_cap)
		return 0;
	while (cap < want)
		cap *= 2;
	n = realloc(p->ext, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	p->ext = n;
	p->ext_cap = cap;
	return 0;
}

static void ext_insert(struct pool *p, size_t i, uint64_t off, uint64_t len)
{
	memmove(&p->ext[i + 1], &p->ext[i], (p->next - i) * sizeof(*p->ext));
	p->ext[i].offset = off;
	p->ext[i].length = len;
	p->next++;
}

static void ext_remove(struct pool *p, size_t i)
{
	memmove(&p->ext[i], &p->ext[i + 1],
		(p->next - i - 1) * sizeof(*p->ext));
	p->next--;
}

/*
 * Carve [start, start + len) out of extent @i, which must contain it.
 * The caller has reserved room for one more extent.
 */
static void ext_carve(struct pool *p, size_t i, uint64_t start, uint64_t len)
{
	struct pool_extent *e = &p->ext[i];
	uint64_t head = start - e->offset;
	uint64_t tail = e->offset + e->length - (start + len);

	if (head && tail) {
		e->length = head;
		ext_insert(p, i + 1, start + len, tail);
	} else if (head) {
		e->length = head;
	} else if (tail) {
		e->offset = start + len;
		e->length = tail;
	} else {
		ext_remove(p, i);
	}
	p->free_size -= len;
	p->nallocs++;
}

int pool_alloc(struct pool *p, uint64_t size, uint64_t *offset,
	       uint64_t *aligned)
{
	uint64_t len, start, end;
	size_t i;
	int rc;

	if (size == 0 || size > POOL_MAX_ALLOC)
		return -EINVAL;
	len = round_up_u64(size, p->align);
	if (len > p->free_size)
		return -ENOMEM;
	for (i = 0; i < p->next; i++) {
		start = round_up_u64(p->ext[i].offset, p->align);
		end = p->ext[i].offset + p->ext[i].length;
		if (start < end && end - start >= len)
			break;
	}
	if (i == p->next)
		return -ENOMEM;
	/* a split adds one extent; later frees may need nallocs + 2 */
	rc = ext_reserve(p, p->nallocs + 2 > p->next + 1 ? p->nallocs + 2
							 : p->next + 1);
	if (rc < 0)
		return rc;
	ext_carve(p, i, start, len);
	*offset = start;
	*aligned = len;
	return 0;
}

/* Index of the first extent whose offset is >= @off (binary search). */
static size_t ext_lower_bound(const struct pool *p, uint64_t off)
{
	size_t lo = 0, hi = p->next;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->ext[mid].offset < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool in_pool(const struct pool *p, uint64_t off, uint64_t len)
{
	return len && off >= p->base && off + len > off &&
	       off + len <= p->base + p->total_size;
}

int pool_free(struct pool *p, uint64_t offset, uint64_t length)
{
	size_t i;
	bool merge_left, merge_right;
	struct pool_extent *l, *r;

	if (!in_pool(p, offset, length) || p->nallocs == 0)
		return -EINVAL;
	i = ext_lower_bound(p, offset);
	l = i > 0 ? &p->ext[i - 1] : NULL;
	r = i < p->next ? &p->ext[i] : NULL;
	/* overlapping a free extent means a double free or a bad range */
	if (l && l->offset + l->length > offset)
		return -EINVAL;
	if (r && offset + length > r->offset)
		return -EINVAL;
	merge_left = l && l->offset + l->length == offset;
	merge_right = r && offset + length == r->offset;
	if (merge_left && merge_right) {
		l->length += length + r->length;
		ext_remove(p, i);
	} else if (merge_left) {
		l->length += length;
	} else if (merge_right) {
		r->offset = offset;
		r->length += length;
	} else {
		/* cannot overflow: the capacity rule reserved nallocs + 1 */
		ext_insert(p, i, offset, length);
	}
	p->free_size += length;
	p->nallocs--;
	return 0;
}

int pool_reserve(struct pool *p, uint64_t offset, uint64_t length)
{
	size_t i;
	struct pool_extent *e;
	int rc;

	if (!in_pool(p, offset, length))
		return -EINVAL;
	i = ext_lower_bound(p, offset + 1);
	if (i == 0)
		return -EINVAL;
	e = &p->ext[i - 1];
	if (offset < e->offset || offset + length > e->offset + e->length)
		return -EINVAL;
	rc = ext_reserve(p, p->nallocs + 2 > p->next + 1 ? p->nallocs + 2
							 : p->next + 1);
	if (rc < 0)
		return rc;
	ext_carve(p, i - 1, offset, length);
	return 0;
}

bool pool_check(const struct pool *p)
{
	uint64_t sum = 0;
	size_t i;

	if (p->next > p->ext_cap || p->next > p->nallocs + 1)
		return false;
	for (i = 0; i < p->next; i++) {
		const struct pool_extent *e = &p->ext[i];

		if (!in_pool(p, e->offset, e->length))
			return false;
		/* sorted and coalesced: a gap to the previous extent */
		if (i &&
		    p->ext[i - 1].offset + p->ext[i - 1].length >= e->offset)
			return false;
		sum += e->length;
	}
	return sum == p->free_size;
}

int pool_pick_alloc(struct pool *const *pools, size_t n, struct rm_str dax_path,
		    uint64_t size, struct pool **out, uint64_t *offset,
		    uint64_t *aligned)
{
	size_t i;
	int rc = -ENOMEM;

	if (size == 0 || size > POOL_MAX_ALLOC)
		return -EINVAL;
	if (n == 0)
		return -ENODEV;
	if (dax_path.len) {
		for (i = 0; i < n; i++) {
			if (rm_str_eq(dax_path, rm_str_from(pools[i]->path)))
				break;
		}
		if (i == n)
			return -ENOENT;
		rc = pool_alloc(pools[i], size, offset, aligned);
		if (rc == 0)
			*out = pools[i];
		return rc;
	}
	/* fill-first: the first pool in list order that has room */
	for (i = 0; i < n; i++) {
		rc = pool_alloc(pools[i], size, offset, aligned);
		if (rc == 0) {
			*out = pools[i];
			return 0;
		}
	}
	return rc;
}
