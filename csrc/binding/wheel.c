/*
 * wheel.c -- the Wheel type: construction (wheel_make, shared with
 * ManualWheel), traverse/clear/dealloc, call_later, call_at, call_every
 * (schedule), time(), len(), close(), the exception-handler methods,
 * stats(), repr, and the Wheel type's tables and spec (pw__wheel_spec).
 *
 * Owns: what a WheelObject holds (its core reference, handler, weakrefs)
 * and the linking of new handles.  Must not touch: a batch in progress
 * (batch.c), the registry and fork state (lifecycle.c), the manual clock
 * (manual.c).  Ownership and lock order (GIL, then core mutex): module.h.
 */
#include "module.h"

/* ------------------------------------------------------------------ */
/* Wheel                                                               */

static PyObject *wheel_make(PyTypeObject *type, PyObject *args, PyObject *kw, bool manual) {
  static char *wheel_kw[] = {"tick", NULL};
  static char *manual_kw[] = {"tick", "start", NULL};
  PyObject *tick_o = NULL, *start_o = NULL;
  if (manual
          ? !PyArg_ParseTupleAndKeywords(args, kw, "|O$O:ManualWheel", manual_kw, &tick_o, &start_o)
          : !PyArg_ParseTupleAndKeywords(args, kw, "|O:Wheel", wheel_kw, &tick_o))
    return NULL;
  int64_t tick_ns = 1000000, start_ns = 0;
  if (tick_o && pw__seconds_to_ns(tick_o, "tick", &tick_ns) < 0)
    return NULL;
  if (tick_ns <= 0 || tick_ns == NEVER_NS) {
    PyErr_SetString(PyExc_ValueError, "tick must be a positive, finite number of seconds "
                                      "of at least one nanosecond");
    return NULL;
  }
  if (start_o && pw__time_to_ns(start_o, "start", &start_ns) < 0)
    return NULL;
  if (start_ns < 0 || start_ns == NEVER_NS) {
    PyErr_SetString(PyExc_ValueError, "start must be a finite number of seconds >= 0");
    return NULL;
  }
  modstate *st = state_of_type(type);
  if (!st)
    return NULL;
  if (!manual && atomic_load(&st->exited)) {
    /* A threaded wheel made now would have nobody to stop it before
     * finalization. */
    PyErr_SetString(PyExc_RuntimeError, "the interpreter is exiting: no new Wheel threads");
    return NULL;
  }
  WheelObject *self = (WheelObject *)type->tp_alloc(type, 0);
  if (!self)
    return NULL;
#ifdef PW_FREE_THREADED
  PyUnstable_EnableTryIncRef((PyObject *)self); /* for owner_ref_locked */
#endif
  self->core = pw__core_new(tick_ns, manual, start_ns);
  if (!self->core) {
    Py_DECREF(self);
    return NULL;
  }
  self->core->owner = self;
  self->core->htype = (PyTypeObject *)Py_NewRef(st->handle_type);
  return (PyObject *)self;
}

static PyObject *wheel_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  return wheel_make(type, args, kw, false);
}

PyObject *pw__manual_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  return wheel_make(type, args, kw, true);
}

struct visit {
  visitproc visit;
  void *arg;
};

/* One page's column of one kind of reference: `left` of its words are set. */
static int visit_column(void *const *words, size_t n, size_t left, void *p) {
  visitproc visit = ((struct visit *)p)->visit;
  void *arg = ((struct visit *)p)->arg;
  for (size_t i = 0; left && i < n; i++)
    if (words[i]) {
      left--;
      Py_VISIT((PyObject *)words[i]);
    }
  return 0;
}

