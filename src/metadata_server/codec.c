/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec.c - request decoding and error replies (see codec.h)
 *
 * Each message type has a small table of the map keys it knows: name,
 * expected kind, whether required.  parse_map() walks a map once, matches
 * each key against the table (a handful of memcmp), type-checks the value
 * and records it; unknown keys are skipped whole.  Batch lists are
 * validated element by element right there and kept as a byte range.
 *
 * Type rules (docs/metadata-server.md, The codec): uint fields take any
 * non-negative integer
 * encoding; keys are str, bin or integer; optional fields accept nil as
 * "absent"; floats accept integers.  Text that is kept or echoed (ids,
 * REPORT_STATS strings, the str keys REGISTER stores) must be valid UTF-8,
 * so that nothing one client sends can make another's reply undecodable;
 * a str key that is only looked up is not checked: nothing stored can
 * match it.  Anything else is an error naming the
 * field.  The same element parser serves validation and the later
 * iteration, so the two can never disagree.
 */
#include "codec.h"

#include <stdarg.h>
#include <stdio.h>

#include "util.h"

enum fkind {
	FK_STR,	    /* str (nil = absent when optional) */
	FK_SOFTSTR, /* str if it is one, otherwise ignored */
	FK_UINT,    /* integer >= 0 */
	FK_INT,	    /* any integer */
	FK_NUM,	    /* float or integer */
	FK_BOOL,
	FK_KEY,	    /* str, bin or integer */
	FK_REGKEY,  /* a key that is stored: its str must be UTF-8 */
	FK_KEYS,    /* list of keys */
	FK_REGS,    /* list of register entries */
	FK_REPORTS, /* list of report entries */
};

enum fid {
	F_INSTANCE_ID,
	F_LEASE_ID,
	F_EXCLUDE,
	F_SIZE,
	F_REGION_ID,
	F_KEY,
	F_KV_OFFSET,
	F_KV_LENGTH,
	F_LIST,
	F_LEASE_RELEASE,
	F_NOTICES,
	F_ACK,
	F_PAGE_SIZE,
	F_CLIENT_ID,
	F_OP_TYPE,
	F_RESULT,
	F_LATENCY,
	F_HOST,
	F_PID,
	F_IDX_HITS,
	F_IDX_MISSES,
	F_IDX_FALLBACKS,
	F_LK_KEYS,
	F_LK_HITS,
	F_LK_HIT_BYTES,
	F_LK_BATCHES,
	F_LK_BATCH_KEYS,
	F_LK_PREFIX_HITS,
	F_REMOTE,
	F_RT_PUTS, /* F_RT_PUTS + MDS_RT_*: the remote path's counters */
	F_RT_PUT_BYTES,
	F_RT_GETS,
	F_RT_GET_BYTES,
	F_RT_ERRORS,
	F_UNCOUNTED,
	F_TTL,
	F_COUNT
};
_Static_assert(F_COUNT <= 64, "fvals.seen has a bit per field");

struct field {
	const char *name;
	uint8_t len;
	uint8_t kind; /* enum fkind */
	uint8_t id;   /* enum fid */
	bool required;
};

#define FLD(n, k, i, r)                                                        \
	{                                                                      \
		n, sizeof(n) - 1, k, i, r                                      \
	}

/* values of one parsed map; only fields whose bit is in @seen are set */
struct fvals {
	uint64_t seen;
	struct mds_str str[F_COUNT];
	uint64_t u[F_COUNT];
	int64_t i;
	double f;
	bool b;
	struct mds_key key;
	struct mds_list list;
};

struct ctx {
	char *buf; /* borrows: the caller's reason buffer */
	size_t buflen;
	const char *why;
};

static int fail(struct ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(struct ctx *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->buf, c->buflen, fmt, ap);
	va_end(ap);
	c->why = c->buf;
	return -EPROTO;
}

