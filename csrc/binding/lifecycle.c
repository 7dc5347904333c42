/*
 * lifecycle.c -- a core's life: the process-wide registry of live cores,
 * creation (pw__core_new), closing (pw__close_core: cancel every pending
 * handle), waiting for a wheel's thread to leave (pw__close_and_wait), and
 * the process hooks: atexit (pw__mod_shutdown) and fork (atfork handlers,
 * pw__mod_after_fork_child).
 *
 * Owns: the registry and its mutex, wait_mu, the fork flags, a core's
 * reference count.  Must not touch: a handle's callback while it may run
 * (batch.c), the Python-visible types.  Ownership and lock order (GIL, then
 * core mutex; registry_mu and wait_mu are leaves): module.h.
 */
#include "module.h"

/* ------------------------------------------------------------------ */
/* the registry of live cores: process-wide, because atexit and fork are */

static pw_mutex registry_mu = PW_MUTEX_INIT;
static core registry = {.reg_next = &registry, .reg_prev = &registry};

static void core_register(core *c) {
  pw_mutex_lock(&registry_mu);
  c->reg_next = &registry;
  c->reg_prev = registry.reg_prev;
  registry.reg_prev->reg_next = c;
  registry.reg_prev = c;
  pw_mutex_unlock(&registry_mu);
}

void pw__core_decref(core *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1)
    return;
  pw_mutex_lock(&registry_mu);
  c->reg_prev->reg_next = c->reg_next;
  c->reg_next->reg_prev = c->reg_prev;
  pw_mutex_unlock(&registry_mu);
  pw_driver_fini(&c->drv);
  PyMem_RawFree(c);
}

/* Takes a reference to every live core.  Returns a PyMem_Raw array, NULL
 * terminated, or NULL with MemoryError. */
static core **registry_snapshot(void) {
  pw_mutex_lock(&registry_mu);
  size_t n = 0;
  for (core *c = registry.reg_next; c != &registry; c = c->reg_next)
    n++;
  core **all = PyMem_RawMalloc((n + 1) * sizeof *all);
  if (all) {
    size_t k = 0;
    for (core *c = registry.reg_next; c != &registry; c = c->reg_next) {
      int r = atomic_load(&c->refs);
      while (r > 0 && !atomic_compare_exchange_weak(&c->refs, &r, r + 1))
        ;
      if (r > 0)
        all[k++] = c;
    }
    all[k] = NULL;
  }
  pw_mutex_unlock(&registry_mu);
  if (!all)
    PyErr_NoMemory();
  return all;
}

/* ------------------------------------------------------------------ */
/* a core's creation and closing                                      */

/* The driver's may_cut: a part of a threaded wheel's expiry may end after
 * `last` if every timer left in the wheel runs after it.  Those left are at
 * or after `next` in (tick, sub, seq) order, so a later tick or a greater
 * sub means a later exact deadline, and an equal sub that stands for one
 * deadline means the same deadline, scheduled later. */
static bool may_cut(const pw_timer *last, const pw_timer *next, void *arg) {
  return last->deadline != next->deadline || last->sub != next->sub ||
         sub_exact(arg, last->deadline, last->sub);
}

PyObject *pw__closed_error(core *c) {
  PyErr_Format(PyExc_RuntimeError, "the wheel is closed%s%s", c->closed_why ? ": " : "",
               c->closed_why ? c->closed_why : "");
  return NULL;
}

/* The unstarted batch entries counted the slow way, for the test hook
 * that checks batch_live against it. */
size_t pw__batch_live_scan_locked(core *c) {
  size_t n = 0;
  for (size_t i = c->drv.batch_pos; i < c->drv.batch_n; i++)
    n += batch_owns(c->drv.batch[i]);
  return n;
}

/*
 * Marks every handle that has not started cancelled and releases its
 * callback: those in the wheel, those popped into a batch not yet run, and
 * a repeating one whose callback runs now.  Stops the thread after its
 * running batch.  With want_list, returns them as a new list sorted by
 * deadline; a failure to build the list leaves the wheel closed all the same.
 * Without, returns NULL and never fails.  Needs no memory to close: the
 * cancelled timers are chained through their own free links.
 */
