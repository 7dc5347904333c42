/*
 * test_slab.c -- the handle slabs against a model: random allocs and frees,
 * the walk sees exactly the live slots in address order within a page, no
 * two live slots overlap, pages are given back, and a set released by its
 * owner lives on until its last slot is freed.  Side words: a new slot's are
 * NULL, each slot's are its own (every index of a page), and the column walk
 * reports every non-NULL word, with the right count, and no other.  Built plain, under ASan and
 * under valgrind (make test-c, sanitize, valgrind).
 *
 *   ./test_slab [seed] [steps]
 */
#include "slab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOT 80
#define SIDE 3
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

/* What slot p's side word k holds in the model: column 0 always set,
 * column 1 for some slots, column 2 never (a column that is all NULL). */
static void *side_of(void *p, unsigned k) {
  uintptr_t a = (uintptr_t)p;
  if (k == 2 || (k == 1 && (a / SLOT) % 7))
    return NULL;
  return (void *)(a | (k + 1)); /* odd: no slot's address */
}

static void fill(void *slot) {
  for (unsigned k = 0; k < SIDE; k++)
    CHECK(*pw_slab_word(slot, SLOT, SIDE, k) == NULL, "a new slot's side word %u is not NULL", k);
  memset(slot, 0xab, SLOT); /* the whole slot is ours */
  uint64_t tag = (uint64_t)(uintptr_t)slot;
  memcpy((char *)slot + 8, &tag, sizeof tag);
  for (unsigned k = 0; k < SIDE; k++) {
    pw_slab_set_word(slot, SLOT, SIDE, k, (void *)1); /* counted, then replaced */
    pw_slab_set_word(slot, SLOT, SIDE, k, side_of(slot, k));
  }
}

struct cols {
  size_t seen, nonnull;
  unsigned k;
};

static int visit_col(void *const *words, size_t n, size_t nonnull, void *arg) {
  struct cols *c = arg;
  size_t here = 0;
  for (size_t i = 0; i < n; i++) {
    void *v = words[i];
    if (!v)
      continue;
    void *slot = (void *)((uintptr_t)v & ~(uintptr_t)7);
    CHECK(v == side_of(slot, c->k), "column %u holds %p, not a live slot's word", c->k, v);
    CHECK(*pw_slab_word(slot, SLOT, SIDE, c->k) == v, "column %u: word %p is not its slot's", c->k,
          v);
    here++;
  }
  CHECK(here == nonnull, "column %u: %zu non-NULL words on a page said to have %zu", c->k, here,
        nonnull);
  c->seen += here;
  return 0;
}

static void walk_check(pw_slab_set *s) {
  struct walk w = {0, NULL};
  CHECK(pw_slab_foreach(s, visit, &w) == 0, "walk stopped");
  CHECK(w.n == nlive, "walk saw %zu slots, %zu live", w.n, nlive);
  for (unsigned k = 0; k < SIDE; k++) {
    size_t want = 0;
    for (size_t i = 0; i < nlive; i++)
      want += side_of(live[i], k) != NULL;
    struct cols c = {0, 0, k};
    CHECK(pw_slab_foreach_side(s, k, visit_col, &c) == 0, "column walk stopped");
    CHECK(c.seen == want, "column %u: walk saw %zu words, %zu set", k, c.seen, want);
  }
  struct cols c = {0, 0, SIDE};
  CHECK(pw_slab_foreach_side(s, SIDE, visit_col, &c) == 0 && c.seen == 0, "a column past the last");
}

/* Every index of a page: each slot's side words are its own. */
static void index_check(void) {
  for (size_t size = 64; size <= PW_SLAB_PAGE / 4; size += 8) {
    pw_slab_set *s = pw_slab_set_new(size, 2, NULL);
    CHECK(s, "set_new(%zu)", size);
    size_t n = s->per_page;
    void **v = malloc(n * sizeof *v);
    CHECK(v, "malloc");
    for (size_t i = 0; i < n; i++) {
      v[i] = pw_slab_alloc(s);
      CHECK(v[i] && (i == 0 || pw_slab_head_of(v[i]) == pw_slab_head_of(v[0])), "one page");
      pw_slab_set_word(v[i], size, 2, 0, (char *)v[i] + 1);
      pw_slab_set_word(v[i], size, 2, 1, (char *)v[i] + 3);
    }
    pw_slab_head *h = pw_slab_head_of(v[0]);
    char *page = (char *)h, *first = page + pw_slab_first(size, 2);
    CHECK(n == pw_slab_per_page(size, 2), "per_page (size %zu)", size);
    CHECK((char *)v[0] == first, "slot 0 not at its place (size %zu)", size);
    CHECK((char *)pw_slab_word(v[n - 1], size, 2, 1) < first, "columns overlap the slots (%zu)",
          size);
    CHECK((char *)pw_slab_word(v[0], size, 2, 0) >= page + PW_SLAB_HEAD, "columns in the head");
    CHECK(first + n * size <= page + PW_SLAB_PAGE, "slots past the page (size %zu)", size);
    CHECK(h->nonnull[0] == n && h->nonnull[1] == n, "counts (size %zu)", size);
    for (size_t i = 0; i < n; i++) {
      CHECK(*pw_slab_word(v[i], size, 2, 0) == (char *)v[i] + 1 &&
                *pw_slab_word(v[i], size, 2, 1) == (char *)v[i] + 3,
            "slot %zu of size %zu has another's side words", i, size);
      CHECK(pw_slab_word(v[i], size, 2, 0) == (void **)(page + PW_SLAB_HEAD) + i &&
                pw_slab_word(v[i], size, 2, 1) == (void **)(page + PW_SLAB_HEAD) + n + i,
            "slot %zu of size %zu: its words are not at row %zu", i, size, i);
      pw_slab_free(v[i]);
    }
    free(v);
    pw_slab_release(s);
  }
}

int main(int argc, char **argv) {
  rng = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
  long steps = argc > 2 ? atol(argv[2]) : 400000;
  if (!rng)
    rng = 1;
  CHECK(!pw_slab_set_new(100, 0, NULL) && !pw_slab_set_new(8, 0, NULL) &&
            !pw_slab_set_new(64, PW_SLAB_SIDE_MAX + 1, NULL),
        "bad slot sizes accepted");
  index_check();
  pw_slab_set *s = pw_slab_set_new(SLOT, SIDE, on_page);
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
  /* keep_empty: pages stay while the set is held, and go with it */
  s = pw_slab_set_new(SLOT, SIDE, on_page);
  s->keep_empty = true;
  for (size_t k = 0; k < 3 * s->per_page; k++)
    live[nlive++] = pw_slab_alloc(s);
  long kept = pages_now;
  while (nlive)
    pw_slab_free(live[--nlive]);
  CHECK(kept >= 3 && pages_now == kept, "keep_empty: %ld pages of %ld kept", pages_now, kept);
  void *again = pw_slab_alloc(s);
  CHECK(pages_now == kept, "keep_empty: a page made with %ld empty ones kept", kept);
  pw_slab_free(again);
  pw_slab_release(s);
  CHECK(pages_now == 0, "keep_empty: %ld pages left after the release", pages_now);
  /* released empty: freed at once */
  s = pw_slab_set_new(SLOT, SIDE, on_page);
  void *p = pw_slab_alloc(s);
  pw_slab_free(p);
  pw_slab_release(s);
  CHECK(pages_now == 0, "%ld pages left after an empty release", pages_now);
  printf("test_slab: ok: %ld steps, %ld pages made, %zu slots live at the release\n", steps,
         pages_made, held);
  return 0;
}
