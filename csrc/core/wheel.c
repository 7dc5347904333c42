/* wheel.c -- see wheel.h for the contract. */
#define _GNU_SOURCE /* platform.h: POSIX declarations under -std=c11 */
#include "wheel.h"

#include <errno.h>
#include <stdio.h>

#include "platform.h"

/* ---- lists: circular, with the list head as sentinel ---- */

static inline void list_init(pw_link *h) { h->next = h->prev = h; }
static inline bool list_empty(const pw_link *h) { return h->next == h; }

static inline void list_append(pw_link *h, pw_link *n) {
  n->prev = h->prev;
  n->next = h;
  h->prev->next = n;
  h->prev = n;
}

static inline void list_unlink(pw_link *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->next = n->prev = NULL;
}

/* Moves every node of src to the end of dst, leaving src empty.  O(1). */
static inline void list_splice(pw_link *dst, pw_link *src) {
  if (list_empty(src))
    return;
  src->next->prev = dst->prev;
  dst->prev->next = src->next;
  src->prev->next = dst;
  dst->prev = src->prev;
  list_init(src);
}

static inline pw_timer *timer_of(pw_link *l) { return (pw_timer *)l; }

/* ---- placement ---- */

static inline bool before(const pw_timer *a, const pw_timer *b) {
  if (a->deadline != b->deadline)
    return a->deadline < b->deadline;
  return a->sub != b->sub ? a->sub < b->sub : a->seq < b->seq;
}

/* Level of a deadline d > now: the 6-bit group holding the highest bit in
 * which d differs from now.  PW_LEVELS or more means the overflow list. */
static inline int level_of(pw_tick_t d, pw_tick_t now) {
  return (63 - pw_clzll(d ^ now)) / PW_LEVEL_BITS;
}

static inline int slot_of(pw_tick_t d, int level) {
#ifdef PW_TEST_BREAK_SLOT
  /* Test-only sabotage: files timers one slot late, so the suite can show it
   * notices.  Never defined in a real build. */
  return (int)(((d >> (level * PW_LEVEL_BITS)) + 1) & (PW_SLOTS - 1));
#else
  return (int)((d >> (level * PW_LEVEL_BITS)) & (PW_SLOTS - 1));
#endif
}

/* How far from the head a timer that expires out of order is looked for its
 * place before the list is marked unsorted instead. */
#define EXPIRED_INSERT_STEPS 16

/* An expired timer goes to the end of the expired list, or, if it is due
 * before the last one, to its place when that is near the head: a timer
 * scheduled for a time already past while a large expiry is handed out in
 * parts belongs at the front, and must not cost a sort of all the rest. */
static void expired_append(pw_wheel *w, pw_timer *t) {
  if (w->expired_sorted && !list_empty(&w->expired) && before(t, timer_of(w->expired.prev))) {
    pw_link *l = w->expired.next;
    for (int i = 0; i < EXPIRED_INSERT_STEPS; i++, l = l->next) {
      if (before(t, timer_of(l))) {
        list_append(l, &t->link); /* appending to a node links it just before */
        return;
      }
    }
    w->expired_sorted = false;
  }
  list_append(&w->expired, &t->link);
}

/* Files a timer by its deadline relative to w->now; count is the caller's. */
static void file(pw_wheel *w, pw_timer *t) {
  pw_tick_t d = t->deadline;
  if (d <= w->now) {
    expired_append(w, t);
    return;
  }
  if (w->next_valid && d < w->next_cached)
    w->next_cached = d;
  int level = level_of(d, w->now);
  if (level >= PW_LEVELS) {
    list_append(&w->overflow, &t->link);
    return;
  }
  int s = slot_of(d, level);
  pw_link *h = &w->slot[level][s];
  if (!list_empty(h) && before(t, timer_of(h->prev)))
    w->unsorted[level] |= (uint64_t)1 << s;
  list_append(h, &t->link);
  w->occupied[level] |= (uint64_t)1 << s;
}

/* ---- public ---- */

void pw_wheel_init(pw_wheel *w, pw_tick_t now) {
  w->now = now;
  w->next_seq = 0;
  w->count = 0;
  for (int l = 0; l < PW_LEVELS; l++) {
    w->occupied[l] = w->unsorted[l] = w->lazy[l] = 0;
    for (int s = 0; s < PW_SLOTS; s++)
      list_init(&w->slot[l][s]);
  }
  list_init(&w->overflow);
  list_init(&w->expired);
  w->expired_sorted = true;
  w->next_valid = true; /* an empty wheel's minimum is known: none */
  w->next_cached = PW_TICK_MAX;
}

