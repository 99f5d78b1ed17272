/* SPDX-License-Identifier: Apache-2.0 */
/*
 * start.h - the steps of maru-server's start that are more than a call
 * (main.c runs them in order):
 *
 *   start.c     the store and its identity, the journal's replay (and
 *               --verify-state), and the check of the recovered regions at
 *               the resource manager on its blocking start-up connection
 *               (an identity whose journal cannot be served is released)
 *   idxstart.c  where the shared index lives (a file, or a region of the
 *               pool kept across restarts), and its first build
 */
#ifndef MARU_MDS_START_H
#define MARU_MDS_START_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "journal.h"
#include "pubidx.h"
#include "rm_client.h"
#include "rmsess.h"
#include "store.h"

/* where the shared index lives (idxstart.c) */
struct idx_start {
	const struct config *c;
	const char *dir;    /* the state directory; NULL: no journal */
	int mode;	    /* enum pub_mode, auto resolved */
	int coh;	    /* enum si_coh, auto resolved */
	struct rm_handle h; /* PUB_POOL: the region */
	void *mem;	    /* PUB_POOL: mapped read-write (owns) */
	size_t len;
	char path[4096]; /* PUB_FILE */
	/* PUB_FILE: who may read it -- who may read the pool (idx_prepare:
	 * the pool's mode and group): 0600, 0640 with @gid, or 0644 */
	unsigned file_mode;
	long file_gid; /* -1: ours */
};

/* start_rm_hook()'s argument: what the RM's start-up connection checks */
struct verify {
	struct mds *s;
	struct jr *jr;
	const struct config *c;
	struct rmsess *rm;
	bool reset;	/* none was there any more: started empty */
	bool recovered; /* a journal was recovered: check its regions */
	struct idx_start *idx;
	char old_cid[RM_CLIENT_ID_MAX + 1]; /* an identity not served any
					     * more: its regions released */
};

/* ---- start.c ---- */

/* start_server_id - a fresh random server id (16 hex digits) */
void start_server_id(char *out, size_t len);

/* start_store - an empty store for @c, its index seeded at random.
 * Return: 0 or -ENOMEM (release with mds_destroy() in every case) */
int start_store(struct mds *s, const struct config *c, struct rmsess *rm);

/* start_recover - the journal replayed into @s (said when damaged).
 * Return: 0 or -errno (I/O) */
int start_recover(struct jr *jr, bool readonly, struct mds *s,
		  struct jr_recovery *rec);

/* start_verify_state - --verify-state: what a restart would recover,
 * printed.  Return: the exit status */
int start_verify_state(const struct config *c, const char *dir);

/* start_rm_client_id - our client id at the RM for @server_id */
void start_rm_client_id(char *out, size_t len, const char *server_id);

/* start_rm_hook - rmsess_start()'s hook (@arg: a struct verify), on its
 * blocking connection: recovered regions checked (and an old identity
 * released), then the shared index's region.  Return: 0 or -errno */
int start_rm_hook(void *arg, struct rm_client *c);

/* ---- idxstart.c ---- */

/* idx_prepare - auto resolved, the file's path chosen, or the pool's
 * region taken (the RM's blocking start).  Return: 0 or -errno (said) */
int idx_prepare(struct idx_start *x, struct rm_client *c,
		const struct rmsess *rm);

/* idx_open - the index opened and built from the store (after recovery,
 * before the loop).  Return: the publisher, or NULL: none (off, or auto
 * and not possible: said); *@fatal when the asked-for mode failed */
struct pub *idx_open(struct idx_start *x, struct mds *s, bool *fatal);

#endif
