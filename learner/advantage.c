/* learner: advantage estimators (grpo, rloo, reinforce), in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "learner/internal.h"

const char *lh_learner_adv_kind_name(lh_learner_adv_kind kind) {
  switch (kind) {
    case LH_LEARNER_ADV_GRPO: return "grpo";
    case LH_LEARNER_ADV_RLOO: return "rloo";
    case LH_LEARNER_ADV_REINFORCE: return "reinforce";
  }
  return "unknown";
}

lh_learner_adv_kind lh_learner_adv_kind_from_name(const char *name) {
  if (!name) return 0;
  if (!strcmp(name, "grpo")) return LH_LEARNER_ADV_GRPO;
  if (!strcmp(name, "rloo")) return LH_LEARNER_ADV_RLOO;
  if (!strcmp(name, "reinforce")) return LH_LEARNER_ADV_REINFORCE;
  return 0;
}

void lh_learner_adv_baseline_init(lh_learner_adv_baseline *b, double decay) {
  if (!b) return;
  b->mean = 0.0;
  b->decay = decay;
  b->batches = 0;
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void lh_learner_adv_baseline_save(const lh_learner_adv_baseline *b, uint8_t out[LH_LEARNER_ADV_BASELINE_BYTES]) {
  uint64_t m, d;
  memcpy(&m, &b->mean, 8);
  memcpy(&d, &b->decay, 8);
  put64(out, m);
  put64(out + 8, d);
  put64(out + 16, b->batches);
}

int lh_learner_adv_baseline_load(lh_learner_adv_baseline *b, const uint8_t in[LH_LEARNER_ADV_BASELINE_BYTES], lh_errbuf *err) {
  if (!b || !in) return lh_errbuf_set(err, LH_EINVAL, "baseline load: NULL baseline or bytes");
  lh_learner_adv_baseline t;
  uint64_t m = get64(in), d = get64(in + 8);
  memcpy(&t.mean, &m, 8);
  memcpy(&t.decay, &d, 8);
  t.batches = get64(in + 16);
  if (!isfinite(t.mean) || !(t.decay >= 0.0 && t.decay < 1.0))
    return lh_errbuf_set(err, LH_ELEARNER_ADV_STATE,
                         "baseline load: mean=%g decay=%g (mean must be finite, decay in [0, 1))", t.mean,
                         t.decay);
  *b = t;
  return 0;
}

/* Sum and count of the rewards of episode i's group, computed by scanning;
 * batches are tens to thousands of episodes, so O(n * group) is fine and
 * needs no allocation. */
static void group_sums(const float *r, const uint64_t *keys, size_t n, size_t i, double *sum,
                       double *sumsq_dev, size_t *count) {
  double s = 0.0;
  size_t c = 0;
  for (size_t j = 0; j < n; j++)
    if (!keys || keys[j] == keys[i]) s += r[j], c++;
  double mean = s / (double)c, ss = 0.0;
  for (size_t j = 0; j < n; j++)
    if (!keys || keys[j] == keys[i]) ss += ((double)r[j] - mean) * ((double)r[j] - mean);
  *sum = s;
  *sumsq_dev = ss;
  *count = c;
}

int lh_learner_advantages(lh_learner_adv_kind kind, const float *rewards, const uint64_t *group_keys, size_t n,
                  lh_learner_adv_baseline *baseline, float *adv, lh_errbuf *err) {
  if (kind != LH_LEARNER_ADV_GRPO && kind != LH_LEARNER_ADV_RLOO && kind != LH_LEARNER_ADV_REINFORCE)
    return lh_errbuf_set(err, LH_ELEARNER_ADV_KIND,
                         "advantages: estimator %d is not grpo, rloo or reinforce", (int)kind);
  if (n == 0) return 0;
  if (!rewards || !adv) return lh_errbuf_set(err, LH_EINVAL, "advantages: NULL rewards or output");
  for (size_t i = 0; i < n; i++)
    if (!isfinite(rewards[i]))
      return lh_errbuf_set(err, LH_ELEARNER_ADV_INPUT, "advantages: reward[%zu]=%g is not finite", i,
                           (double)rewards[i]);
  if (kind == LH_LEARNER_ADV_REINFORCE) {
    if (!baseline)
      return lh_errbuf_set(err, LH_EINVAL, "advantages: reinforce needs its running-mean baseline");
    if (!(baseline->decay >= 0.0 && baseline->decay < 1.0) || !isfinite(baseline->mean))
      return lh_errbuf_set(err, LH_ELEARNER_ADV_STATE,
                           "advantages: baseline decay=%g mean=%g (decay in [0, 1), mean finite)",
                           baseline->decay, baseline->mean);
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += rewards[i];
    double batch_mean = s / (double)n;
    double b = baseline->batches ? baseline->mean : batch_mean;
    for (size_t i = 0; i < n; i++) adv[i] = (float)((double)rewards[i] - b);
    baseline->mean = baseline->batches ? baseline->decay * baseline->mean + (1.0 - baseline->decay) * batch_mean
                                       : batch_mean;
    baseline->batches++;
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    double sum, ss;
    size_t c;
    group_sums(rewards, group_keys, n, i, &sum, &ss, &c);
    double r = rewards[i];
    if (kind == LH_LEARNER_ADV_GRPO) {
      double mean = sum / (double)c, std = sqrt(ss / (double)c);
      adv[i] = (float)((r - mean) / (std + LH_LEARNER_ADV_GRPO_EPS));
    } else {
      adv[i] = c > 1 ? (float)(r - (sum - r) / (double)(c - 1)) : 0.0f;
    }
  }
  return 0;
}

double lh_learner_episode_scale(size_t sampled, double N, double E) {
  return sampled && E > 0 ? N / (E * (double)sampled) : 0.0;
}
