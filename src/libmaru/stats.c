/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c - per-operation statistics reported to the server (enable_stats)
 *
 * Each operation appends {op_type, result, size, latency_us} to a buffer
 * (bounded: entries beyond MARU_STATS_CAP are dropped until the next
 * flush).  A background thread swaps the buffer every second and sends it
 * with REPORT_STATS over its own lock-step connection, at most 10 000
 * entries per message (the server's limit).  Best effort: a failed report
 * is dropped, as upstream does.
 *
 * Context: maru__stats_record from any thread (@lock); start/stop from
 * connect/close.
 */
#include "private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mds_proto.h"
#include "util.h"

#define MARU_STATS_CAP 100000
#define MARU_STATS_PER_MSG 10000

static void report(struct maru_handler *h, struct maru__stat_entry *e, size_t n)
{
	struct maru__rpc_reply rr;
	struct maru__msg m;
	size_t off, k;
	int rc;

	for (off = 0; off < n; off += k) {
		k = n - off < MARU_STATS_PER_MSG ? n - off : MARU_STATS_PER_MSG;
		maru__msg_init(&m, MDS_REPORT_STATS);
		rc = maru__enc_report_stats(&m, h->instance_id, e + off, k);
		if (rc == 0)
			rc = maru__rpc_call(&h->stats.rpc, &m, &rr);
		maru__msg_release(&m);
		if (rc < 0) {
			ldbg(h, "REPORT_STATS dropped %zu entries: %s", n - off,
			     strerror(-rc));
			return;
		}
		maru__rpc_reply_release(&rr);
	}
}

static void *stats_thread(void *arg)
{
	struct maru_handler *h = arg;
	struct maru__stats *s = &h->stats;
	struct maru__stat_entry *batch = NULL;
	struct timespec ts;
	size_t n;
	bool stop;

	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		pthread_mutex_lock(&s->lock);
		while (!s->stop && pthread_cond_timedwait(&s->cv, &s->lock,
							  &ts) != ETIMEDOUT)
			;
		stop = s->stop;
		/* take the buffer; recording continues into a fresh one */
		batch = s->buf;
		n = s->n;
		s->buf = NULL;
		s->n = s->cap = 0;
		pthread_mutex_unlock(&s->lock);
		if (n)
			report(h, batch, n);
		free(batch);
		if (stop)
			break;
	}
	return NULL;
}

int maru__stats_start(struct maru_handler *h)
{
	struct maru__stats *s = &h->stats;
	pthread_condattr_t a;
	int rc;

	rc = maru__rpc_open(&s->rpc, h, h->cfg.server_url, h->cfg.timeout_ms,
			    false, 1);
	if (rc < 0)
		return rc;
	s->rpc_open = true;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &a);
	pthread_condattr_destroy(&a);
	s->buf = NULL;
	s->n = s->cap = 0;
	s->stop = false;
	rc = -pthread_create(&s->thread, NULL, stats_thread, h);
	if (rc < 0) {
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->lock);
		maru__rpc_close(&s->rpc);
		s->rpc_open = false;
		return rc;
	}
	s->thread_started = true;
	s->enabled = true;
	return 0;
}

void maru__stats_stop(struct maru_handler *h)
{
	struct maru__stats *s = &h->stats;

	if (!s->thread_started)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	s->enabled = false;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	s->thread_started = false;
	free(s->buf);
	s->buf = NULL;
	s->n = s->cap = 0;
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->lock);
	maru__rpc_close(&s->rpc);
	s->rpc_open = false;
}

void maru__stats_record(struct maru_handler *h, const char *op,
			const char *result, uint64_t size, uint64_t start_ns)
{
	struct maru__stats *s = &h->stats;

	if (!s->enabled)
		return;
	pthread_mutex_lock(&s->lock);
	if (!s->enabled || s->n >= MARU_STATS_CAP)
		goto out;
	if (array_grow(&s->buf, &s->cap, s->n, sizeof(*s->buf), 256))
		goto out;
	s->buf[s->n++] = (struct maru__stat_entry){
		op, result, size, (double)(maru__now_ns() - start_ns) / 1000.0};
out:
	pthread_mutex_unlock(&s->lock);
}
