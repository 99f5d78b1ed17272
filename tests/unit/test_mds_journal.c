/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_mds_journal.c - maru-server's journal (journal.h, store.c
 * "Journal"): framing, replay equal to the original state, snapshots,
 * torn tails and flipped bits
 *
 * A store with a fake resource manager runs a mixed load (regions with
 * and without leases, registers, deletes, pins by instances, a lease that
 * ends, a region returned and freed) with its journal in a temporary
 * directory; a second store recovers from the directory, and both are
 * dumped into a canonical text (every key with its location, generation
 * and pins; every region with its owner, lease, state and counts; every
 * lease, queued FREE and instance pin) that must be equal, and both
 * pass mds_check().
 *
 * MARU_WRITE_CORPUS=DIR also writes the segments it made there (the
 * seeds of tests/fuzz/corpus/fuzz_mds_journal/).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <msgpack.h>
#include <zlib.h>

#include "journal.h"
#include "log.h"
#include "store.h"
#include "test_mds_util.h"

static char DIR_[256];
static struct fake_rm F;

static struct mds_config config(void)
{
	struct mds_config c = fuzz_mds_config();

	c.lease_ttl_ns = 30000000000ull;
	c.peer_grace_ns = 60000000000ull;
	return c;
}

static void rm_rf(const char *dir)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
	(void)state;
	snprintf(DIR_, sizeof(DIR_), "/tmp/maru-jr-test-%d", (int)getpid());
	rm_rf(DIR_);
	memset(&F, 0, sizeof(F));
	F.total = 1ull << 40;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rm_rf(DIR_);
	return 0;
}

/* a store journaling into DIR_ (recovering what is there) */
static void open_store(struct mds *s, struct jr *j, struct jr_recovery *rec)
{
	struct mds_config c = config();
	char err[256];

	assert_int_equal(jr_open(j, DIR_, false, false, err, sizeof(err)), 0);
	assert_int_equal(mds_init(s, &c, &fake_ops, &F, 7), 0);
	s->replaying = true;
	assert_int_equal(jr_recover(j, false, mds_apply, mds_ahead, s, rec), 0);
	s->replaying = false;
	if (rec->found)
		memcpy(s->server_id, j->server_id, sizeof(s->server_id));
	else
		snprintf(s->server_id, sizeof(s->server_id),
			 "0123456789abcdef");
	assert_int_equal(jr_start(j, s->server_id), 0);
	s->jr = j;
	if (rec->found)
		mds_recovered(s, 1000);
	else
		s->vnow = 1000;
}

static void close_store(struct mds *s, struct jr *j)
{
	mds_journal_commit(s);
	mds_destroy(s);
	jr_close(j);
}

/* ---- a canonical dump of the state ---- */

struct dump {
	char **v;
	size_t n, cap;
	struct mds *s;
};

static void add(struct dump *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void add(struct dump *d, const char *fmt, ...)
{
	va_list ap;
	char *p;

	va_start(ap, fmt);
	assert_true(vasprintf(&p, fmt, ap) >= 0);
	va_end(ap);
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 64;
		d->v = realloc(d->v, d->cap * sizeof(*d->v));
		assert_non_null(d->v);
	}
	d->v[d->n++] = p;
}

