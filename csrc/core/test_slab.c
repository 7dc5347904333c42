/*
 * test_slab.c -- the handle slabs against a model: random allocs and frees,
 * the walk sees exactly the live slots in address order within a page, no
 * two live slots overlap, pages are given back, and a set released by its
 * owner lives on until its last slot is freed.  Built plain, under ASan and
 * under valgrind (make test-c, sanitize, valgrind).
 *
 *   ./test_slab [seed] [steps]
 */
#include "slab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOT 104
#define MAXLIVE 20000

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "test_slab: FAIL %s:%d: ", __FILE__, __LINE__);                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static uint64_t rng;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void *live[MAXLIVE];
static size_t nlive;
static long pages_now, pages_made;

static void on_page(void *page, size_t bytes, bool added) {
  CHECK(((uintptr_t)page & (bytes - 1)) == 0, "page %p not aligned to %zu", page, bytes);
  pages_now += added ? 1 : -1;
  pages_made += added;
}

struct walk {
  size_t n;
  char *last;
};

static int visit(void *slot, void *arg) {
  struct walk *w = arg;
  uint64_t tag;
  memcpy(&tag, (char *)slot + 8, sizeof tag);
  CHECK(tag == (uint64_t)(uintptr_t)slot, "slot %p holds another's tag", slot);
  /* address order within a page: the walk may only go back when it changes page */
  if (w->last && ((uintptr_t)w->last & ~(uintptr_t)(PW_SLAB_PAGE - 1)) ==
                     ((uintptr_t)slot & ~(uintptr_t)(PW_SLAB_PAGE - 1)))
    CHECK((char *)slot > w->last, "walk out of address order within a page");
  w->last = slot;
  w->n++;
  return 0;
}

static void fill(void *slot) {
  memset(slot, 0xab, SLOT); /* the whole slot is ours */
  uint64_t tag = (uint64_t)(uintptr_t)slot;
  memcpy((char *)slot + 8, &tag, sizeof tag);
}

static void walk_check(pw_slab_set *s) {
  struct walk w = {0, NULL};
  CHECK(pw_slab_foreach(s, visit, &w) == 0, "walk stopped");
  CHECK(w.n == nlive, "walk saw %zu slots, %zu live", w.n, nlive);
}

int main(int argc, char **argv) {
  rng = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
  long steps = argc > 2 ? atol(argv[2]) : 400000;
  if (!rng)
    rng = 1;
  CHECK(!pw_slab_set_new(100, NULL) && !pw_slab_set_new(8, NULL), "bad slot sizes accepted");
  pw_slab_set *s = pw_slab_set_new(SLOT, on_page);
  CHECK(s, "set_new");
  for (long k = 0; k < steps; k++) {
    /* drift between nearly empty and nearly full, so pages come and go */
    bool grow = (k / 50000) % 2 == 0;
    if (nlive < MAXLIVE && (nlive == 0 || rnd() % 100 < (grow ? 70u : 30u))) {
      void *p = pw_slab_alloc(s);
      CHECK(p && ((uintptr_t)p & 7) == 0, "alloc");
      fill(p);
      live[nlive++] = p;
    } else {
      size_t i = rnd() % nlive;
      pw_slab_free(live[i]);
      live[i] = live[--nlive];
    }
    if (k % 9973 == 0)
      walk_check(s);
  }
  walk_check(s);
  CHECK(pages_now == (long)s->npages, "pages told %ld, set holds %zu", pages_now, s->npages);
  size_t min_pages = (nlive + s->per_page - 1) / s->per_page;
  CHECK(s->npages <= min_pages + nlive / 2 + 1, "pages not given back: %zu for %zu live", s->npages,
        nlive);
  /* released with slots live: it lives until the last one goes */
  size_t held = nlive;
  pw_slab_release(s);
  while (nlive) {
    size_t i = rnd() % nlive;
    pw_slab_free(live[i]);
    live[i] = live[--nlive];
  }
  CHECK(pages_now == 0, "%ld pages left after the last free", pages_now);
  /* released empty: freed at once */
  s = pw_slab_set_new(SLOT, on_page);
  void *p = pw_slab_alloc(s);
  pw_slab_free(p);
  pw_slab_release(s);
  CHECK(pages_now == 0, "%ld pages left after an empty release", pages_now);
  printf("test_slab: ok: %ld steps, %ld pages made, %zu slots live at the release\n", steps,
         pages_made, held);
  return 0;
}
