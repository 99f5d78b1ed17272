/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - pool_monitor: watch the resource manager's pools
 *
 *   pool_monitor                  one table, plain text, then exit
 *   pool_monitor -w 1             refresh every second (top-style)
 *   pool_monitor -w 1 -c 30       ... 30 times
 *   pool_monitor --csv [-w SEC]   CSV rows (header once)
 *   pool_monitor --scroll -w 1    append frames instead of redrawing
 *   pool_monitor --address H:P    another resource manager
 *   pool_monitor --release OWNER  free what is held for an owner that is
 *                                 away (a maru-server that will not return)
 *
 * Output modes, all drawing the same text from render.c:
 *   one-shot   table or CSV to stdout; no curses at all.  An unreachable
 *              daemon is one line on stderr and exit status 1.
 *   watch      stdout a terminal, no --scroll/--csv: ncurses full screen,
 *              redrawn each frame and fitted to the window (render.c), 'q'
 *              or Ctrl-C quits, '?' shows the keys over the table.  A
 *              resize (KEY_RESIZE: ncurses catches SIGWINCH) lays the
 *              frame out again at once from the snapshots it was made of
 *              (struct pm_frame), without asking the daemon.  Otherwise
 *              plain frames: CSV rows, frames
 *              separated by a blank line (--scroll, TERM=dumb), or
 *              ESC[2J ESC[H before each frame (the upstream tool's
 *              behaviour when stdout is not a terminal curses can
 *              drive).  While the daemon is
 *              unreachable the frame shows the error (CSV: stderr) and the
 *              next frame tries again.
 * Options are a table for src/common/opts.c, the daemons' parser (a bad
 * value: "pool_monitor: invalid count: -1 (must be >= 0)").
 *
 * Ctrl-C (or SIGTERM) ends watch mode with "Stopped." on stdout.  Plain
 * tables written to a terminal are fitted to its width (TIOCGWINSZ); to a
 * pipe they are never narrowed.
 *
 * Signals in watch mode: SIGINT/SIGTERM only set a flag (installed without
 * SA_RESTART, so a sleep returns early); every wait is cut into slices of
 * at most 200 ms and checks the flag between slices.  A STATS request in
 * flight is finished first (at most rm_client's timeout).  One-shot mode
 * keeps the default actions.  SIGPIPE is ignored in both, so that
 * `pool_monitor --csv -w 1 | head` ends on EPIPE.
 *
 * Context: single thread; the rm_client, the snapshots and the frame
 * buffer all belong to main().
 */
#include "pm.h"

#include <curses.h>
#include <errno.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <maru/maru.h>

#include "opts.h"
#include "util.h"

#define PM_DEFAULT_ADDRESS "127.0.0.1:9850"
/* connect + one STATS; the daemon answers in microseconds: 5 s is stuck */
#define PM_TIMEOUT_MS 5000
#define PM_WATCH_MAX 86400.0 /* longest -w: a day */
#define PM_SLICE_MS 200	     /* longest wait between checks of the flag */
#define PM_ERR_LEN 512

struct pm_opts {
	double watch; /* seconds between frames; 0 = one-shot */
	long count;   /* frames in watch mode; 0 = until stopped */
	bool csv;
	bool scroll;
	const char *address;	/* borrows: argv or the default */
	const char *release;	/* borrows: --release OWNER; NULL: none */
	struct opt_list agents; /* --agent URL: maru-agents to show */
};

/* How a watch loop ended. */
enum pm_end {
	PM_END_COUNT,	/* --count frames shown */
	PM_END_STOPPED, /* Ctrl-C, SIGTERM or 'q' */
	PM_END_OUTPUT,	/* stdout went away (EPIPE) */
};

static volatile sig_atomic_t stop_signal; /* set by on_signal() */

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* what --help says around the options (and so the man page) */
static const struct opts_doc doc = {
	.about = "Show the resource manager's pools: used, free, total, delta, "
		 "usage bar.\n",
	.after = "In watch mode on a terminal the screen is redrawn and "
		 "fitted\n"
		 "to the window; q or Ctrl+C quits, ? shows the keys.\n"
		 "\n"
		 "Exit status: 0 on success; 1 when the resource manager "
		 "cannot be\n"
		 "reached (one-shot) or never answered (watch); 2 on bad "
		 "options.\n"
		 "\n"
		 "Environment:\n"
		 "  MARU_RM_KEY_FILE    the resource manager's client.key, "
		 "for one that\n"
		 "                      runs with --require-auth\n"
		 "  MARU_RM_READER_KEY_FILE\n"
		 "                      its reader.key (STATS only), when "
		 "MARU_RM_KEY_FILE\n"
		 "                      is not set\n"
		 "  TERM                dumb, or stdout not a terminal: plain "
		 "frames\n",
};

/* "pool_monitor: @what: @arg" and a hint, on stderr.  Return: -EINVAL */
static int bad_option(const char *what, const char *arg)
{
	fprintf(stderr, "pool_monitor: %s: %s\nTry 'pool_monitor --help'.\n",
		what, arg);
	return -EINVAL;
}

/* --release: an owner's client id, 1-127 bytes */
static int owner_arg(const char *arg, void *dst)
{
	if (!*arg || strlen(arg) > RM_CLIENT_ID_MAX)
		return OPT_BAD;
	*(const char **)dst = arg;
	return 0;
}

/*
 * The command line (src/common/opts.h).  Return: 0 to run, 1 after --help
 * or --version (exit 0), -EINVAL (said: exit 2) or -ENOMEM (exit 1).
 */
static int parse_opts(int argc, char **argv, struct pm_opts *o)
{
	const struct opt t[] = {
		OPTS_SECONDS_IN("watch", 'w', o->watch, PM_WATCH_MAX, 0,
				"seconds, 0 (one snapshot) to 86400",
				.help = "refresh every SEC seconds (fractions "
					"allowed); 0 prints one snapshot and "
					"exits"),
		OPTS_SECONDS_IN("interval", 0, o->watch, PM_WATCH_MAX, 0,
				"seconds, 0 (one snapshot) to 86400",
				.help = "the same as --watch", .dflt = ""),
		OPTS_INT("count", 'c', o->count, 0, LONG_MAX,
			 .help = "stop after N frames in watch mode (0: until "
				 "Ctrl+C)"),
		OPTS_FLAG(
			"csv", o->csv,
			.help = "print CSV, with the columns timestamp, "
				"dax_path, dax_type, total_bytes, free_bytes, "
				"used_bytes, usage_pct"),
		OPTS_FLAG("scroll", o->scroll,
			  .help = "append frames instead of redrawing the "
				  "screen"),
		OPTS_STR("address", 0, o->address, 0, .arg = "H:P",
			 .help = "resource manager address",
			 .why = "the resource manager's own default"),
		OPTS_CALL(
			"release", 0, owner_arg, &o->release,
			"an owner: 1-127 bytes", .arg = "OWNER",
			.help = "free the regions held for OWNER, a client "
				"that is away (listed under \"Held for owners "
				"that are away\"); needs the resource "
				"manager's client.key"),
		OPTS_LIST("agent", 0, o->agents, OPT_NONEMPTY, NULL,
			  .arg = "URL",
			  .help = "also show the maru-agent at tcp://HOST:PORT "
				  "(repeatable): its sessions, the regions it "
				  "lends, the bytes stored and read through "
				  "it (docs/remote.md); CURVE keys from "
				  "MARU_CURVE_SERVER_KEY, "
				  "MARU_CURVE_SECRET_KEY_FILE, "
				  "MARU_AGENT_CURVE_KEY",
			  .dflt = "", .why = "none"),
		OPTS_HELP,
		OPTS_VERSION,
		{0},
	};

	o->watch = 0;
	o->count = 0;
	o->csv = false;
	o->scroll = false;
	o->address = PM_DEFAULT_ADDRESS;
	o->release = NULL;
	o->agents = (struct opt_list){0};
	return opts_parse("pool_monitor", &doc, t, argc, argv);
}

static int install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	/* no SA_RESTART: sleeps and reads return EINTR at once */
	if (sigaction(SIGINT, &sa, NULL) < 0 ||
	    sigaction(SIGTERM, &sa, NULL) < 0)
		return -errno;
	return 0;
}

/* Write @b to stdout.  Return: 0 or -errno (-EPIPE when the reader left). */
static int put_stdout(const struct buf *b)
{
	if (b->len && fwrite(b->data, 1, b->len, stdout) != b->len)
		return errno ? -errno : -EIO;
	if (fflush(stdout) != 0)
		return errno ? -errno : -EIO;
	return 0;
}

/* Columns of the terminal on stdout; 0 (no limit) for a pipe or a file. */
static size_t stdout_width(void)
{
	struct winsize ws;

	if (!isatty(STDOUT_FILENO) ||
	    ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_col == 0)
		return 0;
	return ws.ws_col;
}

/*
 * The agents' STATS into @s (--agent): libmaru's maru_agent_stats(), with
 * the CURVE keys of the environment, as a worker would have them.  An
 * agent that cannot be asked is shown down, with why.
 */
static void fetch_agents(const struct pm_opts *o, struct pm_snap *s)
{
	struct maru_agent_stats st;
	struct maru_config *cfg;
	struct pm_agent a;
	char why[512];
	size_t i;

	s->at_ns = now_ns();
	for (i = 0; i < o->agents.n; i++) {
		memset(&a, 0, sizeof(a));
		a.url = (char *)o->agents.v[i];
		why[0] = '\0';
		if (maru_config_new(&cfg) < 0)
			return;
		if (maru_config_apply_env(cfg, why, sizeof(why)) < 0 ||
		    maru_config_set_agent_url(cfg, o->agents.v[i]) < 0 ||
		    maru_config_set_timeout_ms(cfg, 1000) < 0) {
			a.err = why[0] ? why : "bad agent URL or environment";
		} else if (maru_agent_stats(cfg, &st, why, sizeof(why)) < 0) {
			a.err = why[0] ? why : "no answer";
		} else {
			a.up = true;
			a.sessions = st.sessions;
			a.regions = st.regions;
			a.bytes_mapped = st.bytes_mapped;
			a.revoked = st.revoked;
			a.put_bytes = st.put_bytes;
			a.get_bytes = st.get_bytes;
			a.refused = st.refused_transfers;
		}
		maru_config_free(cfg);
		if (pm_snap_add_agent(s, &a) < 0)
			return;
	}
}

static int one_shot(struct rm_client *c, const struct pm_opts *o)
{
	struct pm_view view = {0};
	struct pm_snap snap = {0};
	struct buf b = BUF_INIT;
	char ts[PM_TS_LEN], err[PM_ERR_LEN];
	int rc;

	rc = pm_fetch(c, &snap, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "pool_monitor: %s\n", err);
		return 1;
	}
	fetch_agents(o, &snap);
	pm_timestamp(time(NULL), ts, sizeof(ts));
	if (o->csv) {
		rc = pm_render_csv_header(&b);
		if (rc == 0)
			rc = pm_render_csv(&b, ts, &snap);
	} else {
		view.width = stdout_width();
		rc = pm_render_view(&b, ts, &snap, NULL, &view);
	}
	if (rc == 0)
		rc = put_stdout(&b);
	if (rc < 0 && rc != -EPIPE)
		fprintf(stderr, "pool_monitor: %s\n", strerror(-rc));
	buf_free(&b);
	pm_snap_free(&snap);
	return rc < 0 && rc != -EPIPE ? 1 : 0;
}