static void dump_key(struct ix_entry *e, void *arg)
{
	struct dump *d = arg;

	add(d, "K %u %.*s r%lld o%llu l%llu g%llu p%u", ix_entry_tag(e),
	    (int)ix_entry_klen(e), e->key,
	    e->slot == IX_NO_SLOT
		    ? -1ll
		    : (long long)d->s->regions[e->slot].h.region_id,
	    (unsigned long long)e->off, (unsigned long long)e->len,
	    (unsigned long long)e->gen, e->pins);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* the state as sorted lines joined by '\n' (caller frees) */
static char *dump(struct mds *s)
{
	struct dump d = {NULL, 0, 0, s};
	uint64_t cur = 0;
	uint32_t i, j;
	size_t len = 1, k;
	char *out;

	assert_int_equal(mds_check(s), 0);
	do {
		cur = ix_scan(&s->kv, cur, dump_key, &d);
	} while (cur);
	for (i = s->reg_head; i != IX_NO_SLOT; i = s->regions[i].next) {
		const struct mds_region *r = &s->regions[i];

		add(&d, "R %llu %llu %llu %llx %s %s s%u w%u refs%llu used%llu",
		    (unsigned long long)r->h.region_id,
		    (unsigned long long)r->h.offset,
		    (unsigned long long)r->h.length,
		    (unsigned long long)r->h.auth_token, s->insts[r->owner].id,
		    r->lease == IX_NO_SLOT ? "-" : s->leases[r->lease].id,
		    r->state, r->gone_why, (unsigned long long)r->refs,
		    (unsigned long long)r->used);
	}
	for (i = 0; i < s->nlease_slots; i++)
		if (s->leases[i].id)
			add(&d, "L %s %s n%u", s->leases[i].id,
			    s->insts[s->leases[i].owner].id,
			    s->leases[i].nregions);
	for (i = 0; i < s->npending; i++)
		add(&d, "P %llu", (unsigned long long)s->pending[i].region_id);
	for (i = 0; i < s->ninst_slots; i++) {
		const struct mds_pins *hp = &s->insts[i].pins;

		/* an owner with a lease by its lease (one that ended has
		 * only what a restart gives the id's lease-less owner) */
		const char *who =
			s->insts[i].nleases ? s->insts[i].lease_id : "-";

		if (!s->insts[i].id)
			continue;
		add(&d, "I %s/%s regions%u leases%u", s->insts[i].id,
		    who ? who : "-", s->insts[i].nregions, s->insts[i].nleases);
		for (j = 0; j < hp->n; j++) {
			struct ix_entry *e;
			uint64_t entry;

			memcpy(&entry, hp->rec[j]->key, sizeof(entry));
			e = (struct ix_entry *)(uintptr_t)entry;
			add(&d, "N %s/%s %.*s %llu", s->insts[i].id,
			    who ? who : "-", (int)ix_entry_klen(e), e->key,
			    (unsigned long long)hp->rec[j]->off);
		}
	}
	add(&d, "G kv%llu bytes%llu pinned%llu",
	    (unsigned long long)s->kv.count, (unsigned long long)s->kv_bytes,
	    (unsigned long long)s->pinned_bytes);
	qsort(d.v, d.n, sizeof(*d.v), cmp_str);
	for (k = 0; k < d.n; k++)
		len += strlen(d.v[k]) + 1;
	out = malloc(len);
	assert_non_null(out);
	out[0] = '\0';
	for (k = 0; k < d.n; k++) {
		strcat(out, d.v[k]);
		strcat(out, "\n");
		free(d.v[k]);
	}
	free(d.v);
	return out;
}

/* ---- a load ---- */

static struct mds_str S(const char *p) {
	return (struct mds_str){p, (uint32_t)strlen(p)};
}

static struct mds_key
key(const char *k)
{
	struct mds_key x = {
		(const uint8_t *)k, (uint32_t)strlen(k), KEY_STR, {0}};

	return x;
}

static void reg(struct mds *s, const char *k, uint64_t region, uint64_t off,
		uint64_t len, struct mds_peer *p)
{
	struct mds_reg r = {key(k), region, off, len};

	assert_true(mds_register(s, &r, p) >= 0);
}

/* an instance with a lease on connection @fd: its peer */
static struct mds_peer inst_on(struct mds *s, int fd, const char *inst,
			       const char *lease)
{
	struct mds_peer p = {fd, (uint64_t)fd * 7919, NULL, NULL};

	mds_conn_open(s, fd);
	assert_int_equal(mds_heartbeat(s, S(inst), S(lease), false, false, &p),
			 0);
	return p;
}

static uint64_t alloc(struct mds *s, const char *inst, const char *lease,
		      struct mds_peer *p)
{
	struct rm_handle h;

	assert_int_equal(mds_alloc(s, S(inst), S(lease), 4 << 20, p, &h, NULL),
			 0);
	return h.region_id;
}

/* the mixed load, @round selects the keys; Return: a region of "a" */
static void load(struct mds *s, int round)
{
	char k[64], la[16], lb[16], ia[16], ib[16];
	struct mds_peer a, b;
	uint64_t ra, rb, rc;
	int i;

	snprintf(la, sizeof(la), "lease-a%d", round);
	snprintf(lb, sizeof(lb), "lease-b%d", round);
	snprintf(ia, sizeof(ia), "inst-a%d", round);
	snprintf(ib, sizeof(ib), "inst-b%d", round);
	a = inst_on(s, 10 + round * 3, ia, la);
	b = inst_on(s, 11 + round * 3, ib, lb);
	ra = alloc(s, ia, la, &a);
	rb = alloc(s, ib, lb, &b);
	rc = alloc(s, "inst-c", "", NULL); /* no lease */

	for (i = 0; i < 300; i++) {
		snprintf(k, sizeof(k), "r%d-key-%d", round, i);
		reg(s, k,
		    i % 3 == 0	 ? ra
		    : i % 3 == 1 ? rb
				 : rc,
		    (uint64_t)(i / 3) * 4096, 4096,
		    i % 3 == 0	 ? &a
		    : i % 3 == 1 ? &b
				 : NULL);
	}
	/* a key of a region nobody tracks never resolves, but is kept */
	snprintf(k, sizeof(k), "r%d-untracked", round);
	reg(s, k, 999999, 0, 10, NULL);
	for (i = 0; i < 300; i += 7) {
		struct mds_key x;

		snprintf(k, sizeof(k), "r%d-key-%d", round, i);
		x = key(k);
		assert_true(mds_pin(s, &x, i % 2 ? &a : &b, 0));
		if (i % 3 == 0)
			assert_true(mds_pin(s, &x, &a, 0)); /* twice */
		if (i % 5 == 0)
			assert_true(mds_unpin(s, &x, i % 2 ? &a : &b));
	}
	for (i = 1; i < 300; i += 4) {
		struct mds_key x;

		snprintf(k, sizeof(k), "r%d-key-%d", round, i);
		x = key(k);
		(void)mds_delete(s, &x, NULL); /* pinned ones stay */
	}
	/* c returns its region: RETURNED, freed once its keys go */
	assert_true(mds_return(s, S("inst-c"), rc, NULL, 0));
	/* a region b returns at once: freed (FREE queued, answered) */
	assert_true(mds_return(s, S(ib), alloc(s, ib, lb, &b), &b, 0));
}

/* a lease that ends: its regions lose their owner, its pins go */
static void end_lease(struct mds *s, int round)
{
	int fd = 10 + round * 3;
	struct mds_peer a = {fd, (uint64_t)fd * 7919, NULL, NULL};
	char la[16], ia[16];

	snprintf(la, sizeof(la), "lease-a%d", round);
	snprintf(ia, sizeof(ia), "inst-a%d", round);
	assert_int_equal(mds_heartbeat(s, S(ia), S(la), true, false, &a), 0);
}

static void recover_equal(struct mds *s, struct jr *j, struct jr_recovery *r)
{
	struct mds s2;
	struct jr j2;
	char *want, *got;

	mds_journal_commit(s);
	want = dump(s);
	close_store(s, j);
	open_store(&s2, &j2, r);
	assert_true(r->found);
	got = dump(&s2);
	if (strcmp(want, got)) {
		fprintf(stderr, "--- before\n%s--- recovered\n%s", want, got);
		fail();
	}
	free(want);
	free(got);
	*s = s2;
	*j = j2;
	s->jr = j;
}

static void test_replay_equals_original(void **state)
{
	struct jr_recovery r;
	struct mds s;
	struct jr j;

	(void)state;
	open_store(&s, &j, &r);
	assert_false(r.found);
	load(&s, 0);
	recover_equal(&s, &j, &r);
	assert_string_equal(s.server_id, "0123456789abcdef");
	/* go on from the recovered state: more load, a lease ends */
	load(&s, 1);
	end_lease(&s, 1);
	recover_equal(&s, &j, &r);
	assert_int_equal(r.dropped, 0);
	/* and a third time, with nothing new */
	recover_equal(&s, &j, &r);
	close_store(&s, &j);
}

static int count_segments(const char *suffix)
{
	struct dirent *d;
	DIR *dp = opendir(DIR_);
	int n = 0;

	assert_non_null(dp);
	while ((d = readdir(dp))) {
		size_t l = strlen(d->d_name), sl = strlen(suffix);

		if (!strncmp(d->d_name, "journal.", 8) &&
		    (sl ? l > sl && !strcmp(d->d_name + l - sl, suffix)
			: !strchr(d->d_name + 8, '.')))
			n++;
	}
	closedir(dp);
	return n;
}

static void test_snapshot(void **state)
{
	struct jr_recovery r;
	uint64_t before;
	struct mds s;
	struct jr j;

	(void)state;
	open_store(&s, &j, &r);
	load(&s, 0);
	load(&s, 1);
	mds_journal_commit(&s);
	before = j.total;
	/* a whole snapshot: one segment left, no bigger than before */
	mds_snapshot_all(&s);
	assert_int_equal(count_segments(""), 1);
	assert_int_equal(s.snaps, 1);
	recover_equal(&s, &j, &r);
	assert_true(j.total <= before);
	/* a snapshot in steps, with requests between them */
	s.cfg.snap_min = 4096;
	j.base = 0;
	mds_tick(&s, 2000); /* begins it, writes some */
	assert_true(s.snap_on || s.snaps == 1);
	load(&s, 2);
	end_lease(&s, 2);
	while (s.snap_on)
		mds_tick(&s, 3000);
	assert_int_equal(s.snaps, 1);
	assert_int_equal(count_segments(""), 1);
	recover_equal(&s, &j, &r);
	/* a crash in the middle of one: old and new segments replay */
	s.cfg.snap_min = 4096;
	j.base = 0;
	mds_tick(&s, 4000);
	load(&s, 3);
	if (s.snap_on)
		assert_int_equal(count_segments(""), 2);
	recover_equal(&s, &j, &r);
	close_store(&s, &j);
}

static void write_corpus(const char *name)
{
	const char *out = getenv("MARU_WRITE_CORPUS");
	char cmd[1024];

	if (!out)
		return;
	snprintf(cmd, sizeof(cmd),
		 "for f in '%s'/journal.*; do cp \"$f\" '%s'/%s-$(basename "
		 "\"$f\"); done",
		 DIR_, out, name);
	assert_int_equal(system(cmd), 0);
}

/* the newest segment's path */
static void last_segment(char *out, size_t len)
{
	struct dirent *d;
	DIR *dp = opendir(DIR_);
	char best[300] = "";

	assert_non_null(dp);
	while ((d = readdir(dp)))
		if (!strncmp(d->d_name, "journal.", 8) &&
		    !strchr(d->d_name + 8, '.') && strcmp(d->d_name, best) > 0)
			snprintf(best, sizeof(best), "%s", d->d_name);
	closedir(dp);
	assert_true(best[0]);
	snprintf(out, len, "%s/%s", DIR_, best);
}

static off_t file_size(const char *p)
{
	struct stat st;

	assert_int_equal(stat(p, &st), 0);
	return st.st_size;
}

static void test_torn_tail(void **state)
{
	struct jr_recovery r;
	struct mds s;
	struct jr j;
	char seg[512];
	off_t size, cut;

	(void)state;
	open_store(&s, &j, &r);
	load(&s, 0);
	close_store(&s, &j);
	write_corpus("load");
	last_segment(seg, sizeof(seg));
	size = file_size(seg);
	/* cut in the middle of the last record, then of a header */
	for (cut = 3; cut <= 13; cut += 10) {
		assert_int_equal(truncate(seg, size - cut), 0);
		open_store(&s, &j, &r);
		assert_true(r.found);
		assert_true(r.dropped > 0);
		assert_non_null(strstr(r.why, "torn tail"));
		assert_false(r.lossy);
		assert_int_equal(mds_check(&s), 0);
		close_store(&s, &j);
		/* the torn bytes were cut (what the lost record said may be
		 * written again: a FREE the recovered state still owes) and
		 * the next start finds none */
		size = file_size(seg);
		open_store(&s, &j, &r);
		assert_int_equal(r.dropped, 0);
		close_store(&s, &j);
	}
	/* zeroes after the end (a preallocated or half-written page) */
	{
		int fd = open(seg, O_WRONLY | O_APPEND);
		char z[100] = {0};

		assert_true(fd >= 0);
		assert_int_equal(write(fd, z, sizeof(z)), sizeof(z));
		close(fd);
	}
	open_store(&s, &j, &r);
	assert_int_equal(r.dropped, 100);
	assert_int_equal(mds_check(&s), 0);
	close_store(&s, &j);
}

static void test_flipped_bits(void **state)
{
	struct jr_recovery r;
	struct mds s;
	struct jr j;
	char seg[512];
	off_t size, at;
	uint64_t full_keys;

	(void)state;
	open_store(&s, &j, &r);
	load(&s, 0);
	load(&s, 1);
	full_keys = s.kv.count;
	close_store(&s, &j);
	last_segment(seg, sizeof(seg));
	size = file_size(seg);
	/* one bit in the middle: everything from that record on goes */
	at = size / 2;
	{
		int fd = open(seg, O_RDWR);
		uint8_t c;

		assert_true(fd >= 0);
		assert_int_equal(pread(fd, &c, 1, at), 1);
		c ^= 0x10;
		assert_int_equal(pwrite(fd, &c, 1, at), 1);
		close(fd);
	}
	write_corpus("flipped");
	open_store(&s, &j, &r);
	assert_true(r.found);
	/* from the record holding the flipped bit to the end */
	assert_true(r.dropped >= (uint64_t)(size - at) &&
		    r.dropped < (uint64_t)(size - at) + 4096);
	assert_non_null(strstr(r.why, "bad checksum"));
	/* valid records follow it: acknowledged work is lost, the prefix
	 * must not be served (main.c starts empty), and the damaged
	 * segment is set aside whole, not cut */
	assert_true(r.lossy);
	assert_true(s.kv.count < full_keys);
	assert_int_equal(mds_check(&s), 0);
	close_store(&s, &j);
	assert_int_equal(count_segments(".bad"), 1);
	{
		char bad[520];

		snprintf(bad, sizeof(bad), "%s.bad", seg);
		assert_int_equal(file_size(bad), size);
	}
	/* a header that is not ours: nothing recovered, all set aside */
	last_segment(seg, sizeof(seg));
	{
		int fd = open(seg, O_RDWR);

		assert_true(fd >= 0);
		assert_int_equal(pwrite(fd, "\xff\xff\xff\xff", 4, 0), 4);
		close(fd);
	}
	open_store(&s, &j, &r);
	assert_false(r.found);
	assert_int_equal(s.kv.count, 0);
	assert_true(count_segments(".bad") >= 1);
	close_store(&s, &j);
}

/* damage in the newest segment's last frame: a write cut, not a loss */
static void test_bad_last_frame(void **state)
{
	struct jr_recovery r;
	struct mds s;
	struct jr j;
	char seg[512];
	off_t size;
	uint64_t keys;

	(void)state;
	open_store(&s, &j, &r);
	load(&s, 0);
	keys = s.kv.count;
	close_store(&s, &j);
	last_segment(seg, sizeof(seg));
	size = file_size(seg);
	{
		int fd = open(seg, O_RDWR);
		uint8_t c;

		assert_true(fd >= 0);
		assert_int_equal(pread(fd, &c, 1, size - 1), 1);
		c ^= 0x01;
		assert_int_equal(pwrite(fd, &c, 1, size - 1), 1);
		close(fd);
	}
	open_store(&s, &j, &r);
	assert_true(r.found);
	assert_false(r.lossy);
	assert_true(r.dropped > 0 && r.dropped < 200);
	assert_true(s.kv.count + 1 >= keys);
	assert_int_equal(count_segments(".bad"), 0);
	close_store(&s, &j);
}

/*
 * A segment created by a rotation and killed before anything reached it
 * (an empty file): recovery sets it aside and appends go on in the one
 * before, so what the next run acknowledges is there after another
 * restart (appending to the empty segment instead would put the records
 * into a segment without a HEAD, rejected at the restart after).
 */
static void test_empty_segment(void **state)
{
	struct jr_recovery r;
	struct mds s;
	struct jr j;
	char path[512];
	uint64_t keys;
	int fd;

	(void)state;
	open_store(&s, &j, &r);
	load(&s, 0);
	mds_journal_commit(&s);
	snprintf(path, sizeof(path), "%s/journal.%016llx", DIR_,
		 (unsigned long long)j.seq + 1);
	close_store(&s, &j);
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0640);
	assert_true(fd >= 0);
	close(fd);
	open_store(&s, &j, &r);
	assert_true(r.found);
	assert_false(r.lossy);
	load(&s, 1);
	mds_journal_commit(&s);
	keys = s.kv.count;
	close_store(&s, &j);
	open_store(&s, &j, &r);
	assert_true(r.found);
	assert_false(r.lossy);
	assert_int_equal(r.dropped, 0);
	assert_int_equal(s.kv.count, keys);
	close_store(&s, &j);
}