PyObject *pw__close_core(core *c, const char *why, bool want_list) {
  core_lock(c); /* held up to the releases, which run Python code */
  if (c->closed) {
    core_unlock(c);
    return want_list ? PyList_New(0) : NULL;
  }
  c->closed_why = why;
  pw_store_release_bool(&c->closed, true); /* see core_closed */
  pw_driver *d = &c->drv;
  pw_timer *chain = NULL;
  size_t n = 0;
  pw_driver_lock(d);
  d->stop = true;
  pw_wake_signal(&d->wake);
  pw_timer *t;
  while ((t = pw_wheel_any(&d->wheel))) {
    pw_wheel_cancel(&d->wheel, t);
    handle_of(t)->state = H_CANCELLED; /* so that the batch loop skips a moved one */
    t->link.next = (pw_link *)chain;   /* the wheel's reference moves to the chain */
    chain = t, n++;
  }
  for (size_t i = d->batch_pos; i < d->batch_n; i++) {
    HandleObject *h = handle_of(d->batch[i]);
    if (h->state == H_PENDING) {
      /* a batch slot is not a free link: mark it, and take a reference */
      h->state = H_CANCELLED;
      h->node.link.next = (pw_link *)chain;
      chain = &h->node, n++;
      Py_INCREF(h);
    }
  }
  d->batch_live = 0;
  /* A ManualWheel's set-aside batch has nobody left to drain it (a threaded
   * wheel's runner, or an advance() in progress, drains its own). */
  size_t drop_from = d->batch_pos, drop_to = d->batch_pos;
  bool claimed = c->manual && !c->advancing;
  if (claimed) {
    drop_to = d->batch_pos = d->batch_n;
    /* claimed while the batch's references are dropped below, out of the
     * lock (a drop may free a handle): nobody collects into it meanwhile */
    c->advancing = PW_CLOSING;
  }
  pw_driver_unlock(d);
  bool running_chained = false; /* (a running one moved again was in the wheel) */
  if (c->running && c->running->state == H_PENDING) {
    running_chained = true;
    c->running->state = H_CANCELLED;
    c->running->node.link.next = (pw_link *)chain;
    chain = &c->running->node, n++;
    Py_INCREF(c->running);
  }
  /* Mark all before releasing any: a releasing __del__ sees them cancelled
   * and the wheel closed, and touches neither the chain nor the wheel. */
  for (pw_timer *x = chain; x; x = (pw_timer *)x->link.next) {
    handle_of(x)->state = H_CANCELLED;
    c->cancelled += !(running_chained && handle_of(x) == c->running); /* see handle_cancel */
  }
  core_unlock(c);
  if (claimed) {
    for (size_t i = drop_from; i < drop_to; i++)
      Py_DECREF(handle_of(d->batch[i])); /* the batch's; the chain holds its own */
    core_lock(c);
    c->advancing = 0;
    core_unlock(c);
  }
  /* The chain is ours: its handles are marked, and nobody else changes the
   * links of a handle that is not pending. */
  HandleObject **v = want_list ? PyMem_Malloc((n ? n : 1) * sizeof *v) : NULL;
  size_t k = 0;
  for (pw_timer *x = chain; x;) {
    HandleObject *h = handle_of(x);
    core_lock(c); /* a runner's drop_moved reads the links under it */
    x = (pw_timer *)x->link.next;
    h->node.link.next = NULL;
    core_unlock(c);
    if (v) {
      v[k++] = h;
      continue;
    }
    handle_release(c, h);
    Py_DECREF(h);
  }
  if (!want_list)
    return NULL;
  if (!v)
    return PyErr_NoMemory();
  qsort(v, n, sizeof *v, pw__cmp_handles);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; i < n; i++) {
    handle_release(c, v[i]);
    if (list)
      PyList_SET_ITEM(list, (Py_ssize_t)i, (PyObject *)v[i]);
    else
      Py_DECREF(v[i]);
  }
  PyMem_Free(v);
  return list;
}

/* The Python side lets go of the core's slabs (GIL held): from here on it
 * allocates no handle, and the handles still alive keep the pages. */
void pw__core_release_slabs(core *c) {
  core_lock(c); /* handles are freed into the set on any thread */
  if (c->slabs) {
    pw_slab_release(c->slabs);
    c->slabs = NULL;
  }
  core_unlock(c);
}

