/*
 * handle.c -- TimerHandle: cancel(), reschedule(), reschedule_later(),
 * when(), cancelled(), get_context(), interval, repr, hash and equality, and
 * the handle type's spec (pw__handle_spec).
 *
 * Owns: a handle's fields once it is no longer pending, and the moves of a
 * pending one (cancel, reschedule) under its core's mutex.  Must not touch:
 * a batch in progress (batch.c decides what runs), the registry, the
 * module's state.  Ownership and lock order (GIL, then core mutex): module.h.
 */
#include "module.h"

/* ------------------------------------------------------------------ */
/* TimerHandle                                                         */

static void handle_free(void *h) { pw_slab_free(h); }

static void handle_dealloc(HandleObject *h) {
  PyTypeObject *tp = Py_TYPE(h);
#ifdef PW_FREE_THREADED
  /* Any thread may drop the last reference: the words and the slot are
   * the core's to change, under its lock; the core is ours till the end. */
  core *c = h->core;
  PyObject *cb, *args, *ctx;
  core_lock(c);
  handle_take_refs(h, &cb, &args, &ctx);
  tp->tp_free(h);
  core_unlock(c);
  Py_XDECREF(cb);
  Py_XDECREF(args);
  Py_XDECREF(ctx);
  pw__core_decref(c);
#else
  handle_release(h->core, h);
  tp->tp_free(h);
#endif
  Py_DECREF(tp);
}

/* A handle's deadline and state, read as one moment of its life. */
static int64_t handle_when_ns(HandleObject *h) {
  core_lock(h->core);
  int64_t ns = h->when_ns;
  core_unlock(h->core);
  return ns;
}

static int handle_state(HandleObject *h) {
  core_lock(h->core);
  int st = h->state;
  core_unlock(h->core);
  return st;
}

/*
 * An event loop's handle (h->stock) keeps asyncio.TimerHandle's contract,
 * which code written for the stock loop checks: cancel() returns None, and
 * cancelled() is True once cancel() was called, even after the callback ran
 * (or while it runs).  A Wheel's keeps the contract in DESIGN.md: True if
 * this call stopped a future run, and cancelled() only then.  Either costs
 * nothing per timer: the flag sits in the timer node's spare bytes.
 */
static PyObject *cancel_result(HandleObject *h, bool stopped) {
  if (h->stock)
    Py_RETURN_NONE;
  return PyBool_FromLong(stopped);
}

static PyObject *handle_cancel(HandleObject *h, PyObject *Py_UNUSED(ignored)) {
  core *c = h->core; /* (on a build with the GIL, valid only while pending) */
  core_lock(c);
  if (h->state != H_PENDING) {
    if (h->stock)
      h->state = H_CANCELLED; /* ran: nothing is counted, nothing to release */
    core_unlock(c);
    return cancel_result(h, false);
  }
  pw_driver_lock(&c->drv);
  bool linked = pw_wheel_cancel(&c->drv.wheel, &h->node);
  if (linked && h->node.deadline == c->part_tick && h->when_ns == c->part_min)
    c->part_tick = 0; /* the cached least deadline of that tick is gone */
  if (!linked && c->running != h)
    c->drv.batch_live--; /* pending, unlinked, not running: a batch entry */
  pw_driver_unlock(&c->drv);
  h->state = H_CANCELLED;
  /* `cancelled` counts schedulings that never ran; a repeating timer
   * cancelled from its own callback has none pending (its run counted as
   * fired), so that scheduled == fired + cancelled + pending holds. */
  if (c->running != h || linked) /* linked: a run moved by its own callback */
    c->cancelled++;
  PyObject *cb, *args, *ctx;
  handle_take_refs(h, &cb, &args, &ctx);
  core_unlock(c);
  bool stock = h->stock;
  if (linked)
    Py_DECREF(h); /* the wheel's reference; the caller still holds one */
  Py_XDECREF(cb); /* may run __del__ code: nothing of ours is read after */
  Py_XDECREF(args);
  Py_XDECREF(ctx);
  if (stock)
    Py_RETURN_NONE;
  Py_RETURN_TRUE;
}

