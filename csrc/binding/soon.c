/*
 * soon.c -- WheelEventLoop's call_soon in C: `_LoopSoon`, a small object
 * tied to one loop (weakly) and its ready queue (strongly), whose call_soon
 * the loop installs as its own while it is not in debug mode
 * (pywheel/asyncio.py, WheelEventLoop._bind_timers).
 *
 * Owns: nothing of a core, no wheel; it makes an asyncio.events.Handle and
 * appends it to the loop's `_ready` deque, which is all the stock path does.
 * Must not touch: a handle once queued, the loop (it reads nothing of it).
 * Module-wide rules: module.h.
 *
 * Why it is this shape.  The stock loop.call_soon(f) is four Python frames
 * (call_soon, _check_closed, _call_soon, Handle.__init__ and its
 * loop.get_debug()) and costs about 1.4 us; whole programs call it once or
 * more per task step (110,000 times in a 5,000-task sleep storm).  Here the
 * common call -- a callback, positional arguments, no keyword but context=,
 * an open loop not in debug mode whose call_soon, _call_soon, _check_closed
 * and get_debug are asyncio's own and whose _ready is a collections.deque --
 * does in C exactly what those frames do: a Handle whose slots hold what
 * Handle.__init__ leaves there outside debug mode (the context given, or a
 * copy of the current one for None; the loop; the callback; the arguments
 * tuple; _cancelled False; _repr and _source_traceback None), appended to
 * the deque.  Everything else is handed, untouched, to BaseEventLoop's
 * call_soon, so that every error and every odd case is the stock path's by
 * construction.  As for _LoopTimers (loop.c), what the loop's state allows
 * is a flag, and the deque, the loop hands over (_set_plain) on every write
 * of an attribute they depend on (WheelEventLoop.__setattr__).
 *
 * The Handle is made without running its __init__: the type's tp_alloc (the
 * stock path's object.__new__ allocates with it too) and stores through the
 * offsets of Handle's member descriptors.  That layout is checked when the
 * object is made (check_layout): Handle's own base is object, it has no
 * __dict__, no __new__ of its own, and its slots are exactly the seven
 * object members __init__ writes (plus __weakref__, left empty as
 * object.__new__ leaves it).  A Handle of any other shape (a later Python)
 * makes _LoopSoon() raise TypeError, and the loop then keeps the Python
 * call_soon (pywheel/asyncio.py, _c_soon).  Checked on CPython 3.11-3.14,
 * where Handle.__init__ and its __slots__ are the same.
 *
 * The loop is held weakly for the reason loop.c gives: its __dict__ holds
 * the bound method, which holds this object.  A call after the loop is gone
 * raises as a closed loop does.
 *
 * Free-threaded builds: the flag and the deque's append are swapped by
 * _set_plain under `mu`, and call_soon takes a reference to it under it, so a
 * call from another thread (not thread-safe by asyncio's rules, but it must
 * not crash) never sees a freed deque; deque.append locks the deque itself.
 */
#include "module.h"

#include <stdint.h>

#if PY_VERSION_HEX >= 0x030C0000
#define PW_T_OBJECT_EX Py_T_OBJECT_EX
#define PW_READONLY Py_READONLY
#else
#define PW_T_OBJECT_EX T_OBJECT_EX
#define PW_READONLY READONLY
#endif

/* Handle's slots, in the order of the offsets kept below. */
enum { HS_CALLBACK, HS_ARGS, HS_CANCELLED, HS_LOOP, HS_TRACEBACK, HS_REPR, HS_CONTEXT, HS_NSLOTS };
static const char *const slot_names[HS_NSLOTS] = {
    "_callback", "_args", "_cancelled", "_loop", "_source_traceback", "_repr", "_context",
};

typedef struct {
  PyObject_HEAD PyObject *loop_ref; /* weak reference to the loop */
  PyObject *py_call_soon;           /* BaseEventLoop.call_soon (a function) */
  PyTypeObject *handle_type;        /* asyncio.events.Handle */
  PyObject *append;                 /* the loop's _ready.append while ok, else NULL */
  Py_ssize_t off[HS_NSLOTS];        /* Handle's slot offsets (check_layout) */
  bool ok;                          /* the loop allows the fast path (_set_plain) */
#ifdef PW_FREE_THREADED
  PyMutex mu; /* ok and append (see the header comment) */
#endif
} LoopSoonObject;