/* Slab pages are memory Python code allocated, and tracemalloc says so. */
static void trace_page(void *page, size_t bytes, bool added) {
  if (added)
    PyTraceMalloc_Track(0, (uintptr_t)page, bytes);
  else
    PyTraceMalloc_Untrack(0, (uintptr_t)page);
}

core *pw__core_new(int64_t tick_ns, bool manual, int64_t start_ns) {
  core *c = PyMem_RawCalloc(1, sizeof *c);
  if (!c)
    return (core *)PyErr_NoMemory();
  if (!(c->slabs = pw_slab_set_new(sizeof(HandleObject), NREFS, trace_page))) {
    PyMem_RawFree(c);
    return (core *)PyErr_NoMemory();
  }
#ifdef PW_FREE_THREADED
  /* A lock-free list or dict read on another thread may touch a handle's
   * header just after its last reference went (CPython's own objects are
   * freed only once such readers are past): its page stays a page of
   * handles while the wheel lives (slab.h, keep_empty). */
  c->slabs->keep_empty = true;
#endif
  pw_driver_hooks hooks = {pw__hook_start, pw__hook_run, pw__hook_stop, pw__hook_exit, c};
  int r = pw_driver_init(&c->drv, tick_ns, manual ? start_ns : pw_clock_ns(), &hooks);
  if (r) {
    pw_slab_release(c->slabs);
    PyMem_RawFree(c);
    errno = -r;
    return (core *)PyErr_SetFromErrno(PyExc_OSError);
  }
  atomic_init(&c->refs, 1);
  c->interp = PyInterpreterState_Get();
  c->manual = manual;
  c->manual_ns = start_ns;
  core_register(c);
  if (!manual) {
    /* A large expiry is handed to the callbacks in parts of PW_CHUNK, the
     * first as soon as it is gathered (see pw__hook_run); set_sub and may_cut
     * say where a part may end inside a tick. */
    c->drv.chunk = PW_CHUNK;
    c->drv.may_cut = may_cut;
    atomic_fetch_add(&c->refs, 1); /* the thread's */
    if ((r = pw_driver_start(&c->drv))) {
      atomic_fetch_sub(&c->refs, 1);
      pw__core_release_slabs(c);
      pw__core_decref(c);
      errno = -r;
      return (core *)PyErr_SetFromErrno(PyExc_OSError);
    }
    pw_driver *d = &c->drv;
    Py_BEGIN_ALLOW_THREADS pw_driver_lock(d);
    while (!c->thread_state_made)
      pw_cond_wait(&d->exit_cv, &d->mu);
    pw_driver_unlock(d);
    Py_END_ALLOW_THREADS if (c->thread_state_made < 0) {
      pw_driver_stop(d); /* it leaves at once; its exit hook drops its reference */
      pw__core_release_slabs(c);
      pw__core_decref(c);
      return (core *)PyErr_NoMemory();
    }
  }
  return c;
}

/* ------------------------------------------------------------------ */
/* waiting for a wheel's thread to leave (close(timeout=...))          */

/* Waits for the thread to leave, in slices, so that Ctrl-C is delivered
 * while close() blocks (the SimpleQueue.get pattern). */
static int wait_thread(core *c, int64_t timeout_ns) {
  int64_t end = timeout_ns < 0 ? INT64_MAX : add_sat(pw_clock_ns(), timeout_ns);
  for (;;) {
    int64_t left = end - pw_clock_ns(), slice = 50000000;
    if (left < 0)
      left = 0;
    if (slice > left)
      slice = left;
    int r;
    Py_BEGIN_ALLOW_THREADS r = pw_driver_wait_exited(&c->drv, slice);
    Py_END_ALLOW_THREADS if (r == 0 || left == 0) return 0;
    if (PyErr_CheckSignals() < 0)
      return -1;
  }
}

/*
 * Waits between wheel threads.  A callback may close another wheel and wait
 * for its thread, which may itself be in a callback closing a third, and so
 * on; a wait that would close a cycle (back to the caller's own thread)
 * would never end, so it is not made: close() then returns at once, as it
 * does on the wheel's own thread.  Each wheel thread waits for at most one
 * other, so the waits form chains, walked and extended under one mutex: of
 * two threads closing each other at the same moment, the second sees the
 * first's wait.  Every core on a chain is kept alive by its waiter's
 * reference to the wheel object.
 */
