/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dev.c - where pools come from: DEV_DAX, FS_DAX and emulated pools
 *
 * Three kinds of pool feed the one allocator (pool.c):
 *
 *   DEV_DAX   /dev/daxX.Y, found and measured through libdaxctl (size and
 *             alignment from daxctl_dev_get_size/get_align, never parsed
 *             from sysfs by hand).  Devices are keyed by device name: one
 *             region may hold several devices.  The first alignment unit is
 *             reserved and holds the MARUDEV header (src/common/devhdr.c),
 *             read and written through an mmap of exactly that unit; data
 *             starts at offset = align.
 *   FS_DAX    a DAX-mounted filesystem (from /proc/mounts), one file per
 *             region <mount>/maru_<id>.dat (region.c); data from 0.
 *   EMULATED  a regular file, normally on /dev/shm, created sparse with
 *             --emulate-size if missing, and then treated exactly like a
 *             DEV_DAX device: 2 MiB alignment, MARUDEV header in the first
 *             unit, data from offset = align, STATS dax_type 0.
 *
 * Sanity: a pool whose alignment is not a power of two, is above 1 GiB or
 * below 4 KiB, or that cannot hold the header unit plus one aligned region
 * is refused with a clear message; so is a device we cannot open or map.
 * An explicitly configured pool (--pool, --pools-from at start-up) that
 * cannot be served is fatal; a discovered one is skipped with an error.
 *
 * Pool ids (used in pool_<id>.meta and in every allocation record) must
 * map the same device to the same id at every start:
 *   DEV_DAX  daxX.0 -> X, the region number, which is upstream's id (it
 *            serves one device per region), so an upstream state dir is
 *            adopted; further devices of a region, daxX.Y with Y > 0,
 *            -> 0x20000000 | (X * 1000 + Y).
 *   others   0x40000000 | (crc32(path) & 0x3fffffff): a function of the
 *            absolute path only, so the order of --pool options or of
 *            discovery never changes an id.
 * Two pools with the same id or path are refused.
 *
 * One resource manager per pool: a pool is flock()ed (statedir.h) as soon
 * as it is opened, before its header or mode is touched, and stays locked
 * until exit; a pool another resource manager holds is refused with its
 * pid (fatal when configured; when discovered, counted as a device that
 * cannot be served, so that it never turns into an emulated pool).  Known
 * pools are never opened again (discovery skips their paths).  Files we create
 * (the emulated pool, FS_DAX region files in region.c) get --pool-mode and
 * --pool-group (dev_file_perm), so that workers that are not root can map them;
 * device nodes are udev's (docs/operations.md).
 *
 * Ownership: @rm->pools owns every pool.  Context: event-loop thread.
 */
#include "rm.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <zlib.h>

#include <daxctl/libdaxctl.h>

#include "devhdr.h"
#include "statedir.h"
#include "log.h"
#include "util.h"

#define EMULATED_ALIGN (2ull << 20)
#define FSDAX_MIN_ALIGN (2ull << 20)
#define DEVDAX_DEFAULT_ALIGN (2ull << 20)

static uint32_t id_from_path(const char *path)
{
	return 0x40000000u |
	       ((uint32_t)crc32(0L, (const Bytef *)path, (uInt)strlen(path)) &
		0x3fffffffu);
}

uint32_t dev_devdax_pool_id(const char *devname, const char *path)
{
	unsigned x, y;
	char end;

	if (sscanf(devname, "dax%u.%u%c", &x, &y, &end) != 2 || y >= 1000 ||
	    x >= 100000)
		return id_from_path(path);
	return y == 0 ? x : DEV_DAX_EXTRA_ID | (x * 1000 + y);
}

static const char *kind_name(enum pool_kind k)
{
	return k == POOL_DEV_DAX  ? "DEV_DAX"
	       : k == POOL_FS_DAX ? "FS_DAX"
				  : "EMULATED";
}

