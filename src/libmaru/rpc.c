/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc.c - the metadata-server client: REQ lock-step or DEALER pipelined
 *
 * Wire: metadata-protocol.md §1-2.  Every request is one body frame (16-byte
 * big-endian header + msgpack payload); the reply is matched by the header's
 * sequence number.
 *
 * Lock-step (use_async_rpc=false): one REQ socket behind @lock.  A request
 * that gets no reply within timeout_ms closes the socket (a REQ socket is
 * stuck until it receives) and the next call opens a fresh one; the late
 * reply to the old identity is dropped by the server's ROUTER.  Unlike
 * upstream's RpcClient this is safe to call from many threads (they queue).
 *
 * Pipelined (use_async_rpc=true): one DEALER socket shared by every thread,
 * up to max_inflight requests in flight, replies in any order.  There is no
 * I/O thread of our own (ZeroMQ already has one), because a thread hop on
 * the critical path would cost a cross-core wake-up (~20 µs on these VMs)
 * per request.  Instead, "leader/followers":
 *   - @lock guards the socket, the slots and the sequence counter; a ZeroMQ
 *     socket is only ever touched with @lock held (it is not thread-safe).
 *   - A caller sends under @lock, then waits for its slot.  If nobody is
 *     reading, it becomes the leader: it drops @lock and poll(2)s the
 *     socket's ZMQ_FD (plus @wakefd), then retakes @lock and drains every
 *     reply that is ready into its slot, signalling the owners.  Others wait
 *     on their slot's condition variable.  When the leader has its own reply
 *     it hands leadership to one waiting follower.
 *   - Invariant that makes ZMQ_FD (edge-like) safe: @lock is never released
 *     after touching the socket without first draining until ZMQ_EVENTS
 *     shows no POLLIN.  A non-leader that drains a reply while a leader
 *     polls writes @wakefd so the leader rechecks.
 * So a lone caller does send + poll + recv in its own thread, exactly like
 * a bare REQ round trip, and many callers share one socket with no extra
 * thread.  A reply that arrives after its caller timed out finds no slot
 * with that sequence and is dropped.
 *
 * A connection may be watched (maru__rpc_set_monitor): every socket it
 * opens gets a ZeroMQ socket monitor feeding fence.c, which is how a dropped
 * connection to the server is noticed before the next write.
 *
 * Context: maru__rpc_call() from any thread; open/close are not concurrent
 * with calls.
 */
#include "private.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "mds_proto.h"

struct maru__rpc_slot {
	uint32_t seq;	 /* of the request in flight */
	bool busy;	 /* assigned to a caller */
	bool done;	 /* @reply holds its reply */
	bool waiting;	 /* the caller sleeps on @cv */
	zmq_msg_t reply; /* owns when @done */
	pthread_cond_t cv;
};

static int cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	int rc;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	rc = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return -rc;
}

