/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.c - the KV event stream of maru-server (see events.h)
 *
 * Design.  The store calls ev_stored()/ev_removed()/ev_cleared() as it
 * changes the index; each appends one event to the batch being built
 * with the server's own MessagePack writer (msgpk.h: inline, into a
 * struct buf; msgpack-c's packer calls its write callback once per item,
 * about 20 times per event, and cost 9 % of the server's time at 220 k
 * REGISTER_KV/s, docs/performance.md).  The loop calls ev_flush() once per
 * iteration, before it sleeps: the batch becomes one message (a header packed
 * in front of the events, both copied once into the zmq_msg) and goes to the
 * socket with ZMQ_DONTWAIT.  A batch that reaches EV_BATCH_MAX events or
 * EV_BATCH_BYTES is sealed at once (an eviction burst of 50000 keys becomes ~50
 * messages).
 *
 * The socket is an XPUB (a PUB to every SUB; it also hands us the
 * subscriptions) with ZMQ_SNDHWM EV_SNDHWM and lossy delivery: libzmq
 * queues each subscriber's messages in its pipe and drops what does not
 * fit, so a subscriber that stalls loses messages (it sees the gap in the
 * sequence numbers) and the server never waits.  The socket is never in
 * the loop's epoll set: subscription messages are read with ZMQ_DONTWAIT
 * from the tick only (every SERVER_TICK_MS), not once per loop turn.
 *
 * Held messages.  A PUB sends nothing to subscribers that have not joined
 * yet, so the first messages of a server (its "cleared") would reach
 * nobody: until the first subscription arrives they are kept in @held (at
 * most EV_HOLD_MAX; later ones are dropped and counted) and sent, in
 * order, when it does.
 *
 * Ownership: struct mds_events owns the libzmq context and socket, the
 * batch buffer and the held messages; it borrows @server_id.
 *
 * Context: the main thread only.
 */
#include "events.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>

#include <zmq.h>

#include "buf.h"
#include "index.h"
#include "log.h"

struct ev_msg {
	uint64_t seq;
	struct buf body; /* owns: the payload */
};

struct mds_events {
	void *ctx;	       /* owns: the libzmq context */
	void *sock;	       /* owns: the XPUB socket */
	const char *server_id; /* borrows */
	uint64_t stream;       /* random, new at each start (a restart) */
	struct buf evs;	       /* owns: the events of the open batch */
	struct mp_wr w;	       /* writes into @evs */
	uint32_t n;	       /* events in @evs */
	struct ev_msg held[EV_HOLD_MAX]; /* owns: before a subscriber */
	uint32_t nheld;
	struct ev_counters c;
	void (*before_send)(void *); /* ev_before_send() */
	void *before_arg;
};

static const char *const reason_name[EVR_N] = {
	[EVR_DELETED] = "deleted",
	[EVR_EVICTED] = "evicted",
	[EVR_OWNER_GONE] = "owner_gone",
	[EVR_EXPIRED] = "expired",
};

void ev_before_send(struct mds_events *ev, void (*fn)(void *), void *arg)
{
	ev->before_send = fn;
	ev->before_arg = arg;
}

int ev_open(struct mds_events **out, const char *endpoint,
	    const char *server_id)
{
	struct mds_events *ev = calloc(1, sizeof(*ev));
	int hwm = EV_SNDHWM, zero = 0;
	int rc = -ENOMEM;

	if (!ev)
		return -ENOMEM;
	ev->server_id = server_id;
	if (getrandom(&ev->stream, sizeof(ev->stream), 0) !=
	    (ssize_t)sizeof(ev->stream))
		ev->stream = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	ev->w.b = &ev->evs;
	ev->ctx = zmq_ctx_new();
	if (!ev->ctx)
		goto out_free;
	ev->sock = zmq_socket(ev->ctx, ZMQ_XPUB);
	if (!ev->sock)
		goto out_ctx;
	/* bounded per subscriber; nothing lingers at close */
	if (zmq_setsockopt(ev->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) < 0 ||
	    zmq_setsockopt(ev->sock, ZMQ_LINGER, &zero, sizeof(zero)) < 0)
		goto out_sock;
	if (zmq_bind(ev->sock, endpoint) < 0) {
		rc = -zmq_errno();
		log_err("--events-bind %s: %s", endpoint, zmq_strerror(-rc));
		goto out_sock;
	}
	*out = ev;
	return 0;

out_sock:
	if (rc == -ENOMEM)
		rc = -zmq_errno();
	zmq_close(ev->sock);
out_ctx:
	zmq_ctx_term(ev->ctx);
out_free:
	free(ev);
	return rc;
}

