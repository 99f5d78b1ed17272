/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lend.c - the regions maru-agent lends, and its UCX worker (agent.h)
 *
 * A region is lent on its first ACCESS: the resource manager checks the
 * token (GET_ACCESS, the capability a local worker shows to map it), the
 * agent maps the region MAP_SHARED at the place GET_ACCESS names and
 * registers the mapping with UCX (ucp_mem_map), which the transfers use
 * (xfer.c: on RDMA NICs the rendezvous moves the bytes into and out of
 * it with no copy).  Later ACCESSes with the same token are answered from
 * the table, no request to the resource manager; another token for a lent
 * region is checked again.  One mapping and one registration per region,
 * however many clients.
 *
 * Revocation.  Every --recheck-ms the agent asks the resource manager
 * about each region it lends, with its token.  A region the resource
 * manager no longer knows with that token (freed, reaped with its dead
 * owner) is revoked at once: it leaves the table, so every transfer
 * naming it from then on is refused (xfer.c); its registration goes;
 * the mapping is replaced in place by private anonymous memory
 * (MAP_FIXED), so that a transfer accepted just before lands in memory
 * that is no longer the pool's and never faults; the range stays
 * reserved for --quarantine, longer than any transfer, then is unmapped.
 * The cost: a region freed is reachable for up to --recheck-ms, one
 * GET_ACCESS per lent region per period at the resource manager, and a
 * revoked region's address space (not memory) for --quarantine.
 *
 * UCX: one context (active messages and wakeup: no RMA feature, see
 * agent.h), one worker shared by the threads (UCS_THREAD_MODE_MULTI: the
 * control threads register memory while the progress thread runs), and
 * the progress thread, which runs the transfers; it sleeps on the
 * worker's event fd (ucp_worker_arm) between them, so an idle agent takes
 * no CPU.
 *
 * Context: lend_access from the control threads; lend_recheck from
 * main's tick.  @lock guards the table and UCX registrations, @rm_lock the
 * resource manager client; never both at once.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "rm_auth.h"

