/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - TCP front end: listener, connection state machine, handlers
 *
 * Each connection is a small state machine (memcached drive_machine):
 *
 *   HDR      reading the 12-byte header
 *   PAYLOAD  reading payload_len bytes (at most RM_MAX_PAYLOAD)
 *   WRITE    the response did not fit in the socket buffer; wait for
 *            EPOLLOUT and read nothing meanwhile (strictly one request at a
 *            time per connection, docs/protocol.md §1)
 *   DRAIN    an error reply was sent and the connection must close: we
 *            shut down our side and discard input for a moment, so that
 *            the peer reads the error instead of a reset
 *
 * A connection reads exactly the bytes of the current message (header,
 * then payload), so nothing is ever buffered beyond one request; with
 * level-triggered epoll, a client that has more requests queued simply
 * wakes us again.  At most RM_REQ_BUDGET requests are served per
 * connection per wake-up so that one busy client cannot starve others.
 *
 * Input errors follow upstream exactly: bad magic/version -> ERROR_RESP
 * -EPROTO "bad header" and close; payload_len > 8192 -> -EMSGSIZE and
 * close; unknown type -> -ENOSYS and close; per-message checks
 * (docs/protocol.md §1) keep or close the connection as listed there.  EOF
 * (including a liveness probe that connects and closes) closes silently.  A
 * message that stays partial for --msg-timeout seconds (slow loris) is dropped
 * by server_cron(). A connection that has not sent one request in
 * --idle-timeout seconds after its accept is closed; at --max-clients a new
 * connection takes the place of the anonymous (no client id) idle one idle the
 * longest, STATS pollers included (they reconnect): silent sockets cannot lock
 * clients out (docs/operations.md, Security).  Nothing else is timed out for
 * idleness: maru-server's session may sit idle, without a client id, for as
 * long as it owns nothing.
 *
 * Ownership: @rm owns the connections (a doubly linked list); a
 * connection owns its fd and output buffer and borrows its pinned client
 * (counted in client->nconns).  Context: the event-loop thread only.
 */
#include "rm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

#define RM_REQ_BUDGET 16    /* requests per connection per wake-up */
#define RM_ACCEPT_BUDGET 64 /* accepts per wake-up */
#define RM_DRAIN_MS 2000    /* how long an error-closed socket lingers */
#define RM_DRAIN_MAX 65536  /* bytes discarded before giving up */
#define RM_BACKLOG 64
#define RM_ROOM_MIN_MS 1000 /* idle this long to be displaced */

enum conn_state { CONN_HDR, CONN_PAYLOAD, CONN_WRITE, CONN_DRAIN };
enum conn_auth { AUTH_NONE, AUTH_CHALLENGED, AUTH_OK };

struct conn {
	struct rm *rm; /* borrows */
	int fd;	       /* owns */
	enum conn_state state;
	struct rm_hdr hdr; /* valid in PAYLOAD */
	size_t in_len;	   /* bytes of the current message received */
	uint8_t in[RM_HDR_SIZE + RM_MAX_PAYLOAD];
	struct buf out; /* owns: pending response bytes */
	size_t out_off; /* bytes of @out already written */
	bool close_after_write;
	uint64_t busy_ms;      /* start of the partial message, pending
				* write or drain; 0 = idle */
	uint64_t seen_ms;      /* accepted, or its last request served */
	bool served;	       /* it completed a request */
	size_t drained;	       /* DRAIN: bytes discarded */
	struct client *client; /* borrows: the pinned client_id, or NULL */
	uint8_t auth;	       /* enum conn_auth */
	bool reader;	       /* ... with reader.key: STATS, GET_ACCESS, as
				* no one */
	uint8_t cn[RM_AUTH_NONCE_LEN], sn[RM_AUTH_NONCE_LEN]; /* AUTH_REQ */
	char auth_id[RM_CLIENT_ID_MAX + 1]; /* the id step 1 named */
	uint32_t auth_hold_ms;		    /* ... and the hold it asked */
	uint32_t auth_write_ms;		    /* ... and its clients' window */
	bool told_unpinned;		    /* logged once (check_client) */
	char peer[32];			    /* "a.b.c.d:port" for logs */
	uint32_t addr; /* the peer's IPv4 address, network order */
	struct conn *prev, *next;
};

static void conn_event(struct evloop *el, int fd, unsigned events, void *arg);

static void conn_close(struct conn *c, const char *why)
{
	struct rm *rm = c->rm;

	if (why)
		log_dbg("conn %s: closed (%s)", c->peer, why);
	evloop_del_fd(rm->el, c->fd);
	close(c->fd);
	if (c->client)
		client_unpin(rm, c->client);
	if (c->prev)
		c->prev->next = c->next;
	else
		rm->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	rm->nconns--;
	buf_free(&c->out);
	free(c);
}

