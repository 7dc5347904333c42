/*
 * module.c -- pywheel._core: TimerHandle, Wheel and ManualWheel.
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
 * its dealloc.  So dropping the wheel stops the thread.
 *
 * Lock order: GIL, then core mutex, never the other way.  The thread never
 * holds the mutex while taking the GIL; Python code never runs under it.
 *
 * Garbage collector: handles are not GC objects, so a million pending
 * timers add nothing to the collector's generations.  The wheel's traverse
 * reports the callbacks, arguments and contexts of its pending handles, so a
 * cycle through a pending callback back to its wheel is still collected; it
 * finds them by walking the wheel's handle slabs (slab.h) in memory order,
 * which costs a full collection a sequential scan, not a cache miss per
 * pending timer.
 *
 * Free-threaded CPython.  The module does not declare Py_mod_gil, so a
 * free-threaded build turns the GIL back on when it is imported.  Before
 * declaring Py_MOD_GIL_NOT_USED, everything the GIL now serialises must
 * become atomic or locked (then be tested on 3.13t under TSan): the core's
 * counters and lateness histogram (update under drv.mu, stats() snapshots
 * under it); a handle's state (a compare-and-swap decides who cancels, moves
 * or runs it, and only the winner touches callback/args/context; close_core
 * must mark before it reuses link.next for its chain); when_ns, interval_ns,
 * overdue (atomic 64-bit); h->core (a reference taken under the lock);
 * core.running, closed and closed_why; core.owner (try-incref under a lock);
 * WheelObject.handler (a critical section); a ManualWheel's advancing (a
 * compare-and-swap), manual_ns, part_tick/part_min (readers under mu);
 * drv.batch_pos and batch_live, which run_batch keeps without mu; empty_ctx (follows
 * from an exclusive runner); modstate.exited and the fail_alloc test hook.
 * Already safe: the registry and refs, the fork flags, the thread-locals,
 * tstate and waiting_for.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <structmember.h>

#include "driver.h"
#include "slab.h"

#if PY_VERSION_HEX >= 0x030D0000
#define pw_is_finalizing() Py_IsFinalizing()
#else
#define pw_is_finalizing() _Py_IsFinalizing()
#endif

#define NEVER_NS INT64_MAX /* deadline of a timer that never runs (delay inf) */
#define PAST_NS INT64_MIN  /* deadline of delay -inf */
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
       * padding otherwise: a handle takes 104 bytes, not 112 */
      union {
    pw_timer node;
    struct {
      char node_head_[offsetof(pw_timer, owner)];
      uint8_t state; /* H_PENDING, H_DONE or H_CANCELLED */
      bool overdue;  /* scheduled for a time already past: no lateness recorded */
      bool stock;    /* an event loop's: asyncio.TimerHandle's semantics (see handle_cancel) */
    };
  };
  PyObject *callback; /* NULL once it can never run again */
  PyObject *args;     /* tuple, or NULL for no arguments */
  PyObject *context;  /* NULL: run in a fresh empty context */
  int64_t when_ns;    /* exact deadline of the next (or last) run */
  int64_t interval_ns;
  core *core; /* valid while pending */
} HandleObject;

_Static_assert(sizeof(void *) != 8 || sizeof(HandleObject) == 104,
               "a handle's size is part of the memory figures in the README");

typedef struct WheelObject {
  PyObject_HEAD core *core;
  PyObject *handler; /* exception handler or NULL */
  PyObject *weakreflist;
} WheelObject;

struct core {
  pw_driver drv;
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
  const char *closed_why;
  int64_t manual_ns; /* ManualWheel's clock */
  /* ManualWheel, for exact deadlines: while part_tick != 0, part_min is the
   * least exact deadline among the linked timers of tick part_tick (NEVER_NS
   * if none).  Kept by schedule and cancel, dropped when that tick is
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
  bool exited; /* the atexit hook ran: no new wheel threads, no more waiting */
} modstate;

static inline HandleObject *handle_of(pw_timer *t) {
  return (HandleObject *)((char *)t - offsetof(HandleObject, node));
}

/* Whether a batch entry is still the batch's to run: pending, and not
 * linked again by a reschedule since it was collected (then it is the
 * wheel's, and the batch only holds a reference to drop). */
static inline bool batch_owns(pw_timer *t) {
  return handle_of(t)->state == H_PENDING && !pw_timer_linked(t);
}

/*
 * Nanoseconds to seconds, the one formula behind time(), when(),
 * next_when() and next_deadline(): the float nearest to ns / 10**9, as
 * Python's own `ns / 10**9` (and round(x, 9), which the virtual loop uses)
 * gives it, and time.monotonic() for any count below 2**53 ns (104 days).
 * It is monotonic and exact on whole seconds, which the deadline rule
 * (seconds_to_ns) relies on.  Below 2**53 one division is exact rounding;
 * above, q + r/1e9 is within one ulp, and the distance to the neighbours
 * decides in integers: y >= 2**23 there, so y, its neighbours and q differ
 * by exact multiples of 2**-30, and no such count lies on a midpoint.
 */
static double s_of_ns(int64_t ns) {
  const int64_t exact = (int64_t)1 << 53;
  if (ns >= -exact && ns <= exact)
    return (double)ns / 1e9;
  uint64_t u = ns < 0 ? -(uint64_t)ns : (uint64_t)ns;
  uint64_t q = u / 1000000000u, r = u % 1000000000u;
  double fq = (double)q, y = fq + (double)r / 1e9;
  int64_t twice_r = (int64_t)r << 31; /* 2 * r, in units of 2**-30 */
  for (int i = 0; i < 2; i++) {
    double hi = nextafter(y, INFINITY), lo = nextafter(y, -INFINITY);
    int64_t yy = (int64_t)ldexp(y - fq, 30);
    if (((int64_t)ldexp(hi - fq, 30) + yy) * 1000000000 < twice_r)
      y = hi; /* ns / 1e9 lies above the midpoint to hi */
    else if (((int64_t)ldexp(lo - fq, 30) + yy) * 1000000000 > twice_r)
      y = lo;
    else
      break;
  }
  return ns < 0 ? -y : y;
}

static inline double ns_to_s(int64_t ns) {
  if (ns == NEVER_NS)
    return Py_HUGE_VAL;
  if (ns <= PAST_NS + 1) /* call_every(first=-inf) is anchored at PAST_NS + 1 */
    return -Py_HUGE_VAL;
  return s_of_ns(ns);
}

/* ------------------------------------------------------------------ */
/* the registry of live cores: process-wide, because atexit and fork are */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static core registry = {.reg_next = &registry, .reg_prev = &registry};

static void core_register(core *c) {
  pthread_mutex_lock(&registry_mu);
  c->reg_next = &registry;
  c->reg_prev = registry.reg_prev;
  registry.reg_prev->reg_next = c;
  registry.reg_prev = c;
  pthread_mutex_unlock(&registry_mu);
}

static void core_decref(core *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1)
    return;
  pthread_mutex_lock(&registry_mu);
  c->reg_prev->reg_next = c->reg_next;
  c->reg_next->reg_prev = c->reg_prev;
  pthread_mutex_unlock(&registry_mu);
  pw_driver_fini(&c->drv);
  PyMem_RawFree(c);
}

/* Takes a reference to every live core.  Returns a PyMem_Raw array, NULL
 * terminated, or NULL with MemoryError. */
static core **registry_snapshot(void) {
  pthread_mutex_lock(&registry_mu);
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
  pthread_mutex_unlock(&registry_mu);
  if (!all)
    PyErr_NoMemory();
  return all;
}

/* ------------------------------------------------------------------ */
/* conversions                                                         */

/*
 * The clock's range.  Every time and deadline is an int64 count of
 * nanoseconds: about +-292 years (+-9223372036.85 s) around the clock's zero,
 * the boot for time.monotonic().  inf and -inf stand for "never" and "the
 * past"; a finite value outside the range is refused with OverflowError, as
 * CPython's own time.sleep() and Event.wait() refuse theirs, rather than
 * quietly becoming "never" (a deadline 300 years away is a bug in the
 * caller more often than a wish).  Ints and floats agree on the boundary:
 * an integral number of seconds is in range iff |s| <= 9223372036.
 */
static int out_of_range(const char *what) {
  PyErr_Format(PyExc_OverflowError,
               "%s is beyond the clock's range (|t| < 2**63 ns, about 9223372036.85 seconds; "
               "use math.inf for never)",
               what);
  return -1;
}

