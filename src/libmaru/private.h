/* SPDX-License-Identifier: Apache-2.0 */
/*
 * private.h - libmaru internals shared by the library's .c files
 *
 * Everything here is hidden (-fvisibility=hidden plus libmaru.sym); public
 * entry points are marked MARU_EXPORT.  Helpers shared across files are
 * named maru__x (libuv convention).
 *
 * Module map, each file above the ones it calls (docs/threads.md,
 * "Dependencies"; docs/c-api.md has the picture):
 *   kv.c       the KV calls: page alloc/free, store, retrieve, recheck,
 *              exists, pin/unpin, delete, batch forms
 *   handler.c  the handler's life: new, connect, close, free, accessors,
 *              healthcheck and stats; regions obtained (REQUEST_ALLOC)
 *   evict.c    the eviction inbox: notices noted from every reply, applied
 *              under wlock; pages and regions given back (RETURN_ALLOC);
 *              maru__call, the requests on the main connection
 *   ownership.c  leases (docs/metadata-server.md) and loss of ownership:
 *              verification, fencing of stale mappings, recovery on the
 *              next write; calls up only through the hooks it is given
 *              (struct maru__hb_hooks)
 *   stats.c    per-op stats buffer and the REPORT_STATS thread
 *   shmindex.c the shared index: keys looked up with no request
 *              (docs/shm-index.md), attached from HANDSHAKE replies
 *   mapper.c   region mappings (GET_ACCESS + mmap), UUID -> local path;
 *              on a host that cannot map the pool, stand-ins (remote.c)
 *   remote.c   the pool through maru-agent over UCX (docs/remote.md):
 *              the agent's keys, ucp_put/ucp_get of pages
 *   rpc.c      ZMTP-over-TCP client, in the calling thread: REQ lock-step
 *              or DEALER pipelined; its watch thread calls up only through
 *              the callbacks it is given (on_lost, on_tick)
 *   dial.c     a connection for rpc.c: the URL, connect, the ZMTP or CURVE
 *              handshake, one line on why it failed
 *   alloc.c    page allocator (FIFO free ring) + owned-region manager
 *   keymap.c   the handler's local key -> (region, page) map
 *   codec.c    metadata-server payloads: msgpack-c encoders for requests,
 *              decoders for replies over the one MessagePack reader
 *              (src/common/msgpk.h)
 *   config.c   struct maru_config, env overrides, validation, uuid4
 *   log.c      the handler's replaceable log sink, a connect's cause, the
 *              calling thread's last failure
 *   tools.c    the protocols without a handler's session: maru_rm_* and
 *              maru_device_* over src/common (no handler, no other file)
 */
#ifndef MARU_PRIVATE_H
#define MARU_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include <maru/maru.h>

#include "htab.h"
#include "keyform.h"
#include "mds_proto.h"
#include "msgpk.h" /* msgpack-c's packer, and its sink mp_wr */
#include "rm_client.h"
#include "shmidx.h"
#include "zcurve.h"
#include "zmtp.h"

#define MARU_EXPORT __attribute__((visibility("default")))

/*
 * maru__test_getenv - a knob of the tests (a fault injector, a background
 * job turned off), read from the environment only by the test variant of
 * the library, compiled with MARU_TEST_HOOKS (src/libmaru/CMakeLists.txt).
 * In the product it is NULL, and @name is not even in the binary.
 */
#ifdef MARU_TEST_HOOKS
#define maru__test_getenv(name) getenv(name)
#else
#define maru__test_getenv(name) ((const char *)NULL)
#endif

#define MARU_DEFAULT_SERVER_URL "tcp://localhost:5555"
#define MARU_DEFAULT_RM_ADDRESS "127.0.0.1:9850"
#define MARU_DEFAULT_POOL_SIZE (100ull << 20)
#define MARU_DEFAULT_CHUNK_SIZE (1ull << 20)
#define MARU_DEFAULT_TIMEOUT_MS 2000
#define MARU_DEFAULT_MAX_INFLIGHT 64

/* ------------------------------------------------------------------------ */
/* config.c                                                                 */

/* The body of the opaque struct maru_config (upstream MaruConfig). */
struct maru_config {
	char *server_url;      /* owns: strdup()ed */
	char *instance_id;     /* owns: strdup()ed; NULL = random per handler */
	uint64_t pool_size;    /* bytes requested for the first region */
	uint64_t chunk_size;   /* page size in bytes */
	int timeout_ms;	       /* per-RPC timeout */
	bool use_async_rpc;    /* DEALER pipelined vs REQ lock-step */
	int max_inflight;      /* DEALER in-flight cap */
	bool eager_map;	       /* map others' regions at connect */
	bool auto_expand;      /* request a new region when pages run out */
	uint64_t expand_size;  /* 0 = unset (use pool_size) */
	char *rm_address;      /* owns: "host:port", fallback only */
	bool enable_stats;     /* REPORT_STATS every second */
	char *curve_server;    /* owns: Z85 key or certificate path; NULL */
	char *curve_secret;    /* owns: our secret certificate; NULL */
	bool connect_retry;    /* a call without a connection retries its dial
				* until its deadline; else one attempt */
	char *agent_url;       /* owns: maru-agent's "tcp://host:port"; NULL */
	char *agent_curve_key; /* owns: its public key; NULL: curve_server's */
	int remote;	       /* enum maru_remote_mode */
};

/* maru__config_copy - deep copy of @src into @dst. 0 or -ENOMEM */
int maru__config_copy(struct maru_config *dst, const struct maru_config *src);
/* maru__config_release - free the strings of an embedded config */
void maru__config_release(struct maru_config *cfg);

/* maru__uuid4 - a random UUID4 in text form into @out (37 bytes) */
void maru__uuid4(char out[37]);

/* maru__now_ns - CLOCK_MONOTONIC in nanoseconds */
uint64_t maru__now_ns(void);

/* ------------------------------------------------------------------------ */
/* log.c                                                                    */

struct maru_handler;

