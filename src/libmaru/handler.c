/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handler.c - struct maru_handler, upstream's MaruHandler in C: its life
 *
 * A handler is made, connected, closed and freed here, and says what it is
 * (the accessors); the KV calls of a connected handler are kv.c's, the
 * eviction inbox is evict.c's.  Semantics: docs/python-api.md (connect,
 * close, healthcheck, stats, accessors).
 *
 * What it owns: the handler's state, which moves NEW -> CONNECTED ->
 * CLOSING (terminal; a failed connect goes back to NEW); its config, log
 * sink and CURVE keys; the main connection and maru_handler_call()'s own;
 * and the lives of the background threads.  Connect starts the RPC watch
 * with ownership.c's callbacks (maru__fence_lost, maru__fence_tick), and
 * maru_handler_new() gives the lease the eviction inbox's hooks (struct
 * maru__hb_hooks), so that neither module below names a function above
 * it.  Close stops the threads before anything they use goes.  Regions
 * come in here, the first at connect and more when kv.c runs out of pages
 * (maru__region_expand); they leave through evict.c (maru__region_return),
 * at close or when the server asks for them.
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
 *  - @inbox.lock guards the eviction notices not yet applied (evict.c): a
 *    leaf lock.
 *
 * Dependencies (docs/threads.md): kv.c -> this file -> evict.c ->
 * ownership.c -> rpc.c, mapper.c, shmindex.c -> codec.c.  It calls kv.c
 * never; the files below reach it only through the callbacks it gives.
 *
 * Errors (see maru.h): -ENOTCONN / -ESHUTDOWN when a call finds the
 * handler not connected or closed (maru__state_check), with the cause kept
 * for maru_handler_last_error(); the KV calls' are in kv.c.
 */
#include "private.h"

#include "agent_proto.h"

#include <sodium.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mds_proto.h"
#include "util.h"

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                */

/*
 * We take pages of any region one by one (maru-server's capacity by the
 * page, docs/architecture.md): our chunk size, said in REQUEST_ALLOC and
 * HEARTBEAT; MARU_PAGE_GRANTS=0 turns it off (each handler allocates in
 * the regions it owns only, as upstream's).
 */
static uint32_t env_page_size(uint64_t chunk_size)
{
	const char *v = getenv("MARU_PAGE_GRANTS");

	if ((v && !strcmp(v, "0")) || chunk_size > UINT32_MAX)
		return 0;
	return (uint32_t)chunk_size;
}

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
	h->page_size = env_page_size(cfg->chunk_size);
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
	maru__inbox_init(h);
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
	maru__inbox_destroy(h);
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
int maru__state_check(const struct maru_handler *h)
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

/* ------------------------------------------------------------------------ */
/* Regions: the first at connect, more when kv.c runs out of pages          */

/* REQUEST_ALLOC of @size bytes; the handle into @out */
static int request_region(struct maru_handler *h, uint64_t size,
			  struct maru_region_handle *out)
{
	const char *lease = h->lease.active ? h->lease.id : NULL;
	struct maru__reply r;
	char sz[32];
	struct maru__msg m;
	int rc;

