/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_zmtp.c - the ZMTP codec (src/common/zmtp.c): greeting, frames,
 * commands, the connection state machine (struct zmtp_conn) fed one byte
 * at a time and all at once, and one handshake + request/reply against a
 * real libzmq ROUTER socket over TCP, which is what proves the bytes are
 * right.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "zmtp.h"

static void test_greeting(void **state)
{
	uint8_t g[ZMTP_GREETING_LEN];
	int minor = -1;

	(void)state;
	zmtp_greeting(g, true);
	assert_int_equal(zmtp_greeting_check(g, &minor), 0);
	assert_int_equal(minor, 1);
	assert_int_equal(g[32], 1);
	g[11] = 0; /* ZMTP 3.0: no PING */
	assert_int_equal(zmtp_greeting_check(g, &minor), 0);
	assert_int_equal(minor, 0);
	g[10] = 2; /* ZMTP 2.0 */
	assert_int_equal(zmtp_greeting_check(g, NULL), -EPROTO);
	zmtp_greeting(g, false);
	memcpy(g + 12, "PLAIN", 5);
	assert_int_equal(zmtp_greeting_check(g, NULL), -EPROTO);
	zmtp_greeting(g, false);
	g[9] = 0;
	assert_int_equal(zmtp_greeting_check(g, NULL), -EPROTO);
}

static void test_frames(void **state)
{
	uint8_t b[300 + ZMTP_HDR_MAX];
	struct zmtp_frame f;
	size_t need = 0, hl;

	(void)state;
	assert_int_equal(zmtp_hdr(b, ZMTP_MORE, 255), 2);
	hl = zmtp_hdr(b, 0, 300);
	assert_int_equal(hl, 9);
	assert_int_equal(b[0], ZMTP_LONG);
	memset(b + hl, 'x', 300);
	/* incomplete: header, then body */
	assert_int_equal(zmtp_parse(b, 1, 1000, &f, &need), 0);
	assert_int_equal(need, 2);
	assert_int_equal(zmtp_parse(b, 5, 1000, &f, &need), 0);
	assert_int_equal(need, 9);
	assert_int_equal(zmtp_parse(b, 100, 1000, &f, &need), 0);
	assert_int_equal(need, 309);
	assert_int_equal(zmtp_parse(b, 309, 1000, &f, &need), 309);
	assert_int_equal(f.len, 300);
	assert_int_equal(f.flags, 0);
	assert_ptr_equal(f.data, b + 9);
	/* too big for the limit, short and long */
	assert_int_equal(zmtp_parse(b, 309, 299, &f, NULL), -EMSGSIZE);
	zmtp_hdr(b, ZMTP_MORE, 10);
	assert_int_equal(zmtp_parse(b, 12, 9, &f, NULL), -EMSGSIZE);
	assert_int_equal(zmtp_parse(b, 12, 10, &f, NULL), 12);
	assert_int_equal(f.flags, ZMTP_MORE);
	/* reserved flag bits */
	b[0] = 0x08;
	assert_int_equal(zmtp_parse(b, 12, 10, &f, NULL), -EPROTO);
	/* a 64-bit size beyond size_t limits is refused, not truncated */
	b[0] = ZMTP_LONG;
	memset(b + 1, 0xff, 8);
	assert_int_equal(zmtp_parse(b, 9, 1000, &f, NULL), -EMSGSIZE);
}

static void test_ready(void **state)
{
	uint8_t b[128], small[12];
	const uint8_t *v, *name, *data;
	struct zmtp_frame f;
	size_t vl, nl, dl;
	ssize_t n;

	(void)state;
	n = zmtp_ready(b, sizeof(b), "DEALER", (const uint8_t *)"\x01id", 3);
	assert_true(n > 0);
	assert_int_equal(zmtp_parse(b, (size_t)n, 255, &f, NULL), n);
	assert_true(zmtp_is_command(&f, "READY"));
	assert_false(zmtp_is_command(&f, "READ"));
	assert_int_equal(zmtp_command(&f, &name, &nl, &data, &dl), 0);
	assert_int_equal(zmtp_ready_prop(data, dl, "socket-type", &v, &vl), 0);
	assert_int_equal(vl, 6);
	assert_memory_equal(v, "DEALER", 6);
	assert_int_equal(zmtp_ready_prop(data, dl, "Identity", &v, &vl), 0);
	assert_int_equal(vl, 3);
	assert_int_equal(zmtp_ready_prop(data, dl, "Resource", &v, &vl),
			 -ENOENT);
	/* a value running past the end */
	assert_int_equal(zmtp_ready_prop(data, dl - 1, "Socket-Type", &v, &vl),
			 -EPROTO);
	assert_int_equal(zmtp_ready(small, sizeof(small), "ROUTER", NULL, 0),
			 -ENOSPC);
	/* a frame that is not a command, a name that overruns */
	f.flags = 0;
	assert_int_equal(zmtp_command(&f, &name, &nl, &data, &dl), -EPROTO);
	f.flags = ZMTP_COMMAND;
	f.data = (const uint8_t *)"\x09READY";
	f.len = 6;
	assert_int_equal(zmtp_command(&f, &name, &nl, &data, &dl), -EPROTO);
}

