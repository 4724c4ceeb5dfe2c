/* learner: what a step trained (episodes, rewards, successes, the stage's
 * own and carried episodes), summed over ranks, and the train_steps row
 * that records the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "learner/train_internal.h"

/* Counts what this rank trained, summed over every rank's batch when sum. */
int lh_learner_train_count(lh_learner_trainer *t, const lh_learner_step_batch *b, int sum, size_t zero_adv_tokens,
                           lh_learner_step_counts *c, lh_errbuf *err) {
  double rsum = 0;
  size_t succ = 0, trained = 0;
  double own = 0, own_tokens = 0, own_succ = 0, carried = 0, carry_dropped = (double)t->stage_dropped_pending;
  for (size_t i = 0; i < b->m; i++) {
    if (b->skip[i]) continue;
    rsum += b->rewards[i], succ += (size_t)b->success[i], trained++;
    /* An episode with no sampled token trained nothing: it does not count. */
    if (b->earlier[i]) carried++;
    else if (b->eps[i]->sampled) own++, own_tokens += (double)b->eps[i]->n, own_succ += b->success[i];
  }
  uint64_t flat = 0;
  lh_learner_batcher_flat(t->batcher, &flat, NULL);
  double v[11] = {rsum, (double)succ, (double)trained, (double)t->admission.dropped_stale, own, own_tokens,
                  own_succ, carried, carry_dropped, (double)(flat - t->flat_groups_counted), (double)zero_adv_tokens};
  /* The train_steps row's figures over every rank's batch. */
  if (sum) LH_TRY(lh_learner_comm_allreduce_f64(t->comm, v, 11, LH_LEARNER_COMM_SUM, err));
  *c = (lh_learner_step_counts){.rsum = v[0], .succ = (double)(size_t)v[1], .trained = (double)(size_t)v[2],
                     .dropped_stale = v[3], .own = v[4], .own_tokens = v[5], .own_succ = v[6],
                     .carried = v[7], .carry_dropped = v[8], .flat_groups = v[9], .flat_now = flat,
                     .zero_adv_tokens = v[10]};
  return 0;
}

/* Each expert's share of the step's routed (token, slot) assignments per
 * layer: the balancer's load of the step (its counts, summed over ranks,
 * over their total), in double and summing to 1. A layer that routed
 * nothing, or no memory for the loads, leaves the row without them; the
 * caller frees row->expert_load. */
static void row_loads(lh_learner_trainer *t, const lh_model_config *mc, lh_store_train_step *row) {
  double *load = t->rank == 0 && row->layers && mc->experts > 0 && mc->experts <= LH_STORE_MAX_EXPERTS
                     ? malloc((size_t)row->layers * (size_t)mc->experts * sizeof *load)
                     : NULL;
  float *share = load ? malloc((size_t)mc->experts * sizeof *share) : NULL;
  int loads_ok = share != NULL;
  for (uint32_t l = 0; loads_ok && l < row->layers; l++) {
    double *dst = load + (size_t)l * (size_t)mc->experts, sum = 0;
    loads_ok = lh_model_balancer_load(t->balancer, (int)l, share) == 0;
    for (int x = 0; loads_ok && x < mc->experts; x++) sum += (dst[x] = share[x]);
    for (int x = 0; loads_ok && sum > 0 && x < mc->experts; x++) dst[x] /= sum;
    loads_ok = loads_ok && sum > 0;
  }
  free(share);
  if (loads_ok) row->experts = (uint32_t)mc->experts, row->expert_load = load;
  else free(load);
}

/* The train_steps row of the step just taken; rank 0 writes it, the
 * others' stores hold episodes only. A full or read-only store loses the
 * row, not the step: the model has moved on and training goes on. */
int lh_learner_train_write_row(lh_learner_trainer *t, const lh_learner_train_stats *st, double dropped_stale,
                               lh_errbuf *err) {
  lh_store_train_step row;
  memset(&row, 0, sizeof row);
  row.step = st->step, row.version = st->version, row.loss = st->loss, row.reward_mean = st->reward_mean;
  memcpy(row.run_id, t->run_id, sizeof row.run_id);
  row.success_rate = st->success_rate, row.tokens = st->tokens, row.episodes = (uint32_t)st->episodes;
  row.positions = st->positions;
  row.dropped_stale = (uint32_t)dropped_stale, row.lag_mean = st->lag_mean;
  row.lag_max = st->lag_max, row.logp_diff = st->logp_diff, row.grad_norm = st->grad_norm, row.lr = st->lr;
  row.skipped = st->skipped, row.step_ms = st->step_ms, row.busy_frac = st->busy_frac;
  row.approx_kl = st->approx_kl, row.entropy = st->entropy, row.clip_frac = st->clip_frac;
  row.iw_mean = st->iw_mean, row.iw_max = st->iw_max;
  row.flat_groups = st->flat_groups, row.zero_adv_tokens = st->zero_adv_tokens;
  lh_learner_train_backlog_update(t);
  row.stale_share = lh_learner_trainer_stale_share(t), row.backlog_cap = t->backlog_cap;
  const lh_model_config *mc = lh_model_get_config(t->m);
  row.layers = (uint32_t)(mc->layers < LH_STORE_MAX_LAYERS ? mc->layers : LH_STORE_MAX_LAYERS);
  for (uint32_t l = 0; l < row.layers; l++) row.maxvio[l] = lh_model_balancer_maxvio(t->balancer, (int)l);
  for (uint32_t l = 0; l < row.layers; l++) row.dead[l] = lh_model_balancer_dead(t->balancer, (int)l);
  snprintf(row.balance, sizeof row.balance, "%s", lh_balance_name(mc->balance));
  row.balance_ms = lh_model_balancer_ms(t->balancer);
  row_loads(t, mc, &row);
  int rc = t->rank == 0 ? lh_store_put_train_step(t->store, &row, NULL, err) : 0;
  free((void *)row.expert_load);
  if (rc == LH_ESTORE_FULL || rc == LH_ESTORE_READONLY) {
    LH_WARN("train", "train_steps row of step %llu not stored: %s", (unsigned long long)st->step, err->msg);
    rc = 0;
  }
  return rc;
}