void pw_wheel_add(pw_wheel *w, pw_timer *t, pw_tick_t deadline) {
  t->deadline = deadline;
  t->seq = w->next_seq++;
  pw_wheel_put(w, t);
}

void pw_wheel_put(pw_wheel *w, pw_timer *t) {
  file(w, t);
  w->count++;
}

/* Unlinks a linked timer, clearing its slot's bits if that empties it.  The
 * slot is found from the list itself, not the deadline (which a lazy timer
 * has moved on): a node whose neighbour is a slot head that is now empty was
 * that slot's last. */
static void unlink_timer(pw_wheel *w, pw_timer *t) {
  pw_link *next = t->link.next;
  list_unlink(&t->link);
  uintptr_t off = (uintptr_t)next - (uintptr_t)&w->slot[0][0];
  if (off < sizeof w->slot && list_empty(next)) {
    size_t i = off / sizeof(pw_link);
    uint64_t bit = (uint64_t)1 << (i % PW_SLOTS);
    w->occupied[i / PW_SLOTS] &= ~bit;
    w->unsorted[i / PW_SLOTS] &= ~bit;
    w->lazy[i / PW_SLOTS] &= ~bit;
  }
}

bool pw_wheel_cancel(pw_wheel *w, pw_timer *t) {
  if (!pw_timer_linked(t))
    return false;
  unlink_timer(w, t); /* removal keeps the expired list's order */
  if (w->next_valid && t->deadline > w->now && t->deadline == w->next_cached)
    w->next_valid = false;
  w->count--;
  return true;
}

void pw_wheel_move(pw_wheel *w, pw_timer *t, pw_tick_t deadline) {
  pw_tick_t d = t->deadline;
  if (d <= w->now || deadline < d) {
    unlink_timer(w, t); /* expired, or earlier: re-filed now */
    if (w->next_valid && d > w->now && d == w->next_cached)
      w->next_valid = false;
    t->deadline = deadline;
    t->seq = w->next_seq++;
    file(w, t);
    return;
  }
  /* Later: it stays where it is.  If it was filed by d, that slot is marked
   * lazy here; if it was already lazy, its slot is marked already, and the
   * slot computed from d is at worst another occupied one, re-filed for
   * nothing once.  The overflow list needs no mark: it is scanned whole. */
  int level = level_of(d, w->now);
  if (level < PW_LEVELS) {
    uint64_t bit = (uint64_t)1 << slot_of(d, level);
    w->lazy[level] |= bit & w->occupied[level];
  }
  if (w->next_valid && d == w->next_cached)
    w->next_valid = false;
  t->deadline = deadline;
  t->seq = w->next_seq++;
}

/*
 * Only slots whose range lies in (old now, new now] can hold timers that are
 * now misfiled, and they are found per level with one mask: if the digits
 * above a level changed, the whole level was passed; otherwise the slots
 * after the old digit up to the new one.  Levels above the first one whose
 * prefix is unchanged are untouched.  The affected slots are detached first
 * and re-filed against the new time, so a timer is never filed twice in one
 * call and a re-filed timer lands on a strictly lower level (or expires).
 */
void pw_wheel_advance(pw_wheel *w, pw_tick_t now) {
  if (now <= w->now)
    return;
  pw_link todo;
  list_init(&todo);
  pw_tick_t old = w->now;
  for (int l = 0; l < PW_LEVELS; l++) {
    int shift = l * PW_LEVEL_BITS;
    if ((old >> shift) == (now >> shift))
      break;
    uint64_t mask;
    if ((old >> (shift + PW_LEVEL_BITS)) != (now >> (shift + PW_LEVEL_BITS))) {
      mask = ~(uint64_t)0;
    } else {
      int from = (int)((old >> shift) & (PW_SLOTS - 1)) + 1;
      int to = (int)((now >> shift) & (PW_SLOTS - 1));
      mask = ((((uint64_t)2) << to) - 1) & ~((((uint64_t)1) << from) - 1);
    }
    uint64_t m = w->occupied[l] & mask, unsorted = (w->unsorted[l] | w->lazy[l]) & m;
    w->occupied[l] &= ~m;
    w->unsorted[l] &= ~m;
    w->lazy[l] &= ~m;
    while (m) {
      int s = pw_ctzll(m);
      m &= m - 1;
      pw_link *h = &w->slot[l][s];
      /* A slot in order (and not lazy) whose last timer is due is due
       * whole: it joins the expired list in O(1), however many timers it
       * holds (the mass expiry of timers scheduled for one moment). */
      if (!((unsorted >> s) & 1) && timer_of(h->prev)->deadline <= now) {
        if (w->expired_sorted && !list_empty(&w->expired) &&
            before(timer_of(h->next), timer_of(w->expired.prev)))
          w->expired_sorted = false;
        list_splice(&w->expired, h);
      } else {
        list_splice(&todo, h);
      }
    }
  }
  if ((old >> (PW_LEVELS * PW_LEVEL_BITS)) != (now >> (PW_LEVELS * PW_LEVEL_BITS)))
    list_splice(&todo, &w->overflow);
  w->now = now;
  if (w->next_valid && w->next_cached <= now)
    w->next_valid = false; /* the minimum left for the expired list */
  while (!list_empty(&todo)) {
    pw_link *l = todo.next;
    list_unlink(l);
    file(w, timer_of(l));
  }
}

