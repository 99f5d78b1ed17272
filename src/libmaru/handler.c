/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handler.c - struct maru_handler: upstream's MaruHandler in C
 *
 * Semantics: docs/python-api.md (connect, close, alloc/free, store, retrieve,
 * exists, pin/unpin, delete, batch forms, healthcheck, stats, accessors),
 * with two deliberate differences, both invisible to well-behaved callers:
 * store sends one REGISTER_KV (no EXISTS_KV first: REGISTER already answers
 * "existed"), and a batch entry that lost the first-writer race has its page
 * freed instead of leaked.
 *
 * Locks and who owns what:
 *  - @wlock serialises writes (alloc, free, store, batch_store, delete),
 *    connect, close and the region-added callback: allocate -> write ->
 *    register stays atomic per handler, as upstream.  It guards @keys, each
 *    owned region's page_keys and @on_added.
 *  - @olock guards the owned-region manager's contents (regions, allocator
 *    counters) for the lock-free readers (accessors, stats); writers take it
 *    briefly inside @wlock.  It is never held across I/O or a callback.
 *  - Reads (retrieve, exists, pin, unpin, batch lookups, healthcheck,
 *    stats) take neither: the RPC client is thread-safe and region lookups
 *    are lock-free (mapper.c).
 *  - @inbox.lock guards the eviction notices not yet applied: a leaf lock,
 *    taken by whichever thread decoded a reply that carried some; they
 *    are applied under @wlock (by a writer, or the lease thread when it
 *    gets @wlock with a try-lock).
 *  - @state moves NEW -> CONNECTED -> CLOSING (terminal); a failed connect
 *    goes back to NEW.
 *
 * Loss of ownership (ownership.c): alloc, store and batch_store pass
 * maru__write_gate() first, which recovers from a fence and verifies after a
 * dropped connection or a stale lease; a page of a fenced region is never
 * registered (-ESTALE) and fenced regions are never returned to a server.
 *
 * Error mapping (see maru.h): -ENOTCONN / -ESHUTDOWN for the state checks,
 * -EREMOTEIO for an "error" reply, -ETIMEDOUT from rpc.c, -ENOSPC /
 * -ENOMEM / -ENOBUFS for the three alloc failures of upstream, -ESTALE for
 * a page whose region was fenced.
 */
#include "private.h"

#include <sodium.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mds_proto.h"
#include "util.h"

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                */

static bool env_prefault(void)
{
	const char *v = getenv("MARU_PREFAULT");

	return !(v && !strcmp(v, "0"));
}

/* CURVE's keys from the files the config names (when it names them) */
static int load_curve(struct maru_handler *h)
{
	char why[512];
	int rc;

	if (!h->cfg.curve_secret)
		return 0;
	if (zcurve_sodium_init() < 0) {
		lerr(h, "CURVE: libsodium failed to initialise");
		return -EIO;
	}
	h->curve = calloc(1, sizeof(*h->curve));
	if (!h->curve)
		return -ENOMEM;
	rc = zcurve_load_cert(h->cfg.curve_secret, h->curve->me.pub,
			      h->curve->me.sec, why, sizeof(why));
	if (rc == 0)
		rc = zcurve_load_public(h->cfg.curve_server, h->curve->server,
					why, sizeof(why));
	if (rc < 0) {
		lerr(h, "CURVE: %s", why);
		sodium_memzero(h->curve, sizeof(*h->curve));
		free(h->curve);
		h->curve = NULL;
	}
	return rc;
}

MARU_EXPORT int maru_handler_new(const struct maru_config *cfg,
				 struct maru_handler **out)
{
	struct maru__hb_hooks hooks;
	struct maru_handler *h;
	char id[37];
	int rc;

	rc = maru_config_validate(cfg, NULL, 0);
	if (rc < 0)
		return rc;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	rc = maru__config_copy(&h->cfg, cfg);
	if (rc < 0)
		goto out_free;
	if (!cfg->instance_id)
		maru__uuid4(id);
	h->instance_id = strdup(cfg->instance_id ? cfg->instance_id : id);
	rc = -ENOMEM;
	if (!h->instance_id)
		goto out_cfg;
	atomic_init(&h->log_priority, maru__log_env_priority());
	rc = load_curve(h);
	if (rc < 0)
		goto out_id;
	atomic_init(&h->state, MARU_ST_NEW);
	h->prefault = env_prefault();
	pthread_mutex_init(&h->wlock, NULL);
	pthread_mutex_init(&h->olock, NULL);
	pthread_mutex_init(&h->raw_lock, NULL);
	maru__owned_init(&h->owned, cfg->chunk_size);
	maru__keymap_init(&h->keys);
	atomic_init(&h->stats.enabled, false);
	/* what the lease's HEARTBEATs bring goes to the eviction inbox */
	hooks = (struct maru__hb_hooks){maru__evict_ack, maru__evict_note,
					maru__evict_apply_try, h};
	maru__lease_init(h, &hooks);
	pthread_mutex_init(&h->inbox.lock, NULL);
	maru__fence_init(h);
	maru__rpc_watch_init(&h->watch);
	maru__idx_init(h);
	maru__fail_clear(h); /* (the address of a handler freed before) */
	*out = h;
	return 0;

out_id:
	free(h->instance_id);
out_cfg:
	maru__config_release(&h->cfg);
out_free:
	free(h);
	return rc;
}

MARU_EXPORT void maru_handler_free(struct maru_handler *h)
{
	if (!h)
		return;
	maru_handler_close(h);
	maru__fail_clear(h); /* (a handler made later may get its address) */
	if (h->raw_open)
		maru__rpc_close(&h->raw);
	pthread_mutex_destroy(&h->raw_lock);
	maru__keymap_destroy(&h->keys);
	maru__owned_destroy(&h->owned);
	maru__rpc_watch_destroy(&h->watch);
	maru__idx_destroy(h);
	maru__fence_destroy(h);
	maru__lease_destroy(h);
	pthread_mutex_destroy(&h->olock);
	pthread_mutex_destroy(&h->wlock);
	free(h->inbox.ev);
	free(h->inbox.rel);
	pthread_mutex_destroy(&h->inbox.lock);
	free(h->instance_id);
	if (h->curve) {
		sodium_memzero(h->curve, sizeof(*h->curve));
		free(h->curve);
	}
	maru__config_release(&h->cfg);
	free(h);
}

MARU_EXPORT void maru_handler_set_log_fn(struct maru_handler *h, maru_log_fn fn,
					 void *arg)
{
	h->log_fn = fn;
	h->log_arg = arg;
}

MARU_EXPORT void maru_handler_set_log_priority(struct maru_handler *h,
					       int priority)
{
	if (priority < -1)
		priority = -1;
	if (priority > LOG_DEBUG)
		priority = LOG_DEBUG;
	atomic_store(&h->log_priority, priority);
}

MARU_EXPORT int maru_handler_get_log_priority(const struct maru_handler *h)
{
	return atomic_load(&((struct maru_handler *)h)->log_priority);
}

/* at the start of a call: connected?  (The call's cause starts empty.) */
static int state_check(const struct maru_handler *h)
{
	int st = atomic_load(&((struct maru_handler *)h)->state);

	maru__fail_clear(h);
	if (st == MARU_ST_CLOSING)
		return maru__fail(h, -ESHUTDOWN, "the handler was closed");
	if (st != MARU_ST_CONNECTED)
		return maru__fail(h, -ENOTCONN, "not connected%s%s",
				  h->conn_err[0] ? ": the last connect failed: "
						 : " (connect() first)",
				  h->conn_err);
	return 0;
}

/* still ours: not fenced (a fenced one waits for the next write to go) */
static bool region_live(const struct maru__owned_region *r)
{
	return !r->map || !atomic_load(&r->map->fenced);
}

int maru__call(struct maru_handler *h, struct maru__msg *m,
	       struct maru__reply *r)
{
	struct maru__rpc_reply rr;
	int rc;

	rc = maru__rpc_call(&h->rpc, m, &rr);
	if (rc < 0)
		return rc;
	rc = maru__decode_reply(rr.payload, rr.len, r);
	if (rc == 0)
		maru__evict_note(h, r); /* before the reply's bytes go */
	maru__rpc_reply_release(&rr);
	if (rc < 0)
		return rc;
	return r->error ? -EREMOTEIO : 0;
}

/*
 * send_msg - send @m (already encoded, @enc_rc its encoder's result) and
 * decode the reply into @r; @m is released in every case
 */
static int send_msg(struct maru_handler *h, struct maru__msg *m, int enc_rc,
		    struct maru__reply *r)
{
	int rc = enc_rc;

	if (rc == 0)
		rc = maru__call(h, m, r);
	maru__msg_release(m);
	return rc;
}

static void reply_init(struct maru__reply *r)
{
	memset(r, 0, sizeof(*r));
}

/* REQUEST_ALLOC of @size bytes; the handle into @out */
static int request_region(struct maru_handler *h, uint64_t size,
			  struct maru_region_handle *out)
{
	const char *lease = h->lease.active ? h->lease.id : NULL;
	struct maru__reply r;
	char sz[32];
	struct maru__msg m;
	int rc;