/* Stop writing, keep reading (and discarding) for RM_DRAIN_MS. */
static void conn_drain(struct conn *c)
{
	shutdown(c->fd, SHUT_WR);
	c->state = CONN_DRAIN;
	c->busy_ms = evloop_now_ms();
	if (evloop_mod_fd(c->rm->el, c->fd, EVLOOP_READ) < 0)
		conn_close(c, "epoll");
}

/*
 * Write what is pending.  Return: true if the connection is idle and open
 * (ready for the next request); false if it now waits for EPOLLOUT, is
 * draining or was closed - the caller must not touch @c then.
 */
static bool conn_flush(struct conn *c)
{
	ssize_t n;

	while (c->out_off < c->out.len) {
		n = send(c->fd, c->out.data + c->out_off,
			 c->out.len - c->out_off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (c->state != CONN_WRITE) {
				c->state = CONN_WRITE;
				c->busy_ms = evloop_now_ms();
				if (evloop_mod_fd(c->rm->el, c->fd,
						  EVLOOP_WRITE) < 0) {
					conn_close(c, "epoll");
					return false;
				}
			}
			return false;
		}
		if (n <= 0) {
			conn_close(c, "write failed");
			return false;
		}
		c->out_off += (size_t)n;
	}
	buf_reset(&c->out);
	c->out_off = 0;
	if (c->close_after_write) {
		conn_drain(c);
		return false;
	}
	if (c->state == CONN_WRITE) {
		c->state = CONN_HDR;
		c->busy_ms = 0;
		if (evloop_mod_fd(c->rm->el, c->fd, EVLOOP_READ) < 0) {
			conn_close(c, "epoll");
			return false;
		}
	}
	return true;
}

/* Queue an ERROR_RESP; @close: then close the connection. */
static void reply_error(struct conn *c, int32_t status, const char *msg,
			bool close)
{
	log_dbg("conn %s: error %d (%s)%s", c->peer, status, msg,
		close ? ", closing" : "");
	if (rm_encode_error_resp(&c->out, status, msg) < 0)
		c->close_after_write = true; /* cannot even say why */
	if (close)
		c->close_after_write = true;
}

/*
 * Pin the request's client_id to the connection (docs/protocol.md §1).
 * Return: 0, or -EPERM if the connection already carries another id, or
 * -ENOMEM.
 */
static int conn_pin(struct conn *c, struct rm_str id)
{
	struct client *cl;

	if (c->client)
		return rm_str_eq(rm_str_from(c->client->id), id) ? 0 : -EPERM;
	cl = client_get(c->rm, id, true);
	if (!cl)
		return -ENOMEM;
	client_pin(c->rm, cl);
	c->client = cl;
	return 0;
}

/* The common client_id checks of ALLOC and FREE.  Return: true to go on. */
static bool check_client(struct conn *c, struct rm_str id, bool required)
{
	int rc;

	/* an unauthenticated GET_ACCESS names no one (a client id pins its
	 * owner's regions against the reaper) */
	if (!required && !c->rm->cfg.no_client_auth &&
	    (c->auth != AUTH_OK || c->reader)) {
		struct client *cl =
			id.len ? client_get(c->rm, id, false) : NULL;

		/* (routine: workers map an owner's regions without its key,
		 * e.g. again after a restart of maru-server: nothing is due
		 * for the reaper while the owner itself is connected) */
		if (cl && cl->nallocs && !c->told_unpinned) {
			log_dbg("conn %s: names owner %.*s without "
				"authenticating: does not pin it",
				c->peer, (int)id.len, id.ptr);
			c->told_unpinned = true;
		}
		return true;
	}
	if (!id.len) {
		if (required)
			reply_error(c, -EINVAL, "missing client_id", false);
		return !required;
	}
	rc = conn_pin(c, id);
	if (rc == -EPERM) {
		reply_error(c, -EPERM, "client_id mismatch on connection",
			    true);
		return false;
	}
	if (rc < 0) {
		reply_error(c, -ENOMEM, "out of memory", true);
		return false;
	}
	return true;
}

/*
 * Answer a retry from the outcome the first request had.  An ALLOC whose
 * region has been freed (or given to another owner) since gets -ENOENT:
 * its handle would no longer be valid.  Return: true if there was one.
 */
