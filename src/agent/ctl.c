/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctl.c - maru-agent's control port (agent_proto.h)
 *
 * A REP socket as ZeroMQ peers see it: ZMTP 3.1 with the NULL mechanism,
 * or CURVE (zcurve.h) when the agent has a certificate, the same state
 * machines maru-server and libmaru use (zmtp.h).  Requests are few (a
 * HELLO per client, an ACCESS per region it touches, STATS), so each
 * connection gets a thread that blocks on it; --max-connections caps
 * them.  A connection that has not finished its handshake in
 * HANDSHAKE_MS, or that sends what is not ZMTP, is closed; a request that
 * does not decode gets an error reply naming the cause and the
 * connection stays.
 *
 * Context: the accept loop in main's thread; one thread per connection,
 * which owns it (struct conn) and frees it.
 */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "log.h"
#include "mds_proto.h"
#include "net.h"
#include "util.h"
#include "zmtp.h"

#define HANDSHAKE_MS 10000
#define WRITE_MS 10000

#define IDLE_MS (10 * 60 * 1000) /* a connection silent this long ends */
#define BYE_WAIT_MS                                                            \
	1000 /* BYE waits this long for transfers (below                       \
	      * a client's timeout: it then says so) */

struct conn {
	struct agent *a;
	int fd;
	char peer[64];
	struct agent_session *session; /* HELLO's; ended with the connection */
};

/* the connection's session ends (BYE, a new HELLO, the end) */
static int end_session(struct conn *c)
{
	int rc = 0;

	if (c->session) {
		rc = session_end(c->a, c->session, BYE_WAIT_MS);
		session_free(c->a, c->session);
		c->session = NULL;
	}
	return rc;
}

int ctl_listen(struct agent *a)
{
	struct addrinfo hints = {0}, *ai, *p;
	char port[8];
	int fd = -1, one = 1, rc;

	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(port, sizeof(port), "%u", a->cfg.port);
	rc = getaddrinfo(strcmp(a->cfg.host, "*") ? a->cfg.host : NULL, port,
			 &hints, &ai);
	if (rc) {
		log_err("--host %s: %s", a->cfg.host, gai_strerror(rc));
		return -EINVAL;
	}
	for (p = ai; p; p = p->ai_next) {
		fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC,
			    p->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, p->ai_addr, p->ai_addrlen) == 0 &&
		    listen(fd, 128) == 0)
			break;
		rc = errno;
		close(fd);
		fd = -1;
		errno = rc;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		rc = -errno;
		log_err("cannot listen on %s:%u: %s", a->cfg.host, a->cfg.port,
			strerror(-rc));
		return rc;
	}
	a->listen_fd = fd;
	return 0;
}

/* the reply body (envelope + payload) for request @h into @b */
static void reply_begin(struct mp_wr *w, const struct mds_hdr *h)
{
	mp_room(w, MDS_HDR_SIZE);
	(void)h;
}

static void reply_end(struct buf *b, const struct mds_hdr *h)
{
	if (b->len >= MDS_HDR_SIZE)
		mds_hdr_put(b->data, mds_resp_type(h->msg_type), h->flags,
			    h->sequence, (uint32_t)(b->len - MDS_HDR_SIZE));
}

static void reply_error(struct buf *b, const struct mds_hdr *h, const char *why)
{
	struct mp_wr w = {b, 0};

	buf_reset(b);
	reply_begin(&w, h);
	mp_put_map(&w, 2);
	mp_put_key(&w, "success");
	mp_put_bool(&w, false);
	mp_put_key(&w, "error");
	mp_put_str(&w, why, (uint32_t)strlen(why));
	reply_end(b, h);
}

