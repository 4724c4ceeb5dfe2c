/* learner: the batch's gradient and the optimizer step. Every episode's
 * forward and backward (quarantining one that fails), the sums over ranks,
 * the global gradient norm, then AdamW and the balancer, or the step
 * skipped when the loss or the gradient is not finite. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learner/train_internal.h"

/* `quantile`'s histograms summed over ranks, in place, through doubles
 * (exact for counts below 2^53) a block at a time, so that its quantiles
 * are those of every rank's tokens. */
#define HIST_BLOCK ((size_t)1 << 20)
static int reduce_histograms(lh_learner_trainer *t, lh_errbuf *err) {
  const lh_model_config *mc = lh_model_get_config(t->m);
  uint32_t *hist;
  size_t *tokens;
  int bins;
  int rc = lh_model_balancer_histograms(t->balancer, &hist, &bins, &tokens);
  if (rc) return lh_errbuf_set(err, rc, "train: balancer histograms: %s", lh_strerror(rc));
  if (!hist) return 0;
  size_t L = (size_t)mc->layers, n = L * (size_t)mc->experts * (size_t)bins;
  double *d = malloc((n < HIST_BLOCK ? n : HIST_BLOCK) * sizeof *d);
  if (!d) return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for the histograms' sum");
  int over = 0;
  for (size_t at = 0; at < n && !rc; at += HIST_BLOCK) {
    size_t m = n - at < HIST_BLOCK ? n - at : HIST_BLOCK;
    for (size_t i = 0; i < m; i++) d[i] = hist[at + i];
    rc = lh_learner_comm_allreduce_f64(t->comm, d, m, LH_LEARNER_COMM_SUM, err);
    for (size_t i = 0; !rc && i < m; i++) {
      over |= d[i] > UINT32_MAX;
      hist[at + i] = d[i] > UINT32_MAX ? UINT32_MAX : (uint32_t)d[i];
    }
  }
  for (size_t l = 0; !rc && l < L; l++) d[l] = (double)tokens[l];
  if (!rc) rc = lh_learner_comm_allreduce_f64(t->comm, d, L, LH_LEARNER_COMM_SUM, err);
  for (size_t l = 0; !rc && l < L; l++) {
    over |= d[l] > UINT32_MAX;
    tokens[l] = (size_t)d[l];
  }
  free(d);
  if (!rc && over)
    rc = lh_errbuf_set(err, LH_ELEARNER_TRAIN, "train: balance = quantile: a step of more than %u tokens over "
                       "the ranks overflows its histograms; use smaller batches", UINT32_MAX);
  return rc;
}

/* Sums what every rank's batch gave, in place, before the clip and the
 * optimizer: the gradients (one flat buffer), the routers' expert counts
 * (so the bias update and MaxVio see the global loads) and `quantile`'s
 * histograms, the loss sums and
 * the non-finite flag (so a skipped step is skipped on every rank), and the
 * largest lag and alignment figures. */
static int reduce_step(lh_learner_trainer *t, lh_learner_step_acc *acc, lh_errbuf *err) {
  if (t->experts) LH_TRY(lh_learner_experts_reduce_grads(t->experts, t->m, err));
  else LH_TRY(lh_learner_comm_allreduce_backend_f32(t->comm, lh_model_grads(t->m), lh_model_n_floats(t->m), err));
  const lh_model_config *mc = lh_model_get_config(t->m);
  double *counts, *pairs;
  int rc = lh_model_balancer_counts(t->balancer, &counts, &pairs);
  if (rc) return lh_errbuf_set(err, rc, "train: balancer counts: %s", lh_strerror(rc));
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, counts, (size_t)mc->layers * (size_t)mc->experts,
                                       LH_LEARNER_COMM_SUM, err));
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, pairs, (size_t)mc->layers, LH_LEARNER_COMM_SUM, err));
  LH_TRY(reduce_histograms(t, err));
  double sum[10] = {acc->loss, acc->policy_loss, acc->clip_sum, acc->lag_sum, (double)acc->tokens,
                    (double)acc->current, (double)acc->nonfinite, acc->kl_sum, acc->entropy_sum,
                    acc->ratio_sum};
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, sum, 10, LH_LEARNER_COMM_SUM, err));
  double mx[3] = {acc->lag_max, acc->logp_diff, acc->ratio_max};
  LH_TRY(lh_learner_comm_allreduce_f64(t->comm, mx, 3, LH_LEARNER_COMM_MAX, err));
  acc->kl_sum = sum[7], acc->entropy_sum = sum[8], acc->ratio_sum = sum[9], acc->ratio_max = mx[2];
  acc->loss = sum[0], acc->policy_loss = sum[1], acc->clip_sum = sum[2], acc->lag_sum = sum[3];
  acc->tokens = (size_t)sum[4], acc->current = (size_t)sum[5], acc->nonfinite = sum[6] > 0;
  acc->lag_max = mx[0], acc->logp_diff = mx[1];
  return 0;
}

