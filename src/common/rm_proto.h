/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm_proto.h - resource manager wire protocol v2 (TCP, little-endian)
 *
 * Byte layouts: docs/protocol.md §1 (upstream's resource manager protocol).
 * Every message is a 12-byte header plus a payload.
 *
 * Encoders append one whole message (header + payload) to a struct buf.
 * Decoders are pure and bounded: they read only [p, p + len), never
 * allocate, and return -EPROTO for malformed input.  Strings in decoded
 * messages *borrow* from the input buffer (struct rm_str): copy them before
 * the buffer is reused.
 *
 * Used by maru-resource-manager (decodes requests, encodes responses), and by
 * maru-server, libmaru and pool_monitor (the other way round).
 */
#ifndef MARU_COMMON_RM_PROTO_H
#define MARU_COMMON_RM_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define RM_MAGIC 0x4D415255u /* "URAM" on the wire: 55 52 41 4D */
#define RM_VERSION 2
#define RM_HDR_SIZE 12
#define RM_MAX_PAYLOAD 8192  /* larger requests are refused (-EMSGSIZE) */
#define RM_PATH_MAX 4096     /* longest dax_path in ALLOC_REQ */
#define RM_CLIENT_ID_MAX 127 /* id_len must be 1..127 */
#define RM_HANDLE_SIZE 32
#define RM_AUTH_NONCE_LEN 32
#define RM_AUTH_MAC_LEN 32
#define RM_DEFAULT_PORT 9850

/*
 * AUTH_REQ hold_ms that asks for a hold without end: the regions stay
 * until the same client id authenticates again, or an operator releases
 * them (RELEASE_REQ).  maru-server asks it when it journals its index, so
 * that an outage of any length loses no key (docs/resource-manager.md,
 * "The reaper").
 */
#define RM_HOLD_UNTIL_BACK UINT32_MAX

enum rm_msg_type {
	RM_ALLOC_REQ = 1,
	RM_ALLOC_RESP = 2,
	RM_FREE_REQ = 3,
	RM_FREE_RESP = 4,
	RM_STATS_REQ = 5,
	RM_STATS_RESP = 6,
	RM_GET_ACCESS_REQ = 9,
	RM_GET_ACCESS_RESP = 10,
	RM_AUTH_REQ = 11, /* an addition: rm_auth.h */
	RM_AUTH_RESP = 12,
	RM_COUNTERS_REQ = 13, /* an addition: the daemon's counters */
	RM_COUNTERS_RESP = 14,
	RM_OWNERS_REQ = 15, /* an addition: who owns regions, who is away */
	RM_OWNERS_RESP = 16,
	RM_RELEASE_REQ = 17, /* an addition: free an absent owner's regions */
	RM_RELEASE_RESP = 18,
	RM_ERROR_RESP = 255,
};

enum rm_dax_type {
	RM_DEV_DAX = 0,
	RM_FS_DAX = 1,
};

struct rm_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type; /* enum rm_msg_type */
	uint32_t payload_len;
};

/* A capability for one region, passed through every layer verbatim. */
struct rm_handle {
	uint64_t region_id;  /* global, from 1, never reused */
	uint64_t offset;     /* mmap offset (DEV_DAX: device offset) */
	uint64_t length;     /* aligned length in bytes */
	uint64_t auth_token; /* keyed MAC, opaque to clients */
};

/* A string that borrows from a message buffer; not NUL-terminated. */
struct rm_str {
	const char *ptr;
	uint32_t len; /* 0 = empty or absent */
};

struct rm_alloc_req {
	uint64_t size;
	struct rm_str dax_path;	 /* empty = any pool */
	struct rm_str client_id; /* empty = absent */
	uint64_t request_id;	 /* 0 = no idempotency */
};

struct rm_alloc_resp {
	int32_t status;	      /* 0 or -errno */
	uint32_t access_type; /* always 0 (LOCAL) */
	struct rm_handle handle;
	uint64_t requested_size;
	struct rm_str path; /* file or device the client opens */
	struct rm_str uuid; /* device UUID text, empty for FS_DAX */
};

struct rm_free_req {
	struct rm_handle handle;
	struct rm_str client_id; /* empty = absent */
	uint64_t request_id;
};

struct rm_get_access_req {
	struct rm_handle handle;
	struct rm_str client_id; /* empty = absent */
};

struct rm_get_access_resp {
	int32_t status;
	struct rm_str path;
	uint64_t offset;
	uint64_t length;
	struct rm_str uuid;
};