/*
 * Pins of an instance with no lease go with its last connection; no
 * connection survives a restart, so after one they are gone too (were
 * they kept, the key could never be evicted).
 */
/*
 * Two clients of one instance id, each with its lease: their regions and
 * pins come back to each (a pin record names its holder's lease); one
 * lease ends, and its region goes to the id's lease-less owner, as the
 * journal has named it since.
 */
static void test_shared_instance_id(void **state)
{
	struct mds_peer p1, p2;
	struct jr_recovery r;
	struct mds_key x;
	struct mds s;
	struct jr j;
	uint64_t r1, r2;
	char k[16];
	int i;

	(void)state;
	open_store(&s, &j, &r);
	p1 = inst_on(&s, 50, "shared", "lease-1");
	p2 = inst_on(&s, 51, "shared", "lease-2");
	r1 = alloc(&s, "shared", "lease-1", &p1);
	r2 = alloc(&s, "shared", "lease-2", &p2);
	for (i = 0; i < 20; i++) {
		snprintf(k, sizeof(k), "s%d", i);
		reg(&s, k, i % 2 ? r2 : r1, (uint64_t)i * 4096, 4096,
		    i % 2 ? &p2 : &p1);
		x = key(k);
		if (i % 3 == 0)
			assert_true(mds_pin(&s, &x, i % 4 ? &p1 : &p2, 0));
	}
	recover_equal(&s, &j, &r);
	/* each lease's owner: one region and its pins */
	mds_conn_open(&s, 50);
	mds_conn_open(&s, 51);
	assert_int_equal(
		mds_heartbeat(&s, S("shared"), S("lease-1"), true, false, &p1),
		0);
	recover_equal(&s, &j, &r);
	close_store(&s, &j);
}

