/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mt.h - marutop internals: samples of maru-server, rendering, the RPCs
 *
 * marutop is split in four, like pool_monitor:
 *   fetch.c   the connection to maru-server: libmaru's raw calls
 *             (maru_handler_call(), the library's one client of the
 *             metadata protocol), GET_USAGE and GET_STATS per sample
 *   decode.c  their replies, decoded leniently (msgpk.c) into a struct
 *             mt_snap (a field the server does not send stays MT_NA,
 *             shown as '-')
 *   render.c  pure functions: two samples -> rates; a sample -> the table
 *             (columns fitted to a width), CSV rows or JSON lines
 *   main.c    options, the watch loop, ncurses, keys, signals
 * decode.c and render.c are marutop_core (fuzzed without a server or
 * libmaru); fetch.c and main.c make the program.
 *
 * A snapshot owns its strings; nothing here keeps global state.
 * Context: single-threaded tool.
 */
#ifndef MARU_MARUTOP_MT_H
#define MARU_MARUTOP_MT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define MT_NA UINT64_MAX /* a field the server did not send */
#define MT_ERR_LEN 512

/*
 * The remote path (GET_STATS "remote", maru-server): clients of
 * maru-agent, whose bytes go over the network, and what they moved as
 * they reported it; MT_NA: the server sends no such figures
 */
struct mt_rt {
	uint64_t clients; /* remote clients now (0: the instance is local) */
	uint64_t puts, put_bytes;  /* pages written through the agent */
	uint64_t gets, get_bytes;  /* pages read through it */
	uint64_t errors;	   /* transfers that failed */
	double put_rate, get_rate; /* bytes/s since the previous sample; < 0 */
};

/* One instance as GET_USAGE (and stats_manager.clients) shows it. */
struct mt_inst {
	char *id;	    /* owns: NUL-terminated, control bytes as '?' */
	uint64_t regions;   /* regions it owns */
	uint64_t allocated; /* their bytes */
	uint64_t used;	    /* bytes of the KV entries in them */
	uint64_t held;	    /* bytes of the pages holding them (addition) */
	uint64_t pinned;    /* bytes of keys it pins (addition) */
	uint64_t keys;	    /* KV entries in its regions (addition) */
	uint64_t leases;    /* active leases (addition) */
	uint64_t conns;	    /* open connections (addition) */
	/*
	 * Stores and lookups: maru-server's own count (GET_USAGE "stores",
	 * "lookups": keys registered, keys looked up and found; @counted),
	 * else what its workers reported (REPORT_STATS, client_id ==
	 * instance id: "store" + "batch_store", "retrieve" +
	 * "batch_retrieve"); MT_NA: neither
	 */
	uint64_t stores;
	uint64_t lookups;
	uint64_t hits; /* ... of those that found their keys */
	uint64_t misses;
	bool counted;
	char *devices;	 /* owns: "path=bytes ..." or NULL (upstream's
			  * InstanceUsage.devices, when sent) */
	char *host;	 /* owns: where it runs, as its client said; NULL */
	uint64_t pid;	 /* ... its process id (MT_NA: not said) */
	struct mt_rt rt; /* GET_STATS "remote.instances" (0s: not listed) */
	/* rates from the previous sample (mt_rates); < 0: unknown */
	double store_rate, lookup_rate;
};

/* Operations counted in stats_manager.clients._all, for the totals line */
#define MT_MAX_OPS 16
struct mt_op {
	char name[24];
	uint64_t count;
	double lat_sum_us; /* cumulative latency_sum_us */
	double rate;	   /* per second since the previous sample; < 0 */
	double lat_us;	   /* mean latency since the previous sample; < 0 */
};

/*
 * The server's own count of one message type (GET_STATS "requests", a
 * maru-server addition): every outcome, and the cumulative latency
 * histogram over the bounds in mt_snap.lat_bounds_us (+Inf last)
 */
#define MT_MAX_REQS 40
#define MT_LAT_BUCKETS 17
struct mt_req {
	char name[24];
	uint64_t count; /* ok + error + abandoned */
	uint64_t buckets[MT_LAT_BUCKETS];
	double rate; /* per second since the previous sample; < 0 */
};

/* One sample: GET_USAGE + GET_STATS at @t_ns. Starts zeroed. */
struct mt_snap {
	uint64_t t_ns;	   /* now_ns() when taken */
	long long wall;	   /* time(NULL) when taken */
	struct mt_inst *v; /* owns: array of n, sorted by id */
	size_t n, cap;
	uint64_t pool_total, pool_free;		      /* GET_USAGE */
	uint64_t entries, kv_bytes, held_bytes;	      /* kv_manager */
	uint64_t nalloc, total_alloc, active_clients; /* allocation_manager */
	uint64_t evictions, evicted_bytes;	      /* eviction (addition) */
	uint64_t recovered_keys; /* journal.recovery.keys */
	/* GET_STATS "lookups" (maru-server): keys looked up, found; keys in
	 * batch lookups, found as a prefix */
	uint64_t lk_keys, lk_hits, lk_batch_keys, lk_prefix;
	double lookup_rate;	      /* per second; < 0 unknown */
	struct mt_op ops[MT_MAX_OPS]; /* _all operations */
	size_t nops;
	struct mt_req reqs[MT_MAX_REQS]; /* "requests" (none: nreqs 0) */
	size_t nreqs;
	double lat_bounds_us[MT_LAT_BUCKETS - 1];
	size_t nbounds;
	/* the server's latency over the interval, from the histograms:
	 * the bucket bound that holds the 50th / 99th percentile; < 0
	 * unknown, INFINITY above the last bound */
	double p50_us, p99_us;
	struct mt_rt rt;      /* GET_STATS "remote", pool-wide */
	double eviction_rate; /* per second; < 0 unknown */
	double elapsed;	      /* seconds since the previous sample; < 0 */
};