/* AUTH_REQ: step 1 carries the client nonce and id, step 2 its proof */
struct rm_auth_req {
	uint8_t step; /* 1 or 2 */
	uint8_t data[RM_AUTH_NONCE_LEN];
	struct rm_str client_id; /* step 1; empty = absent */
	uint32_t hold_ms;	 /* step 1, optional: keep our regions this long
				  * after we are gone (clients fence by then) */
	uint32_t write_ms;	 /* step 1, optional, after hold_ms: with a hold
				  * until we return, how long after we are gone
				  * our clients may still write into our regions
				  * (RELEASE waits that long); 0: not said */
	uint8_t reader;		 /* step 1: 1 proves reader.key, 0 client.key */
};

/* AUTH_RESP: to step 1, the server nonce and proof; to step 2, zeros */
struct rm_auth_resp {
	int32_t status;
	uint8_t nonce[RM_AUTH_NONCE_LEN];
	uint8_t proof[RM_AUTH_MAC_LEN];
};

struct rm_pool_stat {
	uint32_t dax_type;   /* enum rm_dax_type */
	uint64_t total_size; /* usable bytes */
	uint64_t free_size;
	uint64_t align_bytes;
	struct rm_str path;
};

/* STATS_RESP is walked record by record with rm_stats_next(). */
struct rm_stats_resp {
	uint32_t num_pools;
	const uint8_t *records; /* borrows: first record */
	size_t records_len;
};

/*
 * COUNTERS_RESP (an addition, docs/protocol.md): u32 count, then per
 * counter u8 name_len (1..RM_COUNTER_NAME_MAX), the name (ASCII), u64
 * value.  Walked with rm_counters_next(); names a client does not know
 * are skipped, so the set can grow.
 */
#define RM_COUNTER_NAME_MAX 63
struct rm_counters_resp {
	uint32_t num;
	const uint8_t *records; /* borrows */
	size_t records_len;
};

struct rm_counter {
	struct rm_str name; /* borrows */
	uint64_t value;
};

struct rm_error_resp {
	int32_t status;
	struct rm_str msg;
};

/*
 * OWNERS_RESP (an addition, docs/protocol.md): u32 count, u32 omitted
 * (owners past the answer's bound), then per owner: client_id (u16 length
 * + bytes), u32 regions, u32 connections, u64 bytes, u32 hold_ms
 * (RM_HOLD_UNTIL_BACK: until it returns), u32 reserved (0), u64
 * away_since (unix seconds its last connection closed; 0: connected).
 * Walked with rm_owners_next().
 */
#define RM_OWNER_FIXED 32  /* bytes of an owner record besides its id */
#define RM_OWNERS_MAX 4096 /* owners one answer lists */
struct rm_owners_resp {
	uint32_t num, omitted;
	const uint8_t *records; /* borrows */
	size_t records_len;
};

struct rm_owner {
	struct rm_str id; /* borrows */
	uint32_t regions, connections, hold_ms;
	uint64_t bytes, away_since;
};

/* RELEASE_RESP: i32 status, u32 regions freed, u64 their bytes */
struct rm_release_resp {
	int32_t status;	  /* 0, -ENOENT (owns nothing), -EBUSY (connected),
			   * -EAGAIN (it left less than --recovered-hold
			   * ago: its clients may still write), -EACCES (not
			   * authenticated with client.key) */
	uint32_t regions; /* freed; with -EAGAIN: seconds left to wait */
	uint64_t bytes;
};

_Static_assert(sizeof(struct rm_handle) == RM_HANDLE_SIZE, "handle size");

/**
 * rm_hdr_decode - parse a 12-byte header
 * Return: RM_HDR_SIZE on success, 0 if fewer than 12 bytes are available,
 * -EPROTO on a wrong magic or version, -EMSGSIZE if payload_len exceeds
 * @max_payload.  @h is filled whenever 12 bytes were available, so a caller
 * can still log the type of a refused message.
 */
int rm_hdr_decode(const uint8_t *p, size_t len, size_t max_payload,
		  struct rm_hdr *h);

/* rm_hdr_put - write a header into 12 bytes at @p */
void rm_hdr_put(uint8_t *p, uint16_t type, uint32_t payload_len);

/*
 * Request decoders (server side).  @p/@len is the payload only.
 * Return: 0, or -EPROTO with *why set to upstream's error message text.
 * client_id follows the acceptance rule of docs/protocol.md §1: when it is not
 * well-formed (a length that does not fit, a NUL, not valid UTF-8) it is
 * reported as absent (len 0), not as an error.
 */
int rm_decode_alloc_req(const uint8_t *p, size_t len, struct rm_alloc_req *m,
			const char **why);
