/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mds_load.c - load generator for maru-server, and its floor
 *
 *   mds-load prefill --url URL [--keys N]
 *	allocate a region and register N keys (BATCH_REGISTER_KV)
 *   mds-load bench --url URL --mode req|dealer --op OP [--seconds S]
 *	[--warmup S] [--inflight N] [--batch N] [--keys N] [--echo]
 *	[--run N] [--target SPEC]... [--block-ms MS]
 *	OP: lookup | exists | register | batch_lookup.  Prints one line of
 *	key=value results per target: ops/s, keys/s, p50/p99 latency,
 *	message sizes.  --run N (0-99) makes REGISTER_KV keys differ between
 *	repeated runs against one server (every run registers new keys).
 *	With --target SPEC (repeatable;
 *	"url=U[,keys=N][,echo][,label=L][,pid=P]") the targets are measured
 *	in turn, in blocks of --block-ms (default 100) for --seconds in all,
 *	each on its own socket: every target sees the same machine, which on
 *	a noisy VM is the only fair comparison.  Targets given a pid (servers
 *	on one CPU) are stopped (SIGSTOP) while another target's block runs,
 *	so that one server's background work (an index being resized or
 *	rebuilt when it has nothing to answer) does not run in another's
 *	block: each pays for its own, as it would alone on its CPU.
 *	The first target's line adds the median of its per-round ratio to
 *	the second target (pair_ratio_median); every other target's line
 *	adds the median of its per-round ratio to the first one
 *	(ratio_to_first_median: with three or more targets, each against
 *	the same baseline).
 *   mds-load echo --port P --reply-size N
 *	a bare libzmq ROUTER that answers every request with a reply of N
 *	bytes carrying the request's sequence: the floor, same socket
 *	pattern, same message sizes, no work
 *
 * Request bodies are built before the clock starts (a ring of up to 131072
 * with random keys; REGISTER_KV keys get a fresh counter patched in place), so
 * the client spends the same few instructions per request against the
 * server and against the echo floor.  REQ: one request at a time.
 * DEALER: --inflight requests outstanding, replies matched by sequence,
 * like upstream's RpcAsyncClient.  Latency is send-to-reply per request.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "buf.h"
#include "mds_proto.h"
#include "util.h"

/*
 * Distinct request bodies cycled through: many, so that the keys looked
 * up are spread over the index as in real use and not a cache-resident
 * handful (131072 single-key bodies; 512 batches = 131072 keys).
 */
#define RING_MAX 131072
#define KEYFMT "lmcache@model-8b@1@0@%016" PRIx64

/* ---- a minimal msgpack writer (the bench must not need the server) -- */

static void put(struct buf *b, const void *p, size_t n)
{
	if (buf_put(b, p, n) < 0) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
}

static void put_u8(struct buf *b, uint8_t v)
{
	put(b, &v, 1);
}

static void put_str(struct buf *b, const char *s)
{
	size_t n = strlen(s);

	if (n < 32) {
		put_u8(b, (uint8_t)(0xa0 | n));
	} else {
		put_u8(b, 0xd9);
		put_u8(b, (uint8_t)n);
	}
	put(b, s, n);
}

static void put_uint(struct buf *b, uint64_t v)
{
	uint8_t x[9];

	if (v < 128) {
		put_u8(b, (uint8_t)v);
		return;
	}
	x[0] = 0xcf;
	for (int i = 0; i < 8; i++)
		x[1 + i] = (uint8_t)(v >> (56 - 8 * i));
	put(b, x, 9);
}

static void put_arr(struct buf *b, uint32_t n)
{
	if (n < 16) {
		put_u8(b, (uint8_t)(0x90 | n));
	} else {
		put_u8(b, 0xdc);
		put_u8(b, (uint8_t)(n >> 8));
		put_u8(b, (uint8_t)n);
	}
}

static void begin(struct buf *b, uint8_t type)
{
	uint8_t h[MDS_HDR_SIZE];

	buf_reset(b);
	mds_hdr_put(h, type, 0, 0, 0);
	put(b, h, sizeof(h));
}

static void end(struct buf *b)
{
	put_u32be(b->data + 12, (uint32_t)(b->len - MDS_HDR_SIZE));
}

/* ---- a minimal reader: find an unsigned field anywhere in a reply ---- */