void maru__log(const struct maru_handler *h, int prio, const char *file,
	       int line, const char *func, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/*
 * maru__log_capture - an error while maru_handler_connect() runs: kept as
 * its cause (the first one, by the connecting thread only) whatever the
 * priority, and logged as maru__log() would
 */
void maru__log_capture(const struct maru_handler *h, int prio, const char *file,
		       int line, const char *func, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/* the priority test happens before any formatting (but a connect's
 * error is always formatted: it is the cause maru_handler_connect_error()
 * tells) */
#define maru__logp(h, prio, ...)                                               \
	do {                                                                   \
		if ((prio) <= LOG_ERR &&                                       \
		    atomic_load_explicit(&(h)->capturing,                      \
					 memory_order_acquire))                \
			maru__log_capture((h), (prio), __FILE__, __LINE__,     \
					  __func__, __VA_ARGS__);              \
		else if ((prio) <= atomic_load_explicit(&(h)->log_priority,    \
							memory_order_relaxed)) \
			maru__log((h), (prio), __FILE__, __LINE__, __func__,   \
				  __VA_ARGS__);                                \
	} while (0)
#define lerr(h, ...) maru__logp(h, LOG_ERR, __VA_ARGS__)
#define lwarn(h, ...) maru__logp(h, LOG_WARNING, __VA_ARGS__)
#define linfo(h, ...) maru__logp(h, LOG_INFO, __VA_ARGS__)
#define ldbg(h, ...) maru__logp(h, LOG_DEBUG, __VA_ARGS__)

/*
 * maru__fail - why the calling thread's current call on @h fails: kept
 * for maru_handler_last_error() (per thread, as errno), logged at debug.
 * Return: @rc, for "return maru__fail(h, -E2BIG, ...)".  (log.c)
 */
int maru__fail(const struct maru_handler *h, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* maru__fail_clear - the calling thread starts a call on @h */
void maru__fail_clear(const struct maru_handler *h);
/* maru__fail_text - the calling thread's last cause on @h ("" if none) */
const char *maru__fail_text(const struct maru_handler *h);

/* maru__log_env_priority - MARU_LOG parsed: -1 (silent) .. 7 */
int maru__log_env_priority(void);

/* ------------------------------------------------------------------------ */
/* codec.c: payloads of the metadata protocol                               */

/*
 * An outgoing message: 16 header bytes (filled by rpc.c with the sequence
 * number at send time) followed by the MessagePack payload.  Small messages
 * live in @small, larger ones on the heap.
 */
struct maru__msg {
	uint8_t *data; /* @small or owns: malloc()ed */
	size_t len;    /* header + payload bytes */
	size_t cap;
	uint8_t type; /* enum mds_msg_type */
	uint8_t small[480];
};

void maru__msg_init(struct maru__msg *m, uint8_t type);
/* maru__enc_raw - @n payload bytes the caller encoded.  Return: 0 or -ENOMEM */
int maru__enc_raw(struct maru__msg *m, const void *p, size_t n);
void maru__msg_release(struct maru__msg *m);
/* maru__pack_key - @k as every request names a key (str, bin, integer)
 * with msgpack-c's packer @pk.  Return: 0 or -1 (a bad key, a failed
 * write) */
int maru__pack_key(msgpack_packer *pk, const struct maru_key *k);

/* One REGISTER entry of BATCH_REGISTER_KV. */
struct maru__reg {
	const struct maru_key *key; /* borrows */
	uint64_t region_id;
	uint64_t kv_offset;
	uint64_t kv_length;
};

/* One REPORT_STATS entry; the strings are static. */
struct maru__stat_entry {
	const char *op_type;
	const char *result; /* "hit", "miss", "partial", "none" */
	uint64_t size;
	double latency_us;
};

/* Encoders append the payload to @m.  Return: 0 or -ENOMEM/-EINVAL. */
int maru__enc_empty(struct maru__msg *m);
int maru__enc_request_alloc(struct maru__msg *m, const char *instance_id,
			    uint64_t size, const char *lease_id, uint64_t ack,
			    uint32_t page_size);
int maru__enc_return_alloc(struct maru__msg *m, const char *instance_id,
			   uint64_t region_id, uint64_t ack);
int maru__enc_list_allocations(struct maru__msg *m, const char *exclude);
int maru__enc_key(struct maru__msg *m, const struct maru_key *key);
int maru__enc_register(struct maru__msg *m, const struct maru__reg *r);
int maru__enc_batch_register(struct maru__msg *m, const struct maru__reg *r,
			     size_t n);
int maru__enc_batch_keys(struct maru__msg *m, const struct maru_key *keys,
			 size_t n);
/* additions to a key request (NULL: none) */
struct maru__key_opts {
	bool uncounted;	 /* "count": false -- we count the lookup ourselves */
	uint32_t ttl_ms; /* PIN: a soft pin's life ("ttl_ms"); 0 none */
};
int maru__enc_key_opts(struct maru__msg *m, const struct maru_key *key,
		       const struct maru__key_opts *o);
int maru__enc_batch_keys_opts(struct maru__msg *m, const struct maru_key *keys,
			      size_t n, const struct maru__key_opts *o);
/* (the lookups a client answers itself and reports in HEARTBEAT:
 * MDS_LK_*, mds_proto.h) */
/* what a HEARTBEAT reports besides the lease (the shared index's) */
struct maru__hb_report {
	const uint8_t *touched; /* msgpack keys, concatenated */
	size_t touched_len;
	uint32_t ntouched;
	uint64_t idx[3]; /* local hits, misses, fallbacks since the last */
	uint64_t lk[MDS_LK_N]; /* lookups we answered, since the last */
	uint32_t page_size;    /* we take pages one by one ("page_size") */
	/* with an agent (@remote; else nothing is sent): "remote", whether
	 * our bytes go through it, and "remote_*", what its counters grew
	 * by since the last report (MDS_RT_*) */
	bool remote, remote_on;
	uint64_t rt[MDS_RT_N];
};
int maru__enc_heartbeat(struct maru__msg *m, const char *instance_id,
			const char *lease_id, bool release, uint64_t ack,
			const struct maru__hb_report *rep);
int maru__enc_report_stats(struct maru__msg *m, const char *client_id,
			   const struct maru__stat_entry *e, size_t n);

/* A LOOKUP_KV reply or one BATCH_LOOKUP_KV entry. */
struct maru__lookup {
	bool found;
	bool has_handle;
	struct maru_region_handle handle;
	uint64_t kv_offset;
	uint64_t kv_length;
	uint64_t kv_gen; /* the hit's ticket (0: a server without one) */
};

/*
 * HANDSHAKE's "shm_index" (docs/shm-index.md): where the
 * server's shared index is.  @usable when its layout and digest are ones
 * this library reads.
 */
struct maru__idx_desc {
	bool present;
	bool usable;
	bool pool;	  /* a region of the pool ("kind": "pool") */
	bool noncoherent; /* readers invalidate lines (SI_FLUSH) */
	bool simulate;	  /* the tests' non-coherence injector */
	uint64_t area_id;
	uint64_t length;
	struct maru_region_handle region; /* pool */
	const char *path;		  /* file: borrows from the reply */
	uint32_t path_len;
};

/*
 * What a reply said.  The decoder reads every key it knows, with upstream's
 * defaults (false/0/empty) for missing ones, and ignores the rest.  Arrays
 * go to caller-provided sinks: @results (bools), @entries (lookups) and
 * @on_handle (LIST_ALLOCATIONS / REQUEST_ALLOC handles).
 */
struct maru__reply {
	bool error; /* an "error" key was present */
	bool held;  /* "held": the instance is another client's (-EBUSY) */
	char error_text[320]; /* ... its text (cut), "" if not a string */
	char cause[24];	      /* REQUEST_ALLOC's "cause" ("" if absent) */
	char why[160];	      /* REGISTER_KV's refusal, "why" ("" if none) */
	uint64_t max_key;     /* HANDSHAKE's "max_key_bytes" (0: absent) */
	bool success;
	bool is_new;
	bool exists;
	bool lease_expired;
	double lease_ttl;	    /* seconds; 0 = no leases */
	struct maru__lookup lookup; /* found, handle, kv_offset, kv_length */
	const char *rm_address;	    /* borrows from the reply */
	uint32_t rm_address_len;
	const char *server_id; /* borrows from the reply; NULL = absent */
	uint32_t server_id_len;
	/* sinks, set by the caller before decoding (all optional) */
	bool *results; /* borrows: @nresults slots */
	size_t nresults;
	size_t results_len; /* out: elements seen (may exceed nresults) */
	struct maru__lookup *entries; /* borrows: @nentries slots */
	size_t nentries;
	size_t entries_len; /* out: elements seen */
	int (*on_handle)(void *arg, const struct maru_region_handle *h);
	void *arg;
	size_t handles_len; /* out: "allocations" elements seen (all lists) */
	/* eviction: REGISTER's number, BATCH_REGISTER's first */
	uint64_t kv_gen, kv_gen_first;
	uint32_t renew_ms;	   /* heartbeat again within this (0: absent) */
	struct maru__idx_desc idx; /* HANDSHAKE: the shared index */
	bool has_idx_id;	   /* HEARTBEAT: "shm_index_id" was there */
	uint64_t idx_id;	   /* ... the area the server publishes */
	uint64_t evicted_first, evicted_last; /* "evicted_seq" (0: absent) */
	/* "evicted" (region, offset, gen triples) and "release" (region
	 * ids): checked arrays of unsigned integers, borrowed from the
	 * reply; maru__evict_note() copies them out */
	struct maru__uints {
		const uint8_t *p, *end; /* the elements */
		uint32_t n;

	} evicted, release;
	/* "granted_regions": handle maps, checked, borrowed from the reply
	 * (maru__handles_next reads them) */
	struct maru__uints granted;
	uint64_t pages_run; /* "pages_run" (0: absent) */
};

/* the next handle of a checked "granted_regions" list. 0 or -EPROTO */
int maru__handles_next(const uint8_t **p, const uint8_t *end,
		       struct maru_region_handle *h);

/* element @i of a checked array (maru__reply.evicted / .release) */
int maru__uints_next(const uint8_t **p, const uint8_t *end, uint64_t *v);

/**
 * maru__decode_reply - decode a reply payload (the bytes after the header)
 * Return: 0, -EPROTO for malformed input, or a non-zero @on_handle value.
 * Pure and bounded: reads only [p, p + len), allocates nothing.
 */
int maru__decode_reply(const uint8_t *p, size_t len, struct maru__reply *r);

/* an empty reply: no sinks, every field zero */
static inline void maru__reply_init(struct maru__reply *r)
{
	memset(r, 0, sizeof(*r));
}

/* maru__decode_stats - the typed part of a GET_STATS reply. 0 or -EPROTO */
int maru__decode_stats(const uint8_t *p, size_t len,
		       struct maru_server_stats *out, bool *error);

/* ------------------------------------------------------------------------ */
/* alloc.c: page allocator and owned regions                                */

/*
 * FIFO free list like upstream's PagedMemoryAllocator: allocate pops the
 * front, free appends to the back.  O(1) both ways; a byte per page detects
 * double frees.
 */
struct maru__pagealloc {
	uint64_t page_count;
	uint64_t chunk_size;
	uint32_t *ring; /* owns: page_count slots of free pages */
	uint64_t head;	/* index of the oldest free page in @ring */
	uint64_t nfree;
	uint64_t naway;
	uint8_t *used; /* owns: per page, PA_FREE, PA_USED or PA_AWAY */
};

enum {
	PA_FREE = 0, /* in the ring */
	PA_USED = 1, /* handed out (written, stored) */
	PA_AWAY = 2, /* the server's or another client's (alloc.c) */
};

/* page_count = pool_size / chunk_size; 0 or > 2^32 -> -EINVAL */
int maru__pagealloc_init(struct maru__pagealloc *pa, uint64_t pool_size,
			 uint64_t chunk_size);
void maru__pagealloc_destroy(struct maru__pagealloc *pa);
/* Return: the page, or -ENOSPC when none is free */
int64_t maru__pagealloc_alloc(struct maru__pagealloc *pa);
/* a handed-out page is taken by the server: away. 0 or -EINVAL */
int maru__pagealloc_away(struct maru__pagealloc *pa, uint64_t page);
/* an away page is granted to us: free. 0 or -EINVAL */
int maru__pagealloc_grant(struct maru__pagealloc *pa, uint64_t page);
/* Return: 0, -ERANGE (out of range) or -EINVAL (not allocated) */
int maru__pagealloc_free(struct maru__pagealloc *pa, uint64_t page);
bool maru__pagealloc_is_allocated(const struct maru__pagealloc *pa,
				  uint64_t page);

struct maru__keyent;
struct maru__mapping;

struct maru__owned_region {
	uint64_t region_id;
	struct maru__pagealloc pa;
	struct maru__mapping *map; /* borrows: from the mapper, may be NULL */
	struct maru__keyent **page_keys; /* owns array: local keys per page */
	/* the server asked for it back and a page of it was being written:
	 * no page is handed out from it before this (monotonic ns) */
	uint64_t drain_until;
	/* another client's region, pages of which the server granted us */
	bool borrowed;
};

/* Upstream's OwnedRegionManager: regions in insertion order + active one. */
struct maru__owned {
	struct maru__owned_region **regions; /* owns */
	size_t n;
	size_t cap;
	size_t active; /* index into @regions */
	uint64_t chunk_size;
};

void maru__owned_init(struct maru__owned *o, uint64_t chunk_size);
void maru__owned_destroy(struct maru__owned *o);
/* add and make active. Return: 0, -EEXIST, -EINVAL (no page), -ENOMEM */
int maru__owned_add(struct maru__owned *o, uint64_t region_id,
		    uint64_t pool_size, struct maru__mapping *map,
		    bool borrowed);
/* a free page, from a region not draining at @now (monotonic ns).
 * Return: 0 with *rid and *page set, or -ENOSPC */
int maru__owned_alloc(struct maru__owned *o, uint64_t now, uint64_t *rid,
		      uint64_t *page);
/* Return: 0, -ENOENT (not owned), -ERANGE or -EINVAL */
/* forget region @rid (its pages and key lists). 0 or -ENOENT */
int maru__owned_remove(struct maru__owned *o, uint64_t rid);
int maru__owned_free(struct maru__owned *o, uint64_t rid, uint64_t page);
struct maru__owned_region *maru__owned_find(const struct maru__owned *o,
					    uint64_t rid);

/* ------------------------------------------------------------------------ */
/* keymap.c: keys this handler stored                                       */

/*
 * maru__keyform - @k in the canonical form every side shares (keyform.h):
 * @p and @n: its bytes (an integer's are written into @ib)
 * Return: its tag (enum key_tag).
 */
static inline uint8_t maru__keyform(const struct maru_key *k, const uint8_t **p,
				    size_t *n, uint8_t ib[KEY_INT_BYTES])
{
	if (k->type == MARU_KEY_STR || k->type == MARU_KEY_BIN) {
		*p = (const uint8_t *)k->str;
		*n = k->len;
		return k->type == MARU_KEY_STR ? KEY_STR : KEY_BIN;
	}
	*p = ib;
	*n = KEY_INT_BYTES;
	return key_int_form(k->type == MARU_KEY_INT ? (uint64_t)k->i : k->u,
			    k->type == MARU_KEY_INT && k->i < 0, ib);
}

struct maru__keyent {
	struct hnode hn;		/* in the key map, with its hash */
	struct maru__keyent *page_next; /* other keys in the same page */
	uint64_t region_id;
	uint64_t page;
	uint64_t gen; /* the server's registration number (0: unknown) */
	bool orphan;  /* stored again since: in @orph, awaiting its notice */
	size_t klen;
	uint8_t kbytes[]; /* type byte + canonical key bytes */
};

struct maru__keymap {
	struct htab t; /* owns its buckets; entries freed by this module */
	/*
	 * Entries of keys the server evicted and we stored again before its
	 * notice came: still in their page's list (the notice names their
	 * registration and frees that page), no longer found by key.
	 */
	struct htab orph;
};

void maru__keymap_init(struct maru__keymap *km);
void maru__keymap_destroy(struct maru__keymap *km);
struct maru__keyent *maru__keymap_find(const struct maru__keymap *km,
				       const struct maru_key *key);
/* insert a key known to be absent. Return: the entry or NULL (-ENOMEM) */
struct maru__keyent *maru__keymap_insert(struct maru__keymap *km,
					 const struct maru_key *key,
					 uint64_t region_id, uint64_t page);
/* unlink and free @e (the caller unlinks it from its page list) */
void maru__keymap_remove(struct maru__keymap *km, struct maru__keyent *e);
/* @e's key is stored again: keep @e (for its notice) but not by key.
 * Return: 0, or -ENOMEM (then @e stays as it was) */
int maru__keymap_orphan(struct maru__keymap *km, struct maru__keyent *e);

/* ------------------------------------------------------------------------ */
/* remote.c: the pool through maru-agent (docs/remote.md)                   */

struct maru__remote;
struct maru__grant;
struct maru__mapping;

/* maru__remote_new - the remote path of @h (its config names an agent);
 * nothing is connected until the first region.  Return: 0 or -errno */
int maru__remote_new(struct maru_handler *h, struct maru__remote **out);
void maru__remote_free(struct maru__remote *r);
/* maru__remote_quiesce - close the endpoint and let UCX finish with every
 * buffer it was given (before the mappings go) */
void maru__remote_quiesce(struct maru__remote *r);
/* the handler moves its bytes through the agent (sticky once set) */
bool maru__remote_on(const struct maru__remote *r);
/* remote "auto": may a pool not mappable here switch it on? */
bool maru__remote_may_switch(const struct maru__remote *r);
void maru__remote_switch_on(struct maru__remote *r);
/*
 * maru__remote_grant_new - region @hd granted to our session at the
 * agent, asked for now (its token is the capability; asked again for
 * each new session).  Return: 0, -EACCES (the agent refused: a bad
 * token, a region gone), or a transport error.
 */
int maru__remote_grant_new(struct maru__remote *r,
			   const struct maru_region_handle *hd,
			   struct maru__grant **out);
void maru__remote_grant_free(struct maru__remote *r, struct maru__grant *k);

/* one transfer: @len bytes at @off of mapping @m (a remote one) */
struct maru__xfer {
	struct maru__mapping *m;
	uint64_t off; /* in the region */
	size_t len;
	uint8_t *buf; /* here: a page of m->addr (put), of m->rd (get) */
};

/*
 * maru__remote_xfer - store (the bytes are in the pool when it returns 0)
 * or read the @n transfers, all in flight at once.
 * @unsafe: after a failed store, true when bytes of it may still land in
 * the pool later (the agent could not be told to end the session): the
 * caller must not reuse those pages.
 * Return: 0, or -errno for the whole call: -ETIMEDOUT (nothing within
 * timeout_ms), -ECONNRESET (the endpoint failed), -EACCES (refused by
 * the agent), or the control port's error.
 */
int maru__remote_xfer(struct maru__remote *r, const struct maru__xfer *x,
		      size_t n, bool put, bool *unsafe);
void maru__remote_counters(const struct maru__remote *r,
			   struct maru_remote_stats *s);
/* maru__agent_stats - the STATS of @h's agent (cfg.agent_url), over a
 * connection of its own.  Return: 0 (@st: enum in agent_proto.h) or
 * -errno, the cause in @h's last error */
int maru__agent_stats(const struct maru_handler *h, uint64_t st[]);

/* ------------------------------------------------------------------------ */
/* rpc.c: the metadata-server client                                        */

struct maru__rpc_slot;
struct maru__rpc_watch;

struct maru__rpc {
	const struct maru_handler *h; /* borrows: for logging */
	char *url;		      /* owns */
	const char *peer; /* what listens there, for messages: NULL is
			   * maru-server, "maru-agent" (remote.c) */
	char *host;	  /* owns: from @url, brackets removed */
	char port[8];
	uint8_t ident[8]; /* DEALER Identity, kept across reconnects */
	int timeout_ms;
	bool async; /* DEALER pipelined, else REQ lock-step */
	int max_inflight;
	uint64_t spin_ns; /* MARU_BUSY_POLL_US: look this long before poll */
	pthread_mutex_t lock; /* everything below */
	/* the connection */
	int fd;		    /* owns: TCP socket, -1 when closed */
	struct zmtp_conn z; /* ZMTP state of @rb: z.rd consumed, z.pong
			     * a PONG waiting for a half-written request */
	struct buf rb;	    /* owns: received bytes, [z.rd, rb.len) unparsed */
	/* CURVE (zcurve.h): @raw is what the socket gave, @rb its
	 * plaintext; requests and PONGs are sealed into @sb */
	const struct maru__curve *curve; /* borrows (the handler's); NULL */
	struct zcurve cz;		 /* the connection's CURVE state */
	struct buf raw;	     /* owns: received bytes, [cz.rd, raw.len) */
	struct buf sb;	     /* owns: sealed output, reused */
	struct buf pend;     /* owns: a sealed PONG the socket did not take:
			      * it goes out before anything sealed later */
	bool read_full;	     /* the last read filled its buffer */
	bool writing;	     /* a request is being written */
	bool in_sweep;	     /* the watch thread reads it (its lock held) */
	uint64_t last_io_ns; /* last read or write */
	uint32_t next_seq;   /* from 1 */
	int warned;	     /* the reconnect failure last logged (-errno), 0
			      * once a connection is made again */
	bool once;	     /* connect_retry off: one dial per call, whose
			      * failure is the call's cause */
	/* DEALER only */
	bool connecting;	/* a caller dials with @lock dropped */
	pthread_cond_t conn_cv; /* @connecting ended */
	int wakefd;		/* owns: eventfd to wake the reading leader */
	bool leader;		/* a thread is polling the socket */
	int leader_fd;		/* the fd the leader polls */
	int zombie_fd; /* owns: closed under the leader: it closes it */
	struct maru__rpc_slot *slots; /* owns: max_inflight */
	int *free_slots;	      /* owns: stack of free slot indices */
	int nfree;
	pthread_cond_t space_cv; /* a slot became free */
	int space_waiters;
	struct maru__rpc_watch *watch; /* borrows: watches each connection */
};

#define MARU__RPC_MSG_MAX (256ull << 20) /* the largest reply accepted */

/* dial.c: a connection to the metadata server, for rpc.c */

/* "tcp://host:port" or "tcp://[v6]:port" into @r->host (owned), @r->port.
 * Return: 0, -EINVAL or -ENOMEM */
int maru__rpc_parse_url(struct maru__rpc *r, const char *url);
/*
 * maru__rpc_dial - connect and handshake.  @once (maru__rpc_connect): one
 * attempt. Else a server that is not there (refused, or closed during the
 * handshake) is retried until @deadline.  @why: the cause of a failure,
 * one line (empty when there is none to tell).  Touches no state of @r
 * but the constants (host, port, ident, async), so it runs without @lock.
 * Return: 0 with *@fdp (gives) and *@z; -ETIMEDOUT (the deadline passed;
 * with @once the connect's or the handshake's own error instead), -EPROTO
 * (a peer that is not ZMTP: no retry), -EACCES (CURVE key refused) or
 * -ENOMEM.
 */
int maru__rpc_dial(const struct maru__rpc *r, uint64_t deadline, int *fdp,
		   struct zmtp_conn *z, struct zcurve *cz, bool once, char *why,
		   size_t whyn);

/* A reply: the received body frame; @payload/@len point into it. */
struct maru__rpc_reply {
	uint8_t *buf;		/* owns: malloc()ed body frame */
	const uint8_t *payload; /* borrows: from @buf, after the header */
	size_t len;		/* payload bytes */
};

/*
 * maru__rpc_open - a client of the server at @url ("tcp://host:port");
 * nothing is connected until the first call.  Return: 0, -EINVAL (a bad
 * URL) or -ENOMEM.
 */
int maru__rpc_open(struct maru__rpc *r, const struct maru_handler *h,
		   const char *url, int timeout_ms, bool async,
		   int max_inflight);
void maru__rpc_close(struct maru__rpc *r);
/**
 * maru__rpc_connect - connect and handshake now, once (maru_handler_connect):
 * no retry of a refused connection, and the cause of a failure logged as
 * one error line that names the address (and so kept as the connect's
 * cause, see maru__log_capture()).  Nothing to do when connected.
 * Return: 0; -ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT (no TCP connection,
 * or no ZMTP greeting/READY within timeout_ms), -EPROTO (the peer does not
 * speak ZMTP, or not as a server of ours), -ECONNRESET (it closed during
 * the handshake), -EACCES (CURVE key refused), -ENOMEM or another -errno.
 */
int maru__rpc_connect(struct maru__rpc *r);
/**
 * maru__rpc_call - send @m and wait for its reply
 * @out: on success gives the reply; release with maru__rpc_reply_release()
 * Return: 0; -ETIMEDOUT (no server, or no reply within timeout_ms);
 * -ECONNRESET (the connection dropped with the request in flight);
 * -EPROTO (the peer is not a ZMTP server, or a malformed reply); -ENOMEM.
 * Context: any thread; the connection is serialised internally.
 */
int maru__rpc_call(struct maru__rpc *r, struct maru__msg *m,
		   struct maru__rpc_reply *out);
void maru__rpc_reply_release(struct maru__rpc_reply *rep);
/*
 * maru__rpc_set_watch - have @w watch this client's connections: the
 * current one and every one made later.  @w NULL detaches (before the
 * watch stops).
 */
void maru__rpc_set_watch(struct maru__rpc *r, struct maru__rpc_watch *w);

/* One watched connection. */
struct maru__rpc_watched {
	int fd;		       /* borrows: the connection's socket */
	struct maru__rpc *rpc; /* borrows: valid while not @dead */
	bool dead;	       /* detached: forget it */
	bool fired;	       /* its drop was reported: poll it no more */
};

/*
 * The watch of a handler's RPC clients (rpc.c): one thread polls every
 * watched connection for a hangup, reads the idle ones every 250 ms so that
 * the server's heartbeat PINGs get their PONG (as libzmq's I/O thread did),
 * and reports each drop, seen by it or by a call, once per connection.
 * The owner of the connections' meaning (ownership.c) gives two callbacks:
 *   @on_lost(arg): a connection dropped.  Called at once by whichever
 *     thread noticed, possibly with an RPC client's lock held: it may only
 *     set flags (atomics), never block, lock or call into rpc.c.
 *   @on_tick(arg): after every round, in the watch thread with no lock
 *     held (it may make calls); returns the milliseconds until it wants to
 *     be called again, or -1.
 */
struct maru__rpc_watch {
	pthread_mutex_t lock; /* below; a leaf, taken after an RPC lock */
	struct maru__rpc_watched *w; /* owns: @n in use */
	size_t n;
	size_t cap;
	int wakefd;   /* owns: eventfd, a new watch, a drop or stop */
	bool running; /* the thread runs: attach does something */
	bool stop;
	char lost[128];		      /* the URL of a drop to log, "" = none */
	const struct maru_handler *h; /* borrows: for logging */
	void (*on_lost)(void *arg);
	int (*on_tick)(void *arg);
	void *arg;
	pthread_t thread;
};

/* the lock, for the handler's lifetime */
void maru__rpc_watch_init(struct maru__rpc_watch *w);
void maru__rpc_watch_destroy(struct maru__rpc_watch *w);
/* start the thread (at connect); stop it (at close, every client detached) */
int maru__rpc_watch_start(struct maru__rpc_watch *w,
			  const struct maru_handler *h,
			  void (*on_lost)(void *arg), int (*on_tick)(void *arg),
			  void *arg);
void maru__rpc_watch_stop(struct maru__rpc_watch *w);

/* ------------------------------------------------------------------------ */
/* mapper.c: region mappings                                                */

struct maru__mapping {
	struct maru__mapping *next; /* hash chain; published with release */
	struct maru_region_handle handle;
	uint8_t *addr; /* owns: the mmap */
	size_t len;    /* handle.length */
	bool owned;
	/*
	 * The shared mapping was replaced in place by private anonymous
	 * memory (ownership.c): pointers stay valid, writes no longer reach the
	 * pool.  Set once under the mapper's lock, read anywhere.
	 */
	atomic_bool fenced;
	struct maru__mapping *retired_next; /* the mapper's @retired list */
	/* owns: a remote region's grant at the agent (remote.c); then @addr
	 * is private memory standing in for the pool, where pages are
	 * written, and @rd (owns) a second one where reads land */
	struct maru__grant *remote;
	uint8_t *rd;
};

#define MARU_MAP_BUCKETS 256

enum { MAP_AT_RM = 1, MAP_AT_RM_SAID_NO, MAP_AT_OPEN };

struct maru__uuid_path {
	char uuid[37];
	char path[300]; /* /dev/daxX.Y */
};

struct maru__mapper {
	const struct maru_handler *h; /* borrows: for logging */
	struct maru__remote *remote;  /* borrows: the handler's, or NULL */
	bool mapped_here; /* a region was mapped from the pool (@lock) */
	int failed_at;	  /* the last map_locked() failure's step (@lock) */
	_Atomic(struct maru__mapping *) buckets[MARU_MAP_BUCKETS];
	pthread_mutex_t lock; /* insertions, the RM client, the UUID table */
	struct rm_client rm;  /* GET_ACCESS; not thread-safe by itself */
	bool rm_ready;
	bool prefault;		       /* MARU_PREFAULT != "0" */
	struct maru__uuid_path *uuids; /* owns */
	size_t nuuids;
	/* owns: fenced mappings out of the table, still mapped until destroy */
	struct maru__mapping *retired;
};

int maru__mapper_init(struct maru__mapper *mp, const struct maru_handler *h,
		      bool prefault);
/* the uuid -> path table: every device under /sys/bus/dax/devices with a
 * MARUDEV header (src/common/daxdev.h) */
void maru__mapper_scan_devices(struct maru__mapper *mp);
/* set the RM address (HANDSHAKE's or the config's) */
int maru__mapper_set_rm(struct maru__mapper *mp, const char *address,
			int timeout_ms);
/*
 * lock-free lookup: mappings are only freed by maru__mapper_destroy; a
 * fenced mapping is never returned (a read maps the region again)
 */
struct maru__mapping *maru__mapper_find(struct maru__mapper *mp,
					uint64_t region_id);
/**
 * maru__mapper_map - map a region (GET_ACCESS + open + mmap), cached
 * @prefault: pre-fault the pages (if MARU_PREFAULT allows)
 * Return: 0 with *out, or -errno.
 */
int maru__mapper_map(struct maru__mapper *mp,
		     const struct maru_region_handle *hd, bool owned,
		     bool prefault, struct maru__mapping **out);
/*
 * maru__mapper_map_ro - map a region read-only (O_RDONLY, PROT_READ), not
 * cached: the shared index's area (the caller unmaps it, length
 * hd->length).  Return: 0 with *out, or -errno.
 */
int maru__mapper_map_ro(struct maru__mapper *mp,
			const struct maru_region_handle *hd, void **out);
/* unmap one region now (only while no other thread can look it up) */
void maru__mapper_unmap(struct maru__mapper *mp, uint64_t region_id);
/* unmap everything and close the RM connection */
void maru__mapper_destroy(struct maru__mapper *mp);
/* the local path for a device UUID, or NULL */
const char *maru__mapper_local_path(struct maru__mapper *mp, const char *uuid);
/**
 * maru__mapper_fence - replace @m's shared mapping in place by anonymous
 * private memory (idempotent)
 * Return: true if this call fenced it.
 */
bool maru__mapper_fence(struct maru__mapper *mp, struct maru__mapping *m);
/* fence every mapping in the table; Return: how many this call fenced */
size_t maru__mapper_fence_all(struct maru__mapper *mp);
/* move every fenced mapping out of the table to @retired */
void maru__mapper_retire_fenced(struct maru__mapper *mp);
/* was @region_id fenced and retired? */
bool maru__mapper_is_retired(struct maru__mapper *mp, uint64_t region_id);

/* ------------------------------------------------------------------------ */
/* ownership.c (leases) and stats.c: background threads                     */

/*
 * What the HEARTBEATs of this module carry and learn on behalf of the
 * handler's eviction inbox, given by handler.c at maru__lease_init() (as
 * rpc.c's watch reports through on_lost/on_tick): ownership.c calls up
 * only through these, so it names no function of the files above it.
 *   @ack(arg): the notice number the HEARTBEAT acknowledges ("evicted_ack");
 *     any thread, atomics only.
 *   @on_reply(arg, r): a HEARTBEAT reply was decoded (error or not),
 *     before its bytes go: copy out what it says for the handler.  Any
 *     thread that sent one (the lease thread, the watch's, a writer that
 *     verifies, connect, close), with no lock of this module held; it may
 *     take only leaf locks.
 *   @on_round(arg): the lease thread after each renewal, no lock held.  A
 *     writer holding @wlock may be joining this thread (a recovery stops
 *     the lease), so it may take @wlock only with a try-lock.
 */
struct maru__hb_hooks {
	uint64_t (*ack)(void *arg);
	void (*on_reply)(void *arg, const struct maru__reply *r);
	void (*on_round)(void *arg);
	void *arg;
};

struct maru__lease {
	bool active; /* the server granted a lease */
	char id[37]; /* lease_id; changed only with the thread stopped */
	uint64_t ttl_ns;
	_Atomic uint64_t renewed_ns; /* last successful renewal */
	_Atomic uint32_t renew_ms;   /* the server asked for this period */
	struct maru__hb_hooks hooks; /* set at init, for the lifetime */
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock; /* @stop + @cv (live from handler_new to free) */
	pthread_cond_t cv;
	bool stop;
	struct maru__rpc rpc; /* its own connection */
	bool rpc_open;
};

/* the lock and condition variable, for the handler's lifetime; @hooks
 * copied */
void maru__lease_init(struct maru_handler *h,
		      const struct maru__hb_hooks *hooks);
void maru__lease_destroy(struct maru_handler *h);
/**
 * maru__lease_start - pick a new lease_id, HEARTBEAT it, start renewing
 * @recovering: after a loss of ownership (fence.recovering set, fence.lock
 *   not held: no RPC under it): a failed
 *   HEARTBEAT fails the call, and the reply's server_id becomes the known
 *   one.  At connect a failed HEARTBEAT only means "no lease".
 * Return: 0 or -errno.
 */
int maru__lease_start(struct maru_handler *h, bool recovering);
void maru__lease_stop(struct maru_handler *h);
/* writes allowed: no lease, or renewed within 3/4 TTL */
bool maru__lease_ok(struct maru_handler *h);
/* HEARTBEAT lease_release on the main connection (close) */
void maru__lease_release(struct maru_handler *h);

struct maru__stats {
	atomic_bool enabled;  /* recording on (set/cleared under @lock) */
	pthread_mutex_t lock; /* @buf, @stop */
	pthread_cond_t cv;
	struct maru__stat_entry *buf; /* owns */
	size_t n;
	size_t cap;
	bool stop;
	pthread_t thread;
	bool thread_started;
	struct maru__rpc rpc; /* its own lock-step connection */
	bool rpc_open;
};

int maru__stats_start(struct maru_handler *h);
void maru__stats_stop(struct maru_handler *h);
void maru__stats_record(struct maru_handler *h, const char *op,
			const char *result, uint64_t size, uint64_t start_ns);

/* ------------------------------------------------------------------------ */
/* ownership.c: loss of ownership                                           */

/*
 * h->fence.alarm: flags in the low byte, a count of dropped connections
 * above it (so that a verification only clears SUSPECT when no drop
 * happened since it began).  Zero flags = the write fast path.
 */
#define MARU_ALARM_SUSPECT 0x1u	    /* a connection dropped: verify first */
#define MARU_ALARM_LOST_LEASE 0x2u  /* lease expired: owned regions fenced */
#define MARU_ALARM_LOST_SERVER 0x4u /* new server: every mapping fenced */
#define MARU_ALARM_LOST (MARU_ALARM_LOST_LEASE | MARU_ALARM_LOST_SERVER)
#define MARU_ALARM_FLAGS 0xffu
#define MARU_ALARM_GEN 0x100u

/* What a HEARTBEAT reply said (copied out of the reply frame). */
struct maru__hb {
	bool lease_expired;
	double lease_ttl;
	bool has_server_id;
	char server_id[65]; /* truncated to 64 bytes */
};

struct maru__fence {
	_Atomic uint64_t alarm; /* MARU_ALARM_* | drops * MARU_ALARM_GEN */
	pthread_mutex_t lock;	/* below; held while fencing and recovering */
	bool known;		/* @server_id came from a reply */
	char server_id[65];	/* "" = the server sends none */
	uint64_t epoch;		/* recoveries so far */
	bool recovering;	/* a recovery's HEARTBEAT is in flight */
	/* the background verification after a drop (the watch's on_tick) */
	bool bg_verify;	   /* off: left to the next write (a knob of the
			    * test variant, MARU_TEST_NO_BACKGROUND_VERIFY) */
	uint64_t retry_at; /* monotonic ns: not before, after a failure */
};

void maru__fence_init(struct maru_handler *h);
void maru__fence_destroy(struct maru_handler *h);
/* forget everything before a (re)connect */
void maru__fence_reset(struct maru_handler *h);
/* remember the server_id of @r (a HANDSHAKE reply) */
void maru__fence_set_server(struct maru_handler *h,
			    const struct maru__reply *r);
/* the lease thread's or a verification's HEARTBEAT; 0 or -errno */
int maru__heartbeat(struct maru_handler *h, struct maru__rpc *rpc,
		    const char *lease_id, bool release, struct maru__hb *out);
/**
 * maru__verify - a HEARTBEAT on @rpc, judged: same server (server_id) and
 * lease not expired?  On a loss of ownership the mappings are fenced at
 * once and an alarm raised for the next write to recover.
 * Return: 0 owned (lease renewed, SUSPECT cleared), -ESTALE ownership lost,
 * -EAGAIN a recovery overtook it, or the RPC's -errno (nothing learned).
 * Context: any thread; not with fence.lock held.
 */
int maru__verify(struct maru_handler *h, struct maru__rpc *rpc);
/*
 * the RPC watch's callbacks (@arg: the handler): a connection dropped
 * (raises MARU_ALARM_SUSPECT; flags only); a round ended (verifies while
 * SUSPECT, every 200 ms until a server answers)
 */
void maru__fence_lost(void *arg);
int maru__fence_tick(void *arg);
/*
 * maru__rejoin - before a request that acts for this instance but carries
 * no lease id (UNPIN, RETURN_ALLOC): after a dropped connection, verify
 * first -- its HEARTBEAT presents the lease, so that the server takes the
 * new connection for ours (docs/metadata-server.md, "Authority").  Writes
 * do the same in maru__write_gate().
 */
void maru__rejoin(struct maru_handler *h);
/**
 * maru__gate_slow - make a write safe: recover from a loss of ownership,
 * verify after a dropped connection or a stale lease
 * Return: 0 (the owned regions are ours), or -EKEYEXPIRED: ownership could
 * not be confirmed (no answer, or the recovery failed).
 * Context: @wlock held.
 */
int maru__gate_slow(struct maru_handler *h);

/* ------------------------------------------------------------------------ */
/* shmindex.c: the shared index, read with no RPC                          */

/* One attached area.  Never unmapped before the handler is freed: a
 * lookup may stand on it while another thread detaches it. */
struct maru__idx_area {
	struct si_map map; /* map.len: the area's length */
	uint8_t *mem;	   /* owns: the read-only mapping */
	size_t maplen;	   /* ... its length (a pool region's, >= map.len) */
	uint64_t area_id;
	uint64_t serial;	     /* unique per attach in the process */
	struct maru__idx_area *next; /* maru__idx.all */
};

#define MARU_TOUCH_MAX 4096 /* keys a HEARTBEAT reports at most */
#define MARU_TOUCH_SET 8192 /* ... each once: a set of their hashes */
#define MARU_IDX_RETRY_NS (30ull * 1000000000) /* a failed attach */

/*
 * The digests of keys looked up before, and where the index last had
 * each: sets of two slots chosen by a quick hash of the key (8 MiB of
 * address space, touched as keys come), each slot under its own seqlock
 * (a torn slot is a miss).  A worker looks the same keys up again and
 * again (LMCache asks contains, then retrieves): the memo saves the
 * SHA-256 (~100 ns), the hint makes the lookup one line of the index
 * instead of the lines of two groups.  The hint is outside the seqlock:
 * any value is safe (si_lookup).
 */
#define MARU_MEMO_SLOTS 65536 /* a power of two */
#define MARU_MEMO_KEY 100
struct maru__memo {
	_Atomic uint32_t seq; /* odd while written; 0: never written */
	uint8_t len;
	uint8_t tag;
	uint16_t rsvd;
	_Atomic uint32_t hint; /* si_hit.slot of its last hit, or 0 */
	uint8_t digest[SI_DIGEST];
	uint8_t key[MARU_MEMO_KEY];
};

_Static_assert(sizeof(struct maru__memo) == 128, "a memo slot is two lines");
_Static_assert(MARU_MEMO_KEY <= UINT8_MAX, "a memo key's length fits len");

struct maru__idx {
	/* what lookups use: NULL none, or suspended (a dropped connection,
	 * until the server says which area it publishes) */
	_Atomic(struct maru__idx_area *) area;
	pthread_mutex_t lock;	       /* below */
	struct maru__idx_area *cur;    /* attached (maybe suspended) */
	struct maru__idx_area *all;    /* owns: every area ever attached */
	_Atomic bool stale;	       /* the server publishes another area */
	_Atomic uint64_t susp;	       /* suspensions so far (a generation) */
	uint64_t failed_id, failed_at; /* the area that could not be used */
	_Atomic(struct maru__memo *) memo; /* owns: MARU_MEMO_SLOTS, or NULL */
	bool off;			   /* MARU_SHM_INDEX=0 */
	int fault; /* MARU_SHM_INDEX_FAULT: the test variant only */
	/* what it answered: local hits, local misses, fallbacks to RPC */
	_Atomic uint64_t n[3];
	uint64_t told[3]; /* ... of those, what HEARTBEATs carried (@lock) */
	/* the lookups we counted ourselves besides @n (MDS_LK_*: kv.c),
	 * and the told part */
	_Atomic uint64_t lk[MDS_LK_N];
	uint64_t lk_told[MDS_LK_N];
	/* keys answered locally, for the eviction policy ("touched") */
	pthread_mutex_t tlock;
	struct buf touched; /* msgpack keys, concatenated */
	_Atomic uint32_t ntouched;
	_Atomic uint64_t *tseen; /* owns: MARU_TOUCH_SET hashes this period */
};

void maru__idx_init(struct maru_handler *h);
/* unmap every area (close, free: no other thread uses the handler) */
void maru__idx_destroy(struct maru_handler *h);
/**
 * maru__idx_attach - map the area a HANDSHAKE described and use it
 * Return: 0, or -errno (the index is not used; lookups ask the server).
 */
int maru__idx_attach(struct maru_handler *h, const struct maru__idx_desc *d);
/* a connection dropped: ask the server until it says which area (any
 * thread, flags only) */
void maru__idx_suspend(struct maru_handler *h);
/* the suspension generation, read before a HEARTBEAT is sent */
uint64_t maru__idx_susp_gen(struct maru_handler *h);
/* a HEARTBEAT reply said which area (or none) the server publishes; @gen:
 * maru__idx_susp_gen() before it was sent (a drop since then wins) */
void maru__idx_heard(struct maru_handler *h, bool has, uint64_t area_id,
		     uint64_t gen);
/* re-attach after maru__idx_heard() found another area: a HANDSHAKE on
 * @rpc (the lease or watch thread, no lock held) */
void maru__idx_refresh(struct maru_handler *h, struct maru__rpc *rpc);
/**
 * maru__idx_lookup - look @key up in the shared index
 * @after_use: a re-check of a hit whose bytes were read
 * @kh: NULL, or out: the key's quick hash (for maru__idx_touch)
 * Return: SI_HIT (*@out), SI_MISS (final), SI_ASK (ask the server:
 * unstable lines, an overflowed group, a key type it cannot name), or
 * MARU_IDX_NONE (no index attached, or suspended).
 */
int maru__idx_lookup(struct maru_handler *h, const struct maru_key *key,
		     bool after_use, struct si_hit *out, uint64_t *kh);
#define MARU_IDX_NONE (-1) /* maru__idx_lookup(): no index attached */
/**
 * maru__idx_lookup_batch - maru__idx_lookup() of @n keys at once
 * @res: out: per key as maru__idx_lookup(); @out: the hits; @kh: NULL, or
 *	out: the keys' quick hashes
 * Return: 0, or MARU_IDX_NONE (no index: @res untouched).
 */
int maru__idx_lookup_batch(struct maru_handler *h, const struct maru_key *keys,
			   size_t n, int *res, struct si_hit *out,
			   uint64_t *kh);
/* count @n answers (SI_HIT, SI_MISS, SI_ASK: a fallback) */
void maru__idx_count(struct maru_handler *h, int what, uint64_t n);
/* count lookups we answered (or counted) ourselves: @d[MDS_LK_N] */
void maru__lk_count(struct maru_handler *h, const uint64_t *d);
/* @key (quick hash @kh from a lookup, or 0) was used with no request:
 * tell the server's policy (HEARTBEAT) */
void maru__idx_touch(struct maru_handler *h, const struct maru_key *key,
		     uint64_t kh);
/*
 * what the next HEARTBEAT carries: the touched keys (taken: *@keys owns
 * the bytes, *@n of them) and the counters since the last one
 */
void maru__idx_take_report(struct maru_handler *h, struct buf *keys,
			   uint32_t *n, uint64_t delta[3], uint64_t *lk);
/* counters the server was not told yet (a last report at close) */
bool maru__idx_unreported(struct maru_handler *h);

/* ------------------------------------------------------------------------ */
/* The handler: handler.c (its life), evict.c (its inbox), kv.c (KV calls) */

enum maru__state {
	MARU_ST_NEW = 0, /* never connected, or connect failed */
	MARU_ST_CONNECTED = 1,
	MARU_ST_CLOSING = 2, /* close started or done: terminal */
};

/* CURVE's keys (src/common/zcurve.h), loaded when the handler is made */
struct maru__curve {
	struct zcurve_keys me;
	uint8_t server[ZCURVE_KEY];
};

/*
 * Eviction notices (evict.c) waiting to be applied: pages of ours whose
 * entry maru-server evicted, regions it asks back.  Filled by whichever
 * thread got the reply (maru__evict_note), emptied under @wlock
 * (maru__evict_apply).  Bounded: notices past MARU_INBOX_MAX are dropped
 * (their pages stay allocated until close), with one warning.
 */
struct maru__inbox {
	pthread_mutex_t lock;
	uint64_t *ev;		       /* owns: (region, offset, gen) triples */
	uint64_t *rel;		       /* owns: region ids */
	struct maru_region_handle *gr; /* owns: granted pages' regions */
	size_t nev, evcap, nrel, relcap, ngr, grcap;
	_Atomic bool pending; /* something to apply */
	/* the server's "pages_run" (0: none yet); when it changes, the
	 * pages granted of others' regions are dropped (@drop) */
	uint64_t run;
	bool drop;
	/* the notices applied (taken out by maru__evict_apply): what
	 * RETURN_ALLOC says it had ("evicted_ack") */
	uint64_t applied;
	/* regions of ours we gave back: a grant of one still on its way
	 * is not ours (the server pooled its pages) */
	uint64_t returned[16];
	unsigned nreturned;
	/* notices had up to this number, all of them ("evicted_ack") */
	_Atomic uint64_t ack;
	bool dropped; /* warned once */
};

#define MARU_INBOX_MAX (1u << 20)

/* forget every notice held (a recovery: what they name is gone) */
static inline void maru__inbox_reset(struct maru__inbox *in)
{
	pthread_mutex_lock(&in->lock);
	free(in->ev);
	free(in->rel);
	free(in->gr);
	in->ev = in->rel = NULL;
	in->gr = NULL;
	in->nev = in->evcap = in->nrel = in->relcap = in->ngr = in->grcap = 0;
	in->drop = false;
	atomic_store(&in->pending, false);
	pthread_mutex_unlock(&in->lock);
}

struct maru_handler {
	struct maru_config cfg;	   /* owns: deep copy */
	struct maru__curve *curve; /* owns; NULL: the NULL mechanism */
	char *instance_id;	   /* owns */
	_Atomic int log_priority;  /* -1 silent .. LOG_DEBUG */
	maru_log_fn log_fn;	   /* NULL = stderr */
	void *log_arg;		   /* borrows */
	_Atomic int state;	   /* enum maru__state */
	bool prefault;
	/* maru_handler_connect_error(): the first error line of the last
	 * connect, written by @capture_thread while @capturing */
	char conn_err[512];
	_Atomic bool capturing;
	pthread_t capture_thread;

	pthread_mutex_t wlock; /* writes: alloc, free, store, delete, close */
	pthread_mutex_t olock; /* @owned contents, for concurrent readers */
	struct maru__owned owned;
	struct maru__keymap keys;      /* under @wlock */
	maru_region_added_fn on_added; /* under @wlock */
	void *on_added_arg;

	struct maru__rpc rpc; /* the main connection */
	bool rpc_open;
	/* maru_handler_call(): a connection of its own, opened at its first
	 * use (under @raw_lock), closed by maru_handler_free() */
	pthread_mutex_t raw_lock;
	struct maru__rpc raw;
	bool raw_open;
	struct maru__mapper mapper;
	bool mapper_ready;
	char rm_address[300]; /* effective: HANDSHAKE's, else the config's */
	uint64_t max_key;     /* the server's longest key (0: unknown) */
	struct maru__lease lease;
	struct maru__stats stats;
	struct maru__fence fence;
	struct maru__rpc_watch watch; /* watches h->rpc and the lease's */
	struct maru__inbox inbox;     /* eviction notices */
	uint32_t page_size;	      /* pages may be granted to us (0: off) */
	struct maru__idx idx;	      /* the shared index */
	struct maru__remote *remote;  /* owns: with an agent (remote.c) */
	/* the remote path's counters (MDS_RT_*) HEARTBEATs have told the
	 * server: each tells what grew since (ownership.c); 0 at connect */
	atomic_uint_fast64_t rt_told[MDS_RT_N];
};

/* still ours: not fenced (a fenced one waits for the next write to go) */
static inline bool maru__region_live(const struct maru__owned_region *r)
{
	return !r->map || !atomic_load(&r->map->fenced);
}

/* handler.c */

/*
 * maru__state_check - at the start of a call: connected?  The calling
 * thread's cause (maru_handler_last_error) starts empty.
 * Return: 0, -ENOTCONN (never connected, or the last connect failed) or
 * -ESHUTDOWN (closed).
 */
int maru__state_check(const struct maru_handler *h);
/*
 * maru__region_expand - REQUEST_ALLOC a region, map it, add it to the
 * owned ones and announce it (the region-added callback).  @wlock held.
 * Return: 0; -EAGAIN (the pool is full but pages of ours were evicted:
 * apply the inbox and ask again); -ENOSPC, -EBUSY or another -errno, the
 * cause kept (maru__fail).
 */
int maru__region_expand(struct maru_handler *h);

/* evict.c */

/* the inbox's lock, for the handler's lifetime; destroy frees what is left */
void maru__inbox_init(struct maru_handler *h);
void maru__inbox_destroy(struct maru_handler *h);
/* maru__call - one RPC with @m on the main connection, decoded into @r;
 * the eviction notices it carries go to the inbox */
int maru__call(struct maru_handler *h, struct maru__msg *m,
	       struct maru__reply *r);
/* maru__send - maru__call() of @m, already encoded (@enc_rc: its
 * encoder's result); @m is released in every case */
int maru__send(struct maru_handler *h, struct maru__msg *m, int enc_rc,
	       struct maru__reply *r);
/* maru__page_release - return a page to its allocator and drop its keys
 * (@wlock held).  Return: 0, -ENOENT (not an owned region), -ERANGE or
 * -EINVAL (not allocated) */
int maru__page_release(struct maru_handler *h, uint64_t rid, uint64_t page);
/* maru__region_return - RETURN_ALLOC; errors only logged (upstream close()
 * does the same) */
void maru__region_return(struct maru_handler *h, uint64_t region_id);
/* copy @r's eviction notices into the inbox (any thread; @arg: the
 * handler; a struct maru__hb_hooks on_reply) */
void maru__evict_note(void *arg, const struct maru__reply *r);
/* the last notice number held, for requests to acknowledge (@arg: the
 * handler; a struct maru__hb_hooks ack) */
uint64_t maru__evict_ack(void *arg);
/*
 * apply the inbox (@wlock held): free the pages named, then give back the
 * regions asked for (the server emptied them for another instance's
 * request: their pages, freed by the same reply, are not handed out in
 * between).  Return: pages freed plus regions given back (0: nothing
 * changed; after a failed REQUEST_ALLOC, > 0 means "ask again")
 */
size_t maru__evict_apply(struct maru_handler *h);
/* apply it if @wlock is free (the lease thread: @arg the handler; a
 * struct maru__hb_hooks on_round) */
void maru__evict_apply_try(void *arg);

/* ownership.c's fast path, here because it needs struct maru_handler */

/*
 * maru__write_gate - before a write hands out or registers pool memory
 * (@wlock held).  Nothing happened: one relaxed load and the lease check;
 * otherwise ownership.c's maru__gate_slow().
 */
static inline int maru__write_gate(struct maru_handler *h)
{
	if (!(atomic_load_explicit(&h->fence.alarm, memory_order_relaxed) &
	      MARU_ALARM_FLAGS) &&
	    maru__lease_ok(h))
		return 0;
	return maru__gate_slow(h);
}

#endif
