/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daxdev.c - the MARUDEV header on a device (see daxdev.h)
 */
#include "daxdev.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_ALIGN (2ull << 20)

/* the alignment unit of @path's device, clamped to a regular file's size */
static size_t map_len(int fd, const char *path)
{
	char sys[512], buf[64], name[256];
	uint64_t n = 0;
	struct stat st;
	ssize_t k;
	int sfd;

	snprintf(name, sizeof(name), "%s", path);
	snprintf(sys, sizeof(sys), "%s/%s/align", DAXDEV_SYSFS, basename(name));
	sfd = open(sys, O_RDONLY | O_CLOEXEC);
	if (sfd >= 0) {
		k = read(sfd, buf, sizeof(buf) - 1);
		close(sfd);
		if (k > 0) {
			buf[k] = '\0';
			n = strtoull(buf, NULL, 0);
		}
	}
	if (!n)
		n = DEFAULT_ALIGN;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
	    (uint64_t)st.st_size < n)
		n = (uint64_t)st.st_size;
	return (size_t)n;
}

/* map the first unit of @path; Return: the mapping or NULL (errno set) */
static void *map_first(const char *path, bool write, size_t *len)
{
	int fd = open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	void *p;

	if (fd < 0)
		return NULL;
	*len = map_len(fd, path);
	p = mmap(NULL, *len, write ? PROT_READ | PROT_WRITE : PROT_READ,
		 MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

int daxdev_header_read(const char *path, struct devhdr *h)
{
	size_t len;
	void *p = map_first(path, false, &len);
	int rc;

	if (!p)
		return -errno;
	rc = devhdr_parse(p, len, h);
	munmap(p, len);
	return rc == -EPROTO ? -ENOENT : rc; /* shorter than a header */
}

int daxdev_header_write(const char *path, const uint8_t *uuid)
{
	size_t len;
	void *p = map_first(path, true, &len);

	if (!p)
		return -errno;
	if (len < DEVHDR_SIZE) {
		munmap(p, len);
		return -ENOSPC;
	}
	if (uuid)
		devhdr_format(p, uuid);
	else
		memset(p, 0, DEVHDR_SIZE);
	/* device DAX may refuse msync: the stores are in the device anyway */
	(void)msync(p, len, MS_SYNC);
	munmap(p, len);
	return 0;
}

int daxdev_scan(const char *sysdir, const char *devdir,
		int (*fn)(const char *dev, const struct devhdr *h, void *arg),
		void *arg)
{
	struct dirent *de;
	struct devhdr h;
	char dev[512];
	int rc = 0;
	DIR *d;

	d = opendir(sysdir ? sysdir : DAXDEV_SYSFS);
	if (!d)
		return 0;
	while (!rc && (de = readdir(d))) {
		if (strncmp(de->d_name, "dax", 3) || strlen(de->d_name) > 60)
			continue;
		snprintf(dev, sizeof(dev), "%s/%s", devdir ? devdir : "/dev",
			 de->d_name);
		if (daxdev_header_read(dev, &h) == 0)
			rc = fn(dev, &h, arg);
	}
	closedir(d);
	return rc;
}
