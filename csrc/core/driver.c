/* driver.c -- see driver.h for the contract. */
#define _GNU_SOURCE /* platform.h: POSIX declarations under -std=c11 */
#include "driver.h"

#include <errno.h>
#include <stdlib.h>

/* Never fewer slots than this, so a collection always makes progress even
 * when growing the array fails. */
#define BATCH_MIN 256
/* Above this many timers a collection stops at the next tick boundary: the
 * rest come in the next batch, so one batch never pins an unbounded array. */
#define BATCH_SOFT_MAX ((size_t)1 << 16)

static int init_sync(pw_driver *d) {
  int r = pw_mutex_init(&d->mu);
  if (r)
    return r;
  if ((r = pw_wake_init(&d->wake)))
    goto fail_mu;
  if ((r = pw_cond_init(&d->exit_cv)))
    goto fail_wake;
  return 0;
fail_wake:
  pw_wake_destroy(&d->wake);
fail_mu:
  pw_mutex_destroy(&d->mu);
  return r;
}

int pw_driver_init(pw_driver *d, int64_t tick_ns, int64_t now_ns, const pw_driver_hooks *hooks) {
  if (tick_ns < 1)
    return -EINVAL;
  d->batch = malloc(BATCH_MIN * sizeof *d->batch);
  if (!d->batch)
    return -ENOMEM;
  int r = init_sync(d);
  if (r) {
    free(d->batch);
    d->batch = NULL;
    return r;
  }
  pw_wheel_init(&d->wheel, pw_tick_floor(now_ns, tick_ns));
  d->tick_ns = tick_ns;
  d->sleep_until = 0;
  d->started = d->stop = d->exited = false;
  d->batch_n = d->batch_pos = d->batch_live = 0;
  d->batch_cap = BATCH_MIN;
  d->chunk = 0;
  d->may_cut = NULL;
  d->more = false;
  d->collect_to = 0;
  d->wakeups = d->batches = d->max_batch = 0;
  d->hooks = *hooks;
  return 0;
}

void pw_driver_fini(pw_driver *d) {
  pw_cond_destroy(&d->exit_cv);
  pw_wake_destroy(&d->wake);
  pw_mutex_destroy(&d->mu);
  free(d->batch);
  d->batch = NULL;
}

/* sleep_until is 0 while the thread is awake: it looks at the wheel again
 * before it sleeps, so only a sleeping thread needs the signal, and only once
 * for each earlier target. */
static void wake_for(pw_driver *d, pw_tick_t deadline) {
  if (deadline < d->sleep_until) {
    d->sleep_until = deadline;
    pw_wake_signal(&d->wake);
  }
}

void pw_driver_add_locked(pw_driver *d, pw_timer *t, pw_tick_t deadline) {
  pw_wheel_add(&d->wheel, t, deadline);
  wake_for(d, deadline);
}

void pw_driver_move_locked(pw_driver *d, pw_timer *t, pw_tick_t deadline) {
  pw_wheel_move(&d->wheel, t, deadline);
  wake_for(d, deadline);
}

/* Room for one more timer at batch[n]: false if the array cannot grow. */
static bool batch_room(pw_driver *d, size_t n) {
  if (n < d->batch_cap)
    return true;
  pw_timer **grown = realloc(d->batch, 2 * d->batch_cap * sizeof *grown);
  if (!grown)
    return false;
  d->batch = grown;
  d->batch_cap *= 2;
  return true;
}

/* Whether the part may end between batch[i - 1] and `next`. */
static bool cut_ok(pw_driver *d, size_t i, const pw_timer *next) {
  return i > 0 && d->may_cut && d->may_cut(d->batch[i - 1], next, d->hooks.arg);
}

/* Ends a full part at the last point in batch[1..*n] where the owner allows
 * a cut, given `next`, the first timer that would follow: the timers after
 * that point (next last, then back to the cut) go back to the head of the
 * expired list in their places, O(1) each.  False (nothing changed) if no
 * point allows it.  The walk back is paid once per part. */
static bool cut_back(pw_driver *d, size_t *n, pw_timer *next) {
  size_t i = *n;
  const pw_timer *after = next;
  while (i > 0 && !cut_ok(d, i, after))
    after = d->batch[--i];
  if (i == 0)
    return false;
  pw_wheel_put(&d->wheel, next);
  while (*n > i)
    pw_wheel_put(&d->wheel, d->batch[--*n]);
  return true;
}

/* Pops every expired timer into the batch.  False if it stopped early: the
 * array could not grow, or the chunk is full and the owner allows a cut
 * (see may_cut); the rest stays expired in the wheel for the next part. */
static bool pop_expired(pw_driver *d, size_t *n, size_t limit) {
  pw_wheel *w = &d->wheel;
  while (pw_wheel_next(w) <= w->now) {
    if (!batch_room(d, *n))
      return false;
    pw_timer *t = pw_wheel_pop(w);
    if (*n == limit && cut_back(d, n, t))
      return false;
    if (*n > limit && cut_ok(d, *n, t)) { /* a tick that allowed no cut before */
      pw_wheel_put(w, t);
      return false;
    }
    d->batch[(*n)++] = t;
  }
  return true;
}

bool pw_driver_batch_append_locked(pw_driver *d, pw_timer *t) {
  if (!batch_room(d, d->batch_n))
    return false;
  d->batch[d->batch_n++] = t;
  d->batch_live++;
  return true;
}

/*
 * A wheel that fell behind is walked one due tick at a time, as a manual
 * clock would be: each step expires a single tick's timers, which the wheel
 * hands out already in order, where one jump over many ticks would mix the
 * slots of several levels on the expired list and make it sort everything
 * still expired, at every batch, for as long as it stays behind.
 */
