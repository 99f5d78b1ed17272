/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shmindex.c - lookups in maru-server's shared index, with no RPC
 * (docs/shm-index.md)
 *
 * At connect the HANDSHAKE reply may describe an area (a file, or a region
 * of the pool); we map it read-only (O_RDONLY, PROT_READ) and check its
 * superblock against the description.  From then on retrieve, exists and
 * their batch forms look keys up in it (src/common/shmidx.c: a digest,
 * two groups, the superblock around them) and answer without the server
 * when the index is certain: a hit whose region this process has mapped,
 * or a final miss.  Anything else -- no index, an overflowed group, lines
 * being written, a region not mapped here -- asks the server as before.
 *
 * A dropped connection suspends the index (lookups ask the server) until
 * a HEARTBEAT reply names the area the server publishes: the same one
 * resumes it, another is attached by the lease or watch thread with a
 * HANDSHAKE of its own.  Areas are never unmapped before the handler is
 * freed: a lookup may stand on one while another thread replaces it.
 *
 * Local answers are counted (hits, misses, fallbacks) and, with the keys
 * of local hits, reported in the next HEARTBEAT, so that the server's
 * statistics and its eviction policy see them ("touched" in HEARTBEAT,
 * docs/metadata-server.md "Eviction").
 *
 * MARU_SHM_INDEX=0 turns it off (A/B, debugging).  The test variant of the
 * library also reads MARU_SHM_INDEX_FAULT=no-inv: a reader that never
 * invalidates, for the tests of the non-coherence injector.
 *
 * Context: lookups from any thread, lock-free; attach and detach under
 * idx.lock; touched keys under idx.tlock (a leaf).
 */
#include "private.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mds_proto.h"
#include "msgpk.h"

void maru__idx_init(struct maru_handler *h)
{
	struct maru__idx *x = &h->idx;
	const char *e = getenv("MARU_SHM_INDEX");
	const char *f = maru__test_getenv("MARU_SHM_INDEX_FAULT");

	memset(x, 0, sizeof(*x));
	atomic_init(&x->area, NULL);
	pthread_mutex_init(&x->lock, NULL);
	pthread_mutex_init(&x->tlock, NULL);
	x->off = e && (!strcmp(e, "0") || !strcasecmp(e, "off") ||
		       !strcasecmp(e, "false") || !strcasecmp(e, "no"));
	/* the tests' non-coherence injector: a reader that never
	 * invalidates (with a server in --coherence simulate) */
	x->fault = f && !strcmp(f, "no-inv") ? SI_FAULT_NO_INV : 0;
}

static void area_free(struct maru__idx_area *a);

/* the memo: page-aligned (a slot is two lines, not three), zero, touched
 * as keys come */
#define MEMO_BYTES ((size_t)MARU_MEMO_SLOTS * sizeof(struct maru__memo))

