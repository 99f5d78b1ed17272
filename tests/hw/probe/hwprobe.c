/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hwprobe.c - maru-hwprobe, the hardware tests' probe inside QEMU guests
 *
 * The device-DAX tests (tests/hw) boot throw-away guests with a real
 * /dev/daxX.Y and check the daemons from the outside: what the device holds,
 * what the resource manager answers, what the metadata server indexed.  This
 * program is the one tool the guest scripts use for that.  It deliberately
 * shares no code with libmaru or the daemons' device code (only the lead's
 * wire codec and resource-manager client from src/common), so that a bug in
 * the code under test cannot hide itself:
 *
 *   enum                       libdaxctl walk: every dax device
 *   header PATH [OFF]          the MARUDEV header of a device (mmap of one
 *                              alignment unit at 0) or, in a regular file,
 *                              the 32 bytes at OFF (the host's view)
 *   uuidmap UUID               which local device carries header UUID
 *   fill|check PATH OFF LEN SEED   write / verify a seeded pattern
 *   sum PATH OFF LEN           FNV-1a 64 of a byte range ("zero" if all 0)
 *   rm-wait ADDR SECS          until a resource manager answers STATS
 *   rm-stats ADDR              one "pool ..." line per pool
 *   rm-alloc ADDR SIZE [POOL]  ALLOC; rm-free / rm-access ADDR R O L T
 *   mds-lookup URL KEY         LOOKUP_KV; mds-delete URL KEY; mds-list URL
 *   mds-usage URL              GET_USAGE; mds-alloc URL INSTANCE SIZE
 *   runas UID GID CMD...       drop root, then exec CMD
 *
 * Options before the command: --id CLIENT_ID (resource-manager client id,
 * default "<hostname>:<pid>"), --int (metadata keys are integers),
 * --timeout MS (wait for a metadata server reply, default 10000).
 * Output: one line per object, "what key=value key=value ...", so that the
 * guest scripts can grep and the host can parse the console log.
 * Exit: 0 success, 1 failure (reason on stderr), 2 usage, 3 "not found"
 * (no header, uuid not mapped, key missing, pattern mismatch).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <daxctl/libdaxctl.h>
#include <msgpack.h>
#include <zmq.h>

#include "mds_proto.h"
#include "rm_client.h"
#include "util.h"
#include "pattern.h"

#define HDR_MAGIC "MARUDEV\0"
#define HDR_SIZE 32
#define EXIT_NOTFOUND 3

static const char *opt_client_id; /* borrows argv; NULL = default */
static bool opt_int_keys;
static int opt_timeout_ms = 10000; /* metadata server replies */

static int usage(void)
{
	fprintf(stderr,
		"usage: maru-hwprobe [--id CLIENT_ID] [--int] [--timeout MS] "
		"COMMAND ...\n"
		"  enum | header PATH [OFF] | uuidmap UUID\n"
		"  fill|check PATH OFF LEN SEED | sum PATH OFF LEN\n"
		"  rm-wait ADDR SECS | rm-stats ADDR | rm-alloc ADDR SIZE "
		"[POOL]\n"
		"  rm-free|rm-access ADDR REGION OFFSET LENGTH TOKEN\n"
		"  mds-lookup|mds-delete URL KEY | mds-list URL | mds-usage "
		"URL\n"
		"  mds-alloc URL INSTANCE SIZE | runas UID GID CMD...\n");
	return 2;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	if (errno || end == s || *end) {
		fprintf(stderr, "maru-hwprobe: not a number: %s\n", s);
		return -EINVAL;
	}
	return 0;
}

/* sysfs attribute of a dax device as a number; 0 when unreadable */
static uint64_t dax_sysfs_u64(const char *path, const char *attr)
{
	const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	char p[512], line[64];
	uint64_t v = 0;
	FILE *f;

	snprintf(p, sizeof(p), "/sys/bus/dax/devices/%s/%s", name, attr);
	f = fopen(p, "r");
	if (!f)
		return 0;
	if (fgets(line, sizeof(line), f))
		v = strtoull(line, NULL, 0);
	fclose(f);
	return v;
}

/*
 * A byte range of a device or file, mapped.  Character devices (device DAX)
 * are mapped MAP_SHARED at multiples of their alignment, which is the only
 * way they can be accessed; regular files (the host's backing file) at page
 * multiples.
 */
struct range {
	uint8_t *base; /* owns: the mapping */
	size_t maplen;
	uint8_t *p; /* borrows base: the first requested byte */
};

static int range_map(const char *path, uint64_t off, uint64_t len, bool write,
		     struct range *r)
{
	uint64_t align, mapoff;
	struct stat st;
	int fd, rc = 0;

	/* device DAX maps only MAP_SHARED, so a read needs O_RDWR too */
	if (stat(path, &st) < 0) {
		rc = -errno;
		fprintf(stderr, "maru-hwprobe: %s: %s\n", path, strerror(-rc));
		return rc;
	}
	write |= S_ISCHR(st.st_mode);
	fd = open(path, write ? O_RDWR : O_RDONLY);
	if (fd < 0) {
		rc = -errno;
		fprintf(stderr, "maru-hwprobe: open %s: %s\n", path,
			strerror(-rc));
		return rc;
	}
	if (S_ISCHR(st.st_mode)) {
		align = dax_sysfs_u64(path, "align");
		if (!align)
			align = 2u << 20;
	} else {
		align = (uint64_t)sysconf(_SC_PAGESIZE);
	}
	mapoff = off / align * align;
	r->maplen = round_up_u64(off + len - mapoff, align);
	/* devdax refuses MAP_PRIVATE, and read-only is not needed there */
	r->base = mmap(NULL, r->maplen, PROT_READ | (write ? PROT_WRITE : 0),
		       MAP_SHARED, fd, (off_t)mapoff);
	if (r->base == MAP_FAILED) {
		rc = -errno;
		fprintf(stderr,
			"maru-hwprobe: mmap %s len %zu at %" PRIu64
			" (align %" PRIu64 "): %s\n",
			path, r->maplen, mapoff, align, strerror(-rc));
		goto out_close;
	}
	r->p = r->base + (off - mapoff);
out_close:
	close(fd);
	return rc;
}

static void range_unmap(struct range *r)
{
	munmap(r->base, r->maplen);
}

static int cmd_fill_check(bool fill, const char *path, const char *offs,
			  const char *lens, const char *seeds)
{
	uint64_t off, len, seed, i;
	struct range r;
	int rc;

	if (parse_u64(offs, &off) || parse_u64(lens, &len) ||
	    parse_u64(seeds, &seed) || !len)
		return 2;
	rc = range_map(path, off, len, fill, &r);
	if (rc < 0)
		return 1;
	for (i = 0; i < len; i++) {
		if (fill) {
			r.p[i] = pattern_byte(seed, i);
		} else if (r.p[i] != pattern_byte(seed, i)) {
			printf("check path=%s offset=%" PRIu64
			       " result=mismatch"
			       " at=%" PRIu64 " got=0x%02x want=0x%02x\n",
			       path, off, i, r.p[i], pattern_byte(seed, i));
			range_unmap(&r);
			return EXIT_NOTFOUND;
		}
	}
	if (fill)
		msync(r.base, r.maplen, MS_SYNC);
	printf("%s path=%s offset=%" PRIu64 " length=%" PRIu64 " seed=%" PRIu64
	       " result=ok\n",
	       fill ? "fill" : "check", path, off, len, seed);
	range_unmap(&r);
	return 0;
}

static int cmd_sum(const char *path, const char *offs, const char *lens)
{
	uint64_t off, len, i, h = 0xcbf29ce484222325ull;
	bool zero = true;
	struct range r;

	if (parse_u64(offs, &off) || parse_u64(lens, &len) || !len)
		return 2;
	if (range_map(path, off, len, false, &r) < 0)
		return 1;
	for (i = 0; i < len; i++) {
		h = (h ^ r.p[i]) * 0x100000001b3ull;
		zero &= !r.p[i];
	}
	printf("sum path=%s offset=%" PRIu64 " length=%" PRIu64
	       " fnv=%016" PRIx64 "%s\n",
	       path, off, len, h, zero ? " zero=1" : "");
	range_unmap(&r);
	return 0;
}

/* text form of a header UUID: 8-4-4-4-12 lowercase hex */
static void uuid_text(const uint8_t *u, char *out)
{
	int i, n = 0;

	for (i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[n++] = '-';
		n += sprintf(out + n, "%02x", u[i]);
	}
}

/*
 * read_header - the 32 header bytes of @path: for a character device
 * through an mmap of one alignment unit at offset 0 (as the resource manager
 * writes it), for a regular file at @off.
 */
static int read_header(const char *path, uint64_t off, uint8_t *hdr)
{
	struct stat st;
	struct range r;
	int fd, rc;

	if (stat(path, &st) < 0) {
		rc = -errno;
		fprintf(stderr, "maru-hwprobe: %s: %s\n", path, strerror(-rc));
		return rc;
	}
	if (S_ISCHR(st.st_mode)) {
		rc = range_map(path, 0, HDR_SIZE, false, &r);
		if (rc < 0)
			return rc;
		memcpy(hdr, r.p, HDR_SIZE);
		range_unmap(&r);
		return 0;
	}
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	rc = pread(fd, hdr, HDR_SIZE, (off_t)off) == HDR_SIZE ? 0 : -EIO;
	close(fd);
	return rc;
}

/* print one "header" line; return 0 for a valid MARUDEV header */
static int print_header(const char *path, const uint8_t *hdr)
{
	uint32_t version = get_u32le(hdr + 8);
	const uint8_t *u = hdr + 12;
	char uuid[40];

	if (memcmp(hdr, HDR_MAGIC, 8)) {
		printf("header path=%s magic=none\n", path);
		return EXIT_NOTFOUND;
	}
	uuid_text(u, uuid);
	printf("header path=%s magic=MARUDEV version=%" PRIu32 " uuid=%s"
	       " uuid_v4=%d reserved=%" PRIu32 "\n",
	       path, version, uuid, (u[6] >> 4) == 4 && (u[8] & 0xc0) == 0x80,
	       get_u32le(hdr + 28));
	return 0;
}

static int cmd_header(const char *path, const char *offs)
{
	uint8_t hdr[HDR_SIZE];
	uint64_t off = 0;

	if (offs && parse_u64(offs, &off))
		return 2;
	if (read_header(path, off, hdr) < 0)
		return 1;
	return print_header(path, hdr);
}

/* the client side of upstream's multi-host mapping, done independently */
static int cmd_uuidmap(const char *want)
{
	struct daxctl_region *region;
	struct daxctl_ctx *ctx;
	struct daxctl_dev *dev;
	uint8_t hdr[HDR_SIZE];
	char path[256], uuid[40];
	int rc = EXIT_NOTFOUND;

	if (daxctl_new(&ctx) < 0)
		return 1;
	daxctl_region_foreach(ctx, region)
	{
		daxctl_dev_foreach(region, dev)
		{
			snprintf(path, sizeof(path), "/dev/%s",
				 daxctl_dev_get_devname(dev));
			if (read_header(path, 0, hdr) < 0 ||
			    memcmp(hdr, HDR_MAGIC, 8))
				continue;
			uuid_text(hdr + 12, uuid);
			if (!strcmp(uuid, want)) {
				printf("uuidmap uuid=%s path=%s\n", uuid, path);
				rc = 0;
			}
		}
	}
	daxctl_unref(ctx);
	if (rc)
		printf("uuidmap uuid=%s path=none\n", want);
	return rc;
}

static int cmd_enum(void)
{
	struct daxctl_region *region;
	struct daxctl_ctx *ctx;
	struct daxctl_dev *dev;
	int n = 0;

	if (daxctl_new(&ctx) < 0) {
		fprintf(stderr, "maru-hwprobe: daxctl_new failed\n");
		return 1;
	}
	daxctl_region_foreach(ctx, region)
	{
		daxctl_dev_foreach(region, dev)
		{
			printf("dev path=/dev/%s size=%llu align=%lu"
			       " resource=0x%llx region=%d enabled=%d\n",
			       daxctl_dev_get_devname(dev),
			       daxctl_dev_get_size(dev),
			       daxctl_dev_get_align(dev),
			       daxctl_dev_get_resource(dev),
			       daxctl_region_get_id(region),
			       daxctl_dev_is_enabled(dev));
			n++;
		}
	}
	daxctl_unref(ctx);
	printf("devices count=%d\n", n);
	return 0;
}

/* ---- resource manager ---- */

static int rm_open(struct rm_client *c, const char *addr)
{
	int rc = rm_client_init(c, addr, opt_client_id, 5000);
	struct timespec ts;

	if (rc < 0) {
		fprintf(stderr, "maru-hwprobe: bad address %s\n", addr);
		return rc;
	}
	/*
	 * Every probe run is a new process, but with --id they share one
	 * client id: start the request ids at a value no earlier run used,
	 * or the server's idempotency cache would answer from an old reply.
	 */
	clock_gettime(CLOCK_REALTIME, &ts);
	rm_client_ids_from((uint64_t)ts.tv_sec * 1000000000u +
			   (uint64_t)ts.tv_nsec);
	return 0;
}

static int print_pool(const struct rm_pool_stat *s, void *arg)
{
	printf("pool path=%.*s type=%" PRIu32 " total=%" PRIu64 " free=%" PRIu64
	       " align=%" PRIu64 "\n",
	       (int)s->path.len, s->path.ptr, s->dax_type, s->total_size,
	       s->free_size, s->align_bytes);
	(*(int *)arg)++;
	return 0;
}

static int cmd_rm_stats(const char *addr)
{
	struct rm_client c;
	int rc, n = 0;

	if (rm_open(&c, addr) < 0)
		return 2;
	rc = rm_client_stats(&c, print_pool, &n);
	if (rc < 0)
		fprintf(stderr, "maru-hwprobe: STATS %s: %s\n", addr,
			strerror(-rc));
	else
		printf("pools count=%d\n", n);
	rm_client_destroy(&c);
	return rc < 0;
}

static int cmd_rm_wait(const char *addr, const char *secs)
{
	struct timespec ts = {0, 100 * 1000 * 1000};
	uint64_t s, i;

	if (parse_u64(secs, &s))
		return 2;
	for (i = 0; i < s * 10; i++) {
		struct rm_client c;
		int n = 0, rc;

		if (rm_open(&c, addr) < 0)
			return 2;
		rc = rm_client_stats(&c, print_pool, &n);
		rm_client_destroy(&c);
		if (!rc)
			return 0;
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "maru-hwprobe: no resource manager at %s after %ss\n",
		addr, secs);
	return 1;
}

static int cmd_rm_alloc(const char *addr, const char *sizes, const char *pool)
{
	struct rm_alloc_result res;
	struct rm_client c;
	uint64_t size;
	int rc;

	if (parse_u64(sizes, &size))
		return 2;
	if (rm_open(&c, addr) < 0)
		return 2;
	rc = rm_client_alloc(&c, size, pool, &res);
	if (rc < 0) {
		printf("alloc status=%d error=%s\n", rc, strerror(-rc));
	} else {
		printf("alloc status=0 region=%" PRIu64 " offset=%" PRIu64
		       " length=%" PRIu64 " token=%" PRIu64
		       " requested=%" PRIu64 " path=%s uuid=%s client=%s\n",
		       res.handle.region_id, res.handle.offset,
		       res.handle.length, res.handle.auth_token,
		       res.requested_size, res.path,
		       res.uuid[0] ? res.uuid : "-", c.client_id);
	}
	rm_client_destroy(&c);
	return rc < 0;
}

static int parse_handle(char **argv, struct rm_handle *h)
{
	return parse_u64(argv[0], &h->region_id) ||
	       parse_u64(argv[1], &h->offset) ||
	       parse_u64(argv[2], &h->length) ||
	       parse_u64(argv[3], &h->auth_token);
}

static int cmd_rm_free_access(bool do_free, const char *addr, char **hargv)
{
	struct rm_access_result acc;
	struct rm_client c;
	struct rm_handle h;
	int rc;

	if (parse_handle(hargv, &h))
		return 2;
	if (rm_open(&c, addr) < 0)
		return 2;
	if (do_free) {
		rc = rm_client_free(&c, &h);
		printf("free status=%d region=%" PRIu64 "\n", rc, h.region_id);
	} else {
		rc = rm_client_get_access(&c, &h, &acc);
		if (rc < 0)
			printf("access status=%d region=%" PRIu64 "\n", rc,
			       h.region_id);
		else
			printf("access status=0 region=%" PRIu64
			       " path=%s offset=%" PRIu64 " length=%" PRIu64
			       " uuid=%s\n",
			       h.region_id, acc.path, acc.offset, acc.length,
			       acc.uuid[0] ? acc.uuid : "-");
	}
	rm_client_destroy(&c);
	return rc < 0;
}

/* ---- metadata server: a raw REQ client, independent of libmaru ---- */

struct mds {
	void *ctx;	    /* owns */
	void *sock;	    /* owns: a REQ socket */
	msgpack_sbuffer sb; /* owns: the request being built */
	msgpack_packer pk;
	msgpack_unpacked reply; /* owns: the decoded reply payload */
	char *payload; /* owns: reply bytes; reply's strings borrow them */
};

static int mds_open(struct mds *m, const char *url)
{
	int linger = 0, tmo = opt_timeout_ms;

	m->ctx = zmq_ctx_new();
	m->sock = zmq_socket(m->ctx, ZMQ_REQ);
	zmq_setsockopt(m->sock, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(m->sock, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	zmq_setsockopt(m->sock, ZMQ_SNDTIMEO, &tmo, sizeof(tmo));
	msgpack_sbuffer_init(&m->sb);
	msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
	msgpack_unpacked_init(&m->reply);
	m->payload = NULL;
	if (zmq_connect(m->sock, url) < 0) {
		fprintf(stderr, "maru-hwprobe: connect %s: %s\n", url,
			zmq_strerror(zmq_errno()));
		return -EINVAL;
	}
	return 0;
}

static void mds_close(struct mds *m)
{
	msgpack_unpacked_destroy(&m->reply);
	free(m->payload);
	msgpack_sbuffer_destroy(&m->sb);
	zmq_close(m->sock);
	zmq_ctx_term(m->ctx);
}

static void pack_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

static void pack_key(msgpack_packer *pk, const char *key)
{
	pack_str(pk, "key");
	if (opt_int_keys)
		msgpack_pack_int64(pk, strtoll(key, NULL, 0));
	else
		pack_str(pk, key);
}

/* send the request in m->sb as @type; decode the reply map into m->reply */
static int mds_call(struct mds *m, uint8_t type)
{
	uint8_t *msg, hdr[MDS_HDR_SIZE] = {0};
	zmq_msg_t rep;
	size_t len;
	int rc;

	put_u16be(hdr, MDS_MAGIC);
	hdr[2] = MDS_VERSION;
	hdr[3] = type;
	put_u32be(hdr + 8, 1);
	put_u32be(hdr + 12, (uint32_t)m->sb.size);
	msg = malloc(MDS_HDR_SIZE + m->sb.size);
	if (!msg)
		return -ENOMEM;
	memcpy(msg, hdr, MDS_HDR_SIZE);
	memcpy(msg + MDS_HDR_SIZE, m->sb.data, m->sb.size);
	rc = zmq_send(m->sock, msg, MDS_HDR_SIZE + m->sb.size, 0);
	free(msg);
	if (rc < 0)
		return -zmq_errno();
	zmq_msg_init(&rep);
	if (zmq_msg_recv(&rep, m->sock, 0) < 0) {
		rc = -zmq_errno();
		fprintf(stderr, "maru-hwprobe: no reply: %s\n",
			zmq_strerror(-rc));
		zmq_msg_close(&rep);
		return rc;
	}
	len = zmq_msg_size(&rep);
	msg = zmq_msg_data(&rep);
	rc = -EPROTO;
	if (len >= MDS_HDR_SIZE && get_u16be(msg) == MDS_MAGIC &&
	    get_u32be(msg + 12) <= len - MDS_HDR_SIZE) {
		len = get_u32be(msg + 12);
		/* decoded strings point into the bytes: keep our own copy */
		free(m->payload);
		m->payload = malloc(len ? len : 1);
		if (m->payload) {
			memcpy(m->payload, msg + MDS_HDR_SIZE, len);
			if (msgpack_unpack_next(&m->reply, m->payload, len,
						NULL) ==
				    MSGPACK_UNPACK_SUCCESS &&
			    m->reply.data.type == MSGPACK_OBJECT_MAP)
				rc = 0;
		}
	}
	zmq_msg_close(&rep);
	if (rc)
		fprintf(stderr, "maru-hwprobe: malformed reply\n");
	return rc;
}

static const msgpack_object *map_get(const msgpack_object *o, const char *k)
{
	uint32_t i;

	if (!o || o->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (i = 0; i < o->via.map.size; i++) {
		const msgpack_object *key = &o->via.map.ptr[i].key;

		if (key->type == MSGPACK_OBJECT_STR &&
		    key->via.str.size == strlen(k) &&
		    !memcmp(key->via.str.ptr, k, key->via.str.size))
			return &o->via.map.ptr[i].val;
	}
	return NULL;
}

static uint64_t map_u64(const msgpack_object *o, const char *k)
{
	const msgpack_object *v = map_get(o, k);

	if (v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		return v->via.u64;
	if (v && v->type == MSGPACK_OBJECT_BOOLEAN)
		return v->via.boolean;
	return 0;
}

static void print_handle(const char *what, const msgpack_object *h)
{
	printf("%s region=%" PRIu64 " offset=%" PRIu64 " length=%" PRIu64
	       " token=%" PRIu64,
	       what, map_u64(h, "region_id"), map_u64(h, "offset"),
	       map_u64(h, "length"), map_u64(h, "auth_token"));
}

static int cmd_mds_key(bool del, const char *url, const char *key)
{
	const msgpack_object *r;
	struct mds m;
	int rc;

	if (mds_open(&m, url) < 0)
		goto out_fail;
	msgpack_pack_map(&m.pk, 1);
	pack_key(&m.pk, key);
	rc = mds_call(&m, del ? MDS_DELETE_KV : MDS_LOOKUP_KV);
	if (rc < 0)
		goto out_fail;
	r = &m.reply.data;
	if (del) {
		printf("delete key=%s success=%" PRIu64 "\n", key,
		       map_u64(r, "success"));
		rc = map_u64(r, "success") ? 0 : EXIT_NOTFOUND;
	} else if (!map_u64(r, "found")) {
		printf("lookup key=%s found=0\n", key);
		rc = EXIT_NOTFOUND;
	} else {
		print_handle("lookup", map_get(r, "handle"));
		printf(" kv_offset=%" PRIu64 " kv_length=%" PRIu64
		       " key=%s found=1\n",
		       map_u64(r, "kv_offset"), map_u64(r, "kv_length"), key);
	}
	mds_close(&m);
	return rc;
out_fail:
	mds_close(&m);
	return 1;
}

static int cmd_mds_list(const char *url)
{
	const msgpack_object *l;
	struct mds m;
	uint32_t i;
	int rc = 1;

	if (mds_open(&m, url) < 0)
		goto out;
	msgpack_pack_map(&m.pk, 0);
	if (mds_call(&m, MDS_LIST_ALLOCATIONS) < 0)
		goto out;
	l = map_get(&m.reply.data, "allocations");
	for (i = 0;
	     l && l->type == MSGPACK_OBJECT_ARRAY && i < l->via.array.size;
	     i++) {
		print_handle("listed", &l->via.array.ptr[i]);
		printf("\n");
	}
	printf("allocations count=%u\n",
	       l && l->type == MSGPACK_OBJECT_ARRAY ? l->via.array.size : 0);
	rc = 0;
out:
	mds_close(&m);
	return rc;
}

static int cmd_mds_usage(const char *url)
{
	const msgpack_object *l, *e, *id;
	struct mds m;
	uint32_t i;
	int rc = 1;

	if (mds_open(&m, url) < 0)
		goto out;
	msgpack_pack_map(&m.pk, 0);
	if (mds_call(&m, MDS_GET_USAGE) < 0)
		goto out;
	l = map_get(&m.reply.data, "instances");
	for (i = 0;
	     l && l->type == MSGPACK_OBJECT_ARRAY && i < l->via.array.size;
	     i++) {
		e = &l->via.array.ptr[i];
		id = map_get(e, "instance_id");
		printf("instance id=%.*s regions=%" PRIu64 " allocated=%" PRIu64
		       " used=%" PRIu64 "\n",
		       id && id->type == MSGPACK_OBJECT_STR
			       ? (int)id->via.str.size
			       : 1,
		       id && id->type == MSGPACK_OBJECT_STR ? id->via.str.ptr
							    : "?",
		       map_u64(e, "regions"), map_u64(e, "allocated"),
		       map_u64(e, "used"));
	}
	printf("usage pool_total=%" PRIu64 " pool_free=%" PRIu64 "\n",
	       map_u64(&m.reply.data, "pool_total"),
	       map_u64(&m.reply.data, "pool_free"));
	rc = 0;
out:
	mds_close(&m);
	return rc;
}

static int cmd_mds_alloc(const char *url, const char *inst, const char *sizes)
{
	struct mds m;
	uint64_t size;
	int rc = 1;

	if (parse_u64(sizes, &size))
		return 2;
	if (mds_open(&m, url) < 0)
		goto out;
	msgpack_pack_map(&m.pk, 2);
	pack_str(&m.pk, "instance_id");
	pack_str(&m.pk, inst);
	pack_str(&m.pk, "size");
	msgpack_pack_uint64(&m.pk, size);
	if (mds_call(&m, MDS_REQUEST_ALLOC) < 0)
		goto out;
	if (!map_u64(&m.reply.data, "success")) {
		printf("mds-alloc success=0\n");
		goto out;
	}
	print_handle("mds-alloc success=1", map_get(&m.reply.data, "handle"));
	printf("\n");
	rc = 0;
out:
	mds_close(&m);
	return rc;
}

static int cmd_runas(const char *uids, const char *gids, char **argv)
{
	uint64_t uid, gid;

	if (parse_u64(uids, &uid) || parse_u64(gids, &gid))
		return 2;
	if (setgroups(0, NULL) < 0 || setgid((gid_t)gid) < 0 ||
	    setuid((uid_t)uid) < 0) {
		perror("maru-hwprobe: runas");
		return 1;
	}
	execvp(argv[0], argv);
	perror(argv[0]);
	return 127;
}

int main(int argc, char **argv)
{
	const char *cmd;
	int n;

	argv++;
	argc--;
	while (argc > 0 && !strncmp(argv[0], "--", 2)) {
		if (!strcmp(argv[0], "--id") && argc > 1) {
			opt_client_id = argv[1];
			argv += 2;
			argc -= 2;
		} else if (!strcmp(argv[0], "--timeout") && argc > 1) {
			opt_timeout_ms = atoi(argv[1]);
			argv += 2;
			argc -= 2;
		} else if (!strcmp(argv[0], "--int")) {
			opt_int_keys = true;
			argv++;
			argc--;
		} else {
			return usage();
		}
	}
	if (argc < 1)
		return usage();
	cmd = argv[0];
	n = argc - 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(cmd, "enum"))
		return cmd_enum();
	if (!strcmp(cmd, "header") && (n == 1 || n == 2))
		return cmd_header(argv[1], n == 2 ? argv[2] : NULL);
	if (!strcmp(cmd, "uuidmap") && n == 1)
		return cmd_uuidmap(argv[1]);
	if ((!strcmp(cmd, "fill") || !strcmp(cmd, "check")) && n == 4)
		return cmd_fill_check(cmd[0] == 'f', argv[1], argv[2], argv[3],
				      argv[4]);
	if (!strcmp(cmd, "sum") && n == 3)
		return cmd_sum(argv[1], argv[2], argv[3]);
	if (!strcmp(cmd, "rm-wait") && n == 2)
		return cmd_rm_wait(argv[1], argv[2]);
	if (!strcmp(cmd, "rm-stats") && n == 1)
		return cmd_rm_stats(argv[1]);
	if (!strcmp(cmd, "rm-alloc") && (n == 2 || n == 3))
		return cmd_rm_alloc(argv[1], argv[2], n == 3 ? argv[3] : NULL);
	if ((!strcmp(cmd, "rm-free") || !strcmp(cmd, "rm-access")) && n == 5)
		return cmd_rm_free_access(cmd[3] == 'f', argv[1], argv + 2);
	if ((!strcmp(cmd, "mds-lookup") || !strcmp(cmd, "mds-delete")) &&
	    n == 2)
		return cmd_mds_key(cmd[4] == 'd', argv[1], argv[2]);
	if (!strcmp(cmd, "mds-list") && n == 1)
		return cmd_mds_list(argv[1]);
	if (!strcmp(cmd, "mds-usage") && n == 1)
		return cmd_mds_usage(argv[1]);
	if (!strcmp(cmd, "mds-alloc") && n == 3)
		return cmd_mds_alloc(argv[1], argv[2], argv[3]);
	if (!strcmp(cmd, "runas") && n >= 3)
		return cmd_runas(argv[1], argv[2], argv + 3);
	return usage();
}
