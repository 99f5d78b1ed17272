/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - maru-resource-manager: options, start-up, signals, shutdown
 *
 * Start-up order (docs/resource-manager.md): state dir and rm.conf, banner,
 * pools, recovered state, secret, listening socket, reaper, "ready"
 * (logged, and READY=1 to systemd through daemon.h).
 * Signals are routed to the signalfd before all of it, so one that
 * arrives during start-up is handled once the loop runs.
 * Any step that cannot be completed safely ends the process with exit
 * code 1 and one clear log line, before the port is bound.  Bad usage (an
 * unknown option, a bad value) exits 2 before anything is done; --help
 * and --version print to stdout and exit 0.  The --help text is also the
 * man page (docs/man/CMakeLists.txt, help2man): options, environment and
 * files are all in it.
 *
 * Then one thread runs the event loop: connections (server.c), a 1 s cron
 * timer (reaper, slow-loris sweep, rescan while no pool exists), and a
 * signalfd for SIGTERM/SIGINT (clean stop: close connections, checkpoint,
 * exit 0) and SIGHUP (rescan, add new pools).  SIGPIPE is ignored.
 * Checkpoints run from the before-sleep hook, after the responses of the
 * current batch were handed to the kernel.
 *
 * Ownership: main() owns the struct rm for the life of the process.
 */
#include "rm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "daemon.h"
#include "log.h"
#include "opts.h"
#include "statedir.h"
#include "util.h"

/* every option's default; why each is what it is: parse_args() */
static void rm_config_defaults(struct rm_config *c)
{
	static char buf[4096];

	memset(c, 0, sizeof(*c));
	c->host = "127.0.0.1";
	c->port = RM_DEFAULT_PORT;
	c->state_dir = statedir_default(buf, sizeof(buf), RM_DEFAULT_STATE_DIR,
					STATEDIR_RM_NAME);
	c->log_level = LOG_INFO;
	c->num_workers = 32;
	c->grace_period = 30;
	c->max_clients = 256;
	c->emulate_size = 4ull << 30;
	c->msg_timeout = 30;
	c->idle_timeout = 60;
	/* no option: upstream's checkpoint interval, which bounds the WAL's
	 * length and so its replay */
	c->checkpoint_ops = 100;
	c->max_per_addr = 64;
	c->recovered_hold = 60;
	c->pool_mode = 0600;
	c->pool_gid = (gid_t)-1;
}

/* what --help says around the options (and so the man page) */
static const struct opts_doc doc = {
	.about = "Serves CXL/DAX shared-memory pools to Maru clients (TCP "
		 "protocol v2).\n",
	.after = "Without --pool/--pools-from, DEV_DAX and FS_DAX devices are "
		 "discovered; if\n"
		 "there are none, an emulated pool is served at "
		 "/dev/shm/maru-pool.\n"
		 "\n"
		 "Signals: SIGTERM/SIGINT stop cleanly, SIGHUP rescans for new "
		 "pools.\n"
		 "\n"
		 "Exit status: 0 after a clean stop, 1 when it cannot start or "
		 "run (the log\n"
		 "says why), 2 on bad usage (an unknown option or a bad "
		 "value).\n"
		 "\n"
		 "Environment:\n"
		 "  XDG_STATE_HOME, HOME    where a user that is not root "
		 "keeps the state\n"
		 "                          directory: "
		 "$XDG_STATE_HOME/maru/resource-manager,\n"
		 "                          else "
		 "~/.local/state/maru/resource-manager\n" LOG_HELP_ENV "\n"
		 "Files:\n"
		 "  /var/lib/maru-resourced the state directory of root "
		 "(--state-dir): WAL,\n"
		 "                          checkpoints, client.key, "
		 "reader.key, rm.conf, lock\n"
		 "                          (held while running: one "
		 "daemon per directory)\n"
		 "  /dev/shm/maru-pool      the emulated pool when no device "
		 "is found\n",
};

/* may we give files to @gid?  root, or a member (chown(2)) */
static bool group_ours(gid_t gid)
{
	gid_t g[NGROUPS_MAX + 1];
	int i, n;

	if (geteuid() == 0 || getegid() == gid)
		return true;
	n = getgroups(NGROUPS_MAX + 1, g);
	for (i = 0; i < n; i++)
		if (g[i] == gid)
			return true;
	return false;
}

