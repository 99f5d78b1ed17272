/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - the ZMTP loop of maru-server (see server.h)
 *
 * One thread owns the listening socket, every connection, the store and
 * the RM session, so nothing is locked and every request observes one
 * total order (upstream's "one server-wide lock").  It runs the project's
 * event loop (src/common/evloop.h, level-triggered epoll), one
 * evloop_run_once() at a time so that it can look without sleeping while
 * it has work (see below), and sleeps on:
 *
 *   - the listening TCP socket (accept.c): accept, then at once our 64-byte
 *     greeting and READY (Socket-Type ROUTER) in one write;
 *   - every connection: read what is there (one read), then answer up to
 *     SERVER_DRAIN_BATCH complete messages and write the replies with one
 *     write (a connection with more waiting goes on the backlog and the
 *     loop polls without sleeping, so timers and others are not starved);
 *   - a timerfd (every SERVER_TICK_MS): leases, peer deaths, FREE retries,
 *     RM deadlines and reconnects, ZMTP heartbeats, unmapping old index
 *     tables under load;
 *   - the resource manager session's connection (rmsess.h);
 *   - SIGINT/SIGTERM (the loop's signalfd): stop.
 *
 * Each connection (struct conn) feeds its input buffer to a struct
 * zmtp_conn (src/common/zmtp.h, the state machine libmaru's rpc.c uses
 * too): greeting, then READY (its Socket-Type must be one a ROUTER talks
 * to), then frames.  Command frames are not part of messages: PING is
 * answered with PONG, others ignored.  A message is its frames up to one
 * without MORE, handled once all of it is in the buffer (its frames are
 * borrowed from the buffer meanwhile).  Malformed input (not ZMTP, a
 * mechanism other than NULL, a socket type we do not talk to, reserved
 * flag bits, a frame over SERVER_MAX_MSG, data before READY) closes the
 * connection, logged at debug level.
 *
 * Envelopes: a message is [(routing frames,) empty delimiter, body].  The
 * reply repeats every frame up to and including the delimiter and appends
 * one body frame: a REQ gets [delimiter, body].  Without a delimiter the
 * reply is the body alone (a raw DEALER that sends no delimiter gets
 * answers in its own framing).  A message with more than one body frame
 * gets an error reply; one with a delimiter but no body, or with more than
 * ZMTP_MAX_FRAMES frames, is dropped: there is nothing to answer.
 *
 * Output: replies are written from the loop straight to the socket (a
 * lone request: one write; pipelined ones: one write per drain); large
 * reply bodies go out with writev() without being copied.  What the
 * kernel does not take waits in the connection's output buffer for
 * EPOLLOUT.  A peer that does not read is pushed back on, not dropped:
 * once more than SERVER_OUT_HWM bytes wait for it the loop stops reading
 * its requests (TCP flow control then stops the peer) until it has read
 * them; no reply is ever lost and memory per connection stays bounded.
 *
 * Dead peers: the loop knows each request's connection, so dead-client
 * detection (store.c) hears of every accept and close directly.  A peer
 * of ZMTP 3.1 that is silent for SERVER_HB_IVL_MS gets a PING (libzmq
 * answers it in its I/O thread, whatever the application does); silent
 * for SERVER_HB_TIMEOUT_MS, or not reading our output for as long, it is
 * disconnected: what ZMQ_HEARTBEAT_IVL/TIMEOUT did with libzmq.  TCP
 * keepalive and TCP_USER_TIMEOUT cover ZMTP 3.0 peers (no PING there).
 *
 * Look-ahead: LOOKUP_KV / EXISTS_KV messages are taken from a
 * connection's buffer up to LOOKAHEAD ahead of the one being answered
 * (from pipelining clients): the index bucket of each one's key is
 * prefetched on arrival, its first entry one message later and, when that
 * entry is another key, the second one message after that, so that at ten
 * million keys the cache misses of a LOOKUP_KV overlap with the work of
 * the requests before it.  Replies still go out in arrival order.
 *
 * Background work: while the index has a resize to finish (or old tables
 * to unmap), the loop polls without sleeping and, whenever nothing is
 * ready, moves buckets for SERVER_IDLE_SLICE_NS; a request arriving
 * meanwhile waits at most that long.
 *
 * Busy polling (--busy-poll-us, off by default): after a connection had
 * something to read, the loop keeps looking (epoll_wait without a
 * timeout, sched_yield() between looks) for that long before it sleeps.
 * On these VMs a CPU that sleeps a few hundred microseconds takes tens of
 * microseconds to wake, more the longer it slept; a client that writes a
 * 4 MiB chunk (~200 us) between two REGISTER_KVs then pays that on every
 * store when it runs on another core (docs/performance.md).  Yielding
 * keeps the look from delaying anything else runnable on the same CPU,
 * e.g. a client pinned next to the server.
 *
 * The resource manager: one more non-blocking connection in the loop
 * (rmsess.h).  A request that needs the RM (REQUEST_ALLOC; GET_STATS and
 * GET_USAGE on stale pool figures) is parked: its envelope is kept, the
 * connection is read only for its hangup and takes no further request,
 * and every other connection is served meanwhile.  When the RM session
 * completes the wait, the reply goes out and the connection's next
 * requests are taken; a connection that closed meanwhile has its request
 * undone (a region allocated for it is freed).
 *
 * Stall compensation: deadlines run on a virtual clock that stops while
 * the process does not run (a wake-up later than half the lease TTL or
 * peer grace, e.g. SIGSTOP or a paused VM, counts as a stall and is
 * subtracted; the loop itself never waits for anything but epoll), so
 * that clients are not declared dead for our own absence.  Heartbeat
 * deadlines use the same clock.
 */
#include "server_int.h"

#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "daemon.h"
#include "events.h"
#include "evloop.h"
#include "handler.h"
#include "log.h"
#include "pubidx.h"
#include "util.h"
#include "zcurve.h"
#include "zmtp.h"

/* what a connection is read for: a parked one only for its hangup */
static uint32_t in_ev(const struct conn *c)
{
	return c->wait ? EVLOOP_HANGUP : EVLOOP_READ;
}

/* ---- connections ---- */

static void conn_arm(struct server *sv, struct conn *c, uint32_t ev)
{
	if (c->fd < 0 || c->ev == ev)
		return;
	if (evloop_mod_fd(sv->el, c->fd, ev) == 0)
		c->ev = ev;
}

void conn_close(struct server *sv, struct conn *c, const char *why)
{
	if (c->dead)
		return;
	c->dead = true;
	if (c->queued) {
		c->queued = false;
		sv->nqueued--;
	}
	log_dbg("connection fd %d: %s", c->key, why);
	if (c->wait) {
		/* the RM session holds it: it is undone when done, at once
		 * when it was not sent yet */
		struct mds_wait *w = c->wait;

		w->conn = NULL;
		c->wait = NULL;
		if (!mds_cap_forget(sv->s, w) && sv->rm)
			rmsess_forget(sv->rm, w);
	}
	mds_conn_close(sv->s, c->key);
	if (c->fd >= 0) {
		sv->in_total -= c->in.cap + c->raw.cap;
		sv->nopen--;
		sv->closed_since_trim++;
		sv->conns[c->fd] = NULL;
		evloop_del_fd(sv->el, c->fd);
		close(c->fd);
	}
	c->next_dead = sv->dead;
	sv->dead = c;
}

void conn_free(struct conn *c)
{
	if (c->cz) {
		zcurve_wipe(c->cz);
		free(c->cz);
	}
	buf_free(&c->raw);
	buf_free(&c->in);
	buf_free(&c->out);
	buf_free(&c->env);
	free(c);
}

static void free_dead(struct server *sv)
{
	struct conn *c;

	while ((c = sv->dead)) {
		sv->dead = c->next_dead;
		if (c == sv->feed)
			sv->feed = NULL;
		conn_free(c);
	}
}

/* Bad input: close, and say so now and then (a scan can be noisy). */
static void conn_proto_error(struct server *sv, struct conn *c, int err)
{
	uint64_t now = now_ns();

	sv->proto_errs++;
	if (now >= sv->next_proto_log) {
		log_warn("connection fd %d: %s%s; closed (%llu such so far)",
			 c->key, c->cz && c->cz->why ? "CURVE: " : "",
			 c->cz && c->cz->why ? c->cz->why
			 : err == -EMSGSIZE  ? "frame over the size limit"
					     : "not a ZMTP 3 ROUTER peer, or a "
					       "protocol error",
			 (unsigned long long)sv->proto_errs);
		sv->next_proto_log = now + 10000000000ull;
	}
	conn_close(sv, c, "protocol error");
}

static size_t out_pending(const struct conn *c)
{
	return c->out.len - c->wr;
}

/*
 * Write what waits in c->out (and @extra, when not NULL, after it
 * without copying it unless the kernel leaves part of it).
 * Return: 0, or -errno when the connection failed (caller closes).
 */
static void set_queued(struct server *sv, struct conn *c, bool q);

/*
 * CURVE: the plaintext frames after out[sealed] (and @extra, the end of
 * the last one) become MESSAGE frames, in place of the plaintext.
 */
static int conn_seal(struct server *sv, struct conn *c, const uint8_t *extra,
		     size_t nextra)
{
	int rc;

	if (nextra && buf_put(&c->out, extra, nextra) < 0)
		return -ENOMEM;
	buf_reset(&sv->seal);
	rc = zcurve_seal(c->cz, c->out.data + c->sealed, c->out.len - c->sealed,
			 &sv->seal);
	if (rc < 0)
		return rc;
	c->out.len = c->sealed;
	rc = buf_put(&c->out, sv->seal.data, sv->seal.len);
	if (sv->seal.cap > BUF_KEEP)
		buf_free(&sv->seal);
	c->sealed = c->out.len;
	return rc < 0 ? -ENOMEM : 0;
}

int conn_flush(struct server *sv, struct conn *c, const uint8_t *extra,
	       size_t nextra)
{
	struct iovec iov[2];
	struct msghdr mh = {.msg_iov = iov};
	size_t pend = out_pending(c), done;
	bool moved = false, was_full = pend > SERVER_OUT_HWM;
	ssize_t n;

	/* what a reply tells is in the journal before it leaves (group
	 * commit: one write for the batch of replies of a drain) */
	mds_journal_commit(sv->s);
	/* and the shared index's lines are in memory */
	pub_fence(sv->s->pub);
	if (c->fd < 0) {
		/* server_feed(): the peer reads everything */
		if (nextra && buf_put(&c->out, extra, nextra) < 0)
			return -ENOMEM;
		return 0;
	}
	if (c->cz && (nextra || c->out.len > c->sealed)) {
		int rc = conn_seal(sv, c, extra, nextra);

		if (rc < 0)
			return rc;
		extra = NULL;
		nextra = 0;
		pend = out_pending(c);
	}
	while (pend || nextra) {
		mh.msg_iovlen = 0;
		if (pend) {
			iov[mh.msg_iovlen].iov_base = c->out.data + c->wr;
			iov[mh.msg_iovlen++].iov_len = pend;
		}
		if (nextra) {
			iov[mh.msg_iovlen].iov_base = (void *)extra;
			iov[mh.msg_iovlen++].iov_len = nextra;
		}
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return -errno;
			break;
		}
		moved = true;
		done = (size_t)n < pend ? (size_t)n : pend;
		c->wr += done;
		pend -= done;
		n -= (ssize_t)done;
		if (n) /* extra may be NULL, and NULL + 0 is undefined */
			extra += n;
		nextra -= (size_t)n;
	}
	if (!pend) {
		c->out.len = c->wr = 0;
		if (c->out.cap > BUF_KEEP)
			buf_free(&c->out);
	} else if (c->wr >= c->out.len / 2) {
		/* a peer that keeps some unread: drop the written half, so
		 * that the buffer holds what waits, not all ever sent */
		memmove(c->out.data, c->out.data + c->wr, pend);
		c->out.len = pend;
		c->wr = 0;
	}
	/* the kernel's buffer is full: keep the rest */
	if (nextra && buf_put(&c->out, extra, nextra) < 0)
		return -ENOMEM;
	c->sealed = c->out.len; /* (CURVE: all of it was sealed above) */
	if (!out_pending(c))
		c->stuck_at = 0;
	else if (moved || !c->stuck_at)
		c->stuck_at = sv->s->vnow;
	if (out_pending(c))
		conn_arm(sv, c,
			 EVLOOP_WRITE |
				 (out_pending(c) > SERVER_OUT_HWM ? 0
								  : in_ev(c)));
	else
		conn_arm(sv, c, in_ev(c));
	if (was_full && out_pending(c) <= SERVER_OUT_HWM) {
		/*
		 * we read them again: whole requests may wait in c->in, and
		 * what they sent meanwhile (PONGs too) went unread by us,
		 * so their silence so far does not count
		 */
		c->last_rx = sv->s->vnow;
		set_queued(sv, c, true);
	}
	return 0;
}

static int out_frame(struct conn *c, uint8_t flags, const uint8_t *p, size_t n)
{
	uint8_t hdr[ZMTP_HDR_MAX];

	if (buf_put(&c->out, hdr, zmtp_hdr(hdr, flags, n)) < 0 ||
	    buf_put(&c->out, p, n) < 0)
		return -ENOMEM;
	return 0;
}

/*
 * Take the next whole message from @c's input into @m (frames borrowed
 * from c->in until the next read); a PING on the way gets its PONG.
 * Return: 1 with @m filled, 0 when no whole message is there yet, or
 * -errno (the connection must be closed).
 */
static int conn_next(struct conn *c, struct zmtp_msg *m)
{
	uint64_t dropped = c->z.dropped;
	int rc = zmtp_conn_next(&c->z, c->in.data, c->in.len, m);

	if (c->z.dropped != dropped)
		log_dbg("connection fd %d: dropped a message of more than "
			"%d frames",
			c->key, ZMTP_MAX_FRAMES);
	if (c->z.pong_len) {
		if (buf_put(&c->out, c->z.pong, c->z.pong_len) < 0)
			return -ENOMEM;
		c->z.pong_len = 0;
	}
	return rc;
}

/* Error reply for a message we will not hand to the handler. */
static void reply_error(struct server *sv, const uint8_t *first_body, size_t n,
			const char *why)
{
	struct mp_wr w = {&sv->body, 0};
	struct mds_hdr h;
	bool hdr = n >= MDS_HDR_SIZE;

	buf_reset(&sv->body);
	if (hdr)
		mds_hdr_decode(first_body, n, &h);
	mds_error_reply(&w, hdr ? &h : NULL, why);
}

/* Queue (or write, when large) sv->body as the reply's last frame. */
static int send_body(struct server *sv, struct conn *c)
{
	static const uint8_t oom[] = {
		0xcf, 0x00, 1, 0x80, 0,	   0,	 0,   0,   0,	0,   0,	  0,
		0,    0,    0, 8,    0x81, 0xa5, 'e', 'r', 'r', 'o', 'r', 0xa0,
	};
	const uint8_t *b = sv->body.data;
	size_t n = sv->body.len;
	uint8_t hdr[ZMTP_HDR_MAX];

	if (!n) {
		/* even the error reply ran out of memory: a fixed one */
		b = oom;
		n = sizeof(oom);
	}
	if (n >= BIG_REPLY) {
		if (buf_put(&c->out, hdr, zmtp_hdr(hdr, 0, n)) < 0)
			return -ENOMEM;
		return conn_flush(sv, c, b, n);
	}
	return out_frame(c, 0, b, n);
}

/* Queue (or write) the reply to @m: its envelope, then sv->body. */
static int send_reply(struct server *sv, struct conn *c,
		      const struct zmtp_msg *m, int nenv)
{
	int i;

	for (i = 0; i < nenv; i++)
		if (out_frame(c, ZMTP_MORE, m->p[i], m->n[i]) < 0)
			return -ENOMEM;
	return send_body(sv, c);
}

/*
 * The RM session answered a parked request (or gave up on it): answer
 * it, and take the connection's next requests again; a connection that
 * went away meanwhile gets nothing and the request is undone.
 */
static void wait_done(struct mds_wait *w)
{
	struct server *sv = w->arg;
	struct conn *c = w->conn;
	int rc;

	if (!c) {
		mds_wait_abandon(sv->s, w);
		return;
	}
	if (mds_resume(sv->s, w, &sv->body) == 1)
		return; /* waits again (for capacity): still parked */
	c->wait = NULL;
	rc = buf_put(&c->out, c->env.data, c->env.len);
	buf_reset(&c->env);
	if (rc == 0)
		rc = send_body(sv, c);
	if (rc == 0)
		rc = conn_flush(sv, c, NULL, 0);
	if (rc < 0) {
		conn_close(sv, c, strerror(-rc));
		return;
	}
	/* its silence while we did not read it does not count */
	c->last_rx = sv->s->vnow;
	c->ping_out = false;
	set_queued(sv, c, true);
}

/* @w waits for the RM: keep @m's envelope, read @c for its hangup only */
static int park(struct server *sv, struct conn *c, const struct zmtp_msg *m,
		int nenv, struct mds_wait *w)
{
	uint8_t hdr[ZMTP_HDR_MAX];
	int i;

	w->done = wait_done;
	w->arg = sv;
	w->conn = c;
	c->wait = w;
	buf_reset(&c->env);
	for (i = 0; i < nenv; i++)
		if (buf_put(&c->env, hdr, zmtp_hdr(hdr, ZMTP_MORE, m->n[i])) <
			    0 ||
		    buf_put(&c->env, m->p[i], m->n[i]) < 0)
			return -ENOMEM; /* closed: the wait is undone */
	conn_arm(sv, c, (out_pending(c) ? EVLOOP_WRITE : 0) | in_ev(c));
	return 0;
}

static int handle_msg(struct server *sv, struct conn *c,
		      const struct zmtp_msg *m)
{
	struct mds_wait *w = NULL;
	struct mds_peer peer;
	int i, delim = -1, nenv, nbody;

	for (i = 0; i < m->nf; i++) {
		if (m->n[i] == 0) {
			delim = i;
			break;
		}
	}
	nenv = delim >= 0 ? delim + 1 : 0;
	nbody = m->nf - nenv;
	if (nbody <= 0)
		return 0; /* nothing to answer */

	/* the connection is known: nothing to resolve later */
	peer.fd = c->key;
	peer.rid_hash = c->serial;
	peer.resolve = NULL;
	peer.arg = NULL;
	if (nbody > 1) {
		sv->s->ctr.requests++;
		sv->s->ctr.errors++;
		reply_error(sv, m->p[nenv], m->n[nenv],
			    "a request is exactly one body frame");
	} else if (mds_handle(sv->s, m->p[nenv], m->n[nenv], &peer, &sv->body,
			      c->fd >= 0 ? &w : NULL) == 1) {
		return park(sv, c, m, nenv, w);
	}
	return send_reply(sv, c, m, nenv);
}

static void set_queued(struct server *sv, struct conn *c, bool q)
{
	if (c->queued == q || c->dead)
		return;
	c->queued = q;
	sv->nqueued += q ? 1 : -1;
}

/*
 * Answer up to SERVER_DRAIN_BATCH whole messages waiting in @c's input,
 * then write the replies (one write).  Messages from a client that
 * pipelines are taken up to LOOKAHEAD ahead of the one answered, with
 * their keys prefetched (see the file comment); other streams (REGISTER_KV,
 * batches) are taken one at a time.  Leaves @c queued when more may wait.
 */
static void conn_drain(struct server *sv, struct conn *c)
{
	int got = 0, done = 0, k, i, rc = 0, err = 0;
	bool more = true;
	struct zmtp_msg *m;

	for (;;) {
		while (more && !c->wait && got - done <= LOOKAHEAD &&
		       got < SERVER_DRAIN_BATCH &&
		       (got == done || sv->hs[(got - 1) % WIN]) &&
		       out_pending(c) <= SERVER_OUT_HWM) {
			k = got % WIN;
			m = &sv->win[k];
			rc = conn_next(c, m);
			if (rc <= 0) {
				more = false;
				err = rc;
				break;
			}
			sv->hs[k] = mds_prefetch(sv->s, m->p[m->nf - 1],
						 m->n[m->nf - 1]);
			got++;
			/* the one taken before: its bucket is in cache */
			i = (got - 2) % WIN;
			if (got - 2 > done && sv->hs[i])
				mds_prefetch_entry(sv->s, sv->hs[i]);
			/* and the one before that: its first entry is */
			i = (got - 3) % WIN;
			if (got - 3 > done && sv->hs[i])
				mds_prefetch_next(sv->s, sv->hs[i]);
		}
		if (done == got)
			break;
		rc = handle_msg(sv, c, &sv->win[done % WIN]);
		if (rc < 0) {
			err = rc; /* -ENOMEM, or the write failed */
			more = false;
			got = done + 1; /* taken messages are lost with it */
		}
		done++;
	}
	rc = conn_flush(sv, c, NULL, 0);
	/* more may wait unless the input ran dry (or output is still too
	 * full: then EPOLLOUT queues it again once the peer has read) */
	set_queued(sv, c, more && !c->wait && out_pending(c) <= SERVER_OUT_HWM);
	if (err < 0) {
		if (err == -EPROTO || err == -EMSGSIZE)
			conn_proto_error(sv, c, err);
		else
			conn_close(sv, c, strerror(-err));
	} else if (rc < 0) {
		conn_close(sv, c, strerror(-rc));
	}
}

/* @x holds input not yet taken (a partial message, or whole ones queued) */
static bool holds_input(const struct conn *x)
{
	return x->z.rd < x->in.len || (x->cz && x->cz->rd < x->raw.len);
}

/* bytes of input buffers @x holds */
static size_t in_bytes(const struct conn *x)
{
	return x->in.cap + x->raw.cap;
}

/*
 * The input buffers of all connections together passed --max-input-bytes
 * (partial messages of up to 64 MiB each): first the buffers that hold
 * nothing are released (idle connections keep up to BUF_KEEP), then the
 * connections with the largest pending input are closed until the rest
 * fits, the way Redis evicts its biggest clients.  @c, the one that just
 * grew, counts as holding input.
 * Return: true when @c was closed.
 */
static bool over_budget(struct server *sv, struct conn *c)
{
	struct conn *big, *x;
	bool self = false;
	int fd;

	for (fd = 0; fd <= sv->maxfd; fd++) {
		x = sv->conns[fd];
		if (x && x != c && !x->dead && in_bytes(x) && !holds_input(x)) {
			zmtp_conn_shift(&x->z, x->z.rd);
			x->in.len = 0;
			if (x->cz) {
				zcurve_shift(x->cz, x->cz->rd);
				x->raw.len = 0;
			}
			sv->in_total -= in_bytes(x);
			buf_free(&x->in);
			buf_free(&x->raw);
		}
	}
	while (sv->in_total > sv->max_input) {
		big = NULL;
		for (fd = 0; fd <= sv->maxfd; fd++) {
			x = sv->conns[fd];
			if (x && !x->dead && (x == c || holds_input(x)) &&
			    (!big || in_bytes(x) > in_bytes(big)))
				big = x;
		}
		if (!big)
			break;
		self |= big == c;
		log_warn("connection fd %d: its %zu-byte input is the largest "
			 "of %llu bytes buffered (--max-input-bytes %llu): "
			 "closed",
			 big->key, in_bytes(big),
			 (unsigned long long)sv->in_total,
			 (unsigned long long)sv->max_input);
		conn_close(sv, big, "input budget exceeded");
	}
	return self;
}

/*
 * Drop the taken prefix [0, @rd) of input buffer @b: when nothing else is
 * in it (a large one is given back), when @always, or when @want bytes do
 * not fit after it.  Return: bytes dropped (the caller shifts its parser).
 */
static size_t in_compact(struct server *sv, struct buf *b, size_t rd,
			 size_t want, bool always)
{
	if (rd == b->len) {
		b->len = 0;
		if (b->cap > BUF_KEEP) {
			sv->in_total -= b->cap;
			buf_free(b);
		}
		return rd;
	}
	if (!rd || (!always && b->cap - b->len >= want))
		return 0;
	memmove(b->data, b->data + rd, b->len - rd);
	b->len -= rd;
	return rd;
}

/*
 * One read from @c's socket into @b, whose first @rd bytes are taken and
 * whose parser needs @need bytes from there: room made (compacted, grown,
 * counted in --max-input-bytes), then one read().
 * @drop: gets the bytes dropped from the front of @b
 * Return: bytes read, or 0 (nothing there, or @c was closed: EOF, an
 * error, out of memory, the largest input over the budget).
 */
static size_t conn_fill(struct server *sv, struct conn *c, struct buf *b,
			size_t rd, size_t need, size_t *drop)
{
	size_t want, cap, avail = b->len - rd;
	ssize_t n;

	want = need > avail ? need - avail : 0;
	if (want < IN_MIN_FREE)
		want = IN_MIN_FREE;
	*drop = in_compact(sv, b, rd, want, false);
	cap = b->cap;
	if (buf_reserve(b, want) < 0) {
		conn_close(sv, c, "out of memory");
		return 0;
	}
	sv->in_total += b->cap - cap;
	if (sv->max_input && sv->in_total > sv->max_input && over_budget(sv, c))
		return 0; /* @c was the largest */
	do {
		n = read(c->fd, b->data + b->len, b->cap - b->len);
	} while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno != EAGAIN)
			conn_close(sv, c, strerror(errno));
		return 0;
	}
	if (n == 0) {
		conn_close(sv, c, "closed by peer");
		return 0;
	}
	b->len += (size_t)n;
	c->last_rx = sv->s->vnow;
	c->ping_out = false;
	return (size_t)n;
}

