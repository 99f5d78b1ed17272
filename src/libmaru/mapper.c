/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mapper.c - region mappings: GET_ACCESS, open, mmap, cache, pre-fault
 *
 * A region is mapped once per handler and stays mapped until close.  To
 * map one we ask the resource manager (GET_ACCESS, through rm_client, which
 * is not thread-safe, hence @lock) where it lives, open that path read-write
 * and mmap handle.length bytes MAP_SHARED at handle.offset.  Owned regions
 * and regions mapped lazily by a retrieve are pre-faulted
 * (MADV_POPULATE_WRITE, else a read of every page; MARU_PREFAULT=0 turns it
 * off) so the first access to a page does not pay a fault; regions mapped
 * eagerly at connect are not (upstream does the same).
 *
 * Multi-host: every host may name the same CXL device differently.  At
 * connect we read the MARUDEV header of each local /dev/daxX.Y (first
 * alignment unit, docs/hardware.md) and keep uuid -> local
 * path; when GET_ACCESS reports a UUID we know, we open our own path
 * instead of the server's.
 *
 * Lookups are lock-free: the table is a fixed array of bucket chains, new
 * mappings are pushed at the head with a release store and never freed
 * until maru__mapper_destroy(), which the handler only calls once no other
 * thread can be using the handler (close).
 *
 * Fencing (ownership.c): when the handler loses ownership of its regions (the
 * server restarted, or its lease expired) their mappings are replaced in
 * place by anonymous private memory (mmap MAP_FIXED), so every pointer and
 * memoryview handed out stays valid but a write can no longer reach memory
 * the pool may have given to someone else.  Lookups skip a fenced mapping
 * (a retrieve maps the region afresh if it is still alive); the handler
 * later moves fenced mappings out of the table to @retired, where they stay
 * mapped until destroy.  Unlinking leaves the mapping's own next pointer
 * alone, so a reader standing on it still walks the rest of the chain.
 *
 * Remote (remote.c): on a host that cannot map the pool, a region's
 * mapping is private memory of its size standing in for it (pages are
 * written there), a second one where reads land (m->rd), and the agent's
 * grant for the region (m->remote); kv.c moves the bytes.  A remote
 * "auto" handler switches to it when its first region cannot be mapped
 * here (not_here()).
 *
 * Context: find from any thread; map serialised by @lock.
 */
#include "private.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daxdev.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int maru__mapper_init(struct maru__mapper *mp, const struct maru_handler *h,
		      bool prefault)
{
	size_t i;

	memset(mp, 0, sizeof(*mp));
	mp->h = h;
	mp->remote = h->remote;
	mp->prefault = prefault;
	for (i = 0; i < MARU_MAP_BUCKETS; i++)
		atomic_init(&mp->buckets[i], NULL);
	pthread_mutex_init(&mp->lock, NULL);
	return 0;
}

int maru__mapper_set_rm(struct maru__mapper *mp, const char *address,
			int timeout_ms)
{
	int rc;

	pthread_mutex_lock(&mp->lock);
	if (mp->rm_ready)
		rm_client_destroy(&mp->rm);
	mp->rm_ready = false;
	rc = rm_client_init(&mp->rm, address, NULL, timeout_ms);
	if (rc == 0)
		mp->rm_ready = true;
	else
		rm_client_destroy(&mp->rm);
	pthread_mutex_unlock(&mp->lock);
	return rc;
}

/*
 * a GET_ACCESS that failed with @rc, in one line: the resource manager's
 * own answer, or what the transport says about its address (@mp->lock)
 */
static void rm_failed(struct maru__mapper *mp, uint64_t rid, int rc)
{
	const struct rm_client *c = &mp->rm;
	const char *why;

	if (c->answered || c->error[0]) {
		lerr(mp->h, "region %" PRIu64 ": GET_ACCESS failed: %s%s%s",
		     rid, strerror(-rc), c->error[0] ? ": " : "", c->error);
		return;
	}
	switch (rc) {
	case -ECONNREFUSED:
		why = "connection refused (is maru-resource-manager running "
		      "there?)";
		break;
	case -EPROTO:
		why = "it does not speak the Maru resource-manager protocol";
		break;
	case -ECONNRESET:
	case -EPIPE:
		why = "it closed the connection without an answer (not a "
		      "resource manager?)";
		break;
	case -ETIMEDOUT:
		why = "no answer within the timeout";
		break;
	default:
		why = strerror(-rc);
	}
	lerr(mp->h,
	     "region %" PRIu64 ": GET_ACCESS at resource manager %s:%u: "
	     "%s",
	     rid, c->host, c->port, why);
}

