/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reaper.c - clients that are gone lose their regions
 *            (docs/resource-manager.md, The reaper)
 *
 * Runs once a second from the cron timer (Redis serverCron).  A client_id
 * that owns regions loses all of them, each freed exactly as a FREE would
 * (WAL record first), when:
 *   1. grace: no connection has pinned it for --grace-period seconds since
 *      its last pinned connection closed (client.c starts the timer only
 *      when the *last* such connection closes);
 *   2. local process gone: for "<our hostname>:<pid>", kill(pid, 0) says
 *      ESRCH, or /proc/<pid>/stat shows a zombie, or its start time
 *      (field 22) differs from the one cached at the client's first
 *      allocation (the pid was reused).  EPERM from kill counts as alive.
 *      A client that declared a hold when it authenticated (maru-server:
 *      its lease TTL plus a margin, by which its own clients have fenced
 *      their mappings) is reaped by either rule only once the
 *      hold has passed since the later of its last connection closing
 *      and its death (as first seen here); owners recovered after a
 *      restart get --recovered-hold until they authenticate again.
 *
 * A durable client (holds.c: it declared RM_HOLD_UNTIL_BACK) is reaped by
 * neither rule: its regions stay until it returns or an operator releases
 * them (reaper_free_owner() serves RELEASE_REQ).
 *
 * After a restart (reaper_adopt) every recovered owner starts with its
 * grace timer running from the moment the daemon started, and local
 * owners whose process is alive get the start time seen now.  So a client
 * that never comes back is reaped one grace period after the restart, and
 * a dead local process within a second.  Limitation: a pid reused while
 * the daemon was down is not detected by rule 2; rule 1 still applies
 * unless the new process connects with the same client_id.
 *
 * Context: the event-loop thread only.
 */
#include "rm.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"

struct victims {
	struct client *owner;
	struct region **v;
	size_t n;
};

static void pick_owned(struct rm *rm, struct region *r, void *arg)
{
	struct victims *vs = arg;

	if (r->owner == vs->owner)
		vs->v[vs->n++] = r;
}

/* Why the local process of @c is gone, or NULL while it runs. */
static const char *process_gone(struct client *c)
{
	uint64_t start = 0;
	char st = '?';
	int rc;

	if (kill(c->pid, 0) < 0 && errno == ESRCH)
		return "process gone";
	rc = client_read_stat(c->pid, &st, &start);
	if (rc == -ESRCH)
		return "process gone";
	if (rc < 0)
		return NULL;
	if (st == 'Z' || st == 'X')
		return "process gone (zombie)";
	if (c->starttime && start && start != c->starttime)
		return "pid reused";
	return NULL;
}

/*
 * Has the hold @c declared passed?  Its clients may write into its regions
 * until they fence, which they do by the hold after the later of its last
 * connection closing and its death (first seen by us: @c->dead_ms).
 */
static bool hold_over(const struct client *c, uint64_t now)
{
	uint64_t from = c->gone_ms > c->dead_ms ? c->gone_ms : c->dead_ms;

	return !c->hold_ms || (from && now >= from && now - from >= c->hold_ms);
}

/* Why @c must be reaped now, or NULL. */
static const char *reap_reason(struct rm *rm, struct client *c, uint64_t now)
{
	const char *why;

	if (c->nallocs == 0 || c->durable)
		return NULL;
	if (c->local && c->pid) {
		why = process_gone(c);
		if (why && !c->dead_ms)
			c->dead_ms = now ? now : 1;
		if (why && hold_over(c, now))
			return why;
	}
	/*
	 * a stamp ahead of @now (it was once stamped "now | 1", one
	 * millisecond ahead half the time) must not wrap the difference:
	 * a client that had just disconnected lost its regions at once
	 */
	if (c->gone_ms && c->nconns == 0 && now >= c->gone_ms &&
	    now - c->gone_ms >= (uint64_t)rm->cfg.grace_period * 1000u &&
	    hold_over(c, now))
		return "grace period expired";
	return NULL;
}

int reaper_free_owner(struct rm *rm, struct client *c, const char *why,
		      uint32_t *n, uint64_t *bytes)
{
	struct victims vs = {c, NULL, 0};
	size_t i;
	int rc = 0;

	*n = 0;
	*bytes = 0;
	vs.v = malloc((c->nallocs ? c->nallocs : 1) * sizeof(*vs.v));
	if (!vs.v)
		return -ENOMEM;
	region_for_each(rm, pick_owned, &vs);
	log_info("client %s: %s, freeing %zu region(s)", c->id, why, vs.n);
	for (i = 0; i < vs.n; i++) {
		uint64_t len = vs.v[i]->length;

		/* (@c goes with its last region: not touched after) */
		rc = region_free(rm, vs.v[i], 0, why);
		if (rc < 0)
			break;
		(*n)++;
		*bytes += len;
	}
	free(vs.v);
	return rc;
}

/* Free every region of @c.  @c may be freed by the last region_free(). */
static void reap(struct rm *rm, struct client *c, const char *why)
{
	uint64_t bytes;
	uint32_t n;

	/* WAL trouble: the rest waits for the next tick */
	if (reaper_free_owner(rm, c, why, &n, &bytes) < 0 && !n)
		return;
	rm->ctr.reaped_clients++;
	rm->ctr.reaped_regions += n;
	rm->ctr.reaped_bytes += bytes;
}

void reaper_tick(struct rm *rm)
{
	uint64_t now = evloop_now_ms();
	struct client **due = NULL;
	struct hnode *hn, *next;
	const char **why = NULL;
	size_t i, n = 0, cap = 0;

	htab_for_each(&rm->clients, i, hn, next)
	{
		struct client *c = container_of(hn, struct client, hn);
		const char *r = reap_reason(rm, c, now);

		if (!r)
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			struct client **d = realloc(due, nc * sizeof(*d));
			const char **w = realloc(why, nc * sizeof(*w));

			if (d)
				due = d;
			if (w)
				why = w;
			if (!d || !w)
				goto out;
			cap = nc;
		}
		due[n] = c;
		why[n++] = r;
	}
	/* reaping can free client entries: only after the table walk */
	for (i = 0; i < n; i++)
		reap(rm, due[i], why[i]);
out:
	free(due);
	free(why);
}

void reaper_adopt(struct rm *rm)
{
	uint64_t now = evloop_now_ms();
	struct hnode *hn, *next;
	struct client *c;
	size_t i;
	char st;

	if (!now)
		now = 1; /* 0 means "no timer" */

	htab_for_each(&rm->clients, i, hn, next)
	{
		c = container_of(hn, struct client, hn);
		if (!c->nallocs || c->durable)
			continue;
		c->gone_ms = now;
		c->away_s = (uint64_t)time(NULL);
		/* the hold it declared is not in the WAL: assume one that
		 * covers maru-server's default lease TTL until it
		 * authenticates again (and declares its own) */
		c->hold_ms = (uint32_t)rm->cfg.recovered_hold * 1000u;
		if (c->local &&
		    client_read_stat(c->pid, &st, &c->starttime) < 0)
			c->starttime = 0;
	}
}
