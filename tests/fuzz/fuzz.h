/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz.h - what every fuzz target shares: the libFuzzer entry point (also
 * called by replay.c) and CHECK(), which aborts rather than assert()s
 * because release builds define NDEBUG.
 */
#ifndef MARU_FUZZ_H
#define MARU_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                               \
	do {                                                                   \
		if (!(x))                                                      \
			abort();                                               \
	} while (0)

#endif
