/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idem.c - the idempotency cache for ALLOC and FREE (docs/protocol.md §1)
 *
 * Key "<client_id>:<request_id>" (request_id 0 = not cached), value the
 * outcome (status, and an ALLOC's region id); a retry gets the answer
 * encoded again from it (server.c), so this cache, like the WAL that
 * refills it, knows nothing of the wire.  The request
 * type is part of the key too: a FREE that happens to reuse an ALLOC's
 * request_id gets a FREE_RESP, not the ALLOC's answer (upstream would
 * re-send the ALLOC_RESP; no client relies on that).  At most
 * RM_IDEM_MAX entries live for RM_IDEM_TTL_MS each.  Entries are never
 * refreshed, so insertion order is age order: a FIFO ring evicts the
 * oldest, and a lookup scans from the newest backwards, stopping at the
 * first entry too old to matter.  A scan of 1024 small entries costs far
 * less than the fdatasync every cached operation already paid.
 *
 * After a restart, recovery.c refills the cache from the WAL records that
 * carry a request_id, so a client retrying a request the daemon logged
 * just before it died gets the original answer instead of a second region.
 *
 * Context: event-loop thread.
 */
#include "rm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool fresh(const struct idem_entry *e, uint64_t now)
{
	return e->req_type && now - e->created_ms < RM_IDEM_TTL_MS;
}

const struct idem_entry *idem_lookup(struct rm *rm, uint16_t req_type,
				     const char *client_id, uint64_t request_id)
{
	struct idem *c = &rm->idem;
	uint64_t now = evloop_now_ms();
	size_t i, slot;

	if (!request_id)
		return NULL;
	for (i = 0; i < c->count; i++) {
		slot = (c->head + RM_IDEM_MAX - 1 - i) % RM_IDEM_MAX;
		if (!fresh(&c->ent[slot], now))
			break; /* this and everything older has expired */
		if (c->ent[slot].request_id == request_id &&
		    c->ent[slot].req_type == req_type &&
		    strcmp(c->ent[slot].client_id, client_id) == 0)
			return &c->ent[slot];
	}
	return NULL;
}

void idem_store(struct rm *rm, uint16_t req_type, const char *client_id,
		uint64_t request_id, int32_t status, uint64_t region_id,
		uint64_t age_ms)
{
	struct idem *c = &rm->idem;
	struct idem_entry *e = &c->ent[c->head];
	uint64_t now = evloop_now_ms();

	if (!request_id || age_ms >= RM_IDEM_TTL_MS)
		return;
	memset(e, 0, sizeof(*e));
	strncpy(e->client_id, client_id, sizeof(e->client_id) - 1);
	e->request_id = request_id;
	e->req_type = req_type;
	e->created_ms = now > age_ms ? now - age_ms : 0;
	e->status = status;
	e->region_id = region_id;
	c->head = (c->head + 1) % RM_IDEM_MAX;
	if (c->count < RM_IDEM_MAX)
		c->count++;
}

void idem_free(struct rm *rm)
{
	memset(&rm->idem, 0, sizeof(rm->idem));
}
