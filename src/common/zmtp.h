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
 *   - PING answered by PONG; a second READY or an ERROR ends the
 *     connection; other commands are ignored.
 * Peers that speak ZMTP 1.0/2.0 (libzmq < 3.2) or PLAIN are refused; CURVE
 * is zcurve.h's layer underneath, which hands this state machine the
 * plaintext frames (it then starts in ZMTP_ST_OPEN).
 *
 * Two layers, both pure functions over byte buffers (no I/O, no
 * allocation):
 *   - the codec: greeting, frame headers, commands (zmtp_greeting ...
 *     zmtp_peer_ok below);
 *   - struct zmtp_conn, the one connection state machine of the project:
 *     greeting, NULL handshake, frames into messages, PING answered by a
 *     PONG for the owner to send, and the limits.  Its owner does the I/O
 *     and keeps the input buffer: maru-server's loop (non-blocking, many
 *     connections) and libmaru's rpc.c (from the calling thread) feed it
 *     whatever they have read and take whole messages out.
 * Everything here faces the network: fuzz_zmtp.
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
/* zmtp_greeting_mech - the same with mechanism @mech ("CURVE": zcurve.h) */
void zmtp_greeting_mech(uint8_t g[ZMTP_GREETING_LEN], bool as_server,
			const char *mech);

/* zmtp_greeting_prefix_ok - the first @n (>= 1) bytes of a greeting could
 * still be ZMTP 3 (a peer that is not is refused at its first wrong byte) */
bool zmtp_greeting_prefix_ok(const uint8_t *g, size_t n);

/**
 * zmtp_greeting_check - accept or refuse a peer's whole greeting
 * @minor: if not NULL, gets the peer's minor version (0: no PING/PONG)
 * Return: 0, or -EPROTO (not ZMTP, major version < 3, mechanism not NULL)
 */
int zmtp_greeting_check(const uint8_t g[ZMTP_GREETING_LEN], int *minor);
/* zmtp_greeting_check_mech - the same for mechanism @mech */
int zmtp_greeting_check_mech(const uint8_t g[ZMTP_GREETING_LEN], int *minor,
			     const char *mech);

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
ssize_t zmtp_parse(const uint8_t *p, size_t n, size_t max, struct zmtp_frame *f,
		   size_t *need);

/* zmtp_hdr - write a frame header for a @len-byte body; returns its size */
size_t zmtp_hdr(uint8_t out[ZMTP_HDR_MAX], uint8_t flags, size_t len);

/**
 * zmtp_command - split a command frame's body into name and data
 * Return: 0, or -EPROTO (not a command, or the name overruns the body)
 */
int zmtp_command(const struct zmtp_frame *f, const uint8_t **name, size_t *nlen,
		 const uint8_t **data, size_t *dlen);

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
 * zmtp_props - the property list of a READY (Socket-Type, and Identity
 * when @id is not NULL): what CURVE's INITIATE and READY box as metadata
 * Return: its size, or -ENOSPC
 */
ssize_t zmtp_props(uint8_t *out, size_t cap, const char *socket_type,
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

/* ---- the connection ---- */

#define ZMTP_MAX_FRAMES 32 /* frames of one message: envelope + body */

enum { ZMTP_ST_GREETING, ZMTP_ST_READY, ZMTP_ST_OPEN };

/*
 * One peer's input as a state machine.  The owner appends what it reads
 * to one buffer and calls zmtp_conn_next() with all of it; @rd tells how
 * much has been consumed (whole messages, and commands between them).
 */
struct zmtp_conn {
	const char *type; /* borrows: our socket type ("ROUTER", "REQ" ...) */
	size_t hs_max;	  /* the largest frame before READY */
	size_t msg_max;	  /* the largest message, all its frames */
	uint8_t st;	  /* ZMTP_ST_* */
	int minor;	  /* the peer's minor version: >= 1 speaks PING */
	bool discard;	  /* inside a message of too many frames */
	size_t rd;	  /* input: first byte not consumed */
	size_t cmd_done;  /* input: commands before this offset handled */
	size_t need;	  /* input: bytes from @rd the next step needs */
	uint64_t dropped; /* messages dropped for too many frames */
	size_t pong_len;  /* a PONG in @pong for the owner to send, or 0 */
	uint8_t pong[32];
};

/* One message: its frames, borrowed from the owner's input buffer. */
struct zmtp_msg {
	int nf;
	const uint8_t *p[ZMTP_MAX_FRAMES];
	size_t n[ZMTP_MAX_FRAMES];
};

/* zmtp_conn_init - a connection that has received nothing yet */
void zmtp_conn_init(struct zmtp_conn *c, const char *type, size_t hs_max,
		    size_t msg_max);

/**
 * zmtp_conn_next - the next whole message of @in[0..@len) after c->rd
 *
 * The greeting is refused at the first byte that cannot be ZMTP 3 (the
 * owner may read it byte by byte); then READY, whose Socket-Type must be
 * one that talks to c->type.  Commands are not part of messages: PING
 * leaves its PONG in c->pong (a newer one replaces an older), a second
 * READY or an ERROR is a protocol error, others are ignored; commands
 * between the frames of a message are handled once.  A message of more
 * than ZMTP_MAX_FRAMES frames is dropped whole (c->dropped counts it).
 *
 * Return: 1 with @m filled (borrowed from @in) and c->rd past it; 0 when
 * more input is needed (c->need: bytes from c->rd); -EPROTO (not ZMTP, a
 * socket type or mechanism we do not talk to, data before READY, reserved
 * flag bits) or -EMSGSIZE (over a limit): the connection must be closed.
 */
int zmtp_conn_next(struct zmtp_conn *c, const uint8_t *in, size_t len,
		   struct zmtp_msg *m);

/* zmtp_conn_shift - the owner dropped the first @n bytes of its input
 * (@n <= c->rd): the offsets follow */
static inline void zmtp_conn_shift(struct zmtp_conn *c, size_t n)
{
	c->rd -= n;
	c->cmd_done = c->cmd_done > n ? c->cmd_done - n : 0;
}

#endif /* MARU_COMMON_ZMTP_H */
