/*
 * module.h -- what the files of pywheel._core's CPython binding share: module
 * state, the structs (HandleObject, WheelObject, core), the static inline
 * helpers the hot paths need (call_later, cancel, reschedule and the batch
 * runner call nothing across files that was inline before the split), and
 * the pw__ functions one file offers the others.  Every file of the binding
 * includes this header first and is bound by the paragraphs below.
 *
 * The files, one concern each (the CPython Modules/_sqlite/ shape):
 *   module.c       the module: its method table, exec, traverse, clear
 *   handle.c       TimerHandle: cancel, reschedule, when, repr, hash, equality
 *   wheel.c        Wheel: construction, scheduling, close, stats, its type tables
 *   manual.c       ManualWheel: advancing time by hand, collect/run due timers
 *   loop.c         _LoopTimers: WheelEventLoop's (and pywheel.uvloop's) call_later/call_at in C
 *   soon.c         _LoopSoon: WheelEventLoop's call_soon in C (asyncio.Handle, its ready deque)
 *   batch.c        running a batch (GIL held) and the wheel thread's hooks
 *   lifecycle.c    the registry of live cores, a core's creation and closing,
 *                  waiting for a thread, atexit and fork
 *   conversions.c  seconds <-> nanoseconds, the time range, lateness histogram
 *   errors.c       exception reporting (the handler, the default handler)
 *                  and the one-argument parser the methods share
 * None of them includes a core source; the core (../core/) never sees Python.
 *
 * Ownership, in one paragraph.  A Wheel object owns a `core` (the driver, its
 * wheel and the counters), shared by reference count with the native thread.
 * A scheduled handle is owned by the wheel: one reference, taken when it is
 * linked and handed on, without touching the count, when the thread pops it
 * into a batch (it has no GIL then).  The batch runner, which holds the GIL,
 * drops that reference after the run, or hands it back to the wheel when a
 * repeating timer is re-armed.  Handles do not own their wheel or core: a
 * handle can reach its core only while it is pending, and every pending
 * handle is cancelled when the wheel closes, which it does at the latest in
 * its dealloc.  So dropping the wheel stops the thread.  (On free-threaded
 * builds a handle holds a counted reference to its core's memory, so that
 * its dealloc can take the core's lock; it still does not keep the wheel
 * open or its thread alive: see "Free-threaded CPython" below.)
 *
 * Lock order: GIL (an attached thread state, on free-threaded builds; then
 * the core's lock there), then core mutex, never the other way.  The thread never
 * holds the mutex while taking the GIL; Python code never runs under it.
 *
 * Garbage collector: handles are not GC objects, so a million pending
 * timers add nothing to the collector's generations.  The wheel's traverse
 * reports the callbacks, arguments and contexts of its pending handles, so a
 * cycle through a pending callback back to its wheel is still collected; it
 * finds them in the side words of the wheel's handle slabs (slab.h), one
 * column per kind of reference and page, which costs a full collection a
 * sequential scan of 8 bytes a pending timer, not a cache miss per timer.
 *
 * Free-threaded CPython (3.14t, PW_FREE_THREADED below).  The module
 * declares Py_MOD_GIL_NOT_USED there, and this is what makes it true.  What
 * the GIL serialises on a regular build, the core's own lock serialises on a
 * free-threaded one: `lock`, a PyMutex per core, held for every stretch of
 * binding code that reads or writes the core's Python-side state or the
 * state of one of its handles, and released before anything that can run
 * Python code (a callback, a handler, a Py_DECREF that can free an object,
 * a conversion calling __float__).  Those stretches are exactly the code
 * the GIL build already runs without a switch, because the binding was
 * written to re-check after every point where Python code runs (a __del__
 * can close the wheel there): the same re-checks make it right with the
 * lock released there.  Under it: a handle's state, when_ns, overdue and
 * side words (callback, args, context, and their page's counts); the
 * counters and the lateness histogram (stats() snapshots under it);
 * core.running, closed/closed_why (also stored with release and read with
 * acquire, so that a quick check needs no lock), owner, advancing, part
 * cache, batch_pos/batch_live and the batch array as far as the runner keeps
 * them; the slab set (alloc, free, release).  A handle holds a reference to
 * its core there (c->refs), so h->core is valid for the handle's whole life
 * and its lock can be taken even once it ran; dealloc takes it to release
 * the words and free the slot, from whichever thread drops the handle.
 * core.owner is taken with PyUnstable_TryIncRef under the lock (the Wheel
 * may be in its dealloc, which clears owner under the same lock);
 * WheelObject.handler is read and swapped in a critical section; a
 * ManualWheel's advancing is claimed under the lock (claim_advancing), and
 * every operation that moves its clock or its batch claims it, so that a
 * second thread is refused as a callback of its own would be; manual_ns is
 * stored and read with relaxed atomics; modstate.exited and the fail_alloc
 * hook are atomics; empty_ctx belongs to the runner, which is exclusive.
 * Already safe: the registry and refs, the fork flags, the thread-locals,
 * tstate and waiting_for.  Lock order: attached thread state, then `lock`,
 * then drv.mu; `lock` is a PyMutex, which detaches while it blocks, so a
 * thread waiting for it never holds up a stop-the-world (the collector,
 * fork); drv.mu is held only for short sections that run no Python.  The
 * wheel's thread attaches once per batch (PyEval_RestoreThread, which is
 * "take the GIL" on a regular build) and its callbacks then run in parallel
 * with every other thread.  On a regular build `lock` does not exist and
 * the lock calls compile to nothing: the GIL's hot paths are unchanged.
 * A handle there is 16 bytes larger (the object header: ob_tid, ob_flags,
 * ob_mutex, ob_gc_bits, ob_ref_local, ob_ref_shared): 120 bytes with its
 * side words, not 104.  It is initialised by PyObject_Init (the public path,
 * which sets the owning thread and both counts) and freed by its dealloc on
 * any thread; biased reference counting may run that dealloc later, on the
 * thread that made the handle, which changes nothing here.  3.13t keeps
 * the GIL (no Py_mod_gil there): PyUnstable_TryIncRef is 3.14's.
 */