/*
 * A journal written before pin records named the holder's lease (one
 * instance "X" with lease "L", a region, a key "k" pinned once): the pin
 * comes back to the lease's owner, and stays with it (it has a lease).
 */
static const uint8_t legacy_journal[] = {
	0x15, 0x00, 0x00, 0x00, 0x88, 0x7c, 0xf3, 0x96, 0x94, 0x01, 0x01, 0xb0,
	0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x61, 0x62,
	0x63, 0x64, 0x65, 0x66, 0x01, 0x06, 0x00, 0x00, 0x00, 0x24, 0x3d, 0x4b,
	0x81, 0x93, 0x04, 0xa1, 0x4c, 0xa1, 0x58, 0x1c, 0x00, 0x00, 0x00, 0x6e,
	0x26, 0x31, 0xe8, 0x99, 0x06, 0x01, 0xce, 0x00, 0x20, 0x00, 0x00, 0xce,
	0x00, 0x40, 0x00, 0x00, 0xcf, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x01, 0xa1, 0x58, 0xa1, 0x4c, 0x01, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x24,
	0xaf, 0xb5, 0x9c, 0x97, 0x09, 0x00, 0xc4, 0x01, 0x6b, 0x01, 0x00, 0xcd,
	0x10, 0x00, 0x01, 0x09, 0x00, 0x00, 0x00, 0x55, 0xcc, 0x83, 0x33, 0x95,
	0x0b, 0xa1, 0x58, 0x00, 0xc4, 0x01, 0x6b, 0x01};

