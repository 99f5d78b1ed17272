/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_atomicfile.c - files replaced with tmp + fsync + rename, read back
 *
 * A replacement leaves the new content and no temporary file; the mode is
 * the one asked whatever the umask; a failed replacement (a directory in
 * the way) leaves the old content and no temporary file; reading gives
 * the bytes, NULL for an empty file and -ENOENT for a missing one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"

static char dir[64];
static int dirfd_;

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/maru-atomicfile-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return dirfd_ < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[128];

	close(dirfd_);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static bool exists(const char *name)
{
	struct stat st;

	return fstatat(dirfd_, name, &st, 0) == 0;
}

static void expect_content(const char *name, const char *want)
{
	uint8_t *p = NULL;
	size_t n = 0;

	assert_int_equal(atomicfile_read(dirfd_, name, &p, &n), 0);
	assert_int_equal(n, strlen(want));
	assert_memory_equal(p, want, n);
	free(p);
}

static void test_write_replace_read(void **state)
{
	struct stat st;
	mode_t old = umask(077);

	assert_int_equal(atomicfile_write(dirfd_, "a", "first", 5, 0640), 0);
	expect_content("a", "first");
	assert_int_equal(fstatat(dirfd_, "a", &st, 0), 0);
	assert_int_equal(st.st_mode & 0777, 0640); /* despite umask 077 */
	assert_int_equal(atomicfile_write(dirfd_, "a", "second!", 7, 0600), 0);
	expect_content("a", "second!");
	assert_false(exists("a.tmp"));
	umask(old);
}

static void test_read_empty_and_missing(void **state)
{
	uint8_t *p = (uint8_t *)"untouched";
	size_t n = 99;

	assert_int_equal(atomicfile_write(dirfd_, "empty", "", 0, 0600), 0);
	assert_int_equal(atomicfile_read(dirfd_, "empty", &p, &n), 0);
	assert_null(p);
	assert_int_equal(n, 0);
	assert_int_equal(atomicfile_read(dirfd_, "missing", &p, &n), -ENOENT);
}

static void test_failure_keeps_old(void **state)
{
	char name[300];

	assert_int_equal(atomicfile_write(dirfd_, "b", "old", 3, 0600), 0);
	/* the rename fails: a directory where the file would go */
	assert_int_equal(mkdirat(dirfd_, "d", 0700), 0);
	assert_true(atomicfile_write(dirfd_, "d", "new", 3, 0600) < 0);
	assert_false(exists("d.tmp"));
	expect_content("b", "old");
	/* a name with no room for ".tmp" is refused before any file */
	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	assert_int_equal(atomicfile_write(dirfd_, name, "x", 1, 0600),
			 -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_replace_read),
		cmocka_unit_test(test_read_empty_and_missing),
		cmocka_unit_test(test_failure_keeps_old),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