/*
 * The terminal side of watch mode.  Plain mode writes frames to stdout;
 * curses mode (scr != NULL) owns the screen until watch() returns.
 */
struct pm_screen {
	SCREEN *scr;	  /* owns: newterm(), NULL in plain mode */
	bool utf8;	  /* locale can show the title's em dash */
	bool clear;	  /* plain mode: ESC[2J ESC[H before a frame */
	bool blank_after; /* plain mode: blank line after a frame */
	bool help;	  /* curses: the help box is shown over the table */
	double interval;  /* -w, for the help box */
};

/*
 * What the current frame was made of, so that it can be laid out again for
 * a new window size (or with the help box) without a new STATS.
 */
struct pm_frame {
	struct pm_snap shown; /* owns: the pools on screen */
	struct pm_snap base;  /* owns: the frame before, for Delta */
	bool have_shown, have_base;
	bool error; /* the last fetch failed: show err */
	char err[PM_ERR_LEN];
	char ts[PM_TS_LEN];
	struct buf text; /* owns: the frame as last rendered */
};

/* Render @f into f->text for @width columns (0: no limit). */
static int frame_render(struct pm_frame *f, size_t width, bool live)
{
	struct pm_view v = {.width = width, .live = live};

	buf_reset(&f->text);
	if (f->error)
		return pm_render_error_view(&f->text, f->ts, f->err, &v);
	return pm_render_view(&f->text, f->ts, &f->shown,
			      f->have_base ? &f->base : NULL, &v);
}

