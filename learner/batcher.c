/* learner: batches made of whole groups of episodes.
 *
 * Groups live in one array in order of their first episode; a complete
 * group gets a completion number, and batches take complete groups in that
 * order. Batches are tens of groups and pending groups at most a few
 * hundred, so linear scans are the simple and sufficient choice. */
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "learner/internal.h"

typedef struct {
  uint64_t group_id;
  lh_learner_batch_item *items;  /* group_size */
  size_t n;                      /* arrived */
  size_t admitted;
  uint64_t completed;            /* 0 while incomplete, else completion order from 1 */
} group;

struct lh_learner_batcher {
  size_t batch_episodes, group_size, max_pending;
  group *groups;
  size_t n_groups, cap_groups;
  uint64_t next_completion;
  size_t ready;  /* admitted episodes in complete groups */
  size_t pending;
  uint64_t closed_early, discarded;
  /* lh_learner_batcher_skip_flat */
  int skip_flat;
  int (*on_flat)(void *ctx, const lh_learner_batch_item *item);
  void *flat_ctx;
  uint64_t flat_groups, flat_episodes;
};

lh_learner_batcher *lh_learner_batcher_new(size_t batch_episodes, size_t group_size,
                                           size_t max_pending_groups, lh_errbuf *err) {
  if (batch_episodes < 1 || group_size < 1 || max_pending_groups < 1) {
    lh_errbuf_set(err, LH_ELEARNER_BATCH_PARAMS,
                  "batcher: batch_episodes=%zu, group_size=%zu and max_pending_groups=%zu must all be >= 1",
                  batch_episodes, group_size, max_pending_groups);
    return NULL;
  }
  lh_learner_batcher *b = calloc(1, sizeof *b);
  if (!b) {
    lh_errbuf_set(err, LH_ENOMEM, "batcher: out of memory");
    return NULL;
  }
  b->batch_episodes = batch_episodes;
  b->group_size = group_size;
  b->max_pending = max_pending_groups;
  return b;
}

void lh_learner_batcher_free(lh_learner_batcher *b) {
  if (!b) return;
  for (size_t i = 0; i < b->n_groups; i++) free(b->groups[i].items);
  free(b->groups);
  free(b);
}

static void remove_group(lh_learner_batcher *b, size_t i) {
  free(b->groups[i].items);
  memmove(b->groups + i, b->groups + i + 1, (b->n_groups - i - 1) * sizeof *b->groups);
  b->n_groups--;
}

/* Whether every arrived member of g has the same reward (two at least):
 * under grpo and rloo each of its advantages is then 0, so it teaches
 * nothing. */
static int flat(const group *g) {
  if (g->n < 2) return 0;
  for (size_t j = 1; j < g->n; j++)
    if (g->items[j].reward != g->items[0].reward) return 0;
  return 1;
}

/* Marks group i complete, or discards it when nothing in it was admitted
 * or, with skip_flat, when it is flat (its admitted members go to
 * on_flat). A negative code of on_flat is returned; the group is gone
 * either way. */
static int complete(lh_learner_batcher *b, size_t i) {
  group *g = &b->groups[i];
  b->pending--;
  if (g->admitted == 0) {
    b->discarded++;
    remove_group(b, i);
    return 0;
  }
  if (b->skip_flat && flat(g)) {
    int rc = 0;
    for (size_t j = 0; j < g->n && !rc; j++)
      if (g->items[j].admitted && b->on_flat) rc = b->on_flat(b->flat_ctx, &g->items[j]);
    b->flat_groups++;
    b->flat_episodes += g->admitted;
    remove_group(b, i);
    return rc;
  }
  g->completed = ++b->next_completion;
  b->ready += g->admitted;
  return 0;
}

int lh_learner_batcher_add(lh_learner_batcher *b, const lh_learner_batch_item *item, lh_errbuf *err) {
  if (!b || !item) return lh_errbuf_set(err, LH_EINVAL, "batcher add: NULL argument");
  for (size_t i = 0; i < b->n_groups; i++)
    for (size_t j = 0; j < b->groups[i].n; j++)
      if (b->groups[i].items[j].episode_id == item->episode_id)
        return lh_errbuf_set(err, LH_ELEARNER_BATCH_DUPLICATE, "batcher add: episode %llu is already pending",
                             (unsigned long long)item->episode_id);
  size_t gi = 0;
  while (gi < b->n_groups && b->groups[gi].group_id != item->group_id) gi++;
  if (gi < b->n_groups && b->groups[gi].completed)
    return lh_errbuf_set(err, LH_ELEARNER_BATCH_GROUP_FULL,
                         "batcher add: group %llu is already complete (group_size %zu); episode %llu is one "
                         "too many",
                         (unsigned long long)item->group_id, b->group_size, (unsigned long long)item->episode_id);
  if (gi == b->n_groups) {
    if (lh_reserve(&b->groups, &b->cap_groups, b->n_groups + 1, sizeof *b->groups, 16))
      return lh_errbuf_set(err, LH_ENOMEM, "batcher add: out of memory");
    group *g = &b->groups[b->n_groups];
    memset(g, 0, sizeof *g);
    g->items = calloc(b->group_size, sizeof *g->items);
    if (!g->items) return lh_errbuf_set(err, LH_ENOMEM, "batcher add: out of memory");
    g->group_id = item->group_id;
    b->n_groups++;
    b->pending++;
  }
  group *g = &b->groups[gi];
  g->items[g->n++] = *item;
  g->admitted += item->admitted != 0;
  if (g->n == b->group_size) return complete(b, gi);
  if (b->pending > b->max_pending) {
    /* Close the oldest incomplete group (the array is in arrival order). */
    for (size_t i = 0; i < b->n_groups; i++)
      if (!b->groups[i].completed) {
        b->closed_early++;
        return complete(b, i);
      }
  }
  return 0;
}

