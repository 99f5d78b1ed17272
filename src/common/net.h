/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.h - blocking-with-deadline TCP helpers on non-blocking sockets
 *
 * What both TCP clients need (rm_client.c for the resource manager,
 * libmaru's rpc.c for maru-server): connect to host:port within a
 * deadline, write a whole buffer, read some or all of one, wait for
 * readiness.  Deadlines are CLOCK_MONOTONIC nanoseconds (now_ns()).  Leaf
 * code.
 */
#ifndef MARU_COMMON_NET_H
#define MARU_COMMON_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* net_ms_left - milliseconds until @deadline, rounded up (0: passed) */
int net_ms_left(uint64_t deadline);

/**
 * net_wait_fd - poll @fd for @events until @deadline
 * Return: 0 when ready, -ETIMEDOUT, or -errno
 */
int net_wait_fd(int fd, short events, uint64_t deadline);

/**
 * net_dial - resolve @host and connect to @port, IPv4 addresses first
 * (like libzmq without ZMQ_IPV6), within @deadline
 * Return: a non-blocking, close-on-exec socket with TCP_NODELAY, or
 * -EHOSTUNREACH (no address), -ETIMEDOUT, or the last connect's -errno
 */
int net_dial(const char *host, const char *port, uint64_t deadline);

/**
 * net_send_all - write all @n bytes of @p to non-blocking @fd
 * Return: 0, -ETIMEDOUT, or -errno (-EPIPE when the peer is gone)
 */
int net_send_all(int fd, const void *p, size_t n, uint64_t deadline);

/**
 * net_recv_some - read up to @n bytes (at least one) from non-blocking
 * @fd, waiting until @deadline
 * Return: bytes read (> 0), -ECONNRESET at EOF, -ETIMEDOUT, or -errno
 */
ssize_t net_recv_some(int fd, void *p, size_t n, uint64_t deadline);

/* net_recv_all - read exactly @n bytes.  Return: 0 or net_recv_some's error */
int net_recv_all(int fd, void *p, size_t n, uint64_t deadline);

#endif /* MARU_COMMON_NET_H */
