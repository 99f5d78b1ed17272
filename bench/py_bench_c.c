/* SPDX-License-Identifier: Apache-2.0 */
/*
 * py_bench_c.c - the C column of bench/py_bench.py --inproc, a Python
 * extension module built with the benchmarks (bench/python.cmake)
 *
 * py_bench.py --inproc measures the Python overhead per operation inside
 * one process: the same MaruHandler, on the same libmaru handler and
 * sockets, is driven alternately by its Python methods and by the C loops
 * here, so that the network and the machine's noise cancel out.  The loops
 * call libmaru directly with the GIL released and time themselves, so the
 * figures hold no Python at all.
 *
 * Design:
 *  - Not part of the installed package: the package's extension
 *    (maru_core._maru) holds no benchmark code.  This module reaches a
 *    Handler's libmaru handler through the extension's capsule
 *    (python/src/_maru.h), which checks the handler's state and counts the
 *    loop as a call in flight, as the Handler's own methods do; keys are
 *    converted by the extension's own conversion.
 *  - It links libmaru of the build tree; imported after maru_core._maru
 *    (py_bench.py imports maru first), the dynamic linker finds
 *    libmaru.so.0 already loaded and both use that one copy.
 *
 * Ownership: nothing outlives a call; the capsule's table is the
 * extension's (borrowed for the life of the process).
 *
 * Thread notes: the loops run with the GIL released, on one handler that
 * no other thread drives meanwhile (py_bench.py is single-threaded).
 */
#define PY_SSIZE_T_CLEAN
#include "_maru.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static const struct maru_py_api *api; /* borrows: maru_core._maru's table */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile uint64_t bench_sink; /* keeps the read loop from vanishing */

/* @iters retrieves of @keys round robin, each timed into @lat; misses */
static int retrieve_loop(struct maru_handler *h, const struct maru_key *keys,
			 Py_ssize_t n, int iters, int read, uint64_t *lat)
{
	int i, misses = 0;

	for (i = 0; i < iters; i++) {
		struct maru_view v;
		uint64_t t0 = mono_ns();
		int rc = maru_kv_retrieve(h, &keys[i % n], &v);

		if (read && rc == 1) {
			const uint64_t *w = v.ptr;
			uint64_t sum = 0;
			size_t j;

			for (j = 0; j < v.len / 8; j++)
				sum += w[j];
			bench_sink += sum;
		}
		lat[i] = mono_ns() - t0;
		misses += rc != 1;
	}
	return misses;
}

/*
 * store_loop - alloc + copy @size bytes of @src + store for @n keys, in
 * batches of @per; then delete them all (untimed)
 * Return: 0 or -errno; *@ns the time of the first part.
 */
static int store_loop(struct maru_handler *h, const struct maru_key *keys,
		      struct maru_page *pages, bool *ok, Py_ssize_t n,
		      Py_ssize_t per, const void *src, size_t size,
		      uint64_t *ns)
{
	uint64_t t0 = mono_ns();
	Py_ssize_t i, j;
	int rc = 0;

	for (i = 0; rc >= 0 && i < n; i += per) {
		for (j = 0; rc >= 0 && j < per; j++) {
			rc = maru_page_alloc(h, size, &pages[i + j]);
			if (rc >= 0)
				memcpy(pages[i + j].ptr, src, size);
		}
		if (rc < 0)
			break;
		if (per == 1)
			rc = maru_kv_store(h, &keys[i], &pages[i]);
		else
			rc = maru_kv_batch_store(h, &keys[i], &pages[i],
						 (size_t)per, ok);
	}
	*ns = mono_ns() - t0;
	for (i = 0; i < n; i++)
		maru_kv_delete(h, &keys[i]);
	return rc < 0 ? rc : 0;
}

