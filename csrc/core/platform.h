/*
 * platform.h -- what the core and the binding need of the system and the
 * compiler: mutexes, condition variables that wait until a time of
 * pw_clock_ns()'s clock, the driver's wake-up, threads, once, fork hooks,
 * signal masks, aligned pages, and a few compiler builtins.
 *
 * Two implementations: POSIX (pthreads; platform_posix.c) and Win32
 * (platform_win32.c).  Each .c file compiles to nothing on the other
 * platform, so a build lists both.  On POSIX every hot call (lock, unlock,
 * signal, wait) is a static inline wrapper over the pthread call it was
 * before this layer existed: the same code.  On Windows the types are
 * opaque words of the system's own size (checked in platform_win32.c), so
 * that this header does not include <windows.h>, whose macros (near, far,
 * min, max, ...) would leak into every file that includes it.
 *
 * Errors as values: a fallible function returns 0 or a negative errno.
 */
#ifndef PW_PLATFORM_H
#define PW_PLATFORM_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* compiler builtins: GCC and clang (zig's too), or MSVC               */

#if defined(_MSC_VER) && !defined(__clang__)
/* Not compiled here (no MSVC on this machine): written from MSVC's
 * documentation, to be proven by a Windows CI. */
#include <intrin.h>
static inline int pw_clzll(uint64_t x) { /* x != 0 */
  unsigned long i;
  _BitScanReverse64(&i, x);
  return 63 - (int)i;
}
static inline int pw_ctzll(uint64_t x) { /* x != 0 */
  unsigned long i;
  _BitScanForward64(&i, x);
  return (int)i;
}
#if defined(_M_ARM64)
#define PW_PREFETCH(p) __prefetch((const void *)(p))
#else
#define PW_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#endif
#define PW_THREAD_LOCAL __declspec(thread)
#define PW_FALLTHROUGH ((void)0)
/* Atomic loads and stores of plain fields (the binding's closed flag and
 * ManualWheel clock): an aligned volatile access is single-copy atomic;
 * x86-64 orders it as acquire/release once the compiler may not move it,
 * arm64 needs its load-acquire and store-release instructions. */
