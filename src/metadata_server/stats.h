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

#endif
