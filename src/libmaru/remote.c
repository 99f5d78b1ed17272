/* SPDX-License-Identifier: Apache-2.0 */
/*
 * remote.c - the pool through maru-agent, on a host that cannot map it
 *
 * A handler is remote when its config says so (remote "on"), or when it
 * says "auto" (the default) with an agent configured and the pool turns
 * out not to be mappable here (mapper.c decides at the first region).
 * Then each region's "mapping" is private anonymous memory of the
 * region's size (MAP_NORESERVE: only the pages used take memory)
 * standing in for the pool, where alloc() gives pages to write, plus a
 * second one, the read mirror, where retrieves land; the bytes move
 * between them and the pool through the agent (src/agent/xfer.c):
 *   - a store sends each page as a PUT message; the agent answers ACK
 *     once the bytes are in the pool, and only then does kv.c register
 *     the key;
 *   - a retrieve sends GET; the agent answers DATA with the bytes, which
 *     land in the read mirror; kv.c hands out a view of that copy (not
 *     zero copy) and looks the key up again, so a page evicted and reused
 *     during the read is a miss, never wrong bytes.  A read never lands
 *     in a page alloc() gave out (the two stand-ins), so a late one
 *     cannot spoil a page being written.
 * Everything else (alloc, exists, pin, delete, the index, leases) is
 * maru-server's as for any handler.  Why messages the agent checks and
 * not ucp_put/ucp_get: src/agent/agent.h.
 *
 * The agent: one control connection (rpc.c, REQ lock-step; CURVE with
 * the handler's own certificate and the agent's public key, or
 * maru-server's when the config names none).  HELLO gives the agent's
 * UCX worker address, which one endpoint connects to, and a session id
 * every transfer names; ACCESS grants the session a region for its token
 * (struct maru__grant, asked once per region and session).  When the
 * endpoint fails (the agent died, the network dropped, a transfer timed
 * out) it is closed; the next transfer says HELLO again (ending the old
 * session first) and asks for each grant anew (@epoch).
 *
 * A transfer waits at most the handler's timeout_ms: then the endpoint is
 * closed by force (which fails whatever is in flight) and the call
 * returns -ETIMEDOUT; nothing is registered.  After a failed PUT the
 * session is ended with BYE, which the agent answers only once none of
 * its bytes is still arriving: the pages can then be reused.  If that
 * cannot be done (the agent cannot be reached), the pages are kept out
 * of use (maru__remote_xfer's @unsafe).
 *
 * Context: any thread; @lock serialises everything here (UCX's worker is
 * created UCS_THREAD_MODE_SERIALIZED; its handlers run inside our
 * progress calls, under @lock).  Lock order: the mapper's lock, then
 * this one.
 */
#include "private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>

#include <sodium.h>
#include <ucp/api/ucp.h>

#include "agent_proto.h"

struct maru__grant {
	struct maru__grant *next, **pprev; /* the remote's list */
	struct maru_region_handle hd;
	uint64_t epoch; /* the session that has the grant (0: none) */
};