static void frame_free(struct pm_frame *f)
{
	pm_snap_free(&f->shown);
	pm_snap_free(&f->base);
	buf_free(&f->text);
}

/* Bytes in the UTF-8 sequence that starts with @ch (1 for ASCII). */
static size_t utf8_len(unsigned char ch)
{
	if (ch >= 0xf0)
		return 4;
	if (ch >= 0xe0)
		return 3;
	if (ch >= 0xc0)
		return 2;
	return 1;
}

/* What to draw for a non-ASCII character without a UTF-8 locale. */
static char ascii_for(const char *ch, size_t n)
{
	if (n == 3 && memcmp(ch, "\xe2\x80\x94", 3) == 0)
		return '-'; /* the title's em dash */
	if (n == 3 && memcmp(ch, "\xe2\x80\xa6", 3) == 0)
		return '~'; /* the ellipsis of a shortened path */
	return '?';
}

/*
 * Draw one line of a frame at row @y, cut at the window width (one column
 * per character: the frame has no double-width text; render.c already
 * fitted it, this only guards).  Without a UTF-8 locale curses cannot show
 * non-ASCII: ascii_for() stands in.
 */
static void draw_line(int y, const char *line, size_t len, bool utf8)
{
	size_t i = 0, n, cols = 0, maxcols = COLS > 0 ? (size_t)COLS : 80;

	move(y, 0);
	while (i < len && cols < maxcols) {
		n = utf8_len((unsigned char)line[i]);
		if (n > len - i)
			n = len - i;
		if (n > 1 && !utf8)
			addch((chtype)(unsigned char)ascii_for(line + i, n));
		else
			addnstr(line + i, (int)n);
		i += n;
		cols++;
	}
}