static struct pool *pool_new(enum pool_kind kind, const char *path)
{
	struct pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->kind = kind;
	p->lockfd = -1;
	p->path = strdup(path);
	if (!p->path) {
		free(p);
		return NULL;
	}
	return p;
}

static void pool_destroy(struct pool *p)
{
	if (!p)
		return;
	if (p->lockfd >= 0)
		close(p->lockfd);
	pool_fini(p);
	free(p);
}

/* Check the geometry rules shared by every kind, then set up extents. */
static int pool_setup(struct pool *p, uint64_t dev_size, uint64_t align)
{
	uint64_t base = p->kind == POOL_FS_DAX ? 0 : align;
	int rc;

	if (!pool_is_pow2(align) || align < POOL_MIN_ALIGN ||
	    align > POOL_MAX_ALIGN) {
		log_err("%s: alignment %" PRIu64 " is not a power of two "
			"between 4 KiB and 1 GiB: refused",
			p->path, align);
		return -EINVAL;
	}
	if (dev_size < base + align) {
		log_err("%s: %" PRIu64 " bytes cannot hold %s one aligned "
			"region of %" PRIu64 " bytes: refused",
			p->path, dev_size,
			base ? "the header unit plus" : "even", align);
		return -EINVAL;
	}
	p->dev_size = dev_size;
	rc = pool_init(p, base, dev_size - base, align);
	if (rc < 0)
		log_err("%s: %s", p->path, strerror(-rc));
	return rc;
}

/*
 * Push the header's cache line out to memory: on a DAX device the mapping
 * *is* the (possibly shared, CXL) memory, and other hosts read the header
 * without our CPU caches.  The 32 bytes sit in one line (page aligned).
 */
static void header_flush(const void *line)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_clflush(line);
	__builtin_ia32_sfence();
#else
	(void)line;
#endif
}

/*
 * Map the first alignment unit of @fd, read the MARUDEV header, and write
 * a fresh one (random v4 uuid) if the magic is absent.
 */
static int header_load(struct pool *p, int fd)
{
	struct devhdr h;
	uint8_t *map;
	int rc;

	map = mmap(NULL, p->align, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		log_err("%s: cannot map the header unit (%" PRIu64
			" bytes): %s",
			p->path, p->align, strerror(errno));
		return rc;
	}
	rc = devhdr_parse(map, p->align, &h);
	if (rc == -ENOENT) {
		rc = rm_auth_random(h.uuid, sizeof(h.uuid));
		if (rc < 0)
			goto out_unmap;
		devhdr_uuid_v4(h.uuid);
		devhdr_format(map, h.uuid);
		header_flush(map);
		/* device-dax has no page cache and no fsync: msync says EINVAL
		 */
		if (msync(map, DEVHDR_SIZE, MS_SYNC) < 0 &&
		    !(errno == EINVAL && p->kind == POOL_DEV_DAX)) {
			rc = -errno;
			log_err("%s: cannot write the device header: %s",
				p->path, strerror(errno));
			goto out_unmap;
		}
		p->fresh = true;
		devhdr_uuid_str(h.uuid, p->uuid_str);
		log_info("%s: wrote a new device header, uuid %s", p->path,
			 p->uuid_str);
	} else if (rc < 0) {
		goto out_unmap;
	} else if (h.version != DEVHDR_VERSION) {
		log_warn("%s: device header version %u (expected %u)", p->path,
			 h.version, DEVHDR_VERSION);
	}
	memcpy(p->uuid, h.uuid, sizeof(p->uuid));
	devhdr_uuid_str(p->uuid, p->uuid_str);
	p->has_uuid = true;
	rc = 0;
out_unmap:
	munmap(map, p->align);
	return rc;
}

/* Find a dax device by name with libdaxctl. */
static struct daxctl_dev *devdax_find(struct daxctl_ctx *ctx,
				      const char *devname)
{
	struct daxctl_region *region;
	struct daxctl_dev *dev;

	daxctl_region_foreach(ctx, region) daxctl_dev_foreach(region, dev)
	{
		const char *n = daxctl_dev_get_devname(dev);

		if (n && strcmp(n, devname) == 0)
			return dev;
	}
	return NULL;
}

