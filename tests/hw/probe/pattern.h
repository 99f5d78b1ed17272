/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pattern.h - the seeded byte pattern of the hardware tests
 *
 * maru-hwprobe (fill/check on a device or file) and maru-hwhold (through
 * libmaru) write and verify the same bytes, so either side can check what
 * the other wrote.  Byte i of a chunk with seed s is pattern_byte(s, i): a
 * 64-bit mix of (s, i / 8), so a shifted or truncated copy never matches.
 */
#ifndef MARU_HW_PATTERN_H
#define MARU_HW_PATTERN_H

#include <stdint.h>

static inline uint8_t pattern_byte(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (i / 8);

	x ^= x >> 31;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 29;
	return (uint8_t)(x >> (8 * (i % 8)));
}

#endif
