/* slab.c -- see slab.h for the contract. */
#define _GNU_SOURCE /* platform.h: POSIX declarations under -std=c11 */
#include "slab.h"

#include <stdlib.h>

#include "platform.h"

/* Under AddressSanitizer a slot is poisoned while free, so that a use after
 * free of a handle is still caught although the memory stays ours. */
#if defined(__SANITIZE_ADDRESS__)
#define PW_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PW_ASAN 1
#endif
#endif
#ifdef PW_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define MIN_SLOT 64
#define WORDS (PW_SLAB_PAGE / MIN_SLOT / 64)

struct pw_slab_page {
  pw_slab_head h;              /* first: a page's address is its head's */
  pw_slab_page *next, *prev;   /* in set->pages */
  pw_slab_page *pnext, *pprev; /* in set->partial, while in_partial */
  pw_slab_set *set;
  void *free;           /* freed slots, chained through their first word */
  uint32_t live, fresh; /* allocated slots; slots from `fresh` on were never used */
  bool in_partial;
  uint64_t used[WORDS]; /* allocated slots */
};

_Static_assert(sizeof(pw_slab_page) <= PW_SLAB_HEAD, "a page's head outgrew its room");

/* The layout: see pw_slab_first in slab.h. */
static inline void **col(pw_slab_page *pg, size_t k) {
  return (void **)((char *)pg + PW_SLAB_HEAD) + k * pg->set->per_page;
}

static inline char *slot_at(pw_slab_page *pg, size_t i) {
  return (char *)pg + pg->set->first + i * pg->set->slot_size;
}

static inline size_t index_of(pw_slab_page *pg, void *p) {
  return (size_t)((char *)p - (char *)pg - pg->set->first) / pg->set->slot_size;
}

static inline pw_slab_page *page_of(void *p) {
  return (pw_slab_page *)((uintptr_t)p & ~(uintptr_t)(PW_SLAB_PAGE - 1));
}

static void partial_push(pw_slab_set *s, pw_slab_page *pg) {
  pg->pprev = NULL;
  pg->pnext = s->partial;
  if (s->partial)
    s->partial->pprev = pg;
  s->partial = pg;
  pg->in_partial = true;
}

static void partial_remove(pw_slab_set *s, pw_slab_page *pg) {
  if (pg->pprev)
    pg->pprev->pnext = pg->pnext;
  else
    s->partial = pg->pnext;
  if (pg->pnext)
    pg->pnext->pprev = pg->pprev;
  pg->in_partial = false;
}

static pw_slab_page *page_new(pw_slab_set *s) {
  pw_slab_page *pg = pw_pages_alloc(PW_SLAB_PAGE, PW_SLAB_PAGE);
  if (!pg)
    return NULL;
  for (unsigned k = 0; k < PW_SLAB_SIDE_MAX; k++)
    pg->h.nonnull[k] = 0;
  pg->set = s;
  pg->free = NULL;
  pg->live = pg->fresh = 0;
  for (size_t i = 0; i < WORDS; i++)
    pg->used[i] = 0;
  POISON(slot_at(pg, 0), s->per_page * s->slot_size);
  pg->prev = NULL;
  pg->next = s->pages;
  if (s->pages)
    s->pages->prev = pg;
  s->pages = pg;
  s->npages++;
  partial_push(s, pg);
  if (s->on_page)
    s->on_page(pg, PW_SLAB_PAGE, true);
  return pg;
}

static void page_free(pw_slab_set *s, pw_slab_page *pg) {
  if (pg->in_partial)
    partial_remove(s, pg);
  if (pg->prev)
    pg->prev->next = pg->next;
  else
    s->pages = pg->next;
  if (pg->next)
    pg->next->prev = pg->prev;
  s->npages--;
  if (s->on_page)
    s->on_page(pg, PW_SLAB_PAGE, false);
  UNPOISON(slot_at(pg, 0), s->per_page * s->slot_size);
  pw_pages_free(pg);
}

