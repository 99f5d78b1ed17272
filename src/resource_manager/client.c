/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.c - per-client_id bookkeeping for pinning and the reaper
 *
 * A struct client exists while something refers to its client_id: a
 * connection that pinned it (nconns) or a region it owns (nallocs).  It
 * records when the last pinned connection closed (the grace timer) and,
 * for client_ids of this host ("<hostname>:<pid>"), the pid and the
 * process start time seen at its first allocation (the pid-reuse rule).
 *
 * Upstream quirk fixed here (docs/resource-manager.md): the grace timer starts
 * only when the *last* connection with that client_id closes, not when any
 * of them does.
 *
 * Table: src/common/htab.h, hashed on the id bytes (FNV-1a).
 * Ownership: @rm owns every entry; regions and connections borrow them.
 * Context: the event-loop thread only.
 */
#include "rm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

/*
 * Split "<hostname>:<pid>" at the last ':'; the client is local when the
 * hostname part equals ours and the pid part is a positive decimal.
 */
static void classify(struct rm *rm, struct client *c)
{
	const char *colon = strrchr(c->id, ':');
	unsigned long v = 0;
	const char *p;

	c->local = false;
	c->pid = 0;
	if (!colon || !colon[1])
		return;
	if ((size_t)(colon - c->id) != strlen(rm->hostname) ||
	    memcmp(c->id, rm->hostname, (size_t)(colon - c->id)) != 0)
		return;
	for (p = colon + 1; *p; p++) {
		if (*p < '0' || *p > '9' || v > 4194304)
			return;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	if (v == 0 || v > 4194304) /* PID_MAX_LIMIT */
		return;
	c->local = true;
	c->pid = (pid_t)v;
}

struct client *client_get(struct rm *rm, struct rm_str id, bool create)
{
	struct hnode *n;
	struct client *c;
	uint64_t h;

	if (id.len == 0 || id.len > RM_CLIENT_ID_MAX)
		return NULL;
	h = htab_hash_bytes(id.ptr, id.len);
	htab_for_hash(&rm->clients, h, n)
	{
		c = container_of(n, struct client, hn);
		if (n->hash == h && c->idlen == id.len &&
		    memcmp(c->id, id.ptr, id.len) == 0)
			return c;
	}
	if (!create || htab_reserve(&rm->clients) < 0)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	memcpy(c->id, id.ptr, id.len);
	c->idlen = id.len;
	classify(rm, c);
	htab_insert(&rm->clients, &c->hn, h);
	rm->nclients++;
	return c;
}

void client_maybe_release(struct rm *rm, struct client *c)
{
	if (c->nconns || c->nallocs)
		return;
	if (c->durable)
		rm->holds_dirty = true; /* nothing of it is held any more */
	htab_remove(&rm->clients, &c->hn);
	rm->nclients--;
	free(c);
}

/* "2026-12-06T07:15:47Z" for the log */
static const char *utc(uint64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!t || !gmtime_r(&tt, &tm) ||
	    !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, len, "an unknown time");
	return buf;
}

void client_say_held(struct rm *rm, const struct client *c)
{
	char when[32];

	(void)rm;
	log_info("client %s: away since %s; its %zu region(s), %llu bytes, "
		 "are held until it returns (to free them: pool_monitor "
		 "--release '%s')",
		 c->id, utc(c->away_s, when, sizeof(when)), c->nallocs,
		 (unsigned long long)c->bytes, c->id);
}

void client_pin(struct rm *rm, struct client *c)
{
	if (c->gone_ms)
		log_dbg("client %s: reconnected, grace timer cancelled", c->id);
	if (c->durable && !c->nconns && c->away_s) {
		log_info("client %s: back after %llu s; it holds its %zu "
			 "region(s) again",
			 c->id,
			 (unsigned long long)((uint64_t)time(NULL) - c->away_s),
			 c->nallocs);
		rm->holds_dirty = true;
	}
	c->nconns++;
	c->gone_ms = 0;
	c->away_s = 0;
}

void client_unpin(struct rm *rm, struct client *c)
{
	c->nconns--;
	if (c->nconns == 0 && c->nallocs > 0) {
		/* 0 means "no timer": never stamp 0 (nor a time ahead of
		 * the clock, as "| 1" did: see reap_reason()) */
		c->gone_ms = evloop_now_ms();
		if (!c->gone_ms)
			c->gone_ms = 1;
		c->away_s = (uint64_t)time(NULL);
		if (c->durable) {
			c->reminded_ms = c->gone_ms;
			rm->holds_dirty = true;
			client_say_held(rm, c);
		} else {
			log_dbg("client %s: disconnected with %zu region(s), "
				"grace period %d s",
				c->id, c->nallocs, rm->cfg.grace_period);
		}
	}
	client_maybe_release(rm, c);
}

int client_read_stat(pid_t pid, char *state, uint64_t *starttime)
{
	char path[64], buf[1024];
	unsigned long long st = 0;
	const char *p;
	FILE *f;
	size_t n;
	int field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* comm (field 2) may hold spaces and ')': skip to the last ')' */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -EPROTO;
	p += 2;
	*state = *p;
	/* p is at field 3; field 22 is 19 spaces further */
	for (field = 3; field < 22 && *p; p++)
		if (*p == ' ')
			field++;
	if (field != 22 || sscanf(p, "%llu", &st) != 1)
		return -EPROTO;
	*starttime = st;
	return 0;
}

void client_table_free(struct rm *rm)
{
	htab_destroy(&rm->clients, offsetof(struct client, hn));
	rm->nclients = 0;
}
