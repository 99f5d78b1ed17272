/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evloop.c - single-threaded epoll loop (see evloop.h)
 *
 * Design (Redis ae): a table indexed by fd holds each watched descriptor's
 * callback and mask; epoll is level-triggered, so a callback that leaves
 * data unread (a request budget) is simply called again on the next turn.
 * Timers live in a short list sorted by deadline; the daemons have a
 * handful of them (cron, rescan), so O(n) insertion is the simplest thing
 * that is obviously right.  The epoll timeout is the time to the nearest
 * timer.  Signals arrive through one signalfd, read until EAGAIN.
 *
 * Ownership: the loop owns its epoll fd, its signalfd and the timer nodes;
 * it borrows every other fd and every callback argument.
 */
#include "evloop.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define EVLOOP_BATCH 64 /* epoll events fetched per wait */

struct fd_slot {
	unsigned mask;	   /* EVLOOP_READ|WRITE|HANGUP; 0 = muted */
	bool watched;	   /* registered with epoll */
	uint64_t added_in; /* the batch it was registered in */
	evloop_fd_cb *cb;
	void *arg; /* borrows */
};

struct timer {
	uint64_t id;
	uint64_t when_ms; /* deadline on evloop_now_ms() */
	evloop_timer_cb *cb;
	void *arg;	    /* borrows */
	struct timer *next; /* sorted by when_ms, then id */
};

struct evloop {
	int epfd;	      /* owns */
	struct fd_slot *fds;  /* owns: indexed by fd */
	size_t nfds;	      /* slots allocated */
	struct timer *timers; /* owns: the list */
	uint64_t next_timer_id;
	uint64_t running_timer; /* id of the timer whose cb runs, or 0 */
	bool running_deleted;	/* that timer deleted itself */
	int sigfd;		/* owns: -1 if no signals */
	evloop_signal_cb *sig_cb;
	void *sig_arg;
	evloop_hook_cb *before_sleep;
	void *before_sleep_arg;
	uint64_t batch; /* evloop_run_once() calls so far */
	bool stop;
};

uint64_t evloop_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int evloop_new(struct evloop **out)
{
	struct evloop *el = calloc(1, sizeof(*el));

	if (!el)
		return -ENOMEM;
	el->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (el->epfd < 0) {
		int rc = -errno;

		free(el);
		return rc;
	}
	el->sigfd = -1;
	el->next_timer_id = 1;
	*out = el;
	return 0;
}

void evloop_free(struct evloop *el)
{
	struct timer *t, *next;

	if (!el)
		return;
	for (t = el->timers; t; t = next) {
		next = t->next;
		free(t);
	}
	if (el->sigfd >= 0)
		close(el->sigfd);
	close(el->epfd);
	free(el->fds);
	free(el);
}

/* Grow the fd table so that @fd is a valid index. */
static int fds_reserve(struct evloop *el, int fd)
{
	return array_grow(&el->fds, &el->nfds, (size_t)fd, sizeof(*el->fds),
			  64);
}

static uint32_t to_epoll(unsigned events)
{
	return (events & EVLOOP_READ ? EPOLLIN : 0) |
	       (events & EVLOOP_WRITE ? EPOLLOUT : 0) |
	       (events & EVLOOP_HANGUP ? EPOLLRDHUP : 0);
}

int evloop_add_fd(struct evloop *el, int fd, unsigned events, evloop_fd_cb *cb,
		  void *arg)
{
	struct epoll_event ev = {0};
	struct fd_slot *s;
	int rc;

	if (fd < 0)
		return -EBADF;
	rc = fds_reserve(el, fd);
	if (rc < 0)
		return rc;
	s = &el->fds[fd];
	ev.events = to_epoll(events);
	ev.data.fd = fd;
	if (epoll_ctl(el->epfd, s->watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd,
		      &ev) < 0)
		return -errno;
	if (!s->watched)
		s->added_in = el->batch;
	s->watched = true;
	s->mask = events & (EVLOOP_READ | EVLOOP_WRITE | EVLOOP_HANGUP);
	s->cb = cb;
	s->arg = arg;
	return 0;
}

