/* SPDX-License-Identifier: Apache-2.0 */
/*
 * _maru_int.h - what the extension's own files share (not for other
 * modules: they use _maru.h's capsule)
 *
 *   _maru.c      the module and Handler (the handler's calls)
 *   _maru_map.c  Mapping: a mapped region exported through the buffer API
 *   _maru_rm.c   RmClient and the device-header functions: no handler
 *
 * _maru.c calls into the two others; they call nothing of it.  Hidden: the
 * module's only exported symbol is PyInit__maru.
 */
#ifndef MARU_PY_INT_H
#define MARU_PY_INT_H

#include <Python.h>

#include <errno.h>
#include <stdint.h>

/* raise OSError for libmaru's -errno @neg_errno (EIO when it is none).
 * Return: NULL */
static inline PyObject *raise_errno(int neg_errno)
{
	errno = neg_errno < 0 ? -neg_errno : EIO;
	return PyErr_SetFromErrno(PyExc_OSError);
}

/* _maru_map.c */
typedef struct {
	PyObject_HEAD
	char *base;	/* borrows: libmaru's mapping (or our placeholder) */
	Py_ssize_t len; /* bytes mapped */
	uint64_t region_id;
	Py_ssize_t req_off; /* range of the next export, see mapping_view() */
	Py_ssize_t req_len;
	Py_ssize_t exports; /* live Py_buffer exports */
	int dead;	    /* libmaru unmapped it: no new exports */
	int placeholder;    /* base is our anonymous placeholder */
	int rd;		    /* a remote region's read mirror (retrieves) */
} MappingObject;

__attribute__((visibility("hidden"))) extern PyTypeObject Mapping_Type;

/* a memoryview of [off, off + len) of @m.  Return: new reference, or NULL */
__attribute__((visibility("hidden"))) PyObject *
mapping_view(MappingObject *m, Py_ssize_t off, Py_ssize_t len);

/* _maru_rm.c */

/* add RmClient, RmError and the device_* functions to the module @m.
 * Return: 0, or -1 with an exception set */
__attribute__((visibility("hidden"))) int maru_py_rm_add(PyObject *m);

#endif
