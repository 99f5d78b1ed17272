/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dial.c - making a connection to the metadata server, for rpc.c
 *
 * "tcp://host:port" (a name through getaddrinfo, IPv4 addresses tried
 * first; "[::1]" for IPv6 literals); a nonblocking connect bounded by the
 * call's deadline; then the handshake: our whole greeting and READY
 * (Socket-Type REQ, or DEALER with the client's 8-byte Identity) at once,
 * then the peer's greeting, checked byte by byte as it arrives so that a
 * peer that is not ZMTP fails with -EPROTO at its first wrong byte, and
 * its READY (a socket type that may talk to ours), through struct
 * zmtp_conn (src/common/zmtp.h).  With CURVE (zcurve.h) the handshake is
 * CURVE's: HELLO, WELCOME, INITIATE, READY.
 *
 * A server that is not listening yet is retried every few ms, growing to
 * RETRY_MAX_MS, until the deadline (libzmq's reconnect), unless the caller
 * asks for one attempt.  Every failure is described in one line naming the
 * address and the cause (describe(): refused, no route, a peer that sent
 * no greeting, closed at once, or sent bytes that are not ZMTP -- the
 * resource manager's port recognised by its reply).
 *
 * It reads only the client's constants (URL, host, port, identity, mode,
 * CURVE keys) and owns no state: rpc.c installs what it returns.  It calls
 * nothing else of libmaru but the clock.
 */
#include "private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net.h"
#include "util.h"
#include "zmtp.h"

#define READY_MAX 4096	 /* the peer's READY command */
#define RETRY_MIN_MS 2	 /* connect retries: 2, 4, 8 ... */
#define RETRY_MAX_MS 100 /* ... up to this */

/* "tcp://host:port" or "tcp://[v6]:port" into @r->host, @r->port */
int maru__rpc_parse_url(struct maru__rpc *r, const char *url)
{
	char host[256];
	uint16_t port;
	size_t n;

	if (strncmp(url, "tcp://", 6) ||
	    parse_host_port(url + 6, host, sizeof(host), &port) < 0)
		return -EINVAL;
	n = strlen(host);
	if (host[0] == '[') {
		if (n < 3 || host[n - 1] != ']')
			return -EINVAL;
		memmove(host, host + 1, n - 2);
		host[n - 2] = '\0';
	}
	r->host = strdup(host);
	if (!r->host)
		return -ENOMEM;
	snprintf(r->port, sizeof(r->port), "%u", port);
	return 0;
}

/*
 * the CURVE handshake (zcurve.h): greeting and HELLO, WELCOME, INITIATE,
 * READY, reading no further than the server's READY.  Then @z starts
 * open: the greetings and READY were CURVE's.
 * Return: as handshake(), and -EACCES when the server refused our key.
 */
static int handshake_curve(const struct maru__rpc *r, int fd, uint64_t deadline,
			   struct zmtp_conn *z, struct zcurve *cz, char *why,
			   size_t whyn)
{
	const char *type = r->async ? "DEALER" : "REQ";
	struct buf out = {0}, raw = {0}, plain = {0};
	ssize_t k;
	int rc, zrc = 0;

	rc = zcurve_client(cz, &r->curve->me, r->curve->server, type,
			   r->async ? r->ident : NULL,
			   r->async ? sizeof(r->ident) : 0, MARU__RPC_MSG_MAX,
			   &out);
	while (rc == 0) {
		if (out.len) {
			rc = net_send_all(fd, out.data, out.len, deadline);
			buf_reset(&out);
			if (rc < 0)
				break;
		}
		if (zcurve_open(cz))
			break;
		rc = buf_reserve(&raw, cz->rd + cz->need - raw.len);
		if (rc < 0)
			break;
		k = net_recv_some(fd, raw.data + raw.len,
				  cz->rd + cz->need - raw.len, deadline);
		if (k < 0) {
			rc = (int)k;
			break;
		}
		raw.len += (size_t)k;
		rc = zrc = zcurve_input(cz, raw.data, raw.len, &plain, &out);
	}
	if (rc == 0 && plain.len)
		rc = -EPROTO; /* nothing can come before a request */
	if (zrc < 0) {
		/* the peer's bytes were wrong (or libsodium failed): no retry
		 */
		snprintf(why, whyn, "%s: CURVE: %s", r->url,
			 cz->why ? cz->why : strerror(-zrc));
		if (zrc != -EACCES && zrc != -ENOMEM)
			rc = -EPROTO;
	}
	buf_free(&out);
	buf_free(&raw);
	buf_free(&plain);
	if (rc < 0)
		return rc;
	zmtp_conn_init(z, type, READY_MAX, MARU__RPC_MSG_MAX);
	z->st = ZMTP_ST_OPEN;
	z->minor = cz->minor;
	cz->rd = 0;
	return 0;
}

/* what a failed handshake got from the peer, for describe() */
struct hs_seen {
	uint8_t st;	  /* ZMTP_ST_* reached */
	size_t len;	  /* bytes received */
	uint8_t head[32]; /* the first of them (a greeting's mechanism ends
			   * at byte 32) */
};

/*
 * the ZMTP handshake on a fresh connection: send ours, check theirs with
 * @z (src/common/zmtp.h), reading no further than the peer's READY, so
 * that whatever follows is read into the receive buffer.  A peer that is
 * not ZMTP fails at its first wrong byte.  @seen: what the peer sent.
 * Return: 0 with @z open, -EPROTO (not a ZMTP peer we can talk to),
 * -ETIMEDOUT, -ECONNRESET or another -errno.
 */
/*
 * A greeting was refused at its first wrong byte, perhaps after a few
 * bytes only: read what else the peer sends at once (up to the 32 bytes
 * describe() looks at, 50 ms at most) so that the message says what it
 * is whatever the split of its first packets.
 */
static void more_of_greeting(int fd, uint8_t *in, size_t *len,
			     uint64_t deadline, struct hs_seen *seen)
{
	uint64_t until = maru__now_ns() + 50 * 1000000ull;
	ssize_t k;

	if (until > deadline)
		until = deadline;
	while (*len < sizeof(seen->head)) {
		k = net_recv_some(fd, in + *len, sizeof(seen->head) - *len,
				  until);
		if (k <= 0)
			break;
		*len += (size_t)k;
	}
	seen->len = *len;
	memcpy(seen->head, in,
	       *len < sizeof(seen->head) ? *len : sizeof(seen->head));
}

static int handshake(const struct maru__rpc *r, int fd, uint64_t deadline,
		     struct zmtp_conn *z, struct hs_seen *seen)
{
	const char *type = r->async ? "DEALER" : "REQ";
	uint8_t out[ZMTP_GREETING_LEN + 64];
	uint8_t in[ZMTP_GREETING_LEN + ZMTP_HDR_MAX + READY_MAX];
	struct zmtp_msg m;
	size_t len = 0;
	ssize_t k;
	int rc;

	memset(seen, 0, sizeof(*seen));
	zmtp_greeting(out, false);
	k = zmtp_ready(out + ZMTP_GREETING_LEN, sizeof(out) - ZMTP_GREETING_LEN,
		       type, r->async ? r->ident : NULL,
		       r->async ? sizeof(r->ident) : 0);
	if (k < 0)
		return (int)k;
	rc = net_send_all(fd, out, ZMTP_GREETING_LEN + (size_t)k, deadline);
	if (rc < 0)
		return rc;
	zmtp_conn_init(z, type, READY_MAX, MARU__RPC_MSG_MAX);
	for (;;) {
		seen->st = z->st;
		seen->len = len;
		memcpy(seen->head, in,
		       len < sizeof(seen->head) ? len : sizeof(seen->head));
		/* no message can come before READY: 1 is an error too */
		if (zmtp_conn_next(z, in, len, &m) != 0) {
			if (z->st == ZMTP_ST_GREETING)
				more_of_greeting(fd, in, &len, deadline, seen);
			return -EPROTO;
		}
		if (z->st == ZMTP_ST_OPEN)
			break;
		k = net_recv_some(fd, in + len, z->rd + z->need - len,
				  deadline);
		if (k < 0)
			return (int)k;
		len += (size_t)k;
	}
	zmtp_conn_shift(z, z->rd); /* the receive buffer starts empty */
	return 0;
}

/* @n bytes of @p for a message, up to a line end: printable ASCII kept,
 * the rest as '.' */
static void quote(char *out, size_t cap, const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n && i + 1 < cap && (!i || p[i] != '\r') &&
		    (!i || p[i] != '\n');
	     i++)
		out[i] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' ? (char)p[i]
								    : '.';
	out[i] = '\0';
}

/*
 * describe - one line on why connecting to @r failed with @rc, naming the
 * address: @seen is the handshake's view (NULL: the TCP connect failed)
 */
static void describe(const struct maru__rpc *r, int rc,
		     const struct hs_seen *seen, char *why, size_t n)
{
	const char *u = r->url;
	char got[20], mech[21];

	if (!seen) {
		if (rc == -ECONNREFUSED)
			snprintf(why, n,
				 "%s: connection refused (is %s running "
				 "there?)",
				 u, r->peer ? r->peer : "maru-server");
		else if (rc == -EHOSTUNREACH)
			snprintf(why, n, "%s: host unreachable or unknown", u);
		else if (rc == -ETIMEDOUT)
			snprintf(why, n, "%s: no TCP connection within %d ms",
				 u, r->timeout_ms);
		else
			snprintf(why, n, "%s: connect: %s", u, strerror(-rc));
		return;
	}
	if (rc == -EPROTO && seen->st == ZMTP_ST_GREETING) {
		if (seen->len >= 4 && !memcmp(seen->head, "URAM", 4)) {
			snprintf(why, n,
				 "%s does not speak the Maru metadata "
				 "protocol (ZMTP greeting expected): it "
				 "answered "
				 "as maru-resource-manager does",
				 u);
		} else if (seen->len >= 11 && seen->head[0] == 0xff &&
			   seen->head[9] == 0x7f && seen->head[10] < 3) {
			snprintf(why, n,
				 "%s speaks ZMTP %u, not 3 (an old "
				 "ZeroMQ peer, not a Maru metadata server)",
				 u, seen->head[10]);
		} else if (seen->len >= 32 && seen->head[0] == 0xff &&
			   seen->head[9] == 0x7f) {
			quote(mech, sizeof(mech), seen->head + 12, 20);
			mech[strcspn(mech, ".")] = '\0';
			snprintf(why, n,
				 "%s speaks ZMTP with the %s mechanism, "
				 "not NULL (a CURVE server: set "
				 "curve_server_key)",
				 u, mech);
		} else {
			quote(got, sizeof(got), seen->head,
			      seen->len < 16 ? seen->len : 16);
			snprintf(
				why, n,
				"%s does not speak the Maru metadata "
				"protocol (ZMTP greeting expected, got \"%s\")",
				u, got);
		}
	} else if (rc == -EPROTO) {
		snprintf(why, n,
			 "%s speaks ZMTP but is not a Maru metadata "
			 "server (its READY does not take a %s peer)",
			 u, r->async ? "DEALER" : "REQ");
	} else if ((rc == -ECONNRESET || rc == -EPIPE) && !seen->len) {
		snprintf(why, n,
			 "%s closed the connection without a ZMTP "
			 "greeting: it does not speak the Maru metadata "
			 "protocol",
			 u);
	} else if (rc == -ETIMEDOUT && !seen->len) {
		snprintf(why, n,
			 "%s sent no ZMTP greeting within %d ms: it "
			 "does not speak the Maru metadata protocol (or it is "
			 "stalled)",
			 u, r->timeout_ms);
	} else if (rc == -ECONNRESET || rc == -EPIPE) {
		snprintf(why, n,
			 "%s closed the connection during the ZMTP "
			 "handshake",
			 u);
	} else if (rc == -ETIMEDOUT) {
		snprintf(why, n, "%s: ZMTP handshake not finished within %d ms",
			 u, r->timeout_ms);
	} else {
		snprintf(why, n, "%s: ZMTP handshake: %s", u, strerror(-rc));
	}
}

/* see private.h */
int maru__rpc_dial(const struct maru__rpc *r, uint64_t deadline, int *fdp,
		   struct zmtp_conn *z, struct zcurve *cz, bool once, char *why,
		   size_t whyn)
{
	int backoff = RETRY_MIN_MS, fd, rc, left;
	uint64_t t0 = maru__now_ns();
	struct hs_seen seen;

	why[0] = '\0';
	for (;;) {
		fd = rc = net_dial(r->host, r->port, deadline);
		if (fd < 0) {
			describe(r, rc, NULL, why, whyn);
		} else {
			why[0] = '\0';
			rc = r->curve ? handshake_curve(r, fd, deadline, z, cz,
							why, whyn)
				      : handshake(r, fd, deadline, z, &seen);
			if (rc == 0) {
				*fdp = fd;
				return 0;
			}
			close(fd);
			if (r->curve)
				zcurve_wipe(cz);
			if (!why[0] && r->curve)
				snprintf(why, whyn, "%s: CURVE handshake: %s",
					 r->url, strerror(-rc));
			else if (!why[0])
				describe(r, rc, &seen, why, whyn);
			if (rc == -EPROTO || rc == -EACCES || rc == -ENOMEM)
				return rc; /* nothing a retry would change */
		}
		if (once)
			return rc;
		if (rc == -ETIMEDOUT)
			return rc;
		left = net_ms_left(deadline);
		if (left <= 0)
			break;
		usleep((useconds_t)(backoff < left ? backoff : left) * 1000);
		backoff =
			backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
	}
	left = (int)((maru__now_ns() - t0) / 1000000);
	rc = (int)strlen(why);
	if (rc && (size_t)rc < whyn)
		snprintf(why + rc, whyn - (size_t)rc, " (retried for %d ms)",
			 left);
	return -ETIMEDOUT;
}