static struct maru__memo *memo_new(void)
{
	void *p = mmap(NULL, MEMO_BYTES, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void memo_free(struct maru__memo *m)
{
	if (m)
		munmap(m, MEMO_BYTES);
}

void maru__idx_destroy(struct maru_handler *h)
{
	struct maru__idx *x = &h->idx;
	struct maru__idx_area *a, *n;

	atomic_store(&x->area, NULL);
	for (a = x->all; a; a = n) {
		n = a->next;
		area_free(a);
	}
	x->all = x->cur = NULL;
	free(x->tseen);
	x->tseen = NULL;
	memo_free(atomic_load(&x->memo));
	atomic_store(&x->memo, NULL);
	buf_free(&x->touched);
	atomic_store(&x->ntouched, 0);
}

/* map the file or region @d names, read-only; *@len: the mapping's */
static int map_area(struct maru_handler *h, const struct maru__idx_desc *d,
		    void **mem, size_t *len)
{
	char path[4096];
	struct stat st;
	void *p;
	int fd;

	if (d->pool) {
		*len = (size_t)d->region.length;
		return maru__mapper_map_ro(&h->mapper, &d->region, mem);
	}
	if (d->path_len >= sizeof(path) || d->length > SIZE_MAX)
		return -EINVAL;
	memcpy(path, d->path, d->path_len);
	path[d->path_len] = '\0';
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < d->length) {
		close(fd);
		return -EINVAL;
	}
	p = mmap(NULL, (size_t)d->length, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	*mem = p;
	*len = (size_t)d->length;
	return 0;
}

static void area_free(struct maru__idx_area *a)
{
	si_map_destroy(&a->map);
	munmap(a->mem, a->maplen);
	free(a);
}

/* a new area, mapped and checked against @d (no lock held: this may wait
 * on the resource manager).  Return: 0 with *@out, or -errno. */
static int area_new(struct maru_handler *h, const struct maru__idx_desc *d,
		    struct maru__idx_area **out)
{
	static _Atomic uint64_t serials;
	struct maru__idx_area *a;
	struct si_layout lay;
	struct si_super sb;
	uint32_t want;
	size_t maplen = 0;
	void *mem = NULL;
	int rc, coh;

	rc = map_area(h, d, &mem, &maplen);
	if (rc < 0)
		return rc;
	a = calloc(1, sizeof(*a));
	if (!a) {
		munmap(mem, maplen);
		return -ENOMEM;
	}
	a->mem = mem;
	a->maplen = maplen;
	a->area_id = d->area_id;
	a->serial = atomic_fetch_add(&serials, 1) + 1;
	coh = d->simulate      ? SI_SIMULATE
	      : d->noncoherent ? SI_FLUSH
			       : SI_COHERENT;
	rc = si_map_init(&a->map, mem, (size_t)d->length, coh, false);
	if (rc < 0) {
		free(a);
		munmap(mem, maplen);
		return rc;
	}
	a->map.fault = h->idx.fault;
	/* the area the server described, read the way it writes it */
	want = (coh != SI_COHERENT ? SI_SB_NONCOHERENT : 0) |
	       (coh == SI_SIMULATE ? SI_SB_SIMULATE : 0);
	rc = si_super_read(&a->map, &sb, &lay);
	if ((rc == 0 || rc == -EBUSY) &&
	    (sb.area_id != d->area_id || sb.flags != want))
		rc = -ESTALE;
	if (rc < 0 && rc != -EBUSY) {
		area_free(a);
		return rc;
	}
	*out = a;
	return 0;
}

int maru__idx_attach(struct maru_handler *h, const struct maru__idx_desc *d)
{
	struct maru__idx *x = &h->idx;
	struct maru__idx_area *a = NULL;
	int rc;

	if (x->off || !d->present)
		return 0;
	if (!d->usable) {
		ldbg(h, "shared index: a layout or digest this library does "
			"not read: not used");
		return -ENOTSUP;
	}
	pthread_mutex_lock(&x->lock);
	if (x->cur && x->cur->area_id == d->area_id) {
		/* the same area (a restarted server resumed it) */
		atomic_store_explicit(&x->area, x->cur, memory_order_release);
		atomic_store(&x->stale, false);
		pthread_mutex_unlock(&x->lock);
		return 0;
	}
	pthread_mutex_unlock(&x->lock);
	rc = area_new(h, d, &a);
	pthread_mutex_lock(&x->lock);
	if (rc < 0) {
		/* not again for a while (a file on another host stays so) */
		x->failed_id = d->area_id;
		x->failed_at = maru__now_ns();
		pthread_mutex_unlock(&x->lock);
		ldbg(h,
		     "shared index: cannot use it (%s): lookups ask the "
		     "server",
		     strerror(-rc));
		return rc;
	}
	if (!atomic_load(&x->memo))
		atomic_store(&x->memo, memo_new());
	if (!x->tseen)
		x->tseen = calloc(MARU_TOUCH_SET, sizeof(*x->tseen));
	a->next = x->all;
	x->all = a;
	x->cur = a;
	x->failed_id = 0;
	atomic_store(&x->stale, false);
	atomic_store_explicit(&x->area, a, memory_order_release);
	pthread_mutex_unlock(&x->lock);
	ldbg(h, "shared index: attached (%s, %zu bytes, %s)",
	     d->pool ? "a region of the pool" : "a file", a->map.len,
	     si_coh_name(a->map.coh));
	return 0;
}

void maru__idx_suspend(struct maru_handler *h)
{
	/* a HEARTBEAT already on its way must not resume it (its reply may
	 * predate the drop): they compare this generation */
	atomic_fetch_add(&h->idx.susp, 1);
	atomic_store_explicit(&h->idx.area, NULL, memory_order_release);
}

uint64_t maru__idx_susp_gen(struct maru_handler *h)
{
	return atomic_load(&h->idx.susp);
}

void maru__idx_heard(struct maru_handler *h, bool has, uint64_t area_id,
		     uint64_t gen)
{
	struct maru__idx *x = &h->idx;

	if (x->off)
		return;
	pthread_mutex_lock(&x->lock);
	if (atomic_load(&x->susp) != gen) {
		/* a drop since this HEARTBEAT was sent: the next one says */
	} else if (!has) {
		/* a server that publishes none (any more) */
		atomic_store_explicit(&x->area, NULL, memory_order_release);
	} else if (x->cur && x->cur->area_id == area_id) {
		atomic_store_explicit(&x->area, x->cur, memory_order_release);
	} else {
		atomic_store_explicit(&x->area, NULL, memory_order_release);
		if (area_id != x->failed_id ||
		    maru__now_ns() - x->failed_at > MARU_IDX_RETRY_NS)
			atomic_store(&x->stale, true);
	}
	pthread_mutex_unlock(&x->lock);
}

void maru__idx_refresh(struct maru_handler *h, struct maru__rpc *rpc)
{
	struct maru__rpc_reply rr;
	struct maru__reply rep;
	struct maru__msg m;
	int rc;

	if (h->idx.off || !atomic_exchange(&h->idx.stale, false))
		return;
	maru__msg_init(&m, MDS_HANDSHAKE);
	rc = maru__enc_empty(&m);
	if (rc == 0)
		rc = maru__rpc_call(rpc, &m, &rr);
	maru__msg_release(&m);
	if (rc < 0) {
		atomic_store(&h->idx.stale, true); /* the next round */
		return;
	}
	memset(&rep, 0, sizeof(rep));
	if (maru__decode_reply(rr.payload, rr.len, &rep) == 0 && !rep.error &&
	    rep.idx.present)
		(void)maru__idx_attach(h, &rep.idx);
	maru__rpc_reply_release(&rr);
}

/* the key as maru-server's index holds it: tag and bytes (keyform.h) */
static void key_form(const struct maru_key *k, uint8_t *tag, const void **p,
		     size_t *n, uint8_t ib[KEY_INT_BYTES])
{
	const uint8_t *b;

	*tag = maru__keyform(k, &b, n, ib);
	*p = b;
}

/*
 * a quick hash of the key (its memo slot, its place in the touched set):
 * two lanes of 8 bytes a step, so that a 60-byte key is four dependent
 * multiplications, not eight; the last bytes as one load that overlaps
 * the ones before (keys of 8 bytes or more)
 */
static uint64_t memo_hash(uint8_t tag, const uint8_t *p, size_t n)
{
	const uint64_t k = 0xff51afd7ed558ccdull;
	uint64_t a = 0x9e3779b97f4a7c15ull ^ (n << 8) ^ tag;
	uint64_t b = 0xc2b2ae3d27d4eb4full, w, v;
	size_t left = n;

	for (; left > 16; left -= 16, p += 16) {
		memcpy(&w, p, 8);
		memcpy(&v, p + 8, 8);
		a = (a ^ w) * k;
		b = (b ^ v) * k;
		a ^= a >> 29;
		b ^= b >> 29;
	}
	/* 1..16 bytes left (or none: an empty key) */
	w = v = 0;
	if (left > 8) {
		memcpy(&w, p, 8);
		memcpy(&v, p + left - 8, 8);
	} else if (n >= 8) {
		memcpy(&w, p + left - 8, 8);
	} else if (left) {
		memcpy(&w, p, left);
	}
	a = (a ^ w) * k;
	b = (b ^ v) * k;
	/* murmur3's finalizer: every bit of the lanes reaches the low bits
	 * (the set's), as the steps alone do not for bytes high in a word */
	a ^= (b << 31 | b >> 33);
	a ^= a >> 33;
	a *= k;
	a ^= a >> 33;
	a *= 0xc4ceb9fe1a85ec53ull;
	return a ^ (a >> 33);
}

/* the memo's set of a key: two slots (NULL: no memo, or a key too long
 * for it); *@kh (if asked): its quick hash, never 0 */
static struct maru__memo *memo_set(struct maru__idx *x, uint8_t tag,
				   const void *p, size_t n, uint64_t *kh)
{
	struct maru__memo *memo =
		atomic_load_explicit(&x->memo, memory_order_acquire);
	uint64_t hk = memo_hash(tag, p, n) | 1;

	if (kh)
		*kh = hk;
	if (!memo || n > MARU_MEMO_KEY)
		return NULL;
	return &memo[(hk >> 1) & (MARU_MEMO_SLOTS - 2)];
}

/* slot @e holds the key: its digest into @d, *@hint.  Lock-free: false
 * if it does not, or changed while read. */
static bool memo_read(struct maru__memo *e, uint8_t tag, const void *p,
		      size_t n, uint8_t d[SI_DIGEST], uint32_t *hint)
{
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_acquire);

	if ((s & 1) || !s || e->len != n || e->tag != tag ||
	    memcmp(e->key, p, n))
		return false;
	memcpy(d, e->digest, SI_DIGEST);
	*hint = atomic_load_explicit(&e->hint, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&e->seq, memory_order_relaxed) == s;
}

/*
 * the digest of a key: from its memo set @set (either slot), or SHA-256,
 * then kept in an empty slot of the set, else in one of them by turns
 * (not by the key: two keys that took turns in one slot while the other
 * kept a cold key would never both stay).  Return: the slot that now holds the
 * key (*@hint: where the key was last found, or 0), or NULL (no set, or another
 * thread was writing the slot).
 */
static struct maru__memo *digest_key(struct maru__memo *set, uint8_t tag,
				     const void *p, size_t n,
				     uint8_t d[SI_DIGEST], uint32_t *hint)
{
	static __thread unsigned turn; /* the victim when both are taken */
	struct maru__memo *e;
	uint32_t s;

	*hint = 0;
	if (!set) {
		si_digest(tag, p, n, d);
		return NULL;
	}
	if (memo_read(&set[0], tag, p, n, d, hint))
		return &set[0];
	if (memo_read(&set[1], tag, p, n, d, hint))
		return &set[1];
	*hint = 0;
	si_digest(tag, p, n, d);
	e = !atomic_load_explicit(&set[0].seq, memory_order_relaxed) ? &set[0]
	    : !atomic_load_explicit(&set[1].seq, memory_order_relaxed)
		    ? &set[1]
		    : &set[turn++ & 1];
	/* keep it, unless another thread is writing that slot */
	s = atomic_load_explicit(&e->seq, memory_order_relaxed);
	if ((s & 1) || !atomic_compare_exchange_strong(&e->seq, &s, s + 1))
		return NULL;
	atomic_thread_fence(memory_order_release); /* odd, then the rest */
	e->len = (uint8_t)n;
	e->tag = tag;
	atomic_store_explicit(&e->hint, 0, memory_order_relaxed);
	if (n)
		memcpy(e->key, p, n);
	memcpy(e->digest, d, SI_DIGEST);
	/* (0 is "never written": a wrapped sequence skips it) */
	atomic_store_explicit(&e->seq, s + 2 ? s + 2 : 2, memory_order_release);
	return e;
}

/* remember where the key of memo slot @e was found (a hint) */
static void memo_learn(struct maru__memo *e, uint32_t had, int r,
		       const struct si_hit *hit)
{
	uint32_t now = r == SI_HIT ? hit->slot : 0;

	if (r == SI_ASK)
		return; /* (the index could not say: the hint may be good) */

	if (now != had)
		atomic_store_explicit(&e->hint, now, memory_order_relaxed);
}

static bool key_ok(const struct maru_key *key)
{
	switch (key->type) {
	case MARU_KEY_STR:
	case MARU_KEY_BIN:
		return key->str || !key->len;
	case MARU_KEY_INT:
	case MARU_KEY_UINT:
		return true;
	default:
		return false;
	}
}

/* the layout this thread last used, per area (lookups of one thread) */
static __thread struct {
	uint64_t serial; /* of the area (unique per attach in the process) */
	struct si_layout lay;
} tl;

int maru__idx_lookup(struct maru_handler *h, const struct maru_key *key,
		     bool after_use, struct si_hit *out, uint64_t *kh)
{
	const struct maru__idx_area *a =
		atomic_load_explicit(&h->idx.area, memory_order_acquire);
	struct si_rstats st = {0};
	uint8_t d[SI_DIGEST], tag, ib[8];
	struct maru__memo *e;
	const void *p;
	uint32_t hint;
	size_t n;
	int r;

	if (!a)
		return MARU_IDX_NONE;
	if (!key_ok(key))
		return SI_ASK;
	key_form(key, &tag, &p, &n, ib);
	e = memo_set(&h->idx, tag, p, n, kh);
	e = digest_key(e, tag, p, n, d, &hint);
	if (tl.serial != a->serial) {
		tl.serial = a->serial;
		tl.lay.state = 0;
	}
	r = si_lookup(&a->map, &tl.lay, d, hint, after_use, out, &st);
	if (e)
		memo_learn(e, hint, r, out);
	return r;
}

int maru__idx_lookup_batch(struct maru_handler *h, const struct maru_key *keys,
			   size_t n, int *res, struct si_hit *out, uint64_t *kh)
{
	const struct maru__idx_area *a =
		atomic_load_explicit(&h->idx.area, memory_order_acquire);
	uint8_t(*d)[SI_DIGEST], stack[64][SI_DIGEST], tag, ib[8];
	struct si_rstats st = {0};
	const void *p;
	size_t i, k, len;

	if (!a)
		return MARU_IDX_NONE;
	if (tl.serial != a->serial) {
		tl.serial = a->serial;
		tl.lay.state = 0;
	}
	/* 64 digests at a time (their memo slots fetched together first),
	 * then their lookups */
	d = stack;
	for (i = 0; i < n; i += 64) {
		size_t m = n - i < 64 ? n - i : 64, j = 0;
		struct maru__memo *set[64], *mine[64];
		uint32_t hint[64];
		size_t idx[64];
		int r2[64];
		struct si_hit o2[64];

		for (k = 0; k < m; k++) {
			/* the names a few keys ahead: their first line */
			if (i + k + 8 < n &&
			    (keys[i + k + 8].type == MARU_KEY_STR ||
			     keys[i + k + 8].type == MARU_KEY_BIN))
				__builtin_prefetch(keys[i + k + 8].str);
			set[k] = NULL;
			if (kh)
				kh[i + k] = 0;
			if (!key_ok(&keys[i + k]))
				continue;
			key_form(&keys[i + k], &tag, &p, &len, ib);
			set[k] = memo_set(&h->idx, tag, p, len,
					  kh ? &kh[i + k] : NULL);
			if (set[k]) {
				/* both slots; their second lines for a key
				 * that reaches them */
				__builtin_prefetch(&set[k][0]);
				__builtin_prefetch(&set[k][1]);
				if (len >
				    64 - offsetof(struct maru__memo, key)) {
					__builtin_prefetch((char *)&set[k][0] +
							   64);
					__builtin_prefetch((char *)&set[k][1] +
							   64);
				}
			}
		}
		for (k = 0; k < m; k++) {
			if (!key_ok(&keys[i + k])) {
				res[i + k] = SI_ASK;
				continue;
			}
			key_form(&keys[i + k], &tag, &p, &len, ib);
			mine[j] =
				digest_key(set[k], tag, p, len, d[j], &hint[j]);
			idx[j++] = i + k;
		}
		/* (the keys the index can name: all of them, usually) */
		si_lookup_batch(&a->map, &tl.lay, j,
				(const uint8_t(*)[SI_DIGEST])d, hint,
				j == m ? res + i : r2, j == m ? out + i : o2,
				&st);
		for (k = 0; k < j; k++) {
			if (j != m) {
				res[idx[k]] = r2[k];
				out[idx[k]] = o2[k];
			}
			if (mine[k])
				memo_learn(mine[k], hint[k], res[idx[k]],
					   &out[idx[k]]);
		}
	}
	return 0;
}

void maru__idx_count(struct maru_handler *h, int what, uint64_t n)
{
	if (n)
		atomic_fetch_add_explicit(&h->idx.n[what], n,
					  memory_order_relaxed);
}

void maru__idx_touch(struct maru_handler *h, const struct maru_key *key,
		     uint64_t kh)
{
	struct maru__idx *x = &h->idx;
	struct mp_wr w = {&x->touched, 0};
	_Atomic uint64_t *set = x->tseen;
	uint8_t tag, ib[8];
	const void *p;
	uint64_t hk, v;
	size_t n, len0, i, at;

	/* past the cap the report is full: the rest of the period's uses
	 * are not told (the policy sees the hottest keys anyway) */
	if (atomic_load_explicit(&x->ntouched, memory_order_relaxed) >=
	    MARU_TOUCH_MAX)
		return;
	/* once a period per key is enough for the policy (LRU): a set of
	 * key hashes, lock-free to read */
	if (kh) {
		hk = kh;
	} else {
		key_form(key, &tag, &p, &n, ib);
		hk = memo_hash(tag, p, n) | 1;
	}
	at = (hk >> 1) & (MARU_TOUCH_SET - 1);
	for (i = 0; set && i < 4; i++) {
		v = atomic_load_explicit(&set[(at + i) & (MARU_TOUCH_SET - 1)],
					 memory_order_relaxed);
		if (v == hk)
			return;
		if (!v)
			break;
	}
	pthread_mutex_lock(&x->tlock);
	for (i = 0; set && i < 4; i++) {
		uint64_t zero = 0;
		_Atomic uint64_t *slot = &set[(at + i) & (MARU_TOUCH_SET - 1)];

		v = atomic_load_explicit(slot, memory_order_relaxed);
		if (v == hk) {
			pthread_mutex_unlock(&x->tlock);
			return;
		}
		if (!v && atomic_compare_exchange_strong(slot, &zero, hk))
			break;
	}
	if (atomic_load_explicit(&x->ntouched, memory_order_relaxed) <
	    MARU_TOUCH_MAX) {
		len0 = x->touched.len;
		/* as a request names it (codec.c) */
		if (maru__pack_key(MP_PACKER(&w), key) < 0 || w.err)
			x->touched.len = len0;
		else
			atomic_fetch_add_explicit(&x->ntouched, 1,
						  memory_order_relaxed);
	}
	pthread_mutex_unlock(&x->tlock);
}

void maru__lk_count(struct maru_handler *h, const uint64_t *d)
{
	int i;

	for (i = 0; i < MDS_LK_N; i++)
		if (d[i])
			atomic_fetch_add_explicit(&h->idx.lk[i], d[i],
						  memory_order_relaxed);
}

bool maru__idx_unreported(struct maru_handler *h)
{
	struct maru__idx *x = &h->idx;
	bool any = false;
	int i;

	pthread_mutex_lock(&x->lock);
	for (i = 0; i < 3; i++)
		any |= atomic_load(&x->n[i]) != x->told[i];
	for (i = 0; i < MDS_LK_N; i++)
		any |= atomic_load(&x->lk[i]) != x->lk_told[i];
	pthread_mutex_unlock(&x->lock);
	return any;
}

void maru__idx_take_report(struct maru_handler *h, struct buf *keys,
			   uint32_t *n, uint64_t delta[3], uint64_t *lk)
{
	struct maru__idx *x = &h->idx;
	uint64_t now;
	int i;

	pthread_mutex_lock(&x->tlock);
	*keys = x->touched;
	*n = atomic_load(&x->ntouched);
	memset(&x->touched, 0, sizeof(x->touched));
	atomic_store(&x->ntouched, 0);
	for (i = 0; x->tseen && i < MARU_TOUCH_SET; i++)
		atomic_store_explicit(&x->tseen[i], 0, memory_order_relaxed);
	pthread_mutex_unlock(&x->tlock);
	pthread_mutex_lock(&x->lock);
	for (i = 0; i < 3; i++) {
		now = atomic_load_explicit(&x->n[i], memory_order_relaxed);
		delta[i] = now - x->told[i];
		x->told[i] = now;
	}
	for (i = 0; i < MDS_LK_N; i++) {
		now = atomic_load_explicit(&x->lk[i], memory_order_relaxed);
		lk[i] = now - x->lk_told[i];
		x->lk_told[i] = now;
	}
	/* the keys answered here are the index's own counts (kv.c) */
	lk[MDS_LK_KEYS] += delta[SI_HIT] + delta[SI_MISS];
	lk[MDS_LK_HITS] += delta[SI_HIT];
	pthread_mutex_unlock(&x->lock);
}

MARU_EXPORT int maru_handler_index_stats(struct maru_handler *h,
					 struct maru_index_stats *out)
{
	const struct maru__idx_area *a = atomic_load(&h->idx.area);

	out->attached = a != NULL;
	out->noncoherent = a && a->map.coh != SI_COHERENT;
	out->local_hits = atomic_load(&h->idx.n[SI_HIT]);
	out->local_misses = atomic_load(&h->idx.n[SI_MISS]);
	out->fallbacks = atomic_load(&h->idx.n[SI_ASK]);
	return 0;
}
