/* SPDX-License-Identifier: Apache-2.0 */
/*
 * accept.c - who gets a connection to maru-server (see server_int.h)
 *
 * The listening socket is bound as libzmq's tcp bind took --host.  When
 * it is readable, up to MAX_EVENTS connections are accepted at a time.
 * Each is checked, in this order, against:
 *
 *   - --max-connections-per-address: one remote host may not take every
 *     connection (loopback peers are exempt: every local process is
 *     127.0.0.1); an address at its cap is closed first, so that it never
 *     displaces another's connection;
 *   - --max-connections: past it, a new connection takes the place of
 *     the one that has been in its handshake the longest (a peer that did
 *     not finish it may never), else it is closed;
 *   - the process's fd limit: accept() failing for want of fds or memory
 *     pauses the listening socket until the next tick (it is
 *     level-triggered, so it would otherwise spin).
 *
 * A connection that is let in gets TCP keepalive and TCP_USER_TIMEOUT
 * (for ZMTP 3.0 peers, which have no PING), its greeting and READY at
 * once (libzmq waits for them), and a place in the loop (server.c).
 * Refusals are logged at most every ten seconds.
 */
#include "server_int.h"

#include <errno.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define MAX_EVENTS 64 /* accepts per readable listening socket */
#define ROOM_MIN_AGE_NS 1000000000ull /* displaceable in a handshake */

static void set_sockopts(int fd)
{
	int one = 1, idle = SERVER_HB_IVL_MS / 1000, intvl = 5, cnt = 4;
	unsigned int uto = SERVER_HB_TIMEOUT_MS;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
}

static int slots_for(struct server *sv, int fd)
{
	return array_grow(&sv->conns, &sv->nconns, (size_t)fd,
			  sizeof(*sv->conns), 256);
}

/*
 * At --max-connections, a new connection takes the place of the one that
 * has been in its handshake the longest, if that is ROOM_MIN_AGE_NS or
 * more (a peer that did not finish it may never; one accepted a moment
 * ago, e.g. in the same burst, is not displaced); connections that
 * finished theirs keep their places.
 * Return: true when one was closed.
 */
static bool make_room(struct server *sv)
{
	struct conn *c, *old = NULL;
	int fd;

	for (fd = 0; fd <= sv->maxfd; fd++) {
		c = sv->conns[fd];
		if (c && !c->dead && !conn_ready(c) &&
		    sv->s->vnow - c->born >= ROOM_MIN_AGE_NS &&
		    (!old || c->born < old->born))
			old = c;
	}
	if (old)
		conn_close(sv, old, "closed to make room (max connections)");
	return old != NULL;
}

/* the peer's address as 16 bytes; Return: false for loopback */
static bool peer_addr(const struct sockaddr_storage *ss, uint8_t out[16])
{
	const struct sockaddr_in6 *s6 = (const void *)ss;
	const struct sockaddr_in *s4 = (const void *)ss;

	memset(out, 0, 16);
	if (ss->ss_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &s4->sin_addr, 4);
		return (ntohl(s4->sin_addr.s_addr) >> 24) != 127;
	}
	if (ss->ss_family != AF_INET6)
		return false;
	memcpy(out, &s6->sin6_addr, 16);
	if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
		return false;
	return !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) || out[12] != 127;
}

/*
 * --max-connections-per-address: one remote host may not take every
 * connection.  Loopback peers are exempt (every local process is
 * 127.0.0.1; --max-connections bounds them).
 */
static bool over_address_limit(struct server *sv, const uint8_t addr[16])
{
	struct conn *c;
	int fd, n = 0;

	for (fd = 0; fd <= sv->maxfd; fd++) {
		c = sv->conns[fd];
		n += c && !c->dead && c->remote && !memcmp(c->addr, addr, 16);
	}
	return n >= sv->max_per_addr;
}

/* up to MAX_EVENTS waiting connections: each gets a place, takes one of
 * a connection still in its handshake, or is closed */
