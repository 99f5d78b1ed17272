/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_bench.c - maru-client-bench: the C side of the client library's
 * benchmark
 *
 * One subcommand per measurement; bench/run_client_bench.sh starts the
 * daemons and Redis, pins processes with taskset and runs them all in one
 * go.  Every subcommand prints one line "RESULT key=value ..." that the
 * script collects.
 *
 *   memcpy   --size S [--region R] [--ms T]
 *            plain memcpy into a pre-faulted MAP_SHARED mapping of a
 *            /dev/shm file (the kind of mapping the emulated pool is), going
 *            through R bytes so the destination is cold: GB/s
 *   store    --server URL --size S [--batch B] [--ms T] [--region R]
 *            alloc + write (memcpy) + register, single maru_kv_store or
 *            maru_kv_batch_store of B; keys deleted (untimed) to recycle
 *            pages: GB/s, and where the time went per page (alloc, copy,
 *            register).  Every round of stores is followed by a memcpy of
 *            as many chunks into a floor mapping as in "memcpy", so the
 *            line also carries the floor measured in the same process
 *            moments apart and the median over rounds of store/memcpy
 *   prepare  --server URL --size S --keys K --prefix P
 *            store K keys for the readers, then exit (the keys keep the
 *            region alive on the server)
 *   retrieve --server URL --size S --keys K --prefix P [--iters N] [--read]
 *            latency until the caller holds a usable view (p50/p99 µs);
 *            with --read, plus reading every byte of it
 *   raw      --server URL --prefix P [--iters N] [--dealer]
 *            one bare LOOKUP_KV round trip on a raw ZeroMQ socket, the
 *            floor that retrieve is compared with
 *   zmtp     --server URL --prefix P [--iters N]
 *            the same round trip with ZMTP spoken by hand in the calling
 *            thread (no libzmq in the client): the floor without the
 *            client-side I/O-thread hop
 *   echo     --port N [--busy-poll-us U]
 *            a TCP echo server on 127.0.0.1:N (one connection at a time;
 *            with U, it looks for the next message for U µs before it
 *            sleeps, like maru-server --busy-poll-us)
 *   store ... --echo N
 *            the store loop with the register replaced by a ping-pong of
 *            the same request bytes with that echo server: the floor of
 *            any design that spends one round trip per store
 *   rtt      --server URL --size S --prefix P [--iters N]
 *            in one process, alternating blocks of 100: maru_kv_exists,
 *            alloc + maru_kv_store of an unwritten page, a bare LOOKUP_KV
 *            on a raw DEALER: p50/p99 of each
 *   redis    --port N --size S [--iters N] [--read]
 *            Redis GET of a value of the same size with hiredis (the reply
 *            is a copy in client memory, i.e. a usable view)
 *   scale    --server URL --size S --keys K --prefix P --procs N [--ms T]
 *            N reader processes retrieving and reading the same keys:
 *            aggregate retrievals/s and GB/s
 *
 * The daemons are expected to be running; see run_client_bench.sh.
 */
#include <maru/maru.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "buf.h"
#include "mds_proto.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct opts {
	const char *cmd;
	const char *server;
	const char *prefix;
	uint64_t size;
	uint64_t region;
	uint64_t pool;
	int keys;
	int iters;
	int batch;
	int procs;
	int ms;
	int port;
	bool read;
	bool dealer;
	bool zmtp;   /* store: register over the hand-written ZMTP socket */
	int echo;    /* store: ping-pong with the echo server on this port */
	int busy_us; /* echo: look this long before sleeping */
};

static struct opts o;

