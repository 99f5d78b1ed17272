/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idx_churn.c - writers that churn keys and readers that verify every byte
 * they consume, through libmaru against real daemons (the shared index's
 * correctness test, driven by tests/python/test_shm_index.py)
 *
 *   idx_churn writer URL ID NKEYS SECONDS
 *	keys "c<ID>-<i>" (i < NKEYS) in a region of 8 pages: a stored key is
 *	deleted, an absent one stored in a freshly allocated page, at random,
 *	so that a freed page is written again a few operations later
 *   idx_churn evictor URL ID NKEYS SECONDS
 *	keys "e<ID>-<i>" stored round and round and never deleted: a small
 *	pool fills, the server evicts, and the evicted pages come back to
 *	this writer (after --evict-grace-ms) for other keys
 *   idx_churn reader URL SECONDS RECHECK SPEC...
 *	SPEC is "c<ID>:<NKEYS>" or "e<ID>:<NKEYS>": retrieve a random key of
 *	them, hold the view a little, copy and verify it (the page names its
 *	key and carries a checksum), then (RECHECK 1) ask whether the entry
 *	is still the one read.  Bytes that are not the key's while the
 *	re-check says valid are "wrong"; with the re-check off every such
 *	copy is wrong (the control)
 *
 * Every role prints one JSON line of counters at the end.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <maru/maru.h>

#define PAGE 4096
#define MAGIC 0x4b4e5548434c4449ull /* "IDLCHUNK" */

