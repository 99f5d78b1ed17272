/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rmsess.h - maru-server's session with the resource manager
 *
 * The server owns every region at the RM under one client id
 * ("<hostname>:<pid>"; with a journal, "maru-server/<hostname>/<server
 * id>", which a restart keeps) and keeps one persistent connection: the RM
 * starts a reap timer for a client id whose connection closes
 * (docs/resource-manager.md, The reaper).  The session is one more
 * non-blocking connection in the server's loop: it never blocks the loop,
 * whatever the RM does (stopped, slow, gone).
 *
 *  - A FIFO of operations (ALLOC for a parked REQUEST_ALLOC, FREE, STATS,
 *    and the GET_ACCESS that re-pins our client id after a reconnect),
 *    one on the wire at a time, each encoded once with its request id and
 *    resent verbatim on a new connection (the RM's idempotency cache
 *    answers a repeated id with the first answer).
 *  - Answers complete a struct mds_wait (store.h): the parked request is
 *    answered from the loop.  A requester's deadline (RMSESS_TIMEOUT_MS)
 *    fails its wait cleanly with -ETIMEDOUT; an ALLOC that was already
 *    sent stays queued as an orphan, and whatever region it yields is
 *    freed at once (nothing leaks when the RM answers late).
 *  - No answer within RMSESS_TIMEOUT_MS on the wire, an EOF, a reset or
 *    garbage: the connection is closed and made again with backoff (50 ms
 *    doubling to 1 s; at once after the RM closed an idle connection, i.e.
 *    restarted), to the address the first connection reached.  While no
 *    connection is up, new ALLOCs and STATS fail at once (-EAGAIN); FREEs
 *    wait for the next connection.
 *  - With a client key (rm_client_load_key(), --rm-key-file), every
 *    connection first authenticates (rm_auth.h): an AUTH op at the head,
 *    before anything else is sent on it, never carried to the next one.
 *  - --dax-path fill-first allocation, and a cache of pool capacity for
 *    GET_STATS / GET_USAGE (fresh for a second; our own ALLOCs and FREEs
 *    make it stale, and a request on stale figures waits for a STATS).
 *
 * Context: the server's loop thread only.  rmsess_start() blocks (before
 * the loop runs); nothing else does.
 */
#ifndef MARU_MDS_RMSESS_H
#define MARU_MDS_RMSESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "buf.h"
#include "rm_client.h"
#include "store.h"

#define RMSESS_TIMEOUT_MS 5000 /* a request's answer, a requester's wait */
#define RMSESS_CONNECT_MS 1000 /* a connect in progress */

struct rmsess_op;

struct rmsess {
	struct rm_client c;	  /* client id; its fd only at start */
	uint64_t next_request_id; /* ALLOC/FREE, from 1 */
	bool in_start;		  /* start_next() runs */
	const char *address;	  /* borrows */
	const char *const *dax;	  /* borrows: --dax-path values */
	int ndax;
	struct sockaddr_storage addr; /* where the first connection went */
	socklen_t addrlen;
	int fd;			       /* owns; -1 */
	int st;			       /* RS_* in rmsess.c */
	uint32_t ev;		       /* EVLOOP_* the fd is watched for */
	struct rmsess_op *head, *tail; /* owns: the FIFO; head on the wire */
	size_t nops;
	size_t sent;	      /* bytes of head's request written */
	struct buf rx;	      /* owns: the answer being read */
	uint64_t io_deadline; /* monotonic ns: answer (or connect) by */
	uint64_t retry_at;    /* monotonic ns: the next connect */
	uint64_t backoff_ns;
	bool ever_up; /* a reconnect is logged as such */
	/* tells the loop which fd to watch for what (old fd -1: none) */
	void (*watch)(void *arg, int old_fd, int fd, uint32_t ev);
	void *watch_arg;
	/* a region we own, to re-pin our client id after a reconnect */
	bool (*any_handle)(void *arg, struct rm_handle *out);
	void *arg;
	/* pool capacity cache */
	bool cache_ok;	 /* fresh unless older than a second */
	bool cache_ever; /* the figures were fetched once */
	uint64_t cache_at;
	uint64_t total_all, free_all, total_dax, free_dax;
	char **pools; /* owns: the pools' paths of the last STATS */
	int npools;
	bool any_devdax;    /* ... one we allocate from is a /dev/dax device */
	bool stats_queued;  /* a STATS op is in the FIFO */
	bool access_queued; /* the re-pinning GET_ACCESS is */
	struct mds_wait *stat_waits; /* borrows: waiting for it, by ->next */
	uint64_t stat_deadline;	     /* monotonic ns: the oldest wait's */
	uint64_t reconnects;	     /* successful reconnects (stats) */
	bool told_no_key;  /* the RM wants authentication: said once */
	bool told_bad_key; /* ... refused our key: said once */
	int down_err;	   /* why the connection is down (errno; 0: up) */
	/* an identity of ours whose regions are to be released
	 * (rmsess_release_later), and when to ask next */
	char release_cid[RM_CLIENT_ID_MAX + 1];
	uint64_t release_at;
	bool release_queued;
	const char *key_path; /* --rm-key-file (borrows); NULL: the default,
			       * looked for again at each connection */
	uint32_t hold_ms;     /* asked at AUTH: keep our regions this long
			       * after we die (clients fence by then) */
	uint32_t write_ms;    /* ... with RM_HOLD_UNTIL_BACK: our clients
			       * fence this long after we die */
	/* called by rmsess_start() on its blocking connection, before the
	 * loop takes it: the recovered regions are checked (main.c) */
	int (*verify)(void *arg, struct rm_client *c);
	void *verify_arg;
};

