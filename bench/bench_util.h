/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_util.h - what the in-process benchmarks measure with: this
 * thread's CPU time and this process's resident memory.
 */
#ifndef MARU_BENCH_UTIL_H
#define MARU_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* CPU time of the calling thread, ns */
static inline uint64_t bench_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* resident bytes of this process now (0 if /proc cannot tell) */
static inline uint64_t bench_rss_bytes(void)
{
	unsigned long size, res;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

#endif
