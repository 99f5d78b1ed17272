/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c - struct maru_config: upstream MaruConfig as an opaque C object
 *
 * A config is a plain bag of values with upstream's defaults.  Cross-field
 * validation and the two environment overrides (MARU_EAGER_MAP, MARU_STAT)
 * are explicit calls that produce upstream's exact ValueError messages, so
 * the Python package can reuse them verbatim.  A handler takes a deep copy
 * at maru_handler_new(), so a config may be changed or freed afterwards.
 *
 * Context: a config is not locked; one thread at a time per config.
 */
#include "private.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "util.h"

MARU_EXPORT const char *maru_version(void)
{
	return MARU_VERSION;
}

MARU_EXPORT void maru_buf_free(void *buf)
{
	free(buf);
}

void maru__uuid4(char out[37])
{
	uint8_t b[16];
	size_t got = 0;
	ssize_t n;

	while (got < sizeof(b)) {
		n = getrandom(b + got, sizeof(b) - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* no entropy source at all: fall back to rand() */
			for (; got < sizeof(b); got++)
				b[got] = (uint8_t)rand();
			break;
		}
		got += (size_t)n;
	}
	b[6] = (b[6] & 0x0f) | 0x40; /* version 4 */
	b[8] = (b[8] & 0x3f) | 0x80; /* RFC 4122 variant */
	snprintf(out, 37,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
		 b[10], b[11], b[12], b[13], b[14], b[15]);
}

MARU_EXPORT int maru_config_new(struct maru_config **out)
{
	struct maru_config *cfg;

	cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	cfg->server_url = strdup(MARU_DEFAULT_SERVER_URL);
	cfg->rm_address = strdup(MARU_DEFAULT_RM_ADDRESS);
	if (!cfg->server_url || !cfg->rm_address) {
		maru_config_free(cfg);
		return -ENOMEM;
	}
	cfg->pool_size = MARU_DEFAULT_POOL_SIZE;
	cfg->chunk_size = MARU_DEFAULT_CHUNK_SIZE;
	cfg->timeout_ms = MARU_DEFAULT_TIMEOUT_MS;
	cfg->use_async_rpc = true;
	cfg->max_inflight = MARU_DEFAULT_MAX_INFLIGHT;
	cfg->eager_map = true;
	cfg->auto_expand = true;
	cfg->expand_size = 0;
	cfg->enable_stats = false;
	cfg->connect_retry = true;
	cfg->remote = MARU_REMOTE_AUTO;
	*out = cfg;
	return 0;
}

void maru__config_release(struct maru_config *cfg)
{
	free(cfg->server_url);
	free(cfg->instance_id);
	free(cfg->rm_address);
	free(cfg->curve_server);
	free(cfg->curve_secret);
	free(cfg->agent_url);
	free(cfg->agent_curve_key);
	cfg->server_url = cfg->instance_id = cfg->rm_address = NULL;
	cfg->curve_server = cfg->curve_secret = NULL;
	cfg->agent_url = cfg->agent_curve_key = NULL;
}

MARU_EXPORT void maru_config_free(struct maru_config *cfg)
{
	if (!cfg)
		return;
	maru__config_release(cfg);
	free(cfg);
}

int maru__config_copy(struct maru_config *dst, const struct maru_config *src)
{
	*dst = *src;
	dst->server_url = strdup(src->server_url);
	dst->rm_address = strdup(src->rm_address);
	dst->instance_id = src->instance_id ? strdup(src->instance_id) : NULL;
	dst->curve_server =
		src->curve_server ? strdup(src->curve_server) : NULL;
	dst->curve_secret =
		src->curve_secret ? strdup(src->curve_secret) : NULL;
	dst->agent_url = src->agent_url ? strdup(src->agent_url) : NULL;
	dst->agent_curve_key =
		src->agent_curve_key ? strdup(src->agent_curve_key) : NULL;
	if ((src->agent_url && !dst->agent_url) ||
	    (src->agent_curve_key && !dst->agent_curve_key)) {
		maru__config_release(dst);
		return -ENOMEM;
	}
	if (!dst->server_url || !dst->rm_address ||
	    (src->instance_id && !dst->instance_id) ||
	    (src->curve_server && !dst->curve_server) ||
	    (src->curve_secret && !dst->curve_secret)) {
		maru__config_release(dst);
		return -ENOMEM;
	}
	return 0;
}