#ifndef PW_BINDING_MODULE_H
#define PW_BINDING_MODULE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <structmember.h>

#include "driver.h"
#include "platform.h"
#include "slab.h"

#if PY_VERSION_HEX >= 0x030D0000
#define pw_is_finalizing() Py_IsFinalizing()
#else
#define pw_is_finalizing() _Py_IsFinalizing()
#endif

/* A build without the GIL that this binding runs on without one (see the
 * header comment): 3.14t and later. */
#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030E0000
#define PW_FREE_THREADED 1
#endif

#if PY_VERSION_HEX < 0x030D0000 /* 3.13 brought them, as no-ops with the GIL */
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

#define NEVER_NS INT64_MAX   /* deadline of a timer that never runs (delay inf) */
#define PAST_NS INT64_MIN    /* deadline of delay -inf */
#define MIN_NS (PAST_NS + 2) /* the range of a finite time */
#define MAX_NS (NEVER_NS - 1)
#define LATE_BUCKETS (48 * 8)
/* Timers a threaded wheel gathers before it starts running them: the first
 * callback of a million-timer expiry waits for this many, not a million. */
#define PW_CHUNK 4096

/* ------------------------------------------------------------------ */
/* objects                                                             */

enum { H_PENDING, H_DONE, H_CANCELLED };

typedef struct core core;

typedef struct {
  PyObject_HEAD
      /* state and overdue sit in the timer's owner bytes, which would be its
       * padding otherwise: a handle takes 104 bytes (80 here and its three
       * side words), not 112 */
      union {
    pw_timer node;
    struct {
      char node_head_[offsetof(pw_timer, owner)];
      uint8_t state; /* H_PENDING, H_DONE or H_CANCELLED */
      bool overdue;  /* scheduled for a time already past: no lateness recorded */
      bool stock;    /* an event loop's: asyncio.TimerHandle's semantics (see handle_cancel) */
    };
  };
  /* Its callback, arguments and context are its slot's side words (see
   * slab.h and handle_refs below), not fields: the collector's walk reads
   * them column by column, 8 bytes a pending handle, not 104. */
  int64_t when_ns; /* exact deadline of the next (or last) run */
  int64_t interval_ns;
  core *core; /* valid while pending */
} HandleObject;

/* A handle's references, as side words of its slab slot. */
enum { REF_CALLBACK, REF_ARGS, REF_CONTEXT, NREFS };