static bool replay_cached(struct conn *c, uint64_t request_id)
{
	struct rm_alloc_resp fail = {0};
	const struct idem_entry *e;
	struct region *r;
	int rc;

	e = idem_lookup(c->rm, c->hdr.type, c->client->id, request_id);
	if (!e)
		return false;
	log_dbg("conn %s: request %" PRIu64 " answered from the cache", c->peer,
		request_id);
	if (e->req_type == RM_FREE_REQ) {
		rc = rm_encode_free_resp(&c->out, e->status);
	} else {
		r = e->status ? NULL : region_find(c->rm, e->region_id);
		if (r && r->owner == c->client) {
			rc = server_encode_alloc_ok(c->rm, &c->out, r);
		} else {
			fail.status = e->status ? e->status : -ENOENT;
			rc = rm_encode_alloc_resp(&c->out, &fail);
		}
	}
	if (rc < 0)
		c->close_after_write = true;
	return true;
}

int server_encode_alloc_ok(struct rm *rm, struct buf *out,
			   const struct region *r)
{
	struct rm_alloc_resp m = {0};
	char path[4200];
	struct state_alloc a;

	state_alloc_of(r, &a);
	m.status = 0;
	m.access_type = 0;
	m.handle = a.handle;
	m.requested_size = r->requested;
	m.path = rm_str_from(region_path(r, path, sizeof(path)));
	m.uuid = rm_str_from(r->pool->has_uuid ? r->pool->uuid_str : NULL);
	return rm_encode_alloc_resp(out, &m);
}

/*
 * The start of ALLOC and FREE: a request that decoded (@dec, else @why
 * goes back), from a known client, and not a retry answered from the
 * idempotency cache.  Return: true when the caller goes on.
 */
static bool idem_begin(struct conn *c, int dec, const char *why,
		       struct rm_str client_id, uint64_t request_id)
{
	if (dec < 0) {
		reply_error(c, -EPROTO, why, true);
		return false;
	}
	if (!c->rm->cfg.no_client_auth && (c->auth != AUTH_OK || c->reader)) {
		reply_error(c, -EACCES,
			    c->reader ? "a reader key may not ALLOC or FREE"
				      : RM_AUTH_REQUIRED
				    " (AUTH_REQ with "
				    "the key in the state directory's "
				    "client.key)",
			    false);
		return false;
	}
	if (!check_client(c, client_id, true))
		return false;
	return !(request_id && replay_cached(c, request_id));
}

static void handle_alloc(struct conn *c, const uint8_t *p, size_t len)
{
	struct rm_alloc_resp fail = {0};
	struct rm_alloc_req req = {0};
	struct region *r = NULL;
	const char *why = "bad alloc req";
	int rc;

	rc = rm_decode_alloc_req(p, len, &req, &why);
	if (!idem_begin(c, rc, why, req.client_id, req.request_id))
		return;
	rc = region_alloc(c->rm, c->client, req.size, req.dax_path,
			  req.request_id, &r);
	if (rc == 0) {
		idem_store(c->rm, RM_ALLOC_REQ, c->client->id, req.request_id,
			   0, r->id, 0);
		rc = server_encode_alloc_ok(c->rm, &c->out, r);
	} else {
		log_dbg("conn %s: alloc of %" PRIu64 " bytes failed: %s",
			c->peer, req.size, strerror(-rc));
		c->rm->ctr.alloc_failures++;
		idem_store(c->rm, RM_ALLOC_REQ, c->client->id, req.request_id,
			   rc, 0, 0);
		fail.status = rc;
		rc = rm_encode_alloc_resp(&c->out, &fail);
	}
	if (rc < 0)
		c->close_after_write = true;
}

static void handle_free(struct conn *c, const uint8_t *p, size_t len)
{
	struct rm_free_req req = {0};
	struct region *r;
	const char *why = "bad free req";
	int32_t status;
	int rc;

	rc = rm_decode_free_req(p, len, &req, &why);
	if (!idem_begin(c, rc, why, req.client_id, req.request_id))
		return;
	r = region_find(c->rm, req.handle.region_id);
	if (!r) {
		status = -ENOENT;
	} else if (!auth_check(c->rm, r, &req.handle)) {
		/* not a FREE_RESP, and never cached (docs/protocol.md §1) */
		reply_error(c, -EACCES, "invalid authToken", false);
		return;
	} else if (r->owner != c->client) {
		status = -EPERM;
	} else {
		status = region_free(c->rm, r, req.request_id, "free");
	}
	idem_store(c->rm, RM_FREE_REQ, c->client->id, req.request_id, status, 0,
		   0);
	if (rm_encode_free_resp(&c->out, status) < 0)
		c->close_after_write = true;
}