static bool find_uint(const uint8_t *p, size_t n, const char *key,
		      uint64_t *out)
{
	size_t kl = strlen(key), i;

	/* replies are small and the key is a fixstr: scan for it */
	for (i = 0; i + 1 + kl < n; i++) {
		if (p[i] == (0xa0 | kl) && !memcmp(p + i + 1, key, kl)) {
			const uint8_t *v = p + i + 1 + kl;

			if (v[0] < 0x80) {
				*out = v[0];
				return true;
			}
			if (v[0] >= 0xcc && v[0] <= 0xcf) {
				int len = 1 << (v[0] - 0xcc), j;

				*out = 0;
				for (j = 0; j < len; j++)
					*out = *out << 8 | v[1 + j];
				return true;
			}
		}
	}
	return false;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static void key_of(char *s, size_t n, uint64_t i)
{
	snprintf(s, n, KEYFMT, mix(i));
}

/* ---- plumbing ---- */

struct opts {
	const char *url;
	const char *mode;
	const char *op;
	double seconds, warmup;
	int inflight, batch, port;
	uint64_t keys;
	uint64_t run; /* register: keys differ between runs */
	double block_ms;
	const char *targets[8];
	int ntargets;
	size_t reply_size;
	bool echo;
};

static void *zctx;

static void *req_sock(const char *url)
{
	void *s = zmq_socket(zctx, ZMQ_REQ);
	int z = 0;

	zmq_setsockopt(s, ZMQ_LINGER, &z, sizeof(z));
	if (zmq_connect(s, url) < 0) {
		fprintf(stderr, "connect %s: %s\n", url, zmq_strerror(errno));
		exit(1);
	}
	return s;
}

/* one REQ round trip into @reply */
static void rpc(void *s, const struct buf *req, struct buf *reply)
{
	zmq_msg_t m;

	if (zmq_send(s, req->data, req->len, 0) < 0) {
		fprintf(stderr, "send: %s\n", zmq_strerror(errno));
		exit(1);
	}
	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, s, 0) < 0) {
		fprintf(stderr, "recv: %s\n", zmq_strerror(errno));
		exit(1);
	}
	buf_reset(reply);
	put(reply, zmq_msg_data(&m), zmq_msg_size(&m));
	zmq_msg_close(&m);
}

static uint64_t alloc_region(void *s, const char *inst)
{
	struct buf q = BUF_INIT, r = BUF_INIT;
	uint64_t id = 0;

	begin(&q, MDS_REQUEST_ALLOC);
	put_u8(&q, 0x82);
	put_str(&q, "instance_id");
	put_str(&q, inst);
	put_str(&q, "size");
	put_uint(&q, 2 << 20);
	end(&q);
	rpc(s, &q, &r);
	if (!find_uint(r.data + MDS_HDR_SIZE, r.len - MDS_HDR_SIZE, "region_id",
		       &id)) {
		fprintf(stderr, "REQUEST_ALLOC failed (is the RM up?)\n");
		exit(1);
	}
	buf_free(&q);
	buf_free(&r);
	return id;
}

static int cmd_prefill(const struct opts *o)
{
	void *s = req_sock(o->url);
	struct buf q = BUF_INIT, r = BUF_INIT;
	uint64_t region = alloc_region(s, "bench-prefill"), i, j, n;
	char k[64];

	for (i = 0; i < o->keys; i += n) {
		n = o->keys - i < 1000 ? o->keys - i : 1000;
		begin(&q, MDS_BATCH_REGISTER_KV);
		put_u8(&q, 0x81);
		put_str(&q, "entries");
		put_arr(&q, (uint32_t)n);
		for (j = 0; j < n; j++) {
			key_of(k, sizeof(k), i + j);
			put_u8(&q, 0x84);
			put_str(&q, "key");
			put_str(&q, k);
			put_str(&q, "region_id");
			put_uint(&q, region);
			put_str(&q, "kv_offset");
			put_uint(&q, ((i + j) % 512) * 4096);
			put_str(&q, "kv_length");
			put_uint(&q, 4096);
		}
		end(&q);
		rpc(s, &q, &r);
	}
	printf("prefilled keys=%" PRIu64 " region=%" PRIu64 "\n", o->keys,
	       region);
	buf_free(&q);
	buf_free(&r);
	zmq_close(s);
	return 0;
}

/* ---- request ring ---- */

struct ring {
	struct buf b[RING_MAX];
	size_t patch[RING_MAX]; /* register: offset of the counter digits */
	uint32_t n;		/* bodies in use */
};

