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

/* @w's bytes into @out (@cap); Return: their length (0: they do not fit,
 * which a caller's fixed sizes rule out) */
static size_t take(struct buf *b, int err, uint8_t *out, size_t cap)
{
	size_t n = !err && b->len <= cap ? b->len : 0;

	if (n)
		memcpy(out, b->data, n);
	buf_free(b);
	return n;
}

int agent_am_req_decode(const void *p, size_t n, struct agent_am_req *r)
{
	enum {
		F_SESSION = 1,
		F_REGION = 2,
		F_OFFSET = 4,
		F_LENGTH = 8,
		F_SEQ = 16
	};
	unsigned seen = 0;
	struct mp_val m, k, v;
	struct mp_rd rd;
	uint32_t i;
	int rc;

	memset(r, 0, sizeof(*r));
	if (!p || n > AGENT_AM_REQ_MAX)
		return -EPROTO;
	mp_rd_init(&rd, p, n);
	if (mp_read(&rd, &m) < 0 || m.type != MP_MAP)
		return -EPROTO;
	for (i = 0; i < m.n; i++) {
		if (mp_read(&rd, &k) < 0 || mp_skip_rest(&rd, &k) < 0)
			return -EPROTO;
		rc = 0;
		if (key_is(&k, "session")) {
			if (mp_read(&rd, &v) < 0 || v.type != MP_BIN ||
			    v.len != AGENT_SESSION_LEN)
				return -EPROTO;
			memcpy(r->session, v.ptr, AGENT_SESSION_LEN);
			seen |= F_SESSION;
		} else if (key_is(&k, "region_id")) {
			rc = read_uint(&rd, &r->region_id);
			seen |= F_REGION;
		} else if (key_is(&k, "offset")) {
			rc = read_uint(&rd, &r->offset);
			seen |= F_OFFSET;
		} else if (key_is(&k, "length")) {
			rc = read_uint(&rd, &r->length);
			seen |= F_LENGTH;
		} else if (key_is(&k, "seq")) {
			rc = read_uint(&rd, &r->seq);
			seen |= F_SEQ;
		} else if (mp_skip(&rd) < 0) {
			return -EPROTO;
		}
		if (rc < 0)
			return -EPROTO;
	}
	if (seen != (F_SESSION | F_REGION | F_OFFSET | F_LENGTH | F_SEQ) ||
	    !r->length || r->length > AGENT_REGION_MAX ||
	    r->offset > UINT64_MAX - r->length)
		return -EPROTO;
	return 0;
}

size_t agent_am_req_encode(const struct agent_am_req *r,
			   uint8_t out[AGENT_AM_REQ_MAX])
{
	struct buf b = {0};
	struct mp_wr w = {&b, 0};

	mp_put_map(&w, 5);
	mp_put_key(&w, "session");
	mp_put_bin(&w, r->session, AGENT_SESSION_LEN);
	mp_put_key(&w, "region_id");
	mp_put_uint(&w, r->region_id);
	mp_put_key(&w, "offset");
	mp_put_uint(&w, r->offset);
	mp_put_key(&w, "length");
	mp_put_uint(&w, r->length);
	mp_put_key(&w, "seq");
	mp_put_uint(&w, r->seq);
	return take(&b, w.err, out, AGENT_AM_REQ_MAX);
}

int agent_am_rep_decode(const void *p, size_t n, struct agent_am_rep *r)
{
	bool have_seq = false;
	struct mp_val m, k, v;
	struct mp_rd rd;
	uint32_t i;

	memset(r, 0, sizeof(*r));
	if (!p || n > AGENT_AM_REP_MAX)
		return -EPROTO;
	mp_rd_init(&rd, p, n);
	if (mp_read(&rd, &m) < 0 || m.type != MP_MAP)
		return -EPROTO;
	for (i = 0; i < m.n; i++) {
		if (mp_read(&rd, &k) < 0 || mp_skip_rest(&rd, &k) < 0)
			return -EPROTO;
		if (key_is(&k, "seq")) {
			if (read_uint(&rd, &r->seq) < 0)
				return -EPROTO;
			have_seq = true;
		} else if (key_is(&k, "status")) {
			if (mp_read(&rd, &v) < 0 ||
			    !(v.type == MP_NINT ||
			      (v.type == MP_UINT && !v.u)) ||
			    (v.type == MP_NINT && v.i < INT32_MIN))
				return -EPROTO;
			r->status = v.type == MP_NINT ? (int32_t)v.i : 0;
		} else if (mp_skip(&rd) < 0) {
			return -EPROTO;
		}
	}
	return have_seq ? 0 : -EPROTO;
}

size_t agent_am_rep_encode(const struct agent_am_rep *r,
			   uint8_t out[AGENT_AM_REP_MAX])
{
	struct buf b = {0};
	struct mp_wr w = {&b, 0};

	mp_put_map(&w, 2);
	mp_put_key(&w, "seq");
	mp_put_uint(&w, r->seq);
	mp_put_key(&w, "status");
	mp_put_int(&w, r->status);
	return take(&b, w.err, out, AGENT_AM_REP_MAX);
}
