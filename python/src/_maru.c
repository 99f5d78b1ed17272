/* SPDX-License-Identifier: Apache-2.0 */
/*
 * _maru.c - maru_core._maru, the CPython extension over libmaru
 *
 * A thin layer: argument conversion, the buffer protocol, the GIL, and
 * libmaru's -errno codes turned into Python values.  The semantics live in
 * libmaru (include/maru/maru.h); the public Python classes live in
 * maru_handler/handler.py (the Handler type below) and maru_shm (RmClient
 * and the device_* functions).  The module sits in maru_core, a package
 * that imports no other maru package, so that both import it one way.
 *
 * Design:
 *  - Handler owns one struct maru_handler.  Every libmaru call runs with
 *    the GIL released (network waits, and libmaru's background threads log
 *    through a sink that needs the GIL: holding it across a libmaru call
 *    could deadlock).  State errors are raised here with upstream's
 *    messages ("Handler is closing", "Not connected. Call connect() first.").
 *  - Zero copy: a Mapping object exports one mapped region through the
 *    buffer protocol; every view handed out (AllocHandle.buf,
 *    MemoryInfo.view, get_buffer_view()) is a memoryview whose buffer is a
 *    range of that region.  Mapping counts its live buffer exports.  After
 *    close, libmaru has unmapped the region; a mapping that still has
 *    exports gets an anonymous zero-filled placeholder mapped at the same
 *    address (MAP_FIXED_NOREPLACE), so a view used after close reads zeros
 *    instead of crashing, and the placeholder is unmapped when the last
 *    export goes away.  (Views are invalid after close(): python-api.md
 *    docs/python-api.md; this only turns a crash into garbage.)
 *  - libmaru may map a region anew at another address: after a loss of
 *    ownership it fences the old mapping (docs/c-api.md) and a retrieve of
 *    a key still stored there maps the region again.  Every view is built
 *    against the pointer libmaru just returned; a cached Mapping whose base
 *    disagrees is moved to ->stale (its views keep working, on the fenced
 *    memory) and replaced.
 *  - close() waits for in-flight calls: each call counts itself in
 *    ->inflight before releasing the GIL, and close() sets ->closing first.
 *  - libmaru log lines go to a Python callable (set_log_sink()), called with
 *    the GIL taken in whatever thread logs; after interpreter shutdown
 *    starts (atexit -> _shutdown()) they are dropped.
 *  - Other C modules built from this tree (the benchmark's) reach a
 *    Handler's libmaru handler through the capsule _C_API (_maru.h), which
 *    does the same state check and in-flight count as the methods; they
 *    never see the layout of HandlerObject.
 *
 * The resource manager's client (RmClient) and the device-header functions
 * need no handler: they live in _maru_rm.c, added to the module at its
 * init (_maru_int.h).
 *
 * Ownership: Handler owns h (maru_handler_free() in dealloc), the mappings
 * dict (region id -> Mapping) and the region-added callable.  A Mapping
 * holds no reference to its Handler (no cycle); it only describes an
 * address range.
 *
 * Thread notes: the GIL protects every field of Handler and Mapping except
 * ->inflight (atomic: read by close() with the GIL released).
 */
#define PY_SSIZE_T_CLEAN
#include "_maru.h"
#include "_maru_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <syslog.h>
#include <time.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Module state (one interpreter): Python classes and sinks set at import. */
static PyObject *alloc_handle_cls; /* owns: maru_handler.memory.AllocHandle */
static PyObject *memory_info_cls;  /* owns: maru_handler.memory.MemoryInfo */
static PyObject *log_sink; /* owns: callable(prio, file, line, func, msg) */
static atomic_int py_alive = 1; /* 0 once the interpreter is exiting */

/* ------------------------------------------------------------------------ */
/* Handler                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
	PyObject_HEAD
	struct maru_handler *h; /* owns */
	uint64_t chunk_size;
	int connected;	     /* connect() succeeded and close() not called */
	int closing;	     /* close() started; never cleared */
	atomic_int inflight; /* calls between GIL release and reacquire */
	PyObject *mappings;  /* owns: dict region_id -> Mapping */
	PyObject *stale;     /* owns: list of replaced Mappings (see above) */
	PyObject *on_region_added; /* owns: callable or NULL */
} HandlerObject;

static PyTypeObject Handler_Type;

/* Raise OSError(-@neg_errno) (EIO for a non-negative code); return NULL. */
/* Raise upstream's RuntimeError unless @self may run an operation. */
static int check_state(HandlerObject *self)
{
	if (self->closing) {
		PyErr_SetString(PyExc_RuntimeError, "Handler is closing");
		return -1;
	}
	if (!self->connected) {
		const char *e =
			self->h ? maru_handler_connect_error(self->h) : "";

		/* upstream's words, then the cause when there was one */
		if (e[0])
			PyErr_Format(PyExc_RuntimeError,
				     "Not connected: the last connect() "
				     "failed: %s",
				     e);
		else
			PyErr_SetString(PyExc_RuntimeError,
					"Not connected. Call connect() first.");
		return -1;
	}
	return 0;
}

/*
 * CALL - run @expr with the GIL released, counted in ->inflight so that
 * close() can wait for it.
 */
#define CALL(self, expr)                                                       \
	do {                                                                   \
		atomic_fetch_add(&(self)->inflight, 1);                        \
		Py_BEGIN_ALLOW_THREADS                                         \
		expr;                                                          \
		Py_END_ALLOW_THREADS                                           \
		atomic_fetch_sub(&(self)->inflight, 1);                        \
	} while (0)

/* the key of a Mapping in ->mappings: the region id, or (id, "rd") for a
 * remote region's read mirror */
static PyObject *map_key(uint64_t region_id, int rd)
{
	return rd ? Py_BuildValue("(Ks)", (unsigned long long)region_id, "rd")
		  : PyLong_FromUnsignedLongLong(region_id);
}

/*
 * get_mapping - the Mapping of @region_id (@rd: its read mirror, where a
 * remote handler's retrieves land; docs/remote.md), created on first use
 * Return: a borrowed reference, or NULL with an exception set (KeyError
 * when the region is not mapped).
 */
static MappingObject *get_mapping_kind(HandlerObject *self, uint64_t region_id,
				       int rd)
{
	struct maru_region_handle rh;
	MappingObject *m;
	PyObject *key;
	void *base = NULL;
	int rc;

	key = map_key(region_id, rd);
	if (!key)
		return NULL;
	m = (MappingObject *)PyDict_GetItemWithError(self->mappings, key);
	if (m || PyErr_Occurred()) {
		Py_DECREF(key);
		return m;
	}
	if (self->closing) {
		Py_DECREF(key);
		PyErr_SetString(PyExc_RuntimeError, "Handler is closing");
		return NULL;
	}
	CALL(self, rc = maru_region_get_handle(self->h, region_id, &rh));
	if (rc == 0 && rd)
		CALL(self, base = maru_region_get_read_buffer(
				   self->h, region_id, 0, rh.length));
	else if (rc == 0)
		CALL(self, base = maru_region_get_buffer(self->h, region_id, 0,
							 rh.length));
	if (rc < 0 || !base) {
		Py_DECREF(key);
		PyErr_Format(PyExc_KeyError, "region %llu is not mapped",
			     (unsigned long long)region_id);
		return NULL;
	}
	m = PyObject_New(MappingObject, &Mapping_Type);
	if (!m) {
		Py_DECREF(key);
		return NULL;
	}
	m->base = base;
	m->len = (Py_ssize_t)rh.length;
	m->region_id = region_id;
	m->req_off = 0;
	m->req_len = m->len;
	m->exports = 0;
	m->dead = 0;
	m->placeholder = 0;
	m->rd = rd;
	rc = PyDict_SetItem(self->mappings, key, (PyObject *)m);
	Py_DECREF(key);
	Py_DECREF(m); /* the dict holds it now */
	return rc < 0 ? NULL : m;
}

