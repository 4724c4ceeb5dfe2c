/* learner: a group's shared prefix, run forward once per step.
 *
 * The members of a group play one task, so their episodes begin with the
 * same tokens (the document, the tools, the question). In exact mode a
 * step runs every window of an episode in order, each from the state the
 * one before left, and backward only where the window holds sampled
 * targets; gradients do not cross a window's start (its state_in is an
 * input). So the windows before an episode's first trained window are
 * forward only, and the state they leave depends on nothing but the
 * tokens (and images, and recorded routing) before that window's start.
 * Episodes whose tokens there are the same (hashed to find them, then
 * compared whole, so that no hash collision, crafted or not, ever hands
 * an episode another's state) get the same state: the first
 * computes it, the others take it from here, and every gradient of the
 * step is the one the unshared step gives, bit for bit (the same windows
 * run the same arithmetic; only repetitions are left out). The cache holds
 * one state per prefix for the step in progress: the weights move at the
 * step's end, which clears it. */
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"

typedef struct {
  uint64_t key;
  size_t upto;
  const lh_learner_episode *owner;  /* the episode that computed it; lives through the step */
  int with_routing;
  float *state;
} entry;

struct lh_learner_prefix_cache {
  size_t state_floats;
  entry *e;
  size_t n, cap;
  uint64_t hits, positions_saved;
};

int lh_learner_prefix_cache_new(size_t state_floats, lh_learner_prefix_cache **out, lh_errbuf *err) {
  *out = calloc(1, sizeof **out);
  if (!*out) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for the shared-prefix cache");
  (*out)->state_floats = state_floats;
  return 0;
}

void lh_learner_prefix_cache_clear(lh_learner_prefix_cache *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n; i++) free(c->e[i].state);
  c->n = 0;
}

void lh_learner_prefix_cache_free(lh_learner_prefix_cache *c) {
  if (!c) return;
  lh_learner_prefix_cache_clear(c);
  free(c->e);
  free(c);
}

uint64_t lh_learner_prefix_key(const lh_learner_episode *ep, size_t upto, int with_routing) {
  lh_file_sum *h = NULL;
  if (lh_file_sum_new(0, &h) < 0) return 0;
  uint64_t n = upto;
  lh_file_sum_add(h, &n, sizeof n);
  lh_file_sum_add(h, ep->tokens, upto * sizeof *ep->tokens);
  if (with_routing && ep->routed_experts)
    lh_file_sum_add(h, ep->routed_experts, upto * ep->routed_layers * ep->routed_topk * sizeof *ep->routed_experts);
  for (size_t i = 0; i < ep->n_images; i++) {
    if (ep->image_offsets[i] >= upto) break;
    const Longhaul__Image *im = ep->images[i];
    uint64_t dims[4] = {ep->image_offsets[i], im->width, im->height, im->channels};
    lh_file_sum_add(h, dims, sizeof dims);
    lh_file_sum_add(h, im->pixels.data, im->pixels.len);
  }
  uint64_t key = lh_file_sum_value(h);
  lh_file_sum_free(h);
  return key ? key : 1;
}

/* Whether a and b hold the same tokens, routing and images before upto. */
static int same_prefix(const lh_learner_episode *a, const lh_learner_episode *b, size_t upto, int with_routing) {
  if (a->n < upto || b->n < upto || memcmp(a->tokens, b->tokens, upto * sizeof *a->tokens)) return 0;
  if (with_routing && (!a->routed_experts) != (!b->routed_experts)) return 0;
  if (with_routing && a->routed_experts) {
    if (a->routed_layers != b->routed_layers || a->routed_topk != b->routed_topk) return 0;
    size_t per = (size_t)a->routed_layers * a->routed_topk;
    if (memcmp(a->routed_experts, b->routed_experts, upto * per * sizeof *a->routed_experts)) return 0;
  }
  size_t ia = 0, ib = 0;
  while (ia < a->n_images && a->image_offsets[ia] < upto) ia++;
  while (ib < b->n_images && b->image_offsets[ib] < upto) ib++;
  if (ia != ib) return 0;
  for (size_t i = 0; i < ia; i++) {
    const Longhaul__Image *x = a->images[i], *y = b->images[i];
    if (a->image_offsets[i] != b->image_offsets[i] || x->width != y->width || x->height != y->height ||
        x->channels != y->channels || x->pixels.len != y->pixels.len ||
        memcmp(x->pixels.data, y->pixels.data, x->pixels.len))
      return 0;
  }
  return 1;
}

const float *lh_learner_prefix_cache_get(lh_learner_prefix_cache *c, const lh_learner_episode *ep, uint64_t key,
                                         size_t upto, int with_routing) {
  for (size_t i = 0; c && i < c->n; i++)
    if (c->e[i].key == key && c->e[i].upto == upto && c->e[i].with_routing == with_routing &&
        same_prefix(c->e[i].owner, ep, upto, with_routing)) {
      c->hits++;
      c->positions_saved += upto;
      return c->e[i].state;
    }
  return NULL;
}

int lh_learner_prefix_cache_put(lh_learner_prefix_cache *c, const lh_learner_episode *ep, uint64_t key, size_t upto,
                                int with_routing, const float *state) {
  if (!c || !key) return 0;
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 16;
    entry *e = realloc(c->e, cap * sizeof *e);
    if (!e) return LH_ENOMEM;
    c->e = e, c->cap = cap;
  }
  float *copy = malloc(c->state_floats * sizeof *copy);
  if (!copy) return LH_ENOMEM;
  memcpy(copy, state, c->state_floats * sizeof *copy);
  c->e[c->n++] = (entry){key, upto, ep, with_routing, copy};
  return 0;
}

void lh_learner_prefix_cache_counts(const lh_learner_prefix_cache *c, uint64_t *hits, uint64_t *positions_saved) {
  if (hits) *hits = c ? c->hits : 0;
  if (positions_saved) *positions_saved = c ? c->positions_saved : 0;
}
