/*
 * platform_win32.c -- platform.h on Windows: SRW locks, condition variables
 * and the driver's wake-up, threads, the clock, aligned pages.  Compiles to
 * nothing elsewhere.  Tested by `make windows-check` (zig's cross-compiler,
 * the core's C tests under wine), never on a Windows machine here.
 *
 * The driver's wake-up is not a condition variable here.  A
 * CONDITION_VARIABLE's timed wait takes whole milliseconds and ends on the
 * system timer's interrupt: 15.6 ms by default (1 ms only while some process
 * holds timeBeginPeriod(1)), so a 1 ms timer would fire up to 16 ms late.
 * The driver's thread, its only waiter, waits instead on an auto-reset event
 * (the signal) and a waitable timer created with
 * CREATE_WAITABLE_TIMER_HIGH_RESOLUTION (Windows 10 1803 and later, what
 * CPython 3.11+'s time.sleep() uses for the same reason), armed for the
 * deadline in 100 ns units; where that flag is refused, an ordinary
 * waitable timer (the system tick again).  An event is sticky: a signal
 * between the unlock and the wait is not lost, it ends the wait at once.
 * The other condition variables (a closer waiting for the thread to leave)
 * are CONDITION_VARIABLEs with millisecond waits: their lateness is a
 * close(timeout)'s, bounded and harmless.
 *
 * Every timed wait here may end before the deadline by the clock (a
 * timeout rounds, the tick count steps): it then reports 0, a spurious
 * wake-up, and the caller, which waits in a loop, waits again; -ETIMEDOUT
 * only once pw_clock_ns() has reached the deadline.
 */
#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <malloc.h>
#include <process.h>

#include "platform.h"

#ifndef CREATE_WAITABLE_TIMER_HIGH_RESOLUTION
#define CREATE_WAITABLE_TIMER_HIGH_RESOLUTION 0x00000002
#endif

_Static_assert(sizeof(pw_mutex) == sizeof(SRWLOCK), "pw_mutex is not an SRWLOCK's size");
_Static_assert(sizeof(pw_cond) == sizeof(CONDITION_VARIABLE), "pw_cond is not a CV's size");
_Static_assert(sizeof(pw_once) == sizeof(INIT_ONCE), "pw_once is not an INIT_ONCE's size");
_Static_assert(sizeof(HANDLE) == sizeof(void *), "a HANDLE is not a pointer");

#define SRW(mu) ((SRWLOCK *)&(mu)->srw)
#define CV(cv) ((CONDITION_VARIABLE *)&(cv)->cv)

/* ------------------------------------------------------------------ */
/* the clock                                                           */

#ifdef PW_WIN_TICK_COUNT
/* CPython 3.11 and 3.12: time.monotonic() is GetTickCount64() (ms, which
 * steps every 15.6 ms by default) times 10**6. */
int64_t pw_clock_ns(void) { return (int64_t)GetTickCount64() * 1000000; }
#else
/* CPython 3.13+: QueryPerformanceCounter, scaled to ns as
 * _PyTimeFraction_Mul does: the integer part of ticks * 1e9 / frequency,
 * computed in two parts so that it does not overflow (exact for any
 * frequency below 9.2 GHz; Windows reports 10 MHz on every current
 * version).  The same reading gives the same integer as time.monotonic_ns(). */
int64_t pw_clock_ns(void) {
  LARGE_INTEGER f, t;
  QueryPerformanceFrequency(&f); /* cannot fail since XP; constant until reboot */
  QueryPerformanceCounter(&t);
  int64_t freq = f.QuadPart, ticks = t.QuadPart;
  return ticks / freq * 1000000000 + ticks % freq * 1000000000 / freq;
}
#endif

/* Milliseconds for a wait of left_ns > 0: rounded up, at least 1, below
 * INFINITE (a longer wait ends early and is waited again). */
static DWORD wait_ms(int64_t left_ns) {
  int64_t ms = left_ns / 1000000 + (left_ns % 1000000 != 0);
  return ms > 86400000 ? 86400000 : (DWORD)ms;
}

void pw_sleep_ns(int64_t ns) {
  int64_t until = pw_clock_ns() + ns, left;
  while ((left = until - pw_clock_ns()) > 0)
    Sleep(wait_ms(left));
}

/* ------------------------------------------------------------------ */
/* mutexes and condition variables                                     */

int pw_mutex_init(pw_mutex *mu) {
  InitializeSRWLock(SRW(mu));
  return 0;
}
void pw_mutex_destroy(pw_mutex *mu) { (void)mu; /* an SRWLOCK holds nothing */ }
void pw_mutex_lock(pw_mutex *mu) { AcquireSRWLockExclusive(SRW(mu)); }
void pw_mutex_unlock(pw_mutex *mu) { ReleaseSRWLockExclusive(SRW(mu)); }

