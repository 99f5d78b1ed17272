/* SPDX-License-Identifier: Apache-2.0 */
/*
 * journal_rival.c - maru-server's journal against LMDB, the embedded
 * store a journal would otherwise be built on (docs/architecture.md,
 * "Dependencies": why the journal is a format of our own)
 *
 *   journal-rival [--keys N] [--batch B] [--rounds R] [--dir DIR]
 *
 * Both sides get the same work, in the same process, the rounds
 * interleaved: N keys of 24 bytes, each with the value maru-server keeps
 * (region, offset, length, generation: 32 bytes), written in commits of B
 * (the replies of one drained batch), durable against a crash of the
 * process and not of the host (maru-server's default: write(2), no
 * fdatasync; LMDB with MDB_NOSYNC | MDB_WRITEMAP, its fastest safe mode
 * for that).  Then the restart: rebuild the server's in-memory index of N
 * keys from what is on disk (the journal: jr_recover() into ix_insert();
 * LMDB: a cursor over the database into ix_insert()).
 *
 * Prints per round and as medians: ns per key written, ns per key
 * rebuilt, bytes on disk per key, and the ratios LMDB / journal.  Keys
 * come in no order (as the hashes of token chunks do): an LMDB of keys
 * inserted in sorted order would only append to its last page.
 */
#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "index.h"
#include "journal.h"
#include "log.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* key i: 24 bytes, unique, in no order (as hashes of token chunks are) */
static void key_of(uint64_t i, char k[25])
{
	snprintf(k, 25, "key-%020" PRIu64,
		 (uint64_t)(i * 0x9E3779B97F4A7C15ull));
}

static void rm_rf(const char *dir)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		exit(1);
}

static uint64_t du(const char *dir)
{
	char cmd[600];
	unsigned long long kb = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "du -sb '%s' | cut -f1", dir);
	f = popen(cmd, "r");
	if (!f || fscanf(f, "%llu", &kb) != 1)
		kb = 0;
	if (f)
		pclose(f);
	return kb;
}

static int apply_key(void *arg, const struct jr_rec *rec)
{
	struct ix *ix = arg;
	struct ix_key k = {rec->s[0].p, rec->s[0].len, KEY_STR};
	struct ix_entry *e;

	if (rec->type != JR_KEY)
		return 0;
	if (ix_insert(ix, &k, ix_hash(ix, &k), &e) < 0)
		return -ENOMEM;
	e->off = rec->u[2];
	e->len = rec->u[3];
	e->gen = rec->u[4];
	return 0;
}

/* as maru-server's replay does (mds_ahead()) */
static void ahead_key(void *arg, const struct jr_rec *rec, int stage)
{
	struct ix *ix = arg;
	struct ix_key k = {rec->s[0].p, rec->s[0].len, KEY_STR};

	if (rec->type != JR_KEY)
		return;
	if (stage == 0)
		ix_prefetch(ix, ix_hash(ix, &k));
	else
		ix_prefetch_entry(ix, ix_hash(ix, &k));
}

/* Return: ns per key written; *@rebuild: ns per key rebuilt */
static double run_journal(const char *dir, uint64_t n, uint64_t batch,
			  double *rebuild, uint64_t *bytes)
{
	struct jr_recovery rec;
	char err[256], k[25];
	uint64_t i, t0, t1;
	double write_ns;
	struct jr j;
	struct ix ix;

	rm_rf(dir);
	if (jr_open(&j, dir, false, false, err, sizeof(err)) < 0 ||
	    jr_start(&j, "0123456789abcdef") < 0) {
		fprintf(stderr, "journal: %s\n", err);
		exit(1);
	}
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		key_of(i, k);
		jr_put_key(&j, KEY_STR, (const uint8_t *)k, 24, 1 + i / 65536,
			   (i % 65536) * 4096, 4096, i + 1);
		if ((i + 1) % batch == 0 && jr_commit(&j) < 0)
			exit(1);
	}
	if (jr_commit(&j) < 0)
		exit(1);
	t1 = now_ns();
	write_ns = (double)(t1 - t0) / (double)n;
	jr_close(&j);
	*bytes = du(dir);
	if (jr_open(&j, dir, false, true, err, sizeof(err)) < 0)
		exit(1);
	ix_init(&ix, 42);
	t0 = now_ns();
	(void)ix_reserve(&ix, n);
	if (jr_recover(&j, true, apply_key, ahead_key, &ix, &rec) < 0 ||
	    ix.count != n) {
		fprintf(stderr, "journal: replay gave %" PRIu64 " keys\n",
			ix.count);
		exit(1);
	}
	*rebuild = (double)(now_ns() - t0) / (double)n;
	ix_destroy(&ix);
	jr_close(&j);
	return write_ns;
}

#define CHECK(x)                                                               \
	do {                                                                   \
		int rc_ = (x);                                                 \
		if (rc_) {                                                     \
			fprintf(stderr, "lmdb: %s: %s\n", #x,                  \
				mdb_strerror(rc_));                            \
			exit(1);                                               \
		}                                                              \
	} while (0)

