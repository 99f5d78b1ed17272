/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shm_index_bench.c - shm-index-bench: lookups through maru-server's
 * shared index against the same lookups as requests, in one process
 * (bench/run_shm_index_bench.sh runs it, docs/performance.md
 * "Shared index" has the figures)
 *
 *   shm-index-bench store --server URL --keys N [--size S] [--prefix P]
 *	stores N keys "P<16 hex digits>" (an LMCache-style name, 60 bytes
 *	with the default prefix) of S bytes each, then exits (the keys stay)
 *   shm-index-bench batch --server URL --keys N [--iters I] [--rounds R]
 *	batch_exists of 1000 keys through the index only, R lines of keys/s
 *	(what a profiler should look at)
 *   shm-index-bench read --server URL --keys N [--prefix P]
 *                        [--iters I] [--rounds R] [--threads "1 2 4 8"]
 *	in another process: two handlers, one using the index and one
 *	with MARU_SHM_INDEX=0 (every lookup a request), and per round:
 *	  retrieve    one key at random to a usable view, timed one by one
 *	              (p50, p99), index and request
 *	  exists      the same for exists
 *	  recheck     a retrieve's re-check (index)
 *	  batch       batch_exists and batch_retrieve of 1000 keys (keys/s),
 *	              drawn from all N keys and ("hot") from 1000 of them
 *	  tput        back-to-back retrieves of one thread (lookups/s)
 *	  scale       1, 2, 4, 8 threads doing that at once (total lookups/s)
 *	and prints "name=value ..." lines: the median over the rounds, the
 *	ratio request/index beside each latency.
 *
 * Timing: CLOCK_MONOTONIC around each call (about 20 ns of it is the
 * clock itself; reported as clock_ns).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <maru/maru.h>

struct opts {
	const char *cmd;
	const char *url;
	const char *prefix;
	uint64_t keys;
	uint64_t size;
	uint64_t iters;
	int rounds;
	const char *threads;
};

static struct opts o = {
	.url = "tcp://127.0.0.1:5555",
	.prefix = "vllm@/models/Llama-3.1-8B-Instruct@1@0@",
	.keys = 10000,
	.size = 4096,
	.iters = 200000,
	.rounds = 5,
	.threads = "1 2 4 8",
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "shm-index-bench: %s: %s\n", what, strerror(rc));
	exit(1);
}

static struct maru_handler *connect_to(bool index, uint64_t pool)
{
	struct maru_config *cfg;
	struct maru_handler *h;
	int rc;

	if (!index)
		setenv("MARU_SHM_INDEX", "0", 1);
	if (maru_config_new(&cfg) < 0)
		die("config", ENOMEM);
	maru_config_set_server_url(cfg, o.url);
	maru_config_set_pool_size(cfg, pool);
	maru_config_set_chunk_size(cfg, o.size);
	rc = maru_handler_new(cfg, &h);
	if (rc == 0)
		rc = maru_handler_connect(h);
	if (rc < 0)
		die("connect", -rc);
	maru_config_free(cfg);
	unsetenv("MARU_SHM_INDEX");
	return h;
}

/* the keys' names, one buffer, and their lengths */
static char *names;
static uint8_t *lens;
#define NAME 80

static struct maru_key key_of(uint64_t i)
{
	return maru_key_str(names + i * NAME, lens[i]);
}

static void make_names(void)
{
	uint64_t i;

	names = malloc(o.keys * NAME);
	lens = malloc(o.keys);
	if (!names || !lens)
		die("names", ENOMEM);
	for (i = 0; i < o.keys; i++)
		lens[i] = (uint8_t)snprintf(
			names + i * NAME, NAME, "%s%016" PRIx64, o.prefix,
			(uint64_t)(i * 0x9e3779b97f4a7c15ull));
}

