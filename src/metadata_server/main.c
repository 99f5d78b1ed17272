/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - maru-server command line (docs/metadata-server.md plus our
 * additions), process setup, and the order of the start: options, the
 * journal and its replay, the resource manager (its start-up connection
 * checks the recovered regions and places the shared index: start.c,
 * idxstart.c), the index's build, then the loop (server.c)
 *
 * Order matters: SIGINT/SIGTERM are blocked before anything could start
 * a thread, so that they are only ever delivered through the loop's
 * signalfd; the resource manager is checked before the port is bound,
 * so that a missing RM fails fast with upstream's message.
 *
 * Exit status: 0 after a clean stop (and --help, --version), 1 on a
 * runtime failure (logged), 2 on bad usage, said on stderr before
 * anything is done.  The --help text is also the man page (help2man,
 * docs/man/CMakeLists.txt).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "events.h"
#include "handler.h"
#include "journal.h"
#include "log.h"
#include "opts.h"
#include "pubidx.h"
#include "statedir.h"
#include "rmsess.h"
#include "server.h"
#include "store.h"
#include "util.h"
#include "zcurve.h"
#include "config.h"
#include "start.h"

#include <sodium.h>

/* the defaults --help says from a string (the others it reads from the
 * fields) */
#define DEFAULT_LEVEL "INFO"
#define DEFAULT_RM "127.0.0.1:9850"
#define DEFAULT_HIGH "0.95"
#define DEFAULT_LOW "0.90"

/* every option's default; why each is what it is: parse_args() */
static void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	c->host = "127.0.0.1";
	c->port = MDS_DEFAULT_PORT;
	c->log_level = DEFAULT_LEVEL;
	c->rm_address = DEFAULT_RM;
	c->rm_wait_s = 10;
	c->lease_ttl = 30;
	c->peer_grace = 60;
	c->max_conns = 4096;
	c->max_key = 65536;
	c->max_input = 1ull << 30;
	c->max_per_addr = 256;
	c->eviction = "lru";
	c->evict_grace_ms = 300;
	c->evict_wait_ms = 1500;
	c->evict_high_pm = lround(atof(DEFAULT_HIGH) * 1000);
	c->evict_low_pm = lround(atof(DEFAULT_LOW) * 1000);
	c->snap_min = MDS_SNAP_MIN;
	c->durability = JR_PROCESS;
	c->shm_mode = SHM_AUTO;
	c->coherence = -1;
}

/* without --state-dir: statedir.h */
static const char *default_state_dir(char *buf, size_t len)
{
	return statedir_default(buf, len, STATE_DIR_ROOT, "server");
}

/* a fraction (0.95) or a percentage (95%) as per mille (long). Return:
 * 0 or OPT_BAD */
static int parse_fraction(const char *arg, void *pm)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg)
		return OPT_BAD;
	if (*end == '%') {
		v /= 100;
		end++;
	}
	if (*end || !(v >= 0 && v <= 1))
		return OPT_BAD;
	*(long *)pm = lround(v * 1000);
	return 0;
}

/* --coherence: auto (-1), or a mode shmidx.c names ("simulate" is the
 * tests' non-coherence injector) */
static int coherence_arg(const char *arg, void *dst)
{
	int v = strcmp(arg, "auto") ? si_coh_parse(arg) : -1;

	if (v < -1)
		return OPT_BAD;
	*(int *)dst = v;
	return 0;
}