size_t pw_driver_collect_locked(pw_driver *d, pw_tick_t now) {
  pw_wheel *w = &d->wheel;
  size_t n = 0, limit = d->chunk ? d->chunk : BATCH_SOFT_MAX;
  d->more = false;
  d->collect_to = now;
  for (;;) {
    pw_tick_t next = pw_wheel_next(w);
    if (next > now) {
      pw_wheel_advance(w, now); /* nothing more is due: time catches up */
      break;
    }
    if (next > w->now) {
      if (n >= limit) {
        d->more = true; /* at a tick boundary: the rest make the next part */
        break;
      }
      pw_wheel_advance(w, next);
    }
    if (!pop_expired(d, &n, d->chunk ? limit : SIZE_MAX)) {
      d->more = true;
      break;
    }
  }
  d->batch_n = d->batch_live = n;
  d->batch_pos = 0;
  if (n) {
    d->batches++;
    if (n > d->max_batch)
      d->max_batch = n;
  }
  return n;
}

size_t pw_driver_collect_rest(pw_driver *d) {
  size_t n = 0;
  pw_mutex_lock(&d->mu);
  if (d->more && !d->stop)
    n = pw_driver_collect_locked(d, d->collect_to);
  pw_mutex_unlock(&d->mu);
  return n;
}

/* The clock's time of a tick in ns, or false if it does not fit. */
static bool tick_time(pw_tick_t tick, int64_t tick_ns, int64_t *ns) {
  if (tick > (pw_tick_t)(INT64_MAX / tick_ns))
    return false;
  *ns = (int64_t)tick * tick_ns;
  return true;
}

static pw_thread_ret PW_THREAD_CALL thread_main(void *arg) {
  pw_driver *d = arg;
  if (d->hooks.start)
    d->hooks.start(d, d->hooks.arg);
  pw_mutex_lock(&d->mu);
  while (!d->stop) {
    pw_tick_t now = pw_tick_floor(pw_clock_ns(), d->tick_ns);
    pw_tick_t next = pw_wheel_next(&d->wheel);
    if (next <= now) {
      pw_driver_collect_locked(d, now);
      pw_mutex_unlock(&d->mu);
      /* Callbacks run with the creator's signal mask, so that a process
       * they start does not inherit "every signal blocked". */
      pw_sigmask_swap(&d->run_mask, NULL);
      d->hooks.run(d, d->hooks.arg);
      pw_sigmask_swap(&d->wait_mask, NULL);
      pw_mutex_lock(&d->mu);
      continue;
    }
    pw_wheel_advance(&d->wheel, now);
    int64_t until;
    d->sleep_until = next;
    if (next != PW_TICK_MAX && tick_time(next, d->tick_ns, &until))
      pw_wake_wait_until(&d->wake, &d->mu, until);
    else
      pw_wake_wait(&d->wake, &d->mu);
    d->sleep_until = 0;
    d->wakeups++;
  }
  pw_mutex_unlock(&d->mu);
  pw_sigmask_swap(&d->run_mask, NULL);
  if (d->hooks.stop)
    d->hooks.stop(d, d->hooks.arg);
  pw_mutex_lock(&d->mu);
  d->exited = true;
  pw_cond_broadcast(&d->exit_cv);
  pw_mutex_unlock(&d->mu);
  if (d->hooks.exit)
    d->hooks.exit(d, d->hooks.arg);
  return 0;
}

int pw_driver_start(pw_driver *d) {
  pw_sigmask all, old;
  pw_thread th;
  /* The thread inherits this mask: signals go to the threads that expect
   * them (Python handles them in the main thread only). */
  pw_sigmask_fill(&all);
  pw_sigmask_swap(&all, &old);
  d->wait_mask = all;
  d->run_mask = old;
  d->started = true;
  /* under mu: the thread may read d->thread (a fork handler may) at once */
  pw_mutex_lock(&d->mu);
  int r = pw_thread_create(&th, thread_main, d, true);
  if (!r)
    d->thread = th;
  pw_mutex_unlock(&d->mu);
  pw_sigmask_swap(&old, NULL);
  if (r) {
    d->started = false;
    return r;
  }
  return 0;
}

void pw_driver_stop(pw_driver *d) {
  pw_mutex_lock(&d->mu);
  d->stop = true;
  pw_wake_signal(&d->wake);
  pw_mutex_unlock(&d->mu);
}

int pw_driver_wait_exited(pw_driver *d, int64_t timeout_ns) {
  int64_t until = 0;
  bool limited = timeout_ns >= 0;
  if (limited) {
    until = pw_clock_ns();
    until = timeout_ns > INT64_MAX - until ? INT64_MAX : until + timeout_ns;
  }
  int r = 0;
  pw_mutex_lock(&d->mu);
  while (!d->exited && d->started && r != -ETIMEDOUT) {
    if (limited)
      r = pw_cond_wait_until(&d->exit_cv, &d->mu, until);
    else
      pw_cond_wait(&d->exit_cv, &d->mu);
  }
  bool done = d->exited || !d->started;
  pw_mutex_unlock(&d->mu);
  return done ? 0 : -ETIMEDOUT;
}

void pw_driver_after_fork_child(pw_driver *d) {
  /* The parent's objects may have been copied mid-use (the caller should
   * have held mu across fork); the child starts from fresh ones. */
  init_sync(d);
  d->stop = true;
  d->exited = true;
  d->sleep_until = 0;
}
