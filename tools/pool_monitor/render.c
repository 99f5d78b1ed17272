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
 *   Device  left-aligned, as wide as the longest path (at least 16)
 *   Type    left-aligned, DEV_DAX / FS_DAX / EMULATED (at least 8)
 *   Used, Free, Total, Delta  right-aligned human units (format_bytes),
 *           at least 8 wide
 *   Usage   the 30-character bar and the percentage with one decimal
 * Column widths are measured on the content of this frame, so a long path
 * widens its column instead of pushing its own row out of line.
 *
 * Fitting a window (pm_render_view with a width): steps[] lists the ways
 * to narrow the table, in the order they are given up; the first step
 * whose table fits is used.  The Device column is the only one that is
 * shortened (elide_middle: head + U+2026 + tail), every other column is
 * shown whole or not at all, so a number on the screen is never cut.
 * Widths count one column per UTF-8 character.
 *
 * Snapshots are sorted by path once they are complete (pm_snap_sort), so
 * the Delta lookup in the previous snapshot is a binary search.
 */
#include "pm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
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
	for (i = 0; i < s->naway; i++)
		free(s->away[i].id);
	free(s->away);
	s->away = NULL;
	s->naway = s->away_cap = 0;
	for (i = 0; i < s->nagents; i++) {
		free(s->agents[i].url);
		free(s->agents[i].err);
	}
	free(s->agents);
	s->agents = NULL;
	s->nagents = 0;
}

int pm_snap_add_agent(struct pm_snap *s, const struct pm_agent *a)
{
	struct pm_agent *v = realloc(s->agents, (s->nagents + 1) * sizeof(*v));
	struct pm_agent *d;

	if (!v)
		return -ENOMEM;
	s->agents = v;
	d = &v[s->nagents];
	*d = *a;
	d->url = strdup(a->url);
	d->err = a->err ? strdup(a->err) : NULL;
	if (!d->url || (a->err && !d->err)) {
		free(d->url);
		free(d->err);
		return -ENOMEM;
	}
	s->nagents++;
	return 0;
}

uint64_t pm_pool_used(const struct pm_pool *p)
{
	return p->free_bytes > p->total_bytes ? 0
					      : p->total_bytes - p->free_bytes;
}

