/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pubidx.c - maru-server's side of the shared index (see pubidx.h)
 *
 * Invariant, at every pub_fence() (puts wait in a queue until then, see
 * pubidx.h): every key of the store's index is either published in the
 * current table (one live entry with its digest, location and
 * registration number) or its two groups there carry OVF.  A rebuild
 * keeps the same invariant for the next table from the moment it starts
 * copying: changes go to both, and the copy walks the store's index with
 * ix_scan(), which reports every key present from its start to its end.
 *
 * Rebuilds: PH_FORMAT writes the next table's lines EMPTY a slice at a
 * time; PH_COPY writes every change to both tables and copies keys a
 * slice at a time; then the superblock names the next table (a new
 * state: every reader's lookup in flight starts over) and the old table's
 * memory is free at once (given back to tmpfs in PUB_FILE).
 */
#include "pubidx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum { PH_IDLE, PH_FORMAT, PH_COPY };

#define FORMAT_SLICE 4096 /* groups formatted between clock reads */
#define TABLE_ALIGN 4096

static uint64_t pow2_at_least(uint64_t v)
{
	uint64_t p = 1;

	while (p < v && p < (1ull << 62))
		p <<= 1;
	return p;
}

/* the largest table two of which fit the area (a power of two groups) */
static uint64_t max_groups(const struct pub *p)
{
	uint64_t room = (p->len - SI_HDR) / 2 / SI_GROUP_BYTES, g = 1;

	if (!room)
		return 0;
	while (g * 2 <= room)
		g *= 2;
	return g;
}

/* groups for @keys at a load of at most a half (@keys fill half the
 * slots of the table asked for a power of two), within the area */
static uint64_t groups_for(const struct pub *p, uint64_t keys)
{
	uint64_t want = pow2_at_least((keys + 1) / 2), max = max_groups(p);
	uint64_t least = p->cfg.keys ? 16 : PUB_MIN_GROUPS; /* asked: obeyed */

	if (want < least)
		want = least;
	return want > max ? max : want;
}

/* memory for a table (PUB_FILE: tmpfs pages now, or ENOSPC now) */
static int reserve(struct pub *p, uint64_t off, uint64_t len)
{
	if (p->cfg.mode != PUB_FILE)
		return 0;
	if (fallocate(p->fd, 0, (off_t)off, (off_t)len) < 0)
		return -errno;
	/* the pages mapped now, in one call, not a fault each */
	(void)madvise(p->mem + off, (size_t)len, MADV_POPULATE_WRITE);
	return 0;
}

/* give a table's memory back (PUB_FILE); readers then read zeros there,
 * which no check accepts */
static void release(struct pub *p, uint64_t off, uint64_t len)
{
	if (p->cfg.mode != PUB_FILE || !len)
		return;
	(void)fallocate(p->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			(off_t)off, (off_t)len);
}

static uint32_t sb_flags(int coh)
{
	return (coh != SI_COHERENT ? SI_SB_NONCOHERENT : 0) |
	       (coh == SI_SIMULATE ? SI_SB_SIMULATE : 0);
}

static void super_init(struct pub *p, const struct si_super *old, bool ok)
{
	memset(&p->sb, 0, sizeof(p->sb));
	p->sb.magic = SI_MAGIC;
	p->sb.layout = SI_LAYOUT;
	p->sb.flags = sb_flags(p->cfg.coh);
	if (ok) {
		/* the same area: readers that map it stay attached */
		p->sb.area_id = old->area_id;
		p->sb.boot = old->boot + 1;
		p->sb.state = old->state | 1;
	} else {
		if (getrandom(&p->sb.area_id, sizeof(p->sb.area_id), 0) !=
		    sizeof(p->sb.area_id))
			p->sb.area_id = now_ns();
		p->sb.area_id |= 1; /* never 0: "no index" */
		p->sb.boot = 1;
		p->sb.state = 1;
	}
	p->sb.table_off = SI_HDR;
	p->sb.n_groups = 1;
}

static int open_file(struct pub *p, char *err, size_t errlen)
{
	struct stat st;
	int fd;

	fd = open(p->cfg.path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", p->cfg.path, strerror(errno));
		return -errno;
	}
	/* one writer: another maru-server on the same file would overwrite
	 * our tables and we theirs */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		snprintf(err, errlen,
			 "%s: in use by another maru-server (give each its own "
			 "--shm-index-path)",
			 p->cfg.path);
		close(fd);
		return -EBUSY;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid()) {
		/* a file another user made could be changed under clients */
		snprintf(err, errlen, "%s: not a regular file of this user",
			 p->cfg.path);
		close(fd);
		return -EPERM;
	}
	/* readable by who may read the pool, never writable, whatever the
	 * umask: the group first, then the bits (a file another group could
	 * read never exists) */
	if (p->cfg.file_gid > 0 && st.st_gid != (gid_t)p->cfg.file_gid &&
	    fchown(fd, (uid_t)-1, (gid_t)p->cfg.file_gid) < 0) {
		log_warn("shared index: %s: cannot give it to group %ld, the "
			 "pool's (%s): only this user reads it, the others "
			 "ask the server",
			 p->cfg.path, p->cfg.file_gid, strerror(errno));
		p->cfg.file_mode = 0600;
	}
	if (fchmod(fd, p->cfg.file_mode ? p->cfg.file_mode : 0600) < 0) {
		snprintf(err, errlen, "%s: %s", p->cfg.path, strerror(errno));
		close(fd);
		return -EIO;
	}
	/* never shrink: a reader may map the whole of an earlier, larger
	 * area (a shrunk file would fault it); a grown one is a new area
	 * (its readers map it again) */
	p->len = (size_t)p->cfg.size;
	if ((uint64_t)st.st_size > p->cfg.size)
		p->len = (size_t)st.st_size;
	else if ((uint64_t)st.st_size < p->cfg.size && (p->grew = true) &&
		 ftruncate(fd, (off_t)p->len) < 0) {
		snprintf(err, errlen, "%s: %s", p->cfg.path, strerror(errno));
		close(fd);
		return -EIO;
	}
	p->mem = mmap(NULL, p->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p->mem == MAP_FAILED) {
		p->mem = NULL;
		snprintf(err, errlen, "%s: mmap: %s", p->cfg.path,
			 strerror(errno));
		close(fd);
		return -ENOMEM;
	}
	p->fd = fd;
	return 0;
}