static MappingObject *get_mapping(HandlerObject *self, uint64_t region_id)
{
	return get_mapping_kind(self, region_id, 0);
}

/*
 * stale_mapping - libmaru no longer maps @region_id at @m's base: keep @m
 * (borrowed from the dict) in ->stale for its views, forget it in the dict
 * Return: 0 or -1 with an exception.
 */
static int stale_mapping(HandlerObject *self, MappingObject *m)
{
	PyObject *key = map_key(m->region_id, m->rd);
	int rc;

	if (!key)
		return -1;
	rc = PyList_Append(self->stale, (PyObject *)m);
	if (rc == 0)
		rc = PyDict_DelItem(self->mappings, key);
	Py_DECREF(key);
	return rc;
}

/*
 * A view of [off, off + len) of @region_id, or NULL with an exception.
 * @expect: where libmaru says the range starts (NULL: unknown).
 */
static PyObject *region_view(HandlerObject *self, uint64_t region_id,
			     uint64_t off, uint64_t len, const void *expect)
{
	MappingObject *m = get_mapping(self, region_id), *r;

	if (m && expect && m->base + off != (const char *)expect) {
		/* a remote region's retrieve: its read mirror */
		r = get_mapping_kind(self, region_id, 1);
		if (!r)
			PyErr_Clear();
		if (r && r->base != m->base &&
		    r->base + off == (const char *)expect) {
			m = r;
		} else {
			if (r && r->base + off != (const char *)expect &&
			    stale_mapping(self, r) < 0)
				return NULL;
			if (stale_mapping(self, m) < 0)
				return NULL;
			m = get_mapping(self, region_id);
		}
	}
	if (!m)
		return NULL;
	if (off > (uint64_t)m->len || len > (uint64_t)m->len - off) {
		PyErr_SetString(PyExc_ValueError, "range outside the region");
		return NULL;
	}
	return mapping_view(m, (Py_ssize_t)off, (Py_ssize_t)len);
}

/* ---------------------------- keys ------------------------------------- */

/*
 * to_key - a libmaru key for Python object @o
 * str -> MARU_KEY_STR (UTF-8 borrowed from @o, which the caller must keep
 * alive), int -> MARU_KEY_INT or MARU_KEY_UINT, bytes -> MARU_KEY_BIN.
 * Never converts between str and int.
 */
static int to_key(PyObject *o, struct maru_key *k)
{
	memset(k, 0, sizeof(*k));
	if (PyUnicode_Check(o)) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(o, &n);

		if (!s)
			return -1;
		k->type = MARU_KEY_STR;
		k->str = s;
		k->len = (size_t)n;
		return 0;
	}
	if (PyBool_Check(o)) {
		/* upstream sends msgpack true/false: never alias them to 1/0 */
		PyErr_SetString(PyExc_TypeError,
				"key must be str or int, not bool");
		return -1;
	}
	if (PyLong_Check(o)) {
		int overflow;
		long long v = PyLong_AsLongLongAndOverflow(o, &overflow);

		if (v == -1 && PyErr_Occurred())
			return -1;
		if (!overflow) {
			k->type = MARU_KEY_INT;
			k->i = v;
			return 0;
		}
		if (overflow > 0) {
			unsigned long long u = PyLong_AsUnsignedLongLong(o);

			if (u == (unsigned long long)-1 && PyErr_Occurred())
				return -1;
			k->type = MARU_KEY_UINT;
			k->u = u;
			return 0;
		}
		PyErr_SetString(PyExc_OverflowError,
				"int key out of the 64-bit range");
		return -1;
	}
	if (PyBytes_Check(o)) {
		k->type = MARU_KEY_BIN;
		k->str = PyBytes_AS_STRING(o);
		k->len = (size_t)PyBytes_GET_SIZE(o);
		return 0;
	}
	PyErr_Format(PyExc_TypeError, "key must be str or int, not %.100s",
		     Py_TYPE(o)->tp_name);
	return -1;
}

/*
 * keys_array - convert a sequence of keys
 * @seq: gives a new tuple holding the key objects alive (the key strings
 *       are borrowed from them); release with Py_DECREF
 * @keys: gives a PyMem_Malloc()ed array; release with PyMem_Free
 */
static Py_ssize_t keys_array(PyObject *obj, PyObject **seq,
			     struct maru_key **keys)
{
	Py_ssize_t n, i;

	*seq = PySequence_Tuple(obj);
	if (!*seq)
		return -1;
	n = PyTuple_GET_SIZE(*seq);
	*keys = PyMem_Calloc(n ? (size_t)n : 1, sizeof(**keys));
	if (!*keys) {
		Py_CLEAR(*seq);
		PyErr_NoMemory();
		return -1;
	}
	for (i = 0; i < n; i++) {
		if (to_key(PyTuple_GET_ITEM(*seq, i), &(*keys)[i]) < 0) {
			PyMem_Free(*keys);
			Py_CLEAR(*seq);
			return -1;
		}
	}
	return n;
}

static PyObject *bool_list(const bool *r, Py_ssize_t n)
{
	PyObject *list = PyList_New(n);
	Py_ssize_t i;

	if (!list)
		return NULL;
	for (i = 0; i < n; i++)
		PyList_SET_ITEM(list, i, PyBool_FromLong(r[i]));
	return list;
}

/* A MemoryInfo for a hit, or Py_None (new reference) for a miss. */
static PyObject *memory_info(HandlerObject *self, const struct maru_view *v,
			     uint64_t ticket)
{
	PyObject *view, *rid, *page, *off, *tk, *res;

	if (!v->ptr)
		Py_RETURN_NONE;
	view = region_view(self, v->region_id, v->offset, v->len, v->ptr);
	if (!view) {
		/* unmappable: a miss, as upstream does */
		PyErr_Clear();
		Py_RETURN_NONE;
	}
	rid = PyLong_FromUnsignedLongLong(v->region_id);
	page = PyLong_FromUnsignedLongLong(v->page_index);
	off = PyLong_FromUnsignedLongLong(v->offset);
	tk = PyLong_FromUnsignedLongLong(ticket);
	if (!rid || !page || !off || !tk) {
		res = NULL;
	} else {
		PyObject *args[5] = {view, rid, page, off, tk};

		res = PyObject_Vectorcall(memory_info_cls, args, 5, NULL);
	}
	Py_DECREF(view);
	Py_XDECREF(rid);
	Py_XDECREF(page);
	Py_XDECREF(off);
	Py_XDECREF(tk);
	return res;
}

/* ---------------------------- callbacks --------------------------------- */

/* libmaru -> Python log sink; any thread. */
static void log_trampoline(void *arg, int priority, const char *file, int line,
			   const char *func, const char *msg)
{
	PyGILState_STATE st;
	PyObject *r;

	if (!atomic_load(&py_alive) || !log_sink)
		return;
	st = PyGILState_Ensure();
	if (log_sink && atomic_load(&py_alive)) {
		r = PyObject_CallFunction(log_sink, "isiss", priority,
					  file ? file : "?", line,
					  func ? func : "?", msg ? msg : "");
		if (!r)
			PyErr_Clear();
		Py_XDECREF(r);
	}
	PyGILState_Release(st);
}

