/* SPDX-License-Identifier: Apache-2.0 */
/*
 * render.c - marutop's text: the table, CSV and JSON lines (docs/marutop.md)
 *
 * Pure functions over samples.  The table fits a width: every column is
 * as wide as its widest cell (header included); while a row is wider than
 * the screen, columns go in a fixed order (the least telling first:
 * cumulative counts, regions, pinned, used, lease ...) and then the
 * instance id is shortened with a '~' down to 8 characters.  A number is
 * never cut: a column is either shown whole or not at all.  The totals
 * above the table are segments that wrap at the width.
 *
 * Context: pure; any thread.
 */
#include "mt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MT_ID_MIN 8 /* the shortest instance id shown ("INSTANCE") */
#define MT_CELL 96  /* the longest cell but the id (a host:pid) */

static const char *const col_names[MT_NCOLS] = {
	[MT_C_ID] = "INSTANCE",
	[MT_C_REGIONS] = "REGIONS",
	[MT_C_ALLOC] = "ALLOC",
	[MT_C_USED] = "USED",
	[MT_C_HELD] = "HELD",
	[MT_C_KEYS] = "KEYS",
	[MT_C_PINNED] = "PINNED",
	[MT_C_LEASE] = "LEASE",
	[MT_C_REMOTE] = "REMOTE",
	[MT_C_STORE_RATE] = "STORE/s",
	[MT_C_LOOKUP_RATE] = "LOOKUP/s",
	[MT_C_HIT] = "HIT%",
	[MT_C_RPUT_RATE] = "RPUT/s",
	[MT_C_RGET_RATE] = "RGET/s",
	[MT_C_STORES] = "STORES",
	[MT_C_LOOKUPS] = "LOOKUPS",
	[MT_C_HOST] = "HOST",
};

/* the order in which columns go when the screen is narrow (the remote
 * path's, when shown, after the lease: the rates, then the marker that
 * tells a remote instance from a local one) */
static const int drop_order[] = {
	MT_C_HOST,	  MT_C_LOOKUPS,	   MT_C_STORES, MT_C_HELD,
	MT_C_REGIONS,	  MT_C_PINNED,	   MT_C_USED,	MT_C_LEASE,
	MT_C_RGET_RATE,	  MT_C_RPUT_RATE,  MT_C_REMOTE, MT_C_HIT,
	MT_C_LOOKUP_RATE, MT_C_STORE_RATE, MT_C_KEYS,
};
#define MT_NDROP ((int)(sizeof(drop_order) / sizeof(drop_order[0])))

const char *mt_col_name(int c)
{
	return c >= 0 && c < MT_NCOLS ? col_names[c] : "?";
}

const char *mt_lease_state(const struct mt_inst *in)
{
	if (in->leases == MT_NA && in->conns == MT_NA)
		return "-";
	if (in->leases != MT_NA && in->leases)
		return "lease";
	if (in->conns != MT_NA && in->conns)
		return "conn";
	return "gone";
}

const char *mt_remote_state(const struct mt_inst *in)
{
	if (in->rt.clients == MT_NA)
		return "-";
	return in->rt.clients ? "agent" : "local";
}

bool mt_remote_any(const struct mt_snap *s)
{
	const struct mt_rt *r = &s->rt;

	if (r->clients == MT_NA)
		return false;
	return r->clients || (r->puts && r->puts != MT_NA) ||
	       (r->gets && r->gets != MT_NA) ||
	       (r->errors && r->errors != MT_NA);
}

const char *mt_host(const struct mt_inst *in, char *out, size_t n)
{
	if (in->host && in->pid != MT_NA)
		snprintf(out, n, "%s:%" PRIu64, in->host, in->pid);
	else if (in->host)
		snprintf(out, n, "%s", in->host);
	else if (in->pid != MT_NA)
		snprintf(out, n, ":%" PRIu64, in->pid);
	else
		snprintf(out, n, "-");
	return out;
}

/* hit ratio in [0, 1], or < 0 when unknown */
static double hit_ratio(const struct mt_inst *in)
{
	if (in->hits == MT_NA || in->misses == MT_NA ||
	    in->hits + in->misses == 0)
		return -1;
	return (double)in->hits / (double)(in->hits + in->misses);
}

/*
 * The server's request rates, and its latency percentiles over the
 * interval: the interval's histogram is the difference of the cumulative
 * ones, summed over the types; a percentile is the bound of the first
 * bucket that holds it (INFINITY past the last bound).
 */