struct agent_region {
	struct agent_region *next;
	uint64_t region_id, token;
	uint64_t offset, length; /* as the resource manager said */
	uint8_t *addr;		 /* owns: the mapping */
	ucp_mem_h memh;		 /* NULL once revoked and not held */
	uint64_t revoked_ms;	 /* when it entered the quarantine (0: lent) */
	int held;		 /* transfers using the mapping and @memh */
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#define SPIN_NS 100000ull /* 100 us */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *progress_main(void *arg)
{
	struct agent *a = arg;
	struct pollfd p[2];
	ucs_status_t st;
	int efd = -1;

	if (ucp_worker_get_efd(a->worker, &efd) != UCS_OK)
		efd = -1;
	p[0] = (struct pollfd){.fd = efd, .events = POLLIN};
	p[1] = (struct pollfd){.fd = a->stop_fd, .events = POLLIN};
	for (;;) {
		/* a transfer is several messages each way (rendezvous): keep
		 * looking for SPIN_NS after the last one before sleeping */
		uint64_t idle_since = mono_ns();

		while (mono_ns() - idle_since < SPIN_NS)
			if (ucp_worker_progress(a->worker))
				idle_since = mono_ns();
		if (efd < 0) {
			/* no event fd: poll the worker every 50 us */
			if (poll(&p[1], 1, 0) > 0)
				break;
			usleep(50);
			continue;
		}
		st = ucp_worker_arm(a->worker);
		if (st == UCS_ERR_BUSY)
			continue; /* more came meanwhile */
		if (st != UCS_OK) {
			log_warn("UCX: ucp_worker_arm: %s",
				 ucs_status_string(st));
			usleep(1000);
			continue;
		}
		if (poll(p, 2, 1000) < 0 && errno != EINTR)
			usleep(1000);
		if (p[1].revents)
			break;
	}
	return NULL;
}

int lend_init(struct agent *a)
{
	ucp_worker_params_t wp = {0};
	ucp_params_t up = {0};
	ucp_config_t *uc;
	ucs_status_t st;
	int rc;

	pthread_mutex_init(&a->lock, NULL);
	pthread_mutex_init(&a->rm_lock, NULL);
	a->stop_fd = -1;
	rc = rm_client_init(&a->rm, a->cfg.rm_address, NULL, 5000);
	if (rc < 0) {
		log_err("bad --rm-address %s", a->cfg.rm_address);
		return rc;
	}
	/* a resource manager with --require-auth wants a key even for
	 * GET_ACCESS: MARU_RM_KEY_FILE, MARU_RM_READER_KEY_FILE or the
	 * default (none: fine for one without) */
	(void)rm_client_load_key(&a->rm, NULL);
	st = ucp_config_read(NULL, NULL, &uc);
	if (st != UCS_OK) {
		log_err("UCX: reading its configuration: %s",
			ucs_status_string(st));
		return -EIO;
	}
	if ((st = ucp_config_modify(uc, "NET_DEVICES", a->cfg.ucx_devices)) !=
	    UCS_OK) {
		log_err("UCX: --ucx-devices %s: %s", a->cfg.ucx_devices,
			ucs_status_string(st));
		ucp_config_release(uc);
		return -EINVAL;
	}
	if (a->cfg.ucx_tls &&
	    (st = ucp_config_modify(uc, "TLS", a->cfg.ucx_tls)) != UCS_OK) {
		log_err("UCX: --ucx-tls %s: %s", a->cfg.ucx_tls,
			ucs_status_string(st));
		ucp_config_release(uc);
		return -EINVAL;
	}
	up.field_mask =
		UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
	up.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
	up.mt_workers_shared = 1;
	st = ucp_init(&up, uc, &a->ucp);
	ucp_config_release(uc);
	if (st != UCS_OK) {
		log_err("UCX: ucp_init: %s", ucs_status_string(st));
		return -EIO;
	}
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_MULTI;
	st = ucp_worker_create(a->ucp, &wp, &a->worker);
	if (st != UCS_OK) {
		log_err("UCX: ucp_worker_create: %s", ucs_status_string(st));
		goto out_ctx;
	}
	st = ucp_worker_get_address(a->worker,
				    (ucp_address_t **)&a->worker_addr,
				    &a->worker_addr_len);
	if (st != UCS_OK || a->worker_addr_len > AGENT_BLOB_MAX) {
		log_err("UCX: the worker's address: %s",
			st != UCS_OK ? ucs_status_string(st) : "too long");
		goto out_worker;
	}
	if (xfer_init(a) < 0)
		goto out_addr;
	a->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (a->stop_fd < 0 ||
	    pthread_create(&a->progress, NULL, progress_main, a) != 0) {
		log_err("cannot start the UCX progress thread");
		goto out_addr;
	}
	a->progress_started = true;
	return 0;

out_addr:
	ucp_worker_release_address(a->worker, a->worker_addr);
	a->worker_addr = NULL;
out_worker:
	ucp_worker_destroy(a->worker);
	a->worker = NULL;
out_ctx:
	ucp_cleanup(a->ucp);
	a->ucp = NULL;
	return -EIO;
}

/* the registration of @r goes; its range stays mapped (@lock) */
static void unregister_locked(struct agent *a, struct agent_region *r)
{
	if (r->memh)
		ucp_mem_unmap(a->ucp, r->memh);
	r->memh = NULL;
}

/* revoke @r, unlinked from the table by the caller (@lock held); its
 * registration goes once no transfer holds it (lend_release) */
static void revoke_locked(struct agent *a, struct agent_region *r,
			  const char *why)
{
	void *p;

	if (!r->held)
		unregister_locked(a, r);
	p = mmap(r->addr, (size_t)r->length, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
		 0);
	if (p == MAP_FAILED)
		log_warn("region %" PRIu64 ": cannot replace its mapping (%s): "
			 "it stays mapped until the quarantine ends (no "
			 "transfer names it any more)",
			 r->region_id, strerror(errno));
	r->revoked_ms = mono_ms();
	r->next = a->revoked;
	a->revoked = r;
	agent_count(a, AGENT_ST_REGIONS, -1);
	agent_count(a, AGENT_ST_BYTES_MAPPED, -(int64_t)r->length);
	agent_count(a, AGENT_ST_REVOKED, 1);
	log_info("region %" PRIu64 ": revoked (%s)", r->region_id, why);
}

static void free_region(struct agent_region *r)
{
	if (r->addr)
		munmap(r->addr, (size_t)r->length);
	free(r);
}

void lend_stop(struct agent *a)
{
	uint64_t one = 1;

	if (!a->progress_started)
		return;
	if (write(a->stop_fd, &one, sizeof(one)) < 0)
		log_warn("stopping the progress thread: %s", strerror(errno));
	pthread_join(a->progress, NULL);
	a->progress_started = false;
}

static struct agent_region *find_locked(struct agent *a, uint64_t rid,
					struct agent_region ***pp)
{
	struct agent_region **p;

