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

static void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	c->host = "127.0.0.1";
	c->port = MDS_DEFAULT_PORT;
	c->log_level = "INFO";
	c->rm_address = "127.0.0.1:9850";
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
	c->evict_high_pm = 950;
	c->evict_low_pm = 900;
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

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: maru-server [OPTIONS]\n"
		"\n"
		"Maru metadata server: KV index and region owner, ZeroMQ on "
		"tcp://HOST:PORT.\n"
		"\n"
		"Options:\n"
		"  --host HOST             bind address (default 127.0.0.1)\n"
		"  --port PORT             port (default 5555)\n"
		"  --log-level LEVEL       DEBUG, INFO, WARNING or ERROR "
		"(default INFO)\n"
		"  --rm-address HOST:PORT  resource manager; also told to "
		"clients in\n"
		"                          HANDSHAKE (default 127.0.0.1:9850)\n"
		"  --rm-wait S             at start, wait this long for a "
		"resource manager\n"
		"                          that refuses connections (one "
		"started at the\n"
		"                          same time); default 10, 0: fail at "
		"once\n"
		"  --dax-path PATH         pool to allocate from; repeatable, "
		"tried in\n"
		"                          order (fill-first); default: any "
		"pool\n"
		"  --client-lease-ttl S    lease time-to-live granted to "
		"clients that\n"
		"                          heartbeat with a lease_id; 0 "
		"disables (default 30)\n"
		"  --peer-grace S          a client without a lease whose "
		"connections are\n"
		"                          all closed this long loses its "
		"regions;\n"
		"                          0 disables (default 60)\n"
		"  --busy-poll-us US       after a request, keep looking for "
		"the next one\n"
		"                          this long before sleeping "
		"(yielding the CPU\n"
		"                          to anything runnable); trades idle "
		"CPU for\n"
		"                          latency across cores; 0 disables "
		"(default 0)\n"
		"  --max-connections N     open client connections; past it a "
		"new one\n"
		"                          displaces the oldest still in its "
		"handshake,\n"
		"                          or is closed (default 4096, within "
		"the fd\n"
		"                          limit; 0: only the fd limit)\n"
		"  --max-key-bytes N       longest key REGISTER_KV stores "
		"(default 65536)\n"
		"  --max-input-bytes SIZE  input buffered for all connections "
		"together;\n"
		"                          past it the largest are closed "
		"(default 1G;\n"
		"                          0: no limit)\n"
		"  --owner-delete          a key in a live region is deleted "
		"only by the\n"
		"                          region's owner (default: any "
		"client, as upstream)\n"
		"  --rm-key-file PATH      the resource manager's client.key, "
		"to\n"
		"                          authenticate ALLOC/FREE (default: "
		"$MARU_RM_KEY_FILE,\n"
		"                          else client.key in the resource "
		"manager's default\n"
		"                          state directory: "
		"/var/lib/maru-resourced as root,\n"
		"                          else $XDG_STATE_HOME/maru/"
		"resource-manager)\n"
		"  --max-connections-per-address N\n"
		"                          from one non-loopback address "
		"(default 256;\n"
		"                          0: no limit)\n"
		"  --instance-quota SIZE   bytes of regions one instance may "
		"hold\n"
		"                          (default 0: no limit)\n"
		"  --eviction POLICY       lru: a full pool evicts the least "
		"recently used\n"
		"                          unpinned keys; none: stores fail "
		"when it is\n"
		"                          full (default lru)\n"
		"  --evict-grace-ms MS     an evicted page is reused no sooner "
		"(readers of\n"
		"                          the evicted key finish; default "
		"300)\n"
		"  --evict-wait-ms MS      a REQUEST_ALLOC waits this long for "
		"capacity\n"
		"                          when the pool is full (default "
		"1500)\n"
		"  --evict-high F          evict in the background above this "
		"fraction\n"
		"                          of the pool (default 0.95; 0: "
		"only on demand)\n"
		"  --evict-low F           ... down to this fraction "
		"(default 0.90)\n"
		"  --state-dir DIR         the journal a restart recovers "
		"the index from\n"
		"                          (default " STATE_DIR_ROOT " for "
		"root, else\n"
		"                          $XDG_STATE_HOME/maru/server)\n"
		"  --durability LEVEL      none: no journal, a restart "
		"starts empty;\n"
		"                          process: written before each "
		"reply, survives\n"
		"                          a crash of the server (as a pool "
		"on /dev/shm);\n"
		"                          host: also fdatasync, survives "
		"the host\n"
		"                          (default process)\n"
		"  --events-bind ENDPOINT  publish KV events (stored, "
		"removed, cleared)\n"
		"                          on a ZeroMQ PUB socket bound "
		"there, e.g.\n"
		"                          tcp://127.0.0.1:5556 (default: "
		"off); not\n"
		"                          authenticated: another host's "
		"address needs --insecure\n"
		"  --shm-index MODE        publish the key index in shared "
		"memory, so that\n"
		"                          clients look keys up with no "
		"request: file (a\n"
		"                          file, this host's clients), pool "
		"(a region of\n"
		"                          the pool, every host's), off, or "
		"auto (pool when\n"
		"                          a pool is device-DAX, else file; "
		"the default)\n"
		"  --shm-index-path PATH   the file (default "
		"$RUNTIME_DIRECTORY/shm-index,\n"
		"                          else /dev/shm/maru-index-PORT)\n"
		"  --shm-index-size SIZE   its bytes (default 1G for a file: "
		"sparse, only\n"
		"                          tables use memory; a 64th of the "
		"pool within\n"
		"                          4M..1G for a region of it)\n"
		"  --shm-index-keys N      size the first table for N keys "
		"(default: the\n"
		"                          keys recovered, at least 32K; it "
		"grows "
		"by itself,\n"
		"                          a rebuild costs a copy of every "
		"key)\n"
		"  --coherence MODE        none: one host, or hardware "
		"coherence; flush:\n"
		"                          write lines back and have readers "
		"invalidate\n"
		"                          them (hosts sharing CXL memory); "
		"default flush\n"
		"                          for the pool mode on device-DAX, "
		"else none\n"
		"  --verify-state          read the journal, print what a "
		"restart would\n"
		"                          recover, exit (0: readable to the "
		"end)\n"
		"  --curve-secret-key-file PATH\n"
		"                          CURVE: every client authenticates "
		"and all\n"
		"                          traffic is encrypted; PATH is this "
		"server's\n"
		"                          secret certificate (maru-keygen)\n"
		"  --curve-clients DIR     with CURVE, the clients let in: "
		"their public\n"
		"                          certificates (*.key) in DIR "
		"(required)\n"
		"  --insecure              allow a --host other hosts can "
		"reach without\n"
		"                          CURVE (then nothing is "
		"authenticated)\n"
		"  -h, --help              this text\n"
		"  --version               print the version and exit\n"
		"\n"
		"Signals: SIGTERM/SIGINT stop cleanly.\n"
		"\n"
		"Exit status: 0 after a clean stop, 1 when it cannot start or "
		"run (the log\n"
		"says why; --verify-state: the journal is not readable to its "
		"end), 2 on\n"
		"bad usage (an unknown option or a bad value).\n"
		"\n"
		"Environment:\n"
		"  MARU_LOG_FORMAT         log line format: plain (an ISO-8601 "
		"UTC time and\n"
		"                          the level first), journal (a <N> "
		"priority prefix)\n"
		"                          or json (one object a line); "
		"default journal when\n"
		"                          stderr is systemd's "
		"JOURNAL_STREAM, else plain\n"
		"  JOURNAL_STREAM          set by systemd: stderr's "
		"device:inode\n"
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
		"resource-manager/client.key)\n");
}

