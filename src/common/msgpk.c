/* SPDX-License-Identifier: Apache-2.0 */
/*
 * msgpk.c - MessagePack reader and writer (see msgpk.h)
 *
 * The format: https://github.com/msgpack/msgpack/blob/master/spec.md.
 * One table-free switch on the type byte; every multi-byte length is
 * checked against the remaining input before anything is read.
 */
#include "msgpk.h"

static inline uint16_t be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t be64(const uint8_t *p)
{
	return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* Take @n bytes of payload after a header of @hdr bytes. */
static int take(struct mp_rd *r, struct mp_val *v, size_t hdr, uint32_t n,
		uint8_t type)
{
	size_t left = (size_t)(r->end - r->p);

	if (left < hdr || left - hdr < n)
		return -EPROTO;
	v->type = type;
	v->ptr = r->p + hdr;
	v->len = n;
	r->p += hdr + n;
	return 0;
}

static void set_int(struct mp_val *v, int64_t i)
{
	if (i >= 0) {
		v->type = MP_UINT;
		v->u = (uint64_t)i;
	} else {
		v->type = MP_NINT;
		v->i = i;
	}
}

int mp_read(struct mp_rd *r, struct mp_val *v)
{
	size_t left = (size_t)(r->end - r->p);
	const uint8_t *p = r->p;
	uint8_t c;
	size_t need;

	if (left < 1)
		return -EPROTO;
	c = p[0];
	if (c <= 0x7f) {
		v->type = MP_UINT;
		v->u = c;
		r->p++;
		return 0;
	}
	if (c >= 0xe0) {
		v->type = MP_NINT;
		v->i = (int8_t)c;
		r->p++;
		return 0;
	}
	if ((c & 0xf0) == 0x80) {
		v->type = MP_MAP;
		v->n = c & 0x0f;
		r->p++;
		return 0;
	}
	if ((c & 0xf0) == 0x90) {
		v->type = MP_ARRAY;
		v->n = c & 0x0f;
		r->p++;
		return 0;
	}
	if ((c & 0xe0) == 0xa0)
		return take(r, v, 1, c & 0x1f, MP_STR);

	/* every header size per type byte; payload lengths checked by take() */
	switch (c) {
	case 0xc0:
	case 0xc1:
	case 0xc2:
	case 0xc3:
		need = 1;
		break;
	case 0xc4:
	case 0xcc:
	case 0xd0:
	case 0xd9:
		need = 2;
		break;
	case 0xc5:
	case 0xc7:
	case 0xcd:
	case 0xd1:
	case 0xda:
	case 0xdc:
	case 0xde:
	case 0xd4:
	case 0xd5:
	case 0xd6:
	case 0xd7:
	case 0xd8:
		need = 3;
		break;
	case 0xc8:
		need = 4;
		break;
	case 0xc6:
	case 0xca:
	case 0xce:
	case 0xd2:
	case 0xdb:
	case 0xdd:
	case 0xdf:
		need = 5;
		break;
	case 0xc9:
		need = 6;
		break;
	default: /* 0xcb, 0xcf, 0xd3 */
		need = 9;
		break;
	}
	if (left < need)
		return -EPROTO;

	switch (c) {
	case 0xc0:
		v->type = MP_NIL;
		r->p++;
		return 0;
	case 0xc2:
	case 0xc3:
		v->type = MP_BOOL;
		v->b = c == 0xc3;
		r->p++;
		return 0;
	case 0xc4:
		return take(r, v, 2, p[1], MP_BIN);
	case 0xc5:
		return take(r, v, 3, be16(p + 1), MP_BIN);
	case 0xc6:
		return take(r, v, 5, be32(p + 1), MP_BIN);
	case 0xc7:
		return take(r, v, 3, p[1], MP_EXT); /* len, type */
	case 0xc8:
		return take(r, v, 4, be16(p + 1), MP_EXT);
	case 0xc9:
		return take(r, v, 6, be32(p + 1), MP_EXT);
	case 0xca: {
		uint32_t bits = be32(p + 1);
		float f;

		memcpy(&f, &bits, 4);
		v->type = MP_FLOAT;
		v->f = f;
		r->p += 5;
		return 0;
	}
	case 0xcb: {
		uint64_t bits = be64(p + 1);

		memcpy(&v->f, &bits, 8);
		v->type = MP_FLOAT;
		r->p += 9;
		return 0;
	}
	case 0xcc:
		v->type = MP_UINT;
		v->u = p[1];
		r->p += 2;
		return 0;
	case 0xcd:
		v->type = MP_UINT;
		v->u = be16(p + 1);
		r->p += 3;
		return 0;
	case 0xce:
		v->type = MP_UINT;
		v->u = be32(p + 1);
		r->p += 5;
		return 0;
	case 0xcf:
		v->type = MP_UINT;
		v->u = be64(p + 1);
		r->p += 9;
		return 0;
	case 0xd0:
		set_int(v, (int8_t)p[1]);
		r->p += 2;
		return 0;
	case 0xd1:
		set_int(v, (int16_t)be16(p + 1));
		r->p += 3;
		return 0;
	case 0xd2:
		set_int(v, (int32_t)be32(p + 1));
		r->p += 5;
		return 0;
	case 0xd3:
		set_int(v, (int64_t)be64(p + 1));
		r->p += 9;
		return 0;
	case 0xd4: /* fixext 1, 2, 4, 8, 16: type byte + data */
		return take(r, v, 2, 1, MP_EXT);
	case 0xd5:
		return take(r, v, 2, 2, MP_EXT);
	case 0xd6:
		return take(r, v, 2, 4, MP_EXT);
	case 0xd7:
		return take(r, v, 2, 8, MP_EXT);
	case 0xd8:
		return take(r, v, 2, 16, MP_EXT);
	case 0xd9:
		return take(r, v, 2, p[1], MP_STR);
	case 0xda:
		return take(r, v, 3, be16(p + 1), MP_STR);
	case 0xdb:
		return take(r, v, 5, be32(p + 1), MP_STR);
	case 0xdc:
		v->type = MP_ARRAY;
		v->n = be16(p + 1);
		r->p += 3;
		return 0;
	case 0xdd:
		v->type = MP_ARRAY;
		v->n = be32(p + 1);
		r->p += 5;
		return 0;
	case 0xde:
		v->type = MP_MAP;
		v->n = be16(p + 1);
		r->p += 3;
		return 0;
	case 0xdf:
		v->type = MP_MAP;
		v->n = be32(p + 1);
		r->p += 5;
		return 0;
	default: /* 0xc1: never used */
		return -EPROTO;
	}
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

void mp_put_int(struct mp_wr *w, int64_t v)
{
	uint8_t *p;

	if (v >= 0) {
		mp_put_uint(w, (uint64_t)v);
	} else if (v >= -32) {
		if ((p = mp_room(w, 1)))
			p[0] = (uint8_t)(int8_t)v;
	} else if (v >= INT8_MIN) {
		if ((p = mp_room(w, 2))) {
			p[0] = 0xd0;
			p[1] = (uint8_t)(int8_t)v;
		}
	} else if (v >= INT16_MIN) {
		if ((p = mp_room(w, 3))) {
			p[0] = 0xd1;
			mp_be16(p + 1, (uint16_t)(int16_t)v);
		}
	} else if (v >= INT32_MIN) {
		if ((p = mp_room(w, 5))) {
			p[0] = 0xd2;
			mp_be32(p + 1, (uint32_t)(int32_t)v);
		}
	} else if ((p = mp_room(w, 9))) {
		p[0] = 0xd3;
		mp_be64(p + 1, (uint64_t)v);
	}
}

void mp_put_float(struct mp_wr *w, double v)
{
	uint8_t *p = mp_room(w, 9);
	uint64_t bits;

	if (!p)
		return;
	memcpy(&bits, &v, 8);
	p[0] = 0xcb;
	mp_be64(p + 1, bits);
}

void mp_put_str(struct mp_wr *w, const void *s, uint32_t n)
{
	uint8_t *p;

	if (n < 32) {
		if ((p = mp_room(w, 1)))
			p[0] = (uint8_t)(0xa0 | n);
	} else if (n < 256) {
		if ((p = mp_room(w, 2))) {
			p[0] = 0xd9;
			p[1] = (uint8_t)n;
		}
	} else if (n < 65536) {
		if ((p = mp_room(w, 3))) {
			p[0] = 0xda;
			mp_be16(p + 1, (uint16_t)n);
		}
	} else if ((p = mp_room(w, 5))) {
		p[0] = 0xdb;
		mp_be32(p + 1, n);
	}
	mp_put_raw(w, s, n);
}

void mp_put_bin(struct mp_wr *w, const void *s, uint32_t n)
{
	uint8_t *p;

	if (n < 256) {
		if ((p = mp_room(w, 2))) {
			p[0] = 0xc4;
			p[1] = (uint8_t)n;
		}
	} else if (n < 65536) {
		if ((p = mp_room(w, 3))) {
			p[0] = 0xc5;
			mp_be16(p + 1, (uint16_t)n);
		}
	} else if ((p = mp_room(w, 5))) {
		p[0] = 0xc6;
		mp_be32(p + 1, n);
	}
	mp_put_raw(w, s, n);
}
