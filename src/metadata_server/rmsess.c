/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rmsess.c - the resource manager session (see rmsess.h)
 *
 * States: RS_DOWN (no fd; connect again at @retry_at), RS_CONNECTING (a
 * non-blocking connect, watched for writing, bounded by @io_deadline),
 * RS_UP (watched for reading, and for writing while the head's request is
 * not all written).  The FIFO's head is the one operation on the wire; its
 * answer is read into @rx, decoded with rm_proto (pure), and completes it;
 * then the next one is written.  Input while nothing is in flight means
 * the RM closed the connection (it restarted): reconnect at once.
 *
 * Ownership: ops own their encoded request; an ALLOC op borrows its wait
 * until it calls done() (then op->w is NULL: an orphan whose region, if
 * any, is freed).  STATS waits are borrowed in @stat_waits until the next
 * STATS answer (or failure) completes them all.
 *
 * Failure classes, as rm_client has them: a status from the RM completes
 * the op (a refusal); a transport failure keeps it queued for the next
 * connection.
 */
#include "rmsess.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "evloop.h"
#include "log.h"
#include "util.h"

#define BACKOFF_MIN_NS (50ull * 1000000)
#define BACKOFF_MAX_NS (1000ull * 1000000)
#define CACHE_NS (1000ull * 1000000)
#define TIMEOUT_NS ((uint64_t)RMSESS_TIMEOUT_MS * 1000000)
#define RX_MAX (1u << 20) /* answers are small; STATS grows with pools */
#define MAX_TRIES 4	  /* sends of one op before it stops blocking */

enum { RS_DOWN, RS_CONNECTING, RS_UP };
enum { OP_ALLOC, OP_FREE, OP_STATS, OP_ACCESS, OP_AUTH, OP_RELEASE };

struct rmsess_op {
	uint8_t kind;	    /* OP_* */
	bool sent;	    /* written on some connection: outcome in doubt */
	uint8_t tries;	    /* connections it was sent on */
	int dax_i;	    /* ALLOC: the --dax-path tried (fill-first) */
	uint64_t size;	    /* ALLOC */
	uint64_t deadline;  /* ALLOC with a wait: answer the requester by */
	struct mds_wait *w; /* ALLOC: borrows; NULL: an orphan */
	struct rm_handle h; /* FREE, ACCESS */
	uint8_t cn[RM_AUTH_NONCE_LEN]; /* AUTH: our nonce */
	struct buf req;		       /* owns: the encoded request */
	struct rmsess_op *next;
};

static void op_free_mem(struct rmsess_op *op)
{
	buf_free(&op->req);
	free(op);
}

/* ---- the watched fd ---- */

static void set_watch(struct rmsess *r, int old_fd)
{
	uint32_t ev = 0;

	if (r->st == RS_CONNECTING)
		ev = EVLOOP_WRITE;
	else if (r->st == RS_UP)
		ev = EVLOOP_READ |
		     (r->head && r->sent < r->head->req.len ? EVLOOP_WRITE : 0);
	if (old_fd == r->fd && ev == r->ev)
		return;
	r->ev = ev;
	if (r->watch)
		r->watch(r->watch_arg, old_fd, r->fd, ev);
}

/* ---- the FIFO ---- */

static void push(struct rmsess *r, struct rmsess_op *op, bool front)
{
	op->next = NULL;
	if (!r->head) {
		r->head = r->tail = op;
	} else if (front) {
		op->next = r->head;
		r->head = op;
	} else {
		r->tail->next = op;
		r->tail = op;
	}
	r->nops++;
}

static struct rmsess_op *pop(struct rmsess *r)
{
	struct rmsess_op *op = r->head;

	if (op) {
		r->head = op->next;
		if (!r->head)
			r->tail = NULL;
		r->nops--;
	}
	return op;
}

/* unlink @op, found after @prev (NULL: it is the head) */
static void unlink_op(struct rmsess *r, struct rmsess_op *prev,
		      struct rmsess_op *op)
{
	if (prev)
		prev->next = op->next;
	else
		r->head = op->next;
	if (r->tail == op)
		r->tail = prev;
	r->nops--;
}

static struct rmsess_op *op_new(uint8_t kind)
{
	struct rmsess_op *op = calloc(1, sizeof(*op));

	if (op)
		op->kind = kind;
	return op;
}

static int encode_alloc(struct rmsess *r, struct rmsess_op *op)
{
	struct rm_alloc_req req = {
		.size = op->size,
		.dax_path = rm_str_from(r->ndax ? r->dax[op->dax_i] : NULL),
		.client_id = rm_str_from(r->c.client_id),
		.request_id = r->next_request_id++,
	};

	buf_reset(&op->req);
	return rm_encode_alloc_req(&op->req, &req);
}

/* ---- waits ---- */

static void wait_done(struct mds_wait *w, int rc)
{
	w->rc = rc;
	w->done(w);
}

static void stats_done(struct rmsess *r, int rc)
{
	struct mds_wait *w;

	while ((w = r->stat_waits)) {
		r->stat_waits = w->next;
		w->next = NULL;
		wait_done(w, rc);
	}
}