/*
 * Moving a deadline: the wheel gives the timer its new tick and a fresh
 * sequence number (a moved timer takes a new place among equal deadlines, as
 * a new scheduling would), no allocation; a later deadline is only recorded
 * (pw_wheel_move).  A pending handle that is not linked is
 * in a batch that has not reached it yet (or is the repeating one running
 * now): it is linked again with a reference of the wheel's own, and the
 * batch, which keeps its reference, skips an entry that is linked again
 * (batch_owns() says which entries are still the batch's; wheel_traverse
 * and pw__close_core, which meet them in the wheel first, skip the others).
 */
/* `when_ns` is the deadline, or, with `delay`, the delay from now (read
 * here, under the lock that orders it with a ManualWheel's advance). */
static PyObject *handle_move(HandleObject *h, int64_t when_ns, bool delay) {
  core *c = h->core;
  core_lock(c);
  if (h->state != H_PENDING || core_closed(c)) {
    core_unlock(c);
    Py_RETURN_FALSE;
  }
  int64_t now = core_now_ns(c);
  bool overdue = when_ns < now;
  if (delay) {
    overdue = when_ns <= 0;
    if (pw__add_time(now, when_ns, "delay", &when_ns) < 0) {
      core_unlock(c); /* (the error is only a message: no Python code ran) */
      return NULL;
    }
  }
  pw_driver *d = &c->drv;
  pw_driver_lock(d);
  bool linked = pw_timer_linked(&h->node);
  if (linked && h->node.deadline == c->part_tick && h->when_ns == c->part_min)
    c->part_tick = 0;
  if (!linked && h != c->running)
    d->batch_live--; /* a batch entry: the wheel's again */
  h->when_ns = when_ns;
  h->overdue = overdue;
  link_locked(c, h); /* moved if linked: later is O(1), the handle alone */
  pw_driver_unlock(d);
  if (!linked)
    Py_INCREF(h); /* the wheel's; the batch keeps its own */
  /* The repeating timer whose run this is already counted that run as
   * fired: where it goes now is its next scheduling. */
  if (!linked && h == c->running)
    c->scheduled++;
  c->rescheduled++;
  core_unlock(c);
  Py_RETURN_TRUE;
}

static PyObject *handle_reschedule(HandleObject *h, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  PyObject *arg = pw__one_arg("reschedule", "when", args, nargs, kwnames);
  int64_t when;
  if (!arg || pw__time_to_ns(arg, "when", &when) < 0)
    return NULL;
  return handle_move(h, when, false); /* the state is looked at after the conversion ran */
}

static PyObject *handle_reschedule_later(HandleObject *h, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames) {
  PyObject *arg = pw__one_arg("reschedule_later", "delay", args, nargs, kwnames);
  int64_t delay;
  if (!arg || pw__seconds_to_ns(arg, "delay", &delay) < 0)
    return NULL;
  return handle_move(h, delay, true);
}

static PyObject *handle_cancelled(HandleObject *h, PyObject *Py_UNUSED(ignored)) {
  return PyBool_FromLong(handle_state(h) == H_CANCELLED);
}

static PyObject *handle_when(HandleObject *h, PyObject *Py_UNUSED(ignored)) {
  return PyFloat_FromDouble(ns_to_s(handle_when_ns(h)));
}

static PyObject *handle_get_context(HandleObject *h, PyObject *Py_UNUSED(ignored)) {
  /* NULL stands for an empty context (see capture_context): a new empty one
   * is indistinguishable from a copy of it. */
  core_lock(h->core);
  PyObject *ctx = Py_XNewRef(handle_context(h));
  core_unlock(h->core);
  return ctx ? ctx : PyContext_New();
}

static PyObject *handle_get_interval(HandleObject *h, void *Py_UNUSED(closure)) {
  if (!h->interval_ns)
    Py_RETURN_NONE;
  return PyFloat_FromDouble((double)h->interval_ns / 1e9);
}

