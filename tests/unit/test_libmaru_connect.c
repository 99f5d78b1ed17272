/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_libmaru_connect.c - maru_handler_connect()'s failures and
 * maru_handler_connect_error(), through the public API only
 *
 * The peers are real sockets on 127.0.0.1: a bound port that does not
 * listen (refused), a listener whose thread answers an HTTP status line and
 * closes, and a listener nobody accepts on (the kernel completes the TCP
 * handshake; nothing is ever written).  Each failure must come back with
 * its own errno (refused is -ECONNREFUSED: the connect was not retried
 * until the timeout, which would give -ETIMEDOUT), one line naming the
 * address and the cause, and exactly one LOG_ERR line through the log
 * function -- also kept when the log priority is silent.
 *
 * Raw calls (maru_handler_call()) retry a refused connect until their
 * deadline, unless connect_retry is off: then one attempt, its own errno
 * at once and its cause in maru_handler_last_error().
 */
#include <maru/maru.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

struct sink {
	int errors;	/* LOG_ERR (or worse) lines */
	char last[512]; /* the last of them */
};

static void log_fn(void *arg, int prio, const char *file, int line,
		   const char *func, const char *msg)
{
	struct sink *s = arg;

	(void)file;
	(void)line;
	(void)func;
	if (prio <= LOG_ERR) {
		s->errors++;
		snprintf(s->last, sizeof(s->last), "%s", msg);
	}
}

/* a TCP socket bound to 127.0.0.1:0, listening when @backlog > 0 */
static int tcp_socket(int backlog, int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	if (backlog)
		assert_int_equal(listen(fd, backlog), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static struct maru_handler *handler(int port, int timeout_ms, struct sink *s,
				    int prio)
{
	struct maru_config *cfg;
	struct maru_handler *h;
	char url[64];

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	assert_int_equal(maru_config_new(&cfg), 0);
	assert_int_equal(maru_config_set_server_url(cfg, url), 0);
	assert_int_equal(maru_config_set_timeout_ms(cfg, timeout_ms), 0);
	assert_int_equal(maru_handler_new(cfg, &h), 0);
	maru_config_free(cfg);
	maru_handler_set_log_fn(h, log_fn, s);
	maru_handler_set_log_priority(h, prio);
	assert_string_equal(maru_handler_connect_error(h), "");
	return h;
}

/* @h's cause names @port and has @what; the log had it once at LOG_ERR
 * (or not at all when @silent) */
static void check_cause(struct maru_handler *h, int port, const char *what,
			const struct sink *s, bool silent)
{
	const char *e = maru_handler_connect_error(h);
	char url[64];

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	if (!strstr(e, url) || !strstr(e, what))
		fail_msg("cause '%s' lacks '%s' or '%s'", e, url, what);
	assert_null(strchr(e, '\n'));
	if (silent) {
		assert_int_equal(s->errors, 0);
	} else {
		assert_int_equal(s->errors, 1);
		assert_string_equal(s->last, e);
	}
}

static void test_refused(void **state)
{
	struct sink s = {0};
	int port, fd = tcp_socket(0, &port); /* bound, not listening */
	struct maru_handler *h = handler(port, 10000, &s, LOG_DEBUG);

	assert_int_equal(maru_handler_connect(h), -ECONNREFUSED);
	check_cause(h, port, "connection refused", &s, false);
	assert_false(maru_handler_is_connected(h));
	/* again: the same, the handler may be connected again */
	s.errors = 0;
	assert_int_equal(maru_handler_connect(h), -ECONNREFUSED);
	check_cause(h, port, "connection refused", &s, false);
	maru_handler_free(h);
	close(fd);
	(void)state;
}

static void test_refused_silent(void **state)
{
	struct sink s = {0};
	int port, fd = tcp_socket(0, &port);
	struct maru_handler *h = handler(port, 10000, &s, -1);

	assert_int_equal(maru_handler_connect(h), -ECONNREFUSED);
	check_cause(h, port, "connection refused", &s, true);
	maru_handler_free(h);
	close(fd);
	(void)state;
}

static void *http_peer(void *arg)
{
	static const char resp[] = "HTTP/1.0 200 OK\r\n\r\n";
	int lfd = *(int *)arg, c;

	c = accept(lfd, NULL, NULL);
	if (c >= 0) {
		if (write(c, resp, sizeof(resp) - 1) < 0) {
			/* the test then fails on the message */
		}
		close(c);
	}
	return NULL;
}

static void test_http_peer(void **state)
{
	struct sink s = {0};
	int port, fd = tcp_socket(4, &port);
	struct maru_handler *h = handler(port, 10000, &s, LOG_ERR);
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, http_peer, &fd), 0);
	assert_int_equal(maru_handler_connect(h), -EPROTO);
	pthread_join(t, NULL);
	check_cause(h, port,
		    "does not speak the Maru metadata protocol "
		    "(ZMTP greeting expected, got \"HTTP/1.0 200 OK\")",
		    &s, false);
	maru_handler_free(h);
	close(fd);
	(void)state;
}

