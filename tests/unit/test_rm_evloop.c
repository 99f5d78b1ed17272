/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_evloop.c - the event loop both daemons run on
 *
 * fd events on a pipe (level-triggered, mask changes, deletion inside a
 * batch), hangup-only watching on a socketpair, timers (order, periodic,
 * self-deletion, deletion of another), signals through the signalfd, the
 * before-sleep hook and evloop_stop().
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "evloop.h"

struct fdctx {
	int calls;
	unsigned last;
	bool consume;
	int fd_to_del; /* delete this fd from inside the callback */
	struct evloop *el;
};

static void on_fd(struct evloop *el, int fd, unsigned events, void *arg)
{
	struct fdctx *c = arg;
	char b[64];

	c->calls++;
	c->last = events;
	if (c->consume && (events & EVLOOP_READ))
		assert_true(read(fd, b, sizeof(b)) > 0);
	if (c->fd_to_del >= 0)
		evloop_del_fd(el, c->fd_to_del);
}

static void test_fd_events(void **state)
{
	struct evloop *el;
	struct fdctx c = {0};
	int p[2];

	c.fd_to_del = -1;
	assert_int_equal(evloop_new(&el), 0);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(evloop_add_fd(el, p[0], EVLOOP_READ, on_fd, &c), 0);
	assert_int_equal(evloop_run_once(el, 0), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	/* level-triggered: unread data fires again */
	assert_int_equal(evloop_run_once(el, 100), 1);
	assert_int_equal(evloop_run_once(el, 100), 1);
	assert_int_equal(c.calls, 2);
	assert_true(c.last & EVLOOP_READ);
	/* muted: no callback even with data pending */
	assert_int_equal(evloop_mod_fd(el, p[0], 0), 0);
	assert_int_equal(evloop_run_once(el, 0), 0);
	assert_int_equal(evloop_mod_fd(el, p[0], EVLOOP_READ), 0);
	c.consume = true;
	assert_int_equal(evloop_run_once(el, 100), 1);
	assert_int_equal(evloop_run_once(el, 0), 0);
	/* write readiness on the other end */
	assert_int_equal(evloop_add_fd(el, p[1], EVLOOP_WRITE, on_fd, &c), 0);
	assert_int_equal(evloop_run_once(el, 100), 1);
	assert_true(c.last & EVLOOP_WRITE);
	evloop_del_fd(el, p[1]);
	evloop_del_fd(el, p[1]); /* twice is harmless */
	assert_int_equal(evloop_mod_fd(el, p[1], EVLOOP_READ), -ENOENT);
	assert_int_equal(evloop_add_fd(el, -1, EVLOOP_READ, on_fd, &c), -EBADF);
	evloop_free(el);
	close(p[0]);
	close(p[1]);
}

/* A callback closes a ready fd and a new one takes its number: the old
 * descriptor's event of this batch must not reach the new callback */
struct reuse {
	int victim;    /* ready fd to close */
	int fresh[2];  /* the socketpair that takes its number */
	int calls_new; /* callbacks of the new registration */
	struct evloop *el;
};

static void on_new(struct evloop *el, int fd, unsigned events, void *arg)
{
	struct reuse *r = arg;

	(void)el;
	(void)fd;
	(void)events;
	r->calls_new++;
}

static void on_victim(struct evloop *el, int fd, unsigned events, void *arg)
{
	(void)el;
	(void)fd;
	(void)events;
	(void)arg;
}

static void on_closer(struct evloop *el, int fd, unsigned events, void *arg)
{
	struct reuse *r = arg;

	(void)fd;
	(void)events;
	if (r->victim < 0)
		return;
	evloop_del_fd(el, r->victim);
	close(r->victim);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, r->fresh), 0);
	assert_int_equal(r->fresh[0], r->victim); /* the lowest free number */
	assert_int_equal(evloop_add_fd(el, r->fresh[0], EVLOOP_READ, on_new, r),
			 0);
	r->victim = -1;
}