/* libmaru -> the Python region-added callable; runs in the caller thread. */
static void region_added_trampoline(void *arg, uint64_t region_id,
				    uint64_t page_count)
{
	HandlerObject *self = arg;
	PyGILState_STATE st = PyGILState_Ensure();
	PyObject *cb = self->on_region_added, *r;

	if (cb) {
		Py_INCREF(cb);
		r = PyObject_CallFunction(cb, "KK",
					  (unsigned long long)region_id,
					  (unsigned long long)page_count);
		if (!r)
			PyErr_WriteUnraisable(cb);
		Py_XDECREF(r);
		Py_DECREF(cb);
	}
	PyGILState_Release(st);
}

/* ---------------------------- lifecycle --------------------------------- */

static int syslog_priority_for(PyObject *level)
{
	/* Python logging level -> syslog priority: messages at or above it */
	long lv = level ? PyLong_AsLong(level) : 20;

	if (lv <= 10)
		return LOG_DEBUG;
	if (lv <= 20)
		return LOG_INFO;
	if (lv <= 30)
		return LOG_WARNING;
	return LOG_ERR;
}

static int set_str(struct maru_config *cfg, PyObject *o,
		   int (*fn)(struct maru_config *, const char *))
{
	const char *s;

	if (o == Py_None)
		return fn(cfg, NULL);
	s = PyUnicode_AsUTF8(o);
	if (!s)
		return -EFAULT;
	return fn(cfg, s);
}

static int handler_init(PyObject *obj, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"server_url",
				 "instance_id",
				 "pool_size",
				 "chunk_size",
				 "timeout_ms",
				 "use_async_rpc",
				 "max_inflight",
				 "eager_map",
				 "auto_expand",
				 "expand_size",
				 "rm_address",
				 "enable_stats",
				 "log_level",
				 "curve_server_key",
				 "curve_secret_key_file",
				 "agent_url",
				 "remote",
				 "agent_curve_key",
				 NULL};
	HandlerObject *self = (HandlerObject *)obj;
	PyObject *url, *iid, *rm, *log_level = NULL;
	PyObject *cserver = Py_None, *csecret = Py_None;
	PyObject *agent = Py_None, *remote = Py_None, *akey = Py_None;
	unsigned long long pool, chunk, expand;
	int timeout, async, inflight, eager, autoexp, stats, rc;
	struct maru_config *cfg = NULL;
	char why[256] = "";

	if (!PyArg_ParseTupleAndKeywords(
		    args, kw, "UOKKipippKUp|OOOOOO", kwlist, &url, &iid, &pool,
		    &chunk, &timeout, &async, &inflight, &eager, &autoexp,
		    &expand, &rm, &stats, &log_level, &cserver, &csecret,
		    &agent, &remote, &akey))
		return -1;
	if (self->h) {
		PyErr_SetString(PyExc_RuntimeError,
				"Handler already initialised");
		return -1;
	}
	rc = maru_config_new(&cfg);
	if (rc < 0)
		goto out_errno;
	if ((rc = set_str(cfg, url, maru_config_set_server_url)) < 0 ||
	    (rc = set_str(cfg, iid, maru_config_set_instance_id)) < 0 ||
	    (rc = maru_config_set_pool_size(cfg, pool)) < 0 ||
	    (rc = maru_config_set_chunk_size(cfg, chunk)) < 0 ||
	    (rc = maru_config_set_timeout_ms(cfg, timeout)) < 0 ||
	    (rc = maru_config_set_use_async_rpc(cfg, async)) < 0 ||
	    (rc = maru_config_set_max_inflight(cfg, inflight)) < 0 ||
	    (rc = maru_config_set_eager_map(cfg, eager)) < 0 ||
	    (rc = maru_config_set_auto_expand(cfg, autoexp)) < 0 ||
	    (rc = maru_config_set_expand_size(cfg, expand)) < 0 ||
	    (rc = set_str(cfg, rm, maru_config_set_rm_address)) < 0 ||
	    (rc = maru_config_set_enable_stats(cfg, stats)) < 0 ||
	    (rc = set_str(cfg, cserver, maru_config_set_curve_server_key)) <
		    0 ||
	    (rc = set_str(cfg, csecret,
			  maru_config_set_curve_secret_key_file)) < 0 ||
	    (rc = set_str(cfg, agent, maru_config_set_agent_url)) < 0 ||
	    (rc = set_str(cfg, akey, maru_config_set_agent_curve_key)) < 0 ||
	    (remote != Py_None &&
	     (rc = set_str(cfg, remote, maru_config_set_remote)) < 0))
		goto out_config;
	rc = maru_config_validate(cfg, why, sizeof(why));
	if (rc < 0) {
		PyErr_SetString(PyExc_ValueError,
				why[0] ? why : "invalid configuration");
		goto out_free;
	}
	rc = maru_handler_new(cfg, &self->h);
	if (rc < 0)
		goto out_errno_free;
	maru_config_free(cfg);
	self->chunk_size = maru_handler_chunk_size(self->h);
	maru_handler_set_log_fn(self->h, log_trampoline, NULL);
	maru_handler_set_log_priority(self->h, syslog_priority_for(log_level));
	return 0;

out_config:
	if (rc == -EFAULT) /* a str conversion failed: exception set */
		goto out_free;
	PyErr_Format(PyExc_ValueError, "invalid configuration value (%s)",
		     strerror(-rc));
	goto out_free;
out_errno_free:
	maru_config_free(cfg);
out_errno:
	raise_errno(rc);
	return -1;
out_free:
	maru_config_free(cfg);
	return -1;
}

static PyObject *handler_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	HandlerObject *self = (HandlerObject *)type->tp_alloc(type, 0);

	if (!self)
		return NULL;
	atomic_init(&self->inflight, 0);
	self->mappings = PyDict_New();
	self->stale = PyList_New(0);
	if (!self->mappings || !self->stale) {
		Py_DECREF(self);
		return NULL;
	}
	return (PyObject *)self;
}

/*
 * GC support: a region-added callback usually references an object that
 * references this handler (LMCache's adapter holds the MaruHandler), a
 * cycle the collector must be able to break.
 */
static int handler_traverse(PyObject *obj, visitproc visit, void *arg)
{
	HandlerObject *self = (HandlerObject *)obj;

	Py_VISIT(self->on_region_added);
	Py_VISIT(self->mappings);
	Py_VISIT(self->stale);
	return 0;
}

static int handler_clear(PyObject *obj)
{
	HandlerObject *self = (HandlerObject *)obj;

	/* libmaru keeps calling the trampoline until it is unregistered */
	if (self->h && self->on_region_added && !self->closing) {
		Py_BEGIN_ALLOW_THREADS
		maru_handler_set_on_region_added(self->h, NULL, NULL);
		Py_END_ALLOW_THREADS
	}
	Py_CLEAR(self->on_region_added);
	return 0;
}

