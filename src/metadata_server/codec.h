/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec.h - metadata protocol requests: strict decoding of one body frame
 * (16-byte header + MessagePack map) into struct mds_req, and the error
 * reply (docs/protocol.md §2, with its
 * additions)
 *
 * mds_decode() checks everything a request can get wrong before the
 * server acts on it: header magic/version/length, that the payload is one
 * well-formed map with str keys and nothing after it, the type of every
 * known field, required fields, and -- for the batch forms -- every
 * element of the list, so that a bad element at position 1000 fails the
 * whole request before the first 999 were applied.  Unknown keys are
 * skipped.  Lists are left in place (struct mds_list) and walked again
 * with the mds_next_*() iterators, which cannot fail on a decoded request.
 *
 * Strings and keys borrow from the body: the request is valid as long as
 * the body buffer is.
 *
 * Context: pure functions; any thread.
 */
#ifndef MARU_MDS_CODEC_H
#define MARU_MDS_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "index.h"
#include "mds_proto.h"
#include "msgpk.h"
#include "rm_proto.h"

#define MDS_MAX_BATCH (1u << 20) /* elements in one list */
#define MDS_REPORT_MAX 10000	 /* REPORT_STATS entries recorded */

/* A key as decoded: str, bin or integer (kept apart by its tag). */
struct mds_key {
	const uint8_t *ptr; /* borrows: str/bin bytes; unused for ints */
	uint32_t len;
	uint8_t tag;	 /* enum key_tag (keyform.h) */
	uint8_t ibuf[8]; /* integer keys: the value, little-endian */
};

/* ix_key view of a decoded key; valid while @k is */
static inline struct ix_key mds_key_ix(const struct mds_key *k)
{
	struct ix_key x = {k->tag >= KEY_UINT ? k->ibuf : k->ptr, k->len,
			   k->tag};

	return x;
}

/* A borrowed string; ptr == NULL means absent (or nil). */
struct mds_str {
	const char *ptr;
	uint32_t len;
};

/* A list left in the payload: n elements starting at p. */
struct mds_list {
	const uint8_t *p; /* borrows */
	const uint8_t *end;
	uint32_t n;
};

/* One BATCH_REGISTER_KV element (also the REGISTER_KV fields). */
struct mds_reg {
	struct mds_key key;
	uint64_t region_id;
	uint64_t kv_offset;
	uint64_t kv_length;
};

/* One REPORT_STATS element, defaults filled in. */
struct mds_report {
	struct mds_str client_id; /* default "_unknown" */
	struct mds_str op_type;	  /* default "unknown" */
	struct mds_str result;	  /* default "none" */
	int64_t size;
	double latency_us;
};

/* a pin's longest life (49 days): longer ones are cut to it */
#define MDS_TTL_MAX_MS ((uint64_t)UINT32_MAX)

/* HEARTBEAT: the remote path's figures of a client of maru-agent */
struct mds_remote_rep {
	bool has_on;	      /* "remote" was sent ... */
	bool on;	      /* ... true: its bytes go through the agent */
	uint64_t n[MDS_RT_N]; /* "remote_*": growth since its last report */
};

struct mds_req {
	struct mds_hdr hdr;
	struct mds_str instance_id; /* REQUEST/RETURN_ALLOC, HEARTBEAT,
				     * HANDSHAKE (optional there) */
	struct mds_str lease_id;    /* REQUEST_ALLOC, HEARTBEAT */
	struct mds_str exclude;	    /* LIST_ALLOCATIONS */
	uint64_t size;		    /* REQUEST_ALLOC */
	uint64_t region_id;	    /* RETURN_ALLOC */
	struct mds_reg reg;	    /* REGISTER_KV; reg.key for all *_KV */
	struct mds_list list;	    /* keys / entries of batches */
	bool lease_release;	    /* HEARTBEAT */
	bool notices;		    /* HEARTBEAT: takes "evicted" notices */
	uint64_t ack;	     /* HEARTBEAT, REQUEST_ALLOC: "evicted_ack" */
	uint32_t page_size;  /* HEARTBEAT, REQUEST_ALLOC: "page_size" */
	struct mds_str host; /* HEARTBEAT, REQUEST_ALLOC: additions */
	uint64_t pid;
	uint64_t idx[3]; /* HEARTBEAT: shared-index hits, misses, fallbacks */
	/* HEARTBEAT: lookups the client answered itself (MDS_LK_*) */
	uint64_t lk[MDS_LK_N];
	struct mds_remote_rep remote; /* HEARTBEAT: "remote", "remote_*" */
	bool uncounted;	 /* lookups: "count": false (the client counts) */
	uint64_t ttl_ms; /* PIN_KV, BATCH_PIN_KV: a soft pin's life; 0 none */
};