/* daxdev_scan() callback: one device with a header into the table */
static int add_device(const char *dev, const struct devhdr *hdr, void *arg)
{
	struct maru__mapper *mp = arg;
	struct maru__uuid_path *nu;
	char uuid[DEVHDR_UUID_STRLEN + 1];

	if (hdr->version != DEVHDR_VERSION)
		lwarn(mp->h,
		      "%s: device header version %" PRIu32 " (expected %d)",
		      dev, hdr->version, DEVHDR_VERSION);
	nu = realloc(mp->uuids, (mp->nuuids + 1) * sizeof(*nu));
	if (!nu)
		return -ENOMEM;
	mp->uuids = nu;
	devhdr_uuid_str(hdr->uuid, uuid);
	snprintf(nu[mp->nuuids].uuid, sizeof(nu->uuid), "%s", uuid);
	snprintf(nu[mp->nuuids].path, sizeof(nu->path), "%s", dev);
	mp->nuuids++;
	ldbg(mp->h, "device %s has uuid %s", dev, uuid);
	return 0;
}

void maru__mapper_scan_devices(struct maru__mapper *mp)
{
	pthread_mutex_lock(&mp->lock);
	daxdev_scan(NULL, NULL, add_device, mp);
	pthread_mutex_unlock(&mp->lock);
}

/* called with @lock held */
static const char *local_path_locked(struct maru__mapper *mp, const char *uuid)
{
	size_t i;

	if (!uuid || !*uuid)
		return NULL;
	for (i = 0; i < mp->nuuids; i++)
		if (!strcasecmp(mp->uuids[i].uuid, uuid))
			return mp->uuids[i].path;
	return NULL;
}

const char *maru__mapper_local_path(struct maru__mapper *mp, const char *uuid)
{
	const char *p;

	pthread_mutex_lock(&mp->lock);
	p = local_path_locked(mp, uuid);
	pthread_mutex_unlock(&mp->lock);
	return p;
}

struct maru__mapping *maru__mapper_find(struct maru__mapper *mp,
					uint64_t region_id)
{
	struct maru__mapping *m;

	m = atomic_load_explicit(&mp->buckets[region_id % MARU_MAP_BUCKETS],
				 memory_order_acquire);
	for (; m; m = m->next)
		if (m->handle.region_id == region_id &&
		    !atomic_load_explicit(&m->fenced, memory_order_acquire))
			return m;
	return NULL;
}

/*
 * Fault every page in now so the first store or read does not.
 * MADV_POPULATE_WRITE builds writable page-table entries without writing;
 * then one read per page.  The read is the fallback on kernels without
 * POPULATE_WRITE, and it is also needed after it on VMs whose host backs
 * guest memory lazily (free-page reporting): there the first CPU access to
 * a populated page still costs several microseconds, a 30x slower first
 * pass of memcpy.  A read never changes bytes another process may be
 * writing.
 */
static void prefault(struct maru__mapper *mp, uint8_t *addr, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	volatile uint8_t sink;
	size_t off;

	if (madvise(addr, len, MADV_POPULATE_WRITE) < 0)
		ldbg(mp->h,
		     "MADV_POPULATE_WRITE unavailable (%s): touching "
		     "pages",
		     strerror(errno));
	for (off = 0; off < len; off += (size_t)pg)
		sink = addr[off];
	(void)sink;
}

/*
 * Map region @hd (@lock held): GET_ACCESS at the RM, its file (a local
 * path for its uuid first), opened read-write or read-only (@writable: a
 * read-only descriptor, so that mprotect cannot add writing later).  A
 * read-only map is an attempt (the shared index: the caller falls back):
 * its failures are debug lines.
 * Return: 0 (*@addr), or -errno.
 */
