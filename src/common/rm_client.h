/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm_client.h - a small blocking client for the resource manager
 *
 * One TCP connection, one request at a time, exactly like upstream's Python
 * MaruShmClient: connect with a timeout, TCP_NODELAY, client id
 * "<hostname>:<pid>", request ids for ALLOC and FREE unique in the process
 * (the server's idempotency cache is keyed by client id, which every
 * client of one process shares), and on a
 * broken connection (or a timeout) close, reconnect and send the very same
 * bytes once more -- safe because the server's idempotency cache answers a
 * repeated request id with the cached response.
 *
 * Users: libmaru (GET_ACCESS; and maru_rm_*, its public client, which the
 * Python MaruShmClient wraps), pool_monitor (STATS).
 *
 * Errors: every call returns 0 or a negative errno.  A status the server
 * sent (ALLOC_RESP/FREE_RESP/GET_ACCESS_RESP status, or ERROR_RESP) is
 * returned as is (c->answered set), and an ERROR_RESP message is kept in
 * c->error.  Transport
 * failures come back as -ECONNREFUSED, -ECONNRESET, -ETIMEDOUT, -EPROTO
 * (garbage from the peer) ...; after one of those rm_client_connected() is
 * false.
 *
 * Context: not thread-safe; one caller at a time per struct rm_client
 * (callers that share one wrap it in a mutex).  The client id is taken at
 * init: a forked child must init its own client.
 */
#ifndef MARU_COMMON_RM_CLIENT_H
#define MARU_COMMON_RM_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "rm_auth.h"
#include "rm_proto.h"

#define RM_UUID_MAX 64

struct rm_client {
	char host[256]; /* name or numeric address */
	uint16_t port;
	int fd;		/* owns: -1 when disconnected */
	int timeout_ms; /* budget for connect, and per request */
	char client_id[RM_CLIENT_ID_MAX + 1];
	bool answered;	   /* the last request got a reply */
	struct buf tx;	   /* owns: the request being sent */
	struct buf rx;	   /* owns: payload of the last response */
	char error[256];   /* text of the last ERROR_RESP, or "" */
	bool has_key;	   /* ALLOC/FREE authenticate first (rm_auth.h) */
	bool authed;	   /* ... done on this connection */
	bool key_tried;	   /* the default key was looked for */
	uint32_t hold_ms;  /* declared at AUTH (rm_auth.h); 0: none */
	uint32_t write_ms; /* ... and, with a hold until we return, how
			    * long our clients may write after we go */
	bool reader;	   /* @key is a reader.key (STATS, GET_ACCESS) */
	bool auth_all;	   /* the RM wants AUTH for every request
			    * (--require-auth): seen once, kept */
	uint8_t key[RM_AUTH_KEY_LEN];
};

struct rm_alloc_result {
	struct rm_handle handle;
	uint64_t requested_size;
	char path[RM_PATH_MAX + 1]; /* NUL-terminated */
	char uuid[RM_UUID_MAX + 1]; /* "" for FS_DAX */
};

struct rm_access_result {
	char path[RM_PATH_MAX + 1];
	uint64_t offset;
	uint64_t length;
	char uuid[RM_UUID_MAX + 1];
};

/**
 * rm_client_init - prepare a client; does no I/O
 * @address: "host:port"
 * @client_id: NULL for "<hostname>:<pid>"; at most 127 bytes
 * @timeout_ms: connect and per-request budget; <= 0 means 10000
 * Return: 0 or -EINVAL.  Release with rm_client_destroy() in every case.
 */
int rm_client_init(struct rm_client *c, const char *address,
		   const char *client_id, int timeout_ms);

/**
 * rm_client_load_key - authenticate ALLOC and FREE with the key in @path
 * @path: NULL for $MARU_RM_KEY_FILE, else $MARU_RM_READER_KEY_FILE (a
 *        reader key: STATS and GET_ACCESS only), else rm_auth_key_default()
 * The first ALLOC or FREE of a client without a key calls it with NULL
 * (a failure ignored): a client that can read the default key file
 * authenticates without being told.
 * Return: 0, or rm_auth_key_load()'s error (the client then has no key).
 */
