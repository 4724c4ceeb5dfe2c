/* learner: the PPO-clip loss with truncated importance weights, its
 * gradient with respect to the learner's log-probabilities, and the step's
 * figures. The float and double entry points share one per-token rule and
 * one loop, written once as a macro over the element type. */
#include <math.h>
#include <string.h>

#include "learner/internal.h"

#define LOG_RATIO_CLAMP 80.0

int lh_learner_ppo_params_check(const lh_learner_ppo_params *p, lh_errbuf *err) {
  if (!p) return lh_errbuf_set(err, LH_EINVAL, "ppo: NULL params");
  if (!(p->clip_eps > 0.0 && p->clip_eps < 1.0))
    return lh_errbuf_set(err, LH_ELEARNER_PPO_PARAMS, "ppo: clip_eps=%g must be in (0, 1)", p->clip_eps);
  if (!(p->is_cap >= 1.0))
    return lh_errbuf_set(err, LH_ELEARNER_PPO_PARAMS, "ppo: is_cap=%g must be >= 1 (inf: no truncation)",
                         p->is_cap);
  if (!(p->entropy_coef >= 0.0) || !isfinite(p->entropy_coef))
    return lh_errbuf_set(err, LH_ELEARNER_PPO_PARAMS, "ppo: entropy_coef=%g must be finite and >= 0",
                         p->entropy_coef);
  return 0;
}

/* One sampled token: returns term_t and sets *g = dterm_t/dlogp_t. */
static double token_term(const lh_learner_ppo_params *p, double logp, double blogp, double A, double *ratio,
                         double *g, int *cut, int *truncated) {
  double lr = logp - blogp;
  if (lr > LOG_RATIO_CLAMP) lr = LOG_RATIO_CLAMP;
  if (lr < -LOG_RATIO_CLAMP) lr = -LOG_RATIO_CLAMP;
  double r = exp(lr);
  double lo = 1.0 - p->clip_eps, hi = 1.0 + p->clip_eps;
  double a = (r < p->is_cap ? r : p->is_cap) * A;
  double da = r < p->is_cap ? r * A : 0.0;
  double c = r < lo ? lo : (r > hi ? hi : r);
  double b = c * A;
  double db = (r >= lo && r <= hi) ? r * A : 0.0;
  *ratio = r;
  *truncated = r > p->is_cap;
  if (a <= b) {
    *g = da;
    *cut = A != 0.0 && da == 0.0;
    return a;
  }
  *g = db;
  *cut = A != 0.0 && db == 0.0;
  return b;
}

