/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.c - the KV event stream of maru-server (see events.h)
 *
 * Design.  The store calls ev_stored()/ev_removed()/ev_cleared() as it
 * changes the index; each appends one event to the batch being built
 * (msgpack-c's packer into a msgpack_sbuffer: a memcpy-sized cost per
 * event, nothing else).  The loop calls ev_flush() once per iteration,
 * before it sleeps: the batch becomes one message (a header packed in
 * front of the events) and goes to the socket with ZMQ_DONTWAIT.  A
 * batch that reaches EV_BATCH_MAX events or EV_BATCH_BYTES is sealed at
 * once (an eviction burst of 50000 keys becomes ~50 messages).
 *
 * The socket is an XPUB (a PUB to every SUB; it also hands us the
 * subscriptions) with ZMQ_SNDHWM EV_SNDHWM and lossy delivery: libzmq
 * queues each subscriber's messages in its pipe and drops what does not
 * fit, so a subscriber that stalls loses messages (it sees the gap in the
 * sequence numbers) and the server never waits.  The socket is never in
 * the loop's epoll set: subscription messages are read with ZMQ_DONTWAIT
 * from the tick (and from ev_flush() while messages are held).
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

#include <msgpack.h>
#include <zmq.h>

#include "index.h"
#include "log.h"

struct ev_msg {
	uint64_t seq;
	msgpack_sbuffer body; /* owns: the payload */
};

struct mds_events {
	void *ctx;	       /* owns: the libzmq context */
	void *sock;	       /* owns: the XPUB socket */
	const char *server_id; /* borrows */
	uint64_t stream;       /* random, new at each start (a restart) */
	msgpack_sbuffer evs;   /* owns: the events of the open batch */
	msgpack_packer pk;     /* packs into @evs */
	uint32_t n;	       /* events in @evs */
	struct ev_msg held[EV_HOLD_MAX]; /* owns: before a subscriber */
	uint32_t nheld;
	struct ev_counters c;
};

static const char *const reason_name[EVR_N] = {
	[EVR_DELETED] = "deleted",
	[EVR_EVICTED] = "evicted",
	[EVR_OWNER_GONE] = "owner_gone",
	[EVR_EXPIRED] = "expired",
};

static void pack_str(msgpack_packer *pk, const char *s, size_t n)
{
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

#define PACK_LIT(pk, lit) pack_str(pk, lit, sizeof(lit) - 1)

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
	msgpack_sbuffer_init(&ev->evs);
	msgpack_packer_init(&ev->pk, &ev->evs, msgpack_sbuffer_write);
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
	msgpack_sbuffer_destroy(&ev->evs);
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
		msgpack_sbuffer_destroy(&ev->held[i].body);
	zmq_close(ev->sock);
	zmq_ctx_term(ev->ctx);
	msgpack_sbuffer_destroy(&ev->evs);
	free(ev);
}

/* the key as the client sent it: str, bin or an integer */
static void pack_key(msgpack_packer *pk, uint8_t tag, const uint8_t *key,
		     uint32_t klen)
{
	uint64_t v = 0;

	switch (tag) {
	case IX_STR:
		pack_str(pk, (const char *)key, klen);
		break;
	case IX_BIN:
		msgpack_pack_bin(pk, klen);
		msgpack_pack_bin_body(pk, key, klen);
		break;
	default:
		memcpy(&v, key, klen < 8 ? klen : 8); /* little-endian */
		if (tag == IX_NINT)
			msgpack_pack_int64(pk, (int64_t)v);
		else
			msgpack_pack_uint64(pk, v);
		break;
	}
}

static void send_msg(struct mds_events *ev, struct ev_msg *m)
{
	uint8_t seq[8];
	int i;

	for (i = 0; i < 8; i++)
		seq[i] = (uint8_t)(m->seq >> (56 - 8 * i));
	/* lossy XPUB: only a failure inside libzmq refuses a frame */
	if (zmq_send(ev->sock, EV_TOPIC, sizeof(EV_TOPIC) - 1,
		     ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    zmq_send(ev->sock, seq, sizeof(seq), ZMQ_SNDMORE | ZMQ_DONTWAIT) <
		    0 ||
	    zmq_send(ev->sock, m->body.data, m->body.size, ZMQ_DONTWAIT) < 0)
		ev->c.dropped++;
	else
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
		send_msg(ev, &ev->held[i]);
		msgpack_sbuffer_destroy(&ev->held[i].body);
	}
	ev->nheld = 0;
	ev->c.held = 0;
}

