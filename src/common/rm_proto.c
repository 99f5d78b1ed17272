/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm_proto.c - resource manager wire codec (see rm_proto.h)
 *
 * Every decoder checks a length before each read; none of them trusts a
 * length field from the wire further than the bytes actually present.
 */
#include "rm_proto.h"

#include <errno.h>
#include <string.h>

#include "util.h"

struct rm_str rm_str_from(const char *s)
{
	struct rm_str r = {s, s ? (uint32_t)strlen(s) : 0};

	return r;
}

bool rm_str_eq(struct rm_str a, struct rm_str b)
{
	return a.len == b.len &&
	       (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

int rm_hdr_decode(const uint8_t *p, size_t len, size_t max_payload,
		  struct rm_hdr *h)
{
	if (len < RM_HDR_SIZE)
		return 0;
	h->magic = get_u32le(p);
	h->version = get_u16le(p + 4);
	h->type = get_u16le(p + 6);
	h->payload_len = get_u32le(p + 8);
	if (h->magic != RM_MAGIC || h->version != RM_VERSION)
		return -EPROTO;
	if (h->payload_len > max_payload)
		return -EMSGSIZE;
	return RM_HDR_SIZE;
}

void rm_hdr_put(uint8_t *p, uint16_t type, uint32_t payload_len)
{
	put_u32le(p, RM_MAGIC);
	put_u16le(p + 4, RM_VERSION);
	put_u16le(p + 6, type);
	put_u32le(p + 8, payload_len);
}

static void get_handle(const uint8_t *p, struct rm_handle *h)
{
	h->region_id = get_u64le(p);
	h->offset = get_u64le(p + 8);
	h->length = get_u64le(p + 16);
	h->auth_token = get_u64le(p + 24);
}

static void put_handle(uint8_t *p, const struct rm_handle *h)
{
	put_u64le(p, h->region_id);
	put_u64le(p + 8, h->offset);
	put_u64le(p + 16, h->length);
	put_u64le(p + 24, h->auth_token);
}

/*
 * Parse an optional client_id field at @off.  Upstream's acceptance rule:
 * present only if >= 3 bytes remain, 1 <= id_len < 128, the bytes fit and
 * hold no NUL.  Return: the offset just past the field, or 0 if absent.
 */
static size_t get_client_id(const uint8_t *p, size_t len, size_t off,
			    struct rm_str *id)
{
	uint16_t n;

	id->ptr = NULL;
	id->len = 0;
	if (off > len || len - off < 3)
		return 0;
	n = get_u16le(p + off);
	if (n < 1 || n > RM_CLIENT_ID_MAX || (size_t)n > len - off - 2)
		return 0;
	/* kept (region owners, the WAL), logged, compared: text only */
	if (memchr(p + off + 2, '\0', n) || !utf8_valid(p + off + 2, n))
		return 0;
	id->ptr = (const char *)p + off + 2;
	id->len = n;
	return off + 2 + n;
}

static uint64_t get_request_id(const uint8_t *p, size_t len, size_t off)
{
	if (off == 0 || off > len || len - off < 8)
		return 0;
	return get_u64le(p + off);
}

int rm_decode_alloc_req(const uint8_t *p, size_t len, struct rm_alloc_req *m,
			const char **why)
{
	uint32_t plen;
	size_t off;

	if (len < 16) {
		*why = "bad alloc req";
		return -EPROTO;
	}
	m->size = get_u64le(p);
	plen = get_u32le(p + 8);
	if (plen > RM_PATH_MAX) {
		*why = "bad alloc req: pool path too long";
		return -EPROTO;
	}
	if (plen > len - 16) {
		*why = "bad alloc req: pool path truncated";
		return -EPROTO;
	}
	if (plen && memchr(p + 16, '\0', plen)) {
		*why = "bad alloc req: pool path contains null byte";
		return -EPROTO;
	}
	m->dax_path.ptr = plen ? (const char *)p + 16 : NULL;
	m->dax_path.len = plen;
	off = get_client_id(p, len, 16 + plen, &m->client_id);
	m->request_id = get_request_id(p, len, off);
	return 0;
}

int rm_decode_free_req(const uint8_t *p, size_t len, struct rm_free_req *m,
		       const char **why)
{
	size_t off;

	if (len < RM_HANDLE_SIZE) {
		*why = "bad free req";
		return -EPROTO;
	}
	get_handle(p, &m->handle);
	off = get_client_id(p, len, RM_HANDLE_SIZE, &m->client_id);
	m->request_id = get_request_id(p, len, off);
	return 0;
}

int rm_decode_get_access_req(const uint8_t *p, size_t len,
			     struct rm_get_access_req *m, const char **why)
{
	if (len < RM_HANDLE_SIZE) {
		*why = "bad get_access req";
		return -EPROTO;
	}
	get_handle(p, &m->handle);
	get_client_id(p, len, RM_HANDLE_SIZE, &m->client_id);
	return 0;
}

/* step u8, 3 reserved bytes, 32 bytes of data, then client_id, an
 * optional u32 hold_ms and, after it, an optional u32 write_ms */
int rm_decode_auth_req(const uint8_t *p, size_t len, struct rm_auth_req *m,
		       const char **why)
{
	size_t off;

	if (len < 4 + RM_AUTH_NONCE_LEN || (p[0] != 1 && p[0] != 2)) {
		*why = "bad auth req";
		return -EPROTO;
	}
	m->step = p[0];
	m->reader = p[1] == 1;
	memcpy(m->data, p + 4, RM_AUTH_NONCE_LEN);
	off = get_client_id(p, len, 4 + RM_AUTH_NONCE_LEN, &m->client_id);
	m->hold_ms = off && len - off >= 4 ? get_u32le(p + off) : 0;
	m->write_ms = off && len - off >= 8 ? get_u32le(p + off + 4) : 0;
	return 0;
}

int rm_decode_release_req(const uint8_t *p, size_t len, struct rm_str *id,
			  const char **why)
{
	if (!get_client_id(p, len, 0, id)) {
		*why = "missing client_id";
		return -EPROTO;
	}
	return 0;
}

/* Read a string with a @w-byte (2 or 4) little-endian length at *off;
 * advance *off. */
static int get_strw(const uint8_t *p, size_t len, size_t *off, size_t w,
		    struct rm_str *s)
{
	uint32_t n;

	if (*off > len || len - *off < w)
		return -EPROTO;
	n = w == 2 ? get_u16le(p + *off) : get_u32le(p + *off);
	*off += w;
	if (n > len - *off)
		return -EPROTO;
	s->ptr = n ? (const char *)p + *off : NULL;
	s->len = n;
	*off += n;
	return 0;
}

#define get_str16(p, len, off, s) get_strw(p, len, off, 2, s)
#define get_str32(p, len, off, s) get_strw(p, len, off, 4, s)

int rm_decode_alloc_resp(const uint8_t *p, size_t len, struct rm_alloc_resp *m)
{
	size_t off = 48;

	if (len < 54)
		return -EPROTO;
	m->status = (int32_t)get_u32le(p);
	m->access_type = get_u32le(p + 4);
	get_handle(p + 8, &m->handle);
	m->requested_size = get_u64le(p + 40);
	if (get_str32(p, len, &off, &m->path) < 0)
		return -EPROTO;
	return get_str16(p, len, &off, &m->uuid);
}

int rm_decode_free_resp(const uint8_t *p, size_t len, int32_t *status)
{
	if (len < 4)
		return -EPROTO;
	*status = (int32_t)get_u32le(p);
	return 0;
}

int rm_decode_get_access_resp(const uint8_t *p, size_t len,
			      struct rm_get_access_resp *m)
{
	size_t off = 4;

	if (len < 26)
		return -EPROTO;
	m->status = (int32_t)get_u32le(p);
	if (get_str32(p, len, &off, &m->path) < 0)
		return -EPROTO;
	if (len - off < 16)
		return -EPROTO;
	m->offset = get_u64le(p + off);
	m->length = get_u64le(p + off + 8);
	off += 16;
	return get_str16(p, len, &off, &m->uuid);
}

int rm_decode_stats_resp(const uint8_t *p, size_t len, struct rm_stats_resp *m)
{
	if (len < 4)
		return -EPROTO;
	m->num_pools = get_u32le(p);
	m->records = p + 4;
	m->records_len = len - 4;
	return 0;
}

int rm_stats_next(const struct rm_stats_resp *s, size_t *cursor,
		  struct rm_pool_stat *out)
{
	const uint8_t *p = s->records + *cursor;
	size_t left = s->records_len - *cursor;
	uint32_t n;

	if (*cursor >= s->records_len)
		return 0;
	if (left < 32)
		return -EPROTO;
	n = get_u32le(p);
	if (n > left - 32)
		return -EPROTO;
	out->dax_type = get_u32le(p + 4);
	out->total_size = get_u64le(p + 8);
	out->free_size = get_u64le(p + 16);
	out->align_bytes = get_u64le(p + 24);
	out->path.ptr = n ? (const char *)p + 32 : NULL;
	out->path.len = n;
	*cursor += 32 + n;
	return 1;
}

int rm_decode_counters_resp(const uint8_t *p, size_t len,
			    struct rm_counters_resp *m)
{
	if (len < 4)
		return -EPROTO;
	m->num = get_u32le(p);
	m->records = p + 4;
	m->records_len = len - 4;
	return 0;
}

int rm_decode_owners_resp(const uint8_t *p, size_t len,
			  struct rm_owners_resp *m)
{
	if (len < 8)
		return -EPROTO;
	m->num = get_u32le(p);
	m->omitted = get_u32le(p + 4);
	m->records = p + 8;
	m->records_len = len - 8;
	return 0;
}

int rm_owners_next(const struct rm_owners_resp *s, size_t *cursor,
		   struct rm_owner *out)
{
	const uint8_t *p = s->records + *cursor;
	size_t left = s->records_len - *cursor;
	uint16_t n;

	if (*cursor >= s->records_len)
		return 0;
	if (left < 2)
		return -EPROTO;
	n = get_u16le(p);
	if (n == 0 || n > RM_CLIENT_ID_MAX ||
	    left - 2 < (size_t)n + RM_OWNER_FIXED || memchr(p + 2, '\0', n) ||
	    !utf8_valid(p + 2, n))
		return -EPROTO;
	out->id.ptr = (const char *)p + 2;
	out->id.len = n;
	p += 2 + n;
	out->regions = get_u32le(p);
	out->connections = get_u32le(p + 4);
	out->bytes = get_u64le(p + 8);
	out->hold_ms = get_u32le(p + 16);
	out->away_since = get_u64le(p + 24);
	*cursor += 2 + (size_t)n + RM_OWNER_FIXED;
	return 1;
}

int rm_decode_release_resp(const uint8_t *p, size_t len,
			   struct rm_release_resp *m)
{
	if (len < 16)
		return -EPROTO;
	m->status = (int32_t)get_u32le(p);
	m->regions = get_u32le(p + 4);
	m->bytes = get_u64le(p + 8);
	return 0;
}

int rm_counters_next(const struct rm_counters_resp *s, size_t *cursor,
		     struct rm_counter *out)
{
	const uint8_t *p = s->records + *cursor;
	size_t left = s->records_len - *cursor;
	uint8_t n;

	if (*cursor >= s->records_len)
		return 0;
	n = p[0];
	if (n == 0 || n > RM_COUNTER_NAME_MAX || left < 1 + (size_t)n + 8)
		return -EPROTO;
	out->name.ptr = (const char *)p + 1;
	out->name.len = n;
	out->value = get_u64le(p + 1 + n);
	*cursor += 1 + (size_t)n + 8;
	return 1;
}

int rm_decode_error_resp(const uint8_t *p, size_t len, struct rm_error_resp *m)
{
	size_t off = 4;

	if (len < 8)
		return -EPROTO;
	m->status = (int32_t)get_u32le(p);
	return get_str32(p, len, &off, &m->msg);
}

int rm_decode_auth_resp(const uint8_t *p, size_t len, struct rm_auth_resp *m)
{
	if (len < 4 + RM_AUTH_NONCE_LEN + RM_AUTH_MAC_LEN)
		return -EPROTO;
	m->status = (int32_t)get_u32le(p);
	memcpy(m->nonce, p + 4, RM_AUTH_NONCE_LEN);
	memcpy(m->proof, p + 4 + RM_AUTH_NONCE_LEN, RM_AUTH_MAC_LEN);
	return 0;
}

/*
 * Encoding.  Each encoder reserves the whole message first, so a failure
 * leaves @b as it was.
 */
static uint8_t *msg_begin(struct buf *b, uint16_t type, size_t payload)
{
	uint8_t *p;

	if (payload > UINT32_MAX || buf_reserve(b, RM_HDR_SIZE + payload) < 0)
		return NULL;
	p = b->data + b->len;
	rm_hdr_put(p, type, (uint32_t)payload);
	b->len += RM_HDR_SIZE + payload;
	return p + RM_HDR_SIZE;
}

static size_t client_id_size(struct rm_str id)
{
	return id.len ? 2 + id.len : 0;
}

static size_t put_client_id(uint8_t *p, struct rm_str id)
{
	if (!id.len)
		return 0;
	put_u16le(p, (uint16_t)id.len);
	memcpy(p + 2, id.ptr, id.len);
	return 2 + id.len;
}

int rm_encode_alloc_req(struct buf *b, const struct rm_alloc_req *m)
{
	size_t n = 16 + m->dax_path.len + client_id_size(m->client_id) +
		   (m->request_id ? 8 : 0);
	uint8_t *p;
	size_t off;

	if (m->dax_path.len > RM_PATH_MAX ||
	    m->client_id.len > RM_CLIENT_ID_MAX)
		return -EINVAL;
	if (m->request_id && !m->client_id.len)
		return -EINVAL; /* request_id rides after the client id */
	p = msg_begin(b, RM_ALLOC_REQ, n);
	if (!p)
		return -ENOMEM;
	put_u64le(p, m->size);
	put_u32le(p + 8, m->dax_path.len);
	put_u32le(p + 12, 0);
	if (m->dax_path.len)
		memcpy(p + 16, m->dax_path.ptr, m->dax_path.len);
	off = 16 + m->dax_path.len;
	off += put_client_id(p + off, m->client_id);
	if (m->request_id)
		put_u64le(p + off, m->request_id);
	return 0;
}

int rm_encode_free_req(struct buf *b, const struct rm_free_req *m)
{
	size_t n = RM_HANDLE_SIZE + client_id_size(m->client_id) +
		   (m->request_id ? 8 : 0);
	uint8_t *p;
	size_t off;

	if (m->client_id.len > RM_CLIENT_ID_MAX ||
	    (m->request_id && !m->client_id.len))
		return -EINVAL;
	p = msg_begin(b, RM_FREE_REQ, n);
	if (!p)
		return -ENOMEM;
	put_handle(p, &m->handle);
	off = RM_HANDLE_SIZE + put_client_id(p + RM_HANDLE_SIZE, m->client_id);
	if (m->request_id)
		put_u64le(p + off, m->request_id);
	return 0;
}

int rm_encode_stats_req(struct buf *b)
{
	return msg_begin(b, RM_STATS_REQ, 0) ? 0 : -ENOMEM;
}

int rm_encode_get_access_req(struct buf *b, const struct rm_get_access_req *m)
{
	size_t n = RM_HANDLE_SIZE + client_id_size(m->client_id);
	uint8_t *p;

	if (m->client_id.len > RM_CLIENT_ID_MAX)
		return -EINVAL;
	p = msg_begin(b, RM_GET_ACCESS_REQ, n);
	if (!p)
		return -ENOMEM;
	put_handle(p, &m->handle);
	put_client_id(p + RM_HANDLE_SIZE, m->client_id);
	return 0;
}

int rm_encode_alloc_resp(struct buf *b, const struct rm_alloc_resp *m)
{
	size_t n = 54 + m->path.len + m->uuid.len;
	uint8_t *p;

	if (m->uuid.len > UINT16_MAX)
		return -EINVAL;
	p = msg_begin(b, RM_ALLOC_RESP, n);
	if (!p)
		return -ENOMEM;
	put_u32le(p, (uint32_t)m->status);
	put_u32le(p + 4, m->access_type);
	put_handle(p + 8, &m->handle);
	put_u64le(p + 40, m->requested_size);
	put_u32le(p + 48, m->path.len);
	if (m->path.len)
		memcpy(p + 52, m->path.ptr, m->path.len);
	put_u16le(p + 52 + m->path.len, (uint16_t)m->uuid.len);
	if (m->uuid.len)
		memcpy(p + 54 + m->path.len, m->uuid.ptr, m->uuid.len);
	return 0;
}

int rm_encode_auth_req(struct buf *b, const struct rm_auth_req *m)
{
	size_t n = 4 + RM_AUTH_NONCE_LEN + client_id_size(m->client_id);
	bool hold = m->client_id.len && (m->hold_ms || m->write_ms);
	bool write = hold && m->write_ms;
	uint8_t *p;

	if (m->client_id.len > RM_CLIENT_ID_MAX)
		return -EINVAL;
	p = msg_begin(b, RM_AUTH_REQ, n + (hold ? 4 : 0) + (write ? 4 : 0));
	if (!p)
		return -ENOMEM;
	p[0] = m->step;
	p[1] = m->reader ? 1 : 0;
	p[2] = p[3] = 0;
	memcpy(p + 4, m->data, RM_AUTH_NONCE_LEN);
	put_client_id(p + 4 + RM_AUTH_NONCE_LEN, m->client_id);
	if (hold)
		put_u32le(p + n, m->hold_ms);
	if (write)
		put_u32le(p + n + 4, m->write_ms);
	return 0;
}

int rm_encode_auth_resp(struct buf *b, const struct rm_auth_resp *m)
{
	uint8_t *p = msg_begin(b, RM_AUTH_RESP,
			       4 + RM_AUTH_NONCE_LEN + RM_AUTH_MAC_LEN);

	if (!p)
		return -ENOMEM;
	put_u32le(p, (uint32_t)m->status);
	memcpy(p + 4, m->nonce, RM_AUTH_NONCE_LEN);
	memcpy(p + 4 + RM_AUTH_NONCE_LEN, m->proof, RM_AUTH_MAC_LEN);
	return 0;
}

int rm_encode_free_resp(struct buf *b, int32_t status)
{
	uint8_t *p = msg_begin(b, RM_FREE_RESP, 4);

	if (!p)
		return -ENOMEM;
	put_u32le(p, (uint32_t)status);
	return 0;
}

int rm_encode_get_access_resp(struct buf *b, const struct rm_get_access_resp *m)
{
	size_t n = 26 + m->path.len + m->uuid.len;
	uint8_t *p;
	size_t off;

	if (m->uuid.len > UINT16_MAX)
		return -EINVAL;
	p = msg_begin(b, RM_GET_ACCESS_RESP, n);
	if (!p)
		return -ENOMEM;
	put_u32le(p, (uint32_t)m->status);
	put_u32le(p + 4, m->path.len);
	if (m->path.len)
		memcpy(p + 8, m->path.ptr, m->path.len);
	off = 8 + m->path.len;
	put_u64le(p + off, m->offset);
	put_u64le(p + off + 8, m->length);
	put_u16le(p + off + 16, (uint16_t)m->uuid.len);
	if (m->uuid.len)
		memcpy(p + off + 18, m->uuid.ptr, m->uuid.len);
	return 0;
}

int rm_encode_stats_begin(struct buf *b, size_t *start)
{
	uint8_t *p;

	*start = b->len;
	p = msg_begin(b, RM_STATS_RESP, 4);
	if (!p)
		return -ENOMEM;
	put_u32le(p, 0);
	return 0;
}

int rm_encode_stats_add(struct buf *b, const struct rm_pool_stat *s)
{
	uint8_t *p;

	if (buf_reserve(b, 32 + s->path.len) < 0)
		return -ENOMEM;
	p = b->data + b->len;
	put_u32le(p, s->path.len);
	put_u32le(p + 4, s->dax_type);
	put_u64le(p + 8, s->total_size);
	put_u64le(p + 16, s->free_size);
	put_u64le(p + 24, s->align_bytes);
	if (s->path.len)
		memcpy(p + 32, s->path.ptr, s->path.len);
	b->len += 32 + s->path.len;
	return 0;
}

void rm_encode_stats_end(struct buf *b, size_t start, uint32_t num_pools)
{
	uint8_t *p = b->data + start;

	put_u32le(p + 8, (uint32_t)(b->len - start - RM_HDR_SIZE));
	put_u32le(p + RM_HDR_SIZE, num_pools);
}

int rm_encode_counters_req(struct buf *b)
{
	return msg_begin(b, RM_COUNTERS_REQ, 0) ? 0 : -ENOMEM;
}

int rm_encode_counters_resp(struct buf *b, const char *const *names,
			    const uint64_t *values, size_t n)
{
	size_t size = 4, i, k;
	uint8_t *p;

	for (i = 0; i < n; i++) {
		k = strlen(names[i]);
		if (k == 0 || k > RM_COUNTER_NAME_MAX)
			return -EINVAL;
		size += 1 + k + 8;
	}
	if (size > RM_MAX_PAYLOAD)
		return -EINVAL;
	p = msg_begin(b, RM_COUNTERS_RESP, size);
	if (!p)
		return -ENOMEM;
	put_u32le(p, (uint32_t)n);
	p += 4;
	for (i = 0; i < n; i++) {
		k = strlen(names[i]);
		*p = (uint8_t)k;
		memcpy(p + 1, names[i], k);
		put_u64le(p + 1 + k, values[i]);
		p += 1 + k + 8;
	}
	return 0;
}

int rm_encode_error_resp(struct buf *b, int32_t status, const char *msg)
{
	size_t n = msg ? strlen(msg) : 0;
	uint8_t *p = msg_begin(b, RM_ERROR_RESP, 8 + n);

	if (!p)
		return -ENOMEM;
	put_u32le(p, (uint32_t)status);
	put_u32le(p + 4, (uint32_t)n);
	if (n)
		memcpy(p + 8, msg, n);
	return 0;
}

int rm_encode_owners_req(struct buf *b)
{
	return msg_begin(b, RM_OWNERS_REQ, 0) ? 0 : -ENOMEM;
}

int rm_encode_owners_begin(struct buf *b, size_t *start)
{
	uint8_t *p;

	*start = b->len;
	p = msg_begin(b, RM_OWNERS_RESP, 8);
	if (!p)
		return -ENOMEM;
	put_u32le(p, 0);
	put_u32le(p + 4, 0);
	return 0;
}

int rm_encode_owners_add(struct buf *b, const struct rm_owner *o)
{
	size_t n = 2 + o->id.len + RM_OWNER_FIXED;
	uint8_t *p;

	if (!o->id.len || o->id.len > RM_CLIENT_ID_MAX)
		return -EINVAL;
	if (buf_reserve(b, n) < 0)
		return -ENOMEM;
	p = b->data + b->len;
	put_u16le(p, (uint16_t)o->id.len);
	memcpy(p + 2, o->id.ptr, o->id.len);
	p += 2 + o->id.len;
	put_u32le(p, o->regions);
	put_u32le(p + 4, o->connections);
	put_u64le(p + 8, o->bytes);
	put_u32le(p + 16, o->hold_ms);
	put_u32le(p + 20, 0); /* reserved */
	put_u64le(p + 24, o->away_since);
	b->len += n;
	return 0;
}

void rm_encode_owners_end(struct buf *b, size_t start, uint32_t num,
			  uint32_t omitted)
{
	uint8_t *p = b->data + start;

	put_u32le(p + 8, (uint32_t)(b->len - start - RM_HDR_SIZE));
	put_u32le(p + RM_HDR_SIZE, num);
	put_u32le(p + RM_HDR_SIZE + 4, omitted);
}

int rm_encode_release_req(struct buf *b, struct rm_str client_id)
{
	uint8_t *p;

	if (!client_id.len || client_id.len > RM_CLIENT_ID_MAX)
		return -EINVAL;
	p = msg_begin(b, RM_RELEASE_REQ, client_id_size(client_id));
	if (!p)
		return -ENOMEM;
	put_client_id(p, client_id);
	return 0;
}

int rm_encode_release_resp(struct buf *b, const struct rm_release_resp *m)
{
	uint8_t *p = msg_begin(b, RM_RELEASE_RESP, 16);

	if (!p)
		return -ENOMEM;
	put_u32le(p, (uint32_t)m->status);
	put_u32le(p + 4, m->regions);
	put_u64le(p + 8, m->bytes);
	return 0;
}