static PyObject *handle_repr(HandleObject *h) {
  static const char *names[] = {"pending", "done", "cancelled"};
  /* held: its __repr__ may cancel the handle, which lets go of it */
  core_lock(h->core);
  PyObject *r, *cb = Py_XNewRef(handle_callback(h));
  int64_t when_ns = h->when_ns;
  const char *state = names[h->state];
  core_unlock(h->core);
  PyObject *when = PyFloat_FromDouble(ns_to_s(when_ns));
  if (!when) {
    Py_XDECREF(cb);
    return NULL;
  }
  if (cb && h->interval_ns) {
    PyObject *interval = handle_get_interval(h, NULL);
    r = interval ? PyUnicode_FromFormat("<%s %s when=%R interval=%R callback=%R>",
                                        Py_TYPE(h)->tp_name, state, when, interval, cb)
                 : NULL;
    Py_XDECREF(interval);
  } else if (cb)
    r = PyUnicode_FromFormat("<%s %s when=%R callback=%R>", Py_TYPE(h)->tp_name, state, when, cb);
  else
    r = PyUnicode_FromFormat("<%s %s when=%R>", Py_TYPE(h)->tp_name, state, when);
  Py_XDECREF(cb);
  Py_DECREF(when);
  return r;
}

/*
 * Comparisons are asyncio.TimerHandle's: <, <=, >, >= by deadline (<= and
 * >= also when equal), so that handles sort as the stock loop's do.  Two
 * event-loop handles are == when asyncio's would be (deadline, callback,
 * arguments and cancelled() equal; a handle that ran or was cancelled has
 * let go of its callback) and hash by deadline as asyncio's do; a Wheel's
 * handle is equal only to itself and hashes by identity, because
 * reschedule() moves its deadline while it may sit in a set.
 */
static PyObject *handle_richcompare(PyObject *a, PyObject *b, int op);

static Py_hash_t handle_hash(HandleObject *h) {
  if (!h->stock)
    return PyBaseObject_Type.tp_hash((PyObject *)h);
  PyObject *when = PyFloat_FromDouble(ns_to_s(handle_when_ns(h)));
  if (!when)
    return -1;
  Py_hash_t r = PyObject_Hash(when);
  Py_DECREF(when);
  return r;
}

static PyMethodDef handle_methods[] = {
    {"cancel", (PyCFunction)handle_cancel, METH_NOARGS,
     "cancel($self, /)\n--\n\nReturns bool. Stop the timer. True if this call stopped a future "
     "run (an event loop's handle returns None, as asyncio.TimerHandle does)."},
    {"cancelled", (PyCFunction)handle_cancelled, METH_NOARGS,
     "cancelled($self, /)\n--\n\nReturns bool. True once cancel() succeeded or the wheel was "
     "closed (an event loop's handle: once cancel() was called, as asyncio's)."},
    {"reschedule", (PyCFunction)(void (*)(void))handle_reschedule, METH_FASTCALL | METH_KEYWORDS,
     "reschedule($self, /, when)\n--\n\nReturns bool. Move the deadline to `when` (wheel "
     "clock seconds): True if a pending timer moved, False if it already started, ran, was "
     "cancelled or its wheel closed.  O(1), no new handle; it takes a new place among equal "
     "deadlines, as a new scheduling would."},
    {"reschedule_later", (PyCFunction)(void (*)(void))handle_reschedule_later,
     METH_FASTCALL | METH_KEYWORDS,
     "reschedule_later($self, /, delay)\n--\n\nReturns bool. reschedule(time() + delay)."},
    {"get_context", (PyCFunction)handle_get_context, METH_NOARGS,
     "get_context($self, /)\n--\n\nReturns contextvars.Context. The context the callback runs in."},
    {"when", (PyCFunction)handle_when, METH_NOARGS,
     "when($self, /)\n--\n\nReturns float. Exact deadline of the next (or last) run, wheel clock "
     "seconds."},
    {NULL, NULL, 0, NULL},
};

