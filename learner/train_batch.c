/* learner: a step's batch. Groups gone stale while waiting leave the
 * batcher first; a batch is taken (on every rank at once, with several)
 * and its episodes are read back from the store and joined, those that
 * cannot be trained on left out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "learner/train_internal.h"

/* A waiting episode gone stale (lh_learner_batcher_drop_stale): done with,
 * and counted as dropped for staleness. */
static int on_stale(void *ctx, const lh_learner_batch_item *item) {
  lh_learner_trainer *t = ctx;
  if (lh_learner_train_done(t, item->episode_id, item->oldest_version)) return LH_ENOMEM;
  t->admission.dropped_stale++;
  if (t->admission.admitted) t->admission.admitted--;
  return 0;
}

static void *carve(char **at, size_t bytes) {
  void *p = *at;
  *at += (bytes + 15) & ~(size_t)15;
  return p;
}

int lh_learner_step_batch_alloc(lh_learner_step_batch *b, size_t n, lh_errbuf *err) {
  memset(b, 0, sizeof *b);
  size_t sizes[] = {sizeof *b->eps, sizeof *b->segs, sizeof *b->n_segs, sizeof *b->item_of,
                    sizeof *b->all_keys, sizeof *b->rewards, sizeof *b->advs, sizeof *b->all_rewards,
                    sizeof *b->all_advs, sizeof *b->success, 1, 1};
  size_t bytes = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (n > SIZE_MAX / 32 / sizes[i]) return lh_errbuf_set(err, LH_ENOMEM, "train: a batch of %zu is too large", n);
    bytes += (n * sizes[i] + 15) & ~(size_t)15;
  }
  b->block = calloc(1, bytes ? bytes : 1);
  if (!b->block) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for a batch of %zu", n);
  char *at = b->block;
  b->n = n;
  b->eps = carve(&at, n * sizeof *b->eps);
  b->segs = carve(&at, n * sizeof *b->segs);
  b->n_segs = carve(&at, n * sizeof *b->n_segs);
  b->item_of = carve(&at, n * sizeof *b->item_of);
  b->all_keys = carve(&at, n * sizeof *b->all_keys);
  b->rewards = carve(&at, n * sizeof *b->rewards);
  b->advs = carve(&at, n * sizeof *b->advs);
  b->all_rewards = carve(&at, n * sizeof *b->all_rewards);
  b->all_advs = carve(&at, n * sizeof *b->all_advs);
  b->success = carve(&at, n * sizeof *b->success);
  b->skip = carve(&at, n);
  b->earlier = carve(&at, n);
  return 0;
}

void lh_learner_step_batch_free(lh_learner_step_batch *b) {
  for (size_t i = 0; b->block && i < b->n; i++) {
    lh_learner_episode_free(b->eps[i]);
    lh_store_segments_free(b->segs[i], b->n_segs[i]);
  }
  free(b->block);
  memset(b, 0, sizeof *b);
}

/* Drops the groups gone stale while waiting, then takes a batch into
 * t->items (*n of them): 1 when taken, 0 when none is ready (on every
 * rank, with several). */
int lh_learner_train_take_batch(lh_learner_trainer *t, int multi, size_t *n, lh_errbuf *err) {
  *n = 0;
  /* Groups that went stale while waiting (actors faster than the learner)
   * leave first, so the batch is made of the freshest groups instead. */
  uint64_t min_version = lh_learner_train_oldest_trainable(t);
  long stale = lh_learner_batcher_drop_stale(t->batcher, min_version, on_stale, t);
  if (stale < 0) return lh_errbuf_set(err, (int)stale, "train: out of memory");
  if (stale)
    LH_DEBUG("train", "dropped %ld waiting episodes gone stale at version %llu", stale,
             (unsigned long long)t->version);
  /* With several ranks, a step is taken only when every rank has a batch
   * (the same test as lh_learner_batcher_take's), so no rank trains alone
   * and every rank makes the same number of steps. */
  if (multi) {
    double all_ready = lh_learner_batcher_ready(t->batcher) >= t->cfg.batch_episodes;
    LH_TRY(lh_learner_comm_allreduce_f64(t->comm, &all_ready, 1, LH_LEARNER_COMM_MIN, err));
    if (all_ready < 1) return 0;
  }
  int ready = lh_learner_batcher_take(t->batcher, t->items, t->cap_items, n, err);
  if (ready < 0) return ready;
  if (multi && (!ready || *n == 0))
    return lh_errbuf_set(err, LH_ELEARNER_COMM, "train: rank %d said a batch was ready but has none", t->rank);
  return ready && *n > 0;
}