	reply_init(&r);
	maru__msg_init(&m, MDS_REQUEST_ALLOC);
	rc = send_msg(h, &m,
		      maru__enc_request_alloc(&m, h->instance_id, size, lease,
					      atomic_load(&h->inbox.ack)),
		      &r);
	if (rc == -EREMOTEIO && !r.success)
		rc = -ENOSPC; /* {"success": false, "error": "Allocation
				 failed"} */
	if (rc == -ENOSPC &&
	    (r.evicted.n || r.evicted_last || atomic_load(&h->inbox.pending))) {
		/* full, but pages of ours were evicted: told in this reply
		 * or a heartbeat's (maru__evict_note), or a region asked
		 * back; the caller applies them and asks again.  (Notices
		 * walked may all be moot -- pages our own delete() freed
		 * already -- and free nothing: still no failure.) */
		ldbg(h, "REQUEST_ALLOC: pool full, %u page(s) of ours evicted",
		     r.evicted.n / 3);
		return -EAGAIN;
	}
	if (rc == -ENOSPC && r.held)
		rc = -EBUSY; /* the lease we present is another instance's */
	if (rc < 0) {
		/* the server's reason, when it gave one ("Allocation failed:
		 * the resource manager at ... is not reachable ...") */
		return maru__fail(h, rc, "a region of %s could not be had: %s",
				  format_bytes(size, sz, sizeof(sz)),
				  r.error_text[0] ? r.error_text
						  : strerror(-rc));
	}
	if (!r.success)
		return maru__fail(
			h, -ENOSPC,
			"a region of %s could not be had: REQUEST_ALLOC "
			"refused",
			format_bytes(size, sz, sizeof(sz)));
	if (!r.lookup.has_handle || !r.lookup.handle.length) {
		lerr(h, "REQUEST_ALLOC: reply without a handle");
		return -EPROTO;
	}
	*out = r.lookup.handle;
	return 0;
}

/* RETURN_ALLOC; errors only logged (upstream close() does the same) */
static void return_region(struct maru_handler *h, uint64_t region_id)
{
	struct maru__reply r;
	struct maru__msg m;
	int rc;

	maru__rejoin(h);
	reply_init(&r);
	maru__msg_init(&m, MDS_RETURN_ALLOC);
	rc = send_msg(h, &m,
		      maru__enc_return_alloc(&m, h->instance_id, region_id),
		      &r);
	if (rc < 0)
		lwarn(h, "region %" PRIu64 ": RETURN_ALLOC failed: %s",
		      region_id, strerror(-rc));
	else if (!r.success)
		lwarn(h, "region %" PRIu64 ": RETURN_ALLOC refused", region_id);
	else
		ldbg(h, "region %" PRIu64 ": returned", region_id);
}

/*
 * HANDSHAKE: rm_address from the server wins over the config's.  Any
 * failure falls back to the config's address (upstream), except a timeout:
 * a server that does not answer would only make the next steps time out
 * too, so connect gives up at once.  Return: 0 or -ETIMEDOUT.
 */
static int handshake(struct maru_handler *h)
{
	struct maru__rpc_reply rr;
	struct maru__reply r;
	struct maru__msg m;
	int rc;

	snprintf(h->rm_address, sizeof(h->rm_address), "%s", h->cfg.rm_address);
	maru__msg_init(&m, MDS_HANDSHAKE);
	rc = maru__enc_empty(&m);
	if (rc == 0)
		rc = maru__rpc_call(&h->rpc, &m, &rr);
	maru__msg_release(&m);
	if (rc == -ETIMEDOUT) {
		lerr(h,
		     "%s: no answer to HANDSHAKE within %d ms (a ZMTP "
		     "peer, but a busy or a different server)",
		     h->cfg.server_url, h->cfg.timeout_ms);
		return rc;
	}
	if (rc == -EACCES || rc == -EPROTO)
		return rc; /* our key refused, or not a server we can talk to:
			    * rpc.c said why; nothing later would work */
	if (rc < 0) {
		lwarn(h, "HANDSHAKE failed (%s): using rm_address %s",
		      strerror(-rc), h->rm_address);
		return 0;
	}
	reply_init(&r);
	rc = maru__decode_reply(rr.payload, rr.len, &r);
	if (rc == 0 && !r.error && r.rm_address_len &&
	    r.rm_address_len < sizeof(h->rm_address)) {
		memcpy(h->rm_address, r.rm_address, r.rm_address_len);
		h->rm_address[r.rm_address_len] = '\0';
	}
	/* which server process: a later reply from another means a restart */
	if (rc == 0 && !r.error)
		maru__fence_set_server(h, &r);
	if (rc == 0 && !r.error)
		h->max_key = r.max_key; /* (0: an older server: unknown) */
	/* the shared index (issue 16): a file now; a region of the pool
	 * once the resource manager's address is known (connect) */
	if (rc == 0 && !r.error && r.idx.present) {
		if (r.idx.pool)
			atomic_store(&h->idx.stale, true);
		else
			(void)maru__idx_attach(h, &r.idx);
	}
	maru__rpc_reply_release(&rr);
	ldbg(h, "resource manager at %s", h->rm_address);
	return 0;
}

/* LIST_ALLOCATIONS callback: map another instance's region, eagerly */
static int eager_one(void *arg, const struct maru_region_handle *hd)
{
	struct maru_handler *h = arg;
	struct maru__mapping *m;
	int rc;

	rc = maru__mapper_map(&h->mapper, hd, false, false, &m);
	if (rc < 0)
		lwarn(h, "region %" PRIu64 ": eager map failed: %s",
		      hd->region_id, strerror(-rc));
	return 0;
}

static void eager_map(struct maru_handler *h)
{
	struct maru__reply r;
	struct maru__msg m;
	int rc;

	reply_init(&r);
	r.on_handle = eager_one;
	r.arg = h;
	maru__msg_init(&m, MDS_LIST_ALLOCATIONS);
	rc = send_msg(h, &m, maru__enc_list_allocations(&m, h->instance_id),
		      &r);
	if (rc < 0)
		lwarn(h, "LIST_ALLOCATIONS failed: %s", strerror(-rc));
	else
		ldbg(h, "eager map: %zu regions listed", r.handles_len);
}

/* map a region this handler just obtained and add it to the manager */
static int adopt_region(struct maru_handler *h,
			const struct maru_region_handle *hd)
{
	struct maru__mapping *m;
	int rc;

	rc = maru__mapper_map(&h->mapper, hd, true, true, &m);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&h->olock);
	rc = maru__owned_add(&h->owned, hd->region_id, hd->length, m);
	pthread_mutex_unlock(&h->olock);
	if (rc < 0) {
		lerr(h, "region %" PRIu64 ": cannot manage pages: %s",
		     hd->region_id, strerror(-rc));
		maru__mapper_unmap(&h->mapper, hd->region_id);
	}
	return rc;
}

/*
 * stop the background threads: stats, the lease thread (its connection is
 * detached from the watch as it closes), then the RPC watch, once the main
 * connection is detached too (the watch reads the connections it watches)
 */
static void stop_threads(struct maru_handler *h)
{
	maru__stats_stop(h);
	maru__lease_stop(h);
	if (h->rpc_open)
		maru__rpc_set_watch(&h->rpc, NULL);
	maru__rpc_watch_stop(&h->watch);
}

/* undo what connect set up (the opposite order) */
static void teardown(struct maru_handler *h)
{
	stop_threads(h);
	maru__lease_release(h);
	if (h->mapper_ready)
		maru__mapper_destroy(&h->mapper);
	h->mapper_ready = false;
	if (h->rpc_open)
		maru__rpc_close(&h->rpc);
	h->rpc_open = false;
}

/* from now on until capture_end(), the connecting thread's first error is
 * the connect's cause */
static void capture_start(struct maru_handler *h)
{
	h->conn_err[0] = '\0';
	h->capture_thread = pthread_self();
	atomic_store_explicit(&h->capturing, true, memory_order_release);
}

/* the connect returns @rc: a failure always has a cause, one line */
static void capture_end(struct maru_handler *h, int rc)
{
	if (rc < 0 && !h->conn_err[0])
		lerr(h, "%s: connect failed: %s", h->cfg.server_url,
		     maru__fail_text(h)[0] ? maru__fail_text(h)
					   : strerror(-rc));
	atomic_store_explicit(&h->capturing, false, memory_order_relaxed);
	if (rc == 0)
		h->conn_err[0] = '\0';
}

MARU_EXPORT const char *maru_handler_connect_error(const struct maru_handler *h)
{
	return h->conn_err;
}