int pub_open(struct pub **out, const struct pub_config *cfg, char *err,
	     size_t errlen)
{
	struct si_super old;
	struct pub *p;
	bool ok;
	int rc;

	*out = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cfg = *cfg;
	p->fd = -1;
	if (cfg->mode == PUB_FILE) {
		p->path = strdup(cfg->path);
		if (!p->path) {
			free(p);
			return -ENOMEM;
		}
		p->cfg.path = p->path;
		rc = open_file(p, err, errlen);
	} else {
		p->mem = cfg->pool_mem;
		p->len = (size_t)cfg->size;
		rc = p->mem ? 0 : -EINVAL;
	}
	if (rc == 0 && p->len < SI_HDR + 2 * SI_GROUP_BYTES) {
		snprintf(err, errlen, "the area (%zu bytes) is too small",
			 p->len);
		rc = -EINVAL;
	}
	if (rc == 0) {
		rc = si_map_init(&p->map, p->mem, p->len, cfg->coh, true);
		if (rc < 0)
			snprintf(err, errlen, "coherence %s: %s",
				 si_coh_name(cfg->coh), strerror(-rc));
	}
	if (rc < 0) {
		pub_close(p);
		return rc;
	}
	p->map.fault = cfg->fault;
	/* an area we wrote before keeps its id, so its readers stay --
	 * unless they would map or read it differently now (its length, its
	 * coherence): then it is a new area, which they attach afresh */
	memcpy(&old, p->map.base, sizeof(old));
	ok = old.magic == SI_MAGIC && old.layout == SI_LAYOUT &&
	     old.check == si_check(&old) && old.area_id && !p->grew &&
	     old.flags == sb_flags(cfg->coh);
	super_init(p, &old, ok);
	si_super_write(&p->map, &p->sb);
	*out = p;
	return 0;
}

