/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ucx_poke - a hostile UCX peer of maru-agent, for test_remote.py
 *
 * It connects an endpoint to the agent's worker address (from HELLO) and
 * tries, with nothing the agent issued or with what it issued misused:
 *
 *   ucx_poke WORKER_HEX rma-get ADDR LEN
 *   ucx_poke WORKER_HEX rma-put ADDR HEXBYTES
 *       one-sided access to any address of the agent with a remote key
 *       packed for our own memory: UCX then emulates it with messages,
 *       which a target created with UCP_FEATURE_RMA would serve unchecked
 *   ucx_poke WORKER_HEX am-put SESSION_HEX REGION OFFSET HEXBYTES
 *   ucx_poke WORKER_HEX am-get SESSION_HEX REGION OFFSET LEN
 *       the agent's own transfers, with whatever session, region and
 *       range the test gives
 *
 * It prints one line: "status <UCX status or -errno> [bytes <hex>]", or
 * "status timeout" when nothing answered within 3 s; exit 0 unless the
 * arguments or UCX's set-up are wrong.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ucp/api/ucp.h>

#include "agent_proto.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static size_t unhex(const char *s, unsigned char *o, size_t cap)
{
	size_t n = strlen(s) / 2, i;
	unsigned v;

	for (i = 0; i < n && i < cap; i++) {
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return 0;
		o[i] = (unsigned char)v;
	}
	return i;
}

static void hex(const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		printf("%02x", p[i]);
}

static ucp_worker_h worker;
static int got, got_status;
static unsigned char got_data[65536];
static size_t got_len;

/* wait for @req for up to 3 s. Return: status, or UCS_ERR_TIMED_OUT */
static ucs_status_t wait_req(void *req)
{
	uint64_t end = now_ms() + 3000;
	ucs_status_t st;

	if (!req)
		return UCS_OK;
	if (UCS_PTR_IS_ERR(req))
		return UCS_PTR_STATUS(req);
	while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
		ucp_worker_progress(worker);
		if (now_ms() > end)
			return UCS_ERR_TIMED_OUT;
	}
	ucp_request_free(req);
	return st;
}

static ucs_status_t on_reply(void *arg, const void *header, size_t hlen,
			     void *data, size_t len,
			     const ucp_am_recv_param_t *param)
{
	struct agent_am_rep rep;

	(void)arg;
	if (agent_am_rep_decode(header, hlen, &rep) < 0)
		return UCS_OK;
	got = 1;
	got_status = rep.status;
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
	    len <= sizeof(got_data)) {
		memcpy(got_data, data, len);
		got_len = len;
	}
	return UCS_OK;
}

int main(int argc, char **argv)
{
	static unsigned char addr[65536], buf[65536];
	ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES,
			   .features = UCP_FEATURE_RMA | UCP_FEATURE_AM};
	ucp_worker_params_t wp = {.field_mask =
					  UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	ucp_am_handler_param_t ah = {.field_mask =
					     UCP_AM_HANDLER_PARAM_FIELD_ID |
					     UCP_AM_HANDLER_PARAM_FIELD_CB,
				     .cb = on_reply};
	ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS};
	ucp_request_param_t p = {0};
	ucp_context_h ctx;
	ucp_config_t *cfg;
	ucp_ep_h e;
	ucs_status_t st;
	uint64_t end;

	if (argc < 5 || !unhex(argv[1], addr, sizeof(addr))) {
		fprintf(stderr, "usage: see the head of ucx_poke.c\n");
		return 2;
	}
	if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK ||
	    ucp_init(&up, cfg, &ctx) != UCS_OK ||
	    ucp_worker_create(ctx, &wp, &worker) != UCS_OK)
		return 1;
	ucp_config_release(cfg);
	ah.id = AGENT_AM_ACK;
	ucp_worker_set_am_recv_handler(worker, &ah);
	ah.id = AGENT_AM_DATA;
	ucp_worker_set_am_recv_handler(worker, &ah);
	ep.address = (const ucp_address_t *)addr;
	if (ucp_ep_create(worker, &ep, &e) != UCS_OK)
		return 1;

	if (!strcmp(argv[2], "rma-get") || !strcmp(argv[2], "rma-put")) {
		static unsigned char mine[4096];
		ucp_mem_map_params_t mp = {
			.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
				      UCP_MEM_MAP_PARAM_FIELD_LENGTH,
			.address = mine,
			.length = sizeof(mine)};
		uint64_t ra = strtoull(argv[3], NULL, 0);
		ucp_mem_h mh;
		ucp_rkey_h rk;
		void *kb;
		size_t kl, n;

		if (ucp_mem_map(ctx, &mp, &mh) != UCS_OK ||
		    ucp_rkey_pack(ctx, mh, &kb, &kl) != UCS_OK ||
		    ucp_ep_rkey_unpack(e, kb, &rk) != UCS_OK)
			return 1;
		if (argv[2][4] == 'g') {
			n = (size_t)atoi(argv[4]);
			if (n > sizeof(buf))
				return 2;
			st = wait_req(ucp_get_nbx(e, buf, n, ra, rk, &p));
			printf("status %s", ucs_status_string(st));
			if (st == UCS_OK) {
				printf(" bytes ");
				hex(buf, n);
			}
		} else {
			n = unhex(argv[4], buf, sizeof(buf));
			st = wait_req(ucp_put_nbx(e, buf, n, ra, rk, &p));
			if (st == UCS_OK)
				st = wait_req(ucp_ep_flush_nbx(e, &p));
			printf("status %s", ucs_status_string(st));
		}
		printf("\n");
		fflush(stdout);
		return 0; /* (no clean close: the endpoint may be stuck) */
	}
	if ((!strcmp(argv[2], "am-put") || !strcmp(argv[2], "am-get")) &&
	    argc == 7) {
		struct agent_am_req q = {0};
		uint8_t hdr[AGENT_AM_REQ_MAX];
		size_t hlen;
		int put = argv[2][3] == 'p';
		size_t n;

		unhex(argv[3], q.session, sizeof(q.session));
		q.region_id = strtoull(argv[4], NULL, 0);
		q.offset = strtoull(argv[5], NULL, 0);
		if (put)
			n = unhex(argv[6], buf, sizeof(buf));
		else
			n = (size_t)strtoull(argv[6], NULL, 0);
		q.length = n;
		q.seq = 7;
		hlen = agent_am_req_encode(&q, hdr);
		p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
		p.flags = UCP_AM_SEND_FLAG_REPLY;
		st = wait_req(ucp_am_send_nbx(
			e, put ? AGENT_AM_PUT : AGENT_AM_GET, hdr, hlen,
			put ? buf : NULL, put ? n : 0, &p));
		end = now_ms() + 3000;
		while (!got && now_ms() < end)
			ucp_worker_progress(worker);
		if (!got)
			printf("status timeout\n");
		else if (got_status)
			printf("status %d\n", got_status);
		else {
			printf("status 0");
			if (!put) {
				printf(" bytes ");
				hex(got_data, got_len);
			}
			printf("\n");
		}
		fflush(stdout);
		(void)st;
		return 0;
	}
	fprintf(stderr, "usage: see the head of ucx_poke.c\n");
	return 2;
}