struct hdr {
	uint64_t magic;
	char key[48];
	uint64_t seq;
	uint64_t sum;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static uint64_t pat(uint64_t seq, size_t i)
{
	return (seq * 0x9e3779b97f4a7c15ull) ^ (uint64_t)i;
}

static void fill(uint8_t *p, const char *key, uint64_t seq)
{
	struct hdr *h = (struct hdr *)p;
	uint64_t *w = (uint64_t *)(p + sizeof(*h)), sum = 0;
	size_t i, n = (PAGE - sizeof(*h)) / 8;

	for (i = 0; i < n; i++) {
		w[i] = pat(seq, i);
		sum += w[i];
	}
	memset(h->key, 0, sizeof(h->key));
	snprintf(h->key, sizeof(h->key), "%s", key);
	h->seq = seq;
	h->sum = sum;
	h->magic = MAGIC;
}

/* is the copy @p the page of @key, whole? */
static int verify(const uint8_t *p, size_t len, const char *key)
{
	const struct hdr *h = (const struct hdr *)p;
	const uint64_t *w = (const uint64_t *)(p + sizeof(*h));
	uint64_t sum = 0;
	size_t i, n = (PAGE - sizeof(*h)) / 8;

	if (len != PAGE || h->magic != MAGIC ||
	    strncmp(h->key, key, sizeof(h->key)))
		return 0;
	for (i = 0; i < n; i++) {
		if (w[i] != pat(h->seq, i))
			return 0;
		sum += w[i];
	}
	return sum == h->sum;
}

static struct maru_handler *connect_to(const char *url, const char *id,
				       uint64_t pool, uint64_t chunk,
				       bool expand)
{
	struct maru_config *cfg;
	struct maru_handler *h;

	if (maru_config_new(&cfg) < 0)
		exit(2);
	maru_config_set_server_url(cfg, url);
	if (id)
		maru_config_set_instance_id(cfg, id);
	maru_config_set_pool_size(cfg, pool);
	maru_config_set_chunk_size(cfg, chunk);
	maru_config_set_timeout_ms(cfg, 10000);
	maru_config_set_auto_expand(cfg, expand);
	if (maru_handler_new(cfg, &h) < 0 || maru_handler_connect(h) < 0) {
		fprintf(stderr, "idx_churn: cannot connect to %s\n", url);
		exit(1);
	}
	maru_config_free(cfg);
	return h;
}

static int writer(const char *url, const char *id, int nkeys, double secs,
		  bool evictor)
{
	/*
	 * the churn writer: 8 pages of a 2 MiB region (the resource
	 * manager's alignment sizes it), so that a freed page is allocated
	 * again (FIFO) a few operations later; the evictor grows until the
	 * pool is full
	 */
	struct maru_handler *h =
		connect_to(url, NULL, evictor ? 64 * PAGE : 2u << 20,
			   evictor ? PAGE : 256u << 10, evictor);
	uint64_t seed = now_ns() | 1, end, seq = 0, stores = 0, deletes = 0,
		 fails = 0, i = 0;
	struct maru_page pg;
	struct maru_key k;
	char key[48];
	bool *stored = calloc((size_t)nkeys, 1);
	int rc, j;

	end = now_ns() + (uint64_t)(secs * 1e9);
	while (now_ns() < end) {
		j = evictor ? (int)(i++ % (uint64_t)nkeys)
			    : (int)(rnd(&seed) % (uint64_t)nkeys);
		snprintf(key, sizeof(key), "%c%s-%d", evictor ? 'e' : 'c', id,
			 j);
		k = maru_key_str(key, strlen(key));
		if (!evictor && stored[j]) {
			rc = maru_kv_delete(h, &k);
			deletes += rc == 1;
			stored[j] = false;
			continue;
		}
		rc = maru_page_alloc(h, PAGE, &pg);
		if (rc < 0) {
			fails++;
			continue;
		}
		fill(pg.ptr, key, ++seq);
		rc = maru_kv_store(h, &k, &pg);
		if (rc == 1) {
			stores++;
			stored[j] = true;
		} else if (rc < 0) {
			fails++;
		}
	}
	printf("{\"role\": \"%s\", \"stores\": %" PRIu64
	       ", \"deletes\": %" PRIu64 ", \"fails\": %" PRIu64 "}\n",
	       evictor ? "evictor" : "writer", stores, deletes, fails);
	maru_handler_free(h);
	free(stored);
	return 0;
}

struct spec {
	char kind;
	char id[16];
	int n;
};

static int reader(const char *url, double secs, bool recheck, struct spec *sp,
		  int nsp)
{
	struct maru_handler *h = connect_to(url, NULL, 4 * PAGE, PAGE, true);
	uint64_t seed = now_ns() | 1, end, lookups = 0, hits = 0, wrong = 0,
		 detected = 0, ok = 0, errors = 0, ticket;
	struct maru_index_stats st;
	struct maru_view v;
	struct maru_key k;
	uint8_t copy[PAGE];
	char key[48];
	int rc, good, valid, s, spin;

	end = now_ns() + (uint64_t)(secs * 1e9);
	while (now_ns() < end) {
		s = (int)(rnd(&seed) % (uint64_t)nsp);
		snprintf(key, sizeof(key), "%c%s-%d", sp[s].kind, sp[s].id,
			 (int)(rnd(&seed) % (uint64_t)sp[s].n));
		k = maru_key_str(key, strlen(key));
		lookups++;
		rc = maru_kv_retrieve_ticket(h, &k, &v, &ticket);
		if (rc < 0) {
			errors++;
			continue;
		}
		if (rc == 0)
			continue;
		hits++;
		/* a consumer holds the view a while (a copy to a GPU); one
		 * read in four for up to a millisecond, so that pages
		 * are reused under some of them */
		if (rnd(&seed) % 4 == 0) {
			struct timespec ts = {0, (long)(rnd(&seed) % 1000000)};

			nanosleep(&ts, NULL);
		}
		for (spin = (int)(rnd(&seed) % 4000); spin > 0; spin--)
			__asm__ volatile("" ::: "memory");
		memcpy(copy, v.ptr, v.len < PAGE ? v.len : PAGE);
		good = verify(copy, v.len, key);
		valid = recheck ? maru_kv_recheck(h, &k, &v, ticket) : 1;
		if (valid < 0) {
			errors++;
			continue;
		}
		if (valid && !good)
			wrong++;
		else if (!valid && !good)
			detected++;
		else
			ok++;
	}
	maru_handler_index_stats(h, &st);
	printf("{\"role\": \"reader\", \"lookups\": %" PRIu64
	       ", \"hits\": %" PRIu64 ", \"ok\": %" PRIu64
	       ", \"wrong\": %" PRIu64 ", \"detected\": %" PRIu64
	       ", \"errors\": %" PRIu64 ", \"local_hits\": %" PRIu64
	       ", \"local_misses\": %" PRIu64 ", \"fallbacks\": %" PRIu64
	       ", \"attached\": %s}\n",
	       lookups, hits, ok, wrong, detected, errors, st.local_hits,
	       st.local_misses, st.fallbacks, st.attached ? "true" : "false");
	maru_handler_free(h);
	return 0;
}

int main(int argc, char **argv)
{
	struct spec sp[16];
	int i, n = 0;

	if (argc >= 6 &&
	    (!strcmp(argv[1], "writer") || !strcmp(argv[1], "evictor")))
		return writer(argv[2], argv[3], atoi(argv[4]), atof(argv[5]),
			      argv[1][0] == 'e');
	if (argc >= 6 && !strcmp(argv[1], "reader")) {
		for (i = 5; i < argc && n < 16; i++) {
			const char *c = strchr(argv[i], ':');

			if (!c || c - argv[i] < 2 || c - argv[i] > 16)
				return 2;
			sp[n].kind = argv[i][0];
			snprintf(sp[n].id, sizeof(sp[n].id), "%.*s",
				 (int)(c - argv[i] - 1), argv[i] + 1);
			sp[n].n = atoi(c + 1);
			if (sp[n].n <= 0)
				return 2;
			n++;
		}
		return reader(argv[2], atof(argv[3]), atoi(argv[4]) != 0, sp,
			      n);
	}
	fprintf(stderr,
		"usage: idx_churn writer|evictor URL ID NKEYS SECONDS\n"
		"       idx_churn reader URL SECONDS RECHECK SPEC...\n");
	return 2;
}