void server_accept(struct server *sv)
{
	struct sockaddr_storage ss;
	socklen_t sslen;
	uint8_t addr[16];
	struct conn *c;
	bool remote;
	int fd, i;

	for (i = 0; i < MAX_EVENTS; i++) {
		sslen = sizeof(ss);
		fd = accept4(sv->lfd, (struct sockaddr *)&ss, &sslen,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM) {
				/* level-triggered: pause until the tick */
				log_warn("accept: %s; not accepting for a "
					 "moment",
					 strerror(errno));
				evloop_mod_fd(sv->el, sv->lfd, 0);
				sv->lfd_off = true;
			}
			return;
		}
		/* the per-address cap first: an address at its cap must not
		 * displace others' connections */
		remote = peer_addr(&ss, addr);
		if (remote && sv->max_per_addr &&
		    over_address_limit(sv, addr)) {
			if (now_ns() >= sv->next_full_log) {
				log_warn("%d connections from one address "
					 "(--max-connections-per-address): new "
					 "ones from it are closed",
					 sv->max_per_addr);
				sv->next_full_log = now_ns() + 10000000000ull;
			}
			close(fd);
			continue;
		}
		if (sv->max_conns && sv->nopen >= sv->max_conns &&
		    !make_room(sv)) {
			if (now_ns() >= sv->next_full_log) {
				log_warn("%d connections open "
					 "(--max-connections)"
					 ": new ones are closed",
					 sv->nopen);
				sv->next_full_log = now_ns() + 10000000000ull;
			}
			close(fd);
			continue;
		}
		set_sockopts(fd);
		c = slots_for(sv, fd) < 0 ? NULL : conn_new(sv, fd, fd);
		if (!c) {
			close(fd);
			continue;
		}
		memcpy(c->addr, addr, 16);
		c->remote = remote;
		if (evloop_add_fd(sv->el, fd, EVLOOP_READ, conn_event, c) < 0) {
			mds_conn_close(sv->s, fd);
			close(fd);
			conn_free(c);
			continue;
		}
		c->ev = EVLOOP_READ;
		sv->conns[fd] = c;
		sv->nopen++;
		if (fd > sv->maxfd)
			sv->maxfd = fd;
		/* our greeting and READY at once: libzmq waits for them */
		if (conn_flush(sv, c, NULL, 0) < 0)
			conn_close(sv, c, "write failed");
	}
}

/* --host as libzmq's tcp bind took it: "*" is every IPv4 interface,
 * names are IPv4; IPv6 literals ("::1", "[::1]") work too */
int server_bind(const struct server_opts *o)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	char host[256], port[16];
	const char *h = o->host;
	size_t hl = strlen(h);
	int one = 1, rc, err = EADDRNOTAVAIL, fd, lfd = -1;

	if (!strcmp(h, "*")) {
		h = "0.0.0.0";
	} else if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']' &&
		   hl - 2 < sizeof(host)) {
		memcpy(host, h + 1, hl - 2);
		host[hl - 2] = 0;
		h = host;
	}
	/* names resolve to IPv4, as libzmq's without ZMQ_IPV6 did ("localhost"
	 * must not become ::1 on hosts that list it first); IPv6 literals
	 * are taken as such */
	hints.ai_family = strchr(h, ':') ? AF_UNSPEC : AF_INET;
	snprintf(port, sizeof(port), "%d", o->port);
	rc = getaddrinfo(h, port, &hints, &res);
	if (rc) {
		log_err("cannot bind tcp://%s:%d: %s", o->host, o->port,
			gai_strerror(rc));
		return -EINVAL;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
			    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			lfd = fd;
			break;
		}
		err = errno;
		close(fd);
	}
	freeaddrinfo(res);
	if (lfd < 0) {
		log_err("cannot bind tcp://%s:%d: %s", o->host, o->port,
			strerror(err));
		return -err;
	}
	return lfd;
}

int server_listen(struct server *sv, const struct server_opts *o)
{
	int fd = o->bound_fd >= 0 ? o->bound_fd : server_bind(o);

	if (fd < 0)
		return fd;
	if (listen(fd, SOMAXCONN) < 0) {
		int err = errno;

		log_err("cannot listen on tcp://%s:%d: %s", o->host, o->port,
			strerror(err));
		close(fd);
		return -err;
	}
	sv->lfd = fd;
	log_info("listening on tcp://%s:%d", o->host, o->port);
	return 0;
}
