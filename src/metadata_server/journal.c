/* SPDX-License-Identifier: Apache-2.0 */
/*
 * journal.c - segments, frames and records of maru-server's journal
 * (see journal.h for the format and the durability levels)
 *
 * Appending: records are framed in j->out as they come (the crc is
 * computed then, over bytes still in cache); jr_commit() writes j->out
 * with one write(2) (a loop for short writes) at the end of the segment,
 * whose fd is O_APPEND-free but positioned at the end: a failed write
 * leaves at most a torn tail, which recovery cuts.
 *
 * Reading: each segment is mmap()ed read-only and walked with jr_next() /
 * jr_decode(); the first frame must be a HEAD, and every HEAD must name
 * the server of the first one.
 */
#include "journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "log.h"
#include "statedir.h"
#include "msgpk.h"

/* ---- reading (pure) ---- */

/*
 * The frame checksum is zlib's crc32 (gzip's polynomial, reflected),
 * computed by ISA-L: bit for bit the same value (the unit test checks it
 * against zlib), ten times faster on the 50-100 byte frames the journal
 * is made of (190 ns -> 20 ns a frame here: zlib's per-call set-up
 * dominates at that size), which is a fifth of a replay.
 */
static uint32_t crc(const uint8_t *p, size_t n)
{
	return crc32_gzip_refl(0, p, (uint64_t)n);
}

int jr_next(const uint8_t *p, size_t len, size_t *off, const uint8_t **payload,
	    uint32_t *plen)
{
	size_t o = *off, left;
	uint32_t n, c;

	if (o >= len)
		return 0;
	left = len - o;
	if (left < JR_FRAME_HDR)
		return -EAGAIN;
	n = get_u32le(p + o);
	c = get_u32le(p + o + 4);
	if (n == 0 && c == 0)
		return -EAGAIN; /* zeroes: nothing was written here */
	if (n == 0 || n > JR_REC_MAX)
		return -EPROTO;
	if (n > left - JR_FRAME_HDR)
		return -EAGAIN; /* cut by the end */
	if (crc(p + o + JR_FRAME_HDR, n) != c)
		return -EPROTO;
	*payload = p + o + JR_FRAME_HDR;
	*plen = n;
	*off = o + JR_FRAME_HDR + n;
	return 1;
}

/*
 * The fields after the type: u a number, U a number or nil, s a str or
 * bin, S a str or nil; those after a '?' may be absent (a record written
 * before they were added).
 */
static const char *const schema[JR_NTYPES] = {
	[JR_HEAD] = "usu",  [JR_SNAP_BEGIN] = "u", [JR_SNAP_END] = "",
	[JR_LEASE] = "ss",  [JR_LEASE_END] = "s",  [JR_REGION] = "uuuusSuu",
	[JR_FREE] = "uuuu", [JR_FREED] = "u",	   [JR_KEY] = "usUuuu",
	[JR_DEL] = "us",    [JR_PIN] = "susu?S",
};

int jr_decode(const uint8_t *p, size_t len, struct jr_rec *rec)
{
	struct mp_rd r;
	struct mp_val v;
	const char *f, *opt;
	uint32_t n;

	memset(rec, 0, sizeof(*rec));
	mp_rd_init(&r, p, len);
	if (mp_read(&r, &v) < 0 || v.type != MP_ARRAY || v.n < 1)
		return -EPROTO;
	n = v.n;
	if (mp_read(&r, &v) < 0 || v.type != MP_UINT || v.u == 0 ||
	    v.u >= JR_NTYPES)
		return -EPROTO;
	rec->type = (uint8_t)v.u;
	f = schema[rec->type];
	opt = strchr(f, '?');
	if (n - 1 != strlen(f) - (opt != NULL) &&
	    (!opt || n - 1 != (size_t)(opt - f)))
		return -EPROTO;
	for (; *f && n > 1; f++) {
		if (*f == '?')
			continue;
		n--;
		if (mp_read(&r, &v) < 0)
			return -EPROTO;
		switch (*f) {
		case 'U':
			if (v.type == MP_NIL) {
				rec->nil_u = true;
				rec->u[rec->nu++] = UINT64_MAX;
				break;
			}
			/* fall through */
		case 'u':
			if (v.type != MP_UINT)
				return -EPROTO;
			rec->u[rec->nu++] = v.u;
			break;
		case 'S':
			if (v.type == MP_NIL) {
				rec->s[rec->ns].p = NULL;
				rec->s[rec->ns++].len = 0;
				break;
			}
			/* fall through */
		case 's':
			if (v.type != MP_STR && v.type != MP_BIN)
				return -EPROTO;
			rec->s[rec->ns].p = v.ptr ? v.ptr : (const uint8_t *)"";
			rec->s[rec->ns++].len = v.len;
			break;
		}
	}
	return r.p == r.end ? 0 : -EPROTO;
}