int evloop_mod_fd(struct evloop *el, int fd, unsigned events)
{
	struct epoll_event ev = {0};

	if (fd < 0 || (size_t)fd >= el->nfds || !el->fds[fd].watched)
		return -ENOENT;
	ev.events = to_epoll(events);
	ev.data.fd = fd;
	if (epoll_ctl(el->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
		return -errno;
	el->fds[fd].mask =
		events & (EVLOOP_READ | EVLOOP_WRITE | EVLOOP_HANGUP);
	return 0;
}

void evloop_del_fd(struct evloop *el, int fd)
{
	if (fd < 0 || (size_t)fd >= el->nfds || !el->fds[fd].watched)
		return;
	/* Cannot fail for a registered fd that is still open. */
	epoll_ctl(el->epfd, EPOLL_CTL_DEL, fd, NULL);
	memset(&el->fds[fd], 0, sizeof(el->fds[fd]));
}

static void timer_insert(struct evloop *el, struct timer *t)
{
	struct timer **pp = &el->timers;

	while (*pp && (*pp)->when_ms <= t->when_ms)
		pp = &(*pp)->next;
	t->next = *pp;
	*pp = t;
}

int evloop_add_timer(struct evloop *el, uint64_t ms, evloop_timer_cb *cb,
		     void *arg, uint64_t *id)
{
	struct timer *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->id = el->next_timer_id++;
	t->when_ms = evloop_now_ms() + ms;
	t->cb = cb;
	t->arg = arg;
	timer_insert(el, t);
	if (id)
		*id = t->id;
	return 0;
}

void evloop_del_timer(struct evloop *el, uint64_t id)
{
	struct timer **pp, *t;

	if (id && id == el->running_timer) {
		el->running_deleted = true;
		return;
	}
	for (pp = &el->timers; (t = *pp); pp = &t->next) {
		if (t->id == id) {
			*pp = t->next;
			free(t);
			return;
		}
	}
}

/*
 * Run every timer due at @now.  A timer is unlinked while its callback
 * runs, so the callback may add or delete timers (itself included) freely.
 */
static void run_timers(struct evloop *el, uint64_t now)
{
	struct timer *t;
	int64_t next;

	while ((t = el->timers) && t->when_ms <= now) {
		el->timers = t->next;
		el->running_timer = t->id;
		el->running_deleted = false;
		next = t->cb(el, t->id, t->arg);
		el->running_timer = 0;
		if (next < 0 || el->running_deleted) {
			free(t);
			continue;
		}
		/* at least 1 ms, so a 0 return cannot spin inside one pass */
		t->when_ms = now + (uint64_t)(next > 0 ? next : 1);
		timer_insert(el, t);
	}
}

int evloop_add_signals(struct evloop *el, const int *signos, int n,
		       evloop_signal_cb *cb, void *arg)
{
	sigset_t set;
	int fd, rc, i;

	if (el->sigfd >= 0)
		return -EBUSY;
	sigemptyset(&set);
	for (i = 0; i < n; i++)
		sigaddset(&set, signos[i]);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -errno;
	fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	el->sigfd = fd;
	el->sig_cb = cb;
	el->sig_arg = arg;
	rc = fds_reserve(el, fd);
	if (rc == 0) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

		if (epoll_ctl(el->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			rc = -errno;
	}
	if (rc < 0) {
		close(fd);
		el->sigfd = -1;
	}
	return rc;
}

static void drain_signals(struct evloop *el)
{
	struct signalfd_siginfo si;

	while (read(el->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		el->sig_cb(el, (int)si.ssi_signo, el->sig_arg);
}

void evloop_set_before_sleep(struct evloop *el, evloop_hook_cb *cb, void *arg)
{
	el->before_sleep = cb;
	el->before_sleep_arg = arg;
}

/* Milliseconds until the nearest timer, capped by @cap (-1 = no cap). */
static int wait_timeout(struct evloop *el, int cap)
{
	uint64_t now, when;
	int ms;

	if (!el->timers)
		return cap;
	now = evloop_now_ms();
	when = el->timers->when_ms;
	ms = when <= now
		     ? 0
		     : (when - now > 3600000u ? 3600000 : (int)(when - now));
	return cap >= 0 && cap < ms ? cap : ms;
}

int evloop_run_once(struct evloop *el, int timeout_ms)
{
	struct epoll_event evs[EVLOOP_BATCH];
	int n, i, dispatched = 0;

	if (el->before_sleep)
		el->before_sleep(el, el->before_sleep_arg);
	n = epoll_wait(el->epfd, evs, EVLOOP_BATCH,
		       wait_timeout(el, timeout_ms));
	el->batch++;
	if (n < 0) {
		if (errno == EINTR)
			n = 0;
		else
			return -errno;
	}
	for (i = 0; i < n && !el->stop; i++) {
		int fd = evs[i].data.fd;
		unsigned ev = 0;
		struct fd_slot *s;

		if (fd == el->sigfd) {
			drain_signals(el);
			continue;
		}
		if (fd < 0 || (size_t)fd >= el->nfds)
			continue;
		s = &el->fds[fd];
		if (evs[i].events & EPOLLIN)
			ev |= EVLOOP_READ;
		if (evs[i].events & EPOLLOUT)
			ev |= EVLOOP_WRITE;
		if (evs[i].events & (EPOLLERR | EPOLLHUP))
			ev |= EVLOOP_ERROR;
		if (evs[i].events & EPOLLRDHUP)
			ev |= EVLOOP_HANGUP;
		/*
		 * deleted or muted earlier in this batch: drop the event; so
		 * too when the fd number was closed and registered again in
		 * this batch (the event is the old descriptor's)
		 */
		if (!s->watched || !s->cb || s->added_in == el->batch ||
		    !(ev & (s->mask | EVLOOP_ERROR)))
			continue;
		s->cb(el, fd, ev, s->arg);
		dispatched++;
	}
	if (!el->stop)
		run_timers(el, evloop_now_ms());
	return dispatched;
}

int evloop_run(struct evloop *el)
{
	int rc;

	el->stop = false;
	while (!el->stop) {
		rc = evloop_run_once(el, -1);
		if (rc < 0)
			return rc;
	}
	return 0;
}

void evloop_stop(struct evloop *el)
{
	el->stop = true;
}