/* ---- keys into tables ---- */

/* was digest @d found on two keys?  (then never published, any table) */
static bool collided(const struct pub *p, const uint8_t *d)
{
	size_t i;

	for (i = 0; i < p->ncoll; i++)
		if (!memcmp(p->coll[i], d, SI_DIGEST))
			return true;
	return false;
}

/*
 * Publish key @k into @t (@k->rid: its region, 0 for none).  Return: 1 it is
 * there now, 0 it was already, -1 no room (its groups are OVF), -2 a
 * collision took the other key out, -3 a key the index does not carry
 * (no tracked region, longer than 4 GiB, a collided digest: OVF too).
 */
static int put_in(struct pub *p, const struct si_table *t,
		  const struct pub_q *k)
{
	const uint8_t *d = k->d;
	const struct si_entry *x;
	struct si_entry v;
	void *nc;
	int rc;

	if (!k->rid || k->len > UINT32_MAX || (p->ncoll && collided(p, d))) {
		si_mark_ovf(&p->map, t, d);
		return -3;
	}
	memset(&v, 0, sizeof(v));
	memcpy(v.digest, d, SI_DIGEST);
	v.region_id = k->rid;
	v.kv_offset = k->off;
	v.kv_length = (uint32_t)k->len;
	v.gen = k->gen;
	v.flags = k->flags;
	rc = si_insert(&p->map, t, &v);
	if (rc == 1)
		return 1;
	if (rc == 0)
		return -1;
	x = si_live(&p->map, t, d);
	if (x && x->gen == k->gen && x->region_id == k->rid &&
	    x->kv_offset == k->off)
		return 0; /* the copy meets a key a change already put */
	/*
	 * Two keys with one digest (2^-128 a pair, or 2^64 work for who
	 * makes them): neither is published, both ask the server, and the
	 * digest stays unpublished for good (a delete and a new register of
	 * one of them must not bring it back while the other is there)
	 */
	si_remove(&p->map, t, d);
	si_mark_ovf(&p->map, t, d);
	p->st.collisions++;
	if (!collided(p, d) &&
	    (nc = realloc(p->coll, (p->ncoll + 1) * sizeof(*p->coll)))) {
		p->coll = nc;
		memcpy(p->coll[p->ncoll++], d, SI_DIGEST);
	}
	return -2;
}

/* what a table holds of entry @e of region @rid */
static void q_of(struct pub_q *k, const struct ix_entry *e, uint64_t rid)
{
	si_digest(ix_entry_tag(e), e->key, ix_entry_klen(e), k->d);
	k->rid = rid;
	k->off = e->off;
	k->len = e->len;
	k->gen = e->gen;
	k->flags = 0;
}

/* @ovf counts only keys that found no room: a larger table helps them;
 * keys the index never carries would otherwise rebuild it forever */
static void count_put(uint64_t *keys, uint64_t *ovf, int rc)
{
	if (rc == 1)
		(*keys)++;
	else if (rc == -1)
		(*ovf)++;
	else if (rc == -2 && *keys)
		(*keys)--; /* the other key left the table */
}

void pub_put(struct pub *p, const struct ix_entry *e, uint64_t region_id)
{
	if (!p || !p->cur.n_groups)
		return;
	if (p->nq == PUB_QUEUE)
		pub_flush(p);
	q_of(&p->q[p->nq++], e, region_id);
}