static int map_locked(struct maru__mapper *mp,
		      const struct maru_region_handle *hd, bool writable,
		      void **addr)
{
	struct rm_access_result acc;
	const char *path;
	struct rm_handle rh;
	int fd, rc;

	if (!mp->rm_ready)
		return -ENOTCONN;
	if (!hd->length || hd->length > SIZE_MAX)
		return -EINVAL;
	rh = (struct rm_handle){hd->region_id, hd->offset, hd->length,
				hd->auth_token};
	mp->failed_at = MAP_AT_RM;
	rc = rm_client_get_access(&mp->rm, &rh, &acc);
	if (rc < 0) {
		if (mp->rm.answered)
			mp->failed_at = MAP_AT_RM_SAID_NO;
		rm_failed(mp, hd->region_id, rc);
		return rc;
	}
	mp->failed_at = MAP_AT_OPEN;
	path = local_path_locked(mp, acc.uuid);
	if (path)
		ldbg(mp->h, "region %" PRIu64 ": uuid %s is local %s",
		     hd->region_id, acc.uuid, path);
	else
		path = acc.path;
	fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		if (writable)
			lerr(mp->h, "region %" PRIu64 ": open %s: %s",
			     hd->region_id, path, strerror(errno));
		else
			ldbg(mp->h, "region %" PRIu64 ": open %s: %s",
			     hd->region_id, path, strerror(errno));
		return rc;
	}
	*addr = mmap(NULL, (size_t)hd->length,
		     writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
		     fd, (off_t)hd->offset);
	close(fd);
	if (*addr == MAP_FAILED) {
		rc = -errno;
		lerr(mp->h, "region %" PRIu64 ": mmap %s at %" PRIu64 ": %s",
		     hd->region_id, path, hd->offset, strerror(-rc));
		return rc;
	}
	ldbg(mp->h,
	     "region %" PRIu64 ": mapped %s (%" PRIu64 " bytes at %" PRIu64
	     ")%s",
	     hd->region_id, path, hd->length, hd->offset,
	     writable ? "" : ", read-only");
	return 0;
}

/*
 * A region through the agent (remote.c): its grant, asked for now, and
 * private memory of its size standing in for it (MAP_NORESERVE: only the
 * pages written or read take memory).  Return: 0 or -errno.
 */