/* ---- the connection ---- */

static void start_next(struct rmsess *r);

/* authentication belongs to one connection: drop the AUTH ops */
static void drop_auth(struct rmsess *r)
{
	struct rmsess_op *op, *prev = NULL, *next;

	for (op = r->head; op; op = next) {
		next = op->next;
		if (op->kind != OP_AUTH) {
			prev = op;
			continue;
		}
		unlink_op(r, prev, op);
		op_free_mem(op);
	}
}

/*
 * AUTH step 1 at the head: whatever else waits goes after it.  Without a
 * key, look for one again (the RM may have made it since we started).
 * Return: 0, or -errno when we have a key but cannot authenticate (the
 * caller drops the connection: unauthenticated, our FREEs would be
 * refused and forgotten).
 */
static int queue_auth(struct rmsess *r)
{
	struct rm_auth_req q = {.step = 1,
				.client_id = rm_str_from(r->c.client_id),
				.hold_ms = r->hold_ms,
				.write_ms = r->write_ms};
	struct rmsess_op *op;

	/* (r->c's own fd is -1 here: the session took it over) */
	if (!r->c.has_key && !r->key_path &&
	    rm_client_load_key(&r->c, NULL) == 0)
		log_info("resource manager %s: found a client key now",
			 r->address);
	if (!r->c.has_key)
		return 0;
	op = op_new(OP_AUTH);
	if (!op)
		return -ENOMEM;
	if (rm_auth_random(op->cn, sizeof(op->cn)) < 0 ||
	    (memcpy(q.data, op->cn, sizeof(q.data)),
	     rm_encode_auth_req(&op->req, &q)) < 0) {
		op_free_mem(op);
		return -EIO;
	}
	push(r, op, true);
	return 0;
}

/* the AUTH op's answer. Return: 0 (step 2 queued, or done), -EPROTO */
static int auth_step(struct rmsess *r, struct rmsess_op *op, uint16_t type,
		     const uint8_t *p, size_t n, int32_t st)
{
	struct rm_auth_req q = {.step = 2};
	struct rm_auth_resp a;
	int rc;

	if (!st && (type != RM_AUTH_RESP || rm_decode_auth_resp(p, n, &a) < 0))
		return -EPROTO;
	if (st || a.status) {
		if (!r->told_bad_key)
			log_err("resource manager %s: refused our client key "
				"(%d): give --rm-key-file the client.key of "
				"its state directory",
				r->address, st ? st : a.status);
		r->told_bad_key = true;
		return -EACCES;
	}
	if (op->req.data[RM_HDR_SIZE] == 2) {
		pop(r);
		op_free_mem(op);
		r->backoff_ns = BACKOFF_MIN_NS; /* a usable connection */
		if (r->told_bad_key)
			log_info("resource manager %s: authenticated again",
				 r->address);
		r->told_bad_key = false;
		log_dbg("resource manager %s: authenticated", r->address);
		return 0;
	}
	rc = rm_auth_prove(r->c.key, op->cn, rm_str_from(r->c.client_id), &a,
			   q.data);
	if (rc == -EKEYREJECTED && !r->told_bad_key) {
		log_err("resource manager %s: does not prove it knows our "
			"client key: another key file, or not our resource "
			"manager",
			r->address);
		r->told_bad_key = true;
	}
	if (rc < 0)
		return -EACCES;
	buf_reset(&op->req);
	if (rm_encode_auth_req(&op->req, &q) < 0)
		return -EPROTO;
	op->sent = false;
	return 0;
}

static void close_conn(struct rmsess *r, bool at_once)
{
	int old = r->fd;

	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	r->st = RS_DOWN;
	r->sent = 0;
	buf_reset(&r->rx);
	r->cache_ok = false;
	drop_auth(r);
	if (at_once) {
		/* the RM closed it (a restart): try now; the backoff stays
		 * until it answers, so a crash loop is not hammered */
		r->retry_at = now_ns();
	} else {
		r->retry_at = now_ns() + r->backoff_ns;
		r->backoff_ns *= 2;
		if (r->backoff_ns > BACKOFF_MAX_NS)
			r->backoff_ns = BACKOFF_MAX_NS;
	}
	/* nobody waits for figures we cannot get now */
	stats_done(r, -EAGAIN);
	set_watch(r, old);
}

static void lost(struct rmsess *r, const char *why, bool at_once)
{
	r->down_err = ECONNRESET;
	if (r->st == RS_UP)
		log_warn("resource manager %s: %s; reconnecting", r->address,
			 why);
	close_conn(r, at_once);
}

/* connected: re-pin our client id first, then whatever waits */
/* a STATS at the back of the queue, unless one is queued.  Return: 0 or
 * -ENOMEM */
static int queue_stats(struct rmsess *r)
{
	struct rmsess_op *op;
	struct buf b = BUF_INIT;

	if (r->stats_queued)
		return 0;
	op = op_new(OP_STATS);
	if (!op || rm_encode_stats_req(&b) < 0) {
		free(op);
		buf_free(&b);
		return -ENOMEM;
	}
	op->req = b;
	push(r, op, false);
	r->stats_queued = true;
	start_next(r);
	return 0;
}

