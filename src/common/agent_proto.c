/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agent_proto.c - maru-agent's payloads (agent_proto.h): encoders with
 * msgpack-c's packer, decoders over the project's reader (msgpk.h)
 *
 * Both decoders walk one map: each key is read, compared with the names
 * they know, and its value read or skipped whole (mp_skip: any depth,
 * no recursion).  Duplicate keys: the last one wins, as Python's msgpack
 * does.
 */
#include "agent_proto.h"

#include <errno.h>
#include <string.h>

static bool key_is(const struct mp_val *k, const char *name)
{
	size_t n = strlen(name);

	return k->type == MP_STR && k->len == n && !memcmp(k->ptr, name, n);
}

/* an unsigned integer value into @out; Return: 0 or -EPROTO */
static int read_uint(struct mp_rd *r, uint64_t *out)
{
	struct mp_val v;

	if (mp_read(r, &v) < 0 || v.type != MP_UINT)
		return -EPROTO;
	*out = v.u;
	return 0;
}

int agent_decode_access(const uint8_t *p, size_t n, struct agent_access_req *r,
			const char **why)
{
	enum { F_REGION = 1, F_OFFSET = 2, F_LENGTH = 4, F_TOKEN = 8 };
	unsigned seen = 0;
	struct mp_val m, k;
	struct mp_rd rd;
	uint32_t i;
	int rc;

	memset(r, 0, sizeof(*r));
	*why = "not a MessagePack map";
	mp_rd_init(&rd, p, n);
	if (mp_read(&rd, &m) < 0 || m.type != MP_MAP)
		return -EPROTO;
	for (i = 0; i < m.n; i++) {
		*why = "malformed MessagePack";
		if (mp_read(&rd, &k) < 0)
			return -EPROTO;
		rc = 0;
		if (key_is(&k, "region_id")) {
			rc = read_uint(&rd, &r->region_id);
			seen |= F_REGION;
		} else if (key_is(&k, "offset")) {
			rc = read_uint(&rd, &r->offset);
			seen |= F_OFFSET;
		} else if (key_is(&k, "length")) {
			rc = read_uint(&rd, &r->length);
			seen |= F_LENGTH;
		} else if (key_is(&k, "auth_token")) {
			rc = read_uint(&rd, &r->token);
			seen |= F_TOKEN;
		} else if (mp_skip_rest(&rd, &k) < 0 || mp_skip(&rd) < 0) {
			return -EPROTO;
		}
		if (rc < 0) {
			*why = "region_id, offset, length and auth_token must "
			       "be unsigned integers";
			return -EPROTO;
		}
	}
	if (seen != (F_REGION | F_OFFSET | F_LENGTH | F_TOKEN)) {
		*why = "ACCESS needs region_id, offset, length and auth_token";
		return -EPROTO;
	}
	if (!r->length || r->length > AGENT_REGION_MAX) {
		*why = "region length must be from 1 byte to 16 TiB";
		return -EPROTO;
	}
	if (r->offset > UINT64_MAX - r->length) {
		*why = "offset + length overflows";
		return -EPROTO;
	}
	*why = NULL;
	return 0;
}

void agent_encode_access(struct mp_wr *w, const struct agent_access_req *r)
{
	mp_put_map(w, 4);
	mp_put_key(w, "region_id");
	mp_put_uint(w, r->region_id);
	mp_put_key(w, "offset");
	mp_put_uint(w, r->offset);
	mp_put_key(w, "length");
	mp_put_uint(w, r->length);
	mp_put_key(w, "auth_token");
	mp_put_uint(w, r->token);
}

