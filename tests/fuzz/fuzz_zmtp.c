/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_zmtp.c - the ZMTP codec (src/common/zmtp.c) on an arbitrary stream
 *
 * The input is what a peer sends: a greeting, then frames.  Every frame
 * that parses is checked three ways: a prefix of it never parses as
 * something else (incremental reads see the same frame), its header
 * re-encoded with zmtp_hdr() parses back to the same flags and body, and
 * commands go through every command helper (READY properties, PONG).
 * The same bytes then go through struct zmtp_conn twice, whole and cut in
 * two at a point the input chooses: both must take out the same messages
 * (frame count, sizes, bytes) and end in the same state or error.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "zmtp.h"

#define MAX_BODY (1u << 20)

static int frames(const uint8_t *data, size_t size);

static void check_command(const struct zmtp_frame *f)
{
	const uint8_t *name, *data, *val;
	uint8_t out[64];
	size_t nl, dl, vl;
	ssize_t n;

	if (zmtp_command(f, &name, &nl, &data, &dl) < 0)
		return;
	CHECK(name + nl == data && data + dl == f->data + f->len);
	if (zmtp_is_command(f, "READY")) {
		if (zmtp_ready_prop(data, dl, "Socket-Type", &val, &vl) == 0) {
			CHECK(val >= data && val + vl <= data + dl);
			(void)zmtp_peer_ok("ROUTER", val, vl);
			(void)zmtp_peer_ok("DEALER", val, vl);
		}
		if (zmtp_ready_prop(data, dl, "Identity", &val, &vl) == 0)
			CHECK(val >= data && val + vl <= data + dl);
	}
	if (zmtp_is_command(f, "PING")) {
		n = zmtp_pong(out, sizeof(out), data, dl);
		if (n > 0) {
			struct zmtp_frame p;

			CHECK(zmtp_parse(out, (size_t)n, 64, &p, NULL) == n);
			CHECK(zmtp_is_command(&p, "PONG"));
		}
	}
}

static void check_frame(const uint8_t *p, size_t n, ssize_t used,
			const struct zmtp_frame *f)
{
	uint8_t hdr[ZMTP_HDR_MAX];
	struct zmtp_frame g;
	size_t hl, need = 0, cut;

	/* a shorter read of the same bytes waits for more */
	cut = (size_t)used - 1 - (n % (size_t)used);
	CHECK(zmtp_parse(p, cut, MAX_BODY, &g, &need) == 0);
	CHECK(need > cut && need <= (size_t)used);
	/* the header re-encoded describes the same frame */
	hl = zmtp_hdr(hdr, f->flags, f->len);
	CHECK(hl + f->len <= (size_t)used);
	if (hl == (size_t)used - f->len) {
		uint8_t tmp[ZMTP_HDR_MAX + 300];

		if (f->len <= 300) {
			memcpy(tmp, hdr, hl);
			memcpy(tmp + hl, f->data, f->len);
			CHECK(zmtp_parse(tmp, hl + f->len, MAX_BODY, &g,
					 NULL) == used);
			CHECK(g.flags == f->flags && g.len == f->len &&
			      !memcmp(g.data, f->data, f->len));
		}
	}
	if (f->flags & ZMTP_COMMAND)
		check_command(f);
}

/* run @c over data[0..size), revealed up to @cut first; returns the last
 * rc and a hash of every message taken out */
static int conn_run(const uint8_t *data, size_t size, size_t cut,
		    uint64_t *hash, uint64_t *nmsg)
{
	struct zmtp_conn c;
	struct zmtp_msg m;
	size_t have = cut;
	int rc, i;

	zmtp_conn_init(&c, (size & 1) ? "DEALER" : "ROUTER", 4096, MAX_BODY);
	*hash = 1469598103934665603ull;
	*nmsg = 0;
	for (;;) {
		rc = zmtp_conn_next(&c, data, have, &m);
		CHECK(c.rd <= have && c.cmd_done <= have);
		if (c.pong_len) {
			struct zmtp_frame p;

			CHECK(zmtp_parse(c.pong, c.pong_len, 64, &p, NULL) ==
			      (ssize_t)c.pong_len);
			CHECK(zmtp_is_command(&p, "PONG"));
			c.pong_len = 0;
		}
		if (rc < 0) {
			CHECK(rc == -EPROTO || rc == -EMSGSIZE);
			return rc;
		}
		if (rc == 0) {
			CHECK(c.rd + c.need > have);
			if (have == size)
				return 0;
			have = size;
			continue;
		}
		CHECK(m.nf >= 1 && m.nf <= ZMTP_MAX_FRAMES);
		(*nmsg)++;
		for (i = 0; i < m.nf; i++) {
			size_t j;

			CHECK(m.p[i] >= data && m.p[i] + m.n[i] <= data + have);
			*hash = (*hash ^ m.n[i]) * 1099511628211ull;
			for (j = 0; j < m.n[i] && j < 8; j++)
				*hash = (*hash ^ m.p[i][j]) * 1099511628211ull;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t h1, h2, n1, n2;
	int r1, r2;

	r1 = conn_run(data, size, size, &h1, &n1);
	r2 = conn_run(data, size, size ? data[0] % (size + 1) : 0, &h2, &n2);
	CHECK(r1 == r2 && n1 == n2 && h1 == h2);
	return frames(data, size);
}

static int frames(const uint8_t *data, size_t size)
{
	struct zmtp_frame f;
	size_t at = 0;
	ssize_t used;
	int minor;

	if (size >= ZMTP_GREETING_LEN) {
		if (zmtp_greeting_check(data, &minor) == 0)
			CHECK(minor >= 0 && minor <= 255);
		at = ZMTP_GREETING_LEN;
	}
	while (at < size) {
		used = zmtp_parse(data + at, size - at, MAX_BODY, &f, NULL);
		if (used <= 0) {
			CHECK(used == 0 || used == -EPROTO ||
			      used == -EMSGSIZE);
			break;
		}
		CHECK((size_t)used <= size - at);
		CHECK(f.data >= data + at &&
		      f.data + f.len <= data + at + used);
		check_frame(data + at, size - at, used, &f);
		at += (size_t)used;
	}
	return 0;
}
