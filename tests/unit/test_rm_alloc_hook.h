/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rm_alloc_hook.h - force-included (-include) into the resource
 * manager sources that a unit test compiles itself: routes malloc, calloc,
 * realloc, strdup and free through cmocka's leak-checking allocator, and fails
 * the Nth allocation on demand (PMDK / SQLite style fault injection).
 *
 *   rm_fail_after = 3;    the 4th allocation from now returns NULL (once;
 *                         rm_fail_after is then -2: "fired")
 *   rm_fail_after = -1;   never fail (default)
 *   rm_fail_always = 1;   every allocation fails
 *
 * Each test binary defines rm_fail_after and rm_fail_always.
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
extern int rm_fail_always;

static inline int rm_hook_should_fail(void)
{
	if (rm_fail_always)
		return 1;
	if (rm_fail_after < 0)
		return 0;
	if (rm_fail_after == 0) {
		rm_fail_after = -2;
		return 1;
	}
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

static inline char *rm_hook_strdup(const char *s, const char *f, int l)
{
	size_t n = strlen(s) + 1;
	char *p = rm_hook_malloc(n, f, l);

	if (p)
		memcpy(p, s, n);
	return p;
}

#define malloc(n) rm_hook_malloc((n), __FILE__, __LINE__)
#define strdup(s) rm_hook_strdup((s), __FILE__, __LINE__)
#define calloc(n, s) rm_hook_calloc((n), (s), __FILE__, __LINE__)
#define realloc(p, n) rm_hook_realloc((p), (n), __FILE__, __LINE__)
#define free(p) _test_free((p), __FILE__, __LINE__)

#endif
