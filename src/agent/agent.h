/* SPDX-License-Identifier: Apache-2.0 */
/*
 * agent.h - maru-agent: the pool's memory lent over UCX (docs/remote.md)
 *
 * A worker on a host without a CXL link cannot map the pool.  maru-agent,
 * on a host that can, maps the regions such workers may use, registers
 * each mapping with UCX once, and moves pages between the pool and the
 * workers as UCX active messages it checks one by one: the message names
 * the session (a secret the worker got over the authenticated control
 * port), the region (granted to that session for its token) and a range
 * inside it.  Nothing else reaches the pool.  On RDMA NICs the page itself
 * moves by rendezvous, zero copy, into or out of the registered mapping.
 *
 * Why not one-sided ucp_put/ucp_get: UCX's emulation of remote memory
 * access (what it uses over TCP, and whenever a key names no RDMA memory
 * domain, which a client can arrange) copies to and from whatever address
 * the message names, unchecked; it is installed in every context created
 * with UCP_FEATURE_RMA.  The agent's context has no RMA feature, so what
 * UCP offers a peer is the checked messages.  Below UCP, UCX trusts its
 * peers (its TCP transport's own put writes any address; ids on the wire
 * are pointers): the UCX network must be a trusted one, which
 * --ucx-devices names (docs/remote.md, "Security model").
 *
 * Files, each above the ones it calls:
 *   main.c     options, start-up, signals, the revalidation tick
 *   ctl.c      the control port: ZMTP (CURVE across hosts) connections,
 *              one thread each, requests decoded (agent_proto.h) and
 *              answered through xfer.c and lend.c
 *   xfer.c     sessions and the transfers: the active-message handlers,
 *              in the progress thread
 *   lend.c     the regions lent: the capability checked at the resource
 *              manager (GET_ACCESS), the mapping, its UCX registration,
 *              revocation; the UCX context, worker and progress thread
 *
 * Ownership: struct agent is main.c's; lend.c owns the region table and
 * the UCX context, xfer.c the sessions, both under @lock; the resource
 * manager client is under @rm_lock; ctl.c owns each connection (its
 * thread frees it, and ends its session).  Counters are atomics anyone
 * may bump.
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
	long quarantine_s;	 /* a revoked range stays reserved this long */
	const char *ucx_tls;	 /* UCX_TLS for our context, or NULL */
	const char *ucx_devices; /* UCX_NET_DEVICES: required (see main.c) */
};

struct agent_region;  /* lend.c */
struct agent_session; /* xfer.c */

struct agent {
	struct agent_config cfg;
	/* CURVE (NULL when off) */
	struct zcurve_keys *curve;
	struct zcurve_allow *allow;
	/* lend.c */
	pthread_mutex_t lock; /* the table and the UCX context */
	struct agent_region *regions;
	struct agent_region *revoked; /* quarantined ranges */
	struct agent_session *sessions;
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
 * lend_access - the region @r asks for, if its token is good: mapped and
 * registered (once)
 * @why: the cause of a refusal, in words
 * Return: 0, or -errno: -EACCES (the resource manager refused the token),
 * -EINVAL (bounds), -EIO (the pool cannot be mapped), -EAGAIN (the
 * resource manager is away), -ENOMEM.
 */
int lend_access(struct agent *a, const struct agent_access_req *r,
		const char **why);
/*
 * lend_hold_locked - region @rid if it is lent (not revoked) with @token:
 * its mapping, length and UCX registration, held for one transfer (a
 * revocation then keeps the registration, and the range, until
 * lend_release).  Return: the region, or NULL.  @lock held.
 */
struct agent_region *lend_hold_locked(struct agent *a, uint64_t rid,
				      uint64_t token, uint8_t **addr,
				      uint64_t *len, ucp_mem_h *memh);
/* lend_release - the transfer that held @r is done (takes @lock; the
 * _locked form with it held) */
void lend_release(struct agent *a, struct agent_region *r);
void lend_release_locked(struct agent *a, struct agent_region *r);
/* lend_recheck - ask the resource manager about every region lent and
 * revoke those it no longer knows with their token; drop quarantined
 * ranges that have served their time */
void lend_recheck(struct agent *a);

/* xfer.c */
/* xfer_init - the transfer handlers on the worker (before progress) */
int xfer_init(struct agent *a);
/**
 * session_new - a session for a control connection, with a random id
 * @supersede: a session id to end first (a client's failed one), or NULL
 * Return: the session (the caller's, until session_end), or NULL
 */
struct agent_session *session_new(struct agent *a, const uint8_t *supersede);
const uint8_t *session_id(const struct agent_session *s);
/* session_grant - region @rid, lent with @token, may be used by @s
 * Return: 0 or -ENOMEM */
int session_grant(struct agent *a, struct agent_session *s, uint64_t rid,
		  uint64_t token);
/**
 * session_end - no transfer of @s is accepted from now on; waits up to
 * @wait_ms for those in flight to end.  Return: 0 when none is in flight
 * any more, -EBUSY
 */
int session_end(struct agent *a, struct agent_session *s, int wait_ms);
/* session_end_id - the same for the session named @id (BYE, a HELLO that
 * supersedes one): 0 also when there is none */
int session_end_id(struct agent *a, const uint8_t *id, int wait_ms);
/* session_free - the owner gives @s up, after session_end(): freed now,
 * or by the last of its transfers in flight */
void session_free(struct agent *a, struct agent_session *s);

/* ctl.c */
int ctl_listen(struct agent *a);
/* ctl_accept_loop - accept until a->stopping (the caller's thread) */
void ctl_accept_loop(struct agent *a);

#endif /* MARU_AGENT_H */
