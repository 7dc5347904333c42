/*
 * test_wheel.c -- the timing wheel against a brute-force model.
 *
 *   test_wheel [seed] [iterations]
 *
 * Named edge cases first (libuv test-timer.c style), then `iterations` randomized steps.
 * Defaults: seed 1, 300000 steps; PW_TEST_SEED and PW_TEST_ITERS change them, PW_TEST_QUICK=1
 * divides the default step count by 20 (for -fsanitize=address,undefined builds) and
 * PW_TEST_TRACE=1 prints every operation as it runs, which is how a failure is reproduced.
 *
 * The model is a fixed pool of timers, each mirrored by (linked, deadline, seq).  The timer
 * pw_wheel_pop must return is the linked one with the least (deadline, sub, seq) among those with
 * deadline <= now.  Every other answer (count, next, linked, any, foreach, pw_wheel_check) is
 * compared with the pool after every step (but see verify()), so a broken step fails at once.
 * A failure prints the test, seed, step and the last operations, then exits 1.
 */
#include "wheel.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NPOOL 512
#define NTRACE 32

typedef struct {
  bool linked;
  bool popped; /* unlinked by pw_wheel_pop, so pw_wheel_put may link it again */
  pw_tick_t deadline;
  uint32_t sub;
  uint64_t seq;
} model;

static pw_wheel W;
static pw_timer T[NPOOL];
static model M[NPOOL];
static int n_pool;        /* timers in play in this test or episode */
static uint32_t next_sub; /* the sub the next add or move gives (random episodes vary it) */
static pw_tick_t now;     /* the model's clock */
static uint64_t last_seq;
static bool have_seq;

static const char *g_test = "";
static uint64_t g_seed, g_step;
static bool g_verbose;
static uint64_t g_check_every = 1;
static char g_trace[NTRACE][112];
static unsigned g_ntrace;

static void trace(const char *fmt, ...) {
  char *buf = g_trace[g_ntrace++ % NTRACE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof g_trace[0], fmt, ap);
  va_end(ap);
  if (g_verbose)
    fprintf(stderr, "[%" PRIu64 "] %s\n", g_step, buf);
}

static void fail(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "FAIL test=%s seed=%" PRIu64 " step=%" PRIu64 " now=0x%" PRIx64 ": ", g_test,
          g_seed, g_step, now);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nlast operations, oldest first (PW_TEST_TRACE=1 prints all):\n");
  unsigned first = g_ntrace > NTRACE ? g_ntrace - NTRACE : 0;
  for (unsigned k = first; k < g_ntrace; k++)
    fprintf(stderr, "  %s\n", g_trace[k % NTRACE]);
  exit(1);
}

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      fail(__VA_ARGS__);                                                                           \
  } while (0)

/* ---- the model ---- */

static int idx(const pw_timer *t) {
  uintptr_t p = (uintptr_t)t, b = (uintptr_t)T;
  if (p < b || p >= b + sizeof T || (p - b) % sizeof T[0])
    return -1;
  return (int)((p - b) / sizeof T[0]);
}

static int expected_pop(void) {
  int best = -1;
  for (int i = 0; i < n_pool; i++) {
    if (!M[i].linked || M[i].deadline > now)
      continue;
    if (best < 0 || M[i].deadline < M[best].deadline ||
        (M[i].deadline == M[best].deadline &&
         (M[i].sub < M[best].sub || (M[i].sub == M[best].sub && M[i].seq < M[best].seq))))
      best = i;
  }
  return best;
}

static pw_tick_t min_deadline(bool pending_only) {
  pw_tick_t m = PW_TICK_MAX;
  for (int i = 0; i < n_pool; i++)
    if (M[i].linked && (!pending_only || M[i].deadline > now) && M[i].deadline < m)
      m = M[i].deadline;
  return m;
}

