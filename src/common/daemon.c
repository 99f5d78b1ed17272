/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.c - see daemon.h.  A status line is formatted into a stack
 * buffer and sent with the state change in one datagram (sd_notifyf), so
 * systemd never sees READY=1 without the status that explains it.
 * Linked only by the daemons (maru_daemon in CMakeLists.txt): libmaru and
 * the tools do not depend on libsystemd.
 */
#include "daemon.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "log.h"
#include "zcurve.h"

/* Send "@state\nSTATUS=<fmt...>"; 0 from sd_notify means no socket. */
static void notify(const char *state, const char *fmt, va_list ap)
{
	char status[256];
	int rc;

	vsnprintf(status, sizeof(status), fmt, ap);
	rc = sd_notifyf(0, "%s\nSTATUS=%s", state, status);
	if (rc < 0)
		log_warn("sd_notify %s: %s", state, strerror(-rc));
}

void daemon_ready(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	notify("READY=1", fmt, ap);
	va_end(ap);
}

void daemon_stopping(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	notify("STOPPING=1", fmt, ap);
	va_end(ap);
}

bool daemon_is_loopback(const char *host)
{
	struct in_addr a;

	return !strcmp(host, "localhost") ||
	       (inet_pton(AF_INET, host, &a) == 1 &&
		(ntohl(a.s_addr) >> 24) == 127) ||
	       !strcmp(host, "::1") || !strcmp(host, "[::1]");
}

int daemon_load_curve(const char *secret, const char *clients,
		      struct zcurve_keys *k, struct zcurve_allow *allow)
{
	char why[512], z85[ZCURVE_Z85 + 1];

	if (!secret && !clients)
		return 0;
	if (!secret || !clients) {
		log_err("CURVE needs both --curve-secret-key-file and "
			"--curve-clients");
		return -1;
	}
	if (zcurve_sodium_init() < 0) {
		log_err("libsodium failed to initialise");
		return -1;
	}
	if (zcurve_load_cert(secret, k->pub, k->sec, why, sizeof(why)) < 0 ||
	    zcurve_allow_load(allow, clients, why, sizeof(why)) < 0) {
		log_err("CURVE: %s", why);
		return -1;
	}
	zcurve_z85_encode(k->pub, z85);
	log_info("CURVE on: public key %s, %zu client key(s) from %s", z85,
		 allow->n, clients);
	if (!allow->n)
		log_warn("CURVE: %s holds no *.key certificate: no client "
			 "can connect",
			 clients);
	return 1;
}
