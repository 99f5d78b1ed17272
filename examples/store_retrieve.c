/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_retrieve.c - maru-example: store a chunk in one process, retrieve
 * and verify it in another (or on another host attached to the same pool)
 *
 *   maru-example store    --server tcp://H:P --key K --size N [--pattern S]
 *   maru-example retrieve --server tcp://H:P --key K [--size N] [--pattern S]
 *   maru-example delete   --server tcp://H:P --key K
 *
 * store allocates a page, fills N bytes in place with a pattern derived from
 * the seed and the key, registers the key and exits (its region stays alive
 * on the server while the key references it).  retrieve looks the key up,
 * maps the region, and checks every byte of the view against the same
 * pattern -- no copy is made.  Exit status: 0 verified/done, 1 bytes differ
 * or wrong length, 2 key not found, 3 any other error (message on stderr).
 *
 * Options: --int-key (K is a decimal integer key instead of a string),
 * --pool-size, --chunk-size (K/M/G suffixes; default 64M and 1M),
 * --timeout-ms, --rm ADDR (fallback RM address), --sync (REQ socket),
 * --verbose (MARU_LOG-style debug log to stderr).
 */
#include <maru/maru.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opts {
	const char *cmd;
	const char *server;
	const char *key;
	const char *rm;
	bool int_key;
	bool sync;
	bool verbose;
	uint64_t size;
	uint64_t seed;
	uint64_t pool_size;
	uint64_t chunk_size;
	int timeout_ms;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: maru-example store|retrieve|delete --server tcp://H:P "
		"--key K [--size N]\n"
		"       [--pattern SEED] [--int-key] [--pool-size N] "
		"[--chunk-size N]\n"
		"       [--timeout-ms MS] [--rm HOST:PORT] [--sync] "
		"[--verbose]\n");
}

/* "4096", "64K", "1M", "2G" */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'm':
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'g':
	case 'G':
		v <<= 30;
		end++;
		break;
	}
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* the byte stream for (seed, key): xorshift64* */
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

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t w;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		w = next_word(&seed);
		memcpy(p + i, &w, 8);
	}
	w = next_word(&seed);
	memcpy(p + i, &w, n - i);
}

/* Return: the offset of the first differing byte, or n */
static size_t verify(const uint8_t *p, size_t n, uint64_t seed)
{
	uint8_t w[8];
	size_t i, j;

	for (i = 0; i < n; i += 8) {
		uint64_t v = next_word(&seed);

		memcpy(w, &v, 8);
		for (j = 0; j < 8 && i + j < n; j++)
			if (p[i + j] != w[j])
				return i + j;
	}
	return n;
}