/*
 * Take @p for this resource manager (the opening comment): before anything
 * is written to it, so that a refused second daemon changes nothing.
 */
static int pool_lock(struct pool *p)
{
	char err[PATH_MAX + 128];
	int rc;

	p->lockfd = open(p->path,
			 O_RDONLY | O_CLOEXEC |
				 (p->kind == POOL_FS_DAX ? O_DIRECTORY : 0));
	if (p->lockfd < 0) {
		rc = -errno;
		log_err("pool %s: cannot open: %s", p->path, strerror(errno));
		return rc;
	}
	rc = statedir_flock(p->lockfd, p->path, "maru-resource-manager", err,
			    sizeof(err));
	if (rc < 0)
		log_err("pool %s", err);
	return rc;
}

/* A DEV_DAX pool for /dev/<devname>, measured by libdaxctl. */
static int open_devdax(struct daxctl_dev *dev, const char *path,
		       struct pool **out)
{
	const char *devname = daxctl_dev_get_devname(dev);
	uint64_t size = daxctl_dev_get_size(dev);
	uint64_t align = daxctl_dev_get_align(dev);
	struct stat st;
	struct pool *p;
	int fd, rc;

	if (!daxctl_dev_is_enabled(dev)) {
		log_err("%s: device is disabled (daxctl enable-device %s)",
			path, devname);
		return -ENODEV;
	}
	if (stat(path, &st) < 0 || !S_ISCHR(st.st_mode)) {
		log_err("%s: no character device (is %s in system-ram mode?)",
			path, devname);
		return -ENODEV;
	}
	/* the node must be this device, or we would map something else */
	if (major(st.st_rdev) != (unsigned)daxctl_dev_get_major(dev) ||
	    minor(st.st_rdev) != (unsigned)daxctl_dev_get_minor(dev)) {
		log_err("%s: node is %u:%u but libdaxctl says %s is %d:%d: "
			"refused",
			path, major(st.st_rdev), minor(st.st_rdev), devname,
			daxctl_dev_get_major(dev), daxctl_dev_get_minor(dev));
		return -ENODEV;
	}
	if (align == 0)
		align = DEVDAX_DEFAULT_ALIGN; /* kernels before 5.10 */
	p = pool_new(POOL_DEV_DAX, path);
	if (!p)
		return -ENOMEM;
	p->id = dev_devdax_pool_id(devname, path);
	rc = pool_setup(p, size, align);
	if (rc < 0)
		goto out_free;
	rc = pool_lock(p);
	if (rc < 0)
		goto out_free;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		log_err("%s: cannot open: %s", path, strerror(errno));
		goto out_free;
	}
	rc = header_load(p, fd);
	close(fd);
	if (rc < 0)
		goto out_free;
	*out = p;
	return 0;
out_free:
	pool_destroy(p);
	return rc;
}

/* An explicitly named /dev/daxX.Y: look it up by name in libdaxctl. */
static int open_devdax_path(const char *path, struct pool **out)
{
	struct daxctl_ctx *ctx;
	struct daxctl_dev *dev;
	char tmp[PATH_MAX];
	const char *devname;
	int rc;

	snprintf(tmp, sizeof(tmp), "%s", path);
	devname = basename(tmp);
	rc = daxctl_new(&ctx);
	if (rc < 0) {
		log_err("%s: libdaxctl: %s", path, strerror(-rc));
		return rc;
	}
	dev = devdax_find(ctx, devname);
	if (!dev) {
		log_err("%s: libdaxctl does not know a device %s", path,
			devname);
		rc = -ENODEV;
	} else {
		rc = open_devdax(dev, path, out);
	}
	daxctl_unref(ctx);
	return rc;
}

/*
 * An emulated pool: a regular file, created sparse with @size if it does
 * not exist.  From here on it is handled exactly like a DEV_DAX device.
 */