/* ---- writing records ---- */

/* start a frame in j->out; Return: its offset, or SIZE_MAX */
static size_t rec_begin(struct jr *j, struct mp_wr *w, uint8_t type,
			uint32_t nfields)
{
	size_t at = j->out.len;
	uint8_t *hdr;

	w->b = &j->out;
	w->err = 0;
	hdr = mp_room(w, JR_FRAME_HDR);
	if (!hdr)
		return SIZE_MAX;
	mp_put_array(w, nfields + 1);
	mp_put_uint(w, type);
	return at;
}

static void rec_end(struct jr *j, struct mp_wr *w, size_t at)
{
	size_t n;

	if (at == SIZE_MAX || w->err) {
		/* out of memory: the record is lost, so is the journal's
		 * promise; jr_commit() says so and stops */
		if (at != SIZE_MAX)
			j->out.len = at;
		j->failed = true;
		return;
	}
	n = j->out.len - at - JR_FRAME_HDR;
	put_u32le(j->out.data + at, (uint32_t)n);
	put_u32le(j->out.data + at + 4,
		  crc(j->out.data + at + JR_FRAME_HDR, n));
}

static bool off(const struct jr *j)
{
	return !j || j->fd < 0 || j->failed;
}

static void put_head(struct jr *j)
{
	struct mp_wr w;
	size_t at = rec_begin(j, &w, JR_HEAD, 3);

	mp_put_uint(&w, JR_VERSION);
	mp_put_str(&w, j->server_id, (uint32_t)strlen(j->server_id));
	mp_put_uint(&w, j->seq);
	rec_end(j, &w, at);
}

void jr_put_snap_begin(struct jr *j, uint64_t gen)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_SNAP_BEGIN, 1);
	mp_put_uint(&w, gen);
	rec_end(j, &w, at);
}

void jr_put_snap_end(struct jr *j)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_SNAP_END, 0);
	rec_end(j, &w, at);
}

void jr_put_lease(struct jr *j, const char *id, uint32_t idlen,
		  const char *inst, uint32_t ilen)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_LEASE, 2);
	mp_put_str(&w, id, idlen);
	mp_put_str(&w, inst, ilen);
	rec_end(j, &w, at);
}

void jr_put_lease_end(struct jr *j, const char *id, uint32_t idlen)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_LEASE_END, 1);
	mp_put_str(&w, id, idlen);
	rec_end(j, &w, at);
}

static void put_handle(struct mp_wr *w, const uint64_t h[4])
{
	int i;

	for (i = 0; i < 4; i++)
		mp_put_uint(w, h[i]);
}

void jr_put_region(struct jr *j, const uint64_t h[4], const char *inst,
		   uint32_t ilen, const char *lease, uint32_t llen,
		   uint8_t state, uint8_t why)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_REGION, 8);
	put_handle(&w, h);
	mp_put_str(&w, inst, ilen);
	if (lease)
		mp_put_str(&w, lease, llen);
	else
		mp_put_nil(&w);
	mp_put_uint(&w, state);
	mp_put_uint(&w, why);
	rec_end(j, &w, at);
}

void jr_put_free(struct jr *j, const uint64_t h[4])
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_FREE, 4);
	put_handle(&w, h);
	rec_end(j, &w, at);
}

void jr_put_freed(struct jr *j, uint64_t region_id)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_FREED, 1);
	mp_put_uint(&w, region_id);
	rec_end(j, &w, at);
}

void jr_put_key(struct jr *j, uint8_t tag, const uint8_t *key, uint32_t klen,
		uint64_t region_id, uint64_t o, uint64_t len, uint64_t gen)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_KEY, 6);
	mp_put_uint(&w, tag);
	mp_put_bin(&w, key, klen);
	if (region_id == UINT64_MAX)
		mp_put_nil(&w);
	else
		mp_put_uint(&w, region_id);
	mp_put_uint(&w, o);
	mp_put_uint(&w, len);
	mp_put_uint(&w, gen);
	rec_end(j, &w, at);
}