static void on_up(struct rmsess *r)
{
	struct rm_get_access_req req = {
		.client_id = rm_str_from(r->c.client_id),
	};
	struct rmsess_op *op;

	r->st = RS_UP;
	r->sent = 0;
	r->down_err = 0;
	if (r->ever_up) {
		log_info("resource manager %s: reconnected", r->address);
		r->reconnects++;
	}
	r->ever_up = true;
	set_watch(r, r->fd);
	if (!r->access_queued && r->any_handle &&
	    r->any_handle(r->arg, &req.handle) && (op = op_new(OP_ACCESS))) {
		op->h = req.handle;
		if (rm_encode_get_access_req(&op->req, &req) == 0) {
			push(r, op, true);
			r->access_queued = true;
		} else {
			op_free_mem(op);
		}
	}
	/* first of all (before queue_stats() sends anything) */
	if (queue_auth(r) < 0) {
		lost(r, "cannot authenticate", false);
		return;
	}
	/* owning nothing, we have no id to pin: a request anyway, so that
	 * the RM does not take a silent connection for an idle one
	 * (--idle-timeout), and the pool figures are fresh */
	if (!r->access_queued)
		queue_stats(r);
	start_next(r);
}

/*
 * a connect failed: the RM is not there, so whoever waits for it is told
 * now (as a blocking client's refused connect did); an ALLOC already sent
 * stays queued as an orphan (its region, if any, is freed later)
 */
/* @err: why (an errno), for the requests that fail meanwhile */
static void connect_failed(struct rmsess *r, int err)
{
	struct rmsess_op *op, *prev = NULL, *next;
	struct mds_wait *w;

	r->down_err = err ? err : ECONNREFUSED;
	close_conn(r, false);
	for (op = r->head; op; op = next) {
		next = op->next;
		if (op->kind != OP_ALLOC || !op->w) {
			prev = op;
			continue;
		}
		w = op->w;
		op->w = NULL;
		if (op->sent) {
			prev = op;
		} else {
			unlink_op(r, prev, op);
			op_free_mem(op);
		}
		wait_done(w, -EAGAIN);
	}
}

static void start_connect(struct rmsess *r)
{
	int fd, one = 1;

	fd = socket(r->addr.ss_family,
		    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		connect_failed(r, errno);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	r->fd = fd;
	if (connect(fd, (struct sockaddr *)&r->addr, r->addrlen) == 0) {
		set_watch(r, -1);
		on_up(r);
		return;
	}
	if (errno != EINPROGRESS) {
		connect_failed(r, errno);
		return;
	}
	r->st = RS_CONNECTING;
	r->io_deadline = now_ns() + (uint64_t)RMSESS_CONNECT_MS * 1000000;
	set_watch(r, -1);
}

static void connect_done(struct rmsess *r)
{
	int err = 0;
	socklen_t n = sizeof(err);

	if (getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &n) < 0)
		err = errno;
	if (err) {
		connect_failed(r, err);
		return;
	}
	set_watch(r, r->fd);
	on_up(r);
}

/* write what is left of the head's request */
static void pump(struct rmsess *r)
{
	struct rmsess_op *op = r->head;
	ssize_t n;

	while (op && r->sent < op->req.len) {
		n = send(r->fd, op->req.data + r->sent, op->req.len - r->sent,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			lost(r, "write failed", false);
			return;
		}
		r->sent += (size_t)n;
		op->sent = true;
	}
	set_watch(r, r->fd);
}

static void give_up(struct rmsess *r, struct rmsess_op *op);

/*
 * the head goes on the wire (when there is one and we are up).  An op
 * already sent on MAX_TRIES connections without an answer stops blocking
 * the others.  A FREE or an ALLOC goes to the back and is sent again,
 * with the same request id, for as long as we run: the RM may have logged
 * it before its answer was lost, and only its answer tells.  An ALLOC's
 * requester is told now (it fails); the region the answer names is then
 * freed like any that comes too late.  STATS and GET_ACCESS just fail.
 */
static void start_next(struct rmsess *r)
{
	struct rmsess_op *op;

	/* wait_done() below may queue ops, which call us: the outer call
	 * sends what is at the head when its loop is done */
	if (r->st != RS_UP || r->sent || r->in_start)
		return;
	r->in_start = true;
	while ((op = r->head) && op->tries >= MAX_TRIES) {
		pop(r);
		if (op->kind == OP_ALLOC && op->w) {
			log_err("resource manager %s: no answer to an ALLOC "
				"after %d attempts; failing it, and asking "
				"on until it answers",
				r->address, MAX_TRIES);
			wait_done(op->w, -EPROTO);
			op->w = NULL;
		}
		if (op->kind == OP_FREE || op->kind == OP_ALLOC) {
			op->tries = 0;
			push(r, op, false);
			if (r->head == op)
				break; /* alone: it blocks nobody */
			continue;
		}
		give_up(r, op);
	}
	r->in_start = false;
	if (!r->head || r->st != RS_UP || r->sent)
		return;
	r->head->tries++;
	buf_reset(&r->rx);
	r->io_deadline = now_ns() + TIMEOUT_NS;
	pump(r);
}

