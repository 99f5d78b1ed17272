/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - maru-agent: start-up, options, signals (agent.h)
 *
 * Starts like the other daemons: options from one table (opts.h, which
 * also prints --help and the man page), a protected default (a control
 * port other hosts can reach needs CURVE or --insecure), readiness told
 * to systemd (daemon.h) once the port listens and UCX is up.  The main
 * thread accepts connections; a tick thread revalidates the regions lent
 * every --recheck-ms; SIGTERM/SIGINT stop.
 */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "opts.h"
#include "util.h"

#define DEFAULT_LEVEL "INFO"

static struct agent A;

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&A.stopping, true);
}

static const struct opts_doc doc = {
	.about = "Maru UCX agent: lends the pool's memory, region by region, "
		 "to workers on\nhosts that cannot map it (docs/remote.md). "
		 "Control port: ZeroMQ on\ntcp://HOST:PORT; transfers: UCX "
		 "(RDMA where the NICs have it, else TCP).\n",
	.after =
		"Signals: SIGTERM/SIGINT stop cleanly.\n"
		"\n"
		"Exit status: 0 after a clean stop, 1 when it cannot start "
		"(the log says\nwhy), 2 on bad usage.\n"
		"\n"
		"Environment:\n" LOG_HELP_ENV "  UCX_TLS, UCX_NET_DEVICES ...\n"
		"                          UCX's own settings (ucx_info "
		"-c); --ucx-tls\n"
		"                          overrides UCX_TLS\n",
};

static int parse_args(int argc, char **argv, struct agent_config *c)
{
	const struct opt t[] = {
		OPTS_STR("host", 0, c->host, 0, .arg = "HOST",
			 .help = "control port's bind address ('*': all)",
			 .why = "only this host can reach it until you say "
				"otherwise"),
		OPTS_INT("port", 0, c->port, 1, 65535, .arg = "PORT",
			 .help = "control port",
			 .why = "next to maru-server's"),
		OPTS_CALL("rm-address", 0, opts_host_port, &c->rm_address,
			  "want HOST:PORT", .arg = "HOST:PORT",
			  .help = "the resource manager, which checks each "
				  "region's token (GET_ACCESS)",
			  .why = "the resource manager's default"),
		OPTS_CALL("log-level", 0, opts_log_level, &c->log_level,
			  "one of DEBUG, INFO, WARNING, ERROR", .arg = "LEVEL",
			  .help = "DEBUG, INFO, WARNING or ERROR",
			  .dflt = DEFAULT_LEVEL,
			  .why = "a line per region lent or revoked"),
		OPTS_STR("curve-secret-key-file", 0, c->curve_secret, 0,
			 .arg = "PATH",
			 .help = "CURVE: the agent's secret certificate "
				 "(maru-keygen); with --curve-clients",
			 .dflt = "", .why = "off"),
		OPTS_STR("curve-clients", 0, c->curve_clients, 0, .arg = "DIR",
			 .help = "CURVE: directory of the client certificates "
				 "let in (*.key)",
			 .dflt = "", .why = "off"),
		OPTS_FLAG("insecure", c->insecure,
			  .help = "listen on an address other hosts reach "
				  "without CURVE",
			  .why = "anyone reaching the port could ask for keys "
				 "with a stolen token"),
		OPTS_INT("max-connections", 0, c->max_conns, 1, 100000,
			 .arg = "N", .help = "control connections at once",
			 .why = "a thread each; a client needs one"),
		OPTS_INT("recheck-ms", 0, c->recheck_ms, 10, 3600000,
			 .arg = "MS",
			 .help = "how often each lent region is checked at the "
				 "resource manager: a freed region stays "
				 "reachable with its old key at most this long",
			 .why = "one GET_ACCESS per region and period"),
		OPTS_INT("quarantine", 0, c->quarantine_s, 5, 86400, .arg = "S",
			 .help = "a revoked region's addresses stay reserved "
				 "this long (late transfers land in private "
				 "memory)",
			 .why = "longer than any client's timeout"),
		OPTS_STR("ucx-devices", 0, c->ucx_devices, OPT_NONEMPTY,
			 .arg = "LIST",
			 .help = "the network devices UCX listens and sends on "
				 "(UCX_NET_DEVICES), e.g. mlx5_0:1 or eth1: "
				 "those of a network only trusted hosts reach, "
				 "since UCX's own protocol does not "
				 "authenticate its peers (docs/remote.md); "
				 "'all' takes every device",
			 .dflt = "", .why = "none: say which network"),
		OPTS_STR("ucx-tls", 0, c->ucx_tls, OPT_NONEMPTY, .arg = "LIST",
			 .help = "UCX transports (UCX_TLS), e.g. tcp or "
				 "rc,ud,self",
			 .dflt = "", .why = "UCX's choice (RDMA if present)"),
		OPTS_HELP,
		OPTS_VERSION,
		{0},
	};
	int rc = opts_parse("maru-agent", &doc, t, argc, argv);

	if (rc == 1)
		exit(0);
	return rc;
}