static void abstime(uint64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

/* milliseconds until @deadline, rounded up so a poll never spins early */
static int ms_left(uint64_t deadline)
{
	uint64_t now = maru__now_ns();

	if (now >= deadline)
		return 0;
	return (int)((deadline - now + 999999) / 1000000);
}

/* close a socket of @r, stopping its monitor first (@lock held) */
static void close_socket(struct maru__rpc *r, void *s)
{
	if (r->mon)
		maru__monitor_detach(r->mon, s);
	zmq_close(s);
}

static void *open_socket(struct maru__rpc *r)
{
	uint8_t ident[8];
	int zero = 0;
	void *s;

	s = zmq_socket(r->zctx, r->async ? ZMQ_DEALER : ZMQ_REQ);
	if (!s)
		return NULL;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	if (r->async) {
		/* upstream's DEALER uses 8 random bytes as its identity */
		if (getrandom(ident, sizeof(ident), 0) == sizeof(ident)) {
			ident[0] |= 1; /* a leading 0 byte is reserved */
			zmq_setsockopt(s, ZMQ_ROUTING_ID, ident, sizeof(ident));
		}
	}
	if (r->mon)
		maru__monitor_attach(r->mon, r->zctx, s);
	if (zmq_connect(s, r->url) < 0) {
		int e = errno;

		close_socket(r, s);
		errno = e;
		return NULL;
	}
	return s;
}

void maru__rpc_set_monitor(struct maru__rpc *r, struct maru__monitor *mon)
{
	pthread_mutex_lock(&r->lock);
	if (r->sock && r->mon)
		maru__monitor_detach(r->mon, r->sock);
	r->mon = mon;
	if (r->sock && mon)
		maru__monitor_attach(mon, r->zctx, r->sock);
	pthread_mutex_unlock(&r->lock);
}

int maru__rpc_open(struct maru__rpc *r, const struct maru_handler *h,
		   void *zctx, const char *url, int timeout_ms, bool async,
		   int max_inflight)
{
	size_t sz = sizeof(r->zfd);
	int i, rc;

	memset(r, 0, sizeof(*r));
	r->h = h;
	r->zctx = zctx;
	r->timeout_ms = timeout_ms;
	r->async = async;
	r->max_inflight = max_inflight > 0 ? max_inflight : 1;
	r->next_seq = 1;
	r->wakefd = -1;
	r->url = strdup(url);
	if (!r->url)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	rc = cond_init_mono(&r->space_cv);
	if (rc < 0)
		goto out_url;
	r->sock = open_socket(r);
	if (!r->sock) {
		rc = -errno;
		lerr(h, "%s: cannot open socket: %s", url, zmq_strerror(errno));
		goto out_cv;
	}
	if (!async)
		return 0;

	rc = -ENOMEM;
	r->slots = calloc((size_t)r->max_inflight, sizeof(*r->slots));
	r->free_slots = calloc((size_t)r->max_inflight, sizeof(int));
	if (!r->slots || !r->free_slots)
		goto out_sock;
	for (i = 0; i < r->max_inflight; i++) {
		cond_init_mono(&r->slots[i].cv);
		/* pop order 0, 1, 2 ... */
		r->free_slots[i] = r->max_inflight - 1 - i;
	}
	r->nfree = r->max_inflight;
	if (zmq_getsockopt(r->sock, ZMQ_FD, &r->zfd, &sz) < 0) {
		rc = -errno;
		goto out_slots;
	}
	r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->wakefd < 0) {
		rc = -errno;
		goto out_slots;
	}
	return 0;

out_slots:
	for (i = 0; i < r->max_inflight; i++)
		pthread_cond_destroy(&r->slots[i].cv);
out_sock:
	free(r->slots);
	free(r->free_slots);
	zmq_close(r->sock);
out_cv:
	pthread_cond_destroy(&r->space_cv);
out_url:
	pthread_mutex_destroy(&r->lock);
	free(r->url);
	r->url = NULL;
	return rc;
}

void maru__rpc_close(struct maru__rpc *r)
{
	int i;

	if (!r->url)
		return;
	if (r->sock)
		close_socket(r, r->sock);
	r->sock = NULL;
	if (r->slots) {
		for (i = 0; i < r->max_inflight; i++) {
			if (r->slots[i].done)
				zmq_msg_close(&r->slots[i].reply);
			pthread_cond_destroy(&r->slots[i].cv);
		}
	}
	free(r->slots);
	free(r->free_slots);
	if (r->wakefd >= 0)
		close(r->wakefd);
	pthread_cond_destroy(&r->space_cv);
	pthread_mutex_destroy(&r->lock);
	free(r->url);
	r->url = NULL;
}

void maru__rpc_reply_release(struct maru__rpc_reply *rep)
{
	zmq_msg_close(&rep->msg);
	rep->payload = NULL;
	rep->len = 0;
}

/* point @rep at the payload of its frame; -EPROTO for a bad header */
static int reply_parse(struct maru__rpc_reply *rep, uint32_t *seq)
{
	const uint8_t *d = zmq_msg_data(&rep->msg);
	size_t n = zmq_msg_size(&rep->msg);
	struct mds_hdr hdr;

	if (mds_hdr_decode(d, n, &hdr) < 0)
		return -EPROTO;
	rep->payload = d + MDS_HDR_SIZE;
	rep->len = hdr.payload_len;
	if (seq)
		*seq = hdr.sequence;
	return 0;
}

static uint32_t take_seq(struct maru__rpc *r)
{
	uint32_t s = r->next_seq++;

	/* 0 is what a server sends when it could not parse the request */
	if (s == 0)
		s = r->next_seq++;
	return s;
}

/* ------------------------------------------------------------------------ */
/* Lock-step (REQ)                                                          */

static void req_reset(struct maru__rpc *r)
{
	if (r->sock)
		close_socket(r, r->sock);
	r->sock = NULL;
}

