/* SPDX-License-Identifier: Apache-2.0 */
/*
 * maru.h - libmaru, the Maru client library: zero-copy KV chunks in a shared
 * (CXL / DAX) memory pool
 *
 * A handler (struct maru_handler) is one client of a metadata server
 * (maru-server).  It owns one or more regions of the shared pool, hands out
 * fixed-size pages from them (maru_page_alloc), registers a key for a page
 * that the caller wrote in place (maru_kv_store), and resolves keys stored by
 * any handler, on this host or another host attached to the same pool, into
 * a pointer straight into the shared mapping (maru_kv_retrieve).  Only
 * metadata crosses the network; the bytes are never copied.
 *
 * The semantics are those of upstream Maru's Python MaruHandler
 * (docs/python-api.md); the Python package
 * is a thin wrapper over this API.  See docs/c-api.md for a tutorial and the
 * full reference.
 *
 * Conventions (docs/c-api.md, "Conventions"):
 *  - Functions that can fail return int: >= 0 on success, -errno on failure.
 *    Predicates return bool.  Nothing is printed unless a log function is
 *    set or MARU_LOG is set in the environment.
 *  - Ownership words: "borrows" (the callee keeps no reference after it
 *    returns, or the caller must keep the object alive as stated), "gives"
 *    (the caller must release the result), "takes" (the callee releases it).
 *  - Pointers into the shared pool (struct maru_page.ptr, struct
 *    maru_view.ptr, maru_region_get_buffer()) stay valid until
 *    maru_handler_close() / maru_handler_free().  A page's contents stay
 *    meaningful until the page is freed or its key deleted.
 *  - Loss of ownership (the metadata server restarted, or the lease
 *    expired): the regions no longer owned are "fenced", i.e. private
 *    anonymous memory replaces their mapping in place.  Pointers into them
 *    stay valid but no write reaches the pool; the next write operation
 *    recovers (new lease, new region).  docs/c-api.md, "Ownership loss and
 *    fencing".
 *
 * Errors that every operation on a handler may return:
 *  -ENOTCONN   the handler is not connected (call maru_handler_connect())
 *  -ESHUTDOWN  the handler is closing or closed (a closed handler is never
 *              reusable)
 *  -ETIMEDOUT  the metadata server did not answer within timeout_ms
 *  -EREMOTEIO  the server answered with an "error" reply
 *  -EPROTO     the server's reply could not be decoded
 *  -ENOMEM     out of (local) memory
 * and write operations (page alloc, store, batch store) also:
 *  -EKEYEXPIRED  ownership cannot be confirmed (the lease was not renewed
 *              for 3/4 TTL, or the connection dropped, and the server
 *              does not answer now)
 *  -ESTALE     a page of a region this handler no longer owns (fenced)
 *
 * Thread safety (docs/python-api.md): "write" operations (page alloc/free,
 * store, batch store, delete) are serialised by one handler-wide lock.
 * "Read" operations (retrieve, exists, pin, unpin, their batch forms,
 * healthcheck, stats, the accessors) take no handler lock and run
 * concurrently from any number of threads.  Unlike upstream, this also holds
 * with use_async_rpc=false (the lock-step socket is then serialised
 * internally instead of being unsafe).  maru_handler_connect(),
 * maru_handler_close() and maru_handler_free() must not race with each
 * other; close waits for in-flight writes.
 */
#ifndef MARU_MARU_H
#define MARU_MARU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MARU_VERSION_MAJOR 0
#define MARU_VERSION_MINOR 1
#define MARU_VERSION_PATCH 0

/**
 * maru_version - the library version string, e.g. "0.1.0"
 * Return: a static string (borrowed, never freed).
 */
const char *maru_version(void);

/* ------------------------------------------------------------------------ */
/* Keys                                                                     */
/* ------------------------------------------------------------------------ */

/*
 * A key is a string, an integer or a byte string.  The three kinds are never
 * converted into each other: the string "42" and the integer 42 are two
 * different keys (as with upstream's msgpack encoding).  Integers cover the
 * whole int64 and uint64 ranges: use MARU_KEY_INT for values that fit in
 * int64 and MARU_KEY_UINT for 2^63 .. 2^64-1 (a MARU_KEY_UINT below 2^63 is
 * the same key as the MARU_KEY_INT of that value).
 */
enum maru_key_type {
	MARU_KEY_STR = 0,  /* UTF-8 text: @str, @len (msgpack str) */
	MARU_KEY_INT = 1,  /* signed integer: @i */
	MARU_KEY_UINT = 2, /* unsigned integer: @u */
	MARU_KEY_BIN = 3,  /* raw bytes: @str, @len (msgpack bin) */
};

struct maru_key {
	int type;	 /* enum maru_key_type */
	size_t len;	 /* STR/BIN: bytes at @str */
	const char *str; /* STR/BIN: borrowed, need not be NUL-terminated */
	int64_t i;	 /* INT */
	uint64_t u;	 /* UINT */
};

/* maru_key_str - a string key over @len bytes at @s (borrowed) */
static inline struct maru_key maru_key_str(const char *s, size_t len)
{
	struct maru_key k = {MARU_KEY_STR, len, s, 0, 0};

	return k;
}

/* maru_key_int - a signed integer key */
static inline struct maru_key maru_key_int(int64_t v)
{
	struct maru_key k = {MARU_KEY_INT, 0, NULL, v, 0};

	return k;
}

/* maru_key_uint - an unsigned integer key (use for values >= 2^63) */
static inline struct maru_key maru_key_uint(uint64_t v)
{
	struct maru_key k = {MARU_KEY_UINT, 0, NULL, 0, v};

	return k;
}

/* ------------------------------------------------------------------------ */
/* Value types                                                              */
/* ------------------------------------------------------------------------ */