static size_t model_count(void) {
  size_t n = 0;
  for (int i = 0; i < n_pool; i++)
    n += M[i].linked;
  return n;
}

/* pw_wheel_check changes nothing, but pw_wheel_next sorts the expired list and fills the
 * next-deadline cache, so calling it after every step would hide a bug on the lazy paths (pop of
 * an unsorted list, a stale cache).  Some random episodes therefore call both only every
 * g_check_every-th step; the model's own checks still run after every step. */
static void verify(void) {
  char msg[256] = "";
  EXPECT(pw_wheel_now(&W) == now, "pw_wheel_now 0x%" PRIx64 ", model 0x%" PRIx64, pw_wheel_now(&W),
         now);
  for (int i = 0; i < n_pool; i++)
    EXPECT(pw_timer_linked(&T[i]) == M[i].linked, "t%d: pw_timer_linked %d, model %d", i,
           pw_timer_linked(&T[i]), M[i].linked);
  size_t count = model_count();
  EXPECT(pw_wheel_count(&W) == count, "pw_wheel_count %zu, model %zu", pw_wheel_count(&W), count);
  if (pw_wheel_check(&W, msg, sizeof msg) != 0)
    fail("pw_wheel_check: %s", msg);
  if (g_step % g_check_every)
    return;
  pw_tick_t next = pw_wheel_next(&W), want = min_deadline(false);
  EXPECT(next == want, "pw_wheel_next 0x%" PRIx64 ", model 0x%" PRIx64, next, want);
  if ((g_step & 1) && pw_wheel_check(&W, msg, sizeof msg) != 0)
    fail("pw_wheel_check after pw_wheel_next: %s", msg);
}

/* ---- operations: each does it to the wheel and the model, then verifies ---- */

static void start(const char *name, pw_tick_t t0, int n) {
  g_test = name;
  g_ntrace = 0;
  trace("init now=0x%" PRIx64 " pool=%d check_every=%" PRIu64, t0, n, g_check_every);
  pw_wheel_init(&W, t0);
  for (int i = 0; i < NPOOL; i++) {
    pw_timer_init(&T[i]);
    M[i] = (model){0};
  }
  next_sub = 0;
  n_pool = n;
  now = t0;
  have_seq = false;
  verify();
}

static void op_add(int i, pw_tick_t d) {
  g_step++;
  trace("add t%d d=0x%" PRIx64, i, d);
  if (M[i].linked)
    fail("test bug: add of linked t%d", i);
  T[i].sub = next_sub;
  pw_wheel_add(&W, &T[i], d);
  EXPECT(T[i].deadline == d, "t%d: deadline 0x%" PRIx64 " after add", i, T[i].deadline);
  EXPECT(!have_seq || T[i].seq > last_seq, "t%d: seq %" PRIu64 " not above previous %" PRIu64, i,
         T[i].seq, last_seq);
  last_seq = T[i].seq;
  have_seq = true;
  M[i] = (model){true, false, d, next_sub, T[i].seq};
  verify();
}

static void op_put(int i) {
  g_step++;
  trace("put t%d (d=0x%" PRIx64 " seq=%" PRIu64 ")", i, M[i].deadline, M[i].seq);
  if (M[i].linked || !M[i].popped)
    fail("test bug: put of t%d, not a popped timer", i);
  pw_wheel_put(&W, &T[i]);
  EXPECT(T[i].deadline == M[i].deadline && T[i].seq == M[i].seq, "t%d: put changed deadline/seq",
         i);
  M[i].linked = true;
  M[i].popped = false;
  verify();
}

static void op_cancel(int i) {
  g_step++;
  trace("cancel t%d (%s)", i, M[i].linked ? "linked" : "unlinked");
  bool r = pw_wheel_cancel(&W, &T[i]);
  EXPECT(r == M[i].linked, "cancel t%d returned %d, model linked %d", i, r, M[i].linked);
  M[i].linked = M[i].popped = false;
  verify();
}