#define PPO_LOSS_BODY(T)                                                                           \
  int rc = lh_learner_ppo_params_check(p, err);                                                            \
  if (rc < 0) return rc;                                                                           \
  if (!in) return lh_errbuf_set(err, LH_EINVAL, "ppo: NULL input");                                \
  size_t n = in->n;                                                                                \
  if (n && (!in->logp || !in->behavior_logp || !in->advantage))                                    \
    return lh_errbuf_set(err, LH_ELEARNER_PPO_INPUT, "ppo: %zu tokens but logp, behavior_logp or " \
                         "advantage is NULL", n);                                                  \
  if (p->entropy_coef > 0.0 && n && !in->entropy)                                                  \
    return lh_errbuf_set(err, LH_ELEARNER_PPO_INPUT,                                               \
                         "ppo: entropy_coef=%g but no per-token entropy given", p->entropy_coef);  \
  if (!(in->normaliser >= 0.0) || !isfinite(in->normaliser))                                       \
    return lh_errbuf_set(err, LH_ELEARNER_PPO_INPUT, "ppo: normaliser=%g must be finite and >= 0", \
                         in->normaliser);                                                          \
  size_t tokens = 0;                                                                               \
  for (size_t t = 0; t < n; t++) {                                                                 \
    if (in->loss_mask && in->loss_mask[t] == 0) continue;                                          \
    tokens++;                                                                                      \
    double v[4] = {in->logp[t], in->behavior_logp[t], in->advantage[t],                            \
                   in->entropy ? (double)in->entropy[t] : 0.0};                                    \
    static const char *names[4] = {"logp", "behavior_logp", "advantage", "entropy"};               \
    for (int k = 0; k < 4; k++)                                                                    \
      if (!isfinite(v[k]))                                                                         \
        return lh_errbuf_set(err, LH_ELEARNER_PPO_INPUT, "ppo: %s[%zu]=%g is not finite", names[k], \
                             t, v[k]);                                                             \
  }                                                                                                \
  if (in->normaliser > 0.0 && in->normaliser < (double)tokens)                                     \
    return lh_errbuf_set(err, LH_ELEARNER_PPO_INPUT,                                               \
                         "ppo: normaliser=%g is below the %zu sampled tokens of this call",        \
                         in->normaliser, tokens);                                                  \
  double N = in->normaliser > 0.0 ? in->normaliser : (double)(tokens ? tokens : 1);                \
  double surrogate = 0.0, ent = 0.0, ratio_sum = 0.0, diff_sum = 0.0, diff_max = 0.0;              \
  double kl_sum = 0.0, ratio_max = 0.0;                                                            \
  size_t cut_n = 0, trunc_n = 0, cur_n = 0;                                                        \
  for (size_t t = 0; t < n; t++) {                                                                 \
    if (in->loss_mask && in->loss_mask[t] == 0) {                                                  \
      if (dlogp) dlogp[t] = 0;                                                                     \
      continue;                                                                                    \
    }                                                                                              \
    double r, g;                                                                                   \
    int cut, truncated;                                                                            \
    surrogate += token_term(p, in->logp[t], in->behavior_logp[t], in->advantage[t], &r, &g, &cut,  \
                            &truncated);                                                           \
    if (dlogp) dlogp[t] = (T)(-g / N);                                                             \
    cut_n += (size_t)cut;                                                                          \
    trunc_n += (size_t)truncated;                                                                  \
    ratio_sum += r;                                                                                \
    if (r > ratio_max) ratio_max = r;                                                              \
    kl_sum += (r - 1.0) - log(r);                                                                  \
    if (in->entropy) ent += in->entropy[t];                                                        \
    if (in->version && in->version[t] == in->current_version) {                                    \
      double d = fabs((double)in->logp[t] - (double)in->behavior_logp[t]);                         \
      diff_sum += d;                                                                               \
      if (d > diff_max) diff_max = d;                                                              \
      cur_n++;                                                                                     \
    }                                                                                              \
  }                                                                                                \
  double policy_loss = -surrogate / N, total = policy_loss - p->entropy_coef * ent / N;           \
  if (loss) *loss = total;                                                                         \
  if (stats) {                                                                                     \
    memset(stats, 0, sizeof *stats);                                                               \
    stats->loss = total;                                                                           \
    stats->policy_loss = policy_loss;                                                              \
    stats->dloss_dentropy = -p->entropy_coef / N;                                                  \
    stats->tokens = tokens;                                                                        \
    if (tokens) {                                                                                  \
      stats->entropy_mean = ent / (double)tokens;                                                  \
      stats->clip_frac = (double)cut_n / (double)tokens;                                           \
      stats->trunc_frac = (double)trunc_n / (double)tokens;                                        \
      stats->ratio_mean = ratio_sum / (double)tokens;                                              \
      stats->approx_kl = kl_sum / (double)tokens;                                                  \
    }                                                                                              \
    stats->ratio_max = ratio_max;                                                                  \
    stats->current_tokens = cur_n;                                                                 \
    if (cur_n) stats->logp_diff_mean = diff_sum / (double)cur_n;                                   \
    stats->logp_diff_max = diff_max;                                                               \
  }                                                                                                \
  return 0;

int lh_learner_ppo_loss(const lh_learner_ppo_params *p, const lh_learner_ppo_input *in, double *loss, float *dlogp,
                lh_learner_ppo_stats *stats, lh_errbuf *err) {
  PPO_LOSS_BODY(float)
}

int lh_learner_ppo_loss_f64(const lh_learner_ppo_params *p, const lh_learner_ppo_input_f64 *in, double *loss, double *dlogp,
                    lh_learner_ppo_stats *stats, lh_errbuf *err) {
  PPO_LOSS_BODY(double)
}