/*
 * --pool-group: a group name or number that we may give files to, checked
 * now rather than at the first FS_DAX allocation.  Return: 0 or OPT_SAID
 */
static int group_arg(const char *arg, void *dst)
{
	struct rm_config *c = dst;
	struct group *g = getgrnam(arg);
	char *end;
	unsigned long v;

	if (g) {
		c->pool_gid = g->gr_gid;
	} else {
		errno = 0;
		v = strtoul(arg, &end, 10);
		if (!*arg || *end || errno || v >= (gid_t)-1) {
			fprintf(stderr, "unknown group: %s\n", arg);
			return OPT_SAID;
		}
		c->pool_gid = (gid_t)v;
	}
	if (!group_ours(c->pool_gid)) {
		fprintf(stderr,
			"--pool-group %s: not root and not a member: cannot "
			"give files to it\n",
			arg);
		return OPT_SAID;
	}
	c->pool_perm_set = true;
	return 0;
}

/* --pool-mode: octal, read and write bits only (nobody executes a pool),
 * owner rw */
static int mode_arg(const char *arg, void *dst)
{
	struct rm_config *c = dst;
	unsigned long m;
	char *end;

	errno = 0;
	m = strtoul(arg, &end, 8);
	if (!*arg || *end || errno || (m & ~0666ul) || (m & 0600) != 0600)
		return OPT_BAD;
	c->pool_mode = (mode_t)m;
	c->pool_perm_set = true;
	c->pool_mode_set = true;
	return 0;
}

/* --log-level: upstream's names; anything else warns and means info */
static int level_arg(const char *arg, void *dst)
{
	int v = log_level_parse(arg);

	if (v < 0) {
		fprintf(stderr, "unknown log level: %s (using info)\n", arg);
		v = LOG_INFO;
	}
	*(int *)dst = v;
	return 0;
}

/*
 * Parse argv into @c (upstream's options with their short names, parsed
 * with atoi() as upstream does; then ours).  Return: 0 to run, 1 to exit
 * 0 (--help, --version), -ENOMEM to exit 1, any other negative value (bad
 * usage) to exit 2.
 */
/*
 * --host as a numeric IPv4 address: a name ("localhost", this host's)
 * resolves to its first IPv4 address, as maru-server's --host does.
 * Return: 0, or -1 (said on stderr) before anything is made.
 */
static int resolve_host(struct rm_config *c)
{
	static char numeric[INET_ADDRSTRLEN];
	struct addrinfo hints = {.ai_family = AF_INET,
				 .ai_socktype = SOCK_STREAM};
	struct addrinfo *res;
	struct in_addr a;
	int rc;

	if (inet_pton(AF_INET, c->host, &a) == 1)
		return 0;
	rc = getaddrinfo(c->host, NULL, &hints, &res);
	if (rc) {
		fprintf(stderr,
			"maru-resource-manager: --host %s: not an IPv4 "
			"address, and the name does not resolve to one: %s\n",
			c->host, gai_strerror(rc));
		return -1;
	}
	inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr,
		  numeric, sizeof(numeric));
	freeaddrinfo(res);
	c->host = numeric;
	return 0;
}