static PyObject *handle_get_when(HandleObject *h, void *Py_UNUSED(closure)) {
  return handle_when(h, NULL);
}

static PyGetSetDef handle_getset[] = {
    {"interval", (getter)handle_get_interval, NULL, "Repeat interval in seconds, or None.", NULL},
    /* asyncio.TimerHandle keeps its deadline in _when, and code that
     * inspects asyncio's handles (aiohttp's tests among them) reads it. */
    {"_when", (getter)handle_get_when, NULL, "when(), as asyncio.TimerHandle._when.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot handle_slots[] = {
    {Py_tp_dealloc, handle_dealloc},
    {Py_tp_richcompare, handle_richcompare},
    {Py_tp_hash, handle_hash},
    {Py_tp_free, handle_free},
    {Py_tp_repr, handle_repr},
    {Py_tp_methods, handle_methods},
    {Py_tp_getset, handle_getset},
    {Py_tp_doc, "A scheduled callback; returned by Wheel.call_later() and friends."},
    {0, NULL},
};

PyType_Spec pw__handle_spec = {
    .name = "pywheel.TimerHandle",
    .basicsize = sizeof(HandleObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = handle_slots,
};

/* Whether both may be compared as objects that may be NULL (None). */
static int equal_or_null(PyObject *x, PyObject *y) {
  if (!x || !y)
    return x == y;
  return PyObject_RichCompareBool(x, y, Py_EQ);
}

static int handle_equal(HandleObject *x, HandleObject *y) {
  if (x == y)
    return 1;
  if (!x->stock || !y->stock)
    return 0;
  /* the comparisons run Python code: hold what they read; one lock at a
   * time (two handles may belong to two wheels) */
  core_lock(x->core);
  int64_t xw = x->when_ns;
  bool xcan = x->state == H_CANCELLED;
  PyObject *xc = Py_XNewRef(handle_callback(x)), *xa = Py_XNewRef(handle_args(x));
  core_unlock(x->core);
  core_lock(y->core);
  int64_t yw = y->when_ns;
  bool ycan = y->state == H_CANCELLED;
  PyObject *yc = Py_XNewRef(handle_callback(y)), *ya = Py_XNewRef(handle_args(y));
  core_unlock(y->core);
  if (xw != yw || xcan != ycan) {
    Py_XDECREF(xc);
    Py_XDECREF(yc);
    Py_XDECREF(xa);
    Py_XDECREF(ya);
    return 0;
  }
  int r = equal_or_null(xc, yc);
  if (r > 0)
    r = equal_or_null(xa, ya);
  Py_XDECREF(xc);
  Py_XDECREF(yc);
  Py_XDECREF(xa);
  Py_XDECREF(ya);
  return r;
}

static PyObject *handle_richcompare(PyObject *a, PyObject *b, int op) {
  PyTypeObject *tp = Py_TYPE(a);
  if (!PyObject_TypeCheck(b, tp) && !PyObject_TypeCheck(a, Py_TYPE(b)))
    Py_RETURN_NOTIMPLEMENTED;
  HandleObject *x = (HandleObject *)a, *y = (HandleObject *)b;
  int r;
  int64_t xw = op == Py_EQ || op == Py_NE ? 0 : handle_when_ns(x);
  int64_t yw = op == Py_EQ || op == Py_NE ? 0 : handle_when_ns(y);
  switch (op) {
  case Py_LT:
    return PyBool_FromLong(xw < yw);
  case Py_GT:
    return PyBool_FromLong(xw > yw);
  case Py_LE:
  case Py_GE:
    if (op == Py_LE ? xw < yw : xw > yw)
      Py_RETURN_TRUE;
    PW_FALLTHROUGH; /* or equal */
  case Py_EQ:
    r = handle_equal(x, y);
    return r < 0 ? NULL : PyBool_FromLong(r);
  default: /* Py_NE */
    r = handle_equal(x, y);
    return r < 0 ? NULL : PyBool_FromLong(!r);
  }
}