static void handle_get_access(struct conn *c, const uint8_t *p, size_t len)
{
	struct rm_get_access_resp resp = {0};
	struct rm_get_access_req req;
	struct region *r;
	const char *why = "bad get_access req";
	char path[4200];

	if (rm_decode_get_access_req(p, len, &req, &why) < 0) {
		reply_error(c, -EPROTO, why, true);
		return;
	}
	if (!check_client(c, req.client_id, false))
		return;
	r = region_find(c->rm, req.handle.region_id);
	if (!r) {
		resp.status = -ENOENT;
	} else if (!auth_check(c->rm, r, &req.handle)) {
		reply_error(c, -EACCES, RM_BAD_TOKEN, false);
		return;
	} else {
		resp.path = rm_str_from(region_path(r, path, sizeof(path)));
		resp.offset = req.handle.offset;
		resp.length = req.handle.length;
		resp.uuid = rm_str_from(r->pool->has_uuid ? r->pool->uuid_str
							  : NULL);
	}
	if (rm_encode_get_access_resp(&c->out, &resp) < 0)
		c->close_after_write = true;
}

/*
 * AUTH_REQ (rm_auth.h): step 1 answers a fresh nonce and our proof; step 2
 * checks the client's and pins its client id to the connection.  A wrong
 * proof, or a step out of order, is refused and the connection closed.
 */
/* the key this connection authenticates with (rm_auth.h) */
static const uint8_t *conn_key(const struct conn *c)
{
	return c->reader ? c->rm->reader_key : c->rm->client_key;
}

static void handle_auth(struct conn *c, const uint8_t *p, size_t len)
{
	struct rm_auth_resp resp = {0};
	struct rm_auth_req req;
	const char *why = "bad auth req";
	uint8_t want[RM_AUTH_MAC_LEN];
	struct rm_str id;

	if (rm_decode_auth_req(p, len, &req, &why) < 0) {
		reply_error(c, -EPROTO, why, true);
		return;
	}
	if (req.step == 1) {
		if (!req.client_id.len || c->auth != AUTH_NONE) {
			reply_error(c, -EPROTO,
				    req.client_id.len
					    ? "auth: already begun"
					    : "auth: missing client_id",
				    true);
			return;
		}
		if (rm_auth_random(c->sn, sizeof(c->sn)) < 0) {
			reply_error(c, -EIO, "auth: no randomness", true);
			return;
		}
		memcpy(c->cn, req.data, sizeof(c->cn));
		c->reader = req.reader;
		memcpy(c->auth_id, req.client_id.ptr, req.client_id.len);
		c->auth_id[req.client_id.len] = '\0';
		c->auth_write_ms = req.write_ms < RM_HOLD_MAX_MS
					   ? req.write_ms
					   : RM_HOLD_MAX_MS;
		c->auth_hold_ms = req.hold_ms == RM_HOLD_UNTIL_BACK ||
						  req.hold_ms < RM_HOLD_MAX_MS
					  ? req.hold_ms
					  : RM_HOLD_MAX_MS;
		memcpy(resp.nonce, c->sn, sizeof(c->sn));
		if (rm_auth_mac(conn_key(c), RM_AUTH_SERVER, c->cn, c->sn,
				req.client_id, resp.proof) < 0) {
			reply_error(c, -EIO, "auth: no MAC", true);
			return;
		}
		c->auth = AUTH_CHALLENGED;
	} else {
		if (c->auth != AUTH_CHALLENGED) {
			reply_error(c, -EPROTO, "auth: step 2 before step 1",
				    true);
			return;
		}
		id = rm_str_from(c->auth_id);
		if (rm_auth_mac(conn_key(c), RM_AUTH_CLIENT, c->cn, c->sn, id,
				want) < 0 ||
		    !rm_auth_equal(want, req.data)) {
			log_warn("conn %s: authentication as %s failed (wrong "
				 "key)",
				 c->peer, c->auth_id);
			c->auth = AUTH_NONE;
			reply_error(c, -EACCES, "authentication failed", true);
			return;
		}
		if (c->reader) {
			/* anonymous: it names, pins and holds no one */
			c->auth = AUTH_OK;
			log_dbg("conn %s: authenticated with the reader key",
				c->peer);
			goto out;
		}
		if (conn_pin(c, id) < 0) {
			reply_error(c, -EPERM,
				    "client_id mismatch on connection", true);
			return;
		}
		c->auth = AUTH_OK;
		if (c->auth_hold_ms == RM_HOLD_UNTIL_BACK) {
			/* until it returns (holds.c): recorded before we say
			 * yes; if we cannot, the longest timed hold */
			c->client->hold_ms = RM_HOLD_MAX_MS;
			if (holds_declare(c->rm, c->client, c->auth_write_ms) <
			    0)
				log_err("client %s: its regions are held %d s "
					"after it goes, not until it returns "
					"(holds.meta cannot be written)",
					c->auth_id, RM_HOLD_MAX_MS / 1000);
		} else {
			c->client->hold_ms = c->auth_hold_ms;
			holds_undeclare(c->rm, c->client);
		}
		if (c->client->durable)
			log_dbg("conn %s: authenticated as %s (regions kept "
				"until it returns)",
				c->peer, c->auth_id);
		else
			log_dbg("conn %s: authenticated as %s (regions kept "
				"%u ms after it goes)",
				c->peer, c->auth_id, c->client->hold_ms);
	}
out:
	if (rm_encode_auth_resp(&c->out, &resp) < 0)
		c->close_after_write = true;
}