/*
 * CURVE: the socket's bytes go to c->raw; the handshake is answered, or
 * the MESSAGEs are opened into c->in (plaintext, for conn_drain as
 * without CURVE).
 */
static void conn_readable_curve(struct server *sv, struct conn *c)
{
	struct zcurve *z = c->cz;
	size_t cap, olen, drop;
	int rc;

	/* a message's first frames wait for the rest: to the front, or the
	 * plaintext buffer keeps what was taken */
	zmtp_conn_shift(&c->z, in_compact(sv, &c->in, c->z.rd, 0, true));
	if (!conn_fill(sv, c, &c->raw, z->rd, z->need, &drop)) {
		zcurve_shift(z, drop);
		return;
	}
	zcurve_shift(z, drop);
	olen = c->out.len;
	cap = c->in.cap;
	rc = zcurve_input(z, c->raw.data, c->raw.len, &c->in, &c->out);
	sv->in_total += c->in.cap - cap;
	if (c->out.len != olen) {
		/* WELCOME, READY, ERROR: wire bytes, after wire bytes only
		 * (nothing is sealed before the handshake ends) */
		if (c->sealed != olen) {
			conn_close(sv, c,
				   "CURVE: handshake output after "
				   "plaintext (bug)");
			return;
		}
		c->sealed = c->out.len;
	}
	if (rc == 0 && sv->max_input && sv->in_total > sv->max_input &&
	    over_budget(sv, c))
		return; /* what it opened made it the largest */
	if (rc < 0) {
		if (rc == -EACCES) {
			char k[ZCURVE_Z85 + 1];

			zcurve_z85_encode(z->peer, k);
			if (now_ns() >= sv->next_refuse_log) {
				log_warn("connection fd %d: CURVE: client key "
					 "%s is not in --curve-clients: "
					 "refused",
					 c->key, k);
				sv->next_refuse_log = now_ns() + 1000000000ull;
			}
			(void)conn_flush(sv, c, NULL, 0); /* the ERROR */
			conn_close(sv, c, "CURVE key refused");
			return;
		}
		if (rc == -ENOMEM)
			conn_close(sv, c, "out of memory");
		else
			conn_proto_error(sv, c, rc);
		return;
	}
	c->z.minor = z->minor;
	if (!zcurve_open(z)) {
		if (conn_flush(sv, c, NULL, 0) < 0)
			conn_close(sv, c, "write failed");
		return;
	}
	conn_drain(sv, c);
}

