/*
 * manual.c -- the ManualWheel type: the same core with time moved only by
 * the caller (advance, advance_to, advance_to_next, next_deadline,
 * next_when, collect_due, run_collected, run_due), and its method table and
 * spec (pw__manual_spec).
 *
 * Owns: a manual core's clock (manual_ns), its advancing flag and its
 * current part (part_tick/part_min).  Must not touch: a threaded core's
 * driver thread, the registry.  Batches run through pw__run_batch (batch.c).
 * Ownership and lock order (GIL, then core mutex): module.h.
 */
#include "module.h"

/* ------------------------------------------------------------------ */
/* ManualWheel: the same wheel, with time moved only by the caller      */

/* The core of a ManualWheel, or NULL with TypeError for a threaded one:
 * time that a thread follows cannot also be moved by hand. */
static core *manual_core(WheelObject *self) {
  if (!self->core->manual) {
    PyErr_SetString(PyExc_TypeError, "this wheel has its own thread: only a ManualWheel's "
                                     "time is moved by hand");
    return NULL;
  }
  return self->core;
}

/*
 * Claiming.  Whatever moves a ManualWheel's clock or its set-aside batch
 * (advance*, collect_due, run_collected, run_due, _run_soon) claims the
 * wheel first, under the core's lock, and lets go at the end: a second
 * caller meanwhile -- one of its own callbacks, or, without the GIL,
 * another thread -- is refused with RuntimeError, never interleaved.  A
 * claim is a flag, not a lock: callbacks run while it is held.
 */
static int claim(core *c) {
  core_lock(c);
  unsigned long had = c->advancing;
  if (!had)
    c->advancing = PyThread_get_thread_ident();
  core_unlock(c);
  if (!had)
    return 0;
  PyErr_SetString(PyExc_RuntimeError,
                  "this ManualWheel is already advancing (a ManualWheel cannot be advanced "
                  "from its own callbacks, nor from two threads at once)");
  return -1;
}

/* Lets go of a claim.  A close() while it was held left the set-aside
 * batch to its claimer (see pw__close_core): its references go here. */
static void unclaim(core *c) {
  pw_driver *d = &c->drv;
  core_lock(c);
  size_t from = d->batch_pos, to = d->batch_n;
  bool drop = c->closed && from < to;
  if (drop)
    d->batch_pos = to;
  core_unlock(c);
  for (size_t i = from; drop && i < to; i++)
    Py_DECREF(handle_of(d->batch[i]));
  core_lock(c);
  c->advancing = 0;
  core_unlock(c);
}

/* Whether the claimer may move time to target_ns: forward and finite; if
 * not, lets go of the claim. */
static int check_target(core *c, int64_t target_ns) {
  const char *bad = target_ns == NEVER_NS       ? "cannot advance time to infinity"
                    : target_ns < manual_now(c) ? "time cannot go backwards"
                                                : NULL;
  if (!bad)
    return 0;
  unclaim(c);
  PyErr_SetString(PyExc_ValueError, bad);
  return -1;
}

/* Claims the wheel to move its time to target_ns. */
static int claim_target(core *c, int64_t target_ns) {
  return claim(c) < 0 ? -1 : check_target(c, target_ns);
}

/* Set-aside timers that did not run (collect_due() without run_collected(),
 * or an exception in between) go back to their places before time moves
 * again, so they are neither lost nor overwritten, and still come first.
 * The caller has claimed the wheel. */
static void put_back_leftovers(core *c) {
  core_lock(c);
  bool any = c->drv.batch_pos < c->drv.batch_n;
  c->part_tick = 0;
  core_unlock(c);
  if (any)
    pw__batch_put_back(c);
}

/* Runs the set-aside batch on the caller's thread, which claimed it. */
static Py_ssize_t run_batch_here(WheelObject *self) {
  Py_INCREF(self);
  Py_ssize_t r = pw__run_batch(self->core);
  Py_DECREF(self);
  return r;
}

/* The tick that holds the range's top deadlines but ends past MAX_NS
 * (PW_TICK_MAX if tick_ns divides MAX_NS): a boundary no clock reaches. */
