/* learner: sorted sets of episode ids, the trainer's seen and done sets.
 * Episode ids are the actors' (hashes, in no order), so a set is kept
 * sorted and searched by bisection. Each id carries a key, the oldest
 * policy version its episode sampled with, by which the set forgets it
 * once that is too old for any step to train (lh_learner_id_set_prune):
 * the sets stay as large as the trainable window, not the run. */
#include <stdlib.h>
#include <string.h>

#include "learner/train_internal.h"

int lh_learner_id_set_find(const lh_learner_id_set *s, uint64_t id, size_t *at) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (s->ids[mid] < id) lo = mid + 1;
    else hi = mid;
  }
  *at = lo;
  return lo < s->n && s->ids[lo] == id;
}

int lh_learner_id_set_add(lh_learner_id_set *s, uint64_t id, uint64_t key) {
  size_t at;
  if (lh_learner_id_set_find(s, id, &at)) return 0;
  if (s->n == s->cap) {
    size_t c = s->cap ? 2 * s->cap : 256;
    uint64_t *p = realloc(s->ids, c * sizeof *p);
    if (!p) return LH_ENOMEM;
    s->ids = p;
    uint64_t *k = realloc(s->keys, c * sizeof *k);
    if (!k) return LH_ENOMEM;
    s->keys = k, s->cap = c;
  }
  memmove(s->ids + at + 1, s->ids + at, (s->n - at) * sizeof *s->ids);
  memmove(s->keys + at + 1, s->keys + at, (s->n - at) * sizeof *s->keys);
  s->ids[at] = id, s->keys[at] = key;
  s->n++;
  return 0;
}

void lh_learner_id_set_remove(lh_learner_id_set *s, uint64_t id) {
  size_t at;
  if (!lh_learner_id_set_find(s, id, &at)) return;
  memmove(s->ids + at, s->ids + at + 1, (s->n - at - 1) * sizeof *s->ids);
  memmove(s->keys + at, s->keys + at + 1, (s->n - at - 1) * sizeof *s->keys);
  s->n--;
}

size_t lh_learner_id_set_prune(lh_learner_id_set *s, uint64_t below) {
  size_t kept = 0, n = s->n;
  for (size_t i = 0; i < n; i++)
    if (s->keys[i] >= below) s->ids[kept] = s->ids[i], s->keys[kept] = s->keys[i], kept++;
  s->n = kept;
  /* A set that shrank to a quarter of its room gives half of it back. */
  if (s->cap > 512 && kept < s->cap / 4) {
    size_t c = s->cap / 2;
    uint64_t *p = malloc(c * sizeof *p), *k = malloc(c * sizeof *k);
    if (p && k) {
      memcpy(p, s->ids, kept * sizeof *p), memcpy(k, s->keys, kept * sizeof *k);
      free(s->ids), free(s->keys);
      s->ids = p, s->keys = k, s->cap = c;
    } else {
      free(p), free(k);
    }
  }
  return n - kept;
}

void lh_learner_id_set_free(lh_learner_id_set *s) {
  free(s->ids);
  free(s->keys);
  memset(s, 0, sizeof *s);
}