/* what --help says around the options (and so the man page) */
static const struct opts_doc doc = {
	.about = "Maru metadata server: KV index and region owner, ZeroMQ on "
		 "tcp://HOST:PORT.\n",
	.after =
		"Signals: SIGTERM/SIGINT stop cleanly.\n"
		"\n"
		"Exit status: 0 after a clean stop, 1 when it cannot start or "
		"run (the log\n"
		"says why; --verify-state: the journal is not readable to its "
		"end), 2 on\n"
		"bad usage (an unknown option or a bad value).\n"
		"\n"
		"Environment:\n" LOG_HELP_ENV
		"  MARU_RM_KEY_FILE        the resource manager's client.key "
		"when\n"
		"                          --rm-key-file is not given\n"
		"  XDG_STATE_HOME, HOME    where the journal, and the resource "
		"manager's key,\n"
		"                          are when not root\n"
		"\n"
		"Files:\n"
		"  " STATE_DIR_ROOT "    the state directory of root: "
		"journal.* segments,\n"
		"                          a lock file\n"
		"  /var/lib/maru-resourced/client.key\n"
		"                          the resource manager's key "
		"(default of root;\n"
		"                          others: $XDG_STATE_HOME/maru/"
		"resource-manager/client.key)\n",
};

/*
 * The options, each with what it does, its default (the field's value
 * from config_defaults(), or said when it is worked out later) and why
 * that default: the one source of the parser and of --help.
 */
