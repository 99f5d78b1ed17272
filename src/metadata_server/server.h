/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.h - maru-server's main loop: one ROUTER socket, one thread
 *
 * Context: server_run() runs on the thread that called it and returns
 * when SIGINT or SIGTERM arrives (through a signalfd; the caller must
 * have blocked both signals before creating any thread, see main.c).
 */
#ifndef MARU_MDS_SERVER_H
#define MARU_MDS_SERVER_H

#include <stdint.h>

#include "rmsess.h"
#include "store.h"

#define SERVER_TICK_MS 100	       /* timer period */
#define SERVER_DRAIN_BATCH 256	       /* messages per wake-up */
#define SERVER_IDLE_SLICE_NS 50000    /* index resize work between polls */
#define SERVER_MAX_FRAMES 32	       /* envelope + body frames */
#define SERVER_MAX_MSG (64ll << 20)    /* ZMQ_MAXMSGSIZE, bytes */
#define SERVER_HWM 10000	       /* per-peer queue, messages */
#define SERVER_ZMQ_HB_IVL_MS 10000     /* ZMTP heartbeat to every peer */
#define SERVER_ZMQ_HB_TIMEOUT_MS 30000 /* silent peer -> disconnected */

struct server_opts {
	const char *host; /* borrows */
	int port;
};

/**
 * server_run - bind and serve until a stop signal
 * @s, @rm: borrowed; the loop owns them while it runs
 * Return: 0 after a clean stop, -errno when the socket cannot be set up.
 */
int server_run(const struct server_opts *o, struct mds *s, struct rmsess *rm);

#endif
