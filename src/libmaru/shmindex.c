/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shmindex.c - lookups in maru-server's shared index, with no RPC
 * (issue 16, docs/shm-index.md)
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
 * statistics and its eviction policy see them (issue 13's "touched").
 *
 * MARU_SHM_INDEX=0 turns it off (A/B, debugging).
 *
 * Context: lookups from any thread, lock-free; attach and detach under
 * idx.lock; touched keys under idx.tlock (a leaf).
 */
#include "private.h"

#include <errno.h>
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
	const char *f = getenv("MARU_SHM_INDEX_FAULT");

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

void maru__idx_destroy(struct maru_handler *h)
{
	struct maru__idx *x = &h->idx;
	struct maru__idx_area *a, *n;

	atomic_store(&x->area, NULL);
	for (a = x->all; a; a = n) {
		n = a->next;
		si_map_destroy(&a->map);
		munmap(a->mem, a->len);
		free(a);
	}
	x->all = x->cur = NULL;
	buf_free(&x->touched);
	atomic_store(&x->ntouched, 0);
}

/* map the file or region @d names, read-only */
static int map_area(struct maru_handler *h, const struct maru__idx_desc *d,
		    void **mem)
{
	char path[4096];
	struct stat st;
	void *p;
	int fd;

	if (d->pool)
		return maru__mapper_map_ro(&h->mapper, &d->region, mem);
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
	return 0;
}

int maru__idx_attach(struct maru_handler *h, const struct maru__idx_desc *d)
{
	struct maru__idx *x = &h->idx;
	struct maru__idx_area *a;
	struct si_super sb;
	struct si_layout lay;
	void *mem = NULL;
	int rc, coh;

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
	rc = map_area(h, d, &mem);
	if (rc < 0) {
		pthread_mutex_unlock(&x->lock);
		ldbg(h, "shared index: cannot map it (%s): lookups ask the "
			"server",
		     strerror(-rc));
		return rc;
	}
	rc = -ENOMEM;
	a = calloc(1, sizeof(*a));
	if (!a)
		goto out_unmap;
	a->mem = mem;
	a->len = (size_t)d->length;
	a->area_id = d->area_id;
	coh = d->simulate ? SI_SIMULATE
	      : d->noncoherent ? SI_FLUSH
			       : SI_COHERENT;
	rc = si_map_init(&a->map, mem, a->len, coh, false);
	if (rc < 0)
		goto out_free;
	a->map.fault = x->fault;
	/* the area the server described, or not one to trust */
	rc = si_super_read(&a->map, &sb, &lay);
	if ((rc == 0 || rc == -EBUSY) && sb.area_id != d->area_id)
		rc = -ESTALE;
	if (rc < 0 && rc != -EBUSY) {
		ldbg(h, "shared index: its superblock does not match (%s)",
		     strerror(-rc));
		goto out_map;
	}
	a->next = x->all;
	x->all = a;
	x->cur = a;
	atomic_store(&x->stale, false);
	atomic_store_explicit(&x->area, a, memory_order_release);
	pthread_mutex_unlock(&x->lock);
	ldbg(h, "shared index: attached (%s, %zu bytes, %s)",
	     d->pool ? "a region of the pool" : "a file", a->len,
	     si_coh_name(coh));
	return 0;

out_map:
	si_map_destroy(&a->map);
out_free:
	free(a);
out_unmap:
	munmap(mem, (size_t)d->length);
	pthread_mutex_unlock(&x->lock);
	return rc;
}

void maru__idx_suspend(struct maru_handler *h)
{
	atomic_store_explicit(&h->idx.area, NULL, memory_order_release);
}

void maru__idx_heard(struct maru_handler *h, bool has, uint64_t area_id)
{
	struct maru__idx *x = &h->idx;

	if (x->off)
		return;
	pthread_mutex_lock(&x->lock);
	if (!has) {
		/* a server that publishes none (any more) */
		atomic_store_explicit(&x->area, NULL, memory_order_release);
	} else if (x->cur && x->cur->area_id == area_id) {
		atomic_store_explicit(&x->area, x->cur, memory_order_release);
	} else {
		atomic_store_explicit(&x->area, NULL, memory_order_release);
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
	if (maru__decode_reply(rr.payload, rr.len, &rep) == 0 &&
	    !rep.error && rep.idx.present)
		(void)maru__idx_attach(h, &rep.idx);
	maru__rpc_reply_release(&rr);
}

/* the key as maru-server's index holds it: tag and bytes */
static void key_form(const struct maru_key *k, uint8_t *tag, const void **p,
		     size_t *n, uint8_t ib[8])
{
	uint64_t v;
	int i;

	switch (k->type) {
	case MARU_KEY_STR:
	case MARU_KEY_BIN:
		*tag = k->type == MARU_KEY_STR ? 0 : 1;
		*p = k->str;
		*n = k->len;
		return;
	default:
		v = k->type == MARU_KEY_INT ? (uint64_t)k->i : k->u;
		*tag = k->type == MARU_KEY_INT && k->i < 0 ? 3 : 2;
		for (i = 0; i < 8; i++)
			ib[i] = (uint8_t)(v >> (8 * i));
		*p = ib;
		*n = 8;
	}
}

/* the layout this thread last used, per area (lookups of one thread) */
static __thread struct {
	const struct maru__idx_area *a;
	uint64_t area_id;
	struct si_layout lay;
} tl;

int maru__idx_lookup(struct maru_handler *h, const struct maru_key *key,
		     bool after_use, struct si_hit *out)
{
	const struct maru__idx_area *a =
		atomic_load_explicit(&h->idx.area, memory_order_acquire);
	struct si_rstats st = {0};
	uint8_t d[SI_DIGEST], tag, ib[8];
	const void *p;
	size_t n;

	if (!a)
		return MARU_IDX_NONE;
	if ((key->type != MARU_KEY_STR && key->type != MARU_KEY_BIN &&
		   key->type != MARU_KEY_INT && key->type != MARU_KEY_UINT) ||
	    ((key->type == MARU_KEY_STR || key->type == MARU_KEY_BIN) &&
	     !key->str && key->len))
		return SI_ASK;
	key_form(key, &tag, &p, &n, ib);
	si_digest(tag, p, n, d);
	if (tl.a != a || tl.area_id != a->area_id) {
		tl.a = a;
		tl.area_id = a->area_id;
		tl.lay.state = 0;
	}
	return si_lookup(&a->map, &tl.lay, d, after_use, out, &st);
}

void maru__idx_count(struct maru_handler *h, int what)
{
	atomic_fetch_add_explicit(&h->idx.n[what], 1, memory_order_relaxed);
}

void maru__idx_touch(struct maru_handler *h, const struct maru_key *key)
{
	struct maru__idx *x = &h->idx;
	struct mp_wr w = {&x->touched, 0};
	size_t len0;

	/* past the cap the report is full: the rest of the period's uses
	 * are not told (the policy sees the hottest keys anyway) */
	if (atomic_load_explicit(&x->ntouched, memory_order_relaxed) >=
	    MARU_TOUCH_MAX)
		return;
	pthread_mutex_lock(&x->tlock);
	if (atomic_load_explicit(&x->ntouched, memory_order_relaxed) <
	    MARU_TOUCH_MAX) {
		len0 = x->touched.len;
		switch (key->type) {
		case MARU_KEY_STR:
			mp_put_str(&w, key->str, (uint32_t)key->len);
			break;
		case MARU_KEY_BIN:
			mp_put_bin(&w, key->str, (uint32_t)key->len);
			break;
		case MARU_KEY_INT:
			mp_put_int(&w, key->i);
			break;
		default:
			mp_put_uint(&w, key->u);
		}
		if (w.err)
			x->touched.len = len0;
		else
			atomic_fetch_add_explicit(&x->ntouched, 1,
						  memory_order_relaxed);
	}
	pthread_mutex_unlock(&x->tlock);
}

void maru__idx_take_report(struct maru_handler *h, struct buf *keys,
			   uint32_t *n, uint64_t delta[3])
{
	struct maru__idx *x = &h->idx;
	uint64_t now;
	int i;

	pthread_mutex_lock(&x->tlock);
	*keys = x->touched;
	*n = atomic_load(&x->ntouched);
	memset(&x->touched, 0, sizeof(x->touched));
	atomic_store(&x->ntouched, 0);
	pthread_mutex_unlock(&x->tlock);
	pthread_mutex_lock(&x->lock);
	for (i = 0; i < 3; i++) {
		now = atomic_load_explicit(&x->n[i], memory_order_relaxed);
		delta[i] = now - x->told[i];
		x->told[i] = now;
	}
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