static pw_mutex wait_mu = PW_MUTEX_INIT;

/* Whether the calling thread may wait for c's thread; if so, records it. */
static bool wait_begin(core *c) {
  core *me = pw__thread_core;
  if (!me)
    return true; /* not a wheel thread: nobody waits for it */
  bool cycle = false;
  pw_mutex_lock(&wait_mu);
  for (core *y = c; y && !cycle; y = y->waiting_for)
    cycle = y == me;
  if (!cycle)
    me->waiting_for = c;
  pw_mutex_unlock(&wait_mu);
  return !cycle;
}

static void wait_end(void) {
  core *me = pw__thread_core;
  if (!me)
    return;
  pw_mutex_lock(&wait_mu);
  me->waiting_for = NULL;
  pw_mutex_unlock(&wait_mu);
}

/* close(), and the wait for the thread, unless that could never end. */
PyObject *pw__close_and_wait(WheelObject *self, int64_t timeout) {
  core *c = self->core;
  PyObject *list = pw__close_core(c, NULL, true);
  /* No waiting once the atexit hook ran: its grace is over, and a thread
   * still in a callback then may die in the interpreter's take_gil without
   * a word. */
  if (!c->manual && c->drv.started && !atomic_load(&state_of_type(Py_TYPE(self))->exited) &&
      wait_begin(c)) {
    Py_INCREF(self); /* keeps the core while the GIL is released */
    int r = wait_thread(c, timeout);
    wait_end();
    Py_DECREF(self);
    if (r < 0) {
      Py_XDECREF(list);
      return NULL;
    }
  }
  return list;
}

/* ------------------------------------------------------------------ */
/* process-wide hooks: atexit and fork (registered by pywheel/__init__) */

PyObject *pw__mod_shutdown(PyObject *m, PyObject *arg) {
  double grace = PyFloat_AsDouble(arg);
  if (grace == -1.0 && PyErr_Occurred())
    return NULL;
  int64_t grace_ns = !(grace > 0) ? 0 : grace >= 9e9 ? NEVER_NS : (int64_t)(grace * 1e9);
  core **all = registry_snapshot();
  if (!all)
    return NULL;
  PyInterpreterState *me = PyInterpreterState_Get();
  atomic_store(&((modstate *)PyModule_GetState(m))->exited, true);
  for (core **p = all; *p; p++) {
    core *c = *p;
    if (c->interp != me)
      continue; /* another interpreter's wheel: its own atexit stops it */
    /* A ManualWheel (every event loop's wheel) has no thread to stop: it
     * runs only inside its caller's advance(), so it keeps working until
     * the interpreter really finalizes, for the atexit hooks that run after
     * this one (those registered before pywheel was imported) as for any
     * other code; the collector frees it as any object. */
    if (c->manual)
      continue;
    core_lock(c);
    WheelObject *owner = c->closed ? NULL : owner_ref_locked(c);
    core_unlock(c);
    if (owner) {
      pw__close_core(c, "the interpreter is exiting", false);
      Py_DECREF(owner);
    } else {
      pw_driver_stop(&c->drv);
    }
  }
  /* One grace period for all: a callback still running when it ends is
   * left to the interpreter, which stops such threads when they next ask
   * for the GIL.  The thread never asks once finalization has begun. */
  int64_t end = add_sat(pw_clock_ns(), grace_ns);
  for (core **p = all; *p; p++) {
    core *c = *p;
    if (!c->manual && c->drv.started && c->interp == me) {
      int64_t left = end == NEVER_NS ? -1 : end - pw_clock_ns();
      Py_BEGIN_ALLOW_THREADS pw_driver_wait_exited(&c->drv, left == -1 ? -1 : left > 0 ? left : 0);
      Py_END_ALLOW_THREADS
    }
  }
  for (core **p = all; *p; p++)
    pw__core_decref(*p);
  PyMem_RawFree(all);
  Py_RETURN_NONE;
}

