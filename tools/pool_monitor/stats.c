/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c - pool_monitor's one question to the resource manager: STATS
 *
 * The wire work (connect with timeout, retry once on a broken connection,
 * ERROR_RESP handling) is rm_client's; this file collects the records into
 * a snapshot and, on failure, writes the single line pool_monitor shows:
 *   cannot reach the resource manager at HOST:PORT: <strerror>
 *   unexpected reply from the resource manager at HOST:PORT: ...
 *   the resource manager at HOST:PORT refused STATS: <its message>
 * Anything rm_client reports that is not a reply (refused, reset, timed
 * out, unknown host) counts as "cannot reach".
 * The client keeps its connection between frames in watch mode; after a
 * transport error rm_client has closed it and the next call redials.
 */
#include "pm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int collect(const struct rm_pool_stat *st, void *arg)
{
	return pm_snap_add(arg, st);
}

int pm_fetch(struct rm_client *c, struct pm_snap *out, char *err, size_t errlen)
{
	struct pm_snap s = {0};
	char *p;
	int rc;

	rc = rm_client_stats(c, collect, &s);
	if (rc == 0) {
		pm_snap_sort(&s);
		*out = s;
		return 0;
	}
	pm_snap_free(&s);
	if (c->error[0])
		snprintf(err, errlen,
			 "the resource manager at %s:%u refused STATS: %s",
			 c->host, c->port, c->error);
	else if (rc == -EPROTO)
		snprintf(err, errlen,
			 "unexpected reply from the resource manager at %s:%u "
			 "(is it a resource manager?)",
			 c->host, c->port);
	else if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	else
		snprintf(err, errlen,
			 "cannot reach the resource manager at %s:%u: %s",
			 c->host, c->port, strerror(-rc));
	/* the daemon's message goes to a terminal: no control bytes */
	for (p = err; *p; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	}
	return rc;
}