/* EPOLLIN: one read, then answer what is complete. */
static void conn_readable(struct server *sv, struct conn *c)
{
	size_t drop, n;

	if (c->queued) {
		/* whole messages wait already: read no more meanwhile, so
		 * that a fast sender cannot grow the buffer */
		conn_drain(sv, c);
		return;
	}
	if (c->cz) {
		conn_readable_curve(sv, c);
		return;
	}
	n = conn_fill(sv, c, &c->in, c->z.rd, c->z.need, &drop);
	zmtp_conn_shift(&c->z, drop);
	if (n)
		conn_drain(sv, c);
}

/* EPOLLOUT: the peer has read; write more, take requests again. */
static void conn_writable(struct server *sv, struct conn *c)
{
	int rc = conn_flush(sv, c, NULL, 0);

	if (rc < 0)
		conn_close(sv, c, strerror(-rc));
}

struct conn *conn_new(struct server *sv, int fd, int key)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->fd = fd;
	c->key = key;
	c->sv = sv;
	c->serial = ++sv->serial;
	c->born = c->last_rx = sv->s->vnow;
	zmtp_conn_init(&c->z, "ROUTER", SERVER_HANDSHAKE_MAX,
		       (size_t)SERVER_MAX_MSG);
	if (sv->curve && fd >= 0) {
		/* CURVE's greeting; its READY opens the inner stream */
		c->cz = malloc(sizeof(*c->cz));
		if (!c->cz ||
		    zcurve_server(c->cz, sv->curve, sv->allow, "ROUTER",
				  (size_t)SERVER_MAX_MSG, &c->out) < 0) {
			conn_free(c);
			return NULL;
		}
		c->sealed = c->out.len;
		c->z.st = ZMTP_ST_OPEN;
	} else if (buf_put(&c->out, sv->ready, sv->ready_len) < 0) {
		free(c);
		return NULL;
	}
	mds_conn_open(sv->s, key);
	return c;
}