/* the open batch becomes a message: sent, or held */
static void seal(struct mds_events *ev)
{
	struct ev_msg m;
	struct timespec ts;
	msgpack_packer hp;

	if (!ev->n)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	m.seq = ++ev->c.seq;
	msgpack_sbuffer_init(&m.body);
	msgpack_packer_init(&hp, &m.body, msgpack_sbuffer_write);
	msgpack_pack_map(&hp, 5);
	PACK_LIT(&hp, "server_id");
	pack_str(&hp, ev->server_id, strlen(ev->server_id));
	PACK_LIT(&hp, "stream");
	msgpack_pack_uint64(&hp, ev->stream);
	PACK_LIT(&hp, "seq");
	msgpack_pack_uint64(&hp, m.seq);
	PACK_LIT(&hp, "ts");
	msgpack_pack_double(&hp, (double)ts.tv_sec + ts.tv_nsec / 1e9);
	PACK_LIT(&hp, "events");
	msgpack_pack_array(&hp, ev->n);
	msgpack_sbuffer_write(&m.body, ev->evs.data, ev->evs.size);
	ev->n = 0;
	ev->evs.size = 0; /* keep its memory for the next batch */
	if (!m.body.data) {
		ev->c.dropped++; /* out of memory */
		return;
	}
	if (ev->c.subscribed) {
		send_msg(ev, &m);
		msgpack_sbuffer_destroy(&m.body);
	} else if (ev->nheld < EV_HOLD_MAX) {
		ev->held[ev->nheld++] = m;
		ev->c.held = ev->nheld;
	} else {
		ev->c.dropped++;
		msgpack_sbuffer_destroy(&m.body);
	}
}

/* one more event is in @evs */
static void added(struct mds_events *ev)
{
	ev->c.events++;
	if (++ev->n >= EV_BATCH_MAX || ev->evs.size >= EV_BATCH_BYTES)
		seal(ev);
}

void ev_stored(struct mds_events *ev, uint8_t tag, const uint8_t *key,
	       uint32_t klen, const char *inst, uint32_t inst_len,
	       uint64_t region, uint64_t offset, uint64_t length)
{
	msgpack_packer *pk;

	if (!ev)
		return;
	pk = &ev->pk;
	msgpack_pack_map(pk, 6);
	PACK_LIT(pk, "type");
	PACK_LIT(pk, "stored");
	PACK_LIT(pk, "key");
	pack_key(pk, tag, key, klen);
	PACK_LIT(pk, "instance");
	if (inst)
		pack_str(pk, inst, inst_len);
	else
		msgpack_pack_nil(pk);
	PACK_LIT(pk, "region");
	msgpack_pack_uint64(pk, region);
	PACK_LIT(pk, "offset");
	msgpack_pack_uint64(pk, offset);
	PACK_LIT(pk, "length");
	msgpack_pack_uint64(pk, length);
	added(ev);
}

void ev_removed(struct mds_events *ev, uint8_t tag, const uint8_t *key,
		uint32_t klen, enum ev_reason why)
{
	msgpack_packer *pk;

	if (!ev)
		return;
	pk = &ev->pk;
	msgpack_pack_map(pk, 3);
	PACK_LIT(pk, "type");
	PACK_LIT(pk, "removed");
	PACK_LIT(pk, "key");
	pack_key(pk, tag, key, klen);
	PACK_LIT(pk, "reason");
	pack_str(pk, reason_name[why], strlen(reason_name[why]));
	added(ev);
}

void ev_cleared(struct mds_events *ev)
{
	if (!ev)
		return;
	msgpack_pack_map(&ev->pk, 1);
	PACK_LIT(&ev->pk, "type");
	PACK_LIT(&ev->pk, "cleared");
	added(ev);
}

void ev_flush(struct mds_events *ev)
{
	if (!ev)
		return;
	if (!ev->c.subscribed)
		read_subs(ev);
	seal(ev);
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