	maru__reply_init(&r);
	maru__msg_init(&m, MDS_REQUEST_ALLOC);
	rc = maru__send(h, &m,
			maru__enc_request_alloc(&m, h->instance_id, size, lease,
						maru__evict_ack(h),
						h->page_size),
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
	rc = maru__owned_add(&h->owned, hd->region_id, hd->length, m, false);
	pthread_mutex_unlock(&h->olock);
	if (rc < 0) {
		lerr(h, "region %" PRIu64 ": cannot manage pages: %s",
		     hd->region_id, strerror(-rc));
		maru__mapper_unmap(&h->mapper, hd->region_id);
	}
	return rc;
}

/*
 * REQUEST_ALLOC(expand_size), map it, announce it (@wlock held).  With no
 * region left (all fenced and dropped by a recovery) the new one replaces
 * the first: pool_size, whether or not auto_expand is on.
 */
int maru__region_expand(struct maru_handler *h)
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
		maru__region_return(h, hd.region_id);
		return rc;
	}
	pages = (int64_t)(hd.length / h->cfg.chunk_size);
	/* (routine: the one INFO line of a handler is its connect) */
	ldbg(h,
	     "region %" PRIu64 ": expanded by %" PRIu64 " bytes (%" PRId64
	     " pages)",
	     hd.region_id, hd.length, pages);
	if (h->on_added)
		h->on_added(h->on_added_arg, hd.region_id, (uint64_t)pages);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Connect and close                                                        */

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
	maru__reply_init(&r);
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
	/* the shared index: a file now; a region of the pool
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

	maru__reply_init(&r);
	r.on_handle = eager_one;
	r.arg = h;
	maru__msg_init(&m, MDS_LIST_ALLOCATIONS);
	rc = maru__send(h, &m, maru__enc_list_allocations(&m, h->instance_id),
			&r);
	if (rc < 0)
		lwarn(h, "LIST_ALLOCATIONS failed: %s", strerror(-rc));
	else
		ldbg(h, "eager map: %zu regions listed", r.handles_len);
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
	/* UCX lets go of the stand-ins before they are unmapped */
	maru__remote_quiesce(h->remote);
	if (h->mapper_ready)
		maru__mapper_destroy(&h->mapper);
	h->mapper_ready = false;
	maru__remote_free(h->remote);
	h->remote = NULL;
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

MARU_EXPORT int maru_agent_stats(const struct maru_config *cfg,
				 struct maru_agent_stats *out, char *why,
				 size_t whylen)
{
	uint64_t st[AGENT_ST_N] = {0};
	struct maru_handler *h;
	int rc;

	memset(out, 0, sizeof(*out));
	if (why && whylen)
		why[0] = '\0';
	if (!cfg || !cfg->agent_url)
		return -EINVAL;
	rc = maru_handler_new(cfg, &h);
	if (rc < 0) {
		if (why && whylen)
			snprintf(why, whylen, "%s", strerror(-rc));
		return rc;
	}
	maru_handler_set_log_priority(h, -1); /* the caller says it */
	rc = maru__agent_stats(h, st);
	if (rc < 0 && why && whylen)
		snprintf(why, whylen, "%s", maru__fail_text(h));
	*out = (struct maru_agent_stats){
		.sessions = st[AGENT_ST_SESSIONS],
		.sessions_total = st[AGENT_ST_SESSIONS_TOTAL],
		.refused_connections = st[AGENT_ST_REFUSED_CONN],
		.granted = st[AGENT_ST_GRANTED],
		.denied = st[AGENT_ST_DENIED],
		.bad_requests = st[AGENT_ST_BAD],
		.regions = st[AGENT_ST_REGIONS],
		.bytes_mapped = st[AGENT_ST_BYTES_MAPPED],
		.revoked = st[AGENT_ST_REVOKED],
		.puts = st[AGENT_ST_PUTS],
		.put_bytes = st[AGENT_ST_PUT_BYTES],
		.gets = st[AGENT_ST_GETS],
		.get_bytes = st[AGENT_ST_GET_BYTES],
		.refused_transfers = st[AGENT_ST_REFUSED_XFERS],
	};
	maru_handler_free(h);
	return rc;
}

MARU_EXPORT void maru_handler_remote_stats(const struct maru_handler *h,
					   struct maru_remote_stats *out)
{
	maru__remote_counters(h->remote, out);
}

MARU_EXPORT const char *maru_handler_connect_error(const struct maru_handler *h)
{
	return h->conn_err;
}