int rm_decode_free_req(const uint8_t *p, size_t len, struct rm_free_req *m,
		       const char **why);
int rm_decode_get_access_req(const uint8_t *p, size_t len,
			     struct rm_get_access_req *m, const char **why);
int rm_decode_auth_req(const uint8_t *p, size_t len, struct rm_auth_req *m,
		       const char **why);
/* RELEASE_REQ: the client_id field, required (*why "missing client_id") */
int rm_decode_release_req(const uint8_t *p, size_t len, struct rm_str *id,
			  const char **why);

/*
 * Response decoders (client side).  Return: 0 or -EPROTO.
 */
int rm_decode_alloc_resp(const uint8_t *p, size_t len, struct rm_alloc_resp *m);
int rm_decode_free_resp(const uint8_t *p, size_t len, int32_t *status);
int rm_decode_get_access_resp(const uint8_t *p, size_t len,
			      struct rm_get_access_resp *m);
int rm_decode_stats_resp(const uint8_t *p, size_t len, struct rm_stats_resp *m);
int rm_decode_error_resp(const uint8_t *p, size_t len, struct rm_error_resp *m);
int rm_decode_counters_resp(const uint8_t *p, size_t len,
			    struct rm_counters_resp *m);
int rm_decode_auth_resp(const uint8_t *p, size_t len, struct rm_auth_resp *m);
int rm_decode_owners_resp(const uint8_t *p, size_t len,
			  struct rm_owners_resp *m);
int rm_decode_release_resp(const uint8_t *p, size_t len,
			   struct rm_release_resp *m);

/**
 * rm_stats_next - decode the record at *cursor and advance it
 * @s: the decoded response; @cursor: start with 0
 * Return: 1 when @out was filled, 0 at the end, -EPROTO if truncated.
 */
int rm_stats_next(const struct rm_stats_resp *s, size_t *cursor,
		  struct rm_pool_stat *out);

/* rm_counters_next - as rm_stats_next(), one counter */
int rm_counters_next(const struct rm_counters_resp *s, size_t *cursor,
		     struct rm_counter *out);

/* rm_owners_next - as rm_stats_next(), one owner (its id: 1..127 bytes) */
int rm_owners_next(const struct rm_owners_resp *s, size_t *cursor,
		   struct rm_owner *out);

/*
 * Encoders: append one complete message (header + payload) to @b.
 * Return: 0 or -ENOMEM (-EINVAL for strings longer than the format allows).
 */
int rm_encode_alloc_req(struct buf *b, const struct rm_alloc_req *m);
int rm_encode_free_req(struct buf *b, const struct rm_free_req *m);
int rm_encode_stats_req(struct buf *b);
int rm_encode_get_access_req(struct buf *b, const struct rm_get_access_req *m);
int rm_encode_alloc_resp(struct buf *b, const struct rm_alloc_resp *m);
int rm_encode_free_resp(struct buf *b, int32_t status);
int rm_encode_get_access_resp(struct buf *b,
			      const struct rm_get_access_resp *m);
/* STATS_RESP: begin, add one record per pool, then finish. */
int rm_encode_stats_begin(struct buf *b, size_t *start);
int rm_encode_stats_add(struct buf *b, const struct rm_pool_stat *s);
void rm_encode_stats_end(struct buf *b, size_t start, uint32_t num_pools);
int rm_encode_error_resp(struct buf *b, int32_t status, const char *msg);
/* COUNTERS: the request; the response from @n name/value pairs */
int rm_encode_counters_req(struct buf *b);
int rm_encode_counters_resp(struct buf *b, const char *const *names,
			    const uint64_t *values, size_t n);
int rm_encode_auth_req(struct buf *b, const struct rm_auth_req *m);
int rm_encode_auth_resp(struct buf *b, const struct rm_auth_resp *m);
/* OWNERS: the request; the response begun, one record per owner, ended */
int rm_encode_owners_req(struct buf *b);
int rm_encode_owners_begin(struct buf *b, size_t *start);
int rm_encode_owners_add(struct buf *b, const struct rm_owner *o);
void rm_encode_owners_end(struct buf *b, size_t start, uint32_t num,
			  uint32_t omitted);
int rm_encode_release_req(struct buf *b, struct rm_str client_id);
int rm_encode_release_resp(struct buf *b, const struct rm_release_resp *m);

/* rm_str_from - a borrowed rm_str over a C string (NULL gives empty) */
struct rm_str rm_str_from(const char *s);

/* rm_str_eq - byte equality of two borrowed strings */
bool rm_str_eq(struct rm_str a, struct rm_str b);

#endif
