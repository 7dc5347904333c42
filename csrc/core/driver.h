/*
 * driver.h -- one native thread that sleeps until a wheel's next deadline.
 *
 * The thread sleeps on its wake-up (platform.h) until the earliest deadline
 * by the clock time.monotonic() reads (pw_clock_ns), or indefinitely when
 * nothing is pending: an idle driver makes no wake-ups at all.  Only a newly scheduled earliest
 * deadline, or a stop, signals it.  On waking it pops every due timer into a batch, drops its mutex
 * and hands the batch to a hook.  It knows nothing of Python. On POSIX every signal is blocked
 * while it waits, so signals go to the threads that expect them; the hook runs with the creating
 * thread's mask, which processes started from it then inherit (Windows has no masks).
 *
 * The same struct serves a wheel without a thread (manual time): the owner
 * then calls pw_driver_collect_locked() itself.
 *
 * Locking: `mu` guards the wheel, the batch array while it is being filled,
 * and every field below but the hooks.  Hooks are called without `mu`.
 */
#ifndef PW_DRIVER_H
#define PW_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "platform.h"
#include "wheel.h"

typedef struct pw_driver pw_driver;

typedef struct pw_driver_hooks {
  void (*start)(pw_driver *d, void *arg); /* first thing on the new thread */
  void (*run)(pw_driver *d, void *arg);   /* a batch is ready in d->batch */
  void (*stop)(pw_driver *d, void *arg);  /* the loop ended; still on the thread */
  void (*exit)(pw_driver *d, void *arg);  /* last call: d may be freed by it */
  void *arg;
} pw_driver_hooks;

struct pw_driver {
  pw_mutex mu;
  pw_wake wake;    /* thread waits here: new earliest deadline or stop */
  pw_cond exit_cv; /* closers wait here for `exited` */
  pw_wheel wheel;
  int64_t tick_ns;
  pw_tick_t sleep_until; /* tick the thread sleeps toward, 0 while it is awake */
  bool started, stop, exited;
  pw_thread thread;     /* valid once started */
  pw_sigmask wait_mask; /* every signal: while waiting and collecting */
  pw_sigmask run_mask;  /* the creator's: while the run and stop hooks run */
  /* Due timers popped by the last collection, in (tick, seq) order.  The
   * owner consumes batch[batch_pos..batch_n); the array is rewritten only by
   * the next collection. */
  pw_timer **batch;
  size_t batch_n, batch_pos, batch_cap;
  /* Entries of batch[batch_pos..batch_n) still the owner's to run: set to
   * the count by each collection and append, kept by the owner after (it
   * knows which ones it gave up), so that nothing counts them by a scan. */
  size_t batch_live;
  /* Set by the owner: a collection stops after at most `chunk` timers (0:
   * only at the soft maximum, at a tick boundary).  Inside a tick it stops
   * only between two timers `last` and `next` (next the first left in the
   * wheel) for which `may_cut(last, next, hooks.arg)` says that nothing
   * left in the wheel comes before `last` in the owner's final order, so
   * that the prefix can run first; it backs off to the last such point
   * within the chunk, and only a tick with none there (NULL: every tick)
   * makes a part longer than `chunk`, ending at the first such point. */
  size_t chunk;
  bool (*may_cut)(const pw_timer *last, const pw_timer *next, void *arg);
  bool more;            /* the last collection stopped with timers due by `collect_to` left */
  pw_tick_t collect_to; /* the `now` of the last collection */
  uint64_t wakeups, batches, max_batch;
  pw_driver_hooks hooks;
};

int pw_driver_init(pw_driver *d, int64_t tick_ns, int64_t now_ns, const pw_driver_hooks *hooks);
/* Sets up the mutex, condition variables and an empty wheel at now_ns.
 * Returns 0, -EINVAL for tick_ns < 1, or -ENOMEM / another -errno. */

int pw_driver_start(pw_driver *d);
/* Starts the detached thread (see the signal masks above).  0 or -errno. */

void pw_driver_fini(pw_driver *d);
/* Frees what init set up.  The thread must have exited or never started. */

static inline void pw_driver_lock(pw_driver *d) { pw_mutex_lock(&d->mu); }
static inline void pw_driver_unlock(pw_driver *d) { pw_mutex_unlock(&d->mu); }

void pw_driver_add_locked(pw_driver *d, pw_timer *t, pw_tick_t deadline);
/* Schedules t; signals the thread only if t is earlier than what it sleeps
 * toward.  Caller holds mu. */

void pw_driver_move_locked(pw_driver *d, pw_timer *t, pw_tick_t deadline);
/* Moves a linked timer to a new deadline (pw_wheel_move), signalling the
 * thread as pw_driver_add_locked does.  Caller holds mu. */

size_t pw_driver_collect_locked(pw_driver *d, pw_tick_t now);
/* Advances the wheel to `now` and pops every due timer into d->batch, or
 * the first `chunk` of them (see above); for a very large set without a
 * chunk, a prefix ending at a tick boundary.  Returns the count.  Caller
 * holds mu. */

size_t pw_driver_collect_rest(pw_driver *d);
/* If the last collection stopped early (`more`) and no stop was asked for,
 * takes mu and collects the next part of the same due set; returns the
 * count (0 if nothing).  For the run hook, between two parts of one large
 * expiry: the first callbacks need not wait for the whole set to be
 * gathered.  Takes and releases mu itself. */

bool pw_driver_batch_append_locked(pw_driver *d, pw_timer *t);
/* Appends an unlinked timer to the batch after the last collection's,
 * growing the array; false (nothing changed) if it cannot grow.  Caller holds
 * mu.  For an owner that hands out timers by a rule of its own. */

void pw_driver_stop(pw_driver *d);
/* Asks the thread to leave its loop after the batch it is running. */

int pw_driver_wait_exited(pw_driver *d, int64_t timeout_ns);
/* Waits until the thread has exited, at most timeout_ns (< 0: no limit).
 * 0, or -ETIMEDOUT.  Never call it on the driver's own thread. */

void pw_driver_after_fork_child(pw_driver *d);
/* In a forked child: fresh synchronisation objects; the thread, which does
 * not exist here, counts as stopped and exited. */

static inline pw_tick_t pw_tick_floor(int64_t ns, int64_t tick_ns) {
  return ns <= 0 ? 0 : (pw_tick_t)(ns / tick_ns);
}
/* The tick that is current at ns. */

static inline pw_tick_t pw_tick_ceil(int64_t ns, int64_t tick_ns) {
  return ns <= 0 ? 0 : (pw_tick_t)(ns / tick_ns) + (ns % tick_ns != 0);
}
/* The first tick boundary at or after ns: a deadline's tick. */

#endif /* PW_DRIVER_H */
