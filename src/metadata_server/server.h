/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.h - maru-server's main loop: ZMTP over TCP, one thread
 *
 * The loop speaks ZeroMQ's wire protocol (ZMTP 3.1, src/common/zmtp.h)
 * itself on its own sockets, as a ROUTER would: libzmq/pyzmq REQ and
 * DEALER clients see an ordinary ZeroMQ peer.  No libzmq I/O thread sits
 * between a request and its reply.
 *
 * Context: server_run() runs on the thread that called it and returns
 * when SIGINT or SIGTERM arrives (through a signalfd; the caller must
 * have blocked both signals before creating any thread, see main.c).
 */
#ifndef MARU_MDS_SERVER_H
#define MARU_MDS_SERVER_H

#include <stdint.h>

#include "buf.h"
#include "rmsess.h"
#include "store.h"
#include "zcurve.h"

#define SERVER_TICK_MS 100	    /* timer period */
#define SERVER_DRAIN_BATCH 256	    /* messages per connection and wake-up */
#define SERVER_IDLE_SLICE_NS 50000  /* index resize work between polls */
#define SERVER_MAX_MSG (64ll << 20) /* largest message; more: disconnect */
#define SERVER_HANDSHAKE_MAX 4096   /* largest frame before READY */
#define SERVER_OUT_HWM (8u << 20)   /* unsent reply bytes: stop reading */
#define SERVER_HB_IVL_MS 10000	    /* idle peer -> ZMTP PING */
#define SERVER_HB_TIMEOUT_MS 30000  /* silent peer -> disconnected */

struct server_opts {
	const char *host; /* borrows */
	int port;
	uint64_t busy_poll_ns; /* 0: sleep as soon as nothing is ready */
	int max_conns;	       /* open client connections; 0: no limit */
	int max_per_addr;      /* ... from one non-loopback address; 0: any */
	uint64_t max_input;    /* bytes of all input buffers; 0: no limit */
	/* CURVE: every client proves a key of @curve_allow (zcurve.h) */
	const struct zcurve_keys *curve;	/* borrows; NULL: NULL */
	const struct zcurve_allow *curve_allow; /* borrows */
	/* server_bind()'s socket, listened on by server_run() (which owns
	 * it from then on); -1: server_run() binds */
	int bound_fd;
};

/**
 * server_bind - the port, bound but not yet listening: taken before
 * anything else is made (a start refused for its port creates nothing),
 * while clients that connect before the server is ready are refused as
 * before (not left waiting in a backlog)
 * Return: the socket, or -errno (said in the log).
 */
int server_bind(const struct server_opts *o);

struct server;

/**
 * server_run - bind and serve until a stop signal
 * @s, @rm: borrowed; the loop owns them while it runs
 * Return: 0 after a clean stop, -errno when the socket cannot be set up.
 */
int server_run(const struct server_opts *o, struct mds *s, struct rmsess *rm);

/*
 * Without sockets, for the fuzz target and tests: one connection's input
 * bytes go through exactly the code a socket's would (handshake, frames,
 * commands, envelopes, look-ahead, handler), its output is collected.
 */

/**
 * server_new - a loop with no sockets
 * @s: borrowed
 * Return: the loop, or NULL (out of memory).  Free with server_free().
 */
struct server *server_new(struct mds *s);

void server_free(struct server *sv);

/**
 * server_feed - bytes a peer sent on its connection
 * @out: gets every byte the server would have written to the peer
 *       (greeting first) appended; the peer reads everything at once
 * Return: 0, or -errno when the server closed the connection (the next
 * call starts a new one).
 */
int server_feed(struct server *sv, const uint8_t *p, size_t n, struct buf *out);

#endif
