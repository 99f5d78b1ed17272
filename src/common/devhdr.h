/* SPDX-License-Identifier: Apache-2.0 */
/*
 * devhdr.h - the MARUDEV device header (docs/hardware.md)
 *
 * The first 32 bytes of a DEV_DAX device (and of an emulated pool file):
 *
 *   0  8  magic   "MARUDEV\0"
 *   8  4  version u32 LE = 1
 *  12 16  uuid    random v4
 *  28  4  reserved u32 = 0
 *
 * Pure functions over a byte buffer, so the parser can be fuzzed.  The one
 * codec of the header: the resource manager writes and reads it (dev.c
 * maps the first alignment unit), libmaru reads it to know which device
 * holds a region (mapper.c).
 */
#ifndef MARU_COMMON_DEVHDR_H
#define MARU_COMMON_DEVHDR_H

#include <stddef.h>
#include <stdint.h>

#define DEVHDR_SIZE 32
#define DEVHDR_VERSION 1
#define DEVHDR_UUID_STRLEN 36 /* 8-4-4-4-12, without the NUL */

struct devhdr {
	uint32_t version;
	uint8_t uuid[16];
};

/**
 * devhdr_parse - read a header from @p
 * Return: 0 if the magic is present (@h filled; any version is reported,
 * the caller decides), -ENOENT if the magic is absent (an uninitialised
 * device), -EPROTO if fewer than DEVHDR_SIZE bytes are given.
 */
int devhdr_parse(const uint8_t *p, size_t len, struct devhdr *h);

/* devhdr_format - write a version-1 header with @uuid into 32 bytes at @p */
void devhdr_format(uint8_t *p, const uint8_t uuid[16]);

/**
 * devhdr_uuid_v4 - turn 16 random bytes into a version-4 UUID in place
 * (byte 6 high nibble 4, byte 8 top bits 10)
 */
void devhdr_uuid_v4(uint8_t uuid[16]);

/* devhdr_uuid_str - 36 characters of lowercase hex plus a NUL into @out */
void devhdr_uuid_str(const uint8_t uuid[16], char out[DEVHDR_UUID_STRLEN + 1]);

#endif
