/* SPDX-License-Identifier: Apache-2.0 */
/*
 * start.c - maru-server's start: the store and its identity, the
 * journal's replay (and --verify-state), and the check of recovered
 * regions at the resource manager (start.h)
 *
 * The server id is random at a first start and comes back with the
 * journal; the resource manager knows the server by it
 * ("maru-server/<host>/<id>").  A recovered state is served only if the
 * resource manager still has its regions: those it lost go with their
 * keys, and when it has none (the pool was re-created) the server starts
 * empty under a new id, as it does when the journal is damaged before its
 * end -- then the old identity's regions, which the resource manager
 * holds until it returns, are released.
 */
#include "start.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/*
 * A fresh random id (16 hex digits), for HANDSHAKE/HEARTBEAT: clients
 * compare it to notice a restart that lost the state.  A journal keeps
 * it across restarts (its HEAD records).  Falls back on the clock and pid
 * if getrandom() fails; it only has to differ from the previous run's.
 */
void start_server_id(char *out, size_t len)
{
	uint64_t v;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = now_ns() ^ ((uint64_t)getpid() << 40);
	snprintf(out, len, "%016llx", (unsigned long long)v);
}

static void mds_config_from(const struct config *c, struct mds_config *mc)
{
	memset(mc, 0, sizeof(*mc));
	mc->rm_address = c->rm_address;
	mc->dax_only = c->dax.n > 0;
	mc->lease_ttl_ns = (uint64_t)llround(c->lease_ttl * 1e9);
	mc->peer_grace_ns = (uint64_t)llround(c->peer_grace * 1e9);
	mc->max_key = (uint32_t)c->max_key;
	mc->owner_delete = c->owner_delete;
	mc->inst_quota = c->inst_quota;
	mc->eviction = c->eviction;
	mc->evict_grace_ns = (uint64_t)c->evict_grace_ms * 1000000;
	mc->evict_wait_ns = (uint64_t)c->evict_wait_ms * 1000000;
	mc->evict_high_pm = (uint32_t)c->evict_high_pm;
	mc->evict_low_pm = (uint32_t)c->evict_low_pm;
	mc->snap_min = c->snap_min;
}

/*
 * An empty store for @c: at the start, and again when the recovered state
 * cannot be served (damaged journal, re-created pool).  Its index is
 * seeded at random every time (hash flooding).  Return: 0 or -ENOMEM.
 */
int start_store(struct mds *s, const struct config *c, struct rmsess *rm)
{
	struct mds_config mc;
	uint64_t seed;

	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = now_ns() ^ ((uint64_t)getpid() << 32);
	mds_config_from(c, &mc);
	return mds_init(s, &mc, &rmsess_ops, rm, seed) < 0 ? -ENOMEM : 0;
}

/* the journal replayed into @s; Return: 0 or -errno (I/O) */
int start_recover(struct jr *jr, bool readonly, struct mds *s,
		  struct jr_recovery *rec)
{
	uint64_t t0 = now_ns();
	int rc;

	mds_replay_hint(s, jr_disk_bytes(jr));
	s->replaying = true;
	rc = jr_recover(jr, readonly, mds_apply, mds_ahead, s, rec);
	s->replaying = false;
	s->rec.found = rec->found;
	s->rec.records = rec->records;
	s->rec.bytes = rec->bytes;
	s->rec.dropped_bytes = rec->dropped;
	s->rec.ms = (now_ns() - t0) / 1000000;
	if (rc < 0)
		return rc;
	if (rec->dropped || rec->why[0])
		log_warn("journal %s: %s; %llu byte(s) after it dropped (the "
			 "longest valid prefix, %llu record(s), is recovered)",
			 jr->dir, rec->why[0] ? rec->why : "damaged",
			 (unsigned long long)rec->dropped,
			 (unsigned long long)rec->records);
	return 0;
}

/* --verify-state: what a restart would recover. Return: exit status */
int start_verify_state(const struct config *c, const char *dir)
{
	struct jr_recovery rec;
	struct mds_config mc;
	struct mds s;
	struct jr jr;
	char err[512] = "";
	int rc;

	mds_config_from(c, &mc);
	if (jr_open(&jr, dir, false, true, err, sizeof(err)) < 0) {
		fprintf(stderr, "maru-server: %s\n", err);
		jr_close(&jr);
		return 1;
	}
	if (mds_init(&s, &mc, &rmsess_ops, NULL, 1) < 0) {
		jr_close(&jr);
		return 1;
	}
	rc = start_recover(&jr, true, &s, &rec);
	if (rc == 0)
		mds_recovered(&s, now_ns());
	printf("state directory  %s\n", dir);
	if (rc < 0) {
		printf("error            %s\n", strerror(-rc));
	} else if (!rec.found) {
		printf("journal          none readable: a restart starts empty "
		       "(new server id)\n");
	} else {
		printf("server id        %s\n",
		       s.server_id[0] ? s.server_id : jr.server_id);
		printf("segments         %llu (%llu bytes valid, %llu "
		       "records)\n",
		       (unsigned long long)rec.segments,
		       (unsigned long long)rec.bytes,
		       (unsigned long long)rec.records);
		printf("keys             %llu (%llu bytes)\n",
		       (unsigned long long)s.kv.count,
		       (unsigned long long)s.kv_bytes);
		printf("regions          %llu (%llu bytes)\n",
		       (unsigned long long)s.nregions,
		       (unsigned long long)s.total_allocated);
		printf("leases           %u\n", s.nleases);
		printf("pins             %llu\n",
		       (unsigned long long)s.pin_map.count);
		printf("replay           %llu ms\n",
		       (unsigned long long)s.rec.ms);
	}
	if (rec.lossy)
		printf("damage           %s, with valid records after it: a "
		       "restart serves none of it (starts empty, new server "
		       "id)\n",
		       rec.why);
	else if (rec.dropped || rec.why[0])
		printf("damage           %s; %llu byte(s) would be dropped\n",
		       rec.why, (unsigned long long)rec.dropped);
	printf("consistent       %s\n",
	       rc == 0 && mds_check(&s) == 0 ? "yes" : "NO");
	rc = rc < 0 || !rec.found || rec.dropped || rec.why[0] ||
	     mds_check(&s) != 0;
	mds_destroy(&s);
	jr_close(&jr);
	return rc;
}

