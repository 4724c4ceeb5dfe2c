/* learner: context-extension stages during training (learner.h, stages):
 * after each step the stage counts what it trained, writes its stages row,
 * and turns to the next stage once it has trained what it must. */
#include <string.h>

#include "learner/train_internal.h"

/* The stage's stages row (rank 0; a store that cannot take it loses the
 * row, not the step, as for train_steps). */
static int stage_row(lh_learner_trainer *t, lh_errbuf *err) {
  if (t->rank != 0 || !t->run_id[0]) return 0;
  const lh_learner_stage_state *g = &t->stage;
  lh_store_stage row;
  memset(&row, 0, sizeof row);
  memcpy(row.run_id, t->run_id, sizeof row.run_id);
  row.stage = g->index, row.max_context = t->base.stages[g->index].max_context;
  row.began_step = g->began_step, row.began_version = g->began_version, row.began_ms = g->began_ms;
  row.episodes = g->episodes, row.tokens = g->tokens, row.successes = g->successes;
  row.carried = g->carried, row.carry_dropped = g->carry_dropped;
  int rc = lh_store_put_stage(t->store, &row, t->stage_row_replace, err);
  if (rc == LH_ESTORE_FULL || rc == LH_ESTORE_READONLY) {
    LH_WARN("train", "stages row of stage %u not stored: %s", g->index, err->msg);
    return 0;
  }
  if (!rc) t->stage_row_replace = 0;
  return rc;
}

/* After a step: the stage's row, and the next stage when this one has
 * trained what it must. The next begins at the version the step made (the
 * one published next, announced with the new stage). */
static int stage_turn(lh_learner_trainer *t, lh_errbuf *err) {
  LH_TRY(stage_row(t, err));
  if (!lh_learner_stage_done(&t->base, &t->stage)) return 0;
  const lh_learner_stage_state old = t->stage;
  const lh_learner_stage *next = &t->base.stages[old.index + 1];
  lh_learner_stage_state_init(&t->stage, old.index + 1, t->step, t->version + (t->last_skipped ? 1 : 0));
  if (lh_learner_train_apply_stage(t))
    return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for stage %u's batch", old.index + 1);
  LH_INFO("train",
          "stage begins index=%u max_context=%llu long_frac=%.3f step=%llu version=%llu lr=%.3g train_window=%llu "
          "batch_episodes=%llu after stage=%u episodes=%llu tokens=%llu successes=%llu carried=%llu carry_dropped=%llu",
          t->stage.index, (unsigned long long)next->max_context, next->long_frac, (unsigned long long)t->step,
          (unsigned long long)t->version, t->cfg.lr, (unsigned long long)t->cfg.train_window,
          (unsigned long long)t->cfg.batch_episodes, old.index, (unsigned long long)old.episodes,
          (unsigned long long)old.tokens, (unsigned long long)old.successes, (unsigned long long)old.carried,
          (unsigned long long)old.carry_dropped);
  return stage_row(t, err);
}

/* The stage counts what the step trained of its own and of earlier
 * stages, and may turn. */
int lh_learner_train_stage_after(lh_learner_trainer *t, const lh_learner_train_stats *st,
                                 const lh_learner_step_counts *c, lh_errbuf *err) {
  if (!t->has_stages) return 0;
  t->stage_dropped_pending = 0;
  t->last_skipped = st->skipped;
  if (!st->skipped)
    lh_learner_stage_count(&t->stage, (uint64_t)c->own, (uint64_t)c->own_tokens, (uint64_t)c->own_succ,
                           (uint64_t)c->carried, (uint64_t)c->carry_dropped);
  else
    t->stage.carry_dropped += (uint64_t)c->carry_dropped;
  return stage_turn(t, err);
}