static PyObject *s_context_name; /* interned "context" */
static PyObject *s_append;       /* interned "append" */

static int intern_soon_names(void) {
#ifdef PW_FREE_THREADED
  static PyMutex mu; /* two loops may be made at once */
  PyMutex_Lock(&mu);
#endif
  if (!s_context_name)
    s_context_name = PyUnicode_InternFromString("context");
  if (!s_append)
    s_append = PyUnicode_InternFromString("append");
  int r = s_context_name && s_append ? 0 : -1;
#ifdef PW_FREE_THREADED
  PyMutex_Unlock(&mu);
#endif
  return r;
}

#if PY_VERSION_HEX < 0x030D0000
/* PyUnicode_EqualToUTF8 is 3.13's. */
static int PyUnicode_EqualToUTF8(PyObject *s, const char *utf8) {
  const char *u = PyUnicode_AsUTF8(s);
  if (!u) {
    PyErr_Clear();
    return 0;
  }
  return strcmp(u, utf8) == 0;
}
#endif

/* Whether `tp` is the Handle this file knows how to fill; the slot offsets
 * into off[].  0: it is; -1 with TypeError: it is not (or an error). */
static int check_layout(PyTypeObject *tp, Py_ssize_t off[HS_NSLOTS]) {
  if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || tp->tp_base != &PyBaseObject_Type ||
      tp->tp_dictoffset != 0 || tp->tp_new != PyBaseObject_Type.tp_new ||
      tp->tp_alloc != PyType_GenericAlloc || tp->tp_itemsize != 0)
    goto refuse;
#ifdef Py_TPFLAGS_MANAGED_DICT
  if (tp->tp_flags & Py_TPFLAGS_MANAGED_DICT)
    goto refuse;
#endif
  PyObject *dict = tp->tp_dict; /* the type's own namespace (a heap type's) */
  if (!dict || !PyDict_Check(dict))
    goto refuse;
  /* Every member descriptor of the type must be one of the seven, and each
   * of the seven a writable object member inside the instance. */
  Py_ssize_t pos = 0, members = 0;
  PyObject *key, *value;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (!Py_IS_TYPE(value, &PyMemberDescr_Type))
      continue;
    members++;
    PyMemberDef *m = ((PyMemberDescrObject *)value)->d_member;
    int i = 0;
    while (i < HS_NSLOTS && !PyUnicode_EqualToUTF8(key, slot_names[i]))
      i++;
    if (i == HS_NSLOTS || ((PyDescrObject *)value)->d_type != tp || m->type != PW_T_OBJECT_EX ||
        (m->flags & PW_READONLY) || m->offset < (Py_ssize_t)sizeof(PyObject) ||
        m->offset + (Py_ssize_t)sizeof(PyObject *) > tp->tp_basicsize ||
        m->offset % (Py_ssize_t)sizeof(PyObject *) != 0)
      goto refuse;
    off[i] = m->offset;
  }
  if (members != HS_NSLOTS)
    goto refuse;
  for (int i = 0; i < HS_NSLOTS; i++)
    for (int j = 0; j < i; j++)
      if (off[i] == off[j])
        goto refuse;
  return 0;
refuse:
  PyErr_SetString(PyExc_TypeError, "_LoopSoon(): this asyncio.Handle's layout is not known");
  return -1;
}

static PyObject *soon_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  PyObject *loop, *py_soon, *handle_type;
  if (!PyArg_ParseTuple(args, "OOO:_LoopSoon", &loop, &py_soon, &handle_type))
    return NULL;
  if (kw && PyDict_GET_SIZE(kw)) {
    PyErr_SetString(PyExc_TypeError, "_LoopSoon() takes no keyword arguments");
    return NULL;
  }
  if (!PyCallable_Check(py_soon)) {
    PyErr_SetString(PyExc_TypeError, "_LoopSoon() needs the Python call_soon");
    return NULL;
  }
  if (!PyType_Check(handle_type)) {
    PyErr_SetString(PyExc_TypeError, "_LoopSoon() needs asyncio.Handle");
    return NULL;
  }
  Py_ssize_t off[HS_NSLOTS];
  if (intern_soon_names() < 0 || check_layout((PyTypeObject *)handle_type, off) < 0)
    return NULL;
  PyObject *ref = PyWeakref_NewRef(loop, NULL);
  if (!ref)
    return NULL;
  LoopSoonObject *self = (LoopSoonObject *)type->tp_alloc(type, 0);
  if (!self) {
    Py_DECREF(ref);
    return NULL;
  }
  self->loop_ref = ref;
  self->py_call_soon = Py_NewRef(py_soon);
  self->handle_type = (PyTypeObject *)Py_NewRef(handle_type);
  memcpy(self->off, off, sizeof off);
  return (PyObject *)self;
}