#ifndef Py_GIL_DISABLED /* free-threaded: 16 bytes more of object header (above) */
_Static_assert(sizeof(void *) != 8 || sizeof(HandleObject) + NREFS * sizeof(void *) == 104,
               "a handle's size is part of the memory figures in the README");
#else
_Static_assert(sizeof(void *) != 8 || sizeof(HandleObject) + NREFS * sizeof(void *) == 120,
               "a handle's size is part of the memory figures in the README");
#endif

typedef struct WheelObject {
  PyObject_HEAD core *core;
  PyObject *handler; /* exception handler or NULL */
  PyObject *weakreflist;
} WheelObject;

struct core {
  pw_driver drv;
#ifdef PW_FREE_THREADED
  PyMutex lock; /* what the GIL serialises elsewhere (header comment) */
#endif
  atomic_int refs; /* the Wheel object, the thread, and short-lived waiters */
  PyInterpreterState *interp;
  PyThreadState *tstate; /* the wheel thread's, for its whole life */
  WheelObject *owner;    /* borrowed; NULL once the Wheel object is gone */
  PyTypeObject *htype;   /* strong */
  HandleObject *running; /* handle whose callback runs now, or NULL */
  PyObject *empty_ctx;   /* context entered for callbacks without one */
  bool manual, closed;
  bool stock;  /* an event loop's wheel: its handles behave as asyncio's (see handle_cancel) */
  bool forked; /* set in a forked child for the cores that existed at fork */
  bool fork_own_thread; /* ... and fork() was called on this core's wheel thread */
  bool thread_alive_at_fork;
  int thread_state_made;    /* 0 while the thread starts, then 1, or -1 if it could not */
  struct core *waiting_for; /* the core whose thread this one's waits for (wait_mu) */
  unsigned long advancing;  /* ManualWheel: ident of the thread inside advance(), or 0 */
#define PW_CLOSING ((unsigned long)-1) /* ... or close() dropping its set-aside batch */
  const char *closed_why;
  int64_t manual_ns; /* ManualWheel's clock */
  /* ManualWheel, for exact deadlines: while part_tick != 0, part_min is the
   * least exact deadline among the linked timers of tick part_tick (NEVER_NS
   * if none).  Kept by pw__schedule and cancel, dropped when that tick is
   * collected or timers are put back (see exact_min). */
  pw_tick_t part_tick;
  int64_t part_min;
  /* Where its handles are allocated (see slab.h), so that the collector's
   * walk over them reads memory in order.  Released by the Wheel object's
   * dealloc, under the GIL like every call on it; handles outliving the
   * wheel keep it. */
  pw_slab_set *slabs;
  uint64_t scheduled, fired, cancelled, errors, skipped, rescheduled;
  uint64_t late_n, late_max_ns, late[LATE_BUCKETS];
  core *reg_next, *reg_prev;
};

typedef struct {
  PyTypeObject *handle_type;
  PyTypeObject *wheel_type;
  PyTypeObject *manual_type;
  PyTypeObject *loop_timers_type;
  PyTypeObject *loop_soon_type;
  atomic_bool exited; /* the atexit hook ran: no new wheel threads, no more waiting */
} modstate;

/* The core's lock (header comment): nothing on a build with the GIL. */
static inline void core_lock(core *c) {
#ifdef PW_FREE_THREADED
  PyMutex_Lock(&c->lock);
#else
  (void)c;
#endif
}

static inline void core_unlock(core *c) {
#ifdef PW_FREE_THREADED
  PyMutex_Unlock(&c->lock);
#else
  (void)c;
#endif
}

/* closed: written under the lock, after closed_why, with release; read
 * anywhere, with acquire (a plain load on x86 and arm64's ldar). */
static inline bool core_closed(const core *c) { return pw_load_acquire_bool(&c->closed); }

/* A ManualWheel's clock: written by the thread that claimed the wheel,
 * read by any (time(), call_later). */
static inline int64_t manual_now(const core *c) { return pw_load_relaxed_i64(&c->manual_ns); }
static inline void set_manual_now(core *c, int64_t ns) { pw_store_relaxed_i64(&c->manual_ns, ns); }

/* A new reference to the core's Wheel object, or NULL once it is gone or
 * going (its refcount reached zero: its dealloc clears owner under the
 * lock, which the caller holds). */
