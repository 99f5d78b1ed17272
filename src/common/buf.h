/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buf.h - a growable byte buffer and fixed-endian load/store helpers
 *
 * Wire codecs build messages into a struct buf and read them with the get_*
 * helpers, which compile to plain loads on x86 and never touch unaligned
 * memory through a cast.  Leaf code: used by daemons, libmaru and tools.
 */
#ifndef MARU_COMMON_BUF_H
#define MARU_COMMON_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct buf {
	uint8_t *data; /* owns: malloc()ed, NULL when cap == 0 */
	size_t len;    /* bytes in use */
	size_t cap;    /* bytes allocated */
};

#define BUF_INIT                                                               \
	{                                                                      \
		NULL, 0, 0                                                     \
	}

/* buf_reserve - make room for @extra more bytes. Return: 0 or -ENOMEM */
int buf_reserve(struct buf *b, size_t extra);
/* buf_put - append @n bytes. Return: 0 or -ENOMEM */
int buf_put(struct buf *b, const void *p, size_t n);
/* buf_free - release the storage; @b may be reused after buf_free */
void buf_free(struct buf *b);

static inline void buf_reset(struct buf *b)
{
	b->len = 0;
}

static inline void put_u16le(uint8_t *p, uint16_t v)
{
	p[0] = v;
	p[1] = v >> 8;
}

static inline void put_u32le(uint8_t *p, uint32_t v)
{
	p[0] = v;
	p[1] = v >> 8;
	p[2] = v >> 16;
	p[3] = v >> 24;
}

static inline void put_u64le(uint8_t *p, uint64_t v)
{
	put_u32le(p, (uint32_t)v);
	put_u32le(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t get_u16le(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t get_u32le(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static inline uint64_t get_u64le(const uint8_t *p)
{
	return (uint64_t)get_u32le(p) | (uint64_t)get_u32le(p + 4) << 32;
}

static inline void put_u16be(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static inline void put_u32be(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static inline uint16_t get_u16be(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t get_u32be(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

#endif