/* Result of mds_decode besides 0. */
enum {
	MDS_EBADHDR = -1, /* fewer than 16 bytes: nothing to echo */
	MDS_EINVAL = -2,  /* header parsed, request refused */
};

/**
 * mds_decode - decode one body frame
 * @body, @len: borrowed for the life of @req
 * @why: on error, a short reason (static or in @whybuf)
 * Return: 0; MDS_EBADHDR when the header itself is missing (req->hdr is
 * zeroed); MDS_EINVAL otherwise (req->hdr holds the request's header so
 * that the error reply can echo its type, flags and sequence).
 */
int mds_decode(const uint8_t *body, size_t len, struct mds_req *req,
	       const char **why, char *whybuf, size_t whylen);

/**
 * mds_peek_key - the key of a plain LOOKUP_KV / EXISTS_KV body (a
 * one-entry map {"key": key}), without decoding or checking the rest
 * @body, @len: borrowed for the life of @k
 * Return: 0, or -EPROTO for any other body (left to mds_decode()).
 */
int mds_peek_key(const uint8_t *body, size_t len, struct mds_key *k);

/* List iterators over a list that mds_decode() accepted. */
struct mds_iter {
	struct mp_rd r;
	uint32_t left;
};

static inline void mds_iter_init(struct mds_iter *it, const struct mds_list *l)
{
	mp_rd_init(&it->r, l->p, l->p ? (size_t)(l->end - l->p) : 0);
	it->left = l->n;
}

/* Return: true with @k filled, false at the end. */
bool mds_next_key(struct mds_iter *it, struct mds_key *k);
bool mds_next_reg(struct mds_iter *it, struct mds_reg *e);
bool mds_next_report(struct mds_iter *it, struct mds_report *e);

#define MDS_HANDLE_ENC_MAX 72 /* a handle map with four uint64 values */
/* a LOOKUP hit up to kv_offset's value: map4 "found" true "handle" H
 * "kv_offset" */
#define MDS_HIT_PREFIX_MAX (1 + 6 + 1 + 7 + MDS_HANDLE_ENC_MAX + 10)
#define MDS_HIT_HANDLE_OFF 15 /* where H starts in that prefix */

/**
 * mds_encode_hit_prefix - the constant start of every LOOKUP_KV hit on a
 * region: `{"found": true, "handle": <h>, "kv_offset": ` (the 4-key map
 * header included); the handle map itself starts at MDS_HIT_HANDLE_OFF
 * @out: MDS_HIT_PREFIX_MAX bytes
 * Return: bytes written, or 0 when out of memory
 */
size_t mds_encode_hit_prefix(const struct rm_handle *h, uint8_t *out);

/**
 * mds_put_hdr - reserve and write a response header at the end of @out
 * Return: the offset of the header, for mds_end_reply().
 */
size_t mds_begin_reply(struct mp_wr *w, const struct mds_hdr *req);

/* mds_end_reply - patch payload_length of the reply begun at @at */
void mds_end_reply(struct mp_wr *w, size_t at);

/**
 * mds_error_reply - append `{"error": msg}` with a header that echoes
 * @req's type (| 0x80), flags and sequence, or type 0x80, flags 0 and
 * sequence 0 when @req is NULL (no header could be read)
 */
void mds_error_reply(struct mp_wr *w, const struct mds_hdr *req,
		     const char *msg);

/* why a request naming an instance another client holds is refused */
#define MDS_HELD_WHY                                                           \
	"instance_id is held by another client (a connection, or the lease "   \
	"of one that went away, until it expires)"

/**
 * mds_held_reply - the error reply to a request naming an instance that
 * another client holds: `{"error": MDS_HELD_WHY, "held": true}`, so that
 * a client can tell this refusal from others without reading the text
 * (REQUEST_ALLOC's own refusal carries the same key)
 */
void mds_held_reply(struct mp_wr *w, const struct mds_hdr *req);

#endif