	for (p = &a->regions; *p; p = &(*p)->next)
		if ((*p)->region_id == rid) {
			if (pp)
				*pp = p;
			return *p;
		}
	return NULL;
}

/*
 * GET_ACCESS for @h.  Return: 0 (*@acc), -EACCES when the resource
 * manager answered no (a bad token, an unknown region), -EAGAIN when it
 * could not be asked.
 */
static int rm_check(struct agent *a, const struct rm_handle *h,
		    struct rm_access_result *acc, int *err)
{
	int rc;

	pthread_mutex_lock(&a->rm_lock);
	rc = rm_client_get_access(&a->rm, h, acc);
	if (rc < 0 && !a->rm.answered)
		rc = rm_client_get_access(&a->rm, h, acc); /* reconnected */
	*err = rc;
	/* only GET_ACCESS's own answers say no: "no such region" (status
	 * -ENOENT) and "invalid auth token"; anything else (a transport
	 * error, a reply we could not read, "authentication required" or a
	 * rejected key of ours) cannot be told */
	if (rc < 0)
		rc = a->rm.answered && (rc == -ENOENT ||
					(rc == -EACCES &&
					 !strcmp(a->rm.error,
						 "invalid auth token")))
			     ? -EACCES
			     : -EAGAIN;
	pthread_mutex_unlock(&a->rm_lock);
	return rc;
}

/* map and register region @q at @acc (no lock held). Return: 0 or -errno */
static int lend_new(struct agent *a, const struct agent_access_req *q,
		    const struct rm_access_result *acc,
		    struct agent_region **out, const char **why)
{
	ucp_mem_map_params_t mp = {0};
	struct agent_region *r;
	ucs_status_t st;
	int fd;