/* answer one request body @p[0..@n) into @b */
static void handle(struct conn *c, const uint8_t *p, size_t n, struct buf *b)
{
	struct agent *a = c->a;
	struct mds_hdr h = {0};
	struct agent_access_req q;
	struct mp_wr w = {b, 0};
	const uint8_t *supersede;
	const char *why = NULL;
	int rc, i;

	buf_reset(b);
	if (mds_hdr_decode(p, n, &h) < 0) {
		agent_count(a, AGENT_ST_BAD, 1);
		reply_error(b, &h, "not a Maru request (bad header)");
		return;
	}
	p += MDS_HDR_SIZE;
	n = h.payload_len;
	switch (h.msg_type) {
	case AGENT_HELLO:
		if (agent_decode_hello(p, n, &supersede) < 0) {
			agent_count(a, AGENT_ST_BAD, 1);
			reply_error(b, &h,
				    "HELLO: supersede must be a session "
				    "id (16 bytes)");
			return;
		}
		(void)end_session(c);
		c->session = session_new(a, supersede);
		if (!c->session) {
			reply_error(b, &h, "out of memory");
			return;
		}
		reply_begin(&w, &h);
		mp_put_map(&w, 4);
		mp_put_key(&w, "success");
		mp_put_bool(&w, true);
		mp_put_key(&w, "worker");
		mp_put_bin(&w, a->worker_addr, (uint32_t)a->worker_addr_len);
		mp_put_key(&w, "session");
		mp_put_bin(&w, session_id(c->session), AGENT_SESSION_LEN);
		mp_put_key(&w, "version");
		mp_put_str(&w, MARU_VERSION, (uint32_t)strlen(MARU_VERSION));
		break;
	case AGENT_ACCESS:
		if (agent_decode_access(p, n, &q, &why) < 0) {
			agent_count(a, AGENT_ST_BAD, 1);
			reply_error(b, &h, why);
			return;
		}
		if (!c->session) {
			agent_count(a, AGENT_ST_DENIED, 1);
			reply_error(b, &h, "ACCESS before HELLO");
			return;
		}
		rc = lend_access(a, &q, &why);
		if (rc == 0 &&
		    session_grant(a, c->session, q.region_id, q.token) < 0) {
			rc = -ENOMEM;
			why = "out of memory";
		}
		if (rc < 0) {
			agent_count(a, AGENT_ST_DENIED, 1);
			log_info("%s: ACCESS to region %" PRIu64 " refused: %s",
				 c->peer, q.region_id, why);
			reply_error(b, &h, why);
			return;
		}
		agent_count(a, AGENT_ST_GRANTED, 1);
		reply_begin(&w, &h);
		mp_put_map(&w, 2);
		mp_put_key(&w, "success");
		mp_put_bool(&w, true);
		mp_put_key(&w, "length");
		mp_put_uint(&w, q.length);
		break;
	case AGENT_BYE:
		/* {session}: that one (a client's failed session, whichever
		 * connection made it); {}: this connection's */
		if (agent_decode_hello(p, n, &supersede) < 0) {
			agent_count(a, AGENT_ST_BAD, 1);
			reply_error(b, &h,
				    "BYE: session must be a session id "
				    "(16 bytes)");
			return;
		}
		rc = supersede ? session_end_id(a, supersede, BYE_WAIT_MS)
			       : end_session(c);
		if (supersede && c->session &&
		    !memcmp(session_id(c->session), supersede,
			    AGENT_SESSION_LEN))
			rc = end_session(c) < 0 ? -EBUSY : rc;
		if (rc < 0) {
			reply_error(b, &h,
				    "transfers of the session are still "
				    "in flight");
			return;
		}
		reply_begin(&w, &h);
		mp_put_map(&w, 1);
		mp_put_key(&w, "success");
		mp_put_bool(&w, true);
		break;
	case AGENT_STATS:
		reply_begin(&w, &h);
		mp_put_map(&w, AGENT_ST_N + 1);
		mp_put_key(&w, "success");
		mp_put_bool(&w, true);
		for (i = 0; i < AGENT_ST_N; i++) {
			const char *nm = agent_stat_name(i);

			mp_put_str(&w, nm, (uint32_t)strlen(nm));
			mp_put_uint(&w,
				    atomic_load_explicit(&a->st[i],
							 memory_order_relaxed));
		}
		break;
	default:
		agent_count(a, AGENT_ST_BAD, 1);
		reply_error(b, &h,
			    "unknown request type (is this maru-agent's "
			    "port?)");
		return;
	}
	if (w.err) {
		reply_error(b, &h, "out of memory");
		return;
	}
	reply_end(b, &h);
}

