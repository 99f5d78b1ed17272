/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libmaru_e2e.c - end-to-end scenarios of the libmaru C API
 *
 * Not a ctest unit: tests/python/test_libmaru_e2e.py starts the real
 * maru-resource-manager and maru-server (conftest fixtures) and runs one
 * scenario per invocation:
 *
 *   test_libmaru_e2e SCENARIO SERVER_URL [ARGS...]
 *
 * Each scenario exits 0 when every check passed, 1 on the first failed
 * check (printed with its line), 77 when it cannot run.  Only the public
 * API (maru.h) is used, plus rm_client for RM STATS.
 */
#include <maru/maru.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rm_client.h"

#define MiB (1ull << 20)

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			exit(1);                                               \
		}                                                              \
	} while (0)

#define CHECK_RC(expr, want)                                                   \
	do {                                                                   \
		long long got_ = (long long)(expr);                            \
		if (got_ != (long long)(want)) {                               \
			fprintf(stderr, "%s:%d: %s = %lld, want %lld\n",       \
				__FILE__, __LINE__, #expr, got_,               \
				(long long)(want));                            \
			exit(1);                                               \
		}                                                              \
	} while (0)

static const char *url;

struct hopts {
	uint64_t pool;
	uint64_t chunk;
	bool eager;
	bool autoexp;
	uint64_t expand;
	bool async;
	int timeout_ms;
};

static const struct hopts defaults = {8 * MiB, MiB, false, true, 0, true, 3000};

static void log_fn(void *arg, int prio, const char *file, int line,
		   const char *func, const char *msg)
{
	fprintf(stderr, "[%s] <%d> %s\n", (const char *)arg, prio, msg);
}

static struct maru_handler *open_h(const struct hopts *o, const char *name)
{
	struct maru_config *cfg;
	struct maru_handler *h;
	char why[200];
	int rc;

	CHECK_RC(maru_config_new(&cfg), 0);
	maru_config_set_server_url(cfg, url);
	maru_config_set_pool_size(cfg, o->pool);
	maru_config_set_chunk_size(cfg, o->chunk);
	maru_config_set_eager_map(cfg, o->eager);
	maru_config_set_auto_expand(cfg, o->autoexp);
	maru_config_set_expand_size(cfg, o->expand);
	maru_config_set_use_async_rpc(cfg, o->async);
	maru_config_set_timeout_ms(cfg, o->timeout_ms);
	rc = maru_config_validate(cfg, why, sizeof(why));
	if (rc < 0) {
		fprintf(stderr, "config: %s\n", why);
		exit(1);
	}
	CHECK_RC(maru_handler_new(cfg, &h), 0);
	maru_config_free(cfg);
	maru_handler_set_log_fn(h, log_fn, (void *)name);
	if (getenv("E2E_DEBUG"))
		maru_handler_set_log_priority(h, 7);
	else
		maru_handler_set_log_priority(h, 4);
	rc = maru_handler_connect(h);
	if (rc < 0) {
		fprintf(stderr, "%s: connect %s: %s\n", name, url,
			strerror(-rc));
		exit(1);
	}
	return h;
}

static struct maru_key skey(const char *s)
{
	return maru_key_str(s, strlen(s));
}

/* the byte pattern of maru-example: xorshift64* from (seed, key) */
static uint64_t pattern_seed(uint64_t seed, const char *key)
{
	uint64_t h = 0xcbf29ce484222325ull ^ seed;

	for (; *key; key++) {
		h ^= (uint8_t)*key;
		h *= 0x100000001b3ull;
	}
	return h ? h : 1;
}

static uint64_t next_word(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545F4914F6CDD1Dull;
}

static void fill(void *dst, size_t n, uint64_t seed)
{
	uint8_t *p = dst;
	uint64_t w;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		w = next_word(&seed);
		memcpy(p + i, &w, 8);
	}
	w = next_word(&seed);
	memcpy(p + i, &w, n - i);
}

static bool same(const void *p, size_t n, uint64_t seed)
{
	uint8_t *want = malloc(n ? n : 1);
	bool eq;

	fill(want, n, seed);
	eq = !memcmp(p, want, n);
	free(want);
	return eq;
}

static uint64_t allocated(struct maru_handler *h, uint64_t rid)
{
	struct maru_region_stats st;

	CHECK_RC(maru_region_get_stats(h, rid, &st), 0);
	return st.num_allocated;
}

