/* SPDX-License-Identifier: Apache-2.0 */
/*
 * _maru.h - the C interface of maru_core._maru, for other extension modules
 *
 * The extension exports a capsule, maru_core._maru._C_API, that holds a
 * struct maru_py_api: what a C module built from this tree needs in order
 * to work on a Handler that the package made, without knowing its layout
 * (the pattern of CPython's "Providing a C API for an Extension Module",
 * as datetime's PyDateTime_CAPI).  The Python API never goes through it;
 * its user is the benchmark module bench/py_bench_c.c, which times libmaru
 * loops on the handler and sockets of a MaruHandler.
 *
 * Getting it: PyCapsule_Import(MARU_PY_API_CAPSULE, 0) (which imports
 * maru_core._maru), then check ->version against MARU_PY_API_VERSION.  The
 * struct only grows at its end; any other change takes a new version.
 *
 * Include it first, after #define PY_SSIZE_T_CLEAN.
 *
 * Context: every function with the GIL held.
 */
#ifndef MARU_PY_API_H
#define MARU_PY_API_H

#include <Python.h>

#include <maru/maru.h>

#define MARU_PY_API_CAPSULE "maru_core._maru._C_API"
#define MARU_PY_API_VERSION 1

struct maru_py_api {
	int version; /* MARU_PY_API_VERSION */

	/*
	 * call_begin - the libmaru handler of a Handler, for one call made
	 * with the GIL released
	 * @handler: borrowed; a maru_core._maru.Handler
	 * Return: borrowed until call_end(@handler); NULL with an exception
	 * set when @handler is no Handler, is closing or is not connected
	 * (the Handler's own messages).  The call counts as in flight until
	 * call_end(), so close() waits for it.
	 */
	struct maru_handler *(*call_begin)(PyObject *handler);

	/* call_end - the call that call_begin(@handler) started is over */
	void (*call_end)(PyObject *handler);

	/*
	 * keys_array - a sequence of keys (str, int, bytes) as libmaru keys,
	 * converted as the Handler's methods convert them
	 * @seq: gives a tuple that keeps the key objects alive (the keys
	 *       borrow their strings); release with Py_DECREF
	 * @keys: gives a PyMem_Malloc()ed array; release with PyMem_Free
	 * Return: the number of keys, or -1 with an exception set.
	 */
	Py_ssize_t (*keys_array)(PyObject *obj, PyObject **seq,
				 struct maru_key **keys);
};

#endif /* MARU_PY_API_H */