static void test_ping_pong(void **state)
{
	uint8_t ping[16], pong[32];
	const uint8_t *name, *data;
	struct zmtp_frame f;
	size_t nl, dl;
	ssize_t n;

	(void)state;
	n = (ssize_t)zmtp_ping(ping, 30);
	assert_int_equal(zmtp_parse(ping, (size_t)n, 255, &f, NULL), n);
	assert_true(zmtp_is_command(&f, "PING"));
	assert_int_equal(zmtp_command(&f, &name, &nl, &data, &dl), 0);
	assert_int_equal(dl, 2);
	/* a context is echoed, at most 16 bytes of it */
	n = zmtp_pong(pong, sizeof(pong),
		      (const uint8_t *)"\x00\x1e"
				       "0123456789abcdefXYZ",
		      21);
	assert_int_equal(n, 7 + 16);
	assert_int_equal(zmtp_parse(pong, (size_t)n, 255, &f, NULL), n);
	assert_true(zmtp_is_command(&f, "PONG"));
	assert_memory_equal(pong + 7, "0123456789abcdef", 16);
	assert_int_equal(zmtp_pong(pong, sizeof(pong), data, 1), -EPROTO);
}

/* a peer's stream: greeting, READY as @type, then what the test appends */
static size_t peer_stream(uint8_t *out, size_t cap, const char *type)
{
	ssize_t k;

	zmtp_greeting(out, false);
	k = zmtp_ready(out + ZMTP_GREETING_LEN, cap - ZMTP_GREETING_LEN, type,
		       NULL, 0);
	assert_true(k > 0);
	return ZMTP_GREETING_LEN + (size_t)k;
}

static size_t put_frame(uint8_t *out, uint8_t flags, const char *body)
{
	size_t n = strlen(body), hl = zmtp_hdr(out, flags, n);

	memcpy(out + hl, body, n);
	return hl + n;
}

static void test_conn(void **state)
{
	uint8_t in[1024];
	struct zmtp_conn c;
	struct zmtp_msg m;
	size_t len, cut, got, pongs;
	int rc;

	(void)state;
	len = peer_stream(in, sizeof(in), "REQ");
	len += put_frame(in + len, ZMTP_MORE, "");
	len += zmtp_ping(in + len, 30); /* between a message's frames */
	len += put_frame(in + len, 0, "hello");
	len += put_frame(in + len, 0, "two");

	/* all at once: two messages, one PONG */
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	assert_int_equal(zmtp_conn_next(&c, in, len, &m), 1);
	assert_int_equal(m.nf, 2);
	assert_int_equal(m.n[0], 0);
	assert_int_equal(m.n[1], 5);
	assert_memory_equal(m.p[1], "hello", 5);
	assert_true(c.pong_len > 0);
	assert_int_equal(c.minor, 1);
	c.pong_len = 0;
	assert_int_equal(zmtp_conn_next(&c, in, len, &m), 1);
	assert_int_equal(m.nf, 1);
	assert_memory_equal(m.p[0], "two", 3);
	assert_int_equal(c.rd, len);
	assert_int_equal(zmtp_conn_next(&c, in, len, &m), 0);
	assert_int_equal(c.need, 2);
	assert_int_equal(c.pong_len, 0);

	/* byte by byte: the same two messages, the PING answered once,
	 * and never more asked for than the next step needs */
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	got = pongs = 0;
	for (cut = 0; cut <= len; cut++) {
		rc = zmtp_conn_next(&c, in, cut, &m);
		if (c.pong_len) {
			pongs++;
			c.pong_len = 0;
		}
		if (rc == 0) {
			assert_true(c.rd + c.need > cut);
			continue;
		}
		assert_int_equal(rc, 1);
		got++;
		while (zmtp_conn_next(&c, in, cut, &m) == 1)
			got++;
	}
	assert_int_equal(got, 2);
	assert_int_equal(pongs, 1);
	assert_int_equal(c.rd, len);

	/* shifting the buffer keeps the offsets */
	zmtp_conn_shift(&c, c.rd);
	assert_int_equal(c.rd, 0);
	assert_int_equal(c.cmd_done, 0);
}

