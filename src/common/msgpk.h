/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msgpk.h - a minimal zero-copy MessagePack reader and writer
 *
 * The reader walks a byte range one value at a time (mp_read) and never
 * allocates: strings, binaries and ext payloads borrow from the input.
 * Containers only report their element count; their elements follow in
 * the stream.  mp_skip() skips one whole value of any depth without
 * recursion (a pending-values counter instead of a stack), so deeply
 * nested input costs no stack and no memory.  Every read is bounds
 * checked; malformed or truncated input gives -EPROTO.
 *
 * The writer appends to a struct buf through struct mp_wr, whose error is
 * sticky: a sequence of puts needs one check at the end.  Integers use
 * the smallest encoding (what Python's msgpack emits); unsigned values
 * >= 2^63 therefore come out as uint64 (0xcf) and read back exactly.
 *
 * The one MessagePack reader of the project: maru-server decodes requests
 * with it, libmaru decodes replies with it (both encode with msgpack-c's
 * packer or this writer).  Why not msgpack-c's unpacker for reading: it
 * builds a tree of 24-byte msgpack_object nodes in a zone before the
 * caller sees any value, with no limit: one well-formed 64 MiB request
 * would make maru-server hold 1.5 GiB (bench/msgpack-read, what=memory;
 * docs/architecture.md, "Dependencies").  This reader skips what it does
 * not want in place.  The tests and the fuzz targets cross-check it
 * against msgpack-c.
 *
 * Context: pure functions; any thread.
 */
#ifndef MARU_COMMON_MSGPK_H
#define MARU_COMMON_MSGPK_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "buf.h"

enum mp_type { /* this order: libmaru/codec.c tests ranges of it */
	       MP_NIL,
	       MP_BOOL,
	       MP_UINT,	 /* any integer >= 0, whatever its encoding */
	       MP_NINT,	 /* any integer < 0 */
	       MP_FLOAT, /* float32 or float64, widened */
	       MP_STR,
	       MP_BIN,
	       MP_ARRAY,
	       MP_MAP,
	       MP_EXT,
};

struct mp_val {
	uint8_t type;	    /* enum mp_type */
	bool b;		    /* MP_BOOL */
	uint64_t u;	    /* MP_UINT */
	int64_t i;	    /* MP_NINT */
	double f;	    /* MP_FLOAT */
	uint32_t n;	    /* MP_ARRAY elements, MP_MAP pairs */
	const uint8_t *ptr; /* MP_STR, MP_BIN, MP_EXT: borrows the input */
	uint32_t len;	    /* ... their length in bytes */
};

struct mp_rd {
	const uint8_t *p;   /* borrows: next byte to read */
	const uint8_t *end; /* one past the last readable byte */
};

static inline void mp_rd_init(struct mp_rd *r, const uint8_t *p, size_t len)
{
	r->p = p;
	r->end = len ? p + len : p; /* p may be NULL for nothing */
}

/**
 * mp_read - decode the value at r->p and advance past its header (and,
 * for str/bin/ext, past its bytes)
 * Return: 0 or -EPROTO (truncated input, or the reserved byte 0xc1).
 */
int mp_read(struct mp_rd *r, struct mp_val *v);

/**
 * mp_skip - advance past one complete value, containers included
 * Return: 0 or -EPROTO.
 */
int mp_skip(struct mp_rd *r);

/* mp_skip_rest - advance past the elements of @v, a container header just
 * read (nothing for other values).  Return: 0 or -EPROTO. */
int mp_skip_rest(struct mp_rd *r, const struct mp_val *v);

/* ---- writer ---- */

struct mp_wr {
	struct buf *b; /* borrows: output, appended to */
	int err;       /* 0 or the first -ENOMEM */
};

static inline uint8_t *mp_room(struct mp_wr *w, size_t n)
{
	uint8_t *p;

	if (w->err)
		return NULL;
	if (w->b->cap - w->b->len < n && (w->err = buf_reserve(w->b, n)))
		return NULL;
	p = w->b->data + w->b->len;
	w->b->len += n;
	return p;
}

static inline void mp_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void mp_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static inline void mp_be64(uint8_t *p, uint64_t v)
{
	mp_be32(p, (uint32_t)(v >> 32));
	mp_be32(p + 4, (uint32_t)v);
}

static inline void mp_put_raw(struct mp_wr *w, const void *s, size_t n)
{
	uint8_t *p = mp_room(w, n);

	if (p && n)
		memcpy(p, s, n);
}

static inline void mp_put_nil(struct mp_wr *w)
{
	uint8_t *p = mp_room(w, 1);

	if (p)
		p[0] = 0xc0;
}

static inline void mp_put_bool(struct mp_wr *w, bool v)
{
	uint8_t *p = mp_room(w, 1);

	if (p)
		p[0] = v ? 0xc3 : 0xc2;
}

/* marker byte @c, then @v big-endian in @n bytes (0, 1, 2, 4 or 8) */
static inline void mp_put_tagged(struct mp_wr *w, uint8_t c, uint64_t v,
				 unsigned n)
{
	uint8_t *p = mp_room(w, 1 + n);

	if (!p)
		return;
	p[0] = c;
	if (n == 1)
		p[1] = (uint8_t)v;
	else if (n == 2)
		mp_be16(p + 1, (uint16_t)v);
	else if (n == 4)
		mp_be32(p + 1, (uint32_t)v);
	else if (n == 8)
		mp_be64(p + 1, v);
}

/*
 * mp_put_len - the header of a str, bin, array or map of @n elements:
 * (@fix | n) up to @fixmax (none when @fixmax < 0), else the 8-bit form
 * @c8 (none when 0), the 16-bit @c16 or the 32-bit @c32
 */
static inline void mp_put_len(struct mp_wr *w, uint32_t n, uint8_t fix,
			      int fixmax, uint8_t c8, uint8_t c16, uint8_t c32)
{
	if (fixmax >= 0 && n <= (uint32_t)fixmax)
		mp_put_tagged(w, (uint8_t)(fix | n), 0, 0);
	else if (c8 && n < 256)
		mp_put_tagged(w, c8, n, 1);
	else if (n < 65536)
		mp_put_tagged(w, c16, n, 2);
	else
		mp_put_tagged(w, c32, n, 4);
}

static inline void mp_put_uint(struct mp_wr *w, uint64_t v)
{
	if (v < 128)
		mp_put_tagged(w, (uint8_t)v, 0, 0);
	else if (v < 256)
		mp_put_tagged(w, 0xcc, v, 1);
	else if (v < 65536)
		mp_put_tagged(w, 0xcd, v, 2);
	else if (v <= UINT32_MAX)
		mp_put_tagged(w, 0xce, v, 4);
	else
		mp_put_tagged(w, 0xcf, v, 8);
}

/* mp_put_int - signed: non-negative values take the unsigned forms */
void mp_put_int(struct mp_wr *w, int64_t v);

/* mp_put_float - always float64 (0xcb), like Python */
void mp_put_float(struct mp_wr *w, double v);

static inline void mp_put_map(struct mp_wr *w, uint32_t n)
{
	mp_put_len(w, n, 0x80, 15, 0, 0xde, 0xdf);
}

static inline void mp_put_array(struct mp_wr *w, uint32_t n)
{
	mp_put_len(w, n, 0x90, 15, 0, 0xdc, 0xdd);
}

/* mp_put_str - a str (str8 for 32..255 bytes, as Python emits) */
static inline void mp_put_str(struct mp_wr *w, const void *s, uint32_t n)
{
	mp_put_len(w, n, 0xa0, 31, 0xd9, 0xda, 0xdb);
	mp_put_raw(w, s, n);
}

static inline void mp_put_bin(struct mp_wr *w, const void *s, uint32_t n)
{
	mp_put_len(w, n, 0, -1, 0xc4, 0xc5, 0xc6);
	mp_put_raw(w, s, n);
}

/* mp_put_key - a short literal map key, e.g. mp_put_key(w, "found") */
#define mp_put_key(w, lit) mp_put_str((w), (lit), sizeof(lit) - 1)

#endif
