/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_alloc_hook.h - force-included (-include) into the resource
 * manager sources that a unit test compiles itself: routes malloc, calloc,
 * realloc and free through cmocka's leak-checking allocator, and fails the
 * Nth allocation on demand (PMDK / SQLite style fault injection).
 *
 *   rm_fail_after = 3;    the 4th allocation from now returns NULL
 *   rm_fail_after = -1;   never fail (default)
 *
 * Each test binary defines rm_fail_after.
 */
#ifndef MARU_TEST_RM_ALLOC_HOOK_H
#define MARU_TEST_RM_ALLOC_HOOK_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

extern int rm_fail_after;

static inline int rm_hook_should_fail(void)
{
	if (rm_fail_after < 0)
		return 0;
	if (rm_fail_after == 0)
		return 1;
	rm_fail_after--;
	return 0;
}

static inline void *rm_hook_malloc(size_t n, const char *f, int l)
{
	return rm_hook_should_fail() ? NULL : _test_malloc(n, f, l);
}

static inline void *rm_hook_calloc(size_t n, size_t s, const char *f, int l)
{
	return rm_hook_should_fail() ? NULL : _test_calloc(n, s, f, l);
}

static inline void *rm_hook_realloc(void *p, size_t n, const char *f, int l)
{
	return rm_hook_should_fail() ? NULL : _test_realloc(p, n, f, l);
}

#define malloc(n) rm_hook_malloc((n), __FILE__, __LINE__)
#define calloc(n, s) rm_hook_calloc((n), (s), __FILE__, __LINE__)
#define realloc(p, n) rm_hook_realloc((p), (n), __FILE__, __LINE__)
#define free(p) _test_free((p), __FILE__, __LINE__)

#endif
