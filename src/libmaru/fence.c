/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fence.c - loss of ownership: detect it early, fence, recover
 *
 * A handler owns its regions only as long as (a) the maru-server process
 * that allocated them still runs -- a restarted server knows nothing, and
 * the resource manager's reaper frees a dead server's regions within about
 * a second -- and (b) its lease has not expired.  Once either is false the
 * pool gives the same offsets to the next client that asks, and anything
 * this handler writes through its old mappings lands in that client's
 * memory.  This module closes that hole:
 *
 * Detection.
 *  - maru-server sends a random "server_id" in HANDSHAKE and HEARTBEAT
 *    replies (docs/protocol.md §2).  @server_id is HANDSHAKE's; every
 *    verification compares the reply's.  A different id, or none where
 *    there was one, means another server process (MARU_ALARM_LOST_SERVER);
 *    lease_expired means the lease is gone (MARU_ALARM_LOST_LEASE).
 *  - Every lease renewal is such a verification (lease.c).
 *  - The monitor thread polls every RPC connection for a hangup (POLLRDHUP,
 *    POLLHUP, POLLERR), and rpc.c reports the drops it sees itself
 *    (maru__monitor_detach): either raises MARU_ALARM_SUSPECT the moment a
 *    connection to the server drops, once per connection.
 *    The monitor thread then verifies every 200 ms until a server answers,
 *    and every write (alloc, store, batch_store) that sees the flag first
 *    verifies synchronously (maru__gate_slow): the window is the memcpy in
 *    flight, not a heartbeat period.  With nothing amiss the write path
 *    pays one relaxed atomic load (maru__write_gate).
 *
 * Fencing, at once, in whichever thread found out (under @lock): every
 * mapping no longer ours (owned regions for an expired lease, all mappings
 * for a new server, whose predecessor's regions are all gone) is replaced
 * in place by anonymous private memory (mapper.c).  Pointers and Python
 * memoryviews stay valid, nothing crashes, writes go nowhere.
 *
 * Recovery, by the next write (@wlock held): the lease thread is stopped,
 * the fenced regions leave the owned-region manager (page allocators and
 * the local key map with them; no RETURN_ALLOC: they are not the new
 * server's), fenced mappings are retired, a new lease starts, and the
 * next page allocation obtains a fresh region like an auto-expansion (the
 * region-added callback fires).  A store of a page in a fenced region
 * fails with -ESTALE without any RPC.
 *
 * Locks, in this order: fence.lock -> olock -> the mapper's lock.  The
 * monitor's lock is a leaf.  Nothing logs with fence.lock held (the Python
 * log sink takes the GIL).
 *
 * The monitor's lock comes after an RPC client's lock (rpc.c attaches and
 * detaches its connections with its own lock held); the monitor thread
 * only ever try-locks an RPC client (maru__rpc_idle).
 *
 * Threads: the monitor thread polls the fds of the watched connections
 * (rpc.c owns them and detaches each before closing it).  Every 250 ms it
 * also reads the idle ones (maru__rpc_idle): a server's heartbeat PINGs get
 * their PONG even when no call runs, as libzmq's I/O thread did.  It stops
 * when the handler closes.
 */
#include "private.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "mds_proto.h"

#define RETRY_NS (200ull * 1000000ull) /* background re-verification */

void maru__fence_init(struct maru_handler *h)
{
	struct maru__fence *f = &h->fence;

	memset(f, 0, sizeof(*f));
	atomic_init(&f->alarm, 0);
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->mon.lock, NULL);
	f->mon.wakefd = -1;
}

void maru__fence_destroy(struct maru_handler *h)
{
	pthread_mutex_destroy(&h->fence.mon.lock);
	pthread_mutex_destroy(&h->fence.lock);
}

void maru__fence_reset(struct maru_handler *h)
{
	struct maru__fence *f = &h->fence;

	pthread_mutex_lock(&f->lock);
	atomic_store(&f->alarm, 0);
	f->known = false;
	f->server_id[0] = '\0';
	pthread_mutex_unlock(&f->lock);
}

/* copy a reply's server_id (absent = "") into @dst (65 bytes) */
static void copy_id(char *dst, const char *id, uint32_t len)
{
	if (!id)
		len = 0;
	if (len > 64)
		len = 64;
	memcpy(dst, id ? id : "", len);
	dst[len] = '\0';
}

