/*
 * batch.c -- running a batch with the GIL held (pw__run_batch: invoke each
 * due callback, re-arm repeating timers, record lateness, put back what a
 * stop left), and the wheel thread's hooks (see driver.h) that take the GIL
 * and call it.
 *
 * Owns: the batch between its collection and its end (drv.batch_pos,
 * batch_live), and pw__thread_core.  Must not touch: the registry, the
 * fork flags, a WheelObject's own fields beyond reading its handler.
 * Ownership and lock order (GIL, then core mutex; the thread never holds
 * the mutex while it takes the GIL): module.h.
 */
#include "module.h"

/* ------------------------------------------------------------------ */
/* running a batch (GIL held)                                          */

static int cmp_order(const HandleObject *x, const HandleObject *y) {
  if (x->when_ns != y->when_ns)
    return x->when_ns < y->when_ns ? -1 : 1;
  return x->node.seq < y->node.seq ? -1 : (x->node.seq > y->node.seq);
}

/* qsort comparators: exact deadline, then scheduling order. */
static int cmp_exact(const void *a, const void *b) {
  return cmp_order(handle_of(*(pw_timer *const *)a), handle_of(*(pw_timer *const *)b));
}

int pw__cmp_handles(const void *a, const void *b) {
  return cmp_order(*(HandleObject *const *)a, *(HandleObject *const *)b);
}

/* The wheel hands timers out in (tick, seq) order; within one tick the
 * contract is exact-deadline order.  Each tick's run is checked in one pass
 * and sorted only if it is out of order. */
/* Handles of a large batch are cold: fetch a few ahead of each pass. */
#define PREFETCH_AHEAD 8

static void sort_exact(pw_timer **b, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t j = i + 1;
    bool sorted = true;
    while (j < n && b[j]->deadline == b[i]->deadline) {
      if (j + PREFETCH_AHEAD < n)
        PW_PREFETCH(b[j + PREFETCH_AHEAD]);
      if (sorted && cmp_exact(&b[j - 1], &b[j]) > 0)
        sorted = false;
      j++;
    }
    if (!sorted)
      qsort(b + i, j - i, sizeof *b, cmp_exact);
    i = j;
  }
}

static int empty_ctx_enter(core *c) {
  if (!c->empty_ctx && !(c->empty_ctx = PyContext_New()))
    return -1;
  return PyContext_Enter(c->empty_ctx);
}

static void empty_ctx_exit(core *c) {
  if (PyContext_Exit(c->empty_ctx) < 0)
    PyErr_WriteUnraisable(c->empty_ctx);
}

/* Runs one callback in its context.  Returns its result or NULL.  A
 * callback without a context runs in the batch's empty context (entered
 * while *isolated); if it set a variable there, the next one gets a fresh
 * empty context, as if each had its own copy (asyncio's semantics). */
static PyObject *invoke(core *c, PyObject *cb, PyObject *args, PyObject *ctx, bool *isolated) {
  PyObject *const *argv = args ? &PyTuple_GET_ITEM(args, 0) : NULL;
  size_t argc = args ? (size_t)PyTuple_GET_SIZE(args) : 0;
  if (!ctx) {
    PyObject *r = PyObject_Vectorcall(cb, argv, argc, NULL);
    if (*isolated) {
      PyObject *exc = r ? NULL : pw__fetch_exc();
      Py_ssize_t n = PyObject_Length(c->empty_ctx);
      if (n < 0)
        PyErr_Clear();
      if (n != 0) {
        empty_ctx_exit(c);
        Py_CLEAR(c->empty_ctx);
        if (empty_ctx_enter(c) < 0) {
          PyErr_WriteUnraisable(NULL);
          *isolated = false; /* nothing entered: nothing to exit at the end */
        }
      }
      if (exc)
        pw__restore_exc(exc);
    }
    return r;
  }
  if (PyContext_Enter(ctx) < 0)
    return NULL;
  PyObject *r = PyObject_Vectorcall(cb, argv, argc, NULL);
  PyObject *exc = r ? NULL : pw__fetch_exc();
  if (PyContext_Exit(ctx) < 0)
    PyErr_WriteUnraisable(ctx);
  if (exc)
    pw__restore_exc(exc);
  return r;
}

/* Re-arms repeating handle h on the next first + k*interval strictly after
 * now; the runs in between were missed (the process stalled) and are
 * counted, not replayed.  The batch's reference passes to the wheel.
 * Caller holds the core's lock. */
