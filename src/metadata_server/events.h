/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.h - maru-server's KV event stream (--events-bind;
 * docs/protocol.md "KV events", docs/metadata-server.md "KV events")
 *
 * What happens to keys -- stored, removed (with a reason), cleared -- is
 * published on a libzmq XPUB socket (a PUB that also tells us when a
 * subscriber joins) as batches: the events of one loop iteration go out
 * as one message of three frames [topic "maru", seq (8 bytes, big
 * endian), msgpack payload], each message numbered by a per-server
 * sequence so that a subscriber sees a gap.  The loop never waits on the
 * socket: every send is ZMQ_DONTWAIT, libzmq's own I/O thread does the
 * writing, and a subscriber that does not read loses messages at its
 * ZMQ_SNDHWM, never the server.  Until the first subscriber joined, the
 * messages are held (at most EV_HOLD_MAX), so that the first one sees the
 * stream from its start (the "cleared" of a fresh server).
 *
 * Every ev_* function takes a NULL @ev (events off) and then does nothing.
 *
 * Context: the server's main thread only (libzmq's I/O thread is the
 * library's own business).
 */
#ifndef MARU_MDS_EVENTS_H
#define MARU_MDS_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "msgpk.h"

#define EV_TOPIC "maru"
#define EV_SNDHWM 1000	     /* messages queued per subscriber */
#define EV_BATCH_MAX 1024    /* events per message */
#define EV_BATCH_BYTES 65536 /* payload bytes per message (about) */
#define EV_HOLD_MAX 256	     /* messages held until a first subscriber */

/* why a key left the index (the "reason" of a removed event) */
enum ev_reason {
	EVR_DELETED = 0, /* DELETE_KV */
	EVR_EVICTED,	 /* eviction, its owner alive */
	EVR_OWNER_GONE,	 /* eviction of a key whose owner is gone */
	EVR_EXPIRED,	 /* its region no longer exists at the RM */
	EVR_N
};

struct mds_events;

/* what GET_STATS "events" reports */
struct ev_counters {
	uint64_t events;   /* events made */
	uint64_t messages; /* messages handed to libzmq */
	uint64_t dropped;  /* messages lost before libzmq took them */
	uint64_t seq;	   /* the last sequence number used */
	uint64_t held;	   /* messages waiting for a first subscriber */
	bool subscribed;   /* a subscriber has joined */
};

/**
 * ev_open - bind the event socket
 * @out: gives the stream; release with ev_close()
 * @endpoint: a libzmq endpoint, e.g. "tcp://127.0.0.1:5556" (borrowed)
 * @server_id: sent in every message (borrowed for the stream's life)
 * Return: 0 or -errno (the bind failed: logged).
 */
int ev_open(struct mds_events **out, const char *endpoint,
	    const char *server_id);
void ev_close(struct mds_events *ev);

/* a key was stored: @tag is its enum key_tag; @inst may be NULL */
void ev_stored(struct mds_events *ev, uint8_t tag, const uint8_t *key,
	       uint32_t klen, const char *inst, uint32_t inst_len,
	       uint64_t region, uint64_t offset, uint64_t length);
void ev_removed(struct mds_events *ev, uint8_t tag, const uint8_t *key,
		uint32_t klen, enum ev_reason why);
/* the index is empty: a server that starts without state */
void ev_cleared(struct mds_events *ev);

/* ev_before_send - @fn(@arg) runs before any message leaves (the store's
 * shared index publishes what the events tell) */
void ev_before_send(struct mds_events *ev, void (*fn)(void *), void *arg);

/*
 * ev_flush - send (or hold) what the loop iteration collected, before it
 * sleeps
 */
void ev_flush(struct mds_events *ev);
/* from the loop's tick: reads subscription messages, sends held ones */
void ev_tick(struct mds_events *ev);

void ev_counters(const struct mds_events *ev, struct ev_counters *out);
/* GET_STATS "events": a map (enabled false when @ev is NULL) */
void ev_encode(const struct mds_events *ev, struct mp_wr *w);

#endif