/* ---- answers ---- */

/* the --dax-path @path is, or -1 */
static int dax_index(const struct rmsess *r, struct rm_str path)
{
	int i;

	for (i = 0; i < r->ndax; i++)
		if (strlen(r->dax[i]) == path.len &&
		    !memcmp(r->dax[i], path.ptr, path.len))
			return i;
	return -1;
}

static void forget_pools(struct rmsess *r)
{
	r->any_devdax = false;
	while (r->npools)
		free(r->pools[--r->npools]);
	free(r->pools);
	r->pools = NULL;
}

static int stat_cb(const struct rm_pool_stat *s, struct rmsess *r)
{
	char **v, *p;

	/* the pools' paths, for rmsess_pool_of(); a failure only means
	 * regions of that pool show no device */
	v = realloc(r->pools, ((size_t)r->npools + 1) * sizeof(*v));
	if (v) {
		r->pools = v;
		p = strndup(s->path.ptr ? s->path.ptr : "", s->path.len);
		if (p)
			v[r->npools++] = p;
	}
	/* a real device (an emulated pool, a file, also says DEV_DAX) */
	if (s->dax_type == RM_DEV_DAX && s->path.len > 8 &&
	    !memcmp(s->path.ptr, "/dev/dax", 8) &&
	    (!r->ndax || dax_index(r, s->path) >= 0))
		r->any_devdax = true;
	r->total_all += s->total_size;
	r->free_all += s->free_size;
	if (dax_index(r, s->path) >= 0) {
		r->total_dax += s->total_size;
		r->free_dax += s->free_size;
	}
	return 0;
}

static int take_stats(struct rmsess *r, const uint8_t *p, size_t n)
{
	struct rm_stats_resp resp;
	struct rm_pool_stat s;
	size_t cur = 0;
	uint32_t i;

	if (rm_decode_stats_resp(p, n, &resp) < 0)
		return -EPROTO;
	r->total_all = r->free_all = r->total_dax = r->free_dax = 0;
	forget_pools(r);
	for (i = 0; i < resp.num_pools; i++) {
		if (rm_stats_next(&resp, &cur, &s) <= 0)
			return -EPROTO; /* fewer records than announced */
		stat_cb(&s, r);
	}
	r->cache_ok = r->cache_ever = true;
	r->cache_at = now_ns();
	return 0;
}

const char *rmsess_pool_of(const struct rmsess *r, const char *path)
{
	size_t n;
	int i;

	for (i = 0; i < r->npools; i++) {
		n = strlen(r->pools[i]);
		if (n && !strncmp(path, r->pools[i], n) &&
		    (path[n] == '\0' || path[n] == '/'))
			return r->pools[i];
	}
	return path;
}

/*
 * an ALLOC's answer: 0 or the RM's status; -EPROTO for garbage.  @pool
 * (RM_PATH_MAX + 1 bytes) gets the region's pool.
 */
static int alloc_status(const struct rmsess *r, uint16_t type, const uint8_t *p,
			size_t n, struct rm_handle *h, char *pool)
{
	struct rm_alloc_resp a;
	char path[RM_PATH_MAX + 1];

	if (type != RM_ALLOC_RESP || rm_decode_alloc_resp(p, n, &a) < 0)
		return -EPROTO;
	if (a.status > 0)
		return -EPROTO;
	*h = a.handle;
	snprintf(path, sizeof(path), "%.*s", (int)a.path.len,
		 a.path.ptr ? a.path.ptr : "");
	snprintf(pool, RM_PATH_MAX + 1, "%s", rmsess_pool_of(r, path));
	return a.status;
}

static void queue_free_op(struct rmsess *r, const struct rm_handle *h);

/*
 * The head's answer is in (@type, payload @p/@n); complete it.
 * Return: 0, or -EPROTO (the connection is dropped, the op stays).
 */
static void released(struct rmsess *r, int st,
		     const struct rm_release_resp *rr);

