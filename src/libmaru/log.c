/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - the handler's log sink (ndctl's log_ctx)
 *
 * libmaru prints nothing by default.  Each handler has a priority (from
 * MARU_LOG at creation, -1 = silent; its level names are the daemons',
 * src/common/log.h) and a replaceable sink; the Python
 * package routes the sink into `logging`.  The priority is tested before
 * anything is formatted (the lerr/ldbg macros), so a disabled debug line
 * costs one relaxed load.  The default sink writes one line to stderr with
 * one write(2), in the daemons' format (src/common/log.h: an ISO-8601
 * timestamp and the level, "<N>" when stderr is the journal, or JSON, as
 * MARU_LOG_FORMAT says), with "libmaru" as the ident.  The format is
 * chosen once, at the first line.
 *
 * While maru_handler_connect() runs, the connecting thread's first error
 * line is also kept as the connect's cause (maru__log_capture, which the
 * lerr macros call while h->capturing is set): whichever module failed
 * (rpc.c, mapper.c, ownership.c) says why without knowing about connect.
 * The calling thread's cause of a failed call is kept as well
 * (maru__fail, maru_handler_last_error()).
 *
 * A leaf: it calls nothing of the library but the handler's log sink.
 *
 * Context: any thread, including the background threads.
 */
#include "private.h"

#include "log.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t maru__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The calling thread's cause of its last failed call, for one handler at
 * a time (the last it failed on), as errno is per thread: a caller reads
 * it right after the call returned the error.
 */
static __thread struct {
	const struct maru_handler *h;
	char text[512];
} last_fail;

int maru__fail(const struct maru_handler *h, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_fail.text, sizeof(last_fail.text), fmt, ap);
	va_end(ap);
	last_fail.h = h;
	ldbg(h, "%s", last_fail.text);
	return rc;
}

void maru__fail_clear(const struct maru_handler *h)
{
	if (last_fail.h == h)
		last_fail.text[0] = '\0';
}

const char *maru__fail_text(const struct maru_handler *h)
{
	return last_fail.h == h ? last_fail.text : "";
}

MARU_EXPORT const char *maru_handler_last_error(const struct maru_handler *h)
{
	return maru__fail_text(h);
}

/*
 * MARU_LOG: a level name (log_level_parse(), the daemons' vocabulary) or
 * one digit, syslog's priority itself (8 and 9 mean debug); anything else
 * still turns logging on, at errors only.
 */
int maru__log_env_priority(void)
{
	const char *v = getenv("MARU_LOG");
	int prio;

	if (!v || !*v)
		return -1;
	if (isdigit((unsigned char)v[0]) && !v[1])
		return v[0] - '0' > LOG_DEBUG ? LOG_DEBUG : v[0] - '0';
	prio = log_level_parse(v);
	return prio < 0 ? LOG_ERR : prio;
}

void maru__log(const struct maru_handler *h, int prio, const char *file,
	       int line, const char *func, const char *fmt, ...)
{
	/* -1 until the first line; a race only computes it twice */
	static _Atomic int line_fmt = -1;
	char msg[1024];
	char out[2048];
	enum log_format f;
	va_list ap;
	size_t n;
	int v;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (h->log_fn) {
		h->log_fn(h->log_arg, prio, file, line, func, msg);
		return;
	}
	v = atomic_load_explicit(&line_fmt, memory_order_relaxed);
	if (v < 0) {
		(void)log_format_from_env(&f); /* unknown: the default */
		atomic_store_explicit(&line_fmt, (int)f, memory_order_relaxed);
	} else {
		f = (enum log_format)v;
	}
	n = log_format_line(out, sizeof(out), f, prio, "libmaru", msg);
	if (write(STDERR_FILENO, out, n) < 0) {
		/* nowhere left to report it */
	}
}

/*
 * An error while maru_handler_connect() runs (h->capturing, set and cleared
 * by handler.c around it): the connecting thread's first one becomes the
 * connect's cause, maru_handler_connect_error().
 */
void maru__log_capture(const struct maru_handler *h, int prio, const char *file,
		       int line, const char *func, const char *fmt, ...)
{
	/* a handler is never const-defined: only its users see it const */
	char *err = (char *)h->conn_err;
	char msg[1024]; /* as maru__log()'s */
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (pthread_equal(pthread_self(), h->capture_thread) && !err[0]) {
		n = strlen(msg);
		if (n >= sizeof(h->conn_err))
			n = sizeof(h->conn_err) - 1; /* cut: one line still */
		memcpy(err, msg, n);
		err[n] = '\0';
	}
	if (prio <=
	    atomic_load_explicit(&h->log_priority, memory_order_relaxed))
		maru__log(h, prio, file, line, func, "%s", msg);
}
