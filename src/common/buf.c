/* SPDX-License-Identifier: Apache-2.0 */
/* buf.c - see buf.h.  Capacity doubles, so appends are amortised O(1). */
#include "buf.h"

#include <errno.h>
#include <stdlib.h>

int buf_reserve(struct buf *b, size_t extra)
{
	size_t need = b->len + extra;
	size_t cap = b->cap ? b->cap : 256;
	uint8_t *p;

	if (need < b->len)
		return -ENOMEM; /* overflow */
	if (need <= b->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_put(struct buf *b, const void *p, size_t n)
{
	int rc = buf_reserve(b, n);

	if (rc < 0)
		return rc;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}
