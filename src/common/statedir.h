/* SPDX-License-Identifier: Apache-2.0 */
/*
 * statedir.h - where a daemon keeps its state, and one daemon per place
 *
 * Both daemons keep durable state in a directory (the resource manager
 * its WAL, checkpoints and keys; maru-server its journal).  Without an
 * explicit --state-dir, root uses the system directory
 * (/var/lib/maru-resourced, /var/lib/maru-server) and any other user
 * $XDG_STATE_HOME/maru/<name> (~/.local/state/maru/<name>), so that a first
 * run as a user works.  The resource manager's client key lives in its
 * state directory, so a client finds it at the same default.
 *
 * A state directory, and a pool, is held by one daemon at a time: an
 * exclusive flock(2), taken without waiting.  The second daemon is refused
 * with a message naming the holder's pid, read from /proc/locks (the
 * kernel's own record of who holds the lock, so it cannot be stale).
 * flock, not fcntl locks: it belongs to the open file, so nothing else in
 * the process (another fd on the same file) can drop it by accident.
 *
 * Context: process start-up; no global state.
 */
#ifndef MARU_STATEDIR_H
#define MARU_STATEDIR_H

#include <stddef.h>

/* the resource manager's state directory (its keys live in it) */
#define STATEDIR_RM_ROOT "/var/lib/maru-resourced"
#define STATEDIR_RM_NAME "resource-manager"

/**
 * statedir_default - the state directory of daemon @name without
 * --state-dir: @root_dir for root, else under $XDG_STATE_HOME/maru or
 * ~/.local/state/maru
 * Return: @root_dir or @buf (filled).
 */
const char *statedir_default(char *buf, size_t len, const char *root_dir,
			     const char *name);

/**
 * statedir_mkdir_p - create @dir and its parents (mode @mode for those
 * made)  Return: 0 or -errno.
 */
int statedir_mkdir_p(const char *dir, unsigned mode);

/**
 * statedir_flock - take @fd (the file @what, for messages) for this
 * process: an exclusive flock(), not waiting
 * @who: the kind of daemon that may hold it ("maru-server"), named when
 * the holder's program cannot be read from /proc
 * Return: 0, -EWOULDBLOCK (@err: "@what is in use by another <program>
 * (pid N)"), or -errno (@err says).
 */
int statedir_flock(int fd, const char *what, const char *who, char *err,
		   size_t errlen);

/**
 * statedir_lock - take directory @dirfd (@dir, for messages): open
 * @dir/lock and statedir_flock() it
 * Return: the lock's fd (keep it open while running), or -errno (@err says).
 */
int statedir_lock(int dirfd, const char *dir, const char *who, char *err,
		  size_t errlen);

#endif
