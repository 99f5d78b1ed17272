/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_zmtp.c - the ZMTP codec (src/common/zmtp.c) on an arbitrary stream
 *
 * The input is what a peer sends: a greeting, then frames.  Every frame
 * that parses is checked three ways: a prefix of it never parses as
 * something else (incremental reads see the same frame), its header
 * re-encoded with zmtp_hdr() parses back to the same flags and body, and
 * commands go through every command helper (READY properties, PONG).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "zmtp.h"

#define MAX_BODY (1u << 20)

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
			CHECK(zmtp_parse(tmp, hl + f->len, MAX_BODY, &g, NULL) ==
			      used);
			CHECK(g.flags == f->flags && g.len == f->len &&
			      !memcmp(g.data, f->data, f->len));
		}
	}
	if (f->flags & ZMTP_COMMAND)
		check_command(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
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
		CHECK(f.data >= data + at && f.data + f.len <= data + at + used);
		check_frame(data + at, size - at, used, &f);
		at += (size_t)used;
	}
	return 0;
}