MARU_EXPORT int maru_handler_connect(struct maru_handler *h)
{
	struct maru_region_handle hd;
	int rc;

	pthread_mutex_lock(&h->wlock);
	rc = state_check(h);
	if (rc == 0) {
		pthread_mutex_unlock(&h->wlock); /* connected: nothing to do */
		return 0;
	}
	/* no background thread runs now (NEW, or closed): the cause is ours */
	capture_start(h);
	if (rc == -ESHUTDOWN) {
		lerr(h, "connect: the handler was closed and cannot be reused");
		goto out_unlock;
	}

	rc = maru__rpc_open(&h->rpc, h, h->cfg.server_url, h->cfg.timeout_ms,
			    h->cfg.use_async_rpc, h->cfg.max_inflight);
	if (rc < 0)
		goto out_teardown;
	h->rpc_open = true;
	maru__fence_reset(h);
	rc = maru__rpc_watch_start(&h->watch, h, maru__fence_lost,
				   maru__fence_tick, h);
	if (rc == 0)
		maru__rpc_set_watch(&h->rpc, &h->watch);
	else
		lwarn(h,
		      "no connection watch (%s): a server restart is noticed "
		      "at the next lease renewal only",
		      strerror(-rc));
	maru__mapper_init(&h->mapper, h, h->prefault);
	h->mapper_ready = true;
	maru__mapper_scan_devices(&h->mapper);

	rc = maru__rpc_connect(&h->rpc); /* no retry: the cause at once */
	if (rc < 0)
		goto out_teardown;
	rc = handshake(h);
	if (rc < 0)
		goto out_teardown;
	rc = maru__mapper_set_rm(&h->mapper, h->rm_address, h->cfg.timeout_ms);
	if (rc < 0) {
		lerr(h, "bad resource manager address '%s'", h->rm_address);
		goto out_teardown;
	}
	maru__idx_refresh(h, &h->rpc); /* an index in the pool: map it */
	rc = maru__lease_start(h, false);
	if (rc < 0)
		goto out_teardown;

	rc = request_region(h, h->cfg.pool_size, &hd);
	if (rc == -ENOSPC || rc == -EAGAIN) {
		/*
		 * The server answered, but has no region for us now (the
		 * pool is full, the resource manager is away, a quota):
		 * reading needs none.  Connected without one; the first
		 * alloc() asks again, and fails with the cause if it still
		 * cannot.
		 */
		lwarn(h,
		      "connected to %s as %s without a region: %s; reading "
		      "works, the first alloc() asks again",
		      h->cfg.server_url, h->instance_id, maru__fail_text(h));
		hd.region_id = 0;
	} else if (rc < 0) {
		goto out_teardown;
	} else {
		rc = adopt_region(h, &hd);
		if (rc < 0) {
			return_region(h, hd.region_id);
			goto out_teardown;
		}
	}
	if (h->cfg.eager_map)
		eager_map(h);
	if (h->cfg.enable_stats) {
		rc = maru__stats_start(h);
		if (rc < 0)
			lwarn(h, "stats reporting disabled: %s", strerror(-rc));
	}
	atomic_store(&h->state, MARU_ST_CONNECTED);
	if (hd.region_id)
		linfo(h,
		      "connected to %s as %s: region %" PRIu64 ", %" PRIu64
		      " pages of %" PRIu64 " bytes",
		      h->cfg.server_url, h->instance_id, hd.region_id,
		      hd.length / h->cfg.chunk_size, h->cfg.chunk_size);
	capture_end(h, 0);
	pthread_mutex_unlock(&h->wlock);
	return 0;

out_teardown:
	pthread_mutex_lock(&h->olock);
	maru__owned_destroy(&h->owned);
	pthread_mutex_unlock(&h->olock);
	teardown(h);
out_unlock:
	capture_end(h, rc);
	pthread_mutex_unlock(&h->wlock);
	return rc;
}

MARU_EXPORT void maru_handler_close(struct maru_handler *h)
{
	uint64_t *ids = NULL;
	size_t n = 0, i;
	int expected = MARU_ST_CONNECTED;

	if (!atomic_compare_exchange_strong(&h->state, &expected,
					    MARU_ST_CLOSING))
		return;
	/* no new operation starts now; stop the background threads */
	stop_threads(h);

	pthread_mutex_lock(&h->wlock); /* waits for in-flight writes */
	pthread_mutex_lock(&h->olock);
	if (h->owned.n) {
		ids = malloc(h->owned.n * sizeof(*ids));
		/* a fenced region is not ours any more: never return it */
		for (i = 0; ids && i < h->owned.n; i++)
			if (region_live(h->owned.regions[i]))
				ids[n++] = h->owned.regions[i]->region_id;
	}
	maru__owned_destroy(&h->owned);
	pthread_mutex_unlock(&h->olock);
	maru__keymap_destroy(&h->keys);
	for (i = 0; i < n; i++)
		return_region(h, ids[i]);
	free(ids);
	teardown(h);
	h->on_added = NULL;
	pthread_mutex_unlock(&h->wlock);
	linfo(h, "closed");
}

MARU_EXPORT bool maru_handler_is_connected(const struct maru_handler *h)
{
	return state_check(h) == 0;
}

MARU_EXPORT const char *maru_handler_instance_id(const struct maru_handler *h)
{
	return h->instance_id;
}

MARU_EXPORT uint64_t maru_handler_chunk_size(const struct maru_handler *h)
{
	return h->cfg.chunk_size;
}

MARU_EXPORT uint64_t maru_handler_lease_ttl_ms(const struct maru_handler *h)
{
	if (state_check(h) < 0 || !h->lease.active)
		return 0;
	return h->lease.ttl_ns / 1000000ull;
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */

MARU_EXPORT int maru_handler_owned_region_ids(struct maru_handler *h,
					      uint64_t *ids, size_t cap)
{
	size_t i, n = 0;

	if (state_check(h) < 0)
		return 0;
	pthread_mutex_lock(&h->olock);
	for (i = 0; i < h->owned.n; i++) {
		if (!region_live(h->owned.regions[i]))
			continue;
		if (n < cap)
			ids[n] = h->owned.regions[i]->region_id;
		n++;
	}
	pthread_mutex_unlock(&h->olock);
	return (int)n;
}

MARU_EXPORT void *maru_region_get_buffer(struct maru_handler *h,
					 uint64_t region_id, uint64_t offset,
					 uint64_t size)
{
	struct maru__mapping *m;

	if (state_check(h) < 0)
		return NULL;
	m = maru__mapper_find(&h->mapper, region_id);
	if (!m || offset > m->len || size > m->len - offset)
		return NULL;
	return m->addr + offset;
}

MARU_EXPORT int64_t maru_region_page_count(struct maru_handler *h,
					   uint64_t region_id)
{
	struct maru__owned_region *r;
	struct maru__mapping *m;
	int64_t n = -ENOENT;

	if (state_check(h) < 0)
		return -ENOENT;
	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, region_id);
	if (r)
		n = (int64_t)r->pa.page_count;
	pthread_mutex_unlock(&h->olock);
	if (r)
		return n;
	m = maru__mapper_find(&h->mapper, region_id);
	if (m)
		return (int64_t)(m->len / h->cfg.chunk_size);
	return -ENOENT;
}

MARU_EXPORT int maru_region_get_stats(struct maru_handler *h,
				      uint64_t region_id,
				      struct maru_region_stats *out)
{
	struct maru__owned_region *r;

	if (state_check(h) < 0)
		return -ENOENT;
	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, region_id);
	if (r) {
		memset(out, 0, sizeof(*out));
		out->region_id = region_id;
		out->chunk_size = r->pa.chunk_size;
		out->page_count = r->pa.page_count;
		out->pool_size = r->map ? r->map->len
					: r->pa.page_count * r->pa.chunk_size;
		out->num_free_pages = r->pa.nfree;
		out->num_allocated = r->pa.page_count - r->pa.nfree;
	}
	pthread_mutex_unlock(&h->olock);
	return r ? 0 : -ENOENT;
}

MARU_EXPORT int maru_region_get_handle(struct maru_handler *h,
				       uint64_t region_id,
				       struct maru_region_handle *out)
{
	struct maru__mapping *m;

	if (state_check(h) < 0)
		return -ENOENT;
	m = maru__mapper_find(&h->mapper, region_id);
	if (!m)
		return -ENOENT;
	*out = m->handle;
	return 0;
}

MARU_EXPORT bool maru_region_is_owned(struct maru_handler *h,
				      uint64_t region_id)
{
	struct maru__owned_region *r;
	bool owned;

	if (state_check(h) < 0)
		return false;
	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, region_id);
	owned = r && region_live(r);
	pthread_mutex_unlock(&h->olock);
	return owned;
}

