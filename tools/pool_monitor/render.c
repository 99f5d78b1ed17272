/* SPDX-License-Identifier: Apache-2.0 */
/*
 * render.c - pool_monitor's text: the pool table and the CSV rows
 *
 * Everything here is a pure function from snapshots to text appended to a
 * struct buf, so the exact format (docs/pool-monitor.md) is unit tested
 * in tests/unit/test_pool_monitor.c and shared by every output mode: the
 * one-shot print, --scroll, the ANSI-cleared watch and the ncurses screen
 * all draw the same lines.
 *
 * Layout of a table row (two-space indent, two spaces between columns):
 *   Device  %-16s  (longer paths push the row right rather than being cut)
 *   Type    %-8s   DEV_DAX / FS_DAX
 *   Used, Free, Total, Delta  %8s each, human units (format_bytes)
 *   Usage   the 30-character bar and the percentage with one decimal
 *
 * Snapshots are sorted by path once they are complete (pm_snap_sort), so
 * the Delta lookup in the previous snapshot is a binary search.
 */
#include "pm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_proto.h"
#include "util.h"

#define PM_SIZE_LEN 24 /* "-1023.9T" and more fit easily */

/* Append printf output to @b. */
__attribute__((format(printf, 2, 3))) static int bprintf(struct buf *b,
							 const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if (buf_reserve(b, (size_t)n + 1) < 0)
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void pm_snap_free(struct pm_snap *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		free(s->pools[i].path);
	free(s->pools);
	s->pools = NULL;
	s->n = 0;
	s->cap = 0;
}

uint64_t pm_pool_used(const struct pm_pool *p)
{
	return p->free_bytes > p->total_bytes ? 0
					      : p->total_bytes - p->free_bytes;
}

static int pool_cmp(const void *a, const void *b)
{
	const struct pm_pool *pa = a, *pb = b;

	return strcmp(pa->path, pb->path);
}

/*
 * Copy a wire path into a C string.  Control bytes (a NUL inside the path,
 * an escape sequence) become '?' so that a hostile reply cannot drive the
 * terminal; the daemon never sends such paths.
 */
static char *path_dup(const struct rm_str *s)
{
	char *p = malloc((size_t)s->len + 1);
	uint32_t i;

	if (!p)
		return NULL;
	for (i = 0; i < s->len; i++) {
		unsigned char c = (unsigned char)s->ptr[i];

		p[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	p[s->len] = '\0';
	return p;
}

int pm_snap_add(struct pm_snap *s, const struct rm_pool_stat *st)
{
	struct pm_pool *grown;
	size_t cap;
	char *path;

	if (s->n == s->cap) {
		cap = s->cap ? 2 * s->cap : 8;
		grown = realloc(s->pools, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		s->pools = grown;
		s->cap = cap;
	}
	path = path_dup(&st->path);
	if (!path)
		return -ENOMEM;
	s->pools[s->n].path = path;
	s->pools[s->n].dax_type = st->dax_type;
	s->pools[s->n].total_bytes = st->total_size;
	s->pools[s->n].free_bytes = st->free_size;
	s->n++;
	return 0;
}

void pm_snap_sort(struct pm_snap *s)
{
	if (s->n > 1)
		qsort(s->pools, s->n, sizeof(*s->pools), pool_cmp);
}

void pm_timestamp(time_t t, char *out, size_t outlen)
{
	struct tm tm;

	if (!localtime_r(&t, &tm) ||
	    strftime(out, outlen, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		snprintf(out, outlen, "%lld", (long long)t);
}

char *pm_usage_bar(uint64_t used, uint64_t total, char *out, size_t outlen)
{
	char bar[PM_BAR_WIDTH + 1];
	double ratio;
	int filled;

	if (total == 0) {
		memset(bar, '?', PM_BAR_WIDTH);
		bar[PM_BAR_WIDTH] = '\0';
		snprintf(out, outlen, "[%s]", bar);
		return out;
	}
	ratio = (double)used / (double)total;
	/* truncate like the upstream tool: 99.9% still shows one '-' */
	filled = (int)(ratio * PM_BAR_WIDTH);
	if (filled < 0)
		filled = 0;
	if (filled > PM_BAR_WIDTH)
		filled = PM_BAR_WIDTH;
	memset(bar, '#', (size_t)filled);
	memset(bar + filled, '-', (size_t)(PM_BAR_WIDTH - filled));
	bar[PM_BAR_WIDTH] = '\0';
	snprintf(out, outlen, "[%s] %.1f%%", bar, ratio * 100.0);
	return out;
}

static const char *type_name(uint32_t t)
{
	switch (t) {
	case RM_DEV_DAX:
		return "DEV_DAX";
	case RM_FS_DAX:
		return "FS_DAX";
	default:
		return "?";
	}
}

static const struct pm_pool *snap_find(const struct pm_snap *s,
				       const char *path)
{
	struct pm_pool key = {.path = (char *)path};

	if (!s || !s->n)
		return NULL;
	return bsearch(&key, s->pools, s->n, sizeof(*s->pools), pool_cmp);
}

/* "+1.5G" / "-2.0M" for a change of used bytes, "" for none. */
static void format_delta(const struct pm_pool *p, const struct pm_snap *prev,
			 char *out, size_t outlen)
{
	const struct pm_pool *old = snap_find(prev, p->path);
	uint64_t now, before;
	char num[PM_SIZE_LEN];

	out[0] = '\0';
	if (!old)
		return;
	now = pm_pool_used(p);
	before = pm_pool_used(old);
	if (now > before)
		snprintf(out, outlen, "+%s",
			 format_bytes(now - before, num, sizeof(num)));
	else if (now < before)
		snprintf(out, outlen, "-%s",
			 format_bytes(before - now, num, sizeof(num)));
}

static int render_title(struct buf *b, const char *ts)
{
	/* U+2014 EM DASH, as upstream prints it */
	return bprintf(b,
		       "  Maru Pool Monitor  \xe2\x80\x94  %s  (Ctrl+C to quit)"
		       "\n\n",
		       ts);
}

int pm_render_table(struct buf *b, const char *ts, const struct pm_snap *cur,
		    const struct pm_snap *prev)
{
	char used[PM_SIZE_LEN], fre[PM_SIZE_LEN], total[PM_SIZE_LEN];
	char delta[PM_SIZE_LEN + 1], bar[PM_BAR_WIDTH + 32];
	const struct pm_pool *p;
	size_t i;
	int rc;

	rc = render_title(b, ts);
	if (rc < 0)
		return rc;
	if (!cur->n)
		return bprintf(b, "  (no pools found)\n");
	rc = bprintf(b, "  %-16s  %-8s  %8s  %8s  %8s  %8s  %s\n", "Device",
		     "Type", "Used", "Free", "Total", "Delta", "Usage");
	if (rc < 0)
		return rc;
	rc = bprintf(b, "  %-16s  %-8s  %8s  %8s  %8s  %8s  %s\n",
		     "----------------", "--------", "--------", "--------",
		     "--------", "--------", "-----");
	if (rc < 0)
		return rc;
	for (i = 0; i < cur->n; i++) {
		p = &cur->pools[i];
		format_delta(p, prev, delta, sizeof(delta));
		rc = bprintf(b, "  %-16s  %-8s  %8s  %8s  %8s  %8s  %s\n",
			     p->path[0] ? p->path : "(unknown)",
			     type_name(p->dax_type),
			     format_bytes(pm_pool_used(p), used, sizeof(used)),
			     format_bytes(p->free_bytes, fre, sizeof(fre)),
			     format_bytes(p->total_bytes, total, sizeof(total)),
			     delta,
			     pm_usage_bar(pm_pool_used(p), p->total_bytes, bar,
					  sizeof(bar)));
		if (rc < 0)
			return rc;
	}
	return 0;
}

int pm_render_error(struct buf *b, const char *ts, const char *msg)
{
	int rc = render_title(b, ts);

	if (rc < 0)
		return rc;
	return bprintf(b, "  [error] %s\n", msg);
}

int pm_render_csv_header(struct buf *b)
{
	return bprintf(b, "timestamp,dax_path,dax_type,total_bytes,free_bytes,"
			  "used_bytes,usage_pct\n");
}

/* Append @s as one CSV field, quoted only when it has to be. */
static int csv_field(struct buf *b, const char *s)
{
	const char *q;
	int rc;

	if (!strpbrk(s, ",\"\r\n"))
		return buf_put(b, s, strlen(s));
	rc = buf_put(b, "\"", 1);
	for (q = s; rc == 0 && *q; q++) {
		if (*q == '"')
			rc = buf_put(b, "\"\"", 2);
		else
			rc = buf_put(b, q, 1);
	}
	return rc ? rc : buf_put(b, "\"", 1);
}

int pm_render_csv(struct buf *b, const char *ts, const struct pm_snap *cur)
{
	const struct pm_pool *p;
	uint64_t used;
	double pct;
	size_t i;
	int rc;

	for (i = 0; i < cur->n; i++) {
		p = &cur->pools[i];
		used = pm_pool_used(p);
		pct = p->total_bytes
			      ? (double)used / (double)p->total_bytes * 100.0
			      : 0.0;
		rc = bprintf(b, "%s,", ts);
		if (rc == 0)
			rc = csv_field(b, p->path);
		if (rc == 0)
			rc = bprintf(b, ",%s,%llu,%llu,%llu,%.2f\n",
				     type_name(p->dax_type),
				     (unsigned long long)p->total_bytes,
				     (unsigned long long)p->free_bytes,
				     (unsigned long long)used, pct);
		if (rc < 0)
			return rc;
	}
	return 0;
}
