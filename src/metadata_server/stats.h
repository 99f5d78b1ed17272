/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.h - the stats_manager of maru-server: REPORT_STATS accumulators
 * per (client id, operation) plus an "_all" aggregate per operation, with
 * cumulative and per-interval latency figures (docs/metadata-server.md,
 * Statistics)
 *
 * Bounded: at most STATS_MAX_ITEMS accumulators and STATS_MAX_NAME bytes
 * per client id or op name; entries beyond either are counted in
 * `dropped` and otherwise ignored, so no client can grow the server
 * without limit through REPORT_STATS.  A client's accumulators go when
 * the instance of that id leaves (stats_forget(), from store.c); those of
 * ids that never were an instance stay, within the bound.
 *
 * Also here: mds_reqstats, the server's own count of the requests it
 * handled, per message type and outcome, with a histogram of their service
 * time (GET_STATS "requests"; for maru-exporter).
 *
 * Context: single-threaded (the server's main thread).
 */
#ifndef MARU_MDS_STATS_H
#define MARU_MDS_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "index.h"
#include "msgpk.h"

#define STATS_MAX_ITEMS 65536
#define STATS_MAX_NAME 256

struct st_acc {
	uint64_t count;
	uint64_t hit;
	uint64_t miss;
	int64_t bytes;	      /* sum of reported sizes */
	double sum, min, max; /* latency, microseconds */
	uint64_t icount;      /* the same since the last GET_STATS */
	double isum, imin, imax;
};

struct st_item {
	char *client; /* owns; NULL for an "_all" item */
	uint32_t client_len;
	char *op; /* owns */
	uint32_t op_len;
	struct st_acc a;
};

struct mds_stats {
	struct ix map;	       /* (client, op) -> item index (entry slot) */
	struct st_item *items; /* owns: n used of cap */
	uint32_t n, cap;
	uint64_t dropped; /* entries ignored by the limits */
};

void stats_init(struct mds_stats *st, uint64_t seed);
void stats_destroy(struct mds_stats *st);

/**
 * stats_record - account one reported operation to its client and "_all"
 * Return: 0, or -ENOMEM / -ENOSPC when the entry was dropped.
 */
int stats_record(struct mds_stats *st, const char *client, uint32_t clen,
		 const char *op, uint32_t oplen, const char *result,
		 uint32_t rlen, int64_t size, double latency_us);

/**
 * stats_forget - drop every accumulator of @client (its instance left);
 * the "_all" aggregates keep what it reported
 */
void stats_forget(struct mds_stats *st, const char *client, uint32_t clen);

/**
 * stats_encode - append the value of "stats_manager" (a map) to @w, then
 * reset every interval accumulator (each GET_STATS starts an interval)
 * Return: 0 or -ENOMEM (the writer's error is set as well).
 */
int stats_encode(struct mds_stats *st, struct mp_wr *w);

/*
 * Requests by type and outcome, and their latency in the server: from
 * mds_handle() taking the request to its reply being built, time parked
 * waiting for the RM or for capacity included (time queued in the socket
 * before is not).  A request is counted once, when it is answered or
 * abandoned (its connection went away while it was parked).  Fixed size,
 * no allocation: every type the decoder knows has its slot, "invalid"
 * takes the rest (undecodable or unknown types).
 */
#define RQ_NBOUNDS 16 /* histogram upper bounds (rq_bounds_ns) + "+Inf" */
#define RQ_NTYPES 21  /* mds_msg_type's codes + "invalid" */

enum rq_outcome {
	RQ_OK,	      /* answered */
	RQ_ERROR,     /* answered with an error reply */
	RQ_ABANDONED, /* parked, and its connection went away */
	RQ_NOUT
};

struct rq_type {
	uint64_t n[RQ_NOUT];
	uint64_t sum_ns;		 /* service time, all outcomes */
	uint64_t bucket[RQ_NBOUNDS + 1]; /* not cumulative; last = +Inf */
};

struct mds_reqstats {
	struct rq_type t[RQ_NTYPES];
};

/* reqstats_record - account one request of header type @type */
void reqstats_record(struct mds_reqstats *r, uint8_t type, enum rq_outcome out,
		     uint64_t ns);

/**
 * reqstats_encode - append the value of GET_STATS "requests" (a map): the
 * bounds in microseconds, and per type seen, its counts by outcome, the
 * sum of service times in microseconds and cumulative bucket counts
 * (Prometheus' "le" convention; the last is the +Inf bucket = the count)
 */
void reqstats_encode(const struct mds_reqstats *r, struct mp_wr *w);

#endif