/* The episodes of the batch the prefix tree takes (learner/train_tree.c),
 * all at once with their per-token advantages, marked in in[] (m,
 * zeroed here): 0, or LH_ENOMEM. When the tree fails, *tree_failed is
 * set and in[] cleared: the batch is run again without it, so that the
 * episode at fault is found and quarantined alone. */
static int train_tree(lh_learner_trainer *t, lh_learner_episode **eps, const float *advs, const uint8_t *skip,
                      size_t m, double N, uint8_t *in, lh_learner_step_acc *acc, int *tree_failed,
                      lh_errbuf *err) {
  memset(in, 0, m);
  float **adv = calloc(m ? m : 1, sizeof *adv);
  int rc = adv ? 0 : LH_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < m && !rc; i++) {
    if (skip[i] || !lh_learner_train_tree_eligible(t, eps[i])) continue;
    if (!(adv[i] = malloc(eps[i]->n * sizeof **adv))) rc = LH_ENOMEM;
    else lh_learner_episode_broadcast(eps[i], advs[i], adv[i]), in[i] = 1, k++;
  }
  if (rc) rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory for the prefix tree's advantages");
  lh_errbuf e;
  int erc = rc || k < 2 ? 0 : lh_learner_train_tree(t, eps, adv, in, m, N, acc, &e);
  if (erc == LH_ENOMEM) rc = lh_errbuf_set(err, erc, "%s", e.msg);
  else if (erc) {
    LH_WARN("train", "step=%llu: the prefix tree failed (%s); the batch runs again episode by episode",
            (unsigned long long)t->step, e.msg);
    *tree_failed = 1;
  }
  for (size_t i = 0; adv && i < m; i++) free(adv[i]);
  free(adv);
  if (rc || erc || k < 2) memset(in, 0, m);  /* a tree of one shares nothing: that episode runs alone */
  return rc;
}

/* Forward and backward of every episode of the batch into the gradients:
 * the prefix tree's first, then each other episode on its own. An episode
 * whose forward or backward fails (data the checks let through,
 * a kernel refusing its input) is quarantined: it ends as error in the
 * store with the reason, is marked in skip, and the batch is run again
 * without it from zeroed gradients and the balancer's counts as they were,
 * so its partial windows leave no trace. Only running out of memory ends
 * the step. With several ranks the normaliser N stays the one agreed
 * before (it counted the quarantined episode's tokens). */
static int train_all(lh_learner_trainer *t, lh_learner_episode **eps, const float *advs, uint8_t *skip, size_t m,
                     double N, lh_learner_step_acc *acc, lh_errbuf *err) {
  double *counts = NULL, *pairs = NULL;
  const lh_model_config *mc = lh_model_get_config(t->m);
  size_t nc = (size_t)mc->layers * (size_t)mc->experts, np = (size_t)mc->layers;
  LH_TRY(lh_model_balancer_counts(t->balancer, &counts, &pairs));
  double *saved = malloc((nc + np) * sizeof *saved);
  uint8_t *in_tree = calloc(m ? m : 1, 1);
  if (!saved || !in_tree) {
    free(saved);
    free(in_tree);
    return lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
  }
  memcpy(saved, counts, nc * sizeof *saved);
  memcpy(saved + nc, pairs, np * sizeof *saved);
  int rc = 0, tree_failed = 0;
  for (int again = 1; again && !rc;) {
    again = 0;
    memset(acc, 0, sizeof *acc);
    memcpy(counts, saved, nc * sizeof *saved);
    memcpy(pairs, saved + nc, np * sizeof *saved);
    rc = lh_model_zero_grads(t->m);
    if (rc) rc = lh_errbuf_set(err, rc, "train: cannot zero the gradients: %s", lh_strerror(rc));
    lh_learner_prefix_cache_clear(t->prefixes);  /* a pass begun again computes its prefixes again */
    /* With experts across ranks a rank's pass is not its own: its shard
     * holds the group's gradients, so a pass begun again is begun again by
     * the whole group (after each rank has served the others to the end). */
    int failed_here = 0;
    if (!rc && !tree_failed) {
      rc = train_tree(t, eps, advs, skip, m, N, in_tree, acc, &failed_here, err);
      if (failed_here) tree_failed = again = 1;
    }
    for (size_t i = 0; i < m && !rc && !again; i++) {
      if (skip[i] || in_tree[i]) continue;
      float *adv = malloc(eps[i]->n * sizeof *adv);
      if (!adv) {
        rc = lh_errbuf_set(err, LH_ENOMEM, "train: out of memory");
        break;
      }
      lh_learner_episode_broadcast(eps[i], advs[i], adv);
      lh_errbuf e;
      int erc = lh_learner_train_episode(t, eps[i], adv, N, acc, &e);
      free(adv);
      if (erc == LH_ENOMEM) rc = lh_errbuf_set(err, erc, "%s", e.msg);
      else if (erc) {
        LH_WARN("train", "episode=%llu quarantined: %s", (unsigned long long)eps[i]->episode_id, e.msg);
        lh_errbuf ig;
        lh_store_episode_set_status(t->store, eps[i]->episode_id, LH_EPISODE_ERROR, e.msg, &ig);
        skip[i] = 1, again = 1, failed_here = 1;
      }
    }
    if (!rc && t->experts) {
      rc = lh_learner_experts_drain(t->experts, t->m, err);
      if (!rc) rc = lh_learner_experts_any(t->experts, failed_here, &again, err);
    }
  }
  free(saved);
  free(in_tree);
  return rc;
}

