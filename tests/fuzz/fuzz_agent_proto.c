/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_agent_proto.c - maru-agent's decoders (src/common/agent_proto.c):
 * the ACCESS request the agent reads from the network, and the reply a
 * remote worker reads from the agent.
 *
 * Checks beyond "no crash, no out-of-bounds read": an accepted ACCESS has
 * a length of 1 byte to AGENT_REGION_MAX and an end that does not
 * overflow, and survives a round trip through agent_encode_access (the
 * same values decoded again); a reply's borrowed strings and blobs lie
 * inside the input, and its blob is at most AGENT_BLOB_MAX.
 */
#include <string.h>

#include "agent_proto.h"
#include "buf.h"
#include "fuzz.h"

static int inside(const uint8_t *p, size_t n, const void *q, size_t len)
{
	const uint8_t *b = q;

	return !len || (b >= p && b + len <= p + n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct agent_access_req q, q2;
	struct agent_reply rep;
	struct buf b = {0};
	struct mp_wr w = {&b, 0};
	const char *why;

	if (agent_decode_access(data, size, &q, &why) == 0) {
		CHECK(q.length >= 1 && q.length <= AGENT_REGION_MAX);
		CHECK(q.offset <= UINT64_MAX - q.length);
		agent_encode_access(&w, &q);
		CHECK(!w.err);
		CHECK(agent_decode_access(b.data, b.len, &q2, &why) == 0);
		CHECK(!memcmp(&q, &q2, sizeof(q)));
	} else {
		CHECK(why != NULL);
	}
	buf_free(&b);
	if (agent_decode_reply(data, size, &rep) == 0) {
		CHECK(inside(data, size, rep.error, rep.error_len));
		CHECK(inside(data, size, rep.blob, rep.blob_len));
		CHECK(rep.blob_len <= AGENT_BLOB_MAX);
	}
	return 0;
}