void ev_close(struct mds_events *ev)
{
	uint32_t i;

	if (!ev)
		return;
	ev_flush(ev);
	for (i = 0; i < ev->nheld; i++)
		buf_free(&ev->held[i].body);
	zmq_close(ev->sock);
	zmq_ctx_term(ev->ctx);
	buf_free(&ev->evs);
	free(ev);
}

/* the key as the client sent it: str, bin or an integer */
static void put_key(struct mp_wr *w, uint8_t tag, const uint8_t *key,
		    uint32_t klen)
{
	uint64_t v = 0;

	switch (tag) {
	case KEY_STR:
		mp_put_str(w, key, klen);
		break;
	case KEY_BIN:
		mp_put_bin(w, key, klen);
		break;
	default:
		memcpy(&v, key, klen < 8 ? klen : 8); /* little-endian */
		if (tag == KEY_NINT)
			mp_put_int(w, (int64_t)v);
		else
			mp_put_uint(w, v);
		break;
	}
}

/* [topic, seq, @hdr + @evs]: the payload copied once, into the zmq_msg */
static void send_parts(struct mds_events *ev, uint64_t seq, const void *hdr,
		       size_t hlen, const void *evs, size_t elen)
{
	uint8_t be[8];
	zmq_msg_t m;
	int i;

	/* what the events tell is published first (a batch may fill and
	 * leave in the middle of a turn) */
	if (ev->before_send)
		ev->before_send(ev->before_arg);
	for (i = 0; i < 8; i++)
		be[i] = (uint8_t)(seq >> (56 - 8 * i));
	if (zmq_msg_init_size(&m, hlen + elen) < 0) {
		ev->c.dropped++;
		return;
	}
	memcpy(zmq_msg_data(&m), hdr, hlen);
	if (elen)
		memcpy((uint8_t *)zmq_msg_data(&m) + hlen, evs, elen);
	/* lossy XPUB: only a failure inside libzmq refuses a frame */
	if (zmq_send(ev->sock, EV_TOPIC, sizeof(EV_TOPIC) - 1,
		     ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(ev->sock, be, sizeof(be), ZMQ_SNDMORE | ZMQ_DONTWAIT) <
		    0 ||
	    zmq_msg_send(&m, ev->sock, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&m);
		ev->c.dropped++;
		return;
	}
	ev->c.messages++;
}

/* read the subscription messages libzmq has for us */
static void read_subs(struct mds_events *ev)
{
	uint8_t b[256];
	uint32_t i;

	while (zmq_recv(ev->sock, b, sizeof(b), ZMQ_DONTWAIT) >= 0)
		if (b[0] == 1)
			ev->c.subscribed = true;
	if (!ev->c.subscribed || !ev->nheld)
		return;
	for (i = 0; i < ev->nheld; i++) {
		send_parts(ev, ev->held[i].seq, ev->held[i].body.data,
			   ev->held[i].body.len, NULL, 0);
		buf_free(&ev->held[i].body);
	}
	ev->nheld = 0;
	ev->c.held = 0;
}

/* the open batch becomes a message: sent, or held */
static void seal(struct mds_events *ev)
{
	struct ev_msg m = {0};
	struct timespec ts;
	struct buf hdr = {0};
	struct mp_wr hw = {&hdr, 0};

	if (!ev->n)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	m.seq = ++ev->c.seq;
	mp_put_map(&hw, 5);
	mp_put_key(&hw, "server_id");
	mp_put_str(&hw, ev->server_id, (uint32_t)strlen(ev->server_id));
	mp_put_key(&hw, "stream");
	mp_put_uint(&hw, ev->stream);
	mp_put_key(&hw, "seq");
	mp_put_uint(&hw, m.seq);
	mp_put_key(&hw, "ts");
	mp_put_float(&hw, (double)ts.tv_sec + ts.tv_nsec / 1e9);
	mp_put_key(&hw, "events");
	mp_put_array(&hw, ev->n);
	ev->n = 0;
	if (hw.err || ev->w.err) {
		ev->c.dropped++; /* out of memory */
	} else if (ev->c.subscribed) {
		send_parts(ev, m.seq, hdr.data, hdr.len, ev->evs.data,
			   ev->evs.len);
	} else if (ev->nheld < EV_HOLD_MAX &&
		   buf_put(&hdr, ev->evs.data, ev->evs.len) == 0) {
		m.body = hdr; /* gives */
		hdr = (struct buf){0};
		ev->held[ev->nheld++] = m;
		ev->c.held = ev->nheld;
	} else {
		ev->c.dropped++;
	}
	buf_free(&hdr);
	buf_reset(&ev->evs); /* keeps its memory for the next batch */
	ev->w.err = 0;
}

/* one more event is in @evs */
static void added(struct mds_events *ev)
{
	ev->c.events++;
	if (++ev->n >= EV_BATCH_MAX || ev->evs.len >= EV_BATCH_BYTES)
		seal(ev);
}

void ev_stored(struct mds_events *ev, uint8_t tag, const uint8_t *key,
	       uint32_t klen, const char *inst, uint32_t inst_len,
	       uint64_t region, uint64_t offset, uint64_t length)
{
	struct mp_wr *w;

	if (!ev)
		return;
	w = &ev->w;
	mp_put_map(w, 6);
	mp_put_key(w, "type");
	mp_put_key(w, "stored");
	mp_put_key(w, "key");
	put_key(w, tag, key, klen);
	mp_put_key(w, "instance");
	if (inst)
		mp_put_str(w, inst, inst_len);
	else
		mp_put_nil(w);
	mp_put_key(w, "region");
	mp_put_uint(w, region);
	mp_put_key(w, "offset");
	mp_put_uint(w, offset);
	mp_put_key(w, "length");
	mp_put_uint(w, length);
	added(ev);
}

void ev_removed(struct mds_events *ev, uint8_t tag, const uint8_t *key,
		uint32_t klen, enum ev_reason why)
{
	struct mp_wr *w;

	if (!ev)
		return;
	w = &ev->w;
	mp_put_map(w, 3);
	mp_put_key(w, "type");
	mp_put_key(w, "removed");
	mp_put_key(w, "key");
	put_key(w, tag, key, klen);
	mp_put_key(w, "reason");
	mp_put_str(w, reason_name[why], (uint32_t)strlen(reason_name[why]));
	added(ev);
}

void ev_cleared(struct mds_events *ev)
{
	if (!ev)
		return;
	mp_put_map(&ev->w, 1);
	mp_put_key(&ev->w, "type");
	mp_put_key(&ev->w, "cleared");
	added(ev);
}

void ev_flush(struct mds_events *ev)
{
	if (ev)
		seal(ev); /* subscriptions: from the tick (no recv per turn) */
}

void ev_tick(struct mds_events *ev)
{
	if (ev)
		read_subs(ev);
}

void ev_counters(const struct mds_events *ev, struct ev_counters *out)
{
	if (ev)
		*out = ev->c;
	else
		memset(out, 0, sizeof(*out));
}

void ev_encode(const struct mds_events *ev, struct mp_wr *w)
{
	struct ev_counters c;

	ev_counters(ev, &c);
	mp_put_map(w, 6);
	mp_put_key(w, "enabled");
	mp_put_bool(w, ev != NULL);
	mp_put_key(w, "events");
	mp_put_uint(w, c.events);
	mp_put_key(w, "messages");
	mp_put_uint(w, c.messages);
	mp_put_key(w, "dropped");
	mp_put_uint(w, c.dropped);
	mp_put_key(w, "seq");
	mp_put_uint(w, c.seq);
	mp_put_key(w, "held");
	mp_put_uint(w, c.held);
}
