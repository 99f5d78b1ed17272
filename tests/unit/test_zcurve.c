/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_zcurve.c - CurveZMQ (src/common/zcurve.c): Z85 against RFC 32's
 * vector and libzmq's zmq_z85_encode, certificates, a client and a server
 * of ours handshaking in memory (fed one byte at a time and all at once),
 * MESSAGEs both ways, and what must fail: a tampered box, a replayed
 * nonce, an unlisted client key, a client expecting another server key.
 * Against libzmq itself: tests/python/test_curve.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "zcurve.h"
#include "zmtp.h"

static void test_z85(void **state)
{
	/* RFC 32: 86 4F D2 6F B5 59 F7 5B -> "HelloWorld", repeated 4 x */
	static const uint8_t v[8] = {0x86, 0x4F, 0xD2, 0x6F,
				     0xB5, 0x59, 0xF7, 0x5B};
	uint8_t k[32], back[32];
	char z[41], ref[41];
	int i;

	(void)state;
	for (i = 0; i < 4; i++)
		memcpy(k + 8 * i, v, 8);
	zcurve_z85_encode(k, z);
	assert_string_equal(z, "HelloWorldHelloWorldHelloWorldHelloWorld");
	for (i = 0; i < 32; i++)
		k[i] = (uint8_t)(i * 37 + 250);
	zcurve_z85_encode(k, z);
	assert_non_null(zmq_z85_encode(ref, k, 32));
	assert_string_equal(z, ref);
	assert_int_equal(zcurve_z85_decode(z, 40, back), 0);
	assert_memory_equal(back, k, 32);
	assert_int_equal(zcurve_z85_decode(z, 39, back), -EINVAL);
	z[3] = '~'; /* not in the alphabet */
	assert_int_equal(zcurve_z85_decode(z, 40, back), -EINVAL);
	/* "#####" is 85^5 - 1, more than 32 bits */
	memcpy(z, "#####", 5);
	assert_int_equal(zcurve_z85_decode(z, 40, back), -EINVAL);
}

static char dir[] = "/tmp/test_zcurve.XXXXXX";

static void cert(const char *name, struct zcurve_keys *k)
{
	char base[256], path[300], why[512];
	uint8_t pub2[32], sec2[32];
	struct stat st;

	snprintf(base, sizeof(base), "%s/%s", dir, name);
	assert_int_equal(zcurve_write_cert(base, why, sizeof(why)), 0);
	assert_int_equal(zcurve_write_cert(base, why, sizeof(why)), -EEXIST);
	snprintf(path, sizeof(path), "%s.key_secret", base);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(
		zcurve_load_cert(path, k->pub, k->sec, why, sizeof(why)), 0);
	snprintf(path, sizeof(path), "%s.key", base);
	assert_int_equal(zcurve_load_cert(path, pub2, NULL, why, sizeof(why)),
			 0);
	assert_memory_equal(pub2, k->pub, 32);
	/* a public certificate has no secret key */
	assert_int_equal(zcurve_load_cert(path, pub2, sec2, why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "no secret-key"));
}

struct pair {
	struct zcurve_keys s, c, x; /* server, client, stranger */
	struct zcurve_allow allow;
	struct zcurve cs, cc;  /* server side, client side */
	struct buf s_in, c_in; /* raw bytes each side received */
	struct buf s_plain, c_plain;
};

