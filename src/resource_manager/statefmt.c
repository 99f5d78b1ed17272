/* SPDX-License-Identifier: Apache-2.0 */
/*
 * statefmt.c - state directory codecs (see statefmt.h for the layouts)
 *
 * Every reader checks a length before each load and trusts no count from
 * the input further than the bytes present.  Integrity: CRC-32 as zlib
 * computes it (reflected 0xEDB88320, init/final XOR 0xFFFFFFFF).
 */
#include "statefmt.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

/* zlib's crc32 takes a uInt length: feed large arrays in chunks */
static uint32_t crc32_buf(const uint8_t *p, uint64_t len)
{
	uLong crc = crc32(0L, Z_NULL, 0);

	while (len) {
		uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;

		crc = crc32(crc, p, n);
		p += n;
		len -= n;
	}
	return (uint32_t)crc;
}

void state_alloc_put(uint8_t *p, const struct state_alloc *a)
{
	size_t n = strnlen(a->owner, STATE_OWNER_SIZE - 1);

	put_u64le(p, a->handle.region_id);
	put_u64le(p + 8, a->handle.offset);
	put_u64le(p + 16, a->handle.length);
	put_u64le(p + 24, a->handle.auth_token);
	memset(p + 32, 0, STATE_OWNER_SIZE);
	memcpy(p + 32, a->owner, n);
	put_u64le(p + 160, a->requested_size);
	put_u64le(p + 168, a->alloc_length);
	put_u64le(p + 176, a->nonce);
	put_u32le(p + 184, a->pool_id);
	put_u32le(p + 188, 0);
	put_u64le(p + 192, a->real_offset);
}

int state_alloc_get(const uint8_t *p, struct state_alloc *a)
{
	const uint8_t *nul = memchr(p + 32, '\0', STATE_OWNER_SIZE);

	if (!nul || nul == p + 32)
		return -EPROTO;
	memset(a, 0, sizeof(*a)); /* padding too: records compare equal */
	a->handle.region_id = get_u64le(p);
	a->handle.offset = get_u64le(p + 8);
	a->handle.length = get_u64le(p + 16);
	a->handle.auth_token = get_u64le(p + 24);
	memcpy(a->owner, p + 32, (size_t)(nul - (p + 32)));
	a->requested_size = get_u64le(p + 160);
	a->alloc_length = get_u64le(p + 168);
	a->nonce = get_u64le(p + 176);
	a->pool_id = get_u32le(p + 184);
	a->real_offset = get_u64le(p + 192);
	return 0;
}