static double percentile(const uint64_t *h, const double *bounds,
			 size_t nbounds, double q)
{
	uint64_t total = h[MT_LAT_BUCKETS - 1];
	size_t i;

	if (!total)
		return -1;
	for (i = 0; i < nbounds && i < MT_LAT_BUCKETS - 1; i++)
		if ((double)h[i] >= q * (double)total)
			return bounds[i];
	return INFINITY;
}

static void req_rates(struct mt_snap *cur, const struct mt_snap *prev,
		      double dt)
{
	uint64_t h[MT_LAT_BUCKETS] = {0};
	size_t i, j, b;

	for (i = 0; i < cur->nreqs; i++) {
		struct mt_req *o = &cur->reqs[i];
		const struct mt_req *q = NULL;

		for (j = 0; j < prev->nreqs && !q; j++)
			if (!strcmp(prev->reqs[j].name, o->name))
				q = &prev->reqs[j];
		if (q && q->count > o->count)
			continue; /* a restarted server: no rate */
		o->rate = (double)(o->count - (q ? q->count : 0)) / dt;
		for (b = 0; b < MT_LAT_BUCKETS; b++)
			if (!q || o->buckets[b] >= q->buckets[b])
				h[b] += o->buckets[b] - (q ? q->buckets[b] : 0);
	}
	cur->p50_us = percentile(h, cur->lat_bounds_us, cur->nbounds, 0.50);
	cur->p99_us = percentile(h, cur->lat_bounds_us, cur->nbounds, 0.99);
}

/* bytes per second of counter @c over @dt since @p; < 0: unknown (either
 * not sent, or it went back: a restarted server) */
static double byte_rate(uint64_t c, uint64_t p, double dt)
{
	if (c == MT_NA || p == MT_NA || c < p)
		return -1;
	return (double)(c - p) / dt;
}

static void rt_rates(struct mt_rt *c, const struct mt_rt *p, double dt)
{
	c->put_rate = byte_rate(c->put_bytes, p->put_bytes, dt);
	c->get_rate = byte_rate(c->get_bytes, p->get_bytes, dt);
}

void mt_rates(struct mt_snap *cur, const struct mt_snap *prev)
{
	double dt;
	size_t i, j;

	cur->eviction_rate = cur->elapsed = cur->lookup_rate = -1;
	for (i = 0; i < cur->n; i++) {
		cur->v[i].store_rate = cur->v[i].lookup_rate = -1;
		cur->v[i].rt.put_rate = cur->v[i].rt.get_rate = -1;
	}
	cur->rt.put_rate = cur->rt.get_rate = -1;
	for (i = 0; i < cur->nops; i++)
		cur->ops[i].rate = cur->ops[i].lat_us = -1;
	for (i = 0; i < cur->nreqs; i++)
		cur->reqs[i].rate = -1;
	cur->p50_us = cur->p99_us = -1;
	if (!prev || cur->t_ns <= prev->t_ns)
		return;
	dt = (double)(cur->t_ns - prev->t_ns) / 1e9;
	cur->elapsed = dt;
	for (i = 0; i < cur->n; i++) {
		struct mt_inst *c = &cur->v[i];
		const struct mt_inst *p = NULL;

		for (j = 0; j < prev->n && !p; j++)
			if (!strcmp(prev->v[j].id, c->id))
				p = &prev->v[j];
		/* no rate for an instance new since the last sample */
		if (!p)
			continue;
		if (c->stores != MT_NA && p->stores != MT_NA &&
		    p->stores <= c->stores)
			c->store_rate = (double)(c->stores - p->stores) / dt;
		if (c->lookups != MT_NA && p->lookups != MT_NA &&
		    p->lookups <= c->lookups)
			c->lookup_rate = (double)(c->lookups - p->lookups) / dt;
		rt_rates(&c->rt, &p->rt, dt);
	}
	rt_rates(&cur->rt, &prev->rt, dt);
	for (i = 0; i < cur->nops; i++) {
		struct mt_op *o = &cur->ops[i];

		for (j = 0; j < prev->nops; j++) {
			const struct mt_op *q = &prev->ops[j];

			if (strcmp(q->name, o->name) || q->count > o->count)
				continue;
			o->rate = (double)(o->count - q->count) / dt;
			if (o->count > q->count)
				o->lat_us = (o->lat_sum_us - q->lat_sum_us) /
					    (double)(o->count - q->count);
		}
		/* an op first seen now counted from 0 */
		if (o->rate < 0 && prev->nops)
			o->rate = (double)o->count / dt;
	}
	if (cur->lk_keys != MT_NA && prev->lk_keys != MT_NA &&
	    cur->lk_keys >= prev->lk_keys)
		cur->lookup_rate = (double)(cur->lk_keys - prev->lk_keys) / dt;
	if (cur->evictions != MT_NA && prev->evictions != MT_NA &&
	    cur->evictions >= prev->evictions)
		cur->eviction_rate =
			(double)(cur->evictions - prev->evictions) / dt;
	req_rates(cur, prev, dt);
}

