/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote.c - the pool through maru-agent, on a host that cannot map it
 *
 * A handler is remote when its config says so (remote "on"), or when it
 * says "auto" (the default) with an agent configured and the pool turns
 * out not to be mappable here (mapper.c asks, at the first region).  Then
 * each region's "mapping" is private anonymous memory of the region's
 * size (MAP_NORESERVE: only the pages used take memory) standing in for
 * the pool, and the bytes move between it and the pool with UCX:
 *   - a store writes the page with ucp_put, then flushes the endpoint:
 *     the flush completes once every put is complete at the target, and
 *     only then does kv.c register the key;
 *   - a retrieve reads the page with ucp_get into the stand-in and hands
 *     out a view of it (a copy, not zero copy); kv.c then checks the
 *     lookup's ticket, so a page evicted and reused during the read is a
 *     miss, never wrong bytes.
 * Everything else (alloc, exists, pin, delete, the index, leases) is
 * maru-server's as for any handler.
 *
 * The agent: one control connection (rpc.c, REQ lock-step; CURVE with
 * the handler's own certificate and the agent's public key, or
 * maru-server's when the config names none), one UCX endpoint to the
 * worker address its HELLO gives, and per region the remote key its
 * ACCESS gives for the region's token.  Keys belong to the endpoint: when
 * the endpoint fails (the agent died, the network dropped, a transfer
 * timed out) it is closed, every key is destroyed, and the next transfer
 * says HELLO again and asks for each key anew (@epoch).
 *
 * A transfer waits at most the handler's timeout_ms: then the endpoint is
 * closed by force (which fails whatever is in flight) and the call
 * returns -ETIMEDOUT; nothing is registered.
 *
 * Context: any thread; @lock serialises everything here (UCX's worker is
 * created UCS_THREAD_MODE_SERIALIZED).  Lock order: the mapper's lock,
 * then this one.
 */
#include "private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <sodium.h>
#include <ucp/api/ucp.h>

#include "agent_proto.h"

struct maru__rkey {
	struct maru__rkey *next, **pprev; /* the remote's list */
	struct maru_region_handle hd;
	ucp_rkey_h rkey; /* NULL: ask the agent */
	uint64_t raddr;	 /* the region's first byte at the agent */
	uint64_t epoch;	 /* of the endpoint @rkey belongs to */
};

struct maru__remote {
	const struct maru_handler *h; /* borrows */
	pthread_mutex_t lock;
	atomic_bool on; /* this handler is remote (sticky) */
	bool ctl_open;
	struct maru__rpc ctl;	  /* the agent's control port */
	struct maru__curve curve; /* ours, with the agent's key */
	ucp_context_h ucp;
	ucp_worker_h worker;
	ucp_ep_h ep; /* NULL: not connected */
	atomic_bool ep_failed;
	uint64_t epoch; /* bumped at each new endpoint */
	struct maru__rkey *keys;
	int timeout_ms;
	/* counters (maru_handler_remote_stats) */
	atomic_uint_fast64_t put_bytes, get_bytes, puts, gets, errors, connects;
};

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct maru__remote *r = arg;

	(void)ep;
	(void)st;
	atomic_store(&r->ep_failed, true);
}

int maru__remote_new(struct maru_handler *h, struct maru__remote **out)
{
	ucp_worker_params_t wp = {0};
	ucp_params_t up = {0};
	struct maru__remote *r;
	ucp_config_t *uc;
	ucs_status_t st;
	char why[512];
	int rc;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->h = h;
	r->timeout_ms = h->cfg.timeout_ms;
	pthread_mutex_init(&r->lock, NULL);
	atomic_init(&r->on, h->cfg.remote == MARU_REMOTE_ON);
	rc = maru__rpc_open(&r->ctl, h, h->cfg.agent_url, h->cfg.timeout_ms,
			    false, 1);
	if (rc < 0)
		goto out_free;
	r->ctl_open = true;
	/* an agent that is not there fails the call at once (no redial until
	 * the deadline): its callers' stores fail fast, and the next call
	 * tries again */
	r->ctl.once = true;
	if (h->curve) {
		r->curve = *h->curve;
		if (h->cfg.agent_curve_key &&
		    zcurve_load_public(h->cfg.agent_curve_key, r->curve.server,
				       why, sizeof(why)) < 0) {
			lerr(h, "agent CURVE key: %s", why);
			rc = -EINVAL;
			goto out_free;
		}
		r->ctl.curve = &r->curve;
	}
	rc = -EIO;
	st = ucp_config_read(NULL, NULL, &uc);
	if (st != UCS_OK) {
		lerr(h, "UCX: reading its configuration: %s",
		     ucs_status_string(st));
		goto out_free;
	}
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_RMA;
	st = ucp_init(&up, uc, &r->ucp);
	ucp_config_release(uc);
	if (st != UCS_OK) {
		lerr(h, "UCX: ucp_init: %s", ucs_status_string(st));
		goto out_free;
	}
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
	st = ucp_worker_create(r->ucp, &wp, &r->worker);
	if (st != UCS_OK) {
		lerr(h, "UCX: ucp_worker_create: %s", ucs_status_string(st));
		ucp_cleanup(r->ucp);
		goto out_free;
	}
	*out = r;
	return 0;

out_free:
	if (r->ctl_open)
		maru__rpc_close(&r->ctl);
	sodium_memzero(&r->curve, sizeof(r->curve));
	pthread_mutex_destroy(&r->lock);
	free(r);
	return rc;
}