int agent_decode_reply(const uint8_t *p, size_t n, struct agent_reply *r)
{
	struct mp_val m, k, v;
	struct mp_rd rd;
	uint32_t i;
	int s;

	memset(r, 0, sizeof(*r));
	mp_rd_init(&rd, p, n);
	if (mp_read(&rd, &m) < 0 || m.type != MP_MAP)
		return -EPROTO;
	for (i = 0; i < m.n; i++) {
		if (mp_read(&rd, &k) < 0 || mp_skip_rest(&rd, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "success")) {
			if (mp_read(&rd, &v) < 0 || v.type != MP_BOOL)
				return -EPROTO;
			r->success = v.b;
			continue;
		}
		if (key_is(&k, "error")) {
			if (mp_read(&rd, &v) < 0 || v.type != MP_STR)
				return -EPROTO;
			r->error = (const char *)v.ptr;
			r->error_len = v.len;
			continue;
		}
		if (key_is(&k, "session")) {
			if (mp_read(&rd, &v) < 0 || v.type != MP_BIN ||
			    v.len != AGENT_SESSION_LEN)
				return -EPROTO;
			r->session = v.ptr;
			continue;
		}
		if (key_is(&k, "worker")) {
			if (mp_read(&rd, &v) < 0 || v.type != MP_BIN ||
			    v.len > AGENT_BLOB_MAX)
				return -EPROTO;
			r->blob = v.ptr;
			r->blob_len = v.len;
			continue;
		}
		if (key_is(&k, "addr")) {
			if (read_uint(&rd, &r->addr) < 0)
				return -EPROTO;
			continue;
		}
		if (key_is(&k, "length")) {
			if (read_uint(&rd, &r->length) < 0)
				return -EPROTO;
			continue;
		}
		for (s = 0; s < AGENT_ST_N; s++)
			if (key_is(&k, agent_stat_name(s)))
				break;
		if (s < AGENT_ST_N) {
			if (read_uint(&rd, &r->stats[s]) < 0)
				return -EPROTO;
			r->has_stats = true;
			continue;
		}
		if (mp_skip(&rd) < 0)
			return -EPROTO;
	}
	return 0;
}

int agent_decode_hello(const uint8_t *p, size_t n, const uint8_t **supersede)
{
	struct mp_val m, k, v;
	struct mp_rd rd;
	uint32_t i;

	*supersede = NULL;
	mp_rd_init(&rd, p, n);
	if (mp_read(&rd, &m) < 0 || m.type != MP_MAP)
		return -EPROTO;
	for (i = 0; i < m.n; i++) {
		if (mp_read(&rd, &k) < 0 || mp_skip_rest(&rd, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "supersede") || key_is(&k, "session")) {
			if (mp_read(&rd, &v) < 0 || v.type != MP_BIN ||
			    v.len != AGENT_SESSION_LEN)
				return -EPROTO;
			*supersede = v.ptr;
		} else if (mp_skip(&rd) < 0) {
			return -EPROTO;
		}
	}
	return 0;
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

int agent_am_req_decode(const void *p, size_t n, struct agent_am_req *r)
{
	const uint8_t *b = p;

	if (n != AGENT_AM_REQ_LEN || !p)
		return -EPROTO;
	memcpy(r->session, b, AGENT_SESSION_LEN);
	r->region_id = get_le64(b + 16);
	r->offset = get_le64(b + 24);
	r->length = get_le64(b + 32);
	r->seq = get_le64(b + 40);
	if (!r->length || r->length > AGENT_REGION_MAX ||
	    r->offset > UINT64_MAX - r->length)
		return -EPROTO;
	return 0;
}

void agent_am_req_encode(const struct agent_am_req *r,
			 uint8_t out[AGENT_AM_REQ_LEN])
{
	memcpy(out, r->session, AGENT_SESSION_LEN);
	put_le64(out + 16, r->region_id);
	put_le64(out + 24, r->offset);
	put_le64(out + 32, r->length);
	put_le64(out + 40, r->seq);
}

int agent_am_rep_decode(const void *p, size_t n, struct agent_am_rep *r)
{
	const uint8_t *b = p;
	uint64_t st;

	if (n != AGENT_AM_REP_LEN || !p)
		return -EPROTO;
	r->seq = get_le64(b);
	st = get_le64(b + 8) & 0xffffffffu;
	r->status = (int32_t)(uint32_t)st;
	if (r->status > 0)
		return -EPROTO;
	return 0;
}

void agent_am_rep_encode(const struct agent_am_rep *r,
			 uint8_t out[AGENT_AM_REP_LEN])
{
	put_le64(out, r->seq);
	put_le64(out + 8, (uint32_t)r->status);
}
