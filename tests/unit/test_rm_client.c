/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_client.c - the blocking RM client against a scripted fake server
 *
 * A thread accepts connections on a loopback port and answers each request
 * according to a script step: reply normally, close without replying (the
 * client must reconnect and resend the same bytes), send an ERROR_RESP, or
 * stay silent (the client must time out).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "rm_client.h"

enum step { REPLY, DROP, ERROR, SILENT };

struct fake {
	int lfd;
	uint16_t port;
	enum step script[8];
	int nsteps;
	uint64_t seen_request_ids[8];
	uint16_t seen_types[8];
	int nseen;
	pthread_t thr;
};

static int read_n(int fd, uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = read(fd, p, n);

		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static void reply(int fd, uint16_t type, const uint8_t *payload, size_t len)
{
	struct rm_alloc_resp ar = {0};
	struct rm_get_access_resp gr = {0};
	struct rm_pool_stat ps = {RM_DEV_DAX, 100, 60, 2 << 20,
				  rm_str_from("/dev/shm/p")};
	struct buf b = BUF_INIT;
	size_t start;

	switch (type) {
	case RM_ALLOC_REQ:
		ar.handle.region_id = 5;
		ar.handle.offset = 2 << 20;
		ar.handle.length = 4 << 20;
		ar.handle.auth_token = ~0ull;
		ar.requested_size = get_u64le(payload);
		ar.path = rm_str_from("/dev/shm/p");
		ar.uuid = rm_str_from("abc");
		rm_encode_alloc_resp(&b, &ar);
		break;
	case RM_FREE_REQ:
		rm_encode_free_resp(&b, get_u64le(payload) == 5 ? 0 : -ENOENT);
		break;
	case RM_GET_ACCESS_REQ:
		gr.path = rm_str_from("/dev/dax0.0");
		gr.offset = get_u64le(payload + 8);
		gr.length = get_u64le(payload + 16);
		rm_encode_get_access_resp(&b, &gr);
		break;
	case RM_STATS_REQ:
		rm_encode_stats_begin(&b, &start);
		rm_encode_stats_add(&b, &ps);
		rm_encode_stats_add(&b, &ps);
		rm_encode_stats_end(&b, start, 2);
		break;
	}
	(void)len;
	if (write(fd, b.data, b.len) < 0)
		fail();
	buf_free(&b);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int step = 0, fd = -1;

	while (step < f->nsteps) {
		uint8_t hb[RM_HDR_SIZE], payload[RM_MAX_PAYLOAD];
		struct rm_alloc_req ar;
		struct rm_free_req fr;
		struct rm_hdr h;
		const char *why;
		struct buf b = BUF_INIT;

		if (fd < 0)
			fd = accept(f->lfd, NULL, NULL);
		if (read_n(fd, hb, sizeof(hb)) < 0) {
			close(fd);
			fd = -1;
			continue;
		}
		rm_hdr_decode(hb, sizeof(hb), RM_MAX_PAYLOAD, &h);
		read_n(fd, payload, h.payload_len);
		f->seen_types[f->nseen] = h.type;
		if (h.type == RM_ALLOC_REQ &&
		    rm_decode_alloc_req(payload, h.payload_len, &ar, &why) == 0)
			f->seen_request_ids[f->nseen] = ar.request_id;
		if (h.type == RM_FREE_REQ &&
		    rm_decode_free_req(payload, h.payload_len, &fr, &why) == 0)
			f->seen_request_ids[f->nseen] = fr.request_id;
		f->nseen++;
		switch (f->script[step++]) {
		case REPLY:
			reply(fd, h.type, payload, h.payload_len);
			break;
		case DROP:
			close(fd);
			fd = -1;
			break;
		case ERROR:
			rm_encode_error_resp(&b, -EACCES, "invalid authToken");
			if (write(fd, b.data, b.len) < 0)
				fail();
			buf_free(&b);
			break;
		case SILENT:
			break;
		}
	}
	/* linger until the client hangs up, so a SILENT step times out */
	if (fd >= 0) {
		uint8_t x;

		while (read(fd, &x, 1) > 0)
			;
		close(fd);
	}
	return NULL;
}

static void fake_start(struct fake *f, int nsteps, const enum step *script)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);

	memset(f, 0, sizeof(*f));
	f->nsteps = nsteps;
	memcpy(f->script, script, sizeof(*script) * nsteps);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	getsockname(f->lfd, (struct sockaddr *)&a, &len);
	f->port = ntohs(a.sin_port);
	pthread_create(&f->thr, NULL, fake_main, f);
}

static void fake_stop(struct fake *f, struct rm_client *c)
{
	rm_client_destroy(c);
	pthread_join(f->thr, NULL);
	close(f->lfd);
}

static void client_for(struct fake *f, struct rm_client *c, int timeout_ms)
{
	char addr[64];

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", f->port);
	assert_int_equal(rm_client_init(c, addr, "test:1", timeout_ms), 0);
}

