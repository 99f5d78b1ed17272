/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mds_events.c - the KV event stream (events.c) against a libzmq SUB
 * socket on an ipc:// endpoint, decoded with msgpack-c's unpacker (the
 * reference decoder): the three frames, the payload's keys, each event's
 * fields (str, bin and integer keys), one message per flush, sequence
 * numbers without gaps, a batch split at EV_BATCH_MAX, messages held
 * until the first subscriber and dropped (counted) past EV_HOLD_MAX, and
 * a NULL stream that does nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <msgpack.h>
#include <zmq.h>

#include "events.h"
#include "index.h"

static char ep[128];
static void *zctx, *sub;

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* a SUB on @ep that has subscribed to everything */
static void sub_open(void)
{
	int t = 5000;

	zctx = zmq_ctx_new();
	sub = zmq_socket(zctx, ZMQ_SUB);
	assert_non_null(sub);
	assert_int_equal(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0), 0);
	assert_int_equal(zmq_setsockopt(sub, ZMQ_RCVTIMEO, &t, sizeof(t)), 0);
	assert_int_equal(zmq_connect(sub, ep), 0);
}

static void sub_close(void)
{
	zmq_close(sub);
	zmq_ctx_term(zctx);
}

/* the stream sees the subscription (deadline 5 s), as the tick would */
static void wait_subscribed(struct mds_events *ev)
{
	struct ev_counters c;
	uint64_t end = mono_ms() + 5000;

	do {
		ev_tick(ev);
		ev_counters(ev, &c);
		if (c.subscribed)
			return;
		usleep(1000);
	} while (mono_ms() < end);
	fail_msg("no subscription seen");
}

static char *payload; /* the last message's bytes (recv_msg) */

/* one message: its seq and its unpacked payload in @up */
static uint64_t recv_msg(msgpack_unpacked *up)
{
	uint8_t topic[16], seq[8];
	zmq_msg_t m;
	uint64_t s = 0;
	int i, more = 0;
	size_t ml = sizeof(more);

	assert_int_equal(zmq_recv(sub, topic, sizeof(topic), 0), 4);
	assert_memory_equal(topic, "maru", 4);
	assert_int_equal(zmq_recv(sub, seq, sizeof(seq), 0), 8);
	zmq_msg_init(&m);
	assert_true(zmq_msg_recv(&m, sub, 0) >= 0);
	zmq_getsockopt(sub, ZMQ_RCVMORE, &more, &ml);
	assert_int_equal(more, 0);
	for (i = 0; i < 8; i++)
		s = s << 8 | seq[i];
	/* strings of @up point into the bytes: keep a copy until the next
	 * message (the zmq_msg is gone after this function) */
	free(payload);
	payload = malloc(zmq_msg_size(&m) + 1);
	assert_non_null(payload);
	memcpy(payload, zmq_msg_data(&m), zmq_msg_size(&m));
	msgpack_unpacked_init(up);
	assert_int_equal(
		msgpack_unpack_next(up, payload, zmq_msg_size(&m), NULL),
		MSGPACK_UNPACK_SUCCESS);
	zmq_msg_close(&m);
	assert_int_equal(up->data.type, MSGPACK_OBJECT_MAP);
	return s;
}

static const msgpack_object *get(const msgpack_object *map, const char *k)
{
	uint32_t i;

	assert_int_equal(map->type, MSGPACK_OBJECT_MAP);
	for (i = 0; i < map->via.map.size; i++) {
		const msgpack_object *key = &map->via.map.ptr[i].key;

		if (key->type == MSGPACK_OBJECT_STR &&
		    key->via.str.size == strlen(k) &&
		    !memcmp(key->via.str.ptr, k, key->via.str.size))
			return &map->via.map.ptr[i].val;
	}
	return NULL;
}

static void assert_str(const msgpack_object *o, const char *s)
{
	assert_non_null(o);
	assert_int_equal(o->type, MSGPACK_OBJECT_STR);
	assert_int_equal(o->via.str.size, strlen(s));
	assert_memory_equal(o->via.str.ptr, s, strlen(s));
}

static uint64_t uint_of(const msgpack_object *o)
{
	assert_non_null(o);
	assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	return o->via.u64;
}

static const msgpack_object *events_of(const msgpack_object *p, uint32_t n)
{
	const msgpack_object *e = get(p, "events");

	assert_non_null(e);
	assert_int_equal(e->type, MSGPACK_OBJECT_ARRAY);
	assert_int_equal(e->via.array.size, n);
	return e->via.array.ptr;
}

static int setup(void **state)
{
	(void)state;
	snprintf(ep, sizeof(ep), "ipc:///tmp/maru-test-events-%d", getpid());
	return 0;
}