static inline pw_tick_t cut_tick(int64_t tick_ns) {
  return MAX_NS % tick_ns ? (pw_tick_t)(MAX_NS / tick_ns) + 1 : PW_TICK_MAX;
}

static int64_t exact_min_locked(core *c, pw_tick_t tick, bool take, int64_t target);

/* Runs every timer due by target_ns, tick by tick, each batch at its own
 * tick with time() reading that tick; then time becomes target_ns. */
/* The caller claimed the wheel for target_ns; let go of here. */
static PyObject *run_until_claimed(WheelObject *self, int64_t target_ns) {
  core *c = self->core;
  pw_driver *d = &c->drv;
  put_back_leftovers(c);
  pw_tick_t last = pw_tick_floor(target_ns, d->tick_ns);
  Py_ssize_t ran = 0;
  Py_INCREF(self);
  for (;;) {
    core_lock(c);
    pw_driver_lock(d);
    pw_tick_t next = pw_wheel_next(&d->wheel);
    if (!c->closed && next > last && next != PW_TICK_MAX && next == cut_tick(d->tick_ns)) {
      /* The range's last tick ends past its top, where no clock gets:
       * its timers are due at their exact deadlines instead. */
      pw_driver_collect_locked(d, last); /* nothing is due before it: an empty batch */
      exact_min_locked(c, next, true, target_ns);
      bool took = d->batch_n > 0;
      if (took) {
        d->batches++;
        if (d->batch_n > d->max_batch)
          d->max_batch = d->batch_n;
      }
      pw_driver_unlock(d);
      if (!took) {
        core_unlock(c);
        break;
      }
      set_manual_now(c, target_ns);
    } else if (c->closed || next > last) {
      pw_driver_unlock(d);
      core_unlock(c);
      break;
    } else {
      pw_tick_t at = next > d->wheel.now ? next : d->wheel.now;
      pw_driver_collect_locked(d, at);
      pw_driver_unlock(d);
      int64_t at_ns = (int64_t)at * d->tick_ns;
      if (at_ns > manual_now(c))
        set_manual_now(c, at_ns);
    }
    core_unlock(c);
    Py_ssize_t r = pw__run_batch(c);
    if (r < 0) {
      unclaim(c);
      Py_DECREF(self);
      return NULL;
    }
    ran += r;
  }
  core_lock(c);
  set_manual_now(c, target_ns);
  pw_driver_lock(d);
  pw_wheel_advance(&d->wheel, last);
  pw_driver_unlock(d);
  core_unlock(c);
  unclaim(c);
  Py_DECREF(self);
  return PyLong_FromSsize_t(ran);
}

static PyObject *manual_run_until(WheelObject *self, int64_t target_ns) {
  if (claim_target(self->core, target_ns) < 0)
    return NULL;
  return run_until_claimed(self, target_ns);
}

static PyObject *manual_advance(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
  PyObject *arg = pw__one_arg("advance", "seconds", args, nargs, kwnames);
  int64_t delta, target;
  if (!arg || !manual_core(self) || pw__seconds_to_ns(arg, "seconds", &delta) < 0)
    return NULL;
  if (delta < 0) {
    PyErr_SetString(PyExc_ValueError, "time cannot go backwards");
    return NULL;
  }
  /* claimed before the clock is read: another thread's advance in between
   * would make this one's target lie in the past */
  core *c = self->core;
  if (claim(c) < 0)
    return NULL;
  if (pw__add_time(manual_now(c), delta, "seconds", &target) < 0) {
    unclaim(c);
    return NULL;
  }
  return check_target(c, target) < 0 ? NULL : run_until_claimed(self, target);
}

static PyObject *manual_advance_to(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  PyObject *arg = pw__one_arg("advance_to", "when", args, nargs, kwnames);
  int64_t when;
  if (!arg || !manual_core(self) || pw__target_to_ns(arg, "when", true, &when) < 0)
    return NULL;
  return manual_run_until(self, when);
}

/* Wheel time at which the next callback runs: its tick, or now if overdue
 * (set-aside timers wait to run: they are due now). */