static void test_reused_fd_in_batch(void **state)
{
	struct reuse r = {0};
	struct evloop *el;
	int a[2], b[2];

	assert_int_equal(evloop_new(&el), 0);
	assert_int_equal(pipe(a), 0); /* the closer, registered first */
	assert_int_equal(pipe(b), 0); /* the victim, ready too */
	r.victim = b[0];
	assert_int_equal(evloop_add_fd(el, a[0], EVLOOP_READ, on_closer, &r),
			 0);
	assert_int_equal(evloop_add_fd(el, b[0], EVLOOP_READ, on_victim, &r),
			 0);
	assert_int_equal(write(a[1], "x", 1), 1);
	close(b[1]); /* b[0] ready: EOF */
	evloop_run_once(el, 100);
	/* whatever the order in the batch, the fresh fd saw no old event */
	assert_true(r.victim < 0);
	assert_int_equal(r.calls_new, 0);
	/* in the next batch it is an ordinary descriptor (nothing ready) */
	assert_int_equal(write(r.fresh[1], "y", 1), 1);
	evloop_run_once(el, 100);
	assert_int_equal(r.calls_new, 1);
	evloop_free(el);
	close(a[0]);
	close(a[1]);
	close(r.fresh[0]);
	close(r.fresh[1]);
}