static void rearm_locked(core *c, HandleObject *h) {
  int64_t now = core_now_ns(c), when = h->when_ns, next;
  if (when <= PAST_NS + 1)
    when = now; /* first=-inf: no anchor worth keeping; count no skipped runs */
  /* next = when + k * interval for the least k >= 1 that passes now, in
   * 64-bit unsigned arithmetic (no 128-bit integers in MSVC): past now,
   * k - 1 = (now - when) / interval runs were missed and next is now plus
   * what is left of the current interval; NEVER_NS where it overflows. */
  uint64_t iv = (uint64_t)h->interval_ns, missed = 0, base = (uint64_t)when, step = iv;
  if (now >= when) {
    uint64_t since = (uint64_t)now - (uint64_t)when;
    missed = since / iv;
    base = (uint64_t)now;
    step = iv - since % iv; /* 1..iv */
  }
  next = step >= (uint64_t)NEVER_NS - base ? NEVER_NS : (int64_t)(base + step);
  c->skipped += missed;
  h->when_ns = next;
  h->overdue = false;
  pw_driver_lock(&c->drv);
  link_locked(c, h);
  pw_driver_unlock(&c->drv);
  c->scheduled++;
}

static void record_lateness(core *c, int64_t now, int64_t when) {
  if (when == PAST_NS || now < when)
    return;
  uint64_t late = (uint64_t)now - (uint64_t)when; /* no signed overflow */
  c->late[late_bucket(late)]++;
  c->late_n++;
  if (late > c->late_max_ns)
    c->late_max_ns = late;
}

/* Puts a batch's unstarted handles back in the wheel, in their places: for
 * a ManualWheel whose callback raised KeyboardInterrupt, or whose advancing
 * thread vanished in a fork.  The batch's reference to a cancelled one is
 * dropped once nothing of the batch is read any more (a __del__ could cancel
 * a handle just put back). */
void pw__batch_put_back(core *c) {
  pw_driver *d = &c->drv;
  core_lock(c);
  size_t from = d->batch_pos, to = d->batch_n;
  pw_driver_lock(d);
  for (size_t i = from; i < to; i++) {
    if (batch_owns(d->batch[i])) {
      pw_wheel_put(&d->wheel, d->batch[i]);
      d->batch[i] = NULL;
    }
  }
  d->batch_pos = to;
  d->batch_live = 0;
  c->part_tick = 0; /* the tick caches do not know of what came back */
  pw_driver_unlock(d);
  core_unlock(c);
  /* (only the runner, who calls this, rewrites the batch) */
  for (size_t i = from; i < to; i++)
    if (d->batch[i])
      Py_DECREF(handle_of(d->batch[i]));
}

/* Runs d->batch[batch_pos..batch_n) in exact deadline order.  Returns how
 * many callbacks started.  On a ManualWheel a callback raising something
 * that is not an Exception (KeyboardInterrupt, SystemExit) ends the batch:
 * the rest go back to the wheel in their places, and -1 is returned with
 * that exception set.  Everywhere else every error goes to the handler. */
/* Drops from the unstarted batch the entries moved since it was collected
 * (linked again by reschedule): their deadline is no longer the one they
 * were collected by, which the order check below groups on.  The wheel
 * holds its own reference to each, so dropping the batch's frees nothing. */
static void drop_moved(pw_driver *d) {
  pw_driver_lock(d);
  size_t k = d->batch_pos;
  for (size_t i = d->batch_pos; i < d->batch_n; i++) {
    if (pw_timer_linked(d->batch[i]))
      Py_DECREF(handle_of(d->batch[i]));
    else
      d->batch[k++] = d->batch[i];
  }
  d->batch_n = k;
  pw_driver_unlock(d);
}

/*
 * Without the GIL the lock is held from one point where Python code can run
 * to the next: taking an entry, and deciding about it after its run.
 * Others change the batch meanwhile only under the same lock (cancel,
 * reschedule, close), as they would between two bytecodes with the GIL.
 */