static int64_t manual_next_ns(core *c) {
  core_lock(c);
  int64_t now = manual_now(c);
  if (c->drv.batch_live > 0) {
    core_unlock(c);
    return now;
  }
  pw_driver_lock(&c->drv);
  pw_tick_t next = pw_wheel_next(&c->drv.wheel);
  int64_t ns = NEVER_NS;
  if (next != PW_TICK_MAX && next == cut_tick(c->drv.tick_ns))
    ns = exact_min_locked(c, next, false, 0); /* see manual_run_until */
  pw_driver_unlock(&c->drv);
  core_unlock(c);
  if (next == PW_TICK_MAX || next > (pw_tick_t)(MAX_NS / c->drv.tick_ns)) {
    if (ns == NEVER_NS)
      return NEVER_NS;
  } else
    ns = (int64_t)next * c->drv.tick_ns;
  return ns > now ? ns : now;
}

static PyObject *manual_next_deadline(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!manual_core(self))
    return NULL;
  int64_t ns = manual_next_ns(self->core);
  if (ns == NEVER_NS || core_closed(self->core))
    Py_RETURN_NONE;
  return PyFloat_FromDouble(pw__s_of_ns(ns));
}

static PyObject *manual_advance_to_next(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!manual_core(self))
    return NULL;
  core *c = self->core;
  int64_t ns = manual_next_ns(c);
  if (ns == NEVER_NS || core_closed(c))
    return PyLong_FromLong(0);
  if (claim(c) < 0)
    return NULL;
  ns = manual_next_ns(c); /* again, claimed: another thread may have moved it */
  if (ns == NEVER_NS || core_closed(c)) {
    unclaim(c);
    return PyLong_FromLong(0);
  }
  return check_target(c, ns) < 0 ? NULL : run_until_claimed(self, ns);
}

/*
 * Exact deadlines.  The wheel files timers by tick, which is what makes it
 * cheap; an event loop must run a timer when its clock reaches the timer's
 * exact deadline, as asyncio does (when <= time()), not at the next tick
 * boundary.  Every tick up to floor(target) is wholly due; of the one tick
 * that holds target (its ceiling), only the timers whose exact deadline is
 * <= target are, and those are found by scanning that tick's timers.  The
 * scan is skipped while the cached least deadline of that tick (part_min)
 * is later than target, so a loop that iterates many times within one tick
 * pays for a scan only when something there has come due or the cached
 * least timer was cancelled.
 */
struct due_scan {
  pw_driver *d;
  int64_t target, rest_min;
  bool take, full;
};

static int scan_tick(pw_timer *t, void *p) {
  struct due_scan *s = p;
  int64_t when = handle_of(t)->when_ns;
  if (!s->take || when > s->target) {
    if (when < s->rest_min)
      s->rest_min = when;
    return 0;
  }
  pw_wheel_cancel(&s->d->wheel, t);
  if (!pw_driver_batch_append_locked(s->d, t)) {
    pw_wheel_put(&s->d->wheel, t); /* in its place: the next call takes it */
    s->full = true;
    return 1;
  }
  return 0;
}

/* The least exact deadline among tick's linked timers (NEVER_NS if none);
 * with take, those due by target move to the batch first.  Caller holds mu. */
static int64_t exact_min_locked(core *c, pw_tick_t tick, bool take, int64_t target) {
  if (tick == c->part_tick && !(take && c->part_min <= target))
    return c->part_min;
  struct due_scan s = {&c->drv, target, NEVER_NS, take, false};
  pw_wheel_foreach_at(&c->drv.wheel, tick, scan_tick, &s);
  c->part_tick = s.full ? 0 : tick;
  c->part_min = s.rest_min;
  return s.rest_min;
}

/* Moves time to target_ns and sets aside, as the next batch, every timer
 * whose exact deadline is <= target_ns.  The caller claimed the wheel for
 * the target. */
