/* SPDX-License-Identifier: Apache-2.0 */
/*
 * holds.c - owners whose regions are kept until they come back
 *           (docs/resource-manager.md, "The reaper")
 *
 * A client that authenticates with client.key may ask, instead of a hold
 * of some milliseconds, to keep its regions until it returns
 * (RM_HOLD_UNTIL_BACK).  maru-server does so when it journals its index:
 * the regions are its cache, and a restart with the journal serves every
 * key in them again, however long the server was away.  Such a client is
 * "durable": the reaper never frees its regions; they go only when
 *
 *   - it returns (the same client id, proven with the key) and frees them
 *     itself, or
 *   - an operator releases them (RELEASE_REQ: pool_monitor --release),
 *     which is refused while the client is connected, or
 *   - a maru-server that lost its journal releases the identity it had
 *     (the id is in the journal it could not serve).
 *
 * The set of durable clients and when each went away are kept in
 * holds.meta (statefmt.h), so that a restart of the resource manager
 * holds them as before.  A declaration is written (tmp, fsync, rename:
 * src/common/atomicfile.h; then the directory fsync) before the AUTH answer
 * that accepts it; departures and returns only change the time shown to
 * operators, and are written before the loop next sleeps (holds_flush()).
 *
 * Layering: uses client.c's table and the file helpers of src/common; it
 * is called by server.c, the cron and rm_open(), never by the region or
 * WAL code.
 *
 * Context: the event-loop thread only.
 */
#include "rm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "atomicfile.h"
#include "log.h"

#define HOLDS_FILE "holds.meta"
#define REMIND_MS (3600u * 1000u) /* a held owner is named again hourly */

struct collect {
	struct state_hold *v;
	size_t n, cap;
	int rc;
};

/* Write holds.meta from the table.  Return: 0 or -errno (logged). */
static int holds_save(struct rm *rm)
{
	struct collect co = {0};
	struct buf b = BUF_INIT;
	struct hnode *hn, *next;
	size_t i;
	int rc = 0;

	htab_for_each(&rm->clients, i, hn, next)
	{
		struct client *c = container_of(hn, struct client, hn);

		if (!c->durable)
			continue;
		if (co.n == co.cap) {
			size_t cap = co.cap ? co.cap * 2 : 8;
			struct state_hold *v = realloc(co.v, cap * sizeof(*v));

			if (!v) {
				rc = -ENOMEM;
				goto out;
			}
			co.v = v;
			co.cap = cap;
		}
		memset(&co.v[co.n], 0, sizeof(co.v[co.n]));
		memcpy(co.v[co.n].owner, c->id, c->idlen);
		co.v[co.n].write_ms = c->write_ms;
		co.v[co.n++].away_since = c->nconns ? 0 : c->away_s;
	}
	rc = state_holds_encode(&b, co.v, co.n);
	if (rc == 0)
		rc = atomicfile_write(rm->state_dirfd, HOLDS_FILE, b.data,
				      b.len, 0600);
	if (rc == 0 && fsync(rm->state_dirfd) < 0)
		rc = -errno;
out:
	if (rc < 0) {
		/* again in a second (not at every turn of the loop) */
		log_err("%s/%s: cannot be written: %s", rm->cfg.state_dir,
			HOLDS_FILE, strerror(-rc));
		rm->holds_dirty = true;
		rm->holds_retry_ms = evloop_now_ms() + 1000;
	} else {
		rm->holds_dirty = false;
	}
	buf_free(&b);
	free(co.v);
	return rc;
}

int holds_load(struct rm *rm)
{
	struct holds_meta m;
	struct state_hold h;
	const char *why = "";
	uint8_t *data = NULL;
	size_t len = 0;
	uint64_t i, kept = 0;
	struct client *c;
	int rc;

	rc = atomicfile_read(rm->state_dirfd, HOLDS_FILE, &data, &len);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0) {
		log_err("%s/%s: %s", rm->cfg.state_dir, HOLDS_FILE,
			strerror(-rc));
		return rc;
	}
	if (state_holds_parse(data, len, &m, &why) < 0) {
		/* refuse, as a damaged checkpoint: starting without it would
		 * reap what its owners were promised */
		log_err("%s/%s: %s: refusing to start (move it aside to "
			"drop the holds it records)",
			rm->cfg.state_dir, HOLDS_FILE, why);
		free(data);
		return -EPROTO;
	}
	for (i = 0; i < m.count; i++) {
		if (state_holds_get(&m, i, &h) < 0) {
			log_err("%s/%s: hold %llu: bad owner: refusing to "
				"start",
				rm->cfg.state_dir, HOLDS_FILE,
				(unsigned long long)i);
			free(data);
			return -EPROTO;
		}
		/* only owners of recovered regions have anything held */
		c = client_get(rm, rm_str_from(h.owner), false);
		if (!c || !c->nallocs)
			continue;
		c->durable = true;
		c->write_ms = h.write_ms;
		/* connected when we stopped: away since we did not see it */
		c->away_s = h.away_since ? h.away_since : (uint64_t)time(NULL);
		c->reminded_ms = evloop_now_ms();
		client_say_held(rm, c);
		kept++;
	}
	free(data);
	if (kept != m.count)
		rm->holds_dirty = true; /* forget the others */
	return 0;
}

int holds_declare(struct rm *rm, struct client *c, uint32_t write_ms)
{
	bool was = c->durable && c->write_ms == write_ms;

	c->durable = true;
	c->write_ms = write_ms;
	c->away_s = 0;
	if (was)
		return 0;
	if (holds_save(rm) < 0) {
		c->durable = false;
		return -EIO;
	}
	log_info("client %s: its regions are held until it returns, however "
		 "long it is away",
		 c->id);
	return 0;
}

void holds_undeclare(struct rm *rm, struct client *c)
{
	if (!c->durable)
		return;
	c->durable = false;
	(void)holds_save(rm);
}

void holds_flush(struct rm *rm)
{
	if (rm->holds_dirty && evloop_now_ms() >= rm->holds_retry_ms)
		(void)holds_save(rm);
}

uint32_t holds_release_wait(const struct rm *rm, const struct client *c)
{
	uint64_t now = (uint64_t)time(NULL), gone, win;

	/* the longest its clients may write on: what it said, and never
	 * less than --recovered-hold */
	win = (uint64_t)rm->cfg.recovered_hold * 1000u;
	if ((c->durable ? c->write_ms : c->hold_ms) > win)
		win = c->durable ? c->write_ms : c->hold_ms;
	win = (win + 999) / 1000;
	if (!c->away_s)
		return (uint32_t)win;
	/* a clock that went back: from now */
	gone = now >= c->away_s ? now - c->away_s : 0;
	return gone >= win ? 0 : (uint32_t)(win - gone);
}

void holds_tick(struct rm *rm)
{
	uint64_t now = evloop_now_ms();
	struct hnode *hn, *next;
	size_t i;

	htab_for_each(&rm->clients, i, hn, next)
	{
		struct client *c = container_of(hn, struct client, hn);

		if (!c->durable || c->nconns || !c->nallocs ||
		    now - c->reminded_ms < REMIND_MS)
			continue;
		c->reminded_ms = now;
		client_say_held(rm, c);
	}
}