/*
 * A page obtained with maru_page_alloc() (upstream's AllocHandle).  The
 * caller writes up to @size bytes at @ptr, then registers it with
 * maru_kv_store(), or returns it with maru_page_free().  maru_kv_store()
 * reads only @region_id, @page_index and @size, so a page can be rebuilt
 * from those three numbers (as LMCache's adapter does).
 */
struct maru_page {
	void *ptr; /* borrows: into the shared mapping; NULL if unknown */
	uint64_t region_id;  /* global region id (resource manager) */
	uint64_t page_index; /* page in the region: offset / chunk_size */
	size_t size;	     /* bytes requested (<= chunk size) */
};

/*
 * A stored value found by maru_kv_retrieve() (upstream's MemoryInfo):
 * @len bytes at @ptr, straight over the shared mapping (read+write).
 */
struct maru_view {
	void *ptr;  /* borrows: NULL on a miss */
	size_t len; /* stored length (kv_length) */
	uint64_t region_id;
	uint64_t page_index; /* kv_offset / chunk_size */
	uint64_t offset;     /* kv_offset: byte offset inside the region */
};

/*
 * A region capability as issued by the resource manager (MaruHandle).
 * Opaque to clients except region_id and length; never alter a field.
 */
struct maru_region_handle {
	uint64_t region_id;
	uint64_t offset; /* mmap offset in the device or file */
	uint64_t length; /* aligned region length in bytes */
	uint64_t auth_token;
};

/* Page-allocator statistics of one owned region (PagedMemoryAllocator). */
struct maru_region_stats {
	uint64_t region_id;
	uint64_t pool_size;  /* region length in bytes */
	uint64_t chunk_size; /* page size in bytes */
	uint64_t page_count; /* pool_size / chunk_size */
	uint64_t num_free_pages;
	uint64_t num_allocated;
	uint64_t reserved[4]; /* zero; room for additions */
};

/* The typed part of a GET_STATS reply (missing fields read as 0). */
struct maru_server_stats {
	uint64_t total_entries;	  /* kv_manager */
	uint64_t total_size;	  /* kv_manager: sum of kv_length */
	uint64_t num_allocations; /* allocation_manager */
	uint64_t total_allocated; /* allocation_manager: bytes */
	uint64_t active_clients;  /* allocation_manager */
	uint64_t pool_total_size; /* cxl_pool.total_size (0 if absent) */
	uint64_t pool_free_size;  /* cxl_pool.free_size (0 if absent) */
	uint64_t reserved[4];	  /* zero; room for additions */
};

/* ------------------------------------------------------------------------ */
/* Configuration (upstream MaruConfig)                                      */
/* ------------------------------------------------------------------------ */

struct maru_config;

/**
 * maru_config_new - a configuration with upstream's defaults
 * @out: on success gives a config; release with maru_config_free()
 *
 * Defaults: server_url "tcp://localhost:5555", instance_id unset (a random
 * UUID4 string per handler), pool_size 100 MiB, chunk_size 1 MiB,
 * timeout_ms 2000, use_async_rpc true, max_inflight 64, eager_map true,
 * auto_expand true, expand_size unset (= pool_size), rm_address
 * "127.0.0.1:9850", enable_stats false.  The environment is not read; see
 * maru_config_apply_env().
 *
 * Return: 0 or -ENOMEM.
 * Context: any thread.
 */
int maru_config_new(struct maru_config **out);

/* maru_config_free - release @cfg (NULL is a no-op) */
void maru_config_free(struct maru_config *cfg);

/**
 * maru_config_apply_env - apply MARU_EAGER_MAP and MARU_STAT overrides
 * @cfg: borrowed
 * @why: if not NULL and the call fails, receives upstream's message, e.g.
 *       "MARU_STAT must be one of: 1/0, true/false, yes/no, on/off (got 'x')"
 * @whylen: size of @why
 *
 * Each variable, when set, overrides eager_map / enable_stats (strip,
 * lower-case; 1/true/yes/on or 0/false/no/off).
 *
 * Return: 0, or -EINVAL for an unparsable value (@cfg unchanged for it).
 * Context: any thread, not concurrently on one @cfg.
 */
int maru_config_apply_env(struct maru_config *cfg, char *why, size_t whylen);

/**
 * maru_config_validate - check the cross-field rules of MaruConfig
 * @cfg: borrowed
 * @why: if not NULL and the call fails, receives upstream's ValueError
 *       message, e.g. "pool_size (P) must be >= chunk_size_bytes (C)"
 * @whylen: size of @why
 *
 * Rules: chunk_size > 0; pool_size >= chunk_size; expand_size set only with
 * auto_expand; expand_size >= chunk_size.
 *
 * Return: 0 or -EINVAL.
 */
int maru_config_validate(const struct maru_config *cfg, char *why,
			 size_t whylen);

/*
 * Setters copy their argument (strings are strdup()ed: the caller keeps
 * ownership of what it passed).  Return: 0, -EINVAL (NULL or empty string
 * where one is required, negative numbers) or -ENOMEM.
 */
int maru_config_set_server_url(struct maru_config *cfg, const char *url);
/* @id NULL: a fresh random UUID4 string for each handler created; not
 * valid UTF-8: -EINVAL (the server refuses such ids) */