int dev_file_perm(const struct rm_config *c, int fd, const char *path)
{
	int rc = 0;

	if (fchmod(fd, c->pool_mode) < 0) {
		rc = -errno;
		log_err("%s: cannot set mode %04o: %s", path,
			(unsigned)c->pool_mode, strerror(errno));
	} else if (c->pool_gid != (gid_t)-1 &&
		   fchown(fd, (uid_t)-1, c->pool_gid) < 0) {
		rc = -errno;
		log_err("%s: cannot give it to group %u: %s", path,
			(unsigned)c->pool_gid, strerror(errno));
	}
	return rc;
}

static int open_emulated(const struct rm_config *c, const char *path,
			 uint64_t size, struct pool **out)
{
	struct stat st;
	struct pool *p;
	bool created = false;
	int fd, rc;

	p = pool_new(POOL_EMULATED, path);
	if (!p)
		return -ENOMEM;
	p->id = id_from_path(path);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		created = fd >= 0;
		if (created && ftruncate(fd, (off_t)(size / EMULATED_ALIGN *
						     EMULATED_ALIGN)) < 0) {
			rc = -errno;
			log_err("%s: cannot size to %" PRIu64 " bytes: %s",
				path, size, strerror(errno));
			goto out_unlink;
		}
	}
	if (fd < 0) {
		rc = -errno;
		log_err("%s: cannot open: %s", path, strerror(errno));
		goto out_free;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		log_err("%s: not a regular file", path);
		goto out_close;
	}
	rc = pool_lock(p);
	if (rc < 0)
		goto out_close; /* never unlink what another daemon serves */
	/* new, or the operator asked: workers open it too */
	if (created || c->pool_perm_set) {
		rc = dev_file_perm(c, fd, path);
		if (rc < 0)
			goto out_unlink;
	}
	if (!created && (uint64_t)st.st_size != size)
		log_info("%s: existing pool file of %" PRIu64 " bytes "
			 "(--emulate-size applies only to new files)",
			 path, (uint64_t)st.st_size);
	rc = pool_setup(p, (uint64_t)st.st_size, EMULATED_ALIGN);
	if (rc < 0)
		goto out_unlink;
	rc = header_load(p, fd);
	if (rc < 0)
		goto out_unlink;
	p->fresh = p->fresh || created;
	if (created)
		log_info("%s: created a sparse %" PRIu64 "-byte pool file",
			 path, (uint64_t)st.st_size);
	close(fd);
	*out = p;
	return 0;
out_unlink:
	if (created)
		unlink(path);
out_close:
	close(fd);
out_free:
	pool_destroy(p);
	return rc;
}

/* Decode the \ooo escapes of /proc/mounts in place. */
static void unescape_mount(char *s)
{
	char *o = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 4;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
}

/* "dax" or "dax=always" among the options; not dax=never / dax=inode */
static bool opts_have_dax(const char *opts)
{
	char buf[1024], *tok, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", opts);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save))
		if (strcmp(tok, "dax") == 0 || strcmp(tok, "dax=always") == 0)
			return true;
	return false;
}

/* Is mount point @mnt @path itself or one of its parent directories? */
static size_t mount_covers(const char *mnt, const char *path)
{
	size_t n = strlen(mnt);

	if (strcmp(mnt, "/") == 0)
		return 1;
	if (strncmp(mnt, path, n) == 0 && (path[n] == '/' || !path[n]))
		return n;
	return 0;
}

/*
 * Walk /proc/mounts.  If @want is NULL, call @fn for every DAX mount;
 * otherwise report whether the mount holding @want (the longest mount
 * point that covers it; the last one wins when stacked) is DAX.
 */
static int scan_mounts(const char *want, bool *is_dax,
		       void (*fn)(void *, const char *, const char *),
		       void *arg)
{
	char line[4096], src[1024], mnt[1024], type[64], opts[1024];
	FILE *f = fopen("/proc/mounts", "re");
	size_t best = 0, n;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%1023s %1023s %63s %1023s", src, mnt, type,
			   opts) != 4)
			continue;
		unescape_mount(mnt);
		if (want) {
			n = mount_covers(mnt, want);
			if (n && n >= best) {
				best = n;
				*is_dax = opts_have_dax(opts);
			}
			continue;
		}
		if (strncmp(src, "/dev/", 5) == 0 && opts_have_dax(opts))
			fn(arg, src, mnt);
	}
	fclose(f);
	return 0;
}