/* A move keeps the timer linked with the new deadline and a fresh seq, wherever it is
 * (expired, in a slot, lazy already, on the overflow list). */
static void op_move(int i, pw_tick_t d) {
  g_step++;
  trace("move t%d 0x%" PRIx64 " -> 0x%" PRIx64, i, M[i].deadline, d);
  if (!M[i].linked)
    fail("test bug: move of unlinked t%d", i);
  T[i].sub = next_sub;
  pw_wheel_move(&W, &T[i], d);
  EXPECT(pw_timer_linked(&T[i]) && T[i].deadline == d,
         "t%d: not linked at 0x%" PRIx64 " after move", i, d);
  EXPECT(!have_seq || T[i].seq > last_seq, "t%d: seq %" PRIu64 " not above previous %" PRIu64, i,
         T[i].seq, last_seq);
  last_seq = T[i].seq;
  have_seq = true;
  M[i].deadline = d;
  M[i].seq = T[i].seq;
  M[i].sub = next_sub;
  verify();
}

static void op_advance(pw_tick_t to) {
  g_step++;
  trace("advance 0x%" PRIx64 " (now%s0x%" PRIx64 ")", to, to >= now ? "+" : "-",
        to >= now ? to - now : now - to);
  if (to == PW_TICK_MAX)
    fail("test bug: advance to PW_TICK_MAX");
  pw_wheel_advance(&W, to);
  if (to > now)
    now = to;
  verify();
}

/* Pops one timer; returns its index or -1. */
static int op_pop(void) {
  g_step++;
  int want = expected_pop();
  pw_timer *t = pw_wheel_pop(&W);
  int i = t ? idx(t) : -1;
  trace("pop -> %s%d", i >= 0 ? "t" : "", i);
  EXPECT(!t || i >= 0, "pop returned %p, not a timer of the pool", (void *)t);
  if (i >= 0) {
    EXPECT(i < n_pool && M[i].linked, "pop returned t%d, which is not linked (cancelled/popped)",
           i);
    EXPECT(M[i].deadline <= now, "early: pop returned t%d with deadline 0x%" PRIx64, i,
           M[i].deadline);
    EXPECT(T[i].deadline == M[i].deadline && T[i].seq == M[i].seq && T[i].sub == M[i].sub,
           "t%d: deadline/sub/seq changed", i);
    EXPECT(!pw_timer_linked(t), "t%d still linked after pop", i);
  }
  if (i != want) {
    if (want < 0)
      fail("pop returned t%d, expected NULL", i);
    fail("pop returned %s%d, expected t%d (d=0x%" PRIx64 " seq=%" PRIu64 ")%s", i >= 0 ? "t" : "",
         i, want, M[want].deadline, M[want].seq, i < 0 ? ": incomplete" : "");
  }
  if (i >= 0) {
    M[i].linked = false;
    M[i].popped = true;
  }
  verify();
  return i;
}

static int op_pop_all(void) {
  int n = 0;
  while (op_pop() >= 0)
    n++;
  EXPECT(expected_pop() < 0, "completeness: due timer left after popping to NULL");
  return n;
}

/* pw_wheel_any must return a linked timer, an expired one while any has expired. */
static int op_any(void) {
  g_step++;
  pw_timer *t = pw_wheel_any(&W);
  int i = t ? idx(t) : -1;
  trace("any -> %s%d", i >= 0 ? "t" : "", i);
  EXPECT(!t || (i >= 0 && i < n_pool && M[i].linked), "any returned %p: not a linked timer",
         (void *)t);
  EXPECT(t || model_count() == 0, "any returned NULL with timers linked");
  EXPECT(!t || expected_pop() < 0 || M[i].deadline <= now,
         "any returned pending t%d while expired timers exist", i);
  return i;
}

