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

#include <stdbool.h>

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

struct zcurve_keys;
struct zcurve_allow;

/* daemon_is_loopback - @host (a --host value) is only this host's */
bool daemon_is_loopback(const char *host);

/**
 * daemon_load_curve - the CURVE keys of a daemon's control port:
 * --curve-secret-key-file @secret and --curve-clients @clients, both or
 * neither; logs what it loaded (the public key, how many clients) or why
 * not
 * Return: 1 (CURVE on: @k and @allow filled), 0 (off: neither given), or
 * -1 after an error message.
 */
int daemon_load_curve(const char *secret, const char *clients,
		      struct zcurve_keys *k, struct zcurve_allow *allow);

#endif