static inline WheelObject *owner_ref_locked(core *c) {
  WheelObject *w = c->owner;
#ifdef PW_FREE_THREADED
  if (w && !PyUnstable_TryIncRef((PyObject *)w))
    w = NULL;
#else
  Py_XINCREF(w);
#endif
  return w;
}

static inline HandleObject *handle_of(pw_timer *t) {
  return (HandleObject *)((char *)t - offsetof(HandleObject, node));
}

/* Whether h is a pending "soon" timer, waiting for ManualWheel._run_soon
 * (see pw__schedule_soon): linked on PW_TICK_MAX with a finite deadline.
 * Caller holds the core's mutex. */
static inline bool handle_is_soon_locked(HandleObject *h) {
  return pw_timer_linked(&h->node) && h->node.deadline == PW_TICK_MAX && h->when_ns != NEVER_NS;
}

/* Whether a batch entry is still the batch's to run: pending, and not
 * linked again by a reschedule since it was collected (then it is the
 * wheel's, and the batch only holds a reference to drop). */
static inline bool batch_owns(pw_timer *t) {
  return handle_of(t)->state == H_PENDING && !pw_timer_linked(t);
}

/* ------------------------------------------------------------------ */
/* what one file offers the others: calls that were not inline before    */

/* conversions.c */
double pw__s_of_ns(int64_t ns);
int pw__seconds_to_ns(PyObject *o, const char *what, int64_t *out);
int pw__time_to_ns(PyObject *o, const char *what, int64_t *out);
int pw__float_time_to_ns(double d, int64_t *out);
int pw__target_to_ns(PyObject *o, const char *what, bool whole_reading, int64_t *out);
int pw__float_target_to_ns(double d, bool whole_reading, int64_t *out);
int pw__add_time(int64_t a, int64_t b, const char *what, int64_t *out);
double pw__late_quantile(const core *c, double q);

/* errors.c */
PyObject *pw__fetch_exc(void);
void pw__restore_exc(PyObject *exc);
PyObject *pw__default_handler_impl(PyObject *context);
void pw__call_handler(WheelObject *wheel, PyObject *context);
void pw__report_callback_error(core *c, WheelObject *owner, HandleObject *h);
PyObject *pw__one_arg(const char *fname, const char *kwname, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames);

/* handle.c */
extern PyType_Spec pw__handle_spec;

/* wheel.c */
PyObject *pw__manual_new(PyTypeObject *type, PyObject *args, PyObject *kw);
PyObject *pw__mod_batch_live(PyObject *m, PyObject *arg);
PyObject *pw__mod_fail_alloc_after(PyObject *Py_UNUSED(m), PyObject *arg);
PyObject *pw__schedule(WheelObject *self, int64_t when_ns, bool overdue, int64_t interval_ns,
                       PyObject *const *args, Py_ssize_t nargs, PyObject *context_o);
PyObject *pw__schedule_soon(WheelObject *self, int64_t when_ns, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *context_o);
PyObject *pw__manual_call_soon_at(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames);
extern PyType_Spec pw__wheel_spec;

/* manual.c */
extern PyType_Spec pw__manual_spec;

/* loop.c */
extern PyType_Spec pw__loop_timers_spec;
extern PyType_Spec pw__loop_soon_spec;

/* batch.c */
int pw__cmp_handles(const void *a, const void *b);
void pw__batch_put_back(core *c);
Py_ssize_t pw__run_batch(core *c);
extern PW_THREAD_LOCAL core *pw__thread_core;
void pw__hook_start(pw_driver *d, void *arg);
void pw__hook_run(pw_driver *d, void *arg);
void pw__hook_stop(pw_driver *Py_UNUSED(d), void *arg);
void pw__hook_exit(pw_driver *Py_UNUSED(d), void *arg);

/* lifecycle.c */
void pw__core_decref(core *c);
PyObject *pw__closed_error(core *c);
size_t pw__batch_live_scan_locked(core *c);
PyObject *pw__close_core(core *c, const char *why, bool want_list);
void pw__core_release_slabs(core *c);
core *pw__core_new(int64_t tick_ns, bool manual, int64_t start_ns);
PyObject *pw__close_and_wait(WheelObject *self, int64_t timeout);
PyObject *pw__mod_shutdown(PyObject *m, PyObject *arg);
void pw__register_atfork(void);
PyObject *pw__mod_after_fork_child(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored));

