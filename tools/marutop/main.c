/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - marutop: a live, top-style view of maru-server
 *
 *   marutop                       full screen, a sample every 2 s
 *   marutop -w 1                  ... every second
 *   marutop --once                one table to stdout, then exit
 *   marutop --csv [-n N]          CSV rows, one per instance per sample
 *   marutop --json [-n N]         JSON lines, the same records
 *   marutop --server tcp://H:P    another server
 *
 * Modes:
 *   screen   stdout and stdin a terminal, no --once/--csv/--json: ncurses,
 *            redrawn every sample and at once on a resize; keys s < > r
 *            sort, ? help, space refresh, q quit.
 *   plain    otherwise: frames (the same text) separated by a blank line;
 *            --once prints one and exits.
 *   scripts  --csv / --json: records only (rates from the second sample
 *            on); errors go to stderr and the next sample tries again.
 * The table's width: the terminal's (curses, or TIOCGWINSZ when stdout is
 * one), else $COLUMNS, else unlimited (every column).
 *
 * Signals: SIGINT/SIGTERM set a flag (no SA_RESTART); every wait is cut
 * into slices of at most 200 ms that check it.  SIGPIPE is ignored, so
 * `marutop --csv | head` ends on EPIPE.
 *
 * Options are a table for src/common/opts.c, the daemons' parser: a bad
 * value is said as theirs are ("marutop: invalid count: -1 (must be >=
 * 0)"), an unknown option in getopt's words.
 *
 * Exit status: 0; 1 when the server never answered (--once: did not
 * answer); 2 on bad options.
 *
 * Context: single thread; the connection, the samples and the frame
 * buffer all belong to main().
 */
#include "mt.h"

#include <curses.h>
#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "opts.h"
#include "util.h"

#define MT_DEFAULT_SERVER "tcp://127.0.0.1:5555"
#define MT_DEFAULT_WATCH 2.0
#define MT_WATCH_MAX 86400.0
#define MT_TIMEOUT_MS 5000 /* one sample; the server answers in us */
#define MT_SLICE_MS 200
#define MT_TS_LEN 32

enum mt_mode { MT_SCREEN, MT_PLAIN, MT_CSV, MT_JSON };