static void op_drain(void) {
  trace("drain with any + cancel");
  for (int k = 0; k <= n_pool; k++) {
    int i = op_any();
    if (i < 0) {
      EXPECT(pw_wheel_count(&W) == 0, "any returned NULL, count %zu", pw_wheel_count(&W));
      return;
    }
    op_cancel(i);
  }
  fail("any+cancel did not empty the wheel");
}

struct visit {
  int seen[NPOOL];
  int calls, stop_at, bad;
};

static int visit_fn(pw_timer *t, void *arg) {
  struct visit *v = arg;
  int i = idx(t);
  if (i < 0)
    v->bad = 1;
  else
    v->seen[i]++;
  return ++v->calls == v->stop_at ? 7 : 0;
}

/* stop_at 0: visit all.  Otherwise the callback stops the walk at its stop_at-th call. */
static void op_foreach(int stop_at) {
  g_step++;
  trace("foreach stop_at=%d", stop_at);
  static struct visit v;
  memset(&v, 0, sizeof v);
  v.stop_at = stop_at;
  int r = pw_wheel_foreach(&W, visit_fn, &v);
  int count = (int)pw_wheel_count(&W);
  EXPECT(!v.bad, "foreach visited a pointer outside the pool");
  bool stopped = stop_at > 0 && stop_at <= count;
  EXPECT(r == (stopped ? 7 : 0), "foreach returned %d", r);
  EXPECT(v.calls == (stopped ? stop_at : count), "foreach made %d calls, count %d", v.calls, count);
  for (int i = 0; i < n_pool; i++) {
    EXPECT(v.seen[i] <= 1, "foreach visited t%d %d times", i, v.seen[i]);
    EXPECT(!v.seen[i] || M[i].linked, "foreach visited unlinked t%d", i);
    EXPECT(stopped || v.seen[i] == M[i].linked, "foreach missed linked t%d", i);
  }
  verify();
}

/* ---- helpers for ticks ---- */

static pw_tick_t add_sat(pw_tick_t a, uint64_t b) {
  return b > PW_TICK_MAX - a ? PW_TICK_MAX : a + b;
}
static pw_tick_t sub_sat(pw_tick_t a, uint64_t b) { return b > a ? 0 : a - b; }
static uint64_t pow64(unsigned k) { return (uint64_t)1 << (PW_LEVEL_BITS * k); } /* k <= 10 */

/* The first multiple of 64^k above t (saturating): where level k-1 wraps. */
static pw_tick_t boundary(pw_tick_t t, unsigned k) {
  uint64_t m = t | (pow64(k) - 1);
  return m == PW_TICK_MAX ? PW_TICK_MAX : m + 1;
}

/* Advances deadline by deadline up to `limit`: nothing due a tick early, everything at it. */
static void sweep(pw_tick_t limit) {
  op_pop_all();
  for (;;) {
    pw_tick_t m = min_deadline(true);
    if (m > limit || m == PW_TICK_MAX)
      return;
    if (m - 1 > now) {
      op_advance(m - 1);
      EXPECT(op_pop() < 0, "a timer fired one tick before 0x%" PRIx64, m);
    }
    op_advance(m);
    int i = op_pop();
    EXPECT(i >= 0 && M[i].deadline == m, "nothing fired at deadline 0x%" PRIx64, m);
    op_pop_all();
  }
}

/* ---- named edge cases ---- */

static void test_zero_delay(void) {
  start("zero_delay", 1000, 4);
  op_add(0, 1000);
  EXPECT(pw_wheel_next(&W) == 1000, "next of a zero-delay timer");
  EXPECT(op_pop() == 0, "zero-delay timer is due without advancing");
  EXPECT(op_pop() < 0, "only one timer");
  op_add(1, 1000), op_add(2, 0), op_add(3, 999);
  EXPECT(op_pop() == 2 && op_pop() == 3 && op_pop() == 1, "past deadlines pop by deadline");
  start("zero_delay@0", 0, 1);
  op_add(0, 0);
  EXPECT(op_pop() == 0, "deadline 0 at time 0");
}

