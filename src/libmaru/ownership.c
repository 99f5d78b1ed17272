/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ownership.c - what this handler owns, and knowing when it no longer does
 *
 * Two halves of one concept, leases and fencing, which call each other
 * (a renewal is a verification; a recovery starts a new lease).
 *
 * Leases (docs/metadata-server.md).  At connect, after HANDSHAKE, the
 * handler picks a random lease_id and sends HEARTBEAT {instance_id,
 * lease_id}.  If the reply carries lease_ttl > 0 the server tracks the
 * lease: every REQUEST_ALLOC names it, and a background thread renews it
 * every TTL/4 over its own lock-step connection (so renewals never queue
 * behind a long batch on the main socket).  If no renewal succeeded for
 * 3/4 TTL, writes (alloc, store) fail with -EKEYEXPIRED until one succeeds
 * again, because the server may reclaim the regions at any moment after
 * TTL; the next write then first tries a renewal of its own.  On a clean
 * close the regions are returned first, then the lease is released
 * (HEARTBEAT lease_release=true).  A server that answers {} or lease_ttl 0
 * grants no lease: no thread runs and the handler behaves as before.
 *
 * Loss of ownership: detect it early, fence, recover.
 *
 * A handler owns its regions only as long as (a) the maru-server process
 * that allocated them still runs -- a restarted server knows nothing, and
 * the resource manager's reaper frees a dead server's regions within about
 * a second -- and (b) its lease has not expired.  Once either is false the
 * pool gives the same offsets to the next client that asks, and anything
 * this handler writes through its old mappings lands in that client's
 * memory.  This module closes that hole:
 *
 * Detection.
 *  - maru-server sends a random "server_id" in HANDSHAKE and HEARTBEAT
 *    replies (docs/protocol.md §2).  @server_id is HANDSHAKE's; every
 *    verification compares the reply's.  A different id, or none where
 *    there was one, means another server process (MARU_ALARM_LOST_SERVER);
 *    lease_expired means the lease is gone (MARU_ALARM_LOST_LEASE).
 *  - Every lease renewal is such a verification.
 *  - rpc.c's watch reports every dropped connection to the server, seen by
 *    its thread (a hangup) or by a call, once per connection, through
 *    maru__fence_lost(), which raises MARU_ALARM_SUSPECT at once.  The
 *    watch thread then calls maru__fence_tick() after each of its rounds,
 *    which verifies every 200 ms until a server answers,
 *    and every write (alloc, store, batch_store) that sees the flag first
 *    verifies synchronously (maru__gate_slow): the window is the memcpy in
 *    flight, not a heartbeat period.  With nothing amiss the write path
 *    pays one relaxed atomic load (maru__write_gate).
 *
 * Fencing, at once, in whichever thread found out (under @lock): every
 * mapping no longer ours (owned regions for an expired lease, all mappings
 * for a new server, whose predecessor's regions are all gone) is replaced
 * in place by anonymous private memory (mapper.c).  Pointers and Python
 * memoryviews stay valid, nothing crashes, writes go nowhere.
 *
 * Recovery, by the next write (@wlock held): the lease thread is stopped,
 * the fenced regions leave the owned-region manager (page allocators and
 * the local key map with them; no RETURN_ALLOC: they are not the new
 * server's), fenced mappings are retired, a new lease starts, and the
 * next page allocation obtains a fresh region like an auto-expansion (the
 * region-added callback fires).  A store of a page in a fenced region
 * fails with -ESTALE without any RPC.
 *
 * Eviction notices ride on the same HEARTBEATs (docs/metadata-server.md,
 * "Eviction"): the requests acknowledge the last one held and the replies
 * carry new ones, which are the handler's to apply.  This module neither
 * reads nor applies them: it asks and tells through the hooks handler.c
 * gives at maru__lease_init(), which lead to evict.c (struct
 * maru__hb_hooks: @ack for the request, @on_reply for every decoded reply,
 * @on_round after each round of the lease thread, where the inbox is
 * applied if no writer is busy).
 *
 * Dependencies (docs/threads.md): kv.c -> handler.c -> evict.c -> this
 * file -> shmindex.c (its report rides on the HEARTBEAT), rpc.c
 * (HEARTBEATs), mapper.c (fencing), alloc.c and keymap.c (a recovery drops
 * the owned regions and local keys) -> codec.c.  Nothing here names a
 * function of the files above it: they reach it only through the hooks;
 * rpc.c reaches this file only through the two callbacks given to its
 * watch (maru__fence_lost: flags only; maru__fence_tick: the watch thread,
 * no lock held).
 *
 * Locks, in this order: fence.lock -> olock -> the mapper's lock.  Nothing
 * logs with fence.lock held (the Python log sink takes the GIL).
 *
 * Threads: the lease thread (renewals), and the rpc watch's thread, which
 * runs maru__fence_tick (docs/threads.md).
 */
#include "private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mds_proto.h"

#define RETRY_NS (200ull * 1000000ull) /* background re-verification */

void maru__fence_init(struct maru_handler *h)
{
	struct maru__fence *f = &h->fence;

	memset(f, 0, sizeof(*f));
	atomic_init(&f->alarm, 0);
	pthread_mutex_init(&f->lock, NULL);
}

void maru__fence_destroy(struct maru_handler *h)
{
	pthread_mutex_destroy(&h->fence.lock);
}

void maru__fence_reset(struct maru_handler *h)
{
	struct maru__fence *f = &h->fence;

	pthread_mutex_lock(&f->lock);
	atomic_store(&f->alarm, 0);
	f->known = false;
	f->server_id[0] = '\0';
	f->retry_at = 0;
	/* a test knob: leave the verification to the write path */
	f->bg_verify = !maru__test_getenv("MARU_TEST_NO_BACKGROUND_VERIFY");
	pthread_mutex_unlock(&f->lock);
}

/* copy a reply's server_id (absent = "") into @dst (65 bytes) */
static void copy_id(char *dst, const char *id, uint32_t len)
{
	if (!id)
		len = 0;
	if (len > 64)
		len = 64;
	memcpy(dst, id ? id : "", len);
	dst[len] = '\0';
}

void maru__fence_set_server(struct maru_handler *h, const struct maru__reply *r)
{
	struct maru__fence *f = &h->fence;

	pthread_mutex_lock(&f->lock);
	f->known = true;
	copy_id(f->server_id, r->server_id, r->server_id_len);
	pthread_mutex_unlock(&f->lock);
	ldbg(h, "server id %s", r->server_id_len ? f->server_id : "(none)");
}

/*
 * The remote path's report into @hr: whether our bytes go through the
 * agent, and what each counter grew by since the last HEARTBEAT told it.
 * h->rt_told advances by what this report tells, only ever forward, so
 * that two heartbeats at once (the lease thread's, a verification) tell
 * disjoint parts; a report the server did not take is given back
 * (rt_give_back) and told again by the next one.  So nothing is lost to
 * a failed call, a new lease or a restarted server; a reply lost after
 * the server took the report counts it twice (statistics only).
 */
static void rt_take(struct maru_handler *h, struct maru__hb_report *hr)
{
	struct maru_remote_stats s;
	uint_fast64_t told;
	uint64_t *now = hr->rt;
	int i;

	maru__remote_counters(h->remote, &s);
	now[MDS_RT_PUTS] = s.puts;
	now[MDS_RT_PUT_BYTES] = s.put_bytes;
	now[MDS_RT_GETS] = s.gets;
	now[MDS_RT_GET_BYTES] = s.get_bytes;
	now[MDS_RT_ERRORS] = s.errors;
	for (i = 0; i < MDS_RT_N; i++) {
		told = atomic_load(&h->rt_told[i]);
		do {
			if (now[i] <= told)
				break;
		} while (!atomic_compare_exchange_weak(&h->rt_told[i], &told,
						       now[i]));
		now[i] = now[i] > told ? now[i] - told : 0;
	}
	hr->remote = true;
	hr->remote_on = s.remote;
}

static void rt_give_back(struct maru_handler *h,
			 const struct maru__hb_report *hr)
{
	int i;

	for (i = 0; i < MDS_RT_N; i++)
		atomic_fetch_sub(&h->rt_told[i], hr->rt[i]);
}

int maru__heartbeat(struct maru_handler *h, struct maru__rpc *rpc,
		    const char *lease_id, bool release, struct maru__hb *out)
{
	struct maru__hb_report hr = {0};
	struct maru__rpc_reply rr;
	uint64_t gen;
	struct maru__reply rep;
	struct buf keys = BUF_INIT;
	struct maru__msg m;
	int rc;

	/* the shared index's report: lost with a failed call
	 * (hints and statistics, nothing a client depends on) */
	maru__idx_take_report(h, &keys, &hr.ntouched, hr.idx, hr.lk);
	hr.touched = keys.data;
	hr.touched_len = keys.len;
	if (!release)
		hr.page_size = h->page_size;
	/* with an agent: the remote path's figures (h->remote lives until
	 * after the last heartbeat, the release's: teardown frees it) */
	if (h->remote)
		rt_take(h, &hr);
	gen = maru__idx_susp_gen(h);
	maru__msg_init(&m, MDS_HEARTBEAT);
	rc = maru__enc_heartbeat(&m, h->instance_id, lease_id, release,
				 h->lease.hooks.ack(h->lease.hooks.arg), &hr);
	buf_free(&keys);
	if (rc == 0)
		rc = maru__rpc_call(rpc, &m, &rr);
	maru__msg_release(&m);
	if (rc < 0) {
		if (hr.remote)
			rt_give_back(h, &hr);
		return rc;
	}
	memset(&rep, 0, sizeof(rep));
	rc = maru__decode_reply(rr.payload, rr.len, &rep);
	if (rc == 0) {
		/* eviction notices: the handler applies them under wlock */
		h->lease.hooks.on_reply(h->lease.hooks.arg, &rep);
		/* every heartbeat reply says it: its absence ends a request */
		atomic_store(&h->lease.renew_ms, rep.renew_ms);
		/* which shared index the server publishes (or none) */
		if (!rep.error)
			maru__idx_heard(h, rep.has_idx_id, rep.idx_id, gen);
	}
	if (rc == 0 && rep.error)
		/* maru-server's refusal of this instance to us: -EBUSY */
		rc = rep.held ? -EBUSY : -EREMOTEIO;
	if (rc == 0) {
		out->lease_expired = rep.lease_expired;
		out->lease_ttl = rep.lease_ttl;
		out->has_server_id = rep.server_id != NULL;
		copy_id(out->server_id, rep.server_id, rep.server_id_len);
	}
	/* a refusal counts nothing (nor does a reply we cannot read, we
	 * assume): the next report tells it */
	if (rc < 0 && hr.remote)
		rt_give_back(h, &hr);
	maru__rpc_reply_release(&rr);
	return rc;
}

/* fence every owned region (fence.lock held); Return: how many now */
static size_t fence_owned(struct maru_handler *h)
{
	size_t i, n = 0;

	pthread_mutex_lock(&h->olock);
	for (i = 0; i < h->owned.n; i++)
		if (h->owned.regions[i]->map)
			n += maru__mapper_fence(&h->mapper,
						h->owned.regions[i]->map);
	pthread_mutex_unlock(&h->olock);
	return n;
}

/*
 * fence_locked - fence what is no longer ours and raise @lost
 * (fence.lock held): the owned regions for an expired lease; for a new
 * server every mapping, since every region of the old one is gone (a region
 * mapped for a read in the instant between the restart and its detection
 * goes too; the next retrieve maps it afresh).
 * Return: the mappings fenced by this call.
 */
static size_t fence_locked(struct maru_handler *h, unsigned lost)
{
	size_t n;

	if (lost & MARU_ALARM_LOST_SERVER)
		n = maru__mapper_fence_all(&h->mapper);
	else
		n = fence_owned(h);
	atomic_fetch_or(&h->fence.alarm, lost);
	return n;
}

/* clear SUSPECT unless a connection dropped after @seen was read */
static void clear_suspect(struct maru__fence *f, uint64_t seen)
{
	uint64_t a = atomic_load(&f->alarm);

	while ((a / MARU_ALARM_GEN) == (seen / MARU_ALARM_GEN) &&
	       (a & MARU_ALARM_SUSPECT)) {
		if (atomic_compare_exchange_weak(
			    &f->alarm, &a, a & ~(uint64_t)MARU_ALARM_SUSPECT))
			break;
	}
}

int maru__verify(struct maru_handler *h, struct maru__rpc *rpc)
{
	struct maru__fence *f = &h->fence;
	struct maru__lease *l = &h->lease;
	char lease_id[37] = "", old[65];
	uint64_t epoch, seen, sent;
	struct maru__hb hb;
	unsigned lost = 0;
	bool first = false;
	size_t n = 0;
	int rc;

	pthread_mutex_lock(&f->lock);
	if (f->recovering) {
		/* the recovery's own HEARTBEAT decides */
		pthread_mutex_unlock(&f->lock);
		return -EAGAIN;
	}
	epoch = f->epoch;
	if (l->active)
		memcpy(lease_id, l->id, sizeof(lease_id));
	pthread_mutex_unlock(&f->lock);
	seen = atomic_load(&f->alarm);
	sent = maru__now_ns();
	rc = maru__heartbeat(h, rpc, lease_id[0] ? lease_id : NULL, false, &hb);
	if (rc < 0)
		return rc;

	pthread_mutex_lock(&f->lock);
	if (epoch != f->epoch || f->recovering) {
		/* a recovery started over meanwhile: this reply is stale */
		pthread_mutex_unlock(&f->lock);
		return -EAGAIN;
	}
	snprintf(old, sizeof(old), "%s", f->server_id);
	if (!f->known) {
		/* HANDSHAKE failed at connect: the first answer sets it */
		f->known = true;
		snprintf(f->server_id, sizeof(f->server_id), "%s",
			 hb.server_id);
	} else if (strcmp(f->server_id, hb.server_id)) {
		lost = MARU_ALARM_LOST_SERVER;
	} else if (lease_id[0] && hb.lease_expired) {
		lost = MARU_ALARM_LOST_LEASE;
	}
	if (lost) {
		first = !(atomic_load(&f->alarm) & lost);
		n = fence_locked(h, lost);
		/* the new one is the server from now on: nothing to fence twice
		 */
		snprintf(f->server_id, sizeof(f->server_id), "%s",
			 hb.server_id);
	} else if (lease_id[0] && hb.lease_ttl > 0) {
		atomic_store(&l->renewed_ns, sent);
	}
	/* answered: same server and lease, or the loss is known now */
	clear_suspect(f, seen);
	pthread_mutex_unlock(&f->lock);

	if (!lost)
		return 0;
	/* one warning per event */
	if (first && lost == MARU_ALARM_LOST_SERVER)
		lwarn(h,
		      "metadata server restarted (server_id %s -> %s): its "
		      "regions are gone; %zu mappings fenced (writes to them "
		      "go to private memory), the next alloc gets a new region",
		      old[0] ? old : "none",
		      hb.server_id[0] ? hb.server_id : "none", n);
	else if (first)
		lwarn(h,
		      "lease %s expired on the server: %zu owned regions "
		      "fenced (writes to them go to private memory), the next "
		      "alloc starts a new lease and gets a new region",
		      lease_id, n);
	return -ESTALE;
}

/*
 * recover - start over after a loss of ownership (@wlock held): retire the
 * fenced regions and start a new lease.  Idempotent; on failure the alarm
 * stays up and the next write tries again.  Return: 0 or -errno.
 */
static int recover(struct maru_handler *h)
{
	struct maru__fence *f = &h->fence;
	uint64_t seen, epoch = 0;
	size_t nreg = 0;
	int rc;

	/* the lease thread may be verifying: it needs fence.lock */
	maru__lease_stop(h);
	pthread_mutex_lock(&f->lock);
	/*
	 * An owned region adopted after the loss was found (a race with a
	 * write) went to the old lease: it goes too.  Mappings made by reads
	 * since then are the new server's and stay.
	 */
	fence_owned(h);
	pthread_mutex_lock(&h->olock);
	nreg = h->owned.n;
	maru__owned_destroy(&h->owned);
	pthread_mutex_unlock(&h->olock);
	maru__keymap_destroy(&h->keys);
	/* notices of the old lease name what is gone (a grant of a region
	 * would map it again) */
	maru__inbox_reset(&h->inbox);
	maru__mapper_retire_fenced(&h->mapper);
	seen = atomic_load(&f->alarm);
	/* no RPC under fence.lock: a verification meanwhile (the watch's
	 * tick) answers -EAGAIN without sending */
	f->recovering = true;
	pthread_mutex_unlock(&f->lock);
	rc = maru__lease_start(h, true);
	pthread_mutex_lock(&f->lock);
	f->recovering = false;
	if (rc == 0) {
		epoch = ++f->epoch;
		atomic_fetch_and(&f->alarm, ~(uint64_t)MARU_ALARM_LOST);
		clear_suspect(f, seen); /* its HEARTBEAT was answered */
	}
	pthread_mutex_unlock(&f->lock);
	if (rc < 0) {
		ldbg(h, "recovery after a loss of ownership failed: %s",
		     strerror(-rc));
		return rc;
	}
	linfo(h,
	      "recovered (#%" PRIu64 "): %zu fenced regions dropped, %s; "
	      "the next alloc gets a new region",
	      epoch, nreg,
	      h->lease.active ? "new lease" : "the server grants no lease");
	return 0;
}

int maru__gate_slow(struct maru_handler *h)
{
	uint64_t a;
	int tries, rc;

	/*
	 * Whatever keeps us from confirming ownership (no answer, a recovery
	 * that cannot reach the server) is -EKEYEXPIRED: writes are stopped
	 * until the server answers, as for a lease that lapsed.
	 */
	for (tries = 0; tries < 4; tries++) {
		a = atomic_load(&h->fence.alarm);
		if (a & MARU_ALARM_LOST) {
			rc = recover(h);
			if (rc < 0)
				return maru__fail(
					h, -EKEYEXPIRED,
					"writes are stopped: this handler lost "
					"its regions (maru-server restarted "
					"without its state, or the lease "
					"expired) and cannot start anew: %s",
					strerror(-rc));
			continue;
		}
		if (!(a & MARU_ALARM_SUSPECT) && maru__lease_ok(h))
			return 0;
		rc = maru__verify(h, &h->rpc);
		if (rc == 0 || rc == -ESTALE || rc == -EAGAIN)
			continue;
		return maru__fail(h, -EKEYEXPIRED,
				  "writes are stopped until maru-server at %s "
				  "answers (its lease cannot be renewed: %s)",
				  h->cfg.server_url, strerror(-rc));
	}
	return maru__fail(h, -EKEYEXPIRED,
			  "writes are stopped: the ownership of this "
			  "handler's regions cannot be confirmed with "
			  "maru-server at %s",
			  h->cfg.server_url);
}

void maru__rejoin(struct maru_handler *h)
{
	if (atomic_load(&h->fence.alarm) & MARU_ALARM_SUSPECT)
		(void)maru__verify(h, &h->rpc);
}

/* ------------------------------------------------------------------------ */
/* The RPC watch's callbacks                                                */

void maru__fence_lost(void *arg)
{
	struct maru_handler *h = arg;
	uint64_t a = atomic_load(&h->fence.alarm);

	/* a connection to the server dropped: verify before the next write */
	while (!atomic_compare_exchange_weak(
		&h->fence.alarm, &a, (a + MARU_ALARM_GEN) | MARU_ALARM_SUSPECT))
		;
	/* and ask the server, not the shared index, until it says which
	 * index it publishes now (a restart may have changed it) */
	maru__idx_suspend(h);
}

int maru__fence_tick(void *arg)
{
	struct maru_handler *h = arg;
	struct maru__fence *f = &h->fence;
	int rc;

	/* another shared index to attach: a HANDSHAKE */
	if (atomic_load(&h->state) == MARU_ST_CONNECTED)
		maru__idx_refresh(h, &h->rpc);
	if (!(atomic_load(&f->alarm) & MARU_ALARM_SUSPECT))
		return atomic_load(&h->idx.stale) ? (int)(RETRY_NS / 1000000)
						  : -1;
	/* find out now, not at the next write or renewal */
	if (f->bg_verify && atomic_load(&h->state) == MARU_ST_CONNECTED &&
	    maru__now_ns() >= f->retry_at) {
		rc = maru__verify(h, &h->rpc);
		if (rc < 0 && rc != -ESTALE)
			f->retry_at = maru__now_ns() + RETRY_NS;
	}
	return (int)(RETRY_NS / 1000000);
}

/* ------------------------------------------------------------------------ */
/* Leases                                                                   */

/*
 * Fencing by time: no renewal for TTL/2 means the
 * server may be gone, and the resource manager frees a dead server's
 * regions TTL + a margin after its death (the hold maru-server declares
 * at its AUTH).  The lease thread checks after every failed renewal, at
 * most TTL/4 + its timeout (<= TTL/4) apart, so every mapping is fenced
 * by TTL after the last renewal: before the RM can give the bytes to
 * anyone else.  Every mapping, not only the owned ones: a view of another
 * region of a dead server may be reused as well.  The next write recovers
 * as after a server restart.
 */
static void fence_by_time(struct maru_handler *h, uint64_t silent_ns)
{
	struct maru__fence *f = &h->fence;
	size_t n = 0;

	/*
	 * every time, not once: mappings a read made since an earlier loss
	 * (nothing cleared it: no write recovered) are fenced too; fencing
	 * is idempotent, so only new ones count and are logged
	 */
	pthread_mutex_lock(&f->lock);
	if (!f->recovering)
		n = fence_locked(h, MARU_ALARM_LOST_SERVER);
	pthread_mutex_unlock(&f->lock);
	if (n)
		lwarn(h,
		      "no answer from the metadata server for %" PRIu64
		      " ms (half the lease TTL): its regions may be freed "
		      "soon; %zu mappings fenced (writes to them go to private "
		      "memory, views read zeros), the next alloc starts over",
		      silent_ns / 1000000, n);
}

static void *lease_thread(void *arg)
{
	struct maru_handler *h = arg;
	struct maru__lease *l = &h->lease;
	uint64_t period = l->ttl_ns / 4, next, sent, silent, renew;
	struct timespec ts;
	bool failing = false;
	int rc;

	/* at least twice a second: eviction notices and requests to give
	 * regions back come in the replies */
	if (period > 500000000ull)
		period = 500000000ull;
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
		/* also before asking: a process that was stopped or descheduled
		 * must not write on while a renewal is under way */
		silent = sent - atomic_load(&l->renewed_ns);
		if (silent >= l->ttl_ns / 2)
			fence_by_time(h, silent);
		rc = maru__verify(h, &l->rpc);
		if (rc == -ESTALE) {
			/* fenced; the next write starts a new lease */
			pthread_mutex_lock(&l->lock);
			break;
		} else if (rc == 0 || rc == -EAGAIN) {
			if (failing)
				linfo(h, "lease %s renewed again", l->id);
			failing = false;
		} else {
			if (!failing)
				lwarn(h, "lease %s: renewal failed: %s", l->id,
				      strerror(-rc));
			failing = true;
			silent = maru__now_ns() - atomic_load(&l->renewed_ns);
			if (silent >= l->ttl_ns / 2)
				fence_by_time(h, silent);
		}
		/* evicted pages of ours: the handler frees them now if no
		 * writer is busy (a writer applies them at its next
		 * allocation otherwise) */
		l->hooks.on_round(l->hooks.arg);
		/* the server publishes another shared index: attach it */
		maru__idx_refresh(h, &l->rpc);
		renew = (uint64_t)atomic_load(&l->renew_ms) * 1000000ull;
		next = sent + (renew && renew < period ? renew : period);
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

void maru__lease_init(struct maru_handler *h,
		      const struct maru__hb_hooks *hooks)
{
	struct maru__lease *l = &h->lease;
	pthread_condattr_t a;

	l->hooks = *hooks;
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
	if (rc == -EBUSY) {
		/* not "no leases": going on without one would let us in
		 * unleased the moment the holder's lease ends */
		lerr(h,
		     "instance %s is held by another client (a connection, "
		     "or the lease of one that went away, until it expires)",
		     h->instance_id);
		return rc;
	}
	if (rc < 0) {
		ldbg(h, "no lease: HEARTBEAT failed: %s", strerror(-rc));
		return 0;
	}
	if (recovering) {
		/* the server we start over with */
		pthread_mutex_lock(&h->fence.lock);
		h->fence.known = true;
		snprintf(h->fence.server_id, sizeof(h->fence.server_id), "%s",
			 hb.has_server_id ? hb.server_id : "");
		pthread_mutex_unlock(&h->fence.lock);
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
	maru__rpc_set_watch(&l->rpc, &h->watch);
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

	if (!h->lease.active) {
		/* no renewals carried the shared index's report nor the
		 * remote path's (a server without leases): they go once, now */
		if (h->instance_id && (maru__idx_unreported(h) || h->remote))
			(void)maru__heartbeat(h, &h->rpc, NULL, false, &hb);
		return;
	}
	rc = maru__heartbeat(h, &h->rpc, h->lease.id, true, &hb);
	if (rc < 0)
		lwarn(h, "lease %s: release failed: %s", h->lease.id,
		      strerror(-rc));
	h->lease.active = false;
}
