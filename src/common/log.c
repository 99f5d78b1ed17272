/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - see log.h.  A message is formatted into a stack buffer, then the
 * line around it (timestamp and level, "<N>", or a JSON object) into a
 * second one, which goes out with a single write(2) so that lines from
 * several threads never interleave.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_MSG_MAX 1024  /* the text of one message */
#define LOG_LINE_MAX 2048 /* a line around it (JSON escapes grow it) */

int log_level = LOG_INFO;
static const char *log_ident = "maru";
static enum log_format log_fmt;

/* stderr is the stream systemd gave us (JOURNAL_STREAM=dev:inode) */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	int n = 0;

	if (!js || sscanf(js, "%llu:%llu%n", &dev, &ino, &n) != 2 || js[n])
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

int log_format_from_env(enum log_format *out)
{
	static const struct {
		const char *name;
		enum log_format fmt;
	} names[] = {
		{"plain", LOG_FMT_PLAIN},
		{"journal", LOG_FMT_JOURNAL},
		{"json", LOG_FMT_JSON},
	};
	const char *v = getenv("MARU_LOG_FORMAT");
	size_t i;

	*out = stderr_is_journal() ? LOG_FMT_JOURNAL : LOG_FMT_PLAIN;
	if (!v || !*v)
		return 0;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcasecmp(v, names[i].name)) {
			*out = names[i].fmt;
			return 0;
		}
	}
	return -EINVAL;
}

void log_init(const char *ident, int prio)
{
	log_ident = ident;
	log_level = prio;
	if (log_format_from_env(&log_fmt) < 0)
		log_warn("MARU_LOG_FORMAT=%s: not plain, journal or json; "
			 "using %s",
			 getenv("MARU_LOG_FORMAT"),
			 log_fmt == LOG_FMT_JOURNAL ? "journal" : "plain");
}

/* syslog's eight priorities, as the level word of a line */
static const char *prio_word(int prio)
{
	static const char *const words[] = {
		"emerg", "alert",  "crit", "error",
		"warn",	 "notice", "info", "debug",
	};

	if (prio < 0)
		prio = 0;
	return words[prio > LOG_DEBUG ? LOG_DEBUG : prio];
}

/* "2026-12-03T12:34:56.789Z" (24 bytes + NUL) */
static void timestamp(char out[32])
{
	struct timespec ts;
	struct tm tm;

	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, 32 - n, ".%03uZ",
		 (unsigned)(ts.tv_nsec / 1000000) % 1000u);
}

/*
 * Length of the well-formed UTF-8 sequence at @s (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF), or 0 when it is not one.
 */
static size_t utf8_seq(const unsigned char *s)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t n, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/*
 * @s as the inside of a JSON string into @out (@room bytes), stopping
 * before an escape that does not fit.  Return: bytes written.
 */
static size_t json_escape(char *out, size_t room, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	char esc[8];
	size_t n = 0, k;

	while (*p) {
		k = utf8_seq(p);
		if (k == 0) {
			memcpy(esc, "\\ufffd", 7);
		} else if (*p == '"' || *p == '\\') {
			esc[0] = '\\';
			esc[1] = (char)*p;
			esc[2] = '\0';
		} else if (*p == '\n') {
			memcpy(esc, "\\n", 3);
		} else if (*p == '\t') {
			memcpy(esc, "\\t", 3);
		} else if (*p < 0x20 || *p == 0x7f) {
			snprintf(esc, sizeof(esc), "\\u%04x", *p);
		} else {
			if (n + k > room)
				break;
			memcpy(out + n, p, k);
			n += k;
			p += k;
			continue;
		}
		k = strlen(esc);
		if (n + k > room)
			break;
		memcpy(out + n, esc, k);
		n += k;
		p++;
	}
	return n;
}

size_t log_format_line(char *out, size_t len, enum log_format fmt, int prio,
		       const char *ident, const char *msg)
{
	char ts[32];
	size_t n, i;
	int m;

	if (fmt == LOG_FMT_JOURNAL) {
		m = snprintf(out, len, "<%d>%s: %s", prio < 0 ? 0 : prio & 7,
			     ident, msg);
	} else if (fmt == LOG_FMT_JSON) {
		timestamp(ts);
		m = snprintf(out, len,
			     "{\"ts\":\"%s\",\"level\":\"%s\",\"ident\":\"", ts,
			     prio_word(prio));
		if (m < 0 || (size_t)m >= len - 16)
			m = 0;
		n = (size_t)m;
		/* ident and msg, each leaving room for the rest: "}\n */
		n += json_escape(out + n, len - n - 16, ident);
		memcpy(out + n, "\",\"msg\":\"", 9);
		n += 9;
		if (n + 4 < len)
			n += json_escape(out + n, len - n - 4, msg);
		memcpy(out + n, "\"}\n", 3);
		return n + 3;
	} else {
		timestamp(ts);
		m = snprintf(out, len, "%s %s %s: %s", ts, prio_word(prio),
			     ident, msg);
	}
	if (m < 0)
		m = 0;
	n = (size_t)m;
	if (n > len - 2)
		n = len - 2; /* truncated: keep the newline */
	/* one message, one line: a newline in a client's string (an
	 * instance id) must not forge a line, or a journal priority */
	for (i = 0; i < n; i++)
		if (((unsigned char)out[i] < 0x20 && out[i] != '\t') ||
		    out[i] == 0x7f)
			out[i] = '?';
	out[n++] = '\n';
	return n;
}

void log_write(int prio, const char *fmt, ...)
{
	char msg[LOG_MSG_MAX], line[LOG_LINE_MAX];
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = log_format_line(line, sizeof(line), log_fmt, prio, log_ident, msg);
	/* Nothing useful can be done if stderr is gone. */
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}

/*
 * The one vocabulary of level names: the daemons' --log-level (upstream's
 * debug, info, warn, warning, error) and libmaru's MARU_LOG (which also
 * took syslog's err and notice) accept the same words.
 */
int log_level_parse(const char *name)
{
	static const struct {
		const char *name;
		int prio;
	} levels[] = {
		{"debug", LOG_DEBUG},	  {"info", LOG_INFO},
		{"notice", LOG_NOTICE},	  {"warn", LOG_WARNING},
		{"warning", LOG_WARNING}, {"err", LOG_ERR},
		{"error", LOG_ERR},
	};
	size_t i;

	for (i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		if (strcasecmp(name, levels[i].name) == 0)
			return levels[i].prio;
	return -EINVAL;
}

const char *log_level_name(int prio)
{
	if (prio >= LOG_DEBUG)
		return "debug";
	if (prio >= LOG_INFO)
		return "info";
	if (prio >= LOG_NOTICE)
		return "notice";
	if (prio >= LOG_WARNING)
		return "warn";
	return "error";
}