/* replace *@slot by a copy of @s; NULL allowed only when @nullable */
static int set_string(char **slot, const char *s, bool nullable)
{
	char *copy = NULL;

	if (!s || !*s) {
		if (!nullable)
			return -EINVAL;
	} else {
		copy = strdup(s);
		if (!copy)
			return -ENOMEM;
	}
	free(*slot);
	*slot = copy;
	return 0;
}

MARU_EXPORT int maru_config_set_server_url(struct maru_config *cfg,
					   const char *url)
{
	return set_string(&cfg->server_url, url, false);
}

MARU_EXPORT int maru_config_set_instance_id(struct maru_config *cfg,
					    const char *id)
{
	/* the server refuses ids that are not UTF-8 text: say so here */
	if (id && !utf8_valid(id, strlen(id)))
		return -EINVAL;
	return set_string(&cfg->instance_id, id, true);
}

MARU_EXPORT int maru_config_set_rm_address(struct maru_config *cfg,
					   const char *addr)
{
	return set_string(&cfg->rm_address, addr, false);
}

MARU_EXPORT int maru_config_set_curve_server_key(struct maru_config *cfg,
						 const char *key)
{
	return set_string(&cfg->curve_server, key, true);
}

MARU_EXPORT int maru_config_set_curve_secret_key_file(struct maru_config *cfg,
						      const char *path)
{
	return set_string(&cfg->curve_secret, path, true);
}

MARU_EXPORT const char *
maru_config_get_curve_server_key(const struct maru_config *cfg)
{
	return cfg->curve_server;
}

MARU_EXPORT const char *
maru_config_get_curve_secret_key_file(const struct maru_config *cfg)
{
	return cfg->curve_secret;
}

MARU_EXPORT int maru_config_set_pool_size(struct maru_config *cfg,
					  uint64_t bytes)
{
	cfg->pool_size = bytes;
	return 0;
}

MARU_EXPORT int maru_config_set_chunk_size(struct maru_config *cfg,
					   uint64_t bytes)
{
	cfg->chunk_size = bytes;
	return 0;
}

MARU_EXPORT int maru_config_set_timeout_ms(struct maru_config *cfg, int ms)
{
	cfg->timeout_ms = ms;
	return 0;
}

MARU_EXPORT int maru_config_set_use_async_rpc(struct maru_config *cfg, bool on)
{
	cfg->use_async_rpc = on;
	return 0;
}

MARU_EXPORT int maru_config_set_max_inflight(struct maru_config *cfg, int n)
{
	if (n < 1)
		return -EINVAL;
	cfg->max_inflight = n;
	return 0;
}

MARU_EXPORT int maru_config_set_eager_map(struct maru_config *cfg, bool on)
{
	cfg->eager_map = on;
	return 0;
}

MARU_EXPORT int maru_config_set_auto_expand(struct maru_config *cfg, bool on)
{
	cfg->auto_expand = on;
	return 0;
}

MARU_EXPORT int maru_config_set_expand_size(struct maru_config *cfg,
					    uint64_t bytes)
{
	cfg->expand_size = bytes;
	return 0;
}

MARU_EXPORT int maru_config_set_enable_stats(struct maru_config *cfg, bool on)
{
	cfg->enable_stats = on;
	return 0;
}

MARU_EXPORT int maru_config_set_agent_url(struct maru_config *cfg,
					  const char *url)
{
	return set_string(&cfg->agent_url, url, true);
}

MARU_EXPORT const char *maru_config_get_agent_url(const struct maru_config *cfg)
{
	return cfg->agent_url;
}

MARU_EXPORT int maru_config_set_agent_curve_key(struct maru_config *cfg,
						const char *key)
{
	return set_string(&cfg->agent_curve_key, key, true);
}

MARU_EXPORT const char *
maru_config_get_agent_curve_key(const struct maru_config *cfg)
{
	return cfg->agent_curve_key;
}

static const char *const remote_names[] = {"auto", "on", "off"};

MARU_EXPORT int maru_config_set_remote(struct maru_config *cfg,
				       const char *mode)
{
	int i;

	for (i = 0; i < 3; i++)
		if (mode && !strcmp(mode, remote_names[i])) {
			cfg->remote = i;
			return 0;
		}
	return -EINVAL;
}

MARU_EXPORT const char *maru_config_get_remote(const struct maru_config *cfg)
{
	return remote_names[cfg->remote];
}

MARU_EXPORT int maru_config_set_connect_retry(struct maru_config *cfg, bool on)
{
	cfg->connect_retry = on;
	return 0;
}

