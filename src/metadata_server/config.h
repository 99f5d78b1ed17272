/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h - maru-server's options as parsed (main.c), which the start-up
 * steps (start.c, idxstart.c) read
 */
#ifndef MARU_MDS_CONFIG_H
#define MARU_MDS_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "opts.h"

/* the values of the options (their defaults, and why each default is
 * what it is: main.c's option table, which --help prints) */
struct config {
	const char *host;
	int port;
	const char *log_level;
	const char *rm_address; /* HOST:PORT */
	long rm_wait_s;
	struct opt_list dax; /* owns the array: none = any pool */
	double lease_ttl;    /* seconds; 0: no leases */
	double peer_grace;   /* seconds; 0: never */
	long busy_poll_us;
	long max_conns; /* 0: only the fd limit */
	long max_key;
	uint64_t max_input; /* 0: no limit */
	bool owner_delete;
	const char *rm_key;  /* NULL: $MARU_RM_KEY_FILE or the RM's default */
	long max_per_addr;   /* 0: no limit */
	uint64_t inst_quota; /* 0: no limit */
	bool insecure;	     /* a non-loopback --host without CURVE */
	const char *curve_secret;  /* NULL: no CURVE (zcurve.h) */
	const char *curve_clients; /* a directory of allowed public keys */
	const char *eviction;	   /* "lru" or "none" */
	long evict_grace_ms, evict_wait_ms;
	long evict_high_pm, evict_low_pm; /* per mille of the pool */
	/* the journal (docs/metadata-server.md "Restart") */
	const char *state_dir; /* NULL: default_state_dir() */
	int durability;	       /* enum jr_durability */
	bool verify_state;     /* --verify-state: check, print, exit */
	uint64_t snap_min;
	const char *events_bind; /* NULL: no KV event stream */
	/* the shared index (docs/shm-index.md) */
	int shm_mode;	       /* SHM_AUTO or enum pub_mode */
	const char *shm_path;  /* NULL: $RUNTIME_DIRECTORY or /dev/shm */
	const char *shm_group; /* NULL: the pool's group, if it may read it */
	uint64_t shm_size;     /* 0: the mode's default */
	uint64_t shm_keys;     /* the first table's keys (0: as many as
				* recovered) */
	int coherence;	       /* -1: auto, else enum si_coh */
};

#define SHM_AUTO (-1)

#define STATE_DIR_ROOT "/var/lib/maru-server"

#endif