/* Tatham's bottom-up merge sort of a circular list, stable: O(n log n),
 * paid only when something was appended out of order. */
static void sort_expired(pw_wheel *w) {
  pw_link *list = w->expired.next;
  if (list == &w->expired)
    return;
  w->expired.prev->next = NULL; /* singly linked, NULL-terminated, while sorting */
  for (size_t k = 1;; k *= 2) {
    pw_link *p = list, *tail = NULL;
    size_t merges = 0;
    list = NULL;
    while (p) {
      merges++;
      pw_link *q = p;
      size_t psize = 0, qsize = k;
      while (psize < k && q) {
        psize++;
        q = q->next;
      }
      while (psize > 0 || (qsize > 0 && q)) {
        pw_link *e;
        if (psize == 0) {
          e = q, q = q->next, qsize--;
        } else if (qsize == 0 || !q || !before(timer_of(q), timer_of(p))) {
          e = p, p = p->next, psize--;
        } else {
          e = q, q = q->next, qsize--;
        }
        if (tail)
          tail->next = e;
        else
          list = e;
        tail = e;
      }
      p = q;
    }
    tail->next = NULL;
    if (merges <= 1)
      break;
  }
  pw_link *prev = &w->expired;
  for (pw_link *e = list; e; e = e->next) {
    e->prev = prev;
    prev->next = e;
    prev = e;
  }
  prev->next = &w->expired;
  w->expired.prev = prev;
  w->expired_sorted = true;
}

pw_timer *pw_wheel_pop(pw_wheel *w) {
  if (list_empty(&w->expired))
    return NULL;
  if (!w->expired_sorted)
    sort_expired(w);
  pw_link *l = w->expired.next;
  list_unlink(l);
  w->count--;
  if (list_empty(&w->expired))
    w->expired_sorted = true;
  return timer_of(l);
}

static pw_tick_t min_of(const pw_link *h) {
  pw_tick_t m = PW_TICK_MAX;
  for (const pw_link *l = h->next; l != h; l = l->next)
    if (timer_of((pw_link *)l)->deadline < m)
      m = timer_of((pw_link *)l)->deadline;
  return m;
}

static int front_slot(const pw_wheel *w, int *level) {
  for (int l = 0; l < PW_LEVELS; l++)
    if (w->occupied[l]) {
      *level = l;
      return pw_ctzll(w->occupied[l]);
    }
  return -1;
}

/* Re-files lazy front slots until the front slot holds only timers filed by
 * their own deadlines, which next_pending needs.  Each lazy timer re-filed
 * here lands in its real place, so it costs what the move would have cost
 * at once, and only for timers that reached the front. */
static void settle_front(pw_wheel *w) {
  int l, s;
  while ((s = front_slot(w, &l)) >= 0 && ((w->lazy[l] >> s) & 1)) {
    pw_link todo, *h = &w->slot[l][s];
    uint64_t bit = (uint64_t)1 << s;
    list_init(&todo);
    list_splice(&todo, h);
    w->occupied[l] &= ~bit;
    w->unsorted[l] &= ~bit;
    w->lazy[l] &= ~bit;
    while (!list_empty(&todo)) {
      pw_link *n = todo.next;
      list_unlink(n);
      file(w, timer_of(n));
    }
  }
}

/* The earliest deadline outside the expired list, without the cache.  Every
 * timer on level l is earlier than every timer on level l + 1, and a level-0
 * slot holds a single deadline; so the answer is in the first occupied slot
 * of the lowest occupied level. */