void jr_put_del(struct jr *j, uint8_t tag, const uint8_t *key, uint32_t klen)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_DEL, 2);
	mp_put_uint(&w, tag);
	mp_put_bin(&w, key, klen);
	rec_end(j, &w, at);
}

void jr_put_pin(struct jr *j, const char *inst, uint32_t ilen,
		const char *lease, uint32_t llen, uint8_t tag,
		const uint8_t *key, uint32_t klen, uint64_t count)
{
	struct mp_wr w;
	size_t at;

	if (off(j))
		return;
	at = rec_begin(j, &w, JR_PIN, 5);
	mp_put_str(&w, inst, ilen);
	mp_put_uint(&w, tag);
	mp_put_bin(&w, key, klen);
	mp_put_uint(&w, count);
	if (lease)
		mp_put_str(&w, lease, llen);
	else
		mp_put_nil(&w);
	rec_end(j, &w, at);
}

/* ---- files ---- */

#define SEG_PREFIX "journal."
#define SEG_NAME_MAX 32

static void seg_name(char *out, uint64_t seq)
{
	snprintf(out, SEG_NAME_MAX, SEG_PREFIX "%016" PRIx64, seq);
}

/* "journal.<16 hex>" exactly; Return: its number, or 0 */
static uint64_t seg_parse(const char *name)
{
	uint64_t v = 0;
	const char *p;
	int n = 0;

	if (strncmp(name, SEG_PREFIX, sizeof(SEG_PREFIX) - 1))
		return 0;
	for (p = name + sizeof(SEG_PREFIX) - 1; *p; p++, n++) {
		int d = *p >= '0' && *p <= '9'	 ? *p - '0'
			: *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
						 : -1;

		if (d < 0 || n >= 16)
			return 0;
		v = v << 4 | (uint64_t)d;
	}
	return n == 16 ? v : 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* the segment numbers, sorted. Return: how many, or -errno */
static int list_segments(struct jr *j, uint64_t **out)
{
	uint64_t *v = NULL, seq;
	size_t n = 0, cap = 0;
	struct dirent *d;
	DIR *dp;
	int fd = dup(j->dirfd);

	*out = NULL;
	if (fd < 0)
		return -errno;
	dp = fdopendir(fd);
	if (!dp) {
		close(fd);
		return -errno;
	}
	rewinddir(dp);
	while ((d = readdir(dp))) {
		seq = seg_parse(d->d_name);
		if (!seq)
			continue;
		if (n == cap) {
			uint64_t *nv;

			cap = cap ? cap * 2 : 8;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				closedir(dp);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = seq;
	}
	closedir(dp);
	if (n)
		qsort(v, n, sizeof(*v), cmp_u64);
	*out = v;
	return (int)n;
}

static void sync_dir(struct jr *j)
{
	if (j->sync)
		(void)fsync(j->dirfd);
}

int jr_open(struct jr *j, const char *dir, bool sync, bool readonly, char *err,
	    size_t errlen)
{
	memset(j, 0, sizeof(*j));
	j->dirfd = j->lockfd = j->fd = -1;
	j->sync = sync;
	j->dir = strdup(dir);
	if (!j->dir)
		return -ENOMEM;
	if (!readonly && mkdir(dir, 0750) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create %s: %s", dir,
			 strerror(errno));
		return -errno;
	}
	j->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (j->dirfd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", dir,
			 strerror(errno));
		return -errno;
	}
	if (readonly)
		return 0;
	j->lockfd = statedir_lock(j->dirfd, dir, "maru-server", err, errlen);
	if (j->lockfd < 0)
		return j->lockfd;
	return 0;
}

/* open segment @seq for appending at @at (truncating what follows) */
static int seg_append(struct jr *j, uint64_t seq, uint64_t at, bool create)
{
	char name[SEG_NAME_MAX];
	int fd;

	seg_name(name, seq);
	fd = openat(j->dirfd, name,
		    O_WRONLY | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0),
		    0640);
	if (fd < 0)
		return -errno;
	if (!create && ftruncate(fd, (off_t)at) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	if (lseek(fd, (off_t)at, SEEK_SET) < 0) {
		int e = errno;

		close(fd);
		return -e;
	}
	if (j->fd >= 0)
		close(j->fd);
	j->fd = fd;
	j->seq = seq;
	if (create)
		sync_dir(j);
	return 0;
}

