/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease.c - client leases, so a crashed handler's regions are reclaimed
 *
 * Protocol: later-additions.md §1.  At connect, after HANDSHAKE, the handler
 * picks a random lease_id and sends HEARTBEAT {instance_id, lease_id}.  If
 * the reply carries lease_ttl > 0 the server tracks the lease: every
 * REQUEST_ALLOC names it, and a background thread renews it every TTL/4 over
 * its own lock-step connection (so renewals never queue behind a long batch
 * on the main socket).  If no renewal succeeded for 3/4 TTL, writes (alloc,
 * store) fail with -EKEYEXPIRED until one succeeds again, because the
 * server may reclaim the regions at any moment after TTL; the next write
 * then first tries a renewal of its own (fence.c).  Every renewal is a
 * verification (maru__verify): a reply with lease_expired, or from another
 * server process (server_id), means the regions are gone.  They are fenced
 * at once, this thread ends, and the next write recovers: a new lease
 * (maru__lease_start(h, true)) and a new region.  On a clean close the
 * regions are returned first, then the lease is released (HEARTBEAT
 * lease_release=true).
 *
 * A server that answers {} or lease_ttl 0 grants no lease: nothing here
 * runs and the handler behaves as before.
 *
 * Context: start/stop/release from connect/close and from a recovery
 * (@wlock held); maru__lease_ok from any thread (atomics).
 */
#include "private.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

static void *lease_thread(void *arg)
{
	struct maru_handler *h = arg;
	struct maru__lease *l = &h->lease;
	uint64_t period = l->ttl_ns / 4, next, sent;
	struct timespec ts;
	bool failing = false;
	int rc;

	next = maru__now_ns() + period;
	pthread_mutex_lock(&l->lock);
	while (!l->stop) {
		ts.tv_sec = (time_t)(next / 1000000000ull);
		ts.tv_nsec = (long)(next % 1000000000ull);
		if (pthread_cond_timedwait(&l->cv, &l->lock, &ts) !=
			    ETIMEDOUT &&
		    maru__now_ns() < next)
			continue;
		if (l->stop)
			break;
		pthread_mutex_unlock(&l->lock);
		sent = maru__now_ns();
		rc = maru__verify(h, &l->rpc);
		if (rc == -ESTALE) {
			/* fenced; the next write starts a new lease */
			pthread_mutex_lock(&l->lock);
			break;
		} else if (rc == 0 || rc == -EAGAIN) {
			if (failing)
				linfo(h, "lease %s renewed again", l->id);
			failing = false;
		} else if (!failing) {
			lwarn(h, "lease %s: renewal failed: %s", l->id,
			      strerror(-rc));
			failing = true;
		}
		next = sent + period;
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

void maru__lease_init(struct maru_handler *h)
{
	struct maru__lease *l = &h->lease;
	pthread_condattr_t a;

	pthread_mutex_init(&l->lock, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cv, &a);
	pthread_condattr_destroy(&a);
}

void maru__lease_destroy(struct maru_handler *h)
{
	pthread_cond_destroy(&h->lease.cv);
	pthread_mutex_destroy(&h->lease.lock);
}

int maru__lease_start(struct maru_handler *h, bool recovering)
{
	struct maru__lease *l = &h->lease;
	struct maru__hb hb;
	uint64_t sent;
	int rc, tmo;

	l->active = false;
	maru__uuid4(l->id);
	sent = maru__now_ns();
	rc = maru__heartbeat(h, &h->rpc, l->id, false, &hb);
	if (rc < 0 && recovering) {
		lwarn(h, "lease %s: HEARTBEAT failed: %s", l->id,
		      strerror(-rc));
		return rc;
	}
	if (rc < 0) {
		ldbg(h, "no lease: HEARTBEAT failed: %s", strerror(-rc));
		return 0;
	}
	if (recovering) {
		/* the server we start over with (fence.lock is held) */
		h->fence.known = true;
		snprintf(h->fence.server_id, sizeof(h->fence.server_id), "%s",
			 hb.has_server_id ? hb.server_id : "");
	}
	if (!(hb.lease_ttl > 0)) {
		ldbg(h, "server grants no lease");
		return 0;
	}
	l->ttl_ns = (uint64_t)(hb.lease_ttl * 1e9);
	if (l->ttl_ns < 4000000) /* 4 ms: a renewal period of 1 ms */
		l->ttl_ns = 4000000;
	atomic_store(&l->renewed_ns, sent);
	l->active = true;

	/* renewals must not wait longer than a period */
	tmo = h->cfg.timeout_ms;
	if ((uint64_t)tmo * 1000000ull > l->ttl_ns / 4)
		tmo = (int)(l->ttl_ns / 4 / 1000000);
	if (tmo < 1)
		tmo = 1;
	rc = maru__rpc_open(&l->rpc, h, h->cfg.server_url, tmo, false, 1);
	if (rc < 0)
		goto out_inactive;
	l->rpc_open = true;
	maru__rpc_set_monitor(&l->rpc, &h->fence.mon);
	l->stop = false;
	rc = -pthread_create(&l->thread, NULL, lease_thread, h);
	if (rc < 0)
		goto out_rpc;
	l->thread_started = true;
	ldbg(h, "lease %s granted, ttl %.3f s", l->id, hb.lease_ttl);
	return 0;

out_rpc:
	maru__rpc_close(&l->rpc);
	l->rpc_open = false;
out_inactive:
	l->active = false;
	lerr(h, "lease %s: cannot start the heartbeat: %s", l->id,
	     strerror(-rc));
	return rc;
}

void maru__lease_stop(struct maru_handler *h)
{
	struct maru__lease *l = &h->lease;

	if (l->thread_started) {
		pthread_mutex_lock(&l->lock);
		l->stop = true;
		pthread_cond_signal(&l->cv);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->thread, NULL);
		l->thread_started = false;
	}
	if (l->rpc_open)
		maru__rpc_close(&l->rpc);
	l->rpc_open = false;
}

bool maru__lease_ok(struct maru_handler *h)
{
	struct maru__lease *l = &h->lease;

	if (!l->active)
		return true;
	return maru__now_ns() - atomic_load(&l->renewed_ns) < l->ttl_ns / 4 * 3;
}

void maru__lease_release(struct maru_handler *h)
{
	struct maru__hb hb;
	int rc;

	if (!h->lease.active)
		return;
	rc = maru__heartbeat(h, &h->rpc, h->lease.id, true, &hb);
	if (rc < 0)
		lwarn(h, "lease %s: release failed: %s", h->lease.id,
		      strerror(-rc));
	h->lease.active = false;
}
