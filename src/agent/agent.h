/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agent.h - maru-agent: the pool's memory lent over UCX (docs/remote.md)
 *
 * A worker on a host without a CXL link cannot map the pool.  maru-agent,
 * on a host that can, maps the regions such workers ask for, registers
 * each mapping with UCX once, and hands out its remote key; the worker
 * then reads and writes the pages itself with ucp_get/ucp_put.  The agent
 * never sees a key or a request per transfer: on RDMA NICs the transfers
 * are one-sided in hardware, over TCP UCX emulates them in the agent's
 * progress thread.
 *
 * Files, each above the ones it calls:
 *   main.c     options, start-up, signals, the revalidation tick
 *   ctl.c      the control port: ZMTP (CURVE across hosts) connections,
 *              one thread each, requests decoded (agent_proto.h) and
 *              answered through lend.c
 *   lend.c     the regions lent: the capability checked at the resource
 *              manager (GET_ACCESS), the mapping, its UCX registration and
 *              packed key, revocation; the UCX context, worker and
 *              progress thread
 *
 * Ownership: struct agent is main.c's; lend.c owns the region table and
 * everything UCX under @lock, the resource manager client under @rm_lock;
 * ctl.c owns each connection (its thread frees it).  Counters are atomics
 * anyone may bump.
 */
#ifndef MARU_AGENT_H
#define MARU_AGENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "agent_proto.h"
#include "rm_client.h"
#include "zcurve.h"

struct agent_config {
	const char *host; /* control port's bind address */
	uint16_t port;
	const char *rm_address; /* HOST:PORT */
	const char *log_level;
	const char *curve_secret;  /* our certificate, or NULL */
	const char *curve_clients; /* directory of allowed client keys */
	bool insecure;		   /* a reachable port without CURVE */
	int max_conns;		   /* control connections at once */
	long recheck_ms;	   /* revalidation period of lent regions */
	long quarantine_s;   /* a revoked range stays reserved this long */
	const char *ucx_tls; /* UCX_TLS for our context, or NULL */
};

struct agent_region; /* lend.c */

struct agent {
	struct agent_config cfg;
	/* CURVE (NULL when off) */
	struct zcurve_keys *curve;
	struct zcurve_allow *allow;
	/* lend.c */
	pthread_mutex_t lock; /* the table and the UCX context */
	struct agent_region *regions;
	struct agent_region *revoked; /* quarantined ranges */
	ucp_context_h ucp;
	ucp_worker_h worker;
	void *worker_addr; /* owns (ucp_worker_release_address) */
	size_t worker_addr_len;
	pthread_t progress;
	int stop_fd; /* eventfd: the progress thread stops */
	bool progress_started;
	pthread_mutex_t rm_lock; /* @rm */
	struct rm_client rm;
	/* ctl.c */
	int listen_fd;
	atomic_int conns;
	atomic_bool stopping;
	atomic_uint_fast64_t st[AGENT_ST_N];
};

static inline void agent_count(struct agent *a, int i, int64_t d)
{
	atomic_fetch_add_explicit(&a->st[i], (uint64_t)d, memory_order_relaxed);
}

/* lend.c */
int lend_init(struct agent *a);
/* lend_stop - stop the progress thread (a stop: the exit frees the rest) */
void lend_stop(struct agent *a);
/**
 * lend_access - the region @r asks for, if its token is good: mapped,
 * registered, its key packed
 * @why: the cause of a refusal, in words
 * Return: 0 (*@addr, *@rkey borrowed: copy under no lock, it stays until
 * the region is revoked, so the caller copies it at once; lend_access
 * copies into @rkey_out itself), or -errno: -EACCES (the resource manager
 * refused the token), -EINVAL (bounds), -EIO (the pool cannot be mapped),
 * -EAGAIN (the resource manager is away), -ENOMEM.
 */
int lend_access(struct agent *a, const struct agent_access_req *r,
		uint64_t *addr, uint8_t *rkey_out, size_t *rkey_len,
		const char **why);
/* lend_recheck - ask the resource manager about every region lent and
 * revoke those it no longer knows with their token; drop quarantined
 * ranges that have served their time */
void lend_recheck(struct agent *a);

/* ctl.c */
int ctl_listen(struct agent *a);
/* ctl_accept_loop - accept until a->stopping (the caller's thread) */
void ctl_accept_loop(struct agent *a);

#endif /* MARU_AGENT_H */
