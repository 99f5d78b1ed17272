/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stub.c - TEMPORARY: entry points not implemented yet return -ENOSYS
 *
 * Lets the Python extension compile and link against the final ABI while
 * the implementation lands file by file.  Shrinks to nothing and goes away.
 */
#include "private.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

struct maru_handler {
	struct maru_config cfg;
	char instance_id[64];
	int log_priority;
};

MARU_EXPORT int maru_handler_new(const struct maru_config *cfg,
				 struct maru_handler **out)
{
	struct maru_handler *h;
	int rc;

	rc = maru_config_validate(cfg, NULL, 0);
	if (rc < 0)
		return rc;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	rc = maru__config_copy(&h->cfg, cfg);
	if (rc < 0) {
		free(h);
		return rc;
	}
	if (cfg->instance_id)
		snprintf(h->instance_id, sizeof(h->instance_id), "%s",
			 cfg->instance_id);
	else
		maru__uuid4(h->instance_id);
	h->log_priority = -1;
	*out = h;
	return 0;
}

MARU_EXPORT void maru_handler_free(struct maru_handler *h)
{
	if (!h)
		return;
	maru__config_release(&h->cfg);
	free(h);
}

MARU_EXPORT void maru_handler_set_log_fn(struct maru_handler *h,
					 maru_log_fn fn, void *arg)
{
}

MARU_EXPORT void maru_handler_set_log_priority(struct maru_handler *h,
					       int priority)
{
	h->log_priority = priority;
}

MARU_EXPORT int maru_handler_get_log_priority(const struct maru_handler *h)
{
	return h->log_priority;
}

MARU_EXPORT int maru_handler_connect(struct maru_handler *h)
{
	return -ENOSYS;
}

MARU_EXPORT void maru_handler_close(struct maru_handler *h)
{
}

MARU_EXPORT bool maru_handler_is_connected(const struct maru_handler *h)
{
	return false;
}

MARU_EXPORT const char *maru_handler_instance_id(const struct maru_handler *h)
{
	return h->instance_id;
}

MARU_EXPORT uint64_t maru_handler_chunk_size(const struct maru_handler *h)
{
	return h->cfg.chunk_size;
}

MARU_EXPORT uint64_t maru_handler_lease_ttl_ms(const struct maru_handler *h)
{
	return 0;
}

MARU_EXPORT bool maru_handler_healthcheck(struct maru_handler *h)
{
	return false;
}

MARU_EXPORT int maru_handler_get_stats(struct maru_handler *h,
				       struct maru_server_stats *out)
{
	return -ENOSYS;
}

MARU_EXPORT int maru_handler_get_stats_raw(struct maru_handler *h, void **buf,
					   size_t *len)
{
	return -ENOSYS;
}

MARU_EXPORT int maru_handler_set_on_region_added(struct maru_handler *h,
						 maru_region_added_fn fn,
						 void *arg)
{
	return 0;
}

MARU_EXPORT int maru_handler_owned_region_ids(struct maru_handler *h,
					      uint64_t *ids, size_t cap)
{
	return 0;
}

MARU_EXPORT void *maru_region_get_buffer(struct maru_handler *h,
					 uint64_t region_id, uint64_t offset,
					 uint64_t size)
{
	return NULL;
}

MARU_EXPORT int64_t maru_region_page_count(struct maru_handler *h,
					   uint64_t region_id)
{
	return -ENOENT;
}

MARU_EXPORT int maru_region_get_stats(struct maru_handler *h,
				      uint64_t region_id,
				      struct maru_region_stats *out)
{
	return -ENOENT;
}

MARU_EXPORT int maru_region_get_handle(struct maru_handler *h,
				       uint64_t region_id,
				       struct maru_region_handle *out)
{
	return -ENOENT;
}

MARU_EXPORT bool maru_region_is_owned(struct maru_handler *h,
				      uint64_t region_id)
{
	return false;
}

MARU_EXPORT int maru_page_alloc(struct maru_handler *h, size_t size,
				struct maru_page *out)
{
	return -ENOSYS;
}

MARU_EXPORT int maru_page_free(struct maru_handler *h, uint64_t region_id,
			       uint64_t page_index)
{
	return -ENOSYS;
}

#define STUB_KV(name)                                                          \
	MARU_EXPORT int name(struct maru_handler *h,                           \
			     const struct maru_key *key)                       \
	{                                                                      \
		return -ENOSYS;                                                \
	}
STUB_KV(maru_kv_exists)
STUB_KV(maru_kv_pin)
STUB_KV(maru_kv_unpin)
STUB_KV(maru_kv_delete)

MARU_EXPORT int maru_kv_store(struct maru_handler *h,
			      const struct maru_key *key,
			      const struct maru_page *page)
{
	return -ENOSYS;
}

MARU_EXPORT int maru_kv_retrieve(struct maru_handler *h,
				 const struct maru_key *key,
				 struct maru_view *out)
{
	return -ENOSYS;
}

MARU_EXPORT int maru_kv_batch_store(struct maru_handler *h,
				    const struct maru_key *keys,
				    const struct maru_page *pages, size_t n,
				    bool *results)
{
	return -ENOSYS;
}

MARU_EXPORT int maru_kv_batch_retrieve(struct maru_handler *h,
				       const struct maru_key *keys, size_t n,
				       struct maru_view *views)
{
	return -ENOSYS;
}

#define STUB_BATCH(name)                                                       \
	MARU_EXPORT int name(struct maru_handler *h,                           \
			     const struct maru_key *keys, size_t n,            \
			     bool *results)                                    \
	{                                                                      \
		return -ENOSYS;                                                \
	}
STUB_BATCH(maru_kv_batch_exists)
STUB_BATCH(maru_kv_batch_pin)
STUB_BATCH(maru_kv_batch_unpin)