static int soon_traverse(LoopSoonObject *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(self->loop_ref);
  Py_VISIT(self->py_call_soon);
  Py_VISIT(self->handle_type);
  Py_VISIT(self->append);
  return 0;
}

static int soon_clear(LoopSoonObject *self) {
  Py_CLEAR(self->loop_ref);
  Py_CLEAR(self->py_call_soon);
  Py_CLEAR(self->handle_type);
  self->ok = false;
  Py_CLEAR(self->append);
  return 0;
}

static void soon_dealloc(LoopSoonObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  soon_clear(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

/* The loop, a new reference; NULL (no exception) once it is gone. */
static PyObject *soon_loop(LoopSoonObject *self) {
  if (!self->loop_ref)
    return NULL;
#if PY_VERSION_HEX >= 0x030D0000
  PyObject *loop;
  if (PyWeakref_GetRef(self->loop_ref, &loop) < 0) {
    PyErr_Clear();
    return NULL;
  }
  return loop;
#else
  PyObject *loop = PyWeakref_GetObject(self->loop_ref);
  return loop == Py_None ? NULL : Py_NewRef(loop);
#endif
}

/* _set_plain(ok, ready): whether call_soon may take the common call itself,
 * and the loop's _ready (a collections.deque) it appends to. */
static PyObject *soon_set_plain(LoopSoonObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "_set_plain(ok, ready)");
    return NULL;
  }
  int ok = PyObject_IsTrue(args[0]);
  if (ok < 0)
    return NULL;
  PyObject *append = NULL;
  if (ok && !(append = PyObject_GetAttr(args[1], s_append)))
    return NULL;
#ifdef PW_FREE_THREADED
  PyMutex_Lock(&self->mu);
#endif
  PyObject *old = self->append;
  self->append = append;
  self->ok = ok;
#ifdef PW_FREE_THREADED
  PyMutex_Unlock(&self->mu);
#endif
  Py_XDECREF(old); /* outside the lock: it can free a deque */
  Py_RETURN_NONE;
}

/* The queue's append, a new reference, if the loop allows the fast path;
 * NULL (no exception) if not. */
static inline PyObject *plain_append(LoopSoonObject *self) {
#ifdef PW_FREE_THREADED
  PyMutex_Lock(&self->mu);
#endif
  PyObject *append = self->ok ? Py_XNewRef(self->append) : NULL;
#ifdef PW_FREE_THREADED
  PyMutex_Unlock(&self->mu);
#endif
  return append;
}

/* A Handle as Handle(callback, args, loop, context).__init__ leaves it
 * outside debug mode; every reference passed is borrowed. */
static PyObject *make_handle(LoopSoonObject *self, PyObject *loop, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *context) {
  PyObject *ctx = context && context != Py_None ? Py_NewRef(context) : PyContext_CopyCurrent();
  if (!ctx)
    return NULL;
  PyObject *targs = PyTuple_New(nargs - 1);
  if (!targs) {
    Py_DECREF(ctx);
    return NULL;
  }
  for (Py_ssize_t i = 1; i < nargs; i++)
    PyTuple_SET_ITEM(targs, i - 1, Py_NewRef(args[i]));
  PyTypeObject *tp = self->handle_type;
  PyObject *h = tp->tp_alloc(tp, 0);
  if (!h) {
    Py_DECREF(ctx);
    Py_DECREF(targs);
    return NULL;
  }
  char *base = (char *)h;
#define SLOT(i) (*(PyObject **)(base + self->off[i]))
  SLOT(HS_CONTEXT) = ctx;
  SLOT(HS_LOOP) = Py_NewRef(loop);
  SLOT(HS_CALLBACK) = Py_NewRef(args[0]);
  SLOT(HS_ARGS) = targs;
  SLOT(HS_CANCELLED) = Py_NewRef(Py_False);
  SLOT(HS_REPR) = Py_NewRef(Py_None);
  SLOT(HS_TRACEBACK) = Py_NewRef(Py_None);
#undef SLOT
  return h;
}

