/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_mds_request.c - everything maru-server parses from a peer
 *
 * The input is a little script run against a fresh store with a fake
 * resource manager, so that the fuzzer reaches states (regions, entries,
 * pins, leases, connections) and not only the decoder:
 *
 *	0x00 len_hi len_lo body...	a request body frame, len bytes
 *	0x01 fd				connection fd accepted
 *	0x02 fd				connection fd closed
 *	0x03 secs			the clock advances (leases, peers)
 *	other				the rest of the input is one body
 *
 * Requests come from connection (body length % 4) + 3, so attribution
 * and peer detection get exercised too.  Checks, besides the sanitizers:
 * every body gets exactly one reply whose header is valid and whose
 * payload is exactly one MessagePack map (read back with msgpack-c, an
 * independent decoder); every request mds_decode() accepts is also one
 * well-formed MessagePack object for msgpack-c; and the store's
 * invariants hold at the end (mds_check).
 *
 * Seeds (corpus/fuzz_mds_request/) hold one valid request of every type
 * and some broken ones, written with tests/python/mds_wire.py framing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "handler.h"
#include "log.h"
#include "store.h"
#include "test_mds_util.h"
#include "fuzz.h"

static void check_reply(const struct buf *out)
{
	struct reply r;

	CHECK(out->len >= MDS_HDR_SIZE);
	CHECK(reply_parse(out, &r) == 0);
	reply_free(&r);
}

/* nesting depth of one value (capped at 64), -1 if malformed */
static int depth_of(const uint8_t *p, size_t n)
{
	uint64_t left[65];
	struct mp_rd r;
	struct mp_val v;
	int d = 0, max = 0;

	mp_rd_init(&r, p, n);
	left[0] = 1;
	while (d >= 0) {
		if (left[d] == 0) {
			d--;
			continue;
		}
		left[d]--;
		if (mp_read(&r, &v) < 0)
			return -1;
		if ((v.type == MP_ARRAY || v.type == MP_MAP) && v.n) {
			if (d == 64)
				return 64;
			left[++d] = v.type == MP_MAP ? 2ull * v.n : v.n;
			if (d > max)
				max = d;
		}
	}
	return max;
}

/*
 * What mds_decode accepts, msgpack-c must read as one whole map -- up to
 * msgpack-c's own nesting limit (MSGPACK_EMBED_STACK_SIZE, 32); ours has
 * none, deeper values in ignored fields are skipped without a stack.
 */
static void check_decode(const uint8_t *body, size_t len)
{
	msgpack_unpacked u;
	struct mds_req q;
	const char *why;
	char wb[128];
	size_t off = 0;

	if (mds_decode(body, len, &q, &why, wb, sizeof(wb)) != 0)
		return;
	if (q.hdr.payload_len == 0)
		return; /* empty payload = empty map, by our rule */
	if (depth_of(body + MDS_HDR_SIZE, q.hdr.payload_len) >= 31)
		return;
	msgpack_unpacked_init(&u);
	CHECK(msgpack_unpack_next(&u, (const char *)body + MDS_HDR_SIZE,
				  q.hdr.payload_len,
				  &off) == MSGPACK_UNPACK_SUCCESS);
	CHECK(off == q.hdr.payload_len);
	CHECK(u.data.type == MSGPACK_OBJECT_MAP);
	msgpack_unpacked_destroy(&u);
}

static void run_body(struct mds *s, const uint8_t *p, size_t n, struct buf *out)
{
	struct mds_peer peer = {.fd = (int)(n % 4) + 3, .rid_hash = n % 4};
	uint64_t h;

	check_decode(p, n);
	/* the server's receive loop peeks at a request before handling it */
	h = mds_prefetch(s, p, n);
	if (h)
		mds_prefetch_entry(s, h);
	mds_handle(s, p, n, &peer, out, NULL);
	check_reply(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	struct mds_config cfg = fuzz_mds_config();
	struct buf out = BUF_INIT;
	struct fake_rm *f;
	struct mds s;
	size_t i = 0, n;

	if (!quiet) {
		log_init("fuzz", LOG_CRIT);
		quiet = true;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return 0;
	f->total = 1ull << 30;
	if (mds_init(&s, &cfg, &fake_ops, f, 42) < 0)
		abort();
	s.vnow = 1000000000000ull;
	while (i < size) {
		uint8_t op = data[i++];

		if (op == 0 && i + 2 <= size) {
			n = (size_t)data[i] << 8 | data[i + 1];
			i += 2;
			if (n > size - i)
				n = size - i;
			run_body(&s, data + i, n, &out);
			i += n;
		} else if ((op == 1 || op == 2) && i < size) {
			if (op == 1)
				mds_conn_open(&s, data[i] % 8);
			else
				mds_conn_close(&s, data[i] % 8);
			i++;
		} else if (op == 3 && i < size) {
			mds_tick(&s,
				 s.vnow + (uint64_t)data[i] * 1000000000ull);
			i++;
		} else {
			run_body(&s, data + i - 1, size - i + 1, &out);
			break;
		}
	}
	CHECK(mds_check(&s) == 0);
	mds_destroy(&s);
	buf_free(&out);
	free(f);
	return 0;
}