static int all_zero(const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

int state_wal_next(const uint8_t *p, size_t len, size_t *off, struct wal_rec *r,
		   const char **why)
{
	size_t left, need;
	uint32_t plen;

	if (*off >= len)
		return 0;
	left = len - *off;
	p += *off;
	if (left < WAL_HDR_SIZE) {
		*why = "short record header at the end";
		return -EAGAIN;
	}
	if (get_u32le(p) != WAL_MAGIC || get_u32le(p + 4) != WAL_VERSION) {
		/* a crash can leave zero-filled blocks after the last append */
		if (all_zero(p, left)) {
			*why = "zero bytes at the end";
			return -EAGAIN;
		}
		*why = "bad record magic or version";
		return -EPROTO;
	}
	r->type = get_u32le(p + 8);
	r->request_id =
		(uint64_t)get_u32le(p + 12) | (uint64_t)get_u32le(p + 20) << 32;
	plen = get_u32le(p + 16);
	r->timestamp = get_u64le(p + 24);
	if (r->type == WAL_ALLOC)
		need = STATE_ALLOC_REC_SIZE;
	else if (r->type == WAL_FREE)
		need = WAL_FREE_PAYLOAD;
	else {
		*why = "unknown record type";
		return -EPROTO;
	}
	if (plen != need) {
		*why = "wrong payload size for the record type";
		return -EPROTO;
	}
	if (left - WAL_HDR_SIZE < plen) {
		*why = "short record payload at the end";
		return -EAGAIN;
	}
	if (r->type == WAL_ALLOC) {
		if (state_alloc_get(p + WAL_HDR_SIZE, &r->alloc) < 0) {
			*why = "bad owner in an allocation record";
			return -EPROTO;
		}
		r->region_id = r->alloc.handle.region_id;
	} else {
		r->region_id = get_u64le(p + WAL_HDR_SIZE);
	}
	*off += WAL_HDR_SIZE + plen;
	return 1;
}

static uint8_t *wal_begin(struct buf *b, uint32_t type, uint32_t plen,
			  uint64_t request_id, uint64_t timestamp)
{
	uint8_t *p;

	if (buf_reserve(b, WAL_HDR_SIZE + plen) < 0)
		return NULL;
	p = b->data + b->len;
	put_u32le(p, WAL_MAGIC);
	put_u32le(p + 4, WAL_VERSION);
	put_u32le(p + 8, type);
	put_u32le(p + 12, (uint32_t)request_id);
	put_u32le(p + 16, plen);
	put_u32le(p + 20, (uint32_t)(request_id >> 32));
	put_u64le(p + 24, timestamp);
	b->len += WAL_HDR_SIZE + plen;
	return p + WAL_HDR_SIZE;
}

int state_wal_encode_alloc(struct buf *b, const struct state_alloc *a,
			   uint64_t request_id, uint64_t timestamp)
{
	uint8_t *p = wal_begin(b, WAL_ALLOC, STATE_ALLOC_REC_SIZE, request_id,
			       timestamp);

	if (!p)
		return -ENOMEM;
	state_alloc_put(p, a);
	return 0;
}

int state_wal_encode_free(struct buf *b, uint64_t region_id,
			  uint64_t request_id, uint64_t timestamp)
{
	uint8_t *p =
		wal_begin(b, WAL_FREE, WAL_FREE_PAYLOAD, request_id, timestamp);

	if (!p)
		return -ENOMEM;
	put_u64le(p, region_id);
	return 0;
}

/*
 * The frame both checkpoint files share: a 32-byte header with the magic,
 * the version, a CRC-32 of the records at @crc_at and their count at 24,
 * then exactly count records of @rec bytes.  Return: 0 with *count set, or
 * -EPROTO with *why set (@what names the records).
 */
_Static_assert(POOL_META_HDR_SIZE == 32 && GLOBAL_META_HDR_SIZE == 32,
	       "ckpt_frame() reads 32-byte headers");

static int ckpt_frame(const uint8_t *p, size_t len, uint32_t magic,
		      uint32_t version, size_t crc_at, size_t rec,
		      const char *what, uint64_t *count, const char **why)
{
	uint64_t n;

	if (len < 32) {
		*why = "file too short";
		return -EPROTO;
	}
	if (get_u32le(p) != magic) {
		*why = "bad magic";
		return -EPROTO;
	}
	if (get_u32le(p + 4) != version) {
		*why = "unsupported version";
		return -EPROTO;
	}
	n = get_u64le(p + 24);
	if (n > (len - 32) / rec || len - 32 != n * rec) {
		*why = what;
		return -EPROTO;
	}
	if (crc32_buf(p + 32, n * rec) != get_u32le(p + crc_at)) {
		*why = "CRC mismatch";
		return -EPROTO;
	}
	*count = n;
	return 0;
}

int state_pool_meta_parse(const uint8_t *p, size_t len, struct pool_meta *m,
			  const char **why)
{
	uint64_t count, i, prev_end = 0;

	if (ckpt_frame(p, len, POOL_META_MAGIC, POOL_META_VERSION, 12,
		       POOL_META_EXTENT_SIZE,
		       "file size does not match the extent count", &count,
		       why) < 0)
		return -EPROTO;
	m->pool_id = get_u32le(p + 8);
	m->total_size = get_u64le(p + 16);
	m->count = count;
	m->extents = p + POOL_META_HDR_SIZE;
	for (i = 0; i < count; i++) {
		uint64_t off, n;

		state_pool_meta_extent(m, i, &off, &n);
		if (n == 0 || off + n < off || (i && off < prev_end)) {
			*why = "extents empty, unsorted or overlapping";
			return -EPROTO;
		}
		prev_end = off + n;
	}
	return 0;
}

void state_pool_meta_extent(const struct pool_meta *m, uint64_t i,
			    uint64_t *offset, uint64_t *length)
{
	*offset = get_u64le(m->extents + i * POOL_META_EXTENT_SIZE);
	*length = get_u64le(m->extents + i * POOL_META_EXTENT_SIZE + 8);
}

int state_pool_meta_encode(struct buf *b, uint32_t pool_id, uint64_t total_size,
			   const struct pool_extent *ext, size_t count)
{
	size_t n = POOL_META_HDR_SIZE + count * POOL_META_EXTENT_SIZE;
	uint8_t *p, *e;
	size_t i;

	if (buf_reserve(b, n) < 0)
		return -ENOMEM;
	p = b->data + b->len;
	e = p + POOL_META_HDR_SIZE;
	for (i = 0; i < count; i++) {
		put_u64le(e + i * POOL_META_EXTENT_SIZE, ext[i].offset);
		put_u64le(e + i * POOL_META_EXTENT_SIZE + 8, ext[i].length);
	}
	put_u32le(p, POOL_META_MAGIC);
	put_u32le(p + 4, POOL_META_VERSION);
	put_u32le(p + 8, pool_id);
	put_u32le(p + 12,
		  count ? crc32_buf(e, count * POOL_META_EXTENT_SIZE) : 0);
	put_u64le(p + 16, total_size);
	put_u64le(p + 24, count);
	b->len += n;
	return 0;
}

int state_global_meta_parse(const uint8_t *p, size_t len, struct global_meta *m,
			    const char **why)
{
	uint64_t count;

	if (ckpt_frame(p, len, GLOBAL_META_MAGIC, GLOBAL_META_VERSION, 8,
		       STATE_ALLOC_REC_SIZE,
		       "file size does not match the allocation count", &count,
		       why) < 0)
		return -EPROTO;
	m->next_region_id = get_u64le(p + 16);
	m->count = count;
	m->records = p + GLOBAL_META_HDR_SIZE;
	return 0;
}

int state_global_meta_get(const struct global_meta *m, uint64_t i,
			  struct state_alloc *a)
{
	return state_alloc_get(m->records + i * STATE_ALLOC_REC_SIZE, a);
}

int state_global_meta_begin(struct buf *b, uint64_t next_region_id)
{
	uint8_t *p;

	if (buf_reserve(b, GLOBAL_META_HDR_SIZE) < 0)
		return -ENOMEM;
	p = b->data + b->len;
	memset(p, 0, GLOBAL_META_HDR_SIZE);
	put_u32le(p, GLOBAL_META_MAGIC);
	put_u32le(p + 4, GLOBAL_META_VERSION);
	put_u64le(p + 16, next_region_id);
	b->len += GLOBAL_META_HDR_SIZE;
	return 0;
}

int state_global_meta_add(struct buf *b, const struct state_alloc *a)
{
	if (buf_reserve(b, STATE_ALLOC_REC_SIZE) < 0)
		return -ENOMEM;
	state_alloc_put(b->data + b->len, a);
	b->len += STATE_ALLOC_REC_SIZE;
	return 0;
}

void state_global_meta_end(struct buf *b, uint64_t count)
{
	uint8_t *p = b->data;

	put_u32le(p + 8, count ? crc32_buf(p + GLOBAL_META_HDR_SIZE,
					   count * STATE_ALLOC_REC_SIZE)
			       : 0);
	put_u64le(p + 24, count);
}

int state_holds_parse(const uint8_t *p, size_t len, struct holds_meta *m,
		      const char **why)
{
	uint64_t count;

	if (ckpt_frame(p, len, HOLDS_META_MAGIC, HOLDS_META_VERSION, 8,
		       HOLDS_REC_SIZE,
		       "file size does not match the hold count", &count,
		       why) < 0)
		return -EPROTO;
	m->count = count;
	m->records = p + HOLDS_META_HDR_SIZE;
	return 0;
}

int state_holds_get(const struct holds_meta *m, uint64_t i,
		    struct state_hold *h)
{
	const uint8_t *p = m->records + i * HOLDS_REC_SIZE;
	const uint8_t *nul = memchr(p, '\0', STATE_OWNER_SIZE);

	if (!nul || nul == p)
		return -EPROTO;
	memset(h, 0, sizeof(*h));
	memcpy(h->owner, p, (size_t)(nul - p));
	h->away_since = get_u64le(p + STATE_OWNER_SIZE);
	h->write_ms = get_u32le(p + STATE_OWNER_SIZE + 8);
	return 0;
}

int state_holds_encode(struct buf *b, const struct state_hold *h, size_t n)
{
	size_t size = HOLDS_META_HDR_SIZE + n * HOLDS_REC_SIZE, i, k;
	uint8_t *p, *r;

	if (buf_reserve(b, size) < 0)
		return -ENOMEM;
	p = b->data + b->len;
	memset(p, 0, size);
	put_u32le(p, HOLDS_META_MAGIC);
	put_u32le(p + 4, HOLDS_META_VERSION);
	put_u64le(p + 24, n);
	for (i = 0; i < n; i++) {
		r = p + HOLDS_META_HDR_SIZE + i * HOLDS_REC_SIZE;
		k = strnlen(h[i].owner, STATE_OWNER_SIZE - 1);
		memcpy(r, h[i].owner, k);
		put_u64le(r + STATE_OWNER_SIZE, h[i].away_since);
		put_u32le(r + STATE_OWNER_SIZE + 8, h[i].write_ms);
	}
	put_u32le(p + 8,
		  n ? crc32_buf(p + HOLDS_META_HDR_SIZE, n * HOLDS_REC_SIZE)
		    : 0);
	b->len += size;
	return 0;
}