/* The Python method, called as loop.call_soon(*args, **kw) would call it. */
static PyObject *soon_hand_over(LoopSoonObject *self, PyObject *loop, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames) {
  Py_ssize_t n = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  PyObject *small[8], **argv = small;
  if (n + 1 > (Py_ssize_t)(sizeof small / sizeof *small) &&
      !(argv = PyMem_Malloc((size_t)(n + 1) * sizeof *argv)))
    return PyErr_NoMemory();
  argv[0] = loop;
  for (Py_ssize_t i = 0; i < n; i++)
    argv[i + 1] = args[i];
  PyObject *r = PyObject_Vectorcall(self->py_call_soon, argv, (size_t)(nargs + 1), kwnames);
  if (argv != small)
    PyMem_Free(argv);
  return r;
}

static PyObject *soon_call_soon(LoopSoonObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
  PyObject *loop = soon_loop(self);
  if (!loop) {
    PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
    return NULL;
  }
  PyObject *context = NULL, *r;
  bool plain = nargs >= 1;
  if (plain && kwnames) {
    /* Only context=: by identity for keywords from source (interned), by
     * value for the rest -- asyncio's C Task and Future pass a "context"
     * they made with Py_BuildValue, which is not interned. */
    PyObject *k = PyTuple_GET_ITEM(kwnames, 0);
    plain = PyTuple_GET_SIZE(kwnames) == 1 &&
            (k == s_context_name ||
             (PyUnicode_CheckExact(k) && PyUnicode_CompareWithASCIIString(k, "context") == 0));
    context = args[nargs];
  }
  PyObject *append = plain ? plain_append(self) : NULL;
  if (!append) {
    r = soon_hand_over(self, loop, args, nargs, kwnames);
    Py_DECREF(loop);
    return r;
  }
  r = make_handle(self, loop, args, nargs, context);
  if (r) {
    PyObject *done = PyObject_CallOneArg(append, r);
    if (done)
      Py_DECREF(done);
    else
      Py_CLEAR(r);
  }
  Py_DECREF(append);
  Py_DECREF(loop);
  return r;
}

static PyMethodDef soon_methods[] = {
    {"call_soon", (PyCFunction)(void (*)(void))soon_call_soon, METH_FASTCALL | METH_KEYWORDS,
     "call_soon($self, callback, *args, context=None)\n--\n\n"
     "The loop's call_soon: queue callback(*args) on its ready queue; returns an "
     "asyncio.Handle."},
    {"_set_plain", (PyCFunction)(void (*)(void))soon_set_plain, METH_FASTCALL,
     "_set_plain($self, ok, ready, /)\n--\n\n"
     "Whether call_soon may take the common call itself, and the loop's _ready deque (the "
     "loop keeps this up to date; until it says so, everything goes to the Python method)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot soon_slots[] = {
    {Py_tp_new, soon_new},
    {Py_tp_dealloc, soon_dealloc},
    {Py_tp_traverse, soon_traverse},
    {Py_tp_clear, soon_clear},
    {Py_tp_methods, soon_methods},
    {Py_tp_doc, "_LoopSoon(loop, call_soon, handle_type, /)\n--\n\n"
                "WheelEventLoop's call_soon in C (not in debug mode): makes handle_type "
                "(asyncio.Handle) objects as Handle.__init__ does and appends them to the "
                "loop's ready queue; what it does not take on itself goes to the Python "
                "call_soon given.  TypeError if handle_type's layout is not the one known."},
    {0, NULL},
};

PyType_Spec pw__loop_soon_spec = {
    .name = "pywheel._LoopSoon",
    .basicsize = sizeof(LoopSoonObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = soon_slots,
};