Py_ssize_t pw__run_batch(core *c) {
  pw_driver *d = &c->drv;
  core_lock(c);
  drop_moved(d);
  sort_exact(d->batch + d->batch_pos, d->batch_n - d->batch_pos);
  int64_t now = core_now_ns(c);
  WheelObject *owner = owner_ref_locked(c);
  core_unlock(c);
  bool isolated = empty_ctx_enter(c) == 0;
  if (!isolated)
    PyErr_WriteUnraisable(NULL);
  Py_ssize_t ran = 0;
  PyObject *fatal = NULL;
  for (;;) {
    core_lock(c);
    if (d->batch_pos >= d->batch_n) {
      core_unlock(c);
      break;
    }
    if (d->batch_pos + PREFETCH_AHEAD < d->batch_n) {
      HandleObject *ahead = handle_of(d->batch[d->batch_pos + PREFETCH_AHEAD]);
      PW_PREFETCH(ahead);
      PW_PREFETCH(handle_word(ahead, REF_CALLBACK));
    }
    HandleObject *h = handle_of(d->batch[d->batch_pos++]);
    if (!batch_owns(&h->node)) { /* cancelled, or moved */
      core_unlock(c);
      Py_DECREF(h);
      continue;
    }
    d->batch_live--;
    if (!h->overdue)
      record_lateness(c, now, h->when_ns);
    c->fired++;
    ran++;
    PyObject *cb, *args, *ctx;
    if (!h->interval_ns) {
      h->state = H_DONE; /* its references are ours now: released after the call */
      handle_take_refs(h, &cb, &args, &ctx);
    } else {
      cb = Py_NewRef(handle_callback(h));
      args = Py_XNewRef(handle_args(h));
      ctx = Py_XNewRef(handle_context(h));
    }
    /* `running` stays set through everything that can run Python code
     * (the handler, the releases), so a close() or cancel() meanwhile
     * still finds the handle; the re-arm decision comes after all of it. */
    c->running = h;
    core_unlock(c);
    PyObject *r = invoke(c, cb, args, ctx, &isolated);
    if (r)
      Py_DECREF(r);
    else if (c->manual && !PyErr_ExceptionMatches(PyExc_Exception))
      fatal = pw__fetch_exc();
    else
      pw__report_callback_error(c, owner, h);
    Py_DECREF(cb);
    Py_XDECREF(args);
    Py_XDECREF(ctx);
    core_lock(c);
    /* (a repeating timer moved by its own callback is linked already) */
    bool again = h->interval_ns && !c->closed && batch_owns(&h->node);
    c->running = NULL;
    if (again)
      rearm_locked(c, h);
    core_unlock(c);
    if (!again)
      Py_DECREF(h);
    if (fatal)
      break;
  }
  if (fatal)
    pw__batch_put_back(c);
  if (isolated)
    empty_ctx_exit(c);
  Py_XDECREF(owner);
  if (fatal) {
    pw__restore_exc(fatal);
    return -1;
  }
  return ran;
}

/* ------------------------------------------------------------------ */
/* the wheel thread's hooks (see driver.h)                             */

/* The core whose thread this is, on every wheel thread; NULL elsewhere. */
PW_THREAD_LOCAL core *pw__thread_core;

#if PY_VERSION_HEX < 0x030C0000
/* 3.11's PyThreadState_New does not check its allocation: when memory runs
 * out it dereferences NULL.  The threading module's own threads take these
 * two steps instead, which a caller can check; the second is exported but
 * declared only in 3.11's internal headers. */
PyAPI_FUNC(void) _PyThreadState_SetCurrent(PyThreadState *tstate);

static PyThreadState *new_thread_state(PyInterpreterState *interp) {
  PyThreadState *ts = _PyThreadState_Prealloc(interp); /* bound to this thread */
  if (ts)
    _PyThreadState_SetCurrent(ts);
  return ts;
}
#else
static PyThreadState *new_thread_state(PyInterpreterState *interp) {
  return PyThreadState_New(interp); /* checks its allocation since 3.12 */
}
#endif

void pw__hook_start(pw_driver *d, void *arg) {
  core *c = arg;
  pw__thread_core = c;
  /* One thread state for the thread's whole life; creating it needs no GIL.
   * Made here, so that it is bound to this OS thread.  The constructor
   * waits for the answer, so that a failure is its MemoryError. */
  PyThreadState *ts = new_thread_state(c->interp);
  pw_driver_lock(d);
  c->tstate = ts;
  c->thread_state_made = ts ? 1 : -1;
  pw_cond_broadcast(&d->exit_cv);
  pw_driver_unlock(d);
}

void pw__hook_run(pw_driver *d, void *arg) {
  core *c = arg;
  /* Once finalization may have begun the thread never takes the GIL: the
   * batch's references are abandoned with the dying interpreter. */
  if (!c->tstate || pw_is_finalizing()) {
    pw_driver_stop(d);
    return;
  }
  /* Takes the GIL; without one, attaches: the callbacks then run in
   * parallel with the program's threads (module.h). */
  PyEval_RestoreThread(c->tstate);
  pw__run_batch(c);
  /* The rest of a large expiry, part by part, without giving up the GIL in
   * between: taking the mutex under the GIL is the allowed order. */
  while (!core_closed(c) && !pw_is_finalizing() && pw_driver_collect_rest(d))
    pw__run_batch(c);
  PyEval_SaveThread();
}

void pw__hook_stop(pw_driver *Py_UNUSED(d), void *arg) {
  core *c = arg;
  if (!c->tstate || pw_is_finalizing())
    return;
  PyEval_RestoreThread(c->tstate);
  Py_CLEAR(c->empty_ctx);
  PyThreadState_Clear(c->tstate);
  c->tstate = NULL;
  PyThreadState_DeleteCurrent();
}

void pw__hook_exit(pw_driver *Py_UNUSED(d), void *arg) { pw__core_decref(arg); }
