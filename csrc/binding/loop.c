/*
 * loop.c -- WheelEventLoop's call_later and call_at in C: `_LoopTimers`, a
 * small object tied to one loop (weakly) and its ManualWheel (strongly),
 * whose two methods the loop installs as its own while it is not in debug
 * mode (pywheel/asyncio.py, WheelEventLoop._bind_timers).
 *
 * Owns: nothing of a core; it schedules through pw__schedule (wheel.c) as
 * ManualWheel.call_at does.  Must not touch: a handle once made, the wheel's
 * clock, the loop (it reads nothing of it but whether it is alive).
 * Module-wide rules: module.h.
 *
 * Why it is this shape.  The Python methods cost about 1 us a call_later,
 * ten times the wheel's own call_at: two Python frames, the loop's checks,
 * time(), then the C call.  Here the common call does in C exactly what the
 * Python path does for it -- a float or int time or delay, a callable, no
 * keyword but context=, an open loop not in debug mode -- and everything
 * else (None, NaN, a closed loop, a bad callback, Decimal or numpy numbers,
 * keyword arguments, a loop whose call_at or time() was replaced on the
 * instance) is handed, untouched, to the Python method WheelEventLoop
 * defines, so that every error and every odd case is the Python path's by
 * construction rather than by a second copy of its rules.  The fast path
 * only ever reads (its flags, the clock) before it decides, so handing over
 * is never observable.
 *
 * What the loop's state allows is two flags the loop sets (_set_plain)
 * whenever one of the attributes it depends on is written (_closed, _debug,
 * call_at, call_later, time: WheelEventLoop.__setattr__), not read from the
 * loop's __dict__ per call: those four dict lookups were a fifth of a
 * call_later (27 ns of 140 under perf), as much as reading the clock.
 *
 * The loop is held by a weak reference: the loop's __dict__ holds the bound
 * methods, which hold this object, and a strong reference back would put
 * every loop in a cycle that only the collector frees.  A method called
 * after its loop is gone raises as a closed loop does.
 *
 * pywheel.uvloop.Loop uses the same object with the two optional arguments
 * (pywheel/uvloop.py, Loop._bind_timers): `time`, the loop's clock, called
 * as time(loop) in place of time.monotonic() (uvloop's Loop.time: libuv's
 * millisecond clock); and `arm`, called as arm(loop, when) after a timer
 * was scheduled whose deadline comes before `arm_below` -- the loop keeps
 * that attribute at the deadline its one libuv timer is armed for (inf:
 * none; -inf: a run of the wheel is queued), so the common call, a deadline
 * after the armed one, costs no Python call at all.  The comparison and the
 * value passed are the Python method's: the deadline asked for, inf for one
 * that never runs, -inf for one far in the past.  With the third, `call_soon`
 * (uvloop's own Loop.call_soon), a deadline the loop's time() has reached
 * -- read for call_at too, as uvloop's call_at reads it -- is a soon timer
 * (pw__schedule_soon, wheel.c) and call_soon(loop, wheel._run_soon, handle)
 * queues its run where uvloop would queue the call_soon it makes of such a
 * timer; the common call, a deadline ahead, pays one clock read in call_at.
 */
#include "module.h"

typedef struct {
  PyObject_HEAD WheelObject *wheel; /* strong: the loop's ManualWheel */
  PyObject *loop_ref;               /* weak reference to the loop */
  PyObject *py_call_later;          /* WheelEventLoop.call_later (a function) */
  PyObject *py_call_at;             /* WheelEventLoop.call_at */
  PyObject *time_fn;                /* NULL: time.monotonic(); else time(loop) */
  PyObject *arm_fn;                 /* NULL: nothing to arm; else arm(loop, when) */
  PyObject *soon_fn;                /* NULL: none; else soon_fn(loop, run_soon, handle) */
  PyObject *run_soon;               /* the wheel's bound _run_soon, with soon_fn */
  PyObject *soon_ctx;               /* the context soon_fn's callbacks run in (see below) */
  double arm_below;                 /* arm_fn is called for a deadline before it */
  /* What the loop last told _set_plain (WheelEventLoop._sync_timers, on
   * every write of the attributes they depend on): call_at may take the
   * common call itself (the loop is open and not in debug mode), and so may
   * call_later (its call_at and time() are, besides, the loop's own). */
  bool at_ok, later_ok;
} LoopTimersObject;

static PyObject *s_context;    /* interned "context", made once */
static PyObject *s_context_kw; /* ("context",): kwnames of a call passing context= */

