/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agent_proto.h - maru-agent's control requests (docs/remote.md)
 *
 * maru-agent runs on a host that maps the pool and lends its memory to
 * hosts that cannot, over UCX.  Its control port speaks what maru-server's
 * does: ZMTP 3.1 (CURVE across hosts), one request per message, the
 * metadata server's 16-byte envelope (mds_proto.h) around a MessagePack
 * map.  The codes do not overlap maru-server's, so a request sent to the
 * wrong daemon is refused as unknown, never misread.
 *
 *   HELLO   {[supersede: bin16]}    -> {success, worker: bin,
 *                                       session: bin16, version}
 *           worker: the agent's UCX worker address, which the client
 *           connects its endpoint to; session: a random id naming this
 *           connection's grants in every transfer.  supersede: a session
 *           of the same client that failed; it is ended first.
 *   ACCESS  {region_id, offset, length, auth_token} -> {success, length}
 *           the capability is the region's token (REQUEST_ALLOC,
 *           LOOKUP): the agent has the resource manager check it
 *           (GET_ACCESS), maps the region, and grants it to the
 *           connection's session.
 *   BYE     {[session: bin16]}      -> {success}
 *           ends the session named (else the connection's) once none of
 *           its transfers is in flight at the agent: a later message of
 *           it is refused.
 *   STATS   {}                      -> {success, <counter>: uint ...}
 *   Errors: {success: false, error: str}, the cause in words.
 *
 * The bytes move as UCX active messages the agent checks (xfer.c):
 *   PUT  (client -> agent) header agent_am_req, data: the page's bytes;
 *        answered by ACK once the bytes are in the pool;
 *   GET  (client -> agent) header agent_am_req, no data; answered by
 *        DATA: header agent_am_rep, data: the bytes (status 0), or no
 *        data (status < 0).
 * The request header is a MessagePack map {session: bin16, region_id,
 * offset (in the region), length, seq (the client's, echoed)}, the reply
 * header {seq, status: 0 or -errno}: the same MessagePack as everything
 * else, at most AGENT_AM_REQ_MAX / AGENT_AM_REP_MAX bytes.
 *
 * The decoders face the network (fuzz_agent_proto): they read with the
 * project's bounds-checked reader (msgpk.h), skip unknown keys, and take
 * nothing longer than AGENT_MSG_MAX.
 *
 * Context: pure functions; any thread.
 */
#ifndef MARU_COMMON_AGENT_PROTO_H
#define MARU_COMMON_AGENT_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msgpk.h"

enum agent_msg_type {
	AGENT_HELLO = 0x40,
	AGENT_ACCESS = 0x41,
	AGENT_STATS = 0x42,
	AGENT_BYE = 0x43,
};

/* UCX active message ids */
enum agent_am_id {
	AGENT_AM_PUT = 1,
	AGENT_AM_GET = 2,
	AGENT_AM_ACK = 3,
	AGENT_AM_DATA = 4,
};

#define AGENT_SESSION_LEN 16
#define AGENT_AM_REQ_MAX 96 /* a transfer's header, encoded */
#define AGENT_AM_REP_MAX 32 /* a reply's header, encoded */

struct agent_am_req {
	uint8_t session[AGENT_SESSION_LEN];
	uint64_t region_id;
	uint64_t offset; /* in the region */
	uint64_t length;
	uint64_t seq;
};

struct agent_am_rep {
	uint64_t seq;
	int32_t status; /* 0 or -errno */
};

/* agent_am_req_decode - a transfer's header.  Return: 0, or -EPROTO (not
 * a map of the five fields, a length of 0 or past AGENT_REGION_MAX, an
 * end that overflows) */
int agent_am_req_decode(const void *p, size_t n, struct agent_am_req *r);
/* agent_am_req_encode - @r into @out; Return: its length */
size_t agent_am_req_encode(const struct agent_am_req *r,
			   uint8_t out[AGENT_AM_REQ_MAX]);
/* agent_am_rep_decode - a reply's header.  Return: 0 or -EPROTO (not a
 * map with seq, a status that is not 0 or negative) */
int agent_am_rep_decode(const void *p, size_t n, struct agent_am_rep *r);
size_t agent_am_rep_encode(const struct agent_am_rep *r,
			   uint8_t out[AGENT_AM_REP_MAX]);

#define AGENT_DEFAULT_PORT 5570
#define AGENT_MSG_MAX (64u << 10)     /* the largest request or reply */
#define AGENT_BLOB_MAX (16u << 10)    /* a worker address or a packed rkey */
#define AGENT_REGION_MAX (1ull << 44) /* 16 TiB: a larger region is a lie */

struct agent_access_req {
	uint64_t region_id;
	uint64_t offset; /* of the region in its device or file */
	uint64_t length;
	uint64_t token; /* the region's auth_token */
};

/* the counters STATS answers, in this order */
enum {
	AGENT_ST_SESSIONS,	 /* control connections now open */
	AGENT_ST_SESSIONS_TOTAL, /* ... ever accepted */
	AGENT_ST_REFUSED_CONN,	 /* ... refused (too many, CURVE) */
	AGENT_ST_GRANTED,	 /* ACCESS granted */
	AGENT_ST_DENIED,	 /* ACCESS refused (token, bounds, RM) */
	AGENT_ST_BAD,		 /* requests that did not decode */
	AGENT_ST_REGIONS,	 /* regions mapped and registered now */
	AGENT_ST_BYTES_MAPPED,	 /* their bytes */
	AGENT_ST_REVOKED,	 /* regions revoked (freed or reassigned) */
	AGENT_ST_PUTS,		 /* pages written into the pool */
	AGENT_ST_PUT_BYTES,	 /* ... their bytes */
	AGENT_ST_GETS,		 /* pages read out of it */
	AGENT_ST_GET_BYTES,	 /* ... their bytes */
	AGENT_ST_REFUSED_XFERS,	 /* transfers refused (session, grant,
				  * bounds) */
	AGENT_ST_N
};

static inline const char *agent_stat_name(int i)
{
	static const char *const n[AGENT_ST_N] = {
		"sessions",
		"sessions_total",
		"refused_connections",
		"granted",
		"denied",
		"bad_requests",
		"regions",
		"bytes_mapped",
		"revoked",
		"puts",
		"put_bytes",
		"gets",
		"get_bytes",
		"refused_transfers",
	};
	return n[i];
}

/* A reply, borrowed from the payload it was decoded from. */
struct agent_reply {
	bool success;
	const char *error; /* borrows: NOT NUL-terminated, @error_len bytes */
	uint32_t error_len;
	const uint8_t *blob; /* borrows: "worker" */
	uint32_t blob_len;
	const uint8_t *session; /* borrows: AGENT_SESSION_LEN bytes, or NULL */
	uint64_t addr, length;
	uint64_t stats[AGENT_ST_N];
	bool has_stats;
};

/**
 * agent_decode_access - an ACCESS request's payload
 * @why: the cause of a refusal, in words
 * Return: 0, or -EPROTO (not a map, a field of the wrong type, a missing
 * field, a length of 0 or past AGENT_REGION_MAX, an offset that overflows)
 */
int agent_decode_access(const uint8_t *p, size_t n, struct agent_access_req *r,
			const char **why);

/**
 * agent_decode_hello - a HELLO or BYE request's payload
 * @supersede: gets the session named ("supersede", "session"), or NULL
 * Return: 0 or -EPROTO (not a map, a session id that is not 16 bytes)
 */
int agent_decode_hello(const uint8_t *p, size_t n, const uint8_t **supersede);

/* agent_encode_access - the payload of an ACCESS request into @w */
void agent_encode_access(struct mp_wr *w, const struct agent_access_req *r);

/**
 * agent_decode_reply - any reply's payload (HELLO, ACCESS, STATS, error)
 * Return: 0, or -EPROTO (not a map, a field of the wrong type, a blob
 * over AGENT_BLOB_MAX)
 */
int agent_decode_reply(const uint8_t *p, size_t n, struct agent_reply *r);

#endif /* MARU_COMMON_AGENT_PROTO_H */
