/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rpc.c - the metadata-server client: ZMTP over TCP in the calling thread
 *
 * Wire: docs/protocol.md §2.  Every request is one body frame (16-byte
 * big-endian header + msgpack payload) after an empty delimiter frame; the
 * reply is matched by the header's sequence number.  The transport is
 * ZeroMQ's own protocol, ZMTP 3.1 (src/common/zmtp.h), spoken on a plain
 * TCP socket by the thread that makes the call: libzmq's I/O thread cost
 * two thread hops per side and round trip, more than the loopback round
 * trip itself (docs/performance-client.md).  To the server we look like a
 * libzmq REQ (lock-step) or DEALER (pipelined) socket, so upstream's
 * libzmq ROUTER and our maru-server both serve us unchanged.
 *
 * Connection: made by the first call that needs one, never at open, by
 * dial.c (the URL, connect, the ZMTP or CURVE handshake, the one line on
 * why it failed); a server that is not listening yet is retried until the
 * call's deadline, and the last cause is logged once ("connection refused
 * (retried for 2000 ms)") until a connection is made again.  With the
 * handler's connect_retry off (@once: tools that sample, marutop) a call
 * makes one attempt instead and fails with its own error, the cause kept
 * for maru_handler_last_error().  maru_handler_connect() dials through
 * maru__rpc_connect(): once, no retry, every failure one error line.
 * PINGs are answered with PONG whenever frames are read.
 *
 * Lock-step (use_async_rpc=false): the connection behind @lock for the
 * whole call.  A request that gets no reply within timeout_ms closes the
 * connection and the next call opens a fresh one, as the REQ reset did;
 * the late reply goes with the old connection.  Safe to call from many
 * threads (they queue).
 *
 * Pipelined (use_async_rpc=true): one connection shared by every thread,
 * up to max_inflight requests in flight, replies in any order, matched to
 * slots by sequence.  No I/O thread: "leader/followers".
 *   - @lock guards the connection (fd, receive buffer), the slots and the
 *     sequence counter.  A request is written whole under @lock.
 *   - A caller sends, then waits for its slot.  If nobody is reading, it
 *     becomes the leader: it drops @lock and poll(2)s the TCP socket (plus
 *     @wakefd), then retakes @lock and reads what is there, handing every
 *     complete reply to its slot and signalling the owner.  Others wait on
 *     their slot's condition variable.  When the leader has its own reply
 *     it hands leadership to one waiting follower.
 *   - Whoever reads under @lock parses every complete message out of the
 *     receive buffer before dropping @lock, so poll(2) (level-triggered)
 *     on the socket is always the truth.  A non-leader that read a reply
 *     while a leader polls writes @wakefd so that the leader rechecks.
 *   - The connection is (re)made by one caller with @lock dropped
 *     (@connecting); the others wait on @conn_cv within their deadline.
 * A reply that arrives after its caller timed out finds no slot and is
 * dropped.  A dropped connection (EOF, reset, or a protocol error) fails
 * every request in flight at once with -ECONNRESET (-EPROTO for garbage
 * from the server); the next call reconnects.  A request whose write
 * timed out half-way also closes the connection (the stream is cut).
 *
 * Both modes check a connection idle for a millisecond or more before
 * reusing it (one nonblocking read: a server that restarted meanwhile is
 * noticed and the call reconnects instead of failing).
 *
 * Busy polling (MARU_BUSY_POLL_US, off by default): a caller waiting for
 * its reply (the lock-step caller, or the pipelined leader) first looks
 * at the socket without sleeping for that long, yielding the CPU between
 * looks, and only then sleeps in poll(2).  Across cores on a VM, a CPU
 * that sleeps through a round trip pays a wake-up on top of it; on one
 * core the yield lets the server run.  Pair with maru-server
 * --busy-poll-us (docs/metadata-server.md#busy-polling).
 *
 * Watching (struct maru__rpc_watch, at the end of this file; one per
 * handler): every connection is registered with the watch thread, which
 * polls it for a hangup (a server that went away is noticed before the
 * next write) and, when idle, reads it (rpc_idle, a try-lock: never in a
 * caller's way) so that a server's heartbeat PINGs get their PONG.  Every
 * drop, seen there or by a call, is reported once per connection through
 * the on_lost callback given at the watch's start; this file knows nothing
 * of what a drop means (ownership.c does).
 *
 * Locks: an RPC client's @lock, then the watch's lock (a leaf).  The watch
 * thread holds its lock while it try-locks a client, never waits for one.
 *
 * Context: maru__rpc_call() from any thread; open/close are not concurrent
 * with calls.
 */
#include "private.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "mds_proto.h"
#include "net.h"
#include "util.h"
#include "zmtp.h"

#define RBUF_MIN (64u << 10) /* receive buffer, grown for big frames */
#define MSG_MAX MARU__RPC_MSG_MAX
#define IDLE_CHECK_NS 1000000ull /* reuse after this long: check first */

static void watch_attach(struct maru__rpc_watch *w, struct maru__rpc *rpc,
			 int fd);
static void watch_detach(struct maru__rpc_watch *w, int fd, bool dropped);

struct maru__rpc_slot {
	uint32_t seq;	/* of the request in flight */
	bool busy;	/* assigned to a caller */
	bool sent;	/* its request is on the wire */
	bool done;	/* @reply or @err holds the outcome */
	bool waiting;	/* the caller sleeps on @cv */
	int err;	/* when @done: 0, or why the connection went */
	uint8_t *reply; /* owns when @done && !@err: the body frame */
	size_t reply_len;
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

static uint64_t call_deadline(const struct maru__rpc *r)
{
	return maru__now_ns() +
	       (uint64_t)(r->timeout_ms > 0 ? r->timeout_ms : 0) * 1000000ull;
}

/* ------------------------------------------------------------------------ */
/* Connecting                                                               */

/* MARU_BUSY_POLL_US in ns: 0 (unset, bad) or at most 10 ms */
static uint64_t env_busy_poll_ns(void)
{
	const char *v = getenv("MARU_BUSY_POLL_US");
	char *end;
	long us;

	if (!v || !*v)
		return 0;
	us = strtol(v, &end, 10);
	if (*end || us <= 0)
		return 0;
	return (uint64_t)(us > 10000 ? 10000 : us) * 1000;
}

/*
 * Look at @pfd without sleeping for up to @spin_ns, yielding the CPU
 * between looks.  Return: true when something is ready.
 */
static bool spin_ready(struct pollfd *pfd, nfds_t n, uint64_t spin_ns)
{
	uint64_t until;

	if (!spin_ns)
		return false;
	until = maru__now_ns() + spin_ns;
	do {
		if (poll(pfd, n, 0) > 0)
			return true;
		sched_yield();
	} while (maru__now_ns() < until);
	return false;
}

/*
 * a reconnect failed (@lock held): its cause logged once, until it
 * changes or a connection is made again (calls fail every timeout_ms
 * while a server is away: one line, not one per call)
 */
static void dial_failed(struct maru__rpc *r, int rc, const char *why)
{
	/* one attempt per call: each failed call says its own cause */
	if (r->once && why[0])
		maru__fail(r->h, rc, "%s", why);
	if (!why[0] || rc == r->warned)
		return;
	r->warned = rc;
	if (rc == -EPROTO || rc == -EACCES)
		lerr(r->h, "%s", why);
	else
		lwarn(r->h, "%s", why);
}

/* take @fd as the connection (@lock held) */
static void conn_install(struct maru__rpc *r, int fd, const struct zmtp_conn *z,
			 struct zcurve *cz)
{
	r->fd = fd;
	r->z = *z;
	if (r->curve) {
		r->cz = *cz;
		zcurve_wipe(cz); /* the caller's copy holds the session key */
	}
	r->rb.len = 0;
	r->raw.len = 0;
	r->last_io_ns = maru__now_ns();
	if (r->warned)
		linfo(r->h, "%s: connected again", r->url);
	r->warned = 0;
	if (r->watch)
		watch_attach(r->watch, r, fd);
}

/*
 * conn_close - drop the connection (@lock held)
 * @dropped: the server went (EOF, reset, garbage), not our decision
 * @err: what every request in flight fails with (pipelined)
 */
static void conn_close(struct maru__rpc *r, bool dropped, int err)
{
	struct maru__rpc_slot *s;
	uint64_t one = 1;
	int i;

	if (r->fd < 0)
		return;
	if (r->watch && !r->in_sweep)
		watch_detach(r->watch, r->fd, dropped);
	if (r->leader && r->fd == r->leader_fd) {
		/* the leader polls it: wake it, it closes the fd */
		shutdown(r->fd, SHUT_RDWR);
		r->zombie_fd = r->fd;
	} else {
		close(r->fd);
	}
	r->fd = -1;
	r->rb.len = 0;
	r->raw.len = 0;
	buf_reset(&r->pend);
	if (r->raw.cap > RBUF_MIN)
		buf_free(&r->raw);
	memset(&r->z, 0, sizeof(r->z)); /* conn_install() sets it anew */
	if (r->curve)
		zcurve_wipe(&r->cz);
	/* the watch's sweep holds its lock: no logging there */
	if (dropped && !r->in_sweep)
		ldbg(r->h, "%s: connection lost (%s)", r->url, strerror(-err));
	if (!r->async)
		return;
	for (i = 0; i < r->max_inflight; i++) {
		s = &r->slots[i];
		if (s->busy && s->sent && !s->done) {
			s->done = true;
			s->err = err;
			if (s->waiting)
				pthread_cond_signal(&s->cv);
		}
	}
	if (r->leader && write(r->wakefd, &one, sizeof(one)) < 0) {
		/* counter saturated: the leader is awake anyway */
	}
}

/* ------------------------------------------------------------------------ */
/* Frames                                                                   */

/* send a pending PONG unless a request is half-written (@lock held) */
static int flush_pong(struct maru__rpc *r)
{
	ssize_t k;

	const uint8_t *p = r->z.pong;
	size_t n = r->z.pong_len;

	if ((!r->z.pong_len && !r->pend.len) || r->writing)
		return 0;
	if (r->curve) {
		/* sealed once; a newer PONG while one waits is dropped (any
		 * bytes from us count as life to the server) */
		if (!r->pend.len &&
		    zcurve_seal(&r->cz, r->z.pong, r->z.pong_len, &r->pend) < 0)
			return -ENOMEM;
		r->z.pong_len = 0;
		p = r->pend.data;
		n = r->pend.len;
	}
	k = send(r->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (k == (ssize_t)n) {
		r->z.pong_len = 0;
		buf_reset(&r->pend);
		return 0;
	}
	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;	      /* the next read or write tries again */
	return k < 0 ? -errno : -EIO; /* a cut PONG would corrupt the stream */
}

/*
 * next_msg - the next complete message in the receive buffer (@lock held);
 * a PING on the way gets its PONG
 * @body: gets its last frame (the delimiter and any envelope before it are
 *   skipped), borrowed until the next read into the buffer
 * Return: 1, 0 when more bytes are needed (z.need set), -EPROTO, or the
 * -errno of a PONG that could not be sent.
 */
static int next_msg(struct maru__rpc *r, const uint8_t **body, size_t *len)
{
	struct zmtp_msg m;
	uint64_t dropped;
	int rc, prc;

	if (!r->rb.data) {
		r->z.need = 0; /* the first read allocates it */
		return 0;
	}
	dropped = r->z.dropped;
	rc = zmtp_conn_next(&r->z, r->rb.data, r->rb.len, &m);
	if (r->z.dropped != dropped && !r->in_sweep)
		ldbg(r->h, "%s: dropped a reply of more than %d frames", r->url,
		     ZMTP_MAX_FRAMES);
	if (r->z.pong_len && (prc = flush_pong(r)) < 0)
		return prc;
	if (rc < 0)
		return -EPROTO; /* garbage, or over MSG_MAX */
	if (rc == 1) {
		*body = m.p[m.nf - 1];
		*len = m.n[m.nf - 1];
	}
	return rc;
}

/* CURVE: one read into @raw, whose MESSAGEs are opened into @rb */
static ssize_t conn_read_curve(struct maru__rpc *r)
{
	struct buf none = {0};
	size_t want, avail = r->raw.len - r->cz.rd;
	ssize_t k;
	int rc;

	if (!avail) {
		zcurve_shift(&r->cz, r->cz.rd);
		r->raw.len = 0;
	} else if (r->cz.rd && r->raw.cap - r->raw.len < r->cz.need) {
		memmove(r->raw.data, r->raw.data + r->cz.rd, avail);
		r->raw.len = avail;
		zcurve_shift(&r->cz, r->cz.rd);
	}
	want = r->cz.rd + r->cz.need > r->raw.len
		       ? r->cz.rd + r->cz.need - r->raw.len
		       : 1;
	if (r->raw.cap - r->raw.len < want &&
	    buf_reserve(&r->raw, want < RBUF_MIN ? RBUF_MIN : want) < 0)
		return -ENOMEM;
	for (;;) {
		size_t room = r->raw.cap - r->raw.len;

		k = recv(r->fd, r->raw.data + r->raw.len, room, MSG_DONTWAIT);
		if (k > 0) {
			r->read_full = (size_t)k == room;
			r->raw.len += (size_t)k;
			r->last_io_ns = maru__now_ns();
			break;
		}
		if (k == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? 0 : -errno;
	}
	if (r->z.rd == r->rb.len) {
		zmtp_conn_shift(&r->z, r->z.rd);
		r->rb.len = 0;
	} else if (r->z.rd > r->rb.cap / 2) {
		memmove(r->rb.data, r->rb.data + r->z.rd, r->rb.len - r->z.rd);
		r->rb.len -= r->z.rd;
		zmtp_conn_shift(&r->z, r->z.rd);
	}
	rc = zcurve_input(&r->cz, r->raw.data, r->raw.len, &r->rb, &none);
	buf_free(&none); /* (open: it writes nothing there) */
	if (rc < 0) {
		if (!r->in_sweep && r->cz.why)
			ldbg(r->h, "%s: CURVE: %s", r->url, r->cz.why);
		return rc == -ENOMEM ? -ENOMEM : -EPROTO;
	}
	return k;
}

/*
 * conn_read - one nonblocking read into the receive buffer (@lock held)
 * Return: bytes read (> 0), 0 when there is nothing, -ECONNRESET at EOF,
 * -ENOMEM, or another -errno.
 */
static ssize_t conn_read(struct maru__rpc *r)
{
	size_t want;
	ssize_t k;

	if (r->curve)
		return conn_read_curve(r);
	if (r->z.rd == r->rb.len) {
		zmtp_conn_shift(&r->z, r->z.rd);
		r->rb.len = 0;
	} else if (r->z.rd && (r->z.rd > r->rb.cap / 2 ||
			       r->rb.cap - r->z.rd < r->z.need)) {
		memmove(r->rb.data, r->rb.data + r->z.rd, r->rb.len - r->z.rd);
		r->rb.len -= r->z.rd;
		zmtp_conn_shift(&r->z, r->z.rd);
	}
	/* room for the whole next frame, and for a byte at least */
	want = r->z.rd + r->z.need > r->rb.len ? r->z.rd + r->z.need - r->rb.len
					       : 1;
	if (r->rb.cap - r->rb.len < want &&
	    buf_reserve(&r->rb, want < RBUF_MIN ? RBUF_MIN : want) < 0)
		return -ENOMEM;
	for (;;) {
		k = recv(r->fd, r->rb.data + r->rb.len, r->rb.cap - r->rb.len,
			 MSG_DONTWAIT);
		if (k > 0) {
			r->read_full = (size_t)k == r->rb.cap - r->rb.len;
			r->rb.len += (size_t)k;
			r->last_io_ns = maru__now_ns();
			return k;
		}
		if (k == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? 0 : -errno;
	}
}

/* the error a failed read means for the calls in flight */
static int lost_err(ssize_t rc)
{
	return rc == -EPROTO || rc == -ENOMEM ? (int)rc : -ECONNRESET;
}

/* route one received body frame to its slot; drops what matches nothing */
static bool dispatch(struct maru__rpc *r, const uint8_t *d, size_t n)
{
	struct maru__rpc_slot *s;
	struct mds_hdr hdr;
	int i;

	if (!r->async)
		return false; /* lock-step: a stray message, nobody waits */
	if (mds_hdr_decode(d, n, &hdr) < 0) {
		if (!r->in_sweep)
			ldbg(r->h,
			     "dropping a reply with a bad header (%zu "
			     "bytes)",
			     n);
		return false;
	}
	for (i = 0; i < r->max_inflight; i++) {
		s = &r->slots[i];
		if (s->busy && s->sent && !s->done && s->seq == hdr.sequence) {
			s->reply = malloc(n ? n : 1);
			if (s->reply) {
				memcpy(s->reply, d, n);
				s->reply_len = n;
			}
			s->err = s->reply ? 0 : -ENOMEM;
			s->done = true;
			if (s->waiting)
				pthread_cond_signal(&s->cv);
			return true;
		}
	}
	if (!r->in_sweep)
		ldbg(r->h, "dropping a late or unknown reply (sequence %u)",
		     hdr.sequence);
	return false;
}

/*
 * drain - read what is there and hand every complete reply to its slot
 * (@lock held, connection open).  A read that filled the buffer is
 * repeated; a short one means the socket was empty.
 * Return: 0, or the -errno that closed the connection.
 */
static int drain(struct maru__rpc *r)
{
	const uint8_t *body;
	bool got = false;
	uint64_t one = 1;
	size_t len;
	ssize_t k;
	int rc;

	for (;;) {
		while ((rc = next_msg(r, &body, &len)) == 1)
			got |= dispatch(r, body, len);
		if (rc < 0) {
			conn_close(r, true, rc);
			break;
		}
		k = conn_read(r);
		if (k == 0)
			break;
		if (k < 0) {
			rc = lost_err(k);
			conn_close(r, true, rc);
			break;
		}
		if (!r->read_full) {
			while ((rc = next_msg(r, &body, &len)) == 1)
				got |= dispatch(r, body, len);
			if (rc < 0)
				conn_close(r, true, rc);
			break;
		}
	}
	if (got && r->leader && write(r->wakefd, &one, sizeof(one)) < 0) {
		/* counter saturated: the leader is awake anyway */
	}
	return rc < 0 ? rc : 0;
}

/*
 * send_req - write [empty delimiter (MORE)][body] whole (@lock held).
 * While the socket is full, replies are read (pipelined), so that a server
 * blocked writing to us does not block us.  A request cut by the deadline
 * leaves a broken stream: the connection is closed.
 * Return: 0 or -errno (the connection is closed then).
 */
static int send_req(struct maru__rpc *r, struct maru__msg *m, uint64_t deadline)
{
	uint8_t hdr[2 + ZMTP_HDR_MAX] = {ZMTP_MORE, 0};
	struct iovec iov[2];
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	struct pollfd p;
	ssize_t k;
	int rc = 0, n;

	iov[0].iov_base = hdr;
	iov[0].iov_len = 2 + zmtp_hdr(hdr + 2, 0, m->len);
	iov[1].iov_base = m->data;
	iov[1].iov_len = m->len;
	if (r->curve) {
		/* [delimiter][body] as two MESSAGEs, written as one, after
		 * a sealed PONG that still waits (nonces stay in order) */
		buf_reset(&r->sb);
		if (r->pend.len &&
		    buf_put(&r->sb, r->pend.data, r->pend.len) < 0) {
			conn_close(r, false, -ECONNRESET);
			return -ENOMEM;
		}
		buf_reset(&r->pend);
		if (zcurve_seal_frame(&r->cz, ZMTP_MORE, NULL, 0, &r->sb) < 0 ||
		    zcurve_seal_frame(&r->cz, 0, m->data, m->len, &r->sb) < 0) {
			conn_close(r, false, -ECONNRESET);
			return -ENOMEM;
		}
		iov[0].iov_base = r->sb.data;
		iov[0].iov_len = r->sb.len;
		mh.msg_iovlen = 1;
	}
	r->writing = true;
	for (;;) {
		k = sendmsg(r->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			while (mh.msg_iovlen &&
			       (size_t)k >= mh.msg_iov->iov_len) {
				k -= (ssize_t)mh.msg_iov->iov_len;
				mh.msg_iov++;
				mh.msg_iovlen--;
			}
			if (!mh.msg_iovlen)
				break;
			mh.msg_iov->iov_base =
				(uint8_t *)mh.msg_iov->iov_base + k;
			mh.msg_iov->iov_len -= (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EAGAIN) {
			rc = -errno;
			r->writing = false;
			conn_close(r, true, -ECONNRESET);
			return rc == -EPIPE ? -ECONNRESET : rc;
		}
		p = (struct pollfd){.fd = r->fd,
				    .events =
					    POLLOUT | (r->async ? POLLIN : 0)};
		n = poll(&p, 1, net_ms_left(deadline));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -ETIMEDOUT;
			r->writing = false;
			conn_close(r, false, -ECONNRESET);
			return rc;
		}
		if (p.revents & POLLIN) {
			rc = drain(r);
			if (rc < 0) {
				r->writing = false;
				return rc;
			}
		}
	}
	r->writing = false;
	r->last_io_ns = maru__now_ns();
	if (r->sb.cap > (1u << 20))
		buf_free(&r->sb); /* one big request does not stay */
	rc = flush_pong(r);
	if (rc < 0)
		conn_close(r, true, -ECONNRESET);
	return rc;
}

/* before reusing an idle connection: is the server still there? */
static void check_idle(struct maru__rpc *r)
{
	if (r->fd >= 0 && !r->leader &&
	    maru__now_ns() - r->last_io_ns >= IDLE_CHECK_NS)
		drain(r);
}

/* ------------------------------------------------------------------------ */
/* Open, close, watch                                                       */

void maru__rpc_set_watch(struct maru__rpc *r, struct maru__rpc_watch *w)
{
	pthread_mutex_lock(&r->lock);
	if (r->fd >= 0 && r->watch)
		watch_detach(r->watch, r->fd, false);
	r->watch = w;
	if (r->fd >= 0 && w)
		watch_attach(w, r, r->fd);
	pthread_mutex_unlock(&r->lock);
}

/*
 * the watch's look at an idle connection: read what is there (a PING gets
 * its PONG).  Never blocks: a busy client is skipped.  Return: 1 when the
 * connection turned out dropped (it is closed, and not detached: the
 * caller holds the watch's lock and marks it), else 0.
 */
static int rpc_idle(struct maru__rpc *r)
{
	int rc = 0;

	if (pthread_mutex_trylock(&r->lock))
		return 0; /* a call is in progress: it reads */
	if (r->fd < 0 || r->leader || r->connecting ||
	    (r->async && r->nfree != r->max_inflight))
		goto out_unlock;
	r->in_sweep = true;
	if (drain(r) < 0)
		rc = 1;
	r->in_sweep = false;
out_unlock:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int maru__rpc_open(struct maru__rpc *r, const struct maru_handler *h,
		   const char *url, int timeout_ms, bool async,
		   int max_inflight)
{
	int i, rc;

	memset(r, 0, sizeof(*r));
	r->h = h;
	r->curve = h ? h->curve : NULL;
	r->once = h && !h->cfg.connect_retry;
	r->timeout_ms = timeout_ms;
	r->async = async;
	r->max_inflight = max_inflight > 0 ? max_inflight : 1;
	r->next_seq = 1;
	r->spin_ns = env_busy_poll_ns();
	r->fd = r->wakefd = r->zombie_fd = r->leader_fd = -1;
	r->url = strdup(url);
	if (!r->url)
		return -ENOMEM;
	rc = maru__rpc_parse_url(r, url);
	if (rc < 0) {
		lerr(h, "%s: not a tcp://host:port address", url);
		goto out_url;
	}
	/* upstream's DEALER uses 8 random bytes as its identity */
	if (getrandom(r->ident, sizeof(r->ident), 0) != sizeof(r->ident)) {
		uint64_t t = maru__now_ns() ^ (uint64_t)(uintptr_t)r;

		memcpy(r->ident, &t, sizeof(r->ident));
	}
	r->ident[0] |= 1; /* a leading 0 byte is reserved */
	pthread_mutex_init(&r->lock, NULL);
	rc = cond_init_mono(&r->space_cv);
	if (rc < 0)
		goto out_lock;
	rc = cond_init_mono(&r->conn_cv);
	if (rc < 0)
		goto out_space;
	if (!async)
		return 0;

	rc = -ENOMEM;
	r->slots = calloc((size_t)r->max_inflight, sizeof(*r->slots));
	r->free_slots = calloc((size_t)r->max_inflight, sizeof(int));
	if (!r->slots || !r->free_slots)
		goto out_slots;
	for (i = 0; i < r->max_inflight; i++) {
		cond_init_mono(&r->slots[i].cv);
		/* pop order 0, 1, 2 ... */
		r->free_slots[i] = r->max_inflight - 1 - i;
	}
	r->nfree = r->max_inflight;
	r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->wakefd < 0) {
		rc = -errno;
		for (i = 0; i < r->max_inflight; i++)
			pthread_cond_destroy(&r->slots[i].cv);
		goto out_slots;
	}
	return 0;

out_slots:
	free(r->slots);
	free(r->free_slots);
	pthread_cond_destroy(&r->conn_cv);
out_space:
	pthread_cond_destroy(&r->space_cv);
out_lock:
	pthread_mutex_destroy(&r->lock);
	free(r->host);
out_url:
	free(r->url);
	r->url = NULL;
	return rc;
}

void maru__rpc_close(struct maru__rpc *r)
{
	int i;

	if (!r->url)
		return;
	pthread_mutex_lock(&r->lock);
	conn_close(r, false, -ECONNRESET);
	pthread_mutex_unlock(&r->lock);
	if (r->zombie_fd >= 0)
		close(r->zombie_fd);
	if (r->slots) {
		for (i = 0; i < r->max_inflight; i++) {
			free(r->slots[i].reply);
			pthread_cond_destroy(&r->slots[i].cv);
		}
	}
	free(r->slots);
	free(r->free_slots);
	if (r->wakefd >= 0)
		close(r->wakefd);
	buf_free(&r->rb);
	buf_free(&r->raw);
	buf_free(&r->sb);
	buf_free(&r->pend);
	pthread_cond_destroy(&r->conn_cv);
	pthread_cond_destroy(&r->space_cv);
	pthread_mutex_destroy(&r->lock);
	free(r->host);
	free(r->url);
	r->url = NULL;
}

void maru__rpc_reply_release(struct maru__rpc_reply *rep)
{
	free(rep->buf);
	rep->buf = NULL;
	rep->payload = NULL;
	rep->len = 0;
}

/* take @buf (a body frame) into @rep; -EPROTO for a bad header */
static int reply_take(struct maru__rpc_reply *rep, uint8_t *buf, size_t n,
		      uint32_t *seq)
{
	struct mds_hdr hdr;

	rep->buf = buf;
	if (mds_hdr_decode(buf, n, &hdr) < 0) {
		maru__rpc_reply_release(rep);
		return -EPROTO;
	}
	rep->payload = buf + MDS_HDR_SIZE;
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
/* Lock-step                                                                */

static int call_sync(struct maru__rpc *r, struct maru__msg *m,
		     struct maru__rpc_reply *out)
{
	uint64_t deadline = call_deadline(r);
	const uint8_t *body;
	char why[256];
	struct pollfd p;
	uint32_t seq, rseq;
	uint8_t *copy;
	struct zmtp_conn z;
	struct zcurve cz;
	int rc, fd;
	size_t len;
	ssize_t k;

	pthread_mutex_lock(&r->lock);
	if (maru__now_ns() >= deadline) {
		/* queued behind slower calls all along: do not send a
		 * request we could not wait for */
		rc = -ETIMEDOUT;
		goto out_unlock;
	}
	check_idle(r);
	if (r->fd < 0) {
		rc = maru__rpc_dial(r, deadline, &fd, &z, &cz, r->once, why,
				    sizeof(why));
		if (rc < 0) {
			dial_failed(r, rc, why);
			goto out_unlock;
		}
		conn_install(r, fd, &z, &cz);
	}
	seq = take_seq(r);
	mds_hdr_put(m->data, m->type, 0, seq,
		    (uint32_t)(m->len - MDS_HDR_SIZE));
	rc = send_req(r, m, deadline);
	if (rc < 0)
		goto out_unlock;
	for (;;) {
		rc = next_msg(r, &body, &len);
		if (rc == 1)
			break;
		if (rc < 0) {
			conn_close(r, true, rc);
			goto out_unlock;
		}
		/* poll first: a reply is never there right after the send */
		p = (struct pollfd){.fd = r->fd, .events = POLLIN};
		rc = spin_ready(&p, 1, r->spin_ns)
			     ? 0
			     : net_wait_fd(r->fd, POLLIN, deadline);
		if (rc < 0) {
			/* a timeout: the late reply goes with the connection */
			conn_close(r, false, rc);
			goto out_unlock;
		}
		k = conn_read(r);
		if (k < 0) {
			rc = lost_err(k);
			conn_close(r, true, rc);
			goto out_unlock;
		}
	}
	copy = malloc(len ? len : 1);
	if (!copy) {
		rc = -ENOMEM;
		goto out_unlock;
	}
	memcpy(copy, body, len);
	pthread_mutex_unlock(&r->lock);
	rc = reply_take(out, copy, len, &rseq);
	if (rc == 0 && rseq != seq && rseq != 0) {
		maru__rpc_reply_release(out);
		rc = -EPROTO;
	}
	return rc;

out_unlock:
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Pipelined                                                                */

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
		if (!r->leader && r->fd >= 0) {
			r->leader = true;
			r->leader_fd = r->fd;
			pthread_mutex_unlock(&r->lock);
			pfd[0] = (struct pollfd){.fd = r->leader_fd,
						 .events = POLLIN};
			pfd[1] = (struct pollfd){.fd = r->wakefd,
						 .events = POLLIN};
			if ((spin_ready(pfd, 2, r->spin_ns) ||
			     poll(pfd, 2, net_ms_left(deadline)) > 0) &&
			    (pfd[1].revents & POLLIN)) {
				if (read(r->wakefd, &v, sizeof(v)) < 0) {
					/* already reset by another leader */
				}
			}
			pthread_mutex_lock(&r->lock);
			r->leader = false;
			r->leader_fd = -1;
			if (r->zombie_fd >= 0) {
				close(r->zombie_fd);
				r->zombie_fd = -1;
			}
			if (r->fd >= 0)
				drain(r);
		} else {
			s->waiting = true;
			abstime(deadline, &ts);
			pthread_cond_timedwait(&s->cv, &r->lock, &ts);
			s->waiting = false;
		}
	}
	return s->err;
}

static void slot_release(struct maru__rpc *r, int idx)
{
	struct maru__rpc_slot *s = &r->slots[idx];

	free(s->reply);
	s->reply = NULL;
	s->busy = s->sent = s->done = s->waiting = false;
	s->err = 0;
	r->free_slots[r->nfree++] = idx;
	if (r->space_waiters)
		pthread_cond_signal(&r->space_cv);
}

/* make sure there is a connection (@lock held; dropped while dialling) */
static int ensure_conn(struct maru__rpc *r, uint64_t deadline)
{
	struct timespec ts;
	struct zmtp_conn z;
	struct zcurve cz;
	char why[256];
	int rc, fd;

	check_idle(r);
	while (r->fd < 0) {
		if (maru__now_ns() >= deadline)
			return -ETIMEDOUT;
		if (r->connecting) {
			abstime(deadline, &ts);
			pthread_cond_timedwait(&r->conn_cv, &r->lock, &ts);
			continue;
		}
		r->connecting = true;
		pthread_mutex_unlock(&r->lock);
		rc = maru__rpc_dial(r, deadline, &fd, &z, &cz, r->once, why,
				    sizeof(why));
		pthread_mutex_lock(&r->lock);
		r->connecting = false;
		pthread_cond_broadcast(&r->conn_cv);
		if (rc < 0) {
			dial_failed(r, rc, why);
			return rc;
		}
		conn_install(r, fd, &z, &cz);
	}
	return 0;
}

static int call_async(struct maru__rpc *r, struct maru__msg *m,
		      struct maru__rpc_reply *out)
{
	uint64_t deadline = call_deadline(r);
	struct maru__rpc_slot *s;
	struct timespec ts;
	uint8_t *buf = NULL;
	size_t len = 0;
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
	rc = ensure_conn(r, deadline);
	if (rc == 0 && maru__now_ns() >= deadline)
		rc = -ETIMEDOUT; /* the wait for a slot or the dial took it */
	if (rc == 0) {
		s->seq = take_seq(r);
		mds_hdr_put(m->data, m->type, 0, s->seq,
			    (uint32_t)(m->len - MDS_HDR_SIZE));
		rc = send_req(r, m, deadline);
	}
	if (rc == 0) {
		s->sent = true;
		rc = wait_slot(r, s, deadline);
	}
	if (rc == 0) {
		buf = s->reply;
		len = s->reply_len;
		s->reply = NULL;
	}
	slot_release(r, idx);
	hand_off(r);
out_unlock:
	pthread_mutex_unlock(&r->lock);
	if (rc < 0)
		return rc;
	return reply_take(out, buf, len, NULL);
}

int maru__rpc_connect(struct maru__rpc *r)
{
	uint64_t deadline = call_deadline(r);
	struct zmtp_conn z;
	struct zcurve cz;
	char why[256];
	int rc = 0, fd;

	/* connect is not concurrent with calls: dial with @lock held */
	pthread_mutex_lock(&r->lock);
	if (r->fd < 0) {
		rc = maru__rpc_dial(r, deadline, &fd, &z, &cz, true, why,
				    sizeof(why));
		if (rc == 0)
			conn_install(r, fd, &z, &cz);
		else if (why[0])
			lerr(r->h, "%s", why);
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int maru__rpc_call(struct maru__rpc *r, struct maru__msg *m,
		   struct maru__rpc_reply *out)
{
	out->buf = NULL;
	return r->async ? call_async(r, m, out) : call_sync(r, m, out);
}

/* ------------------------------------------------------------------------ */
/* The watch thread                                                         */

#define SWEEP_NS (250ull * 1000000ull) /* idle connections read this often */

/* @x dropped (@w->lock held): report it once, log it outside the lock */
static void fire(struct maru__rpc_watch *w, struct maru__rpc_watched *x)
{
	if (x->fired)
		return;
	x->fired = true;
	w->on_lost(w->arg);
	snprintf(w->lost, sizeof(w->lost), "%s", x->rpc->url);
}

/* watch @fd, a connection of @rpc (@rpc's lock held) */
static void watch_attach(struct maru__rpc_watch *w, struct maru__rpc *rpc,
			 int fd)
{
	pthread_mutex_lock(&w->lock);
	if (!w->running || w->stop)
		goto out_unlock;
	if (array_grow(&w->w, &w->cap, w->n, sizeof(*w->w), 4))
		goto out_unlock;
	w->w[w->n++] = (struct maru__rpc_watched){fd, rpc, false, false};
	eventfd_write(w->wakefd, 1);
out_unlock:
	pthread_mutex_unlock(&w->lock);
}

/*
 * stop watching @fd before it is closed (its client's lock held).
 * @dropped: the server went (reported once per connection), else it was
 * our decision (a timeout, close).
 */
static void watch_detach(struct maru__rpc_watch *w, int fd, bool dropped)
{
	size_t i;

	pthread_mutex_lock(&w->lock);
	for (i = 0; i < w->n; i++) {
		if (w->w[i].fd != fd || w->w[i].dead)
			continue;
		if (dropped)
			fire(w, &w->w[i]);
		w->w[i].dead = true;
	}
	if (w->running)
		eventfd_write(w->wakefd, 1);
	pthread_mutex_unlock(&w->lock);
}

/*
 * The poll set for the next round (@lock held): the wake-up eventfd, then
 * every live watch not yet fired (@idx maps items to watches); dead ones
 * are dropped here.  Return: the number of items, 0 when out of memory.
 */
static size_t build_items(struct maru__rpc_watch *w, struct pollfd **items,
			  size_t **idx, size_t *cap)
{
	struct pollfd *ni;
	size_t i, k = 0, *nx;

	for (i = 0; i < w->n;) {
		if (w->w[i].dead)
			w->w[i] = w->w[--w->n];
		else
			i++;
	}
	if (w->n + 1 > *cap) {
		ni = realloc(*items, (w->n + 1) * sizeof(*ni));
		if (ni)
			*items = ni;
		nx = realloc(*idx, (w->n + 1) * sizeof(*nx));
		if (nx)
			*idx = nx;
		if (!ni || !nx)
			return 0;
		*cap = w->n + 1;
	}
	(*items)[k++] = (struct pollfd){w->wakefd, POLLIN, 0};
	for (i = 0; i < w->n; i++) {
		if (w->w[i].fired)
			continue;
		(*idx)[k] = i;
		(*items)[k++] = (struct pollfd){w->w[i].fd, POLLRDHUP, 0};
	}
	return k;
}

/* read every idle connection (@lock held): PINGs answered, drops found */
static void sweep(struct maru__rpc_watch *w)
{
	size_t i;

	for (i = 0; i < w->n; i++) {
		if (w->w[i].dead || w->w[i].fired)
			continue;
		if (rpc_idle(w->w[i].rpc)) {
			fire(w, &w->w[i]);
			w->w[i].dead = true; /* closed by rpc_idle */
		}
	}
}

/* log a drop noticed under the lock, outside it (the Python log handler
 * may take the GIL) */
static void log_lost(struct maru__rpc_watch *w)
{
	char lost[sizeof(w->lost)];

	pthread_mutex_lock(&w->lock);
	memcpy(lost, w->lost, sizeof(lost));
	w->lost[0] = '\0';
	pthread_mutex_unlock(&w->lock);
	if (lost[0])
		linfo(w->h, "connection to %s lost", lost);
}

static void *watch_thread(void *arg)
{
	struct maru__rpc_watch *w = arg;
	uint64_t sweep_at = 0, now;
	struct pollfd *items = NULL;
	size_t cap = 0, n, i, *idx = NULL;
	struct maru__rpc_watched *x;
	int tmo = (int)(SWEEP_NS / 1000000), wish, rc;
	eventfd_t v;

	for (;;) {
		pthread_mutex_lock(&w->lock);
		if (w->stop) {
			pthread_mutex_unlock(&w->lock);
			break;
		}
		n = build_items(w, &items, &idx, &cap);
		pthread_mutex_unlock(&w->lock);
		if (!n) {
			usleep(10000); /* out of memory: try again */
			continue;
		}
		rc = poll(items, (nfds_t)n, tmo);
		if (rc > 0 && (items[0].revents & POLLIN))
			eventfd_read(w->wakefd, &v);

		pthread_mutex_lock(&w->lock);
		for (i = 1; rc > 0 && i < n; i++) {
			if (!items[i].revents)
				continue;
			x = &w->w[idx[i]];
			/* attach only appends and only we compact: same slot */
			if (x->dead || x->fd != items[i].fd)
				continue;
			fire(w, x);
			if (rpc_idle(x->rpc))
				x->dead = true; /* closed it */
		}
		now = maru__now_ns();
		if (now >= sweep_at) {
			sweep(w);
			sweep_at = now + SWEEP_NS;
		}
		pthread_mutex_unlock(&w->lock);
		log_lost(w);
		now = maru__now_ns();
		tmo = now >= sweep_at ? 0
				      : (int)((sweep_at - now) / 1000000) + 1;
		wish = w->on_tick(w->arg);
		if (wish >= 0 && wish < tmo)
			tmo = wish;
	}
	free(items);
	free(idx);
	return NULL;
}

void maru__rpc_watch_init(struct maru__rpc_watch *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	w->wakefd = -1;
}

void maru__rpc_watch_destroy(struct maru__rpc_watch *w)
{
	pthread_mutex_destroy(&w->lock);
}

int maru__rpc_watch_start(struct maru__rpc_watch *w,
			  const struct maru_handler *h,
			  void (*on_lost)(void *arg), int (*on_tick)(void *arg),
			  void *arg)
{
	int rc, fd;

	fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	pthread_mutex_lock(&w->lock);
	w->wakefd = fd;
	w->h = h;
	w->on_lost = on_lost;
	w->on_tick = on_tick;
	w->arg = arg;
	w->lost[0] = '\0';
	w->stop = false;
	w->running = true;
	pthread_mutex_unlock(&w->lock);
	rc = -pthread_create(&w->thread, NULL, watch_thread, w);
	if (rc < 0) {
		pthread_mutex_lock(&w->lock);
		w->running = false;
		w->wakefd = -1;
		pthread_mutex_unlock(&w->lock);
		close(fd);
	}
	return rc;
}

void maru__rpc_watch_stop(struct maru__rpc_watch *w)
{
	size_t i;

	pthread_mutex_lock(&w->lock);
	if (!w->running) {
		pthread_mutex_unlock(&w->lock);
		return;
	}
	w->stop = true;
	eventfd_write(w->wakefd, 1);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);

	pthread_mutex_lock(&w->lock);
	/* every watched connection was detached by now */
	for (i = 0; i < w->n; i++)
		if (!w->w[i].dead)
			lwarn(w->h, "connection %zu still watched at stop", i);
	free(w->w);
	w->w = NULL;
	w->n = w->cap = 0;
	w->running = false;
	close(w->wakefd);
	w->wakefd = -1;
	pthread_mutex_unlock(&w->lock);
}
