/* SPDX-License-Identifier: Apache-2.0 */
/*
 * statedir.c - default state directories and their lock (see statedir.h)
 */
#include "statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

const char *statedir_default(char *buf, size_t len, const char *root_dir,
			     const char *name)
{
	const char *x = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	struct passwd *pw;

	if (geteuid() == 0)
		return root_dir;
	if (x && *x == '/') {
		snprintf(buf, len, "%s/maru/%s", x, name);
		return buf;
	}
	if (!home || !*home) {
		pw = getpwuid(geteuid());
		home = pw ? pw->pw_dir : NULL;
	}
	if (!home)
		return root_dir;
	snprintf(buf, len, "%s/.local/state/maru/%s", home, name);
	return buf;
}

int statedir_mkdir_p(const char *dir, unsigned mode)
{
	char p[4096];
	size_t i, n = strlen(dir);

	if (n == 0 || n >= sizeof(p))
		return -ENAMETOOLONG;
	memcpy(p, dir, n + 1);
	for (i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		p[i] = '\0';
		if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST)
			return -errno;
		if (i < n)
			p[i] = '/';
	}
	return 0;
}

/* the pid holding an flock on @fd's file, from /proc/locks; 0: unknown */
static long flock_holder(int fd)
{
	char line[256];
	struct stat st;
	long found = 0;
	FILE *f;

	if (fstat(fd, &st) < 0)
		return 0;
	f = fopen("/proc/locks", "re");
	if (!f)
		return 0;
	/* "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" (dev in hex) */
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long long ino;
		char type[16], mode[16];
		long pid;

		if (sscanf(line, "%*d: %15s %*s %15s %ld %x:%x:%llu", type,
			   mode, &pid, &maj, &min, &ino) != 6)
			continue;
		if (!strcmp(type, "FLOCK") && strcmp(mode, "READ") &&
		    maj == major(st.st_dev) && min == minor(st.st_dev) &&
		    ino == (unsigned long long)st.st_ino)
			found = pid;
	}
	fclose(f);
	return found;
}

/* the program @pid runs (basename of its argv[0]), else @dflt */
static const char *program_of(long pid, const char *dflt, char *buf, size_t len)
{
	char path[64], *base;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dflt;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return dflt;
	buf[n] = '\0'; /* argv[0] ends at its own NUL */
	base = strrchr(buf, '/');
	base = base ? base + 1 : buf;
	return *base ? base : dflt;
}

int statedir_flock(int fd, const char *what, const char *who, char *err,
		   size_t errlen)
{
	char name[256];
	long pid;
	int e;

	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	e = errno;
	if (e != EWOULDBLOCK) {
		snprintf(err, errlen, "cannot lock %s: %s", what, strerror(e));
		return -e;
	}
	pid = flock_holder(fd);
	if (pid > 0)
		snprintf(err, errlen, "%s is in use by another %s (pid %ld)",
			 what, program_of(pid, who, name, sizeof(name)), pid);
	else
		snprintf(err, errlen, "%s is in use by another %s", what, who);
	return -EWOULDBLOCK;
}

int statedir_lock(int dirfd, const char *dir, const char *who, char *err,
		  size_t errlen)
{
	int fd, rc;

	fd = openat(dirfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot write in %s: %s", dir,
			 strerror(-rc));
		return rc;
	}
	rc = statedir_flock(fd, dir, who, err, errlen);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}