static int complete(struct rmsess *r, uint16_t type, const uint8_t *p, size_t n)
{
	struct rmsess_op *op = r->head;
	struct rm_error_resp e;
	struct rm_get_access_resp a;
	struct rm_handle h;
	char pool[RM_PATH_MAX + 1] = "";
	int32_t st = 0;
	int rc = 0;

	/* it answers; an AUTH answer counts once authentication is done */
	if (op->kind != OP_AUTH)
		r->backoff_ns = BACKOFF_MIN_NS;
	if (type == RM_ERROR_RESP) {
		if (rm_decode_error_resp(p, n, &e) < 0 || e.status >= 0)
			return -EPROTO;
		st = e.status;
		log_dbg("resource manager %s: error %d: %.*s", r->address,
			e.status, (int)e.msg.len, e.msg.ptr ? e.msg.ptr : "");
	}
	switch (op->kind) {
	case OP_AUTH:
		rc = auth_step(r, op, type, p, n, st);
		r->sent = 0;
		return rc;
	case OP_ALLOC:
		if (!st)
			st = alloc_status(r, type, p, n, &h, pool);
		if (st == -EPROTO && type != RM_ERROR_RESP)
			return -EPROTO;
		if (st == -EACCES && !r->told_no_key) {
			log_err("resource manager %s: requires authentication; "
				"give maru-server --rm-key-file (its state "
				"directory's client.key)",
				r->address);
			r->told_no_key = true;
		}
		r->cache_ok = false;
		if (st && op->dax_i + 1 < r->ndax && op->w) {
			/* fill-first: the next pool, as a new request */
			op->dax_i++;
			op->sent = false;
			if (encode_alloc(r, op) == 0) {
				r->sent = 0;
				return 0;
			}
		}
		pop(r);
		if (op->w) {
			if (!st) {
				op->w->h = h;
				free(op->w->path);
				op->w->path = pool[0] ? strdup(pool) : NULL;
			}
			wait_done(op->w, st);
		} else if (!st) {
			log_info("region %llu: allocated for a requester that "
				 "gave up waiting; freeing it",
				 (unsigned long long)h.region_id);
			queue_free_op(r, &h);
		}
		break;
	case OP_FREE:
		if (!st && (type != RM_FREE_RESP ||
			    rm_decode_free_resp(p, n, &st) < 0 || st > 0))
			return -EPROTO;
		pop(r);
		r->cache_ok = false;
		if (st == -ENOENT)
			log_warn("region %llu: the resource manager no longer "
				 "knows it",
				 (unsigned long long)op->h.region_id);
		else if (st)
			log_err("region %llu: resource manager refused FREE "
				"(%d); forgetting it",
				(unsigned long long)op->h.region_id, st);
		else
			log_dbg("region %llu: freed at the resource manager",
				(unsigned long long)op->h.region_id);
		break;
	case OP_STATS:
		if (!st && (type != RM_STATS_RESP || take_stats(r, p, n) < 0))
			return -EPROTO;
		pop(r);
		r->stats_queued = false;
		stats_done(r, st);
		break;
	case OP_RELEASE: {
		struct rm_release_resp rr = {0};

		if (!st && (type != RM_RELEASE_RESP ||
			    rm_decode_release_resp(p, n, &rr) < 0))
			return -EPROTO;
		if (!st)
			st = rr.status;
		pop(r);
		r->release_queued = false;
		released(r, st, &rr);
		break;
	}
	default: /* OP_ACCESS */
		if (!st && (type != RM_GET_ACCESS_RESP ||
			    rm_decode_get_access_resp(p, n, &a) < 0))
			return -EPROTO;
		if (!st)
			st = a.status;
		pop(r);
		r->access_queued = false;
		if (st)
			log_err("resource manager %s: region %llu unknown "
				"after reconnect (%d)",
				r->address, (unsigned long long)op->h.region_id,
				st);
		break;
	}
	op_free_mem(op);
	r->sent = 0;
	return rc;
}

/* read what is there; complete every whole answer */
static void on_readable(struct rmsess *r)
{
	struct rm_hdr h;
	size_t need;
	ssize_t n;
	int rc;

	if (!r->head || r->sent < r->head->req.len) {
		/* nothing asked: EOF (a restart) or bytes we did not ask
		 * for; either way, start over */
		lost(r, "connection closed by peer", true);
		return;
	}
	for (;;) {
		need = RM_HDR_SIZE;
		rc = rm_hdr_decode(r->rx.data, r->rx.len, RX_MAX, &h);
		if (rc < 0) {
			lost(r, "protocol error", false);
			return;
		}
		if (rc == RM_HDR_SIZE)
			need += h.payload_len;
		if (r->rx.len < need) {
			if (buf_reserve(&r->rx, need - r->rx.len) < 0) {
				lost(r, "out of memory", false);
				return;
			}
			n = recv(r->fd, r->rx.data + r->rx.len,
				 need - r->rx.len, MSG_DONTWAIT);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				return;
			if (n <= 0) {
				lost(r,
				     n ? "read failed"
				       : "connection closed by peer",
				     n == 0);
				return;
			}
			r->rx.len += (size_t)n;
			continue;
		}
		rc = complete(r, h.type, r->rx.data + RM_HDR_SIZE,
			      h.payload_len);
		if (rc == -EACCES) {
			/* our key is refused (logged once): those waiting for
			 * an ALLOC are told now, the next try backs off */
			connect_failed(r, EACCES);
			return;
		}
		if (rc < 0) {
			lost(r, "protocol error", false);
			return;
		}
		buf_reset(&r->rx);
		start_next(r);
		/* the next answer can only follow a whole request */
		if (r->st != RS_UP || !r->head || r->sent < r->head->req.len)
			return;
	}
}