/*
 * Reports what the pending handles hold, as if the wheel held it: handles
 * are no GC objects.  Every pending handle is the wheel's (linked, in a
 * batch, or the repeating one running now) and lives in the wheel's slabs,
 * and its callback, arguments and context are side words of its slot
 * (slab.h), kept in one column of each kind a page.  So the walk reads the
 * callback column, 8 bytes a slot in address order, and the argument and
 * context columns only on pages where one is set: a full collection with a
 * million pending timers reads 8 MB, not 104.  It reads no handle at all,
 * so it cannot look at a handle's state: it relies on the invariant stated
 * with handle_take_refs (module.h), that a word is set only while its
 * handle is pending, whenever the collector can run; closed, the wheel
 * reports nothing, as before.  The set is the same in every pass of one
 * collection: nothing changes a word without the GIL.
 *
 * Every set word is visited, whether or not its object is tracked by the
 * collector (an args tuple of numbers, a builtin type as the callback, immortal on 3.12+):
 * skipping them would save nothing in the common case (a shared callback,
 * no arguments, no context: one visit a handle either way), would hide them
 * from gc.get_referents(), and what a visit does with an untracked object
 * is the collector's business, which changed between 3.11 and 3.14
 * (incremental marking), not ours to predict.
 */
static int wheel_traverse(WheelObject *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(self->handler);
  core *c = self->core;
  if (!c)
    return 0;
  Py_VISIT(c->htype);
  if (c->closed || !c->slabs)
    return 0;
  struct visit v = {visit, arg};
  for (unsigned k = 0; k < NREFS; k++) {
    int r = pw_slab_foreach_side(c->slabs, k, visit_column, &v);
    if (r)
      return r;
  }
  return 0;
}

/*
 * The collector calls every finalizer of a garbage set before it clears
 * anything in it.  A wheel that is garbage together with its pending
 * callbacks must stop running them by then: the clears that follow may
 * release the GIL (a __del__ of an older object they free sleeps, or runs
 * for a switch interval), and the wheel's thread would then call a function
 * whose globals were already cleared.  So the wheel closes here, cancelling
 * and releasing everything pending, as its dealloc would.  A finalizer of
 * the same garbage that resurrects the wheel gets it back closed.
 */
static void wheel_finalize(WheelObject *self) {
  core *c = self->core;
  if (!c || core_closed(c))
    return;
  PyObject *exc = pw__fetch_exc(); /* a finalizer keeps the current exception */
  pw__close_core(c, "collected as garbage", false);
  if (exc)
    pw__restore_exc(exc);
}

static int wheel_clear(WheelObject *self) {
  if (self->core)
    pw__close_core(self->core, "collected as garbage", false);
  Py_CLEAR(self->handler);
  return 0;
}

static void wheel_dealloc(WheelObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  core *c = self->core;
  if (c) {
    core_lock(c);
    c->owner = NULL; /* first: the thread must not find us from here on */
    core_unlock(c);
  }
  if (self->weakreflist)
    PyObject_ClearWeakRefs((PyObject *)self);
  wheel_clear(self);
  if (c) {
    Py_CLEAR(c->htype);
    if (c->manual)
      Py_CLEAR(c->empty_ctx); /* a threaded wheel's thread clears its own */
    pw__core_release_slabs(c);
    self->core = NULL;
    pw__core_decref(c);
  }
  tp->tp_free(self);
  Py_DECREF(tp);
}

/* context=None captures the caller's context, as asyncio does.  For a
 * one-shot timer, while that context is empty (no variable set) NULL stands
 * for it, sparing an object per timer: the run gets a fresh empty context,
 * which nobody can tell from a copy of an empty one.  A repeating timer
 * always gets a real copy, which its runs share. */
static int capture_context(PyObject *context, bool repeating, PyObject **out) {
  *out = NULL;
  if (context && context != Py_None) {
    if (!PyContext_CheckExact(context)) {
      PyErr_Format(PyExc_TypeError, "context must be a contextvars.Context or None, not %.100s",
                   Py_TYPE(context)->tp_name);
      return -1;
    }
    *out = Py_NewRef(context);
    return 0;
  }
  PyObject *cur = PyThreadState_Get()->context;
  if (!repeating) {
    if (!cur)
      return 0;
    Py_ssize_t n = PyObject_Length(cur);
    if (n <= 0)
      return (int)n;
  }
  *out = PyContext_CopyCurrent();
  return *out ? 0 : -1;
}