static int parse_args(int argc, char **argv, struct config *c)
{
	static const char *const evictions[] = {"lru", "none", NULL};
	static const char *const durs[] = {"none", "process", "host", NULL};
	static const int dur_v[] = {JR_NONE, JR_PROCESS, JR_HOST};
	static const char *const shms[] = {"auto", "off", "file", "pool", NULL};
	static const int shm_v[] = {SHM_AUTO, PUB_OFF, PUB_FILE, PUB_POOL};
	const struct opt t[] = {
		OPTS_STR("host", 0, c->host, 0, .arg = "HOST",
			 .help = "bind address",
			 .why = "upstream's, and only this host can reach it"),
		OPTS_INT("port", 0, c->port, 1, 65535, .arg = "PORT",
			 .help = "port", .why = "upstream's"),
		OPTS_CALL("log-level", 0, opts_log_level, &c->log_level,
			  "one of DEBUG, INFO, WARNING, ERROR", .arg = "LEVEL",
			  .help = "DEBUG, INFO, WARNING or ERROR",
			  .dflt = DEFAULT_LEVEL,
			  .why = "nothing logged per request"),
		OPTS_CALL("rm-address", 0, opts_host_port, &c->rm_address,
			  "want HOST:PORT", .arg = "HOST:PORT",
			  .help = "resource manager; also told to clients in "
				  "HANDSHAKE",
			  .dflt = DEFAULT_RM,
			  .why = "the resource manager's own default"),
		OPTS_INT("rm-wait", 0, c->rm_wait_s, 0, 3600, .arg = "S",
			 .help = "at start, wait this long for a resource "
				 "manager that refuses connections (one "
				 "started at the same time); 0: fail at once",
			 .why = "both daemons started together"),
		OPTS_LIST("dax-path", 0, c->dax, 0, NULL, .arg = "PATH",
			  .help = "pool to allocate from; repeatable, tried in "
				  "order (fill-first)",
			  .dflt = "any pool"),
		OPTS_SECONDS("client-lease-ttl", c->lease_ttl, .arg = "S",
			     .help = "lease time-to-live granted to clients "
				     "that heartbeat with a lease_id; 0 "
				     "disables",
			     .why = "a client that stopped is noticed within "
				    "half a minute, a slow heartbeat is not "
				    "taken for death"),
		OPTS_SECONDS("peer-grace", c->peer_grace, .arg = "S",
			     .help = "a client without a lease whose "
				     "connections are all closed this long "
				     "loses its regions; 0 disables",
			     .why = "outlives the reconnects of a live "
				    "client"),
		OPTS_INT("busy-poll-us", 0, c->busy_poll_us, 0, 1000000,
			 .arg = "US",
			 .help = "after a request, keep looking for the next "
				 "one this long before sleeping (yielding the "
				 "CPU to anything runnable); trades idle CPU "
				 "for latency across cores; 0 disables",
			 .why = "idle costs nothing"),
		OPTS_INT("max-connections", 0, c->max_conns, 0, 1000000,
			 .help = "open client connections; past it a new one "
				 "displaces the oldest still in its handshake, "
				 "or is closed (0: only the fd limit)",
			 .why = "well within the fd limit the service sets"),
		OPTS_INT("max-key-bytes", 0, c->max_key, 1, IX_KEY_MAX,
			 .help = "longest key REGISTER_KV stores",
			 .why = "far above any KV-cache key"),
		OPTS_SIZE("max-input-bytes", c->max_input, 1 << 20, OPT_ZERO_OK,
			  "0, or a size of at least 1M",
			  .help = "input buffered for all connections "
				  "together; past it the largest are closed "
				  "(0: no limit)",
			  .why = "eight 64M messages at once"),
		OPTS_FLAG("owner-delete", c->owner_delete,
			  .help = "a key in a live region is deleted only by "
				  "the region's owner (default: any client, as "
				  "upstream)"),
		OPTS_STR("rm-key-file", 0, c->rm_key, 0, .arg = "PATH",
			 .help = "the resource manager's client.key, to "
				 "authenticate ALLOC/FREE",
			 .dflt = "$MARU_RM_KEY_FILE, else client.key in the "
				 "resource manager's default state directory: "
				 "/var/lib/maru-resourced as root, else "
				 "$XDG_STATE_HOME/maru/resource-manager"),
		OPTS_FLAG("insecure", c->insecure,
			  .help = "allow a --host other hosts can reach "
				  "without CURVE (then nothing is "
				  "authenticated)"),
		OPTS_INT("max-connections-per-address", 0, c->max_per_addr, 0,
			 1000000,
			 .help = "from one non-loopback address (0: no limit)",
			 .why = "one remote host cannot take every connection"),
		OPTS_SIZE("instance-quota", c->inst_quota, 0, OPT_ZERO_OK,
			  "a size, or 0 for none",
			  .help = "bytes of regions one instance may hold "
				  "(0: no limit)",
			  .why = "one instance may use the whole pool"),
		OPTS_STR("curve-secret-key-file", 0, c->curve_secret, 0,
			 .arg = "PATH",
			 .help = "CURVE: every client authenticates and all "
				 "traffic is encrypted; PATH is this server's "
				 "secret certificate (maru-keygen)"),
		OPTS_STR("curve-clients", 0, c->curve_clients, 0, .arg = "DIR",
			 .help = "with CURVE, the clients let in: their public "
				 "certificates (*.key) in DIR (required)"),
		OPTS_CHOICE(
			"eviction", c->eviction, evictions, NULL, NULL,
			.arg = "POLICY",
			.help = "lru: a full pool evicts the least recently "
				"used unpinned keys; none: stores fail when "
				"it is full",
			.why = "a cache makes room rather than refuse"),
		OPTS_INT("evict-grace-ms", 0, c->evict_grace_ms, 0, 600000,
			 .arg = "MS",
			 .help = "an evicted page is reused no sooner",
			 .why = "readers of the evicted key finish"),
		OPTS_INT("evict-wait-ms", 0, c->evict_wait_ms, 0, 600000,
			 .arg = "MS",
			 .help = "a REQUEST_ALLOC waits this long for capacity "
				 "when the pool is full",
			 .why = "the grace of the pages being evicted, and "
				"more"),
		OPTS_CALL("evict-high", 0, parse_fraction, &c->evict_high_pm,
			  "a fraction 0..1, or a percentage", .arg = "F",
			  .help = "evict in the background above this fraction "
				  "of the pool (0: only on demand)",
			  .dflt = DEFAULT_HIGH,
			  .why = "stores seldom wait for room"),
		OPTS_CALL("evict-low", 0, parse_fraction, &c->evict_low_pm,
			  "a fraction 0..1, or a percentage", .arg = "F",
			  .help = "... down to this fraction",
			  .dflt = DEFAULT_LOW,
			  .why = "a pass frees enough to be worth it"),
		OPTS_STR(
			"state-dir", 0, c->state_dir, OPT_NONEMPTY,
			.arg = "DIR",
			.help = "the journal a restart recovers the index from",
			.dflt = STATE_DIR_ROOT " for root, else "
					       "$XDG_STATE_HOME/maru/server"),
		OPTS_CHOICE(
			"durability", c->durability, durs, dur_v, NULL,
			.arg = "LEVEL",
			.help = "none: no journal, a restart starts empty; "
				"process: written before each reply, "
				"survives a crash of the server; host: also "
				"fdatasync, survives the host",
			.why = "survives what a pool on /dev/shm "
			       "survives"),
		OPTS_FLAG("verify-state", c->verify_state,
			  .help = "read the journal, print what a restart "
				  "would recover, exit (0: readable to the "
				  "end)"),
		OPTS_SIZE("journal-snapshot-bytes", c->snap_min, 4096, 0,
			  "a size of at least 4K",
			  .help = "a snapshot is written once the journal "
				  "exceeds this and twice the state it holds",
			  .why = "a restart reads little, snapshots are rare"),
		OPTS_STR("events-bind", 0, c->events_bind, OPT_NONEMPTY,
			 .arg = "ENDPOINT",
			 .help = "publish KV events (stored, removed, cleared) "
				 "on a ZeroMQ PUB socket bound there, e.g. "
				 "tcp://127.0.0.1:5556; not authenticated: "
				 "another host's address needs --insecure",
			 .dflt = "off"),
		OPTS_CHOICE("shm-index", c->shm_mode, shms, shm_v, NULL,
			    .help = "publish the key index in shared memory, "
				    "so that clients look keys up with no "
				    "request: file (a file, this host's "
				    "clients), pool (a region of the pool, "
				    "every host's), off, or auto (pool when a "
				    "pool is device-DAX, else file)",
			    .why = "every client that can map it gains"),
		OPTS_STR("shm-index-path", 0, c->shm_path, OPT_NONEMPTY,
			 .arg = "PATH", .help = "the file",
			 .dflt = "$RUNTIME_DIRECTORY/shm-index, else "
				 "/dev/shm/maru-index-PORT"),
		OPTS_STR("shm-index-group", 0, c->shm_group, OPT_NONEMPTY,
			 .arg = "GROUP",
			 .help = "the group that may read the file (read "
				 "only), besides this user",
			 .dflt = "the pool's group, when the pool is "
				 "group-readable (--pool-group)",
			 .why = "exactly who may read the pool may test which "
				"keys are cached"),
		OPTS_SIZE("shm-index-size", c->shm_size, 1 << 20, 0,
			  "a size of at least 1M", .help = "its bytes",
			  .dflt = "1G for a file, a 64th of the pool within "
				  "4M..1G for a region of it",
			  .why = "a file is sparse, only tables use memory"),
		OPTS_SIZE("shm-index-keys", c->shm_keys, 0, 0,
			  "a number, K/M suffixes allowed", .arg = "N",
			  .help = "size the first table for N keys (it grows "
				  "by itself; a rebuild costs a copy of every "
				  "key)",
			  .dflt = "the keys recovered, at least 32K"),
		OPTS_CALL("coherence", 0, coherence_arg, &c->coherence,
			  "one of auto, none or flush", .arg = "MODE",
			  .help = "none: one host, or hardware coherence; "
				  "flush: write lines back and have readers "
				  "invalidate them (hosts sharing CXL memory)",
			  .dflt = "flush for the pool mode on device-DAX, else "
				  "none"),
		OPTS_HELP,
		OPTS_VERSION,
		{0},
	};
	int rc = opts_parse("maru-server", &doc, t, argc, argv);

	if (rc == 1)
		exit(0);
	if (!rc && c->evict_high_pm && c->evict_low_pm > c->evict_high_pm) {
		fprintf(stderr, "maru-server: --evict-low must not be above "
				"--evict-high\n");
		rc = -EINVAL;
	}
	return rc;
}

