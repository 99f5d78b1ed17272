/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.c - see daemon.h.  A status line is formatted into a stack
 * buffer and sent with the state change in one datagram (sd_notifyf), so
 * systemd never sees READY=1 without the status that explains it.
 * Linked only by the daemons (maru_daemon in CMakeLists.txt): libmaru and
 * the tools do not depend on libsystemd.
 */
#include "daemon.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "log.h"

/* Send "@state\nSTATUS=<fmt...>"; 0 from sd_notify means no socket. */
static void notify(const char *state, const char *fmt, va_list ap)
{
	char status[256];
	int rc;

	vsnprintf(status, sizeof(status), fmt, ap);
	rc = sd_notifyf(0, "%s\nSTATUS=%s", state, status);
	if (rc < 0)
		log_warn("sd_notify %s: %s", state, strerror(-rc));
}

void daemon_ready(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	notify("READY=1", fmt, ap);
	va_end(ap);
}

void daemon_stopping(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	notify("STOPPING=1", fmt, ap);
	va_end(ap);
}
