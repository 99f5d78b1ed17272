/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hwhold.c - maru-hwhold, a libmaru client for the hardware tests
 *
 * The two-host test needs a client that stores a chunk through libmaru and
 * then stays alive, holding its region and its lease, until the test kills
 * it with SIGKILL (a crashed worker).  It also retrieves and verifies chunks
 * through libmaru, using the seeded pattern of pattern.h so that
 * maru-hwprobe can check the same bytes on the raw device.
 *
 *   maru-hwhold [--server URL] [--pool-size B] [--chunk-size B] [--instance ID]
 *               store KEY SIZE SEED [--hold]
 *   maru-hwhold [--server URL] retrieve KEY SIZE SEED
 *   maru-hwhold [--server URL] [--pool-size B] [--instance ID] idle
 *   maru-hwhold [--server URL] index-check KEY SIZE SEED
 *   maru-hwhold [--server URL] index-gone KEY
 *
 * store prints "stored key=K region=R page=P offset=O instance=I
 * lease_ttl_ms=T"; with --hold it then prints "holding pid=N" and waits
 * for a signal (SIGTERM/SIGINT: clean close, exit 0).  retrieve prints
 * "retrieved key=K region=R offset=O length=L result=ok" when the bytes
 * match.  idle connects (so the handler owns one empty region), prints
 * "idle instance=I region=R lease_ttl_ms=T" and "holding pid=N", and waits
 * like store --hold.  index-check retrieves ten times and prints "index
 * attached=A noncoherent=N local_hits=H local_misses=M fallbacks=F
 * result=ok" when the shared index answered; index-gone says
 * whether the index itself reports KEY absent.  Exit: 0 ok, 1 failure, 2
 * usage, 3 key not found, bytes differ, or not answered by the index.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <maru/maru.h>

#include "pattern.h"

static int usage(void)
{
	fprintf(stderr,
		"usage: maru-hwhold [--server URL] [--pool-size B] "
		"[--chunk-size B]\n"
		"                   [--instance ID] store KEY SIZE SEED "
		"[--hold]\n"
		"       maru-hwhold [--server URL] retrieve KEY SIZE SEED\n"
		"       maru-hwhold [--server URL] [--pool-size B] [--instance "
		"ID] idle\n"
		"       maru-hwhold [--server URL] index-check KEY SIZE SEED\n"
		"       maru-hwhold [--server URL] index-gone KEY\n");
	return 2;
}

static void log_stderr(void *arg, int prio, const char *file, int line,
		       const char *func, const char *msg)
{
	fprintf(stderr, "libmaru<%d> %s: %s\n", prio, func, msg);
}

/* wait for the end: SIGKILL (the test's crash) or a clean stop */
static void hold_until_signal(void)
{
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	printf("holding pid=%d\n", (int)getpid());
	sigwait(&set, &sig);
}

static int do_idle(struct maru_handler *h)
{
	uint64_t id = 0;

	if (maru_handler_owned_region_ids(h, &id, 1) < 1) {
		fprintf(stderr, "maru-hwhold: connected without a region\n");
		return 1;
	}
	printf("idle instance=%s region=%llu lease_ttl_ms=%llu\n",
	       maru_handler_instance_id(h), (unsigned long long)id,
	       (unsigned long long)maru_handler_lease_ttl_ms(h));
	hold_until_signal();
	return 0;
}

static int do_store(struct maru_handler *h, const char *key, size_t size,
		    uint64_t seed, bool hold)
{
	struct maru_key k = maru_key_str(key, strlen(key));
	struct maru_page page;
	uint8_t *p;
	size_t i;
	int rc;

	rc = maru_page_alloc(h, size, &page);
	if (rc < 0) {
		fprintf(stderr, "maru-hwhold: page alloc: %s\n", strerror(-rc));
		return 1;
	}
	p = page.ptr;
	for (i = 0; i < size; i++)
		p[i] = pattern_byte(seed, i);
	rc = maru_kv_store(h, &k, &page);
	if (rc < 0) {
		fprintf(stderr, "maru-hwhold: store %s: %s\n", key,
			strerror(-rc));
		return 1;
	}
	printf("stored key=%s region=%llu page=%llu offset=%llu instance=%s"
	       " lease_ttl_ms=%llu\n",
	       key, (unsigned long long)page.region_id,
	       (unsigned long long)page.page_index,
	       (unsigned long long)(page.page_index *
				    maru_handler_chunk_size(h)),
	       maru_handler_instance_id(h),
	       (unsigned long long)maru_handler_lease_ttl_ms(h));
	if (hold)
		hold_until_signal();
	return 0;
}

static int do_retrieve(struct maru_handler *h, const char *key, size_t size,
		       uint64_t seed)
{
	struct maru_key k = maru_key_str(key, strlen(key));
	struct maru_view v;
	const uint8_t *p;
	size_t i;
	int rc;

	rc = maru_kv_retrieve(h, &k, &v);
	if (rc < 0) {
		fprintf(stderr, "maru-hwhold: retrieve %s: %s\n", key,
			strerror(-rc));
		return 1;
	}
	if (rc == 0) {
		printf("retrieved key=%s result=missing\n", key);
		return 3;
	}
	p = v.ptr;
	if (v.len != size) {
		printf("retrieved key=%s length=%zu result=badlength "
		       "want=%zu\n",
		       key, v.len, size);
		return 3;
	}
	for (i = 0; i < size; i++) {
		if (p[i] != pattern_byte(seed, i)) {
			printf("retrieved key=%s result=mismatch at=%zu\n", key,
			       i);
			return 3;
		}
	}
	printf("retrieved key=%s region=%llu offset=%llu length=%zu "
	       "result=ok\n",
	       key, (unsigned long long)v.region_id,
	       (unsigned long long)v.offset, v.len);
	return 0;
}