static void collect_exact(core *c, int64_t target_ns) {
  pw_driver *d = &c->drv;
  put_back_leftovers(c);
  core_lock(c);
  set_manual_now(c, target_ns);
  if (c->closed) {
    core_unlock(c);
    return;
  }
  pw_tick_t floor = pw_tick_floor(target_ns, d->tick_ns);
  pw_tick_t ceil = pw_tick_ceil(target_ns, d->tick_ns);
  pw_driver_lock(d);
  size_t n = pw_driver_collect_locked(d, floor);
  if (ceil > floor && pw_wheel_next(&d->wheel) == ceil) {
    exact_min_locked(c, ceil, true, target_ns);
    if (!n && d->batch_n)
      d->batches++;
    if (d->batch_n > d->max_batch)
      d->max_batch = d->batch_n;
  }
  pw_driver_unlock(d);
  core_unlock(c);
}

/* The least exact deadline of the pending timers, or NEVER_NS: overdue ones
 * included, so that equally overdue timers give a loop the same timeout, the
 * stock loop's max(0, when - time()).  The least of the wheel's lies in its
 * earliest tick; set-aside timers that did not run are pending too. */
static int64_t next_when_ns(core *c) {
  core_lock(c);
  int64_t r = NEVER_NS;
  for (size_t i = c->drv.batch_pos; i < c->drv.batch_n; i++)
    if (batch_owns(c->drv.batch[i]) && handle_of(c->drv.batch[i])->when_ns < r)
      r = handle_of(c->drv.batch[i])->when_ns;
  pw_driver *d = &c->drv;
  pw_driver_lock(d);
  pw_tick_t t = pw_wheel_next(&d->wheel);
  int64_t w = NEVER_NS;
  if (t != PW_TICK_MAX && t <= d->wheel.now) {
    /* overdue: on the expired list, scanned without touching the cache */
    struct due_scan s = {d, 0, NEVER_NS, false, false};
    pw_wheel_foreach_at(&d->wheel, t, scan_tick, &s);
    w = s.rest_min;
  } else if (t != PW_TICK_MAX)
    w = exact_min_locked(c, t, false, 0);
  pw_driver_unlock(d);
  core_unlock(c);
  return w < r ? w : r;
}

static PyObject *manual_next_when(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!manual_core(self))
    return NULL;
  int64_t ns = next_when_ns(self->core);
  if (ns == NEVER_NS || core_closed(self->core))
    Py_RETURN_NONE;
  return PyFloat_FromDouble(ns_to_s(ns));
}

/* The target of collect_due and run_due; claims the wheel for it. */
static int parse_target(WheelObject *self, const char *fname, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames, int64_t *when) {
  PyObject *arg = pw__one_arg(fname, "when", args, nargs, kwnames);
  if (!arg || !manual_core(self) || pw__target_to_ns(arg, "when", false, when) < 0)
    return -1;
  return claim_target(self->core, *when);
}

/* collect_exact, and how many timers it set aside (collect_due's result);
 * lets go of the claim. */
static PyObject *collect_and_count(core *c, int64_t target_ns) {
  collect_exact(c, target_ns);
  core_lock(c);
  pw_driver_lock(&c->drv);
  size_t n = c->drv.batch_n - c->drv.batch_pos;
  pw_driver_unlock(&c->drv);
  core_unlock(c);
  unclaim(c);
  return PyLong_FromSize_t(n);
}

static PyObject *manual_collect_due(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
  int64_t when;
  if (parse_target(self, "collect_due", args, nargs, kwnames, &when) < 0)
    return NULL;
  return collect_and_count(self->core, when);
}

/* WheelEventLoop's collection for one iteration whose time() read `now`,
 * with `end` the float below now + the clock's resolution: what
 * collect_due(end) sets aside (time never going back, as collect_due of
 * max(end, time()) does), and also every timer whose deadline was made from
 * a float at most `now`.  The two differ only for a `now` between two
 * readings (a time() a test froze with a mock at a deadline it computed):
 * the stock loop runs a timer at that deadline (when < now + resolution),
 * while its count, the first that reads at least the float, can read past
 * the float below now + 1 ns.  Not a public method: the loop's rule. */