static int parse_args(int argc, char **argv, struct rm_config *c)
{
	const struct opt t[] = {
		OPTS_STR("host", 'H', c->host, 0, .arg = "ADDR",
			 .help = "listen address: IPv4, or a name that "
				 "resolves to one (as maru-server's --host)",
			 .why = "the protocol has no transport security"),
		OPTS_ATOI("port", 'p', c->port, 1, 65535, .arg = "PORT",
			  .help = "listen port",
			  .why = "upstream's; clients and maru-server default "
				 "to it"),
		OPTS_STR("state-dir", 'd', c->state_dir, 0, .arg = "PATH",
			 .help = "state directory",
			 .dflt = RM_DEFAULT_STATE_DIR " for root, else "
						      "$XDG_STATE_HOME/maru/"
						      "resource-manager",
			 .why = "upstream's for root, so that an upstream "
				"install is adopted in place"),
		OPTS_CALL("log-level", 'l', level_arg, &c->log_level, NULL,
			  .arg = "LEVEL", .help = "debug, info, warn or error",
			  .dflt = "info", .why = "nothing logged per request"),
		OPTS_ATOI("num-workers", 'w', c->num_workers, 1, INT_MAX,
			  .help = "accepted for compatibility",
			  .why = "upstream's; one event-loop thread serves "
				 "all"),
		OPTS_ATOI("grace-period", 'g', c->grace_period, 0, INT_MAX,
			  .arg = "SEC",
			  .help = "a disconnected client keeps its regions "
				  "this long",
			  .why = "a client reconnects after a network blip"),
		OPTS_ATOI("max-clients", 'm', c->max_clients, 1, INT_MAX,
			  .help = "concurrent connections",
			  .why = "upstream's; each costs about 8K here"),
		/* (empty: an unset shell variable, else the current
		 * directory became a file-system pool) */
		OPTS_LIST("pool", 0, c->pools, OPT_NONEMPTY,
			  "a /dev/dax device, a directory or a file",
			  .arg = "PATH",
			  .help = "serve this pool (repeatable): /dev/daxX.Y = "
				  "DEV_DAX, a directory = FS_DAX, a file = "
				  "emulated pool"),
		OPTS_STR("pools-from", 0, c->pools_from, 0, .arg = "FILE",
			 .help = "more pool paths, one per line; re-read on "
				 "SIGHUP"),
		OPTS_SIZE("emulate-size", c->emulate_size, 4 << 20, 0,
			  "at least 4M: a 2M header unit and one 2M region",
			  .help = "size of a new emulated pool file",
			  .why = "a small pool for development, sparse: it "
				 "costs nothing unused"),
		OPTS_CALL(
			"pool-group", 0, group_arg, c, NULL, .arg = "GROUP",
			.help = "group of the pool files we create (the "
				"emulated pool, FS_DAX region files), so "
				"that workers in it can map them; --pool-mode "
				"then defaults to 0660",
			.dflt = "ours"),
		OPTS_CALL("pool-mode", 0, mode_arg, c,
			  "octal, read and write bits only, owner rw, e.g. "
			  "0660",
			  .arg = "MODE", .help = "their mode, octal",
			  .dflt = "0600",
			  .why = "ours until the operator names the workers' "
				 "group"),
		OPTS_ATOI("msg-timeout", 0, c->msg_timeout, 1, INT_MAX,
			  .arg = "SEC",
			  .help = "drop a connection whose message stays "
				  "partial",
			  .why = "upstream's receive timeout"),
		OPTS_ATOI(
			"idle-timeout", 0, c->idle_timeout, 0, INT_MAX,
			.arg = "SEC",
			.help = "drop a connection that sends no request this "
				"long after connecting (0: never)",
			.why = "generous for a slow client"),
		OPTS_SIZE("client-quota", c->client_quota, 0, OPT_ZERO_OK,
			  "a size, or 0 for none",
			  .help = "bytes one client id may own (0: no limit)",
			  .why = "one client may use the whole pool"),
		OPTS_ATOI(
			"recovered-hold", 0, c->recovered_hold, 0, INT_MAX,
			.arg = "SEC",
			.help = "a dead owner recovered after a restart keeps "
				"its regions this long",
			.why = "its clients fence: it covers maru-server's "
			       "lease of 30 s and its margin"),
		OPTS_ATOI("max-clients-per-address", 0, c->max_per_addr, 0,
			  INT_MAX,
			  .help = "connections from one non-loopback address "
				  "(0: no limit)",
			  .why = "one remote host cannot take every slot"),
		OPTS_FLAG("no-client-auth", c->no_client_auth,
			  .help = "ALLOC and FREE without authentication "
				  "(upstream's behaviour); default: only "
				  "clients that prove they know "
				  "<state-dir>/client.key"),
		OPTS_FLAG("require-auth", c->require_auth,
			  .help = "every request (STATS, GET_ACCESS too) needs "
				  "a connection authenticated with client.key: "
				  "for workers on other hosts (libmaru "
				  "authenticates when it has "
				  "$MARU_RM_KEY_FILE)"),
		OPTS_FLAG("insecure", c->insecure,
			  .help = "allow --no-client-auth on a non-loopback "
				  "address"),
		OPTS_HELP,
		OPTS_VERSION,
		{0},
	};
	int rc = opts_parse("maru-resource-manager", &doc, t, argc, argv);

	if (rc)
		return rc;
	if (c->require_auth && c->no_client_auth) {
		fprintf(stderr,
			"--require-auth and --no-client-auth contradict "
			"each other\n");
		return -1;
	}
	if (!strcmp(c->host, "0.0.0.0") || !strcmp(c->host, "*"))
		c->host = "";
	else if (resolve_host(c) < 0)
		return -1; /* bad usage, said: nothing touched yet */
	if (c->pool_gid != (gid_t)-1 && !c->pool_mode_set)
		c->pool_mode = 0660; /* the point of naming a group */
	return 0;
}