static const struct field alloc_fields[] = {
	FLD("instance_id", FK_STR, F_INSTANCE_ID, true),
	FLD("size", FK_UINT, F_SIZE, true),
	FLD("lease_id", FK_STR, F_LEASE_ID, false),
	FLD("evicted_ack", FK_UINT, F_ACK, false),
	/* an addition: the client takes pages one by one (pages.c) */
	FLD("page_size", FK_UINT, F_PAGE_SIZE, false),
	/* additions: where the client runs (informative, GET_USAGE) */
	FLD("host", FK_SOFTSTR, F_HOST, false),
	FLD("pid", FK_UINT, F_PID, false),
};
static const struct field return_fields[] = {
	FLD("instance_id", FK_STR, F_INSTANCE_ID, true),
	FLD("region_id", FK_UINT, F_REGION_ID, true),
	/* an addition: the notices the client had (pages.c) */
	FLD("evicted_ack", FK_UINT, F_ACK, false),
};
static const struct field list_fields[] = {
	FLD("exclude_instance_id", FK_STR, F_EXCLUDE, false),
};
static const struct field reg_fields[] = {
	FLD("key", FK_REGKEY, F_KEY, true),
	FLD("region_id", FK_UINT, F_REGION_ID, true),
	FLD("kv_offset", FK_UINT, F_KV_OFFSET, true),
	FLD("kv_length", FK_UINT, F_KV_LENGTH, true),
};
static const struct field key_fields[] = {
	FLD("key", FK_KEY, F_KEY, true),
	/* additions: a lookup the client counts itself; a pin's deadline */
	FLD("count", FK_BOOL, F_UNCOUNTED, false),
	FLD("ttl_ms", FK_UINT, F_TTL, false),
};
static const struct field batch_reg_fields[] = {
	FLD("entries", FK_REGS, F_LIST, false),
};
static const struct field batch_key_fields[] = {
	FLD("keys", FK_KEYS, F_LIST, false),
	FLD("count", FK_BOOL, F_UNCOUNTED, false),
	FLD("ttl_ms", FK_UINT, F_TTL, false),
};
static const struct field heartbeat_fields[] = {
	FLD("instance_id", FK_STR, F_INSTANCE_ID, false),
	FLD("lease_id", FK_STR, F_LEASE_ID, false),
	FLD("lease_release", FK_BOOL, F_LEASE_RELEASE, false),
	FLD("evict_notices", FK_BOOL, F_NOTICES, false),
	FLD("evicted_ack", FK_UINT, F_ACK, false),
	FLD("page_size", FK_UINT, F_PAGE_SIZE, false),
	/* keys the client used without asking (a shared index): uses */
	FLD("touched", FK_KEYS, F_LIST, false),
	FLD("host", FK_SOFTSTR, F_HOST, false),
	FLD("pid", FK_UINT, F_PID, false),
	/* what it answered from the shared index since it last said */
	FLD("index_hits", FK_UINT, F_IDX_HITS, false),
	FLD("index_misses", FK_UINT, F_IDX_MISSES, false),
	FLD("index_fallbacks", FK_UINT, F_IDX_FALLBACKS, false),
	/* the lookups it answered itself since it last said (the server's
	 * lookup counters) */
	FLD("lookup_keys", FK_UINT, F_LK_KEYS, false),
	FLD("lookup_hits", FK_UINT, F_LK_HITS, false),
	FLD("lookup_hit_bytes", FK_UINT, F_LK_HIT_BYTES, false),
	FLD("lookup_batches", FK_UINT, F_LK_BATCHES, false),
	FLD("lookup_batch_keys", FK_UINT, F_LK_BATCH_KEYS, false),
	FLD("lookup_prefix_hits", FK_UINT, F_LK_PREFIX_HITS, false),
	/* a client of maru-agent: its bytes go over the network; what its
	 * counters grew by since it last said */
	FLD("remote", FK_BOOL, F_REMOTE, false),
	FLD("remote_puts", FK_UINT, F_RT_PUTS, false),
	FLD("remote_put_bytes", FK_UINT, F_RT_PUT_BYTES, false),
	FLD("remote_gets", FK_UINT, F_RT_GETS, false),
	FLD("remote_get_bytes", FK_UINT, F_RT_GET_BYTES, false),
	FLD("remote_errors", FK_UINT, F_RT_ERRORS, false),
};
static const struct field report_fields[] = {
	FLD("entries", FK_REPORTS, F_LIST, false),
};
static const struct field report_entry_fields[] = {
	FLD("client_id", FK_STR, F_CLIENT_ID, false),
	FLD("op_type", FK_STR, F_OP_TYPE, false),
	FLD("result", FK_STR, F_RESULT, false),
	FLD("size", FK_INT, F_SIZE, false),
	FLD("latency_us", FK_NUM, F_LATENCY, false),
};
static const struct field handshake_fields[] = {
	FLD("instance_id", FK_SOFTSTR, F_INSTANCE_ID, false),
};

