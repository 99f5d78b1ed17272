/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evloop.h - a small single-threaded epoll event loop (Redis "ae")
 *
 * One thread calls evloop_run(); every callback runs on that thread, so the
 * state the callbacks touch needs no lock.  Three kinds of event sources:
 *
 *   fd events   level-triggered EVLOOP_READ / EVLOOP_WRITE / EVLOOP_HANGUP
 *               per descriptor
 *   timers      one-shot or periodic, in milliseconds on CLOCK_MONOTONIC
 *   signals     delivered through a signalfd (the signals are blocked)
 *
 * A callback may add or delete any fd or timer, including its own.  After
 * evloop_del_fd() no further event of the current batch reaches that fd's
 * callback (the mask is checked before each dispatch, as in ae), nor the
 * callback of a descriptor registered later in the batch under the same
 * number (a closed fd is soon reused).
 *
 * Users: the resource manager (evloop_run) and maru-server, which drives
 * evloop_run_once() itself to poll without sleeping while it has work
 * (backlog, an index resize, busy polling).
 *
 * Ownership: the loop never owns the descriptors it watches (the caller
 * closes them after evloop_del_fd()), except the signalfd it creates.
 *
 * Context: not thread-safe; one loop per thread.
 */
#ifndef MARU_COMMON_EVLOOP_H
#define MARU_COMMON_EVLOOP_H

#include <stdbool.h>
#include <stdint.h>

#define EVLOOP_READ 1u
#define EVLOOP_WRITE 2u
#define EVLOOP_ERROR 4u /* passed to callbacks only: EPOLLERR/HUP */
#define EVLOOP_HANGUP                                                          \
	8u /* the peer shut down its side (EPOLLRDHUP): a                      \
	    * way to watch a socket that is not to be read */

struct evloop;

/* fd callback: @events is a mask of EVLOOP_READ/WRITE/ERROR/HANGUP */
typedef void evloop_fd_cb(struct evloop *el, int fd, unsigned events,
			  void *arg);
/*
 * timer callback: return the delay in ms until the next call, or a negative
 * value to delete the timer (ae's AE_NOMORE).
 */
typedef int64_t evloop_timer_cb(struct evloop *el, uint64_t id, void *arg);
/* signal callback: one call per delivered signal */
typedef void evloop_signal_cb(struct evloop *el, int signo, void *arg);
/* runs before each epoll_wait (Redis beforeSleep) */
typedef void evloop_hook_cb(struct evloop *el, void *arg);

/**
 * evloop_new - create a loop
 * @out: on success gives the loop; release with evloop_free()
 * Return: 0 or -errno.
 */
int evloop_new(struct evloop **out);

/**
 * evloop_free - release the loop, its timers and its signalfd
 * @el: taken (NULL is fine).  Watched fds stay open: they are the caller's.
 */
void evloop_free(struct evloop *el);

/**
 * evloop_add_fd - watch @fd, or change the callback and mask of a watched fd
 * @events: EVLOOP_READ, EVLOOP_WRITE and/or EVLOOP_HANGUP (0 keeps it
 *   registered, muted)
 * @arg: borrowed; passed to @cb
 * Return: 0 or -errno.
 */
int evloop_add_fd(struct evloop *el, int fd, unsigned events, evloop_fd_cb *cb,
		  void *arg);

/**
 * evloop_mod_fd - change the event mask of a watched fd
 * Return: 0 or -errno (-ENOENT if @fd is not watched).
 */
int evloop_mod_fd(struct evloop *el, int fd, unsigned events);

/* evloop_del_fd - stop watching @fd (a no-op if it is not watched) */
void evloop_del_fd(struct evloop *el, int fd);

/**
 * evloop_add_timer - call @cb after @ms milliseconds
 * @id: if not NULL, gets the timer id (ids start at 1, never reused)
 * Return: 0 or -ENOMEM.
 */
int evloop_add_timer(struct evloop *el, uint64_t ms, evloop_timer_cb *cb,
		     void *arg, uint64_t *id);

/* evloop_del_timer - delete a pending timer (unknown ids are ignored) */
void evloop_del_timer(struct evloop *el, uint64_t id);

/**
 * evloop_add_signals - block @signos and deliver them through a signalfd
 * @signos: @n signal numbers
 * Only one signal set per loop.  Return: 0 or -errno.
 */
int evloop_add_signals(struct evloop *el, const int *signos, int n,
		       evloop_signal_cb *cb, void *arg);

/* evloop_set_before_sleep - run @cb before each wait (NULL to clear) */
void evloop_set_before_sleep(struct evloop *el, evloop_hook_cb *cb, void *arg);

/**
 * evloop_run - dispatch events until evloop_stop()
 * Return: 0 after evloop_stop(), or -errno if epoll_wait fails.
 */
int evloop_run(struct evloop *el);

/**
 * evloop_run_once - wait at most @timeout_ms (-1 = until an event or timer,
 * capped by the next timer) and dispatch one batch.  For tests and for
 * callers that embed the loop.
 * Return: number of fd events dispatched, or -errno.
 */
int evloop_run_once(struct evloop *el, int timeout_ms);

/* evloop_stop - make evloop_run() return after the current batch */
void evloop_stop(struct evloop *el);

/* evloop_now_ms - the loop's monotonic clock in milliseconds */
uint64_t evloop_now_ms(void);

#endif
