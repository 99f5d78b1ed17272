/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libmaru_testalloc.h - force-included into libmaru sources compiled for the
 * unit tests: routes malloc/calloc/realloc/free through cmocka's leak
 * checking allocator plus a fail-the-Nth-allocation switch, so every error
 * exit of alloc.c and keymap.c is walked (PMDK fault injection).
 */
#ifndef LIBMARU_TESTALLOC_H
#define LIBMARU_TESTALLOC_H

#include <stdlib.h>
#include <string.h>

void *tmalloc(size_t n);
void *tcalloc(size_t n, size_t m);
void *trealloc(void *p, size_t n);
void tfree(void *p);

#ifndef LIBMARU_TESTALLOC_NO_MACROS
#define malloc(n) tmalloc(n)
#define calloc(n, m) tcalloc(n, m)
#define realloc(p, n) trealloc(p, n)
#define free(p) tfree(p)
#endif

#endif
