/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_mds_conn - what one TCP connection sends to maru-server
 *
 * The bytes go through server_feed(), i.e. the loop's own per-connection
 * code (greeting, READY, frames, commands, envelopes, the look-ahead, the
 * handler and the store, with a fake resource manager), only without a
 * socket.  Input layout:
 *
 *	byte 0		bit 7: prepend a valid client greeting + READY
 *			(DEALER), so the fuzzer starts past the handshake;
 *			bits 0-6 + 1: the size of the pieces the rest is
 *			fed in (a frame split across reads)
 *	rest		the peer's byte stream
 *
 * Checks, besides the sanitizers: the output is our greeting followed by
 * well-formed ZMTP frames; every reply's last frame (no MORE, not a
 * command) is a well-formed reply body (header + one MessagePack map);
 * the store's invariants hold at the end (mds_check).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "server.h"
#include "store.h"
#include "test_mds_util.h"
#include "zmtp.h"
#include "fuzz.h"

static void check_output(const struct buf *out, size_t *pos, bool *greeted)
{
	struct zmtp_frame f;
	struct reply r;
	struct buf body;
	ssize_t n;

	if (!*greeted) {
		if (out->len < ZMTP_GREETING_LEN)
			return;
		CHECK(zmtp_greeting_check(out->data, NULL) == 0);
		*pos = ZMTP_GREETING_LEN;
		*greeted = true;
	}
	while (*pos < out->len) {
		n = zmtp_parse(out->data + *pos, out->len - *pos,
			       SERVER_MAX_MSG, &f, NULL);
		CHECK(n > 0); /* the server writes whole frames */
		*pos += (size_t)n;
		if ((f.flags & (ZMTP_MORE | ZMTP_COMMAND)) == 0) {
			body.data = (uint8_t *)f.data;
			body.len = body.cap = f.len;
			CHECK(reply_parse(&body, &r) == 0);
			reply_free(&r);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct mds_config cfg = fuzz_mds_config();
	uint8_t hello[ZMTP_GREETING_LEN + 64];
	struct buf out = BUF_INIT;
	struct server *sv;
	struct fake_rm *f;
	struct mds s;
	size_t piece, i, n, pos = 0;
	bool greeted = false;
	ssize_t rn;

	if (!quiet) {
		log_init("fuzz", LOG_CRIT);
		quiet = true;
	}
	if (size < 1)
		return 0;
	f = calloc(1, sizeof(*f));
	if (!f)
		return 0;
	f->total = 1ull << 30;
	if (mds_init(&s, &cfg, &fake_ops, f, 42) < 0)
		abort();
	s.vnow = 1000000000000ull;
	sv = server_new(&s);
	CHECK(sv);
	piece = (size_t)(data[0] & 0x7f) + 1;
	if (data[0] & 0x80) {
		zmtp_greeting(hello, false);
		rn = zmtp_ready(hello + ZMTP_GREETING_LEN, 64, "DEALER", NULL,
				0);
		CHECK(rn > 0);
		(void)server_feed(sv, hello, ZMTP_GREETING_LEN + (size_t)rn,
				  &out);
	}
	for (i = 1; i < size; i += n) {
		n = size - i < piece ? size - i : piece;
		if (server_feed(sv, data + i, n, &out) < 0) {
			/* closed: what it wrote before must still parse */
			check_output(&out, &pos, &greeted);
			break;
		}
		check_output(&out, &pos, &greeted);
	}
	server_free(sv);
	CHECK(mds_check(&s) == 0);
	mds_destroy(&s);
	buf_free(&out);
	free(f);
	return 0;
}
