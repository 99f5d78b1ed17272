/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shmidx.c - the shared index's line protocol (see shmidx.h)
 *
 * Lines are written with a seqlock: word 0 goes odd, the other words are
 * stored, word 0 goes even with the new sequence; x86 keeps stores in
 * program order, so any copy of the line a reader takes -- from its
 * cache, or in SI_FLUSH mode from memory in one 64-byte fill -- is an
 * older stable version, an odd one, or the new one, and the check word
 * rejects a line torn any other way (a platform that broke 64-byte
 * atomicity, a half-copied line in SI_SIMULATE).
 *
 * The digest is SHA-256 through OpenSSL's one-shot low-level functions:
 * 62 ns for a key of up to 51 bytes here, where EVP (deprecation's
 * replacement) takes 124 ns with a prefetched digest and 300 ns without
 * (docs/shm-index.md "Digest").
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "shmidx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <openssl/sha.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

/* ---- coherence ---- */

#if defined(__x86_64__)
static int have_clwb = -1, have_clflushopt;

static void cpu_probe(void)
{
	unsigned a, b, c, d;

	have_clflushopt = 0;
	have_clwb = 0;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
		have_clflushopt = !!(b & (1u << 23));
		have_clwb = !!(b & (1u << 24));
	}
}

static inline void line_wb(const void *p)
{
	if (have_clwb)
		__asm__ volatile("clwb %0" : "+m"(*(volatile char *)p));
	else if (have_clflushopt)
		__asm__ volatile("clflushopt %0" : "+m"(*(volatile char *)p));
	else
		__asm__ volatile("clflush %0" : "+m"(*(volatile char *)p));
}

static inline void line_inv(const void *p)
{
	if (have_clflushopt)
		__asm__ volatile("clflushopt %0" : "+m"(*(volatile char *)p));
	else
		__asm__ volatile("clflush %0" : "+m"(*(volatile char *)p));
}

static inline void fence_s(void)
{
	__asm__ volatile("sfence" ::: "memory");
}

static inline void fence_m(void)
{
	__asm__ volatile("mfence" ::: "memory");
}
#endif

static const char *const coh_names[] = {"none", "flush", "simulate"};

const char *si_coh_name(int coh)
{
	return coh >= 0 && coh <= SI_SIMULATE ? coh_names[coh] : "?";
}

int si_coh_parse(const char *s)
{
	int i;

	for (i = 0; i <= SI_SIMULATE; i++)
		if (!strcmp(s, coh_names[i]))
			return i;
	return -EINVAL;
}

int si_map_init(struct si_map *m, void *mem, size_t len, int coh, bool writer)
{
	memset(m, 0, sizeof(*m));
	m->mem = mem;
	m->base = mem;
	m->len = len;
	m->coh = coh;
	if (coh == SI_FLUSH) {
#if defined(__x86_64__)
		if (have_clwb < 0)
			cpu_probe();
#else
		return -ENOTSUP;
#endif
	}
	if (coh == SI_SIMULATE) {
		/* anonymous memory: untouched pages cost nothing */
		m->base = mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m->base == MAP_FAILED) {
			m->base = NULL;
			return -ENOMEM;
		}
		if (writer)
			memcpy(m->base, mem, len);
	}
	return 0;
}

void si_map_destroy(struct si_map *m)
{
	if (m->coh == SI_SIMULATE && m->base)
		munmap(m->base, m->len);
	memset(m, 0, sizeof(*m));
}

static inline size_t line_of(const struct si_map *m, const void *p)
{
	return ((size_t)((const uint8_t *)p - m->base)) &
	       ~(size_t)(SI_LINE - 1);
}

/* a line from the private copy to the shared memory, or back */
static void sim_copy(uint8_t *dst, const uint8_t *src)
{
	volatile uint64_t *d = (volatile uint64_t *)dst;
	const volatile uint64_t *s = (const volatile uint64_t *)src;
	int i;

	/* word by word, word 0 last as the writer does: a reader may copy
	 * the line in the middle (a torn line, rejected by its check) */
	for (i = 1; i < 8; i++)
		d[i] = s[i];
	__atomic_thread_fence(__ATOMIC_RELEASE);
	d[0] = s[0];
}

static bool line_filled(const uint8_t *p)
{
	const uint64_t *w = (const uint64_t *)p;
	int i;

	for (i = 0; i < 8; i++)
		if (w[i])
			return true;
	return false;
}

