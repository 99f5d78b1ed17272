/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mds_proto.h - metadata server framing: the 16-byte big-endian header and
 * the message codes (docs/protocol.md §2)
 *
 * The MessagePack payloads are written with msgpack-c's packer and read
 * with the project's own reader, on both sides (msgpk.h); this header only
 * fixes the envelope both sides share.
 */
#ifndef MARU_COMMON_MDS_PROTO_H
#define MARU_COMMON_MDS_PROTO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define MDS_MAGIC 0xCF00u
#define MDS_VERSION 1
#define MDS_HDR_SIZE 16
#define MDS_RESPONSE_BIT 0x80
#define MDS_DEFAULT_PORT 5555

/*
 * The lookup counters (docs/protocol.md §2): maru-server counts the lookups
 * it answers, clients report those they answer from the shared index in
 * HEARTBEAT as "lookup_<name>", GET_STATS "lookups" has them as <name>.
 */
enum {
	MDS_LK_KEYS,	    /* keys looked up (LOOKUP, EXISTS, batches) */
	MDS_LK_HITS,	    /* ... found */
	MDS_LK_HIT_BYTES,   /* kv_length of those found */
	MDS_LK_BATCHES,	    /* batch lookups (BATCH_LOOKUP, BATCH_EXISTS) */
	MDS_LK_BATCH_KEYS,  /* keys in them */
	MDS_LK_PREFIX_HITS, /* keys of their found leading run (a prefix) */
	MDS_LK_N
};

/* the GET_STATS name of counter @i (HEARTBEAT: "lookup_" before it) */
static inline const char *mds_lk_name(int i)
{
	static const char *const names[MDS_LK_N] = {
		[MDS_LK_KEYS] = "keys",
		[MDS_LK_HITS] = "hits",
		[MDS_LK_HIT_BYTES] = "hit_bytes",
		[MDS_LK_BATCHES] = "batches",
		[MDS_LK_BATCH_KEYS] = "batch_keys",
		[MDS_LK_PREFIX_HITS] = "prefix_hits",
	};

	return names[i];
}

/*
 * The remote path's counters (docs/protocol.md §2): a client that moves
 * its bytes through maru-agent reports "remote": bool, and what each
 * counter grew by since its last HEARTBEAT as "remote_<name>" (what a
 * HEARTBEAT that failed carried goes again with the next).  GET_STATS
 * "remote" has their sums as <name>.
 */
enum {
	MDS_RT_PUTS,	  /* pages written to the pool (ucp_put) */
	MDS_RT_PUT_BYTES, /* ... their bytes */
	MDS_RT_GETS,	  /* pages read from it (ucp_get) */
	MDS_RT_GET_BYTES, /* ... their bytes */
	MDS_RT_ERRORS,	  /* transfers that failed */
	MDS_RT_N
};

/* the GET_STATS name of counter @i (HEARTBEAT: "remote_" before it) */
static inline const char *mds_rt_name(int i)
{
	static const char *const names[MDS_RT_N] = {
		[MDS_RT_PUTS] = "puts",	    [MDS_RT_PUT_BYTES] = "put_bytes",
		[MDS_RT_GETS] = "gets",	    [MDS_RT_GET_BYTES] = "get_bytes",
		[MDS_RT_ERRORS] = "errors",
	};

	return names[i];
}

/*
 * "evicted" notices are (region_id, kv_offset, gen) triples; the gen says
 * what of the page: a registration number, the page is yours again; 0,
 * the page is granted to you; with this bit, forget that registration but
 * not the page, which is no longer yours once no key of yours is in it
 * (docs/protocol.md §2, "Pages").
 */
#define MDS_GEN_FORGET (1ull << 63)

enum mds_msg_type {
	MDS_REQUEST_ALLOC = 0x01,
	MDS_RETURN_ALLOC = 0x03,
	MDS_LIST_ALLOCATIONS = 0x04,
	MDS_REGISTER_KV = 0x10,
	MDS_LOOKUP_KV = 0x11,
	MDS_EXISTS_KV = 0x12,
	MDS_DELETE_KV = 0x13,
	MDS_PIN_KV = 0x14,
	MDS_UNPIN_KV = 0x15,
	MDS_BATCH_REGISTER_KV = 0x20,
	MDS_BATCH_LOOKUP_KV = 0x21,
	MDS_BATCH_EXISTS_KV = 0x22,
	MDS_BATCH_PIN_KV = 0x23,
	MDS_BATCH_UNPIN_KV = 0x24,
	MDS_GET_STATS = 0xF0,
	MDS_HEARTBEAT = 0xF1,
	MDS_REPORT_STATS = 0xF2,
	MDS_GET_USAGE = 0xF3,
	MDS_HANDSHAKE = 0xFE,
	MDS_SHUTDOWN = 0xFF,
};

struct mds_hdr {
	uint16_t magic;
	uint8_t version;
	uint8_t msg_type;
	uint8_t flags; /* echoed, never acted upon */
	uint32_t sequence;
	uint32_t payload_len;
};

/* response type for a request type: admin codes already carry 0x80 */
static inline uint8_t mds_resp_type(uint8_t req_type)
{
	return req_type | MDS_RESPONSE_BIT;
}

/*
 * mds_hdr_decode - parse the header at the start of a body frame of @len
 * bytes.  Return: 0 when the header is valid and the announced payload is
 * present (bytes after it are ignored), -EPROTO otherwise.  When at least 16
 * bytes were present @h is filled even on error, so a server can echo the
 * sequence number in its error reply.
 */
static inline int mds_hdr_decode(const uint8_t *p, size_t len,
				 struct mds_hdr *h)
{
	if (len < MDS_HDR_SIZE)
		return -EPROTO;
	h->magic = get_u16be(p);
	h->version = p[2];
	h->msg_type = p[3];
	h->flags = p[4];
	h->sequence = get_u32be(p + 8);
	h->payload_len = get_u32be(p + 12);
	if (h->magic != MDS_MAGIC || h->version != MDS_VERSION)
		return -EPROTO;
	if (h->payload_len > len - MDS_HDR_SIZE)
		return -EPROTO;
	return 0;
}

/* mds_hdr_put - write a header into 16 bytes at @p */
static inline void mds_hdr_put(uint8_t *p, uint8_t type, uint8_t flags,
			       uint32_t seq, uint32_t payload_len)
{
	put_u16be(p, MDS_MAGIC);
	p[2] = MDS_VERSION;
	p[3] = type;
	p[4] = flags;
	p[5] = p[6] = p[7] = 0;
	put_u32be(p + 8, seq);
	put_u32be(p + 12, payload_len);
}

#endif