static int owner_cmp(const void *a, const void *b)
{
	const struct pm_owner *x = a, *y = b;

	return strcmp(x->id, y->id);
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

int pm_snap_add_owner(struct pm_snap *s, const struct rm_owner *o)
{
	struct pm_owner *grown;
	size_t cap;
	char *id;

	if (!o->away_since)
		return 0; /* connected: nothing is held for it */
	if (s->naway == s->away_cap) {
		cap = s->away_cap ? 2 * s->away_cap : 4;
		grown = realloc(s->away, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		s->away = grown;
		s->away_cap = cap;
	}
	id = path_dup(&o->id);
	if (!id)
		return -ENOMEM;
	s->away[s->naway++] = (struct pm_owner){id, o->regions, o->bytes,
						o->hold_ms, o->away_since};
	return 0;
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
	if (s->naway > 1)
		qsort(s->away, s->naway, sizeof(*s->away), owner_cmp);
}

void pm_timestamp(time_t t, char *out, size_t outlen)
{
	struct tm tm;

	if (!localtime_r(&t, &tm) ||
	    strftime(out, outlen, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		snprintf(out, outlen, "%lld", (long long)t);
}

/* The usage bar @width characters wide, and the percentage. */
static char *usage_bar(uint64_t used, uint64_t total, int width, char *out,
		       size_t outlen)
{
	char bar[PM_BAR_WIDTH + 1];
	double ratio;
	int filled;

	if (total == 0) {
		memset(bar, '?', (size_t)width);
		bar[width] = '\0';
		snprintf(out, outlen, "[%s]", bar);
		return out;
	}
	ratio = (double)used / (double)total;
	/* truncate like the upstream tool: 99.9% still shows one '-' */
	filled = (int)(ratio * width);
	if (filled < 0)
		filled = 0;
	if (filled > width)
		filled = width;
	memset(bar, '#', (size_t)filled);
	memset(bar + filled, '-', (size_t)(width - filled));
	bar[width] = '\0';
	snprintf(out, outlen, "[%s] %.1f%%", bar, ratio * 100.0);
	return out;
}

char *pm_usage_bar(uint64_t used, uint64_t total, char *out, size_t outlen)
{
	return usage_bar(used, total, PM_BAR_WIDTH, out, outlen);
}

/*
 * A pool's type as the protocol says it, except that an emulated pool (a
 * file the resource manager treats as a device-DAX device: the protocol
 * says DEV_DAX) is shown as such: a device is a /dev/dax path
 */
static const char *type_name(uint32_t t, const char *path)
{
	switch (t) {
	case RM_DEV_DAX:
		return strncmp(path, "/dev/dax", 8) ? "EMULATED" : "DEV_DAX";
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

/* Columns taken by UTF-8 text: one per character (no wide characters). */
static size_t text_cols(const char *s)
{
	size_t n = 0;

	for (; *s; s++) {
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	}
	return n;
}

/* Byte offset of character @k of @s (or its length if shorter). */
static size_t char_offset(const char *s, size_t k)
{
	size_t i = 0;

	while (s[i] && k) {
		i++;
		while (((unsigned char)s[i] & 0xc0) == 0x80)
			i++;
		k--;
	}
	return i;
}

/*
 * @s shortened to @cols columns by replacing its middle with U+2026 "…":
 * the head and the tail stay (a pool's name is at its end).
 * Return: a malloc()ed string (the caller frees it) or NULL.
 */
static char *elide_middle(const char *s, size_t cols)
{
	size_t n = text_cols(s), head, tail, hb, tb, len = strlen(s);
	char *out;

	if (n <= cols || cols == 0)
		return strdup(s);
	head = (cols - 1) / 2;
	tail = cols - 1 - head;
	hb = char_offset(s, head);
	tb = char_offset(s, n - tail);
	out = malloc(hb + 3 + (len - tb) + 1);
	if (!out)
		return NULL;
	memcpy(out, s, hb);
	memcpy(out + hb, "\xe2\x80\xa6", 3);
	memcpy(out + hb + 3, s + tb, len - tb + 1);
	return out;
}

/* Append @s padded with spaces to @w columns, on the left if @right. */
static int put_cell(struct buf *b, const char *s, size_t w, bool right)
{
	size_t n = text_cols(s);
	int rc = 0;

	for (; right && n < w && rc == 0; n++)
		rc = buf_put(b, " ", 1);
	if (rc == 0)
		rc = buf_put(b, s, strlen(s));
	for (; !right && n < w && rc == 0; n++)
		rc = buf_put(b, " ", 1);
	return rc;
}

/*
 * The title, in the longest form that fits @width (0: no limit).  The
 * live view names its keys; plain output keeps upstream's wording.
 */
static int render_title(struct buf *b, const char *ts, const struct pm_view *v)
{
	/* before the timestamp, whether it is shown, after it; U+2014 EM
	 * DASH as upstream prints it */
	static const struct {
		const char *head;
		bool ts;
		const char *tail;
	} live[] =
		{
			{"  Maru Pool Monitor  \xe2\x80\x94  ", true,
			 "  (q to quit, ? for help)"},
			{"  Maru Pool Monitor  \xe2\x80\x94  ", true,
			 "  (q quit, ? help)"},
			{"  Pool Monitor  ", true, "  (q quit, ? help)"},
			{"  ", true, "  (q quit, ? help)"},
			{"  ", false, "(q quit, ? help)"},
		},
	  plain[] = {
		  {"  Maru Pool Monitor  \xe2\x80\x94  ", true,
		   "  (Ctrl+C to quit)"},
		  {"  Maru Pool Monitor  \xe2\x80\x94  ", true, ""},
		  {"  ", true, ""},
	  };
	bool is_live = v && v->live;
	size_t nforms = is_live ? ARRAY_SIZE(live) : ARRAY_SIZE(plain);
	size_t width = v ? v->width : 0, i, cols;

	for (i = 0; i < nforms; i++) {
		const char *head = is_live ? live[i].head : plain[i].head;
		const char *tail = is_live ? live[i].tail : plain[i].tail;
		bool show = is_live ? live[i].ts : plain[i].ts;

		cols = text_cols(head) + (show ? text_cols(ts) : 0) +
		       text_cols(tail);
		if (!width || cols <= width || i + 1 == nforms)
			return bprintf(b, "%s%s%s\n\n", head, show ? ts : "",
				       tail);
	}
	return -EINVAL;
}

/* The columns of the table, left to right. */
enum pm_col {
	COL_DEVICE,
	COL_TYPE,
	COL_USED,
	COL_FREE,
	COL_TOTAL,
	COL_DELTA,
	COL_USAGE,
	PM_NCOL,
};

static const char *const col_head[PM_NCOL] = {
	"Device", "Type", "Used", "Free", "Total", "Delta", "Usage",
};

/* The text of one row in every form a layout may want. */
struct pm_row {
	const char *device; /* borrows: the pool's path or "(unknown)" */
	char cell[PM_NCOL][PM_SIZE_LEN + 2]; /* Type .. Delta; Usage: the % */
	char bar30[PM_BAR_WIDTH + 32];	     /* "[###---...] 12.5%" */
	char bar10[PM_BAR_WIDTH + 32];	     /* the same, 10 wide */
};

/*
 * The steps of narrowing, tried in order until the table fits (the list
 * in docs/pool-monitor.md, "Fitting the window").  Each step gives up
 * one more thing; what an earlier step gave up stays given up.
 */
static const struct pm_step {
	bool pad; /* Device >= 16, Type and numbers >= 8 (upstream) */
	int bar;  /* bar width, 0 = the percentage alone */
	bool type, delta, fre; /* columns still shown */
	size_t dev_floor;      /* elide Device down to this; 0 = never elide */
} steps[] = {
	{true, PM_BAR_WIDTH, true, true, true, 0},  /* as upstream */
	{false, PM_BAR_WIDTH, true, true, true, 0}, /* 1. no padding */
	{false, 10, true, true, true, 0},	    /* 2. short bar */
	{false, 10, true, true, true, 24},	    /* 3. elide paths */
	{false, 10, false, true, true, 24},	    /* 4. no Type */
	{false, 10, false, false, true, 24},	    /* 5. no Delta */
	{false, 0, false, false, true, 24},	    /* 6. no bar */
	{false, 0, false, false, false, 24},	    /* 7. no Free */
	{false, 0, false, false, false, 8},	    /* 8. paths to 8 */
};

/* One chosen layout: which columns, how wide. */
struct pm_layout {
	bool on[PM_NCOL];
	size_t w[PM_NCOL];
	int bar;
};

static const char *row_text(const struct pm_row *r, const struct pm_layout *l,
			    int col)
{
	if (col == COL_DEVICE)
		return r->device;
	if (col == COL_USAGE && l->bar)
		return l->bar == PM_BAR_WIDTH ? r->bar30 : r->bar10;
	return r->cell[col];
}

/* Width of the table under @l with Device @dev columns wide. */
static size_t layout_width(const struct pm_layout *l, size_t dev)
{
	size_t sum = 2, n = 0;
	int c;

	for (c = 0; c < PM_NCOL; c++) {
		if (!l->on[c])
			continue;
		sum += (c == COL_DEVICE ? dev : l->w[c]) + (n ? 2 : 0);
		n++;
	}
	return sum;
}

/* Apply @st to @rows: column widths from the content. */
static void layout_make(const struct pm_step *st, const struct pm_row *rows,
			size_t n, struct pm_layout *l)
{
	size_t i, w;
	int c;

	memset(l, 0, sizeof(*l));
	l->bar = st->bar;
	for (c = 0; c < PM_NCOL; c++)
		l->on[c] = true;
	l->on[COL_TYPE] = st->type;
	l->on[COL_DELTA] = st->delta;
	l->on[COL_FREE] = st->fre;
	for (c = 0; c < PM_NCOL; c++) {
		l->w[c] = strlen(col_head[c]);
		if (st->pad && c != COL_USAGE)
			l->w[c] = c == COL_DEVICE ? 16 : 8;
		for (i = 0; i < n; i++) {
			w = text_cols(row_text(&rows[i], l, c));
			if (w > l->w[c])
				l->w[c] = w;
		}
	}
}

/*
 * Choose the layout for @width columns (0: no limit, the first step).
 * Return: the width of the Device column (it may elide paths).
 */
static size_t layout_fit(const struct pm_row *rows, size_t n, size_t width,
			 struct pm_layout *l)
{
	size_t i, dev, floor, others;

	for (i = 0; i < ARRAY_SIZE(steps); i++) {
		layout_make(&steps[i], rows, n, l);
		dev = l->w[COL_DEVICE];
		if (!width || layout_width(l, dev) <= width)
			return dev;
		floor = steps[i].dev_floor;
		if (!floor)
			continue;
		if (floor > dev)
			floor = dev;
		others = layout_width(l, 0);
		if (others + floor <= width)
			return width - others;
	}
	/* narrower than every step: Device at its floor; columns that do
	 * not fit whole are left out when the rows are written */
	dev = l->w[COL_DEVICE] < 8 ? l->w[COL_DEVICE] : 8;
	if (dev + 2 > width)
		dev = width > 3 ? width - 2 : 1;
	return dev;
}

/* One line of the table: the header, the dashes or a row. */
static int render_line(struct buf *b, const struct pm_layout *l, size_t dev,
		       size_t width, const char *const text[PM_NCOL])
{
	size_t used = 2, w;
	bool first = true, right;
	char *elided = NULL;
	int c, rc;

	rc = buf_put(b, "  ", 2);
	for (c = 0; c < PM_NCOL && rc == 0; c++) {
		if (!l->on[c])
			continue;
		w = c == COL_DEVICE ? dev : l->w[c];
		if (width && used + (first ? 0 : 2) + w > width)
			break; /* never half a column */
		if (!first)
			rc = buf_put(b, "  ", 2);
		used += w + (first ? 0 : 2);
		right = c >= COL_USED && !(c == COL_USAGE && l->bar);
		/* the bar is the last column: not padded */
		if (c == COL_USAGE && l->bar)
			w = 0;
		if (rc == 0 && c == COL_DEVICE && text_cols(text[c]) > w) {
			elided = elide_middle(text[c], w);
			rc = elided ? put_cell(b, elided, w, false) : -ENOMEM;
			free(elided);
		} else if (rc == 0) {
			rc = put_cell(b, text[c], w, right);
		}
		first = false;
	}
	return rc ? rc : buf_put(b, "\n", 1);
}

/* Fill @r with every text the layouts may show for @p. */
static void row_fill(struct pm_row *r, const struct pm_pool *p,
		     const struct pm_snap *prev)
{
	uint64_t used = pm_pool_used(p);

	r->device = p->path[0] ? p->path : "(unknown)";
	snprintf(r->cell[COL_TYPE], sizeof(r->cell[0]), "%s",
		 type_name(p->dax_type, p->path));
	format_bytes(used, r->cell[COL_USED], sizeof(r->cell[0]));
	format_bytes(p->free_bytes, r->cell[COL_FREE], sizeof(r->cell[0]));
	format_bytes(p->total_bytes, r->cell[COL_TOTAL], sizeof(r->cell[0]));
	format_delta(p, prev, r->cell[COL_DELTA], sizeof(r->cell[0]));
	if (p->total_bytes)
		snprintf(r->cell[COL_USAGE], sizeof(r->cell[0]), "%.1f%%",
			 (double)used / (double)p->total_bytes * 100.0);
	else
		snprintf(r->cell[COL_USAGE], sizeof(r->cell[0]), "?");
	usage_bar(used, p->total_bytes, PM_BAR_WIDTH, r->bar30,
		  sizeof(r->bar30));
	usage_bar(used, p->total_bytes, 10, r->bar10, sizeof(r->bar10));
}

/*
 * Below the pools: the owners that are away and what is held for them,
 * one line each (a maru-server that is stopped keeps its regions until it
 * returns: the operator sees whose they are, since when, and how to free
 * them).
 */
static int render_away(struct buf *b, const struct pm_snap *s)
{
	char ts[PM_TS_LEN], num[32];
	size_t i;
	int rc;

	if (!s->naway)
		return 0;
	rc = bprintf(b, "\nHeld for owners that are away:\n");
	for (i = 0; i < s->naway && rc == 0; i++) {
		const struct pm_owner *o = &s->away[i];

		pm_timestamp((time_t)o->away_since, ts, sizeof(ts));
		format_bytes(o->bytes, num, sizeof(num));
		rc = bprintf(b, "  %s: %u region(s), %s, away since %s, %s\n",
			     o->id, o->regions, num, ts,
			     o->hold_ms == RM_HOLD_UNTIL_BACK
				     ? "held until it returns"
				     : "freed when its grace period ends");
	}
	if (rc == 0)
		rc = bprintf(b, "  (free what is held for one: pool_monitor "
				"--release OWNER)\n");
	return rc;
}

/* "X (R/s)": a counter, and its rate since @prev's (when there is one) */
static void with_rate(uint64_t now, const uint64_t *was, double secs, char *out,
		      size_t n)
{
	char a[32], r[32];

	format_bytes(now, a, sizeof(a));
	if (!was || secs <= 0 || now < *was) {
		snprintf(out, n, "%s", a);
		return;
	}
	format_bytes((uint64_t)((double)(now - *was) / secs), r, sizeof(r));
	snprintf(out, n, "%s (%s/s)", a, r);
}

/*
 * The agents (--agent): who lends the pool to hosts without a CXL link,
 * and their traffic, with rates against @prev's same agent.
 */
static int render_agents(struct buf *b, const struct pm_snap *s,
			 const struct pm_snap *prev)
{
	char lent[32], put[80], get[80];
	double secs = 0;
	size_t i;
	int rc;

	if (!s->nagents)
		return 0;
	if (prev && prev->at_ns && s->at_ns > prev->at_ns)
		secs = (double)(s->at_ns - prev->at_ns) / 1e9;
	rc = bprintf(b, "\nmaru-agent (hosts without a CXL link):\n");
	for (i = 0; i < s->nagents && rc == 0; i++) {
		const struct pm_agent *a = &s->agents[i];
		const struct pm_agent *p =
			prev && i < prev->nagents && prev->agents[i].up &&
					!strcmp(prev->agents[i].url, a->url)
				? &prev->agents[i]
				: NULL;

		if (!a->up) {
			rc = bprintf(b, "  %s: down: %s\n", a->url,
				     a->err ? a->err : "?");
			continue;
		}
		format_bytes(a->bytes_mapped, lent, sizeof(lent));
		with_rate(a->put_bytes, p ? &p->put_bytes : NULL, secs, put,
			  sizeof(put));
		with_rate(a->get_bytes, p ? &p->get_bytes : NULL, secs, get,
			  sizeof(get));
		rc = bprintf(b,
			     "  %s: %" PRIu64 " session(s), %" PRIu64
			     " region(s) lent (%s), stored %s, read %s, "
			     "%" PRIu64 " refused, %" PRIu64 " revoked\n",
			     a->url, a->sessions, a->regions, lent, put, get,
			     a->refused, a->revoked);
	}
	return rc;
}

int pm_render_view(struct buf *b, const char *ts, const struct pm_snap *cur,
		   const struct pm_snap *prev, const struct pm_view *v)
{
	static const char dashes[] = "------------------------------------"
				     "------------------------------------";
	const char *text[PM_NCOL];
	char dash[PM_NCOL][sizeof(dashes)];
	size_t width = v ? v->width : 0, dev, i, w;
	struct pm_layout l;
	struct pm_row *rows;
	int c, rc;

	rc = render_title(b, ts, v);
	if (rc < 0)
		return rc;
	if (!cur->n) {
		rc = bprintf(b, "  (no pools found)\n");
		return rc < 0 ? rc : render_agents(b, cur, prev);
	}
	rows = calloc(cur->n, sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	for (i = 0; i < cur->n; i++)
		row_fill(&rows[i], &cur->pools[i], prev);
	dev = layout_fit(rows, cur->n, width, &l);

	for (c = 0; c < PM_NCOL; c++)
		text[c] = col_head[c];
	rc = render_line(b, &l, dev, width, text);
	for (c = 0; c < PM_NCOL; c++) {
		w = c == COL_DEVICE ? dev : l.w[c];
		/* under the bar, as many dashes as "Usage" has letters */
		if (c == COL_USAGE && l.bar)
			w = strlen(col_head[c]);
		if (w >= sizeof(dashes))
			w = sizeof(dashes) - 1;
		memcpy(dash[c], dashes, w);
		dash[c][w] = '\0';
		text[c] = dash[c];
	}
	if (rc == 0)
		rc = render_line(b, &l, dev, width, text);
	for (i = 0; i < cur->n && rc == 0; i++) {
		for (c = 0; c < PM_NCOL; c++)
			text[c] = row_text(&rows[i], &l, c);
		rc = render_line(b, &l, dev, width, text);
	}
	free(rows);
	if (rc == 0)
		rc = render_away(b, cur);
	if (rc == 0)
		rc = render_agents(b, cur, prev);
	return rc;
}

int pm_render_table(struct buf *b, const char *ts, const struct pm_snap *cur,
		    const struct pm_snap *prev)
{
	return pm_render_view(b, ts, cur, prev, NULL);
}

int pm_render_error_view(struct buf *b, const char *ts, const char *msg,
			 const struct pm_view *v)
{
	int rc = render_title(b, ts, v);

	if (rc < 0)
		return rc;
	return bprintf(b, "  [error] %s\n", msg);
}

int pm_render_error(struct buf *b, const char *ts, const char *msg)
{
	return pm_render_error_view(b, ts, msg, NULL);
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
				     type_name(p->dax_type, p->path),
				     (unsigned long long)p->total_bytes,
				     (unsigned long long)p->free_bytes,
				     (unsigned long long)used, pct);
		if (rc < 0)
			return rc;
	}
	return 0;
}
