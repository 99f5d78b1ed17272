/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.h - small helpers shared by the daemons, libmaru and the tools
 */
#ifndef MARU_COMMON_UTIL_H
#define MARU_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* round @v up to a multiple of @align (a power of two or any non-zero) */
static inline uint64_t round_up_u64(uint64_t v, uint64_t align)
{
	return (v + align - 1) / align * align;
}

/**
 * parse_size - parse "4096", "512K", "100M", "4G", "1T", "2MiB", "0x1000"
 * Suffixes are binary (K = 1024).  Return: 0 or -EINVAL/-ERANGE.
 */
int parse_size(const char *s, uint64_t *out);

/**
 * format_bytes - human form with binary units and one decimal: "0B",
 * "512.0K", "1.5G" (the tools' format, docs/pool-monitor.md)
 * Return: @out
 */
char *format_bytes(uint64_t v, char *out, size_t outlen);

/* monotonic clock in nanoseconds */
uint64_t now_ns(void);

/*
 * malloc_keep_freed - glibc settings for a process that allocates and frees
 * ZeroMQ messages larger than 8 KiB all the time: keep freed memory
 * instead of trimming the heap after every free() (each regrowth pays a
 * page fault per 4 KiB, ~12 us on our VMs), and take messages up to 8 MiB
 * from the heap rather than from their own mmap().  Call once at start,
 * before threads.  Used by maru-server and its load generator.
 */
void malloc_keep_freed(void);

/**
 * parse_host_port - split "host:port" (port 1..65535)
 * @host: out, at least @hostlen bytes
 * Return: 0 or -EINVAL
 */
int parse_host_port(const char *s, char *host, size_t hostlen, uint16_t *port);

/**
 * utf8_valid - @p[0..@n) is well-formed UTF-8 as Python decodes it
 * strictly: no overlong forms, no surrogates (U+D800..DFFF), nothing
 * above U+10FFFF, no truncated sequence.  ASCII runs go 8 bytes at a time.
 */
bool utf8_valid(const void *p, size_t n);

/**
 * array_grow - make @idx a valid index of the array *@v of *@cap elements
 * of @size bytes: doubled from @min as needed, the new elements zeroed
 * (tables by fd, lists that grow by one)
 * Return: 0 or -ENOMEM (the array unchanged).
 */
int array_grow(void *v, size_t *cap, size_t idx, size_t size, size_t min);

#endif