/* CURVE's keys (daemon_load_curve).  Return: 0 or -1 (said) */
static int load_curve(struct agent *a)
{
	int rc;

	a->curve = calloc(1, sizeof(*a->curve));
	a->allow = calloc(1, sizeof(*a->allow));
	if (!a->curve || !a->allow)
		return -1;
	rc = daemon_load_curve(a->cfg.curve_secret, a->cfg.curve_clients,
			       a->curve, a->allow);
	if (rc <= 0) {
		free(a->curve);
		free(a->allow);
		a->curve = NULL;
		a->allow = NULL;
	}
	return rc < 0 ? -1 : 0;
}

static void *tick_main(void *arg)
{
	struct agent *a = arg;
	struct timespec ts = {a->cfg.recheck_ms / 1000,
			      (a->cfg.recheck_ms % 1000) * 1000000};

	while (!atomic_load(&a->stopping)) {
		nanosleep(&ts, NULL);
		if (!atomic_load(&a->stopping))
			lend_recheck(a);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct agent_config *c = &A.cfg;
	struct sigaction sa = {0};
	pthread_t tick;
	int rc;

	*c = (struct agent_config){
		.host = "127.0.0.1",
		.port = AGENT_DEFAULT_PORT,
		.rm_address = "127.0.0.1:9850",
		.log_level = DEFAULT_LEVEL,
		.max_conns = 1024,
		.recheck_ms = 500,
		.quarantine_s = 60,
	};
	rc = parse_args(argc, argv, c);
	if (rc)
		return 2;
	log_init("maru-agent", log_level_parse(c->log_level));
	A.listen_fd = -1;
	if (!c->curve_secret && !daemon_is_loopback(c->host) && !c->insecure) {
		log_err("refusing to listen on %s without authentication: "
			"anyone reaching the port could ask for the pool's "
			"keys with a token seen on the wire; listen on "
			"loopback, turn on CURVE (--curve-secret-key-file and "
			"--curve-clients), or add --insecure on a private "
			"network",
			c->host);
		return 1;
	}
	if (!c->ucx_devices) {
		log_err("refusing to start without --ucx-devices: UCX's own "
			"protocol does not authenticate its peers, so any host "
			"that reaches the agent's UCX port can write into its "
			"memory; name the devices of a network only trusted "
			"hosts reach (e.g. --ucx-devices mlx5_0:1, or lo on "
			"one "
			"host), or --ucx-devices all");
		return 1;
	}
	if (load_curve(&A) < 0)
		return 1;
	if (!A.curve && !daemon_is_loopback(c->host))
		log_warn("listening on %s without authentication (--insecure)",
			 c->host);
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (ctl_listen(&A) < 0)
		return 1;
	if (lend_init(&A) < 0) {
		close(A.listen_fd);
		return 1;
	}
	if (pthread_create(&tick, NULL, tick_main, &A) != 0) {
		log_err("cannot start the revalidation thread");
		lend_stop(&A);
		return 1;
	}
	log_info("maru-agent %s: control on %s:%u, resource manager %s, "
		 "recheck every %ld ms",
		 MARU_VERSION, c->host, c->port, c->rm_address, c->recheck_ms);
	daemon_ready("lending on %s:%u", c->host, c->port);
	ctl_accept_loop(&A);
	daemon_stopping("stopping");
	log_info("stopping");
	pthread_join(tick, NULL);
	close(A.listen_fd);
	/*
	 * Connection threads may still be blocked on their sockets: the
	 * progress thread stops, and the process's exit releases the
	 * mappings and registrations with everything else.
	 */
	lend_stop(&A);
	return 0;
}
