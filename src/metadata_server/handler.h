/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handler.h - one request body in, one reply body out
 *
 * mds_handle() is everything between the ZeroMQ envelope and the state:
 * decode (codec.h), act (store.h), encode the response with the exact
 * keys and types of metadata-protocol.md §6.  It never fails silently:
 * every body gets exactly one reply, an `{"error": ...}` map when the
 * request cannot be served, echoing the request's type, flags and
 * sequence whenever its 16-byte header could be read.
 *
 * Context: the server's main thread (it owns @s).
 */
#ifndef MARU_MDS_HANDLER_H
#define MARU_MDS_HANDLER_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "store.h"

#define MDS_SERVER_VERSION 1

/**
 * mds_prefetch - start loading the index bucket of a LOOKUP_KV or
 * EXISTS_KV request's key, before the request is handled
 * @body: the request frame (header + payload), as for mds_handle()
 * Return: the key's index hash for mds_prefetch_entry(), or 0 when the
 * request is of another type or its key is not where a plain encoding
 * puts it (nothing was prefetched; the request is handled as usual).
 */
uint64_t mds_prefetch(struct mds *s, const uint8_t *body, size_t len);

/* mds_prefetch_entry - the next stage: the bucket's first entry */
void mds_prefetch_entry(struct mds *s, uint64_t h);

/* mds_prefetch_next - the last stage: the second entry, when the first
 * (loaded by now) is another key */
void mds_prefetch_next(struct mds *s, uint64_t h);

/**
 * mds_handle - serve one request
 * @body, @len: the body frame (borrowed for the call)
 * @peer: where it came from (dead-client detection); may be NULL
 * @out: reset, then filled with the reply body (header + payload)
 */
void mds_handle(struct mds *s, const uint8_t *body, size_t len,
		struct mds_peer *peer, struct buf *out);

#endif
