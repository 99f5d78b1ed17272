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

#include "util.h"

static int collect(const struct rm_pool_stat *st, void *arg)
{
	return pm_snap_add(arg, st);
}

static int collect_owner(const struct rm_owner *o, void *arg)
{
	return pm_snap_add_owner(arg, o);
}

int pm_fetch(struct rm_client *c, struct pm_snap *out, char *err, size_t errlen)
{
	struct pm_snap s = {0};
	char *p;
	int rc;

	rc = rm_client_stats(c, collect, &s);
	/* who is away and what is held for them: shown when the resource
	 * manager says (an older one does not); the pools in any case */
	if (rc == 0 && rm_client_owners(c, collect_owner, &s, NULL) == -ENOMEM)
		rc = -ENOMEM;
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

int pm_release(struct rm_client *c, const char *id, char *msg, size_t len)
{
	struct rm_release_resp r;
	char num[32];
	int rc;

	rc = rm_client_release(c, id, &r);
	if (rc == 0)
		snprintf(msg, len, "released %s: %u region(s), %s freed", id,
			 r.regions, format_bytes(r.bytes, num, sizeof(num)));
	else if (rc == -ENOENT)
		snprintf(msg, len,
			 "%s owns no region at the resource manager "
			 "at %s:%u (pool_monitor lists the owners that are "
			 "away)",
			 id, c->host, c->port);
	else if (rc == -EBUSY)
		snprintf(msg, len,
			 "%s is connected: only the regions of an "
			 "owner that is away are released",
			 id);
	else if (rc == -EAGAIN)
		snprintf(msg, len,
			 "%s left too recently: its clients may "
			 "still write into its regions; try again in %u s",
			 id, r.regions);
	else if (rc == -EACCES)
		snprintf(msg, len,
			 "the resource manager at %s:%u refused: %s "
			 "(set MARU_RM_KEY_FILE to its client.key)",
			 c->host, c->port,
			 c->error[0] ? c->error : "not authenticated");
	else if (rc == -ENOTSUP)
		snprintf(msg, len,
			 "the resource manager at %s:%u does not "
			 "know RELEASE (an older version)",
			 c->host, c->port);
	else if (c->answered)
		snprintf(msg, len, "the resource manager at %s:%u refused: %s",
			 c->host, c->port,
			 c->error[0] ? c->error : strerror(-rc));
	else
		snprintf(msg, len,
			 "cannot reach the resource manager at "
			 "%s:%u: %s",
			 c->host, c->port, strerror(-rc));
	return rc;
}
