/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msgpk.c - MessagePack reader and writer (see msgpk.h)
 *
 * The format: https://github.com/msgpack/msgpack/blob/master/spec.md.
 * The fix forms by range, the others by a table of their header layout
 * (kinds[]); every header and payload length is checked against the
 * remaining input before anything is read.
 */
#include "msgpk.h"

static inline uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* @n (0, 1, 2, 4 or 8) bytes at @p, big-endian */
static inline uint64_t be(const uint8_t *p, unsigned n)
{
	switch (n) {
	case 1:
		return p[0];
	case 2:
		return (uint64_t)(p[0] << 8 | p[1]);
	case 4:
		return be32(p);
	case 8:
		return (uint64_t)be32(p) << 32 | be32(p + 4);
	default:
		return 0;
	}
}

/*
 * The type bytes 0xc0..0xdf: the kind of value, the header's size (type
 * byte included; 0: never used, i.e. 0xc1), how many of its bytes after
 * the type byte are a byte length (str, bin, ext; 0: the rest of the
 * header is the value, or the element count), and for fixext the payload
 * size.
 */
static const struct kind {
	uint8_t type, hdr, lenw, fixed;
} kinds[32] = {
	{MP_NIL, 1, 0, 0},   {0, 0, 0, 0},	  /* c0 nil, c1 -- */
	{MP_BOOL, 1, 0, 0},  {MP_BOOL, 1, 0, 0},  /* c2 false, c3 true */
	{MP_BIN, 2, 1, 0},   {MP_BIN, 3, 2, 0},	  /* c4-c6 bin 8/16/32 */
	{MP_BIN, 5, 4, 0},   {MP_EXT, 3, 1, 0},	  /* c7-c9 ext 8/16/32: */
	{MP_EXT, 4, 2, 0},   {MP_EXT, 6, 4, 0},	  /*   length, type */
	{MP_FLOAT, 5, 0, 0}, {MP_FLOAT, 9, 0, 0}, /* ca float, cb double */
	{MP_UINT, 2, 0, 0},  {MP_UINT, 3, 0, 0},  /* cc-cf uint 8..64 */
	{MP_UINT, 5, 0, 0},  {MP_UINT, 9, 0, 0},
	{MP_NINT, 2, 0, 0},  {MP_NINT, 3, 0, 0}, /* d0-d3 int 8..64 */
	{MP_NINT, 5, 0, 0},  {MP_NINT, 9, 0, 0},
	{MP_EXT, 2, 0, 1},   {MP_EXT, 2, 0, 2}, /* d4-d8 fixext: type */
	{MP_EXT, 2, 0, 4},   {MP_EXT, 2, 0, 8},
	{MP_EXT, 2, 0, 16},  {MP_STR, 2, 1, 0}, /* d9-db str 8/16/32 */
	{MP_STR, 3, 2, 0},   {MP_STR, 5, 4, 0},
	{MP_ARRAY, 3, 0, 0}, {MP_ARRAY, 5, 0, 0}, /* dc-dd array 16/32 */
	{MP_MAP, 3, 0, 0},   {MP_MAP, 5, 0, 0},	  /* de-df map 16/32 */
};

/* Take @n bytes of payload after a header of @hdr bytes. */
static int take(struct mp_rd *r, struct mp_val *v, size_t hdr, uint64_t n,
		uint8_t type)
{
	size_t left = (size_t)(r->end - r->p);

	if (left < hdr || left - hdr < n)
		return -EPROTO;
	v->type = type;
	v->ptr = r->p + hdr;
	v->len = (uint32_t)n;
	r->p += hdr + n;
	return 0;
}

int mp_read(struct mp_rd *r, struct mp_val *v)
{
	size_t left = (size_t)(r->end - r->p);
	const uint8_t *p = r->p;
	const struct kind *k;
	unsigned w;
	uint64_t x;
	uint8_t c;
	float f;

	if (left < 1)
		return -EPROTO;
	c = p[0];
	if (c <= 0x7f || c >= 0xe0) { /* positive / negative fixint */
		v->type = c <= 0x7f ? MP_UINT : MP_NINT;
		v->u = c;
		v->i = (int8_t)c;
		r->p++;
		return 0;
	}
	if (c <= 0x9f) { /* fixmap 0x80, fixarray 0x90 */
		v->type = c <= 0x8f ? MP_MAP : MP_ARRAY;
		v->n = c & 0x0f;
		r->p++;
		return 0;
	}
	if (c <= 0xbf) /* fixstr */
		return take(r, v, 1, c & 0x1f, MP_STR);
	if (c == 0xd9 && left >= 2) /* str8: most keys */
		return take(r, v, 2, p[1], MP_STR);

	k = &kinds[c - 0xc0];
	if (!k->hdr || left < k->hdr)
		return -EPROTO; /* 0xc1, or a truncated header */
	if (k->lenw)		/* str, bin, ext: a length, then bytes */
		return take(r, v, k->hdr, be(p + 1, k->lenw), k->type);
	if (k->fixed)
		return take(r, v, 2, k->fixed, MP_EXT);
	w = k->hdr - 1u;
	x = be(p + 1, w);
	v->type = k->type;
	switch (v->type) {
	case MP_BOOL:
		v->b = c == 0xc3;
		break;
	case MP_FLOAT:
		if (w == 4) {
			uint32_t bits = (uint32_t)x;

			memcpy(&f, &bits, 4);
			v->f = f;
		} else {
			memcpy(&v->f, &x, 8);
		}
		break;
	case MP_UINT:
		v->u = x;
		break;
	case MP_NINT: /* sign-extend; a non-negative one reads as uint */
		v->i = w == 8 ? (int64_t)x
			      : (int64_t)(x ^ (1ull << (8 * w - 1))) -
					(int64_t)(1ull << (8 * w - 1));
		if (v->i >= 0) {
			v->type = MP_UINT;
			v->u = (uint64_t)v->i;
		}
		break;
	case MP_ARRAY:
	case MP_MAP:
		v->n = (uint32_t)x;
		break;
	default: /* MP_NIL */
		break;
	}
	r->p += w + 1;
	return 0;
}

/* skip @pending whole values */
static int skip_n(struct mp_rd *r, uint64_t pending)
{
	struct mp_val v;

	/* each value read consumes at least one byte: bounded by the input */
	while (pending) {
		if (mp_read(r, &v) < 0)
			return -EPROTO;
		pending--;
		if (v.type == MP_ARRAY)
			pending += v.n;
		else if (v.type == MP_MAP)
			pending += 2 * (uint64_t)v.n;
	}
	return 0;
}

int mp_skip(struct mp_rd *r)
{
	return skip_n(r, 1);
}

int mp_skip_rest(struct mp_rd *r, const struct mp_val *v)
{
	if (v->type == MP_ARRAY)
		return skip_n(r, v->n);
	if (v->type == MP_MAP)
		return skip_n(r, 2 * (uint64_t)v->n);
	return 0;
}