/* Parses (when, callback, *args, [first=], context=) from a vectorcall.
 * `first` is NULL when the method takes no such keyword. */
static int parse_schedule(const char *name, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, PyObject **first, PyObject **context) {
  *context = NULL;
  if (first)
    *first = NULL;
  if (nargs < 2) {
    PyErr_Format(PyExc_TypeError, "%s() takes at least 2 positional arguments (%zd given)", name,
                 nargs);
    return -1;
  }
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    PyObject *k = PyTuple_GET_ITEM(kwnames, i);
    if (PyUnicode_CompareWithASCIIString(k, "context") == 0)
      *context = args[nargs + i];
    else if (first && PyUnicode_CompareWithASCIIString(k, "first") == 0)
      *first = args[nargs + i];
    else {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", name, k);
      return -1;
    }
  }
  if (!PyCallable_Check(args[1])) {
    PyErr_Format(PyExc_TypeError, "callback must be callable, not %.100s",
                 Py_TYPE(args[1])->tp_name);
    return -1;
  }
  return 0;
}

/* Test hook (pywheel._core._fail_alloc_after): the n-th next handle
 * allocation fails, so the tests can show a MemoryError changes nothing.
 * (Relaxed atomics: a plain load on the hot path.) */
static atomic_long fail_alloc_countdown;

static bool alloc_fails(void) {
  return atomic_load_explicit(&fail_alloc_countdown, memory_order_relaxed) > 0 &&
         atomic_fetch_sub(&fail_alloc_countdown, 1) == 1;
}

PyObject *pw__mod_batch_live(PyObject *m, PyObject *arg) {
  modstate *st = PyModule_GetState(m);
  if (!PyObject_TypeCheck(arg, st->wheel_type)) {
    PyErr_SetString(PyExc_TypeError, "a Wheel or ManualWheel");
    return NULL;
  }
  core *c = ((WheelObject *)arg)->core;
  core_lock(c);
  pw_driver_lock(&c->drv);
  size_t kept = c->drv.batch_live, scanned = pw__batch_live_scan_locked(c);
  pw_driver_unlock(&c->drv);
  core_unlock(c);
  return Py_BuildValue("(nn)", (Py_ssize_t)kept, (Py_ssize_t)scanned);
}

PyObject *pw__mod_fail_alloc_after(PyObject *Py_UNUSED(m), PyObject *arg) {
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred())
    return NULL;
  atomic_store(&fail_alloc_countdown, n > 0 ? n : 0);
  Py_RETURN_NONE;
}

/* Creates and links a handle.  Everything was validated; only a closed
 * wheel or a failed allocation can still refuse, changing nothing. */
/* `overdue`: the deadline was past when the caller read the clock (call_later
 * and call_every know it from the sign of the delay, which spares a second
 * clock read on the hot path). */
static PyObject *schedule_impl(WheelObject *self, int64_t when_ns, bool overdue,
                               int64_t interval_ns, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *context_o, bool soon) {
  core *c = self->core;
  if (core_closed(c)) /* checked last: converting the delay could have closed it */
    return pw__closed_error(c);
  PyObject *context, *tuple = NULL;
  if (capture_context(context_o, interval_ns != 0, &context) < 0)
    return NULL;
  if (nargs > 2 && !(tuple = PyTuple_New(nargs - 2))) {
    Py_XDECREF(context);
    return NULL;
  }
  for (Py_ssize_t i = 2; i < nargs; i++)
    PyTuple_SET_ITEM(tuple, i - 2, Py_NewRef(args[i]));
  /* The allocations above can start a collection whose __del__ code closes
   * the wheel: look again, then allocate the handle and link it with no
   * Python code in between (the slot comes from the slabs, not Python). */
  core_lock(c);
  HandleObject *h = NULL;
  if (!core_closed(c) && !(h = alloc_fails() ? NULL : pw_slab_alloc(c->slabs))) {
    core_unlock(c);
    Py_XDECREF(tuple);
    Py_XDECREF(context);
    return PyErr_NoMemory();
  }
  if (!h) {
    core_unlock(c);
    Py_XDECREF(tuple);
    Py_XDECREF(context);
    return pw__closed_error(c);
  }
  PyObject_Init((PyObject *)h, c->htype); /* takes a reference to the heap type */
#ifdef PW_FREE_THREADED
  atomic_fetch_add(&c->refs, 1); /* the handle's: see handle_dealloc */
#endif
  pw_timer_init(&h->node);
  handle_set_refs(h, Py_NewRef(args[1]), tuple, context);
  h->when_ns = when_ns;
  h->interval_ns = interval_ns;
  h->core = c;
  h->state = H_PENDING;
  h->overdue = overdue; /* lateness measures the wheel, not a deadline past already */
  h->stock = c->stock && !interval_ns;
  Py_INCREF(h); /* the wheel's */
  pw_driver_lock(&c->drv);
  if (soon) {
    set_sub(c, h, PW_TICK_MAX);
    pw_driver_add_locked(&c->drv, &h->node, PW_TICK_MAX);
  } else
    link_locked(c, h);
  pw_driver_unlock(&c->drv);
  c->scheduled++;
  core_unlock(c);
  return (PyObject *)h;
}

