/* SPDX-License-Identifier: Apache-2.0 */
/*
 * atomicfile.c - whole files: tmp + fsync + rename, and reading one back
 * (see atomicfile.h)
 *
 * The writer creates "<name>.tmp" with O_TRUNC (a temporary file left by
 * a crash is simply overwritten), writes it in full (short writes and
 * EINTR retried), fsyncs it, and only then renames it: renaming before
 * the data is on disk could, after a crash, leave <name> empty on file
 * systems that order metadata before data.  Every failure unlinks the
 * temporary file.
 */
#include "atomicfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int atomicfile_write(int dirfd, const char *name, const void *p, size_t len,
		     mode_t mode)
{
	const uint8_t *data = p;
	char tmp[256];
	size_t off = 0;
	ssize_t n;
	int fd, rc = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	(void)fchmod(fd, mode); /* whatever the umask */
	while (off < len) {
		n = write(fd, data + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EIO;
			goto out_close;
		}
		off += (size_t)n;
	}
	if (fsync(fd) < 0) {
		rc = -errno;
		goto out_close;
	}
	close(fd);
	if (renameat(dirfd, tmp, dirfd, name) < 0) {
		rc = -errno;
		unlinkat(dirfd, tmp, 0);
	}
	return rc;
out_close:
	close(fd);
	unlinkat(dirfd, tmp, 0);
	return rc;
}

int atomicfile_read(int dirfd, const char *name, uint8_t **out, size_t *len)
{
	struct stat st;
	uint8_t *data = NULL;
	size_t got = 0;
	ssize_t n;
	int fd, rc = 0;

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out_close;
	}
	if (st.st_size > 0) {
		data = malloc((size_t)st.st_size);
		if (!data) {
			rc = -ENOMEM;
			goto out_close;
		}
	}
	/* a file that shrank meanwhile: what was there (the caller's
	 * decoder judges it) */
	while (got < (size_t)st.st_size) {
		n = read(fd, data + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			free(data);
			goto out_close;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	*out = data;
	*len = got;
out_close:
	close(fd);
	return rc;
}