static void test_conn_refuses(void **state)
{
	uint8_t in[8192];
	struct zmtp_conn c;
	struct zmtp_msg m;
	size_t len, i;

	(void)state;
	/* not ZMTP: refused at the first byte */
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	assert_int_equal(zmtp_conn_next(&c, (const uint8_t *)"G", 1, &m),
			 -EPROTO);
	/* ZMTP 2.0: refused at byte 11, before the whole greeting */
	zmtp_greeting(in, false);
	in[10] = 1;
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	assert_int_equal(zmtp_conn_next(&c, in, 10, &m), 0);
	assert_int_equal(zmtp_conn_next(&c, in, 11, &m), -EPROTO);
	/* a socket type a ROUTER does not talk to */
	len = peer_stream(in, sizeof(in), "PUB");
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	assert_int_equal(zmtp_conn_next(&c, in, len, &m), -EPROTO);
	/* a message before READY */
	zmtp_greeting(in, false);
	len = ZMTP_GREETING_LEN + put_frame(in + ZMTP_GREETING_LEN, 0, "x");
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	assert_int_equal(zmtp_conn_next(&c, in, len, &m), -EPROTO);
	/* a second READY */
	len = peer_stream(in, sizeof(in), "DEALER");
	len += (size_t)zmtp_ready(in + len, sizeof(in) - len, "DEALER", NULL,
				  0);
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	assert_int_equal(zmtp_conn_next(&c, in, len, &m), -EPROTO);
	/* a message over the limit, and a big frame before READY */
	len = peer_stream(in, sizeof(in), "REQ");
	len += zmtp_hdr(in + len, ZMTP_MORE, 40);
	len += 40;
	len += zmtp_hdr(in + len, 0, 40);
	zmtp_conn_init(&c, "ROUTER", 4096, 64);
	assert_int_equal(zmtp_conn_next(&c, in, len, &m), -EMSGSIZE);
	zmtp_greeting(in, false);
	zmtp_hdr(in + ZMTP_GREETING_LEN, ZMTP_COMMAND, 5000);
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	assert_int_equal(zmtp_conn_next(&c, in, ZMTP_GREETING_LEN + 9, &m),
			 -EMSGSIZE);
	/* too many frames: that message is dropped, the next one comes */
	len = peer_stream(in, sizeof(in), "REQ");
	for (i = 0; i < ZMTP_MAX_FRAMES + 3; i++)
		len += put_frame(in + len, ZMTP_MORE, "f");
	len += put_frame(in + len, 0, "last");
	len += put_frame(in + len, 0, "next");
	zmtp_conn_init(&c, "ROUTER", 4096, 1 << 20);
	assert_int_equal(zmtp_conn_next(&c, in, len, &m), 1);
	assert_int_equal(c.dropped, 1);
	assert_int_equal(m.nf, 1);
	assert_memory_equal(m.p[0], "next", 4);
}

static void test_peer_ok(void **state)
{
	(void)state;
	assert_true(zmtp_peer_ok("ROUTER", (const uint8_t *)"REQ", 3));
	assert_true(zmtp_peer_ok("ROUTER", (const uint8_t *)"DEALER", 6));
	assert_false(zmtp_peer_ok("ROUTER", (const uint8_t *)"PUB", 3));
	assert_false(zmtp_peer_ok("ROUTER", (const uint8_t *)"REQX", 4));
	assert_true(zmtp_peer_ok("REQ", (const uint8_t *)"ROUTER", 6));
	assert_false(zmtp_peer_ok("REQ", (const uint8_t *)"REQ", 3));
	assert_true(zmtp_peer_ok("DEALER", (const uint8_t *)"ROUTER", 6));
	assert_false(zmtp_peer_ok("PUB", (const uint8_t *)"SUB", 3));
}

/* read until one whole frame is buffered; returns it */
static void read_frame(int fd, uint8_t *buf, size_t cap, size_t *have,
		       struct zmtp_frame *f, size_t *used)
{
	ssize_t n, r;

	for (;;) {
		n = zmtp_parse(buf, *have, cap, f, NULL);
		assert_true(n >= 0);
		if (n > 0) {
			*used = (size_t)n;
			return;
		}
		r = recv(fd, buf + *have, cap - *have, 0);
		assert_true(r > 0);
		*have += (size_t)r;
	}
}

static void consume(uint8_t *buf, size_t *have, size_t used)
{
	memmove(buf, buf + used, *have - used);
	*have -= used;
}