bool maru__remote_on(const struct maru__remote *r)
{
	return r && atomic_load_explicit(&r->on, memory_order_acquire);
}

bool maru__remote_may_switch(const struct maru__remote *r)
{
	return r && r->h->cfg.remote == MARU_REMOTE_AUTO;
}

void maru__remote_switch_on(struct maru__remote *r)
{
	atomic_store_explicit(&r->on, true, memory_order_release);
}

/* close the endpoint by force: whatever is in flight on it fails
 * (@lock held). Return: the close's request, or NULL */
static void *force_close(struct maru__remote *r)
{
	ucp_request_param_t p = {0};
	void *req;

	if (!r->ep)
		return NULL;
	p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
	p.flags = UCP_EP_CLOSE_FLAG_FORCE;
	req = ucp_ep_close_nbx(r->ep, &p);
	r->ep = NULL;
	return UCS_PTR_IS_ERR(req) ? NULL : req;
}

/*
 * Wait for @req (a ucs_status_ptr_t) until @deadline; past it the
 * endpoint is closed by force, which fails the request; a request that
 * still does not end within GIVE_UP_NS is abandoned (never freed: UCX may
 * still write it).  Return: its UCS status (UCS_ERR_TIMED_OUT past the
 * deadline).
 */
#define GIVE_UP_NS 2000000000ull
static ucs_status_t wait_one(struct maru__remote *r, void *req,
			     uint64_t deadline)
{
	bool late = false;
	void *close_req = NULL;
	ucs_status_t st;

	if (req == NULL)
		return UCS_OK;
	if (UCS_PTR_IS_ERR(req))
		return UCS_PTR_STATUS(req);
	for (;;) {
		ucp_worker_progress(r->worker);
		st = ucp_request_check_status(req);
		if (st != UCS_INPROGRESS)
			break;
		if (!late && maru__now_ns() >= deadline) {
			late = true;
			close_req = force_close(r);
		} else if (late && maru__now_ns() >= deadline + GIVE_UP_NS) {
			lwarn(r->h,
			      "agent %s: a UCX request did not end: "
			      "abandoned",
			      r->h->cfg.agent_url);
			return UCS_ERR_TIMED_OUT;
		}
	}
	ucp_request_free(req);
	if (close_req)
		(void)wait_one(r, close_req, UINT64_MAX - GIVE_UP_NS);
	return late ? UCS_ERR_TIMED_OUT : st;
}

/* close the endpoint, by force, and forget every key (@lock held) */
static void disconnect_locked(struct maru__remote *r)
{
	struct maru__rkey *k;
	void *req = force_close(r);

	if (req)
		(void)wait_one(r, req, maru__now_ns() + 1000000000ull);
	for (k = r->keys; k; k = k->next)
		if (k->rkey) {
			ucp_rkey_destroy(k->rkey);
			k->rkey = NULL;
		}
}