#define MIN_NS (PAST_NS + 2) /* the range of a finite time */
#define MAX_NS (NEVER_NS - 1)

/* The least n >= 0 with s_of_ns(n) >= z, for 0 <= z < 2**34.  Below 2**22 s
 * (ulp < 1 ns) the nearest count is off by at most one.  Above, s_of_ns(n)
 * >= z exactly when n / 1e9 passes the midpoint m between z and the float
 * below it (never reached exactly, see s_of_ns): n = floor(m * 1e9) + 1,
 * computed in units of 2**-32 s from the whole seconds a of z. */
static uint64_t ceil_pos(double z) {
  if (z < 4194304.0) {
    int64_t c = (int64_t)nearbyint(z * 1e9);
    if (s_of_ns(c) < z)
      return (uint64_t)c + 1;
    return (uint64_t)(s_of_ns(c - 1) >= z ? c - 1 : c);
  }
  double a = floor(z), below = nextafter(z, 0.0);
  int64_t m = (int64_t)ldexp(z - a, 31) + (int64_t)ldexp(below - a, 31); /* 2**32 (m - a) */
  int64_t scaled = m * 1000000000;                                       /* |.| < 2**62 */
  int64_t whole = scaled >= 0 ? scaled >> 32 : -((-scaled + 0xFFFFFFFF) >> 32);
  return (uint64_t)a * 1000000000u + (uint64_t)(whole + 1);
}

/* The least count n whose s_of_ns(n) >= x (finite x): what a float time or
 * span becomes.  -1 if n lies outside [MIN_NS - 1, MAX_NS + 1]. */
static int ceil_ns(double x, int64_t *out) {
  if (x >= 0) {
    if (x >= 9223372037.0)
      return -1;
    uint64_t u = ceil_pos(x);
    if (u > (uint64_t)NEVER_NS)
      return -1;
    *out = (int64_t)u;
    return 0;
  }
  /* By symmetry: the least n with s(n) >= x is 1 - the least m with s(m) > -x. */
  if (-x >= 9223372037.0)
    return -1;
  uint64_t u = ceil_pos(nextafter(-x, INFINITY));
  if (u == 0 || u - 1 > (uint64_t)INT64_MAX - 1) /* 1 - u < MIN_NS - 1 */
    return -1;
  *out = -(int64_t)(u - 1);
  return 0;
}

/* What a time or span argument holds: an exact count of nanoseconds (an
 * integer), or a float (any other number, through __float__; +-inf included).
 * Returns 1 for exact, 0 for float, -1 with an exception. */
static int parse_seconds(PyObject *o, const char *what, int64_t *exact, double *d) {
  if (!PyLong_Check(o) && !PyFloat_Check(o) && PyIndex_Check(o)) {
    PyObject *i = PyNumber_Index(o); /* an integer type of a library's own */
    if (i) {
      int r = parse_seconds(i, what, exact, d);
      Py_DECREF(i);
      return r;
    }
    /* __index__ refused (a 0-d float array has one that does): the number
     * may still have a __float__. */
    if (!PyErr_ExceptionMatches(PyExc_TypeError))
      return -1;
    PyErr_Clear();
  }
  if (PyLong_Check(o)) {
    int overflow;
    long long s = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (s == -1 && PyErr_Occurred())
      return -1;
    if (overflow || s > INT64_MAX / 1000000000 || s < -(INT64_MAX / 1000000000))
      return out_of_range(what);
    *exact = (int64_t)s * 1000000000;
    return 1;
  }
  if (!PyFloat_Check(o) && !PyNumber_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s must be a number of seconds, not %.100s", what,
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  *d = PyFloat_AsDouble(o);
  if (*d == -1.0 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) { /* a huge Fraction */
      PyErr_Clear();
      return out_of_range(what);
    }
    return -1;
  }
  if (isnan(*d)) {
    PyErr_Format(PyExc_ValueError, "%s must not be NaN", what);
    return -1;
  }
  if (isinf(*d) && !PyFloat_Check(o)) {
    /* Decimal('1e400') says inf to __float__, though it is finite: only a
     * number that equals infinity means never (or the past). */
    PyObject *inf = PyFloat_FromDouble(*d);
    int same = inf ? PyObject_RichCompareBool(o, inf, Py_EQ) : -1;
    Py_XDECREF(inf);
    if (same < 0)
      return -1;
    if (!same)
      return out_of_range(what);
  }
  return 0;
}

/* A span (a delay, interval, tick, advance(), close()'s timeout) to
 * nanoseconds: an integer exactly, any other number rounded to the nearest
 * nanosecond; +-inf to NEVER_NS / PAST_NS. */
static int seconds_to_ns(PyObject *o, const char *what, int64_t *out) {
  double d;
  int r = parse_seconds(o, what, out, &d);
  if (r != 0)
    return r < 0 ? -1 : 0;
  if (isinf(d)) {
    *out = d > 0 ? NEVER_NS : PAST_NS;
    return 0;
  }
  d = nearbyint(d * 1e9);
  /* 2**63 is exact as a double; the largest double below it fits an int64
   * and stays below NEVER_NS, and symmetrically above PAST_NS + 1. */
  if (d >= 9223372036854775808.0 || d <= -9223372036854775808.0)
    return out_of_range(what);
  *out = (int64_t)d;
  return 0;
}

/*
 * A time (a deadline: call_at, reschedule, a ManualWheel's start) to
 * nanoseconds.  An integer is exact.  Any other number becomes the least
 * count of nanoseconds that reads, in s_of_ns, at least as late as the float
 * the caller passed: then `time() >= when` holds once the clock reached the
 * deadline, whatever float the program compares (the nearest count can read
 * below it, and a program that re-arms until its comparison holds would wait
 * on a virtual clock that never moves on).  A float that is a whole number
 * of nanoseconds, as every when() and time() is, maps to that count.
 */
static int time_to_ns(PyObject *o, const char *what, int64_t *out) {
  double d;
  int r = parse_seconds(o, what, out, &d);
  if (r != 0)
    return r < 0 ? -1 : 0;
  if (isinf(d)) {
    *out = d > 0 ? NEVER_NS : PAST_NS;
    return 0;
  }
  if (ceil_ns(d, out) < 0 || *out < MIN_NS || *out > MAX_NS)
    return out_of_range(what);
  return 0;
}

/* The last count that reads at most y (finite): ceil of the next float, less
 * one; MAX_NS at the top of the range.  -1 below the range. */
static int floor_ns(double y, int64_t *out) {
  int64_t n;
  double top = s_of_ns(MAX_NS);
  if (y >= top) {
    *out = MAX_NS;
    return y > top ? -1 : 0;
  }
  if (ceil_ns(nextafter(y, INFINITY), &n) < 0 || n - 1 < MIN_NS)
    return -1;
  *out = n - 1;
  return 0;
}

/* A target to move a ManualWheel's clock to.  An integer is exact.  For a
 * float, `whole_reading` (advance_to): the clock reaches the first reading at
 * or after it, to the last nanosecond of that reading, so a deadline made
 * from the same float is due and time() >= it; otherwise (run_due,
 * collect_due): the last nanosecond that reads at most it, so what is due is
 * exactly the timers whose when() <= it. */
static int target_to_ns(PyObject *o, const char *what, bool whole_reading, int64_t *out) {
  double d;
  int r = parse_seconds(o, what, out, &d);
  if (r != 0)
    return r < 0 ? -1 : 0;
  if (isinf(d)) {
    *out = d > 0 ? NEVER_NS : PAST_NS;
    return 0;
  }
  if (whole_reading) {
    int64_t first;
    if (ceil_ns(d, &first) < 0 || first < MIN_NS || first > MAX_NS)
      return out_of_range(what);
    d = s_of_ns(first);
  }
  if (floor_ns(d, out) < 0)
    return out_of_range(what);
  return 0;
}

/* a + b for a time and a span, either possibly +-inf (NEVER_NS, PAST_NS);
 * OverflowError naming `what` when a finite sum leaves the range. */
