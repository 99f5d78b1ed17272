/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm.c - the daemon state's life cycle: set up, recover, release
 *
 * main() and everything that runs a daemon state without main() (the
 * unit tests, fuzz_rm_server) go through these three calls, so the
 * start-up order of recovery and the list of what must be released live
 * in one place:
 *
 *   rm_init    no resources yet: descriptors -1, region ids from 1, our
 *              host name for the local-client rule
 *   rm_open    the state dir and its lock, pools, then the state that
 *              refers to them (recovery.c), then the secret
 *              (required if anything was recovered), the token check, the
 *              owners held until they return (holds.meta) and the
 *              reaper's view of the others
 *   rm_close   connections, regions, clients, cache, pools, WAL and state
 *              dir descriptors, the event loop; no checkpoint
 *
 * Ownership: the caller owns the struct rm and its cfg (rm_close() leaves
 * cfg alone).  Context: the event-loop thread.
 */
#include "rm.h"

#include <unistd.h>

#include "log.h"

void rm_init(struct rm *rm)
{
	rm->listen_fd = rm->spare_fd = rm->wal_fd = rm->state_dirfd = -1;
	rm->state_lockfd = -1;
	rm->next_region_id = 1;
	rm->started_ms = evloop_now_ms();
	if (gethostname(rm->hostname, sizeof(rm->hostname) - 1) < 0)
		rm->hostname[0] = '\0';
}

/* Count a recovered region whose own handle does not verify. */
static void verify_token(struct rm *rm, struct region *r, void *arg)
{
	struct state_alloc a;
	size_t *bad = arg;

	state_alloc_of(r, &a);
	if (!auth_check(rm, r, &a.handle))
		(*bad)++;
}

int rm_open(struct rm *rm)
{
	size_t bad = 0;
	int rc;

	rc = state_dir_open(rm);
	if (rc < 0)
		return rc;
	rc = dev_load_configured(rm);
	if (rc < 0)
		return rc;
	rc = recovery_run(rm);
	if (rc < 0)
		return rc;
	rc = auth_load_secret(rm, rm->nregions > 0);
	if (rc < 0)
		return rc;
	rc = auth_load_client_key(rm);
	if (rc < 0)
		return rc;
	/* a replaced secret: say so once rather than at every refusal */
	region_for_each(rm, verify_token, &bad);
	if (bad)
		log_warn("%zu recovered region(s) carry tokens that %s/secret "
			 "does not verify: their owners' handles will be "
			 "refused (was the secret replaced?)",
			 bad, rm->cfg.state_dir);
	rc = holds_load(rm);
	if (rc < 0)
		return rc;
	reaper_adopt(rm);
	return 0;
}

void rm_close(struct rm *rm)
{
	server_close_all(rm);
	region_table_free(rm);
	client_table_free(rm);
	idem_free(rm);
	dev_free_all(rm);
	state_close(rm);
	evloop_free(rm->el);
	rm->el = NULL;
}