static uint64_t first_region(struct maru_handler *h)
{
	uint64_t id = 0;

	CHECK(maru_handler_owned_region_ids(h, &id, 1) >= 1);
	return id;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- scenarios ------------------------------------------------------------
 */

/* every single-key operation on one handler */
static int sc_basic(int argc, char **argv)
{
	struct maru_handler *h = open_h(&defaults, "basic");
	struct maru_key k = skey("basic-key"), i7 = maru_key_int(7),
			s7 = skey("7"), missing = skey("basic-missing");
	struct maru_region_handle hd;
	struct maru_server_stats ss;
	struct maru_page pg, pg2, pi, ps;
	struct maru_view v, vi, vs;
	uint64_t rid, n0;
	size_t rawlen;
	void *raw;

	rid = first_region(h);
	CHECK(maru_region_is_owned(h, rid));
	CHECK_RC(maru_handler_owned_region_ids(h, NULL, 0), 1);
	CHECK_RC(maru_region_page_count(h, rid), 8);
	CHECK_RC(maru_region_get_handle(h, rid, &hd), 0);
	CHECK(hd.length >= 8 * MiB);
	CHECK(maru_handler_chunk_size(h) == MiB);
	CHECK(maru_handler_healthcheck(h));
	printf("lease ttl %" PRIu64 " ms\n", maru_handler_lease_ttl_ms(h));

	CHECK_RC(maru_page_alloc(h, MiB + 1, &pg), -EINVAL);
	CHECK_RC(maru_page_alloc(h, 1000, &pg), 0);
	CHECK(pg.region_id == rid && pg.size == 1000);
	CHECK(pg.ptr ==
	      maru_region_get_buffer(h, rid, pg.page_index * MiB, 1000));
	CHECK(maru_region_get_buffer(h, rid, 8 * MiB, 1) == NULL);
	CHECK(maru_region_get_buffer(h, 12345, 0, 1) == NULL);
	fill(pg.ptr, pg.size, 11);
	n0 = allocated(h, rid);
	CHECK_RC(maru_kv_store(h, &k, &pg), 1);

	/* same key again from a new page: counts as success, page freed */
	CHECK_RC(maru_page_alloc(h, 10, &pg2), 0);
	CHECK_RC(allocated(h, rid), n0 + 1);
	CHECK_RC(maru_kv_store(h, &k, &pg2), 0);
	CHECK_RC(allocated(h, rid), n0);
	/* same key, same page: nothing freed */
	CHECK_RC(maru_kv_store(h, &k, &pg), 0);
	CHECK_RC(allocated(h, rid), n0);
	/* a page that is not allocated cannot be stored */
	CHECK_RC(maru_kv_store(h, &k, &pg2), -EINVAL);

	/* zero copy: the view is the very page */
	CHECK_RC(maru_kv_retrieve(h, &k, &v), 1);
	CHECK(v.ptr == pg.ptr && v.len == 1000 && v.region_id == rid &&
	      v.page_index == pg.page_index);
	CHECK(same(v.ptr, v.len, 11));
	CHECK_RC(maru_kv_retrieve(h, &missing, &v), 0);
	CHECK(v.ptr == NULL && v.len == 0);

	/* 7 and "7" are two keys */
	CHECK_RC(maru_page_alloc(h, 8, &pi), 0);
	CHECK_RC(maru_page_alloc(h, 9, &ps), 0);
	CHECK_RC(maru_kv_retrieve(h, &i7, &vi), 0);
	CHECK_RC(maru_kv_store(h, &i7, &pi), 1);
	CHECK_RC(maru_kv_exists(h, &s7), 0);
	CHECK_RC(maru_kv_store(h, &s7, &ps), 1);
	CHECK_RC(maru_kv_retrieve(h, &i7, &vi), 1);
	CHECK_RC(maru_kv_retrieve(h, &s7, &vs), 1);
	CHECK(vi.len == 8 && vs.len == 9 && vi.ptr != vs.ptr);

	CHECK_RC(maru_kv_exists(h, &k), 1);
	CHECK_RC(maru_kv_exists(h, &missing), 0);
	/* pins block delete */
	CHECK_RC(maru_kv_pin(h, &k), 1);
	CHECK_RC(maru_kv_pin(h, &missing), 0);
	CHECK_RC(maru_kv_delete(h, &k), 0);
	CHECK_RC(maru_kv_unpin(h, &k), 1);
	CHECK_RC(maru_kv_unpin(h, &k), 0);
	n0 = allocated(h, rid);
	CHECK_RC(maru_kv_delete(h, &k), 1);
	/* delete frees the page this handler stored */
	CHECK_RC(allocated(h, rid), n0 - 1);
	CHECK_RC(maru_kv_exists(h, &k), 0);
	CHECK_RC(maru_kv_delete(h, &k), 0);

	/* free: unknown region, page not allocated, double free */
	CHECK_RC(maru_page_free(h, rid + 1000, 0), -ENOENT);
	CHECK_RC(maru_page_free(h, rid, 100), -EINVAL);
	CHECK_RC(maru_page_alloc(h, 1, &pg2), 0);
	CHECK_RC(maru_page_free(h, pg2.region_id, pg2.page_index), 0);
	CHECK_RC(maru_page_free(h, pg2.region_id, pg2.page_index), -EINVAL);
	/* freeing a stored page forgets the key locally, not on the server */
	CHECK_RC(maru_page_free(h, pi.region_id, pi.page_index), 0);
	CHECK_RC(maru_kv_exists(h, &i7), 1);

	CHECK_RC(maru_handler_get_stats(h, &ss), 0);
	CHECK(ss.total_entries >= 2);
	CHECK(ss.num_allocations >= 1);
	CHECK_RC(maru_handler_get_stats_raw(h, &raw, &rawlen), 0);
	CHECK(rawlen > 10);
	maru_buf_free(raw);

	maru_handler_close(h);
	CHECK(!maru_handler_is_connected(h));
	CHECK_RC(maru_kv_exists(h, &k), -ESHUTDOWN);
	CHECK_RC(maru_page_alloc(h, 1, &pg), -ESHUTDOWN);
	CHECK_RC(maru_handler_connect(h), -ESHUTDOWN);
	CHECK(!maru_handler_healthcheck(h));
	CHECK_RC(maru_handler_owned_region_ids(h, NULL, 0), 0);
	maru_handler_free(h);
	puts("ok");
	return 0;
}

/* delete frees a page and the allocator hands it out again */
static int sc_reuse(int argc, char **argv)
{
	struct hopts o = defaults;
	struct maru_handler *h;
	struct maru_key k = skey("reuse-key");
	struct maru_page p0, p1, p2;

	o.pool = 2 * MiB;
	o.autoexp = false;
	h = open_h(&o, "reuse");
	CHECK_RC(maru_page_alloc(h, MiB, &p0), 0);
	CHECK_RC(maru_page_alloc(h, MiB, &p1), 0);
	CHECK_RC(maru_page_alloc(h, 1, &p2), -ENOSPC);
	fill(p0.ptr, p0.size, 5);
	CHECK_RC(maru_kv_store(h, &k, &p0), 1);
	CHECK_RC(maru_page_alloc(h, 1, &p2), -ENOSPC);
	CHECK_RC(maru_kv_delete(h, &k), 1);
	CHECK_RC(maru_page_alloc(h, 1, &p2), 0);
	CHECK(p2.region_id == p0.region_id && p2.page_index == p0.page_index);
	CHECK(p2.ptr == p0.ptr);
	maru_handler_free(h);
	puts("ok");
	return 0;
}

struct added {
	int calls;
	uint64_t ids[8];
	uint64_t pages[8];
	struct maru_handler *h;
	bool buffer_ok;
};

static void on_added(void *arg, uint64_t rid, uint64_t pages)
{
	struct added *a = arg;

	if (a->calls < 8) {
		a->ids[a->calls] = rid;
		a->pages[a->calls] = pages;
	}
	a->calls++;
	/* accessors work from inside the callback */
	a->buffer_ok = maru_region_get_buffer(a->h, rid, (pages - 1) * MiB,
					      MiB) != NULL &&
		       maru_region_page_count(a->h, rid) == (int64_t)pages;
}

/* auto-expansion to a second region, with the region-added callback */
static int sc_expand(int argc, char **argv)
{
	struct hopts o = defaults;
	struct maru_handler *h;
	struct maru_page p[3];
	struct maru_key k[3] = {skey("exp-0"), skey("exp-1"), skey("exp-2")};
	struct added a = {0};
	struct maru_view v;
	uint64_t ids[4];
	int i;

	o.pool = 2 * MiB;
	o.expand = 4 * MiB;
	h = open_h(&o, "expand");
	a.h = h;
	/* registration replays the existing region */
	CHECK_RC(maru_handler_set_on_region_added(h, on_added, &a), 0);
	CHECK_RC(a.calls, 1);
	CHECK(a.ids[0] == first_region(h) && a.pages[0] == 2 && a.buffer_ok);
	for (i = 0; i < 3; i++) {
		CHECK_RC(maru_page_alloc(h, 4096, &p[i]), 0);
		fill(p[i].ptr, 4096, 100 + (uint64_t)i);
		CHECK_RC(maru_kv_store(h, &k[i], &p[i]), 1);
	}
	/* the third page came from a new region of expand_size */
	CHECK_RC(a.calls, 2);
	CHECK(a.buffer_ok);
	CHECK(a.pages[1] == 4);
	CHECK(p[2].region_id == a.ids[1] && p[2].region_id != p[0].region_id);
	CHECK_RC(maru_handler_owned_region_ids(h, ids, 4), 2);
	CHECK(ids[0] == p[0].region_id && ids[1] == p[2].region_id);
	for (i = 0; i < 3; i++) {
		CHECK_RC(maru_kv_retrieve(h, &k[i], &v), 1);
		CHECK(v.ptr == p[i].ptr &&
		      same(v.ptr, 4096, 100 + (uint64_t)i));
	}
	/* unregistering stops the calls */
	CHECK_RC(maru_handler_set_on_region_added(h, NULL, NULL), 0);
	maru_handler_free(h);
	printf("ok regions %" PRIu64 " %" PRIu64 "\n", ids[0], ids[1]);
	return 0;
}

/* first writer wins across two handlers; a write through one mapping is
 * visible through the other (two distinct mmaps of the same bytes) */
static int sc_firstwriter(int argc, char **argv)
{
	struct maru_handler *a = open_h(&defaults, "A");
	struct maru_handler *b = open_h(&defaults, "B");
	struct maru_key k = skey("fw-key");
	struct maru_page pa, pb;
	struct maru_view va, vb;
	uint64_t rb = first_region(b);

	CHECK(strcmp(maru_handler_instance_id(a), maru_handler_instance_id(b)));
	CHECK_RC(maru_page_alloc(a, 64 * 1024, &pa), 0);
	CHECK_RC(maru_page_alloc(b, 64 * 1024, &pb), 0);
	fill(pa.ptr, pa.size, 1);
	fill(pb.ptr, pb.size, 2);
	CHECK_RC(maru_kv_store(a, &k, &pa), 1);
	CHECK_RC(allocated(b, rb), 1);
	CHECK_RC(maru_kv_store(b, &k, &pb), 0); /* lost: page freed */
	CHECK_RC(allocated(b, rb), 0);
	CHECK_RC(maru_kv_retrieve(b, &k, &vb), 1);
	CHECK(vb.region_id == pa.region_id && vb.len == 64 * 1024);
	CHECK(!maru_region_is_owned(b, vb.region_id));
	CHECK(same(vb.ptr, vb.len, 1));
	/* another mapping of the same bytes */
	CHECK(vb.ptr != pa.ptr);
	memset(vb.ptr, 0x5A, 4096);
	CHECK(((uint8_t *)pa.ptr)[0] == 0x5A &&
	      ((uint8_t *)pa.ptr)[4095] == 0x5A);
	((uint8_t *)pa.ptr)[100] = 0xA5;
	CHECK(((uint8_t *)vb.ptr)[100] == 0xA5);
	CHECK_RC(maru_kv_retrieve(a, &k, &va), 1);
	CHECK(va.ptr == pa.ptr);
	/* b's lazily mapped region is known to b now */
	CHECK(maru_region_page_count(b, pa.region_id) >= 8);
	maru_handler_free(b);
	maru_handler_free(a);
	puts("ok");
	return 0;
}

/* the batch forms, with hits, misses, local keys and lost races */
static int sc_batch(int argc, char **argv)
{
	struct maru_handler *h = open_h(&defaults, "H");
	struct maru_handler *g = open_h(&defaults, "G");
	struct maru_key b0 = skey("b0"), b1 = skey("b1"), b2 = maru_key_int(2),
			b3 = maru_key_uint(1ull << 63), bx = skey("bX");
	struct maru_key ks1[3], ks2[2], ks3[4], ks4[3], ks5[2];
	struct maru_page p1, pp[3], gp[2];
	struct maru_view views[4];
	bool res[4];
	uint64_t rh = first_region(h), rg = first_region(g);
	int i;

	CHECK_RC(maru_page_alloc(h, 100, &p1), 0);
	fill(p1.ptr, 100, 31);
	CHECK_RC(maru_kv_store(h, &b1, &p1), 1);

	ks1[0] = b0;
	ks1[1] = b1;
	ks1[2] = b2;
	for (i = 0; i < 3; i++) {
		CHECK_RC(maru_page_alloc(h, 1000 + (size_t)i, &pp[i]), 0);
		fill(pp[i].ptr, pp[i].size, 40 + (uint64_t)i);
	}
	CHECK_RC(allocated(h, rh), 4);
	CHECK_RC(maru_kv_batch_store(h, ks1, pp, 3, res), 3);
	CHECK(res[0] && res[1] && res[2]);
	/* b1 was already ours: its new page went back */
	CHECK_RC(allocated(h, rh), 3);

	/* from another handler: b2 loses the race (page freed), b3 is new */
	ks2[0] = b2;
	ks2[1] = b3;
	for (i = 0; i < 2; i++) {
		CHECK_RC(maru_page_alloc(g, 500, &gp[i]), 0);
		fill(gp[i].ptr, 500, 50 + (uint64_t)i);
	}
	CHECK_RC(maru_kv_batch_store(g, ks2, gp, 2, res), 2);
	CHECK(res[0] && res[1]);
	CHECK_RC(allocated(g, rg), 1);

	ks3[0] = b0;
	ks3[1] = bx;
	ks3[2] = b3;
	ks3[3] = b2;
	CHECK_RC(maru_kv_batch_retrieve(h, ks3, 4, views), 3);
	CHECK(views[0].ptr == pp[0].ptr && views[0].len == 1000);
	CHECK(views[1].ptr == NULL && views[1].len == 0);
	CHECK(views[2].len == 500 && same(views[2].ptr, 500, 51));
	CHECK(views[2].region_id == rg);
	CHECK(views[3].ptr == pp[2].ptr && same(views[3].ptr, 1002, 42));
	CHECK_RC(maru_kv_batch_exists(g, ks3, 4, res), 3);
	CHECK(res[0] && !res[1] && res[2] && res[3]);

	/* BATCH_PIN stops at the first missing key */
	ks4[0] = b0;
	ks4[1] = bx;
	ks4[2] = b1;
	CHECK_RC(maru_kv_batch_pin(g, ks4, 3, res), 1);
	CHECK(res[0] && !res[1] && !res[2]);
	CHECK_RC(maru_kv_delete(h, &b0), 0); /* pinned */
	CHECK_RC(maru_kv_delete(h, &b1), 1); /* not pinned */
	ks5[0] = b0;
	ks5[1] = b0;
	CHECK_RC(maru_kv_batch_unpin(g, ks5, 2, res), 1);
	CHECK(res[0] && !res[1]);
	CHECK_RC(maru_kv_delete(h, &b0), 1);
	/* zero-length batches need no round trip */
	CHECK_RC(maru_kv_batch_exists(h, NULL, 0, NULL), 0);
	maru_handler_free(g);
	maru_handler_free(h);
	puts("ok");
	return 0;
}

/* eager vs lazy mapping of another instance's region */
static int sc_eager(int argc, char **argv)
{
	struct hopts o = defaults;
	struct maru_handler *a = open_h(&defaults, "A");
	struct maru_handler *e, *l;
	struct maru_key k = skey("eager-key");
	struct maru_page p;
	struct maru_view v;
	uint64_t ra = first_region(a);

	CHECK_RC(maru_page_alloc(a, 128, &p), 0);
	fill(p.ptr, 128, 9);
	CHECK_RC(maru_kv_store(a, &k, &p), 1);
	o.eager = true;
	e = open_h(&o, "eager");
	o.eager = false;
	l = open_h(&o, "lazy");
	/* eager: mapped at connect, before any retrieve */
	CHECK(maru_region_get_buffer(e, ra, 0, 128) != NULL);
	CHECK(maru_region_page_count(e, ra) == 8);
	CHECK(!maru_region_is_owned(e, ra));
	/* lazy: unknown until a retrieve maps it */
	CHECK(maru_region_get_buffer(l, ra, 0, 128) == NULL);
	CHECK_RC(maru_region_page_count(l, ra), -ENOENT);
	CHECK_RC(maru_kv_retrieve(l, &k, &v), 1);
	CHECK(maru_region_get_buffer(l, ra, 0, 128) != NULL);
	CHECK(same(v.ptr, 128, 9));
	CHECK_RC(maru_kv_retrieve(e, &k, &v), 1);
	CHECK(v.ptr == maru_region_get_buffer(e, ra, p.page_index * MiB, 128));
	CHECK(same(v.ptr, 128, 9));
	maru_handler_free(l);
	maru_handler_free(e);
	maru_handler_free(a);
	puts("ok");
	return 0;
}

#define TH_KEYS 16
#define TH_SIZE (64 * 1024)

struct th_arg {
	struct maru_handler *h;
	int iters;
	int errors;
	int id;
};

static void *reader(void *p)
{
	struct th_arg *t = p;
	struct maru_view v;
	struct maru_key k;
	char name[32];
	int i, rc;

	for (i = 0; i < t->iters; i++) {
		int n = (i * 7 + t->id) % TH_KEYS;

		snprintf(name, sizeof(name), "th-%d", n);
		k = skey(name);
		rc = maru_kv_retrieve(t->h, &k, &v);
		if (rc != 1 || v.len != TH_SIZE ||
		    ((uint8_t *)v.ptr)[0] != (uint8_t)n ||
		    ((uint8_t *)v.ptr)[TH_SIZE - 1] != (uint8_t)n) {
			t->errors++;
			continue;
		}
		rc = maru_kv_exists(t->h, &k);
		if (rc != 1)
			t->errors++;
	}
	return NULL;
}

static void run_readers(struct maru_handler *h, int nthreads, int iters)
{
	pthread_t th[64];
	struct th_arg ta[64];
	int i, errors = 0;

	for (i = 0; i < nthreads; i++) {
		ta[i] = (struct th_arg){h, iters, 0, i};
		CHECK_RC(pthread_create(&th[i], NULL, reader, &ta[i]), 0);
	}
	for (i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		errors += ta[i].errors;
	}
	CHECK_RC(errors, 0);
}

/* many threads retrieving at once, pipelined and lock-step */
static int sc_threads(int argc, char **argv)
{
	int nthreads = argc > 0 ? atoi(argv[0]) : 8;
	struct hopts o = defaults;
	struct maru_handler *w, *r, *s;
	struct maru_page p;
	struct maru_key k;
	char name[32];
	int i;

	if (nthreads < 1 || nthreads > 64)
		nthreads = 8;
	o.pool = 2 * MiB;
	o.chunk = TH_SIZE;
	w = open_h(&o, "writer");
	for (i = 0; i < TH_KEYS; i++) {
		snprintf(name, sizeof(name), "th-%d", i);
		k = skey(name);
		CHECK_RC(maru_page_alloc(w, TH_SIZE, &p), 0);
		memset(p.ptr, i, TH_SIZE);
		CHECK_RC(maru_kv_store(w, &k, &p), 1);
	}
	r = open_h(&o, "async");
	run_readers(r, nthreads, 300);
	o.async = false;
	s = open_h(&o, "sync");
	run_readers(s, nthreads, 100);
	maru_handler_free(s);
	maru_handler_free(r);
	maru_handler_free(w);
	puts("ok");
	return 0;
}

static void wait_line(void)
{
	char line[64];

	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		exit(1);
}

/* timeouts once the server is gone: errors, never a hang */
static int sc_timeout(int argc, char **argv)
{
	struct hopts o = defaults;
	struct maru_handler *a, *s;
	struct maru_key k = skey("to-key"), ks[2];
	struct maru_page p;
	struct maru_view v;
	bool res[2];
	double t0;
	uint64_t rid;
	int i, rc;

	o.timeout_ms = 500;
	a = open_h(&o, "async");
	o.async = false;
	s = open_h(&o, "sync");
	rid = first_region(a);
	CHECK_RC(maru_page_alloc(a, 10, &p), 0);
	wait_line(); /* the test stops maru-server now */

	t0 = now_s();
	CHECK_RC(maru_kv_retrieve(a, &k, &v), -ETIMEDOUT);
	CHECK_RC(maru_kv_exists(a, &k), -ETIMEDOUT);
	/* -EKEYEXPIRED once the dropped connection was noticed (ownership.c) */
	rc = maru_kv_store(a, &k, &p);
	CHECK(rc == -ETIMEDOUT || rc == -EKEYEXPIRED);
	/* a failed store frees its page */
	CHECK_RC(allocated(a, rid), 0);
	ks[0] = k;
	ks[1] = k;
	CHECK_RC(maru_kv_batch_exists(a, ks, 2, res), -ETIMEDOUT);
	CHECK(!res[0] && !res[1]);
	CHECK(!maru_handler_healthcheck(a));
	/* a dead REQ socket is replaced after each timeout */
	for (i = 0; i < 3; i++)
		CHECK_RC(maru_kv_retrieve(s, &k, &v), -ETIMEDOUT);
	/* about 10 timeouts of 0.5 s; the bound only catches a hang, with
	 * room for a loaded machine */
	CHECK(now_s() - t0 < 10 * 0.5 + 10.0);
	/* close does not hang either (RETURN_ALLOC times out) */
	t0 = now_s();
	maru_handler_free(s);
	maru_handler_free(a);
	CHECK(now_s() - t0 < 10.0);
	puts("ok");
	return 0;
}

/* connect, optionally store a key, print the region, wait to be killed */
static int sc_hold(int argc, char **argv)
{
	struct maru_handler *h = open_h(&defaults, "hold");
	struct maru_page p;
	struct maru_key k;
	char line[64];

	if (argc > 0) {
		k = skey(argv[0]);
		CHECK_RC(maru_page_alloc(h, 4096, &p), 0);
		fill(p.ptr, 4096, 3);
		CHECK_RC(maru_kv_store(h, &k, &p), 1);
	}
	printf("ready region %" PRIu64 " lease_ms %" PRIu64 "\n",
	       first_region(h), maru_handler_lease_ttl_ms(h));
	fflush(stdout);
	/* until stdin closes (or SIGKILL) */
	while (fgets(line, sizeof(line), stdin))
		;
	maru_handler_free(h);
	return 0;
}

/*
 * lease lapse: while the server is stopped (SIGSTOP by the test) writes
 * stop after 3/4 TTL with -EKEYEXPIRED, and resume after it continues
 */
static int sc_leasestop(int argc, char **argv)
{
	struct maru_handler *h = open_h(&defaults, "lease");
	uint64_t ttl = maru_handler_lease_ttl_ms(h);
	struct maru_page p;
	int i, rc = 0;

	if (!ttl) {
		maru_handler_free(h);
		return 77;
	}
	CHECK_RC(maru_page_alloc(h, 1, &p), 0);
	CHECK_RC(maru_page_free(h, p.region_id, p.page_index), 0);
	wait_line(); /* the server is stopped now */
	usleep((useconds_t)(ttl * 1000));
	CHECK_RC(maru_page_alloc(h, 1, &p), -EKEYEXPIRED);
	wait_line(); /* the server runs again */
	/*
	 * Writes resume once a renewal succeeds (the lease thread's, or the
	 * write's own).  How soon depends on how fast the resumed server and
	 * this process get the CPU: poll for up to 20 s, never decide after
	 * one fixed sleep.
	 */
	for (i = 0; i < 200; i++) {
		rc = maru_page_alloc(h, 1, &p);
		if (rc != -EKEYEXPIRED && rc != -ETIMEDOUT)
			break;
		usleep(100000);
	}
	CHECK_RC(rc, 0);
	maru_handler_free(h);
	puts("ok");
	return 0;
}

/*
 * loss of ownership (docs/c-api.md): between the two lines the test
 * restarts maru-server and gives this handler's region to another client.
 * The region must get fenced in the background; a write through the old
 * pointer must not fault; its page is never registered (-ESTALE), before
 * and after the recovery; the next alloc lands in a new region.
 */
static int sc_fence(int argc, char **argv)
{
	struct maru_key ko = skey("fence-old"), kn = skey("fence-new");
	struct maru_region_handle rh;
	struct hopts o = defaults;
	struct maru_handler *h;
	struct maru_page old, p;
	struct maru_view v;
	char line[64];
	uint64_t rid;
	int i;

	o.pool = 2 * MiB;
	h = open_h(&o, "fence");
	rid = first_region(h);
	CHECK_RC(maru_region_get_handle(h, rid, &rh), 0);
	CHECK_RC(maru_page_alloc(h, MiB, &old), 0);
	printf("ready %" PRIu64 " %" PRIu64 "\n", rh.offset, rh.length);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (i = 0; i < 2000 && maru_region_get_buffer(h, rid, 0, 1); i++)
		usleep(10000);
	CHECK(!maru_region_get_buffer(h, rid, 0, 1));
	memset(old.ptr, 0xee, MiB);
	CHECK(((volatile uint8_t *)old.ptr)[MiB - 1] == 0xee);
	CHECK_RC(maru_kv_store(h, &ko, &old), -ESTALE);
	CHECK_RC(maru_page_alloc(h, MiB, &p), 0);
	CHECK(p.region_id != rid);
	CHECK(!maru_region_is_owned(h, rid));
	fill(p.ptr, MiB, 5);
	CHECK_RC(maru_kv_store(h, &kn, &p), 1);
	CHECK_RC(maru_kv_retrieve(h, &kn, &v), 1);
	CHECK(v.region_id == p.region_id && v.ptr == p.ptr);
	/* the old page went with its region */
	CHECK_RC(maru_kv_store(h, &ko, &old), -ESTALE);
	CHECK_RC(maru_page_free(h, old.region_id, old.page_index), 0);
	CHECK_RC(maru_kv_retrieve(h, &ko, &v), 0);
	maru_handler_free(h);
	puts("ok");
	return 0;
}

/* enable_stats: per-op entries reach the server's stats_manager */
static int sc_stats(int argc, char **argv)
{
	struct maru_config *cfg;
	struct maru_handler *h;
	struct maru_key k = skey("stats-key");
	const char *id;
	struct maru_page p;
	struct maru_view v;
	size_t len;
	void *raw;
	int i;

	CHECK_RC(maru_config_new(&cfg), 0);
	maru_config_set_server_url(cfg, url);
	maru_config_set_pool_size(cfg, 4 * MiB);
	maru_config_set_eager_map(cfg, false);
	maru_config_set_enable_stats(cfg, true);
	CHECK_RC(maru_handler_new(cfg, &h), 0);
	maru_config_free(cfg);
	CHECK_RC(maru_handler_connect(h), 0);
	id = maru_handler_instance_id(h);
	CHECK_RC(maru_page_alloc(h, 100, &p), 0);
	CHECK_RC(maru_kv_store(h, &k, &p), 1);
	for (i = 0; i < 5; i++)
		CHECK_RC(maru_kv_retrieve(h, &k, &v), 1);
	/* the reporter flushes every second (up to 30 s on a loaded machine) */
	for (i = 0; i < 150; i++) {
		usleep(200000);
		CHECK_RC(maru_handler_get_stats_raw(h, &raw, &len), 0);
		if (memmem(raw, len, id, strlen(id)) &&
		    memmem(raw, len, "retrieve", 8)) {
			maru_buf_free(raw);
			break;
		}
		maru_buf_free(raw);
	}
	CHECK(i < 150);
	maru_handler_free(h);
	puts("ok");
	return 0;
}

/* overwrite a stored value in place with maru-example's pattern */
static int sc_xwrite(int argc, char **argv)
{
	struct maru_handler *h;
	struct maru_key k;
	struct maru_view v;

	if (argc < 2)
		return 77;
	h = open_h(&defaults, "xwrite");
	k = skey(argv[0]);
	CHECK_RC(maru_kv_retrieve(h, &k, &v), 1);
	fill(v.ptr, v.len, pattern_seed(strtoull(argv[1], NULL, 0), argv[0]));
	maru_handler_free(h);
	puts("ok");
	return 0;
}

static int sum_pool(const struct rm_pool_stat *s, void *arg)
{
	uint64_t *t = arg;

	t[0] += s->total_size;
	t[1] += s->free_size;
	return 0;
}

/* RM STATS: "<total> <free>" summed over the pools (URL = host:port) */
static int sc_rmstats(int argc, char **argv)
{
	struct rm_client c;
	uint64_t t[2] = {0, 0};

	CHECK_RC(rm_client_init(&c, url, NULL, 3000), 0);
	CHECK_RC(rm_client_stats(&c, sum_pool, t), 0);
	rm_client_destroy(&c);
	printf("%" PRIu64 " %" PRIu64 "\n", t[0], t[1]);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int argc, char **argv);
	} sc[] = {
		{"basic", sc_basic},	 {"reuse", sc_reuse},
		{"expand", sc_expand},	 {"firstwriter", sc_firstwriter},
		{"batch", sc_batch},	 {"eager", sc_eager},
		{"threads", sc_threads}, {"timeout", sc_timeout},
		{"hold", sc_hold},	 {"xwrite", sc_xwrite},
		{"rmstats", sc_rmstats}, {"leasestop", sc_leasestop},
		{"stats", sc_stats},	 {"fence", sc_fence},
	};
	size_t i;

	if (argc < 3) {
		fprintf(stderr, "usage: %s SCENARIO URL [ARGS]\n", argv[0]);
		return 2;
	}
	url = argv[2];
	for (i = 0; i < sizeof(sc) / sizeof(sc[0]); i++)
		if (!strcmp(argv[1], sc[i].name))
			return sc[i].fn(argc - 3, argv + 3);
	fprintf(stderr, "unknown scenario %s\n", argv[1]);
	return 2;
}