/* mark @m dead; a placeholder under it if it still has exports */
static void guard_one(MappingObject *m)
{
	void *p;

	m->dead = 1;
	if (m->exports == 0)
		return;
	p = mmap(m->base, (size_t)m->len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == m->base) {
		m->placeholder = 1;
	} else if (p != MAP_FAILED) {
		munmap(p, (size_t)m->len); /* old kernel: hint only */
	}
}

/*
 * guard_mappings - after libmaru unmapped everything: mark every Mapping
 * (the dict's and the stale ones) dead and put a placeholder under those
 * that still have exports.
 */
static void guard_mappings(HandlerObject *self)
{
	PyObject *key, *val;
	Py_ssize_t pos = 0, i;

	while (PyDict_Next(self->mappings, &pos, &key, &val))
		guard_one((MappingObject *)val);
	PyDict_Clear(self->mappings);
	if (!self->stale)
		return;
	for (i = 0; i < PyList_GET_SIZE(self->stale); i++)
		guard_one((MappingObject *)PyList_GET_ITEM(self->stale, i));
	PyList_SetSlice(self->stale, 0, PyList_GET_SIZE(self->stale), NULL);
}

static void wait_inflight(HandlerObject *self)
{
	struct timespec ts = {0, 200 * 1000};

	while (atomic_load(&self->inflight) > 0)
		nanosleep(&ts, NULL);
}

static PyObject *handler_close(PyObject *obj, PyObject *unused)
{
	HandlerObject *self = (HandlerObject *)obj;

	/* a no-op unless connected (docs/python-api.md) */
	if (!self->h || !self->connected || self->closing)
		Py_RETURN_NONE;
	self->closing = 1;
	Py_BEGIN_ALLOW_THREADS
	wait_inflight(self);
	maru_handler_close(self->h);
	Py_END_ALLOW_THREADS
	self->connected = 0;
	guard_mappings(self);
	Py_CLEAR(self->on_region_added);
	Py_RETURN_NONE;
}

static void handler_dealloc(PyObject *obj)
{
	HandlerObject *self = (HandlerObject *)obj;

	PyObject_GC_UnTrack(obj);
	handler_clear(obj);
	if (self->h) {
		if (self->connected) {
			self->closing = 1;
			Py_BEGIN_ALLOW_THREADS
			maru_handler_close(self->h);
			Py_END_ALLOW_THREADS
			self->connected = 0;
		}
		if (self->mappings)
			guard_mappings(self);
		Py_BEGIN_ALLOW_THREADS
		maru_handler_free(self->h);
		Py_END_ALLOW_THREADS
		self->h = NULL;
	}
	Py_CLEAR(self->mappings);
	Py_CLEAR(self->stale);
	Py_CLEAR(self->on_region_added);
	Py_TYPE(obj)->tp_free(obj);
}

static PyObject *handler_connect(PyObject *obj, PyObject *unused)
{
	HandlerObject *self = (HandlerObject *)obj;
	int rc;

	if (self->closing) {
		PyErr_SetString(PyExc_RuntimeError, "Handler is closing");
		return NULL;
	}
	if (self->connected)
		return PyLong_FromLong(0);
	CALL(self, rc = maru_handler_connect(self->h));
	if (rc == 0)
		self->connected = 1;
	return PyLong_FromLong(rc);
}

/* ---------------------------- accessors --------------------------------- */

static PyObject *handler_get_connect_error(PyObject *obj, void *closure)
{
	HandlerObject *self = (HandlerObject *)obj;
	const char *e = self->h ? maru_handler_connect_error(self->h) : "";

	return PyUnicode_DecodeUTF8(e, (Py_ssize_t)strlen(e), "replace");
}

static PyObject *handler_get_last_error(PyObject *obj, void *closure)
{
	HandlerObject *self = (HandlerObject *)obj;
	const char *e = self->h ? maru_handler_last_error(self->h) : "";

	return PyUnicode_DecodeUTF8(e, (Py_ssize_t)strlen(e), "replace");
}

static PyObject *handler_get_connected(PyObject *obj, void *closure)
{
	HandlerObject *self = (HandlerObject *)obj;

	return PyBool_FromLong(self->connected && !self->closing);
}

static PyObject *handler_get_closing(PyObject *obj, void *closure)
{
	return PyBool_FromLong(((HandlerObject *)obj)->closing);
}

static PyObject *handler_get_instance_id(PyObject *obj, void *closure)
{
	return PyUnicode_FromString(
		maru_handler_instance_id(((HandlerObject *)obj)->h));
}

static PyObject *handler_get_chunk_size(PyObject *obj, void *closure)
{
	return PyLong_FromUnsignedLongLong(((HandlerObject *)obj)->chunk_size);
}

static PyObject *handler_get_lease_ttl_ms(PyObject *obj, void *closure)
{
	HandlerObject *self = (HandlerObject *)obj;
	uint64_t v;

	if (!self->connected || self->closing)
		return PyLong_FromLong(0);
	CALL(self, v = maru_handler_lease_ttl_ms(self->h));
	return PyLong_FromUnsignedLongLong(v);
}

static PyObject *handler_set_log_level(PyObject *obj, PyObject *level)
{
	HandlerObject *self = (HandlerObject *)obj;

	maru_handler_set_log_priority(self->h, syslog_priority_for(level));
	if (PyErr_Occurred())
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *handler_owned_region_ids(PyObject *obj, PyObject *unused)
{
	HandlerObject *self = (HandlerObject *)obj;
	uint64_t small[64], *ids = small;
	size_t cap = 64;
	PyObject *list;
	int n, i;

	if (!self->connected || self->closing)
		return PyList_New(0);
	for (;;) {
		CALL(self,
		     n = maru_handler_owned_region_ids(self->h, ids, cap));
		if (n < 0) {
			if (ids != small)
				PyMem_Free(ids);
			return raise_errno(n);
		}
		if ((size_t)n <= cap)
			break;
		if (ids != small)
			PyMem_Free(ids);
		cap = (size_t)n * 2;
		ids = PyMem_Malloc(cap * sizeof(*ids));
		if (!ids)
			return PyErr_NoMemory();
	}
	list = PyList_New(n);
	for (i = 0; list && i < n; i++) {
		PyObject *v = PyLong_FromUnsignedLongLong(ids[i]);

		if (!v) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, i, v);
	}
	if (ids != small)
		PyMem_Free(ids);
	return list;
}

static PyObject *handler_get_buffer_view(PyObject *obj, PyObject *args)
{
	HandlerObject *self = (HandlerObject *)obj;
	unsigned long long rid, off, size;
	void *p;

	if (!PyArg_ParseTuple(args, "KKK", &rid, &off, &size))
		return NULL;
	if (!self->connected || self->closing)
		Py_RETURN_NONE;
	CALL(self, p = maru_region_get_buffer(self->h, rid, off, size));
	if (!p)
		Py_RETURN_NONE;
	return region_view(self, rid, off, size, p);
}

/* view_valid(view, region_id): maru_view_valid() on a memoryview */
static PyObject *handler_view_valid(PyObject *obj, PyObject *args)
{
	HandlerObject *self = (HandlerObject *)obj;
	struct maru_view v = {0};
	unsigned long long rid;
	PyObject *view;
	Py_buffer b;
	bool ok;

	if (!PyArg_ParseTuple(args, "OK", &view, &rid))
		return NULL;
	if (!self->connected || self->closing)
		Py_RETURN_FALSE;
	if (PyObject_GetBuffer(view, &b, PyBUF_SIMPLE) < 0)
		return NULL;
	v.ptr = b.buf;
	v.len = (size_t)b.len;
	v.region_id = rid;
	ok = maru_view_valid(self->h, &v);
	PyBuffer_Release(&b);
	return PyBool_FromLong(ok);
}