	*why = "out of memory";
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->region_id = q->region_id;
	r->token = q->token;
	r->offset = acc->offset;
	r->length = acc->length;
	fd = open(acc->path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		log_err("region %" PRIu64 ": open %s: %s", q->region_id,
			acc->path, strerror(errno));
		*why = "the agent cannot open the pool";
		free(r);
		return -EIO;
	}
	r->addr = mmap(NULL, (size_t)r->length, PROT_READ | PROT_WRITE,
		       MAP_SHARED, fd, (off_t)r->offset);
	close(fd);
	if (r->addr == MAP_FAILED) {
		log_err("region %" PRIu64 ": mmap %s at %" PRIu64 ": %s",
			q->region_id, acc->path, r->offset, strerror(errno));
		r->addr = NULL;
		free(r);
		*why = "the agent cannot map the region";
		return -EIO;
	}
	mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
			UCP_MEM_MAP_PARAM_FIELD_LENGTH;
	mp.address = r->addr;
	mp.length = (size_t)r->length;
	st = ucp_mem_map(a->ucp, &mp, &r->memh);
	if (st != UCS_OK) {
		log_err("region %" PRIu64 ": UCX registration: %s",
			q->region_id, ucs_status_string(st));
		pthread_mutex_lock(&a->lock);
		unregister_locked(a, r);
		pthread_mutex_unlock(&a->lock);
		free_region(r);
		*why = "UCX cannot register the region";
		return -EIO;
	}
	*out = r;
	return 0;
}

struct agent_region *lend_hold_locked(struct agent *a, uint64_t rid,
				      uint64_t token, uint8_t **addr,
				      uint64_t *len, ucp_mem_h *memh)
{
	struct agent_region *r = find_locked(a, rid, NULL);

	if (!r || r->token != token)
		return NULL;
	*addr = r->addr;
	*len = r->length;
	*memh = r->memh;
	r->held++;
	return r;
}

void lend_release_locked(struct agent *a, struct agent_region *r)
{
	if (!--r->held && r->revoked_ms)
		unregister_locked(a, r);
}

void lend_release(struct agent *a, struct agent_region *r)
{
	pthread_mutex_lock(&a->lock);
	lend_release_locked(a, r);
	pthread_mutex_unlock(&a->lock);
}

int lend_access(struct agent *a, const struct agent_access_req *q,
		const char **why)
{
	struct rm_handle h = {q->region_id, q->offset, q->length, q->token};
	struct agent_region *r, *nr = NULL, **pp;
	struct rm_access_result acc;
	int rc, err;

	pthread_mutex_lock(&a->lock);
	r = find_locked(a, q->region_id, NULL);
	if (r && r->token == q->token && r->offset == q->offset &&
	    r->length == q->length) {
		pthread_mutex_unlock(&a->lock);
		return 0;
	}
	pthread_mutex_unlock(&a->lock);

	rc = rm_check(a, &h, &acc, &err);
	if (rc == -EAGAIN) {
		*why = "the resource manager cannot be asked";
		log_warn("region %" PRIu64 ": GET_ACCESS at %s: %s",
			 q->region_id, a->cfg.rm_address, strerror(-err));
		return rc;
	}
	if (rc < 0) {
		*why = err == -ENOENT ? "no such region"
				      : "the region's token is not valid";
		return -EACCES;
	}
	if (acc.offset != q->offset || acc.length != q->length) {
		*why = "offset and length are not the region's";
		return -EINVAL;
	}
	rc = lend_new(a, q, &acc, &nr, why);
	if (rc < 0)
		return rc;

	pthread_mutex_lock(&a->lock);
	r = find_locked(a, q->region_id, &pp);
	if (r && r->token == q->token && r->offset == nr->offset &&
	    r->length == nr->length) {
		/* another connection lent it meanwhile: theirs */
		unregister_locked(a, nr);
		pthread_mutex_unlock(&a->lock);
		free_region(nr);
		return 0;
	}
	if (r) {
		/* the region has a new token: the old one is void */
		*pp = r->next;
		revoke_locked(a, r, "its token changed");
	}
	nr->next = a->regions;
	a->regions = nr;
	agent_count(a, AGENT_ST_REGIONS, 1);
	agent_count(a, AGENT_ST_BYTES_MAPPED, (int64_t)nr->length);
	pthread_mutex_unlock(&a->lock);
	log_info("region %" PRIu64 ": lent (%" PRIu64 " bytes of %s)",
		 q->region_id, nr->length, acc.path);
	return 0;
}

void lend_recheck(struct agent *a)
{
	struct rm_access_result acc;
	struct agent_region *r, **pp;
	struct rm_handle *hs = NULL;
	size_t n = 0, i, cap = 0;
	uint64_t now = mono_ms();
	bool *gone;
	int err;

	pthread_mutex_lock(&a->lock);
	for (r = a->regions; r; r = r->next)
		cap++;
	hs = cap ? calloc(cap, sizeof(*hs)) : NULL;
	for (r = a->regions; r && hs; r = r->next)
		hs[n++] = (struct rm_handle){r->region_id, r->offset, r->length,
					     r->token};
	/* quarantined ranges that have served their time */
	for (pp = &a->revoked; *pp;) {
		r = *pp;
		if (now - r->revoked_ms >=
		    (uint64_t)a->cfg.quarantine_s * 1000) {
			*pp = r->next;
			free_region(r);
		} else {
			pp = &r->next;
		}
	}
	pthread_mutex_unlock(&a->lock);
	if (!n)
		goto out;
	gone = calloc(n, sizeof(*gone));
	if (!gone)
		goto out;
	for (i = 0; i < n; i++)
		gone[i] = rm_check(a, &hs[i], &acc, &err) == -EACCES;
	pthread_mutex_lock(&a->lock);
	for (i = 0; i < n; i++) {
		if (!gone[i])
			continue;
		r = find_locked(a, hs[i].region_id, &pp);
		if (r && r->token == hs[i].auth_token) {
			*pp = r->next;
			revoke_locked(a, r,
				      "the resource manager no longer "
				      "grants it with its token");
		}
	}
	pthread_mutex_unlock(&a->lock);
	free(gone);
out:
	free(hs);
}
