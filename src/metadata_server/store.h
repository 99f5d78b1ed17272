/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.h - the state of maru-server and its semantics
 * (docs/metadata-server.md)
 *
 *  - KV entries: key -> {region slot, kv_offset, kv_length, pins}, in the
 *    index (index.h).
 *  - Regions: what the server allocated at the resource manager, with
 *    their owner instance, KV reference count and lifecycle state.
 *  - Instance ids (labels clients choose, shared by any number of
 *    clients) and their owners: each client's holdings, the connections
 *    it was seen on (dead-client detection without leases).
 *  - Leases (docs/metadata-server.md): renewed by HEARTBEAT, expiry marks the
 *    lease's regions owner-gone.
 *  - REPORT_STATS accumulators (stats.h).
 *  - Pins, each held by an instance (or by a connection that named
 *    none): released when the holder goes.
 *  - Eviction (docs/metadata-server.md "Eviction"): the policy
 *    (policy.h) orders the unpinned entries of tracked regions; evicted
 *    pages are queued per owner as numbered notices until acknowledged;
 *    REQUEST_ALLOCs the pool has no room for wait in a FIFO (cap_head)
 *    served by mds_tick(); a region eviction emptied is freed only after
 *    the grace (deferred).
 *
 * Authority.  Instance ids are labels anyone can read (GET_USAGE publishes
 * them) and any client may use, several at once; a name proves nothing
 * and owns nothing.  What is allocated belongs to an owner (struct
 * mds_inst): the holder of a lease, or the lease-less connections that
 * claimed it.  A request naming instance X resolves to an owner
 * (store.c, owner_resolve()): the owner of the lease it presents (a lease
 * of another instance id is refused), a new owner for a new lease, else
 * the owner of X its connection already belongs to, else a lease-less
 * owner of X that nobody holds (no open connection, no lease: an upstream
 * client reconnecting after it lost its only connection), else a new
 * one.  A request that acts for an owner O (RETURN_ALLOC of O's region,
 * REGISTER into O's region, UNPIN of O's pin; with --owner-delete, DELETE
 * of a key in O's live region) is accepted from connection C only if C
 * is already O's, or it presents O's active lease id (a secret the client
 * chose and the server never shows anyone), or O is lease-less and free.
 * HANDSHAKE and LIST_ALLOCATIONS claim nothing.  A request with no peer
 * (tests, the loop's own calls) is trusted.
 *
 * The store knows neither ZeroMQ nor the wire format; the resource
 * manager is reached through struct mds_rm_ops (never blocking: an
 * allocation may complete later, see struct mds_wait) so that tests can
 * use a fake.  Frees at the RM that fail for transport reasons are queued and
 * retried from mds_tick(); a region is never forgotten before the RM
 * confirmed (or definitively refused) its FREE.
 *
 * Time: the store uses a "virtual" monotonic clock (nanoseconds) set by
 * its caller through mds_tick(): the loop subtracts the time the process
 * was stalled, so deadlines do not fire because the server itself was
 * not running (docs/metadata-server.md, Dead clients: stall compensation).
 *
 * Context: single-threaded; the main loop owns the struct mds.
 */
#ifndef MARU_MDS_STORE_H
#define MARU_MDS_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "codec.h"
#include "htab.h"
#include "index.h"
#include "policy.h"
#include "rm_proto.h"
#include "stats.h"

/*
 * A request that waits for the resource manager: REQUEST_ALLOC (the RM's
 * ALLOC), GET_STATS and GET_USAGE (a fresh STATS).  The loop never blocks
 * on the RM: such a request is parked with one of these and answered
 * when the RM session calls @done (docs/threads.md).
 *
 * Ownership: made by the handler (mds_handle), which gives it to the RM
 * session through an op that returned -EINPROGRESS; the session borrows
 * it until it calls @done exactly once, with @rc (and @h for an ALLOC)
 * set.  @done gives it back to the loop, which answers (mds_resume) or,
 * when @conn went away meanwhile, undoes (mds_wait_abandon); both free it.
 */
#define MDS_HOST_MAX 64	 /* a client's host name, as it reports it */
#define MDS_MAX_DEVS 256 /* pools told apart in GET_USAGE */

struct mds_wait {
	void (*done)(struct mds_wait *w); /* set by the loop */
	void *arg;			  /* for @done: the loop */
	void *conn; /* the loop's connection; NULL: gone */
	/* the request */
	struct mds_hdr hdr; /* echoed in the reply */
	uint8_t kind; /* MDS_REQUEST_ALLOC, MDS_GET_STATS, MDS_GET_USAGE */
	uint64_t size;
	struct mds_str inst, lease; /* owns copies (ptr from malloc) */
	int peer_fd;
	uint64_t peer_rid;
	bool no_peer; /* asked without one: a trusted caller (tests) */
	/* the outcome, set by the RM session (or the store) before @done */
	int rc;
	struct rm_handle h;
	struct mds_wait *next; /* the RM session's list, or the store's */
	uint32_t earmarked;    /* regions emptied for it were freed */
	uint64_t cap_deadline; /* vclock: waiting for capacity until then */
	uint64_t cap_told;     /* its instance's "told" when it began */
	bool cap_quota;	       /* waits for its own pages (at its quota) */
	uint64_t t0_ns; /* now_ns() when mds_handle() took it; 0: not there */
	/* REQUEST_ALLOC: the owner it waits for (its slot, and its pins.uid
	 * to tell it from a later owner in the same slot) */
	uint32_t oslot;
	uint64_t ouid;
	/* REQUEST_ALLOC: where the client says it runs (GET_USAGE) */
	char host[MDS_HOST_MAX + 1];
	uint32_t pid;
	char *path; /* owns: the RM's pool of the region (NULL: unknown) */
	uint32_t page_size; /* REQUEST_ALLOC: "page_size" (pages.c) */
	uint64_t rm_size;   /* ... what the RM is asked for: @size, or less
			     * for a client that takes pages (pages.c) */
};

/*
 * w->rc set by the store for a REQUEST_ALLOC that waited for capacity:
 * pages of the requester were evicted, its reply carries them ("evicted")
 * instead of a region.
 */
#define MDS_RC_RECLAIMED 1

/* How the store reaches the resource manager.  Nothing here may block. */
struct mds_rm_ops {
	/*
	 * ALLOC @size bytes (fill-first over --dax-path).  Return: 0 with
	 * *@out (answered at once), -EINPROGRESS (@w borrowed until its
	 * done()), or -errno (-EAGAIN: the RM is unreachable; with @w NULL
	 * anything that would wait).
	 */
	int (*alloc)(void *arg, uint64_t size, struct mds_wait *w,
		     struct rm_handle *out);
	/*
	 * FREE a handle.  Return: 0 (freed, or handed to something that
	 * delivers it), -EAGAIN (retry later), another -errno (refused for
	 * good: logged and forgotten).
	 */
	int (*free)(void *arg, const struct rm_handle *h);
	/*
	 * pool capacity: all pools, or only the --dax-path ones.  Return: 0
	 * with the figures, -EINPROGRESS (they are being fetched: @w's done()
	 * follows, then ask again with @w NULL), or -errno.
	 */
	int (*pool_usage)(void *arg, bool dax_only, uint64_t *total,
			  uint64_t *avail, struct mds_wait *w);
	/*
	 * Why an ALLOC of @size bytes failed with @rc, one line for the
	 * client ("the resource manager at ... is not reachable (...)"),
	 * into @buf; may be NULL (then the errno's text is said).
	 */
	void (*why)(void *arg, int rc, uint64_t size, char *buf, size_t len);
};

struct mds_config {
	const char *rm_address; /* borrows: returned in HANDSHAKE */
	bool dax_only;		/* --dax-path given: cxl_pool covers those */
	uint64_t lease_ttl_ns;	/* 0: no leases */
	uint64_t peer_grace_ns; /* 0: no connection-based detection */
	uint32_t max_key;	/* longest key REGISTER stores; 0: IX_KEY_MAX */
	bool owner_delete;	/* --owner-delete: live keys only by owner */
	uint64_t inst_quota;	/* --instance-quota: bytes; 0: none */
	/* eviction (docs/metadata-server.md "Eviction") */
	const char *eviction;	 /* policy name: "lru", "none"; NULL: lru */
	uint64_t evict_grace_ns; /* an evicted page is reused after this */
	uint64_t evict_wait_ns;	 /* a REQUEST_ALLOC waits for capacity */
	uint32_t evict_high_pm;	 /* background reclaim above this (per */
	uint32_t evict_low_pm;	 /* ... mille of the pool) down to this */
	/* journal: a snapshot once it outgrows this and twice
	 * the size right after the last one; 0: JR_SNAP_MIN */
	uint64_t snap_min;
};

#define MDS_SNAP_MIN (64ull << 20)
#define MDS_SNAP_STEP_NS 3000000ull /* snapshot work per tick */

/* What the last start recovered (GET_STATS "recovery"). */
struct mds_recovered {
	bool found;	/* a journal was there: identity kept */
	bool discarded; /* ... damaged before its end: not served */
	uint64_t keys, regions, leases, pins, records, bytes;
	uint64_t dropped_bytes; /* after the first bad record */
	uint64_t regions_lost;	/* the RM no longer had them */
	uint64_t keys_lost;	/* ... their keys */
	uint64_t ms;		/* replay and verification */
};

enum evict_why {
	EV_LRU = 0,	   /* the pool (or the high watermark) was full */
	EV_OWNER_GONE = 1, /* ... and the key's owner was gone */
	EV_REGION = 2,	   /* to empty a region for another owner */
	EV_QUOTA = 3,	   /* its owner was at its --instance-quota */
	EV_NWHY
};

/*
 * What an owner is told of a page, as a numbered notice it acknowledges:
 * a key of its evicted or deleted by another client (classic regions:
 * the page is its own again, after the grace), a key of its gone from a
 * page of a region whose pages are handed out one by one (pages.c: the
 * page is not its own any more once no key of its is there), or a page
 * granted to it.
 */
enum notice_kind {
	NQ_EVICTED = 0, /* registration @gen gone: reuse the page */
	NQ_FORGET = 1,	/* registration @gen gone: forget it, not the page */
	NQ_GRANTED = 2, /* the page is yours to write (@gen 0) */
};

struct mds_notice {
	uint64_t region_id, off;
	uint64_t gen; /* the entry's registration number (0: granted) */
	uint64_t due; /* vclock: told from then on (after the grace for
		       * NQ_EVICTED, at once for the others) */
	uint8_t kind; /* enum notice_kind */
};

/*
 * A region whose pages are handed out one by one (pages.c): its owner's
 * client said its page size, so each page has a holder -- the one
 * instance that may write it and register keys in it: its owner at
 * first, then whoever the server granted it to -- or none: it is free
 * (in the pool of free pages while the region is live) or holds keys of
 * a holder that is done.
 */
#define PG_NOBODY 0xFFFFFFFFu

struct mds_pages {
	uint32_t size;	  /* page bytes: its owner's chunk size */
	uint32_t n;	  /* pages: the region's length / size */
	uint32_t *holder; /* owns: per page, an instance slot or PG_NOBODY */
	uint32_t *refs;	  /* owns: per page, entries in it */
	uint32_t *pooled; /* owns: per page, the number of its entry in the
			   * pool (0: none) */
	uint32_t nlent;	  /* pages held by instances other than its owner */
	uint32_t nfree;	  /* pages held by nobody with no entry */
	uint8_t fresh;	  /* its keys are not counted in @refs yet */
};

enum region_state {
	REG_UNUSED = 0, /* free slot */
	REG_LIVE,	/* owner connected (owner_connected=true) */
	REG_RETURNED,	/* RETURN_ALLOC done, entries keep it */
	REG_GONE,	/* owner detected dead, entries keep it */
};

enum gone_why {
	GONE_LEASE = 1, /* its lease expired or was released */
	GONE_PEER = 2,	/* all connections of its owner closed */
};

struct mds_region {
	struct rm_handle h;  /* verbatim from the RM */
	uint64_t refs;	     /* KV entries in this region */
	uint64_t used;	     /* sum of their kv_length */
	uint32_t owner;	     /* instance slot */
	uint32_t lease;	     /* lease slot, IX_NO_SLOT if none */
	uint32_t prev, next; /* allocation order (free list: next) */
	uint8_t state;	     /* enum region_state */
	uint8_t gone_why;    /* enum gone_why when REG_GONE */
	uint8_t evicted;     /* an eviction emptied pages of it */
	uint8_t deferred;    /* owner done, refs 0: FREE once quiet */
	uint8_t wanted;	     /* emptied for another's request: asked back
			      * even while its owner waits itself */
	uint32_t wanted_for; /* ... for this owner's (slot + 1; 0: none) */
	uint64_t wanted_uid; /* ... its pins.uid (a slot is reused) */
	uint8_t kicked;	     /* ... and a waiter of its owner was answered
			      * at once for it (holds_wanted) */
	uint8_t hit_len;
	uint16_t dev;	      /* its pool: mds.devs[dev - 1]; 0 unknown */
	uint64_t quiet_at;    /* vclock: its last eviction + grace */
	struct mds_pages *pg; /* owns; NULL: its owner's client allocates
			       * its pages (no grants) */
	/* a LOOKUP hit's bytes up to kv_offset (h encoded once) */
	uint8_t hit[MDS_HIT_PREFIX_MAX];
};

/*
 * What one holder (an instance, or a connection that named none) pinned:
 * its records in mds.pin_map, so that they go when the holder does.
 */
struct mds_pins {
	uint64_t uid;	       /* unique per holder: the records' key */
	uint32_t owner1;       /* instance slot + 1 (journaled); 0: a
				* connection's (they die with it) */
	struct ix_entry **rec; /* owns the array; the records are pin_map's */
	uint32_t n, cap;
	uint32_t nsoft; /* records with soft pins (kv.c) */
	uint64_t bytes; /* kv_length of the distinct keys pinned */
};

/*
 * Lookups counted (GET_STATS "lookups"; codec.h's MDS_LK_* index n[]):
 * what the server answered, and what clients answered from the shared
 * index and reported in HEARTBEAT -- per instance id and pool-wide.
 */
struct mds_lookups {
	uint64_t n[MDS_LK_N];
};

/*
 * The remote path: clients of maru-agent (their bytes go over the network
 * to a host that maps the pool), as they reported in HEARTBEAT (GET_STATS
 * "remote"), per instance id and pool-wide: the owners whose client says
 * its bytes go through an agent, and the sums of what their counters grew
 * by (mds_count_remote), which never decrease while the label, or the
 * server, lives.
 */
struct mds_remote {
	uint32_t clients;     /* owners whose client last said "remote": true */
	uint64_t n[MDS_RT_N]; /* MDS_RT_*: theirs, and gone owners' */
};

/*
 * An instance id as a label (store.c, "instance ids and their owners"):
 * what its owners hold, for usage and --instance-quota.
 */
struct mds_label {
	char *id; /* owns; NULL = free slot */
	uint32_t id_len;
	uint32_t nowners; /* owners under it */
	uint32_t first;	  /* their list (mds_inst.sib_next) */
	uint64_t bytes;	  /* lengths of their tracked regions */
	uint64_t pending; /* sizes of their parked REQUEST_ALLOCs */
	uint32_t next_free;
	struct ix_entry *ie;   /* borrows: its entry in label_map */
	struct mds_lookups lk; /* its lookups (they go with the label) */
	uint64_t stores, stored_bytes; /* keys its owners registered */
	struct mds_remote rt; /* its remote clients (they go with it) */
};

/*
 * One owner: a client acting under an instance id -- the holder of one
 * lease (@lease_id), or the connections that claimed a lease-less owner.
 * Regions, pins and eviction notices are an owner's, never a label's.
 */
struct mds_inst {
	char *id; /* owns: the instance id (its label's); NULL = free slot */
	uint32_t id_len;
	char *lease_id; /* owns: the lease it was made for; NULL: none */
	uint32_t lease_len;
	uint32_t label;		     /* its slot in mds.labels */
	uint32_t sib_prev, sib_next; /* the label's owners */
	uint32_t nregions;	     /* tracked regions it owns */
	uint32_t npeer;		     /* ... of those LIVE without a lease */
	uint32_t npeer_gone;	     /* ... of those GONE by peer detection */
	uint32_t nconns;	     /* open connections attributed to it */
	uint32_t nleases;	     /* active leases it owns */
	uint64_t bytes;		     /* lengths of its tracked regions */
	uint64_t pending; /* sizes of its REQUEST_ALLOCs parked at the RM
			   * (--instance-quota counts them; keeps it) */
	uint32_t next_free;
	uint64_t dead_at; /* vclock: declare dead then; 0 = not due */
	/* the connection it was last attributed to: a cheap repeat check */
	int last_fd; /* -1: none */
	uint32_t last_gen;
	uint64_t last_rid;
	struct mds_pins pins; /* released with its last lease/connection */
	/* eviction: it said it takes "evicted" notices (HEARTBEAT) */
	bool notices;
	uint64_t hb_at; /* vclock: its last HEARTBEAT saying so */
	/*
	 * Eviction notices, a FIFO ring of nq_cap: nq_n queued, the first
	 * nq_sent of them sent (at sent_at) but not acknowledged; the head is
	 * number nq_seq0.  An acknowledgement ("evicted_ack": N) drops those
	 * up to N; what stays unacknowledged 2 s is sent again.  nq_hi: the
	 * highest number ever sent; ack_hi: the highest acknowledged
	 * (mds_ack_notices: numberings that disagree); ack_lease: a hash of
	 * the lease that acknowledged last (another lease is another
	 * process of the instance, or this one after a lost lease).
	 */
	struct mds_notice *nq; /* owns */
	uint32_t nq_head, nq_n, nq_cap, nq_sent;
	uint64_t nq_seq0, nq_hi, ack_hi, ack_lease, sent_at;
	uint64_t told; /* replies that told it pages (any connection) */
	/* pages (pages.c): its client's page size, said in REQUEST_ALLOC
	 * and HEARTBEAT ("page_size"; 0: it takes no grants), and the
	 * pages of other owners' regions it holds */
	uint32_t page_size;
	uint32_t ngranted;
	/* where it runs, as its client said (REQUEST_ALLOC, HEARTBEAT):
	 * informative only (GET_USAGE), "" / 0 unknown */
	char host[MDS_HOST_MAX + 1];
	uint32_t pid;
	/* its client last said (HEARTBEAT) its bytes go through maru-agent:
	 * counted in its label's and the pool's remote "clients" */
	bool rt_on;
};

struct mds_lease {
	char *id; /* owns; NULL = free slot */
	uint32_t id_len;
	uint32_t nregions; /* regions allocated under it, tracked */
	uint32_t owner;	   /* instance slot: who may present it */
	uint32_t next_free;
	uint32_t parked;   /* REQUEST_ALLOCs under it waiting for the RM: it
			    * does not expire meanwhile (the client's renewals
			    * may wait behind one on the same connection) */
	uint64_t deadline; /* vclock */
	struct ix_entry *ie;
};

/* One TCP connection (by fd) as the transport (server.c) reports it. */
struct mds_conn {
	uint32_t gen; /* bumped at every accept on this fd */
	bool open;
	bool has_rid;
	uint64_t rid_hash; /* routing id of its first message */
	uint32_t *inst;	   /* owns: attributed instance slots */
	uint32_t ninst, cap;
	struct mds_pins pins; /* taken before it named an instance */
};

#define MDS_FD_LAZY (-2)

/*
 * Where a request came from (per message, filled by the loop).  Finding
 * the fd costs a metadata lookup in libzmq, so the loop may leave it
 * MDS_FD_LAZY and the store asks resolve() only when it needs it.
 */
struct mds_peer {
	int fd;		   /* -1: unknown; MDS_FD_LAZY: call resolve */
	uint64_t rid_hash; /* hash of the routing id */
	int (*resolve)(struct mds_peer *p); /* returns the fd or -1 */
	void *arg;			    /* borrows: for resolve */
};

struct mds_counters {
	uint64_t requests;
	uint64_t errors;	/* error replies sent */
	uint64_t lease_expired; /* leases ended by expiry */
	uint64_t peer_dead;	/* instances declared dead */
	uint64_t rm_frees;	/* regions freed at the RM */
	uint64_t rm_free_retries;
	uint64_t stalls; /* stalls compensated (by the loop) */
	uint64_t evictions[EV_NWHY], evicted_bytes[EV_NWHY];
	uint64_t evict_bursts;	/* reclaim passes that evicted something */
	uint64_t cap_waits;	/* REQUEST_ALLOCs that waited for capacity */
	uint64_t cap_fails;	/* ... and found none in --evict-wait */
	uint64_t notices_sent;	/* evicted pages told to their owners */
	uint64_t pages_granted; /* pages handed out from the pool */
	uint64_t pages_pooled;	/* pages that went to the pool */
	uint64_t retired;	/* evicted keys kept while in the grace */
	uint64_t rescued;	/* ... looked up then, back in the index */
	uint64_t released;	/* regions owners gave back when asked */
	/*
	 * Operator events: each is one INFO log line, counted
	 * here for metrics (GET_STATS "operator_events", with
	 * lease_expired and peer_dead above).  Add new ones here.
	 */
	uint64_t inst_joined;	    /* instance ids seen for the first time */
	uint64_t inst_left;	    /* ... forgotten: nothing of theirs left */
	uint64_t regions_reclaimed; /* regions of gone owners freed */
	uint64_t evict_burst_lines; /* eviction bursts (summary lines) */
	uint64_t recoveries;	    /* starts that recovered a journal */
};

struct mds {
	struct mds_config cfg;
	const struct mds_rm_ops *rm; /* borrows */
	void *rm_arg;
	uint64_t vnow; /* virtual clock, ns */

	struct ix kv;	       /* the KV index */
	uint64_t kv_bytes;     /* sum of kv_length of keys in tracked regions */
	struct pol pol;	       /* eviction order of kv's unpinned entries */
	uint64_t gen;	       /* last registration number handed out */
	uint64_t pinned_bytes; /* kv_length of keys with pins > 0 */
	/* REQUEST_ALLOCs waiting for capacity (FIFO through ->next) */
	struct mds_wait *cap_head, *cap_tail;
	uint32_t ncap;
	uint32_t ndeferred;  /* regions emptied by eviction, FREE deferred */
	bool any_wanted;     /* some region is marked wanted */
	uint64_t pool_total; /* the pool's size as last seen (0: unknown) */
	bool cap_freed;	     /* a region was freed at the RM since the
			      * waiters last asked it */
	uint64_t pool_at;    /* vclock: pool_total last asked */
	uint64_t full_at;    /* vclock: the RM last said the pool is full */
	uint64_t reg_bytes;  /* bytes registered since reg_rate was updated */
	uint64_t reg_rate;   /* ... per second, smoothed (headroom) */
	uint64_t burst_keys, burst_bytes, burst_last; /* for the log line */
	struct mds_pgpool *pgpools; /* owns: free pages by size (pages.c) */
	uint32_t npgpools;
	uint64_t pages_run;  /* random, this process's: a client that sees it
			      * change drops the pages it was granted */
	uint64_t grant_n;    /* pages granted since grant_rate was updated */
	uint64_t grant_rate; /* ... per second, smoothed (the reserve) */
	uint32_t pool_num;   /* the last number of a pool entry (pages.c) */
	struct htab ret_keys, ret_pages; /* evicted keys in their grace
					  * (retire.c, which owns them) */

	/* the pools regions come from (GET_USAGE "devices"): paths as the
	 * RM names them, owned, interned by mds_dev_intern() */
	char *devs[MDS_MAX_DEVS];
	uint32_t ndevs;

	struct ix region_map;	       /* region_id -> slot */
	struct mds_region *regions;    /* owns: nreg_slots */
	uint32_t nreg_slots, reg_free; /* reg_free: free list head */
	uint32_t reg_head, reg_tail;   /* allocation order */
	uint64_t nregions;	       /* tracked */
	uint64_t total_allocated;      /* sum of tracked handle lengths */

	struct ix label_map;	  /* instance_id -> label slot */
	struct mds_label *labels; /* owns */
	uint32_t nlabel_slots, label_free;
	struct mds_inst *insts; /* owns: the owners */
	uint32_t ninst_slots, inst_free;

	struct ix lease_map;	  /* lease_id -> slot (active) */
	struct mds_lease *leases; /* owns */
	uint32_t nlease_slots, lease_free, nleases;
	struct ix ended;	      /* ids of ended leases (remembered) */
	struct ix_entry **ended_ring; /* owns: FIFO of ended entries */
	uint32_t ended_pos, ended_n;

	struct mds_conn *conns; /* owns: indexed by fd */
	int nconn_slots;

	/* pins by holder: (entry address, holder uid) -> count */
	struct ix pin_map;
	struct mds_pins anon_pins; /* requests without a peer (tests) */
	uint64_t next_uid;

	struct rm_handle *pending; /* owns: frees to retry */
	uint32_t npending, pending_cap;

	struct mds_stats stats;
	struct mds_counters ctr;
	struct mds_reqstats req; /* requests by type and outcome (stats.h) */
	uint64_t req_t; /* when the last request of this loop turn ended; 0:
			 * none yet (mds_handle, mds_turn_done) */

	/*
	 * This process's instance id, sent as "server_id" in HANDSHAKE and
	 * HEARTBEAT replies so that clients notice a restarted server (its
	 * regions, and so theirs, are gone).  Set by main(); "" = not sent.
	 */
	char server_id[17];

	/*
	 * The KV event stream (events.h), NULL without --events-bind:
	 * every key stored or removed is reported to it.  Borrowed from
	 * main().
	 */
	struct mds_events *ev;

	/*
	 * The shared index (pubidx.h), NULL without one (--shm-index off,
	 * or until it is built at start): every key stored or removed is
	 * published to it before the reply.  Borrowed from main().  The
	 * clients' reports of what they answered from it (HEARTBEAT
	 * "index_stats"): local hits, local misses, fallbacks.
	 */
	struct pub *pub;
	uint64_t idx_clients[3];
	/* lookups pool-wide, since start (never decrease) */
	struct mds_lookups lk;
	/* the remote path pool-wide: clients now, counters since start */
	struct mds_remote rt;
	/*
	 * Soft pins (PIN_KV "ttl_ms"): pin records holding some (kv.c) and
	 * the earliest deadline among them (vclock; UINT64_MAX none),
	 * for mds_tick()
	 */
	uint64_t soft_recs, soft_next;

	/*
	 * The journal (journal.h), NULL with --durability none: every
	 * change is appended to it as it is made (store.c, "Journal");
	 * the loop commits before replies leave.  Borrowed from main().
	 */
	struct jr *jr;
	bool replaying;	      /* mds_apply() runs: no RM, no journal */
	bool snap_on;	      /* a snapshot is being written */
	uint64_t snap_cursor; /* ... its ix_scan() cursor */
	uint64_t snaps;	      /* snapshots completed */
	struct mds_recovered rec;
};

#define MDS_ENDED_LEASES 4096 /* ended lease ids remembered */
#define MDS_MAX_LEASES 65536  /* active leases */
#define MDS_CONN_MAX_INST 64  /* instances attributed per conn */

/**
 * mds_conn_check - remember the routing id of the first message seen on
 * @peer's connection, and tell whether @peer matches it
 * Return: true if it matches (or was just recorded) or fd is unknown;
 * false when the fd's connection has another routing id (the transport
 * has not told us about a newer connection on that fd yet).
 */
bool mds_conn_check(struct mds *s, struct mds_peer *peer);

/* mds_conn_is_open - was @fd reported accepted (and not closed)? */
static inline bool mds_conn_is_open(const struct mds *s, int fd)
{
	return fd >= 0 && fd < s->nconn_slots && s->conns[fd].open;
}

/**
 * mds_init - an empty store
 * @cfg: copied; its strings are borrowed for the life of @s
 * @rm, @rm_arg: borrowed
 * Return: 0 or -ENOMEM.  Release with mds_destroy() in every case.
 */
int mds_init(struct mds *s, const struct mds_config *cfg,
	     const struct mds_rm_ops *rm, void *rm_arg, uint64_t seed);

/* mds_destroy - free everything; regions are NOT freed at the RM */
void mds_destroy(struct mds *s);

/* ---- allocations ---- */

/**
 * mds_alloc - REQUEST_ALLOC: allocate at the RM and track the region
 * @lease: may be empty (no lease, or leases disabled)
 * @w: NULL, or the request's wait (its inst/lease/size filled) for an RM
 *   that answers later
 * Return: 0 with *out set, -EINPROGRESS (@w given to the RM session, or
 * waiting for capacity: mds_alloc_finish() follows from its done()),
 * MDS_RC_RECLAIMED (the pool is full and pages of the requester were
 * evicted: the reply carries its notices instead of a region), -ESTALE
 * (the lease already ended), -ENOSPC (the pool is full and nothing is
 * evictable), the RM's error, or -ENOMEM.
 */
int mds_alloc(struct mds *s, struct mds_str inst, struct mds_str lease,
	      uint64_t size, struct mds_peer *peer, struct rm_handle *out,
	      struct mds_wait *w);

/**
 * mds_alloc_finish - the RM answered @w's ALLOC (w->rc, w->h): track the
 * region as mds_alloc() would have, or free it at the RM when it can no
 * longer be given (the lease ended meanwhile, or @peer is NULL: the
 * requester went away).
 * Return: 0 with *out set, -EINPROGRESS (waits again: for capacity, or
 * for the RM), MDS_RC_RECLAIMED, or -errno as mds_alloc().
 */
int mds_alloc_finish(struct mds *s, struct mds_wait *w, struct mds_peer *peer,
		     struct rm_handle *out);

/*
 * mds_return - RETURN_ALLOC by the region's owner, or by a client that
 * holds pages of it (pages.c: it gives them back, but those granted in
 * notices numbered after @ack, its "evicted_ack": it had not seen them
 * when it returned the region; 0: all).  Return: success
 */
bool mds_return(struct mds *s, struct mds_str inst, uint64_t region_id,
		struct mds_peer *peer, uint64_t ack);

/* ---- KV (the batch forms loop over these) ---- */

/**
 * mds_register - REGISTER_KV, first writer wins
 * Return: 1 new entry, 0 key already present, -EPERM the region's owner
 * is gone (lease expired: registrations refused) or is another instance
 * (see "Authority" above), -ERANGE the location is outside its region,
 * where the region's pages are handed out (pages.c) -EXDEV the location
 * is not inside one page and -EACCES its page is another client's,
 * -E2BIG the key is longer than --max-key-bytes, -ENOMEM.
 */
int mds_register(struct mds *s, const struct mds_reg *r, struct mds_peer *peer);

/* mds_lookup - the entry and its region; NULL when it does not resolve */
const struct ix_entry *mds_lookup(struct mds *s, const struct mds_key *k,
				  const struct mds_region **reg);

/* mds_exists - the entry (NULL: absent); a use for the policy */
const struct ix_entry *mds_exists(struct mds *s, const struct mds_key *k);

/* the label of the instance @peer's connection claimed first, or
 * IX_NO_SLOT (what a client may be counted as: never a name it sends) */
uint32_t mds_peer_label(struct mds *s, struct mds_peer *peer);

/*
 * mds_count_lookups - add @d to the lookups of @peer's instance id (if
 * its connection names one; @label: that label's slot, or IX_NO_SLOT to
 * find it from @peer) and to the pool's
 */
void mds_count_lookups(struct mds *s, struct mds_peer *peer, uint32_t label,
		       const struct mds_lookups *d);

/*
 * mds_delete - DELETE_KV.  Return: the deleted entry's registration number
 * (its kv_gen, never 0; with MDS_GEN_FORGET where pages are granted and
 * @peer does not hold its page), or 0 if absent, pinned, or not @peer's
 * to delete
 */
uint64_t mds_delete(struct mds *s, const struct mds_key *k,
		    struct mds_peer *peer);

/*
 * mds_pin - PIN_KV: a pin held by @peer's instance (else its connection);
 * @ttl_ms > 0: a soft pin, dropped by itself that long after (a later
 * soft pin of the same key by the same holder extends the deadline of
 * all its soft pins of the key)
 */
bool mds_pin(struct mds *s, const struct mds_key *k, struct mds_peer *peer,
	     uint64_t ttl_ms);

/* mds_unpin - UNPIN_KV: false unless @peer holds a pin on @k (a soft pin
 * goes first) */
bool mds_unpin(struct mds *s, const struct mds_key *k, struct mds_peer *peer);

/**
 * mds_dev_intern - the number of pool @path (@len bytes) in mds.devs,
 * added if new
 * Return: 1..MDS_MAX_DEVS, or 0 (no path, no room, or -ENOMEM).
 */
uint16_t mds_dev_intern(struct mds *s, const char *path, size_t len);

/* mds_region_set_dev - region @region_id lives in pool @path (if tracked) */
void mds_region_set_dev(struct mds *s, uint64_t region_id, const char *path,
			size_t len);

/*
 * mds_inst_label - remember where owner @slot runs, as its client said
 * in a request the owner was just claimed by (informative: GET_USAGE)
 */
void mds_inst_label(struct mds *s, uint32_t slot, struct mds_str host,
		    uint64_t pid);

/*
 * mds_inst_remote - owner @slot's client says whether its bytes go
 * through maru-agent (@r->on; nothing when it did not say): it counts in
 * the remote "clients" until it says otherwise or goes
 */
void mds_inst_remote(struct mds *s, uint32_t slot,
		     const struct mds_remote_rep *r);

/*
 * mds_count_remote - add what a client's remote counters grew by (@r->n)
 * to label @label's (IX_NO_SLOT: none) and to the pool's.  Statistics
 * only, not journaled.
 */
void mds_count_remote(struct mds *s, uint32_t label,
		      const struct mds_remote_rep *r);

/*
 * mds_inst_page_size - owner @slot's client takes pages one by one, of
 * @size bytes (pages.c): its live regions without a page table get one
 * (after a restart), and the pool grants it pages.  0 changes nothing.
 */
void mds_inst_page_size(struct mds *s, uint32_t slot, uint32_t size);

/* the page model's state now (GET_STATS "eviction" "pages") */
struct mds_pages_stats {
	uint64_t free;	  /* pages in the pool (in their grace too) */
	uint64_t lent;	  /* pages held by others than their region's owner */
	uint64_t regions; /* regions whose pages are handed out */
	uint64_t retired; /* evicted keys findable in their grace */
};
void mds_pages_stats(const struct mds *s, struct mds_pages_stats *ps);

/* mds_rescue - key @k (ix_hash() @h), absent from the index: back in it
 * if it was evicted and its page still waits out the grace (retire.c).
 * Return: its entry, or NULL */
struct ix_entry *mds_rescue(struct mds *s, const struct ix_key *k, uint64_t h);

/* mds_pages_run - this process's random number for its grants: a
 * client that sees it change (a restart) drops the pages it was granted
 * (HEARTBEAT and REQUEST_ALLOC replies, "pages_run") */
uint64_t mds_pages_run(struct mds *s);

/* mds_region_handle - the handle of region @rid (NULL: unknown) */
const struct rm_handle *mds_region_handle(struct mds *s, uint64_t rid);

/* mds_entry_region_id - the region id of @e's region, 0 if untracked
 * (pubidx's question; @arg: the store) */
uint64_t mds_entry_region_id(void *arg, const struct ix_entry *e);

/* mds_pinned_bytes - kv_length of the keys the instance holds pins on */
static inline uint64_t mds_pinned_bytes(const struct mds_inst *in)
{
	return in->pins.bytes;
}

/* ---- leases and peers ---- */

/**
 * mds_heartbeat - HEARTBEAT: claim the instance for the connection,
 * begin/renew/end the lease
 * @notices: the client takes "evicted" notices (store.c, "Eviction")
 * Return: 0, 1 when the lease has expired (the response's lease_expired),
 * -EPERM when the instance is held by other connections and the lease
 * does not prove it is ours.
 */
int mds_heartbeat(struct mds *s, struct mds_str inst, struct mds_str lease,
		  bool release, bool notices, struct mds_peer *peer);

/* connection events, from the transport (server.c accepts and closes) */
void mds_conn_open(struct mds *s, int fd);
void mds_conn_close(struct mds *s, int fd);

/**
 * mds_tick - advance the virtual clock to @vnow and run what is due:
 * lease expiry, peer deaths, retries of pending frees, deferred frees of
 * regions emptied by eviction, background reclaim, and the REQUEST_ALLOCs
 * waiting for capacity
 */
void mds_tick(struct mds *s, uint64_t vnow);

/* ---- eviction (see "Eviction" in store.c) ---- */

/**
 * mds_evict - evict the coldest evictable keys until @bytes of key
 * lengths are gone (or nothing is left to evict)
 * Return: the bytes evicted.
 */
uint64_t mds_evict(struct mds *s, uint64_t bytes);

/* mds_set_pool_total - the pool's size, for the watermarks (0: unknown) */
static inline void mds_set_pool_total(struct mds *s, uint64_t total)
{
	s->pool_total = total;
}

/**
 * mds_take_notices - the instance's evicted pages whose grace has passed,
 * not sent yet (or sent 2 s ago and not acknowledged): (region_id,
 * kv_offset, kv_gen) in @out[3i..3i+2]; they stay queued until
 * mds_ack_notices()
 * @islot: from mds_inst_slot(); IX_NO_SLOT gives 0
 * @first, @last: out: the numbers of the notices walked (0, 0: none); a
 *	moot one (its region returned meanwhile) is walked but not written
 * @rel, @nrel: the regions the same reply asks back (mds_release_wanted):
 *	the walk stops at a page of a region emptied for another's request
 *	that is not among them (told alone, the page would be filled again
 *	before the region goes)
 * Return: triples written (at most @max).
 */
uint32_t mds_take_notices(struct mds *s, uint32_t islot, uint64_t *out,
			  uint32_t max, uint64_t *first, uint64_t *last,
			  const uint64_t *rel, uint32_t nrel);

/* mds_ack_notices - the instance, on lease @lease (may be empty), has
 * its notices up to number @ack (0: none); the caller made sure that the
 * request may act for the instance (its HEARTBEAT or REQUEST_ALLOC was
 * accepted) */
void mds_ack_notices(struct mds *s, uint32_t islot, struct mds_str lease,
		     uint64_t ack);

/**
 * mds_release_wanted - regions of the instance that eviction emptied and
 * that the pool needs back (capacity is short): ids into @out
 * @only_wanted: only those emptied for another instance's waiting request
 *	(a REQUEST_ALLOC reply: the requester is short of room itself)
 * Return: ids written (at most @max).
 */
uint32_t mds_release_wanted(struct mds *s, uint32_t islot, uint64_t *out,
			    uint32_t max, bool only_wanted);

/* mds_notices_pending - does the instance have notices not yet due/told? */
bool mds_notices_pending(const struct mds *s, uint32_t islot);

/* mds_under_pressure - capacity is short (waiters, or over the watermark) */
bool mds_under_pressure(const struct mds *s);

/*
 * mds_inst_for - the owner a request naming instance @inst (and lease
 * @lease, may be empty) from @peer acts as: the lease's, or one of @inst's
 * that @peer's connection belongs to; IX_NO_SLOT when none (notices go
 * only to their owner)
 */
uint32_t mds_inst_for(struct mds *s, struct mds_str inst, struct mds_str lease,
		      struct mds_peer *peer);

/* mds_inst_named - the owner such a request resolves to, claimed by its
 * connection or not (informative uses only: where it runs) */
uint32_t mds_inst_named(struct mds *s, struct mds_str inst,
			struct mds_str lease, struct mds_peer *peer);

/* mds_cap_forget - take @w out of the capacity waiters (its conn closed);
 * it is answered (abandoned) at once.  Return: whether it was there. */
bool mds_cap_forget(struct mds *s, struct mds_wait *w);

/* ---- iteration for the read-only messages ---- */

static inline const struct mds_region *mds_first_region(const struct mds *s)
{
	return s->reg_head == IX_NO_SLOT ? NULL : &s->regions[s->reg_head];
}

static inline const struct mds_region *
mds_next_region(const struct mds *s, const struct mds_region *r)
{
	return r->next == IX_NO_SLOT ? NULL : &s->regions[r->next];
}

static inline const struct mds_inst *
mds_region_owner(const struct mds *s, const struct mds_region *r)
{
	return &s->insts[r->owner];
}

/* mds_active_clients - distinct owners of LIVE regions */
uint64_t mds_active_clients(const struct mds *s);

/* ---- the journal (store.c, "Journal") ---- */

struct jr_rec;

/* mds_replay_hint - a journal of @journal_bytes is about to be replayed */
void mds_replay_hint(struct mds *s, uint64_t journal_bytes);

/**
 * mds_apply - replay one journal record (s->replaying set, s->jr NULL)
 * Return: 0, or -EPROTO for a record that contradicts the state (the
 * recovery stops there).
 */
int mds_apply(void *arg, const struct jr_rec *rec);

/* mds_ahead - jr_recover()'s prefetch hint: the index slots of @rec's key */
void mds_ahead(void *arg, const struct jr_rec *rec, int stage);

/**
 * mds_recovered - replay is over: deadlines start now (@vnow), regions
 * their owners are done with and without keys are freed, and instances
 * nobody refers to go
 */
void mds_recovered(struct mds *s, uint64_t vnow);

/**
 * mds_verify_regions - ask @check (the RM's GET_ACCESS) about every
 * region: those it no longer has (-ENOENT, -EACCES, another location:
 * the pool was re-created, or the RM's state lost) go, with their keys;
 * the others learn their pool from the path @check fills ("" unknown)
 * Return: regions kept, or -errno from @check for a transport failure.
 */
int64_t mds_verify_regions(struct mds *s,
			   int (*check)(void *arg, const struct rm_handle *h,
					char *path, size_t pathlen),
			   void *arg);

/* mds_journal_commit - write what the journal buffered (before replies) */
void mds_journal_commit(struct mds *s);

/* mds_fence - the shared index's changes published and in memory (before
 * anything that tells of them leaves: replies, KV events); @s a struct
 * mds (a callback's argument) */
void mds_fence(void *s);

/* mds_snapshot_all - write a whole snapshot now (tests, --compact) */
void mds_snapshot_all(struct mds *s);

/* mds_check - verify internal invariants (tests). Return: 0 or -EUCLEAN */
int mds_check(struct mds *s);

#endif
