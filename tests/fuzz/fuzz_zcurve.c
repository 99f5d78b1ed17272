/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_zcurve.c - the CURVE layer (src/common/zcurve.c) on what a peer sends
 *
 * The first byte chooses what the rest is:
 *   0: the bytes a client sends to a fresh server (greeting, HELLO,
 *      INITIATE ... as garbage): the server fails cleanly or waits;
 *   1: the bytes a server sends to a fresh client after its HELLO;
 *   2: after a real handshake between a client and a server of ours, a
 *      list of frames ([flags][len16][bytes]) that one side seals (the
 *      client, or the server when the top bit of the next byte is set),
 *      plus one byte of the stream that the input may flip (15 bits; 0x7fff
 *      flips nothing) and whether to send one frame twice: fed to the
 *      other side whole and cut in two, it must give back exactly the
 *      frames sealed (when nothing was changed) or fail, the same way both
 *      times.
 * Long-term keys come from fixed seeds; each connection's are random, as
 * in production (the checks hold whatever they are).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <sodium.h>

#include "fuzz.h"
#include "zcurve.h"
#include "zmtp.h"

#define MSG_MAX (1u << 20)

static struct zcurve_keys skeys, ckeys;
static struct zcurve_allow allow;
static uint8_t allowed[1][ZCURVE_KEY];

static void init(void)
{
	static int done;
	uint8_t seed[crypto_box_SEEDBYTES];

	if (done)
		return;
	done = 1;
	CHECK(zcurve_sodium_init() == 0);
	memset(seed, 1, sizeof(seed));
	crypto_box_seed_keypair(skeys.pub, skeys.sec, seed);
	memset(seed, 2, sizeof(seed));
	crypto_box_seed_keypair(ckeys.pub, ckeys.sec, seed);
	memcpy(allowed[0], ckeys.pub, ZCURVE_KEY);
	allow.key = allowed;
	allow.n = 1;
}

/* feed @in to @z in one piece, or two cut at @cut; returns its rc */
static int feed(struct zcurve *z, const uint8_t *in, size_t n, size_t cut,
		struct buf *plain, struct buf *out)
{
	int rc;

	if (cut && cut < n) {
		rc = zcurve_input(z, in, cut, plain, out);
		if (rc < 0)
			return rc;
		CHECK(z->rd <= cut);
	}
	rc = zcurve_input(z, in, n, plain, out);
	CHECK(rc < 0 || z->rd <= n);
	return rc;
}

static void raw_peer(bool server, const uint8_t *d, size_t n)
{
	struct buf out = {0}, plain = {0};
	struct zcurve z;
	int rc;

	if (server)
		CHECK(zcurve_server(&z, &skeys, &allow, "ROUTER", MSG_MAX,
				    &out) == 0);
	else
		CHECK(zcurve_client(&z, &ckeys, skeys.pub, "DEALER", NULL, 0,
				    MSG_MAX, &out) == 0);
	rc = feed(&z, d, n, n / 2, &plain, &out);
	CHECK(rc == 0 || rc == -EPROTO || rc == -EACCES || rc == -EMSGSIZE);
	CHECK(plain.len == 0 || zcurve_open(&z));
	buf_free(&out);
	buf_free(&plain);
}

/* a real handshake: @c and @s open */
static void handshake(struct zcurve *c, struct zcurve *s)
{
	struct buf cs = {0}, sc = {0}, plain = {0};
	int i;

	CHECK(zcurve_server(s, &skeys, &allow, "ROUTER", MSG_MAX, &sc) == 0);
	CHECK(zcurve_client(c, &ckeys, skeys.pub, "DEALER", NULL, 0, MSG_MAX,
			    &cs) == 0);
	for (i = 0; i < 4 && !(zcurve_open(c) && zcurve_open(s)); i++) {
		CHECK(zcurve_input(s, cs.data, cs.len, &plain, &sc) == 0);
		CHECK(zcurve_input(c, sc.data, sc.len, &plain, &cs) == 0);
	}
	CHECK(zcurve_open(c) && zcurve_open(s) && plain.len == 0);
	c->rd = s->rd = 0;
	buf_free(&cs);
	buf_free(&sc);
	buf_free(&plain);
}

static void messages(const uint8_t *d, size_t n)
{
	struct buf wire = {0}, want = {0}, p1 = {0}, p2 = {0}, none = {0};
	struct zcurve c, s, s2, *from, *to;
	size_t i = 0, len, flip, dup_at = SIZE_MAX, dup_len = 0;
	uint8_t hdr[ZMTP_HDR_MAX], fl;
	bool changed;
	int r1, r2;

	if (n < 3)
		return;
	handshake(&c, &s);
	from = d[0] & 0x80 ? &s : &c;
	to = from == &s ? &c : &s;
	flip = (size_t)(d[0] & 0x7f) << 8 | d[1]; /* 0x7fff: nothing */
	d += 2;
	n -= 2;
	while (i + 3 <= n) {
		fl = d[i] & (ZMTP_MORE | ZMTP_COMMAND);
		if ((d[i] & 0x80) && dup_at == SIZE_MAX)
			dup_at = wire.len; /* this frame goes twice */
		len = (size_t)d[i + 1] << 8 | d[i + 2];
		i += 3;
		if (len > n - i)
			len = n - i;
		CHECK(zcurve_seal_frame(from, fl, d + i, len, &wire) == 0);
		if (dup_at != SIZE_MAX && !dup_len)
			dup_len = wire.len - dup_at;
		buf_put(&want, hdr, zmtp_hdr(hdr, fl, len));
		buf_put(&want, d + i, len);
		i += len;
	}
	if (dup_len) {
		uint8_t *copy = malloc(dup_len);

		CHECK(copy);
		memcpy(copy, wire.data + dup_at, dup_len);
		buf_put(&wire, copy, dup_len);
		free(copy);
	}
	if (flip < wire.len)
		wire.data[flip] ^= 0x20;
	changed = flip < wire.len || dup_len;
	s = *to;
	s2 = s;
	r1 = feed(&s, wire.data, wire.len, 0, &p1, &none);
	r2 = feed(&s2, wire.data, wire.len, wire.len / 3, &p2, &none);
	CHECK(r1 == r2);
	CHECK(none.len == 0);
	if (!changed) {
		CHECK(r1 == 0);
		CHECK(p1.len == want.len &&
		      (!p1.len || !memcmp(p1.data, want.data, p1.len)));
	} else {
		CHECK(r1 == 0 || r1 == -EPROTO || r1 == -EMSGSIZE);
		if (dup_len && flip >= wire.len)
			CHECK(r1 == -EPROTO); /* the replay is caught */
		/* what opened is a prefix of what was sent */
		CHECK(p1.len <= want.len &&
		      (!p1.len || !memcmp(p1.data, want.data, p1.len)));
	}
	CHECK(p1.len == p2.len &&
	      (!p1.len || !memcmp(p1.data, p2.data, p1.len)));
	buf_free(&wire);
	buf_free(&want);
	buf_free(&p1);
	buf_free(&p2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init();
	if (!size)
		return 0;
	switch (data[0] % 3) {
	case 0:
		raw_peer(true, data + 1, size - 1);
		break;
	case 1:
		raw_peer(false, data + 1, size - 1);
		break;
	default:
		messages(data + 1, size - 1);
	}
	return 0;
}
