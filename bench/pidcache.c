/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pidcache.c - getpid() without a system call, for libzmq's fork checks
 *
 * libzmq 4.3 calls getpid() on every signaler operation (signaler_t::send,
 * wait and recv compare it with the pid that created the socket, to notice
 * a forked child): six to eight times per request in maru-server's loop
 * thread and four more in its I/O thread.  glibc stopped caching the pid
 * in 2.25, so each call is a system call, and on the paravirtualised VMs
 * we run on a system call costs ~1 µs: ~10 µs of CPU per request, on the
 * critical path of every lock-step round trip.
 *
 * This definition lives in the executable, so the dynamic linker binds
 * libzmq's getpid() to it (the executable is searched before libc).  It
 * returns the pid read once at start and refreshed in the child of every
 * fork() (pthread_atfork runs the handler inside fork(), before anything
 * else in the child can ask), so the answer is always the caller's pid,
 * as getpid(2) promises.  maru-server never vfork()s or clone()s by hand,
 * the two ways a cached pid could go stale.
 *
 * maru-server itself no longer links this file: it speaks ZMTP without
 * libzmq (server.c).  bench/mds-load-pc still does, for its second echo
 * floor ("libzmq as maru-server used to use it").  Libraries must never
 * interpose on libc like this (libmaru does not).
 */
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static pid_t cached_pid; /* 0 until the constructor (or first call) */

static void pid_refresh(void)
{
	__atomic_store_n(&cached_pid, (pid_t)syscall(SYS_getpid),
			 __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void pid_cache_init(void)
{
	pid_refresh();
	pthread_atfork(NULL, NULL, pid_refresh);
}

/* libc's getpid(), interposed: same result, no system call */
__attribute__((visibility("default"))) pid_t getpid(void)
{
	pid_t p = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);

	/* a library constructor may ask before ours has run */
	return p ? p : (pid_t)syscall(SYS_getpid);
}