PyObject *pw__schedule(WheelObject *self, int64_t when_ns, bool overdue, int64_t interval_ns,
                       PyObject *const *args, Py_ssize_t nargs, PyObject *context_o) {
  return schedule_impl(self, when_ns, overdue, interval_ns, args, nargs, context_o, false);
}

/*
 * A "soon" timer (pywheel.uvloop's timer due when scheduled): a pending
 * handle of this wheel, with its exact deadline, that no collection ever
 * takes -- it is linked on PW_TICK_MAX, where only a deadline of NEVER_NS
 * is otherwise -- and that runs only when the loop's ready queue reaches
 * the entry queued for it (ManualWheel._run_soon), so that it runs in
 * order with the callbacks scheduled around it, as uvloop runs such a
 * timer (a call_soon).  Linked, it stays the wheel's in every other way:
 * cancel, close, len(), the collector's walk, reschedule (which files it
 * at its tick like any other, and makes it an ordinary timer).
 */
PyObject *pw__schedule_soon(WheelObject *self, int64_t when_ns, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *context_o) {
  return schedule_impl(self, when_ns, true, 0, args, nargs, context_o, true);
}

static PyObject *wheel_call_later(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
  PyObject *context;
  int64_t delay;
  if (parse_schedule("call_later", args, nargs, kwnames, NULL, &context) < 0 ||
      pw__seconds_to_ns(args[0], "delay", &delay) < 0)
    return NULL;
  int64_t when;
  if (pw__add_time(core_now_ns(self->core), delay, "delay", &when) < 0)
    return NULL;
  return pw__schedule(self, when, delay <= 0, 0, args, nargs, context);
}

/* call_at's arguments (and _call_soon_at's, under its own name): the
 * deadline and the context, or -1 with the exception set. */
static int parse_call_at(const char *name, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, int64_t *when, PyObject **context) {
  if (parse_schedule(name, args, nargs, kwnames, NULL, context) < 0 ||
      pw__time_to_ns(args[0], "when", when) < 0)
    return -1;
  return 0;
}

static PyObject *wheel_call_at(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
  PyObject *context;
  int64_t when;
  if (parse_call_at("call_at", args, nargs, kwnames, &when, &context) < 0)
    return NULL;
  return pw__schedule(self, when, when < core_now_ns(self->core), 0, args, nargs, context);
}

/* ManualWheel._call_soon_at(when, callback, *args, context=None): call_at's
 * arguments and errors, scheduled as a soon timer (see pw__schedule_soon). */
PyObject *pw__manual_call_soon_at(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
  PyObject *context;
  int64_t when;
  if (parse_call_at("_call_soon_at", args, nargs, kwnames, &when, &context) < 0)
    return NULL;
  return pw__schedule_soon(self, when, args, nargs, context);
}

