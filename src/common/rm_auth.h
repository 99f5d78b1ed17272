/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rm_auth.h - who may ALLOC and FREE at the resource manager
 *
 * The resource manager keeps a client key (32 random bytes, written as 64
 * hex digits in <state_dir>/client.key, mode 0640).  A client that knows
 * it authenticates a connection with a challenge-response over the RM
 * protocol's AUTH_REQ/AUTH_RESP (docs/resource-manager.md, "Client
 * authentication"), mutual and replay-proof:
 *
 *   C -> S  AUTH_REQ  step 1, client nonce cn (32 random bytes), client_id
 *   S -> C  AUTH_RESP status 0, server nonce sn, HMAC(key, "S" cn sn id)
 *   C -> S  AUTH_REQ  step 2, HMAC(key, "C" cn sn id)
 *   S -> C  AUTH_RESP status 0 (else ERROR_RESP -EACCES and close)
 *
 * Both nonces are fresh per connection, so neither proof can be replayed
 * on another connection; the client checks the server's proof, so a fake
 * resource manager is noticed before anything is allocated from it.  The
 * MAC is OpenSSL's HMAC-SHA256 over the bytes "maru-rm-auth-1", the role
 * letter, cn, sn and the client id.  Nothing here is secret beyond the
 * key; the messages are not encrypted (the RM protocol carries no data
 * worth hiding: capability tokens are per-region MACs anyway).
 *
 * Users: the resource manager (server.c), maru-server's session
 * (rmsess.c) and the blocking client (rm_client.c).
 */
#ifndef MARU_COMMON_RM_AUTH_H
#define MARU_COMMON_RM_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rm_proto.h"

#define RM_AUTH_KEY_LEN 32
#define RM_AUTH_KEY_FILE "client.key" /* in the RM's state directory */
/*
 * The reader key (<state_dir>/reader.key, derived from the client key):
 * it authenticates a connection for STATS and GET_ACCESS only, anonymous
 * (it names no client id), for workers on other hosts when the resource
 * manager runs with --require-auth.  AUTH_REQ step 1 says which key
 * (byte 1: 1 = reader); the proofs are the same MACs under that key.
 */
#define RM_AUTH_READER_KEY_FILE "reader.key"

/**
 * rm_auth_key_default - where a client looks for the client key when it
 * is not told: client.key in the resource manager's default state
 * directory (statedir.h), /var/lib/maru-resourced/client.key for root
 * Return: @buf.
 */
const char *rm_auth_key_default(char *buf, size_t len);
/* how an ERROR_RESP -EACCES that asks for AUTH begins: rm_client then
 * authenticates and asks again (a bad token is -EACCES too) */
#define RM_AUTH_REQUIRED "authentication required"
/* GET_ACCESS's refusal of a handle whose token does not match */
#define RM_BAD_TOKEN "invalid auth token"

/* rm_auth_reader_key - the reader key of @client_key.  Return: 0, -EIO */
int rm_auth_reader_key(const uint8_t client_key[RM_AUTH_KEY_LEN],
		       uint8_t out[RM_AUTH_KEY_LEN]);

enum rm_auth_role {
	RM_AUTH_SERVER = 'S',
	RM_AUTH_CLIENT = 'C',
};

/**
 * rm_auth_key_load - read a key file (64 hex digits, then optional white
 * space)
 * Return: 0, -errno of open/read, or -EINVAL for any other content.
 */
int rm_auth_key_load(const char *path, uint8_t key[RM_AUTH_KEY_LEN]);

/* rm_auth_key_text - @key as 64 hex digits and a newline, NUL-terminated */
void rm_auth_key_text(const uint8_t key[RM_AUTH_KEY_LEN], char out[66]);

/* rm_auth_random - @n bytes from OpenSSL's RAND_bytes. Return: 0 or -EIO */
int rm_auth_random(void *p, size_t n);

/* rm_auth_mac - the proof of @role for this exchange, into @out.
 * Return: 0, or -EIO (OpenSSL failed: @out is random, matches nothing) */
int rm_auth_mac(const uint8_t key[RM_AUTH_KEY_LEN], enum rm_auth_role role,
		const uint8_t cn[RM_AUTH_NONCE_LEN],
		const uint8_t sn[RM_AUTH_NONCE_LEN], struct rm_str client_id,
		uint8_t out[RM_AUTH_MAC_LEN]);

/* rm_auth_equal - constant-time comparison of two proofs */
bool rm_auth_equal(const uint8_t a[RM_AUTH_MAC_LEN],
		   const uint8_t b[RM_AUTH_MAC_LEN]);

/**
 * rm_auth_prove - a client's step 2: check the server's answer @a to our
 * step 1 (nonce @cn, @client_id) and make our proof into @out
 * Return: 0; -EKEYREJECTED when the server does not prove it knows @key
 * (another key, or not our resource manager); -EIO (OpenSSL failed).
 * Users: the blocking client (rm_client.c) and maru-server's session.
 */
int rm_auth_prove(const uint8_t key[RM_AUTH_KEY_LEN],
		  const uint8_t cn[RM_AUTH_NONCE_LEN], struct rm_str client_id,
		  const struct rm_auth_resp *a, uint8_t out[RM_AUTH_MAC_LEN]);

#endif
