/*
 * slab.h -- fixed-size slots in aligned pages, walked in address order.
 *
 * A wheel allocates its timer handles here, not from the general allocator,
 * so that the garbage collector's walk over every pending handle reads
 * memory in order (pages one after another, each slot after the last) rather
 * than chasing list links to scattered objects: one dependent cache miss per
 * pending timer becomes a sequential scan the hardware prefetches.
 *
 * Side words.  A set may give each slot up to PW_SLAB_SIDE_MAX pointer-sized
 * words kept apart from it, in its page's columns: word k of every slot of a
 * page lies next to word k of the next.  pywheel keeps a handle's callback,
 * arguments and context there, so that the collector's walk over a million
 * pending handles reads 8 bytes a handle (the callback column) instead of the
 * 104 of every handle, and skips a column that is all NULL on a page without
 * reading it (each page counts the non-NULL words of each column).  Reaching
 * a side word costs a mask, a multiply and an add (see pw_slab_word).  The
 * side words of a new slot are NULL; pw_slab_free sets them NULL again.
 *
 * A set of pages belongs to one owner (a wheel) but may outlive it: slots
 * still allocated keep it, and the last of the owner's release and the slot
 * frees frees it.  The caller serialises every call on a set (pywheel makes
 * them all with the GIL held, or on free-threaded CPython under the wheel's
 * lock, the owner's release included).
 */
#ifndef PW_SLAB_H
#define PW_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PW_SLAB_PAGE ((size_t)64 * 1024) /* bytes a page, and its alignment */
#define PW_SLAB_SIDE_MAX 4               /* side words a slot may have */

typedef struct pw_slab_page pw_slab_page;

#define PW_SLAB_HEAD ((size_t)256) /* bytes at the start of a page: its head */

/* The public part of a page's head, at the page's start. */
typedef struct pw_slab_head {
  uint32_t nonnull[PW_SLAB_SIDE_MAX]; /* the non-NULL side words of each column */
} pw_slab_head;

typedef struct pw_slab_set {
  size_t slot_size, per_page;
  size_t first; /* offset of slot 0 in a page */
  unsigned side_words;
  pw_slab_page *pages;   /* every page, in the order they were made */
  pw_slab_page *partial; /* pages with a free slot */
  size_t refs;           /* live slots, plus one while the owner holds the set */
  size_t npages;
  /* Empty pages are kept for reuse until the set is freed, instead of going
   * back at once (false from pw_slab_set_new; the owner may set it before
   * the first alloc).  pywheel sets it on free-threaded CPython, whose
   * lock-free readers of lists and dicts may still touch an object's header
   * just after its last reference went: its memory must stay an object's
   * slot, not go back to libc, while the wheel lives. */
  bool keep_empty;
  /* told of every page made (added) and freed, e.g. to tell a memory tracer */
  void (*on_page)(void *page, size_t bytes, bool added);
} pw_slab_set;

pw_slab_set *pw_slab_set_new(size_t slot_size, unsigned side_words,
                             void (*on_page)(void *, size_t, bool));
/* A set of slots of slot_size bytes (a multiple of 8, from 64 to a quarter
 * page) with side_words side words each (at most PW_SLAB_SIDE_MAX), held by
 * the caller; NULL when out of memory or the sizes are out of range. */

void pw_slab_release(pw_slab_set *s);
/* The owner lets go: the set is freed now if no slot is live, else by the
 * last pw_slab_free. */

void *pw_slab_alloc(pw_slab_set *s);
/* A slot, 8-byte aligned, contents undefined; NULL when out of memory. */

void pw_slab_free(void *slot);
/* Returns a slot from any set.  A page left empty is freed unless it is the
 * set's only page with room. */

int pw_slab_foreach(pw_slab_set *s, int (*fn)(void *slot, void *arg), void *arg);
/* Calls fn on every allocated slot, page by page in address order within
 * each page, stopping at the first non-zero return, which it returns.  fn
 * must not allocate or free. */

int pw_slab_foreach_side(pw_slab_set *s, unsigned k,
                         int (*fn)(void *const *words, size_t n, size_t nonnull, void *arg),
                         void *arg);
/* Calls fn on column k of every page that holds a non-NULL word k: the
 * words of the page's slots words[0..n), every slot ever allocated in it
 * (free ones are NULL), of which exactly `nonnull` are not NULL; stops at the
 * first non-zero return, which it returns.  A page whose column k is all NULL
 * costs the read of its head.  fn must not allocate, free or set a word. */

/*
 * A page's layout: its head (PW_SLAB_HEAD bytes), the side columns (word k
 * of slot i at column k, row i), the slots from the next 16-byte boundary.
 * It is a function of slot_size and side_words alone, so that a caller who
 * knows both at compile time reaches a side word by arithmetic on the
 * slot's address, without reading the page head: pages are 64 KiB-aligned,
 * so their heads share a few cache sets, and a head read on a random slot is
 * a miss that the word's own load would wait for.
 */
static inline size_t pw_slab_per_page(size_t slot_size, unsigned side_words) {
  return (PW_SLAB_PAGE - PW_SLAB_HEAD - 15) / (slot_size + side_words * sizeof(void *));
}

static inline size_t pw_slab_first(size_t slot_size, unsigned side_words) {
  size_t cols = side_words * pw_slab_per_page(slot_size, side_words) * sizeof(void *);
  return PW_SLAB_HEAD + ((cols + 15) & ~(size_t)15);
}
/* Offset of slot 0 from its page's start. */

static inline pw_slab_head *pw_slab_head_of(const void *slot) {
  return (pw_slab_head *)((uintptr_t)slot & ~(uintptr_t)(PW_SLAB_PAGE - 1));
}

static inline void **pw_slab_word(const void *slot, size_t slot_size, unsigned side_words,
                                  unsigned k) {
  uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(PW_SLAB_PAGE - 1);
  size_t i = ((uintptr_t)slot - page - pw_slab_first(slot_size, side_words)) / slot_size;
  return (void **)(page + PW_SLAB_HEAD) + k * pw_slab_per_page(slot_size, side_words) + i;
}
/* Where side word k of an allocated slot of a set of (slot_size, side_words)
 * is; read it freely, write it only with pw_slab_set_word. */

static inline void pw_slab_set_word(void *slot, size_t slot_size, unsigned side_words, unsigned k,
                                    void *v) {
  void **w = pw_slab_word(slot, slot_size, side_words, k);
  pw_slab_head *h = pw_slab_head_of(slot);
  h->nonnull[k] += (uint32_t)(v != NULL) - (uint32_t)(*w != NULL);
  *w = v;
}
/* Sets side word k of an allocated slot, keeping its page's count. */

#endif /* PW_SLAB_H */
