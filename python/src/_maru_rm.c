/* SPDX-License-Identifier: Apache-2.0 */
/*
 * _maru_rm.c - the parts of maru_core._maru that need no handler: RmClient
 * (libmaru's resource-manager client, maru_rm_*, for
 * maru_shm.MaruShmClient) and the MARUDEV device-header functions
 * (maru_device_*, for maru_shm's device scanner)
 *
 * A failed RmClient request raises RmError(errno, answered, message):
 * answered tells a status of the resource manager from a transport
 * failure, message is its ERROR_RESP text or "".  Every libmaru call runs
 * with the GIL released, as in _maru.c.
 *
 * Ownership: an RmClient owns its struct maru_rm (maru_rm_close() in
 * dealloc).  Context: the GIL protects every field.
 */
#define PY_SSIZE_T_CLEAN
#include "_maru.h"
#include "_maru_int.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

static PyObject *RmError;

typedef struct {
	PyObject_HEAD
	struct maru_rm *rm; /* owns */
} RmObject;

static PyObject *rm_raise(int rc, const struct maru_rm_status *st)
{
	PyObject *v = Py_BuildValue("(iOs)", -rc,
				    st->answered ? Py_True : Py_False, st->msg);

	if (v) {
		PyErr_SetObject(RmError, v);
		Py_DECREF(v);
	}
	return NULL;
}

static int rm_init(PyObject *obj, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"address", "timeout_ms", NULL};
	RmObject *self = (RmObject *)obj;
	const char *addr;
	int tmo = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|i", kwlist, &addr, &tmo))
		return -1;
	if (self->rm) {
		PyErr_SetString(PyExc_RuntimeError, "RmClient already open");
		return -1;
	}
	rc = maru_rm_open(addr, tmo, &self->rm);
	if (rc < 0) {
		if (rc == -EINVAL)
			PyErr_Format(PyExc_ValueError,
				     "bad resource manager address %R (want "
				     "host:port)",
				     PyTuple_GET_ITEM(args, 0));
		else
			raise_errno(rc);
		return -1;
	}
	return 0;
}

static void rm_dealloc(PyObject *obj)
{
	RmObject *self = (RmObject *)obj;

	maru_rm_close(self->rm);
	Py_TYPE(obj)->tp_free(obj);
}

static struct maru_rm *rm_of(RmObject *self)
{
	if (!self->rm)
		PyErr_SetString(PyExc_RuntimeError, "RmClient is closed");
	return self->rm;
}

/* a (region_id, offset, length, auth_token) tuple */
static int handle_arg(PyObject *t, struct maru_region_handle *h)
{
	unsigned long long v[4];

	if (!PyArg_ParseTuple(t, "KKKK", &v[0], &v[1], &v[2], &v[3]))
		return -1;
	h->region_id = v[0];
	h->offset = v[1];
	h->length = v[2];
	h->auth_token = v[3];
	return 0;
}

static PyObject *rm_alloc(PyObject *obj, PyObject *args)
{
	struct maru_rm *rm = rm_of((RmObject *)obj);
	struct maru_rm_status st;
	struct maru_rm_region r;
	unsigned long long size;
	const char *path = "";
	int rc;

	if (!rm || !PyArg_ParseTuple(args, "K|s", &size, &path))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = maru_rm_alloc(rm, size, path, &r, &st);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return rm_raise(rc, &st);
	return Py_BuildValue("(KKKKKss)", r.handle.region_id, r.handle.offset,
			     r.handle.length, r.handle.auth_token,
			     r.requested_size, r.path, r.uuid);
}

