/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zmtp.c - ZMTP 3.1 greeting, handshake and framing (see zmtp.h)
 */
#include "zmtp.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "buf.h"

void zmtp_greeting_mech(uint8_t g[ZMTP_GREETING_LEN], bool as_server,
			const char *mech)
{
	memset(g, 0, ZMTP_GREETING_LEN);
	g[0] = 0xff;
	g[8] = 1; /* padding as libzmq sends it: an identity length of 0 + 1 */
	g[9] = 0x7f;
	g[10] = 3;
	g[11] = 1;
	memcpy(g + 12, mech, strnlen(mech, 20));
	g[32] = as_server;
}

void zmtp_greeting(uint8_t g[ZMTP_GREETING_LEN], bool as_server)
{
	zmtp_greeting_mech(g, as_server, "NULL");
}

int zmtp_greeting_check_mech(const uint8_t g[ZMTP_GREETING_LEN], int *minor,
			     const char *mech)
{
	uint8_t want[20] = {0};

	memcpy(want, mech, strnlen(mech, 20));
	if (g[0] != 0xff || g[9] != 0x7f || g[10] < 3 ||
	    memcmp(g + 12, want, sizeof(want)))
		return -EPROTO;
	if (minor)
		*minor = g[10] > 3 ? 1 : g[11];
	return 0;
}

int zmtp_greeting_check(const uint8_t g[ZMTP_GREETING_LEN], int *minor)
{
	return zmtp_greeting_check_mech(g, minor, "NULL");
}

ssize_t zmtp_parse(const uint8_t *p, size_t n, size_t max, struct zmtp_frame *f,
		   size_t *need)
{
	size_t hl, len;

	if (n < 2) {
		if (need)
			*need = 2;
		return 0;
	}
	if (p[0] & ~(ZMTP_MORE | ZMTP_LONG | ZMTP_COMMAND))
		return -EPROTO;
	if (p[0] & ZMTP_LONG) {
		uint64_t l64;

		hl = 9;
		if (n < hl) {
			if (need)
				*need = hl;
			return 0;
		}
		l64 = (uint64_t)get_u32be(p + 1) << 32 | get_u32be(p + 5);
		if (l64 > max)
			return -EMSGSIZE;
		len = (size_t)l64;
	} else {
		hl = 2;
		len = p[1];
		if (len > max)
			return -EMSGSIZE;
	}
	if (need)
		*need = hl + len;
	if (n - hl < len)
		return 0;
	f->flags = p[0] & (ZMTP_MORE | ZMTP_COMMAND);
	f->data = p + hl;
	f->len = len;
	return (ssize_t)(hl + len);
}

size_t zmtp_hdr(uint8_t out[ZMTP_HDR_MAX], uint8_t flags, size_t len)
{
	if (len <= 255) {
		out[0] = flags;
		out[1] = (uint8_t)len;
		return 2;
	}
	out[0] = flags | ZMTP_LONG;
	put_u32be(out + 1, (uint32_t)((uint64_t)len >> 32));
	put_u32be(out + 5, (uint32_t)len);
	return 9;
}

int zmtp_command(const struct zmtp_frame *f, const uint8_t **name, size_t *nlen,
		 const uint8_t **data, size_t *dlen)
{
	if (!(f->flags & ZMTP_COMMAND) || f->len < 1 ||
	    (size_t)f->data[0] + 1 > f->len)
		return -EPROTO;
	*name = f->data + 1;
	*nlen = f->data[0];
	*data = f->data + 1 + *nlen;
	*dlen = f->len - 1 - *nlen;
	return 0;
}

bool zmtp_is_command(const struct zmtp_frame *f, const char *name)
{
	const uint8_t *nm, *d;
	size_t nl, dl;

	return zmtp_command(f, &nm, &nl, &d, &dl) == 0 && nl == strlen(name) &&
	       !memcmp(nm, name, nl);
}