void rmsess_io(struct rmsess *r, uint32_t events)
{
	if (r->st == RS_CONNECTING) {
		connect_done(r);
		return;
	}
	if (r->st != RS_UP)
		return;
	if (events & EVLOOP_WRITE)
		pump(r);
	if (r->st == RS_UP && (events & (EVLOOP_READ | EVLOOP_ERROR)))
		on_readable(r);
}

/* an op that cannot get through (@op unlinked): fail it and free it */
static void give_up(struct rmsess *r, struct rmsess_op *op)
{
	log_err("resource manager %s: no usable answer to a request after %d "
		"attempts; giving up on it",
		r->address, MAX_TRIES);
	switch (op->kind) {
	case OP_ALLOC:
		if (op->w)
			wait_done(op->w, -EPROTO);
		break;
	case OP_STATS:
		r->stats_queued = false;
		stats_done(r, -EPROTO);
		break;
	case OP_ACCESS:
		r->access_queued = false;
		break;
	case OP_RELEASE:
		r->release_queued = false;
		r->release_at = now_ns() + 60ull * 1000000000ull;
		break;
	default:
		break;
	}
	op_free_mem(op);
}

void rmsess_forget(struct rmsess *r, struct mds_wait *w)
{
	struct rmsess_op *op, *prev = NULL;
	struct mds_wait **pp;

	for (op = r->head; op; prev = op, op = op->next) {
		if (op->kind != OP_ALLOC || op->w != w)
			continue;
		if (op->sent)
			return; /* in doubt: its answer undoes it */
		unlink_op(r, prev, op);
		op_free_mem(op);
		wait_done(w, -ECANCELED);
		return;
	}
	for (pp = &r->stat_waits; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			w->next = NULL;
			wait_done(w, -ECANCELED);
			return;
		}
	}
}

/* ---- an earlier identity's regions (rmsess_release_later) ---- */

static void queue_release(struct rmsess *r)
{
	struct rmsess_op *op = op_new(OP_RELEASE);

	if (!op ||
	    rm_encode_release_req(&op->req, rm_str_from(r->release_cid)) < 0) {
		if (op)
			op_free_mem(op);
		r->release_at = now_ns() + 1000000000ull;
		return;
	}
	r->release_queued = true;
	push(r, op, false);
	start_next(r);
}

/* the RM's answer to it: done, or again later */
static void released(struct rmsess *r, int st, const struct rm_release_resp *rr)
{
	uint64_t after_s = 60;

	if (st == 0)
		log_warn("resource manager %s: the %u region(s), %llu bytes, "
			 "of our earlier identity %s are released",
			 r->address, rr->regions, (unsigned long long)rr->bytes,
			 r->release_cid);
	if (st == 0 || st == -ENOENT) {
		r->release_cid[0] = '\0';
		return;
	}
	if (st == -EAGAIN)
		after_s = rr->regions + 1; /* its clients' window */
	else
		log_warn("resource manager %s: the regions of our earlier "
			 "identity %s stay held (%s); trying again in %llu s "
			 "(or: pool_monitor --release '%s')",
			 r->address, r->release_cid, strerror(-st),
			 (unsigned long long)after_s, r->release_cid);
	r->release_at = now_ns() + after_s * 1000000000ull;
}

void rmsess_release_later(struct rmsess *r, const char *cid, uint32_t after_s)
{
	snprintf(r->release_cid, sizeof(r->release_cid), "%s", cid);
	r->release_at = now_ns() + (uint64_t)after_s * 1000000000ull;
}

/* ---- deadlines ---- */

/* requesters whose time is up get -ETIMEDOUT; unsent ops go */
static void expire_waits(struct rmsess *r, uint64_t now)
{
	struct rmsess_op *op, *prev = NULL, *next;

	for (op = r->head; op; op = next) {
		next = op->next;
		if (op->kind != OP_ALLOC || !op->w || now < op->deadline) {
			prev = op;
			continue;
		}
		log_warn("resource manager %s: no answer to ALLOC within "
			 "%d ms; the request fails",
			 r->address, RMSESS_TIMEOUT_MS);
		wait_done(op->w, -ETIMEDOUT);
		op->w = NULL;
		if (op->sent) {
			prev = op; /* an orphan: free what it yields */
			continue;
		}
		unlink_op(r, prev, op);
		op_free_mem(op);
	}
	if (r->stat_waits && now >= r->stat_deadline)
		stats_done(r, -ETIMEDOUT);
}

void rmsess_tick(struct rmsess *r)
{
	uint64_t now = now_ns();

	expire_waits(r, now);
	if (r->release_cid[0] && !r->release_queued && r->st == RS_UP &&
	    now >= r->release_at)
		queue_release(r);
	if (r->st == RS_DOWN && now >= r->retry_at) {
		start_connect(r);
	} else if (r->st == RS_CONNECTING && now >= r->io_deadline) {
		connect_failed(r, ETIMEDOUT);
	} else if (r->st == RS_UP && r->head && r->sent &&
		   now >= r->io_deadline) {
		lost(r, "no answer in time", false);
	}
}

/* ---- life cycle ---- */