static PyObject *wheel_call_every(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
  PyObject *context, *first_o;
  int64_t interval, first;
  if (parse_schedule("call_every", args, nargs, kwnames, &first_o, &context) < 0 ||
      pw__seconds_to_ns(args[0], "interval", &interval) < 0)
    return NULL;
  if (interval <= 0 || interval == NEVER_NS) {
    PyErr_SetString(PyExc_ValueError,
                    "interval must be a positive, finite number of seconds (at least 1 ns)");
    return NULL;
  }
  first = interval;
  if (first_o && first_o != Py_None && pw__seconds_to_ns(first_o, "first", &first) < 0)
    return NULL;
  int64_t when = PAST_NS + 1;
  if (first != PAST_NS && pw__add_time(core_now_ns(self->core), first, "first", &when) < 0)
    return NULL;
  return pw__schedule(self, when, first <= 0, interval, args, nargs, context);
}

static PyObject *wheel_time(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  return PyFloat_FromDouble(pw__s_of_ns(core_now_ns(self->core)));
}

static PyObject *wheel_time_ns(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  return PyLong_FromLongLong(core_now_ns(self->core));
}

static Py_ssize_t wheel_len(WheelObject *self) {
  core *c = self->core;
  core_lock(c); /* batch_live: the runner keeps it under this one */
  pw_driver_lock(&c->drv);
  size_t n = pending_locked(c);
  pw_driver_unlock(&c->drv);
  core_unlock(c);
  return (Py_ssize_t)n;
}

static PyObject *wheel_close(WheelObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"timeout", NULL};
  PyObject *timeout_o = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:close", kwlist, &timeout_o))
    return NULL;
  int64_t timeout = -1;
  if (timeout_o != Py_None) {
    if (pw__seconds_to_ns(timeout_o, "timeout", &timeout) < 0) {
      /* A wait, not a deadline: beyond the range means no limit. */
      if (!PyErr_ExceptionMatches(PyExc_OverflowError))
        return NULL;
      PyErr_Clear();
      PyObject *zero = PyLong_FromLong(0);
      int positive = zero ? PyObject_RichCompareBool(timeout_o, zero, Py_GT) : -1;
      Py_XDECREF(zero);
      if (positive < 0)
        return NULL;
      timeout = positive ? NEVER_NS : 0;
    }
    if (timeout < 0)
      timeout = 0;
    if (timeout == NEVER_NS)
      timeout = -1;
  }
  return pw__close_and_wait(self, timeout);
}

static PyObject *wheel_get_closed(WheelObject *self, void *Py_UNUSED(closure)) {
  return PyBool_FromLong(core_closed(self->core));
}

static PyObject *wheel_enter(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  return Py_NewRef(self);
}

static PyObject *wheel_exit(WheelObject *self, PyObject *Py_UNUSED(args)) {
  PyObject *list = pw__close_and_wait(self, -1);
  if (!list)
    return NULL;
  Py_DECREF(list);
  Py_RETURN_FALSE;
}