/* An FS_DAX pool on the filesystem mounted at @dir. */
static int open_fsdax(const char *dir, bool explicit, struct pool **out)
{
	struct statvfs sv;
	struct pool *p;
	uint64_t size, align;
	bool dax = false;
	int rc;

	if (statvfs(dir, &sv) < 0) {
		rc = -errno;
		log_err("%s: %s", dir, strerror(errno));
		return rc;
	}
	if (access(dir, W_OK | X_OK) < 0) {
		rc = -errno;
		log_err("%s: cannot create region files: %s", dir,
			strerror(errno));
		return rc;
	}
	scan_mounts(dir, &dax, NULL, NULL);
	if (!dax && explicit)
		log_warn("%s: not a DAX mount: region files live in the page "
			 "cache (fine for tests, not for CXL memory)",
			 dir);
	size = (uint64_t)sv.f_frsize * (uint64_t)sv.f_blocks;
	align = sv.f_bsize > FSDAX_MIN_ALIGN ? sv.f_bsize : FSDAX_MIN_ALIGN;
	p = pool_new(POOL_FS_DAX, dir);
	if (!p)
		return -ENOMEM;
	p->id = id_from_path(dir);
	rc = pool_setup(p, size, align);
	if (rc == 0)
		rc = pool_lock(p);
	if (rc < 0) {
		pool_destroy(p);
		return rc;
	}
	*out = p;
	return 0;
}

/*
 * Make @path absolute and canonical where it exists (its directory for a
 * file that does not exist yet), so that ids and STATS paths are stable.
 */