/* ---- sorting ---- */

struct sort_by {
	int col;
	bool rev;
};

static double sort_val(const struct mt_inst *in, int c)
{
	uint64_t v;

	switch (c) {
	case MT_C_REGIONS:
		v = in->regions;
		break;
	case MT_C_ALLOC:
		v = in->allocated;
		break;
	case MT_C_USED:
		v = in->used;
		break;
	case MT_C_HELD:
		v = in->held;
		break;
	case MT_C_KEYS:
		v = in->keys;
		break;
	case MT_C_PINNED:
		v = in->pinned;
		break;
	case MT_C_STORES:
		v = in->stores;
		break;
	case MT_C_LOOKUPS:
		v = in->lookups;
		break;
	case MT_C_STORE_RATE:
		return in->store_rate;
	case MT_C_LOOKUP_RATE:
		return in->lookup_rate;
	case MT_C_HIT:
		return hit_ratio(in);
	case MT_C_LEASE:
		return in->leases == MT_NA ? -1 : (double)in->leases;
	case MT_C_REMOTE:
		v = in->rt.clients;
		break;
	case MT_C_RPUT_RATE:
		return in->rt.put_rate;
	case MT_C_RGET_RATE:
		return in->rt.get_rate;
	default:
		return 0;
	}
	return v == MT_NA ? -1 : (double)v;
}

/* the id ascending by default; numbers descending (biggest first) */
static int cmp_inst(const void *a, const void *b, void *arg)
{
	const struct mt_inst *x = a, *y = b;
	const struct sort_by *by = arg;
	double dx, dy;
	int c = 0;

	if (by->col == MT_C_HOST) {
		char hx[MT_CELL], hy[MT_CELL];

		c = strcmp(mt_host(x, hx, sizeof(hx)),
			   mt_host(y, hy, sizeof(hy)));
	} else if (by->col != MT_C_ID) {
		dx = sort_val(x, by->col);
		dy = sort_val(y, by->col);
		c = dx < dy ? 1 : dx > dy ? -1 : 0;
	}
	if (!c)
		c = strcmp(x->id, y->id);
	return by->rev ? -c : c;
}

void mt_sort(struct mt_snap *s, int col, bool rev)
{
	struct sort_by by = {col, rev};

	if (s->n)
		qsort_r(s->v, s->n, sizeof(*s->v), cmp_inst, &by);
}

/* ---- the table ---- */