/* The connections with complete messages left over: one batch each. */
static void run_backlog(struct server *sv)
{
	struct conn *c;
	int fd;

	for (fd = 0; fd <= sv->maxfd && sv->nqueued; fd++) {
		c = sv->conns[fd];
		if (c && c->queued && !c->dead)
			conn_drain(sv, c);
	}
}

/* ---- the loop ---- */

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

/* ZMTP heartbeats: PING the idle, drop the silent and the stuck. */
static void heartbeat(struct server *sv)
{
	uint64_t now = sv->s->vnow, idle;
	int outq;
	uint16_t ttl_ds = (uint16_t)(sv->hb_timeout / 100000000ull);
	uint8_t ping[16];
	struct conn *c;
	int fd;

	for (fd = 0; fd <= sv->maxfd; fd++) {
		c = sv->conns[fd];
		if (!c || c->dead)
			continue;
		if (c->wait)
			continue; /* we do not read it: its silence is ours */
		idle = now - c->last_rx;
		/* a deadline, not an idle timer: a byte now and then does not
		 * keep a half-greeted connection */
		if (!conn_ready(c) && now - c->born >= sv->hb_timeout) {
			conn_close(sv, c, "handshake not finished in time");
			continue;
		}
		/* while their replies back up we do not read them (nor
		 * their PONGs): then only "reads nothing" below applies */
		if (idle >= sv->hb_timeout &&
		    out_pending(c) <= SERVER_OUT_HWM &&
		    (c->z.minor >= 1 || !conn_ready(c))) {
			conn_close(sv, c, "heartbeat timeout");
			continue;
		}
		/*
		 * output waits: the kernel only reports the socket writable
		 * again once much of its queue drained, so a peer that reads
		 * slowly shows as progress in the socket's queue, not in our
		 * writes
		 */
		if (c->stuck_at && c->fd >= 0 &&
		    ioctl(c->fd, SIOCOUTQ, &outq) == 0 && outq != c->outq) {
			c->outq = outq;
			c->stuck_at = now;
		}
		if (c->stuck_at && now - c->stuck_at >= sv->hb_timeout) {
			conn_close(sv, c, "peer reads nothing");
			continue;
		}
		if (!conn_ready(c) || c->z.minor < 1 || c->ping_out ||
		    idle < sv->hb_ivl)
			continue;
		c->ping_out = true;
		if (buf_put(&c->out, ping, zmtp_ping(ping, ttl_ds)) < 0 ||
		    conn_flush(sv, c, NULL, 0) < 0)
			conn_close(sv, c, "write failed");
	}
}