static void build_ring(struct ring *rg, const struct opts *o, uint64_t region)
{
	uint64_t seed = 12345, i;
	char k[64];
	int n, j;

	rg->n = !strcmp(o->op, "batch_lookup") ? 512 : RING_MAX;
	for (n = 0; n < (int)rg->n; n++) {
		struct buf *b = &rg->b[n];

		memset(b, 0, sizeof(*b));
		if (!strcmp(o->op, "lookup") || !strcmp(o->op, "exists")) {
			begin(b, !strcmp(o->op, "lookup") ? MDS_LOOKUP_KV
							  : MDS_EXISTS_KV);
			put_u8(b, 0x81);
			put_str(b, "key");
			key_of(k, sizeof(k), mix(seed++) % o->keys);
			put_str(b, k);
		} else if (!strcmp(o->op, "batch_lookup")) {
			begin(b, MDS_BATCH_LOOKUP_KV);
			put_u8(b, 0x81);
			put_str(b, "keys");
			put_arr(b, (uint32_t)o->batch);
			for (j = 0; j < o->batch; j++) {
				key_of(k, sizeof(k), mix(seed++) % o->keys);
				put_str(b, k);
			}
		} else { /* register: "reg-<10 digits>-<ring slot>" */
			begin(b, MDS_REGISTER_KV);
			put_u8(b, 0x84);
			put_str(b, "key");
			snprintf(k, sizeof(k),
				 "reg-0000000000-%05d-lmcache@model-8b", n);
			rg->patch[n] = b->len + 1 + 4;
			put_str(b, k);
			put_str(b, "region_id");
			put_uint(b, region);
			put_str(b, "kv_offset");
			put_uint(b, 0);
			put_str(b, "kv_length");
			put_uint(b, 4096);
		}
		end(b);
		(void)i;
	}
}

static uint64_t run_base; /* --run N: N * 10^8, register's key counter */

/* next body: set the sequence (and a fresh key for register) */
static struct buf *next_body(struct ring *rg, uint64_t i, uint32_t seq,
			     bool reg)
{
	struct buf *b = &rg->b[i % rg->n];

	put_u32be(b->data + 8, seq);
	if (reg) {
		uint64_t c = i / rg->n + run_base;
		char *d = (char *)b->data + rg->patch[i % rg->n];
		int j;

		for (j = 9; j >= 0; j--, c /= 10)
			d[j] = (char)('0' + c % 10);
	}
	return b;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

struct samples {
	uint64_t *v;
	size_t n, cap;
};

static void sample(struct samples *s, uint64_t ns)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 1 << 20;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			exit(1);
	}
	s->v[s->n++] = ns;
}

/*
 * One target of "compare": a server or an echo, its own socket, request
 * ring (its own key range) and results.
 */
struct target {
	char label[32];
	char url[128];
	uint64_t keys;
	bool echo;
	pid_t pid; /* stopped during the others' blocks; 0: none */
	void *s;
	struct ring *rg;
	uint64_t i;	  /* requests sent so far (ring position) */
	uint32_t seq;	  /* last sequence used */
	uint64_t ops;	  /* replies in measured blocks */
	uint64_t total;	  /* all replies, warm-up included */
	uint64_t busy_ns; /* time of its measured blocks */
	uint64_t errs;
	size_t req_bytes, reply_bytes;
	struct samples lat;
	double *blk; /* ops/s of each measured block */
	size_t nblk, capblk;
	uint64_t sent_at[1024];
};

/* "url=U,keys=N,echo,label=L" (keys defaults to --keys) */
static void parse_target(struct target *t, const char *spec,
			 const struct opts *o)
{
	char buf[256], *tok, *save = NULL;

	memset(t, 0, sizeof(*t));
	t->keys = o->keys;
	snprintf(buf, sizeof(buf), "%s", spec);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strncmp(tok, "url=", 4))
			snprintf(t->url, sizeof(t->url), "%s", tok + 4);
		else if (!strncmp(tok, "keys=", 5))
			t->keys = strtoull(tok + 5, NULL, 10);
		else if (!strncmp(tok, "label=", 6))
			snprintf(t->label, sizeof(t->label), "%s", tok + 6);
		else if (!strcmp(tok, "echo"))
			t->echo = true;
		else if (!strncmp(tok, "pid=", 4))
			t->pid = (pid_t)atoi(tok + 4);
	}
	if (!t->label[0])
		snprintf(t->label, sizeof(t->label), "%s",
			 t->echo ? "echo" : "server");
	if (!t->url[0] || !t->keys) {
		fprintf(stderr, "bad target %s\n", spec);
		exit(2);
	}
}