static int setup(void **state)
{
	struct pair *p = calloc(1, sizeof(*p));
	char sub[256], why[512], from[300], to[300];

	assert_int_equal(zcurve_sodium_init(), 0);
	assert_non_null(mkdtemp(dir));
	cert("server", &p->s);
	cert("client", &p->c);
	cert("stranger", &p->x);
	snprintf(sub, sizeof(sub), "%s/clients", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(from, sizeof(from), "%s/client.key", dir);
	snprintf(to, sizeof(to), "%s/client.key", sub);
	assert_int_equal(link(from, to), 0);
	snprintf(to, sizeof(to), "%s/not-a-key.txt", sub);
	assert_int_equal(link(from, to), 0); /* other names are ignored */
	assert_int_equal(zcurve_allow_load(&p->allow, sub, why, sizeof(why)),
			 0);
	assert_int_equal(p->allow.n, 1);
	assert_true(zcurve_allow_has(&p->allow, p->c.pub));
	assert_false(zcurve_allow_has(&p->allow, p->x.pub));
	*state = p;
	return 0;
}

static int teardown(void **state)
{
	struct pair *p = *state;
	char cmd[300];

	zcurve_allow_free(&p->allow);
	buf_free(&p->s_in);
	buf_free(&p->c_in);
	buf_free(&p->s_plain);
	buf_free(&p->c_plain);
	free(p);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/*
 * Run both sides until neither has anything to say; @trickle feeds the
 * server one byte at a time.  Return: the server's last rc, the client's
 * in *@crc.
 */
static int converse(struct pair *p, const struct zcurve_keys *me,
		    const uint8_t *server_key, bool trickle, int *crc)
{
	struct buf to_s = {0}, to_c = {0};
	size_t sent = 0;
	int src = 0, i;

	buf_reset(&p->s_in);
	buf_reset(&p->c_in);
	buf_reset(&p->s_plain);
	buf_reset(&p->c_plain);
	assert_int_equal(zcurve_server(&p->cs, &p->s, &p->allow, "ROUTER",
				       1 << 20, &to_c),
			 0);
	assert_int_equal(zcurve_client(&p->cc, me, server_key, "DEALER",
				       (const uint8_t *)"id", 2, 1 << 20,
				       &to_s),
			 0);
	*crc = 0;
	for (i = 0; i < 100000 && (to_s.len > sent || to_c.len); i++) {
		if (to_s.len > sent && src == 0) {
			size_t n = trickle ? 1 : to_s.len - sent;

			buf_put(&p->s_in, to_s.data + sent, n);
			sent += n;
			src = zcurve_input(&p->cs, p->s_in.data, p->s_in.len,
					   &p->s_plain, &to_c);
		}
		if (to_s.len == sent) {
			buf_reset(&to_s);
			sent = 0;
		}
		if (to_c.len && *crc == 0) {
			buf_put(&p->c_in, to_c.data, to_c.len);
			buf_reset(&to_c);
			*crc = zcurve_input(&p->cc, p->c_in.data, p->c_in.len,
					    &p->c_plain, &to_s);
		} else {
			buf_reset(&to_c);
		}
		if (src < 0 && !to_c.len)
			break;
	}
	buf_free(&to_s);
	buf_free(&to_c);
	return src;
}

/* one frame through the boxes: sealed by @from, opened by @to */
static int through(struct zcurve *from, struct zcurve *to, struct buf *in,
		   struct buf *plain, uint8_t flags, const void *d, size_t n)
{
	struct buf sealed = {0}, none = {0};
	int rc;

	assert_int_equal(zcurve_seal_frame(from, flags, d, n, &sealed), 0);
	buf_put(in, sealed.data, sealed.len);
	buf_free(&sealed);
	rc = zcurve_input(to, in->data, in->len, plain, &none);
	assert_int_equal(none.len, 0);
	buf_free(&none);
	return rc;
}

static void test_handshake_and_messages(void **state)
{
	struct pair *p = *state;
	struct zmtp_frame f;
	uint8_t big[70000];
	int crc, t;

	for (t = 0; t < 2; t++) {
		assert_int_equal(converse(p, &p->c, p->s.pub, t == 1, &crc), 0);
		assert_int_equal(crc, 0);
		assert_true(zcurve_open(&p->cs));
		assert_true(zcurve_open(&p->cc));
		assert_memory_equal(p->cs.peer, p->c.pub, 32); /* proven C */
		assert_int_equal(p->cs.minor, 1);
	}
	/* client -> server, a short and a long frame */
	assert_int_equal(through(&p->cc, &p->cs, &p->s_in, &p->s_plain,
				 ZMTP_MORE, "", 0),
			 0);
	memset(big, 7, sizeof(big));
	assert_int_equal(through(&p->cc, &p->cs, &p->s_in, &p->s_plain, 0, big,
				 sizeof(big)),
			 0);
	assert_int_equal(
		zmtp_parse(p->s_plain.data, p->s_plain.len, SIZE_MAX, &f, NULL),
		2);
	assert_int_equal(f.flags, ZMTP_MORE);
	assert_int_equal(zmtp_parse(p->s_plain.data + 2, p->s_plain.len - 2,
				    SIZE_MAX, &f, NULL),
			 9 + (ssize_t)sizeof(big));
	assert_int_equal(f.len, sizeof(big));
	assert_memory_equal(f.data, big, sizeof(big));
	/* server -> client: a command (PING) keeps its COMMAND flag */
	assert_int_equal(through(&p->cs, &p->cc, &p->c_in, &p->c_plain,
				 ZMTP_COMMAND, "\x04PING\0\0", 7),
			 0);
	assert_int_equal(
		zmtp_parse(p->c_plain.data, p->c_plain.len, SIZE_MAX, &f, NULL),
		9);
	assert_int_equal(f.flags, ZMTP_COMMAND);
	assert_true(zmtp_is_command(&f, "PING"));
	/* zcurve_seal: a stream of plaintext frames, cut ones refused */
	{
		struct buf sealed = {0};
		uint8_t two[] = {ZMTP_MORE, 0, 0, 3, 'a', 'b', 'c'};

		assert_int_equal(zcurve_seal(&p->cc, two, sizeof(two), &sealed),
				 0);
		assert_int_equal(sealed.len, 2 * (2 + 33) + 3);
		assert_int_equal(
			zcurve_seal(&p->cc, two, sizeof(two) - 1, &sealed),
			-EPROTO);
		buf_free(&sealed);
	}
}

static void test_tamper_and_replay(void **state)
{
	struct pair *p = *state;
	struct buf sealed = {0}, none = {0}, copy = {0};
	int crc;

	assert_int_equal(converse(p, &p->c, p->s.pub, false, &crc), 0);
	assert_int_equal(zcurve_seal_frame(&p->cc, 0, (const uint8_t *)"hello",
					   5, &sealed),
			 0);
	/* one flipped bit in the box */
	buf_put(&copy, p->s_in.data, p->s_in.len);
	buf_put(&p->s_in, sealed.data, sealed.len);
	p->s_in.data[p->s_in.len - 3] ^= 1;
	{
		struct zcurve saved = p->cs;

		assert_int_equal(zcurve_input(&p->cs, p->s_in.data, p->s_in.len,
					      &p->s_plain, &none),
				 -EPROTO);
		assert_non_null(strstr(p->cs.why, "does not open"));
		p->cs = saved;
	}
	p->s_in.data[p->s_in.len - 3] ^= 1;
	assert_int_equal(zcurve_input(&p->cs, p->s_in.data, p->s_in.len,
				      &p->s_plain, &none),
			 0);
	/* the same MESSAGE again: its nonce does not increase */
	{
		struct zcurve saved = p->cs;
		size_t len = p->s_in.len;

		buf_put(&p->s_in, sealed.data, sealed.len);
		assert_int_equal(zcurve_input(&p->cs, p->s_in.data, p->s_in.len,
					      &p->s_plain, &none),
				 -EPROTO);
		assert_non_null(strstr(p->cs.why, "nonce"));
		p->cs = saved;
		p->s_in.len = len;
	}
	/* one MESSAGE left out on the way: the next one's nonce has a gap */
	buf_reset(&sealed);
	assert_int_equal(
		zcurve_seal_frame(&p->cc, 0, (const uint8_t *)"a", 1, &sealed),
		0);
	buf_reset(&sealed); /* deleted */
	assert_int_equal(
		zcurve_seal_frame(&p->cc, 0, (const uint8_t *)"b", 1, &sealed),
		0);
	buf_put(&p->s_in, sealed.data, sealed.len);
	assert_int_equal(zcurve_input(&p->cs, p->s_in.data, p->s_in.len,
				      &p->s_plain, &none),
			 -EPROTO);
	assert_non_null(strstr(p->cs.why, "nonce"));
	/* and the other way: a server frame changed on its way to the client */
	buf_reset(&sealed);
	assert_int_equal(zcurve_seal_frame(&p->cs, 0, (const uint8_t *)"reply",
					   5, &sealed),
			 0);
	sealed.data[sealed.len - 1] ^= 0x80;
	buf_put(&p->c_in, sealed.data, sealed.len);
	assert_int_equal(zcurve_input(&p->cc, p->c_in.data, p->c_in.len,
				      &p->c_plain, &none),
			 -EPROTO);
	assert_non_null(strstr(p->cc.why, "does not open"));
	buf_free(&sealed);
	buf_free(&copy);
	buf_free(&none);
}

static void test_refusals(void **state)
{
	struct pair *p = *state;
	int crc, src;

	/* a key not in the allow list: ERROR to the client, -EACCES both */
	src = converse(p, &p->x, p->s.pub, false, &crc);
	assert_int_equal(src, -EACCES);
	assert_int_equal(crc, -EACCES);
	assert_false(zcurve_open(&p->cc));
	/* a client that claims the allowed key C but holds another secret:
	 * its vouch (boxed with that secret) does not open under C */
	{
		struct zcurve_keys liar = p->x;

		memcpy(liar.pub, p->c.pub, 32);
		src = converse(p, &liar, p->s.pub, false, &crc);
		assert_int_equal(src, -EPROTO);
		assert_non_null(strstr(p->cs.why, "vouch"));
		assert_false(zcurve_open(&p->cs));
	}
	/* a client that expects another server key: HELLO does not open */
	src = converse(p, &p->c, p->x.pub, false, &crc);
	assert_int_equal(src, -EPROTO);
	assert_non_null(strstr(p->cs.why, "HELLO"));
	/* a NULL peer */
	{
		struct buf out = {0}, plain = {0};
		uint8_t g[ZMTP_GREETING_LEN];

		zcurve_server(&p->cs, &p->s, &p->allow, "ROUTER", 1 << 20,
			      &out);
		zmtp_greeting(g, false);
		assert_int_equal(
			zcurve_input(&p->cs, g, sizeof(g), &plain, &out),
			-EPROTO);
		/* not ZMTP at all: refused at the first byte */
		zcurve_server(&p->cs, &p->s, &p->allow, "ROUTER", 1 << 20,
			      &out);
		assert_int_equal(zcurve_input(&p->cs, (const uint8_t *)"GET ",
					      1, &plain, &out),
				 -EPROTO);
		buf_free(&out);
		buf_free(&plain);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_z85),
		cmocka_unit_test(test_handshake_and_messages),
		cmocka_unit_test(test_tamper_and_replay),
		cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