static void test_legacy_pin_record(void **state)
{
	struct jr_recovery r;
	char path[300];
	struct mds s;
	struct jr j;
	FILE *f;

	(void)state;
	assert_int_equal(mkdir(DIR_, 0700) == 0 || errno == EEXIST, 1);
	snprintf(path, sizeof(path), "%s/journal.0000000000000001", DIR_);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(legacy_journal, 1, sizeof(legacy_journal), f),
			 sizeof(legacy_journal));
	fclose(f);
	open_store(&s, &j, &r);
	assert_true(r.found && !r.lossy);
	assert_int_equal(s.kv.count, 1);
	assert_int_equal(s.pin_map.count, 1);
	assert_int_equal(s.insts[s.regions[s.reg_head].owner].nleases, 1);
	assert_string_equal(s.insts[s.regions[s.reg_head].owner].lease_id, "L");
	close_store(&s, &j);
}

/*
 * A lease that ended, forgotten after MDS_ENDED_LEASES more, taken again
 * by another instance id; a pin on the first owner's connection
 * meanwhile: the journal still replays whole (the pin was the
 * connection's), and the region stays its owner's, which a stranger
 * naming the id cannot return.
 */
static void test_lease_id_taken_again(void **state)
{
	struct mds_peer p, q = {63, 63 * 7919, NULL, NULL};
	struct mds_key x = key("k");
	struct jr_recovery r;
	struct mds s;
	struct jr j;
	uint64_t rid;
	char l[32];
	int i;

	(void)state;
	open_store(&s, &j, &r);
	p = inst_on(&s, 60, "X", "L");
	rid = alloc(&s, "X", "L", &p);
	reg(&s, "k", rid, 0, 4096, &p);
	assert_int_equal(mds_heartbeat(&s, S("X"), S("L"), true, false, &p), 0);
	for (i = 0; i < MDS_ENDED_LEASES + 4; i++) {
		snprintf(l, sizeof(l), "junk-%d", i);
		assert_int_equal(
			mds_heartbeat(&s, S("Z"), S(l), true, false, NULL), 0);
	}
	(void)inst_on(&s, 61, "Y", "L");
	assert_true(mds_pin(&s, &x, &p, 0));
	reg(&s, "after", 999999, 0, 10, NULL); /* a record after it */
	mds_journal_commit(&s);
	close_store(&s, &j);
	open_store(&s, &j, &r);
	assert_true(r.found && !r.lossy);
	assert_int_equal(s.kv.count, 2);
	mds_conn_open(&s, 63);
	assert_false(mds_return(&s, S("X"), rid, &q, 0));
	close_store(&s, &j);
}

