/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm_auth.c - the client key and the proofs of the AUTH exchange (see
 * rm_auth.h).  OpenSSL computes the MACs and draws the nonces.
 */
#include "rm_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "statedir.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

const char *rm_auth_key_default(char *buf, size_t len)
{
	char dir[4096];

	snprintf(buf, len, "%s/" RM_AUTH_KEY_FILE,
		 statedir_default(dir, sizeof(dir), STATEDIR_RM_ROOT,
				  STATEDIR_RM_NAME));
	return buf;
}

int rm_auth_key_load(const char *path, uint8_t key[RM_AUTH_KEY_LEN])
{
	char text[2 * RM_AUTH_KEY_LEN + 64];
	size_t len = 0, i;
	ssize_t n;
	int fd, hi, lo;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (len < sizeof(text)) {
		n = read(fd, text + len, sizeof(text) - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			n = -errno;
			close(fd);
			return (int)n;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (len < 2 * RM_AUTH_KEY_LEN || len == sizeof(text))
		return -EINVAL;
	for (i = 2 * RM_AUTH_KEY_LEN; i < len; i++)
		if (!strchr(" \t\r\n", text[i]))
			return -EINVAL;
	for (i = 0; i < RM_AUTH_KEY_LEN; i++) {
		hi = hexval(text[2 * i]);
		lo = hexval(text[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		key[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void rm_auth_key_text(const uint8_t key[RM_AUTH_KEY_LEN], char out[66])
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < RM_AUTH_KEY_LEN; i++) {
		out[2 * i] = hex[key[i] >> 4];
		out[2 * i + 1] = hex[key[i] & 15];
	}
	out[2 * RM_AUTH_KEY_LEN] = '\n';
	out[2 * RM_AUTH_KEY_LEN + 1] = '\0';
}

int rm_auth_random(void *p, size_t n)
{
	return RAND_bytes(p, (int)n) == 1 ? 0 : -EIO;
}

int rm_auth_reader_key(const uint8_t client_key[RM_AUTH_KEY_LEN],
		       uint8_t out[RM_AUTH_KEY_LEN])
{
	static const char label[] = "maru-rm-reader-key-1";
	unsigned int outlen = RM_AUTH_KEY_LEN;

	if (HMAC(EVP_sha256(), client_key, RM_AUTH_KEY_LEN,
		 (const uint8_t *)label, sizeof(label) - 1, out, &outlen) &&
	    outlen == RM_AUTH_KEY_LEN)
		return 0;
	return -EIO;
}

int rm_auth_mac(const uint8_t key[RM_AUTH_KEY_LEN], enum rm_auth_role role,
		const uint8_t cn[RM_AUTH_NONCE_LEN],
		const uint8_t sn[RM_AUTH_NONCE_LEN], struct rm_str client_id,
		uint8_t out[RM_AUTH_MAC_LEN])
{
	static const char label[] = "maru-rm-auth-1";
	uint8_t msg[sizeof(label) + 2 * RM_AUTH_NONCE_LEN + RM_CLIENT_ID_MAX];
	unsigned int outlen = RM_AUTH_MAC_LEN;
	size_t n = 0, idlen = client_id.len;

	if (idlen > RM_CLIENT_ID_MAX)
		idlen = RM_CLIENT_ID_MAX;
	memcpy(msg, label, sizeof(label) - 1);
	n = sizeof(label) - 1;
	msg[n++] = (uint8_t)role;
	memcpy(msg + n, cn, RM_AUTH_NONCE_LEN);
	n += RM_AUTH_NONCE_LEN;
	memcpy(msg + n, sn, RM_AUTH_NONCE_LEN);
	n += RM_AUTH_NONCE_LEN;
	if (idlen)
		memcpy(msg + n, client_id.ptr, idlen);
	n += idlen;
	if (HMAC(EVP_sha256(), key, RM_AUTH_KEY_LEN, msg, n, out, &outlen) &&
	    outlen == RM_AUTH_MAC_LEN)
		return 0;
	/* never a predictable value that a forged proof could match */
	if (RAND_bytes(out, RM_AUTH_MAC_LEN) != 1)
		memset(out, 0xA5, RM_AUTH_MAC_LEN);
	out[0] ^= 0x5A;
	return -EIO;
}

bool rm_auth_equal(const uint8_t a[RM_AUTH_MAC_LEN],
		   const uint8_t b[RM_AUTH_MAC_LEN])
{
	return CRYPTO_memcmp(a, b, RM_AUTH_MAC_LEN) == 0;
}

int rm_auth_prove(const uint8_t key[RM_AUTH_KEY_LEN],
		  const uint8_t cn[RM_AUTH_NONCE_LEN], struct rm_str client_id,
		  const struct rm_auth_resp *a, uint8_t out[RM_AUTH_MAC_LEN])
{
	uint8_t want[RM_AUTH_MAC_LEN];

	if (rm_auth_mac(key, RM_AUTH_SERVER, cn, a->nonce, client_id, want) < 0)
		return -EIO;
	if (!rm_auth_equal(want, a->proof))
		return -EKEYREJECTED;
	return rm_auth_mac(key, RM_AUTH_CLIENT, cn, a->nonce, client_id, out);
}