/* our client side against libzmq's ROUTER: handshake, request, reply */
static void test_against_libzmq(void **state)
{
	uint8_t g[ZMTP_GREETING_LEN], buf[4096], out[256];
	struct sockaddr_in sa = {.sin_family = AF_INET};
	const uint8_t *name, *data, *v;
	struct zmtp_frame f;
	size_t have = 0, used, nl, dl, vl;
	char ep[64];
	void *ctx, *router;
	zmq_msg_t parts[3];
	int fd, i, one = 1, timeout = 5000;
	ssize_t n;

	(void)state;
	ctx = zmq_ctx_new();
	router = zmq_socket(ctx, ZMQ_ROUTER);
	assert_int_equal(
		zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout, sizeof(timeout)),
		0);
	assert_int_equal(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
	used = sizeof(ep);
	assert_int_equal(zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &used),
			 0);
	sa.sin_port = htons((uint16_t)atoi(strrchr(ep, ':') + 1));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

	/* greeting and READY in one write, as the transports send them */
	zmtp_greeting(g, false);
	memcpy(out, g, sizeof(g));
	n = zmtp_ready(out + sizeof(g), sizeof(out) - sizeof(g), "DEALER",
		       (const uint8_t *)"\x01peer", 5);
	assert_true(n > 0);
	assert_int_equal(send(fd, out, sizeof(g) + (size_t)n, 0),
			 (ssize_t)(sizeof(g) + (size_t)n));
	while (have < ZMTP_GREETING_LEN) {
		n = recv(fd, buf + have, sizeof(buf) - have, 0);
		assert_true(n > 0);
		have += (size_t)n;
	}
	assert_int_equal(zmtp_greeting_check(buf, NULL), 0);
	consume(buf, &have, ZMTP_GREETING_LEN);
	read_frame(fd, buf, sizeof(buf), &have, &f, &used);
	assert_true(zmtp_is_command(&f, "READY"));
	assert_int_equal(zmtp_command(&f, &name, &nl, &data, &dl), 0);
	assert_int_equal(zmtp_ready_prop(data, dl, "Socket-Type", &v, &vl), 0);
	assert_true(zmtp_peer_ok("DEALER", v, vl));
	consume(buf, &have, used);

	/* [empty, MORE][300-byte body]: a long frame */
	n = (ssize_t)zmtp_hdr(out, ZMTP_MORE, 0);
	assert_int_equal(send(fd, out, (size_t)n, 0), n);
	n = (ssize_t)zmtp_hdr(out, 0, 300);
	assert_int_equal(send(fd, out, (size_t)n, 0), n);
	memset(out, 'q', sizeof(out));
	assert_int_equal(send(fd, out, 256, 0), 256);
	assert_int_equal(send(fd, out, 44, 0), 44);

	/* the ROUTER sees [our identity][empty][body] */
	for (i = 0; i < 3; i++) {
		zmq_msg_init(&parts[i]);
		assert_true(zmq_msg_recv(&parts[i], router, 0) >= 0);
	}
	assert_int_equal(zmq_msg_size(&parts[0]), 5);
	assert_memory_equal(zmq_msg_data(&parts[0]), "\x01peer", 5);
	assert_int_equal(zmq_msg_size(&parts[1]), 0);
	assert_int_equal(zmq_msg_size(&parts[2]), 300);
	assert_false(zmq_msg_more(&parts[2]));
	/* reply [identity][empty]["pong"] reaches us as [empty][pong] */
	zmq_msg_send(&parts[0], router, ZMQ_SNDMORE);
	zmq_msg_send(&parts[1], router, ZMQ_SNDMORE);
	zmq_msg_close(&parts[2]);
	assert_int_equal(zmq_send(router, "pong", 4, 0), 4);
	read_frame(fd, buf, sizeof(buf), &have, &f, &used);
	assert_int_equal(f.flags, ZMTP_MORE);
	assert_int_equal(f.len, 0);
	consume(buf, &have, used);
	read_frame(fd, buf, sizeof(buf), &have, &f, &used);
	assert_int_equal(f.flags, 0);
	assert_int_equal(f.len, 4);
	assert_memory_equal(f.data, "pong", 4);

	close(fd);
	zmq_close(router);
	zmq_ctx_term(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greeting),
		cmocka_unit_test(test_frames),
		cmocka_unit_test(test_ready),
		cmocka_unit_test(test_ping_pong),
		cmocka_unit_test(test_conn),
		cmocka_unit_test(test_conn_refuses),
		cmocka_unit_test(test_peer_ok),
		cmocka_unit_test(test_against_libzmq),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