static void mark_bad(struct jr *j, uint64_t seq)
{
	char name[SEG_NAME_MAX], bad[SEG_NAME_MAX + 8];

	seg_name(name, seq);
	snprintf(bad, sizeof(bad), "%s.bad", name);
	if (renameat(j->dirfd, name, j->dirfd, bad) < 0)
		log_err("journal: cannot rename %s/%s: %s", j->dir, name,
			strerror(errno));
}

/*
 * Records decoded but not applied yet: @ahead sees each one JR_AHEAD
 * records before @apply does (stage 0), and again half-way (stage 1), so
 * the store can prefetch the index buckets and entries a record will
 * touch -- a replay is one random memory access per key after another,
 * and this overlaps them instead of paying them in turn.
 */
#define JR_AHEAD 16

struct pend {
	struct jr_rec rec;
	size_t start, end; /* its frame's offsets */
};

struct replay {
	int (*apply)(void *, const struct jr_rec *);
	void (*ahead)(void *, const struct jr_rec *, int);
	void *arg;
	struct pend q[JR_AHEAD];
	unsigned head, n;
};

/*
 * Apply the oldest pending record.  Return: 1, 0 if @apply refused it
 * (the replay stops there), -ENOMEM (the start fails; nothing changes on
 * disk: the record is not at fault).
 */
static int apply_oldest(struct replay *rp, const char *name,
			struct jr_recovery *out, uint64_t *valid)
{
	struct pend *pd = &rp->q[rp->head];
	int r = rp->apply(rp->arg, &pd->rec);

	if (r == -ENOMEM)
		return r;
	if (r < 0) {
		snprintf(out->why, sizeof(out->why),
			 "%s at offset %zu: record type %u does not apply",
			 name, pd->start, pd->rec.type);
		rp->n = 0;
		return 0;
	}
	out->records++;
	*valid = pd->end;
	rp->head = (rp->head + 1) % JR_AHEAD;
	rp->n--;
	if (rp->ahead && rp->n >= JR_AHEAD / 2)
		rp->ahead(rp->arg,
			  &rp->q[(rp->head + JR_AHEAD / 2 - 1) % JR_AHEAD].rec,
			  1);
	return 1;
}

/* Does any valid frame begin after offset @o of @p[0..@len)? */
static bool frame_after(const uint8_t *p, size_t len, size_t o)
{
	const uint8_t *pl;
	uint32_t plen;
	size_t x;

	for (x = o + 1; x + JR_FRAME_HDR < len; x++) {
		size_t y = x;

		if (jr_next(p, len, &y, &pl, &plen) == 1)
			return true;
	}
	return false;
}

/*
 * Replay one segment.  Return: 1 valid to its end, 0 stopped at a bad
 * frame (*@valid: bytes before it; @out->why says why; *@tail: it was
 * where a write was cut -- nothing valid after it), -errno (I/O, or
 * -ENOMEM while applying).
 */
