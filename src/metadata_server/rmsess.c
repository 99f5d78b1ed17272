/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rmsess.c - the resource manager session (see rmsess.h)
 *
 * rm_client already reconnects and resends once when a call finds the
 * connection broken; what it cannot know is that a connection died
 * between calls.  The loop tells us (rmsess_readable), we close at once
 * and reconnect from the timer, so a restarted RM sees our client id
 * again within ~100 ms of listening, far inside its grace period.
 *
 * Failure classes: rm_client leaves the connection closed after a
 * transport error and open after a status from the RM; that is how a
 * "retry later" is told apart from a real refusal.
 */
#include "rmsess.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "util.h"

#define BACKOFF_MIN_NS (50ull * 1000000)
#define BACKOFF_MAX_NS (1000ull * 1000000)
#define CACHE_NS (1000ull * 1000000)
#define RMSESS_RECONNECT_MS 250

int rmsess_init(struct rmsess *r, const char *address, char *const *dax,
		int ndax)
{
	memset(r, 0, sizeof(*r));
	r->address = address;
	r->dax = dax;
	r->ndax = ndax;
	r->backoff_ns = BACKOFF_MIN_NS;
	return rm_client_init(&r->c, address, NULL, RMSESS_TIMEOUT_MS);
}

void rmsess_destroy(struct rmsess *r)
{
	rm_client_destroy(&r->c);
}

int rmsess_fd(const struct rmsess *r)
{
	return r->c.fd;
}

/* After a failed call: was it the transport?  Then schedule a retry. */
static bool lost(struct rmsess *r, int rc)
{
	if (rm_client_connected(&r->c))
		return false;
	if (!r->down)
		log_warn("resource manager %s: connection lost (%s); "
			 "reconnecting",
			 r->address, strerror(-rc));
	r->down = true;
	r->retry_at = now_ns() + r->backoff_ns;
	return true;
}

static int stat_cb(const struct rm_pool_stat *s, void *arg)
{
	struct rmsess *r = arg;
	int i;

	r->total_all += s->total_size;
	r->free_all += s->free_size;
	for (i = 0; i < r->ndax; i++) {
		if (strlen(r->dax[i]) == s->path.len &&
		    !memcmp(r->dax[i], s->path.ptr, s->path.len)) {
			r->total_dax += s->total_size;
			r->free_dax += s->free_size;
			break;
		}
	}
	return 0;
}

static int refresh(struct rmsess *r)
{
	int rc;

	r->total_all = r->free_all = r->total_dax = r->free_dax = 0;
	r->cache_ok = false;
	rc = rm_client_stats(&r->c, stat_cb, r);
	if (rc < 0) {
		lost(r, rc);
		return rc;
	}
	r->cache_ok = true;
	r->cache_at = now_ns();
	return 0;
}

/* Re-establish the session: connect, then pin our client id. */
static void reconnect(struct rmsess *r)
{
	struct rm_access_result acc;
	struct rm_handle h;
	int rc;

	/* a short connect budget: the loop waits for this */
	r->c.timeout_ms = RMSESS_RECONNECT_MS;
	rc = rm_client_connect(&r->c);
	r->c.timeout_ms = RMSESS_TIMEOUT_MS;
	if (rc == 0 && r->any_handle && r->any_handle(r->arg, &h)) {
		/* carries our client id: pins it, cancels the RM's reaping */
		rc = rm_client_get_access(&r->c, &h, &acc);
		if (rc < 0 && rm_client_connected(&r->c)) {
			log_err("resource manager %s: region %llu unknown "
				"after reconnect (%d)",
				r->address, (unsigned long long)h.region_id,
				rc);
			rc = 0;
		}
	}
	if (rc < 0) {
		rm_client_disconnect(&r->c);
		r->retry_at = now_ns() + r->backoff_ns;
		r->backoff_ns *= 2;
		if (r->backoff_ns > BACKOFF_MAX_NS)
			r->backoff_ns = BACKOFF_MAX_NS;
		return;
	}
	log_info("resource manager %s: reconnected", r->address);
	r->down = false;
	r->cache_ok = false;
	r->backoff_ns = BACKOFF_MIN_NS;
	r->reconnects++;
}

