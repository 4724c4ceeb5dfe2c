/* learner: ready episodes into the trainer's batcher, from a scan of the
 * store or from the ids the ingest just wrote, with admission (staleness
 * against the trainer's version) counted on the way in. */
#include "learner/train_internal.h"

typedef struct {
  lh_learner_trainer *t;
  size_t added;
  int rc;
  lh_errbuf *err;
  int scan;  /* a scan of the store, not ids handed over */
} scan_ctx;

static Longhaul__Outcome row_outcome(const lh_episode_row *row) {
  if (row->outcome != LONGHAUL__OUTCOME__OUTCOME_UNSPECIFIED) return row->outcome;
  return row->status == LH_EPISODE_TRUNCATED ? LONGHAUL__OUTCOME__OUTCOME_TRUNCATED
                                             : LONGHAUL__OUTCOME__OUTCOME_ERROR;
}

static int on_ready(void *ctx, const lh_episode_row *row) {
  scan_ctx *c = ctx;
  lh_learner_trainer *t = c->t;
  size_t at;
  if (lh_learner_id_set_find(&t->seen, row->id, &at) || lh_learner_id_set_find(&t->done, row->id, &at)) return 0;
  /* A member its group holds but that was not admitted is done, not seen,
   * and done forgets it once stale while its group may still wait: the
   * batcher says whether it is there. */
  if (lh_learner_batcher_has(t->batcher, row->id)) return 0;
  /* Staleness over the sampled tokens; an episode without any sampled
   * token is as fresh as the learner (it has nothing to train on). */
  uint64_t oldest = row->has_versions ? row->min_version : t->version;
  /* A scan of the store passes over what no step may train any more:
   * done and forgotten since (lh_learner_train_forget), or come stale
   * while the learner was down or its id was lost on the way; counted
   * neither time. An id the ingest hands over is judged as usual. */
  if (c->scan && oldest < lh_learner_train_oldest_trainable(t)) return 0;
  lh_learner_admission a = lh_learner_admission_check(t->version, oldest, row_outcome(row),
                                                      t->cfg.max_policy_lag, &t->admission);
  lh_learner_batch_item it = {.episode_id = row->id, .group_id = row->group_id,
                              .reward = (float)row->reward, .admitted = a == LH_LEARNER_ADMIT,
                              .oldest_version = oldest};
  int rc = lh_learner_batcher_add(t->batcher, &it, c->err);
  if (rc == LH_ELEARNER_BATCH_GROUP_FULL) {
    /* A group_size mismatch with the actors: train what fits, say so. */
    lh_log_meter_warn(&t->beyond_group, "episode=%llu group=%llu beyond group_size=%llu: skipped",
                      (unsigned long long)row->id, (unsigned long long)row->group_id,
                      (unsigned long long)t->cfg.group_size);
    rc = lh_learner_train_done(t, row->id, oldest);
  } else if (!rc && a != LH_LEARNER_ADMIT) {
    rc = lh_learner_train_done(t, row->id, oldest);
  } else if (!rc) {
    rc = lh_learner_id_set_add(&t->seen, row->id, oldest);
  }
  if (rc == LH_ENOMEM) rc = lh_errbuf_set(c->err, rc, "train: out of memory");
  if (rc) return c->rc = rc;
  if (a != LH_LEARNER_ADMIT)
    LH_DEBUG("train", "episode=%llu dropped=%s oldest_version=%llu version=%llu",
             (unsigned long long)row->id, lh_learner_admission_name(a), (unsigned long long)oldest,
             (unsigned long long)t->version);
  c->added++;
  return 0;
}

int lh_learner_trainer_scan(lh_learner_trainer *t, size_t *added, lh_errbuf *err) {
  if (added) *added = 0;
  if (!t) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer");
  lh_episode_filter f;
  lh_episode_filter_init(&f);
  f.ready_only = 1;
  f.status_mask = (1u << LH_EPISODE_COMPLETE) | (1u << LH_EPISODE_TRUNCATED) | (1u << LH_EPISODE_ABORTED) |
                  (1u << LH_EPISODE_ERROR);
  scan_ctx c = {.t = t, .err = err, .scan = 1};
  int rc = lh_store_episodes(t->store, &f, on_ready, &c, NULL, err);
  if (!rc) rc = c.rc;
  if (added) *added = c.added;
  return rc;
}

int lh_learner_trainer_offer(lh_learner_trainer *t, const uint64_t *ids, size_t n, size_t *added, lh_errbuf *err) {
  if (added) *added = 0;
  if (!t || (n && !ids)) return lh_errbuf_set(err, LH_EINVAL, "train: NULL trainer or ids");
  scan_ctx c = {.t = t, .err = err};
  for (size_t i = 0; i < n; i++) {
    size_t at;
    if (lh_learner_id_set_find(&t->seen, ids[i], &at) || lh_learner_id_set_find(&t->done, ids[i], &at)) continue;
    lh_episode_row row;
    int rc = lh_store_episode_get(t->store, ids[i], &row, err);
    /* Gone: retention retired it at the cap (store.h,
     * lh_store_retire_episodes), which it does only to episodes that can
     * no longer be trained. */
    if (rc == LH_ESTORE_NO_EPISODE) continue;
    if (rc) return rc;
    /* Ready as lh_episode_filter.ready_only says: ended, every expected
     * segment stored with its payload. */
    if (!row.has_end || row.status == LH_EPISODE_RUNNING || row.segments_received != row.segment_count ||
        row.payloads_dropped)
      continue;
    on_ready(&c, &row);
    if (c.rc) return c.rc;
  }
  if (added) *added = c.added;
  return 0;
}