/* retrieve(handler, keys, iters, read) -> [ns per call] */
static PyObject *bench_retrieve(PyObject *mod, PyObject *args)
{
	struct maru_key *keys = NULL;
	PyObject *hobj, *keys_obj, *seq = NULL, *list = NULL;
	struct maru_handler *h;
	PyThreadState *ts;
	uint64_t *lat = NULL;
	int iters, read, misses = 0;
	Py_ssize_t n, i;

	if (!PyArg_ParseTuple(args, "OOip", &hobj, &keys_obj, &iters, &read))
		return NULL;
	n = api->keys_array(keys_obj, &seq, &keys);
	if (n <= 0 || iters <= 0) {
		if (n == 0)
			PyErr_SetString(PyExc_ValueError, "no keys");
		goto out;
	}
	lat = PyMem_Malloc((size_t)iters * sizeof(*lat));
	if (!lat) {
		PyErr_NoMemory();
		goto out;
	}
	h = api->call_begin(hobj);
	if (!h)
		goto out;
	ts = PyEval_SaveThread();
	misses = retrieve_loop(h, keys, n, iters, read, lat);
	PyEval_RestoreThread(ts);
	api->call_end(hobj);
	if (misses) {
		PyErr_Format(PyExc_RuntimeError, "%d retrieves missed", misses);
		goto out;
	}
	list = PyList_New(iters);
	for (i = 0; list && i < iters; i++)
		PyList_SET_ITEM(list, i, PyLong_FromUnsignedLongLong(lat[i]));
out:
	PyMem_Free(lat);
	PyMem_Free(keys);
	Py_XDECREF(seq);
	return list;
}

/* store(handler, keys, src, batch) -> ns of alloc + copy + store of all */
static PyObject *bench_store(PyObject *mod, PyObject *args)
{
	Py_ssize_t n, per;
	struct maru_key *keys = NULL;
	struct maru_page *pages = NULL;
	PyObject *hobj, *keys_obj, *seq = NULL, *res = NULL;
	struct maru_handler *h;
	PyThreadState *ts;
	Py_buffer src;
	bool *ok = NULL;
	uint64_t t = 0;
	int rc;

	if (!PyArg_ParseTuple(args, "OOy*n", &hobj, &keys_obj, &src, &per))
		return NULL;
	n = api->keys_array(keys_obj, &seq, &keys);
	if (n < 0)
		goto out_buf;
	if (per < 1 || n % per) {
		PyErr_SetString(PyExc_ValueError, "len(keys) % batch != 0");
		goto out;
	}
	pages = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*pages));
	ok = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*ok));
	if (!pages || !ok) {
		PyErr_NoMemory();
		goto out;
	}
	h = api->call_begin(hobj);
	if (!h)
		goto out;
	ts = PyEval_SaveThread();
	rc = store_loop(h, keys, pages, ok, n, per, src.buf, (size_t)src.len,
			&t);
	PyEval_RestoreThread(ts);
	api->call_end(hobj);
	if (rc < 0) {
		errno = -rc;
		PyErr_SetFromErrno(PyExc_OSError);
		goto out;
	}
	res = PyLong_FromUnsignedLongLong(t);
out:
	PyMem_Free(ok);
	PyMem_Free(pages);
	PyMem_Free(keys);
	Py_XDECREF(seq);
out_buf:
	PyBuffer_Release(&src);
	return res;
}

static PyMethodDef bench_methods[] = {
	{"retrieve", bench_retrieve, METH_VARARGS,
	 "retrieve(handler, keys, iters, read) -> [ns per call]: @iters "
	 "retrieves of @keys round robin (reading every byte if @read)"},
	{"store", bench_store, METH_VARARGS,
	 "store(handler, keys, src, batch) -> ns for alloc + copy + store of "
	 "every key (batch_store when batch > 1), then deletes them untimed"},
	{NULL},
};

static struct PyModuleDef bench_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "py_bench_c",
	.m_doc = "C loops on a maru_core._maru.Handler (bench/py_bench.py)",
	.m_size = -1,
	.m_methods = bench_methods,
};

PyMODINIT_FUNC PyInit_py_bench_c(void); /* the only exported symbol */

PyMODINIT_FUNC PyInit_py_bench_c(void)
{
	api = PyCapsule_Import(MARU_PY_API_CAPSULE, 0);
	if (!api)
		return NULL;
	if (api->version != MARU_PY_API_VERSION) {
		PyErr_Format(PyExc_ImportError,
			     "%s is version %d, this module needs %d (rebuild "
			     "it with the installed package's tree)",
			     MARU_PY_API_CAPSULE, api->version,
			     MARU_PY_API_VERSION);
		api = NULL;
		return NULL;
	}
	return PyModule_Create(&bench_module);
}
