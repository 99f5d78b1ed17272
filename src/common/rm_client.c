/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm_client.c - blocking resource manager client (see rm_client.h)
 *
 * Every request goes through rm_transact(): encode once into c->tx, send,
 * read the 12-byte header and the payload into c->rx under one deadline.
 * A transport failure closes the socket; the request is then retried once
 * on a fresh connection with the same bytes (same request id).  ALLOC and
 * FREE first authenticate the connection when the client has a key
 * (rm_auth.h); the other requests need no authentication.
 */
#include "rm_client.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net.h"
#include "util.h"

/* Responses are small; STATS grows with the pool count.  Cap it anyway. */
#define RM_CLIENT_MAX_RESPONSE (1u << 20)

int rm_client_init(struct rm_client *c, const char *address,
		   const char *client_id, int timeout_ms)
{
	char hn[128];
	int n;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
	if (!address ||
	    parse_host_port(address, c->host, sizeof(c->host), &c->port) < 0)
		return -EINVAL;
	if (client_id) {
		n = snprintf(c->client_id, sizeof(c->client_id), "%s",
			     client_id);
	} else {
		if (gethostname(hn, sizeof(hn)) < 0)
			snprintf(hn, sizeof(hn), "localhost");
		hn[sizeof(hn) - 1] = '\0';
		n = snprintf(c->client_id, sizeof(c->client_id), "%s:%d", hn,
			     (int)getpid());
	}
	if (n <= 0 || n >= (int)sizeof(c->client_id))
		return -EINVAL;
	return 0;
}

int rm_client_load_key(struct rm_client *c, const char *path)
{
	const char *reader = NULL;
	char def[4200];
	int rc;

	if (!path)
		path = getenv("MARU_RM_KEY_FILE");
	if (!path || !*path) {
		/* a worker host gets only the reader key (--require-auth) */
		reader = getenv("MARU_RM_READER_KEY_FILE");
		path = reader && *reader
			       ? reader
			       : rm_auth_key_default(def, sizeof(def));
	}
	c->reader = path == reader;
	rm_client_disconnect(
		c); /* an authenticated connection is the old key's */
	rc = rm_auth_key_load(path, c->key);
	c->has_key = rc == 0;
	return rc;
}

void rm_client_destroy(struct rm_client *c)
{
	rm_client_disconnect(c);
	buf_free(&c->tx);
	buf_free(&c->rx);
}

void rm_client_disconnect(struct rm_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->authed = false;
}

/* Resolve and connect to host:port.  Return: a non-blocking fd or -errno */
static int dial(const char *host, uint16_t port, int timeout_ms)
{
	char portstr[8];

	snprintf(portstr, sizeof(portstr), "%u", port);
	return net_dial(host, portstr,
			now_ns() + (uint64_t)timeout_ms * 1000000);
}

int rm_client_connect(struct rm_client *c)
{
	int fd;

	if (c->fd >= 0)
		return 0;
	fd = dial(c->host, c->port, c->timeout_ms);
	if (fd < 0)
		return fd;
	c->fd = fd;
	return 0;
}