static void test_init(void **state)
{
	struct rm_client c;
	char want[160];

	assert_int_equal(rm_client_init(&c, "nohost", NULL, 0), -EINVAL);
	rm_client_destroy(&c);
	assert_int_equal(rm_client_init(&c, "127.0.0.1:9850", NULL, 0), 0);
	snprintf(want, sizeof(want), ":%d", (int)getpid());
	assert_non_null(strstr(c.client_id, want));
	assert_false(rm_client_connected(&c));
	rm_client_destroy(&c);
}

static int count_pool(const struct rm_pool_stat *ps, void *arg)
{
	(*(int *)arg)++;
	return ps->total_size == 100 ? 0 : -1;
}

static void test_alloc_free_access_stats(void **state)
{
	static const enum step s[] = {REPLY, REPLY, REPLY, REPLY, REPLY};
	struct rm_alloc_result ar;
	struct rm_access_result acc;
	struct rm_client c;
	struct fake f;
	int pools = 0;

	fake_start(&f, 5, s);
	client_for(&f, &c, 10000);
	assert_int_equal(rm_client_alloc(&c, 1000, NULL, &ar), 0);
	assert_int_equal(ar.handle.region_id, 5);
	assert_int_equal(ar.handle.auth_token, ~0ull);
	assert_int_equal(ar.requested_size, 1000);
	assert_string_equal(ar.path, "/dev/shm/p");
	assert_string_equal(ar.uuid, "abc");
	assert_int_equal(rm_client_get_access(&c, &ar.handle, &acc), 0);
	assert_string_equal(acc.path, "/dev/dax0.0");
	assert_int_equal(acc.offset, 2 << 20);
	assert_int_equal(acc.length, 4 << 20);
	assert_int_equal(rm_client_free(&c, &ar.handle), 0);
	ar.handle.region_id = 6;
	assert_int_equal(rm_client_free(&c, &ar.handle), -ENOENT);
	assert_int_equal(rm_client_stats(&c, count_pool, &pools), 0);
	assert_int_equal(pools, 2);
	/* request ids count up from 1 over ALLOC and FREE */
	assert_int_equal(f.seen_request_ids[0], 1);
	assert_int_equal(f.seen_request_ids[2], 2);
	assert_int_equal(f.seen_request_ids[3], 3);
	fake_stop(&f, &c);
}

static void test_retry_same_request_id(void **state)
{
	static const enum step s[] = {DROP, REPLY};
	struct rm_alloc_result ar;
	struct rm_client c;
	struct fake f;

	fake_start(&f, 2, s);
	client_for(&f, &c, 10000);
	assert_int_equal(rm_client_alloc(&c, 1, "", &ar), 0);
	assert_int_equal(f.nseen, 2);
	assert_int_equal(f.seen_request_ids[0], f.seen_request_ids[1]);
	fake_stop(&f, &c);
}

static void test_error_resp(void **state)
{
	static const enum step s[] = {ERROR};
	struct rm_access_result acc;
	struct rm_handle h = {1, 2, 3, 4};
	struct rm_client c;
	struct fake f;

	fake_start(&f, 1, s);
	client_for(&f, &c, 10000);
	assert_int_equal(rm_client_get_access(&c, &h, &acc), -EACCES);
	assert_string_equal(c.error, "invalid authToken");
	assert_true(rm_client_connected(&c));
	fake_stop(&f, &c);
}

static void test_timeout(void **state)
{
	static const enum step s[] = {SILENT, SILENT};
	struct rm_alloc_result ar;
	struct rm_client c;
	struct fake f;

	fake_start(&f, 2, s);
	client_for(&f, &c, 200);
	assert_int_equal(rm_client_alloc(&c, 1, NULL, &ar), -ETIMEDOUT);
	assert_false(rm_client_connected(&c));
	fake_stop(&f, &c);
}

static void test_refused(void **state)
{
	struct rm_alloc_result ar;
	struct rm_client c;
	struct fake f;
	static const enum step s[] = {REPLY};
	char addr[64];

	/* a port that was just free: bind, note it, close */
	fake_start(&f, 1, s);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", f.port);
	assert_int_equal(rm_probe(addr, 500), 0);
	/* let the fake thread finish its one step, then close the port (a
	 * generous timeout: the thread may wait to be scheduled on a loaded
	 * machine; refusals below are immediate anyway) */
	client_for(&f, &c, 10000);
	assert_int_equal(rm_client_alloc(&c, 1, NULL, &ar), 0);
	fake_stop(&f, &c);
	assert_int_equal(rm_probe(addr, 500), -ECONNREFUSED);
	assert_int_equal(rm_client_init(&c, addr, NULL, 500), 0);
	assert_int_equal(rm_client_alloc(&c, 1, NULL, &ar), -ECONNREFUSED);
	rm_client_destroy(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init),
		cmocka_unit_test(test_alloc_free_access_stats),
		cmocka_unit_test(test_retry_same_request_id),
		cmocka_unit_test(test_error_resp),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