int maru_config_set_instance_id(struct maru_config *cfg, const char *id);
int maru_config_set_pool_size(struct maru_config *cfg, uint64_t bytes);
int maru_config_set_chunk_size(struct maru_config *cfg, uint64_t bytes);
/* @ms: per-RPC timeout; values <= 0 mean "do not wait at all" */
int maru_config_set_timeout_ms(struct maru_config *cfg, int ms);
int maru_config_set_use_async_rpc(struct maru_config *cfg, bool on);
/* @n >= 1: requests in flight at once on the pipelined socket */
int maru_config_set_max_inflight(struct maru_config *cfg, int n);
int maru_config_set_eager_map(struct maru_config *cfg, bool on);
int maru_config_set_auto_expand(struct maru_config *cfg, bool on);
/* @bytes 0: unset (expansions request pool_size) */
int maru_config_set_expand_size(struct maru_config *cfg, uint64_t bytes);
/* "host:port" of the resource manager; HANDSHAKE's answer wins over it */
int maru_config_set_rm_address(struct maru_config *cfg, const char *addr);
int maru_config_set_enable_stats(struct maru_config *cfg, bool on);
/*
 * CURVE (a maru-server started with --curve-secret-key-file): @key is the
 * server's public key, 40 Z85 characters or the path of its public
 * certificate; @path our secret certificate (maru-keygen NAME writes
 * NAME.key_secret).  Both or neither; NULL clears.  Read when the handler
 * is made (maru_handler_new() fails with -EINVAL/-errno and a log line
 * naming the file).  Environment: MARU_CURVE_SERVER_KEY and
 * MARU_CURVE_SECRET_KEY_FILE (maru_config_apply_env()).
 */
int maru_config_set_curve_server_key(struct maru_config *cfg, const char *key);
int maru_config_set_curve_secret_key_file(struct maru_config *cfg,
					  const char *path);
/*
 * @on (default true): a call that finds no connection to the server retries
 * its connect until its deadline, as libzmq reconnects.  false: it makes
 * one attempt and fails at once with that attempt's error (-ECONNREFUSED,
 * -EHOSTUNREACH, -EPROTO, -EACCES ...), its cause in
 * maru_handler_last_error(): for tools that sample a server that may be
 * away (marutop).
 */
int maru_config_set_connect_retry(struct maru_config *cfg, bool on);
bool maru_config_get_connect_retry(const struct maru_config *cfg);

/*
 * The remote path (docs/remote.md): on a host that cannot map the pool,
 * the handler moves the bytes over UCX through a maru-agent running on a
 * host that can.  @url: the agent's "tcp://HOST:PORT" (NULL: none).
 * @mode: "auto" (the default: remote when an agent is set and the pool
 * cannot be mapped here), "on" (always; needs an agent) or "off" (never).
 * The agent's CURVE key (Z85 or a certificate path) defaults to the
 * server's (curve_server_key); the handler's own certificate is the same.
 * Environment (maru_config_apply_env()): MARU_AGENT_URL, MARU_REMOTE,
 * MARU_AGENT_CURVE_KEY.
 */
enum maru_remote_mode {
	MARU_REMOTE_AUTO,
	MARU_REMOTE_ON,
	MARU_REMOTE_OFF,
};
int maru_config_set_agent_url(struct maru_config *cfg, const char *url);
const char *maru_config_get_agent_url(const struct maru_config *cfg);
int maru_config_set_agent_curve_key(struct maru_config *cfg, const char *key);
const char *maru_config_get_agent_curve_key(const struct maru_config *cfg);
/* Return: 0 or -EINVAL (not "auto", "on" or "off") */
int maru_config_set_remote(struct maru_config *cfg, const char *mode);
const char *maru_config_get_remote(const struct maru_config *cfg);

/* Getters: strings are borrowed from @cfg (valid until the next set/free);
 * instance_id is NULL when unset, expand_size 0 when unset. */
const char *maru_config_get_server_url(const struct maru_config *cfg);
const char *maru_config_get_instance_id(const struct maru_config *cfg);
uint64_t maru_config_get_pool_size(const struct maru_config *cfg);
uint64_t maru_config_get_chunk_size(const struct maru_config *cfg);
int maru_config_get_timeout_ms(const struct maru_config *cfg);
bool maru_config_get_use_async_rpc(const struct maru_config *cfg);
int maru_config_get_max_inflight(const struct maru_config *cfg);
bool maru_config_get_eager_map(const struct maru_config *cfg);
bool maru_config_get_auto_expand(const struct maru_config *cfg);
uint64_t maru_config_get_expand_size(const struct maru_config *cfg);
const char *maru_config_get_rm_address(const struct maru_config *cfg);
bool maru_config_get_enable_stats(const struct maru_config *cfg);
const char *maru_config_get_curve_server_key(const struct maru_config *cfg);
const char *
maru_config_get_curve_secret_key_file(const struct maru_config *cfg);

/* ------------------------------------------------------------------------ */
/* Handler lifecycle                                                        */
/* ------------------------------------------------------------------------ */

struct maru_handler;

/**
 * maru_log_fn - a log sink
 * @arg: the pointer given to maru_handler_set_log_fn()
 * @priority: syslog priority (LOG_ERR 3 .. LOG_DEBUG 7)
 * @file, @line, @func: where the message was emitted (borrowed)
 * @msg: one line, no trailing newline (borrowed for the call only)
 *
 * Called from any thread, including the library's background threads
 * (lease heartbeat, stats reporter), possibly concurrently.  A sink must not
 * call back into the handler.
 */
typedef void (*maru_log_fn)(void *arg, int priority, const char *file, int line,
			    const char *func, const char *msg);

/**
 * maru_region_added_fn - called for each region this handler comes to own
 * @arg: the pointer given to maru_handler_set_on_region_added()
 * @region_id: the new owned region
 * @page_count: its number of pages
 *
 * Runs in the thread that called maru_handler_set_on_region_added() (the
 * replay) or maru_page_alloc() (an expansion), with the handler's write lock
 * held: it may call the accessors (maru_region_get_buffer(),
 * maru_region_page_count(), maru_region_get_stats(), ...) and read
 * operations, but no write operation (that would deadlock).
 */