MARU_EXPORT int maru_handler_set_on_region_added(struct maru_handler *h,
						 maru_region_added_fn fn,
						 void *arg)
{
	struct {
		uint64_t id, pages;
	} *snap = NULL;
	size_t n = 0, i;

	pthread_mutex_lock(&h->wlock);
	h->on_added = fn;
	h->on_added_arg = arg;
	if (fn && state_check(h) == 0) {
		/* snapshot under olock, call without it */
		pthread_mutex_lock(&h->olock);
		snap = malloc((h->owned.n ? h->owned.n : 1) * sizeof(*snap));
		for (i = 0; snap && i < h->owned.n; i++) {
			snap[n].id = h->owned.regions[i]->region_id;
			snap[n++].pages = h->owned.regions[i]->pa.page_count;
		}
		pthread_mutex_unlock(&h->olock);
		for (i = 0; i < n; i++)
			fn(arg, snap[i].id, snap[i].pages);
		free(snap);
	}
	pthread_mutex_unlock(&h->wlock);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Pages                                                                    */

/* link @e into its page's key list (@wlock held) */
static void page_link_key(struct maru_handler *h, struct maru__keyent *e)
{
	struct maru__owned_region *r =
		maru__owned_find(&h->owned, e->region_id);

	if (!r || e->page >= r->pa.page_count)
		return;
	e->page_next = r->page_keys[e->page];
	r->page_keys[e->page] = e;
}

/* forget every local key stored in (@r, @page) (@wlock held) */
static void page_forget_keys(struct maru_handler *h,
			     struct maru__owned_region *r, uint64_t page)
{
	struct maru__keyent *e, *next;

	for (e = r->page_keys[page]; e; e = next) {
		next = e->page_next;
		maru__keymap_remove(&h->keys, e);
	}
	r->page_keys[page] = NULL;
}

/*
 * Does a key of ours still live in (@rid, @page)? (@wlock held)  Then the
 * server still points at it: a free() of it keeps the page, which goes
 * when the key is deleted or evicted (the notice frees it).  Freeing it at
 * once (upstream) would let the page be reused under a registered key --
 * and, with eviction, let a late free() release a page a notice had
 * already freed and another key then took.
 */
static bool page_stored(struct maru_handler *h, uint64_t rid, uint64_t page)
{
	struct maru__owned_region *r = maru__owned_find(&h->owned, rid);

	return r && page < r->pa.page_count && r->page_keys[page] &&
	       maru__pagealloc_is_allocated(&r->pa, page);
}

/* return a page to its allocator and drop its keys (@wlock held) */
static int page_release(struct maru_handler *h, uint64_t rid, uint64_t page)
{
	struct maru__owned_region *r;
	int rc;

	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, rid);
	rc = r ? maru__pagealloc_free(&r->pa, page) : -ENOENT;
	pthread_mutex_unlock(&h->olock);
	if (rc == 0)
		page_forget_keys(h, r, page);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Eviction notices (issue 13; docs/metadata-server.md "Eviction")          */

/*
 * maru-server evicts keys of ours when the pool is full and tells us, once
 * a grace has passed (no reader still copies them), which pages it took:
 * (region, offset, gen).  We free such a page only while the registration
 * @gen still holds it -- a page freed and stored again since then is not
 * the evicted one.  It also asks back regions that eviction emptied: we
 * return those in which we hold no page.
 */

/* append @n values read from @u to *@v (cap *@cap, count *@nv) */
static bool inbox_put(uint64_t **v, size_t *nv, size_t *cap,
		      const struct maru__uints *u, size_t max)
{
	const uint8_t *p = u->p;
	size_t want = *nv + u->n, i;
	uint64_t *nb;

	if (want > max)
		return false;
	if (want > *cap) {
		size_t nc = *cap ? *cap : 64;

		while (nc < want)
			nc *= 2;
		nb = realloc(*v, nc * sizeof(*nb));
		if (!nb)
			return false;
		*v = nb;
		*cap = nc;
	}
	for (i = 0; i < u->n; i++)
		if (maru__uints_next(&p, u->end, &(*v)[*nv + i]) < 0)
			return false; /* (checked by the decoder) */
	*nv = want;
	return true;
}

void maru__evict_note(void *arg, const struct maru__reply *r)
{
	struct maru_handler *h = arg;
	struct maru__inbox *in = &h->inbox;
	bool ok = true, warn = false;

	if (!r->evicted.n && !r->release.n && !r->evicted_last)
		return;
	pthread_mutex_lock(&in->lock);
	if (r->evicted.n)
		ok = inbox_put(&in->ev, &in->nev, &in->evcap, &r->evicted,
			       3 * (size_t)MARU_INBOX_MAX);
	if (r->release.n)
		ok &= inbox_put(&in->rel, &in->nrel, &in->relcap, &r->release,
				MARU_INBOX_MAX);
	/*
	 * Acknowledge only what we hold, in order: a reply lost before this
	 * one (a timeout) leaves a gap, and the server sends again what we
	 * did not acknowledge (applying a notice twice does nothing).
	 */
	if (ok && r->evicted_last && r->evicted_first <= in->ack + 1 &&
	    r->evicted_last > in->ack)
		atomic_store(&in->ack, r->evicted_last);
	if (!ok && !in->dropped)
		warn = in->dropped = true;
	if (r->evicted.n || r->release.n)
		atomic_store(&in->pending, true);
	pthread_mutex_unlock(&in->lock);
	if (warn)
		lwarn(h, "eviction notices dropped (inbox full or out of "
			 "memory): they come again");
}

/*
 * Registration @gen of (@rid, @off) was evicted: forget its key, and free
 * the page once no key of ours is stored in it any more (two keys may
 * share a page) (@wlock held).  Return: whether the page was freed.
 */
static bool evict_page(struct maru_handler *h, uint64_t rid, uint64_t off,
		       uint64_t gen)
{
	struct maru__owned_region *r;
	struct maru__keyent *e, **pp;
	uint64_t page = off / h->cfg.chunk_size;

	if (!gen || off % h->cfg.chunk_size)
		return false;
	r = maru__owned_find(&h->owned, rid);
	if (!r || page >= r->pa.page_count)
		return false;
	for (pp = &r->page_keys[page]; (e = *pp); pp = &e->page_next)
		if (e->gen == gen)
			break;
	if (!e)
		return false; /* not that registration's page any more */
	*pp = e->page_next;
	maru__keymap_remove(&h->keys, e);
	if (r->page_keys[page])
		return false; /* another key of ours is still stored there */
	return page_release(h, rid, page) == 0;
}

/*
 * Give region @rid back: the server emptied it for another instance's
 * request, so every page of ours there is free or holds keys it evicted
 * (or keys stored since: they stay readable, the server's until it evicts
 * them).  Not while a page there is allocated without a stored key (being
 * written, or held by the application): no page of it is handed out for
 * MARU_DRAIN_NS then, and the server asks again.  (@wlock held)
 */
#define MARU_DRAIN_NS 2000000000ull
static bool evict_region(struct maru_handler *h, uint64_t rid)
{
	struct maru__owned_region *r = maru__owned_find(&h->owned, rid);
	uint64_t p;

	if (!r || !region_live(r))
		return false;
	for (p = 0; p < r->pa.page_count; p++) {
		if (r->pa.used[p] && !r->page_keys[p]) {
			/* being written: none of its pages goes out meanwhile,
			 * and the server asks again */
			pthread_mutex_lock(&h->olock);
			r->drain_until = maru__now_ns() + MARU_DRAIN_NS;
			pthread_mutex_unlock(&h->olock);
			return false;
		}
	}
	for (p = 0; p < r->pa.page_count; p++)
		if (r->pa.used[p])
			page_release(h, rid, p); /* and their keys */
	/*
	 * Fenced before it goes: a handle the application kept writes into
	 * private memory, not into the next owner's region.  The mapping
	 * stays in the table (readers look mappings up without a lock) and
	 * is never found again.
	 */
	if (r->map)
		maru__mapper_fence(&h->mapper, r->map);
	pthread_mutex_lock(&h->olock);
	maru__owned_remove(&h->owned, rid);
	pthread_mutex_unlock(&h->olock);
	return_region(h, rid);
	linfo(h, "region %" PRIu64 ": given back (eviction emptied it)", rid);
	return true;
}

size_t maru__evict_apply(struct maru_handler *h)
{
	struct maru__inbox *in = &h->inbox;
	uint64_t *ev, *rel;
	size_t nev, nrel, i, freed = 0, given = 0;

	if (!atomic_load(&in->pending))
		return 0;
	pthread_mutex_lock(&in->lock);
	ev = in->ev;
	nev = in->nev;
	in->ev = NULL;
	in->nev = in->evcap = 0;
	rel = in->rel;
	nrel = in->nrel;
	in->rel = NULL;
	in->nrel = in->relcap = 0;
	atomic_store(&in->pending, false);
	pthread_mutex_unlock(&in->lock);
	for (i = 0; i + 2 < nev; i += 3)
		freed += evict_page(h, ev[i], ev[i + 1], ev[i + 2]);
	for (i = 0; i < nrel; i++)
		given += evict_region(h, rel[i]);
	if (freed)
		ldbg(h, "eviction: %zu page(s) of ours free again", freed);
	free(ev);
	free(rel);
	return freed + given;
}

uint64_t maru__evict_ack(void *arg)
{
	struct maru_handler *h = arg;

	return atomic_load(&h->inbox.ack);
}

void maru__evict_apply_try(void *arg)
{
	struct maru_handler *h = arg;

	if (!atomic_load(&h->inbox.pending) || pthread_mutex_trylock(&h->wlock))
		return; /* a writer applies it at its next allocation */
	if (atomic_load(&h->state) == MARU_ST_CONNECTED)
		maru__evict_apply(h);
	pthread_mutex_unlock(&h->wlock);
}

/*
 * REQUEST_ALLOC(expand_size), map it, announce it (@wlock held).  With no
 * region left (all fenced and dropped by a recovery) the new one replaces
 * the first: pool_size, whether or not auto_expand is on.
 */
static int expand(struct maru_handler *h)
{
	uint64_t size =
		h->cfg.expand_size ? h->cfg.expand_size : h->cfg.pool_size;
	struct maru_region_handle hd;
	int64_t pages;
	int rc;

	if (!h->owned.n)
		size = h->cfg.pool_size;
	rc = request_region(h, size, &hd);
	if (rc < 0)
		return rc;
	rc = adopt_region(h, &hd);
	if (rc < 0) {
		return_region(h, hd.region_id);
		return rc;
	}
	pages = (int64_t)(hd.length / h->cfg.chunk_size);
	linfo(h,
	      "region %" PRIu64 ": expanded by %" PRIu64 " bytes (%" PRId64
	      " pages)",
	      hd.region_id, hd.length, pages);
	if (h->on_added)
		h->on_added(h->on_added_arg, hd.region_id, (uint64_t)pages);
	return 0;
}

static int page_alloc_locked(struct maru_handler *h, size_t size,
			     struct maru_page *out)
{
	struct maru__owned_region *r;
	uint64_t rid, page;
	int rc;

	int tries;

	/* evicted pages: ours again; regions asked back: returned now, or
	 * this allocation could fill the one another instance waits for */
	maru__evict_apply(h);
	pthread_mutex_lock(&h->olock);
	rc = maru__owned_alloc(&h->owned, maru__now_ns(), &rid, &page);
	pthread_mutex_unlock(&h->olock);
	for (tries = 0; rc == -ENOSPC; tries++) {
		if (!h->cfg.auto_expand && h->owned.n)
			return maru__fail(
				h, -ENOSPC,
				"every page of this handler's regions "
				"is taken and auto_expand is off");
		rc = expand(h);
		/* the pool is full and the server evicted pages of ours
		 * instead (its reply said which): use those */
		if (rc < 0 &&
		    (tries >= 4 || (!maru__evict_apply(h) && rc != -EAGAIN))) {
			char why[512];

			snprintf(why, sizeof(why), "%s", maru__fail_text(h));
			return maru__fail(
				h, -ENOMEM,
				"no free page in this handler's "
				"regions, and %s",
				why[0] ? why : "no new region could be had");
		}
		pthread_mutex_lock(&h->olock);
		rc = maru__owned_alloc(&h->owned, maru__now_ns(), &rid, &page);
		pthread_mutex_unlock(&h->olock);
		if (rc < 0 && tries >= 4)
			return maru__fail(h, -ENOBUFS,
					  "a new region was had, but others "
					  "took its pages first");
	}
	r = maru__owned_find(&h->owned, rid);
	out->region_id = rid;
	out->page_index = page;
	out->size = size;
	out->ptr = r->map->addr + page * h->cfg.chunk_size;
	return 0;
}

MARU_EXPORT int maru_page_alloc(struct maru_handler *h, size_t size,
				struct maru_page *out)
{
	uint64_t t0 = maru__now_ns();
	int rc;

	if (size > h->cfg.chunk_size)
		return maru__fail(h, -EINVAL,
				  "value of %zu bytes is larger than a page "
				  "(chunk_size_bytes %" PRIu64 ")",
				  size, h->cfg.chunk_size);
	pthread_mutex_lock(&h->wlock);
	rc = state_check(h);
	if (rc == 0)
		rc = maru__write_gate(h);
	if (rc == 0)
		rc = page_alloc_locked(h, size, out);
	pthread_mutex_unlock(&h->wlock);
	if (rc == 0)
		maru__stats_record(h, "alloc", "none", size, t0);
	return rc;
}

MARU_EXPORT int maru_page_free(struct maru_handler *h, uint64_t region_id,
			       uint64_t page_index)
{
	uint64_t t0 = maru__now_ns();
	int rc;

	pthread_mutex_lock(&h->wlock);
	rc = state_check(h);
	if (rc == 0 && page_stored(h, region_id, page_index))
		rc = 1; /* kept: see page_stored() */
	else if (rc == 0)
		rc = page_release(h, region_id, page_index);
	/* the page went with its fenced region: nothing left to free */
	if (rc == -ENOENT && maru__mapper_is_retired(&h->mapper, region_id))
		rc = 0;
	pthread_mutex_unlock(&h->wlock);
	if (rc == -ERANGE)
		rc = -EINVAL;
	if (rc == 1)
		rc = 0;
	if (rc == 0)
		maru__stats_record(h, "free", "none", 0, t0);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Store                                                                    */

/* is @p an allocated page of an owned region? (@wlock held) */
static bool page_valid(struct maru_handler *h, const struct maru_page *p)
{
	struct maru__owned_region *r;
	bool ok;

	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, p->region_id);
	ok = r && maru__pagealloc_is_allocated(&r->pa, p->page_index) &&
	     p->size <= h->cfg.chunk_size;
	pthread_mutex_unlock(&h->olock);
	return ok;
}

/* the alarm flags: nonzero after a drop or a loss of ownership (ownership.c) */
static inline unsigned alarm_flags(struct maru_handler *h)
{
	return (unsigned)(atomic_load_explicit(&h->fence.alarm,
					       memory_order_relaxed) &
			  MARU_ALARM_FLAGS);
}

/*
 * was region @rid fenced (still owned, awaiting recovery, or retired)?
 * Off the fast path: callers ask only when an alarm is up or a page is
 * not valid.
 */
static bool region_fenced(struct maru_handler *h, uint64_t rid)
{
	struct maru__owned_region *r;
	bool owned, fenced = false;

	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, rid);
	owned = r != NULL;
	if (r && r->map)
		fenced = atomic_load(&r->map->fenced);
	pthread_mutex_unlock(&h->olock);
	return owned ? fenced : maru__mapper_is_retired(&h->mapper, rid);
}