static void test_equal_deadlines_fifo(void) {
  const pw_tick_t ds[] = {5, 64, 100000, (uint64_t)1 << 40};
  for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++) {
    start("equal_deadlines_fifo", 0, 16);
    for (int i = 0; i < 16; i += 2)
      op_add(i, ds[k]);
    for (int i = 1; i < 16; i += 2)
      op_add(i, ds[k]);
    op_cancel(6), op_cancel(9);
    op_advance(ds[k]);
    for (int i = 0; i < 16; i += 2)
      EXPECT(i == 6 || op_pop() == i, "FIFO among equal deadlines");
    op_add(9, ds[k]);     /* already due: after the earlier ones with the same deadline */
    op_add(6, ds[k] - 1); /* already due and earlier: before all of them */
    EXPECT(op_pop() == 6, "earlier deadline first");
    for (int i = 1; i < 16; i += 2)
      EXPECT(i == 9 || op_pop() == i, "FIFO among equal deadlines");
    EXPECT(op_pop() == 9 && op_pop() < 0, "late add of an equal deadline pops last");
  }
}

static void test_level_boundary(void) {
  const pw_tick_t starts[] = {0,
                              1,
                              63,
                              64,
                              4095,
                              5000,
                              pow64(6) - 1,
                              pow64(6) + 3,
                              PW_TICK_MAX - pow64(6) - 77,
                              PW_TICK_MAX - ((uint64_t)1 << 40)};
  for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
    start("level_boundary", starts[s], 36);
    int n = 0;
    for (unsigned k = 1; k <= PW_LEVELS; k++) {
      for (int j = -1; j <= 1; j++) {
        op_add(n++, boundary(now, k) + (uint64_t)j);
        op_add(n++, now + pow64(k) + (uint64_t)j);
      }
    }
    sweep(PW_TICK_MAX - 1);
    op_drain();
  }
}

static void test_cancel_min_then_next(void) {
  start("cancel_min_then_next", 0, 8);
  op_add(0, 10), op_add(1, 5), op_add(2, 7000), op_add(3, (uint64_t)1 << 40);
  op_add(4, 4100), op_add(5, 4200); /* one level-2 slot: the minimum is found by a scan */
  EXPECT(pw_wheel_next(&W) == 5, "next");
  op_cancel(1);
  EXPECT(pw_wheel_next(&W) == 10, "next after cancelling the minimum");
  op_cancel(0);
  EXPECT(pw_wheel_next(&W) == 4100, "next after cancelling the minimum");
  op_cancel(4);
  EXPECT(pw_wheel_next(&W) == 4200, "next after cancelling the minimum in a shared slot");
  op_add(6, 4150);
  EXPECT(pw_wheel_next(&W) == 4150, "next after adding a new minimum");
  op_cancel(6), op_cancel(5), op_cancel(2);
  EXPECT(pw_wheel_next(&W) == (uint64_t)1 << 40, "next of an overflow timer");
  op_cancel(3);
  EXPECT(pw_wheel_next(&W) == PW_TICK_MAX, "next of an empty wheel");
}

static void test_advance_pow64(void) {
  const pw_tick_t starts[] = {0, 7, pow64(6) - 3, PW_TICK_MAX - pow64(8)};
  for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
    for (unsigned k = 1; k <= PW_LEVELS; k++) {
      start("advance_pow64", starts[s], 9);
      pw_tick_t t0 = now, step = pow64(k);
      op_add(0, t0 + step - 1), op_add(1, t0 + step), op_add(2, t0 + step + 1);
      op_add(3, t0 + 2 * step), op_add(4, t0 + 3 * step - 1), op_add(5, t0 + pow64(k + 1));
      for (int r = 0; r < 3; r++) {
        op_add(6 + r, now + step); /* due exactly at the next jump */
        op_advance(now + step);
        EXPECT(op_pop_all() >= 1 + (r < 2), "advance by 64^%u: too few timers popped", k);
        EXPECT(!M[6 + r].linked, "timer due exactly at the jump did not pop");
      }
      op_drain();
    }
  }
}