/*
 * OWNERS_REQ: every client id that owns regions, connected or away (and
 * since when), and how long its regions are held.  Like STATS: any
 * connection (with --require-auth, an authenticated one).
 */
static void handle_owners(struct conn *c)
{
	struct hnode *hn, *next;
	uint32_t n = 0, omitted = 0;
	size_t start, i;
	int rc;

	rc = rm_encode_owners_begin(&c->out, &start);
	htab_for_each(&c->rm->clients, i, hn, next)
	{
		struct client *cl = container_of(hn, struct client, hn);
		struct rm_owner o = {
			.id = {cl->id, cl->idlen},
			.regions = cl->nallocs > UINT32_MAX
					   ? UINT32_MAX
					   : (uint32_t)cl->nallocs,
			.connections = cl->nconns,
			.bytes = cl->bytes,
			.hold_ms =
				cl->durable ? RM_HOLD_UNTIL_BACK : cl->hold_ms,
			.away_since = cl->nconns ? 0 : cl->away_s,
		};

		if (rc < 0 || !cl->nallocs)
			continue;
		if (n == RM_OWNERS_MAX) {
			omitted++;
			continue;
		}
		rc = rm_encode_owners_add(&c->out, &o);
		n++;
	}
	if (rc < 0) {
		c->out.len = start;
		c->close_after_write = true;
		return;
	}
	rm_encode_owners_end(&c->out, start, n, omitted);
}

/*
 * RELEASE_REQ: an operator frees the regions of a client that is away
 * (a durable one's, or anyone's before its grace ends).  Only over a
 * connection authenticated with client.key (as ALLOC and FREE), and never
 * from a client that is connected: it would go on writing into them.
 */
static void handle_release(struct conn *c, const uint8_t *p, size_t len)
{
	struct rm_release_resp resp = {0};
	const char *why = "bad release req";
	struct client *cl;
	struct rm_str id;
	char by[160];
	uint32_t wait;

	if (rm_decode_release_req(p, len, &id, &why) < 0) {
		reply_error(c, -EINVAL, why, false);
		return;
	}
	/* (with --no-client-auth too: a name is no proof, and freeing
	 * every region of an owner is more than a FREE with its token) */
	if (c->auth != AUTH_OK || c->reader) {
		reply_error(c, -EACCES,
			    c->reader ? "a reader key may not RELEASE"
				      : RM_AUTH_REQUIRED
				    " to RELEASE "
				    "(AUTH_REQ with client.key)",
			    false);
		return;
	}
	cl = client_get(c->rm, id, false);
	if (!cl || !cl->nallocs) {
		resp.status = -ENOENT;
	} else if (cl->nconns) {
		resp.status = -EBUSY;
	} else if ((wait = holds_release_wait(c->rm, cl))) {
		/* its clients (workers of a maru-server) write into its
		 * regions until they fence, within this of its departure */
		resp.status = -EAGAIN;
		resp.regions = wait;
	} else {
		snprintf(by, sizeof(by), "released by an operator (conn %s)",
			 c->peer);
		holds_undeclare(c->rm, cl);
		/* (cl goes with its last region) */
		if (reaper_free_owner(c->rm, cl, by, &resp.regions,
				      &resp.bytes) < 0)
			resp.status = -EIO;
		c->rm->ctr.released_regions += resp.regions;
	}
	if (rm_encode_release_resp(&c->out, &resp) < 0)
		c->close_after_write = true;
}

