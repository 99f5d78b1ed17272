/* SPDX-License-Identifier: Apache-2.0 */
/*
 * atomicfile.h - whole files in a directory: replaced atomically, read back
 *
 * A file that must survive a crash whole (a checkpoint, a key, a list of
 * held owners) is never rewritten in place: the new content goes to
 * "<name>.tmp" in the same directory, is fsync'ed, and is renamed over
 * <name>.  rename(2) within one directory is atomic, so after a crash
 * <name> holds the old content or the new one, never a mix or a short
 * file.  The rename itself is durable once the directory is fsync'ed;
 * that is left to the caller, so that several files can be replaced with
 * one directory fsync at the end (a checkpoint writes one file per pool).
 *
 * Files are named relative to a directory descriptor (openat, renameat):
 * the directory is opened once and a rename of a parent later does not
 * redirect the writes.
 *
 * Context: any thread; no global state (the temporary name is fixed, so
 * two writers of one @name in one directory must not overlap).
 */
#ifndef MARU_COMMON_ATOMICFILE_H
#define MARU_COMMON_ATOMICFILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/**
 * atomicfile_write - replace @dirfd/@name with the @len bytes at @p
 * @mode: the file's mode, set with fchmod() whatever the umask (a key
 *        readable by a group stays so under umask 077)
 * The temporary file is removed on failure; @name is then untouched.
 * The caller fsyncs @dirfd to make the rename durable.
 * Return: 0 or -errno (-ENAMETOOLONG for a @name without room for
 * ".tmp").
 */
int atomicfile_write(int dirfd, const char *name, const void *p, size_t len,
		     mode_t mode);

/**
 * atomicfile_read - the whole of @dirfd/@name (any file, not only one
 * atomicfile_write() made: the resource manager reads its WAL so)
 * @out: on success gives a malloc()ed copy, NULL for an empty file
 * @len: its length
 * Return: 0, -ENOENT if the file is missing, or -errno (-ENOMEM).
 */
int atomicfile_read(int dirfd, const char *name, uint8_t **out, size_t *len);

#endif