pw_slab_set *pw_slab_set_new(size_t slot_size, unsigned side_words,
                             void (*on_page)(void *, size_t, bool)) {
  if (slot_size < MIN_SLOT || slot_size % 8 || slot_size > PW_SLAB_PAGE / 4 ||
      side_words > PW_SLAB_SIDE_MAX)
    return NULL;
  pw_slab_set *s = malloc(sizeof *s);
  if (!s)
    return NULL;
  s->slot_size = slot_size;
  s->side_words = side_words;
  s->per_page = pw_slab_per_page(slot_size, side_words);
  s->first = pw_slab_first(slot_size, side_words);
  s->pages = s->partial = NULL;
  s->refs = 1;
  s->npages = 0;
  s->keep_empty = false;
  s->on_page = on_page;
  return s;
}

static void set_free(pw_slab_set *s) {
  while (s->pages)
    page_free(s, s->pages);
  free(s);
}

void pw_slab_release(pw_slab_set *s) {
  if (--s->refs == 0)
    set_free(s);
}

void *pw_slab_alloc(pw_slab_set *s) {
  pw_slab_page *pg = s->partial;
  if (!pg && !(pg = page_new(s)))
    return NULL;
  char *slot;
  size_t i;
  if (pg->free) {
    slot = pg->free;
    UNPOISON(slot, s->slot_size);
    pg->free = *(void **)slot;
    i = index_of(pg, slot); /* its side words are NULL since its free */
  } else {
    i = pg->fresh++;
    slot = slot_at(pg, i);
    UNPOISON(slot, s->slot_size);
    for (unsigned k = 0; k < s->side_words; k++)
      col(pg, k)[i] = NULL; /* never written */
  }
  pg->used[i / 64] |= (uint64_t)1 << (i % 64);
  pg->live++;
  if (!pg->free && pg->fresh == s->per_page)
    partial_remove(s, pg);
  s->refs++;
  return slot;
}

void pw_slab_free(void *slot) {
  pw_slab_page *pg = page_of(slot);
  pw_slab_set *s = pg->set;
  size_t i = index_of(pg, slot);
  pg->used[i / 64] &= ~((uint64_t)1 << (i % 64));
  /* A free slot's words are NULL: the column walk reads them.  A column
   * whose count is 0 is all NULL already, and is not touched (a cache miss
   * each, on a free at a random place). */
  for (unsigned k = 0; k < s->side_words; k++) {
    if (!pg->h.nonnull[k])
      continue;
    void **w = &col(pg, k)[i];
    pg->h.nonnull[k] -= *w != NULL;
    *w = NULL;
  }
  *(void **)slot = pg->free;
  pg->free = slot;
  POISON(slot, s->slot_size);
  pg->live--;
  if (!pg->in_partial)
    partial_push(s, pg);
  /* an empty page goes back, unless it is the one with room left or the
   * set keeps its pages */
  if (pg->live == 0 && !s->keep_empty && (pg->pnext || pg->pprev))
    page_free(s, pg);
  if (--s->refs == 0)
    set_free(s);
}

int pw_slab_foreach(pw_slab_set *s, int (*fn)(void *slot, void *arg), void *arg) {
  for (pw_slab_page *pg = s->pages; pg; pg = pg->next) {
    for (size_t w = 0; w < WORDS; w++) {
      uint64_t m = pg->used[w];
      while (m) {
        size_t i = w * 64 + (size_t)pw_ctzll(m);
        m &= m - 1;
        int r = fn(slot_at(pg, i), arg);
        if (r)
          return r;
      }
    }
  }
  return 0;
}

int pw_slab_foreach_side(pw_slab_set *s, unsigned k,
                         int (*fn)(void *const *words, size_t n, size_t nonnull, void *arg),
                         void *arg) {
  if (k >= s->side_words)
    return 0;
  for (pw_slab_page *pg = s->pages; pg; pg = pg->next) {
    if (!pg->h.nonnull[k])
      continue;
    int r = fn(col(pg, k), pg->fresh, pg->h.nonnull[k], arg);
    if (r)
      return r;
  }
  return 0;
}
