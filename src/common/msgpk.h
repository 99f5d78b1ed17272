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
 * Writing is msgpack-c's packer, into a struct buf (mp_wr, below): the
 * project's one writer.  Its own writer was faster per value (a journal
 * record 7 against 52 ns) but nowhere near 1.3x on a whole request
 * (bench/msgpack-write; docs/architecture.md, "Dependencies").
 *
 * The one MessagePack reader of the project: maru-server decodes requests
 * with it, libmaru decodes replies with it.  Why not msgpack-c's unpacker for
 * reading: it builds a tree of 24-byte msgpack_object nodes in a zone before
 * the caller sees any value, with no limit: one well-formed 64 MiB request
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

#include <msgpack/pack.h>

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

/* ---- writer ----
 *
 * The encoding is msgpack-c's (its packer, msgpack/pack.h): these are a
 * sink that appends its output to a struct buf, and a sticky error so
 * that a sequence of puts needs one check at the end.  Integers take the
 * smallest encoding and strings of 32..255 bytes str8, as msgpack-c (and
 * Python's msgpack) write them.  mp_room()/mp_put_raw() append bytes that
 * are not MessagePack (frame headers) or that already are (a pre-encoded
 * prefix).
 */

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

static inline void mp_put_raw(struct mp_wr *w, const void *s, size_t n)
{
	uint8_t *p = mp_room(w, n);

	if (p && n)
		memcpy(p, s, n);
}

/* msgpack-c's packer writes through this (msgpack_packer_write) */
static inline int mp_sink(void *data, const char *s, size_t n)
{
	uint8_t *p = mp_room(data, n);

	if (!p)
		return -1;
	memcpy(p, s, n);
	return 0;
}

/* a packer whose output goes to @w (two stores: made per put) */
#define MP_PACKER(w) (&(msgpack_packer){.data = (w), .callback = mp_sink})

static inline void mp_put_nil(struct mp_wr *w)
{
	msgpack_pack_nil(MP_PACKER(w));
}

static inline void mp_put_bool(struct mp_wr *w, bool v)
{
	if (v)
		msgpack_pack_true(MP_PACKER(w));
	else
		msgpack_pack_false(MP_PACKER(w));
}

static inline void mp_put_uint(struct mp_wr *w, uint64_t v)
{
	msgpack_pack_uint64(MP_PACKER(w), v);
}

/* mp_put_int - signed: non-negative values take the unsigned forms */
static inline void mp_put_int(struct mp_wr *w, int64_t v)
{
	msgpack_pack_int64(MP_PACKER(w), v);
}

/* mp_put_float - always float64 (0xcb), like Python */
static inline void mp_put_float(struct mp_wr *w, double v)
{
	msgpack_pack_double(MP_PACKER(w), v);
}

static inline void mp_put_map(struct mp_wr *w, uint32_t n)
{
	msgpack_pack_map(MP_PACKER(w), n);
}

static inline void mp_put_array(struct mp_wr *w, uint32_t n)
{
	msgpack_pack_array(MP_PACKER(w), n);
}

static inline void mp_put_str(struct mp_wr *w, const void *s, uint32_t n)
{
	msgpack_packer *pk = MP_PACKER(w);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static inline void mp_put_bin(struct mp_wr *w, const void *s, uint32_t n)
{
	msgpack_packer *pk = MP_PACKER(w);

	msgpack_pack_bin(pk, n);
	msgpack_pack_bin_body(pk, s, n);
}

/* mp_put_key - a short literal map key, e.g. mp_put_key(w, "found") */
#define mp_put_key(w, lit) mp_put_str((w), (lit), sizeof(lit) - 1)

#endif