static void test_leaseless_pins(void **state)
{
	struct mds_peer p = {40, 40 * 7919, NULL, NULL};
	struct mds_key x = key("pk");
	struct jr_recovery r;
	struct mds s;
	struct jr j;
	uint64_t rid;

	(void)state;
	open_store(&s, &j, &r);
	mds_conn_open(&s, 40);
	rid = alloc(&s, "inst-nl", "", &p);
	reg(&s, "pk", rid, 0, 4096, &p);
	assert_true(mds_pin(&s, &x, &p, 0));
	assert_int_equal(s.pin_map.count, 1);
	mds_journal_commit(&s);
	close_store(&s, &j); /* a crash: the connection is gone */
	open_store(&s, &j, &r);
	assert_true(r.found);
	assert_int_equal(s.kv.count, 1);
	assert_int_equal(s.pin_map.count, 0);
	assert_int_equal(s.pinned_bytes, 0);
	assert_int_equal(mds_check(&s), 0);
	close_store(&s, &j);
	/* and the release was journaled: the next start agrees */
	open_store(&s, &j, &r);
	assert_int_equal(s.pin_map.count, 0);
	close_store(&s, &j);
}

/*
 * Soft pins (PIN_KV "ttl_ms"): they keep a key from eviction until their
 * deadline, go first on UNPIN, are dropped by mds_tick() once due, and
 * are not journaled -- the pins without a deadline are, beside them.
 */