static PyObject *manual_collect_for_loop(WheelObject *self, PyObject *const *args,
                                         Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "_collect_for_loop() takes 2 arguments (%zd given)", nargs);
    return NULL;
  }
  core *c = manual_core(self);
  int64_t target, at;
  if (!c || claim(c) < 0)
    return NULL;
  if (pw__target_to_ns(args[0], "when", false, &target) < 0) {
    unclaim(c);
    return NULL;
  }
  if (pw__float_target_to_ns(pw__s_of_ns(manual_now(c)), false, &at) == 0 && at > target)
    target = at;
  if (PyFloat_Check(args[1])) {
    double now = PyFloat_AS_DOUBLE(args[1]);
    if (isfinite(now) && pw__float_target_to_ns(now, true, &at) == 0 && at > target &&
        at < NEVER_NS)
      target = at;
  }
  return check_target(c, target) < 0 ? NULL : collect_and_count(c, target);
}

static PyObject *manual_stock_handles(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  core_lock(self->core);
  self->core->stock = true;
  core_unlock(self->core);
  Py_RETURN_NONE;
}

static PyObject *manual_run_collected(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!manual_core(self) || claim(self->core) < 0)
    return NULL;
  Py_ssize_t r = run_batch_here(self);
  unclaim(self->core);
  return r < 0 ? NULL : PyLong_FromSsize_t(r);
}

/* The event-loop flavour of advance: time jumps to `when` and every timer
 * whose exact deadline is <= when runs, as one batch, as on a threaded
 * wheel; what those callbacks pw__schedule, even for a time already past, waits
 * for the next call.  A loop calling this once per iteration can never be
 * starved by a timer that keeps rescheduling itself at zero delay. */
static PyObject *manual_run_due(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
  int64_t when;
  if (parse_target(self, "run_due", args, nargs, kwnames, &when) < 0)
    return NULL;
  collect_exact(self->core, when);
  Py_ssize_t r = run_batch_here(self);
  unclaim(self->core);
  return r < 0 ? NULL : PyLong_FromSsize_t(r);
}

/* Runs one soon timer (see pw__schedule_soon), as a batch of its own, if it
 * is still one of this wheel's: pywheel.uvloop queues this call on uvloop's
 * ready queue for each such timer, so the timer runs where uvloop would run
 * it.  Returns how many ran (0: cancelled, moved by reschedule, closed). */
static PyObject *manual_run_soon(WheelObject *self, PyObject *arg) {
  core *c = manual_core(self);
  if (!c)
    return NULL;
  if (!PyObject_TypeCheck(arg, c->htype)) {
    PyErr_Format(PyExc_TypeError, "_run_soon() takes a TimerHandle, not %.100s",
                 Py_TYPE(arg)->tp_name);
    return NULL;
  }
  HandleObject *h = (HandleObject *)arg;
  if (h->core != c) /* (a handle's core never changes) */
    return PyLong_FromLong(0);
  core_lock(c);
  bool pending = h->state == H_PENDING && !c->closed;
  core_unlock(c);
  if (!pending)
    return PyLong_FromLong(0);
  if (claim(c) < 0)
    return NULL;
  put_back_leftovers(c);
  pw_driver *d = &c->drv;
  core_lock(c);
  pw_driver_lock(d);
  if (h->state != H_PENDING || !handle_is_soon_locked(h)) {
    pw_driver_unlock(d);
    core_unlock(c);
    unclaim(c);
    return PyLong_FromLong(0);
  }
  if (d->batch_pos == d->batch_n)
    d->batch_n = d->batch_pos = 0; /* the last batch is spent: reuse the array */
  pw_wheel_cancel(&d->wheel, &h->node);
  if (!pw_driver_batch_append_locked(d, &h->node)) {
    pw_driver_add_locked(d, &h->node, PW_TICK_MAX); /* back where it was */
    pw_driver_unlock(d);
    core_unlock(c);
    unclaim(c);
    return PyErr_NoMemory();
  }
  d->batches++;
  if (d->max_batch < 1)
    d->max_batch = 1;
  pw_driver_unlock(d); /* the wheel's reference is the batch's now */
  core_unlock(c);
  Py_ssize_t r = run_batch_here(self);
  unclaim(c);
  return r < 0 ? NULL : PyLong_FromSsize_t(r);
}