static void print_index(struct maru_handler *h, const char *result)
{
	struct maru_index_stats st;

	maru_handler_index_stats(h, &st);
	printf("index attached=%d noncoherent=%d local_hits=%llu "
	       "local_misses=%llu fallbacks=%llu result=%s\n",
	       st.attached, st.noncoherent, (unsigned long long)st.local_hits,
	       (unsigned long long)st.local_misses,
	       (unsigned long long)st.fallbacks, result);
}

/*
 * index-check: the chunk is found and verified through the
 * shared index with no request -- the first retrieve may ask the server
 * (the region is not mapped yet), the next ones must not.  Exit 0 when
 * attached, every read verified, and some answered locally.
 */
static int do_index_check(struct maru_handler *h, const char *key, size_t size,
			  uint64_t seed)
{
	struct maru_index_stats st;
	int i, rc;

	for (i = 0; i < 10; i++) {
		rc = do_retrieve(h, key, size, seed);
		if (rc)
			return rc;
	}
	maru_handler_index_stats(h, &st);
	print_index(h, st.attached && st.local_hits >= 9 ? "ok" : "no-index");
	return st.attached && st.local_hits >= 9 ? 0 : 3;
}

/* index-gone: the key is absent, and the index says so itself */
static int do_index_gone(struct maru_handler *h, const char *key)
{
	struct maru_key k = maru_key_str(key, strlen(key));
	struct maru_index_stats st;
	struct maru_view v;
	int rc;

	rc = maru_kv_retrieve(h, &k, &v);
	maru_handler_index_stats(h, &st);
	print_index(h, rc == 0 && st.local_misses ? "ok" : "not-a-local-miss");
	return rc == 0 && st.local_misses ? 0 : 3;
}

int main(int argc, char **argv)
{
	struct maru_config *cfg = NULL;
	struct maru_handler *h = NULL;
	unsigned long long size, seed;
	const char *cmd, *key;
	int i, rc = 2;

	if (maru_config_new(&cfg) < 0)
		return 1;
	maru_config_set_server_url(cfg, "tcp://127.0.0.1:5555");
	maru_config_set_pool_size(cfg, 4u << 20);
	for (i = 1; i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
		if (!strcmp(argv[i], "--server"))
			rc = maru_config_set_server_url(cfg, argv[i + 1]);
		else if (!strcmp(argv[i], "--pool-size"))
			rc = maru_config_set_pool_size(
				cfg, strtoull(argv[i + 1], NULL, 0));
		else if (!strcmp(argv[i], "--chunk-size"))
			rc = maru_config_set_chunk_size(
				cfg, strtoull(argv[i + 1], NULL, 0));
		else if (!strcmp(argv[i], "--instance"))
			rc = maru_config_set_instance_id(cfg, argv[i + 1]);
		else
			rc = -EINVAL;
		if (rc < 0)
			goto out_usage;
	}
	if (argc - i < 1 ||
	    (strcmp(argv[i], "idle") && strcmp(argv[i], "index-gone") &&
	     argc - i < 4) ||
	    (!strcmp(argv[i], "index-gone") && argc - i < 2))
		goto out_usage;
	cmd = argv[i];
	key = argc - i >= 2 ? argv[i + 1] : "";
	size = argc - i >= 4 ? strtoull(argv[i + 2], NULL, 0) : 0;
	seed = argc - i >= 4 ? strtoull(argv[i + 3], NULL, 0) : 0;
	setvbuf(stdout, NULL, _IOLBF, 0);

	rc = maru_handler_new(cfg, &h);
	if (rc < 0) {
		fprintf(stderr, "maru-hwhold: handler: %s\n", strerror(-rc));
		rc = 1;
		goto out_cfg;
	}
	maru_handler_set_log_fn(h, log_stderr, NULL);
	rc = maru_handler_connect(h);
	if (rc < 0) {
		fprintf(stderr, "maru-hwhold: connect: %s\n", strerror(-rc));
		rc = 1;
		goto out_handler;
	}
	if (!strcmp(cmd, "store"))
		rc = do_store(h, key, size, seed,
			      argc - i > 4 && !strcmp(argv[i + 4], "--hold"));
	else if (!strcmp(cmd, "retrieve"))
		rc = do_retrieve(h, key, size, seed);
	else if (!strcmp(cmd, "index-check"))
		rc = do_index_check(h, key, size, seed);
	else if (!strcmp(cmd, "index-gone"))
		rc = do_index_gone(h, key);
	else if (!strcmp(cmd, "idle"))
		rc = do_idle(h);
	else
		rc = usage();
	maru_handler_close(h);
out_handler:
	maru_handler_free(h);
out_cfg:
	maru_config_free(cfg);
	return rc;
out_usage:
	maru_config_free(cfg);
	return usage();
}