static PyObject *wheel_set_handler(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  PyObject *handler = pw__one_arg("set_exception_handler", "handler", args, nargs, kwnames);
  if (!handler)
    return NULL;
  if (handler != Py_None && !PyCallable_Check(handler)) {
    PyErr_Format(PyExc_TypeError, "a handler must be callable or None, not %.100s",
                 Py_TYPE(handler)->tp_name);
    return NULL;
  }
  PyObject *old;
  Py_BEGIN_CRITICAL_SECTION(self);
  old = self->handler;
  self->handler = handler == Py_None ? NULL : Py_NewRef(handler);
  Py_END_CRITICAL_SECTION();
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

static PyObject *wheel_get_handler(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  PyObject *h;
  Py_BEGIN_CRITICAL_SECTION(self);
  h = Py_NewRef(self->handler ? self->handler : Py_None);
  Py_END_CRITICAL_SECTION();
  return h;
}

static PyObject *wheel_call_exception_handler(WheelObject *self, PyObject *const *args,
                                              Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *context = pw__one_arg("call_exception_handler", "context", args, nargs, kwnames);
  if (!context)
    return NULL;
  if (!PyDict_Check(context)) {
    PyErr_SetString(PyExc_TypeError, "context must be a dict");
    return NULL;
  }
  pw__call_handler(self, context);
  Py_RETURN_NONE;
}

static PyObject *wheel_default_exception_handler(WheelObject *Py_UNUSED(self),
                                                 PyObject *const *args, Py_ssize_t nargs,
                                                 PyObject *kwnames) {
  PyObject *context = pw__one_arg("default_exception_handler", "context", args, nargs, kwnames);
  if (!context)
    return NULL;
  PyObject *r = pw__default_handler_impl(context);
  if (!r)
    return NULL;
  Py_DECREF(r);
  Py_RETURN_NONE;
}

static PyObject *wheel_stats(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  core *c = self->core;
  /* One moment: every counter read under the lock that every update holds. */
  core_lock(c);
  pw_driver_lock(&c->drv);
  unsigned long long pending = pending_locked(c), wakeups = c->drv.wakeups,
                     batches = c->drv.batches, max_batch = c->drv.max_batch;
  pw_driver_unlock(&c->drv);
  unsigned long long scheduled = c->scheduled, fired = c->fired, cancelled = c->cancelled,
                     errors = c->errors, skipped = c->skipped, rescheduled = c->rescheduled;
  double p50 = pw__late_quantile(c, 0.50), p99 = pw__late_quantile(c, 0.99),
         late_max = (double)c->late_max_ns / 1e9;
  core_unlock(c);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:d,s:d}", "scheduled",
                       scheduled, "fired", fired, "cancelled", cancelled, "pending", pending,
                       "errors", errors, "batches", batches, "wakeups", wakeups, "max_batch",
                       max_batch, "skipped_runs", skipped, "rescheduled", rescheduled, "late_p50",
                       p50, "late_p99", p99, "late_max", late_max, "tick",
                       (double)c->drv.tick_ns / 1e9);
}

static PyObject *wheel_repr(WheelObject *self) {
  core *c = self->core;
  PyObject *tick = PyFloat_FromDouble((double)c->drv.tick_ns / 1e9);
  if (!tick)
    return NULL;
  PyObject *r = PyUnicode_FromFormat("<%s tick=%R pending=%zd%s>", Py_TYPE(self)->tp_name, tick,
                                     wheel_len(self), core_closed(c) ? " closed" : "");
  Py_DECREF(tick);
  return r;
}

/* ------------------------------------------------------------------ */
/* tables                                                              */