int server_stats_encode(struct rm *rm, struct buf *out)
{
	struct rm_pool_stat s;
	size_t start, i;
	int rc;

	rc = rm_encode_stats_begin(out, &start);
	for (i = 0; i < rm->npools && rc == 0; i++) {
		const struct pool *p = rm->pools[i];

		s.dax_type = p->kind == POOL_FS_DAX ? RM_FS_DAX : RM_DEV_DAX;
		s.total_size = p->total_size;
		s.free_size = p->free_size;
		s.align_bytes = p->align;
		s.path = rm_str_from(p->path);
		rc = rm_encode_stats_add(out, &s);
	}
	if (rc < 0) {
		out->len = start;
		return rc;
	}
	rm_encode_stats_end(out, start, (uint32_t)rm->npools);
	return 0;
}

/* durable owners that are away: their regions wait for them */
static uint64_t held_away(struct rm *rm)
{
	struct hnode *hn, *next;
	uint64_t n = 0;
	size_t i;

	htab_for_each(&rm->clients, i, hn, next)
	{
		struct client *c = container_of(hn, struct client, hn);

		n += c->durable && !c->nconns && c->nallocs;
	}
	return n;
}

int server_counters_encode(struct rm *rm, struct buf *out)
{
	static const char *const names[] = {
		"regions",	  "clients",	    "connections",
		"pools",	  "allocs",	    "alloc_failures",
		"frees",	  "reaped_clients", "reaped_regions",
		"reaped_bytes",	  "checkpoints",    "wal_bytes",
		"uptime_seconds", "held_away",	    "released_regions",
	};
	const uint64_t v[] = {
		rm->nregions,
		rm->nclients,
		rm->nconns,
		rm->npools,
		rm->ctr.allocs,
		rm->ctr.alloc_failures,
		rm->ctr.frees,
		rm->ctr.reaped_clients,
		rm->ctr.reaped_regions,
		rm->ctr.reaped_bytes,
		rm->ctr.checkpoints,
		rm->wal_size,
		(evloop_now_ms() - rm->started_ms) / 1000,
		held_away(rm),
		rm->ctr.released_regions,
	};

	_Static_assert(sizeof(names) / sizeof(names[0]) ==
			       sizeof(v) / sizeof(v[0]),
		       "a value per name");
	return rm_encode_counters_resp(out, names, v, sizeof(v) / sizeof(v[0]));
}

/* One complete request is in c->in: answer it into c->out. */
static void conn_process(struct conn *c)
{
	const uint8_t *p = c->in + RM_HDR_SIZE;
	size_t len = c->hdr.payload_len;

	/* --require-auth: nothing but AUTH before AUTH (the connection
	 * stays, so the client can authenticate and ask again) */
	if (c->rm->cfg.require_auth && c->auth != AUTH_OK &&
	    c->hdr.type != RM_AUTH_REQ) {
		reply_error(c, -EACCES,
			    RM_AUTH_REQUIRED
			    " for every request "
			    "(--require-auth): AUTH_REQ with client.key or "
			    "reader.key",
			    false);
		return;
	}
	switch (c->hdr.type) {
	case RM_ALLOC_REQ:
		handle_alloc(c, p, len);
		break;
	case RM_FREE_REQ:
		handle_free(c, p, len);
		break;
	case RM_STATS_REQ:
		/* any payload is ignored */
		if (server_stats_encode(c->rm, &c->out) < 0)
			c->close_after_write = true;
		break;
	case RM_COUNTERS_REQ:
		/* like STATS: no owner, any (or, --require-auth, an
		 * authenticated) connection */
		if (server_counters_encode(c->rm, &c->out) < 0)
			c->close_after_write = true;
		break;
	case RM_GET_ACCESS_REQ:
		handle_get_access(c, p, len);
		break;
	case RM_AUTH_REQ:
		handle_auth(c, p, len);
		break;
	case RM_OWNERS_REQ:
		handle_owners(c);
		break;
	case RM_RELEASE_REQ:
		handle_release(c, p, len);
		break;
	}
}

static bool known_request(uint16_t type)
{
	return type == RM_ALLOC_REQ || type == RM_FREE_REQ ||
	       type == RM_STATS_REQ || type == RM_GET_ACCESS_REQ ||
	       type == RM_AUTH_REQ || type == RM_COUNTERS_REQ ||
	       type == RM_OWNERS_REQ || type == RM_RELEASE_REQ;
}

/*
 * Check a complete header.  Return: true to read the payload; false if an
 * error reply was queued (the connection will close).
 */
static bool conn_header(struct conn *c)
{
	int rc = rm_hdr_decode(c->in, c->in_len, RM_MAX_PAYLOAD, &c->hdr);

	if (rc == -EPROTO) {
		reply_error(c, -EPROTO, "bad header", true);
		return false;
	}
	if (rc == -EMSGSIZE) {
		reply_error(c, -EMSGSIZE, "payload too large", true);
		return false;
	}
	if (!known_request(c->hdr.type)) {
		reply_error(c, -ENOSYS, "unknown request", true);
		return false;
	}
	c->state = CONN_PAYLOAD;
	return true;
}