static PyObject *rm_free(PyObject *obj, PyObject *args)
{
	struct maru_rm *rm = rm_of((RmObject *)obj);
	struct maru_region_handle h;
	struct maru_rm_status st;
	int rc;

	if (!rm || handle_arg(args, &h) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = maru_rm_free(rm, &h, &st);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return rm_raise(rc, &st);
	Py_RETURN_NONE;
}

static PyObject *rm_get_access(PyObject *obj, PyObject *args)
{
	struct maru_rm *rm = rm_of((RmObject *)obj);
	struct maru_region_handle h;
	struct maru_rm_status st;
	struct maru_rm_region r;
	int rc;

	if (!rm || handle_arg(args, &h) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = maru_rm_get_access(rm, &h, &r, &st);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		return rm_raise(rc, &st);
	return Py_BuildValue("(sKKs)", r.path, r.handle.offset, r.handle.length,
			     r.uuid);
}

struct pools {
	struct maru_pool_info *v;
	char **paths; /* owns each */
	size_t n, cap;
};

/* called with the GIL released: copy, build the list afterwards */
static int pool_one(const struct maru_pool_info *p, void *arg)
{
	struct pools *ps = arg;
	void *nv, *np;

	if (ps->n == ps->cap) {
		ps->cap = ps->cap ? 2 * ps->cap : 4;
		nv = realloc(ps->v, ps->cap * sizeof(*ps->v));
		np = nv ? realloc(ps->paths, ps->cap * sizeof(*ps->paths))
			: NULL;
		if (nv)
			ps->v = nv;
		if (!np)
			return -ENOMEM;
		ps->paths = np;
	}
	ps->v[ps->n] = *p;
	ps->paths[ps->n] = strdup(p->dax_path);
	if (!ps->paths[ps->n])
		return -ENOMEM;
	ps->n++;
	return 0;
}

static PyObject *rm_stats(PyObject *obj, PyObject *unused)
{
	struct maru_rm *rm = rm_of((RmObject *)obj);
	struct pools ps = {0};
	struct maru_rm_status st;
	PyObject *list = NULL, *t;
	size_t i;
	int rc;

	(void)unused;
	if (!rm)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = maru_rm_stats(rm, pool_one, &ps, &st);
	Py_END_ALLOW_THREADS
	if (rc == -ENOMEM && !st.answered)
		PyErr_NoMemory();
	else if (rc < 0)
		rm_raise(rc, &st);
	else if ((list = PyList_New(0)))
		for (i = 0; i < ps.n; i++) {
			t = Py_BuildValue("(sIKKK)", ps.paths[i],
					  ps.v[i].dax_type, ps.v[i].total_size,
					  ps.v[i].free_size,
					  ps.v[i].align_bytes);
			if (!t || PyList_Append(list, t) < 0) {
				Py_XDECREF(t);
				Py_CLEAR(list);
				break;
			}
			Py_DECREF(t);
		}
	for (i = 0; i < ps.n; i++)
		free(ps.paths[i]);
	free(ps.paths);
	free(ps.v);
	return list;
}

/* COUNTERS, copied with the GIL released, as pool_one */
#define RM_MAX_COUNTERS 64
struct counters {
	char name[RM_MAX_COUNTERS][64];
	uint64_t v[RM_MAX_COUNTERS];
	size_t n;
};

static int counter_one(const char *name, uint64_t value, void *arg)
{
	struct counters *cs = arg;

	if (cs->n == RM_MAX_COUNTERS)
		return 0; /* more than we know of: the rest is dropped */
	snprintf(cs->name[cs->n], sizeof(cs->name[0]), "%s", name);
	cs->v[cs->n++] = value;
	return 0;
}

static PyObject *rm_counters(PyObject *obj, PyObject *unused)
{
	struct maru_rm *rm = rm_of((RmObject *)obj);
	struct counters *cs;
	struct maru_rm_status st;
	PyObject *d = NULL, *v;
	size_t i;
	int rc;

	(void)unused;
	if (!rm)
		return NULL;
	cs = calloc(1, sizeof(*cs));
	if (!cs)
		return PyErr_NoMemory();
	Py_BEGIN_ALLOW_THREADS
	rc = maru_rm_counters(rm, counter_one, cs, &st);
	Py_END_ALLOW_THREADS
	if (rc < 0)
		rm_raise(rc, &st);
	else if ((d = PyDict_New()))
		for (i = 0; i < cs->n; i++) {
			v = PyLong_FromUnsignedLongLong(cs->v[i]);
			if (!v || PyDict_SetItemString(d, cs->name[i], v) < 0) {
				Py_XDECREF(v);
				Py_CLEAR(d);
				break;
			}
			Py_DECREF(v);
		}
	free(cs);
	return d;
}

static PyObject *rm_close(PyObject *obj, PyObject *unused)
{
	RmObject *self = (RmObject *)obj;

	(void)unused;
	maru_rm_close(self->rm);
	self->rm = NULL;
	Py_RETURN_NONE;
}

static PyObject *rm_get_client_id(PyObject *obj, void *closure)
{
	struct maru_rm *rm = rm_of((RmObject *)obj);

	(void)closure;
	return rm ? PyUnicode_FromString(maru_rm_client_id(rm)) : NULL;
}

static PyMethodDef rm_methods[] = {
	{"alloc", rm_alloc, METH_VARARGS,
	 "alloc(size, dax_path='') -> (region_id, offset, length, auth_token, "
	 "requested_size, path, uuid)"},
	{"free", rm_free, METH_VARARGS,
	 "free(region_id, offset, length, auth_token)"},
	{"get_access", rm_get_access, METH_VARARGS,
	 "get_access(region_id, offset, length, auth_token) -> (path, offset, "
	 "length, uuid)"},
	{"stats", rm_stats, METH_NOARGS,
	 "stats() -> [(dax_path, dax_type, total, free, align)]"},
	{"counters", rm_counters, METH_NOARGS,
	 "counters() -> {name: value}: the resource manager's counters "
	 "(OSError ENOTSUP from one without them)"},
	{"close", rm_close, METH_NOARGS, "close the connection"},
	{NULL},
};

static PyGetSetDef rm_getset[] = {
	{"client_id", rm_get_client_id, NULL, "<hostname>:<pid>", NULL},
	{NULL},
};

/* clang-format off */
static PyTypeObject Rm_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "maru_core._maru.RmClient",
	.tp_basicsize = sizeof(RmObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "RmClient(address, timeout_ms=0): libmaru's resource-manager "
		  "client",
	.tp_new = PyType_GenericNew,
	.tp_init = rm_init,
	.tp_dealloc = rm_dealloc,
	.tp_methods = rm_methods,
	.tp_getset = rm_getset,
};
/* clang-format on */

/* device_header_read(path) -> (uuid, version), or None without a header */
static PyObject *mod_device_header_read(PyObject *mod, PyObject *args)
{
	const char *path;
	uint32_t version;
	char uuid[37];
	int rc;

	(void)mod;
	if (!PyArg_ParseTuple(args, "s", &path))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = maru_device_header_read(path, uuid, &version);
	Py_END_ALLOW_THREADS
	if (rc == -ENOENT)
		Py_RETURN_NONE;
	if (rc < 0)
		return raise_errno(rc);
	return Py_BuildValue("(sI)", uuid, version);
}

/* device_header_write(path, uuid16 or None) */
static PyObject *mod_device_header_write(PyObject *mod, PyObject *args)
{
	const char *path;
	Py_buffer u = {0};
	PyObject *o;
	int rc;

	(void)mod;
	if (!PyArg_ParseTuple(args, "sO", &path, &o))
		return NULL;
	if (o != Py_None) {
		if (PyObject_GetBuffer(o, &u, PyBUF_SIMPLE) < 0)
			return NULL;
		if (u.len != 16) {
			PyBuffer_Release(&u);
			PyErr_SetString(PyExc_ValueError,
					"uuid_bytes must be 16 bytes");
			return NULL;
		}
	}
	Py_BEGIN_ALLOW_THREADS
	rc = maru_device_header_write(path, o == Py_None ? NULL : u.buf);
	Py_END_ALLOW_THREADS
	if (o != Py_None)
		PyBuffer_Release(&u);
	if (rc < 0)
		return raise_errno(rc);
	Py_RETURN_NONE;
}

static int scan_one(const char *dev, const char *uuid, void *arg)
{
	PyObject *t = Py_BuildValue("(ss)", uuid, dev);
	int rc = t ? PyList_Append(arg, t) : -1;

	Py_XDECREF(t);
	return rc < 0 ? -1 : 0;
}

/* device_scan() -> [(uuid, dev)]; the GIL stays held (a few sysfs reads) */
static PyObject *mod_device_scan(PyObject *mod, PyObject *unused)
{
	PyObject *list = PyList_New(0);

	(void)mod;
	(void)unused;
	if (list && maru_device_scan(scan_one, list) != 0)
		Py_CLEAR(list);
	return list;
}

static PyMethodDef rm_module_methods[] = {
	{"device_header_read", mod_device_header_read, METH_VARARGS,
	 "device_header_read(path) -> (uuid, version) or None"},
	{"device_header_write", mod_device_header_write, METH_VARARGS,
	 "device_header_write(path, uuid_bytes or None)"},
	{"device_scan", mod_device_scan, METH_NOARGS,
	 "device_scan() -> [(uuid, /dev/daxX.Y)]"},
	{NULL},
};

int maru_py_rm_add(PyObject *m)
{
	if (PyType_Ready(&Rm_Type) < 0)
		return -1;
	RmError = PyErr_NewException("maru_core._maru.RmError", NULL, NULL);
	if (!RmError)
		return -1;
	Py_INCREF(RmError); /* the module's reference; ours stays */
	if (PyModule_AddObject(m, "RmError", RmError) < 0) {
		Py_DECREF(RmError);
		return -1;
	}
	Py_INCREF(&Rm_Type);
	if (PyModule_AddObject(m, "RmClient", (PyObject *)&Rm_Type) < 0) {
		Py_DECREF(&Rm_Type);
		return -1;
	}
	return PyModule_AddFunctions(m, rm_module_methods);
}
