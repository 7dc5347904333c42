/*
 * platform_posix.c -- platform.h on POSIX: the clock, condition variables
 * bound to it, threads.  Compiles to nothing on Windows.
 */
#ifndef _WIN32
#define _GNU_SOURCE
#ifdef __APPLE__
#define _DARWIN_C_SOURCE /* clock_gettime_nsec_np, pthread_cond_timedwait_relative_np */
#endif
#include "platform.h"

#include <time.h>

/*
 * Condition variables that wait until a time of the clock time.monotonic()
 * reads.  Where the system has pthread_condattr_setclock (Linux, the BSDs)
 * the variables are bound to CLOCK_MONOTONIC and wait for an absolute time.
 * macOS has no such call (its absolute waits read the wall clock, which may
 * jump), so there a wait is relative, computed from the clock just before
 * it.  `make test-c` also runs the driver's test with the relative waits
 * built on Linux (PW_RELATIVE_WAITS, a day cut to a millisecond), so that
 * path is tested where it cannot run.
 */

#ifdef __APPLE__
/* CPython's monotonic clock there is mach_absolute_time(), which
 * CLOCK_UPTIME_RAW reads in ns. */
int64_t pw_clock_ns(void) { return (int64_t)clock_gettime_nsec_np(CLOCK_UPTIME_RAW); }
#define PW_RELATIVE_WAITS 1
#define timedwait_relative pthread_cond_timedwait_relative_np
#else
int64_t pw_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
#endif

void pw_sleep_ns(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) && errno == EINTR)
    ;
}

#ifdef PW_RELATIVE_WAITS

#ifndef __APPLE__
/* For the test build only: a relative wait from an absolute one on the
 * variable's default clock, CLOCK_REALTIME. */
static int timedwait_relative(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *rel) {
  struct timespec at;
  clock_gettime(CLOCK_REALTIME, &at);
  at.tv_sec += rel->tv_sec;
  at.tv_nsec += rel->tv_nsec;
  if (at.tv_nsec >= 1000000000) {
    at.tv_sec++;
    at.tv_nsec -= 1000000000;
  }
  return pthread_cond_timedwait(cv, mu, &at);
}
#endif

int pw_cond_init(pw_cond *cv) { return -pthread_cond_init(cv, NULL); }

/* A relative wait longer than this is cut to it: the callers wait in a loop
 * that checks what they wait for, and a cut wait that ends reports 0 (a
 * spurious wake-up), never -ETIMEDOUT, which means the deadline passed. */
#ifndef PW_LONGEST_WAIT_NS
#define PW_LONGEST_WAIT_NS ((int64_t)86400 * 1000000000)
#endif

int pw_cond_wait_until(pw_cond *cv, pw_mutex *mu, int64_t until_ns) {
  int64_t left = until_ns - pw_clock_ns();
  if (left <= 0)
    return -ETIMEDOUT;
  bool cut = left > PW_LONGEST_WAIT_NS;
  if (cut)
    left = PW_LONGEST_WAIT_NS;
  struct timespec rel = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
  int r = timedwait_relative(cv, mu, &rel);
  return r == ETIMEDOUT && !cut ? -ETIMEDOUT : 0;
}

#else

int pw_cond_init(pw_cond *cv) {
  pthread_condattr_t ca;
  int r = pthread_condattr_init(&ca);
  if (r)
    return -r;
  if (!(r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)))
    r = pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return -r;
}

int pw_cond_wait_until(pw_cond *cv, pw_mutex *mu, int64_t until_ns) {
  struct timespec until = {.tv_sec = until_ns / 1000000000, .tv_nsec = until_ns % 1000000000};
  return pthread_cond_timedwait(cv, mu, &until) == ETIMEDOUT ? -ETIMEDOUT : 0;
}

#endif

int pw_thread_create(pw_thread *t, pw_thread_fn fn, void *arg, bool detached) {
  pthread_attr_t attr;
  int r = pthread_attr_init(&attr);
  if (r)
    return -r;
  if (detached)
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  r = pthread_create(t, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return -r;
}

int pw_thread_join(pw_thread t) { return -pthread_join(t, NULL); }

#else
typedef int pw__platform_posix_unused; /* ISO C: a translation unit declares something */
#endif
