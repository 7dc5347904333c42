/*
 * test_driver.c -- the driver thread from C, without Python: firing, never
 * early, concurrent adds and cancels from several threads, the lost-wake-up
 * case, idleness, stop, large due sets handed out in parts.  Built plain and under TSan (make
 * tsan).
 *
 * Where a part may end inside a tick is the owner's rule (may_cut): a first,
 * thread-less check feeds groups that allow cuts only at their edges.
 *
 *   ./test_driver [threads] [timers_per_thread] [ms_per_batch]
 *
 * ms_per_batch makes every run hook that slow: the checks must then still
 * wait for the last batch's runs (a loaded machine does the same at random).
 * make test-c also builds it with -DPW_RELATIVE_WAITS (macOS's waits, see
 * platform_posix.c) and every wait cut to 1 ms.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICK_NS 1000000 /* 1 ms */
#define CHUNK 64        /* small: large due sets come in many parts */

typedef struct {
  pw_timer node;
  int64_t due_ns; /* exact deadline */
  atomic_int fired;
  bool cancelled; /* set under the driver mutex */
} item;

typedef struct {
  pw_driver d;
  atomic_long fired, early, batches;
  atomic_int exited_hook;
} fixture;

static fixture fx;
static int slow_run_ms; /* argv[3] */

static void sleep_ms(int ms) { pw_sleep_ns((int64_t)ms * 1000000); }

static void run_part(pw_driver *d) {
  int64_t now = pw_clock_ns();
  for (size_t i = d->batch_pos; i < d->batch_n; i++) {
    item *it = (item *)d->batch[i];
    if (now < it->due_ns)
      atomic_fetch_add(&fx.early, 1);
    atomic_fetch_add(&it->fired, 1);
    atomic_fetch_add(&fx.fired, 1);
  }
  d->batch_pos = d->batch_n;
  atomic_fetch_add(&fx.batches, 1);
}

/* As the binding's hook (binding/batch.c): the batch, then the rest of a large due set part by
 * part (the driver collects at most CHUNK at a time here). */
static void on_run(pw_driver *d, void *arg) {
  (void)arg;
  if (slow_run_ms)
    sleep_ms(slow_run_ms);
  run_part(d);
  while (pw_driver_collect_rest(d))
    run_part(d);
}

static bool cut_anywhere(const pw_timer *last, const pw_timer *next, void *arg) {
  (void)last;
  (void)next;
  (void)arg;
  return true;
}

static void on_exit_hook(pw_driver *d, void *arg) {
  (void)d;
  (void)arg;
  atomic_store(&fx.exited_hook, 1);
}

static unsigned rnd(unsigned *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static void add(item *it, int64_t delay_ns) {
  it->due_ns = pw_clock_ns() + delay_ns;
  pw_timer_init(&it->node);
  pw_driver_lock(&fx.d);
  pw_driver_add_locked(&fx.d, &it->node, pw_tick_ceil(it->due_ns, TICK_NS));
  pw_driver_unlock(&fx.d);
}

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "test_driver: FAIL %s:%d: ", __FILE__, __LINE__);                            \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

typedef struct {
  item *items;
  int n;
  unsigned seed;
} worker_arg;

/* Schedules its items 0..20 ms ahead and cancels about a third of them. */
static pw_thread_ret PW_THREAD_CALL worker(void *p) {
  worker_arg *a = p;
  for (int i = 0; i < a->n; i++) {
    add(&a->items[i], (int64_t)(rnd(&a->seed) % 20000) * 1000);
    if (rnd(&a->seed) % 3 == 0) {
      item *victim = &a->items[rnd(&a->seed) % (unsigned)(i + 1)];
      pw_driver_lock(&fx.d);
      if (pw_wheel_cancel(&fx.d.wheel, &victim->node))
        victim->cancelled = true;
      pw_driver_unlock(&fx.d);
    }
  }
  return 0;
}

/* Groups by sub: an even group may be cut anywhere, an odd one only at its
 * edges (as the binding's coarse order keys, binding/module.h). */
static bool cut_at_edges(const pw_timer *last, const pw_timer *next, void *arg) {
  (void)arg;
  return last->deadline != next->deadline || last->sub != next->sub || last->sub % 2 == 0;
}

static void check_cuts(void) {
  static const int sizes[] = {10, 30, 100, 7, 200, 51, 3, 64, 65, 1, 130, 12};
  enum { NG = sizeof sizes / sizeof *sizes };
  static pw_timer t[1000];
  static pw_driver d;
  pw_driver_hooks none = {NULL, NULL, NULL, NULL, NULL};
  CHECK(pw_driver_init(&d, TICK_NS, 0, &none) == 0, "init");
  d.chunk = CHUNK;
  d.may_cut = cut_at_edges;
  int n = 0;
  pw_driver_lock(&d);
  for (int g = 0; g < NG; g++)
    for (int k = 0; k < sizes[g]; k++) {
      pw_timer_init(&t[n]);
      t[n].sub = (uint32_t)g;
      pw_driver_add_locked(&d, &t[n++], 5 + (g >= NG - 2)); /* two groups a tick later */
    }
  int seen = 0;
  size_t got = pw_driver_collect_locked(&d, 10);
  for (;;) {
    CHECK(got > 0, "a part of 0 with %d of %d left", n - seen, n);
    bool one_odd = d.batch[0]->sub % 2 && d.batch[0]->sub == d.batch[got - 1]->sub;
    CHECK(got <= CHUNK || one_odd, "a part of %zu, above the chunk, not one uncuttable group", got);
    for (size_t i = 0; i < got; i++)
      CHECK(d.batch[i] == &t[seen++], "out of order at %d", seen - 1);
    if (!d.more)
      break;
    CHECK(cut_at_edges(d.batch[got - 1], &t[seen], NULL), "a part ended where no cut is allowed");
    got = pw_driver_collect_locked(&d, d.collect_to);
  }
  CHECK(seen == n && pw_wheel_count(&d.wheel) == 0, "%d of %d collected", seen, n);
  pw_driver_unlock(&d);
  pw_driver_fini(&d);
}

