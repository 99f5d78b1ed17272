/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pm.h - pool_monitor internals: pool snapshots, rendering, the STATS query
 *
 * pool_monitor is split in three so that the formatting can be unit tested
 * without a daemon or a terminal:
 *   render.c  pure functions: a snapshot (+ the previous one) -> text, for
 *             the table (docs/pool-monitor.md) and for CSV
 *   stats.c   asks the resource manager for STATS (through rm_client, the
 *             shared blocking client) and turns the reply into a sorted
 *             snapshot with a one-line error message on failure
 *   main.c    options, one-shot / watch loops, ncurses, signals
 *
 * A snapshot owns its strings; nothing here keeps global state.
 * Context: single-threaded tool.
 */
#ifndef MARU_POOL_MONITOR_PM_H
#define MARU_POOL_MONITOR_PM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "buf.h"
#include "rm_client.h"
#include "rm_proto.h"

#define PM_BAR_WIDTH 30 /* characters of '#'/'-' in the usage bar */
#define PM_TS_LEN 32	/* room for "YYYY-MM-DDTHH:MM:SS" */

/* One pool as the resource manager reported it. */
struct pm_pool {
	char *path;	      /* owns: malloc()ed, NUL-terminated, may be "" */
	uint32_t dax_type;    /* enum rm_dax_type; other values shown as ? */
	uint64_t total_bytes; /* usable bytes */
	uint64_t free_bytes;  /* bytes in free extents; above total_bytes
			       * only in a broken reply, then used = 0 */
};

/*
 * An owner of regions whose connections are all closed, as OWNERS
 * reported it: its regions are held for it (until it returns, or for its
 * grace period).
 */
struct pm_owner {
	char *id; /* owns: control bytes made '?' */
	uint32_t regions;
	uint64_t bytes;
	uint32_t hold_ms;    /* RM_HOLD_UNTIL_BACK: until it returns */
	uint64_t away_since; /* unix seconds */
};

/*
 * A maru-agent (--agent; docs/remote.md): what its STATS said, or why it
 * could not be asked.  The agents of a snapshot are in --agent order.
 */
struct pm_agent {
	char *url; /* owns */
	char *err; /* owns: NULL when @up */
	bool up;
	uint64_t sessions, regions, bytes_mapped, revoked;
	uint64_t put_bytes, get_bytes, refused; /* since it started */
};

/* All pools of one STATS reply, sorted by path (strcmp order), and the
 * owners that are away, sorted by id.  Starts zeroed:
 * struct pm_snap s = {0}; */
struct pm_snap {
	struct pm_pool *pools; /* owns: array of n */
	size_t n;
	size_t cap;	       /* allocated entries of pools */
	struct pm_owner *away; /* owns: array of naway */
	size_t naway, away_cap;
	struct pm_agent *agents; /* owns: array of nagents (--agent) */
	size_t nagents;
	uint64_t at_ns; /* when it was taken (CLOCK_MONOTONIC), for rates */
};

/**
 * pm_snap_add_owner - append a copy of one OWNERS record if it is away
 * (no connection); connected owners are not shown
 * Return: 0 or -ENOMEM.
 */
int pm_snap_add_owner(struct pm_snap *s, const struct rm_owner *o);

/* pm_snap_add_agent - append a copy of @a (url and err copied).
 * Return: 0 or -ENOMEM */
int pm_snap_add_agent(struct pm_snap *s, const struct pm_agent *a);

/* pm_snap_free - release the pools; @s is empty and reusable afterwards */
void pm_snap_free(struct pm_snap *s);

/* pm_pool_used - total_bytes - free_bytes, 0 if free exceeds total */
uint64_t pm_pool_used(const struct pm_pool *p);

/**
 * pm_snap_add - append a copy of one STATS record
 * @st: borrowed; its path is copied (control bytes become '?')
 * Return: 0 or -ENOMEM (then @s is unchanged).
 */
int pm_snap_add(struct pm_snap *s, const struct rm_pool_stat *st);