static int call_sync(struct maru__rpc *r, struct maru__msg *m,
		     struct maru__rpc_reply *out)
{
	uint64_t deadline =
		maru__now_ns() +
		(uint64_t)(r->timeout_ms > 0 ? r->timeout_ms : 0) * 1000000ull;
	zmq_pollitem_t pi;
	uint32_t seq, rseq;
	int rc, n;

	pthread_mutex_lock(&r->lock);
	if (!r->sock) {
		r->sock = open_socket(r);
		if (!r->sock) {
			rc = -errno;
			goto out_unlock;
		}
	}
	seq = take_seq(r);
	mds_hdr_put(m->data, m->type, 0, seq,
		    (uint32_t)(m->len - MDS_HDR_SIZE));
	for (;;) {
		if (zmq_send(r->sock, m->data, m->len, ZMQ_DONTWAIT) >= 0)
			break;
		if (errno != EAGAIN) {
			rc = -errno;
			req_reset(r);
			goto out_unlock;
		}
		pi = (zmq_pollitem_t){.socket = r->sock, .events = ZMQ_POLLOUT};
		if (zmq_poll(&pi, 1, ms_left(deadline)) <= 0) {
			rc = -ETIMEDOUT;
			req_reset(r);
			goto out_unlock;
		}
	}
	for (;;) {
		pi = (zmq_pollitem_t){.socket = r->sock, .events = ZMQ_POLLIN};
		n = zmq_poll(&pi, 1, ms_left(deadline));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -ETIMEDOUT;
			req_reset(r);
			goto out_unlock;
		}
		break;
	}
	zmq_msg_init(&out->msg);
	/* REQ strips the delimiter; keep the last frame if there are more */
	for (;;) {
		if (zmq_msg_recv(&out->msg, r->sock, ZMQ_DONTWAIT) < 0) {
			rc = -errno;
			zmq_msg_close(&out->msg);
			req_reset(r);
			goto out_unlock;
		}
		if (!zmq_msg_more(&out->msg))
			break;
	}
	pthread_mutex_unlock(&r->lock);
	rc = reply_parse(out, &rseq);
	if (rc == 0 && rseq != seq && rseq != 0)
		rc = -EPROTO;
	if (rc < 0)
		zmq_msg_close(&out->msg);
	return rc;

out_unlock:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Pipelined (DEALER)                                                       */

/* route one received body frame to its slot; drops what matches nothing */
static bool dispatch(struct maru__rpc *r, zmq_msg_t *frame)
{
	const uint8_t *d = zmq_msg_data(frame);
	size_t n = zmq_msg_size(frame);
	struct maru__rpc_slot *s;
	struct mds_hdr hdr;
	int i;

	if (mds_hdr_decode(d, n, &hdr) < 0) {
		ldbg(r->h, "dropping a reply with a bad header (%zu bytes)", n);
		return false;
	}
	for (i = 0; i < r->max_inflight; i++) {
		s = &r->slots[i];
		if (s->busy && !s->done && s->seq == hdr.sequence) {
			zmq_msg_init(&s->reply);
			zmq_msg_move(&s->reply, frame);
			s->done = true;
			if (s->waiting)
				pthread_cond_signal(&s->cv);
			return true;
		}
	}
	ldbg(r->h, "dropping a late or unknown reply (sequence %u)",
	     hdr.sequence);
	return false;
}

/*
 * Receive everything that is ready.  Called with @lock held after every
 * socket operation; see the invariant in the header comment.
 */
static void drain(struct maru__rpc *r)
{
	zmq_msg_t part, last;
	bool got = false;
	size_t sz;
	int ev;

	for (;;) {
		sz = sizeof(ev);
		if (zmq_getsockopt(r->sock, ZMQ_EVENTS, &ev, &sz) < 0 ||
		    !(ev & ZMQ_POLLIN))
			break;
		zmq_msg_init(&part);
		zmq_msg_init(&last);
		/* [empty delimiter, body]: keep the last frame */
		for (;;) {
			if (zmq_msg_recv(&part, r->sock, ZMQ_DONTWAIT) < 0)
				break;
			zmq_msg_move(&last, &part);
			if (!zmq_msg_more(&last)) {
				got |= dispatch(r, &last);
				break;
			}
		}
		zmq_msg_close(&part);
		zmq_msg_close(&last);
	}
	if (got && r->leader) {
		uint64_t one = 1;

		if (write(r->wakefd, &one, sizeof(one)) < 0) {
			/* counter saturated: the leader is awake anyway */
		}
	}
}