static void die(const char *what, int rc)
{
	fprintf(stderr, "maru-client-bench: %s: %s\n", what,
		strerror(rc < 0 ? -rc : rc));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* sort @v and print p50/p99/mean in microseconds */
static void report_lat(const char *what, uint64_t *v, int n)
{
	double sum = 0;
	int i;

	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	for (i = 0; i < n; i++)
		sum += (double)v[i];
	printf("RESULT what=%s size=%" PRIu64 " n=%d p50_us=%.2f p99_us=%.2f "
	       "mean_us=%.2f\n",
	       what, o.size, n, (double)v[n / 2] / 1e3,
	       (double)v[(int)((double)n * 0.99)] / 1e3, sum / n / 1e3);
}

/* read every byte (8 at a time); the sum keeps the compiler honest */
static uint64_t read_all(const void *p, size_t n)
{
	const uint64_t *w = p;
	uint64_t s = 0;
	size_t i;

	for (i = 0; i < n / 8; i++)
		s += w[i];
	return s;
}

static volatile uint64_t sink;

static struct maru_handler *connect_h(uint64_t pool, bool eager)
{
	struct maru_config *cfg;
	struct maru_handler *h;
	int rc;

	if (maru_config_new(&cfg) < 0)
		die("config", ENOMEM);
	maru_config_set_server_url(cfg, o.server);
	maru_config_set_chunk_size(cfg, o.size);
	maru_config_set_pool_size(cfg, pool < o.size ? o.size : pool);
	maru_config_set_eager_map(cfg, eager);
	maru_config_set_timeout_ms(cfg, 10000);
	/* MARU_CURVE_*: the same measurements over CURVE (run_curve_bench.sh)
	 */
	if (maru_config_apply_env(cfg, NULL, 0) < 0)
		die("environment", EINVAL);
	rc = maru_handler_new(cfg, &h);
	maru_config_free(cfg);
	if (rc < 0)
		die("handler", rc);
	rc = maru_handler_connect(h);
	if (rc < 0)
		die("connect", rc);
	return h;
}

static void *source_buffer(void)
{
	uint8_t *src = aligned_alloc(4096, o.size);
	uint64_t i;

	if (!src)
		die("malloc", ENOMEM);
	for (i = 0; i < o.size; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	return src;
}

/* ---- memcpy baseline ------------------------------------------------------
 */

/*
 * The memcpy floor, for measuring in the same process as a store: a
 * pre-faulted MAP_SHARED mapping of a /dev/shm file (the kind of mapping
 * the emulated pool is), larger than the caches so the destination is cold.
 */
struct floor_map {
	uint8_t *dst;
	uint64_t region; /* a whole number of chunks */
	uint64_t off;
};

static void floor_open(struct floor_map *f, const void *src)
{
	char path[64];
	uint64_t off;
	int fd;

	f->region = o.region - o.region % o.size;
	if (f->region < o.size)
		f->region = o.size;
	snprintf(path, sizeof(path), "/dev/shm/maru-bench-memcpy-%d", getpid());
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		die(path, errno);
	unlink(path);
	if (ftruncate(fd, (off_t)f->region) < 0)
		die("ftruncate", errno);
	f->dst = mmap(NULL, f->region, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		      0);
	close(fd);
	if (f->dst == MAP_FAILED)
		die("mmap", errno);
	/* pre-faulted like the pool's pages (populate + a read per page, as
	 * libmaru does), so only the copy is timed */
	madvise(f->dst, f->region, MADV_POPULATE_WRITE);
	for (off = 0; off < f->region; off += 4096)
		sink += f->dst[off];
	/* two untimed passes: on this kind of VM the first writes to fresh
	 * pages stay slow for a while even after pre-faulting; the store
	 * benchmark also recycles warm pages */
	for (off = 0; off < 2 * f->region; off += o.size)
		memcpy(f->dst + off % f->region, src, o.size);
	f->off = 0;
}

/* copy @n chunks from @src, walking the mapping; nanoseconds taken */
static uint64_t floor_copy(struct floor_map *f, const void *src, int n)
{
	uint64_t t0 = now_ns();
	int i;

	for (i = 0; i < n; i++) {
		memcpy(f->dst + f->off, src, o.size);
		f->off += o.size;
		if (f->off + o.size > f->region)
			f->off = 0;
	}
	return now_ns() - t0;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	if (!n)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int cmd_memcpy(void)
{
	uint64_t t0, bytes = 0, deadline;
	void *src = source_buffer();
	struct floor_map f;

	floor_open(&f, src);
	t0 = now_ns();
	deadline = t0 + (uint64_t)o.ms * 1000000ull;
	while (now_ns() < deadline) {
		floor_copy(&f, src, 1);
		bytes += o.size;
	}
	printf("RESULT what=memcpy size=%" PRIu64 " gbps=%.3f\n", o.size,
	       (double)bytes / (double)(now_ns() - t0));
	munmap(f.dst, f.region);
	free(src);
	return 0;
}

/* ---- store ------------------------------------------------------------------
 */

struct zin;
static size_t zin_size(void);
static int zmtp_connect(const char *url, struct zin *z);
static int echo_connect(int port);
static void echo_call(int fd, const uint8_t *frame, size_t n);
static int zmtp_call(int fd, struct zin *z, const uint8_t *frame, size_t n);
static size_t kv_frame(uint8_t *buf, uint8_t type, uint32_t seq,
		       const char *key, uint64_t region, uint64_t off,
		       uint64_t len);

static int cmd_store(void)
{
	int per = o.batch > 1 ? o.batch : 1;
	struct maru_handler *h;
	struct maru_key *keys;
	struct maru_page *pages;
	char(*names)[48];
	bool *res;
	uint64_t timed = 0, bytes = 0, t0, end;
	uint64_t pool = o.pool, round = 0;
	uint64_t t_alloc = 0, t_copy = 0, t_reg = 0;
	uint64_t s_alloc = 0, s_copy = 0, s_reg = 0;
	uint64_t mtimed = 0, mbytes = 0, tr, tm;
	double *rs, *rm, *rr;
	int nr = 0, maxr = 4096;
	struct floor_map fl;
	void *src = source_buffer();
	int i, n, rc, cap;
	struct zin *z = NULL;
	uint8_t zf[256];
	uint32_t zseq = 1;
	int zfd = -1;

	/* one region holding a few batches, so pages get recycled */
	if (pool < (uint64_t)per * o.size * 2)
		pool = (uint64_t)per * o.size * 2;
	h = connect_h(pool, false);
	cap = (int)(pool / o.size);
	keys = calloc((size_t)cap, sizeof(*keys));
	pages = calloc((size_t)cap, sizeof(*pages));
	names = calloc((size_t)cap, sizeof(*names));
	res = calloc((size_t)cap, sizeof(*res));
	rs = calloc((size_t)maxr, sizeof(*rs));
	rm = calloc((size_t)maxr, sizeof(*rm));
	rr = calloc((size_t)maxr, sizeof(*rr));
	floor_open(&fl, src);
	if (o.echo) {
		if (per != 1 || o.zmtp)
			die("--echo is for single stores", EINVAL);
		zfd = echo_connect(o.echo);
	}
	if (o.zmtp) {
		/* the experiment: what a store would cost with a client that
		 * speaks ZMTP itself in the calling thread (cmd_zmtp) */
		if (per != 1)
			die("--zmtp is for single stores", EINVAL);
		z = calloc(1, zin_size());
		zfd = zmtp_connect(o.server, z);
	}
	end = now_ns() + (uint64_t)o.ms * 1000000ull;
	/* round 0 is a warm-up and not counted */
	while (round < 2 || now_ns() < end) {
		/* a cycle fills up to the region, timed; then deletes, untimed
		 */
		n = cap / per * per;
		for (i = 0; i < n; i++) {
			snprintf(names[i], sizeof(names[i]),
				 "st-%d-%" PRIu64 "-%d", getpid(), round, i);
			keys[i] = maru_key_str(names[i], strlen(names[i]));
		}
		t0 = now_ns();
		for (i = 0; i < n; i += per) {
			int j;

			uint64_t ta, tb, tc, td;

			for (j = 0; j < per; j++) {
				ta = now_ns();
				rc = maru_page_alloc(h, o.size, &pages[i + j]);
				if (rc < 0)
					die("alloc", rc);
				tb = now_ns();
				memcpy(pages[i + j].ptr, src, o.size);
				tc = now_ns();
				t_alloc += tb - ta;
				t_copy += tc - tb;
			}
			tc = now_ns();
			if (o.echo)
				echo_call(zfd, zf,
					  kv_frame(zf, MDS_REGISTER_KV, zseq++,
						   names[i], pages[i].region_id,
						   pages[i].page_index * o.size,
						   o.size));
			else if (o.zmtp)
				rc = zmtp_call(
					zfd, z, zf,
					kv_frame(zf, MDS_REGISTER_KV, zseq++,
						 names[i], pages[i].region_id,
						 pages[i].page_index * o.size,
						 o.size));
			else if (per == 1)
				rc = maru_kv_store(h, &keys[i], &pages[i]);
			else
				rc = maru_kv_batch_store(h, &keys[i], &pages[i],
							 (size_t)per, res);
			if (rc < 0)
				die("store", rc);
			td = now_ns();
			t_reg += td - tc;
		}
		tr = now_ns() - t0;
		/* the same number of chunks memcpy'd into the floor mapping,
		 * right after: both see the same moment of the machine */
		tm = floor_copy(&fl, src, n);
		if (round) {
			timed += tr;
			bytes += (uint64_t)n * o.size;
			mtimed += tm;
			mbytes += (uint64_t)n * o.size;
			s_alloc += t_alloc;
			s_copy += t_copy;
			s_reg += t_reg;
			if (nr < maxr) {
				rs[nr] =
					(double)n * (double)o.size / (double)tr;
				rm[nr] =
					(double)n * (double)o.size / (double)tm;
				rr[nr] = (double)tm / (double)tr;
				nr++;
			}
		}
		t_alloc = t_copy = t_reg = 0;
		for (i = 0; i < n; i++) {
			if (o.echo) {
				/* nothing was registered */
				maru_page_free(h, pages[i].region_id,
					       pages[i].page_index);
				continue;
			}
			if (!o.zmtp) {
				maru_kv_delete(h, &keys[i]);
				continue;
			}
			/* libmaru never saw these keys: delete by hand */
			zmtp_call(zfd, z, zf,
				  kv_frame(zf, MDS_DELETE_KV, zseq++, names[i],
					   0, 0, 0));
			maru_page_free(h, pages[i].region_id,
				       pages[i].page_index);
		}
		round++;
	}
	/* where the time went, per page: alloc, memcpy, the register RPC */
	/* and the medians over the rounds of both rates and of their ratio */
	printf("RESULT what=%s size=%" PRIu64 " gbps=%.3f ops=%" PRIu64
	       " alloc_us=%.2f copy_us=%.2f reg_us=%.2f memcpy_gbps=%.3f"
	       " rounds=%d med_gbps=%.3f med_memcpy_gbps=%.3f"
	       " med_ratio=%.3f\n",
	       per > 1	? "batch_store"
	       : o.echo ? "store_floor"
	       : o.zmtp ? "store_zmtp"
			: "store",
	       o.size, (double)bytes / (double)timed, bytes / o.size,
	       (double)s_alloc / 1e3 / (double)(bytes / o.size),
	       (double)s_copy / 1e3 / (double)(bytes / o.size),
	       (double)s_reg / 1e3 / (double)(bytes / o.size),
	       (double)mbytes / (double)mtimed, nr, median(rs, nr),
	       median(rm, nr), median(rr, nr));
	munmap(fl.dst, fl.region);
	free(rs);
	free(rm);
	free(rr);
	if (zfd >= 0)
		close(zfd);
	free(z);
	maru_handler_free(h);
	free(keys);
	free(pages);
	free(names);
	free(res);
	free(src);
	return 0;
}

/* ---- cross-process retrieve
 * -------------------------------------------------- */

static void key_name(char *buf, size_t n, int i)
{
	snprintf(buf, n, "%s-%" PRIu64 "-%d", o.prefix, o.size, i);
}

static int cmd_prepare(void)
{
	struct maru_handler *h = connect_h((uint64_t)o.keys * o.size, false);
	struct maru_page p;
	struct maru_key k;
	void *src = source_buffer();
	char name[96];
	int i, rc;

	for (i = 0; i < o.keys; i++) {
		key_name(name, sizeof(name), i);
		k = maru_key_str(name, strlen(name));
		rc = maru_page_alloc(h, o.size, &p);
		if (rc < 0)
			die("alloc", rc);
		memcpy(p.ptr, src, o.size);
		rc = maru_kv_store(h, &k, &p);
		if (rc < 0)
			die("store", rc);
	}
	printf("RESULT what=prepare size=%" PRIu64 " keys=%d\n", o.size,
	       o.keys);
	/* close returns the region; the server keeps it while keys exist */
	maru_handler_free(h);
	free(src);
	return 0;
}

static int cmd_retrieve(void)
{
	struct maru_handler *h = connect_h(o.size, false);
	uint64_t *lat = calloc((size_t)o.iters, sizeof(*lat));
	struct maru_key *keys = calloc((size_t)o.keys, sizeof(*keys));
	char(*names)[96] = calloc((size_t)o.keys, sizeof(*names));
	struct maru_view v;
	uint64_t t0;
	int i, rc;

	for (i = 0; i < o.keys; i++) {
		key_name(names[i], sizeof(names[i]), i);
		keys[i] = maru_key_str(names[i], strlen(names[i]));
		/* warm-up: maps (and pre-faults) the region once */
		rc = maru_kv_retrieve(h, &keys[i], &v);
		if (rc != 1)
			die("warm-up retrieve", rc ? rc : ENOENT);
		sink += read_all(v.ptr, v.len);
	}
	for (i = 0; i < o.iters; i++) {
		t0 = now_ns();
		rc = maru_kv_retrieve(h, &keys[i % o.keys], &v);
		if (o.read && rc == 1)
			sink += read_all(v.ptr, v.len);
		lat[i] = now_ns() - t0;
		if (rc != 1)
			die("retrieve", rc ? rc : ENOENT);
	}
	report_lat(o.read ? "retrieve_read" : "retrieve", lat, o.iters);
	maru_handler_free(h);
	free(lat);
	free(keys);
	free(names);
	return 0;
}

/*
 * A request frame built by hand (no codec of ours in the loop): {key} for
 * LOOKUP_KV / DELETE_KV, {key, region_id, kv_offset, kv_length} for
 * REGISTER_KV
 */
static size_t kv_frame(uint8_t *buf, uint8_t type, uint32_t seq,
		       const char *key, uint64_t region, uint64_t off,
		       uint64_t len)
{
	static const char *const names[] = {"region_id", "kv_offset",
					    "kv_length"};
	uint64_t v[3] = {region, off, len};
	size_t kl = strlen(key), n = MDS_HDR_SIZE, j;
	int f, i;

	buf[n++] = type == MDS_REGISTER_KV ? 0x84 : 0x81;
	buf[n++] = 0xA3;
	memcpy(buf + n, "key", 3);
	n += 3;
	buf[n++] = 0xD9;
	buf[n++] = (uint8_t)kl;
	memcpy(buf + n, key, kl);
	n += kl;
	for (f = 0; type == MDS_REGISTER_KV && f < 3; f++) {
		j = strlen(names[f]);
		buf[n++] = (uint8_t)(0xA0 | j);
		memcpy(buf + n, names[f], j);
		n += j;
		buf[n++] = 0xCF; /* uint 64 */
		for (i = 7; i >= 0; i--)
			buf[n++] = (uint8_t)(v[f] >> (i * 8));
	}
	mds_hdr_put(buf, type, 0, seq, (uint32_t)(n - MDS_HDR_SIZE));
	return n;
}

static int cmd_raw(void)
{
	uint64_t *lat = calloc((size_t)o.iters, sizeof(*lat));
	void *ctx = zmq_ctx_new();
	void *s = zmq_socket(ctx, o.dealer ? ZMQ_DEALER : ZMQ_REQ);
	uint8_t frame[256], rep[4096];
	char key[96];
	uint64_t t0;
	int i, n;

	key_name(key, sizeof(key), 0);
	if (zmq_connect(s, o.server) < 0)
		die("zmq_connect", errno);
	for (i = -100; i < o.iters; i++) {
		size_t len = kv_frame(frame, MDS_LOOKUP_KV, (uint32_t)(i + 200),
				      key, 0, 0, 0);

		t0 = now_ns();
		if (o.dealer)
			zmq_send(s, "", 0, ZMQ_SNDMORE);
		zmq_send(s, frame, len, 0);
		do {
			n = zmq_recv(s, rep, sizeof(rep), 0);
		} while (n == 0); /* the DEALER's empty delimiter */
		if (i >= 0)
			lat[i] = now_ns() - t0;
		if (n < MDS_HDR_SIZE)
			die("raw recv", errno);
	}
	report_lat(o.dealer ? "raw_dealer" : "raw_req", lat, o.iters);
	zmq_close(s);
	zmq_ctx_term(ctx);
	free(lat);
	return 0;
}

/* ---- where a single store's time goes, in one process --------------------
 *
 * Blocks of 100 calls, alternated on one handler: maru_kv_exists (one
 * EXISTS_KV round trip), maru_page_alloc + maru_kv_store without writing
 * the page (one REGISTER_KV round trip; the keys are deleted untimed after
 * each block), and a bare LOOKUP_KV round trip on a raw DEALER socket of
 * the same process.  p50 of each: what the library adds to the round trip.
 */
static int cmd_rtt(void)
{
	int nb = o.iters / 100 < 1 ? 1 : o.iters / 100, b, i, k, rc;
	uint64_t *le = calloc((size_t)nb * 100, sizeof(uint64_t));
	uint64_t *ls = calloc((size_t)nb * 100, sizeof(uint64_t));
	uint64_t *lr = calloc((size_t)nb * 100, sizeof(uint64_t));
	struct maru_handler *h = connect_h(256ull * o.size, false);
	struct maru_key keys[100], ek;
	struct maru_page pg;
	void *ctx = zmq_ctx_new();
	void *s = zmq_socket(ctx, ZMQ_DEALER);
	uint8_t frame[256], rep[4096];
	char names[100][48], key[96];
	bool curve = getenv("MARU_CURVE_SERVER_KEY") != NULL;
	uint64_t t0;
	int n;

	key_name(key, sizeof(key), 0);
	ek = maru_key_str(key, strlen(key));
	if (zmq_connect(s, o.server) < 0)
		die("zmq_connect", errno);
	for (b = -1; b < nb; b++) {
		for (i = 0; i < 100; i++) {
			k = b * 100 + i;
			t0 = now_ns();
			rc = maru_kv_exists(h, &ek);
			if (b >= 0)
				le[k] = now_ns() - t0;
			if (rc != 1)
				die("exists", rc ? rc : ENOENT);
		}
		for (i = 0; i < 100; i++) {
			snprintf(names[i], sizeof(names[i]), "rtt-%d-%d-%d",
				 getpid(), b, i);
			keys[i] = maru_key_str(names[i], strlen(names[i]));
			t0 = now_ns();
			rc = maru_page_alloc(h, o.size, &pg);
			if (rc == 0)
				rc = maru_kv_store(h, &keys[i], &pg);
			if (b >= 0)
				ls[b * 100 + i] = now_ns() - t0;
			if (rc < 0)
				die("store", rc);
		}
		for (i = 0; i < 100; i++)
			maru_kv_delete(h, &keys[i]);
		/* the raw libzmq socket speaks NULL only */
		for (i = 0; i < 100 && !curve; i++) {
			size_t len = kv_frame(frame, MDS_LOOKUP_KV,
					      (uint32_t)(i + 7), key, 0, 0, 0);

			t0 = now_ns();
			zmq_send(s, "", 0, ZMQ_SNDMORE);
			zmq_send(s, frame, len, 0);
			do {
				n = zmq_recv(s, rep, sizeof(rep), 0);
			} while (n == 0);
			if (b >= 0)
				lr[b * 100 + i] = now_ns() - t0;
			if (n < MDS_HDR_SIZE)
				die("raw recv", errno);
		}
	}
	report_lat("rtt_exists", le, nb * 100);
	report_lat("rtt_store_nocopy", ls, nb * 100);
	if (!curve)
		report_lat("rtt_raw_dealer", lr, nb * 100);
	zmq_close(s);
	zmq_ctx_term(ctx);
	maru_handler_free(h);
	free(le);
	free(ls);
	free(lr);
	return 0;
}

/* ---- raw ZMTP 3.0 DEALER, no libzmq: how low a client can take a round trip
 *
 * The same LOOKUP_KV frame over a blocking TCP socket speaking ZMTP 3.0
 * (NULL mechanism, Socket-Type DEALER) in the calling thread: one send(2)
 * and usually one recv(2) per round trip, against libzmq's hand-off to its
 * I/O thread and ~20 more system calls per round trip in the client.  The
 * server sees the same frames either way.  A measurement of the floor,
 * not a client: no reconnects, PINGs answered, nothing else.
 */

static void xwrite(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	ssize_t w;

	while (n) {
		w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0)
			die("send", errno);
		b += w;
		n -= (size_t)w;
	}
}

struct zin {
	int fd;
	uint8_t buf[65536];
	size_t lo, hi;
};

static size_t zin_size(void)
{
	return sizeof(struct zin);
}

static void zfill(struct zin *z, size_t need)
{
	ssize_t r;

	if (z->hi - z->lo >= need)
		return;
	memmove(z->buf, z->buf + z->lo, z->hi - z->lo);
	z->hi -= z->lo;
	z->lo = 0;
	while (z->hi < need) {
		r = recv(z->fd, z->buf + z->hi, sizeof(z->buf) - z->hi, 0);
		if (r <= 0)
			die("recv", r < 0 ? errno : EPIPE);
		z->hi += (size_t)r;
	}
}

/* next frame: flags into *fl, body pointer (valid until the next call) */
static const uint8_t *zframe(struct zin *z, uint8_t *fl, size_t *len)
{
	const uint8_t *p;
	size_t hl = 2, n;
	int i;

	zfill(z, 2);
	*fl = z->buf[z->lo];
	if (*fl & 2) {
		hl = 9;
		zfill(z, 9);
		for (n = 0, i = 0; i < 8; i++)
			n = n << 8 | z->buf[z->lo + 1 + i];
	} else {
		n = z->buf[z->lo + 1];
	}
	zfill(z, hl + n);
	p = z->buf + z->lo + hl;
	z->lo += hl + n;
	*len = n;
	return p;
}

static int zmtp_connect(const char *url, struct zin *z)
{
	uint8_t g[64] = {0xff, 0,    0, 0, 0,	0,   0,	  0,
			 1,    0x7f, 3, 0, 'N', 'U', 'L', 'L'};
	uint8_t ready[64], fl;
	const char *host = url + 6, *colon = strrchr(url, ':');
	struct sockaddr_in sa = {.sin_family = AF_INET};
	size_t n = 0, len;
	int fd, one = 1;
	char hbuf[64];

	snprintf(hbuf, sizeof(hbuf), "%.*s", (int)(colon - host), host);
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	inet_pton(AF_INET, hbuf, &sa.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect", errno);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	z->fd = fd;
	z->lo = z->hi = 0;
	xwrite(fd, g, sizeof(g));
	zfill(z, 64);
	z->lo += 64;
	/* READY: Socket-Type DEALER, Identity 8 bytes */
	ready[n++] = 0x04;
	n++; /* size, below */
	memcpy(ready + n, "\x05READY", 6);
	n += 6;
	memcpy(ready + n,
	       "\x0bSocket-Type\0\0\0\x06"
	       "DEALER",
	       22);
	n += 22;
	memcpy(ready + n, "\x08Identity\0\0\0\x08", 13);
	n += 13;
	memcpy(ready + n, "\x01zmtpbnc", 8);
	n += 8;
	ready[1] = (uint8_t)(n - 2);
	xwrite(fd, ready, n);
	zframe(z, &fl, &len); /* the server's READY */
	if (!(fl & 4))
		die("zmtp handshake", EPROTO);
	return fd;
}

/* one request over the hand-written ZMTP socket: 0 on any reply */
static int zmtp_call(int fd, struct zin *z, const uint8_t *frame, size_t n)
{
	uint8_t out[320];
	const uint8_t *b;
	size_t len;
	uint8_t fl;

	if (n > 255)
		return -E2BIG;
	out[0] = 0x01; /* empty delimiter, more */
	out[1] = 0;
	out[2] = 0;
	out[3] = (uint8_t)n;
	memcpy(out + 4, frame, n);
	xwrite(fd, out, n + 4);
	for (;;) {
		b = zframe(z, &fl, &len);
		if (fl & 4) {
			/* PING: answer PONG with its context */
			if (len >= 7 && !memcmp(b, "\x04PING", 5)) {
				uint8_t pong[64] = {0x04, 0};
				size_t cl = len - 7 > 40 ? 40 : len - 7;

				memcpy(pong + 2, "\x04PONG", 5);
				memcpy(pong + 7, b + 7, cl);
				pong[1] = (uint8_t)(5 + cl);
				xwrite(fd, pong, 7 + cl);
			}
			continue;
		}
		if (!(fl & 1))
			break; /* the body (after the delimiter) */
	}
	if (len < MDS_HDR_SIZE)
		return -EPROTO;
	/* REGISTER_KV must have succeeded: {"success": true, ...} */
	if (frame[3] == MDS_REGISTER_KV &&
	    !memmem(b + MDS_HDR_SIZE, len - MDS_HDR_SIZE, "\xa7success\xc3", 9))
		return -EREMOTEIO;
	return 0;
}

static int echo_connect(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd, one = 1;

	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect to the echo server", errno);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* send @n bytes, wait until all @n came back */
static void echo_call(int fd, const uint8_t *frame, size_t n)
{
	uint8_t back[512];
	size_t got = 0;
	ssize_t r;

	xwrite(fd, frame, n);
	while (got < n) {
		r = recv(fd, back, sizeof(back), 0);
		if (r <= 0)
			die("echo", r < 0 ? errno : EPIPE);
		got += (size_t)r;
	}
}

/* the echo server: one connection at a time, until killed */
static int cmd_echo(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	uint8_t b[4096];
	uint64_t until;
	int l, c, one = 1;
	ssize_t r;

	sa.sin_port = htons((uint16_t)o.port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(l, 8) < 0)
		die("echo: bind", errno);
	for (;;) {
		c = accept(l, NULL, NULL);
		if (c < 0)
			die("echo: accept", errno);
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		until = 0;
		for (;;) {
			r = recv(c, b, sizeof(b),
				 now_ns() < until ? MSG_DONTWAIT : 0);
			if (r < 0 && errno == EAGAIN) {
				sched_yield();
				continue;
			}
			if (r <= 0)
				break;
			xwrite(c, b, (size_t)r);
			if (o.busy_us)
				until = now_ns() + (uint64_t)o.busy_us * 1000;
		}
		close(c);
	}
	return 0;
}

static int cmd_zmtp(void)
{
	uint64_t *lat = calloc((size_t)o.iters, sizeof(*lat));
	struct zin *z = calloc(1, sizeof(*z));
	uint8_t frame[300];
	char key[96];
	uint64_t t0;
	int i, fd, rc;

	key_name(key, sizeof(key), 0);
	fd = zmtp_connect(o.server, z);
	for (i = -100; i < o.iters; i++) {
		size_t n = kv_frame(frame, MDS_LOOKUP_KV, (uint32_t)(i + 200),
				    key, 0, 0, 0);

		t0 = now_ns();
		rc = zmtp_call(fd, z, frame, n);
		if (i >= 0)
			lat[i] = now_ns() - t0;
		if (rc < 0)
			die("zmtp reply", -rc);
	}
	report_lat("raw_zmtp", lat, o.iters);
	close(fd);
	free(z);
	free(lat);
	return 0;
}

static int cmd_redis(void)
{
	uint64_t *lat = calloc((size_t)o.iters, sizeof(*lat));
	redisContext *c = redisConnect("127.0.0.1", o.port);
	void *src = source_buffer();
	redisReply *r;
	char key[64];
	uint64_t t0;
	int i;

	if (!c || c->err)
		die("redis connect", ECONNREFUSED);
	snprintf(key, sizeof(key), "bench-%" PRIu64, o.size);
	r = redisCommand(c, "SET %s %b", key, src, (size_t)o.size);
	if (!r)
		die("redis SET", EIO);
	freeReplyObject(r);
	for (i = -20; i < o.iters; i++) {
		t0 = now_ns();
		r = redisCommand(c, "GET %s", key);
		if (!r || r->type != REDIS_REPLY_STRING ||
		    r->len != (size_t)o.size)
			die("redis GET", EIO);
		if (o.read)
			sink += read_all(r->str, r->len);
		if (i >= 0)
			lat[i] = now_ns() - t0;
		freeReplyObject(r);
	}
	report_lat(o.read ? "redis_get_read" : "redis_get", lat, o.iters);
	redisFree(c);
	free(lat);
	free(src);
	return 0;
}

/* one reader process of "scale": retrievals done in o.ms, via a pipe */
static void scale_child(int wfd)
{
	struct maru_handler *h = connect_h(o.size, false);
	struct maru_key *keys = calloc((size_t)o.keys, sizeof(*keys));
	char(*names)[96] = calloc((size_t)o.keys, sizeof(*names));
	struct maru_view v;
	uint64_t n = 0, end;
	int i;

	for (i = 0; i < o.keys; i++) {
		key_name(names[i], sizeof(names[i]), i);
		keys[i] = maru_key_str(names[i], strlen(names[i]));
		if (maru_kv_retrieve(h, &keys[i], &v) != 1)
			_exit(1);
	}
	end = now_ns() + (uint64_t)o.ms * 1000000ull;
	for (i = 0; now_ns() < end; i++) {
		if (maru_kv_retrieve(h, &keys[i % o.keys], &v) != 1)
			_exit(1);
		sink += read_all(v.ptr, v.len);
		n++;
	}
	if (write(wfd, &n, sizeof(n)) != sizeof(n))
		_exit(1);
	maru_handler_free(h);
	_exit(0);
}

static int cmd_scale(void)
{
	uint64_t total = 0, n, t0;
	int fds[2], i, st, bad = 0;
	double secs;

	if (pipe(fds) < 0)
		die("pipe", errno);
	t0 = now_ns();
	for (i = 0; i < o.procs; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			close(fds[0]);
			scale_child(fds[1]);
		}
		if (pid < 0)
			die("fork", errno);
	}
	close(fds[1]);
	for (i = 0; i < o.procs; i++) {
		if (read(fds[0], &n, sizeof(n)) == sizeof(n))
			total += n;
	}
	for (i = 0; i < o.procs; i++) {
		wait(&st);
		bad += !WIFEXITED(st) || WEXITSTATUS(st);
	}
	secs = (double)o.ms / 1e3;
	(void)t0;
	printf("RESULT what=scale size=%" PRIu64 " procs=%d ops_per_s=%.0f "
	       "gbps=%.3f failed=%d\n",
	       o.size, o.procs, (double)total / secs,
	       (double)total * (double)o.size / secs / 1e9, bad);
	return bad ? 1 : 0;
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);

	switch (*end) {
	case 'K':
	case 'k':
		return v << 10;
	case 'M':
	case 'm':
		return v << 20;
	case 'G':
	case 'g':
		return v << 30;
	default:
		return v;
	}
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"server", required_argument, NULL, 's'},
		{"prefix", required_argument, NULL, 'x'},
		{"size", required_argument, NULL, 'n'},
		{"region", required_argument, NULL, 'R'},
		{"pool", required_argument, NULL, 'P'},
		{"keys", required_argument, NULL, 'k'},
		{"iters", required_argument, NULL, 'i'},
		{"batch", required_argument, NULL, 'b'},
		{"procs", required_argument, NULL, 'p'},
		{"ms", required_argument, NULL, 'm'},
		{"port", required_argument, NULL, 'r'},
		{"read", no_argument, NULL, 'e'},
		{"dealer", no_argument, NULL, 'd'},
		{"zmtp", no_argument, NULL, 'z'},
		{"echo", required_argument, NULL, 'E'},
		{"busy-poll-us", required_argument, NULL, 'B'},
		{NULL, 0, NULL, 0},
	};
	int c;

	o = (struct opts){.server = "tcp://127.0.0.1:5555",
			  .prefix = "bench",
			  .size = 1 << 20,
			  .region = 256ull << 20,
			  .pool = 256ull << 20,
			  .keys = 8,
			  .iters = 2000,
			  .batch = 1,
			  .procs = 1,
			  .ms = 2000};
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			o.server = optarg;
			break;
		case 'x':
			o.prefix = optarg;
			break;
		case 'n':
			o.size = parse_size(optarg);
			break;
		case 'R':
			o.region = parse_size(optarg);
			break;
		case 'P':
			o.pool = parse_size(optarg);
			break;
		case 'k':
			o.keys = atoi(optarg);
			break;
		case 'i':
			o.iters = atoi(optarg);
			break;
		case 'b':
			o.batch = atoi(optarg);
			break;
		case 'p':
			o.procs = atoi(optarg);
			break;
		case 'm':
			o.ms = atoi(optarg);
			break;
		case 'r':
			o.port = atoi(optarg);
			break;
		case 'e':
			o.read = true;
			break;
		case 'd':
			o.dealer = true;
			break;
		case 'z':
			o.zmtp = true;
			break;
		case 'E':
			o.echo = atoi(optarg);
			break;
		case 'B':
			o.busy_us = atoi(optarg);
			break;
		default:
			return 2;
		}
	}
	if (optind != argc - 1 || o.keys < 1 || o.iters < 1 || !o.size) {
		fprintf(stderr, "usage: maru-client-bench memcpy|store|prepare|"
				"retrieve|raw|redis|scale [options]\n");
		return 2;
	}
	o.cmd = argv[optind];
	if (!strcmp(o.cmd, "memcpy"))
		return cmd_memcpy();
	if (!strcmp(o.cmd, "store"))
		return cmd_store();
	if (!strcmp(o.cmd, "prepare"))
		return cmd_prepare();
	if (!strcmp(o.cmd, "retrieve"))
		return cmd_retrieve();
	if (!strcmp(o.cmd, "raw"))
		return cmd_raw();
	if (!strcmp(o.cmd, "echo"))
		return cmd_echo();
	if (!strcmp(o.cmd, "zmtp"))
		return cmd_zmtp();
	if (!strcmp(o.cmd, "rtt"))
		return cmd_rtt();
	if (!strcmp(o.cmd, "redis"))
		return cmd_redis();
	if (!strcmp(o.cmd, "scale"))
		return cmd_scale();
	fprintf(stderr, "unknown command %s\n", o.cmd);
	return 2;
}