/* Decode a key value already read into @v. */
static int key_from(const struct mp_val *v, struct mds_key *k)
{
	switch (v->type) {
	case MP_STR:
	case MP_BIN:
		if (v->len > IX_KEY_MAX)
			return -EPROTO;
		k->ptr = v->ptr;
		k->len = v->len;
		k->tag = v->type == MP_STR ? KEY_STR : KEY_BIN;
		return 0;
	case MP_UINT:
	case MP_NINT:
		k->tag =
			key_int_form(v->type == MP_UINT ? v->u : (uint64_t)v->i,
				     v->type == MP_NINT, k->ibuf);
		k->ptr = NULL;
		k->len = KEY_INT_BYTES;
		return 0;
	default:
		return -EPROTO;
	}
}

static int parse_map(struct mp_rd *r, uint32_t npairs, const struct field *fl,
		     size_t nf, struct fvals *out, struct ctx *c);

/* Validate @n list elements of @kind at r->p, leaving r after them. */
static int parse_list(struct mp_rd *r, uint32_t n, uint8_t kind,
		      const char *name, struct ctx *c)
{
	struct fvals ev;
	struct mds_key k;
	struct mp_val v;
	uint32_t i;

	for (i = 0; i < n; i++) {
		if (kind == FK_REPORTS && i >= MDS_REPORT_MAX) {
			/* past the recorded prefix: well-formed is enough */
			if (mp_skip(r) < 0)
				return fail(c, "'%s': truncated list", name);
			continue;
		}
		if (mp_read(r, &v) < 0)
			return fail(c, "'%s': truncated list", name);
		if (kind == FK_KEYS) {
			if (key_from(&v, &k) < 0)
				return fail(c,
					    "'%s': a key must be str, "
					    "bin or int",
					    name);
			continue;
		}
		if (v.type != MP_MAP)
			return fail(c, "'%s': elements must be maps", name);
		if (kind == FK_REGS) {
			if (parse_map(r, v.n, reg_fields,
				      sizeof(reg_fields) /
					      sizeof(reg_fields[0]),
				      &ev, c) < 0)
				return -EPROTO;
		} else if (parse_map(r, v.n, report_entry_fields,
				     sizeof(report_entry_fields) /
					     sizeof(report_entry_fields[0]),
				     &ev, c) < 0) {
			return -EPROTO;
		}
	}
	return 0;
}

/* Read the value of field @f into @out. */
static int parse_value(struct mp_rd *r, const struct field *f,
		       struct fvals *out, struct ctx *c)
{
	const uint8_t *start = r->p;
	struct mp_val v;