static void test_silent_peer(void **state)
{
	struct sink s = {0};
	int port, fd = tcp_socket(4, &port); /* never accepted, never written */
	struct maru_handler *h = handler(port, 200, &s, LOG_WARNING);

	assert_int_equal(maru_handler_connect(h), -ETIMEDOUT);
	check_cause(h, port, "sent no ZMTP greeting within 200 ms", &s, false);
	maru_handler_free(h);
	close(fd);
	(void)state;
}

static void test_closed_handler(void **state)
{
	struct sink s = {0};
	int port, fd = tcp_socket(0, &port);
	struct maru_handler *h = handler(port, 1000, &s, LOG_ERR);

	maru_handler_close(h); /* not connected: a no-op, still reusable */
	assert_int_equal(maru_handler_connect(h), -ECONNREFUSED);
	assert_non_null(strstr(maru_handler_connect_error(h), "refused"));
	maru_handler_free(h);
	close(fd);
	(void)state;
}

struct other {
	struct maru_handler *h;
	char seen[256];
};

static void *other_thread(void *arg)
{
	struct other *o = arg;

	snprintf(o->seen, sizeof(o->seen), "%s", maru_handler_last_error(o->h));
	return NULL;
}

/*
 * maru_handler_last_error(): the calling thread's cause of its last
 * failed call, per thread (another thread sees its own, ""), cleared by
 * the next call
 */
static void test_last_error(void **state)
{
	struct sink s = {0};
	int port, fd = tcp_socket(0, &port);
	struct maru_handler *h = handler(port, 1000, &s, -1);
	struct maru_page p;
	struct maru_key k = {.type = MARU_KEY_STR, .len = 1, .str = "k"};
	struct other o = {h, "x"};
	pthread_t t;

	assert_string_equal(maru_handler_last_error(h), "");
	assert_int_equal(maru_page_alloc(h, 1 << 30, &p), -EINVAL);
	assert_non_null(strstr(maru_handler_last_error(h),
			       "is larger than a page (chunk_size_bytes"));
	assert_int_equal(pthread_create(&t, NULL, other_thread, &o), 0);
	pthread_join(t, NULL);
	assert_string_equal(o.seen, "");
	/* not connected: says so, with the last connect's cause */
	assert_int_equal(maru_handler_connect(h), -ECONNREFUSED);
	assert_int_equal(maru_kv_exists(h, &k), -ENOTCONN);
	assert_non_null(strstr(maru_handler_last_error(h),
			       "not connected: the last connect failed: "));
	assert_non_null(strstr(maru_handler_last_error(h), "refused"));
	maru_handler_free(h);
	close(fd);
	(void)state;
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 +
	       (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void test_raw_call_retry(void **state)
{
	struct sink s = {0};
	int port, fd = tcp_socket(0, &port); /* bound, not listening */
	struct maru_config *cfg;
	struct maru_handler *h;
	struct timespec t0;
	char url[64];
	void *reply = NULL;
	size_t len = 0;

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", port);
	assert_int_equal(maru_config_new(&cfg), 0);
	assert_true(maru_config_get_connect_retry(cfg)); /* the default */
	assert_int_equal(maru_config_set_server_url(cfg, url), 0);
	assert_int_equal(maru_config_set_timeout_ms(cfg, 300), 0);
	assert_int_equal(maru_config_set_use_async_rpc(cfg, false), 0);

	/* retried until the deadline */
	assert_int_equal(maru_handler_new(cfg, &h), 0);
	maru_handler_set_log_fn(h, log_fn, &s);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(maru_handler_call(h, 11, "\x80", 1, &reply, &len),
			 -ETIMEDOUT);
	assert_true(elapsed_ms(&t0) >= 250);
	maru_handler_free(h);

	/* one attempt: its own error at once, and its cause */
	assert_int_equal(maru_config_set_connect_retry(cfg, false), 0);
	assert_false(maru_config_get_connect_retry(cfg));
	assert_int_equal(maru_handler_new(cfg, &h), 0);
	maru_handler_set_log_fn(h, log_fn, &s);
	maru_handler_set_log_priority(h, -1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(maru_handler_call(h, 11, "\x80", 1, &reply, &len),
			 -ECONNREFUSED);
	assert_true(elapsed_ms(&t0) < 250);
	if (!strstr(maru_handler_last_error(h), url) ||
	    !strstr(maru_handler_last_error(h), "connection refused"))
		fail_msg("cause '%s'", maru_handler_last_error(h));
	/* every call says its own; a call that fails only by its code
	 * leaves "" */
	assert_int_equal(maru_handler_call(h, 11, "\x80", 1, &reply, &len),
			 -ECONNREFUSED);
	assert_non_null(strstr(maru_handler_last_error(h), "refused"));
	assert_int_equal(maru_handler_call(h, 11, NULL, 1, &reply, &len),
			 -EINVAL);
	assert_string_equal(maru_handler_last_error(h), "");
	assert_null(reply);
	maru_handler_free(h);
	maru_config_free(cfg);
	close(fd);
	(void)state;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_refused_silent),
		cmocka_unit_test(test_http_peer),
		cmocka_unit_test(test_silent_peer),
		cmocka_unit_test(test_closed_handler),
		cmocka_unit_test(test_last_error),
		cmocka_unit_test(test_raw_call_retry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