static void test_put_back_keeps_place(void) {
  start("put_back_keeps_place", 0, 8);
  op_add(0, 10), op_add(1, 10), op_add(2, 5), op_add(3, 20);
  op_advance(15);
  EXPECT(op_pop() == 2, "earliest first");
  op_put(2);
  EXPECT(op_pop() == 2 && op_pop() == 0, "put back pops again first");
  op_put(2);
  EXPECT(op_pop() == 2, "put back ahead of a later deadline");
  op_put(0);
  EXPECT(op_pop() == 0 && op_pop() == 1, "put back ahead of a later seq");
  op_advance(20);
  EXPECT(op_pop() == 3, "t3");
  op_add(4, 20);
  op_put(3);
  EXPECT(op_pop() == 3 && op_pop() == 4, "put back ahead of a later add");
  op_advance(1000);
  op_put(3);
  EXPECT(op_pop() == 3 && op_pop() < 0, "put after time moved on is due at once");
}

static void test_foreach_visits_all(void) {
  start("foreach_visits_all", 100, 40);
  int n = 0;
  for (unsigned k = 0; k <= 8; k++)
    op_add(n++, 100 + pow64(k)), op_add(n++, 100 + pow64(k) + 1);
  op_add(n++, 50), op_add(n++, 100), op_add(n++, PW_TICK_MAX), op_add(n++, PW_TICK_MAX - 1);
  op_advance(102);
  op_foreach(0), op_foreach(1), op_foreach(5), op_foreach(n), op_foreach(n + 1);
  op_pop();
  op_foreach(0);
  op_drain();
  op_foreach(0), op_foreach(1);
}

static void test_top_of_range(void) {
  start("top_of_range", PW_TICK_MAX - ((uint64_t)1 << 40), 8);
  op_add(0, now + 1), op_add(1, now + pow64(6) - 1), op_add(2, now + pow64(6));
  op_add(3, PW_TICK_MAX - 2), op_add(4, PW_TICK_MAX - 1), op_add(5, PW_TICK_MAX);
  sweep(PW_TICK_MAX - 1);
  EXPECT(pw_wheel_count(&W) == 1 && pw_wheel_next(&W) == PW_TICK_MAX, "PW_TICK_MAX never fires");
  op_advance(now - 5);
  op_cancel(5);
}

static void test_cancel_unlinked(void) {
  start("cancel_unlinked", 10, 4);
  op_cancel(0);
  op_add(0, 20);
  op_cancel(0), op_cancel(0);
  op_add(1, 5); /* already due, cancelled before it pops */
  op_cancel(1);
  op_add(2, 11);
  op_advance(11);
  EXPECT(op_pop() == 2 && op_pop() < 0, "cancelled timers never pop");
  op_cancel(2);
  op_advance(5); /* earlier time: ignored */
}

/* ---- randomized schedules ---- */

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static pw_tick_t jitter(pw_tick_t t) {
  return below(3) == 0 ? sub_sat(t, 1) : below(2) ? t : add_sat(t, 1);
}

static pw_tick_t gen_deadline(void) {
  switch (below(13)) {
  case 0:
  case 1:
  case 2:
    return add_sat(now, below(70));
  case 3:
    return add_sat(now, below(5000));
  case 4:
    return jitter(add_sat(now, pow64(1 + (unsigned)below(7))));
  case 5:
    return jitter(boundary(now, 1 + (unsigned)below(7)));
  case 6:
    return add_sat(now, rnd() >> below(64));
  case 7:
    return add_sat(now, pow64(6) + below(3) * below(pow64(6)));
  case 8:
    return sub_sat(now, below(100));
  case 9:
    return below(4) ? 0 : PW_TICK_MAX - below(3);
  case 10:
    return add_sat(now, below(pow64(2 + (unsigned)below(5))));
  default: { /* tie with a linked timer */
    int i = (int)below((uint64_t)n_pool);
    return M[i].linked ? M[i].deadline : add_sat(now, 1);
  }
  }
}