void maru__remote_free(struct maru__remote *r)
{
	struct maru__rkey *k;

	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	disconnect_locked(r);
	while ((k = r->keys)) { /* (mappings outlived by nothing) */
		r->keys = k->next;
		k->pprev = NULL;
	}
	pthread_mutex_unlock(&r->lock);
	ucp_worker_destroy(r->worker);
	ucp_cleanup(r->ucp);
	if (r->ctl_open)
		maru__rpc_close(&r->ctl);
	sodium_memzero(&r->curve, sizeof(r->curve));
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* one request to the agent; @rep decoded from @rr (release it) */
static int agent_call(struct maru__remote *r, uint8_t type,
		      const struct agent_access_req *q,
		      struct maru__rpc_reply *rr, struct agent_reply *rep)
{
	struct buf b = {0};
	struct mp_wr w = {&b, 0};
	struct maru__msg m;
	int rc;

	maru__msg_init(&m, type);
	if (q)
		agent_encode_access(&w, q);
	else
		mp_put_map(&w, 0);
	rc = w.err ? -ENOMEM : maru__enc_raw(&m, b.data, b.len);
	buf_free(&b);
	if (rc == 0)
		rc = maru__rpc_call(&r->ctl, &m, rr);
	maru__msg_release(&m);
	if (rc < 0)
		return rc;
	if (agent_decode_reply(rr->payload, rr->len, rep) < 0) {
		maru__rpc_reply_release(rr);
		return -EPROTO;
	}
	return 0;
}

/* an endpoint to the agent (@lock held). Return: 0 or -errno */
static int connect_locked(struct maru__remote *r)
{
	ucp_ep_params_t ep = {0};
	struct maru__rpc_reply rr;
	struct agent_reply rep;
	ucs_status_t st;
	int rc;

	if (r->ep && !atomic_load(&r->ep_failed))
		return 0;
	if (r->ep) {
		lwarn(r->h, "agent %s: the UCX endpoint failed; reconnecting",
		      r->h->cfg.agent_url);
		disconnect_locked(r);
	}
	rc = agent_call(r, AGENT_HELLO, NULL, &rr, &rep);
	if (rc < 0)
		return maru__fail(r->h, rc, "agent %s: HELLO: %s",
				  r->h->cfg.agent_url, strerror(-rc));
	if (!rep.success || !rep.blob_len) {
		maru__rpc_reply_release(&rr);
		return maru__fail(r->h, -EPROTO, "agent %s refused HELLO",
				  r->h->cfg.agent_url);
	}
	ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			UCP_EP_PARAM_FIELD_ERR_HANDLER;
	ep.address = (const ucp_address_t *)rep.blob;
	ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	ep.err_handler.cb = ep_error;
	ep.err_handler.arg = r;
	atomic_store(&r->ep_failed, false);
	st = ucp_ep_create(r->worker, &ep, &r->ep);
	maru__rpc_reply_release(&rr);
	if (st != UCS_OK) {
		r->ep = NULL;
		return maru__fail(r->h, -EHOSTUNREACH,
				  "agent %s: UCX endpoint: %s",
				  r->h->cfg.agent_url, ucs_status_string(st));
	}
	r->epoch++;
	atomic_fetch_add(&r->connects, 1);
	ldbg(r->h, "agent %s: UCX endpoint %" PRIu64, r->h->cfg.agent_url,
	     r->epoch);
	return 0;
}

/* @k's key for the current endpoint (@lock held). Return: 0 or -errno */
static int key_locked(struct maru__remote *r, struct maru__rkey *k)
{
	struct agent_access_req q = {k->hd.region_id, k->hd.offset,
				     k->hd.length, k->hd.auth_token};
	struct maru__rpc_reply rr;
	struct agent_reply rep;
	ucs_status_t st;
	int rc;

	if (k->rkey && k->epoch == r->epoch)
		return 0;
	if (k->rkey)
		ucp_rkey_destroy(k->rkey);
	k->rkey = NULL;
	rc = agent_call(r, AGENT_ACCESS, &q, &rr, &rep);
	if (rc < 0)
		return maru__fail(r->h, rc, "agent %s: ACCESS: %s",
				  r->h->cfg.agent_url, strerror(-rc));
	if (!rep.success || !rep.blob_len || rep.length != k->hd.length) {
		rc = maru__fail(r->h, rep.success ? -EPROTO : -EACCES,
				"agent %s refused region %" PRIu64 ": %.*s",
				r->h->cfg.agent_url, k->hd.region_id,
				(int)rep.error_len,
				rep.error ? rep.error : "bad reply");
		maru__rpc_reply_release(&rr);
		return rc;
	}
	st = ucp_ep_rkey_unpack(r->ep, rep.blob, &k->rkey);
	k->raddr = rep.addr;
	maru__rpc_reply_release(&rr);
	if (st != UCS_OK) {
		k->rkey = NULL;
		return maru__fail(r->h, -EPROTO,
				  "agent %s: region %" PRIu64 "'s key: %s",
				  r->h->cfg.agent_url, k->hd.region_id,
				  ucs_status_string(st));
	}
	k->epoch = r->epoch;
	return 0;
}

int maru__remote_key_new(struct maru__remote *r,
			 const struct maru_region_handle *hd,
			 struct maru__rkey **out)
{
	struct maru__rkey *k = calloc(1, sizeof(*k));
	int rc;

	if (!k)
		return -ENOMEM;
	k->hd = *hd;
	pthread_mutex_lock(&r->lock);
	k->next = r->keys;
	if (r->keys)
		r->keys->pprev = &k->next;
	k->pprev = &r->keys;
	r->keys = k;
	/* the capability is checked now, not at the first transfer */
	rc = connect_locked(r);
	if (rc == 0)
		rc = key_locked(r, k);
	pthread_mutex_unlock(&r->lock);
	if (rc < 0) {
		maru__remote_key_free(r, k);
		return rc;
	}
	*out = k;
	return 0;
}

void maru__remote_key_free(struct maru__remote *r, struct maru__rkey *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&r->lock);
	if (k->rkey)
		ucp_rkey_destroy(k->rkey);
	if (k->pprev) {
		*k->pprev = k->next;
		if (k->next)
			k->next->pprev = k->pprev;
	}
	pthread_mutex_unlock(&r->lock);
	free(k);
}