/*
 * The KV event stream has no authentication at all (a PUB socket; CURVE
 * covers the request port only), and it names every key and instance: a
 * tcp:// endpoint other hosts can reach needs --insecure too.
 */
static bool events_ok(const struct config *c)
{
	char host[256];
	const char *h, *colon;

	if (!c->events_bind || strncmp(c->events_bind, "tcp://", 6))
		return true; /* off, or ipc:// and the like: this host */
	h = c->events_bind + 6;
	colon = strrchr(h, ':');
	snprintf(host, sizeof(host), "%.*s",
		 (int)(colon ? (size_t)(colon - h) : strlen(h)), h);
	if (daemon_is_loopback(host))
		return true;
	if (!c->insecure) {
		log_err("refusing to publish KV events on %s: the stream is "
			"not authenticated and names every key; bind it to "
			"loopback, or add --insecure on a private network",
			c->events_bind);
		return false;
	}
	log_warn("KV events on %s without authentication (--insecure)",
		 c->events_bind);
	return true;
}

/*
 * Protected by default (as Redis): without CURVE the metadata protocol
 * authenticates nobody, so a bind address other hosts can reach needs
 * CURVE or --insecure.
 * Return: true to go on.
 */
static bool insecure_ok(const struct config *c)
{
	if (!events_ok(c))
		return false;
	if (c->curve_secret || daemon_is_loopback(c->host))
		return true;
	if (!c->insecure) {
		log_err("refusing to listen on %s without authentication: "
			"any host could act for any instance; listen on "
			"loopback, turn on CURVE (--curve-secret-key-file and "
			"--curve-clients), or add --insecure on a private "
			"network",
			c->host);
		return false;
	}
	log_warn("listening on %s without authentication (--insecure)",
		 c->host);
	return true;
}