static pw_tick_t gen_advance(void) {
  pw_tick_t to, m;
  switch (below(12)) {
  case 0:
  case 1:
  case 2:
    to = add_sat(now, below(8));
    break;
  case 3:
    to = add_sat(now, below(300));
    break;
  case 4:
  case 5:
    m = min_deadline(true);
    to = m == PW_TICK_MAX ? now : jitter(m);
    break;
  case 6:
    to = add_sat(now, pow64(1 + (unsigned)below(6)) * (1 + below(3)));
    break;
  case 7:
    to = jitter(boundary(now, 1 + (unsigned)below(7)));
    break;
  case 8:
    to = add_sat(now, rnd() >> (24 + below(40)));
    break;
  case 9:
    to = jitter(add_sat(now, pow64(6) * (1 + below(4))));
    break;
  case 10:
    to = sub_sat(now, below(1000));
    break; /* ignored */
  default:
    to = below(8) ? add_sat(now, below(pow64(3))) : add_sat(now, rnd() >> below(64));
    break;
  }
  return to == PW_TICK_MAX ? PW_TICK_MAX - 1 : to;
}

static pw_tick_t gen_start(void) {
  switch (below(8)) {
  case 0:
    return 0;
  case 1:
    return below(1000);
  case 2:
    return pow64(6) * (1 + below(8)) - below(100);
  case 3:
    return PW_TICK_MAX - ((uint64_t)1 << 40);
  case 4:
    return PW_TICK_MAX - 1 - below((uint64_t)1 << 20);
  case 5:
    return rnd() >> 1;
  case 6:
    return sub_sat(boundary(rnd(), 1 + (unsigned)below(10)), below(3));
  default:
    return below(pow64(3));
  }
}

/* Timers moved later wait in the slot they were filed in; every path must still meet them at
 * their real deadline, in (deadline, sub, seq) order: advancing past the old slot, the front slot
 * going lazy under pw_wheel_next, cancelling a lazy timer (emptying its slot), moving it again
 * (later, then earlier), and moving into and out of the overflow range. */
static void test_lazy_moves(void) {
  start("lazy_moves", 0, 8);
  op_add(0, 5), op_add(1, 5), op_add(2, 100), op_add(3, 4000);
  op_move(0, 90); /* t0 waits in slot 5 */
  EXPECT(pw_wheel_next(&W) == 5, "next with t1 still at 5");
  op_cancel(1); /* slot 5 now holds only the lazy t0 */
  EXPECT(pw_wheel_next(&W) == 90, "next after the front slot went lazy");
  op_move(0, 200), op_move(0, 300); /* lazy twice */
  op_move(2, 4000);                 /* same deadline as t3, later seq */
  op_advance(99);
  EXPECT(op_pop() == -1, "nothing due at 99");
  op_move(0, 50); /* earlier, and past (now is 99): expired at once */
  EXPECT(op_pop() == 0, "t0 moved into the past pops first");
  op_add(4, 64 * 64 * 64 * 64 * 64 * 64ull + 7); /* overflow */
  op_move(4, 64 * 64 * 64 * 64 * 64 * 64ull * 3);
  op_move(3, 64 * 64 * 64 * 64 * 64 * 64ull * 2); /* from a slot into the overflow range */
  op_advance(4000);
  EXPECT(op_pop() == 2 && op_pop() == -1, "t2 at 4000, t3 no longer");
  op_advance(64 * 64 * 64 * 64 * 64 * 64ull * 3);
  EXPECT(op_pop() == 3 && op_pop() == 4 && op_pop() == -1, "overflow order after moves");
}

