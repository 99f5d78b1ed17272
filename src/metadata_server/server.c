/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - the ZeroMQ loop of maru-server (see server.h)
 *
 * One thread owns the ROUTER socket, the store and the RM session, so
 * nothing is locked and every request observes one total order (the
 * spec's "one server-wide lock").  It sleeps in poll(2) on:
 *
 *   - the ROUTER socket's ZMQ_FD: then drained SERVER_DRAIN_BATCH
 *     messages at a time with ZMQ_DONTWAIT, and back to poll so that
 *     timers and signals are never starved.  Every drain ends with a
 *     receive that fails with EAGAIN, which processes the socket's
 *     pending commands and so re-arms ZMQ_FD (libzmq's documented
 *     edge-triggered contract);
 *   - the socket monitor's ZMQ_FD (an inproc PAIR): connection accepted/
 *     closed, with the connection's fd, for dead-client detection;
 *   - a timerfd (every SERVER_TICK_MS): leases, peer deaths, FREE retries,
 *     RM reconnects, unmapping old index tables under load;
 *   - a signalfd: SIGINT/SIGTERM stop the loop;
 *   - the RM connection's fd: readable between requests = closed by RM.
 *
 * Plain poll() on the ZMQ_FDs rather than zmq_poll(): zmq_poll() makes a
 * first non-blocking poll and asks every socket for ZMQ_EVENTS before it
 * sleeps, a few more system calls per wake-up, which is what a
 * lock-step client waits for on every request.
 *
 * Envelopes: a message is [routing id, (more routing frames,) empty
 * delimiter, body].  The reply copies every frame up to and including the
 * delimiter (the received frames themselves are sent back, no copy) and
 * appends one body frame.  Without a delimiter the reply is [routing id,
 * body] (a raw DEALER that sends no delimiter gets answers in its own
 * framing).  A message with a delimiter but no body, or with more than
 * SERVER_MAX_FRAMES frames, is dropped: there is nothing to answer.
 *
 * The connection a message came on is its ZMQ_SRCFD (per-connection
 * metadata in libzmq 4.3).  fds are reused by the kernel, so each
 * connection also remembers the routing id of its first message; a
 * message whose routing id does not match belongs to a newer connection
 * whose ACCEPTED event is still queued.  In both cases (an fd not known
 * to be open, or a routing id mismatch) the monitor is drained again
 * before the message is attributed: the I/O thread queues ACCEPTED
 * before it reads the connection's first byte, but two sockets' queues
 * become visible to zmq_poll() in no particular order.
 *
 * Background work: while the index has a resize to finish (or old tables
 * to unmap), the loop polls without sleeping and, whenever nothing is
 * ready, moves buckets for SERVER_IDLE_SLICE_NS; a request arriving
 * meanwhile waits at most that long.  Requests move a few buckets each
 * as well (index.c), so a resize ends soon after the inserts that caused
 * it, idle or not, and lookups stop paying for it.
 *
 * Stall compensation: deadlines run on a virtual clock that stops while
 * the loop does not (a wake-up later than half the lease TTL or peer
 * grace, e.g. a blocking RM call timing out or SIGSTOP, counts as a
 * stall and is subtracted).
 */
#include "server.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <zmq.h>

#include "handler.h"
#include "log.h"
#include "util.h"

#define BIG_REPLY (64u << 10) /* hand larger replies to zmq */
#define LOOKAHEAD 3	      /* messages received ahead of the one handled */

struct server {
	void *zctx;	   /* owns */
	void *router;	   /* owns */
	void *mon;	   /* owns: monitor PAIR */
	int sfd, tfd;	   /* owns */
	struct mds *s;	   /* borrows */
	struct rmsess *rm; /* borrows */
	struct buf out;	   /* owns: reply body, reused */
	/* received messages: the one being handled and up to LOOKAHEAD
	 * more whose index buckets are being prefetched meanwhile */
	zmq_msg_t frs[LOOKAHEAD + 1][SERVER_MAX_FRAMES];
	int nfs[LOOKAHEAD + 1];	     /* frames of each, -1: too many */
	uint64_t hs[LOOKAHEAD + 1];  /* mds_prefetch() of each, 0: none */
	zmq_msg_t *fr;		     /* borrows: frs[] being handled */
	zmq_msg_t *cur_body;  /* borrows: body being handled */
	uint64_t last_wake;   /* monotonic ns */
	uint64_t stall_total; /* ns subtracted from the clock */
	uint64_t stall_min;   /* a gap this long is a stall */
	bool stop;
};

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (n--) {
		h ^= *p++;
		h *= 0x100000001b3ull;
	}
	return h;
}