static int intern_names(void) {
#ifdef PW_FREE_THREADED
  static PyMutex mu; /* two loops may be made at once */
  PyMutex_Lock(&mu);
#endif
  if (!s_context)
    s_context = PyUnicode_InternFromString("context");
  if (s_context && !s_context_kw)
    s_context_kw = PyTuple_Pack(1, s_context);
  int r = s_context && s_context_kw ? 0 : -1;
#ifdef PW_FREE_THREADED
  PyMutex_Unlock(&mu);
#endif
  return r;
}

static PyObject *timers_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  PyObject *wheel, *loop, *py_later, *py_at, *time_fn = Py_None, *arm_fn = Py_None;
  PyObject *soon_fn = Py_None;
  modstate *st = state_of_type(type);
  if (!st || !PyArg_ParseTuple(args, "OOOO|OOO:_LoopTimers", &wheel, &loop, &py_later, &py_at,
                               &time_fn, &arm_fn, &soon_fn))
    return NULL;
  if (kw && PyDict_GET_SIZE(kw)) {
    PyErr_SetString(PyExc_TypeError, "_LoopTimers() takes no keyword arguments");
    return NULL;
  }
  if (!PyObject_TypeCheck(wheel, st->manual_type)) {
    PyErr_SetString(PyExc_TypeError, "_LoopTimers() needs the loop's ManualWheel");
    return NULL;
  }
  if (!PyCallable_Check(py_later) || !PyCallable_Check(py_at)) {
    PyErr_SetString(PyExc_TypeError, "_LoopTimers() needs the two Python methods");
    return NULL;
  }
  if ((time_fn != Py_None && !PyCallable_Check(time_fn)) ||
      (arm_fn != Py_None && !PyCallable_Check(arm_fn)) ||
      (soon_fn != Py_None && !PyCallable_Check(soon_fn))) {
    PyErr_SetString(PyExc_TypeError,
                    "_LoopTimers(): time, arm and call_soon must be callables or None");
    return NULL;
  }
  if (soon_fn != Py_None && time_fn == Py_None) {
    PyErr_SetString(PyExc_TypeError, "_LoopTimers(): call_soon needs the loop's time");
    return NULL;
  }
  if (intern_names() < 0)
    return NULL;
  PyObject *run_soon = NULL, *soon_ctx = NULL;
  if (soon_fn != Py_None) {
    if (!(run_soon = PyObject_GetAttrString(wheel, "_run_soon")))
      return NULL;
    if (!(soon_ctx = PyContext_New())) {
      Py_DECREF(run_soon);
      return NULL;
    }
  }
  PyObject *ref = PyWeakref_NewRef(loop, NULL);
  if (!ref) {
    Py_XDECREF(run_soon);
    Py_XDECREF(soon_ctx);
    return NULL;
  }
  LoopTimersObject *self = (LoopTimersObject *)type->tp_alloc(type, 0);
  if (!self) {
    Py_DECREF(ref);
    Py_XDECREF(run_soon);
    Py_XDECREF(soon_ctx);
    return NULL;
  }
  self->wheel = (WheelObject *)Py_NewRef(wheel);
  self->loop_ref = ref;
  self->py_call_later = Py_NewRef(py_later);
  self->py_call_at = Py_NewRef(py_at);
  self->time_fn = time_fn == Py_None ? NULL : Py_NewRef(time_fn);
  self->arm_fn = arm_fn == Py_None ? NULL : Py_NewRef(arm_fn);
  self->soon_fn = soon_fn == Py_None ? NULL : Py_NewRef(soon_fn);
  self->run_soon = run_soon;
  self->soon_ctx = soon_ctx;
  self->arm_below = INFINITY;
  return (PyObject *)self;
}

static int timers_traverse(LoopTimersObject *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(self->wheel);
  Py_VISIT(self->loop_ref);
  Py_VISIT(self->py_call_later);
  Py_VISIT(self->py_call_at);
  Py_VISIT(self->time_fn);
  Py_VISIT(self->arm_fn);
  Py_VISIT(self->soon_fn);
  Py_VISIT(self->run_soon);
  Py_VISIT(self->soon_ctx);
  return 0;
}

static int timers_clear(LoopTimersObject *self) {
  Py_CLEAR(self->wheel);
  Py_CLEAR(self->loop_ref);
  Py_CLEAR(self->py_call_later);
  Py_CLEAR(self->py_call_at);
  Py_CLEAR(self->time_fn);
  Py_CLEAR(self->arm_fn);
  Py_CLEAR(self->soon_fn);
  Py_CLEAR(self->run_soon);
  Py_CLEAR(self->soon_ctx);
  return 0;
}