static void random_episode(uint64_t steps) {
  static const int sizes[] = {2, 8, 64, 512};
  pw_tick_t t0 = gen_start();
  g_check_every = below(3) ? 1 : 2 + below(7);
  start("random", t0 == PW_TICK_MAX ? t0 - 1 : t0, sizes[below(4)]);
  uint64_t end = g_step + steps;
  while (g_step < end) {
    int i = (int)below((uint64_t)n_pool), r = (int)below(100);
    next_sub = below(2) ? 0 : (uint32_t)below(3); /* ties on sub too */
    if (r < 40) {
      if (M[i].linked) {
        if (below(4) == 0)
          op_cancel(i);
      } else if (M[i].popped && below(4) == 0) {
        op_put(i);
      } else {
        op_add(i, gen_deadline());
      }
    } else if (r < 50) {
      op_cancel(i);
    } else if (r < 72) {
      op_advance(gen_advance());
      if (below(5))
        op_pop_all();
    } else if (r < 82) {
      op_pop();
    } else if (r < 88) {
      int j = op_pop();
      if (j >= 0)
        op_put(j);
    } else if (r < 92) {
      op_pop_all();
    } else if (r < 96) {
      int j = op_any();
      if (j >= 0 && below(2))
        op_cancel(j);
    } else if (r < 97) {
      if (M[i].linked)
        op_move(i, below(3) ? add_sat(M[i].deadline, rnd() >> below(64)) : gen_deadline());
    } else if (r < 98) {
      op_foreach(below(2) ? 0 : 1 + (int)below(5));
    } else if (r < 99) {
      op_drain();
    } else {
      op_advance(sub_sat(now, below(100)));
    }
  }
  g_check_every = 1;
  if (below(2)) {
    op_drain();
  } else {
    op_advance(PW_TICK_MAX - 1);
    op_pop_all();
    op_drain(); /* only timers at PW_TICK_MAX remain */
  }
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *s = getenv(name);
  return s && *s ? strtoull(s, NULL, 0) : dflt;
}

int main(int argc, char **argv) {
  if (argc > 3 || (argc > 1 && argv[1][0] == '-')) {
    fprintf(stderr, "usage: %s [seed] [iterations]\n", argv[0]);
    return 2;
  }
  const char *quick = getenv("PW_TEST_QUICK");
  uint64_t iters = env_u64("PW_TEST_ITERS", 300000);
  if (quick && *quick && strcmp(quick, "0") != 0)
    iters /= 20;
  g_seed = argc > 1 ? strtoull(argv[1], NULL, 0) : env_u64("PW_TEST_SEED", 1);
  iters = argc > 2 ? strtoull(argv[2], NULL, 0) : iters;
  const char *tr = getenv("PW_TEST_TRACE");
  g_verbose = tr && *tr && strcmp(tr, "0") != 0;
  clock_t c0 = clock();

  test_zero_delay();
  test_equal_deadlines_fifo();
  test_level_boundary();
  test_cancel_min_then_next();
  test_advance_pow64();
  test_put_back_keeps_place();
  test_foreach_visits_all();
  test_top_of_range();
  test_cancel_unlinked();
  test_lazy_moves();
  uint64_t named = g_step;

  rng_state = g_seed;
  uint64_t episodes = 0;
  while (g_step - named < iters) {
    uint64_t left = iters - (g_step - named);
    uint64_t len = 1 + below(3000);
    random_episode(len < left ? len : left);
    episodes++;
  }
  printf("test_wheel: ok: 10 named tests (%" PRIu64 " steps), seed %" PRIu64 ": %" PRIu64
         " random steps in %" PRIu64 " episodes, %.2fs\n",
         named, g_seed, g_step - named, episodes, (double)(clock() - c0) / CLOCKS_PER_SEC);
  return 0;
}