static int map_remote_locked(struct maru__mapper *mp,
			     const struct maru_region_handle *hd, void **addr,
			     void **rd, struct maru__grant **rk)
{
	int rc;

	if (!hd->length || hd->length > SIZE_MAX)
		return -EINVAL;
	rc = maru__remote_grant_new(mp->remote, hd, rk);
	if (rc < 0)
		return rc;
	*addr = mmap(NULL, (size_t)hd->length, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	*rd = mmap(NULL, (size_t)hd->length, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (*addr == MAP_FAILED || *rd == MAP_FAILED) {
		rc = -errno;
		if (*addr != MAP_FAILED)
			munmap(*addr, (size_t)hd->length);
		if (*rd != MAP_FAILED)
			munmap(*rd, (size_t)hd->length);
		maru__remote_grant_free(mp->remote, *rk);
		*rk = NULL;
		return rc;
	}
	ldbg(mp->h, "region %" PRIu64 ": remote (%" PRIu64 " bytes)",
	     hd->region_id, hd->length);
	return 0;
}

/*
 * Does the failure @rc of the first mapping say the pool is not here
 * (remote "auto" switches)?  The pool's device or file cannot be opened
 * or mapped, or the resource manager cannot be reached at all (on a
 * remote host it is another host's).  Its own refusals (a bad token, a
 * region just freed) are not.  Decided once: a handler that mapped a
 * region here never switches (a resource manager that stalls later does
 * not make a CXL host remote).
 */
static bool not_here(struct maru__mapper *mp, int rc)
{
	if (mp->mapped_here)
		return false;
	if (mp->failed_at == MAP_AT_OPEN)
		return rc == -ENOENT || rc == -EACCES || rc == -EPERM ||
		       rc == -ENODEV || rc == -ENXIO || rc == -EINVAL;
	if (mp->failed_at == MAP_AT_RM)
		return rc == -ENOTCONN || rc == -ECONNREFUSED ||
		       rc == -EHOSTUNREACH || rc == -ENETUNREACH ||
		       rc == -ETIMEDOUT;
	return false;
}

int maru__mapper_map(struct maru__mapper *mp,
		     const struct maru_region_handle *hd, bool owned,
		     bool want_prefault, struct maru__mapping **out)
{
	struct maru__grant *rk = NULL;
	struct maru__mapping *m;
	void *addr, *rd = NULL;
	size_t b;
	int rc;

	pthread_mutex_lock(&mp->lock);
	m = maru__mapper_find(mp, hd->region_id);
	if (m) {
		*out = m;
		rc = 0;
		goto out_unlock;
	}
	if (maru__remote_on(mp->remote)) {
		rc = map_remote_locked(mp, hd, &addr, &rd, &rk);
	} else {
		rc = map_locked(mp, hd, true, &addr);
		if (rc == 0)
			mp->mapped_here = true;
		if (rc < 0 && maru__remote_may_switch(mp->remote) &&
		    not_here(mp, rc)) {
			linfo(mp->h,
			      "the pool cannot be mapped here (%s): its "
			      "bytes go through the agent %s",
			      strerror(-rc), mp->h->cfg.agent_url);
			maru__remote_switch_on(mp->remote);
			rc = map_remote_locked(mp, hd, &addr, &rd, &rk);
		}
	}
	if (rc < 0)
		goto out_unlock;
	rc = -ENOMEM;
	m = calloc(1, sizeof(*m));
	if (!m) {
		munmap(addr, (size_t)hd->length);
		if (rd)
			munmap(rd, (size_t)hd->length);
		maru__remote_grant_free(mp->remote, rk);
		goto out_unlock;
	}
	m->handle = *hd;
	m->addr = addr;
	m->len = (size_t)hd->length;
	m->owned = owned;
	m->remote = rk;
	m->rd = rd;
	atomic_init(&m->fenced, false);
	if (want_prefault && mp->prefault && !rk)
		prefault(mp, m->addr, m->len);
	b = hd->region_id % MARU_MAP_BUCKETS;
	m->next = atomic_load_explicit(&mp->buckets[b], memory_order_relaxed);
	atomic_store_explicit(&mp->buckets[b], m, memory_order_release);
	*out = m;
	rc = 0;
out_unlock:
	pthread_mutex_unlock(&mp->lock);
	return rc;
}

int maru__mapper_map_ro(struct maru__mapper *mp,
			const struct maru_region_handle *hd, void **out)
{
	int rc;

	if (maru__remote_on(mp->remote))
		return -ENODEV; /* nothing of the pool is mapped here */
	pthread_mutex_lock(&mp->lock);
	rc = map_locked(mp, hd, false, out);
	pthread_mutex_unlock(&mp->lock);
	return rc;
}

static void mapping_free(struct maru__mapper *mp, struct maru__mapping *m)
{
	munmap(m->addr, m->len);
	if (m->rd)
		munmap(m->rd, m->len);
	if (m->remote)
		maru__remote_grant_free(mp->remote, m->remote);
	free(m);
}

void maru__mapper_unmap(struct maru__mapper *mp, uint64_t region_id)
{
	_Atomic(struct maru__mapping *) *pp;
	struct maru__mapping *m;

	pthread_mutex_lock(&mp->lock);
	pp = &mp->buckets[region_id % MARU_MAP_BUCKETS];
	m = atomic_load_explicit(pp, memory_order_relaxed);
	/* only the head can be unlinked atomically; others are rare */
	if (m && m->handle.region_id == region_id) {
		atomic_store_explicit(pp, m->next, memory_order_release);
	} else {
		struct maru__mapping *prev = m;

		m = NULL;
		while (prev && prev->next) {
			if (prev->next->handle.region_id == region_id) {
				m = prev->next;
				prev->next = m->next;
				break;
			}
			prev = prev->next;
		}
	}
	pthread_mutex_unlock(&mp->lock);
	if (m)
		mapping_free(mp, m);
}

/* the fence itself (@lock held); see the header comment */
static bool fence_locked(struct maru__mapper *mp, struct maru__mapping *m)
{
	void *p;

	if (atomic_load_explicit(&m->fenced, memory_order_relaxed))
		return false;
	p = mmap(m->addr, m->len, PROT_READ | PROT_WRITE,
		 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		/* out of map entries: at least stop the writes (they fault) */
		lerr(mp->h, "region %" PRIu64 ": fence mmap failed: %s",
		     m->handle.region_id, strerror(errno));
		if (mprotect(m->addr, m->len, PROT_READ) < 0)
			lerr(mp->h, "region %" PRIu64 ": mprotect failed: %s",
			     m->handle.region_id, strerror(errno));
	}
	atomic_store_explicit(&m->fenced, true, memory_order_release);
	ldbg(mp->h, "region %" PRIu64 ": fenced (%zu bytes at %p)",
	     m->handle.region_id, m->len, (void *)m->addr);
	return true;
}

bool maru__mapper_fence(struct maru__mapper *mp, struct maru__mapping *m)
{
	bool done;

	pthread_mutex_lock(&mp->lock);
	done = fence_locked(mp, m);
	pthread_mutex_unlock(&mp->lock);
	return done;
}

size_t maru__mapper_fence_all(struct maru__mapper *mp)
{
	struct maru__mapping *m;
	size_t i, n = 0;

	pthread_mutex_lock(&mp->lock);
	for (i = 0; i < MARU_MAP_BUCKETS; i++) {
		m = atomic_load_explicit(&mp->buckets[i], memory_order_relaxed);
		for (; m; m = m->next)
			n += fence_locked(mp, m);
	}
	pthread_mutex_unlock(&mp->lock);
	return n;
}

void maru__mapper_retire_fenced(struct maru__mapper *mp)
{
	_Atomic(struct maru__mapping *) *head;
	struct maru__mapping *m, *prev, *next;
	size_t i;

	pthread_mutex_lock(&mp->lock);
	for (i = 0; i < MARU_MAP_BUCKETS; i++) {
		head = &mp->buckets[i];
		prev = NULL;
		m = atomic_load_explicit(head, memory_order_relaxed);
		for (; m; m = next) {
			next = m->next;
			if (!atomic_load_explicit(&m->fenced,
						  memory_order_relaxed)) {
				prev = m;
				continue;
			}
			/* unlink; m->next stays for readers standing on m */
			if (prev)
				__atomic_store_n(&prev->next, next,
						 __ATOMIC_RELEASE);
			else
				atomic_store_explicit(head, next,
						      memory_order_release);
			m->retired_next = mp->retired;
			mp->retired = m;
		}
	}
	pthread_mutex_unlock(&mp->lock);
}

bool maru__mapper_is_retired(struct maru__mapper *mp, uint64_t region_id)
{
	struct maru__mapping *m;
	bool found = false;

	pthread_mutex_lock(&mp->lock);
	for (m = mp->retired; m && !found; m = m->retired_next)
		found = m->handle.region_id == region_id;
	pthread_mutex_unlock(&mp->lock);
	return found;
}

void maru__mapper_destroy(struct maru__mapper *mp)
{
	struct maru__mapping *m, *next;
	size_t i;

	for (i = 0; i < MARU_MAP_BUCKETS; i++) {
		m = atomic_load_explicit(&mp->buckets[i], memory_order_relaxed);
		for (; m; m = next) {
			next = m->next;
			mapping_free(mp, m);
		}
		atomic_store_explicit(&mp->buckets[i], NULL,
				      memory_order_relaxed);
	}
	for (m = mp->retired; m; m = next) {
		next = m->retired_next;
		mapping_free(mp, m);
	}
	mp->retired = NULL;
	if (mp->rm_ready)
		rm_client_destroy(&mp->rm);
	mp->rm_ready = false;
	free(mp->uuids);
	mp->uuids = NULL;
	mp->nuuids = 0;
	pthread_mutex_destroy(&mp->lock);
}
