/* learner: the trainer's life (learner/internal.h, "the training step",
 * says what a step does; train_internal.h lists the files that make it
 * up): making and freeing it, the stage in force's parameters, the
 * back-pressure controller and the figures it reports. Episodes are read
 * back from the store at training time, so the batcher only holds ids and
 * rewards, and memory stays bounded by one batch's tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "learner/train_internal.h"

/* Incomplete groups kept open before the oldest is closed (its actor may
 * have died). */
#define TRAINER_MAX_PENDING_GROUPS 64

/* Sizes what a batch needs: room for its items and the back-pressure
 * ceiling. One batch waiting per version of lag: two batches deep at lag
 * 2, so the actors fill the next batch while one waits and one trains (one
 * batch deep, the learner idles whenever a batch takes the actors longer
 * than a step). Where the actors' weights trail and episodes go stale, the
 * controller (lh_learner_train_backlog_update) lowers it. */
static int size_batch(lh_learner_trainer *t) {
  const lh_learner_config *cfg = &t->cfg;
  uint64_t lag = cfg->max_policy_lag ? cfg->max_policy_lag : 1;
  t->backlog_max = cfg->max_backlog_episodes ? cfg->max_backlog_episodes : lag * cfg->batch_episodes;
  if (t->backlog_max < cfg->batch_episodes) t->backlog_max = cfg->batch_episodes;  /* a batch must fit */
  t->backlog_cap = t->backlog_max;
  size_t need = cfg->batch_episodes + cfg->group_size;
  if (need > t->cap_items) {
    lh_learner_batch_item *p = realloc(t->items, need * sizeof *p);
    if (!p) return LH_ENOMEM;
    t->items = p, t->cap_items = need;
  }
  if (t->batcher) lh_learner_batcher_set_batch(t->batcher, cfg->batch_episodes);
  return 0;
}

/* The stage in force's lr, train_window and batch_episodes into cfg. */
int lh_learner_train_apply_stage(lh_learner_trainer *t) {
  if (!t->has_stages) return 0;
  lh_learner_stage_params(&t->base, t->stage.index, &t->cfg.lr, &t->cfg.train_window, &t->cfg.batch_episodes);
  t->limits.train_window = t->cfg.train_window;
  return size_batch(t);
}

int lh_learner_train_done(lh_learner_trainer *t, uint64_t id, uint64_t oldest) {
  lh_learner_id_set_remove(&t->seen, id);
  return lh_learner_id_set_add(&t->done, id, oldest);
}

uint64_t lh_learner_train_oldest_trainable(const lh_learner_trainer *t) {
  return t->version > t->cfg.max_policy_lag ? t->version - t->cfg.max_policy_lag : 0;
}

void lh_learner_train_forget(lh_learner_trainer *t) {
  /* Stale now is stale for good: the version only grows. A scan of the
   * store passes over a forgotten episode (lh_learner_trainer_scan), so
   * it is never trained twice. */
  lh_learner_id_set_prune(&t->done, lh_learner_train_oldest_trainable(t));
}

/* An admitted episode of a flat group (lh_learner_batcher_skip_flat):
 * done with, as a trained one is, so that no scan offers it again. */
static int on_flat(void *ctx, const lh_learner_batch_item *item) {
  lh_learner_trainer *t = ctx;
  return lh_learner_train_done(t, item->episode_id, item->oldest_version);
}