	if (mp_read(r, &v) < 0)
		return fail(c, "'%s': truncated value", f->name);
	if (v.type == MP_NIL && !f->required && f->kind != FK_KEY)
		return 0; /* nil = absent */
	switch (f->kind) {
	case FK_SOFTSTR:
		if (v.type != MP_STR || !utf8_valid(v.ptr, v.len)) {
			/* ignored field of any type: skip all of it */
			r->p = start;
			if (mp_skip(r) < 0)
				return fail(c, "'%s': truncated value",
					    f->name);
			return 0;
		}
		/* fallthrough */
	case FK_STR:
		if (v.type != MP_STR)
			return fail(c, "'%s' must be a str", f->name);
		if (!utf8_valid(v.ptr, v.len))
			return fail(c, "'%s' must be valid UTF-8", f->name);
		out->str[f->id].ptr = (const char *)v.ptr;
		out->str[f->id].len = v.len;
		break;
	case FK_UINT:
		if (v.type != MP_UINT)
			return fail(c, "'%s' must be a non-negative int",
				    f->name);
		out->u[f->id] = v.u;
		break;
	case FK_INT:
		if (v.type == MP_UINT)
			out->i = v.u > INT64_MAX ? INT64_MAX : (int64_t)v.u;
		else if (v.type == MP_NINT)
			out->i = v.i;
		else
			return fail(c, "'%s' must be an int", f->name);
		break;
	case FK_NUM:
		if (v.type == MP_FLOAT)
			out->f = v.f;
		else if (v.type == MP_UINT)
			out->f = (double)v.u;
		else if (v.type == MP_NINT)
			out->f = (double)v.i;
		else
			return fail(c, "'%s' must be a number", f->name);
		break;
	case FK_BOOL:
		if (v.type != MP_BOOL)
			return fail(c, "'%s' must be a bool", f->name);
		out->b = v.b;
		out->u[f->id] = v.b;
		break;
	case FK_KEY:
	case FK_REGKEY:
		if (key_from(&v, &out->key) < 0)
			return fail(c, "'%s' must be str, bin or int", f->name);
		if (f->kind == FK_REGKEY && v.type == MP_STR &&
		    !utf8_valid(v.ptr, v.len))
			return fail(c,
				    "'%s': a str key must be valid UTF-8 "
				    "(bin for other bytes)",
				    f->name);
		break;
	default: /* the lists */
		if (v.type != MP_ARRAY)
			return fail(c, "'%s' must be a list", f->name);
		if (v.n > MDS_MAX_BATCH)
			return fail(c,
				    "'%s': too many elements (limit "
				    "1048576)",
				    f->name);
		start = r->p;
		if (parse_list(r, v.n, f->kind, f->name, c) < 0)
			return -EPROTO;
		out->list.p = start;
		out->list.end = r->p;
		out->list.n = v.n;
		if (f->kind == FK_REPORTS && v.n > MDS_REPORT_MAX)
			out->list.n = MDS_REPORT_MAX;
		break;
	}
	out->seen |= 1ull << f->id;
	return 0;
}

/*
 * Parse @npairs key/value pairs (the map header is already read) against
 * the field table @fl.  Unknown keys are skipped; the last of duplicate
 * keys wins.
 */
static int parse_map(struct mp_rd *r, uint32_t npairs, const struct field *fl,
		     size_t nf, struct fvals *out, struct ctx *c)
{
	struct mp_val k;
	uint32_t i;
	size_t j;

	out->seen = 0;
	for (i = 0; i < npairs; i++) {
		if (mp_read(r, &k) < 0)
			return fail(c, "truncated map");
		if (k.type != MP_STR)
			return fail(c, "map keys must be str");
		for (j = 0; j < nf; j++)
			if (fl[j].len == k.len &&
			    !memcmp(fl[j].name, k.ptr, k.len))
				break;
		if (j == nf) {
			if (mp_skip(r) < 0)
				return fail(c, "truncated map");
			continue;
		}
		if (parse_value(r, &fl[j], out, c) < 0)
			return -EPROTO;
	}
	for (j = 0; j < nf; j++)
		if (fl[j].required && !(out->seen & (1ull << fl[j].id)))
			return fail(c, "missing '%s'", fl[j].name);
	return 0;
}

#define TABLE(t) t, sizeof(t) / sizeof(t[0])

static const struct mds_str no_str = {NULL, 0};

static struct mds_str opt_str(const struct fvals *v, int id)
{
	return (v->seen & (1ull << id)) ? v->str[id] : no_str;
}