/* one transfer in flight */
struct op {
	uint8_t *buf; /* the page here */
	size_t len;
	bool put;	/* PUT (answered by ACK), else GET (by DATA) */
	void *send;	/* the send's request (or NULL) */
	bool replied;	/* ACK, or DATA received */
	bool receiving; /* DATA's bytes are arriving (rendezvous) */
	int status;	/* the agent's, or ours */
	uint8_t hdr[AGENT_AM_REQ_MAX];
	size_t hdr_len;
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
	uint8_t session[AGENT_SESSION_LEN];
	bool have_session;
	uint8_t dead[AGENT_SESSION_LEN]; /* a failed session to end at HELLO */
	bool have_dead;
	uint64_t epoch; /* bumped at each new session */
	struct maru__grant *keys;
	int timeout_ms;
	/* the transfers of the call in progress: seq base .. base + n */
	struct op *ops;
	size_t nops;
	uint64_t seq_base, next_seq;
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

/* the transfer @seq names, if it belongs to the call in progress */
static struct op *op_of(struct maru__remote *r, uint64_t seq)
{
	if (!r->ops || seq < r->seq_base || seq - r->seq_base >= r->nops)
		return NULL;
	return &r->ops[seq - r->seq_base];
}

static ucs_status_t on_ack(void *arg, const void *header, size_t hlen,
			   void *data, size_t length,
			   const ucp_am_recv_param_t *param)
{
	struct maru__remote *r = arg;
	struct agent_am_rep rep;
	struct op *o;

	(void)data;
	(void)length;
	(void)param;
	if (agent_am_rep_decode(header, hlen, &rep) < 0)
		return UCS_OK;
	o = op_of(r, rep.seq);
	if (o && o->put && !o->replied) {
		o->status = rep.status;
		o->replied = true;
	}
	return UCS_OK;
}

static void data_received(void *req, ucs_status_t st, size_t len, void *arg)
{
	struct op *o = arg;

	(void)len;
	if (st != UCS_OK && !o->status)
		o->status = -EIO;
	o->receiving = false;
	o->replied = true;
	ucp_request_free(req);
}

static ucs_status_t on_data(void *arg, const void *header, size_t hlen,
			    void *data, size_t length,
			    const ucp_am_recv_param_t *param)
{
	struct maru__remote *r = arg;
	ucp_request_param_t p = {0};
	struct agent_am_rep rep;
	struct op *o;
	void *req;

	if (agent_am_rep_decode(header, hlen, &rep) < 0)
		return UCS_OK;
	o = op_of(r, rep.seq);
	if (!o || o->put || o->replied || o->receiving)
		return UCS_OK; /* late, twice, or not a GET's: dropped */
	if (rep.status < 0 || length != o->len) {
		o->status = rep.status < 0 ? rep.status : -EPROTO;
		o->replied = true;
		return UCS_OK;
	}
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		memcpy(o->buf, data, length);
		o->replied = true;
		return UCS_OK;
	}
	p.op_attr_mask =
		UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	p.cb.recv_am = data_received;
	p.user_data = o;
	o->receiving = true;
	req = ucp_am_recv_data_nbx(r->worker, data, o->buf, length, &p);
	if (req == NULL) {
		o->receiving = false;
		o->replied = true;
	} else if (UCS_PTR_IS_ERR(req)) {
		o->receiving = false;
		o->status = -EIO;
		o->replied = true;
		return UCS_OK; /* (UCX keeps nothing of it) */
	}
	return UCS_INPROGRESS;
}