int lh_learner_trainer_new(lh_model *m, lh_store *store, const lh_learner_config *cfg, float temperature,
                           const lh_learner_state *st, lh_learner_trainer **out, lh_errbuf *err) {
  if (!m || !store || !cfg || !out) return lh_errbuf_set(err, LH_EINVAL, "train: NULL model, store, config or out");
  *out = NULL;
  if (!(temperature >= 0) || !isfinite(temperature))
    return lh_errbuf_set(err, LH_EINVAL, "train: temperature %g is not a finite number >= 0", temperature);
  lh_learner_trainer *t = calloc(1, sizeof *t);
  if (!t) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
  t->m = m, t->store = store, t->cfg = *cfg, t->base = *cfg;
  t->left_out.component = t->beyond_group.component = "train";
  t->last_row_ns = lh_now_ns();
  t->temperature = temperature > 0 ? temperature : 1.0f;
  lh_learner_adv_baseline_init(&t->baseline, cfg->baseline_decay);
  if (st) {
    t->step = st->step, t->version = st->version;
    t->skipped = st->skipped_steps, t->baseline = st->baseline, t->admission = st->admission;
  }
  const lh_model_config *mc = lh_model_get_config(m);
  lh_learner_model_limits_init(&t->limits, mc, cfg);
  t->prev_taken = t->admission.admitted + t->admission.dropped_stale;
  t->prev_stale = t->admission.dropped_stale;
  t->has_stages = cfg->n_stages > 0;
  if (t->has_stages) {
    /* A resume goes on at the state's stage; lh_learner_trainer_load_done
     * replaces this with the checkpoint's stage file when it has one. */
    uint32_t index = st && st->stage_index < cfg->n_stages ? st->stage_index : 0;
    lh_learner_stage_state_init(&t->stage, index, t->step, t->version);
    t->stage_row_replace = 1;
  }
  int src = lh_learner_train_apply_stage(t);
  if (!t->has_stages) src = size_batch(t);
  t->scratch_bias = calloc((size_t)mc->layers * (size_t)mc->experts, sizeof(float));
  t->batcher = lh_learner_batcher_new(t->cfg.batch_episodes, cfg->group_size, TRAINER_MAX_PENDING_GROUPS, err);
  int rc = 0;
  if (!t->batcher) rc = err ? err->code : LH_ENOMEM;
  else if (src || !t->items || !t->scratch_bias) rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
  else if (!lh_model_grads(m) && (rc = lh_model_enable_training(m)))
    lh_errbuf_set(err, rc, "train: cannot enable training: %s", lh_strerror(rc));
  else if ((rc = lh_model_balancer_new(mc, &t->balancer)))
    lh_errbuf_set(err, rc, "train: cannot create the balancer: %s", lh_strerror(rc));
  else if (cfg->share_prefix && cfg->state_mode == LH_LEARNER_STATE_EXACT)
    rc = lh_learner_prefix_cache_new(lh_model_state_floats(mc), &t->prefixes, err);
  if (!rc)
    lh_learner_batcher_skip_flat(t->batcher, cfg->skip_flat_groups && cfg->advantage != LH_LEARNER_ADV_REINFORCE,
                                 on_flat, t);
  if (rc) {
    lh_learner_trainer_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

void lh_learner_trainer_free(lh_learner_trainer *t) {
  if (!t) return;
  lh_learner_batcher_free(t->batcher);
  lh_model_balancer_free(t->balancer);
  lh_model_cache_free(t->cache);
  lh_learner_prefix_cache_free(t->prefixes);
  lh_learner_experts_close(t->experts);
  lh_learner_id_set_free(&t->seen);
  lh_learner_id_set_free(&t->done);
  free(t->items);
  free(t->scratch_bias);
  for (size_t i = 0; i < t->n_others; i++) free(t->others[i].ids);
  free(t->others);
  free(t);
}

void lh_learner_trainer_set_run(lh_learner_trainer *t, const char *run_id) {
  if (t) snprintf(t->run_id, sizeof t->run_id, "%s", run_id ? run_id : "");
}

uint64_t lh_learner_trainer_version(const lh_learner_trainer *t) { return t ? t->version : 0; }

const lh_learner_stage_state *lh_learner_trainer_stage(const lh_learner_trainer *t) {
  return t && t->has_stages ? &t->stage : NULL;
}

size_t lh_learner_trainer_backlog(const lh_learner_trainer *t) {
  return t ? lh_learner_batcher_ready(t->batcher) : 0;
}
uint64_t lh_learner_trainer_backlog_cap(const lh_learner_trainer *t) { return t ? t->backlog_cap : 0; }

uint64_t lh_learner_trainer_left_out(const lh_learner_trainer *t) { return t ? t->left_out.total : 0; }

void lh_learner_trainer_flat(const lh_learner_trainer *t, uint64_t *groups, uint64_t *episodes) {
  lh_learner_batcher_flat(t ? t->batcher : NULL, groups, episodes);
}

double lh_learner_trainer_stale_share(const lh_learner_trainer *t) {
  if (!t) return NAN;
  uint64_t taken = 0, stale = 0;
  for (unsigned i = 0; i < t->win_n; i++) taken += t->win_taken[i], stale += t->win_stale[i];
  /* An episode taken in before the window may go stale inside it, so the
   * ratio is capped at 1. */
  return taken ? fmin(1.0, (double)stale / (double)taken) : NAN;
}

/* After each step: the step's intake joins the window, and the cap moves.
 * Too many stale drops mean episodes wait too long behind the backlog, so
 * the cap shrinks by a quarter (never below one batch, or no batch could
 * form while the actors hold); a share well under the bound lets it grow
 * back a group at a time, so a learner that keeps up gets the most data. */
void lh_learner_train_backlog_update(lh_learner_trainer *t) {
  uint64_t taken = t->admission.admitted + t->admission.dropped_stale, stale = t->admission.dropped_stale;
  t->win_taken[t->win_i] = taken - t->prev_taken;
  t->win_stale[t->win_i] = stale - t->prev_stale;
  t->win_i = (t->win_i + 1) % LH_LEARNER_STALE_WINDOW;
  if (t->win_n < LH_LEARNER_STALE_WINDOW) t->win_n++;
  t->prev_taken = taken, t->prev_stale = stale;
  double share = lh_learner_trainer_stale_share(t);
  if (isnan(share)) return;
  uint64_t least = t->cfg.batch_episodes;
  if (share > t->cfg.max_stale_share && t->backlog_cap > least) {
    uint64_t cut = t->backlog_cap / 4 > t->cfg.group_size ? t->backlog_cap / 4 : t->cfg.group_size;
    t->backlog_cap = t->backlog_cap - least > cut ? t->backlog_cap - cut : least;
  } else if (share <= t->cfg.max_stale_share / 2 && t->backlog_cap < t->backlog_max) {
    t->backlog_cap += t->cfg.group_size;
    if (t->backlog_cap > t->backlog_max) t->backlog_cap = t->backlog_max;
  }
}
const lh_learner_admission_counts *lh_learner_trainer_admission(const lh_learner_trainer *t) {
  return t ? &t->admission : NULL;
}

void lh_learner_trainer_state(const lh_learner_trainer *t, lh_learner_state *st) {
  if (!t || !st) return;
  st->step = t->step, st->version = t->version, st->ingest_position = t->done.n;
  st->skipped_steps = t->skipped, st->baseline = t->baseline, st->admission = t->admission;
  st->stage_index = t->has_stages ? t->stage.index : 0;
}
