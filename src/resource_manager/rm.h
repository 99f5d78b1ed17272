/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm.h - maru-resource-manager: the daemon's state and its modules
 *
 * One thread runs the event loop (src/common/evloop.c) and owns everything
 * below: pools, regions, clients, the idempotency cache, the WAL and the
 * connections.  Nothing is shared with another thread, so nothing is
 * locked (docs/resource-manager.md, "Threads").
 *
 * Modules, each calling only the ones listed below it (each file starts
 * with its own design notes):
 *   main.c      options, signals, banner, rm.conf, the loop
 *   rm.c        life cycle: rm_init, rm_open (recovery order), rm_close
 *   server.c    listening socket, connection state machine, request handlers
 *   reaper.c    the 1 s cron: dead or departed clients lose their regions
 *   holds.c     owners whose regions are kept until they return (holds.meta)
 *   recovery.c  start-up: global.meta, pool_*.meta and the WAL back into
 *               the region table, FS_DAX files reconciled
 *   region.c    the region table; allocate/free as one durable operation
 *   state.c     state dir, WAL appends, checkpoints (byte layouts in
 *               statefmt.c); reads the region table as data, calls none of
 *               region.c
 *   auth.c      the HMAC secret, client.key and reader.key, auth tokens
 *   client.c    client_id bookkeeping (pins, allocation counts, pid info)
 *   idem.c      idempotency cache (client_id:request_id -> outcome)
 *   dev.c       DEV_DAX / FS_DAX / emulated pools: discovery, header, ids
 *   pool.c      the allocator (pure); statefmt.c: the state-file codecs
 *               (pure)
 * Under all of them, src/common: atomicfile.c (files replaced with tmp +
 * fsync + rename, and read back), statedir.c, evloop.c, rm_proto.c, ...
 */
#ifndef MARU_RM_RM_H
#define MARU_RM_RM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "evloop.h"
#include "htab.h"
#include "opts.h"
#include "pool.h"
#include "rm_auth.h"
#include "rm_proto.h"
#include "statefmt.h"

#define RM_DEFAULT_STATE_DIR "/var/lib/maru-resourced"
#define RM_DEFAULT_POOL "/dev/shm/maru-pool"
#define RM_SECRET_SIZE 32
#define RM_HOLD_MAX_MS 600000 /* longest hold a client may ask (AUTH) */
#define RM_IDEM_MAX 1024      /* idempotency cache entries */
#define RM_IDEM_TTL_MS 60000  /* idempotency cache lifetime */
#define RM_REAPER_MS 1000     /* reaper / cron period */
#define RM_RESCAN_MS 10000    /* rescan period while no pool exists */
#define RM_WAL_NAME "maru-resource-manager.wal"
#define RM_WAL_LEGACY_NAME "maru_resourced.wal"

/* Effective configuration; see rm_config_defaults() for the reasons. */
struct rm_config {
	const char *host; /* borrows argv or a literal */
	uint16_t port;
	const char *state_dir; /* borrows */
	int log_level;	       /* syslog priority */
	int num_workers;       /* accepted for compatibility, unused */
	int grace_period;      /* seconds; 0 = reap at the next tick */
	int max_clients;       /* concurrent connections */
	struct opt_list pools; /* --pool given: serve exactly these (owns
				* the array; borrows the strings) */
	const char
		*pools_from;   /* borrows: file of pool paths, re-read on HUP */
	uint64_t emulate_size; /* bytes of an emulated pool we create */
	int msg_timeout;       /* seconds a partial message may take */
	int idle_timeout;      /* seconds an anonymous connection may idle */
	int checkpoint_ops;    /* alloc+free ops between checkpoints */
	uint64_t client_quota; /* bytes one client id may own; 0: any */
	int max_per_addr;      /* connections per non-loopback address */
	int recovered_hold;    /* seconds: hold of an owner recovered from
				* the WAL (its own is not persisted) */
	bool no_client_auth;   /* ALLOC/FREE without AUTH (upstream's) */
	bool require_auth;     /* every request needs AUTH (networked) */
	bool insecure;	       /* ... even on a non-loopback address */
	mode_t pool_mode;      /* of pool files we create (--pool-mode) */
	gid_t pool_gid;	       /* their group (--pool-group); -1: ours */
	bool pool_perm_set;    /* either given: also applied to an
				* existing emulated pool file */
	bool pool_mode_set;    /* --pool-mode given */
};