int mds_peek_key(const uint8_t *body, size_t len, struct mds_key *k)
{
	struct mp_rd r;
	struct mp_val v;

	if (len < MDS_HDR_SIZE ||
	    (body[3] != MDS_LOOKUP_KV && body[3] != MDS_EXISTS_KV))
		return -EPROTO;
	mp_rd_init(&r, body + MDS_HDR_SIZE, len - MDS_HDR_SIZE);
	if (mp_read(&r, &v) < 0 || v.type != MP_MAP || v.n != 1 ||
	    mp_read(&r, &v) < 0 || v.type != MP_STR || v.len != 3 ||
	    memcmp(v.ptr, "key", 3) != 0 || mp_read(&r, &v) < 0)
		return -EPROTO;
	return key_from(&v, k);
}

int mds_decode(const uint8_t *body, size_t len, struct mds_req *req,
	       const char **why, char *whybuf, size_t whylen)
{
	struct ctx c = {whybuf, whylen, NULL};
	const struct field *fl = NULL;
	struct fvals v;
	struct mp_rd r;
	struct mp_val top;
	size_t nf = 0;
	int i;

	memset(req, 0, sizeof(*req));
	if (len < MDS_HDR_SIZE) {
		*why = "message shorter than the 16-byte header";
		return MDS_EBADHDR;
	}
	if (mds_hdr_decode(body, len, &req->hdr) < 0) {
		if (req->hdr.magic != MDS_MAGIC)
			*why = "bad magic";
		else if (req->hdr.version != MDS_VERSION)
			*why = "unsupported version";
		else
			*why = "payload shorter than payload_length";
		return MDS_EINVAL;
	}
	switch (req->hdr.msg_type) {
	case MDS_REQUEST_ALLOC:
		fl = alloc_fields, nf = ARRAY_SIZE(alloc_fields);
		break;
	case MDS_RETURN_ALLOC:
		fl = return_fields, nf = ARRAY_SIZE(return_fields);
		break;
	case MDS_LIST_ALLOCATIONS:
		fl = list_fields, nf = ARRAY_SIZE(list_fields);
		break;
	case MDS_REGISTER_KV:
		fl = reg_fields, nf = ARRAY_SIZE(reg_fields);
		break;
	case MDS_LOOKUP_KV:
	case MDS_EXISTS_KV:
	case MDS_DELETE_KV:
	case MDS_PIN_KV:
	case MDS_UNPIN_KV:
		fl = key_fields, nf = ARRAY_SIZE(key_fields);
		break;
	case MDS_BATCH_REGISTER_KV:
		fl = batch_reg_fields, nf = ARRAY_SIZE(batch_reg_fields);
		break;
	case MDS_BATCH_LOOKUP_KV:
	case MDS_BATCH_EXISTS_KV:
	case MDS_BATCH_PIN_KV:
	case MDS_BATCH_UNPIN_KV:
		fl = batch_key_fields, nf = ARRAY_SIZE(batch_key_fields);
		break;
	case MDS_GET_STATS:
	case MDS_GET_USAGE:
		break;
	case MDS_HEARTBEAT:
		fl = heartbeat_fields, nf = ARRAY_SIZE(heartbeat_fields);
		break;
	case MDS_REPORT_STATS:
		fl = report_fields, nf = ARRAY_SIZE(report_fields);
		break;
	case MDS_HANDSHAKE:
		fl = handshake_fields, nf = ARRAY_SIZE(handshake_fields);
		break;
	default: /* SHUTDOWN (0xff) included: never acted upon */
		snprintf(whybuf, whylen, "Unknown message type: %u",
			 req->hdr.msg_type);
		*why = whybuf;
		return MDS_EINVAL;
	}

	/* an empty payload reads as an empty map */
	mp_rd_init(&r, body + MDS_HDR_SIZE, req->hdr.payload_len);
	if (req->hdr.payload_len == 0) {
		top.type = MP_MAP;
		top.n = 0;
	} else if (mp_read(&r, &top) < 0 || top.type != MP_MAP) {
		*why = "payload is not a MessagePack map";
		return MDS_EINVAL;
	}
	if (parse_map(&r, top.n, fl, nf, &v, &c) < 0) {
		*why = c.why;
		return MDS_EINVAL;
	}
	if (r.p != r.end) {
		*why = "trailing bytes after the payload map";
		return MDS_EINVAL;
	}

	req->instance_id = opt_str(&v, F_INSTANCE_ID);
	req->lease_id = opt_str(&v, F_LEASE_ID);
	req->exclude = opt_str(&v, F_EXCLUDE);
	if (v.seen & (1ull << F_SIZE))
		req->size = v.u[F_SIZE];
	if (v.seen & (1ull << F_REGION_ID))
		req->region_id = v.u[F_REGION_ID];
	if (v.seen & (1ull << F_KEY)) {
		/* only REGISTER_KV has the other three, and requires them */
		req->reg.key = v.key;
		if (req->hdr.msg_type == MDS_REGISTER_KV) {
			req->reg.region_id = v.u[F_REGION_ID];
			req->reg.kv_offset = v.u[F_KV_OFFSET];
			req->reg.kv_length = v.u[F_KV_LENGTH];
		}
	}
	if (v.seen & (1ull << F_LIST))
		req->list = v.list;
	req->lease_release =
		(v.seen & (1ull << F_LEASE_RELEASE)) && v.u[F_LEASE_RELEASE];
	req->notices = (v.seen & (1ull << F_NOTICES)) && v.u[F_NOTICES];
	if (v.seen & (1ull << F_ACK))
		req->ack = v.u[F_ACK];
	/* (a page size no page table can use is no page size) */
	if ((v.seen & (1ull << F_PAGE_SIZE)) && v.u[F_PAGE_SIZE] <= UINT32_MAX)
		req->page_size = (uint32_t)v.u[F_PAGE_SIZE];
	req->host = opt_str(&v, F_HOST);
	if (v.seen & (1ull << F_PID))
		req->pid = v.u[F_PID];
	if (v.seen & (1ull << F_IDX_HITS))
		req->idx[0] = v.u[F_IDX_HITS];
	if (v.seen & (1ull << F_IDX_MISSES))
		req->idx[1] = v.u[F_IDX_MISSES];
	if (v.seen & (1ull << F_IDX_FALLBACKS))
		req->idx[2] = v.u[F_IDX_FALLBACKS];
	for (i = 0; i < MDS_LK_N; i++)
		if (v.seen & (1ull << (F_LK_KEYS + i)))
			req->lk[i] = v.u[F_LK_KEYS + i];
	/* the remote path (nil: absent) */
	req->remote.has_on = (v.seen & (1ull << F_REMOTE)) != 0;
	req->remote.on = req->remote.has_on && v.u[F_REMOTE];
	for (i = 0; i < MDS_RT_N; i++)
		if (v.seen & (1ull << (F_RT_PUTS + i)))
			req->remote.n[i] = v.u[F_RT_PUTS + i];
	/* "count": false -- the client counts this lookup itself */
	req->uncounted = (v.seen & (1ull << F_UNCOUNTED)) && !v.u[F_UNCOUNTED];
	if (v.seen & (1ull << F_TTL))
		req->ttl_ms = v.u[F_TTL] > MDS_TTL_MAX_MS ? MDS_TTL_MAX_MS
							  : v.u[F_TTL];
	return 0;
}

