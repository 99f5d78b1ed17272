/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tools.c - the protocols without a handler's session (maru.h, "The
 * protocols without a handler's session")
 *
 * Thin public faces of code that lives once elsewhere:
 *   - maru_rm_*: the resource-manager client (src/common/rm_client.c)
 *     behind a mutex, so that threads may share one;
 *   - maru_device_*: the MARUDEV header on a device (src/common/daxdev.c);
 *   - maru_handler_call() is in handler.c, beside the other calls.
 * Users: the Python package's MaruShmClient and device_scanner (through
 * _maru), tools.
 *
 * Context: any thread.
 */
#include "private.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daxdev.h"
#include "rm_client.h"

struct maru_rm {
	pthread_mutex_t lock; /* one request at a time on @c */
	struct rm_client c;
};

MARU_EXPORT int maru_rm_open(const char *address, int timeout_ms,
			     struct maru_rm **out)
{
	struct maru_rm *rm = calloc(1, sizeof(*rm));
	int rc;

	if (!rm)
		return -ENOMEM;
	rc = rm_client_init(&rm->c, address, NULL, timeout_ms);
	if (rc < 0) {
		rm_client_destroy(&rm->c);
		free(rm);
		return rc;
	}
	pthread_mutex_init(&rm->lock, NULL);
	*out = rm;
	return 0;
}

MARU_EXPORT void maru_rm_close(struct maru_rm *rm)
{
	if (!rm)
		return;
	rm_client_destroy(&rm->c);
	pthread_mutex_destroy(&rm->lock);
	free(rm);
}

MARU_EXPORT const char *maru_rm_client_id(const struct maru_rm *rm)
{
	return rm->c.client_id;
}

/* after a request (@lock held): how the resource manager answered */
static int done(struct maru_rm *rm, int rc, struct maru_rm_status *st)
{
	if (st) {
		st->answered = rc < 0 && rm->c.answered;
		snprintf(st->msg, sizeof(st->msg), "%s",
			 rc < 0 ? rm->c.error : "");
	}
	pthread_mutex_unlock(&rm->lock);
	return rc;
}

static void to_rm(const struct maru_region_handle *h, struct rm_handle *r)
{
	r->region_id = h->region_id;
	r->offset = h->offset;
	r->length = h->length;
	r->auth_token = h->auth_token;
}

MARU_EXPORT int maru_rm_alloc(struct maru_rm *rm, uint64_t size,
			      const char *dax_path, struct maru_rm_region *out,
			      struct maru_rm_status *st)
{
	struct rm_alloc_result a;
	int rc;

	pthread_mutex_lock(&rm->lock);
	rc = rm_client_alloc(&rm->c, size, dax_path, &a);
	if (rc == 0) {
		out->handle.region_id = a.handle.region_id;
		out->handle.offset = a.handle.offset;
		out->handle.length = a.handle.length;
		out->handle.auth_token = a.handle.auth_token;
		out->requested_size = a.requested_size;
		snprintf(out->path, sizeof(out->path), "%s", a.path);
		snprintf(out->uuid, sizeof(out->uuid), "%s", a.uuid);
	}
	return done(rm, rc, st);
}

MARU_EXPORT int maru_rm_free(struct maru_rm *rm,
			     const struct maru_region_handle *h,
			     struct maru_rm_status *st)
{
	struct rm_handle r;

	to_rm(h, &r);
	pthread_mutex_lock(&rm->lock);
	return done(rm, rm_client_free(&rm->c, &r), st);
}

MARU_EXPORT int maru_rm_get_access(struct maru_rm *rm,
				   const struct maru_region_handle *h,
				   struct maru_rm_region *out,
				   struct maru_rm_status *st)
{
	struct rm_access_result a;
	struct rm_handle r;
	int rc;

	to_rm(h, &r);
	pthread_mutex_lock(&rm->lock);
	rc = rm_client_get_access(&rm->c, &r, &a);
	if (rc == 0) {
		out->handle = *h;
		out->handle.offset = a.offset;
		out->handle.length = a.length;
		out->requested_size = 0;
		snprintf(out->path, sizeof(out->path), "%s", a.path);
		snprintf(out->uuid, sizeof(out->uuid), "%s", a.uuid);
	}
	return done(rm, rc, st);
}

struct stats_walk {
	int (*fn)(const struct maru_pool_info *p, void *arg);
	void *arg;
};

static int stats_one(const struct rm_pool_stat *s, void *arg)
{
	struct stats_walk *w = arg;
	char path[RM_PATH_MAX + 1];
	struct maru_pool_info p = {path, s->dax_type, s->total_size,
				   s->free_size, s->align_bytes};

	snprintf(path, sizeof(path), "%.*s", (int)s->path.len,
		 s->path.ptr ? s->path.ptr : "");
	return w->fn(&p, w->arg);
}

MARU_EXPORT int maru_rm_stats(struct maru_rm *rm,
			      int (*fn)(const struct maru_pool_info *p,
					void *arg),
			      void *arg, struct maru_rm_status *st)
{
	struct stats_walk w = {fn, arg};

	pthread_mutex_lock(&rm->lock);
	return done(rm, rm_client_stats(&rm->c, stats_one, &w), st);
}

struct counters_walk {
	int (*fn)(const char *name, uint64_t value, void *arg);
	void *arg;
};

static int counter_one(const struct rm_counter *k, void *arg)
{
	struct counters_walk *w = arg;
	char name[RM_COUNTER_NAME_MAX + 1];

	snprintf(name, sizeof(name), "%.*s", (int)k->name.len, k->name.ptr);
	return w->fn(name, k->value, w->arg);
}

MARU_EXPORT int maru_rm_counters(struct maru_rm *rm,
				 int (*fn)(const char *name, uint64_t value,
					   void *arg),
				 void *arg, struct maru_rm_status *st)
{
	struct counters_walk w = {fn, arg};

	pthread_mutex_lock(&rm->lock);
	return done(rm, rm_client_counters(&rm->c, counter_one, &w), st);
}

MARU_EXPORT int maru_device_header_read(const char *path, char uuid[37],
					uint32_t *version)
{
	struct devhdr h;
	int rc = daxdev_header_read(path, &h);

	if (rc == 0) {
		devhdr_uuid_str(h.uuid, uuid);
		*version = h.version;
	}
	return rc;
}

MARU_EXPORT int maru_device_header_write(const char *path, const uint8_t *uuid)
{
	return daxdev_header_write(path, uuid);
}

struct scan_walk {
	int (*fn)(const char *dev, const char *uuid, void *arg);
	void *arg;
};

static int scan_one(const char *dev, const struct devhdr *h, void *arg)
{
	struct scan_walk *w = arg;
	char uuid[DEVHDR_UUID_STRLEN + 1];

	devhdr_uuid_str(h->uuid, uuid);
	return w->fn(dev, uuid, w->arg);
}

MARU_EXPORT int maru_device_scan(int (*fn)(const char *dev, const char *uuid,
					   void *arg),
				 void *arg)
{
	struct scan_walk w = {fn, arg};

	return daxdev_scan(NULL, NULL, scan_one, &w);
}