typedef void (*maru_region_added_fn)(void *arg, uint64_t region_id,
				     uint64_t page_count);

/**
 * maru_handler_new - create a handler (no I/O)
 * @cfg: borrowed; copied, later changes to @cfg do not affect the handler
 * @out: on success gives a handler; release with maru_handler_free()
 *
 * Reads MARU_PREFAULT ("0" disables pre-faulting) and MARU_LOG (default log
 * priority: a number 0-7 or err/warning/info/debug; unset = silent).  Does
 * not apply MARU_EAGER_MAP/MARU_STAT (see maru_config_apply_env()).  When the
 * config has no instance_id a random UUID4 string is generated.
 *
 * Return: 0, -EINVAL (maru_config_validate() fails) or -ENOMEM.
 * Context: any thread.
 */
int maru_handler_new(const struct maru_config *cfg, struct maru_handler **out);

/**
 * maru_handler_free - close @h if needed and release it
 * @h: taken (NULL is a no-op)
 *
 * Context: no other call on @h may be running or start afterwards.
 */
void maru_handler_free(struct maru_handler *h);

/**
 * maru_handler_set_log_fn - replace the log sink
 * @fn: NULL restores the default (stderr, "libmaru: <msg>")
 * @arg: passed to @fn (borrowed: must outlive the handler or the next set)
 *
 * Context: before maru_handler_connect(), or whenever no other thread uses
 * @h (background threads read the sink without a lock).
 */
void maru_handler_set_log_fn(struct maru_handler *h, maru_log_fn fn, void *arg);

/**
 * maru_handler_set_log_priority - messages above @priority are dropped
 * @priority: -1 (silent) .. 7 (LOG_DEBUG)
 * Context: any thread.
 */
void maru_handler_set_log_priority(struct maru_handler *h, int priority);

/* maru_handler_get_log_priority - the current priority (-1 = silent) */
int maru_handler_get_log_priority(const struct maru_handler *h);

/**
 * maru_handler_connect - connect to the metadata server and get a region
 *
 * Steps (upstream's connect): open the RPC socket; scan local device-DAX
 * headers (uuid -> local path); HANDSHAKE (its rm_address wins over the
 * config's; a HANDSHAKE that times out fails the connect at once); start a
 * lease when the server grants one (HEARTBEAT with a lease_id, renewed every
 * TTL/4 from a background thread); REQUEST_ALLOC of pool_size, GET_ACCESS at
 * the resource manager, map and pre-fault the region; with eager_map map every
 * other instance's region listed by LIST_ALLOCATIONS (failures only logged, not
 * pre-faulted); with enable_stats start the 1 s REPORT_STATS thread.  The
 * region-added callback is not fired for this first region.
 *
 * The TCP connection to the server is made once, at once: nothing
 * listening there fails with -ECONNREFUSED without waiting (later calls,
 * after a dropped connection, retry a refused server until timeout_ms, as
 * libzmq reconnects).  A peer that does not speak ZMTP fails with -EPROTO
 * (bytes that are not a ZMTP greeting), -ECONNRESET (closed at once) or
 * -ETIMEDOUT (no greeting within timeout_ms).
 *
 * Return: 0 (also when already connected), -ESHUTDOWN after close, or
 * -errno of the step that failed (-ECONNREFUSED, -EHOSTUNREACH, -EPROTO,
 * -ECONNRESET, -ETIMEDOUT, -EACCES (CURVE key refused), -EREMOTEIO,
 * -ENOSPC when the server could not allocate, -ECONNREFUSED/-EPROTO/... from
 * the resource manager, -errno of open/mmap).  maru_handler_connect_error()
 * then tells the cause in one line.  On failure everything obtained so far
 * is released (the region is returned with RETURN_ALLOC) and the handler
 * may be connected again.
 * Context: not concurrently with other calls on @h.
 */
int maru_handler_connect(struct maru_handler *h);

/**
 * maru_handler_connect_error - why the last maru_handler_connect() failed
 *
 * One line that names the address and the cause, the first error the
 * connect met, e.g. "tcp://127.0.0.1:5555: connection refused (is
 * maru-server running there?)" or "tcp://127.0.0.1:9850 does not speak the
 * Maru metadata protocol (ZMTP greeting expected): it answered as
 * maru-resource-manager does".  It is kept whatever the log priority (the
 * same line is logged at LOG_ERR when the priority lets it through).
 *
 * Return: borrowed, valid until the next connect or free of @h; "" before
 * the first connect and after a successful one.
 * Context: after maru_handler_connect() returned, not concurrently with it.
 */
const char *maru_handler_connect_error(const struct maru_handler *h);

/**
 * maru_handler_last_error - why the calling thread's last call on @h that
 * returned an error failed, in one line, naming the cause and what to do
 * ("no free page in this handler's regions, and a new region of 4.0M
 * could not be had: Allocation failed: the resource manager at
 * 127.0.0.1:9850 is not reachable from maru-server (Connection
 * refused)", "key of 70000 bytes is longer than the server's
 * --max-key-bytes (65536)", "value of 2097152 bytes is larger than a page
 * (chunk_size_bytes 1048576)").  Per thread, like errno: read it right
 * after the call, from the thread that made it.  Calls that cannot say
 * more than their error code leave it "".
 *
 * Return: borrowed, valid until the thread's next call on @h; "".
 * Context: any thread.
 */
const char *maru_handler_last_error(const struct maru_handler *h);

/**
 * maru_handler_close - return every owned region and unmap everything
 *
 * No-op when not connected.  Marks the handler closing (new operations fail
 * with -ESHUTDOWN; this is never undone), stops the background threads,
 * waits for in-flight writes, RETURN_ALLOCs every owned region (errors
 * logged), releases the lease, unmaps every region and clears the local key
 * map.  Every pointer obtained from the handler becomes invalid.
 *
 * Context: not concurrently with connect/free; read operations still running
 * in other threads must have returned (their pointers die here).
 */