int rm_probe(const char *address, int timeout_ms)
{
	char host[256];
	uint16_t port;
	int fd;

	if (parse_host_port(address, host, sizeof(host), &port) < 0)
		return -EINVAL;
	fd = dial(host, port, timeout_ms > 0 ? timeout_ms : 1000);
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

/*
 * Send @msg on the current connection and read the response: c->rx holds
 * its payload and *type its type.  Return: 0 or a transport error.
 */
static int roundtrip(struct rm_client *c, const struct buf *msg, uint16_t *type,
		     uint64_t deadline)
{
	uint8_t hb[RM_HDR_SIZE];
	struct rm_hdr h;
	int rc;

	rc = net_send_all(c->fd, msg->data, msg->len, deadline);
	if (rc < 0)
		return rc;
	rc = net_recv_all(c->fd, hb, sizeof(hb), deadline);
	if (rc < 0)
		return rc;
	if (rm_hdr_decode(hb, sizeof(hb), RM_CLIENT_MAX_RESPONSE, &h) !=
	    RM_HDR_SIZE)
		return -EPROTO;
	buf_reset(&c->rx);
	rc = buf_reserve(&c->rx, h.payload_len);
	if (rc < 0)
		return rc;
	rc = net_recv_all(c->fd, c->rx.data, h.payload_len, deadline);
	if (rc < 0)
		return rc;
	c->rx.len = h.payload_len;
	*type = h.type;
	return 0;
}

/* one AUTH step's answer. Return: 0, the status refused with, -EPROTO */
static int auth_answer(struct rm_client *c, uint16_t type,
		       struct rm_auth_resp *a)
{
	struct rm_error_resp e;

	if (type == RM_ERROR_RESP &&
	    rm_decode_error_resp(c->rx.data, c->rx.len, &e) == 0 &&
	    e.status < 0) {
		snprintf(c->error, sizeof(c->error), "%.*s", (int)e.msg.len,
			 e.msg.ptr ? e.msg.ptr : "");
		c->answered = true;
		return e.status;
	}
	if (type != RM_AUTH_RESP ||
	    rm_decode_auth_resp(c->rx.data, c->rx.len, a) < 0 || a->status > 0)
		return -EPROTO;
	return a->status;
}

/*
 * The AUTH exchange (rm_auth.h) on the current connection.  Return: 0;
 * -EKEYREJECTED when the server's proof is wrong (another key: not our
 * resource manager); the server's refusal (-EACCES: our key is wrong);
 * or a transport error.
 */
static int authenticate(struct rm_client *c, uint64_t deadline)
{
	struct rm_auth_req q = {.step = 1,
				.client_id = rm_str_from(c->client_id),
				.hold_ms = c->hold_ms,
				.write_ms = c->write_ms,
				.reader = c->reader};
	uint8_t cn[RM_AUTH_NONCE_LEN];
	struct buf b = BUF_INIT;
	struct rm_auth_resp a;
	uint16_t type;
	int rc;

	rc = rm_auth_random(cn, sizeof(cn));
	memcpy(q.data, cn, sizeof(cn));
	if (rc == 0)
		rc = rm_encode_auth_req(&b, &q);
	if (rc == 0)
		rc = roundtrip(c, &b, &type, deadline);
	if (rc == 0)
		rc = auth_answer(c, type, &a);
	if (rc == 0)
		rc = rm_auth_prove(c->key, cn, q.client_id, &a, q.data);
	if (rc == 0) {
		q.step = 2;
		q.client_id.len = 0;
	}
	if (rc == 0) {
		buf_reset(&b);
		rc = rm_encode_auth_req(&b, &q);
	}
	if (rc == 0)
		rc = roundtrip(c, &b, &type, deadline);
	if (rc == 0)
		rc = auth_answer(c, type, &a);
	buf_free(&b);
	c->authed = rc == 0;
	return rc;
}

/*
 * One exchange of c->tx on the current connection (made, and for @auth
 * authenticated, first).  Return: 0 with the response in c->rx, or an
 * error (authenticate()'s, or a transport one).
 */
static int exchange(struct rm_client *c, uint16_t *type, bool auth)
{
	uint64_t deadline = now_ns() + (uint64_t)c->timeout_ms * 1000000;
	int rc;

	/* the default key is looked for at the first ALLOC/FREE only: most
	 * clients (readers, STATS) never need it */
	if (auth && !c->has_key && !c->key_tried) {
		c->key_tried = true;
		(void)rm_client_load_key(c, NULL);
	}
	rc = rm_client_connect(c);
	if (rc == 0 && auth && c->has_key && !c->authed)
		rc = authenticate(c, deadline);
	if (rc == 0)
		rc = roundtrip(c, &c->tx, type, deadline);
	return rc;
}

/*
 * Send c->tx and receive the response, retrying once on a new connection.
 * Return: 0 with c->rx holding a response of type @want; the status of an
 * ERROR_RESP; or a transport error (the connection is then closed).
 */
/* ALLOC and FREE ids: from 1, unique in the process (docs/protocol.md §1) */
static _Atomic uint64_t request_ids = 1;

static uint64_t next_request_id(void)
{
	return atomic_fetch_add(&request_ids, 1);
}

void rm_client_ids_from(uint64_t first)
{
	atomic_store(&request_ids, first);
}

/* c->tx emptied, for the request's encoder */
static struct buf *tx(struct rm_client *c)
{
	buf_reset(&c->tx);
	return &c->tx;
}

/*
 * rm_transact - send the request just encoded into c->tx (@enc: the
 * encoder's result, passed on when it failed) and read a reply of type
 * @want into c->rx
 */
static int transact_once(struct rm_client *c, int enc, uint16_t want,
			 bool auth);

static int rm_transact(struct rm_client *c, int enc, uint16_t want, bool auth)
{
	int rc = transact_once(c, enc, want, auth || c->auth_all);

	/*
	 * A resource manager with --require-auth refuses even STATS and
	 * GET_ACCESS before AUTH: from then on authenticate first, with our
	 * key (the default one looked for now), and ask again once.
	 */
	if (rc == -EACCES && !auth && !c->auth_all && !c->authed &&
	    !strncmp(c->error, RM_AUTH_REQUIRED, strlen(RM_AUTH_REQUIRED))) {
		c->auth_all = true;
		if (!c->has_key && !c->key_tried) {
			c->key_tried = true;
			(void)rm_client_load_key(c, NULL);
		}
		if (c->has_key)
			rc = transact_once(c, 0, want, true);
	}
	return rc;
}

static int transact_once(struct rm_client *c, int enc, uint16_t want, bool auth)
{
	struct rm_error_resp e;
	uint16_t type = 0;
	int rc, attempt;

	if (enc < 0)
		return enc;
	c->error[0] = '\0';
	c->answered = false;
	for (attempt = 0; attempt < 2; attempt++) {
		rc = exchange(c, &type, auth);
		if (rc == 0)
			break;
		rm_client_disconnect(c);
		if (rc == -ENOMEM || c->answered || rc == -EKEYREJECTED)
			return rc; /* not the transport's fault */
	}
	if (rc < 0)
		return rc;
	if (type == RM_ERROR_RESP) {
		if (rm_decode_error_resp(c->rx.data, c->rx.len, &e) < 0 ||
		    e.status >= 0) {
			rm_client_disconnect(c);
			return -EPROTO;
		}
		snprintf(c->error, sizeof(c->error), "%.*s", (int)e.msg.len,
			 e.msg.ptr ? e.msg.ptr : "");
		c->answered = true;
		return e.status;
	}
	if (type != want) {
		rm_client_disconnect(c);
		return -EPROTO;
	}
	c->answered = true;
	return 0;
}

static void copy_str(char *dst, size_t dstlen, struct rm_str s)
{
	size_t n = s.len < dstlen - 1 ? s.len : dstlen - 1;

	if (n)
		memcpy(dst, s.ptr, n);
	dst[n] = '\0';
}

/* a reply's status as a return value: 0, -errno, or -EPROTO for a
 * positive one (the protocol has none) */
static int status_rc(int32_t status)
{
	return status > 0 ? -EPROTO : status;
}

int rm_client_alloc(struct rm_client *c, uint64_t size, const char *dax_path,
		    struct rm_alloc_result *out)
{
	struct rm_alloc_req req = {
		.size = size,
		.dax_path = rm_str_from(dax_path),
		.client_id = rm_str_from(c->client_id),
		.request_id = next_request_id(),
	};
	struct rm_alloc_resp resp;
	int rc;

	rc = rm_transact(c, rm_encode_alloc_req(tx(c), &req), RM_ALLOC_RESP,
			 true);
	if (rc < 0)
		return rc;
	if (rm_decode_alloc_resp(c->rx.data, c->rx.len, &resp) < 0)
		return -EPROTO;
	if (resp.status)
		return status_rc(resp.status);
	out->handle = resp.handle;
	out->requested_size = resp.requested_size;
	copy_str(out->path, sizeof(out->path), resp.path);
	copy_str(out->uuid, sizeof(out->uuid), resp.uuid);
	return 0;
}

int rm_client_free(struct rm_client *c, const struct rm_handle *h)
{
	struct rm_free_req req = {
		.handle = *h,
		.client_id = rm_str_from(c->client_id),
		.request_id = next_request_id(),
	};
	int32_t status;
	int rc;

	rc = rm_transact(c, rm_encode_free_req(tx(c), &req), RM_FREE_RESP,
			 true);
	if (rc < 0)
		return rc;
	if (rm_decode_free_resp(c->rx.data, c->rx.len, &status) < 0)
		return -EPROTO;
	return status_rc(status);
}

int rm_client_get_access(struct rm_client *c, const struct rm_handle *h,
			 struct rm_access_result *out)
{
	struct rm_get_access_req req = {
		.handle = *h,
		.client_id = rm_str_from(c->client_id),
	};
	struct rm_get_access_resp resp;
	int rc;

	rc = rm_transact(c, rm_encode_get_access_req(tx(c), &req),
			 RM_GET_ACCESS_RESP, false);
	if (rc < 0)
		return rc;
	if (rm_decode_get_access_resp(c->rx.data, c->rx.len, &resp) < 0)
		return -EPROTO;
	if (resp.status)
		return status_rc(resp.status);
	copy_str(out->path, sizeof(out->path), resp.path);
	copy_str(out->uuid, sizeof(out->uuid), resp.uuid);
	out->offset = resp.offset;
	out->length = resp.length;
	return 0;
}

int rm_client_stats(struct rm_client *c,
		    int (*fn)(const struct rm_pool_stat *s, void *arg),
		    void *arg)
{
	struct rm_stats_resp resp;
	struct rm_pool_stat s;
	size_t cur = 0;
	uint32_t i;
	int rc;

	rc = rm_transact(c, rm_encode_stats_req(tx(c)), RM_STATS_RESP, false);
	if (rc < 0)
		return rc;
	if (rm_decode_stats_resp(c->rx.data, c->rx.len, &resp) < 0)
		return -EPROTO;
	for (i = 0; i < resp.num_pools; i++) {
		rc = rm_stats_next(&resp, &cur, &s);
		if (rc <= 0)
			return -EPROTO; /* fewer records than announced */
		rc = fn(&s, arg);
		if (rc)
			return rc;
	}
	return 0;
}

int rm_client_counters(struct rm_client *c,
		       int (*fn)(const struct rm_counter *k, void *arg),
		       void *arg)
{
	struct rm_counters_resp resp;
	struct rm_counter k;
	size_t cur = 0;
	uint32_t i;
	int rc;

	rc = rm_transact(c, rm_encode_counters_req(tx(c)), RM_COUNTERS_RESP,
			 false);
	if (rc == -ENOSYS || rc == -EPROTO || rc == -EINVAL)
		return -ENOTSUP; /* an older resource manager: unknown type */
	if (rc < 0)
		return rc;
	if (rm_decode_counters_resp(c->rx.data, c->rx.len, &resp) < 0)
		return -EPROTO;
	for (i = 0; i < resp.num; i++) {
		rc = rm_counters_next(&resp, &cur, &k);
		if (rc <= 0)
			return -EPROTO;
		rc = fn(&k, arg);
		if (rc)
			return rc;
	}
	return 0;
}

int rm_client_owners(struct rm_client *c,
		     int (*fn)(const struct rm_owner *o, void *arg), void *arg,
		     uint32_t *omitted)
{
	struct rm_owners_resp resp;
	struct rm_owner o;
	size_t cur = 0;
	uint32_t i;
	int rc;

	rc = rm_transact(c, rm_encode_owners_req(tx(c)), RM_OWNERS_RESP, false);
	if (rc == -ENOSYS || (rc == -EPROTO && c->answered))
		return -ENOTSUP; /* an older resource manager */
	if (rc < 0)
		return rc;
	if (rm_decode_owners_resp(c->rx.data, c->rx.len, &resp) < 0)
		return -EPROTO;
	if (omitted)
		*omitted = resp.omitted;
	for (i = 0; i < resp.num; i++) {
		rc = rm_owners_next(&resp, &cur, &o);
		if (rc <= 0)
			return -EPROTO;
		rc = fn(&o, arg);
		if (rc)
			return rc;
	}
	return 0;
}

int rm_client_release(struct rm_client *c, const char *id,
		      struct rm_release_resp *out)
{
	int rc;

	memset(out, 0, sizeof(*out));
	rc = rm_transact(c, rm_encode_release_req(tx(c), rm_str_from(id)),
			 RM_RELEASE_RESP, true);
	if (rc == -ENOSYS)
		return -ENOTSUP;
	if (rc < 0)
		return rc;
	if (rm_decode_release_resp(c->rx.data, c->rx.len, out) < 0)
		return -EPROTO;
	return out->status;
}