MARU_EXPORT bool maru_config_get_connect_retry(const struct maru_config *cfg)
{
	return cfg->connect_retry;
}

MARU_EXPORT const char *
maru_config_get_server_url(const struct maru_config *cfg)
{
	return cfg->server_url;
}

MARU_EXPORT const char *
maru_config_get_instance_id(const struct maru_config *cfg)
{
	return cfg->instance_id;
}

MARU_EXPORT uint64_t maru_config_get_pool_size(const struct maru_config *cfg)
{
	return cfg->pool_size;
}

MARU_EXPORT uint64_t maru_config_get_chunk_size(const struct maru_config *cfg)
{
	return cfg->chunk_size;
}

MARU_EXPORT int maru_config_get_timeout_ms(const struct maru_config *cfg)
{
	return cfg->timeout_ms;
}

MARU_EXPORT bool maru_config_get_use_async_rpc(const struct maru_config *cfg)
{
	return cfg->use_async_rpc;
}

MARU_EXPORT int maru_config_get_max_inflight(const struct maru_config *cfg)
{
	return cfg->max_inflight;
}

MARU_EXPORT bool maru_config_get_eager_map(const struct maru_config *cfg)
{
	return cfg->eager_map;
}

MARU_EXPORT bool maru_config_get_auto_expand(const struct maru_config *cfg)
{
	return cfg->auto_expand;
}

MARU_EXPORT uint64_t maru_config_get_expand_size(const struct maru_config *cfg)
{
	return cfg->expand_size;
}

MARU_EXPORT const char *
maru_config_get_rm_address(const struct maru_config *cfg)
{
	return cfg->rm_address;
}

MARU_EXPORT bool maru_config_get_enable_stats(const struct maru_config *cfg)
{
	return cfg->enable_stats;
}

/*
 * Parse an upstream boolean environment value: strip, lower-case, then
 * 1/true/yes/on or 0/false/no/off.  Return: 0 or 1, or -EINVAL.
 */
static int parse_env_bool(const char *raw)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};
	char v[16];
	size_t n, i;

	while (isspace((unsigned char)*raw))
		raw++;
	n = strlen(raw);
	while (n && isspace((unsigned char)raw[n - 1]))
		n--;
	if (n >= sizeof(v))
		return -EINVAL;
	for (i = 0; i < n; i++)
		v[i] = (char)tolower((unsigned char)raw[i]);
	v[n] = '\0';
	for (i = 0; i < 4; i++) {
		if (!strcmp(v, yes[i]))
			return 1;
		if (!strcmp(v, no[i]))
			return 0;
	}
	return -EINVAL;
}

static int apply_env_bool(const char *name, bool *field, char *why,
			  size_t whylen)
{
	const char *raw = getenv(name);
	int v;

	if (!raw)
		return 0;
	v = parse_env_bool(raw);
	if (v < 0) {
		if (why && whylen)
			snprintf(why, whylen,
				 "%s must be one of: 1/0, true/false, yes/no, "
				 "on/off (got '%s')",
				 name, raw);
		return -EINVAL;
	}
	*field = v;
	return 0;
}

MARU_EXPORT int maru_config_apply_env(struct maru_config *cfg, char *why,
				      size_t whylen)
{
	const char *v;
	int rc;

	rc = apply_env_bool("MARU_EAGER_MAP", &cfg->eager_map, why, whylen);
	if (rc < 0)
		return rc;
	rc = apply_env_bool("MARU_STAT", &cfg->enable_stats, why, whylen);
	if (rc < 0)
		return rc;
	/* CURVE for clients that cannot be changed (LMCache's backend) */
	v = getenv("MARU_CURVE_SERVER_KEY");
	if (v && *v && (rc = set_string(&cfg->curve_server, v, true)) < 0)
		return rc;
	v = getenv("MARU_CURVE_SECRET_KEY_FILE");
	if (v && *v && (rc = set_string(&cfg->curve_secret, v, true)) < 0)
		return rc;
	/* the remote path (docs/remote.md), for clients that cannot pass it */
	v = getenv("MARU_AGENT_URL");
	if (v && *v && (rc = set_string(&cfg->agent_url, v, true)) < 0)
		return rc;
	v = getenv("MARU_AGENT_CURVE_KEY");
	if (v && *v && (rc = set_string(&cfg->agent_curve_key, v, true)) < 0)
		return rc;
	v = getenv("MARU_REMOTE");
	if (v && *v && maru_config_set_remote(cfg, v) < 0) {
		if (why && whylen)
			snprintf(why, whylen,
				 "MARU_REMOTE must be auto, on or off (got "
				 "'%s')",
				 v);
		return -EINVAL;
	}
	return 0;
}

