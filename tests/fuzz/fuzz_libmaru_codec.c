/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_libmaru_codec.c - libmaru's decoders of outside bytes
 *
 * The first byte picks what runs on the rest:
 *   0  a metadata reply payload (maru__decode_reply, every sink set)
 *   1  a GET_STATS payload (maru__decode_stats)
 *   2  a MARUDEV device header (devhdr_parse, as daxdev.c reads it)
 *   3  a whole body frame as the RPC layer sees it: header, then payload
 *   4  encoder cross-check: the bytes become a str/bin/int key, are encoded
 *      as {"key": K} and must read back as a well-formed map
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devhdr.h"
#include "mds_proto.h"
#include "private.h"
#include "fuzz.h"

static int on_handle(void *arg, const struct maru_region_handle *h)
{
	size_t *n = arg;

	(*n)++;
	/* stop early on a magic id: the callback's value must come back */
	return h->region_id == 0xdead ? 7 : 0;
}

static void reply(const uint8_t *p, size_t n)
{
	struct maru__lookup ents[4];
	struct maru__reply r;
	volatile char c;
	size_t handles = 0;
	bool res[4];
	uint32_t i;
	int rc;

	memset(&r, 0, sizeof(r));
	r.results = res;
	r.nresults = 4;
	r.entries = ents;
	r.nentries = 4;
	r.on_handle = on_handle;
	r.arg = &handles;
	rc = maru__decode_reply(p, n, &r);
	CHECK(rc == 0 || rc == -EPROTO || rc == 7);
	if (rc == 0) {
		CHECK(handles <= r.handles_len);
		for (i = 0; i < r.rm_address_len; i++)
			c = r.rm_address[i];
		(void)c;
		if (r.rm_address_len)
			CHECK(r.rm_address >= (const char *)p &&
			      r.rm_address + r.rm_address_len <=
				      (const char *)p + n);
		if (r.server_id)
			CHECK(r.server_id >= (const char *)p &&
			      r.server_id + r.server_id_len <=
				      (const char *)p + n);
	}
}

static void key_roundtrip(const uint8_t *p, size_t n)
{
	struct maru_key k;
	struct maru__msg m;
	struct maru__reply r;
	int64_t v = 0;

	memcpy(&v, p, n < 8 ? n : 8);
	switch (n % 4) {
	case 0:
		k = maru_key_str((const char *)p, n);
		break;
	case 1:
		k = (struct maru_key){MARU_KEY_BIN, n, (const char *)p, 0, 0};
		break;
	case 2:
		k = maru_key_int(v);
		break;
	default:
		k = maru_key_uint((uint64_t)v);
		break;
	}
	maru__msg_init(&m, MDS_EXISTS_KV);
	CHECK(maru__enc_key(&m, &k) == 0);
	memset(&r, 0, sizeof(r));
	CHECK(maru__decode_reply(m.data + MDS_HDR_SIZE, m.len - MDS_HDR_SIZE,
				 &r) == 0);
	maru__msg_release(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct maru_server_stats st;
	struct mds_hdr hdr;
	char uuid[37];
	struct devhdr dh;
	bool error;

	if (size < 1)
		return 0;
	switch (data[0] % 5) {
	case 0:
		reply(data + 1, size - 1);
		break;
	case 1:
		maru__decode_stats(data + 1, size - 1, &st, &error);
		break;
	case 2:
		if (devhdr_parse(data + 1, size - 1, &dh) == 0) {
			devhdr_uuid_str(dh.uuid, uuid);
			CHECK(strlen(uuid) == 36);
		}
		break;
	case 3:
		if (mds_hdr_decode(data + 1, size - 1, &hdr) == 0)
			reply(data + 1 + MDS_HDR_SIZE, hdr.payload_len);
		break;
	default:
		key_roundtrip(data + 1, size - 1);
		break;
	}
	return 0;
}
