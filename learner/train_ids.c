/* learner: sorted sets of episode ids, the trainer's seen and done sets.
 * Episode ids are the actors' (hashes, in no order), so a set is kept
 * sorted and searched by bisection. */
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

int lh_learner_id_set_add(lh_learner_id_set *s, uint64_t id) {
  size_t at;
  if (lh_learner_id_set_find(s, id, &at)) return 0;
  if (s->n == s->cap) {
    size_t c = s->cap ? 2 * s->cap : 256;
    uint64_t *p = realloc(s->ids, c * sizeof *p);
    if (!p) return LH_ENOMEM;
    s->ids = p, s->cap = c;
  }
  memmove(s->ids + at + 1, s->ids + at, (s->n - at) * sizeof *s->ids);
  s->ids[at] = id;
  s->n++;
  return 0;
}