/* One allocation. */
struct region {
	uint64_t id;	      /* global, from 1, never reused */
	struct pool *pool;    /* borrows: pools live until exit */
	struct client *owner; /* borrows: counted in owner->nallocs */
	uint64_t offset;      /* pool-space offset (real_offset) */
	uint64_t length;      /* aligned bytes */
	uint64_t requested;   /* the request's size */
	uint64_t nonce;	      /* per-allocation secret for the token */
	uint64_t token;	      /* auth token handed to the owner */
	struct hnode hn;      /* in rm->regions, hashed by @id */
};

/* Everything known about one client_id. */
struct client {
	char id[RM_CLIENT_ID_MAX + 1]; /* NUL-terminated */
	uint32_t idlen;
	unsigned nconns;      /* open connections pinned to this id */
	size_t nallocs;	      /* regions owned */
	uint64_t bytes;	      /* ... their lengths (--client-quota) */
	uint64_t gone_ms;     /* evloop_now_ms() when the last pinned
			       * connection closed; 0 = none pending */
	bool local;	      /* hostname part equals ours */
	pid_t pid;	      /* local: the pid part, 0 if not a pid */
	uint64_t starttime;   /* local: /proc stat field 22 cached at the
			       * first allocation, 0 = unknown */
	uint64_t dead_ms;     /* local: when its process was first seen
			       * gone; 0 = not seen */
	uint32_t hold_ms;     /* declared at AUTH: a dead process's regions
			       * are kept this long after its last
			       * connection closed (its clients fence) */
	bool durable;	      /* declared RM_HOLD_UNTIL_BACK: never reaped
			       * (holds.c) */
	uint64_t away_s;      /* unix seconds its last connection closed;
			       * 0 while connected */
	uint64_t reminded_ms; /* durable and away: last named in the log */
	uint32_t write_ms;    /* durable: its clients may write this long
			       * after it goes (RELEASE waits for it) */
	struct hnode hn;      /* in rm->clients, hashed by @id */
};

/* The outcome of one ALLOC or FREE; the answer is encoded from it. */
struct idem_entry {
	char client_id[RM_CLIENT_ID_MAX + 1];
	uint64_t request_id;
	uint16_t req_type;   /* RM_ALLOC_REQ or RM_FREE_REQ; 0 = empty */
	uint64_t created_ms; /* evloop_now_ms() clock */
	int32_t status;	     /* the answer's status: 0 or -errno */
	uint64_t region_id;  /* ALLOC with status 0: the region it gave */
};

/* FIFO ring: the oldest entry is evicted first. */
struct idem {
	struct idem_entry ent[RM_IDEM_MAX];
	size_t head; /* next slot to write */
	size_t count;
};

struct conn;

/* Counters since start (COUNTERS_RESP; docs/resource-manager.md) */
struct rm_counters {
	uint64_t allocs;	 /* regions handed out */
	uint64_t alloc_failures; /* ALLOC answered with an error */
	uint64_t frees;		 /* regions freed, by FREE or the reaper */
	uint64_t reaped_clients; /* clients whose regions the reaper freed */
	uint64_t reaped_regions; /* ... and those regions */
	uint64_t reaped_bytes;
	uint64_t checkpoints;	   /* checkpoints written */
	uint64_t released_regions; /* regions freed by RELEASE_REQ */
};

struct rm {
	struct rm_config cfg;
	struct evloop *el;  /* owns */
	char hostname[256]; /* gethostname() for the local-client rule */

	struct pool **pools; /* owns: list order = fill-first order */
	size_t npools;

	struct htab regions; /* by region id (borrows the regions: region.c
			      * frees them) */
	size_t nregions;
	uint64_t next_region_id;

	struct htab clients; /* by client_id (client.c frees them) */
	size_t nclients;

	struct idem idem;
	uint8_t secret[RM_SECRET_SIZE];
	bool have_secret;
	uint8_t client_key[RM_AUTH_KEY_LEN]; /* <state_dir>/client.key */
	uint8_t reader_key[RM_AUTH_KEY_LEN]; /* <state_dir>/reader.key */

