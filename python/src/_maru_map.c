/* SPDX-License-Identifier: Apache-2.0 */
/*
 * _maru_map.c - Mapping: one mapped region's address range, exported
 * through the buffer protocol (every memoryview the extension hands out is
 * a range of one), with its count of live exports
 *
 * A Mapping whose region libmaru unmapped (the handler closed) is "dead":
 * no new exports; while old ones live, _maru.c maps an anonymous
 * placeholder at its address, unmapped here with the last export.
 *
 * Context: the GIL protects every field.
 */
#define PY_SSIZE_T_CLEAN
#include "_maru.h"
#include "_maru_int.h"

#include <sys/mman.h>

static int mapping_getbuffer(PyObject *obj, Py_buffer *view, int flags)
{
	MappingObject *m = (MappingObject *)obj;
	Py_ssize_t off = m->req_off, len = m->req_len;

	if (m->dead) {
		PyErr_SetString(PyExc_ValueError,
				"region is no longer mapped (handler closed)");
		return -1;
	}
	m->req_off = 0;
	m->req_len = m->len;
	if (PyBuffer_FillInfo(view, obj, m->base + off, len, 0, flags) < 0)
		return -1;
	m->exports++;
	return 0;
}

static void mapping_releasebuffer(PyObject *obj, Py_buffer *view)
{
	MappingObject *m = (MappingObject *)obj;

	m->exports--;
	if (m->exports == 0 && m->placeholder) {
		munmap(m->base, (size_t)m->len);
		m->placeholder = 0;
	}
}

static PyBufferProcs mapping_as_buffer = {
	.bf_getbuffer = mapping_getbuffer,
	.bf_releasebuffer = mapping_releasebuffer,
};

static void mapping_dealloc(PyObject *obj)
{
	/* exports hold a reference to obj, so there are none left here */
	Py_TYPE(obj)->tp_free(obj);
}

static PyObject *mapping_repr(PyObject *obj)
{
	MappingObject *m = (MappingObject *)obj;

	return PyUnicode_FromFormat("<maru Mapping region %llu, %zd bytes%s>",
				    (unsigned long long)m->region_id, m->len,
				    m->dead ? ", unmapped" : "");
}

static PyObject *mapping_get_exports(PyObject *obj, void *closure)
{
	return PyLong_FromSsize_t(((MappingObject *)obj)->exports);
}

static PyGetSetDef mapping_getset[] = {
	{"exports", mapping_get_exports, NULL, "live buffer exports", NULL},
	{NULL},
};

/* clang-format off */
PyTypeObject Mapping_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "maru_core._maru.Mapping",
	.tp_basicsize = sizeof(MappingObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A mapped region, exported read+write through the buffer API",
	.tp_dealloc = mapping_dealloc,
	.tp_repr = mapping_repr,
	.tp_as_buffer = &mapping_as_buffer,
	.tp_getset = mapping_getset,
};
/* clang-format on */

/* see _maru_int.h: the range is passed to mapping_getbuffer() through
 * ->req_off/->req_len; the GIL is held from here to there, so nobody else
 * can interleave */
PyObject *mapping_view(MappingObject *m, Py_ssize_t off, Py_ssize_t len)
{
	m->req_off = off;
	m->req_len = len;
	return PyMemoryView_FromObject((PyObject *)m);
}
