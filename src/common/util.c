/* SPDX-License-Identifier: Apache-2.0 */
/* util.c - see util.h */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGTPE";
	unsigned long long v;
	const char *u;
	char *end;
	int shift = 0;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno)
		return -ERANGE;
	if (end == s)
		return -EINVAL;
	while (isspace((unsigned char)*end))
		end++;
	if (*end) {
		u = strchr(units, toupper((unsigned char)*end));
		if (!u)
			return -EINVAL;
		shift = 10 * (int)(u - units + 1);
		end++;
		if (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0)
			end += strlen(end);
		if (*end)
			return -EINVAL;
	}
	if (shift && v > (~0ULL >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

char *format_bytes(uint64_t v, char *out, size_t outlen)
{
	static const char units[] = "KMGTPE"; /* 2^64 is 16.0E */
	double d = (double)v;
	int i = -1;

	if (v < 1024) {
		snprintf(out, outlen, "%lluB", (unsigned long long)v);
		return out;
	}
	while (d >= 1024.0 && i < 5) {
		d /= 1024.0;
		i++;
	}
	snprintf(out, outlen, "%.1f%c", d, units[i]);
	return out;
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int parse_host_port(const char *s, char *host, size_t hostlen, uint16_t *port)
{
	const char *colon = strrchr(s, ':');
	unsigned long p;
	char *end;
	size_t n;

	if (!colon)
		return -EINVAL;
	n = (size_t)(colon - s);
	if (n == 0 || n >= hostlen)
		return -EINVAL;
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || p == 0 || p > 65535)
		return -EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	*port = (uint16_t)p;
	return 0;
}

void malloc_keep_freed(void)
{
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	mallopt(M_TOP_PAD, 4 << 20);
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
}

int array_grow(void *v, size_t *cap, size_t idx, size_t size, size_t min)
{
	void **vp = v;
	size_t n = *cap ? *cap : min;
	char *nv;

	if (idx < *cap)
		return 0;
	while (n <= idx)
		n *= 2;
	nv = realloc(*vp, n * size);
	if (!nv)
		return -ENOMEM;
	memset(nv + *cap * size, 0, (n - *cap) * size);
	*vp = nv;
	*cap = n;
	return 0;
}

bool utf8_valid(const void *p, size_t n)
{
	const uint8_t *s = p, *end = s + n;
	uint64_t w;
	uint32_t c;
	int k;

	while (s < end) {
		if (end - s >= 8) {
			memcpy(&w, s, 8);
			if (!(w & 0x8080808080808080ull)) {
				s += 8;
				continue;
			}
		}
		c = *s++;
		if (c < 0x80)
			continue;
		if (c < 0xc2 || c > 0xf4)
			return false; /* continuation, overlong lead, > U+10FFFF
				       */
		k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
		if (end - s < k)
			return false;
		/* the second byte's range rules out overlongs, surrogates and
		 * code points above U+10FFFF */
		if ((c == 0xe0 && s[0] < 0xa0) || (c == 0xed && s[0] > 0x9f) ||
		    (c == 0xf0 && s[0] < 0x90) || (c == 0xf4 && s[0] > 0x8f))
			return false;
		while (k--)
			if ((*s++ & 0xc0) != 0x80)
				return false;
	}
	return true;
}