static PyObject *handler_region_page_count(PyObject *obj, PyObject *arg)
{
	HandlerObject *self = (HandlerObject *)obj;
	unsigned long long rid = PyLong_AsUnsignedLongLong(arg);
	int64_t n;

	if (rid == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (!self->connected || self->closing)
		Py_RETURN_NONE;
	CALL(self, n = maru_region_page_count(self->h, rid));
	if (n < 0)
		Py_RETURN_NONE;
	return PyLong_FromLongLong(n);
}

static PyObject *handler_region_stats(PyObject *obj, PyObject *arg)
{
	HandlerObject *self = (HandlerObject *)obj;
	unsigned long long rid = PyLong_AsUnsignedLongLong(arg);
	struct maru_region_stats st;
	int rc;

	if (rid == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (!self->connected || self->closing)
		Py_RETURN_NONE;
	CALL(self, rc = maru_region_get_stats(self->h, rid, &st));
	if (rc < 0)
		Py_RETURN_NONE;
	/* clang-format off */
	return Py_BuildValue("{sKsKsKsKsKsK}",
		"region_id", (unsigned long long)st.region_id,
		"pool_size", (unsigned long long)st.pool_size,
		"chunk_size", (unsigned long long)st.chunk_size,
		"page_count", (unsigned long long)st.page_count,
		"free_pages", (unsigned long long)st.num_free_pages,
		"allocated_pages", (unsigned long long)st.num_allocated);
	/* clang-format on */
}

static PyObject *handler_region_handle(PyObject *obj, PyObject *arg)
{
	HandlerObject *self = (HandlerObject *)obj;
	unsigned long long rid = PyLong_AsUnsignedLongLong(arg);
	struct maru_region_handle rh;
	int rc;

	if (rid == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (!self->connected || self->closing)
		Py_RETURN_NONE;
	CALL(self, rc = maru_region_get_handle(self->h, rid, &rh));
	if (rc < 0)
		Py_RETURN_NONE;
	return Py_BuildValue("KKKK", (unsigned long long)rh.region_id,
			     (unsigned long long)rh.offset,
			     (unsigned long long)rh.length,
			     (unsigned long long)rh.auth_token);
}

static PyObject *handler_region_is_owned(PyObject *obj, PyObject *arg)
{
	HandlerObject *self = (HandlerObject *)obj;
	unsigned long long rid = PyLong_AsUnsignedLongLong(arg);
	bool owned;

	if (rid == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (!self->connected || self->closing)
		Py_RETURN_FALSE;
	CALL(self, owned = maru_region_is_owned(self->h, rid));
	return PyBool_FromLong(owned);
}

static PyObject *handler_index_stats(PyObject *obj, PyObject *unused)
{
	HandlerObject *self = (HandlerObject *)obj;
	struct maru_index_stats st;

	(void)unused;
	maru_handler_index_stats(self->h, &st);
	/* clang-format off */
	return Py_BuildValue("{sOsOsKsKsK}",
		"attached", st.attached ? Py_True : Py_False,
		"noncoherent", st.noncoherent ? Py_True : Py_False,
		"local_hits", (unsigned long long)st.local_hits,
		"local_misses", (unsigned long long)st.local_misses,
		"fallbacks", (unsigned long long)st.fallbacks);
	/* clang-format on */
}

static PyObject *handler_set_on_region_added(PyObject *obj, PyObject *cb)
{
	HandlerObject *self = (HandlerObject *)obj;
	PyObject *old = self->on_region_added;
	int rc;

	if (cb != Py_None && !PyCallable_Check(cb)) {
		PyErr_SetString(PyExc_TypeError,
				"callback must be callable or None");
		return NULL;
	}
	if (self->closing) {
		/* the handler has no regions left to report */
		self->on_region_added = NULL;
		Py_XDECREF(old);
		Py_RETURN_NONE;
	}
	if (cb == Py_None) {
		self->on_region_added = NULL;
		CALL(self, rc = maru_handler_set_on_region_added(self->h, NULL,
								 NULL));
		Py_XDECREF(old);
	} else {
		Py_INCREF(cb);
		self->on_region_added = cb;
		Py_XDECREF(old);
		/* replays the owned regions now, in this thread */
		CALL(self, rc = maru_handler_set_on_region_added(
				   self->h, region_added_trampoline, self));
	}
	if (rc < 0)
		return raise_errno(rc);
	Py_RETURN_NONE;
}

static PyObject *handler_healthcheck(PyObject *obj, PyObject *unused)
{
	HandlerObject *self = (HandlerObject *)obj;
	bool ok;

	if (!self->connected || self->closing)
		Py_RETURN_FALSE;
	CALL(self, ok = maru_handler_healthcheck(self->h));
	return PyBool_FromLong(ok);
}

/* remote_stats() -> dict: the remote path's figures (docs/remote.md) */
static PyObject *handler_remote_stats(PyObject *obj, PyObject *unused)
{
	HandlerObject *self = (HandlerObject *)obj;
	struct maru_remote_stats s;

	maru_handler_remote_stats(self->h, &s);
	return Py_BuildValue("{s:O,s:K,s:K,s:K,s:K,s:K,s:K}", "remote",
			     s.remote ? Py_True : Py_False, "puts",
			     (unsigned long long)s.puts, "put_bytes",
			     (unsigned long long)s.put_bytes, "gets",
			     (unsigned long long)s.gets, "get_bytes",
			     (unsigned long long)s.get_bytes, "errors",
			     (unsigned long long)s.errors, "connects",
			     (unsigned long long)s.connects);
}

static PyObject *handler_get_stats_raw(PyObject *obj, PyObject *unused)
{
	HandlerObject *self = (HandlerObject *)obj;
	void *buf = NULL;
	size_t len = 0;
	PyObject *res;
	int rc;

	if (check_state(self) < 0)
		return NULL;
	CALL(self, rc = maru_handler_get_stats_raw(self->h, &buf, &len));
	if (rc < 0)
		return raise_errno(rc);
	res = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
	maru_buf_free(buf);
	return res;
}

/* ---------------------------- pages ------------------------------------- */

static PyObject *handler_alloc(PyObject *obj, PyObject *arg)
{
	HandlerObject *self = (HandlerObject *)obj;
	Py_ssize_t size = PyLong_AsSsize_t(arg);
	struct maru_page pg;
	PyObject *view, *rid, *page, *sz, *res = NULL;
	int rc;

	if (size == -1 && PyErr_Occurred())
		return NULL;
	if (check_state(self) < 0)
		return NULL;
	if (size < 0) {
		PyErr_Format(PyExc_ValueError, "Requested size %zd is negative",
			     size);
		return NULL;
	}
	CALL(self, rc = maru_page_alloc(self->h, (size_t)size, &pg));
	if (rc < 0)
		return raise_errno(rc);
	view = region_view(self, pg.region_id, pg.page_index * self->chunk_size,
			   pg.size, pg.ptr);
	if (!view) {
		if (!self->closing)
			CALL(self, maru_page_free(self->h, pg.region_id,
						  pg.page_index));
		return NULL;
	}
	rid = PyLong_FromUnsignedLongLong(pg.region_id);
	page = PyLong_FromUnsignedLongLong(pg.page_index);
	sz = PyLong_FromSize_t(pg.size);
	if (rid && page && sz) {
		PyObject *args[4] = {view, rid, page, sz};

		res = PyObject_Vectorcall(alloc_handle_cls, args, 4, NULL);
	}
	Py_DECREF(view);
	Py_XDECREF(rid);
	Py_XDECREF(page);
	Py_XDECREF(sz);
	return res;
}

static PyObject *handler_free(PyObject *obj, PyObject *args)
{
	HandlerObject *self = (HandlerObject *)obj;
	unsigned long long rid, page;
	int rc;

	if (!PyArg_ParseTuple(args, "KK", &rid, &page))
		return NULL;
	if (check_state(self) < 0)
		return NULL;
	CALL(self, rc = maru_page_free(self->h, rid, page));
	return PyLong_FromLong(rc);
}

/* ---------------------------- key-value --------------------------------- */

static PyObject *handler_store(PyObject *obj, PyObject *const *args,
			       Py_ssize_t nargs)
{
	HandlerObject *self = (HandlerObject *)obj;
	struct maru_page pg = {0};
	struct maru_key k;
	int rc;

	if (nargs != 4) {
		PyErr_SetString(PyExc_TypeError,
				"store(key, region_id, page_index, size)");
		return NULL;
	}
	if (check_state(self) < 0 || to_key(args[0], &k) < 0)
		return NULL;
	pg.region_id = PyLong_AsUnsignedLongLong(args[1]);
	pg.page_index = PyLong_AsUnsignedLongLong(args[2]);
	pg.size = PyLong_AsSize_t(args[3]);
	if (PyErr_Occurred())
		return NULL;
	CALL(self, rc = maru_kv_store(self->h, &k, &pg));
	return PyLong_FromLong(rc);
}

static PyObject *handler_retrieve(PyObject *obj, PyObject *key)
{
	HandlerObject *self = (HandlerObject *)obj;
	struct maru_view v;
	struct maru_key k;
	uint64_t ticket;
	int rc;

	if (check_state(self) < 0 || to_key(key, &k) < 0)
		return NULL;
	CALL(self, rc = maru_kv_retrieve_ticket(self->h, &k, &v, &ticket));
	if (rc <= 0)
		Py_RETURN_NONE;
	return memory_info(self, &v, ticket);
}

/* exists / pin / unpin / delete: 1 -> True, anything else -> False */
#define KV_BOOL_OP(name, fn)                                                   \
	static PyObject *handler_##name(PyObject *obj, PyObject *key)          \
	{                                                                      \
		HandlerObject *self = (HandlerObject *)obj;                    \
		struct maru_key k;                                             \
		int rc;                                                        \
                                                                               \
		if (check_state(self) < 0 || to_key(key, &k) < 0)              \
			return NULL;                                           \
		CALL(self, rc = fn(self->h, &k));                              \
		return PyBool_FromLong(rc > 0);                                \
	}
KV_BOOL_OP(exists, maru_kv_exists)

/* a pin's deadline in ms from "ttl_ms" (0: none; refused when negative) */
static int ttl_arg(PyObject *o, uint32_t *ms)
{
	unsigned long long v;

	*ms = 0;
	if (!o || o == Py_None)
		return 0;
	v = PyLong_AsUnsignedLongLong(o);
	if (PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_SetString(
			PyExc_ValueError,
			"ttl_ms must be an integer from 0 to 4294967295");
		return -1;
	}
	if (v > UINT32_MAX) {
		PyErr_SetString(
			PyExc_ValueError,
			"ttl_ms must be an integer from 0 to 4294967295");
		return -1;
	}
	*ms = (uint32_t)v;
	return 0;
}

/* pin(key, ttl_ms=None): a soft pin with a deadline when ttl_ms > 0 */
static PyObject *handler_pin(PyObject *obj, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"key", "ttl_ms", NULL};
	HandlerObject *self = (HandlerObject *)obj;
	PyObject *key, *ttl = NULL;
	struct maru_key k;
	uint32_t ms;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:pin", kwlist, &key,
					 &ttl) ||
	    ttl_arg(ttl, &ms) < 0)
		return NULL;
	if (check_state(self) < 0 || to_key(key, &k) < 0)
		return NULL;
	CALL(self, rc = maru_kv_pin_ttl(self->h, &k, ms));
	return PyBool_FromLong(rc > 0);
}
KV_BOOL_OP(unpin, maru_kv_unpin)
KV_BOOL_OP(delete, maru_kv_delete)

/* An attribute of @o as an unsigned 64-bit integer. */
static int attr_u64(PyObject *o, PyObject *name, uint64_t *out)
{
	PyObject *v = PyObject_GetAttr(o, name);

	if (!v)
		return -1;
	*out = PyLong_AsUnsignedLongLong(v);
	Py_DECREF(v);
	return PyErr_Occurred() ? -1 : 0;
}

static PyObject *handler_batch_store(PyObject *obj, PyObject *args)
{
	HandlerObject *self = (HandlerObject *)obj;
	PyObject *keys_obj, *handles_obj, *seq = NULL, *hseq = NULL;
	PyObject *res = NULL;
	static PyObject *n_rid, *n_page, *n_size;
	struct maru_key *keys = NULL;
	struct maru_page *pages = NULL;
	bool *results = NULL;
	Py_ssize_t n, i;
	int rc;

	if (!PyArg_ParseTuple(args, "OO", &keys_obj, &handles_obj))
		return NULL;
	if (check_state(self) < 0)
		return NULL;
	if (!n_rid) {
		n_rid = PyUnicode_InternFromString("_region_id");
		n_page = PyUnicode_InternFromString("_page_index");
		n_size = PyUnicode_InternFromString("_size");
		if (!n_rid || !n_page || !n_size)
			return NULL;
	}
	n = keys_array(keys_obj, &seq, &keys);
	if (n < 0)
		return NULL;
	hseq = PySequence_Tuple(handles_obj);
	if (!hseq)
		goto out;
	if (PyTuple_GET_SIZE(hseq) != n) {
		PyErr_SetString(PyExc_ValueError,
				"keys and handles must have the same length");
		goto out;
	}
	pages = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*pages));
	results = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*results));
	if (!pages || !results) {
		PyErr_NoMemory();
		goto out;
	}
	for (i = 0; i < n; i++) {
		PyObject *h = PyTuple_GET_ITEM(hseq, i);
		uint64_t size;

		if (attr_u64(h, n_rid, &pages[i].region_id) < 0 ||
		    attr_u64(h, n_page, &pages[i].page_index) < 0 ||
		    attr_u64(h, n_size, &size) < 0)
			goto out;
		pages[i].size = (size_t)size;
	}
	CALL(self, rc = maru_kv_batch_store(self->h, keys, pages, (size_t)n,
					    results));
	if (rc < 0)
		memset(results, 0, (size_t)n * sizeof(*results));
	res = bool_list(results, n);
