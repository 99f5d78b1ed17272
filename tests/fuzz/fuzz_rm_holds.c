/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rm_holds.c - the holds.meta reader on arbitrary bytes
 *
 * The records an accepted file reads (recovery refuses a file with a bad
 * one) re-encode to a file that parses to the same records.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "statefmt.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n)
{
	struct state_hold *v, h;
	struct holds_meta m, m2;
	struct buf b = BUF_INIT;
	const char *why;
	uint64_t i, good = 0;

	if (state_holds_parse(p, n, &m, &why) < 0)
		return 0;
	CHECK(m.count == (n - HOLDS_META_HDR_SIZE) / HOLDS_REC_SIZE);
	v = malloc((m.count ? m.count : 1) * sizeof(*v));
	if (!v)
		return 0;
	for (i = 0; i < m.count; i++) {
		if (state_holds_get(&m, i, &v[good]) < 0)
			continue;
		CHECK(strlen(v[good].owner) >= 1 &&
		      strlen(v[good].owner) < STATE_OWNER_SIZE);
		good++;
	}
	if (state_holds_encode(&b, v, good) == 0) {
		CHECK(state_holds_parse(b.data, b.len, &m2, &why) == 0);
		CHECK(m2.count == good);
		for (i = 0; i < good; i++) {
			CHECK(state_holds_get(&m2, i, &h) == 0);
			CHECK(!strcmp(h.owner, v[i].owner) &&
			      h.away_since == v[i].away_since &&
			      h.write_ms == v[i].write_ms);
		}
	}
	buf_free(&b);
	free(v);
	return 0;
}
