/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.h - telling the service manager where a daemon is in its life
 *
 * Both daemons run under Type=notify units (systemd/): systemd counts a
 * start as done only when READY=1 arrives, so a unit ordered After= the
 * resource manager starts once the RM's port listens, not once its
 * process exists.  These are thin wrappers of libsystemd's sd_notify(3),
 * in one place so that the daemons say the same things the same way.
 * Without $NOTIFY_SOCKET (a terminal, a test, another supervisor) each
 * call does nothing.
 *
 * Context: the thread that owns the daemon's loop; not async-signal-safe.
 */
#ifndef MARU_COMMON_DAEMON_H
#define MARU_COMMON_DAEMON_H

/**
 * daemon_ready - the daemon listens and serves: READY=1 and a STATUS= line
 * @fmt: printf format of the status shown by `systemctl status`
 *
 * Call once, when the listening socket is bound and every start-up check
 * has passed, right before the event loop.  A failure to notify is logged
 * (systemd would time the start out) and otherwise ignored.
 */
void daemon_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/**
 * daemon_stopping - a clean stop has begun: STOPPING=1 and a STATUS= line
 * @fmt: printf format of the status
 */
void daemon_stopping(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

#endif
