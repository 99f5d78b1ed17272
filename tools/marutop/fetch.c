/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fetch.c - marutop's connection to maru-server: libmaru's raw calls
 *
 * The metadata-server client is libmaru's (src/libmaru/rpc.c: dial, the
 * ZMTP and CURVE handshakes, request and reply); marutop asks through its
 * public API.  The handler is never connected (no HANDSHAKE, no lease, so
 * marutop is not an instance in what it shows): maru_handler_call() sends
 * GET_USAGE and GET_STATS with an empty map on a lock-step (REQ)
 * connection of its own, made by the first sample.  connect_retry is off:
 * a server that is away fails the sample at once with the connect's own
 * error, and the next sample dials again, so marutop outlives restarts of
 * the server.  libmaru's log is silenced (the screen is curses'); what a
 * failed call met comes back as its error code and, for a failed connect,
 * maru_handler_last_error().
 *
 * Errors are said as one line each (mt_fetch()): a server that cannot be
 * reached, a CURVE key it refused or a CURVE exchange that failed, a peer
 * whose ZMTP handshake failed (not maru-server, or a CURVE server while we
 * talk NULL), a reply that does not decode.
 *
 * Context: single thread; @c belongs to the caller.
 */
#include "mt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <maru/maru.h>

#include "mds_proto.h"
#include "util.h"
#include "zcurve.h"

int mt_conn_init(struct mt_conn *c, const char *url, int timeout_ms)
{
	const char *hp = url;
	char host[256];
	uint16_t port;
	int rc;

	memset(c, 0, sizeof(*c));
	if (strncmp(hp, "tcp://", 6) == 0)
		hp += 6;
	if (parse_host_port(hp, host, sizeof(host), &port) < 0)
		return -EINVAL;
	snprintf(c->url, sizeof(c->url), "tcp://%s:%u", host, port);
	rc = maru_config_new(&c->cfg);
	if (rc == 0)
		rc = maru_config_set_server_url(c->cfg, c->url);
	if (rc == 0)
		rc = maru_config_set_timeout_ms(c->cfg, timeout_ms);
	if (rc == 0)
		rc = maru_config_set_use_async_rpc(c->cfg, false);
	if (rc == 0)
		rc = maru_config_set_connect_retry(c->cfg, false);
	return rc;
}

void mt_conn_close(struct mt_conn *c)
{
	maru_handler_free(c->h);
	maru_config_free(c->cfg);
	c->h = NULL;
	c->cfg = NULL;
}

/*
 * The keys are read here first, with the loaders libmaru uses, so that a
 * missing or bad file is said now, naming it; libmaru reads them again
 * when the handler is made.
 */
int mt_conn_curve(struct mt_conn *c, const char *server_key,
		  const char *secret_file, char *why, size_t whylen)
{
	struct zcurve_keys me;
	uint8_t server[ZCURVE_KEY];
	int rc;

	if (zcurve_sodium_init() < 0) {
		snprintf(why, whylen, "CURVE: libsodium failed to initialise");
		return -EIO;
	}
	rc = zcurve_load_cert(secret_file, me.pub, me.sec, why, whylen);
	if (rc == 0)
		rc = zcurve_load_public(server_key, server, why, whylen);
	explicit_bzero(&me, sizeof(me));
	if (rc < 0)
		return rc;
	rc = maru_config_set_curve_server_key(c->cfg, server_key);
	if (rc == 0)
		rc = maru_config_set_curve_secret_key_file(c->cfg, secret_file);
	if (rc < 0) {
		snprintf(why, whylen, "CURVE: %s", strerror(-rc));
		return rc;
	}
	c->curve = true;
	return 0;
}

/*
 * One request of @type with an empty map, its reply given to @decode.
 * Return: 0, or -errno with *@in_call telling whether the call (not the
 * decoder) failed.
 */
static int ask(struct mt_conn *c, uint8_t type, struct mt_snap *s,
	       int (*decode)(struct mt_snap *, const uint8_t *, size_t),
	       bool *in_call)
{
	void *reply = NULL;
	size_t len = 0;
	int rc;

	rc = maru_handler_call(c->h, type, "\x80", 1, &reply, &len);
	*in_call = rc < 0;
	if (rc == 0)
		rc = decode(s, reply, len);
	maru_buf_free(reply);
	return rc;
}

/* the one line that says why a sample failed */
static void say(const struct mt_conn *c, int rc, bool in_call, const char *what,
		char *err, size_t errlen)
{
	/* only a failed connect has a cause: the handshake failed */
	const char *cause = in_call ? maru_handler_last_error(c->h) : "";

	if (rc == -EPROTO && c->curve && cause[0])
		snprintf(err, errlen, "%s", cause); /* "<url>: CURVE: ..." */
	else if (rc == -EACCES)
		snprintf(err, errlen, "%s: CURVE: the server refused our key",
			 c->url);
	else if (rc == -EPROTO && cause[0])
		snprintf(err, errlen,
			 "%s: the ZMTP handshake failed: not a "
			 "maru-server, or one with CURVE (then give "
			 "--curve-server-key and "
			 "--curve-secret-key-file)",
			 c->url);
	else if (rc == -EPROTO)
		snprintf(err, errlen, "%s: %s: not a valid reply", c->url,
			 what);
	else
		snprintf(err, errlen, "cannot reach maru-server at %s: %s",
			 c->url, strerror(-rc));
}

int mt_fetch(struct mt_conn *c, struct mt_snap *out, char *err, size_t errlen)
{
	const char *what = "GET_USAGE";
	bool in_call = false;
	struct mt_snap s;
	int rc = 0;

	mt_snap_init(&s);
	s.t_ns = now_ns();
	s.wall = (long long)time(NULL);
	if (!c->h) {
		rc = maru_handler_new(c->cfg, &c->h);
		if (rc == 0)
			maru_handler_set_log_priority(c->h, -1);
	}
	if (rc == 0)
		rc = ask(c, MDS_GET_USAGE, &s, mt_decode_usage, &in_call);
	if (rc == 0) {
		what = "GET_STATS";
		rc = ask(c, MDS_GET_STATS, &s, mt_decode_stats, &in_call);
	}
	if (rc < 0) {
		say(c, rc, in_call && c->h, what, err, errlen);
		mt_snap_free(&s);
		return rc;
	}
	*out = s;
	return 0;
}