MARU_EXPORT int maru_handler_connect(struct maru_handler *h)
{
	struct maru_region_handle hd;
	int rc, i;

	pthread_mutex_lock(&h->wlock);
	rc = maru__state_check(h);
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
	if (h->cfg.agent_url && h->cfg.remote != MARU_REMOTE_OFF &&
	    !h->remote) {
		rc = maru__remote_new(h, &h->remote);
		/* its counters start at 0: nothing told yet */
		for (i = 0; i < MDS_RT_N; i++)
			atomic_store(&h->rt_told[i], 0);
		if (rc < 0)
			goto out_teardown;
	}
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
	if (rc == -EAGAIN && h->page_size && maru__evict_apply(h)) {
		/* pages granted one by one (pages of any region): ours */
		hd.region_id = 0;
	} else if (rc == -ENOSPC || rc == -EAGAIN) {
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
			maru__region_return(h, hd.region_id);
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
			if (maru__region_live(h->owned.regions[i]))
				ids[n++] = h->owned.regions[i]->region_id;
	}
	maru__owned_destroy(&h->owned);
	pthread_mutex_unlock(&h->olock);
	maru__keymap_destroy(&h->keys);
	for (i = 0; i < n; i++)
		maru__region_return(h, ids[i]);
	free(ids);
	teardown(h);
	h->on_added = NULL;
	pthread_mutex_unlock(&h->wlock);
	ldbg(h, "closed");
}

MARU_EXPORT bool maru_handler_is_connected(const struct maru_handler *h)
{
	return maru__state_check(h) == 0;
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
	if (maru__state_check(h) < 0 || !h->lease.active)
		return 0;
	return h->lease.ttl_ns / 1000000ull;
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */

MARU_EXPORT int maru_handler_owned_region_ids(struct maru_handler *h,
					      uint64_t *ids, size_t cap)
{
	size_t i, n = 0;

	if (maru__state_check(h) < 0)
		return 0;
	pthread_mutex_lock(&h->olock);
	for (i = 0; i < h->owned.n; i++) {
		if (!maru__region_live(h->owned.regions[i]))
			continue;
		if (n < cap)
			ids[n] = h->owned.regions[i]->region_id;
		n++;
	}
	pthread_mutex_unlock(&h->olock);
	return (int)n;
}

/* @size bytes at @offset of @region_id's mapping (@rd: where retrieves
 * land, for a remote region its read mirror), or NULL */
static void *region_ptr(struct maru_handler *h, uint64_t region_id,
			uint64_t offset, uint64_t size, bool rd)
{
	struct maru__mapping *m;

	if (maru__state_check(h) < 0)
		return NULL;
	m = maru__mapper_find(&h->mapper, region_id);
	if (!m || offset > m->len || size > m->len - offset)
		return NULL;
	return (rd && m->rd ? m->rd : m->addr) + offset;
}

MARU_EXPORT void *maru_region_get_buffer(struct maru_handler *h,
					 uint64_t region_id, uint64_t offset,
					 uint64_t size)
{
	return region_ptr(h, region_id, offset, size, false);
}

MARU_EXPORT void *maru_region_get_read_buffer(struct maru_handler *h,
					      uint64_t region_id,
					      uint64_t offset, uint64_t size)
{
	return region_ptr(h, region_id, offset, size, true);
}

MARU_EXPORT int64_t maru_region_page_count(struct maru_handler *h,
					   uint64_t region_id)
{
	struct maru__owned_region *r;
	struct maru__mapping *m;
	int64_t n = -ENOENT;

	if (maru__state_check(h) < 0)
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

	if (maru__state_check(h) < 0)
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

	if (maru__state_check(h) < 0)
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

	if (maru__state_check(h) < 0)
		return false;
	pthread_mutex_lock(&h->olock);
	r = maru__owned_find(&h->owned, region_id);
	owned = r && maru__region_live(r);
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
	if (fn && maru__state_check(h) == 0) {
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
/* Requests outside the KV: health, statistics, raw calls                   */

MARU_EXPORT bool maru_handler_healthcheck(struct maru_handler *h)
{
	struct maru__reply r;
	struct maru__msg m;

	if (maru__state_check(h) < 0)
		return false;
	maru__reply_init(&r);
	maru__msg_init(&m, MDS_HEARTBEAT);
	return maru__send(h, &m, maru__enc_empty(&m), &r) == 0;
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
	int rc = maru__state_check(h);

	/* an empty map: 0x80 */
	return rc < 0 ? rc
		      : call_copy(&h->rpc, MDS_GET_STATS, "\x80", 1, buf, len);
}

MARU_EXPORT int maru_handler_call(struct maru_handler *h, uint8_t msg_type,
				  const void *payload, size_t len, void **reply,
				  size_t *reply_len)
{
	int rc = 0;

	maru__fail_clear(h);
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
