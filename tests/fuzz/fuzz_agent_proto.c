/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_agent_proto.c - maru-agent's decoders (src/common/agent_proto.c):
 * the requests the agent reads from the network (ACCESS, HELLO/BYE, the
 * transfers' header), and the replies a remote worker reads from it (the
 * control replies, the transfers' reply header).
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
	uint8_t hdr[AGENT_AM_REQ_MAX], rhdr[AGENT_AM_REP_MAX];
	struct agent_am_req am2;
	struct agent_am_rep ar2;
	size_t hn;
	struct agent_am_req am;
	struct agent_am_rep ar;
	const uint8_t *sid;
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
		CHECK(!rep.session ||
		      inside(data, size, rep.session, AGENT_SESSION_LEN));
	}
	if (agent_decode_hello(data, size, &sid) == 0)
		CHECK(!sid || inside(data, size, sid, AGENT_SESSION_LEN));
	/* the transfers' headers: a round trip through the encoders */
	if (agent_am_req_decode(data, size, &am) == 0) {
		CHECK(size <= AGENT_AM_REQ_MAX);
		CHECK(am.length >= 1 && am.length <= AGENT_REGION_MAX);
		CHECK(am.offset <= UINT64_MAX - am.length);
		hn = agent_am_req_encode(&am, hdr);
		CHECK(hn && agent_am_req_decode(hdr, hn, &am2) == 0);
		CHECK(!memcmp(&am, &am2, sizeof(am)));
	}
	if (agent_am_rep_decode(data, size, &ar) == 0) {
		CHECK(size <= AGENT_AM_REP_MAX && ar.status <= 0);
		hn = agent_am_rep_encode(&ar, rhdr);
		CHECK(hn && agent_am_rep_decode(rhdr, hn, &ar2) == 0);
		CHECK(ar.seq == ar2.seq && ar.status == ar2.status);
	}
	return 0;
}