static inline bool pw_load_acquire_bool(const bool *p) {
#if defined(_M_ARM64)
  return __ldar8((unsigned __int8 volatile *)p) != 0;
#else
  bool v = *(const volatile bool *)p;
  _ReadWriteBarrier();
  return v;
#endif
}
static inline void pw_store_release_bool(bool *p, bool v) {
#if defined(_M_ARM64)
  __stlr8((unsigned __int8 volatile *)p, (unsigned __int8)v);
#else
  _ReadWriteBarrier();
  *(volatile bool *)p = v;
#endif
}
static inline int64_t pw_load_relaxed_i64(const int64_t *p) {
  return __iso_volatile_load64((const volatile __int64 *)p);
}
static inline void pw_store_relaxed_i64(int64_t *p, int64_t v) {
  __iso_volatile_store64((volatile __int64 *)p, v);
}
#else
static inline int pw_clzll(uint64_t x) { return __builtin_clzll(x); } /* x != 0 */
static inline int pw_ctzll(uint64_t x) { return __builtin_ctzll(x); } /* x != 0 */
#define PW_PREFETCH(p) __builtin_prefetch(p)
#define PW_THREAD_LOCAL _Thread_local
#define PW_FALLTHROUGH __attribute__((fallthrough)) /* a switch case falls through */
static inline bool pw_load_acquire_bool(const bool *p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void pw_store_release_bool(bool *p, bool v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline int64_t pw_load_relaxed_i64(const int64_t *p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline void pw_store_relaxed_i64(int64_t *p, int64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
#endif

/* ------------------------------------------------------------------ */
/* the clock                                                           */

int64_t pw_clock_ns(void);
/* time.monotonic_ns()'s clock in nanoseconds, read as CPython reads it:
 * CLOCK_MONOTONIC on Linux and the BSDs; CLOCK_UPTIME_RAW on macOS (which is
 * mach_absolute_time(), CPython's there); on Windows QueryPerformanceCounter
 * scaled as CPython 3.13+ scales it (floor(ticks * 1e9 / frequency)), or,
 * built with PW_WIN_TICK_COUNT (setup.py does for CPython 3.11 and 3.12,
 * whose time.monotonic() reads it), GetTickCount64() in ms * 1e6. */

void pw_sleep_ns(int64_t ns);
/* Sleeps at least ns (for tests and back-offs; the driver never sleeps so). */

#ifndef _WIN32
/* ================================================================== */
/* POSIX                                                               */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

typedef pthread_mutex_t pw_mutex;
typedef pthread_cond_t pw_cond;
typedef pthread_t pw_thread;
typedef pthread_once_t pw_once;
typedef sigset_t pw_sigmask;
#define PW_MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
#define PW_ONCE_INIT PTHREAD_ONCE_INIT

static inline int pw_mutex_init(pw_mutex *mu) { return -pthread_mutex_init(mu, NULL); }
static inline void pw_mutex_destroy(pw_mutex *mu) { pthread_mutex_destroy(mu); }
static inline void pw_mutex_lock(pw_mutex *mu) { pthread_mutex_lock(mu); }
static inline void pw_mutex_unlock(pw_mutex *mu) { pthread_mutex_unlock(mu); }

int pw_cond_init(pw_cond *cv);
/* A condition variable whose timed waits read pw_clock_ns()'s clock. */
static inline void pw_cond_destroy(pw_cond *cv) { pthread_cond_destroy(cv); }
static inline void pw_cond_signal(pw_cond *cv) { pthread_cond_signal(cv); }
static inline void pw_cond_broadcast(pw_cond *cv) { pthread_cond_broadcast(cv); }
static inline void pw_cond_wait(pw_cond *cv, pw_mutex *mu) { pthread_cond_wait(cv, mu); }
int pw_cond_wait_until(pw_cond *cv, pw_mutex *mu, int64_t until_ns);
/* Waits for a signal or until pw_clock_ns() reaches until_ns.  0 (woken,
 * perhaps spuriously or early: the caller re-checks), or -ETIMEDOUT. */

/* The driver's wake-up: one waiter (the driver's thread), any signallers.
 * Here a condition variable as above; on Windows an event and a
 * high-resolution timer (platform_win32.c says why). */
typedef pw_cond pw_wake;
static inline int pw_wake_init(pw_wake *w) { return pw_cond_init(w); }
static inline void pw_wake_destroy(pw_wake *w) { pw_cond_destroy(w); }
static inline void pw_wake_signal(pw_wake *w) { pw_cond_signal(w); }
static inline void pw_wake_wait(pw_wake *w, pw_mutex *mu) { pw_cond_wait(w, mu); }
static inline int pw_wake_wait_until(pw_wake *w, pw_mutex *mu, int64_t until_ns) {
  return pw_cond_wait_until(w, mu, until_ns);
}

typedef void *pw_thread_ret;
#define PW_THREAD_CALL
static inline pw_thread pw_thread_self(void) { return pthread_self(); }
static inline bool pw_thread_equal(pw_thread a, pw_thread b) { return pthread_equal(a, b); }

static inline int pw_call_once(pw_once *o, void (*fn)(void)) { return -pthread_once(o, fn); }
static inline int pw_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  return -pthread_atfork(prepare, parent, child);
}

static inline void pw_sigmask_fill(pw_sigmask *m) { sigfillset(m); }
static inline void pw_sigmask_swap(const pw_sigmask *set, pw_sigmask *old) {
  pthread_sigmask(SIG_SETMASK, set, old);
}

static inline void *pw_pages_alloc(size_t align, size_t size) { return aligned_alloc(align, size); }
static inline void pw_pages_free(void *p) { free(p); }

#else
/* ================================================================== */
/* Win32 (platform_win32.c): opaque words of the system's types        */

typedef struct pw_mutex {
  void *srw; /* SRWLOCK */
} pw_mutex;
typedef struct pw_cond {
  void *cv; /* CONDITION_VARIABLE */
} pw_cond;
typedef struct pw_wake {
  void *event, *timer; /* HANDLEs: an auto-reset event, a waitable timer */
} pw_wake;
typedef struct pw_thread {
  void *handle;     /* HANDLE, NULL for a detached thread or pw_thread_self() */
  unsigned long id; /* DWORD thread id: what pw_thread_equal compares */
} pw_thread;
typedef struct pw_once {
  void *once; /* INIT_ONCE */
} pw_once;
typedef struct pw_sigmask {
  char none; /* Windows has no signal masks: a thread gets no POSIX signals */
} pw_sigmask;
#define PW_MUTEX_INIT {0} /* SRWLOCK_INIT */
#define PW_ONCE_INIT {0}  /* INIT_ONCE_STATIC_INIT */

int pw_mutex_init(pw_mutex *mu);
void pw_mutex_destroy(pw_mutex *mu);
void pw_mutex_lock(pw_mutex *mu);
void pw_mutex_unlock(pw_mutex *mu);

int pw_cond_init(pw_cond *cv);
void pw_cond_destroy(pw_cond *cv);
void pw_cond_signal(pw_cond *cv);
void pw_cond_broadcast(pw_cond *cv);
void pw_cond_wait(pw_cond *cv, pw_mutex *mu);
int pw_cond_wait_until(pw_cond *cv, pw_mutex *mu, int64_t until_ns);

int pw_wake_init(pw_wake *w);
void pw_wake_destroy(pw_wake *w);
void pw_wake_signal(pw_wake *w);
void pw_wake_wait(pw_wake *w, pw_mutex *mu);
int pw_wake_wait_until(pw_wake *w, pw_mutex *mu, int64_t until_ns);

typedef unsigned pw_thread_ret;
#define PW_THREAD_CALL __stdcall
pw_thread pw_thread_self(void);
static inline bool pw_thread_equal(pw_thread a, pw_thread b) { return a.id == b.id; }

int pw_call_once(pw_once *o, void (*fn)(void));
static inline int pw_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  (void)prepare, (void)parent, (void)child;
  return 0; /* no fork on Windows */
}

static inline void pw_sigmask_fill(pw_sigmask *m) { m->none = 0; }
static inline void pw_sigmask_swap(const pw_sigmask *set, pw_sigmask *old) {
  (void)set;
  if (old)
    old->none = 0;
}

void *pw_pages_alloc(size_t align, size_t size);
void pw_pages_free(void *p);

#endif

/* ------------------------------------------------------------------ */
/* threads, both                                                       */

typedef pw_thread_ret(PW_THREAD_CALL *pw_thread_fn)(void *arg);
/* A thread's function: `static pw_thread_ret PW_THREAD_CALL f(void *arg)`,
 * returning 0. */

int pw_thread_create(pw_thread *t, pw_thread_fn fn, void *arg, bool detached);
/* Starts fn(arg) on a new thread, joinable unless detached (a detached
 * thread's *t still serves pw_thread_equal).  0 or -errno. */

int pw_thread_join(pw_thread t);
/* Waits for a joinable thread to end and releases it.  0 or -errno. */

#endif /* PW_PLATFORM_H */