int zmtp_ready_prop(const uint8_t *data, size_t n, const char *name,
		    const uint8_t **val, size_t *vlen)
{
	size_t want = strlen(name), i = 0, nl, vl;
	int rc = -ENOENT;

	while (i < n) {
		nl = data[i++];
		if (n - i < nl + 4)
			return -EPROTO;
		vl = get_u32be(data + i + nl);
		if (n - i - nl - 4 < vl)
			return -EPROTO;
		if (rc == -ENOENT && nl == want &&
		    !strncasecmp((const char *)data + i, name, nl)) {
			*val = data + i + nl + 4;
			*vlen = vl;
			rc = 0;
		}
		i += nl + 4 + vl;
	}
	return rc;
}

static int put_prop(uint8_t *out, size_t cap, size_t *at, const char *name,
		    const uint8_t *val, size_t vlen)
{
	size_t nl = strlen(name);

	if (cap - *at < 1 + nl + 4 + vlen)
		return -ENOSPC;
	out[(*at)++] = (uint8_t)nl;
	memcpy(out + *at, name, nl);
	*at += nl;
	put_u32be(out + *at, (uint32_t)vlen);
	*at += 4;
	memcpy(out + *at, val, vlen);
	*at += vlen;
	return 0;
}

ssize_t zmtp_props(uint8_t *out, size_t cap, const char *socket_type,
		   const uint8_t *id, size_t idlen)
{
	size_t at = 0;

	if (idlen > 255 ||
	    put_prop(out, cap, &at, "Socket-Type", (const uint8_t *)socket_type,
		     strlen(socket_type)) < 0 ||
	    (id && put_prop(out, cap, &at, "Identity", id, idlen) < 0))
		return -ENOSPC;
	return (ssize_t)at;
}

ssize_t zmtp_ready(uint8_t *out, size_t cap, const char *socket_type,
		   const uint8_t *id, size_t idlen)
{
	size_t at = ZMTP_HDR_MAX, body, hl;
	uint8_t hdr[ZMTP_HDR_MAX];
	ssize_t k;

	/* built after a maximal header, then moved down to the real one */
	if (cap < at + 6)
		return -ENOSPC;
	memcpy(out + at, "\x05READY", 6);
	at += 6;
	k = zmtp_props(out + at, cap - at, socket_type, id, idlen);
	if (k < 0)
		return k;
	at += (size_t)k;
	body = at - ZMTP_HDR_MAX;
	hl = zmtp_hdr(hdr, ZMTP_COMMAND, body);
	memmove(out + hl, out + ZMTP_HDR_MAX, body);
	memcpy(out, hdr, hl);
	return (ssize_t)(hl + body);
}

ssize_t zmtp_pong(uint8_t *out, size_t cap, const uint8_t *ping, size_t n)
{
	size_t ctx;

	if (n < 2)
		return -EPROTO;
	ctx = n - 2 > 16 ? 16 : n - 2; /* the context is at most 16 bytes */
	if (cap < 2 + 5 + ctx)
		return -ENOSPC;
	out[0] = ZMTP_COMMAND;
	out[1] = (uint8_t)(5 + ctx);
	memcpy(out + 2, "\x04PONG", 5);
	memcpy(out + 7, ping + 2, ctx);
	return (ssize_t)(7 + ctx);
}

size_t zmtp_ping(uint8_t out[16], uint16_t ttl_ds)
{
	out[0] = ZMTP_COMMAND;
	out[1] = 7;
	memcpy(out + 2, "\x04PING", 5);
	put_u16be(out + 7, ttl_ds);
	return 9;
}

static bool type_is(const uint8_t *t, size_t n, const char *s)
{
	return n == strlen(s) && !memcmp(t, s, n);
}

bool zmtp_peer_ok(const char *ours, const uint8_t *theirs, size_t n)
{
	if (!strcmp(ours, "ROUTER") || !strcmp(ours, "REP"))
		return type_is(theirs, n, "REQ") ||
		       type_is(theirs, n, "DEALER") ||
		       (!strcmp(ours, "ROUTER") &&
			type_is(theirs, n, "ROUTER"));
	if (!strcmp(ours, "REQ"))
		return type_is(theirs, n, "REP") ||
		       type_is(theirs, n, "ROUTER");
	if (!strcmp(ours, "DEALER"))
		return type_is(theirs, n, "REP") ||
		       type_is(theirs, n, "DEALER") ||
		       type_is(theirs, n, "ROUTER");
	return false;
}

/* ------------------------------------------------------------------------ */
/* The connection                                                           */