void pub_put_ask(struct pub *p, const struct ix_entry *e, uint64_t region_id)
{
	if (!p || !p->cur.n_groups)
		return;
	if (p->nq == PUB_QUEUE)
		pub_flush(p);
	q_of(&p->q[p->nq], e, region_id);
	p->q[p->nq++].flags = SI_F_ASK;
}

/*
 * The queue in passes, so that the misses of one key overlap those of the
 * others: every key's two shadow groups asked for, with the first line of
 * its first table group (the page both its groups are in: its translation
 * is then at hand, a TLB miss less later); then (they have arrived) the
 * line each key would go to; then
 * those lines asked for, in a loop of their own (between other work a
 * core keeps only a few such fetches in flight); then the lines written,
 * in order.  Only the last pass decides: an earlier key of the queue may
 * take the slot a later one aimed at, which then costs a miss, nothing
 * more.
 */
void pub_flush(struct pub *p)
{
	const struct si_table *t = &p->cur;
	const uint8_t *tab = p->map.base + t->off;
	const void *aim[PUB_QUEUE];
	unsigned i, n = p->nq;
	uint64_t g1, g2;

	p->nq = 0;
	if (!n || !t->n_groups)
		return;
	if (t->sh) {
		for (i = 0; i < n; i++) {
			si_groups(p->q[i].d, t->n_groups, &g1, &g2);
			__builtin_prefetch(&t->sh[g1]);
			__builtin_prefetch(&t->sh[g2]);
			__builtin_prefetch(tab + g1 * SI_GROUP_BYTES);
		}
		for (i = 0; i < n; i++)
			aim[i] = si_aim(&p->map, t, p->q[i].d);
		for (i = 0; i < n; i++)
			if (aim[i])
				__asm__ volatile("prefetchw %0"
						 :
						 : "m"(*(const char *)aim[i]));
	}
	for (i = 0; i < n; i++) {
		count_put(&p->cur_keys, &p->ovf_since, put_in(p, t, &p->q[i]));
		if (p->phase == PH_COPY)
			count_put(&p->next_keys, &p->next_ovf,
				  put_in(p, &p->next, &p->q[i]));
	}
	p->need_fence = true;
}

void pub_del(struct pub *p, const struct ix_entry *e)
{
	uint8_t d[SI_DIGEST];

	if (!p || !p->cur.n_groups)
		return;
	pub_flush(p); /* the puts before it first: the order of changes */
	si_digest(ix_entry_tag(e), e->key, ix_entry_klen(e), d);
	if (si_remove(&p->map, &p->cur, d) && p->cur_keys)
		p->cur_keys--;
	if (p->phase == PH_COPY && si_remove(&p->map, &p->next, d) &&
	    p->next_keys)
		p->next_keys--;
	p->need_fence = true;
}

/* ---- building tables ---- */

struct scan_arg {
	struct pub *p;
	const struct si_table *t;
	uint64_t *keys, *ovf;
};

static void scan_put(struct ix_entry *e, void *arg)
{
	struct scan_arg *a = arg;
	struct pub_q k;

	q_of(&k, e, a->p->region_id(a->p->arg, e));
	count_put(a->keys, a->ovf, put_in(a->p, a->t, &k));
}

/* name @t in the superblock (a new state): every reader follows */
static void switch_to(struct pub *p, const struct si_table *t)
{
	si_wb_fence(&p->map); /* the table is in memory before its name */
	p->sb.state = (p->sb.state | 1) + 1;
	p->sb.table_off = t->off;
	p->sb.n_groups = t->n_groups;
	si_super_write(&p->map, &p->sb);
}