int rmsess_init(struct rmsess *r, const char *address, const char *client_id,
		const char *const *dax, int ndax)
{
	struct timespec ts;

	memset(r, 0, sizeof(*r));
	r->address = address;
	r->dax = dax;
	r->ndax = ndax;
	r->fd = -1;
	r->st = RS_DOWN;
	r->backoff_ns = BACKOFF_MIN_NS;
	/*
	 * The RM's idempotency cache answers a repeated (client id, request
	 * id) with its first answer, and a restarted server that kept its
	 * client id must not repeat one: ids start at the wall clock in ns.
	 */
	clock_gettime(CLOCK_REALTIME, &ts);
	r->next_request_id =
		(uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return rm_client_init(&r->c, address, client_id, RMSESS_TIMEOUT_MS);
}

struct start_walk {
	struct rmsess *r;
	bool *found; /* borrows: one per --dax-path */
};

static int start_stats_cb(const struct rm_pool_stat *s, void *arg)
{
	struct start_walk *sw = arg;
	int i = dax_index(sw->r, s->path);

	if (i >= 0)
		sw->found[i] = true;
	return stat_cb(s, sw->r);
}

int rmsess_start(struct rmsess *r)
{
	struct start_walk sw = {r, NULL};
	int rc, i;

	rc = rm_probe(r->address, 2000);
	if (rc < 0)
		return rc;
	r->c.hold_ms = r->hold_ms; /* should the STATS below authenticate */
	r->c.write_ms = r->write_ms;
	rc = rm_client_connect(&r->c);
	if (rc < 0)
		return rc;
	r->addrlen = sizeof(r->addr);
	if (getpeername(r->c.fd, (struct sockaddr *)&r->addr, &r->addrlen) < 0)
		return -errno;
	sw.found = calloc((size_t)r->ndax + 1, sizeof(bool));
	if (!sw.found)
		return -ENOMEM;
	/* the pool figures, and --dax-path checked against them */
	r->total_all = r->free_all = r->total_dax = r->free_dax = 0;
	forget_pools(r);
	rc = rm_client_stats(&r->c, start_stats_cb, &sw);
	if (rc < 0) {
		log_warn("resource manager %s: STATS failed (%d); cannot "
			 "check --dax-path",
			 r->address, rc);
	} else {
		r->cache_ok = r->cache_ever = true;
		r->cache_at = now_ns();
		for (i = 0; i < r->ndax; i++)
			if (!sw.found[dax_index(r, rm_str_from(r->dax[i]))])
				log_warn("--dax-path %s: the resource manager "
					 "has no pool with this path",
					 r->dax[i]);
	}
	free(sw.found);
	/*
	 * Recovered regions: does the RM still have them (and so re-pin them
	 * to our client id)?  Never skipped: a recovered location the RM
	 * was not asked about must not be served, so the start fails when
	 * the connection dropped and cannot be made again.
	 */
	if (r->verify) {
		if (!rm_client_connected(&r->c) &&
		    (rc = rm_client_connect(&r->c)) < 0)
			return rc;
		rc = r->verify(r->verify_arg, &r->c);
		if (rc < 0)
			return rc;
		if (!rm_client_connected(&r->c))
			return -ECONNRESET;
	}
	if (!rm_client_connected(&r->c)) {
		/* the loop connects again */
		r->st = RS_DOWN;
		r->retry_at = now_ns();
		r->ever_up = true;
		return 0;
	}
	/* the loop takes the connection over, and authenticates it first
	 * (unless the STATS above already did: --require-auth) */
	r->fd = r->c.fd;
	r->c.fd = -1;
	r->st = RS_UP;
	r->ever_up = true;
	if (!r->c.authed && queue_auth(r) < 0) {
		close_conn(r, true); /* the loop connects again */
		return 0;
	}
	start_next(r); /* sent now, under a deadline */
	return 0;
}

void rmsess_attach(struct rmsess *r,
		   void (*watch)(void *arg, int old_fd, int fd, uint32_t ev),
		   void *arg)
{
	r->watch = watch;
	r->watch_arg = arg;
	r->ev = 0;
	if (r->fd >= 0)
		set_watch(r, -1);
}

void rmsess_cancel(struct rmsess *r)
{
	struct rmsess_op *op;

	for (op = r->head; op; op = op->next) {
		if (op->kind == OP_ALLOC && op->w) {
			wait_done(op->w, -ECANCELED);
			op->w = NULL;
		}
	}
	stats_done(r, -ECANCELED);
}

void rmsess_destroy(struct rmsess *r)
{
	struct rmsess_op *op;

	while ((op = pop(r)))
		op_free_mem(op);
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	buf_free(&r->rx);
	forget_pools(r);
	rm_client_destroy(&r->c);
}

/* ---- store callbacks ---- */

static void queue_free_op(struct rmsess *r, const struct rm_handle *h)
{
	struct rm_free_req req = {
		.handle = *h,
		.client_id = rm_str_from(r->c.client_id),
		.request_id = r->next_request_id++,
	};
	struct rmsess_op *op = op_new(OP_FREE);

	if (!op || rm_encode_free_req(&op->req, &req) < 0) {
		log_err("region %llu: out of memory queueing its FREE; the "
			"resource manager keeps it until we exit",
			(unsigned long long)h->region_id);
		if (op)
			op_free_mem(op);
		return;
	}
	op->h = *h;
	push(r, op, false);
	start_next(r);
}

static int op_alloc(void *arg, uint64_t size, struct mds_wait *w,
		    struct rm_handle *out)
{
	struct rmsess *r = arg;
	struct rmsess_op *op;

	(void)out;
	if (r->st == RS_DOWN && now_ns() >= r->retry_at)
		start_connect(r); /* due anyway: do not wait for the tick */
	if (!w || r->st == RS_DOWN)
		return -EAGAIN;
	op = op_new(OP_ALLOC);
	if (!op)
		return -ENOMEM;
	op->size = size;
	op->w = w;
	op->deadline = now_ns() + TIMEOUT_NS;
	if (encode_alloc(r, op) < 0) {
		op_free_mem(op);
		return -ENOMEM;
	}
	r->cache_ok = false;
	push(r, op, false);
	start_next(r);
	return -EINPROGRESS;
}

static int op_free(void *arg, const struct rm_handle *h)
{
	struct rmsess *r = arg;

	r->cache_ok = false;
	queue_free_op(r, h);
	return 0;
}

static int op_pool_usage(void *arg, bool dax_only, uint64_t *total,
			 uint64_t *avail, struct mds_wait *w)
{
	struct rmsess *r = arg;

	if (r->cache_ok && now_ns() - r->cache_at <= CACHE_NS) {
		*total = dax_only ? r->total_dax : r->total_all;
		*avail = dax_only ? r->free_dax : r->free_all;
		return 0;
	}
	if (r->st == RS_DOWN && now_ns() >= r->retry_at)
		start_connect(r);
	if (r->st == RS_DOWN)
		return -EAGAIN;
	if (queue_stats(r) < 0)
		return -ENOMEM;
	if (!w) {
		/* the figures we have, while fresh ones are fetched */
		if (!r->cache_ever)
			return -EAGAIN;
		*total = dax_only ? r->total_dax : r->total_all;
		*avail = dax_only ? r->free_dax : r->free_all;
		return 0;
	}
	if (!r->stat_waits)
		r->stat_deadline = now_ns() + TIMEOUT_NS;
	w->next = r->stat_waits;
	r->stat_waits = w;
	return -EINPROGRESS;
}

/*
 * Why an ALLOC failed, for the client: what this session knows of the
 * resource manager (down and why, our key refused or missing) and of the
 * pool (its figures at the last STATS).
 */
static void op_why(void *arg, int rc, uint64_t size, char *buf, size_t len)
{
	struct rmsess *r = arg;
	char fr[32], tot[32], want[32];

	format_bytes(size, want, sizeof(want));
	if (rc == -EACCES || r->told_bad_key || r->told_no_key) {
		if (r->c.has_key)
			snprintf(buf, len,
				 "the resource manager at %s refuses "
				 "maru-server's key: give maru-server the "
				 "client.key of the resource manager's state "
				 "directory (--rm-key-file)",
				 r->address);
		else
			snprintf(buf, len,
				 "the resource manager at %s requires "
				 "authentication and maru-server has no key "
				 "for it: give maru-server --rm-key-file "
				 "(the client.key of its state directory)",
				 r->address);
	} else if (rc == -EAGAIN || rc == -EPROTO ||
		   (rc == -ETIMEDOUT && r->st != RS_UP)) {
		snprintf(buf, len,
			 "the resource manager at %s is not reachable from "
			 "maru-server (%s)",
			 r->address,
			 strerror(r->down_err ? r->down_err : ECONNREFUSED));
	} else if (rc == -ETIMEDOUT) {
		snprintf(buf, len,
			 "the resource manager at %s did not answer within "
			 "%d ms",
			 r->address, RMSESS_TIMEOUT_MS);
	} else if (rc == -ENOMEM || rc == -ENOSPC) {
		format_bytes(r->ndax ? r->free_dax : r->free_all, fr,
			     sizeof(fr));
		format_bytes(r->ndax ? r->total_dax : r->total_all, tot,
			     sizeof(tot));
		snprintf(buf, len,
			 "the pool cannot fit a region of %s (%s free of %s "
			 "at the last count, none of it one extent that "
			 "large): ask for less (pool_size, expand_size) or "
			 "give the resource manager a larger pool",
			 want, fr, tot);
	} else if (rc == -ENODEV) {
		snprintf(buf, len, "the resource manager at %s serves no pool",
			 r->address);
	} else if (rc == -ENOENT && r->ndax) {
		snprintf(buf, len,
			 "the resource manager at %s serves none of the "
			 "--dax-path pools",
			 r->address);
	} else {
		snprintf(buf, len, "the resource manager at %s: %s", r->address,
			 strerror(rc < 0 ? -rc : rc));
	}
}

const struct mds_rm_ops rmsess_ops = {
	.alloc = op_alloc,
	.free = op_free,
	.pool_usage = op_pool_usage,
	.why = op_why,
};