int rm_client_load_key(struct rm_client *c, const char *path);

/* rm_client_ids_from - this process's next request id is @first: for a
 * tool whose processes share one client id (none may reuse an id) */
void rm_client_ids_from(uint64_t first);

/* rm_client_destroy - close the connection and free the buffers */
void rm_client_destroy(struct rm_client *c);

/**
 * rm_client_connect - open the connection now (requests connect lazily too)
 * Return: 0 or -errno of the failed connect (-ETIMEDOUT after timeout_ms).
 */
int rm_client_connect(struct rm_client *c);

/* rm_client_disconnect - close the connection; the next request reconnects */
void rm_client_disconnect(struct rm_client *c);

static inline bool rm_client_connected(const struct rm_client *c)
{
	return c->fd >= 0;
}

/**
 * rm_probe - is a resource manager listening at @address?  Connects and
 * closes without sending anything (the server ignores such probes).
 * Return: 0 or -errno.
 */
int rm_probe(const char *address, int timeout_ms);

/**
 * rm_client_alloc - ALLOC_REQ
 * @dax_path: pool to allocate from, NULL or "" for any pool
 * @out: filled on success
 * Return: 0, the server's status (-ENOMEM, -ENOENT, -ENODEV, -EINVAL,
 * -EPERM ...), or a transport error.
 */
int rm_client_alloc(struct rm_client *c, uint64_t size, const char *dax_path,
		    struct rm_alloc_result *out);

/**
 * rm_client_free - FREE_REQ for a handle this client allocated
 * Return: 0, -ENOENT (unknown region), -EPERM (not the owner), -EACCES
 * (bad token), or a transport error.
 */
int rm_client_free(struct rm_client *c, const struct rm_handle *h);

/**
 * rm_client_get_access - GET_ACCESS_REQ: where to map @h
 * Return: 0, -ENOENT, -EACCES, or a transport error.
 */
int rm_client_get_access(struct rm_client *c, const struct rm_handle *h,
			 struct rm_access_result *out);

/**
 * rm_client_stats - STATS_REQ; calls @fn once per pool, in wire order
 * @fn: gets a record that borrows from the client's buffer for the duration
 *	of the call; a non-zero return stops the walk and is returned
 * Return: 0, @fn's value, -EPROTO for a malformed response, or a transport
 * error.
 */
int rm_client_stats(struct rm_client *c,
		    int (*fn)(const struct rm_pool_stat *s, void *arg),
		    void *arg);

/**
 * rm_client_counters - COUNTERS_REQ (an addition); @fn once per counter,
 * as rm_client_stats().  A resource manager without it answers an
 * ERROR_RESP: Return: -ENOTSUP then.
 */
int rm_client_counters(struct rm_client *c,
		       int (*fn)(const struct rm_counter *k, void *arg),
		       void *arg);

/**
 * rm_client_owners - OWNERS_REQ (an addition); @fn once per owner, as
 * rm_client_stats(); *@omitted (may be NULL): owners past the answer's
 * bound.  An older resource manager: Return: -ENOTSUP.
 */
int rm_client_owners(struct rm_client *c,
		     int (*fn)(const struct rm_owner *o, void *arg), void *arg,
		     uint32_t *omitted);

/**
 * rm_client_release - RELEASE_REQ (an addition): free every region of the
 * absent owner @id; authenticates with the client key first
 * @out: the answer (regions and bytes freed)
 * Return: 0, the server's status (-ENOENT: it owns nothing; -EBUSY: it
 * is connected; -EAGAIN: it left too recently, its clients may still
 * write; -EACCES: no client key), -ENOTSUP (an older resource manager),
 * or a transport error.
 */
int rm_client_release(struct rm_client *c, const char *id,
		      struct rm_release_resp *out);

#endif