/*
 * <state_dir>/rm.conf, replaced whole (atomicfile.h), mode 0644: anyone may
 * read where the daemon listens; informational, failure only warns
 */
static void write_rm_conf(struct rm *rm)
{
	char *text = NULL;
	int n, rc;

	n = asprintf(&text, "host=%s\nport=%u\nlog_level=%s\n",
		     rm->cfg.host[0] ? rm->cfg.host : "0.0.0.0", rm->cfg.port,
		     log_level_name(rm->cfg.log_level));
	if (n < 0)
		rc = -ENOMEM;
	else
		rc = atomicfile_write(rm->state_dirfd, "rm.conf", text,
				      (size_t)n, 0644);
	if (rc < 0)
		log_warn("%s/rm.conf: %s", rm->cfg.state_dir, strerror(-rc));
	if (n >= 0)
		free(text);
}

static void banner(struct rm *rm)
{
	char sz[32];
	size_t i;

	log_info("maru-resource-manager %s starting (state dir %s)",
		 MARU_VERSION, rm->cfg.state_dir);
	log_info("  listen:        %s:%u",
		 rm->cfg.host[0] ? rm->cfg.host : "0.0.0.0", rm->cfg.port);
	log_info("  state dir:     %s", rm->cfg.state_dir);
	log_info("  log level:     %s", log_level_name(rm->cfg.log_level));
	log_info("  workers:       %d (one event-loop thread serves all)",
		 rm->cfg.num_workers);
	log_info("  grace period:  %d s", rm->cfg.grace_period);
	log_info("  max clients:   %d", rm->cfg.max_clients);
	log_info("  msg timeout:   %d s", rm->cfg.msg_timeout);
	log_info("  idle timeout:  %d s (to a connection's first request)",
		 rm->cfg.idle_timeout);
	log_info("  client quota:  %s",
		 rm->cfg.client_quota
			 ? format_bytes(rm->cfg.client_quota, sz, sizeof(sz))
			 : "none");
	log_info("  per address:   %d connections (non-loopback; 0: no "
		 "limit)",
		 rm->cfg.max_per_addr);
	log_info("  client auth:   %s",
		 rm->cfg.no_client_auth ? "off (--no-client-auth)"
		 : rm->cfg.require_auth ? "required for every request "
					  "(--require-auth)"
					: "required for ALLOC/FREE");
	log_info("  emulate size:  %s",
		 format_bytes(rm->cfg.emulate_size, sz, sizeof(sz)));
	if (rm->cfg.pool_gid != (gid_t)-1)
		log_info("  pool files:    mode %04o, group %u",
			 (unsigned)rm->cfg.pool_mode,
			 (unsigned)rm->cfg.pool_gid);
	else
		log_info("  pool files:    mode %04o",
			 (unsigned)rm->cfg.pool_mode);
	for (i = 0; i < rm->cfg.pools.n; i++)
		log_info("  pool:          %s", rm->cfg.pools.v[i]);
	if (rm->cfg.pools_from)
		log_info("  pools from:    %s", rm->cfg.pools_from);
	if (!rm->cfg.pools.n && !rm->cfg.pools_from)
		log_info("  pools:         discover DEV_DAX and FS_DAX");
}

/*
 * Protected by default (as Redis): on an address other hosts can reach,
 * ALLOC and FREE without authentication need --insecure as well.
 * Return: 0, or -EPERM (logged) to refuse to start.
 */