/* Is the session up, or could it be brought up right now? */
static bool usable(struct rmsess *r)
{
	if (!r->down)
		return true;
	if (now_ns() < r->retry_at)
		return false;
	reconnect(r);
	return !r->down;
}

void rmsess_tick(struct rmsess *r)
{
	if (r->down && now_ns() >= r->retry_at)
		reconnect(r);
}

void rmsess_readable(struct rmsess *r)
{
	uint8_t b;
	ssize_t n;

	if (r->c.fd < 0)
		return;
	n = recv(r->c.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	/* EOF, an error, or bytes nobody asked for: start over */
	rm_client_disconnect(&r->c);
	if (!r->down)
		log_warn("resource manager %s: connection closed by peer; "
			 "reconnecting",
			 r->address);
	r->down = true;
	r->backoff_ns = BACKOFF_MIN_NS;
	r->retry_at = now_ns();
	reconnect(r);
}

struct seen_paths {
	struct rmsess *r;
	bool *found; /* borrows: one per --dax-path */
};

static int seen_cb(const struct rm_pool_stat *s, void *arg)
{
	struct seen_paths *sp = arg;
	int i;

	for (i = 0; i < sp->r->ndax; i++)
		if (strlen(sp->r->dax[i]) == s->path.len &&
		    !memcmp(sp->r->dax[i], s->path.ptr, s->path.len))
			sp->found[i] = true;
	return 0;
}

int rmsess_start(struct rmsess *r)
{
	struct seen_paths sp = {r, NULL};
	int rc, i;

	rc = rm_probe(r->address, 2000);
	if (rc < 0)
		return rc;
	rc = rm_client_connect(&r->c);
	if (rc < 0)
		return rc;
	if (!r->ndax)
		return 0;
	sp.found = calloc((size_t)r->ndax, sizeof(bool));
	if (!sp.found)
		return -ENOMEM;
	rc = rm_client_stats(&r->c, seen_cb, &sp);
	if (rc < 0) {
		log_warn("resource manager %s: STATS failed (%d); cannot "
			 "check --dax-path",
			 r->address, rc);
	} else {
		for (i = 0; i < r->ndax; i++)
			if (!sp.found[i])
				log_warn("--dax-path %s: the resource manager "
					 "has no pool with this path",
					 r->dax[i]);
	}
	free(sp.found);
	return 0;
}

/* ---- store callbacks ---- */

static int op_alloc(void *arg, uint64_t size, struct rm_handle *out)
{
	struct rmsess *r = arg;
	struct rm_alloc_result res;
	int rc = -ENODEV, i;

	if (!usable(r))
		return -EAGAIN;
	r->cache_ok = false;
	if (r->ndax == 0) {
		rc = rm_client_alloc(&r->c, size, NULL, &res);
	} else {
		/* fill-first: the first pool that has room wins */
		for (i = 0; i < r->ndax; i++) {
			rc = rm_client_alloc(&r->c, size, r->dax[i], &res);
			if (rc == 0 || !rm_client_connected(&r->c))
				break;
		}
	}
	if (rc < 0) {
		lost(r, rc);
		return rc;
	}
	*out = res.handle;
	return 0;
}

static int op_free(void *arg, const struct rm_handle *h)
{
	struct rmsess *r = arg;
	int rc;

	if (!usable(r))
		return -EAGAIN;
	r->cache_ok = false;
	rc = rm_client_free(&r->c, h);
	if (rc < 0 && lost(r, rc))
		return -EAGAIN;
	if (rc == -ENOENT) {
		log_warn("region %llu: the resource manager no longer knows "
			 "it",
			 (unsigned long long)h->region_id);
		return 0;
	}
	return rc;
}

static int op_pool_usage(void *arg, bool dax_only, uint64_t *total,
			 uint64_t *avail)
{
	struct rmsess *r = arg;
	int rc;

	if (!r->cache_ok || now_ns() - r->cache_at > CACHE_NS) {
		if (!usable(r))
			return -EAGAIN;
		rc = refresh(r);
		if (rc < 0)
			return rc;
	}
	*total = dax_only ? r->total_dax : r->total_all;
	*avail = dax_only ? r->free_dax : r->free_all;
	return 0;
}

const struct mds_rm_ops rmsess_ops = {
	.alloc = op_alloc,
	.free = op_free,
	.pool_usage = op_pool_usage,
};