int pub_build(struct pub *p, struct ix *kv,
	      uint64_t (*region_id)(void *arg, const struct ix_entry *e),
	      void *arg)
{
	struct scan_arg a;
	uint64_t t0 = now_ns(), cursor = 0, ovf = 0, n;

	p->kv = kv;
	p->region_id = region_id;
	p->arg = arg;
	n = groups_for(p, kv->count > p->cfg.keys ? kv->count : p->cfg.keys);
	if (!n)
		return -ENOSPC;
	/* the superblock says "being changed": the whole area is ours */
	p->cur.off = SI_HDR;
	p->cur.n_groups = n;
	while (reserve(p, p->cur.off, si_table_bytes(n)) < 0) {
		if (n <= PUB_MIN_GROUPS) {
			p->cur.n_groups = 0;
			return -ENOSPC;
		}
		n /= 2; /* tmpfs is short: a smaller table, more OVF */
		p->cur.n_groups = n;
	}
	if (si_shadow_new(&p->cur) < 0) {
		p->cur.n_groups = 0;
		return -ENOMEM;
	}
	release(p, SI_HDR + si_table_bytes(n),
		p->len - SI_HDR - si_table_bytes(n));
	si_format(&p->map, &p->cur);
	p->cur_keys = 0;
	a = (struct scan_arg){p, &p->cur, &p->cur_keys, &ovf};
	do {
		cursor = ix_scan(kv, cursor, scan_put, &a);
	} while (cursor);
	p->ovf_since = ovf;
	switch_to(p, &p->cur);
	p->st.build_ms = (now_ns() - t0) / 1000000;
	log_info("shared index: %llu key(s) published in %llu ms (%llu "
		 "group(s), %s)",
		 (unsigned long long)p->cur_keys,
		 (unsigned long long)p->st.build_ms, (unsigned long long)n,
		 p->cfg.mode == PUB_FILE ? p->path : "a region of the pool");
	return 0;
}

/* where a table of @bytes fits beside the current one; 0: nowhere */
static uint64_t place(const struct pub *p, uint64_t bytes)
{
	uint64_t cur_end = p->cur.off + si_table_bytes(p->cur.n_groups);
	uint64_t after = round_up_u64(cur_end, TABLE_ALIGN);

	if (SI_HDR + bytes <= p->cur.off)
		return SI_HDR;
	if (after + bytes <= p->len)
		return after;
	return 0;
}

/* should the current table be replaced, and by how many groups? */
static uint64_t rebuild_groups(struct pub *p)
{
	uint64_t slots = p->cur.n_groups * SI_GROUP, keys = p->kv->count;
	uint64_t n = p->cur.n_groups;

	if (keys * 2 > slots) {
		/* four times the size: a key is copied a third of a time
		 * on average while the index grows, not once */
		n = groups_for(p, keys);
		if (n < p->cur.n_groups * 4)
			n = p->cur.n_groups * 4 < max_groups(p)
				    ? p->cur.n_groups * 4
				    : max_groups(p);
	} else if (p->ovf_since * 32 > p->cur.n_groups + 32 &&
		   now_ns() - p->rebuilt_at > PUB_REBUILD_GAP_NS)
		/* full groups: their marks go with a new table (at most once
		 * in PUB_REBUILD_GAP_NS when it stays the same size) */
		n = keys * 8 > slots * 3 ? groups_for(p, keys) : n;
	else
		return 0;
	if (n == p->cur.n_groups && keys * 2 > slots) {
		/* as large as the area allows: the rest asks the server */
		if (!p->said_full) {
			log_warn("shared index: full (%llu keys for %llu "
				 "slots): new keys beyond it are answered "
				 "by the server only; raise --shm-index-size",
				 (unsigned long long)keys,
				 (unsigned long long)slots);
			p->said_full = true;
			p->st.full++;
		}
		return 0;
	}
	return n;
}