/*
 * The help box: below the @used lines of the table when it fits there,
 * else centred over it; cut to the window.  Drawn in a window of its own
 * that is deleted at once: the next frame's erase() of stdscr repaints
 * what it covered.
 */
static void draw_help(const struct pm_screen *s, int used)
{
	static const char *const keys[] = {
		"q, Q      quit",
		"Ctrl+C    quit as well",
		"?         show or hide this help",
		"Esc       hide this help",
		"",
		NULL, /* the refresh interval */
		"A narrow window hides columns;",
		"widen it to see them all.",
	};
	const char *lines[ARRAY_SIZE(keys)];
	char refresh[64];
	WINDOW *w;
	int n = (int)ARRAY_SIZE(keys), h, wd = 0, i, len;

	snprintf(refresh, sizeof(refresh), "Refresh every %g s.", s->interval);
	for (i = 0; i < n; i++) {
		lines[i] = keys[i] ? keys[i] : refresh;
		len = (int)strlen(lines[i]);
		if (len > wd)
			wd = len;
	}
	h = n + 2;
	wd += 4;
	if (h > LINES)
		h = LINES;
	if (wd > COLS)
		wd = COLS;
	if (h < 3 || wd < 5)
		return;
	w = newwin(h, wd, used + 1 + h <= LINES ? used + 1 : (LINES - h) / 2,
		   (COLS - wd) / 2);
	if (!w)
		return;
	werase(w);
	box(w, 0, 0);
	mvwaddnstr(w, 0, 2, " Keys ", wd - 4);
	for (i = 0; i < n && i + 1 < h - 1; i++)
		mvwaddnstr(w, i + 1, 2, lines[i], wd - 4);
	wnoutrefresh(w);
	delwin(w);
}