/* plaintext frames @pl out, sealed under CURVE. Return: 0 or -errno */
static int send_plain(struct conn *c, struct zcurve *cz, struct buf *pl,
		      struct buf *out)
{
	int rc;

	if (!pl->len)
		return 0;
	if (cz) {
		buf_reset(out);
		rc = zcurve_seal(cz, pl->data, pl->len, out);
		buf_reset(pl);
		if (rc < 0)
			return rc;
		return net_send_all(c->fd, out->data, out->len,
				    now_ns() + WRITE_MS * 1000000ull);
	}
	rc = net_send_all(c->fd, pl->data, pl->len,
			  now_ns() + WRITE_MS * 1000000ull);
	buf_reset(pl);
	return rc;
}

static int put_frame(struct buf *b, uint8_t flags, const uint8_t *p, size_t n)
{
	uint8_t hdr[ZMTP_HDR_MAX];

	if (buf_put(b, hdr, zmtp_hdr(hdr, flags, n)) < 0 ||
	    (n && buf_put(b, p, n) < 0))
		return -ENOMEM;
	return 0;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct agent *a = c->a;
	struct buf raw = {0}, in = {0}, out = {0}, pl = {0}, body = {0};
	struct zcurve *cz = NULL;
	struct zmtp_conn z;
	struct zmtp_msg m;
	uint64_t deadline = now_ns() + HANDSHAKE_MS * 1000000ull;
	const char *why = "closed";
	uint8_t g[ZMTP_GREETING_LEN + 128];
	ssize_t k;
	int rc;

	zmtp_conn_init(&z, "REP", 4096, AGENT_MSG_MAX);
	if (a->curve) {
		cz = calloc(1, sizeof(*cz));
		if (!cz || zcurve_server(cz, a->curve, a->allow, "REP",
					 AGENT_MSG_MAX, &out) < 0) {
			why = "out of memory";
			goto out;
		}
		z.st = ZMTP_ST_OPEN;
		rc = net_send_all(c->fd, out.data, out.len, deadline);
	} else {
		zmtp_greeting(g, true);
		k = zmtp_ready(g + ZMTP_GREETING_LEN,
			       sizeof(g) - ZMTP_GREETING_LEN, "REP", NULL, 0);
		rc = k < 0 ? (int)k
			   : net_send_all(c->fd, g,
					  ZMTP_GREETING_LEN + (size_t)k,
					  deadline);
	}
	if (rc < 0) {
		why = "write failed";
		goto out;
	}
	for (;;) {
		struct buf *rb = cz ? &raw : &in;
		size_t at = cz ? cz->rd : z.rd;
		size_t need = cz ? cz->need : z.need;
		bool open = cz ? zcurve_open(cz) : z.st == ZMTP_ST_OPEN;

		if (need < 4096)
			need = 4096;
		if (buf_reserve(rb, at + need - rb->len) < 0) {
			why = "out of memory";
			break;
		}
		/* open: IDLE_MS of silence ends it (and its session) */
		k = net_recv_some(c->fd, rb->data + rb->len, rb->cap - rb->len,
				  open ? now_ns() + IDLE_MS * 1000000ull
				       : deadline);
		if (k <= 0) {
			why = k == 0 || k == -ECONNRESET ? "closed by the peer"
			      : k == -ETIMEDOUT && open
				      ? "silent for 10 minutes"
			      : k == -ETIMEDOUT ? "no handshake in time"
						: "read failed";
			break;
		}
		rb->len += (size_t)k;
		if (atomic_load(&a->stopping))
			break;
		if (cz) {
			buf_reset(&out);
			rc = zcurve_input(cz, raw.data, raw.len, &in, &out);
			if (out.len &&
			    net_send_all(c->fd, out.data, out.len,
					 now_ns() + WRITE_MS * 1000000ull) < 0)
				rc = -EIO;
			if (rc < 0) {
				why = rc == -EACCES ? "CURVE: client key "
						      "not allowed"
				      : cz->why	    ? cz->why
						    : strerror(-rc);
				if (rc == -EACCES)
					agent_count(a, AGENT_ST_REFUSED_CONN,
						    1);
				break;
			}
			z.minor = cz->minor;
			/* drop the raw bytes taken */
			if (cz->rd) {
				memmove(raw.data, raw.data + cz->rd,
					raw.len - cz->rd);
				raw.len -= cz->rd;
				zcurve_shift(cz, cz->rd);
			}
		}
		while ((rc = zmtp_conn_next(&z, in.data, in.len, &m)) == 1) {
			/* REP: [empty delimiter][body] */
			if (m.nf != 2 || m.n[0] != 0) {
				rc = -EPROTO;
				break;
			}
			handle(c, m.p[1], m.n[1], &body);
			if (put_frame(&pl, ZMTP_MORE, NULL, 0) < 0 ||
			    put_frame(&pl, 0, body.data, body.len) < 0) {
				rc = -ENOMEM;
				break;
			}
		}
		if (z.pong_len) {
			if (buf_put(&pl, z.pong, z.pong_len) < 0)
				rc = -ENOMEM;
			z.pong_len = 0;
		}
		if (rc >= 0 && send_plain(c, cz, &pl, &out) < 0)
			rc = -EIO;
		if (rc < 0) {
			why = rc == -EPROTO	? "not a ZMTP REQ peer"
			      : rc == -EMSGSIZE ? "request too large"
						: strerror(-rc);
			break;
		}
		/* drop the messages taken */
		if (z.rd) {
			memmove(in.data, in.data + z.rd, in.len - z.rd);
			in.len -= z.rd;
			zmtp_conn_shift(&z, z.rd);
		}
	}
out:
	log_dbg("%s: connection ends: %s", c->peer, why);
	if (end_session(c) < 0)
		log_warn("%s: the session ended with transfers in flight",
			 c->peer);
	if (cz) {
		zcurve_wipe(cz);
		free(cz);
	}
	buf_free(&raw);
	buf_free(&in);
	buf_free(&out);
	buf_free(&pl);
	buf_free(&body);
	close(c->fd);
	free(c);
	atomic_fetch_sub(&a->conns, 1);
	agent_count(a, AGENT_ST_SESSIONS, -1);
	return NULL;
}