void maru__fence_set_server(struct maru_handler *h, const struct maru__reply *r)
{
	struct maru__fence *f = &h->fence;

	pthread_mutex_lock(&f->lock);
	f->known = true;
	copy_id(f->server_id, r->server_id, r->server_id_len);
	pthread_mutex_unlock(&f->lock);
	ldbg(h, "server id %s", r->server_id_len ? f->server_id : "(none)");
}

int maru__heartbeat(struct maru_handler *h, struct maru__rpc *rpc,
		    const char *lease_id, bool release, struct maru__hb *out)
{
	struct maru__rpc_reply rr;
	struct maru__reply rep;
	struct maru__msg m;
	int rc;

	maru__msg_init(&m, MDS_HEARTBEAT);
	rc = maru__enc_heartbeat(&m, h->instance_id, lease_id, release);
	if (rc == 0)
		rc = maru__rpc_call(rpc, &m, &rr);
	maru__msg_release(&m);
	if (rc < 0)
		return rc;
	memset(&rep, 0, sizeof(rep));
	rc = maru__decode_reply(rr.payload, rr.len, &rep);
	if (rc == 0 && rep.error)
		rc = -EREMOTEIO;
	if (rc == 0) {
		out->lease_expired = rep.lease_expired;
		out->lease_ttl = rep.lease_ttl;
		out->has_server_id = rep.server_id != NULL;
		copy_id(out->server_id, rep.server_id, rep.server_id_len);
	}
	maru__rpc_reply_release(&rr);
	return rc;
}

/* fence every owned region (fence.lock held); Return: how many now */
static size_t fence_owned(struct maru_handler *h)
{
	size_t i, n = 0;

	pthread_mutex_lock(&h->olock);
	for (i = 0; i < h->owned.n; i++)
		if (h->owned.regions[i]->map)
			n += maru__mapper_fence(&h->mapper,
						h->owned.regions[i]->map);
	pthread_mutex_unlock(&h->olock);
	return n;
}

/*
 * fence_locked - fence what is no longer ours and raise @lost
 * (fence.lock held): the owned regions for an expired lease; for a new
 * server every mapping, since every region of the old one is gone (a region
 * mapped for a read in the instant between the restart and its detection
 * goes too; the next retrieve maps it afresh).
 * Return: the mappings fenced by this call.
 */
static size_t fence_locked(struct maru_handler *h, unsigned lost)
{
	size_t n;

	if (lost & MARU_ALARM_LOST_SERVER)
		n = maru__mapper_fence_all(&h->mapper);
	else
		n = fence_owned(h);
	atomic_fetch_or(&h->fence.alarm, lost);
	return n;
}

/* clear SUSPECT unless a connection dropped after @seen was read */
static void clear_suspect(struct maru__fence *f, uint64_t seen)
{
	uint64_t a = atomic_load(&f->alarm);

	while ((a / MARU_ALARM_GEN) == (seen / MARU_ALARM_GEN) &&
	       (a & MARU_ALARM_SUSPECT)) {
		if (atomic_compare_exchange_weak(
			    &f->alarm, &a, a & ~(uint64_t)MARU_ALARM_SUSPECT))
			break;
	}
}