static PyMethodDef manual_methods[] = {
    {"advance", (PyCFunction)(void (*)(void))manual_advance, METH_FASTCALL | METH_KEYWORDS,
     "advance($self, /, seconds)\n--\n\nReturns int. "
     "Move time forward, running every due callback at its own tick; return how many ran."},
    {"advance_to", (PyCFunction)(void (*)(void))manual_advance_to, METH_FASTCALL | METH_KEYWORDS,
     "advance_to($self, /, when)\n--\n\nReturns int. Like advance(), to the absolute time `when`."},
    {"next_deadline", (PyCFunction)manual_next_deadline, METH_NOARGS,
     "next_deadline($self, /)\n--\n\nReturns float | None. "
     "Time at which the next callback runs (its tick), or None if nothing will."},
    {"run_due", (PyCFunction)(void (*)(void))manual_run_due, METH_FASTCALL | METH_KEYWORDS,
     "run_due($self, /, when)\n--\n\nReturns int. "
     "Move time to `when` and run every timer whose exact deadline is <= when, as one batch "
     "(the event-loop flavour of advance_to: what those callbacks schedule waits for the "
     "next call)."},
    {"collect_due", (PyCFunction)(void (*)(void))manual_collect_due, METH_FASTCALL | METH_KEYWORDS,
     "collect_due($self, /, when)\n--\n\nReturns int. "
     "The first half of run_due(): move time to `when` and set aside every timer whose exact "
     "deadline is <= when; return how many are set aside.  cancel() still stops them."},
    {"_collect_for_loop", (PyCFunction)(void (*)(void))manual_collect_for_loop, METH_FASTCALL,
     "_collect_for_loop($self, end, now, /)\n--\n\nReturns int. "
     "For event loops: collect_due(max(end, time())), and every timer whose deadline was made "
     "from a float at most `now` (a time() read between two nanoseconds)."},
    {"_call_soon_at", (PyCFunction)(void (*)(void))pw__manual_call_soon_at,
     METH_FASTCALL | METH_KEYWORDS,
     "_call_soon_at($self, when, callback, /, *args, context=None)\n--\n\n"
     "call_at for a timer due already that runs only from _run_soon (pywheel.uvloop)."},
    {"_run_soon", (PyCFunction)manual_run_soon, METH_O,
     "_run_soon($self, handle, /)\n--\n\nReturns int. "
     "Run one timer of _call_soon_at's now, if it is still pending there."},
    {"_stock_handles", (PyCFunction)manual_stock_handles, METH_NOARGS,
     "For event loops: handles scheduled from now on behave as asyncio.TimerHandle "
     "(cancel() returns None, cancelled() after a late cancel(), == and hash)."},
    {"run_collected", (PyCFunction)manual_run_collected, METH_NOARGS,
     "run_collected($self, /)\n--\n\nReturns int. "
     "The second half of run_due(): run the timers collect_due() set aside, in deadline "
     "order; return how many ran."},
    {"next_when", (PyCFunction)manual_next_when, METH_NOARGS,
     "next_when($self, /)\n--\n\nReturns float | None. "
     "Exact deadline (when()) of the next timer to run, or None if nothing will; at most "
     "time() for a timer already due."},
    {"advance_to_next", (PyCFunction)manual_advance_to_next, METH_NOARGS,
     "advance_to_next($self, /)\n--\n\nReturns int. Jump to next_deadline() and run what is due "
     "there."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot manual_slots[] = {
    {Py_tp_new, pw__manual_new},
    {Py_tp_methods, manual_methods},
    {Py_tp_doc, "ManualWheel(tick=0.001, *, start=0.0)\n--\n\n"
                "The same wheel without a thread: time moves only through advance() and "
                "advance_to(), which run due callbacks on the caller's thread."},
    {0, NULL},
};

PyType_Spec pw__manual_spec = {
    .name = "pywheel.ManualWheel",
    .basicsize = sizeof(WheelObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, /* GC and traverse: inherited */
    .slots = manual_slots,
};