void maru_handler_close(struct maru_handler *h);

/* maru_handler_is_connected - connected and not closing */
bool maru_handler_is_connected(const struct maru_handler *h);

/* The remote path's figures (docs/remote.md); all 0 without an agent. */
struct maru_remote_stats {
	bool remote;	    /* the handler moves bytes through the agent */
	uint64_t puts;	    /* pages written with ucp_put */
	uint64_t put_bytes; /* ... their bytes */
	uint64_t gets;	    /* pages read with ucp_get */
	uint64_t get_bytes;
	uint64_t errors;   /* transfers that failed (the call failed) */
	uint64_t connects; /* UCX endpoints made to the agent */
};
void maru_handler_remote_stats(const struct maru_handler *h,
			       struct maru_remote_stats *out);

/* A maru-agent's own figures (its STATS request, docs/remote.md). */
struct maru_agent_stats {
	uint64_t sessions;	      /* control connections open now */
	uint64_t sessions_total;      /* ... accepted since it started */
	uint64_t refused_connections; /* ... refused (too many, CURVE) */
	uint64_t granted, denied;     /* ACCESS requests */
	uint64_t bad_requests;	      /* requests that did not decode */
	uint64_t regions;	      /* regions lent now */
	uint64_t bytes_mapped;	      /* ... their bytes */
	uint64_t revoked;	      /* regions revoked */
	uint64_t puts, put_bytes;     /* pages written into the pool */
	uint64_t gets, get_bytes;     /* pages read from it */
	uint64_t refused_transfers;   /* no session, no grant, out of bounds */
};
/**
 * maru_agent_stats - ask the agent @cfg names (agent_url; CURVE with its
 * keys, as a handler of @cfg would) for its figures, over a connection of
 * its own; no handler needed (pool_monitor --agent)
 * @why: the cause of a failure, one line (may be NULL)
 * Return: 0, -EINVAL (no agent_url), or the connection's -errno
 */
int maru_agent_stats(const struct maru_config *cfg,
		     struct maru_agent_stats *out, char *why, size_t whylen);

/* maru_handler_instance_id - the owner id (borrowed from @h, never NULL) */
const char *maru_handler_instance_id(const struct maru_handler *h);

/* maru_handler_chunk_size - the page size in bytes (chunk_size) */
uint64_t maru_handler_chunk_size(const struct maru_handler *h);

/**
 * maru_handler_lease_ttl_ms - the lease granted by the server
 * Return: the lease TTL in milliseconds, 0 when the server grants none (or
 * before connect).
 */
uint64_t maru_handler_lease_ttl_ms(const struct maru_handler *h);

/**
 * maru_handler_healthcheck - HEARTBEAT round trip
 * Return: true if connected, not closing and the server answered without an
 * "error"; false otherwise (never an error code).
 * Context: any thread (read).
 */
bool maru_handler_healthcheck(struct maru_handler *h);

/**
 * maru_handler_get_stats - GET_STATS, typed
 * @out: filled on success
 * Return: 0 or -errno.  Context: any thread (read).
 */
int maru_handler_get_stats(struct maru_handler *h,
			   struct maru_server_stats *out);

/**
 * maru_handler_get_stats_raw - GET_STATS, the reply payload as received
 * @buf: on success gives the MessagePack map (a malloc()ed copy); release
 *       with maru_buf_free()
 * @len: its length
 *
 * For callers that want every field (stats_manager per client and op):
 * decode it with any MessagePack library.
 * Return: 0 or -errno.  Context: any thread (read).
 */
int maru_handler_get_stats_raw(struct maru_handler *h, void **buf, size_t *len);

/* maru_buf_free - release a buffer given by the library (NULL: no-op) */
void maru_buf_free(void *buf);

/**
 * maru_handler_set_on_region_added - register the region-added callback
 * @fn: NULL unregisters
 * @arg: passed to @fn (borrowed until unregistered or the handler freed)
 *
 * On registration @fn is called at once for every owned region in order
 * (the replay); afterwards once for each region added by auto-expansion.
 * See maru_region_added_fn for the context it runs in.
 * Return: 0.  Context: any thread; takes the write lock.
 */
int maru_handler_set_on_region_added(struct maru_handler *h,
				     maru_region_added_fn fn, void *arg);

/**
 * maru_handler_owned_region_ids - ids of the owned regions, oldest first
 * (fenced regions, no longer owned, are left out)
 * @ids: receives up to @cap ids (may be NULL when @cap is 0)
 * Return: the number of owned regions (may exceed @cap; 0 when not
 * connected).  Context: any thread.
 */
int maru_handler_owned_region_ids(struct maru_handler *h, uint64_t *ids,
				  size_t cap);

/* ------------------------------------------------------------------------ */
/* Regions                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * maru_region_get_buffer - a pointer into any mapped region
 * @region_id: an owned region or another instance's region mapped by now
 * @offset, @size: the byte range wanted inside the region
 *
 * Return: the address of @offset in the mapping (borrowed, valid until
 * close), or NULL when the region is not mapped or the range does not fit.
 * Context: any thread.
 */
void *maru_region_get_buffer(struct maru_handler *h, uint64_t region_id,
			     uint64_t offset, uint64_t size);
/*
 * maru_region_get_read_buffer - the same where retrieves of the region
 * land: for a remote handler (docs/remote.md) its read mirror, distinct
 * from the pages alloc() gives; otherwise maru_region_get_buffer()'s.
 */
void *maru_region_get_read_buffer(struct maru_handler *h, uint64_t region_id,
				  uint64_t offset, uint64_t size);