int main(int argc, char **argv) {
  int nthreads = argc > 1 ? atoi(argv[1]) : 4;
  int per = argc > 2 ? atoi(argv[2]) : 5000;
  slow_run_ms = argc > 3 ? atoi(argv[3]) : 0;
  check_cuts();
  pw_driver_hooks hooks = {NULL, on_run, NULL, on_exit_hook, NULL};
  CHECK(pw_driver_init(&fx.d, 0, 0, &hooks) == -EINVAL, "tick 0 accepted");
  CHECK(pw_driver_init(&fx.d, TICK_NS, pw_clock_ns(), &hooks) == 0, "init");
  fx.d.chunk = CHUNK;
  fx.d.may_cut = cut_anywhere; /* order inside a tick is not what this test checks */
  CHECK(pw_driver_start(&fx.d) == 0, "start");

  /* Idle: nothing pending, no wake-ups. */
  sleep_ms(200);
  pw_driver_lock(&fx.d);
  uint64_t w0 = fx.d.wakeups;
  pw_driver_unlock(&fx.d);
  CHECK(w0 == 0, "idle driver woke up %llu times", (unsigned long long)w0);

  /* Lost wake-up: it sleeps toward 10 s when a 1 ms timer arrives. */
  static item far, near; /* zeroed: fired == 0 */
  add(&far, 10 * (int64_t)1000000000);
  sleep_ms(50);
  int64_t t0 = pw_clock_ns();
  add(&near, 1000000);
  while (!atomic_load(&near.fired) && pw_clock_ns() - t0 < 2000000000)
    sleep_ms(1);
  CHECK(atomic_load(&near.fired) == 1, "the 1 ms timer did not fire (lost wake-up)");
  pw_driver_lock(&fx.d);
  CHECK(pw_wheel_cancel(&fx.d.wheel, &far.node), "far timer not pending");
  pw_driver_unlock(&fx.d);

  /* Several threads adding and cancelling while the thread fires. */
  pw_thread th[64];
  worker_arg args[64];
  if (nthreads > 64)
    nthreads = 64;
  long fired_before = atomic_load(&fx.fired);
  item *items = calloc((size_t)nthreads * (size_t)per, sizeof *items);
  CHECK(items, "out of memory");
  for (int t = 0; t < nthreads; t++) {
    args[t] = (worker_arg){items + (size_t)t * (size_t)per, per, 0x9e3779b9u * (unsigned)(t + 1)};
    CHECK(pw_thread_create(&th[t], worker, &args[t], false) == 0, "pw_thread_create");
  }
  for (int t = 0; t < nthreads; t++)
    CHECK(pw_thread_join(th[t]) == 0, "pw_thread_join");
  /* Wait for the runs themselves, not for an empty wheel: the last batch
   * leaves the wheel before its hook has run.  The workers have joined, so
   * the cancelled flags are final and say how many runs to expect. */
  long total = (long)nthreads * per, want = 0;
  for (long i = 0; i < total; i++)
    want += !items[i].cancelled;
  int64_t end = pw_clock_ns() + 30 * (int64_t)1000000000;
  while (atomic_load(&fx.fired) - fired_before < want && pw_clock_ns() < end)
    sleep_ms(5);
  sleep_ms(20); /* a run too many would show up here */
  for (long i = 0; i < total; i++) {
    int f = atomic_load(&items[i].fired);
    CHECK(f == (items[i].cancelled ? 0 : 1), "item %ld fired %d times (cancelled %d)", i, f,
          items[i].cancelled);
  }
  CHECK(atomic_load(&fx.early) == 0, "%ld timers fired early", atomic_load(&fx.early));
  pw_driver_lock(&fx.d);
  CHECK(fx.d.max_batch <= CHUNK, "a batch of %llu, above the chunk",
        (unsigned long long)fx.d.max_batch);
  pw_driver_unlock(&fx.d);

  /* A limited wait for a thread that is not leaving: it times out, and not
   * before its time (with relative waits cut short, after many cut waits). */
  int64_t w0_ns = pw_clock_ns();
  CHECK(pw_driver_wait_exited(&fx.d, 30000000) == -ETIMEDOUT, "wait_exited did not time out");
  CHECK(pw_clock_ns() - w0_ns >= 30000000, "wait_exited timed out early");

  /* Stop: the thread leaves and reports it. */
  pw_driver_stop(&fx.d);
  CHECK(pw_driver_wait_exited(&fx.d, 2 * (int64_t)1000000000) == 0, "thread did not exit");
  while (!atomic_load(&fx.exited_hook))
    sleep_ms(1);
  printf("test_driver: ok: %ld timers from %d threads, %ld fired, %ld cancelled, %ld batches, "
         "%llu wakeups\n",
         total, nthreads, want, total - want, atomic_load(&fx.batches),
         (unsigned long long)fx.d.wakeups);
  pw_driver_fini(&fx.d);
  free(items);
  return 0;
}
