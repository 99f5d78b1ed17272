/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h - daemon logging: one line per message on stderr
 *
 * log_msg() checks the level before formatting anything (Redis serverLog), so
 * a debug line costs one compare when debug is off.  Priorities are syslog's.
 *
 * A line has one of three formats (log_format_from_env(), MARU_LOG_FORMAT):
 *   plain    2026-12-03T12:34:56.789Z info maru-server: text
 *            (UTC, milliseconds): a terminal, a file, a pipe
 *   journal  <6>maru-server: text
 *            journald turns "<N>" into the priority and adds the time
 *   json     {"ts":"2026-12-03T12:34:56.789Z","level":"info",
 *             "ident":"maru-server","msg":"text"}  (one object a line;
 *            the text escaped, invalid UTF-8 as U+FFFD)
 * The default is journal when stderr is the stream systemd names in
 * JOURNAL_STREAM (its "dev:inode" is stderr's, as systemd.exec(5) says to
 * check), else plain.  libmaru's default sink formats with the same code.
 *
 * Context: any thread; a line is written with one write(2).
 */
#ifndef MARU_COMMON_LOG_H
#define MARU_COMMON_LOG_H

#include <stddef.h>
#include <syslog.h>

extern int log_level; /* messages with prio > log_level are dropped */

#define log_msg(prio, ...)                                                     \
	do {                                                                   \
		if ((prio) <= log_level)                                       \
			log_write((prio), __VA_ARGS__);                        \
	} while (0)

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_dbg(...) log_msg(LOG_DEBUG, __VA_ARGS__)

void log_write(int prio, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/**
 * log_init - set the program name and level, choose the line format
 * @ident: borrowed for the life of the process, e.g. "maru-server"
 * @prio: LOG_ERR .. LOG_DEBUG
 *
 * An unknown MARU_LOG_FORMAT is said in one warning line (in the default
 * format, which is then used).
 */
void log_init(const char *ident, int prio);

/**
 * log_level_parse - map a level name to a syslog priority
 * Accepts debug, info, notice, warn, warning, err, error (any case): the
 * names of both daemons' --log-level and of libmaru's MARU_LOG.
 * Return: the priority, or -EINVAL for an unknown name (each caller
 * decides what that means).
 */
int log_level_parse(const char *name);

/* log_level_name - "debug", "info", "notice", "warn" or "error" */
const char *log_level_name(int prio);

enum log_format {
	LOG_FMT_PLAIN,
	LOG_FMT_JOURNAL,
	LOG_FMT_JSON,
};

/**
 * log_format_from_env - the line format for this process's stderr
 * @out: the format: MARU_LOG_FORMAT's, or the default (see above)
 * Return: 0, or -EINVAL when MARU_LOG_FORMAT names none (then *out is
 * the default).
 */
int log_format_from_env(enum log_format *out);

/**
 * log_format_line - one log line, newline included, into @out
 * @len: room in @out, at least 128; a longer line is cut (the JSON object
 *	 stays whole)
 * @ident: e.g. "maru-server"; @msg: the text, borrowed
 * Control characters other than tab become '?' in plain and journal
 * lines and escapes in JSON: one message is always one line.
 * Return: the line's length in bytes (< @len; no NUL counted).
 * Context: any thread (reads the clock).
 */
size_t log_format_line(char *out, size_t len, enum log_format fmt, int prio,
		       const char *ident, const char *msg);

/* what a daemon's --help says of the log's environment (its own lines
 * follow, aligned the same way) */
#define LOG_HELP_ENV                                                           \
	"  MARU_LOG_FORMAT         log line format: plain (an ISO-8601 UTC "   \
	"time and\n"                                                           \
	"                          the level first), journal (a <N> priority " \
	"prefix)\n"                                                            \
	"                          or json (one object a line); default "      \
	"journal when\n"                                                       \
	"                          stderr is systemd's JOURNAL_STREAM, else "  \
	"plain\n"                                                              \
	"  JOURNAL_STREAM          set by systemd: stderr's device:inode\n"

#endif