/* Read and serve up to RM_REQ_BUDGET requests. */
static void conn_read(struct conn *c)
{
	int budget = RM_REQ_BUDGET;
	size_t want;
	ssize_t n;

	while (budget > 0) {
		want = (c->state == CONN_HDR
				? RM_HDR_SIZE
				: RM_HDR_SIZE + c->hdr.payload_len) -
		       c->in_len;
		if (want) {
			n = read(c->fd, c->in + c->in_len, want);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return;
			if (n <= 0) {
				conn_close(c,
					   n == 0 ? (c->in_len ? "EOF inside a "
								 "message"
							       : NULL)
						  : "read error");
				return;
			}
			if (c->in_len == 0)
				c->busy_ms = evloop_now_ms();
			c->in_len += (size_t)n;
			if ((size_t)n < want)
				continue;
		}
		if (c->state == CONN_HDR) {
			if (!conn_header(c)) {
				conn_flush(c);
				return;
			}
			if (c->hdr.payload_len)
				continue;
		}
		conn_process(c);
		budget--;
		c->state = CONN_HDR;
		c->in_len = 0;
		c->busy_ms = 0;
		c->seen_ms = evloop_now_ms();
		c->served = true;
		if (!conn_flush(c))
			return;
	}
}

static void conn_drain_read(struct conn *c)
{
	char sink[4096];
	ssize_t n;

	for (;;) {
		n = read(c->fd, sink, sizeof(sink));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0 || (c->drained += (size_t)n) > RM_DRAIN_MAX) {
			conn_close(c, "closed after an error reply");
			return;
		}
	}
}

static void conn_event(struct evloop *el, int fd, unsigned events, void *arg)
{
	struct conn *c = arg;

	switch (c->state) {
	case CONN_DRAIN:
		conn_drain_read(c);
		return;
	case CONN_WRITE:
		if (!conn_flush(c))
			return;
		break;
	default:
		break;
	}
	conn_read(c);
}