int maru__verify(struct maru_handler *h, struct maru__rpc *rpc)
{
	struct maru__fence *f = &h->fence;
	struct maru__lease *l = &h->lease;
	char lease_id[37] = "", old[65];
	uint64_t epoch, seen, sent;
	struct maru__hb hb;
	unsigned lost = 0;
	bool first = false;
	size_t n = 0;
	int rc;

	pthread_mutex_lock(&f->lock);
	epoch = f->epoch;
	if (l->active)
		memcpy(lease_id, l->id, sizeof(lease_id));
	pthread_mutex_unlock(&f->lock);
	seen = atomic_load(&f->alarm);
	sent = maru__now_ns();
	rc = maru__heartbeat(h, rpc, lease_id[0] ? lease_id : NULL, false, &hb);
	if (rc < 0)
		return rc;

	pthread_mutex_lock(&f->lock);
	if (epoch != f->epoch) {
		/* a recovery started over meanwhile: this reply is stale */
		pthread_mutex_unlock(&f->lock);
		return -EAGAIN;
	}
	snprintf(old, sizeof(old), "%s", f->server_id);
	if (!f->known) {
		/* HANDSHAKE failed at connect: the first answer sets it */
		f->known = true;
		snprintf(f->server_id, sizeof(f->server_id), "%s",
			 hb.server_id);
	} else if (strcmp(f->server_id, hb.server_id)) {
		lost = MARU_ALARM_LOST_SERVER;
	} else if (lease_id[0] && hb.lease_expired) {
		lost = MARU_ALARM_LOST_LEASE;
	}
	if (lost) {
		first = !(atomic_load(&f->alarm) & lost);
		n = fence_locked(h, lost);
		/* the new one is the server from now on: nothing to fence twice
		 */
		snprintf(f->server_id, sizeof(f->server_id), "%s",
			 hb.server_id);
	} else if (lease_id[0] && hb.lease_ttl > 0) {
		atomic_store(&l->renewed_ns, sent);
	}
	/* answered: same server and lease, or the loss is known now */
	clear_suspect(f, seen);
	pthread_mutex_unlock(&f->lock);

	if (!lost)
		return 0;
	/* one warning per event */
	if (first && lost == MARU_ALARM_LOST_SERVER)
		lwarn(h,
		      "metadata server restarted (server_id %s -> %s): its "
		      "regions are gone; %zu mappings fenced (writes to them "
		      "go to private memory), the next alloc gets a new region",
		      old[0] ? old : "none",
		      hb.server_id[0] ? hb.server_id : "none", n);
	else if (first)
		lwarn(h,
		      "lease %s expired on the server: %zu owned regions "
		      "fenced (writes to them go to private memory), the next "
		      "alloc starts a new lease and gets a new region",
		      lease_id, n);
	return -ESTALE;
}

/*
 * recover - start over after a loss of ownership (@wlock held): retire the
 * fenced regions and start a new lease.  Idempotent; on failure the alarm
 * stays up and the next write tries again.  Return: 0 or -errno.
 */
static int recover(struct maru_handler *h)
{
	struct maru__fence *f = &h->fence;
	uint64_t seen, epoch = 0;
	size_t nreg = 0;
	int rc;

	/* the lease thread may be verifying: it needs fence.lock */
	maru__lease_stop(h);
	pthread_mutex_lock(&f->lock);
	/*
	 * An owned region adopted after the loss was found (a race with a
	 * write) went to the old lease: it goes too.  Mappings made by reads
	 * since then are the new server's and stay.
	 */
	fence_owned(h);
	pthread_mutex_lock(&h->olock);
	nreg = h->owned.n;
	maru__owned_destroy(&h->owned);
	pthread_mutex_unlock(&h->olock);
	maru__keymap_destroy(&h->keys);
	maru__mapper_retire_fenced(&h->mapper);
	seen = atomic_load(&f->alarm);
	rc = maru__lease_start(h, true);
	if (rc == 0) {
		epoch = ++f->epoch;
		atomic_fetch_and(&f->alarm, ~(uint64_t)MARU_ALARM_LOST);
		clear_suspect(f, seen); /* its HEARTBEAT was answered */
	}
	pthread_mutex_unlock(&f->lock);
	if (rc < 0) {
		ldbg(h, "recovery after a loss of ownership failed: %s",
		     strerror(-rc));
		return rc;
	}
	linfo(h,
	      "recovered (#%" PRIu64 "): %zu fenced regions dropped, %s; "
	      "the next alloc gets a new region",
	      epoch, nreg,
	      h->lease.active ? "new lease" : "the server grants no lease");
	return 0;
}

int maru__gate_slow(struct maru_handler *h)
{
	uint64_t a;
	int tries, rc;

	/*
	 * Whatever keeps us from confirming ownership (no answer, a recovery
	 * that cannot reach the server) is -EKEYEXPIRED: writes are stopped
	 * until the server answers, as for a lease that lapsed.
	 */
	for (tries = 0; tries < 4; tries++) {
		a = atomic_load(&h->fence.alarm);
		if (a & MARU_ALARM_LOST) {
			rc = recover(h);
			if (rc < 0)
				return -EKEYEXPIRED;
			continue;
		}
		if (!(a & MARU_ALARM_SUSPECT) && maru__lease_ok(h))
			return 0;
		rc = maru__verify(h, &h->rpc);
		if (rc == 0 || rc == -ESTALE || rc == -EAGAIN)
			continue;
		ldbg(h, "write refused: ownership unverified: %s",
		     strerror(-rc));
		return -EKEYEXPIRED;
	}
	return -EKEYEXPIRED;
}