static int add_time(int64_t a, int64_t b, const char *what, int64_t *out) {
  if (a == NEVER_NS || b == NEVER_NS) {
    *out = NEVER_NS;
    return 0;
  }
  if (a == PAST_NS || b == PAST_NS) {
    *out = PAST_NS;
    return 0;
  }
  if ((b > 0 && a > INT64_MAX - 1 - b) || (b < 0 && a < INT64_MIN + 2 - b))
    return out_of_range(what);
  *out = a + b;
  return 0;
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
  int e = 63 - __builtin_clzll(u); /* 31..63 */
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

/* The driver's may_cut: a part of a threaded wheel's expiry may end after
 * `last` if every timer left in the wheel runs after it.  Those left are at
 * or after `next` in (tick, sub, seq) order, so a later tick or a greater
 * sub means a later exact deadline, and an equal sub that stands for one
 * deadline means the same deadline, scheduled later. */
static bool may_cut(const pw_timer *last, const pw_timer *next, void *arg) {
  return last->deadline != next->deadline || last->sub != next->sub ||
         sub_exact(arg, last->deadline, last->sub);
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

static inline int64_t core_now_ns(core *c) { return c->manual ? c->manual_ns : pw_clock_ns(); }

/* ------------------------------------------------------------------ */
/* lateness histogram: 8 linear sub-buckets per power of two            */

static int late_bucket(uint64_t ns) {
  if (ns < 16)
    return (int)ns;
  int e = 63 - __builtin_clzll(ns);
  int b = (e - 3) * 8 + (int)((ns >> (e - 3)) & 7) + 8;
  return b < LATE_BUCKETS ? b : LATE_BUCKETS - 1;
}

static uint64_t late_bucket_top(int b) {
  if (b < 16)
    return (uint64_t)b;
  int e = (b - 8) / 8 + 3, sub = (b - 8) % 8;
  return (((uint64_t)(8 + sub + 1)) << (e - 3)) - 1;
}

static double late_quantile(const core *c, double q) {
  if (!c->late_n)
    return 0.0;
  uint64_t want = (uint64_t)ceil(q * (double)c->late_n), seen = 0;
  if (want < 1)
    want = 1;
  for (int b = 0; b < LATE_BUCKETS; b++) {
    seen += c->late[b];
    if (seen >= want) {
      uint64_t top = late_bucket_top(b);
      return (double)(top < c->late_max_ns ? top : c->late_max_ns) / 1e9;
    }
  }
  return (double)c->late_max_ns / 1e9;
}

/* ------------------------------------------------------------------ */
/* exception reporting                                                 */

/* The raised exception as one object (traceback attached); clears it. */
static PyObject *fetch_exc(void) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  if (v && tb)
    PyException_SetTraceback(v, tb);
  Py_XDECREF(t);
  Py_XDECREF(tb);
  return v;
#endif
}

/* Sets exc, stolen, as the raised exception. */
static void restore_exc(PyObject *exc) {
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

static PyObject *default_handler_impl(PyObject *context) {
  PyObject *logging = NULL, *logger = NULL, *msg = NULL, *res = NULL, *exc = NULL;
  if (!PyDict_Check(context)) {
    PyErr_SetString(PyExc_TypeError, "context must be a dict");
    return NULL;
  }
  /* A copy: the reprs below run code that could change the caller's dict. */
  if (!(context = PyDict_Copy(context)))
    return NULL;
  PyObject *text = PyDict_GetItemString(context, "message"); /* borrowed */
  msg = text ? PyObject_Str(text) : PyUnicode_FromString("Unhandled error in pywheel");
  if (!msg)
    goto done;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(context, &pos, &key, &value)) {
    if (PyUnicode_Check(key) && (PyUnicode_CompareWithASCIIString(key, "message") == 0 ||
                                 PyUnicode_CompareWithASCIIString(key, "exception") == 0))
      continue;
    PyObject *line = PyUnicode_FromFormat("%U\n%S: %R", msg, key, value);
    if (!line)
      goto done;
    Py_SETREF(msg, line);
  }
  /* strong: importing and getLogger can run code that changes the dict */
  exc = Py_XNewRef(PyDict_GetItemString(context, "exception"));
  if (!(logging = PyImport_ImportModule("logging")))
    goto done;
  if (!(logger = PyObject_CallMethod(logging, "getLogger", "s", "pywheel")))
    goto done;
  PyObject *error = PyObject_GetAttrString(logger, "error");
  if (!error)
    goto done;
  PyObject *a = Py_BuildValue("(sO)", "%s", msg);
  PyObject *kw =
      a ? Py_BuildValue("{s:O}", "exc_info", exc && exc != Py_None ? exc : Py_False) : NULL;
  if (kw)
    res = PyObject_Call(error, a, kw);
  Py_XDECREF(kw);
  Py_XDECREF(a);
  Py_DECREF(error);
done:
  Py_DECREF(context);
  Py_XDECREF(exc);
  Py_XDECREF(logger);
  Py_XDECREF(logging);
  Py_XDECREF(msg);
  return res;
}

/* Sends `context` to the wheel's handler, or to the default one.  A handler
 * that raises is reported through the default handler, and if even that
 * fails, as unraisable.  Never leaves an exception set. */
static void call_handler(WheelObject *wheel, PyObject *context) {
  PyObject *res;
  if (wheel && wheel->handler) {
    PyObject *h = Py_NewRef(wheel->handler);
    res = PyObject_CallFunctionObjArgs(h, (PyObject *)wheel, context, NULL);
    Py_DECREF(h);
    if (res) {
      Py_DECREF(res);
      return;
    }
    PyObject *exc = fetch_exc();
    PyObject *ctx2 =
        Py_BuildValue("{s:s,s:O,s:O}", "message", "Unhandled error in exception handler",
                      "exception", exc ? exc : Py_None, "context", context);
    Py_XDECREF(exc);
    if (ctx2) {
      res = default_handler_impl(ctx2);
      Py_DECREF(ctx2);
    }
  } else {
    res = default_handler_impl(context);
  }
  if (res)
    Py_DECREF(res);
  else
    PyErr_WriteUnraisable(context);
}

/* Reports the exception raised by handle h's callback; clears it. */
static void report_callback_error(core *c, WheelObject *owner, HandleObject *h) {
  c->errors++;
  PyObject *exc = fetch_exc();
  PyObject *ctx = Py_BuildValue("{s:s,s:O,s:O}", "message", "Exception in timer callback",
                                "exception", exc ? exc : Py_None, "handle", (PyObject *)h);
  Py_XDECREF(exc);
  if (!ctx) {
    PyErr_WriteUnraisable((PyObject *)h);
    return;
  }
  call_handler(owner, ctx);
  Py_DECREF(ctx);
}

/* Parses the one argument of a method that also takes it by keyword, as
 * asyncio's and the stubs' signatures say (advance(seconds=1.0)). */
static PyObject *one_arg(const char *fname, const char *kwname, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames) {
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw == 1 &&
      (nargs == 1 || PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), kwname) == 0))
    return args[0];
  if (nkw && nargs + nkw == 1)
    PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                 PyTuple_GET_ITEM(kwnames, 0));
  else
    PyErr_Format(PyExc_TypeError, "%s() takes exactly one argument (%zd given)", fname,
                 nargs + nkw);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* TimerHandle                                                         */

static inline void handle_release(HandleObject *h) {
  PyObject *cb = h->callback, *args = h->args, *ctx = h->context;
  h->callback = h->args = h->context = NULL;
  Py_XDECREF(cb);
  Py_XDECREF(args);
  Py_XDECREF(ctx);
}

static void handle_free(void *h) { pw_slab_free(h); }

static void handle_dealloc(HandleObject *h) {
  PyTypeObject *tp = Py_TYPE(h);
  handle_release(h);
  tp->tp_free(h);
  Py_DECREF(tp);
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
  if (h->state != H_PENDING) {
    if (h->stock)
      h->state = H_CANCELLED; /* ran: nothing is counted, nothing to release */
    return cancel_result(h, false);
  }
  core *c = h->core;
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
  handle_release(h); /* may run __del__ code: nothing of ours is read after */
  bool stock = h->stock;
  if (linked)
    Py_DECREF(h); /* the wheel's reference; the caller still holds one */
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
 * and close_core, which meet them in the wheel first, skip the others).
 */
static PyObject *handle_move(HandleObject *h, int64_t when_ns, bool overdue) {
  if (h->state != H_PENDING || h->core->closed)
    Py_RETURN_FALSE;
  core *c = h->core;
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
  Py_RETURN_TRUE;
}

static PyObject *handle_reschedule(HandleObject *h, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  PyObject *arg = one_arg("reschedule", "when", args, nargs, kwnames);
  int64_t when;
  if (!arg || time_to_ns(arg, "when", &when) < 0)
    return NULL;
  if (h->state != H_PENDING) /* looked at after the conversion ran */
    Py_RETURN_FALSE;
  return handle_move(h, when, when < core_now_ns(h->core));
}