static int bprintf(struct buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int bprintf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	char tmp[1024];
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	return buf_put(b, tmp,
		       (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static char *fmt_u(uint64_t v, char *out, size_t n)
{
	if (v == MT_NA)
		snprintf(out, n, "-");
	else
		snprintf(out, n, "%" PRIu64, v);
	return out;
}

static char *fmt_b(uint64_t v, char *out, size_t n)
{
	if (v == MT_NA)
		snprintf(out, n, "-");
	else
		format_bytes(v, out, n);
	return out;
}

static char *fmt_rate(double v, char *out, size_t n)
{
	if (v < 0)
		snprintf(out, n, "-");
	else
		snprintf(out, n, "%.1f", v);
	return out;
}

/* bytes per second as bytes ("1.5M"; the header or a caller says /s) */
static char *fmt_brate(double v, char *out, size_t n)
{
	if (v < 0)
		snprintf(out, n, "-");
	else
		format_bytes(v < 0x1p63 ? (uint64_t)(v + 0.5) : UINT64_MAX, out,
			     n);
	return out;
}

/* the text of cell (@in, @c), for every column but the id */
static const char *cell(const struct mt_inst *in, int c, char *out, size_t n)
{
	double h;

	switch (c) {
	case MT_C_REGIONS:
		return fmt_u(in->regions, out, n);
	case MT_C_ALLOC:
		return fmt_b(in->allocated, out, n);
	case MT_C_USED:
		return fmt_b(in->used, out, n);
	case MT_C_HELD:
		return fmt_b(in->held, out, n);
	case MT_C_KEYS:
		return fmt_u(in->keys, out, n);
	case MT_C_PINNED:
		return fmt_b(in->pinned, out, n);
	case MT_C_LEASE:
		return mt_lease_state(in);
	case MT_C_REMOTE:
		return mt_remote_state(in);
	case MT_C_RPUT_RATE:
		return fmt_brate(in->rt.put_rate, out, n);
	case MT_C_RGET_RATE:
		return fmt_brate(in->rt.get_rate, out, n);
	case MT_C_STORE_RATE:
		return fmt_rate(in->store_rate, out, n);
	case MT_C_LOOKUP_RATE:
		return fmt_rate(in->lookup_rate, out, n);
	case MT_C_HIT:
		h = hit_ratio(in);
		return fmt_rate(h < 0 ? -1 : h * 100.0, out, n);
	case MT_C_STORES:
		return fmt_u(in->stores, out, n);
	case MT_C_LOOKUPS:
		return fmt_u(in->lookups, out, n);
	case MT_C_HOST:
		return mt_host(in, out, n);
	default:
		return "";
	}
}

/* Append @seg to the line in @b that started at @line0, wrapping at @width. */
static int seg(struct buf *b, size_t *line0, int width, const char *text)
{
	size_t used = b->len - *line0, n = strlen(text);
	int rc = 0;

	if (used && used + 3 + n > (size_t)width) {
		rc = buf_put(b, "\n  ", 3);
		*line0 = b->len - 2;
	} else if (used) {
		rc = buf_put(b, " | ", 3);
	}
	return rc ? rc : buf_put(b, text, n);
}

/* a percentile bound for the totals line: "<=25us", ">100ms", "-" */
static const char *fmt_lat(double us, char *out, size_t n)
{
	if (us < 0)
		snprintf(out, n, "-");
	else if (isinf(us))
		snprintf(out, n, ">last");
	else if (us >= 1000)
		snprintf(out, n, "<=%gms", us / 1000);
	else
		snprintf(out, n, "<=%gus", us);
	return out;
}

/* @num of @den as "12.5%" ("-": unknown or none) */
static const char *fmt_pct(uint64_t num, uint64_t den, char *out, size_t n)
{
	if (num == MT_NA || den == MT_NA || !den || num > den)
		snprintf(out, n, "-");
	else
		snprintf(out, n, "%.1f%%", 100.0 * (double)num / (double)den);
	return out;
}

static int render_totals(struct buf *b, const struct mt_snap *s, int width)
{
	char t[512], x[MT_CELL], y[MT_CELL], z[MT_CELL], z2[MT_CELL];
	size_t line0 = b->len, i;
	double dl = 0, w = 0;
	int rc;

	snprintf(t, sizeof(t), "pool %s total, %s free",
		 fmt_b(s->pool_total, x, sizeof(x)),
		 fmt_b(s->pool_free, y, sizeof(y)));
	rc = seg(b, &line0, width, t);
	/* the bytes stored, and (maru-server) the pages they take */
	if (s->held_bytes != MT_NA)
		snprintf(t, sizeof(t), "keys %s (%s in %s of pages)",
			 fmt_u(s->entries, x, sizeof(x)),
			 fmt_b(s->kv_bytes, y, sizeof(y)),
			 fmt_b(s->held_bytes, z, sizeof(z)));
	else
		snprintf(t, sizeof(t), "keys %s (%s)",
			 fmt_u(s->entries, x, sizeof(x)),
			 fmt_b(s->kv_bytes, y, sizeof(y)));
	rc = rc ? rc : seg(b, &line0, width, t);
	snprintf(t, sizeof(t), "regions %s (%s)",
		 fmt_u(s->nalloc, x, sizeof(x)),
		 fmt_b(s->total_alloc, y, sizeof(y)));
	rc = rc ? rc : seg(b, &line0, width, t);
	snprintf(t, sizeof(t), "instances %zu, clients %s", s->n,
		 fmt_u(s->active_clients, x, sizeof(x)));
	rc = rc ? rc : seg(b, &line0, width, t);
	rc = rc ? rc : buf_put(b, "\n", 1);
	line0 = b->len;
	/* requests/s by type: the server's own count (maru-server), else
	 * what the clients reported */
	for (i = 0; i < s->nreqs && rc == 0; i++) {
		if (s->reqs[i].rate == 0)
			continue; /* idle types: the line stays short */
		snprintf(t, sizeof(t), "%s %s/s", s->reqs[i].name,
			 fmt_rate(s->reqs[i].rate, x, sizeof(x)));
		rc = seg(b, &line0, width, t);
	}
	for (i = 0; !s->nreqs && i < s->nops && rc == 0; i++) {
		snprintf(t, sizeof(t), "%s %s/s", s->ops[i].name,
			 fmt_rate(s->ops[i].rate, x, sizeof(x)));
		rc = seg(b, &line0, width, t);
	}
	if (!s->nops && !s->nreqs)
		rc = rc ? rc : seg(b, &line0, width, "ops/s -");
	/* mean latency since the previous sample, weighted by op rates */
	for (i = 0; i < s->nops; i++)
		if (s->ops[i].lat_us >= 0 && s->ops[i].rate > 0) {
			dl += s->ops[i].lat_us * s->ops[i].rate;
			w += s->ops[i].rate;
		}
	/* (only where workers report their operations: MARU_STAT) */
	if (w > 0)
		snprintf(z, sizeof(z), "avg %.1fus ", dl / w);
	else if (s->nops)
		snprintf(z, sizeof(z), "avg - ");
	else
		z[0] = '\0';
	/* percentiles: the server's histogram (a bucket bound, "<=") */
	snprintf(t, sizeof(t), "latency %sp50 %s p99 %s", z,
		 fmt_lat(s->p50_us, x, sizeof(x)),
		 fmt_lat(s->p99_us, y, sizeof(y)));
	rc = rc ? rc : seg(b, &line0, width, t);
	/* lookups pool-wide, the server's count: hits of keys, and of the
	 * keys in batch lookups those found as a prefix */
	if (s->lk_keys != MT_NA) {
		snprintf(t, sizeof(t), "lookups %s (%s/s) hit %s prefix %s",
			 fmt_u(s->lk_keys, x, sizeof(x)),
			 fmt_rate(s->lookup_rate, y, sizeof(y)),
			 fmt_pct(s->lk_hits, s->lk_keys, z, sizeof(z)),
			 fmt_pct(s->lk_prefix, s->lk_batch_keys, z2,
				 sizeof(z2)));
		rc = rc ? rc : seg(b, &line0, width, t);
	}
	/* clients of maru-agent: their bytes over the network, as they
	 * reported them (only when there are any) */
	if (mt_remote_any(s)) {
		char p1[24], p2[24], g1[24], g2[24];

		snprintf(t, sizeof(t),
			 "remote clients %s put %s (%s/s) get %s (%s/s) "
			 "errors %s",
			 fmt_u(s->rt.clients, x, sizeof(x)),
			 fmt_b(s->rt.put_bytes, p1, sizeof(p1)),
			 fmt_brate(s->rt.put_rate, p2, sizeof(p2)),
			 fmt_b(s->rt.get_bytes, g1, sizeof(g1)),
			 fmt_brate(s->rt.get_rate, g2, sizeof(g2)),
			 fmt_u(s->rt.errors, y, sizeof(y)));
		rc = rc ? rc : seg(b, &line0, width, t);
	}
	snprintf(t, sizeof(t), "evictions %s (%s/s)",
		 fmt_u(s->evictions, x, sizeof(x)),
		 fmt_rate(s->eviction_rate, y, sizeof(y)));
	rc = rc ? rc : seg(b, &line0, width, t);
	snprintf(t, sizeof(t), "recovered keys %s",
		 fmt_u(s->recovered_keys, x, sizeof(x)));
	rc = rc ? rc : seg(b, &line0, width, t);
	return rc ? rc : buf_put(b, "\n", 1);
}

/* @id shortened to @w characters: head, '~', tail */
static void short_id(const char *id, size_t w, char *out, size_t cap)
{
	size_t n = strlen(id), head, tail;

	if (n <= w || w < 3) {
		snprintf(out, cap, "%s", id);
		return;
	}
	head = (w - 1) / 2;
	tail = w - 1 - head;
	snprintf(out, cap, "%.*s~%s", (int)head, id, id + n - tail);
}

void mt_layout(const struct mt_snap *s, int width, int sort,
	       size_t wid[MT_NCOLS], bool show[MT_NCOLS])
{
	char tmp[MT_CELL];
	size_t total, i, len, idmin;
	int c, d;

	for (c = 0; c < MT_NCOLS; c++) {
		show[c] = true;
		wid[c] = strlen(col_names[c]);
		if (c == sort)
			wid[c]++; /* the sort mark */
	}
	/* the remote path's columns only where some client uses an agent:
	 * a pool of local workers keeps its table */
	if (!mt_remote_any(s))
		show[MT_C_REMOTE] = show[MT_C_RPUT_RATE] =
			show[MT_C_RGET_RATE] = false;
	for (i = 0; i < s->n; i++) {
		len = strlen(s->v[i].id);
		if (len > wid[MT_C_ID])
			wid[MT_C_ID] = len;
		for (c = 1; c < MT_NCOLS; c++) {
			len = strlen(cell(&s->v[i], c, tmp, sizeof(tmp)));
			if (len > wid[c])
				wid[c] = len;
		}
	}
	idmin = MT_ID_MIN + (sort == MT_C_ID); /* "INSTANCEv" */
	/* drop columns, then shorten the id, then drop the last ones */
	for (d = 0;;) {
		total = 0;
		for (c = 0; c < MT_NCOLS; c++)
			if (show[c])
				total += wid[c] + (c ? 2 : 0);
		if (total <= (size_t)width)
			break;
		if (d < MT_NDROP - 4) {
			show[drop_order[d++]] = false;
		} else if (wid[MT_C_ID] > idmin) {
			len = total - (size_t)width;
			wid[MT_C_ID] = wid[MT_C_ID] - idmin > len
					       ? wid[MT_C_ID] - len
					       : idmin;
		} else if (d < MT_NDROP) {
			show[drop_order[d++]] = false;
		} else {
			break; /* INSTANCE and ALLOC always stay */
		}
	}
}

/* "id:" and "  PATH  BYTES" for each of in->devices ("path=bytes ...") */
static int render_devices(struct buf *b, const struct mt_inst *in, bool *hdr)
{
	char tok[320], nb[MT_CELL], *eq;
	const char *p = in->devices, *sp;
	uint64_t v;
	int rc = 0;

	if (!*hdr)
		rc = bprintf(b, "\nDEVICES\n");
	*hdr = true;
	rc = rc ? rc : bprintf(b, "%s:\n", in->id);
	while (rc == 0 && *p) {
		sp = strchr(p, ' ');
		snprintf(tok, sizeof(tok), "%.*s",
			 (int)(sp ? (size_t)(sp - p) : strlen(p)), p);
		eq = strrchr(tok, '=');
		if (eq) {
			*eq++ = '\0';
			v = strcmp(eq, "-") ? strtoull(eq, NULL, 10) : MT_NA;
			rc = bprintf(b, "  %s  %s\n", tok,
				     fmt_b(v, nb, sizeof(nb)));
		} else {
			rc = bprintf(b, "  %s\n", tok);
		}
		p = sp ? sp + 1 : p + strlen(p);
	}
	return rc;
}

int mt_render_table(struct buf *b, const char *title, const struct mt_snap *s,
		    int width, int sort, bool rev)
{
	bool dev = false;
	size_t wid[MT_NCOLS], i;
	bool show[MT_NCOLS];
	char tmp[MT_CELL], idb[512];
	const char *txt;
	int c, rc;

	if (width < 20)
		width = 20;
	rc = bprintf(b, "%s\n", title);
	rc = rc ? rc : render_totals(b, s, width);
	if (rc)
		return rc;
	mt_layout(s, width, sort, wid, show);
	rc = buf_put(b, "\n", 1);
	for (c = 0; c < MT_NCOLS && rc == 0; c++) {
		char h[32];

		if (!show[c])
			continue;
		snprintf(h, sizeof(h), "%s%s", col_names[c],
			 c == sort ? (rev ? "^" : "v") : "");
		if (c == MT_C_ID || c == MT_C_LEASE || c == MT_C_REMOTE ||
		    c == MT_C_HOST)
			rc = bprintf(b, "%s%-*s", c ? "  " : "", (int)wid[c],
				     h);
		else
			rc = bprintf(b, "  %*s", (int)wid[c], h);
	}
	while (rc == 0 && b->len && b->data[b->len - 1] == ' ')
		b->len--;
	rc = rc ? rc : buf_put(b, "\n", 1);
	if (!s->n)
		rc = rc ? rc : bprintf(b, "  (no instances)\n");
	for (i = 0; i < s->n && rc == 0; i++) {
		short_id(s->v[i].id, wid[MT_C_ID], idb, sizeof(idb));
		rc = bprintf(b, "%-*s", (int)wid[MT_C_ID], idb);
		for (c = 1; c < MT_NCOLS && rc == 0; c++) {
			if (!show[c])
				continue;
			txt = cell(&s->v[i], c, tmp, sizeof(tmp));
			if (c == MT_C_LEASE || c == MT_C_REMOTE ||
			    c == MT_C_HOST)
				rc = bprintf(b, "  %-*s", (int)wid[c], txt);
			else
				rc = bprintf(b, "  %*s", (int)wid[c], txt);
		}
		/* trailing blanks of a left-aligned last column */
		while (rc == 0 && b->len && b->data[b->len - 1] == ' ')
			b->len--;
		rc = rc ? rc : buf_put(b, "\n", 1);
	}
	/* upstream's devices map, when a server sends it: a line each */
	for (i = 0; i < s->n && rc == 0; i++)
		if (s->v[i].devices)
			rc = render_devices(b, &s->v[i], &dev);
	return rc;
}

int mt_render_error(struct buf *b, const char *title, const char *msg)
{
	return bprintf(b, "%s\n\n  %s\n", title, msg);
}

int mt_render_help(struct buf *b)
{
	static const char text[] =
		"marutop keys\n"
		"\n"
		"  s        sort by the next column\n"
		"  < >      sort by the column left / right of the current\n"
		"  r        reverse the sort order\n"
		"  space    refresh now\n"
		"  ?        this help (any key returns)\n"
		"  q        quit (also Ctrl+C)\n"
		"\n"
		"Columns: INSTANCE id, REGIONS owned, ALLOC bytes of them,\n"
		"USED bytes of its keys, HELD bytes of the pages they take,\n"
		"KEYS stored in its regions, PINNED\n"
		"bytes it pins, LEASE lease|conn|gone, STORE/s LOOKUP/s rates\n"
		"(keys), HIT% of its lookups, STORES LOOKUPS since it "
		"started,\n"
		"HOST:pid where its client says it runs.  With clients of\n"
		"maru-agent: REMOTE agent|local, RPUT/s RGET/s bytes they\n"
		"write and read through it.\n"
		"'-': the server does not send it (docs/marutop.md).\n";

	return buf_put(b, text, sizeof(text) - 1);
}

/* ---- CSV and JSON ---- */

#define CSV_HEADER                                                             \
	"timestamp,instance_id,regions,allocated_bytes,used_bytes,held_bytes," \
	"keys,"                                                                \
	"pinned_bytes,leases,connections,lease_state,stores,lookups,hits,"     \
	"misses,store_rate,lookup_rate,hit_ratio,elapsed_s,devices,host,"      \
	"pid,remote_clients,remote_puts,remote_put_bytes,remote_gets,"         \
	"remote_get_bytes,remote_errors,remote_put_rate,remote_get_rate\n"

int mt_render_csv_header(struct buf *b)
{
	return buf_put(b, CSV_HEADER, sizeof(CSV_HEADER) - 1);
}

/* a CSV field, quoted when it must be (RFC 4180) */
static int csv_str(struct buf *b, const char *s)
{
	int rc;

	if (!strpbrk(s, ",\"\r\n"))
		return buf_put(b, s, strlen(s));
	rc = buf_put(b, "\"", 1);
	for (; *s && rc == 0; s++)
		rc = *s == '"' ? buf_put(b, "\"\"", 2) : buf_put(b, s, 1);
	return rc ? rc : buf_put(b, "\"", 1);
}

static int csv_u(struct buf *b, uint64_t v)
{
	if (v == MT_NA)
		return buf_put(b, ",", 1);
	return bprintf(b, ",%" PRIu64, v);
}

static int csv_d(struct buf *b, double v, int prec)
{
	if (v < 0)
		return buf_put(b, ",", 1);
	return bprintf(b, ",%.*f", prec, v);
}

int mt_render_csv(struct buf *b, const char *ts, const struct mt_snap *s)
{
	const struct mt_inst *in;
	size_t i;
	int rc = 0;

	for (i = 0; i < s->n && rc == 0; i++) {
		in = &s->v[i];
		rc = bprintf(b, "%s,", ts);
		rc = rc ? rc : csv_str(b, in->id);
		rc = rc ? rc : csv_u(b, in->regions);
		rc = rc ? rc : csv_u(b, in->allocated);
		rc = rc ? rc : csv_u(b, in->used);
		rc = rc ? rc : csv_u(b, in->held);
		rc = rc ? rc : csv_u(b, in->keys);
		rc = rc ? rc : csv_u(b, in->pinned);
		rc = rc ? rc : csv_u(b, in->leases);
		rc = rc ? rc : csv_u(b, in->conns);
		rc = rc ? rc : bprintf(b, ",%s", mt_lease_state(in));
		rc = rc ? rc : csv_u(b, in->stores);
		rc = rc ? rc : csv_u(b, in->lookups);
		rc = rc ? rc : csv_u(b, in->hits);
		rc = rc ? rc : csv_u(b, in->misses);
		rc = rc ? rc : csv_d(b, in->store_rate, 2);
		rc = rc ? rc : csv_d(b, in->lookup_rate, 2);
		rc = rc ? rc : csv_d(b, hit_ratio(in), 4);
		rc = rc ? rc : csv_d(b, s->elapsed, 3);
		rc = rc ? rc : buf_put(b, ",", 1);
		if (in->devices)
			rc = rc ? rc : csv_str(b, in->devices);
		rc = rc ? rc : buf_put(b, ",", 1);
		if (in->host)
			rc = rc ? rc : csv_str(b, in->host);
		rc = rc ? rc : csv_u(b, in->pid);
		rc = rc ? rc : csv_u(b, in->rt.clients);
		rc = rc ? rc : csv_u(b, in->rt.puts);
		rc = rc ? rc : csv_u(b, in->rt.put_bytes);
		rc = rc ? rc : csv_u(b, in->rt.gets);
		rc = rc ? rc : csv_u(b, in->rt.get_bytes);
		rc = rc ? rc : csv_u(b, in->rt.errors);
		rc = rc ? rc : csv_d(b, in->rt.put_rate, 2);
		rc = rc ? rc : csv_d(b, in->rt.get_rate, 2);
		rc = rc ? rc : buf_put(b, "\n", 1);
	}
	return rc;
}

/* a JSON string: quotes, backslashes and control bytes escaped */
static int json_str(struct buf *b, const char *s)
{
	int rc = buf_put(b, "\"", 1);

	for (; *s && rc == 0; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			rc = bprintf(b, "\\%c", ch);
		else if (ch < 0x20)
			rc = bprintf(b, "\\u%04x", ch);
		else
			rc = buf_put(b, s, 1);
	}
	return rc ? rc : buf_put(b, "\"", 1);
}

static int json_u(struct buf *b, const char *k, uint64_t v)
{
	if (v == MT_NA)
		return bprintf(b, ", \"%s\": null", k);
	return bprintf(b, ", \"%s\": %" PRIu64, k, v);
}

static int json_d(struct buf *b, const char *k, double v, int prec)
{
	if (v < 0)
		return bprintf(b, ", \"%s\": null", k);
	return bprintf(b, ", \"%s\": %.*f", k, prec, v);
}

int mt_render_json(struct buf *b, const char *ts, const struct mt_snap *s)
{
	const struct mt_inst *in;
	size_t i;
	int rc = 0;

	for (i = 0; i < s->n && rc == 0; i++) {
		in = &s->v[i];
		rc = bprintf(b,
			     "{\"timestamp\": \"%s\", \"instance_id\": ", ts);
		rc = rc ? rc : json_str(b, in->id);
		rc = rc ? rc : json_u(b, "regions", in->regions);
		rc = rc ? rc : json_u(b, "allocated_bytes", in->allocated);
		rc = rc ? rc : json_u(b, "used_bytes", in->used);
		rc = rc ? rc : json_u(b, "held_bytes", in->held);
		rc = rc ? rc : json_u(b, "keys", in->keys);
		rc = rc ? rc : json_u(b, "pinned_bytes", in->pinned);
		rc = rc ? rc : json_u(b, "leases", in->leases);
		rc = rc ? rc : json_u(b, "connections", in->conns);
		rc = rc ? rc : bprintf(b, ", \"lease_state\": ");
		if (rc == 0 && !strcmp(mt_lease_state(in), "-"))
			rc = bprintf(b, "null");
		else if (rc == 0)
			rc = json_str(b, mt_lease_state(in));
		rc = rc ? rc : json_u(b, "stores", in->stores);
		rc = rc ? rc : json_u(b, "lookups", in->lookups);
		rc = rc ? rc : json_u(b, "hits", in->hits);
		rc = rc ? rc : json_u(b, "misses", in->misses);
		rc = rc ? rc : json_d(b, "store_rate", in->store_rate, 2);
		rc = rc ? rc : json_d(b, "lookup_rate", in->lookup_rate, 2);
		rc = rc ? rc : json_d(b, "hit_ratio", hit_ratio(in), 4);
		rc = rc ? rc : json_d(b, "elapsed_s", s->elapsed, 3);
		rc = rc ? rc : bprintf(b, ", \"devices\": ");
		if (rc == 0 && in->devices)
			rc = json_str(b, in->devices);
		else if (rc == 0)
			rc = bprintf(b, "null");
		rc = rc ? rc : bprintf(b, ", \"host\": ");
		if (rc == 0 && in->host)
			rc = json_str(b, in->host);
		else if (rc == 0)
			rc = bprintf(b, "null");
		rc = rc ? rc : json_u(b, "pid", in->pid);
		rc = rc ? rc : json_u(b, "remote_clients", in->rt.clients);
		rc = rc ? rc : json_u(b, "remote_puts", in->rt.puts);
		rc = rc ? rc : json_u(b, "remote_put_bytes", in->rt.put_bytes);
		rc = rc ? rc : json_u(b, "remote_gets", in->rt.gets);
		rc = rc ? rc : json_u(b, "remote_get_bytes", in->rt.get_bytes);
		rc = rc ? rc : json_u(b, "remote_errors", in->rt.errors);
		rc = rc ? rc : json_d(b, "remote_put_rate", in->rt.put_rate, 2);
		rc = rc ? rc : json_d(b, "remote_get_rate", in->rt.get_rate, 2);
		rc = rc ? rc : buf_put(b, "}\n", 2);
	}
	return rc;
}
