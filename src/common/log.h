/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h - daemon logging: one line per message on stderr
 *
 * log_msg() checks the level before formatting anything (Redis serverLog), so
 * a debug line costs one compare when debug is off.  Priorities are syslog's.
 * Under systemd (JOURNAL_STREAM set) each line gets a "<N>" prefix that
 * journald turns into the priority; on a terminal the line is plain.
 *
 * Context: any thread; a line is written with one write(2).
 */
#ifndef MARU_COMMON_LOG_H
#define MARU_COMMON_LOG_H

#include <syslog.h>

extern int log_level;		/* messages with prio > log_level are dropped */

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
 * log_init - set the program name and level
 * @ident: borrowed for the life of the process, e.g. "maru-server"
 * @prio: LOG_ERR .. LOG_DEBUG
 */
void log_init(const char *ident, int prio);

/**
 * log_level_parse - map a level name to a syslog priority
 * Accepts debug, info, warn, warning, error (any case).
 * Return: the priority, or -EINVAL for an unknown name.
 */
int log_level_parse(const char *name);

/* log_level_name - "debug", "info", "warn" or "error" */
const char *log_level_name(int prio);

#endif