int maru__remote_new(struct maru_handler *h, struct maru__remote **out)
{
	ucp_worker_params_t wp = {0};
	ucp_am_handler_param_t ah = {0};
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
	/* transfers are numbered from a random start: a reply is matched
	 * by its number, which another peer should not guess */
	if (getrandom(&r->next_seq, sizeof(r->next_seq), 0) !=
	    sizeof(r->next_seq))
		r->next_seq = maru__now_ns();
	r->next_seq = (r->next_seq >> 1) | 1;
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
	r->ctl.peer = "maru-agent";
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
	up.features = UCP_FEATURE_AM;
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
	ah.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
			UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG;
	ah.arg = r;
	ah.id = AGENT_AM_ACK;
	ah.cb = on_ack;
	st = ucp_worker_set_am_recv_handler(r->worker, &ah);
	if (st == UCS_OK) {
		ah.id = AGENT_AM_DATA;
		ah.cb = on_data;
		st = ucp_worker_set_am_recv_handler(r->worker, &ah);
	}
	if (st != UCS_OK) {
		lerr(h, "UCX: the reply handlers: %s", ucs_status_string(st));
		ucp_worker_destroy(r->worker);
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

/* wait for the request @req until @deadline_ns. Return: its status, or
 * UCS_INPROGRESS when it did not end (it is then left to UCX) */
static ucs_status_t wait_req(struct maru__remote *r, void *req,
			     uint64_t deadline)
{
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
		if (maru__now_ns() >= deadline)
			return UCS_INPROGRESS;
	}
	ucp_request_free(req);
	return st;
}

/* close the endpoint and forget the session (@lock held); it is ended
 * at the agent by the next HELLO */
static void disconnect_locked(struct maru__remote *r)
{
	void *req = force_close(r);

	if (req)
		(void)wait_req(r, req, maru__now_ns() + 1000000000ull);
	if (r->have_session) {
		memcpy(r->dead, r->session, sizeof(r->dead));
		r->have_dead = true;
		r->have_session = false;
	}
}

void maru__remote_quiesce(struct maru__remote *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	disconnect_locked(r);
	pthread_mutex_unlock(&r->lock);
}

void maru__remote_free(struct maru__remote *r)
{
	struct maru__grant *k;

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
		      const struct agent_access_req *q, const uint8_t *sid,
		      struct maru__rpc_reply *rr, struct agent_reply *rep)
{
	struct buf b = {0};
	struct mp_wr w = {&b, 0};
	struct maru__msg m;
	int rc;

	maru__msg_init(&m, type);
	if (q) {
		agent_encode_access(&w, q);
	} else if (sid) {
		/* HELLO: the session to end first; BYE: the one to end */
		mp_put_map(&w, 1);
		if (type == AGENT_HELLO)
			mp_put_key(&w, "supersede");
		else
			mp_put_key(&w, "session");
		mp_put_bin(&w, sid, AGENT_SESSION_LEN);
	} else {
		mp_put_map(&w, 0);
	}
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

/* an endpoint and a session at the agent (@lock held). Return: 0/-errno */
static int connect_locked(struct maru__remote *r)
{
	ucp_ep_params_t ep = {0};
	struct maru__rpc_reply rr;
	struct agent_reply rep;
	ucs_status_t st;
	int rc;

	if (r->ep && r->have_session && !atomic_load(&r->ep_failed))
		return 0;
	if (r->ep || r->have_session) {
		lwarn(r->h, "agent %s: the UCX endpoint failed; reconnecting",
		      r->h->cfg.agent_url);
		disconnect_locked(r);
	}
	rc = agent_call(r, AGENT_HELLO, NULL, r->have_dead ? r->dead : NULL,
			&rr, &rep);
	if (rc < 0)
		return maru__fail(r->h, rc, "agent %s: HELLO: %s",
				  r->h->cfg.agent_url, strerror(-rc));
	if (!rep.success || !rep.blob_len || !rep.session) {
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
	memcpy(r->session, rep.session, sizeof(r->session));
	maru__rpc_reply_release(&rr);
	if (st != UCS_OK) {
		r->ep = NULL;
		return maru__fail(r->h, -EHOSTUNREACH,
				  "agent %s: UCX endpoint: %s",
				  r->h->cfg.agent_url, ucs_status_string(st));
	}
	r->have_session = true;
	r->have_dead = false; /* the agent ended it before answering */
	r->epoch++;
	atomic_fetch_add(&r->connects, 1);
	ldbg(r->h, "agent %s: UCX endpoint, session %" PRIu64,
	     r->h->cfg.agent_url, r->epoch);
	return 0;
}

/* @k granted to the current session (@lock held). Return: 0 or -errno */
static int grant_locked(struct maru__remote *r, struct maru__grant *k)
{
	struct agent_access_req q = {k->hd.region_id, k->hd.offset,
				     k->hd.length, k->hd.auth_token};
	struct maru__rpc_reply rr;
	struct agent_reply rep;
	int rc;

	if (k->epoch == r->epoch)
		return 0;
	rc = agent_call(r, AGENT_ACCESS, &q, NULL, &rr, &rep);
	if (rc < 0)
		return maru__fail(r->h, rc, "agent %s: ACCESS: %s",
				  r->h->cfg.agent_url, strerror(-rc));
	if (!rep.success || rep.length != k->hd.length) {
		rc = maru__fail(r->h, rep.success ? -EPROTO : -EACCES,
				"agent %s refused region %" PRIu64 ": %.*s",
				r->h->cfg.agent_url, k->hd.region_id,
				(int)rep.error_len,
				rep.error ? rep.error : "bad reply");
		maru__rpc_reply_release(&rr);
		return rc;
	}
	maru__rpc_reply_release(&rr);
	k->epoch = r->epoch;
	return 0;
}

int maru__remote_grant_new(struct maru__remote *r,
			   const struct maru_region_handle *hd,
			   struct maru__grant **out)
{
	struct maru__grant *k = calloc(1, sizeof(*k));
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
		rc = grant_locked(r, k);
	pthread_mutex_unlock(&r->lock);
	if (rc < 0) {
		maru__remote_grant_free(r, k);
		return rc;
	}
	*out = k;
	return 0;
}

void maru__remote_grant_free(struct maru__remote *r, struct maru__grant *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&r->lock);
	if (k->pprev) {
		*k->pprev = k->next;
		if (k->next)
			k->next->pprev = k->pprev;
	}
	pthread_mutex_unlock(&r->lock);
	free(k);
}

static void sent(void *req, ucs_status_t st, void *arg)
{
	struct op *o = arg;

	if (st != UCS_OK && !o->status) {
		o->status = -ECONNRESET;
		o->replied = true;
	}
	(void)req;
}

/* are all of @ops done? (their sends complete, their replies in) */
static bool all_done(struct op *ops, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (ops[i].send &&
		    ucp_request_check_status(ops[i].send) != UCS_INPROGRESS) {
			ucp_request_free(ops[i].send);
			ops[i].send = NULL;
		}
		if (ops[i].send || !ops[i].replied || ops[i].receiving)
			return false;
	}
	return true;
}

/*
 * End the session after a failed PUT (@lock held): BYE, which the agent
 * answers once none of the session's bytes is still arriving.  Return:
 * true when that is known.
 */
static bool bye_locked(struct maru__remote *r)
{
	struct maru__rpc_reply rr;
	struct agent_reply rep;
	bool ok;

	if (!r->have_session && !r->have_dead)
		return true;
	if (agent_call(r, AGENT_BYE, NULL, r->have_dead ? r->dead : r->session,
		       &rr, &rep) < 0)
		return false;
	ok = rep.success;
	maru__rpc_reply_release(&rr);
	if (ok) {
		r->have_session = r->have_dead = false;
		if (r->ep)
			atomic_store(&r->ep_failed, true); /* a new HELLO */
	}
	return ok;
}

int maru__remote_xfer(struct maru__remote *r, const struct maru__xfer *x,
		      size_t n, bool put, bool *unsafe)
{
	uint64_t deadline = maru__now_ns() + (uint64_t)r->timeout_ms * 1000000;
	ucp_request_param_t p = {0};
	struct agent_am_req q;
	uint64_t bytes = 0;
	struct op *ops;
	bool late = false;
	size_t i;
	int rc, bad = 0;

	*unsafe = false;
	if (!n)
		return 0;
	ops = calloc(n, sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	pthread_mutex_lock(&r->lock);
	rc = connect_locked(r);
	for (i = 0; rc == 0 && i < n; i++)
		rc = grant_locked(r, x[i].m->remote);
	if (rc < 0)
		goto out_unlock;
	r->ops = ops;
	r->nops = n;
	r->seq_base = r->next_seq;
	r->next_seq += n;
	p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
			 UCP_OP_ATTR_FIELD_USER_DATA;
	p.flags = UCP_AM_SEND_FLAG_REPLY;
	p.cb.send = sent;
	for (i = 0; i < n; i++) {
		struct op *o = &ops[i];
		void *req;

		o->buf = x[i].buf;
		o->len = x[i].len;
		o->put = put;
		q = (struct agent_am_req){.region_id = x[i].m->handle.region_id,
					  .offset = x[i].off,
					  .length = x[i].len,
					  .seq = r->seq_base + i};
		memcpy(q.session, r->session, sizeof(q.session));
		o->hdr_len = agent_am_req_encode(&q, o->hdr);
		p.user_data = o;
		req = ucp_am_send_nbx(r->ep, put ? AGENT_AM_PUT : AGENT_AM_GET,
				      o->hdr, o->hdr_len, put ? o->buf : NULL,
				      put ? o->len : 0, &p);
		if (UCS_PTR_IS_ERR(req)) {
			o->status = -ECONNRESET;
			o->replied = true;
		} else {
			o->send = req;
		}
		bytes += x[i].len;
	}
	/* every send complete and every reply in, or the deadline */
	for (;;) {
		ucp_worker_progress(r->worker);
		if (all_done(ops, n))
			break;
		if (maru__now_ns() >= deadline) {
			late = true;
			break;
		}
		if (atomic_load(&r->ep_failed)) {
			/* the agent is gone: what is in flight fails now */
			late = !all_done(ops, n);
			if (late)
				bad = -ECONNRESET;
			break;
		}
	}
	if (late) {
		/* fail whatever is in flight with the endpoint, and wait a
		 * little for UCX to let go of our buffers */
		void *req = force_close(r);

		if (req)
			(void)wait_req(r, req, maru__now_ns() + 1000000000ull);
		deadline = maru__now_ns() + 2000000000ull;
		while (!all_done(ops, n) && maru__now_ns() < deadline)
			ucp_worker_progress(r->worker);
	}
	for (i = 0; i < n; i++)
		if (ops[i].status < 0 && !bad)
			bad = ops[i].status;
	if (late || bad) {
		rc = maru__fail(r->h,
				bad == -ECONNRESET ? -ECONNRESET
				: late		   ? -ETIMEDOUT
				: bad == -EACCES   ? -EACCES
						   : -EIO,
				"agent %s: %s of %zu page(s) failed: %s",
				r->h->cfg.agent_url, put ? "store" : "read", n,
				bad    ? strerror(-bad)
				: late ? "no answer within timeout_ms"
				       : "?");
		disconnect_locked(r);
		/* no byte of a failed store may land later: the session ends
		 * first (or the pages stay out of use) */
		if (put && !bye_locked(r))
			*unsafe = true;
	}
	r->ops = NULL;
	r->nops = 0;
	if (!all_done(ops, n)) {
		/* UCX still holds some of them: leave them to it */
		lwarn(r->h, "agent %s: a transfer did not end: abandoned",
		      r->h->cfg.agent_url);
		ops = NULL;
		*unsafe = *unsafe || put;
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
out_unlock:
	pthread_mutex_unlock(&r->lock);
	free(ops);
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

int maru__agent_stats(const struct maru_handler *h, uint64_t st[])
{
	struct maru__rpc_reply rr;
	struct maru__curve curve;
	struct agent_reply rep;
	struct maru__rpc rpc;
	struct maru__msg m;
	char why[512];
	int rc;

	rc = maru__rpc_open(&rpc, h, h->cfg.agent_url, h->cfg.timeout_ms, false,
			    1);
	if (rc < 0)
		return rc;
	rpc.once = true;
	rpc.peer = "maru-agent";
	if (h->curve) {
		curve = *h->curve;
		if (h->cfg.agent_curve_key &&
		    zcurve_load_public(h->cfg.agent_curve_key, curve.server,
				       why, sizeof(why)) < 0) {
			rc = maru__fail(h, -EINVAL, "agent CURVE key: %s", why);
			goto out;
		}
		rpc.curve = &curve;
	}
	maru__msg_init(&m, AGENT_STATS);
	rc = maru__enc_raw(&m, "\x80", 1); /* {} */
	if (rc == 0)
		rc = maru__rpc_call(&rpc, &m, &rr);
	maru__msg_release(&m);
	if (rc < 0) {
		/* (rpc.c said why, naming the address, unless it had no cause)
		 */
		snprintf(why, sizeof(why), "%s", maru__fail_text(h));
		rc = maru__fail(h, rc, "%s", why[0] ? why : strerror(-rc));
		goto out;
	}
	if (agent_decode_reply(rr.payload, rr.len, &rep) < 0 || !rep.success ||
	    !rep.has_stats)
		rc = maru__fail(h, -EPROTO, "agent %s: not a STATS reply",
				h->cfg.agent_url);
	else
		memcpy(st, rep.stats, sizeof(rep.stats));
	maru__rpc_reply_release(&rr);
out:
	sodium_memzero(&curve, sizeof(curve));
	maru__rpc_close(&rpc);
	return rc;
}