static void test_events_fields_and_order(void **state)
{
	struct mds_events *ev;
	struct ev_counters c;
	msgpack_unpacked up;
	const msgpack_object *e;
	uint8_t ikey[8] = {42, 0, 0, 0, 0, 0, 0, 0};

	(void)state;
	assert_int_equal(ev_open(&ev, ep, "00112233aabbccdd"), 0);
	ev_cleared(ev);
	ev_flush(ev); /* held: nobody subscribed yet */
	ev_counters(ev, &c);
	assert_int_equal(c.held, 1);
	sub_open();
	wait_subscribed(ev);

	assert_int_equal(recv_msg(&up), 1);
	assert_str(get(&up.data, "server_id"), "00112233aabbccdd");
	assert_int_equal(uint_of(get(&up.data, "seq")), 1);
	assert_non_null(get(&up.data, "stream"));
	assert_int_equal(get(&up.data, "ts")->type, MSGPACK_OBJECT_FLOAT64);
	e = events_of(&up.data, 1);
	assert_str(get(e, "type"), "cleared");
	msgpack_unpacked_destroy(&up);

	ev_stored(ev, KEY_STR, (const uint8_t *)"k1", 2, "inst", 4, 7, 4096,
		  100);
	ev_stored(ev, KEY_BIN, (const uint8_t *)"\0\1", 2, NULL, 0, 8, 0, 1);
	ev_removed(ev, KEY_UINT, ikey, 8, EVR_EVICTED);
	ev_removed(ev, KEY_STR, (const uint8_t *)"k1", 2, EVR_DELETED);
	ev_flush(ev);
	ev_flush(ev); /* nothing new: no message */
	assert_int_equal(recv_msg(&up), 2);
	e = events_of(&up.data, 4);
	assert_str(get(&e[0], "type"), "stored");
	assert_str(get(&e[0], "key"), "k1");
	assert_str(get(&e[0], "instance"), "inst");
	assert_int_equal(uint_of(get(&e[0], "region")), 7);
	assert_int_equal(uint_of(get(&e[0], "offset")), 4096);
	assert_int_equal(uint_of(get(&e[0], "length")), 100);
	assert_int_equal(get(&e[1], "key")->type, MSGPACK_OBJECT_BIN);
	assert_int_equal(get(&e[1], "instance")->type, MSGPACK_OBJECT_NIL);
	assert_str(get(&e[2], "type"), "removed");
	assert_int_equal(uint_of(get(&e[2], "key")), 42);
	assert_str(get(&e[2], "reason"), "evicted");
	assert_str(get(&e[3], "reason"), "deleted");
	msgpack_unpacked_destroy(&up);

	/* a batch past EV_BATCH_MAX is two messages, numbered in order */
	for (int i = 0; i < EV_BATCH_MAX + 1; i++)
		ev_removed(ev, KEY_STR, (const uint8_t *)"x", 1, EVR_EXPIRED);
	ev_flush(ev);
	assert_int_equal(recv_msg(&up), 3);
	events_of(&up.data, EV_BATCH_MAX);
	msgpack_unpacked_destroy(&up);
	assert_int_equal(recv_msg(&up), 4);
	e = events_of(&up.data, 1);
	assert_str(get(e, "reason"), "expired");
	msgpack_unpacked_destroy(&up);

	ev_counters(ev, &c);
	assert_int_equal(c.seq, 4);
	assert_int_equal(c.messages, 4);
	assert_int_equal(c.events, 1 + 4 + EV_BATCH_MAX + 1);
	assert_int_equal(c.dropped, 0);
	ev_close(ev);
	sub_close();
}

static void test_events_hold_limit(void **state)
{
	struct mds_events *ev;
	struct ev_counters c;
	msgpack_unpacked up;
	int i;

	(void)state;
	assert_int_equal(ev_open(&ev, ep, "s"), 0);
	for (i = 0; i < EV_HOLD_MAX + 3; i++) {
		ev_cleared(ev);
		ev_flush(ev);
	}
	ev_counters(ev, &c);
	assert_int_equal(c.held, EV_HOLD_MAX);
	assert_int_equal(c.dropped, 3);
	sub_open();
	wait_subscribed(ev);
	for (i = 1; i <= EV_HOLD_MAX; i++) {
		assert_int_equal(recv_msg(&up), i);
		msgpack_unpacked_destroy(&up);
	}
	ev_counters(ev, &c);
	assert_int_equal(c.held, 0);
	ev_close(ev);
	sub_close();
}

static void test_events_null(void **state)
{
	struct ev_counters c;

	(void)state;
	ev_cleared(NULL);
	ev_stored(NULL, KEY_STR, (const uint8_t *)"k", 1, NULL, 0, 0, 0, 0);
	ev_removed(NULL, KEY_STR, (const uint8_t *)"k", 1, EVR_DELETED);
	ev_flush(NULL);
	ev_tick(NULL);
	ev_counters(NULL, &c);
	assert_int_equal(c.events, 0);
	assert_false(c.subscribed);
	ev_close(NULL);
}

static void test_events_bad_endpoint(void **state)
{
	struct mds_events *ev = NULL;

	(void)state;
	assert_true(ev_open(&ev, "tcp://no-such-host-name.invalid:1", "s") < 0);
	assert_null(ev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_events_fields_and_order),
		cmocka_unit_test(test_events_hold_limit),
		cmocka_unit_test(test_events_null),
		cmocka_unit_test(test_events_bad_endpoint),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