static PyObject *handle_reschedule_later(HandleObject *h, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames) {
  PyObject *arg = one_arg("reschedule_later", "delay", args, nargs, kwnames);
  int64_t delay, when;
  if (!arg || seconds_to_ns(arg, "delay", &delay) < 0)
    return NULL;
  if (h->state != H_PENDING) /* h->core is valid only while pending */
    Py_RETURN_FALSE;
  if (add_time(core_now_ns(h->core), delay, "delay", &when) < 0)
    return NULL;
  return handle_move(h, when, delay <= 0);
}

static PyObject *handle_cancelled(HandleObject *h, PyObject *Py_UNUSED(ignored)) {
  return PyBool_FromLong(h->state == H_CANCELLED);
}

static PyObject *handle_when(HandleObject *h, PyObject *Py_UNUSED(ignored)) {
  return PyFloat_FromDouble(ns_to_s(h->when_ns));
}

static PyObject *handle_get_context(HandleObject *h, PyObject *Py_UNUSED(ignored)) {
  /* NULL stands for an empty context (see capture_context): a new empty one
   * is indistinguishable from a copy of it. */
  return h->context ? Py_NewRef(h->context) : PyContext_New();
}

static PyObject *handle_get_interval(HandleObject *h, void *Py_UNUSED(closure)) {
  if (!h->interval_ns)
    Py_RETURN_NONE;
  return PyFloat_FromDouble((double)h->interval_ns / 1e9);
}

static PyObject *handle_repr(HandleObject *h) {
  static const char *names[] = {"pending", "done", "cancelled"};
  PyObject *when = PyFloat_FromDouble(ns_to_s(h->when_ns));
  if (!when)
    return NULL;
  PyObject *r;
  if (h->callback && h->interval_ns) {
    PyObject *interval = handle_get_interval(h, NULL);
    r = interval
            ? PyUnicode_FromFormat("<%s %s when=%R interval=%R callback=%R>", Py_TYPE(h)->tp_name,
                                   names[h->state], when, interval, h->callback)
            : NULL;
    Py_XDECREF(interval);
  } else if (h->callback)
    r = PyUnicode_FromFormat("<%s %s when=%R callback=%R>", Py_TYPE(h)->tp_name, names[h->state],
                             when, h->callback);
  else
    r = PyUnicode_FromFormat("<%s %s when=%R>", Py_TYPE(h)->tp_name, names[h->state], when);
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
  PyObject *when = PyFloat_FromDouble(ns_to_s(h->when_ns));
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

static PyType_Spec handle_spec = {
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
  if (x->when_ns != y->when_ns || (x->state == H_CANCELLED) != (y->state == H_CANCELLED))
    return 0;
  /* the comparisons run Python code: hold what they read */
  PyObject *xc = Py_XNewRef(x->callback), *yc = Py_XNewRef(y->callback);
  PyObject *xa = Py_XNewRef(x->args), *ya = Py_XNewRef(y->args);
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
  switch (op) {
  case Py_LT:
    return PyBool_FromLong(x->when_ns < y->when_ns);
  case Py_GT:
    return PyBool_FromLong(x->when_ns > y->when_ns);
  case Py_LE:
  case Py_GE:
    if (op == Py_LE ? x->when_ns < y->when_ns : x->when_ns > y->when_ns)
      Py_RETURN_TRUE;
    __attribute__((fallthrough)); /* or equal */
  case Py_EQ:
    r = handle_equal(x, y);
    return r < 0 ? NULL : PyBool_FromLong(r);
  default: /* Py_NE */
    r = handle_equal(x, y);
    return r < 0 ? NULL : PyBool_FromLong(!r);
  }
}

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

static int cmp_handles(const void *a, const void *b) {
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
        __builtin_prefetch(b[j + PREFETCH_AHEAD]);
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
      PyObject *exc = r ? NULL : fetch_exc();
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
        restore_exc(exc);
    }
    return r;
  }
  if (PyContext_Enter(ctx) < 0)
    return NULL;
  PyObject *r = PyObject_Vectorcall(cb, argv, argc, NULL);
  PyObject *exc = r ? NULL : fetch_exc();
  if (PyContext_Exit(ctx) < 0)
    PyErr_WriteUnraisable(ctx);
  if (exc)
    restore_exc(exc);
  return r;
}

/* Re-arms repeating handle h on the next first + k*interval strictly after
 * now; the runs in between were missed (the process stalled) and are
 * counted, not replayed.  The batch's reference passes to the wheel. */