/**
 * rmsess_init - no I/O
 * @address: "host:port", borrowed
 * @client_id: NULL for "<hostname>:<pid>"
 * @dax, @ndax: pool paths in fill-first order, borrowed
 * Return: 0 or -EINVAL.  Release with rmsess_destroy() in every case.
 */
int rmsess_init(struct rmsess *r, const char *address, const char *client_id,
		const char *const *dax, int ndax);

/**
 * rmsess_start - check that the RM is there, connect (blocking, before
 * the loop), read the pool figures and warn about --dax-path values the RM
 * does not serve, and call @verify
 * Return: 0, or -errno when the RM cannot be reached (or @verify's).
 */
int rmsess_start(struct rmsess *r);

/**
 * rmsess_pool_of - the pool (of the last STATS) that holds @path, a
 * region's location as ALLOC or GET_ACCESS gave it: the pool's own path
 * (DEV_DAX, an emulated pool) or its directory (FS_DAX region files)
 * Return: the pool's path (borrowed until the next STATS), or @path
 * itself when no pool matches.
 */
const char *rmsess_pool_of(const struct rmsess *r, const char *path);

/**
 * rmsess_attach - from now on the loop drives the session: @watch is
 * told the fd and events at once and whenever they change
 */
void rmsess_attach(struct rmsess *r,
		   void (*watch)(void *arg, int old_fd, int fd, uint32_t ev),
		   void *arg);

/* rmsess_io - the watched fd reported @events (EVLOOP_*) */
void rmsess_io(struct rmsess *r, uint32_t events);

/*
 * rmsess_release_later - RELEASE the regions of @cid, an identity of ours
 * that is not served any more (a journal that could not be served), in
 * @after_s seconds and, while the resource manager says "too soon" or is
 * away, again until it answers that they are freed or gone
 */
void rmsess_release_later(struct rmsess *r, const char *cid, uint32_t after_s);

/* rmsess_tick - deadlines and reconnects (call every ~100 ms) */
void rmsess_tick(struct rmsess *r);

/**
 * rmsess_cancel - every wait still borrowed gets done() with -ECANCELED
 * (the loop is stopping)
 */
void rmsess_cancel(struct rmsess *r);

/**
 * rmsess_forget - @w's requester went away: an ALLOC not sent yet is
 * dropped (and a STATS wait left), with done() called at once
 * (-ECANCELED); one already sent stays, and its answer is undone.
 */
void rmsess_forget(struct rmsess *r, struct mds_wait *w);

/* rmsess_destroy - close, free the FIFO (call rmsess_cancel() first) */
void rmsess_destroy(struct rmsess *r);

/* the store's view of the RM; arg is the struct rmsess */
extern const struct mds_rm_ops rmsess_ops;

#endif