static pw_tick_t next_pending(const pw_wheel *w) {
  int l, s = front_slot(w, &l);
  if (s < 0)
    return min_of(&w->overflow);
  if (l == 0)
    return (w->now & ~(pw_tick_t)(PW_SLOTS - 1)) | (pw_tick_t)s;
  return min_of(&w->slot[l][s]);
}

/* The front slot (the first of the lowest occupied level) and its level, or
 * -1 when only the overflow list may hold timers. */
pw_tick_t pw_wheel_next(pw_wheel *w) {
  if (!list_empty(&w->expired)) {
    if (!w->expired_sorted)
      sort_expired(w);
    return timer_of(w->expired.next)->deadline;
  }
  if (!w->next_valid) {
    settle_front(w);
    w->next_cached = next_pending(w);
    w->next_valid = true;
  }
  return w->next_cached;
}

pw_timer *pw_wheel_any(pw_wheel *w) {
  if (!list_empty(&w->expired))
    return timer_of(w->expired.next);
  for (int l = 0; l < PW_LEVELS; l++)
    if (w->occupied[l])
      return timer_of(w->slot[l][pw_ctzll(w->occupied[l])].next);
  if (!list_empty(&w->overflow))
    return timer_of(w->overflow.next);
  return NULL;
}

static int foreach_list(const pw_link *h, int (*fn)(pw_timer *, void *), void *arg) {
  for (pw_link *l = h->next; l != h;) {
    pw_link *next = l->next;
    int r = fn(timer_of(l), arg);
    if (r)
      return r;
    l = next;
  }
  return 0;
}

int pw_wheel_foreach(const pw_wheel *w, int (*fn)(pw_timer *t, void *arg), void *arg) {
  int r = foreach_list(&w->expired, fn, arg);
  for (int l = 0; l < PW_LEVELS && !r; l++) {
    uint64_t m = w->occupied[l];
    while (m && !r) {
      int s = pw_ctzll(m);
      m &= m - 1;
      r = foreach_list(&w->slot[l][s], fn, arg);
    }
  }
  return r ? r : foreach_list(&w->overflow, fn, arg);
}

/* Like foreach_list, for the timers of one deadline only.  The next node is
 * read before fn runs, so fn may unlink the one it is given. */
static int foreach_deadline(const pw_link *h, pw_tick_t tick, int (*fn)(pw_timer *, void *),
                            void *arg) {
  for (pw_link *l = h->next; l != h;) {
    pw_link *next = l->next;
    if (timer_of(l)->deadline == tick) {
      int r = fn(timer_of(l), arg);
      if (r)
        return r;
    }
    l = next;
  }
  return 0;
}

int pw_wheel_foreach_at(const pw_wheel *w, pw_tick_t tick, int (*fn)(pw_timer *t, void *arg),
                        void *arg) {
  if (tick <= w->now)
    return foreach_deadline(&w->expired, tick, fn, arg);
  int level = level_of(tick, w->now);
  if (level >= PW_LEVELS)
    return foreach_deadline(&w->overflow, tick, fn, arg);
  return foreach_deadline(&w->slot[level][slot_of(tick, level)], tick, fn, arg);
}

/* ---- the checker ---- */

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    if (msg && msglen)                                                                             \
      snprintf(msg, msglen, __VA_ARGS__);                                                          \
    return -EINVAL;                                                                                \
  } while (0)

/* Walks one list checking links; returns its length and earliest deadline. */
static int check_list(const pw_link *h, size_t *n, pw_tick_t *min, char *msg, size_t msglen) {
  *n = 0;
  *min = PW_TICK_MAX;
  const pw_link *prev = h;
  for (const pw_link *l = h->next; l != h; l = l->next) {
    if (!l || l->prev != prev)
      FAIL("broken links after %zu nodes", *n);
    pw_tick_t d = timer_of((pw_link *)l)->deadline;
    if (d < *min)
      *min = d;
    prev = l;
    if (++*n > ((size_t)1 << 40))
      FAIL("list does not end");
  }
  if (h->prev != prev)
    FAIL("list head's prev is not its last node");
  return 0;
}