/* Replace the whole screen with frame @b; the title line is bold. */
static void draw_frame(const struct pm_screen *s, const struct buf *b)
{
	const char *p = (const char *)b->data, *end = p + b->len, *nl;
	int y = 0;

	erase();
	while (p && p < end && y < LINES) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (y == 0)
			attron(A_BOLD);
		draw_line(y, p, nl ? (size_t)(nl - p) : (size_t)(end - p),
			  s->utf8);
		if (y == 0)
			attroff(A_BOLD);
		y++;
		p = nl ? nl + 1 : NULL;
	}
	wnoutrefresh(stdscr);
	if (s->help)
		draw_help(s, y);
	doupdate();
}

/*
 * Lay frame @f out for the terminal and show it: in curses mode for the
 * window's width, plain to a terminal for its width, plain to a pipe
 * unchanged.
 */
static int show_frame(const struct pm_screen *s, struct pm_frame *f)
{
	int rc;

	if (s->scr) {
		rc = frame_render(f, COLS > 0 ? (size_t)COLS : 80, true);
		if (rc == 0)
			draw_frame(s, &f->text);
		return rc;
	}
	rc = frame_render(f, stdout_width(), false);
	if (rc < 0)
		return rc;
	if (s->clear)
		fputs("\033[2J\033[H", stdout);
	rc = put_stdout(&f->text);
	if (rc == 0 && s->blank_after)
		rc = fputs("\n", stdout) == EOF ? -EIO : 0;
	return rc;
}

/*
 * Sleep until @deadline (now_ns() clock) or until asked to stop.  In curses
 * mode keys are read meanwhile: 'q' stops, '?' and Esc show or hide the
 * help, a resize lays @f out again for the new size.
 * Return: true to go on, false to stop.
 */
static bool wait_until(struct pm_screen *s, uint64_t deadline,
		       struct pm_frame *f)
{
	struct timespec ts;
	uint64_t now, ms;
	int ch;

	while (!stop_signal && (now = now_ns()) < deadline) {
		ms = (deadline - now + 999999) / 1000000;
		if (ms > PM_SLICE_MS)
			ms = PM_SLICE_MS;
		if (!s->scr) {
			ts.tv_sec = 0;
			ts.tv_nsec = (long)(ms * 1000000);
			nanosleep(&ts, NULL);
			continue;
		}
		timeout((int)ms);
		ch = getch();
		if (ch == 'q' || ch == 'Q')
			return false;
		if (ch == '?')
			s->help = !s->help;
		else if (ch == 27 /* Esc */ && s->help)
			s->help = false;
		else if (ch != KEY_RESIZE)
			continue;
		/* out of memory only: the old frame stays on the screen */
		show_frame(s, f);
	}
	return !stop_signal;
}

/* Return: the process exit status. */
static int watch(struct rm_client *c, const struct pm_opts *o,
		 struct pm_screen *s)
{
	struct pm_frame f = {.text = BUF_INIT};
	struct buf head = BUF_INIT;
	struct pm_snap cur;
	uint64_t interval = (uint64_t)(o->watch * 1e9), next;
	enum pm_end end = PM_END_COUNT;
	long frame, ok = 0;
	int rc;