static void timers_dealloc(LoopTimersObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  timers_clear(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

/* The loop, a new reference; NULL (no exception) once it is gone. */
static PyObject *loop_of(LoopTimersObject *self) {
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

static PyObject *timers_set_plain(LoopTimersObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "_set_plain(at_ok, later_ok)");
    return NULL;
  }
  int at = PyObject_IsTrue(args[0]), later = PyObject_IsTrue(args[1]);
  if (at < 0 || later < 0)
    return NULL;
  self->at_ok = at;
  self->later_ok = at && later;
  Py_RETURN_NONE;
}

/* The only keyword the fast path takes is context=; *context is NULL
 * without it.  false: hand over (another keyword, or too few arguments). */
static bool plain_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                       PyObject **context) {
  *context = NULL;
  if (nargs < 2)
    return false;
  if (kwnames) {
    if (PyTuple_GET_SIZE(kwnames) != 1 || PyTuple_GET_ITEM(kwnames, 0) != s_context)
      return false; /* compared by identity: keywords from source are interned */
    *context = args[nargs];
  }
  return PyCallable_Check(args[1]) != 0;
}

/* The Python method, called as loop.method(*args, **kw) would call it. */
static PyObject *hand_over(PyObject *func, PyObject *loop, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
  Py_ssize_t n = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  PyObject *small[8], **argv = small;
  if (n + 1 > (Py_ssize_t)(sizeof small / sizeof *small) &&
      !(argv = PyMem_Malloc((size_t)(n + 1) * sizeof *argv)))
    return PyErr_NoMemory();
  argv[0] = loop;
  for (Py_ssize_t i = 0; i < n; i++)
    argv[i + 1] = args[i];
  PyObject *r = PyObject_Vectorcall(func, argv, (size_t)(nargs + 1), kwnames);
  if (argv != small)
    PyMem_Free(argv);
  return r;
}

/* A float time to the wheel's count, as the Python call_at gives it: the
 * deadline rule (pw__float_time_to_ns), and a finite time beyond the clock's
 * range never runs, or, far in the past, runs in the next batch (the
 * Python path's _call_never).  false for NaN: the Python path refuses it. */
static bool when_of_double(double d, int64_t *out) {
  if (isnan(d))
    return false;
  if (pw__float_time_to_ns(d, out) < 0)
    *out = d > 0 ? NEVER_NS : PAST_NS;
  return true;
}

/* The deadline arm() is given, as the Python method gives it to _arm: the
 * time asked for (an int as its float, exact within the clock's range), or
 * inf / -inf for one that never runs / runs now. */
static double arm_when(int64_t when, double asked) {
  return when == NEVER_NS ? INFINITY : when == PAST_NS ? -INFINITY : asked;
}

