/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zmtp.h - ZeroMQ's wire protocol (ZMTP 3.1, NULL mechanism), without libzmq
 *
 * maru-server and libmaru speak ZMTP on their own TCP sockets, in the
 * thread that handles the request, instead of through libzmq: libzmq moves
 * every message through an I/O thread, two thread hops per side and round
 * trip, which on these VMs costs more than the loopback round trip itself
 * (docs/performance.md).  Peers are unchanged: libzmq/pyzmq REQ, DEALER and
 * ROUTER sockets on the other end see an ordinary ZeroMQ peer.
 *
 * What is implemented (RFC 23/ZMTP and 37/ZMTP for PING/PONG):
 *   - the 64-byte greeting: signature, version 3.1, mechanism "NULL";
 *   - the NULL handshake: one READY command each way with "Socket-Type"
 *     (and "Identity" when given);
 *   - frames: flags (MORE, LONG, COMMAND), 1- or 8-byte size, body;
 *   - PING answered by PONG; other commands are ignored.
 * Peers that speak ZMTP 1.0/2.0 (libzmq < 3.2) or CURVE/PLAIN are refused.
 *
 * This file has only pure functions over byte buffers: the connection
 * state machines live with their users (metadata_server/server.c,
 * libmaru/rpc.c).  Everything here faces the network: fuzz_zmtp.
 */
#ifndef MARU_COMMON_ZMTP_H
#define MARU_COMMON_ZMTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ZMTP_GREETING_LEN 64
#define ZMTP_HDR_MAX 9 /* flags + 8-byte size */

#define ZMTP_MORE 0x01
#define ZMTP_LONG 0x02
#define ZMTP_COMMAND 0x04

struct zmtp_frame {
	uint8_t flags;	     /* ZMTP_MORE | ZMTP_COMMAND */
	const uint8_t *data; /* borrows: inside the parsed buffer */
	size_t len;
};

/* zmtp_greeting - our greeting: version 3.1, NULL, @as_server */
void zmtp_greeting(uint8_t g[ZMTP_GREETING_LEN], bool as_server);

/**
 * zmtp_greeting_check - accept or refuse a peer's whole greeting
 * @minor: if not NULL, gets the peer's minor version (0: no PING/PONG)
 * Return: 0, or -EPROTO (not ZMTP, major version < 3, mechanism not NULL)
 */
int zmtp_greeting_check(const uint8_t g[ZMTP_GREETING_LEN], int *minor);

/**
 * zmtp_parse - parse the frame at the start of @p
 * @max: the largest body accepted
 * @need: if not NULL, gets the bytes the whole frame takes once its header
 *        is complete (so the caller can grow its buffer), else the header
 *        size still needed
 * Return: bytes the frame takes (header + body, > 0) and *@f filled in; 0
 * when @n bytes do not hold it yet; -EPROTO when a reserved flag bit is
 * set; -EMSGSIZE when the body exceeds @max.
 */
ssize_t zmtp_parse(const uint8_t *p, size_t n, size_t max,
		   struct zmtp_frame *f, size_t *need);

/* zmtp_hdr - write a frame header for a @len-byte body; returns its size */
size_t zmtp_hdr(uint8_t out[ZMTP_HDR_MAX], uint8_t flags, size_t len);

/**
 * zmtp_command - split a command frame's body into name and data
 * Return: 0, or -EPROTO (not a command, or the name overruns the body)
 */
int zmtp_command(const struct zmtp_frame *f, const uint8_t **name,
		 size_t *nlen, const uint8_t **data, size_t *dlen);

/* zmtp_is_command - @f is the command @name (e.g. "READY") */
bool zmtp_is_command(const struct zmtp_frame *f, const char *name);

/**
 * zmtp_ready_prop - find property @name (case-insensitive) in READY data
 * Return: 0 with *@val and *@vlen set, -ENOENT when absent, -EPROTO when the
 * property list is malformed
 */
int zmtp_ready_prop(const uint8_t *data, size_t n, const char *name,
		    const uint8_t **val, size_t *vlen);

/**
 * zmtp_ready - build a READY command frame (header included)
 * @id: the Identity property, or NULL for none (@idlen <= 255)
 * Return: its size, or -ENOSPC when @cap is too small
 */
ssize_t zmtp_ready(uint8_t *out, size_t cap, const char *socket_type,
		   const uint8_t *id, size_t idlen);

/**
 * zmtp_pong - the PONG answering PING command data @ping (TTL + context)
 * Return: frame size (header included; a @cap of 23 always fits),
 * or -EPROTO for PING data shorter than its TTL
 */
ssize_t zmtp_pong(uint8_t *out, size_t cap, const uint8_t *ping, size_t n);

/* zmtp_ping - a PING frame with TTL @ttl_ds (deciseconds), no context */
size_t zmtp_ping(uint8_t out[16], uint16_t ttl_ds);

/**
 * zmtp_peer_ok - may a socket of type @ours talk to one of type @theirs?
 * (RFC 23's table for REQ, REP, DEALER, ROUTER)
 */
bool zmtp_peer_ok(const char *ours, const uint8_t *theirs, size_t n);

#endif /* MARU_COMMON_ZMTP_H */