	if (o->csv) {
		rc = pm_render_csv_header(&head);
		if (rc == 0)
			rc = put_stdout(&head);
		if (rc < 0) {
			end = PM_END_OUTPUT;
			goto out;
		}
	}
	next = now_ns();
	for (frame = 0; !o->count || frame < o->count; frame++) {
		next += interval;
		pm_timestamp(time(NULL), f.ts, sizeof(f.ts));
		rc = pm_fetch(c, &cur, f.err, sizeof(f.err));
		if (rc == 0)
			fetch_agents(o, &cur);
		f.error = rc < 0;
		if (rc == 0) {
			ok++;
			/* Delta is against the last frame that had data */
			pm_snap_free(&f.base);
			f.base = f.shown;
			f.have_base = f.have_shown;
			f.shown = cur;
			f.have_shown = true;
		}
		if (o->csv) {
			buf_reset(&f.text);
			if (rc == 0)
				rc = pm_render_csv(&f.text, f.ts, &f.shown);
			else
				fprintf(stderr, "pool_monitor: %s\n", f.err);
			rc = rc < 0 && !f.error ? rc : 0;
			if (rc == 0)
				rc = put_stdout(&f.text);
		} else {
			rc = show_frame(s, &f);
		}
		if (rc < 0) {
			end = PM_END_OUTPUT;
			break;
		}
		if (o->count && frame + 1 >= o->count)
			break;
		/* a frame slower than the interval: start the next one now */
		if (next < now_ns())
			next = now_ns();
		if (!wait_until(s, next, &f)) {
			end = PM_END_STOPPED;
			break;
		}
	}
	if (stop_signal)
		end = PM_END_STOPPED;
out:
	if (s->scr) {
		endwin();
		delscreen(s->scr);
		s->scr = NULL;
		/* leave the last frame on the terminal, as `top -n` does;
		 * the live title (it names q) fits the window it was made for
		 */
		if (end == PM_END_COUNT)
			put_stdout(&f.text);
	}
	if (end == PM_END_STOPPED)
		fputs("\nStopped.\n", stdout);
	fflush(stdout);
	frame_free(&f);
	buf_free(&head);
	if (end == PM_END_OUTPUT)
		return 0;
	return ok ? 0 : 1;
}

/* Take over the terminal when stdout is one; else plain frames. */
static void screen_open(struct pm_screen *s, const struct pm_opts *o)
{
	const char *cs = nl_langinfo(CODESET), *term;

	memset(s, 0, sizeof(*s));
	s->utf8 = cs && strcmp(cs, "UTF-8") == 0;
	s->blank_after = o->scroll && !o->csv;
	s->interval = o->watch;
	if (o->csv || o->scroll)
		return;
	/* a dumb terminal can neither clear nor address: append frames */
	term = getenv("TERM");
	if (term && strcmp(term, "dumb") == 0) {
		s->blank_after = true;
		return;
	}
	if (isatty(STDOUT_FILENO) && isatty(STDIN_FILENO))
		s->scr = newterm(NULL, stdout, stdin);
	if (!s->scr) {
		s->clear = true;
		return;
	}
	set_term(s->scr);
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
}

int main(int argc, char **argv)
{
	struct pm_screen scr;
	struct rm_client c;
	struct pm_opts o;
	int rc;

	setlocale(LC_ALL, "");
	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : rc == -ENOMEM ? 1 : 2;
	if (rm_client_init(&c, o.address, NULL, PM_TIMEOUT_MS) < 0) {
		rm_client_destroy(&c);
		bad_option("invalid address (expected host:port)", o.address);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (o.release) {
		char msg[PM_ERR_LEN];

		rc = pm_release(&c, o.release, msg, sizeof(msg));
		fprintf(rc == 0 ? stdout : stderr, "%s%s\n",
			rc == 0 ? "" : "pool_monitor: ", msg);
		rm_client_destroy(&c);
		return rc == 0 ? 0 : 1;
	}
	if (o.watch > 0) {
		/* one-shot keeps the default Ctrl-C: it ends the program */
		rc = install_signals();
		if (rc < 0) {
			fprintf(stderr, "pool_monitor: sigaction: %s\n",
				strerror(-rc));
			rm_client_destroy(&c);
			return 1;
		}
		screen_open(&scr, &o);
		rc = watch(&c, &o, &scr);
	} else {
		rc = one_shot(&c, &o);
	}
	rm_client_destroy(&c);
	return rc;
}