/*
 * a key registered into a region fenced while the REGISTER was in flight:
 * its bytes never reached the pool, so take it back (best effort)
 */
static void unregister(struct maru_handler *h, const struct maru_key *key)
{
	struct maru__reply r;
	struct maru__msg m;

	reply_init(&r);
	maru__msg_init(&m, MDS_DELETE_KV);
	if (send_msg(h, &m, maru__enc_key(&m, key), &r) < 0 || !r.success)
		ldbg(h, "DELETE_KV of a key in a fenced region failed");
}

/*
 * Does the server evict (or others delete) our keys?  Then a key in our
 * local map may be gone from the server before its notice came: a store
 * of it asks the server instead of answering "already stored" locally.
 */
static bool evicting(struct maru_handler *h)
{
	return atomic_load_explicit(&h->inbox.ack, memory_order_relaxed) != 0;
}

/* is @p the page our local entry @e of its key is stored in? */
static bool same_page(const struct maru__keyent *e, const struct maru_page *p)
{
	return e && e->region_id == p->region_id && e->page == p->page_index;
}

/* the key is already stored locally: drop this page unless it is the same */
static void store_dup(struct maru_handler *h, const struct maru__keyent *e,
		      const struct maru_page *p)
{
	if (!same_page(e, p))
		page_release(h, p->region_id, p->page_index);
}

static void remember(struct maru_handler *h, const struct maru_key *key,
		     const struct maru_page *p, uint64_t gen)
{
	struct maru__keyent *e;

	/* stored before, evicted, stored again: the old entry waits for its
	 * notice (which frees its page), the new one takes the key */
	e = maru__keymap_find(&h->keys, key);
	if (e && maru__keymap_orphan(&h->keys, e) < 0) {
		lwarn(h, "key map full: a later store of this key costs a "
			 "round trip");
		return;
	}
	e = maru__keymap_insert(&h->keys, key, p->region_id, p->page_index);
	if (e)
		e->gen = gen; /* what an eviction notice of it names */
	if (!e) {
		lwarn(h, "key map full: a later store of this key costs a "
			 "round trip");
		return;
	}
	page_link_key(h, e);
}

MARU_EXPORT int maru_kv_store(struct maru_handler *h,
			      const struct maru_key *key,
			      const struct maru_page *page)
{
	uint64_t t0 = maru__now_ns();
	struct maru__keyent *e;
	struct maru__reply r;
	struct maru__msg m;
	struct maru__reg reg;
	int rc;

	pthread_mutex_lock(&h->wlock);
	rc = state_check(h);
	if (rc < 0)
		goto out_unlock;
	rc = -EINVAL;
	if (!key)
		goto out_unlock;
	if (h->max_key &&
	    (key->type == MARU_KEY_STR || key->type == MARU_KEY_BIN) &&
	    key->len > h->max_key) {
		rc = maru__fail(h, -E2BIG,
				"key of %zu bytes is longer than the server's "
				"--max-key-bytes (%" PRIu64 ")",
				(size_t)key->len, h->max_key);
		if (page_valid(h, page))
			page_release(h, page->region_id, page->page_index);
		goto out_unlock;
	}
	/* a page of a fenced region is never registered, and costs no RPC */
	rc = -ESTALE;
	if (alarm_flags(h) && region_fenced(h, page->region_id))
		goto out_unlock;
	rc = maru__write_gate(h);
	if (rc < 0) {
		if (page_valid(h, page))
			page_release(h, page->region_id, page->page_index);
		goto out_unlock;
	}
	if (!page_valid(h, page)) {
		/* (a recovery in the gate may just have retired its region) */
		rc = region_fenced(h, page->region_id) ? -ESTALE : -EINVAL;
		goto out_unlock;
	}
	e = maru__keymap_find(&h->keys, key);
	if (e && !evicting(h)) {
		store_dup(h, e, page);
		rc = 0;
		goto out_unlock;
	}
	reg = (struct maru__reg){key, page->region_id,
				 page->page_index * h->cfg.chunk_size,
				 page->size};
	reply_init(&r);
	maru__msg_init(&m, MDS_REGISTER_KV);
	rc = send_msg(h, &m, maru__enc_register(&m, &reg), &r);
	if (rc == 0 && !r.success)
		rc = maru__fail(
			h, -EREMOTEIO, "maru-server refused the key: %s",
			r.why[0] ? r.why : "REGISTER_KV answered false");
	if (rc < 0) {
		ldbg(h, "REGISTER_KV failed: %s", strerror(-rc));
		if (!same_page(e, page))
			page_release(h, page->region_id, page->page_index);
	} else if (!r.is_new) {
		/* first writer wins: someone else stored it (or we did) */
		if (!same_page(e, page))
			page_release(h, page->region_id, page->page_index);
		rc = 0;
	} else if ((alarm_flags(h) & MARU_ALARM_LOST) &&
		   region_fenced(h, page->region_id)) {
		/* fenced meanwhile (another thread found out) */
		unregister(h, key);
		rc = -ESTALE;
	} else {
		remember(h, key, page, r.kv_gen);
		rc = 1;
	}
out_unlock:
	pthread_mutex_unlock(&h->wlock);
	if (rc >= 0)
		maru__stats_record(h, "store", "none", page->size, t0);
	return rc;
}

