/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libmaru_rpc.c - drives libmaru's RPC client (rpc.c) for
 * tests/python/test_libmaru_rpc.py, which plays the server: pyzmq ROUTER
 * sockets (wire compatibility with libzmq) and hand-written TCP peers
 * (split replies, garbage greetings, silence, drops).
 *
 *   test_libmaru_rpc URL req|dealer TIMEOUT_MS [MAX_INFLIGHT [monitor]]
 *
 * "monitor" runs rpc.c's connection watch on the client, with the
 * ownership callbacks (it answers PINGs of an idle connection and raises
 * MARU_ALARM_SUSPECT on a drop).
 *
 * One client for the whole run; commands on stdin, one result line each:
 *
 *   call THREADS CALLS SIZE
 *     THREADS threads make CALLS calls each.  A request's payload is the
 *     text "T I SIZE"; the server answers with that text, a 0 byte and
 *     padding to SIZE bytes (tests/python/test_libmaru_rpc.py).  Every
 *     reply is checked to be the caller's own.
 *     -> "done ok=N fail=N bad=N maxms=N errs=E1,E2,..." (errno names of
 *        the failures, in order)
 *   alarm
 *     -> "alarm=F" (the handler's MARU_ALARM_* flags)
 *   quit
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "private.h"

#include "mds_proto.h"

static struct maru__rpc rpc;

struct job {
	int tid;
	int calls;
	size_t size;
	int ok, fail, bad;
	uint64_t max_ns;
	char errs[512];
};

static void note_err(struct job *j, int rc)
{
	const char *name = rc == -ETIMEDOUT    ? "ETIMEDOUT"
			   : rc == -ECONNRESET ? "ECONNRESET"
			   : rc == -EPROTO     ? "EPROTO"
			   : rc == -ENOMEM     ? "ENOMEM"
					       : "OTHER";
	size_t n = strlen(j->errs);

	if (n + strlen(name) + 2 < sizeof(j->errs))
		snprintf(j->errs + n, sizeof(j->errs) - n, "%s%s", n ? "," : "",
			 name);
}

static void *worker(void *arg)
{
	struct job *j = arg;
	struct maru__rpc_reply rep;
	struct maru__msg m;
	char text[64];
	uint64_t t0, dt;
	size_t tl, want;
	int i, rc;

	for (i = 0; i < j->calls; i++) {
		tl = (size_t)snprintf(text, sizeof(text), "%d %d %zu", j->tid,
				      i, j->size);
		maru__msg_init(&m, MDS_HEARTBEAT);
		m.len = MDS_HDR_SIZE + tl;
		memcpy(m.data + MDS_HDR_SIZE, text, tl);
		t0 = maru__now_ns();
		rc = maru__rpc_call(&rpc, &m, &rep);
		dt = maru__now_ns() - t0;
		maru__msg_release(&m);
		if (dt > j->max_ns)
			j->max_ns = dt;
		if (rc < 0) {
			j->fail++;
			note_err(j, rc);
			continue;
		}
		want = j->size > tl + 1 ? j->size : tl + 1;
		if (rep.len == want && !memcmp(rep.payload, text, tl) &&
		    rep.payload[tl] == 0)
			j->ok++;
		else
			j->bad++;
		maru__rpc_reply_release(&rep);
	}
	return NULL;
}

static void run(int threads, int calls, size_t size)
{
	struct job *jobs = calloc((size_t)threads, sizeof(*jobs));
	pthread_t *th = calloc((size_t)threads, sizeof(*th));
	int ok = 0, fail = 0, bad = 0, i;
	uint64_t max_ns = 0;
	char errs[4096] = "";
	size_t n;

	if (!jobs || !th) {
		printf("done ok=0 fail=0 bad=0 maxms=0 errs=ENOMEM\n");
		exit(2);
	}
	for (i = 0; i < threads; i++) {
		jobs[i] = (struct job){.tid = i, .calls = calls, .size = size};
		if (pthread_create(&th[i], NULL, worker, &jobs[i]))
			exit(2);
	}
	for (i = 0; i < threads; i++) {
		pthread_join(th[i], NULL);
		ok += jobs[i].ok;
		fail += jobs[i].fail;
		bad += jobs[i].bad;
		if (jobs[i].max_ns > max_ns)
			max_ns = jobs[i].max_ns;
		n = strlen(errs);
		if (jobs[i].errs[0] &&
		    n + strlen(jobs[i].errs) + 2 < sizeof(errs))
			snprintf(errs + n, sizeof(errs) - n, "%s%s",
				 n ? "," : "", jobs[i].errs);
	}
	printf("done ok=%d fail=%d bad=%d maxms=%llu errs=%s\n", ok, fail, bad,
	       (unsigned long long)(max_ns / 1000000), errs[0] ? errs : "-");
	fflush(stdout);
	free(jobs);
	free(th);
}

int main(int argc, char **argv)
{
	struct maru_handler *h;
	struct maru_config *cfg;
	bool mon = argc > 5 && !strcmp(argv[5], "monitor");
	char line[256];
	int threads, calls, inflight;
	size_t size;

	if (argc < 4) {
		fprintf(stderr,
			"usage: %s URL req|dealer TIMEOUT_MS "
			"[MAX_INFLIGHT]\n",
			argv[0]);
		return 2;
	}
	inflight = argc > 4 ? atoi(argv[4]) : 64;
	if (maru_config_new(&cfg) < 0 || maru_handler_new(cfg, &h) < 0)
		return 2;
	maru_config_free(cfg);
	if (maru__rpc_open(&rpc, h, argv[1], atoi(argv[3]),
			   !strcmp(argv[2], "dealer"), inflight) < 0) {
		printf("open failed\n");
		return 1;
	}
	if (mon) {
		if (maru__rpc_watch_start(&h->watch, h, maru__fence_lost,
					  maru__fence_tick, h) < 0)
			return 2;
		maru__rpc_set_watch(&rpc, &h->watch);
	}
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "call %d %d %zu", &threads, &calls, &size) ==
		    3)
			run(threads, calls, size);
		else if (!strncmp(line, "alarm", 5))
			printf("alarm=%u\n",
			       (unsigned)(atomic_load(&h->fence.alarm) &
					  MARU_ALARM_FLAGS));
		else if (!strncmp(line, "quit", 4))
			break;
		fflush(stdout);
	}
	if (mon) {
		maru__rpc_set_watch(&rpc, NULL);
		maru__rpc_watch_stop(&h->watch);
	}
	maru__rpc_close(&rpc);
	maru_handler_free(h);
	return 0;
}