static int cmd_store(void)
{
	struct maru_handler *h;
	struct maru_page pg;
	struct maru_key k;
	uint64_t i;
	int rc;

	h = connect_to(true, (o.keys + 64) * o.size);
	for (i = 0; i < o.keys; i++) {
		rc = maru_page_alloc(h, o.size, &pg);
		if (rc < 0)
			die("page alloc", -rc);
		memset(pg.ptr, (int)(i & 0xff), o.size);
		k = key_of(i);
		rc = maru_kv_store(h, &k, &pg);
		if (rc < 0)
			die("store", -rc);
	}
	printf("stored keys=%" PRIu64 " size=%" PRIu64 "\n", o.keys, o.size);
	maru_handler_free(h); /* the keys stay (the region is kept for them) */
	return 0;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static uint64_t *lat;

enum { OP_RETRIEVE, OP_EXISTS, OP_RECHECK };

/* time @n lookups of random keys one by one; p50, p99 in ns */
static void timed(struct maru_handler *h, int op, uint64_t n, double *p50,
		  double *p99)
{
	uint64_t seed = 88172645463325252ull, i, t0, t, ticket;
	struct maru_view v;
	struct maru_key k;
	int rc;

	for (i = 0; i < n; i++) {
		k = key_of(rnd(&seed) % o.keys);
		if (op == OP_RECHECK) {
			rc = maru_kv_retrieve_ticket(h, &k, &v, &ticket);
			if (rc != 1)
				die("retrieve", rc < 0 ? -rc : ENOENT);
		}
		t0 = now_ns();
		if (op == OP_RETRIEVE) {
			rc = maru_kv_retrieve(h, &k, &v); /* a usable view */
		} else if (op == OP_EXISTS) {
			rc = maru_kv_exists(h, &k);
		} else {
			rc = maru_kv_recheck(h, &k, &v, ticket);
		}
		t = now_ns();
		if (rc != 1)
			die("lookup", rc < 0 ? -rc : ENOENT);
		lat[i] = t - t0;
	}
	qsort(lat, n, sizeof(*lat), cmp_u64);
	*p50 = (double)lat[n / 2];
	*p99 = (double)lat[n * 99 / 100];
}

/*
 * keys/s of batch lookups of 1000 keys drawn from the first @span keys:
 * all of them (the groups, digests and names of 10 000 keys outgrow the
 * caches: what memory fetches), or 1000 (one prompt's chunks asked again
 * and again: what the code costs)
 */
static double batch(struct maru_handler *h, bool retrieve, uint64_t reps,
		    uint64_t span)
{
	enum { B = 1000 };
	static struct maru_key ks[B];
	static struct maru_view vs[B];
	static bool res[B];
	uint64_t seed = 2463534242ull, r, i, t0;
	int rc;

	t0 = now_ns();
	for (r = 0; r < reps; r++) {
		for (i = 0; i < B; i++)
			ks[i] = key_of(rnd(&seed) % span);
		rc = retrieve ? maru_kv_batch_retrieve(h, ks, B, vs)
			      : maru_kv_batch_exists(h, ks, B, res);
		if (rc != B)
			die("batch", rc < 0 ? -rc : ENOENT);
	}
	return (double)(reps * B) * 1e9 / (double)(now_ns() - t0);
}

struct worker {
	struct maru_handler *h;
	uint64_t n;
	double secs;
	pthread_t t;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = (uint64_t)(uintptr_t)w | 1,
		 end = now_ns() + (uint64_t)(w->secs * 1e9);
	struct maru_view v;
	struct maru_key k;
	uint64_t i;

	while (now_ns() < end) {
		for (i = 0; i < 1000; i++) {
			k = key_of(rnd(&seed) % o.keys);
			if (maru_kv_retrieve(w->h, &k, &v) != 1)
				die("retrieve", ENOENT);
		}
		w->n += 1000;
	}
	return NULL;
}

/* total retrieves/s of @n threads at once for @secs */
static double scale(struct maru_handler *h, int n, double secs)
{
	struct worker w[64];
	uint64_t tot = 0;
	int i;

	for (i = 0; i < n && i < 64; i++) {
		w[i] = (struct worker){h, 0, secs, 0};
		pthread_create(&w[i].t, NULL, worker_main, &w[i]);
	}
	for (i = 0; i < n && i < 64; i++) {
		pthread_join(w[i].t, NULL);
		tot += w[i].n;
	}
	return (double)tot / secs;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define MAXR 32

/* batch: batch_exists of 1000 keys only, ROUNDS x ITERS/1000 batches
 * (for a profiler: nothing else in the process's time) */
static int cmd_batch(void)
{
	struct maru_handler *h = connect_to(true, 4u << 20);
	int r;

	for (r = 0; r < o.rounds; r++)
		printf("batch_exists_1000 index_keys_per_s=%.0f\n",
		       batch(h, false, o.iters / 1000 + 1, o.keys));
	maru_handler_free(h);
	return 0;
}

static int cmd_read(void)
{
	struct maru_handler *hi, *hr;
	struct maru_index_stats st;
	double m[26][MAXR], clk;
	uint64_t hot = o.keys < 1000 ? o.keys : 1000;
	uint64_t t0, rpc_iters = o.iters / 20 + 1000, i;
	int r, k, nt, tn[8], ntn = 0;
	const char *p;
	char *end;

	if (o.rounds > MAXR)
		o.rounds = MAXR;
	for (p = o.threads; *p && ntn < 8;) {
		tn[ntn] = (int)strtol(p, &end, 10);
		if (end == p)
			break;
		ntn++;
		p = end;
	}
	lat = malloc(o.iters * sizeof(*lat));
	hi = connect_to(true, 4u << 20);
	hr = connect_to(false, 4u << 20);
	/* every region mapped on both (the first lookup of a region asks) */
	{
		struct maru_view v;
		struct maru_key kk;

		for (i = 0; i < o.keys; i++) {
			kk = key_of(i);
			if (maru_kv_retrieve(hi, &kk, &v) != 1 ||
			    maru_kv_retrieve(hr, &kk, &v) != 1)
				die("warm-up", ENOENT);
		}
	}
	maru_handler_index_stats(hi, &st);
	if (!st.attached)
		die("the server offers no shared index", ENOTSUP);
	t0 = now_ns();
	for (i = 0; i < 1000000; i++)
		(void)now_ns();
	clk = (double)(now_ns() - t0) / 1e6;
	for (r = 0; r < o.rounds; r++) {
		timed(hi, OP_RETRIEVE, o.iters, &m[0][r], &m[1][r]);
		timed(hr, OP_RETRIEVE, rpc_iters, &m[2][r], &m[3][r]);
		timed(hi, OP_EXISTS, o.iters, &m[4][r], &m[5][r]);
		timed(hr, OP_EXISTS, rpc_iters, &m[6][r], &m[7][r]);
		timed(hi, OP_RECHECK, o.iters / 4, &m[8][r], &m[9][r]);
		m[10][r] = batch(hi, false, 200, o.keys);
		m[11][r] = batch(hr, false, 20, o.keys);
		m[12][r] = batch(hi, true, 200, o.keys);
		m[13][r] = batch(hr, true, 20, o.keys);
		m[24][r] = batch(hi, false, 200, hot);
		m[25][r] = batch(hi, true, 200, hot);
		m[14][r] = scale(hi, 1, 0.5);
		for (k = 0; k < ntn; k++)
			m[15 + k][r] = scale(hi, tn[k], 0.5);
	}
	maru_handler_index_stats(hi, &st);
	printf("clock_ns=%.1f keys=%" PRIu64 " rounds=%d noncoherent=%d "
	       "fallbacks=%" PRIu64 "\n",
	       clk, o.keys, o.rounds, st.noncoherent, st.fallbacks);
	{
		static const char *const nm[] = {"retrieve", "exists"};

		for (k = 0; k < 2; k++) {
			double ip50 = median(m[4 * k], o.rounds),
			       ip99 = median(m[4 * k + 1], o.rounds),
			       rp50 = median(m[4 * k + 2], o.rounds),
			       rp99 = median(m[4 * k + 3], o.rounds);

			printf("%s index_p50_ns=%.0f index_p99_ns=%.0f "
			       "rpc_p50_ns=%.0f rpc_p99_ns=%.0f "
			       "rpc_over_index_p50=%.1f\n",
			       nm[k], ip50, ip99, rp50, rp99, rp50 / ip50);
		}
	}
	printf("recheck index_p50_ns=%.0f index_p99_ns=%.0f\n",
	       median(m[8], o.rounds), median(m[9], o.rounds));
	printf("batch_exists_1000 index_keys_per_s=%.0f rpc_keys_per_s=%.0f "
	       "hot_keys_per_s=%.0f\n",
	       median(m[10], o.rounds), median(m[11], o.rounds),
	       median(m[24], o.rounds));
	printf("batch_retrieve_1000 index_keys_per_s=%.0f rpc_keys_per_s=%.0f "
	       "hot_keys_per_s=%.0f\n",
	       median(m[12], o.rounds), median(m[13], o.rounds),
	       median(m[25], o.rounds));
	printf("tput one_thread_lookups_per_s=%.0f\n", median(m[14], o.rounds));
	for (k = 0; k < ntn; k++) {
		nt = tn[k];
		printf("scale threads=%d lookups_per_s=%.0f\n", nt,
		       median(m[15 + k], o.rounds));
	}
	maru_handler_free(hi);
	maru_handler_free(hr);
	return 0;
}

int main(int argc, char **argv)
{
	int i;

	if (argc < 2) {
		fprintf(stderr, "usage: shm-index-bench store|read [options] "
				"(see the source)\n");
		return 2;
	}
	o.cmd = argv[1];
	for (i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--server"))
			o.url = argv[i + 1];
		else if (!strcmp(argv[i], "--keys"))
			o.keys = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--size"))
			o.size = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--prefix"))
			o.prefix = argv[i + 1];
		else if (!strcmp(argv[i], "--iters"))
			o.iters = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--rounds"))
			o.rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads"))
			o.threads = argv[i + 1];
		else
			return 2;
	}
	if (!o.keys || !o.iters || o.rounds < 1)
		return 2;
	make_names();
	if (!strcmp(o.cmd, "store"))
		return cmd_store();
	if (!strcmp(o.cmd, "read"))
		return cmd_read();
	if (!strcmp(o.cmd, "batch"))
		return cmd_batch();
	return 2;
}