out:
	PyMem_Free(results);
	PyMem_Free(pages);
	PyMem_Free(keys);
	Py_XDECREF(hseq);
	Py_XDECREF(seq);
	return res;
}

static PyObject *handler_batch_retrieve(PyObject *obj, PyObject *keys_obj)
{
	HandlerObject *self = (HandlerObject *)obj;
	struct maru_view *views = NULL;
	struct maru_key *keys = NULL;
	PyObject *seq = NULL, *list = NULL;
	uint64_t *tickets = NULL;
	Py_ssize_t n, i;
	int rc;

	if (check_state(self) < 0)
		return NULL;
	n = keys_array(keys_obj, &seq, &keys);
	if (n < 0)
		return NULL;
	views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*views));
	tickets = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*tickets));
	if (!views || !tickets) {
		PyErr_NoMemory();
		goto out;
	}
	CALL(self, rc = maru_kv_batch_retrieve_tickets(self->h, keys, (size_t)n,
						       views, tickets));
	if (rc < 0)
		memset(views, 0, (size_t)n * sizeof(*views));
	list = PyList_New(n);
	for (i = 0; list && i < n; i++) {
		PyObject *mi = memory_info(self, &views[i], tickets[i]);

		if (!mi) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, i, mi);
	}
out:
	PyMem_Free(views);
	PyMem_Free(tickets);
	PyMem_Free(keys);
	Py_XDECREF(seq);
	return list;
}