static int replay_seg(struct jr *j, uint64_t seq, bool first, struct replay *rp,
		      struct jr_recovery *out, uint64_t *valid, uint64_t *size,
		      bool *tail)
{
	char name[SEG_NAME_MAX];
	const uint8_t *p = NULL, *pl;
	struct jr_rec rec;
	struct stat st;
	size_t o = 0, start;
	uint32_t plen;
	int fd, rc = 1, r;
	bool head = false;

	seg_name(name, seq);
	*valid = *size = 0;
	*tail = false;
	rp->head = rp->n = 0;
	fd = openat(j->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	*size = (uint64_t)st.st_size;
	if (st.st_size > 0) {
		p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd,
			 0);
		if (p == MAP_FAILED) {
			r = -errno;
			close(fd);
			return r;
		}
		(void)madvise((void *)p, (size_t)st.st_size, MADV_SEQUENTIAL);
	}
	close(fd);
	for (;;) {
		struct pend *pd;

		start = o;
		r = jr_next(p, (size_t)st.st_size, &o, &pl, &plen);
		if (r == 0) {
			if (!head) {
				/* created, crashed before its HEAD */
				snprintf(out->why, sizeof(out->why),
					 "%s: empty", name);
				*tail = true;
				rc = 0;
			}
			break;
		}
		if (r < 0) {
			/* a cut write, or damage with valid frames after */
			*tail = !frame_after(p, (size_t)st.st_size, start);
			snprintf(out->why, sizeof(out->why),
				 "%s at offset %zu: %s", name, start,
				 *tail ? "torn tail (an unfinished write)"
				       : "bad checksum or length");
			rc = 0;
			break;
		}
		if (jr_decode(pl, plen, &rec) < 0) {
			snprintf(out->why, sizeof(out->why),
				 "%s at offset %zu: malformed record", name,
				 start);
			rc = 0;
			break;
		}
		if (!head) {
			/* a segment begins with its HEAD, of our server */
			if (rec.type != JR_HEAD || rec.u[0] != JR_VERSION ||
			    rec.s[0].len != 16 || rec.u[1] != seq ||
			    (!first && memcmp(rec.s[0].p, j->server_id, 16))) {
				snprintf(out->why, sizeof(out->why),
					 "%s: no valid header (version %" PRIu64
					 ")",
					 name,
					 rec.type == JR_HEAD ? rec.u[0] : 0);
				rc = 0;
				break;
			}
			if (first) {
				memcpy(j->server_id, rec.s[0].p, 16);
				j->server_id[16] = '\0';
				out->found = true;
			}
			head = true;
			*valid = o;
			continue;
		}
		if (rec.type == JR_HEAD) {
			snprintf(out->why, sizeof(out->why),
				 "%s at offset %zu: a second header", name,
				 start);
			rc = 0;
			break;
		}
		if (rp->n == JR_AHEAD &&
		    (rc = apply_oldest(rp, name, out, valid)) <= 0)
			break;
		pd = &rp->q[(rp->head + rp->n++) % JR_AHEAD];
		pd->rec = rec;
		pd->start = start;
		pd->end = o;
		if (rp->ahead)
			rp->ahead(rp->arg, &pd->rec, 0);
	}
	/* what was decoded before a stop is valid: apply it */
	while (rc >= 0 && rp->n) {
		r = apply_oldest(rp, name, out, valid);
		if (r <= 0) {
			rc = r;
			*tail = false;
		}
	}
	if (p)
		munmap((void *)p, (size_t)st.st_size);
	return rc;
}

uint64_t jr_disk_bytes(struct jr *j)
{
	char name[SEG_NAME_MAX];
	uint64_t *seqs, sum = 0;
	struct stat st;
	int n, i;

	n = list_segments(j, &seqs);
	for (i = 0; i < n; i++) {
		seg_name(name, seqs[i]);
		if (fstatat(j->dirfd, name, &st, 0) == 0)
			sum += (uint64_t)st.st_size;
	}
	free(seqs);
	return sum;
}

int jr_recover(struct jr *j, bool readonly,
	       int (*apply)(void *arg, const struct jr_rec *rec),
	       void (*ahead)(void *arg, const struct jr_rec *rec, int stage),
	       void *arg, struct jr_recovery *out)
{
	struct replay rp = {.apply = apply, .ahead = ahead, .arg = arg};
	uint64_t *seqs, valid = 0, size = 0, last = 0, last_valid = 0;
	int n, i, rc = 0, r;
	bool stopped = false, tail = false;

	memset(out, 0, sizeof(*out));
	n = list_segments(j, &seqs);
	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		if (stopped) {
			struct stat st;
			char name[SEG_NAME_MAX];

			seg_name(name, seqs[i]);
			if (fstatat(j->dirfd, name, &st, 0) == 0 &&
			    st.st_size > 0) {
				out->dropped += (uint64_t)st.st_size;
				out->lossy = true; /* written after the stop */
			}
			if (!readonly)
				mark_bad(j, seqs[i]);
			continue;
		}
		r = replay_seg(j, seqs[i], i == 0, &rp, out, &valid, &size,
			       &tail);
		if (r < 0) {
			rc = r;
			break;
		}
		out->segments++;
		out->bytes += valid;
		if (r == 0) {
			stopped = true;
			/* found, then lost more than a write in flight */
			if (out->found && !tail)
				out->lossy = true;
			out->dropped += size - valid;
			if (!valid) {
				/* not even a header: the segment goes */
				if (!readonly)
					mark_bad(j, seqs[i]);
				out->segments--;
				continue;
			}
		}
		last = seqs[i];
		last_valid = valid;
	}
	free(seqs);
	if (rc < 0 || readonly)
		return rc;
	j->total = j->base = out->bytes;
	if (!out->found || !last || out->lossy)
		return 0; /* jr_start() sets every segment aside */
	rc = seg_append(j, last, last_valid, false);
	if (rc < 0)
		return rc;
	if (j->sync)
		(void)fdatasync(j->fd);
	return 0;
}