/**
 * maru_region_page_count - pages of a region
 * Return: the allocator's page count for an owned region, mapped length /
 * chunk_size for a mapped shared region, -ENOENT for an unknown region.
 * Context: any thread.
 */
int64_t maru_region_page_count(struct maru_handler *h, uint64_t region_id);

/**
 * maru_region_get_stats - page-allocator statistics of an owned region
 * Return: 0, or -ENOENT when @region_id is not owned.
 * Context: any thread.
 */
int maru_region_get_stats(struct maru_handler *h, uint64_t region_id,
			  struct maru_region_stats *out);

/**
 * maru_region_get_handle - the resource-manager handle of a mapped region
 * @region_id: owned or mapped; use maru_handler_owned_region_ids()[0] for
 *             upstream's pool_handle
 * Return: 0, or -ENOENT when the region is neither owned nor mapped.
 * Context: any thread.
 */
int maru_region_get_handle(struct maru_handler *h, uint64_t region_id,
			   struct maru_region_handle *out);

/* maru_region_is_owned - @region_id is one of this handler's regions (and
 * not fenced) */
bool maru_region_is_owned(struct maru_handler *h, uint64_t region_id);

/* ------------------------------------------------------------------------ */
/* Pages                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * maru_page_alloc - take a free page to write a value into
 * @size: bytes the caller will write, at most chunk_size
 * @out: on success the page (ptr, region_id, page_index, size)
 *
 * Tries the active owned region, then the others in order (switching the
 * active one).  When all are full and auto_expand is on, requests a new
 * region of expand_size, maps it, fires the region-added callback and
 * retries.  After a loss of ownership it first recovers (a new lease) and
 * takes the page from a new region of pool_size (even with auto_expand
 * off), announced to the region-added callback like an expansion.
 *
 * Return: 0, or
 *  -EINVAL       @size is larger than chunk_size ("Requested size S
 *                exceeds chunk_size C")
 *  -ENOSPC       all pages taken and auto_expand is off ("pool exhausted and
 *                auto_expand is disabled")
 *  -ENOMEM       the expansion failed ("pool exhausted after expansion
 *                attempt"; the cause is logged)
 *  -ENOBUFS      the new region yielded no page ("Cannot allocate page after
 *                expansion")
 *  -EKEYEXPIRED  ownership cannot be confirmed: the lease has not been
 *                renewed for 3/4 of its TTL, or the connection to the
 *                server dropped, and the server does not answer now
 *                either (or a recovery cannot reach it); writing is
 *                stopped until it answers
 *  -ENOTCONN, -ESHUTDOWN
 * Context: any thread (write lock).
 */
int maru_page_alloc(struct maru_handler *h, size_t size, struct maru_page *out);

/**
 * maru_page_free - return a page to its allocator
 * @region_id, @page_index: as from maru_page_alloc()
 *
 * Also forgets any key this handler stored in that page; the server is not
 * told (the key stays registered: delete it first with maru_kv_delete()).
 * Return: 0 (also for a page of a region dropped after a loss of
 * ownership), -ENOENT (region not owned), -EINVAL (page out of range or not
 * allocated), -ENOTCONN, -ESHUTDOWN.
 * Context: any thread (write lock).
 */
int maru_page_free(struct maru_handler *h, uint64_t region_id,
		   uint64_t page_index);

/* ------------------------------------------------------------------------ */
/* Key-value operations                                                     */
/* ------------------------------------------------------------------------ */

/**
 * maru_kv_store - register @page, already written in place, under @key
 * @key: borrowed
 * @page: borrowed; only region_id, page_index and size are read
 *
 * One REGISTER_KV round trip (registering is idempotent and answers whether
 * the key existed, so there is no separate existence check).  When @key is
 * already in this handler's key map, or the server says it exists (first
 * writer wins), the page is freed and the store counts as a success.  On an
 * RPC failure the page is freed as well.
 *
 * Return: 1 stored under a new key, 0 the key existed (page freed),
 * -EKEYEXPIRED (ownership unconfirmed, as for maru_page_alloc(); page
 * freed), -ENOTCONN/-ESHUTDOWN (page not touched), -EINVAL (@page not an
 * allocated page of an owned region),
 * -ESTALE (@page's region was fenced: ownership lost; never registered, no
 * RPC), or the RPC's -errno (page freed).  Python maps >= 0 to True, every
 * error to False.
 * Context: any thread (write lock).
 */
int maru_kv_store(struct maru_handler *h, const struct maru_key *key,
		  const struct maru_page *page);

/**
 * maru_kv_retrieve - find @key and map its region if needed
 * @out: on a hit, the view of the stored bytes; on a miss ptr NULL, len 0
 *
 * When maru-server publishes its shared index (docs/shm-index.md), the key
 * is looked up in it with no request: a hit in a region this handler has
 * mapped, or a miss the index proves, is answered at once; anything else
 * (and every lookup with MARU_SHM_INDEX=0) is one LOOKUP_KV round trip.
 * A region neither owned nor mapped yet is mapped (GET_ACCESS + mmap +
 * pre-fault) on first use.
 * Return: 1 found, 0 not found, or -errno (RPC failure, or the region could
 * not be mapped; Python maps every failure to None).
 * Context: any thread (read).
 */
int maru_kv_retrieve(struct maru_handler *h, const struct maru_key *key,
		     struct maru_view *out);

/**
 * maru_view_valid - do @v's bytes still come from the pool?
 *
 * False once the view's mapping was fenced (the metadata server restarted,
 * stopped answering for half a lease TTL, or the lease expired): its
 * pointer stays valid but reads private memory (zeros), not the stored
 * bytes.  Check it after reading a view that was held for a while; a
 * fresh maru_kv_retrieve() maps the region again.
 * Context: any thread (lock-free).
 */