/* ------------------------------------------------------------------------ */
/* The connection-monitor thread                                            */

#define SWEEP_NS (250ull * 1000000ull) /* idle connections read this often */

/* a connection to the server dropped: verify before the next write */
static void raise_suspect(struct maru_handler *h)
{
	uint64_t a = atomic_load(&h->fence.alarm);

	while (!atomic_compare_exchange_weak(
		&h->fence.alarm, &a, (a + MARU_ALARM_GEN) | MARU_ALARM_SUSPECT))
		;
}

/* @w dropped (@lock held): raise the alarm once, log it outside the lock */
static void fire(struct maru__monitor *mon, struct maru__watch *w)
{
	if (w->fired)
		return;
	w->fired = true;
	raise_suspect(mon->h);
	snprintf(mon->lost, sizeof(mon->lost), "%s", w->rpc->url);
}

void maru__monitor_attach(struct maru__monitor *mon, struct maru__rpc *rpc,
			  int fd)
{
	struct maru__watch *nw;
	size_t ncap;

	pthread_mutex_lock(&mon->lock);
	if (!mon->running || mon->stop)
		goto out_unlock;
	if (mon->n == mon->cap) {
		ncap = mon->cap ? 2 * mon->cap : 4;
		nw = realloc(mon->w, ncap * sizeof(*nw));
		if (!nw)
			goto out_unlock;
		mon->w = nw;
		mon->cap = ncap;
	}
	mon->w[mon->n++] = (struct maru__watch){fd, rpc, false, false};
	eventfd_write(mon->wakefd, 1);
out_unlock:
	pthread_mutex_unlock(&mon->lock);
}

void maru__monitor_detach(struct maru__monitor *mon, int fd, bool dropped)
{
	size_t i;

	pthread_mutex_lock(&mon->lock);
	for (i = 0; i < mon->n; i++) {
		if (mon->w[i].fd != fd || mon->w[i].dead)
			continue;
		if (dropped)
			fire(mon, &mon->w[i]);
		mon->w[i].dead = true;
	}
	if (mon->running)
		eventfd_write(mon->wakefd, 1);
	pthread_mutex_unlock(&mon->lock);
}

/*
 * The poll set for the next round (@lock held): the wake-up eventfd, then
 * every live watch not yet fired (@idx maps items to watches); dead ones
 * are dropped here.  Return: the number of items, 0 when out of memory.
 */
static size_t build_items(struct maru__monitor *mon, struct pollfd **items,
			  size_t **idx, size_t *cap)
{
	struct pollfd *ni;
	size_t i, k = 0, *nx;

	for (i = 0; i < mon->n;) {
		if (mon->w[i].dead)
			mon->w[i] = mon->w[--mon->n];
		else
			i++;
	}
	if (mon->n + 1 > *cap) {
		ni = realloc(*items, (mon->n + 1) * sizeof(*ni));
		if (ni)
			*items = ni;
		nx = realloc(*idx, (mon->n + 1) * sizeof(*nx));
		if (nx)
			*idx = nx;
		if (!ni || !nx)
			return 0;
		*cap = mon->n + 1;
	}
	(*items)[k++] = (struct pollfd){mon->wakefd, POLLIN, 0};
	for (i = 0; i < mon->n; i++) {
		if (mon->w[i].fired)
			continue;
		(*idx)[k] = i;
		(*items)[k++] = (struct pollfd){mon->w[i].fd, POLLRDHUP, 0};
	}
	return k;
}

/* read every idle connection (@lock held): PINGs answered, drops found */
static void sweep(struct maru__monitor *mon)
{
	size_t i;

	for (i = 0; i < mon->n; i++) {
		if (mon->w[i].dead || mon->w[i].fired)
			continue;
		if (maru__rpc_idle(mon->w[i].rpc)) {
			fire(mon, &mon->w[i]);
			mon->w[i].dead = true; /* closed by maru__rpc_idle */
		}
	}
}

/* take the URL of a drop noticed under @mon's lock (held), "" if none */
static void take_lost(struct maru__monitor *mon, char *out, size_t n)
{
	memcpy(out, mon->lost, n);
	mon->lost[0] = '\0';
}

/* log it outside the lock (the Python log handler may take the GIL) */
static void log_lost(const struct maru_handler *h, const char *lost)
{
	if (lost[0])
		linfo(h,
		      "connection to %s lost: ownership is verified before "
		      "the next write",
		      lost);
}