MARU_EXPORT int maru_kv_batch_store(struct maru_handler *h,
				    const struct maru_key *keys,
				    const struct maru_page *pages, size_t n,
				    bool *results)
{
	uint64_t t0 = maru__now_ns();
	struct maru__keyent *e;
	struct maru__reg *regs = NULL;
	size_t *idx = NULL;
	struct maru__reply r;
	struct maru__msg m;
	bool *res = NULL;
	size_t i, j, k = 0;
	uint64_t gens = 0, gen;
	bool lost;
	int rc, hits = 0;

	if (n && (!keys || !pages || !results))
		return -EINVAL;
	for (i = 0; i < n; i++)
		results[i] = false;
	pthread_mutex_lock(&h->wlock);
	rc = state_check(h);
	if (rc < 0 || !n)
		goto out_unlock;
	rc = -ENOMEM;
	regs = malloc(n * sizeof(*regs));
	idx = malloc(n * sizeof(*idx));
	res = calloc(n, sizeof(*res));
	if (!regs || !idx || !res)
		goto out_unlock;

	/* answer locally what we stored ourselves; queue the rest */
	for (i = 0; i < n; i++) {
		if (!page_valid(h, &pages[i]))
			continue; /* false: not a page of ours */
		if (h->max_key &&
		    (keys[i].type == MARU_KEY_STR ||
		     keys[i].type == MARU_KEY_BIN) &&
		    keys[i].len > h->max_key) {
			/* false, and said: the page stays the caller's */
			maru__fail(h, -E2BIG,
				   "key of %zu bytes is longer than the "
				   "server's --max-key-bytes (%" PRIu64 ")",
				   (size_t)keys[i].len, h->max_key);
			continue;
		}
		if (alarm_flags(h) && region_fenced(h, pages[i].region_id))
			continue; /* false: fenced, never registered */
		e = maru__keymap_find(&h->keys, &keys[i]);
		if (e && !evicting(h)) {
			store_dup(h, e, &pages[i]);
			results[i] = true;
			hits++;
			continue;
		}
		regs[k] = (struct maru__reg){
			&keys[i], pages[i].region_id,
			pages[i].page_index * h->cfg.chunk_size, pages[i].size};
		idx[k++] = i;
	}
	rc = 0;
	if (!k)
		goto out_unlock;
	rc = maru__write_gate(h);
	if (rc == 0) {
		/* a recovery in the gate retires fenced regions: drop those */
		for (i = j = 0; i < k; i++) {
			if (!page_valid(h, &pages[idx[i]]))
				continue;
			regs[j] = regs[i];
			idx[j++] = idx[i];
		}
		k = j;
	}
	if (rc == 0 && k) {
		reply_init(&r);
		r.results = res;
		r.nresults = k;
		maru__msg_init(&m, MDS_BATCH_REGISTER_KV);
		rc = send_msg(h, &m, maru__enc_batch_register(&m, regs, k), &r);
		if (rc == 0 && !r.success)
			rc = -EREMOTEIO;
	}
	lost = rc == 0 && (alarm_flags(h) & MARU_ALARM_LOST);
	for (i = 0; i < k; i++) {
		const struct maru_page *p = &pages[idx[i]];

		/* the server numbers the new entries in order */
		gen = rc == 0 && i < r.results_len && res[i] && r.kv_gen_first
			      ? r.kv_gen_first + gens++
			      : 0;
		if (lost && region_fenced(h, p->region_id)) {
			/* fenced meanwhile: false (see maru_kv_store) */
			page_release(h, p->region_id, p->page_index);
			continue;
		}
		if (rc == 0 && i < r.results_len && res[i]) {
			remember(h, &keys[idx[i]], p, gen);
			results[idx[i]] = true;
			hits++;
		} else {
			/* lost race (true), or failure (false): page freed --
			 * unless it is the very page that holds the key */
			e = maru__keymap_find(&h->keys, &keys[idx[i]]);
			if (!same_page(e, p))
				page_release(h, p->region_id, p->page_index);
			if (rc == 0 && i < r.results_len) {
				results[idx[i]] = true;
				hits++;
			}
		}
	}
	if (rc < 0)
		ldbg(h, "BATCH_REGISTER_KV failed: %s", strerror(-rc));
out_unlock:
	pthread_mutex_unlock(&h->wlock);
	free(regs);
	free(idx);
	free(res);
	if (rc >= 0)
		maru__stats_record(h, "batch_store", "none", 0, t0);
	return rc < 0 ? rc : hits;
}

/* ------------------------------------------------------------------------ */
/* Reads                                                                    */

static const char *hit_result(size_t hits, size_t n)
{
	return hits == n ? "hit" : hits == 0 ? "miss" : "partial";
}

/* turn a lookup into a view, mapping the region on first use */
static int resolve(struct maru_handler *h, const struct maru__lookup *l,
		   struct maru_view *out)
{
	struct maru__mapping *m;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!l->found)
		return 0;
	if (!l->has_handle)
		return -EPROTO;
	m = maru__mapper_find(&h->mapper, l->handle.region_id);
	if (!m) {
		rc = maru__mapper_map(&h->mapper, &l->handle, false, true, &m);
		if (rc < 0)
			return rc;
	}
	if (l->kv_offset > m->len || l->kv_length > m->len - l->kv_offset) {
		lwarn(h,
		      "region %" PRIu64 ": entry [%" PRIu64 ", +%" PRIu64
		      ") outside the mapping",
		      l->handle.region_id, l->kv_offset, l->kv_length);
		return -EPROTO;
	}
	out->ptr = m->addr + l->kv_offset;
	out->len = (size_t)l->kv_length;
	out->region_id = l->handle.region_id;
	out->offset = l->kv_offset;
	out->page_index = l->kv_offset / h->cfg.chunk_size;
	return 1;
}

/*
 * The view of a shared-index hit (issue 16), when the region is mapped
 * here (the lookup is lock-free; a region not mapped yet, or fenced, is
 * left to the server's answer, which maps it).  Return: 1, or 0: ask.
 */
static int local_view(struct maru_handler *h, const struct si_hit *hit,
		      struct maru_view *out)
{
	struct maru__mapping *m = maru__mapper_find(&h->mapper, hit->region_id);

	if (!m || hit->kv_offset > m->len ||
	    hit->kv_length > m->len - hit->kv_offset)
		return 0;
	out->ptr = m->addr + hit->kv_offset;
	out->len = (size_t)hit->kv_length;
	out->region_id = hit->region_id;
	out->offset = hit->kv_offset;
	out->page_index = hit->kv_offset / h->cfg.chunk_size;
	return 1;
}

/*
 * Answer a retrieve from the shared index: 1 hit (*@out, *@gen), 0 a
 * final miss, -1 ask the server.  Counted either way, in @cnt (the
 * caller adds them up: maru__idx_count).
 */
static int idx_answer(struct maru_handler *h, const struct maru_key *key,
		      uint64_t kh, int r, const struct si_hit *hit,
		      struct maru_view *out, uint64_t *gen, uint64_t cnt[3])
{
	if (r == MARU_IDX_NONE)
		return -1;
	if (r == SI_MISS) {
		cnt[SI_MISS]++;
		return 0;
	}
	if (r == SI_HIT && local_view(h, hit, out)) {
		cnt[SI_HIT]++;
		maru__idx_touch(h, key, kh);
		*gen = hit->gen;
		return 1;
	}
	cnt[SI_ASK]++;
	return -1;
}

static void idx_counted(struct maru_handler *h, const uint64_t cnt[3])
{
	int i;

	for (i = 0; i < 3; i++)
		maru__idx_count(h, i, cnt[i]);
}

static int idx_retrieve(struct maru_handler *h, const struct maru_key *key,
			struct maru_view *out, uint64_t *gen)
{
	uint64_t kh = 0, cnt[3] = {0, 0, 0};
	struct si_hit hit;
	int r = maru__idx_lookup(h, key, false, &hit, &kh);

	r = idx_answer(h, key, kh, r, &hit, out, gen, cnt);
	idx_counted(h, cnt);
	return r;
}