/* --@name @arg: a whole number in [@lo, @hi]; 0, or -EINVAL after a
 * message */
/* --rm-address: HOST:PORT (kept as given) */
static int rm_address_arg(const char *arg, void *dst)
{
	char host[256];
	uint16_t port;

	if (parse_host_port(arg, host, sizeof(host), &port) < 0)
		return OPT_BAD;
	*(const char **)dst = arg;
	return 0;
}

/* --log-level: a name log_level_parse() knows (any case), kept as given */
static int level_arg(const char *arg, void *dst)
{
	if (log_level_parse(arg) < 0)
		return OPT_BAD;
	*(const char **)dst = arg;
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

static int parse_args(int argc, char **argv, struct config *c)
{
	static const char *const evictions[] = {"lru", "none", NULL};
	static const char *const durs[] = {"none", "process", "host", NULL};
	static const int dur_v[] = {JR_NONE, JR_PROCESS, JR_HOST};
	static const char *const shms[] = {"auto", "off", "file", "pool", NULL};
	static const int shm_v[] = {SHM_AUTO, PUB_OFF, PUB_FILE, PUB_POOL};
	const struct opt t[] = {
		OPTS_STR("host", 0, c->host, 0),
		OPTS_INT("port", 0, c->port, 1, 65535),
		OPTS_CALL("log-level", 0, level_arg, &c->log_level,
			  "one of DEBUG, INFO, WARNING, ERROR"),
		OPTS_CALL("rm-address", 0, rm_address_arg, &c->rm_address,
			  "want HOST:PORT"),
		OPTS_INT("rm-wait", 0, c->rm_wait_s, 0, 3600),
		OPTS_LIST("dax-path", 0, c->dax, 0, NULL),
		OPTS_SECONDS("client-lease-ttl", c->lease_ttl),
		OPTS_SECONDS("peer-grace", c->peer_grace),
		OPTS_INT("busy-poll-us", 0, c->busy_poll_us, 0, 1000000),
		OPTS_INT("max-connections", 0, c->max_conns, 0, 1000000),
		OPTS_INT("max-key-bytes", 0, c->max_key, 1, IX_KEY_MAX),
		OPTS_SIZE("max-input-bytes", c->max_input, 1 << 20, OPT_ZERO_OK,
			  "0, or a size of at least 1M"),
		OPTS_FLAG("owner-delete", c->owner_delete),
		OPTS_STR("rm-key-file", 0, c->rm_key, 0),
		OPTS_FLAG("insecure", c->insecure),
		OPTS_INT("max-connections-per-address", 0, c->max_per_addr, 0,
			 1000000),
		OPTS_SIZE("instance-quota", c->inst_quota, 0, OPT_ZERO_OK,
			  "a size, or 0 for none"),
		OPTS_STR("curve-secret-key-file", 0, c->curve_secret, 0),
		OPTS_STR("curve-clients", 0, c->curve_clients, 0),
		OPTS_CHOICE("eviction", c->eviction, evictions, NULL, NULL),
		OPTS_INT("evict-grace-ms", 0, c->evict_grace_ms, 0, 600000),
		OPTS_INT("evict-wait-ms", 0, c->evict_wait_ms, 0, 600000),
		OPTS_CALL("evict-high", 0, parse_fraction, &c->evict_high_pm,
			  "a fraction 0..1, or a percentage"),
		OPTS_CALL("evict-low", 0, parse_fraction, &c->evict_low_pm,
			  "a fraction 0..1, or a percentage"),
		OPTS_STR("state-dir", 0, c->state_dir, OPT_NONEMPTY),
		OPTS_CHOICE("durability", c->durability, durs, dur_v, NULL),
		OPTS_FLAG("verify-state", c->verify_state),
		OPTS_SIZE("journal-snapshot-bytes", c->snap_min, 4096, 0,
			  "a size of at least 4K"),
		OPTS_STR("events-bind", 0, c->events_bind, OPT_NONEMPTY),
		OPTS_CHOICE("shm-index", c->shm_mode, shms, shm_v, NULL),
		OPTS_STR("shm-index-path", 0, c->shm_path, OPT_NONEMPTY),
		OPTS_SIZE("shm-index-size", c->shm_size, 1 << 20, 0,
			  "a size of at least 1M"),
		OPTS_SIZE("shm-index-keys", c->shm_keys, 0, 0,
			  "a number, K/M suffixes allowed"),
		OPTS_CALL("coherence", 0, coherence_arg, &c->coherence,
			  "one of auto, none or flush"),
		{.name = "help", .letter = 'h', .kind = OPT_HELP},
		{.name = "version", .kind = OPT_VERSION},
		{0},
	};
	int rc = opts_parse("maru-server", usage, t, argc, argv);

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
 * Protected by default (as Redis): without CURVE the metadata protocol
 * authenticates nobody, so a bind address other hosts can reach needs
 * CURVE or --insecure.
 * Return: true to go on.
 */
static bool is_loopback(const char *host)
{
	struct in_addr a;

	return !strcmp(host, "localhost") ||
	       (inet_pton(AF_INET, host, &a) == 1 &&
		(ntohl(a.s_addr) >> 24) == 127) ||
	       !strcmp(host, "::1") || !strcmp(host, "[::1]");
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
	if (is_loopback(host))
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

static bool insecure_ok(const struct config *c)
{
	if (!events_ok(c))
		return false;
	if (c->curve_secret || is_loopback(c->host))
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
 * CURVE's keys: our secret certificate and the directory of the clients
 * let in; both or neither.  Return: 0, or -1 after a message.
 */
static int load_curve(const struct config *c, struct zcurve_keys *k,
		      struct zcurve_allow *allow)
{
	char why[512];
	char z85[ZCURVE_Z85 + 1];

	if (!c->curve_secret && !c->curve_clients)
		return 0;
	if (!c->curve_secret || !c->curve_clients) {
		log_err("CURVE needs both --curve-secret-key-file and "
			"--curve-clients");
		return -1;
	}
	if (zcurve_sodium_init() < 0) {
		log_err("libsodium failed to initialise");
		return -1;
	}
	if (zcurve_load_cert(c->curve_secret, k->pub, k->sec, why,
			     sizeof(why)) < 0 ||
	    zcurve_allow_load(allow, c->curve_clients, why, sizeof(why)) < 0) {
		log_err("CURVE: %s", why);
		return -1;
	}
	zcurve_z85_encode(k->pub, z85);
	log_info("CURVE on: server key %s, %zu client key(s) from %s", z85,
		 allow->n, c->curve_clients);
	if (!allow->n)
		log_warn("CURVE: %s holds no *.key certificate: no client "
			 "can connect",
			 c->curve_clients);
	return 0;
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
	if (!insecure_ok(&c) || load_curve(&c, &curve, &allow) < 0)
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
	so.host = c.host;
	so.port = c.port;
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