	int state_dirfd;	 /* owns */
	int state_lockfd;	 /* owns: flock of <state_dir>/lock */
	int wal_fd;		 /* owns: append-only, -1 before recovery */
	uint64_t wal_size;	 /* bytes in the WAL (to undo a torn append) */
	bool wal_torn;		 /* a failed append could not be cut off:
				  * checkpoint before the next one */
	unsigned ops_since_ckpt; /* WAL records since the last checkpoint */
	bool holds_dirty;	 /* holds.meta to be written (holds.c) */
	uint64_t holds_retry_ms; /* ... not before (after a failed write) */
	struct buf scratch;	 /* owns: reused for WAL records */

	int listen_fd;	    /* owns */
	int spare_fd;	    /* owns: released to survive EMFILE */
	struct conn *conns; /* owns: doubly linked */
	unsigned nconns;
	uint64_t cron_timer;
	uint64_t rescan_timer; /* 0 = not armed */
	bool stopping;
	int exit_code;
	struct rm_counters ctr;
	uint64_t started_ms; /* evloop clock at start, for uptime */
};

/* ---- rm.c ---- */

/* rm_init - no resources yet: fds -1, region ids from 1, our host name */
void rm_init(struct rm *rm);

/**
 * rm_open - pools, recovered state, secret, token check, reaper adoption
 * @rm: rm_init()ed, with its cfg and its event loop (el) set
 * Return: 0 or -errno (logged as one clear line); call rm_close() either way.
 */
int rm_open(struct rm *rm);

/* rm_close - release everything @rm holds, the event loop too; no
 * checkpoint, cfg untouched */
void rm_close(struct rm *rm);

/* ---- region.c ---- */

/* region_find - the region with @id, or NULL */
struct region *region_find(struct rm *rm, uint64_t id);

/**
 * region_alloc - allocate, log to the WAL (fdatasync) and record a region
 * @owner: borrowed; must be pinned by the calling connection
 * @request_id: the request's id, kept in the WAL record so that a retry
 *              after a crash is still answered from the idempotency cache
 * @out: on success the new region (owned by @rm)
 * Return: 0, or a protocol status: -EINVAL, -ENODEV, -ENOENT, -ENOMEM, or
 * -EIO if the WAL append failed (nothing changed then).
 */
int region_alloc(struct rm *rm, struct client *owner, uint64_t size,
		 struct rm_str dax_path, uint64_t request_id,
		 struct region **out);

/**
 * region_free - log a FREE to the WAL and release the region
 * @r: taken on success (freed); kept on error
 * @request_id: as for region_alloc(), 0 for the reaper
 * @why: for the log ("free", "reaped: pid gone", ...)
 * Return: 0 or -EIO (the WAL append failed; nothing changed).
 */
int region_free(struct rm *rm, struct region *r, uint64_t request_id,
		const char *why);

/**
 * region_restore - re-insert a recovered allocation (no WAL write)
 * Return: 0; -ENOENT if its pool is not configured; -EEXIST for a
 * duplicate id; -EINVAL if it does not fit its pool or overlaps another
 * allocation; -ENOMEM.
 */
int region_restore(struct rm *rm, const struct state_alloc *a);

/* region_unrestore - drop a region during WAL replay (no WAL write) */
void region_unrestore(struct rm *rm, struct region *r);

/* region_path - the path a client opens for @r (FS_DAX: its file) */
const char *region_path(const struct region *r, char *buf, size_t len);

/* region_foreach_safe-style iteration: call @fn for every region */
void region_for_each(struct rm *rm,
		     void (*fn)(struct rm *, struct region *, void *),
		     void *arg);

void region_table_free(struct rm *rm);

/* ---- client.c ---- */

/**
 * client_get - the entry for @id, created if @create
 * Return: the entry (owned by @rm) or NULL (not found / out of memory).
 */
struct client *client_get(struct rm *rm, struct rm_str id, bool create);

/* client_pin - a connection pinned @c: count it, cancel its grace timer */
void client_pin(struct rm *rm, struct client *c);

/* client_unpin - a pinned connection closed; may start the grace timer
 * or free @c */
void client_unpin(struct rm *rm, struct client *c);

/* client_say_held - log what is held for durable @c, away, and how to
 * free it */