MARU_EXPORT int maru_kv_retrieve(struct maru_handler *h,
				 const struct maru_key *key,
				 struct maru_view *out)
{
	return maru_kv_retrieve_ticket(h, key, out, NULL);
}

MARU_EXPORT int maru_kv_retrieve_ticket(struct maru_handler *h,
					const struct maru_key *key,
					struct maru_view *out, uint64_t *ticket)
{
	uint64_t t0 = maru__now_ns();
	struct maru__reply r;
	struct maru__msg m;
	int rc;

	uint64_t gen = 0;

	if (ticket)
		*ticket = 0;
	memset(out, 0, sizeof(*out));
	rc = state_check(h);
	if (rc < 0)
		return rc;
	if (!key)
		return -EINVAL;
	rc = idx_retrieve(h, key, out, &gen);
	if (rc >= 0) {
		if (rc == 1 && ticket)
			*ticket = gen;
		maru__stats_record(h, "retrieve", rc ? "hit" : "miss", out->len,
				   t0);
		return rc;
	}
	reply_init(&r);
	maru__msg_init(&m, MDS_LOOKUP_KV);
	rc = send_msg(h, &m, maru__enc_key(&m, key), &r);
	if (rc == 0)
		rc = resolve(h, &r.lookup, out);
	if (rc == 1 && ticket)
		*ticket = r.lookup.kv_gen;
	if (rc >= 0)
		maru__stats_record(h, "retrieve", rc ? "hit" : "miss", out->len,
				   t0);
	return rc;
}

MARU_EXPORT int maru_kv_recheck(struct maru_handler *h,
				const struct maru_key *key,
				const struct maru_view *v, uint64_t ticket)
{
	struct maru__reply r;
	struct maru__msg m;
	struct si_hit hit;
	int rc;

	if (!key || !v)
		return -EINVAL;
	rc = state_check(h);
	if (rc < 0)
		return rc;
	if (!v->ptr || !maru_view_valid(h, v))
		return 0; /* a miss, or a fenced mapping: not the pool's bytes
			   */
	/* the shared index: the entry read, still there? */
	rc = maru__idx_lookup(h, key, true, &hit, NULL);
	if (rc == SI_HIT || rc == SI_MISS) {
		/* not counted: the retrieve it checks was */
		return rc == SI_HIT && hit.region_id == v->region_id &&
		       hit.kv_offset == v->offset && hit.kv_length == v->len &&
		       (ticket == 0 || hit.gen == ticket);
	}
	reply_init(&r);
	maru__msg_init(&m, MDS_LOOKUP_KV);
	rc = send_msg(h, &m, maru__enc_key(&m, key), &r);
	if (rc < 0)
		return rc;
	/* the same entry: registration number and location */
	return r.lookup.found && r.lookup.has_handle &&
	       r.lookup.handle.region_id == v->region_id &&
	       r.lookup.kv_offset == v->offset &&
	       r.lookup.kv_length == v->len &&
	       (ticket == 0 || r.lookup.kv_gen == ticket);
}

/* EXISTS_KV / PIN_KV / UNPIN_KV / DELETE_KV: one key, one boolean */
static int key_op(struct maru_handler *h, uint8_t type,
		  const struct maru_key *key, const char *op)
{
	uint64_t t0 = maru__now_ns();
	struct maru__reply r;
	struct maru__msg m;
	int rc;

	rc = state_check(h);
	if (rc < 0)
		return rc;
	if (!key)
		return -EINVAL;
	if (type == MDS_EXISTS_KV) {
		/* the shared index knows, wherever the region is */
		struct si_hit hit;
		uint64_t kh = 0;
		int ir = maru__idx_lookup(h, key, false, &hit, &kh);

		if (ir == SI_HIT || ir == SI_MISS) {
			maru__idx_count(h, ir, 1);
			if (ir == SI_HIT)
				maru__idx_touch(h, key, kh);
			maru__stats_record(h, op, ir == SI_HIT ? "hit" : "miss",
					   0, t0);
			return ir == SI_HIT;
		}
		if (ir == SI_ASK)
			maru__idx_count(h, SI_ASK, 1);
	}
	reply_init(&r);
	maru__msg_init(&m, type);
	rc = send_msg(h, &m, maru__enc_key(&m, key), &r);
	if (rc < 0)
		return rc;
	/* EXISTS and PIN answer "exists", UNPIN and DELETE "success" */
	rc = (type == MDS_EXISTS_KV || type == MDS_PIN_KV) ? r.exists
							   : r.success;
	maru__stats_record(h, op, rc ? "hit" : "miss", 0, t0);
	return rc;
}

MARU_EXPORT int maru_kv_exists(struct maru_handler *h,
			       const struct maru_key *key)
{
	return key_op(h, MDS_EXISTS_KV, key, "exists");
}

MARU_EXPORT bool maru_view_valid(struct maru_handler *h,
				 const struct maru_view *v)
{
	struct maru__mapping *m;
	const uint8_t *p;

	if (!h || !v || !v->ptr || state_check(h) < 0)
		return false;
	/* a fenced mapping is never found: the region maps afresh elsewhere */
	m = maru__mapper_find(&h->mapper, v->region_id);
	p = v->ptr;
	return m && !atomic_load(&m->fenced) && p >= m->addr &&
	       v->len <= m->len && (size_t)(p - m->addr) <= m->len - v->len;
}

MARU_EXPORT int maru_kv_pin(struct maru_handler *h, const struct maru_key *key)
{
	return key_op(h, MDS_PIN_KV, key, "pin");
}

MARU_EXPORT int maru_kv_unpin(struct maru_handler *h,
			      const struct maru_key *key)
{
	if (state_check(h) == 0)
		maru__rejoin(h);
	return key_op(h, MDS_UNPIN_KV, key, "unpin");
}

MARU_EXPORT int maru_kv_delete(struct maru_handler *h,
			       const struct maru_key *key)
{
	uint64_t t0 = maru__now_ns();
	struct maru__keyent *e;
	struct maru__reply r;
	struct maru__msg m;
	uint64_t rid, page;
	int rc;

	if (!key)
		return -EINVAL;
	pthread_mutex_lock(&h->wlock);
	rc = state_check(h);
	if (rc < 0)
		goto out_unlock;
	reply_init(&r);
	maru__msg_init(&m, MDS_DELETE_KV);
	rc = send_msg(h, &m, maru__enc_key(&m, key), &r);
	if (rc < 0)
		goto out_unlock;
	rc = r.success;
	if (rc) {
		e = maru__keymap_find(&h->keys, key);
		if (e) {
			/* ours: the page is free again (drops its keys too) */
			rid = e->region_id;
			page = e->page;
			page_release(h, rid, page);
		}
	}
	maru__stats_record(h, "delete", rc ? "hit" : "miss", 0, t0);
out_unlock:
	pthread_mutex_unlock(&h->wlock);
	return rc;
}

MARU_EXPORT int maru_kv_batch_retrieve(struct maru_handler *h,
				       const struct maru_key *keys, size_t n,
				       struct maru_view *views)
{
	return maru_kv_batch_retrieve_tickets(h, keys, n, views, NULL);
}

/*
 * The keys of a batch the shared index could not answer (issue 16): their
 * indices into the caller's arrays, and a copy of the keys to ask about.
 * Return: how many, or -ENOMEM (then *@idx and *@ask are NULL).
 */
static ssize_t batch_asks(const struct maru_key *keys, size_t n,
			  const bool *known, size_t **idx,
			  struct maru_key **ask)
{
	size_t i, k = 0;

	*idx = NULL;
	*ask = NULL;
	for (i = 0; i < n; i++)
		k += !known[i];
	if (!k)
		return 0;
	*idx = malloc(k * sizeof(**idx));
	*ask = malloc(k * sizeof(**ask));
	if (!*idx || !*ask) {
		free(*idx);
		free(*ask);
		*idx = NULL;
		*ask = NULL;
		return -ENOMEM;
	}
	for (i = k = 0; i < n; i++)
		if (!known[i]) {
			(*idx)[k] = i;
			(*ask)[k++] = keys[i];
		}
	return (ssize_t)k;
}