static bool start_rebuild(struct pub *p)
{
	uint64_t n = rebuild_groups(p), off;

	if (!n)
		return false;
	off = place(p, si_table_bytes(n));
	p->next.n_groups = n;
	if (!off || reserve(p, off, si_table_bytes(n)) < 0 ||
	    si_shadow_new(&p->next) < 0) {
		si_shadow_free(&p->next);
		p->next.n_groups = 0;
		if (!p->said_full) {
			log_warn("shared index: no room for a table of %llu "
				 "groups in the area: keys beyond the current "
				 "one are answered by the server only",
				 (unsigned long long)n);
			p->said_full = true;
			p->st.full++;
		}
		return false;
	}
	p->next.off = off;
	p->next.n_groups = n;
	p->fmt_done = 0;
	p->phase = PH_FORMAT;
	return true;
}

bool pub_tick(struct pub *p, uint64_t ns)
{
	uint64_t end = now_ns() + ns, old_off, old_len, k;
	struct si_table part;
	struct scan_arg a;

	if (!p || !p->cur.n_groups)
		return false;
	pub_flush(p); /* a table's changes, in their order, before it moves */
	if (p->phase == PH_IDLE && !start_rebuild(p))
		return false;
	while (p->phase == PH_FORMAT && now_ns() < end) {
		k = p->next.n_groups - p->fmt_done;
		if (k > FORMAT_SLICE)
			k = FORMAT_SLICE;
		part.off = p->next.off + si_table_bytes(p->fmt_done);
		part.n_groups = k;
		part.sh = p->next.sh + p->fmt_done;
		si_format(&p->map, &part);
		p->fmt_done += k;
		if (p->fmt_done == p->next.n_groups) {
			/* from now on every change goes to both tables */
			p->phase = PH_COPY;
			p->scan_cursor = 0;
			p->scan_started = false;
			p->next_keys = p->next_ovf = 0;
			p->need_fence = true;
		}
	}
	a = (struct scan_arg){p, &p->next, &p->next_keys, &p->next_ovf};
	while (p->phase == PH_COPY && now_ns() < end) {
		/* 64 buckets between looks at the clock (most are empty) */
		for (k = 0; k < 64; k++) {
			p->scan_cursor =
				ix_scan(p->kv, p->scan_cursor, scan_put, &a);
			if (!p->scan_cursor)
				break;
		}
		p->scan_started = true;
		if (p->scan_cursor)
			continue;
		/* every key is there: switch */
		old_off = p->cur.off;
		old_len = si_table_bytes(p->cur.n_groups);
		switch_to(p, &p->next);
		si_shadow_free(&p->cur);
		p->cur = p->next;
		p->cur_keys = p->next_keys;
		p->ovf_since = p->next_ovf;
		memset(&p->next, 0, sizeof(p->next));
		p->phase = PH_IDLE;
		p->st.rebuilds++;
		p->rebuilt_at = now_ns();
		p->said_full = false;
		release(p, old_off, old_len);
		log_info("shared index: rebuilt as %llu groups (%llu keys)",
			 (unsigned long long)p->cur.n_groups,
			 (unsigned long long)p->cur_keys);
	}
	return p->phase != PH_IDLE;
}

void pub_close(struct pub *p)
{
	if (!p)
		return;
	if (p->map.base && p->sb.magic == SI_MAGIC) {
		/* a clean stop: readers ask the server (and find it gone);
		 * the tables' memory goes back (a start builds anew) */
		p->sb.state |= 1;
		si_super_write(&p->map, &p->sb);
		release(p, SI_HDR, p->len - SI_HDR);
	}
	si_map_destroy(&p->map);
	if (p->cfg.mode == PUB_FILE && p->mem)
		munmap(p->mem, p->len);
	/* nothing left behind: the file is ours while we hold its lock
	 * (readers keep what they mapped and ask the server); a crash
	 * leaves it, and the next start on it takes it over */
	if (p->cfg.mode == PUB_FILE && p->fd >= 0 && unlink(p->cfg.path) < 0 &&
	    errno != ENOENT)
		log_warn("shared index: cannot remove %s: %s", p->cfg.path,
			 strerror(errno));
	if (p->fd >= 0)
		close(p->fd);
	si_shadow_free(&p->cur);
	si_shadow_free(&p->next);
	free(p->coll);
	free(p->path);
	free(p);
}