/*
 * --max-connections within RLIMIT_NOFILE: the soft limit is raised to the
 * hard one when that helps; what does not fit is given up, with a line in
 * the log.  A few descriptors stay for the listener, the RM session and
 * the loop.
 */
static long fit_fd_limit(long want)
{
	struct rlimit rl;
	long fit;

	if (!want || getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return want;
	if (rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < want + 32 &&
	    rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ||
					      (long)rl.rlim_max > want + 32
				      ? (rlim_t)(want + 32)
				      : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur == RLIM_INFINITY || (long)rl.rlim_cur >= want + 32)
		return want;
	fit = (long)rl.rlim_cur - 32;
	if (fit < 1)
		fit = 1;
	log_warn("--max-connections %ld does not fit the fd limit %ld: %ld",
		 want, (long)rl.rlim_cur, fit);
	return fit;
}

static void log_config(const struct config *c)
{
	size_t i;

	log_info("maru-server %s: host=%s port=%d log-level=%s "
		 "rm-address=%s rm-wait=%lds client-lease-ttl=%gs "
		 "peer-grace=%gs "
		 "busy-poll=%ldus max-connections=%ld max-key-bytes=%ld "
		 "max-input-bytes=%llu max-connections-per-address=%ld "
		 "instance-quota=%llu eviction=%s evict-grace=%ldms "
		 "evict-wait=%ldms evict-high=%.3f evict-low=%.3f%s",
		 MARU_VERSION, c->host, c->port, c->log_level, c->rm_address,
		 c->rm_wait_s, c->lease_ttl, c->peer_grace, c->busy_poll_us,
		 c->max_conns, c->max_key, (unsigned long long)c->max_input,
		 c->max_per_addr, (unsigned long long)c->inst_quota,
		 c->eviction, c->evict_grace_ms, c->evict_wait_ms,
		 c->evict_high_pm / 1000.0, c->evict_low_pm / 1000.0,
		 c->owner_delete ? " owner-delete" : "");
	log_info("durability=%s state-dir=%s",
		 c->durability == JR_NONE      ? "none"
		 : c->durability == JR_PROCESS ? "process"
					       : "host",
		 c->state_dir ? c->state_dir : "(default)");
	log_info("events-bind=%s", c->events_bind ? c->events_bind : "off");
	for (i = 0; i < c->dax.n; i++)
		log_info("dax-path[%zu]=%s", i, c->dax.v[i]);
}

/*
 * The journal: open (and lock) the state directory.  Return: 1 open, 0
 * without one (none asked, or the default directory is not usable: said
 * once), -1 after an error message.
 */
static int open_journal(struct config *c, const char *dir, struct jr *jr)
{
	char err[512] = "";
	int rc;

	if (c->durability == JR_NONE) {
		log_info("no journal (--durability none): a restart starts "
			 "empty");
		return 0;
	}
	if (!c->state_dir)
		(void)statedir_mkdir_p(dir, 0750);
	rc = jr_open(jr, dir, c->durability == JR_HOST, false, err,
		     sizeof(err));
	if (rc == 0)
		return 1;
	jr_close(jr);
	if (c->state_dir || rc == -EWOULDBLOCK) {
		log_err("--state-dir: %s", err);
		log_err("hint: give each maru-server its own --state-dir, or "
			"--durability none to run without a journal");
		return -1;
	}
	log_warn("%s: running without a journal (a restart forgets every "
		 "key); pass --state-dir DIR, or --durability none to say so",
		 err);
	c->durability = JR_NONE;
	return 0;
}

/*
 * A resource manager started together with us (`maru-resource-manager &
 * maru-server &`, or units without ordering) is not listening yet: while
 * it refuses connections, wait up to --rm-wait seconds for it, in steps
 * of 100 ms that also take SIGINT/SIGTERM (blocked: the signalfd is not
 * there yet).  Return: rm_probe()'s last answer, or -EINTR.
 */
static int wait_for_rm(const struct config *c, const sigset_t *sigs)
{
	const struct timespec step = {0, 100 * 1000000};
	uint64_t end = now_ns() + (uint64_t)c->rm_wait_s * 1000000000ull;
	bool said = false;
	int rc;

	for (;;) {
		rc = rm_probe(c->rm_address, 2000);
		if (rc != -ECONNREFUSED || now_ns() >= end)
			return rc;
		if (!said)
			log_info("waiting up to %ld s for the resource manager "
				 "at %s (--rm-wait)",
				 c->rm_wait_s, c->rm_address);
		said = true;
		if (sigtimedwait(sigs, NULL, &step) > 0)
			return -EINTR;
	}
}

int main(int argc, char **argv)
{
	struct zcurve_allow allow = {0};
	struct zcurve_keys curve;
	struct jr_recovery rec;
	struct server_opts so;
	struct config c;
	struct verify ver;
	struct idx_start idx = {0};
	struct pub *pub = NULL;
	bool fatal;
	struct rmsess rm;
	struct mds s;
	struct jr jr;
	sigset_t set;
	char dirbuf[4096], cid[RM_CLIENT_ID_MAX + 1];
	const char *dir;
	struct mds_events *ev = NULL;
	int rc, status = 1, have_jr;

	config_defaults(&c);
	rc = parse_args(argc, argv, &c);
	if (rc < 0) {
		free(c.dax.v);
		return rc == -ENOMEM ? 1 : 2; /* bad usage: 2 */
	}
	dir = c.state_dir ? c.state_dir
			  : default_state_dir(dirbuf, sizeof(dirbuf));
	if (c.verify_state) {
		log_init("maru-server", LOG_WARNING);
		status = start_verify_state(&c, dir);
		free(c.dax.v);
		return status;
	}
	log_init("maru-server", log_level_parse(c.log_level));
	log_config(&c);

	/* batch replies and connection buffers come and go: keep that
	 * memory rather than trim and fault it in again */
	malloc_keep_freed();

	/* before any thread exists: signals only through the signalfd */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	memset(&rm, 0, sizeof(rm));
	memset(&s, 0, sizeof(s));
	memset(&ver, 0, sizeof(ver));
	jr.fd = jr.dirfd = jr.lockfd = -1;
	jr.dir = NULL;
	if (!insecure_ok(&c) ||
	    daemon_load_curve(c.curve_secret, c.curve_clients, &curve, &allow) <
		    0)
		goto out_dax;
	/* the port first: a start refused for it makes nothing (no journal,
	 * no shared index); listened on once the server is ready */
	so.host = c.host;
	so.port = c.port;
	so.bound_fd = server_bind(&so);
	if (so.bound_fd < 0)
		goto out_dax;
	have_jr = open_journal(&c, dir, &jr);
	if (have_jr < 0)
		goto out_dax;

	if (start_store(&s, &c, &rm) < 0) {
		log_err("out of memory");
		goto out_mds;
	}
	/* the journal first: the RM client id is the recovered identity */
	memset(&rec, 0, sizeof(rec));
	if (have_jr) {
		rc = start_recover(&jr, false, &s, &rec);
		if (rc < 0) {
			log_err("journal %s: %s", dir, strerror(-rc));
			goto out_mds;
		}
		if (rec.lossy) {
			/* see jr_recovery.lossy: an empty store, a new id;
			 * the old one's regions are released (release_old) */
			if (jr.server_id[0])
				start_rm_client_id(ver.old_cid,
						   sizeof(ver.old_cid),
						   jr.server_id);
			log_err("journal %s: damaged before its end (%s): what "
				"was acknowledged after that is lost, so none "
				"of it is served; starting empty under a new "
				"server id (clients fence), the segments kept "
				"as *.bad",
				dir, rec.why);
			mds_destroy(&s);
			if (start_store(&s, &c, &rm) < 0) {
				log_err("out of memory");
				goto out_mds;
			}
			s.rec.dropped_bytes = rec.bytes + rec.dropped;
			s.rec.discarded = true;
			rec.found = false;
		}
		if (rec.found)
			memcpy(s.server_id, jr.server_id, sizeof(s.server_id));
	}
	if (!s.server_id[0])
		start_server_id(s.server_id, sizeof(s.server_id));
	/* before the RM's check of recovered regions: its drops are events */
	if (c.events_bind) {
		if (ev_open(&ev, c.events_bind, s.server_id) < 0)
			goto out_mds;
		s.ev = ev;
		ev_before_send(ev, mds_fence, &s);
		log_info("KV events on %s", c.events_bind);
	}
	if (have_jr) {
		if (jr_start(&jr, s.server_id) < 0) {
			log_err("journal %s: cannot write: %s", dir,
				strerror(errno));
			goto out_mds;
		}
		s.jr = &jr;
		start_rm_client_id(cid, sizeof(cid), s.server_id);
	}
	if (rmsess_init(&rm, c.rm_address, have_jr ? cid : NULL, c.dax.v,
			(int)c.dax.n) < 0) {
		log_err("bad --rm-address %s", c.rm_address);
		goto out_rm;
	}
	/* its key may be written only now, at its first start */
	if (wait_for_rm(&c, &set) == -EINTR) {
		log_info("stopped while waiting for the resource manager");
		status = 0;
		goto out_rm;
	}
	/* the given file, else $MARU_RM_KEY_FILE or the default: only a
	 * given one must be there */
	rc = rm_client_load_key(&rm.c, c.rm_key);
	if (c.rm_key && rc < 0) {
		log_err("--rm-key-file %s: %s", c.rm_key,
			rc == -EINVAL ? "not 64 hex digits" : strerror(-rc));
		goto out_rm;
	}
	rm.key_path = c.rm_key;
	if (!rm.c.has_key) {
		char def[4200];

		log_warn("no resource-manager key (--rm-key-file, "
			 "$MARU_RM_KEY_FILE or %s): ALLOC "
			 "and FREE are sent unauthenticated, and a resource "
			 "manager that requires authentication (its default) "
			 "refuses them; looked for again at each connection",
			 rm_auth_key_default(def, sizeof(def)));
	}
	/*
	 * With a journal, the regions are kept until we come back, however
	 * long we are away: a restart serves their keys again.  Without one,
	 * fencing by time: a libmaru client that has not renewed its lease
	 * for TTL/2 fences its mappings, and checks at least every TTL/2, so
	 * by TTL after our death none writes any more; the RM keeps our
	 * regions TTL + a margin after we die.
	 */
	if (c.lease_ttl > 0) {
		double hold =
			c.lease_ttl * 1000 + fmax(2000, c.lease_ttl * 1000 / 4);

		if (hold > 600000 && !have_jr)
			log_warn("--client-lease-ttl %g: the resource manager "
				 "holds a dead server's regions at most 600 s, "
				 "less than the %.0f ms its clients may write "
				 "on; keep the TTL under 480 s",
				 c.lease_ttl, hold);
		rm.hold_ms = (uint32_t)llround(fmin(hold, 600000));
	}
	if (have_jr) {
		/* our clients still write this long after we go: an
		 * operator's RELEASE waits for it (no leases: as long as
		 * the resource manager lets anyone hold) */
		rm.write_ms = rm.hold_ms ? rm.hold_ms : 600000;
		rm.hold_ms = RM_HOLD_UNTIL_BACK;
	}
	idx = (struct idx_start){.c = &c, .dir = have_jr ? dir : NULL};
	ver.s = &s;
	ver.jr = &jr;
	ver.c = &c;
	ver.rm = &rm;
	ver.reset = false;
	ver.recovered = have_jr && rec.found;
	ver.idx = &idx;
	rm.verify = start_rm_hook;
	rm.verify_arg = &ver;
	rc = rmsess_start(&rm);
	if (rc < 0) {
		log_err("Resource manager is not running (address: %s): %s",
			c.rm_address, strerror(-rc));
		log_err("hint: start it first, e.g. `systemctl start "
			"maru-resource-manager` or `maru-resource-manager "
			"--port %s`, or pass --rm-address",
			strrchr(c.rm_address, ':') + 1);
		goto out_rm;
	}
	if (have_jr && rec.found && !ver.reset) {
		mds_recovered(&s, now_ns());
		log_info("recovered from %s in %llu ms: %llu key(s), %llu "
			 "region(s), %llu lease(s), %llu pin(s) (%llu "
			 "record(s), %llu segment(s))",
			 dir, (unsigned long long)s.rec.ms,
			 (unsigned long long)s.rec.keys,
			 (unsigned long long)s.rec.regions,
			 (unsigned long long)s.rec.leases,
			 (unsigned long long)s.rec.pins,
			 (unsigned long long)rec.records,
			 (unsigned long long)rec.segments);
	} else if (have_jr) {
		log_info("journal %s: %s", dir,
			 ver.reset ? "started anew (pool re-created)"
				   : "none to recover, started anew");
	}
	/* readers look keys up themselves from now on */
	pub = idx_open(&idx, &s, &fatal);
	if (fatal)
		goto out_rm;
	s.pub = pub;
	/* a subscriber learns that this server starts from nothing */
	if (!s.kv.count)
		ev_cleared(ev);
	mds_journal_commit(&s);
	log_info("server id %s", s.server_id);
	so.busy_poll_ns = (uint64_t)c.busy_poll_us * 1000;
	so.max_conns = (int)fit_fd_limit(c.max_conns);
	so.max_input = c.max_input;
	so.max_per_addr = (int)c.max_per_addr;
	so.curve = c.curve_secret ? &curve : NULL;
	so.curve_allow = &allow;
	rc = server_run(&so, &s, &rm);
	if (rc == 0)
		status = 0;
out_rm:
	s.pub = NULL;
	pub_close(pub);
	if (idx.mem)
		munmap(idx.mem, idx.len);
	rmsess_destroy(&rm);
out_mds:
	if (s.jr)
		mds_journal_commit(&s);
	mds_destroy(&s);
	ev_close(ev);
	if (have_jr > 0)
		jr_close(&jr);
out_dax:
	zcurve_allow_free(&allow);
	sodium_memzero(&curve, sizeof(curve));
	free(c.dax.v);
	return status;
}