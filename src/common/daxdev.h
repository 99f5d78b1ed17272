/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daxdev.h - the MARUDEV header on a device: read, write, scan
 *
 * The header (devhdr.h, the codec) sits in the first 32 bytes of a
 * device-DAX device, or of a file that stands in for one.  Device DAX maps
 * only whole alignment units, so every access maps one unit: the device's
 * sysfs "align" (/sys/bus/dax/devices/<name>/align), 2 MiB when there is
 * none, clamped to the size of a regular file.
 *
 * Users: libmaru's mapper (the uuid -> local path table it builds at
 * connect) and libmaru's public device functions (maru_device_*), which the
 * Python package's device_scanner calls.  The resource manager writes the
 * header through the pool mapping it already holds (dev.c).
 *
 * Context: any thread; no state.
 */
#ifndef MARU_COMMON_DAXDEV_H
#define MARU_COMMON_DAXDEV_H

#include <stdint.h>

#include "devhdr.h"

#define DAXDEV_SYSFS "/sys/bus/dax/devices"

/**
 * daxdev_header_read - the header at the start of @path
 * Return: 0 with @h filled; -ENOENT when there is no MARUDEV header; or
 * the -errno of opening or mapping @path.
 */
int daxdev_header_read(const char *path, struct devhdr *h);

/**
 * daxdev_header_write - write a version-1 header with @uuid at the start
 * of @path (@uuid NULL: zero the 32 bytes), then msync
 * Return: 0 or -errno.
 */
int daxdev_header_write(const char *path, const uint8_t *uuid);

/**
 * daxdev_scan - every device under @sysdir (NULL: DAXDEV_SYSFS) whose node
 * in @devdir (NULL: /dev) carries a header, in directory order
 * @fn: called with the node's path and its header; a non-zero return
 *      stops the scan and is returned
 * Return: 0 (also when @sysdir does not exist) or @fn's value.
 */
int daxdev_scan(const char *sysdir, const char *devdir,
		int (*fn)(const char *dev, const struct devhdr *h, void *arg),
		void *arg);

#endif