/* The step's statistics from its sums and gradient norm. */
static void step_figures(const lh_learner_step_acc *acc, double norm, lh_learner_train_stats *st) {
  st->loss = acc->loss, st->policy_loss = acc->policy_loss, st->grad_norm = norm, st->tokens = acc->tokens;
  st->run_positions = acc->run_positions, st->states_used = acc->states_used, st->burn_ins = acc->burn_ins;
  st->zero_adv_tokens = acc->zero_adv_tokens;
  st->logp_diff_mean = acc->current ? acc->logp_diff_sum / (double)acc->current : NAN;
  st->lag_mean = acc->tokens ? acc->lag_sum / (double)acc->tokens : 0, st->lag_max = acc->lag_max;
  st->logp_diff = acc->current ? acc->logp_diff : NAN, st->current_tokens = acc->current;
  st->clip_frac = acc->tokens ? acc->clip_sum / (double)acc->tokens : 0;
  double tok = acc->tokens ? (double)acc->tokens : NAN;
  st->approx_kl = acc->kl_sum / tok, st->entropy = acc->entropy_sum / tok, st->iw_mean = acc->ratio_sum / tok;
  st->iw_max = acc->tokens ? acc->ratio_max : NAN;
}

/* Advantages, forward and backward over the batch, the gradient summed
 * over ranks, then AdamW and the balancer (or, when the loss or the
 * gradient is not finite, the step skipped and counted). gN is the
 * sampled tokens of every rank's batch, > 0, and gE its episodes with
 * any. */
int lh_learner_train_optimize(lh_learner_trainer *t, lh_learner_step_batch *b, double gN, double gE, int multi,
                              double lr, lh_learner_train_stats *st, lh_errbuf *err) {
  int rc = 0;
  /* Advantages are over every episode of the batch's groups, trained or
   * not (a stale member's reward still says how hard its task was); each
   * trained episode takes its own item's value. */
  if (b->m > 0)
    rc = lh_learner_advantages(t->cfg.advantage, b->all_rewards, b->all_keys, b->n, &t->baseline, b->all_advs, err);
  for (size_t i = 0; i < b->m && !rc; i++) b->advs[i] = b->all_advs[b->item_of[i]];
  /* loss_norm = episode: the token mean over gN becomes a mean over
   * episodes, each its own tokens' mean, by scaling each advantage (the
   * clipped objective is linear in it). Without it a group's long failed
   * episodes outweigh its short successes on the tokens they share (the
   * tool call's syntax), and the policy unlearns that syntax. */
  if (!rc && t->cfg.loss_norm == LH_LEARNER_LOSS_NORM_EPISODE)
    for (size_t i = 0; i < b->m; i++)
      b->advs[i] = (float)(b->advs[i] * lh_learner_episode_scale(b->eps[i]->sampled, gN, gE));
  lh_learner_step_acc acc = {0};
  if (!rc) rc = train_all(t, b->eps, b->advs, b->skip, b->m, gN, &acc, err);
  if (!rc && multi) rc = reduce_step(t, &acc, err);
  if (rc) return rc;
  const lh_backend *be = lh_model_backend(t->m);
  double sq = 0;
  if (t->experts) rc = lh_learner_experts_grad_squares(t->experts, t->m, &sq, err);
  else rc = be->sum_squares(be->context, &sq, lh_model_grads(t->m), lh_model_n_floats(t->m));
  double norm = sqrt(sq);
  step_figures(&acc, norm, st);
  if (!rc && (acc.nonfinite || !isfinite(acc.loss) || !isfinite(norm))) {
    st->skipped = 1;
    t->skipped++;
    LH_WARN("train", "step=%llu skipped: loss=%g grad_norm=%g not finite", (unsigned long long)t->step, acc.loss,
            norm);
    /* The step's routing statistics go to a scratch bias, not the model. */
    rc = lh_model_balancer_step(t->balancer, t->scratch_bias);
  } else if (!rc) {
    lh_adamw_params p = {.lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = (float)t->cfg.weight_decay,
                         .grad_scale = norm > t->cfg.grad_clip ? (float)(t->cfg.grad_clip / norm) : 1.0f,
                         .step = (int64_t)(t->step - t->skipped + 1)};
    rc = lh_model_adamw_step(t->m, &p);
    if (!rc) rc = lh_model_balancer_step_model(t->balancer, t->m);
    if (!rc) t->version++;
  }
  if (rc) lh_errbuf_set(err, rc, "train: optimizer or balancer step failed: %s", lh_strerror(rc));
  return rc;
}
