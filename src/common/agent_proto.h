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
 *   HELLO   {}                      -> {success, worker: bin, version}
 *           worker: the agent's UCX worker address, which the client
 *           connects its endpoint to.
 *   ACCESS  {region_id, offset, length, auth_token}
 *                                   -> {success, addr, length, rkey: bin}
 *           the capability is the region's token (REQUEST_ALLOC,
 *           LOOKUP): the agent has the resource manager check it
 *           (GET_ACCESS) before it maps the region and packs its remote
 *           key; addr is the region's first byte in the agent.
 *   STATS   {}                      -> {success, <counter>: uint ...}
 *   Errors: {success: false, error: str}, the cause in words.
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
};

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
	AGENT_ST_GRANTED,	 /* ACCESS answered with a key */
	AGENT_ST_DENIED,	 /* ACCESS refused (token, bounds, RM) */
	AGENT_ST_BAD,		 /* requests that did not decode */
	AGENT_ST_REGIONS,	 /* regions mapped and registered now */
	AGENT_ST_BYTES_MAPPED,	 /* their bytes */
	AGENT_ST_REVOKED,	 /* regions revoked (freed or reassigned) */
	AGENT_ST_N
};

static inline const char *agent_stat_name(int i)
{
	static const char *const n[AGENT_ST_N] = {
		"sessions", "sessions_total", "refused_connections",
		"granted",  "denied",	      "bad_requests",
		"regions",  "bytes_mapped",   "revoked",
	};
	return n[i];
}

/* A reply, borrowed from the payload it was decoded from. */
struct agent_reply {
	bool success;
	const char *error; /* borrows: NOT NUL-terminated, @error_len bytes */
	uint32_t error_len;
	const uint8_t *blob; /* borrows: "worker" or "rkey" */
	uint32_t blob_len;
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

/* agent_encode_access - the payload of an ACCESS request into @w */
void agent_encode_access(struct mp_wr *w, const struct agent_access_req *r);

/**
 * agent_decode_reply - any reply's payload (HELLO, ACCESS, STATS, error)
 * Return: 0, or -EPROTO (not a map, a field of the wrong type, a blob
 * over AGENT_BLOB_MAX)
 */
int agent_decode_reply(const uint8_t *p, size_t n, struct agent_reply *r);

#endif /* MARU_COMMON_AGENT_PROTO_H */
