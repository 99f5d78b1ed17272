/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - see log.h.  A message is formatted into a stack buffer and written
 * with a single write(2) so that lines from several threads never interleave.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int log_level = LOG_INFO;
static const char *log_ident = "maru";
static bool log_journal;	/* stderr goes to journald: add <N> prefixes */

void log_init(const char *ident, int prio)
{
	log_ident = ident;
	log_level = prio;
	log_journal = getenv("JOURNAL_STREAM") != NULL;
}

void log_write(int prio, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n = 0;
	int m;

	if (log_journal)
		n = snprintf(line, sizeof(line), "<%d>", prio);
	m = snprintf(line + n, sizeof(line) - n, "%s: ", log_ident);
	if (m > 0)
		n += m;
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (m > 0)
		n += m;
	if (n > (int)sizeof(line) - 2)
		n = sizeof(line) - 2;	/* truncated: keep the newline */
	line[n++] = '\n';
	/* Nothing useful can be done if stderr is gone. */
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}

int log_level_parse(const char *name)
{
	static const struct {
		const char *name;
		int prio;
	} levels[] = {
		{ "debug", LOG_DEBUG },	 { "info", LOG_INFO },
		{ "warn", LOG_WARNING }, { "warning", LOG_WARNING },
		{ "error", LOG_ERR },
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
	if (prio >= LOG_WARNING)
		return "warn";
	return "error";
}
