/*
 * slab.h -- fixed-size slots in aligned pages, walked in address order.
 *
 * A wheel allocates its timer handles here, not from the general allocator,
 * so that the garbage collector's walk over every pending handle reads
 * memory in order (pages one after another, each slot after the last) rather
 * than chasing list links to scattered objects: one dependent cache miss per
 * pending timer becomes a sequential scan the hardware prefetches.
 *
 * A set of pages belongs to one owner (a wheel) but may outlive it: slots
 * still allocated keep it, and the last of the owner's release and the slot
 * frees frees it.  The caller serialises every call on a set (pywheel makes
 * them all with the GIL held, the owner's release included).
 */
#ifndef PW_SLAB_H
#define PW_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PW_SLAB_PAGE ((size_t)64 * 1024) /* bytes a page, and its alignment */

typedef struct pw_slab_page pw_slab_page;

typedef struct pw_slab_set {
  size_t slot_size, per_page;
  pw_slab_page *pages;   /* every page, in the order they were made */
  pw_slab_page *partial; /* pages with a free slot */
  size_t refs;           /* live slots, plus one while the owner holds the set */
  size_t npages;
  /* told of every page made (added) and freed, e.g. to tell a memory tracer */
  void (*on_page)(void *page, size_t bytes, bool added);
} pw_slab_set;

pw_slab_set *pw_slab_set_new(size_t slot_size, void (*on_page)(void *, size_t, bool));
/* A set of slots of slot_size bytes (a multiple of 8, at most a quarter
 * page), held by the caller; NULL when out of memory. */

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

#endif /* PW_SLAB_H */