#define SCHED_FLAGS (METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef wheel_methods[] = {
    {"call_later", (PyCFunction)(void (*)(void))wheel_call_later, SCHED_FLAGS,
     "call_later($self, delay, callback, /, *args, context=None)\n--\n\nReturns TimerHandle. "
     "Run callback(*args) once, delay seconds from now."},
    {"call_at", (PyCFunction)(void (*)(void))wheel_call_at, SCHED_FLAGS,
     "call_at($self, when, callback, /, *args, context=None)\n--\n\nReturns TimerHandle. "
     "Run callback(*args) once at wheel time `when` (seconds, time()'s clock)."},
    {"call_every", (PyCFunction)(void (*)(void))wheel_call_every, SCHED_FLAGS,
     "call_every($self, interval, callback, /, *args, first=None, context=None)\n--\n\nReturns "
     "TimerHandle. "
     "Run callback(*args) every interval seconds, the first time after `first` seconds "
     "(default: interval).  Fixed rate, no drift; missed runs are skipped and counted."},
    {"time", (PyCFunction)wheel_time, METH_NOARGS,
     "time($self, /)\n--\n\nReturns float. The wheel's clock in seconds (time.monotonic() for "
     "Wheel)."},
    {"time_ns", (PyCFunction)wheel_time_ns, METH_NOARGS,
     "time_ns($self, /)\n--\n\nReturns int. The wheel's clock in nanoseconds."},
    {"close", (PyCFunction)(void (*)(void))wheel_close, METH_VARARGS | METH_KEYWORDS,
     "close($self, /, timeout=None)\n--\n\nReturns list[TimerHandle]. "
     "Cancel every timer not yet started, stop the thread after the running callback "
     "(waiting up to timeout seconds for it) and return the cancelled handles."},
    {"__enter__", (PyCFunction)wheel_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)wheel_exit, METH_VARARGS, NULL},
    {"set_exception_handler", (PyCFunction)(void (*)(void))wheel_set_handler, SCHED_FLAGS,
     "set_exception_handler($self, /, handler)\n--\n\n"
     "handler(wheel, context) receives errors; None restores the default."},
    {"get_exception_handler", (PyCFunction)wheel_get_handler, METH_NOARGS,
     "get_exception_handler($self, /)\n--\n\nReturns the handler, or None for the default one."},
    {"call_exception_handler", (PyCFunction)(void (*)(void))wheel_call_exception_handler,
     SCHED_FLAGS,
     "call_exception_handler($self, /, context)\n--\n\n"
     "Send a context dict to the current exception handler."},
    {"default_exception_handler", (PyCFunction)(void (*)(void))wheel_default_exception_handler,
     SCHED_FLAGS,
     "default_exception_handler($self, /, context)\n--\n\n"
     "Log the context on the 'pywheel' logger."},
    {"stats", (PyCFunction)wheel_stats, METH_NOARGS,
     "stats($self, /)\n--\n\nReturns dict. Counters and lateness percentiles (seconds)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef wheel_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(WheelObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *wheel_get_class(WheelObject *self, void *Py_UNUSED(closure)) {
  return Py_NewRef(Py_TYPE(self));
}

/* A Wheel and a ManualWheel have the same layout, so object.__class__
 * would let one pass for the other: a threaded core driven by hand would
 * fire early and race its own thread.  Only a change within one kind is
 * passed on to object's own __class__ setter. */
static int wheel_set_class(WheelObject *self, PyObject *value, void *Py_UNUSED(closure)) {
  modstate *st = state_of_type(Py_TYPE(self));
  if (!st)
    return -1;
  if (value && PyType_Check(value) &&
      PyType_IsSubtype((PyTypeObject *)value, st->manual_type) != self->core->manual) {
    PyErr_Format(PyExc_TypeError,
                 "__class__ assignment: a %s cannot become a %s (one has a thread, the other "
                 "not)",
                 Py_TYPE(self)->tp_name, ((PyTypeObject *)value)->tp_name);
    return -1;
  }
  PyObject *dict = PyObject_GetAttrString((PyObject *)&PyBaseObject_Type, "__dict__");
  PyObject *descr = dict ? PyMapping_GetItemString(dict, "__class__") : NULL;
  Py_XDECREF(dict);
  if (!descr)
    return -1;
  int r = Py_TYPE(descr)->tp_descr_set(descr, (PyObject *)self, value);
  Py_DECREF(descr);
  return r;
}

static PyGetSetDef wheel_getset[] = {
    {"closed", (getter)wheel_get_closed, NULL, "True once close() was called.", NULL},
    {"__class__", (getter)wheel_get_class, (setter)wheel_set_class, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot wheel_slots[] = {
    {Py_tp_new, wheel_new},
    {Py_tp_dealloc, wheel_dealloc},
    {Py_tp_traverse, wheel_traverse},
    {Py_tp_clear, wheel_clear},
    {Py_tp_finalize, wheel_finalize},
    {Py_tp_repr, wheel_repr},
    {Py_tp_methods, wheel_methods},
    {Py_tp_members, wheel_members},
    {Py_tp_getset, wheel_getset},
    {Py_sq_length, wheel_len},
    {Py_tp_doc, "Wheel(tick=0.001)\n--\n\n"
                "A timing wheel served by its own native thread: callbacks run on that "
                "thread, one GIL acquisition per batch of due timers."},
    {0, NULL},
};

PyType_Spec pw__wheel_spec = {
    .name = "pywheel.Wheel",
    .basicsize = sizeof(WheelObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = wheel_slots,
};