/* Reads back and joins every episode of the batch into b (b->m of them);
 * one that does not join is marked error in the store and left out, one
 * gone stale or of an earlier stage dropped as the config says. */
int lh_learner_train_read_batch(lh_learner_trainer *t, lh_learner_step_batch *b, lh_errbuf *err) {
  size_t m = 0;
  int rc = 0;
  for (size_t i = 0; i < b->n; i++) {
    lh_episode_row row;
    lh_errbuf e;
    uint64_t id = t->items[i].episode_id;
    b->all_rewards[i] = t->items[i].reward;
    b->all_keys[i] = t->items[i].group_id;
    if (lh_learner_train_done(t, id, t->items[i].oldest_version)) {
      rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
      break;
    }
    int jr = lh_store_episode_get(t->store, id, &row, &e);
    /* Staleness again at training time: an episode admitted when it
     * arrived may have waited in the batcher while the version moved on
     * (actors faster than the learner). One no longer stored was retired
     * at the store's cap, which takes only episodes whose payloads
     * retention dropped: of versions no step admits, so stale as well. */
    if (jr == LH_ESTORE_NO_EPISODE ||
        (!jr && row.has_versions && t->version - row.min_version > t->cfg.max_policy_lag &&
         row.min_version <= t->version)) {
      t->admission.dropped_stale++;
      if (t->admission.admitted) t->admission.admitted--;
      continue;
    }
    /* An episode of an earlier stage (begun before the stage's first
     * version): carried or dropped, never counted toward the stage. */
    int before = !jr && t->has_stages && row.has_versions && row.min_version < t->stage.began_version;
    if (before && t->base.stage_carry == LH_LEARNER_CARRY_DROP) {
      t->stage_dropped_pending++;
      LH_DEBUG("train", "episode=%llu of an earlier stage dropped (stage_carry = drop)", (unsigned long long)id);
      continue;
    }
    b->earlier[m] = (uint8_t)before;
    if (!jr) jr = lh_store_episode_segments_array(t->store, id, &b->segs[m], &b->n_segs[m], NULL, &e);
    if (!jr) jr = lh_learner_episode_join(b->segs[m], b->n_segs[m], row.tokens, &b->eps[m], &e);
    /* The join takes the episode to be the one its segments say: a member
     * of a shared prefix with no segment of its own would read as its
     * leader's first tokens, under the leader's id. */
    if (!jr && b->eps[m]->episode_id != id)
      jr = lh_errbuf_set(&e, LH_ELEARNER_EPISODE_SEGMENTS,
                         "episode join: episode %llu reads as episode %llu's tokens alone (no segment of its own)",
                         (unsigned long long)id, (unsigned long long)b->eps[m]->episode_id);
    /* An episode the model cannot be run on as the actor ran it (another
     * routing shape, experts it lacks, an image across windows) is left
     * out, not trained on without what the policy saw: whatever the store
     * holds, it cannot end the learner. */
    if (!jr) jr = lh_learner_check_episode(b->eps[m], &t->limits, &e);
    if (jr) {
      lh_log_meter_warn(&t->left_out, "episode=%llu left out: %s", (unsigned long long)id, e.msg);
      lh_errbuf ig;
      lh_store_episode_set_status(t->store, id, LH_EPISODE_ERROR, e.msg, &ig);
      lh_learner_episode_free(b->eps[m]);
      b->eps[m] = NULL;
      lh_store_segments_free(b->segs[m], b->n_segs[m]);
      b->segs[m] = NULL;
      b->n_segs[m] = 0;
      continue;
    }
    b->rewards[m] = t->items[i].reward;
    b->item_of[m] = i;
    b->success[m] = row.outcome == LONGHAUL__OUTCOME__OUTCOME_SUCCESS;
    m++;
  }
  b->m = m;
  return rc;
}