static void rearm(core *c, HandleObject *h) {
  int64_t now = core_now_ns(c), when = h->when_ns, next;
  if (when <= PAST_NS + 1)
    when = now; /* first=-inf: no anchor worth keeping; count no skipped runs */
  __int128 k = 1;
  if (now >= when)
    k = ((__int128)now - when) / h->interval_ns + 1;
  __int128 n = (__int128)when + k * h->interval_ns;
  next = n >= NEVER_NS ? NEVER_NS : (int64_t)n;
  c->skipped += (uint64_t)(k - 1);
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
static void batch_put_back(core *c) {
  pw_driver *d = &c->drv;
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

static Py_ssize_t run_batch(core *c) {
  pw_driver *d = &c->drv;
  drop_moved(d);
  sort_exact(d->batch + d->batch_pos, d->batch_n - d->batch_pos);
  int64_t now = core_now_ns(c);
  WheelObject *owner = c->owner;
  Py_XINCREF(owner);
  bool isolated = empty_ctx_enter(c) == 0;
  if (!isolated)
    PyErr_WriteUnraisable(NULL);
  Py_ssize_t ran = 0;
  PyObject *fatal = NULL;
  while (d->batch_pos < d->batch_n) {
    if (d->batch_pos + PREFETCH_AHEAD < d->batch_n)
      __builtin_prefetch(handle_of(d->batch[d->batch_pos + PREFETCH_AHEAD]));
    HandleObject *h = handle_of(d->batch[d->batch_pos++]);
    if (!batch_owns(&h->node)) { /* cancelled, or moved */
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
      cb = h->callback, args = h->args, ctx = h->context;
      h->callback = h->args = h->context = NULL;
    } else {
      cb = Py_NewRef(h->callback), args = Py_XNewRef(h->args), ctx = Py_XNewRef(h->context);
    }
    /* `running` stays set through everything that can run Python code
     * (the handler, the releases), so a close() or cancel() meanwhile
     * still finds the handle; the re-arm decision comes after all of it. */
    c->running = h;
    PyObject *r = invoke(c, cb, args, ctx, &isolated);
    if (r)
      Py_DECREF(r);
    else if (c->manual && !PyErr_ExceptionMatches(PyExc_Exception))
      fatal = fetch_exc();
    else
      report_callback_error(c, owner, h);
    Py_DECREF(cb);
    Py_XDECREF(args);
    Py_XDECREF(ctx);
    /* (a repeating timer moved by its own callback is linked already) */
    bool again = h->interval_ns && !c->closed && batch_owns(&h->node);
    c->running = NULL;
    if (again)
      rearm(c, h);
    else
      Py_DECREF(h);
    if (fatal)
      break;
  }
  if (fatal)
    batch_put_back(c);
  if (isolated)
    empty_ctx_exit(c);
  Py_XDECREF(owner);
  if (fatal) {
    restore_exc(fatal);
    return -1;
  }
  return ran;
}

/* ------------------------------------------------------------------ */
/* the wheel thread's hooks (see driver.h)                             */

/* The core whose thread this is, on every wheel thread; NULL elsewhere. */
static _Thread_local core *thread_core;

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

static void hook_start(pw_driver *d, void *arg) {
  core *c = arg;
  thread_core = c;
  /* One thread state for the thread's whole life; creating it needs no GIL.
   * Made here, so that it is bound to this OS thread.  The constructor
   * waits for the answer, so that a failure is its MemoryError. */
  PyThreadState *ts = new_thread_state(c->interp);
  pw_driver_lock(d);
  c->tstate = ts;
  c->thread_state_made = ts ? 1 : -1;
  pthread_cond_broadcast(&d->exit_cv);
  pw_driver_unlock(d);
}

static void hook_run(pw_driver *d, void *arg) {
  core *c = arg;
  /* Once finalization may have begun the thread never takes the GIL: the
   * batch's references are abandoned with the dying interpreter. */
  if (!c->tstate || pw_is_finalizing()) {
    pw_driver_stop(d);
    return;
  }
  PyEval_RestoreThread(c->tstate);
  run_batch(c);
  /* The rest of a large expiry, part by part, without giving up the GIL in
   * between: taking the mutex under the GIL is the allowed order. */
  while (!c->closed && !pw_is_finalizing() && pw_driver_collect_rest(d))
    run_batch(c);
  PyEval_SaveThread();
}

static void hook_stop(pw_driver *Py_UNUSED(d), void *arg) {
  core *c = arg;
  if (!c->tstate || pw_is_finalizing())
    return;
  PyEval_RestoreThread(c->tstate);
  Py_CLEAR(c->empty_ctx);
  PyThreadState_Clear(c->tstate);
  c->tstate = NULL;
  PyThreadState_DeleteCurrent();
}

static void hook_exit(pw_driver *Py_UNUSED(d), void *arg) { core_decref(arg); }

/* ------------------------------------------------------------------ */
/* Wheel                                                               */

static PyModuleDef moddef;

static inline modstate *state_of_type(PyTypeObject *tp) {
  PyObject *m = PyType_GetModuleByDef(tp, &moddef);
  return m ? PyModule_GetState(m) : NULL;
}

static PyObject *closed_error(core *c) {
  PyErr_Format(PyExc_RuntimeError, "the wheel is closed%s%s", c->closed_why ? ": " : "",
               c->closed_why ? c->closed_why : "");
  return NULL;
}

/* Handles pending now: in the wheel, or popped and not yet started. */
static size_t pending_locked(core *c) { return pw_wheel_count(&c->drv.wheel) + c->drv.batch_live; }

/* The unstarted batch entries counted the slow way, for the test hook
 * that checks batch_live against it. */
static size_t batch_live_scan_locked(core *c) {
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
static PyObject *close_core(core *c, const char *why, bool want_list) {
  if (c->closed)
    return want_list ? PyList_New(0) : NULL;
  c->closed = true;
  c->closed_why = why;
  pw_driver *d = &c->drv;
  pw_timer *chain = NULL;
  size_t n = 0;
  pw_driver_lock(d);
  d->stop = true;
  pthread_cond_signal(&d->wake);
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
  if (c->manual && !c->advancing)
    drop_to = d->batch_pos = d->batch_n;
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
  for (size_t i = drop_from; i < drop_to; i++)
    Py_DECREF(handle_of(d->batch[i])); /* the batch's; the chain holds its own */
  HandleObject **v = want_list ? PyMem_Malloc((n ? n : 1) * sizeof *v) : NULL;
  size_t k = 0;
  for (pw_timer *x = chain; x;) {
    HandleObject *h = handle_of(x);
    x = (pw_timer *)x->link.next;
    h->node.link.next = NULL;
    if (v) {
      v[k++] = h;
      continue;
    }
    handle_release(h);
    Py_DECREF(h);
  }
  if (!want_list)
    return NULL;
  if (!v)
    return PyErr_NoMemory();
  qsort(v, n, sizeof *v, cmp_handles);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; i < n; i++) {
    handle_release(v[i]);
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
static void core_release_slabs(core *c) {
  if (c->slabs) {
    pw_slab_release(c->slabs);
    c->slabs = NULL;
  }
}

/* Slab pages are memory Python code allocated, and tracemalloc says so. */
static void trace_page(void *page, size_t bytes, bool added) {
  if (added)
    PyTraceMalloc_Track(0, (uintptr_t)page, bytes);
  else
    PyTraceMalloc_Untrack(0, (uintptr_t)page);
}

static core *core_new(int64_t tick_ns, bool manual, int64_t start_ns) {
  core *c = PyMem_RawCalloc(1, sizeof *c);
  if (!c)
    return (core *)PyErr_NoMemory();
  if (!(c->slabs = pw_slab_set_new(sizeof(HandleObject), trace_page))) {
    PyMem_RawFree(c);
    return (core *)PyErr_NoMemory();
  }
  pw_driver_hooks hooks = {hook_start, hook_run, hook_stop, hook_exit, c};
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
     * first as soon as it is gathered (see hook_run); set_sub and may_cut
     * say where a part may end inside a tick. */
    c->drv.chunk = PW_CHUNK;
    c->drv.may_cut = may_cut;
    atomic_fetch_add(&c->refs, 1); /* the thread's */
    if ((r = pw_driver_start(&c->drv))) {
      atomic_fetch_sub(&c->refs, 1);
      core_release_slabs(c);
      core_decref(c);
      errno = -r;
      return (core *)PyErr_SetFromErrno(PyExc_OSError);
    }
    pw_driver *d = &c->drv;
    Py_BEGIN_ALLOW_THREADS pw_driver_lock(d);
    while (!c->thread_state_made)
      pthread_cond_wait(&d->exit_cv, &d->mu);
    pw_driver_unlock(d);
    Py_END_ALLOW_THREADS if (c->thread_state_made < 0) {
      pw_driver_stop(d); /* it leaves at once; its exit hook drops its reference */
      core_release_slabs(c);
      core_decref(c);
      return (core *)PyErr_NoMemory();
    }
  }
  return c;
}

static PyObject *wheel_make(PyTypeObject *type, PyObject *args, PyObject *kw, bool manual) {
  static char *wheel_kw[] = {"tick", NULL};
  static char *manual_kw[] = {"tick", "start", NULL};
  PyObject *tick_o = NULL, *start_o = NULL;
  if (manual
          ? !PyArg_ParseTupleAndKeywords(args, kw, "|O$O:ManualWheel", manual_kw, &tick_o, &start_o)
          : !PyArg_ParseTupleAndKeywords(args, kw, "|O:Wheel", wheel_kw, &tick_o))
    return NULL;
  int64_t tick_ns = 1000000, start_ns = 0;
  if (tick_o && seconds_to_ns(tick_o, "tick", &tick_ns) < 0)
    return NULL;
  if (tick_ns <= 0 || tick_ns == NEVER_NS) {
    PyErr_SetString(PyExc_ValueError, "tick must be a positive, finite number of seconds "
                                      "of at least one nanosecond");
    return NULL;
  }
  if (start_o && time_to_ns(start_o, "start", &start_ns) < 0)
    return NULL;
  if (start_ns < 0 || start_ns == NEVER_NS) {
    PyErr_SetString(PyExc_ValueError, "start must be a finite number of seconds >= 0");
    return NULL;
  }
  modstate *st = state_of_type(type);
  if (!st)
    return NULL;
  if (!manual && st->exited) {
    /* A threaded wheel made now would have nobody to stop it before
     * finalization. */
    PyErr_SetString(PyExc_RuntimeError, "the interpreter is exiting: no new Wheel threads");
    return NULL;
  }
  WheelObject *self = (WheelObject *)type->tp_alloc(type, 0);
  if (!self)
    return NULL;
  self->core = core_new(tick_ns, manual, start_ns);
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

static PyObject *manual_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  return wheel_make(type, args, kw, true);
}

struct visit {
  visitproc visit;
  void *arg;
};

static int visit_slot(void *slot, void *p) {
  HandleObject *h = slot;
  if (h->state != H_PENDING)
    return 0;
  visitproc visit = ((struct visit *)p)->visit;
  void *arg = ((struct visit *)p)->arg;
  Py_VISIT(h->callback);
  Py_VISIT(h->args);
  Py_VISIT(h->context);
  return 0;
}

/* Reports what the pending handles hold, as if the wheel held it: handles
 * are no GC objects.  Every pending handle is the wheel's (linked, in a
 * batch, or the repeating one running now), and every handle of this wheel
 * lives in its slabs, which are walked in memory order: a full collection
 * pays a sequential scan, not a cache miss per pending timer.  The set is
 * the same in every pass of one collection: nothing changes a handle's
 * state without the GIL. */
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
  return pw_slab_foreach(c->slabs, visit_slot, &v);
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
  if (!c || c->closed)
    return;
  PyObject *exc = fetch_exc(); /* a finalizer keeps the current exception */
  close_core(c, "collected as garbage", false);
  if (exc)
    restore_exc(exc);
}

static int wheel_clear(WheelObject *self) {
  if (self->core)
    close_core(self->core, "collected as garbage", false);
  Py_CLEAR(self->handler);
  return 0;
}

static void wheel_dealloc(WheelObject *self) {
  PyTypeObject *tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  core *c = self->core;
  if (c)
    c->owner = NULL; /* first: the thread must not find us from here on */
  if (self->weakreflist)
    PyObject_ClearWeakRefs((PyObject *)self);
  wheel_clear(self);
  if (c) {
    Py_CLEAR(c->htype);
    if (c->manual)
      Py_CLEAR(c->empty_ctx); /* a threaded wheel's thread clears its own */
    core_release_slabs(c);
    self->core = NULL;
    core_decref(c);
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
 * allocation fails, so the tests can show a MemoryError changes nothing. */
static long fail_alloc_countdown;

static bool alloc_fails(void) { return fail_alloc_countdown > 0 && --fail_alloc_countdown == 0; }

static PyObject *mod_batch_live(PyObject *m, PyObject *arg) {
  modstate *st = PyModule_GetState(m);
  if (!PyObject_TypeCheck(arg, st->wheel_type)) {
    PyErr_SetString(PyExc_TypeError, "a Wheel or ManualWheel");
    return NULL;
  }
  core *c = ((WheelObject *)arg)->core;
  pw_driver_lock(&c->drv);
  size_t kept = c->drv.batch_live, scanned = batch_live_scan_locked(c);
  pw_driver_unlock(&c->drv);
  return Py_BuildValue("(nn)", (Py_ssize_t)kept, (Py_ssize_t)scanned);
}

static PyObject *mod_fail_alloc_after(PyObject *Py_UNUSED(m), PyObject *arg) {
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred())
    return NULL;
  fail_alloc_countdown = n > 0 ? n : 0;
  Py_RETURN_NONE;
}

/* Creates and links a handle.  Everything was validated; only a closed
 * wheel or a failed allocation can still refuse, changing nothing. */
/* `overdue`: the deadline was past when the caller read the clock (call_later
 * and call_every know it from the sign of the delay, which spares a second
 * clock read on the hot path). */
static PyObject *schedule(WheelObject *self, int64_t when_ns, bool overdue, int64_t interval_ns,
                          PyObject *const *args, Py_ssize_t nargs, PyObject *context_o) {
  core *c = self->core;
  if (c->closed) /* checked last: converting the delay could have closed it */
    return closed_error(c);
  PyObject *context, *tuple = NULL;
  if (capture_context(context_o, interval_ns != 0, &context) < 0)
    return NULL;
  if (nargs > 2 && !(tuple = PyTuple_New(nargs - 2))) {
    Py_XDECREF(context);
    return NULL;
  }
  for (Py_ssize_t i = 2; i < nargs; i++)
    PyTuple_SET_ITEM(tuple, i - 2, Py_NewRef(args[i]));
  HandleObject *h = alloc_fails() ? NULL : pw_slab_alloc(c->slabs);
  if (h)
    PyObject_Init((PyObject *)h, c->htype); /* takes a reference to the heap type */
  else
    PyErr_NoMemory();
  if (!h) {
    Py_XDECREF(tuple);
    Py_XDECREF(context);
    return NULL;
  }
  pw_timer_init(&h->node);
  h->callback = Py_NewRef(args[1]);
  h->args = tuple;
  h->context = context;
  h->when_ns = when_ns;
  h->interval_ns = interval_ns;
  h->core = c;
  h->state = H_PENDING;
  h->overdue = overdue; /* lateness measures the wheel, not a deadline past already */
  h->stock = c->stock && !interval_ns;
  /* The allocations above can start a collection whose __del__ code closes
   * the wheel: look again before linking. */
  if (c->closed) {
    h->state = H_CANCELLED;
    Py_DECREF(h);
    return closed_error(c);
  }
  Py_INCREF(h); /* the wheel's */
  pw_driver_lock(&c->drv);
  link_locked(c, h);
  pw_driver_unlock(&c->drv);
  c->scheduled++;
  return (PyObject *)h;
}

static PyObject *wheel_call_later(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
  PyObject *context;
  int64_t delay;
  if (parse_schedule("call_later", args, nargs, kwnames, NULL, &context) < 0 ||
      seconds_to_ns(args[0], "delay", &delay) < 0)
    return NULL;
  int64_t when;
  if (add_time(core_now_ns(self->core), delay, "delay", &when) < 0)
    return NULL;
  return schedule(self, when, delay <= 0, 0, args, nargs, context);
}

static PyObject *wheel_call_at(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
  PyObject *context;
  int64_t when;
  if (parse_schedule("call_at", args, nargs, kwnames, NULL, &context) < 0 ||
      time_to_ns(args[0], "when", &when) < 0)
    return NULL;
  return schedule(self, when, when < core_now_ns(self->core), 0, args, nargs, context);
}

static PyObject *wheel_call_every(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
  PyObject *context, *first_o;
  int64_t interval, first;
  if (parse_schedule("call_every", args, nargs, kwnames, &first_o, &context) < 0 ||
      seconds_to_ns(args[0], "interval", &interval) < 0)
    return NULL;
  if (interval <= 0 || interval == NEVER_NS) {
    PyErr_SetString(PyExc_ValueError,
                    "interval must be a positive, finite number of seconds (at least 1 ns)");
    return NULL;
  }
  first = interval;
  if (first_o && first_o != Py_None && seconds_to_ns(first_o, "first", &first) < 0)
    return NULL;
  int64_t when = PAST_NS + 1;
  if (first != PAST_NS && add_time(core_now_ns(self->core), first, "first", &when) < 0)
    return NULL;
  return schedule(self, when, first <= 0, interval, args, nargs, context);
}

static PyObject *wheel_time(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  return PyFloat_FromDouble(s_of_ns(core_now_ns(self->core)));
}

static PyObject *wheel_time_ns(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  return PyLong_FromLongLong(core_now_ns(self->core));
}

static Py_ssize_t wheel_len(WheelObject *self) {
  core *c = self->core;
  pw_driver_lock(&c->drv);
  size_t n = pending_locked(c);
  pw_driver_unlock(&c->drv);
  return (Py_ssize_t)n;
}

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
static pthread_mutex_t wait_mu = PTHREAD_MUTEX_INITIALIZER;

/* Whether the calling thread may wait for c's thread; if so, records it. */
static bool wait_begin(core *c) {
  core *me = thread_core;
  if (!me)
    return true; /* not a wheel thread: nobody waits for it */
  bool cycle = false;
  pthread_mutex_lock(&wait_mu);
  for (core *y = c; y && !cycle; y = y->waiting_for)
    cycle = y == me;
  if (!cycle)
    me->waiting_for = c;
  pthread_mutex_unlock(&wait_mu);
  return !cycle;
}

static void wait_end(void) {
  core *me = thread_core;
  if (!me)
    return;
  pthread_mutex_lock(&wait_mu);
  me->waiting_for = NULL;
  pthread_mutex_unlock(&wait_mu);
}

/* close(), and the wait for the thread, unless that could never end. */
static PyObject *close_and_wait(WheelObject *self, int64_t timeout) {
  core *c = self->core;
  PyObject *list = close_core(c, NULL, true);
  /* No waiting once the atexit hook ran: its grace is over, and a thread
   * still in a callback then may die in the interpreter's take_gil without
   * a word. */
  if (!c->manual && c->drv.started && !state_of_type(Py_TYPE(self))->exited && wait_begin(c)) {
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

static PyObject *wheel_close(WheelObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"timeout", NULL};
  PyObject *timeout_o = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:close", kwlist, &timeout_o))
    return NULL;
  int64_t timeout = -1;
  if (timeout_o != Py_None) {
    if (seconds_to_ns(timeout_o, "timeout", &timeout) < 0) {
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
  return close_and_wait(self, timeout);
}

static PyObject *wheel_get_closed(WheelObject *self, void *Py_UNUSED(closure)) {
  return PyBool_FromLong(self->core->closed);
}

static PyObject *wheel_enter(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  return Py_NewRef(self);
}

static PyObject *wheel_exit(WheelObject *self, PyObject *Py_UNUSED(args)) {
  PyObject *list = close_and_wait(self, -1);
  if (!list)
    return NULL;
  Py_DECREF(list);
  Py_RETURN_FALSE;
}

static PyObject *wheel_set_handler(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  PyObject *handler = one_arg("set_exception_handler", "handler", args, nargs, kwnames);
  if (!handler)
    return NULL;
  if (handler != Py_None && !PyCallable_Check(handler)) {
    PyErr_Format(PyExc_TypeError, "a handler must be callable or None, not %.100s",
                 Py_TYPE(handler)->tp_name);
    return NULL;
  }
  Py_XSETREF(self->handler, handler == Py_None ? NULL : Py_NewRef(handler));
  Py_RETURN_NONE;
}

static PyObject *wheel_get_handler(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  return Py_NewRef(self->handler ? self->handler : Py_None);
}

static PyObject *wheel_call_exception_handler(WheelObject *self, PyObject *const *args,
                                              Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *context = one_arg("call_exception_handler", "context", args, nargs, kwnames);
  if (!context)
    return NULL;
  if (!PyDict_Check(context)) {
    PyErr_SetString(PyExc_TypeError, "context must be a dict");
    return NULL;
  }
  call_handler(self, context);
  Py_RETURN_NONE;
}

static PyObject *wheel_default_exception_handler(WheelObject *Py_UNUSED(self),
                                                 PyObject *const *args, Py_ssize_t nargs,
                                                 PyObject *kwnames) {
  PyObject *context = one_arg("default_exception_handler", "context", args, nargs, kwnames);
  if (!context)
    return NULL;
  PyObject *r = default_handler_impl(context);
  if (!r)
    return NULL;
  Py_DECREF(r);
  Py_RETURN_NONE;
}

static PyObject *wheel_stats(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  core *c = self->core;
  pw_driver_lock(&c->drv);
  unsigned long long pending = pending_locked(c), wakeups = c->drv.wakeups,
                     batches = c->drv.batches, max_batch = c->drv.max_batch;
  pw_driver_unlock(&c->drv);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:d,s:d}", "scheduled",
                       (unsigned long long)c->scheduled, "fired", (unsigned long long)c->fired,
                       "cancelled", (unsigned long long)c->cancelled, "pending", pending, "errors",
                       (unsigned long long)c->errors, "batches", batches, "wakeups", wakeups,
                       "max_batch", max_batch, "skipped_runs", (unsigned long long)c->skipped,
                       "rescheduled", (unsigned long long)c->rescheduled, "late_p50",
                       late_quantile(c, 0.50), "late_p99", late_quantile(c, 0.99), "late_max",
                       (double)c->late_max_ns / 1e9, "tick", (double)c->drv.tick_ns / 1e9);
}

static PyObject *wheel_repr(WheelObject *self) {
  core *c = self->core;
  PyObject *tick = PyFloat_FromDouble((double)c->drv.tick_ns / 1e9);
  if (!tick)
    return NULL;
  PyObject *r = PyUnicode_FromFormat("<%s tick=%R pending=%zd%s>", Py_TYPE(self)->tp_name, tick,
                                     wheel_len(self), c->closed ? " closed" : "");
  Py_DECREF(tick);
  return r;
}

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

static int check_not_advancing(core *c) {
  if (!c->advancing)
    return 0;
  PyErr_SetString(PyExc_RuntimeError,
                  "this ManualWheel is already advancing (a ManualWheel cannot be advanced "
                  "from its own callbacks, nor from two threads at once)");
  return -1;
}

/* Whether a ManualWheel may move its time to target_ns: forward, finite,
 * and not while it is already advancing. */
static int check_target(core *c, int64_t target_ns) {
  if (check_not_advancing(c) < 0)
    return -1;
  if (target_ns == NEVER_NS) {
    PyErr_SetString(PyExc_ValueError, "cannot advance time to infinity");
    return -1;
  }
  if (target_ns < c->manual_ns) {
    PyErr_SetString(PyExc_ValueError, "time cannot go backwards");
    return -1;
  }
  return 0;
}

/* Set-aside timers that did not run (collect_due() without run_collected(),
 * or an exception in between) go back to their places before time moves
 * again, so they are neither lost nor overwritten, and still come first. */
static void put_back_leftovers(core *c) {
  if (c->drv.batch_pos < c->drv.batch_n)
    batch_put_back(c);
  c->part_tick = 0;
}

/* Runs the set-aside batch on the caller's thread. */
static Py_ssize_t run_batch_here(WheelObject *self) {
  core *c = self->core;
  Py_INCREF(self);
  c->advancing = PyThread_get_thread_ident();
  Py_ssize_t r = run_batch(c);
  c->advancing = 0;
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
static PyObject *manual_run_until(WheelObject *self, int64_t target_ns) {
  core *c = self->core;
  pw_driver *d = &c->drv;
  if (check_target(c, target_ns) < 0)
    return NULL;
  put_back_leftovers(c);
  pw_tick_t last = pw_tick_floor(target_ns, d->tick_ns);
  Py_ssize_t ran = 0;
  Py_INCREF(self);
  c->advancing = PyThread_get_thread_ident();
  for (;;) {
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
      if (!took)
        break;
      c->manual_ns = target_ns;
      Py_ssize_t r = run_batch(c);
      if (r < 0) {
        c->advancing = 0;
        Py_DECREF(self);
        return NULL;
      }
      ran += r;
      continue;
    }
    if (c->closed || next > last) {
      pw_driver_unlock(d);
      break;
    }
    pw_tick_t at = next > d->wheel.now ? next : d->wheel.now;
    pw_driver_collect_locked(d, at);
    pw_driver_unlock(d);
    int64_t at_ns = (int64_t)at * d->tick_ns;
    if (at_ns > c->manual_ns)
      c->manual_ns = at_ns;
    Py_ssize_t r = run_batch(c);
    if (r < 0) {
      c->advancing = 0;
      Py_DECREF(self);
      return NULL;
    }
    ran += r;
  }
  c->advancing = 0;
  c->manual_ns = target_ns;
  pw_driver_lock(d);
  pw_wheel_advance(&d->wheel, last);
  pw_driver_unlock(d);
  Py_DECREF(self);
  return PyLong_FromSsize_t(ran);
}

static PyObject *manual_advance(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
  PyObject *arg = one_arg("advance", "seconds", args, nargs, kwnames);
  int64_t delta, target;
  if (!arg || !manual_core(self) || seconds_to_ns(arg, "seconds", &delta) < 0)
    return NULL;
  if (delta < 0) {
    PyErr_SetString(PyExc_ValueError, "time cannot go backwards");
    return NULL;
  }
  if (add_time(self->core->manual_ns, delta, "seconds", &target) < 0)
    return NULL;
  return manual_run_until(self, target);
}

static PyObject *manual_advance_to(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  PyObject *arg = one_arg("advance_to", "when", args, nargs, kwnames);
  int64_t when;
  if (!arg || !manual_core(self) || target_to_ns(arg, "when", true, &when) < 0)
    return NULL;
  return manual_run_until(self, when);
}

/* Whether set-aside timers wait to run: they are due now. */
static bool leftovers_pending(core *c) { return c->drv.batch_live > 0; }

/* Wheel time at which the next callback runs: its tick, or now if overdue. */
static int64_t manual_next_ns(core *c) {
  if (leftovers_pending(c))
    return c->manual_ns;
  pw_driver_lock(&c->drv);
  pw_tick_t next = pw_wheel_next(&c->drv.wheel);
  int64_t ns = NEVER_NS;
  if (next != PW_TICK_MAX && next == cut_tick(c->drv.tick_ns))
    ns = exact_min_locked(c, next, false, 0); /* see manual_run_until */
  pw_driver_unlock(&c->drv);
  if (next == PW_TICK_MAX || next > (pw_tick_t)(MAX_NS / c->drv.tick_ns)) {
    if (ns == NEVER_NS)
      return NEVER_NS;
  } else
    ns = (int64_t)next * c->drv.tick_ns;
  return ns > c->manual_ns ? ns : c->manual_ns;
}

static PyObject *manual_next_deadline(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!manual_core(self))
    return NULL;
  int64_t ns = manual_next_ns(self->core);
  if (ns == NEVER_NS || self->core->closed)
    Py_RETURN_NONE;
  return PyFloat_FromDouble(s_of_ns(ns));
}

static PyObject *manual_advance_to_next(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!manual_core(self))
    return NULL;
  int64_t ns = manual_next_ns(self->core);
  if (ns == NEVER_NS || self->core->closed)
    return PyLong_FromLong(0);
  return manual_run_until(self, ns);
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
 * whose exact deadline is <= target_ns.  The caller checked the target. */
static void collect_exact(core *c, int64_t target_ns) {
  pw_driver *d = &c->drv;
  put_back_leftovers(c);
  c->manual_ns = target_ns;
  if (c->closed)
    return;
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
}

/* The least exact deadline of the pending timers, or NEVER_NS: overdue ones
 * included, so that equally overdue timers give a loop the same timeout, the
 * stock loop's max(0, when - time()).  The least of the wheel's lies in its
 * earliest tick; set-aside timers that did not run are pending too. */
static int64_t next_when_ns(core *c) {
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
  return w < r ? w : r;
}

static PyObject *manual_next_when(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!manual_core(self))
    return NULL;
  int64_t ns = next_when_ns(self->core);
  if (ns == NEVER_NS || self->core->closed)
    Py_RETURN_NONE;
  return PyFloat_FromDouble(ns_to_s(ns));
}

static int parse_target(WheelObject *self, const char *fname, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames, int64_t *when) {
  PyObject *arg = one_arg(fname, "when", args, nargs, kwnames);
  if (!arg || !manual_core(self) || target_to_ns(arg, "when", false, when) < 0)
    return -1;
  return check_target(self->core, *when);
}

static PyObject *manual_collect_due(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
  int64_t when;
  if (parse_target(self, "collect_due", args, nargs, kwnames, &when) < 0)
    return NULL;
  core *c = self->core;
  collect_exact(c, when);
  pw_driver_lock(&c->drv);
  size_t n = c->drv.batch_n - c->drv.batch_pos;
  pw_driver_unlock(&c->drv);
  return PyLong_FromSize_t(n);
}

static PyObject *manual_stock_handles(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  self->core->stock = true;
  Py_RETURN_NONE;
}

static PyObject *manual_run_collected(WheelObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!manual_core(self) || check_not_advancing(self->core) < 0)
    return NULL;
  Py_ssize_t r = run_batch_here(self);
  return r < 0 ? NULL : PyLong_FromSsize_t(r);
}

/* The event-loop flavour of advance: time jumps to `when` and every timer
 * whose exact deadline is <= when runs, as one batch, as on a threaded
 * wheel; what those callbacks schedule, even for a time already past, waits
 * for the next call.  A loop calling this once per iteration can never be
 * starved by a timer that keeps rescheduling itself at zero delay. */
static PyObject *manual_run_due(WheelObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
  int64_t when;
  if (parse_target(self, "run_due", args, nargs, kwnames, &when) < 0)
    return NULL;
  collect_exact(self->core, when);
  Py_ssize_t r = run_batch_here(self);
  return r < 0 ? NULL : PyLong_FromSsize_t(r);
}

/* ------------------------------------------------------------------ */
/* process-wide hooks: atexit and fork (registered by pywheel/__init__) */

static PyObject *mod_shutdown(PyObject *m, PyObject *arg) {
  double grace = PyFloat_AsDouble(arg);
  if (grace == -1.0 && PyErr_Occurred())
    return NULL;
  int64_t grace_ns = !(grace > 0) ? 0 : grace >= 9e9 ? NEVER_NS : (int64_t)(grace * 1e9);
  core **all = registry_snapshot();
  if (!all)
    return NULL;
  PyInterpreterState *me = PyInterpreterState_Get();
  ((modstate *)PyModule_GetState(m))->exited = true;
  for (core **p = all; *p; p++) {
    core *c = *p;
    if (c->interp != me)
      continue; /* another interpreter's wheel: its own atexit stops it */
    if (c->owner && !c->closed) {
      PyObject *owner = Py_NewRef(c->owner);
      close_core(c, "the interpreter is exiting", false);
      Py_DECREF(owner);
    } else if (!c->manual) {
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
    core_decref(*p);
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
  pthread_mutex_lock(&wait_mu);
  pthread_mutex_lock(&registry_mu);
  for (core *c = registry.reg_next; c != &registry; c = c->reg_next)
    pw_driver_lock(&c->drv);
}

static void atfork_parent(void) {
  for (core *c = registry.reg_next; c != &registry; c = c->reg_next)
    pw_driver_unlock(&c->drv);
  pthread_mutex_unlock(&registry_mu);
  pthread_mutex_unlock(&wait_mu);
}

static void atfork_child(void) {
  pthread_mutex_init(&wait_mu, NULL);
  pthread_mutex_init(&registry_mu, NULL);
  for (core *c = registry.reg_next; c != &registry; c = c->reg_next) {
    c->forked = true;
    c->waiting_for = NULL; /* whoever waited is gone, or is this thread */
    c->thread_alive_at_fork = c->drv.started && !c->drv.exited;
    c->fork_own_thread = c->thread_alive_at_fork && pthread_equal(c->drv.thread, pthread_self());
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

static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static PyObject *mod_after_fork_child(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
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
        batch_put_back(c);
        c->advancing = 0;
        /* entered by that thread, so never again enterable: start afresh */
        c->empty_ctx = NULL;
      }
      continue;
    }
    if (c->fork_own_thread) {
      /* fork() was called by one of this wheel's callbacks: this thread is
       * the wheel's, and its runner finishes the batch as usual. */
      if (c->owner)
        close_core(c, "the process forked from one of its callbacks", false);
      continue;
    }
    c->tstate = NULL; /* the runtime deleted it with its thread */
    if (c->owner) {
      PyObject *owner = Py_NewRef(c->owner);
      close_core(c, "it belongs to the parent process; create a new Wheel in the child", false);
      Py_DECREF(owner);
    }
    c->running = NULL; /* its references belonged to the vanished thread */
    /* So did the batch's: close_core took its own for the unstarted ones. */
    for (size_t i = c->drv.batch_pos; i < c->drv.batch_n; i++)
      Py_DECREF(handle_of(c->drv.batch[i]));
    c->drv.batch_pos = c->drv.batch_n;
    c->drv.batch_live = 0;
    if (c->thread_alive_at_fork)
      core_decref(c); /* the vanished thread's reference */
  }
  for (core **p = all; *p; p++)
    core_decref(*p);
  PyMem_RawFree(all);
  Py_RETURN_NONE;
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

static PyType_Spec wheel_spec = {
    .name = "pywheel.Wheel",
    .basicsize = sizeof(WheelObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = wheel_slots,
};

static PyType_Slot manual_slots[] = {
    {Py_tp_new, manual_new},
    {Py_tp_methods, manual_methods},
    {Py_tp_doc, "ManualWheel(tick=0.001, *, start=0.0)\n--\n\n"
                "The same wheel without a thread: time moves only through advance() and "
                "advance_to(), which run due callbacks on the caller's thread."},
    {0, NULL},
};

static PyType_Spec manual_spec = {
    .name = "pywheel.ManualWheel",
    .basicsize = sizeof(WheelObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, /* GC and traverse: inherited */
    .slots = manual_slots,
};

static PyMethodDef module_methods[] = {
    {"_shutdown", mod_shutdown, METH_O, "atexit hook: close every wheel, wait out a grace."},
    {"_after_fork_child", mod_after_fork_child, METH_NOARGS, NULL},
    {"_fail_alloc_after", mod_fail_alloc_after, METH_O,
     "Test hook: make the n-th next handle allocation fail (0 disables)."},
    {"_batch_live", mod_batch_live, METH_O,
     "Test hook: (kept count, scanned count) of a wheel's unstarted batch entries."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m) {
  /* fork and exit are process-wide, and so are the wheel threads: one
   * interpreter owns them.  (3.12+ says so with Py_mod_multiple_interpreters.) */
  if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
    PyErr_SetString(PyExc_ImportError, "pywheel._core cannot be loaded in a subinterpreter");
    return -1;
  }
  static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
  pthread_once(&atfork_once, register_atfork);
  modstate *st = PyModule_GetState(m);
  st->handle_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &handle_spec, NULL);
  if (!st->handle_type || PyModule_AddType(m, st->handle_type) < 0)
    return -1;
  st->wheel_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &wheel_spec, NULL);
  if (!st->wheel_type || PyModule_AddType(m, st->wheel_type) < 0)
    return -1;
  st->manual_type =
      (PyTypeObject *)PyType_FromModuleAndSpec(m, &manual_spec, (PyObject *)st->wheel_type);
  if (!st->manual_type || PyModule_AddType(m, st->manual_type) < 0)
    return -1;
  return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg) {
  modstate *st = PyModule_GetState(m);
  Py_VISIT(st->handle_type);
  Py_VISIT(st->wheel_type);
  Py_VISIT(st->manual_type);
  return 0;
}

static int module_clear(PyObject *m) {
  modstate *st = PyModule_GetState(m);
  Py_CLEAR(st->handle_type);
  Py_CLEAR(st->wheel_type);
  Py_CLEAR(st->manual_type);
  return 0;
}

static void module_free(void *m) { module_clear(m); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pywheel._core",
    .m_doc = "The C timing wheel, its native driver thread, and the Python binding.",
    .m_size = sizeof(modstate),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void) { return PyModuleDef_Init(&moddef); }