/* mt_host - "host:pid" (or what of it is known, "-") of @in into @out */
const char *mt_host(const struct mt_inst *in, char *out, size_t n);

/* mt_snap_init - an empty sample, every figure MT_NA (unknown) */
void mt_snap_init(struct mt_snap *s);
void mt_snap_free(struct mt_snap *s);

/* mt_rates - fill the rates of @cur from @prev (NULL: all unknown) */
void mt_rates(struct mt_snap *cur, const struct mt_snap *prev);

/* ---- the connection (fetch.c) ---- */

struct maru_config;
struct maru_handler;

struct mt_conn {
	char url[300];		 /* "tcp://host:port", for messages */
	struct maru_config *cfg; /* owns: server, timeout, keys */
	struct maru_handler *h;	 /* owns: made by the first mt_fetch() */
	bool curve;		 /* mt_conn_curve() gave keys */
};

/**
 * mt_conn_init - parse @url ("tcp://host:port" or "host:port")
 * @timeout_ms: each request's, connect included
 * Return: 0, -EINVAL (not host:port) or -ENOMEM.  Nothing is connected
 * yet; mt_conn_close() either way.
 */
int mt_conn_init(struct mt_conn *c, const char *url, int timeout_ms);
void mt_conn_close(struct mt_conn *c);

/**
 * mt_conn_curve - talk CURVE to a server started with
 * --curve-secret-key-file
 * @server_key: its public key, 40 Z85 characters or its .key file
 * @secret_file: our certificate (maru-keygen NAME: NAME.key_secret),
 *               whose public key is in the server's --curve-clients
 * Return: 0, or -errno / -EINVAL with @why naming the file.
 */
int mt_conn_curve(struct mt_conn *c, const char *server_key,
		  const char *secret_file, char *why, size_t whylen);

/**
 * mt_fetch - one sample: GET_USAGE and GET_STATS
 * @out: on success filled (release with mt_snap_free)
 * @err: one line on failure ("cannot reach maru-server at ...: ...")
 * Return: 0 or -errno; a connection that failed is made again by the
 * next call.
 */
int mt_fetch(struct mt_conn *c, struct mt_snap *out, char *err, size_t errlen);

/* ---- decoding (decode.c) ---- */

/**
 * mt_decode_usage / mt_decode_stats - fill @s from a reply payload
 * Unknown keys are skipped, missing ones stay MT_NA.
 * Return: 0, -EPROTO (not a map, an "error" reply) or -ENOMEM.
 */
int mt_decode_usage(struct mt_snap *s, const uint8_t *p, size_t n);
int mt_decode_stats(struct mt_snap *s, const uint8_t *p, size_t n);

/* ---- rendering (render.c) ---- */

enum mt_col {
	MT_C_ID,
	MT_C_REGIONS,
	MT_C_ALLOC,
	MT_C_USED,
	MT_C_HELD,
	MT_C_KEYS,
	MT_C_PINNED,
	MT_C_LEASE,
	MT_C_REMOTE, /* the remote path's three: shown when any is remote */
	MT_C_STORE_RATE,
	MT_C_LOOKUP_RATE,
	MT_C_HIT,
	MT_C_RPUT_RATE,
	MT_C_RGET_RATE,
	MT_C_STORES,
	MT_C_LOOKUPS,
	MT_C_HOST,
	MT_NCOLS,
};

/* the header text of column @c ("INSTANCE", "REGNS", ...) */
const char *mt_col_name(int c);

/* the lease state shown: "lease", "conn", "gone" or "-" (not sent) */
const char *mt_lease_state(const struct mt_inst *in);

/* the remote state shown: "agent" (remote clients now), "local" or "-"
 * (the server sends no remote figures) */
const char *mt_remote_state(const struct mt_inst *in);

/* does the sample have remote figures worth columns: a remote client,
 * or traffic reported by one? */
bool mt_remote_any(const struct mt_snap *s);

/* sort @s->v by column @col (ties: by id), descending if @rev */
void mt_sort(struct mt_snap *s, int col, bool rev);

/**
 * mt_render_table - append the screen: a title, the server totals, the
 * header and one row per instance, fitted to @width columns: columns are
 * dropped (the least important first) and the instance id shortened
 * (with '~') until a row fits; numbers are never cut.
 * @ts: borrowed timestamp text; @sort_col/@rev: marked in the header
 * Return: 0 or -ENOMEM.
 */
int mt_render_table(struct buf *b, const char *ts, const struct mt_snap *s,
		    int width, int sort_col, bool rev);

/**
 * mt_layout - the table's columns at @width: @show[c] whether column c is
 * shown, @wid[c] its width (the id's possibly shortened)
 */
void mt_layout(const struct mt_snap *s, int width, int sort,
	       size_t wid[MT_NCOLS], bool show[MT_NCOLS]);

/* mt_render_error - a frame with @msg instead of data */
int mt_render_error(struct buf *b, const char *ts, const char *msg);

/* mt_render_help - the keys, for '?' */
int mt_render_help(struct buf *b);

/* CSV: a header line, then one row per instance per sample; a missing
 * field is an empty cell */
int mt_render_csv_header(struct buf *b);
int mt_render_csv(struct buf *b, const char *ts, const struct mt_snap *s);

/* JSON lines: one object per instance per sample; a missing field is
 * null */
int mt_render_json(struct buf *b, const char *ts, const struct mt_snap *s);

#endif