static void wb(const struct si_map *m, const void *p, bool removal)
{
	size_t o;

	switch (m->coh) {
#if defined(__x86_64__)
	case SI_FLUSH:
		line_wb(p);
		break;
#endif
	case SI_SIMULATE:
		if (removal && (m->fault & SI_FAULT_NO_WB_DEL))
			break;
		o = line_of(m, p);
		sim_copy(m->mem + o, m->base + o);
		break;
	default:
		break;
	}
}

void si_wb(const struct si_map *m, const void *p)
{
	wb(m, p, false);
}

void si_wb_fence(const struct si_map *m)
{
#if defined(__x86_64__)
	if (m->coh == SI_FLUSH) {
		fence_s();
		return;
	}
#endif
	if (m->coh == SI_SIMULATE)
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void si_inv(const struct si_map *m, const void *p)
{
	size_t o;

	switch (m->coh) {
#if defined(__x86_64__)
	case SI_FLUSH:
		line_inv(p);
		break;
#endif
	case SI_SIMULATE:
		o = line_of(m, p);
		/* the fault: a line once read is kept forever, as a cache
		 * that is never invalidated (filled at its first read) */
		if ((m->fault & SI_FAULT_NO_INV) && line_filled(m->base + o))
			break;
		sim_copy(m->base + o, m->mem + o);
		break;
	default:
		break;
	}
}

/* the reader's fence between invalidations and loads (SI_FLUSH) */
static inline void inv_fence(const struct si_map *m)
{
#if defined(__x86_64__)
	if (m->coh == SI_FLUSH) {
		fence_m();
		return;
	}
#endif
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* ---- keys and checks ---- */

void si_digest(uint8_t tag, const void *key, size_t len, uint8_t out[SI_DIGEST])
{
	const uint8_t pre[4] = {'M', 'K', '1', tag};
	uint8_t md[SHA256_DIGEST_LENGTH];
	SHA256_CTX c;

	SHA256_Init(&c);
	SHA256_Update(&c, pre, sizeof(pre));
	SHA256_Update(&c, key, len);
	SHA256_Final(md, &c);
	memcpy(out, md, SI_DIGEST);
}

uint64_t si_check(const void *line)
{
	uint64_t w[7], h = 0x9e3779b97f4a7c15ull;
	int i;

	memcpy(w, line, sizeof(w)); /* any type's bytes (no aliasing) */
	for (i = 0; i < 7; i++) {
		h ^= w[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	return h;
}

/* ---- readers ---- */

/*
 * Copy the line at @src into @w and say whether the copy is a stable,
 * self-consistent version: word 0 the same before and after and the check
 * right.  An entry must also have an even word 0 (an odd one with a good
 * check cannot be written); a superblock's odd state says "being
 * changed" (si_super_read).
 */
static bool snap_any(const void *src, uint64_t w[8])
{
	const volatile uint64_t *s = src;
	uint64_t a, b;
	int i;

	a = __atomic_load_n((const uint64_t *)src, __ATOMIC_ACQUIRE);
	for (i = 0; i < 8; i++)
		w[i] = s[i];
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	b = __atomic_load_n((const uint64_t *)src, __ATOMIC_RELAXED);
	return a == b && w[0] == a && w[7] == si_check(w);
}

int si_super_read(const struct si_map *m, struct si_super *out,
		  struct si_layout *lay)
{
	uint64_t w[8], end;

	si_inv(m, m->base);
	if (m->coh != SI_COHERENT)
		inv_fence(m);
	if (!snap_any(m->base, w))
		return -EAGAIN;
	memcpy(out, w, sizeof(*out));
	if (out->magic != SI_MAGIC || out->layout != SI_LAYOUT)
		return -EBADF;
	if (out->state & 1)
		return -EBUSY; /* a start or a stop: ask the server */
	/* a table inside the mapping, or nothing to read */
	if (out->table_off < SI_HDR || out->table_off % SI_LINE ||
	    !out->n_groups || out->n_groups > m->len / SI_GROUP_BYTES)
		return -EBADF;
	end = out->table_off + si_table_bytes(out->n_groups);
	if (end < out->table_off || end > m->len)
		return -EBADF;
	lay->state = out->state;
	lay->table_off = out->table_off;
	lay->n_groups = out->n_groups;
	return 0;
}

void si_groups(const uint8_t d[SI_DIGEST], uint64_t n, uint64_t *g1,
	       uint64_t *g2)
{
	uint64_t a, b;

	memcpy(&a, d, 8);
	memcpy(&b, d + 8, 8);
	*g1 = (uint64_t)(((unsigned __int128)a * n) >> 64);
	if (n % SI_PAGE_GROUPS == 0) {
		/* the second choice: one of the 15 others of the first one's
		 * page, evenly */
		uint64_t r = (uint64_t)(((unsigned __int128)b *
					 (SI_PAGE_GROUPS - 1)) >>
					64);

		*g2 = (*g1 & ~(uint64_t)(SI_PAGE_GROUPS - 1)) |
		      ((*g1 + 1 + r) & (SI_PAGE_GROUPS - 1));
		return;
	}
	*g2 = (uint64_t)(((unsigned __int128)b * n) >> 64);
	if (*g2 == *g1)
		*g2 = (*g1 + 1) % n;
}

static inline void pause_cpu(void)
{
#if defined(__x86_64__)
	__builtin_ia32_pause();
#endif
}

/*
 * The current layout: the state word only, when it still names @lay
 * (states are never reused, so the rest of the line is as it was); a whole
 * snapshot when it moved on.  SI_FLUSH: the caller invalidated the line.
 * Return: 0 (*@s1), 1 @lay refreshed (look again), -EBUSY, -EBADF, -EAGAIN.
 */
static int super_now(const struct si_map *m, struct si_layout *lay,
		     uint64_t *s1)
{
	struct si_super sb;
	struct si_layout now;
	uint64_t s =
		__atomic_load_n((const uint64_t *)m->base, __ATOMIC_ACQUIRE);
	int rc;

	if (s == lay->state && !(s & 1)) {
		*s1 = s;
		return 0;
	}
	rc = si_super_read(m, &sb, &now);
	if (rc < 0)
		return rc;
	*lay = now;
	return 1;
}

/*
 * Read the entry at @e as far as a lookup of digest (@d0, @d1) needs it.
 * Coherent: the seqlock alone (word 0 the same, even, around the reads),
 * and only the digest unless it is ours.  Non-coherent (or simulated):
 * the whole line and its check (a line torn any other way is rejected).
 * Return: -1 unstable, 0 stable and not ours (*@flags), 1 ours (*@out).
 */
static int probe_entry(const struct si_map *m, const struct si_entry *e,
		       uint64_t d0, uint64_t d1, uint16_t *flags,
		       struct si_hit *out)
{
	const volatile uint64_t *s = (const volatile uint64_t *)e;
	uint64_t w[8], a, b;
	int i;

	a = __atomic_load_n((const uint64_t *)e, __ATOMIC_ACQUIRE);
	w[0] = a;
	if (m->coh != SI_COHERENT) {
		for (i = 1; i < 8; i++)
			w[i] = s[i];
	} else {
		w[1] = s[1];
		w[2] = s[2];
		if (((a >> 32) & SI_F_LIVE) && w[1] == d0 && w[2] == d1)
			for (i = 3; i < 7; i++)
				w[i] = s[i];
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	b = __atomic_load_n((const uint64_t *)e, __ATOMIC_RELAXED);
	if (a != b || (a & 1))
		return -1;
	if (m->coh != SI_COHERENT && w[7] != si_check(w))
		return -1;
	*flags = (uint16_t)(a >> 32);
	if (!(*flags & SI_F_LIVE) || w[1] != d0 || w[2] != d1)
		return 0;
	out->region_id = w[3];
	out->kv_offset = w[4];
	out->kv_length = (uint32_t)w[5];
	out->gen = w[6];
	return 1;
}

/* the 8 lines of digest @d's groups */
static void lines_of(const struct si_map *m, const struct si_layout *lay,
		     const uint8_t d[SI_DIGEST], const struct si_entry *grp[2])
{
	uint64_t g1, g2;

	si_groups(d, lay->n_groups, &g1, &g2);
	grp[0] = (const struct si_entry *)(m->base + lay->table_off) +
		 g1 * SI_GROUP;
	grp[1] = (const struct si_entry *)(m->base + lay->table_off) +
		 g2 * SI_GROUP;
}

/* 1 + the slot of @e in @lay's table (a hint), 0 past 32 bits */
static uint32_t slot_hint(const struct si_map *m, const struct si_layout *lay,
			  const struct si_entry *e)
{
	uint64_t i = (uint64_t)(e - (const struct si_entry *)(m->base +
							      lay->table_off));

	return i < UINT32_MAX ? (uint32_t)i + 1 : 0;
}

/* the line hint @hint names in @lay's table, or NULL (none, outside) */
static const struct si_entry *
hint_line(const struct si_map *m, const struct si_layout *lay, uint32_t hint)
{
	if (!hint || hint > lay->n_groups * SI_GROUP)
		return NULL;
	return (const struct si_entry *)(m->base + lay->table_off) + hint - 1;
}

/* probe both groups: SI_HIT (*@out), SI_MISS, SI_ASK (an OVF mark), or
 * -1 (an unstable line, and no hit) */
static int probe(const struct si_map *m, const struct si_layout *lay,
		 const struct si_entry *grp[2], const uint8_t d[SI_DIGEST],
		 struct si_hit *out, struct si_rstats *st)
{
	uint64_t d0, d1;
	uint16_t fl, ovf = 0;
	int k, j, r, unstable = 0;

	out->slot = 0;
	memcpy(&d0, d, 8);
	memcpy(&d1, d + 8, 8);
	for (k = 0; k < 2; k++)
		for (j = 0; j < SI_GROUP; j++) {
			r = probe_entry(m, &grp[k][j], d0, d1, &fl, out);
			if (r == 1 && (fl & SI_F_ASK))
				return SI_ASK;
			if (r == 1) {
				out->slot = slot_hint(m, lay, &grp[k][j]);
				return SI_HIT;
			}
			if (r < 0) {
				unstable = 1;
				st->unstable++;
			} else {
				ovf |= fl & SI_F_OVF;
			}
		}
	return unstable ? -1 : ovf ? SI_ASK : SI_MISS;
}

/* probe the hinted line @e alone: SI_HIT (*@out), or -1 (look in the
 * groups: the line holds another key now, or is being written) */
static int probe_hinted(const struct si_map *m, const struct si_entry *e,
			uint32_t hint, const uint8_t d[SI_DIGEST],
			struct si_hit *out)
{
	uint64_t d0, d1;
	uint16_t fl;

	memcpy(&d0, d, 8);
	memcpy(&d1, d + 8, 8);
	if (probe_entry(m, e, d0, d1, &fl, out) != 1 || (fl & SI_F_ASK))
		return -1;
	out->slot = hint;
	return SI_HIT;
}

/* invalidate the lines a lookup reads (SI_FLUSH, SI_SIMULATE) */
static void inv_lines(const struct si_map *m, const struct si_entry *grp[2])
{
	int k, j;

	for (k = 0; k < 2; k++)
		for (j = 0; j < SI_GROUP; j++)
			si_inv(m, &grp[k][j]);
}

/* the state after the entries were read (SI_FLUSH: from memory) */
static uint64_t super_after(const struct si_map *m)
{
	if (m->coh != SI_COHERENT) {
		inv_fence(m);
		si_inv(m, m->base);
		inv_fence(m);
	} else {
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
	}
	return __atomic_load_n((const uint64_t *)m->base, __ATOMIC_ACQUIRE);
}

int si_lookup(const struct si_map *m, struct si_layout *lay,
	      const uint8_t d[SI_DIGEST], uint32_t hint, bool after_use,
	      struct si_hit *out, struct si_rstats *st)
{
	const struct si_entry *grp[2], *hl;
	struct si_super sb;
	uint64_t s1;
	int attempt, rc;
	bool wait = false;

	for (attempt = 0; attempt <= SI_RETRIES; attempt++) {
		if (wait)
			pause_cpu();
		wait = true;
		if (!lay->state) {
			/* no layout yet: the superblock says where */
			rc = si_super_read(m, &sb, lay);
			if (rc == -EBADF || rc == -EBUSY)
				return SI_ASK;
			if (rc < 0) {
				lay->state = 0;
				st->unstable++;
				continue;
			}
		}
		lines_of(m, lay, d, grp);
		hl = hint_line(m, lay, hint);
		if (m->coh != SI_COHERENT) {
			/* the caller's reads of a hit are done before any
			 * line is dropped (a refill is then no older) */
			if (after_use)
				inv_fence(m);
			if (hl)
				si_inv(m, hl);
			else
				inv_lines(m, grp);
			si_inv(m, m->base);
			inv_fence(m);
		} else if (after_use) {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
		}
		/* the superblock with the entries: still this table? */
		rc = super_now(m, lay, &s1);
		if (rc == -EBADF || rc == -EBUSY)
			return SI_ASK;
		if (rc) {
			if (rc < 0)
				st->unstable++;
			else
				st->restarts++;
			continue;
		}
		rc = hl ? probe_hinted(m, hl, hint, d, out)
			: probe(m, lay, grp, d, out, st);
		/* and after: the table was current while they were read */
		if (super_after(m) != s1) {
			st->restarts++;
			continue;
		}
		if (hl && rc < 0) {
			/* the hint is stale: the groups, now */
			hint = 0;
			wait = false;
			continue;
		}
		if (rc >= 0)
			return rc;
	}
	return SI_ASK;
}

void si_lookup_batch(const struct si_map *m, struct si_layout *lay, size_t n,
		     const uint8_t (*d)[SI_DIGEST], const uint32_t *hint,
		     int *res, struct si_hit *out, struct si_rstats *st)
{
	enum { AHEAD = 6, CHUNK = 32 };
	const struct si_entry *grp[CHUNK][2], *hl[CHUNK];
	struct si_super sb;
	size_t at, k, len;
	uint64_t s1;
	int attempt, rc;

	for (at = 0; at < n; at += len) {
		len = n - at < CHUNK ? n - at : CHUNK;
		for (attempt = 0;; attempt++) {
			if (attempt > SI_RETRIES) {
				for (k = 0; k < len; k++)
					res[at + k] = SI_ASK;
				break;
			}
			if (!lay->state) {
				rc = si_super_read(m, &sb, lay);
				if (rc < 0) {
					lay->state = 0;
					if (rc == -EBADF || rc == -EBUSY)
						attempt = SI_RETRIES;
					continue;
				}
			}
			for (k = 0; k < len; k++) {
				lines_of(m, lay, d[at + k], grp[k]);
				hl[k] = hint ? hint_line(m, lay, hint[at + k])
					     : NULL;
			}
			if (m->coh != SI_COHERENT) {
				/* the chunk's lines from memory: one fence */
				for (k = 0; k < len; k++) {
					if (hl[k])
						si_inv(m, hl[k]);
					else
						inv_lines(m, grp[k]);
				}
				si_inv(m, m->base);
				inv_fence(m);
			}
			rc = super_now(m, lay, &s1);
			if (rc == -EBADF || rc == -EBUSY) {
				attempt = SI_RETRIES;
				continue;
			}
			if (rc)
				continue;
			/* a hinted key is one line: the chunk's all at once */
			for (k = 0; k < len; k++)
				if (hl[k])
					__builtin_prefetch(hl[k]);
			for (k = 0; k < len; k++) {
				if (k + AHEAD < len && !hl[k + AHEAD]) {
					/* the groups a few keys ahead */
					__builtin_prefetch(grp[k + AHEAD][0]);
					__builtin_prefetch(grp[k + AHEAD][1]);
				}
				res[at + k] =
					hl[k] ? probe_hinted(
							m, hl[k], hint[at + k],
							d[at + k], &out[at + k])
					      : probe(m, lay, grp[k], d[at + k],
						      &out[at + k], st);
			}
			if (super_after(m) != s1) {
				st->restarts++;
				continue;
			}
			break;
		}
		/* a line was being written, or a hint was stale: that key
		 * alone, again, in its groups */
		for (k = 0; k < len; k++)
			if (res[at + k] < 0)
				res[at + k] =
					si_lookup(m, lay, d[at + k], 0, false,
						  &out[at + k], st);
	}
}

/* ---- the writer ---- */

static inline struct si_entry *
slot_at(const struct si_map *m, const struct si_table *t, uint64_t g, int j)
{
	return (struct si_entry *)(m->base + t->off) + g * SI_GROUP + j;
}

/* seqlock-write @line over the line @dst (word 0 last), then write it back */
static void write_line_odd(const struct si_map *m, void *dst, const void *line,
			   bool removal, uint64_t odd)
{
	volatile uint64_t *d = dst;
	uint64_t v[8];
	int i;

	memcpy(v, line, sizeof(v));
	/* odd first: a reader that meets it looks again */
	__atomic_store_n((uint64_t *)dst, odd, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (i = 1; i < 8; i++)
		d[i] = v[i];
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n((uint64_t *)dst, v[0], __ATOMIC_RELAXED);
	wb(m, dst, removal);
}

/* the same, odd keeping the rest of word 0 (the superblock's state) */
static void write_line(const struct si_map *m, void *dst, const void *line,
		       bool removal)
{
	write_line_odd(m, dst, line, removal,
		       ((volatile uint64_t *)dst)[0] | 1);
}

/* write entry @e into @slot: its seq the slot's next even one, check
 * computed */
static void put_entry(const struct si_map *m, struct si_entry *slot,
		      struct si_entry *e, bool removal)
{
	uint32_t old = slot->seq;

	e->seq = (old | 1) + 1;
	e->rsvd0 = 0;
	e->rsvd1 = 0;
	e->check = si_check(e);
	write_line_odd(m, slot, e, removal, (uint64_t)(old | 1));
}

void si_format(const struct si_map *m, const struct si_table *t)
{
	uint64_t i, n = t->n_groups * SI_GROUP;
	struct si_entry *e = (struct si_entry *)(m->base + t->off), empty;

	/* every empty line is the same line: its check once */
	memset(&empty, 0, sizeof(empty));
	empty.check = si_check(&empty);
	for (i = 0; i < n; i++) {
		memcpy(&e[i], &empty, sizeof(empty));
		wb(m, &e[i], false);
	}
	if (t->sh)
		memset(t->sh, 0, t->n_groups * sizeof(*t->sh));
}

/*
 * the shadow is read at random, one line per change: in huge pages where
 * the kernel has them (THP "madvise"), a TLB miss less per change
 */
static size_t shadow_len(const struct si_table *t)
{
	return (t->n_groups * sizeof(*t->sh) + 4095) & ~(size_t)4095;
}

int si_shadow_new(struct si_table *t)
{
	void *p = mmap(NULL, shadow_len(t), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return -ENOMEM;
#ifdef MADV_HUGEPAGE
	if (shadow_len(t) >= 2u << 20)
		(void)madvise(p, shadow_len(t), MADV_HUGEPAGE);
#endif
	t->sh = p; /* zero-filled */
	return 0;
}

void si_shadow_free(struct si_table *t)
{
	if (t->sh)
		munmap(t->sh, shadow_len(t));
	t->sh = NULL;
}

/*
 * a digest's fingerprint in the shadow: never 0 (empty).  Its low bytes:
 * the groups come from the high bits of each half (si_groups), so the keys
 * of one group share those, and a fingerprint taken there would match at
 * every slot (it did: bytes 14-15 made every insert read the lines)
 */
static inline uint16_t fp_of(const uint8_t d[SI_DIGEST])
{
	return (uint16_t)(d[0] | d[1] << 8) | 1;
}

const struct si_entry *si_live(const struct si_map *m, const struct si_table *t,
			       const uint8_t d[SI_DIGEST])
{
	uint64_t g[2];
	const struct si_entry *e;
	uint16_t f = fp_of(d);
	int k, j;

	si_groups(d, t->n_groups, &g[0], &g[1]);
	for (k = 0; k < 2; k++)
		for (j = 0; j < SI_GROUP; j++) {
			if (t->sh && t->sh[g[k]].fp[j] != f)
				continue;
			e = slot_at(m, t, g[k], j);
			if ((e->flags & SI_F_LIVE) &&
			    !memcmp(e->digest, d, SI_DIGEST))
				return e;
		}
	return NULL;
}

static void set_ovf(const struct si_map *m, const struct si_table *t,
		    uint64_t g)
{
	struct si_entry *s0 = slot_at(m, t, g, 0), v;

	if (s0->flags & SI_F_OVF)
		return;
	v = *s0;
	v.flags |= SI_F_OVF;
	put_entry(m, s0, &v, false);
}

void si_mark_ovf(const struct si_map *m, const struct si_table *t,
		 const uint8_t d[SI_DIGEST])
{
	uint64_t g1, g2;

	si_groups(d, t->n_groups, &g1, &g2);
	set_ovf(m, t, g1);
	set_ovf(m, t, g2);
}

/*
 * Where digest @d would go in @t: 1 (*@slot, the first free slot of the
 * emptier of its groups), 0 no room (both groups full), -EEXIST a live
 * entry has @d.  One pass over both groups -- in the shadow when there is
 * one (a shared line is read only to confirm a fingerprint).
 */
static int choose(const struct si_map *m, const struct si_table *t,
		  const uint8_t d[SI_DIGEST], struct si_entry **slot)
{
	struct si_entry *grp[2], *free1[2] = {NULL, NULL};
	uint64_t g[2], d0, d1, w[3];
	int n[2] = {0, 0}, k, j;
	uint16_t f;

	memcpy(&d0, d, 8);
	memcpy(&d1, d + 8, 8);
	f = fp_of(d);
	si_groups(d, t->n_groups, &g[0], &g[1]);
	for (k = 0; k < 2; k++) {
		grp[k] = slot_at(m, t, g[k], 0);
		for (j = 0; j < SI_GROUP; j++) {
			if (t->sh) {
				uint16_t x = t->sh[g[k]].fp[j];

				if (!x) {
					if (!free1[k])
						free1[k] = &grp[k][j];
					continue;
				}
				n[k]++;
				if (x != f)
					continue;
				memcpy(w, &grp[k][j], sizeof(w));
				if (((w[0] >> 32) & SI_F_LIVE) && w[1] == d0 &&
				    w[2] == d1)
					return -EEXIST;
				continue;
			}
			memcpy(w, &grp[k][j], sizeof(w));
			if (!((w[0] >> 32) & SI_F_LIVE)) {
				if (!free1[k])
					free1[k] = &grp[k][j];
				continue;
			}
			if (w[1] == d0 && w[2] == d1)
				return -EEXIST;
			n[k]++;
		}
	}
	if (!free1[0] && !free1[1])
		return 0;
	*slot = !free1[0] || (free1[1] && n[1] < n[0]) ? free1[1] : free1[0];
	return 1;
}

const void *si_aim(const struct si_map *m, const struct si_table *t,
		   const uint8_t d[SI_DIGEST])
{
	struct si_entry *slot;

	return t->sh && choose(m, t, d, &slot) == 1 ? slot : NULL;
}

int si_insert(const struct si_map *m, const struct si_table *t,
	      const struct si_entry *v)
{
	struct si_entry *slot, e;
	uint64_t g1, g2;
	size_t i;
	int rc = choose(m, t, v->digest, &slot);

	if (rc < 0)
		return rc;
	if (rc == 0) {
		si_groups(v->digest, t->n_groups, &g1, &g2);
		set_ovf(m, t, g1);
		set_ovf(m, t, g2);
		return 0;
	}
	e = *v;
	/* the group's mark lives in slot 0 and stays */
	i = (size_t)(slot - (struct si_entry *)(m->base + t->off));
	e.flags = (uint16_t)(SI_F_LIVE | (v->flags & SI_F_ASK) |
			     (slot->flags & SI_F_OVF));
	put_entry(m, slot, &e, false);
	if (t->sh)
		t->sh[i / SI_GROUP].fp[i % SI_GROUP] = fp_of(v->digest);
	return 1;
}

int si_remove(const struct si_map *m, const struct si_table *t,
	      const uint8_t d[SI_DIGEST])
{
	struct si_entry *slot = (struct si_entry *)si_live(m, t, d), e;

	if (!slot)
		return 0;
	memset(&e, 0, sizeof(e));
	e.flags = slot->flags & SI_F_OVF;
	put_entry(m, slot, &e, true);
	if (t->sh) {
		size_t i =
			(size_t)(slot - (struct si_entry *)(m->base + t->off));

		t->sh[i / SI_GROUP].fp[i % SI_GROUP] = 0;
	}
	return 1;
}

void si_super_write(const struct si_map *m, const struct si_super *sb)
{
	struct si_super *dst = (struct si_super *)m->base, v = *sb;
	uint64_t cur = dst->state;

	v.check = si_check(&v);
	if (!(cur & 1)) {
		/* readers stop trusting the old layout first */
		__atomic_store_n(&dst->state, cur | 1, __ATOMIC_RELAXED);
		wb(m, dst, false);
		si_wb_fence(m);
	}
	write_line(m, dst, &v, false);
	/* the new layout is in memory before anything of the old changes */
	si_wb_fence(m);
}