/* recheck(key, view, region_id, kv_offset, ticket) -> maru_kv_recheck() */
static PyObject *handler_recheck(PyObject *obj, PyObject *args)
{
	HandlerObject *self = (HandlerObject *)obj;
	unsigned long long rid, off, ticket;
	struct maru_view v = {0};
	PyObject *key, *view;
	struct maru_key k;
	Py_buffer b;
	int rc;

	if (!PyArg_ParseTuple(args, "OOKKK", &key, &view, &rid, &off, &ticket))
		return NULL;
	if (check_state(self) < 0 || to_key(key, &k) < 0)
		return NULL;
	if (PyObject_GetBuffer(view, &b, PyBUF_SIMPLE) < 0)
		return NULL;
	v.ptr = b.buf;
	v.len = (size_t)b.len;
	v.region_id = rid;
	v.offset = off;
	CALL(self, rc = maru_kv_recheck(self->h, &k, &v, ticket));
	PyBuffer_Release(&b);
	return PyBool_FromLong(rc == 1);
}

/* the batch forms of exists / pin / unpin, as libmaru's with a pin's life */
typedef int (*batch_bool_fn)(struct maru_handler *, const struct maru_key *,
			     size_t, bool *, uint32_t);

static int batch_exists_fn(struct maru_handler *h, const struct maru_key *k,
			   size_t n, bool *r, uint32_t ttl_ms)
{
	(void)ttl_ms;
	return maru_kv_batch_exists(h, k, n, r);
}

static int batch_unpin_fn(struct maru_handler *h, const struct maru_key *k,
			  size_t n, bool *r, uint32_t ttl_ms)
{
	(void)ttl_ms;
	return maru_kv_batch_unpin(h, k, n, r);
}

/* @fn over the keys of @keys_obj: a list of bools (all False on an error) */
static PyObject *batch_bools(HandlerObject *self, PyObject *keys_obj,
			     batch_bool_fn fn, uint32_t ttl_ms)
{
	struct maru_key *keys = NULL;
	PyObject *seq = NULL, *res = NULL;
	bool *results;
	Py_ssize_t n;
	int rc;

	if (check_state(self) < 0)
		return NULL;
	n = keys_array(keys_obj, &seq, &keys);
	if (n < 0)
		return NULL;
	results = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*results));
	if (!results) {
		PyErr_NoMemory();
		goto out;
	}
	CALL(self, rc = fn(self->h, keys, (size_t)n, results, ttl_ms));
	if (rc < 0)
		memset(results, 0, (size_t)n * sizeof(*results));
	res = bool_list(results, n);
out:
	PyMem_Free(results);
	PyMem_Free(keys);
	Py_XDECREF(seq);
	return res;
}

static PyObject *handler_batch_exists(PyObject *obj, PyObject *keys_obj)
{
	return batch_bools((HandlerObject *)obj, keys_obj, batch_exists_fn, 0);
}

static PyObject *handler_batch_unpin(PyObject *obj, PyObject *keys_obj)
{
	return batch_bools((HandlerObject *)obj, keys_obj, batch_unpin_fn, 0);
}

/* batch_pin(keys, ttl_ms=None) */
static PyObject *handler_batch_pin(PyObject *obj, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"keys", "ttl_ms", NULL};
	PyObject *keys_obj, *ttl = NULL;
	uint32_t ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:batch_pin", kwlist,
					 &keys_obj, &ttl) ||
	    ttl_arg(ttl, &ms) < 0)
		return NULL;
	return batch_bools((HandlerObject *)obj, keys_obj,
			   maru_kv_batch_pin_ttl, ms);
}

/* ---------------------------- type tables ------------------------------- */

/* call(msg_type, payload) -> reply payload: maru_handler_call(), which
 * needs no connect() (RpcClient / RpcAsyncClient) */
static PyObject *handler_call(PyObject *obj, PyObject *args)
{
	HandlerObject *self = (HandlerObject *)obj;
	void *reply = NULL;
	size_t rlen = 0;
	Py_buffer in;
	PyObject *res;
	int type, rc;

	if (!PyArg_ParseTuple(args, "iy*", &type, &in))
		return NULL;
	if (type < 0 || type > 255) {
		PyBuffer_Release(&in);
		PyErr_SetString(PyExc_ValueError, "msg_type is a byte");
		return NULL;
	}
	CALL(self, rc = maru_handler_call(self->h, (uint8_t)type, in.buf,
					  (size_t)in.len, &reply, &rlen));
	PyBuffer_Release(&in);
	if (rc < 0)
		return raise_errno(rc);
	res = PyBytes_FromStringAndSize(reply, (Py_ssize_t)rlen);
	maru_buf_free(reply);
	return res;
}