static void blk_add(struct target *t, double v)
{
	if (t->nblk == t->capblk) {
		t->capblk = t->capblk ? 2 * t->capblk : 256;
		t->blk = realloc(t->blk, t->capblk * sizeof(*t->blk));
		if (!t->blk)
			exit(1);
	}
	t->blk[t->nblk++] = v;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median_dbl(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct target *stopped_tg; /* for an exit in the middle */
static int stopped_n;

/* the targets with a pid: only @run runs (NULL: all of them) */
static void only(struct target *tg, int n, const struct target *run)
{
	int k;

	for (k = 0; k < n; k++)
		if (tg[k].pid > 0)
			kill(tg[k].pid,
			     !run || &tg[k] == run ? SIGCONT : SIGSTOP);
}

static void cont_all(void)
{
	if (stopped_tg)
		only(stopped_tg, stopped_n, NULL);
}

/*
 * Run one block of @ms on @t: keep the pipe full until the block ends,
 * then drain what is in flight.  Counts into the results when @measured.
 */
static void run_block(struct target *t, const struct opts *o, double ms,
		      bool measured, bool dealer, bool reg)
{
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)(ms * 1e6), now, lat;
	uint64_t ops = 0;
	int inflight = 0, cap = dealer ? o->inflight : 1;
	zmq_msg_t m;

	zmq_msg_init(&m);
	for (;;) {
		struct buf *b;
		uint32_t seq;

		now = now_ns();
		while (now < end && inflight < cap) {
			seq = ++t->seq;
			if (!seq)
				seq = ++t->seq;
			b = next_body(t->rg, t->i, seq, reg);
			t->sent_at[seq % 1024] = now_ns();
			if (dealer)
				zmq_send(t->s, "", 0, ZMQ_SNDMORE);
			zmq_send(t->s, b->data, b->len, 0);
			inflight++;
			t->i++;
		}
		if (!inflight)
			break;
		if (dealer) {
			/* [empty, body] */
			if (zmq_msg_recv(&m, t->s, 0) < 0 ||
			    !zmq_msg_more(&m)) {
				t->errs++;
				continue;
			}
		}
		if (zmq_msg_recv(&m, t->s, 0) < 0) {
			fprintf(stderr, "recv: %s\n", zmq_strerror(errno));
			exit(1);
		}
		now = now_ns();
		inflight--;
		t->total++;
		if (zmq_msg_size(&m) < MDS_HDR_SIZE) {
			t->errs++;
			continue;
		}
		seq = get_u32be((uint8_t *)zmq_msg_data(&m) + 8);
		lat = now - t->sent_at[seq % 1024];
		t->reply_bytes = zmq_msg_size(&m);
		if (measured) {
			ops++;
			sample(&t->lat, lat);
		}
	}
	zmq_msg_close(&m);
	if (measured) {
		now = now_ns() - t0;
		t->ops += ops;
		t->busy_ns += now;
		blk_add(t, (double)ops * 1e9 / (double)now);
	}
}

/*
 * bench: one or more targets measured in turn, in blocks of --block-ms,
 * for --seconds in all (after --warmup), so that every target sees the
 * same machine; a lone --url is one target.
 */
static int cmd_bench(const struct opts *o)
{
	bool dealer = !strcmp(o->mode, "dealer");
	bool reg = !strcmp(o->op, "register");
	bool batch = !strcmp(o->op, "batch_lookup");
	struct target *tg;
	uint64_t t_end, t_meas, region;
	double *pair;
	size_t npair = 0, nrounds = 0;
	int n = o->ntargets ? o->ntargets : 1, k, z = 0;

	tg = calloc((size_t)n, sizeof(*tg));
	pair = calloc(1 << 16, sizeof(*pair));
	if (!tg || !pair)
		return 1;
	for (k = 0; k < n; k++) {
		struct target *t = &tg[k];

		if (o->ntargets) {
			parse_target(t, o->targets[k], o);
		} else {
			memset(t, 0, sizeof(*t));
			snprintf(t->url, sizeof(t->url), "%s", o->url);
			t->keys = o->keys;
			t->echo = o->echo;
			snprintf(t->label, sizeof(t->label), "%s",
				 o->echo ? "echo" : "server");
		}
		region = 0;
		if (reg && !t->echo) {
			void *a = req_sock(t->url);

			region = alloc_region(a, "bench-register");
			zmq_close(a);
		}
		t->rg = calloc(1, sizeof(*t->rg));
		if (!t->rg)
			return 1;
		{
			struct opts oo = *o;

			oo.keys = t->keys;
			build_ring(t->rg, &oo, region);
		}
		t->req_bytes = t->rg->b[0].len;
		t->s = zmq_socket(zctx, dealer ? ZMQ_DEALER : ZMQ_REQ);
		zmq_setsockopt(t->s, ZMQ_LINGER, &z, sizeof(z));
		if (zmq_connect(t->s, t->url) < 0) {
			fprintf(stderr, "connect %s: %s\n", t->url,
				zmq_strerror(errno));
			return 1;
		}
	}
	stopped_tg = tg;
	stopped_n = n;
	atexit(cont_all);
	/* warm-up: every target, in turn */
	t_meas = now_ns() + (uint64_t)(o->warmup * 1e9);
	do {
		for (k = 0; k < n; k++) {
			only(tg, n, &tg[k]);
			run_block(&tg[k], o, o->block_ms, false, dealer, reg);
		}
	} while (now_ns() < t_meas);
	t_end = now_ns() + (uint64_t)(o->seconds * 1e9);
	do {
		for (k = 0; k < n; k++) {
			only(tg, n, &tg[k]);
			run_block(&tg[k], o, o->block_ms, true, dealer, reg);
		}
		/* the first target against the second, block by block */
		if (n > 1 && npair < (1 << 16) && tg[1].blk[tg[1].nblk - 1] > 0)
			pair[npair++] = tg[0].blk[tg[0].nblk - 1] /
					tg[1].blk[tg[1].nblk - 1];
		nrounds++;
	} while (now_ns() < t_end);
	only(tg, n, NULL);
	stopped_tg = NULL;

	for (k = 0; k < n; k++) {
		struct target *t = &tg[k];
		double secs = (double)t->busy_ns / 1e9;

		qsort(t->lat.v, t->lat.n, sizeof(*t->lat.v), cmp_u64);
		printf("label=%s mode=%s op=%s target=%s ops=%" PRIu64
		       " seconds=%.2f ops_per_s=%.0f keys_per_s=%.0f "
		       "block_median_ops_per_s=%.0f blocks=%zu p50_us=%.1f "
		       "p99_us=%.1f req_bytes=%zu reply_bytes=%zu "
		       "errors=%" PRIu64 " total_ops=%" PRIu64,
		       t->label, o->mode, o->op, t->echo ? "echo" : "server",
		       t->ops, secs, secs > 0 ? (double)t->ops / secs : 0,
		       (secs > 0 ? (double)t->ops / secs : 0) *
			       (batch ? o->batch : 1),
		       median_dbl(t->blk, t->nblk), t->nblk,
		       t->lat.n ? t->lat.v[t->lat.n / 2] / 1e3 : 0.0,
		       t->lat.n ? t->lat.v[t->lat.n * 99 / 100] / 1e3 : 0.0,
		       t->req_bytes, t->reply_bytes, t->errs, t->total);
		if (k == 0 && n > 1)
			printf(" pair_ratio_median=%.3f pairs=%zu",
			       median_dbl(pair, npair), npair);
		if (k > 0) {
			size_t r, m = 0;

			/* round r measured block r of every target */
			for (r = 0;
			     r < t->nblk && r < tg[0].nblk && m < (1 << 16);
			     r++)
				if (tg[0].blk[r] > 0)
					pair[m++] = t->blk[r] / tg[0].blk[r];
			printf(" ratio_to_first_median=%.3f",
			       median_dbl(pair, m));
		}
		printf("\n");
		zmq_close(t->s);
		for (uint32_t j = 0; j < t->rg->n; j++)
			buf_free(&t->rg->b[j]);
		free(t->rg);
		free(t->lat.v);
	}
	for (k = 0; k < n; k++)
		free(tg[k].blk); /* the later targets' ratios read tg[0]'s */
	(void)nrounds;
	free(tg);
	free(pair);
	return 0;
}

/* ---- the floor: a bare ROUTER echo ---- */

static volatile sig_atomic_t stop;

static void on_sig(int sig)
{
	(void)sig;
	stop = 1;
}

static int cmd_echo(const struct opts *o)
{
	void *r = zmq_socket(zctx, ZMQ_ROUTER);
	uint8_t *reply = calloc(1, o->reply_size + MDS_HDR_SIZE);
	char ep[64];
	zmq_msg_t f[8];
	int nf, i, z = 0;

	if (!reply || o->reply_size < MDS_HDR_SIZE)
		return 1;
	/* a valid header; the payload bytes are never looked at */
	memset(reply + MDS_HDR_SIZE, 0xc0, o->reply_size - MDS_HDR_SIZE);
	zmq_setsockopt(r, ZMQ_LINGER, &z, sizeof(z));
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", o->port);
	if (zmq_bind(r, ep) < 0) {
		fprintf(stderr, "bind %s: %s\n", ep, zmq_strerror(errno));
		return 1;
	}
	signal(SIGTERM, on_sig);
	signal(SIGINT, on_sig);
	while (!stop) {
		nf = 0;
		do {
			zmq_msg_init(&f[nf]);
			if (zmq_msg_recv(&f[nf], r, 0) < 0)
				goto out;
			nf++;
		} while (zmq_msg_more(&f[nf - 1]) && nf < 8);
		/* header of the request body, with the response bit */
		if (zmq_msg_size(&f[nf - 1]) >= MDS_HDR_SIZE) {
			memcpy(reply, zmq_msg_data(&f[nf - 1]), MDS_HDR_SIZE);
			reply[3] |= 0x80;
			put_u32be(reply + 12,
				  (uint32_t)(o->reply_size - MDS_HDR_SIZE));
		}
		for (i = 0; i < nf - 1; i++)
			zmq_msg_send(&f[i], r, ZMQ_SNDMORE);
		zmq_send(r, reply, o->reply_size, 0);
		for (i = 0; i < nf; i++)
			zmq_msg_close(&f[i]);
	}
out:
	zmq_close(r);
	free(reply);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"url", required_argument, NULL, 'u'},
		{"mode", required_argument, NULL, 'm'},
		{"op", required_argument, NULL, 'o'},
		{"seconds", required_argument, NULL, 's'},
		{"warmup", required_argument, NULL, 'w'},
		{"inflight", required_argument, NULL, 'i'},
		{"batch", required_argument, NULL, 'b'},
		{"keys", required_argument, NULL, 'k'},
		{"port", required_argument, NULL, 'p'},
		{"reply-size", required_argument, NULL, 'r'},
		{"echo", no_argument, NULL, 'e'},
		{"run", required_argument, NULL, 'n'},
		{"target", required_argument, NULL, 't'},
		{"block-ms", required_argument, NULL, 'B'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {.url = "tcp://127.0.0.1:5555",
			 .mode = "req",
			 .op = "lookup",
			 .seconds = 3.0,
			 .warmup = 0.5,
			 .inflight = 64,
			 .batch = 256,
			 .keys = 10000,
			 .block_ms = 100.0};
	const char *cmd;
	int c, rc;

	/* as maru-server: without it the heap of the client and of the echo
	 * floors shrinks and regrows around every few batch replies */
	malloc_keep_freed();

	if (argc < 2) {
		fprintf(stderr, "usage: mds-load prefill|bench|echo [options]"
				" (see bench/mds_load.c)\n");
		return 2;
	}
	cmd = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'u':
			o.url = optarg;
			break;
		case 'm':
			o.mode = optarg;
			break;
		case 'o':
			o.op = optarg;
			break;
		case 's':
			o.seconds = atof(optarg);
			break;
		case 'w':
			o.warmup = atof(optarg);
			break;
		case 'i':
			o.inflight = atoi(optarg);
			break;
		case 'b':
			o.batch = atoi(optarg);
			break;
		case 'k':
			o.keys = strtoull(optarg, NULL, 10);
			break;
		case 'p':
			o.port = atoi(optarg);
			break;
		case 'r':
			o.reply_size = strtoul(optarg, NULL, 10);
			break;
		case 'e':
			o.echo = true;
			break;
		case 'n':
			o.run = strtoull(optarg, NULL, 10);
			break;
		case 't':
			if (o.ntargets == 8)
				return 2;
			o.targets[o.ntargets++] = optarg;
			break;
		case 'B':
			o.block_ms = atof(optarg);
			break;
		default:
			return 2;
		}
	}
	if (o.inflight < 1 || o.inflight > 512 || o.batch < 1 ||
	    o.batch > 65535 || !o.keys || o.run > 99 || o.block_ms <= 0)
		return 2;
	run_base = o.run * 100000000ull;
	zctx = zmq_ctx_new();
	if (!strcmp(cmd, "prefill"))
		rc = cmd_prefill(&o);
	else if (!strcmp(cmd, "bench"))
		rc = cmd_bench(&o);
	else if (!strcmp(cmd, "echo"))
		rc = cmd_echo(&o);
	else
		rc = 2;
	zmq_ctx_term(zctx);
	return rc;
}