/* ------------------------------------------------------------------ */
/* small helpers of the hot paths, inline in every file that uses them   */

static inline double ns_to_s(int64_t ns) {
  if (ns == NEVER_NS)
    return Py_HUGE_VAL;
  if (ns <= PAST_NS + 1) /* call_every(first=-inf) is anchored at PAST_NS + 1 */
    return -Py_HUGE_VAL;
  return pw__s_of_ns(ns);
}

/* a + b saturated: for waits on the real clock, where "too far" means "no
 * limit" (close()'s timeout, the exit grace). */
static inline int64_t add_sat(int64_t a, int64_t b) {
  if (a == NEVER_NS || b == NEVER_NS)
    return NEVER_NS;
  if (b > 0 && a > INT64_MAX - b)
    return NEVER_NS;
  if (b < 0 && a < INT64_MIN - b)
    return PAST_NS + 1;
  return a + b;
}

static inline pw_tick_t deadline_tick(core *c, int64_t ns) {
  return ns == NEVER_NS ? PW_TICK_MAX : pw_tick_ceil(ns, c->drv.tick_ns);
}

/* The wheel orders one tick's timers by `sub` before their scheduling
 * order: the exact deadline's offset within its tick (when - tick_ns < ns
 * <= when) gives the exact-deadline order asyncio uses, so the wheel hands a
 * tick's timers out in their final order and a part may end anywhere.
 * Tick 0 (every deadline at or before the clock's epoch) and ticks longer
 * than 2**32 ns have more offsets than a sub holds: there sub is
 * sub_coarse() of the offset, exact (one deadline a value) below 2**31 and
 * ordered but shared by nearby deadlines above, where sort_exact orders
 * each part and a part ends only where the sub changes (may_cut). */
#define SUB_EXACT ((uint64_t)1 << 31)

/* Monotone in u: u itself below 2**31; above, 6 bits of magnitude and the
 * next 25 bits (a relative step of 2**-25), which fits in 32 bits. */
static inline uint32_t sub_coarse(uint64_t u) {
  if (u < SUB_EXACT)
    return (uint32_t)u;
  int e = 63 - pw_clzll(u); /* 31..63 */
  return (uint32_t)(SUB_EXACT + ((uint64_t)(e - 31) << 25) + ((u >> (e - 25)) & ((1u << 25) - 1)));
}

/* Tick 0 orders by how far before the epoch, reversed; PAST_NS (delay
 * -inf), 2**63 ns before it, is the only u with that magnitude. */
#define SUB_PAST UINT32_C(0x3fffffff) /* UINT32_MAX - sub_coarse(2**63) */

static inline void set_sub(core *c, HandleObject *h, pw_tick_t tick) {
  int64_t tick_ns = c->drv.tick_ns;
  if (tick == PW_TICK_MAX)
    h->node.sub = 0;
  else if (tick == 0)
    h->node.sub = UINT32_MAX - sub_coarse((uint64_t)0 - (uint64_t)h->when_ns);
  else if (tick_ns <= ((int64_t)1 << 32))
    h->node.sub = (uint32_t)(h->when_ns - (int64_t)(tick - 1) * tick_ns - 1);
  else
    h->node.sub = sub_coarse((uint64_t)(h->when_ns - (int64_t)(tick - 1) * tick_ns - 1));
}

/* Whether one sub value stands for a single exact deadline of its tick. */
static inline bool sub_exact(const core *c, pw_tick_t tick, uint32_t sub) {
  if (tick == 0)
    return sub >= SUB_EXACT || sub == SUB_PAST; /* UINT32_MAX - sub < SUB_EXACT */
  return c->drv.tick_ns <= ((int64_t)1 << 32) || sub < SUB_EXACT;
}

/* Files h on the tick of h->when_ns: links it, or, if it is linked
 * already, moves it there (pw_wheel_move: only recorded when later).
 * Caller holds the core's mutex. */
static inline void link_locked(core *c, HandleObject *h) {
  pw_tick_t tick = deadline_tick(c, h->when_ns);
  set_sub(c, h, tick);
  if (pw_timer_linked(&h->node))
    pw_driver_move_locked(&c->drv, &h->node, tick);
  else
    pw_driver_add_locked(&c->drv, &h->node, tick);
  if (tick == c->part_tick && h->when_ns < c->part_min)
    c->part_min = h->when_ns; /* see exact_min_locked */
}