static PyMethodDef handler_methods[] = {
	{"call", handler_call, METH_VARARGS,
	 "call(msg_type, payload) -> reply payload (no connect() needed)"},
	{"connect", handler_connect, METH_NOARGS, "connect() -> 0 or -errno"},
	{"close", handler_close, METH_NOARGS,
	 "return every region and unmap; the handler is not reusable"},
	{"set_log_level", handler_set_log_level, METH_O,
	 "set_log_level(python_logging_level)"},
	{"owned_region_ids", handler_owned_region_ids, METH_NOARGS,
	 "owned region ids, oldest first"},
	{"get_buffer_view", handler_get_buffer_view, METH_VARARGS,
	 "get_buffer_view(region_id, offset, size) -> memoryview | None"},
	{"view_valid", handler_view_valid, METH_VARARGS,
	 "view_valid(view, region_id) -> bool: still the pool's bytes"},
	{"recheck", handler_recheck, METH_VARARGS,
	 "recheck(key, view, region_id, kv_offset, ticket) -> bool"},
	{"region_page_count", handler_region_page_count, METH_O,
	 "region_page_count(region_id) -> int | None"},
	{"region_stats", handler_region_stats, METH_O,
	 "region_stats(region_id) -> dict | None (owned regions)"},
	{"region_handle", handler_region_handle, METH_O,
	 "region_handle(region_id) -> (region_id, offset, length, token) | "
	 "None"},
	{"region_is_owned", handler_region_is_owned, METH_O,
	 "region_is_owned(region_id) -> bool"},
	{"index_stats", handler_index_stats, METH_NOARGS,
	 "index_stats() -> dict: the shared index's local answers"},
	{"set_on_region_added", handler_set_on_region_added, METH_O,
	 "set_on_region_added(callable(region_id, page_count) | None)"},
	{"remote_stats", handler_remote_stats, METH_NOARGS,
	 "remote_stats() -> dict: the remote path's figures"},
	{"healthcheck", handler_healthcheck, METH_NOARGS,
	 "HEARTBEAT round trip -> bool"},
	{"get_stats_raw", handler_get_stats_raw, METH_NOARGS,
	 "GET_STATS reply payload (MessagePack bytes)"},
	{"alloc", handler_alloc, METH_O,
	 "alloc(size) -> AllocHandle; OSError(errno) on failure"},
	{"free", handler_free, METH_VARARGS,
	 "free(region_id, page_index) -> 0 or -errno"},
	{"store", (PyCFunction)(void (*)(void))handler_store, METH_FASTCALL,
	 "store(key, region_id, page_index, size) -> 1, 0 or -errno"},
	{"retrieve", handler_retrieve, METH_O,
	 "retrieve(key) -> MemoryInfo | None"},
	{"exists", handler_exists, METH_O, "exists(key) -> bool"},
	{"pin", (PyCFunction)(void (*)(void))handler_pin,
	 METH_VARARGS | METH_KEYWORDS,
	 "pin(key, ttl_ms=None) -> bool (ttl_ms: a soft pin's life)"},
	{"unpin", handler_unpin, METH_O, "unpin(key) -> bool"},
	{"delete", handler_delete, METH_O, "delete(key) -> bool"},
	{"batch_store", handler_batch_store, METH_VARARGS,
	 "batch_store(keys, handles) -> list[bool]"},
	{"batch_retrieve", handler_batch_retrieve, METH_O,
	 "batch_retrieve(keys) -> list[MemoryInfo | None]"},
	{"batch_exists", handler_batch_exists, METH_O,
	 "batch_exists(keys) -> list[bool]"},
	{"batch_pin", (PyCFunction)(void (*)(void))handler_batch_pin,
	 METH_VARARGS | METH_KEYWORDS,
	 "batch_pin(keys, ttl_ms=None) -> list[bool]"},
	{"batch_unpin", handler_batch_unpin, METH_O,
	 "batch_unpin(keys) -> list[bool]"},
	{NULL},
};

static PyGetSetDef handler_getset[] = {
	{"connected", handler_get_connected, NULL, "connected, not closing",
	 NULL},
	{"closing", handler_get_closing, NULL, "close() was called", NULL},
	{"connect_error", handler_get_connect_error, NULL,
	 "why the last connect() failed, one line ('' if it did not)", NULL},
	{"last_error", handler_get_last_error, NULL,
	 "why this thread's last failed call failed, one line ('' if it "
	 "cannot say)",
	 NULL},
	{"instance_id", handler_get_instance_id, NULL, "owner id", NULL},
	{"chunk_size", handler_get_chunk_size, NULL, "page size", NULL},
	{"lease_ttl_ms", handler_get_lease_ttl_ms, NULL,
	 "lease TTL granted by the server (0: none)", NULL},
	{NULL},
};

/* clang-format off */
static PyTypeObject Handler_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "maru_core._maru.Handler",
	.tp_basicsize = sizeof(HandlerObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "libmaru handler (use maru.MaruHandler)",
	.tp_new = handler_new,
	.tp_init = handler_init,
	.tp_dealloc = handler_dealloc,
	.tp_traverse = handler_traverse,
	.tp_clear = handler_clear,
	.tp_methods = handler_methods,
	.tp_getset = handler_getset,
};
/* clang-format on */

/* ---------------------------- C interface (_maru.h) -------------------- */

/* the capsule's table, exported as _C_API; _maru.h documents each entry */

static struct maru_handler *api_call_begin(PyObject *obj)
{
	HandlerObject *self = (HandlerObject *)obj;

	if (!PyObject_TypeCheck(obj, &Handler_Type)) {
		PyErr_Format(PyExc_TypeError,
			     "a maru_core._maru.Handler is needed, not %.100s",
			     Py_TYPE(obj)->tp_name);
		return NULL;
	}
	if (check_state(self) < 0)
		return NULL;
	atomic_fetch_add(&self->inflight, 1);
	return self->h;
}

static void api_call_end(PyObject *obj)
{
	atomic_fetch_sub(&((HandlerObject *)obj)->inflight, 1);
}

static struct maru_py_api py_api = {
	.version = MARU_PY_API_VERSION,
	.call_begin = api_call_begin,
	.call_end = api_call_end,
	.keys_array = keys_array,
};

/* ---------------------------- module ------------------------------------ */

static PyObject *mod_set_types(PyObject *mod, PyObject *args)
{
	PyObject *ah, *mi;

	if (!PyArg_ParseTuple(args, "OO", &ah, &mi))
		return NULL;
	Py_INCREF(ah);
	Py_INCREF(mi);
	Py_XSETREF(alloc_handle_cls, ah);
	Py_XSETREF(memory_info_cls, mi);
	Py_RETURN_NONE;
}

static PyObject *mod_set_log_sink(PyObject *mod, PyObject *sink)
{
	if (sink == Py_None) {
		Py_CLEAR(log_sink);
	} else {
		Py_INCREF(sink);
		Py_XSETREF(log_sink, sink);
	}
	Py_RETURN_NONE;
}

static PyObject *mod_shutdown(PyObject *mod, PyObject *unused)
{
	atomic_store(&py_alive, 0);
	Py_RETURN_NONE;
}

static PyObject *mod_version(PyObject *mod, PyObject *unused)
{
	return PyUnicode_FromString(maru_version());
}

static PyMethodDef module_methods[] = {
	{"set_types", mod_set_types, METH_VARARGS,
	 "set_types(AllocHandle, MemoryInfo): classes to build results with"},
	{"set_log_sink", mod_set_log_sink, METH_O,
	 "set_log_sink(callable(priority, file, line, func, msg) | None)"},
	{"_shutdown", mod_shutdown, METH_NOARGS,
	 "drop libmaru log lines from now on (interpreter exit)"},
	{"version", mod_version, METH_NOARGS, "libmaru version string"},
	{NULL},
};

static struct PyModuleDef maru_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "maru_core._maru",
	.m_doc = "CPython bindings of libmaru (internal; use maru.MaruHandler)",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__maru(void); /* the only exported symbol */

PyMODINIT_FUNC PyInit__maru(void)
{
	PyObject *m, *capi;

	if (PyType_Ready(&Mapping_Type) < 0 || PyType_Ready(&Handler_Type) < 0)
		return NULL;
	m = PyModule_Create(&maru_module);
	if (!m)
		return NULL;
	if (maru_py_rm_add(m) < 0) { /* _maru_rm.c */
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(&Handler_Type);
	if (PyModule_AddObject(m, "Handler", (PyObject *)&Handler_Type) < 0)
		goto out_handler;
	Py_INCREF(&Mapping_Type);
	if (PyModule_AddObject(m, "Mapping", (PyObject *)&Mapping_Type) < 0)
		goto out_mapping;
	capi = PyCapsule_New(&py_api, MARU_PY_API_CAPSULE, NULL);
	if (!capi || PyModule_AddObject(m, "_C_API", capi) < 0) {
		Py_XDECREF(capi);
		Py_DECREF(m);
		return NULL;
	}
	return m;

out_mapping:
	Py_DECREF(&Mapping_Type);
out_handler:
	Py_DECREF(&Handler_Type);
	Py_DECREF(m);
	return NULL;
}
