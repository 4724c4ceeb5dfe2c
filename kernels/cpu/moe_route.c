/* MoE routing: sigmoid affinities, top-k over affinity + balancing bias
 * (ties to the lower expert index), gates normalised over the chosen
 * experts. The bias picks experts but carries no gradient. */
#include "kernels/cpu/real.h"

int LH_CPU(moe_route_forward)(void *ctx, int32_t *expert_idx, lh_real *gates,
                              lh_real *affinity, const lh_real *logits, const lh_real *bias,
                              int N, int E, int k, int replay) {
  (void)ctx;
  if (N < 0 || E <= 0 || k <= 0 || k > E) return LH_EKERNELS_SHAPE;
  if (N == 0) return LH_OK;
  if (!expert_idx || !gates || !affinity || !logits) return LH_EKERNELS_NULL_ARG;
  for (int n = 0; n < N; n++) {
    const lh_real *z = logits + (size_t)n * E;
    lh_real *s = affinity + (size_t)n * E;
    int32_t *idx = expert_idx + (size_t)n * k;
    for (int e = 0; e < E; e++) s[e] = lh_sigmoid(z[e]);
    if (replay) {
      for (int j = 0; j < k; j++) {
        if (idx[j] < 0 || idx[j] >= E) return LH_EKERNELS_INDEX;
        for (int i = 0; i < j; i++)
          if (idx[i] == idx[j]) return LH_EKERNELS_INDEX;
      }
    } else {
      /* Selection of the k best by repeated scans: k is small (2 in the
       * demo). Strict > keeps the lower index on ties. */
      for (int j = 0; j < k; j++) {
        int best = -1;
        lh_real best_v = 0;
        for (int e = 0; e < E; e++) {
          int taken = 0;
          for (int i = 0; i < j; i++) taken |= idx[i] == e;
          if (taken) continue;
          lh_real val = s[e] + (bias ? bias[e] : 0);
          if (best < 0 || val > best_v) best = e, best_v = val;
        }
        idx[j] = best;
      }
    }
    lh_real sum = 0;
    for (int j = 0; j < k; j++) sum += s[idx[j]];
    for (int j = 0; j < k; j++) gates[(size_t)n * k + j] = s[idx[j]] / sum;
  }
  return LH_OK;
}

/* g_j = s_j / sum: ds_j = (dg_j - sum_i dg_i g_i) / sum for chosen j, then
 * dlogit = ds * s (1 - s). */
int LH_CPU(moe_route_backward)(void *ctx, lh_real *dlogits, const lh_real *dgates,
                               const lh_real *affinity, const int32_t *expert_idx, int N,
                               int E, int k) {
  (void)ctx;
  if (N < 0 || E <= 0 || k <= 0 || k > E) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dlogits) return LH_OK;
  if (!dgates || !affinity || !expert_idx) return LH_EKERNELS_NULL_ARG;
  for (int n = 0; n < N; n++) {
    const lh_real *s = affinity + (size_t)n * E, *dg = dgates + (size_t)n * k;
    const int32_t *idx = expert_idx + (size_t)n * k;
    for (int j = 0; j < k; j++)
      if (idx[j] < 0 || idx[j] >= E) return LH_EKERNELS_INDEX;
    lh_real sum = 0, dot = 0;
    for (int j = 0; j < k; j++) sum += s[idx[j]];
    for (int j = 0; j < k; j++) dot += dg[j] * s[idx[j]] / sum;
    for (int j = 0; j < k; j++) {
      lh_real se = s[idx[j]];
      dlogits[(size_t)n * E + idx[j]] += (dg[j] - dot) / sum * se * (1 - se);
    }
  }
  return LH_OK;
}

/* aux = weight * E * sum_e load_e * mean_n p[n][e], p = s / sum_e s. */
int LH_CPU(moe_aux_loss_forward)(void *ctx, double *loss, const lh_real *affinity,
                                 const lh_real *load, int N, int E, float weight) {
  (void)ctx;
  if (N < 0 || E <= 0) return LH_EKERNELS_SHAPE;
  if (!loss || (N && (!affinity || !load))) return LH_EKERNELS_NULL_ARG;
  double acc = 0;
  for (int n = 0; n < N; n++) {
    const lh_real *s = affinity + (size_t)n * E;
    double sum = 0, dot = 0;
    for (int e = 0; e < E; e++) sum += s[e], dot += (double)load[e] * s[e];
    acc += dot / sum;
  }
  *loss = N ? (double)weight * E * acc / N : 0;
  return LH_OK;
}

/* With c_e = weight E load_e / N the gradient of p[n][e]:
 * ds_j = (c_j - sum_e c_e p_e) / sum_e s_e, dlogit_j = ds_j s_j (1 - s_j). */
int LH_CPU(moe_aux_loss_backward)(void *ctx, lh_real *dlogits, float dloss,
                                  const lh_real *affinity, const lh_real *load, int N, int E,
                                  float weight) {
  (void)ctx;
  if (N < 0 || E <= 0) return LH_EKERNELS_SHAPE;
  if (N == 0 || !dlogits) return LH_OK;
  if (!affinity || !load) return LH_EKERNELS_NULL_ARG;
  lh_real scale = (lh_real)dloss * (lh_real)weight * (lh_real)E / (lh_real)N;
  for (int n = 0; n < N; n++) {
    const lh_real *s = affinity + (size_t)n * E;
    lh_real sum = 0, cp = 0;
    for (int e = 0; e < E; e++) sum += s[e];
    for (int e = 0; e < E; e++) cp += scale * load[e] * s[e] / sum;
    for (int e = 0; e < E; e++)
      dlogits[(size_t)n * E + e] += (scale * load[e] - cp) / sum * s[e] * (1 - s[e]);
  }
  return LH_OK;
}