void zmtp_conn_init(struct zmtp_conn *c, const char *type, size_t hs_max,
		    size_t msg_max)
{
	memset(c, 0, sizeof(*c));
	c->type = type;
	c->hs_max = hs_max;
	c->msg_max = msg_max;
	c->need = ZMTP_GREETING_LEN;
}

bool zmtp_greeting_prefix_ok(const uint8_t *g, size_t n)
{
	return g[0] == 0xff && (n <= 9 || g[9] == 0x7f) &&
	       (n <= 10 || g[10] >= 3);
}

/* A command frame: READY during the handshake, PING at any time. */
static int conn_command(struct zmtp_conn *c, const struct zmtp_frame *f)
{
	const uint8_t *nm, *d, *v;
	size_t nl, dl, vl;
	ssize_t n;

	if (zmtp_command(f, &nm, &nl, &d, &dl) < 0)
		return -EPROTO;
	if (c->st == ZMTP_ST_READY) {
		if (!zmtp_is_command(f, "READY") ||
		    zmtp_ready_prop(d, dl, "Socket-Type", &v, &vl) < 0 ||
		    !zmtp_peer_ok(c->type, v, vl))
			return -EPROTO;
		c->st = ZMTP_ST_OPEN;
		return 0;
	}
	if (zmtp_is_command(f, "PING")) {
		n = zmtp_pong(c->pong, sizeof(c->pong), d, dl);
		if (n < 0)
			return -EPROTO;
		c->pong_len = (size_t)n;
		return 0;
	}
	if (zmtp_is_command(f, "READY") || zmtp_is_command(f, "ERROR"))
		return -EPROTO; /* a second READY, or the peer gives up */
	return 0;		/* PONG, SUBSCRIBE ...: nothing to do */
}

int zmtp_conn_next(struct zmtp_conn *c, const uint8_t *in, size_t len,
		   struct zmtp_msg *m)
{
	size_t at, need, tot = 0, avail = len - c->rd;
	struct zmtp_frame f;
	int nf = 0, rc;
	ssize_t r;

	if (c->st == ZMTP_ST_GREETING) {
		if (avail && !zmtp_greeting_prefix_ok(in + c->rd, avail))
			return -EPROTO;
		if (avail < ZMTP_GREETING_LEN) {
			c->need = ZMTP_GREETING_LEN;
			return 0;
		}
		if (zmtp_greeting_check(in + c->rd, &c->minor) < 0)
			return -EPROTO;
		c->rd += ZMTP_GREETING_LEN;
		c->st = ZMTP_ST_READY;
	}
	at = c->rd;
	for (;;) {
		/* before READY only a small command may come; after it, a
		 * message's frames together stay within msg_max */
		r = zmtp_parse(in + at, len - at,
			       c->st != ZMTP_ST_OPEN ? c->hs_max
						     : c->msg_max - tot,
			       &f, &need);
		if (r < 0)
			return (int)r;
		if (r == 0) {
			c->need = at - c->rd + need;
			return 0;
		}
		if (f.flags & ZMTP_COMMAND) {
			/* a command may come between the frames of a
			 * message: handled once, when first seen */
			if (at >= c->cmd_done) {
				rc = conn_command(c, &f);
				if (rc < 0)
					return rc;
				c->cmd_done = at + (size_t)r;
			}
			at += (size_t)r;
			if (!nf)
				c->rd = at;
			continue;
		}
		if (c->st != ZMTP_ST_OPEN)
			return -EPROTO; /* a message before READY */
		if (c->discard) {
			at += (size_t)r;
			c->rd = at;
			if (!(f.flags & ZMTP_MORE)) {
				c->discard = false;
				c->dropped++;
			}
			continue;
		}
		if (nf == ZMTP_MAX_FRAMES) {
			/* drop what it had; this frame on goes unseen */
			c->discard = true;
			tot = 0;
			c->rd = at;
			nf = 0;
			continue;
		}
		m->p[nf] = f.data;
		m->n[nf++] = f.len;
		tot += f.len;
		at += (size_t)r;
		if (!(f.flags & ZMTP_MORE)) {
			m->nf = nf;
			c->rd = at;
			return 1;
		}
	}
}