static void set_sockopts(int fd)
{
	int one = 1, idle = 10, intvl = 5, cnt = 3;

	/* best effort: a failure only costs latency or dead-peer detection */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* a connection that has told us nothing: no client id, nothing pending */
static bool anonymous_idle(const struct conn *c)
{
	return !c->client && !c->busy_ms && c->state == CONN_HDR;
}

/*
 * At --max-clients, a new connection takes the place of the connection
 * that has been anonymous and idle the longest, so that silent sockets
 * cannot lock clients out.  Return: true when one was closed.
 */
static bool make_room(struct rm *rm)
{
	uint64_t now = evloop_now_ms();
	struct conn *c, *old = NULL;

	/* idle a second at least: not one of the same burst */
	for (c = rm->conns; c; c = c->next)
		if (anonymous_idle(c) && now - c->seen_ms >= RM_ROOM_MIN_MS &&
		    (!old || c->seen_ms <= old->seen_ms))
			old = c;
	if (!old)
		return false;
	log_info("conn %s: closed to make room (max clients %d; it sent no "
		 "client id and is idle)",
		 old->peer, rm->cfg.max_clients);
	conn_close(old, NULL);
	return true;
}

/* Out of descriptors: free the spare, accept and drop one, re-arm. */
static void accept_emfile(struct rm *rm)
{
	int fd;

	log_warn("out of file descriptors: dropping a new connection");
	if (rm->spare_fd >= 0)
		close(rm->spare_fd);
	fd = accept(rm->listen_fd, NULL, NULL);
	if (fd >= 0)
		close(fd);
	rm->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/*
 * --max-clients-per-address: one remote host may not take every slot.
 * Loopback peers are exempt: every local process shares 127.0.0.1, so
 * only --max-clients (and displacement) bounds them.
 */
static bool over_address_limit(struct rm *rm, uint32_t addr)
{
	struct conn *c;
	int n = 0;

	if (!rm->cfg.max_per_addr || (ntohl(addr) >> 24) == 127)
		return false;
	for (c = rm->conns; c; c = c->next)
		n += c->addr == addr;
	return n >= rm->cfg.max_per_addr;
}

static void on_accept(struct evloop *el, int lfd, unsigned events, void *arg)
{
	struct rm *rm = arg;
	struct sockaddr_in sa;
	socklen_t salen;
	struct conn *c;
	char ip[INET_ADDRSTRLEN];
	int i, fd;

	for (i = 0; i < RM_ACCEPT_BUDGET; i++) {
		salen = sizeof(sa);
		fd = accept4(lfd, (struct sockaddr *)&sa, &salen,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE)
				accept_emfile(rm);
			else if (errno != EAGAIN && errno != EWOULDBLOCK)
				log_warn("accept: %s", strerror(errno));
			return;
		}
		/* the per-address cap first: an address at its cap must not
		 * displace others' connections */
		if (over_address_limit(rm, sa.sin_addr.s_addr)) {
			log_dbg("max clients per address (%d) reached: "
				"connection dropped",
				rm->cfg.max_per_addr);
			close(fd);
			continue;
		}
		if (rm->nconns >= (unsigned)rm->cfg.max_clients &&
		    !make_room(rm)) {
			/* over the limit: accepted and closed, no message */
			log_dbg("max clients (%d) reached: connection dropped",
				rm->cfg.max_clients);
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->rm = rm;
		c->fd = fd;
		c->addr = sa.sin_addr.s_addr;
		c->state = CONN_HDR;
		c->seen_ms = evloop_now_ms();
		inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
		snprintf(c->peer, sizeof(c->peer), "%s:%u", ip,
			 ntohs(sa.sin_port));
		set_sockopts(fd);
		if (evloop_add_fd(rm->el, fd, EVLOOP_READ, conn_event, c) < 0) {
			close(fd);
			free(c);
			continue;
		}
		c->next = rm->conns;
		if (rm->conns)
			rm->conns->prev = c;
		rm->conns = c;
		rm->nconns++;
	}
}

int server_bind(struct rm *rm)
{
	struct sockaddr_in sa = {0};
	int one = 1, fd, rc;

	sa.sin_family = AF_INET;
	sa.sin_port = htons(rm->cfg.port);
	if (!rm->cfg.host[0])
		sa.sin_addr.s_addr = htonl(INADDR_ANY);
	else if (inet_pton(AF_INET, rm->cfg.host, &sa.sin_addr) != 1) {
		log_err("invalid host %s: a numeric IPv4 address is required",
			rm->cfg.host);
		return -EINVAL;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		log_err("socket: %s", strerror(errno));
		return rc;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		if (errno == EADDRINUSE)
			log_err("port %u is already in use (another "
				"maru-resource-manager running?)",
				rm->cfg.port);
		else
			log_err("bind %s:%u: %s", rm->cfg.host, rm->cfg.port,
				strerror(errno));
		goto out_close;
	}
	rm->listen_fd = fd;
	return 0;
out_close:
	close(fd);
	return rc;
}

int server_listen(struct rm *rm)
{
	int rc;

	if (rm->listen_fd < 0) {
		rc = server_bind(rm);
		if (rc < 0)
			return rc;
	}
	if (listen(rm->listen_fd, RM_BACKLOG) < 0) {
		rc = -errno;
		log_err("listen: %s", strerror(errno));
		return rc;
	}
	rc = evloop_add_fd(rm->el, rm->listen_fd, EVLOOP_READ, on_accept, rm);
	if (rc < 0)
		return rc;
	rm->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return 0;
}

void server_cron(struct rm *rm)
{
	uint64_t now = evloop_now_ms();
	uint64_t limit = (uint64_t)rm->cfg.msg_timeout * 1000u;
	struct conn *c, *next;

	for (c = rm->conns; c; c = next) {
		next = c->next;
		if (!c->served && anonymous_idle(c) && rm->cfg.idle_timeout &&
		    now - c->seen_ms >=
			    (uint64_t)rm->cfg.idle_timeout * 1000u) {
			log_info("conn %s: no request in %d s: closed", c->peer,
				 rm->cfg.idle_timeout);
			conn_close(c, NULL);
			continue;
		}
		if (!c->busy_ms)
			continue;
		if (c->state == CONN_DRAIN) {
			if (now - c->busy_ms >= RM_DRAIN_MS)
				conn_close(c, "closed after an error reply");
		} else if (now - c->busy_ms >= limit) {
			log_info("conn %s: %s for %d s: closed", c->peer,
				 c->state == CONN_WRITE ? "response not read"
							: "partial message",
				 rm->cfg.msg_timeout);
			conn_close(c, NULL);
		}
	}
}

void server_close_all(struct rm *rm)
{
	while (rm->conns)
		conn_close(rm->conns, "shutdown");
	if (rm->listen_fd >= 0) {
		evloop_del_fd(rm->el, rm->listen_fd);
		close(rm->listen_fd);
		rm->listen_fd = -1;
	}
	if (rm->spare_fd >= 0) {
		close(rm->spare_fd);
		rm->spare_fd = -1;
	}
}
