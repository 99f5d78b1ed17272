/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rm_devhdr.c - the MARUDEV device-header parser on arbitrary bytes
 *
 * An accepted header re-formats to the same magic and uuid; the uuid text
 * is always 36 characters of lowercase hex and dashes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devhdr.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t out[DEVHDR_SIZE];
	char s[DEVHDR_UUID_STRLEN + 1];
	struct devhdr h;
	int rc, i;

	rc = devhdr_parse(data, size, &h);
	if (size < DEVHDR_SIZE) {
		CHECK(rc == -EPROTO);
		return 0;
	}
	if (rc < 0) {
		CHECK(rc == -ENOENT && memcmp(data, "MARUDEV", 8) != 0);
		return 0;
	}
	devhdr_format(out, h.uuid);
	CHECK(memcmp(out, data, 8) == 0);
	CHECK(memcmp(out + 12, data + 12, 16) == 0);
	devhdr_uuid_str(h.uuid, s);
	CHECK(strlen(s) == DEVHDR_UUID_STRLEN);
	for (i = 0; i < DEVHDR_UUID_STRLEN; i++)
		CHECK(i == 8 || i == 13 || i == 18 || i == 23
			      ? s[i] == '-'
			      : (s[i] >= '0' && s[i] <= '9') ||
					(s[i] >= 'a' && s[i] <= 'f'));
	return 0;
}