static void test_soft_pins(void **state)
{
	struct mds_peer p;
	struct mds_key x = key("sk"), y = key("sk2");
	struct jr_recovery r;
	struct mds s;
	struct jr j;
	uint64_t rid, t0;

	(void)state;
	open_store(&s, &j, &r);
	p = inst_on(&s, 41, "inst-soft", "L-soft");
	rid = alloc(&s, "inst-soft", "L-soft", &p);
	reg(&s, "sk", rid, 0, 4096, &p);
	reg(&s, "sk2", rid, 4096, 4096, &p);
	t0 = s.vnow;
	/* two soft pins and a hard one of sk; one soft pin of sk2 */
	assert_true(mds_pin(&s, &x, &p, 100));
	assert_true(mds_pin(&s, &x, &p, 0));
	assert_true(mds_pin(&s, &x, &p, 300)); /* extends the deadline */
	assert_true(mds_pin(&s, &y, &p, 50));
	assert_int_equal(s.soft_recs, 2);
	assert_int_equal(s.soft_next, t0 + 50 * 1000000ull);
	assert_int_equal(s.pinned_bytes, 8192);
	assert_int_equal(mds_check(&s), 0);
	/* UNPIN drops a soft one first: the hard one stays journaled */
	assert_true(mds_unpin(&s, &x, &p));
	mds_tick(&s, t0 + 60 * 1000000ull); /* sk2's pin is due */
	assert_int_equal(s.soft_recs, 1);
	assert_int_equal(s.pinned_bytes, 4096);
	assert_int_equal(s.soft_next, t0 + 300 * 1000000ull);
	assert_int_equal(mds_check(&s), 0);
	mds_tick(&s, t0 + 200 * 1000000ull); /* not yet */
	assert_int_equal(s.soft_recs, 1);
	mds_journal_commit(&s);
	close_store(&s, &j);
	/* a restart: the soft pin is gone, the hard one is back */
	open_store(&s, &j, &r);
	assert_true(r.found);
	assert_int_equal(s.pin_map.count, 1);
	assert_int_equal(s.soft_recs, 0);
	assert_int_equal(s.pinned_bytes, 4096);
	assert_int_equal(mds_check(&s), 0);
	close_store(&s, &j);
	/* and when the deadline passes with no restart, the key is free */
	open_store(&s, &j, &r);
	p = inst_on(&s, 42, "inst-soft", "L-soft");
	t0 = s.vnow;
	assert_true(mds_unpin(&s, &x, &p)); /* the hard pin */
	assert_true(mds_pin(&s, &x, &p, 10));
	assert_int_equal(s.pinned_bytes, 4096);
	mds_tick(&s, t0 + 10 * 1000000ull);
	assert_int_equal(s.pin_map.count, 0);
	assert_int_equal(s.soft_recs, 0);
	assert_int_equal(s.soft_next, UINT64_MAX);
	assert_int_equal(s.pinned_bytes, 0);
	assert_int_equal(mds_check(&s), 0);
	close_store(&s, &j);
}

static int nfail;
static int fail_nth(void)
{
	return --nfail == 0;
}

/*
 * Memory running out during a replay is not damage: jr_recover() says
 * -ENOMEM and leaves every file as it was (treating it as damage would
 * cut the journal at the record that could not be applied).
 */
static void test_replay_out_of_memory(void **state)
{
	struct mds_config c = config();
	struct jr_recovery r;
	struct mds s;
	struct jr j;
	char err[256], seg[512];
	off_t size;

	(void)state;
	open_store(&s, &j, &r);
	load(&s, 0);
	close_store(&s, &j);
	last_segment(seg, sizeof(seg));
	size = file_size(seg);
	assert_int_equal(jr_open(&j, DIR_, false, false, err, sizeof(err)), 0);
	assert_int_equal(mds_init(&s, &c, &fake_ops, &F, 7), 0);
	s.replaying = true;
	nfail = 200;
	ix_fail_hook = fail_nth;
	assert_int_equal(jr_recover(&j, false, mds_apply, mds_ahead, &s, &r),
			 -ENOMEM);
	ix_fail_hook = NULL;
	mds_destroy(&s);
	jr_close(&j);
	assert_int_equal(file_size(seg), size);
	assert_int_equal(count_segments(".bad"), 0);
}