bool mds_next_key(struct mds_iter *it, struct mds_key *k)
{
	struct mp_val v;

	if (!it->left)
		return false;
	it->left--;
	/* validated by mds_decode(): cannot fail */
	if (mp_read(&it->r, &v) < 0 || key_from(&v, k) < 0)
		return false;
	return true;
}

bool mds_next_reg(struct mds_iter *it, struct mds_reg *e)
{
	char whybuf[8];
	struct ctx c = {whybuf, sizeof(whybuf), NULL};
	struct fvals v;
	struct mp_val m;

	if (!it->left)
		return false;
	it->left--;
	if (mp_read(&it->r, &m) < 0 ||
	    parse_map(&it->r, m.n, TABLE(reg_fields), &v, &c) < 0)
		return false;
	e->key = v.key;
	e->region_id = v.u[F_REGION_ID];
	e->kv_offset = v.u[F_KV_OFFSET];
	e->kv_length = v.u[F_KV_LENGTH];
	return true;
}

static struct mds_str dflt(const struct fvals *v, int id, const char *d)
{
	struct mds_str s = opt_str(v, id);

	if (!s.ptr) {
		s.ptr = d;
		s.len = (uint32_t)strlen(d);
	}
	return s;
}

bool mds_next_report(struct mds_iter *it, struct mds_report *e)
{
	char whybuf[8];
	struct ctx c = {whybuf, sizeof(whybuf), NULL};
	struct fvals v;
	struct mp_val m;

	if (!it->left)
		return false;
	it->left--;
	if (mp_read(&it->r, &m) < 0 ||
	    parse_map(&it->r, m.n, TABLE(report_entry_fields), &v, &c) < 0)
		return false;
	e->client_id = dflt(&v, F_CLIENT_ID, "_unknown");
	e->op_type = dflt(&v, F_OP_TYPE, "unknown");
	e->result = dflt(&v, F_RESULT, "none");
	e->size = (v.seen & (1ull << F_SIZE)) ? v.i : 0;
	e->latency_us = (v.seen & (1ull << F_LATENCY)) ? v.f : 0.0;
	return true;
}