static void on_tick(struct evloop *el, int fd, unsigned events, void *arg)
{
	struct server *sv = arg;
	uint64_t expirations;

	(void)el;
	(void)events;
	if (read(fd, &expirations, sizeof(expirations)) < 0)
		return;
	wake(sv);
	mds_tick(sv->s, sv->s->vnow);
	rmsess_tick(sv->rm);
	heartbeat(sv);
	ev_tick(sv->s->ev);
	if (sv->lfd_off && evloop_mod_fd(sv->el, sv->lfd, EVLOOP_READ) == 0)
		sv->lfd_off = false;
	/*
	 * Unmap bucket memory the index no longer uses, a little at every
	 * tick (never from a request: that can take milliseconds on some
	 * VMs), for when the loop is never idle (then it does it itself).
	 */
	ix_release_for(&sv->s->kv, 200000);
	/* a rebuild of the shared index moves on, a little every tick */
	pub_tick(sv->s->pub, 200000);
	/*
	 * malloc keeps what it freed (malloc_keep_freed(): no mmap churn
	 * for large replies); after many connections went, give their
	 * buffers back, at most every TRIM_EVERY_NS: a flood of connections
	 * leaves no memory behind
	 */
	if (sv->closed_since_trim >= TRIM_AFTER_CLOSES &&
	    now_ns() - sv->last_trim >= TRIM_EVERY_NS) {
		malloc_trim(0);
		sv->closed_since_trim = 0;
		sv->last_trim = now_ns();
	}
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

static void rm_event(struct evloop *el, int fd, unsigned events, void *arg)
{
	struct server *sv = arg;

	(void)el;
	(void)fd;
	wake(sv);
	rmsess_io(sv->rm, events);
}

/* the RM session's fd and events (it closed the old fd already) */
static void rm_watch(void *arg, int old_fd, int fd, uint32_t ev)
{
	struct server *sv = arg;

	if (old_fd >= 0 && old_fd != fd)
		evloop_del_fd(sv->el, old_fd);
	if (fd >= 0 && evloop_add_fd(sv->el, fd, ev, rm_event, sv) < 0)
		log_err("resource manager connection: cannot watch it");
}

static void listen_event(struct evloop *el, int fd, unsigned events, void *arg)
{
	(void)el;
	(void)fd;
	(void)events;
	wake(arg);
	server_accept(arg);
}

static void signal_event(struct evloop *el, int signo, void *arg)
{
	struct server *sv = arg;

	(void)el;
	log_info("signal %d: stopping", signo);
	sv->stop = true;
}

/* A connection's events; the busy-poll window opens with any of them. */
void conn_event(struct evloop *el, int fd, unsigned events, void *arg)
{
	struct conn *c = arg;
	struct server *sv = c->sv;

	(void)el;
	(void)fd;
	if (c->dead)
		return;
	wake(sv);
	if (sv->busy_ns)
		sv->spin_until = sv->last_wake + sv->busy_ns;
	if (c->wait && (events & (EVLOOP_HANGUP | EVLOOP_ERROR))) {
		conn_close(sv, c,
			   "closed by peer while its request waited for the "
			   "resource manager");
		return;
	}
	if (events & EVLOOP_WRITE)
		conn_writable(sv, c);
	if (!c->dead && (events & (EVLOOP_READ | EVLOOP_ERROR)))
		conn_readable(sv, c);
}

/*
 * the loop's own sources: SIGINT/SIGTERM and the tick.  The tick is a
 * periodic timerfd, not an evloop timer: with no evloop timer pending the
 * loop sleeps in epoll_wait without a timeout, and a timeout costs every
 * sleep an hrtimer (measured: 3-5 % of a lock-step LOOKUP on one core).
 */
static int open_loop(struct server *sv)
{
	static const int sigs[] = {SIGINT, SIGTERM};
	struct itimerspec its = {
		.it_interval = {0, SERVER_TICK_MS * 1000000L},
		.it_value = {0, SERVER_TICK_MS * 1000000L},
	};
	int rc;

	rc = evloop_add_signals(sv->el, sigs, 2, signal_event, sv);
	if (rc < 0)
		return rc;
	sv->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (sv->tfd < 0 || timerfd_settime(sv->tfd, 0, &its, NULL) < 0)
		return -errno;
	return evloop_add_fd(sv->el, sv->tfd, EVLOOP_READ, on_tick, sv);
}

struct server *server_new(struct mds *s)
{
	struct server *sv = calloc(1, sizeof(*sv));
	uint8_t g[ZMTP_GREETING_LEN];
	ssize_t n;

	if (!sv)
		return NULL;
	if (evloop_new(&sv->el) < 0) {
		free(sv);
		return NULL;
	}
	sv->s = s;
	sv->lfd = sv->tfd = -1;
	sv->maxfd = -1; /* no connection yet (and no conns[] either) */
	sv->hb_ivl = (uint64_t)SERVER_HB_IVL_MS * 1000000ull;
	sv->hb_timeout = (uint64_t)SERVER_HB_TIMEOUT_MS * 1000000ull;
	zmtp_greeting(g, true);
	memcpy(sv->ready, g, sizeof(g));
	n = zmtp_ready(sv->ready + sizeof(g), sizeof(sv->ready) - sizeof(g),
		       "ROUTER", NULL, 0);
	if (n < 0) {
		evloop_free(sv->el);
		free(sv);
		return NULL;
	}
	sv->ready_len = sizeof(g) + (size_t)n;
	return sv;
}

void server_free(struct server *sv)
{
	int fd;

	if (!sv)
		return;
	for (fd = 0; fd <= sv->maxfd; fd++)
		if (sv->conns[fd])
			conn_close(sv, sv->conns[fd], "server stopping");
	if (sv->feed)
		conn_close(sv, sv->feed, "server stopping");
	free_dead(sv);
	free(sv->conns);
	if (sv->lfd >= 0) {
		evloop_del_fd(sv->el, sv->lfd);
		close(sv->lfd);
	}
	if (sv->tfd >= 0) {
		evloop_del_fd(sv->el, sv->tfd);
		close(sv->tfd);
	}
	evloop_free(sv->el);
	buf_free(&sv->body);
	buf_free(&sv->seal);
	free(sv);
}

int server_feed(struct server *sv, const uint8_t *p, size_t n, struct buf *out)
{
	struct conn *c = sv->feed;
	int rc = 0;

	if (!c) {
		c = sv->feed = conn_new(sv, -1, FEED_FD);
		if (!c)
			return -ENOMEM;
	}
	if (buf_put(&c->in, p, n) < 0)
		return -ENOMEM;
	do {
		conn_drain(sv, c);
	} while (!c->dead && c->queued);
	if (buf_put(out, c->out.data + c->wr, out_pending(c)) < 0)
		rc = -ENOMEM;
	c->out.len = c->wr = 0;
	if (c->dead)
		rc = -EPROTO;
	else if (c->z.rd == c->in.len) {
		zmtp_conn_shift(&c->z, c->z.rd);
		c->in.len = 0;
	}
	free_dead(sv);
	return rc;
}

/*
 * MARU_SERVER_HEARTBEAT_MS="IVL,TIMEOUT": other heartbeat times, so that
 * tests see a PING and a timeout in a second rather than in 30 s.
 */
static void hb_knob(struct server *sv)
{
	const char *e = getenv("MARU_SERVER_HEARTBEAT_MS");
	unsigned long ivl, tmo;

	if (!e || sscanf(e, "%lu,%lu", &ivl, &tmo) != 2 || !ivl || tmo < ivl ||
	    tmo > 3600000)
		return;
	sv->hb_ivl = (uint64_t)ivl * 1000000ull;
	sv->hb_timeout = (uint64_t)tmo * 1000000ull;
	log_info("heartbeat: PING after %lu ms idle, disconnect after %lu ms",
		 ivl, tmo);
}

int server_run(const struct server_opts *o, struct mds *s, struct rmsess *rm)
{
	struct server *sv;
	uint64_t lim = 0;
	int rc, n;
	bool idle, spin;

	sv = server_new(s);
	if (!sv)
		return -ENOMEM;
	sv->rm = rm;
	sv->busy_ns = o->busy_poll_ns;
	sv->max_conns = o->max_conns;
	sv->max_per_addr = o->max_per_addr;
	sv->max_input = o->max_input;
	sv->curve = o->curve;
	sv->allow = o->curve_allow;
	hb_knob(sv);
	rm->any_handle = any_handle;
	rm->arg = s;
	rc = open_loop(sv);
	if (rc < 0) {
		log_err("signals/timer: %s", strerror(-rc));
		goto out;
	}
	rc = server_listen(sv, o);
	if (rc < 0)
		goto out;
	rc = evloop_add_fd(sv->el, sv->lfd, EVLOOP_READ, listen_event, sv);
	if (rc < 0) {
		log_err("epoll_ctl: %s", strerror(-rc));
		goto out;
	}
	rmsess_attach(rm, rm_watch, sv);

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
	/* recovered, the RM checked, the port listens: tell systemd */
	daemon_ready("listening on tcp://%s:%d", o->host, o->port);

	while (!sv->stop) {
		/*
		 * a connection with requests left over: look at the rest and
		 * go on; the index has a resize to finish: look, and when
		 * nothing waits, move buckets for a slice
		 */
		idle = !sv->nqueued && (ix_busy(&s->kv) || pub_busy(s->pub));
		spin = sv->busy_ns && now_ns() < sv->spin_until;
		n = evloop_run_once(sv->el,
				    sv->nqueued || idle || spin ? 0 : -1);
		if (n < 0) {
			rc = n;
			log_err("event loop: %s", strerror(-n));
			break;
		}
		if (n == 0 && idle) {
			ix_rehash_for(&s->kv, SERVER_IDLE_SLICE_NS);
			pub_tick(s->pub, SERVER_IDLE_SLICE_NS);
			continue;
		}
		if (n == 0 && spin) {
			sched_yield();
			continue;
		}
		if (sv->nqueued)
			run_backlog(sv);
		free_dead(sv);
		/* what timers changed in the shared index is in memory (the
		 * replies fenced their own), then this iteration's KV events,
		 * one message (never waits) */
		pub_fence(s->pub);
		ev_flush(s->ev);
		mds_turn_done(s);
	}
	if (sv->stop)
		rc = 0;
	daemon_stopping("stopping");
	log_info("served %llu requests (%llu errors), %llu leases expired, "
		 "%llu dead instances, %llu regions freed",
		 (unsigned long long)s->ctr.requests,
		 (unsigned long long)s->ctr.errors,
		 (unsigned long long)s->ctr.lease_expired,
		 (unsigned long long)s->ctr.peer_dead,
		 (unsigned long long)s->ctr.rm_frees);
out:
	/* parked requests get their answer (a failure) while sv exists */
	rmsess_cancel(rm);
	rmsess_attach(rm, NULL, NULL);
	server_free(sv);
	return rc;
}
