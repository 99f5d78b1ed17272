/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_marutop_reply.c - marutop's GET_USAGE / GET_STATS decoders
 * (tools/marutop/decode.c) and everything that then shows the sample
 *
 * Input: byte 0 says which decoder sees the rest first (bit 0) and the
 * table width (the other bits, 20..147 columns); the rest is one reply
 * payload, fed to both decoders in that order.  A decoded sample is
 * rendered as a table, CSV and JSON, sorted by every column, and given
 * rates against itself; the header and every row of the table must fit
 * the width (the title and the DEVICES lines may be cut by curses).
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "mt.h"

static void render(struct mt_snap *s, int width)
{
	struct buf b = BUF_INIT;
	const char *p, *nl, *end;
	bool rows = false;
	int c;

	for (c = 0; c < MT_NCOLS; c++) {
		mt_sort(s, c, c & 1);
		buf_reset(&b);
		CHECK(mt_render_table(&b, "t", s, width, c, c & 1) == 0);
	}
	/* the header and the rows (after the first blank line) fit, up to
	 * the DEVICES section */
	p = (const char *)b.data;
	end = p + b.len;
	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		CHECK(nl); /* every line ends in '\n' */
		if (nl == p) {
			if (rows)
				break;
			rows = true;
			continue;
		}
		if (rows)
			CHECK(nl - p <= width);
	}
	buf_reset(&b);
	CHECK(mt_render_csv(&b, "t", s) == 0);
	CHECK(mt_render_json(&b, "t", s) == 0);
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mt_snap s, prev;
	int width, rc;

	if (size < 1)
		return 0;
	width = 20 + (data[0] >> 1);
	mt_snap_init(&s);
	if (data[0] & 1) {
		rc = mt_decode_stats(&s, data + 1, size - 1);
		if (rc == 0)
			rc = mt_decode_usage(&s, data + 1, size - 1);
	} else {
		rc = mt_decode_usage(&s, data + 1, size - 1);
		if (rc == 0)
			rc = mt_decode_stats(&s, data + 1, size - 1);
	}
	CHECK(rc == 0 || rc == -EPROTO || rc == -ENOMEM);
	if (rc == 0) {
		prev = s;
		prev.t_ns = 0;
		s.t_ns = 1000000000;
		mt_rates(&s, &prev);
		render(&s, width);
	}
	mt_snap_free(&s);
	return 0;
}