void client_say_held(struct rm *rm, const struct client *c);

/* client_maybe_release - free @c if nothing refers to it any more */
void client_maybe_release(struct rm *rm, struct client *c);

/* client_read_stat - state char and start time of @pid from /proc.
 * Return: 0, or -ESRCH if the process does not exist. */
int client_read_stat(pid_t pid, char *state, uint64_t *starttime);

void client_table_free(struct rm *rm);

/* ---- idem.c ---- */

/* idem_lookup - a fresh cached response to a @req_type request, or NULL */
const struct idem_entry *idem_lookup(struct rm *rm, uint16_t req_type,
				     const char *client_id,
				     uint64_t request_id);

/**
 * idem_store - remember the outcome of client_id:request_id
 * @status: 0 or the -errno the answer carried
 * @region_id: an ALLOC's region (status 0), else 0
 * @age_ms: how old the entry already is (0 for a fresh response)
 */
void idem_store(struct rm *rm, uint16_t req_type, const char *client_id,
		uint64_t request_id, int32_t status, uint64_t region_id,
		uint64_t age_ms);

void idem_free(struct rm *rm);

/* ---- auth.c ---- */

/**
 * auth_load_secret - load <state_dir>/secret, or create it
 * @need_existing: recovered allocations exist, so a missing or short
 *                 secret is fatal
 * Return: 0 or -errno (logged).
 */
int auth_load_secret(struct rm *rm, bool need_existing);

/**
 * auth_load_client_key - load <state_dir>/client.key (rm_auth.h), or
 * create it (mode 0640: give maru-server's user the directory's group)
 * Return: 0 or -errno (logged).
 */
int auth_load_client_key(struct rm *rm);

/* auth_token - the token for a handle's fields, a nonce and an owner */
uint64_t auth_token(const struct rm *rm, uint64_t region_id, uint64_t offset,
		    uint64_t length, uint64_t nonce, const char *owner,
		    size_t owner_len);

/* auth_check - does @h carry a valid token for @r? */
bool auth_check(const struct rm *rm, const struct region *r,
		const struct rm_handle *h);

/* ---- state.c ---- */

/**
 * state_dir_open - create the state dir, open it and take its lock (one
 * resource manager per directory, statedir.h); before the pools, so that a
 * second daemon is refused before it touches a device.  Return: 0 or -errno.
 */
int state_dir_open(struct rm *rm);

/**
 * state_wal_open - open the WAL for appending once recovery has read it
 * @keep: bytes of good records; anything after them (a torn tail) is cut
 *        off, so that new records follow good ones
 * @records: records in it, counted towards the next checkpoint
 * Return: 0 or -errno (logged).
 */
int state_wal_open(struct rm *rm, uint64_t keep, unsigned records);

/**
 * state_wal_ready - can the WAL take a record now?  After an append whose
 * undo failed (wal_torn), this writes a checkpoint first.  It changes the
 * checkpoint, so call it only while no operation is half done
 * (region_alloc() calls it before it draws a region id).
 * Return: 0 or -EIO.
 */
int state_wal_ready(struct rm *rm);

/**
 * state_log_alloc / state_log_free - append one WAL record (one write,
 * then fdatasync)
 * Return: 0 or -EIO (a partial write is truncated away).
 */
int state_log_alloc(struct rm *rm, const struct region *r, uint64_t request_id);
int state_log_free(struct rm *rm, const struct region *r, uint64_t request_id);

/* state_alloc_of - the durable record of @r (WAL, global.meta), whose
 * handle is also what ALLOC answers */
void state_alloc_of(const struct region *r, struct state_alloc *a);

/**
 * state_checkpoint - write every pool_<id>.meta and global.meta (tmp,
 * fsync, rename), then empty the WAL
 * Return: 0 or -errno (the WAL is kept then).
 */
int state_checkpoint(struct rm *rm);

/* state_maybe_checkpoint - checkpoint once checkpoint_ops records were
 * logged (called before the loop sleeps, after responses went out) */
void state_maybe_checkpoint(struct rm *rm);

void state_close(struct rm *rm);

/* ---- recovery.c ---- */