int pw_wheel_check(const pw_wheel *w, char *msg, size_t msglen) {
  size_t total = 0, n;
  pw_tick_t min, wheel_min = PW_TICK_MAX;
  int r;

  if ((r = check_list(&w->expired, &n, &min, msg, msglen)))
    return r;
  total += n;
  const pw_link *h = &w->expired;
  pw_tick_t expired_min = min;
  for (const pw_link *l = h->next; l != h; l = l->next) {
    const pw_timer *t = timer_of((pw_link *)l);
    if (t->deadline > w->now)
      FAIL("expired timer seq %llu has deadline %llu after now %llu", (unsigned long long)t->seq,
           (unsigned long long)t->deadline, (unsigned long long)w->now);
    if (w->expired_sorted && l->next != h && before(timer_of(l->next), t))
      FAIL("expired list marked sorted but seq %llu precedes a later timer",
           (unsigned long long)t->seq);
  }

  for (int lv = 0; lv < PW_LEVELS; lv++) {
    for (int s = 0; s < PW_SLOTS; s++) {
      h = &w->slot[lv][s];
      if ((r = check_list(h, &n, &min, msg, msglen)))
        return r;
      bool bit = (w->occupied[lv] >> s) & 1, lazy = (w->lazy[lv] >> s) & 1;
      if (bit != (n > 0))
        FAIL("level %d slot %d: bitmap says %d, list holds %zu", lv, s, bit, n);
      if (((w->unsorted[lv] >> s) & 1) && !n)
        FAIL("level %d slot %d: empty but marked unsorted", lv, s);
      if (lazy && !n)
        FAIL("level %d slot %d: empty but marked lazy", lv, s);
      if (!((w->unsorted[lv] >> s) & 1) && !lazy)
        for (const pw_link *l = h->next; l != h && l->next != h; l = l->next)
          if (before(timer_of(l->next), timer_of((pw_link *)l)))
            FAIL("level %d slot %d: marked sorted but out of order", lv, s);
      total += n;
      if (min < wheel_min)
        wheel_min = min;
      /* the first tick this slot can hold: a lazy slot's timers may be due
       * at or after it, the others exactly in it */
      int above = (lv + 1) * PW_LEVEL_BITS;
      pw_tick_t start = (above >= 64 ? 0 : (w->now >> above) << above) | (pw_tick_t)s << (6 * lv);
      for (const pw_link *l = h->next; l != h; l = l->next) {
        pw_tick_t d = timer_of((pw_link *)l)->deadline;
        /* recomputed here, not with level_of/slot_of, so a fault there shows */
        int hb = 63 - pw_clzll(d ^ w->now);
        bool exact = d > w->now && hb / PW_LEVEL_BITS == lv && (int)((d >> (6 * lv)) & 63) == s;
        if (!exact && !(lazy && d > w->now && d >= start))
          FAIL("deadline %llu misfiled at level %d slot %d (now %llu)", (unsigned long long)d, lv,
               s, (unsigned long long)w->now);
      }
    }
  }

  if ((r = check_list(&w->overflow, &n, &min, msg, msglen)))
    return r;
  total += n;
  if (min < wheel_min)
    wheel_min = min;
  for (const pw_link *l = w->overflow.next; l != &w->overflow; l = l->next) {
    pw_tick_t d = timer_of((pw_link *)l)->deadline;
    if (d <= w->now || level_of(d, w->now) < PW_LEVELS)
      FAIL("deadline %llu on the overflow list belongs in the wheel (now %llu)",
           (unsigned long long)d, (unsigned long long)w->now);
  }

  if (total != w->count)
    FAIL("count is %zu, lists hold %zu", w->count, total);
  if (w->next_valid && w->next_cached != wheel_min)
    FAIL("cached next deadline %llu, scan finds %llu", (unsigned long long)w->next_cached,
         (unsigned long long)wheel_min);
  /* What pw_wheel_next() would answer, worked out without its side effects
   * (sorting, caching), so that checking changes nothing. */
  int fl, fs = front_slot(w, &fl);
  bool unsettled = !w->next_valid && fs >= 0 && ((w->lazy[fl] >> fs) & 1);
  if (list_empty(&w->expired)) {
    /* unsettled: pw_wheel_next would answer after settle_front changed the
     * wheel, which the checker must not do; its answer is checked there */
    pw_tick_t fast = w->next_valid ? w->next_cached : next_pending(w);
    if (!unsettled && fast != wheel_min)
      FAIL("next deadline %llu, scan finds %llu", (unsigned long long)fast,
           (unsigned long long)wheel_min);
  } else if (w->expired_sorted && timer_of(w->expired.next)->deadline != expired_min) {
    FAIL("expired list head %llu is not its minimum %llu",
         (unsigned long long)timer_of(w->expired.next)->deadline, (unsigned long long)expired_min);
  }
  return 0;
}
