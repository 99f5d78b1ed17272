/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rm_wal.c - the resource manager's WAL reader on arbitrary bytes
 *
 * Walks the input with state_wal_next() exactly as recovery does.  Every
 * accepted record must re-encode and decode to the same record, the
 * cursor must only move forward inside the input, and a refusal must
 * leave the cursor where it was.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "statefmt.h"
#include "fuzz.h"

static void round_trip(const struct wal_rec *r)
{
	struct buf b = BUF_INIT;
	struct wal_rec again;
	const char *why;
	size_t off = 0;
	int rc;

	if (r->type == WAL_ALLOC)
		rc = state_wal_encode_alloc(&b, &r->alloc, r->request_id,
					    r->timestamp);
	else
		rc = state_wal_encode_free(&b, r->region_id, r->request_id,
					   r->timestamp);
	if (rc < 0)
		return;
	CHECK(state_wal_next(b.data, b.len, &off, &again, &why) == 1);
	CHECK(off == b.len);
	CHECK(again.type == r->type && again.region_id == r->region_id &&
	      again.request_id == r->request_id &&
	      again.timestamp == r->timestamp);
	if (r->type == WAL_ALLOC)
		CHECK(memcmp(&again.alloc, &r->alloc, sizeof(r->alloc)) == 0);
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wal_rec r;
	const char *why;
	size_t off = 0, before;
	int rc;

	for (;;) {
		before = off;
		rc = state_wal_next(data, size, &off, &r, &why);
		if (rc <= 0) {
			CHECK(off == before);
			CHECK(rc == 0 || rc == -EAGAIN || rc == -EPROTO);
			break;
		}
		CHECK(off > before && off <= size);
		CHECK(strlen(r.alloc.owner) < STATE_OWNER_SIZE);
		round_trip(&r);
	}
	return 0;
}