/* ---- what clients and operators see ---- */

void pub_encode_descriptor(const struct pub *p, struct mp_wr *w)
{
	bool pool = p->cfg.mode == PUB_POOL;

	mp_put_map(w, 8);
	mp_put_key(w, "layout");
	mp_put_uint(w, SI_LAYOUT);
	mp_put_key(w, "digest");
	mp_put_str(w, "sha256-128-mk1", 14);
	mp_put_key(w, "area_id");
	mp_put_uint(w, p->sb.area_id);
	mp_put_key(w, "noncoherent");
	mp_put_bool(w, p->cfg.coh != SI_COHERENT);
	mp_put_key(w, "length");
	mp_put_uint(w, p->len);
	mp_put_key(w, "kind");
	mp_put_str(w, pool ? "pool" : "file", 4);
	if (pool) {
		/* mapped as any region (GET_ACCESS), read-only */
		mp_put_key(w, "region");
		mp_put_map(w, 4);
		mp_put_key(w, "region_id");
		mp_put_uint(w, p->cfg.region_id);
		mp_put_key(w, "offset");
		mp_put_uint(w, p->cfg.region_off);
		mp_put_key(w, "length");
		mp_put_uint(w, p->cfg.region_len);
		mp_put_key(w, "auth_token");
		mp_put_uint(w, p->cfg.region_token);
	} else {
		mp_put_key(w, "path");
		mp_put_str(w, p->path, (uint32_t)strlen(p->path));
	}
	mp_put_key(w, "simulate");
	mp_put_bool(w, p->cfg.coh == SI_SIMULATE);
}

void pub_encode_stats(struct pub *p, struct mp_wr *w, const uint64_t clients[3])
{
	uint64_t keys, slots;

	pub_flush(p); /* counts of the keys registered so far */
	keys = p->kv ? p->kv->count : 0;
	slots = p->cur.n_groups * SI_GROUP;

	mp_put_map(w, 14);
	mp_put_key(w, "enabled");
	mp_put_bool(w, p->cur.n_groups != 0);
	mp_put_key(w, "kind");
	mp_put_str(w, p->cfg.mode == PUB_POOL ? "pool" : "file", 4);
	mp_put_key(w, "coherence");
	mp_put_str(w, si_coh_name(p->cfg.coh),
		   (uint32_t)strlen(si_coh_name(p->cfg.coh)));
	mp_put_key(w, "area_bytes");
	mp_put_uint(w, p->len);
	mp_put_key(w, "table_bytes");
	mp_put_uint(w, si_table_bytes(p->cur.n_groups));
	mp_put_key(w, "slots");
	mp_put_uint(w, slots);
	mp_put_key(w, "published");
	mp_put_uint(w, p->cur_keys);
	mp_put_key(w, "rpc_only");
	mp_put_uint(w, keys > p->cur_keys ? keys - p->cur_keys : 0);
	mp_put_key(w, "rebuilds");
	mp_put_uint(w, p->st.rebuilds);
	mp_put_key(w, "rebuilding");
	mp_put_bool(w, p->phase != PH_IDLE);
	mp_put_key(w, "build_ms");
	mp_put_uint(w, p->st.build_ms);
	mp_put_key(w, "collisions");
	mp_put_uint(w, p->st.collisions);
	mp_put_key(w, "epoch");
	mp_put_uint(w, p->sb.state / 2);
	/* what the clients reported answering from it (HEARTBEAT) */
	mp_put_key(w, "clients");
	mp_put_map(w, 3);
	mp_put_key(w, "local_hits");
	mp_put_uint(w, clients[0]);
	mp_put_key(w, "local_misses");
	mp_put_uint(w, clients[1]);
	mp_put_key(w, "fallbacks");
	mp_put_uint(w, clients[2]);
}