size_t mds_begin_reply(struct mp_wr *w, const struct mds_hdr *req)
{
	size_t at = w->b->len;
	uint8_t *p = mp_room(w, MDS_HDR_SIZE);

	if (p)
		mds_hdr_put(p, mds_resp_type(req->msg_type), req->flags,
			    req->sequence, 0);
	return at;
}

void mds_end_reply(struct mp_wr *w, size_t at)
{
	if (w->err)
		return;
	put_u32be(w->b->data + at + 12,
		  (uint32_t)(w->b->len - at - MDS_HDR_SIZE));
}

void mds_error_reply(struct mp_wr *w, const struct mds_hdr *req,
		     const char *msg)
{
	struct mds_hdr none = {0};
	size_t at;

	at = mds_begin_reply(w, req ? req : &none);
	mp_put_map(w, 1);
	mp_put_key(w, "error");
	mp_put_str(w, msg, (uint32_t)strlen(msg));
	mds_end_reply(w, at);
}

void mds_held_reply(struct mp_wr *w, const struct mds_hdr *req)
{
	size_t at = mds_begin_reply(w, req);

	mp_put_map(w, 2);
	mp_put_key(w, "error");
	mp_put_key(w, MDS_HELD_WHY);
	mp_put_key(w, "held");
	mp_put_bool(w, true);
	mds_end_reply(w, at);
}

size_t mds_encode_hit_prefix(const struct rm_handle *h, uint8_t *out)
{
	/* on the heap, then copied (once per region): a buf over the
	 * caller's array would be one that buf_reserve() may realloc() */
	struct buf b = BUF_INIT;
	struct mp_wr w = {&b, 0};
	size_t n;

	mp_put_map(&w, 5); /* found, handle, kv_offset, kv_length, kv_gen */
	mp_put_key(&w, "found");
	mp_put_bool(&w, true);
	mp_put_key(&w, "handle");
	mp_put_map(&w, 4);
	mp_put_key(&w, "region_id");
	mp_put_uint(&w, h->region_id);
	mp_put_key(&w, "offset");
	mp_put_uint(&w, h->offset);
	mp_put_key(&w, "length");
	mp_put_uint(&w, h->length);
	mp_put_key(&w, "auth_token");
	mp_put_uint(&w, h->auth_token);
	mp_put_key(&w, "kv_offset");
	n = w.err || b.len > MDS_HIT_PREFIX_MAX ? 0 : b.len;
	if (n)
		memcpy(out, b.data, n);
	buf_free(&b);
	return n;
}