struct mt_opts {
	double watch; /* seconds between samples */
	long count;   /* samples; 0 = until stopped */
	bool once;
	enum mt_mode mode;
	int sort; /* an enum mt_col */
	bool rev;
	const char *server;	  /* borrows: argv or the default */
	const char *curve_server; /* borrows: argv or the environment */
	const char *curve_secret;
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* what --help says around the options (and so the man page) */
static const struct opts_doc doc = {
	.about = "A live, top-style view of maru-server: per instance regions, "
		 "bytes, keys,\n"
		 "pinned bytes, lease state, store and lookup rates and hit "
		 "ratio (the\n"
		 "server's own counts), and for clients of maru-agent the "
		 "bytes they put\n"
		 "and get; server totals (requests/s by type, latency, "
		 "lookups and hits,\n"
		 "remote traffic, evictions, recovered keys).\n",
	.after = "Keys on the screen: s next sort column, < > sort column "
		 "left/right,\n"
		 "r reverse, space refresh, ? help, q quit.  '-': not known "
		 "(a rate\n"
		 "before the second sample; a figure the server does not "
		 "send).\n"
		 "\n"
		 "Exit status: 0 on success; 1 when the server cannot be "
		 "reached (--once)\n"
		 "or never answered; 2 on bad options.\n"
		 "\n"
		 "Environment:\n"
		 "  MARU_CURVE_SERVER_KEY, MARU_CURVE_SECRET_KEY_FILE\n"
		 "                      defaults of the two CURVE options (as "
		 "libmaru)\n",
};

static int bad_option(const char *what, const char *arg)
{
	fprintf(stderr, "marutop: %s: %s\nTry 'marutop --help'.\n", what, arg);
	return -EINVAL;
}

static int col_by_name(const char *s)
{
	int c;

	for (c = 0; c < MT_NCOLS; c++)
		if (!strcasecmp(s, mt_col_name(c)))
			return c;
	return -1;
}

/* -s: a column's header, any case */
static int sort_arg(const char *arg, void *dst)
{
	int c = col_by_name(arg);

	if (c < 0)
		return OPT_BAD;
	*(int *)dst = c;
	return 0;
}

/*
 * The command line (src/common/opts.h), then what needs every option
 * seen: the CURVE pair, --once.  Return: 0 to run, 1 after --help or
 * --version (exit 0), -EINVAL (said: exit 2) or -ENOMEM (exit 1).
 */
static int parse_opts(int argc, char **argv, struct mt_opts *o)
{
	const struct opt t[] = {
		/* pool_monitor's flags (upstream's monitors'): -w, -c */
		OPTS_SECONDS_IN("watch", 'w', o->watch, MT_WATCH_MAX,
				OPT_POSITIVE,
				"seconds, more than 0 and at most 86400",
				.help = "seconds between samples (fractions "
					"allowed)",
				.why = "a rate over two seconds is steady "
				       "enough to read"),
		OPTS_SECONDS_IN("interval", 0, o->watch, MT_WATCH_MAX,
				OPT_POSITIVE,
				"seconds, more than 0 and at most 86400",
				.help = "the same as --watch", .dflt = ""),
		OPTS_INT("count", 'c', o->count, 0, LONG_MAX,
			 .help = "stop after N samples (0: until q or Ctrl+C)"),
		OPTS_FLAG("once", o->once,
			  .help = "print one table to stdout and exit"),
		OPTS_SET("csv", o->mode, MT_CSV,
			 .help = "CSV: one row per instance per sample (header "
				 "first)"),
		OPTS_SET("json", o->mode, MT_JSON,
			 .help = "JSON lines: one object per instance per "
				 "sample"),
		OPTS_CALL("sort", 's', sort_arg, &o->sort,
			  "unknown column; a header such as KEYS or STORE/s",
			  .arg = "COLUMN",
			  .help = "sort by COLUMN (a header, e.g. KEYS or "
				  "STORE/s)",
			  .dflt = "INSTANCE"),
		OPTS_FLAG("reverse", o->rev, .letter = 'r',
			  .help = "reverse the sort order"),
		OPTS_STR("server", 0, o->server, 0, .arg = "URL",
			 .help = "maru-server to watch",
			 .why = "maru-server's own default"),
		OPTS_STR("curve-server-key", 0, o->curve_server, 0,
			 .arg = "KEY",
			 .help = "CURVE: the server's public key (40 Z85 "
				 "characters or its .key file); with "
				 "--curve-secret-key-file",
			 .dflt = ""),
		OPTS_STR("curve-secret-key-file", 0, o->curve_secret, 0,
			 .arg = "FILE",
			 .help = "CURVE: our certificate (maru-keygen "
				 "NAME.key_secret)",
			 .dflt = ""),
		OPTS_HELP,
		OPTS_VERSION,
		{0},
	};
	int rc;

	memset(o, 0, sizeof(*o));
	o->watch = MT_DEFAULT_WATCH;
	o->mode = MT_SCREEN;
	o->server = MT_DEFAULT_SERVER;
	o->curve_server = getenv("MARU_CURVE_SERVER_KEY");
	o->curve_secret = getenv("MARU_CURVE_SECRET_KEY_FILE");
	rc = opts_parse("marutop", &doc, t, argc, argv);
	if (rc)
		return rc;
	if (o->curve_server && !*o->curve_server)
		o->curve_server = NULL;
	if (o->curve_secret && !*o->curve_secret)
		o->curve_secret = NULL;
	if (!o->curve_server != !o->curve_secret)
		return bad_option("CURVE needs both keys",
				  o->curve_server ? "--curve-secret-key-file"
						  : "--curve-server-key");
	if (o->once)
		o->count = 1;
	return 0;
}

static int put_stdout(const struct buf *b)
{
	if (b->len && fwrite(b->data, 1, b->len, stdout) != b->len)
		return errno ? -errno : -EIO;
	if (fflush(stdout) != 0)
		return errno ? -errno : -EIO;
	return 0;
}

/* the width of a plain frame: the terminal's, $COLUMNS, or no limit */
static int plain_width(void)
{
	struct winsize ws;
	const char *e = getenv("COLUMNS");
	long v;

	if (isatty(STDOUT_FILENO) &&
	    ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	if (e && (v = strtol(e, NULL, 10)) > 0 && v < 100000)
		return (int)v;
	return 100000;
}

static void timestamp(long long t, char *out, size_t n)
{
	time_t tt = (time_t)t;
	struct tm tm;

	localtime_r(&tt, &tm);
	strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
}

/* The watch state: the last sample (for rates and redraws). */
struct mt_state {
	struct mt_opts *o;
	struct mt_conn *c;
	struct mt_snap cur; /* the last good sample */
	bool have;
	char err[MT_ERR_LEN]; /* the last error, "" if the last was good */
	bool help;
	SCREEN *scr; /* owns: newterm(), NULL unless MT_SCREEN */
	struct buf frame;
};

/*
 * "marutop - URL - TIME - every Ns - sort COL - ? help, q quit", the
 * least needed parts left out while it is wider than @width
 */
static void make_title(char *out, size_t n, const struct mt_state *st,
		       const char *ts, int width)
{
	char every[32], sort[48];
	const char *parts[6];
	int drop, i, k;

	snprintf(every, sizeof(every), "every %gs", st->o->watch);
	snprintf(sort, sizeof(sort), "sort %s%s", mt_col_name(st->o->sort),
		 st->o->rev ? " reversed" : "");
	/* drop = 0: all; 1: no sort; 2: no interval; 3: no url; 4: no time */
	for (drop = 0; drop <= 4; drop++) {
		k = 0;
		parts[k++] = "marutop";
		if (drop < 3)
			parts[k++] = st->c->url;
		if (drop < 4)
			parts[k++] = ts;
		if (drop < 2)
			parts[k++] = every;
		if (drop < 1)
			parts[k++] = sort;
		parts[k++] = "? help, q quit";
		out[0] = '\0';
		for (i = 0; i < k; i++)
			snprintf(out + strlen(out), n - strlen(out), "%s%s",
				 i ? " - " : "", parts[i]);
		if ((int)strlen(out) <= width)
			break;
	}
}

static int render_frame(struct mt_state *st, int width)
{
	char ts[MT_TS_LEN], title[512];
	struct mt_opts *o = st->o;

	buf_reset(&st->frame);
	if (st->help)
		return mt_render_help(&st->frame);
	timestamp(st->have ? st->cur.wall : (long long)time(NULL), ts,
		  sizeof(ts));
	make_title(title, sizeof(title), st, ts, width);
	if (st->err[0])
		return mt_render_error(&st->frame, title, st->err);
	mt_sort(&st->cur, o->sort, o->rev);
	return mt_render_table(&st->frame, title, &st->cur, width, o->sort,
			       o->rev);
}

static void draw(struct mt_state *st)
{
	const char *p, *end, *nl;
	int y = 0, x;

	if (render_frame(st, COLS) < 0)
		return;
	p = (const char *)st->frame.data;
	end = p + st->frame.len;
	erase();
	while (p && p < end && y < LINES) {
		nl = memchr(p, '\n', (size_t)(end - p));
		x = (int)((nl ? nl : end) - p);
		if (y == 0)
			attron(A_BOLD);
		mvaddnstr(y, 0, p, x < COLS ? x : COLS);
		if (y == 0)
			attroff(A_BOLD);
		y++;
		p = nl ? nl + 1 : NULL;
	}
	refresh();
}

/* the next sort column @step to the right among those shown */
static void next_sort(struct mt_state *st, int step)
{
	size_t wid[MT_NCOLS];
	bool show[MT_NCOLS];
	int c = st->o->sort, i;

	mt_layout(&st->cur, COLS, c, wid, show);
	for (i = 0; i < MT_NCOLS; i++) {
		c = (c + step) % MT_NCOLS;
		if (show[c])
			break;
	}
	st->o->sort = c;
}

/* one key on the screen.  Return: false to quit */
static bool key(struct mt_state *st, int ch, bool *now)
{
	struct mt_opts *o = st->o;

	if (ch == ERR)
		return true;
	/* any key leaves the help; q still quits */
	if (st->help && ch != KEY_RESIZE) {
		st->help = false;
		if (ch == 'q' || ch == 'Q')
			return false;
		draw(st);
		return true;
	}
	switch (ch) {
	case 'q':
	case 'Q':
		return false;
	case '?':
	case 'h':
		st->help = true;
		break;
	case 's':
	case '>':
		next_sort(st, 1);
		break;
	case '<':
		next_sort(st, MT_NCOLS - 1);
		break;
	case 'r':
		o->rev = !o->rev;
		break;
	case ' ':
		*now = true;
		return true;
	case KEY_RESIZE:
		break;
	default:
		return true;
	}
	draw(st);
	return true;
}

/* wait until @deadline, reading keys on the screen.  Return: false to stop */
static bool wait_until(struct mt_state *st, uint64_t deadline)
{
	struct timespec ts;
	uint64_t now, ms;
	bool refresh_now = false;

	while (!stop_signal && (now = now_ns()) < deadline) {
		ms = (deadline - now + 999999) / 1000000;
		if (ms > MT_SLICE_MS)
			ms = MT_SLICE_MS;
		if (!st->scr) {
			ts.tv_sec = 0;
			ts.tv_nsec = (long)(ms * 1000000);
			nanosleep(&ts, NULL);
			continue;
		}
		timeout((int)ms);
		if (!key(st, getch(), &refresh_now))
			return false;
		if (refresh_now)
			return true;
	}
	return !stop_signal;
}

static int emit(struct mt_state *st, const struct mt_snap *s, bool first)
{
	char ts[MT_TS_LEN];
	int rc = 0;

	if (st->scr) {
		draw(st);
		return 0;
	}
	buf_reset(&st->frame);
	if (st->o->mode == MT_CSV || st->o->mode == MT_JSON) {
		if (!s)
			return 0;
		timestamp(s->wall, ts, sizeof(ts));
		if (st->o->mode == MT_CSV && first)
			rc = mt_render_csv_header(&st->frame);
		if (rc == 0 && st->o->mode == MT_CSV)
			rc = mt_render_csv(&st->frame, ts, s);
		else if (rc == 0)
			rc = mt_render_json(&st->frame, ts, s);
	} else {
		rc = render_frame(st, plain_width());
		if (rc == 0 && st->o->count != 1)
			rc = buf_put(&st->frame, "\n", 1);
	}
	return rc ? rc : put_stdout(&st->frame);
}

/* Return: the exit status. */
static int run(struct mt_state *st)
{
	struct mt_opts *o = st->o;
	uint64_t interval = (uint64_t)(o->watch * 1e9), next = now_ns();
	struct mt_snap s;
	long n, ok = 0;
	bool first = true, stopped = false;
	int rc;

	for (n = 0; !o->count || n < o->count; n++) {
		next += interval;
		rc = mt_fetch(st->c, &s, st->err, sizeof(st->err));
		if (rc == 0) {
			ok++;
			st->err[0] = '\0';
			mt_rates(&s, st->have ? &st->cur : NULL);
			mt_snap_free(&st->cur);
			st->cur = s;
			st->have = true;
			mt_sort(&st->cur, o->sort, o->rev);
		} else if (o->mode == MT_CSV || o->mode == MT_JSON || o->once) {
			fprintf(stderr, "marutop: %s\n", st->err);
		}
		if (rc == 0 ||
		    (o->mode != MT_CSV && o->mode != MT_JSON && !o->once)) {
			rc = emit(st, rc == 0 ? &st->cur : NULL, first);
			if (rc < 0)
				break; /* stdout went away */
			if (ok)
				first = false;
		}
		if (o->count && n + 1 >= o->count)
			break;
		if (next < now_ns())
			next = now_ns();
		if (!wait_until(st, next)) {
			stopped = true;
			break;
		}
	}
	if (stop_signal)
		stopped = true;
	if (st->scr) {
		endwin();
		delscreen(st->scr);
		st->scr = NULL;
	}
	if (stopped && o->mode != MT_CSV && o->mode != MT_JSON)
		fputs("Stopped.\n", stdout);
	fflush(stdout);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	struct mt_state st;
	struct mt_conn c;
	struct mt_opts o;
	int rc;

	setlocale(LC_ALL, "");
	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : rc == -ENOMEM ? 1 : 2;
	rc = mt_conn_init(&c, o.server, MT_TIMEOUT_MS);
	if (rc < 0) {
		mt_conn_close(&c);
		if (rc != -EINVAL) {
			fprintf(stderr, "marutop: %s\n", strerror(-rc));
			return 1;
		}
		bad_option("invalid server (expected tcp://host:port)",
			   o.server);
		return 2;
	}
	if (o.curve_secret) {
		char why[512];

		if (mt_conn_curve(&c, o.curve_server, o.curve_secret, why,
				  sizeof(why)) < 0) {
			fprintf(stderr, "marutop: %s\n", why);
			mt_conn_close(&c);
			return 1;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	if (!o.once && (sigaction(SIGINT, &sa, NULL) < 0 ||
			sigaction(SIGTERM, &sa, NULL) < 0)) {
		fprintf(stderr, "marutop: sigaction: %s\n", strerror(errno));
		return 1;
	}
	memset(&st, 0, sizeof(st));
	st.o = &o;
	st.c = &c;
	if (o.mode == MT_SCREEN && !o.once && isatty(STDOUT_FILENO) &&
	    isatty(STDIN_FILENO)) {
		const char *term = getenv("TERM");

		if (!term || strcmp(term, "dumb"))
			st.scr = newterm(NULL, stdout, stdin);
	}
	if (st.scr) {
		set_term(st.scr);
		cbreak();
		noecho();
		keypad(stdscr, TRUE);
		curs_set(0);
	} else if (o.mode == MT_SCREEN) {
		o.mode = MT_PLAIN;
	}
	rc = run(&st);
	mt_snap_free(&st.cur);
	buf_free(&st.frame);
	mt_conn_close(&c);
	return rc;
}
