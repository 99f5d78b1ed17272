/* SPDX-License-Identifier: Apache-2.0 */
/*
 * private.h - libmaru internals shared by the library's .c files
 *
 * Everything here is hidden (-fvisibility=hidden plus libmaru.sym); public
 * entry points are marked MARU_EXPORT.  Helpers shared across files are
 * named maru__x (libuv convention).
 */
#ifndef MARU_PRIVATE_H
#define MARU_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <maru/maru.h>

#define MARU_EXPORT __attribute__((visibility("default")))

#define MARU_DEFAULT_SERVER_URL "tcp://localhost:5555"
#define MARU_DEFAULT_RM_ADDRESS "127.0.0.1:9850"
#define MARU_DEFAULT_POOL_SIZE (100ull << 20)
#define MARU_DEFAULT_CHUNK_SIZE (1ull << 20)
#define MARU_DEFAULT_TIMEOUT_MS 2000
#define MARU_DEFAULT_MAX_INFLIGHT 64

/* The body of the opaque struct maru_config (upstream MaruConfig). */
struct maru_config {
	char *server_url;	/* owns: strdup()ed */
	char *instance_id;	/* owns: strdup()ed; NULL = random per handler */
	uint64_t pool_size;	/* bytes requested for the first region */
	uint64_t chunk_size;	/* page size in bytes */
	int timeout_ms;		/* per-RPC timeout */
	bool use_async_rpc;	/* DEALER pipelined vs REQ lock-step */
	int max_inflight;	/* DEALER in-flight cap */
	bool eager_map;		/* map others' regions at connect */
	bool auto_expand;	/* request a new region when pages run out */
	uint64_t expand_size;	/* 0 = unset (use pool_size) */
	char *rm_address;	/* owns: "host:port", fallback only */
	bool enable_stats;	/* REPORT_STATS every second */
};

/* maru__config_copy - deep copy of @src into @dst (zeroed). 0 or -ENOMEM */
int maru__config_copy(struct maru_config *dst, const struct maru_config *src);
/* maru__config_release - free the strings of an embedded config */
void maru__config_release(struct maru_config *cfg);

/* maru__uuid4 - a random UUID4 in text form into @out (37 bytes) */
void maru__uuid4(char out[37]);

#endif