/* "HOST:PORT": a host (a name, an IPv4 address, an [IPv6] one) and a port
 * from 1 to 65535 */
static bool addr_ok(const char *a)
{
	const char *colon = strrchr(a, ':');
	char *end;
	long port;

	if (!colon || colon == a || strpbrk(a, " /\t"))
		return false;
	if (a[0] == '[' ? colon[-1] != ']' : memchr(a, ':', colon - a) != NULL)
		return false;
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	return colon[1] && !*end && !errno && port > 0 && port < 65536;
}

MARU_EXPORT int maru_config_validate(const struct maru_config *cfg, char *why,
				     size_t whylen)
{
	char tmp[1];

	if (!why || !whylen) {
		why = tmp;
		whylen = sizeof(tmp);
	}
	if (cfg->chunk_size == 0) {
		snprintf(why, whylen,
			 "chunk_size_bytes must be positive, got 0");
		return -EINVAL;
	}
	if (cfg->pool_size < cfg->chunk_size) {
		snprintf(why, whylen,
			 "pool_size (%" PRIu64 ") must be >= chunk_size_bytes "
			 "(%" PRIu64 ")",
			 cfg->pool_size, cfg->chunk_size);
		return -EINVAL;
	}
	if (cfg->expand_size && !cfg->auto_expand) {
		snprintf(why, whylen, "expand_size requires auto_expand=True");
		return -EINVAL;
	}
	if (cfg->expand_size && cfg->expand_size < cfg->chunk_size) {
		snprintf(why, whylen,
			 "expand_size (%" PRIu64
			 ") must be >= chunk_size_bytes "
			 "(%" PRIu64 ")",
			 cfg->expand_size, cfg->chunk_size);
		return -EINVAL;
	}
	if (!cfg->curve_server != !cfg->curve_secret) {
		snprintf(why, whylen,
			 "curve_server_key and curve_secret_key_file go "
			 "together (CURVE needs both)");
		return -EINVAL;
	}
	if (cfg->chunk_size % 8) {
		snprintf(why, whylen,
			 "chunk_size_bytes must be a multiple of 8 (each page "
			 "starts aligned for tensors of any dtype), not "
			 "%" PRIu64,
			 cfg->chunk_size);
		return -EINVAL;
	}
	if (!cfg->server_url || strncmp(cfg->server_url, "tcp://", 6) ||
	    !addr_ok(cfg->server_url + 6)) {
		snprintf(why, whylen,
			 "server_url must be 'tcp://HOST:PORT' (e.g. "
			 "'tcp://localhost:5555'), not '%s'",
			 cfg->server_url ? cfg->server_url : "");
		return -EINVAL;
	}
	if (!cfg->rm_address || !addr_ok(cfg->rm_address)) {
		snprintf(why, whylen,
			 "rm_address must be 'HOST:PORT' (e.g. "
			 "'127.0.0.1:9850'), not '%s'",
			 cfg->rm_address ? cfg->rm_address : "");
		return -EINVAL;
	}
	if (cfg->agent_url && (strncmp(cfg->agent_url, "tcp://", 6) ||
			       !addr_ok(cfg->agent_url + 6))) {
		snprintf(why, whylen,
			 "agent_url must be 'tcp://HOST:PORT' (e.g. "
			 "'tcp://cxl-host:5570'), not '%s'",
			 cfg->agent_url);
		return -EINVAL;
	}
	if (cfg->remote == MARU_REMOTE_ON && !cfg->agent_url) {
		snprintf(why, whylen,
			 "remote='on' needs agent_url (the maru-agent on a "
			 "host that maps the pool)");
		return -EINVAL;
	}
	if (cfg->timeout_ms < 1) {
		snprintf(why, whylen,
			 "timeout_ms must be an integer from 1 to %d, not %d",
			 INT_MAX, cfg->timeout_ms);
		return -EINVAL;
	}
	if (cfg->max_inflight < 1 || cfg->max_inflight > 65536) {
		snprintf(why, whylen,
			 "max_inflight must be an integer from 1 to 65536, not "
			 "%d",
			 (int)cfg->max_inflight);
		return -EINVAL;
	}
	return 0;
}