static void log_stderr(void *arg, int prio, const char *file, int line,
		       const char *func, const char *msg)
{
	fprintf(stderr, "maru-example: [%d] %s\n", prio, msg);
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{"server", required_argument, NULL, 's'},
		{"key", required_argument, NULL, 'k'},
		{"size", required_argument, NULL, 'n'},
		{"pattern", required_argument, NULL, 'p'},
		{"int-key", no_argument, NULL, 'i'},
		{"pool-size", required_argument, NULL, 'P'},
		{"chunk-size", required_argument, NULL, 'C'},
		{"timeout-ms", required_argument, NULL, 't'},
		{"rm", required_argument, NULL, 'r'},
		{"sync", no_argument, NULL, 'S'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	memset(o, 0, sizeof(*o));
	o->server = "tcp://127.0.0.1:5555";
	o->seed = 1;
	o->pool_size = 64ull << 20;
	o->chunk_size = 1ull << 20;
	o->timeout_ms = 5000;
	while ((c = getopt_long(argc, argv, "s:k:n:p:ih", longopts, NULL)) !=
	       -1) {
		switch (c) {
		case 's':
			o->server = optarg;
			break;
		case 'k':
			o->key = optarg;
			break;
		case 'n':
			if (parse_size(optarg, &o->size))
				return -1;
			break;
		case 'p':
			o->seed = strtoull(optarg, NULL, 0);
			break;
		case 'i':
			o->int_key = true;
			break;
		case 'P':
			if (parse_size(optarg, &o->pool_size))
				return -1;
			break;
		case 'C':
			if (parse_size(optarg, &o->chunk_size))
				return -1;
			break;
		case 't':
			o->timeout_ms = atoi(optarg);
			break;
		case 'r':
			o->rm = optarg;
			break;
		case 'S':
			o->sync = true;
			break;
		case 'v':
			o->verbose = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -1;
		}
	}
	if (optind != argc - 1 || !o->key)
		return -1;
	o->cmd = argv[optind];
	return 0;
}

int main(int argc, char **argv)
{
	struct maru_config *cfg = NULL;
	struct maru_handler *h = NULL;
	struct maru_view view;
	struct maru_page page;
	struct maru_key key;
	struct opts o;
	char why[256];
	uint64_t seed;
	size_t bad;
	int rc, status = 3;

	if (parse_args(argc, argv, &o) < 0) {
		usage(stderr);
		return 3;
	}
	if (o.int_key)
		key = maru_key_int(strtoll(o.key, NULL, 10));
	else
		key = maru_key_str(o.key, strlen(o.key));
	seed = pattern_seed(o.seed, o.key);

	if (maru_config_new(&cfg) < 0)
		goto out;
	maru_config_set_server_url(cfg, o.server);
	maru_config_set_pool_size(cfg, o.pool_size);
	maru_config_set_chunk_size(cfg, o.chunk_size);
	maru_config_set_timeout_ms(cfg, o.timeout_ms);
	maru_config_set_use_async_rpc(cfg, !o.sync);
	/* a one-shot tool has no use for other instances' regions */
	maru_config_set_eager_map(cfg, false);
	if (o.rm)
		maru_config_set_rm_address(cfg, o.rm);
	if (maru_config_validate(cfg, why, sizeof(why)) < 0) {
		fprintf(stderr, "maru-example: %s\n", why);
		goto out;
	}
	rc = maru_handler_new(cfg, &h);
	if (rc < 0) {
		fprintf(stderr, "maru-example: handler: %s\n", strerror(-rc));
		goto out;
	}
	if (o.verbose) {
		maru_handler_set_log_fn(h, log_stderr, NULL);
		maru_handler_set_log_priority(h, 7);
	}
	rc = maru_handler_connect(h);
	if (rc < 0) {
		/* the cause in one line, e.g. "tcp://...: connection refused"
		 */
		fprintf(stderr, "maru-example: %s\n",
			maru_handler_connect_error(h));
		goto out;
	}

	if (!strcmp(o.cmd, "store")) {
		if (!o.size)
			o.size = o.chunk_size;
		rc = maru_page_alloc(h, o.size, &page);
		if (rc < 0) {
			fprintf(stderr, "maru-example: alloc: %s\n",
				strerror(-rc));
			goto out;
		}
		/* write the value straight into the shared page */
		fill(page.ptr, page.size, seed);
		rc = maru_kv_store(h, &key, &page);
		if (rc < 0) {
			fprintf(stderr, "maru-example: store: %s\n",
				strerror(-rc));
			goto out;
		}
		printf("%s key %s: region %" PRIu64 " page %" PRIu64
		       " size %zu\n",
		       rc == 1 ? "stored" : "exists", o.key, page.region_id,
		       page.page_index, page.size);
		status = 0;
	} else if (!strcmp(o.cmd, "retrieve")) {
		rc = maru_kv_retrieve(h, &key, &view);
		if (rc < 0) {
			fprintf(stderr, "maru-example: retrieve: %s\n",
				strerror(-rc));
			goto out;
		}
		if (rc == 0) {
			fprintf(stderr, "maru-example: key %s not found\n",
				o.key);
			status = 2;
			goto out;
		}
		status = 1;
		if (o.size && view.len != o.size) {
			fprintf(stderr,
				"maru-example: key %s: %zu bytes, expected "
				"%" PRIu64 "\n",
				o.key, view.len, o.size);
			goto out;
		}
		bad = verify(view.ptr, view.len, seed);
		if (bad != view.len) {
			fprintf(stderr,
				"maru-example: key %s: byte %zu differs\n",
				o.key, bad);
			goto out;
		}
		printf("verified key %s: region %" PRIu64 " page %" PRIu64
		       " size %zu\n",
		       o.key, view.region_id, view.page_index, view.len);
		status = 0;
	} else if (!strcmp(o.cmd, "delete")) {
		rc = maru_kv_delete(h, &key);
		if (rc < 0) {
			fprintf(stderr, "maru-example: delete: %s\n",
				strerror(-rc));
			goto out;
		}
		printf("%s key %s\n", rc ? "deleted" : "not deleted", o.key);
		status = rc ? 0 : 2;
	} else {
		usage(stderr);
	}
out:
	maru_handler_free(h);
	maru_config_free(cfg);
	return status;
}
