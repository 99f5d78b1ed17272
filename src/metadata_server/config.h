/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h - maru-server's options as parsed (main.c), which the start-up
 * steps (start.c, idxstart.c) read; each default with its reason
 */
#ifndef MARU_MDS_CONFIG_H
#define MARU_MDS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "opts.h"

/* Defaults, with the reason for each (memcached style). */
struct config {
	const char *host;	/* 127.0.0.1: upstream's; never exposed */
	int port;		/* 5555: upstream's */
	const char *log_level;	/* INFO: nothing per request */
	const char *rm_address; /* 127.0.0.1:9850: the RM's default */
	long rm_wait_s;		/* 10: both daemons started at once */
	struct opt_list dax;	/* owns the array: none = any pool */
	double lease_ttl;    /* 30 s: docs/metadata-server.md, Dead clients */
	double peer_grace;   /* 60 s: outlives reconnects of a live client */
	long busy_poll_us;   /* 0: sleep as soon as nothing is ready */
	long max_conns;	     /* 4096, within the fd limit; 0: none */
	long max_key;	     /* 65536: far above any KV-cache key */
	uint64_t max_input;  /* 1 GiB: eight 64 MiB messages at once (their
			      * buffers double to 128 MiB) */
	bool owner_delete;   /* false: anyone deletes any key (upstream) */
	const char *rm_key;  /* NULL: $MARU_RM_KEY_FILE or the RM's default */
	long max_per_addr;   /* 256: one remote host cannot take them all */
	uint64_t inst_quota; /* 0: an instance may hold the whole pool */
	bool insecure;	     /* a non-loopback --host without authentication */
	const char *curve_secret;  /* NULL: no CURVE (zcurve.h) */
	const char *curve_clients; /* a directory of allowed public keys */
	const char *eviction;	   /* "lru": a full pool evicts (issue 13) */
	long evict_grace_ms;	   /* 300: an evicted page rests this long */
	long evict_wait_ms;	   /* 1500: a REQUEST_ALLOC waits for room */
	long evict_high_pm, evict_low_pm; /* 950, 900 per mille */
	/* the journal (issue 14; docs/metadata-server.md "Restart") */
	const char *state_dir;	 /* NULL: default_state_dir() */
	int durability;		 /* process: survives kill -9, as a pool on
				  * /dev/shm does; host costs an fdatasync */
	bool verify_state;	 /* --verify-state: check, print, exit */
	uint64_t snap_min;	 /* 0: MDS_SNAP_MIN */
	const char *events_bind; /* NULL: no KV event stream (issue 17) */
	/* the shared index (issue 16; docs/shm-index.md) */
	int shm_mode;	      /* SHM_AUTO or enum pub_mode */
	const char *shm_path; /* NULL: $RUNTIME_DIRECTORY or /dev/shm */
	uint64_t shm_size;    /* 0: the mode's default */
	uint64_t shm_keys;    /* the first table's keys (0: as many as
			       * recovered) */
	int coherence;	      /* -1: auto, else enum si_coh */
};

#define SHM_AUTO (-1)

#define STATE_DIR_ROOT "/var/lib/maru-server"

#endif