int maru__remote_xfer(struct maru__remote *r, const struct maru__xfer *x,
		      size_t n, bool put)
{
	uint64_t deadline = maru__now_ns() + (uint64_t)r->timeout_ms * 1000000;
	ucp_request_param_t p = {0};
	ucs_status_t st = UCS_OK, s;
	uint64_t bytes = 0;
	void **reqs;
	size_t i;
	int rc;

	if (!n)
		return 0;
	reqs = calloc(n + 1, sizeof(*reqs));
	if (!reqs)
		return -ENOMEM;
	pthread_mutex_lock(&r->lock);
	rc = connect_locked(r);
	for (i = 0; rc == 0 && i < n; i++) {
		struct maru__rkey *k = x[i].m->remote;

		rc = key_locked(r, k);
		if (rc < 0)
			break;
		if (put)
			reqs[i] = ucp_put_nbx(r->ep, x[i].m->addr + x[i].off,
					      x[i].len, k->raddr + x[i].off,
					      k->rkey, &p);
		else
			reqs[i] = ucp_get_nbx(r->ep, x[i].m->addr + x[i].off,
					      x[i].len, k->raddr + x[i].off,
					      k->rkey, &p);
		bytes += x[i].len;
	}
	/* a put is complete at the target once the flush is */
	if (rc == 0 && put)
		reqs[n] = ucp_ep_flush_nbx(r->ep, &p);
	for (i = 0; i <= n; i++) {
		if (!reqs[i])
			continue;
		s = wait_one(r, reqs[i], deadline);
		if (s != UCS_OK && st == UCS_OK)
			st = s;
	}
	if (st != UCS_OK) {
		rc = maru__fail(
			r->h,
			st == UCS_ERR_TIMED_OUT ? -ETIMEDOUT : -ECONNRESET,
			"agent %s: %s of %zu page(s) failed: %s",
			r->h->cfg.agent_url, put ? "put" : "get", n,
			st == UCS_ERR_TIMED_OUT ? "no answer within timeout_ms"
						: ucs_status_string(st));
		/* whatever is in flight fails with the endpoint; the next
		 * transfer connects again */
		disconnect_locked(r);
	}
	if (rc < 0) {
		atomic_fetch_add(&r->errors, 1);
	} else if (put) {
		atomic_fetch_add(&r->puts, n);
		atomic_fetch_add(&r->put_bytes, bytes);
	} else {
		atomic_fetch_add(&r->gets, n);
		atomic_fetch_add(&r->get_bytes, bytes);
	}
	pthread_mutex_unlock(&r->lock);
	free(reqs);
	return rc;
}

void maru__remote_counters(const struct maru__remote *r,
			   struct maru_remote_stats *s)
{
	memset(s, 0, sizeof(*s));
	if (!r)
		return;
	s->remote = maru__remote_on(r);
	s->put_bytes = atomic_load(&r->put_bytes);
	s->get_bytes = atomic_load(&r->get_bytes);
	s->puts = atomic_load(&r->puts);
	s->gets = atomic_load(&r->gets);
	s->errors = atomic_load(&r->errors);
	s->connects = atomic_load(&r->connects);
}