static double run_lmdb(const char *dir, uint64_t n, uint64_t batch,
		       double *rebuild, uint64_t *bytes)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_cursor *cur;
	MDB_val mk, mv;
	uint64_t i, t0, t1, val[4];
	double write_ns;
	char k[25];
	struct ix ix;

	rm_rf(dir);
	if (mkdir(dir, 0700) < 0)
		exit(1);
	CHECK(mdb_env_create(&env));
	CHECK(mdb_env_set_mapsize(env, (size_t)(n * 256 + (64u << 20))));
	CHECK(mdb_env_open(env, dir, MDB_NOSYNC | MDB_WRITEMAP, 0600));
	t0 = now_ns();
	CHECK(mdb_txn_begin(env, NULL, 0, &txn));
	CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
	for (i = 0; i < n; i++) {
		key_of(i, k);
		val[0] = 1 + i / 65536;
		val[1] = (i % 65536) * 4096;
		val[2] = 4096;
		val[3] = i + 1;
		mk.mv_data = k;
		mk.mv_size = 24;
		mv.mv_data = val;
		mv.mv_size = sizeof(val);
		CHECK(mdb_put(txn, dbi, &mk, &mv, 0));
		if ((i + 1) % batch == 0) {
			CHECK(mdb_txn_commit(txn));
			CHECK(mdb_txn_begin(env, NULL, 0, &txn));
		}
	}
	CHECK(mdb_txn_commit(txn));
	t1 = now_ns();
	write_ns = (double)(t1 - t0) / (double)n;
	mdb_env_close(env);
	*bytes = du(dir);
	CHECK(mdb_env_create(&env));
	CHECK(mdb_env_set_mapsize(env, (size_t)(n * 256 + (64u << 20))));
	ix_init(&ix, 42);
	t0 = now_ns();
	CHECK(mdb_env_open(env, dir, MDB_RDONLY, 0600));
	CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
	CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
	CHECK(mdb_cursor_open(txn, dbi, &cur));
	(void)ix_reserve(&ix, n);
	while (mdb_cursor_get(cur, &mk, &mv, MDB_NEXT) == 0) {
		struct ix_key key = {mk.mv_data, (uint32_t)mk.mv_size, KEY_STR};
		struct ix_entry *e;

		memcpy(val, mv.mv_data, sizeof(val));
		if (ix_insert(&ix, &key, ix_hash(&ix, &key), &e) < 0)
			exit(1);
		e->off = val[1];
		e->len = val[2];
		e->gen = val[3];
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	*rebuild = (double)(now_ns() - t0) / (double)n;
	if (ix.count != n) {
		fprintf(stderr, "lmdb: scan gave %" PRIu64 " keys\n", ix.count);
		exit(1);
	}
	ix_destroy(&ix);
	mdb_env_close(env);
	return write_ns;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	uint64_t n = 1000000, batch = 64, jb = 0, lb = 0;
	const char *base = "/var/tmp";
	char jdir[512], ldir[512];
	double jw[32], lw[32], jr[32], lr[32];
	int rounds = 3, r, i;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--keys"))
			n = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--batch"))
			batch = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--dir"))
			base = argv[i + 1];
	}
	if (rounds < 1 || rounds > 32 || !n || !batch) {
		fprintf(stderr, "usage: journal-rival [--keys N] [--batch B] "
				"[--rounds 1..32] [--dir DIR]\n");
		return 2;
	}
	log_init("journal-rival", LOG_ERR);
	snprintf(jdir, sizeof(jdir), "%s/journal-rival-%d-j", base,
		 (int)getpid());
	snprintf(ldir, sizeof(ldir), "%s/journal-rival-%d-l", base,
		 (int)getpid());
	for (r = 0; r < rounds; r++) {
		/* the second side reuses the heap the first one freed: take
		 * turns at being first */
		if (r % 2 == 0) {
			jw[r] = run_journal(jdir, n, batch, &jr[r], &jb);
			lw[r] = run_lmdb(ldir, n, batch, &lr[r], &lb);
		} else {
			lw[r] = run_lmdb(ldir, n, batch, &lr[r], &lb);
			jw[r] = run_journal(jdir, n, batch, &jr[r], &jb);
		}
		printf("round=%d keys=%" PRIu64 " batch=%" PRIu64
		       " journal_write_ns=%.0f lmdb_write_ns=%.0f"
		       " journal_rebuild_ns=%.0f lmdb_rebuild_ns=%.0f\n",
		       r, n, batch, jw[r], lw[r], jr[r], lr[r]);
		fflush(stdout);
	}
	rm_rf(jdir);
	rm_rf(ldir);
	{
		double a = median(jw, rounds), b = median(lw, rounds);
		double c = median(jr, rounds), d = median(lr, rounds);

		printf("median keys=%" PRIu64 " batch=%" PRIu64
		       " journal_write_ns=%.0f lmdb_write_ns=%.0f"
		       " write_ratio=%.2f journal_rebuild_ns=%.0f"
		       " lmdb_rebuild_ns=%.0f rebuild_ratio=%.2f"
		       " journal_bytes_per_key=%.1f lmdb_bytes_per_key=%.1f\n",
		       n, batch, a, b, b / a, c, d, d / c,
		       (double)jb / (double)n, (double)lb / (double)n);
	}
	return 0;
}
