/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rm_server.c - the resource manager's connection handling on
 * arbitrary byte streams
 *
 * The decoders have their own targets; this one drives everything behind
 * them: the per-connection state machine (partial headers and payloads,
 * pipelining, the request budget, error replies that close and drain),
 * client_id pinning, the idempotency cache, the handlers, the allocator
 * and the WAL write path.  One daemon state (an emulated 64 MiB pool and a
 * state directory in a temporary directory under /dev/shm, made by the
 * first input and kept) listens on a loopback port, exactly as main()
 * sets it up.  Each input is one TCP connection: all its bytes are sent,
 * the write side is shut, and the event loop runs until the daemon has
 * closed the connection, while the client reads every response.
 *
 * Checks: no crash, leak or memory error (sanitizers); the daemon closes
 * the connection (no hang on any input); the response stream is whole
 * messages with a valid header and a response type; the pool invariants
 * hold and the free size matches the regions.  Regions are freed again
 * whenever 16 are live, so allocations keep succeeding.
 */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "rm.h"
#include "fuzz.h"

#define MAX_LOOPS 2000 /* event-loop turns before we call it a hang */

static struct rm *rm;
static char dir[64], state_dir[96], pool_path[96];
static const char *pools[1] = {pool_path};
static struct sockaddr_in addr;

static void before_sleep(struct evloop *el, void *arg)
{
	state_maybe_checkpoint(arg);
}

static void remove_dir(const char *path)
{
	struct dirent *e;
	char p[512];
	DIR *d = opendir(path);

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		if (unlink(p) < 0 && errno == EISDIR)
			remove_dir(p);
	}
	closedir(d);
	rmdir(path);
}

static void teardown(void)
{
	rm_close(rm);
	free(rm);
	rm = NULL;
	remove_dir(dir);
}

/* The daemon state of main(), minus signals and the cron timer. */
static void setup(void)
{
	socklen_t len = sizeof(addr);

	log_init("fuzz_rm_server", LOG_CRIT);
	strcpy(dir, "/dev/shm/fuzz_rm_server.XXXXXX");
	CHECK(mkdtemp(dir));
	snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
	snprintf(pool_path, sizeof(pool_path), "%s/pool", dir);
	rm = calloc(1, sizeof(*rm));
	CHECK(rm);
	rm->cfg.host = "127.0.0.1";
	rm->cfg.port = 0; /* any free port */
	rm->cfg.state_dir = state_dir;
	rm->cfg.pools.v = pools;
	rm->cfg.pools.n = 1;
	rm->cfg.emulate_size = 64ull << 20;
	rm->cfg.grace_period = 30;
	rm->cfg.max_clients = 8;
	rm->cfg.msg_timeout = 30;
	rm->cfg.checkpoint_ops = 100;
	/* the fuzzer cannot prove it knows the key: without this no input
	 * would reach ALLOC/FREE; AUTH_REQ is still served (step 1 answers,
	 * step 2 is refused) */
	rm->cfg.no_client_auth = true;
	rm_init(rm);
	CHECK(evloop_new(&rm->el) == 0);
	CHECK(rm_open(rm) == 0);
	CHECK(server_listen(rm) == 0);
	evloop_set_before_sleep(rm->el, before_sleep, rm);
	CHECK(getsockname(rm->listen_fd, (struct sockaddr *)&addr, &len) == 0);
	atexit(teardown);
}

/* The whole stream the daemon sent: complete, well-formed responses. */
static void check_responses(const uint8_t *p, size_t len)
{
	struct rm_hdr h;
	size_t off = 0;

	while (off < len) {
		CHECK(rm_hdr_decode(p + off, len - off, 1u << 20, &h) ==
		      RM_HDR_SIZE);
		CHECK(h.type == RM_ALLOC_RESP || h.type == RM_FREE_RESP ||
		      h.type == RM_STATS_RESP || h.type == RM_GET_ACCESS_RESP ||
		      h.type == RM_AUTH_RESP || h.type == RM_ERROR_RESP ||
		      h.type == RM_COUNTERS_RESP || h.type == RM_OWNERS_RESP ||
		      h.type == RM_RELEASE_RESP);
		CHECK(h.payload_len <= len - off - RM_HDR_SIZE);
		if (h.type == RM_COUNTERS_RESP) {
			/* what the daemon says, its own decoder reads whole */
			struct rm_counters_resp kr;
			struct rm_counter kv;
			size_t cur = 0;
			uint32_t n = 0;

			CHECK(rm_decode_counters_resp(p + off + RM_HDR_SIZE,
						      h.payload_len, &kr) == 0);
			while (rm_counters_next(&kr, &cur, &kv) == 1)
				n++;
			CHECK(n == kr.num && cur == kr.records_len);
		}
		if (h.type == RM_OWNERS_RESP) {
			struct rm_owners_resp orr;
			struct rm_owner o;
			size_t cur = 0;
			uint32_t n = 0;

			CHECK(rm_decode_owners_resp(p + off + RM_HDR_SIZE,
						    h.payload_len, &orr) == 0);
			while (rm_owners_next(&orr, &cur, &o) == 1)
				n++;
			CHECK(n == orr.num && cur == orr.records_len);
		}
		if (h.type == RM_RELEASE_RESP)
			CHECK(h.payload_len == 16);
		off += RM_HDR_SIZE + h.payload_len;
	}
}

static void free_one(struct rm *r, struct region *reg, void *arg)
{
	CHECK(region_free(r, reg, 0, "fuzz") == 0);
}

static void check_state(void)
{
	struct pool *p = rm->pools[0];

	CHECK(rm->nconns == 0);
	CHECK(pool_check(p));
	CHECK(p->nallocs == rm->nregions);
	if (rm->nregions >= 16) {
		region_for_each(rm, free_one, NULL);
		CHECK(p->free_size == p->total_size);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t resp[1u << 20];
	size_t got = 0, off = 0;
	bool closed = false;
	ssize_t n;
	int fd, i;

	if (!rm)
		setup();
	if (size > 65536)
		size = 65536; /* must fit the socket buffers: sent before the
			       * loop runs */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0);
	CHECK(connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0);
	/* the daemon may close early (an error reply): stop sending then */
	while (off < size) {
		n = send(fd, data + off, size - off, MSG_NOSIGNAL);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	shutdown(fd, SHUT_WR);
	for (i = 0; i < MAX_LOOPS && !closed; i++) {
		CHECK(evloop_run_once(rm->el, 1) >= 0);
		for (;;) {
			n = recv(fd, resp + got, sizeof(resp) - got,
				 MSG_DONTWAIT);
			if (n > 0) {
				got += (size_t)n;
				CHECK(got < sizeof(resp));
				continue;
			}
			closed = n == 0 || (errno != EAGAIN && errno != EINTR);
			break;
		}
	}
	CHECK(closed); /* the daemon never keeps a finished connection */
	close(fd);
	/* the daemon side goes away in the same turn it saw EOF */
	for (i = 0; i < MAX_LOOPS && rm->nconns; i++)
		CHECK(evloop_run_once(rm->el, 1) >= 0);
	check_responses(resp, got);
	check_state();
	return 0;
}
