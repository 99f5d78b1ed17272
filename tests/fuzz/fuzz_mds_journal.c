/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_mds_journal.c - a journal segment as a restart reads it
 *
 * The input is the bytes of one segment (journal.h).  Its frames are
 * walked with jr_next() and decoded with jr_decode(); every record is
 * replayed into a fresh store with mds_apply(), until the first bad
 * frame, bad record, or record the store refuses -- as jr_recover() does.
 * Checks, besides the sanitizers: jr_next() never reads past the input
 * and only moves forward; a decoded record has the field counts of its
 * type; and whatever prefix was applied, the store is consistent
 * afterwards (mds_recovered(), then mds_check()), so no journal can make
 * the server hold a state its own requests could not reach.
 *
 * Seeds (corpus/fuzz_mds_journal/) are segments written by the server
 * itself (tests/unit/test_mds_journal.c writes them: a mixed load with
 * leases, pins, deletes and a snapshot) and some damaged copies.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "journal.h"
#include "log.h"
#include "store.h"

static int fake_alloc(void *arg, uint64_t size, struct mds_wait *w,
		      struct rm_handle *out)
{
	(void)arg;
	(void)size;
	(void)w;
	(void)out;
	return -EAGAIN;
}

static int fake_free(void *arg, const struct rm_handle *h)
{
	(void)arg;
	(void)h;
	return 0;
}

static int fake_usage(void *arg, bool dax_only, uint64_t *total,
		      uint64_t *avail, struct mds_wait *w)
{
	(void)arg;
	(void)dax_only;
	(void)w;
	*total = *avail = 0;
	return 0;
}

static const struct mds_rm_ops fake_rm = {fake_alloc, fake_free, fake_usage,
					  NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mds_config cfg;
	const uint8_t *pl;
	struct jr_rec rec;
	struct mds s;
	size_t off = 0, prev;
	uint32_t plen;
	int r;

	log_init("fuzz", LOG_CRIT);
	memset(&cfg, 0, sizeof(cfg));
	cfg.lease_ttl_ns = 30000000000ull;
	cfg.peer_grace_ns = 60000000000ull;
	CHECK(mds_init(&s, &cfg, &fake_rm, NULL, 1) == 0);
	s.replaying = true;
	for (;;) {
		prev = off;
		r = jr_next(data, size, &off, &pl, &plen);
		CHECK(r == 1 || off == prev);
		if (r <= 0)
			break;
		CHECK(off > prev && off <= size && pl >= data &&
		      pl + plen == data + off);
		if (jr_decode(pl, plen, &rec) < 0)
			break;
		CHECK(rec.type > 0 && rec.type < JR_NTYPES && rec.nu <= 6 &&
		      rec.ns <= 3);
		if (rec.type == JR_HEAD)
			continue;
		if (mds_apply(&s, &rec) < 0)
			break;
	}
	mds_recovered(&s, 1000000000ull);
	CHECK(mds_check(&s) == 0);
	mds_destroy(&s);
	return 0;
}
