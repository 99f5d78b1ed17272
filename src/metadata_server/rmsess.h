/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rmsess.h - maru-server's session with the resource manager
 *
 * The server owns every region at the RM under one client id
 * ("<hostname>:<pid>") and keeps one persistent connection: the RM
 * starts a reap timer for a client id whose connection closes
 * (resource-manager-protocol.md §7).  This module wraps rm_client.h with
 * what a long-running owner needs:
 *
 *  - Drop detection: the loop polls the connection's fd; readable while
 *    no request is in flight means the RM closed it (it restarted).
 *  - Prompt reconnect with backoff (50 ms doubling to 1 s), then one
 *    GET_ACCESS for a region we own, which carries our client id and so
 *    pins it on the new connection and cancels the RM's grace timer.
 *  - While the RM is unreachable, calls fail at once (-EAGAIN) instead of
 *    blocking the loop for a connect timeout on every request.
 *  - --dax-path fill-first allocation, and a short-lived cache of pool
 *    capacity for GET_STATS / GET_USAGE (refreshed after our own
 *    allocations and frees, and at least every second).
 *
 * Every call blocks for at most the client's timeout (RMSESS_TIMEOUT_MS).
 *
 * Context: the server's main thread only.
 */
#ifndef MARU_MDS_RMSESS_H
#define MARU_MDS_RMSESS_H

#include <stdbool.h>
#include <stdint.h>

#include "rm_client.h"
#include "store.h"

#define RMSESS_TIMEOUT_MS 5000

struct rmsess {
	struct rm_client c;  /* owns the connection */
	const char *address; /* borrows */
	char *const *dax;    /* borrows: --dax-path values */
	int ndax;
	bool down;	   /* connection lost, not yet back */
	uint64_t retry_at; /* monotonic ns of the next attempt */
	uint64_t backoff_ns;
	/* a region we own, to re-pin our client id after a reconnect */
	bool (*any_handle)(void *arg, struct rm_handle *out);
	void *arg;
	/* pool capacity cache */
	bool cache_ok;
	uint64_t cache_at;
	uint64_t total_all, free_all, total_dax, free_dax;
	uint64_t reconnects; /* successful reconnects (stats) */
};

/**
 * rmsess_init - no I/O
 * @address: "host:port", borrowed
 * @dax, @ndax: pool paths in fill-first order, borrowed
 * Return: 0 or -EINVAL.  Release with rmsess_destroy() in every case.
 */
int rmsess_init(struct rmsess *r, const char *address, char *const *dax,
		int ndax);

/**
 * rmsess_start - check that the RM is there (probe), connect, and warn
 * about --dax-path values the RM does not serve
 * Return: 0, or -errno when the RM cannot be reached.
 */
int rmsess_start(struct rmsess *r);

void rmsess_destroy(struct rmsess *r);

/* rmsess_fd - the connection to poll for "closed by the RM", or -1 */
int rmsess_fd(const struct rmsess *r);

/* rmsess_readable - the polled fd became readable */
void rmsess_readable(struct rmsess *r);

/* rmsess_tick - reconnect when due (call every ~100 ms) */
void rmsess_tick(struct rmsess *r);

/* the store's view of the RM; arg is the struct rmsess */
extern const struct mds_rm_ops rmsess_ops;

#endif