int lh_learner_batcher_take(lh_learner_batcher *b, lh_learner_batch_item *out, size_t cap, size_t *n,
                            lh_errbuf *err) {
  if (n) *n = 0;
  if (!b || !out || !n) return lh_errbuf_set(err, LH_EINVAL, "batcher take: NULL argument");
  if (b->ready < b->batch_episodes) return 0;
  /* Count what the batch will take before copying, so a small out fails
   * without losing anything. */
  size_t want = 0;
  uint64_t last = 0;
  while (want < b->batch_episodes) {
    size_t best = b->n_groups;
    for (size_t i = 0; i < b->n_groups; i++)
      if (b->groups[i].completed > last &&
          (best == b->n_groups || b->groups[i].completed < b->groups[best].completed))
        best = i;
    if (best == b->n_groups) break;
    want += b->groups[best].admitted;
    last = b->groups[best].completed;
  }
  if (want > cap)
    return lh_errbuf_set(err, LH_EINVAL, "batcher take: the batch has %zu episodes but out has room for %zu",
                         want, cap);
  size_t taken = 0;
  while (taken < b->batch_episodes) {
    size_t best = b->n_groups;
    for (size_t i = 0; i < b->n_groups; i++)
      if (b->groups[i].completed && (best == b->n_groups || b->groups[i].completed < b->groups[best].completed))
        best = i;
    if (best == b->n_groups) break;
    group *g = &b->groups[best];
    for (size_t j = 0; j < g->n; j++)
      if (g->items[j].admitted) out[taken++] = g->items[j];
    b->ready -= g->admitted;
    remove_group(b, best);
  }
  *n = taken;
  return 1;
}

long lh_learner_batcher_drop_stale(lh_learner_batcher *b, uint64_t min_version,
                                   int (*on_drop)(void *ctx, const lh_learner_batch_item *item), void *ctx) {
  if (!b) return 0;
  long dropped = 0;
  for (size_t i = 0; i < b->n_groups;) {
    group *g = &b->groups[i];
    int stale = g->completed != 0;
    for (size_t j = 0; stale && j < g->n; j++)
      if (g->items[j].admitted && g->items[j].oldest_version >= min_version) stale = 0;
    if (!stale) {
      i++;
      continue;
    }
    for (size_t j = 0; j < g->n; j++) {
      if (!g->items[j].admitted) continue;
      if (on_drop) {
        int rc = on_drop(ctx, &g->items[j]);
        if (rc < 0) return rc;
      }
      dropped++;
    }
    b->ready -= g->admitted;
    remove_group(b, i);
  }
  return dropped;
}

size_t lh_learner_batcher_ready(const lh_learner_batcher *b) { return b ? b->ready : 0; }

int lh_learner_batcher_has(const lh_learner_batcher *b, uint64_t id) {
  for (size_t i = 0; b && i < b->n_groups; i++)
    for (size_t j = 0; j < b->groups[i].n; j++)
      if (b->groups[i].items[j].episode_id == id) return 1;
  return 0;
}
size_t lh_learner_batcher_pending_groups(const lh_learner_batcher *b) { return b ? b->pending : 0; }
uint64_t lh_learner_batcher_closed_early(const lh_learner_batcher *b) { return b ? b->closed_early : 0; }
uint64_t lh_learner_batcher_discarded(const lh_learner_batcher *b) { return b ? b->discarded : 0; }

void lh_learner_batcher_skip_flat(lh_learner_batcher *b, int on,
                                  int (*on_flat)(void *ctx, const lh_learner_batch_item *item), void *ctx) {
  if (!b) return;
  b->skip_flat = on, b->on_flat = on_flat, b->flat_ctx = ctx;
}

void lh_learner_batcher_flat(const lh_learner_batcher *b, uint64_t *groups, uint64_t *episodes) {
  if (groups) *groups = b ? b->flat_groups : 0;
  if (episodes) *episodes = b ? b->flat_episodes : 0;
}

void lh_learner_batcher_set_batch(lh_learner_batcher *b, size_t batch_episodes) {
  if (b && batch_episodes >= 1) b->batch_episodes = batch_episodes;
}