struct check_arg {
	struct rm_client *c;
	const struct rmsess *rm; /* its pools: a region's device */
};

static int check_region(void *arg, const struct rm_handle *h, char *path,
			size_t pathlen)
{
	const struct check_arg *ca = arg;
	struct rm_client *c = ca->c;
	struct rm_access_result out;
	int rc = rm_client_get_access(c, h, &out);

	if (rc == 0 && (out.offset != h->offset || out.length != h->length))
		return -ESTALE;
	if (rc == 0)
		snprintf(path, pathlen, "%s", rmsess_pool_of(ca->rm, out.path));
	if (rc == -ENOENT || rc == -EACCES || rc == -EPERM)
		return rc;
	return rc < 0 && c->answered ? -ESTALE : rc;
}

void start_rm_client_id(char *out, size_t len, const char *server_id)
{
	char host[256];

	/* at most 12 + 80 + 1 + 16 bytes: within RM_CLIENT_ID_MAX */
	if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	snprintf(out, len, "maru-server/%.80s/%.16s", host, server_id);
}

/*
 * The resource manager holds the regions of our earlier identity until it
 * returns (RM_HOLD_UNTIL_BACK); a journal that cannot be served means it
 * never will: release them now, or -- while its workers may still write,
 * or the RM cannot say -- from the loop, as soon as they may be.
 */
static void release_old(struct verify *v, struct rm_client *c)
{
	struct rm_release_resp r;
	int rc = rm_client_release(c, v->old_cid, &r);

	if (rc == 0)
		log_warn("resource manager: the %u region(s), %llu bytes, of "
			 "our earlier identity %s are released",
			 r.regions, (unsigned long long)r.bytes, v->old_cid);
	else if (rc != -ENOENT)
		log_warn("resource manager: the regions of our earlier "
			 "identity %s are released %s",
			 v->old_cid,
			 rc == -EAGAIN ? "once its workers have stopped "
					 "writing into them"
				       : "as soon as the resource manager "
					 "lets us");
	if (rc != 0 && rc != -ENOENT)
		rmsess_release_later(v->rm, v->old_cid,
				     rc == -EAGAIN ? r.regions + 1 : 5);
}

/* rmsess_start()'s hook, on its blocking connection: recovered regions,
 * then the shared index's region */
static int verify_regions(void *arg, struct rm_client *c);

int start_rm_hook(void *arg, struct rm_client *c)
{
	struct verify *v = arg;
	int rc = 0;

	if (v->old_cid[0])
		release_old(v, c);
	if (v->recovered)
		rc = verify_regions(v, c);
	if (rc == 0 && v->idx->c->shm_mode != PUB_OFF)
		rc = idx_prepare(v->idx, c, v->rm);
	return rc;
}

static int verify_regions(void *arg, struct rm_client *c)
{
	struct verify *v = arg;
	struct check_arg ca = {c, v->rm};
	struct mds_events *ev;
	uint64_t before = v->s->nregions, t0 = now_ns();
	int64_t kept;

	if (!before)
		return 0;
	kept = mds_verify_regions(v->s, check_region, &ca);
	if (kept < 0)
		return (int)kept;
	v->s->rec.ms += (now_ns() - t0) / 1000000;
	if (kept > 0) {
		if ((uint64_t)kept < before)
			log_warn("recovery: %llu of %llu region(s) are gone at "
				 "the resource manager; their %llu key(s) "
				 "dropped",
				 (unsigned long long)(before - (uint64_t)kept),
				 (unsigned long long)before,
				 (unsigned long long)v->s->rec.keys_lost);
		return 0;
	}
	/*
	 * None of them: the pool was re-created (or the RM lost its state),
	 * so no recovered location means anything.  Start empty under a new
	 * identity: clients fence, as after a restart without a journal.
	 */
	log_warn("recovery: the resource manager has none of the %llu "
		 "region(s) of the journal (the pool was re-created, or its "
		 "state lost): starting empty, under a new server id",
		 (unsigned long long)before);
	ev = v->s->ev; /* the event stream stays: "cleared" follows */
	mds_destroy(v->s);
	if (start_store(v->s, v->c, v->rm) < 0)
		return -ENOMEM;
	v->s->ev = ev;
	v->s->rec.regions_lost = before;
	if (jr_remove(v->jr) < 0)
		return -EIO;
	start_server_id(v->s->server_id, sizeof(v->s->server_id));
	if (jr_start(v->jr, v->s->server_id) < 0)
		return -EIO;
	v->s->jr = v->jr;
	start_rm_client_id(c->client_id, sizeof(c->client_id), v->s->server_id);
	v->reset = true;
	return 0;
}
