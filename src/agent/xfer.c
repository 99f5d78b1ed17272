/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xfer.c - sessions and transfers of maru-agent (agent.h)
 *
 * A session belongs to one control connection: HELLO makes it (a random
 * 16-byte id the client learns over the authenticated channel), ACCESS
 * grants it regions (after lend.c had the token checked), BYE or the
 * connection's end ends it.  Every transfer is a UCX active message whose
 * header names the session, a region and a range:
 *
 *   PUT   accepted when the session is alive, the region granted to it and
 *         still lent, and [offset, offset + length) inside the region with
 *         length the size of the data; the bytes go straight into the
 *         mapping (rendezvous: ucp_am_recv_data_nbx receives into it, with
 *         the region's registration; eager: a copy); ACK once they are
 *         there.
 *   GET   the same checks; DATA replies with the range of the mapping as
 *         its data (rendezvous for large ranges: zero copy on RDMA).
 *   A refused transfer is answered with the cause as -errno (-EACCES: no
 *   such session or grant; -ERANGE: outside the region; -EPROTO: a bad
 *   header), its data dropped.
 *
 * In flight: a PUT whose bytes are still arriving counts in its session;
 * session_end() waits for them, so that after a BYE answered success no
 * byte of that session reaches the pool any more.  A session stays in the
 * list, dead, until its connection gave it up, no PUT of it is in flight
 * and nobody waits on it (reap_locked).
 *
 * A revoked region's mapping stays in place (private memory, lend.c) for
 * the quarantine, longer than any transfer, so a transfer accepted just
 * before never writes or reads unmapped memory.
 *
 * Context: the handlers run in the progress thread (inside
 * ucp_worker_progress); sessions are made and ended by control threads.
 * @lock guards the session list, each session and the region table.
 */
#include "agent.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

struct grant {
	uint64_t rid, token;
};

struct agent_session {
	struct agent_session *next; /* the agent's list, until freed */
	uint8_t id[AGENT_SESSION_LEN];
	struct grant *grants; /* the regions granted, with their token */
	size_t n, cap;
	int inflight; /* PUTs whose bytes are arriving */
	int waiters;  /* threads in session_end() */
	bool dead;    /* ended: its transfers are refused */
	bool orphan;  /* its connection gave it up */
};

/* what a reply needs until UCX is done with it */
struct reply {
	struct agent *a;
	struct agent_session *s;   /* a PUT in flight in it, or NULL */
	struct agent_region *held; /* the region the transfer uses */
	ucp_ep_h ep;
	uint64_t seq;
	size_t len;
	uint8_t hdr[AGENT_AM_REP_MAX];
	size_t hdr_len;
};

/* the session named @id, ended or not (@lock held) */
static struct agent_session *find_session_locked(struct agent *a,
						 const uint8_t *id)
{
	struct agent_session *s;

	for (s = a->sessions; s; s = s->next)
		if (!memcmp(s->id, id, AGENT_SESSION_LEN))
			return s;
	return NULL;
}

/* free @s if nobody needs it any more (@lock held). Return: freed */
static bool reap_locked(struct agent *a, struct agent_session *s)
{
	struct agent_session **pp;

	if (!s->orphan || s->inflight || s->waiters)
		return false;
	for (pp = &a->sessions; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	free(s->grants);
	free(s);
	return true;
}

/* the token region @rid was granted to @s with, or NULL */
static const struct grant *granted(const struct agent_session *s, uint64_t rid)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		if (s->grants[i].rid == rid)
			return &s->grants[i];
	return NULL;
}

struct agent_session *session_new(struct agent *a, const uint8_t *supersede)
{
	struct agent_session *s = calloc(1, sizeof(*s));
	size_t got = 0;
	ssize_t k;

	if (!s)
		return NULL;
	while (got < sizeof(s->id)) {
		k = getrandom(s->id + got, sizeof(s->id) - got, 0);
		if (k < 0) {
			free(s);
			return NULL;
		}
		got += (size_t)k;
	}
	/* the client gave up on that one: refused from now on, without
	 * waiting (a client whose store failed keeps those pages out of use
	 * until a BYE said none of its bytes is in flight) */
	if (supersede)
		(void)session_end_id(a, supersede, 0);
	pthread_mutex_lock(&a->lock);
	s->next = a->sessions;
	a->sessions = s;
	pthread_mutex_unlock(&a->lock);
	return s;
}

const uint8_t *session_id(const struct agent_session *s)
{
	return s->id;
}

int session_grant(struct agent *a, struct agent_session *s, uint64_t rid,
		  uint64_t token)
{
	struct grant *v, *g;
	int rc = 0;

	pthread_mutex_lock(&a->lock);
	g = (struct grant *)granted(s, rid);
	if (g) {
		g->token = token; /* (the latest one checked) */
		goto out;
	}
	if (s->n == s->cap) {
		v = realloc(s->grants, (s->cap ? s->cap * 2 : 8) * sizeof(*v));
		if (!v) {
			rc = -ENOMEM;
			goto out;
		}
		s->grants = v;
		s->cap = s->cap ? s->cap * 2 : 8;
	}
	s->grants[s->n++] = (struct grant){rid, token};
out:
	pthread_mutex_unlock(&a->lock);
	return rc;
}

/* mark @s dead and wait for its PUTs in flight (@lock held, dropped
 * while waiting; @s stays, counted in waiters) */
static int end_locked(struct agent *a, struct agent_session *s, int wait_ms)
{
	const struct timespec step = {0, 1000000};
	int rc;

	s->dead = true;
	s->waiters++;
	while (s->inflight && wait_ms-- > 0) {
		pthread_mutex_unlock(&a->lock);
		nanosleep(&step, NULL);
		pthread_mutex_lock(&a->lock);
	}
	rc = s->inflight ? -EBUSY : 0;
	s->waiters--;
	reap_locked(a, s);
	return rc;
}

int session_end(struct agent *a, struct agent_session *s, int wait_ms)
{
	int rc;

	pthread_mutex_lock(&a->lock);
	rc = end_locked(a, s, wait_ms);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

int session_end_id(struct agent *a, const uint8_t *id, int wait_ms)
{
	struct agent_session *s;
	int rc = 0;

	pthread_mutex_lock(&a->lock);
	s = find_session_locked(a, id);
	if (s)
		rc = end_locked(a, s, wait_ms);
	pthread_mutex_unlock(&a->lock);
	return rc;
}

void session_free(struct agent *a, struct agent_session *s)
{
	pthread_mutex_lock(&a->lock);
	s->dead = true;
	s->orphan = true;
	reap_locked(a, s);
	pthread_mutex_unlock(&a->lock);
}

static void reply_free(struct reply *r)
{
	if (r->held)
		lend_release(r->a, r->held);
	free(r);
}

static void reply_done(void *req, ucs_status_t st, void *arg)
{
	(void)st;
	reply_free(arg);
	ucp_request_free(req);
}

/* send @r (header, and @data of r->len bytes, or none) as @id; frees @r */
static void send_reply(struct agent *a, struct reply *r, unsigned id,
		       const void *data, ucp_mem_h memh)
{
	ucp_request_param_t p = {0};
	void *req;

	p.op_attr_mask =
		UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	p.cb.send = reply_done;
	p.user_data = r;
	if (memh) {
		p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
		p.memh = memh;
	}
	req = ucp_am_send_nbx(r->ep, id, r->hdr, r->hdr_len, data,
			      data ? r->len : 0, &p);
	if (req == NULL) {
		reply_free(r);
	} else if (UCS_PTR_IS_ERR(req)) {
		log_dbg("reply: %s", ucs_status_string(UCS_PTR_STATUS(req)));
		reply_free(r);
	}
	(void)a;
}

static struct reply *new_reply(struct agent *a, ucp_ep_h ep, uint64_t seq,
			       int status)
{
	struct reply *r = calloc(1, sizeof(*r));
	struct agent_am_rep h = {seq, status};

	if (!r)
		return NULL;
	r->a = a;
	r->ep = ep;
	r->seq = seq;
	r->hdr_len = agent_am_rep_encode(&h, r->hdr);
	return r;
}

static void refuse(struct agent *a, ucp_ep_h ep, uint64_t seq, int status,
		   unsigned id)
{
	struct reply *r;

	agent_count(a, AGENT_ST_REFUSED_XFERS, 1);
	if (!ep)
		return;
	r = new_reply(a, ep, seq, status);
	if (r)
		send_reply(a, r, id, NULL, NULL);
}

/*
 * The checks every transfer passes (@lock held): its session alive, the
 * region granted to it and still lent with the token it was granted for,
 * the range inside it.  Return: 0 with *@dst, *@memh and the region held
 * (*@held: lend_release it), or -errno.
 */
static int check_locked(struct agent *a, const struct agent_am_req *q,
			struct agent_session **sp, uint8_t **dst,
			ucp_mem_h *memh, struct agent_region **held)
{
	struct agent_session *s = find_session_locked(a, q->session);
	const struct grant *g = s && !s->dead ? granted(s, q->region_id) : NULL;
	uint8_t *addr;
	uint64_t len;

	if (!g)
		return -EACCES;
	*held = lend_hold_locked(a, q->region_id, g->token, &addr, &len, memh);
	if (!*held)
		return -EACCES; /* revoked */
	if (q->offset > len || q->length > len - q->offset) {
		lend_release_locked(a, *held);
		*held = NULL;
		return -ERANGE;
	}
	*sp = s;
	*dst = addr + q->offset;
	return 0;
}

static void put_landed(struct agent *a, struct reply *r)
{
	struct agent_session *s = r->s;

	pthread_mutex_lock(&a->lock);
	s->inflight--;
	reap_locked(a, s);
	pthread_mutex_unlock(&a->lock);
	r->s = NULL;
	/* the bytes are in: the region is no longer used by this PUT */
	if (r->held) {
		lend_release(a, r->held);
		r->held = NULL;
	}
	agent_count(a, AGENT_ST_PUTS, 1);
	agent_count(a, AGENT_ST_PUT_BYTES, (int64_t)r->len);
	send_reply(a, r, AGENT_AM_ACK, NULL, NULL);
}

static void put_received(void *req, ucs_status_t st, size_t len, void *arg)
{
	struct reply *r = arg;
	struct agent_am_rep h = {r->seq, st == UCS_OK ? 0 : -EIO};

	(void)len;
	ucp_request_free(req);
	r->hdr_len = agent_am_rep_encode(&h, r->hdr);
	put_landed(r->a, r);
}

/* the sender's endpoint, to answer on (NULL: it asked for no answer) */
static ucp_ep_h reply_ep_of(const ucp_am_recv_param_t *param)
{
	return (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
		       ? param->reply_ep
		       : NULL;
}

static ucs_status_t on_put(void *arg, const void *header, size_t hlen,
			   void *data, size_t length,
			   const ucp_am_recv_param_t *param)
{
	struct agent *a = arg;
	ucp_ep_h ep = reply_ep_of(param);
	bool rndv = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV;
	ucp_request_param_t p = {0};
	struct agent_region *held = NULL;
	struct agent_session *s;
	struct agent_am_req q;
	struct reply *r;
	ucp_mem_h memh;
	uint8_t *dst;
	void *req;
	int rc;

	if (agent_am_req_decode(header, hlen, &q) < 0) {
		refuse(a, ep, 0, -EPROTO, AGENT_AM_ACK);
		return UCS_OK;
	}
	if (q.length != length) {
		refuse(a, ep, q.seq, -EPROTO, AGENT_AM_ACK);
		return UCS_OK;
	}
	r = ep ? new_reply(a, ep, q.seq, 0) : NULL;
	if (!r)
		return UCS_OK; /* nobody to tell: dropped */
	r->len = length;
	pthread_mutex_lock(&a->lock);
	rc = check_locked(a, &q, &s, &dst, &memh, &held);
	if (rc == 0) {
		s->inflight++;
		r->s = s;
		r->held = held;
	}
	pthread_mutex_unlock(&a->lock);
	if (rc < 0) {
		free(r);
		refuse(a, ep, q.seq, rc, AGENT_AM_ACK);
		return UCS_OK;
	}
	if (!rndv) {
		memcpy(dst, data, length);
		put_landed(a, r);
		return UCS_OK;
	}
	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
			 UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
	p.cb.recv_am = put_received;
	p.user_data = r;
	p.memh = memh;
	req = ucp_am_recv_data_nbx(a->worker, data, dst, length, &p);
	if (req == NULL) {
		put_landed(a, r);
	} else if (UCS_PTR_IS_ERR(req)) {
		struct agent_am_rep h = {q.seq, -EIO};

		r->hdr_len = agent_am_rep_encode(&h, r->hdr);
		put_landed(a, r);
		return UCS_OK; /* (UCX keeps nothing of it) */
	}
	return UCS_INPROGRESS;
}

static ucs_status_t on_get(void *arg, const void *header, size_t hlen,
			   void *data, size_t length,
			   const ucp_am_recv_param_t *param)
{
	struct agent *a = arg;
	ucp_ep_h ep = reply_ep_of(param);
	struct agent_region *held = NULL;
	struct agent_session *s;
	struct agent_am_req q;
	struct reply *r;
	ucp_mem_h memh;
	uint8_t *src;
	int rc;

	(void)data;
	if (!ep)
		return UCS_OK;
	if (agent_am_req_decode(header, hlen, &q) < 0 || length) {
		refuse(a, ep, 0, -EPROTO, AGENT_AM_DATA);
		return UCS_OK;
	}
	pthread_mutex_lock(&a->lock);
	rc = check_locked(a, &q, &s, &src, &memh, &held);
	pthread_mutex_unlock(&a->lock);
	if (rc < 0) {
		refuse(a, ep, q.seq, rc, AGENT_AM_DATA);
		return UCS_OK;
	}
	r = new_reply(a, ep, q.seq, 0);
	if (!r) {
		lend_release(a, held);
		return UCS_OK;
	}
	r->len = q.length;
	r->held = held; /* until UCX is done sending from it */
	agent_count(a, AGENT_ST_GETS, 1);
	agent_count(a, AGENT_ST_GET_BYTES, (int64_t)q.length);
	send_reply(a, r, AGENT_AM_DATA, src, NULL);
	return UCS_OK;
}

int xfer_init(struct agent *a)
{
	ucp_am_handler_param_t h = {0};
	ucs_status_t st;

	h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
		       UCP_AM_HANDLER_PARAM_FIELD_CB |
		       UCP_AM_HANDLER_PARAM_FIELD_ARG;
	h.arg = a;
	h.id = AGENT_AM_PUT;
	h.cb = on_put;
	st = ucp_worker_set_am_recv_handler(a->worker, &h);
	if (st == UCS_OK) {
		h.id = AGENT_AM_GET;
		h.cb = on_get;
		st = ucp_worker_set_am_recv_handler(a->worker, &h);
	}
	if (st != UCS_OK) {
		log_err("UCX: setting the transfer handlers: %s",
			ucs_status_string(st));
		return -EIO;
	}
	return 0;
}
