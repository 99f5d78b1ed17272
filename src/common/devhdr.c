/* SPDX-License-Identifier: Apache-2.0 */
/*
 * devhdr.c - MARUDEV header codec (see devhdr.h)
 *
 * Bounded and pure: reads only the 32 bytes it is given, never allocates.
 */
#include "devhdr.h"

#include <errno.h>
#include <string.h>

#include "buf.h"

static const uint8_t devhdr_magic[8] = {'M', 'A', 'R', 'U',
					'D', 'E', 'V', '\0'};

int devhdr_parse(const uint8_t *p, size_t len, struct devhdr *h)
{
	if (len < DEVHDR_SIZE)
		return -EPROTO;
	if (memcmp(p, devhdr_magic, sizeof(devhdr_magic)) != 0)
		return -ENOENT;
	h->version = get_u32le(p + 8);
	memcpy(h->uuid, p + 12, 16);
	return 0;
}

void devhdr_format(uint8_t *p, const uint8_t uuid[16])
{
	memcpy(p, devhdr_magic, sizeof(devhdr_magic));
	put_u32le(p + 8, DEVHDR_VERSION);
	memcpy(p + 12, uuid, 16);
	put_u32le(p + 28, 0);
}

void devhdr_uuid_v4(uint8_t uuid[16])
{
	uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40);
	uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80);
}

void devhdr_uuid_str(const uint8_t uuid[16], char out[DEVHDR_UUID_STRLEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	int i, o = 0;

	for (i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[uuid[i] >> 4];
		out[o++] = hex[uuid[i] & 15];
	}
	out[o] = '\0';
}
