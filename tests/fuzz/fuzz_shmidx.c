/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_shmidx.c - the shared index's reader over areas a writer made and
 * someone then scribbled on (src/common/shmidx.c; a process that may
 * write the pool may write the index too, docs/shm-index.md)
 *
 * Input: byte 0 picks the coherence model (none, flush, simulate), the
 * table's size (1 to 16 groups), (bit 6) a writer's shadow and (bit 7)
 * whether the readers' hints (si_lookup's, one per key: the key number's
 * top 32 bits) are taken as they are (mostly outside the table) rather
 * than modulo the table's slots + 2 (mostly lines of other keys); then
 * up to 64 little-endian 8-byte key
 * numbers (a repeated one counts once), ended by a 0xff byte (or the
 * end); the rest are patches of 4
 * bytes (offset: 2 bytes into the area, a byte to XOR, a byte ignored).
 * The writer publishes the keys (si_insert, si_remove of every fourth),
 * a superblock names the table, the patches are applied, and then every
 * key and some absent ones are looked up, one by one and as a batch
 * (without and with the hints), and re-checked.  Without patches the answers
 * must be right (a published key hits with its location, a removed or absent
 * one never hits); with them only that nothing is read outside the area (ASan)
 * and every answer is one of the three.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "shmidx.h"

#define MAXK 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int cohs[3] = {SI_COHERENT, SI_FLUSH, SI_SIMULATE};
	uint8_t dg[MAXK + 8][SI_DIGEST];
	uint64_t keys[MAXK], g;
	uint32_t hints[MAXK + 8];
	struct si_map wm, rm;
	struct si_table t = {0};
	struct si_super sb = {0};
	struct si_layout lay = {0};
	struct si_rstats st = {0};
	struct si_hit hit, hits[MAXK + 8];
	struct si_entry e;
	int res[MAXK + 8], coh, r;
	bool placed[MAXK], patched = false;
	size_t n = 0, i, len, at;
	uint8_t *mem;

	if (size < 1)
		return 0;
	coh = cohs[(data[0] & 3) % 3];
	t.off = SI_HDR;
	t.n_groups = 1 + ((data[0] >> 2) & 15);
	len = SI_HDR + si_table_bytes(t.n_groups);
	for (at = 1; at + 8 <= size && n < MAXK && data[at] != 0xff; at += 8) {
		size_t j;

		memcpy(&keys[n], data + at, 8);
		for (j = 0; j < n && keys[j] != keys[n]; j++)
			;
		n += j == n; /* each key once */
	}
	if (at < size && data[at] == 0xff)
		at++;
	mem = aligned_alloc(64, len);
	if (!mem)
		return 0;
	memset(mem, 0, len);
	if (si_map_init(&wm, mem, len, coh, true) < 0) {
		free(mem);
		return 0;
	}
	/* bit 6: the writer keeps a shadow of the table, as maru-server */
	if ((data[0] & 0x40) && si_shadow_new(&t) < 0) {
		si_map_destroy(&wm);
		free(mem);
		return 0;
	}
	si_format(&wm, &t);
	for (i = 0; i < n; i++) {
		si_digest(2, &keys[i], 8, dg[i]);
		memset(&e, 0, sizeof(e));
		memcpy(e.digest, dg[i], SI_DIGEST);
		e.region_id = keys[i] | 1;
		e.kv_offset = i * 64;
		e.kv_length = 64;
		e.gen = i + 1;
		placed[i] = si_insert(&wm, &t, &e) == 1;
	}
	for (i = 0; i < n; i += 4)
		if (si_remove(&wm, &t, dg[i]))
			placed[i] = false;
	sb.state = 2;
	sb.magic = SI_MAGIC;
	sb.layout = SI_LAYOUT;
	sb.table_off = t.off;
	sb.n_groups = t.n_groups;
	si_wb_fence(&wm);
	si_super_write(&wm, &sb);
	/* someone with write access to the area */
	for (; at + 4 <= size; at += 4) {
		size_t off = (size_t)(data[at] | data[at + 1] << 8) % len;

		mem[off] ^= data[at + 2];
		patched = true;
	}
	for (i = 0; i < 8; i++) {
		g = 0xabcdef0000ull + i; /* never a key of the input */
		si_digest(1, &g, 8, dg[n + i]);
	}
	CHECK(si_map_init(&rm, mem, len, coh, false) == 0);
	for (i = 0; i < n + 8; i++) {
		hints[i] = i < n ? (uint32_t)(keys[i] >> 32) : (uint32_t)i;
		if (!(data[0] & 0x80))
			hints[i] %= (uint32_t)t.n_groups * SI_GROUP + 2;
	}
	for (i = 0; i < n + 8; i++) {
		r = si_lookup(&rm, &lay, dg[i], 0, false, &hit, &st);
		CHECK(r == SI_HIT || r == SI_MISS || r == SI_ASK);
		if (!patched && i < n && placed[i] && r == SI_HIT)
			CHECK(hit.gen == i + 1 && hit.kv_offset == i * 64 &&
			      hit.region_id == (keys[i] | 1));
		if (!patched && i < n && placed[i])
			CHECK(r != SI_MISS);
		/* a key removed, or never there, never hits */
		if (!patched && (i >= n || !placed[i]))
			CHECK(r != SI_HIT);
		r = si_lookup(&rm, &lay, dg[i], 0, true, &hit, &st);
		CHECK(r == SI_HIT || r == SI_MISS || r == SI_ASK);
		/* a hint of any value changes no answer */
		r = si_lookup(&rm, &lay, dg[i], hints[i], false, &hit, &st);
		CHECK(r == SI_HIT || r == SI_MISS || r == SI_ASK);
		if (!patched && i < n && placed[i] && r == SI_HIT)
			CHECK(hit.gen == i + 1 && hit.kv_offset == i * 64 &&
			      hit.slot >= 1 &&
			      hit.slot <= t.n_groups * SI_GROUP);
		if (!patched && i < n && placed[i])
			CHECK(r != SI_MISS);
		if (!patched && (i >= n || !placed[i]))
			CHECK(r != SI_HIT);
	}
	si_lookup_batch(&rm, &lay, n + 8, (const uint8_t(*)[SI_DIGEST])dg, NULL,
			res, hits, &st);
	for (i = 0; i < n + 8; i++) {
		CHECK(res[i] == SI_HIT || res[i] == SI_MISS ||
		      res[i] == SI_ASK);
		if (!patched && i < n && placed[i])
			CHECK(res[i] != SI_MISS);
	}
	si_lookup_batch(&rm, &lay, n + 8, (const uint8_t(*)[SI_DIGEST])dg,
			hints, res, hits, &st);
	for (i = 0; i < n + 8; i++) {
		CHECK(res[i] == SI_HIT || res[i] == SI_MISS ||
		      res[i] == SI_ASK);
		if (!patched && i < n && placed[i])
			CHECK(res[i] != SI_MISS);
		if (!patched && i < n && placed[i] && res[i] == SI_HIT)
			CHECK(hits[i].gen == i + 1 &&
			      hits[i].kv_offset == i * 64);
		if (!patched && (i >= n || !placed[i]))
			CHECK(res[i] != SI_HIT);
	}
	si_map_destroy(&rm);
	si_map_destroy(&wm);
	si_shadow_free(&t);
	free(mem);
	return 0;
}