/*
 * fork.  The C handlers run inside fork() itself, with no Python code in
 * between: prepare holds the registry and every core's mutex across the
 * fork, so the child's copies are consistent, and the child's handler gives
 * it fresh ones before any Python code (another at-fork hook, a collection
 * traversing a wheel) could block on them.  It also marks the cores that
 * existed at fork; the Python-level hook (os.register_at_fork, run later
 * with the GIL) closes those and only those.  Lock order as everywhere: the
 * threads take a core's mutex without the GIL and never the registry while
 * holding one.
 */
static void atfork_prepare(void) {
  pw_mutex_lock(&wait_mu);
  pw_mutex_lock(&registry_mu);
  for (core *c = registry.reg_next; c != &registry; c = c->reg_next)
    pw_driver_lock(&c->drv);
}

static void atfork_parent(void) {
  for (core *c = registry.reg_next; c != &registry; c = c->reg_next)
    pw_driver_unlock(&c->drv);
  pw_mutex_unlock(&registry_mu);
  pw_mutex_unlock(&wait_mu);
}

static void atfork_child(void) {
  pw_mutex_init(&wait_mu);
  pw_mutex_init(&registry_mu);
  for (core *c = registry.reg_next; c != &registry; c = c->reg_next) {
#ifdef PW_FREE_THREADED
    /* Held by no thread that exists here: os.fork() stops the world first,
     * and no thread is ever stopped inside a stretch under this lock. */
    c->lock = (PyMutex){0};
#endif
    c->forked = true;
    c->waiting_for = NULL; /* whoever waited is gone, or is this thread */
    c->thread_alive_at_fork = c->drv.started && !c->drv.exited;
    c->fork_own_thread =
        c->thread_alive_at_fork && pw_thread_equal(c->drv.thread, pw_thread_self());
    bool stop = c->drv.stop;
    pw_driver_after_fork_child(&c->drv); /* fresh mutex; no thread here */
    if (c->manual) {
      c->drv.stop = stop;
      c->drv.exited = false;
    } else if (c->fork_own_thread) {
      c->drv.exited = false; /* it is this thread: it leaves after its batch */
    }
  }
}

void pw__register_atfork(void) { pw_atfork(atfork_prepare, atfork_parent, atfork_child); }

PyObject *pw__mod_after_fork_child(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  core **all = registry_snapshot();
  if (!all)
    return NULL;
  PyInterpreterState *me = PyInterpreterState_Get();
  unsigned long self_ident = PyThread_get_thread_ident();
  for (core **p = all; *p; p++) {
    core *c = *p;
    if (!c->forked || c->interp != me)
      continue;
    c->forked = false;
    if (c->manual) {
      /* No thread to lose, unless another thread was advancing it. */
      if (c->advancing && c->advancing != self_ident) {
        c->running = NULL; /* its references belonged to the vanished thread */
        pw__batch_put_back(c);
        c->advancing = 0;
        /* entered by that thread, so never again enterable: start afresh */
        c->empty_ctx = NULL;
      }
      continue;
    }
    if (c->fork_own_thread) {
      /* fork() was called by one of this wheel's callbacks: this thread is
       * the wheel's, and its runner finishes the batch as usual. */
      core_lock(c);
      WheelObject *owner = owner_ref_locked(c);
      core_unlock(c);
      if (owner) {
        pw__close_core(c, "the process forked from one of its callbacks", false);
        Py_DECREF(owner);
      }
      continue;
    }
    c->tstate = NULL; /* the runtime deleted it with its thread */
    core_lock(c);
    WheelObject *owner = owner_ref_locked(c);
    core_unlock(c);
    if (owner) {
      pw__close_core(c, "it belongs to the parent process; create a new Wheel in the child", false);
      Py_DECREF(owner);
    }
    c->running = NULL; /* its references belonged to the vanished thread */
    /* So did the batch's: pw__close_core took its own for the unstarted ones. */
    for (size_t i = c->drv.batch_pos; i < c->drv.batch_n; i++)
      Py_DECREF(handle_of(c->drv.batch[i]));
    c->drv.batch_pos = c->drv.batch_n;
    c->drv.batch_live = 0;
    if (c->thread_alive_at_fork)
      pw__core_decref(c); /* the vanished thread's reference */
  }
  for (core **p = all; *p; p++)
    pw__core_decref(*p);
  PyMem_RawFree(all);
  Py_RETURN_NONE;
}