static inline int64_t core_now_ns(core *c) { return c->manual ? manual_now(c) : pw_clock_ns(); }

static inline int late_bucket(uint64_t ns) {
  if (ns < 16)
    return (int)ns;
  int e = 63 - pw_clzll(ns);
  int b = (e - 3) * 8 + (int)((ns >> (e - 3)) & 7) + 8;
  return b < LATE_BUCKETS ? b : LATE_BUCKETS - 1;
}

/*
 * A handle's callback (NULL once it can never run again), its arguments (a
 * tuple, or NULL for none) and its context (NULL: a fresh empty one) live in
 * its slot's side words.  Invariant, which wheel_traverse relies on: while
 * the wheel is open, a handle that is not pending has all three NULL
 * whenever Python code can run (so whenever the collector can), because
 * every change of state away from H_PENDING takes them out with
 * handle_take_refs before anything else runs.  A closed wheel's traverse
 * reports none of them (pw__close_core marks before it releases).
 */
/* Where reference k of h is: arithmetic on h's address (slab.h), which
 * reads no page head. */
static inline PyObject **handle_word(HandleObject *h, unsigned k) {
  return (PyObject **)pw_slab_word(h, sizeof(HandleObject), NREFS, k);
}
static inline PyObject *handle_callback(HandleObject *h) { return *handle_word(h, REF_CALLBACK); }
static inline PyObject *handle_args(HandleObject *h) { return *handle_word(h, REF_ARGS); }
static inline PyObject *handle_context(HandleObject *h) { return *handle_word(h, REF_CONTEXT); }

/* Gives a new handle (whose words are NULL) the references, stolen. */
static inline void handle_set_refs(HandleObject *h, PyObject *cb, PyObject *args, PyObject *ctx) {
  pw_slab_set_word(h, sizeof(HandleObject), NREFS, REF_CALLBACK, cb);
  if (args)
    pw_slab_set_word(h, sizeof(HandleObject), NREFS, REF_ARGS, args);
  if (ctx)
    pw_slab_set_word(h, sizeof(HandleObject), NREFS, REF_CONTEXT, ctx);
}

/* Moves the references out to the caller, leaving the words NULL.  The
 * argument and context words are read only where their page's count says
 * one may be set: the count sits in the page head, whose miss nothing waits
 * for (the branch is predicted), where a read of the word would be a miss
 * of its own. */
static inline void handle_take_refs(HandleObject *h, PyObject **cb, PyObject **args,
                                    PyObject **ctx) {
  pw_slab_head *pg = pw_slab_head_of(h);
  PyObject **w = handle_word(h, REF_CALLBACK);
  size_t stride = pw_slab_per_page(sizeof(HandleObject), NREFS); /* word k: w[k * stride] */
  *cb = w[0];
  if (*cb) {
    w[0] = NULL;
    pg->nonnull[REF_CALLBACK]--;
  }
  *args = NULL;
  if (pg->nonnull[REF_ARGS] && (*args = w[REF_ARGS * stride])) {
    w[REF_ARGS * stride] = NULL;
    pg->nonnull[REF_ARGS]--;
  }
  *ctx = NULL;
  if (pg->nonnull[REF_CONTEXT] && (*ctx = w[REF_CONTEXT * stride])) {
    w[REF_CONTEXT * stride] = NULL;
    pg->nonnull[REF_CONTEXT]--;
  }
}

/* Takes h's references out under its core's lock (their page's counts are
 * shared with its neighbours) and drops them after, outside it. */
static inline void handle_release(core *c, HandleObject *h) {
  PyObject *cb, *args, *ctx;
  core_lock(c);
  handle_take_refs(h, &cb, &args, &ctx);
  core_unlock(c);
  Py_XDECREF(cb);
  Py_XDECREF(args);
  Py_XDECREF(ctx);
}

extern PyModuleDef pw__moddef;

static inline modstate *state_of_type(PyTypeObject *tp) {
  PyObject *m = PyType_GetModuleByDef(tp, &pw__moddef);
  return m ? PyModule_GetState(m) : NULL;
}
/* Handles pending now: in the wheel, or popped and not yet started. */
static inline size_t pending_locked(core *c) {
  return pw_wheel_count(&c->drv.wheel) + c->drv.batch_live;
}

#endif /* PW_BINDING_MODULE_H */