int pw_cond_init(pw_cond *cv) {
  InitializeConditionVariable(CV(cv));
  return 0;
}
void pw_cond_destroy(pw_cond *cv) { (void)cv; }
void pw_cond_signal(pw_cond *cv) { WakeConditionVariable(CV(cv)); }
void pw_cond_broadcast(pw_cond *cv) { WakeAllConditionVariable(CV(cv)); }
void pw_cond_wait(pw_cond *cv, pw_mutex *mu) {
  SleepConditionVariableSRW(CV(cv), SRW(mu), INFINITE, 0);
}

int pw_cond_wait_until(pw_cond *cv, pw_mutex *mu, int64_t until_ns) {
  int64_t left = until_ns - pw_clock_ns();
  if (left <= 0)
    return -ETIMEDOUT;
  if (SleepConditionVariableSRW(CV(cv), SRW(mu), wait_ms(left), 0))
    return 0;
  return pw_clock_ns() >= until_ns ? -ETIMEDOUT : 0;
}

/* ------------------------------------------------------------------ */
/* the driver's wake-up: an event and a high-resolution timer          */

int pw_wake_init(pw_wake *w) {
  w->event = CreateEventW(NULL, FALSE, FALSE, NULL);
  if (!w->event)
    return -ENOMEM;
  w->timer =
      CreateWaitableTimerExW(NULL, NULL, CREATE_WAITABLE_TIMER_HIGH_RESOLUTION, TIMER_ALL_ACCESS);
  if (!w->timer) /* before Windows 10 1803: the flag is refused */
    w->timer = CreateWaitableTimerExW(NULL, NULL, 0, TIMER_ALL_ACCESS);
  if (!w->timer) {
    CloseHandle(w->event);
    return -ENOMEM;
  }
  return 0;
}

void pw_wake_destroy(pw_wake *w) {
  CloseHandle(w->timer);
  CloseHandle(w->event);
}

void pw_wake_signal(pw_wake *w) { SetEvent(w->event); }

void pw_wake_wait(pw_wake *w, pw_mutex *mu) {
  pw_mutex_unlock(mu);
  WaitForSingleObject(w->event, INFINITE);
  pw_mutex_lock(mu);
}

int pw_wake_wait_until(pw_wake *w, pw_mutex *mu, int64_t until_ns) {
  int64_t left = until_ns - pw_clock_ns();
  if (left <= 0)
    return -ETIMEDOUT;
  LARGE_INTEGER due; /* negative: relative, in 100 ns units, rounded up */
  due.QuadPart = -(left / 100 + (left % 100 != 0));
  HANDLE both[2] = {w->event, w->timer};
  DWORD r;
  pw_mutex_unlock(mu);
  /* Arming resets the timer: a firing left from an earlier wait that the
   * event ended is forgotten. */
  if (SetWaitableTimer(w->timer, &due, 0, NULL, NULL, FALSE))
    r = WaitForMultipleObjects(2, both, FALSE, INFINITE);
  else
    r = WaitForSingleObject(w->event, wait_ms(left)) == WAIT_TIMEOUT ? WAIT_OBJECT_0 + 1 : 0;
  pw_mutex_lock(mu);
  if (r != WAIT_OBJECT_0 + 1)
    return 0; /* signalled */
  return pw_clock_ns() >= until_ns ? -ETIMEDOUT : 0;
}

/* ------------------------------------------------------------------ */
/* threads, once, pages                                                */

int pw_thread_create(pw_thread *t, pw_thread_fn fn, void *arg, bool detached) {
  unsigned id;
  uintptr_t h = _beginthreadex(NULL, 0, fn, arg, 0, &id);
  if (!h)
    return errno ? -errno : -EAGAIN;
  if (detached) {
    CloseHandle((HANDLE)h);
    h = 0;
  }
  t->handle = (void *)h;
  t->id = id;
  return 0;
}

int pw_thread_join(pw_thread t) {
  if (!t.handle)
    return -EINVAL;
  DWORD r = WaitForSingleObject(t.handle, INFINITE);
  CloseHandle(t.handle);
  return r == WAIT_OBJECT_0 ? 0 : -EINVAL;
}

pw_thread pw_thread_self(void) { return (pw_thread){NULL, GetCurrentThreadId()}; }

typedef struct once_call {
  void (*fn)(void);
} once_call;

static BOOL CALLBACK once_trampoline(PINIT_ONCE once, PVOID param, PVOID *ctx) {
  (void)once, (void)ctx;
  ((once_call *)param)->fn();
  return TRUE;
}

int pw_call_once(pw_once *o, void (*fn)(void)) {
  once_call call = {fn};
  return InitOnceExecuteOnce((INIT_ONCE *)&o->once, once_trampoline, &call, NULL) ? 0 : -EINVAL;
}

void *pw_pages_alloc(size_t align, size_t size) { return _aligned_malloc(size, align); }

void pw_pages_free(void *p) { _aligned_free(p); }

#else
typedef int pw__platform_win32_unused; /* ISO C: a translation unit declares something */
#endif