/* Watched for the peer's hangup only: data does not fire, a shutdown does */
static void test_hangup_only(void **state)
{
	struct evloop *el;
	struct fdctx c = {0};
	int sv[2];

	c.fd_to_del = -1;
	assert_int_equal(evloop_new(&el), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(evloop_add_fd(el, sv[0], EVLOOP_HANGUP, on_fd, &c), 0);
	assert_int_equal(write(sv[1], "x", 1), 1);
	assert_int_equal(evloop_run_once(el, 50), 0); /* unread data: quiet */
	assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
	assert_int_equal(evloop_run_once(el, 100), 1);
	assert_true(c.last & EVLOOP_HANGUP);
	assert_false(c.last & EVLOOP_WRITE);
	evloop_free(el);
	close(sv[0]);
	close(sv[1]);
}

/* Two ready fds; the first callback deletes the second: it must not run. */
static void test_delete_inside_batch(void **state)
{
	struct evloop *el;
	struct fdctx a = {0}, b = {0};
	int p[2], q[2];

	assert_int_equal(evloop_new(&el), 0);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(q), 0);
	a.fd_to_del = q[0];
	b.fd_to_del = p[0];
	a.consume = b.consume = true;
	assert_int_equal(evloop_add_fd(el, p[0], EVLOOP_READ, on_fd, &a), 0);
	assert_int_equal(evloop_add_fd(el, q[0], EVLOOP_READ, on_fd, &b), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(write(q[1], "x", 1), 1);
	usleep(1000);
	assert_int_equal(evloop_run_once(el, 100), 1);
	assert_int_equal(a.calls + b.calls, 1);
	assert_int_equal(evloop_run_once(el, 0), 0);
	evloop_free(el);
	close(p[0]);
	close(p[1]);
	close(q[0]);
	close(q[1]);
}

struct tctx {
	int order[16];
	int n;
	int repeat;	/* periodic: how many more times */
	uint64_t other; /* a timer to delete */
	struct evloop *el;
};

static int64_t t_record(struct evloop *el, uint64_t id, void *arg)
{
	struct tctx *t = arg;

	if (t->n < 16)
		t->order[t->n++] = (int)id;
	if (t->other) {
		evloop_del_timer(el, t->other);
		t->other = 0;
	}
	if (t->repeat > 0) {
		t->repeat--;
		return 1;
	}
	return -1;
}

static int64_t t_self_delete(struct evloop *el, uint64_t id, void *arg)
{
	struct tctx *t = arg;

	t->n++;
	evloop_del_timer(el, id);
	return 1; /* ignored: it deleted itself */
}

/* Turn the loop for about @ms (for "nothing more happens" checks). */
static void run_for(struct evloop *el, int ms)
{
	uint64_t end = evloop_now_ms() + (uint64_t)ms;

	while (evloop_now_ms() < end)
		evloop_run_once(el, 5);
}

/*
 * Turn the loop until *@n reaches @want, for at most 10 s.  Never decide
 * by a short wall-clock window alone: a loaded machine (ctest -j, the
 * sanitizers) may not run this process for longer than the timers'
 * deadlines, and the loop would then end before it ever ran them.
 */
static void run_until(struct evloop *el, const int *n, int want)
{
	uint64_t end = evloop_now_ms() + 10000;

	while (*n < want && evloop_now_ms() < end)
		evloop_run_once(el, 5);
}

static void test_timers(void **state)
{
	struct evloop *el;
	struct tctx t = {0}, s = {0};
	uint64_t a, b, c, d;

	assert_int_equal(evloop_new(&el), 0);
	assert_int_equal(evloop_add_timer(el, 30, t_record, &t, &a), 0);
	assert_int_equal(evloop_add_timer(el, 10, t_record, &t, &b), 0);
	assert_int_equal(evloop_add_timer(el, 20, t_record, &t, &c), 0);
	assert_true(a && b && c && a != b && b != c);
	run_until(el, &t.n, 3);
	run_for(el, 20); /* one-shot: none comes back */
	assert_int_equal(t.n, 3);
	assert_int_equal(t.order[0], (int)b);
	assert_int_equal(t.order[1], (int)c);
	assert_int_equal(t.order[2], (int)a);

	/* periodic, and deleting another pending timer from a callback */
	memset(&t, 0, sizeof(t));
	t.repeat = 3;
	assert_int_equal(evloop_add_timer(el, 50, t_record, &s, &d), 0);
	t.other = d;
	assert_int_equal(evloop_add_timer(el, 1, t_record, &t, &a), 0);
	run_until(el, &t.n, 4);
	run_for(el, 80); /* past the other timer's 50 ms, and no 5th call */
	assert_int_equal(t.n, 4);
	assert_int_equal(s.n, 0); /* deleted before it was due */

	/* a timer deleting itself does not come back */
	memset(&s, 0, sizeof(s));
	assert_int_equal(evloop_add_timer(el, 1, t_self_delete, &s, NULL), 0);
	run_until(el, &s.n, 1);
	run_for(el, 30);
	assert_int_equal(s.n, 1);
	evloop_del_timer(el, 12345); /* unknown: ignored */
	evloop_free(el);
}

struct sctx {
	int signo;
	int count;
};

static void on_sig(struct evloop *el, int signo, void *arg)
{
	struct sctx *s = arg;

	s->signo = signo;
	s->count++;
	evloop_stop(el);
}

static void on_before_sleep(struct evloop *el, void *arg)
{
	(*(int *)arg)++;
}

static int64_t t_raise(struct evloop *el, uint64_t id, void *arg)
{
	raise(SIGUSR1);
	return -1;
}

static void test_signals_and_stop(void **state)
{
	static const int sigs[] = {SIGUSR1};
	struct evloop *el;
	struct sctx s = {0};
	int hooks = 0;

	assert_int_equal(evloop_new(&el), 0);
	assert_int_equal(evloop_add_signals(el, sigs, 1, on_sig, &s), 0);
	assert_int_equal(evloop_add_signals(el, sigs, 1, on_sig, &s), -EBUSY);
	evloop_set_before_sleep(el, on_before_sleep, &hooks);
	assert_int_equal(evloop_add_timer(el, 5, t_raise, NULL, NULL), 0);
	/* run() returns once the signal callback calls evloop_stop() */
	assert_int_equal(evloop_run(el), 0);
	assert_int_equal(s.signo, SIGUSR1);
	assert_int_equal(s.count, 1);
	assert_true(hooks >= 1);
	evloop_free(el);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fd_events),
		cmocka_unit_test(test_hangup_only),
		cmocka_unit_test(test_reused_fd_in_batch),
		cmocka_unit_test(test_delete_inside_batch),
		cmocka_unit_test(test_timers),
		cmocka_unit_test(test_signals_and_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