bool maru_view_valid(struct maru_handler *h, const struct maru_view *v);

/**
 * maru_kv_retrieve_ticket - maru_kv_retrieve(), plus the hit's ticket
 * @ticket: out: the registration number of the entry read (0 on a miss,
 *	or from a server that does not number entries)
 *
 * maru-server evicts cold keys when the pool is full (docs/metadata-
 * server.md "Eviction"): a page is reused only a grace (300 ms by default)
 * after its key left the index, so a copy started at once is safe.  A
 * reader that may take longer, or wants certainty, reads the view and then
 * asks maru_kv_recheck() whether the entry it read is still the one.
 * Context: any thread (read).
 */
int maru_kv_retrieve_ticket(struct maru_handler *h, const struct maru_key *key,
			    struct maru_view *out, uint64_t *ticket);

/**
 * maru_kv_recheck - after reading @v (from maru_kv_retrieve_ticket() of
 * @key): were those the stored bytes all along?  One LOOKUP_KV.
 * Return: 1 yes (@key still names the same entry, mapping not fenced), 0
 * no (evicted, deleted, stored again, or fenced: discard what was read),
 * or -errno (RPC failure: unknown).  Context: any thread (read).
 */
int maru_kv_recheck(struct maru_handler *h, const struct maru_key *key,
		    const struct maru_view *v, uint64_t ticket);

/**
 * maru_kv_exists - EXISTS_KV
 * Return: 1 exists, 0 absent, -errno.  Context: any thread (read).
 */
int maru_kv_exists(struct maru_handler *h, const struct maru_key *key);

/*
 * What a handler answered from maru-server's shared index
 * (docs/shm-index.md) since it was made.
 */
struct maru_index_stats {
	bool attached;	       /* an index is mapped and in use now */
	bool noncoherent;      /* ... and its lines are invalidated before
				* every read (hosts sharing CXL memory) */
	uint64_t local_hits;   /* lookups it answered: found */
	uint64_t local_misses; /* ... not there (a miss it proves) */
	uint64_t fallbacks;    /* lookups it could not answer: requests */
};

/**
 * maru_handler_index_stats - the counters above
 * Return: 0.  Context: any thread (lock-free).
 */
int maru_handler_index_stats(struct maru_handler *h,
			     struct maru_index_stats *out);

/**
 * maru_kv_pin - PIN_KV: pin @key (a pinned key cannot be deleted)
 * Return: 1 pinned, 0 absent, -errno.  Context: any thread (read).
 */
int maru_kv_pin(struct maru_handler *h, const struct maru_key *key);

/**
 * maru_kv_pin_ttl - PIN_KV with a deadline: a soft pin that maru-server
 * drops by itself @ttl_ms milliseconds later (0: a plain pin), so that a
 * process that pinned and died cannot hold the key forever.  A later soft
 * pin of the same key by the same instance moves the deadline of all its
 * soft pins of it; maru_kv_unpin() drops a soft pin first.  Soft pins do
 * not outlive a restart of maru-server; an upstream server takes it as a
 * plain pin.
 * Return: 1 pinned, 0 absent, -errno.  Context: any thread (read).
 */
int maru_kv_pin_ttl(struct maru_handler *h, const struct maru_key *key,
		    uint32_t ttl_ms);

/**
 * maru_kv_unpin - UNPIN_KV
 * Return: 1 unpinned, 0 absent or not pinned, -errno.
 * Context: any thread (read).
 */
int maru_kv_unpin(struct maru_handler *h, const struct maru_key *key);

/**
 * maru_kv_delete - DELETE_KV; frees the local page if this handler stored it
 * Return: 1 deleted, 0 absent or pinned, -errno.
 * Context: any thread (write lock).
 */
int maru_kv_delete(struct maru_handler *h, const struct maru_key *key);

/*
 * Batch forms: @n entries, one RPC.  Result arrays have @n elements and are
 * always written (all false / empty views) when the call fails after
 * argument checking.  The return value is the number of true results (hits)
 * or -errno; -EINVAL when an array is NULL while @n > 0.
 */

/**
 * maru_kv_batch_store - maru_kv_store() for @n pages in one BATCH_REGISTER_KV
 * @results: per entry, true = stored or already existed (its page freed)
 *
 * Keys already in the local key map are answered locally; the others go in
 * one BATCH_REGISTER_KV.  A key that lost a race (is_new false) has its page
 * freed and counts as success (upstream leaked that page).  When the RPC
 * fails every page sent is freed and its result is false.  Pages of fenced
 * regions (ownership lost) are never registered: false.
 * Context: any thread (write lock).
 */
int maru_kv_batch_store(struct maru_handler *h, const struct maru_key *keys,
			const struct maru_page *pages, size_t n, bool *results);

/**
 * maru_kv_batch_retrieve - BATCH_LOOKUP_KV; per entry as maru_kv_retrieve()
 * @views: per entry, ptr NULL on a miss (or when its region cannot be mapped)
 * @tickets: (the _tickets form) per entry, as maru_kv_retrieve_ticket()
 * Context: any thread (read).
 */
int maru_kv_batch_retrieve_tickets(struct maru_handler *h,
				   const struct maru_key *keys, size_t n,
				   struct maru_view *views, uint64_t *tickets);
int maru_kv_batch_retrieve(struct maru_handler *h, const struct maru_key *keys,
			   size_t n, struct maru_view *views);

/* maru_kv_batch_exists - BATCH_EXISTS_KV (every key checked) */
int maru_kv_batch_exists(struct maru_handler *h, const struct maru_key *keys,
			 size_t n, bool *results);

/* maru_kv_batch_pin - BATCH_PIN_KV (stops at the first missing key) */
int maru_kv_batch_pin(struct maru_handler *h, const struct maru_key *keys,
		      size_t n, bool *results);