/* The same for an exact int or float argument; false for anything else. */
static bool when_of(PyObject *o, int64_t *out, double *asked) {
  if (PyFloat_CheckExact(o))
    return when_of_double(*asked = PyFloat_AS_DOUBLE(o), out);
  if (!PyLong_CheckExact(o))
    return false;
  int overflow;
  long long s = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (s == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  if (overflow || s > INT64_MAX / 1000000000 || s < -(INT64_MAX / 1000000000))
    *out = overflow > 0 || s > 0 ? NEVER_NS : PAST_NS; /* see when_of_double */
  else
    *out = (int64_t)s * 1000000000;
  *asked = (double)s;
  return true;
}

/* Schedules, then, for a loop with a libuv timer to arm, arms it if the
 * deadline comes before the armed one (the Python method's order: a timer
 * scheduled stays scheduled if arm() raises). */
/* A timer due already (when <= the loop's time(), as read): a soon timer
 * (pw__schedule_soon), and the call to run it queued on the loop's ready
 * queue, soon_fn(loop, run_soon, handle, context=soon_ctx) -- uvloop's own
 * call_soon, so it runs where uvloop runs a call_later(0) or a past
 * call_at.  The context is one made for this, reused: without it uvloop
 * copies the current one for each call (a fifth of the cost), and _run_soon
 * runs the timer in the timer's own context anyway.  Reusing it is safe
 * because ready callbacks never nest (a running loop cannot be run again
 * from its callbacks).  If the call fails the timer is cancelled: it would
 * never run. */
static PyObject *schedule_soon(LoopTimersObject *self, PyObject *loop, int64_t when,
                               PyObject *const *args, Py_ssize_t nargs, PyObject *context) {
  PyObject *r = pw__schedule_soon(self->wheel, when, args, nargs, context);
  if (!r)
    return NULL;
  PyObject *argv[4] = {loop, self->run_soon, r, self->soon_ctx};
  PyObject *queued = PyObject_Vectorcall(self->soon_fn, argv, 3, s_context_kw);
  if (queued) {
    Py_DECREF(queued);
    return r;
  }
  PyObject *exc = pw__fetch_exc();
  PyObject *done = PyObject_CallMethod(r, "cancel", NULL);
  Py_XDECREF(done);
  if (!done)
    PyErr_Clear();
  pw__restore_exc(exc);
  Py_DECREF(r);
  return NULL;
}

static PyObject *schedule(LoopTimersObject *self, PyObject *loop, int64_t when, double asked,
                          PyObject *const *args, Py_ssize_t nargs, PyObject *context) {
  WheelObject *w = self->wheel;
  PyObject *r = pw__schedule(w, when, when < core_now_ns(w->core), 0, args, nargs, context);
  double at = arm_when(when, asked);
  if (r && self->arm_fn && at < self->arm_below) {
    PyObject *at_obj = PyFloat_FromDouble(at);
    PyObject *done = NULL;
    if (at_obj) {
      PyObject *argv[2] = {loop, at_obj};
      done = PyObject_Vectorcall(self->arm_fn, argv, 2, NULL);
      Py_DECREF(at_obj);
    }
    if (!done)
      Py_CLEAR(r);
    Py_XDECREF(done);
  }
  return r;
}

/* Whether a deadline is due at the loop's time `now` (a soon timer): the
 * Python method's `when <= now`, with a deadline beyond the clock's range
 * due only when it is far in the past. */
static inline bool due_at(int64_t when, double asked, double now) {
  return when == PAST_NS || (when != NEVER_NS && asked <= now);
}

/* The loop's time(loop) as a float into *now: 1; 0 if it is not a float
 * (the Python path takes the call); -1 with its error. */
static int read_time(LoopTimersObject *self, PyObject *loop, double *now) {
  PyObject *t = PyObject_Vectorcall(self->time_fn, &loop, 1, NULL);
  if (!t)
    return -1;
  int ok = PyFloat_CheckExact(t);
  if (ok)
    *now = PyFloat_AS_DOUBLE(t);
  Py_DECREF(t);
  return ok;
}

static PyObject *timers_call_at(LoopTimersObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
  PyObject *loop = loop_of(self);
  if (!loop) {
    PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
    return NULL;
  }
  PyObject *context, *r;
  int64_t when;
  double asked = 0.0;
  bool fast =
      self->at_ok && plain_args(args, nargs, kwnames, &context) && when_of(args[0], &when, &asked);
  int due = 0;
  double now = 0.0;
  if (fast && self->soon_fn) {
    /* The clock, read as the Python method reads it (uvloop's call_at reads
     * it too): a deadline it has reached is a soon timer. */
    due = read_time(self, loop, &now);
    if (due < 0) {
      Py_DECREF(loop);
      return NULL;
    }
    fast = due == 1;
    due = fast && due_at(when, asked, now);
  }
  if (due)
    r = schedule_soon(self, loop, when, args, nargs, context);
  else if (fast)
    r = schedule(self, loop, when, asked, args, nargs, context);
  else
    r = hand_over(self->py_call_at, loop, args, nargs, kwnames);
  Py_DECREF(loop);
  return r;
}

/* The loop's time(): time.monotonic() (the loop installs these methods only
 * when its class keeps BaseEventLoop.time), to the bit: CPython's
 * _PyTime_AsSecondsDouble, which divides the whole count (correctly rounded
 * below 2**53 ns, 104 days of uptime, as pw__s_of_ns is; rounded twice
 * above, where pw__s_of_ns would differ from it in the last bit). */
static inline double loop_time(void) {
  int64_t ns = pw_clock_ns();
  if (ns % 1000000000 == 0)
    return (double)(ns / 1000000000);
  return (double)ns / 1e9;
}

/* call_later(delay) is call_at(time() + delay), the sum taken in floats as
 * the stock loop takes it. */
static PyObject *timers_call_later(LoopTimersObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  PyObject *loop = loop_of(self);
  if (!loop) {
    PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
    return NULL;
  }
  PyObject *context, *r;
  double delay = 0.0;
  int64_t when;
  bool fast = self->later_ok && plain_args(args, nargs, kwnames, &context);
  if (fast) {
    PyObject *o = args[0];
    if (PyFloat_CheckExact(o))
      delay = PyFloat_AS_DOUBLE(o);
    else if (PyLong_CheckExact(o)) {
      delay = PyLong_AsDouble(o); /* as float + int does */
      if (delay == -1.0 && PyErr_Occurred()) {
        PyErr_Clear(); /* too large: the Python path says so */
        fast = false;
      }
    } else
      fast = false;
  }
  double now = 0.0;
  if (fast && self->time_fn) {
    /* The loop's own clock, read once, as the Python method reads it; its
     * error is the Python method's (which reads it first as well). */
    PyObject *t = PyObject_Vectorcall(self->time_fn, &loop, 1, NULL);
    if (!t) {
      Py_DECREF(loop);
      return NULL;
    }
    if (PyFloat_CheckExact(t))
      now = PyFloat_AS_DOUBLE(t);
    else
      fast = false; /* not uvloop's float: the Python path adds it */
    Py_DECREF(t);
  } else if (fast)
    now = loop_time();
  if (fast && when_of_double(now + delay, &when)) {
    if (self->soon_fn && due_at(when, now + delay, now))
      r = schedule_soon(self, loop, when, args, nargs, context);
    else
      r = schedule(self, loop, when, now + delay, args, nargs, context);
  } else
    r = hand_over(self->py_call_later, loop, args, nargs, kwnames);
  Py_DECREF(loop);
  return r;
}

static PyObject *timers_get_arm_below(LoopTimersObject *self, void *closure) {
  (void)closure;
  return PyFloat_FromDouble(self->arm_below);
}

static int timers_set_arm_below(LoopTimersObject *self, PyObject *value, void *closure) {
  (void)closure;
  if (!value) {
    PyErr_SetString(PyExc_AttributeError, "arm_below cannot be deleted");
    return -1;
  }
  double d = PyFloat_AsDouble(value);
  if (d == -1.0 && PyErr_Occurred())
    return -1;
  self->arm_below = d;
  return 0;
}

static PyGetSetDef timers_getset[] = {
    {"arm_below", (getter)timers_get_arm_below, (setter)timers_set_arm_below,
     "arm(loop, when) is called after scheduling a deadline before this (inf at first).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef timers_methods[] = {
    {"call_later", (PyCFunction)(void (*)(void))timers_call_later, METH_FASTCALL | METH_KEYWORDS,
     "call_later($self, delay, callback, /, *args, context=None)\n--\n\n"
     "The loop's call_later: call_at(time() + delay, ...)."},
    {"call_at", (PyCFunction)(void (*)(void))timers_call_at, METH_FASTCALL | METH_KEYWORDS,
     "call_at($self, when, callback, /, *args, context=None)\n--\n\n"
     "The loop's call_at: schedule callback(*args) at loop time `when`."},
    {"_set_plain", (PyCFunction)(void (*)(void))timers_set_plain, METH_FASTCALL,
     "_set_plain($self, at_ok, later_ok, /)\n--\n\n"
     "Whether call_at, and call_later, may take the common call themselves (the loop "
     "keeps this up to date; until it says so, everything goes to the Python methods)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot timers_slots[] = {
    {Py_tp_new, timers_new},
    {Py_tp_dealloc, timers_dealloc},
    {Py_tp_traverse, timers_traverse},
    {Py_tp_clear, timers_clear},
    {Py_tp_methods, timers_methods},
    {Py_tp_getset, timers_getset},
    {Py_tp_doc, "_LoopTimers(wheel, loop, call_later, call_at, time=None, arm=None, "
                "call_soon=None, /)\n--\n\n"
                "WheelEventLoop's (and pywheel.uvloop.Loop's) call_later/call_at in C (not in "
                "debug mode); what it does not take on itself goes to the two Python methods "
                "given.  time: the loop's clock, called as time(loop) (None: "
                "time.monotonic()); arm: called as arm(loop, when) after scheduling a deadline "
                "before arm_below; call_soon (with time): a deadline <= time(loop) becomes a "
                "soon timer, queued as call_soon(loop, wheel._run_soon, handle)."},
    {0, NULL},
};

PyType_Spec pw__loop_timers_spec = {
    .name = "pywheel._LoopTimers",
    .basicsize = sizeof(LoopTimersObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = timers_slots,
};