/* wake one follower to take over reading when nobody leads */
static void hand_off(struct maru__rpc *r)
{
	int i;

	if (r->leader)
		return;
	for (i = 0; i < r->max_inflight; i++) {
		if (r->slots[i].busy && r->slots[i].waiting &&
		    !r->slots[i].done) {
			pthread_cond_signal(&r->slots[i].cv);
			return;
		}
	}
}

static int wait_slot(struct maru__rpc *r, struct maru__rpc_slot *s,
		     uint64_t deadline)
{
	struct pollfd pfd[2];
	struct timespec ts;
	uint64_t v;

	while (!s->done) {
		if (maru__now_ns() >= deadline)
			return -ETIMEDOUT;
		if (!r->leader) {
			r->leader = true;
			pthread_mutex_unlock(&r->lock);
			pfd[0] =
				(struct pollfd){.fd = r->zfd, .events = POLLIN};
			pfd[1] = (struct pollfd){.fd = r->wakefd,
						 .events = POLLIN};
			if (poll(pfd, 2, ms_left(deadline)) > 0 &&
			    (pfd[1].revents & POLLIN)) {
				if (read(r->wakefd, &v, sizeof(v)) < 0) {
					/* already reset by another leader */
				}
			}
			pthread_mutex_lock(&r->lock);
			r->leader = false;
			drain(r);
		} else {
			s->waiting = true;
			abstime(deadline, &ts);
			pthread_cond_timedwait(&s->cv, &r->lock, &ts);
			s->waiting = false;
		}
	}
	return 0;
}

static void slot_release(struct maru__rpc *r, int idx)
{
	struct maru__rpc_slot *s = &r->slots[idx];

	if (s->done)
		zmq_msg_close(&s->reply);
	s->busy = s->done = s->waiting = false;
	r->free_slots[r->nfree++] = idx;
	if (r->space_waiters)
		pthread_cond_signal(&r->space_cv);
}

static int call_async(struct maru__rpc *r, struct maru__msg *m,
		      struct maru__rpc_reply *out)
{
	uint64_t deadline =
		maru__now_ns() +
		(uint64_t)(r->timeout_ms > 0 ? r->timeout_ms : 0) * 1000000ull;
	struct maru__rpc_slot *s;
	struct timespec ts;
	int idx, rc;

	pthread_mutex_lock(&r->lock);
	while (!r->nfree) {
		if (maru__now_ns() >= deadline) {
			rc = -ETIMEDOUT;
			goto out_unlock;
		}
		abstime(deadline, &ts);
		r->space_waiters++;
		pthread_cond_timedwait(&r->space_cv, &r->lock, &ts);
		r->space_waiters--;
	}
	idx = r->free_slots[--r->nfree];
	s = &r->slots[idx];
	s->busy = true;
	s->done = false;
	s->seq = take_seq(r);
	mds_hdr_put(m->data, m->type, 0, s->seq,
		    (uint32_t)(m->len - MDS_HDR_SIZE));

	for (;;) {
		if (zmq_send(r->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
			rc = zmq_send(r->sock, m->data, m->len, 0) < 0 ? -errno
								       : 0;
			break;
		}
		rc = -errno;
		if (rc != -EAGAIN)
			break;
		/* high-water mark: let the I/O thread move messages */
		drain(r);
		pthread_mutex_unlock(&r->lock);
		if (maru__now_ns() >= deadline) {
			pthread_mutex_lock(&r->lock);
			rc = -ETIMEDOUT;
			break;
		}
		usleep(1000);
		pthread_mutex_lock(&r->lock);
	}
	drain(r);
	if (rc == 0)
		rc = wait_slot(r, s, deadline);
	if (rc == 0) {
		zmq_msg_init(&out->msg);
		zmq_msg_move(&out->msg, &s->reply);
		zmq_msg_close(&s->reply);
		s->done = false;
	}
	slot_release(r, idx);
	hand_off(r);
out_unlock:
	pthread_mutex_unlock(&r->lock);
	if (rc < 0)
		return rc;
	rc = reply_parse(out, NULL);
	if (rc < 0)
		zmq_msg_close(&out->msg);
	return rc;
}

int maru__rpc_call(struct maru__rpc *r, struct maru__msg *m,
		   struct maru__rpc_reply *out)
{
	return r->async ? call_async(r, m, out) : call_sync(r, m, out);
}