/* maru_kv_batch_pin_ttl - BATCH_PIN_KV of soft pins (maru_kv_pin_ttl) */
int maru_kv_batch_pin_ttl(struct maru_handler *h, const struct maru_key *keys,
			  size_t n, bool *results, uint32_t ttl_ms);

/* maru_kv_batch_unpin - BATCH_UNPIN_KV */
int maru_kv_batch_unpin(struct maru_handler *h, const struct maru_key *keys,
			size_t n, bool *results);

/* ------------------------------------------------------------------------ */
/* The protocols without a handler's session: tools, and the Python
 * package's compatibility classes (RpcClient, MaruShmClient,
 * device_scanner), which are thin layers over these.                       */

/**
 * maru_handler_call - one request to the metadata server, outside the
 * handler's session: no HANDSHAKE, no lease, no regions.  @h need not be
 * connected; it gives the configuration (server_url, timeout_ms,
 * use_async_rpc: pipelined, max_inflight, connect_retry, the CURVE keys)
 * and the logging.  The calls use a connection of their own, made at the
 * first one.
 * @msg_type: the request's type (docs/protocol.md)
 * @payload, @len: its MessagePack payload; the header is written here
 * @reply, @reply_len: get the reply's payload (a malloc()ed copy; release
 *   with maru_buf_free())
 * Return: 0; -ETIMEDOUT, -ECONNRESET, -EPROTO or -ENOMEM as for every
 * call; -EINVAL for a NULL @payload with a length.
 * Context: any thread (lock-step calls queue; pipelined ones overlap).
 */
int maru_handler_call(struct maru_handler *h, uint8_t msg_type,
		      const void *payload, size_t len, void **reply,
		      size_t *reply_len);

/* A client of the resource manager (docs/resource-manager.md): one
 * connection, one request at a time (callers are serialised), reconnected
 * and retried once with the same request id when it breaks. */
struct maru_rm;

/* How the resource manager answered a request that failed. */
struct maru_rm_status {
	bool answered; /* it did: the return value is its status */
	char msg[256]; /* the text of its ERROR_RESP, or "" */
};

/* A region as ALLOC or GET_ACCESS describes it. */
struct maru_rm_region {
	struct maru_region_handle handle;
	uint64_t requested_size; /* ALLOC only */
	char path[4097];	 /* where to open it, NUL-terminated */
	char uuid[65];		 /* its device's MARUDEV uuid, or "" */
};

/* One pool of the resource manager (STATS). */
struct maru_pool_info {
	const char *dax_path; /* borrowed for the callback's duration */
	uint32_t dax_type;    /* 0 DEV_DAX, 1 FS_DAX */
	uint64_t total_size;
	uint64_t free_size;
	uint64_t align_bytes;
};

/**
 * maru_rm_open - a client of the resource manager at @address
 * ("host:port"); connects at the first request.  Its client id is
 * "<hostname>:<pid>", its request ids are unique in the process.
 * @timeout_ms: connect and per-request budget (<= 0: 10 s)
 * Return: 0, -EINVAL (a bad address) or -ENOMEM.
 */
int maru_rm_open(const char *address, int timeout_ms, struct maru_rm **out);
void maru_rm_close(struct maru_rm *rm);
const char *maru_rm_client_id(const struct maru_rm *rm);

/*
 * The requests.  Return: 0, or -errno with @st (may be NULL) telling
 * whether the resource manager answered so (its status, and the text of
 * an ERROR_RESP) or the transport failed (-ECONNREFUSED, -ETIMEDOUT,
 * -ECONNRESET, -EPROTO ...).
 */
int maru_rm_alloc(struct maru_rm *rm, uint64_t size, const char *dax_path,
		  struct maru_rm_region *out, struct maru_rm_status *st);
int maru_rm_free(struct maru_rm *rm, const struct maru_region_handle *h,
		 struct maru_rm_status *st);
int maru_rm_get_access(struct maru_rm *rm, const struct maru_region_handle *h,
		       struct maru_rm_region *out, struct maru_rm_status *st);
/* @fn once per pool, in the resource manager's order; its non-zero
 * return stops the walk and is returned */
int maru_rm_stats(struct maru_rm *rm,
		  int (*fn)(const struct maru_pool_info *p, void *arg),
		  void *arg, struct maru_rm_status *st);
/* @fn once per counter of the resource manager (COUNTERS, an addition:
 * regions, clients, allocs, frees, reaped_*, checkpoints, ...; names are
 * ASCII, the set may grow); -ENOTSUP from a resource manager without it */
int maru_rm_counters(struct maru_rm *rm,
		     int (*fn)(const char *name, uint64_t value, void *arg),
		     void *arg, struct maru_rm_status *st);

/**
 * maru_device_header_read - the MARUDEV header at the start of @path (a
 * device-DAX device, or a file standing in for one)
 * @uuid: gets its 36-character text form
 * @version: gets its version (1 is the one this library writes)
 * Return: 0, -ENOENT (no header), or the -errno of opening/mapping @path.
 */
int maru_device_header_read(const char *path, char uuid[37], uint32_t *version);

/* maru_device_header_write - a version-1 header with @uuid (16 bytes;
 * NULL zeroes the header).  Return: 0 or -errno. */
int maru_device_header_write(const char *path, const uint8_t *uuid);

/**
 * maru_device_scan - every local device-DAX device with a MARUDEV header
 * (/sys/bus/dax/devices, nodes in /dev), in directory order
 * @fn: gets the node's path and the header's uuid text; a non-zero return
 *      stops the scan and is returned
 */
int maru_device_scan(int (*fn)(const char *dev, const char *uuid, void *arg),
		     void *arg);

#ifdef __cplusplus
}
#endif

#endif