MARU_EXPORT int maru_kv_batch_retrieve_tickets(struct maru_handler *h,
					       const struct maru_key *keys,
					       size_t n,
					       struct maru_view *views,
					       uint64_t *tickets)
{
	uint64_t t0 = maru__now_ns(), gen;
	struct maru__lookup *ents = NULL;
	struct maru_key *ask = NULL;
	uint64_t *kh, cnt[3] = {0, 0, 0};
	struct si_hit *ih;
	struct maru__reply r;
	struct maru__msg m;
	size_t i, j, hits = 0, *idx = NULL;
	bool *known = NULL;
	ssize_t k;
	int rc, *ir;

	if (n && (!keys || !views))
		return -EINVAL;
	memset(views, 0, n * sizeof(*views));
	if (tickets)
		memset(tickets, 0, n * sizeof(*tickets));
	rc = state_check(h);
	if (rc < 0 || !n)
		return rc;
	/* the shared index first; what it cannot answer, in one request */
	known = calloc(n, sizeof(*known));
	ir = malloc(n * sizeof(*ir));
	ih = malloc(n * sizeof(*ih));
	kh = malloc(n * sizeof(*kh));
	if (!known || !ir || !ih || !kh) {
		free(known);
		free(ir);
		free(ih);
		free(kh);
		return -ENOMEM;
	}
	if (maru__idx_lookup_batch(h, keys, n, ir, ih, kh) == 0) {
		for (i = 0; i < n; i++) {
			rc = idx_answer(h, &keys[i], kh[i], ir[i], &ih[i],
					&views[i], &gen, cnt);
			if (rc < 0)
				continue;
			known[i] = true;
			hits += rc;
			if (rc && tickets)
				tickets[i] = gen;
		}
		idx_counted(h, cnt);
	}
	free(ir);
	free(ih);
	free(kh);
	k = batch_asks(keys, n, known, &idx, &ask);
	rc = k < 0 ? (int)k : 0;
	if (k > 0) {
		ents = calloc((size_t)k, sizeof(*ents));
		rc = ents ? 0 : -ENOMEM;
	}
	if (k > 0 && rc == 0) {
		reply_init(&r);
		r.entries = ents;
		r.nentries = (size_t)k;
		maru__msg_init(&m, MDS_BATCH_LOOKUP_KV);
		rc = send_msg(h, &m, maru__enc_batch_keys(&m, ask, (size_t)k),
			      &r);
		for (j = 0; rc == 0 && j < (size_t)k && j < r.entries_len;
		     j++) {
			i = idx[j];
			/* a region that cannot be mapped is a miss */
			if (resolve(h, &ents[j], &views[i]) == 1)
				hits++;
			else
				memset(&views[i], 0, sizeof(views[i]));
			if (tickets)
				tickets[i] = views[i].ptr ? ents[j].kv_gen : 0;
		}
	}
	if (rc == 0)
		maru__stats_record(h, "batch_retrieve", hit_result(hits, n), 0,
				   t0);
	free(ents);
	free(idx);
	free(ask);
	free(known);
	return rc < 0 ? rc : (int)hits;
}

/* BATCH_EXISTS_KV: the shared index first, the rest in one request */
static int batch_exists(struct maru_handler *h, const struct maru_key *keys,
			size_t n, bool *results, uint64_t t0)
{
	uint64_t *kh, cnt[3] = {0, 0, 0};
	struct maru_key *ask = NULL;
	struct maru__reply r;
	struct maru__msg m;
	struct si_hit *hit;
	size_t i, j, hits = 0, *idx = NULL;
	bool *known, *res = NULL;
	ssize_t k;
	int rc, *ir;

	known = calloc(n, sizeof(*known));
	ir = malloc(n * sizeof(*ir));
	hit = malloc(n * sizeof(*hit));
	kh = malloc(n * sizeof(*kh));
	if (!known || !ir || !hit || !kh) {
		free(known);
		free(ir);
		free(hit);
		free(kh);
		return -ENOMEM;
	}
	if (maru__idx_lookup_batch(h, keys, n, ir, hit, kh) == 0) {
		for (i = 0; i < n; i++) {
			cnt[ir[i]]++;
			if (ir[i] == SI_ASK)
				continue;
			known[i] = true;
			results[i] = ir[i] == SI_HIT;
			if (ir[i] == SI_HIT)
				maru__idx_touch(h, &keys[i], kh[i]);
		}
		idx_counted(h, cnt);
	}
	free(ir);
	free(hit);
	free(kh);
	k = batch_asks(keys, n, known, &idx, &ask);
	rc = k < 0 ? (int)k : 0;
	if (k > 0) {
		res = calloc((size_t)k, sizeof(*res));
		rc = res ? 0 : -ENOMEM;
	}
	if (k > 0 && rc == 0) {
		reply_init(&r);
		r.results = res;
		r.nresults = (size_t)k;
		maru__msg_init(&m, MDS_BATCH_EXISTS_KV);
		rc = send_msg(h, &m, maru__enc_batch_keys(&m, ask, (size_t)k),
			      &r);
		for (j = 0; rc == 0 && j < (size_t)k; j++)
			results[idx[j]] = res[j];
	}
	if (rc < 0) {
		for (i = 0; i < n; i++)
			results[i] = false;
	} else {
		for (i = 0; i < n; i++)
			hits += results[i];
		maru__stats_record(h, "batch_exists", hit_result(hits, n), 0,
				   t0);
	}
	free(res);
	free(idx);
	free(ask);
	free(known);
	return rc < 0 ? rc : (int)hits;
}

/* BATCH_EXISTS_KV / BATCH_PIN_KV / BATCH_UNPIN_KV */
static int batch_bool(struct maru_handler *h, uint8_t type,
		      const struct maru_key *keys, size_t n, bool *results,
		      const char *op)
{
	uint64_t t0 = maru__now_ns();
	struct maru__reply r;
	struct maru__msg m;
	size_t i, hits = 0;
	int rc;

	if (n && (!keys || !results))
		return -EINVAL;
	for (i = 0; i < n; i++)
		results[i] = false;
	rc = state_check(h);
	if (rc < 0 || !n)
		return rc;
	if (type == MDS_BATCH_UNPIN_KV)
		maru__rejoin(h);
	if (type == MDS_BATCH_EXISTS_KV)
		return batch_exists(h, keys, n, results, t0);
	reply_init(&r);
	r.results = results;
	r.nresults = n;
	maru__msg_init(&m, type);
	rc = send_msg(h, &m, maru__enc_batch_keys(&m, keys, n), &r);
	if (rc < 0) {
		for (i = 0; i < n; i++)
			results[i] = false;
		return rc;
	}
	for (i = 0; i < n; i++)
		hits += results[i];
	maru__stats_record(h, op, hit_result(hits, n), 0, t0);
	return (int)hits;
}

MARU_EXPORT int maru_kv_batch_exists(struct maru_handler *h,
				     const struct maru_key *keys, size_t n,
				     bool *results)
{
	return batch_bool(h, MDS_BATCH_EXISTS_KV, keys, n, results,
			  "batch_exists");
}

MARU_EXPORT int maru_kv_batch_pin(struct maru_handler *h,
				  const struct maru_key *keys, size_t n,
				  bool *results)
{
	return batch_bool(h, MDS_BATCH_PIN_KV, keys, n, results, "batch_pin");
}

MARU_EXPORT int maru_kv_batch_unpin(struct maru_handler *h,
				    const struct maru_key *keys, size_t n,
				    bool *results)
{
	return batch_bool(h, MDS_BATCH_UNPIN_KV, keys, n, results,
			  "batch_unpin");
}

MARU_EXPORT bool maru_handler_healthcheck(struct maru_handler *h)
{
	struct maru__reply r;
	struct maru__msg m;

	if (state_check(h) < 0)
		return false;
	reply_init(&r);
	maru__msg_init(&m, MDS_HEARTBEAT);
	return send_msg(h, &m, maru__enc_empty(&m), &r) == 0;
}

/* one request of @type with @n payload bytes on @r; the reply's payload
 * copied into *@reply (malloc()ed) */
static int call_copy(struct maru__rpc *r, uint8_t type, const void *p, size_t n,
		     void **reply, size_t *reply_len)
{
	struct maru__rpc_reply rr;
	struct maru__msg m;
	int rc;

	maru__msg_init(&m, type);
	rc = maru__enc_raw(&m, p, n);
	if (rc == 0)
		rc = maru__rpc_call(r, &m, &rr);
	maru__msg_release(&m);
	if (rc < 0)
		return rc;
	*reply = malloc(rr.len ? rr.len : 1);
	if (*reply) {
		memcpy(*reply, rr.payload, rr.len);
		*reply_len = rr.len;
	} else {
		rc = -ENOMEM;
	}
	maru__rpc_reply_release(&rr);
	return rc;
}

MARU_EXPORT int maru_handler_get_stats_raw(struct maru_handler *h, void **buf,
					   size_t *len)
{
	int rc = state_check(h);

	/* an empty map: 0x80 */
	return rc < 0 ? rc
		      : call_copy(&h->rpc, MDS_GET_STATS, "\x80", 1, buf, len);
}

MARU_EXPORT int maru_handler_call(struct maru_handler *h, uint8_t msg_type,
				  const void *payload, size_t len, void **reply,
				  size_t *reply_len)
{
	int rc = 0;

	if (len && !payload)
		return -EINVAL;
	pthread_mutex_lock(&h->raw_lock);
	if (!h->raw_open) {
		rc = maru__rpc_open(&h->raw, h, h->cfg.server_url,
				    h->cfg.timeout_ms, h->cfg.use_async_rpc,
				    h->cfg.max_inflight);
		h->raw_open = rc == 0;
	}
	pthread_mutex_unlock(&h->raw_lock);
	return rc < 0 ? rc
		      : call_copy(&h->raw, msg_type, payload, len, reply,
				  reply_len);
}

MARU_EXPORT int maru_handler_get_stats(struct maru_handler *h,
				       struct maru_server_stats *out)
{
	bool error;
	size_t len;
	void *buf;
	int rc;

	rc = maru_handler_get_stats_raw(h, &buf, &len);
	if (rc < 0)
		return rc;
	rc = maru__decode_stats(buf, len, out, &error);
	free(buf);
	if (rc == 0 && error)
		rc = -EREMOTEIO;
	return rc;
}
