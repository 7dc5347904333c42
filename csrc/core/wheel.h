/*
 * wheel.h -- a hierarchical timing wheel whose clock is a parameter.
 *
 * The wheel never reads a clock, sleeps, starts a thread, allocates or
 * touches Python.  Time comes in as integer ticks through pw_wheel_advance();
 * expired timers are pulled out one at a time with pw_wheel_pop(), earliest
 * (deadline, sub, seq) first: `sub` lets an owner with finer deadlines than
 * ticks have them handed out in its own order, so any prefix of what is due
 * can be run before the rest is even looked at.  Timers are intrusive: the caller embeds a pw_timer
 * in its own object and owns its memory.
 *
 * Placement: a timer with deadline d > now lives on the level of the highest
 * bit in which d differs from now (6 bits a level, 64 slots, one occupancy
 * bitmap per level), in the slot named by d's digit on that level.  Beyond
 * the top level it waits on an overflow list.  Timers with d <= now are on the
 * expired list.  Advancing re-files only the slots whose range was passed, so
 * a timer in the wheel moves at most once per level over its life.  The
 * overflow list is re-filed whenever `now` crosses a multiple of 2^36 ticks
 * (795 days at 1 ms), which is what a deadline that far away costs.
 *
 * Moving a deadline later (pw_wheel_move) only records it: the timer stays
 * where it was filed, in a slot marked lazy, and is re-filed by its real
 * deadline when that slot is reached by advancing or becomes the front of
 * the wheel (the slot pw_wheel_next() looks at).  Since it was filed no later
 * than its deadline, it is always met in time; and an idle timeout pushed
 * back on every read touches its own timer only, not its neighbours.
 */
#ifndef PW_WHEEL_H
#define PW_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PW_LEVEL_BITS 6
#define PW_SLOTS (1 << PW_LEVEL_BITS)
/* 6 levels cover 2^36 ticks (795 days at 1 ms); later deadlines overflow. */
#define PW_LEVELS 6
#define PW_TICK_MAX UINT64_MAX

typedef uint64_t pw_tick_t;

typedef struct pw_link {
  struct pw_link *next, *prev;
} pw_link;

/* Embed one in your object; initialise it with pw_timer_init(). */
typedef struct pw_timer {
  pw_link link;       /* first member: a pw_link* to a linked timer is its pw_timer* */
  pw_tick_t deadline; /* tick at which the timer becomes due */
  uint64_t seq;       /* scheduling order, assigned by the wheel: breaks ties */
  uint32_t sub;       /* the owner's order within one tick, before seq (0 if unused);
                         set it before pw_wheel_add or pw_wheel_move */
  uint8_t owner[4];   /* never read or written by the wheel: room for the owner's
                         flags in what would be padding */
} pw_timer;

typedef struct pw_wheel {
  pw_tick_t now;
  uint64_t next_seq;
  size_t count; /* timers linked anywhere in the wheel, expired ones included */
  uint64_t occupied[PW_LEVELS];
  uint64_t unsorted[PW_LEVELS]; /* slots not in (deadline, sub, seq) order */
  uint64_t lazy[PW_LEVELS];     /* slots that may hold timers moved later (within occupied) */
  pw_link slot[PW_LEVELS][PW_SLOTS];
  pw_link overflow;
  pw_link expired;
  bool expired_sorted; /* expired list is in (deadline, sub, seq) order */
  bool next_valid;     /* next_cached holds the earliest non-expired deadline */
  pw_tick_t next_cached;
} pw_wheel;

void pw_wheel_init(pw_wheel *w, pw_tick_t now);
/* An empty wheel whose time is `now`.  Links nothing, so there is no fini. */

static inline void pw_timer_init(pw_timer *t) {
  t->link.next = t->link.prev = NULL;
  t->deadline = 0;
  t->seq = 0;
  t->sub = 0;
}
/* Marks the timer unlinked.  Needed once before its first pw_wheel_add(). */

static inline bool pw_timer_linked(const pw_timer *t) { return t->link.next != NULL; }
/* True while the timer is in a wheel (pending or expired but not yet popped). */

void pw_wheel_add(pw_wheel *w, pw_timer *t, pw_tick_t deadline);
/* Links an unlinked timer, giving it the next sequence number.  O(1).  A
 * deadline <= now puts it straight on the expired list. */

void pw_wheel_put(pw_wheel *w, pw_timer *t);
/* Links an unlinked timer keeping its deadline and seq: puts a popped timer
 * back in the place it had.  O(1). */

bool pw_wheel_cancel(pw_wheel *w, pw_timer *t);
/* Unlinks the timer if it is linked and says whether it was.  O(1). */

void pw_wheel_move(pw_wheel *w, pw_timer *t, pw_tick_t deadline);
/* Gives a linked timer a new deadline and the next sequence number (a new
 * place among equal deadlines, as pw_wheel_add would).  O(1).  A later
 * deadline of a timer that has not expired is recorded in the timer alone
 * (see the top of this file); an earlier one re-files it at once. */

void pw_wheel_advance(pw_wheel *w, pw_tick_t now);
/* Moves time forward to `now` (an earlier value is ignored); timers that fell
 * due move to the expired list.  Amortised O(1) a timer per level crossed. */

pw_timer *pw_wheel_pop(pw_wheel *w);
/* Unlinks and returns the expired timer with the least (deadline, sub, seq),
 * or NULL when none has expired. */

pw_tick_t pw_wheel_next(pw_wheel *w);
/* The earliest deadline of any linked timer (<= now if one has expired), or
 * PW_TICK_MAX if none is linked.  Bit operations when the earliest timer is
 * within 64 ticks; otherwise one scan of the single slot that holds it,
 * cached until that minimum changes.  A lazy front slot is re-filed first. */

static inline size_t pw_wheel_count(const pw_wheel *w) { return w->count; }
static inline pw_tick_t pw_wheel_now(const pw_wheel *w) { return w->now; }

pw_timer *pw_wheel_any(pw_wheel *w);
/* Some linked timer (expired ones first), or NULL.  With pw_wheel_cancel it
 * empties a wheel without advancing time. */

int pw_wheel_foreach(const pw_wheel *w, int (*fn)(pw_timer *t, void *arg), void *arg);
/* Calls fn on every linked timer in no particular order, stopping at the
 * first non-zero return, which it returns.  fn must not change the wheel. */

int pw_wheel_foreach_at(const pw_wheel *w, pw_tick_t tick, int (*fn)(pw_timer *t, void *arg),
                        void *arg);
/* Calls fn on every linked timer whose deadline is `tick`, in no particular
 * order, stopping at the first non-zero return, which it returns.  Scans the
 * one list that holds that tick (the expired list, a slot, or the overflow
 * list), which may hold other deadlines too.  fn may pw_wheel_cancel() the
 * timer it is given, and nothing else.  Complete for a tick <= now or for the
 * tick pw_wheel_next() has just returned: a timer moved later to any other
 * tick may still wait in the slot it was filed in. */

int pw_wheel_check(const pw_wheel *w, char *msg, size_t msglen);
/* Recomputes every fast answer (placement, bitmaps, count, next deadline,
 * sortedness, links) by brute force, changing nothing.  Returns 0 if all
 * agree, else -EINVAL with the first disagreement described in msg. */

#endif /* PW_WHEEL_H */