static void *monitor_thread(void *arg)
{
	struct maru_handler *h = arg;
	struct maru__monitor *mon = &h->fence.mon;
	uint64_t retry_at = 0, sweep_at = 0, now;
	struct pollfd *items = NULL;
	size_t cap = 0, n, i, *idx = NULL;
	struct maru__watch *w;
	char lost[sizeof(mon->lost)];
	eventfd_t v;
	int tmo, rc;

	for (;;) {
		pthread_mutex_lock(&mon->lock);
		if (mon->stop) {
			pthread_mutex_unlock(&mon->lock);
			break;
		}
		n = build_items(mon, &items, &idx, &cap);
		take_lost(mon, lost, sizeof(lost));
		pthread_mutex_unlock(&mon->lock);
		log_lost(h, lost);
		if (!n) {
			usleep(10000); /* out of memory: try again */
			continue;
		}

		tmo = (int)(SWEEP_NS / 1000000);
		if (atomic_load(&h->fence.alarm) & MARU_ALARM_SUSPECT)
			tmo = (int)(RETRY_NS / 1000000);
		rc = poll(items, (nfds_t)n, tmo);
		if (rc > 0 && (items[0].revents & POLLIN))
			eventfd_read(mon->wakefd, &v);

		pthread_mutex_lock(&mon->lock);
		for (i = 1; rc > 0 && i < n; i++) {
			if (!items[i].revents)
				continue;
			w = &mon->w[idx[i]];
			/* attach only appends and only we compact: same slot */
			if (w->dead || w->fd != items[i].fd)
				continue;
			fire(mon, w);
			if (maru__rpc_idle(w->rpc))
				w->dead = true; /* closed it */
		}
		now = maru__now_ns();
		if (now >= sweep_at) {
			sweep(mon);
			sweep_at = now + SWEEP_NS;
		}
		take_lost(mon, lost, sizeof(lost));
		pthread_mutex_unlock(&mon->lock);
		log_lost(h, lost);

		/* find out now, not at the next write or renewal */
		if (mon->verify &&
		    (atomic_load(&h->fence.alarm) & MARU_ALARM_SUSPECT) &&
		    atomic_load(&h->state) == MARU_ST_CONNECTED &&
		    maru__now_ns() >= retry_at) {
			rc = maru__verify(h, &h->rpc);
			if (rc < 0 && rc != -ESTALE)
				retry_at = maru__now_ns() + RETRY_NS;
		}
	}
	free(items);
	free(idx);
	return NULL;
}

int maru__monitor_start(struct maru_handler *h)
{
	struct maru__monitor *mon = &h->fence.mon;
	int rc, fd;

	fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	pthread_mutex_lock(&mon->lock);
	mon->wakefd = fd;
	mon->h = h;
	mon->lost[0] = '\0';
	mon->stop = false;
	mon->running = true;
	/* a test knob: leave the verification to the write path */
	mon->verify = !getenv("MARU_TEST_NO_BACKGROUND_VERIFY");
	pthread_mutex_unlock(&mon->lock);
	rc = -pthread_create(&mon->thread, NULL, monitor_thread, h);
	if (rc < 0) {
		pthread_mutex_lock(&mon->lock);
		mon->running = false;
		mon->wakefd = -1;
		pthread_mutex_unlock(&mon->lock);
		close(fd);
	}
	return rc;
}

void maru__monitor_stop(struct maru_handler *h)
{
	struct maru__monitor *mon = &h->fence.mon;
	size_t i;

	pthread_mutex_lock(&mon->lock);
	if (!mon->running) {
		pthread_mutex_unlock(&mon->lock);
		return;
	}
	mon->stop = true;
	eventfd_write(mon->wakefd, 1);
	pthread_mutex_unlock(&mon->lock);
	pthread_join(mon->thread, NULL);

	pthread_mutex_lock(&mon->lock);
	/* every watched connection was detached by now */
	for (i = 0; i < mon->n; i++)
		if (!mon->w[i].dead)
			lwarn(h, "connection %zu still watched at stop", i);
	free(mon->w);
	mon->w = NULL;
	mon->n = mon->cap = 0;
	mon->running = false;
	close(mon->wakefd);
	mon->wakefd = -1;
	pthread_mutex_unlock(&mon->lock);
}