static void test_frames(void **state)
{
	uint8_t b[64] = {0};
	const uint8_t *pl;
	struct jr_rec rec;
	uint32_t plen;
	size_t off = 0;

	(void)state;
	/* [8, 5] = FREED of region 5: 0x92 0x08 0x05 */
	b[0] = 3;
	b[4] = 0;
	memcpy(b + 8, "\x92\x08\x05", 3);
	{
		uint32_t c = (uint32_t)crc32(0, b + 8, 3);

		put_u32le(b + 4, c);
	}
	assert_int_equal(jr_next(b, 11, &off, &pl, &plen), 1);
	assert_int_equal(off, 11);
	assert_int_equal(jr_decode(pl, plen, &rec), 0);
	assert_int_equal(rec.type, JR_FREED);
	assert_int_equal(rec.u[0], 5);
	assert_int_equal(jr_next(b, 11, &off, &pl, &plen), 0);
	off = 0;
	assert_int_equal(jr_next(b, 10, &off, &pl, &plen), -EAGAIN);
	assert_int_equal(jr_next(b, 5, &off, &pl, &plen), -EAGAIN);
	assert_int_equal(off, 0);
	off = 11;
	assert_int_equal(jr_next(b, 30, &off, &pl, &plen), -EAGAIN); /* 0s */
	off = 0;
	b[9] ^= 1;
	assert_int_equal(jr_next(b, 11, &off, &pl, &plen), -EPROTO);
	b[9] ^= 1;
	/* wrong arity, unknown type, trailing bytes */
	assert_int_equal(jr_decode((const uint8_t *)"\x91\x08", 2, &rec),
			 -EPROTO);
	assert_int_equal(jr_decode((const uint8_t *)"\x92\x0c\x05", 3, &rec),
			 -EPROTO);
	assert_int_equal(
		jr_decode((const uint8_t *)"\x92\x08\x05\x00", 4, &rec),
		-EPROTO);
	assert_int_equal(jr_decode((const uint8_t *)"\x92\x08\xc0", 3, &rec),
			 -EPROTO);
}

/*
 * The writer's checksum (ISA-L) is zlib's crc32, bit for bit: every
 * frame of a segment holding records of 0..600 byte keys checks out
 * against zlib as the reference; and every payload is what msgpack-c's
 * unpacker reads as [type, fields...], the fields our reader gives.
 */
static void test_crc_is_zlibs(void **state)
{
	char err[256], path[512];
	uint8_t key[600];
	struct stat st;
	struct jr j;
	size_t off = 0, n = 0;
	uint8_t *b;
	uint32_t i;
	FILE *f;

	(void)state;
	for (i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(i * 131 + 7);
	assert_int_equal(jr_open(&j, DIR_, false, false, err, sizeof(err)), 0);
	assert_int_equal(jr_start(&j, "0123456789abcdef"), 0);
	for (i = 0; i <= sizeof(key); i += 3)
		jr_put_key(&j, KEY_BIN, key, i, 9, i, i + 1, i);
	assert_int_equal(jr_commit(&j), 0);
	jr_close(&j);
	snprintf(path, sizeof(path), "%s/journal.0000000000000001", DIR_);
	assert_int_equal(stat(path, &st), 0);
	b = malloc((size_t)st.st_size);
	assert_non_null(b);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fread(b, 1, (size_t)st.st_size, f),
			 (size_t)st.st_size);
	fclose(f);
	while (off + 8 <= (size_t)st.st_size) {
		uint32_t len = get_u32le(b + off), c = get_u32le(b + off + 4);

		assert_true(off + 8 + len <= (size_t)st.st_size);
		assert_int_equal(c, (uint32_t)crc32(0, b + off + 8, len));
		{
			msgpack_unpacked u;
			size_t used = 0;
			struct jr_rec rec;
			const msgpack_object *a;

			msgpack_unpacked_init(&u);
			assert_int_equal(msgpack_unpack_next(
						 &u, (const char *)b + off + 8,
						 len, &used),
					 MSGPACK_UNPACK_SUCCESS);
			assert_int_equal(used, len);
			assert_int_equal(jr_decode(b + off + 8, len, &rec), 0);
			assert_int_equal(u.data.type, MSGPACK_OBJECT_ARRAY);
			a = u.data.via.array.ptr;
			assert_int_equal(a[0].via.u64, rec.type);
			if (rec.type == JR_KEY) {
				assert_int_equal(u.data.via.array.size, 7);
				assert_int_equal(a[2].via.bin.size,
						 rec.s[0].len);
				assert_memory_equal(a[2].via.bin.ptr, key,
						    rec.s[0].len);
				assert_int_equal(a[4].via.u64, rec.u[2]);
				assert_int_equal(a[6].via.u64, rec.u[4]);
			}
			msgpack_unpacked_destroy(&u);
		}
		off += 8 + len;
		n++;
	}
	assert_int_equal(off, (size_t)st.st_size);
	assert_int_equal(n, 1 + sizeof(key) / 3 + 1); /* HEAD + keys */
	free(b);
}

static void test_one_server_per_directory(void **state)
{
	struct jr j1, j2;
	char err[256];

	(void)state;
	assert_int_equal(jr_open(&j1, DIR_, false, false, err, sizeof(err)), 0);
	assert_int_equal(jr_open(&j2, DIR_, false, false, err, sizeof(err)),
			 -EWOULDBLOCK);
	assert_non_null(strstr(err, "in use"));
	jr_close(&j2);
	jr_close(&j1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crc_is_zlibs, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_last_frame, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_empty_segment, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_replay_out_of_memory,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared_instance_id, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_legacy_pin_record, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_lease_id_taken_again,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_soft_pins, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_leaseless_pins, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_replay_equals_original,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_torn_tail, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_flipped_bits, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_one_server_per_directory,
						setup, teardown),
	};

	log_init("test_mds_journal", LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
