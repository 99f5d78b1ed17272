/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zcurve.h - ZMTP's CURVE security mechanism (CurveZMQ, RFC 26), on libsodium
 *
 * What it gives: every peer of maru-server proves that it holds the secret
 * key of a public key the server lists (and the server proves it holds the
 * one the client expects), and every frame after the handshake travels in
 * a Poly1305-authenticated XSalsa20 box, so nobody on the path can read,
 * change, replay or inject a request or a reply.  It is libzmq's
 * ZMQ_CURVE_SERVER/ZMQ_CURVE_SERVERKEY, byte for byte: pyzmq and libzmq
 * peers with CURVE options talk to maru-server and libmaru unchanged
 * (tests/python/test_curve.py checks both directions against libzmq).
 * The cryptography is libsodium's (crypto_box_*, crypto_secretbox_*,
 * randombytes); this file only frames the boxes as RFC 26 says.
 *
 * The handshake, after both greetings name mechanism "CURVE":
 *   C -> S  HELLO     C' (the client's key for this connection) and a box
 *                     from C' to S of 64 zero bytes: the client knows S
 *   S -> C  WELCOME   a box from S to C' of S' and a cookie (C' and s' in
 *                     a box only the server can open)
 *   C -> S  INITIATE  the cookie, and a box from C' to S' of C, a vouch
 *                     (a box from C to S' of C' and S: C's owner made C')
 *                     and the client's metadata (Socket-Type, Identity)
 *   S -> C  READY     a box from S' to C' of the server's metadata
 * then each frame is a MESSAGE: an 8-byte short nonce (strictly
 * increasing per direction) and a box from C' to S' (or back) of one flags
 * byte (MORE 1, COMMAND 2) and the frame's bytes.  PING/PONG travel as
 * boxed commands too.  The server refuses a client whose long-term key C
 * is not in its allow list with an ERROR command and a close.
 *
 * Layering: a struct zcurve sits between the socket and struct zmtp_conn
 * (zmtp.h).  Its owner reads the socket into a raw buffer, feeds it to
 * zcurve_input(), which answers the handshake into the owner's output
 * buffer and, once open, appends the plaintext frames to the buffer that
 * the zmtp_conn reads (which then starts in ZMTP_ST_OPEN: greetings and
 * READY were this file's).  Outgoing plaintext frames are turned into
 * MESSAGE frames by zcurve_seal().  Everything else, the framing, PING,
 * limits, envelopes, stays zmtp.h's, once.
 *
 * Keys and files: keys are 32 bytes, written in Z85 (40 characters) as
 * libzmq does.  Certificates are the files pyzmq's zmq.auth and czmq
 * write: "NAME.key" with `public-key = "..."` and "NAME.key_secret" with
 * both keys (mode 0600); `maru-keygen NAME` writes a pair.  An allow list
 * is a directory of public certificates (zmq.auth's "public_keys").
 *
 * Everything here faces the network: fuzz_zcurve.
 */
#ifndef MARU_COMMON_ZCURVE_H
#define MARU_COMMON_ZCURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"

#define ZCURVE_KEY 32	   /* bytes of a public or a secret key */
#define ZCURVE_Z85 40	   /* characters of a key in Z85 */
#define ZCURVE_HS_MAX 4096 /* the largest handshake command accepted */
#define ZCURVE_OVERHEAD 33 /* "\x07MESSAGE", nonce, MAC, flags */

/* zcurve_sodium_init - once per process before any other call; Return 0 */
int zcurve_sodium_init(void);

/* zcurve_z85_encode - @k as 40 Z85 characters and a NUL */
void zcurve_z85_encode(const uint8_t k[ZCURVE_KEY], char out[ZCURVE_Z85 + 1]);

/* zcurve_z85_decode - the key in @s[0..@n) (n must be 40); Return 0/-EINVAL */
int zcurve_z85_decode(const char *s, size_t n, uint8_t out[ZCURVE_KEY]);

/* zcurve_public_of - the public key of secret key @sec */
void zcurve_public_of(const uint8_t sec[ZCURVE_KEY], uint8_t pub[ZCURVE_KEY]);

/**
 * zcurve_load_cert - read a certificate file (pyzmq/czmq format)
 * @sec: if not NULL, gets the secret key, which the file must then hold
 * @why: on failure, a message naming the file and the problem
 * Return: 0, -errno of the open, or -EINVAL (no such key, not Z85, a
 * secret key that does not match the public one)
 */
int zcurve_load_cert(const char *path, uint8_t pub[ZCURVE_KEY], uint8_t *sec,
		     char *why, size_t whylen);

/**
 * zcurve_load_public - a public key given as 40 Z85 characters, or as the
 * path of a certificate file holding it.  Return: as zcurve_load_cert().
 */
int zcurve_load_public(const char *spec, uint8_t pub[ZCURVE_KEY], char *why,
		       size_t whylen);

/**
 * zcurve_write_cert - a fresh key pair as @base.key (0644) and
 * @base.key_secret (0600), each created with O_EXCL (neither may exist),
 * written and fsync()ed; a failed write removes what it wrote.
 * Return: 0 or -errno (@why says which file).
 */
int zcurve_write_cert(const char *base, char *why, size_t whylen);

/* The clients a server lets in: their long-term public keys, sorted. */
struct zcurve_allow {
	uint8_t (*key)[ZCURVE_KEY]; /* owns */
	size_t n;
};

/**
 * zcurve_allow_load - every "*.key" certificate in directory @dir
 * Return: 0 (the list may be empty: nobody gets in), or -errno / -EINVAL
 * with @why naming the directory or the bad file.
 */
int zcurve_allow_load(struct zcurve_allow *a, const char *dir, char *why,
		      size_t whylen);
bool zcurve_allow_has(const struct zcurve_allow *a,
		      const uint8_t k[ZCURVE_KEY]);
void zcurve_allow_free(struct zcurve_allow *a);

/* One side's long-term identity. */
struct zcurve_keys {
	uint8_t pub[ZCURVE_KEY];
	uint8_t sec[ZCURVE_KEY];
};

enum {
	ZCURVE_ST_GREETING, /* the peer's greeting */
	ZCURVE_ST_HELLO,    /* server: HELLO; client: WELCOME */
	ZCURVE_ST_INITIATE, /* server: INITIATE; client: READY */
	ZCURVE_ST_OPEN,	    /* MESSAGEs */
};

/* One connection's CURVE state (the owner keeps the raw input buffer). */
struct zcurve {
	bool server;
	uint8_t st;			  /* ZCURVE_ST_* */
	int minor;			  /* the peer's ZMTP minor version */
	const char *type;		  /* borrows: our socket type */
	const struct zcurve_keys *me;	  /* borrows */
	const struct zcurve_allow *allow; /* borrows (server) */
	const uint8_t *id; /* borrows (client): Identity metadata */
	size_t idlen;
	uint8_t peer[ZCURVE_KEY]; /* client: S, given; server: C, proven */
	uint8_t eph_pub[ZCURVE_KEY], eph_sec[ZCURVE_KEY]; /* ours, this conn */
	uint8_t peer_eph[ZCURVE_KEY];	/* theirs, this connection */
	uint8_t cookie[96];		/* client: the server's cookie */
	uint8_t cookie_key[ZCURVE_KEY]; /* server: seals the cookie */
	uint8_t precom[ZCURVE_KEY]; /* crypto_box_beforenm(peer_eph, eph_sec) */
	uint64_t nonce;		    /* the next short nonce we send */
	uint64_t peer_nonce;	    /* the last one received */
	size_t msg_max;		    /* the largest plaintext frame accepted */
	size_t rd;		    /* raw input consumed */
	size_t need;		    /* bytes from @rd the next step needs */
	const char *why;	    /* after a failure: what went wrong */
};

/**
 * zcurve_client - start a client connection: greeting and HELLO into @out
 * @server: the server's long-term public key S
 * @id: the Identity metadata (DEALER; borrowed until open), or NULL
 * Return: 0 or -ENOMEM.
 */
int zcurve_client(struct zcurve *z, const struct zcurve_keys *me,
		  const uint8_t server[ZCURVE_KEY], const char *type,
		  const uint8_t *id, size_t idlen, size_t msg_max,
		  struct buf *out);

/* zcurve_server - start a server connection: its greeting into @out.
 * @allow NULL lets nobody in (fail closed). */
int zcurve_server(struct zcurve *z, const struct zcurve_keys *me,
		  const struct zcurve_allow *allow, const char *type,
		  size_t msg_max, struct buf *out);

/**
 * zcurve_input - take the whole frames of @in[z->rd .. @len)
 * @plain: gets the plaintext frames (ZMTP framing) once open
 * @out: gets the handshake's answers (WELCOME, INITIATE, READY, ERROR)
 *
 * Return: 0 (all whole frames taken; z->need: bytes from z->rd for the
 * next), -EPROTO (not ZMTP 3 with CURVE, a box that does not open, a nonce
 * that does not increase, a socket type we do not talk to: z->why says
 * which), -EACCES (server: the client's key is not allowed; an ERROR is in
 * @out), -EMSGSIZE or -ENOMEM.  After a failure the connection is closed.
 */
int zcurve_input(struct zcurve *z, const uint8_t *in, size_t len,
		 struct buf *plain, struct buf *out);

/* zcurve_wipe - forget the keys of a connection that ended */
void zcurve_wipe(struct zcurve *z);

static inline bool zcurve_open(const struct zcurve *z)
{
	return z->st == ZCURVE_ST_OPEN;
}

/* zcurve_shift - the owner dropped the first @n (<= z->rd) raw bytes */
static inline void zcurve_shift(struct zcurve *z, size_t n)
{
	z->rd -= n;
}

/**
 * zcurve_seal - the whole plaintext frames @p[0..@n) as MESSAGEs into @out
 * Return: 0, -EPROTO (@p does not end at a frame boundary) or -ENOMEM.
 */
int zcurve_seal(struct zcurve *z, const uint8_t *p, size_t n, struct buf *out);

/* zcurve_seal_frame - one frame (@flags: ZMTP_MORE, ZMTP_COMMAND) of @n
 * bytes as a MESSAGE into @out.  Return: 0, -ENOMEM or -EIO. */
int zcurve_seal_frame(struct zcurve *z, uint8_t flags, const uint8_t *p,
		      size_t n, struct buf *out);

#endif /* MARU_COMMON_ZCURVE_H */