/**
 * recovery_run - in the state dir (state_dir_open()), with the pools
 * loaded: adopt a legacy WAL name, recover global.meta, pool_*.meta and
 * the WAL into @rm, open the WAL (state_wal_open()) and reconcile FS_DAX
 * region files
 * Return: 0 or -errno; a refusal is logged as one clear line.
 */
int recovery_run(struct rm *rm);

/* ---- dev.c ---- */

/**
 * dev_load_configured - the start-up pool set: --pool paths, the
 * --pools-from file, or discovery (plus the emulated fallback)
 * Return: 0 or -errno (a --pool that cannot be served is fatal).
 */
int dev_load_configured(struct rm *rm);

/**
 * dev_rescan - add pools that appeared since start-up (SIGHUP, timer)
 * Return: the number of pools added.
 */
int dev_rescan(struct rm *rm);

void dev_free_all(struct rm *rm);

#define DEV_DAX_EXTRA_ID 0x20000000u

/**
 * dev_devdax_pool_id - the stable pool id of device-dax @devname ("daxX.Y")
 * Return: X for daxX.0 (upstream's region-number id), DEV_DAX_EXTRA_ID |
 * (X * 1000 + Y) for Y > 0, or the hash of @path for any other name.
 */
uint32_t dev_devdax_pool_id(const char *devname, const char *path);

/**
 * dev_file_perm - give pool file @fd (@path, for messages) --pool-mode and
 * --pool-group, whatever the umask.  Return: 0 or -errno (logged).
 */
int dev_file_perm(const struct rm_config *c, int fd, const char *path);

/* ---- reaper.c ---- */

/* reaper_tick - run the reaper rules once (the cron calls it each second) */
void reaper_tick(struct rm *rm);

/* reaper_adopt - after recovery: start every owner's grace timer now and
 * cache the start time of live local owners */
void reaper_adopt(struct rm *rm);

/**
 * reaper_free_owner - free every region of @c as a FREE would (WAL first);
 * @c may be freed by the last one
 * @why: for the log
 * Return: 0, or -EIO when the WAL refused one (the rest stay).  *@n and
 * *@bytes: what was freed.
 */
int reaper_free_owner(struct rm *rm, struct client *c, const char *why,
		      uint32_t *n, uint64_t *bytes);

/* ---- holds.c ---- */

/* holds_load - after recovery: the durable owners of holds.meta.
 * Return: 0, or -EPROTO for a damaged file (logged: refuse to start) */
int holds_load(struct rm *rm);

/* holds_declare - @c keeps its regions until it returns, its clients
 * writing up to @write_ms after it goes; written before the caller
 * answers.  Return: 0 or -EIO (then it is not durable) */
int holds_declare(struct rm *rm, struct client *c, uint32_t write_ms);

/* holds_release_wait - seconds before @c's regions may be RELEASEd: its
 * clients may still write until then (0: now) */
uint32_t holds_release_wait(const struct rm *rm, const struct client *c);

/* holds_undeclare - @c is an ordinary owner again (written now) */
void holds_undeclare(struct rm *rm, struct client *c);

/* holds_flush - write holds.meta if a departure or return changed it */
void holds_flush(struct rm *rm);

/* holds_tick - the cron: name held owners that are away, hourly */
void holds_tick(struct rm *rm);

/* ---- server.c ---- */

/*
 * server_bind - bind cfg.host:cfg.port (rm->listen_fd), not listening yet:
 * taken first, so that a start refused for its port makes nothing.
 * Return: 0/-errno (said in the log)
 */
int server_bind(struct rm *rm);
/* server_listen - listen on the bound socket (binding it if not yet) and
 * accept from the loop.  Return: 0/-errno */
int server_listen(struct rm *rm);

/* server_cron - per-second connection housekeeping (slow-loris timeout) */
void server_cron(struct rm *rm);

/* server_close_all - close every connection and the listener */
void server_close_all(struct rm *rm);

/* server_stats_encode - a STATS_RESP message for the current pools */
int server_stats_encode(struct rm *rm, struct buf *out);

/* server_counters_encode - COUNTERS_RESP for @rm.  Return: 0 or -errno */
int server_counters_encode(struct rm *rm, struct buf *out);

/* server_encode_alloc_ok - the successful ALLOC_RESP for @r */
int server_encode_alloc_ok(struct rm *rm, struct buf *out,
			   const struct region *r);

#endif