static void peer_name(int fd, char *out, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *s = (struct sockaddr_in *)&ss;

			inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
			port = ntohs(s->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;

			inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
			port = ntohs(s->sin6_port);
		}
	}
	snprintf(out, n, "%s:%u", host, port);
}

void ctl_accept_loop(struct agent *a)
{
	struct pollfd p = {.fd = a->listen_fd, .events = POLLIN};
	pthread_attr_t attr;
	uint64_t next_log = 0;
	int fd, one = 1, idle = 30, intvl = 5, cnt = 4;
	struct conn *c;
	pthread_t t;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 << 10);
	while (!atomic_load(&a->stopping)) {
		if (poll(&p, 1, 200) <= 0)
			continue;
		fd = accept4(a->listen_fd, NULL, NULL,
			     SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				usleep(100000);
			continue;
		}
		if (atomic_load(&a->conns) >= a->cfg.max_conns) {
			agent_count(a, AGENT_ST_REFUSED_CONN, 1);
			if (now_ns() >= next_log) {
				log_warn("refusing connections: %d open "
					 "(--max-connections)",
					 a->cfg.max_conns);
				next_log = now_ns() + 10000000000ull;
			}
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl,
			   sizeof(intvl));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->a = a;
		c->fd = fd;
		peer_name(fd, c->peer, sizeof(c->peer));
		atomic_fetch_add(&a->conns, 1);
		agent_count(a, AGENT_ST_SESSIONS, 1);
		agent_count(a, AGENT_ST_SESSIONS_TOTAL, 1);
		if (pthread_create(&t, &attr, conn_main, c) != 0) {
			atomic_fetch_sub(&a->conns, 1);
			agent_count(a, AGENT_ST_SESSIONS, -1);
			close(fd);
			free(c);
		}
	}
	pthread_attr_destroy(&attr);
}