/* pm_snap_sort - sort the pools by path, as every output shows them */
void pm_snap_sort(struct pm_snap *s);

/**
 * pm_timestamp - local time as ISO-8601 to the second, "2026-03-11T14:30:05"
 * @out: at least PM_TS_LEN bytes
 */
void pm_timestamp(time_t t, char *out, size_t outlen);

/**
 * pm_usage_bar - "[#####-------...] 16.7%" (30 characters inside the
 * brackets), or "[??????...]" when @total is 0
 * @out: at least PM_BAR_WIDTH + 16 bytes
 */
char *pm_usage_bar(uint64_t used, uint64_t total, char *out, size_t outlen);

/* How a table is laid out (docs/pool-monitor.md, "Fitting the window"). */
struct pm_view {
	size_t width; /* columns of the window; 0 = no limit (a pipe) */
	bool live;    /* the ncurses view: the title names q and ? */
};

/**
 * pm_render_view - append one table frame to @b, fitted to @v->width
 * @ts: borrowed, timestamp text for the title
 * @cur: borrowed, the pools to show
 * @prev: borrowed, the previous frame's pools for the Delta column, or NULL
 *        (then Delta is blank everywhere)
 * @v: borrowed, or NULL for no width limit and the plain title
 *
 * Column widths follow the content.  When the table is wider than
 * @v->width, the steps of render.c's steps[] are applied in order (number
 * padding, shorter bar, Device paths elided in the middle with U+2026,
 * Type, Delta, the bar and Free dropped) until it fits; a number is never
 * cut.  Every line is at most @v->width columns (one per character).
 *
 * Lines: title, blank, header, dashes, one row per pool; or title, blank,
 * "  (no pools found)".  Every line ends in '\n'.
 * Return: 0 or -ENOMEM.
 */
int pm_render_view(struct buf *b, const char *ts, const struct pm_snap *cur,
		   const struct pm_snap *prev, const struct pm_view *v);

/* pm_render_table - pm_render_view() without a width limit, plain title */
int pm_render_table(struct buf *b, const char *ts, const struct pm_snap *cur,
		    const struct pm_snap *prev);

/**
 * pm_render_error_view - append a frame that shows @msg instead of the
 * pools (watch mode, while the daemon is unreachable); @v as above
 * Return: 0 or -ENOMEM.
 */
int pm_render_error_view(struct buf *b, const char *ts, const char *msg,
			 const struct pm_view *v);

/* pm_render_error - pm_render_error_view() with no width limit */
int pm_render_error(struct buf *b, const char *ts, const char *msg);
/* pm_render_csv_header - append the CSV header line. Return: 0 or -ENOMEM */
int pm_render_csv_header(struct buf *b);

/**
 * pm_render_csv - append one CSV row per pool (sorted by path)
 * Paths that contain a comma, a quote or a line break are quoted as in
 * RFC 4180, so any CSV reader gets the path back.
 * Return: 0 or -ENOMEM.
 */
int pm_render_csv(struct buf *b, const char *ts, const struct pm_snap *cur);

/**
 * pm_release - RELEASE the regions of the absent owner @id
 * @msg: one line saying what happened (released, or why not)
 * Return: 0 or -errno (as rm_client_release()).
 */
int pm_release(struct rm_client *c, const char *id, char *msg, size_t len);

/**
 * pm_fetch - ask the resource manager for STATS (and OWNERS, when it
 * knows that message)
 * @c: borrowed, an initialised client; it keeps its connection between
 *     calls and reconnects by itself after an error
 * @out: on success gives a sorted snapshot; release with pm_snap_free()
 * @err: on failure filled with one line (no newline) that says what went
 *       wrong and where, e.g. "cannot reach the resource manager at
 *       127.0.0.1:9850: Connection refused"
 *
 * Return: 0 or -errno (transport errors as the system reports them, -EPROTO
 * for a reply that is not a valid STATS_RESP, or the status of an
 * ERROR_RESP).  *@out is untouched on error.
 */
int pm_fetch(struct rm_client *c, struct pm_snap *out, char *err,
	     size_t errlen);

#endif