static int check_exposure(struct rm *rm)
{
	const char *h = rm->cfg.host[0] ? rm->cfg.host : "0.0.0.0";
	struct in_addr a;

	if (inet_pton(AF_INET, h, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127)
		return 0;
	if (!rm->cfg.no_client_auth) {
		log_info("listening on %s: ALLOC and FREE need the client key; "
			 "the protocol is plaintext",
			 h);
		return 0;
	}
	if (!rm->cfg.insecure) {
		log_err("refusing to listen on %s with --no-client-auth: any "
			"host could free any region; drop --no-client-auth "
			"(maru-server authenticates with --rm-key-file), or "
			"add "
			"--insecure",
			h);
		return -EPERM;
	}
	log_warn("listening on %s with --no-client-auth --insecure: any host "
		 "can allocate and free",
		 h);
	return 0;
}

static int64_t on_cron(struct evloop *el, uint64_t id, void *arg)
{
	struct rm *rm = arg;
	static uint64_t last_rescan;
	uint64_t now = evloop_now_ms();

	reaper_tick(rm);
	holds_tick(rm);
	server_cron(rm);
	/* no pool yet: look again every 10 s (docs/resource-manager.md) */
	if (rm->npools == 0 && now - last_rescan >= RM_RESCAN_MS) {
		last_rescan = now;
		dev_rescan(rm);
	}
	return RM_REAPER_MS;
}

static void on_signal(struct evloop *el, int signo, void *arg)
{
	struct rm *rm = arg;

	switch (signo) {
	case SIGTERM:
	case SIGINT:
		log_info("%s: stopping", strsignal(signo));
		rm->stopping = true;
		evloop_stop(el);
		break;
	case SIGHUP:
		log_info("SIGHUP: rescanning pools");
		dev_rescan(rm);
		break;
	}
}

static void before_sleep(struct evloop *el, void *arg)
{
	state_maybe_checkpoint(arg);
	holds_flush(arg);
}

int main(int argc, char **argv)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
	static struct rm rm; /* large (the idem ring): not on the stack */
	int rc;

	rm_config_defaults(&rm.cfg);
	rc = parse_args(argc, argv, &rm.cfg);
	if (rc != 0) {
		free(rm.cfg.pools.v);
		/* 0: --help/--version; 1: out of memory; 2: bad usage */
		return rc > 0 ? 0 : rc == -ENOMEM ? 1 : 2;
	}
	rm_init(&rm);
	log_init("maru-resource-manager", rm.cfg.log_level);
	signal(SIGPIPE, SIG_IGN);
	umask(022);

	/*
	 * Signals go to the signalfd from the start: one that arrives during
	 * start-up is handled once the loop runs (SIGHUP would otherwise kill
	 * us in the middle of recovery).  The banner follows, so its first
	 * line tells a test that signals are safe.
	 */
	rc = evloop_new(&rm.el);
	if (rc == 0)
		rc = evloop_add_signals(rm.el, sigs, 3, on_signal, &rm);
	if (rc < 0) {
		log_err("event loop: %s", strerror(-rc));
		goto out;
	}
	/* 1. banner (rm.conf follows once rm_open made the state dir) */
	banner(&rm);
	rc = check_exposure(&rm);
	if (rc < 0)
		goto out;
	/* 2. the port: a start refused for it makes nothing (no pool, no
	 * state directory); listened on once the state is recovered */
	rc = server_bind(&rm);
	if (rc < 0)
		goto out;
	/* 3. pools, recovered state, secret (rm.c), then the socket */
	rc = rm_open(&rm);
	if (rc < 0)
		goto out;
	write_rm_conf(&rm);
	rc = server_listen(&rm);
	if (rc < 0)
		goto out;
	/* 4. reaper and housekeeping */
	rc = evloop_add_timer(rm.el, RM_REAPER_MS, on_cron, &rm,
			      &rm.cron_timer);
	if (rc < 0)
		goto out;
	evloop_set_before_sleep(rm.el, before_sleep, &rm);
	log_info("ready — listening on %s:%u",
		 rm.cfg.host[0] ? rm.cfg.host : "0.0.0.0", rm.cfg.port);
	daemon_ready("listening on %s:%u, %zu pool(s)",
		     rm.cfg.host[0] ? rm.cfg.host : "0.0.0.0", rm.cfg.port,
		     rm.npools);

	rc = evloop_run(rm.el);
	daemon_stopping("stopping: writing a checkpoint");
	if (rc < 0)
		log_err("event loop: %s", strerror(-rc));
	/* clean stop: no more requests, then a checkpoint empties the WAL */
	server_close_all(&rm);
	if (state_checkpoint(&rm) == 0)
		log_info("checkpoint written: %zu region(s)", rm.nregions);
	else
		rc = -EIO;
	log_info("stopped");
out:
	rm_close(&rm);
	free(rm.cfg.pools.v);
	return rc < 0 ? 1 : 0;
}
