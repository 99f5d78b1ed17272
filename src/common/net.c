/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.c - TCP connect/write/wait with deadlines (see net.h)
 */
#include "net.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

int net_ms_left(uint64_t deadline)
{
	uint64_t now = now_ns();

	if (now >= deadline)
		return 0;
	return (int)((deadline - now + 999999) / 1000000);
}

int net_wait_fd(int fd, short events, uint64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = events};
	int n;

	for (;;) {
		n = poll(&p, 1, net_ms_left(deadline));
		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

/* one non-blocking connect to @ai; returns the socket or -errno */
static int connect_one(const struct addrinfo *ai, uint64_t deadline)
{
	socklen_t len = sizeof(int);
	int fd, rc, err = 0, one = 1;

	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS) {
			rc = -errno;
			goto out_close;
		}
		rc = net_wait_fd(fd, POLLOUT, deadline);
		if (rc < 0)
			goto out_close;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			rc = -err;
			goto out_close;
		}
	}
	return fd;

out_close:
	close(fd);
	return rc;
}

int net_dial(const char *host, const char *port, uint64_t deadline)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	int fd = -EHOSTUNREACH, pass;

	if (getaddrinfo(host, port, &hints, &res))
		return -EHOSTUNREACH;
	for (pass = 0; pass < 2; pass++) {
		for (ai = res; ai; ai = ai->ai_next) {
			if ((ai->ai_family == AF_INET) != (pass == 0))
				continue;
			fd = connect_one(ai, deadline);
			if (fd >= 0 || fd == -ETIMEDOUT)
				goto out;
		}
	}
out:
	freeaddrinfo(res);
	return fd;
}

int net_send_all(int fd, const void *p, size_t n, uint64_t deadline)
{
	const uint8_t *b = p;
	ssize_t k;
	int rc;

	while (n) {
		k = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			b += k;
			n -= (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EAGAIN)
			return -errno;
		rc = net_wait_fd(fd, POLLOUT, deadline);
		if (rc < 0)
			return rc;
	}
	return 0;
}

ssize_t net_recv_some(int fd, void *p, size_t n, uint64_t deadline)
{
	ssize_t k;
	int rc;

	for (;;) {
		k = recv(fd, p, n, MSG_DONTWAIT);
		if (k > 0)
			return k;
		if (k == 0)
			return -ECONNRESET; /* the peer closed */
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		rc = net_wait_fd(fd, POLLIN, deadline);
		if (rc < 0)
			return rc;
	}
}

int net_recv_all(int fd, void *p, size_t n, uint64_t deadline)
{
	uint8_t *b = p;
	ssize_t k;

	while (n) {
		k = net_recv_some(fd, b, n, deadline);
		if (k < 0)
			return (int)k;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}