static int canonical(const char *path, char *out, size_t len)
{
	char dir[PATH_MAX], base[PATH_MAX], real[PATH_MAX];

	if (realpath(path, real)) {
		snprintf(out, len, "%s", real);
		return 0;
	}
	if (errno != ENOENT)
		return -errno;
	snprintf(dir, sizeof(dir), "%s", path);
	snprintf(base, sizeof(base), "%s", path);
	if (!realpath(dirname(dir), real))
		return -errno;
	if ((size_t)snprintf(out, len, "%s/%s", strcmp(real, "/") ? real : "",
			     basename(base)) >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* --pool PATH: dispatch on what the path is. */
static int open_path(struct rm *rm, const char *arg, struct pool **out)
{
	char path[PATH_MAX];
	struct stat st;
	int rc;

	rc = canonical(arg, path, sizeof(path));
	if (rc < 0) {
		log_err("pool %s: %s", arg, strerror(-rc));
		return rc;
	}
	if (stat(path, &st) == 0 && S_ISCHR(st.st_mode))
		return open_devdax_path(path, out);
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return open_fsdax(path, true, out);
	return open_emulated(&rm->cfg, path, rm->cfg.emulate_size, out);
}

static bool pool_known(struct rm *rm, const struct pool *p, bool quiet)
{
	size_t i;

	for (i = 0; i < rm->npools; i++) {
		if (strcmp(rm->pools[i]->path, p->path) == 0)
			return true;
		if (rm->pools[i]->id == p->id) {
			if (!quiet)
				log_err("%s: pool id %u is already used by %s",
					p->path, p->id, rm->pools[i]->path);
			return true;
		}
	}
	return false;
}

/* Append @p (taken) to the pool list.  Return: 0 or -errno. */
static int pool_add(struct rm *rm, struct pool *p)
{
	struct pool **n;

	n = realloc(rm->pools, (rm->npools + 1) * sizeof(*n));
	if (!n) {
		pool_destroy(p);
		return -ENOMEM;
	}
	rm->pools = n;
	rm->pools[rm->npools++] = p;
	log_info("pool %u: %s %s, %" PRIu64 " usable bytes, align %" PRIu64
		 "%s%s",
		 p->id, kind_name(p->kind), p->path, p->total_size, p->align,
		 p->has_uuid ? ", uuid " : "", p->has_uuid ? p->uuid_str : "");
	return 0;
}

/* A pool list entry being discovered, kept sortable by id. */
struct found {
	struct pool **v; /* owns: pools found, not yet added */
	size_t n;
	size_t refused; /* devices found that cannot be served */
	struct rm *rm;	/* borrows */
};

static int cmp_pool_id(const void *a, const void *b)
{
	const struct pool *x = *(struct pool *const *)a;
	const struct pool *y = *(struct pool *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static void found_push(struct found *f, struct pool *p)
{
	struct pool **n = realloc(f->v, (f->n + 1) * sizeof(*n));

	if (!n) {
		pool_destroy(p);
		return;
	}
	f->v = n;
	f->v[f->n++] = p;
}

/* DEV_DAX discovery: every enabled device-dax device with a char node. */
static void discover_devdax(struct rm *rm, struct found *f)
{
	struct daxctl_region *region;
	struct daxctl_ctx *ctx;
	struct daxctl_dev *dev;
	char path[PATH_MAX];
	size_t i;

	if (daxctl_new(&ctx) < 0)
		return;
	daxctl_region_foreach(ctx, region) daxctl_dev_foreach(region, dev)
	{
		const char *name = daxctl_dev_get_devname(dev);
		struct pool *p = NULL;
		bool dup = false;

		if (!name || !daxctl_dev_is_enabled(dev))
			continue;
		snprintf(path, sizeof(path), "/dev/%s", name);
		for (i = 0; i < rm->npools; i++)
			dup = dup || !strcmp(rm->pools[i]->path, path);
		if (dup || access(path, F_OK) < 0)
			continue; /* known, or system-ram mode */
		if (open_devdax(dev, path, &p) == 0)
			found_push(f, p);
		else
			f->refused++;
	}
	daxctl_unref(ctx);
}

static void found_fsdax(void *arg, const char *src, const char *mnt)
{
	struct found *f = arg;
	struct pool *p = NULL;
	size_t i;

	for (i = 0; i < f->rm->npools; i++)
		if (strcmp(f->rm->pools[i]->path, mnt) == 0)
			return;
	for (i = 0; i < f->n; i++)
		if (strcmp(f->v[i]->path, mnt) == 0)
			return;
	log_dbg("FS_DAX candidate %s on %s", mnt, src);
	if (open_fsdax(mnt, false, &p) == 0)
		found_push(f, p);
	else
		f->refused++;
}

/*
 * Discovery: DEV_DAX pools sorted by id, then FS_DAX pools sorted by id
 * (the order of the STATS records, protocol.md §1).  *@refused counts devices
 * that were found but cannot be served (each already logged why).
 * Return: pools added.
 */
static int discover(struct rm *rm, size_t *refused)
{
	struct found dd = {NULL, 0, 0, rm}, fs = {NULL, 0, 0, rm};
	size_t i;
	int added = 0;

	discover_devdax(rm, &dd);
	scan_mounts(NULL, NULL, found_fsdax, &fs);
	/* qsort(NULL, 0) is undefined behaviour: sort only what was found */
	if (dd.n)
		qsort(dd.v, dd.n, sizeof(*dd.v), cmp_pool_id);
	if (fs.n)
		qsort(fs.v, fs.n, sizeof(*fs.v), cmp_pool_id);
	*refused = dd.refused + fs.refused;
	for (i = 0; i < dd.n + fs.n; i++) {
		struct pool *p = i < dd.n ? dd.v[i] : fs.v[i - dd.n];

		if (pool_known(rm, p, false)) {
			pool_destroy(p);
			continue;
		}
		if (pool_add(rm, p) == 0)
			added++;
	}
	free(dd.v);
	free(fs.v);
	return added;
}

/* Open one configured path and add it.  Return: 1 added, 0 known, -errno */
static int add_path(struct rm *rm, const char *path)
{
	struct pool *p = NULL;
	char canon[PATH_MAX];
	size_t i;
	int rc;

	if (canonical(path, canon, sizeof(canon)) == 0)
		for (i = 0; i < rm->npools; i++)
			if (strcmp(rm->pools[i]->path, canon) == 0)
				return 0;
	rc = open_path(rm, path, &p);
	if (rc < 0)
		return rc;
	if (pool_known(rm, p, false)) {
		pool_destroy(p);
		return -EEXIST;
	}
	rc = pool_add(rm, p);
	return rc < 0 ? rc : 1;
}

/*
 * --pools-from FILE: one pool path per line; blank lines and lines
 * starting with '#' are ignored.  Return: pools added, or -errno (the
 * first failure when @strict).
 */
static int add_from_file(struct rm *rm, bool strict)
{
	char line[PATH_MAX + 2];
	int added = 0, rc;
	FILE *f;

	f = fopen(rm->cfg.pools_from, "re");
	if (!f) {
		rc = -errno;
		log_err("--pools-from %s: %s", rm->cfg.pools_from,
			strerror(errno));
		return strict ? rc : 0;
	}
	while (fgets(line, sizeof(line), f)) {
		char *s = line, *e;

		while (isspace((unsigned char)*s))
			s++;
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (!*s || *s == '#')
			continue;
		rc = add_path(rm, s);
		if (rc < 0 && strict) {
			fclose(f);
			return rc;
		}
		if (rc > 0)
			added++;
	}
	fclose(f);
	return added;
}

int dev_load_configured(struct rm *rm)
{
	struct pool *p = NULL;
	size_t i, refused;
	int rc;

	for (i = 0; i < rm->cfg.pools.n; i++) {
		rc = add_path(rm, rm->cfg.pools.v[i]);
		if (rc < 0) {
			log_err("--pool %s cannot be served: refusing to start",
				rm->cfg.pools.v[i]);
			return rc;
		}
	}
	if (rm->cfg.pools_from) {
		rc = add_from_file(rm, true);
		if (rc < 0) {
			log_err("--pools-from %s: a pool cannot be served: "
				"refusing to start",
				rm->cfg.pools_from);
			return rc;
		}
	}
	if (rm->cfg.pools.n || rm->cfg.pools_from)
		return 0;
	discover(rm, &refused);
	if (rm->npools)
		return 0;
	/*
	 * A device exists but none can be served: the operator has hardware
	 * and must fix it.  Serving emulated memory instead would hand other
	 * hosts a pool they cannot share.
	 */
	if (refused) {
		log_err("%zu CXL/DAX device(s) found but none can be served "
			"(see above): refusing to start; fix them, or name the "
			"pools to serve with --pool",
			refused);
		return -ENODEV;
	}
	log_warn("no CXL/DAX devices found — serving an EMULATED pool at %s "
		 "(%" PRIu64 " bytes of shared memory, NOT CXL memory)",
		 RM_DEFAULT_POOL, rm->cfg.emulate_size);
	if (open_emulated(&rm->cfg, RM_DEFAULT_POOL, rm->cfg.emulate_size,
			  &p) == 0)
		return pool_add(rm, p);
	log_warn("no CXL/DAX devices found — starting with empty pool");
	return 0;
}

int dev_rescan(struct rm *rm)
{
	size_t refused = 0;
	int added = 0;

	if (rm->cfg.pools_from)
		added = add_from_file(rm, false);
	else if (!rm->cfg.pools.n)
		added = discover(rm, &refused);
	log_info("rescan: %d new pool(s), %zu in total", added, rm->npools);
	return added;
}

void dev_free_all(struct rm *rm)
{
	size_t i;

	for (i = 0; i < rm->npools; i++)
		pool_destroy(rm->pools[i]);
	free(rm->pools);
	rm->pools = NULL;
	rm->npools = 0;
}