static void drain_monitor(struct server *sv)
{
	zmq_msg_t ev, addr;
	uint16_t event;
	int32_t value;

	for (;;) {
		zmq_msg_init(&ev);
		if (zmq_msg_recv(&ev, sv->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			return;
		}
		/* the second frame (the endpoint) is not needed */
		if (zmq_msg_more(&ev)) {
			zmq_msg_init(&addr);
			zmq_msg_recv(&addr, sv->mon, 0);
			zmq_msg_close(&addr);
		}
		if (zmq_msg_size(&ev) >= 6) {
			memcpy(&event, zmq_msg_data(&ev), 2);
			memcpy(&value, (uint8_t *)zmq_msg_data(&ev) + 2, 4);
			if (event == ZMQ_EVENT_ACCEPTED)
				mds_conn_open(sv->s, value);
			else if (event == ZMQ_EVENT_DISCONNECTED)
				mds_conn_close(sv->s, value);
		}
		zmq_msg_close(&ev);
	}
}

static void free_reply(void *data, void *hint)
{
	(void)hint;
	free(data);
}

/* Send envelope frames [0, nenv) and the reply body. */
static void send_reply(struct server *sv, int nenv)
{
	zmq_msg_t body;
	int i;

	if (!sv->out.len) {
		/* even the error reply ran out of memory: a fixed one */
		static const uint8_t oom[] = {
			0xcf, 0x00, 1,	 0x80, 0,   0,	 0,   0,
			0,    0,    0,	 0,    0,   0,	 0,   8,
			0x81, 0xa5, 'e', 'r',  'r', 'o', 'r', 0xa0,
		};

		(void)buf_put(&sv->out, oom, sizeof(oom));
		if (!sv->out.len)
			return;
	}
	for (i = 0; i < nenv; i++)
		if (zmq_msg_send(&sv->fr[i], sv->router,
				 ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
			return; /* peer gone or queue full: dropped */
	if (sv->out.len >= BIG_REPLY &&
	    zmq_msg_init_data(&body, sv->out.data, sv->out.len, free_reply,
			      NULL) == 0) {
		/* zmq owns the buffer now; start a new one */
		sv->out.data = NULL;
		sv->out.len = sv->out.cap = 0;
		if (zmq_msg_send(&body, sv->router, ZMQ_DONTWAIT) < 0)
			zmq_msg_close(&body);
		return;
	}
	zmq_send(sv->router, sv->out.data, sv->out.len, ZMQ_DONTWAIT);
}

/* Error reply for a message we will not hand to the handler. */
static void reply_error(struct server *sv, const zmq_msg_t *first_body,
			const char *why)
{
	struct mp_wr w = {&sv->out, 0};
	struct mds_hdr h;
	bool hdr = zmq_msg_size((zmq_msg_t *)first_body) >= MDS_HDR_SIZE;

	buf_reset(&sv->out);
	if (hdr)
		mds_hdr_decode(zmq_msg_data((zmq_msg_t *)first_body),
			       zmq_msg_size((zmq_msg_t *)first_body), &h);
	mds_error_reply(&w, hdr ? &h : NULL, why);
}

/*
 * The connection of the message being handled, when the store needs it.
 * The metadata (with the fd) is on the frames the connection delivered;
 * the routing id frame lacks it when zmq_poll() had prefetched the
 * message (router_t::xhas_in), so the body frame is asked.
 */
static int resolve_fd(struct mds_peer *p)
{
	struct server *sv = p->arg;

	p->fd = zmq_msg_get(sv->cur_body, ZMQ_SRCFD);
	/* the monitor may not have told us about this connection yet */
	if (p->fd >= 0 && !mds_conn_is_open(sv->s, p->fd))
		drain_monitor(sv);
	if (!mds_conn_check(sv->s, p)) {
		drain_monitor(sv);
		if (!mds_conn_check(sv->s, p))
			p->fd = -1;
	}
	return p->fd;
}

static void handle_msg(struct server *sv, int nf)
{
	struct mds_peer peer;
	int i, delim = -1, nenv, nbody;

	for (i = 1; i < nf; i++) {
		if (zmq_msg_size(&sv->fr[i]) == 0) {
			delim = i;
			break;
		}
	}
	nenv = delim >= 0 ? delim + 1 : 1;
	nbody = nf - nenv;
	if (nbody <= 0)
		return; /* nothing to answer */

	peer.fd = MDS_FD_LAZY;
	peer.rid_hash =
		fnv1a(zmq_msg_data(&sv->fr[0]), zmq_msg_size(&sv->fr[0]));
	peer.resolve = resolve_fd;
	peer.arg = sv;
	sv->cur_body = &sv->fr[nf - 1];

	if (nbody > 1) {
		sv->s->ctr.requests++;
		sv->s->ctr.errors++;
		reply_error(sv, &sv->fr[nenv],
			    "a request is exactly one body frame");
	} else {
		mds_handle(sv->s, zmq_msg_data(&sv->fr[nenv]),
			   zmq_msg_size(&sv->fr[nenv]), &peer, &sv->out);
	}
	send_reply(sv, nenv);
}

/*
 * Receive one whole message into @fr without waiting.
 * Return: its frame count (-1 for one of more than SERVER_MAX_FRAMES
 * frames, received and dropped), 0 when nothing is waiting (EAGAIN).
 */
static int recv_one(struct server *sv, zmq_msg_t *fr)
{
	zmq_msg_t extra;
	bool more, overflow = false;
	int nf = 1;

	zmq_msg_init(&fr[0]);
	if (zmq_msg_recv(&fr[0], sv->router, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&fr[0]);
		if (errno != EAGAIN && errno != EINTR)
			log_err("zmq_msg_recv: %s", zmq_strerror(errno));
		return 0;
	}
	more = zmq_msg_more(&fr[0]);
	while (more) {
		/* the rest of a multipart message is already here */
		if (nf < SERVER_MAX_FRAMES) {
			zmq_msg_init(&fr[nf]);
			if (zmq_msg_recv(&fr[nf], sv->router, 0) < 0)
				break;
			more = zmq_msg_more(&fr[nf]);
			nf++;
		} else {
			zmq_msg_init(&extra);
			if (zmq_msg_recv(&extra, sv->router, 0) < 0)
				more = false;
			else
				more = zmq_msg_more(&extra);
			zmq_msg_close(&extra);
			overflow = true;
		}
	}
	if (overflow) {
		while (nf--)
			zmq_msg_close(&fr[nf]);
		log_dbg("dropped a message of more than %d frames",
			SERVER_MAX_FRAMES);
		return -1;
	}
	return nf;
}

/*
 * Receive and answer up to SERVER_DRAIN_BATCH messages.  Ending on EAGAIN
 * matters: that receive processed the socket's pending commands, so its
 * ZMQ_FD will signal the next arrival and the loop may sleep on it.
 *
 * LOOKUP_KV / EXISTS_KV messages are received up to LOOKAHEAD ahead of the
 * one being answered (when that many are waiting, i.e. from pipelining
 * clients): the index bucket of each one's key is prefetched on arrival,
 * its first entry one message later and, when that entry is another key,
 * the second one message after that (a third of the hits at load factor
 * 1), so that at ten million keys the cache misses of a LOOKUP_KV overlap
 * with the work of the requests before it.  Replies still go out in
 * arrival order.
 * Return: true when the batch was full (more may be waiting).
 */
static bool drain_router(struct server *sv)
{
	int got = 0, done = 0, k, i, nf;
	bool eagain = false;

	for (;;) {
		/*
		 * fill the window, past the message to answer only while
		 * the messages are worth prefetching for: other streams
		 * (REGISTER_KV, batches) are received one at a time
		 */
		while (!eagain && got - done <= LOOKAHEAD &&
		       got < SERVER_DRAIN_BATCH &&
		       (got == done ||
			sv->hs[(got - 1) % (LOOKAHEAD + 1)])) {
			k = got % (LOOKAHEAD + 1);
			nf = recv_one(sv, sv->frs[k]);
			if (nf == 0) {
				eagain = true;
				break;
			}
			sv->nfs[k] = nf;
			sv->hs[k] = nf > 0 ? mds_prefetch(sv->s,
				zmq_msg_data(&sv->frs[k][nf - 1]),
				zmq_msg_size(&sv->frs[k][nf - 1])) : 0;
			got++;
			/* the one received before: its bucket is in cache */
			i = (got - 2) % (LOOKAHEAD + 1);
			if (got - 2 > done && sv->hs[i])
				mds_prefetch_entry(sv->s, sv->hs[i]);
			/* and the one before that: its first entry is */
			i = (got - 3) % (LOOKAHEAD + 1);
			if (got - 3 > done && sv->hs[i])
				mds_prefetch_next(sv->s, sv->hs[i]);
		}
		if (done == got)
			break;
		k = done % (LOOKAHEAD + 1);
		nf = sv->nfs[k];
		if (nf > 0) {
			sv->fr = sv->frs[k];
			handle_msg(sv, nf);
			for (i = 0; i < nf; i++)
				zmq_msg_close(&sv->frs[k][i]);
		}
		done++;
	}
	return !eagain;
}

/* Clock bookkeeping at every wake-up; returns the virtual now. */
static uint64_t wake(struct server *sv)
{
	uint64_t now = now_ns(), gap = now - sv->last_wake;

	if (sv->stall_min && gap > sv->stall_min) {
		sv->stall_total += gap;
		sv->s->ctr.stalls++;
		log_warn("loop stalled for %llu ms; lease and peer deadlines "
			 "extended",
			 (unsigned long long)(gap / 1000000));
	}
	sv->last_wake = now;
	sv->s->vnow = now - sv->stall_total;
	return sv->s->vnow;
}

static void on_tick(struct server *sv)
{
	uint64_t expirations;

	if (read(sv->tfd, &expirations, sizeof(expirations)) < 0)
		return;
	drain_monitor(sv);
	mds_tick(sv->s, sv->s->vnow);
	rmsess_tick(sv->rm);
	/*
	 * Unmap bucket memory the index no longer uses, a little at every
	 * tick (never from a request: that can take milliseconds on some
	 * VMs), for when the loop is never idle (then it does it itself).
	 */
	ix_release_for(&sv->s->kv, 200000);
}

/* Any region we own, for the RM session to re-pin our client id. */
static bool any_handle(void *arg, struct rm_handle *out)
{
	const struct mds_region *r = mds_first_region(arg);

	if (!r)
		return false;
	*out = r->h;
	return true;
}

static int get_fd(void *sock, int *fd)
{
	size_t len = sizeof(*fd);

	return zmq_getsockopt(sock, ZMQ_FD, fd, &len);
}

static int setopt_int(void *sock, int opt, int v)
{
	return zmq_setsockopt(sock, opt, &v, sizeof(v));
}

static int open_sockets(struct server *sv, const struct server_opts *o)
{
	char ep[320], mon_ep[64];
	int64_t maxmsg = SERVER_MAX_MSG;

	sv->zctx = zmq_ctx_new();
	if (!sv->zctx)
		return -errno;
	zmq_ctx_set(sv->zctx, ZMQ_BLOCKY, 0);
	sv->router = zmq_socket(sv->zctx, ZMQ_ROUTER);
	if (!sv->router)
		return -errno;
	setopt_int(sv->router, ZMQ_LINGER, 0);
	setopt_int(sv->router, ZMQ_SNDHWM, SERVER_HWM);
	setopt_int(sv->router, ZMQ_RCVHWM, SERVER_HWM);
	/* a reconnecting DEALER with a fixed identity takes its name over */
	setopt_int(sv->router, ZMQ_ROUTER_HANDOVER, 1);
	/* peers that vanish without a FIN are disconnected by ZMTP pings */
	setopt_int(sv->router, ZMQ_HEARTBEAT_IVL, SERVER_ZMQ_HB_IVL_MS);
	setopt_int(sv->router, ZMQ_HEARTBEAT_TIMEOUT, SERVER_ZMQ_HB_TIMEOUT_MS);
	zmq_setsockopt(sv->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));

	snprintf(mon_ep, sizeof(mon_ep), "inproc://maru-server-monitor-%p",
		 (void *)sv);
	if (zmq_socket_monitor(sv->router, mon_ep,
			       ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) < 0)
		return -errno;
	sv->mon = zmq_socket(sv->zctx, ZMQ_PAIR);
	if (!sv->mon || zmq_connect(sv->mon, mon_ep) < 0)
		return -errno;
	setopt_int(sv->mon, ZMQ_LINGER, 0);

	snprintf(ep, sizeof(ep), "tcp://%s:%d", o->host, o->port);
	if (zmq_bind(sv->router, ep) < 0) {
		int err = errno;

		log_err("cannot bind %s: %s", ep, zmq_strerror(err));
		return -err;
	}
	log_info("listening on %s", ep);
	return 0;
}

static int open_fds(struct server *sv)
{
	struct itimerspec its = {
		.it_interval = {0, SERVER_TICK_MS * 1000000L},
		.it_value = {0, SERVER_TICK_MS * 1000000L},
	};
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sv->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sv->sfd < 0)
		return -errno;
	sv->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (sv->tfd < 0)
		return -errno;
	if (timerfd_settime(sv->tfd, 0, &its, NULL) < 0)
		return -errno;
	return 0;
}

static void close_all(struct server *sv)
{
	if (sv->mon)
		zmq_close(sv->mon);
	if (sv->router)
		zmq_close(sv->router);
	if (sv->zctx)
		zmq_ctx_term(sv->zctx);
	if (sv->sfd >= 0)
		close(sv->sfd);
	if (sv->tfd >= 0)
		close(sv->tfd);
	buf_free(&sv->out);
}

int server_run(const struct server_opts *o, struct mds *s, struct rmsess *rm)
{
	struct server *sv;
	struct pollfd pfd[5];
	struct signalfd_siginfo si;
	uint64_t lim = 0;
	int rc, n, npfd;
	bool more, idle;

	sv = calloc(1, sizeof(*sv));
	if (!sv)
		return -ENOMEM;
	sv->s = s;
	sv->rm = rm;
	sv->sfd = sv->tfd = -1;
	rm->any_handle = any_handle;
	rm->arg = s;
	rc = open_fds(sv);
	if (rc < 0) {
		log_err("signalfd/timerfd: %s", strerror(-rc));
		goto out;
	}
	rc = open_sockets(sv, o);
	if (rc < 0)
		goto out;

	/* stalls only matter when something has a deadline */
	if (s->cfg.lease_ttl_ns)
		lim = s->cfg.lease_ttl_ns / 2;
	if (s->cfg.peer_grace_ns && (!lim || s->cfg.peer_grace_ns / 2 < lim))
		lim = s->cfg.peer_grace_ns / 2;
	if (lim && lim < 500000000ull)
		lim = 500000000ull;
	sv->stall_min = lim;
	sv->last_wake = now_ns();
	s->vnow = sv->last_wake;

	if (get_fd(sv->router, &pfd[0].fd) < 0 ||
	    get_fd(sv->mon, &pfd[1].fd) < 0) {
		rc = -errno;
		goto out;
	}
	pfd[2].fd = sv->sfd;
	pfd[3].fd = sv->tfd;
	for (n = 0; n < 5; n++)
		pfd[n].events = POLLIN;
	while (!sv->stop) {
		more = drain_router(sv);
		npfd = 4;
		if (rmsess_fd(rm) >= 0)
			pfd[npfd++].fd = rmsess_fd(rm);
		/*
		 * a full batch: there may be more, look at the rest and go
		 * on; the index has a resize to finish: look, and when
		 * nothing waits, move buckets for a slice
		 */
		idle = !more && ix_busy(&s->kv);
		n = poll(pfd, (nfds_t)npfd, more || idle ? 0 : -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			log_err("poll: %s", strerror(errno));
			break;
		}
		if (n == 0) {
			if (idle)
				ix_rehash_for(&s->kv, SERVER_IDLE_SLICE_NS);
			continue;
		}
		wake(sv);
		if (pfd[1].revents)
			drain_monitor(sv);
		if (pfd[3].revents)
			on_tick(sv);
		if (npfd > 4 && pfd[4].revents)
			rmsess_readable(rm);
		if (pfd[2].revents) {
			if (read(sv->sfd, &si, sizeof(si)) == sizeof(si))
				log_info("signal %u: stopping", si.ssi_signo);
			sv->stop = true;
		}
		/* the router's fd only says "look": drain_router() does */
	}
	if (sv->stop)
		rc = 0;
	log_info("served %llu requests (%llu errors), %llu leases expired, "
		 "%llu dead instances, %llu regions freed",
		 (unsigned long long)s->ctr.requests,
		 (unsigned long long)s->ctr.errors,
		 (unsigned long long)s->ctr.lease_expired,
		 (unsigned long long)s->ctr.peer_dead,
		 (unsigned long long)s->ctr.rm_frees);
out:
	close_all(sv);
	free(sv);
	return rc;
}