int jr_start(struct jr *j, const char *server_id)
{
	uint64_t *seqs;
	int n, i, rc;

	if (j->fd >= 0)
		return 0; /* recovered: appends go on */
	snprintf(j->server_id, sizeof(j->server_id), "%s", server_id);
	/* a journal that recovered nothing is history: start anew */
	n = list_segments(j, &seqs);
	if (n < 0)
		return n;
	for (i = 0; i < n; i++)
		mark_bad(j, seqs[i]);
	rc = seg_append(j, n ? seqs[n - 1] + 1 : 1, 0, true);
	free(seqs);
	if (rc < 0)
		return rc;
	j->total = j->base = 0;
	put_head(j);
	return jr_commit(j);
}

int jr_rotate(struct jr *j)
{
	int rc;

	if (off(j))
		return -EIO;
	rc = jr_commit(j);
	if (rc < 0)
		return rc;
	if (j->sync)
		(void)fdatasync(j->fd);
	rc = seg_append(j, j->seq + 1, 0, true);
	if (rc < 0) {
		log_err("journal %s: cannot create a segment: %s", j->dir,
			strerror(-rc));
		j->failed = true;
		return rc;
	}
	/*
	 * The HEAD goes out now: records appended after it must never sit in
	 * a segment a crash could leave without one (recovery would reject
	 * the segment, and with it what they acknowledged).
	 */
	put_head(j);
	return jr_commit(j);
}

void jr_drop_before(struct jr *j)
{
	uint64_t *seqs;
	char name[SEG_NAME_MAX];
	struct stat st;
	int n, i;

	n = list_segments(j, &seqs);
	if (n < 0)
		return;
	for (i = 0; i < n && seqs[i] < j->seq; i++) {
		seg_name(name, seqs[i]);
		if (fstatat(j->dirfd, name, &st, 0) == 0 &&
		    j->total >= (uint64_t)st.st_size)
			j->total -= (uint64_t)st.st_size;
		(void)unlinkat(j->dirfd, name, 0);
	}
	free(seqs);
	sync_dir(j);
	j->base = j->total;
}

int jr_commit(struct jr *j)
{
	size_t done = 0;
	ssize_t n;

	if (!j || j->fd < 0)
		return 0;
	if (j->failed) {
		j->out.len = 0;
		return -EIO;
	}
	while (done < j->out.len) {
		n = write(j->fd, j->out.data + done, j->out.len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;

			log_err("journal %s: write failed: %s", j->dir,
				strerror(e));
			j->failed = true;
			j->out.len = 0;
			return -e;
		}
		done += (size_t)n;
	}
	if (j->sync && done) {
		if (fdatasync(j->fd) < 0) {
			int e = errno;

			log_err("journal %s: fdatasync failed: %s", j->dir,
				strerror(e));
			j->failed = true;
			j->out.len = 0;
			return -e;
		}
		j->syncs++;
	}
	j->total += done;
	j->written += done;
	j->commits += done != 0;
	j->out.len = 0;
	if (j->out.cap > (1u << 20))
		buf_free(&j->out);
	return 0;
}

int jr_remove(struct jr *j)
{
	uint64_t *seqs;
	char name[SEG_NAME_MAX];
	int n, i, rc = 0;

	if (j->fd >= 0)
		close(j->fd);
	j->fd = -1;
	j->out.len = 0;
	n = list_segments(j, &seqs);
	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		seg_name(name, seqs[i]);
		if (unlinkat(j->dirfd, name, 0) < 0 && errno != ENOENT && !rc)
			rc = -errno;
	}
	free(seqs);
	if (!rc && fsync(j->dirfd) < 0)
		rc = -errno;
	return rc;
}

void jr_close(struct jr *j)
{
	if (j->fd >= 0) {
		(void)jr_commit(j);
		(void)fdatasync(j->fd);
		close(j->fd);
	}
	if (j->lockfd >= 0)
		close(j->lockfd);
	if (j->dirfd >= 0)
		close(j->dirfd);
	buf_free(&j->out);
	free(j->dir);
	memset(j, 0, sizeof(*j));
	j->fd = j->dirfd = j->lockfd = -1;
}
