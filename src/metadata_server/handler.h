/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handler.h - one request body in, one reply body out
 *
 * mds_handle() is everything between the ZeroMQ envelope and the state:
 * decode (codec.h), act (store.h), encode the response with the exact
 * keys and types of docs/protocol.md §2.  It never fails silently:
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

/* mds_turn_done - the loop is about to wait: the next request's time
 * starts at its own arrival (mds_handle) */
static inline void mds_turn_done(struct mds *s)
{
	s->req_t = 0;
}

/**
 * mds_handle - serve one request
 * @body, @len: the body frame (borrowed for the call)
 * @peer: where it came from (dead-client detection); may be NULL
 * @out: reset, then filled with the reply body (header + payload)
 * @wp: where to give a request that must wait for the resource manager
 *   (REQUEST_ALLOC, GET_STATS/GET_USAGE on stale pool figures); NULL when
 *   the caller cannot wait (then such a request fails or uses what is
 *   known)
 * Return: 0 (the reply is in @out), or 1: *@wp gives a parked request,
 * @out is empty; the caller sets its done/arg/conn at once (the RM
 * session calls done() later, from the loop) and then answers it with
 * mds_resume() or, when its connection went away, mds_wait_abandon().
 */
int mds_handle(struct mds *s, const uint8_t *body, size_t len,
	       struct mds_peer *peer, struct buf *out, struct mds_wait **wp);

/**
 * mds_resume - the reply to a parked request whose wait is done
 * @w: taken (freed) when answered
 * @out: reset, then filled with the reply body
 * Return: 0 (answered), or 1: @w waits again (a REQUEST_ALLOC that found
 * the pool full waits for eviction to free room): @out is empty, @w stays
 * the caller's parked request and its done() comes again.
 */
int mds_resume(struct mds *s, struct mds_wait *w, struct buf *out);

/* mds_wait_abandon - nobody waits for @w any more: undo it; @w taken */
void mds_wait_abandon(struct mds *s, struct mds_wait *w);

/* mds_wait_free - free a wait and its copies (NULL is fine) */
void mds_wait_free(struct mds_wait *w);

#endif
